//! Benchmark of issue 31: history that scales, and memory per workspace through the API.
//! Every figure is printed with its ratio against a baseline taken in the same run.
//!
//! **Soak** (phase `soak`): one `terrace dev --no-kubelet` (simulator, operator and API
//! server in one process). `TERRACE_SOAK_RUNS` runs (default 10,000) across
//! `TERRACE_SOAK_WORKSPACES` workspaces (default 50) and `TERRACE_SOAK_TEST_RUNS` test runs
//! (default 5,000) across `TERRACE_SOAK_MODULES` modules (default 10) are written through
//! the Kubernetes API and ended at once (status `applied` / `finished`: the Pods never
//! run, the history controllers archive them as a busy installation's would be). The
//! organization keeps the default 100 of each. Reported:
//! - the process's RSS at half and at all runs (target: ≤ 1.2x);
//! - the objects (and their bytes) of the store: Runs, TestRuns, Secrets, ConfigMaps,
//!   against the retention setting, not the run count;
//! - every run of every workspace listed through the API in the order they were created;
//! - list p50 of a page of archived runs and show p50 of an archived run, each against
//!   the same of live ones (target ≤ 2x).
//!
//! **Memory through the API** (phase `memory`): `terrace dev --no-kubelet`, empty, then
//! `TERRACE_MEMORY_WORKSPACES` workspaces (default 15,000) created through the JSON:API
//! (8 clients); RSS rise over the empty server divided by the count (target ≤ 12 KiB),
//! beside the same count written directly through the Kubernetes API (as kubectl and
//! GitOps tools do).
//!
//! **Logs** (phase `logs`): a plan printing `TERRACE_LOG_MIB` MiB (default 50) through a
//! fake engine; its log read back through the API byte for byte; the server's RSS rise
//! while `TERRACE_LOG_READERS` (default 10) read it whole at once, against 10x the blob
//! store's part size.
//!
//! Run: `cargo build --release -p terrace && TERRACE_BIN=target/release/terrace cargo
//! bench -p terrace-tests --bench history`; `TERRACE_HISTORY_PHASES=soak,memory` picks
//! phases; a quick run: `TERRACE_SOAK_RUNS=2000 TERRACE_SOAK_TEST_RUNS=1000
//! TERRACE_MEMORY_WORKSPACES=2000`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Run, RunSpec, TestRun, TestRunSpec, Workspace, WorkspaceSpec};
use terrace_tests::bench::{env_usize, rss_kib, settle};
use terrace_tests::{Api, Dev};

const ORG: &str = "soak";
const CONCURRENCY: usize = 16;

