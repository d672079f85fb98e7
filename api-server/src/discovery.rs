//! Service discovery and health: `GET /.well-known/terraform.json` (what the terraform
//! CLI and go-tfe read first), `GET /api/v2/ping`, `/healthz`, `/readyz`.

use axum::Router;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::AppState;

/// API version reported in `TFP-API-Version` (go-tfe reads it on ping).
pub const TFP_API_VERSION: &str = "2.6";
/// The TFE release announced in `X-TFE-Version`. The terraform CLI reads it (against an
/// instance that is not HCP Terraform) to decide whether the release renders CLI runs as
/// structured run output (202302-1 and later do); terrace's runs log the engine's JSON UI
/// for workspaces with `structured-run-output-enabled`, so it announces a release that does.
pub const TFE_VERSION: &str = "v202502-1";
/// Requests per second announced in `X-RateLimit-Limit` (TFE's figure).
pub const RATE_LIMIT: &str = "30";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/terraform.json", get(well_known))
        .route("/api/v2/ping", get(ping))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(
                |axum::extract::State(state): axum::extract::State<AppState>| async move {
                    state.readiness.answer()
                },
            ),
        )
}

/// The services terrace serves (see the constant's words).
pub use terrace_crds::constants::DISCOVERY_SERVICES as SERVICES;

async fn well_known() -> impl IntoResponse {
    let body: serde_json::Map<String, serde_json::Value> = SERVICES
        .iter()
        .map(|(name, path)| ((*name).to_owned(), (*path).into()))
        .collect();
    let body = serde_json::Value::Object(body);
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

async fn ping() -> impl IntoResponse {
    (
        StatusCode::NO_CONTENT,
        [
            (
                HeaderName::from_static("tfp-api-version"),
                HeaderValue::from_static(TFP_API_VERSION),
            ),
            (
                HeaderName::from_static("tfp-appname"),
                HeaderValue::from_static("terrace"),
            ),
            (
                HeaderName::from_static("x-tfe-version"),
                HeaderValue::from_static(TFE_VERSION),
            ),
            // go-tfe limits itself to two thirds of this per second, as against TFE (the
            // CLI polls a queued test run in a loop with no pause of its own).
            (
                HeaderName::from_static("x-ratelimit-limit"),
                HeaderValue::from_static(RATE_LIMIT),
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn app() -> axum::Router {
        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .expect("simulator");
        crate::router(crate::AppState::new(
            crate::Settings::default(),
            sim.client(),
        ))
    }

    async fn get(path: &str) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let res = app()
            .await
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.expect("body").to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (status, headers, json)
    }

    #[tokio::test]
    async fn ping_answers_204_with_api_version() {
        let (status, headers, _) = get("/api/v2/ping").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(headers["tfp-api-version"], "2.6");
        assert_eq!(headers["x-ratelimit-limit"], "30");
        assert_eq!(headers["x-tfe-version"], super::TFE_VERSION);
    }

    #[tokio::test]
    async fn well_known_points_at_api_v2() {
        let (status, _, body) = get("/.well-known/terraform.json").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["tfe.v2"], "/api/v2/");
        assert_eq!(body["tfe.v2.1"], "/api/v2/");
        // The private module registry's protocol.
        assert_eq!(body["modules.v1"], "/api/registry/v1/modules/");
    }

    #[tokio::test]
    async fn unknown_paths_are_jsonapi_404() {
        let (status, headers, body) = get("/api/v2/nothing-here").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(headers["content-type"], "application/vnd.api+json");
        assert_eq!(body["errors"][0]["status"], "404");
    }

    #[tokio::test]
    async fn wrong_method_is_jsonapi_405() {
        let res = app()
            .await
            .oneshot(
                Request::post("/api/v2/ping")
                    .body(Body::empty())
                    .expect("request"),
            )
            .await
            .expect("response");
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(res.headers()["content-type"], "application/vnd.api+json");
    }

    #[tokio::test]
    async fn workspace_endpoints_need_a_token() {
        let (status, _, body) = get("/api/v2/organizations/acme/workspaces").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["errors"][0]["status"], "401");
    }
}
