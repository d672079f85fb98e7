//! Leader election: of the operator replicas, only the holder of the
//! `coordination.k8s.io/v1` Lease `terrace-operator` runs the controllers.
//!
//! The rules are client-go's, as pure functions over the stored [`LeaseSpec`]:
//! - a lease without holder (absent, or released by a leader that shut down) is free;
//! - the holder renews it by writing `renewTime`;
//! - another candidate takes it over only after it has watched the *same* lease record
//!   stay unchanged for a whole `leaseDurationSeconds` on its own monotonic clock. The
//!   record's timestamps are never compared with the local wall clock, so clock skew
//!   between nodes cannot make a candidate take over a live lease;
//! - the leader gives up when it has not renewed for `renew_deadline` (shorter than the
//!   lease duration), so it stops before anyone may take over.
//!
//! Every write carries the resourceVersion it was decided on (create, or replace with
//! `metadata.resourceVersion`): of candidates racing for a free lease exactly one write
//! succeeds, the others get 409 Conflict and stay standby.
//!
//! [`LeaderElector`] is the thin async loop around the rules: [`LeaderElector::acquire`]
//! waits for leadership, [`LeaderElector::hold`] renews until the lease is lost, and
//! [`LeaderElector::release`] hands the lease over on shutdown, so a standby takes over
//! within one retry period instead of a lease duration. What the operator does with
//! that is in [`crate::run_elected`]: losing the lease stops the controllers at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

/// Name of the operator's Lease.
pub const LEASE_NAME: &str = "terrace-operator";

/// The election's timing (client-go's defaults are 15 s / 10 s / 2 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a lease stays valid after its last renewal; written into the lease.
    pub lease_duration: Duration,
    /// How often the leader renews.
    pub renew_interval: Duration,
    /// How long the leader keeps leading without a successful renewal. Must be shorter
    /// than `lease_duration`: the difference is the safety margin against a takeover
    /// while this replica still reconciles.
    pub renew_deadline: Duration,
    /// How often a standby (or a leader whose renewal failed) tries again.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate may do with the lease it read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The lease is free or expired: take it.
    Acquire,
    /// This candidate holds it: renew it.
    Renew,
    /// Another candidate holds a lease that has not expired.
    Standby { holder: String },
}

/// The holder of a lease; an empty identity means none (a released lease).
pub fn holder(spec: Option<&LeaseSpec>) -> Option<&str> {
    spec.and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// How long the stored lease lasts after a renewal: its own `leaseDurationSeconds`
/// (the holder's setting), else ours.
fn duration_of(spec: &LeaseSpec, timing: &Timing) -> Duration {
    spec.lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(timing.lease_duration, Duration::from_secs)
}

/// Decides what `identity` may do with the lease `spec` (None: no Lease object), given
/// how long this candidate has seen that very record unchanged (`unchanged_for`, by its
/// own monotonic clock: zero when it just appeared or changed). Pure.
pub fn decide(
    spec: Option<&LeaseSpec>,
    identity: &str,
    unchanged_for: Duration,
    timing: &Timing,
) -> Decision {
    let (Some(spec), Some(holder)) = (spec, holder(spec)) else {
        return Decision::Acquire;
    };
    if holder == identity {
        Decision::Renew
    } else if unchanged_for >= duration_of(spec, timing) {
        Decision::Acquire
    } else {
        Decision::Standby {
            holder: holder.to_owned(),
        }
    }
}

/// The lease `identity` writes to acquire or renew `previous` at `now`. Renewing keeps
/// the acquire time and transition count; taking over from someone else (or from no
/// one) counts a transition. Pure.
pub fn desired(
    previous: Option<&LeaseSpec>,
    identity: &str,
    now: Timestamp,
    timing: &Timing,
) -> LeaseSpec {
    // The Lease holds whole seconds: round up, never promise less than we keep.
    let seconds =
        i32::try_from(timing.lease_duration.as_millis().div_ceil(1000)).unwrap_or(i32::MAX);
    let renewing = holder(previous) == Some(identity);
    let transitions = match previous {
        None => 0,
        Some(p) if renewing => p.lease_transitions.unwrap_or(0),
        Some(p) => p.lease_transitions.unwrap_or(0).saturating_add(1),
    };
    let acquire_time = match previous {
        Some(p) if renewing => p.acquire_time.clone().or(Some(MicroTime(now))),
        _ => Some(MicroTime(now)),
    };
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(seconds),
        acquire_time,
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..previous.cloned().unwrap_or_default()
    }
}

/// The lease `identity` writes to give `current` up at `now` (no holder, so any
/// candidate takes it at once), or None when it is not the holder. Pure.
pub fn released(current: &LeaseSpec, identity: &str, now: Timestamp) -> Option<LeaseSpec> {
    (holder(Some(current)) == Some(identity)).then(|| LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    })
}

