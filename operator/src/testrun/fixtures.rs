//! Fixtures the step modules' tests share: runner reports and Pod observations.

use super::observe::{EngineObs, PodObs, PodState};

pub(crate) const PASS: &str = r#"{"status":"pass","passed":2,"failed":0,"errored":0,"skipped":1,"exitCode":0,"interrupted":false}"#;
pub(crate) const FAIL: &str = r#"{"status":"fail","passed":1,"failed":1,"errored":0,"skipped":0,"exitCode":1,"interrupted":false}"#;
pub(crate) const NO_SUMMARY: &str = r#"{"error":"engine exited without a test summary","message":"Invalid block","exitCode":1,"interrupted":false}"#;
pub(crate) const INTERRUPTED: &str = r#"{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0,"exitCode":0,"interrupted":true}"#;

pub(crate) fn present(engine: Option<EngineObs>) -> PodObs {
    PodObs::Present(PodState {
        finalizer: true,
        phase: Some("Running".into()),
        engine,
        ..Default::default()
    })
}

pub(crate) fn terminated(message: &str) -> Option<EngineObs> {
    Some(EngineObs::Terminated {
        exit_code: 0,
        reason: Some("Completed".into()),
        message: Some(message.into()),
    })
}

pub(crate) fn with(obs: PodObs, f: impl FnOnce(&mut PodState)) -> PodObs {
    match obs {
        PodObs::Present(mut p) => {
            f(&mut p);
            PodObs::Present(p)
        }
        o => o,
    }
}
