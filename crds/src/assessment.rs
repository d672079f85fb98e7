//! Health assessments, the pure part (docs/health.md): when a workspace is due
//! ([`due_at`], spread over the interval by a hash of its ID), whether it may be assessed
//! at all ([`eligibility`]), what a refresh-only plan says of its health ([`assess`]: the
//! drifted resources with their changed attributes, the `check` results), the summary a
//! result keeps ([`AssessmentSummary`]), the conditions and Events a change of health
//! gives ([`conditions`], [`changes`]) and the notifications it owes ([`triggers`]).
//!
//! An assessment is a Run object of the workspace with `spec.assessment` (plan-only,
//! refresh-only, never locking), created by the operator; its result's ID is the run's
//! ID with the `asmtres-` prefix ([`result_id`], [`run_id_of_result`]).

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// Prefix of an assessment result's ID (TFE's).
pub const RESULT_PREFIX: &str = "asmtres-";
/// Default time between two assessments of a workspace (HCP Terraform's: about a day).
pub const DEFAULT_INTERVAL: &str = "24h";
/// Most drifted resources and failed checks a summary names (the rest are counted).
pub const NAMED_MAX: usize = 5;
/// Longest error message a summary keeps, in characters.
pub const ERROR_MAX_CHARS: usize = 1024;

/// The assessment result ID of the assessment run `run_id` (`run-X` → `asmtres-X`).
pub fn result_id(run_id: &str) -> Option<String> {
    run_id
        .strip_prefix(crate::ids::IdKind::Run.prefix())
        .filter(|s| !s.is_empty())
        .map(|s| format!("{RESULT_PREFIX}{s}"))
}

/// The run ID behind assessment result `id` (`asmtres-X` → `run-X`).
pub fn run_id_of_result(id: &str) -> Option<String> {
    id.strip_prefix(RESULT_PREFIX)
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|s| format!("{}{s}", crate::ids::IdKind::Run.prefix()))
}

crd_struct! {
    /// What one assessment found, in TFE's terms (the attributes of an assessment result).
    #[derive(Default, Eq)]
    pub struct AssessmentSummary {
        /// The refresh-only plan ran to its end (false: the assessment failed, and says
        /// nothing of drift or checks).
        #[serde(default)]
        pub succeeded: bool,
        /// Real infrastructure differs from the state.
        #[serde(default)]
        pub drifted: bool,
        /// Why the assessment failed.
        pub error_message: Option<String>,
        /// Resources whose real copy differs from the state.
        #[serde(default)]
        pub resources_drifted: i64,
        /// Managed resources whose real copy matches the state.
        #[serde(default)]
        pub resources_undrifted: i64,
        /// `check` blocks, preconditions and postconditions that passed.
        #[serde(default)]
        pub checks_passed: i64,
        /// Those that failed.
        #[serde(default)]
        pub checks_failed: i64,
        /// Those whose evaluation errored.
        #[serde(default)]
        pub checks_errored: i64,
        /// Those not evaluated (unknown values).
        #[serde(default)]
        pub checks_unknown: i64,
        /// The first drifted resources (addresses), at most five.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub drifted_resources: Vec<String>,
        /// The first failed checks (`check.name: message`), at most five.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub failed_checks: Vec<String>,
    }
}

impl AssessmentSummary {
    /// A failed assessment: `why`, cut to [`ERROR_MAX_CHARS`].
    pub fn failed(why: &str) -> AssessmentSummary {
        AssessmentSummary {
            succeeded: false,
            error_message: Some(why.chars().take(ERROR_MAX_CHARS).collect()),
            ..AssessmentSummary::default()
        }
    }

    /// Every check passed (none failed, errored or stayed unknown) in a successful one.
    pub fn all_checks_succeeded(&self) -> bool {
        self.succeeded
            && self.checks_failed == 0
            && self.checks_errored == 0
            && self.checks_unknown == 0
    }

