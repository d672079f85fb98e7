//! The one per-request layer of the API router, [`RequestLayer`] (applied per route,
//! after routing, so the matched route template is known):
//!
//! - **request ID**: taken from `x-request-id`, else from the trace-id of a W3C
//!   `traceparent`, else generated; the response echoes it in `x-request-id`;
//! - **span and logs**: the request runs in an INFO span `request` (method, route, path,
//!   request_id), so every log line of the request carries the ID;
//! - **metrics**: the request is counted by route template, method and status and its
//!   latency observed ([`crate::metrics`]). Labels never hold the raw path:
//!   `/api/v2/workspaces/{id}`, not one series per workspace;
//! - **panics**: a handler that panics answers a 500 JSON:API document (the panic's
//!   message goes to the log, not to the client) instead of dropping the connection;
//! - **body limit** (where set): a `Content-Length` over the limit is answered 413 before
//!   the handler runs, and a body without one is cut at the limit (the extractors then
//!   answer 413).
//!
//! These are one layer, not tower-http's SetRequestId + Trace + PropagateRequestId +
//! CatchPanic + RequestBodyLimit: axum boxes every layer per route, and each layer cost a
//! boxed clone and a nested future per request, about a tenth of a cached GET each. The
//! behaviour is theirs (TraceLayer's events included).

use std::convert::Infallible;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, HttpBody as _};
use axum::extract::MatchedPath;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, header};
use axum::response::IntoResponse as _;
use tower::{Layer, Service};

use crate::error::ApiError;
use crate::metrics::{Metrics, RouteHandles};

/// The request ID header, read and echoed.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// The W3C trace context header whose trace-id becomes the request ID.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Route label of requests no route matched (answered by the fallback).
const UNMATCHED: &str = "unmatched";

/// Longest request ID put into the span (a client's `x-request-id` is echoed whole).
const MAX_LOGGED_ID: usize = 128;

/// The per-request layer (see the module docs).
#[derive(Clone)]
pub struct RequestLayer {
    metrics: Arc<Metrics>,
    body_limit: Option<usize>,
}

impl RequestLayer {
    /// The layer, with no body limit (routes that set their own, or take no body).
    pub fn new(metrics: Arc<Metrics>) -> Self {
        RequestLayer {
            metrics,
            body_limit: None,
        }
    }

    /// The layer, with request bodies limited to `bytes`.
    pub fn with_body_limit(self, bytes: usize) -> Self {
        RequestLayer {
            body_limit: Some(bytes),
            ..self
        }
    }
}

impl<S> Layer<S> for RequestLayer {
    type Service = RequestService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestService {
            inner,
            metrics: self.metrics.clone(),
            body_limit: self.body_limit,
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
    body_limit: Option<usize>,
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

impl<S> Service<Request<Body>> for RequestService<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = RequestFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
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
        let stage = {
            let _entered = span.enter();
            tracing::debug!("started processing request");
            let limited = match self.body_limit {
                Some(limit) => limit_body(req, limit),
                None => Ok(req),
            };
            match limited {
                Err(e) => Stage::Answered {
                    answer: Some(e.into_response()),
                },
                Ok(req) => match catch_unwind(AssertUnwindSafe(|| self.inner.call(req))) {
                    Ok(handler) => Stage::Handler { handler },
                    Err(payload) => Stage::Answered {
                        answer: Some(panicked(payload)),
                    },
                },
            }
        };
        RequestFuture {
            stage,
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

/// `req` with its body limited to `limit` bytes, or the 413 when its `Content-Length` is
/// over it.
fn limit_body(req: Request<Body>, limit: usize) -> Result<Request<Body>, ApiError> {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    match length {
        Some(n) if n > limit => Err(ApiError::TooLarge(
            format!("the request body is larger than this endpoint accepts ({limit} bytes)").into(),
        )),
        // No body (a GET): nothing to limit, and no second box around it.
        _ if req.body().is_end_stream() => Ok(req),
        n => {
            let limit = n.map_or(limit, |n| n.min(limit));
            Ok(req.map(|b| Body::new(http_body_util::Limited::new(b, limit))))
        }
    }
}

/// The answer to a request whose handler panicked: a 500 JSON:API document (the panic's
/// message goes to the log, not to the client).
fn panicked(payload: Box<dyn std::any::Any + Send + 'static>) -> Response<Body> {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a handler panicked".to_owned());
    ApiError::bug(format!("handler panicked: {message}")).into_response()
}

struct Done {
    metrics: Arc<Metrics>,
    handles: Arc<RouteHandles>,
    request_id: HeaderValue,
    start: Instant,
}

pin_project_lite::pin_project! {
    /// The future of [`RequestService`]: runs the handler in the request span (a panic
    /// becomes a 500); when the response head is ready, records the metrics, logs and
    /// adds `x-request-id`.
    pub struct RequestFuture<F> {
        #[pin]
        stage: Stage<F>,
        done: Option<Done>,
        span: tracing::Span,
    }
}

pin_project_lite::pin_project! {
    #[project = StageProj]
    enum Stage<F> {
        /// The handler runs.
        Handler { #[pin] handler: F },
        /// Answered without the handler (over the body limit), or its call panicked.
        Answered { answer: Option<Response<Body>> },
    }
}

impl<F> Future for RequestFuture<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>>,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let mut res = match this.stage.project() {
            StageProj::Handler { handler } => {
                match catch_unwind(AssertUnwindSafe(|| handler.poll(cx))) {
                    Ok(Poll::Pending) => return Poll::Pending,
                    Ok(Poll::Ready(Ok(res))) => res,
                    Ok(Poll::Ready(Err(never))) => match never {},
                    Err(payload) => panicked(payload),
                }
            }
            StageProj::Answered { answer } => answer.take().unwrap_or_else(|| {
                ApiError::bug("request polled after its answer").into_response()
            }),
        };
        if let Some(d) = this.done.take() {
            let latency = d.start.elapsed();
            res.headers_mut()
                .entry(&X_REQUEST_ID)
                .or_insert(d.request_id);
            // Every answer says what it is: no browser guesses a document (or a log, a
            // state file) to be a page or a script.
            res.headers_mut()
                .entry(axum::http::header::X_CONTENT_TYPE_OPTIONS)
                .or_insert(axum::http::HeaderValue::from_static("nosniff"));
            let status = res.status().as_u16();
            d.handles.record(&d.metrics, status, latency.as_secs_f64());
            let latency_ms = latency.as_secs_f64() * 1000.0;
            if status >= 500 {
                tracing::error!(status, latency_ms, "response failed");
            } else {
                tracing::debug!(status, latency_ms, "finished processing request");
            }
        }
        Poll::Ready(Ok(res))
    }
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

fn logged_id(id: &HeaderValue) -> &str {
    let s = id.to_str().unwrap_or("(not visible ASCII)");
    s.get(..MAX_LOGGED_ID).unwrap_or(s)
}

#[cfg(test)]
mod tests;
