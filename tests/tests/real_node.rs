//! The real-node tier (issue 40): run and test Pods executed by a real kubelet on
//! containerd and runc (`.ci/run` starts one with the control plane), with the API server
//! and operator holding the chart's ServiceAccount tokens and the terraform CLI as the
//! client. The simulator runs containers as local processes; here users, file modes,
//! admission, image pulls and node loss are real. One test: the scenarios share the node
//! and run in turn (the last one takes the node down).

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::real::{RealCluster, RealNode, eventually};
use terrace_tests::{Api, CLI_HOST, Terraform, text};

/// A workspace configuration of one resource (and a pause in its provisioner).
fn config(dir: &Path, org: &str, workspace: &str, body: &str) {
    terrace_tests::write_cloud_config(dir, org, &format!("name = \"{workspace}\""), body);
}

const MODULE_TF: &str = r#"
variable "name" {
  type    = string
  default = "world"
}

resource "terraform_data" "greeting" {
  input = "hello ${var.name}"
}

output "greeting" {
  value = terraform_data.greeting.output
}
"#;

const MODULE_TEST: &str = r#"
run "greets" {
  assert {
    condition     = output.greeting == "hello world"
    error_message = "wrong greeting"
  }
}
"#;

fn runs(api: &Api, ws: &str) -> Vec<Value> {
    let r = api.get(&format!("/api/v2/workspaces/{ws}/runs"));
    r.body["data"].as_array().cloned().unwrap_or_default()
}

fn workspace_id(api: &Api, org: &str, name: &str) -> String {
    let r = api.get(&format!("/api/v2/organizations/{org}/workspaces/{name}"));
    r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn runs_and_module_tests_on_a_real_node() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let Some(node) = RealNode::from_env() else {
        return;
    };
    let (api_c, op, url) = cluster.on_node(&node, "terrace-operator-node");
    let logs = || RealCluster::logs_of(&[&api_c, &op]);
    let admin = cluster.admin(&url);
    let org = RealCluster::unique("node");
    admin.create_org(&org);
    let tf = Terraform::for_api(cluster.path(), &url, &cluster.admin_token);
    let work = tempfile::tempdir().expect("work dir");

    // A remote plan and apply through the CLI, the engine in a Pod of the node.
    admin.first_workspace(&org, json!({"name": "hello"}), logs);
    let d = work.path().join("hello");
    config(
        &d,
        &org,
        "hello",
        "resource \"terraform_data\" \"greeting\" { input = \"hello from a real node\" }\noutput \"greeting\" { value = terraform_data.greeting.output }\n",
    );
    let out = tf.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    let shown = text(&out);
    assert!(out.status.success(), "apply: {shown}\n{}", logs());
    assert!(shown.contains("hello from a real node"), "{shown}");
    let ws = workspace_id(&admin, &org, "hello");
    assert_eq!(runs(&admin, &ws)[0]["attributes"]["status"], "applied");

    // A module test through `terraform test -cloud-run`: the test Pod's fetch container
    // reads its token (issue 40 §1: 0400 and no fsGroup failed every run).
    admin.create_module(&org, "greeter", "aws");
    let m = work.path().join("greeter");
    std::fs::create_dir_all(m.join("tests")).expect("module dir");
    std::fs::write(m.join("main.tf"), MODULE_TF).expect("main.tf");
    std::fs::write(m.join("tests/a.tftest.hcl"), MODULE_TEST).expect("test");
    let out = tf.run(
        &m,
        &["test", &format!("-cloud-run={CLI_HOST}/{org}/greeter/aws")],
    );
    let shown = text(&out);
    assert!(out.status.success(), "terraform test: {shown}\n{}", logs());
    assert!(shown.contains("1 passed, 0 failed"), "{shown}");

    restricted_namespace(&cluster, &admin, &org, &tf, work.path(), &logs);
    an_image_pull_that_fails_once(&cluster, &node, &admin, &org, &logs);
    cancel_during_an_apply(&admin, &org, &logs);
    // An operator restarted during an apply: the new one finds the apply Pod and the run
    // ends applied, with no second Pod.
    let ws = admin.create_workspace(&org, json!({"name": "restart", "auto-apply": true}));
    let cv = admin.upload_config(&ws, &[("main.tf", SLOW)]);
    let run = admin.queue(&ws, Some(&cv), json!({}));
    wait_run(&admin, &run, &["applying"], &logs);
    drop(op);
    let op2 = cluster.operator_with(
        "terrace-operator-node-2",
        &node.operator_env(&format!(
            "http://{}:{}",
            node.gateway,
            url.rsplit(':').next().unwrap_or_default()
        )),
    );
    let logs2 = || RealCluster::logs_of(&[&api_c, &op2]);
    let done = wait_run(&admin, &run, &["applied", "errored"], &logs2);
    assert_eq!(
        done["data"]["attributes"]["status"],
        "applied",
        "{}",
        logs2()
    );
    // One apply Pod: scheduled once (a second Pod of the deterministic name would be
    // scheduled again; the Pod itself may be gone already, let go of after the run).
    let pod = format!("{}-apply", run.to_ascii_lowercase());
    let scheduled = cluster.kubectl_ok(&[
        "get",
        "events",
        "-n",
        &org,
        "--field-selector",
        &format!("involvedObject.name={pod},reason=Scheduled"),
        "-o",
        "name",
    ]);
    assert_eq!(scheduled.lines().count(), 1, "one apply Pod: {scheduled}");
    lost_node_keeps_the_state(&cluster, &node, &admin, &org, &logs2);
}

