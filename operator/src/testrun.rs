//! The TestRun controller (DESIGN.md §3): one Pod per run, followed until the run's
//! outcome is recorded in its status.
//!
//! Flow of one reconcile: the TestRun (from the controller's cache) and its Pod (read from
//! the API, named deterministically by [`testpod::pod_name`]) are reduced to a
//! [`PodObs`]; the pure [`decide`] turns the run's state, its cancel requests and that
//! observation into a [`Plan`]; the reconcile carries the plan out: create the Secret and
//! Pod (only when a concurrency slot is free), delete the Pod (cancel: with a grace
//! period; force-cancel: at once), write the new status through
//! [`terrace_crds::testrun::transition`] with server-side apply, record an Event, and only
//! then archive the engine's log and remove the Pod's finalizer. Everything is derived from the TestRun's status and the
//! Pod, so an operator restarted at any point neither loses a run nor starts a second Pod
//! (a Pod create answering 409 means it already exists).
//!
//! Concurrency: runs in `queued` or `running` count against the global limit
//! ([`Settings::test_run_concurrency`]) and their organization's
//! (`spec.settings.testRuns.concurrency`). Admission is serialised inside the process and
//! remembers runs it admitted until the cache shows them queued, so the cache's lag cannot
//! admit too many. Runs waiting for a slot stay `pending` with the Reconciling condition
//! [`REASON_WAITING_FOR_SLOT`]. When a run holding a slot ends, a waker picks the oldest
//! waiting runs that now fit (creation order, within both limits) and reconciles them at
//! once; every waiting run is also looked at again every [`SLOT_RECHECK`] as a safety net
//! (a limit raised, a run deleted).
//!
//! The engine log of a run that reached a final state is copied into a ConfigMap before
//! the finalizer goes (see `testpod`'s log archive contract), so the API server can serve
//! it after the Pod is deleted. This is best effort: the outcome is recorded first, a log
//! that cannot be read (container never started: 400) is skipped, and a transient failure
//! is retried on the next reconciles at most [`ARCHIVE_ATTEMPTS`] times before the Pod is
//! released without an archive.
//!
//! Pods of TestRuns deleted with background propagation would keep their finalizer
//! forever; a small janitor over test Pods removes it once the owning TestRun is gone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, ObjectReference, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{API_VERSION, FIELD_MANAGER_OPERATOR};
use terrace_crds::testoutput::{RunnerReport, TestSummary};
use terrace_crds::testrun::{
    CancelRequest, Step, TestResult, TestRunState, Transition, transition,
};
use terrace_crds::{
    ConfigurationVersion, Organization, RegistryModule, TestRun, TestRunStatus, TestVariable,
};

use crate::conditions::{Outcome, kstatus_conditions};
use crate::ids::Organizations;
use crate::rules::owning_organization;
use crate::testpod::{self, ENGINE_CONTAINER, FINALIZER, LABEL_TEST_RUN, PodInputs};
use crate::{Context, Error, publish_event};

/// Attempts at archiving a final run's engine log before its Pod is released without.
pub const ARCHIVE_ATTEMPTS: u32 = 3;
/// Reconciling reason of a pending run waiting for a concurrency slot.
pub const REASON_WAITING_FOR_SLOT: &str = "WaitingForSlot";
/// Reconciling reason of a pending run waiting for its ID, module or configuration upload.
pub const REASON_WAITING_FOR_INPUTS: &str = "WaitingForInputs";
/// Stalled reason of a pending run in a namespace no Organization owns.
pub const REASON_ORGANIZATION_NOT_FOUND: &str = "OrganizationNotFound";
/// Grace period of the Pod deletion of a cancel: the runner turns the SIGTERM into an
/// interrupt and the engine tears down what it created.
pub const CANCEL_GRACE_SECONDS: i64 = 30;
/// How often a run waiting for its inputs is looked at again.
pub const WAIT_RECHECK: Duration = Duration::from_secs(30);
/// How often a run waiting for a concurrency slot is looked at again without being woken.
pub const SLOT_RECHECK: Duration = Duration::from_secs(15);
/// How long the waker lets the cache catch up with the status writes that freed slots.
const WAKE_SETTLE: Duration = Duration::from_millis(50);
/// `errored` message of a run whose Pod was deleted by someone else.
pub const MSG_POD_DELETED: &str = "the test Pod was deleted";

/// Waiting reasons that do not resolve by themselves: the run errors with the reason.
const STUCK_REASONS: [&str; 7] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// What the controller saw of the engine container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineObs {
    /// Not started yet (init containers running, image being pulled…).
    NotStarted,
    Running,
    Terminated {
        exit_code: i32,
        reason: Option<String>,
        /// The termination message (the runner's report, or a crash's last words).
        message: Option<String>,
    },
}

/// What the controller saw of the run's Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodObs {
    Missing,
    /// A Pod of that name not controlled by this run (left by a deleted run of the same
    /// name, waiting for garbage collection).
    Foreign,
    Present(PodState),
}

/// The parts of a Pod the decision depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace: Option<i64>,
    /// The Pod still carries [`FINALIZER`].
    pub finalizer: bool,
    /// `status.phase`.
    pub phase: Option<String>,
    pub engine: Option<EngineObs>,
    /// Why the Pod cannot make progress: a container waiting for a reason in
    /// [`STUCK_REASONS`], a failed init container, a failed Pod (eviction).
    pub failure: Option<String>,
}

impl PodState {
    fn completed(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }
}

fn waiting_failure(cs: &ContainerStatus) -> Option<String> {
    let w = cs.state.as_ref()?.waiting.as_ref()?;
    let reason = w.reason.as_deref()?;
    STUCK_REASONS
        .contains(&reason)
        .then(|| match w.message.as_deref() {
            Some(m) if !m.is_empty() => {
                format!("container {} cannot start: {reason}: {m}", cs.name)
            }
            _ => format!("container {} cannot start: {reason}", cs.name),
        })
}

/// Reduces the Pod to what [`decide`] needs. `run_uid` is the TestRun's uid.
pub fn observe_pod(pod: Option<&Pod>, run_uid: &str) -> PodObs {
    let Some(pod) = pod else {
        return PodObs::Missing;
    };
    let controlled = pod
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == run_uid);
    if !controlled {
        return PodObs::Foreign;
    }
    let status = pod.status.as_ref();
    let mut failure = None;
    for cs in status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(f) = waiting_failure(cs) {
            failure.get_or_insert(f);
        }
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref())
            && t.exit_code != 0
        {
            let detail = t
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .or(t.reason.as_deref())
                .unwrap_or("no message");
            failure.get_or_insert(format!(
                "init container {} failed with exit code {}: {detail}",
                cs.name, t.exit_code
            ));
        }
    }
    let engine_status = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == ENGINE_CONTAINER));
    let mut engine = None;
    if let Some(cs) = engine_status {
        if let Some(f) = waiting_failure(cs) {
            failure.get_or_insert(f);
        }
        let state = cs.state.as_ref();
        engine = Some(if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            EngineObs::Terminated {
                exit_code: t.exit_code,
                reason: t.reason.clone(),
                message: t.message.clone(),
            }
        } else if state.is_some_and(|s| s.running.is_some()) {
            EngineObs::Running
        } else {
            EngineObs::NotStarted
        });
    }
    let phase = status.and_then(|s| s.phase.clone());
    if phase.as_deref() == Some("Failed") && failure.is_none() {
        let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("Failed");
        let message = status.and_then(|s| s.message.as_deref()).unwrap_or("");
        failure = Some(
            format!("the test Pod failed: {reason} {message}")
                .trim_end()
                .to_owned(),
        );
    }
    PodObs::Present(PodState {
        deleting: pod.metadata.deletion_timestamp.is_some(),
        deletion_grace: pod.metadata.deletion_grace_period_seconds,
        finalizer: pod.finalizers().iter().any(|f| f == FINALIZER),
        phase,
        engine,
        failure,
    })
}

