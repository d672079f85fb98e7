//! Observe: a TestRun's Pod reduced to what the decision needs ([`PodObs`]). Pure.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::pod_parts::{WAITING_FOR_IMAGE, WAITING_FOR_NODE};
use crate::testpod::{ENGINE_CONTAINER, FINALIZER};

/// Waiting reasons that do not resolve by themselves: the run errors with the reason.
const STUCK_REASONS: [&str; 5] = [
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Waiting reasons the kubelet retries by itself (a registry's blip, a rate limit): the
/// run waits, with the kubelet's words, until `--pod-start-timeout`.
const RETRIED_REASONS: [&str; 2] = ["ErrImagePull", "ImagePullBackOff"];

/// How long past its deletion deadline (`metadata.deletionTimestamp`: the end of the
/// grace period) a Pod whose engine still shows as running is let go of anyway: its node
/// may be gone, and the finalizer must not hold the Pod forever.
pub const DELETION_OVERDUE_AFTER: SignedDuration = SignedDuration::from_secs(30);

/// What the controller saw of the engine container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineObs {
    /// Not started yet (init containers running, image being pulled…).
    NotStarted,
    Running,
    Terminated {
        exit_code: i32,
        reason: Option<String>,
        /// The termination message (the runner's report, or a crash's last words).
        message: Option<String>,
    },
}

/// What the controller saw of the run's Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodObs {
    Missing,
    /// A Pod of that name not controlled by this run (left by a deleted run of the same
    /// name, waiting for garbage collection).
    Foreign,
    Present(PodState),
}

/// The parts of a Pod the decision depends on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace: Option<i64>,
    /// Deleting, and more than [`DELETION_OVERDUE_AFTER`] past the deletion deadline.
    pub deletion_overdue: bool,
    /// The Pod still carries [`FINALIZER`].
    pub finalizer: bool,
    /// `status.phase`.
    pub phase: Option<String>,
    pub engine: Option<EngineObs>,
    /// Why the Pod cannot make progress: a container waiting for a reason in
    /// [`STUCK_REASONS`], a failed init container, a failed Pod (eviction), a Pod that
    /// waited for a node longer than the start timeout.
    pub failure: Option<String>,
    /// What the Pod waits for before it can start: "waiting for a node: <the scheduler's
    /// reason>" while no node took it.
    pub waiting: Option<String>,
    /// `waiting`, once the Pod has waited longer than [`WAIT_NOTE_AFTER`]: worth keeping
    /// in the run's log (a Pod a scheduler takes at once never gets there).
    pub waited: Option<String>,
}

impl PodState {
    pub(super) fn completed(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }

    /// Whether the engine may still write to the log: it runs, and the Pod is neither
    /// done nor overdue in its deletion. Its log is archived (and the Pod let go of) only
    /// after that, so an interrupted engine's teardown is in the stored log.
    pub(super) fn engine_may_write(&self) -> bool {
        matches!(self.engine, Some(EngineObs::Running))
            && !self.completed()
            && !self.deletion_overdue
    }
}

/// What a container whose image pull the kubelet retries waits for: "waiting for an
/// image: container C: ImagePullBackOff: <the kubelet's message>".
fn waiting_for_image(cs: &ContainerStatus) -> Option<String> {
    let w = cs.state.as_ref()?.waiting.as_ref()?;
    let reason = w.reason.as_deref()?;
    RETRIED_REASONS.contains(&reason).then(|| {
        let detail = w
            .message
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        format!(
            "{WAITING_FOR_IMAGE}: container {}: {reason}{detail}",
            cs.name
        )
    })
}

/// Why the Pod was disrupted, in a person's words, from its `DisruptionTarget` condition
/// (the node lost, an eviction, a preemption) or the kubelet's eviction (`Evicted`).
fn disruption(pod: &Pod, what: &str) -> Option<String> {
    let status = pod.status.as_ref()?;
    let target = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True");
    let detail = |m: Option<&str>| {
        m.map(str::trim)
            .filter(|m| !m.is_empty())
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    };
    if let Some(c) = target {
        let d = detail(c.message.as_deref());
        return Some(match c.reason.as_deref() {
            Some("DeletionByPodGC" | "DeletionByTaintManager") => {
                let role = what.strip_suffix(" Pod").unwrap_or(what);
                format!("the node running the {role} was lost{d}")
            }
            Some("EvictionByEvictionAPI") => format!("the {what} was evicted{d}"),
            Some("PreemptionByScheduler") => {
                format!("the {what} was preempted by a Pod of higher priority{d}")
            }
            Some("TerminationByKubelet") => format!("the node stopped the {what}{d}"),
            other => format!(
                "the {what} was disrupted: {}{d}",
                other.unwrap_or("DisruptionTarget")
            ),
        });
    }
    (status.reason.as_deref() == Some("Evicted")).then(|| {
        format!(
            "the node evicted the {what}{}",
            detail(status.message.as_deref())
        )
    })
}

