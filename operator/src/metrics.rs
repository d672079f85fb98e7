//! Prometheus metrics of `terrace operator`, served with `/healthz` and `/readyz` on
//! `--metrics-addr` (see [`router`]).
//!
//! One process-wide registry ([`registry`]): the controllers record into it through the
//! `pub fn` hooks below, so code that has no handle on the operator's state (the TestRun
//! controller's transitions, the leader elector) can record without plumbing. Label
//! values are bounded sets (controller names, error kinds, outcomes, states), never
//! object names.
//!
//! Metrics (an alerting guide should list these):
//! - `terrace_reconciles_total{controller}` — reconciles started;
//! - `terrace_reconcile_errors_total{controller,error}` — failed reconciles, `error` is
//!   [`Error::metric_label`] (kube, invalid, json, conflict, unavailable);
//! - `terrace_reconcile_duration_seconds{controller}` — histogram;
//! - `terrace_test_runs{status}` — TestRun objects by `.status.status` (pending is the
//!   admission queue, queued/running hold Pods), computed at scrape time from the TestRun
//!   controller's cache once it is registered with [`observe_test_runs`];
//! - `terrace_test_runs_finished_total{outcome}` and
//!   `terrace_test_run_duration_seconds{outcome}` — outcome is passed, failed, errored or
//!   canceled; the duration runs from the TestRun's creation to its final state (what the
//!   user waited, queueing included);
//! - `terrace_leader` — 1 while this replica holds the `terrace-operator` Lease (always 1
//!   with `--leader-election=false`), else 0;
//! - `terrace_leader_transitions_total` — times this replica started leading;
//! - `terrace_watch_malformed_objects_total{kind}` — watched objects (each version once)
//!   that do not deserialize and are skipped (see [`crate::watch`]);
//! - `terrace_notification_deliveries_total{outcome}` — notification deliveries
//!   ([`crate::notify`]): `delivered` (2xx), `failed` (an error answer or none) or
//!   `refused` (a destination the operator may not reach);
//! - `terrace_assessments_total{outcome}` — health assessments that ended
//!   (docs/health.md): `healthy`, `drifted`, `check_failure` (drifted with failing checks
//!   counts as `drifted`) or `failed`;
//! - `terrace_assessment_duration_seconds{outcome}` — from an assessment's creation to
//!   its end;
//! - `terrace_workspaces_drifted` — workspaces whose current result found drift, and
//!   `terrace_workspaces_checks_failing` — those whose checks fail (set by the
//!   assessment scheduler on each pass).

use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::header;
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::de::DeserializeOwned;
use terrace_crds::TestRun;
use terrace_crds::TestRunStatus;
use terrace_crds::testrun::TestRunState;
use tracing::Instrument;

use crate::Error;

/// Controller label of the catalog controllers ([`crate::catalog`]: IDs and conditions
/// of every kind without a controller of its own). The value stays `ids`, the name
/// dashboards and alerts already use.
pub const CONTROLLER_CATALOG: &str = "ids";

/// One of the operator's controllers as [`Reconciler::run`] runs it: the label of its
/// metrics and reconcile spans (the values dashboards and alerts use), what its log lines
/// call a failed reconcile, and how soon that is tried again
/// ([`Error::log_and_retry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reconciler {
    /// The `controller` label.
    pub label: &'static str,
    /// The words of its log lines (`{what} reconcile failed`).
    pub what: &'static str,
    /// The delay before a failed reconcile is tried again.
    pub retry: Duration,
}

const fn reconciler(label: &'static str, what: &'static str, retry_secs: u64) -> Reconciler {
    Reconciler {
        label,
        what,
        retry: Duration::from_secs(retry_secs),
    }
}

