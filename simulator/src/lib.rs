//! terrace's Kubernetes-API-compatible cluster simulator.
//!
//! A product component: `terrace dev` runs the real operator, the real API server,
//! `kubectl` and `kube::Client` on it without a kube-apiserver, and terrace's test suite
//! uses it the same way. It serves the Kubernetes REST protocol over HTTPS (see [`tls`]),
//! plain HTTP and in-process (as a tower Service for `kube::Client::new`), keeps objects
//! in an embedded store persisted under a data directory, and copies the API server
//! behaviours terrace and kubectl depend on. See README.md beside this crate for what it
//! copies and what it does not.
#![forbid(unsafe_code)]

pub mod access;
pub mod auth;
pub mod cel;
pub mod jsonpath;
pub mod openapi;
pub mod resource;
pub mod schema;
pub mod table;

pub mod gc;
pub mod gofmt;
pub mod identities;
pub mod kinds;
pub mod kubelet;
pub mod listener;
pub mod meta;
pub mod patch;
pub mod registry;
pub mod rest;
pub mod selectors;
pub mod server;
pub mod status;
pub mod store;
pub mod watch;

pub mod protobuf;
pub mod redacted;
pub mod tls;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::{Files, State};
use tokio::sync::{Notify, watch as tokio_watch};

