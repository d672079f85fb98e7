//! Web view sessions (docs/ui.md, "Signing in"): a person signs in with any token the API
//! accepts; the server keeps the token under a random session ID, which the browser
//! holds in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` over https). The token never
//! reaches a page, a script, a URL or a log. Each session has its own CSRF token, which
//! every form carries and every POST must return. Sessions end on sign-out or after
//! `--ui-session-ttl`.
//!
//! Where they are kept: in memory, and — in a cluster, where several API server replicas
//! answer one person's requests — in one Secret of the release namespace,
//! [`SHARED_SECRET`], keyed by the SHA-256 of each session ID (the cookie's value itself
//! is stored nowhere). A replica that does not know a session reads the Secret; one it
//! knows it trusts for [`FRESH`], so a sign-out on one replica ends the session on the
//! others within that time. Expired sessions are pruned on every write, and at most
//! [`MAX_SESSIONS`] are kept (the soonest to expire go first).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Serialize};

use crate::capability::{constant_time_eq, sha256_hex};

/// The session cookie's name.
pub const COOKIE: &str = "terrace_session";
/// Most sessions kept at once (the soonest to expire go first beyond it).
pub const MAX_SESSIONS: usize = 5_000;
/// The Secret (release namespace) that holds the sessions of every replica.
pub const SHARED_SECRET: &str = "terrace-ui-sessions";
/// How long a replica trusts a session it read from the Secret before reading again.
pub const FRESH: Duration = Duration::from_secs(10);

/// One signed-in person.
#[derive(Clone, Serialize, Deserialize)]
pub struct Session {
    /// The token the person signed in with (sent on their behalf to the API layer).
    pub token: String,
    /// The CSRF token of the session's forms.
    pub csrf: String,
    /// Who signed in, as the API knows them (shown in the header).
    pub who: String,
    /// When it ends (Unix seconds).
    expires: u64,
}

impl Session {
    /// Whether `presented` is the session's CSRF token.
    pub fn csrf_ok(&self, presented: &str) -> bool {
        constant_time_eq(presented.as_bytes(), self.csrf.as_bytes())
    }

    fn live(&self) -> bool {
        self.expires > now()
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A session as a replica holds it: when it was last read from the shared Secret.
#[derive(Clone)]
struct Cached {
    session: Session,
    read: Instant,
}

/// The sessions of one API server.
pub struct Sessions {
    ttl: Duration,
    map: Mutex<HashMap<String, Cached>>,
    shared: Option<kube::Api<Secret>>,
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a session could not be kept.
#[derive(Debug, thiserror::Error)]
#[error("keeping the session: {0}")]
pub struct SessionError(String);

impl Sessions {
    /// Sessions that last `ttl`, in memory only (one process: `terrace dev`, tests).
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            map: Mutex::default(),
            shared: None,
        }
    }

    /// Sessions that last `ttl`, shared by every replica through [`SHARED_SECRET`] of
    /// `secrets`' namespace.
    pub fn shared(ttl: Duration, secrets: kube::Api<Secret>) -> Sessions {
        Sessions {
            shared: Some(secrets),
            ..Sessions::new(ttl)
        }
    }

    /// Starts a session for `token` (already accepted by the API); answers its ID.
    pub async fn start(&self, token: &str, who: String) -> Result<String, SessionError> {
        let id = random_hex();
        let session = Session {
            token: token.into(),
            csrf: random_hex(),
            who,
            expires: now() + self.ttl.as_secs().max(1),
        };
        if self.shared.is_some() {
            let key = sha256_hex(id.as_bytes());
            let s = session.clone();
            self.write_shared(move |all| {
                all.insert(key.clone(), s.clone());
            })
            .await?;
        }
        let mut map = self.map.lock().expect("sessions");
        map.retain(|_, c| c.session.live());
        if map.len() >= MAX_SESSIONS
            && let Some(k) = map
                .iter()
                .min_by_key(|(_, c)| c.session.expires)
                .map(|(k, _)| k.clone())
        {
            map.remove(&k);
        }
        map.insert(
            id.clone(),
            Cached {
                session,
                read: Instant::now(),
            },
        );
        Ok(id)
    }

    /// The live session whose ID the request's cookie carries.
    pub async fn of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?.to_owned();
        let cached = self.map.lock().expect("sessions").get(&id).cloned();
        if let Some(c) = cached
            && (self.shared.is_none() || c.read.elapsed() < FRESH)
        {
            return c.session.live().then_some(c.session);
        }
        let found = match &self.shared {
            Some(_) => self
                .read_shared()
                .await
                .remove(&sha256_hex(id.as_bytes()))
                .filter(Session::live),
            None => None,
        };
        let mut map = self.map.lock().expect("sessions");
        match &found {
            Some(s) => {
                map.insert(
                    id,
                    Cached {
                        session: s.clone(),
                        read: Instant::now(),
                    },
                );
            }
            None => {
                map.remove(&id);
            }
        }
        found
    }

