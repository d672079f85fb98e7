//! The API server's HTTP/1.1 listener: hyper connections under limits a slow, idle or
//! hostile client cannot exhaust, and error answers that are JSON:API documents even when
//! they do not come from a handler.
//!
//! `axum::serve` has no timeouts: a client that sent part of its headers, or headers and
//! part of a body (the upload URL needs no token), or nothing at all on a kept-alive
//! connection, held its connection and a task forever. Here, per connection
//! ([`ConnectionLimits`]):
//!
//! - **headers** must be complete within `header_read_timeout` of the request's first
//!   byte;
//! - **a body** must arrive within `body_read_timeout` of the end of the headers, plus one
//!   second per `body_min_rate` bytes received (a large upload on a slow link passes, a
//!   trickle does not); the handler then sees a failed body and the answer is a 408;
//! - **an idle connection** (kept alive between requests, or not reading a response the
//!   server is writing) is closed after `idle_timeout`;
//! - at most **`max_connections`** are open at once; beyond that the accept loop waits for
//!   one to close (the kernel's backlog holds the newcomers).
//!
//! The clocks live in [`GuardedIo`], the connection's socket: reads and writes that wait
//! past the deadline of the connection's current [`Phase`] fail with `TimedOut`, which
//! makes hyper close the connection. [`Guarded`], the per-connection service around the
//! router, moves the phase along (request started, body read, response sent).
//!
//! Every error answer is a JSON:API error document (`{"errors":[{"status","title",
//! "detail"}]}`, `application/vnd.api+json`): [`Guarded`] rewrites answers of 400 and above
//! that are not (axum's 405 without a body, tower-http's `text/plain` 413 "length limit
//! exceeded" when Content-Length is over the limit), and [`GuardedIo`] rewrites the
//! answers hyper writes itself for requests it cannot parse (414 for a request line over
//! 64 KiB, 431 for headers over its buffer, 400), which never reach a service. Headers
//! hyper did parse but that are over [`MAX_HEADER_BYTES`] are answered 431 by
//! [`Guarded`], so the bound does not depend on how the client's bytes were read.
//!
//! The router is turned into its per-request form once, not per connection: `axum::serve`
//! clones the whole route table for every connection (`Router::with_state` on a shared
//! router), about 100 KiB for terrace's routes, which is what 5,000 slow connections
//! turned into ~560 MB of RSS.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

use crate::error::MEDIA_TYPE;
use crate::settings::{ConnectionLimits, MAX_HEADER_BYTES};