/// How a [`Simulator`] is opened.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Where objects and the admin token persist (a directory readable by its owner
    /// only; a write is answered once it is on disk there); `None` keeps everything in
    /// memory.
    pub data_dir: Option<PathBuf>,
    /// Events kept per resource for watch resumption (the watch cache size).
    pub watch_history: usize,
    /// How long an event stays in the watch history (at most `watch_history` of them):
    /// watches resuming from an older resourceVersion get 410 Expired and relist, as
    /// past kube-apiserver's watch cache. Watches asking for bookmarks get one every
    /// `bookmark_interval`, so theirs are never that old.
    pub watch_history_age: Duration,
    /// How often watches that allow bookmarks get a BOOKMARK event.
    pub bookmark_interval: Duration,
    /// Whether the simulated node runs Pods' containers as local processes
    /// ([`kubelet`]). Off, Pods are stored only: they stay `Pending`, unscheduled, and
    /// are deleted at once (tests that play the kubelet themselves want this).
    pub run_pods: bool,
    /// Image → program run as that image's entrypoint when a container has no
    /// `command` (its `args` follow). Matched on the whole image or on it without its
    /// tag/digest. Without a match such a container waits with `ErrImagePull`.
    pub image_overrides: Vec<(String, PathBuf)>,
    /// Command name → program: a container whose `command[0]` is that name (or a path
    /// ending in it) runs the program instead, and the name is on every container's
    /// `PATH` as a link to the program, so processes it starts find it too (`terrace
    /// dev --engine` maps `tofu` here).
    pub command_overrides: Vec<(String, PathBuf)>,
    /// Timeouts and connection cap of [`Simulator::serve`] and
    /// [`Simulator::serve_plain`] ([`listener`]).
    pub limits: listener::ConnectionLimits,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            data_dir: None,
            watch_history: 10_000,
            watch_history_age: Duration::from_secs(150),
            bookmark_interval: Duration::from_secs(30),
            run_pods: true,
            image_overrides: Vec::new(),
            command_overrides: Vec::new(),
            limits: listener::ConnectionLimits::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("data directory {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serving HTTP: {0}")]
    Serve(#[source] std::io::Error),
    #[error("bootstrapping the store: {0}")]
    Bootstrap(String),
    #[error("TLS: {0}")]
    Tls(#[from] tls::TlsError),
}

/// How long a writer waits for its log record to reach the disk before it is answered
/// 504 (kube-apiserver's answer when etcd does not commit in time). The write is applied
/// in memory either way and reaches the disk with a later batch.
const DURABLE_TIMEOUT: Duration = Duration::from_secs(60);

/// State shared by the HTTP handlers, watches and background tasks.
pub struct Shared {
    state: Mutex<State>,
    /// The store's latest resourceVersion (each resource's watches wait on their own:
    /// [`store::State::subscribe`]).
    pub changes: tokio_watch::Sender<u64>,
    /// Wakes the garbage collector.
    pub gc_wake: Notify,
    pub config: SimConfig,
    pub admin_token: String,
    /// Authenticator and cached RBAC snapshot.
    pub access: access::Access,
    files: Option<Files>,
    /// How many log records are on disk ([`State::log_seq`] of the last synced batch).
    durable: tokio_watch::Sender<u64>,
    /// Wakes the flusher: a writer waits for its records.
    flush_wake: Notify,
    /// Where the simulated node keeps each Pod's volumes, logs and termination
    /// messages: `DATA_DIR/pods/<uid>`, or a fresh temporary folder.
    pub pods_dir: PathBuf,
    /// Flips to `true` on shutdown.
    pub shutdown: tokio_watch::Sender<bool>,
    /// Requests served to each user (tests count what a component asks of the cluster).
    pub requests_by_user: Mutex<std::collections::HashMap<String, u64>>,
    flush_lock: tokio::sync::Mutex<()>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the store under its lock.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.lock())
    }

    /// Changes the store under its lock, then wakes watches and the garbage collector.
    /// The change reaches the disk with the flusher's next batch, within about 100 ms;
    /// a change a client is answered for goes through [`Shared::write_durably`].
    pub fn write<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.write_inner(f, true).0
    }

    /// A write by a background controller: wakes watches but not the controllers.
    pub fn write_from_controller<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        self.write_inner(f, false).0
    }

    /// Returns `f`'s result and the log position the write reached, when it queued
    /// records.
    fn write_inner<R>(&self, f: impl FnOnce(&mut State) -> R, wake_gc: bool) -> (R, Option<u64>) {
        let (r, rv_before, rv, gc, seq) = {
            let mut st = self.lock();
            let before = st.rv;
            let seq_before = st.log_seq;
            let r = f(&mut st);
            (
                r,
                before,
                st.rv,
                !st.gc_queue.is_empty() || !st.terminating.is_empty(),
                (st.log_seq != seq_before).then_some(st.log_seq),
            )
        };
        if rv != rv_before {
            self.changes.send_replace(rv);
        }
        if gc && wake_gc {
            self.gc_wake.notify_one();
        }
        (r, seq)
    }

    /// A write a client is answered for (group commit): changes the store like
    /// [`Shared::write`], then waits until the batch holding its log records is on disk
    /// (`fdatasync`), so a write that was answered survives `kill -9` and power loss.
    /// Writers arriving while a batch is being synced go together in the next one. In
    /// memory (no data directory) there is nothing to wait for. Answers 504 when the
    /// disk does not take the batch within a minute.
    pub async fn write_durably<T>(
        &self,
        f: impl FnOnce(&mut State) -> status::ApiResult<T>,
    ) -> status::ApiResult<T> {
        let (r, seq) = self.write_inner(f, true);
        if let Some(seq) = seq {
            self.wait_durable(seq).await?;
        }
        r
    }

    async fn wait_durable(&self, seq: u64) -> status::ApiResult<()> {
        if self.files.is_none() {
            return Ok(());
        }
        self.flush_wake.notify_one();
        let mut durable = self.durable.subscribe();
        let mut shutdown = self.shutdown.subscribe();
        tokio::select! {
            ok = async { durable.wait_for(|d| *d >= seq).await.is_ok() } => {
                if ok {
                    return Ok(());
                }
            }
            // The flusher is gone: flush here (the final flush may have run before this
            // write).
            () = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                self.flush().await;
                if *self.durable.borrow() >= seq {
                    return Ok(());
                }
            }
            () = tokio::time::sleep(DURABLE_TIMEOUT) => {}
        }
        Err(status::ApiError::new(
            504,
            "Timeout",
            "Timeout: the write was applied but its log record did not reach the disk in time",
        ))
    }

    /// Appends the pending log records to disk and syncs them, then tells the writers
    /// waiting for them. On failure the records stay queued (in order) for the next
    /// flush.
    async fn flush(&self) {
        let Some(files) = &self.files else { return };
        let _guard = self.flush_lock.lock().await;
        let (lines, seq) = {
            let mut st = self.lock();
            (std::mem::take(&mut st.pending_log), st.log_seq)
        };
        if lines.is_empty() {
            return;
        }
        let files = files.clone();
        let result = tokio::task::spawn_blocking(move || {
            let r = files.append(&lines, true);
            (r, lines)
        })
        .await;
        match result {
            Ok((Ok(()), _)) => {
                self.durable.send_if_modified(|d| {
                    let newer = seq > *d;
                    *d = (*d).max(seq);
                    newer
                });
            }
            Ok((Err(e), lines)) => {
                tracing::error!(error = %e, "simulator: writing the store log failed; retrying");
                self.lock().pending_log.splice(0..0, lines);
            }
            Err(e) => tracing::error!(error = %e, "simulator: store flush task failed"),
        }
    }
}