/// The result of a terminated engine container: its summary, or why there is none.
pub fn engine_result(
    exit_code: i32,
    reason: Option<&str>,
    message: Option<&str>,
) -> Result<TestSummary, String> {
    if reason == Some("OOMKilled") {
        return Err(format!(
            "the engine container ran out of memory and was killed (OOMKilled, exit code {exit_code})"
        ));
    }
    match message.map(RunnerReport::parse) {
        Some(Ok(report)) => match report.summary() {
            Some(summary) => Ok(summary),
            None => {
                let error = report.error.unwrap_or_else(|| "no test summary".to_owned());
                Err(match report.message {
                    Some(m) if !m.is_empty() => format!("{error}: {m}"),
                    _ => error,
                })
            }
        },
        _ => {
            let reason = reason.map(|r| format!(", {r}")).unwrap_or_default();
            Err(format!(
                "the test runner ended without a report (exit code {exit_code}{reason})"
            ))
        }
    }
}

/// What one reconcile does, in this order: create, delete, record, release.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Create the Secret and the Pod (a pending run without a Pod; needs a free slot).
    pub create_pod: bool,
    /// Delete the Pod with this grace period (seconds).
    pub delete_pod: Option<i64>,
    /// Record this transition.
    pub transition: Option<Transition>,
    /// The counts to record with a `finished` transition.
    pub summary: Option<TestSummary>,
    /// Remove [`FINALIZER`] from the Pod (after the transition is recorded).
    pub release: bool,
}

/// Decides what to do for a run in `state` with `cancel` requests whose Pod looks like
/// `pod`. Pure.
pub fn decide(state: TestRunState, cancel: CancelRequest, pod: &PodObs) -> Plan {
    let mut plan = Plan::default();
    if state.is_final() {
        if let PodObs::Present(p) = pod {
            plan.release = p.finalizer;
            // A Pod that can no longer do anything useful (stuck pulling an image, still
            // running after its run errored) is ended.
            if !p.deleting && !p.completed() {
                plan.delete_pod = Some(CANCEL_GRACE_SECONDS);
            }
        }
        return plan;
    }
    let p = match pod {
        PodObs::Missing | PodObs::Foreign if state == TestRunState::Pending => {
            plan.create_pod = pod == &PodObs::Missing;
            return plan;
        }
        PodObs::Missing | PodObs::Foreign => {
            plan.transition = Some(match cancel {
                CancelRequest::None => Transition::Errored(MSG_POD_DELETED.to_owned()),
                _ => Transition::on_exit(cancel, Err(MSG_POD_DELETED.to_owned())),
            });
            return plan;
        }
        PodObs::Present(p) => p,
    };
    if cancel == CancelRequest::ForceRequested {
        if p.deletion_grace != Some(0) {
            plan.delete_pod = Some(0);
        }
        plan.transition = Some(Transition::Canceled { forced: true });
        plan.release = true;
        return plan;
    }
    if let Some(EngineObs::Terminated {
        exit_code,
        reason,
        message,
    }) = &p.engine
    {
        let result = engine_result(*exit_code, reason.as_deref(), message.as_deref());
        let interrupted = message
            .as_deref()
            .and_then(|m| RunnerReport::parse(m).ok())
            .is_some_and(|r| r.interrupted);
        plan.release = true;
        if cancel == CancelRequest::None && p.deleting && interrupted {
            plan.transition = Some(Transition::Errored(MSG_POD_DELETED.to_owned()));
            return plan;
        }
        let summary = result.as_ref().ok().copied();
        let t = Transition::on_exit(cancel, result.map(|s| s.result()));
        if matches!(t, Transition::Finished(_)) {
            plan.summary = summary;
        }
        plan.transition = Some(t);
        return plan;
    }
    if p.deleting && cancel == CancelRequest::None {
        plan.transition = Some(Transition::Errored(MSG_POD_DELETED.to_owned()));
        plan.release = true;
        return plan;
    }
    if let Some(f) = &p.failure {
        plan.transition = Some(match cancel {
            CancelRequest::None => Transition::Errored(f.clone()),
            _ => Transition::on_exit(cancel, Err(f.clone())),
        });
        plan.release = true;
        if !p.deleting && !p.completed() {
            plan.delete_pod = Some(CANCEL_GRACE_SECONDS);
        }
        return plan;
    }
    if cancel == CancelRequest::Requested && !p.deleting {
        plan.delete_pod = Some(CANCEL_GRACE_SECONDS);
    }
    plan.transition = match p.engine {
        Some(EngineObs::Running) if state != TestRunState::Running => {
            Some(Transition::EngineStarted)
        }
        _ if state == TestRunState::Pending => Some(Transition::PodCreated),
        _ => None,
    };
    plan
}

/// The status fields this controller owns after `step` (everything it ever writes, so a
/// server-side apply never drops one). `id` and the cancel request times belong to
/// others and are left out.
pub fn next_status(
    current: Option<&TestRunStatus>,
    step: &Step,
    summary: Option<&TestSummary>,
    pod_name: Option<String>,
    generation: Option<i64>,
    now: Timestamp,
) -> TestRunStatus {
    let cur = current.cloned().unwrap_or_default();
    let mut ts = cur.status_timestamps.clone();
    let at = now.to_string();
    for key in &step.timestamps {
        key.set(&mut ts, &at);
    }
    let mut next = TestRunStatus {
        status: Some(step.to.as_str().to_owned()),
        test_status: step
            .test_status
            .map(|r| r.as_str().to_owned())
            .or(cur.test_status),
        tests_passed: cur.tests_passed,
        tests_failed: cur.tests_failed,
        tests_errored: cur.tests_errored,
        tests_skipped: cur.tests_skipped,
        status_timestamps: ts,
        pod_name: pod_name.or(cur.pod_name),
        message: step.message.clone().or(cur.message),
        observed_generation: generation,
        ..Default::default()
    };
    if let Some(s) = summary {
        let n = |v: u64| Some(i64::try_from(v).unwrap_or(i64::MAX));
        next.tests_passed = n(s.passed);
        next.tests_failed = n(s.failed);
        next.tests_errored = n(s.errored);
        next.tests_skipped = n(s.skipped);
    }
    let outcome = outcome_of(step.to, next.message.as_deref());
    next.conditions = kstatus_conditions(&cur.conditions, &outcome, generation, now);
    next
}

fn outcome_of(state: TestRunState, message: Option<&str>) -> Outcome {
    match state {
        TestRunState::Pending => {
            Outcome::progressing(REASON_WAITING_FOR_SLOT, "waiting for a slot")
        }
        TestRunState::Queued => Outcome::progressing("Queued", "the test Pod was created"),
        TestRunState::Running => Outcome::progressing("Running", "the tests are running"),
        TestRunState::Finished => Outcome::Ready {
            message: "the test run finished".to_owned(),
        },
        TestRunState::Canceled => Outcome::Ready {
            message: "the test run was canceled".to_owned(),
        },
        TestRunState::Errored => {
            Outcome::stalled("Errored", message.unwrap_or("the test run errored"))
        }
    }
}

