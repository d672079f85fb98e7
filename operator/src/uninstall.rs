//! What `helm uninstall` runs first (`terrace uninstall`, the chart's pre-delete hook
//! Job, as the operator's ServiceAccount): nothing of terrace may be lost or stuck when
//! the release goes.
//!
//! 1. Applies in flight finish: it waits (at most `--wait-for-applies`) until no run is
//!    `applying`, while the operator and API server still run, so each apply stores its
//!    state. (An apply past the wait keeps its intermediate state snapshots.)
//! 2. The operator stops while its RBAC still exists: its Deployment is scaled to zero and
//!    the hook waits until it released its lease (a reinstall then elects a leader at
//!    once, instead of waiting for the lease to expire).
//! 3. No Pod keeps a finalizer of terrace's: the run and test Pods' finalizers (which only
//!    the operator removes) are removed, so deleting an organization's namespace later is
//!    not stuck on them.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use terrace_crds::Run;
use terrace_crds::run::RunState;

use crate::Error;

/// What `terrace uninstall` is told.
#[derive(Clone, Debug, clap::Args)]
pub struct UninstallArgs {
    /// The namespace terrace is installed in (the operator's lease is there).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,
    /// The operator's Deployment, scaled to zero once the applies ended.
    #[arg(long)]
    pub operator_deployment: String,
    /// Longest to wait for runs that are applying (e.g. 4m).
    #[arg(long, default_value = "4m", value_parser = crate::settings::parse_delay)]
    pub wait_for_applies: Duration,
}

/// How often the hook looks again.
const POLL: Duration = Duration::from_secs(2);

/// Runs the three steps (see the module docs), saying each on stdout.
pub async fn prepare(client: kube::Client, args: &UninstallArgs) -> Result<(), Error> {
    let runs: Api<Run> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + args.wait_for_applies;
    loop {
        let applying: Vec<String> = runs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|r| {
                RunState::of(r.status.as_ref().and_then(|s| s.status.as_deref()))
                    == Ok(RunState::Applying)
            })
            .map(|r| format!("{}/{}", r.namespace().unwrap_or_default(), r.name_any()))
            .collect();
        if applying.is_empty() {
            println!("no run is applying");
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            println!(
                "still applying after {:?} (their intermediate state is kept): {}",
                args.wait_for_applies,
                applying.join(", ")
            );
            break;
        }
        println!(
            "waiting for {} applying run(s): {}",
            applying.len(),
            applying.join(", ")
        );
        tokio::time::sleep(POLL).await;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &args.namespace);
    deployments
        .patch_scale(
            &args.operator_deployment,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    println!("the operator is scaled to zero");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &args.namespace);
    for _ in 0..60 {
        let holder = leases
            .get_opt(crate::leader::LEASE_NAME)
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty());
        if holder.is_none() {
            println!("the operator's lease is released");
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let ours = ListParams::default().labels(&format!(
        "{}={}",
        terrace_crds::constants::LABEL_MANAGED_BY,
        terrace_crds::constants::MANAGED_BY
    ));
    let finalizers = [crate::run::pod::FINALIZER, crate::testpod::FINALIZER];
    let mut released = 0;
    for pod in pods.list(&ours).await?.items {
        if !pod
            .finalizers()
            .iter()
            .any(|f| finalizers.contains(&f.as_str()))
        {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        // A Pod carries one of them (a run's or a test run's).
        if let Some(f) = finalizers
            .iter()
            .find(|f| pod.finalizers().iter().any(|p| p == *f))
        {
            crate::finalizers::remove(&api, &pod, f).await?;
            released += 1;
        }
    }
    println!("{released} run and test Pod(s) let go of");
    Ok(())
}
