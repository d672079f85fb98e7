//! Access: finding the object a request names, in the index, and deciding whether the
//! caller may see it and do what the request asks (DESIGN.md §4).
//!
//! - An object the caller may not read answers 404, exactly as one that does not exist
//!   (SPEC.md: "lookups that the caller may not see answer as not found").
//! - A readable object the caller may not change answers 403 where SPEC.md says so, else
//!   404 ([`Deny`]).
//!
//! Handlers take what they need as extractors: [`Found<K, N>`] (an object by `{id}`, or a
//! workspace by `{org}`/`{name}`, readable and allowed [`Need`] `N`), [`VisibleOrg`] (the
//! organization of `{org}`), or call [`AppState::require`] for a check the extractors do
//! not cover. Every decision goes through [`crate::auth::Auth`]'s cached reviews.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use kube::{Resource, ResourceExt};
use terrace_crds::{
    AgentPool, ConfigurationVersion, ModuleVersion, NotificationConfiguration, OAuthToken,
    Organization, Policy, PolicySet, Project, RegistryModule, Run, SshKey, StateVersion, TestRun,
    TestVariable, VariableSet, Workspace, WorkspaceVariable,
};

use crate::auth::{Caller, Check};
use crate::index::{Indexed, Inner};
use crate::render::id_of;
use crate::{ApiError, AppState};
use crate::{confirm, write};

/// An object found in the index with its organization.
pub struct Located<K> {
    pub obj: Arc<K>,
    pub org: Arc<Organization>,
    /// The organization's namespace (the object's own).
    pub ns: String,
}

impl<K> Clone for Located<K> {
    fn clone(&self) -> Self {
        Located {
            obj: self.obj.clone(),
            org: self.org.clone(),
            ns: self.ns.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Located<K> {
    /// [`write::new_meta`] of an object this one owns (controller reference), in its
    /// namespace and organization.
    pub fn owned_meta(&self, id: &str, labels: &[(&str, String)]) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            owner_references: self.obj.controller_owner_ref(&()).map(|o| vec![o]),
            ..write::new_meta(id, &self.ns, self.org.name_any(), labels)
        }
    }
}

impl<K> Located<K>
where
    K: Indexed
        + kube::core::object::HasSpec
        + Clone
        + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::Spec: Clone + serde::Serialize,
{
    /// [`write::update_spec`] of this object by editing a copy of its spec: `change`
    /// edits it (again on a fresh copy after a conflict), and only what differs is
    /// written.
    pub async fn change_spec<F>(&self, state: &AppState, mut change: F) -> Result<K, ApiError>
    where
        F: FnMut(&mut K::Spec) -> Result<(), ApiError>,
    {
        write::update_spec(state, &self.ns, (*self.obj).clone(), |o| {
            let mut next = o.spec().clone();
            change(&mut next)?;
            write::spec_diff(o.spec(), &next)
        })
        .await
    }
}

impl<K: Guarded> Located<K> {
    /// The object's name in the cluster.
    pub fn object_name(&self) -> String {
        self.obj.name_any()
    }

    /// The object's API ID.
    pub fn id(&self) -> String {
        id_of(self.obj.as_ref())
    }

    /// A check of `verb` on this very object.
    pub fn check(&self, verb: &'static str) -> Check {
        Check::new(verb, K::RESOURCE, &self.ns, Some(&self.object_name()))
    }

    /// The same organization and namespace with another object (after a write).
    pub fn with(&self, obj: K) -> Located<K> {
        Located {
            obj: Arc::new(obj),
            org: self.org.clone(),
            ns: self.ns.clone(),
        }
    }
}

/// An indexed kind the API authorizes on: its RBAC resource and the noun of its 404.
pub trait Guarded: Indexed {
    /// The RBAC resource (plural) in group terrace.dev.
    const RESOURCE: &'static str;
    /// How the API names one object of the kind ("workspace").
    const NOUN: &'static str;

    /// 404 for this kind.
    fn not_found() -> ApiError {
        ApiError::not_found(format!("{} not found", Self::NOUN))
    }

    /// Whether each object's API name is claimed by a name-claim ConfigMap (workspaces),
    /// so a read by name that misses the index can be confirmed with the cluster.
    const NAMES_CLAIMED: bool = false;

