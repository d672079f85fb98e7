//! Slots: the concurrency limits of test runs — shared with workspace runs planning or
//! applying, which count against the same limits (see `terrace_crds::run::HOLDING_SLOT`) — and the waker of
//! runs waiting for one.
//!
//! Runs in `queued` or `running` hold a slot, counted globally
//! ([`Settings::test_run_concurrency`](crate::Settings::test_run_concurrency)) and per
//! organization (`spec.settings.testRuns.concurrency`). Admission is serialised inside
//! the process and remembers runs it admitted until the cache shows them queued, so the
//! cache's lag cannot admit too many. When a run holding a slot ends, the waker
//! ([`wake_waiting`]) picks the oldest waiting runs that now fit (creation order, within
//! both limits) and reconciles them at once; every waiting run is also looked at again
//! every [`SLOT_RECHECK`] as a safety net (a limit raised, a run deleted).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use terrace_crds::TestRun;
use terrace_crds::ids::IdKind;
use terrace_crds::testrun::TestRunState;

use super::context::RunContext;
use crate::conditions::REASON_WAITING_FOR_SLOT;

/// How often a run waiting for a concurrency slot is looked at again without being woken.
pub const SLOT_RECHECK: Duration = Duration::from_secs(15);

/// How long the waker lets the cache catch up with the status writes that freed slots.
const WAKE_SETTLE: Duration = Duration::from_millis(50);

/// The waker: each time slots free up, reconciles the oldest runs waiting for a slot that
/// now fit within the global and their organization's limit.
pub(super) async fn wake_waiting(ctx: &RunContext) {
    loop {
        ctx.slot_freed.notified().await;
        // Our own status writes reach the cache a moment later.
        tokio::time::sleep(WAKE_SETTLE).await;
        let limits = org_limits(ctx);
        let picked = {
            let mut admitted = ctx.admitted.lock().await;
            let all = ctx.runs.state();
            let (mut global, mut per_ns) = active_by_namespace(&all, &mut admitted);
            // Workspace runs planning or applying hold slots of the same limits.
            let (runs, runs_per_ns) = ctx
                .catalog
                .count_in_status(IdKind::Run, &terrace_crds::run::HOLDING_SLOT);
            global += runs;
            for (ns, n) in runs_per_ns {
                *per_ns.entry(ns).or_default() += n;
            }
            let waiting = all.iter().filter(|r| waiting_for_slot(r)).map(|r| {
                let ns = r.namespace().unwrap_or_default();
                let limit = limits.get(&ns).copied().flatten();
                (
                    r.creation_timestamp().map(|t| t.0),
                    r.name_any(),
                    ns,
                    limit,
                    ObjectRef::from_obj(r.as_ref()),
                )
            });
            pick_waiting(
                waiting.collect(),
                global,
                per_ns,
                ctx.base.settings.test_run_concurrency,
            )
        };
        for r in picked {
            let _ = ctx.wake.unbounded_send(r);
        }
    }
}

/// Concurrency limit of each organization namespace.
fn org_limits(ctx: &RunContext) -> HashMap<String, Option<i32>> {
    ctx.orgs
        .store()
        .state()
        .iter()
        .filter_map(|o| {
            let ns = o
                .status
                .as_ref()
                .and_then(|s| s.namespace.clone())
                .or_else(|| o.spec.namespace.clone())?;
            Some((ns, o.spec.settings.test_runs.concurrency))
        })
        .collect()
}

/// A pending run whose last reconcile found no free slot.
fn waiting_for_slot(run: &TestRun) -> bool {
    run.meta().deletion_timestamp.is_none()
        && run.status.as_ref().is_some_and(|s| {
            s.status.as_deref() == Some(TestRunState::Pending.as_str())
                && s.conditions
                    .iter()
                    .any(|c| c.reason == REASON_WAITING_FOR_SLOT)
        })
}