    /// A check failed or errored (continuous validation did not pass).
    pub fn checks_failing(&self) -> bool {
        self.succeeded && (self.checks_failed > 0 || self.checks_errored > 0)
    }

    /// One word for the workspace's printer column: `Healthy`, `Drifted`,
    /// `ChecksFailed`, `Drifted+ChecksFailed` or `Errored`.
    pub fn state(&self) -> &'static str {
        match (self.succeeded, self.drifted, self.checks_failing()) {
            (false, _, _) => "Errored",
            (true, true, true) => "Drifted+ChecksFailed",
            (true, true, false) => "Drifted",
            (true, false, true) => "ChecksFailed",
            (true, false, false) => "Healthy",
        }
    }
}

/// A resource whose real copy differs from the state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DriftedResource {
    pub address: String,
    /// `update` (changed outside Terraform) or `delete` (deleted outside Terraform).
    pub action: String,
    /// The top-level attributes whose values differ (empty when deleted).
    pub attributes: Vec<String>,
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CheckResult {
    /// `check.name`, a resource's address (its conditions), `output.name`, `var.name`.
    pub address: String,
    /// `check`, `resource`, `output_value`, `var`.
    pub kind: String,
    /// `pass`, `fail`, `error` or `unknown`.
    pub status: String,
    /// The failed assertions' messages.
    pub problems: Vec<String>,
}

/// Everything an assessment's JSON plan says of the workspace's health.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Assessment {
    pub drift: Vec<DriftedResource>,
    pub checks: Vec<CheckResult>,
    /// Managed resources in the state before the refresh.
    pub resources: i64,
}

impl Assessment {
    /// The summary a result keeps.
    pub fn summary(&self) -> AssessmentSummary {
        let count = |s: &str| self.checks.iter().filter(|c| c.status == s).count() as i64;
        let drifted = self.drift.len() as i64;
        AssessmentSummary {
            succeeded: true,
            drifted: drifted > 0,
            error_message: None,
            resources_drifted: drifted,
            resources_undrifted: (self.resources - drifted).max(0),
            checks_passed: count("pass"),
            checks_failed: count("fail"),
            checks_errored: count("error"),
            checks_unknown: count("unknown"),
            drifted_resources: self
                .drift
                .iter()
                .take(NAMED_MAX)
                .map(|d| d.address.clone())
                .collect(),
            failed_checks: self
                .checks
                .iter()
                .filter(|c| c.status == "fail" || c.status == "error")
                .take(NAMED_MAX)
                .map(|c| match c.problems.first() {
                    Some(p) => format!("{}: {}", c.address, cut(p, 200)),
                    None => format!("{} ({})", c.address, c.status),
                })
                .collect(),
        }
    }
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(n).collect();
        out.push('…');
        out
    }
}

