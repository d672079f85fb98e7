//! Benchmark of issue 16 (remote runs), against `terrace dev` whose Pods run the real
//! terraform, each figure against a baseline measured in the same run:
//!
//! 1. Remote `terraform plan` of a 200-resource `terraform_data` configuration through a
//!    `cloud` block (upload, run, plan Pod, the CLI's own polling and log streaming) vs.
//!    the same plan run locally with the local backend (target ≤ 3x wall time).
//! 2. 200 runs (auto-apply) queued at once across 50 workspaces through the API: every
//!    run reaches a final state, at most one active run per workspace at any sampled
//!    moment, and the RSS of the `terrace dev` process (simulator, operator and API server
//!    together) before, at its peak and after (report).
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench runs`
//! (`TERRACE_BENCH_REPS`, default 3; `TERRACE_BENCH_RESOURCES`, default 200;
//! `TERRACE_BENCH_RUNS`, default 200; `TERRACE_BENCH_WORKSPACES`, default 50).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use terrace_tests::bench::{PeakRss, env_usize, median, rss_kib};
use terrace_tests::{Api, CLI_HOST, Dev, Terraform, terraform_path, text};

const ORG: &str = "benchruns";

fn resources(n: usize) -> String {
    format!(
        r#"
resource "terraform_data" "item" {{
  count = {n}
  input = "item-${{count.index}}"
}}
"#
    )
}

/// Wall time of `terraform plan` in `dir` (init not counted).
fn timed_plan(tf: &Terraform, dir: &Path) -> Duration {
    let out = tf.run(dir, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    let start = Instant::now();
    let out = tf.run(dir, &["plan", "-input=false"]);
    let took = start.elapsed();
    assert!(out.status.success(), "plan: {}", text(&out));
    took
}

fn main() {
    let reps = env_usize("TERRACE_BENCH_REPS", 3);
    let n = env_usize("TERRACE_BENCH_RESOURCES", 200);
    let total_runs = env_usize("TERRACE_BENCH_RUNS", 200);
    let workspaces = env_usize("TERRACE_BENCH_WORKSPACES", 50).max(1);
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let work = tempfile::tempdir().expect("work dir");

    // 1. Remote plan vs local plan.
    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut server = Vec::new();
    for rep in 0..reps {
        let l = work.path().join(format!("local-{rep}"));
        std::fs::create_dir_all(&l).expect("dir");
        std::fs::write(l.join("main.tf"), resources(n)).expect("main.tf");
        local.push(timed_plan(&tf, &l));
        let r = work.path().join(format!("remote-{rep}"));
        std::fs::create_dir_all(&r).expect("dir");
        std::fs::write(
            r.join("main.tf"),
            format!(
                "terraform {{\n  cloud {{\n    hostname = \"{CLI_HOST}\"\n    organization = \"{ORG}\"\n    workspaces {{\n      name = \"plan-{rep}\"\n    }}\n  }}\n}}\n{}",
                resources(n)
            ),
        )
        .expect("main.tf");
        remote.push(timed_plan(&tf, &r));
        // terrace's own part: from the run's creation to its end (status timestamps).
        let ws = api.get(&format!(
            "/api/v2/organizations/{ORG}/workspaces/plan-{rep}"
        ));
        let id = ws.body["data"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let runs = api.get(&format!("/api/v2/workspaces/{id}/runs"));
        let ts = &runs.body["data"][0]["attributes"]["status-timestamps"];
        let at = |k: &str| {
            ts[k]
                .as_str()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .unwrap_or_else(|| panic!("{k} in {ts}"))
        };
        let took = at("planned-and-finished-at").duration_since(at("plan-queueable-at"));
        server.push(took.unsigned_abs());
    }
    let (l, r, s) = (median(local), median(remote), median(server));
    println!("remote plan of {n} terraform_data resources ({reps} reps, medians):");
    println!(
        "  local backend, local plan: {:.2} s (baseline)",
        l.as_secs_f64()
    );
    println!(
        "  cloud block, remote plan in a Pod: {:.2} s ({:.2}x baseline, target <= 3x)",
        r.as_secs_f64(),
        r.as_secs_f64() / l.as_secs_f64()
    );
    println!(
        "    of which terrace (run created to plan finished: queue, Pod, init, plan, uploads): {:.2} s ({:.2}x baseline); the rest is the CLI's own: its start, the upload, its fixed polls (configuration version after 0.5 s, run after 1 s) and log reads",
        s.as_secs_f64(),
        s.as_secs_f64() / l.as_secs_f64()
    );

    // 2. Many runs across many workspaces.
    let pid = dev.pid().expect("terrace dev pid");
    let files = [(
        "main.tf",
        "resource \"terraform_data\" \"x\" {\n  input = timestamp()\n}\n",
    )];
    let mut ws_ids = Vec::new();
    let mut cvs = Vec::new();
    for i in 0..workspaces {
        let ws = api.create_workspace(
            ORG,
            json!({"name": format!("many-{i}"), "auto-apply": true}),
        );
        cvs.push(api.upload_config(&ws, &files));
        ws_ids.push(ws);
    }
    let before = rss_kib(pid);
    let sampler = PeakRss::start(pid, before, Duration::from_millis(100));
    let start = Instant::now();
    let mut run_ws: HashMap<String, usize> = HashMap::new();
    for i in 0..total_runs {
        let w = i % workspaces;
        let r = api.post(
            "/api/v2/runs",
            &json!({"data": {"type": "runs", "attributes": {},
                "relationships": {
                    "workspace": {"data": {"type": "workspaces", "id": ws_ids[w]}},
                    "configuration-version": {"data": {"type": "configuration-versions", "id": cvs[w]}}}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        run_ws.insert(
            r.body["data"]["id"].as_str().unwrap_or_default().to_owned(),
            w,
        );
    }
    let queued = start.elapsed();
    let finals = [
        "applied",
        "errored",
        "canceled",
        "discarded",
        "planned_and_finished",
    ];
    let mut max_active = 0usize;
    let mut statuses: HashMap<String, String> = HashMap::new();
    loop {
        statuses.clear();
        let mut active_per_ws = vec![0usize; workspaces];
        for (w, ws) in ws_ids.iter().enumerate() {
            let r = api.get(&format!("/api/v2/workspaces/{ws}/runs?page[size]=100"));
            for run in r.body["data"].as_array().cloned().unwrap_or_default() {
                let s = run["attributes"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if !finals.contains(&s.as_str()) && s != "pending" {
                    active_per_ws[w] += 1;
                }
                statuses.insert(run["id"].as_str().unwrap_or_default().to_owned(), s);
            }
        }
        max_active = max_active.max(active_per_ws.iter().copied().max().unwrap_or(0));
        let finished = run_ws
            .keys()
            .filter(|id| {
                statuses
                    .get(*id)
                    .is_some_and(|s| finals.contains(&s.as_str()))
            })
            .count();
        if finished == total_runs {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "runs did not finish: {finished}/{total_runs}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let took = start.elapsed();
    let peak = sampler.stop();
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kib(pid);
    let applied = statuses.values().filter(|s| *s == "applied").count();
    println!("{total_runs} runs queued across {workspaces} workspaces (auto-apply):");
    println!("  queued through the API in {:.2} s", queued.as_secs_f64());
    println!(
        "  all final in {:.1} s ({:.2} s per run; {applied} applied)",
        took.as_secs_f64(),
        took.as_secs_f64() / total_runs as f64
    );
    println!("  most active runs of one workspace at any sample: {max_active} (target 1)");
    println!(
        "  terrace dev RSS: {} MiB before, {} MiB peak, {} MiB after",
        before / 1024,
        peak / 1024,
        after / 1024
    );
}
