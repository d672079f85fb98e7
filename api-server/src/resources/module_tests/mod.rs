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

pub mod config_versions;
pub mod logs;
pub mod protocol;
pub mod registry;
pub mod test_runs;
pub mod variables;
pub mod versions;

use kube::api::ObjectMeta;
use terrace_crds::{RegistryModule, TestRun, TestVariable};

use crate::index::{Inner, Keyed};
use crate::prelude::*;

/// Annotation naming the user who created a test run (`created-by`).
pub const ANNOTATION_CREATED_BY: &str = "terrace.dev/created-by";
pub use terrace_crds::constants::LABEL_MODULE;

/// Routes behind the global body limit (everything but the upload).
pub fn router() -> Router<AppState> {
    merged_routers![
        registry,
        config_versions,
        variables,
        test_runs,
        logs,
        versions,
        protocol
    ]
}

/// The upload route, which has its own, larger body limit and must be merged outside the
/// global one.
pub fn upload_router() -> Router<AppState> {
    config_versions::upload_router().merge(logs::upload_router())
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
    /// The metadata of a new object of the module with TFE ID `id` (a configuration
    /// version, a test variable): [`write::new_meta`] labelled with the module, and owned
    /// by it, so it goes when the module goes.
    pub fn child_meta(&self, id: &str) -> ObjectMeta {
        ObjectMeta {
            owner_references: self.module.controller_owner_ref(&()).map(|o| vec![o]),
            ..write::new_meta(
                id,
                &self.ns,
                self.org.name_any(),
                &[(LABEL_MODULE, self.object_name())],
            )
        }
    }
}

pub(crate) fn module_not_found() -> ApiError {
    ApiError::not_found("registry module not found")
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
    let org = state.org(org).await?;
    if namespace != org.tfe_name() {
        return Err(module_not_found());
    }
    let ns = org.target_namespace().to_owned();
    let module =
        find_module(&state.index.read(), &ns, name, provider).ok_or_else(module_not_found)?;
    let m = Module { org, ns, module };
    if !state.allowed(caller, &m.check(verb, resource)).await? {
        return Err(module_not_found());
    }
    Ok(m)
}

/// The path segments naming a module: organization, namespace, name and provider.
pub(crate) type ModulePath = (String, String, String, String);
/// A module's path segments and the ID of one of its test runs or variables.
pub(crate) type ChildPath = (String, String, String, String, String);

/// [`locate`] for the module `path` names.
pub(crate) async fn locate_path(
    state: &AppState,
    caller: &Caller,
    (org, namespace, name, provider): &ModulePath,
    verb: &'static str,
    resource: &'static str,
) -> Result<Module, ApiError> {
    locate(
        state,
        caller,
        (org, namespace, name, provider),
        verb,
        resource,
    )
    .await
}

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

/// A 422 document with one error object per `(pointer, detail)`.
pub fn invalid_all(errors: Vec<(String, String)>) -> ApiError {
    ApiError::Invalid(
        errors
            .into_iter()
            .map(|(pointer, detail)| FieldError::new(pointer, detail))
            .collect(),
    )
}
