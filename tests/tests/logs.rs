//! Logs in the blob store (issue 31, docs/runs.md "Logs"): a plan's and a test run's
//! runner stores the whole log as it runs, the API serves it byte for byte (whole and by
//! windows) with no log ConfigMap, a log past `--max-log-bytes` ends with a line saying
//! so, and a log archived the old way (a ConfigMap) still reads and is moved into the
//! blob store by `terrace blobs migrate`.

use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::{Api, Dev, write_engine};

const ORG: &str = "logorg";

/// One line of the fake engine's plan output (100 bytes with its newline).
fn line(i: usize) -> String {
    format!("line {i:09} of a long plan log {}\n", ".".repeat(64))
}

/// What the fake engine prints for a plan of `lines` lines.
fn expected(lines: usize) -> String {
    (0..lines).map(line).collect()
}

/// A fake terraform: its plan prints `lines` numbered lines of 100 bytes, its test
/// `lines` lines and a passing summary; `version`, `init`, `show -json` and `providers
/// schema -json` answer what the runner needs.
fn engine(dir: &std::path::Path, lines: usize) -> String {
    let script = format!(
        r#"#!/bin/sh
dots=................................................................
print() {{ awk -v n={lines} -v d="$dots" 'BEGIN {{ for (i = 0; i < n; i++) printf "line %09d of a long plan log %s\n", i, d }}'; }}
case "$1" in
  version) if [ "$2" = "-json" ]; then echo '{{"terraform_version":"1.11.4"}}'; else echo 'Terraform v1.11.4'; fi ;;
  init) exit 0 ;;
  plan)
    for a in "$@"; do case "$a" in -out=*) echo plan > "${{a#-out=}}" ;; esac; done
    print ;;
  show) echo '{{"format_version":"1.2","resource_changes":[]}}' ;;
  providers) echo '{{"format_version":"1.0","provider_schemas":{{}}}}' ;;
  test)
    print
    echo '{{"@level":"info","@message":"Success! 1 passed, 0 failed.","@module":"tofu.ui","type":"test_summary","test_summary":{{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0}}}}' ;;
esac
"#
    );
    write_engine(dir, &script)
}

fn start(lines: usize, extra: &[&str]) -> (Dev, Api, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("engine dir");
    let engine = engine(dir.path(), lines);
    let mut args = vec!["--engine", engine.as_str()];
    args.extend_from_slice(extra);
    let dev = Dev::start_with(&args);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    (dev, api, dir)
}

/// A plan-only run of a new workspace, once finished: its run document.
fn plan(api: &Api, name: &str) -> Value {
    let ws = api.create_workspace(ORG, json!({"name": name}));
    let cv = api.upload_config(&ws, &[("main.tf", "# the fake engine reads nothing\n")]);
    api.plan_only_run(&ws, &cv, Duration::from_secs(180))
}

/// The path of the run's plan log (its `log-read-url`).
fn plan_log_path(api: &Api, run: &Value) -> String {
    let plan = run["relationships"]["plan"]["data"]["id"]
        .as_str()
        .unwrap_or_default();
    let p = api.get(&format!("/api/v2/plans/{plan}"));
    let url = p.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    url[url.find("/api/v2/").expect("log path")..].to_owned()
}

/// The log as the terraform CLI reads it (its header: the text as the engine wrote it).
fn read(api: &Api, path: &str) -> String {
    let (status, text) = api.get_text_with(path, &[("X-Terraform-Integration", "cloud")]);
    assert_eq!(status, 200, "{text}");
    text
}

/// The log ConfigMaps of the organization (there should be none).
fn log_configmaps(dev: &Dev) -> Vec<String> {
    dev.kubectl_ok(&["get", "configmaps", "-n", ORG, "-o", "name"])
        .lines()
        .filter(|n| n.ends_with("-log"))
        .map(str::to_owned)
        .collect()
}

