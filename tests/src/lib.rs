//! Test support for terrace's end-to-end tests: start the real `terrace dev` binary on free
//! ports in a temporary data directory, talk to it with `kubectl` and HTTP, stop and restart
//! it. Each test gets its own instance, so tests run in parallel.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Held while a test runs `terrace dev` on its default addresses (127.0.0.1:8080 and
/// :6443, as README.md and docs/ write them): the tests that do (readme, docs) take
/// turns, across processes (nextest) and threads (`cargo test`). Two at once made one
/// wait 60 s for a `terrace dev` that could not bind, then fail.
pub fn default_addresses() -> std::fs::File {
    let path = std::env::temp_dir().join("terrace-tests-default-addresses.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(&path)
        .expect("the default addresses' lock file");
    file.lock().expect("the default addresses' lock");
    file
}

/// Path of the `terrace` binary under test: `$TERRACE_BIN`, else the workspace's
/// `target/debug/terrace` (the test script builds it first).
pub fn terrace_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TERRACE_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let bin = target.join("debug").join("terrace");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p terrace` before the end-to-end tests",
        bin.display()
    );
    bin
}

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Whether kubectl is installed (the kubectl tests need it; CI installs it).
pub fn have_kubectl() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// helm: `$HELM`, else on PATH, else `.tools/bin/helm` (scripts/install-tools). Panics
/// when there is none: the chart tests must not be skipped.
pub fn helm() -> PathBuf {
    if let Some(h) = std::env::var_os("HELM") {
        return PathBuf::from(h);
    }
    let on_path = Command::new("helm")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return PathBuf::from("helm");
    }
    let local = workspace_root().join(".tools/bin/helm");
    assert!(
        local.exists(),
        "helm is missing: run scripts/install-tools (the chart tests need it)"
    );
    local
}

/// A fake engine that passes at once, printing a real-format `-json` summary.
pub const PASS_ENGINE: &str = r#"#!/bin/sh
echo '{"@level":"info","@message":"Success! 1 passed, 0 failed.","@module":"tofu.ui","type":"test_summary","test_summary":{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0}}'
"#;

/// Writes `script` as the executable `DIR/fake-engine` (for `terrace dev --engine`) and
/// returns its path.
pub fn write_engine(dir: &Path, script: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("fake-engine");
    std::fs::write(&path, script).expect("write engine");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.display().to_string()
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `terrace operator` or `terrace api-server` as a process of its own against a
/// `terrace dev --cluster-only`, logging to `DIR/<name>.log`; killed when dropped.
pub struct Component {
    child: Child,
    log: PathBuf,
}

impl Component {
    pub fn spawn(
        dev: &Dev,
        name: &str,
        args: &[&str],
        kubeconfig: &Path,
        env: &[(&str, String)],
    ) -> Self {
        Component::spawn_in(dev.dir(), name, args, kubeconfig, env)
    }

    /// [`Component::spawn`] logging to `dir/<name>.log`.
    pub fn spawn_in(
        dir: &Path,
        name: &str,
        args: &[&str],
        kubeconfig: &Path,
        env: &[(&str, String)],
    ) -> Self {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(terrace_bin())
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            // `TERRACE_TIER_LOG` (a tracing filter) to look closer; info by default.
            .env(
                "RUST_LOG",
                std::env::var("TERRACE_TIER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn component");
        Component { child, log }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Component {
    /// SIGTERM, as Kubernetes stops a Pod (an operator hands its lease over), then
    /// SIGKILL after 10 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The API server and the operator as processes of their own against a `terrace dev
/// --cluster-only` (as in a cluster, so each one's CPU time and RSS are its own): the
/// API server on a free port (`dev.api` then points at it), the operator without leader
/// election, handing its Pods the API's URL and the terrace binary; each with `more`
/// environment of its own. Returns once the API server is ready.
pub struct Split {
    pub api_server: Component,
    pub operator: Component,
}

impl Split {
    pub fn start(
        dev: &mut Dev,
        api_env: &[(&str, String)],
        operator_env: &[(&str, String)],
    ) -> Split {
        let port = free_port();
        dev.api = format!("http://127.0.0.1:{port}");
        let kubeconfig = dev.kubeconfig();
        let mut env = vec![
            ("TERRACE_API_ADDR", format!("127.0.0.1:{port}")),
            ("TERRACE_API_METRICS_ADDR", "127.0.0.1:0".into()),
            ("TERRACE_BASE_URL", dev.api.clone()),
        ];
        env.extend(api_env.iter().cloned());
        let api_server = Component::spawn(dev, "api-server", &["api-server"], &kubeconfig, &env);
        let mut env = vec![
            ("TERRACE_OPERATOR_METRICS_ADDR", "127.0.0.1:0".into()),
            ("TERRACE_API_INTERNAL_URL", dev.api.clone()),
            ("TERRACE_BINARY_PATH", terrace_bin().display().to_string()),
        ];
        env.extend(operator_env.iter().cloned());
        let operator = Component::spawn(
            dev,
            "operator",
            &["operator", "--leader-election=false"],
            &kubeconfig,
            &env,
        );
        let admin = Api::admin(dev);
        dev.eventually(Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            (admin.get("/readyz").status == 200).then_some(())
        })
        .unwrap_or_else(|| panic!("API server not ready: {}", api_server.log()));
        Split {
            api_server,
            operator,
        }
    }
}