/// A waiting run as the waker sees it: creation time, name, namespace, its organization's
/// limit, and the reference to reconcile.
pub type Waiting<R> = (
    Option<k8s_openapi::jiff::Timestamp>,
    String,
    String,
    Option<i32>,
    R,
);

/// Picks, oldest first (then by name), the waiting runs that fit in the free slots given
/// `global` active runs and `per_ns` active runs per namespace. A run that does not fit
/// its organization's limit does not stop younger runs of other organizations.
pub fn pick_waiting<R>(
    mut waiting: Vec<Waiting<R>>,
    mut global: usize,
    mut per_ns: HashMap<String, usize>,
    global_limit: u32,
) -> Vec<R> {
    waiting.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut picked = Vec::new();
    for (_, _, ns, limit, r) in waiting {
        let local = per_ns.get(&ns).copied().unwrap_or(0);
        if !slot_free(global, local, global_limit, limit) {
            if global_limit != 0 && global >= global_limit as usize {
                break;
            }
            continue;
        }
        global += 1;
        *per_ns.entry(ns).or_insert(0) += 1;
        picked.push(r);
    }
    picked
}

/// Counts the runs holding a slot: globally and in `ns`.
fn active_counts(
    runs: &Store<TestRun>,
    admitted: &mut HashSet<ObjectRef<TestRun>>,
    ns: &str,
) -> (usize, usize) {
    let (global, per_ns) = active_by_namespace(&runs.state(), admitted);
    (global, per_ns.get(ns).copied().unwrap_or(0))
}

/// [`active_counts`] plus the workspace runs planning or applying: they share the limits.
fn all_active_counts(
    ctx: &RunContext,
    admitted: &mut HashSet<ObjectRef<TestRun>>,
    ns: &str,
) -> (usize, usize) {
    let (global, local) = active_counts(&ctx.runs, admitted, ns);
    let (runs, runs_per_ns) = ctx
        .catalog
        .count_in_status(IdKind::Run, &terrace_crds::run::HOLDING_SLOT);
    (
        global + runs,
        local + runs_per_ns.get(ns).copied().unwrap_or(0),
    )
}

/// Counts the runs holding a slot: globally and per namespace. Forgets admitted runs the
/// cache shows past `pending` or no longer has.
fn active_by_namespace(
    all: &[Arc<TestRun>],
    admitted: &mut HashSet<ObjectRef<TestRun>>,
) -> (usize, HashMap<String, usize>) {
    let mut global = 0;
    let mut per_ns: HashMap<String, usize> = HashMap::new();
    let mut pending_admitted: HashSet<&ObjectRef<TestRun>> = HashSet::new();
    for r in all {
        let state = TestRunState::of(r.status.as_ref()).unwrap_or(TestRunState::Pending);
        let active = match state {
            TestRunState::Queued | TestRunState::Running => true,
            // Only hash the runs that can be in `admitted`: few, next to the waiting ones.
            TestRunState::Pending if !admitted.is_empty() => {
                let key = ObjectRef::from_obj(r.as_ref());
                match admitted.get(&key) {
                    Some(k) => pending_admitted.insert(k),
                    None => false,
                }
            }
            _ => false,
        };
        if active {
            global += 1;
            let ns = r.metadata.namespace.as_deref().unwrap_or_default();
            match per_ns.get_mut(ns) {
                Some(n) => *n += 1,
                None => {
                    per_ns.insert(ns.to_owned(), 1);
                }
            }
        }
    }
    let keep: HashSet<ObjectRef<TestRun>> = pending_admitted.into_iter().cloned().collect();
    *admitted = keep;
    (global, per_ns)
}

/// The Reconciling message of a run waiting for a slot.
pub fn wait_message(global_limit: u32, org_limit: Option<i32>) -> String {
    let global = match global_limit {
        0 => "no global limit".to_owned(),
        n => format!("at most {n} at once"),
    };
    match org_limit {
        Some(l) if l >= 1 => {
            format!("waiting for a test run slot ({global}, {l} in this organization)")
        }
        _ => format!("waiting for a test run slot ({global})"),
    }
}

