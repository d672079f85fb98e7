//! Module tests (SPEC.md area A): private registry modules, configuration versions and
//! their one-time uploads, test variables, test runs (create, list, show, cancel,
//! force-cancel) and their logs, plus the archive endpoint the test Pods fetch from.
//!
//! Every area A path names a module as `{T}` =
//! `/organizations/:org/tests/registry-modules/private/:namespace/:name/:provider`;
//! [`locate`] resolves it from the watch-fed index and answers 404 for an unknown
//! organization or module and for a caller without the RBAC verb the operation needs
//! (`get`/`list`/`create` on `registrymodules`, `configurationversions`, `testruns`,
//! `testvariables` in the organization's namespace), so nothing leaks to outsiders.
//! Writes go to the Kubernetes API and wait (bounded) until the index has seen them.
//! The TestRun controller of the operator owns test run status; this module only records
//! cancel requests there and writes ConfigurationVersion and TestVariable status as the
//! API's field manager.

pub mod blobs;
pub mod config_versions;
pub mod logs;
pub mod registry;
pub mod test_runs;
pub mod variables;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{Organization, RegistryModule};

use crate::auth::{Caller, Check};
use crate::index::{Inner, rv_at_least};
use crate::jsonapi::{ErrorDocument, ErrorObject, ErrorSource, MEDIA_TYPE};
use crate::workspaces::INDEX_WAIT;
use crate::{ApiError, AppState};

/// Annotation naming the user who created a test run (`created-by`).
pub const ANNOTATION_CREATED_BY: &str = "terrace.dev/created-by";
/// Label naming the RegistryModule object of a test run, configuration version or
/// test variable.
pub const LABEL_MODULE: &str = "terrace.dev/module";

/// Routes behind the global body limit (everything but the upload).
pub fn router() -> Router<AppState> {
    Router::new()
        .merge(registry::router())
        .merge(config_versions::router())
        .merge(variables::router())
        .merge(test_runs::router())
        .merge(logs::router())
}

/// The upload route, which has its own, larger body limit and must be merged outside the
/// global one.
pub fn upload_router() -> Router<AppState> {
    config_versions::upload_router()
}

/// A module of an organization, resolved from a `{T}` path.
#[derive(Clone)]
pub struct Module {
    pub org: Arc<Organization>,
    pub ns: String,
    pub module: Arc<RegistryModule>,
}

impl Module {
    /// The RegistryModule object's name.
    pub fn object_name(&self) -> String {
        self.module.name_any()
    }
    /// The module's ID (`mod-…`).
    pub fn id(&self) -> String {
        id_of(self.module.as_ref())
    }
    /// A check on `resource` in the module's namespace.
    pub fn check(&self, verb: &'static str, resource: &'static str) -> Check {
        Check::new(verb, resource, &self.ns, None)
    }
}

/// The `terrace.dev/id` label of an object ("" without one).
pub fn id_of<K: Resource>(o: &K) -> String {
    o.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ID))
        .cloned()
        .unwrap_or_default()
}

pub(crate) fn module_not_found() -> ApiError {
    ApiError::NotFound("registry module not found".into())
}

/// The organization named `org` (404 when unknown).
pub(crate) fn org_named(state: &AppState, org: &str) -> Result<Arc<Organization>, ApiError> {
    state
        .index
        .read()
        .organization(org)
        .cloned()
        .ok_or_else(|| ApiError::NotFound("organization not found".into()))
}

/// The private module `namespace/name/provider` of `org`, if the caller may `verb` the
/// `resource` in its namespace; 404 otherwise (SPEC.md: lookups the caller may not see
/// answer not found).
pub(crate) async fn locate(
    state: &AppState,
    caller: &Caller,
    (org, namespace, name, provider): (&str, &str, &str, &str),
    verb: &'static str,
    resource: &'static str,
) -> Result<Module, ApiError> {
    let org = org_named(state, org)?;
    if namespace != org.tfe_name() {
        return Err(module_not_found());
    }
    let ns = org.target_namespace().to_owned();
    let module =
        find_module(&state.index.read(), &ns, name, provider).ok_or_else(module_not_found)?;
    let m = Module { org, ns, module };
    if !state.auth.allowed(caller, &m.check(verb, resource)).await? {
        return Err(module_not_found());
    }
    Ok(m)
}

