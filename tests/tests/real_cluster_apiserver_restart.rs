//! The real-cluster tier (issue 25): the API server's index follows the cluster again
//! promptly after kube-apiserver restarts. Its watches used kube's default backoff
//! (800 ms doubling to 30 s), so after a restart a workspace applied with kubectl answered
//! 404 for about 50 s, and a create in that window answered 201 for an object the same
//! server then called 404. A run in flight goes on through the 30 s outage (a blip once
//! cost every run in flight). Runs when the tier's kubeconfig is a control plane of
//! `control-plane` on this machine (its `pids/kube-apiserver` beside the kubeconfig), whose
//! kube-apiserver the test stops and starts again with the same command line.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use terrace_tests::real::{RealCluster, eventually};

/// Stops the kube-apiserver whose PID is in `pids` for `down`, then starts it again with
/// the command line it had; answers once it is ready again. The new process is the
/// cluster's, not the test's: it outlives the test (the control plane's `down` stops it by
/// the PID file), so it is never waited for.
#[allow(clippy::zombie_processes)]
fn restart_apiserver(cluster: &RealCluster, pids: &Path, down: Duration) {
    let pid = std::fs::read_to_string(pids.join("kube-apiserver")).expect("kube-apiserver pid");
    let pid = pid.trim().to_owned();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).expect("its command line");
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let log = pids.parent().expect("dir").join("logs/kube-apiserver.log");
    // As a node loses it: no graceful shutdown (which waits for its watches to drain).
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let gone = eventually(Duration::from_secs(30), || {
        (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    assert!(gone.is_some(), "kube-apiserver did not stop");
    std::thread::sleep(down);
    let out = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .expect("log");
    let child = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .spawn()
        .expect("start kube-apiserver again");
    std::fs::write(pids.join("kube-apiserver"), child.id().to_string()).expect("pid file");
    let ready = eventually(Duration::from_secs(120), || {
        cluster
            .kubectl(&["get", "--raw", "/readyz"])
            .status
            .success()
            .then_some(())
    });
    assert!(ready.is_some(), "kube-apiserver did not come back");
}

#[test]
fn a_30s_apiserver_outage_costs_no_run_and_the_index_catches_up_promptly() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let pids = cluster
        .kubeconfig
        .parent()
        .map(|d| d.join("pids"))
        .filter(|p| p.join("kube-apiserver").exists());
    let Some(pids) = pids else {
        eprintln!("the tier's cluster is not a local control plane: the restart test is skipped");
        return;
    };
    let (api, url) = cluster.api_server();
    let operator = cluster.operator(&url, "terrace-operator-apiserver-restart");
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("blip"));
    admin.first_workspace(&org, json!({"name": "before"}), || {
        RealCluster::logs_of(&[&api, &operator])
    });

    // A run in flight through the blip (issue 25: a control-plane blip cost the runs).
    let ws = admin.create_workspace(&org, json!({"name": "busy"}));
    let run = admin.queue_run(&ws).to_ascii_lowercase();
    let status = || {
        cluster.kubectl_ok(&[
            "get",
            "run",
            &run,
            "-n",
            &org,
            "-o",
            "jsonpath={.status.status}|{.status.message}",
        ])
    };
    let planning = eventually(Duration::from_secs(60), || {
        status().starts_with("planning|").then_some(())
    });
    assert!(planning.is_some(), "the run never planned: {}", status());

    restart_apiserver(&cluster, &pids, Duration::from_secs(30));
    let back = Instant::now();
    // An operator that lost its lease meanwhile exits (by design: a standby or its Pod's
    // restart takes over); here nothing restarts it, so the test does, as a kubelet would.
    let mut operator = operator;
    if !operator.running() {
        operator = cluster.operator(&url, "terrace-operator-apiserver-restart");
    }

    // A workspace applied with kubectl right after: the JSON:API shows it soon.
    cluster.apply(&format!(
        "apiVersion: terrace.dev/v1alpha1\nkind: Workspace\nmetadata: {{name: after, namespace: {org}}}\nspec: {{name: after}}\n"
    ));
    let seen = eventually(Duration::from_secs(20), || {
        (admin
            .get(&format!("/api/v2/organizations/{org}/workspaces/after"))
            .status
            == 200)
            .then_some(())
    });
    assert!(
        seen.is_some(),
        "a workspace applied after the restart was still 404 after 20 s\n{}",
        api.log()
    );
    eprintln!(
        "seen through the JSON:API {:?} after the API server was back",
        back.elapsed()
    );
    // And a create through the API reads its own write at once.
    let r = admin.post(
        &format!("/api/v2/organizations/{org}/workspaces"),
        &json!({"data": {"type": "workspaces", "attributes": {"name": "created-after"}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = r.body["data"]["id"].as_str().unwrap_or_default();
    assert_eq!(admin.get(&format!("/api/v2/workspaces/{id}")).status, 200);
    // The run went on through the blip: still planning, its Pod waiting for a node.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        status().starts_with("planning|waiting for a node"),
        "{}\n{}",
        status(),
        operator.log()
    );
    drop(operator);
    drop(api);
}
