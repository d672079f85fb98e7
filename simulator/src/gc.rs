//! Background controllers that kube-controller-manager runs against a real cluster:
//! the garbage collector (dependents whose owners are all gone are deleted) and the
//! namespace finalizer (a terminating namespace's content is deleted, then the namespace).
//!
//! The store queues candidates as it writes (an object with ownerReferences is written;
//! an owner is removed) and the task wakes on that, so dependents go promptly after
//! their owner; a one-second tick retries namespaces still waiting on finalizers.

use crate::Shared;
use crate::store::{ObjKey, ResKey, State};
use serde_json::Value;
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
            let Some(obj) = st.get(&res, &key) else {
                continue;
            };
            let owners: Vec<&str> = obj
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .filter_map(|r| r.get("uid").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            if owners.is_empty() || owners.iter().any(|u| st.uids.contains_key(*u)) {
                continue;
            }
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                continue;
            }
            crate::rest::controller_delete(st, &res, &key);
        }
    }
    let namespaces: Vec<String> = st.terminating.iter().cloned().collect();
    for ns in namespaces {
        finalize_namespace(st, &ns);
    }
}

fn finalize_namespace(st: &mut State, ns: &str) {
    let mut remaining = 0usize;
    let resources: Vec<ResKey> = st.data.keys().cloned().collect();
    for res in resources {
        let keys: Vec<(ObjKey, bool)> = st
            .range(&res, Some(ns), None)
            .map(|(k, o)| {
                (
                    k.clone(),
                    o.pointer("/metadata/deletionTimestamp").is_some(),
                )
            })
            .collect();
        for (key, deleting) in keys {
            if !deleting {
                crate::rest::controller_delete(st, &res, &key);
            }
            if st.get(&res, &key).is_some() {
                remaining += 1;
            }
        }
    }
    if remaining > 0 {
        return;
    }
    let nres: ResKey = (String::new(), "namespaces".into());
    let nkey: ObjKey = (String::new(), ns.to_string());
    st.terminating.remove(ns);
    let Some(obj) = st.get(&nres, &nkey) else {
        return;
    };
    let has_finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if has_finalizers {
        // Whoever owns those finalizers removes them; the update path then deletes it.
        return;
    }
    st.remove(&nres, &nkey);
}

/// Runs until shutdown.
pub async fn run(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        shared.write_from_controller(pass);
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
