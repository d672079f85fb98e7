//! `terrace dev`'s JSON:API listener against slow, idle and malformed clients (issue 12,
//! items 2 and 7), over raw sockets: connections that send part of their headers, part
//! of a body (the upload URL needs no token) or nothing are closed at their deadlines,
//! many at once included, and the errors no handler answers (405 on the upload URL, 413
//! by Content-Length, 414 and 431 from the HTTP parser) are JSON:API documents.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use terrace_tests::{Api, Dev};

/// Short limits, so the deadlines pass within the test.
const LIMITS: &[&str] = &[
    "--header-read-timeout",
    "1s",
    "--body-read-timeout",
    "2s",
    "--idle-timeout",
    "4s",
];

fn addr(dev: &Dev) -> String {
    dev.api.trim_start_matches("http://").to_owned()
}

/// Sends `request` and reads until the server closes (or 15 s pass): the answer and how
/// long the server took to close.
fn exchange(dev: &Dev, request: &[u8]) -> (String, Option<Duration>) {
    let mut s = TcpStream::connect(addr(dev)).expect("connect");
    let started = Instant::now();
    s.write_all(request).expect("write");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break Some(started.elapsed()),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                break Some(started.elapsed());
            }
            Err(_) => break None,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// The status and the JSON:API error document of an answer (panics when it is not one).
fn json_api_error(answer: &str) -> (u16, serde_json::Value) {
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/vnd.api+json"),
        "not JSON:API: {answer}"
    );
    let doc: serde_json::Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(doc["errors"][0]["status"], status.to_string(), "{answer}");
    assert!(doc["errors"][0]["title"].is_string(), "{answer}");
    assert!(doc["errors"][0]["detail"].is_string(), "{answer}");
    (status, doc)
}

#[test]
fn errors_no_handler_answers_are_json_api_documents() {
    let dev = Dev::start_with(LIMITS);
    let close = "Connection: close\r\n";
    let (answer, _) = exchange(
        &dev,
        format!("GET /api/v2/uploads/v1/object/none HTTP/1.1\r\nHost: x\r\n{close}\r\n").as_bytes(),
    );
    assert_eq!(json_api_error(&answer).0, 405, "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("allow: put"),
        "{answer}"
    );

    let (answer, _) = exchange(
        &dev,
        format!(
            "POST /api/v2/organizations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/vnd.api+json\r\nContent-Length: 2000000\r\n{close}\r\n",
            dev.token
        )
        .as_bytes(),
    );
    assert_eq!(json_api_error(&answer).0, 413, "{answer}");

    let long = format!(
        "GET /api/v2/{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    let (answer, _) = exchange(&dev, long.as_bytes());
    assert_eq!(json_api_error(&answer).0, 414, "{answer}");

    let big = format!(
        "GET /api/v2/ping HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(500_000)
    );
    let (answer, _) = exchange(&dev, big.as_bytes());
    assert_eq!(json_api_error(&answer).0, 431, "{answer}");
}

/// A trickling upload body gets a JSON:API 408 at the body deadline; part of a header
/// is cut at the header deadline; a silent connection at the idle deadline.
#[test]
fn slow_and_idle_clients_are_closed_at_their_deadlines() {
    let dev = Dev::start_with(LIMITS);
    // A real upload URL: an unknown one is refused (404) before its body is read.
    let api = Api::admin(&dev);
    api.create_org("slow");
    let t = api.create_module("slow", "m", "aws");
    let r = api.post(
        &format!("{t}/test-runs/configuration-versions"),
        &serde_json::json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": false}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let url = r.body["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap_or_default();
    let path = &url[url.find("/api/v2/").expect("upload URL path")..];
    let (answer, closed) = exchange(
        &dev,
        format!("PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\npartial")
            .as_bytes(),
    );
    assert_eq!(json_api_error(&answer).0, 408, "{answer}");
    let at = closed.expect("closed");
    assert!(
        at >= Duration::from_millis(1800) && at < Duration::from_secs(5),
        "{at:?}"
    );

    let (answer, closed) = exchange(&dev, b"GET /api/v2/ping HTTP/1.1\r\nHost: x\r\nAcc");
    let at = closed.expect("closed");
    assert!(answer.is_empty(), "{answer}");
    assert!(
        at >= Duration::from_millis(800) && at < Duration::from_secs(3),
        "{at:?}"
    );

    let (answer, closed) = exchange(&dev, b"");
    let at = closed.expect("closed");
    assert!(answer.is_empty(), "{answer}");
    assert!(
        at >= Duration::from_millis(3800) && at < Duration::from_secs(9),
        "{at:?}"
    );
}

/// 500 slow uploads at once are all closed by the server within the body deadline (plus
/// a margin for a loaded machine), and the server's open descriptors go back to what
/// they were.
#[test]
fn many_slow_connections_are_all_closed() {
    let dev = Dev::start_with(LIMITS);
    let pid = dev.pid().expect("pid");
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let before = fds();
    let mut conns: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut s = TcpStream::connect(addr(&dev)).expect("connect");
            s.write_all(
                b"PUT /api/v2/uploads/v1/object/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\npartial",
            )
            .expect("write");
            s.set_nonblocking(true).expect("nonblocking");
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut open = conns.len();
    let mut buf = [0u8; 4096];
    while open > 0 && Instant::now() < deadline {
        open = 0;
        for s in &mut conns {
            let closed = loop {
                match s.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if !closed {
                open += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(open, 0, "connections the server kept open");
    let after = Instant::now() + Duration::from_secs(5);
    while fds() > before && Instant::now() < after {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        fds() <= before,
        "descriptors: {before} before, {} after",
        fds()
    );
}
