//! The status of policy sets (docs/policies.md): each policy's Rego is read (inline or
//! from its ConfigMap) and compiled, and its query checked, so `kubectl get policysets`
//! shows `Ready=False` with the compiler's words for a set that cannot be evaluated. Sets
//! whose Rego lives in ConfigMaps are looked at again every few minutes (a ConfigMap edit
//! does not wake the set).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{FIELD_MANAGER_OPERATOR, LABEL_ID};
use terrace_crds::ids::IdKind;
use terrace_crds::{Policy, PolicySet, PolicySetPolicy};

use crate::catalog::{Catalog, CatalogStores, WithStores, typed};
use crate::conditions::{Outcome, kstatus_conditions, same_conditions};
use crate::{Context, Error, Running, Shutdown};

/// Condition reason of a set with a policy that cannot be evaluated.
pub const REASON_INVALID_POLICY: &str = "InvalidPolicy";
/// How often a set with Rego in ConfigMaps is compiled again.
const CONFIGMAP_RECHECK: Duration = Duration::from_secs(300);

/// The controller, run until `shutdown` resolves (call before the catalog runs): over the
/// catalog's PolicySet feed, woken by changes of the Policy objects a set references.
pub fn controller(
    ctx: Arc<Context>,
    catalog: &mut Catalog,
    shutdown: Shutdown,
) -> Result<Running, Error> {
    let stores = catalog.stores();
    let fed = catalog.controller(IdKind::PolicySet)?;
    let policies = catalog.subscribe(IdKind::Policy);
    let (by_policy, resource) = (fed.store, fed.resource);
    let res_policy = resource.clone();
    let controller = fed.controller.watches_stream_with(
        policies,
        move |p: DynamicObject| {
            let ns = p.namespace();
            let object = p.name_any();
            let id = p.labels().get(LABEL_ID).cloned();
            by_policy
                .state()
                .into_iter()
                .filter(|s| s.namespace() == ns)
                .filter(|s| {
                    typed::<PolicySet>(s).is_some_and(|s| s.references(&object, id.as_deref()))
                })
                .map(|s| ObjectRef::from_obj_with(s.as_ref(), res_policy.clone()))
                .collect::<Vec<_>>()
        },
        resource,
    );
    let ctx = Arc::new(WithStores { base: ctx, stores });
    Ok(crate::metrics::POLICY_SETS.running(controller, shutdown, reconcile, ctx))
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

/// The policies set `set` checks: its own, then the Policy objects it references (by
/// object name or ID) from the catalog's cache; a reference to nothing is a problem.
pub fn policies_of(stores: &CatalogStores, set: &PolicySet) -> (Vec<PolicySetPolicy>, Vec<String>) {
    let ns = set.namespace().unwrap_or_default();
    let mut out = set.spec.policies.clone();
    let mut missing = Vec::new();
    for r in &set.spec.policy_refs {
        let found = stores.get(IdKind::Policy, &ns, r).or_else(|| {
            stores
                .in_namespace(IdKind::Policy, &ns)
                .into_iter()
                .find(|p| p.labels().get(LABEL_ID) == Some(r))
        });
        match found.as_deref().and_then(typed::<Policy>) {
            Some(p) => out.push(PolicySetPolicy::from(&p.spec)),
            None => missing.push(format!("policy {r} not found")),
        }
    }
    (out, missing)
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<WithStores>) -> Result<Action, Error> {
    let Some(set) = typed::<PolicySet>(&obj) else {
        return Ok(Action::await_change());
    };
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = set.namespace().unwrap_or_default();
    let client = &ctx.base.client;
    let (policies, mut problems) = policies_of(&ctx.stores, &set);
    for p in &policies {
        let checked = match p.rego.as_deref() {
            None if p.rego_from.is_none() => Err("has no Rego yet (upload it)".to_owned()),
            _ => rego_of(client, &ns, p).await,
        };
        let checked = match checked {
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
            message: format!("{} policies compiled", policies.len()),
        }
    } else {
        Outcome::stalled(REASON_INVALID_POLICY, problems.join("; "))
    };
    let st = set.status.clone().unwrap_or_default();
    let generation = set.metadata.generation;
    let conditions = kstatus_conditions(&st.conditions, &outcome, generation, Timestamp::now());
    let count = policies.len() as i64;
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
        Api::<PolicySet>::namespaced(client.clone(), &ns)
            .patch_status(&set.name_any(), &pp, &Patch::Merge(&patch))
            .await?;
    }
    if policies.iter().any(|p| p.rego_from.is_some()) {
        Ok(Action::requeue(CONFIGMAP_RECHECK))
    } else {
        Ok(Action::await_change())
    }
}
