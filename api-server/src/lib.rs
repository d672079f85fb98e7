//! terrace's JSON:API server: the HCP Terraform / TFE API v2 subset of SPEC.md, served on
//! top of the cluster's terrace objects.
//!
//! The server is built in two floors (docs/architecture.md):
//!
//! - **the layer** every resource stands on, importing no resource: [`error`] (one
//!   `ApiError`, Kubernetes answers mapped into the API's words), [`body`] (`JsonApi<T>`
//!   with JSON pointers), [`query`] (parameters, pages, includes and filters checked),
//!   [`render`] (documents, pagination, IDs, timestamps), [`documents`] (representations
//!   several resources show), [`access`] (locate in the index and authorize: 404 for what
//!   the caller may not read, 403 where SPEC.md says), [`write`] (guarded patches with
//!   retry, waits for the index), [`auth`] (TokenReview and SubjectAccessReview with
//!   caches), [`index`] (watch-fed indexes), [`capability`] and [`blobs`];
//! - **the resources** ([`resources`]): one module (or folder) per resource with its own
//!   `router()`; a handler reads extract → domain call → render. Resource modules never
//!   import each other.
//!
//! Everything the server does not serve answers a JSON:API 404, so clients see the error
//! format they expect from TFE rather than axum's plain text. [`listener`] serves it with
//! header, body and idle timeouts and a connection cap, and makes the errors no handler
//! answers (405, 413 by Content-Length, 414, 431) JSON:API documents too.
//!
//! Each request gets a request ID and a log span, is counted per route template, and
//! has its panics answered 500 and its body limited ([`request`], [`metrics`]);
//! `/metrics` is served on a separate listener (`--metrics-addr`) so the public Ingress
//! of the API port does not expose it.
#![forbid(unsafe_code)]
#![recursion_limit = "256"]

/// The router of a resource made of sub-modules: `merged_routers![a, b]` is
/// `Router::new().merge(a::router()).merge(b::router())`.
macro_rules! merged_routers {
    ($($module:ident),+ $(,)?) => {
        axum::Router::new()$(.merge($module::router()))+
    };
}

pub mod access;
pub mod auth;
pub mod blobs;
pub mod body;
pub mod caller;
pub mod capability;
pub mod confirm;
pub mod discovery;
pub mod documents;
pub mod error;
pub mod events;
pub mod history;
pub mod index;
pub mod ingest;
pub mod listener;
pub mod listing;
pub mod metrics;
pub mod pod_logs;
pub mod policy_eval;
pub mod prelude;
pub mod query;
pub mod read_only;
pub mod relations;
pub mod render;
pub mod request;
pub mod resources;
pub mod runner_auth;
pub mod settings;
#[cfg(test)]
pub(crate) mod testing;
pub mod ui;
pub mod vcs;
pub mod write;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;

pub use error::ApiError;
pub use settings::{Edition, Settings};

/// Shared state of the request handlers: one `Arc`, so the clone every extractor makes
/// is one reference count (a `kube::Client` clone alone costs a tower Buffer handle).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// Bytes of module archives the registry keeps in memory per API server.
pub const MODULE_ARCHIVE_CACHE_BYTES: usize = 64 << 20;

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
pub struct Shared {
    pub settings: Arc<Settings>,
    pub client: kube::Client,
    pub index: Arc<index::Index>,
    pub auth: Arc<auth::Auth>,
    pub events: kube::runtime::events::Recorder,
    pub rendered: Arc<resources::workspaces::RenderCache>,
    /// Whole GET responses of single workspaces (the fast path).
    pub responses: Arc<resources::workspaces::ResponseCache>,
    pub metrics: Arc<metrics::Metrics>,
    /// Signs capability URLs.
    pub signer: Arc<capability::Signer>,
    /// Where blobs live (`--blob-store`).
    pub blobs: blobs::BlobBackend,
    /// Whether the server may take traffic (`/readyz`): not while the blob store fails
    /// its probe.
    pub readiness: Arc<blobs::Readiness>,
    /// Module archives recently downloaded through the registry.
    pub module_archives: Arc<resources::registry::protocol::ArchiveCache>,
    /// Archived runs and test runs.
    pub history: Arc<history::History>,
    /// The tokens of run Secrets already read (runner credentials).
    pub secret_tokens: Arc<runner_auth::SecretTokens>,
}

