//! The web view (docs/ui.md): server-rendered pages under `/app/` for people, at the URLs
//! HCP Terraform uses, so the links the terraform CLI prints work.
//!
//! One layer beside the JSON:API resources, never a second copy of their rules: every
//! page reads, and every button writes, by sending the JSON:API request a client would
//! send to the API router in-process ([`Ui::call`]), with the signed-in person's token.
//! So a page shows exactly what that person may read, each button appears only where the
//! document's `permissions`/`actions` say the person may use it, and a forged POST meets
//! the API's own refusal. Pages are askama templates checked at compile time
//! (`api-server/templates/`); the stylesheet and the one script are embedded in the
//! binary. Pages read without JavaScript; the script only streams run logs and follows a
//! run's status.

pub mod health;
pub mod modules;
pub mod pages;
pub mod runs;
pub mod session;
pub mod states;

use std::sync::Arc;

use askama::Template;
use axum::Router;
use axum::body::Body;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::Value;
use tower::ServiceExt;

use crate::AppState;
use session::{Session, Sessions};

/// A signed-in visit, the first extractor of a page: the view, the visitor's session
/// (without one the answer sends them to sign in, back to this page after) and the
/// request's headers.
pub struct Visit {
    pub ui: Ui,
    pub s: session::Session,
    pub headers: HeaderMap,
}

impl axum::extract::FromRequestParts<Ui> for Visit {
    type Rejection = UiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        ui: &Ui,
    ) -> Result<Self, UiError> {
        let s = ui.session(&parts.headers, &parts.uri.to_string()).await?;
        Ok(Visit {
            ui: ui.clone(),
            s,
            headers: parts.headers.clone(),
        })
    }
}

/// The view's state: the server's, the API router it sends its requests to, and the
/// sessions.
#[derive(Clone)]
pub struct Ui {
    pub state: AppState,
    api: Router,
    pub sessions: Arc<Sessions>,
}

/// The embedded stylesheet and script.
const CSS: &str = include_str!("../../assets/app.css");
const JS: &str = include_str!("../../assets/app.js");

/// The Content-Security-Policy of every page: nothing inline, nothing from elsewhere, no
/// framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The view's routes beside `api` (the JSON:API router, with its state), under the
/// request layer `layer` (request IDs, logs, metrics) with the global body limit.
pub fn router(state: AppState, api: Router, layer: crate::request::RequestLayer) -> Router {
    let layer = layer.with_body_limit(state.settings.max_body_bytes);
    let ui = Ui {
        sessions: Arc::new(match state.settings.release_namespace.as_deref() {
            Some(ns) => Sessions::shared(
                state.settings.ui_session_ttl,
                session::SharedStore::new(
                    state.client.clone(),
                    ns,
                    state.settings.ui_sessions_owner.clone(),
                ),
            ),
            None => Sessions::new(state.settings.ui_session_ttl),
        }),
        state,
        api,
    };
    if ui.state.settings.release_namespace.is_some()
        && let Ok(rt) = tokio::runtime::Handle::try_current()
    {
        let sessions = ui.sessions.clone();
        rt.spawn(async move { sessions.remove_legacy().await });
    }
    Router::new()
        .route("/app", get(pages::organizations))
        .route("/app/", get(pages::organizations))
        .route("/app/assets/app.css", get(css))
        .route("/app/assets/app.js", get(js))
        .route("/app/session/new", get(sign_in_form))
        .route("/app/session", post(sign_in))
        .route("/app/session/delete", post(sign_out))
        .route("/app/{org}", get(pages::organization))
        .route("/app/{org}/workspaces", get(pages::workspaces))
        .route("/app/{org}/workspaces/{ws}", get(pages::workspace))
        .route(
            "/app/{org}/workspaces/{ws}/actions/{action}",
            post(pages::workspace_action),
        )
        .route("/app/{org}/workspaces/{ws}/states", get(states::states))
        .route("/app/{org}/workspaces/{ws}/health", get(health::show))
        .route(
            "/app/{org}/workspaces/{ws}/health/assess",
            post(health::assess),
        )
        .route(
            "/app/{org}/workspaces/{ws}/states/{sv}/download",
            get(states::state_download),
        )
        .route("/app/{org}/workspaces/{ws}/runs", get(runs::list))
        .route("/app/{org}/workspaces/{ws}/runs/{run}", get(runs::show))
        .route(
            "/app/{org}/workspaces/{ws}/runs/{run}/actions/{action}",
            post(runs::action),
        )
        .route(
            "/app/{org}/workspaces/{ws}/runs/{run}/log/{phase}",
            get(runs::log),
        )
        .route("/app/{org}/{ws}/runs/{run}", get(runs::cli_link))
        .route("/app/{org}/registry/modules", get(modules::list))
        .route(
            "/app/{org}/registry/modules/{name}/{provider}",
            get(modules::show),
        )
        .route(
            "/app/{org}/registry/modules/{name}/{provider}/test-runs/{id}",
            get(modules::show_test_run),
        )
        .route(
            "/app/{org}/registry/modules/{name}/{provider}/test-runs/{id}/log",
            get(modules::test_run_log),
        )
        .route(
            "/app/{org}/registry/modules/{name}/{provider}/test-runs/{id}/cancel",
            post(modules::cancel_test_run),
        )
        .layer(axum::middleware::map_response(secure_headers))
        .layer(layer)
        .with_state(ui)
}