/// The Organization controller.
pub const ORGANIZATION: Reconciler = reconciler("organization", "organization", 5);
/// The Workspace controller.
pub const WORKSPACE: Reconciler = reconciler("workspace", "workspace", 5);
/// The Run controller.
pub const RUN: Reconciler = reconciler("run", "run", 5);
/// The auto-destroy runs of workspaces (`run::auto_destroy`).
pub const AUTO_DESTROY: Reconciler = reconciler("auto-destroy", "auto-destroy", 30);
/// The TestRun controller.
pub const TEST_RUN: Reconciler = reconciler("testrun", "test run", 5);
/// The test runs a module's new configuration version starts (`testrun::automatic`).
pub const AUTOMATIC_TEST_RUN: Reconciler = reconciler("automatic-testrun", "automatic test run", 5);
/// The state retention controller ([`crate::retention`]).
pub const STATE_RETENTION: Reconciler = reconciler("state-retention", "state retention", 10);
/// The blob finalizer of ConfigurationVersions ([`crate::blob_finalizer`]; runs only with
/// an S3 blob store).
pub const BLOB_FINALIZER: Reconciler = reconciler("blob-finalizer", "blob finalizer", 10);
/// The runs of uploads (`run::auto_queue`).
pub const RUN_AUTO_QUEUE: Reconciler = reconciler("run-auto-queue", "run of an upload", 5);
/// The status of registry module versions ([`crate::module_versions`]).
pub const MODULE_VERSIONS: Reconciler = reconciler("module-versions", "module version", 10);
/// The notification deliveries ([`crate::notify`]).
pub const NOTIFY: Reconciler = reconciler("notify", "notification", 10);
/// The commit statuses of runs from repositories ([`crate::vcs_status`]).
pub const VCS_STATUS: Reconciler = reconciler("vcs-status", "commit status", 30);
/// The status of policy sets ([`crate::policy_sets`]).
pub const POLICY_SETS: Reconciler = reconciler("policy-sets", "policy set", 10);
/// The history controllers ([`crate::history`]).
pub const HISTORY: Reconciler = reconciler("history", "history", 30);

/// Content type of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// How a test run ended, as the `outcome` label says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestRunOutcome {
    /// finished with test-status pass.
    Passed,
    /// finished with test-status fail.
    Failed,
    Errored,
    Canceled,
}

impl TestRunOutcome {
    pub const ALL: [TestRunOutcome; 4] = [
        TestRunOutcome::Passed,
        TestRunOutcome::Failed,
        TestRunOutcome::Errored,
        TestRunOutcome::Canceled,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            TestRunOutcome::Passed => "passed",
            TestRunOutcome::Failed => "failed",
            TestRunOutcome::Errored => "errored",
            TestRunOutcome::Canceled => "canceled",
        }
    }

    /// The outcome a stored status records, `None` while the run is not final (or its
    /// status is unreadable). A finished run without test-status counts as failed.
    pub fn of(status: &TestRunStatus) -> Option<TestRunOutcome> {
        match TestRunState::of(Some(status)).ok()? {
            TestRunState::Pending | TestRunState::Queued | TestRunState::Running => None,
            TestRunState::Errored => Some(TestRunOutcome::Errored),
            TestRunState::Canceled => Some(TestRunOutcome::Canceled),
            TestRunState::Finished => Some(match status.test_status.as_deref() {
                Some("pass") => TestRunOutcome::Passed,
                _ => TestRunOutcome::Failed,
            }),
        }
    }
}

/// Every metric of the operator.
struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<ControllerLabels, Histogram>,
    test_runs_finished: Family<OutcomeLabels, Counter>,
    test_run_duration: Family<OutcomeLabels, Histogram>,
    leader: Gauge,
    leader_transitions: Counter,
    malformed_objects: Family<KindLabels, Counter>,
    notification_deliveries: Family<OutcomeLabels, Counter>,
    assessments: Family<OutcomeLabels, Counter>,
    assessment_duration: Family<OutcomeLabels, Histogram>,
    workspaces_drifted: Gauge,
    workspaces_checks_failing: Gauge,
    test_runs: Arc<TestRunCollector>,
}

/// The `outcome` label values of assessments.
pub const ASSESSMENT_OUTCOMES: [&str; 4] = ["healthy", "drifted", "check_failure", "failed"];

