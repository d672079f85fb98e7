//! The real-cluster tier (issue 25): terrace against a real kube-apiserver, as a platform
//! team runs it. `TERRACE_E2E_KUBECONFIG` names a kubeconfig with rights to install CRDs
//! and RBAC (`.ci/run` starts a control plane on loopback and sets it; any other cluster
//! works: kind, k3d, …). The tier installs the CRDs and the chart's RBAC, then runs
//! `terrace api-server` and `terrace operator` as local processes with tokens of the
//! chart's own ServiceAccounts. Without the variable every tier test returns at once
//! (`scripts/test` says so in one line).
//!
//! Pods are never run by the real-cluster tier: its operator gives them a node selector
//! no node matches, so they stay Pending as on a control plane without nodes. The
//! real-node tier ([`RealNode`]) runs them on a real kubelet.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{Api, Component, chart_rbac, free_port, terrace_bin, workspace_root};

/// The namespace the chart's components run in.
pub const RELEASE_NS: &str = "terrace-system";

/// A real cluster named by `TERRACE_E2E_KUBECONFIG`, with terrace's CRDs and the chart's
/// RBAC installed.
pub struct RealCluster {
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The admin's bearer token (a caller of the JSON:API with every right).
    pub admin_token: String,
    /// Where component logs and kubeconfigs go.
    pub dir: tempfile::TempDir,
}

