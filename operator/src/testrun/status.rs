//! Status: the TestRun status this controller writes (server-side applied, only the
//! fields it owns), the pending run's waiting conditions, and the Events of transitions.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{API_VERSION, FIELD_MANAGER_OPERATOR};
use terrace_crds::testoutput::TestSummary;
use terrace_crds::testrun::{
    CancelRequest, Step, TestResult, TestRunState, Transition, transition,
};
use terrace_crds::{TestRun, TestRunStatus};

use super::context::RunContext;
use crate::Error;
use crate::conditions::{Outcome, REASON_WAITING_FOR_SLOT, kstatus_conditions};
use crate::events::publish_event;

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

pub(super) async fn record_event(
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

pub(super) async fn write_status(
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

/// Records a pending run's Reconciling/Stalled condition, when it changed.
pub(super) async fn wait_status(
    ctx: &RunContext,
    run: &TestRun,
    outcome: Outcome,
) -> Result<(), Error> {
    let cur = run.status.clone().unwrap_or_default();
    let conditions = kstatus_conditions(
        &cur.conditions,
        &outcome,
        run.meta().generation,
        Timestamp::now(),
    );
    let same = cur.status.as_deref() == Some(TestRunState::Pending.as_str())
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
pub(super) async fn fail_pending(
    ctx: &RunContext,
    run: &TestRun,
    t: &Transition,
) -> Result<Action, Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_crds::testoutput::TestStatus;
    use terrace_crds::testrun::TimestampKey;

    use CancelRequest as C;
    use TestRunState as S;

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