fn kube_client(rt: &tokio::runtime::Runtime, kubeconfig: &Path) -> kube::Client {
    rt.block_on(async {
        let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    })
}

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `n` runs (or test runs) of `owners`, round robin, written and ended at once.
async fn write_runs(client: &kube::Client, owners: &[String], n: usize, tests: bool, from: usize) {
    futures::stream::iter(from..from + n)
        .map(|i| {
            let client = client.clone();
            let owner = owners[i % owners.len()].clone();
            async move {
                let (kind, status) = if tests {
                    (
                        IdKind::TestRun,
                        json!({"status": {"status": "finished", "testStatus": "pass"}}),
                    )
                } else {
                    (IdKind::Run, json!({"status": {"status": "applied"}}))
                };
                let id = new_id(kind);
                let meta = ObjectMeta {
                    name: Some(object_name_for_id(&id)),
                    labels: Some(BTreeMap::from([
                        (LABEL_ID.to_owned(), id.clone()),
                        (LABEL_ORGANIZATION.to_owned(), ORG.to_owned()),
                    ])),
                    ..ObjectMeta::default()
                };
                let name = object_name_for_id(&id);
                if tests {
                    let api: kube::Api<TestRun> = kube::Api::namespaced(client, ORG);
                    let spec: TestRunSpec = serde_json::from_value(
                        json!({"module": owner, "configurationVersion": "cv-none"}),
                    )
                    .expect("test run spec");
                    let r = TestRun {
                        metadata: meta,
                        spec,
                        status: None,
                    };
                    api.create(&PostParams::default(), &r)
                        .await
                        .expect("create test run");
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await
                        .expect("end test run");
                } else {
                    let api: kube::Api<Run> = kube::Api::namespaced(client, ORG);
                    let spec: RunSpec = serde_json::from_value(
                        json!({"workspace": owner, "configurationVersion": "cv-none"}),
                    )
                    .expect("run spec");
                    let r = Run {
                        metadata: meta,
                        spec,
                        status: None,
                    };
                    api.create(&PostParams::default(), &r)
                        .await
                        .expect("create run");
                    let mut status = status;
                    status["status"]["statusTimestamps"] =
                        json!({"plan-queueable-at": format!("2026-01-01T00:00:00.{:09}Z", i)});
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await
                        .expect("end run");
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Ends again every run and test run whose controller wrote over the ended status (the
/// controllers take a new object first): until all are final.
async fn end_stragglers(client: &kube::Client) {
    for _ in 0..30 {
        let mut left = 0;
        let runs: kube::Api<Run> = kube::Api::namespaced(client.clone(), ORG);
        for r in runs.list(&ListParams::default()).await.expect("runs").items {
            let s = r
                .status
                .as_ref()
                .and_then(|s| s.status.clone())
                .unwrap_or_default();
            if s != "applied" {
                left += 1;
                let name = r.metadata.name.clone().unwrap_or_default();
                let patch = json!({"status": {"status": "applied"}});
                let _ = runs
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        }
        let tests: kube::Api<TestRun> = kube::Api::namespaced(client.clone(), ORG);
        for r in tests
            .list(&ListParams::default())
            .await
            .expect("test runs")
            .items
        {
            let s = r
                .status
                .as_ref()
                .and_then(|s| s.status.clone())
                .unwrap_or_default();
            if s != "finished" {
                left += 1;
                let name = r.metadata.name.clone().unwrap_or_default();
                let patch = json!({"status": {"status": "finished", "testStatus": "pass"}});
                let _ = tests
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        }
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Objects and bytes (as JSON) of a kind in the organization's namespace.
async fn count<K: Resource<DynamicType = ()>>(client: &kube::Client) -> (usize, usize) {
    let ar = kube::api::ApiResource::erase::<K>(&());
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), ORG, &ar);
    let list = api.list(&ListParams::default()).await.expect("list");
    let bytes = list
        .items
        .iter()
        .map(|o| serde_json::to_vec(o).map(|v| v.len()).unwrap_or(0))
        .sum();
    (list.items.len(), bytes)
}

async fn report_store(client: &kube::Client, label: &str) {
    let runs = count::<Run>(client).await;
    let tests = count::<TestRun>(client).await;
    let secrets = count::<Secret>(client).await;
    let cms = count::<ConfigMap>(client).await;
    println!(
        "  store {label}: {} Runs ({} KiB), {} TestRuns ({} KiB), {} Secrets ({} KiB), {} ConfigMaps ({} KiB)",
        runs.0,
        runs.1 / 1024,
        tests.0,
        tests.1 / 1024,
        secrets.0,
        secrets.1 / 1024,
        cms.0,
        cms.1 / 1024
    );
}

/// Every run of `ws` through the API, page by page (newest first).
fn list_all(api: &Api, ws: &str) -> Vec<String> {
    let mut out = Vec::new();
    for page in 1.. {
        let r = api.get(&format!(
            "/api/v2/workspaces/{ws}/runs?page[size]=100&page[number]={page}"
        ));
        assert_eq!(r.status, 200, "{:?}", r.body);
        let items = r.body["data"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            break;
        }
        out.extend(
            items
                .iter()
                .map(|i| i["id"].as_str().unwrap_or_default().to_owned()),
        );
    }
    out
}

fn timed(n: usize, mut f: impl FnMut()) -> Duration {
    let samples = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    p50(samples)
}

/// Waits (up to 10 minutes) until at most `runs` Runs and `tests` TestRuns are live: the
/// history controllers caught up (each owner keeps 100 and archives in batches of 10).
fn archived_down_to(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    (runs, tests): (usize, usize),
) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (r, t) = rt.block_on(async {
            (
                count::<Run>(client).await.0,
                count::<TestRun>(client).await.0,
            )
        });
        if (r <= runs && t <= tests) || Instant::now() > deadline {
            println!("  live: {r} runs (bound {runs}), {t} test runs (bound {tests})");
            return;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn soak() {
    let runs = env_usize("TERRACE_SOAK_RUNS", 10_000);
    let wss = env_usize("TERRACE_SOAK_WORKSPACES", 50);
    let tests = env_usize("TERRACE_SOAK_TEST_RUNS", 5_000);
    let mods = env_usize("TERRACE_SOAK_MODULES", 10);
    println!(
        "soak: {runs} runs across {wss} workspaces, {tests} test runs across {mods} modules (keeping 100 of each)"
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dev = Dev::start_with(&["--no-kubelet"]);
    let pid = dev.pid().expect("pid");
    let client = kube_client(&rt, &dev.kubeconfig());
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let ws_ids: Vec<String> = (0..wss)
        .map(|i| api.create_workspace(ORG, json!({"name": format!("soak-{i:03}")})))
        .collect();
    let ws_objects: Vec<String> = ws_ids.iter().map(|id| object_name_for_id(id)).collect();
    let module_paths: Vec<String> = (0..mods)
        .map(|i| api.create_module(ORG, &format!("m{i:02}"), "aws"))
        .collect();
    let modules: kube::Api<terrace_crds::RegistryModule> =
        kube::Api::namespaced(client.clone(), ORG);
    let module_objects: Vec<String> = rt
        .block_on(modules.list(&ListParams::default()))
        .expect("modules")
        .items
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    settle(&[pid]);
    let empty = rss_kib(pid);
    let t = Instant::now();
    let bound = (wss * 110, mods * 110);
    // Runs arrive in batches the archive keeps up with, as a busy installation's do over
    // days (all at once, the live objects would peak at the run count before the
    // controllers catch up, and the allocator keeps what a peak took).
    let batch = env_usize("TERRACE_SOAK_BATCH", 1000).max(1);
    let write = |from: usize, to: usize| {
        let mut at = from;
        while at < to {
            let n = batch.min(to - at);
            let tn = n * tests / runs.max(1);
            rt.block_on(write_runs(&client, &ws_objects, n, false, at));
            rt.block_on(write_runs(
                &client,
                &module_objects,
                tn,
                true,
                at * tests / runs.max(1),
            ));
            rt.block_on(end_stragglers(&client));
            archived_down_to(&rt, &client, bound);
            at += n;
        }
    };
    write(0, runs / 2);
    settle(&[pid]);
    // The simulator keeps deleted objects in its watch history for 150 s: measured once
    // that passed, as a long-running server would be.
    std::thread::sleep(Duration::from_secs(160));
    let half = rss_kib(pid);
    write(runs / 2, runs);
    settle(&[pid]);
    std::thread::sleep(Duration::from_secs(160));
    let full = rss_kib(pid);
    println!(
        "  written and archived in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    println!(
        "  RSS: empty {} MiB, at {} runs {} MiB, at {} runs {} MiB: {:.2}x (target ≤ 1.2x)",
        empty / 1024,
        runs / 2,
        half / 1024,
        runs,
        full / 1024,
        full as f64 / half.max(1) as f64
    );
    rt.block_on(report_store(&client, "after"));

    // Every run listed, newest first (their queue times are their creation order).
    let mut listed = 0;
    for (w, ws) in ws_ids.iter().enumerate() {
        let all = list_all(&api, ws);
        assert_eq!(
            all.len(),
            runs / wss + usize::from(w < runs % wss),
            "runs of {ws}"
        );
        listed += all.len();
    }
    println!("  listed through the API: {listed} of {runs} runs, in order");
    let archived_count = dev.kubectl_ok(&[
        "get",
        "workspaces",
        "-n",
        ORG,
        "-o",
        "jsonpath={.items[0].status.archivedRuns}",
    ]);
    println!("  archived runs of the first workspace: {archived_count}");

    let ws = &ws_ids[0];
    let first = api.get(&format!("/api/v2/workspaces/{ws}/runs?page[size]=20"));
    let live_id = first.body["data"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let all = list_all(&api, ws);
    let archived_id = all.last().cloned().unwrap_or_default();
    let last_page = all.len().div_ceil(20);
    let list_live = timed(50, || {
        assert_eq!(
            api.get(&format!("/api/v2/workspaces/{ws}/runs?page[size]=20"))
                .status,
            200
        );
    });
    let list_archived = timed(50, || {
        assert_eq!(
            api.get(&format!(
                "/api/v2/workspaces/{ws}/runs?page[size]=20&page[number]={last_page}"
            ))
            .status,
            200
        );
    });
    let show_live = timed(50, || {
        assert_eq!(api.get(&format!("/api/v2/runs/{live_id}")).status, 200)
    });
    let show_archived = timed(50, || {
        assert_eq!(api.get(&format!("/api/v2/runs/{archived_id}")).status, 200)
    });
    println!(
        "  list p50: live page {:.2} ms, archived page {:.2} ms: {:.2}x (target ≤ 2x)",
        ms(list_live),
        ms(list_archived),
        ms(list_archived) / ms(list_live).max(0.001)
    );
    println!(
        "  show p50: live run {:.2} ms, archived run {:.2} ms: {:.2}x (target ≤ 2x)",
        ms(show_live),
        ms(show_archived),
        ms(show_archived) / ms(show_live).max(0.001)
    );
    let t = &module_paths[0];
    let tests_listed = api.get(&format!("{t}/test-runs?page[size]=1"));
    println!(
        "  test runs of the first module through the API: {}",
        tests_listed.body["meta"]["pagination"]["total-count"]
    );
}

/// Workspaces `0..n` of `org` written directly through the Kubernetes API.
async fn populate(client: &kube::Client, org: &str, n: usize) {
    let wss: kube::Api<Workspace> = kube::Api::namespaced(client.clone(), org);
    futures::stream::iter(0..n)
        .map(|i| {
            let wss = wss.clone();
            async move {
                let id = new_id(IdKind::Workspace);
                let mut spec = WorkspaceSpec::default_for_create();
                spec.name = format!("k-{i:06}");
                let ws = Workspace {
                    metadata: ObjectMeta {
                        name: Some(object_name_for_id(&id)),
                        labels: Some(BTreeMap::from([
                            (LABEL_ID.to_owned(), id),
                            (LABEL_ORGANIZATION.to_owned(), org.to_owned()),
                        ])),
                        ..ObjectMeta::default()
                    },
                    spec,
                    status: None,
                };
                wss.create(&PostParams::default(), &ws)
                    .await
                    .expect("create workspace");
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

fn memory() {
    let n = env_usize("TERRACE_MEMORY_WORKSPACES", 15_000);
    println!("memory per workspace: {n} workspaces in one terrace dev");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for through_api in [false, true] {
        let dev = Dev::start_with(&["--no-kubelet"]);
        let pid = dev.pid().expect("pid");
        let api = Api::admin(&dev);
        api.create_org("mem");
        settle(&[pid]);
        let empty = rss_kib(pid);
        let t = Instant::now();
        if through_api {
            let next = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        let api = Api::admin(&dev);
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if i >= n {
                                break;
                            }
                            let r = api.post(
                                "/api/v2/organizations/mem/workspaces",
                                &json!({"data": {"type": "workspaces", "attributes": {"name": format!("a-{i:06}")}}}),
                            );
                            assert_eq!(r.status, 201, "{:?}", r.body);
                        }
                    });
                }
            });
        } else {
            let client = kube_client(&rt, &dev.kubeconfig());
            rt.block_on(populate(&client, "mem", n));
        }
        settle(&[pid]);
        // The simulator keeps replaced versions for its watch history (150 s): measured
        // once that has passed, as a long-running server would be.
        std::thread::sleep(Duration::from_secs(160));
        let filled = rss_kib(pid);
        println!(
            "  {}: {n} workspaces in {:.0} s, RSS {} → {} MiB: {:.1} KiB per workspace (target ≤ 12 KiB)",
            if through_api {
                "through the JSON:API"
            } else {
                "through the Kubernetes API"
            },
            t.elapsed().as_secs_f64(),
            empty / 1024,
            filled / 1024,
            (filled.saturating_sub(empty)) as f64 / n as f64
        );
    }
}

/// A fake terraform whose plan prints `lines` numbered lines of 100 bytes.
fn long_plan_engine(dir: &Path, lines: usize) -> String {
    let script = format!(
        r#"#!/bin/sh
case "$1" in
  version) if [ "$2" = "-json" ]; then echo '{{"terraform_version":"1.11.4"}}'; else echo 'Terraform v1.11.4'; fi ;;
  init) exit 0 ;;
  plan)
    for a in "$@"; do case "$a" in -out=*) echo plan > "${{a#-out=}}" ;; esac; done
    awk -v n={lines} 'BEGIN {{ for (i = 0; i < n; i++) printf "line %09d of a long plan log ................................................................\n", i }}' ;;
  show) echo '{{"format_version":"1.2","resource_changes":[]}}' ;;
  providers) echo '{{"format_version":"1.0","provider_schemas":{{}}}}' ;;
esac
"#
    );
    terrace_tests::write_engine(dir, &script)
}

/// Logs: a plan log of `TERRACE_LOG_MIB` MiB (default 50) stored by the runner, read back
/// byte for byte, and the memory of the server while `TERRACE_LOG_READERS` readers
/// (default 10) read it whole at once, against 10x the store's part size.
fn logs() {
    let mib = env_usize("TERRACE_LOG_MIB", 50);
    let readers = env_usize("TERRACE_LOG_READERS", 10);
    let lines = mib * 1024 * 1024 / 100;
    let dir = tempfile::tempdir().expect("dir");
    let engine = long_plan_engine(dir.path(), lines);
    let dev = Dev::start_with(&["--engine", &engine]);
    let pid = dev.pid().expect("pid");
    let api = Api::admin(&dev);
    api.create_org("logs");
    let ws = api.create_workspace("logs", json!({"name": "long"}));
    let cv = api.upload_config(&ws, &[("main.tf", "# fake\n")]);
    let t = Instant::now();
    let r = api.post(
        "/api/v2/runs",
        &json!({"data": {"type": "runs", "attributes": {"plan-only": true},
            "relationships": {"workspace": {"data": {"type": "workspaces", "id": ws}},
                "configuration-version": {"data": {"type": "configuration-versions", "id": cv}}}}}),
    );
    let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let run = dev
        .eventually(Duration::from_secs(600), || {
            let run = api.get(&format!("/api/v2/runs/{id}")).body["data"].clone();
            (run["attributes"]["status"] == "planned_and_finished").then_some(run)
        })
        .expect("the plan ends");
    println!(
        "logs: a plan printing {mib} MiB ran and stored its log in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let plan = run["relationships"]["plan"]["data"]["id"]
        .as_str()
        .unwrap_or_default();
    let url = api.get(&format!("/api/v2/plans/{plan}")).body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = url[url.find("/api/v2/").expect("path")..].to_owned();
    let cli = [("X-Terraform-Integration", "cloud")];
    let (_, whole) = api.get_text_with(&path, &cli);
    let want: String = (0..lines)
        .map(|i| format!("line {i:09} of a long plan log ................................................................\n"))
        .collect();
    let start = whole.find("line 000000000").unwrap_or(0);
    let same = whole.get(start..start + want.len()) == Some(want.as_str());
    println!(
        "  read back through the API: {} bytes, the plan's output byte for byte: {same}",
        whole.len()
    );
    drop(whole);
    settle(&[pid]);
    let before = rss_kib(pid);
    let peak = std::sync::atomic::AtomicU64::new(before);
    let done = std::sync::atomic::AtomicBool::new(false);
    let t = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let readers: Vec<_> = (0..readers)
            .map(|_| {
                s.spawn(|| {
                    let api = Api::admin(&dev);
                    api.get_text_with(&path, &cli).1.len()
                })
            })
            .collect();
        for r in readers {
            let _ = r.join();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let rise = peak.into_inner().saturating_sub(before);
    let part = terrace_crds::run::logs::PART_BYTES as u64 / 1024;
    println!(
        "  {readers} readers of the whole log at once ({:.1} s): server RSS rise {} KiB; {:.1}x the part size of {} KiB (target ≤ 10x). The readers' own buffers are in the bench process, not the server's",
        t.elapsed().as_secs_f64(),
        rise,
        rise as f64 / part as f64,
        part
    );
}

fn main() {
    let phases =
        std::env::var("TERRACE_HISTORY_PHASES").unwrap_or_else(|_| "soak,memory,logs".into());
    if phases.split(',').any(|p| p == "logs") {
        logs();
    }
    if phases.split(',').any(|p| p == "soak") {
        soak();
    }
    if phases.split(',').any(|p| p == "memory") {
        memory();
    }
}