/// Outcome of one [`LeaderElector::try_acquire_or_renew`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This candidate holds the lease now.
    Leading,
    /// Another candidate holds it.
    Standby { holder: String },
    /// Someone wrote the lease between our read and our write: read again.
    Conflict,
}

/// Why [`LeaderElector::hold`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Another candidate holds the lease.
    TakenBy(String),
    /// No renewal succeeded within the renew deadline.
    DeadlineExceeded,
}

/// One candidate of the election.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    /// The record last read or written and when (local clock) it was first seen.
    observed: Option<(Option<LeaseSpec>, Instant)>,
    /// When the last successful acquire or renew started (local clock).
    renewed_at: Option<Instant>,
}

impl LeaderElector {
    /// A candidate named `identity` for Lease [`LEASE_NAME`] in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, identity: String, timing: Timing) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: LEASE_NAME.to_owned(),
            identity,
            timing,
            observed: None,
            renewed_at: None,
        }
    }

    /// Uses Lease `name` instead of [`LEASE_NAME`].
    pub fn with_lease_name(mut self, name: &str) -> Self {
        name.clone_into(&mut self.name);
        self
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How long the current record has been seen unchanged; resets when it changed.
    fn observe(&mut self, spec: Option<&LeaseSpec>) -> Duration {
        match &self.observed {
            Some((seen, since)) if seen.as_ref() == spec => since.elapsed(),
            _ => {
                self.observed = Some((spec.cloned(), Instant::now()));
                Duration::ZERO
            }
        }
    }

    /// Reads the lease and acquires or renews it when the rules allow.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        // The renew deadline counts from before the request, never from its answer.
        let started = Instant::now();
        let current = self.api.get_opt(&self.name).await?;
        let spec = current.as_ref().and_then(|l| l.spec.as_ref());
        let unchanged_for = self.observe(spec);
        if let Decision::Standby { holder } =
            decide(spec, &self.identity, unchanged_for, &self.timing)
        {
            return Ok(Attempt::Standby { holder });
        }
        let next = desired(spec, &self.identity, Timestamp::now(), &self.timing);
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(next),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // The read resourceVersion stays in the object: a precondition.
                lease.spec = Some(next);
                self.api
                    .replace(&lease.name_any(), &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observed = Some((lease.spec, Instant::now()));
                self.renewed_at = Some(started);
                Ok(Attempt::Leading)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Waits until this candidate holds the lease, trying every retry period.
    pub async fn acquire(&mut self) {
        let mut last_standby: Option<String> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Attempt::Leading) => {
                    tracing::info!(identity = %self.identity, lease = %self.name, "acquired the leader lease");
                    return;
                }
                Ok(Attempt::Standby { holder }) => {
                    if last_standby.as_ref() != Some(&holder) {
                        tracing::info!(identity = %self.identity, %holder, "standing by: another replica leads");
                        last_standby = Some(holder);
                    }
                }
                Ok(Attempt::Conflict) => {}
                Err(e) => tracing::warn!(error = %e, "reading the leader lease"),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the lease every renew interval until it is lost: another candidate holds
    /// it, or no renewal succeeded within the renew deadline. Call it right after
    /// [`LeaderElector::acquire`].
    pub async fn hold(&mut self) -> Lost {
        loop {
            tokio::time::sleep(self.timing.renew_interval).await;
            loop {
                let renewed_at = self.renewed_at.unwrap_or_else(Instant::now);
                let Some(left) = self
                    .timing
                    .renew_deadline
                    .checked_sub(renewed_at.elapsed())
                    .filter(|d| !d.is_zero())
                else {
                    return Lost::DeadlineExceeded;
                };
                match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                    Ok(Ok(Attempt::Leading)) => break,
                    Ok(Ok(Attempt::Standby { holder })) => return Lost::TakenBy(holder),
                    Ok(Ok(Attempt::Conflict)) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "renewing the leader lease"),
                    Err(_) => return Lost::DeadlineExceeded,
                }
                let left = self
                    .timing
                    .renew_deadline
                    .saturating_sub(renewed_at.elapsed());
                tokio::time::sleep(self.timing.retry_period.min(left)).await;
            }
        }
    }

    /// Gives the lease up if this candidate holds it, so a standby takes over at once.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let Some(next) = lease
            .spec
            .as_ref()
            .and_then(|s| released(s, &self.identity, Timestamp::now()))
        else {
            return Ok(());
        };
        lease.spec = Some(next);
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        self.observed = None;
        self.renewed_at = None;
        tracing::info!(identity = %self.identity, "released the leader lease");
        Ok(())
    }
}

