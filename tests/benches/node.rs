//! Benchmark of issue 40 on the real node: a one-resource speculative plan, from the run's
//! creation to `planned_and_finished`, median of `TERRACE_BENCH_REPS` (10), against what
//! the same work costs without terrace, measured in the same run: a local `terraform init
//! && terraform plan` of the same configuration plus the create-to-completion time of a
//! bare Pod on the same node (the engine image running `true`). Target: ≤ 1.5x.
//!
//! Run with the tier's node (`.ci/run` sets these; see tests/src/real.rs):
//! `TERRACE_E2E_KUBECONFIG=… TERRACE_E2E_NODE_SCRIPT=… TERRACE_E2E_NODE_DIR=…
//! TERRACE_E2E_NODE_GATEWAY=… TERRACE_E2E_NODE_TERRACE_IMAGE=… TERRACE_E2E_NODE_ENGINE_IMAGE=…
//! cargo bench --profile dev -p terrace-tests --bench node`.

use std::time::{Duration, Instant};

use serde_json::json;
use terrace_tests::bench::{env_usize, median, secs};
use terrace_tests::real::{RealCluster, RealNode, eventually};
use terrace_tests::{Terraform, text};

const CONFIG: &str = "resource \"terraform_data\" \"x\" { input = \"bench\" }\n";

fn main() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let Some(node) = RealNode::from_env() else {
        return;
    };
    let reps = env_usize("TERRACE_BENCH_REPS", 10);
    let (api_c, op, url) = cluster.on_node(&node, "terrace-operator-bench");
    let logs = || RealCluster::logs_of(&[&api_c, &op]);
    let admin = cluster.admin(&url);
    let org = RealCluster::unique("bench");
    admin.create_org(&org);
    let ws = admin.first_workspace(&org, json!({"name": "bench"}), logs);

    // Baseline 1: the same plan, locally.
    let tf = Terraform::for_api(cluster.path(), &url, &cluster.admin_token);
    let local_dir = tempfile::tempdir().expect("dir");
    std::fs::write(local_dir.path().join("main.tf"), CONFIG).expect("main.tf");
    let mut local = Vec::new();
    for _ in 0..reps {
        let _ = std::fs::remove_dir_all(local_dir.path().join(".terraform"));
        let start = Instant::now();
        for args in [&["init", "-input=false"][..], &["plan", "-input=false"][..]] {
            let out = tf.run(local_dir.path(), args);
            assert!(out.status.success(), "{}", text(&out));
        }
        local.push(start.elapsed());
    }

    // Baseline 2: a bare Pod on the node, created to completed.
    let ns = org.clone();
    let mut bare = Vec::new();
    for i in 0..reps {
        let name = format!("bare-{i}");
        let manifest = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": node.engine_image, "imagePullPolicy": "Never",
                "command": ["true"],
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true, "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"}}}]}
        });
        let start = Instant::now();
        cluster.apply(&manifest.to_string());
        let done = eventually(Duration::from_secs(120), || {
            let phase = cluster.kubectl_ok(&[
                "get",
                "pod",
                &name,
                "-n",
                &ns,
                "-o",
                "jsonpath={.status.phase}",
            ]);
            (phase == "Succeeded").then_some(())
        });
        bare.push(start.elapsed());
        assert!(done.is_some(), "the bare Pod ran");
    }

    // The run: created through the API to planned_and_finished.
    let cv = {
        let r = admin.post(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            &json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": false, "speculative": true}}}),
        );
        let url = r.body["data"]["attributes"]["upload-url"]
            .as_str()
            .unwrap_or_default();
        let path = &url[url.find("/api/v2/").expect("upload path")..];
        assert_eq!(
            admin.put_unauthenticated(path, terrace_tests::targz(&[("main.tf", CONFIG)])),
            200
        );
        r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
    };
    let mut runs = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let r = admin.post(
            "/api/v2/runs",
            &json!({"data": {"type": "runs", "attributes": {"plan-only": true}, "relationships": {
                "workspace": {"data": {"type": "workspaces", "id": ws}},
                "configuration-version": {"data": {"type": "configuration-versions", "id": cv}},
            }}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
        let done = eventually(Duration::from_secs(180), || {
            let s = admin.get(&format!("/api/v2/runs/{id}")).body["data"]["attributes"]["status"]
                .as_str()
                .map(str::to_owned)?;
            matches!(s.as_str(), "planned_and_finished" | "errored").then_some(s)
        });
        runs.push(start.elapsed());
        assert_eq!(done.as_deref(), Some("planned_and_finished"), "{}", logs());
    }
    let (l, b, r) = (median(local), median(bare), median(runs));
    let baseline = l + b;
    println!(
        "local terraform init && plan: {:.2} s (median of {reps})",
        secs(l)
    );
    println!("bare Pod create to completed: {:.2} s", secs(b));
    println!(
        "speculative plan through terrace, queue to planned_and_finished: {:.2} s",
        secs(r)
    );
    println!(
        "ratio: {:.2}x of local plan + bare Pod ({:.2} s) (target <= 1.5x)",
        secs(r) / secs(baseline),
        secs(baseline)
    );
}
