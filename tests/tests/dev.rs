//! End-to-end tests of `terrace dev` through kubectl and HTTP (the foundation issue's
//! "done when" list).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use terrace_tests::{Dev, have_kubectl};

fn skip_without_kubectl() -> bool {
    if have_kubectl() {
        return false;
    }
    eprintln!("kubectl is not installed: skipping (the README's test command installs it)");
    true
}

fn http_get(url: &str, token: Option<&str>) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut res = req.call().expect("request");
    let status = res.status().as_u16();
    let ctype = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (
        status,
        ctype,
        res.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// `terrace dev` writes its kubeconfig and token and serves ping, the discovery document
/// and JSON:API 404s.
#[test]
fn dev_serves_ping_discovery_and_jsonapi_404() {
    let dev = Dev::start();
    assert!(dev.kubeconfig().exists());
    assert!(!dev.token.is_empty());
    let (status, _, _) = http_get(&format!("{}/api/v2/ping", dev.api), Some(&dev.token));
    assert!(status == 204 || status == 200, "ping answered {status}");
    let (status, _, body) = http_get(&format!("{}/.well-known/terraform.json", dev.api), None);
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["tfe.v2"], "/api/v2/");
    let (status, ctype, body) = http_get(
        &format!("{}/api/v2/organizations/acme/nothing", dev.api),
        Some(&dev.token),
    );
    assert_eq!(status, 404);
    assert_eq!(ctype, "application/vnd.api+json");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["errors"][0]["status"], "404");
}

/// The foundation's kubectl tour: apply the CRDs and examples, list with printer columns,
/// explain, reject bad workspaces, and keep everything across a restart.
/// `terrace dev` binds no metrics port: `/metrics` on the API address serves the API
/// server's metrics and the in-process operator's together (OpenMetrics text, one
/// `# EOF`), and every response echoes an `x-request-id`.
#[test]
fn dev_serves_metrics_on_the_api_port() {
    let dev = Dev::start();
    let (status, _, _) = http_get(&format!("{}/api/v2/ping", dev.api), Some(&dev.token));
    assert!(status == 204 || status == 200, "ping answered {status}");
    let (status, ctype, body) = http_get(&format!("{}/metrics", dev.api), None);
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/openmetrics-text"), "{ctype}");
    for needle in [
        r#"terrace_api_requests_total{route="/api/v2/ping",method="GET",status="204"} 1"#,
        "terrace_api_index_objects{kind=\"Workspace\"}",
        "# TYPE terrace_leader gauge",
        "terrace_leader 1",
        r#"terrace_test_runs_finished_total{outcome="passed"} 0"#,
    ] {
        assert!(body.contains(needle), "missing {needle} in\n{body}");
    }
    assert_eq!(body.matches("# EOF").count(), 1);
    assert!(body.ends_with("# EOF\n"));

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let res = agent
        .get(&format!("{}/api/v2/ping", dev.api))
        .header("x-request-id", "e2e-request-1")
        .call()
        .expect("request");
    assert_eq!(
        res.headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("e2e-request-1")
    );
}

#[test]
fn kubectl_apply_get_explain_reject_and_restart() {
    if skip_without_kubectl() {
        return;
    }
    let dev = Dev::start();
    dev.kubectl_ok(&["apply", "-f", "charts/terrace/crds/", "-f", "examples/"]);

    let out = dev.kubectl_ok(&["get", "workspaces", "-A"]);
    let header = out.lines().next().unwrap_or_default();
    for col in [
        "NAMESPACE",
        "NAME",
        "TFE NAME",
        "PROJECT",
        "EXECUTION",
        "LOCKED",
        "AGE",
    ] {
        assert!(header.contains(col), "column {col} missing in {header:?}");
    }
    assert!(
        out.contains("networking-prod") && out.contains("agent") && out.contains("local"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 5, "{out}");

    let explain = dev.kubectl_ok(&["explain", "workspace.spec"]);
    assert!(explain.contains("autoDestroyActivityDuration"), "{explain}");
    assert!(explain.contains("executionMode"), "{explain}");
    let explain = dev.kubectl_ok(&["explain", "workspace.spec.autoDestroyActivityDuration"]);
    assert!(explain.contains("Inactivity period"), "{explain}");

    for (what, spec) in [
        ("a name with a space and !", "name: \"bad name!\""),
        (
            "autoDestroyActivityDuration 0d",
            "name: ok\n  autoDestroyActivityDuration: 0d",
        ),
        ("executionMode cloud", "name: ok\n  executionMode: cloud"),
    ] {
        let manifest = format!(
            "apiVersion: terrace.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: bad\n  namespace: acme\nspec:\n  {spec}\n"
        );
        let out = dev.kubectl_stdin(&["apply", "-f", "-"], &manifest);
        assert!(!out.status.success(), "{what} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Invalid") || err.contains("invalid"),
            "{what}: {err}"
        );
    }

    // The organization controller made the default project and reported Ready.
    let ready = dev.eventually(Duration::from_secs(20), || {
        let out = dev.kubectl(&[
            "get",
            "organization",
            "acme",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    });
    assert!(
        ready.is_some(),
        "organization never became Ready: {}",
        dev.log()
    );
    dev.kubectl_ok(&["get", "project", "default", "-n", "acme"]);

    let dev = dev.restart();
    let out = dev.kubectl_ok(&["get", "workspaces", "-n", "acme", "-o", "name"]);
    assert_eq!(out.lines().count(), 4, "{out}");
    let out = dev.kubectl_ok(&["get", "crd", "workspaces.terrace.dev", "-o", "name"]);
    assert!(out.contains("workspaces.terrace.dev"));
}

/// `kubectl get workspaces -w` reports a workspace created from another shell.
#[test]
fn kubectl_get_watch_sees_a_later_create() {
    if skip_without_kubectl() {
        return;
    }
    let dev = Dev::start();
    dev.kubectl_ok(&["apply", "-f", "examples/00-organization.yaml"]);
    let mut watch = dev
        .kubectl_cmd()
        .args(["get", "workspaces", "-n", "acme", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(1500));
    let manifest = "apiVersion: terrace.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: late\n  namespace: acme\nspec:\n  name: late-arrival\n  executionMode: local\n";
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut seen = Vec::new();
    let found = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let hit = line.contains("late-arrival");
                seen.push(line);
                if hit {
                    break true;
                }
            }
            Err(_) if std::time::Instant::now() > deadline => break false,
            Err(_) => {}
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(found, "watch never showed the new workspace; saw {seen:?}");
}