/// Serves `router` on `listener` under `limits` until `shutdown` resolves; then stops
/// accepting, lets the requests in progress finish (idle connections close at once) and
/// returns when every connection is closed.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    // Once, not per connection: every route in its per-request form.
    let app = router.with_state(());
    let limits = Arc::new(limits);
    let slots = Arc::new(tokio::sync::Semaphore::new(
        usize::try_from(limits.max_connections).unwrap_or(usize::MAX),
    ));
    let (closing, _) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (app, limits, mut closing) = (app.clone(), limits.clone(), closing.subscribe());
        connections.spawn(async move {
            let clock = Arc::new(Clock::new());
            let io = TokioIo::new(GuardedIo::new(stream, clock.clone(), limits));
            let service = Guarded { app, clock };
            let conn = hyper::server::conn::http1::Builder::new()
                // The clocks are GuardedIo's: hyper's own header timeout would also cut
                // idle kept-alive connections at the header deadline.
                .header_read_timeout(None)
                .serve_connection(io, service);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = async { let _ = closing.wait_for(|c| *c).await; } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "API connection closed");
            }
            drop(slot);
        });
    }
    drop(listener);
    closing.send_replace(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Per-connection accept errors are retried at once; others (such as too many open
/// files) after a pause, as `axum::serve` does.
async fn accept_failed(e: &io::Error) {
    if !matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    ) {
        tracing::warn!(error = %e, "API listener: accept failed");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Where a connection is in its current exchange; each phase has its own deadline.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request in progress (new or kept-alive connection) since `since`.
    Idle { since: Instant },
    /// A request's first bytes arrived at `since`; its head is not complete.
    Head { since: Instant },
    /// The head was complete at `since`; `received` body bytes read since.
    Body { since: Instant, received: u64 },
    /// The body is read (or has none): the handler and the response, no read deadline.
    Handler,
}

/// A connection's phase, shared by its socket ([`GuardedIo`]) and its service
/// ([`Guarded`]).
struct Clock {
    phase: Mutex<Phase>,
    /// The request body ran out of time: the answer becomes a 408.
    body_timed_out: std::sync::atomic::AtomicBool,
    /// The connection's task, as its last read without a deadline left it waiting: a
    /// response that ends wakes it, so that read is polled again under the idle deadline.
    reader: Mutex<Option<std::task::Waker>>,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            phase: Mutex::new(Phase::Idle {
                since: Instant::now(),
            }),
            body_timed_out: std::sync::atomic::AtomicBool::new(false),
            reader: Mutex::new(None),
        }
    }

    /// Keeps `waker` to wake when a phase with a read deadline begins.
    fn wait_without_deadline(&self, waker: &std::task::Waker) {
        let mut r = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if !r.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *r = Some(waker.clone());
        }
    }

    /// The response is out: idle from now, and the waiting read gets the idle deadline.
    fn response_sent(&self) {
        self.set(Phase::Idle {
            since: Instant::now(),
        });
        let waker = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, phase: Phase) {
        *self.phase() = phase;
    }

    /// Bytes arrived: a request starts, or its body advances.
    fn received(&self, n: usize) {
        let mut p = self.phase();
        match &mut *p {
            Phase::Idle { .. } => {
                *p = Phase::Head {
                    since: Instant::now(),
                }
            }
            Phase::Body { received, .. } => *received += n as u64,
            Phase::Head { .. } | Phase::Handler => {}
        }
    }

    /// When a read waiting now must have returned, and whether it is a body's deadline.
    fn read_deadline(&self, limits: &ConnectionLimits) -> Option<(Instant, bool)> {
        match *self.phase() {
            Phase::Idle { since } => Some((since + limits.idle_timeout, false)),
            Phase::Head { since } => Some((since + limits.header_read_timeout, false)),
            Phase::Body { since, received } => {
                let earned = Duration::from_secs(received / limits.body_min_rate.max(1));
                Some((since + limits.body_read_timeout + earned, true))
            }
            Phase::Handler => None,
        }
    }
}

/// The connection's socket with the deadlines of [`Clock`]: a read that waits past the
/// current phase's deadline, or a write that makes no progress for the idle timeout,
/// fails with `TimedOut`. It also rewrites hyper's own answers to unparsable requests
/// into JSON:API error documents.
struct GuardedIo<T> {
    inner: T,
    clock: Arc<Clock>,
    limits: Arc<ConnectionLimits>,
    read_timer: Pin<Box<Sleep>>,
    write_timer: Pin<Box<Sleep>>,
    /// Since when writes have been waiting for the client to read.
    write_blocked: Option<Instant>,
    /// A rewritten answer not yet written: bytes and how many went out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> GuardedIo<T> {
    fn new(inner: T, clock: Arc<Clock>, limits: Arc<ConnectionLimits>) -> GuardedIo<T> {
        let now = Instant::now();
        GuardedIo {
            inner,
            clock,
            limits,
            read_timer: Box::pin(tokio::time::sleep_until(now)),
            write_timer: Box::pin(tokio::time::sleep_until(now)),
            write_blocked: None,
            pending: None,
        }
    }
}

