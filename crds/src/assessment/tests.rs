use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::*;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn day() -> SignedDuration {
    SignedDuration::from_hours(24)
}

#[test]
fn result_ids_are_the_run_ids_of_assessments() {
    assert_eq!(result_id("run-AbC123").as_deref(), Some("asmtres-AbC123"));
    assert_eq!(
        run_id_of_result("asmtres-AbC123").as_deref(),
        Some("run-AbC123")
    );
    assert_eq!(result_id("ws-x"), None);
    assert_eq!(run_id_of_result("asmtres-"), None);
    assert_eq!(run_id_of_result("asmtres-a/b"), None);
    assert_eq!(run_id_of_result("run-abc"), None);
}

#[test]
fn the_offset_is_stable_within_the_interval_and_differs_by_workspace() {
    let a = offset("ws-aaaaaaaaaaaaaaaa", day());
    assert_eq!(a, offset("ws-aaaaaaaaaaaaaaaa", day()), "stable");
    assert!(a >= SignedDuration::ZERO && a < day());
    assert_ne!(a, offset("ws-bbbbbbbbbbbbbbbb", day()));
}

#[test]
fn ten_thousand_workspaces_spread_over_the_interval() {
    // Every hour of the day gets about a 24th of them (no hour more than twice that).
    let mut per_hour = [0usize; 24];
    for i in 0..10_000 {
        let o = offset(&format!("ws-{i:016}"), day());
        per_hour[(o.as_secs() / 3600) as usize] += 1;
    }
    let fair = 10_000 / 24;
    for (h, n) in per_hour.iter().enumerate() {
        assert!(*n > fair / 2 && *n < fair * 2, "hour {h}: {n} of 10000");
    }
}

#[test]
fn slots_follow_each_other_by_the_interval() {
    let id = "ws-slot0000000000001";
    let t0 = t("2026-03-01T00:00:00Z");
    let s1 = slot_after(id, day(), t0);
    assert!(s1 > t0 && s1 <= t0 + day());
    let s2 = slot_after(id, day(), s1);
    assert_eq!(s2, s1 + day(), "the next slot after a slot");
    assert_eq!(
        slot_after(id, day(), s1 - SignedDuration::from_millis(1)),
        s1
    );
    // The slot's time of day is the workspace's offset.
    let since_midnight = s1.as_millisecond().rem_euclid(day().as_millis() as i64);
    assert_eq!(since_midnight, offset(id, day()).as_millis() as i64);
}

#[test]
fn due_after_the_last_assessment_or_first_sight_or_at_once_when_asked() {
    let id = "ws-due0000000000001";
    let seen = t("2026-03-01T00:00:00Z");
    let never = due_at(id, day(), None, seen, None);
    assert_eq!(
        never,
        slot_after(id, day(), seen),
        "never assessed: the next slot"
    );
    let last = never + SignedDuration::from_secs(3);
    assert_eq!(due_at(id, day(), Some(last), seen, None), never + day());
    let asked = last + SignedDuration::from_hours(2);
    assert_eq!(due_at(id, day(), Some(last), seen, Some(asked)), asked);
    let old_ask = last - SignedDuration::from_secs(1);
    assert_eq!(
        due_at(id, day(), Some(last), seen, Some(old_ask)),
        never + day(),
        "a request the last assessment answered"
    );
    assert_eq!(due_at(id, day(), None, seen, Some(old_ask)), old_ask);
}

#[test]
fn eligibility_rows() {
    use Ineligible::*;
    assert_eq!(
        eligibility(false, false, "remote", true, true),
        Err(Disabled)
    );
    assert_eq!(
        eligibility(false, true, "remote", true, true),
        Ok(()),
        "enforced"
    );
    assert_eq!(eligibility(true, false, "agent", true, true), Ok(()));
    assert_eq!(
        eligibility(true, false, "local", true, true),
        Err(LocalExecution)
    );
    assert_eq!(
        eligibility(true, false, "remote", false, true),
        Err(NoConfiguration)
    );
    assert_eq!(
        eligibility(true, false, "remote", true, false),
        Err(NoState)
    );
}

#[test]
fn engines_older_than_0_15_4_cannot_assess() {
    assert!(engine_allows(None));
    assert!(engine_allows(Some("1.11.4")));
    assert!(engine_allows(Some("0.15.4")));
    assert!(
        engine_allows(Some("~> 0.14")),
        "a constraint is not refused"
    );
    assert!(!engine_allows(Some("0.15.3")));
    assert!(!engine_allows(Some("0.12.31")));
}