    /// The object of namespace `ns` whose API name is `name`, for kinds addressed by
    /// organization and name.
    fn by_name<'a>(_inner: &'a Inner, _ns: &str, _name: &str) -> Option<&'a Arc<Self>> {
        None
    }

    /// What a run's engine that may not read this object of its own organization is
    /// answered, where it is not a 404 (a workspace that does not share its state:
    /// [`crate::auth::RunScope::refusal`]).
    fn refused_to_run(_l: &Located<Self>, _scope: &crate::auth::RunScope) -> Option<ApiError>
    where
        Self: Sized,
    {
        None
    }

    /// The archived object with this ID, for kinds whose older objects the operator
    /// archives (runs, test runs: [`crate::history`]).
    fn archived(
        _state: &AppState,
        _id: &str,
    ) -> futures::future::BoxFuture<'static, Result<Option<Arc<Self>>, ApiError>> {
        Box::pin(async { Ok(None) })
    }
}

/// [`Guarded::archived`] of an archivable kind.
fn from_history<K: crate::history::Archivable>(
    state: &AppState,
    id: &str,
) -> futures::future::BoxFuture<'static, Result<Option<Arc<K>>, ApiError>> {
    let (state, id) = (state.clone(), id.to_owned());
    Box::pin(async move {
        Ok(state
            .history
            .find::<K>(&state, &id)
            .await?
            .map(|(obj, _, _)| obj))
    })
}

impl Guarded for Workspace {
    const RESOURCE: &'static str = "workspaces";
    const NOUN: &'static str = "workspace";
    const NAMES_CLAIMED: bool = true;
    fn by_name<'a>(inner: &'a Inner, ns: &str, name: &str) -> Option<&'a Arc<Self>> {
        inner.workspace_named(ns, name)
    }
    fn refused_to_run(l: &Located<Self>, scope: &crate::auth::RunScope) -> Option<ApiError> {
        (l.ns == scope.namespace).then(|| scope.refusal(&l.obj.spec.name))
    }
}

/// [`Guarded`] for a kind by its RBAC resource and noun; `archived` for a kind whose
/// objects the history archive may hold once deleted (found there by ID).
macro_rules! guarded {
    ($kind:ty, $resource:literal, $noun:literal) => {
        impl Guarded for $kind {
            const RESOURCE: &'static str = $resource;
            const NOUN: &'static str = $noun;
        }
    };
    ($kind:ty, $resource:literal, $noun:literal, archived) => {
        impl Guarded for $kind {
            const RESOURCE: &'static str = $resource;
            const NOUN: &'static str = $noun;
            fn archived(
                state: &AppState,
                id: &str,
            ) -> futures::future::BoxFuture<'static, Result<Option<Arc<Self>>, ApiError>> {
                from_history::<$kind>(state, id)
            }
        }
    };
}
guarded!(Project, "projects", "project");
guarded!(SshKey, "sshkeys", "ssh key");
guarded!(AgentPool, "agentpools", "agent pool");
guarded!(OAuthToken, "oauthtokens", "oauth token");
guarded!(VariableSet, "variablesets", "variable set");
guarded!(PolicySet, "policysets", "policy set");
guarded!(Policy, "policies", "policy");
guarded!(
    NotificationConfiguration,
    "notificationconfigurations",
    "notification configuration"
);
guarded!(RegistryModule, "registrymodules", "registry module");
guarded!(ModuleVersion, "moduleversions", "registry module version");
guarded!(
    ConfigurationVersion,
    "configurationversions",
    "configuration version"
);
guarded!(TestRun, "testruns", "test run", archived);
guarded!(TestVariable, "testvariables", "variable");
guarded!(WorkspaceVariable, "workspacevariables", "variable");
guarded!(StateVersion, "stateversions", "state version");
guarded!(Run, "runs", "run", archived);

/// How a readable object answers a caller who lacks the right for an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deny {
    /// 404, as if it did not exist.
    NotFound,
    /// 403 with this detail.
    Forbidden(&'static str),
}

/// What an operation needs beyond reading the object: an RBAC verb on it, and how its
/// absence answers.
pub trait Need: Send + Sync + 'static {
    const VERB: Option<&'static str>;
    const DENY: Deny;
}

