//! Tests of `listener`.

//! The listener over real sockets, with a small router and short limits.

use super::*;
use axum::routing::{get, put};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(400),
        body_min_rate: 1000,
        idle_timeout: Duration::from_millis(2000),
        max_connections: 64,
    }
}

fn app() -> Router {
    Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route(
            "/upload",
            put(|body: axum::body::Bytes| async move { body.len().to_string() }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "done"
            }),
        )
        .layer(tower_http::limit::RequestBodyLimitLayer::new(4096))
}

/// Serves `app()` under `limits` on a free port; the sender stops it.
async fn start(
    limits: ConnectionLimits,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<io::Result<()>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(app(), listener, limits, async {
        let _ = stopped.await;
    }));
    (addr, stop, task)
}

/// Reads until the server closes the connection (or `within` passes): what it sent,
/// and whether it closed in time.
async fn until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// One response on a kept-alive connection (its head and `content-length` body).
async fn response(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= len {
                return text;
            }
        }
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => return text,
        }
    }
}

/// A client that sends part of its headers is closed at the header deadline; one that
/// sends nothing at the idle deadline, which is longer (the header clock starts with
/// the first byte of a request, not with the connection).
#[tokio::test]
async fn partial_headers_and_idle_connections_are_closed() {
    let (addr, _stop, _task) = start(limits()).await;
    let started = Instant::now();
    let mut partial = TcpStream::connect(addr).await.expect("connect");
    partial
        .write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nAcc")
        .await
        .expect("write");
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    let (_, closed) = until_closed(&mut partial, Duration::from_secs(3)).await;
    assert!(closed, "partial headers kept open");
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(250) && after < Duration::from_millis(1500),
        "{after:?}"
    );
    let (_, closed) = until_closed(&mut idle, Duration::from_secs(5)).await;
    assert!(closed, "idle connection kept open");
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(1900),
        "idle closed before its deadline: {after:?}"
    );
}

/// A kept-alive connection serves another request within the idle timeout (the
/// clock restarts after each response) and is closed after it.
#[tokio::test]
async fn keep_alive_within_the_idle_timeout() {
    let (addr, _stop, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    for _ in 0..3 {
        s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let r = response(&mut s).await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, closed) = until_closed(&mut s, Duration::from_secs(4)).await;
    assert!(closed);
}

/// A body that trickles in is cut at the body deadline with a JSON:API 408; a body
/// sent steadily above the minimum rate may take longer than the base timeout.
#[tokio::test]
async fn slow_bodies_time_out_steady_ones_pass() {
    let (addr, _stop, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\nxx")
        .await
        .expect("write");
    let (text, closed) = until_closed(&mut s, Duration::from_secs(3)).await;
    assert!(closed);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("content-type: application/vnd.api+json"),
        "{text}"
    );
    assert!(text.contains(r#""status":"408""#), "{text}");

    // 4,000 bytes over ~800 ms (5,000 B/s against a minimum of 1,000 B/s): twice the
    // 400 ms base timeout, and accepted.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n")
        .await
        .expect("write");
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(&[b'x'; 500]).await.expect("write");
    }
    let r = response(&mut s).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.ends_with("4000"), "{r}");
}

/// Answers that are not JSON:API documents become ones: axum's empty 405 (with its
/// `Allow`), tower-http's plain-text 413 for a Content-Length over the limit, and the
/// 414 and 431 hyper writes itself.
#[tokio::test]
async fn every_error_is_a_json_api_document() {
    let (addr, _stop, _task) = start(limits()).await;
    let ask = |req: Vec<u8>| async move {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(&req).await.expect("write");
        response(&mut s).await
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"GET /upload HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), "405"),
        (
            b"PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n".to_vec(),
            "413",
        ),
        (
            [
                b"GET /".as_slice(),
                &[b'a'; 70_000],
                b" HTTP/1.1\r\nHost: x\r\n\r\n",
            ]
            .concat(),
            "414",
        ),
        // Headers that never end: hyper answers 431 once its buffer is full. (With
        // the end sent too, a loaded machine may hand hyper the whole block in one
        // read, which it parses before checking the size.)
        (
            [
                b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: ".as_slice(),
                &[b'a'; 500_000],
            ]
            .concat(),
            "431",
        ),
        // Complete headers hyper parses but over MAX_HEADER_BYTES: the service says 431.
        (
            [
                b"GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: ".as_slice(),
                &[b'a'; 100_000],
                b"\r\n\r\n",
            ]
            .concat(),
            "431",
        ),
        (b"NOT HTTP\r\n\r\n".to_vec(), "400"),
    ];
    for (req, code) in cases {
        let r = ask(req).await;
        let (head, body) = r.split_once("\r\n\r\n").unwrap_or_default();
        assert!(head.starts_with(&format!("HTTP/1.1 {code}")), "{r}");
        assert!(
            head.contains("content-type: application/vnd.api+json"),
            "{r}"
        );
        let doc: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
        assert_eq!(doc["errors"][0]["status"], code, "{r}");
        assert!(doc["errors"][0]["title"].is_string(), "{r}");
        assert!(doc["errors"][0]["detail"].is_string(), "{r}");
        if code == "405" {
            assert!(head.contains("allow: PUT"), "{r}");
        }
    }
}

/// An answer given without reading the request's body (an unknown workspace's 404, a
/// 405, a 401) says `connection: close` when the body had not all arrived: hyper then
/// closes the connection instead of reading the rest, and a client that sent its next
/// request on it would get no answer at all. A body read to its end keeps the
/// connection alive.
#[tokio::test]
async fn an_unread_body_closes_the_connection_and_says_so() {
    let (addr, _stop, _task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = s.write_all(b"0123456789").await;
    let r = response(&mut s).await;
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    assert!(r.contains("connection: close"), "{r}");
    let (_, closed) = until_closed(&mut s, Duration::from_secs(1)).await;
    assert!(
        closed,
        "the server closes the connection it announced closing"
    );

    // Read to the end: kept alive, the next request is answered.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(b"0123456789").await.expect("write");
    let r = response(&mut s).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(!r.contains("connection: close"), "{r}");
    s.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let r = response(&mut s).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

/// At most `max_connections` are served at once: a third connection is accepted
/// only when one of the first two closes.
#[tokio::test]
async fn connection_cap() {
    let (addr, _stop, _task) = start(ConnectionLimits {
        max_connections: 2,
        ..limits()
    })
    .await;
    let first = TcpStream::connect(addr).await.expect("connect");
    let _second = TcpStream::connect(addr).await.expect("connect");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut third = TcpStream::connect(addr).await.expect("connect (backlog)");
    third
        .write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(200), third.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond the cap");
    drop(first);
    let r = response(&mut third).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

/// Shutdown stops accepting, lets a request in progress finish, and returns once the
/// connections are closed.
#[tokio::test]
async fn graceful_shutdown() {
    let (addr, stop, task) = start(limits()).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = stop.send(());
    let r = response(&mut s).await;
    assert!(r.starts_with("HTTP/1.1 200") && r.ends_with("done"), "{r}");
    let done = tokio::time::timeout(Duration::from_secs(3), task).await;
    assert!(matches!(done, Ok(Ok(Ok(())))), "{done:?}");
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}
