//! Benchmark of issue 17: costs that stay flat as the cluster grows. Every figure is
//! printed with its ratio against a baseline measured in the same run.
//!
//! **Processes** (phase `procs`): `terrace dev --cluster-only --no-kubelet` (the cluster
//! simulator), `terrace operator` and `terrace api-server` as processes of their own, as
//! in a cluster, so each one's CPU time (`/proc/PID/stat`) and RSS are its own.
//!
//! 1. CPU per workspace create: `TERRACE_SCALE_CREATES` creates (default 200) through
//!    the JSON:API, 8 clients at a time, from the first request until every created
//!    workspace is Ready and the cluster is quiet; the CPU time of all three processes
//!    divided by the creates. Measured in an empty cluster (the baseline), then with
//!    1,000, 10,000 and 50,000 workspaces in the cluster (`TERRACE_SCALE_SIZES`), into the
//!    large organization; at the largest size also into a new, empty organization.
//!    Targets: largest vs first size ≤ 1.5x; empty organization on the largest cluster vs
//!    the empty cluster ≤ 1.5x. Most workspaces are created directly through the
//!    Kubernetes API (as kubectl users and GitOps tools do, with the labels and the
//!    name-claim ConfigMap the API server would write), 32 at a time; the operator gives
//!    each its status as for any other.
//! 2. RSS per workspace of each process at every size, against the empty cluster.
//! 3. Idle CPU with the largest cluster (`TERRACE_SCALE_IDLE_SECS`, default 60 s):
//!    target under 2% of a core.
//!
//! **`terrace dev`** (phase `dev`): the data directory saved at each size is opened by
//! the whole `terrace dev` (simulator, operator and API server in one process); after
//! 20 creates through the API and a quiet spell, its RSS per workspace against an empty
//! `terrace dev` (target under 10 KiB, issue 43), and its idle CPU at the largest size.
//!
//! **Search** (phase `search`, in-process): `search[name]` and `search[wildcard-name]`
//! p50 over 1,000 and 100,000 workspaces of one organization (`TERRACE_SCALE_SEARCH`),
//! each query matching the same 10 workspaces at both sizes: target ≤ 2x.
//!
//! Run (the figures with release builds; `--profile dev` compiles faster, but then the
//! in-process search runs unoptimized):
//! `cargo build --release -p terrace && TERRACE_BIN=target/release/terrace cargo bench
//! -p terrace-tests --bench scale`. Quick run:
//! `TERRACE_SCALE_SIZES=500,2000 TERRACE_SCALE_CREATES=50 TERRACE_SCALE_IDLE_SECS=10
//! TERRACE_SCALE_SEARCH=1000,10000`; `TERRACE_SCALE_PHASES=procs,dev,search` picks phases;
//! `TERRACE_SCALE_SAVE_DIR` keeps the data directories saved at each size;
//! `TERRACE_SCALE_PERF=DIR` records a `perf` profile of each process during each point's
//! creates;
//! `TERRACE_SCALE_PHASES=dev TERRACE_SCALE_SAVED=DIR/size-10000:DIR/size-50000` runs the
//! `dev` phase alone on directories kept so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Resource;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use sha2::{Digest, Sha256};
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Workspace, WorkspaceSpec};
use terrace_tests::bench::{cpu_secs, env_usize, rss_kib};
use terrace_tests::{Api, Dev, Split};

const API_THREADS: usize = 8;
const KUBE_CONCURRENCY: usize = 32;
const BULK_ORG: &str = "bulk";

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| default.to_vec())
}
fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn kube_client(rt: &tokio::runtime::Runtime, kubeconfig: &Path) -> kube::Client {
    rt.block_on(async {
        let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    })
}

/// The cluster's latest resourceVersion (a one-item list answers it).
async fn cluster_rv(client: &kube::Client) -> String {
    let api: kube::Api<Namespace> = kube::Api::all(client.clone());
    api.list_metadata(&ListParams::default().limit(1))
        .await
        .ok()
        .and_then(|l| l.metadata.resource_version)
        .unwrap_or_default()
}