fn reconcile_histogram() -> Histogram {
    // 5 ms … 41 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

fn test_run_histogram() -> Histogram {
    // 1 s … 2.3 h.
    Histogram::new(exponential_buckets(1.0, 2.0, 14))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("terrace");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Family::<ControllerLabels, Histogram>::new_with_constructor(
            reconcile_histogram as fn() -> Histogram,
        );
        let test_runs_finished = Family::<OutcomeLabels, Counter>::default();
        let test_run_duration = Family::<OutcomeLabels, Histogram>::new_with_constructor(
            test_run_histogram as fn() -> Histogram,
        );
        let leader = Gauge::default();
        let leader_transitions = Counter::default();
        let malformed_objects = Family::<KindLabels, Counter>::default();
        let notification_deliveries = Family::<OutcomeLabels, Counter>::default();
        let assessments = Family::<OutcomeLabels, Counter>::default();
        let assessment_duration = Family::<OutcomeLabels, Histogram>::new_with_constructor(
            test_run_histogram as fn() -> Histogram,
        );
        let workspaces_drifted = Gauge::default();
        let workspaces_checks_failing = Gauge::default();
        let test_runs = Arc::new(TestRunCollector::default());
        registry.register(
            "reconciles",
            "Reconciles started, per controller",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that returned an error, per controller and error kind",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciles, per controller",
            reconcile_duration.clone(),
        );
        registry.register(
            "test_runs_finished",
            "Test runs that reached a final state, per outcome",
            test_runs_finished.clone(),
        );
        registry.register(
            "test_run_duration_seconds",
            "Time from a test run's creation to its final state, per outcome",
            test_run_duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the operator's leader Lease",
            leader.clone(),
        );
        registry.register(
            "leader_transitions",
            "Times this replica started leading",
            leader_transitions.clone(),
        );
        registry.register(
            "watch_malformed_objects",
            "Watched objects that do not deserialize and are skipped, per kind",
            malformed_objects.clone(),
        );
        registry.register(
            "notification_deliveries",
            "Notification deliveries, per outcome (delivered, failed, refused)",
            notification_deliveries.clone(),
        );
        registry.register(
            "assessments",
            "Health assessments that ended, per outcome (healthy, drifted, check_failure, failed)",
            assessments.clone(),
        );
        registry.register(
            "assessment_duration_seconds",
            "Time from a health assessment's creation to its end, per outcome",
            assessment_duration.clone(),
        );
        registry.register(
            "workspaces_drifted",
            "Workspaces whose current health assessment found drift",
            workspaces_drifted.clone(),
        );
        registry.register(
            "workspaces_checks_failing",
            "Workspaces whose current health assessment found failing checks",
            workspaces_checks_failing.clone(),
        );
        for outcome in ASSESSMENT_OUTCOMES {
            let _ = assessments.get_or_create(&OutcomeLabels { outcome });
        }
        registry.register_collector(Box::new(test_runs.clone()));
        // Outcome series exist from the start, so rate() and absent() behave.
        for o in TestRunOutcome::ALL {
            let labels = OutcomeLabels {
                outcome: o.as_str(),
            };
            let _ = test_runs_finished.get_or_create(&labels);
        }
        Metrics {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            test_runs_finished,
            test_run_duration,
            leader,
            leader_transitions,
            malformed_objects,
            notification_deliveries,
            assessments,
            assessment_duration,
            workspaces_drifted,
            workspaces_checks_failing,
            test_runs,
        }
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The OpenMetrics text of every operator metric.
pub fn encode() -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &METRICS.registry);
    out
}

/// The operator's metrics without the closing `# EOF`, for a process that serves them
/// together with others (`terrace dev` adds them to the API server's `/metrics`).
pub fn encode_into(out: &mut String) {
    let _ = prometheus_client::encoding::text::encode_registry(out, &METRICS.registry);
}

