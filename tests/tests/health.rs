//! Health assessments end to end (issue 44, docs/health.md): `terrace dev` (hosted
//! edition, so the API takes `assessments-enabled`) with the real terraform as the
//! engine. A configuration applied with the CLI reads an upstream state file through
//! `terraform_remote_state` (backend `local`) and has a `check` block on it; the test
//! changes that file behind the engine's back, as infrastructure changes behind
//! Terraform's back. Assessments asked for through the API then report: healthy, a check
//! failure (not drift), a failure (not drift) when the file is gone, and healthy again;
//! with the Workspace's conditions, its Events, the notifications, the result's JSON
//! output and log; an assessment never takes the workspace's lock and never holds up a
//! run queued beside it.
//!
//! Drift itself needs a provider whose real objects change (built-in resources cannot
//! drift): the second test uses the repository's test provider (`tests/provider`,
//! `terrace_tests::provider`), whose objects are files the test edits behind the
//! engine's back.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::receiver::Receiver;
use terrace_tests::{
    Api, CLI_HOST, Dev, Terraform, provider, terraform_path, text, write_cloud_config,
};

const ORG: &str = "healthorg";

fn upstream(path: &Path, ok: bool) {
    let state = json!({
        "version": 4, "terraform_version": "1.11.4", "serial": 1, "lineage": "upstream",
        "outputs": {
            "ok": {"value": ok, "type": "bool"},
            "version": {"value": "1", "type": "string"}
        },
        "resources": []
    });
    std::fs::write(path, serde_json::to_vec(&state).unwrap()).expect("upstream state");
}

fn config(dir: &Path, upstream: &Path) {
    write_cloud_config(
        dir,
        ORG,
        r#"name = "app""#,
        &format!(
            r#"
data "terraform_remote_state" "up" {{
  backend = "local"
  config = {{
    path = "{}"
  }}
}}

resource "terraform_data" "app" {{
  input = data.terraform_remote_state.up.outputs.version
}}

check "upstream" {{
  assert {{
    condition     = data.terraform_remote_state.up.outputs.ok
    error_message = "the upstream is not ok"
  }}
}}
"#,
            upstream.display()
        ),
    );
}

/// The workspace's current assessment result once it is another than `before`.
fn next_result(dev: &Dev, api: &Api, ws: &str, before: Option<&str>) -> Value {
    let r = api.post(
        &format!("/api/v2/workspaces/{ws}/actions/assess"),
        &json!({}),
    );
    assert_eq!(r.status, 200, "assess: {:?}", r.body);
    // The assessment holds no lock: a person can lock the workspace meanwhile.
    let lock = api.post(
        &format!("/api/v2/workspaces/{ws}/actions/lock"),
        &json!({"reason": "while assessing"}),
    );
    assert_eq!(
        lock.status, 200,
        "lock during an assessment: {:?}",
        lock.body
    );
    let unlock = api.post(
        &format!("/api/v2/workspaces/{ws}/actions/unlock"),
        &json!({}),
    );
    assert_eq!(unlock.status, 200, "{:?}", unlock.body);
    let found = dev.eventually(Duration::from_secs(120), || {
        let r = api.get(&format!(
            "/api/v2/workspaces/{ws}/current-assessment-result"
        ));
        (r.status == 200 && r.body["data"]["id"].as_str() != before).then(|| r.body["data"].clone())
    });
    found.unwrap_or_else(|| {
        let runs = dev.kubectl(&["get", "runs", "-n", ORG, "-o", "yaml"]);
        let wss = dev.kubectl(&["get", "workspaces", "-n", ORG, "-o", "yaml"]);
        let log: String = dev
            .log()
            .lines()
            .filter(|l| l.contains("assess") || l.contains("WARN") || l.contains("ERROR"))
            .collect::<Vec<_>>()
            .join("\n");
        panic!(
            "no new assessment result; runs:\n{}\nworkspaces:\n{}\nlog:\n{log}",
            text(&runs),
            text(&wss)
        )
    })
}