fn waiting_failure(cs: &ContainerStatus) -> Option<String> {
    let w = cs.state.as_ref()?.waiting.as_ref()?;
    let reason = w.reason.as_deref()?;
    STUCK_REASONS
        .contains(&reason)
        .then(|| match w.message.as_deref() {
            Some(m) if !m.is_empty() => {
                format!("container {} cannot start: {reason}: {m}", cs.name)
            }
            _ => format!("container {} cannot start: {reason}", cs.name),
        })
}

/// Reduces the Pod to what [`decide`] needs. `run_uid` is the TestRun's uid, `now` the
/// time of the observation.
pub fn observe_pod(pod: Option<&Pod>, run_uid: &str, now: Timestamp) -> PodObs {
    observe_pod_as(pod, run_uid, now, "test Pod", NO_START_TIMEOUT)
}

/// How long a Pod waits for a node before the wait is kept in its run's log (`waitNote`).
pub const WAIT_NOTE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A start timeout that never ends.
pub const NO_START_TIMEOUT: std::time::Duration = std::time::Duration::MAX;

/// Why a Pod no node has taken waits: the scheduler's `PodScheduled=False` reason and
/// message, or, before any scheduler looked at it, that it is not scheduled yet.
fn waiting_for_node(pod: &Pod) -> Option<String> {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
    {
        return None;
    }
    let status = pod.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Running" | "Succeeded" | "Failed")
    ) {
        return None;
    }
    let scheduled = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    Some(match scheduled {
        Some(c) if c.status == "True" => return None,
        Some(c) => {
            let why = c
                .message
                .as_deref()
                .filter(|m| !m.trim().is_empty())
                .or(c.reason.as_deref())
                .unwrap_or("not scheduled");
            format!("{WAITING_FOR_NODE}: {}", why.trim())
        }
        None => format!("{WAITING_FOR_NODE}: the Pod is not scheduled yet"),
    })
}

/// [`observe_pod`] of a Pod that messages call `what` (`test Pod`, `plan Pod`), which may
/// wait for a node at most `start_timeout` (from its creation) before it counts as failed.
pub fn observe_pod_as(
    pod: Option<&Pod>,
    run_uid: &str,
    now: Timestamp,
    what: &str,
    start_timeout: std::time::Duration,
) -> PodObs {
    let Some(pod) = pod else {
        return PodObs::Missing;
    };
    let controlled = pod
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == run_uid);
    if !controlled {
        return PodObs::Foreign;
    }
    let status = pod.status.as_ref();
    let mut failure = disruption(pod, what);
    let mut pulling = None;
    for cs in status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        if let Some(f) = waiting_failure(cs) {
            failure.get_or_insert(f);
        }
        if let Some(w) = waiting_for_image(cs) {
            pulling.get_or_insert(w);
        }
        if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.as_ref())
            && t.exit_code != 0
        {
            let detail = t
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .or(t.reason.as_deref())
                .unwrap_or("no message");
            failure.get_or_insert(format!(
                "init container {} failed with exit code {}: {detail}",
                cs.name, t.exit_code
            ));
        }
    }
    let engine_status = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|l| l.iter().find(|c| c.name == ENGINE_CONTAINER));
    let mut engine = None;
    if let Some(cs) = engine_status {
        if let Some(f) = waiting_failure(cs) {
            failure.get_or_insert(f);
        }
        if let Some(w) = waiting_for_image(cs) {
            pulling.get_or_insert(w);
        }
        let state = cs.state.as_ref();
        // An engine that could not even start (its program missing, not executable): the
        // runtime says why in the terminated state's message.
        if let Some(t) = state.and_then(|s| s.terminated.as_ref())
            && matches!(
                t.reason.as_deref(),
                Some("StartError" | "ContainerCannotRun")
            )
        {
            let why = t
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .unwrap_or("no message from the container runtime");
            failure.get_or_insert(format!("the {what} could not start its engine: {why}"));
        }
        engine = Some(if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            EngineObs::Terminated {
                exit_code: t.exit_code,
                reason: t.reason.clone(),
                message: t.message.clone(),
            }
        } else if state.is_some_and(|s| s.running.is_some()) {
            EngineObs::Running
        } else {
            EngineObs::NotStarted
        });
    }
    let phase = status.and_then(|s| s.phase.clone());
    // An engine that ended said how (its report is the cause): a Failed phase adds
    // nothing, whether the kubelet wrote it before or with the container's end.
    let engine_ended = matches!(engine, Some(EngineObs::Terminated { .. }));
    if phase.as_deref() == Some("Failed") && failure.is_none() && !engine_ended {
        let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("Failed");
        let message = status.and_then(|s| s.message.as_deref()).unwrap_or("");
        failure = Some(
            format!("the {what} failed: {reason} {message}")
                .trim_end()
                .to_owned(),
        );
    }
    let waiting = pulling.or_else(|| waiting_for_node(pod));
    let waited = waiting
        .clone()
        .filter(|_| waited_past(pod, WAIT_NOTE_AFTER, now));
    if let Some(w) = &waiting
        && let Some(created) = pod.metadata.creation_timestamp.as_ref()
        && let Ok(timeout) = SignedDuration::try_from(start_timeout)
        && created
            .0
            .checked_add(timeout)
            .is_ok_and(|deadline| deadline < now)
    {
        let minutes = start_timeout.as_secs() / 60;
        failure.get_or_insert(format!(
            "the {what} did not start within {minutes} minutes (--pod-start-timeout): {w}"
        ));
    }
    let deletion_overdue = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| t.0 + DELETION_OVERDUE_AFTER < now);
    PodObs::Present(PodState {
        deleting: pod.metadata.deletion_timestamp.is_some(),
        deletion_grace: pod.metadata.deletion_grace_period_seconds,
        deletion_overdue,
        finalizer: pod.finalizers().iter().any(|f| f == FINALIZER),
        phase,
        engine,
        failure,
        waiting,
        waited,
    })
}