/// `/metrics`, `/healthz` and `/readyz` of the operator. Both replicas answer ready: the
/// operator serves no traffic, and a standby is exactly as healthy as the leader (a
/// readiness tied to leadership would stall rolling updates).
pub fn router() -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|| async { ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], encode()) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
}

/// Records one finished reconcile of `controller`.
pub fn reconcile_finished(controller: &'static str, elapsed: Duration, error: Option<&Error>) {
    let labels = ControllerLabels { controller };
    METRICS.reconciles.get_or_create(&labels).inc();
    METRICS
        .reconcile_duration
        .get_or_create(&labels)
        .observe(elapsed.as_secs_f64());
    if let Some(e) = error {
        let labels = ErrorLabels {
            controller,
            error: e.metric_label(),
        };
        METRICS.reconcile_errors.get_or_create(&labels).inc();
    }
}

/// Records a watched object of `kind` that does not deserialize (see [`crate::watch`]).
pub fn malformed_object(kind: &str) {
    let labels = KindLabels {
        kind: kind.to_owned(),
    };
    METRICS.malformed_objects.get_or_create(&labels).inc();
}

/// Records a notification delivery with `outcome` (`delivered`, `failed`, `refused`).
pub fn notification_delivered(outcome: &'static str) {
    METRICS
        .notification_deliveries
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
}

/// Records an assessment that ended with `outcome` (one of [`ASSESSMENT_OUTCOMES`])
/// after `took`.
pub fn assessment_finished(outcome: &'static str, took: Duration) {
    let labels = OutcomeLabels { outcome };
    METRICS.assessments.get_or_create(&labels).inc();
    METRICS
        .assessment_duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// Sets how many workspaces are drifted and how many have failing checks.
pub fn workspaces_unhealthy(drifted: usize, checks_failing: usize) {
    METRICS
        .workspaces_drifted
        .set(i64::try_from(drifted).unwrap_or(i64::MAX));
    METRICS
        .workspaces_checks_failing
        .set(i64::try_from(checks_failing).unwrap_or(i64::MAX));
}

/// A short random ID telling one reconcile's log lines from the next one's.
pub fn new_reconcile_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The span of one reconcile: `controller`, the object's `namespace` and name (`object`),
/// and a fresh `reconcile_id`, so every log line of the reconcile (including kube's) carries them.
pub fn reconcile_span<K: Resource>(controller: &'static str, obj: &K) -> tracing::Span {
    let meta = obj.meta();
    tracing::info_span!(
        "reconcile",
        controller,
        namespace = meta.namespace.as_deref().unwrap_or_default(),
        // Not `name`: JSON logs already use that key for the span's own name.
        object = meta.name.as_deref().unwrap_or_default(),
        reconcile_id = %new_reconcile_id(),
    )
}

/// Wraps one reconcile of `obj` by `controller`: runs it in [`reconcile_span`] and
/// records its count, duration and error kind. Use it in `Controller::run`:
///
/// ```ignore
/// .run(
///     |obj, ctx| metrics::instrument(CONTROLLER, obj.as_ref(), reconcile(obj.clone(), ctx)),
///     error_policy,
///     ctx,
/// )
/// ```
pub fn instrument<K, F, T>(
    controller: &'static str,
    obj: &K,
    reconcile: F,
) -> impl Future<Output = Result<T, Error>> + Send + use<K, F, T>
where
    K: Resource,
    F: Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    let span = reconcile_span(controller, obj);
    async move {
        let start = Instant::now();
        let result = reconcile.await;
        if let Err(e) = &result {
            tracing::debug!(error = %e, kind = e.metric_label(), "reconcile failed");
        }
        reconcile_finished(controller, start.elapsed(), result.as_ref().err());
        result
    }
    .instrument(span)
}

/// Most reconciles one controller runs at once. Unbounded, a (re)start reconciles every
/// object of a kind at once, and the controller's tables (in-flight reconciles, the
/// scheduler) grow to hold them all and never shrink: about a kilobyte per workspace
/// for as long as the operator runs (issue 17).
pub const RECONCILE_CONCURRENCY: u16 = 32;

