//! The workspace lock state machine of SPEC.md ("Workspace lock state"), as a pure function.
//! The API server reads the current holder from the Workspace's annotations, asks
//! [`transition`] what to do, and writes the outcome with a resourceVersion precondition so
//! that of many concurrent lockers exactly one wins.
//!
//! Error details use the words go-tfe matches on: an unlock refused because someone else
//! holds the lock says "is locked by User|Team|Run …".

use std::fmt;

use crate::Workspace;
use crate::constants::{ANNOTATION_LOCKED_AT, ANNOTATION_LOCKED_BY};

/// Who holds a workspace's lock, from its annotations.
pub fn holder_of(ws: &Workspace) -> Option<LockHolder> {
    ws.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LOCKED_BY))
        .filter(|v| !v.is_empty())
        .map(|v| LockHolder::parse(v))
}

/// When a workspace was locked (RFC 3339), from its annotations.
pub fn locked_at(ws: &Workspace) -> Option<&str> {
    ws.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LOCKED_AT))
        .map(String::as_str)
}

/// Who holds a lock. Stored in the `terrace.dev/locked-by` annotation as `user:NAME`,
/// `team:ID` or `run:ID`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LockHolder {
    User(String),
    Team(String),
    Run(String),
}

impl LockHolder {
    /// Parses the annotation value; unknown prefixes are treated as user names.
    pub fn parse(value: &str) -> LockHolder {
        match value.split_once(':') {
            Some(("team", id)) => LockHolder::Team(id.to_owned()),
            Some(("run", id)) => LockHolder::Run(id.to_owned()),
            Some(("user", name)) => LockHolder::User(name.to_owned()),
            _ => LockHolder::User(value.to_owned()),
        }
    }

    /// The annotation value.
    pub fn annotation(&self) -> String {
        match self {
            LockHolder::User(n) => format!("user:{n}"),
            LockHolder::Team(n) => format!("team:{n}"),
            LockHolder::Run(n) => format!("run:{n}"),
        }
    }

    /// The JSON:API type of the `locked-by` relationship.
    pub fn jsonapi_type(&self) -> &'static str {
        match self {
            LockHolder::User(_) => "users",
            LockHolder::Team(_) => "teams",
            LockHolder::Run(_) => "runs",
        }
    }

    /// The ID (or name) of the holder.
    pub fn id(&self) -> &str {
        match self {
            LockHolder::User(n) | LockHolder::Team(n) | LockHolder::Run(n) => n,
        }
    }
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockHolder::User(n) => write!(f, "User {n}"),
            LockHolder::Team(n) => write!(f, "Team {n}"),
            LockHolder::Run(n) => write!(f, "Run {n}"),
        }
    }
}

/// A lock operation (B7, B8, B9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockOp {
    Lock { reason: String },
    Unlock,
    ForceUnlock,
}

/// What the caller's request leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockOutcome {
    /// Write the lock: holder and reason.
    Locked { holder: LockHolder, reason: String },
    /// Remove the lock.
    Unlocked,
}

/// Why an operation is refused, with the status code SPEC.md gives.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// 409: lock of a locked workspace.
    #[error("workspace already locked")]
    AlreadyLocked,
    /// 409: unlock or force-unlock of an unlocked workspace.
    #[error("workspace already unlocked")]
    AlreadyUnlocked,
    /// 409: unlock by someone who is not the holder.
    #[error("Unable to unlock workspace: it is locked by {0}")]
    LockedByOther(LockHolder),
    /// 503: intermediate state versions exist and the latest is not finalized yet.
    #[error("Unable to unlock workspace: the latest state version is still pending; retry shortly")]
    StatePending,
    /// 409: force-unlock of a lock an active run holds (TFE refuses it too: the run's
    /// apply would lose the right to save its state).
    #[error(
        "Unable to force-unlock workspace: it is locked by {0}, which is still active; cancel the run instead"
    )]
    HeldByActiveRun(LockHolder),
}

impl LockError {
    /// HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            LockError::StatePending => 503,
            _ => 409,
        }
    }
}

/// The facts the unlock rules depend on besides the holder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateVersions {
    /// Whether intermediate state versions exist whose latest is not finalized.
    pub latest_intermediate_pending: bool,
    /// Whether the holder is a run that has not ended yet.
    pub held_by_active_run: bool,
}