    /// Ends the session of the request's cookie.
    pub async fn end(&self, headers: &HeaderMap) -> Result<(), SessionError> {
        let Some(id) = cookie(headers, COOKIE).map(str::to_owned) else {
            return Ok(());
        };
        self.map.lock().expect("sessions").remove(&id);
        if self.shared.is_some() {
            let key = sha256_hex(id.as_bytes());
            self.write_shared(move |all| {
                all.remove(&key);
            })
            .await?;
        }
        Ok(())
    }

    /// The live sessions in the shared Secret (none when it cannot be read).
    async fn read_shared(&self) -> BTreeMap<String, Session> {
        let Some(api) = &self.shared else {
            return BTreeMap::new();
        };
        match api.get_opt(SHARED_SECRET).await {
            Ok(Some(secret)) => decode(&secret),
            Ok(None) => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the web view's sessions");
                BTreeMap::new()
            }
        }
    }

    /// Changes the shared sessions with `change` (expired ones pruned, at most
    /// [`MAX_SESSIONS`]), guarded by the Secret's resourceVersion and retried on
    /// conflicts.
    async fn write_shared(
        &self,
        change: impl Fn(&mut BTreeMap<String, Session>),
    ) -> Result<(), SessionError> {
        let Some(api) = &self.shared else {
            return Ok(());
        };
        let err = |e: kube::Error| SessionError(e.to_string());
        for _ in 0..8 {
            let current = api.get_opt(SHARED_SECRET).await.map_err(err)?;
            let mut all = current.as_ref().map(decode).unwrap_or_default();
            change(&mut all);
            all.retain(|_, s| s.live());
            while all.len() > MAX_SESSIONS {
                let Some(k) = all
                    .iter()
                    .min_by_key(|(_, s)| s.expires)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                all.remove(&k);
            }
            let data: BTreeMap<String, ByteString> = all
                .iter()
                .filter_map(|(k, s)| Some((k.clone(), ByteString(serde_json::to_vec(s).ok()?))))
                .collect();
            let written = match current {
                Some(secret) => {
                    // A merge patch guarded by the resourceVersion (the chart grants
                    // `patch`, not `update`): keys gone are nulled.
                    let mut changed: serde_json::Map<String, serde_json::Value> = secret
                        .data
                        .iter()
                        .flatten()
                        .map(|(k, _)| (k.clone(), serde_json::Value::Null))
                        .collect();
                    for (k, v) in &data {
                        changed.insert(k.clone(), serde_json::to_value(v).unwrap_or_default());
                    }
                    let patch = serde_json::json!({
                        "metadata": {"resourceVersion": secret.metadata.resource_version},
                        "data": changed,
                    });
                    api.patch(
                        SHARED_SECRET,
                        &Default::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await
                    .map(|_| ())
                }
                None => {
                    let secret = Secret {
                        metadata: kube::api::ObjectMeta {
                            name: Some(SHARED_SECRET.to_owned()),
                            labels: Some(BTreeMap::from([(
                                "app.kubernetes.io/part-of".to_owned(),
                                "terrace".to_owned(),
                            )])),
                            ..Default::default()
                        },
                        data: Some(data),
                        ..Default::default()
                    };
                    api.create(&Default::default(), &secret).await.map(|_| ())
                }
            };
            match written {
                Ok(()) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(err(e)),
            }
        }
        Err(SessionError("the sessions Secret kept changing".into()))
    }
}

fn decode(secret: &Secret) -> BTreeMap<String, Session> {
    secret
        .data
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), serde_json::from_slice::<Session>(&v.0).ok()?)))
        .filter(|(_, s)| s.live())
        .collect()
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

    #[tokio::test]
    async fn a_session_lives_until_it_ends_or_expires() {
        let s = Sessions::new(Duration::from_secs(60));
        let id = s.start("tok", "alice".into()).await.unwrap();
        let h = with_cookie(&format!("other=1; {COOKIE}={id}"));
        let got = s.of(&h).await.expect("live");
        assert_eq!(&*got.token, "tok");
        assert!(got.csrf_ok(&got.csrf) && !got.csrf_ok("forged"));
        s.end(&h).await.unwrap();
        assert!(s.of(&h).await.is_none());
        let short = Sessions::new(Duration::ZERO);
        let id = short.start("tok", "bob".into()).await.unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        assert!(
            short
                .of(&with_cookie(&format!("{COOKIE}={id}")))
                .await
                .is_none()
        );
        assert!(
            s.of(&with_cookie(&format!("{COOKIE}=guessed")))
                .await
                .is_none()
        );
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
