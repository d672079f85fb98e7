//! The rules of runs (docs/runs.md), as pure functions: the states and what TFE's
//! `actions` say of each, the IDs of a run's plan and apply, the queue of a workspace,
//! the runner's report, and the controller's decision ([`decide`]).
//!
//! A run goes `pending` → `plan_queued` → `planning` → `planned` → `confirmed` →
//! `apply_queued` → `applying` → `applied`; a plan-only run, or one whose plan has no
//! changes, ends `planned_and_finished`; a saved plan waits `planned_and_saved`. A
//! `planned` run is applied (`confirmed`) or discarded through the API; `auto-apply`
//! confirms it at once. Cancel (a grace period for the engine) ends `canceled`,
//! force-cancel `force_canceled`; a failed engine or a lost Pod `errored`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::testrun::UnknownValue;

mod credentials;
pub mod events;
pub mod logs;
pub mod plan_view;
mod queue;
pub mod redact;
pub mod ui_log;

pub use crate::engine::{exact_version, version_satisfies};
pub use credentials::*;
pub use queue::*;

/// The states of a run (TFE's run statuses that terrace uses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RunState {
    #[default]
    Pending,
    PlanQueued,
    Planning,
    Planned,
    PlannedAndFinished,
    PlannedAndSaved,
    /// The plan's policy checks passed (or were overridden): waiting for a confirmation.
    PostPlanCompleted,
    /// A mandatory policy of an overridable set failed: waiting for an override or a
    /// discard.
    PostPlanAwaitingDecision,
    Confirmed,
    ApplyQueued,
    Applying,
    Applied,
    Discarded,
    Errored,
    Canceled,
    ForceCanceled,
}

impl RunState {
    pub const ALL: [RunState; 16] = [
        RunState::Pending,
        RunState::PlanQueued,
        RunState::Planning,
        RunState::Planned,
        RunState::PlannedAndFinished,
        RunState::PlannedAndSaved,
        RunState::PostPlanCompleted,
        RunState::PostPlanAwaitingDecision,
        RunState::Confirmed,
        RunState::ApplyQueued,
        RunState::Applying,
        RunState::Applied,
        RunState::Discarded,
        RunState::Errored,
        RunState::Canceled,
        RunState::ForceCanceled,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::PlanQueued => "plan_queued",
            RunState::Planning => "planning",
            RunState::Planned => "planned",
            RunState::PlannedAndFinished => "planned_and_finished",
            RunState::PlannedAndSaved => "planned_and_saved",
            RunState::PostPlanCompleted => "post_plan_completed",
            RunState::PostPlanAwaitingDecision => "post_plan_awaiting_decision",
            RunState::Confirmed => "confirmed",
            RunState::ApplyQueued => "apply_queued",
            RunState::Applying => "applying",
            RunState::Applied => "applied",
            RunState::Discarded => "discarded",
            RunState::Errored => "errored",
            RunState::Canceled => "canceled",
            RunState::ForceCanceled => "force_canceled",
        }
    }

    /// The state of a stored `status` (absent: pending).
    pub fn of(status: Option<&str>) -> Result<Self, UnknownValue> {
        status.map_or(Ok(RunState::Pending), str::parse)
    }

    /// Nothing more happens to the run.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RunState::PlannedAndFinished
                | RunState::Applied
                | RunState::Discarded
                | RunState::Errored
                | RunState::Canceled
                | RunState::ForceCanceled
        )
    }

    /// Waiting for a confirmation (`actions.is-confirmable`).
    pub fn is_confirmable(self) -> bool {
        matches!(
            self,
            RunState::Planned | RunState::PlannedAndSaved | RunState::PostPlanCompleted
        )
    }

    /// Can be discarded: waiting for its turn or for a confirmation.
    pub fn is_discardable(self) -> bool {
        matches!(
            self,
            RunState::Pending
                | RunState::Planned
                | RunState::PlannedAndSaved
                | RunState::PostPlanCompleted
                | RunState::PostPlanAwaitingDecision
        )
    }

    /// Can be canceled: queued or running a phase.
    pub fn is_cancelable(self) -> bool {
        matches!(
            self,
            RunState::Pending
                | RunState::PlanQueued
                | RunState::Planning
                | RunState::Confirmed
                | RunState::ApplyQueued
                | RunState::Applying
        )
    }

    /// A Pod runs (or is about to run) the engine.
    pub fn is_running(self) -> bool {
        matches!(self, RunState::Planning | RunState::Applying)
    }

    /// Holds its workspace (an apply run between its turn and its end).
    pub fn holds_workspace(self) -> bool {
        !self.is_final() && self != RunState::Pending
    }

    /// The TFE status of the plan in this run state.
    pub fn plan_status(self, reached_apply: bool) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::PlanQueued => "queued",
            RunState::Planning => "running",
            RunState::Errored if !reached_apply => "errored",
            RunState::Canceled | RunState::ForceCanceled if !reached_apply => "canceled",
            RunState::Discarded if !reached_apply => "finished",
            _ => "finished",
        }
    }

    /// The TFE status of the apply in this run state.
    pub fn apply_status(self, reached_apply: bool) -> &'static str {
        match self {
            RunState::ApplyQueued | RunState::Confirmed => "queued",
            RunState::Applying => "running",
            RunState::Applied => "finished",
            RunState::Errored if reached_apply => "errored",
            RunState::Canceled | RunState::ForceCanceled if reached_apply => "canceled",
            RunState::Discarded
            | RunState::PlannedAndFinished
            | RunState::Errored
            | RunState::Canceled
            | RunState::ForceCanceled => "unreachable",
            _ => "pending",
        }
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RunState {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownValue {
                what: "run status",
                value: s.to_owned(),
            })
    }
}

