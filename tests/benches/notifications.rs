//! Benchmark of issue 27 §5 (notifications): what a fan-out to 10 destinations adds to a
//! run. Against `terrace dev` whose Pods run the real terraform: auto-applied runs of a
//! one-resource configuration in a workspace without notification configurations
//! (baseline) and, alternately, in one with 10 generic destinations listening to every
//! run trigger, answering slowly (half of them after 1 s, the others a 500 after 1 s, so
//! retries are due while the run goes on). A run's time is its own, from its status
//! timestamps (queueable to applied). Target: the fan-out adds ≤ 50 ms to no run (the
//! notifications are delivered by a controller of their own, never by the Run
//! controller); the figure printed is the worst difference of a run against the
//! baseline's median, and the median one. Every destination is checked to have received
//! the run's notifications.
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench notifications`
//! (`TERRACE_BENCH_REPS`, default 5).

use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::bench::{env_usize, median};
use terrace_tests::receiver::Receiver;
use terrace_tests::{Api, Dev, terraform_path};

const ORG: &str = "benchnotify";
const DESTINATIONS: usize = 10;

const FILES: &[(&str, &str)] = &[(
    "main.tf",
    "resource \"terraform_data\" \"x\" {\n  input = timestamp()\n}\n",
)];

/// Runs an auto-applied run in `ws` and answers its ID and its own time (queueable to
/// applied).
fn timed_run(dev: &Dev, api: &Api, ws: &str, cv: &str) -> (String, Duration) {
    let r = api.post(
        "/api/v2/runs",
        &json!({"data": {"type": "runs", "attributes": {"auto-apply": true}, "relationships": {
            "workspace": {"data": {"type": "workspaces", "id": ws}},
            "configuration-version": {"data": {"type": "configuration-versions", "id": cv}}}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let done: Value = dev
        .eventually(Duration::from_secs(120), || {
            let r = api.get(&format!("/api/v2/runs/{id}"));
            let st = r.body["data"]["attributes"]["status"]
                .as_str()
                .unwrap_or_default();
            ["applied", "errored", "canceled"]
                .contains(&st)
                .then(|| r.body["data"].clone())
        })
        .unwrap_or_else(|| panic!("run {id} did not end"));
    assert_eq!(done["attributes"]["status"], "applied", "{done}");
    let ts = &done["attributes"]["status-timestamps"];
    let at = |k: &str| {
        ts[k]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .unwrap_or_else(|| panic!("{k} in {ts}"))
    };
    let took = at("applied-at").duration_since(at("plan-queueable-at"));
    (id, took.unsigned_abs())
}

fn main() {
    let reps = env_usize("TERRACE_BENCH_REPS", 5);
    let receiver = Receiver::start(|path, _| {
        let n: usize = path.trim_start_matches("/d").parse().unwrap_or(0);
        (
            if n.is_multiple_of(2) { 200 } else { 500 },
            Duration::from_secs(1),
        )
    });
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let quiet = api.create_workspace(ORG, json!({"name": "quiet", "auto-apply": true}));
    let loud = api.create_workspace(ORG, json!({"name": "loud", "auto-apply": true}));
    for d in 0..DESTINATIONS {
        let r = api.post(
            &format!("/api/v2/workspaces/{loud}/notification-configurations"),
            &json!({"data": {"type": "notification-configurations", "attributes": {
                "name": format!("d{d}"), "destination-type": "generic", "enabled": true,
                "token": "bench", "url": receiver.url(&format!("/d{d}")),
                "triggers": ["run:created", "run:planning", "run:needs_attention",
                             "run:applying", "run:completed", "run:errored"]}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let (cv_quiet, cv_loud) = (
        api.upload_config(&quiet, FILES),
        api.upload_config(&loud, FILES),
    );
    // One of each first, unmeasured (the engine's first start).
    timed_run(&dev, &api, &quiet, &cv_quiet);
    timed_run(&dev, &api, &loud, &cv_loud);
    let (mut base, mut fanned, mut loud_runs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        base.push(timed_run(&dev, &api, &quiet, &cv_quiet).1);
        let (id, took) = timed_run(&dev, &api, &loud, &cv_loud);
        fanned.push(took);
        loud_runs.push(id);
    }
    // Every destination got each measured run's completion.
    for d in 0..DESTINATIONS {
        let path = format!("/d{d}");
        let got = dev.eventually(Duration::from_secs(60), || {
            let completed = receiver
                .at(&path)
                .iter()
                .filter(|r| r.json()["notifications"][0]["trigger"] == "run:completed")
                .filter(|r| loud_runs.iter().any(|id| r.json()["run_id"] == id.as_str()))
                .count();
            (completed >= loud_runs.len()).then_some(())
        });
        assert!(
            got.is_some(),
            "destination {path} missed a run's completion"
        );
    }
    let b = median(base.clone());
    let worst = fanned.iter().max().copied().unwrap_or_default();
    let med = median(fanned.clone());
    let added = |d: Duration| d.as_secs_f64() * 1000.0 - b.as_secs_f64() * 1000.0;
    println!("auto-applied runs of one resource ({reps} reps each, alternating):");
    println!(
        "  no notification configurations: median {:.0} ms (baseline)",
        b.as_secs_f64() * 1000.0
    );
    println!(
        "  {DESTINATIONS} destinations (every trigger, each answering after 1 s, half with 500s and retries): median {:.0} ms ({:.2}x baseline, {:+.0} ms), worst run {:.0} ms ({:+.0} ms against the baseline median); target: adds <= 50 ms to no run",
        med.as_secs_f64() * 1000.0,
        med.as_secs_f64() / b.as_secs_f64(),
        added(med),
        worst.as_secs_f64() * 1000.0,
        added(worst)
    );
    println!(
        "  baseline spread: {:.0}..{:.0} ms (a run's own time varies this much without notifications)",
        base.iter().min().unwrap_or(&b).as_secs_f64() * 1000.0,
        base.iter().max().unwrap_or(&b).as_secs_f64() * 1000.0
    );
}
