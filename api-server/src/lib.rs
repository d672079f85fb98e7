//! terrace's JSON:API server: the HCP Terraform / TFE API v2 subset of SPEC.md, served on
//! top of the cluster's terrace objects.
//!
//! Requests come in through [`router`]; each resource module owns its routes. Everything
//! the server does not serve answers a JSON:API 404, so clients see the error format they
//! expect from TFE rather than axum's plain text.
#![forbid(unsafe_code)]

mod discovery;
pub mod error;
pub mod jsonapi;
pub mod settings;

use axum::Router;
use axum::http::StatusCode;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use settings::{Edition, Settings};

/// Shared state of the request handlers.
#[derive(Clone)]
pub struct AppState {
    pub settings: std::sync::Arc<Settings>,
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    let body_limit = state.settings.max_body_bytes;
    Router::new()
        .merge(discovery::router())
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async {
            ApiError::Status(StatusCode::METHOD_NOT_ALLOWED, "method not allowed".into())
        })
        .layer(RequestBodyLimitLayer::new(body_limit))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves the API on `listener` until `shutdown` resolves.
pub async fn serve(
    settings: Settings,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = AppState {
        settings: std::sync::Arc::new(settings),
    };
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
