//! The kinds the index holds: one [`Indexed`] implementation each, saying how an object
//! enters and leaves the index and how it is found by its `terrace.dev/id`. Adding a kind
//! is one implementation (or one line of [`keyed!`] for kinds that need no secondary
//! index) and one entry of the [`indexed_kinds!`] list.

use std::sync::Arc;

use kube::Resource;
use kube::api::ObjectMeta;
use terrace_crds::{
    AgentPool, ConfigurationVersion, ModuleVersion, NotificationConfiguration, OAuthToken,
    Organization, Policy, PolicySet, Project, RegistryModule, Run, SshKey, StateVersion, TestRun,
    TestVariable, VariableSet, Workspace, WorkspaceVariable,
};

use super::Inner;

/// A kind fed into the index by its own watch.
pub trait Indexed:
    Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The kind's name (log fields and metric labels).
    const NAME: &'static str;
    /// The key of an object in the index (its uid; the name for cluster-scoped kinds).
    fn key(meta: &ObjectMeta) -> String {
        meta.uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            )
        })
    }
    /// Adds or replaces an object.
    fn put(inner: &mut Inner, o: Self);
    /// Removes the object with this key, if indexed.
    fn remove_key(inner: &mut Inner, key: &str);
    /// Forgets every object (before a relist is applied).
    fn clear(inner: &mut Inner);
    /// The object with this `terrace.dev/id`.
    fn by_id<'a>(inner: &'a Inner, id: &str) -> Option<&'a Arc<Self>>;
    /// The object with this key.
    fn by_key<'a>(inner: &'a Inner, key: &str) -> Option<&'a Arc<Self>>;
    /// Number of indexed objects.
    fn count(inner: &Inner) -> usize;
    /// The objects of namespace `ns` that carry an ID (any order).
    fn in_namespace(inner: &Inner, ns: &str) -> Vec<Arc<Self>>;
}

/// Something done once per indexed kind (see [`each`]).
pub trait PerKind {
    type Out;
    fn kind<K: Indexed>(&mut self) -> Self::Out;
}

/// The indexed kinds, listed once: [`NAMES`] and [`each`] follow this order.
macro_rules! indexed_kinds {
    ($($k:ty),* $(,)?) => {
        /// Every indexed kind's name, in the order of [`each`].
        pub const NAMES: [&str; [$(stringify!($k)),*].len()] = [$(<$k>::NAME),*];

        /// `f` for every indexed kind, in [`NAMES`] order.
        pub fn each<F: PerKind>(f: &mut F) -> Vec<F::Out> {
            vec![$(f.kind::<$k>()),*]
        }
    };
}

indexed_kinds!(
    Organization,
    Project,
    Workspace,
    SshKey,
    AgentPool,
    OAuthToken,
    VariableSet,
    NotificationConfiguration,
    PolicySet,
    Policy,
    RegistryModule,
    ModuleVersion,
    ConfigurationVersion,
    TestRun,
    TestVariable,
    WorkspaceVariable,
    StateVersion,
    Run,
);

/// Number of indexed objects per kind.
pub fn counts(inner: &Inner) -> Vec<(&'static str, usize)> {
    struct Count<'a>(&'a Inner);
    impl PerKind for Count<'_> {
        type Out = (&'static str, usize);
        fn kind<K: Indexed>(&mut self) -> Self::Out {
            (K::NAME, K::count(self.0))
        }
    }
    each(&mut Count(inner))
}

impl Indexed for Organization {
    const NAME: &'static str = "Organization";
    fn key(meta: &ObjectMeta) -> String {
        meta.name.clone().unwrap_or_default()
    }
    fn put(inner: &mut Inner, o: Self) {
        inner.put_org(o);
    }
    fn remove_key(inner: &mut Inner, key: &str) {
        inner.remove_org(key);
    }
    fn clear(inner: &mut Inner) {
        inner.orgs.clear();
        inner.org_by_tfe_name.clear();
        inner.org_by_namespace.clear();
    }
    /// Organizations are found by TFE name (their API ID).
    fn by_id<'a>(inner: &'a Inner, id: &str) -> Option<&'a Arc<Self>> {
        inner.organization(id)
    }
    fn by_key<'a>(inner: &'a Inner, key: &str) -> Option<&'a Arc<Self>> {
        inner.orgs.get(key)
    }
    fn count(inner: &Inner) -> usize {
        inner.orgs.len()
    }
    fn in_namespace(inner: &Inner, ns: &str) -> Vec<Arc<Self>> {
        inner
            .organization_of_namespace(ns)
            .cloned()
            .into_iter()
            .collect()
    }
}

