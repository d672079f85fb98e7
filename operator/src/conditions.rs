//! kstatus conditions (`Ready`, `Reconciling`, `Stalled`) built from the outcome of one
//! reconcile, the way kstatus-aware tools (kubectl wait, Flux, Argo CD, cli-utils) read
//! them: all three are always present, each carries the generation it describes, and its
//! `lastTransitionTime` moves only when its status changes.
//!
//! Controllers compute an [`Outcome`], pass the previous conditions and get the new list;
//! [`stall_transition`] tells them when to record an Event (which
//! [`crate::events::record_stall_transition`] does). Every condition reason of every
//! controller is defined here, once. Pure: no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use terrace_crds::constants::{CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED};

/// Reason of conditions when everything resolved.
pub const REASON_RECONCILED: &str = "Reconciled";
/// Reconciling reason: the object has no ID yet; assigning one failed for now and is
/// retried (the Organization cache is not ready, the label write kept conflicting).
pub const REASON_ASSIGNING_ID: &str = "AssigningId";
/// Reconciling reason: `spec.module` names a RegistryModule that has no ID yet.
pub const REASON_WAITING_FOR_MODULE: &str = "WaitingForModule";
/// Stalled reason: `spec.module` names a RegistryModule that does not exist.
pub const REASON_MODULE_NOT_FOUND: &str = "ModuleNotFound";
/// Reconciling reason: a configuration version waits for its archive to be uploaded.
pub const REASON_WAITING_FOR_UPLOAD: &str = "WaitingForUpload";
/// Stalled reason: the uploaded archive was rejected (`status.status` errored).
pub const REASON_UPLOAD_ERRORED: &str = "UploadErrored";
/// Reconciling reason: the Organization's namespace or default project is being created.
pub const REASON_CREATING: &str = "Creating";
/// Reconciling reason: the Organization's namespace is still terminating (left over from
/// a deleted organization); it is created again once it is gone.
pub const REASON_NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
/// Stalled reason: an older Organization already uses the namespace.
pub const REASON_NAMESPACE_CONFLICT: &str = "NamespaceConflict";
/// Stalled reason: the namespace exists and another object is its controller.
pub const REASON_NAMESPACE_OWNED_ELSEWHERE: &str = "NamespaceOwnedElsewhere";
/// Stalled reason: the Kubernetes API refused the namespace (invalid, forbidden).
pub const REASON_NAMESPACE_FAILED: &str = "NamespaceFailed";
/// Stalled reason: the Kubernetes API refused the default project (invalid, forbidden).
pub const REASON_DEFAULT_PROJECT_FAILED: &str = "DefaultProjectFailed";
/// Stalled reason: the Organization's namespace is a reserved name (`kube-*`, `default`,
/// terrace's own namespace…, see `terrace_crds::namespaces`).
pub const REASON_NAMESPACE_RESERVED: &str = "NamespaceReserved";
/// Stalled reason: the namespace exists, terrace did not create it, and its owner did not
/// opt in with the `terrace.dev/adopt` annotation naming the Organization.
pub const REASON_FOREIGN_NAMESPACE: &str = "ForeignNamespace";
/// Stalled reason: no Organization owns the object's namespace.
pub const REASON_ORGANIZATION_NOT_FOUND: &str = "OrganizationNotFound";
/// Stalled reason: a Workspace's `spec.project` names a Project that does not exist.
pub const REASON_PROJECT_NOT_FOUND: &str = "ProjectNotFound";
/// Stalled reason: an older Workspace of the namespace has the same TFE name.
pub const REASON_DUPLICATE_NAME: &str = "DuplicateName";
/// Reconciling reason: a Workspace's project (or the default project) has no ID yet or
/// does not exist yet (the Organization controller creates the default project).
pub const REASON_WAITING_FOR_PROJECT: &str = "WaitingForProject";
/// Reconciling reason of a pending test run waiting for a concurrency slot.
pub const REASON_WAITING_FOR_SLOT: &str = "WaitingForSlot";
/// Reconciling reason of a pending test run waiting for its ID, module or configuration
/// upload.
pub const REASON_WAITING_FOR_INPUTS: &str = "WaitingForInputs";
/// Event reason when an object stops being stalled.
pub const REASON_RECOVERED: &str = "Recovered";

