//! The simulator's HTTP/1.1 listener (HTTPS for [`crate::Simulator::serve`], plain for
//! `serve_plain`): hyper connections under limits a slow, idle or hostile client cannot
//! exhaust ([`ConnectionLimits`]), as kube-apiserver's Go server has (`ReadHeaderTimeout`,
//! idle timeout, `--max-requests-inflight`).
//!
//! - the TLS handshake must be done within [`crate::tls::HANDSHAKE_TIMEOUT`] (or the
//!   header timeout, if shorter);
//! - a request's **headers** must be complete within `header_read_timeout` of its first
//!   byte;
//! - **a body** must arrive within `body_read_timeout` of the end of the headers, plus one
//!   second per `body_min_rate` bytes received; the handler then sees a failed body;
//! - **an idle connection** (kept alive between requests, or not reading a response or a
//!   watch stream the server is writing) is closed after `idle_timeout`; a watch that
//!   has nothing to send is not idle;
//! - at most **`max_connections`** are open (handshakes included); beyond that the accept
//!   loop waits for one to close.
//!
//! [`GuardedIo`] holds the clocks: reads and writes waiting past the deadline of the
//! connection's [`Phase`] fail with `TimedOut` and hyper closes the connection.
//! [`Guarded`], the per-connection service, moves the phase along.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt as _;

