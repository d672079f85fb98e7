//! Authentication and authorization, delegated to Kubernetes the way extension API servers
//! do it (DESIGN.md §4): the bearer token goes through a TokenReview, every operation is
//! decided by the cluster's authorizer on `terrace.dev` resources in the organization's
//! namespace.
//!
//! Namespaced decisions come from one SelfSubjectRulesReview per caller and namespace,
//! sent with the caller's own token (every authenticated user may send one; terrace needs
//! no extra right), and evaluated here as RBAC evaluates rules. A request therefore costs
//! at most two round trips, a TokenReview and a rules review, however many permission
//! flags it renders (issue 25: a cold page of 20 workspaces cost 185). Where the rules
//! cannot decide (an authorizer other than RBAC answers `incomplete`, a cluster-scoped
//! check, no rules client) a SubjectAccessReview decides. All answers are cached briefly.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

use crate::ApiError;

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
    /// The bearer token the caller authenticated with: it sends the caller's own rules
    /// review. Never printed.
    token: BearerToken,
    /// A run's engine ([`RunScope`]): decided by its scope, never by Kubernetes RBAC.
    pub scope: Option<std::sync::Arc<RunScope>>,
}

/// What the engine of a run may read with its credential
/// ([`terrace_crds::run::run_credential`]), in its organization's namespace and nowhere
/// else: its own workspace and those that share their state with it (outputs and state,
/// for `terraform_remote_state`), and the registry's modules. Nothing is written with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunScope {
    pub namespace: String,
    /// The run's ID and its workspace's TFE name (what a refusal names).
    pub run: String,
    pub workspace: String,
    /// Object names of the workspaces it may read.
    pub workspaces: std::collections::BTreeSet<String>,
}

impl RunScope {
    /// The refusal of a read of workspace `name` (TFE name) of the run's organization that
    /// does not share its state with the run's workspace: a 403 that says so and names
    /// the setting, where anyone else reads a 404. The engine's `terraform_remote_state`
    /// prints it ("Failed to retrieve workspace NAME: forbidden" and this detail) instead
    /// of trying to create the workspace it could not see (issue 41 §2). It tells the run
    /// only that a workspace of that name exists in its own organization.
    pub fn refusal(&self, name: &str) -> ApiError {
        ApiError::forbidden(format!(
            "Run {} of workspace \"{}\" is not authorized to read the state of workspace \"{name}\": \
             \"{name}\" does not share its state with \"{}\". Its remote state sharing settings \
             allow it: global-remote-state (every workspace of the organization), \
             project-remote-state (the workspaces of its project) or its remote-state-consumers \
             (docs/state.md, \"Sharing state with other workspaces\").",
            self.run, self.workspace, self.workspace
        ))
    }

    /// Whether the scope allows `check`.
    pub fn allows(&self, check: &Check) -> bool {
        if check.group != GROUP || check.namespace.as_deref() != Some(self.namespace.as_str()) {
            return false;
        }
        match (check.resource, check.verb) {
            ("workspaces", "get" | "read-outputs" | "read-state") => check
                .name
                .as_ref()
                .is_some_and(|n| self.workspaces.contains(n)),
            ("registrymodules", "get" | "list") => true,
            _ => false,
        }
    }
}

/// A bearer token whose `Debug` prints nothing of it.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
struct BearerToken(String);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl Caller {
    /// A caller with its fingerprint computed, authenticated by `token`.
    pub fn new(
        username: String,
        uid: String,
        groups: Vec<String>,
        extra: BTreeMap<String, Vec<String>>,
        token: &str,
    ) -> Caller {
        let fingerprint = digest(&(&username, &uid, &groups, &extra));
        Caller(std::sync::Arc::new(CallerInfo {
            username,
            uid,
            groups,
            extra,
            fingerprint,
            token: BearerToken(token.to_owned()),
            scope: None,
        }))
    }

