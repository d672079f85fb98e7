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
    std::fs::create_dir_all(dir).expect("config dir");
    std::fs::write(
        dir.join("main.tf"),
        format!(
            "terraform {{\n  cloud {{\n    hostname     = \"{CLI_HOST}\"\n    organization = \"{org}\"\n    workspaces {{ name = \"{workspace}\" }}\n  }}\n}}\n{body}"
        ),
    )
    .expect("main.tf");
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
    let _ = eventually(Duration::from_secs(1), || None::<()>);
}