fn plan_with(drift: serde_json::Value, checks: serde_json::Value) -> serde_json::Value {
    json!({
        "format_version": "1.2",
        "prior_state": {"values": {"root_module": {
            "resources": [
                {"address": "local_file.a", "mode": "managed"},
                {"address": "local_file.b", "mode": "managed"},
                {"address": "data.x.y", "mode": "data"}
            ],
            "child_modules": [{"resources": [{"address": "module.m.null.c", "mode": "managed"}]}]
        }}},
        "resource_drift": drift,
        "resource_changes": [],
        "checks": checks
    })
}

#[test]
fn resource_drift_is_drift_with_the_resource_and_its_attributes() {
    let plan = plan_with(
        json!([
            {"address": "local_file.a", "change": {"actions": ["update"],
                "before": {"content": "one", "id": "1", "mode": "0644"},
                "after": {"content": "two", "id": "1", "mode": "0644", "extra": true}}},
            {"address": "local_file.b", "change": {"actions": ["delete"],
                "before": {"content": "x"}, "after": null}},
            {"address": "module.m.null.c", "change": {"actions": ["no-op"], "before": {}, "after": {}}}
        ]),
        json!([]),
    );
    let a = assess(&plan);
    assert_eq!(
        a.drift,
        vec![
            DriftedResource {
                address: "local_file.a".into(),
                action: "update".into(),
                attributes: vec!["content".into(), "extra".into()],
            },
            DriftedResource {
                address: "local_file.b".into(),
                action: "delete".into(),
                attributes: vec![],
            },
        ]
    );
    let s = a.summary();
    assert!(s.succeeded && s.drifted);
    assert_eq!((s.resources_drifted, s.resources_undrifted), (2, 1));
    assert_eq!(s.drifted_resources, ["local_file.a", "local_file.b"]);
    assert_eq!(s.state(), "Drifted");
    assert!(s.all_checks_succeeded(), "no checks");
}

#[test]
fn failed_checks_are_a_check_failure_not_drift() {
    let plan = plan_with(
        json!([]),
        json!([
            {"address": {"kind": "check", "name": "up", "to_display": "check.up"},
             "status": "fail",
             "instances": [{"address": {"to_display": "check.up"}, "status": "fail",
                 "problems": [{"message": "upstream is not ok"}]}]},
            {"address": {"kind": "resource", "to_display": "local_file.a"}, "status": "pass",
             "instances": [{"status": "pass"}]},
            {"address": {"kind": "output_value", "to_display": "output.o"}, "status": "unknown"}
        ]),
    );
    let s = assess(&plan).summary();
    assert!(s.succeeded && !s.drifted);
    assert_eq!(
        (
            s.checks_passed,
            s.checks_failed,
            s.checks_errored,
            s.checks_unknown
        ),
        (1, 1, 0, 1)
    );
    assert_eq!(s.failed_checks, ["check.up: upstream is not ok"]);
    assert!(s.checks_failing() && !s.all_checks_succeeded());
    assert_eq!(s.state(), "ChecksFailed");
    let [drifted, checks] = conditions(&s, "2026-03-01T00:00:00Z");
    assert_eq!((drifted.status, drifted.reason), ("False", "NoDrift"));
    assert_eq!((checks.status, checks.reason), ("False", "ChecksFailed"));
    assert!(
        checks.message.contains("upstream is not ok"),
        "{}",
        checks.message
    );
}

/// terraform 1.11's refresh-only plan keeps going when a postcondition fails (a
/// warning, exit 0, a plan file): `show -json` lists it under `checks` with the
/// resource's address, as captured here from a data source's postcondition.
#[test]
fn a_failed_postcondition_is_a_check_failure() {
    let plan = plan_with(
        json!([]),
        json!([
            {"address": {"kind": "resource", "mode": "data", "name": "up",
                "to_display": "data.terraform_remote_state.up", "type": "terraform_remote_state"},
             "status": "fail",
             "instances": [{"address": {"to_display": "data.terraform_remote_state.up"},
                 "status": "fail",
                 "problems": [{"message": "the upstream is not ok (postcondition)"}]}]}
        ]),
    );
    let s = assess(&plan).summary();
    assert!(s.succeeded && !s.drifted);
    assert_eq!((s.checks_failed, s.state()), (1, "ChecksFailed"));
    assert_eq!(
        s.failed_checks,
        ["data.terraform_remote_state.up: the upstream is not ok (postcondition)"]
    );
}