/// A fake terraform whose refresh-only or plain plan finds nothing to change.
pub const PLAN_ENGINE: &str = r#"#!/bin/sh
case "$1" in
  version) if [ "$2" = "-json" ]; then echo '{"terraform_version":"1.11.4"}'; else echo 'Terraform v1.11.4'; fi ;;
  init) exit 0 ;;
  plan)
    for a in "$@"; do case "$a" in -out=*) echo plan > "${a#-out=}" ;; esac; done
    echo 'No changes. Your infrastructure still matches the configuration.' ;;
  show) echo '{"format_version":"1.2","resource_changes":[],"resource_drift":[]}' ;;
  providers) echo '{"format_version":"1.0","provider_schemas":{}}' ;;
esac
"#;

/// A running `terrace dev`.
pub struct Dev {
    child: Option<Child>,
    dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    /// The extra flags it was started with (kept by [`Dev::restart`]).
    extra: Vec<String>,
    /// Extra environment variables it was started with (kept by [`Dev::restart`]).
    env: Vec<(String, String)>,
    pub api: String,
    pub kube: String,
    pub token: String,
}

impl Dev {
    /// Starts `terrace dev` in a new temporary data directory.
    pub fn start() -> Dev {
        Dev::start_with(&[])
    }

    /// Starts `terrace dev` with extra flags in a new temporary data directory.
    pub fn start_with(extra: &[&str]) -> Dev {
        Dev::start_with_env(extra, &[])
    }