/// The status timestamp the API writes when it creates a run.
pub const QUEUEABLE_AT: &str = "plan-queueable-at";

/// The plan ID of run `run-…` (`plan-…`, the same suffix).
pub fn plan_id(run_id: &str) -> String {
    format!("plan-{}", run_id.strip_prefix("run-").unwrap_or(run_id))
}

/// The apply ID of run `run-…` (`apply-…`).
pub fn apply_id(run_id: &str) -> String {
    format!("apply-{}", run_id.strip_prefix("run-").unwrap_or(run_id))
}

/// The run ID of a plan or apply ID.
pub fn run_of(phase_id: &str) -> Option<String> {
    phase_id
        .strip_prefix("plan-")
        .or_else(|| phase_id.strip_prefix("apply-"))
        .filter(|s| !s.is_empty())
        .map(|s| format!("run-{s}"))
}

/// The two phases of a run, each in a Pod of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Plan,
    Apply,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Plan => "plan",
            Phase::Apply => "apply",
        }
    }

    /// The ID of this phase of run `run-…` ([`plan_id`] or [`apply_id`]).
    pub fn id(self, run_id: &str) -> String {
        match self {
            Phase::Plan => plan_id(run_id),
            Phase::Apply => apply_id(run_id),
        }
    }
}

impl FromStr for Phase {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "plan" => Ok(Phase::Plan),
            "apply" => Ok(Phase::Apply),
            _ => Err(UnknownValue {
                what: "run phase",
                value: s.to_owned(),
            }),
        }
    }
}

/// What the runner of a phase reports (the engine container's termination message).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// The phase finished (the engine exited 0 and everything was stored).
    pub ok: bool,
    #[serde(default)]
    pub has_changes: bool,
    #[serde(default)]
    pub additions: i64,
    #[serde(default)]
    pub changes: i64,
    #[serde(default)]
    pub destructions: i64,
    #[serde(default)]
    pub imports: i64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The runner stored the phase's whole log in the blob store ([`logs`]): no log
    /// ConfigMap is needed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_stored: bool,
    /// A health assessment's findings (an assessment run's plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment: Option<crate::assessment::AssessmentSummary>,
}