    /// The engine of run `run_id`, authenticated by its credential, allowed `scope`.
    pub fn for_run(run_id: &str, scope: RunScope, token: &str) -> Caller {
        let username = format!("system:terrace:run:{run_id}");
        let fingerprint = digest(&(&username, &scope));
        Caller(std::sync::Arc::new(CallerInfo {
            username,
            uid: String::new(),
            groups: Vec::new(),
            extra: BTreeMap::new(),
            fingerprint,
            token: BearerToken(token.to_owned()),
            scope: Some(std::sync::Arc::new(scope)),
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

/// TokenReview, SelfSubjectRulesReview and SubjectAccessReview client with short-lived
/// caches.
pub struct Auth {
    client: kube::Client,
    /// A client with no credentials of its own, which sends each caller's rules review
    /// under the caller's token (see [`Auth::review_rules_as_callers`]); without it every
    /// decision is a SubjectAccessReview.
    callers: std::sync::OnceLock<kube::Client>,
    /// Each caller's rules by namespace: one review shared by concurrent checks.
    rules: Mutex<HashMap<(u128, String), (Instant, RulesCell)>>,
    tokens: ReviewCache<TokenKey, Option<Caller>>,
    decisions: ReviewCache<(u128, u128), bool>,
    /// Unnamed checks whose named form was asked already (see [`Auth::allowed`]).
    named_before: ReviewCache<(u128, u128), ()>,
    /// TokenReviews and SubjectAccessReviews sent: each a round trip to the cluster's
    /// API server (`terrace_api_token_reviews_total`, `terrace_api_access_reviews_total`).
    pub token_reviews: prometheus_client::metrics::counter::Counter,
    pub access_reviews: prometheus_client::metrics::counter::Counter,
    /// SelfSubjectRulesReviews sent (`terrace_api_rules_reviews_total`).
    pub rules_reviews: prometheus_client::metrics::counter::Counter,
}

/// The rules of one caller in one namespace, once reviewed (`None` when the review
/// failed: SubjectAccessReviews decide instead).
type RulesCell = std::sync::Arc<tokio::sync::OnceCell<Option<std::sync::Arc<NamespaceRules>>>>;

/// What a SelfSubjectRulesReview said a caller may do in a namespace (cluster-wide
/// grants included).
#[derive(Clone, Debug, Default)]
pub struct NamespaceRules {
    pub rules: Vec<k8s_openapi::api::authorization::v1::ResourceRule>,
    /// False when an authorizer could not list its rules: a check the rules do not allow
    /// may still be allowed.
    pub complete: bool,
}

impl NamespaceRules {
    /// Whether a rule allows `check`, matched as RBAC matches a request: the verb, API
    /// group and resource each listed or `*`, and the name listed unless the rule lists
    /// no names (a request without a name matches only rules that list none).
    pub fn allows(&self, check: &Check) -> bool {
        fn has(list: Option<&Vec<String>>, value: &str) -> bool {
            list.is_some_and(|l| l.iter().any(|x| x == "*" || x == value))
        }
        self.rules.iter().any(|r| {
            (r.verbs.iter().any(|v| v == "*" || v == check.verb))
                && has(r.api_groups.as_ref(), check.group)
                && has(r.resources.as_ref(), check.resource)
                && match r.resource_names.as_deref() {
                    None | Some([]) => true,
                    Some(names) => check
                        .name
                        .as_deref()
                        .is_some_and(|n| names.iter().any(|x| x == n)),
                }
        })
    }
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
            callers: std::sync::OnceLock::new(),
            rules: Mutex::default(),
            tokens: ReviewCache::default(),
            decisions: ReviewCache::default(),
            named_before: ReviewCache::default(),
            token_reviews: Default::default(),
            access_reviews: Default::default(),
            rules_reviews: Default::default(),
        }
    }

    /// Decides namespaced checks from each caller's own rules, reviewed through `client`:
    /// a client with no credentials of its own (each review carries the caller's token).
    pub fn review_rules_as_callers(&self, client: kube::Client) {
        let _ = self.callers.set(client);
    }

    /// The caller's rules in `ns`, reviewed once per [`CACHE_TTL`] (concurrent checks
    /// share one review); `None` without a rules client or when the review fails.
    async fn rules_in(&self, caller: &Caller, ns: &str) -> Option<std::sync::Arc<NamespaceRules>> {
        let client = self.callers.get()?;
        let cell = {
            let mut rules = lock(&self.rules);
            let key = (caller.fingerprint, ns.to_owned());
            match rules.get(&key) {
                Some((at, cell)) if at.elapsed() < CACHE_TTL => cell.clone(),
                _ => {
                    if rules.len() > CACHE_MAX {
                        rules.clear();
                    }
                    let cell = RulesCell::default();
                    rules.insert(key, (Instant::now(), cell.clone()));
                    cell
                }
            }
        };
        cell.get_or_init(|| async {
            self.rules_reviews.inc();
            match self_rules_review(client, caller, ns).await {
                Ok(rules) => Some(std::sync::Arc::new(rules)),
                Err(e) => {
                    tracing::warn!(error = %e, namespace = ns, user = %caller.username,
                        "SelfSubjectRulesReview failed; SubjectAccessReviews decide");
                    None
                }
            }
        })
        .await
        .clone()
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
                token,
            )),
            _ => None,
        };
        self.tokens.put(key, who.clone());
        Ok(who)
    }

