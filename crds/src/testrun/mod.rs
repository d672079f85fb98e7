//! The test run life cycle of SPEC.md area A as pure functions: the states, the cancel and
//! force-cancel operations (A6, A7) with their exact statuses and messages, the controller's
//! transitions with the `status-timestamps` key each one sets, and the test sources with the
//! vendor aliases `filter[source]` accepts.
//!
//! The API server calls [`cancel`] and [`force_cancel`] to answer 202 or 409; the TestRun
//! controller calls [`transition`] before writing a new `status`, so a run never moves out
//! of a final state or backwards, whichever of the two (or a restarted operator) acts first.
//! Nothing here does I/O; timestamps are set by the caller through [`TimestampKey::set`].

pub mod automatic;

pub use crate::constants::HEADER_TERRAFORM_INTEGRATION;
use crate::resources::{TestRunStatus, TestRunTimestamps};
use crate::rules::RuleViolation;

/// `data.attributes.status` of a test run (SPEC.md "Test run states").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TestRunState {
    /// Initial status after creation.
    Pending,
    /// Queued to start: the Pod exists, the engine has not started.
    Queued,
    /// Tests are executing.
    Running,
    /// Test errored (final).
    Errored,
    /// Test canceled (final).
    Canceled,
    /// Test completed (final); `test-status` says pass or fail.
    Finished,
}

impl TestRunState {
    pub const ALL: [TestRunState; 6] = [
        TestRunState::Pending,
        TestRunState::Queued,
        TestRunState::Running,
        TestRunState::Errored,
        TestRunState::Canceled,
        TestRunState::Finished,
    ];

    /// The wire value (`pending`, `queued`, …), as in the API and `.status.status`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TestRunState::Pending => "pending",
            TestRunState::Queued => "queued",
            TestRunState::Running => "running",
            TestRunState::Errored => "errored",
            TestRunState::Canceled => "canceled",
            TestRunState::Finished => "finished",
        }
    }

    /// SPEC.md's "Final" column: errored, canceled and finished never change again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TestRunState::Errored | TestRunState::Canceled | TestRunState::Finished
        )
    }

    /// The state of a stored status; a status not yet written by the controller is
    /// `pending`. An unknown value (hand-edited object) is an error, not a guess.
    pub fn of(status: Option<&TestRunStatus>) -> Result<Self, UnknownValue> {
        match status.and_then(|s| s.status.as_deref()) {
            None => Ok(TestRunState::Pending),
            Some(s) => s.parse(),
        }
    }

    /// Position in the non-final progression pending → queued → running; final states
    /// rank after all of them.
    fn rank(self) -> u8 {
        match self {
            TestRunState::Pending => 0,
            TestRunState::Queued => 1,
            TestRunState::Running => 2,
            TestRunState::Errored | TestRunState::Canceled | TestRunState::Finished => 3,
        }
    }
}

/// A value that is not one of the enumerated wire values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
}

/// `Display` (the wire value) and `FromStr` (exactly one of the wire values back; anything
/// else is an [`UnknownValue`] naming `$what`) of an enum of wire values, which has
/// `ALL` (every variant) and `as_str` (the wire value).
macro_rules! wire_values {
    ($ty:ident, $what:literal) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $ty {
            type Err = $crate::testrun::UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $ty::ALL
                    .into_iter()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $crate::testrun::UnknownValue {
                        what: $what,
                        value: s.to_owned(),
                    })
            }
        }
    };
}
pub(crate) use wire_values;

wire_values!(TestRunState, "test run status");

/// `test-status`: the final result of a finished run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestResult {
    Pass,
    Fail,
}

impl TestResult {
    pub fn as_str(self) -> &'static str {
        match self {
            TestResult::Pass => "pass",
            TestResult::Fail => "fail",
        }
    }
}

