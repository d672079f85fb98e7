//! Prometheus metrics, request IDs and request logs of the API server.
//!
//! Every request passes [`RequestLayer`] (applied per route, after routing, so the
//! matched route template is known): a request ID is taken from `x-request-id`, else
//! from the trace-id of a W3C `traceparent`, else generated; the request runs in an
//! INFO span `request` (method, route, path, request_id), so every log line of the
//! request carries the ID; the response echoes it in `x-request-id`; the request is
//! counted by route template, method and status and its latency observed. Labels never
//! hold the raw path: `/api/v2/workspaces/{id}`, not one series per workspace.
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

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::Router;
use axum::extract::MatchedPath;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, header};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::Layer;
use tower::Service;

use crate::index::Index;

/// The request ID header, read and echoed.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The W3C trace context header whose trace-id becomes the request ID.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Content type of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Route label of requests no route matched (answered by the fallback).
const UNMATCHED: &str = "unmatched";

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
    /// The metrics of a server reading `index`.
    pub fn new(index: Arc<Index>) -> Metrics {
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

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Metric handles of one route template and method, resolved on the route's first
/// request and kept by its [`RequestService`], so later requests skip the label-map
/// lookups: an `Arc` clone, a histogram observation and an atomic increment.
struct RouteHandles {
    route: Arc<str>,
    method: &'static str,
    duration: Histogram,
    /// Counters of the statuses seen so far (few per route).
    statuses: RwLock<Vec<(u16, Counter)>>,
}

impl RouteHandles {
    fn new(metrics: &Metrics, route: Arc<str>, method: &'static str) -> RouteHandles {
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

    fn is_for(&self, route: &str, method: &'static str) -> bool {
        self.method == method && *self.route == *route
    }

    fn record(&self, metrics: &Metrics, status: u16, seconds: f64) {
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

/// The per-request layer of the API router (see the module docs): request ID, span,
/// logs, metrics, and the echoed `x-request-id`. One layer rather than tower-http's
/// SetRequestId + Trace + PropagateRequestId: axum boxes every layer per route, and each
/// of those also touched the request's headers and extensions, which cost about a fifth
/// of a cached GET; the behaviour is theirs (TraceLayer's events included).
#[derive(Clone)]
pub struct RequestLayer {
    metrics: Arc<Metrics>,
}

impl RequestLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        RequestLayer { metrics }
    }
}

impl<S> Layer<S> for RequestLayer {
    type Service = RequestService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestService {
            inner,
            metrics: self.metrics.clone(),
            handles: Arc::default(),
        }
    }
}

/// The service of [`RequestLayer`]. Axum applies the layer once per route and method,
/// so `handles` caches that route's metric handles.
#[derive(Clone)]
pub struct RequestService<S> {
    inner: S,
    metrics: Arc<Metrics>,
    handles: Arc<OnceLock<Arc<RouteHandles>>>,
}

impl<S> RequestService<S> {
    fn handles(&self, route: &str, method: &'static str) -> Arc<RouteHandles> {
        if let Some(h) = self.handles.get()
            && h.is_for(route, method)
        {
            return h.clone();
        }
        let h = Arc::new(RouteHandles::new(&self.metrics, Arc::from(route), method));
        // Only the first route and method seen are cached (others: the 405 fallback).
        let _ = self.handles.set(h.clone());
        h
    }
}

impl<S, B, R> Service<Request<B>> for RequestService<S>
where
    S: Service<Request<B>, Response = Response<R>>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = RequestFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let start = Instant::now();
        let route = req
            .extensions()
            .get::<MatchedPath>()
            .map_or(UNMATCHED, MatchedPath::as_str);
        let method = method_label(req.method());
        let handles = self.handles(route, method);
        let request_id = request_id(req.headers());
        // Capability URLs carry their secret in the path: log the route template instead.
        let path = if route.contains("{token}") {
            route
        } else {
            req.uri().path()
        };
        let span = tracing::info_span!(
            "request",
            method = %req.method(),
            route,
            path,
            request_id = logged_id(&request_id),
        );
        let inner = {
            let _entered = span.enter();
            tracing::debug!("started processing request");
            self.inner.call(req)
        };
        RequestFuture {
            inner,
            done: Some(Done {
                metrics: self.metrics.clone(),
                handles,
                request_id,
                start,
            }),
            span,
        }
    }
}

struct Done {
    metrics: Arc<Metrics>,
    handles: Arc<RouteHandles>,
    request_id: HeaderValue,
    start: Instant,
}

pin_project_lite::pin_project! {
    /// The future of [`RequestService`]: runs the handler in the request span; when the
    /// response head is ready, records the metrics, logs and adds `x-request-id`.
    pub struct RequestFuture<F> {
        #[pin]
        inner: F,
        done: Option<Done>,
        span: tracing::Span,
    }
}