/// What the JSON plan of a refresh-only plan (`terraform show -json`) says: each
/// `resource_drift` entry whose actions are not `no-op` is a drifted resource (the
/// attributes whose `before` and `after` differ), each `checks` entry a check result
/// (its instances' problems), and the managed resources of `prior_state` the count of
/// resources assessed.
pub fn assess(plan: &Value) -> Assessment {
    let empty = Vec::new();
    let mut drift = Vec::new();
    for rc in plan["resource_drift"].as_array().unwrap_or(&empty) {
        let actions: Vec<&str> = rc["change"]["actions"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if actions.is_empty() || actions == ["no-op"] || actions == ["read"] {
            continue;
        }
        let action = if actions.contains(&"delete") && !actions.contains(&"create") {
            "delete"
        } else {
            "update"
        };
        let (before, after) = (&rc["change"]["before"], &rc["change"]["after"]);
        let mut attributes: Vec<String> = Vec::new();
        if action == "update" {
            let keys = before
                .as_object()
                .into_iter()
                .chain(after.as_object())
                .flat_map(|o| o.keys());
            for k in keys {
                if before.get(k) != after.get(k) && !attributes.contains(k) {
                    attributes.push(k.clone());
                }
            }
            attributes.sort();
        }
        drift.push(DriftedResource {
            address: rc["address"].as_str().unwrap_or_default().to_owned(),
            action: action.to_owned(),
            attributes,
        });
    }
    let mut checks = Vec::new();
    for c in plan["checks"].as_array().unwrap_or(&empty) {
        let address = c["address"]["to_display"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let problems = c["instances"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .flat_map(|i| i["problems"].as_array().unwrap_or(&empty))
            .filter_map(|p| p["message"].as_str().map(str::to_owned))
            .collect();
        checks.push(CheckResult {
            address,
            kind: c["address"]["kind"].as_str().unwrap_or_default().to_owned(),
            status: c["status"].as_str().unwrap_or("unknown").to_owned(),
            problems,
        });
    }
    Assessment {
        drift,
        checks,
        resources: managed_resources(&plan["prior_state"]["values"]["root_module"]),
    }
}

/// The managed resources of a state module and its children.
fn managed_resources(module: &Value) -> i64 {
    let empty = Vec::new();
    let own = module["resources"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter(|r| r["mode"] == "managed")
        .count() as i64;
    own + module["child_modules"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(managed_resources)
        .sum::<i64>()
}

/// How far into each interval workspace `ws_id` is assessed: a hash of its ID, so the
/// workspaces of a cluster spread evenly over the interval instead of starting at once.
pub fn offset(ws_id: &str, interval: SignedDuration) -> SignedDuration {
    use sha2::{Digest, Sha256};
    let millis = interval.as_millis().max(1);
    let digest = Sha256::digest(ws_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let h = u64::from_be_bytes(first) as i128;
    SignedDuration::from_millis((h % millis) as i64)
}

/// The first of workspace `ws_id`'s assessment times strictly after `t`: the times are
/// `offset + k * interval` from the Unix epoch.
pub fn slot_after(ws_id: &str, interval: SignedDuration, t: Timestamp) -> Timestamp {
    let period = interval.as_millis().max(1);
    let off = offset(ws_id, interval).as_millis();
    let since = t.as_millisecond() as i128 - off;
    let k = since.div_euclid(period) + 1;
    let at = off + k * period;
    Timestamp::from_millisecond(i64::try_from(at).unwrap_or(i64::MAX)).unwrap_or(t)
}

/// When workspace `ws_id` is next due: the first of its times after its last assessment
/// started (`last`), or, never assessed, after the operator first saw it eligible
/// (`first_seen`), so enabling assessments on many workspaces at once does not start them
/// at once either. An assessment asked for (`requested`, later than the last one) is due
/// at once.
pub fn due_at(
    ws_id: &str,
    interval: SignedDuration,
    last: Option<Timestamp>,
    first_seen: Timestamp,
    requested: Option<Timestamp>,
) -> Timestamp {
    if let Some(r) = requested
        && last.is_none_or(|l| r > l)
    {
        return r;
    }
    slot_after(ws_id, interval, last.unwrap_or(first_seen))
}

/// Why a workspace is not assessed, or `Ok` when it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// Neither the workspace nor its organization (`assessments-enforced`) enables them.
    Disabled,
    /// `local` execution: terrace runs nothing for it.
    LocalExecution,
    /// No configuration version to plan.
    NoConfiguration,
    /// No state yet: nothing to assess.
    NoState,
}

impl Ineligible {
    /// What the workspace's health says.
    pub fn message(self) -> &'static str {
        match self {
            Ineligible::Disabled => "health assessments are not enabled",
            Ineligible::LocalExecution => {
                "health assessments need remote or agent execution (the workspace runs locally)"
            }
            Ineligible::NoConfiguration => {
                "health assessments wait for a configuration version to be uploaded"
            }
            Ineligible::NoState => {
                "health assessments wait for a state (apply the configuration first)"
            }
        }
    }
}

/// Whether a workspace is assessed: enabled by itself or enforced by its organization, in
/// remote or agent execution (`execution_mode`, the effective one), with a configuration
/// and a state (HCP Terraform's requirements).
pub fn eligibility(
    enabled: bool,
    enforced: bool,
    execution_mode: &str,
    has_configuration: bool,
    has_state: bool,
) -> Result<(), Ineligible> {
    if !(enabled || enforced) {
        Err(Ineligible::Disabled)
    } else if execution_mode == "local" {
        Err(Ineligible::LocalExecution)
    } else if !has_configuration {
        Err(Ineligible::NoConfiguration)
    } else if !has_state {
        Err(Ineligible::NoState)
    } else {
        Ok(())
    }
}

/// The oldest terraform version with health assessments (HCP Terraform's requirement).
pub const MIN_ENGINE_VERSION: &str = "0.15.4";

/// Whether a workspace's `terraform-version` allows assessments: an exact version older
/// than [`MIN_ENGINE_VERSION`] does not; a constraint, `latest` or none does.
pub fn engine_allows(terraform_version: Option<&str>) -> bool {
    let Some(v) = terraform_version.and_then(crate::engine::exact_version) else {
        return true;
    };
    !matches!(
        crate::engine::version_satisfies(&format!("< {MIN_ENGINE_VERSION}"), v),
        Ok(true)
    )
}

/// A condition's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCondition {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Condition type: real infrastructure differs from the state.
pub const CONDITION_DRIFTED: &str = "Drifted";
/// Condition type: the configuration's checks pass.
pub const CONDITION_CHECKS_PASSING: &str = "ChecksPassing";

/// The workspace conditions `Drifted` and `ChecksPassing` of its current result,
/// assessed at `at`.
pub fn conditions(s: &AssessmentSummary, at: &str) -> [HealthCondition; 2] {
    let when = format!("(assessed at {at})");
    if !s.succeeded {
        let why = format!(
            "the assessment failed {when}: {}",
            s.error_message.as_deref().unwrap_or("no reason given")
        );
        return [
            HealthCondition {
                type_: CONDITION_DRIFTED,
                status: "Unknown",
                reason: "AssessmentFailed",
                message: why.clone(),
            },
            HealthCondition {
                type_: CONDITION_CHECKS_PASSING,
                status: "Unknown",
                reason: "AssessmentFailed",
                message: why,
            },
        ];
    }
    let drifted = if s.drifted {
        HealthCondition {
            type_: CONDITION_DRIFTED,
            status: "True",
            reason: "DriftDetected",
            message: format!(
                "{} of {} resources drifted {when}: {}{}",
                s.resources_drifted,
                s.resources_drifted + s.resources_undrifted,
                s.drifted_resources.join(", "),
                more(s.resources_drifted, s.drifted_resources.len())
            ),
        }
    } else {
        HealthCondition {
            type_: CONDITION_DRIFTED,
            status: "False",
            reason: "NoDrift",
            message: format!("{} resources match the state {when}", s.resources_undrifted),
        }
    };
    let total = s.checks_passed + s.checks_failed + s.checks_errored + s.checks_unknown;
    let checks = if s.checks_failing() {
        HealthCondition {
            type_: CONDITION_CHECKS_PASSING,
            status: "False",
            reason: "ChecksFailed",
            message: format!(
                "{} of {total} checks failed, {} errored {when}: {}{}",
                s.checks_failed,
                s.checks_errored,
                s.failed_checks.join("; "),
                more(s.checks_failed + s.checks_errored, s.failed_checks.len())
            ),
        }
    } else if total == 0 {
        HealthCondition {
            type_: CONDITION_CHECKS_PASSING,
            status: "True",
            reason: "NoChecks",
            message: format!("the configuration has no checks {when}"),
        }
    } else {
        HealthCondition {
            type_: CONDITION_CHECKS_PASSING,
            status: "True",
            reason: "ChecksPassed",
            message: format!(
                "{} of {total} checks passed ({} unknown) {when}",
                s.checks_passed, s.checks_unknown
            ),
        }
    };
    [drifted, checks]
}

fn more(total: i64, named: usize) -> String {
    let rest = total - named as i64;
    if rest > 0 {
        format!(" and {rest} more")
    } else {
        String::new()
    }
}

/// What a new result changes of a workspace's health against the previous one
/// (`prior`): an Event each (Warning for worse, Normal for better), reason and message.
pub fn changes(prior: Option<&AssessmentSummary>, new: &AssessmentSummary) -> Vec<HealthEvent> {
    let mut out = Vec::new();
    let ev = |warning: bool, reason: &'static str, message: String| HealthEvent {
        warning,
        reason,
        message,
    };
    if !new.succeeded {
        if prior.is_none_or(|p| p.succeeded) {
            out.push(ev(
                true,
                "AssessmentFailed",
                format!(
                    "the health assessment failed: {}",
                    new.error_message.as_deref().unwrap_or("no reason given")
                ),
            ));
        }
        return out;
    }
    let known = prior.filter(|p| p.succeeded);
    if prior.is_some_and(|p| !p.succeeded) {
        out.push(ev(
            false,
            "AssessmentSucceeded",
            "the health assessment succeeds again".to_owned(),
        ));
    }
    match (known.map(|p| p.drifted), new.drifted) {
        (Some(false) | None, true) => out.push(ev(
            true,
            "DriftDetected",
            format!(
                "{} resources drifted: {}{}",
                new.resources_drifted,
                new.drifted_resources.join(", "),
                more(new.resources_drifted, new.drifted_resources.len())
            ),
        )),
        (Some(true), false) => out.push(ev(
            false,
            "DriftResolved",
            "real infrastructure matches the state again".to_owned(),
        )),
        _ => {}
    }
    match (
        known.map(AssessmentSummary::checks_failing),
        new.checks_failing(),
    ) {
        (Some(false) | None, true) => out.push(ev(
            true,
            "ChecksFailed",
            format!(
                "{} checks failed, {} errored: {}",
                new.checks_failed,
                new.checks_errored,
                new.failed_checks.join("; ")
            ),
        )),
        (Some(true), false) => out.push(ev(
            false,
            "ChecksPassing",
            "every check passes again".to_owned(),
        )),
        _ => {}
    }
    out
}

/// An Event a change of health records on the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The notification triggers a new result fires against the previous one: TFE's
/// `assessment:drifted` when drift appears, `assessment:check_failure` when checks start
/// failing, `assessment:failed` when an assessment fails after one that did not. A
/// workspace that stays drifted (or failing) is not notified again every interval.
pub fn triggers(prior: Option<&AssessmentSummary>, new: &AssessmentSummary) -> Vec<String> {
    changes(prior, new)
        .into_iter()
        .filter_map(|e| match e.reason {
            "DriftDetected" => Some("assessment:drifted"),
            "ChecksFailed" => Some("assessment:check_failure"),
            "AssessmentFailed" => Some("assessment:failed"),
            _ => None,
        })
        .map(str::to_owned)
        .collect()
}

/// TFE's words for an assessment trigger (a notification's message).
pub fn trigger_message(trigger: &str) -> &'static str {
    match trigger {
        "assessment:drifted" => "Drift Detected",
        "assessment:check_failure" => "Checks Failed",
        _ => "Health Assessment Failed",
    }
}

/// Whether an assessment may start now: at most `limit` assessments hold a Pod at once,
/// and (with a global limit, `global` > 0) only while runs, test runs and assessments
/// together leave a slot free, so assessments only take capacity runs do not use. Runs
/// never count assessments: an assessment never delays a run.
pub fn may_start(assessing: usize, limit: usize, others_running: usize, global: usize) -> bool {
    assessing < limit && (global == 0 || others_running + assessing < global)
}

#[cfg(test)]
mod tests;