/// What has been asked of a running run so far; kept in the status as
/// `cancelRequestedAt` / `forceCancelRequestedAt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CancelRequest {
    None,
    /// `cancel` was accepted: the engine gets an interrupt (the Pod is deleted with a
    /// grace period and the runner turns SIGTERM into SIGINT).
    Requested,
    /// `force-cancel` was accepted after a cancel: the Pod ends at once.
    ForceRequested,
}

impl CancelRequest {
    /// Reads the two request timestamps of a stored status.
    pub fn of(status: Option<&TestRunStatus>) -> Self {
        match status {
            Some(s) if s.force_cancel_requested_at.is_some() => CancelRequest::ForceRequested,
            Some(s) if s.cancel_requested_at.is_some() => CancelRequest::Requested,
            _ => CancelRequest::None,
        }
    }
}

/// A refused cancel or force-cancel: answered 409 with [`message`](Self::message) as the
/// JSON:API error detail.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Conflict {
    pub message: &'static str,
}

impl Conflict {
    /// Always 409 (SPEC.md Errors: "Test not running", "not canceled non-forcefully first").
    pub const HTTP_STATUS: u16 = 409;
}

/// The test run statuses that hold a concurrency slot (see [`crate::run::HOLDING_SLOT`]).
pub const HOLDING_SLOT: [&str; 2] = [
    TestRunState::Queued.as_str(),
    TestRunState::Running.as_str(),
];

/// 409 detail of a cancel or force-cancel of a run that is not running.
pub const MSG_NOT_RUNNING: &str = "test run is not running";
/// 409 detail of a force-cancel without an earlier cancel.
pub const MSG_NOT_CANCELED_FIRST: &str =
    "test run has not been canceled; cancel it before force-canceling it";

/// An accepted cancel or force-cancel: answered 202 without a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// The first request: record the request time (`cancelRequestedAt` or
    /// `forceCancelRequestedAt`) so the controller acts on it.
    Requested,
    /// The same request again: nothing new to record, still 202 (clients retry).
    AlreadyRequested,
}

impl Accepted {
    /// Always 202 (SPEC.md A6, A7).
    pub const HTTP_STATUS: u16 = 202;
}

/// SPEC.md A6 `cancel`, with the CLI's needs where SPEC's words allow them (one row
/// each in the tests):
///
/// | state | cancel requested before | answer |
/// |---|---|---|
/// | pending, queued, running | no | 202, recorded: a run without a started engine ends `canceled` without one, a running engine gets an interrupt |
/// | pending, queued, running | yes | 202, nothing new (clients retry; the CLI cancels again on a second Ctrl-C) |
/// | canceled | yes | 202, nothing new: the second Ctrl-C of the CLI after the run ended must not fail |
/// | finished, errored, canceled | no | 409 "test run is not running" |
///
/// "Running" in SPEC's 409 row is read as "not yet final": terraform's CLI cancels a run
/// as soon as it exists, and a 409 for a run still waiting for its Pod would make it print
/// "Could not stop the test run". 404 (unknown run) is the caller's business.
pub fn cancel(state: TestRunState, requested: CancelRequest) -> Result<Accepted, Conflict> {
    match (state, requested) {
        (s, CancelRequest::None) if !s.is_final() => Ok(Accepted::Requested),
        (s, _) if !s.is_final() => Ok(Accepted::AlreadyRequested),
        (TestRunState::Canceled, CancelRequest::Requested | CancelRequest::ForceRequested) => {
            Ok(Accepted::AlreadyRequested)
        }
        _ => Err(Conflict {
            message: MSG_NOT_RUNNING,
        }),
    }
}

