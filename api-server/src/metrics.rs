//! Prometheus metrics of the API server.
//!
//! Every request is counted by route template, method and status and its latency
//! observed, by [`crate::request::RequestLayer`] through a route's [`RouteHandles`].
//! Labels never hold the raw path: `/api/v2/workspaces/{id}`, not one series per
//! workspace.
//!
//! The per-request cost is kept small: metric handles are resolved once per route and
//! cached in the route's service, and the index gauges are computed only at scrape time
//! ([`IndexCollector`]).
//!
//! `/metrics` is served on its own listener (`--metrics-addr`, [`router`]), so the public
//! Ingress of the API port never exposes it; `terrace dev` mounts it on the API port
//! instead (`Settings::metrics_on_api_router`).
//!
//! Metrics (an alerting guide should list these):
//! - `terrace_api_requests_total{route,method,status}`;
//! - `terrace_api_request_duration_seconds{route,method}` — histogram, time to the
//!   response head;
//! - `terrace_api_index_objects{kind}` — objects per indexed kind;
//! - `terrace_api_index_last_event_age_seconds{kind}` — since the kind's watch last
//!   delivered anything (grows while a kind is idle; since start before the first list);
//! - `terrace_api_index_watch_errors_total{kind}`;
//! - `terrace_api_index_invalid_objects_total{kind}` (objects skipped as undeserializable);
//! - `terrace_api_index_wait_seconds` — how long handlers waited after a write for the
//!   index to show it (the watch lag clients feel), and
//!   `terrace_api_index_wait_timeouts_total` when that wait gave up.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, RwLock};

use axum::Router;
use axum::http::{HeaderName, header};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::index::Index;

/// Content type of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: Arc<str>,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: Arc<str>,
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

fn request_histogram() -> Histogram {
    // 0.5 ms … 4 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 14))
}

/// Writes OpenMetrics text (without `# EOF`) of metrics kept elsewhere.
type Exposition = dyn Fn(&mut String) + Send + Sync;

/// The API server's metrics and their registry.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RouteLabels, Histogram>,
    /// Another exposition served along (see [`Metrics::also_expose`]).
    extra: OnceLock<Box<Exposition>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The metrics of a server reading `index` and reviewing access with `auth`.
    pub fn new(index: Arc<Index>, auth: &crate::auth::Auth) -> Metrics {
        let mut registry = Registry::with_prefix("terrace_api");
        let requests = Family::<RequestLabels, Counter>::default();
        let durations = Family::<RouteLabels, Histogram>::new_with_constructor(
            request_histogram as fn() -> Histogram,
        );
        registry.register(
            "requests",
            "HTTP requests, per route template, method and status",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time to the response head, per route template and method",
            durations.clone(),
        );
        let (wait, timeouts) = index.wait_metrics();
        registry.register(
            "index_wait_seconds",
            "Time handlers waited after a write until the index showed it",
            wait,
        );
        registry.register(
            "index_wait_timeouts",
            "Waits for the index that gave up",
            timeouts,
        );
        registry.register(
            "token_reviews",
            "TokenReviews sent to the cluster (a round trip each; answers are cached briefly)",
            auth.token_reviews.clone(),
        );
        registry.register(
            "access_reviews",
            "SubjectAccessReviews sent to the cluster (a round trip each; answers are cached briefly)",
            auth.access_reviews.clone(),
        );
        registry.register(
            "rules_reviews",
            "SelfSubjectRulesReviews sent with callers' tokens (a round trip each per caller and namespace; answers are cached briefly)",
            auth.rules_reviews.clone(),
        );
        registry.register_collector(Box::new(IndexCollector { index }));
        Metrics {
            registry,
            requests,
            durations,
            extra: OnceLock::new(),
        }
    }

    /// Serves the metrics `f` writes (OpenMetrics text without `# EOF`) along with this
    /// server's: `terrace dev` adds the in-process operator's. Only the first call counts.
    pub fn also_expose(&self, f: impl Fn(&mut String) + Send + Sync + 'static) {
        let _ = self.extra.set(Box::new(f));
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = text::encode_registry(&mut out, &self.registry);
        if let Some(extra) = self.extra.get() {
            extra(&mut out);
        }
        let _ = text::encode_eof(&mut out);
        out
    }
}

