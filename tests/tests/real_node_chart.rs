//! The chart installed as users install it, on the real node (issue 40 §8, §9): `helm
//! install` with the node's images, both Deployments Ready, runs reaching the API server
//! through its Service (cluster DNS), a remote apply and a module test through it with the
//! terraform CLI, `helm upgrade`, and a `helm uninstall` during an apply that loses no
//! state, leaves no Pod holding a finalizer (the organization's namespace deletes), no
//! Secret holding a signed-in person's token, and the operator's lease released.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use terrace_tests::real::{RealCluster, RealNode, eventually};
use terrace_tests::{Api, CLI_HOST, Terraform, free_port, helm, text, workspace_root};

const NS: &str = "terrace-helm";
const RELEASE: &str = "tn";

/// `kubectl port-forward` to the API server's Service, killed when dropped.
struct Forward(Child);

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn split(image: &str) -> (&str, &str) {
    image.rsplit_once(':').expect("an image with a tag")
}

/// A port-forward to the API server's Service, its URL on this machine (empty when it
/// never answered within a minute) and the admin's client of it.
fn forward_api(cluster: &RealCluster) -> (Forward, String, Api) {
    let port = free_port();
    let forward = Forward(
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .args([
                "port-forward",
                "-n",
                NS,
                &format!("svc/{RELEASE}-terrace-api-server"),
                &format!("{port}:8080"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl port-forward"),
    );
    let url = format!("http://127.0.0.1:{port}");
    let admin = Api::at(&url, Some(&cluster.admin_token));
    let ready = eventually(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        (admin.get("/api/v2/ping").status == 204).then_some(())
    });
    let url = if ready.is_some() { url } else { String::new() };
    (forward, url, admin)
}

fn helm_cmd(cluster: &RealCluster, args: &[&str]) -> std::process::Output {
    Command::new(helm())
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("run helm")
}

#[test]
fn the_chart_installs_runs_upgrades_and_uninstalls_on_a_real_node() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let Some(node) = RealNode::from_env() else {
        return;
    };
    let (terrace_repo, terrace_tag) = split(&node.terrace_image);
    let (engine_repo, engine_tag) = split(&node.engine_image);
    let version = node.engine_version();
    let sets = [
        format!("image.repository={terrace_repo}"),
        format!("image.tag={terrace_tag}"),
        "image.pullPolicy=Never".to_owned(),
        format!("engine.image.repository={engine_repo}"),
        format!("engine.image.tag={engine_tag}"),
        "engine.image.pullPolicy=Never".to_owned(),
        "engine.command=terraform".to_owned(),
        format!("apiServer.defaultTerraformVersion={version}"),
        format!("apiServer.hostname={CLI_HOST}"),
        // The tier installed the user roles already (outside Helm).
        "userClusterRoles.enabled=false".to_owned(),
    ];
    let mut install = vec![
        "install",
        RELEASE,
        "charts/terrace",
        "--namespace",
        NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "3m",
    ];
    for s in &sets {
        install.extend(["--set", s.as_str()]);
    }
    let out = helm_cmd(&cluster, &install);
    let diagnose = || {
        format!(
            "{}\n{}",
            cluster
                .kubectl(&["get", "pods,events", "-n", NS, "-o", "wide"])
                .stdout
                .iter()
                .map(|b| *b as char)
                .collect::<String>(),
            cluster
                .kubectl(&[
                    "logs",
                    "-n",
                    NS,
                    "-l",
                    "app.kubernetes.io/name=terrace",
                    "--tail=40"
                ])
                .stdout
                .iter()
                .map(|b| *b as char)
                .collect::<String>()
        )
    };
    assert!(
        out.status.success(),
        "helm install: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        diagnose()
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("unrecognized format"),
        "helm warned: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (forward, url, admin) = forward_api(&cluster);
    assert!(
        !url.is_empty(),
        "the API server through its Service\n{}",
        diagnose()
    );
    let org = RealCluster::unique("helm");
    admin.create_org(&org);
    admin.first_workspace(&org, json!({"name": "hello"}), diagnose);

    // A remote apply through the installed chart: the run's Pod reaches the API server
    // through the Service (cluster DNS).
    let tf = Terraform::for_api(cluster.path(), &url, &cluster.admin_token);
    let work = tempfile::tempdir().expect("work dir");
    let cloud = |dir: &std::path::Path, ws: &str, body: &str| {
        std::fs::create_dir_all(dir).expect("dir");
        std::fs::write(
            dir.join("main.tf"),
            format!("terraform {{\n  cloud {{\n    hostname     = \"{CLI_HOST}\"\n    organization = \"{org}\"\n    workspaces {{ name = \"{ws}\" }}\n  }}\n}}\n{body}"),
        )
        .expect("main.tf");
    };
    let d = work.path().join("hello");
    cloud(
        &d,
        "hello",
        "resource \"terraform_data\" \"x\" { input = \"installed\" }\n",
    );
    let out = tf.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    assert!(
        out.status.success(),
        "apply: {}\n{}",
        text(&out),
        diagnose()
    );

    // A module test through it.
    admin.create_module(&org, "greeter", "aws");
    let m = work.path().join("greeter");
    std::fs::create_dir_all(m.join("tests")).expect("module dir");
    std::fs::write(
        m.join("main.tf"),
        "resource \"terraform_data\" \"g\" { input = \"hi\" }\noutput \"g\" { value = terraform_data.g.output }\n",
    )
    .expect("main.tf");
    std::fs::write(
        m.join("tests/a.tftest.hcl"),
        "run \"greets\" {\n  assert {\n    condition     = output.g == \"hi\"\n    error_message = \"no\"\n  }\n}\n",
    )
    .expect("test");
    let out = tf.run(
        &m,
        &["test", &format!("-cloud-run={CLI_HOST}/{org}/greeter/aws")],
    );
    assert!(
        out.status.success(),
        "terraform test: {}\n{}",
        text(&out),
        diagnose()
    );

    // helm upgrade: the components roll and runs go on.
    let mut upgrade = vec![
        "upgrade",
        RELEASE,
        "charts/terrace",
        "--namespace",
        NS,
        "--reuse-values",
        "--set",
        "logging.level=debug",
        "--wait",
        "--timeout",
        "3m",
    ];
    upgrade.extend(["--set", sets[0].as_str()]);
    let out = helm_cmd(&cluster, &upgrade);
    assert!(
        out.status.success(),
        "helm upgrade: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(forward);
    let (_forward, url, admin) = forward_api(&cluster);
    assert!(
        !url.is_empty(),
        "the API server after the upgrade\n{}",
        diagnose()
    );
    // Someone signed in to the web view (a Secret holds their token).
    let signed_in = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .new_agent()
        .post(&format!("{url}/app/session"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("token={}&next=/app", cluster.admin_token))
        .expect("sign in");
    assert_eq!(signed_in.status().as_u16(), 303);
    let sessions = || {
        cluster.kubectl_ok(&[
            "get",
            "secrets",
            "-n",
            NS,
            "-l",
            "app.kubernetes.io/component=ui-sessions",
            "-o",
            "name",
        ])
    };
    assert!(!sessions().trim().is_empty(), "the session's Secret");

    // An apply in flight when the release is uninstalled: it finishes first.
    let ws = admin.create_workspace(&org, json!({"name": "inflight", "auto-apply": true}));
    let cv = admin.post(
        &format!("/api/v2/workspaces/{ws}/configuration-versions"),
        &json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": true}}}),
    );
    let upload = cv.body["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap_or_default();
    let path = &upload[upload.find("/api/v2/").expect("upload path")..];
    let files = [(
        "main.tf",
        "resource \"terraform_data\" \"slow\" {\n  input = \"kept\"\n  provisioner \"local-exec\" { command = \"sleep 15\" }\n}\n",
    )];
    assert_eq!(
        admin.put_unauthenticated(path, terrace_tests::targz(&files)),
        200
    );
    let object_of = |id: &str| id.to_ascii_lowercase();
    let applying = eventually(Duration::from_secs(180), || {
        let runs = admin.get(&format!("/api/v2/workspaces/{ws}/runs"));
        let r = runs.body["data"][0].clone();
        (r["attributes"]["status"] == "applying")
            .then(|| r["id"].as_str().unwrap_or_default().to_owned())
    })
    .unwrap_or_else(|| panic!("the apply never started\n{}", diagnose()));
    let out = helm_cmd(
        &cluster,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "5m",
        ],
    );
    assert!(
        out.status.success(),
        "helm uninstall: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let status = cluster.kubectl_ok(&[
        "get",
        "run",
        &object_of(&applying),
        "-n",
        &org,
        "-o",
        "jsonpath={.status.status}",
    ]);
    assert_eq!(
        status, "applied",
        "the apply finished before the release went"
    );
    let states = cluster.kubectl_ok(&["get", "stateversions", "-n", &org, "-o", "json"]);
    assert!(states.contains(&applying), "its state version: {states}");
    let holder = cluster.kubectl_ok(&[
        "get",
        "lease",
        "terrace-operator",
        "-n",
        NS,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(holder.trim(), "", "the operator released its lease");
    let gone = eventually(Duration::from_secs(60), || {
        sessions().trim().is_empty().then_some(())
    });
    assert!(gone.is_some(), "no Secret holds a token: {}", sessions());
    let finalizers = cluster.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        &org,
        "-o",
        "jsonpath={range .items[*]}{.metadata.finalizers}{end}",
    ]);
    assert!(!finalizers.contains("terrace.dev"), "{finalizers}");
    let deleted = cluster.kubectl(&["delete", "namespace", &org, "--timeout=90s"]);
    assert!(
        deleted.status.success(),
        "the organization's namespace deletes: {}\n{}",
        String::from_utf8_lossy(&deleted.stderr),
        cluster.kubectl_ok(&["get", "all", "-n", &org])
    );
    let _ = node;
}
