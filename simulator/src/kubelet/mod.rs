//! The simulated node: a kubelet that runs Pods' containers as local processes.
//!
//! [`run`] follows the Pods of the store through its watch history (as a kubelet
//! watches its Pods) and gives each new Pod a worker task. The worker binds the Pod to
//! the node (`spec.nodeName`), prepares its volumes as folders under the Pod's
//! directory, runs the init containers one after the other and then the containers
//! together (each in its own process group, stdout and stderr captured to a log file),
//! and writes `status` — phase, conditions, container states, termination messages —
//! through the store, so watches see MODIFIED events. A deletion of a running Pod
//! (graceful, see [`crate::rest::delete`]) reaches the worker as the Pod's
//! `deletionTimestamp`: it sends SIGTERM to each container's main process, waits up to
//! the grace period, SIGKILLs the process groups, records the terminated states and
//! deletes the Pod with grace 0 (finalizers still hold it, as real). On
//! [`crate::Simulator::shutdown`] the processes are killed; on the next open the Pods
//! they belonged to are marked Failed ([`node_restarted`]).

pub mod logs;
pub mod spec;

use crate::Shared;
use crate::meta::DeleteOpts;
use crate::store::{EventType, ObjKey, ResKey, State};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod process;
mod worker;
use process::*;
use worker::*;

/// The node every Pod runs on.
pub const NODE_NAME: &str = "terrace-sim";
/// Longest termination message kept, as the kubelet's limit.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;
/// Host environment variables a container inherits (its "image" environment).
const HOST_ENV: &[&str] = &["PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TERM"];

fn pods_res() -> ResKey {
    (String::new(), "pods".into())
}

/// The directory of one Pod's files.
pub fn pod_dir(pods_dir: &Path, uid: &str) -> PathBuf {
    pods_dir.join(uid)
}

/// What the worker of a Pod learns from the store.
#[derive(Clone, Debug, PartialEq)]
enum Life {
    Alive,
    Deleting { grace: i64 },
    Gone,
}

fn life_of(pod: &Value) -> Life {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        Life::Deleting {
            grace: pod
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        }
    } else {
        Life::Alive
    }
}