/// Whether Pod `pod` was created more than `after` before `now`.
fn waited_past(pod: &Pod, after: std::time::Duration, now: Timestamp) -> bool {
    pod.metadata
        .creation_timestamp
        .as_ref()
        .zip(SignedDuration::try_from(after).ok())
        .is_some_and(|(created, after)| created.0.checked_add(after).is_ok_and(|t| t < now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use terrace_crds::constants::API_VERSION;

    use crate::testrun::fixtures::{PASS, terminated};

    fn pod_with(status: PodStatus, uid: &str) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("r-run".into()),
                finalizers: Some(vec![FINALIZER.into()]),
                owner_references: Some(vec![OwnerReference {
                    api_version: API_VERSION.into(),
                    kind: "TestRun".into(),
                    name: "r".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: None,
            status: Some(status),
        }
    }

    fn cs(name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(state),
            ..Default::default()
        }
    }

    /// Copies the kubelet's Pod status shapes: container states, waiting reasons of image
    /// pull failures, failed init containers, terminated engine with its message.
    #[test]
    fn observe_pod_shapes() {
        assert_eq!(observe_pod(None, "u", Timestamp::now()), PodObs::Missing);
        assert_eq!(
            observe_pod(
                Some(&pod_with(PodStatus::default(), "other")),
                "u",
                Timestamp::now()
            ),
            PodObs::Foreign
        );
        let PodObs::Present(p) = observe_pod(
            Some(&pod_with(
                PodStatus {
                    phase: Some("Pending".into()),
                    ..Default::default()
                },
                "u",
            )),
            "u",
            Timestamp::now(),
        ) else {
            panic!()
        };
        assert!(p.finalizer && !p.deleting && p.engine.is_none() && p.failure.is_none());

        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ImagePullBackOff".into()),
                message: Some("Back-off pulling image \"x\"".into()),
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, waiting)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u", Timestamp::now())
        else {
            panic!()
        };
        // Issue 40 §4: the kubelet retries a pull, so the run waits with its words, and
        // errors only once the start timeout passed.
        assert_eq!(p.failure, None);
        assert_eq!(
            p.waiting.as_deref(),
            Some(
                "waiting for an image: container engine: ImagePullBackOff: Back-off pulling image \"x\""
            )
        );
        assert_eq!(p.engine, Some(EngineObs::NotStarted));
        let mut old = pod_with(
            PodStatus {
                phase: Some("Pending".into()),
                container_statuses: Some(vec![cs(
                    ENGINE_CONTAINER,
                    ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("ErrImagePull".into()),
                            message: Some("503 Service Unavailable".into()),
                        }),
                        ..Default::default()
                    },
                )]),
                ..Default::default()
            },
            "u",
        );
        old.metadata.creation_timestamp =
            Some(Time(Timestamp::now() - SignedDuration::from_secs(600)));
        let PodObs::Present(p) = observe_pod_as(
            Some(&old),
            "u",
            Timestamp::now(),
            "plan Pod",
            std::time::Duration::from_secs(300),
        ) else {
            panic!()
        };
        assert!(
            p.failure
                .as_deref()
                .is_some_and(|f| f.contains("did not start within 5 minutes")
                    && f.contains("ErrImagePull: 503 Service Unavailable")),
            "{:?}",
            p.failure
        );
        // What cannot recover is final at once.
        let invalid = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("InvalidImageName".into()),
                message: Some("couldn't parse image name \"x::y\"".into()),
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Pending".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, invalid)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u", Timestamp::now())
        else {
            panic!()
        };
        assert!(
            p.failure
                .as_deref()
                .is_some_and(|f| f.starts_with("container engine cannot start: InvalidImageName")),
            "{:?}",
            p.failure
        );

        // Issue 40 §5: a Pod whose node was lost says so, not "the Pod failed: Failed".
        let lost = PodStatus {
            phase: Some("Failed".into()),
            conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                reason: Some("DeletionByPodGC".into()),
                message: Some("PodGC: node no longer exists".into()),
                ..Default::default()
            }]),
            container_statuses: Some(vec![cs(
                ENGINE_CONTAINER,
                ContainerState {
                    running: Some(ContainerStateRunning::default()),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod_as(
            Some(&pod_with(lost, "u")),
            "u",
            Timestamp::now(),
            "apply Pod",
            NO_START_TIMEOUT,
        ) else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some("the node running the apply was lost (PodGC: node no longer exists)")
        );

        // An engine whose program cannot be executed: the runtime's reason is the cause,
        // named with the Pod's role.
        let cannot_run = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 128,
                reason: Some("StartError".into()),
                message: Some("exec: \"/tools/terrace\": no such file or directory".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Failed".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, cannot_run)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod_as(
            Some(&pod_with(st, "u")),
            "u",
            Timestamp::now(),
            "plan Pod",
            NO_START_TIMEOUT,
        ) else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some(
                "the plan Pod could not start its engine: exec: \"/tools/terrace\": no such file or directory"
            )
        );

        let init_failed = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 1,
                message: Some("downloading the configuration archive: 401\n".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Failed".into()),
            init_container_statuses: Some(vec![cs("fetch", init_failed)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u", Timestamp::now())
        else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some(
                "init container fetch failed with exit code 1: downloading the configuration archive: 401"
            )
        );

        let running = ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(Timestamp::now())),
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, running)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u", Timestamp::now())
        else {
            panic!()
        };
        assert_eq!(p.engine, Some(EngineObs::Running));

        let done = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                message: Some(PASS.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let st = PodStatus {
            phase: Some("Succeeded".into()),
            container_statuses: Some(vec![cs(ENGINE_CONTAINER, done)]),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u", Timestamp::now())
        else {
            panic!()
        };
        assert_eq!(
            p.engine,
            terminated(PASS).map(|e| match e {
                EngineObs::Terminated { message, .. } => EngineObs::Terminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    message
                },
                o => o,
            })
        );
        assert!(p.failure.is_none());

        // An evicted Pod.
        let st = PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            message: Some("The node was low on resource: memory.".into()),
            ..Default::default()
        };
        let PodObs::Present(p) = observe_pod(Some(&pod_with(st, "u")), "u", Timestamp::now())
        else {
            panic!()
        };
        assert_eq!(
            p.failure.as_deref(),
            Some("the node evicted the test Pod (The node was low on resource: memory.)")
        );
    }

    /// Copies the API server's graceful deletion: `deletionTimestamp` is the end of the
    /// grace period; a Pod still there well after it is overdue.
    #[test]
    fn deletion_overdue() {
        let mut pod = pod_with(PodStatus::default(), "u");
        let now = Timestamp::now();
        pod.metadata.deletion_timestamp = Some(Time(now));
        let PodObs::Present(p) = observe_pod(Some(&pod), "u", now) else {
            panic!()
        };
        assert!(p.deleting && !p.deletion_overdue);
        let later = now + DELETION_OVERDUE_AFTER + SignedDuration::from_secs(1);
        let PodObs::Present(p) = observe_pod(Some(&pod), "u", later) else {
            panic!()
        };
        assert!(p.deletion_overdue);
    }
}
