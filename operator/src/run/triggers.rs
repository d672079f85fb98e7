//! Run triggers (TFE's): a successful apply in a workspace queues a run in every
//! workspace that names it among its `runTriggerSources`, on that workspace's current
//! configuration, auto-applied when it says `autoApplyRunTrigger` (or `autoApply`). One
//! triggered run per source apply: each is named after the source run and the target
//! (a second attempt finds it, 409), and the source run is marked once they all exist
//! ([`ANNOTATION_TRIGGERED`]), so a restart or a later reconcile queues nothing again.

use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION, LABEL_WORKSPACE_ID};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::Named;
use terrace_crds::{Run, RunSpec, Workspace};

use super::RunContext;
use crate::Error;
use crate::events::publish_event;

/// Annotation on an applied run once the runs it triggers are queued.
pub const ANNOTATION_TRIGGERED: &str = "terrace.dev/run-triggers-queued";
/// Label on a triggered run: the ID of the run whose apply triggered it.
pub const LABEL_TRIGGERED_BY: &str = "terrace.dev/triggered-by-run";
/// The `source` of triggered runs.
pub const SOURCE: &str = "tfe-run-trigger";

/// Whether applied run `run` still has its triggered runs to queue.
pub fn pending(run: &Run) -> bool {
    !run.annotations().contains_key(ANNOTATION_TRIGGERED)
}

/// Queues the runs that the apply of `run` (ID `run_id`) triggers, then marks it.
pub async fn queue(ctx: &RunContext, run: &Run, run_id: &str) -> Result<(), Error> {
    let ns = run.namespace().unwrap_or_default();
    let workspaces = ctx.workspaces.state();
    let source = workspaces.iter().find(|w| {
        w.namespace().as_deref() == Some(ns.as_str()) && w.name_any() == run.spec.workspace
    });
    if let Some(source) = source {
        let source_id = source.labels().get(LABEL_ID).cloned().unwrap_or_default();
        let me = Named {
            id: Some(&source_id),
            name: &source.spec.name,
        };
        let targets = workspaces.iter().filter(|w| {
            w.namespace().as_deref() == Some(ns.as_str())
                && w.labels().contains_key(LABEL_ID)
                && me.listed_in(&w.spec.run_trigger_sources)
        });
        for target in targets {
            queue_one(ctx, run, run_id, source, target).await?;
        }
    }
    let api: Api<Run> = Api::namespaced(ctx.base.client.clone(), &ns);
    api.patch(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION_TRIGGERED: "true"}}})),
    )
    .await?;
    Ok(())
}

/// The name of the run that run object `source_run` triggers in workspace object `target`.
fn triggered_name(source_run: &str, target: &str) -> String {
    format!("{source_run}-rt-{target}")
}

async fn queue_one(
    ctx: &RunContext,
    run: &Run,
    run_id: &str,
    source: &Workspace,
    target: &Workspace,
) -> Result<(), Error> {
    let ns = target.namespace().unwrap_or_default();
    let target_id = target.labels().get(LABEL_ID).cloned().unwrap_or_default();
    let regarding = target.object_ref(&());
    let Some(cv) = super::current_configuration(&ctx.base.client, &ns, &target_id).await? else {
        publish_event(
            &ctx.recorder,
            &regarding,
            EventType::Warning,
            "RunTriggerSkipped",
            "RunTrigger",
            format!(
                "run {run_id} of workspace {} applied, but this workspace has no uploaded configuration version to run",
                source.spec.name
            ),
        )
        .await;
        return Ok(());
    };
    let id = new_id(IdKind::Run);
    let org = target
        .labels()
        .get(LABEL_ORGANIZATION)
        .cloned()
        .unwrap_or_default();
    let triggered = Run {
        metadata: ObjectMeta {
            name: Some(triggered_name(&run.name_any(), &target.name_any())),
            namespace: Some(ns.clone()),
            labels: Some(
                [
                    (LABEL_ID.to_owned(), id.clone()),
                    (LABEL_ORGANIZATION.to_owned(), org),
                    (LABEL_WORKSPACE_ID.to_owned(), target_id),
                    (LABEL_TRIGGERED_BY.to_owned(), run_id.to_owned()),
                ]
                .into(),
            ),
            owner_references: target.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: RunSpec {
            workspace: target.name_any(),
            configuration_version: cv.name_any(),
            refresh: true,
            auto_apply: target.spec.auto_apply_run_trigger || target.spec.auto_apply,
            message: format!(
                "Triggered by the apply of run {run_id} in workspace {}",
                source.spec.name
            ),
            source: SOURCE.to_owned(),
            ..RunSpec::default()
        },
        status: None,
    };
    let runs: Api<Run> = Api::namespaced(ctx.base.client.clone(), &ns);
    match runs.create(&PostParams::default(), &triggered).await {
        Ok(_) => {
            publish_event(
                &ctx.recorder,
                &regarding,
                EventType::Normal,
                "RunTriggered",
                "RunTrigger",
                format!(
                    "run {id} queued: workspace {} applied run {run_id}",
                    source.spec.name
                ),
            )
            .await;
            Ok(())
        }
        // Queued by an earlier attempt.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