impl AppState {
    /// State over `client`; call [`AppState::start`] to feed the indexes.
    pub fn new(settings: Settings, client: kube::Client) -> AppState {
        let index = Arc::new(index::Index::default());
        let signer = Arc::new(capability::Signer::new(settings.url_signing_key.as_deref()));
        let blobs = blobs::BlobBackend::from_settings(&settings.blobs);
        let readiness = Arc::new(blobs::Readiness::default());
        if let blobs::BlobBackend::Misconfigured(why) = &blobs {
            readiness.block(format!("the S3 blob store is misconfigured: {why}"));
        }
        let auth = Arc::new(auth::Auth::new(client.clone()));
        AppState(Arc::new(Shared {
            blobs,
            readiness,
            module_archives: Arc::new(resources::registry::protocol::ArchiveCache::new(
                MODULE_ARCHIVE_CACHE_BYTES,
            )),
            settings: Arc::new(settings),
            metrics: Arc::new(metrics::Metrics::new(index.clone(), &auth)),
            auth,
            index,
            events: events::recorder(client.clone()),
            rendered: Arc::default(),
            responses: Arc::default(),
            history: Arc::default(),
            secret_tokens: Arc::default(),
            signer,
            client,
        }))
    }

    /// Starts the watches and waits (bounded) for their initial lists, and the probe of
    /// an S3 blob store (the server is not ready until it passes).
    pub async fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = self.index.spawn_watches(self.client.clone());
        if self.blobs.is_external() {
            let (backend, readiness) = (self.blobs.clone(), self.readiness.clone());
            // Blocked before the first probe answers.
            readiness.block("probing the blob store");
            tasks.push(tokio::spawn(blobs::probe_until_ready(backend, readiness)));
        }
        if !self.index.wait_synced(Duration::from_secs(30)).await {
            tracing::warn!("indexes not synced after 30s; serving anyway");
        }
        // VCS connections whose webhooks cannot come are polled (docs/vcs.md).
        tasks.push(tokio::spawn(resources::oauth_clients::poll::run(
            self.clone(),
        )));
        tasks
    }

    /// Whether the server acts as the hosted edition.
    pub fn hosted(&self) -> bool {
        self.settings.edition == Edition::Hosted
    }
}

/// The first path segments of the API's collections (TFE's), for [`meant_path`].
const API_COLLECTIONS: &[&str] = &[
    "organizations",
    "workspaces",
    "projects",
    "runs",
    "plans",
    "applies",
    "state-versions",
    "state-version-outputs",
    "configuration-versions",
    "registry-modules",
    "varsets",
    "vars",
    "run-triggers",
    "notification-configurations",
    "policy-sets",
    "policies",
    "policy-checks",
    "policy-evaluations",
    "policy-set-outcomes",
    "task-stages",
    "run-events",
    "comments",
    "agent-pools",
    "ssh-keys",
    "oauth-tokens",
    "tag-bindings",
    "test-runs",
    "ping",
];

/// The path a request that no route matched most likely meant: one lacking the
/// `/api/v2` prefix (`/workspaces/ws-…`, what `$API/…` gives when `API` lacks it) or
/// having it twice (`$API/api/v2/…`, what it gives when `API` already ends in it). A 404
/// says it (issue 41 §10).
pub fn meant_path(path: &str) -> Option<String> {
    if let Some(rest) = path.strip_prefix("/api/v2/api/v2/") {
        return Some(format!("/api/v2/{rest}"));
    }
    let first = path.trim_start_matches('/').split('/').next()?;
    API_COLLECTIONS
        .contains(&first)
        .then(|| format!("/api/v2{path}"))
}

