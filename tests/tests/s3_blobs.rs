//! The S3-compatible blob store end to end: `terrace dev --blob-store s3://…` against a
//! real S3-compatible server on loopback (`moto_server`, from PyPI `moto[server]`, which
//! scripts/test installs). The terraform CLI's apply through a `cloud` block keeps its
//! state in the bucket and reads it back; module test archives land there too; a blob
//! deleted behind terrace's back is a 404 with the cause; the server stopped is a clear
//! 503 with nothing half-recorded, and once it is back the next upload works; deleting
//! a state version deletes its blobs (the finalizer); the line to the server cut in the
//! middle of a multipart upload is a 503 with nothing half-recorded.
//!
//! `terrace blobs migrate` moves the blobs of a running installation from the cluster
//! store to the bucket and back, resumably; `terrace blobs sweep` finds and removes
//! objects whose owner is gone.
//!
//! The cluster store's per-blob limit is a 413 naming the S3 option (no S3 server needed).
//!
//! Without `moto_server` on PATH each test that needs it says so and returns (CI
//! installs it).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::{
    Api, Dev, FaultProxy, Moto, PASS_ENGINE, Terraform, text, write_cloud_config, write_engine,
};

const ORG: &str = "s3org";
const BUCKET: &str = "terrace-blobs";
const PREFIX: &str = "e2e";

/// moto on a free port with a bucket, and `terrace dev` storing blobs in it.
fn start() -> Option<(Moto, Dev, Api)> {
    start_with(&[])
}

/// The S3 credentials moto takes.
const AWS_ENV: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", "test"),
    ("AWS_SECRET_ACCESS_KEY", "test"),
];

