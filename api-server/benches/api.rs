//! `cargo bench -p terrace-api-server --bench api`: DESIGN.md §6 budgets of the workspace
//! API, each printed as a ratio against a baseline measured in the same run.
//!
//! 1. GET one workspace (auth caches warm) against a bare axum handler returning the same
//!    bytes — target ≤ 2x.
//! 2. List with a tag filter and sort, page of 20, over 100,000 workspaces of one
//!    organization — target p50 < 2 ms (ratio printed against 2 ms).
//! 3. Memory per indexed workspace (RSS growth while indexing 100,000) — target < 4 KiB.
//! 4. `search[name]` and `search[wildcard-name]` (substring, prefix, suffix) over the
//!    100,000 workspaces against the same queries over 1,000 workspaces of another
//!    organization, each matching 10 workspaces in both (issue 17) — target ≤ 2x.
//! 5. GET one workspace while the index changes between requests (as in a live cluster:
//!    the cached response is checked against the indexed objects, its current run among
//!    them), with `TERRACE_BENCH_RUNS` runs indexed (default 20,000; 20 of them the
//!    workspace's own, the rest another organization's) against the same with no runs: a
//!    workspace's current run is one lookup, not a scan of the cluster's runs — target
//!    ≤ 1.2x.
//!
//! Runs in-process against the cluster simulator (no network), so the figures measure
//! terrace's own work: routing, auth cache lookups, index reads and JSON rendering.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use http_body_util::BodyExt;
use kube::api::ObjectMeta;
use terrace_api_server::{AppState, Settings, router};
use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{
    Organization, OrganizationSpec, Project, ProjectSpec, Run, RunSpec, Workspace, WorkspaceSpec,
};
use tower::ServiceExt;

/// Workspaces indexed (`TERRACE_BENCH_WORKSPACES` overrides, e.g. to profile GET alone).
fn workspaces() -> usize {
    env_or("TERRACE_BENCH_WORKSPACES", 100_000)
}

/// GET samples (`TERRACE_BENCH_GET_SAMPLES` overrides).
fn samples() -> usize {
    env_or("TERRACE_BENCH_GET_SAMPLES", 2_000)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

async fn time_requests(app: &axum::Router, uri: &str, token: &str, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let req = Request::get(uri)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .expect("req");
        let start = Instant::now();
        let res = app.clone().oneshot(req).await.expect("response");
        let status = res.status();
        let _ = res.into_body().collect().await.expect("body");
        out.push(start.elapsed());
        assert_eq!(status, StatusCode::OK, "{uri}");
    }
    out
}

/// [`time_requests`] with an index change before each request (another organization's
/// object written again), so each GET checks its cached response against the index.
async fn time_changing(
    state: &AppState,
    app: &axum::Router,
    uri: &str,
    token: &str,
    n: usize,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        organization(state, "small");
        out.extend(time_requests(app, uri, token, 1).await);
    }
    out
}

/// The name of workspace `i` of `n`: `ws-NNNNNN`, except for ten spread evenly,
/// `billing-needle-K-svc`, which every search of case 4 matches.
fn name(i: usize, n: usize) -> String {
    let step = (n / 10).max(1);
    if i % step == step / 2 && i / step < 10 {
        format!("billing-needle-{}-svc", i / step)
    } else {
        format!("ws-{i:06}")
    }
}

fn workspace(i: usize) -> Workspace {
    workspace_in("bench", i, workspaces())
}

