//! Policy sets on a real kube-apiserver (the real-cluster tier, see
//! `terrace_tests::real`): the PolicySet CRD's validations as the real API server runs
//! them, the operator compiling each set under the chart's RBAC (Ready, or False with the
//! compiler's words), a run's post-plan task stage from the API server's own identity,
//! and the `override-policy` verb of the chart's user roles as `kubectl auth can-i` sees
//! it. Skipped (one line) without `TERRACE_E2E_KUBECONFIG`.

use std::time::Duration;

use serde_json::json;
use terrace_tests::real::{RealCluster, eventually};

fn sets(ns: &str) -> String {
    format!(
        r#"
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: tags
  namespace: {ns}
spec:
  name: tags
  global: true
  overridable: true
  parameters:
    - key: owner
      value: platform
  policies:
    - name: owned
      enforcementLevel: mandatory
      query: data.terraform.tags.deny
      rego: |
        package terraform.tags

        import rego.v1

        deny contains "no owner" if data.parameters.owner == ""
---
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: broken
  namespace: {ns}
spec:
  name: broken
  workspaces: ["nowhere"]
  policies:
    - name: half
      query: data.half.deny
      rego: "package half\ndeny contains x if {{"
"#
    )
}

#[test]
fn policy_sets_compile_and_runs_get_their_stage() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (api, url) = cluster.api_server();
    let operator = cluster.operator(&url, "terrace-operator-tier-policies");
    let logs = || RealCluster::logs_of(&[&api, &operator]);
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("pol"));
    let ws = admin.first_workspace(&org, json!({"name": "app"}), logs);
    cluster.apply(&sets(&org));

    // The real API server refuses what the CRD's rules forbid.
    let both = format!(
        "apiVersion: terrace.dev/v1alpha1\nkind: PolicySet\nmetadata:\n  name: both\n  namespace: {org}\nspec:\n  name: both\n  policies:\n    - name: p\n      query: data.p.deny\n      rego: \"package p\"\n      regoFrom: {{name: x, key: p.rego}}\n"
    );
    let path = cluster.path().join("both.yaml");
    std::fs::write(&path, both).expect("manifest");
    let refused = cluster.kubectl(&["apply", "-f", path.to_str().unwrap_or_default()]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("give exactly one of rego and regoFrom"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // The operator compiles each set.
    let ready = |name: &str| {
        cluster.kubectl_ok(&[
            "get",
            "policyset",
            name,
            "-n",
            &org,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
    };
    let seen = eventually(Duration::from_secs(60), || {
        (ready("tags") == "True" && ready("broken") == "False").then_some(())
    });
    assert!(
        seen.is_some(),
        "tags {:?}, broken {:?}\n{}",
        ready("tags"),
        ready("broken"),
        logs()
    );
    let why = cluster.kubectl_ok(&["get", "policyset", "broken", "-n", &org, "-o", "yaml"]);
    assert!(why.contains("does not compile"), "{why}");

    // A run of a workspace the set applies to has its post-plan stage from the start
    // (the API server lists policy sets under its own identity); pending until its plan
    // is made (this cluster runs no Pods).
    let run = admin.queue_run(&ws);
    let shown = admin.get(&format!("/api/v2/runs/{run}?include=task_stages"));
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let stage = shown.body["data"]["relationships"]["task-stages"]["data"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(stage.starts_with("ts-"), "{:?}\n{}", shown.body, logs());
    assert_eq!(shown.body["included"][0]["attributes"]["status"], "pending");
    let evals = admin.get(&format!("/api/v2/task-stages/{stage}/policy-evaluations"));
    assert_eq!(evals.status, 200, "{:?}", evals.body);
    assert_eq!(evals.body["data"][0]["attributes"]["status"], "pending");
    let early = admin.post(
        &format!("/api/v2/task-stages/{stage}/actions/override"),
        &json!({}),
    );
    assert_eq!(early.status, 409, "{:?}", early.body);

    // The override verb: workspace admins and owners, not lockers or readers.
    for (sa, role, answer) in [
        ("ov-admin", "terrace-workspace-admin", "yes"),
        ("ov-owner", "terrace-owner", "yes"),
        ("ov-locker", "terrace-workspace-locker", "no"),
        ("ov-reader", "terrace-workspace-reader", "no"),
    ] {
        cluster.kubectl_ok(&["create", "serviceaccount", sa, "-n", &org]);
        cluster.kubectl_ok(&[
            "create",
            "rolebinding",
            sa,
            "-n",
            &org,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={org}:{sa}"),
        ]);
        let out = cluster.kubectl(&[
            "auth",
            "can-i",
            "override-policy",
            "workspaces",
            "-n",
            &org,
            "--as",
            &format!("system:serviceaccount:{org}:{sa}"),
        ]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            answer,
            "{role}"
        );
    }
    let reads = cluster.kubectl(&[
        "auth",
        "can-i",
        "list",
        "policysets",
        "-n",
        &org,
        "--as",
        &format!("system:serviceaccount:{org}:ov-reader"),
    ]);
    assert_eq!(String::from_utf8_lossy(&reads.stdout).trim(), "yes");

    // Policies, a set and a sensitive parameter made through the API, under the chart's
    // identities: the set is Ready once its policy's Rego is uploaded.
    let p = admin.post(
        &format!("/api/v2/organizations/{org}/policies"),
        &json!({"data": {"type": "policies", "attributes": {"name": "owned", "kind": "opa",
            "query": "data.owned.deny", "enforcement-level": "advisory"}}}),
    );
    assert_eq!(p.status, 201, "{:?}\n{}", p.body, logs());
    let pol = p.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let up = admin.put_bytes(
        &format!("/api/v2/policies/{pol}/upload"),
        b"package owned\n\nimport rego.v1\n\ndeny contains \"x\" if false\n".to_vec(),
    );
    assert_eq!(up.status, 204, "{:?}", up.body);
    let set = admin.post(
        &format!("/api/v2/organizations/{org}/policy-sets"),
        &json!({"data": {"type": "policy-sets", "attributes": {"name": "api-made", "kind": "opa"},
            "relationships": {"policies": {"data": [{"type": "policies", "id": pol}]},
                "workspaces": {"data": [{"type": "workspaces", "id": ws}]}}}}),
    );
    assert_eq!(set.status, 201, "{:?}\n{}", set.body, logs());
    let set_id = set.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let param = admin.post(
        &format!("/api/v2/policy-sets/{set_id}/parameters"),
        &json!({"data": {"type": "vars", "attributes": {"key": "token", "value": "s3cret",
            "category": "policy-set", "sensitive": true}}}),
    );
    assert_eq!(param.status, 201, "{:?}\n{}", param.body, logs());
    let object = cluster
        .kubectl_ok(&[
            "get",
            "policysets",
            "-n",
            &org,
            "-l",
            &format!("terrace.dev/id={set_id}"),
            "-o",
            "name",
        ])
        .trim()
        .trim_start_matches("policyset.terrace.dev/")
        .to_owned();
    let seen = eventually(Duration::from_secs(60), || {
        (ready(&object) == "True").then_some(())
    });
    assert!(seen.is_some(), "{:?}\n{}", ready(&object), logs());
    let stored = cluster.kubectl_ok(&["get", "policyset", &object, "-n", &org, "-o", "yaml"]);
    assert!(!stored.contains("s3cret"), "{stored}");
    let del = admin.call("DELETE", &format!("/api/v2/policy-sets/{set_id}"), None);
    assert_eq!(del.status, 204, "{:?}", del.body);

    let logs = logs();
    assert!(!logs.contains("forbidden"), "{logs}");
}
