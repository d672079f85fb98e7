//! Least privilege for real (issue 6): the operator and the API server run as separate
//! processes against `terrace dev --cluster-only`, each with a token of the chart's own
//! ServiceAccount, bound only by the RBAC `helm template` renders from charts/terrace.
//! A workspace lock/unlock and a module test run must complete; a permission missing from
//! the chart fails them (the components' Kubernetes calls answer 403), and the test also
//! fails on any "forbidden" in either component's log.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use terrace_tests::{
    Api, Component, Dev, PASS_ENGINE, chart_rbac, free_port, have_kubectl, terrace_bin,
    write_engine,
};

const RELEASE_NS: &str = "terrace-system";

/// DIR/kubeconfig with the admin token replaced by `token`.
fn kubeconfig_for(dev: &Dev, token: &str, name: &str) -> PathBuf {
    let text = std::fs::read_to_string(dev.kubeconfig()).expect("kubeconfig");
    assert!(text.contains(&dev.token));
    let path = dev.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&path, text.replace(&dev.token, token)).expect("write kubeconfig");
    path
}

#[test]
fn components_work_with_exactly_the_charts_rbac() {
    assert!(have_kubectl(), "kubectl is missing (scripts/install-tools)");
    let tmp = tempfile::tempdir().expect("tempdir");
    let engine = write_engine(tmp.path(), PASS_ENGINE);
    let mut dev = Dev::start_with(&["--cluster-only", "--engine", &engine]);

    // The chart's ServiceAccounts and RBAC, nothing else.
    dev.kubectl_ok(&["create", "namespace", RELEASE_NS]);
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], &chart_rbac(RELEASE_NS));
    assert!(
        out.status.success(),
        "applying the chart's RBAC: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = |sa: &str| {
        dev.kubectl_ok(&["create", "token", sa, "-n", RELEASE_NS, "--duration", "2h"])
            .trim()
            .to_owned()
    };
    let (op_token, api_token) = (token("terrace-operator"), token("terrace-api-server"));
    // The tokens are really that weak: neither may read Secrets cluster-wide.
    for t in [&op_token, &api_token] {
        let kc = kubeconfig_for(&dev, t, "probe");
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(["auth", "can-i", "list", "secrets", "-A"])
            .output()
            .expect("kubectl");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    }

    let port = free_port();
    let api_url = format!("http://127.0.0.1:{port}");
    let api = Component::spawn(
        &dev,
        "api-server",
        &["api-server"],
        &kubeconfig_for(&dev, &api_token, "api-server"),
        &[
            ("TERRACE_API_ADDR", format!("127.0.0.1:{port}")),
            ("TERRACE_API_METRICS_ADDR", "127.0.0.1:0".into()),
            ("TERRACE_BASE_URL", api_url.clone()),
        ],
    );
    let operator = Component::spawn(
        &dev,
        "operator",
        &["operator"],
        &kubeconfig_for(&dev, &op_token, "operator"),
        &[
            ("POD_NAME", "terrace-operator-test-0".into()),
            ("POD_NAMESPACE", RELEASE_NS.into()),
            ("TERRACE_OPERATOR_METRICS_ADDR", "127.0.0.1:0".into()),
            ("TERRACE_API_INTERNAL_URL", api_url.clone()),
            ("TERRACE_BINARY_PATH", terrace_bin().display().to_string()),
        ],
    );
    dev.api = api_url;
    let admin = Api::admin(&dev);
    let ready = dev.eventually(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .and_then(|_| (admin.get("/readyz").status == 200).then_some(()))
    });
    assert!(ready.is_some(), "API server not ready: {}", api.log());

    // Workspaces: the operator creates the organization's namespace and default project;
    // the API server reviews tokens and access, and locks through annotations.
    let org = admin.create_org("least");
    let ws = dev
        .eventually(Duration::from_secs(30), || {
            let r = admin.post(
                &format!("/api/v2/organizations/{org}/workspaces"),
                &serde_json::json!({"data": {"type": "workspaces", "attributes": {"name": "net"}}}),
            );
            (r.status == 201).then(|| r.body["data"]["id"].as_str().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| {
            panic!(
                "create workspace\napi: {}\noperator: {}",
                api.log(),
                operator.log()
            )
        });
    let lock = admin.post(
        &format!("/api/v2/workspaces/{ws}/actions/lock"),
        &serde_json::json!({"reason": "least privilege"}),
    );
    assert_eq!(lock.status, 200, "lock: {:?}\n{}", lock.body, api.log());
    assert_eq!(lock.body["data"]["attributes"]["locked"], true);
    let unlock = admin.post(
        &format!("/api/v2/workspaces/{ws}/actions/unlock"),
        &serde_json::json!({}),
    );
    assert_eq!(
        unlock.status,
        200,
        "unlock: {:?}\n{}",
        unlock.body,
        api.log()
    );
    assert_eq!(unlock.body["data"]["attributes"]["locked"], false);
    // The operator keeps the workspace's status (needs watch + status patch).
    let status = dev.eventually(Duration::from_secs(30), || {
        let out = dev.kubectl(&[
            "get",
            "workspaces",
            "-n",
            &org,
            "-o",
            "jsonpath={.items[*].status.id}",
        ]);
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (id == ws).then_some(())
    });
    assert!(
        status.is_some(),
        "workspace status: {}\noperator: {}",
        dev.kubectl_ok(&["get", "workspaces", "-n", &org, "-o", "yaml"]),
        operator.log()
    );

    // A module test run: configuration upload (API server: blobs in Secrets), the Pod
    // (operator: Secret, Pod, status, events, log archive), logs (API server).
    let t = admin.create_module(&org, "vpc", "aws");
    let cv = admin.uploaded_cv(&t);
    let run = dev
        .eventually(Duration::from_secs(30), || {
            let r = admin.create_test_run(&t, &cv);
            (r.status == 201).then(|| r.body["data"]["id"].as_str().unwrap_or_default().to_owned())
        })
        .expect("create test run");
    let done = dev.eventually(Duration::from_secs(90), || {
        let r = admin.get(&format!("{t}/test-runs/{run}"));
        let a = &r.body["data"]["attributes"];
        matches!(
            a["status"].as_str(),
            Some("finished" | "errored" | "canceled")
        )
        .then(|| a.clone())
    });
    let attrs = done.unwrap_or_else(|| {
        panic!(
            "test run never ended\napi: {}\noperator: {}",
            api.log(),
            operator.log()
        )
    });
    assert_eq!(
        attrs["status"],
        "finished",
        "{attrs}\noperator: {}",
        operator.log()
    );
    assert_eq!(attrs["test-status"], "pass", "{attrs}");
    // The log survives the Pod (archived by the operator, read by the API server).
    let url = attrs["log-read-url"].as_str().unwrap_or_default();
    let path = &url[url.find("/api/v2/").expect("log path")..];
    let logs = dev.eventually(Duration::from_secs(30), || {
        let (status, text) = admin.get_text(path);
        (status == 200 && text.contains("test_summary")).then_some(text)
    });
    assert!(logs.is_some(), "log not readable\napi: {}", api.log());

    // The operator reconciled as the elected leader (the Lease Role of the chart).
    let holder = dev.kubectl_ok(&[
        "get",
        "lease",
        "terrace-operator",
        "-n",
        RELEASE_NS,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(holder.trim(), "terrace-operator-test-0");

    for c in [&api, &operator] {
        let log = c.log().to_lowercase();
        assert!(
            !log.contains("forbidden"),
            "a component was refused by RBAC:\n{}",
            c.log()
        );
    }
    drop(operator);
    drop(api);
    assert!(dev.stop());
}