/// SPEC.md A7 `force-cancel`: 202 only for a run that is not final and was canceled
/// before (or, repeated, for a run that ended after a force-cancel); 409 saying which
/// condition failed otherwise.
pub fn force_cancel(state: TestRunState, requested: CancelRequest) -> Result<Accepted, Conflict> {
    if state.is_final() {
        return match (state, requested) {
            (TestRunState::Canceled, CancelRequest::ForceRequested) => {
                Ok(Accepted::AlreadyRequested)
            }
            _ => Err(Conflict {
                message: MSG_NOT_RUNNING,
            }),
        };
    }
    match requested {
        CancelRequest::None => Err(Conflict {
            message: MSG_NOT_CANCELED_FIRST,
        }),
        CancelRequest::Requested => Ok(Accepted::Requested),
        CancelRequest::ForceRequested => Ok(Accepted::AlreadyRequested),
    }
}

/// A key of `status-timestamps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimestampKey {
    QueuedAt,
    StartedAt,
    FinishedAt,
    CanceledAt,
    ErroredAt,
    ForceCanceledAt,
}

impl TimestampKey {
    pub const ALL: [TimestampKey; 6] = [
        TimestampKey::QueuedAt,
        TimestampKey::StartedAt,
        TimestampKey::FinishedAt,
        TimestampKey::CanceledAt,
        TimestampKey::ErroredAt,
        TimestampKey::ForceCanceledAt,
    ];

    /// The API's key (`queued-at`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TimestampKey::QueuedAt => "queued-at",
            TimestampKey::StartedAt => "started-at",
            TimestampKey::FinishedAt => "finished-at",
            TimestampKey::CanceledAt => "canceled-at",
            TimestampKey::ErroredAt => "errored-at",
            TimestampKey::ForceCanceledAt => "force-canceled-at",
        }
    }

    fn slot(self, ts: &mut TestRunTimestamps) -> &mut Option<String> {
        match self {
            TimestampKey::QueuedAt => &mut ts.queued_at,
            TimestampKey::StartedAt => &mut ts.started_at,
            TimestampKey::FinishedAt => &mut ts.finished_at,
            TimestampKey::CanceledAt => &mut ts.canceled_at,
            TimestampKey::ErroredAt => &mut ts.errored_at,
            TimestampKey::ForceCanceledAt => &mut ts.force_canceled_at,
        }
    }

    /// Sets this key to `at` unless it is already set: the first time a run entered a state
    /// wins, so a reconcile repeated after an operator restart changes nothing.
    pub fn set(self, ts: &mut TestRunTimestamps, at: &str) {
        let slot = self.slot(ts);
        if slot.is_none() {
            *slot = Some(at.to_owned());
        }
    }

    /// The value of this key, if set.
    pub fn get(self, ts: &TestRunTimestamps) -> Option<&str> {
        match self {
            TimestampKey::QueuedAt => ts.queued_at.as_deref(),
            TimestampKey::StartedAt => ts.started_at.as_deref(),
            TimestampKey::FinishedAt => ts.finished_at.as_deref(),
            TimestampKey::CanceledAt => ts.canceled_at.as_deref(),
            TimestampKey::ErroredAt => ts.errored_at.as_deref(),
            TimestampKey::ForceCanceledAt => ts.force_canceled_at.as_deref(),
        }
    }
}

/// What the TestRun controller observed (DESIGN.md §3 step 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The run's Pod exists: pending → queued.
    PodCreated,
    /// The engine container started: → running.
    EngineStarted,
    /// The engine wrote a test summary: running → finished with `test-status`.
    Finished(TestResult),
    /// The run cannot complete (Pod deleted by someone else, image pull failure, no
    /// summary, runner crash, OOM kill…): → errored with this message.
    Errored(String),
    /// The run ended after an accepted cancel (`forced`: after a force-cancel), or was
    /// canceled before its engine started → canceled.
    Canceled { forced: bool },
}

impl Transition {
    /// The transition for a run whose engine has exited: after an accepted cancel the run is
    /// canceled whatever the engine printed (an interrupted engine still prints a summary);
    /// otherwise finished with the result, or errored with the runner's message.
    pub fn on_exit(requested: CancelRequest, result: Result<TestResult, String>) -> Self {
        match (requested, result) {
            (CancelRequest::ForceRequested, _) => Transition::Canceled { forced: true },
            (CancelRequest::Requested, _) => Transition::Canceled { forced: false },
            (CancelRequest::None, Ok(r)) => Transition::Finished(r),
            (CancelRequest::None, Err(m)) => Transition::Errored(m),
        }
    }

