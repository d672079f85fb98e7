//! Bounded history on a real kube-apiserver (the real-cluster tier, see
//! `terrace_tests::real`): with the organization keeping one run per workspace, the
//! operator archives older canceled runs into the cluster blob store under the chart's
//! RBAC (chunk Secrets written with server-side apply, runs deleted, the workspace's
//! status counting them), and the API server, under its own identity, still lists and
//! shows them. Skipped (one line) without `TERRACE_E2E_KUBECONFIG`.

use std::time::Duration;

use serde_json::json;
use terrace_tests::real::{RealCluster, eventually};

#[test]
fn older_runs_are_archived_under_the_charts_rbac() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (api, url) = cluster.api_server();
    let operator = cluster.operator(&url, "terrace-operator-tier-history");
    let logs = || RealCluster::logs_of(&[&api, &operator]);
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("hist"));
    cluster.kubectl_ok(&[
        "patch",
        "organizations.terrace.dev",
        &org,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"settings":{"history":{"runs":1}}}}"#,
    ]);
    let ws = admin.first_workspace(&org, json!({"name": "app"}), logs);

    // Three runs, each canceled while its Pod waits for a node (no kubelet here).
    let mut runs = Vec::new();
    for _ in 0..3 {
        let id = admin.queue_run(&ws);
        let status = |id: &str| {
            admin.get(&format!("/api/v2/runs/{id}")).body["data"]["attributes"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        eventually(Duration::from_secs(60), || {
            matches!(status(&id).as_str(), "plan_queued" | "planning").then_some(())
        })
        .unwrap_or_else(|| panic!("run {id} never queued: {}\n{}", status(&id), logs()));
        let r = admin.post(&format!("/api/v2/runs/{id}/actions/cancel"), &json!({}));
        assert_eq!(r.status, 202, "{:?}", r.body);
        eventually(Duration::from_secs(60), || {
            (status(&id) == "canceled").then_some(())
        })
        .unwrap_or_else(|| panic!("run {id} never canceled: {}\n{}", status(&id), logs()));
        runs.push(id);
    }

    // One stays a Run; two are archived.
    let live = || {
        cluster
            .kubectl_ok(&["get", "runs", "-n", &org, "-o", "name"])
            .lines()
            .count()
    };
    eventually(Duration::from_secs(60), || (live() == 1).then_some(()))
        .unwrap_or_else(|| panic!("runs in the cluster: {}\n{}", live(), logs()));
    let archived = cluster.kubectl_ok(&[
        "get",
        "workspaces",
        "-n",
        &org,
        "-o",
        "jsonpath={.items[0].status.archivedRuns}",
    ]);
    assert_eq!(archived, "2", "{}", logs());

    let list = admin.get(&format!("/api/v2/workspaces/{ws}/runs"));
    assert_eq!(list.status, 200, "{:?}", list.body);
    let ids: Vec<&str> = list.body["data"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["id"].as_str()).collect())
        .unwrap_or_default();
    let newest_first: Vec<&str> = runs.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first, "{}", logs());
    let oldest = admin.get(&format!("/api/v2/runs/{}", runs[0]));
    assert_eq!(oldest.status, 200, "{:?}", oldest.body);
    assert_eq!(oldest.body["data"]["attributes"]["status"], "canceled");
    let refused: Vec<String> = operator
        .log()
        .lines()
        .filter(|l| l.contains("history") && l.to_ascii_lowercase().contains("forbidden"))
        .map(str::to_owned)
        .collect();
    assert!(
        refused.is_empty(),
        "a call the chart does not grant: {refused:?}"
    );
}