/// `controller` with the operator's settings: [`RECONCILE_CONCURRENCY`] and the watch retry
/// policy [`terrace_crds::watch::WatchBackoff`].
pub fn bounded<K>(controller: kube::runtime::Controller<K>) -> kube::runtime::Controller<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    controller
        .with_config(
            kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY),
        )
        // Watches resume at once after an error (410 Gone, an API server restart), then
        // within a second: kube's default took 20-30 s to see an object applied after a
        // restart.
        .trigger_backoff(terrace_crds::watch::WatchBackoff::default())
}

impl Reconciler {
    /// Runs `controller` to its end (at most [`RECONCILE_CONCURRENCY`] reconciles at
    /// once) with every reconcile [`instrument`]ed under this controller's label; a
    /// failed one is logged and tried again after [`Reconciler::retry`] (or when the
    /// object changes, see [`Error::log_and_retry`]). The controllers whose reconciles
    /// take the object and their context all end this way:
    ///
    /// ```ignore
    /// let controller = Controller::for_stream(feed.into_stream(), store);
    /// metrics::WORKSPACE.run(controller, reconcile, ctx)
    /// ```
    pub async fn run<K, C, F>(
        self,
        controller: Controller<K>,
        mut reconcile: impl FnMut(Arc<K>, Arc<C>) -> F,
        ctx: Arc<C>,
    ) where
        K: Clone + Resource + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + std::fmt::Debug + Unpin,
        F: Future<Output = Result<Action, Error>> + Send + 'static,
    {
        let Reconciler { label, what, retry } = self;
        bounded(controller)
            .run(
                move |obj, ctx| instrument(label, obj.as_ref(), reconcile(obj.clone(), ctx)),
                move |obj: Arc<K>, err: &Error, _ctx: Arc<C>| {
                    err.log_and_retry(what, &kube::ResourceExt::name_any(obj.as_ref()), retry)
                },
                ctx,
            )
            .for_each(|res| async move {
                if let Err(e) = res {
                    tracing::debug!(error = %e, controller = label, "reconcile failed");
                }
            })
            .await;
    }

    /// [`Reconciler::run`] until `shutdown` resolves (the controller finishes the
    /// reconciles under way), as a [`crate::Running`] to start with the others.
    pub fn running<K, C, F>(
        self,
        controller: Controller<K>,
        shutdown: crate::Shutdown,
        reconcile: impl FnMut(Arc<K>, Arc<C>) -> F + Send + 'static,
        ctx: Arc<C>,
    ) -> crate::Running
    where
        K: Clone + Resource + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + std::fmt::Debug + Unpin + Send + Sync,
        C: Send + Sync + 'static,
        F: Future<Output = Result<Action, Error>> + Send + 'static,
    {
        Box::pin(self.run(controller.graceful_shutdown_on(shutdown), reconcile, ctx))
    }
}

/// Records a test run that reached a final state after `duration` (see the module docs
/// for what the duration covers). Call it once per run, when the controller writes the
/// final status.
pub fn test_run_finished(outcome: TestRunOutcome, duration: Duration) {
    let labels = OutcomeLabels {
        outcome: outcome.as_str(),
    };
    METRICS.test_runs_finished.get_or_create(&labels).inc();
    METRICS
        .test_run_duration
        .get_or_create(&labels)
        .observe(duration.as_secs_f64());
}

/// The duration [`test_run_finished`] records: from `created` (the TestRun's
/// creationTimestamp) to `now`; zero when unknown or negative.
pub fn test_run_duration(created: Option<&Time>, now: k8s_openapi::jiff::Timestamp) -> Duration {
    created
        .and_then(|c| Duration::try_from(now.duration_since(c.0)).ok())
        .unwrap_or_default()
}

/// The outcome to record when a controller replaced status `previous` by `written`:
/// some only when `written` is final and `previous` was not (so a rewrite of a final
/// status is not counted again). Pure.
pub fn finished_transition(
    previous: Option<&TestRunStatus>,
    written: &TestRunStatus,
) -> Option<TestRunOutcome> {
    let was_final = previous.and_then(TestRunOutcome::of).is_some();
    (!was_final).then(|| TestRunOutcome::of(written)).flatten()
}

