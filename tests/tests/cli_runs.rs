//! Remote execution (docs/runs.md): plan and apply runs in Pods, driven by the real
//! terraform CLI through a `cloud` block on `remote`-mode workspaces (the default) and by
//! the runs API, against `terrace dev` whose Pods run the real terraform as the engine.
//! The configurations use only built-in things (`terraform_data`, `local-exec`), so
//! nothing is downloaded.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terrace_tests::{
    Api, CLI_HOST, Dev, Terraform, targz, terraform_path, text, write_cloud_config,
};

const ORG: &str = "runorg";

fn config(dir: &Path, workspace: &str, body: &str) {
    write_cloud_config(
        dir,
        ORG,
        &format!(r#"name = "{workspace}""#),
        &format!(
            r#"{body}
"#
        ),
    );
}

const ITEMS: &str = r#"
variable "n" {
  type    = number
  default = 2
}

resource "terraform_data" "item" {
  count = var.n
  input = "item-${count.index}"
}

output "items" {
  value = [for i in terraform_data.item : i.output]
}
"#;

fn ok(out: Output, what: &str) -> String {
    let shown = text(&out);
    assert!(out.status.success(), "terraform {what} failed:\n{shown}");
    shown
}

/// Runs `terraform args` answering its prompt with `answer`.
fn answering(tf: &Terraform, dir: &Path, args: &[&str], answer: &str) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = tf
        .command(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("terraform");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(format!("{answer}\n").as_bytes());
    }
    child.wait_with_output().expect("terraform ends")
}

fn setup() -> (Dev, Api, Terraform, tempfile::TempDir) {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("work dir");
    (dev, api, tf, dir)
}

fn workspace(api: &Api, name: &str) -> Value {
    let r = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/{name}"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"].clone()
}

