//! Benchmark of issue 44 (health assessments at scale), every figure against a baseline
//! measured in the same run:
//!
//! The operator and the API server run as processes of their own against
//! `terrace dev --cluster-only` (the simulator, whose kubelet runs each Pod as local
//! processes with a fake engine whose refresh-only plan finds nothing), as in a cluster,
//! so the operator's CPU time and RSS are its own. `TERRACE_ASSESS_WORKSPACES` workspaces
//! (default 10,000) are made through the JSON:API as users make them: each with a
//! configuration version and a state (lock, state version, unlock), so each is eligible.
//! Then the organization enforces assessments (`assessments-enforced`, one PATCH: every
//! workspace wants assessments at the same moment) with a short schedule
//! (`TERRACE_ASSESS_INTERVAL` seconds, default 3,600) and the storm is watched for
//! `TERRACE_ASSESS_WINDOW` seconds (default 300).
//!
//! 1. **Start times spread**: the assessments created in the window, per 30 s bucket,
//!    against the even share (workspaces × bucket ÷ interval): the busiest bucket's ratio
//!    (the schedule's spread; the concurrency limit, `TERRACE_ASSESS_CONCURRENCY`, default
//!    5, also caps it), and the due times of every workspace over the whole interval
//!    computed with the operator's own rule (`crds::assessment::slot_after`).
//! 2. **Operator CPU and memory per assessment**: its CPU time in the window divided by
//!    the assessments that ended in it, against its CPU per plan-only run (the probes
//!    before the storm); its RSS growth per assessment.
//! 3. **Runs are not starved**: `TERRACE_ASSESS_PROBES` plan-only runs (default 5), one
//!    at a time, of a workspace that is never assessed (it has no state), before the storm
//!    (the baseline) and during it: the median time from `POST /runs` to the run leaving
//!    the queue (planning or later). Target ≤ 1.2x.
//!
//! Run: `cargo build --release -p terrace && TERRACE_BIN=$PWD/target/release/terrace cargo
//! bench --profile dev -p terrace-tests --bench assessments`. Quick:
//! `TERRACE_ASSESS_WORKSPACES=500 TERRACE_ASSESS_INTERVAL=300 TERRACE_ASSESS_WINDOW=120`;
//! `TERRACE_ASSESS_PERF=DIR` records a `perf` profile of the operator during the storm.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use jiff::{SignedDuration, Timestamp};
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use terrace_crds::Run;
use terrace_crds::run::RunState;
use terrace_tests::bench::{cpu_secs, env_usize, median, rss_kib};
use terrace_tests::{Api, Dev, PLAN_ENGINE, Split, write_engine};

const ORG: &str = "assess";
const THREADS: usize = 8;
const BUCKET_SECS: u64 = 30;