impl Indexed for Workspace {
    const NAME: &'static str = "Workspace";
    fn put(inner: &mut Inner, o: Self) {
        inner.put_workspace(o);
    }
    fn remove_key(inner: &mut Inner, key: &str) {
        inner.remove_workspace(key);
    }
    fn clear(inner: &mut Inner) {
        inner.workspaces.clear();
        inner.ws_by_id.clear();
        inner.ws_by_namespace.clear();
        inner.ws_per_project.clear();
    }
    fn by_id<'a>(inner: &'a Inner, id: &str) -> Option<&'a Arc<Self>> {
        inner.workspace(id)
    }
    fn by_key<'a>(inner: &'a Inner, key: &str) -> Option<&'a Arc<Self>> {
        inner.workspaces.get(key)
    }
    fn count(inner: &Inner) -> usize {
        inner.workspaces.len()
    }
    fn in_namespace(inner: &Inner, ns: &str) -> Vec<Arc<Self>> {
        inner.workspaces_in(ns).map_or_else(Vec::new, |w| {
            w.uids_by_name()
                .filter_map(|u| inner.workspace_by_uid(u).cloned())
                .collect()
        })
    }
}

/// [`Indexed`] for a kind kept in a [`super::Keyed`] field of [`Inner`]. A kind with
/// secondary indexes of its own names the [`Inner`] methods that keep them
/// (`keyed!(Kind, field, put, remove, clear)`).
macro_rules! keyed {
    ($kind:ty, $field:ident) => {
        keyed!(
            $kind,
            $field,
            |inner: &mut Inner, o: $kind| inner.$field.put(o),
            |inner: &mut Inner, key: &str| inner.$field.remove(key),
            |inner: &mut Inner| inner.$field.clear()
        );
    };
    ($kind:ty, $field:ident, $put:expr, $remove:expr, $clear:expr) => {
        impl Indexed for $kind {
            const NAME: &'static str = stringify!($kind);
            fn put(inner: &mut Inner, o: Self) {
                ($put)(inner, o);
            }
            fn remove_key(inner: &mut Inner, key: &str) {
                ($remove)(inner, key);
            }
            fn clear(inner: &mut Inner) {
                ($clear)(inner);
            }
            fn by_id<'a>(inner: &'a Inner, id: &str) -> Option<&'a Arc<Self>> {
                inner.$field.get(id)
            }
            fn by_key<'a>(inner: &'a Inner, key: &str) -> Option<&'a Arc<Self>> {
                inner.$field.by_uid(key)
            }
            fn count(inner: &Inner) -> usize {
                inner.$field.by_uid.len()
            }
            fn in_namespace(inner: &Inner, ns: &str) -> Vec<Arc<Self>> {
                inner
                    .$field
                    .in_namespace(ns)
                    .filter(|o| super::id_label(o.as_ref()).is_some())
                    .cloned()
                    .collect()
            }
        }
    };
}

keyed!(
    Project,
    projects,
    Inner::put_project,
    Inner::remove_project,
    Inner::clear_projects
);
keyed!(SshKey, ssh_keys);
keyed!(AgentPool, agent_pools);
keyed!(OAuthToken, oauth_tokens);
keyed!(VariableSet, variable_sets);
keyed!(PolicySet, policy_sets);
keyed!(Policy, policies);
keyed!(NotificationConfiguration, notification_configurations);
keyed!(RegistryModule, registry_modules);
keyed!(ModuleVersion, module_versions);
keyed!(
    ConfigurationVersion,
    configuration_versions,
    Inner::put_cv,
    Inner::remove_cv,
    Inner::clear_cvs
);
keyed!(TestRun, test_runs);
keyed!(TestVariable, test_variables);
keyed!(
    Run,
    runs,
    Inner::put_run,
    Inner::remove_run,
    Inner::clear_runs
);
keyed!(
    WorkspaceVariable,
    workspace_variables,
    Inner::put_var,
    Inner::remove_var,
    Inner::clear_vars
);

keyed!(
    StateVersion,
    state_versions,
    Inner::put_state_version,
    Inner::remove_state_version,
    Inner::clear_state_versions
);