/// Reading only.
pub struct Read;
impl Need for Read {
    const VERB: Option<&'static str> = None;
    const DENY: Deny = Deny::NotFound;
}

/// Changing settings (`update`); 403 without it (workspace settings, SPEC B2).
pub struct Admin;
impl Need for Admin {
    const VERB: Option<&'static str> = Some("update");
    const DENY: Deny = Deny::Forbidden("admin access is required");
}

/// Changing relationships (`update`); 404 without it (SPEC's tables for consumers, tags).
pub struct AdminOr404;
impl Need for AdminOr404 {
    const VERB: Option<&'static str> = Some("update");
    const DENY: Deny = Deny::NotFound;
}

impl AppState {
    /// Whether the caller may do `check`.
    pub async fn allowed(&self, caller: &Caller, check: &Check) -> Result<bool, ApiError> {
        self.auth.allowed(caller, check).await
    }

    /// Ok when the caller may do `check`; else the error `deny` says (`what` names the
    /// object for a 404).
    pub async fn require(
        &self,
        caller: &Caller,
        check: &Check,
        deny: Deny,
        not_found: impl FnOnce() -> ApiError,
    ) -> Result<(), ApiError> {
        if self.auth.allowed(caller, check).await? {
            return Ok(());
        }
        Err(match deny {
            Deny::NotFound => not_found(),
            Deny::Forbidden(detail) => ApiError::forbidden(detail),
        })
    }

    /// 403 with `detail` unless the caller may do `check`.
    pub async fn require_or_403(
        &self,
        caller: &Caller,
        check: &Check,
        detail: &'static str,
    ) -> Result<(), ApiError> {
        self.require(caller, check, Deny::Forbidden(detail), || {
            ApiError::not_found("not found")
        })
        .await
    }

    /// The organization whose TFE name is `name` (404 when unknown), whatever the caller.
    /// A miss is confirmed with the cluster ([`confirm`]): an organization created through
    /// another replica is found.
    pub async fn org(&self, name: &str) -> Result<Arc<Organization>, ApiError> {
        let lookup = || self.index.read().organization(name).cloned();
        if let Some(org) = lookup() {
            return Ok(org);
        }
        if confirm::organization(self, name).await {
            return lookup().ok_or_else(org_not_found);
        }
        Err(org_not_found())
    }