/// State of the TestRun controller.
struct RunContext {
    base: Arc<Context>,
    orgs: Organizations,
    recorder: Recorder,
    runs: Store<TestRun>,
    /// Serialises admission; holds runs admitted by this process whose queued status the
    /// cache may not show yet.
    admitted: tokio::sync::Mutex<HashSet<ObjectRef<TestRun>>>,
    /// Failed log archive attempts per TestRun uid.
    archive_failures: std::sync::Mutex<HashMap<String, u32>>,
    /// Signalled when a run holding a slot ends (see [`wake_waiting`]).
    slot_freed: tokio::sync::Notify,
    /// Runs the waker wants reconciled now.
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<TestRun>>,
}

/// Runs the TestRun controller and the test Pod janitor until `shutdown` resolves.
pub async fn run<S>(ctx: Arc<Context>, orgs: Organizations, shutdown: S)
where
    S: std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
{
    let runs: Api<TestRun> = Api::all(ctx.client.clone());
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    // The runs' token Secrets are not watched: nothing reacts to them, and a cluster-wide
    // Secret watch would need list/watch on every Secret of the cluster.
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let controller = Controller::new(runs, watcher::Config::default())
        .owns(
            pods.clone(),
            watcher::Config::default().labels(LABEL_TEST_RUN),
        )
        .reconcile_on(woken);
    let rctx = Arc::new(RunContext {
        base: ctx.clone(),
        orgs,
        recorder: crate::new_recorder(&ctx.client),
        runs: controller.store(),
        admitted: tokio::sync::Mutex::new(HashSet::new()),
        archive_failures: std::sync::Mutex::new(HashMap::new()),
        slot_freed: tokio::sync::Notify::new(),
        wake,
    });
    let store = rctx.runs.clone();
    crate::metrics::observe_test_runs(store.clone());
    let waker = {
        let rctx = rctx.clone();
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                () = wake_waiting(&rctx) => {}
                () = shutdown => {}
            }
        }
    };
    let main = controller
        .graceful_shutdown_on(shutdown.clone())
        .run(
            |run, ctx| {
                crate::metrics::instrument(
                    crate::metrics::CONTROLLER_TEST_RUN,
                    run.as_ref(),
                    reconcile(run.clone(), ctx),
                )
            },
            error_policy,
            rctx,
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "test run reconcile");
            }
        });
    let janitor = Controller::new(pods, watcher::Config::default().labels(LABEL_TEST_RUN))
        .graceful_shutdown_on(shutdown)
        .run(
            janitor_reconcile,
            |_, _, _| Action::requeue(Duration::from_secs(10)),
            Arc::new((ctx.clone(), store)),
        )
        .for_each(|_| async {});
    tokio::join!(main, janitor, waker);
}

/// The waker: each time slots free up, reconciles the oldest runs waiting for a slot that
/// now fit within the global and their organization's limit.
async fn wake_waiting(ctx: &RunContext) {
    loop {
        ctx.slot_freed.notified().await;
        // Our own status writes reach the cache a moment later.
        tokio::time::sleep(WAKE_SETTLE).await;
        let limits = org_limits(ctx);
        let picked = {
            let mut admitted = ctx.admitted.lock().await;
            let all = ctx.runs.state();
            let (global, per_ns) = active_by_namespace(&all, &mut admitted);
            let waiting = all.iter().filter(|r| waiting_for_slot(r)).map(|r| {
                let ns = r.namespace().unwrap_or_default();
                let limit = limits.get(&ns).copied().flatten();
                (
                    r.creation_timestamp().map(|t| t.0),
                    r.name_any(),
                    ns,
                    limit,
                    ObjectRef::from_obj(r.as_ref()),
                )
            });
            pick_waiting(
                waiting.collect(),
                global,
                per_ns,
                ctx.base.settings.test_run_concurrency,
            )
        };
        for r in picked {
            let _ = ctx.wake.unbounded_send(r);
        }
    }
}

/// Concurrency limit of each organization namespace.
fn org_limits(ctx: &RunContext) -> HashMap<String, Option<i32>> {
    ctx.orgs
        .store()
        .state()
        .iter()
        .filter_map(|o| {
            let ns = o
                .status
                .as_ref()
                .and_then(|s| s.namespace.clone())
                .or_else(|| o.spec.namespace.clone())?;
            Some((ns, o.spec.settings.test_runs.concurrency))
        })
        .collect()
}

/// A pending run whose last reconcile found no free slot.
fn waiting_for_slot(run: &TestRun) -> bool {
    run.meta().deletion_timestamp.is_none()
        && run.status.as_ref().is_some_and(|s| {
            s.status.as_deref() == Some(TestRunState::Pending.as_str())
                && s.conditions
                    .iter()
                    .any(|c| c.reason == REASON_WAITING_FOR_SLOT)
        })
}

/// A waiting run as the waker sees it: creation time, name, namespace, its organization's
/// limit, and the reference to reconcile.
pub type Waiting<R> = (
    Option<k8s_openapi::jiff::Timestamp>,
    String,
    String,
    Option<i32>,
    R,
);

/// Picks, oldest first (then by name), the waiting runs that fit in the free slots given
/// `global` active runs and `per_ns` active runs per namespace. A run that does not fit
/// its organization's limit does not stop younger runs of other organizations.
pub fn pick_waiting<R>(
    mut waiting: Vec<Waiting<R>>,
    mut global: usize,
    mut per_ns: HashMap<String, usize>,
    global_limit: u32,
) -> Vec<R> {
    waiting.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut picked = Vec::new();
    for (_, _, ns, limit, r) in waiting {
        let local = per_ns.get(&ns).copied().unwrap_or(0);
        if !slot_free(global, local, global_limit, limit) {
            if global_limit != 0 && global >= global_limit as usize {
                break;
            }
            continue;
        }
        global += 1;
        *per_ns.entry(ns).or_insert(0) += 1;
        picked.push(r);
    }
    picked
}

fn error_policy(run: Arc<TestRun>, err: &Error, _ctx: Arc<RunContext>) -> Action {
    tracing::warn!(error = %err, name = %run.name_any(), kind = err.metric_label(), "test run reconcile failed");
    if err.is_transient() {
        Action::requeue(Duration::from_secs(5))
    } else {
        Action::await_change()
    }
}

