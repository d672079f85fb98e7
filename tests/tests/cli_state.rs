//! Workspaces holding state, driven by the real terraform CLI through a `cloud` block
//! against `terrace dev` (local execution — the organization's default execution mode is
//! set to `local` — so the CLI plans and applies and terrace stores the state and its
//! lock; remote execution is tests/cli_runs.rs). The configurations use only built-in things (`terraform_data`,
//! outputs, `terraform_remote_state`), so nothing is downloaded.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use terrace_tests::{Api, CLI_HOST, Dev, Terraform, text, write_cloud_config};

const ORG: &str = "stateorg";

/// A configuration of `n` `terraform_data` resources and three outputs (one sensitive)
/// in workspace `name`.
fn config(dir: &Path, workspaces: &str, n: usize) {
    write_cloud_config(
        dir,
        ORG,
        workspaces,
        &format!(
            r#"
variable "n" {{
  type    = number
  default = {n}
}}

resource "terraform_data" "item" {{
  count = var.n
  input = "item-${{count.index}}"
}}

output "greeting" {{
  value = "hello from ${{terraform.workspace}}"
}}

output "items" {{
  value = [for i in terraform_data.item : i.output]
}}

output "password" {{
  value     = "hunter2-${{var.n}}"
  sensitive = true
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

fn workspace(api: &Api, name: &str) -> Value {
    let r = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/{name}"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"].clone()
}

fn current_state(api: &Api, ws_id: &str) -> Value {
    let r = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"].clone()
}

/// The StateVersions of the organization, as kubectl shows them (one line each).
fn state_versions(dev: &Dev) -> Vec<String> {
    dev.kubectl_ok(&["get", "stateversions", "-n", ORG, "--no-headers"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A token of a new ServiceAccount of the organization bound to ClusterRole `role`.
fn token_for(dev: &Dev, name: &str, role: &str) -> String {
    dev.role_token(ORG, name, role)
}

fn setup() -> (Dev, Api, Terraform, tempfile::TempDir) {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    api.set_default_execution_mode(ORG, "local");
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("work dir");
    (dev, api, tf, dir)
}

/// init creates the workspace by name; apply stores the state (kubectl sees each
/// version); a second plan shows no changes; output, state list/pull/mv/rm; safe delete
/// refuses while the state has resources and deletes once destroy emptied it.
#[test]
fn the_cloud_block_whole_path() {
    let (dev, api, tf, dir) = setup();
    let d = dir.path().join("app");
    config(&d, r#"name = "app""#, 3);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let ws = workspace(&api, "app");
    let ws_id = ws["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(ws["attributes"]["resource-count"], 0);

    let shown = ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    assert!(
        shown.contains("Apply complete! Resources: 3 added"),
        "{shown}"
    );
    assert_eq!(state_versions(&dev).len(), 1);
    let cur = current_state(&api, &ws_id);
    assert_eq!(cur["attributes"]["status"], "finalized");
    assert_eq!(cur["attributes"]["serial"], 1);
    let ws = workspace(&api, "app");
    assert_eq!(ws["attributes"]["resource-count"], 3);
    assert_eq!(
        ws["attributes"]["locked"], false,
        "the CLI unlocked after writing"
    );
    assert_eq!(
        ws["relationships"]["current-state-version"]["data"]["id"],
        cur["id"]
    );

    // No changes: exit code 0 with -detailed-exitcode.
    let out = tf.run(&d, &["plan", "-detailed-exitcode", "-input=false"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Outputs (the sensitive one through its own endpoint, which the CLI reads).
    let shown = ok(tf.run(&d, &["output", "-json"]), "output");
    let outputs: Value = serde_json::from_str(&shown).unwrap_or(Value::Null);
    assert_eq!(outputs["greeting"]["value"], "hello from app", "{shown}");
    assert_eq!(
        outputs["items"]["value"],
        json!(["item-0", "item-1", "item-2"])
    );
    assert_eq!(outputs["password"]["value"], "hunter2-3");
    assert_eq!(outputs["password"]["sensitive"], true);

    // state list / pull / mv / rm.
    let shown = ok(tf.run(&d, &["state", "list"]), "state list");
    assert_eq!(shown.lines().count(), 3, "{shown}");
    let pulled: Value =
        serde_json::from_str(&ok(tf.run(&d, &["state", "pull"]), "state pull")).unwrap_or_default();
    assert_eq!(pulled["serial"], 1);
    let versions_before = state_versions(&dev).len();
    ok(
        tf.run(
            &d,
            &[
                "state",
                "mv",
                "terraform_data.item[2]",
                "terraform_data.moved",
            ],
        ),
        "state mv",
    );
    ok(
        tf.run(&d, &["state", "rm", "terraform_data.moved"]),
        "state rm",
    );
    assert_eq!(state_versions(&dev).len(), versions_before + 2);
    let cur = current_state(&api, &ws_id);
    assert_eq!(cur["attributes"]["serial"], 3);
    assert_eq!(workspace(&api, "app")["attributes"]["resource-count"], 2);
    let listing = dev.kubectl_ok(&["get", "stateversions", "-n", ORG]);
    assert!(
        listing.contains("SERIAL") && listing.contains("finalized"),
        "{listing}"
    );

    // Safe delete: 409 while the state manages resources, 204 after destroy.
    let safe = format!("/api/v2/organizations/{ORG}/workspaces/app/actions/safe-delete");
    let r = api.post(&safe, &json!({}));
    assert_eq!(r.status, 409, "{:?}", r.body);
    let shown = ok(
        tf.run(&d, &["destroy", "-auto-approve", "-input=false"]),
        "destroy",
    );
    assert!(shown.contains("Resources: 2 destroyed"), "{shown}");
    assert_eq!(workspace(&api, "app")["attributes"]["resource-count"], 0);
    let r = api.post(&safe, &json!({}));
    assert_eq!(r.status, 204, "{:?}", r.body);
    // No state content ever reached the objects or the log.
    let objects = dev.kubectl_ok(&["get", "stateversions", "-n", ORG, "-o", "yaml"]);
    assert!(!objects.contains("hunter2") && !dev.log().contains("hunter2"));
}

/// `workspaces { tags = [...] }` with `TF_WORKSPACE`; a workspace locked through the API
/// makes apply fail with the lock message; force-unlock by an admin; a reader's token
/// cannot write state; unlock answers 503 while a state version is pending.
#[test]
fn tags_locks_and_rights() {
    let (dev, api, tf, dir) = setup();
    for name in ["svc-a", "svc-b"] {
        api.create_workspace(ORG, json!({"name": name, "tag-names": ["svc"]}));
    }
    let d = dir.path().join("svc");
    config(&d, r#"tags = ["svc"]"#, 1);
    let mut init = tf.command(&d, &["init", "-input=false"]);
    init.env("TF_WORKSPACE", "svc-b");
    ok(init.output().expect("terraform"), "init with TF_WORKSPACE");
    let mut apply = tf.command(&d, &["apply", "-auto-approve", "-input=false"]);
    apply.env("TF_WORKSPACE", "svc-b");
    ok(
        apply.output().expect("terraform"),
        "apply with TF_WORKSPACE",
    );
    let b = workspace(&api, "svc-b");
    assert_eq!(b["attributes"]["resource-count"], 1);
    assert_eq!(workspace(&api, "svc-a")["attributes"]["resource-count"], 0);

    // Locked by someone else through the API: the apply fails on the lock.
    let b_id = b["id"].as_str().unwrap_or_default().to_owned();
    let locker = Api::with_token(
        &dev,
        Some(&token_for(&dev, "oncall", "terrace-workspace-locker")),
    );
    let r = locker.post(
        &format!("/api/v2/workspaces/{b_id}/actions/lock"),
        &json!({"reason": "maintenance"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let mut apply = tf.command(
        &d,
        &[
            "apply",
            "-auto-approve",
            "-input=false",
            "-lock-timeout=0s",
            "-var",
            "n=2",
        ],
    );
    apply.env("TF_WORKSPACE", "svc-b");
    let out = apply.output().expect("terraform");
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("Error acquiring the state lock"), "{shown}");
    assert_eq!(workspace(&api, "svc-b")["attributes"]["resource-count"], 1);
    // An admin force-unlocks it with the CLI (the lock ID is ORG/WORKSPACE).
    let mut unlock = tf.command(&d, &["force-unlock", "-force", &format!("{ORG}/svc-b")]);
    unlock.env("TF_WORKSPACE", "svc-b");
    ok(unlock.output().expect("terraform"), "force-unlock");
    assert_eq!(workspace(&api, "svc-b")["attributes"]["locked"], false);

    // A reader cannot write state: the CLI fails, nothing is stored.
    let reader_tf =
        Terraform::with_token(&dev, &token_for(&dev, "viewer", "terrace-workspace-reader"));
    let before = state_versions(&dev).len();
    let mut apply = reader_tf.command(
        &d,
        &["apply", "-auto-approve", "-input=false", "-var", "n=2"],
    );
    apply.env("TF_WORKSPACE", "svc-b");
    let out = apply.output().expect("terraform");
    assert!(!out.status.success(), "{}", text(&out));
    assert_eq!(state_versions(&dev).len(), before);
    assert_eq!(workspace(&api, "svc-b")["attributes"]["locked"], false);

    // Unlock waits (503) while the version written under the lock is pending.
    assert_eq!(
        api.post(
            &format!("/api/v2/workspaces/{b_id}/actions/lock"),
            &json!({})
        )
        .status,
        200
    );
    let cur = current_state(&api, &b_id);
    let serial = cur["attributes"]["serial"].as_i64().unwrap_or_default() + 1;
    let pulled = api.get_text(&format!(
        "/api/v2/state-versions/{}/download",
        cur["id"].as_str().unwrap_or_default()
    ));
    assert_eq!(pulled.0, 200);
    let mut state: Value = serde_json::from_str(&pulled.1).unwrap_or_default();
    state["serial"] = json!(serial);
    let bytes = serde_json::to_vec(&state).unwrap_or_default();
    let md5 = terrace_crds::state::md5_hex(&bytes);
    let created = api.post(
        &format!("/api/v2/workspaces/{b_id}/state-versions"),
        &json!({"data": {"type": "state-versions", "attributes": {"serial": serial, "md5": md5, "lineage": state["lineage"]}}}),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let unlock = format!("/api/v2/workspaces/{b_id}/actions/unlock");
    let r = api.post(&unlock, &json!({}));
    assert_eq!(r.status, 503, "{:?}", r.body);
    assert!(
        r.body
            .to_string()
            .contains("latest state version is still pending"),
        "{:?}",
        r.body
    );
    let url = created.body["data"]["attributes"]["hosted-state-upload-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = url
        .find("/api/v2/")
        .map(|i| url[i..].to_owned())
        .unwrap_or_default();
    assert_eq!(api.put_unauthenticated(&path, bytes), 200);
    assert_eq!(api.post(&unlock, &json!({})).status, 200);
    assert_eq!(current_state(&api, &b_id)["attributes"]["serial"], serial);
}

/// `init -migrate-state` from a local state keeps its serial and lineage; another
/// workspace reads the outputs with `terraform_remote_state`; a sensitive output is null
/// in lists and readable through its own endpoint only with read-state.
#[test]
fn migrate_remote_state_and_sensitive_outputs() {
    let (dev, api, tf, dir) = setup();
    // A local state first (no cloud block).
    let d = dir.path().join("producer");
    std::fs::create_dir_all(&d).expect("dir");
    config(&d, r#"name = "producer""#, 2);
    let main = std::fs::read_to_string(d.join("main.tf")).unwrap_or_default();
    let (cloud, rest) = main.split_at(main.find("variable").unwrap_or(0));
    std::fs::write(d.join("main.tf"), rest).expect("main.tf without cloud");
    ok(tf.run(&d, &["init", "-input=false"]), "local init");
    ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "local apply",
    );
    let local: Value = serde_json::from_str(
        &std::fs::read_to_string(d.join("terraform.tfstate")).unwrap_or_default(),
    )
    .unwrap_or_default();
    // Then the cloud block, and the state moves.
    std::fs::write(d.join("main.tf"), format!("{cloud}{rest}")).expect("main.tf with cloud");
    // With a cloud block the CLI migrates on a plain `init`, after asking (its
    // -migrate-state and -force-copy flags are for backends only).
    let mut init = tf.command(&d, &["init"]);
    init.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = init.spawn().expect("terraform");
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        let _ = stdin.write_all(b"yes\nyes\n");
    }
    ok(
        child.wait_with_output().expect("terraform"),
        "init (migrating the state)",
    );
    let ws_id = workspace(&api, "producer")["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cur = current_state(&api, &ws_id);
    let (st, remote) = api.get_text(&format!(
        "/api/v2/state-versions/{}/download",
        cur["id"].as_str().unwrap_or_default()
    ));
    assert_eq!(st, 200);
    let remote: Value = serde_json::from_str(&remote).unwrap_or_default();
    // The resources arrive as they were. (The CLI gives a workspace without state a new
    // lineage and serial 1 when it migrates: it writes what it read from the server.)
    assert_eq!(remote["resources"], local["resources"]);
    assert_eq!(cur["attributes"]["serial"], remote["serial"]);
    assert!(remote["lineage"].as_str().is_some_and(|l| !l.is_empty()));
    assert_eq!(
        workspace(&api, "producer")["attributes"]["resource-count"],
        2
    );

    // A consumer reads the producer's outputs.
    let c = dir.path().join("consumer");
    std::fs::create_dir_all(&c).expect("dir");
    std::fs::write(
        c.join("main.tf"),
        format!(
            r#"
terraform {{
  cloud {{
    hostname     = "{CLI_HOST}"
    organization = "{ORG}"
    workspaces {{
      name = "consumer"
    }}
  }}
}}

data "terraform_remote_state" "producer" {{
  backend = "remote"
  config = {{
    hostname     = "{CLI_HOST}"
    organization = "{ORG}"
    workspaces = {{
      name = "producer"
    }}
  }}
}}

output "seen" {{
  value = data.terraform_remote_state.producer.outputs.items
}}
"#
        ),
    )
    .expect("consumer main.tf");
    ok(tf.run(&c, &["init", "-input=false"]), "consumer init");
    ok(
        tf.run(&c, &["apply", "-auto-approve", "-input=false"]),
        "consumer apply",
    );
    let seen: Value = serde_json::from_str(&ok(tf.run(&c, &["output", "-json", "seen"]), "output"))
        .unwrap_or_default();
    assert_eq!(seen, json!(["item-0", "item-1"]));

    // Sensitive outputs: null in lists; their own endpoint shows them to read-state only.
    let outs = api.get(&format!(
        "/api/v2/workspaces/{ws_id}/current-state-version-outputs"
    ));
    assert_eq!(outs.status, 200);
    assert!(
        !outs.body.to_string().contains("hunter2"),
        "{:?}",
        outs.body
    );
    let password = outs.body["data"]
        .as_array()
        .and_then(|l| {
            l.iter()
                .find(|o| o["attributes"]["name"] == "password")
                .cloned()
        })
        .unwrap_or_default();
    assert_eq!(password["attributes"]["value"], Value::Null);
    let path = format!(
        "/api/v2/state-version-outputs/{}",
        password["id"].as_str().unwrap_or_default()
    );
    assert_eq!(
        api.get(&path).body["data"]["attributes"]["value"],
        "hunter2-2"
    );
    let reader = Api::with_token(
        &dev,
        Some(&token_for(&dev, "viewer", "terrace-workspace-reader")),
    );
    let r = reader.get(&path);
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["value"], Value::Null);
    assert_eq!(
        reader
            .get(&format!(
                "/api/v2/state-versions/{}/download",
                cur["id"].as_str().unwrap_or_default()
            ))
            .status,
        403
    );
    // kubectl agrees with the API on who may read state.
    let can_i = |verb: &str, user: &str| {
        let out = dev.kubectl(&[
            "auth",
            "can-i",
            verb,
            "workspaces.terrace.dev",
            "-n",
            ORG,
            "--as",
            &format!("system:serviceaccount:{ORG}:{user}"),
        ]);
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    assert!(can_i("read-outputs", "viewer"));
    assert!(!can_i("read-state", "viewer"));
    assert!(!can_i("write-state", "viewer"));
}

/// Bad uploads leave nothing half-written: a refused state is discarded with no bytes
/// stored; a version pending across a restart can still be finished.
#[test]
fn failed_uploads_and_restarts_leave_nothing_half_written() {
    let (dev, api, _tf, _dir) = setup();
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
        let url = r.body["data"]["attributes"]["hosted-state-upload-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        url.find("/api/v2/")
            .map(|i| url[i..].to_owned())
            .unwrap_or_default()
    };
    let blobs = |dev: &Dev| {
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
    };
    // Bytes that are not what the create said: 422, discarded, no blob.
    let good = state(1);
    let upload = create(&good, 1);
    assert_eq!(api.put_unauthenticated(&upload, state(2)), 422);
    assert_eq!(blobs(&dev), 0);
    let listing = dev.kubectl_ok(&["get", "stateversions", "-n", ORG, "--no-headers"]);
    assert!(listing.contains("discarded"), "{listing}");
    // Bad create bodies: 422 / 409 with JSON:API errors, nothing created.
    for (body, status) in [
        (
            json!({"data": {"type": "state-versions", "attributes": {"md5": "x"}}}),
            422,
        ),
        (
            json!({"data": {"type": "state-versions", "attributes": {"serial": "one", "md5": "x"}}}),
            422,
        ),
        (
            json!({"data": {"type": "workspaces", "attributes": {"serial": 1, "md5": "x"}}}),
            422,
        ),
        (json!([]), 400),
    ] {
        let r = api.post(&format!("/api/v2/workspaces/{ws_id}/state-versions"), &body);
        assert_eq!(r.status, status, "{body}: {:?}", r.body);
        assert!(
            r.body["errors"][0]["detail"].is_string() || r.body["errors"][0]["title"].is_string(),
            "{:?}",
            r.body
        );
    }
    assert_eq!(
        dev.kubectl_ok(&["get", "stateversions", "-n", ORG, "--no-headers"])
            .lines()
            .count(),
        1
    );
    // A version created before a restart is finished after it.
    let upload = create(&good, 1);
    let dev = dev.restart();
    let api = Api::admin(&dev);
    assert_eq!(api.put_unauthenticated(&upload, good.clone()), 200);
    let cur = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(cur.status, 200, "{:?}", cur.body);
    assert_eq!(cur.body["data"]["attributes"]["status"], "finalized");
    assert!(blobs(&dev) >= 1);
    assert_eq!(
        api.post(
            &format!("/api/v2/workspaces/{ws_id}/actions/unlock"),
            &json!({})
        )
        .status,
        200
    );
}