    fn target(&self) -> TestRunState {
        match self {
            Transition::PodCreated => TestRunState::Queued,
            Transition::EngineStarted => TestRunState::Running,
            Transition::Finished(_) => TestRunState::Finished,
            Transition::Errored(_) => TestRunState::Errored,
            Transition::Canceled { .. } => TestRunState::Canceled,
        }
    }
}

/// An allowed transition: the new state and what to write with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub to: TestRunState,
    /// `status-timestamps` keys to set (with [`TimestampKey::set`], so already-set keys keep
    /// their time). Skipped states get theirs too: a controller that first sees a run's Pod
    /// already running records queued-at and started-at together.
    pub timestamps: Vec<TimestampKey>,
    /// `test-status`, for a finished run.
    pub test_status: Option<TestResult>,
    /// The reason to show in `.status.message` (errored runs).
    pub message: Option<String>,
}

/// A refused transition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IllegalTransition {
    #[error("test run is already {0}: a final state never changes")]
    AlreadyFinal(TestRunState),
    #[error("test run cannot go back from {from} to {to}")]
    Backwards {
        from: TestRunState,
        to: TestRunState,
    },
    #[error("test run can only finish or be canceled while running, it is {0}")]
    NotRunning(TestRunState),
    #[error("test run cannot be canceled without an accepted cancel request")]
    NotCanceled,
    #[error("test run cannot be force-canceled without an accepted force-cancel request")]
    NotForceCanceled,
}

/// Checks the controller's move from `from` (with the cancel requests so far) and says what
/// to record. Rules:
/// - final states never change;
/// - pending → queued → running only moves forward; repeating the current non-final state
///   is an empty step (level-triggered reconciles repeat themselves), skipping one sets
///   the skipped state's timestamp too;
/// - finished needs a run with a Pod (an engine that ended before the controller saw it
///   running has still started: queued counts as running, with started-at);
/// - canceled needs an accepted cancel (a forced one an accepted force-cancel) and is
///   reachable from every non-final state: a run canceled before its engine started ends
///   without one, with only canceled-at;
/// - errored is reachable from every non-final state.
pub fn transition(
    from: TestRunState,
    requested: CancelRequest,
    event: &Transition,
) -> Result<Step, IllegalTransition> {
    if from.is_final() {
        return Err(IllegalTransition::AlreadyFinal(from));
    }
    let to = event.target();
    let mut step = Step {
        to,
        timestamps: Vec::new(),
        test_status: None,
        message: None,
    };
    // Timestamps of the non-final states passed on the way.
    let passing = |step: &mut Step, upto: u8| {
        if from.rank() < 1 && upto >= 1 {
            step.timestamps.push(TimestampKey::QueuedAt);
        }
        if from.rank() < 2 && upto >= 2 {
            step.timestamps.push(TimestampKey::StartedAt);
        }
    };
    match event {
        Transition::PodCreated | Transition::EngineStarted => {
            if to.rank() < from.rank() {
                return Err(IllegalTransition::Backwards { from, to });
            }
            passing(&mut step, to.rank());
        }
        Transition::Finished(result) => {
            if from == TestRunState::Pending {
                return Err(IllegalTransition::NotRunning(from));
            }
            passing(&mut step, 2);
            step.timestamps.push(TimestampKey::FinishedAt);
            step.test_status = Some(*result);
        }
        Transition::Canceled { forced } => {
            match (forced, requested) {
                (_, CancelRequest::None) => return Err(IllegalTransition::NotCanceled),
                (true, CancelRequest::Requested) => {
                    return Err(IllegalTransition::NotForceCanceled);
                }
                _ => {}
            }
            step.timestamps.push(TimestampKey::CanceledAt);
            if *forced {
                step.timestamps.push(TimestampKey::ForceCanceledAt);
            }
        }
        Transition::Errored(message) => {
            step.timestamps.push(TimestampKey::ErroredAt);
            step.message = Some(message.clone());
        }
    }
    Ok(step)
}

