//! End-to-end test of issue 5's restart guarantee: `terrace dev` (API server, operator and
//! the simulator's kubelet in one process) is stopped with SIGTERM in the middle of a
//! test run and started again on the same data directory. Nothing is lost (the run is
//! still there, with the same Pod name) and nothing starts twice (one Pod was ever
//! created for it). The simulator's kubelet marks Pods that were running when it stopped
//! as Failed/NodeLost with their containers terminated (137, ContainerStatusUnknown), so
//! the run ends `errored` with a message saying the runner was lost instead of being
//! silently re-run.

use std::time::Duration;

use terrace_tests::{Api, Dev, have_kubectl, write_engine};

/// Sleeps ~3 s, then prints a real `test -json` pass summary.
const SLOW_PASS_ENGINE: &str = r#"#!/bin/sh
echo '{"@level":"info","@message":"OpenTofu 1.10.0","@module":"tofu.ui","type":"version","tofu":"1.10.0","ui":"1.2"}'
sleep 3
echo '{"@level":"info","@message":"Success! 1 passed, 0 failed.","@module":"tofu.ui","type":"test_summary","test_summary":{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0}}'
"#;

fn run_attr(api: &Api, t: &str, id: &str) -> serde_json::Value {
    let r = api.get(&format!("{t}/test-runs/{id}"));
    assert_eq!(r.status, 200, "show run: {:?}", r.body);
    r.body["data"]["attributes"].clone()
}

/// The TestRun object of run `id` (through kubectl), for its status.podName and message.
fn testrun_object(dev: &Dev, org: &str, id: &str) -> serde_json::Value {
    let out = dev.kubectl_ok(&["get", "testruns", "-n", org, "-o", "json"]);
    let list: serde_json::Value = serde_json::from_str(&out).expect("testruns JSON");
    let found: Vec<_> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["status"]["id"] == id)
        .cloned()
        .collect();
    assert_eq!(found.len(), 1, "one TestRun with ID {id}");
    found[0].clone()
}

fn pods_of(dev: &Dev, org: &str, id: &str) -> Vec<String> {
    let out = dev.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        org,
        "-l",
        &format!("terrace.dev/test-run={id}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    out.split_whitespace().map(str::to_owned).collect()
}

/// Copies the Kubernetes contract a controller relies on across its own restart: state
/// lives in the API objects (the TestRun's status.podName, the Pod owned by it), so a
/// restarted controller adopts the existing Pod instead of creating a second one; and a
/// Pod whose node lost its processes is Failed/NodeLost (kubelet/node controller), which
/// the run reports as errored with that reason.
#[test]
fn operator_restart_mid_run_loses_nothing_and_starts_nothing_twice() {
    if !have_kubectl() {
        eprintln!("kubectl is not installed: skipping");
        return;
    }
    let tools = tempfile::tempdir().expect("tempdir");
    let engine = write_engine(tools.path(), SLOW_PASS_ENGINE);
    let dev = Dev::start_with(&["--engine", &engine]);
    let api = Api::admin(&dev);
    let org = api.create_org("restart-org");
    let t = api.create_module(&org, "net", "aws");
    let cv = api.uploaded_cv(&t);
    let created = dev
        .eventually(Duration::from_secs(20), || {
            let r = api.create_test_run(&t, &cv);
            (r.status == 201).then_some(r)
        })
        .expect("a run on the uploaded configuration version");
    let id = created.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    dev.eventually(Duration::from_secs(30), || {
        (run_attr(&api, &t, &id)["status"] == "running").then_some(())
    })
    .unwrap_or_else(|| panic!("run never running: {}", dev.log()));
    let pod_before = testrun_object(&dev, &org, &id)["status"]["podName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !pod_before.is_empty(),
        "status.podName is set while running"
    );
    assert_eq!(pods_of(&dev, &org, &id), vec![pod_before.clone()]);

    let dev = dev.restart();
    let api = Api::admin(&dev);
    // The run is still there and reaches a final state.
    let done = dev
        .eventually(Duration::from_secs(60), || {
            let a = run_attr(&api, &t, &id);
            matches!(
                a["status"].as_str(),
                Some("finished" | "errored" | "canceled")
            )
            .then_some(a)
        })
        .unwrap_or_else(|| panic!("run never final after the restart: {}", dev.log()));
    let object = testrun_object(&dev, &org, &id);
    // The observed outcome: the Pod's processes died with the node; the simulator marks
    // its container terminated (exit 137, ContainerStatusUnknown, as the kubelet does for a
    // container whose state is lost), so the run errored saying the runner ended without
    // a report; it was not run a second time.
    assert_eq!(done["status"], "errored", "{done}");
    let message = object["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("without a report") && message.contains("ContainerStatusUnknown"),
        "message says the runner was lost: {message:?}"
    );
    assert!(
        done["status-timestamps"]["errored-at"].is_string(),
        "{done}"
    );
    assert_eq!(object["status"]["podName"], pod_before.as_str());
    // Exactly one Pod was ever created for the run (the kept one, or none once the
    // controller let it go — but never a second name).
    let pods = pods_of(&dev, &org, &id);
    assert!(
        pods.len() <= 1 && pods.iter().all(|p| *p == pod_before),
        "{pods:?}"
    );
    // Only one run exists on the module: nothing was re-queued.
    let listed = api.get(&format!("{t}/test-runs"));
    assert_eq!(
        listed.body["meta"]["pagination"]["total-count"], 1,
        "{:?}",
        listed.body
    );
}
