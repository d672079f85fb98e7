//! The real-cluster tier (issue 25, finding 8): two API server replicas, each serving from
//! its own watch-fed index, as the chart runs them. Skipped (one line) without
//! `TERRACE_E2E_KUBECONFIG`.

use serde_json::json;
use terrace_tests::real::RealCluster;

/// 200 times: a workspace created through one replica is read at once through the other,
/// by ID and by name, and never answers 404.
#[test]
fn a_workspace_created_through_one_replica_is_read_at_once_through_the_other() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (one, url_one) = cluster.api_server();
    let (other, url_other) = cluster.api_server();
    let operator = cluster.operator(&url_one, "terrace-operator-tier-replicas");
    let logs = || RealCluster::logs_of(&[&one, &other, &operator]);
    let writer = cluster.admin(&url_one);
    let reader = cluster.admin(&url_other);
    let org = writer.create_org(&RealCluster::unique("replicas"));
    writer.first_workspace(&org, json!({"name": "first"}), logs);

    let mut misses = Vec::new();
    for i in 0..200 {
        let name = format!("pair-{i:03}");
        let id = writer.create_workspace(&org, json!({"name": name}));
        for path in [
            format!("/api/v2/workspaces/{id}"),
            format!("/api/v2/organizations/{org}/workspaces/{name}"),
        ] {
            let read = reader.get(&path);
            if read.status != 200 {
                misses.push(format!("{path}: {} {:?}", read.status, read.body));
            }
        }
    }
    assert!(
        misses.is_empty(),
        "{} reads through the other replica failed:\n{}\n{}",
        misses.len(),
        misses.join("\n"),
        logs()
    );
}