/// SPEC.md's lock table. `holder` is the current lock holder (None: unlocked), `caller`
/// the identity making the request (already authorized for the operation).
pub fn transition(
    holder: Option<&LockHolder>,
    op: &LockOp,
    caller: &LockHolder,
    state: StateVersions,
) -> Result<LockOutcome, LockError> {
    match (holder, op) {
        (None, LockOp::Lock { reason }) => Ok(LockOutcome::Locked {
            holder: caller.clone(),
            reason: reason.clone(),
        }),
        (Some(_), LockOp::Lock { .. }) => Err(LockError::AlreadyLocked),
        (None, LockOp::Unlock | LockOp::ForceUnlock) => Err(LockError::AlreadyUnlocked),
        (Some(h), LockOp::Unlock) if h != caller => Err(LockError::LockedByOther(h.clone())),
        (Some(_), LockOp::Unlock) if state.latest_intermediate_pending => {
            Err(LockError::StatePending)
        }
        (Some(h), LockOp::ForceUnlock) if state.held_by_active_run => {
            Err(LockError::HeldByActiveRun(h.clone()))
        }
        (Some(_), LockOp::Unlock | LockOp::ForceUnlock) => Ok(LockOutcome::Unlocked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> LockHolder {
        LockHolder::User("alice".into())
    }
    fn bob() -> LockHolder {
        LockHolder::User("bob".into())
    }
    const NO_STATE: StateVersions = StateVersions {
        latest_intermediate_pending: false,
        held_by_active_run: false,
    };
    const PENDING: StateVersions = StateVersions {
        latest_intermediate_pending: true,
        held_by_active_run: false,
    };

    #[test]
    fn force_unlock_of_an_active_runs_lock_is_409_and_of_an_ended_one_unlocks() {
        let run = LockHolder::Run("run-1".into());
        let active = StateVersions {
            held_by_active_run: true,
            ..NO_STATE
        };
        let e = transition(Some(&run), &LockOp::ForceUnlock, &alice(), active).unwrap_err();
        assert_eq!(e, LockError::HeldByActiveRun(run.clone()));
        assert_eq!(e.status(), 409);
        assert!(e.to_string().contains("cancel the run"), "{e}");
        assert_eq!(
            transition(Some(&run), &LockOp::ForceUnlock, &alice(), NO_STATE),
            Ok(LockOutcome::Unlocked)
        );
    }

    #[test]
    fn unlocked_lock_locks_with_reason() {
        let out = transition(
            None,
            &LockOp::Lock {
                reason: "deploy".into(),
            },
            &alice(),
            NO_STATE,
        );
        assert_eq!(
            out,
            Ok(LockOutcome::Locked {
                holder: alice(),
                reason: "deploy".into()
            })
        );
    }

    #[test]
    fn locked_lock_is_409_always() {
        for caller in [alice(), bob()] {
            let e = transition(
                Some(&alice()),
                &LockOp::Lock {
                    reason: String::new(),
                },
                &caller,
                NO_STATE,
            )
            .unwrap_err();
            assert_eq!(e, LockError::AlreadyLocked);
            assert_eq!(e.status(), 409);
        }
    }

    #[test]
    fn locker_unlocks() {
        assert_eq!(
            transition(Some(&alice()), &LockOp::Unlock, &alice(), NO_STATE),
            Ok(LockOutcome::Unlocked)
        );
    }

    #[test]
    fn unlock_with_pending_state_is_503_and_stays_locked() {
        let e = transition(Some(&alice()), &LockOp::Unlock, &alice(), PENDING).unwrap_err();
        assert_eq!(e, LockError::StatePending);
        assert_eq!(e.status(), 503);
    }

    #[test]
    fn unlocked_unlock_is_409() {
        let e = transition(None, &LockOp::Unlock, &alice(), NO_STATE).unwrap_err();
        assert_eq!(e, LockError::AlreadyUnlocked);
        assert_eq!(e.status(), 409);
        assert_eq!(e.to_string(), "workspace already unlocked");
    }

    #[test]
    fn unlock_by_another_is_409_naming_the_holder_kind() {
        for (holder, words) in [
            (alice(), "is locked by User alice"),
            (
                LockHolder::Team("team-1".into()),
                "is locked by Team team-1",
            ),
            (LockHolder::Run("run-1".into()), "is locked by Run run-1"),
        ] {
            let e = transition(Some(&holder), &LockOp::Unlock, &bob(), NO_STATE).unwrap_err();
            assert_eq!(e.status(), 409);
            assert!(e.to_string().contains(words), "{e}");
        }
    }

    #[test]
    fn force_unlock_unlocks_any_holder_and_409s_when_unlocked() {
        assert_eq!(
            transition(Some(&alice()), &LockOp::ForceUnlock, &bob(), PENDING),
            Ok(LockOutcome::Unlocked)
        );
        let e = transition(None, &LockOp::ForceUnlock, &bob(), NO_STATE).unwrap_err();
        assert_eq!(e, LockError::AlreadyUnlocked);
    }

    #[test]
    fn holders_roundtrip_through_annotations() {
        for h in [
            alice(),
            LockHolder::Team("t".into()),
            LockHolder::Run("run-x".into()),
        ] {
            assert_eq!(LockHolder::parse(&h.annotation()), h);
        }
        assert_eq!(
            LockHolder::parse("legacy"),
            LockHolder::User("legacy".into())
        );
        assert_eq!(LockHolder::User("x".into()).jsonapi_type(), "users");
    }
}
