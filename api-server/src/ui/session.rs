//! Web view sessions (docs/ui.md, "Signing in"): a person signs in with any token the API
//! accepts; the server keeps the token in memory under a random session ID, which the
//! browser holds in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` over https). The
//! token never reaches a page, a script, a URL or a log. Each session has its own CSRF
//! token, which every form carries and every POST must return. Sessions end on sign-out
//! or after `--ui-session-ttl`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};

use crate::capability::constant_time_eq;

/// The session cookie's name.
pub const COOKIE: &str = "terrace_session";
/// Most sessions kept at once per API server (the oldest go first beyond it).
pub const MAX_SESSIONS: usize = 10_000;

/// One signed-in person.
#[derive(Clone)]
pub struct Session {
    /// The token the person signed in with (sent on their behalf to the API layer).
    pub token: std::sync::Arc<str>,
    /// The CSRF token of the session's forms.
    pub csrf: String,
    /// Who signed in, as the API knows them (shown in the header).
    pub who: String,
    expires: Instant,
}

impl Session {
    /// Whether `presented` is the session's CSRF token.
    pub fn csrf_ok(&self, presented: &str) -> bool {
        constant_time_eq(presented.as_bytes(), self.csrf.as_bytes())
    }
}

/// The sessions of one API server.
pub struct Sessions {
    ttl: Duration,
    map: Mutex<HashMap<String, Session>>,
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// Sessions that last `ttl`.
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            map: Mutex::default(),
        }
    }

    /// Starts a session for `token` (already accepted by the API); answers its ID.
    pub fn start(&self, token: &str, who: String) -> String {
        let id = random_hex();
        let now = Instant::now();
        let mut map = self.map.lock().expect("sessions");
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            Session {
                token: token.into(),
                csrf: random_hex(),
                who,
                expires: now + self.ttl,
            },
        );
        id
    }

    /// The live session whose ID the request's cookie carries.
    pub fn of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let mut map = self.map.lock().expect("sessions");
        match map.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends the session of the request's cookie.
    pub fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            self.map.lock().expect("sessions").remove(id);
        }
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether the request came over https (directly or through a proxy that says so).
pub fn over_https(headers: &HeaderMap, base_url: Option<&str>) -> bool {
    base_url.is_some_and(|b| b.starts_with("https://"))
        || headers
            .get("x-forwarded-proto")
            .is_some_and(|p| p.as_bytes() == b"https")
}

/// The `Set-Cookie` of session `id` (`None`: the cookie removed).
pub fn set_cookie(id: Option<&str>, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let value = match id {
        Some(id) => format!("{COOKIE}={id}; Path=/app; HttpOnly; SameSite=Strict{secure}"),
        None => format!("{COOKIE}=; Path=/app; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&value).expect("a cookie of hex digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn a_session_lives_until_it_ends_or_expires() {
        let s = Sessions::new(Duration::from_secs(60));
        let id = s.start("tok", "alice".into());
        let h = with_cookie(&format!("other=1; {COOKIE}={id}"));
        let got = s.of(&h).expect("live");
        assert_eq!(&*got.token, "tok");
        assert!(got.csrf_ok(&got.csrf) && !got.csrf_ok("forged"));
        s.end(&h);
        assert!(s.of(&h).is_none());
        let short = Sessions::new(Duration::ZERO);
        let id = short.start("tok", "bob".into());
        assert!(short.of(&with_cookie(&format!("{COOKIE}={id}"))).is_none());
        assert!(s.of(&with_cookie(&format!("{COOKIE}=guessed"))).is_none());
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_https() {
        let c = set_cookie(Some("abc"), true);
        let c = c.to_str().unwrap();
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Secure"));
        assert!(
            !set_cookie(Some("abc"), false)
                .to_str()
                .unwrap()
                .contains("Secure")
        );
        assert!(
            set_cookie(None, false)
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }
}