/// Records a test run's end when the status the controller just wrote (`written`,
/// replacing `previous`) is the first final one; the duration runs from `created`.
/// Call it after every successful status write of the TestRun controller:
///
/// ```ignore
/// crate::metrics::test_run_status_written(run.status.as_ref(), status, run.meta().creation_timestamp.as_ref());
/// ```
pub fn test_run_status_written(
    previous: Option<&TestRunStatus>,
    written: &TestRunStatus,
    created: Option<&Time>,
) {
    if let Some(outcome) = finished_transition(previous, written) {
        test_run_finished(
            outcome,
            test_run_duration(created, k8s_openapi::jiff::Timestamp::now()),
        );
    }
}

/// Serves `terrace_test_runs{status}` from `store` (the TestRun controller's cache),
/// counted at scrape time, so the gauge cannot drift from the cluster. The last store
/// registered in the process wins.
pub fn observe_test_runs(store: Store<TestRun>) {
    *METRICS
        .test_runs
        .store
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(store);
}

/// Counts runs by state; an unreadable status counts as nothing. Pure.
pub fn count_by_state<'a>(runs: impl IntoIterator<Item = &'a TestRun>) -> [(TestRunState, i64); 6] {
    let mut counts = TestRunState::ALL.map(|s| (s, 0i64));
    for run in runs {
        if let Ok(state) = TestRunState::of(run.status.as_ref())
            && let Some(slot) = counts.iter_mut().find(|(s, _)| *s == state)
        {
            slot.1 += 1;
        }
    }
    counts
}

/// Sets `terrace_leader` (1 leading, 0 standby); counts a transition on each start.
pub fn set_leader(leading: bool) {
    let previous = METRICS.leader.set(i64::from(leading));
    if leading && previous == 0 {
        METRICS.leader_transitions.inc();
    }
}

