//! The automatic test run of an upload (SPEC.md A3), created here and not by the API
//! server, so that clients creating the run themselves right after uploading (the
//! terraform CLI, go-tfe) get exactly one run (rules and marker values:
//! [`terrace_crds::testrun::automatic`]).
//!
//! A small controller over the catalog's ConfigurationVersion feed and cache. One
//! reconcile is observe (the configuration version, the TestRuns naming it from the
//! TestRun controller's cache) → [`decide`] (pure, in `crds`) → act:
//! - inside the grace period (`--auto-test-run-delay` after `status.uploadedAt`): look
//!   again when it ends;
//! - claim: `due` → `claimed` with a resourceVersion precondition, re-read and decided
//!   again after a conflict, so of the operator and concurrent explicit creates (which
//!   move `due` → `superseded` the same way) exactly one wins;
//! - create the TestRun [`run_name`] (deterministic: a retry after a crash, or a 409
//!   AlreadyExists, finds the same object), owned by the module, then mark `created`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{
    API_VERSION, FIELD_MANAGER_OPERATOR, LABEL_ID, LABEL_MODULE, LABEL_ORGANIZATION,
};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::testrun::automatic::{
    ANNOTATION_AUTOMATIC_TEST_RUN, Marker, Observed, Step, decide, run_name, run_spec,
};
use terrace_crds::{ConfigurationVersion, TestRun};

use crate::catalog::{Catalog, CatalogStores, typed};
use crate::identity::Organizations;
use crate::{Context, Error, Running, Shutdown, metrics};

/// Attempts of a guarded marker write that keeps meeting concurrent writers.
const MARKER_ATTEMPTS: u32 = 10;

/// State of the automatic test run controller.
struct AutoContext {
    base: Arc<Context>,
    orgs: Organizations,
    catalog: CatalogStores,
    runs: Store<TestRun>,
}

/// The controller, run until `shutdown` resolves. It subscribes to the catalog's
/// configuration versions, so call it before the catalog runs.
pub fn controller(
    ctx: Arc<Context>,
    orgs: Organizations,
    catalog: &mut Catalog,
    runs: Store<TestRun>,
    shutdown: Shutdown,
) -> Result<Running, Error> {
    let fed = catalog.controller(IdKind::ConfigurationVersion)?;
    let actx = Arc::new(AutoContext {
        base: ctx,
        orgs,
        catalog: catalog.stores(),
        runs,
    });
    Ok(metrics::AUTOMATIC_TEST_RUN.running(fed.controller, shutdown, reconcile, actx))
}

fn marker_of(cv: &ConfigurationVersion) -> Option<&str> {
    cv.annotations()
        .get(ANNOTATION_AUTOMATIC_TEST_RUN)
        .map(String::as_str)
}

