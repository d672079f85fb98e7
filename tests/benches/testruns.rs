//! Benchmark of DESIGN.md §6 / issue 5: N test runs (default 1,000; `TERRACE_BENCH_RUNS`)
//! created at once through the JSON:API of `terrace dev`, in two phases, each on a fresh
//! `terrace dev`:
//!
//! 1. **Pod creation** (the budget: every Pod within 10 s of the last create). The
//!    simulator runs no Pods (`--no-kubelet`: a cluster whose nodes are elsewhere), and the
//!    concurrency limit is N, so the figure is the operator's own admission throughput:
//!    last create's response → the moment the last run's Pod exists.
//! 2. **Concurrency limit** (default 50, `TERRACE_BENCH_LIMIT`): the simulator runs every
//!    Pod as local processes with a fake engine that passes at once; measured are the
//!    most runs holding a slot (queued or running) at any moment, which must not exceed
//!    the limit, the time until every run is final, and the throughput in runs/s. On a
//!    real cluster Pods run on other nodes; here they share the 2 cores with the operator,
//!    the API server and the simulator, so this phase measures all of them together.
//!
//! The operator and the API server run as processes of their own against
//! `terrace dev --cluster-only` (the simulator), as they do in a cluster, so the operator's
//! RSS (peak, and per run above idle) is the controller's memory.
//! Baseline, measured in the same run through the same Kubernetes API: creating N plain
//! ConfigMaps. Runs and Pods are observed through watches, not polling, so observing
//! does not load the server.
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench testruns`
//! (`TERRACE_BENCH_PHASES=1` or `=2` runs one phase only).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use terrace_crds::TestRun;
use terrace_tests::bench::{env_usize, rss_kib, secs};
use terrace_tests::{Api, Dev, PASS_ENGINE, Split, write_engine};

const DEFAULT_LIMIT: usize = 50;
const POD_BUDGET: Duration = Duration::from_secs(10);
const THREADS: usize = 16;

/// What the watches saw.
#[derive(Default)]
struct Observed {
    pods_seen: HashSet<String>,
    last_pod_at: Option<Instant>,
    /// Run name → its last seen status.
    states: HashMap<String, String>,
    slots: usize,
    finals: usize,
    max_slots: usize,
    all_final_at: Option<Instant>,
}

impl Observed {
    fn run_seen(&mut self, name: String, status: &str, expected: usize) {
        let holds = |s: &str| matches!(s, "queued" | "running");
        let fin = |s: &str| matches!(s, "finished" | "errored" | "canceled");
        if let Some(old) = self.states.get(&name) {
            self.slots -= usize::from(holds(old));
            self.finals -= usize::from(fin(old));
        }
        self.slots += usize::from(holds(status));
        self.finals += usize::from(fin(status));
        self.max_slots = self.max_slots.max(self.slots);
        if self.finals == expected && self.all_final_at.is_none() {
            self.all_final_at = Some(Instant::now());
        }
        self.states.insert(name, status.to_owned());
    }

    fn pod_seen(&mut self, name: String) {
        if self.pods_seen.insert(name) {
            self.last_pod_at = Some(Instant::now());
        }
    }
}

struct Report {
    baseline: Duration,
    create_time: Duration,
    failed: usize,
    pods: usize,
    last_pod: Option<Duration>,
    all_final: Option<Duration>,
    max_slots: usize,
    rss_idle_kib: u64,
    rss_peak_kib: u64,
    op_idle_kib: u64,
    op_peak_kib: u64,
}

/// One phase on a fresh `terrace dev`: N runs created, watched until `done` says so.
fn phase(
    n: usize,
    limit: usize,
    kubelet: bool,
    deadline: Duration,
    done: fn(&Observed, usize) -> bool,
) -> Report {
    let tmp = tempfile::tempdir().expect("tempdir");
    let engine = write_engine(tmp.path(), PASS_ENGINE);
    let mut args = vec!["--cluster-only", "--engine", &engine];
    if !kubelet {
        args.push("--no-kubelet");
    }
    let mut dev = Dev::start_with(&args);
    // The operator and the API server as processes of their own (as in a cluster), so the
    // operator's memory is its own.
    let split = Split::start(
        &mut dev,
        &[],
        &[("TERRACE_TEST_RUN_CONCURRENCY", limit.to_string())],
    );
    let pid = dev.pid().expect("pid");
    let op_pid = split.operator.pid();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(async {
        let kc = Kubeconfig::read_from(dev.kubeconfig()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    });
    let rss_idle_kib = rss_kib(pid);
    let op_idle_kib = rss_kib(op_pid);

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

    // Watches on the runs and their Pods.
    let observed = Arc::new(Mutex::new(Observed::default()));
    let expected = n + 1;
    {
        let runs: kube::Api<TestRun> = kube::Api::namespaced(client.clone(), &org);
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, &org);
        let (o1, o2) = (observed.clone(), observed.clone());
        rt.spawn(async move {
            let _ = watcher::watcher(runs, watcher::Config::default())
                .applied_objects()
                .try_for_each(|r| {
                    let status = r
                        .status
                        .as_ref()
                        .and_then(|s| s.status.clone())
                        .unwrap_or_default();
                    let mut o = o1.lock().expect("lock");
                    if let Some(p) = r.status.as_ref().and_then(|s| s.pod_name.clone()) {
                        o.pod_seen(p);
                    }
                    o.run_seen(r.metadata.name.unwrap_or_default(), &status, expected);
                    futures::future::ready(Ok(()))
                })
                .await;
        });
        rt.spawn(async move {
            let wc = watcher::Config::default().labels("terrace.dev/test-run");
            let _ = watcher::watcher(pods, wc)
                .applied_objects()
                .try_for_each(|p| {
                    o2.lock()
                        .expect("lock")
                        .pod_seen(p.metadata.name.unwrap_or_default());
                    futures::future::ready(Ok(()))
                })
                .await;
        });
    }
    let peak = Arc::new(AtomicUsize::new(rss_idle_kib as usize));
    let op_peak = Arc::new(AtomicUsize::new(op_idle_kib as usize));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, op_peak, sampling) = (peak.clone(), op_peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
                op_peak.fetch_max(rss_kib(op_pid) as usize, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // N creates, THREADS at a time.
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let create_start = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (next, failed) = (next.clone(), failed.clone());
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

    let until = Instant::now() + deadline;
    while Instant::now() < until && !done(&observed.lock().expect("lock"), expected) {
        std::thread::sleep(Duration::from_millis(50));
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let o = observed.lock().expect("lock");
    drop(split);
    Report {
        baseline,
        create_time,
        failed: failed.load(Ordering::Relaxed),
        pods: o.pods_seen.len(),
        last_pod: (o.pods_seen.len() == expected)
            .then(|| {
                o.last_pod_at
                    .map(|at| at.saturating_duration_since(last_create))
            })
            .flatten(),
        all_final: o
            .all_final_at
            .map(|at| at.saturating_duration_since(last_create)),
        max_slots: o.max_slots,
        rss_idle_kib,
        rss_peak_kib: peak.load(Ordering::Relaxed) as u64,
        op_idle_kib,
        op_peak_kib: op_peak.load(Ordering::Relaxed) as u64,
    }
}

fn print_common(n: usize, r: &Report) {
    println!(
        "  baseline: {n} ConfigMaps created in {:.2} s",
        secs(r.baseline)
    );
    println!(
        "  creates: {n} test runs created in {:.2} s ({:.2}x baseline), failures: {}",
        secs(r.create_time),
        secs(r.create_time) / secs(r.baseline),
        r.failed
    );
}

fn print_memory(n: usize, r: &Report) {
    println!(
        "  operator RSS: idle {} MiB, peak {} MiB ({:.1} KiB per run above idle)",
        r.op_idle_kib / 1024,
        r.op_peak_kib / 1024,
        (r.op_peak_kib.saturating_sub(r.op_idle_kib)) as f64 / (n + 1) as f64
    );
    println!(
        "  cluster simulator (terrace dev --cluster-only) RSS: idle {} MiB, peak {} MiB",
        r.rss_idle_kib / 1024,
        r.rss_peak_kib / 1024
    );
}

fn main() {
    let n = env_usize("TERRACE_BENCH_RUNS", 1000);
    let limit = env_usize("TERRACE_BENCH_LIMIT", DEFAULT_LIMIT);
    let phases = std::env::var("TERRACE_BENCH_PHASES").unwrap_or_else(|_| "1,2".into());
    println!("test runs: {n} (+1 warm-up run), {THREADS} concurrent clients");

    if phases.contains('1') {
        let r = phase(n, n + 1, false, Duration::from_secs(120), |o, e| {
            o.pods_seen.len() >= e
        });
        println!("phase 1 — Pod creation (no kubelet, limit {})", n + 1);
        print_common(n, &r);
        match r.last_pod {
            Some(d) => println!(
                "  last create -> last Pod created: {:.2} s ({:.2}x budget {} s, {:.2}x baseline)",
                secs(d),
                secs(d) / secs(POD_BUDGET),
                POD_BUDGET.as_secs(),
                secs(d) / secs(r.baseline)
            ),
            None => println!("  only {} of {} Pods within 120 s", r.pods, n + 1),
        }
        print_memory(n, &r);
    }
    if phases.contains('2') {
        let r = phase(n, limit, true, Duration::from_secs(900), |o, _| {
            o.all_final_at.is_some()
        });
        println!("phase 2 — concurrency limit {limit}, Pods run by the simulator");
        print_common(n, &r);
        println!(
            "  max runs queued/running at once: {} ({:.2}x the limit {limit})",
            r.max_slots,
            r.max_slots as f64 / limit as f64
        );
        match r.all_final {
            Some(d) => println!(
                "  last create -> all runs final: {:.2} s ({:.1} runs/s, {:.2}x baseline)",
                secs(d),
                (n + 1) as f64 / secs(d + r.create_time),
                secs(d) / secs(r.baseline)
            ),
            None => println!("  not all runs were final within 900 s"),
        }
        print_memory(n, &r);
    }
}
