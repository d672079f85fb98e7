//! Decide: what one reconcile of a run does, from its state, its cancel requests and
//! the observation of its Pod ([`decide`] → [`Plan`]). Pure.

use terrace_crds::testoutput::{RunnerReport, TestSummary};
use terrace_crds::testrun::{CancelRequest, TestRunState, Transition};

use super::observe::{EngineObs, PodObs};

/// Grace period of the Pod deletion of a cancel: the runner turns the SIGTERM into an
/// interrupt and the engine tears down what it created.
pub const CANCEL_GRACE_SECONDS: i64 = 30;
/// `errored` message of a run whose Pod was deleted by someone else.
pub const MSG_POD_DELETED: &str = "the test Pod was deleted";

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
    /// Archive the engine's log and remove [`FINALIZER`](crate::testpod::FINALIZER) from
    /// the Pod (after the transition is recorded). Never while the engine may still write
    /// to its log (`PodState::engine_may_write`): an interrupted engine's teardown
    /// belongs in the stored log.
    pub release: bool,
}

/// Decides what to do for a run in `state` with `cancel` requests whose Pod looks like
/// `pod`. Pure.
pub fn decide(state: TestRunState, cancel: CancelRequest, pod: &PodObs) -> Plan {
    let mut plan = Plan::default();
    if state.is_final() {
        if let PodObs::Present(p) = pod {
            plan.release = p.finalizer && !p.engine_may_write();
            // A Pod that can no longer do anything useful (stuck pulling an image, still
            // running after its run errored) is ended.
            if !p.deleting && !p.completed() {
                plan.delete_pod = Some(CANCEL_GRACE_SECONDS);
            }
        }
        return plan;
    }
    let p = match pod {
        // Canceled before it started: it ends without a Pod.
        PodObs::Missing | PodObs::Foreign
            if state == TestRunState::Pending && cancel != CancelRequest::None =>
        {
            plan.transition = Some(Transition::Canceled {
                forced: cancel == CancelRequest::ForceRequested,
            });
            return plan;
        }
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
        plan.release = !p.engine_may_write();
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
        plan.release = !p.engine_may_write();
        return plan;
    }
    if let Some(f) = &p.failure {
        plan.transition = Some(match cancel {
            CancelRequest::None => Transition::Errored(f.clone()),
            _ => Transition::on_exit(cancel, Err(f.clone())),
        });
        plan.release = !p.engine_may_write();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testrun::fixtures::{
        FAIL, INTERRUPTED, NO_SUMMARY, PASS, present, terminated, with,
    };
    use terrace_crds::testrun::TestResult;

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

    /// Force-cancel: delete with grace 0 (unless already done) and record canceled at once;
    /// the log is archived once the engine has ended.
    #[test]
    fn force_cancel_flow() {
        let deleting = with(present(Some(EngineObs::Running)), |p| {
            p.deleting = true;
            p.deletion_grace = Some(30);
        });
        let p = decide(S::Running, C::ForceRequested, &deleting);
        assert_eq!(p.delete_pod, Some(0));
        assert_eq!(p.transition, Some(Transition::Canceled { forced: true }));
        assert!(!p.release, "the engine may still write");
        let killed = with(present(terminated(INTERRUPTED)), |p| p.deleting = true);
        assert!(decide(S::Canceled, C::ForceRequested, &killed).release);
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
        // The interrupted engine tears down: its log is archived once it has ended (or
        // the deletion is long overdue), so the stored log is complete.
        assert!(!p.release);
        assert!(!decide(S::Errored, C::None, &deleting).release);
        let overdue = with(deleting.clone(), |p| p.deletion_overdue = true);
        assert!(decide(S::Errored, C::None, &overdue).release);
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

    /// A run canceled before its engine started: pending without a Pod ends canceled
    /// without one; queued (Pod not started) gets its Pod deleted like a running one and
    /// ends canceled once it is gone.
    #[test]
    fn cancel_before_the_engine_started() {
        let p = decide(S::Pending, C::Requested, &PodObs::Missing);
        assert!(!p.create_pod);
        assert_eq!(p.transition, Some(Transition::Canceled { forced: false }));
        assert_eq!(p.delete_pod, None);
        let p = decide(S::Pending, C::ForceRequested, &PodObs::Foreign);
        assert_eq!(p.transition, Some(Transition::Canceled { forced: true }));
        let p = decide(
            S::Queued,
            C::Requested,
            &present(Some(EngineObs::NotStarted)),
        );
        assert_eq!(p.delete_pod, Some(CANCEL_GRACE_SECONDS));
        assert_eq!(p.transition, None);
        let p = decide(S::Queued, C::Requested, &PodObs::Missing);
        assert_eq!(p.transition, Some(Transition::Canceled { forced: false }));
        // A Pod admitted just before the cancel (an operator restart in between) is
        // recorded and deleted.
        let p = decide(S::Pending, C::Requested, &present(None));
        assert_eq!(p.delete_pod, Some(CANCEL_GRACE_SECONDS));
        assert_eq!(p.transition, Some(Transition::PodCreated));
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
}