/// Counts a plan's resource changes from `terraform show -json` of the plan file: the
/// `actions` of each `resource_changes` entry (a replace counts as one addition and one
/// destruction, as TFE counts it), and whether anything (resources or outputs) changes.
pub fn count_changes(plan_json: &serde_json::Value) -> PhaseReport {
    let mut r = PhaseReport {
        ok: true,
        ..PhaseReport::default()
    };
    let empty = Vec::new();
    for rc in plan_json["resource_changes"].as_array().unwrap_or(&empty) {
        let actions: Vec<&str> = rc["change"]["actions"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        if rc["change"]["importing"].is_object() {
            r.imports += 1;
        }
        match actions.as_slice() {
            ["create"] => r.additions += 1,
            ["update"] => r.changes += 1,
            ["delete"] => r.destructions += 1,
            ["delete", "create"] | ["create", "delete"] => {
                r.additions += 1;
                r.destructions += 1;
            }
            _ => {}
        }
    }
    let outputs_change = plan_json["output_changes"].as_object().is_some_and(|o| {
        o.values().any(|c| {
            c["actions"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x != "no-op"))
        })
    });
    r.has_changes = r.additions + r.changes + r.destructions + r.imports > 0 || outputs_change;
    r
}

/// What a run's policy checks decide for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Gate {
    /// No policy set applied: the run goes on as without policies.
    #[default]
    None,
    /// Checked, nothing blocks (advisory failures warn), or the failures were overridden.
    Passed,
    /// A mandatory policy failed and may be overridden (every set with a blocking failure
    /// is overridable): the run waits `post_plan_awaiting_decision`.
    Overridable,
    /// A mandatory policy of a set that is not overridable failed: the run errors.
    Blocked,
}

/// The flags of a run that decide where a successful plan leads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub plan_only: bool,
    pub save_plan: bool,
    pub auto_apply: bool,
    /// A plan with no changes still goes on to an apply (TFE's `allow-empty-apply`).
    pub allow_empty_apply: bool,
    /// What the plan's policy checks decided.
    pub policy: Gate,
}

/// A cancel asked through the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    None,
    Cancel,
    Force,
}

/// What the controller sees of a phase's Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodSeen {
    /// No Pod of the current phase.
    Absent,
    /// Created, its engine not ended (or the Pod is being deleted).
    Running,
    /// The engine ended with this report (none when it wrote no termination message).
    Ended(Option<PhaseReport>),
}

/// What the controller does for one run in one reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The run's next state (written with the phase's outcome).
    pub to: Option<RunState>,
    /// Create the Pod of this phase (then move to `to`).
    pub create_pod: Option<Phase>,
    /// Delete the current Pod with this grace period (seconds).
    pub delete_pod: Option<i64>,
    /// The report to record in the phase's status.
    pub report: Option<PhaseReport>,
    /// Why the run errored.
    pub message: Option<String>,
}

/// The grace period a canceled engine gets to stop and save its state.
pub const CANCEL_GRACE_SECONDS: i64 = 60;

/// How long after a cancel request a force-cancel becomes available: TFE's cool-off,
/// whose end `force-cancel-available-at` shows (go-tfe waits for a time in the future
/// after every cancel). Shorter than [`CANCEL_GRACE_SECONDS`], so forcing still cuts the
/// engine's grace period short.
pub const FORCE_CANCEL_COOL_OFF_SECONDS: i64 = 10;

/// When a force-cancel becomes available, from the time a cancel was asked (RFC 3339;
/// None when none was, or it does not read): the cool-off after it. Shown after every
/// cancel request, as in TFE, whatever the run became since (a pending run is canceled
/// at once).
pub fn force_cancel_available_at(cancel_requested_at: Option<&str>) -> Option<jiff::Timestamp> {
    let asked = cancel_requested_at?.parse::<jiff::Timestamp>().ok()?;
    asked
        .checked_add(jiff::SignedDuration::from_secs(
            FORCE_CANCEL_COOL_OFF_SECONDS,
        ))
        .ok()
}