impl<F, R, E> Future for RequestFuture<F>
where
    F: Future<Output = Result<Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let mut out = std::task::ready!(this.inner.poll(cx));
        if let Some(d) = this.done.take() {
            let latency = d.start.elapsed();
            let status = match &mut out {
                Ok(res) => {
                    res.headers_mut()
                        .entry(&X_REQUEST_ID)
                        .or_insert(d.request_id);
                    res.status().as_u16()
                }
                Err(_) => 500,
            };
            d.handles.record(&d.metrics, status, latency.as_secs_f64());
            let latency_ms = latency.as_secs_f64() * 1000.0;
            if status >= 500 {
                tracing::error!(status, latency_ms, "response failed");
            } else {
                tracing::debug!(status, latency_ms, "finished processing request");
            }
        }
        Poll::Ready(out)
    }
}

/// The trace-id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), when well
/// formed and not all zeros.
pub fn trace_id(traceparent: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(traceparent).ok()?;
    let mut parts = s.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let ok = hex(version, 2)
        && version != "ff"
        && hex(trace, 32)
        && hex(parent, 16)
        && hex(flags, 2)
        && trace.bytes().any(|b| b != b'0');
    ok.then_some(trace)
}

/// The request ID of a request with these headers: its `x-request-id`, else the
/// `traceparent` trace-id (so logs join the caller's trace), else 32 random hex digits,
/// W3C trace-id shaped.
pub fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(id) = headers.get(&X_REQUEST_ID) {
        return id.clone();
    }
    if let Some(id) = headers
        .get(&TRACEPARENT)
        .and_then(|v| trace_id(v.as_bytes()))
        .and_then(|id| HeaderValue::from_str(id).ok())
    {
        return id;
    }
    // A random prefix per process and a counter: unique, and cheaper than drawing 128
    // random bits per request.
    static PREFIX: std::sync::LazyLock<u64> = std::sync::LazyLock::new(rand::random);
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let count = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut n = (u128::from(*PREFIX) << 64) | u128::from(count);
    let mut buf = [0u8; 32];
    for b in buf.iter_mut().rev() {
        *b = HEX[(n & 0xf) as usize];
        n >>= 4;
    }
    HeaderValue::from_bytes(&buf).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// Longest request ID put into the span (a client's `x-request-id` is echoed whole).
const MAX_LOGGED_ID: usize = 128;

fn logged_id(id: &HeaderValue) -> &str {
    let s = id.to_str().unwrap_or("(not visible ASCII)");
    s.get(..MAX_LOGGED_ID).unwrap_or(s)
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

    #[test]
    fn trace_ids_come_from_valid_traceparents_only() {
        let tp = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id(tp), Some("4bf92f3577b34da6a3ce929d0e0e4736"));
        for bad in [
            &b"00-00000000000000000000000000000000-00f067aa0ba902b7-01"[..],
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"garbage",
        ] {
            assert_eq!(trace_id(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn generated_ids_are_32_hex_digits_and_differ() {
        let a = request_id(&HeaderMap::new());
        let b = request_id(&HeaderMap::new());
        let a = a.to_str().unwrap().to_owned();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b.to_str().unwrap());
    }

    async fn app() -> (terrace_simulator::Simulator, crate::AppState) {
        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .expect("simulator");
        let state = crate::AppState::new(crate::Settings::default(), sim.client());
        (sim, state)
    }

    async fn send(
        state: &crate::AppState,
        req: Request<axum::body::Body>,
    ) -> axum::http::Response<axum::body::Body> {
        use tower::ServiceExt;
        crate::router(state.clone())
            .oneshot(req)
            .await
            .expect("response")
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

    /// The response carries the request ID: the client's `x-request-id`, else the
    /// `traceparent` trace-id, else a generated one.
    #[tokio::test]
    async fn request_ids_are_echoed_honoured_or_generated() {
        let (_sim, state) = app().await;
        let empty = axum::body::Body::empty;
        let id = |res: &axum::http::Response<axum::body::Body>| {
            res.headers()[&X_REQUEST_ID].to_str().unwrap().to_owned()
        };
        let res = send(
            &state,
            get("/api/v2/ping")
                .header("x-request-id", "client-chosen-1")
                .header(
                    "traceparent",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                )
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(id(&res), "client-chosen-1");
        let res = send(
            &state,
            get("/nothing")
                .header(
                    "traceparent",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                )
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(id(&res), "4bf92f3577b34da6a3ce929d0e0e4736");
        let res = send(&state, get("/api/v2/ping").body(empty()).unwrap()).await;
        assert_eq!(id(&res).len(), 32);
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

        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .expect("simulator");
        let settings = crate::Settings {
            metrics_on_api_router: true,
            ..Default::default()
        };
        let state = crate::AppState::new(settings, sim.client());
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
