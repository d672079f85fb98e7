//! A webhook receiver on loopback for the notification tests and benchmark: records every
//! POST (path, headers, body) and answers as its script says (a status and a delay per
//! path and arrival), so a test can check payloads and signatures and make a
//! destination fail or answer slowly.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// The answer's status code.
    pub answered: u16,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// How to answer the `n`th request (0-based) to `path`: a status and a delay.
pub type Script = dyn Fn(&str, usize) -> (u16, Duration) + Send + Sync;

/// The receiver; it stops with the test process.
pub struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Starts one answering `script`.
    pub fn start(
        script: impl Fn(&str, usize) -> (u16, Duration) + Send + Sync + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let port = listener.local_addr().expect("its address").port();
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let seen = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (seen, script) = (seen.clone(), script.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &seen, script.as_ref());
                });
            }
        });
        Receiver { port, got }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// What was received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    /// What was received at `path`.
    pub fn at(&self, path: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }
}

fn serve(
    conn: std::net::TcpStream,
    seen: &Mutex<Vec<Received>>,
    script: &Script,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let n = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|r| r.path == path)
        .count();
    let (code, delay) = script(&path, n);
    std::thread::sleep(delay);
    seen.lock().expect("lock").push(Received {
        path,
        headers,
        body,
        answered: code,
    });
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Type: text/plain\r\nContent-Length: 8\r\nConnection: close\r\n\r\nanswered"
    )?;
    conn.flush()
}