/// Whether a run in `state` may be force-canceled at `now` (`is-force-cancelable`): it
/// is still cancelable, a cancel was asked and its cool-off is over.
pub fn force_cancelable(
    state: RunState,
    cancel_requested_at: Option<&str>,
    now: jiff::Timestamp,
) -> bool {
    state.is_cancelable()
        && force_cancel_available_at(cancel_requested_at).is_some_and(|at| at <= now)
}

/// The controller's decision for a run in `state` (not pending: [`may_start`] decides
/// that) with `cancel` asked and its current phase's Pod `pod`.
pub fn decide(state: RunState, cancel: Cancel, pod: &PodSeen, flags: Flags) -> Decision {
    let phase = match state {
        RunState::PlanQueued | RunState::Planning => Phase::Plan,
        RunState::Confirmed | RunState::ApplyQueued | RunState::Applying => Phase::Apply,
        _ => return Decision::default(),
    };
    let canceled = |report: Option<PhaseReport>| Decision {
        to: Some(match cancel {
            Cancel::Force => RunState::ForceCanceled,
            _ => RunState::Canceled,
        }),
        report,
        ..Decision::default()
    };
    let running = match phase {
        Phase::Plan => RunState::Planning,
        Phase::Apply => RunState::Applying,
    };
    let queued = matches!(
        state,
        RunState::PlanQueued | RunState::Confirmed | RunState::ApplyQueued
    );
    match (state, pod) {
        (_, PodSeen::Absent) if queued => {
            if cancel != Cancel::None {
                return canceled(None);
            }
            Decision {
                create_pod: Some(phase),
                to: Some(running),
                ..Decision::default()
            }
        }
        // The Pod runs but the move to planning/applying was not recorded (its write lost
        // to a concurrent one): recorded now, so the phase's Pod is named in the status.
        (_, PodSeen::Running) if queued && cancel == Cancel::None => Decision {
            to: Some(running),
            ..Decision::default()
        },
        (_, PodSeen::Running) => match cancel {
            Cancel::None => Decision::default(),
            Cancel::Cancel => Decision {
                delete_pod: Some(CANCEL_GRACE_SECONDS),
                ..Decision::default()
            },
            Cancel::Force => Decision {
                delete_pod: Some(0),
                ..Decision::default()
            },
        },
        (RunState::Planning | RunState::Applying, PodSeen::Absent) => {
            if cancel != Cancel::None {
                return canceled(None);
            }
            Decision {
                to: Some(RunState::Errored),
                message: Some(format!(
                    "the {} Pod was lost before its engine ended",
                    phase.as_str()
                )),
                ..Decision::default()
            }
        }
        (_, PodSeen::Ended(report)) => {
            if cancel != Cancel::None {
                return canceled(report.clone());
            }
            match report {
                Some(r) if r.ok => Decision {
                    to: Some(match phase {
                        Phase::Apply => RunState::Applied,
                        Phase::Plan => after_successful_plan(r.has_changes, flags),
                    }),
                    report: Some(r.clone()),
                    ..Decision::default()
                },
                Some(r) => Decision {
                    to: Some(RunState::Errored),
                    message: r.message.clone(),
                    report: Some(r.clone()),
                    ..Decision::default()
                },
                None => Decision {
                    to: Some(RunState::Errored),
                    message: Some(format!(
                        "the {} Pod ended without a report from the runner",
                        phase.as_str()
                    )),
                    ..Decision::default()
                },
            }
        }
        _ => Decision::default(),
    }
}

