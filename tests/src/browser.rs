//! A headless Chromium driven through its WebDriver (Debian's `chromium` and
//! `chromium-driver`, which scripts/install-tools installs), for the web view's tests.
//!
//! A thin client of the W3C WebDriver protocol over the crate's HTTP client: the
//! WebDriver crates (fantoccini, thirtyfour) would bring a second `http`, `cookie` and
//! ICU stack into the workspace for the dozen calls these tests make.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session; the driver and the browser end when it is dropped.
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

/// Whether chromium and chromedriver are installed.
pub fn available() -> bool {
    ["chromium", "chromedriver"].iter().all(|p| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub fn start() -> Browser {
        assert!(
            available(),
            "the browser tests need chromium and chromedriver (scripts/install-tools installs Debian's)"
        );
        let port = crate::free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(60)))
            .http_status_as_error(false)
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while agent.get(&format!("{base}/status")).call().is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            },
        }}});
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            agent,
            _profile: profile,
        };
        let v = b.send("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_owned();
        b
    }

    /// One WebDriver command; answers its `value` (panics on a WebDriver error).
    fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let v = self.try_send(method, path, body);
        if let Some(e) = v.get("error") {
            panic!("WebDriver {method} {path}: {e}: {}", v["message"]);
        }
        v
    }

    fn try_send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let res = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        };
        let text = res
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        v["value"].clone()
    }

    fn at(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.send("POST", &self.at("/url"), Some(json!({"url": url})));
    }

    /// The current URL.
    pub fn url(&self) -> String {
        self.send("GET", &self.at("/url"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page's HTML.
    pub fn source(&self) -> String {
        self.send("GET", &self.at("/source"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The element matching CSS `css`, if any.
    pub fn find(&self, css: &str) -> Option<String> {
        let v = self.try_send(
            "POST",
            &self.at("/element"),
            Some(json!({"using": "css selector", "value": css})),
        );
        v[ELEMENT].as_str().map(str::to_owned)
    }

    fn element(&self, css: &str) -> String {
        self.find(css)
            .unwrap_or_else(|| panic!("no element {css:?} on {}:\n{}", self.url(), self.source()))
    }

    /// Clicks the element matching `css`.
    pub fn click(&self, css: &str) {
        let e = self.element(css);
        self.send("POST", &self.at(&format!("/element/{e}/click")), None);
    }

    /// Types `text` into the element matching `css` (after clearing it).
    pub fn fill(&self, css: &str, text: &str) {
        let e = self.element(css);
        self.send("POST", &self.at(&format!("/element/{e}/clear")), None);
        self.send(
            "POST",
            &self.at(&format!("/element/{e}/value")),
            Some(json!({"text": text})),
        );
    }

    /// The text of the element matching `css` (empty when there is none).
    pub fn text(&self, css: &str) -> String {
        match self.find(css) {
            Some(e) => self
                .try_send("GET", &self.at(&format!("/element/{e}/text")), None)
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            None => String::new(),
        }
    }

    /// Runs `script` in the page; answers its result.
    pub fn execute(&self, script: &str) -> Value {
        self.send(
            "POST",
            &self.at("/execute/sync"),
            Some(json!({"script": script, "args": []})),
        )
    }

    /// The value of cookie `name` (HttpOnly ones too: WebDriver sees them).
    pub fn cookie(&self, name: &str) -> Option<String> {
        let v = self.try_send("GET", &self.at(&format!("/cookie/{name}")), None);
        v["value"].as_str().map(str::to_owned)
    }

    /// Waits up to `timeout` for `cond`.
    pub fn wait(&self, timeout: Duration, cond: impl Fn(&Browser) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if cond(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        cond(self)
    }

    /// Saves a PNG of the window at `path`.
    pub fn screenshot(&self, path: &Path) {
        let v = self.send("GET", &self.at("/screenshot"), None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .expect("a base64 PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("screenshot written");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.try_send("DELETE", &self.at(""), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
