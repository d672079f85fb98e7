//! The status of policy sets (docs/policies.md): each policy's Rego is read (inline or
//! from its ConfigMap) and compiled, and its query checked, so `kubectl get policysets`
//! shows `Ready=False` with the compiler's words for a set that cannot be evaluated. Sets
//! whose Rego lives in ConfigMaps are looked at again every few minutes (a ConfigMap edit
//! does not wake the set).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use terrace_crds::constants::FIELD_MANAGER_OPERATOR;
use terrace_crds::{PolicySet, PolicySetPolicy};

use crate::conditions::{Outcome, kstatus_conditions, same_conditions};
use crate::watch::Feed;
use crate::{Context, Error};

/// Condition reason of a set with a policy that cannot be evaluated.
pub const REASON_INVALID_POLICY: &str = "InvalidPolicy";
/// How often a set with Rego in ConfigMaps is compiled again.
const CONFIGMAP_RECHECK: Duration = Duration::from_secs(300);

/// The controller, run until `shutdown` resolves.
pub fn controller<S>(ctx: Arc<Context>, shutdown: S) -> impl Future<Output = ()> + Send + 'static
where
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let feed = Feed::<PolicySet>::new(&ctx.client, (), watcher::Config::default());
    let store = feed.store();
    let controller =
        Controller::for_stream(feed.into_stream(), store).graceful_shutdown_on(shutdown);
    crate::metrics::run(
        controller,
        crate::metrics::CONTROLLER_POLICY_SETS,
        reconcile,
        error_policy,
        ctx,
    )
}

fn error_policy(s: Arc<PolicySet>, err: &Error, _ctx: Arc<Context>) -> Action {
    err.log_and_retry("policy set", &s.name_any(), Duration::from_secs(10))
}

/// The Rego of `policy` (inline, or its ConfigMap key), or why it cannot be read.
pub async fn rego_of(
    client: &kube::Client,
    ns: &str,
    policy: &PolicySetPolicy,
) -> Result<String, String> {
    if let Some(r) = &policy.rego {
        return Ok(r.clone());
    }
    let Some(from) = &policy.rego_from else {
        return Err("the policy has neither rego nor regoFrom".into());
    };
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&from.name)
        .await
        .map_err(|e| format!("reading ConfigMap {}: {e}", from.name))?
        .ok_or_else(|| format!("ConfigMap {} not found", from.name))?;
    cm.data
        .and_then(|mut d| d.remove(&from.key))
        .ok_or_else(|| format!("ConfigMap {} has no key {}", from.name, from.key))
}

async fn reconcile(set: Arc<PolicySet>, ctx: Arc<Context>) -> Result<Action, Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = set.namespace().unwrap_or_default();
    let mut problems = Vec::new();
    for p in &set.spec.policies {
        let checked = match rego_of(&ctx.client, &ns, p).await {
            Ok(rego) => terrace_crds::policy::check_query(&p.query).and_then(|()| {
                terrace_crds::policy::compile(&p.name, &rego)
                    .map_err(|e| format!("does not compile: {}", e.trim()))
            }),
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            problems.push(format!("policy {}: {e}", p.name));
        }
    }
    let outcome = if problems.is_empty() {
        Outcome::Ready {
            message: format!("{} policies compiled", set.spec.policies.len()),
        }
    } else {
        Outcome::stalled(REASON_INVALID_POLICY, problems.join("; "))
    };
    let st = set.status.clone().unwrap_or_default();
    let generation = set.metadata.generation;
    let conditions = kstatus_conditions(&st.conditions, &outcome, generation, Timestamp::now());
    let count = set.spec.policies.len() as i64;
    if !same_conditions(&st.conditions, &conditions)
        || st.policies != Some(count)
        || st.observed_generation != generation
    {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
            ..Default::default()
        };
        let patch = json!({"status": {
            "policies": count,
            "observedGeneration": generation,
            "conditions": conditions,
        }});
        Api::<PolicySet>::namespaced(ctx.client.clone(), &ns)
            .patch_status(&set.name_any(), &pp, &Patch::Merge(&patch))
            .await?;
    }
    if set.spec.policies.iter().any(|p| p.rego_from.is_some()) {
        Ok(Action::requeue(CONFIGMAP_RECHECK))
    } else {
        Ok(Action::await_change())
    }
}