async fn reconcile(run: Arc<TestRun>, ctx: Arc<RunContext>) -> Result<Action, Error> {
    let ns = run
        .namespace()
        .ok_or_else(|| Error::Invalid("test run without namespace".into()))?;
    let uid = run
        .uid()
        .ok_or_else(|| Error::Invalid("test run without uid".into()))?;
    let state = TestRunState::of(run.status.as_ref()).map_err(|e| Error::Invalid(e.to_string()))?;
    let cancel = CancelRequest::of(run.status.as_ref());
    let pod_name = testpod::pod_name(&run.name_any());
    let pods: Api<Pod> = Api::namespaced(ctx.base.client.clone(), &ns);
    let me = ObjectRef::from_obj(run.as_ref());
    let pod = if run.meta().deletion_timestamp.is_some() {
        // A run being deleted only lets go of its Pod.
        if let Some(p) = pods.get_opt(&pod_name).await? {
            release(&pods, &p).await?;
        }
        return Ok(Action::await_change());
    } else {
        pods.get_opt(&pod_name).await?
    };
    let obs = observe_pod(pod.as_ref(), &uid);
    let plan = decide(state, cancel, &obs);

    if plan.create_pod {
        return admit(&run, &ctx, &ns, &pod_name, me).await;
    }
    let regarding = run.object_ref(&());
    let mut final_now = state.is_final();
    if let Some(grace) = plan.delete_pod {
        let dp = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace).unwrap_or(0)),
            ..DeleteParams::default()
        };
        match pods.delete(&pod_name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        if cancel != CancelRequest::None && !state.is_final() {
            let note = if grace == 0 {
                format!("force-canceling: deleting Pod {pod_name} at once")
            } else {
                format!("canceling: deleting Pod {pod_name} with a {grace}s grace period")
            };
            publish_event(
                &ctx.recorder,
                &regarding,
                EventType::Normal,
                "Canceling",
                "Cancel",
                note,
            )
            .await;
        }
    }
    if let Some(t) = &plan.transition {
        match transition(state, cancel, t) {
            Ok(step) => {
                let status = next_status(
                    run.status.as_ref(),
                    &step,
                    plan.summary.as_ref(),
                    Some(pod_name.clone()),
                    run.meta().generation,
                    Timestamp::now(),
                );
                write_status(&ctx, &run, &status).await?;
                if step.to != state {
                    record_event(&ctx, &regarding, &step, plan.summary.as_ref()).await;
                }
                if step.to.is_final() {
                    final_now = true;
                    if matches!(state, TestRunState::Queued | TestRunState::Running) {
                        ctx.slot_freed.notify_one();
                    }
                    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), &ns);
                    match secrets.delete(&pod_name, &DeleteParams::default()).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => tracing::debug!(error = %e, "deleting the token secret"),
                    }
                }
            }
            Err(e) => {
                // A transition that is not allowed any more (another actor moved the run):
                // nothing to record; the next reconcile sees the new state.
                tracing::debug!(error = %e, name = %run.name_any(), "transition refused");
                if !state.is_final() {
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
            }
        }
    }
    if plan.release
        && let Some(p) = &pod
    {
        if final_now && !archive_with_retries(&ctx, &run, &pods, &pod_name).await {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        release(&pods, p).await?;
    }
    Ok(if state.is_final() && !plan.release {
        Action::await_change()
    } else {
        Action::requeue(Duration::from_secs(60))
    })
}

async fn record_event(
    ctx: &RunContext,
    regarding: &ObjectReference,
    step: &Step,
    summary: Option<&TestSummary>,
) {
    let (type_, reason, note) = match step.to {
        TestRunState::Pending => return,
        TestRunState::Queued => (
            EventType::Normal,
            "Queued",
            "the test Pod was created".to_owned(),
        ),
        TestRunState::Running => (EventType::Normal, "Running", "the tests started".to_owned()),
        TestRunState::Finished => {
            let counts = summary
                .map(|s| {
                    format!(
                        ": {} passed, {} failed, {} errored, {} skipped",
                        s.passed, s.failed, s.errored, s.skipped
                    )
                })
                .unwrap_or_default();
            let result = step.test_status.unwrap_or(TestResult::Pass).as_str();
            let type_ = if step.test_status == Some(TestResult::Fail) {
                EventType::Warning
            } else {
                EventType::Normal
            };
            (
                type_,
                "Finished",
                format!("the tests finished with result {result}{counts}"),
            )
        }
        TestRunState::Canceled => (
            EventType::Normal,
            "Canceled",
            "the test run was canceled".to_owned(),
        ),
        TestRunState::Errored => (
            EventType::Warning,
            "Errored",
            step.message
                .clone()
                .unwrap_or_else(|| "the test run errored".to_owned()),
        ),
    };
    publish_event(&ctx.recorder, regarding, type_, reason, "Reconcile", note).await;
}

async fn write_status(
    ctx: &RunContext,
    run: &TestRun,
    status: &TestRunStatus,
) -> Result<(), Error> {
    let ns = run.namespace().unwrap_or_default();
    let api: Api<TestRun> = Api::namespaced(ctx.base.client.clone(), &ns);
    let body = json!({"apiVersion": API_VERSION, "kind": "TestRun", "status": status});
    let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
    api.patch_status(&run.name_any(), &pp, &Patch::Apply(&body))
        .await?;
    crate::metrics::test_run_status_written(
        run.status.as_ref(),
        status,
        run.meta().creation_timestamp.as_ref(),
    );
    Ok(())
}

/// Archives the engine log of `run`'s Pod `pod_name` (see [`archive_log`]). True when the
/// Pod may be released: archived, nothing to archive, or given up after
/// [`ARCHIVE_ATTEMPTS`] transient failures (or one permanent one).
async fn archive_with_retries(
    ctx: &RunContext,
    run: &TestRun,
    pods: &Api<Pod>,
    pod_name: &str,
) -> bool {
    let key = run.uid().unwrap_or_default();
    let result = archive_log(&ctx.base.client, run, pods, pod_name).await;
    let mut failures = ctx
        .archive_failures
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match result {
        Ok(()) => {
            failures.remove(&key);
            true
        }
        Err(e) => {
            let n = failures.entry(key.clone()).or_insert(0);
            *n += 1;
            if e.is_transient() && *n < ARCHIVE_ATTEMPTS {
                tracing::warn!(error = %e, pod = %pod_name, attempt = *n, "archiving the engine log failed; retrying");
                false
            } else {
                tracing::warn!(error = %e, pod = %pod_name, attempt = *n, "archiving the engine log failed; releasing the Pod without it");
                failures.remove(&key);
                true
            }
        }
    }
}