/// This replica's identity: `POD_NAME` when the Deployment passes it (unique among live
/// Pods; a restarted container of the same Pod may resume its own lease, which is safe
/// since the previous process is gone), else the host name plus a random suffix, so two
/// processes on one host never share an identity.
pub fn default_identity(pod_name: Option<&str>) -> String {
    if let Some(p) = pod_name.filter(|p| !p.is_empty()) {
        return p.to_owned();
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "terrace-operator".to_owned());
    format!("{host}_{:08x}", rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "operator-a";
    const OTHER: &str = "operator-b";

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn held_by(h: &str) -> LeaseSpec {
        desired(None, h, t("2026-01-05T10:00:00Z"), &Timing::default())
    }

    #[test]
    fn an_absent_or_empty_lease_is_acquired() {
        let timing = Timing::default();
        assert_eq!(decide(None, ME, Duration::ZERO, &timing), Decision::Acquire);
        let empty = LeaseSpec::default();
        assert_eq!(
            decide(Some(&empty), ME, Duration::ZERO, &timing),
            Decision::Acquire
        );
        let blank = LeaseSpec {
            holder_identity: Some(String::new()),
            ..held_by(OTHER)
        };
        assert_eq!(
            decide(Some(&blank), ME, Duration::ZERO, &timing),
            Decision::Acquire
        );

        let now = t("2026-01-05T10:00:00Z");
        let first = desired(None, ME, now, &timing);
        assert_eq!(first.holder_identity.as_deref(), Some(ME));
        assert_eq!(first.lease_duration_seconds, Some(15));
        assert_eq!(first.acquire_time, Some(MicroTime(now)));
        assert_eq!(first.renew_time, Some(MicroTime(now)));
        assert_eq!(first.lease_transitions, Some(0));
        // Whole seconds, rounded up.
        let short = Timing {
            lease_duration: Duration::from_millis(1500),
            ..Timing::default()
        };
        assert_eq!(
            desired(None, ME, now, &short).lease_duration_seconds,
            Some(2)
        );
    }

    #[test]
    fn the_holder_renews_its_own_lease_keeping_acquire_time() {
        let timing = Timing::default();
        let mine = held_by(ME);
        // Even a long-unchanged own lease is renewed, not "taken over".
        assert_eq!(
            decide(Some(&mine), ME, Duration::from_secs(60), &timing),
            Decision::Renew
        );
        let later = t("2026-01-05T10:00:05Z");
        let renewed = desired(Some(&mine), ME, later, &timing);
        assert_eq!(renewed.acquire_time, mine.acquire_time);
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
        assert_eq!(renewed.lease_transitions, mine.lease_transitions);
    }

    #[test]
    fn a_fresh_foreign_lease_is_not_taken() {
        let timing = Timing::default();
        let theirs = held_by(OTHER);
        for seen in [
            Duration::ZERO,
            Duration::from_secs(5),
            Duration::from_millis(14_999),
        ] {
            assert_eq!(
                decide(Some(&theirs), ME, seen, &timing),
                Decision::Standby {
                    holder: OTHER.into()
                }
            );
        }
        // The holder's own, longer duration is respected.
        let long = LeaseSpec {
            lease_duration_seconds: Some(60),
            ..theirs
        };
        assert!(matches!(
            decide(Some(&long), ME, Duration::from_secs(30), &timing),
            Decision::Standby { .. }
        ));
    }

    #[test]
    fn an_expired_foreign_lease_is_taken_over_counting_a_transition() {
        let timing = Timing::default();
        let theirs = LeaseSpec {
            lease_transitions: Some(3),
            ..held_by(OTHER)
        };
        assert_eq!(
            decide(Some(&theirs), ME, Duration::from_secs(15), &timing),
            Decision::Acquire
        );
        let now = t("2026-01-05T10:00:20Z");
        let taken = desired(Some(&theirs), ME, now, &timing);
        assert_eq!(taken.holder_identity.as_deref(), Some(ME));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert_eq!(taken.lease_transitions, Some(4));
    }

    #[test]
    fn a_released_lease_is_handed_over_at_once() {
        let timing = Timing::default();
        let theirs = held_by(OTHER);
        let now = t("2026-01-05T10:00:03Z");
        // Only the holder can release.
        assert_eq!(released(&theirs, ME, now), None);
        let free = released(&theirs, OTHER, now).expect("holder releases");
        assert_eq!(holder(Some(&free)), None);
        assert_eq!(free.renew_time, Some(MicroTime(now)));
        // A standby that has seen it for no time at all takes it.
        assert_eq!(
            decide(Some(&free), ME, Duration::ZERO, &timing),
            Decision::Acquire
        );
        let taken = desired(Some(&free), ME, now, &timing);
        assert_eq!(taken.holder_identity.as_deref(), Some(ME));
        assert_eq!(taken.lease_transitions, Some(1));
        assert_eq!(taken.lease_duration_seconds, Some(15));
    }

    #[test]
    fn identities_prefer_the_pod_name_and_are_unique_otherwise() {
        assert_eq!(
            default_identity(Some("terrace-operator-7d9-x")),
            "terrace-operator-7d9-x"
        );
        let a = default_identity(None);
        let b = default_identity(Some(""));
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }
}
