//! Benchmark of DESIGN.md §6 / issue 5: N test runs (default 1,000; `TERRACE_BENCH_RUNS`)
//! created at once against `terrace dev`. Measures the time from the last create's
//! response to the moment the last run's Pod exists (budget 10 s), the most runs holding a
//! concurrency slot at once (queued or running) against the operator's default limit, the
//! time until every run is final, and the `terrace dev` process RSS. Baseline, measured in
//! the same run through the same Kubernetes API: creating N plain ConfigMaps.
//!
//! Run: `cargo build -p terrace && cargo bench -p terrace-tests --bench testruns`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use terrace_crds::TestRun;
use terrace_tests::{Api, Dev};

/// The operator's default `test_run_concurrency` (operator/src/settings.rs).
const CONCURRENCY_LIMIT: usize = 50;
const POD_BUDGET: Duration = Duration::from_secs(10);
const THREADS: usize = 16;

const PASS_ENGINE: &str = r#"#!/bin/sh
echo '{"@level":"info","@message":"Success! 1 passed, 0 failed.","@module":"tofu.ui","type":"test_summary","test_summary":{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0}}'
"#;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Default)]
struct Observed {
    max_slots: usize,
    pods_seen: HashSet<String>,
    last_pod_at: Option<Instant>,
    all_final_at: Option<Instant>,
    max_rss_kib: u64,
}

fn main() {
    let n: usize = std::env::var("TERRACE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let engine = tmp.path().join("fake-engine");
    std::fs::write(&engine, PASS_ENGINE).expect("engine");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&engine, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let dev = Dev::start_with(&["--engine", &engine.display().to_string()]);
    let pid = dev.pid().expect("pid");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(async {
        let kc = Kubeconfig::read_from(dev.kubeconfig()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    });
    let rss_idle = rss_kib(pid);

    // Baseline: N ConfigMaps through the same API, THREADS at a time.
    let baseline = rt.block_on(async {
        let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "default");
        let start = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| {
                let cms = cms.clone();
                async move {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(format!("bench-{i}")),
                            ..ObjectMeta::default()
                        },
                        ..ConfigMap::default()
                    };
                    cms.create(&PostParams::default(), &cm)
                        .await
                        .expect("create ConfigMap");
                }
            })
            .buffer_unordered(THREADS)
            .collect::<Vec<()>>()
            .await;
        start.elapsed()
    });

    let api = Api::admin(&dev);
    let org = api.create_org("bench");
    let t = api.create_module(&org, "net", "aws");
    let cv = api.uploaded_cv(&t);
    dev.eventually(Duration::from_secs(20), || {
        // The first run doubles as the check that the upload was processed.
        (api.create_test_run(&t, &cv).status == 201).then_some(())
    })
    .expect("upload processed");

    // Observer: lists TestRuns and Pods every 50 ms.
    let observed = Arc::new(Mutex::new(Observed::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let observed = observed.clone();
        let stop = stop.clone();
        let client = client.clone();
        let org = org.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            let runs: kube::Api<TestRun> = kube::Api::namespaced(client.clone(), &org);
            let pods: kube::Api<Pod> = kube::Api::namespaced(client, &org);
            let lp = ListParams::default().labels("terrace.dev/test-run");
            while !stop.load(Ordering::Relaxed) {
                let (r, p) = rt.block_on(async {
                    (
                        runs.list(&ListParams::default()).await,
                        pods.list(&lp).await,
                    )
                });
                let now = Instant::now();
                let mut o = observed.lock().expect("lock");
                o.max_rss_kib = o.max_rss_kib.max(rss_kib(pid));
                if let Ok(p) = p {
                    for pod in p.items {
                        if let Some(name) = pod.metadata.name
                            && o.pods_seen.insert(name)
                        {
                            o.last_pod_at = Some(now);
                        }
                    }
                }
                if let Ok(r) = r {
                    let mut slots = 0;
                    let mut finals = 0;
                    for run in &r.items {
                        let st = run.status.as_ref();
                        match st.and_then(|s| s.status.as_deref()) {
                            Some("queued" | "running") => slots += 1,
                            Some("finished" | "errored" | "canceled") => finals += 1,
                            _ => {}
                        }
                        if let Some(name) = st.and_then(|s| s.pod_name.clone())
                            && o.pods_seen.insert(name)
                        {
                            o.last_pod_at = Some(now);
                        }
                    }
                    o.max_slots = o.max_slots.max(slots);
                    if finals == n + 1 && o.all_final_at.is_none() {
                        o.all_final_at = Some(now);
                    }
                }
                drop(o);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // N creates, THREADS at a time.
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let create_start = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let next = next.clone();
            let failed = failed.clone();
            let api = Api::admin(&dev);
            let (t, cv) = (t.clone(), cv.clone());
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    if api.create_test_run(&t, &cv).status != 201 {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let last_create = Instant::now();
    let create_time = last_create - create_start;

    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let o = observed.lock().expect("lock");
        if o.all_final_at.is_some() || Instant::now() > deadline {
            break;
        }
        drop(o);
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    observer.join().expect("observer");
    let o = observed.lock().expect("lock");
    let rss_end = rss_kib(pid);
    let secs = |d: Duration| d.as_secs_f64();
    let last_pod = o
        .last_pod_at
        .map(|at| at.saturating_duration_since(last_create))
        .unwrap_or(Duration::MAX);
    let all_final = o
        .all_final_at
        .map(|at| at.saturating_duration_since(last_create));

    println!("test runs: {n} (+1 warm-up run), {THREADS} concurrent clients, 2-core machine");
    println!("create failures: {}", failed.load(Ordering::Relaxed));
    println!(
        "baseline: {n} ConfigMaps created in {:.2} s",
        secs(baseline)
    );
    println!(
        "creates: {n} test runs created in {:.2} s ({:.2}x baseline)",
        secs(create_time),
        secs(create_time) / secs(baseline)
    );
    println!(
        "last create -> last Pod created: {:.2} s ({:.2}x budget {} s, {:.2}x baseline); Pods seen: {}",
        secs(last_pod),
        secs(last_pod) / secs(POD_BUDGET),
        POD_BUDGET.as_secs(),
        secs(last_pod) / secs(baseline),
        o.pods_seen.len()
    );
    println!(
        "max runs queued/running at once: {} (limit {CONCURRENCY_LIMIT}: {:.2}x)",
        o.max_slots,
        o.max_slots as f64 / CONCURRENCY_LIMIT as f64
    );
    match all_final {
        Some(d) => println!(
            "last create -> all runs final: {:.2} s ({:.2}x baseline)",
            secs(d),
            secs(d) / secs(baseline)
        ),
        None => println!("not all runs were final within 600 s"),
    }
    println!(
        "terrace dev RSS: idle {} MiB, peak {} MiB, end {} MiB",
        rss_idle / 1024,
        o.max_rss_kib / 1024,
        rss_end / 1024
    );
}