/// The whole HTTP API. Every route has [`request::RequestLayer`] (request ID, span, logs,
/// metrics, panics answered 500), with the global body limit except on the upload routes,
/// which set their own.
pub fn router(state: AppState) -> Router {
    let layer = request::RequestLayer::new(state.metrics.clone());
    let scrape = state.settings.metrics_on_api_router.then(|| {
        let metrics = state.metrics.clone();
        Router::new().route(
            "/metrics",
            axum::routing::get(move || async move { metrics::scrape(&metrics) }),
        )
    });
    let api = Router::new()
        .merge(discovery::router())
        .merge(resources::router())
        .fallback(|uri: axum::http::Uri| async move {
            let p = uri.path();
            if p == "/app" || p.starts_with("/app/") {
                ui::not_found()
            } else {
                axum::response::IntoResponse::into_response(ApiError::not_found(
                    match meant_path(p) {
                        Some(meant) => format!(
                            "no such endpoint: {p}; the API's paths start with /api/v2 once, did you mean {meant}?"
                        ),
                        None => "no such endpoint".to_owned(),
                    },
                ))
            }
        })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(layer.clone().with_body_limit(state.settings.max_body_bytes))
        .merge(
            resources::upload_router(&state.settings)
                .merge(scrape.unwrap_or_default())
                .layer(layer.clone()),
        )
        .with_state(state.clone());
    // The web view sends its requests to the API router itself (ui::Ui::call).
    ui::router(state, api.clone(), layer).merge(api)
}

/// Starts the indexes and serves the API on `listener` until `shutdown` resolves, and
/// `/metrics` (with `/healthz`, `/readyz`) on `settings.metrics_addr` when set.
/// `callers` is a client of the same cluster with no credentials of its own: it sends
/// each caller's rules review under the caller's token (see [`auth`]); without it every
/// decision is a SubjectAccessReview.
pub async fn serve(
    settings: Settings,
    client: kube::Client,
    callers: Option<kube::Client>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use futures::FutureExt;
    let metrics_listener = match settings.metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(addr = %l.local_addr()?, "API metrics listening");
            Some(l)
        }
        None => None,
    };
    let shutdown = shutdown.boxed().shared();
    let state = AppState::new(settings, client);
    if let Some(callers) = callers {
        state.auth.review_rules_as_callers(callers);
    }
    let metrics_task = metrics_listener.map(|l| {
        tokio::spawn(serve_metrics(
            state.metrics.clone(),
            state.readiness.clone(),
            l,
            shutdown.clone(),
        ))
    });
    let tasks = state.start().await;
    let result = serve_state(state, listener, shutdown).await;
    for t in tasks {
        t.abort();
    }
    if let Some(t) = metrics_task {
        match t.await {
            Ok(r) => r?,
            Err(e) => tracing::warn!(error = %e, "metrics server task"),
        }
    }
    result
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `listener` until `shutdown` resolves.
pub async fn serve_metrics(
    metrics: Arc<metrics::Metrics>,
    readiness: Arc<blobs::Readiness>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, metrics::router(metrics, readiness))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves an already started [`AppState`] on `listener` until `shutdown` resolves.
pub async fn serve_state(
    state: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.settings.limits.clone();
    listener::serve(router(state), listener, limits, shutdown).await
}

#[cfg(test)]
mod meant_path_tests {
    use super::meant_path;
    use crate::Edition;
    use crate::testing::harness;

    #[test]
    fn a_path_lacking_or_doubling_the_prefix_names_the_meant_one() {
        let cases = [
            ("/workspaces/ws-1", Some("/api/v2/workspaces/ws-1")),
            (
                "/organizations/acme/workspaces",
                Some("/api/v2/organizations/acme/workspaces"),
            ),
            (
                "/api/v2/api/v2/registry-modules/acme/vpc/aws/versions",
                Some("/api/v2/registry-modules/acme/vpc/aws/versions"),
            ),
            ("/api/v2/organizations/acme/nothing", None),
            ("/favicon.ico", None),
            ("/", None),
        ];
        for (path, want) in cases {
            assert_eq!(meant_path(path).as_deref(), want, "{path}");
        }
    }

    /// A 404 on a path that lacks `/api/v2` says which path was meant (issue 41 §10).
    #[tokio::test]
    async fn the_404_says_which_path_was_meant() {
        let h = harness(Edition::SelfHosted).await;
        let (st, doc) = h.call("GET", "/organizations/acme/workspaces", None).await;
        assert_eq!(st, 404, "{doc}");
        let detail = doc["errors"][0]["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("did you mean /api/v2/organizations/acme/workspaces?"),
            "{doc}"
        );
        let (st, doc) = h
            .call("GET", "/api/v2/api/v2/organizations/acme/workspaces", None)
            .await;
        assert_eq!(st, 404, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("did you mean /api/v2/organizations/acme/workspaces?")),
            "{doc}"
        );
    }
}