    /// Whether `caller` may do `check`: from the caller's rules in the namespace when
    /// they decide it, else by SubjectAccessReview. From the second named object of a kind and verb
    /// on (a page of workspaces), a check asks once whether the caller may do it to every
    /// object of the kind in the namespace (cached, shared by every name): in RBAC a
    /// request without a name is allowed only by rules that name no objects, so a yes
    /// holds for every name, and a page of 20 workspaces costs a review per allowed flag,
    /// not one per flag per workspace. Only a no leads to the named object's own review.
    /// A single object (a GET) is reviewed by name at once.
    pub async fn allowed(&self, caller: &Caller, check: &Check) -> Result<bool, ApiError> {
        if let Some(scope) = &caller.scope {
            return Ok(scope.allows(check));
        }
        let key = (caller.fingerprint, digest(check));
        if let Some(ok) = self.decisions.get(&key) {
            return Ok(ok);
        }
        if let Some(ns) = &check.namespace
            && let Some(rules) = self.rules_in(caller, ns).await
        {
            let allowed = rules.allows(check);
            if allowed || rules.complete {
                self.decisions.put(key, allowed);
                return Ok(allowed);
            }
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

/// Sends a SelfSubjectRulesReview of `ns` under the caller's own token.
async fn self_rules_review(
    client: &kube::Client,
    caller: &Caller,
    ns: &str,
) -> Result<NamespaceRules, kube::Error> {
    use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
    let body = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(ns.to_owned()),
        },
        ..Default::default()
    };
    let body = serde_json::to_vec(&body).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectrulesreviews")
        .header(header::AUTHORIZATION, format!("Bearer {}", caller.token.0))
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    let answer: SelfSubjectRulesReview = client.request(request).await?;
    let status = answer.status.unwrap_or_default();
    Ok(NamespaceRules {
        rules: status.resource_rules,
        complete: !status.incomplete,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        verbs: &[&str],
        groups: &[&str],
        resources: &[&str],
        names: &[&str],
    ) -> k8s_openapi::api::authorization::v1::ResourceRule {
        let list = |l: &[&str]| Some(l.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>());
        k8s_openapi::api::authorization::v1::ResourceRule {
            verbs: verbs.iter().map(|x| (*x).to_owned()).collect(),
            api_groups: list(groups),
            resources: list(resources),
            resource_names: if names.is_empty() { None } else { list(names) },
        }
    }

    /// Rules match as RBAC matches them: verb, group and resource listed or `*`; a rule
    /// listing names allows only those names, and never a request without a name.
    #[test]
    fn rules_match_as_rbac_does() {
        let rules = NamespaceRules {
            rules: vec![
                rule(&["get", "list"], &[GROUP], &["workspaces"], &[]),
                rule(&["lock"], &[GROUP], &["workspaces"], &["ws-1"]),
                rule(&["*"], &["*"], &["runs"], &[]),
            ],
            complete: true,
        };
        let allows = |verb, resource, name| rules.allows(&Check::new(verb, resource, "acme", name));
        assert!(allows("get", "workspaces", Some("ws-2")));
        assert!(allows("list", "workspaces", None));
        assert!(!allows("update", "workspaces", Some("ws-2")));
        assert!(allows("lock", "workspaces", Some("ws-1")));
        assert!(!allows("lock", "workspaces", Some("ws-2")));
        assert!(
            !allows("lock", "workspaces", None),
            "a named rule never allows an unnamed request"
        );
        assert!(allows("apply", "runs", Some("run-1")));
        assert!(!allows("get", "projects", None));
        let other_group = Check {
            group: "apps",
            ..Check::new("get", "workspaces", "acme", None)
        };
        assert!(!rules.allows(&other_group));
    }

    /// The token a caller authenticated with is never printed.
    #[test]
    fn a_caller_never_prints_its_token() {
        let c = Caller::new(
            "u".into(),
            String::new(),
            Vec::new(),
            BTreeMap::new(),
            "s3cr3t-token",
        );
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }

    #[test]
    fn parts_and_checks_share_cache_keys() {
        let check = Check::new("get", "workspaces", "acme", Some("ws-1"));
        let parts = digest(&("get", "workspaces", GROUP, Some("acme"), Some("ws-1")));
        assert_eq!(digest(&check), parts);
    }
}