/// Enables assessments on workspace `ws` and has `triggers` notified to `url` (a generic
/// destination).
fn enable_with_notifications(api: &Api, ws: &str, url: &str, triggers: &[&str]) {
    let r = api.call(
        "PATCH",
        &format!("/api/v2/workspaces/{ws}"),
        Some(&json!({"data": {"type": "workspaces", "attributes": {"assessments-enabled": true}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["assessments-enabled"], true);
    let nc = api.post(
        &format!("/api/v2/workspaces/{ws}/notification-configurations"),
        &json!({"data": {"type": "notification-configurations", "attributes": {
            "name": "health", "destination-type": "generic", "enabled": true,
            "url": url, "triggers": triggers}}}),
    );
    assert_eq!(nc.status, 201, "{:?}", nc.body);
}

/// A web view session of the admin: its cookie's value.
fn sign_in(dev: &Dev) -> String {
    terrace_tests::web::sign_in(&dev.api, &dev.token)
}

/// GET `path` of the web view with session `cookie`: the status and the page.
fn page(dev: &Dev, cookie: &str, path: &str) -> (u16, String) {
    terrace_tests::web::page(&dev.api, cookie, path)
}

fn condition(dev: &Dev, type_: &str) -> Value {
    let out = dev.kubectl_ok(&["get", "workspaces", "-n", ORG, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("workspaces");
    list["items"][0]["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

fn events(dev: &Dev) -> String {
    text(&dev.kubectl(&["get", "events.events.k8s.io", "-n", ORG, "-o", "json"]))
}

#[test]
fn continuous_validation_and_failures_from_a_refresh_only_plan() {
    let receiver = Receiver::start(|_, _| (200, Duration::ZERO));
    let dev = Dev::start_with(&[
        "--engine",
        &terraform_path(),
        "--edition",
        "hosted",
        // Long: only the assessments asked for run, in the test's order.
        "--assessment-interval",
        "12h",
    ]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("dir");
    let up = dir.path().join("upstream.tfstate");
    upstream(&up, true);
    let d = dir.path().join("app");
    config(&d, &up);
    let init = tf
        .command(&d, &["init", "-input=false"])
        .output()
        .expect("init");
    assert!(init.status.success(), "{}", text(&init));
    let apply = tf
        .command(&d, &["apply", "-auto-approve", "-input=false"])
        .output()
        .expect("apply");
    assert!(apply.status.success(), "{}", text(&apply));

    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/app"));
    let ws_id = ws.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Not enabled yet: asking is 409.
    let r = api.post(
        &format!("/api/v2/workspaces/{ws_id}/actions/assess"),
        &json!({}),
    );
    assert_eq!(r.status, 409, "{:?}", r.body);
    enable_with_notifications(
        &api,
        &ws_id,
        &receiver.url("/health"),
        &[
            "assessment:drifted",
            "assessment:check_failure",
            "assessment:failed",
        ],
    );

    // 1. Healthy: the check passes, nothing drifted.
    let first = next_result(&dev, &api, &ws_id, None);
    let a = &first["attributes"];
    assert_eq!(
        (a["succeeded"].clone(), a["drifted"].clone()),
        (json!(true), json!(false)),
        "{first}"
    );
    assert_eq!(
        (a["checks-passed"].clone(), a["checks-failed"].clone()),
        (json!(1), json!(0)),
        "{first}"
    );
    assert_eq!(a["resources-undrifted"], 1, "{first}");
    let first_id = first["id"].as_str().unwrap_or_default().to_owned();
    assert!(first_id.starts_with("asmtres-"), "{first_id}");
    assert_eq!(condition(&dev, "Drifted")["status"], "False");
    assert_eq!(condition(&dev, "ChecksPassing")["status"], "True");
    let out = api.get(&format!(
        "/api/v2/assessment-results/{first_id}/json-output"
    ));
    assert_eq!(out.status, 200);
    assert_eq!(out.body["checks"][0]["status"], "pass", "{:?}", out.body);
    let log = api.get(&format!("/api/v2/assessment-results/{first_id}/log-output"));
    assert_eq!(log.status, 200);
    // No run: the workspace's runs are the CLI's apply only.
    let runs = api.get(&format!("/api/v2/workspaces/{ws_id}/runs"));
    assert_eq!(
        runs.body["data"].as_array().map(Vec::len),
        Some(1),
        "{:?}",
        runs.body
    );
    let wide = dev.kubectl_ok(&["get", "workspaces", "-n", ORG]);
    assert!(
        wide.contains("HEALTH") && wide.contains("Healthy"),
        "{wide}"
    );

    // 2. The upstream goes bad behind the engine's back: a check failure, not drift.
    upstream(&up, false);
    let second = next_result(&dev, &api, &ws_id, Some(&first_id));
    let a = &second["attributes"];
    assert_eq!(
        (a["succeeded"].clone(), a["drifted"].clone()),
        (json!(true), json!(false)),
        "{second}"
    );
    assert_eq!(a["checks-failed"], 1, "{second}");
    let checks = condition(&dev, "ChecksPassing");
    assert_eq!(
        (checks["status"].as_str(), checks["reason"].as_str()),
        (Some("False"), Some("ChecksFailed"))
    );
    assert!(
        checks["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the upstream is not ok"),
        "{checks}"
    );
    let second_id = second["id"].as_str().unwrap_or_default().to_owned();
    let health = api.get(&format!("/api/v2/assessment-results/{second_id}/health"));
    assert_eq!(
        health.body["data"]["attributes"]["checks"][0]["problems"],
        json!(["the upstream is not ok"]),
        "{:?}",
        health.body
    );
    let got = dev.eventually(Duration::from_secs(30), || {
        receiver
            .at("/health")
            .into_iter()
            .map(|r| r.json())
            .find(|p| p["trigger"] == "assessment:check_failure")
    });
    let payload = got.expect("the check failure was notified");
    assert_eq!(payload["trigger_scope"], "assessment");
    assert_eq!(payload["details"]["new_assessment_result"]["id"], second_id);
    assert_eq!(
        payload["details"]["prior_assessment_result"]["id"],
        first_id
    );
    assert_eq!(payload["details"]["workspace_name"], "app");
    assert!(
        events(&dev).contains("ChecksFailed"),
        "no ChecksFailed Event"
    );
    // The web view's health page shows the failed check with its message, and offers
    // the workspace admin an assessment.
    let cookie = sign_in(&dev);
    let (status, html) = page(&dev, &cookie, &format!("/app/{ORG}/workspaces/app/health"));
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Checks failed"), "{html}");
    assert!(
        html.contains("check.upstream") && html.contains("the upstream is not ok"),
        "{html}"
    );
    assert!(html.contains("Start an assessment"), "{html}");
    // The list shows the workspace's health as a badge that links to that page.
    let (status, html) = page(&dev, &cookie, &format!("/app/{ORG}/workspaces"));
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("workspaces/app/health\">Checks failed</a>"),
        "{html}"
    );

    // 3. The upstream is gone: the plan errors, an assessment failure, not drift.
    std::fs::remove_file(&up).expect("remove upstream");
    let third = next_result(&dev, &api, &ws_id, Some(&second_id));
    let a = &third["attributes"];
    assert_eq!(
        (a["succeeded"].clone(), a["drifted"].clone()),
        (json!(false), json!(false)),
        "{third}"
    );
    assert!(
        a["error-msg"].as_str().is_some_and(|m| !m.is_empty()),
        "{third}"
    );
    assert_eq!(third["links"]["json-output"], Value::Null);
    assert_eq!(condition(&dev, "Drifted")["status"], "Unknown");
    let got = dev.eventually(Duration::from_secs(30), || {
        receiver
            .at("/health")
            .into_iter()
            .map(|r| r.json())
            .find(|p| p["trigger"] == "assessment:failed")
    });
    assert!(got.is_some(), "the failure was notified");
    assert!(
        events(&dev).contains("AssessmentFailed"),
        "no AssessmentFailed Event"
    );

    // 4. Fixed: healthy again.
    upstream(&up, true);
    let fourth = next_result(
        &dev,
        &api,
        &ws_id,
        Some(third["id"].as_str().unwrap_or_default()),
    );
    assert_eq!(fourth["attributes"]["succeeded"], true, "{fourth}");
    assert_eq!(fourth["attributes"]["checks-failed"], 0, "{fourth}");
    assert_eq!(condition(&dev, "ChecksPassing")["status"], "True");
    // Only the two worse changes were notified.
    let triggers: Vec<String> = receiver
        .at("/health")
        .into_iter()
        .filter_map(|r| r.json()["trigger"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        triggers,
        ["assessment:check_failure", "assessment:failed"],
        "{triggers:?}"
    );

    // 5. An assessment never blocks a run: a run queued as an assessment is asked for
    // plans at once, and the assessment still comes (after it, or beside it).
    let ws = api.get(&format!("/api/v2/workspaces/{ws_id}"));
    let cv = ws.body["data"]["relationships"]["current-configuration-version"]["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = api.post(
        &format!("/api/v2/workspaces/{ws_id}/actions/assess"),
        &json!({}),
    );
    assert_eq!(r.status, 200, "assess: {:?}", r.body);
    let run = api.plan_only_run(&ws_id, &cv, Duration::from_secs(120));
    assert_eq!(run["attributes"]["status"], "planned_and_finished", "{run}");
    let fifth = dev.eventually(Duration::from_secs(120), || {
        let r = api.get(&format!(
            "/api/v2/workspaces/{ws_id}/current-assessment-result"
        ));
        (r.body["data"]["id"] != fourth["id"]).then(|| r.body["data"].clone())
    });
    let fifth = fifth.expect("the assessment asked for beside the run came");
    assert_eq!(fifth["attributes"]["succeeded"], true, "{fifth}");
}

#[test]
fn drift_of_a_real_object_with_the_resource_and_its_attributes() {
    let receiver = Receiver::start(|_, _| (200, Duration::ZERO));
    let dev = Dev::start_with(&[
        "--engine",
        &terraform_path(),
        "--edition",
        "hosted",
        "--assessment-interval",
        "12h",
    ]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let mirror = provider::cli_config();
    // The engine's, in the Pod, and the objects' directory: outside /tmp, which is an
    // emptyDir in a Pod of terrace dev's simulator. A workspace variable names the rc.
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("dir");
    let engine_rc = outside.path().join("engine.tfrc");
    std::fs::write(&engine_rc, &mirror).expect("engine rc");
    let objects = outside.path().join("objects");
    std::fs::create_dir_all(&objects).expect("objects");
    // The CLI's: terrace dev's host and token, and the mirror.
    let dir = tempfile::tempdir().expect("dir");
    let cli_rc = dir.path().join("cli.tfrc");
    std::fs::write(
        &cli_rc,
        format!(
            "{}\n{mirror}",
            terrace_crds::common::cli_config(CLI_HOST, &dev.api, &dev.token)
        ),
    )
    .expect("cli rc");
    let tf = Terraform::for_dev(&dev);
    let d = dir.path().join("app");
    std::fs::create_dir_all(&d).expect("app");
    let (required, provider_block) = provider::hcl(&objects);
    std::fs::write(
        d.join("main.tf"),
        format!(
            r#"
terraform {{
  cloud {{
    hostname     = "{CLI_HOST}"
    organization = "{ORG}"
    workspaces {{
      name = "bucket"
    }}
  }}
  required_providers {{
    {required}
  }}
}}

{provider_block}

resource "files_object" "logs" {{
  name    = "logs.json"
  content = "bucket"
  tags = {{
    team = "infra"
  }}
}}
"#
        ),
    )
    .expect("main.tf");
    let cli = |args: &[&str]| {
        tf.command(&d, args)
            .env("TF_CLI_CONFIG_FILE", &cli_rc)
            .output()
            .expect("terraform")
    };
    let init = cli(&["init", "-input=false"]);
    assert!(init.status.success(), "{}", text(&init));
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/bucket"));
    let ws_id = ws.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let var = api.post(
        &format!("/api/v2/workspaces/{ws_id}/vars"),
        &json!({"data": {"type": "vars", "attributes": {
            "key": "TF_CLI_CONFIG_FILE", "value": engine_rc.display().to_string(),
            "category": "env"}}}),
    );
    assert_eq!(var.status, 201, "{:?}", var.body);
    let apply = cli(&["apply", "-auto-approve", "-input=false"]);
    assert!(apply.status.success(), "{}", text(&apply));
    enable_with_notifications(
        &api,
        &ws_id,
        &receiver.url("/drift"),
        &["assessment:drifted"],
    );
    let first = next_result(&dev, &api, &ws_id, None);
    assert_eq!(
        (
            first["attributes"]["succeeded"].clone(),
            first["attributes"]["drifted"].clone()
        ),
        (json!(true), json!(false)),
        "{first}"
    );

    // Someone edits the object's tags behind the engine's back.
    std::fs::write(
        objects.join("logs.json"),
        r#"{"content": "bucket", "tags": {"team": "someone-else"}}"#,
    )
    .expect("edit the object");
    let drifted = next_result(&dev, &api, &ws_id, first["id"].as_str());
    let a = &drifted["attributes"];
    assert_eq!(
        (a["succeeded"].clone(), a["drifted"].clone()),
        (json!(true), json!(true)),
        "{drifted}"
    );
    assert_eq!(a["resources-drifted"], 1, "{drifted}");
    let id = drifted["id"].as_str().unwrap_or_default();
    let health = api.get(&format!("/api/v2/assessment-results/{id}/health"));
    let drift = &health.body["data"]["attributes"]["drift"][0];
    assert_eq!(drift["address"], "files_object.logs", "{:?}", health.body);
    let attrs = drift["attributes"].as_array().cloned().unwrap_or_default();
    assert!(attrs.contains(&json!("tags")), "{drift}");
    let cond = condition_of(&dev, "bucket", "Drifted");
    assert_eq!(cond["status"], "True", "{cond}");
    assert!(
        cond["message"]
            .as_str()
            .unwrap_or_default()
            .contains("files_object.logs"),
        "{cond}"
    );
    assert!(
        events(&dev).contains("DriftDetected"),
        "no DriftDetected Event"
    );
    let got = dev.eventually(Duration::from_secs(30), || {
        receiver
            .at("/drift")
            .into_iter()
            .map(|r| r.json())
            .find(|p| p["trigger"] == "assessment:drifted")
    });
    let payload = got.expect("the drift was notified");
    assert_eq!(payload["details"]["new_assessment_result"]["id"], id);
    assert_eq!(payload["details"]["workspace_name"], "bucket");
    // The health page names the drifted resource and its changed attribute.
    let cookie = sign_in(&dev);
    let (status, html) = page(
        &dev,
        &cookie,
        &format!("/app/{ORG}/workspaces/bucket/health"),
    );
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("files_object.logs") && html.contains("tags"),
        "{html}"
    );
    let (_, html) = page(&dev, &cookie, &format!("/app/{ORG}/workspaces"));
    assert!(
        html.contains("workspaces/bucket/health\">Drifted</a>"),
        "{html}"
    );
    // And every workspace page has the Health tab.
    for tab in ["", "/runs", "/states"] {
        let (_, html) = page(&dev, &cookie, &format!("/app/{ORG}/workspaces/bucket{tab}"));
        assert!(
            html.contains("workspaces/bucket/health\">Health</a>"),
            "{tab}: {html}"
        );
    }
    // The real object is deleted: drift too (the resource is gone).
    std::fs::remove_file(objects.join("logs.json")).expect("delete the object");
    let gone = next_result(&dev, &api, &ws_id, Some(id));
    assert_eq!(gone["attributes"]["drifted"], true, "{gone}");
    let id = gone["id"].as_str().unwrap_or_default();

    // Fixed with an apply: healthy again.
    let apply = cli(&["apply", "-auto-approve", "-input=false"]);
    assert!(apply.status.success(), "{}", text(&apply));
    let fixed = next_result(&dev, &api, &ws_id, Some(id));
    assert_eq!(fixed["attributes"]["drifted"], false, "{fixed}");
    let object = std::fs::read_to_string(objects.join("logs.json")).expect("recreated");
    assert!(object.contains("infra"), "{object}");
    assert_eq!(condition_of(&dev, "bucket", "Drifted")["status"], "False");
    assert!(
        events(&dev).contains("DriftResolved"),
        "no DriftResolved Event"
    );
}

fn condition_of(dev: &Dev, ws_name: &str, type_: &str) -> Value {
    let out = dev.kubectl_ok(&["get", "workspaces", "-n", ORG, "-o", "json"]);
    let list: Value = serde_json::from_str(&out).expect("workspaces");
    list["items"]
        .as_array()
        .and_then(|i| i.iter().find(|w| w["spec"]["name"] == ws_name).cloned())
        .and_then(|w| {
            w["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == type_).cloned())
        })
        .unwrap_or(Value::Null)
}