    /// Starts `terrace dev` with extra flags and environment variables in a new temporary
    /// data directory.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Dev {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut dev = Dev::launch(&dir, extra, &env);
        dev._tmp = Some(tmp);
        dev
    }

    /// Starts `terrace dev` on an existing data directory (restart).
    pub fn start_in(dir: &Path) -> Dev {
        Dev::launch(dir, &[], &[])
    }

    fn launch(dir: &Path, extra: &[&str], env: &[(String, String)]) -> Dev {
        let _ = std::fs::remove_file(dir.join("endpoints.json"));
        std::fs::create_dir_all(dir).expect("data dir");
        let log = std::fs::File::create(dir.join("dev.log")).expect("log file");
        let child = Command::new(terrace_bin())
            .args(["dev", "--data-dir"])
            .arg(dir)
            .args(["--api-addr", "127.0.0.1:0", "--kube-addr", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn terrace dev");
        let deadline = Instant::now() + Duration::from_secs(60);
        let endpoints = loop {
            if let Ok(s) = std::fs::read_to_string(dir.join("endpoints.json"))
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&s)
            {
                break v;
            }
            assert!(
                Instant::now() < deadline,
                "terrace dev did not become ready: {}",
                Dev::log_of(dir)
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let token = std::fs::read_to_string(dir.join("token")).expect("token file");
        Dev {
            child: Some(child),
            dir: dir.to_path_buf(),
            _tmp: None,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            env: env.to_vec(),
            api: endpoints["api"].as_str().unwrap_or_default().to_owned(),
            kube: endpoints["kube"].as_str().unwrap_or_default().to_owned(),
            token: token.trim().to_owned(),
        }
    }

    fn log_of(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("dev.log")).unwrap_or_default()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        Dev::log_of(&self.dir)
    }

    /// A token of a new ServiceAccount `name` of namespace `ns` bound there to ClusterRole
    /// `role`.
    pub fn role_token(&self, ns: &str, name: &str, role: &str) -> String {
        self.kubectl_ok(&["create", "serviceaccount", name, "-n", ns]);
        self.kubectl_ok(&[
            "create",
            "rolebinding",
            name,
            "-n",
            ns,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:{name}"),
        ]);
        self.kubectl_ok(&["create", "token", name, "-n", ns])
            .trim()
            .to_owned()
    }

    /// The process ID of the running `terrace dev` (None once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `DIR/kubeconfig`.
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A kubectl command using this instance's kubeconfig and its own discovery cache.
    pub fn kubectl_cmd(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig").arg(self.kubeconfig());
        c.arg("--cache-dir").arg(self.dir.join("kubectl-cache"));
        c.current_dir(workspace_root());
        c
    }

    /// Runs kubectl with `args` and returns its output.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_cmd().args(args).output().expect("run kubectl")
    }

    /// Runs kubectl and asserts success; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl with `stdin` as input (`-f -`) and returns its output.
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .kubectl_cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn kubectl");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        child.wait_with_output().expect("kubectl output")
    }

    /// Polls `f` until it returns Some or `timeout` passes.
    pub fn eventually<T>(&self, timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
        real::eventually(timeout, f)
    }

    /// Stops the process with SIGTERM and waits for it to exit. Returns whether it exited
    /// successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops and starts again on the same data directory (new ports) with other flags and
    /// environment variables.
    pub fn restart_with(mut self, extra: &[&str], env: &[(&str, &str)]) -> Dev {
        assert!(
            self.stop(),
            "terrace dev did not shut down cleanly: {}",
            self.log()
        );
        let tmp = self._tmp.take();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut dev = Dev::launch(&self.dir.clone(), extra, &env);
        dev._tmp = tmp;
        dev
    }

    /// Stops and starts again on the same data directory (new ports) with the same flags.
    pub fn restart(mut self) -> Dev {
        assert!(
            self.stop(),
            "terrace dev did not shut down cleanly: {}",
            self.log()
        );
        let tmp = self._tmp.take();
        let extra = std::mem::take(&mut self.extra);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let env = std::mem::take(&mut self.env);
        let mut dev = Dev::launch(&self.dir.clone(), &extra, &env);
        dev._tmp = tmp;
        dev
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A minimal HTTP client for the JSON:API (plain HTTP on loopback).
pub struct Api {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

/// A response: status and parsed JSON body (Null when empty or not JSON).
#[derive(Debug)]
pub struct ApiResponse {
    pub status: u16,
    pub body: serde_json::Value,
}

impl Api {
    /// A client for `dev`'s JSON:API with its admin token.
    pub fn admin(dev: &Dev) -> Api {
        Api::with_token(dev, Some(&dev.token))
    }

    /// A client for the JSON:API at `base` (`http://HOST:PORT`) with `token`.
    pub fn at(base: &str, token: Option<&str>) -> Api {
        Api::with_base(base.to_owned(), token)
    }

    /// A client with another (or no) token.
    pub fn with_token(dev: &Dev, token: Option<&str>) -> Api {
        Api::with_base(dev.api.clone(), token)
    }

    fn with_base(base: String, token: Option<&str>) -> Api {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Api {
            agent,
            base,
            token: token.map(str::to_owned),
        }
    }

    /// Sends `method path` with an optional JSON body.
    pub fn call(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> ApiResponse {
        let url = format!("{}{}", self.base, path);
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(t) = &self.token {
            builder = builder.header("Authorization", format!("Bearer {t}"));
        }
        builder = builder.header("Content-Type", "application/vnd.api+json");
        let text = body.map(|b| b.to_string()).unwrap_or_default();
        let req = builder.body(text).expect("request");
        let mut res = self.agent.run(req).expect("HTTP round trip");
        let status = res.status().as_u16();
        let raw = res.body_mut().read_to_string().unwrap_or_default();
        ApiResponse {
            status,
            body: serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null),
        }
    }

    /// PUTs raw bytes to `path` with no Authorization header (upload URLs are their own
    /// credential); returns the status.
    pub fn put_unauthenticated(&self, path: &str, bytes: Vec<u8>) -> u16 {
        let url = format!("{}{}", self.base, path);
        let req = ureq::http::Request::builder()
            .method("PUT")
            .uri(&url)
            .header("Content-Type", "application/octet-stream")
            .body(bytes)
            .expect("request");
        let res = self.agent.run(req).expect("HTTP round trip");
        res.status().as_u16()
    }

    /// PUTs raw bytes to `path` with the token (`PUT /policies/:id/upload`); answers the
    /// status and the parsed body.
    pub fn put_bytes(&self, path: &str, bytes: Vec<u8>) -> ApiResponse {
        self.put(path, bytes, true)
    }

    /// PUTs raw bytes to `path` with no Authorization header; answers the status and
    /// the parsed body (JSON:API errors).
    pub fn put_raw(&self, path: &str, bytes: Vec<u8>) -> ApiResponse {
        self.put(path, bytes, false)
    }

    /// PUTs raw bytes to `path`, with the token when `authorized`.
    fn put(&self, path: &str, bytes: Vec<u8>, authorized: bool) -> ApiResponse {
        let url = format!("{}{}", self.base, path);
        let mut builder = ureq::http::Request::builder().method("PUT").uri(&url);
        if let Some(t) = self.token.as_ref().filter(|_| authorized) {
            builder = builder.header("Authorization", format!("Bearer {t}"));
        }
        let req = builder
            .header("Content-Type", "application/octet-stream")
            .body(bytes)
            .expect("request");
        let mut res = self.agent.run(req).expect("HTTP round trip");
        let status = res.status().as_u16();
        let raw = res.body_mut().read_to_string().unwrap_or_default();
        ApiResponse {
            status,
            body: serde_json::from_str(&raw).unwrap_or(serde_json::Value::Null),
        }
    }

    /// GETs `path` and answers the status and the body as text (logs).
    pub fn get_text(&self, path: &str) -> (u16, String) {
        self.get_text_with(path, &[])
    }

    /// `get_text` with extra request headers.
    pub fn get_text_with(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let url = format!("{}{}", self.base, path);
        let mut builder = ureq::http::Request::builder().method("GET").uri(&url);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        if let Some(t) = &self.token {
            builder = builder.header("Authorization", format!("Bearer {t}"));
        }
        let req = builder.body(()).expect("request");
        let mut res = self.agent.run(req).expect("HTTP round trip");
        let status = res.status().as_u16();
        let text = res
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_string()
            .unwrap_or_default();
        (status, text)
    }

    pub fn get(&self, path: &str) -> ApiResponse {
        self.call("GET", path, None)
    }

    pub fn post(&self, path: &str, body: &serde_json::Value) -> ApiResponse {
        self.call("POST", path, Some(body))
    }

    /// Creates an organization through the API and returns its name.
    pub fn create_org(&self, name: &str) -> String {
        let r = self.post(
            "/api/v2/organizations",
            &serde_json::json!({"data": {"type": "organizations", "attributes": {"name": name, "email": "ops@example.com"}}}),
        );
        assert_eq!(r.status, 201, "create organization: {:?}", r.body);
        name.to_owned()
    }

    /// Sets organization `org`'s default execution mode (`local`: the CLI plans and
    /// applies itself, terrace keeps the state; `remote`: runs in Pods).
    pub fn set_default_execution_mode(&self, org: &str, mode: &str) {
        let r = self.call(
            "PATCH",
            &format!("/api/v2/organizations/{org}"),
            Some(&serde_json::json!({"data": {"type": "organizations",
                "attributes": {"default-execution-mode": mode}}})),
        );
        assert_eq!(r.status, 200, "default execution mode: {:?}", r.body);
    }

    /// Creates a workspace and returns its ID.
    pub fn create_workspace(&self, org: &str, attributes: serde_json::Value) -> String {
        let r = self.post(
            &format!("/api/v2/organizations/{org}/workspaces"),
            &serde_json::json!({"data": {"type": "workspaces", "attributes": attributes}}),
        );
        assert_eq!(r.status, 201, "create workspace: {:?}", r.body);
        r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
    }
}

/// The test toolkit for runs: configuration versions, runs and their states through the
/// JSON:API, as go-tfe and the CLI make them. Every test that runs something uses these.
impl Api {
    /// Uploads `files` as a new configuration version of workspace `ws` (no run of its
    /// own); answers its ID.
    pub fn upload_config(&self, ws: &str, files: &[(&str, &str)]) -> String {
        self.upload_config_with(ws, serde_json::json!({}), files)
    }

    /// [`Api::upload_config`] with more `attributes` (`speculative`, …).
    pub fn upload_config_with(
        &self,
        ws: &str,
        attributes: serde_json::Value,
        files: &[(&str, &str)],
    ) -> String {
        let mut attrs = serde_json::json!({"auto-queue-runs": false});
        if let (Some(all), Some(more)) = (attrs.as_object_mut(), attributes.as_object()) {
            all.extend(more.clone());
        }
        let r = self.post(
            &format!("/api/v2/workspaces/{ws}/configuration-versions"),
            &serde_json::json!({"data": {"type": "configuration-versions", "attributes": attrs}}),
        );
        assert_eq!(r.status, 201, "{:?}", r.body);
        let url = r.body["data"]["attributes"]["upload-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let path = &url[url.find("/api/v2/").expect("upload path")..];
        assert_eq!(self.put_unauthenticated(path, targz(files)), 200);
        r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
    }

    /// `POST /runs` of workspace `ws` (on configuration version `cv`, else the
    /// workspace's latest) with `attributes`: the run's ID, or the refusal
    /// (`{"status", "body"}`).
    pub fn create_run(
        &self,
        ws: &str,
        cv: Option<&str>,
        attributes: serde_json::Value,
    ) -> Result<String, serde_json::Value> {
        let mut rel = serde_json::json!({"workspace": {"data": {"type": "workspaces", "id": ws}}});
        if let Some(cv) = cv {
            rel["configuration-version"] =
                serde_json::json!({"data": {"type": "configuration-versions", "id": cv}});
        }
        let r = self.post(
            "/api/v2/runs",
            &serde_json::json!({"data": {"type": "runs", "attributes": attributes, "relationships": rel}}),
        );
        if r.status == 201 {
            Ok(r.body["data"]["id"].as_str().unwrap_or_default().to_owned())
        } else {
            Err(serde_json::json!({"status": r.status, "body": r.body}))
        }
    }

    /// [`Api::create_run`] retried for up to 30 s (a configuration version just uploaded
    /// may not be indexed yet on a real cluster): the run's ID.
    pub fn queue(&self, ws: &str, cv: Option<&str>, attributes: serde_json::Value) -> String {
        real::eventually(Duration::from_secs(30), || {
            self.create_run(ws, cv, attributes.clone()).ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "queue a run: {:?}",
                self.create_run(ws, cv, attributes.clone())
            )
        })
    }

    /// A plan-only run of workspace `ws` on configuration version `cv`, once its plan
    /// finished (within `timeout`; an errored run fails the test at once): its `data`.
    pub fn plan_only_run(&self, ws: &str, cv: &str, timeout: Duration) -> serde_json::Value {
        let id = self
            .create_run(ws, Some(cv), serde_json::json!({"plan-only": true}))
            .unwrap_or_else(|e| panic!("create a plan-only run: {e:?}"));
        let run = self
            .wait_run(&id, &["planned_and_finished", "errored"], timeout)
            .unwrap_or_else(|| panic!("run {id} never finished its plan: {:?}", self.run(&id)));
        assert_eq!(
            run["attributes"]["status"], "planned_and_finished",
            "the run errored: {run}"
        );
        run
    }

    /// The run's `data`.
    pub fn run(&self, id: &str) -> serde_json::Value {
        let r = self.get(&format!("/api/v2/runs/{id}"));
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["data"].clone()
    }

    /// Polls run `id` until its status is one of `want` (its `data`), or `timeout`
    /// passes (None).
    pub fn wait_run(
        &self,
        id: &str,
        want: &[&str],
        timeout: Duration,
    ) -> Option<serde_json::Value> {
        real::eventually(timeout, || {
            let r = self.get(&format!("/api/v2/runs/{id}"));
            let status = r.body["data"]["attributes"]["status"].as_str()?.to_owned();
            want.contains(&status.as_str())
                .then(|| r.body["data"].clone())
        })
    }
}

/// A gzip-compressed tar archive of `files` (path, content), like `tar czf`.
pub fn targz(files: &[(&str, &str)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, path, content.as_bytes())
            .expect("tar entry");
    }
    tar.into_inner()
        .and_then(|gz| gz.finish())
        .expect("finish tar.gz")
}

/// A module configuration with one test file, for test runs.
pub const MODULE_FILES: &[(&str, &str)] = &[
    ("main.tf", "variable \"region\" {\n  default = \"eu\"\n}\n"),
    (
        "tests/main.tftest.hcl",
        "run \"ok\" {\n  command = plan\n}\n",
    ),
];

impl Api {
    /// Creates private registry module `name`/`provider` in `org` and returns the `{T}`
    /// path prefix of its test API (`/api/v2/organizations/:org/tests/registry-modules/…`).
    pub fn create_module(&self, org: &str, name: &str, provider: &str) -> String {
        let r = self.post(
            &format!("/api/v2/organizations/{org}/registry-modules"),
            &serde_json::json!({"data": {"type": "registry-modules",
                "attributes": {"name": name, "provider": provider}}}),
        );
        assert_eq!(r.status, 201, "create module: {:?}", r.body);
        format!(
            "/api/v2/organizations/{org}/tests/registry-modules/private/{org}/{name}/{provider}"
        )
    }

    /// Creates a configuration version (no auto-queued run), uploads [`MODULE_FILES`] to
    /// it and returns its ID once a run can be created on it.
    pub fn uploaded_cv(&self, t: &str) -> String {
        let r = self.post(
            &format!("{t}/test-runs/configuration-versions"),
            &serde_json::json!({"data": {"type": "configuration-versions",
                "attributes": {"auto-queue-runs": false}}}),
        );
        assert_eq!(r.status, 201, "create configuration version: {:?}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
        let url = r.body["data"]["attributes"]["upload-url"]
            .as_str()
            .unwrap_or_default();
        let path = &url[url.find("/api/v2/").expect("upload URL path")..];
        assert_eq!(self.put_unauthenticated(path, targz(MODULE_FILES)), 200);
        id
    }

    /// Creates a test run on configuration version `cv`.
    pub fn create_test_run(&self, t: &str, cv: &str) -> ApiResponse {
        self.post(
            &format!("{t}/test-runs"),
            &serde_json::json!({"data": {"type": "test-runs", "attributes": {},
                "relationships": {"configuration-version":
                    {"data": {"type": "configuration-versions", "id": cv}}}}}),
        )
    }
}

/// The terraform CLI pointed at a `terrace dev`: a CLI configuration file whose host
/// `terrace.test` serves `tfe.v2` (the `cloud` block) and `tfe.v2.1` (the `remote` backend
/// and `terraform_remote_state`) from the instance's API (plain HTTP on loopback) with
/// its admin token, as a user would write it (`TF_CLI_CONFIG_FILE`).
pub struct Terraform {
    config: PathBuf,
}

/// The hostname the CLI configuration gives `terrace dev` (it must contain a dot).
pub const CLI_HOST: &str = "terrace.test";

/// Writes `dir/main.tf` for the terraform CLI against terrace: a `cloud` block naming
/// [`CLI_HOST`], organization `org` and `workspaces` (the inside of its `workspaces`
/// block: `name = "app"`, `tags = ["a"]`), then `body`.
pub fn write_cloud_config(dir: &Path, org: &str, workspaces: &str, body: &str) {
    std::fs::create_dir_all(dir).expect("config dir");
    std::fs::write(
        dir.join("main.tf"),
        format!(
            "terraform {{\n  cloud {{\n    hostname     = \"{CLI_HOST}\"\n    organization = \"{org}\"\n    workspaces {{\n      {workspaces}\n    }}\n  }}\n}}\n{body}"
        ),
    )
    .expect("main.tf");
}

impl Terraform {
    /// The CLI configuration for `dev`, written to `DIR/cli.tfrc`.
    pub fn for_dev(dev: &Dev) -> Terraform {
        Terraform::with_token(dev, &dev.token)
    }

    /// The CLI configuration for `dev` with another token (`DIR/cli-<hash>.tfrc`).
    pub fn with_token(dev: &Dev, token: &str) -> Terraform {
        Terraform::for_api(dev.dir(), &dev.api, token)
    }

    /// The CLI configuration for the JSON:API at `api` with `token`, written into `dir`
    /// (`cli-<hash>.tfrc`).
    pub fn for_api(dir: &Path, api: &str, token: &str) -> Terraform {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (api, token).hash(&mut h);
        let name = format!("cli-{:x}.tfrc", h.finish());
        let config = dir.join(name);
        // The configuration `terrace dev` writes for people (every service it serves).
        std::fs::write(
            &config,
            terrace_crds::common::cli_config(CLI_HOST, api, token),
        )
        .expect("CLI configuration");
        Terraform { config }
    }

    /// A `terraform` command in `dir` using this configuration (no checkpoint calls, no
    /// colour, no prompts).
    pub fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("terraform");
        c.args(args)
            .current_dir(dir)
            .env("TF_CLI_CONFIG_FILE", &self.config)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env_remove("TF_LOG")
            .stdin(Stdio::null());
        c
    }

    /// Runs `terraform args` in `dir` and returns its output.
    pub fn run(&self, dir: &Path, args: &[&str]) -> Output {
        self.command(dir, args)
            .output()
            .expect("run terraform (it must be on PATH)")
    }
}

/// The text of an output (stdout then stderr) without terminal colours, for assertions
/// and failure messages.
pub fn text(out: &Output) -> String {
    strip_colours(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// `s` without ANSI escape sequences (`ESC [ … letter`), as the CLI colours its output.
pub fn strip_colours(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The path of the terraform CLI on PATH (the real engine of the CLI tests); panics when
/// there is none, so a machine without it fails loudly instead of skipping.
pub fn terraform_path() -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v terraform"])
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        !path.is_empty(),
        "the terraform CLI is not on PATH: the CLI tests need terraform 1.11"
    );
    path
}

/// `moto_server` (PyPI `moto[server]`, installed by scripts/test from
/// tests/pytfe/requirements.txt): an S3-compatible server on a loopback port, in memory;
/// killed when dropped.
pub struct Moto {
    child: Option<Child>,
    program: PathBuf,
    /// Arguments before the server's own (`-m moto.server`).
    prefix: Vec<String>,
    pub port: u16,
    log: tempfile::NamedTempFile,
}

impl Moto {
    /// Starts `moto_server` on a free port (the script on PATH, else `python3 -m
    /// moto.server`, since a fresh pip install may not have put the script on PATH);
    /// `None` (with the reason on stderr) when moto is not installed.
    pub fn start() -> Option<Moto> {
        let out = Command::new("sh")
            .args(["-c", "command -v moto_server"])
            .output()
            .ok()?;
        let script = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let (program, prefix) = if !script.is_empty() {
            (PathBuf::from(script), Vec::new())
        } else if Command::new("python3")
            .args(["-c", "import moto.server"])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            (
                PathBuf::from("python3"),
                vec!["-m".to_owned(), "moto.server".to_owned()],
            )
        } else {
            eprintln!(
                "SKIPPED: moto_server is not installed (pip install -r tests/pytfe/requirements.txt installs it)"
            );
            return None;
        };
        let mut moto = Moto {
            child: None,
            program,
            prefix,
            port: free_port(),
            log: tempfile::NamedTempFile::new().expect("moto log"),
        };
        moto.launch();
        Some(moto)
    }

    fn launch(&mut self) {
        let log = self.log.reopen().expect("moto log");
        let child = Command::new(&self.program)
            .args(&self.prefix)
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn moto_server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The endpoint URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its buckets are lost: it keeps them in memory).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the server again on the same port (empty).
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into()
    }

    fn request(&self, method: &str, path: &str) -> (u16, String) {
        // moto does not check signatures: plain requests are enough for the test's view.
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url()))
            .body(())
            .expect("request");
        let mut res = Moto::agent().run(req).expect("S3 round trip");
        let status = res.status().as_u16();
        (status, res.body_mut().read_to_string().unwrap_or_default())
    }

    /// Creates bucket `name`.
    pub fn create_bucket(&self, name: &str) {
        let (status, body) = self.request("PUT", &format!("/{name}"));
        assert_eq!(status, 200, "create bucket: {body}");
    }

    /// The keys of `bucket` under `prefix`.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let (status, body) = self.request("GET", &format!("/{bucket}?list-type=2&prefix={prefix}"));
        assert_eq!(status, 200, "list objects: {body}");
        body.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect()
    }

    /// Deletes object `key` behind terrace's back (with boto3, which moto[server]
    /// brings: moto refuses unsigned deletes).
    pub fn delete_object(&self, bucket: &str, key: &str) {
        let script = "import sys, boto3\n\
            s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
                aws_access_key_id='test', aws_secret_access_key='test')\n\
            s3.delete_object(Bucket=sys.argv[2], Key=sys.argv[3])\n";
        let out = Command::new("python3")
            .args(["-c", script, &self.url(), bucket, key])
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "delete object {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Replaces object `key` with `bytes` behind terrace's back (with boto3; no
    /// metadata).
    pub fn put_object(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), bytes).expect("write temp file");
        let script = "import sys, boto3\n\
            s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
                aws_access_key_id='test', aws_secret_access_key='test')\n\
            s3.put_object(Bucket=sys.argv[2], Key=sys.argv[3], Body=open(sys.argv[4], 'rb').read())\n";
        let path = file.path().to_string_lossy().into_owned();
        let out = Command::new("python3")
            .args(["-c", script, &self.url(), bucket, key, &path])
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "put object {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP proxy on a loopback port in front of `target` that can cut the line: once armed
/// with a byte budget, it forwards that many more client bytes, then closes every
/// connection and refuses new ones until healed (a server dying in the middle of an
/// upload, at a byte the test chooses).
pub struct FaultProxy {
    pub port: u16,
    state: std::sync::Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    /// Bytes the client may still send once armed.
    budget: std::sync::atomic::AtomicI64,
    armed: std::sync::atomic::AtomicBool,
    cut: std::sync::atomic::AtomicBool,
}

