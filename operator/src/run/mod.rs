//! The Run controller (docs/runs.md): a run's plan and apply, each in a Pod of its own
//! ([`pod`]), one apply run at a time per workspace, holding the workspace's lock.
//!
//! One reconcile is observe → decide → act:
//! - observe: the Run (from the controller's cache), its workspace and the other runs of
//!   the workspace (caches), the current phase's Pod (read from the API, named
//!   deterministically, so a restarted operator finds it instead of starting a second);
//! - decide: a pending run's turn with the pure [`run::may_start`], the rest with the
//!   pure [`run::decide`];
//! - act: lock the workspace for the run (a guarded merge under its resourceVersion),
//!   create the Secret and the phase's Pod, delete a Pod on cancel, write the new status
//!   (a merge patch under the Run's resourceVersion, so a concurrent API action — apply,
//!   discard, cancel — wins or is seen next time), record an Event; when a phase's Pod
//!   ended, archive its log and let go of it; when the run ends, unlock the workspace and
//!   delete the Secret.
//!
//! Pending runs are woken when their workspace changes (an unlock) and when another run
//! of the workspace changes (one ends).

pub mod assess;
pub mod auto_destroy;
pub mod auto_queue;
mod inputs;
mod lock;
mod phase;
pub mod pod;
mod status;
pub mod triggers;

use inputs::*;
pub use inputs::{current_configuration, new_run_meta};
use lock::*;
use phase::*;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{
    ANNOTATION_LOCK_REASON, ANNOTATION_LOCKED_AT, ANNOTATION_LOCKED_BY, LABEL_ID,
};
use terrace_crds::ids::IdKind;
use terrace_crds::lock::{LockHolder, holder_of};
use terrace_crds::policy::Gate;
use terrace_crds::run::{
    self, Cancel, Decision, Flags, Phase, PhaseReport, PodSeen, QueuedRun, RunState,
};
use terrace_crds::{AgentPool, Run, Workspace, WorkspaceVariable};

use crate::catalog::CatalogStores;
use crate::identity::{Organizations, synced};
use crate::testpod::{ENGINE_CONTAINER, build_log_archive_for, log_archive_name};
use crate::testrun::observe::{EngineObs, PodObs, observe_pod_as};
use crate::watch::Feed;
use crate::{Context, Error};
use pod::{FINALIZER, LABEL_RUN, RunPodInputs, Variable};
use status::{record_performance, write_status, write_status_with};

/// What every reconcile of the controller shares.
pub struct RunContext {
    pub base: Arc<Context>,
    pub orgs: Organizations,
    pub runs: Store<Run>,
    pub workspaces: Store<Workspace>,
    /// The catalog's caches: agent pools (and workspace variables).
    pub catalog: CatalogStores,
    pub recorder: Recorder,
}

/// The Run controller, run until `shutdown` resolves.
pub fn controller<S>(
    ctx: Arc<Context>,
    orgs: Organizations,
    workspaces: Store<Workspace>,
    workspace_changes: impl futures::Stream<Item = Result<Workspace, watcher::Error>> + Send + 'static,
    catalog: CatalogStores,
    shutdown: S,
) -> impl Future<Output = ()> + Send + 'static
where
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let client = &ctx.client;
    let mut runs = Feed::<Run>::new(client, (), watcher::Config::default());
    let mut pods = Feed::<Pod>::new(client, (), watcher::Config::default().labels(LABEL_RUN));
    let store = runs.store();
    let (by_ws, by_run) = (store.clone(), store.clone());
    let run_changes = runs.subscribe();
    let controller = Controller::for_stream(runs.into_stream(), store.clone())
        .owns_stream(pods.subscribe())
        .watches_stream_with(
            workspace_changes,
            move |ws: Workspace| {
                waiting_in(&by_ws.state(), ws.namespace().as_deref(), &ws.name_any())
            },
            (),
        )
        .watches_stream_with(
            run_changes,
            move |r: Run| {
                waiting_in(&by_run.state(), r.namespace().as_deref(), &r.spec.workspace)
                    .into_iter()
                    .filter(|o| o.name != r.name_any())
                    .collect::<Vec<_>>()
            },
            (),
        );
    let rctx = Arc::new(RunContext {
        recorder: crate::events::new_recorder(client),
        base: ctx,
        orgs,
        runs: store,
        workspaces,
        catalog,
    });
    // The Pods' feed is driven here (nothing else consumes it); it stops with the
    // controller.
    let pod_watch = pods.into_stream().for_each(|_| futures::future::ready(()));
    // The assessment scheduler reads the same caches and stops with the controller.
    let schedule = assess::scheduler(rctx.clone());
    let main = crate::metrics::RUN.run(controller.graceful_shutdown_on(shutdown), reconcile, rctx);
    async move {
        tokio::select! {
            () = main => {}
            () = pod_watch => {}
            () = schedule => {}
        }
    }
}