/// Copies the `engine` container's log of Pod `pod_name` into the run's log archive
/// ConfigMap ([`testpod::build_log_archive`]). An archive that exists already is kept; a
/// log the kubelet cannot serve (400: the container never started; 404: the Pod is gone)
/// leaves nothing to archive.
pub async fn archive_log(
    client: &kube::Client,
    run: &TestRun,
    pods: &Api<Pod>,
    pod_name: &str,
) -> Result<(), Error> {
    let ns = run
        .namespace()
        .ok_or_else(|| Error::Invalid("test run without namespace".into()))?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let name = testpod::log_archive_name(pod_name);
    if cms.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let lp = LogParams {
        container: Some(ENGINE_CONTAINER.to_owned()),
        ..LogParams::default()
    };
    let log = match pods.logs(pod_name, &lp).await {
        Ok(log) => log,
        Err(kube::Error::Api(s)) if s.code == 400 || s.code == 404 => {
            tracing::debug!(pod = %pod_name, message = %s.message, "no engine log to archive");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let run_id = testpod::run_id(run).map_or_else(|| run.name_any(), str::to_owned);
    let cm = testpod::build_log_archive(run, &run_id, pod_name, &log)?;
    match cms.create(&PostParams::default(), &cm).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes [`FINALIZER`] from the Pod. The merge patch carries the Pod's
/// `resourceVersion`, so a concurrent change makes it fail with 409 (and retry) instead of
/// dropping someone else's finalizer.
async fn release(pods: &Api<Pod>, pod: &Pod) -> Result<(), Error> {
    let current = pod.finalizers();
    if !current.iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    let rest: Vec<&String> = current.iter().filter(|f| *f != FINALIZER).collect();
    let patch = json!({"metadata": {
        "resourceVersion": pod.resource_version(),
        "finalizers": rest,
    }});
    match pods
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Err(Error::Conflict(format!("pod {} changed", pod.name_any())))
        }
        Err(e) => Err(e.into()),
    }
}

/// Counts the runs holding a slot: globally and in `ns`.
fn active_counts(
    runs: &Store<TestRun>,
    admitted: &mut HashSet<ObjectRef<TestRun>>,
    ns: &str,
) -> (usize, usize) {
    let (global, per_ns) = active_by_namespace(&runs.state(), admitted);
    (global, per_ns.get(ns).copied().unwrap_or(0))
}

/// Counts the runs holding a slot: globally and per namespace. Forgets admitted runs the
/// cache shows past `pending` or no longer has.
fn active_by_namespace(
    all: &[Arc<TestRun>],
    admitted: &mut HashSet<ObjectRef<TestRun>>,
) -> (usize, HashMap<String, usize>) {
    let mut global = 0;
    let mut per_ns: HashMap<String, usize> = HashMap::new();
    let mut pending_admitted: HashSet<&ObjectRef<TestRun>> = HashSet::new();
    for r in all {
        let state = TestRunState::of(r.status.as_ref()).unwrap_or(TestRunState::Pending);
        let active = match state {
            TestRunState::Queued | TestRunState::Running => true,
            // Only hash the runs that can be in `admitted`: few, next to the waiting ones.
            TestRunState::Pending if !admitted.is_empty() => {
                let key = ObjectRef::from_obj(r.as_ref());
                match admitted.get(&key) {
                    Some(k) => pending_admitted.insert(k),
                    None => false,
                }
            }
            _ => false,
        };
        if active {
            global += 1;
            let ns = r.metadata.namespace.as_deref().unwrap_or_default();
            match per_ns.get_mut(ns) {
                Some(n) => *n += 1,
                None => {
                    per_ns.insert(ns.to_owned(), 1);
                }
            }
        }
    }
    let keep: HashSet<ObjectRef<TestRun>> = pending_admitted.into_iter().cloned().collect();
    *admitted = keep;
    (global, per_ns)
}

/// The Reconciling message of a run waiting for a slot.
pub fn wait_message(global_limit: u32, org_limit: Option<i32>) -> String {
    let global = match global_limit {
        0 => "no global limit".to_owned(),
        n => format!("at most {n} at once"),
    };
    match org_limit {
        Some(l) if l >= 1 => {
            format!("waiting for a test run slot ({global}, {l} in this organization)")
        }
        _ => format!("waiting for a test run slot ({global})"),
    }
}

/// Whether a run may start with `global`/`local` runs active: `0` global limit means
/// unlimited, an organization limit below 1 is ignored.
pub fn slot_free(global: usize, local: usize, global_limit: u32, org_limit: Option<i32>) -> bool {
    let global_ok = global_limit == 0 || global < global_limit as usize;
    let local_ok = match org_limit {
        Some(l) if l >= 1 => local < l as usize,
        _ => true,
    };
    global_ok && local_ok
}

/// Starts a pending run when a slot is free: creates the Secret and the Pod, records
/// `queued`. Otherwise records that it waits.
async fn admit(
    run: &TestRun,
    ctx: &RunContext,
    ns: &str,
    pod_name: &str,
    me: ObjectRef<TestRun>,
) -> Result<Action, Error> {
    let org_name = ctx.orgs.owner_of(ns).await?;
    let org: Option<Arc<Organization>> = org_name.as_ref().and_then(|_| {
        let all = ctx.orgs.store().state();
        owning_organization(all.iter().map(Arc::as_ref), ns)
            .and_then(|o| all.iter().find(|a| a.uid() == o.uid()).cloned())
    });
    let Some(org) = org else {
        wait_status(
            ctx,
            run,
            Outcome::stalled(
                REASON_ORGANIZATION_NOT_FOUND,
                format!("no Organization owns namespace {ns}"),
            ),
        )
        .await?;
        return Ok(Action::requeue(WAIT_RECHECK));
    };
    let org_settings = &org.spec.settings.test_runs;
    let Some(run_id) = testpod::run_id(run).map(str::to_owned) else {
        wait_status(
            ctx,
            run,
            Outcome::progressing(REASON_WAITING_FOR_INPUTS, "waiting for the run's ID"),
        )
        .await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    // Without a free slot there is nothing to look up (checked again below, under the
    // lock, before the slot is taken).
    if !has_slot(ctx, ns, &me, org_settings.concurrency).await {
        return wait_for_slot(ctx, run, org_settings.concurrency).await;
    }
    let client = &ctx.base.client;
    let cv_api: Api<ConfigurationVersion> = Api::namespaced(client.clone(), ns);
    let cv_name = &run.spec.configuration_version;
    let cv = cv_api.get_opt(cv_name).await?;
    let cv_status = cv.as_ref().and_then(|c| c.status.as_ref());
    match cv_status.and_then(|s| s.status.as_deref()) {
        Some("errored" | "archived") => {
            let what = cv_status.and_then(|s| s.status.clone()).unwrap_or_default();
            let detail = cv_status
                .and_then(|s| s.error_message.clone())
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            let t =
                Transition::Errored(format!("configuration version {cv_name} is {what}{detail}"));
            return fail_pending(ctx, run, &t).await;
        }
        Some("uploaded") => {}
        _ => {
            wait_status(
                ctx,
                run,
                Outcome::progressing(
                    REASON_WAITING_FOR_INPUTS,
                    format!("waiting for the upload of configuration version {cv_name}"),
                ),
            )
            .await?;
            return Ok(Action::requeue(WAIT_RECHECK));
        }
    }
    let cv_id = cv
        .as_ref()
        .and_then(|c| c.labels().get(terrace_crds::constants::LABEL_ID).cloned())
        .or_else(|| cv_status.and_then(|s| s.id.clone()));
    let Some(cv_id) = cv_id else {
        wait_status(
            ctx,
            run,
            Outcome::progressing(
                REASON_WAITING_FOR_INPUTS,
                format!("waiting for the ID of configuration version {cv_name}"),
            ),
        )
        .await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    };
    let modules: Api<RegistryModule> = Api::namespaced(client.clone(), ns);
    if modules.get_opt(&run.spec.module).await?.is_none() {
        wait_status(
            ctx,
            run,
            Outcome::progressing(
                REASON_WAITING_FOR_INPUTS,
                format!("waiting for registry module {}", run.spec.module),
            ),
        )
        .await?;
        return Ok(Action::requeue(WAIT_RECHECK));
    }

    let vars_api: Api<TestVariable> = Api::namespaced(client.clone(), ns);
    let variables = vars_api.list(&ListParams::default()).await?.items;
    let inputs = PodInputs {
        run,
        run_id: &run_id,
        organization: &org.name_any(),
        configuration_version_id: &cv_id,
        variables: &variables,
        org_settings,
        settings: &ctx.base.settings,
    };
    // Admission is serialised only around the count: a run takes its slot (joins
    // `admitted`) under the lock, then creates its Secret and Pod with the lock released,
    // so admissions proceed in parallel and the cache's lag cannot admit too many.
    {
        let mut admitted = ctx.admitted.lock().await;
        if !slot_for(ctx, &mut admitted, ns, &me, org_settings.concurrency) {
            drop(admitted);
            return wait_for_slot(ctx, run, org_settings.concurrency).await;
        }
        admitted.insert(me.clone());
    }
    match create_run_objects(ctx, ns, &inputs).await {
        Ok(()) => {}
        Err(e) => {
            // Give the slot back: the next attempt takes one again.
            ctx.admitted.lock().await.remove(&me);
            return Err(e);
        }
    }
    let step = transition(
        TestRunState::Pending,
        CancelRequest::None,
        &Transition::PodCreated,
    )
    .map_err(|e| Error::Invalid(e.to_string()))?;
    let status = next_status(
        run.status.as_ref(),
        &step,
        None,
        Some(pod_name.to_owned()),
        run.meta().generation,
        Timestamp::now(),
    );
    write_status(ctx, run, &status).await?;
    record_event(ctx, &run.object_ref(&()), &step, None).await;
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// Whether `me` holds a slot or one is free for it (the lock held by the caller).
fn slot_for(
    ctx: &RunContext,
    admitted: &mut HashSet<ObjectRef<TestRun>>,
    ns: &str,
    me: &ObjectRef<TestRun>,
    org_limit: Option<i32>,
) -> bool {
    let (global, local) = active_counts(&ctx.runs, admitted, ns);
    admitted.contains(me)
        || slot_free(
            global,
            local,
            ctx.base.settings.test_run_concurrency,
            org_limit,
        )
}

/// [`slot_for`], taking the lock.
async fn has_slot(
    ctx: &RunContext,
    ns: &str,
    me: &ObjectRef<TestRun>,
    org_limit: Option<i32>,
) -> bool {
    let mut admitted = ctx.admitted.lock().await;
    slot_for(ctx, &mut admitted, ns, me, org_limit)
}

/// Records that a pending run waits for a slot, and looks at it again later (the waker
/// usually comes first).
async fn wait_for_slot(
    ctx: &RunContext,
    run: &TestRun,
    org_limit: Option<i32>,
) -> Result<Action, Error> {
    // A message that does not change with the counts: one status write per wait.
    let msg = wait_message(ctx.base.settings.test_run_concurrency, org_limit);
    wait_status(ctx, run, Outcome::progressing(REASON_WAITING_FOR_SLOT, msg)).await?;
    Ok(Action::requeue(SLOT_RECHECK))
}

/// Creates a run's token Secret and Pod; either existing already (an earlier attempt, an
/// operator restarted in between) is fine.
async fn create_run_objects(
    ctx: &RunContext,
    ns: &str,
    inputs: &PodInputs<'_>,
) -> Result<(), Error> {
    let client = &ctx.base.client;
    let secret = testpod::build_secret(inputs, &testpod::new_token())?;
    let pod = testpod::build_pod(inputs)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
        ..Default::default()
    };
    for res in [
        secrets.create(&pp, &secret).await.map(|_| ()),
        pods.create(&pp, &pod).await.map(|_| ()),
    ] {
        match res {
            Ok(()) => {}
            // Created by an earlier attempt (an operator restarted in between).
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Records a pending run's Reconciling/Stalled condition, when it changed.
async fn wait_status(ctx: &RunContext, run: &TestRun, outcome: Outcome) -> Result<(), Error> {
    let cur = run.status.clone().unwrap_or_default();
    let conditions = kstatus_conditions(
        &cur.conditions,
        &outcome,
        run.meta().generation,
        Timestamp::now(),
    );
    let same = cur.status.as_deref() == Some("pending")
        && conditions.iter().all(|c| {
            cur.conditions.iter().any(|o| {
                o.type_ == c.type_
                    && o.status == c.status
                    && o.reason == c.reason
                    && o.message == c.message
            })
        });
    if same {
        return Ok(());
    }
    let status = TestRunStatus {
        status: Some(TestRunState::Pending.as_str().to_owned()),
        status_timestamps: cur.status_timestamps,
        observed_generation: run.meta().generation,
        conditions,
        ..Default::default()
    };
    write_status(ctx, run, &status).await
}

/// Errors a pending run that can never start.
async fn fail_pending(ctx: &RunContext, run: &TestRun, t: &Transition) -> Result<Action, Error> {
    let step = transition(TestRunState::Pending, CancelRequest::None, t)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let status = next_status(
        run.status.as_ref(),
        &step,
        None,
        None,
        run.meta().generation,
        Timestamp::now(),
    );
    write_status(ctx, run, &status).await?;
    record_event(ctx, &run.object_ref(&()), &step, None).await;
    Ok(Action::await_change())
}

/// The janitor: a test Pod that is being deleted while its TestRun is gone (deleted with
/// background propagation) loses its finalizer, else it would stay forever.
async fn janitor_reconcile(
    pod: Arc<Pod>,
    ctx: Arc<(Arc<Context>, Store<TestRun>)>,
) -> Result<Action, Error> {
    let (base, store) = ctx.as_ref();
    if pod.metadata.deletion_timestamp.is_none() || !pod.finalizers().iter().any(|f| f == FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let ns = pod.namespace().unwrap_or_default();
    let Some(owner) = pod.owner_references().iter().find(|o| o.kind == "TestRun") else {
        // Not ours to keep.
        release(&Api::namespaced(base.client.clone(), &ns), &pod).await?;
        return Ok(Action::await_change());
    };
    let cached = store
        .get(&ObjectRef::new(&owner.name).within(&ns))
        .is_some_and(|r| r.uid().as_deref() == Some(owner.uid.as_str()));
    if cached {
        // The TestRun controller handles it.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let runs: Api<TestRun> = Api::namespaced(base.client.clone(), &ns);
    let live = runs.get_opt(&owner.name).await?;
    if live.is_some_and(|r| r.uid().as_deref() == Some(owner.uid.as_str())) {
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    release(&Api::namespaced(base.client.clone(), &ns), &pod).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use terrace_crds::testoutput::TestStatus;
    use terrace_crds::testrun::TimestampKey;

    const PASS: &str = r#"{"status":"pass","passed":2,"failed":0,"errored":0,"skipped":1,"exitCode":0,"interrupted":false}"#;
    const FAIL: &str = r#"{"status":"fail","passed":1,"failed":1,"errored":0,"skipped":0,"exitCode":1,"interrupted":false}"#;
    const NO_SUMMARY: &str = r#"{"error":"engine exited without a test summary","message":"Invalid block","exitCode":1,"interrupted":false}"#;
    const INTERRUPTED: &str = r#"{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0,"exitCode":0,"interrupted":true}"#;

    fn present(engine: Option<EngineObs>) -> PodObs {
        PodObs::Present(PodState {
            finalizer: true,
            phase: Some("Running".into()),
            engine,
            ..Default::default()
        })
    }

    fn terminated(message: &str) -> Option<EngineObs> {
        Some(EngineObs::Terminated {
            exit_code: 0,
            reason: Some("Completed".into()),
            message: Some(message.into()),
        })
    }

    fn with(obs: PodObs, f: impl FnOnce(&mut PodState)) -> PodObs {
        match obs {
            PodObs::Present(mut p) => {
                f(&mut p);
                PodObs::Present(p)
            }
            o => o,
        }
    }

    use CancelRequest as C;
    use TestRunState as S;

    /// A pending run without a Pod asks for one; a leftover Pod of another run of the same
    /// name (garbage collection pending) makes it wait instead of adopting it.
    #[test]
    fn pending_runs() {
        assert!(decide(S::Pending, C::None, &PodObs::Missing).create_pod);
        assert_eq!(
            decide(S::Pending, C::None, &PodObs::Foreign),
            Plan::default()
        );
        // Restart safety: a pending run whose Pod exists (created before a crash) is
        // queued, not given a second Pod.
        let p = decide(S::Pending, C::None, &present(None));
        assert!(!p.create_pod);
        assert_eq!(p.transition, Some(Transition::PodCreated));
        // ... or running directly when the engine already runs.
        let p = decide(S::Pending, C::None, &present(Some(EngineObs::Running)));
        assert_eq!(p.transition, Some(Transition::EngineStarted));
    }

    /// Copies the kubelet's container states: running → EngineStarted once.
    #[test]
    fn engine_started() {
        let p = decide(S::Queued, C::None, &present(Some(EngineObs::Running)));
        assert_eq!(p.transition, Some(Transition::EngineStarted));
        assert_eq!(
            decide(S::Running, C::None, &present(Some(EngineObs::Running))),
            Plan::default()
        );
        assert_eq!(
            decide(S::Queued, C::None, &present(Some(EngineObs::NotStarted))),
            Plan::default()
        );
    }

    /// The runner's report in the termination message gives the result and counts; the
    /// finalizer is released after recording.
    #[test]
    fn terminated_engine_results() {
        let p = decide(S::Running, C::None, &present(terminated(PASS)));
        assert_eq!(p.transition, Some(Transition::Finished(TestResult::Pass)));
        let s = p.summary.unwrap();
        assert_eq!((s.passed, s.failed, s.errored, s.skipped), (2, 0, 0, 1));
        assert!(p.release);
        let p = decide(S::Running, C::None, &present(terminated(FAIL)));
        assert_eq!(p.transition, Some(Transition::Finished(TestResult::Fail)));
        // An engine that finished before the controller saw it running.
        let p = decide(S::Queued, C::None, &present(terminated(PASS)));
        assert_eq!(p.transition, Some(Transition::Finished(TestResult::Pass)));
        let p = decide(S::Running, C::None, &present(terminated(NO_SUMMARY)));
        assert_eq!(
            p.transition,
            Some(Transition::Errored(
                "engine exited without a test summary: Invalid block".into()
            ))
        );
        assert_eq!(p.summary, None);
    }

    /// Copies the kubelet: a crashed runner leaves no report (empty message or a log tail);
    /// an OOM kill is reason `OOMKilled` with exit code 137.
    #[test]
    fn crash_and_oom() {
        let crash = Some(EngineObs::Terminated {
            exit_code: 2,
            reason: Some("Error".into()),
            message: Some("panicked at src/main.rs".into()),
        });
        let p = decide(S::Running, C::None, &present(crash));
        assert_eq!(
            p.transition,
            Some(Transition::Errored(
                "the test runner ended without a report (exit code 2, Error)".into()
            ))
        );
        let oom = Some(EngineObs::Terminated {
            exit_code: 137,
            reason: Some("OOMKilled".into()),
            message: None,
        });
        let p = decide(S::Running, C::None, &present(oom));
        let Some(Transition::Errored(m)) = p.transition else {
            panic!("not errored")
        };
        assert!(m.contains("OOMKilled"), "{m}");
    }

    /// Cancel: delete with a grace period once, then wait for the engine to end; its exit
    /// is recorded as canceled whatever it printed.
    #[test]
    fn cancel_flow() {
        let p = decide(S::Running, C::Requested, &present(Some(EngineObs::Running)));
        assert_eq!(p.delete_pod, Some(CANCEL_GRACE_SECONDS));
        assert_eq!(p.transition, None);
        let deleting = with(present(Some(EngineObs::Running)), |p| {
            p.deleting = true;
            p.deletion_grace = Some(30);
        });
        assert_eq!(decide(S::Running, C::Requested, &deleting), Plan::default());
        let ended = with(present(terminated(INTERRUPTED)), |p| p.deleting = true);
        let p = decide(S::Running, C::Requested, &ended);
        assert_eq!(p.transition, Some(Transition::Canceled { forced: false }));
        assert_eq!(p.summary, None);
        assert!(p.release);
    }

    /// Force-cancel: delete with grace 0 (unless already done) and record canceled at once.
    #[test]
    fn force_cancel_flow() {
        let deleting = with(present(Some(EngineObs::Running)), |p| {
            p.deleting = true;
            p.deletion_grace = Some(30);
        });
        let p = decide(S::Running, C::ForceRequested, &deleting);
        assert_eq!(p.delete_pod, Some(0));
        assert_eq!(p.transition, Some(Transition::Canceled { forced: true }));
        assert!(p.release);
        let gone = with(deleting, |p| p.deletion_grace = Some(0));
        assert_eq!(
            decide(S::Running, C::ForceRequested, &gone).delete_pod,
            None
        );
        // The Pod already gone after a force-cancel: canceled, not errored.
        let p = decide(S::Running, C::ForceRequested, &PodObs::Missing);
        assert_eq!(p.transition, Some(Transition::Canceled { forced: true }));
    }

    /// A Pod deleted by someone else: gone, terminating, or ended by the interrupt of that
    /// deletion → errored with MSG_POD_DELETED.
    #[test]
    fn pod_deleted_by_someone_else() {
        for s in [S::Queued, S::Running] {
            let p = decide(s, C::None, &PodObs::Missing);
            assert_eq!(
                p.transition,
                Some(Transition::Errored(MSG_POD_DELETED.into()))
            );
            let p = decide(s, C::None, &PodObs::Foreign);
            assert_eq!(
                p.transition,
                Some(Transition::Errored(MSG_POD_DELETED.into()))
            );
        }
        let deleting = with(present(Some(EngineObs::Running)), |p| p.deleting = true);
        let p = decide(S::Running, C::None, &deleting);
        assert_eq!(
            p.transition,
            Some(Transition::Errored(MSG_POD_DELETED.into()))
        );
        assert!(p.release);
        let ended = with(present(terminated(INTERRUPTED)), |p| p.deleting = true);
        let p = decide(S::Running, C::None, &ended);
        assert_eq!(
            p.transition,
            Some(Transition::Errored(MSG_POD_DELETED.into()))
        );
        // A run that finished normally before the deletion keeps its result.
        let ended = with(present(terminated(PASS)), |p| p.deleting = true);
        let p = decide(S::Running, C::None, &ended);
        assert_eq!(p.transition, Some(Transition::Finished(TestResult::Pass)));
    }

    /// A stuck Pod (image pull failure…) errors the run with the reason and is deleted.
    #[test]
    fn stuck_pod() {
        let stuck = with(present(None), |p| {
            p.phase = Some("Pending".into());
            p.failure = Some("container engine cannot start: ErrImagePull".into());
        });
        let p = decide(S::Queued, C::None, &stuck);
        assert_eq!(
            p.transition,
            Some(Transition::Errored(
                "container engine cannot start: ErrImagePull".into()
            ))
        );
        assert_eq!(p.delete_pod, Some(CANCEL_GRACE_SECONDS));
        assert!(p.release);
    }

    /// Final runs only let go of their Pod (and end one that still lingers).
    #[test]
    fn final_runs() {
        for s in [S::Finished, S::Errored, S::Canceled] {
            assert_eq!(decide(s, C::None, &PodObs::Missing), Plan::default());
            let done = with(present(terminated(PASS)), |p| {
                p.phase = Some("Succeeded".into())
            });
            let p = decide(s, C::None, &done);
            assert!(p.release);
            assert_eq!(p.delete_pod, None);
            assert_eq!(p.transition, None);
            let lingering = decide(s, C::None, &present(Some(EngineObs::Running)));
            assert_eq!(lingering.delete_pod, Some(CANCEL_GRACE_SECONDS));
            let released = with(done, |p| p.finalizer = false);
            assert_eq!(decide(s, C::None, &released), Plan::default());
        }
    }

    fn pod_with(status: PodStatus, uid: &str) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("r-run".into()),
                finalizers: Some(vec![FINALIZER.into()]),
                owner_references: Some(vec![OwnerReference {
                    api_version: API_VERSION.into(),
                    kind: "TestRun".into(),
                    name: "r".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: None,
            status: Some(status),
        }
    }

    fn cs(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            ..Default::default()
        }
    }

    /// Copies the kubelet's Pod status shapes: container states, waiting reasons of image
    /// pull failures, failed init containers, terminated engine with its message.
    #[test]
    fn observe_pod_shapes() {
        assert_eq!(observe_pod(None, "u"), PodObs::Missing);
        assert_eq!(
            observe_pod(Some(&pod_with(PodStatus::default(), "other")), "u"),
            PodObs::Foreign
        );
        let PodObs::Present(p) = observe_pod(
            Some(&pod_with(
                PodStatus {
                    phase: Some("Pending".into()),
                    ..Default::default()
                },
                "u",
            )),
            "u",
        ) else {
            panic!()
        };
        assert!(p.finalizer && !p.deleting && p.engine.is_none() && p.failure.is_none());

        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image \"x\"".into()),
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, waiting)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u") else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some("container engine cannot start: ImagePullBackOff: Back-off pulling image \"x\"")
        );
        assert_eq!(p.engine, Some(EngineObs::NotStarted));

        let init_failed = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                message: Some("downloading the configuration archive: 401\n".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Failed".into()),
            init_container_statuses: Some(vec![cs("fetch", init_failed)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u") else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some(
                "init container fetch failed with exit code 1: downloading the configuration archive: 401"
            )
        );

        let running = ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(Timestamp::now())),
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, running)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u") else {
            panic!()
        };
        assert_eq!(p.engine, Some(EngineObs::Running));

        let done = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                message: Some(PASS.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Succeeded".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, done)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u") else {
            panic!()
        };
        assert_eq!(
            p.engine,
            terminated(PASS).map(|e| match e {
                EngineObs::Terminated { message, .. } => EngineObs::Terminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    message
                },
                o => o,
            })
        );
        assert!(p.failure.is_none());

        // An evicted Pod.
        let st = PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            message: Some("The node was low on resource: memory.".into()),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u") else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some("the test Pod failed: Evicted The node was low on resource: memory.")
        );
    }

    /// Global and organization limits; 0 global means unlimited.
    #[test]
    fn slots() {
        assert!(slot_free(0, 0, 1, None));
        assert!(!slot_free(1, 0, 1, None));
        assert!(slot_free(1000, 0, 0, None));
        assert!(!slot_free(1, 1, 50, Some(1)));
        assert!(slot_free(1, 0, 50, Some(1)));
        assert!(slot_free(5, 5, 50, Some(0)));
    }

    fn waiting(secs: i64, name: &str, ns: &str, limit: Option<i32>) -> Waiting<String> {
        (
            Some(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap()),
            name.to_owned(),
            ns.to_owned(),
            limit,
            format!("{ns}/{name}"),
        )
    }

    #[test]
    fn waker_picks_oldest_that_fit() {
        let runs = vec![
            waiting(30, "c", "acme", None),
            waiting(10, "a", "acme", None),
            waiting(20, "b", "acme", None),
            waiting(20, "a2", "acme", None),
        ];
        // Two free slots out of 50: the two oldest, ties broken by name.
        let picked = pick_waiting(runs.clone(), 48, HashMap::new(), 50);
        assert_eq!(picked, ["acme/a", "acme/a2"]);
        // No free slot: nobody.
        assert!(pick_waiting(runs.clone(), 50, HashMap::new(), 50).is_empty());
        // Unlimited: everybody, in creation order.
        assert_eq!(
            pick_waiting(runs, 1000, HashMap::new(), 0),
            ["acme/a", "acme/a2", "acme/b", "acme/c"]
        );
    }

    #[test]
    fn waker_respects_organization_limits() {
        let runs = vec![
            waiting(1, "a", "acme", Some(2)),
            waiting(2, "b", "acme", Some(2)),
            waiting(3, "c", "globex", None),
            waiting(4, "d", "acme", Some(2)),
        ];
        // acme already runs one: one more acme run fits, then globex's, not acme's third.
        let per_ns = HashMap::from([("acme".to_owned(), 1)]);
        assert_eq!(pick_waiting(runs, 1, per_ns, 50), ["acme/a", "globex/c"]);
    }

    #[test]
    fn wait_messages_do_not_carry_counts() {
        assert_eq!(
            wait_message(50, None),
            "waiting for a test run slot (at most 50 at once)"
        );
        assert_eq!(
            wait_message(50, Some(3)),
            "waiting for a test run slot (at most 50 at once, 3 in this organization)"
        );
        assert_eq!(
            wait_message(0, Some(0)),
            "waiting for a test run slot (no global limit)"
        );
    }

    /// The written status keeps earlier timestamps, sets counts on finish, never carries
    /// the fields other writers own (id, cancel requests).
    #[test]
    fn next_status_fields() {
        let cur = TestRunStatus {
            id: Some("trun-x".into()),
            status: Some("running".into()),
            cancel_requested_at: None,
            pod_name: Some("r-run".into()),
            status_timestamps: terrace_crds::TestRunTimestamps {
                queued_at: Some("2024-01-01T00:00:00Z".into()),
                started_at: Some("2024-01-01T00:00:01Z".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let step =
            transition(S::Running, C::None, &Transition::Finished(TestResult::Pass)).unwrap();
        let summary = TestSummary {
            status: TestStatus::Pass,
            passed: 3,
            failed: 0,
            errored: 0,
            skipped: 1,
        };
        let next = next_status(
            Some(&cur),
            &step,
            Some(&summary),
            None,
            Some(1),
            Timestamp::now(),
        );
        assert_eq!(next.id, None);
        assert_eq!(next.status.as_deref(), Some("finished"));
        assert_eq!(next.test_status.as_deref(), Some("pass"));
        assert_eq!((next.tests_passed, next.tests_skipped), (Some(3), Some(1)));
        assert_eq!(next.pod_name.as_deref(), Some("r-run"));
        let ts = &next.status_timestamps;
        assert_eq!(TimestampKey::QueuedAt.get(ts), Some("2024-01-01T00:00:00Z"));
        assert!(TimestampKey::FinishedAt.get(ts).is_some());
        assert!(
            next.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        );
        let json = serde_json::to_value(&next).unwrap();
        assert!(json.get("cancelRequestedAt").is_none());
    }
}
