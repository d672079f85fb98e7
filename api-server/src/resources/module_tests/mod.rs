//! Module tests (SPEC.md area A) of the private registry's modules
//! ([`crate::resources::registry`]): configuration versions and their one-time uploads, test variables, test runs (create, list, show, cancel,
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

pub mod config_versions;
pub mod logs;
pub mod test_runs;
pub mod variables;

use terrace_crds::{TestRun, TestVariable};

use crate::index::Keyed;
use crate::prelude::*;
use crate::resources::registry::{Module, ModulePath, locate, locate_path};

/// Annotation naming the user who created a test run (`created-by`).
pub const ANNOTATION_CREATED_BY: &str = "terrace.dev/created-by";
pub use terrace_crds::constants::LABEL_MODULE;

/// Routes behind the global body limit (everything but the upload).
pub fn router() -> Router<AppState> {
    merged_routers![config_versions, variables, test_runs, logs]
}

/// The upload route, which has its own, larger body limit and must be merged outside the
/// global one.
pub fn upload_router() -> Router<AppState> {
    config_versions::upload_router().merge(logs::upload_router())
}

/// A module's path segments and the ID of one of its test runs or variables.
pub(crate) type ChildPath = (String, String, String, String, String);

/// [`locate`] for the module a [`ChildPath`] names, and the child's ID.
pub(crate) async fn locate_child(
    state: &AppState,
    caller: &Caller,
    (org, namespace, name, provider, id): ChildPath,
    verb: &'static str,
    resource: &'static str,
) -> Result<(Module, String), ApiError> {
    let m = locate(
        state,
        caller,
        (&org, &namespace, &name, &provider),
        verb,
        resource,
    )
    .await?;
    Ok((m, id))
}

/// An object that belongs to a registry module by its `spec.module` (test runs, test
/// variables).
pub(crate) trait ModuleChild: Resource<DynamicType = ()> {
    /// The RegistryModule object's name.
    fn module(&self) -> &str;
}

impl ModuleChild for TestRun {
    fn module(&self) -> &str {
        &self.spec.module
    }
}

impl ModuleChild for TestVariable {
    fn module(&self) -> &str {
        &self.spec.module
    }
}

/// The objects of `keyed` in module `m`'s namespace that belong to it and have an ID.
pub(crate) fn children_of<K: ModuleChild>(keyed: &Keyed<K>, m: &Module) -> Vec<Arc<K>> {
    let module = m.object_name();
    keyed
        .in_namespace(&m.ns)
        .filter(|c| c.module() == module && !id_of(c.as_ref()).is_empty())
        .cloned()
        .collect()
}

/// The object `id` of `keyed` if it belongs to module `m`.
pub(crate) fn child_of<K: ModuleChild>(keyed: &Keyed<K>, m: &Module, id: &str) -> Option<Arc<K>> {
    keyed
        .get(id)
        .filter(|c| {
            c.namespace().as_deref() == Some(m.ns.as_str()) && c.module() == m.object_name()
        })
        .cloned()
}

/// A 422 document with one error object per `(pointer, detail)`.
pub fn invalid_all(errors: Vec<(String, String)>) -> ApiError {
    ApiError::Invalid(
        errors
            .into_iter()
            .map(|(pointer, detail)| FieldError::new(pointer, detail))
            .collect(),
    )
}
