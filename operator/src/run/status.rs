//! A run's status as the controller writes it: the next state with its timestamp, the
//! phase's outcome and a message, under the Run's resourceVersion, with an Event; and the
//! workspace's performance attributes once a run applied or errored.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::FIELD_MANAGER_RUNS;
use terrace_crds::run::{self, Phase, PhaseReport, RunState};
use terrace_crds::{Run, Workspace};

use super::{RunContext, pod, state_of};
use crate::Error;
use crate::events::publish_event;

/// Writes the run's next state (with its timestamp, the phase's outcome and a message)
/// under the Run's resourceVersion, and records an Event.
pub(super) async fn write_status(
    ctx: &RunContext,
    run: &Run,
    to: RunState,
    phase: Option<Phase>,
    message: Option<String>,
    report: Option<&PhaseReport>,
) -> Result<(), Error> {
    write_status_with(ctx, run, to, phase, message, report, None).await
}

/// [`write_status`], with an assessment's result in the same write.
pub(super) async fn write_status_with(
    ctx: &RunContext,
    run: &Run,
    to: RunState,
    phase: Option<Phase>,
    message: Option<String>,
    report: Option<&PhaseReport>,
    assessment: Option<&terrace_crds::RunAssessment>,
) -> Result<(), Error> {
    let now = terrace_crds::common::timestamp(&Timestamp::now());
    let mut status = json!({
        "status": to.as_str(),
        "statusTimestamps": {run::timestamp_key(to): now},
        "observedGeneration": run.meta().generation,
    });
    if let Some(m) = &message {
        status["message"] = json!(m);
    } else if to != RunState::Pending {
        status["message"] = json!(null);
    }
    if let Some(a) = assessment {
        status["assessment"] = json!(a);
    }
    if let Some(name) = workspace_name(ctx, run) {
        status["workspaceName"] = json!(name);
    }
    if to == RunState::Confirmed && run.spec.auto_apply {
        status["confirmedBy"] = json!("auto-apply");
    }
    let key = |p: Phase| match p {
        Phase::Plan => "plan",
        Phase::Apply => "apply",
    };
    match (to, phase) {
        (RunState::Planning | RunState::Applying, Some(p)) => {
            status[key(p)] =
                json!({"startedAt": now, "podName": pod::pod_name(&run.name_any(), p)});
        }
        (_, Some(p)) => {
            let mut ph = json!({"finishedAt": now});
            // A Pod that ended before the move to planning/applying was written (a fast
            // failure, a lost write) is named now: the phase's log is read through it.
            let recorded = run.status.as_ref().and_then(|s| match p {
                Phase::Plan => s.plan.pod_name.as_ref(),
                Phase::Apply => s.apply.pod_name.as_ref(),
            });
            if recorded.is_none() && (report.is_some() || to == RunState::Errored) {
                ph["podName"] = json!(pod::pod_name(&run.name_any(), p));
                ph["startedAt"] = json!(now);
            }
            if let Some(r) = report.filter(|r| r.ok) {
                let counts = if p == Phase::Apply {
                    // The apply did what the plan said.
                    run.status
                        .as_ref()
                        .map(|s| s.plan.clone())
                        .unwrap_or_default()
                } else {
                    terrace_crds::RunPhaseStatus {
                        has_changes: Some(r.has_changes),
                        resource_additions: Some(r.additions),
                        resource_changes: Some(r.changes),
                        resource_destructions: Some(r.destructions),
                        resource_imports: Some(r.imports),
                        ..Default::default()
                    }
                };
                ph["hasChanges"] = json!(counts.has_changes);
                ph["resourceAdditions"] = json!(counts.resource_additions);
                ph["resourceChanges"] = json!(counts.resource_changes);
                ph["resourceDestructions"] = json!(counts.resource_destructions);
                ph["resourceImports"] = json!(counts.resource_imports);
            }
            status[key(p)] = ph;
        }
        _ => {}
    }
    if !crate::pod_parts::patch_status_guarded(&ctx.base.client, run, status).await? {
        // The API moved the run (an action): the next reconcile sees it.
        return Ok(());
    }
    let note = match &message {
        Some(m) => format!("run is {to}: {m}"),
        None => format!("run is {to}"),
    };
    let kind = if to == RunState::Errored {
        EventType::Warning
    } else {
        EventType::Normal
    };
    publish_event(
        &ctx.recorder,
        &run.object_ref(&()),
        kind,
        reason(to),
        "Run",
        note,
    )
    .await;
    Ok(())
}