/// The result of one reconcile, as kstatus sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Everything resolved: Ready True.
    Ready { message: String },
    /// The controller is waiting for something that will happen without a user's change
    /// (an ID being assigned, the default project being created): Reconciling True.
    Progressing { reason: String, message: String },
    /// The controller cannot make progress until something changes: Stalled True.
    Stalled { reason: String, message: String },
}

impl Outcome {
    /// A Progressing outcome.
    pub fn progressing(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Progressing {
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// A Stalled outcome.
    pub fn stalled(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Stalled {
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// The reason every condition carries.
    pub fn reason(&self) -> &str {
        match self {
            Outcome::Ready { .. } => REASON_RECONCILED,
            Outcome::Progressing { reason, .. } | Outcome::Stalled { reason, .. } => reason,
        }
    }

    /// The message every condition carries.
    pub fn message(&self) -> &str {
        match self {
            Outcome::Ready { message }
            | Outcome::Progressing { message, .. }
            | Outcome::Stalled { message, .. } => message,
        }
    }
}

/// The kstatus conditions for `outcome` at `generation`, keeping the
/// `lastTransitionTime` of every condition whose status did not change. Conditions of
/// other types in `previous` (set by other writers) are kept as they are, after ours.
pub fn kstatus_conditions(
    previous: &[Condition],
    outcome: &Outcome,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let truth = |b: bool| if b { "True" } else { "False" };
    let ours = [
        (
            CONDITION_READY,
            truth(matches!(outcome, Outcome::Ready { .. })),
        ),
        (
            CONDITION_RECONCILING,
            truth(matches!(outcome, Outcome::Progressing { .. })),
        ),
        (
            CONDITION_STALLED,
            truth(matches!(outcome, Outcome::Stalled { .. })),
        ),
    ];
    let mut out: Vec<Condition> = ours
        .into_iter()
        .map(|(type_, status)| {
            let last_transition_time = find(previous, type_)
                .filter(|c| c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or(Time(now));
            Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: outcome.reason().to_owned(),
                message: outcome.message().to_owned(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect();
    out.extend(
        previous
            .iter()
            .filter(|c| {
                ![CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED]
                    .contains(&c.type_.as_str())
            })
            .cloned(),
    );
    out
}

/// `conditions` with a workspace's health conditions, `Drifted` and `ChecksPassing`,
/// derived from its current assessment result (docs/health.md; none without one). Each
/// keeps its transition time from `previous` while its status stays.
pub fn with_health(
    mut conditions: Vec<Condition>,
    previous: &[Condition],
    health: Option<&terrace_crds::WorkspaceHealth>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    use terrace_crds::assessment::{CONDITION_CHECKS_PASSING, CONDITION_DRIFTED};
    conditions.retain(|c| c.type_ != CONDITION_DRIFTED && c.type_ != CONDITION_CHECKS_PASSING);
    let Some(h) = health.filter(|h| h.result_id.is_some()) else {
        return conditions;
    };
    let at = h.assessed_at.as_deref().unwrap_or("an unknown time");
    for c in terrace_crds::assessment::conditions(&h.summary, at) {
        let last_transition_time = find(previous, c.type_)
            .filter(|p| p.status == c.status)
            .map(|p| p.last_transition_time.clone())
            .unwrap_or(Time(now));
        conditions.push(Condition {
            type_: c.type_.to_owned(),
            status: c.status.to_owned(),
            reason: c.reason.to_owned(),
            message: c.message,
            observed_generation: generation,
            last_transition_time,
        });
    }
    conditions
}

/// `conditions` with a VCS-driven workspace's `RepositoryReadable` (docs/vcs.md): False
/// with the reason the API server recorded ([`ANNOTATION_VCS_ERROR`]) when its last fetch
/// failed, True otherwise; absent for a workspace that follows no repository. Keeps its
/// transition time from `previous` while its status stays.
///
/// [`ANNOTATION_VCS_ERROR`]: terrace_crds::constants::ANNOTATION_VCS_ERROR
pub fn with_repository(
    mut conditions: Vec<Condition>,
    previous: &[Condition],
    ws: &terrace_crds::Workspace,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    use terrace_crds::constants::{ANNOTATION_VCS_ERROR, CONDITION_REPOSITORY_READABLE};
    conditions.retain(|c| c.type_ != CONDITION_REPOSITORY_READABLE);
    let Some(repo) = ws.spec.vcs_repo.as_deref() else {
        return conditions;
    };
    let error = ws
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_VCS_ERROR));
    let (status, reason, message) = match error {
        Some(e) => ("False", "FetchFailed", e.clone()),
        None => (
            "True",
            "Readable",
            format!("{} is read through its connection", repo.identifier),
        ),
    };
    let last_transition_time = find(previous, CONDITION_REPOSITORY_READABLE)
        .filter(|p| p.status == status)
        .map(|p| p.last_transition_time.clone())
        .unwrap_or(Time(now));
    conditions.push(Condition {
        type_: CONDITION_REPOSITORY_READABLE.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    });
    conditions
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// `conditions` as a cache keeps them: each message replaced by its digest
/// ([`same_conditions`] compares against those). A workspace's three conditions repeat
/// one message of about 70 bytes, kept for every cached workspace only to tell whether the
/// status is current; [`stall_transition`] reads the new conditions' message, never the
/// cached one's.
pub fn with_message_digests(mut conditions: Vec<Condition>) -> Vec<Condition> {
    for c in &mut conditions {
        c.message = message_digest(&c.message);
    }
    conditions
}

fn message_digest(message: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    message.hash(&mut h);
    format!("#{:016x}", h.finish())
}

/// Whether the stored `cached` conditions (whole, or with message digests) are
/// `desired`.
pub fn same_conditions(cached: &[Condition], desired: &[Condition]) -> bool {
    cached.len() == desired.len()
        && cached.iter().zip(desired).all(|(c, d)| {
            c.type_ == d.type_
                && c.status == d.status
                && c.reason == d.reason
                && c.observed_generation == d.observed_generation
                && c.last_transition_time == d.last_transition_time
                && (c.message == d.message || c.message == message_digest(&d.message))
        })
}

/// A change of the Stalled condition worth an Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StallTransition {
    /// The object became stalled, or stalled for another reason.
    Stalled { reason: String, message: String },
    /// The object was stalled and no longer is.
    Recovered { previous_reason: String },
}

/// How the Stalled condition changed between `previous` and `next`, if it did.
pub fn stall_transition(previous: &[Condition], next: &[Condition]) -> Option<StallTransition> {
    let before = find(previous, CONDITION_STALLED).filter(|c| c.status == "True");
    let after = find(next, CONDITION_STALLED).filter(|c| c.status == "True");
    match (before, after) {
        (None, Some(a)) => Some(StallTransition::Stalled {
            reason: a.reason.clone(),
            message: a.message.clone(),
        }),
        (Some(b), Some(a)) if b.reason != a.reason => Some(StallTransition::Stalled {
            reason: a.reason.clone(),
            message: a.message.clone(),
        }),
        (Some(b), None) => Some(StallTransition::Recovered {
            previous_reason: b.reason.clone(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn status_of(c: &[Condition], type_: &str) -> String {
        find(c, type_).map(|c| c.status.clone()).unwrap_or_default()
    }

    /// Copies kstatus: a resolved object is Ready True, Reconciling and Stalled False,
    /// each condition with the generation it describes.
    #[test]
    fn ready_outcome_sets_ready_true() {
        let c = kstatus_conditions(
            &[],
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(3),
            t(10),
        );
        assert_eq!(status_of(&c, CONDITION_READY), "True");
        assert_eq!(status_of(&c, CONDITION_RECONCILING), "False");
        assert_eq!(status_of(&c, CONDITION_STALLED), "False");
        assert!(c.iter().all(|c| c.observed_generation == Some(3)));
        assert!(c.iter().all(|c| c.last_transition_time == Time(t(10))));
        assert!(
            c.iter()
                .all(|c| c.reason == REASON_RECONCILED && c.message == "ok")
        );
    }

    /// Copies kstatus: Stalled True with the reason; Ready is False with the same reason.
    #[test]
    fn stalled_outcome_sets_stalled_true_with_reason() {
        let c = kstatus_conditions(
            &[],
            &Outcome::stalled("ProjectNotFound", "no project p"),
            Some(1),
            t(10),
        );
        assert_eq!(status_of(&c, CONDITION_READY), "False");
        assert_eq!(status_of(&c, CONDITION_STALLED), "True");
        assert_eq!(status_of(&c, CONDITION_RECONCILING), "False");
        assert_eq!(
            find(&c, CONDITION_STALLED).map(|c| c.reason.as_str()),
            Some("ProjectNotFound")
        );
    }

    /// A workspace's health conditions follow its current assessment result, keep their
    /// transition time while their status stays, and leave the kstatus ones alone.
    #[test]
    fn health_conditions_follow_the_current_result() {
        use terrace_crds::WorkspaceHealth;
        use terrace_crds::assessment::AssessmentSummary;
        let ready = Outcome::Ready {
            message: "fine".into(),
        };
        let base = kstatus_conditions(&[], &ready, Some(1), t(10));
        assert_eq!(with_health(base.clone(), &[], None, Some(1), t(10)), base);
        let mut h = WorkspaceHealth {
            result_id: Some("asmtres-1".into()),
            assessed_at: Some("2026-01-01T00:00:00Z".into()),
            summary: AssessmentSummary {
                succeeded: true,
                drifted: true,
                resources_drifted: 1,
                drifted_resources: vec!["aws_s3_bucket.logs".into()],
                ..AssessmentSummary::default()
            },
            ..WorkspaceHealth::default()
        };
        let first = with_health(base.clone(), &[], Some(&h), Some(1), t(10));
        assert_eq!(first.len(), 5);
        assert_eq!(
            status_of(&first, CONDITION_READY),
            "True",
            "drift is no kstatus matter"
        );
        assert_eq!(status_of(&first, "Drifted"), "True");
        assert_eq!(status_of(&first, "ChecksPassing"), "True");
        // The same health later keeps its times; drift resolved moves Drifted's only.
        let again = with_health(base.clone(), &first, Some(&h), Some(1), t(20));
        assert_eq!(again, first);
        h.summary.drifted = false;
        h.summary.resources_drifted = 0;
        let resolved = with_health(base, &again, Some(&h), Some(1), t(30));
        let time = |c: &[Condition], ty: &str| find(c, ty).map(|c| c.last_transition_time.clone());
        assert_eq!(status_of(&resolved, "Drifted"), "False");
        assert_eq!(time(&resolved, "Drifted"), Some(Time(t(30))));
        assert_eq!(time(&resolved, "ChecksPassing"), Some(Time(t(10))));
    }

    /// Copies metav1.Condition semantics (meta.SetStatusCondition): lastTransitionTime
    /// changes only when the condition's status changes, not on reason/message/generation.
    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let first = kstatus_conditions(
            &[],
            &Outcome::progressing("WaitingForId", "x"),
            Some(1),
            t(10),
        );
        let second = kstatus_conditions(
            &first,
            &Outcome::progressing("WaitingForProject", "y"),
            Some(2),
            t(20),
        );
        assert!(second.iter().all(|c| c.last_transition_time == Time(t(10))));
        let third = kstatus_conditions(
            &second,
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(2),
            t(30),
        );
        let ltt = |type_| find(&third, type_).map(|c| c.last_transition_time.clone());
        assert_eq!(ltt(CONDITION_READY), Some(Time(t(30))));
        assert_eq!(ltt(CONDITION_RECONCILING), Some(Time(t(30))));
        assert_eq!(ltt(CONDITION_STALLED), Some(Time(t(10))));
    }

    /// Conditions of other types written by other controllers survive.
    #[test]
    fn foreign_conditions_are_kept() {
        let foreign = Condition {
            type_: "Locked".into(),
            status: "True".into(),
            reason: "UserLock".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: Time(t(1)),
        };
        let c = kstatus_conditions(
            std::slice::from_ref(&foreign),
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(1),
            t(5),
        );
        assert_eq!(c.len(), 4);
        assert_eq!(c[3], foreign);
    }

    /// Events are recorded when the object becomes stalled, stalls for another reason, or
    /// recovers — not on every reconcile.
    #[test]
    fn stall_transitions_are_detected() {
        let ready = kstatus_conditions(&[], &Outcome::Ready { message: "".into() }, None, t(1));
        let stalled_a = kstatus_conditions(&ready, &Outcome::stalled("A", "a"), None, t(2));
        let stalled_b = kstatus_conditions(&stalled_a, &Outcome::stalled("B", "b"), None, t(3));
        assert_eq!(stall_transition(&ready, &ready), None);
        assert_eq!(
            stall_transition(&ready, &stalled_a),
            Some(StallTransition::Stalled {
                reason: "A".into(),
                message: "a".into()
            })
        );
        assert_eq!(stall_transition(&stalled_a, &stalled_a), None);
        assert_eq!(
            stall_transition(&stalled_a, &stalled_b),
            Some(StallTransition::Stalled {
                reason: "B".into(),
                message: "b".into()
            })
        );
        assert_eq!(
            stall_transition(&stalled_b, &ready),
            Some(StallTransition::Recovered {
                previous_reason: "B".into()
            })
        );
        assert_eq!(
            stall_transition(&[], &stalled_a),
            Some(StallTransition::Stalled {
                reason: "A".into(),
                message: "a".into()
            })
        );
    }

    /// Conditions cached with message digests compare equal to the conditions they were
    /// made from, and unequal when a message (or anything else) changed.
    #[test]
    fn digested_conditions_compare_by_message() {
        let ready = |m: &str| {
            kstatus_conditions(&[], &Outcome::Ready { message: m.into() }, Some(1), t(10))
        };
        let cached = with_message_digests(ready("workspace ws-1 is in project default"));
        assert!(cached.iter().all(|c| c.message.len() == 17));
        assert!(same_conditions(
            &cached,
            &ready("workspace ws-1 is in project default")
        ));
        assert!(!same_conditions(
            &cached,
            &ready("workspace ws-1 is in project infra")
        ));
        let whole = ready("x");
        assert!(same_conditions(&whole, &ready("x")));
        let mut later = ready("x");
        later[0].observed_generation = Some(2);
        assert!(!same_conditions(&whole, &later));
        assert!(!same_conditions(&whole, &later[..2]));
    }

    /// A VCS-driven workspace's RepositoryReadable follows the API server's annotation;
    /// a workspace with no repository has none.
    #[test]
    fn repository_readable_follows_the_recorded_failure() {
        use terrace_crds::constants::{ANNOTATION_VCS_ERROR, CONDITION_REPOSITORY_READABLE};
        let mut ws = terrace_crds::Workspace::new("w", Default::default());
        assert!(with_repository(Vec::new(), &[], &ws, Some(1), t(0)).is_empty());
        ws.spec.vcs_repo = Some(Box::new(terrace_crds::VcsRepo {
            identifier: "acme/infra".into(),
            ..Default::default()
        }));
        let ok = with_repository(Vec::new(), &[], &ws, Some(1), t(0));
        assert_eq!(status_of(&ok, CONDITION_REPOSITORY_READABLE), "True");
        ws.metadata.annotations =
            Some([(ANNOTATION_VCS_ERROR.to_owned(), "refused".to_owned())].into());
        let failed = with_repository(ok.clone(), &ok, &ws, Some(1), t(10));
        let c = find(&failed, CONDITION_REPOSITORY_READABLE).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "FetchFailed", "refused")
        );
        assert_eq!(c.last_transition_time, Time(t(10)));
        assert_eq!(failed.len(), 1, "replaced, not added");
    }
}