fn workspace_in(ns: &str, i: usize, n: usize) -> Workspace {
    let id = new_id(IdKind::Workspace);
    let mut spec = WorkspaceSpec::default_for_create();
    spec.name = name(i, n);
    spec.terraform_version = Some("1.9.8".into());
    spec.tags = match i % 100 {
        0 => vec!["rare".into(), "prod".into()],
        n if n < 50 => vec!["prod".into()],
        _ => vec!["dev".into()],
    };
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

/// Run `i` of workspace object `ws` in namespace `ns`.
fn run(ns: &str, ws: &str, i: usize) -> Run {
    let id = new_id(IdKind::Run);
    let mut r = Run::new(
        &id.to_ascii_lowercase(),
        RunSpec {
            workspace: ws.into(),
            ..Default::default()
        },
    );
    r.metadata.namespace = Some(ns.into());
    r.metadata.uid = Some(format!("{ns}-run-uid-{i}"));
    r.metadata.labels = Some(BTreeMap::from([(LABEL_ID.to_owned(), id)]));
    r
}

/// Workspaces of the small organization of case 4.
const SMALL: usize = 1_000;

/// Indexes organization `name` (namespace `name`) and its default project.
fn organization(state: &AppState, name: &str) {
    state.index.insert(Organization {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(format!("{name}-org-uid")),
            ..Default::default()
        },
        spec: OrganizationSpec {
            name: Some(name.into()),
            ..Default::default()
        },
        status: None,
    });
    state.index.insert(Project {
        metadata: ObjectMeta {
            name: Some("default".into()),
            namespace: Some(name.into()),
            uid: Some(format!("{name}-prj-uid")),
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sim = terrace_simulator::Simulator::open(Default::default())
        .await
        .expect("simulator");
    let token = sim.admin_token();
    let state = AppState::new(Settings::default(), sim.client());
    for org in ["bench", "small"] {
        organization(&state, org);
    }
    for i in 0..SMALL {
        state.index.insert(workspace_in("small", i, SMALL));
    }

    // 3. Memory per indexed workspace.
    // Objects are built inside the measured span: what an indexed workspace costs is the
    // object itself (as decoded from a watch) plus its index entries.
    let before = rss_bytes();
    let mut first_id = String::new();
    let mut first_object = String::new();
    for i in 0..workspaces() {
        let w = workspace(i);
        if i == 0 {
            first_id = w
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_ID))
                .cloned()
                .unwrap_or_default();
            first_object = w.metadata.name.clone().unwrap_or_default();
        }
        state.index.insert(w);
    }
    let after = rss_bytes();
    let per_ws = after.saturating_sub(before) as f64 / workspaces() as f64;

    let app = router(state.clone());

    // 1. GET one workspace vs a bare handler with the same bytes.
    let uri = format!("/api/v2/workspaces/{first_id}");
    let warm = time_requests(&app, &uri, &token, 50).await;
    drop(warm);
    let req = Request::get(&uri)
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .expect("req");
    let bytes = app
        .clone()
        .oneshot(req)
        .await
        .expect("res")
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let bare = axum::Router::new().route(
        "/api/v2/workspaces/{id}",
        get(move || {
            let b = bytes.clone();
            async move { ([("content-type", "application/vnd.api+json")], b) }
        }),
    );
    let mut base = time_requests(&bare, &uri, &token, samples()).await;
    let mut ours = time_requests(&app, &uri, &token, samples()).await;
    let base_p50 = percentile(&mut base, 0.5);
    let ours_p50 = percentile(&mut ours, 0.5);

    // 5. GET one workspace while the index changes, without and with many runs indexed
    // (the workspace's own and another organization's).
    let _ = time_changing(&state, &app, &uri, &token, 50).await;
    let mut no_runs = time_changing(&state, &app, &uri, &token, samples()).await;
    let no_runs_p50 = percentile(&mut no_runs, 0.5);
    let runs = env_or("TERRACE_BENCH_RUNS", 20_000);
    for i in 0..runs {
        let r = if i < 20 {
            run("bench", &first_object, i)
        } else {
            run("small", &format!("ws-{}", i % SMALL), i)
        };
        state.index.insert(r);
    }
    let _ = time_changing(&state, &app, &uri, &token, 50).await;
    let mut with_runs = time_changing(&state, &app, &uri, &token, samples()).await;
    let with_runs_p50 = percentile(&mut with_runs, 0.5);

    // 2. List with tag filter and sort, page of 20, over 100,000 workspaces.
    let list_uri = "/api/v2/organizations/bench/workspaces?search%5Btags%5D=prod&sort=-name&page%5Bsize%5D=20&page%5Bnumber%5D=3";
    let _ = time_requests(&app, list_uri, &token, 20).await;
    let mut list = time_requests(&app, list_uri, &token, 200).await;
    let list_p50 = percentile(&mut list, 0.5);
    let list_p99 = percentile(&mut list, 0.99);
    let rare_uri = "/api/v2/organizations/bench/workspaces?search%5Btags%5D=rare&sort=name";
    let mut rare = time_requests(&app, rare_uri, &token, 200).await;
    let rare_p50 = percentile(&mut rare, 0.5);

    // 4. Name searches, 100,000 vs 1,000 workspaces, 10 matches each.
    let mut searches = Vec::new();
    for (label, q) in [
        ("search[name]=needle", "search%5Bname%5D=needle"),
        (
            "search[wildcard-name]=*needle*",
            "search%5Bwildcard-name%5D=*needle*",
        ),
        (
            "search[wildcard-name]=billing-nee*",
            "search%5Bwildcard-name%5D=billing-nee*",
        ),
        (
            "search[wildcard-name]=*-svc",
            "search%5Bwildcard-name%5D=*-svc",
        ),
    ] {
        let mut p50 = Vec::new();
        for org in ["small", "bench"] {
            let uri = format!("/api/v2/organizations/{org}/workspaces?{q}");
            let _ = time_requests(&app, &uri, &token, 20).await;
            let mut t = time_requests(&app, &uri, &token, 200).await;
            p50.push(percentile(&mut t, 0.5));
        }
        searches.push((label, p50[0], p50[1]));
    }

    println!(
        "terrace api benchmark ({} workspaces in one organization)",
        workspaces()
    );
    println!(
        "GET workspace         p50 {:>9.1?}  baseline (bare axum, same bytes) p50 {:>9.1?}  ratio {:.2}x  (target <= 2x)",
        ours_p50,
        base_p50,
        ours_p50.as_secs_f64() / base_p50.as_secs_f64()
    );
    println!(
        "list tag=prod sort    p50 {:>9.1?}  p99 {:>9.1?}  ratio to 2 ms budget {:.2}  (target < 1)",
        list_p50,
        list_p99,
        list_p50.as_secs_f64() / 0.002
    );
    println!(
        "list tag=rare sort    p50 {:>9.1?}  ratio to 2 ms budget {:.2}",
        rare_p50,
        rare_p50.as_secs_f64() / 0.002
    );
    println!(
        "memory per workspace  {:>9.0} B  ratio to 4 KiB budget {:.2}  (target < 1)",
        per_ws,
        per_ws / 4096.0
    );
    println!(
        "GET workspace, index changing, {runs} runs p50 {:>9.1?}  baseline (no runs) p50 {:>9.1?}  ratio {:.2}x  (target <= 1.2x)",
        with_runs_p50,
        no_runs_p50,
        with_runs_p50.as_secs_f64() / no_runs_p50.as_secs_f64()
    );
    for (label, small, large) in searches {
        println!(
            "{label:<36} p50 {:>9.1?} over {}  baseline {:>9.1?} over {SMALL}  ratio {:.2}x  (target <= 2x)",
            large,
            workspaces(),
            small,
            large.as_secs_f64() / small.as_secs_f64()
        );
    }
}