/// A configuration whose apply takes a while (a provisioner sleeps).
const SLOW: &str = "resource \"terraform_data\" \"slow\" {\n  input = \"slow\"\n  provisioner \"local-exec\" { command = \"sleep 20\" }\n}\n";

/// A cancel during an apply: the engine is interrupted, the run ends canceled or errored,
/// and what the apply wrote stays the workspace's state.
fn cancel_during_an_apply(admin: &Api, org: &str, logs: &dyn Fn() -> String) {
    let ws = admin.create_workspace(org, json!({"name": "canceled", "auto-apply": true}));
    let cv = admin.upload_config(&ws, &[("main.tf", SLOW)]);
    let run = admin.queue(&ws, Some(&cv), json!({}));
    wait_run(admin, &run, &["applying"], logs);
    std::thread::sleep(Duration::from_secs(3));
    let r = admin.post(&format!("/api/v2/runs/{run}/actions/cancel"), &json!({}));
    assert_eq!(r.status, 202, "{:?}", r.body);
    let done = wait_run(admin, &run, &["canceled", "errored"], logs);
    let status = done["data"]["attributes"]["status"]
        .as_str()
        .unwrap_or_default();
    assert!(matches!(status, "canceled" | "errored"), "{done}");
    let locked =
        admin.get(&format!("/api/v2/workspaces/{ws}")).body["data"]["attributes"]["locked"].clone();
    assert_eq!(locked, false, "the workspace is free again");
}

fn wait_run(api: &Api, run: &str, done: &[&str], logs: &dyn Fn() -> String) -> Value {
    api.wait_run(run, done, Duration::from_secs(240))
        .map(|data| json!({ "data": data }))
        .unwrap_or_else(|| {
            let r = api.get(&format!("/api/v2/runs/{run}"));
            panic!("run {run} never reached {done:?}: {:?}\n{}", r.body, logs())
        })
}

/// A new workspace `name` of `org` with a one-resource configuration, and a plan-only run
/// of it, ended: the workspace's and configuration version's IDs, the run's, and the run.
fn plan_only(
    admin: &Api,
    org: &str,
    name: &str,
    logs: &dyn Fn() -> String,
) -> (String, String, String, Value) {
    let ws = admin.create_workspace(org, json!({"name": name}));
    let cv = admin.upload_config(
        &ws,
        &[(
            "main.tf",
            "resource \"terraform_data\" \"x\" { input = 1 }\n",
        )],
    );
    let run = admin.queue(&ws, Some(&cv), json!({"plan-only": true}));
    let done = wait_run(admin, &run, &["planned_and_finished", "errored"], logs);
    (ws, cv, run, done)
}

