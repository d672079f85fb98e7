//! Benchmark of issue 45 (VCS-driven workspaces), on `terrace dev` with a fake plan
//! engine, a real Git server on loopback (`git http-backend`) and webhooks signed as
//! GitHub signs them. Every figure against a baseline measured in the same run:
//!
//! 1. **From a push's webhook to its plan starting**, a repository of
//!    `TERRACE_VCS_REPO_KIB` KiB (default 1,024: a `main.tf` and incompressible files),
//!    fetched, archived, uploaded and queued: the median over `TERRACE_VCS_SAMPLES`
//!    workspaces (default 5; one repository each, so no run waits for another), against
//!    the budget (2 s) and against the baseline: the same archive uploaded through the
//!    API as the CLI does (create the configuration version, PUT the archive, create the
//!    run), from the first request to the plan starting.
//! 2. **Memory of a large fetch**: a repository of `TERRACE_VCS_BIG_MIB` MiB (default 100,
//!    incompressible files of 1 MiB) brought in by a webhook; the `terrace dev` process's
//!    anonymous memory (`RssAnon`, what it holds; the pack libgit2 maps from disk is
//!    file-backed and reclaimable) sampled every 20 ms from the webhook until the
//!    configuration version settles, its peak growth against the same for the small
//!    repository. (With the cluster blob store an archive over 32 MiB is refused at the
//!    upload, after the fetch and the archive: what is measured is the fetch.)
//!
//! The blob store is S3-compatible (moto) when moto is installed, else the cluster's.
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench vcs`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use terrace_tests::bench::{median, secs};
use terrace_tests::git_server::{GitServer, git, github_webhook};
use terrace_tests::{Api, Dev, PLAN_ENGINE, write_engine};

const ORG: &str = "vcsbench";
const TOKEN: &str = "bench-token";
const SECRET: &str = "bench-secret";
const BUDGET: Duration = Duration::from_secs(2);

fn env(name: &str, default: usize) -> usize {
    terrace_tests::bench::env_usize(name, default)
}

/// The anonymous memory of process `pid`, KiB.
fn rss_anon_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Files of a repository of `kib` KiB: a `main.tf` and incompressible 64 KiB files.
fn files(kib: usize, chunk_kib: usize) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![(
        "main.tf".to_owned(),
        b"resource \"terraform_data\" \"x\" {\n  input = 1\n}\n".to_vec(),
    )];
    // xorshift64: incompressible enough for zlib, and no dependency.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (kib as u64);
    for i in 0..kib.div_ceil(chunk_kib) {
        let mut bytes = Vec::with_capacity(chunk_kib << 10);
        while bytes.len() < chunk_kib << 10 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        out.push((format!("data/blob-{i:04}.bin"), bytes));
    }
    out
}

/// Pushes `files` as the first commit of bare repository `bare`; answers the SHA.
fn push(bare: &Path, files: &[(String, Vec<u8>)]) -> String {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    git(w, &["init", "-q", "-b", "main"]);
    for (name, bytes) in files {
        let p = w.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    git(w, &["add", "-A"]);
    git(w, &["commit", "-q", "-m", "bench"]);
    git(w, &["push", "-q", bare.to_str().unwrap(), "main"]);
    git(w, &["rev-parse", "HEAD"])
}

fn webhook(dev: &Dev, client: &str, repo: &str, sha: &str) {
    let payload = json!({
        "ref": "refs/heads/main", "after": sha,
        "repository": {"full_name": repo, "default_branch": "main"},
        "head_commit": {"id": sha, "message": "bench"},
        "commits": [{"added": ["main.tf"], "modified": [], "removed": []}],
        "sender": {"login": "bench"}
    });
    let url = format!("{}/webhooks/vcs/{client}", dev.api);
    let (status, answer) = github_webhook(&url, "push", &payload, SECRET);
    assert_eq!(status, 202, "webhook refused: {answer}");
}

/// Whether a run of workspace `ws` has started planning.
fn planning(api: &Api, ws: &str) -> bool {
    let runs = api.get(&format!("/api/v2/workspaces/{ws}/runs"));
    runs.body["data"].as_array().is_some_and(|l| {
        l.iter().any(|r| {
            !r["attributes"]["status-timestamps"]["planning-at"].is_null()
                || r["attributes"]["status"] == "errored"
        })
    })
}

fn wait_planning(api: &Api, ws: &str, start: Instant) -> Duration {
    loop {
        if planning(api, ws) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no plan started in workspace {ws}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() {
    let samples = env("TERRACE_VCS_SAMPLES", 5);
    let repo_kib = env("TERRACE_VCS_REPO_KIB", 1024);
    let big_mib = env("TERRACE_VCS_BIG_MIB", 100);
    let tmp = tempfile::tempdir().unwrap();
    let engine = write_engine(tmp.path(), PLAN_ENGINE);
    // An S3-compatible store (moto, when installed) takes archives of any size; the
    // cluster store refuses those over 32 MiB (after the fetch, which is what is measured).
    let moto = terrace_tests::Moto::start();
    let mut flags = vec!["--engine".to_owned(), engine];
    if let Some(m) = &moto {
        m.create_bucket("vcs-bench");
        flags.extend(
            [
                "--blob-store",
                "s3://vcs-bench/blobs",
                "--s3-endpoint",
                &m.url(),
                "--s3-path-style",
                "--s3-region",
                "us-east-1",
            ]
            .map(str::to_owned),
        );
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let dev = Dev::start_with_env(
        &flags,
        &[
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("TERRACE_MAX_UPLOAD_BYTES", "1073741824"),
        ],
    );
    println!(
        "blob store: {}",
        if moto.is_some() {
            "S3 (moto)"
        } else {
            "the cluster's Secrets (moto is not installed)"
        }
    );
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let repos = tempfile::tempdir().unwrap();
    let server = GitServer::start(repos.path(), TOKEN);
    let r = api.post(
        &format!("/api/v2/organizations/{ORG}/oauth-clients"),
        &json!({"data": {"type": "oauth-clients", "attributes": {
            "service-provider": "github", "http-url": server.url(), "api-url": server.url(),
            "oauth-token-string": TOKEN, "webhook-secret": SECRET}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let client = r.body["data"]["id"].as_str().unwrap().to_owned();
    let token_id = r.body["data"]["relationships"]["oauth-tokens"]["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let small = files(repo_kib, 64);

    // Baseline: the same archive through the API, as the CLI uploads.
    let mut bytes_archive = Vec::new();
    {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(&mut bytes_archive, flate2::Compression::fast());
        let mut tar = tar::Builder::new(&mut gz);
        for (name, bytes) in &small {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            tar.append_data(&mut h, name, bytes.as_slice()).unwrap();
        }
        tar.finish().unwrap();
        drop(tar);
        gz.flush().unwrap();
    }
    let mut uploads = Vec::new();
    for i in 0..samples {
        let ws = api.create_workspace(ORG, json!({"name": format!("upload-{i}")}));
        let start = Instant::now();
        let r = api.post(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            &json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": false}}}),
        );
        let url = r.body["data"]["attributes"]["upload-url"]
            .as_str()
            .unwrap()
            .to_owned();
        let cv = r.body["data"]["id"].as_str().unwrap().to_owned();
        let path = &url[url.find("/api/v2/").unwrap()..];
        assert_eq!(api.put_unauthenticated(path, bytes_archive.clone()), 200);
        api.queue(&ws, Some(&cv), json!({}));
        uploads.push(wait_planning(&api, &ws, start));
    }

    // Webhooks: one repository and workspace each.
    let mut pushes = Vec::new();
    for i in 0..samples {
        let identifier = format!("acme/r{i}");
        let bare = server.create_repo(&identifier);
        let sha = push(&bare, &small);
        let ws = api.create_workspace(
            ORG,
            json!({"name": format!("vcs-{i}"), "queue-all-runs": true,
                "vcs-repo": {"identifier": identifier, "oauth-token-id": token_id}}),
        );
        let start = Instant::now();
        webhook(&dev, &client, &identifier, &sha);
        pushes.push(wait_planning(&api, &ws, start));
    }
    let (up, hook) = (median(uploads.clone()), median(pushes.clone()));
    println!(
        "webhook to plan start, {repo_kib} KiB repository: median {:.3} s over {samples} \
         (each: {:?}); budget {:.1} s: {:.2}x of it",
        secs(hook),
        pushes
            .iter()
            .map(|d| format!("{:.3}", secs(*d)))
            .collect::<Vec<_>>(),
        secs(BUDGET),
        secs(hook) / secs(BUDGET)
    );
    println!(
        "baseline, the same archive uploaded through the API then a run: median {:.3} s; \
         webhook / upload: {:.2}x",
        secs(up),
        secs(hook) / secs(up)
    );

    // Memory of a fetch: a small repository, then a big one.
    let pid = dev.pid().expect("terrace dev's pid");
    let mut growth = Vec::new();
    for (name, mib_files) in [
        ("small", files(repo_kib, 64)),
        ("big", files(big_mib << 10, 1024)),
    ] {
        let identifier = format!("acme/mem-{name}");
        let bare = server.create_repo(&identifier);
        let sha = push(&bare, &mib_files);
        let ws = api.create_workspace(
            ORG,
            json!({"name": format!("mem-{name}"), "queue-all-runs": true,
                "vcs-repo": {"identifier": identifier, "oauth-token-id": token_id}}),
        );
        std::thread::sleep(Duration::from_secs(2));
        let before = rss_anon_kib(pid);
        let mut peak = before;
        let start = Instant::now();
        webhook(&dev, &client, &identifier, &sha);
        let outcome = loop {
            peak = peak.max(rss_anon_kib(pid));
            let cvs = api.get(&format!("/api/v2/workspaces/{ws}/configuration-versions"));
            let status = cvs.body["data"][0]["attributes"]["status"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            if status == "uploaded" || status == "errored" {
                let why = cvs.body["data"][0]["attributes"]["error-message"].clone();
                break format!(
                    "{status} {}",
                    if why.is_null() {
                        String::new()
                    } else {
                        why.to_string()
                    }
                );
            }
            if start.elapsed() > Duration::from_secs(300) {
                let failed: Vec<String> = dev
                    .log()
                    .lines()
                    .filter(|l| l.contains("VCS ingress failed"))
                    .map(str::to_owned)
                    .collect();
                break format!("no configuration version within 300 s: {failed:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let grew = peak.saturating_sub(before);
        println!(
            "{name} repository ({} files, {} MiB): RssAnon {} MiB before, peak +{} MiB \
             during the fetch ({:.1} s); the version: {outcome}",
            mib_files.len(),
            mib_files.iter().map(|(_, b)| b.len()).sum::<usize>() >> 20,
            before >> 10,
            grew >> 10,
            secs(start.elapsed()),
        );
        growth.push(grew);
    }
    println!(
        "peak memory growth of the {big_mib} MiB fetch: {} MiB, {:.2}x the repository's size \
         (the {repo_kib} KiB one's: {} KiB)",
        growth[1] >> 10,
        growth[1] as f64 / (big_mib << 10) as f64,
        growth[0]
    );
}