/// Whether a run may start with `global`/`local` runs active: `0` global limit means
/// unlimited, an organization limit below 1 is ignored.
pub fn slot_free(global: usize, local: usize, global_limit: u32, org_limit: Option<i32>) -> bool {
    let global_ok = global_limit == 0 || global < global_limit as usize;
    let local_ok = match org_limit {
        Some(l) if l >= 1 => local < l as usize,
        _ => true,
    };
    global_ok && local_ok
}

/// Whether `me` holds a slot or one is free for it (the lock held by the caller).
pub(super) fn slot_for(
    ctx: &RunContext,
    admitted: &mut HashSet<ObjectRef<TestRun>>,
    ns: &str,
    me: &ObjectRef<TestRun>,
    org_limit: Option<i32>,
) -> bool {
    let (global, local) = all_active_counts(ctx, admitted, ns);
    admitted.contains(me)
        || slot_free(
            global,
            local,
            ctx.base.settings.test_run_concurrency,
            org_limit,
        )
}

/// [`slot_for`], taking the lock.
pub(super) async fn has_slot(
    ctx: &RunContext,
    ns: &str,
    me: &ObjectRef<TestRun>,
    org_limit: Option<i32>,
) -> bool {
    let mut admitted = ctx.admitted.lock().await;
    slot_for(ctx, &mut admitted, ns, me, org_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Global and organization limits; 0 global means unlimited.
    #[test]
    fn slots() {
        assert!(slot_free(0, 0, 1, None));
        assert!(!slot_free(1, 0, 1, None));
        assert!(slot_free(1000, 0, 0, None));
        assert!(!slot_free(1, 1, 50, Some(1)));
        assert!(slot_free(1, 0, 50, Some(1)));
        assert!(slot_free(5, 5, 50, Some(0)));
    }

    fn waiting(secs: i64, name: &str, ns: &str, limit: Option<i32>) -> Waiting<String> {
        (
            Some(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap()),
            name.to_owned(),
            ns.to_owned(),
            limit,
            format!("{ns}/{name}"),
        )
    }

    #[test]
    fn waker_picks_oldest_that_fit() {
        let runs = vec![
            waiting(30, "c", "acme", None),
            waiting(10, "a", "acme", None),
            waiting(20, "b", "acme", None),
            waiting(20, "a2", "acme", None),
        ];
        // Two free slots out of 50: the two oldest, ties broken by name.
        let picked = pick_waiting(runs.clone(), 48, HashMap::new(), 50);
        assert_eq!(picked, ["acme/a", "acme/a2"]);
        // No free slot: nobody.
        assert!(pick_waiting(runs.clone(), 50, HashMap::new(), 50).is_empty());
        // Unlimited: everybody, in creation order.
        assert_eq!(
            pick_waiting(runs, 1000, HashMap::new(), 0),
            ["acme/a", "acme/a2", "acme/b", "acme/c"]
        );
    }

    #[test]
    fn waker_respects_organization_limits() {
        let runs = vec![
            waiting(1, "a", "acme", Some(2)),
            waiting(2, "b", "acme", Some(2)),
            waiting(3, "c", "globex", None),
            waiting(4, "d", "acme", Some(2)),
        ];
        // acme already runs one: one more acme run fits, then globex's, not acme's third.
        let per_ns = HashMap::from([("acme".to_owned(), 1)]);
        assert_eq!(pick_waiting(runs, 1, per_ns, 50), ["acme/a", "globex/c"]);
    }

    #[test]
    fn wait_messages_do_not_carry_counts() {
        assert_eq!(
            wait_message(50, None),
            "waiting for a test run slot (at most 50 at once)"
        );
        assert_eq!(
            wait_message(50, Some(3)),
            "waiting for a test run slot (at most 50 at once, 3 in this organization)"
        );
        assert_eq!(
            wait_message(0, Some(0)),
            "waiting for a test run slot (no global limit)"
        );
    }
}
