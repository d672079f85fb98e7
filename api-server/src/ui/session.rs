//! Web view sessions (docs/ui.md, "Signing in"): a person signs in with any token the API
//! accepts; the server keeps the token under a random session ID, which the browser
//! holds in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` over https). The token never
//! reaches a page, a script, a URL or a log. Each session has its own CSRF token, which
//! every form carries and every POST must return. Sessions end on sign-out or after
//! `--ui-session-ttl`.
//!
//! Where they are kept: in memory, and — in a cluster, where several API server replicas
//! answer one person's requests — in one small Secret per signed-in identity in the
//! release namespace (`terrace-ui-sessions-<key>`, [`SECRET_PREFIX`]), holding that
//! identity's sessions keyed by the SHA-256 of each session's secret (the cookie's value
//! itself is stored nowhere). The cookie carries the identity's key and the session's
//! secret, so a replica that does not know a session reads that one Secret; one it knows
//! it trusts for [`FRESH`], so a sign-out on one replica ends the session on the others
//! within that time. Each identity keeps at most [`MAX_PER_IDENTITY`] sessions: a new one
//! evicts that identity's oldest, never anyone else's, and no Secret grows past a few KiB
//! however many people sign in. Expired sessions are pruned on every write.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde::{Deserialize, Serialize};

use crate::capability::{constant_time_eq, sha256_hex};

/// The session cookie's name: `__Host-` makes browsers accept it only from a secure
/// origin, for the whole host, never set by a subdomain. Over plain http (`terrace dev`)
/// browsers refuse that prefix, so the cookie is then [`PLAIN_COOKIE`].
pub const COOKIE: &str = "__Host-terrace_session";
/// The session cookie's name over plain http.
pub const PLAIN_COOKIE: &str = "terrace_session";
/// Most sessions one identity keeps at once (a new one evicts its oldest).
pub const MAX_PER_IDENTITY: usize = 10;
/// Most sessions one replica keeps in memory (the soonest to expire go first beyond it;
/// in a cluster they are read again from their Secret).
pub const MAX_CACHED: usize = 20_000;
/// Names of the Secrets (release namespace) that hold each identity's sessions.
pub const SECRET_PREFIX: &str = "terrace-ui-sessions-";
/// The one Secret that held every session before sessions were kept per identity: it is
/// removed at start (its sessions end).
pub const LEGACY_SECRET: &str = "terrace-ui-sessions";
/// How long a replica trusts a session it read from its Secret before reading again.
pub const FRESH: Duration = Duration::from_secs(10);
/// Hex digits of an identity's key in a cookie and a Secret's name.
const KEY_HEX: usize = 24;

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
    /// When it started (Unix microseconds): the order in which an identity's sessions are
    /// evicted.
    #[serde(default)]
    started: u64,
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

/// A session as a replica holds it: when it was last read from its Secret.
#[derive(Clone)]
struct Cached {
    session: Session,
    read: Instant,
}

/// Where a cluster's sessions are kept: Secrets of the release namespace, owned (when the
/// chart says by what) by an object the release deletes, so `helm uninstall` leaves no
/// Secret holding tokens.
pub struct SharedStore {
    secrets: kube::Api<Secret>,
    owners: kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    owner_name: Option<String>,
    owner: tokio::sync::OnceCell<Option<OwnerReference>>,
}

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

impl SharedStore {
    /// Sessions in Secrets of namespace `ns`, owned by its ConfigMap `owner` (if any).
    pub fn new(client: kube::Client, ns: &str, owner: Option<String>) -> SharedStore {
        SharedStore {
            secrets: kube::Api::namespaced(client.clone(), ns),
            owners: kube::Api::namespaced(client, ns),
            owner_name: owner,
            owner: tokio::sync::OnceCell::new(),
        }
    }

    /// The owner reference of new session Secrets (read once; none when the ConfigMap is
    /// not named or not there, which is logged).
    async fn owner(&self) -> Option<OwnerReference> {
        self.owner
            .get_or_init(|| async {
                let name = self.owner_name.as_deref()?;
                match self.owners.get_opt(name).await {
                    Ok(Some(cm)) => Some(OwnerReference {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        name: name.to_owned(),
                        uid: cm.metadata.uid.unwrap_or_default(),
                        ..Default::default()
                    }),
                    Ok(None) => {
                        tracing::warn!(configmap = name, "the sessions' owner is missing");
                        None
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the sessions' owner");
                        None
                    }
                }
            })
            .await
            .clone()
    }
}

/// The sessions of one API server.
pub struct Sessions {
    ttl: Duration,
    map: Mutex<HashMap<String, Cached>>,
    shared: Option<SharedStore>,
}

fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key of identity `who`: names its Secret and starts its cookies.
fn identity_key(who: &str) -> String {
    sha256_hex(format!("terrace-ui-session:{who}").as_bytes())[..KEY_HEX].to_owned()
}

/// The identity key and the secret of a session ID (`<key>.<secret>`), if it has that
/// shape (hex only, so it can name a Secret).
fn split_id(id: &str) -> Option<(&str, &str)> {
    let (key, secret) = id.split_once('.')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(key, KEY_HEX) && hex(secret, 64)).then_some((key, secret))
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

    /// Sessions that last `ttl`, shared by every replica through Secrets of
    /// `store`'s namespace.
    pub fn shared(ttl: Duration, store: SharedStore) -> Sessions {
        Sessions {
            shared: Some(store),
            ..Sessions::new(ttl)
        }
    }

    /// Removes the Secret that held every session before they were kept per identity.
    pub async fn remove_legacy(&self) {
        if let Some(store) = &self.shared {
            match store
                .secrets
                .delete(LEGACY_SECRET, &Default::default())
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => tracing::warn!(error = %e, "removing the old sessions Secret"),
            }
        }
    }

    /// Starts a session for `token` (already accepted by the API) of identity `who`;
    /// answers its ID. The identity's oldest session ends when it has
    /// [`MAX_PER_IDENTITY`] already.
    pub async fn start(&self, token: &str, who: String) -> Result<String, SessionError> {
        let key = identity_key(&who);
        let secret = random_hex();
        let id = format!("{key}.{secret}");
        let session = Session {
            token: token.into(),
            csrf: random_hex(),
            who: who.clone(),
            expires: now() + self.ttl.as_secs().max(1),
            started: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        };
        let mut evicted = Vec::new();
        if self.shared.is_some() {
            let slot = sha256_hex(secret.as_bytes());
            let s = session.clone();
            evicted = self
                .write_shared(&key, move |all| {
                    all.insert(slot.clone(), s.clone());
                })
                .await?;
        }
        let mut map = self.map.lock().expect("sessions");
        map.retain(|k, c| {
            c.session.live()
                && !split_id(k).is_some_and(|(_, s)| evicted.contains(&sha256_hex(s.as_bytes())))
        });
        let mut own: Vec<(String, u64)> = map
            .iter()
            .filter(|(_, c)| c.session.who == who)
            .map(|(k, c)| (k.clone(), c.session.started))
            .collect();
        own.sort_by_key(|(_, started)| *started);
        while own.len() >= MAX_PER_IDENTITY {
            map.remove(&own.remove(0).0);
        }
        if map.len() >= MAX_CACHED
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
        let id = session_cookie(headers)?.to_owned();
        let (key, secret) = split_id(&id)?;
        let cached = self.map.lock().expect("sessions").get(&id).cloned();
        if let Some(c) = cached
            && (self.shared.is_none() || c.read.elapsed() < FRESH)
        {
            return c.session.live().then_some(c.session);
        }
        let found = match &self.shared {
            Some(_) => self
                .read_shared(key)
                .await
                .remove(&sha256_hex(secret.as_bytes()))
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
        let Some(id) = session_cookie(headers).map(str::to_owned) else {
            return Ok(());
        };
        self.map.lock().expect("sessions").remove(&id);
        if let (Some(_), Some((key, secret))) = (&self.shared, split_id(&id)) {
            let slot = sha256_hex(secret.as_bytes());
            self.write_shared(key, move |all| {
                all.remove(&slot);
            })
            .await?;
        }
        Ok(())
    }

    /// The live sessions of identity `key` (none when they cannot be read).
    async fn read_shared(&self, key: &str) -> BTreeMap<String, Session> {
        let Some(store) = &self.shared else {
            return BTreeMap::new();
        };
        match store
            .secrets
            .get_opt(&format!("{SECRET_PREFIX}{key}"))
            .await
        {
            Ok(Some(secret)) => decode(&secret),
            Ok(None) => BTreeMap::new(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the web view's sessions");
                BTreeMap::new()
            }
        }
    }

    /// Changes the sessions of identity `key` with `change` (expired ones pruned, the
    /// oldest beyond [`MAX_PER_IDENTITY`] evicted), guarded by the Secret's
    /// resourceVersion and retried on conflicts; a Secret left with no session is
    /// deleted. Answers the slots evicted.
    async fn write_shared(
        &self,
        key: &str,
        change: impl Fn(&mut BTreeMap<String, Session>),
    ) -> Result<Vec<String>, SessionError> {
        let Some(store) = &self.shared else {
            return Ok(Vec::new());
        };
        let api = &store.secrets;
        let name = format!("{SECRET_PREFIX}{key}");
        let err = |e: kube::Error| SessionError(e.to_string());
        for _ in 0..8 {
            let current = api.get_opt(&name).await.map_err(err)?;
            let mut all = current.as_ref().map(decode).unwrap_or_default();
            change(&mut all);
            all.retain(|_, s| s.live());
            let mut evicted = Vec::new();
            while all.len() > MAX_PER_IDENTITY {
                let Some(k) = all
                    .iter()
                    .min_by_key(|(_, s)| s.started)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                all.remove(&k);
                evicted.push(k);
            }
            let data: BTreeMap<String, ByteString> = all
                .iter()
                .filter_map(|(k, s)| Some((k.clone(), ByteString(serde_json::to_vec(s).ok()?))))
                .collect();
            let written = match current {
                Some(secret) if data.is_empty() => {
                    let dp = kube::api::DeleteParams {
                        preconditions: Some(kube::api::Preconditions {
                            resource_version: secret.metadata.resource_version.clone(),
                            uid: None,
                        }),
                        ..Default::default()
                    };
                    match api.delete(&name, &dp).await {
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        other => other.map(|_| ()),
                    }
                }
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
                    api.patch(&name, &Default::default(), &kube::api::Patch::Merge(&patch))
                        .await
                        .map(|_| ())
                }
                None if data.is_empty() => Ok(()),
                None => {
                    let secret = Secret {
                        metadata: kube::api::ObjectMeta {
                            name: Some(name.clone()),
                            labels: Some(BTreeMap::from([
                                ("app.kubernetes.io/part-of".to_owned(), "terrace".to_owned()),
                                (
                                    "app.kubernetes.io/component".to_owned(),
                                    "ui-sessions".to_owned(),
                                ),
                            ])),
                            owner_references: store.owner().await.map(|o| vec![o]),
                            ..Default::default()
                        },
                        data: Some(data),
                        ..Default::default()
                    };
                    api.create(&Default::default(), &secret).await.map(|_| ())
                }
            };
            match written {
                Ok(()) => return Ok(evicted),
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

/// The session ID a request's cookie carries (the secure cookie first).
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, COOKIE).or_else(|| cookie(headers, PLAIN_COOKIE))
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

/// The `Set-Cookie` of session `id` (`None`: the cookie removed). Over https it is
/// `__Host-` prefixed (`Secure`, `Path=/`, no `Domain`: browsers then refuse one set by
/// any other origin); over plain http it cannot be, and is scoped to `/app`.
pub fn set_cookie(id: Option<&str>, secure: bool) -> HeaderValue {
    let (name, attrs) = if secure {
        (COOKIE, "Path=/; HttpOnly; SameSite=Strict; Secure")
    } else {
        (PLAIN_COOKIE, "Path=/app; HttpOnly; SameSite=Strict")
    };
    let value = match id {
        Some(id) => format!("{name}={id}; {attrs}"),
        None => format!("{name}=; {attrs}; Max-Age=0"),
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
        let h = with_cookie(&format!("other=1; {PLAIN_COOKIE}={id}"));
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
                .of(&with_cookie(&format!("{PLAIN_COOKIE}={id}")))
                .await
                .is_none()
        );
        assert!(
            s.of(&with_cookie(&format!("{PLAIN_COOKIE}=guessed")))
                .await
                .is_none()
        );
    }

    /// Issue 39 §5: one identity signing in again and again evicts only its own oldest
    /// sessions; another person's session stays.
    #[tokio::test]
    async fn sign_ins_evict_only_the_same_identitys_sessions() {
        let s = Sessions::new(Duration::from_secs(600));
        let owner = s.start("owner-token", "owner".into()).await.unwrap();
        let owner_cookie = with_cookie(&format!("{COOKIE}={owner}"));
        let mut mine = Vec::new();
        for _ in 0..(MAX_PER_IDENTITY * 3) {
            mine.push(s.start("nobody-token", "nobody".into()).await.unwrap());
        }
        assert!(
            s.of(&owner_cookie).await.is_some(),
            "the owner stays signed in"
        );
        let mut alive = Vec::new();
        for id in &mine {
            alive.push(
                s.of(&with_cookie(&format!("{COOKIE}={id}")))
                    .await
                    .is_some(),
            );
        }
        assert_eq!(alive.iter().filter(|a| **a).count(), MAX_PER_IDENTITY);
        assert!(alive[alive.len() - 1], "the newest is kept");
        assert!(!alive[0], "the oldest is gone");
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_https() {
        let c = set_cookie(Some("abc"), true);
        assert!(
            c.to_str().unwrap().starts_with("__Host-") && c.to_str().unwrap().contains("Path=/;")
        );
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