/// The view's 404 page (the server's fallback answers it for unknown `/app` paths).
pub fn not_found() -> Response {
    with_secure_headers(UiError::NotFound.into_response())
}

/// The headers every view response carries.
async fn secure_headers(res: Response) -> Response {
    with_secure_headers(res)
}

fn with_secure_headers(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

async fn js() -> Response {
    asset(JS, "text/javascript; charset=utf-8")
}

fn asset(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// What the header of every page shows.
#[derive(Clone, Debug, Default)]
pub struct Nav {
    /// Who is signed in (empty: nobody).
    pub who: String,
    /// The session's CSRF token (for the sign-out form).
    pub csrf: String,
    /// The organization the page is in.
    pub org: String,
}

impl Nav {
    fn of(s: &Session, org: &str) -> Nav {
        Nav {
            who: s.who.clone(),
            csrf: s.csrf.clone(),
            org: org.to_owned(),
        }
    }
}

/// Why a page is not shown; each renders as a page in the same look.
#[derive(Debug)]
pub enum UiError {
    /// No live session: to the sign-in page, then back to `next`.
    SignIn {
        next: String,
    },
    NotFound,
    Forbidden(String),
    /// The API refused the request; its words.
    Refused(StatusCode, String),
    /// A form without the session's CSRF token.
    Csrf,
    Internal(String),
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    nav: Nav,
    title: String,
    message: String,
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            UiError::SignIn { next } => {
                let to = format!("/app/session/new?next={}", urlencode(&next));
                return Redirect::to(&to).into_response();
            }
            UiError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is nothing here, or you may not see it.".to_owned(),
            ),
            UiError::Forbidden(m) => (StatusCode::FORBIDDEN, "Not allowed", m),
            UiError::Refused(s, m) => (s, "That did not work", m),
            UiError::Csrf => (
                StatusCode::FORBIDDEN,
                "Form expired",
                "The form did not carry this session's security token (CSRF check): reload the page and try again.".to_owned(),
            ),
            UiError::Internal(m) => {
                tracing::warn!(error = %m, "web view");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The server could not show this page.".to_owned(),
                )
            }
        };
        let page = ErrorPage {
            nav: Nav::default(),
            title: title.to_owned(),
            message,
        };
        (status, render(&page)).into_response()
    }
}

/// A template rendered to a response.
pub fn render<T: Template>(t: &T) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => UiError::Internal(e.to_string()).into_response(),
    }
}

