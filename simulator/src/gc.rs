//! Background controllers that kube-controller-manager runs against a real cluster:
//! the garbage collector (dependents whose owners are all gone are deleted) and the
//! namespace finalizer (a terminating namespace's content is deleted, then the namespace:
//! [`crate::kinds::namespace::finalize`]).
//!
//! The store queues candidates as it writes (an object with ownerReferences is written;
//! an owner is removed) and the task wakes on that, so dependents go promptly after
//! their owner; a one-second tick retries namespaces still waiting on finalizers and
//! drops watch history older than [`crate::SimConfig::watch_history_age`].

use crate::Shared;
use crate::store::State;
use std::sync::Arc;
use std::time::Duration;

/// One pass: process the GC queue and the terminating namespaces.
pub fn pass(st: &mut State) {
    // Deleting dependents can queue further dependents; run to a fixed point.
    for _ in 0..64 {
        let queue = std::mem::take(&mut st.gc_queue);
        if queue.is_empty() {
            break;
        }
        for (res, key) in queue {
            let Some(obj) = st.get_obj(&res, &key) else {
                continue;
            };
            let mut owners = obj.owner_uids().peekable();
            if owners.peek().is_none() || owners.any(|u| st.uids.contains(u)) {
                continue;
            }
            if obj.is_deleting() {
                continue;
            }
            crate::rest::controller_delete(st, &res, &key);
        }
    }
    let namespaces: Vec<String> = st.terminating.iter().cloned().collect();
    for ns in namespaces {
        crate::kinds::namespace::finalize(st, &ns);
    }
}

/// Runs until shutdown.
pub async fn run(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let age = shared.config.watch_history_age;
    loop {
        shared.write_from_controller(|st| {
            pass(st);
            if let Some(cutoff) = std::time::Instant::now().checked_sub(age) {
                st.trim_history(cutoff);
            }
        });
        let waiting = shared.read(|st| !st.terminating.is_empty());
        let tick = if waiting {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(1)
        };
        tokio::select! {
            _ = shared.gc_wake.notified() => {}
            _ = tokio::time::sleep(tick) => {}
            // `wait_for` also sees a shutdown sent before this task first ran.
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}