/// Where a test run was queued from (SPEC.md "Test source values").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestSource {
    /// Queued from the command-line client.
    Engine,
    /// Queued from the service API.
    SvcApi,
    /// Queued by an upload to a configuration version.
    SvcConfigurationVersion,
}

impl TestSource {
    pub const ALL: [TestSource; 3] = [
        TestSource::Engine,
        TestSource::SvcApi,
        TestSource::SvcConfigurationVersion,
    ];

    /// SPEC.md's value, stored in `.spec.source` and answered as `source`.
    pub fn as_str(self) -> &'static str {
        match self {
            TestSource::Engine => "engine",
            TestSource::SvcApi => "svc-api",
            TestSource::SvcConfigurationVersion => "svc-configuration-version",
        }
    }

    /// The source of a run created through the API (A1): `engine` when the terraform CLI
    /// asks (`terraform test -cloud-run` sends [`HEADER_TERRAFORM_INTEGRATION`] on every
    /// call, other go-tfe clients and pytfe do not), `svc-api` for every other client.
    pub fn of_api_request(integration_header: Option<&str>) -> Self {
        match integration_header.map(str::trim) {
            Some(h) if !h.is_empty() => TestSource::Engine,
            _ => TestSource::SvcApi,
        }
    }

    /// The vendor's name of the same source, accepted by `filter[source]`.
    pub fn vendor_alias(self) -> &'static str {
        match self {
            TestSource::Engine => "terraform",
            TestSource::SvcApi => "tfe-api",
            TestSource::SvcConfigurationVersion => "tfe-configuration-version",
        }
    }

    /// A filter value: SPEC.md's value or the vendor alias, exactly (no case folding, as
    /// the vendor's API compares them).
    pub fn from_filter_value(value: &str) -> Option<Self> {
        TestSource::ALL
            .into_iter()
            .find(|s| s.as_str() == value || s.vendor_alias() == value)
    }
}

// `FromStr` parses SPEC.md's values only (what is stored in `.spec.source`), not the
// vendor aliases of `from_filter_value`.
wire_values!(TestSource, "test source");

/// The parsed `filter[source]` of A4.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceFilter {
    /// Accepted sources, without duplicates, in the order given. Empty: no filter.
    pub sources: Vec<TestSource>,
}

/// Attribute named in a bad `filter[source]`.
pub const FILTER_SOURCE_PARAM: &str = "filter[source]";

impl SourceFilter {
    /// Parses a comma-separated list of sources (SPEC.md values or vendor aliases). Spaces
    /// around items and empty items (`a,,b`, a trailing comma, an empty parameter) are
    /// ignored; an unknown item is a violation naming it, so a typo is not silently an
    /// empty page.
    pub fn parse(value: &str) -> Result<Self, RuleViolation> {
        let mut sources = Vec::new();
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let source = TestSource::from_filter_value(item).ok_or_else(|| RuleViolation {
                attribute: FILTER_SOURCE_PARAM,
                message: format!(
                    "has an unknown test source {item:?}; valid values are engine, svc-api, svc-configuration-version (or terraform, tfe-api, tfe-configuration-version)"
                ),
            })?;
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
        Ok(Self { sources })
    }

    /// Whether a run with this stored `.spec.source` is listed. An empty filter lists every
    /// run; a stored value that is not a known source only passes an empty filter.
    pub fn matches(&self, stored: &str) -> bool {
        self.sources.is_empty() || self.sources.iter().any(|s| s.as_str() == stored)
    }
}

#[cfg(test)]
mod tests;