/// `s` percent-encoded for a query value.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Ui {
    /// The live session of a request, or the sign-in page (then back to `path`).
    pub async fn session(&self, headers: &HeaderMap, path: &str) -> Result<Session, UiError> {
        self.sessions
            .of(headers)
            .await
            .ok_or_else(|| UiError::SignIn {
                next: path.to_owned(),
            })
    }

    /// The session of a form POST whose CSRF token (`csrf`) must match, from the same
    /// origin.
    pub async fn form_session(&self, headers: &HeaderMap, csrf: &str) -> Result<Session, UiError> {
        let s = self.session(headers, "/app").await?;
        let secure = session::over_https(headers, self.state.settings.base_url.as_deref());
        if !same_origin(headers, secure) || !s.csrf_ok(csrf) {
            return Err(UiError::Csrf);
        }
        Ok(s)
    }

    /// Sends a JSON:API request to the API router as session `s` (the browser's Host and
    /// forwarded scheme kept, so links in the answer are the browser's); answers the
    /// document, or the API's refusal as a [`UiError`].
    pub async fn call(
        &self,
        s: &Session,
        headers: &HeaderMap,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, UiError> {
        let (status, bytes) = self.raw(Some(s), headers, method, path, body).await?;
        let doc: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        match status {
            s if s.is_success() => Ok(doc),
            StatusCode::UNAUTHORIZED => Err(UiError::SignIn {
                next: "/app".into(),
            }),
            StatusCode::NOT_FOUND => Err(UiError::NotFound),
            StatusCode::FORBIDDEN => Err(UiError::Forbidden(api_words(&doc))),
            s if s.is_client_error() => Err(UiError::Refused(s, api_words(&doc))),
            s => Err(UiError::Internal(format!(
                "the API answered {s}: {}",
                api_words(&doc)
            ))),
        }
    }

    /// [`Ui::call`] of a GET.
    pub async fn get(
        &self,
        s: &Session,
        headers: &HeaderMap,
        path: &str,
    ) -> Result<Value, UiError> {
        self.call(s, headers, Method::GET, path, None).await
    }

    /// The session of a page script's request (a 401 answer, not the sign-in page, when
    /// there is none).
    pub async fn script_session(&self, headers: &HeaderMap) -> Result<Session, UiError> {
        self.sessions.of(headers).await.ok_or(UiError::Refused(
            StatusCode::UNAUTHORIZED,
            "signed out".into(),
        ))
    }

    /// [`Ui::call`]'s request, answered as its status and bytes (`s`: None sends no
    /// token, for capability URLs).
    pub async fn raw(
        &self,
        s: Option<&Session>,
        headers: &HeaderMap,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, axum::body::Bytes), UiError> {
        let mut req = Request::builder().method(method).uri(path);
        for name in [
            header::HOST,
            header::HeaderName::from_static("x-forwarded-proto"),
        ] {
            if let Some(v) = headers.get(&name) {
                req = req.header(name, v);
            }
        }
        if let Some(s) = s {
            req = req.header(header::AUTHORIZATION, format!("Bearer {}", s.token));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/vnd.api+json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        }
        .map_err(|e| UiError::Internal(e.to_string()))?;
        let res = self
            .api
            .clone()
            .oneshot(req)
            .await
            .map_err(|e| UiError::Internal(e.to_string()))?;
        let status = res.status();
        let bytes = axum::body::to_bytes(res.into_body(), 64 << 20)
            .await
            .map_err(|e| UiError::Internal(e.to_string()))?;
        Ok((status, bytes))
    }
}

/// Whether a request's `Origin`, when it sends one, is this server's own (`null`, from a
/// sandboxed frame or a `data:` page, is not).
pub fn same_origin(headers: &HeaderMap, secure: bool) -> bool {
    match headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) {
        None => true,
        Some(origin) => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            let scheme = if secure { "https" } else { "http" };
            origin.split_once("://") == Some((scheme, host))
        }
    }
}

/// The words of a JSON:API error document (its errors' titles and details).
pub fn api_words(doc: &Value) -> String {
    let words: Vec<String> = doc["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let detail = e["detail"].as_str().unwrap_or_default();
            let title = e["title"].as_str().unwrap_or_default();
            if detail.is_empty() { title } else { detail }.to_owned()
        })
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        "the request was refused".to_owned()
    } else {
        words.join("; ")
    }
}

#[derive(Template)]
#[template(path = "signin.html")]
struct SignInPage {
    nav: Nav,
    next: String,
    error: String,
}

#[derive(Deserialize, Default)]
pub struct NextQuery {
    #[serde(default)]
    next: String,
}

