//! The status of registry module versions (docs/registry.md): `status`, `error`,
//! `testRun` and `testStatus` of each ModuleVersion, from its archive's configuration
//! version and that configuration version's test runs ([`version_facts`]), so `kubectl
//! get moduleversions` shows them. A small controller over the catalog's ModuleVersion
//! feed, woken by changes of configuration versions and test runs.

use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;
use terrace_crds::constants::FIELD_MANAGER_OPERATOR;
use terrace_crds::ids::IdKind;
use terrace_crds::registry::version_facts;
use terrace_crds::{ConfigurationVersion, ModuleVersion, TestRun};

use crate::catalog::{Catalog, WithStores, typed};
use crate::{Context, Error, Running, Shutdown};

/// The controller, run until `shutdown` resolves (call before the catalog runs).
pub fn controller(
    ctx: Arc<Context>,
    catalog: &mut Catalog,
    shutdown: Shutdown,
) -> Result<Running, Error> {
    let stores = catalog.stores();
    let fed = catalog.controller(IdKind::ModuleVersion)?;
    let cvs = catalog.subscribe(IdKind::ConfigurationVersion);
    let runs = catalog.subscribe(IdKind::TestRun);
    let (resource, by_cv, by_run) = (fed.resource, fed.store.clone(), fed.store);
    let (res_cv, res_run) = (resource.clone(), resource.clone());
    let controller = fed
        .controller
        .watches_stream_with(
            cvs,
            move |cv: DynamicObject| {
                let name = cv.name_any();
                versions_using(&by_cv, &res_cv, cv.namespace().as_deref(), &name)
            },
            resource.clone(),
        )
        .watches_stream_with(
            runs,
            move |run: DynamicObject| {
                let cv = run.data["spec"]["configurationVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                versions_using(&by_run, &res_run, run.namespace().as_deref(), &cv)
            },
            resource,
        );
    let ctx = Arc::new(WithStores { base: ctx, stores });
    Ok(crate::metrics::MODULE_VERSIONS.running(controller, shutdown, reconcile, ctx))
}

/// The versions of namespace `ns` whose archive is configuration version `cv`.
fn versions_using(
    versions: &Store<DynamicObject>,
    resource: &ApiResource,
    ns: Option<&str>,
    cv: &str,
) -> Vec<ObjectRef<DynamicObject>> {
    versions
        .state()
        .into_iter()
        .filter(|v| v.namespace().as_deref() == ns)
        .filter(|v| v.data["spec"]["configurationVersion"].as_str() == Some(cv))
        .map(|v| ObjectRef::from_obj_with(v.as_ref(), resource.clone()))
        .collect()
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<WithStores>) -> Result<Action, Error> {
    let Some(v) = typed::<ModuleVersion>(&obj) else {
        return Ok(Action::await_change());
    };
    if v.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = v.namespace().unwrap_or_default();
    let cv_name = v.spec.configuration_version.clone().unwrap_or_default();
    let cv = ctx
        .stores
        .get(IdKind::ConfigurationVersion, &ns, &cv_name)
        .and_then(|o| typed::<ConfigurationVersion>(&o));
    let (_, runs) = ctx.stores.store(IdKind::TestRun)?;
    let runs: Vec<TestRun> = runs
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .filter(|r| r.data["spec"]["configurationVersion"].as_str() == Some(cv_name.as_str()))
        .filter_map(|r| typed::<TestRun>(&r))
        .collect();
    let f = version_facts(cv.as_ref(), runs.iter());
    let st = v.status.clone().unwrap_or_default();
    let same = st.status.as_deref() == Some(f.state)
        && st.error == f.error
        && st.test_run == f.test_run
        && st.test_status.as_deref() == f.tests;
    if !same {
        let api: Api<ModuleVersion> = Api::namespaced(ctx.base.client.clone(), &ns);
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
            ..Default::default()
        };
        let patch = json!({"status": {
            "status": f.state,
            "error": f.error,
            "testRun": f.test_run,
            "testStatus": f.tests,
        }});
        api.patch_status(&v.name_any(), &pp, &Patch::Merge(&patch))
            .await?;
    }
    Ok(Action::await_change())
}