/// What [`decide`] needs, from the configuration version and the TestRun cache.
fn observe<'a>(
    cv: &'a ConfigurationVersion,
    runs: &Store<TestRun>,
    now: Timestamp,
) -> Observed<'a> {
    let ns = cv.namespace();
    let name = cv.name_any();
    let auto = run_name(&name);
    let (mut naming, mut exists) = (0, false);
    for r in runs.state() {
        if r.namespace() != ns {
            continue;
        }
        exists |= r.name_any() == auto;
        if r.spec.configuration_version == name {
            naming += 1;
        }
    }
    let since_upload = cv
        .status
        .as_ref()
        .and_then(|s| s.uploaded_at.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| Duration::try_from(now.duration_since(t)).unwrap_or(Duration::ZERO));
    Observed {
        marker: marker_of(cv),
        state: cv.state().ok(),
        auto_queue_runs: cv.spec.auto_queue_runs,
        has_module: cv.spec.module.is_some(),
        since_upload,
        runs: naming,
        automatic_run_exists: exists,
    }
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<AutoContext>) -> Result<Action, Error> {
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Most configuration versions have no marker or a settled one: nothing to read.
    let marker = obj
        .annotations()
        .get(ANNOTATION_AUTOMATIC_TEST_RUN)
        .and_then(|v| Marker::parse(Some(v.as_str())));
    if !matches!(marker, Some(Marker::Due | Marker::Claimed)) {
        return Ok(Action::await_change());
    }
    let Some(cv) = typed::<ConfigurationVersion>(&obj) else {
        return Ok(Action::await_change());
    };
    let ns = cv
        .namespace()
        .ok_or_else(|| Error::Invalid("configuration version without namespace".into()))?;
    let api: Api<ConfigurationVersion> = Api::namespaced(ctx.base.client.clone(), &ns);
    let mut cv = cv;
    for _ in 0..MARKER_ATTEMPTS {
        let step = decide(
            &observe(&cv, &ctx.runs, Timestamp::now()),
            ctx.base.settings.auto_test_run_delay,
        );
        let next = match step {
            Step::Nothing => return Ok(Action::await_change()),
            // A little past the end, so the next look finds it over.
            Step::WaitFor(rest) => {
                return Ok(Action::requeue(rest + Duration::from_millis(50)));
            }
            Step::Supersede => Marker::Superseded,
            Step::Claim => Marker::Claimed,
            Step::Create => {
                create_run(&ctx, &ns, &cv).await?;
                Marker::Created
            }
            Step::MarkCreated => Marker::Created,
        };
        match set_marker(&api, &cv, next).await? {
            // Claimed: go on to create the run at once.
            Ok(written) if next == Marker::Claimed => cv = written,
            Ok(_) => return Ok(Action::await_change()),
            // Someone else wrote first: decide again on what is there now.
            Err(()) => match api.get_opt(&cv.name_any()).await? {
                Some(fresh) => cv = fresh,
                None => return Ok(Action::await_change()),
            },
        }
    }
    Err(Error::Conflict(format!(
        "the automatic test run marker of {}/{} kept changing",
        ns,
        cv.name_any()
    )))
}

/// Writes `marker` with the resourceVersion `cv` was read at; `Err(())` when another
/// writer changed the object since (409).
async fn set_marker(
    api: &Api<ConfigurationVersion>,
    cv: &ConfigurationVersion,
    marker: Marker,
) -> Result<Result<ConfigurationVersion, ()>, Error> {
    let patch = json!({"metadata": {
        "resourceVersion": cv.resource_version(),
        "annotations": {ANNOTATION_AUTOMATIC_TEST_RUN: marker.as_str()},
    }});
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
        ..Default::default()
    };
    match api.patch(&cv.name_any(), &pp, &Patch::Merge(&patch)).await {
        Ok(written) => {
            tracing::info!(name = %cv.name_any(), marker = %marker, "automatic test run");
            Ok(Ok(written))
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Err(())),
        Err(e) => Err(e.into()),
    }
}

/// Creates the automatic run of `cv` (owned by its module, as the API's runs are); one
/// created before (a retry) is fine.
async fn create_run(ctx: &AutoContext, ns: &str, cv: &ConfigurationVersion) -> Result<(), Error> {
    let module = cv.spec.module.clone().unwrap_or_default();
    let cv_name = cv.name_any();
    let mut labels = std::collections::BTreeMap::from([
        (LABEL_ID.to_owned(), new_id(IdKind::TestRun)),
        (LABEL_MODULE.to_owned(), module.clone()),
    ]);
    if let Some(org) = ctx.orgs.owner(ns).await? {
        labels.insert(LABEL_ORGANIZATION.to_owned(), org.name_any());
    }
    let owner = ctx
        .catalog
        .get(IdKind::RegistryModule, ns, &module)
        .and_then(|m| {
            Some(OwnerReference {
                api_version: API_VERSION.to_owned(),
                kind: "RegistryModule".to_owned(),
                name: m.name_any(),
                uid: m.uid()?,
                controller: Some(true),
                block_owner_deletion: Some(true),
            })
        });
    let run = TestRun {
        metadata: ObjectMeta {
            name: Some(run_name(&cv_name)),
            namespace: Some(ns.to_owned()),
            labels: Some(labels),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: run_spec(&module, &cv_name),
        status: None,
    };
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
        ..Default::default()
    };
    match Api::<TestRun>::namespaced(ctx.base.client.clone(), ns)
        .create(&pp, &run)
        .await
    {
        Ok(_) => {
            tracing::info!(namespace = %ns, configuration_version = %cv_name, run = %run.name_any(), "automatic test run created");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
