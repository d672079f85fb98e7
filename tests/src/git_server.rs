//! A Git server on loopback for the VCS tests (docs/vcs.md): Debian's `git http-backend`
//! (smart HTTP) run as a CGI program per request, behind HTTP basic authentication whose
//! password must be the connection's token, serving the bare repositories under a
//! directory (`<root>/<org>/<repo>.git`). One thread per connection, one request each.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine;

/// The server; it stops with the test process.
pub struct GitServer {
    pub port: u16,
    pub root: PathBuf,
    /// Paths of the requests served, in order (what a test can count).
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl GitServer {
    /// Serves the repositories under `root`, to clients whose password is `token`.
    pub fn start(root: &Path, token: &str) -> GitServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (root_owned, token, seen) = (root.to_owned(), token.to_owned(), requests.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (root, token, seen) = (root_owned.clone(), token.clone(), seen.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &root, &token, &seen);
                });
            }
        });
        GitServer {
            port,
            root: root.to_owned(),
            requests,
        }
    }

    /// The base URL (a connection's `http-url`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates bare repository `identifier` (`org/repo`) and answers its path.
    pub fn create_repo(&self, identifier: &str) -> PathBuf {
        let path = self.root.join(format!("{identifier}.git"));
        std::fs::create_dir_all(&path).unwrap();
        git(&path, &["init", "--bare", "-q", "-b", "main"]);
        git(&path, &["config", "http.receivepack", "false"]);
        git(&path, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
        path
    }
}

/// Sends `payload` to `url` as GitHub sends its `event` webhook: JSON, signed with
/// `secret` (`X-Hub-Signature-256`). Answers the status and the JSON answer.
pub fn github_webhook(
    url: &str,
    event: &str,
    payload: &serde_json::Value,
    secret: &str,
) -> (u16, serde_json::Value) {
    let body = payload.to_string();
    let sig = format!(
        "sha256={}",
        terrace_crds::vcs::hmac_sha256_hex(secret.as_bytes(), body.as_bytes())
    );
    let req = ureq::http::Request::builder()
        .method("POST")
        .uri(url)
        .header("Content-Type", "application/json")
        .header("X-GitHub-Event", event)
        .header("X-GitHub-Delivery", "d-1")
        .header("X-Hub-Signature-256", sig)
        .body(body)
        .expect("a request");
    let mut res = crate::web::agent().run(req).expect("webhook round trip");
    let status = res.status().as_u16();
    let text = res.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// A new work tree on branch `main` whose `origin` is bare repository `bare`.
pub fn work_tree(bare: &Path) -> tempfile::TempDir {
    let work = tempfile::tempdir().expect("a work tree");
    git(work.path(), &["init", "-q", "-b", "main"]);
    git(
        work.path(),
        &["remote", "add", "origin", &bare.display().to_string()],
    );
    work
}

/// Runs git in `dir`, panicking on failure; answers its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "Ana")
        .env("GIT_AUTHOR_EMAIL", "ana@example.test")
        .env("GIT_COMMITTER_NAME", "Ana")
        .env("GIT_COMMITTER_EMAIL", "ana@example.test")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn serve(
    conn: std::net::TcpStream,
    root: &Path,
    token: &str,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut out = conn;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |k: &str| {
        headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut body = Vec::new();
    if header("transfer-encoding").eq_ignore_ascii_case("chunked") {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Ok(n) = header("content-length").parse::<usize>() {
        body.resize(n, 0);
        reader.read_exact(&mut body)?;
    }
    seen.lock().unwrap().push(target.clone());
    let authorized = header("authorization")
        .strip_prefix("Basic ")
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .is_some_and(|up| up.split_once(':').is_some_and(|(_, p)| p == token));
    if !authorized {
        out.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return Ok(());
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut cgi = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_USER", "git")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = cgi.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let output = cgi.wait_with_output()?;
    let raw = output.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (head, content) = match split {
        Some((i, n)) => (
            String::from_utf8_lossy(&raw[..i]).into_owned(),
            &raw[i + n..],
        ),
        None => (String::new(), &raw[..]),
    };
    let mut status = "200 OK".to_owned();
    let mut response_headers = String::new();
    for h in head.lines() {
        if let Some(s) = h.strip_prefix("Status:") {
            status = s.trim().to_owned();
        } else if !h.trim().is_empty() {
            response_headers.push_str(h.trim());
            response_headers.push_str("\r\n");
        }
    }
    write!(
        out,
        "HTTP/1.1 {status}\r\n{response_headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        content.len()
    )?;
    out.write_all(content)?;
    out.flush()
}
