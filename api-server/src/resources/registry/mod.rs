//! The private module registry (docs/registry.md): registry modules through TFE's API
//! ([`modules`]), their published versions ([`versions`]) and the Module Registry
//! Protocol that `terraform init` reads ([`protocol`]). Module tests
//! ([`crate::resources::module_tests`]) run against these modules; the registry imports
//! nothing of them.
//!
//! A module is named in paths as `/organizations/:org/…/private/:namespace/:name/:provider`;
//! [`locate`] resolves it from the watch-fed index and answers 404 for an unknown
//! organization or module and for a caller without the RBAC verb the operation needs.

pub mod modules;
pub mod protocol;
pub mod versions;

use kube::api::ObjectMeta;
use terrace_crds::RegistryModule;

use crate::index::Inner;
use crate::prelude::*;
pub use terrace_crds::constants::LABEL_MODULE;

/// The registry's routes.
pub fn router() -> Router<AppState> {
    merged_routers![modules, versions, protocol]
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