/// `/metrics` (plus `/healthz` and `/readyz`) for the separate metrics listener.
pub fn router(metrics: Arc<Metrics>, readiness: Arc<crate::blobs::Readiness>) -> Router {
    Router::new()
        .route("/metrics", get(move || async move { scrape(&metrics) }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(move || async move { readiness.answer() }))
}

/// The `/metrics` response.
pub fn scrape(metrics: &Metrics) -> ([(HeaderName, &'static str); 1], String) {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        metrics.encode(),
    )
}

/// Metric handles of one route template and method, resolved on the route's first
/// request and kept by its [`RequestService`], so later requests skip the label-map
/// lookups: an `Arc` clone, a histogram observation and an atomic increment.
pub struct RouteHandles {
    route: Arc<str>,
    method: &'static str,
    duration: Histogram,
    /// Counters of the statuses seen so far (few per route).
    statuses: RwLock<Vec<(u16, Counter)>>,
}

impl RouteHandles {
    pub fn new(metrics: &Metrics, route: Arc<str>, method: &'static str) -> RouteHandles {
        let duration = metrics.durations.get_or_create_owned(&RouteLabels {
            route: route.clone(),
            method,
        });
        RouteHandles {
            route,
            method,
            duration,
            statuses: RwLock::default(),
        }
    }

    pub fn is_for(&self, route: &str, method: &'static str) -> bool {
        self.method == method && *self.route == *route
    }

    pub fn record(&self, metrics: &Metrics, status: u16, seconds: f64) {
        self.duration.observe(seconds);
        if let Some((_, c)) = self
            .statuses
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(s, _)| *s == status)
        {
            c.inc();
            return;
        }
        let counter = metrics.requests.get_or_create_owned(&RequestLabels {
            route: self.route.clone(),
            method: self.method,
            status,
        });
        counter.inc();
        let mut statuses = self.statuses.write().unwrap_or_else(|e| e.into_inner());
        if !statuses.iter().any(|(s, _)| *s == status) {
            statuses.push((status, counter));
        }
    }
}

/// Encodes one metric family labelled by kind: `(name, help)` of `metric_type`, one sample
/// per `(kind, metric)`.
fn encode_per_kind(
    encoder: &mut DescriptorEncoder,
    (name, help): (&str, &str),
    metric_type: MetricType,
    samples: impl Iterator<Item = (&'static str, impl EncodeMetric)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (kind, metric) in samples {
        metric.encode(family.encode_family(&KindLabels { kind })?)?;
    }
    Ok(())
}

/// Index gauges computed at scrape time.
#[derive(Debug)]
struct IndexCollector {
    index: Arc<Index>,
}

impl Collector for IndexCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.index.read().counts();
        let now = crate::index::unix_millis();
        let stats = move || self.index.watch_stats();
        encode_per_kind(
            &mut encoder,
            (
                "index_objects",
                "Objects in the API server's index, per kind",
            ),
            MetricType::Gauge,
            counts
                .into_iter()
                .map(|(kind, n)| (kind, ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX)))),
        )?;
        encode_per_kind(
            &mut encoder,
            (
                "index_last_event_age_seconds",
                "Seconds since the kind's watch last delivered an event (since start before the first list)",
            ),
            MetricType::Gauge,
            stats().map(|(kind, stats)| {
                let last = stats.last_event_ms.load(Ordering::Relaxed);
                let age = (now.saturating_sub(last)).max(0) as f64 / 1000.0;
                (kind, ConstGauge::new(age))
            }),
        )?;
        encode_per_kind(
            &mut encoder,
            (
                "index_watch_errors",
                "Errors of the index's watches, per kind",
            ),
            MetricType::Counter,
            stats().map(|(kind, s)| (kind, ConstCounter::new(s.errors.load(Ordering::Relaxed)))),
        )?;
        encode_per_kind(
            &mut encoder,
            (
                "index_invalid_objects",
                "Objects the index's watches skipped because they do not deserialize, per kind",
            ),
            MetricType::Counter,
            stats().map(|(kind, s)| (kind, ConstCounter::new(s.invalid.load(Ordering::Relaxed)))),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{bare_state, send};
    use axum::http::Request;

    async fn app() -> (terrace_simulator::Simulator, crate::AppState) {
        bare_state(crate::Settings::default()).await
    }

    fn get(path: &str) -> axum::http::request::Builder {
        Request::get(path)
    }

    /// Requests are counted by route template, method and status; the raw path (with
    /// its IDs) never becomes a label; unrouted requests share one label.
    #[tokio::test]
    async fn requests_are_counted_by_route_template() {
        let (_sim, state) = app().await;
        let empty = axum::body::Body::empty;
        for path in [
            "/api/v2/ping",
            "/api/v2/ping",
            "/api/v2/workspaces/ws-aaaaaaaaaaaaaaaa",
            "/api/v2/workspaces/ws-bbbbbbbbbbbbbbbb",
            "/no/such/thing",
        ] {
            send(&state, get(path).body(empty()).unwrap()).await;
        }
        send(&state, Request::post("/api/v2/ping").body(empty()).unwrap()).await;
        let text = state.metrics.encode();
        for line in [
            r#"terrace_api_requests_total{route="/api/v2/ping",method="GET",status="204"} 2"#,
            r#"terrace_api_requests_total{route="/api/v2/ping",method="POST",status="405"} 1"#,
            r#"terrace_api_requests_total{route="/api/v2/workspaces/{id}",method="GET",status="401"} 2"#,
            r#"terrace_api_requests_total{route="unmatched",method="GET",status="404"} 1"#,
            r#"terrace_api_request_duration_seconds_count{route="/api/v2/ping",method="GET"} 2"#,
            r#"terrace_api_index_objects{kind="Workspace"} 0"#,
            r#"terrace_api_index_watch_errors_total{kind="TestRun"} 0"#,
            "# TYPE terrace_api_index_last_event_age_seconds gauge",
            "# TYPE terrace_api_index_wait_seconds histogram",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(!text.contains("ws-aaaa"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    /// `/metrics` is not on the API router unless asked for (`terrace dev`), and then
    /// serves the extra exposition too.
    #[tokio::test]
    async fn metrics_route_only_on_request() {
        let (_sim, state) = app().await;
        let res = send(
            &state,
            get("/metrics").body(axum::body::Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(res.status(), axum::http::StatusCode::NOT_FOUND);

        let (_sim, state) = bare_state(crate::Settings {
            metrics_on_api_router: true,
            ..Default::default()
        })
        .await;
        state.metrics.also_expose(|out| {
            out.push_str("# TYPE other_thing gauge\nother_thing 1\n");
        });
        let res = send(
            &state,
            get("/metrics").body(axum::body::Body::empty()).unwrap(),
        )
        .await;
        assert_eq!(res.status(), axum::http::StatusCode::OK);
        assert!(
            res.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("application/openmetrics-text")
        );
        use http_body_util::BodyExt;
        let body = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.contains("other_thing 1\n# EOF\n"), "{text}");
        assert!(text.contains("terrace_api_index_objects"), "{text}");
    }
}
