//! What the operator's integration tests share: an in-memory cluster simulator with the
//! terrace CRDs, and polling until a condition holds.
#![allow(dead_code)] // each test file uses its own subset

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use terrace_crds::{Organization, OrganizationSpec, Workspace, WorkspaceSpec};
use terrace_simulator::{SimConfig, Simulator};
use tokio::sync::oneshot;

pub type E = Box<dyn std::error::Error>;
pub type R = Result<(), E>;

/// How long [`eventually`] waits.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// An in-memory simulator (`run_pods`: whether its node runs containers) with the CRDs.
pub async fn cluster(run_pods: bool) -> Result<(Simulator, Client), E> {
    let sim = Simulator::open(SimConfig {
        data_dir: None,
        run_pods,
        ..Default::default()
    })
    .await?;
    let client = sim.client();
    install_crds(&client).await?;
    Ok((sim, client))
}

/// Applies every terrace CRD (server-side apply, as `terrace dev` and the chart do).
pub async fn install_crds(client: &Client) -> R {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("terrace-tests").force();
    for crd in terrace_crds::crdgen::all_crds() {
        crds.patch(&crd.name_any(), &pp, &Patch::Apply(&crd))
            .await?;
    }
    Ok(())
}

/// Workspace object `object` named `name` (in `project`), as a user would write it.
pub fn workspace(object: &str, name: &str, project: Option<&str>) -> Workspace {
    Workspace {
        metadata: ObjectMeta {
            name: Some(object.into()),
            ..Default::default()
        },
        spec: WorkspaceSpec {
            name: name.into(),
            project: project.map(str::to_owned),
            ..WorkspaceSpec::default_for_create()
        },
        status: None,
    }
}

/// A client of the chart's operator ServiceAccount (`terrace-system/terrace-operator`)
/// bound cluster-wide by exactly the rules of the chart's ClusterRole
/// (charts/terrace/templates/rbac-operator.yaml): the operator started with it can do
/// only what a Helm install lets it, so a right the chart lacks fails the test.
pub async fn chart_operator(sim: &Simulator) -> Result<Client, E> {
    Ok(sim
        .service_account_client(
            "terrace-system",
            "terrace-operator",
            chart_operator_rules()?,
        )
        .await?)
}

/// The rules of the chart's operator ClusterRole.
pub fn chart_operator_rules() -> Result<Vec<k8s_openapi::api::rbac::v1::PolicyRule>, E> {
    let template = include_str!("../../../charts/terrace/templates/rbac-operator.yaml");
    Ok(terrace_simulator::identities::chart_cluster_role_rules(
        template,
    )?)
}

/// Starts the operator with `settings` under the chart's RBAC ([`chart_operator`]); it
/// stops when the returned sender is dropped.
pub async fn operator(
    sim: &Simulator,
    settings: terrace_operator::Settings,
) -> Result<oneshot::Sender<()>, E> {
    Ok(operator_as(&chart_operator(sim).await?, settings))
}

/// Starts the operator with `client`'s identity; it stops when the sender is dropped.
pub fn operator_as(client: &Client, settings: terrace_operator::Settings) -> oneshot::Sender<()> {
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(terrace_operator::run(
        client.clone(),
        settings,
        async move {
            let _ = rx.await;
        },
    ));
    tx
}

/// Creates Organization `name` (default spec) and waits for the operator to create its
/// namespace.
pub async fn organization(client: &Client, name: &str) -> R {
    Api::<Organization>::all(client.clone())
        .create(
            &PostParams::default(),
            &Organization {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: OrganizationSpec::default(),
                status: None,
            },
        )
        .await?;
    let nss: Api<Namespace> = Api::all(client.clone());
    eventually("the organization's namespace", || async {
        nss.get_opt(name).await.ok().flatten()
    })
    .await?;
    Ok(())
}

/// Polls `f` until it returns Some, failing after [`TIMEOUT`].
pub async fn eventually<T, F, Fut>(what: &str, f: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, TIMEOUT, f).await
}

/// Polls `f` until it returns Some, failing after `limit`.
pub async fn eventually_within<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