/// The runs of a workspace, newest first.
fn runs(api: &Api, ws_id: &str) -> Vec<Value> {
    let r = api.get(&format!("/api/v2/workspaces/{ws_id}/runs?page[size]=100"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"].as_array().cloned().unwrap_or_default()
}

/// Waits until workspace `name` is unlocked (the operator releases a run's lock when the
/// run ends); fails with `why` otherwise.
fn wait_unlocked(dev: &Dev, api: &Api, name: &str, why: &str) {
    let unlocked = dev.eventually(Duration::from_secs(30), || {
        (workspace(api, name)["attributes"]["locked"] == false).then_some(())
    });
    assert!(unlocked.is_some(), "{why}");
}

fn status(run: &Value) -> &str {
    run["attributes"]["status"].as_str().unwrap_or_default()
}

/// `terraform plan` streams the plan from its Pod; `apply -auto-approve` applies and
/// stores the state (local `state list` through the same workspace sees it); `apply`
/// answered "no" discards, "yes" applies; `destroy`; `-target` and `-replace`; the
/// workspace's lock is the run's while it applies and free after.
#[test]
fn plan_apply_discard_and_destroy_from_the_cli() {
    let (dev, api, tf, dir) = setup();
    let d = dir.path().join("app");
    config(&d, "app", ITEMS);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let ws = workspace(&api, "app");
    let ws_id = ws["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(ws["attributes"]["execution-mode"], "remote");

    let shown = ok(tf.run(&d, &["plan", "-input=false"]), "plan");
    assert!(shown.contains("Running plan in"), "{shown}");
    assert!(
        shown.contains("Plan: 2 to add, 0 to change, 0 to destroy."),
        "{shown}"
    );
    let all = runs(&api, &ws_id);
    assert_eq!(all.len(), 1);
    assert_eq!(status(&all[0]), "planned_and_finished");
    assert_eq!(all[0]["attributes"]["plan-only"], true);

    let shown = ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    assert!(
        shown.contains("Apply complete! Resources: 2 added"),
        "{shown}"
    );
    assert!(shown.contains("item-1"), "{shown}");
    let listed = ok(tf.run(&d, &["state", "list"]), "state list");
    assert!(listed.contains("terraform_data.item[1]"), "{listed}");
    let shown = dev.kubectl_ok(&["get", "runs", "-n", ORG]);
    assert!(shown.contains("applied"), "{shown}");
    let cur = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(cur.status, 200);
    assert_eq!(cur.body["data"]["attributes"]["serial"], 1);
    let run_id = runs(&api, &ws_id)[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        cur.body["data"]["relationships"]["run"]["data"]["id"],
        run_id.as_str()
    );
    let ws = workspace(&api, "app");
    assert_eq!(ws["attributes"]["locked"], false);
    assert_eq!(
        ws["relationships"]["current-run"]["data"]["id"],
        run_id.as_str()
    );

    // The plan's and the apply's logs stay readable through their capability URLs.
    let plan = api.get(&format!("/api/v2/runs/{run_id}/plan"));
    let url = plan.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (st, log) = Api::with_token(&dev, None).get_text(&url[url.find("/api/v2/").unwrap_or(0)..]);
    assert_eq!(st, 200);
    assert!(log.contains("Plan: 2 to add"), "{log}");
    assert!(log.ends_with('\u{3}'), "a final log ends with ETX");

    // "no" discards; the CLI says so and fails.
    config(&d, "app", &ITEMS.replace("default = 2", "default = 3"));
    let out = answering(&tf, &d, &["apply"], "no");
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("Apply discarded."), "{shown}");
    assert_eq!(status(&runs(&api, &ws_id)[0]), "discarded");
    // The operator releases the discarded run's lock.
    wait_unlocked(
        &dev,
        &api,
        "app",
        "the workspace stayed locked after the discard",
    );

    // "yes" applies.
    let out = answering(&tf, &d, &["apply"], "yes");
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("Apply complete! Resources: 1 added"),
        "{shown}"
    );

    // -replace and -target reach the engine.
    let shown = ok(
        tf.run(
            &d,
            &[
                "apply",
                "-auto-approve",
                "-input=false",
                "-replace=terraform_data.item[0]",
            ],
        ),
        "apply -replace",
    );
    assert!(
        shown.contains("Resources: 1 added, 0 changed, 1 destroyed"),
        "{shown}"
    );
    let run = &runs(&api, &ws_id)[0];
    assert_eq!(
        run["attributes"]["replace-addrs"],
        json!(["terraform_data.item[0]"])
    );
    config(&d, "app", &ITEMS.replace("default = 2", "default = 1"));
    let shown = ok(
        tf.run(
            &d,
            &[
                "apply",
                "-auto-approve",
                "-input=false",
                "-target=terraform_data.item[2]",
            ],
        ),
        "apply -target",
    );
    assert!(
        shown.contains("Resources: 0 added, 0 changed, 1 destroyed"),
        "{shown}"
    );

    let shown = ok(
        tf.run(&d, &["destroy", "-auto-approve", "-input=false"]),
        "destroy",
    );
    assert!(
        shown.contains("Resources: 0 added, 0 changed, 2 destroyed"),
        "{shown}"
    );
    assert_eq!(runs(&api, &ws_id)[0]["attributes"]["is-destroy"], true);
    let listed = ok(tf.run(&d, &["state", "list"]), "state list");
    assert!(listed.trim().is_empty(), "{listed}");
}

/// Ctrl-C during a slow apply cancels the run: the engine stops gracefully in its Pod,
/// what it created is in the state, the run ends canceled and the lock is released.
#[test]
fn ctrl_c_cancels_a_slow_apply() {
    let (dev, api, tf, dir) = setup();
    let d = dir.path().join("slow");
    config(
        &d,
        "slow",
        r#"
resource "terraform_data" "fast" {}
resource "terraform_data" "slow" {
  depends_on = [terraform_data.fast]
  provisioner "local-exec" {
    command = "sleep 60"
  }
}
"#,
    );
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let ws_id = workspace(&api, "slow")["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let child = tf
        .command(&d, &["apply", "-auto-approve", "-input=false"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terraform apply");
    let applying = dev.eventually(Duration::from_secs(60), || {
        runs(&api, &ws_id)
            .first()
            .filter(|r| status(r) == "applying")
            .cloned()
    });
    assert!(applying.is_some(), "the run never started applying");
    // Wait until the fast resource exists, then interrupt the CLI.
    std::thread::sleep(Duration::from_secs(3));
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().expect("terraform apply ends");
    let shown = text(&out);
    assert!(shown.contains("successfully cancelled"), "{shown}");
    let end = dev.eventually(Duration::from_secs(90), || {
        runs(&api, &ws_id)
            .first()
            .filter(|r| status(r) == "canceled")
            .cloned()
    });
    assert!(
        end.is_some(),
        "the run did not end canceled: {:?}",
        runs(&api, &ws_id)
    );
    wait_unlocked(&dev, &api, "slow", "the workspace stayed locked");
    let listed = ok(tf.run(&d, &["state", "list"]), "state list");
    assert!(listed.contains("terraform_data.fast"), "{listed}");
}

/// The run's `status.message`, as kubectl shows it.
fn run_message(dev: &Dev, id: &str) -> String {
    dev.kubectl_ok(&[
        "get",
        "run",
        &id.to_ascii_lowercase(),
        "-n",
        ORG,
        "-o",
        "jsonpath={.status.message}",
    ])
}

fn wait_status(dev: &Dev, api: &Api, id: &str, want: &[&str]) -> Value {
    dev.eventually(Duration::from_secs(120), || {
        let r = api.run(id);
        want.contains(&status(&r)).then_some(r)
    })
    .unwrap_or_else(|| {
        let message = run_message(dev, id);
        panic!(
            "run {id} never reached {want:?} ({message}): {:?}",
            api.run(id)
        )
    })
}

const SLOW_FILES: &[(&str, &str)] = &[(
    "main.tf",
    "resource \"terraform_data\" \"x\" {\n  input = timestamp()\n  provisioner \"local-exec\" {\n    command = \"sleep 1\"\n  }\n}\n",
)];

/// Through the API: three auto-apply runs on one workspace run one after another; a
/// plan-only run does not wait behind a run waiting for confirmation; a locked
/// workspace holds runs until it is unlocked; destroy runs are refused with
/// `allow-destroy-plan: false`; actions outside their states are 409.
#[test]
fn queueing_locks_and_rules_through_the_api() {
    let (dev, api, _tf, _dir) = setup();
    let ws_id = api.create_workspace(ORG, json!({"name": "queued", "auto-apply": true}));
    let cv = api.upload_config_with(&ws_id, json!({"speculative": false}), SLOW_FILES);
    let ids: Vec<String> = (0..3)
        .map(|_| api.create_run(&ws_id, Some(&cv), json!({})).expect("run"))
        .collect();
    // One at a time: never two of them between plan_queued and applying.
    let start = Instant::now();
    loop {
        let states: Vec<String> = ids.iter().map(|i| status(&api.run(i)).to_owned()).collect();
        let active = states
            .iter()
            .filter(|s| {
                !matches!(
                    s.as_str(),
                    "pending"
                        | "applied"
                        | "errored"
                        | "canceled"
                        | "discarded"
                        | "planned_and_finished"
                )
            })
            .count();
        assert!(active <= 1, "two runs active at once: {states:?}");
        if states.iter().all(|s| s == "applied") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "runs did not finish: {states:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // In creation order: each applied before the next one started planning.
    let at = |id: &str, key: &str| -> k8s_openapi::jiff::Timestamp {
        let r = api.run(id);
        r["attributes"]["status-timestamps"][key]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{key} of {r}"))
    };
    for w in ids.windows(2) {
        assert!(
            at(&w[0], "applied-at") <= at(&w[1], "planning-at"),
            "out of order"
        );
    }

    // A run waiting for confirmation holds the workspace; a plan-only run goes past it.
    let manual = api
        .create_run(&ws_id, Some(&cv), json!({"auto-apply": false}))
        .expect("run");
    wait_status(&dev, &api, &manual, &["planned"]);
    let spec_cv = api.upload_config_with(&ws_id, json!({"speculative": true}), SLOW_FILES);
    let plan_only = api
        .create_run(&ws_id, Some(&spec_cv), json!({}))
        .expect("plan-only run");
    let done = wait_status(&dev, &api, &plan_only, &["planned_and_finished"]);
    assert_eq!(done["attributes"]["plan-only"], true);
    let shown = api.run(&manual);
    assert_eq!(shown["attributes"]["actions"]["is-confirmable"], true);
    let r = api.post(&format!("/api/v2/runs/{manual}/actions/cancel"), &json!({}));
    assert_eq!(
        r.status, 409,
        "a planned run is not cancelable: {:?}",
        r.body
    );
    let r = api.post(&format!("/api/v2/runs/{manual}/actions/apply"), &json!({}));
    assert_eq!(r.status, 202, "{:?}", r.body);
    wait_status(&dev, &api, &manual, &["applied"]);
    // Who confirmed it (go-tfe dereferences `confirmed-by` of a confirmed run).
    let confirmed = api.get(&format!("/api/v2/runs/{manual}"));
    assert_eq!(
        confirmed.body["data"]["relationships"]["confirmed-by"]["data"]["type"], "users",
        "{:?}",
        confirmed.body
    );
    assert_eq!(
        confirmed.body["data"]["relationships"]["confirmed-by"]["data"]["id"],
        confirmed.body["data"]["relationships"]["created-by"]["data"]["id"],
    );
    let r = api.post(
        &format!("/api/v2/runs/{manual}/actions/discard"),
        &json!({}),
    );
    assert_eq!(r.status, 409, "{:?}", r.body);

    // A locked workspace holds the queue until it is unlocked.
    let r = api.post(
        &format!("/api/v2/workspaces/{ws_id}/actions/lock"),
        &json!({"reason": "maintenance"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let held = api.create_run(&ws_id, Some(&cv), json!({})).expect("run");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(status(&api.run(&held)), "pending");
    let r = api.post(
        &format!("/api/v2/workspaces/{ws_id}/actions/unlock"),
        &json!({}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    wait_status(&dev, &api, &held, &["applied"]);

    // allow-destroy-plan false refuses destroy runs.
    let r = api.call(
        "PATCH",
        &format!("/api/v2/workspaces/{ws_id}"),
        Some(&json!({"data": {"type": "workspaces", "attributes": {"allow-destroy-plan": false}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let refused = api
        .create_run(&ws_id, Some(&cv), json!({"is-destroy": true}))
        .expect_err("422");
    assert_eq!(refused["status"], 422, "{refused}");

    // The CLI's queue and capacity reads answer; kubectl shows the runs.
    let q = api.get(&format!("/api/v2/organizations/{ORG}/runs/queue"));
    assert_eq!(q.status, 200, "{:?}", q.body);
    let c = api.get(&format!("/api/v2/organizations/{ORG}/capacity"));
    assert_eq!(c.status, 200, "{:?}", c.body);
    assert_eq!(c.body["data"]["attributes"]["running"], 0);
    let shown = dev.kubectl_ok(&["get", "runs", "-n", ORG]);
    assert_eq!(shown.matches("applied").count(), 5, "{shown}");

    // Performance attributes and the current run, from the runs themselves.
    let other = api.create_workspace(ORG, json!({"name": "idle"}));
    let ws = dev
        .eventually(Duration::from_secs(30), || {
            let w = workspace(&api, "queued");
            (w["attributes"]["workspace-kpis-runs-count"] == 5).then_some(w)
        })
        .unwrap_or_else(|| panic!("{:?}", workspace(&api, "queued")));
    assert_eq!(ws["attributes"]["run-failures"], 0);
    assert!(
        ws["attributes"]["plan-duration-average"]
            .as_i64()
            .unwrap_or(0)
            > 0,
        "{ws}"
    );
    assert!(
        ws["attributes"]["apply-duration-average"]
            .as_i64()
            .unwrap_or(0)
            > 0,
        "{ws}"
    );
    assert_eq!(
        ws["relationships"]["current-run"]["data"]["id"],
        held.as_str()
    );
    let listed = api.get(&format!(
        "/api/v2/organizations/{ORG}/workspaces?filter%5Bcurrent-run%5D%5Bstatus%5D=applied"
    ));
    let names: Vec<&str> = listed.body["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|w| w["attributes"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, ["queued"], "{:?}", listed.body);
    let sorted = api.get(&format!(
        "/api/v2/organizations/{ORG}/workspaces?sort=-current-run.created-at"
    ));
    assert_eq!(sorted.body["data"][0]["id"], ws_id.as_str());
    assert_eq!(sorted.body["data"][1]["id"], other.as_str());
}

/// `auto-destroy-at` in the past queues one destroy run (by the operator, with an
/// Event), which applies and empties the state.
#[test]
fn auto_destroy_queues_one_destroy_run() {
    let (dev, api, _tf, _dir) = setup();
    let ws_id = api.create_workspace(ORG, json!({"name": "ephemeral", "auto-apply": true}));
    let cv = api.upload_config_with(
        &ws_id,
        json!({"speculative": false}),
        &[("main.tf", "resource \"terraform_data\" \"x\" {}\n")],
    );
    let first = api.create_run(&ws_id, Some(&cv), json!({})).expect("run");
    wait_status(&dev, &api, &first, &["applied"]);
    let past = "2020-01-01T00:00:00Z";
    let r = api.call(
        "PATCH",
        &format!("/api/v2/workspaces/{ws_id}"),
        Some(&json!({"data": {"type": "workspaces", "attributes": {"auto-destroy-at": past}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let destroy = dev
        .eventually(Duration::from_secs(60), || {
            runs(&api, &ws_id)
                .into_iter()
                .find(|r| r["attributes"]["is-destroy"] == true)
        })
        .expect("a destroy run is queued");
    let id = destroy["id"].as_str().unwrap_or_default().to_owned();
    wait_status(&dev, &api, &id, &["applied"]);
    let cur = api.get(&format!("/api/v2/workspaces/{ws_id}/current-state-version"));
    assert_eq!(cur.body["data"]["attributes"]["resources-processed"], true);
    let ws = workspace(&api, "ephemeral");
    assert_eq!(ws["attributes"]["resource-count"], 0, "{ws}");
    std::thread::sleep(Duration::from_secs(2));
    let destroys = runs(&api, &ws_id)
        .iter()
        .filter(|r| r["attributes"]["is-destroy"] == true)
        .count();
    assert_eq!(destroys, 1, "queued once");
    let events = dev.kubectl_ok(&["get", "events.events.k8s.io", "-n", ORG, "-o", "json"]);
    assert!(events.contains("AutoDestroyQueued"), "{events}");
    // The run and auto-destroy controllers' reconciles are counted like every other
    // controller's.
    let metrics = ureq::get(&format!("{}/metrics", dev.api))
        .call()
        .expect("metrics")
        .body_mut()
        .read_to_string()
        .expect("metrics text");
    for controller in ["run", "auto-destroy"] {
        let counted = metrics.lines().any(|l| {
            l.starts_with(&format!(
                r#"terrace_reconciles_total{{controller="{controller}"}}"#
            )) && !l.ends_with(" 0")
        });
        assert!(counted, "no reconciles of {controller} in\n{metrics}");
    }
}

/// Workspace variables reach the run: terraform ones (plain, HCL, sensitive), env ones;
/// the CLI's own `-var` wins over the workspace's.
#[test]
fn workspace_variables_reach_the_run() {
    let (_dev, api, tf, dir) = setup();
    let ws_id = api.create_workspace(ORG, json!({"name": "vars"}));
    for (key, value, category, hcl, sensitive) in [
        ("region", "eu-west-1", "terraform", false, false),
        ("sizes", "[1, 2, 3]", "terraform", true, false),
        ("password", "hunter2", "terraform", false, true),
        (
            "TF_VAR_from_env",
            "set in the environment",
            "env",
            false,
            false,
        ),
        ("owner", "the workspace", "terraform", false, false),
    ] {
        let r = api.post(
            &format!("/api/v2/workspaces/{ws_id}/vars"),
            &json!({"data": {"type": "vars", "attributes": {
                "key": key, "value": value, "category": category, "hcl": hcl, "sensitive": sensitive}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let d = dir.path().join("vars");
    config(
        &d,
        "vars",
        r#"
variable "region" { type = string }
variable "sizes" { type = list(number) }
variable "password" {
  type      = string
  sensitive = true
}
variable "from_env" { type = string }
variable "owner" { type = string }
resource "terraform_data" "x" {
  input = "${var.region}/${sum(var.sizes)}/${var.from_env}/${var.owner}"
}
output "shown" { value = terraform_data.x.output }
output "secret" {
  value     = var.password
  sensitive = true
}
"#,
    );
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let shown = ok(
        tf.run(
            &d,
            &[
                "apply",
                "-auto-approve",
                "-input=false",
                "-var",
                "owner=the CLI",
            ],
        ),
        "apply",
    );
    assert!(
        shown.contains("eu-west-1/6/set in the environment/the CLI"),
        "{shown}"
    );
    assert!(
        !shown.contains("hunter2"),
        "a sensitive value in the log: {shown}"
    );
    let secret = ok(tf.run(&d, &["output", "-raw", "secret"]), "output");
    assert_eq!(secret, "hunter2");
}

/// A workspace asking for another engine version than the Pod's fails its run with the
/// reason, which the CLI prints.
#[test]
fn engine_version_mismatch_is_said() {
    let (_dev, api, tf, dir) = setup();
    api.create_workspace(ORG, json!({"name": "old", "terraform-version": "~> 1.5.0"}));
    let d = dir.path().join("old");
    config(&d, "old", ITEMS);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let out = tf.run(&d, &["plan", "-input=false"]);
    let shown = text(&out);
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("Engine version mismatch"), "{shown}");
    assert!(shown.contains("~> 1.5.0"), "{shown}");
    // Issue 40 §7: the runner's failure line is said once, not again by the API.
    assert_eq!(
        shown.matches("Engine version mismatch").count(),
        1,
        "{shown}"
    );
}

/// A workspace's `working-directory`: the CLI uploads the parent directory and the run
/// plans and applies in the subdirectory.
#[test]
fn working_directory() {
    let (_dev, api, tf, dir) = setup();
    api.create_workspace(
        ORG,
        json!({"name": "nested", "working-directory": "envs/dev"}),
    );
    let root = dir.path().join("repo");
    let d = root.join("envs/dev");
    config(&d, "nested", ITEMS);
    std::fs::write(root.join("shared.txt"), "from the parent directory").expect("file");
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let shown = ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    assert!(
        shown.contains("Apply complete! Resources: 2 added"),
        "{shown}"
    );
}

/// An upload with `auto-queue-runs` queues a run of the workspace (once); a speculative
/// one a plan-only run.
#[test]
fn uploads_with_auto_queue_runs_queue_a_run() {
    let (dev, api, _tf, _dir) = setup();
    let ws_id = api.create_workspace(ORG, json!({"name": "auto"}));
    let r = api.post(
        &format!("/api/v2/workspaces/{ws_id}/configuration-versions"),
        &json!({"data": {"type": "configuration-versions", "attributes": {}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["auto-queue-runs"], true);
    let url = r.body["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = &url[url.find("/api/v2/").expect("upload URL path")..];
    assert_eq!(api.put_unauthenticated(path, targz(SLOW_FILES)), 200);
    let queued = dev
        .eventually(Duration::from_secs(30), || {
            runs(&api, &ws_id).first().cloned()
        })
        .expect("a run is queued by the upload");
    assert_eq!(queued["attributes"]["source"], "tfe-configuration-version");
    let id = queued["id"].as_str().unwrap_or_default().to_owned();
    // Not auto-apply: it waits for a confirmation.
    wait_status(&dev, &api, &id, &["planned"]);
    let r = api.post(&format!("/api/v2/runs/{id}/actions/discard"), &json!({}));
    assert_eq!(r.status, 202, "{:?}", r.body);
    wait_status(&dev, &api, &id, &["discarded"]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(runs(&api, &ws_id).len(), 1, "queued once");
}

/// A run of a new auto-apply workspace `name` whose one resource runs `command` (shell)
/// while it is created; answers the run's ID.
fn slow_run(api: &Api, name: &str, command: &str) -> String {
    let ws_id = api.create_workspace(ORG, json!({"name": name, "auto-apply": true}));
    let main = format!(
        "resource \"terraform_data\" \"x\" {{\n  provisioner \"local-exec\" {{\n    command = \"{command}\"\n  }}\n}}\n"
    );
    let cv = api.upload_config_with(&ws_id, json!({"speculative": false}), &[("main.tf", &main)]);
    api.create_run(&ws_id, Some(&cv), json!({})).expect("run")
}

/// Force-cancel needs a cancel first and then TFE's cool-off (issue 42 §2): after the
/// cancel the run says when a force-cancel becomes available, a time ahead (go-tfe waits
/// for it and checks it is after now, also once the run is canceled), and a force-cancel
/// before then is refused; the cancel itself ends the run `canceled` and unlocks the
/// workspace. (That a force-cancel past the cool-off is accepted is the API's handler
/// test `actions_only_in_their_states`: here the engine stops well within the cool-off.)
#[test]
fn force_cancel_after_cancel() {
    let (dev, api, _tf, _dir) = setup();
    let id = slow_run(&api, "stuck", "trap '' INT TERM; sleep 120");
    let r = api.post(
        &format!("/api/v2/runs/{id}/actions/force-cancel"),
        &json!({}),
    );
    assert_eq!(
        r.status, 409,
        "force-cancel needs a cancel first: {:?}",
        r.body
    );
    wait_status(&dev, &api, &id, &["applying"]);
    std::thread::sleep(Duration::from_secs(2));
    let r = api.post(&format!("/api/v2/runs/{id}/actions/cancel"), &json!({}));
    assert_eq!(r.status, 202, "{:?}", r.body);
    let shown = api.run(&id);
    assert_eq!(shown["attributes"]["actions"]["is-force-cancelable"], false);
    let available = shown["attributes"]["force-cancel-available-at"]
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    assert!(
        available.is_some_and(|t| t > k8s_openapi::jiff::Timestamp::now()),
        "{shown}"
    );
    let r = api.post(
        &format!("/api/v2/runs/{id}/actions/force-cancel"),
        &json!({}),
    );
    assert_eq!(r.status, 409, "{:?}", r.body);
    wait_status(&dev, &api, &id, &["canceled", "force_canceled"]);
    let shown = api.run(&id);
    assert!(
        shown["attributes"]["force-cancel-available-at"].is_string(),
        "{shown}"
    );
    wait_unlocked(&dev, &api, "stuck", "the workspace stayed locked");
}

/// An operator restart while a run applies: no second Pod is started; the lost Pod errors
/// the run with the cause, and the workspace is unlocked.
#[test]
fn restart_mid_apply_errors_the_run_with_the_cause() {
    let (dev, api, _tf, _dir) = setup();
    let id = slow_run(&api, "restarted", "sleep 60");
    wait_status(&dev, &api, &id, &["applying"]);
    let dev = dev.restart();
    let api = Api::admin(&dev);
    let ended = wait_status(&dev, &api, &id, &["errored", "applied"]);
    if status(&ended) == "errored" {
        let shown = run_message(&dev, &id);
        assert!(
            shown.contains("NodeLost") || shown.contains("lost") || shown.contains("137"),
            "{shown}"
        );
    }
    let pods = dev.kubectl_ok(&["get", "pods", "-n", ORG, "-o", "name"]);
    assert!(pods.matches("-apply").count() <= 1, "{pods}");
    wait_unlocked(&dev, &api, "restarted", "the workspace stayed locked");
}

/// A consumer configuration reading `producer` through `terraform_remote_state`
/// (backend `remote`, as HCP Terraform users write it).
fn reading_producer(what: &str) -> String {
    format!(
        r#"
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
output "{what}" {{
  value = data.terraform_remote_state.producer.outputs.endpoint
}}
"#
    )
}

/// Issue 27 §1: the engine inside a run reaches terrace as the CLI does, with a
/// credential of the run: a consumer's remote apply prints an output read through
/// `terraform_remote_state` from a producer that shares its state with it; a workspace
/// the producer does not share with gets the engine's error and none of its values.
#[test]
fn a_run_reads_the_remote_state_its_workspace_may_read() {
    let (_dev, api, tf, dir) = setup();
    let p = dir.path().join("producer");
    config(
        &p,
        "producer",
        r#"output "endpoint" { value = "db.internal:5432" }"#,
    );
    ok(tf.run(&p, &["init", "-input=false"]), "init");
    ok(
        tf.run(&p, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    let producer = workspace(&api, "producer")["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let consumer = api.create_workspace(ORG, json!({"name": "consumer"}));
    api.create_workspace(ORG, json!({"name": "outsider"}));
    let r = api.post(
        &format!("/api/v2/workspaces/{producer}/relationships/remote-state-consumers"),
        &json!({"data": [{"type": "workspaces", "id": consumer}]}),
    );
    assert_eq!(r.status, 204, "{:?}", r.body);

    let c = dir.path().join("consumer");
    config(&c, "consumer", &reading_producer("seen"));
    ok(tf.run(&c, &["init", "-input=false"]), "init");
    let shown = ok(
        tf.run(&c, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    assert!(shown.contains("seen = \"db.internal:5432\""), "{shown}");
    assert!(
        !shown.contains("tfrun."),
        "the run's credential in the log: {shown}"
    );

    let o = dir.path().join("outsider");
    config(&o, "outsider", &reading_producer("stolen"));
    ok(tf.run(&o, &["init", "-input=false"]), "init");
    let out = tf.run(&o, &["apply", "-auto-approve", "-input=false"]);
    let shown = text(&out);
    assert!(
        !out.status.success(),
        "an outsider read the producer: {shown}"
    );
    // The engine says why, as HCP Terraform's does (issue 41 §2): the run may not read
    // the producer's state, and which setting would allow it; not that it may not create
    // a workspace (a 404 sent the remote backend to create the producer).
    assert!(shown.contains("error loading the remote state"), "{shown}");
    let flat = shown
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        flat.contains("of workspace \"outsider\" is not authorized to read the state of workspace \"producer\""),
        "{shown}"
    );
    assert!(flat.contains("remote-state-consumers"), "{shown}");
    assert!(!flat.contains("create workspaces"), "{shown}");
    assert!(!shown.contains("db.internal"), "{shown}");
    assert!(
        !shown.contains("tfrun."),
        "the run's credential in the log: {shown}"
    );
}

/// Issue 27 §4: a run trigger. The CLI's apply of `network` queues a run in `app`,
/// which names `network` as its trigger source: on app's current configuration, with
/// TFE's message, and auto-applied (`auto-apply-run-trigger`). One run per source apply.
#[test]
fn an_apply_triggers_a_run_in_the_workspaces_it_triggers() {
    let (dev, api, tf, dir) = setup();
    let network = api.create_workspace(ORG, json!({"name": "network"}));
    let app = api.create_workspace(ORG, json!({"name": "app", "auto-apply-run-trigger": true}));
    api.upload_config_with(
        &app,
        json!({"speculative": false}),
        &[(
            "main.tf",
            "resource \"terraform_data\" \"app\" {\n  input = \"deployed\"\n}\n",
        )],
    );
    let r = api.post(
        &format!("/api/v2/workspaces/{app}/run-triggers"),
        &json!({"data": {"type": "run-triggers", "relationships": {
            "sourceable": {"data": {"type": "workspaces", "id": network}}}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);

    let d = dir.path().join("network");
    config(
        &d,
        "network",
        "resource \"terraform_data\" \"vpc\" {\n  input = \"10.0.0.0/16\"\n}\n",
    );
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    let source_run = runs(&api, &network)[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let triggered = dev
        .eventually(Duration::from_secs(60), || {
            runs(&api, &app).into_iter().next()
        })
        .expect("no run was triggered in app");
    let id = triggered["id"].as_str().unwrap_or_default().to_owned();
    let message = triggered["attributes"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(&source_run) && message.contains("network"),
        "{message}"
    );
    let done = wait_status(&dev, &api, &id, &["applied", "errored"]);
    assert_eq!(status(&done), "applied", "{done}");
    assert_eq!(done["attributes"]["auto-apply"], true);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        runs(&api, &app).len(),
        1,
        "one triggered run per source apply"
    );

    // Issue 39 §6: a chain of triggers, hop after hop. Each triggered run's object name
    // is its ID lowercased, of fixed length however long the chain (it grew by 23
    // characters per hop, and the create failed a few hops in).
    // Every hop must change something: a run whose plan has no changes does not apply,
    // and so triggers nothing (as in TFE).
    let changing = "resource \"terraform_data\" \"x\" {\n  input = timestamp()\n}\n";
    api.upload_config_with(
        &app,
        json!({"speculative": false}),
        &[("main.tf", changing)],
    );
    let mut chain = vec![app.clone()];
    for name in ["dns", "cdn", "edge", "waf"] {
        let ws = api.create_workspace(ORG, json!({"name": name, "auto-apply-run-trigger": true}));
        api.upload_config_with(&ws, json!({"speculative": false}), &[("main.tf", changing)]);
        let r = api.post(
            &format!("/api/v2/workspaces/{ws}/run-triggers"),
            &json!({"data": {"type": "run-triggers", "relationships": {
                "sourceable": {"data": {"type": "workspaces", "id": chain.last().unwrap()}}}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        chain.push(ws);
    }
    let apply_again = |what: &str| {
        ok(
            tf.run(
                &d,
                &[
                    "apply",
                    "-auto-approve",
                    "-input=false",
                    "-replace=terraform_data.vpc",
                ],
            ),
            what,
        )
    };
    apply_again("apply again");
    let last = chain.last().unwrap().clone();
    let end = dev
        .eventually(Duration::from_secs(240), || {
            runs(&api, &last).into_iter().next()
        })
        .unwrap_or_else(|| {
            panic!(
                "the chain did not reach its last workspace:\n{}\n{}",
                dev.kubectl_ok(&["get", "runs", "-n", ORG, "-o", "wide"]),
                dev.kubectl_ok(&["get", "events.events.k8s.io", "-n", ORG])
            )
        });
    let end_id = end["id"].as_str().unwrap_or_default().to_owned();
    let done = wait_status(&dev, &api, &end_id, &["applied", "errored"]);
    assert_eq!(status(&done), "applied", "{done}");
    let names = dev.kubectl_ok(&[
        "get", "runs", "-n", ORG, "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.terrace\\.dev/id}{\"\\n\"}{end}",
    ]);
    for line in names.lines().filter(|l| !l.trim().is_empty()) {
        let (name, id) = line.split_once(' ').unwrap_or_default();
        assert_eq!(name, id.to_ascii_lowercase(), "{names}");
    }

    // A cycle declared with kubectl (the API refuses one): `network` named as triggered
    // by the last workspace. An apply of network then queues nothing through the cycle,
    // says why in an Event, and nothing loops.
    let network_object = dev.kubectl_ok(&[
        "get",
        "workspaces",
        "-n",
        ORG,
        "-l",
        &format!("terrace.dev/id={network}"),
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    dev.kubectl_ok(&[
        "patch",
        "workspace",
        &network_object,
        "-n",
        ORG,
        "--type=merge",
        "-p",
        &json!({"spec": {"runTriggerSources": [last]}}).to_string(),
    ]);
    let app_runs = runs(&api, &app).len();
    apply_again("apply in a cycle");
    // `kubectl get events` (core v1) shows what the operator recorded through
    // events.k8s.io, as on a real API server: one store behind both APIs.
    let said = dev.eventually(Duration::from_secs(60), || {
        let events = dev.kubectl_ok(&["get", "events", "-n", ORG, "-o", "json"]);
        events.contains("RunTriggerCycle").then_some(events)
    });
    assert!(said.is_some(), "no RunTriggerCycle event");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        runs(&api, &app).len(),
        app_runs,
        "nothing is queued through a cycle"
    );
}

/// The run ID the CLI names in its "view this run" link.
fn run_id_in(shown: &str) -> String {
    shown
        .split("/runs/")
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 27 §2: saved plans. `terraform plan -out` saves a cloud plan; `terraform show`
/// renders it from the redacted JSON plan (sensitive values never in it), `show -json`
/// prints the plan; `terraform apply FILE` applies exactly that run.
#[test]
fn a_saved_plan_shows_and_applies_that_run() {
    let (_dev, api, tf, dir) = setup();
    let d = dir.path().join("saved");
    config(
        &d,
        "saved",
        r#"
variable "pw" {
  default   = "hunter2"
  sensitive = true
}
resource "terraform_data" "x" {
  input = var.pw
}
output "o" { value = "visible" }
"#,
    );
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let planned = ok(
        tf.run(&d, &["plan", "-input=false", "-out=saved.plan"]),
        "plan -out",
    );
    let run_id = run_id_in(&planned);
    assert!(run_id.starts_with("run-"), "{planned}");
    assert_eq!(status(&api.run(&run_id)), "planned_and_saved");

    let shown = ok(tf.run(&d, &["show", "saved.plan"]), "show");
    assert!(
        shown.contains("terraform_data.x will be created"),
        "{shown}"
    );
    assert!(shown.contains("(sensitive value)"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let json = ok(tf.run(&d, &["show", "-json", "saved.plan"]), "show -json");
    assert!(json.contains("\"resource_changes\""), "{json}");

    let plan_id = format!("plan-{}", run_id.trim_start_matches("run-"));
    let redacted = api.get(&format!("/api/v2/plans/{plan_id}/json-output-redacted"));
    assert_eq!(redacted.status, 200, "{:?}", redacted.body);
    assert!(
        redacted.body["provider_schemas"].is_object(),
        "{:?}",
        redacted.body
    );
    assert!(
        !redacted.body.to_string().contains("hunter2"),
        "{:?}",
        redacted.body
    );

    let applied = ok(
        tf.run(&d, &["apply", "-input=false", "saved.plan"]),
        "apply FILE",
    );
    assert_eq!(
        run_id_in(&applied),
        run_id,
        "the saved run is the one applied"
    );
    assert!(applied.contains("Apply complete!"), "{applied}");
    assert_eq!(status(&api.run(&run_id)), "applied");
}

/// Issue 27 §3: variable sets reach runs in TFE's order of precedence: a global set's
/// value when nothing else sets the key, the workspace's own over a set's, the CLI's
/// `-var` over the workspace's, and a priority set over all of them; a sensitive set
/// value reaches the run and never its log.
#[test]
fn variable_sets_reach_runs_in_tfe_order() {
    let (_dev, api, tf, dir) = setup();
    let ws = api.create_workspace(ORG, json!({"name": "sets"}));
    let set = |attrs: Value, rels: Value| -> String {
        let r = api.post(
            &format!("/api/v2/organizations/{ORG}/varsets"),
            &json!({"data": {"type": "varsets", "attributes": attrs, "relationships": rels}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
    };
    let var = |set: &str, key: &str, value: &str, sensitive: bool| {
        let r = api.post(
            &format!("/api/v2/varsets/{set}/relationships/vars"),
            &json!({"data": {"type": "vars", "attributes": {
                "key": key, "value": value, "category": "terraform", "sensitive": sensitive}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
    };
    let global = set(json!({"name": "defaults", "global": true}), json!({}));
    var(&global, "region", "from-the-global-set", false);
    var(&global, "tier", "from-the-global-set", false);
    var(&global, "password", "hunter2", true);
    let priority = set(
        json!({"name": "platform", "priority": true}),
        json!({"workspaces": {"data": [{"type": "workspaces", "id": ws}]}}),
    );
    var(&priority, "owner", "platform", false);
    for (key, value) in [("tier", "workspace"), ("owner", "workspace")] {
        let r = api.post(
            &format!("/api/v2/workspaces/{ws}/vars"),
            &json!({"data": {"type": "vars", "attributes": {"key": key, "value": value, "category": "terraform"}}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let d = dir.path().join("sets");
    config(
        &d,
        "sets",
        r#"
variable "region" { type = string }
variable "tier" { type = string }
variable "owner" { type = string }
variable "cli" { type = string }
variable "password" {
  type      = string
  sensitive = true
}
output "shown" {
  value = "${var.region}|${var.tier}|${var.owner}|${var.cli}|${length(nonsensitive(var.password))}"
}
"#,
    );
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let shown = ok(
        tf.run(
            &d,
            &[
                "apply",
                "-auto-approve",
                "-input=false",
                "-var",
                "owner=the CLI",
                "-var",
                "cli=the CLI",
            ],
        ),
        "apply",
    );
    assert!(
        shown.contains("from-the-global-set|workspace|platform|the CLI|7"),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}

/// Issue 27 §2: structured run output. terrace announces a TFE release that renders it
/// (`X-TFE-Version`) and the workspace's `structured-run-output-enabled`; runs log the
/// engine's JSON UI. The CLI renders the plan from the redacted JSON plan and the apply
/// from the JSON lines (no raw JSON, no engine text); any other reader of the same log
/// gets readable text; with the attribute off the engine's plain text is the log again.
#[test]
fn structured_run_output_renders_in_the_cli_and_reads_as_text_elsewhere() {
    let (_dev, api, tf, dir) = setup();
    let d = dir.path().join("sro");
    config(&d, "sro", ITEMS);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let ws = workspace(&api, "sro");
    assert_eq!(ws["attributes"]["structured-run-output-enabled"], true);
    let ws_id = ws["id"].as_str().unwrap_or_default().to_owned();

    let shown = ok(tf.run(&d, &["plan", "-input=false"]), "plan");
    println!("--- structured plan ---\n{shown}");
    assert!(
        shown.contains("Terraform will perform the following actions:"),
        "{shown}"
    );
    assert!(
        shown.contains("# terraform_data.item[0] will be created"),
        "{shown}"
    );
    assert!(
        shown.contains("Plan: 2 to add, 0 to change, 0 to destroy."),
        "{shown}"
    );
    assert!(
        !shown.contains("\"@level\""),
        "raw JSON in the CLI: {shown}"
    );
    assert!(
        !shown.contains("Saved the plan to"),
        "the engine's text: {shown}"
    );

    // The same log: JSON lines for the CLI, text for everyone else.
    let run_id = runs(&api, &ws_id)[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let plan = api.get(&format!("/api/v2/runs/{run_id}/plan"));
    let url = plan.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = &url[url.find("/api/v2/").unwrap_or(0)..];
    let anyone = Api::with_token(&_dev, None);
    let (st, text_log) = anyone.get_text(path);
    assert_eq!(st, 200);
    println!("--- the plan's log as text ---\n{text_log}");
    assert!(
        text_log.contains("terraform_data.item[0]: Plan to create"),
        "{text_log}"
    );
    assert!(
        text_log.contains("Plan: 2 to add, 0 to change, 0 to destroy."),
        "{text_log}"
    );
    assert!(!text_log.contains("{\"@"), "{text_log}");
    let (_, json_log) = anyone.get_text_with(path, &[("X-Terraform-Integration", "cloud")]);
    assert!(
        json_log.contains("\"type\":\"planned_change\""),
        "{json_log}"
    );

    let shown = ok(
        tf.run(&d, &["apply", "-auto-approve", "-input=false"]),
        "apply",
    );
    println!("--- structured apply ---\n{shown}");
    assert!(
        shown.contains("terraform_data.item[1]: Creation complete"),
        "{shown}"
    );
    assert!(
        shown.contains("Apply complete! Resources: 2 added, 0 changed, 0 destroyed."),
        "{shown}"
    );
    assert!(
        shown.contains("Outputs:") && shown.contains("\"item-1\""),
        "{shown}"
    );
    assert!(!shown.contains("\"@level\""), "{shown}");

    // Off: the engine's plain text again.
    let r = api.call(
        "PATCH",
        &format!("/api/v2/workspaces/{ws_id}"),
        Some(&json!({"data": {"type": "workspaces", "attributes": {"structured-run-output-enabled": false}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        r.body["data"]["attributes"]["structured-run-output-enabled"],
        false
    );
    config(&d, "sro", &ITEMS.replace("default = 2", "default = 3"));
    let shown = ok(tf.run(&d, &["plan", "-input=false"]), "plan");
    assert!(
        shown.contains("Plan: 1 to add, 0 to change, 0 to destroy."),
        "{shown}"
    );
    assert!(!shown.contains("\"@level\""), "{shown}");
    let run_id = runs(&api, &ws_id)[0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let plan = api.get(&format!("/api/v2/runs/{run_id}/plan"));
    let url = plan.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (_, cli_log) = anyone.get_text_with(
        &url[url.find("/api/v2/").unwrap_or(0)..],
        &[("X-Terraform-Integration", "cloud")],
    );
    assert!(
        cli_log.contains("Terraform will perform the following actions:")
            && !cli_log.contains("\"@level\""),
        "the engine's plain text is the log: {cli_log}"
    );
}

/// Issue 41 §1: a run waiting for confirmation holds the workspace, and an engineer's
/// `terraform apply` queued behind it is told it waits for that run, not for a person's
/// lock. The workspace's `current-run` is the run that holds it (`latest-run` the newest),
/// as in HCP Terraform, whose CLI prints "manually locked" exactly when a locked
/// workspace's current run is pending; once the run ahead is discarded the CLI's run is
/// current and applies.
#[test]
fn a_cli_run_behind_a_run_waiting_for_confirmation_waits_for_that_run() {
    let (dev, api, tf, dir) = setup();
    let d = dir.path().join("held");
    config(&d, "held", ITEMS);
    ok(tf.run(&d, &["init", "-input=false"]), "init");
    let ws_id = workspace(&api, "held")["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cv = api.upload_config_with(&ws_id, json!({"speculative": false}), &[("main.tf", ITEMS)]);
    let ahead = api.create_run(&ws_id, Some(&cv), json!({})).expect("run");
    wait_status(&dev, &api, &ahead, &["planned", "post_plan_completed"]);

    let child = tf
        .command(&d, &["apply", "-auto-approve", "-input=false"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terraform apply");
    let mine = dev
        .eventually(Duration::from_secs(60), || {
            runs(&api, &ws_id)
                .into_iter()
                .find(|r| r["id"] != ahead.as_str() && status(r) == "pending")
        })
        .expect("the CLI's run never queued");
    let w = workspace(&api, "held");
    assert_eq!(w["attributes"]["locked"], true, "{w}");
    assert_eq!(
        w["relationships"]["locked-by"]["data"]["id"],
        ahead.as_str()
    );
    assert_eq!(
        w["relationships"]["current-run"]["data"]["id"],
        ahead.as_str(),
        "the run that holds the workspace is its current run: {w}"
    );
    assert_eq!(w["relationships"]["latest-run"]["data"]["id"], mine["id"]);
    // kubectl reads like the web view's run list (issue 41 §8): the workspace by its TFE
    // name, and the waiting run `pending`.
    let mine_id = mine["id"].as_str().unwrap_or_default().to_owned();
    let listed = dev
        .eventually(Duration::from_secs(30), || {
            let out = dev.kubectl_ok(&["get", "runs", "-n", ORG, "--no-headers"]);
            out.lines()
                .any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.first() == Some(&mine_id.to_ascii_lowercase().as_str())
                        && cols.get(1) == Some(&"held")
                        && cols.get(2) == Some(&"pending")
                })
                .then_some(out)
        })
        .unwrap_or_else(|| {
            panic!(
                "kubectl get runs: {}",
                dev.kubectl_ok(&["get", "runs", "-n", ORG])
            )
        });
    assert!(!listed.contains("ws-"), "{listed}");
    // Long enough for the CLI's first status line (after a second's backoff).
    std::thread::sleep(Duration::from_secs(4));
    let r = api.post(&format!("/api/v2/runs/{ahead}/actions/discard"), &json!({}));
    assert_eq!(r.status, 202, "{:?}", r.body);
    let shown = ok(child.wait_with_output().expect("apply ends"), "apply");
    assert!(
        shown.contains("Waiting for 1 run(s) to finish before being queued"),
        "{shown}"
    );
    assert!(!shown.contains("manually locked"), "{shown}");
    assert!(shown.contains("Apply complete!"), "{shown}");
    let w = workspace(&api, "held");
    assert_eq!(w["relationships"]["current-run"]["data"]["id"], mine["id"]);
    assert_eq!(w["attributes"]["locked"], false, "{w}");
    let versions = dev.kubectl_ok(&["get", "stateversions", "-n", ORG, "--no-headers"]);
    assert!(
        versions
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some("held")),
        "{versions}"
    );
}
