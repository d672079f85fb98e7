//! Authentication and authorization, delegated to Kubernetes the way extension API servers
//! do it (DESIGN.md §4): the bearer token goes through a TokenReview, every operation
//! through a SubjectAccessReview on `terrace.dev` resources in the organization's
//! namespace. Both answers are cached briefly so a page of workspaces with its permission
//! flags costs a handful of reviews, not one per flag per request.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use terrace_crds::constants::GROUP;

use crate::{ApiError, AppState};

/// How long review answers are reused.
pub const CACHE_TTL: Duration = Duration::from_secs(5);
const CACHE_MAX: usize = 50_000;

/// The authenticated caller of a request. Cheap to clone (shared), because every request
/// takes it from the token cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller(std::sync::Arc<CallerInfo>);

impl std::ops::Deref for Caller {
    type Target = CallerInfo;
    fn deref(&self) -> &CallerInfo {
        &self.0
    }
}

/// Who the caller is, as the cluster's TokenReview said.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallerInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
    /// A 128-bit digest of everything above: the key of this caller's cached decisions
    /// and rendered documents, so a cache hit allocates nothing.
    pub fingerprint: u128,
}

impl Caller {
    /// A caller with its fingerprint computed.
    pub fn new(
        username: String,
        uid: String,
        groups: Vec<String>,
        extra: BTreeMap<String, Vec<String>>,
    ) -> Caller {
        let fingerprint = digest(&(&username, &uid, &groups, &extra));
        Caller(std::sync::Arc::new(CallerInfo {
            username,
            uid,
            groups,
            extra,
            fingerprint,
        }))
    }
}

