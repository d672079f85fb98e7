//! `terrace dev` killed with SIGKILL right after a burst of workspace creates answered
//! 201 through the JSON:API: after a restart on the same data directory every answered
//! workspace is there (issue 12, item 3: the cluster simulator used to answer before its
//! log record was written, and such a kill lost answered creates).

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use terrace_tests::{Api, Dev};

const BURST: usize = 500;
const WRITERS: usize = 10;

#[test]
fn answered_creates_survive_kill_9() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dev = Dev::start_in(tmp.path());
    Api::admin(&dev).create_org("acme");
    let pid = dev.pid().expect("pid").to_string();
    let answered: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (api, answered, count, pid) = (
                Api::admin(&dev),
                answered.clone(),
                count.clone(),
                pid.clone(),
            );
            std::thread::spawn(move || {
                for i in 0.. {
                    let name = format!("ws-{w}-{i}");
                    let r = api.post(
                        "/api/v2/organizations/acme/workspaces",
                        &serde_json::json!({"data": {"type": "workspaces", "attributes": {"name": name}}}),
                    );
                    if r.status != 201 {
                        return;
                    }
                    answered
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name);
                    if count.fetch_add(1, Ordering::SeqCst) + 1 == BURST {
                        // The moment the 500th 201 is in, with other creates in flight.
                        let _ = Command::new("kill").args(["-KILL", &pid]).status();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        let _ = w.join();
    }
    drop(dev);
    let answered = answered.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        answered.len() >= BURST,
        "only {} creates answered",
        answered.len()
    );

    let dev = Dev::start_in(tmp.path());
    let api = Api::admin(&dev);
    let mut found = BTreeSet::new();
    for page in 1.. {
        let r = api.get(&format!(
            "/api/v2/organizations/acme/workspaces?page%5Bsize%5D=100&page%5Bnumber%5D={page}"
        ));
        assert_eq!(r.status, 200, "{:?}", r.body);
        let items = r.body["data"].as_array().cloned().unwrap_or_default();
        found.extend(
            items
                .iter()
                .filter_map(|w| w["attributes"]["name"].as_str().map(str::to_owned)),
        );
        if r.body["meta"]["pagination"]["next-page"].is_null() {
            break;
        }
    }
    let lost: Vec<&String> = answered.difference(&found).collect();
    assert!(
        lost.is_empty(),
        "{} of {} workspaces answered 201 are gone after kill -9: {:?}",
        lost.len(),
        answered.len(),
        &lost[..lost.len().min(10)]
    );
}