/// A running simulator: cheap to clone, all clones share one store.
#[derive(Clone)]
pub struct Simulator {
    shared: Arc<Shared>,
    tls: Arc<tls::TlsMaterial>,
}

impl Simulator {
    /// Opens the store (replaying persisted objects), creates the default namespaces and
    /// starts the background tasks (garbage collector, log flusher).
    pub async fn open(config: SimConfig) -> Result<Simulator, SimError> {
        let mut st = State::new(config.watch_history, config.data_dir.is_some());
        let (files, (admin_token, signing_key)) = match &config.data_dir {
            Some(dir) => {
                let files = Files::new(dir.clone());
                let io = |source| SimError::Io {
                    path: dir.clone(),
                    source,
                };
                let (files, st2, token) = tokio::task::spawn_blocking(move || {
                    let r = files.load(&mut st).and_then(|()| {
                        Ok((
                            store::load_or_create_token(&files.token())?,
                            store::load_or_create_signing_key(&files.signing_key())?,
                        ))
                    });
                    (files, st, r)
                })
                .await
                .map_err(|e| SimError::Bootstrap(e.to_string()))?;
                st = st2;
                (Some(files), token.map_err(io)?)
            }
            None => (
                None,
                (store::new_token(), auth::TokenSigner::generate_key()),
            ),
        };
        kinds::crd::register_stored(&mut st);
        // Processes do not survive the simulator: Pods it ran before are lost.
        kubelet::node_restarted(&mut st);
        // Absolute: Pods run as processes in their own working directories, and their
        // volumes (the tools the engine container runs) are named by these paths.
        let pods_dir = match &config.data_dir {
            Some(d) => std::path::absolute(d)
                .unwrap_or_else(|_| d.clone())
                .join("pods"),
            None => std::env::temp_dir().join(format!("terrace-sim-{}", uuid::Uuid::new_v4())),
        };
        let (changes, _) = tokio_watch::channel(st.rv);
        let (durable, _) = tokio_watch::channel(st.log_seq);
        let (shutdown, _) = tokio_watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(st),
            changes,
            gc_wake: Notify::new(),
            config,
            access: access::Access::new(signing_key, &admin_token),
            admin_token,
            files,
            durable,
            flush_wake: Notify::new(),
            pods_dir,
            shutdown,
            flush_lock: tokio::sync::Mutex::new(()),
            tasks: Mutex::new(Vec::new()),
            requests_by_user: Mutex::default(),
        });
        shared
            .write(gc::create_default_namespaces)
            .map_err(SimError::Bootstrap)?;
        access::bootstrap(&shared).map_err(SimError::Bootstrap)?;
        let tls = Arc::new(open_tls(sim_tls_dir(&shared.config)).await?);
        let sim = Simulator { shared, tls };
        let gc = tokio::spawn(gc::run(sim.shared.clone()));
        let flusher = {
            let shared = sim.shared.clone();
            tokio::spawn(async move {
                let mut shutdown = shared.shutdown.subscribe();
                // Checked each turn: a shutdown sent before this task first ran is not a
                // `changed()` for this receiver.
                while !*shutdown.borrow_and_update() {
                    tokio::select! {
                        // A writer waits: sync now (while a batch syncs, the next gathers).
                        _ = shared.flush_wake.notified() => {}
                        // Background writes (controllers, the kubelet) nobody waits for.
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = shutdown.changed() => return,
                    }
                    // Writers woken by the previous batch are runnable now: let them
                    // queue their next records, so they share this batch's sync.
                    tokio::task::yield_now().await;
                    shared.flush().await;
                }
            })
        };
        let node = sim
            .shared
            .config
            .run_pods
            .then(|| tokio::spawn(kubelet::run(sim.shared.clone())));
        if let Ok(mut t) = sim.shared.tasks.lock() {
            t.push(gc);
            t.push(flusher);
            t.extend(node);
        }
        Ok(sim)
    }

    /// The whole HTTP API as an axum Router (used by [`Simulator::serve`] and
    /// [`Simulator::client`]).
    pub fn router(&self) -> axum::Router {
        server::router(self.shared.clone(), false)
    }

    /// A `kube::Client` talking to the router in-process with the admin token; default
    /// namespace `default`.
    pub fn client(&self) -> kube::Client {
        self.client_as(&self.shared.admin_token)
    }

    /// A `kube::Client` talking to the router in-process with no credentials of its own:
    /// each request is authenticated by the Authorization header it carries (none:
    /// `system:anonymous`).
    pub fn uncredentialed_client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// A `kube::Client` talking to the router in-process with bearer `token` (a
    /// ServiceAccount's, so RBAC applies to what it does); default namespace `default`.
    pub fn client_as(&self, token: &str) -> kube::Client {
        let bearer = http::HeaderValue::from_str(&format!("Bearer {token}")).ok();
        let svc = tower::ServiceBuilder::new()
            .map_request(move |mut req: http::Request<kube::client::Body>| {
                if let Some(b) = &bearer {
                    req.headers_mut()
                        .insert(http::header::AUTHORIZATION, b.clone());
                }
                req
            })
            .service(self.router());
        kube::Client::new(svc, "default")
    }

    /// A client of ServiceAccount `ns/name` (created, with its namespace when missing)
    /// bound cluster-wide by a ClusterRole `name` of exactly `rules`: a component run
    /// under the RBAC a chart gives it, so a right the chart lacks fails what needs it.
    pub async fn service_account_client(
        &self,
        ns: &str,
        name: &str,
        rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>,
    ) -> Result<kube::Client, kube::Error> {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleRef, Subject};
        use kube::api::{Api, ObjectMeta, PostParams};
        let admin = self.client();
        let pp = PostParams::default();
        let meta = |name: &str, ns: Option<&str>| ObjectMeta {
            name: Some(name.to_owned()),
            namespace: ns.map(str::to_owned),
            ..Default::default()
        };
        let exists = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 409);
        let ns_obj = Namespace {
            metadata: meta(ns, None),
            ..Default::default()
        };
        if let Err(e) = Api::<Namespace>::all(admin.clone())
            .create(&pp, &ns_obj)
            .await
            && !exists(&e)
        {
            return Err(e);
        }
        let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
        let sa = ServiceAccount {
            metadata: meta(name, Some(ns)),
            ..Default::default()
        };
        sas.create(&pp, &sa).await?;
        let role = ClusterRole {
            metadata: meta(name, None),
            rules: Some(rules),
            ..Default::default()
        };
        Api::<ClusterRole>::all(admin.clone())
            .create(&pp, &role)
            .await?;
        let binding = ClusterRoleBinding {
            metadata: meta(name, None),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: name.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.to_owned(),
                namespace: Some(ns.to_owned()),
                ..Default::default()
            }]),
        };
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&pp, &binding)
            .await?;
        let tr = sas
            .create_token_request(name, &pp, &TokenRequest::default())
            .await?;
        Ok(self.client_as(&tr.status.map(|s| s.token).unwrap_or_default()))
    }

    /// How many requests the simulator has served to user `username` (a ServiceAccount's
    /// is `system:serviceaccount:NS:NAME`): what a component asked of the cluster.
    pub fn requests_of(&self, username: &str) -> u64 {
        self.shared
            .requests_by_user
            .lock()
            .map_or(0, |m| m.get(username).copied().unwrap_or(0))
    }

    /// Bearer token of user `admin` (group `system:masters`).
    pub fn admin_token(&self) -> String {
        self.shared.admin_token.clone()
    }

    /// Serves HTTPS (HTTP/1.1 over TLS, the certificate from [`Simulator::ca_pem`]'s CA)
    /// on `listener` until [`Simulator::shutdown`], under [`SimConfig::limits`]. Every
    /// request is authenticated by its bearer token; one without is `system:anonymous`,
    /// as on kube-apiserver's secure port.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> Result<(), SimError> {
        let tls = tokio_rustls::TlsAcceptor::from(self.tls.server_config());
        self.serve_with(listener, Some(tls), false).await
    }

    /// Serves plain HTTP/1.1 on `listener` until [`Simulator::shutdown`], under
    /// [`SimConfig::limits`], for clients that cannot do TLS.
    ///
    /// kubectl (client-go) does not send bearer tokens over plain HTTP, so here, as on
    /// the old kube-apiserver insecure port, loopback requests without an Authorization
    /// header act as the admin user; requests with a token are authenticated by it.
    /// Prefer [`Simulator::serve`], where RBAC applies to kubectl too.
    pub async fn serve_plain(&self, listener: tokio::net::TcpListener) -> Result<(), SimError> {
        self.serve_with(listener, None, true).await
    }

    async fn serve_with(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
        loopback_admin: bool,
    ) -> Result<(), SimError> {
        let shutdown = self.shared.shutdown.subscribe();
        if *shutdown.borrow() {
            return Ok(());
        }
        let app = server::router(self.shared.clone(), loopback_admin);
        listener::serve(
            app,
            listener,
            tls,
            self.shared.config.limits.clone(),
            shutdown,
        )
        .await
        .map_err(SimError::Serve)
    }

    /// The CA certificate (PEM) that signed the certificate [`Simulator::serve`] presents.
    pub fn ca_pem(&self) -> &str {
        self.tls.ca_pem()
    }

    /// A kubeconfig for `server_url` and `token` that kubectl and
    /// `kube::Config::from_custom_kubeconfig` accept unchanged; for an `https://` URL it
    /// carries the simulator's CA as `certificate-authority-data`.
    pub fn kubeconfig(&self, server_url: &str, token: &str) -> String {
        use base64::Engine as _;
        let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
        let ca = if server_url.starts_with("https://") {
            let data = base64::engine::general_purpose::STANDARD.encode(self.tls.ca_pem());
            format!("    certificate-authority-data: {}\n", q(&data))
        } else {
            String::new()
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: terrace-sim\n  cluster:\n    server: {}\n{ca}contexts:\n- name: terrace-sim\n  context:\n    cluster: terrace-sim\n    user: admin\n    namespace: default\ncurrent-context: terrace-sim\nusers:\n- name: admin\n  user:\n    token: {}\npreferences: {{}}\n",
            q(server_url),
            q(token)
        )
    }

    /// Where the simulated node keeps Pods' files: `<dir>/<pod uid>/` holds `logs/`,
    /// `volumes/`, `termination/`, `cwd/` and `bin/` (command override links).
    pub fn pods_dir(&self) -> &std::path::Path {
        &self.shared.pods_dir
    }

    /// Flushes persistence, stops the background tasks (killing the processes of running
    /// Pods), ends watches and `serve()`.
    pub async fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        let tasks: Vec<_> = match self.shared.tasks.lock() {
            Ok(mut t) => t.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for t in tasks {
            let _ = t.await;
        }
        self.shared.flush().await;
    }
}

/// Where the TLS material persists: `DATA_DIR/tls`, or nowhere.
fn sim_tls_dir(config: &SimConfig) -> Option<PathBuf> {
    config.data_dir.as_ref().map(|d| d.join("tls"))
}

/// Loads (or creates and persists) the CA and serving certificate, or generates them in
/// memory when there is no data directory.
async fn open_tls(dir: Option<PathBuf>) -> Result<tls::TlsMaterial, SimError> {
    tokio::task::spawn_blocking(move || match dir {
        Some(dir) => tls::TlsMaterial::load_or_create(&dir),
        None => tls::TlsMaterial::generate(),
    })
    .await
    .map_err(|e| SimError::Bootstrap(e.to_string()))?
    .map_err(SimError::from)
}