/// Only a path of this view: never another site, and only visible ASCII (a control
/// character or a space could not be a `Location` header).
fn safe_next(next: &str) -> String {
    let ok = (next == "/app" || next.starts_with("/app/") || next.starts_with("/app?"))
        && !next.contains('\\')
        && next.bytes().all(|b| (0x21..0x7f).contains(&b));
    if ok {
        next.to_owned()
    } else {
        "/app".to_owned()
    }
}

async fn sign_in_form(Query(q): Query<NextQuery>) -> Response {
    render(&SignInPage {
        nav: Nav::default(),
        next: safe_next(&q.next),
        error: String::new(),
    })
}

#[derive(Deserialize)]
struct SignInForm {
    token: String,
    #[serde(default)]
    next: String,
}

/// `POST /app/session`: a token the API accepts starts a session.
async fn sign_in(State(ui): State<Ui>, headers: HeaderMap, Form(f): Form<SignInForm>) -> Response {
    // No session yet, so no CSRF token: another site's form must not sign a browser in
    // (as someone else).
    if !same_origin(
        &headers,
        session::over_https(&headers, ui.state.settings.base_url.as_deref()),
    ) {
        return UiError::Csrf.into_response();
    }
    let token = f.token.trim();
    let caller = if token.is_empty() {
        None
    } else {
        ui.state.auth.authenticate(token).await.ok().flatten()
    };
    let Some(caller) = caller else {
        let page = SignInPage {
            nav: Nav::default(),
            next: safe_next(&f.next),
            error: "That token was not accepted.".to_owned(),
        };
        return (StatusCode::UNAUTHORIZED, render(&page)).into_response();
    };
    let id = match ui.sessions.start(token, caller.username.clone()).await {
        Ok(id) => id,
        Err(e) => return UiError::Internal(e.to_string()).into_response(),
    };
    let secure = session::over_https(&headers, ui.state.settings.base_url.as_deref());
    let mut res = Redirect::to(&safe_next(&f.next)).into_response();
    res.headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(Some(&id), secure));
    res
}

/// `?offset=N` of the log endpoints the run and test run pages poll: the byte to read on
/// from.
#[derive(Deserialize)]
pub struct LogQuery {
    #[serde(default)]
    offset: usize,
}

#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

/// `POST /app/session/delete`: signs out.
async fn sign_out(State(ui): State<Ui>, headers: HeaderMap, Form(f): Form<CsrfForm>) -> Response {
    if let Err(e) = ui.form_session(&headers, &f.csrf).await {
        return e.into_response();
    }
    if let Err(e) = ui.sessions.end(&headers).await {
        return UiError::Internal(e.to_string()).into_response();
    }
    let secure = session::over_https(&headers, ui.state.settings.base_url.as_deref());
    let mut res = Redirect::to("/app/session/new").into_response();
    res.headers_mut()
        .insert(header::SET_COOKIE, session::set_cookie(None, secure));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn only_this_servers_origin_or_none_is_same_origin() {
        let host = (header::HOST, "terrace.example.com");
        assert!(same_origin(&headers(std::slice::from_ref(&host)), true));
        let from = |origin| headers(&[host.clone(), (header::ORIGIN, origin)]);
        assert!(same_origin(&from("https://terrace.example.com"), true));
        assert!(same_origin(&from("http://terrace.example.com"), false));
        assert!(
            !same_origin(&from("http://terrace.example.com"), true),
            "the scheme counts"
        );
        assert!(!same_origin(&from("https://evil.example"), true));
        assert!(!same_origin(&from("null"), true));
    }

    #[test]
    fn the_next_page_is_always_one_of_this_view() {
        assert_eq!(safe_next("/app/acme/workspaces"), "/app/acme/workspaces");
        assert_eq!(safe_next("https://evil.example/app"), "/app");
        assert_eq!(safe_next("//evil.example/app"), "/app");
        assert_eq!(safe_next("/app\\evil"), "/app");
        assert_eq!(safe_next("/app/x%0D%0A"), "/app/x%0D%0A");
        assert_eq!(safe_next("/app\r\nSet-Cookie: x=1"), "/app");
        assert_eq!(safe_next("/app/\u{7f}"), "/app");
        assert_eq!(safe_next("/app/é"), "/app");
        assert_eq!(safe_next("/apples"), "/app");
    }
}