/// A 50 MiB plan log reads back byte for byte through the API, whole and by windows;
/// no ConfigMap holds it; a test run's log is stored the same way.
#[test]
fn a_long_plan_log_reads_back_whole_from_the_blob_store() {
    let lines = 50 * 1024 * 1024 / 100;
    let (dev, api, _dir) = start(lines, &[]);
    let run = plan(&api, "long");
    let path = plan_log_path(&api, &run);
    let log = read(&api, &path);
    assert!(log.starts_with('\u{2}') && log.ends_with('\u{3}'), "framed");
    let want = expected(lines);
    let start = log.find("line 000000000").expect("the plan's output");
    assert_eq!(
        &log[start..start + want.len()],
        want.as_str(),
        "the plan's output, byte for byte"
    );
    assert!(log.len() > want.len(), "the preamble and the frame");
    // Windows, as go-tfe reads them: in the middle, across a part boundary, at the end.
    for (offset, limit) in [
        (1_048_570, 20),
        (33 * 1024 * 1024 + 7, 65_536),
        (log.len() - 3, 100),
    ] {
        let (status, text) = api.get_text_with(
            &format!("{path}?offset={offset}&limit={limit}"),
            &[("X-Terraform-Integration", "cloud")],
        );
        assert_eq!(status, 200);
        let end = (offset + limit).min(log.len());
        assert_eq!(
            text.as_bytes(),
            &log.as_bytes()[offset..end],
            "window {offset}+{limit}"
        );
    }
    assert!(
        log_configmaps(&dev).is_empty(),
        "{:?}",
        log_configmaps(&dev)
    );

    // A test run's log too.
    let t = api.create_module(ORG, "vpc", "aws");
    let cv = api.uploaded_cv(&t);
    let r = api.create_test_run(&t, &cv);
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let ended = dev
        .eventually(Duration::from_secs(180), || {
            let r = api.get(&format!("{t}/test-runs/{id}"));
            let status = r.body["data"]["attributes"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            matches!(status.as_str(), "finished" | "errored").then_some(r.body["data"].clone())
        })
        .expect("the test run ends");
    assert_eq!(ended["attributes"]["status"], "finished", "{ended}");
    let url = ended["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default();
    let log = read(&api, &url[url.find("/api/v2/").expect("log path")..]);
    assert!(log.contains(&want), "the test run's whole log");
    assert!(
        log_configmaps(&dev).is_empty(),
        "{:?}",
        log_configmaps(&dev)
    );
}

/// Past `--max-log-bytes` a log ends with a line saying it was cut there; the run still
/// ends well.
#[test]
fn a_log_past_the_cap_ends_with_a_marker() {
    let cap = 3 * 1024 * 1024;
    let (_dev, api, _dir) = start(
        10 * 1024 * 1024 / 100,
        &["--max-log-bytes", &cap.to_string()],
    );
    let run = plan(&api, "capped");
    let log = read(&api, &plan_log_path(&api, &run));
    assert!(
        log.contains(
            "terrace: the rest of this log was not kept: it passed the limit of 3145728 bytes"
        ),
        "{}",
        &log[log.len().saturating_sub(300)..]
    );
    assert!(
        log.len() < cap + 1024,
        "cut at the cap: {} bytes",
        log.len()
    );
    assert!(log.contains(&line(1000)), "the head is kept");
}

/// A log archived before logs went to the blob store (a ConfigMap `<pod>-log`) still
/// reads, and `terrace blobs migrate --from cluster --to cluster` moves it into the blob
/// store and deletes the ConfigMap; the log reads the same afterwards.
#[test]
fn an_old_log_archive_still_reads_and_migrates() {
    let (dev, api, _dir) = start(2000, &[]);
    let run = plan(&api, "old");
    let path = plan_log_path(&api, &run);
    let stored = read(&api, &path);
    // Make it an old-style archive: the parts go, a ConfigMap holds the log.
    let id = run["id"].as_str().unwrap_or_default().to_ascii_lowercase();
    let pod = dev.kubectl_ok(&[
        "get",
        "run",
        &id,
        "-n",
        ORG,
        "-o",
        "jsonpath={.status.plan.podName}",
    ]);
    assert!(!pod.is_empty());
    let text = &stored[1..stored.len() - 1];
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).expect("gzip");
        e.finish().expect("gzip")
    };
    let secrets = dev.kubectl_ok(&["get", "secrets", "-n", ORG, "-o", "name"]);
    let blob = terrace_crds::blobs::blob_name(&terrace_crds::run::logs::part_key(&pod, 0));
    let out = dev.kubectl(&[
        "delete",
        "secrets",
        "-n",
        ORG,
        "-l",
        &format!("{}={blob}", terrace_crds::blobs::LABEL_BLOB),
    ]);
    assert!(out.status.success(), "{secrets}");
    use base64::Engine as _;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{pod}-log"), "namespace": ORG,
            "labels": {"app.kubernetes.io/managed-by": "terrace", "terrace.dev/run": run["id"]}},
        "binaryData": {"log.gz": base64::engine::general_purpose::STANDARD.encode(&gz)}});
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], &cm.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        read(&api, &path),
        stored,
        "the ConfigMap archive reads the same"
    );

    let out = std::process::Command::new(terrace_tests::terrace_bin())
        .args(["blobs", "migrate", "--from", "cluster", "--to", "cluster"])
        .env("KUBECONFIG", dev.kubeconfig())
        .output()
        .expect("terrace blobs migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("moved 1 log archives"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(log_configmaps(&dev).is_empty());
    assert_eq!(read(&api, &path), stored, "the migrated log reads the same");
}
