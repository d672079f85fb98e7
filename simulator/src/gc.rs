//! Background controllers that kube-controller-manager runs against a real cluster:
//! the garbage collector (dependents whose owners are all gone are deleted) and the
//! namespace finalizer (a terminating namespace's content is deleted, then the namespace:
//! [`finalize_namespace`]); and, at open, kube-apiserver's system-namespaces controller
//! ([`create_default_namespaces`]).
//!
//! The store queues candidates as it writes (an object with ownerReferences is written;
//! an owner is removed) and the task wakes on that, so dependents go promptly after
//! their owner; a one-second tick retries namespaces still waiting on finalizers and
//! drops watch history older than [`crate::SimConfig::watch_history_age`].

use crate::Shared;
use crate::kinds::namespace::{DEFAULTS, res};
use crate::rest::{self, WriteOpts};
use crate::store::{ObjKey, ResKey, State};
use serde_json::{Value, json};
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
            rest::controller_delete(st, &res, &key);
        }
    }
    let namespaces: Vec<String> = st.terminating.iter().cloned().collect();
    for ns in namespaces {
        finalize_namespace(st, &ns);
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

/// Creates the namespaces a cluster starts with ([`DEFAULTS`]) that are missing (at
/// open, as kube-apiserver's system-namespaces controller does).
pub fn create_default_namespaces(st: &mut State) -> Result<(), String> {
    let info = st
        .registry
        .get("", "v1", "namespaces")
        .ok_or_else(|| "namespaces not registered".to_string())?;
    for ns in DEFAULTS {
        if !st.contains(&res(), &(String::new(), ns.into())) {
            let opts = WriteOpts {
                field_manager: "kube-apiserver".into(),
                ..Default::default()
            };
            rest::create(
                st,
                &info,
                None,
                json!({"metadata": {"name": ns}}),
                &opts,
                "Update",
            )
            .map_err(|e| e.message)?;
        }
    }
    Ok(())
}

/// The namespace finalizer's pass over one terminating namespace: deletes its content
/// (honouring finalizers); once nothing is left, removes the Namespace unless its own
/// `metadata.finalizers` still hold it (their owner removes them, and the update path
/// then deletes it).
pub fn finalize_namespace(st: &mut State, ns: &str) {
    let mut remaining = 0usize;
    let resources: Vec<ResKey> = st.data.keys().cloned().collect();
    for r in resources {
        let keys: Vec<(ObjKey, bool)> = st
            .range(&r, Some(ns), None)
            .map(|(k, o)| (k.clone(), o.is_deleting()))
            .collect();
        for (key, deleting) in keys {
            if !deleting {
                rest::controller_delete(st, &r, &key);
            }
            if st.contains(&r, &key) {
                remaining += 1;
            }
        }
    }
    if remaining > 0 {
        return;
    }
    let nkey: ObjKey = (String::new(), ns.to_string());
    st.terminating.remove(ns);
    let Some(obj) = st.get(&res(), &nkey) else {
        return;
    };
    let has_finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_finalizers {
        st.remove(&res(), &nkey);
    }
}