    /// The organization `name` if the caller may see it (`get` on it, or `list`
    /// workspaces in its namespace); 404 otherwise.
    pub async fn visible_org(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<Arc<Organization>, ApiError> {
        let org = self.org(name).await?;
        if self.can_see_org(caller, &org).await? {
            Ok(org)
        } else {
            Err(org_not_found())
        }
    }

    /// Whether the caller may see `org`. The namespaced check goes first: the caller's
    /// rules in the namespace answer it, so a caller who may list its workspaces costs no
    /// review of the (cluster-scoped) organization.
    pub async fn can_see_org(&self, caller: &Caller, org: &Organization) -> Result<bool, ApiError> {
        // A run's engine sees its own organization (and lists none of its workspaces).
        if let Some(scope) = &caller.scope {
            return Ok(scope.namespace == org.target_namespace());
        }
        if self
            .auth
            .allowed(
                caller,
                &Check::new("list", "workspaces", org.target_namespace(), None),
            )
            .await?
        {
            return Ok(true);
        }
        self.auth
            .allowed(
                caller,
                &Check::cluster("get", "organizations", Some(&org.name_any())),
            )
            .await
    }

    /// The object with this ID and its organization, from the index (no authorization).
    pub fn locate<K: Guarded>(&self, id: &str) -> Option<Located<K>> {
        let idx = self.index.read();
        let obj = K::by_id(&idx, id)?.clone();
        located(&idx, obj)
    }

    /// The object with this ID if the caller may read it (`get` on it); 404 otherwise. A
    /// miss is confirmed with the cluster ([`confirm`]): an object written through another
    /// replica is found. An archived one (a run or test run the operator archived) is
    /// found too.
    pub async fn readable<K: Guarded>(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Located<K>, ApiError> {
        self.readable_of::<K>(caller, id, true).await
    }

    /// [`Self::readable`] of a live object only: what acts on an object (a run's actions,
    /// a comment) answers 404 for an archived one, which is final and read-only
    /// (docs/runs.md).
    pub async fn readable_live<K: Guarded>(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Located<K>, ApiError> {
        self.readable_of::<K>(caller, id, false).await
    }

    async fn readable_of<K: Guarded>(
        &self,
        caller: &Caller,
        id: &str,
        archived: bool,
    ) -> Result<Located<K>, ApiError> {
        let found = match self.locate::<K>(id) {
            Some(l) => Some(l),
            None => {
                let old = match archived {
                    true => K::archived(self, id).await?,
                    false => None,
                };
                match old {
                    Some(obj) => located(&self.index.read(), obj),
                    None if confirm::by_id::<K>(self, id).await => self.locate::<K>(id),
                    None => None,
                }
            }
        };
        self.if_readable(caller, found).await
    }

    /// The object found, if the caller may read it (`get` on it); 404 otherwise, as when
    /// there is none.
    async fn if_readable<K: Guarded>(
        &self,
        caller: &Caller,
        found: Option<Located<K>>,
    ) -> Result<Located<K>, ApiError> {
        let l = found.ok_or_else(K::not_found)?;
        if let Some(scope) = &caller.scope
            && !self.auth.allowed(caller, &l.check("get")).await?
        {
            return Err(K::refused_to_run(&l, scope).unwrap_or_else(K::not_found));
        }
        self.require(caller, &l.check("get"), Deny::NotFound, K::not_found)
            .await?;
        Ok(l)
    }

    /// The object named `name` in organization `org` if the caller may read it; 404
    /// otherwise. The name is resolved first and the decision is taken on that object, so
    /// a Role limited to it by `resourceNames` reads it by name as by ID (SPEC B4).
    pub async fn readable_by_name<K: Guarded>(
        &self,
        caller: &Caller,
        org: &str,
        name: &str,
    ) -> Result<Located<K>, ApiError> {
        let ns = self.org(org).await?.target_namespace().to_owned();
        let lookup = || {
            let idx = self.index.read();
            K::by_name(&idx, &ns, name).and_then(|obj| located(&idx, obj.clone()))
        };
        let found = match lookup() {
            Some(l) => Some(l),
            None if K::NAMES_CLAIMED && confirm::workspace_by_name(self, &ns, name).await => {
                lookup()
            }
            None => None,
        };
        self.if_readable(caller, found).await
    }

    /// The objects of kind `K` in the organization (those with an ID), if the caller may
    /// `list` them there; none otherwise (a list never reveals more than the caller may
    /// see, and an empty one reveals nothing).
    pub async fn listable<K: Guarded>(
        &self,
        caller: &Caller,
        org: &Organization,
    ) -> Result<Vec<Arc<K>>, ApiError> {
        let ns = org.target_namespace();
        if !self
            .auth
            .allowed(caller, &Check::new("list", K::RESOURCE, ns, None))
            .await?
        {
            return Ok(Vec::new());
        }
        Ok(K::in_namespace(&self.index.read(), ns))
    }

    /// `readable`, then what `N` needs.
    pub async fn found<K: Guarded, N: Need>(
        &self,
        caller: &Caller,
        l: Located<K>,
    ) -> Result<Located<K>, ApiError> {
        if let Some(verb) = N::VERB {
            self.require(caller, &l.check(verb), N::DENY, K::not_found)
                .await?;
        }
        Ok(l)
    }
}

/// The object with its organization (None when its namespace has no organization).
pub fn located<K: Resource>(idx: &Inner, obj: Arc<K>) -> Option<Located<K>> {
    let ns = obj.meta().namespace.clone().unwrap_or_default();
    let org = idx.organization_of_namespace(&ns)?.clone();
    Some(Located { obj, org, ns })
}

/// 404 for an organization.
pub fn org_not_found() -> ApiError {
    ApiError::not_found("organization not found")
}

/// The authenticated caller and the object of the path — by `{id}`, or by `{org}` and
/// `{name}` for kinds addressed by name — readable by the caller and allowed what `N`
/// needs.
pub struct Found<K, N = Read> {
    pub caller: Caller,
    pub at: Located<K>,
    _n: PhantomData<N>,
}

impl<K: Guarded, N> Found<K, N> {
    /// The object `at`, found for `caller` (an extractor of its own that looks the object
    /// up differently, as an OAuth client's `oc-…` ID names an OAuthToken).
    pub fn new(caller: Caller, at: Located<K>) -> Self {
        Found {
            caller,
            at,
            _n: PhantomData,
        }
    }

    /// 403 (`detail`) unless the caller may `verb` the object (they may read it).
    pub async fn require(
        &self,
        state: &AppState,
        verb: &'static str,
        detail: &'static str,
    ) -> Result<(), ApiError> {
        state
            .require_or_403(&self.caller, &self.at.check(verb), detail)
            .await
    }

    /// `DELETE` of the object when the caller may `delete` it (else 403 with `detail`);
    /// what it owns (its Secrets) goes with it through the garbage collector. 204.
    pub async fn delete(
        &self,
        state: &AppState,
        detail: &'static str,
    ) -> Result<axum::response::Response, ApiError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        self.require(state, "delete", detail).await?;
        write::delete_if_present(state, self.at.obj.as_ref()).await?;
        Ok(crate::render::no_content())
    }
}

impl<K: Guarded, N: Need> FromRequestParts<AppState> for Found<K, N> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| K::not_found())?;
        let param = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
        let l = match (param("id"), param("org"), param("name")) {
            (Some(id), _, _) => state.readable::<K>(&caller, id).await?,
            (None, Some(org), Some(name)) => {
                state.readable_by_name::<K>(&caller, org, name).await?
            }
            _ => return Err(K::not_found()),
        };
        let at = state.found::<K, N>(&caller, l).await?;
        Ok(Found {
            caller,
            at,
            _n: PhantomData,
        })
    }
}