/// Polls `timer` set to `deadline`: `Err(TimedOut)` once it has passed.
fn check_deadline(
    timer: &mut Pin<Box<Sleep>>,
    deadline: Instant,
    cx: &mut Context<'_>,
) -> io::Result<()> {
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    match timer.as_mut().poll(cx) {
        Poll::Ready(()) => Err(io::Error::new(io::ErrorKind::TimedOut, "client too slow")),
        Poll::Pending => Ok(()),
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> GuardedIo<T> {
    /// Writes out a rewritten answer; `Ready(Ok)` once it is all out.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((buf, done)) = &mut self.pending {
            match Pin::new(&mut self.inner).poll_write(cx, &buf[*done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    *done += n;
                    if *done == buf.len() {
                        self.pending = None;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Tracks how long writes wait: no progress for the idle timeout fails them.
    fn write_progress<R>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => {
                let since = *self.write_blocked.get_or_insert_with(Instant::now);
                let deadline = since + self.limits.idle_timeout;
                match check_deadline(&mut self.write_timer, deadline, cx) {
                    Ok(()) => Poll::Pending,
                    Err(e) => Poll::Ready(Err(e)),
                }
            }
            ready => {
                self.write_blocked = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.clock.received(buf.filled().len() - before);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                let Some((deadline, body)) = this.clock.read_deadline(&this.limits) else {
                    this.clock.wait_without_deadline(cx.waker());
                    return Poll::Pending;
                };
                match check_deadline(&mut this.read_timer, deadline, cx) {
                    Ok(()) => Poll::Pending,
                    Err(e) => {
                        if body {
                            this.clock
                                .body_timed_out
                                .store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        Poll::Ready(Err(e))
                    }
                }
            }
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = this.poll_pending(cx);
        ready!(this.write_progress(cx, r))?;
        if let Some(answer) = json_api_parse_error(buf) {
            // Taken whole; written out by this and the next calls.
            this.pending = Some((answer, 0));
            let r = this.poll_pending(cx);
            if let Poll::Ready(Err(e)) = this.write_progress(cx, r) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.write_progress(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut nonempty = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (nonempty.next(), nonempty.next()) {
            return self.poll_write(cx, only);
        }
        let this = self.get_mut();
        let r = this.poll_pending(cx);
        ready!(this.write_progress(cx, r))?;
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.write_progress(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = this.poll_pending(cx);
        ready!(this.write_progress(cx, r))?;
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.write_progress(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = this.poll_pending(cx);
        ready!(this.write_progress(cx, r))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// hyper's answer to a request it could not parse, as a JSON:API error document: `buf`
/// is exactly one response head with status 400, 414 or 431 and `content-length: 0`
/// (every answer of the router that has such a status carries a body, see
/// [`Guarded`]).
fn json_api_parse_error(buf: &[u8]) -> Option<Vec<u8>> {
    let head = std::str::from_utf8(buf).ok()?;
    let rest = head.strip_prefix("HTTP/1.1 ")?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    if !matches!(code, 400 | 414 | 431) || !head.ends_with("\r\n\r\n") {
        return None;
    }
    let mut lines: Vec<&str> = head.trim_end().split("\r\n").collect();
    let zero = lines
        .iter()
        .position(|l| l.eq_ignore_ascii_case("content-length: 0"))?;
    let status = StatusCode::from_u16(code).ok()?;
    let body = error_document(status, default_detail(status));
    let length = format!("content-length: {}", body.len());
    lines[zero] = &length;
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(format!("\r\ncontent-type: {MEDIA_TYPE}\r\n\r\n").as_bytes());
    out.extend_from_slice(&body);
    Some(out)
}

/// `{"errors":[{"status","title","detail"}]}`, the title as the API's other errors have
/// it (the reason phrase in lower case).
fn error_document(status: StatusCode, detail: &str) -> Vec<u8> {
    let title = status
        .canonical_reason()
        .unwrap_or("error")
        .to_ascii_lowercase();
    serde_json::json!({"errors": [{
        "status": status.as_u16().to_string(),
        "title": title,
        "detail": detail,
    }]})
    .to_string()
    .into_bytes()
}

fn default_detail(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "the request could not be read",
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed",
        StatusCode::REQUEST_TIMEOUT => "the request was not received in time",
        StatusCode::PAYLOAD_TOO_LARGE => "the request body is larger than this endpoint accepts",
        StatusCode::URI_TOO_LONG => "the request URI is too long",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "the request headers are too large",
        _ => "the request failed",
    }
}

/// The per-connection service: the router, the request's phases reported to the
/// connection's [`Clock`], and error answers made JSON:API documents.
#[derive(Clone)]
struct Guarded {
    app: Router,
    clock: Arc<Clock>,
}

impl hyper::service::Service<Request<Incoming>> for Guarded {
    type Response = Response<AxumBody>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        if header_bytes(req.headers()) > MAX_HEADER_BYTES {
            let mut r = error_response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, None);
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Box::pin(std::future::ready(Ok(r)));
        }
        let clock = self.clock.clone();
        let has_body = !req.body().is_end_stream();
        clock.set(if has_body {
            Phase::Body {
                since: Instant::now(),
                received: 0,
            }
        } else {
            Phase::Handler
        });
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(!has_body));
        let req = req.map(|body| {
            AxumBody::new(WatchedRequest {
                inner: body,
                clock: Some(clock.clone()),
                ended: ended.clone(),
            })
        });
        let app = self.app.clone();
        Box::pin(async move {
            let Ok(resp) = app.oneshot(req).await;
            let resp = if clock
                .body_timed_out
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                let mut r = error_response(StatusCode::REQUEST_TIMEOUT, None);
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                r
            } else {
                json_api_errors(resp).await
            };
            // Answered without reading the whole body: hyper closes the connection rather
            // than read the rest, so say so, or the client may send its next request on it.
            let mut resp = resp;
            if !ended.load(std::sync::atomic::Ordering::Relaxed) {
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp.map(|body| {
                AxumBody::new(WatchedResponse {
                    inner: body,
                    clock: Some(clock),
                })
            }))
        })
    }
}

/// The bytes a request's header fields take, names and values.
fn header_bytes(headers: &axum::http::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum()
}

fn error_response(status: StatusCode, detail: Option<String>) -> Response<AxumBody> {
    let detail = detail.unwrap_or_else(|| default_detail(status).to_owned());
    let mut r = Response::new(AxumBody::from(error_document(status, &detail)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(MEDIA_TYPE));
    r
}

/// An answer of 400 or above that is not a JSON:API document becomes one with the same
/// status (and `Allow`, for a 405); a short plain-text body becomes its detail.
async fn json_api_errors(resp: Response<AxumBody>) -> Response<AxumBody> {
    let status = resp.status();
    let answered = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with(MEDIA_TYPE) || ct.starts_with("text/html"));
    // The web view's error pages (text/html) are pages, not API errors.
    if status.as_u16() < 400 || answered {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let plain = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/plain"));
    let detail = if plain && status != StatusCode::PAYLOAD_TOO_LARGE {
        axum::body::to_bytes(body, 1024)
            .await
            .ok()
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
    } else {
        None
    };
    let mut r = error_response(status, detail);
    for name in [header::ALLOW, header::CONNECTION, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            r.headers_mut().insert(name, v.clone());
        }
    }
    r
}

/// A request body that reports its end (or its drop, when the handler does not read
/// it) to the connection's [`Clock`]: the body deadline stops.
struct WatchedRequest {
    inner: Incoming,
    clock: Option<Arc<Clock>>,
    /// Set once the body was read to its end (not when it is dropped unread).
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl WatchedRequest {
    fn finished(&mut self) {
        if let Some(clock) = self.clock.take() {
            let mut p = clock.phase();
            if matches!(*p, Phase::Body { .. }) {
                *p = Phase::Handler;
            }
        }
    }
}

impl Drop for WatchedRequest {
    fn drop(&mut self) {
        self.finished();
    }
}

impl Body for WatchedRequest {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.ended.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if matches!(r, Poll::Ready(None | Some(Err(_)))) || self.inner.is_end_stream() {
            self.finished();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that reports its end (or its drop) to the connection's [`Clock`]:
/// the connection is idle from then on.
struct WatchedResponse {
    inner: AxumBody,
    clock: Option<Arc<Clock>>,
}

impl WatchedResponse {
    fn finished(&mut self) {
        if let Some(clock) = self.clock.take() {
            clock.response_sent();
        }
    }
}

impl Drop for WatchedResponse {
    fn drop(&mut self) {
        self.finished();
    }
}

impl Body for WatchedResponse {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None | Some(Err(_)))) {
            self.finished();
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
