//! Run triggers (TFE's): a successful apply in a workspace queues a run in every
//! workspace that names it among its `runTriggerSources`, on that workspace's current
//! configuration, auto-applied when it says `autoApplyRunTrigger` (or `autoApply`). One
//! triggered run per source apply: each is named after the source run and the target
//! (a second attempt finds it, 409), and the source run is marked once they all exist
//! ([`ANNOTATION_TRIGGERED`]), so a restart or a later reconcile queues nothing again.

use std::sync::Arc;

use kube::api::PostParams;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::ids::IdKind;
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
        let here: Vec<&Arc<Workspace>> = workspaces
            .iter()
            .filter(|w| {
                w.namespace().as_deref() == Some(ns.as_str()) && w.labels().contains_key(LABEL_ID)
            })
            .collect();
        let edges = trigger_edges(&here);
        for target in here
            .iter()
            .filter(|w| me.listed_in(&w.spec.run_trigger_sources))
        {
            let target_id = target.labels().get(LABEL_ID).cloned().unwrap_or_default();
            if terrace_crds::rules::triggers_reach(&edges, &target_id, &source_id) {
                publish_event(
                    &ctx.recorder,
                    &target.object_ref(&()),
                    EventType::Warning,
                    "RunTriggerCycle",
                    "RunTrigger",
                    format!(
                        "no run queued for the apply of run {run_id} in workspace {}: its run triggers make a cycle through this workspace (remove one of them)",
                        source.spec.name
                    ),
                )
                .await;
                continue;
            }
            queue_one(ctx, run_id, source, target).await?;
        }
    }
    crate::annotate::annotate(&ctx.base.client, run, ANNOTATION_TRIGGERED, "true").await?;
    Ok(())
}

/// Every run trigger among `workspaces` (one namespace's): each source's ID with the ID
/// of a workspace that names it.
fn trigger_edges(workspaces: &[&Arc<Workspace>]) -> Vec<(String, String)> {
    let id = |w: &Workspace| w.labels().get(LABEL_ID).cloned().unwrap_or_default();
    let mut edges = Vec::new();
    for target in workspaces
        .iter()
        .filter(|w| !w.spec.run_trigger_sources.is_empty())
    {
        for source in workspaces {
            let source_id = id(source);
            let named = Named {
                id: Some(&source_id),
                name: &source.spec.name,
            };
            if named.listed_in(&target.spec.run_trigger_sources) {
                edges.push((source_id, id(target)));
            }
        }
    }
    edges
}

/// The ID of the run that the apply of run `source_run_id` triggers in workspace
/// `target_id`: derived from both, so a second attempt finds the first (409), and of
/// fixed length however long a chain of triggers grows; the run's object name is its ID
/// lowercased, as for every other run.
fn triggered_id(source_run_id: &str, target_id: &str) -> String {
    terrace_crds::ids::stable_id(
        IdKind::Run.prefix(),
        &["run-trigger", source_run_id, target_id],
    )
}

async fn queue_one(
    ctx: &RunContext,
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
    let id = triggered_id(run_id, &target_id);
    let triggered = Run {
        metadata: super::new_run_meta(target, &id, &[(LABEL_TRIGGERED_BY, run_id)]),
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
        // Refused for good (invalid, forbidden): said once, never retried in a loop.
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 422) => {
            publish_event(
                &ctx.recorder,
                &regarding,
                EventType::Warning,
                "RunTriggerRefused",
                "RunTrigger",
                format!(
                    "the run triggered by run {run_id} of workspace {} could not be created: {}",
                    source.spec.name, s.message
                ),
            )
            .await;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}