#[derive(Debug, Default)]
struct TestRunCollector {
    store: Mutex<Option<Store<TestRun>>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

impl Collector for TestRunCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(store) = self.store.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return Ok(());
        };
        let state = store.state();
        let counts = count_by_state(state.iter().map(Arc::as_ref));
        let mut family = encoder.encode_descriptor(
            "test_runs",
            "TestRun objects by status (pending: waiting for admission; queued/running: holding a Pod)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (state, n) in counts {
            let labels = StatusLabels {
                status: state.as_str(),
            };
            ConstGauge::new(n).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn run_in(state: Option<&str>, test_status: Option<&str>) -> TestRun {
        TestRun {
            metadata: ObjectMeta::default(),
            spec: Default::default(),
            status: state.map(|s| TestRunStatus {
                status: Some(s.into()),
                test_status: test_status.map(str::to_owned),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn every_controller_has_a_label_of_its_own_and_documented() {
        let all = [
            ORGANIZATION,
            WORKSPACE,
            RUN,
            AUTO_DESTROY,
            TEST_RUN,
            AUTOMATIC_TEST_RUN,
            STATE_RETENTION,
            BLOB_FINALIZER,
            RUN_AUTO_QUEUE,
            MODULE_VERSIONS,
            NOTIFY,
            VCS_STATUS,
            POLICY_SETS,
            HISTORY,
        ];
        let mut labels: Vec<&str> = all.iter().map(|r| r.label).collect();
        labels.push(CONTROLLER_CATALOG);
        let docs = include_str!("../../docs/operations.md");
        let row = docs
            .lines()
            .find(|l| l.starts_with("| `terrace_reconciles_total`"))
            .expect("the metrics table documents terrace_reconciles_total");
        for label in &labels {
            assert!(
                row.contains(&format!(" {label},"))
                    || row.contains(&format!("({label},"))
                    || row.contains(&format!(" {label};")),
                "{label} is not in docs/operations.md: {row}"
            );
        }
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), all.len() + 1, "two controllers share a label");
    }

    #[test]
    fn outcomes_follow_state_and_test_status() {
        let of = |s: &str, t: Option<&str>| {
            TestRunOutcome::of(run_in(Some(s), t).status.as_ref().unwrap())
        };
        assert_eq!(of("pending", None), None);
        assert_eq!(of("queued", None), None);
        assert_eq!(of("running", None), None);
        assert_eq!(of("finished", Some("pass")), Some(TestRunOutcome::Passed));
        assert_eq!(of("finished", Some("fail")), Some(TestRunOutcome::Failed));
        assert_eq!(of("finished", None), Some(TestRunOutcome::Failed));
        assert_eq!(of("errored", None), Some(TestRunOutcome::Errored));
        assert_eq!(of("canceled", None), Some(TestRunOutcome::Canceled));
        assert_eq!(of("bogus", None), None);
    }

    #[test]
    fn only_the_first_final_status_counts() {
        let st = |s: &str, t: Option<&str>| run_in(Some(s), t).status.unwrap();
        let running = st("running", None);
        let passed = st("finished", Some("pass"));
        assert_eq!(
            finished_transition(Some(&running), &passed),
            Some(TestRunOutcome::Passed)
        );
        assert_eq!(
            finished_transition(None, &st("errored", None)),
            Some(TestRunOutcome::Errored)
        );
        assert_eq!(finished_transition(Some(&passed), &passed), None);
        assert_eq!(finished_transition(Some(&running), &running), None);
    }

    #[test]
    fn runs_are_counted_by_state_with_every_state_present() {
        let runs = [
            run_in(None, None),
            run_in(Some("pending"), None),
            run_in(Some("running"), None),
            run_in(Some("finished"), Some("pass")),
            run_in(Some("bogus"), None),
        ];
        let counts = count_by_state(runs.iter());
        let get = |s: TestRunState| counts.iter().find(|(x, _)| *x == s).unwrap().1;
        assert_eq!(get(TestRunState::Pending), 2);
        assert_eq!(get(TestRunState::Queued), 0);
        assert_eq!(get(TestRunState::Running), 1);
        assert_eq!(get(TestRunState::Finished), 1);
        assert_eq!(counts.len(), 6);
    }

    #[test]
    fn duration_runs_from_creation() {
        let created = Time("2026-01-05T10:00:00Z".parse().unwrap());
        let now = "2026-01-05T10:01:30Z".parse().unwrap();
        assert_eq!(
            test_run_duration(Some(&created), now),
            Duration::from_secs(90)
        );
        assert_eq!(test_run_duration(None, now), Duration::ZERO);
        let before = "2026-01-05T09:00:00Z".parse().unwrap();
        assert_eq!(test_run_duration(Some(&created), before), Duration::ZERO);
    }

    #[tokio::test]
    async fn reconciles_are_counted_with_error_kinds() {
        let ns = k8s_openapi::api::core::v1::Namespace {
            metadata: ObjectMeta {
                name: Some("n".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let ok: Result<(), Error> = instrument("unit-test", &ns, async { Ok(()) }).await;
        assert!(ok.is_ok());
        let err: Result<(), Error> =
            instrument("unit-test", &ns, async { Err(Error::Conflict("x".into())) }).await;
        assert!(err.is_err());
        test_run_finished(TestRunOutcome::Passed, Duration::from_secs(3));
        let text = encode();
        assert!(
            text.contains("terrace_reconciles_total{controller=\"unit-test\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "terrace_reconcile_errors_total{controller=\"unit-test\",error=\"conflict\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("terrace_reconcile_duration_seconds_count{controller=\"unit-test\"} 2")
        );
        assert!(text.contains("terrace_test_runs_finished_total{outcome=\"canceled\"} 0"));
        assert!(
            text.contains(
                "terrace_test_run_duration_seconds_bucket{le=\"4.0\",outcome=\"passed\"}"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE terrace_leader gauge"));
    }
}