/// What one client may hold of a listener; see the module docs.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    /// Longest a request's headers may take from their first byte.
    pub header_read_timeout: Duration,
    /// Longest a request body may take from the end of the headers, plus one second per
    /// `body_min_rate` bytes received.
    pub body_read_timeout: Duration,
    /// Bytes per second of body that earn one more second.
    pub body_min_rate: u64,
    /// Longest a connection may wait for its next request, or for the client to read.
    pub idle_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    /// What a real client on a slow link passes: 30 s for headers, 60 s (+1 s per KiB)
    /// for a body, 120 s idle (longer than the 90 s for which clients' pools — kube-rs's
    /// hyper-util, Go's net/http — keep a connection, so a client never sends a request
    /// on a connection the server is closing), 4096 connections.
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            body_min_rate: 1024,
            idle_timeout: Duration::from_secs(120),
            max_connections: 4096,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` flips to true, then stops accepting, lets
/// requests in progress finish (idle connections close at once; watches end with the
/// simulator's shutdown) and returns when every connection is closed. With `tls`, each
/// connection is TLS first. Requests carry the peer's `ConnectInfo<SocketAddr>`.
pub async fn serve(
    app: Router,
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: ConnectionLimits,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> io::Result<()> {
    // Once, not per connection (axum::serve clones the route table for each).
    let app = app.with_state(());
    let limits = Arc::new(limits);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let (closing, _) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.map_err(io::Error::other)?,
            () = &mut stop => break,
        };
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = tcp.set_nodelay(true);
        let (app, limits, tls, closing) = (
            app.clone(),
            limits.clone(),
            tls.clone(),
            closing.subscribe(),
        );
        connections.spawn(async move {
            match tls {
                None => connection(tcp, peer, app, limits, closing).await,
                Some(acceptor) => {
                    let within = crate::tls::HANDSHAKE_TIMEOUT.min(limits.header_read_timeout);
                    match tokio::time::timeout(within, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => connection(stream, peer, app, limits, closing).await,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "simulator: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "simulator: TLS handshake timed out"),
                    }
                }
            }
            drop(slot);
        });
    }
    drop(listener);
    closing.send_replace(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection until it closes, or gracefully once `closing` flips.
async fn connection<T>(
    io: T,
    peer: SocketAddr,
    app: Router,
    limits: Arc<ConnectionLimits>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let clock = Arc::new(Clock::new());
    let io = TokioIo::new(GuardedIo::new(io, clock.clone(), limits));
    let service = Guarded { app, clock, peer };
    let conn = hyper::server::conn::http1::Builder::new()
        // The clocks are GuardedIo's (hyper's would also cut idle kept-alive
        // connections at the header deadline).
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
        tracing::debug!(%peer, error = %e, "simulator: connection closed");
    }
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
        tracing::warn!(error = %e, "simulator: accept failed");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Where a connection is in its current exchange; each phase has its own read deadline.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// No request in progress since `since`.
    Idle { since: Instant },
    /// A request's first bytes arrived at `since`; its head is not complete.
    Head { since: Instant },
    /// The head was complete at `since`; `received` body bytes read since.
    Body { since: Instant, received: u64 },
    /// The handler and the response (a watch: its whole stream): no read deadline.
    Handler,
}

/// A connection's phase, shared by its socket ([`GuardedIo`]) and its service
/// ([`Guarded`]).
struct Clock {
    phase: Mutex<Phase>,
    /// The connection's task as a read without deadline left it: woken when the response
    /// ends, so that read is polled again under the idle deadline.
    reader: Mutex<Option<Waker>>,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            phase: Mutex::new(Phase::Idle {
                since: Instant::now(),
            }),
            reader: Mutex::new(None),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
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

    fn read_deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::Idle { since } => Some(since + limits.idle_timeout),
            Phase::Head { since } => Some(since + limits.header_read_timeout),
            Phase::Body { since, received } => Some(
                since
                    + limits.body_read_timeout
                    + Duration::from_secs(received / limits.body_min_rate.max(1)),
            ),
            Phase::Handler => None,
        }
    }

    fn wait_without_deadline(&self, waker: &Waker) {
        let mut r = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        if !r.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *r = Some(waker.clone());
        }
    }

    /// The body is read (or was dropped unread).
    fn body_done(&self) {
        let mut p = self.phase();
        if matches!(*p, Phase::Body { .. }) {
            *p = Phase::Handler;
        }
    }

    /// The response is out: idle from now, and the waiting read gets the idle deadline.
    fn response_sent(&self) {
        *self.phase() = Phase::Idle {
            since: Instant::now(),
        };
        let waker = self.reader.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The connection's stream with the deadlines of [`Clock`].
struct GuardedIo<T> {
    inner: T,
    clock: Arc<Clock>,
    limits: Arc<ConnectionLimits>,
    read_timer: Pin<Box<Sleep>>,
    write_timer: Pin<Box<Sleep>>,
    /// Since when writes have been waiting for the client to read.
    write_blocked: Option<Instant>,
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
        }
    }

    /// Writes that wait for the idle timeout without progress fail.
    fn write_progress<R>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if r.is_ready() {
            self.write_blocked = None;
            return r;
        }
        let since = *self.write_blocked.get_or_insert_with(Instant::now);
        match expired(&mut self.write_timer, since + self.limits.idle_timeout, cx) {
            Some(e) => Poll::Ready(Err(e)),
            None => Poll::Pending,
        }
    }
}

/// `Some(TimedOut)` once `deadline` has passed; else arms `timer` to wake the task then.
fn expired(
    timer: &mut Pin<Box<Sleep>>,
    deadline: Instant,
    cx: &mut Context<'_>,
) -> Option<io::Error> {
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    timer
        .as_mut()
        .poll(cx)
        .is_ready()
        .then(|| io::Error::new(io::ErrorKind::TimedOut, "client too slow"))
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
                let Some(deadline) = this.clock.read_deadline(&this.limits) else {
                    this.clock.wait_without_deadline(cx.waker());
                    return Poll::Pending;
                };
                match expired(&mut this.read_timer, deadline, cx) {
                    Some(e) => Poll::Ready(Err(e)),
                    None => Poll::Pending,
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
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.write_progress(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.write_progress(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.write_progress(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The per-connection service: the router, with the request's phases reported to the
/// connection's [`Clock`] and the peer address as `ConnectInfo`.
#[derive(Clone)]
struct Guarded {
    app: Router,
    clock: Arc<Clock>,
    peer: SocketAddr,
}

impl hyper::service::Service<Request<Incoming>> for Guarded {
    type Response = Response<AxumBody>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let clock = self.clock.clone();
        *clock.phase() = if req.body().is_end_stream() {
            Phase::Handler
        } else {
            Phase::Body {
                since: Instant::now(),
                received: 0,
            }
        };
        let mut req = req.map(|body| {
            AxumBody::new(Watched {
                inner: body,
                clock: Some(clock.clone()),
                end: Clock::body_done,
            })
        });
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(self.peer));
        let app = self.app.clone();
        Box::pin(async move {
            let Ok(resp) = app.oneshot(req).await;
            Ok(resp.map(|body| {
                AxumBody::new(Watched {
                    inner: body,
                    clock: Some(clock),
                    end: Clock::response_sent,
                })
            }))
        })
    }
}

/// A request or response body that tells the connection's [`Clock`] when it ends (or
/// is dropped before).
struct Watched<B> {
    inner: B,
    clock: Option<Arc<Clock>>,
    end: fn(&Clock),
}

impl<B> Watched<B> {
    fn finished(&mut self) {
        if let Some(clock) = self.clock.take() {
            (self.end)(&clock);
        }
    }
}

impl<B> Drop for Watched<B> {
    fn drop(&mut self) {
        self.finished();
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Watched<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
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
mod tests {
    use super::*;

    /// Copies the body clock of kube-apiserver's slow-client limits: a body earns one
    /// second per `body_min_rate` bytes on top of the base timeout.
    #[test]
    fn body_deadline_grows_with_what_arrived() {
        let limits = ConnectionLimits {
            body_read_timeout: Duration::from_secs(10),
            body_min_rate: 100,
            ..ConnectionLimits::default()
        };
        let clock = Clock::new();
        let since = Instant::now();
        *clock.phase() = Phase::Body { since, received: 0 };
        clock.received(1000);
        assert_eq!(
            clock.read_deadline(&limits),
            Some(since + Duration::from_secs(20))
        );
        clock.body_done();
        assert_eq!(clock.read_deadline(&limits), None);
    }
}