/// The pending runs of workspace `ws` in `ns` (to wake when it or its runs change).
fn waiting_in(runs: &[Arc<Run>], ns: Option<&str>, ws: &str) -> Vec<ObjectRef<Run>> {
    runs.iter()
        .filter(|r| r.namespace().as_deref() == ns && r.spec.workspace == ws)
        .filter(|r| state_of(r) == RunState::Pending)
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

fn state_of(run: &Run) -> RunState {
    RunState::of(run.status.as_ref().and_then(|s| s.status.as_deref())).unwrap_or(RunState::Errored)
}

fn cancel_of(run: &Run) -> Cancel {
    match run.status.as_ref() {
        Some(s) if s.force_cancel_requested_at.is_some() => Cancel::Force,
        Some(s) if s.cancel_requested_at.is_some() => Cancel::Cancel,
        _ => Cancel::None,
    }
}

/// The phase whose Pod matters in `state`.
fn phase_of(state: RunState) -> Option<Phase> {
    match state {
        RunState::PlanQueued | RunState::Planning => Some(Phase::Plan),
        RunState::Confirmed | RunState::ApplyQueued | RunState::Applying => Some(Phase::Apply),
        _ => None,
    }
}

/// What the controller sees of a phase Pod, and whether its engine may still write.
fn seen(obs: &PodObs) -> PodSeen {
    match obs {
        PodObs::Missing | PodObs::Foreign => PodSeen::Absent,
        PodObs::Present(p) => {
            if let Some(f) = &p.failure {
                return PodSeen::Ended(Some(PhaseReport {
                    ok: false,
                    message: Some(f.clone()),
                    ..PhaseReport::default()
                }));
            }
            match &p.engine {
                Some(EngineObs::Terminated {
                    exit_code,
                    message,
                    reason,
                }) => PodSeen::Ended(Some(
                    message
                        .as_deref()
                        .and_then(|m| serde_json::from_str::<PhaseReport>(m.trim()).ok())
                        .unwrap_or_else(|| PhaseReport {
                            ok: false,
                            message: Some(format!(
                                "the engine container ended with exit code {exit_code}{}",
                                reason
                                    .as_deref()
                                    .map(|r| format!(" ({r})"))
                                    .unwrap_or_default()
                            )),
                            ..PhaseReport::default()
                        }),
                )),
                _ if p.deletion_overdue => PodSeen::Ended(None),
                _ => PodSeen::Running,
            }
        }
    }
}

/// How often a run whose Pod waits for a node is looked at again.
const WAITING_RECHECK: Duration = Duration::from_secs(5);

async fn reconcile(mut run: Arc<Run>, ctx: Arc<RunContext>) -> Result<Action, Error> {
    let ns = run
        .namespace()
        .ok_or_else(|| Error::Invalid("run without namespace".into()))?;
    let Some(run_id) = run.labels().get(LABEL_ID).cloned() else {
        // The catalog gives it an ID first.
        return Ok(Action::await_change());
    };
    // Nothing is decided from a cache before its first list: an empty workspace cache
    // would read as "the workspace is gone" and error every run in flight at a restart.
    synced(&ctx.workspaces, "workspace").await?;
    synced(&ctx.runs, "run").await?;
    for kind in [
        IdKind::WorkspaceVariable,
        IdKind::AgentPool,
        IdKind::VariableSet,
        IdKind::Project,
    ] {
        ctx.catalog.synced(kind).await?;
    }
    let client = &ctx.base.client;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let state = state_of(&run);
    if run.meta().deletion_timestamp.is_some() || state.is_final() {
        return finish(&run, &ctx, &ns, &run_id, &pods).await;
    }
    let cached = ctx
        .workspaces
        .get(&ObjectRef::new(&run.spec.workspace).within(&ns));
    // A miss is confirmed with the API server before the run errors: the watch may not
    // have delivered a workspace created a moment ago.
    let ws = match cached {
        Some(ws) => Some(ws),
        None => Api::<Workspace>::namespaced(ctx.base.client.clone(), &ns)
            .get_opt(&run.spec.workspace)
            .await?
            .map(Arc::new),
    };
    let Some(ws) = ws else {
        write_status(
            &ctx,
            &run,
            RunState::Errored,
            None,
            Some("the workspace is gone".into()),
            None,
        )
        .await?;
        return Ok(Action::await_change());
    };
    let cancel = cancel_of(&run);
    if state == RunState::Pending {
        return start(&run, &ctx, &ws, &run_id, cancel).await;
    }
    let Some(phase) = phase_of(state) else {
        // Planned / planned_and_saved: waiting for the API (apply, discard). The plan Pod
        // is let go of as soon as it ended.
        release_phase(&ctx, &run, &run_id, &pods, Phase::Plan).await?;
        return Ok(Action::await_change());
    };
    let pod_name = pod::pod_name(&run.name_any(), phase);
    let current = pods.get_opt(&pod_name).await?;
    let what = match phase {
        Phase::Plan => "plan Pod",
        Phase::Apply => "apply Pod",
    };
    let obs = observe_pod_as(
        current.as_ref(),
        run.uid().as_deref().unwrap_or_default(),
        Timestamp::now(),
        what,
        ctx.base.settings.pod_start_timeout,
    );
    let seen = seen(&obs);
    // A plan with changes had its policies checked when the API server stored it (before
    // the Pod ended): read from the API server, not the cache, which may lag.
    let mut policy = Gate::None;
    if phase == Phase::Plan
        && !run.spec.assessment
        && matches!(&seen, PodSeen::Ended(Some(r)) if r.ok && r.has_changes)
        && cancel == Cancel::None
    {
        let fresh = Api::<Run>::namespaced(client.clone(), &ns)
            .get(&run.name_any())
            .await?;
        if state_of(&fresh) != state {
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
        run = Arc::new(fresh);
        if let Some(e) = run
            .status
            .as_ref()
            .and_then(|s| s.policy_evaluation.as_ref())
        {
            policy = e.gate();
        }
    }
    let flags = Flags {
        plan_only: run.spec.plan_only,
        save_plan: run.spec.save_plan,
        auto_apply: run.spec.auto_apply,
        allow_empty_apply: run.spec.allow_empty_apply,
        policy,
    };
    let mut d: Decision = run::decide(state, cancel, &seen, flags);
    if d.to.is_some()
        && let Some(e) = run
            .status
            .as_ref()
            .and_then(|s| s.policy_evaluation.as_ref())
        && policy != Gate::None
    {
        if matches!(
            d.to,
            Some(RunState::Errored | RunState::PostPlanAwaitingDecision)
        ) {
            d.message = e.stop_message();
        }
        policy_events(&ctx, &run, e).await;
    }
    if let Some(p) = d.create_pod {
        if phase == Phase::Apply {
            release_phase(&ctx, &run, &run_id, &pods, Phase::Plan).await?;
        }
        let full = if run.spec.assessment {
            assess::at_limit(&ctx)
        } else {
            at_limit(&ctx, &ns).await?
        };
        if let Some(full) = full {
            // Waits queued for a slot (a confirmed run shows `apply_queued`).
            if state == RunState::Confirmed {
                write_status(&ctx, &run, RunState::ApplyQueued, None, Some(full), None).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        let what = match p {
            Phase::Plan => "plan Pod",
            Phase::Apply => "apply Pod",
        };
        let refused = match create_pod(&ctx, &run, &ws, &run_id, p).await {
            Ok(r) => r,
            // A passing failure (429, 5xx, a timeout) is retried with backoff, until the
            // start timeout says the run has waited long enough.
            Err(e) if queued_past(&run, state, ctx.base.settings.pod_start_timeout) => Some(
                format!("the {what} could not be created within --pod-start-timeout: {e}"),
            ),
            Err(e) => return Err(e),
        };
        if let Some(why) = refused {
            let message = format!("the cluster refused the {what}: {why}");
            crate::events::publish_event(
                &ctx.recorder,
                &run.object_ref(&()),
                kube::runtime::events::EventType::Warning,
                "PodRefused",
                "CreatePod",
                message.clone(),
            )
            .await;
            unlock_workspace(&ctx, &ns, &run.spec.workspace, &run_id).await?;
            let result = run
                .spec
                .assessment
                .then(|| assess::result(&run, &ws, RunState::Errored, Some(&message), None))
                .flatten();
            write_status_with(
                &ctx,
                &run,
                RunState::Errored,
                Some(p),
                Some(message),
                None,
                result.as_ref(),
            )
            .await?;
            if !run.spec.assessment {
                record_performance(&ctx, &run, RunState::Errored).await;
            }
            return Ok(Action::requeue(Duration::from_millis(200)));
        }
    }
    if let Some(grace) = d.delete_pod {
        let dp = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace).unwrap_or(0)),
            ..DeleteParams::default()
        };
        match pods.delete(&pod_name, &dp).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(to) = d.to {
        // A phase's log is archived before the run moves on, so readers find it; an
        // errored run's log ends with its cause, which the CLI shows.
        let cause = d.message.as_deref().filter(|_| to == RunState::Errored);
        if matches!(seen, PodSeen::Ended(_)) || cause.is_some() {
            archive(client, &run, &run_id, &pods, &pod_name, cause).await;
        }
        // The workspace is free before the run reads as ended, so a caller that sees it
        // ended may lock it at once.
        if to.is_final() {
            unlock_workspace(&ctx, &ns, &run.spec.workspace, &run_id).await?;
        }
        let result = run
            .spec
            .assessment
            .then(|| assess::result(&run, &ws, to, d.message.as_deref(), d.report.as_ref()))
            .flatten();
        write_status_with(
            &ctx,
            &run,
            to,
            Some(phase),
            d.message.clone(),
            d.report.as_ref(),
            result.as_ref(),
        )
        .await?;
        if matches!(to, RunState::Applied | RunState::Errored) && !run.spec.assessment {
            record_performance(&ctx, &run, to).await;
        }
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if let PodObs::Present(p) = &obs {
        let status = run.status.as_ref();
        let message = status.and_then(|s| s.message.as_deref());
        let (under, phase_status) = match phase {
            Phase::Plan => ("plan", status.map(|s| &s.plan)),
            Phase::Apply => ("apply", status.map(|s| &s.apply)),
        };
        let note = crate::pod_parts::WaitNote {
            under: Some(under),
            written: phase_status.is_some_and(|s| s.wait_note.is_some()),
        };
        crate::pod_parts::note_waiting(
            client,
            run.as_ref(),
            message,
            p.waiting.as_deref(),
            p.waited.as_deref(),
            note,
        )
        .await?;
        if p.waiting.is_some() {
            // Looked at again soon: the start timeout is measured on reconciles.
            return Ok(Action::requeue(WAITING_RECHECK));
        }
    }
    Ok(match seen {
        PodSeen::Running => Action::requeue(Duration::from_secs(30)),
        _ => Action::requeue(Duration::from_secs(5)),
    })
}

/// Whether run `run` has been in `state` (waiting for its Pod) longer than `timeout`.
fn queued_past(run: &Run, state: RunState, timeout: Duration) -> bool {
    let since = run
        .status
        .as_ref()
        .and_then(|s| s.status_timestamps.get(&run::timestamp_key(state)))
        .and_then(|t| t.parse::<Timestamp>().ok());
    match (since, k8s_openapi::jiff::SignedDuration::try_from(timeout)) {
        (Some(since), Ok(timeout)) => since
            .checked_add(timeout)
            .is_ok_and(|deadline| deadline < Timestamp::now()),
        _ => false,
    }
}

/// An Event on the run for each policy that failed its plan (names and levels only: a
/// policy's messages may quote the plan).
async fn policy_events(ctx: &RunContext, run: &Run, e: &terrace_crds::RunPolicyEvaluation) {
    for set in &e.sets {
        for r in set.outcomes.iter().filter(|r| r.status != "passed") {
            crate::events::publish_event(
                &ctx.recorder,
                &run.object_ref(&()),
                kube::runtime::events::EventType::Warning,
                "PolicyFailed",
                "Plan",
                format!(
                    "{} policy {}/{} {}",
                    r.enforcement_level, set.name, r.policy, r.status
                ),
            )
            .await;
        }
    }
}

/// What holds the slots of the run limits: the runs planning or applying (never an
/// assessment: an assessment never delays a run, docs/health.md) and the test runs in
/// their Pods (how many, in all and per namespace), `runs` being the cached runs.
fn slot_holders(
    ctx: &RunContext,
    runs: &[Arc<Run>],
) -> (
    Vec<Arc<Run>>,
    usize,
    std::collections::HashMap<String, usize>,
) {
    let running = runs
        .iter()
        .filter(|r| !r.spec.assessment && state_of(r).is_running())
        .cloned()
        .collect();
    let (tests, tests_per_ns) = ctx
        .catalog
        .count_in_status(IdKind::TestRun, &terrace_crds::testrun::HOLDING_SLOT);
    (running, tests, tests_per_ns)
}

/// Why no phase may start now: the global limit (`--test-run-concurrency`, which runs
/// share with test runs' setting) or the organization's (`spec.settings.testRuns.
/// concurrency`) of runs planning or applying at once is reached. None: a slot is free.
async fn at_limit(ctx: &RunContext, ns: &str) -> Result<Option<String>, Error> {
    let (running, tests, tests_per_ns) = slot_holders(ctx, &ctx.runs.state());
    let global = ctx.base.settings.test_run_concurrency as usize;
    if global > 0 && running.len() + tests >= global {
        return Ok(Some(format!(
            "waiting for a slot: {} runs and test runs are running (the limit is {global})",
            running.len() + tests
        )));
    }
    let org = ctx.orgs.owner(ns).await?;
    let limit = org
        .and_then(|o| o.spec.settings.test_runs.concurrency)
        .and_then(|c| usize::try_from(c).ok())
        .filter(|c| *c > 0);
    if let Some(limit) = limit {
        let here = running
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(ns))
            .count()
            + tests_per_ns.get(ns).copied().unwrap_or(0);
        if here >= limit {
            return Ok(Some(format!(
                "waiting for a slot: {here} runs of the organization are running (its limit is {limit})"
            )));
        }
    }
    Ok(None)
}

/// A pending run: its turn (and the workspace's lock) or the reason it waits.
async fn start(
    run: &Run,
    ctx: &RunContext,
    ws: &Workspace,
    run_id: &str,
    cancel: Cancel,
) -> Result<Action, Error> {
    if cancel != Cancel::None {
        write_status(ctx, run, RunState::Canceled, None, None, None).await?;
        return Ok(Action::await_change());
    }
    let ns = run.namespace().unwrap_or_default();
    let all = ctx.runs.state();
    let created: Vec<(String, Arc<Run>)> = all
        .iter()
        .filter(|r| {
            r.namespace().as_deref() == Some(ns.as_str()) && r.spec.workspace == run.spec.workspace
        })
        // An assessment is in no run's queue (and waits for none).
        .filter(|r| !r.spec.assessment || r.metadata.uid == run.metadata.uid)
        .map(|r| (r.queued_at(), r.clone()))
        .collect();
    let queue: Vec<QueuedRun<'_>> = created
        .iter()
        .map(|(t, r)| QueuedRun {
            name: r.metadata.name.as_deref().unwrap_or_default(),
            created: t,
            state: state_of(r),
            plan_only: r.spec.plan_only,
        })
        .collect();
    let lock = holder_of(ws);
    match run::may_start(&run.name_any(), &queue, lock.as_ref(), run_id) {
        Err(wait) => {
            let id_of = |name: &str| {
                created
                    .iter()
                    .find(|(_, r)| r.metadata.name.as_deref() == Some(name))
                    .and_then(|(_, r)| r.status.as_ref().and_then(|s| s.id.clone()))
                    .unwrap_or_else(|| name.to_owned())
            };
            let reason = ws
                .annotations()
                .get(terrace_crds::constants::ANNOTATION_LOCK_REASON)
                .map(String::as_str);
            let message = run::wait_message(&wait, &run.name_any(), &queue, id_of, reason);
            let stored = run.status.as_ref();
            // A waiting run says so in kubectl's STATUS column too, and names its
            // workspace: `pending` is written once, under the run's resourceVersion, so
            // an action the API took meanwhile (a discard) is never undone.
            let name = status::workspace_name(ctx, run);
            let unnamed = stored
                .is_none_or(|s| s.status.is_none() || (name.is_some() && s.workspace_name != name));
            if unnamed || stored.and_then(|s| s.message.as_deref()) != Some(message.as_str()) {
                let api: Api<Run> = Api::namespaced(ctx.base.client.clone(), &ns);
                let mut patch = json!({"status": {"message": message}});
                if unnamed {
                    patch["metadata"] = json!({"resourceVersion": run.resource_version()});
                    patch["status"]["status"] = json!(state_of(run).as_str());
                    patch["status"]["workspaceName"] = json!(name);
                }
                match api
                    .patch_status(
                        &run.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                {
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        return Ok(Action::requeue(Duration::from_millis(200)));
                    }
                    r => {
                        r?;
                    }
                }
            }
            Ok(Action::requeue(Duration::from_secs(60)))
        }
        Ok(()) => {
            if !run.spec.plan_only && !lock_workspace(ctx, ws, run_id).await? {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            write_status(ctx, run, RunState::PlanQueued, None, None, None).await?;
            Ok(Action::requeue(Duration::from_millis(100)))
        }
    }
}

/// A run that ended (or is being deleted): its Pods archived and let go of, its Secret
/// deleted, the workspace unlocked.
async fn finish(
    run: &Run,
    ctx: &RunContext,
    ns: &str,
    run_id: &str,
    pods: &Api<Pod>,
) -> Result<Action, Error> {
    for phase in [Phase::Plan, Phase::Apply] {
        release_phase(ctx, run, run_id, pods, phase).await?;
    }
    unlock_workspace(ctx, ns, &run.spec.workspace, run_id).await?;
    if run.spec.assessment && run.meta().deletion_timestamp.is_none() {
        assess::record(ctx, run).await?;
    }
    if state_of(run) == RunState::Applied
        && run.meta().deletion_timestamp.is_none()
        && triggers::pending(run)
    {
        triggers::queue(ctx, run, run_id).await?;
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), ns);
    match secrets
        .delete(&pod::secret_name(&run.name_any()), &DeleteParams::default())
        .await
    {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => tracing::debug!(error = %e, "deleting the run's secret"),
    }
    Ok(Action::await_change())
}

/// Creates the run's Secret (once) and the Pod of `phase` (409: it exists already).
/// Answers the cluster's words when it refuses the Pod for good (admission, a Pod
/// Security level, an invalid template: 400, 403, 422); a passing failure is an error,
/// retried with backoff.
async fn create_pod(
    ctx: &RunContext,
    run: &Run,
    ws: &Workspace,
    run_id: &str,
    phase: Phase,
) -> Result<Option<String>, Error> {
    let ns = run.namespace().unwrap_or_default();
    let org = ctx.orgs.owner(&ns).await?;
    let org_name = org.as_ref().map(|o| o.name_any()).unwrap_or_default();
    let default_settings = terrace_crds::TestRunSettings::default();
    let org_settings = org
        .as_ref()
        .map_or(&default_settings, |o| &o.spec.settings.test_runs);
    let variables = variables_of(&ctx.catalog, &ns, ws);
    let pool = agent_pool_of(&ctx.catalog, &ns, ws);
    let pool_template = pool.as_ref().and_then(|p| p.spec.pod_template.clone());
    let org_tfe_name = org
        .as_ref()
        .map(|o| o.tfe_name().to_owned())
        .unwrap_or_default();
    let project_name = project_name_of(&ctx.catalog, &ns, ws);
    let inputs = RunPodInputs {
        run,
        run_id,
        organization: &org_name,
        working_directory: ws.spec.working_directory.as_deref().unwrap_or_default(),
        structured_output: ws.spec.structured_run_output_enabled,
        // A plan-only run may name its own engine version.
        terraform_version: run
            .spec
            .terraform_version
            .as_deref()
            .or(ws.spec.terraform_version.as_deref()),
        variables: &variables,
        org_settings,
        pool_template: pool_template.as_ref(),
        settings: &ctx.base.settings,
        environment: pod::RunNames {
            organization_name: &org_tfe_name,
            workspace_name: &ws.spec.name,
            project_name: &project_name,
        },
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), &ns);
    // Created once (409: it exists, from the plan phase or before a restart).
    let token = terrace_crds::run::runner_token(&ns, &crate::testpod::new_token());
    let secret = pod::build_secret(&inputs, &token)?;
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let pods: Api<Pod> = Api::namespaced(ctx.base.client.clone(), &ns);
    match pods
        .create(&PostParams::default(), &pod::build_pod(&inputs, phase)?)
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(kube::Error::Api(s)) if crate::pod_parts::refused_for_good(s.code) => {
            Ok(Some(s.message))
        }
        Err(e) => Err(e.into()),
    }
}