/// The organization routes a run's engine may reach with its credential (docs/runs.md,
/// "Inside a run"): what the `remote` and `cloud` backends of `terraform_remote_state`
/// read (the entitlements, a workspace by name; a create answers 403). Every other
/// document of the organization (its settings, tags, capacity, lists) is 404 to a run.
const RUN_ORG_ROUTES: &[&str] = &[
    "/api/v2/organizations/{org}/entitlement-set",
    "/api/v2/organizations/{org}/workspaces",
    "/api/v2/organizations/{org}/workspaces/{name}",
];

/// The authenticated caller and the organization of `{org}`, if the caller may see it
/// (404 otherwise).
pub struct VisibleOrg {
    pub caller: Caller,
    pub org: Arc<Organization>,
}

impl FromRequestParts<AppState> for VisibleOrg {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| org_not_found())?;
        let name = params
            .iter()
            .find(|(k, _)| *k == "org")
            .map(|(_, v)| v.to_owned())
            .ok_or_else(org_not_found)?;
        if caller.scope.is_some() {
            let route = parts
                .extensions
                .get::<axum::extract::MatchedPath>()
                .map(axum::extract::MatchedPath::as_str);
            if !route.is_some_and(|r| RUN_ORG_ROUTES.contains(&r)) {
                return Err(org_not_found());
            }
        }
        let org = state.visible_org(&caller, &name).await?;
        Ok(VisibleOrg { caller, org })
    }
}

impl VisibleOrg {
    /// The organization's namespace.
    pub fn ns(&self) -> &str {
        self.org.target_namespace()
    }

    /// A namespace-wide check of `verb` on `resource` in the organization.
    pub fn check(&self, verb: &'static str, resource: &'static str) -> Check {
        Check::new(verb, resource, self.ns(), None)
    }

    /// Ok when the caller may do `verb` on `resource` namespace-wide in the organization
    /// ([`Self::check`]); 403 with `detail` otherwise.
    pub async fn require_in_org(
        &self,
        state: &AppState,
        verb: &'static str,
        resource: &'static str,
        detail: &'static str,
    ) -> Result<(), ApiError> {
        state
            .require_or_403(&self.caller, &self.check(verb, resource), detail)
            .await
    }

    /// Ok when the caller may do `verb` on the (cluster-scoped) Organization object
    /// itself; 403 with `detail` otherwise.
    pub async fn require_on_org(
        &self,
        state: &AppState,
        verb: &'static str,
        detail: &'static str,
    ) -> Result<(), ApiError> {
        let check = Check::cluster(verb, "organizations", Some(&self.org.name_any()));
        state.require_or_403(&self.caller, &check, detail).await
    }
}