/// Waits until no write happened for a second (the operator is done).
async fn wait_quiet(client: &kube::Client, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut last = cluster_rv(client).await;
    let mut stable = 0;
    while stable < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rv = cluster_rv(client).await;
        if rv == last {
            stable += 1;
        } else {
            stable = 0;
            last = rv;
        }
    }
}

fn is_ready(w: &Workspace) -> bool {
    w.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Waits until each of the named workspaces of `ns` is Ready.
async fn wait_ready(client: &kube::Client, ns: &str, names: &[String], timeout: Duration) {
    let api: kube::Api<Workspace> = kube::Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<&String> = names.iter().collect();
    while !pending.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for n in pending {
            match api.get_opt(n).await {
                Ok(Some(w)) if is_ready(&w) => {}
                _ => still.push(n),
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        pending.is_empty(),
        "{} workspaces of {ns} not Ready",
        pending.len()
    );
}

/// Counts the Ready workspaces of `ns` (paged list).
async fn count_ready(client: &kube::Client, ns: &str) -> (usize, usize) {
    let api: kube::Api<Workspace> = kube::Api::namespaced(client.clone(), ns);
    let (mut total, mut ready) = (0, 0);
    let mut lp = ListParams::default().limit(1000);
    loop {
        let Ok(page) = api.list(&lp).await else {
            return (total, ready);
        };
        total += page.items.len();
        ready += page.items.iter().filter(|w| is_ready(w)).count();
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return (total, ready),
        }
    }
}

/// The name-claim ConfigMap the API server writes for a workspace name.
fn claim_name(name: &str) -> String {
    let digest = Sha256::digest(name.to_ascii_lowercase().as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("terrace-wsname-{hex}")
}

/// Creates workspaces `from..to` of organization `org` (namespace `org`) through the
/// Kubernetes API, each as the API server stores it: the ID and organization labels, the
/// create defaults and a name-claim ConfigMap owned by the workspace.
async fn populate(client: &kube::Client, org: &str, from: usize, to: usize) {
    let wss: kube::Api<Workspace> = kube::Api::namespaced(client.clone(), org);
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), org);
    futures::stream::iter(from..to)
        .map(|i| {
            let (wss, cms) = (wss.clone(), cms.clone());
            async move {
                let id = new_id(IdKind::Workspace);
                let mut spec = WorkspaceSpec::default_for_create();
                spec.name = format!("{org}-{i:06}");
                let ws = Workspace {
                    metadata: ObjectMeta {
                        name: Some(object_name_for_id(&id)),
                        labels: Some(BTreeMap::from([
                            (LABEL_ID.to_owned(), id.clone()),
                            (LABEL_ORGANIZATION.to_owned(), org.to_owned()),
                        ])),
                        ..ObjectMeta::default()
                    },
                    spec,
                    status: None,
                };
                // A create the client retried after a lost answer finds its own object.
                let created = match wss.create(&PostParams::default(), &ws).await {
                    Ok(w) => w,
                    Err(kube::Error::Api(s)) if s.code == 409 => wss
                        .get(&object_name_for_id(&id))
                        .await
                        .expect("get workspace"),
                    Err(e) => panic!("create workspace: {e}"),
                };
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(claim_name(&created.spec.name)),
                        labels: Some(BTreeMap::from([(
                            "terrace.dev/claim".to_owned(),
                            "workspace-name".to_owned(),
                        )])),
                        owner_references: created.controller_owner_ref(&()).map(|o| vec![o]),
                        ..ObjectMeta::default()
                    },
                    data: Some(BTreeMap::from([
                        ("name".to_owned(), created.spec.name.clone()),
                        ("workspace-id".to_owned(), id),
                    ])),
                    ..ConfigMap::default()
                };
                match cms.create(&PostParams::default(), &cm).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => panic!("create claim: {e}"),
                }
            }
        })
        .buffer_unordered(KUBE_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// CPU seconds of each process.
fn cpu_of(pids: &[u32]) -> Vec<f64> {
    pids.iter().map(|p| cpu_secs(*p)).collect()
}

/// The outcome of a batch of API creates.
struct Creates {
    /// CPU seconds per create, per process (in the order of the pids given).
    cpu_per_create: Vec<f64>,
    p50: Duration,
    p99: Duration,
    wall: Duration,
}

/// With `TERRACE_SCALE_PERF=DIR`: `perf record -g` of each process (simulator, operator,
/// API server) during the creates of a point, into `DIR/<point>-<process>.data` (read
/// with `perf report -i FILE`), to find what grows with the cluster.
fn profile_start(pids: &[u32], point: &str) -> Vec<std::process::Child> {
    let Ok(dir) = std::env::var("TERRACE_SCALE_PERF") else {
        return Vec::new();
    };
    std::fs::create_dir_all(&dir).expect("the profile folder");
    let recorders: Vec<std::process::Child> = pids
        .iter()
        .zip(["sim", "operator", "api"])
        .filter_map(|(pid, name)| {
            std::process::Command::new("perf")
                .args(["record", "-F", "499", "-g", "-p", &pid.to_string(), "-o"])
                .arg(format!("{dir}/{point}-{name}.data"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .ok()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    recorders
}

fn profile_stop(recorders: Vec<std::process::Child>) {
    for mut r in recorders {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &r.id().to_string()])
            .status();
        let _ = r.wait();
    }
}

impl Creates {
    fn total_ms(&self) -> f64 {
        self.cpu_per_create.iter().sum::<f64>() * 1000.0
    }
}

/// `n` creates through the JSON:API into `org`, `API_THREADS` at a time, measured from
/// the first request until every one is Ready and the cluster is quiet.
fn api_creates(
    rt: &tokio::runtime::Runtime,
    dev: &Dev,
    client: &kube::Client,
    pids: &[u32],
    org: &str,
    prefix: &str,
    n: usize,
) -> Creates {
    rt.block_on(wait_quiet(client, Duration::from_secs(120)));
    let profile = profile_start(pids, &format!("{org}-{prefix}"));
    let c0 = cpu_of(pids);
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let ids = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let workers: Vec<_> = (0..API_THREADS)
        .map(|_| {
            let (next, latencies, ids) = (next.clone(), latencies.clone(), ids.clone());
            let api = Api::admin(dev);
            let (org, prefix) = (org.to_owned(), prefix.to_owned());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let t = Instant::now();
                    let id = api.create_workspace(
                        &org,
                        serde_json::json!({"name": format!("{prefix}-{i:05}")}),
                    );
                    latencies.lock().expect("lock").push(t.elapsed());
                    ids.lock().expect("lock").push(object_name_for_id(&id));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let names = std::mem::take(&mut *ids.lock().expect("lock"));
    rt.block_on(async {
        wait_ready(client, org, &names, Duration::from_secs(300)).await;
        wait_quiet(client, Duration::from_secs(120)).await;
    });
    let wall = start.elapsed();
    let c1 = cpu_of(pids);
    profile_stop(profile);
    let mut lat = std::mem::take(&mut *latencies.lock().expect("lock"));
    Creates {
        cpu_per_create: c1
            .iter()
            .zip(&c0)
            .map(|(a, b)| (a - b) / n as f64)
            .collect(),
        p50: percentile(&mut lat, 0.5),
        p99: percentile(&mut lat, 0.99),
        wall,
    }
}

fn print_creates(label: &str, c: &Creates, baseline: Option<&Creates>) {
    let ratio = baseline
        .map(|b| format!("  {:.2}x baseline", c.total_ms() / b.total_ms()))
        .unwrap_or_default();
    println!(
        "  {label:<44} CPU/create {:>6.2} ms (sim {:.2}, operator {:.2}, api {:.2})  latency p50 {:.1} ms p99 {:.1} ms  wall {:.1} s{ratio}",
        c.total_ms(),
        c.cpu_per_create[0] * 1000.0,
        c.cpu_per_create[1] * 1000.0,
        c.cpu_per_create[2] * 1000.0,
        ms(c.p50),
        ms(c.p99),
        c.wall.as_secs_f64(),
    );
}

/// CPU use of each process over `secs` seconds, in % of a core.
fn idle_cpu(pids: &[u32], secs: u64) -> Vec<f64> {
    let c0 = cpu_of(pids);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let wall = t.elapsed().as_secs_f64();
    cpu_of(pids)
        .iter()
        .zip(&c0)
        .map(|(a, b)| (a - b) / wall * 100.0)
        .collect()
}

/// Waits until the process uses under 5% of a core over two seconds (at most `max`).
fn wait_cpu_quiet(pid: u32, max: Duration) {
    let deadline = Instant::now() + max;
    while Instant::now() < deadline {
        let c0 = cpu_secs(pid);
        std::thread::sleep(Duration::from_secs(2));
        if (cpu_secs(pid) - c0) / 2.0 < 0.05 {
            return;
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success(), "copying {}", from.display());
}

/// What the process phase measured at one size.
struct SizePoint {
    size: usize,
    creates: Creates,
    rss_kib: Vec<u64>,
}

/// The process phase; returns the data directories saved at each size.
fn procs_phase(sizes: &[usize], creates: usize, idle_secs: u64, saves: &Path) -> Vec<PathBuf> {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut dev = Dev::start_with(&["--cluster-only", "--no-kubelet"]);
    let Split {
        api_server,
        operator,
    } = Split::start(&mut dev, &[], &[]);
    let kubeconfig = dev.kubeconfig();
    let pids = [dev.pid().expect("pid"), operator.pid(), api_server.pid()];
    let client = kube_client(&rt, &kubeconfig);
    let api = Api::admin(&dev);

    println!("processes: terrace dev --cluster-only (sim), terrace operator, terrace api-server");
    // Baseline: creates into an empty cluster.
    api.create_org("empty0");
    rt.block_on(wait_quiet(&client, Duration::from_secs(60)));
    let rss_empty: Vec<u64> = pids.iter().map(|p| rss_kib(*p)).collect();
    let base = api_creates(&rt, &dev, &client, &pids, "empty0", "c", creates);
    let rss_base: Vec<u64> = pids.iter().map(|p| rss_kib(*p)).collect();
    print_creates("empty cluster (baseline)", &base, None);

    api.create_org(BULK_ORG);
    let mut points: Vec<SizePoint> = Vec::new();
    let mut saved = Vec::new();
    let mut in_cluster = creates;
    let mut in_bulk = 0;
    for (k, &size) in sizes.iter().enumerate() {
        let to_add = size.saturating_sub(in_cluster);
        let t = Instant::now();
        rt.block_on(populate(&client, BULK_ORG, in_bulk, in_bulk + to_add));
        in_bulk += to_add;
        in_cluster += to_add;
        let (total, ready) = rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(3600);
            loop {
                wait_quiet(&client, Duration::from_secs(600)).await;
                let (total, ready) = count_ready(&client, BULK_ORG).await;
                if ready >= total || Instant::now() > deadline {
                    break (total, ready);
                }
            }
        });
        println!(
            "  populated {to_add} workspaces through the Kubernetes API in {:.0} s ({ready}/{total} of {BULK_ORG} Ready)",
            t.elapsed().as_secs_f64()
        );
        let at = in_cluster;
        let c = api_creates(
            &rt,
            &dev,
            &client,
            &pids,
            BULK_ORG,
            &format!("s{k}"),
            creates,
        );
        in_cluster += creates;
        in_bulk += creates;
        let first = points.first().map(|p| &p.creates).unwrap_or(&base);
        print_creates(
            &format!("{at} in the cluster, into the large org"),
            &c,
            Some(first),
        );
        let rss: Vec<u64> = pids.iter().map(|p| rss_kib(*p)).collect();
        println!(
            "  RSS at {in_cluster}: sim {} MiB, operator {} MiB, api {} MiB; per workspace above the empty cluster: sim {:.1} KiB, operator {:.1} KiB, api {:.1} KiB, together {:.1} KiB",
            rss[0] / 1024,
            rss[1] / 1024,
            rss[2] / 1024,
            rss[0].saturating_sub(rss_empty[0]) as f64 / in_cluster as f64,
            rss[1].saturating_sub(rss_empty[1]) as f64 / in_cluster as f64,
            rss[2].saturating_sub(rss_empty[2]) as f64 / in_cluster as f64,
            (rss.iter().sum::<u64>()).saturating_sub(rss_empty.iter().sum::<u64>()) as f64
                / in_cluster as f64,
        );
        let save = saves.join(format!("size-{in_cluster}"));
        copy_dir(dev.dir(), &save);
        saved.push(save);
        points.push(SizePoint {
            size: at,
            creates: c,
            rss_kib: rss,
        });
    }
    let _ = rss_base;
    if let (Some(first), Some(last)) = (points.first(), points.last()) {
        println!(
            "  CPU per create at {} vs {} workspaces: {:.2}x (target <= 1.5x)",
            last.size,
            first.size,
            last.creates.total_ms() / first.creates.total_ms()
        );
        let _ = &last.rss_kib;
    }
    // Creates into a new, empty organization of the large cluster.
    api.create_org("empty1");
    let fresh = api_creates(&rt, &dev, &client, &pids, "empty1", "c", creates);
    print_creates(
        &format!("{in_cluster} in the cluster, into an empty org"),
        &fresh,
        Some(&base),
    );
    println!(
        "  CPU per create into an empty org, {in_cluster}-workspace cluster vs empty cluster: {:.2}x (target <= 1.5x)",
        fresh.total_ms() / base.total_ms()
    );
    // Idle.
    rt.block_on(wait_quiet(&client, Duration::from_secs(120)));
    std::thread::sleep(Duration::from_secs(5));
    let idle = idle_cpu(&pids, idle_secs);
    println!(
        "  idle CPU with {in_cluster} workspaces over {idle_secs} s: {:.2}% of a core (sim {:.2}%, operator {:.2}%, api {:.2}%) (target < 2%)",
        idle.iter().sum::<f64>(),
        idle[0],
        idle[1],
        idle[2]
    );
    drop((operator, api_server));
    saved
}

/// RSS of the whole `terrace dev` on a saved data directory (or a fresh one), after 20
/// creates through the API and a quiet spell; with `idle_secs`, also its idle CPU.
fn dev_on(dir: Option<&Path>, idle_secs: Option<u64>) -> (u64, Option<f64>) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dev = match dir {
        Some(d) => Dev::start_in(d),
        None => Dev::start(),
    };
    let pid = dev.pid().expect("pid");
    let client = kube_client(&rt, &dev.kubeconfig());
    // The operator and the index went through every object at start.
    wait_cpu_quiet(pid, Duration::from_secs(600));
    let api = Api::admin(&dev);
    if dir.is_none() {
        api.create_org(BULK_ORG);
    }
    // Names of this run: a directory kept from an earlier run has that run's already.
    let prefix = format!("d{}", std::process::id());
    let _ = api_creates(&rt, &dev, &client, &[pid, pid, pid], BULK_ORG, &prefix, 20);
    std::thread::sleep(Duration::from_secs(3));
    let rss = rss_kib(pid);
    let idle = idle_secs.map(|s| idle_cpu(&[pid], s)[0]);
    (rss, idle)
}

fn dev_phase(saved: &[PathBuf], idle_secs: u64) {
    println!("terrace dev (simulator, operator and API server in one process)");
    let (empty, _) = dev_on(None, None);
    println!(
        "  empty (one organization, 20 workspaces): RSS {} MiB",
        empty / 1024
    );
    for (k, dir) in saved.iter().enumerate() {
        let size: usize = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("size-"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
            + 20;
        let last = k + 1 == saved.len();
        let (rss, idle) = dev_on(Some(dir), last.then_some(idle_secs));
        let per = rss.saturating_sub(empty) as f64 / size as f64;
        println!(
            "  {size} workspaces: RSS {} MiB, {per:.1} KiB per workspace above empty ({:.2}x the 10 KiB target)",
            rss / 1024,
            per / 10.0
        );
        if let Some(idle) = idle {
            println!(
                "  idle CPU with {size} workspaces over {idle_secs} s: {idle:.2}% of a core (target < 2%)"
            );
        }
    }
}

mod search {
    //! In-process `search[name]` / `search[wildcard-name]` over one organization.

    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use kube::api::ObjectMeta;
    use terrace_api_server::{AppState, Settings, router};
    use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID};
    use terrace_crds::ids::{IdKind, new_id};
    use terrace_crds::{
        Organization, OrganizationSpec, Project, ProjectSpec, Workspace, WorkspaceSpec,
    };
    use tower::ServiceExt;

    const TEAMS: [&str; 8] = [
        "payments", "identity", "search", "ledger", "growth", "infra", "data", "mobile",
    ];
    const APPS: [&str; 8] = [
        "api", "web", "worker", "cron", "gateway", "etl", "db", "cache",
    ];
    const ENVS: [&str; 4] = ["prod", "staging", "dev", "qa"];

    /// Names of `n` workspaces: `team-app-env-NNNNNN`, of which 10 are
    /// `billing-needle-K-svc` (what every measured query matches).
    pub fn name(i: usize, n: usize) -> String {
        let step = n / 10;
        if step > 0 && i % step == step / 2 && i / step < 10 {
            return format!("billing-needle-{}-svc", i / step);
        }
        format!(
            "{}-{}-{}-{i:06}",
            TEAMS[i % 8],
            APPS[(i / 8) % 8],
            ENVS[(i / 64) % 4]
        )
    }

    pub const QUERIES: [(&str, &str); 5] = [
        ("search[name]=needle", "search%5Bname%5D=needle"),
        ("search[name]=edle-3-s", "search%5Bname%5D=edle-3-s"),
        (
            "search[wildcard-name]=billing-nee*",
            "search%5Bwildcard-name%5D=billing-nee*",
        ),
        (
            "search[wildcard-name]=*-svc",
            "search%5Bwildcard-name%5D=*-svc",
        ),
        (
            "search[wildcard-name]=*needle*",
            "search%5Bwildcard-name%5D=*needle*",
        ),
    ];

    fn workspace(ns: &str, i: usize, n: usize) -> Workspace {
        let id = new_id(IdKind::Workspace);
        let mut spec = WorkspaceSpec::default_for_create();
        spec.name = name(i, n);
        Workspace {
            metadata: ObjectMeta {
                name: Some(id.to_ascii_lowercase()),
                namespace: Some(ns.into()),
                uid: Some(format!("{ns}-uid-{i}")),
                resource_version: Some("1".into()),
                labels: Some(BTreeMap::from([(LABEL_ID.to_owned(), id)])),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    fn organization(state: &AppState, ns: &str) {
        state.index.insert(Organization {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                uid: Some(format!("{ns}-org-uid")),
                ..Default::default()
            },
            spec: OrganizationSpec {
                name: Some(ns.into()),
                ..Default::default()
            },
            status: None,
        });
        state.index.insert(Project {
            metadata: ObjectMeta {
                name: Some("default".into()),
                namespace: Some(ns.into()),
                uid: Some(format!("{ns}-prj-uid")),
                labels: Some(BTreeMap::from([
                    (LABEL_ID.to_owned(), new_id(IdKind::Project)),
                    (LABEL_DEFAULT_PROJECT.to_owned(), "true".to_owned()),
                ])),
                ..Default::default()
            },
            spec: ProjectSpec {
                name: "Default Project".into(),
                ..Default::default()
            },
            status: None,
        });
    }

    async fn p50(app: &axum::Router, uri: &str, token: &str, n: usize) -> (Duration, usize) {
        let mut out = Vec::with_capacity(n);
        let mut count = 0;
        for _ in 0..n {
            let req = Request::get(uri)
                .header("authorization", format!("Bearer {token}"))
                .body(Body::empty())
                .expect("req");
            let start = Instant::now();
            let res = app.clone().oneshot(req).await.expect("response");
            let status = res.status();
            let body = res.into_body().collect().await.expect("body").to_bytes();
            out.push(start.elapsed());
            assert_eq!(status, StatusCode::OK, "{uri}");
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            count = v["meta"]["pagination"]["total-count"]
                .as_u64()
                .unwrap_or_default() as usize;
        }
        (super::percentile(&mut out, 0.5), count)
    }

    pub fn run(sizes: &[usize]) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let sim = terrace_simulator::Simulator::open(Default::default())
                .await
                .expect("simulator");
            let token = sim.admin_token();
            let state = AppState::new(Settings::default(), sim.client());
            for &n in sizes {
                let ns = format!("org{n}");
                organization(&state, &ns);
                for i in 0..n {
                    state.index.insert(workspace(&ns, i, n));
                }
            }
            let app = router(state.clone());
            println!(
                "search (in-process, one organization, p50 of 200 requests; every query matches 10 workspaces)"
            );
            for (label, q) in QUERIES {
                let mut results = Vec::new();
                for &n in sizes {
                    let uri = format!("/api/v2/organizations/org{n}/workspaces?{q}");
                    let _ = p50(&app, &uri, &token, 20).await;
                    results.push((n, p50(&app, &uri, &token, 200).await));
                }
                let first = results[0].1.0;
                let line: Vec<String> = results
                    .iter()
                    .map(|(n, (d, count))| format!("{n}: {:>8.1?} ({count} found)", d))
                    .collect();
                let last = results.last().map(|r| r.1.0).unwrap_or(first);
                println!(
                    "  {label:<36} {}  ratio {:.2}x (target <= 2x)",
                    line.join("  "),
                    last.as_secs_f64() / first.as_secs_f64()
                );
            }
            sim.shutdown().await;
        });
    }
}

fn main() {
    let phases =
        std::env::var("TERRACE_SCALE_PHASES").unwrap_or_else(|_| "procs,dev,search".into());
    let sizes = env_list("TERRACE_SCALE_SIZES", &[1_000, 10_000, 50_000]);
    let creates = env_usize("TERRACE_SCALE_CREATES", 200);
    let idle_secs = env_usize("TERRACE_SCALE_IDLE_SECS", 60) as u64;
    let search_sizes = env_list("TERRACE_SCALE_SEARCH", &[1_000, 100_000]);
    println!(
        "issue 17 scale benchmark: sizes {sizes:?}, {creates} API creates per point ({API_THREADS} clients), binary {}",
        terrace_tests::terrace_bin().display()
    );
    // The data directories saved at each size (kept with TERRACE_SCALE_SAVE_DIR, e.g.
    // to profile `terrace dev` on one of them).
    let saves = tempfile::tempdir().expect("tempdir");
    let save_dir = std::env::var_os("TERRACE_SCALE_SAVE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| saves.path().to_path_buf());
    std::fs::create_dir_all(&save_dir).expect("save dir");
    let mut saved = Vec::new();
    if phases.contains("procs") {
        saved = procs_phase(&sizes, creates, idle_secs, &save_dir);
    } else if let Some(dirs) = std::env::var_os("TERRACE_SCALE_SAVED") {
        // Directories an earlier run saved (`size-N` each), for the `dev` phase alone.
        saved = std::env::split_paths(&dirs).collect();
    }
    if phases.contains("dev") && !saved.is_empty() {
        dev_phase(&saved, idle_secs);
    }
    if phases.contains("search") {
        search::run(&search_sizes);
    }
}
