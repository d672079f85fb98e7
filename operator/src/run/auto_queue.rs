//! The run of an upload: a workspace's configuration version uploaded with
//! `auto-queue-runs` queues a run of the workspace (TFE's behaviour for API-driven
//! workflows; the terraform CLI uploads without it and creates its run itself). Created
//! here, by the operator: a small controller over the catalog's ConfigurationVersion feed
//! and cache. The run's ID is derived from the configuration version's (`cv-X` → `run-X`),
//! so a retry after a crash (or a second replica) finds the same object (409) instead of
//! queuing a second run; the marker annotation [`ANNOTATION_RUN_QUEUED`] records it.

use std::sync::Arc;

use kube::api::{DynamicObject, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION, LABEL_WORKSPACE_ID};
use terrace_crds::ids::{IdKind, object_name_for_id};
use terrace_crds::{ConfigurationVersion, Run, RunSpec, Workspace};

use crate::catalog::{Catalog, typed};
use crate::{Context, Error, Running, Shutdown};

/// Annotation on a workspace's configuration version: the ID of the run its upload queued.
pub const ANNOTATION_RUN_QUEUED: &str = "terrace.dev/queued-run";
/// The `source` of those runs (TFE's word).
pub const SOURCE: &str = "tfe-configuration-version";

/// The controller, run until `shutdown` resolves (call before the catalog runs).
pub fn controller(
    ctx: Arc<Context>,
    catalog: &mut Catalog,
    shutdown: Shutdown,
) -> Result<Running, Error> {
    let fed = catalog.controller(IdKind::ConfigurationVersion)?;
    Ok(crate::metrics::RUN_AUTO_QUEUE.running(fed.controller, shutdown, reconcile, ctx))
}

/// The run ID of configuration version `cv_id` (`cv-X` → `run-X`).
pub fn run_id_of(cv_id: &str) -> Option<String> {
    cv_id.strip_prefix("cv-").map(|s| format!("run-{s}"))
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(cv) = typed::<ConfigurationVersion>(&obj) else {
        return Ok(Action::await_change());
    };
    let Some(ws_name) = cv.spec.workspace.clone() else {
        return Ok(Action::await_change());
    };
    if !cv.spec.auto_queue_runs
        || !cv.usable()
        || cv.annotations().contains_key(ANNOTATION_RUN_QUEUED)
        || cv.meta().deletion_timestamp.is_some()
    {
        return Ok(Action::await_change());
    }
    let Some(run_id) = cv.labels().get(LABEL_ID).and_then(|id| run_id_of(id)) else {
        return Ok(Action::await_change());
    };
    let ns = cv.namespace().unwrap_or_default();
    let workspaces: Api<Workspace> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(ws) = workspaces.get_opt(&ws_name).await? else {
        return Ok(Action::await_change());
    };
    let mut labels: std::collections::BTreeMap<String, String> = [
        (LABEL_ID.to_owned(), run_id.clone()),
        (
            LABEL_ORGANIZATION.to_owned(),
            cv.labels()
                .get(LABEL_ORGANIZATION)
                .cloned()
                .unwrap_or_default(),
        ),
    ]
    .into();
    if let Some(ws_id) = ws.labels().get(LABEL_ID) {
        labels.insert(LABEL_WORKSPACE_ID.to_owned(), ws_id.clone());
    }
    let run = Run {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&run_id)),
            namespace: Some(ns.clone()),
            labels: Some(labels),
            owner_references: ws.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: RunSpec {
            workspace: ws_name,
            configuration_version: cv.name_any(),
            refresh: true,
            plan_only: cv.spec.speculative,
            auto_apply: ws.spec.auto_apply,
            // A commit's run says what the commit says (TFE's).
            message: cv
                .spec
                .ingress_attributes
                .as_ref()
                .map(|i| i.commit_message.trim().to_owned())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| {
                    "Queued automatically by the configuration version's upload".to_owned()
                }),
            source: SOURCE.to_owned(),
            origin: cv
                .spec
                .ingress_attributes
                .as_deref()
                .map(terrace_crds::vcs::origin),
            ..RunSpec::default()
        },
        status: None,
    };
    let runs: Api<Run> = Api::namespaced(ctx.client.clone(), &ns);
    match runs.create(&PostParams::default(), &run).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    crate::annotate::annotate(&ctx.client, &cv, ANNOTATION_RUN_QUEUED, &run_id).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_ids_follow_configuration_versions() {
        assert_eq!(
            super::run_id_of("cv-abcDEF0123456789").as_deref(),
            Some("run-abcDEF0123456789")
        );
        assert_eq!(super::run_id_of("trun-x"), None);
    }
}