/// The blob store flags for `moto`.
fn s3_flags(moto: &Moto) -> Vec<String> {
    [
        "--blob-store",
        &format!("s3://{BUCKET}/{PREFIX}"),
        "--s3-endpoint",
        &moto.url(),
        "--s3-path-style",
        "--s3-region",
        "us-east-1",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// [`start`] with more `terrace dev` flags.
fn start_with(extra: &[&str]) -> Option<(Moto, Dev, Api)> {
    let moto = Moto::start()?;
    moto.create_bucket(BUCKET);
    let mut flags = s3_flags(&moto);
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let dev = Dev::start_with_env(&flags, AWS_ENV);
    let api = Api::admin(&dev);
    let (status, body) = api.get_text("/readyz");
    assert_eq!(status, 200, "not ready: {body}\n{}", dev.log());
    api.create_org(ORG);
    Some((moto, dev, api))
}

fn config(dir: &Path, n: usize) {
    write_cloud_config(
        dir,
        ORG,
        r#"name = "app""#,
        &format!(
            r#"
resource "terraform_data" "item" {{
  count = {n}
  input = "item-${{count.index}}"
}}

output "items" {{
  value = [for i in terraform_data.item : i.output]
}}
"#
        ),
    );
}

fn ok(out: Output, what: &str) -> String {
    let shown = text(&out);
    assert!(out.status.success(), "terraform {what} failed:\n{shown}");
    shown
}

/// The keys of the organization's state blobs in the bucket.
fn state_keys(moto: &Moto) -> Vec<String> {
    moto.keys(BUCKET, &format!("{PREFIX}/{ORG}/state-versions/"))
}

fn chunk_secrets(dev: &Dev) -> usize {
    dev.kubectl_ok(&[
        "get",
        "secrets",
        "-n",
        ORG,
        "-l",
        "terrace.dev/blob",
        "--no-headers",
    ])
    .lines()
    .count()
}

fn current_state_id(api: &Api) -> String {
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/app"));
    assert_eq!(ws.status, 200, "{:?}", ws.body);
    let id = ws.body["data"]["id"].as_str().unwrap_or_default();
    let r = api.get(&format!("/api/v2/workspaces/{id}/current-state-version"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
}

fn detail(body: &Value) -> String {
    body["errors"][0]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// apply through the `cloud` block stores the state in the bucket under
/// PREFIX/ORG/state-versions/ID/state (no chunk Secrets); state pull and a second plan
/// read it back; permanently deleting a version's data and deleting an older
/// StateVersion delete their blobs; a blob deleted behind terrace's back answers 404
/// with the cause, every time.
#[test]
fn the_cloud_block_keeps_state_in_the_bucket() {
    let Some((moto, dev, api)) = start() else {
        return;
    };
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("work dir");
    let d = dir.path().join("app");
    config(&d, 2);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let shown = ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    assert!(shown.contains("Resources: 2 added"), "{shown}");
    let first = current_state_id(&api);
    let keys = state_keys(&moto);
    let key = format!("{PREFIX}/{ORG}/state-versions/{first}/state");
    assert!(keys.contains(&key), "{key} not in {keys:?}");
    assert_eq!(chunk_secrets(&dev), 0, "state went to Secrets too");
    // The version carries the finalizer that deletes its blobs.
    let finalizers = dev.kubectl_ok(&[
        "get",
        "stateversions",
        "-n",
        ORG,
        "-o",
        "jsonpath={.items[*].metadata.finalizers}",
    ]);
    assert!(finalizers.contains("terrace.dev/blobs"), "{finalizers}");

    // Read back: the state as pulled, and a plan with no changes.
    let pulled = ok(tf.run(&d, &["state", "pull"]), "state pull");
    assert!(pulled.contains("item-1"), "{pulled}");
    let plan = tf.run(&d, &["plan", "-detailed-exitcode", "-input=false"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));

    // A second apply: a second version in the bucket.
    config(&d, 3);
    ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply 2",
    );
    let second = current_state_id(&api);
    assert_ne!(first, second);
    let pulled = ok(tf.run(&d, &["state", "pull"]), "state pull 2");
    assert!(pulled.contains("item-2"), "{pulled}");

    // Permanently deleting the first version's data (TFE's backing data action) deletes
    // its blob from the bucket.
    let r = api.post(
        &format!("/api/v2/state-versions/{first}/actions/permanently_delete_backing_data"),
        &json!({}),
    );
    assert_eq!(r.status, 204, "{:?}", r.body);
    assert!(
        !state_keys(&moto)
            .iter()
            .any(|k| k.ends_with(&format!("{first}/state"))),
        "{:?}",
        state_keys(&moto)
    );

    // A third apply; deleting the second StateVersion deletes its blobs, then the
    // object goes.
    config(&d, 4);
    ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply 3",
    );
    let (first, second) = (second, current_state_id(&api));
    assert!(state_keys(&moto).iter().any(|k| k.contains(&first)));
    let first_name = dev
        .kubectl_ok(&[
            "get",
            "stateversions",
            "-n",
            ORG,
            "-l",
            &format!("terrace.dev/id={first}"),
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .trim()
        .to_owned();
    assert!(!first_name.is_empty());
    dev.kubectl_ok(&[
        "delete",
        "stateversion",
        &first_name,
        "-n",
        ORG,
        "--wait=false",
    ]);
    let gone = dev.eventually(Duration::from_secs(30), || {
        let left = state_keys(&moto);
        let listed = dev.kubectl_ok(&["get", "stateversions", "-n", ORG, "--no-headers"]);
        (!left.iter().any(|k| k.contains(&first)) && !listed.contains(&first_name)).then_some(())
    });
    assert!(
        gone.is_some(),
        "blobs of {first}: {:?}\n{}",
        state_keys(&moto),
        dev.log()
    );
    assert!(
        state_keys(&moto).iter().any(|k| k.contains(&second)),
        "the current version's blobs went too"
    );

    // Deleted behind terrace's back: 404 naming the cause, not a 500, every time.
    moto.delete_object(
        BUCKET,
        &format!("{PREFIX}/{ORG}/state-versions/{second}/state"),
    );
    for _ in 0..2 {
        let r = api.get(&format!("/api/v2/state-versions/{second}/download"));
        assert_eq!(r.status, 404, "{:?}", r.body);
        assert!(detail(&r.body).contains("gone"), "{:?}", r.body);
    }
}

/// The S3 server stopped: uploading a state is a 503 that says the blob store is
/// unavailable, and the version is discarded (never current); the server back (with its
/// bucket), the next upload works and reads back. A module test archive lands in the
/// bucket too.
#[test]
fn an_unreachable_bucket_is_a_clear_503_and_recovers() {
    let Some((mut moto, dev, api)) = start() else {
        return;
    };
    // A module test archive: uploaded into the bucket.
    let t = api.create_module(ORG, "net", "aws");
    let cv = api.uploaded_cv(&t);
    let archives = moto.keys(BUCKET, &format!("{PREFIX}/{ORG}/configuration-versions/"));
    assert!(
        archives.iter().any(|k| k.ends_with(&cv)),
        "{cv} not in {archives:?}"
    );

    let ws_id = api.create_workspace(ORG, json!({"name": "raw"}));
    let lock = format!("/api/v2/workspaces/{ws_id}/actions/lock");
    assert_eq!(api.post(&lock, &json!({})).status, 200);
    let state = |serial: i64| {
        serde_json::to_vec(&json!({"version": 4, "serial": serial, "lineage": "l-1", "terraform_version": "1.11.4", "outputs": {}, "resources": []}))
            .unwrap_or_default()
    };
    let create = |bytes: &[u8], serial: i64| {
        let r = api.post(
            &format!("/api/v2/workspaces/{ws_id}/state-versions"),
            &json!({"data": {"type": "state-versions", "attributes": {"serial": serial, "lineage": "l-1", "md5": terrace_crds::state::md5_hex(bytes)}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
        let url = r.body["data"]["attributes"]["hosted-state-upload-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let path = url
            .find("/api/v2/")
            .map(|i| url[i..].to_owned())
            .unwrap_or_default();
        (id, path)
    };
    let (_, upload) = create(&state(1), 1);
    assert_eq!(api.put_raw(&upload, state(1)).status, 200);

    moto.stop();
    let (down_id, upload) = create(&state(2), 2);
    let started = std::time::Instant::now();
    let r = api.put_raw(&upload, state(2));
    assert_eq!(r.status, 503, "{:?}", r.body);
    assert!(
        detail(&r.body).contains("blob store is unavailable"),
        "{:?}",
        r.body
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let r = api.get(&format!("/api/v2/state-versions/{down_id}"));
    assert_eq!(
        r.body["data"]["attributes"]["status"], "discarded",
        "{:?}",
        r.body
    );
    let r = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(r.body["data"]["attributes"]["serial"], 1, "{:?}", r.body);

    // Back (moto keeps buckets in memory: the bucket is made again).
    moto.restart();
    moto.create_bucket(BUCKET);
    let (up_id, upload) = create(&state(3), 3);
    assert_eq!(api.put_raw(&upload, state(3)).status, 200, "{}", moto.log());
    let (status, body) = api.get_text(&format!("/api/v2/state-versions/{up_id}/download"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).ok(),
        serde_json::from_slice::<Value>(&state(3)).ok()
    );
    assert_eq!(chunk_secrets(&dev), 0);
}

/// A module test run's Pod fetches its configuration archive from the API, which reads
/// it from the bucket: the run finishes. Deleting the configuration version deletes
/// the archive.
#[test]
fn a_module_test_run_reads_its_archive_from_the_bucket() {
    let tools = tempfile::tempdir().expect("tempdir");
    let engine = write_engine(tools.path(), PASS_ENGINE);
    let Some((moto, dev, api)) = start_with(&["--engine", &engine]) else {
        return;
    };
    let t = api.create_module(ORG, "vpc", "aws");
    let cv = api.uploaded_cv(&t);
    let archives = moto.keys(BUCKET, &format!("{PREFIX}/{ORG}/configuration-versions/"));
    assert!(archives.iter().any(|k| k.ends_with(&cv)), "{archives:?}");
    let created = dev
        .eventually(Duration::from_secs(20), || {
            let r = api.create_test_run(&t, &cv);
            (r.status == 201).then_some(r)
        })
        .expect("a run on the uploaded configuration version");
    let id = created.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let done = dev
        .eventually(Duration::from_secs(60), || {
            let r = api.get(&format!("{t}/test-runs/{id}"));
            let a = r.body["data"]["attributes"].clone();
            matches!(
                a["status"].as_str(),
                Some("finished" | "errored" | "canceled")
            )
            .then_some(a)
        })
        .unwrap_or_else(|| panic!("run never final: {}", dev.log()));
    assert_eq!(done["status"], "finished", "{done}\n{}", dev.log());
    assert_eq!(chunk_secrets(&dev), 0);

    // Deleting the configuration version deletes its archive from the bucket (the
    // finalizer), then the object goes.
    let name = dev
        .kubectl_ok(&[
            "get",
            "configurationversions",
            "-n",
            ORG,
            "-l",
            &format!("terrace.dev/id={cv}"),
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .trim()
        .to_owned();
    let finalizers = dev.kubectl_ok(&[
        "get",
        "configurationversion",
        &name,
        "-n",
        ORG,
        "-o",
        "jsonpath={.metadata.finalizers}",
    ]);
    assert!(finalizers.contains("terrace.dev/blobs"), "{finalizers}");
    dev.kubectl_ok(&[
        "delete",
        "configurationversion",
        &name,
        "-n",
        ORG,
        "--wait=false",
    ]);
    let gone = dev.eventually(Duration::from_secs(30), || {
        let left = moto.keys(BUCKET, &format!("{PREFIX}/{ORG}/configuration-versions/"));
        let listed = dev.kubectl_ok(&["get", "configurationversions", "-n", ORG, "--no-headers"]);
        (!left.iter().any(|k| k.ends_with(&cv)) && !listed.contains(&name)).then_some(())
    });
    assert!(gone.is_some(), "archive of {cv} still there: {}", dev.log());
}

/// Runs `terrace blobs migrate --from FROM --to TO` against `dev`'s cluster.
fn migrate(dev: &Dev, moto: &Moto, from: &str, to: &str) -> String {
    let out = std::process::Command::new(terrace_tests::terrace_bin())
        .args(["blobs", "migrate", "--from", from, "--to", to])
        .args([
            "--s3-endpoint",
            &moto.url(),
            "--s3-path-style",
            "--s3-region",
            "us-east-1",
        ])
        .env("KUBECONFIG", dev.kubeconfig())
        .envs(AWS_ENV.iter().copied())
        .output()
        .expect("terrace blobs migrate");
    let shown = text(&out);
    assert!(out.status.success(), "migrate {from} -> {to}:\n{shown}");
    shown
}

/// An installation on the cluster store (a state applied by the CLI, a module archive)
/// moves to the bucket: every blob copied and verified, finalizers set; run again it
/// copies nothing (resumable); with the Secrets gone and `--blob-store s3://…` the CLI
/// reads its state from the bucket. And back to the cluster store, the same way.
#[test]
fn blobs_migrate_from_the_cluster_to_the_bucket_and_back() {
    let Some(moto) = Moto::start() else {
        return;
    };
    moto.create_bucket(BUCKET);
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let dir = tempfile::tempdir().expect("work dir");
    let d = dir.path().join("app");
    config(&d, 2);
    let tf = Terraform::for_dev(&dev);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    let sv = current_state_id(&api);
    let t = api.create_module(ORG, "net", "aws");
    let cv = api.uploaded_cv(&t);
    assert!(chunk_secrets(&dev) >= 2);
    let target = format!("s3://{BUCKET}/{PREFIX}");

    let shown = migrate(&dev, &moto, "cluster", &target);
    assert!(shown.contains("copied"), "{shown}");
    assert!(
        state_keys(&moto).contains(&format!("{PREFIX}/{ORG}/state-versions/{sv}/state")),
        "{:?}",
        state_keys(&moto)
    );
    let archives = moto.keys(BUCKET, &format!("{PREFIX}/{ORG}/configuration-versions/"));
    assert!(archives.iter().any(|k| k.ends_with(&cv)), "{archives:?}");
    let finalizers = dev.kubectl_ok(&[
        "get",
        "stateversions",
        "-n",
        ORG,
        "-o",
        "jsonpath={.items[*].metadata.finalizers}",
    ]);
    assert!(finalizers.contains("terrace.dev/blobs"), "{finalizers}");
    // Resumable: a second run finds everything in place.
    let shown = migrate(&dev, &moto, "cluster", &target);
    assert!(shown.contains(" 0 copied"), "{shown}");

    // The Secrets gone, the S3 store serves the state.
    dev.kubectl_ok(&["delete", "secrets", "-n", ORG, "-l", "terrace.dev/blob"]);
    let flags = s3_flags(&moto);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let dev = dev.restart_with(&flags, AWS_ENV);
    let tf = Terraform::for_dev(&dev);
    let pulled = ok(tf.run(&d, &["state", "pull"]), "state pull from the bucket");
    assert!(pulled.contains("item-1"), "{pulled}");

    // And back.
    let shown = migrate(&dev, &moto, &target, "cluster");
    assert!(shown.contains("copied"), "{shown}");
    let dev = dev.restart_with(&[], &[]);
    let finalizers = dev.kubectl_ok(&[
        "get",
        "stateversions",
        "-n",
        ORG,
        "-o",
        "jsonpath={.items[*].metadata.finalizers}",
    ]);
    assert!(!finalizers.contains("terrace.dev/blobs"), "{finalizers}");
    assert!(chunk_secrets(&dev) >= 2);
    let tf = Terraform::for_dev(&dev);
    let plan = tf.run(&d, &["plan", "-detailed-exitcode", "-input=false"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
}

/// An archive whose ConfigurationVersion went without its finalizer (removed by hand) is
/// an orphan: `terrace blobs sweep` lists it, `--delete` removes it, live blobs stay.
#[test]
fn the_orphan_sweep_finds_and_removes_blobs_whose_owner_is_gone() {
    let Some((moto, dev, api)) = start() else {
        return;
    };
    let t = api.create_module(ORG, "net", "aws");
    let (kept, lost) = (api.uploaded_cv(&t), api.uploaded_cv(&t));
    let name_of = |id: &str| {
        dev.kubectl_ok(&[
            "get",
            "configurationversions",
            "-n",
            ORG,
            "-l",
            &format!("terrace.dev/id={id}"),
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .trim()
        .to_owned()
    };
    let lost_name = name_of(&lost);
    dev.kubectl_ok(&[
        "patch",
        "configurationversion",
        &lost_name,
        "-n",
        ORG,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    dev.kubectl_ok(&["delete", "configurationversion", &lost_name, "-n", ORG]);
    let archives = || moto.keys(BUCKET, &format!("{PREFIX}/{ORG}/configuration-versions/"));
    assert!(
        archives().iter().any(|k| k.ends_with(&lost)),
        "{:?}",
        archives()
    );

    let sweep = |delete: bool| {
        let store = format!("s3://{BUCKET}/{PREFIX}");
        let mut cmd = std::process::Command::new(terrace_tests::terrace_bin());
        cmd.args(["blobs", "sweep", "--blob-store", &store])
            .args(["--s3-endpoint", &moto.url(), "--s3-path-style"])
            .args(["--s3-region", "us-east-1"])
            .env("KUBECONFIG", dev.kubeconfig())
            .envs(AWS_ENV.iter().copied());
        if delete {
            cmd.arg("--delete");
        }
        let out = cmd.output().expect("terrace blobs sweep");
        let shown = text(&out);
        assert!(out.status.success(), "sweep:\n{shown}");
        shown
    };
    let shown = sweep(false);
    assert!(
        shown.contains(&format!("configuration-versions/{lost}")),
        "{shown}"
    );
    assert!(!shown.contains(&kept), "{shown}");
    assert!(shown.contains("1 orphaned"), "{shown}");
    assert!(archives().iter().any(|k| k.ends_with(&lost)));
    let shown = sweep(true);
    assert!(shown.contains("deleted"), "{shown}");
    let left = archives();
    assert!(!left.iter().any(|k| k.ends_with(&lost)), "{left:?}");
    assert!(left.iter().any(|k| k.ends_with(&kept)), "{left:?}");
    assert!(sweep(false).contains("0 orphaned"));
}

/// The line to the S3 server cut in the middle of a multipart upload (a proxy drops it
/// after 12 MiB of a 24 MiB state): 503 saying the blob store is unavailable, the
/// version discarded, no object in the bucket, the current state unchanged; the line
/// back, the same upload works and reads back whole.
#[test]
fn an_upload_cut_off_midway_is_a_503_and_nothing_half_recorded() {
    let Some(moto) = Moto::start() else {
        return;
    };
    moto.create_bucket(BUCKET);
    let proxy = FaultProxy::start(moto.port);
    let store = format!("s3://{BUCKET}/{PREFIX}");
    let url = proxy.url();
    let dev = Dev::start_with_env(
        &[
            "--blob-store",
            &store,
            "--s3-endpoint",
            &url,
            "--s3-path-style",
            "--s3-region",
            "us-east-1",
            "--max-state-bytes",
            "67108864",
        ],
        AWS_ENV,
    );
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let ws_id = api.create_workspace(ORG, json!({"name": "big"}));
    let lock = format!("/api/v2/workspaces/{ws_id}/actions/lock");
    assert_eq!(api.post(&lock, &json!({})).status, 200);
    let state = |serial: i64, size: usize| {
        serde_json::to_vec(&json!({"version": 4, "serial": serial, "lineage": "l-1",
            "terraform_version": "1.11.4", "resources": [],
            "outputs": {"blob": {"value": "x".repeat(size), "type": "string"}}}))
        .unwrap_or_default()
    };
    let create = |bytes: &[u8], serial: i64| {
        let r = api.post(
            &format!("/api/v2/workspaces/{ws_id}/state-versions"),
            &json!({"data": {"type": "state-versions", "attributes": {"serial": serial, "lineage": "l-1", "md5": terrace_crds::state::md5_hex(bytes)}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
        let url = r.body["data"]["attributes"]["hosted-state-upload-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (id, url[url.find("/api/v2/").unwrap_or(0)..].to_owned())
    };
    let (_, upload) = create(&state(1, 10), 1);
    assert_eq!(api.put_raw(&upload, state(1, 10)).status, 200);

    let big = state(2, 24 << 20);
    let (cut_id, upload) = create(&big, 2);
    proxy.arm(12 << 20);
    let r = api.put_raw(&upload, big.clone());
    assert!(proxy.was_cut(), "the line was not cut");
    assert_eq!(r.status, 503, "{:?}\n{}", r.body, dev.log());
    assert!(
        detail(&r.body).contains("blob store is unavailable"),
        "{:?}",
        r.body
    );
    let r = api.get(&format!("/api/v2/state-versions/{cut_id}"));
    assert_eq!(
        r.body["data"]["attributes"]["status"], "discarded",
        "{:?}",
        r.body
    );
    let r = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(r.body["data"]["attributes"]["serial"], 1, "{:?}", r.body);
    assert!(
        !state_keys(&moto).iter().any(|k| k.contains(&cut_id)),
        "{:?}",
        state_keys(&moto)
    );

    proxy.heal();
    let (id, upload) = create(&big, 3);
    let r = api.put_raw(&upload, big.clone());
    assert_eq!(r.status, 200, "{:?}\n{}", r.body, dev.log());
    assert!(
        state_keys(&moto).contains(&format!("{PREFIX}/{ORG}/state-versions/{id}/state")),
        "{:?}",
        state_keys(&moto)
    );
    let r = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(r.body["data"]["attributes"]["serial"], 3, "{:?}", r.body);
    assert_eq!(
        r.body["data"]["attributes"]["size"],
        big.len(),
        "{:?}",
        r.body
    );
}

/// The cluster store takes no blob over 32 MiB: a larger state (allowed by
/// `--max-state-bytes`) is a 413 that names the S3 option, and its version is discarded.
#[test]
fn the_cluster_store_refuses_a_blob_over_its_limit_naming_the_s3_option() {
    let dev = Dev::start_with(&["--max-state-bytes", "67108864"]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let ws_id = api.create_workspace(ORG, json!({"name": "big"}));
    let lock = format!("/api/v2/workspaces/{ws_id}/actions/lock");
    assert_eq!(api.post(&lock, &json!({})).status, 200);
    let bytes = serde_json::to_vec(&json!({"version": 4, "serial": 1, "lineage": "l-1",
        "terraform_version": "1.11.4", "resources": [],
        "outputs": {"blob": {"value": "x".repeat(33 << 20), "type": "string"}}}))
    .unwrap_or_default();
    let r = api.post(
        &format!("/api/v2/workspaces/{ws_id}/state-versions"),
        &json!({"data": {"type": "state-versions", "attributes": {"serial": 1, "lineage": "l-1", "md5": terrace_crds::state::md5_hex(&bytes)}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let url = r.body["data"]["attributes"]["hosted-state-upload-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = api.put_raw(&url[url.find("/api/v2/").unwrap_or(0)..], bytes);
    assert_eq!(r.status, 413, "{:?}", r.body);
    assert!(
        detail(&r.body).contains("--blob-store s3://"),
        "{:?}",
        r.body
    );
    let r = api.get(&format!("/api/v2/state-versions/{id}"));
    assert_eq!(
        r.body["data"]["attributes"]["status"], "discarded",
        "{:?}",
        r.body
    );
    assert_eq!(chunk_secrets(&dev), 0);
}

/// `terrace blobs migrate` interrupted (the line to the bucket cut after the first of two
/// 1 MiB states) fails saying why; run again it copies only what is missing.
#[test]
fn blobs_migrate_resumes_after_an_interruption() {
    let Some(moto) = Moto::start() else {
        return;
    };
    moto.create_bucket(BUCKET);
    let proxy = FaultProxy::start(moto.port);
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    for name in ["one", "two"] {
        let ws_id = api.create_workspace(ORG, json!({"name": name}));
        let lock = format!("/api/v2/workspaces/{ws_id}/actions/lock");
        assert_eq!(api.post(&lock, &json!({})).status, 200);
        // Not compressible much: distinct digits.
        let value: String = (0..(1 << 20) / 8).map(|i| format!("{i:08}")).collect();
        let bytes = serde_json::to_vec(&json!({"version": 4, "serial": 1, "lineage": name,
            "terraform_version": "1.11.4", "resources": [],
            "outputs": {"blob": {"value": value, "type": "string"}}}))
        .unwrap_or_default();
        let r = api.post(
            &format!("/api/v2/workspaces/{ws_id}/state-versions"),
            &json!({"data": {"type": "state-versions", "attributes": {"serial": 1, "lineage": name, "md5": terrace_crds::state::md5_hex(&bytes)}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        let url = r.body["data"]["attributes"]["hosted-state-upload-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let r = api.put_raw(&url[url.find("/api/v2/").unwrap_or(0)..], bytes);
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    let run = || {
        let out = std::process::Command::new(terrace_tests::terrace_bin())
            .args(["blobs", "migrate", "--from", "cluster", "--to"])
            .arg(format!("s3://{BUCKET}/{PREFIX}"))
            .args(["--s3-endpoint", &proxy.url(), "--s3-path-style"])
            .args(["--s3-region", "us-east-1"])
            .env("KUBECONFIG", dev.kubeconfig())
            .envs(AWS_ENV.iter().copied())
            .output()
            .expect("terrace blobs migrate");
        (out.status.success(), text(&out))
    };
    // The probe and the first state pass, the second is cut off.
    proxy.arm(3 << 19);
    let (ok, shown) = run();
    assert!(proxy.was_cut(), "not cut: {shown}");
    assert!(!ok, "{shown}");
    assert!(shown.contains("writing"), "{shown}");
    assert_eq!(state_keys(&moto).len(), 1, "{:?}", state_keys(&moto));
    proxy.heal();
    let (ok, shown) = run();
    assert!(ok, "{shown}");
    assert!(shown.contains("1 copied, 1 already there"), "{shown}");
    assert_eq!(state_keys(&moto).len(), 2, "{:?}", state_keys(&moto));
}

/// GETs `path` with `dev`'s admin token: the status, the bytes read and whether the body
/// ended in an error (the connection cut short), with no size limit.
fn download(dev: &terrace_tests::Dev, path: &str) -> (u16, Vec<u8>, bool) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let req = ureq::http::Request::builder()
        .method("GET")
        .uri(format!("{}{path}", dev.api))
        .header("Authorization", format!("Bearer {}", dev.token))
        .body(())
        .expect("request");
    let mut res = agent.run(req).expect("HTTP round trip");
    let status = res.status().as_u16();
    let mut bytes = Vec::new();
    let failed = std::io::Read::read_to_end(&mut res.body_mut().as_reader(), &mut bytes).is_err();
    (status, bytes, failed)
}

/// A 20 MiB state (three 8 MiB parts) streams into the bucket and back through the API
/// byte for byte, with the SHA-256 the status records; its JSON form too. A streamed
/// state whose MD5 is not the version's is a 422 with nothing recorded and no object
/// left in the bucket. Bytes changed in the bucket behind terrace's back are not served
/// as the state: the download is cut off before its end (and the log says why).
#[test]
fn a_state_of_several_parts_streams_both_ways_checked_end_to_end() {
    let Some((moto, dev, api)) = start() else {
        return;
    };
    let ws_id = api.create_workspace(ORG, json!({"name": "parts"}));
    let lock = format!("/api/v2/workspaces/{ws_id}/actions/lock");
    assert_eq!(api.post(&lock, &json!({})).status, 200);
    let state = |serial: i64, fill: &str| {
        serde_json::to_vec(&json!({"version": 4, "serial": serial, "lineage": "l-1",
            "terraform_version": "1.11.4", "resources": [],
            "outputs": {"blob": {"value": fill.repeat(20 << 20), "type": "string"}}}))
        .unwrap_or_default()
    };
    let create = |md5_of: &[u8], serial: i64| {
        let r = api.post(
            &format!("/api/v2/workspaces/{ws_id}/state-versions"),
            &json!({"data": {"type": "state-versions", "attributes": {"serial": serial, "lineage": "l-1", "md5": terrace_crds::state::md5_hex(md5_of)}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
        let path = |attr: &str| {
            let url = r.body["data"]["attributes"][attr]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            url[url.find("/api/v2/").unwrap_or(0)..].to_owned()
        };
        (
            id,
            path("hosted-state-upload-url"),
            path("hosted-json-state-upload-url"),
        )
    };
    let sha = |b: &[u8]| terrace_blobstore::sha256_hex(b);

    let big = state(1, "a");
    let (id, upload, json_upload) = create(&big, 1);
    let r = api.put_raw(&upload, big.clone());
    assert_eq!(r.status, 200, "{:?}\n{}", r.body, dev.log());
    let key = format!("{PREFIX}/{ORG}/state-versions/{id}/state");
    assert!(state_keys(&moto).contains(&key), "{:?}", state_keys(&moto));
    let (status, back, failed) = download(&dev, &format!("/api/v2/state-versions/{id}/download"));
    assert_eq!((status, failed), (200, false));
    assert_eq!(back.len(), big.len());
    assert_eq!(sha(&back), sha(&big));
    let sv = dev.kubectl_ok(&[
        "get",
        "stateversions",
        "-n",
        ORG,
        "-o",
        "jsonpath={.items[*].status.state.sha256}",
    ]);
    assert!(sv.contains(&sha(&big)), "{sv}");
    assert_eq!(api.put_raw(&json_upload, big.clone()).status, 200);
    let (status, back, failed) =
        download(&dev, &format!("/api/v2/state-versions/{id}/json-download"));
    assert_eq!((status, failed, sha(&back)), (200, false, sha(&big)));

    // The MD5 of another state: refused after streaming, nothing left behind.
    let other = state(2, "b");
    let (bad_id, upload, _) = create(&big, 2);
    let r = api.put_raw(&upload, other);
    assert_eq!(r.status, 422, "{:?}", r.body);
    assert!(detail(&r.body).contains("md5"), "{:?}", r.body);
    let r = api.get(&format!("/api/v2/state-versions/{bad_id}"));
    assert_eq!(
        r.body["data"]["attributes"]["status"], "discarded",
        "{:?}",
        r.body
    );
    assert!(
        !state_keys(&moto).iter().any(|k| k.contains(&bad_id)),
        "{:?}",
        state_keys(&moto)
    );
    let r = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(r.body["data"]["attributes"]["serial"], 1, "{:?}", r.body);

    // Changed behind terrace's back (same size): never served whole.
    let mut tampered = big.clone();
    let at = tampered.len() / 2;
    tampered[at] ^= 1;
    moto.put_object(BUCKET, &key, &tampered);
    let (status, back, failed) = download(&dev, &format!("/api/v2/state-versions/{id}/download"));
    assert_eq!(status, 200, "the check comes as the bytes go by");
    assert!(failed, "the body ended normally");
    assert!(back.len() < tampered.len(), "{} bytes", back.len());
    assert!(dev.log().contains("differs"), "{}", dev.log());
}
