//! The real-cluster tier (issue 25): authorization round trips per request, counted by
//! kube-apiserver itself (`apiserver_request_total` of TokenReviews, SubjectAccessReviews
//! and SelfSubjectRulesReviews). A test binary of its own, so no other test's requests
//! run while it counts. Skipped (one line) without `TERRACE_E2E_KUBECONFIG`.

use std::time::Duration;

use serde_json::json;
use terrace_tests::real::RealCluster;

/// A ServiceAccount bound to the chart's `terrace-workspace-reader` in one organization
/// costs at most two round trips (a TokenReview and one rules review) for a GET of a
/// workspace and for a page of 20 with every permission flag, with cold caches; none warm.
/// Before the rules review: 13 and 156.
#[test]
fn a_request_costs_at_most_two_authorization_round_trips() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (api, url) = cluster.api_server();
    let operator = cluster.operator(&url, "terrace-operator-tier-authz");
    let logs = || RealCluster::logs_of(&[&api, &operator]);
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("authz"));
    let ws = admin.first_workspace(&org, json!({"name": "w00"}), logs);
    for i in 1..20 {
        admin.create_workspace(&org, json!({"name": format!("w{i:02}")}));
    }

    let sa = RealCluster::unique("reader");
    cluster.kubectl_ok(&["create", "serviceaccount", &sa, "-n", &org]);
    cluster.kubectl_ok(&[
        "create",
        "rolebinding",
        &sa,
        "-n",
        &org,
        "--clusterrole=terrace-workspace-reader",
        &format!("--serviceaccount={org}:{sa}"),
    ]);
    let token = cluster.kubectl_ok(&["create", "token", &sa, "-n", &org]);
    let reader = terrace_tests::Api::at(&url, Some(token.trim()));
    for path in [
        format!("/api/v2/workspaces/{ws}"),
        format!("/api/v2/organizations/{org}/workspaces?page%5Bsize%5D=20"),
    ] {
        // Past the review caches' lifetime: cold.
        std::thread::sleep(terrace_api_server::auth::CACHE_TTL + Duration::from_secs(1));
        let before = cluster.reviews();
        let cold = reader.get(&path);
        let trips = cluster.reviews() - before;
        assert_eq!(cold.status, 200, "{path}: {:?}\n{}", cold.body, logs());
        assert!(trips <= 2.0, "{path}: {trips} round trips cold\n{}", logs());
        let flags = match &cold.body["data"] {
            serde_json::Value::Array(page) => {
                assert_eq!(page.len(), 20, "{path}");
                page[0]["attributes"]["permissions"].clone()
            }
            one => one["attributes"]["permissions"].clone(),
        };
        assert_eq!(flags["can-update"], false, "{path}: {flags}");
        assert_eq!(flags["can-queue-run"], false, "{path}: {flags}");
        let before = cluster.reviews();
        assert_eq!(reader.get(&path).status, 200);
        assert_eq!(cluster.reviews() - before, 0.0, "{path}: warm");
    }
}