/// Writes the workspace's performance attributes (`status.metrics`, server-side apply
/// under [`FIELD_MANAGER_RUNS`]) from its runs, `run` counted as `to` (best effort).
pub(super) async fn record_performance(ctx: &RunContext, run: &Run, to: RunState) {
    let ns = run.namespace().unwrap_or_default();
    let now = terrace_crds::common::timestamp(&Timestamp::now());
    let all = ctx.runs.state();
    let owned: Vec<(String, RunState, [Option<String>; 4])> = all
        .iter()
        .filter(|r| {
            r.namespace().as_deref() == Some(ns.as_str()) && r.spec.workspace == run.spec.workspace
        })
        .map(|r| {
            let st = r.status.clone().unwrap_or_default();
            let mut times = [
                st.plan.started_at,
                st.plan.finished_at,
                st.apply.started_at,
                st.apply.finished_at,
            ];
            let state = if r.metadata.uid == run.metadata.uid {
                let phase = if to == RunState::Applied || times[2].is_some() {
                    3
                } else {
                    1
                };
                times[phase] = Some(now.clone());
                to
            } else {
                state_of(r)
            };
            (r.queued_at(), state, times)
        })
        .collect();
    let times: Vec<run::RunTimes<'_>> = owned
        .iter()
        .map(|(created, state, t)| run::RunTimes {
            created,
            state: *state,
            plan: (t[0].as_deref(), t[1].as_deref()),
            apply: (t[2].as_deref(), t[3].as_deref()),
        })
        .collect();
    let metrics = run::performance(&times);
    let api: Api<Workspace> = Api::namespaced(ctx.base.client.clone(), &ns);
    let body = json!({
        "apiVersion": terrace_crds::constants::API_VERSION,
        "kind": "Workspace",
        "status": {"metrics": metrics},
    });
    let pp = PatchParams::apply(FIELD_MANAGER_RUNS).force();
    if let Err(e) = api
        .patch_status(&run.spec.workspace, &pp, &Patch::Apply(&body))
        .await
    {
        tracing::warn!(error = %e, workspace = %run.spec.workspace, "recording the workspace's performance attributes");
    }
}

/// The Event reason of reaching `state` (CamelCase of the status).
fn reason(state: RunState) -> &'static str {
    match state {
        RunState::Pending => "Pending",
        RunState::PlanQueued => "PlanQueued",
        RunState::Planning => "Planning",
        RunState::Planned => "Planned",
        RunState::PlannedAndFinished => "PlannedAndFinished",
        RunState::PlannedAndSaved => "PlannedAndSaved",
        RunState::PostPlanCompleted => "PostPlanCompleted",
        RunState::PostPlanAwaitingDecision => "PostPlanAwaitingDecision",
        RunState::Confirmed => "Confirmed",
        RunState::ApplyQueued => "ApplyQueued",
        RunState::Applying => "Applying",
        RunState::Applied => "Applied",
        RunState::Discarded => "Discarded",
        RunState::Errored => "Errored",
        RunState::Canceled => "Canceled",
        RunState::ForceCanceled => "ForceCanceled",
    }
}

/// The TFE name of the run's workspace, from the cache (kubectl's WORKSPACE column).
pub(super) fn workspace_name(ctx: &RunContext, run: &Run) -> Option<String> {
    let ns = run.namespace()?;
    ctx.workspaces
        .get(&kube::runtime::reflector::ObjectRef::new(&run.spec.workspace).within(&ns))
        .map(|w| w.spec.name.clone())
}