/// The state after a successful plan for a run with these flags.
/// A failed mandatory policy stops the run (errored, or waiting for an override), except a
/// speculative one, which never blocks anything; checks that passed lead to
/// `post_plan_completed` instead of `planned`.
pub fn after_successful_plan(has_changes: bool, flags: Flags) -> RunState {
    if flags.plan_only || (!has_changes && !flags.allow_empty_apply) {
        return RunState::PlannedAndFinished;
    }
    match flags.policy {
        Gate::Blocked => RunState::Errored,
        Gate::Overridable => RunState::PostPlanAwaitingDecision,
        _ => after_policy_checks(flags),
    }
}

/// Where a run goes once its policy checks passed or were overridden.
pub fn after_policy_checks(flags: Flags) -> RunState {
    if flags.save_plan {
        RunState::PlannedAndSaved
    } else if flags.auto_apply {
        RunState::Confirmed
    } else if flags.policy == Gate::None {
        RunState::Planned
    } else {
        RunState::PostPlanCompleted
    }
}

/// The key of a status timestamp (`plan-queued-at` for `plan_queued`).
pub fn timestamp_key(state: RunState) -> String {
    format!("{}-at", state.as_str().replace('_', "-"))
}

/// When a workspace's auto-destroy run is due: at `auto-destroy-at`, or
/// `auto-destroy-activity-duration` after its last activity (whichever comes first), as
/// an RFC 3339 time (the key of the run it queues, so it is queued once per due time).
pub fn auto_destroy_due(
    at: Option<&str>,
    activity_duration: Option<&str>,
    last_activity: Option<&str>,
) -> Option<jiff::Timestamp> {
    let at = at.and_then(|a| a.parse::<jiff::Timestamp>().ok());
    let after_activity = activity_duration
        .and_then(|d| crate::rules::parse_auto_destroy_activity_duration(d).ok())
        .zip(last_activity.and_then(|t| t.parse::<jiff::Timestamp>().ok()))
        .and_then(|((n, unit), last)| {
            let hours = match unit {
                crate::rules::DurationUnit::Days => i64::from(n) * 24,
                crate::rules::DurationUnit::Hours => i64::from(n),
            };
            last.checked_add(jiff::SignedDuration::from_hours(hours))
                .ok()
        });
    match (at, after_activity) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the performance attributes need of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunTimes<'a> {
    /// Creation time (RFC 3339): orders the runs.
    pub created: &'a str,
    pub state: RunState,
    pub plan: (Option<&'a str>, Option<&'a str>),
    pub apply: (Option<&'a str>, Option<&'a str>),
}

/// How many runs the performance attributes cover.
pub const PERFORMANCE_RUNS: usize = 30;

/// A workspace's performance attributes from its runs: over the newest
/// [`PERFORMANCE_RUNS`] runs that errored or applied, the average plan and apply times
/// (milliseconds, of the phases that have both ends) and the count of errored runs.
pub fn performance(runs: &[RunTimes<'_>]) -> crate::resources::WorkspaceMetrics {
    let mut done: Vec<&RunTimes<'_>> = runs
        .iter()
        .filter(|r| matches!(r.state, RunState::Applied | RunState::Errored))
        .collect();
    done.sort_by(|a, b| b.created.cmp(a.created));
    done.truncate(PERFORMANCE_RUNS);
    let millis = |(start, end): (Option<&str>, Option<&str>)| -> Option<i64> {
        let s: jiff::Timestamp = start?.parse().ok()?;
        let e: jiff::Timestamp = end?.parse().ok()?;
        Some(e.duration_since(s).as_millis() as i64)
    };
    let average = |v: Vec<i64>| (!v.is_empty()).then(|| v.iter().sum::<i64>() / v.len() as i64);
    crate::resources::WorkspaceMetrics {
        plan_duration_average: average(done.iter().filter_map(|r| millis(r.plan)).collect()),
        apply_duration_average: average(done.iter().filter_map(|r| millis(r.apply)).collect()),
        policy_check_failures: Some(0),
        run_failures: Some(done.iter().filter(|r| r.state == RunState::Errored).count() as i64),
        workspace_kpis_run_count: Some(done.len() as i64),
    }
}

#[cfg(test)]
mod tests;