/// Issue 40 §3: in a namespace that enforces Pod Security `restricted` (a common tenant
/// setting) a run and a module test run as anywhere else; a Pod template the level
/// refuses errors its run at once with the API server's words, and frees the workspace.
fn restricted_namespace(
    cluster: &RealCluster,
    admin: &Api,
    org: &str,
    tf: &Terraform,
    work: &Path,
    logs: &dyn Fn() -> String,
) {
    cluster.kubectl_ok(&[
        "label",
        "namespace",
        org,
        "pod-security.kubernetes.io/enforce=restricted",
        "--overwrite",
    ]);
    let (ws, cv, _, done) = plan_only(admin, org, "restricted", logs);
    assert_eq!(
        done["data"]["attributes"]["status"], "planned_and_finished",
        "{done}"
    );
    let m = work.join("greeter");
    let out = tf.run(
        &m,
        &["test", &format!("-cloud-run={CLI_HOST}/{org}/greeter/aws")],
    );
    assert!(
        out.status.success(),
        "a test run in restricted: {}",
        text(&out)
    );

    // A template that asks for what the level forbids: refused, said, and over.
    cluster.kubectl_ok(&[
        "patch",
        "organization",
        org,
        "--type=merge",
        "-p",
        &json!({"spec": {"settings": {"testRuns": {"podTemplate": {
            "containerSecurityContext": {"allowPrivilegeEscalation": true}}}}}})
        .to_string(),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    let run = admin.queue(&ws, Some(&cv), json!({}));
    wait_run(admin, &run, &["errored"], logs);
    let message = run_message(cluster, org, &run);
    assert!(
        message.contains("the cluster refused the plan Pod") && message.contains("PodSecurity"),
        "{message}"
    );
    let shown = admin.get(&format!("/api/v2/workspaces/{ws}"));
    assert_eq!(
        shown.body["data"]["attributes"]["locked"], false,
        "the refused run freed the workspace: {message}"
    );
    let log = admin.get_text(&format!("/api/v2/runs/{run}/plan"));
    let events = cluster.kubectl_ok(&["get", "events.events.k8s.io", "-n", org, "-o", "json"]);
    assert!(
        events.contains("PodRefused") && events.contains("PodSecurity"),
        "the refusal is said in an Event: {events}\n{log:?}"
    );
    cluster.kubectl_ok(&[
        "patch",
        "organization",
        org,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/settings/testRuns/podTemplate/containerSecurityContext"}]"#,
    ]);
}

/// Issue 40 §4: the engine image's registry answers 503 once. The kubelet pulls again
/// after its back-off, and the run waits and then plans: one blip is not a failure.
fn an_image_pull_that_fails_once(
    cluster: &RealCluster,
    node: &RealNode,
    admin: &Api,
    org: &str,
    logs: &dyn Fn() -> String,
) {
    let dir = tempfile::tempdir().expect("archive dir");
    let archive = dir.path().join("engine.tar");
    node.export_image(&node.engine_image, &archive);
    let registry = terrace_tests::registry::FlakyRegistry::serve(&archive);
    let image = format!("{}/terrace/flaky-engine:1", registry.host);
    let settings = |engine: Value, policy: Value| {
        json!({"spec": {"settings": {"testRuns": {"engineImage": engine,
            "podTemplate": {"imagePullPolicy": policy}}}}})
        .to_string()
    };
    cluster.kubectl_ok(&[
        "patch",
        "organization",
        org,
        "--type=merge",
        "-p",
        &settings(json!(image), json!("IfNotPresent")),
    ]);
    std::thread::sleep(Duration::from_secs(2));
    let (_, _, run, done) = plan_only(admin, org, "pulled", logs);
    let seen = registry
        .requests
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    assert_eq!(
        done["data"]["attributes"]["status"],
        "planned_and_finished",
        "{}\n{seen:?}",
        run_message(cluster, org, &run)
    );
    assert!(
        registry
            .manifest_requests
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 2,
        "the first pull failed and a second one came: {seen:?}"
    );
    cluster.kubectl_ok(&[
        "patch",
        "organization",
        org,
        "--type=merge",
        "-p",
        &settings(Value::Null, Value::Null),
    ]);
}

/// Issue 40 §5: the node running an apply is lost after the apply created its first
/// resource. The snapshot the runner took is the workspace's state, and the run errors
/// saying the node was lost. Then the node comes back for what follows.
fn lost_node_keeps_the_state(
    cluster: &RealCluster,
    node: &RealNode,
    admin: &Api,
    org: &str,
    logs: &dyn Fn() -> String,
) {
    let ws = admin.create_workspace(org, json!({"name": "lost", "auto-apply": true}));
    let cv = admin.upload_config(&ws,
        &[(
            "main.tf",
            "resource \"terraform_data\" \"first\" { input = \"created\" }\nresource \"terraform_data\" \"second\" {\n  depends_on = [terraform_data.first]\n  provisioner \"local-exec\" { command = \"sleep 300\" }\n}\n",
        )],
    );
    let run = admin.queue(&ws, Some(&cv), json!({}));
    let snapshot = eventually(Duration::from_secs(240), || {
        let r = admin.get(&format!("/api/v2/workspaces/{ws}/current-state-version"));
        (r.status == 200).then_some(r.body)
    })
    .unwrap_or_else(|| panic!("no snapshot of the apply's state\n{}", logs()));
    let status =
        admin.get(&format!("/api/v2/runs/{run}")).body["data"]["attributes"]["status"].clone();
    assert_eq!(status, "applying", "the snapshot came while applying");
    let down = node.script("down", &[]);
    assert!(
        down.status.success(),
        "node down: {}",
        String::from_utf8_lossy(&down.stderr)
    );
    wait_run(admin, &run, &["errored"], logs);
    let message = run_message(cluster, org, &run);
    assert!(
        message.contains("the node running the apply was lost"),
        "{message}\n{}",
        logs()
    );
    let current = admin.get(&format!("/api/v2/workspaces/{ws}/current-state-version"));
    assert_eq!(
        current.body["data"]["id"], snapshot["data"]["id"],
        "the last snapshot is the workspace's state"
    );
    let download = current.body["data"]["attributes"]["hosted-state-download-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = &download[download.find("/api/v2/").unwrap_or(0)..];
    let (_, state) = admin.get_text(path);
    assert!(
        state.contains("\"first\"") && state.contains("created"),
        "{state}"
    );
    node.up();
}

/// The run's `status.message`, as `kubectl get runs` shows it.
fn run_message(cluster: &RealCluster, org: &str, run: &str) -> String {
    cluster.kubectl_ok(&[
        "get",
        "run",
        &run.to_ascii_lowercase(),
        "-n",
        org,
        "-o",
        "jsonpath={.status.message}",
    ])
}