fn uid_of(pod: &Value) -> String {
    pod.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn phase_of(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn terminal(pod: &Value) -> bool {
    matches!(phase_of(pod), "Succeeded" | "Failed")
}

enum Seen {
    Live(Arc<Value>),
    Gone(String),
}

/// Pod changes after `last`: from the watch history, or every Pod when the history no
/// longer reaches back (`full`).
fn changes_since(st: &State, last: u64) -> (u64, bool, Vec<Seen>) {
    let Some(rd) = st.resource(&pods_res()) else {
        return (st.rv, false, Vec::new());
    };
    if rd.floor > last {
        let all = rd
            .objects
            .values()
            .map(|o| Seen::Live(Arc::new(o.value())))
            .collect();
        return (st.rv, true, all);
    }
    let mut seen: Vec<Seen> = rd
        .history
        .iter()
        .rev()
        .take_while(|e| e.rv > last)
        .map(|e| match e.kind {
            EventType::Deleted => Seen::Gone(e.object.uid().unwrap_or_default().to_owned()),
            _ => Seen::Live(Arc::new(e.object.value())),
        })
        .collect();
    seen.reverse();
    (st.rv, false, seen)
}

/// Runs the node until shutdown: one worker per Pod that is neither finished nor being
/// deleted when the node first sees it.
pub async fn run(shared: Arc<Shared>) {
    let mut changes = shared.write_from_controller(|st| st.subscribe(&pods_res()));
    let mut shutdown = shared.shutdown.subscribe();
    let mut workers: HashMap<String, watch::Sender<Life>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut last = 0u64;
    loop {
        let (rv, full, seen) = shared.read(|st| changes_since(st, last));
        last = rv;
        if full {
            let live: std::collections::HashSet<String> = seen
                .iter()
                .filter_map(|s| match s {
                    Seen::Live(o) => Some(uid_of(o)),
                    Seen::Gone(_) => None,
                })
                .collect();
            for (uid, tx) in workers.iter() {
                if !live.contains(uid) {
                    tx.send_replace(Life::Gone);
                }
            }
            workers.retain(|uid, _| live.contains(uid));
        }
        for s in seen {
            match s {
                Seen::Gone(uid) => {
                    if let Some(tx) = workers.remove(&uid) {
                        tx.send_replace(Life::Gone);
                    }
                }
                Seen::Live(pod) => {
                    let uid = uid_of(&pod);
                    if let Some(tx) = workers.get(&uid) {
                        let life = life_of(&pod);
                        if *tx.borrow() != life {
                            tx.send_replace(life);
                        }
                    } else if !terminal(&pod) && life_of(&pod) == Life::Alive && !uid.is_empty() {
                        let (tx, rx) = watch::channel(Life::Alive);
                        workers.insert(uid, tx);
                        tasks.spawn(worker(shared.clone(), pod, rx));
                    }
                }
            }
        }
        tokio::select! {
            r = changes.changed() => if r.is_err() { break },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
    }
    // Workers see the shutdown themselves and kill their processes.
    while tasks.join_next().await.is_some() {}
}

/// Marks the Pods this node ran before the simulator stopped as Failed: their
/// processes are gone. Pods being deleted are then deleted with grace 0.
pub fn node_restarted(st: &mut State) {
    let pods: Vec<Arc<Value>> = st
        .range(&pods_res(), None, None)
        .map(|(_, o)| Arc::new(o.value()))
        .collect();
    let now = crate::meta::now_rfc3339();
    for pod in pods {
        let bound = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !bound || terminal(&pod) {
            continue;
        }
        let mut o = (*pod).clone();
        let name = crate::store::obj_key(&pod).1;
        let status = o
            .as_object_mut()
            .map(|m| m.entry("status").or_insert_with(|| json!({})));
        if let Some(s) = status {
            if !s.is_object() {
                *s = json!({});
            }
            s["phase"] = json!("Failed");
            s["reason"] = json!("NodeLost");
            s["message"] = json!(format!(
                "Node {NODE_NAME} which was running pod {name} stopped: the simulator restarted and the Pod's processes are gone"
            ));
            for field in ["initContainerStatuses", "containerStatuses"] {
                if let Some(list) = s.get_mut(field).and_then(Value::as_array_mut) {
                    for c in list {
                        if c.pointer("/state/terminated").is_some() {
                            continue;
                        }
                        c["ready"] = json!(false);
                        c["started"] = json!(false);
                        let started = c
                            .pointer("/state/running/startedAt")
                            .cloned()
                            .unwrap_or(Value::Null);
                        c["state"] = json!({"terminated": {
                            "exitCode": 137,
                            "reason": "ContainerStatusUnknown",
                            "message": "The container could not be located when the pod was terminated",
                            "startedAt": started,
                            "finishedAt": now,
                        }});
                    }
                }
            }
            if let Some(conds) = s.get_mut("conditions").and_then(Value::as_array_mut) {
                for c in conds {
                    let t = c.get("type").and_then(Value::as_str).unwrap_or("");
                    if matches!(t, "Ready" | "ContainersReady") && c["status"] != "False" {
                        c["status"] = json!("False");
                        c["reason"] = json!("PodFailed");
                        c["lastTransitionTime"] = json!(now);
                    }
                }
            }
        }
        let stored = st.put(&pods_res(), o);
        if stored.pointer("/metadata/deletionTimestamp").is_some() {
            finish_deletion(st, &stored);
        }
    }
}

/// The kubelet's last word on a deleted Pod: delete it with grace 0 (uid precondition).
fn finish_deletion(st: &mut State, pod: &Value) {
    let Some(info) = st.registry.get("", "v1", "pods") else {
        return;
    };
    let (ns, name) = crate::store::obj_key(pod);
    let opts = DeleteOpts {
        grace_period: Some(0),
        precondition_uid: Some(uid_of(pod)),
        ..DeleteOpts::default()
    };
    let _ = crate::rest::delete(st, &info, Some(&ns), &name, &opts);
}
