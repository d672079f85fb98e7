//! The state of an apply in flight: the engine's local state file read every
//! [`SNAPSHOT_INTERVAL`] and stored as an intermediate state version, so a run whose Pod
//! is lost keeps what was created (docs/runs.md).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::api::Api;
use super::process::say;

/// How often the runner looks at the state file while the engine applies.
pub(super) const SNAPSHOT_POLL: Duration = Duration::from_secs(1);
/// The least time between two intermediate state snapshots (the first one is sent at
/// once: what an apply created first is what a lost node must not lose).
pub(super) const SNAPSHOT_INTERVAL: Duration = Duration::from_secs(10);

/// Intermediate state snapshots (issue 40 §5, as HCP Terraform takes them): while the
/// engine applies, the state it writes after each resource is uploaded as a state version
/// of the run (at once the first time, then at most every [`SNAPSHOT_INTERVAL`]), so a
/// node lost, a Pod evicted or a kubelet killed mid-apply leaves the last snapshot as the
/// workspace's state, not nothing. Each snapshot takes the next serial after the state the
/// run started from.
pub(super) struct Snapshots {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Option<Vec<u8>>, i64)>,
}

impl Snapshots {
    pub(super) fn start(api: Api, file: PathBuf, before: Option<&[u8]>) -> Snapshots {
        let stop = Arc::new(AtomicBool::new(false));
        let base = before.and_then(serial_of).unwrap_or(0);
        let before = before.map(<[u8]>::to_vec);
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut saved, mut serial) = (None::<Vec<u8>>, base);
            let mut last: Option<std::time::Instant> = None;
            let mut said = false;
            while !flag.load(Ordering::SeqCst) {
                std::thread::sleep(SNAPSHOT_POLL);
                if last.is_some_and(|t| t.elapsed() < SNAPSHOT_INTERVAL) {
                    continue;
                }
                let Ok(now) = std::fs::read(&file) else {
                    continue;
                };
                // The engine writes the file in place: one read half way through does not
                // parse, and the next one will.
                if Some(&now) == saved.as_ref()
                    || Some(&now) == before.as_ref()
                    || serial_of(&now).is_none()
                {
                    continue;
                }
                match api.put("state", &with_serial(&now, serial + 1)) {
                    Ok(()) => {
                        serial += 1;
                        saved = Some(now);
                        last = Some(std::time::Instant::now());
                    }
                    Err(e) if !said => {
                        said = true;
                        say(&format!(
                            "could not save an intermediate state snapshot: {e}"
                        ));
                    }
                    Err(_) => {}
                }
            }
            (saved, serial)
        });
        Snapshots { stop, thread }
    }

    /// Stops taking snapshots; answers the last one saved and its serial (the run's
    /// starting serial when none was).
    pub(super) fn stop(self) -> (Option<Vec<u8>>, i64) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or((None, 0))
    }
}

pub(super) fn serial_of(b: &[u8]) -> Option<i64> {
    serde_json::from_slice::<serde_json::Value>(b)
        .ok()
        .and_then(|v| v["serial"].as_i64())
}

/// The state `after` with serial `serial`: the local backend counts every intermediate
/// write of an apply, a run numbers its versions one after the last it stored. A state
/// that does not parse is uploaded as it is (the API refuses it with the reason).
pub fn with_serial(after: &[u8], serial: i64) -> Vec<u8> {
    let next = serial;
    match serde_json::from_slice::<serde_json::Value>(after) {
        Ok(mut v) if v.is_object() => {
            v["serial"] = serde_json::json!(next);
            let mut out = serde_json::to_vec_pretty(&v).unwrap_or_else(|_| after.to_vec());
            out.push(b'\n');
            out
        }
        _ => after.to_vec(),
    }
}