/// The module object of namespace `ns` with this name and provider (with an ID).
pub(crate) fn find_module(
    idx: &Inner,
    ns: &str,
    name: &str,
    provider: &str,
) -> Option<Arc<RegistryModule>> {
    idx.registry_modules()
        .in_namespace(ns)
        .filter(|m| m.spec.name == name && m.spec.provider == provider)
        .filter(|m| !id_of(m.as_ref()).is_empty())
        .min_by_key(|m| m.metadata.creation_timestamp.clone())
        .cloned()
}

/// The externally visible base URL: the settings' base URL, else derived from the
/// request's Host header (`http://` unless `X-Forwarded-Proto` says otherwise).
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(b) = state.settings.base_url.as_deref().filter(|b| !b.is_empty()) {
        return b.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost");
    let proto = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https" || *p == "http")
        .unwrap_or("http");
    format!("{proto}://{host}")
}

/// Now, as TFE prints timestamps.
pub fn now() -> String {
    crate::jsonapi::timestamp(&jiff::Timestamp::now())
}

/// A creation timestamp as TFE prints it.
pub fn created_at<K: Resource>(o: &K) -> Value {
    o.meta()
        .creation_timestamp
        .as_ref()
        .map_or(Value::Null, |t| json!(crate::jsonapi::timestamp(&t.0)))
}

/// A 422 document with one error object per `(pointer, detail)`.
pub fn invalid_all(errors: Vec<(String, String)>) -> Response {
    let body = ErrorDocument {
        errors: errors
            .into_iter()
            .map(|(pointer, detail)| ErrorObject {
                status: "422".into(),
                title: "unprocessable entity".into(),
                detail: Some(detail),
                source: Some(ErrorSource {
                    pointer: Some(pointer),
                    parameter: None,
                }),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        [(header::CONTENT_TYPE, MEDIA_TYPE)],
        bytes,
    )
        .into_response()
}

/// The kinds [`wait_seen`] can wait for.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Module,
    ConfigurationVersion,
    TestRun,
    TestVariable,
}

/// Waits (bounded) until the index holds `o` at least at its resourceVersion.
pub(crate) async fn wait_seen<K: Resource>(state: &AppState, o: &K, kind: Kind) {
    let uid = o.meta().uid.clone().unwrap_or_default();
    let rv = o.meta().resource_version.clone().unwrap_or_default();
    let seen = state
        .index
        .wait_until(INDEX_WAIT, |i| {
            let seen_rv = match kind {
                Kind::Module => i
                    .registry_modules()
                    .by_uid(&uid)
                    .and_then(|x| x.metadata.resource_version.clone()),
                Kind::ConfigurationVersion => i
                    .configuration_versions()
                    .by_uid(&uid)
                    .and_then(|x| x.metadata.resource_version.clone()),
                Kind::TestRun => i
                    .test_runs()
                    .by_uid(&uid)
                    .and_then(|x| x.metadata.resource_version.clone()),
                Kind::TestVariable => i
                    .test_variables()
                    .by_uid(&uid)
                    .and_then(|x| x.metadata.resource_version.clone()),
            };
            seen_rv.is_some_and(|s| rv_at_least(Some(&s), &rv))
        })
        .await;
    if !seen {
        tracing::warn!(%uid, %rv, "index did not catch up with a write in time");
    }
}

/// A fresh random token of about 190 bits (two base62 IDs' worth of the thread-local
/// CSPRNG), for one-time capability URLs and version IDs.
pub fn random_token() -> String {
    use terrace_crds::ids::{IdKind, new_id};
    let p = IdKind::Tag.prefix().len();
    let a = new_id(IdKind::Tag);
    let b = new_id(IdKind::Tag);
    format!("{}{}", &a[p..], &b[p..])
}

/// Whether two byte strings are equal, in time independent of where they differ (both are
/// hashed first, so lengths do not leak either).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a), Sha256::digest(b));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_content() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn random_tokens_are_long_and_distinct() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
