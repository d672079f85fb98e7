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
    pub const ALL: [RunState; 14] = [
        RunState::Pending,
        RunState::PlanQueued,
        RunState::Planning,
        RunState::Planned,
        RunState::PlannedAndFinished,
        RunState::PlannedAndSaved,
        RunState::Confirmed,
        RunState::ApplyQueued,
        RunState::Applying,
        RunState::Applied,
        RunState::Discarded,
        RunState::Errored,
        RunState::Canceled,
        RunState::ForceCanceled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::PlanQueued => "plan_queued",
            RunState::Planning => "planning",
            RunState::Planned => "planned",
            RunState::PlannedAndFinished => "planned_and_finished",
            RunState::PlannedAndSaved => "planned_and_saved",
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
        matches!(self, RunState::Planned | RunState::PlannedAndSaved)
    }

    /// Can be discarded: waiting for its turn or for a confirmation.
    pub fn is_discardable(self) -> bool {
        matches!(
            self,
            RunState::Pending | RunState::Planned | RunState::PlannedAndSaved
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

/// The runs of one workspace that wait or hold it, as the queue needs them: apply runs
/// (not plan-only) in creation order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedRun<'a> {
    pub name: &'a str,
    /// Creation time, RFC 3339 (orders the queue; the name breaks ties).
    pub created: &'a str,
    pub state: RunState,
    pub plan_only: bool,
}

/// Whether the pending run `name` may start now: plan-only runs always; an apply run when
/// no other apply run of the workspace holds it and none created before it is waiting,
/// and the workspace is not locked by anybody but this run.
pub fn may_start(
    name: &str,
    runs: &[QueuedRun<'_>],
    lock: Option<&crate::lock::LockHolder>,
    run_id: &str,
) -> Result<(), Wait> {
    let me = runs.iter().find(|r| r.name == name);
    if me.is_some_and(|r| r.plan_only) {
        return Ok(());
    }
    let Some(me) = me else {
        return Err(Wait::Queue);
    };
    let applies = runs.iter().filter(|r| !r.plan_only && r.name != name);
    for r in applies {
        if r.state.holds_workspace() {
            return Err(Wait::Active(r.name.to_owned()));
        }
        if r.state == RunState::Pending && (r.created, r.name) < (me.created, me.name) {
            return Err(Wait::Queue);
        }
    }
    match lock {
        Some(crate::lock::LockHolder::Run(id)) if id == run_id => Ok(()),
        Some(holder) => Err(Wait::Locked(holder.annotation())),
        None => Ok(()),
    }
}

/// Why a pending run waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Another run holds the workspace.
    Active(String),
    /// Runs queued before it go first.
    Queue,
    /// The workspace is locked (by this holder).
    Locked(String),
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Active(r) => write!(f, "waiting for run {r} to finish"),
            Wait::Queue => f.write_str("waiting for earlier runs of the workspace"),
            Wait::Locked(h) => write!(f, "waiting for the workspace to be unlocked ({h})"),
        }
    }
}