/// Time from `POST /runs` of a plan-only run to the run leaving the queue.
fn probe(api: &Api, ws: &str, cv: &str) -> Duration {
    let t = Instant::now();
    let id = api
        .create_run(ws, Some(cv), json!({"plan-only": true}))
        .unwrap_or_else(|e| panic!("probe run: {e:?}"));
    loop {
        let status = api.run(&id)["attributes"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !matches!(
            status.as_str(),
            "" | "pending" | "fetching" | "queuing" | "plan_queued"
        ) {
            let took = t.elapsed();
            assert_ne!(status, "errored", "probe run {id} errored");
            // Let it end before the next one.
            api.wait_run(
                &id,
                &["planned_and_finished", "errored"],
                Duration::from_secs(300),
            );
            return took;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "probe {id} never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn probes(api: &Api, ws: &str, cv: &str, n: usize) -> Duration {
    median((0..n).map(|_| probe(api, ws, cv)).collect())
}

/// Makes workspace `i` eligible: a configuration version and a state.
fn workspace(api: &Api, i: usize) {
    let ws = api.create_workspace(ORG, json!({"name": format!("w{i:05}")}));
    api.upload_config(&ws, &[("main.tf", "# assessed\n")]);
    let lock = api.post(&format!("/api/v2/workspaces/{ws}/actions/lock"), &json!({}));
    assert_eq!(lock.status, 200, "lock: {:?}", lock.body);
    let state = serde_json::to_vec(&json!({
        "version": 4, "terraform_version": "1.11.4", "serial": 1,
        "lineage": format!("lineage-{i}"), "outputs": {}, "resources": [],
    }))
    .unwrap_or_default();
    let sv = api.post(
        &format!("/api/v2/workspaces/{ws}/state-versions"),
        &json!({"data": {"type": "state-versions", "attributes": {
            "serial": 1, "lineage": format!("lineage-{i}"),
            "md5": terrace_crds::state::md5_hex(&state),
            "state": base64::engine::general_purpose::STANDARD.encode(&state)}}}),
    );
    assert_eq!(sv.status, 201, "state version: {:?}", sv.body);
    let unlock = api.post(
        &format!("/api/v2/workspaces/{ws}/actions/unlock"),
        &json!({}),
    );
    assert_eq!(unlock.status, 200, "unlock: {:?}", unlock.body);
}

/// The assessment Runs of the organization.
fn assessments(rt: &tokio::runtime::Runtime, client: &kube::Client) -> Vec<Run> {
    let runs: kube::Api<Run> = kube::Api::namespaced(client.clone(), ORG);
    rt.block_on(runs.list(&ListParams::default()))
        .expect("list runs")
        .items
        .into_iter()
        .filter(|r| r.spec.assessment)
        .collect()
}

fn main() {
    let n = env_usize("TERRACE_ASSESS_WORKSPACES", 10_000);
    let interval = env_usize("TERRACE_ASSESS_INTERVAL", 3_600) as u64;
    let window = env_usize("TERRACE_ASSESS_WINDOW", 300) as u64;
    let concurrency = env_usize("TERRACE_ASSESS_CONCURRENCY", 5);
    let probe_n = env_usize("TERRACE_ASSESS_PROBES", 5);
    let tmp = tempfile::tempdir().expect("tempdir");
    let engine = write_engine(tmp.path(), PLAN_ENGINE);
    let mut dev = Dev::start_with(&["--cluster-only", "--engine", &engine]);
    let split = Split::start(
        &mut dev,
        &[("TERRACE_EDITION", "hosted".into())],
        &[
            ("TERRACE_ASSESSMENT_INTERVAL", format!("{interval}s")),
            ("TERRACE_ASSESSMENT_CONCURRENCY", concurrency.to_string()),
        ],
    );
    let kubeconfig = dev.kubeconfig();
    let op = split.operator.pid();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(async {
        let kc = Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    });
    let api = Api::admin(&dev);
    api.create_org(ORG);

    // The workspaces, THREADS at a time.
    let t = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let next = next.clone();
            let api = Api::at(&dev.api, Some(&dev.token));
            s.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    workspace(&api, i);
                }
            });
        }
    });
    println!(
        "{n} workspaces with a configuration and a state in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let probe_ws = api.create_workspace(ORG, json!({"name": "probe"}));
    let probe_cv = api.upload_config(&probe_ws, &[("main.tf", "# probe\n")]);
    std::thread::sleep(Duration::from_secs(10));

    // Baselines: the probe runs and the operator's idle CPU and RSS.
    let c0 = cpu_secs(op);
    let before = probes(&api, &probe_ws, &probe_cv, probe_n);
    let run_cpu = (cpu_secs(op) - c0) / probe_n.max(1) as f64;
    let idle_secs = 30.0;
    let c0 = cpu_secs(op);
    std::thread::sleep(Duration::from_secs_f64(idle_secs));
    let idle_cpu = cpu_secs(op) - c0;
    let rss0 = rss_kib(op);

    // The storm: every workspace wants assessments at once.
    let enabled_at = Timestamp::now();
    let r = api.call(
        "PATCH",
        &format!("/api/v2/organizations/{ORG}"),
        Some(&json!({"data": {"type": "organizations", "attributes": {"assessments-enforced": true}}})),
    );
    assert_eq!(r.status, 200, "enforce: {:?}", r.body);
    let cpu0 = cpu_secs(op);
    let t = Instant::now();
    // `TERRACE_ASSESS_PERF=DIR`: a perf profile of the operator during the storm.
    let perf = std::env::var("TERRACE_ASSESS_PERF").ok().map(|dir| {
        std::process::Command::new("perf")
            .args([
                "record",
                "-g",
                "-o",
                &format!("{dir}/operator.perf"),
                "-p",
                &op.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf")
    });
    // Probes in the middle of the window, while assessments run.
    std::thread::sleep(Duration::from_secs(window / 3));
    let during = probes(&api, &probe_ws, &probe_cv, probe_n);
    let rest = Duration::from_secs(window).saturating_sub(t.elapsed());
    std::thread::sleep(rest);
    let cpu = cpu_secs(op) - cpu0;
    if let Some(mut p) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait();
    }
    let rss1 = rss_kib(op);
    let took = t.elapsed().as_secs_f64();
    let runs = assessments(&rt, &client);
    let ended = runs
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| RunState::of(s.status.as_deref()).is_ok_and(|st| st.is_final()))
        })
        .count();
    let failed = runs
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.status.as_deref() == Some("errored"))
        })
        .count();

    // 1. Spread.
    let mut buckets: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &runs {
        if let Some(c) = r.metadata.creation_timestamp.as_ref() {
            let since = c.0.duration_since(enabled_at).as_secs().max(0) as u64;
            *buckets.entry(since / BUCKET_SECS).or_default() += 1;
        }
    }
    let share = n as f64 * BUCKET_SECS as f64 / interval as f64;
    let busiest = buckets.values().copied().max().unwrap_or(0);
    println!(
        "1. starts in the first {window} s: {} assessments ({} ended, {failed} errored); per {BUCKET_SECS} s: {:?}",
        runs.len(),
        ended,
        buckets.values().collect::<Vec<_>>()
    );
    println!(
        "   busiest bucket {busiest} vs the even share {share:.1}: {:.2}x (target ≤ 2x; the concurrency limit {concurrency} caps starts too)",
        busiest as f64 / share.max(1e-9)
    );
    let every = SignedDuration::from_secs(interval as i64);
    let ids: Vec<String> = (0..n).map(|i| format!("ws-spread{i:011}")).collect();
    let mut due: BTreeMap<i64, usize> = BTreeMap::new();
    for id in &ids {
        let at = terrace_crds::assessment::slot_after(id, every, enabled_at);
        let since = at.duration_since(enabled_at).as_secs();
        *due.entry(since / BUCKET_SECS as i64).or_default() += 1;
    }
    let due_max = due.values().copied().max().unwrap_or(0);
    println!(
        "   due times of {n} workspaces over the whole {interval} s interval (the operator's rule): busiest {BUCKET_SECS} s bucket {due_max} vs the even share {share:.1}: {:.2}x",
        due_max as f64 / share.max(1e-9)
    );

    // 2. Operator cost per assessment.
    let per = |x: f64| {
        if ended > 0 {
            x / ended as f64
        } else {
            f64::NAN
        }
    };
    println!(
        "2. operator CPU: {:.2} s in {took:.0} s of storm = {:.2} ms per ended assessment vs {:.2} ms per plan-only run (the probes before): {:.2}x; idle before: {:.3} s per 30 s",
        cpu,
        per(cpu) * 1000.0,
        run_cpu * 1000.0,
        per(cpu) / run_cpu.max(1e-9),
        idle_cpu,
    );
    if let Ok(dir) = std::env::var("TERRACE_ASSESS_PERF") {
        println!("   perf profile of the operator in the storm: {dir}/operator.perf");
    }
    println!(
        "   operator RSS: {} → {} MiB: {:.1} KiB per assessment (each keeps its Run in the cache until history retention)",
        rss0 / 1024,
        rss1 / 1024,
        rss1.saturating_sub(rss0) as f64 / runs.len().max(1) as f64
    );

    // 3. Runs during the storm.
    println!(
        "3. a run's time in the queue (median of {probe_n}): {:.0} ms before, {:.0} ms during the storm: {:.2}x (target ≤ 1.2x)",
        before.as_secs_f64() * 1000.0,
        during.as_secs_f64() * 1000.0,
        during.as_secs_f64() / before.as_secs_f64().max(1e-9)
    );
}