/// A 128-bit digest of `value` (two independent SipHash runs).
pub fn digest<T: std::hash::Hash + ?Sized>(value: &T) -> u128 {
    use std::hash::{DefaultHasher, Hasher};
    let mut a = DefaultHasher::new();
    a.write_u8(0xA5);
    value.hash(&mut a);
    let mut b = DefaultHasher::new();
    b.write_u8(0x5A);
    value.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// A 128-bit digest of `value` under keys chosen at random when the process starts, for
/// cache keys an outsider must not be able to make collide (they carry a bearer token).
pub fn keyed_digest<T: std::hash::Hash + ?Sized>(value: &T) -> u128 {
    use std::hash::{BuildHasher, RandomState};
    static KEYS: std::sync::LazyLock<(RandomState, RandomState)> =
        std::sync::LazyLock::new(|| (RandomState::new(), RandomState::new()));
    let (a, b) = &*KEYS;
    (u128::from(a.hash_one(value)) << 64) | u128::from(b.hash_one(value))
}

/// One permission question: may the caller `verb` the `resource` (in group terrace.dev,
/// unless `group` says otherwise) named `name` in `namespace`?
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Check {
    pub verb: &'static str,
    pub resource: &'static str,
    pub group: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl Check {
    /// A check on a terrace resource.
    pub fn new(
        verb: &'static str,
        resource: &'static str,
        namespace: &str,
        name: Option<&str>,
    ) -> Check {
        Check {
            verb,
            resource,
            group: GROUP,
            namespace: Some(namespace.to_owned()),
            name: name.map(str::to_owned),
        }
    }

    /// A check on a cluster-scoped terrace resource (organizations).
    pub fn cluster(verb: &'static str, resource: &'static str, name: Option<&str>) -> Check {
        Check {
            verb,
            resource,
            group: GROUP,
            namespace: None,
            name: name.map(str::to_owned),
        }
    }
}

type TokenKey = [u8; 32];

/// TokenReview and SubjectAccessReview client with short-lived caches.
pub struct Auth {
    client: kube::Client,
    tokens: ReviewCache<TokenKey, Option<Caller>>,
    decisions: ReviewCache<(u128, u128), bool>,
    /// Unnamed checks whose named form was asked already (see [`Auth::allowed`]).
    named_before: ReviewCache<(u128, u128), ()>,
    /// TokenReviews and SubjectAccessReviews sent: each a round trip to the cluster's
    /// API server (`terrace_api_token_reviews_total`, `terrace_api_access_reviews_total`).
    pub token_reviews: prometheus_client::metrics::counter::Counter,
    pub access_reviews: prometheus_client::metrics::counter::Counter,
}

/// Review answers by key, each reused for [`CACHE_TTL`]; emptied when it grows past
/// [`CACHE_MAX`] entries.
struct ReviewCache<K, V>(Mutex<HashMap<K, (Instant, V)>>);

impl<K, V> Default for ReviewCache<K, V> {
    fn default() -> Self {
        ReviewCache(Mutex::new(HashMap::new()))
    }
}

impl<K: Eq + std::hash::Hash, V: Clone> ReviewCache<K, V> {
    /// The answer kept for `key`, if it is recent enough.
    fn get(&self, key: &K) -> Option<V> {
        lock(&self.0)
            .get(key)
            .filter(|(at, _)| at.elapsed() < CACHE_TTL)
            .map(|(_, v)| v.clone())
    }

    /// Keeps the answer for `key`.
    fn put(&self, key: K, value: V) {
        let mut cache = lock(&self.0);
        if cache.len() > CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, (Instant::now(), value));
    }
}

/// Sends a review (TokenReview, SubjectAccessReview) and answers the cluster's verdict; a
/// failure is a 500 (`what` failed).
async fn review<R>(client: &kube::Client, review: &R, what: &'static str) -> Result<R, ApiError>
where
    R: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    Api::<R>::all(client.clone())
        .create(&PostParams::default(), review)
        .await
        .map_err(|e| ApiError::internal(what, e))
}

impl Auth {
    pub fn new(client: kube::Client) -> Auth {
        Auth {
            client,
            tokens: ReviewCache::default(),
            decisions: ReviewCache::default(),
            named_before: ReviewCache::default(),
            token_reviews: Default::default(),
            access_reviews: Default::default(),
        }
    }

    /// The user behind a bearer token; `None` when the cluster rejects the token.
    pub async fn authenticate(&self, token: &str) -> Result<Option<Caller>, ApiError> {
        let key: TokenKey = Sha256::digest(token.as_bytes()).into();
        if let Some(who) = self.tokens.get(&key) {
            return Ok(who);
        }
        let token_review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..Default::default()
        };
        self.token_reviews.inc();
        let answer = review(&self.client, &token_review, "TokenReview failed").await?;
        let status = answer.status.unwrap_or_default();
        let who = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => Some(Caller::new(
                u.username.unwrap_or_default(),
                u.uid.unwrap_or_default(),
                u.groups.unwrap_or_default(),
                u.extra.unwrap_or_default(),
            )),
            _ => None,
        };
        self.tokens.put(key, who.clone());
        Ok(who)
    }

    /// Whether `caller` may do `check`. From the second named object of a kind and verb
    /// on (a page of workspaces), a check asks once whether the caller may do it to every
    /// object of the kind in the namespace (cached, shared by every name): in RBAC a
    /// request without a name is allowed only by rules that name no objects, so a yes
    /// holds for every name, and a page of 20 workspaces costs a review per allowed flag,
    /// not one per flag per workspace. Only a no leads to the named object's own review.
    /// A single object (a GET) is reviewed by name at once.
    pub async fn allowed(&self, caller: &Caller, check: &Check) -> Result<bool, ApiError> {
        let key = (caller.fingerprint, digest(check));
        if let Some(ok) = self.decisions.get(&key) {
            return Ok(ok);
        }
        if check.name.is_some() {
            let every = Check {
                name: None,
                namespace: check.namespace.clone(),
                ..*check
            };
            let every_key = (caller.fingerprint, digest(&every));
            let broad = match self.decisions.get(&every_key) {
                Some(known) => known,
                None if self.named_before.get(&every_key).is_some() => {
                    self.reviewed(caller, &every).await?
                }
                None => {
                    self.named_before.put(every_key, ());
                    false
                }
            };
            if broad {
                self.decisions.put(key, true);
                return Ok(true);
            }
        }
        self.reviewed(caller, check).await
    }

    /// The cached answer to `check`, or a SubjectAccessReview of it.
    async fn reviewed(&self, caller: &Caller, check: &Check) -> Result<bool, ApiError> {
        let key = (caller.fingerprint, digest(check));
        if let Some(ok) = self.decisions.get(&key) {
            return Ok(ok);
        }
        let access_review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: Some(caller.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(caller.groups.clone()),
                extra: Some(caller.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(check.group.to_owned()),
                    resource: Some(check.resource.to_owned()),
                    verb: Some(check.verb.to_owned()),
                    namespace: check.namespace.clone(),
                    name: check.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        self.access_reviews.inc();
        let answer = review(&self.client, &access_review, "SubjectAccessReview failed").await?;
        let ok = answer.status.is_some_and(|s| s.allowed);
        self.decisions.put(key, ok);
        Ok(ok)
    }

    /// [`Auth::allowed`] for a namespaced terrace resource, without building a [`Check`]
    /// unless the answer is not cached (the digest of these parts equals the digest of the
    /// equivalent `Check`, so both share cache entries).
    pub async fn allowed_on(
        &self,
        caller: &Caller,
        verb: &'static str,
        resource: &'static str,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<bool, ApiError> {
        let key = (
            caller.fingerprint,
            digest(&(verb, resource, GROUP, Some(namespace), name)),
        );
        if let Some(ok) = self.decisions.get(&key) {
            return Ok(ok);
        }
        self.allowed(caller, &Check::new(verb, resource, namespace, name))
            .await
    }

    /// Runs several checks concurrently.
    pub async fn allowed_all(
        &self,
        caller: &Caller,
        checks: &[Check],
    ) -> Result<Vec<bool>, ApiError> {
        futures::future::try_join_all(checks.iter().map(|c| self.allowed(caller, c))).await
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bearer token of a request, if any.
pub fn bearer(parts: &Parts) -> Option<&str> {
    bearer_token(&parts.headers)
}

/// The bearer token of request headers, if any.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// The server's state and the authenticated caller of a request: the first extractor of
/// a handler that checks the caller's rights itself (401 without a valid token).
pub struct Authed {
    pub state: AppState,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        Ok(Authed {
            state: state.clone(),
            caller,
        })
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let unauthorized = || ApiError::Unauthorized("unauthorized".into());
        let token = bearer(parts).ok_or_else(unauthorized)?;
        state
            .auth
            .authenticate(token)
            .await?
            .ok_or_else(unauthorized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_and_checks_share_cache_keys() {
        let check = Check::new("get", "workspaces", "acme", Some("ws-1"));
        let parts = digest(&("get", "workspaces", GROUP, Some("acme"), Some("ws-1")));
        assert_eq!(digest(&check), parts);
    }
}