#[test]
fn an_error_is_a_failed_assessment_not_drift() {
    let s = AssessmentSummary::failed("the plan failed: Error: Unable to find remote state");
    assert!(!s.succeeded && !s.drifted && !s.checks_failing());
    assert_eq!(s.state(), "Errored");
    let [drifted, checks] = conditions(&s, "t");
    assert_eq!(
        (drifted.status, drifted.reason),
        ("Unknown", "AssessmentFailed")
    );
    assert_eq!(checks.status, "Unknown");
    assert!(drifted.message.contains("Unable to find remote state"));
    let long = AssessmentSummary::failed(&"x".repeat(5000));
    assert_eq!(long.error_message.unwrap().chars().count(), ERROR_MAX_CHARS);
}

#[test]
fn conditions_of_a_healthy_workspace() {
    let s = assess(&plan_with(json!([]), json!([]))).summary();
    assert_eq!(s.state(), "Healthy");
    let [drifted, checks] = conditions(&s, "t");
    assert_eq!((drifted.status, drifted.reason), ("False", "NoDrift"));
    assert_eq!((checks.status, checks.reason), ("True", "NoChecks"));
    assert!(
        drifted.message.contains("3 resources match"),
        "{}",
        drifted.message
    );
}

fn drifted() -> AssessmentSummary {
    AssessmentSummary {
        succeeded: true,
        drifted: true,
        resources_drifted: 1,
        drifted_resources: vec!["local_file.a".into()],
        ..AssessmentSummary::default()
    }
}

fn healthy() -> AssessmentSummary {
    AssessmentSummary {
        succeeded: true,
        ..AssessmentSummary::default()
    }
}

fn failing_checks() -> AssessmentSummary {
    AssessmentSummary {
        succeeded: true,
        checks_failed: 1,
        failed_checks: vec!["check.up: no".into()],
        ..AssessmentSummary::default()
    }
}

#[test]
fn changes_of_health_and_the_notifications_they_owe() {
    let reasons = |p: Option<&AssessmentSummary>, n: &AssessmentSummary| {
        changes(p, n)
            .into_iter()
            .map(|e| e.reason)
            .collect::<Vec<_>>()
    };
    assert!(
        reasons(None, &healthy()).is_empty(),
        "first result, healthy"
    );
    assert_eq!(reasons(None, &drifted()), ["DriftDetected"]);
    assert_eq!(reasons(Some(&healthy()), &drifted()), ["DriftDetected"]);
    assert!(
        reasons(Some(&drifted()), &drifted()).is_empty(),
        "still drifted"
    );
    assert_eq!(reasons(Some(&drifted()), &healthy()), ["DriftResolved"]);
    assert_eq!(
        reasons(Some(&healthy()), &failing_checks()),
        ["ChecksFailed"]
    );
    assert_eq!(
        reasons(Some(&failing_checks()), &healthy()),
        ["ChecksPassing"]
    );
    let failed = AssessmentSummary::failed("boom");
    assert_eq!(reasons(Some(&drifted()), &failed), ["AssessmentFailed"]);
    assert!(reasons(Some(&failed), &failed).is_empty(), "still failing");
    assert_eq!(
        reasons(Some(&failed), &drifted()),
        ["AssessmentSucceeded", "DriftDetected"]
    );
    assert!(changes(Some(&healthy()), &drifted())[0].warning);
    assert!(!changes(Some(&drifted()), &healthy())[0].warning);

    assert_eq!(
        triggers(Some(&healthy()), &drifted()),
        ["assessment:drifted"]
    );
    assert_eq!(
        triggers(Some(&healthy()), &failing_checks()),
        ["assessment:check_failure"]
    );
    assert_eq!(triggers(Some(&healthy()), &failed), ["assessment:failed"]);
    assert!(
        triggers(Some(&drifted()), &healthy()).is_empty(),
        "good news is not a trigger"
    );
    assert!(triggers(Some(&drifted()), &drifted()).is_empty());
    assert_eq!(trigger_message("assessment:drifted"), "Drift Detected");
    assert_eq!(trigger_message("assessment:check_failure"), "Checks Failed");
    assert_eq!(
        trigger_message("assessment:failed"),
        "Health Assessment Failed"
    );
}

#[test]
fn assessments_take_only_the_capacity_runs_leave() {
    assert!(may_start(0, 2, 0, 0), "no global limit");
    assert!(may_start(1, 2, 10, 0));
    assert!(!may_start(2, 2, 0, 0), "their own limit");
    assert!(may_start(0, 2, 4, 5));
    assert!(!may_start(0, 2, 5, 5), "runs hold every slot");
    assert!(
        !may_start(1, 2, 4, 5),
        "one assessment and four runs fill five slots"
    );
}
