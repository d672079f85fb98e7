//! The real-cluster tier (issue 25): an operator restart does not cost the runs in
//! flight. On a real API server the new operator's caches start empty and fill from a
//! list; a controller that decided from the empty cache errored every run with "the
//! workspace is gone" and deleted its Pod. Skipped (one line) without
//! `TERRACE_E2E_KUBECONFIG`.

use std::time::Duration;

use serde_json::json;
use terrace_tests::real::{RELEASE_NS, RealCluster, eventually};

/// The run's `(status, message, plan Pod)` as the cluster has it.
fn run_state(cluster: &RealCluster, ns: &str, object: &str) -> (String, String, String) {
    let out = cluster.kubectl_ok(&[
        "get",
        "run",
        object,
        "-n",
        ns,
        "-o",
        "jsonpath={.status.status}|{.status.message}|{.status.plan.podName}",
    ]);
    let mut parts = out.splitn(3, '|').map(str::to_owned);
    (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    )
}

#[test]
fn a_run_in_flight_survives_an_operator_restart() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (api, url) = cluster.api_server();
    let first = cluster.operator(&url, "terrace-operator-restart-a");
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("restart"));
    let ws = admin.first_workspace(&org, json!({"name": "app"}), || {
        RealCluster::logs_of(&[&api, &first])
    });
    let run = admin.queue_run(&ws);
    let object = run.to_ascii_lowercase();
    // The plan Pod exists (Pending: no node runs it) and the run is planning.
    let planning = eventually(Duration::from_secs(60), || {
        let (status, _, pod) = run_state(&cluster, &org, &object);
        (status == "planning" && !pod.is_empty()).then_some(pod)
    })
    .unwrap_or_else(|| {
        panic!(
            "the run never started planning: {:?}\n{}",
            run_state(&cluster, &org, &object),
            RealCluster::logs_of(&[&api, &first])
        )
    });

    // No node runs it (without a scheduler the Pod is not scheduled yet; with the
    // real-node tier's scheduler, no node matches its selector): the run says so.
    let waiting = eventually(Duration::from_secs(30), || {
        let (_, message, _) = run_state(&cluster, &org, &object);
        message
            .starts_with("waiting for a node: ")
            .then_some(message)
    });
    assert!(
        waiting.is_some(),
        "the run does not say what it waits for: {:?}",
        run_state(&cluster, &org, &object)
    );
    // So does the plan's log, which the CLI follows.
    let plan = admin.get(&format!("/api/v2/runs/{run}/plan"));
    let log_url = plan.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = log_url.strip_prefix(url.as_str()).unwrap_or(&log_url);
    // One line, said once (the scheduler's words may change between reads).
    let anonymous = terrace_tests::Api::at(&url, None);
    let log = eventually(Duration::from_secs(30), || {
        let (status, log) = anonymous.get_text(path);
        (status == 200
            && log.starts_with("\u{2}terrace: waiting for a node: ")
            && log.ends_with('\n')
            && log.lines().count() == 1)
            .then_some(())
    });
    assert!(
        log.is_some(),
        "the plan's log while its Pod waits: {:?}",
        anonymous.get_text(path)
    );

    // A restart: the first operator goes (without handing its lease over), another takes
    // over once the lease expires.
    drop(first);
    let second = cluster.operator(&url, "terrace-operator-restart-b");
    let leader = eventually(Duration::from_secs(60), || {
        let holder = cluster.kubectl_ok(&[
            "get",
            "lease",
            "terrace-operator",
            "-n",
            RELEASE_NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        (holder.trim() == "terrace-operator-restart-b").then_some(())
    });
    assert!(
        leader.is_some(),
        "the new operator never led:\n{}",
        second.log()
    );
    // The new operator is reconciling: a workspace applied with kubectl gets its ID.
    cluster.apply(&format!(
        "apiVersion: terrace.dev/v1alpha1\nkind: Workspace\nmetadata: {{name: probe, namespace: {org}}}\nspec: {{name: probe}}\n"
    ));
    let working = eventually(Duration::from_secs(60), || {
        let id = cluster.kubectl_ok(&[
            "get",
            "workspace",
            "probe",
            "-n",
            &org,
            "-o",
            "jsonpath={.status.id}",
        ]);
        (!id.trim().is_empty()).then_some(())
    });
    assert!(
        working.is_some(),
        "the new operator does not reconcile:\n{}",
        second.log()
    );
    // Give its run controller a moment on the run, then: still planning, same Pod.
    std::thread::sleep(Duration::from_secs(3));
    let (status, message, pod) = run_state(&cluster, &org, &object);
    assert_eq!(
        (status.as_str(), pod.as_str()),
        ("planning", planning.as_str()),
        "the restart cost the run: {message}\n{}",
        second.log()
    );
    let pods = cluster.kubectl_ok(&["get", "pod", &planning, "-n", &org, "-o", "name"]);
    assert_eq!(pods.trim(), format!("pod/{planning}"));
    drop(second);
    drop(api);
}