/// The flags of a run that decide where a successful plan leads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub plan_only: bool,
    pub save_plan: bool,
    pub auto_apply: bool,
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
    match (state, pod) {
        (RunState::PlanQueued | RunState::Confirmed | RunState::ApplyQueued, PodSeen::Absent) => {
            if cancel != Cancel::None {
                return canceled(None);
            }
            Decision {
                create_pod: Some(phase),
                to: Some(match phase {
                    Phase::Plan => RunState::Planning,
                    Phase::Apply => RunState::Applying,
                }),
                ..Decision::default()
            }
        }
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
pub fn after_successful_plan(has_changes: bool, flags: Flags) -> RunState {
    if flags.plan_only || !has_changes {
        RunState::PlannedAndFinished
    } else if flags.save_plan {
        RunState::PlannedAndSaved
    } else if flags.auto_apply {
        RunState::Confirmed
    } else {
        RunState::Planned
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

/// Whether engine version `version` (`1.11.4`) satisfies a workspace's
/// `terraform-version`: an exact version, `latest` (anything), or a constraint of
/// comma-separated `=`, `!=`, `>`, `>=`, `<`, `<=` and `~>` terms (`~> 1.11` allows 1.x
/// from 1.11, `~> 1.11.0` allows 1.11.x). `Err` says what does not parse.
pub fn version_satisfies(constraint: &str, version: &str) -> Result<bool, String> {
    fn parse(v: &str) -> Option<Vec<u64>> {
        let core = v.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next()?;
        let parts: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| !p.is_empty() && p.len() <= 3)
    }
    let pad = |mut v: Vec<u64>| {
        v.resize(3, 0);
        v
    };
    let have = parse(version)
        .map(pad)
        .ok_or_else(|| format!("engine version {version:?} is not a version"))?;
    let constraint = constraint.trim();
    if constraint.is_empty() || constraint == "latest" {
        return Ok(true);
    }
    for term in constraint.split(',') {
        let term = term.trim();
        let (op, rest) = ["~>", ">=", "<=", "!=", "=", ">", "<"]
            .iter()
            .find_map(|op| term.strip_prefix(op).map(|r| (*op, r)))
            .unwrap_or(("=", term));
        let given = parse(rest).ok_or_else(|| format!("{term:?} is not a version constraint"))?;
        let want = pad(given.clone());
        let ok = match op {
            "=" => have == want,
            "!=" => have != want,
            ">" => have > want,
            ">=" => have >= want,
            "<" => have < want,
            "<=" => have <= want,
            _ => {
                // Pessimistic: at least `want`, and the same leading parts but the last given.
                let fixed = given.len().saturating_sub(1).max(1);
                have >= want && have[..fixed] == want[..fixed]
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The exact version a `terraform-version` names (`1.11.4`, not a constraint).
pub fn exact_version(constraint: &str) -> Option<&str> {
    let c = constraint.trim().trim_start_matches('=').trim();
    (!c.is_empty()
        && c.chars().all(|ch| ch.is_ascii_digit() || ch == '.')
        && c.split('.').count() == 3)
        .then_some(c)
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
mod tests {
    use super::*;
    use crate::lock::LockHolder;

    #[test]
    fn performance_over_applied_and_errored_runs() {
        let t = |s: &'static str| Some(s);
        let runs = [
            RunTimes {
                created: "2026-01-01T00:00:01Z",
                state: RunState::Applied,
                plan: (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:02Z")),
                apply: (t("2026-01-01T00:00:03Z"), t("2026-01-01T00:00:07Z")),
            },
            RunTimes {
                created: "2026-01-01T00:00:02Z",
                state: RunState::Errored,
                plan: (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:04Z")),
                apply: (None, None),
            },
            RunTimes {
                created: "2026-01-01T00:00:03Z",
                state: RunState::Discarded,
                plan: (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:01:00Z")),
                apply: (None, None),
            },
        ];
        let m = performance(&runs);
        assert_eq!(m.plan_duration_average, Some(3000));
        assert_eq!(m.apply_duration_average, Some(4000));
        assert_eq!(
            (m.run_failures, m.workspace_kpis_run_count),
            (Some(1), Some(2))
        );
        let none = performance(&[]);
        assert_eq!(
            (none.plan_duration_average, none.workspace_kpis_run_count),
            (None, Some(0))
        );
    }

    #[test]
    fn auto_destroy_due_times() {
        let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert_eq!(auto_destroy_due(None, None, None), None);
        assert_eq!(
            auto_destroy_due(Some("2026-01-02T00:00:00Z"), None, None),
            Some(t("2026-01-02T00:00:00Z"))
        );
        assert_eq!(
            auto_destroy_due(None, Some("2d"), Some("2026-01-01T00:00:00Z")),
            Some(t("2026-01-03T00:00:00Z"))
        );
        assert_eq!(
            auto_destroy_due(
                Some("2026-01-05T00:00:00Z"),
                Some("36h"),
                Some("2026-01-01T00:00:00Z")
            ),
            Some(t("2026-01-02T12:00:00Z"))
        );
        assert_eq!(auto_destroy_due(Some("not a time"), Some("0d"), None), None);
    }

    #[test]
    fn engine_versions() {
        let ok = |c: &str, v: &str| version_satisfies(c, v).unwrap();
        assert!(ok("1.11.4", "1.11.4") && !ok("1.11.3", "1.11.4"));
        assert!(ok("latest", "1.2.3") && ok("", "1.2.3"));
        assert!(ok("~> 1.11.0", "1.11.9") && !ok("~> 1.11.0", "1.12.0"));
        assert!(ok("~> 1.11", "1.12.0") && !ok("~> 1.11", "2.0.0") && !ok("~> 1.11", "1.10.9"));
        assert!(ok(">= 1.5, < 2.0", "1.11.4") && !ok(">= 1.5, < 1.10", "1.11.4"));
        assert!(ok("!= 1.0.0", "1.11.4") && ok("v1.11.4", "1.11.4"));
        assert!(version_satisfies(">= banana", "1.0.0").is_err());
        assert_eq!(exact_version("1.11.4"), Some("1.11.4"));
        assert_eq!(exact_version("= 1.11.4"), Some("1.11.4"));
        assert_eq!(exact_version("~> 1.11"), None);
        assert_eq!(exact_version("latest"), None);
    }

    fn q<'a>(name: &'a str, created: &'a str, state: RunState, plan_only: bool) -> QueuedRun<'a> {
        QueuedRun {
            name,
            created,
            state,
            plan_only,
        }
    }

    #[test]
    fn states_round_trip_and_actions() {
        for s in RunState::ALL {
            assert_eq!(s.as_str().parse::<RunState>().unwrap(), s);
        }
        assert!("nope".parse::<RunState>().is_err());
        assert_eq!(RunState::of(None).unwrap(), RunState::Pending);
        assert!(RunState::Planned.is_confirmable());
        assert!(!RunState::Applying.is_confirmable());
        assert!(RunState::Pending.is_discardable() && RunState::Planned.is_discardable());
        assert!(!RunState::Applying.is_discardable());
        assert!(RunState::Applying.is_cancelable() && !RunState::Planned.is_cancelable());
        assert!(RunState::Applied.is_final() && !RunState::Planned.is_final());
        assert_eq!(timestamp_key(RunState::PlanQueued), "plan-queued-at");
    }

    #[test]
    fn phase_ids() {
        assert_eq!(plan_id("run-abc"), "plan-abc");
        assert_eq!(apply_id("run-abc"), "apply-abc");
        assert_eq!(run_of("plan-abc").as_deref(), Some("run-abc"));
        assert_eq!(run_of("apply-abc").as_deref(), Some("run-abc"));
        assert_eq!(run_of("ws-abc"), None);
        assert_eq!(run_of("plan-"), None);
    }

    #[test]
    fn queue_one_apply_run_at_a_time_in_order() {
        let runs = [
            q("a", "2026-01-01T00:00:01Z", RunState::Applying, false),
            q("b", "2026-01-01T00:00:02Z", RunState::Pending, false),
            q("c", "2026-01-01T00:00:03Z", RunState::Pending, false),
            q("p", "2026-01-01T00:00:04Z", RunState::Pending, true),
        ];
        assert_eq!(
            may_start("b", &runs, None, "run-b"),
            Err(Wait::Active("a".into()))
        );
        // Plan-only runs never wait.
        assert_eq!(may_start("p", &runs, None, "run-p"), Ok(()));
        let after = [
            q("a", "2026-01-01T00:00:01Z", RunState::Applied, false),
            runs[1].clone(),
            runs[2].clone(),
        ];
        assert_eq!(may_start("b", &after, None, "run-b"), Ok(()));
        assert_eq!(may_start("c", &after, None, "run-c"), Err(Wait::Queue));
        // A workspace locked by a user holds the queue; locked by this run, it goes on.
        let user = LockHolder::User("ann".into());
        assert_eq!(
            may_start("b", &after, Some(&user), "run-b"),
            Err(Wait::Locked("user:ann".into()))
        );
        let mine = LockHolder::Run("run-b".into());
        assert_eq!(may_start("b", &after, Some(&mine), "run-b"), Ok(()));
        // A run not in the list (not in the cache yet) waits.
        assert_eq!(may_start("z", &after, None, "run-z"), Err(Wait::Queue));
    }

    #[test]
    fn decide_phases() {
        use PodSeen::*;
        const MANUAL: Flags = Flags {
            plan_only: false,
            save_plan: false,
            auto_apply: false,
        };
        const AUTO: Flags = Flags {
            auto_apply: true,
            ..MANUAL
        };
        let ok = |has_changes| PhaseReport {
            ok: true,
            has_changes,
            ..PhaseReport::default()
        };
        let d = decide(RunState::PlanQueued, Cancel::None, &Absent, MANUAL);
        assert_eq!(
            (d.create_pod, d.to),
            (Some(Phase::Plan), Some(RunState::Planning))
        );
        let d = decide(RunState::Confirmed, Cancel::None, &Absent, MANUAL);
        assert_eq!(
            (d.create_pod, d.to),
            (Some(Phase::Apply), Some(RunState::Applying))
        );
        assert_eq!(
            decide(RunState::Planning, Cancel::None, &Running, MANUAL),
            Decision::default()
        );
        assert_eq!(
            decide(RunState::Planning, Cancel::Cancel, &Running, MANUAL).delete_pod,
            Some(CANCEL_GRACE_SECONDS)
        );
        assert_eq!(
            decide(RunState::Applying, Cancel::Force, &Running, MANUAL).delete_pod,
            Some(0)
        );
        assert_eq!(
            decide(
                RunState::Planning,
                Cancel::None,
                &Ended(Some(ok(true))),
                MANUAL
            )
            .to,
            Some(RunState::Planned)
        );
        assert_eq!(
            decide(
                RunState::Planning,
                Cancel::None,
                &Ended(Some(ok(true))),
                AUTO
            )
            .to,
            Some(RunState::Confirmed)
        );
        assert_eq!(
            decide(
                RunState::Planning,
                Cancel::None,
                &Ended(Some(ok(false))),
                AUTO
            )
            .to,
            Some(RunState::PlannedAndFinished)
        );
        assert_eq!(
            decide(
                RunState::Applying,
                Cancel::None,
                &Ended(Some(ok(true))),
                MANUAL
            )
            .to,
            Some(RunState::Applied)
        );
        let failed = PhaseReport {
            ok: false,
            message: Some("boom".into()),
            ..PhaseReport::default()
        };
        let d = decide(
            RunState::Applying,
            Cancel::None,
            &Ended(Some(failed)),
            MANUAL,
        );
        assert_eq!(
            (d.to, d.message.as_deref()),
            (Some(RunState::Errored), Some("boom"))
        );
        assert_eq!(
            decide(RunState::Planning, Cancel::None, &Ended(None), MANUAL).to,
            Some(RunState::Errored)
        );
        // A lost Pod errors the run, with the cause.
        let d = decide(RunState::Applying, Cancel::None, &Absent, MANUAL);
        assert_eq!(d.to, Some(RunState::Errored));
        assert!(d.message.unwrap().contains("lost"));
        // Cancels.
        assert_eq!(
            decide(RunState::Applying, Cancel::Cancel, &Ended(None), MANUAL).to,
            Some(RunState::Canceled)
        );
        assert_eq!(
            decide(RunState::Applying, Cancel::Force, &Absent, MANUAL).to,
            Some(RunState::ForceCanceled)
        );
        assert_eq!(
            decide(RunState::PlanQueued, Cancel::Cancel, &Absent, MANUAL).to,
            Some(RunState::Canceled)
        );
        assert_eq!(
            decide(RunState::Planned, Cancel::None, &Absent, MANUAL),
            Decision::default()
        );
    }

    #[test]
    fn after_plan_flags() {
        use RunState::*;
        let f = |plan_only, save_plan, auto_apply| Flags {
            plan_only,
            save_plan,
            auto_apply,
        };
        assert_eq!(
            after_successful_plan(true, f(true, false, true)),
            PlannedAndFinished
        );
        assert_eq!(
            after_successful_plan(false, f(false, false, true)),
            PlannedAndFinished
        );
        assert_eq!(
            after_successful_plan(true, f(false, true, true)),
            PlannedAndSaved
        );
        assert_eq!(
            after_successful_plan(true, f(false, false, true)),
            Confirmed
        );
        assert_eq!(after_successful_plan(true, f(false, false, false)), Planned);
    }

    #[test]
    fn counting_changes() {
        let plan = serde_json::json!({"resource_changes": [
            {"change": {"actions": ["create"]}},
            {"change": {"actions": ["update"]}},
            {"change": {"actions": ["delete", "create"]}},
            {"change": {"actions": ["no-op"]}},
            {"change": {"actions": ["delete"]}}
        ]});
        let r = count_changes(&plan);
        assert_eq!(
            (r.additions, r.changes, r.destructions, r.has_changes),
            (2, 1, 2, true)
        );
        let none = count_changes(&serde_json::json!({"resource_changes": [
            {"change": {"actions": ["no-op"]}}]}));
        assert!(!none.has_changes);
        let outputs = count_changes(&serde_json::json!({"output_changes": {
            "o": {"actions": ["create"]}}}));
        assert!(outputs.has_changes);
    }
}