impl RealCluster {
    /// The cluster of `TERRACE_E2E_KUBECONFIG`, set up; None (with a line on stderr) when
    /// the variable is not set.
    pub fn from_env() -> Option<RealCluster> {
        let Some(kubeconfig) = std::env::var_os("TERRACE_E2E_KUBECONFIG").filter(|v| !v.is_empty())
        else {
            eprintln!("TERRACE_E2E_KUBECONFIG is not set: the real-cluster tier is skipped");
            return None;
        };
        let c = RealCluster {
            kubeconfig: PathBuf::from(kubeconfig),
            admin_token: String::new(),
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let token = c.kubectl_ok(&[
            "config",
            "view",
            "--raw",
            "--minify",
            "-o",
            "jsonpath={.users[0].user.token}",
        ]);
        assert!(
            !token.trim().is_empty(),
            "the tier's kubeconfig must authenticate with a bearer token (the JSON:API callers use it)"
        );
        let c = RealCluster {
            admin_token: token.trim().to_owned(),
            ..c
        };
        c.install();
        Some(c)
    }

    /// kubectl with the admin kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(workspace_root())
            .output()
            .expect("run kubectl")
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply --server-side -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl apply");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())
            .expect("write manifests");
        let out = child.wait_with_output().expect("kubectl apply ends");
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The CRDs (charts/terrace/crds), the release namespace and the chart's RBAC; waits
    /// until the CRDs are established.
    fn install(&self) {
        self.kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "charts/terrace/crds",
        ]);
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            "charts/terrace/crds",
        ]);
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {RELEASE_NS}\n"
        ));
        self.apply(&chart_rbac(RELEASE_NS));
    }

    /// A token of the chart's ServiceAccount `sa` (in [`RELEASE_NS`]).
    pub fn token(&self, sa: &str) -> String {
        self.kubectl_ok(&["create", "token", sa, "-n", RELEASE_NS, "--duration", "2h"])
            .trim()
            .to_owned()
    }

    /// A kubeconfig of this cluster authenticating with `token`, written as
    /// `DIR/<name>.kubeconfig`.
    pub fn kubeconfig_for(&self, token: &str, name: &str) -> PathBuf {
        let view = |path: &str| {
            self.kubectl_ok(&[
                "config",
                "view",
                "--raw",
                "--minify",
                "-o",
                &format!("jsonpath={path}"),
            ])
        };
        let server = view("{.clusters[0].cluster.server}");
        let ca_data = view("{.clusters[0].cluster.certificate-authority-data}");
        let ca_file = view("{.clusters[0].cluster.certificate-authority}");
        let ca = if !ca_data.trim().is_empty() {
            format!("certificate-authority-data: {}", ca_data.trim())
        } else if !ca_file.trim().is_empty() {
            format!("certificate-authority: {}", ca_file.trim())
        } else {
            "insecure-skip-tls-verify: true".to_owned()
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n",
            server.trim()
        );
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// Starts `terrace api-server` with the chart's API server ServiceAccount's token on a
    /// free port; answers it and its URL once it is ready.
    pub fn api_server(&self) -> (Component, String) {
        self.api_server_with(&[])
    }

    /// [`RealCluster::api_server`] with `env` on top of its environment.
    pub fn api_server_with(&self, env: &[(&'static str, String)]) -> (Component, String) {
        let kubeconfig = self.kubeconfig_for(&self.token("terrace-api-server"), "api-server");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut all: Vec<(&str, String)> = vec![
            ("TERRACE_API_ADDR", format!("127.0.0.1:{port}")),
            ("TERRACE_API_METRICS_ADDR", "127.0.0.1:0".into()),
            ("TERRACE_BASE_URL", url.clone()),
            // As the chart sets it (the web view's sessions live there).
            ("POD_NAMESPACE", RELEASE_NS.to_owned()),
            // The tests' webhook receivers listen on loopback (the API server refuses
            // other destinations when a configuration is written).
            ("TERRACE_NOTIFICATION_ALLOWED_CIDRS", "127.0.0.0/8".into()),
        ];
        all.extend(env.iter().cloned());
        let api = Component::spawn_in(
            self.dir.path(),
            &format!("api-server-{port}"),
            &["api-server"],
            &kubeconfig,
            &all,
        );
        let probe = Api::at(&url, None);
        let ready = eventually(Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .and_then(|_| (probe.get("/readyz").status == 200).then_some(()))
        });
        assert!(
            ready.is_some(),
            "the API server never became ready:\n{}",
            api.log()
        );
        (api, url)
    }

    /// Starts `terrace operator` with the chart's operator ServiceAccount's token (leader
    /// election in [`RELEASE_NS`], as the chart runs it), its internal API URL `api_url`.
    pub fn operator(&self, api_url: &str, name: &str) -> Component {
        self.operator_with(
            name,
            &[
                ("TERRACE_API_INTERNAL_URL", api_url.to_owned()),
                ("TERRACE_BINARY_PATH", terrace_bin().display().to_string()),
                // This tier's Pods never run, also when the cluster has a node (the
                // real-node tier's): no node has this label.
                (
                    "TERRACE_TEST_POD_TEMPLATE",
                    r#"{"nodeSelector":{"terrace.dev/e2e-no-node":"true"}}"#.into(),
                ),
            ],
        )
    }

    /// The sum of a counter family of kube-apiserver's /metrics whose lines contain every
    /// one of `needles`.
    pub fn apiserver_counter(&self, name: &str, needles: &[&str]) -> f64 {
        self.kubectl_ok(&["get", "--raw", "/metrics"])
            .lines()
            .filter(|l| l.starts_with(name) && needles.iter().all(|n| l.contains(n)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Authorization round trips sent to kube-apiserver so far, by anyone: TokenReviews,
    /// SubjectAccessReviews and SelfSubjectRulesReviews created.
    pub fn reviews(&self) -> f64 {
        [
            "tokenreviews",
            "subjectaccessreviews",
            "selfsubjectrulesreviews",
        ]
        .iter()
        .map(|r| {
            self.apiserver_counter(
                "apiserver_request_total{",
                &[&format!("resource=\"{r}\""), "verb=\"POST\""],
            )
        })
        .sum()
    }

    /// The JSON:API at `url` with the admin's token.
    pub fn admin(&self, url: &str) -> Api {
        Api::at(url, Some(&self.admin_token))
    }

    /// A name no earlier run of the tier used (the cluster may be reused).
    pub fn unique(prefix: &str) -> String {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!("{prefix}-{:x}", n % 0xff_ffff_ffff)
    }

    /// The component logs so far (for failure messages).
    pub fn logs_of(components: &[&Component]) -> String {
        components
            .iter()
            .map(|c| c.log())
            .collect::<Vec<_>>()
            .join("\n-----\n")
    }

    /// Where the tier keeps its files.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Api {
    /// Creates the first workspace of a new organization `org` (`attributes`), once the
    /// operator has made the organization's namespace and default project; its ID. Panics
    /// after a minute with `logs()` (the components' logs).
    pub fn first_workspace(
        &self,
        org: &str,
        attributes: serde_json::Value,
        logs: impl Fn() -> String,
    ) -> String {
        eventually(Duration::from_secs(60), || {
            let r = self.post(
                &format!("/api/v2/organizations/{org}/workspaces"),
                &serde_json::json!({"data": {"type": "workspaces", "attributes": attributes}}),
            );
            (r.status == 201).then(|| r.body["data"]["id"].as_str().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| panic!("the first workspace of {org} was never created\n{}", logs()))
    }

    /// Uploads a one-resource configuration to workspace `ws` and queues a run of it;
    /// the run's ID.
    pub fn queue_run(&self, ws: &str) -> String {
        let files = [("main.tf", "resource \"terraform_data\" \"x\" {}\n")];
        let cv = self.upload_config(ws, &files);
        self.queue(ws, Some(&cv), serde_json::json!({}))
    }
}

/// Polls `f` every 100 ms until it answers Some, or `timeout` passes.
pub fn eventually<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A real node of the tier's cluster (issue 40): `.ci/run` starts one with
/// `node up` (kube-scheduler, kube-proxy and a kubelet on containerd, images built on the
/// machine) and names it through `TERRACE_E2E_NODE_*`; without them the node tests return
/// at once. Run and test Pods then really run: users, file modes, admission, image pulls
/// and node loss are the kubelet's, not the simulator's.
pub struct RealNode {
    /// The node script (`node up|down|forward DIR …`).
    pub script: PathBuf,
    /// The directory the control plane and node were started in.
    pub dir: PathBuf,
    /// The address Pods reach this machine's forwarded ports at.
    pub gateway: String,
    /// The terrace image built from the binary under test.
    pub terrace_image: String,
    /// The engine image (terraform and busybox).
    pub engine_image: String,
}

impl RealNode {
    /// The node of `TERRACE_E2E_NODE_*`, if the tier has one.
    pub fn from_env() -> Option<RealNode> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let Some(script) = var("TERRACE_E2E_NODE_SCRIPT") else {
            eprintln!("TERRACE_E2E_NODE_SCRIPT is not set: the real-node tests are skipped");
            return None;
        };
        Some(RealNode {
            script: PathBuf::from(script),
            dir: PathBuf::from(var("TERRACE_E2E_NODE_DIR")?),
            gateway: var("TERRACE_E2E_NODE_GATEWAY")?,
            terrace_image: var("TERRACE_E2E_NODE_TERRACE_IMAGE")?,
            engine_image: var("TERRACE_E2E_NODE_ENGINE_IMAGE")?,
        })
    }

    /// Runs the node script with `args` after its command and directory.
    pub fn script(&self, command: &str, args: &[&str]) -> Output {
        Command::new("bash")
            .arg(&self.script)
            .arg(command)
            .arg(&self.dir)
            .args(args)
            .output()
            .expect("run the node script")
    }

    /// The terraform version of the engine image (its tag: `VERSION-hash`).
    pub fn engine_version(&self) -> String {
        let tag = self.engine_image.rsplit(':').next().unwrap_or_default();
        tag.split('-').next().unwrap_or_default().to_owned()
    }

    /// Starts the node again after a `down` (`node up` with the binary it was started
    /// with, `TERRACE_E2E_NODE_BINARY`), and waits for it to be Ready.
    pub fn up(&self) {
        let binary = std::env::var("TERRACE_E2E_NODE_BINARY").unwrap_or_default();
        let out = self.script("up", &[&binary]);
        assert!(
            out.status.success(),
            "node up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Exports `image` from the node's containerd as an OCI archive at `to` (what a
    /// registry fixture serves).
    pub fn export_image(&self, image: &str, to: &Path) {
        let socket = self.dir.join("node/containerd.sock");
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args([
                "-n",
                "k8s.io",
                "images",
                "export",
                "--platform",
                "linux/amd64",
            ])
            .arg(to)
            .arg(image)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr images export: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Makes loopback port `port` reachable from Pods at `http://GATEWAY:port`.
    pub fn forward(&self, port: u16) -> String {
        let out = self.script("forward", &[&port.to_string()]);
        assert!(
            out.status.success(),
            "node forward {port}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        format!("http://{}:{port}", self.gateway)
    }

    /// The environment of `terrace operator` whose Pods run on this node, their runner
    /// reaching the API server at `internal_url`.
    pub fn operator_env(&self, internal_url: &str) -> Vec<(&'static str, String)> {
        vec![
            ("TERRACE_API_INTERNAL_URL", internal_url.to_owned()),
            ("TERRACE_IMAGE", self.terrace_image.clone()),
            ("TERRACE_BINARY_PATH", "/usr/local/bin/terrace".to_owned()),
            ("TERRACE_ENGINE_IMAGE", self.engine_image.clone()),
            ("TERRACE_ENGINE_COMMAND", "terraform".to_owned()),
            ("TERRACE_HOSTNAME", crate::CLI_HOST.to_owned()),
            // The images were built on the node: never pulled.
            ("TERRACE_POD_IMAGE_PULL_POLICY", "Never".to_owned()),
        ]
    }
}

impl RealCluster {
    /// The API server and operator of a tier whose Pods run on `node`: the API server on
    /// loopback, forwarded to the Pods; the operator with the node's images. Answers both
    /// components and the API's URL (for this machine's clients).
    pub fn on_node(&self, node: &RealNode, name: &str) -> (Component, Component, String) {
        // Workspaces default to the engine image's version, as the chart's
        // apiServer.defaultTerraformVersion is set to its engine's.
        let (api, url) =
            self.api_server_with(&[("TERRACE_DEFAULT_TERRAFORM_VERSION", node.engine_version())]);
        let port: u16 = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the API server's port");
        let internal = node.forward(port);
        let operator = self.operator_with(name, &node.operator_env(&internal));
        (api, operator, url)
    }

    /// [`RealCluster::operator`] with `env` on top of its environment.
    pub fn operator_with(&self, name: &str, env: &[(&'static str, String)]) -> Component {
        let kubeconfig = self.kubeconfig_for(&self.token("terrace-operator"), "operator");
        let mut all: Vec<(&str, String)> = vec![
            ("POD_NAME", name.to_owned()),
            ("POD_NAMESPACE", RELEASE_NS.into()),
            ("TERRACE_OPERATOR_METRICS_ADDR", "127.0.0.1:0".into()),
            ("TERRACE_NOTIFICATION_ALLOWED_CIDRS", "127.0.0.0/8".into()),
        ];
        all.extend(env.iter().cloned());
        Component::spawn_in(self.dir.path(), name, &["operator"], &kubeconfig, &all)
    }
}