impl FaultProxy {
    /// Starts forwarding to `127.0.0.1:target`.
    pub fn start(target: u16) -> FaultProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().expect("addr").port();
        let state = std::sync::Arc::new(ProxyState::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if shared.cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let up = shared.clone();
                std::thread::spawn(move || pump(client, server, Some(up)));
                std::thread::spawn(move || pump(s2, c2, None));
            }
        });
        FaultProxy { port, state }
    }

    /// The endpoint URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Cuts the line after `bytes` more bytes from clients.
    pub fn arm(&self, bytes: i64) {
        use std::sync::atomic::Ordering;
        self.state.budget.store(bytes, Ordering::SeqCst);
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Whether the line was cut.
    pub fn was_cut(&self) -> bool {
        self.state.cut.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forwards again (new connections).
    pub fn heal(&self) {
        use std::sync::atomic::Ordering;
        self.state.armed.store(false, Ordering::SeqCst);
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`; on the client side (`budget`), stops and closes both once the
/// armed budget is spent or the line is cut.
fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    budget: Option<std::sync::Arc<ProxyState>>,
) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(s) = &budget {
            if s.cut.load(Ordering::SeqCst) {
                break;
            }
            if s.armed.load(Ordering::SeqCst)
                && s.budget.fetch_sub(n as i64, Ordering::SeqCst) <= n as i64
            {
                s.cut.store(true, Ordering::SeqCst);
                break;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Helpers of the benchmarks (`tests/benches`): their knobs, medians, and the RSS of a
/// process.
pub mod bench {
    use std::time::Duration;

    /// The kernel's clock ticks per second (`/proc/PID/stat` counts CPU time in them).
    fn clock_ticks() -> f64 {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    }

    /// User + system CPU seconds of a process.
    pub fn cpu_secs(pid: u32) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        (ticks(11) + ticks(12)) as f64 / clock_ticks()
    }

    /// Waits until the processes `pids` together stay under a twentieth of a core for
    /// three seconds in a row (at most 15 minutes): the work a benchmark set off (a bulk
    /// fill, a batch of runs) is done before the next figure counts their CPU.
    pub fn settle(pids: &[u32]) {
        let cpu = || pids.iter().map(|p| cpu_secs(*p)).sum::<f64>();
        let deadline = std::time::Instant::now() + Duration::from_secs(900);
        let mut quiet = 0;
        while quiet < 3 && std::time::Instant::now() < deadline {
            let before = cpu();
            std::thread::sleep(Duration::from_secs(1));
            if cpu() - before < 0.05 {
                quiet += 1;
            } else {
                quiet = 0;
            }
        }
    }

    /// The number in environment variable `name`, else `default`.
    pub fn env_usize(name: &str, default: usize) -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// The resident set size of process `pid`, KiB (0 when unreadable).
    pub fn rss_kib(pid: u32) -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    }

    /// The median of `v` (which must not be empty).
    pub fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }

    /// `d` in seconds.
    pub fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    /// The peak RSS of a process, sampled every `every` on a thread of its own until
    /// [`PeakRss::stop`].
    pub struct PeakRss {
        peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
        done: std::sync::Arc<std::sync::atomic::AtomicBool>,
        sampler: std::thread::JoinHandle<()>,
    }

    impl PeakRss {
        /// Starts sampling process `pid` (the peak starts at `from`, KiB).
        pub fn start(pid: u32, from: u64, every: Duration) -> PeakRss {
            use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
            let peak = std::sync::Arc::new(AtomicU64::new(from));
            let done = std::sync::Arc::new(AtomicBool::new(false));
            let sampler = {
                let (peak, done) = (peak.clone(), done.clone());
                std::thread::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                        std::thread::sleep(every);
                    }
                })
            };
            PeakRss {
                peak,
                done,
                sampler,
            }
        }

        /// Stops sampling; answers the peak, KiB.
        pub fn stop(self) -> u64 {
            use std::sync::atomic::Ordering;
            self.done.store(true, Ordering::Relaxed);
            let _ = self.sampler.join();
            self.peak.load(Ordering::Relaxed)
        }
    }
}

/// The chart's ServiceAccounts and RBAC objects (ServiceAccount, ClusterRole,
/// ClusterRoleBinding, Role, RoleBinding), as `helm template` renders them with default
/// values for release `terrace` in `namespace`.
pub fn chart_rbac(namespace: &str) -> String {
    let out = Command::new(helm())
        .args([
            "template",
            "terrace",
            "charts/terrace",
            "--namespace",
            namespace,
        ])
        .current_dir(workspace_root())
        .output()
        .expect("run helm template");
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let kinds = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ];
    let docs: Vec<&str> = text
        .split("\n---")
        .filter(|d| {
            d.lines()
                .any(|l| kinds.iter().any(|k| l.trim_end() == format!("kind: {k}")))
        })
        .collect();
    assert!(docs.len() >= 8, "unexpected rendering: {text}");
    docs.join("\n---\n")
}

pub mod browser;

/// The web view over HTTP without a browser: a session and its pages.
pub mod web {
    /// An agent that answers every status and follows no redirect.
    pub fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into()
    }

    /// Signs in at `base` with API token `token`: the session cookie's value.
    pub fn sign_in(base: &str, token: &str) -> String {
        let r = agent()
            .post(&format!("{base}/app/session"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .send(format!("token={token}&next=/app"))
            .expect("sign in");
        assert_eq!(r.status().as_u16(), 303);
        r.headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|set| set.split(';').next())
            .and_then(|kv| kv.split_once('='))
            .map(|(_, v)| v.to_owned())
            .expect("the session cookie")
    }

    /// GET `path` of `base` with session `cookie`: the status and the page.
    pub fn page(base: &str, cookie: &str, path: &str) -> (u16, String) {
        let mut r = agent()
            .get(&format!("{base}{path}"))
            .header("Cookie", format!("terrace_session={cookie}"))
            .call()
            .expect("GET");
        (
            r.status().as_u16(),
            r.body_mut().read_to_string().unwrap_or_default(),
        )
    }
}
pub mod git_server;
pub mod provider;
pub mod real;
pub mod receiver;
pub mod registry;
