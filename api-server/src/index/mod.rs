//! In-memory indexes of the terrace objects the API serves, fed by watches.
//!
//! Request handlers never list from the Kubernetes API: they read these maps (by ID, by
//! organization and name, by tag, by project). Writes go to the Kubernetes API; afterwards
//! the handler waits, bounded, until the index has seen the written resourceVersion, so a
//! create followed by a read never answers 404. Managed fields and the kubectl
//! last-applied annotation (and a workspace's status conditions, which no answer shows)
//! are dropped before indexing to keep memory per object small;
//! that is why a handler never writes an indexed copy back to the cluster (a replace would
//! delete them) but patches only what it changes ([`crate::write`]).
//!
//! Each kind is fed by one watch through the [`Indexed`] trait ([`kinds`]): how an object
//! enters and leaves the index and how it is found by ID. Watches read objects through
//! kube's `DeserializeGuard`, so one object that does not deserialize (written by hand
//! with a bad field, or by an older or newer terrace) is logged, counted and skipped
//! instead of failing the whole list and leaving its kind unsynced.

mod by_workspace;
mod configs;
mod kinds;
mod names;
mod runs;

pub use kinds::Indexed;
pub use names::NameMatch;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::core::DeserializeGuard;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{
    AgentPool, ConfigurationVersion, ModuleVersion, NotificationConfiguration, OAuthToken,
    Organization, Policy, PolicySet, Project, RegistryModule, Run, SshKey, StateVersion, TestRun,
    TestVariable, VariableSet, Workspace, WorkspaceVariable,
};

mod live;
pub use live::Index;
pub use live::WatchStats;
pub use live::unix_millis;

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The indexed state; read it through [`Index::read`].
#[derive(Default)]
pub struct Inner {
    orgs: HashMap<String, Arc<Organization>>,
    org_by_tfe_name: HashMap<String, String>,
    org_by_namespace: HashMap<String, String>,
    projects: Keyed<Project>,
    /// (namespace, object name) → uid.
    project_by_name: HashMap<(String, String), String>,
    /// namespace → uid of its default project.
    default_project_by_ns: HashMap<String, String>,
    /// uid → workspace. The uid is one shared `Arc<str>` across the workspace indexes
    /// (ID, name order, tags, name search), not a copy in each.
    workspaces: HashMap<Arc<str>, Arc<Workspace>>,
    ws_by_id: HashMap<String, Arc<str>>,
    ws_by_namespace: HashMap<String, NamespaceWorkspaces>,
    /// (namespace, project object name; "" for the default project) → workspaces in it.
    ws_per_project: HashMap<(String, String), usize>,
    ssh_keys: Keyed<SshKey>,
    agent_pools: Keyed<AgentPool>,
    oauth_tokens: Keyed<OAuthToken>,
    variable_sets: Keyed<VariableSet>,
    policy_sets: Keyed<PolicySet>,
    policies: Keyed<Policy>,
    notification_configurations: Keyed<NotificationConfiguration>,
    registry_modules: Keyed<RegistryModule>,
    module_versions: Keyed<ModuleVersion>,
    configuration_versions: Keyed<ConfigurationVersion>,
    /// Each workspace's configuration versions and current one (the newest uploaded, what
    /// a run without a configuration uses).
    cv_by_workspace: by_workspace::ByWorkspace,
    /// Each workspace's `current-configuration-version` as TFE shows it: the uid of its
    /// newest version that is not provisional, uploaded or not.
    cv_newest: std::collections::HashMap<by_workspace::WorkspaceKey, String>,
    test_runs: Keyed<TestRun>,
    test_variables: Keyed<TestVariable>,
    runs: Keyed<Run>,
    /// Each workspace's runs and current run.
    runs_by_workspace: by_workspace::ByWorkspace,
    /// Health assessments (Runs with `spec.assessment`): kept apart, so no list, count or
    /// lookup of runs ever sees one (docs/health.md).
    assessments: Keyed<Run>,
    workspace_variables: Keyed<WorkspaceVariable>,
    /// Each workspace's variables.
    vars_by_workspace: by_workspace::ByWorkspace,
    state_versions: Keyed<StateVersion>,
    /// Each workspace's state versions and current state version.
    sv_by_workspace: by_workspace::ByWorkspace,
    /// State version output ID → uid of its state version.
    sv_by_output: HashMap<String, String>,
}

/// Objects of one kind by uid, with an ID lookup and the uids of each namespace, so a
/// read of one organization's objects visits only those (never every object of the kind
/// in the cluster).
pub struct Keyed<K> {
    by_uid: HashMap<String, Arc<K>>,
    by_id: HashMap<String, String>,
    by_namespace: HashMap<String, HashSet<String>>,
}

impl<K> Default for Keyed<K> {
    fn default() -> Self {
        Self {
            by_uid: HashMap::new(),
            by_id: HashMap::new(),
            by_namespace: HashMap::new(),
        }
    }
}

impl<K: Resource> Keyed<K> {
    fn put(&mut self, o: K) {
        let key = uid(&o);
        self.remove(&key);
        if let Some(id) = id_label(&o) {
            self.by_id.insert(id, key.clone());
        }
        self.by_namespace
            .entry(o.meta().namespace.clone().unwrap_or_default())
            .or_default()
            .insert(key.clone());
        self.by_uid.insert(key, Arc::new(o));
    }

    fn remove(&mut self, key: &str) {
        let Some(old) = self.by_uid.remove(key) else {
            return;
        };
        if let Some(id) = id_label(old.as_ref())
            && self.by_id.get(&id).is_some_and(|k| k == key)
        {
            self.by_id.remove(&id);
        }
        let ns = old.meta().namespace.as_deref().unwrap_or_default();
        if let Some(set) = self.by_namespace.get_mut(ns) {
            set.remove(key);
            if set.is_empty() {
                self.by_namespace.remove(ns);
            }
        }
    }

    fn clear(&mut self) {
        self.by_uid.clear();
        self.by_id.clear();
        self.by_namespace.clear();
    }

    /// The object with this ID.
    pub fn get(&self, id: &str) -> Option<&Arc<K>> {
        self.by_id.get(id).and_then(|k| self.by_uid.get(k))
    }

    /// The object with this uid.
    pub fn by_uid(&self, uid: &str) -> Option<&Arc<K>> {
        self.by_uid.get(uid)
    }

    /// Every object (any order).
    pub fn iter(&self) -> impl Iterator<Item = &Arc<K>> {
        self.by_uid.values()
    }

    /// Objects of namespace `ns` (any order).
    pub fn in_namespace<'a>(&'a self, ns: &str) -> impl Iterator<Item = &'a Arc<K>> + 'a {
        self.by_namespace
            .get(ns)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.by_uid.get(uid))
    }
}

/// Per-namespace (per-organization) workspace indexes.
#[derive(Default)]
pub struct NamespaceWorkspaces {
    /// (lowercased TFE name, uid), in name order.
    by_name: BTreeSet<NameKey>,
    /// lowercased flat tag → (lowercased TFE name, uid) of the workspaces carrying it, in
    /// name order, so a tag-filtered, name-sorted page is read without sorting.
    by_tag: HashMap<String, BTreeSet<NameKey>>,
    /// Trigrams and reversed names, for name searches.
    names: names::NameIndex,
}

/// One entry of the name-ordered indexes: (lowercased TFE name, uid), both shared by every
/// index that holds the entry.
pub type NameKey = (Arc<str>, Arc<str>);

impl NamespaceWorkspaces {
    /// Workspace uids in name order.
    pub fn uids_by_name(&self) -> impl DoubleEndedIterator<Item = &str> {
        self.by_name.iter().map(|(_, uid)| &**uid)
    }
    /// Number of workspaces.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
    /// The name-ordered entries of every workspace (with an ID).
    pub fn entries(&self) -> &BTreeSet<NameKey> {
        &self.by_name
    }
    /// The name-ordered entries of workspaces carrying the flat tag.
    pub fn with_tag(&self, tag: &str) -> Option<&BTreeSet<NameKey>> {
        self.by_tag.get(&tag.to_ascii_lowercase())
    }
    /// Every flat tag (lowercased) with the number of workspaces carrying it.
    pub fn tags(&self) -> impl Iterator<Item = (&str, usize)> {
        self.by_tag.iter().map(|(t, uids)| (t.as_str(), uids.len()))
    }
    /// The entries whose lowercased name satisfies `m` (given lowercased), in name
    /// order, read from the name indexes; `None` when they cannot narrow it down (an
    /// empty string, or a substring shorter than three bytes): every entry may match.
    pub fn matching(&self, m: NameMatch<'_>) -> Option<Vec<&NameKey>> {
        match m {
            NameMatch::Prefix(s) if !s.is_empty() => Some(
                self.starting_at(s)
                    .take_while(|(n, _)| n.starts_with(s))
                    .collect(),
            ),
            NameMatch::Exact(s) => Some(self.named(s).collect()),
            other => self.names.matching(other),
        }
    }

    /// The entries whose lowercased name is `lower`, in uid order.
    pub fn named<'s, 'q>(
        &'s self,
        lower: &'q str,
    ) -> impl Iterator<Item = &'s NameKey> + use<'s, 'q> {
        self.starting_at(lower)
            .take_while(move |(n, _)| &**n == lower)
    }

    /// The entries from the first whose lowercased name is `lower` or after, in name order.
    fn starting_at(&self, lower: &str) -> impl Iterator<Item = &NameKey> + '_ {
        let start: NameKey = (Arc::from(lower), Arc::from(""));
        self.by_name.range(start..)
    }
}

fn uid<K: Resource>(o: &K) -> String {
    o.meta().uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.name_any()
        )
    })
}

fn is_default_project(p: &Project) -> bool {
    p.labels()
        .get(terrace_crds::constants::LABEL_DEFAULT_PROJECT)
        .map(String::as_str)
        == Some("true")
}

fn id_label<K: Resource>(o: &K) -> Option<String> {
    o.meta().labels.as_ref()?.get(LABEL_ID).cloned()
}

fn slim<K: Resource>(mut o: K) -> K {
    let m = o.meta_mut();
    m.managed_fields = None;
    if let Some(a) = m.annotations.as_mut() {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            m.annotations = None;
        }
    }
    o
}

/// The project key of a workspace: (namespace, project object name or "" for none).
fn project_key(w: &Workspace) -> (String, String) {
    (
        w.namespace().unwrap_or_default(),
        w.spec.project.clone().unwrap_or_default(),
    )
}

/// Whether resourceVersion `seen` is at least `wanted` (numeric when both parse, which
/// they do for etcd and the simulator; equality otherwise).
pub fn rv_at_least(seen: Option<&str>, wanted: &str) -> bool {
    match (
        seen.and_then(|s| s.parse::<u64>().ok()),
        wanted.parse::<u64>().ok(),
    ) {
        (Some(s), Some(w)) => s >= w,
        _ => seen == Some(wanted),
    }
}

impl Inner {
    fn put_org(&mut self, o: Organization) {
        let key = o.name_any();
        self.remove_org(&key);
        self.org_by_tfe_name
            .insert(o.tfe_name().to_owned(), key.clone());
        self.org_by_namespace
            .insert(o.target_namespace().to_owned(), key.clone());
        self.orgs.insert(key, Arc::new(o));
    }

    fn remove_org(&mut self, key: &str) {
        if let Some(old) = self.orgs.remove(key) {
            self.org_by_tfe_name.remove(old.tfe_name());
            self.org_by_namespace.remove(old.target_namespace());
        }
    }

    fn put_project(&mut self, p: Project) {
        let key = uid(&p);
        self.remove_project(&key);
        let ns = p.namespace().unwrap_or_default();
        if is_default_project(&p) {
            self.default_project_by_ns.insert(ns.clone(), key.clone());
        }
        self.project_by_name.insert((ns, p.name_any()), key);
        self.projects.put(p);
    }

    fn remove_project(&mut self, key: &str) {
        let Some(old) = self.projects.by_uid(key).cloned() else {
            return;
        };
        self.projects.remove(key);
        let ns = old.namespace().unwrap_or_default();
        if self
            .default_project_by_ns
            .get(&ns)
            .is_some_and(|k| k == key)
        {
            self.default_project_by_ns.remove(&ns);
        }
        let name_key = (ns, old.name_any());
        if self
            .project_by_name
            .get(&name_key)
            .is_some_and(|k| k == key)
        {
            self.project_by_name.remove(&name_key);
        }
    }

    fn clear_projects(&mut self) {
        self.projects.clear();
        self.project_by_name.clear();
        self.default_project_by_ns.clear();
    }

    fn put_workspace(&mut self, mut w: Workspace) {
        // No answer shows a workspace's kstatus conditions (the operator's Ready,
        // Reconciling and Stalled with their messages), and they are a third of an
        // indexed workspace's memory.
        if let Some(status) = w.status.as_mut() {
            status.conditions = Vec::new();
        }
        let key: Arc<str> = Arc::from(uid(&w));
        self.remove_workspace(&key);
        let ns = w.namespace().unwrap_or_default();
        // Only workspaces with an ID are visible through the API; the operator assigns
        // IDs to objects applied without one.
        if let Some(id) = id_label(&w) {
            let idx = self.ws_by_namespace.entry(ns).or_default();
            let name: Arc<str> = Arc::from(w.spec.name.to_ascii_lowercase());
            let entry = (name.clone(), key.clone());
            idx.names.insert(&entry);
            idx.by_name.insert(entry);
            for t in &w.spec.tags {
                idx.by_tag
                    .entry(t.to_ascii_lowercase())
                    .or_default()
                    .insert((name.clone(), key.clone()));
            }
            self.ws_by_id.insert(id, key.clone());
            *self.ws_per_project.entry(project_key(&w)).or_default() += 1;
        }
        self.workspaces.insert(key, Arc::new(w));
    }

    fn remove_workspace(&mut self, key: &str) {
        let Some(old) = self.workspaces.remove(key) else {
            return;
        };
        if let Some(id) = id_label(old.as_ref()) {
            if self.ws_by_id.get(&id).is_some_and(|k| **k == *key) {
                self.ws_by_id.remove(&id);
            }
            let pk = project_key(&old);
            if let Some(n) = self.ws_per_project.get_mut(&pk) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.ws_per_project.remove(&pk);
                }
            }
        }
        let ns = old.namespace().unwrap_or_default();
        if let Some(idx) = self.ws_by_namespace.get_mut(&ns) {
            let entry: NameKey = (
                Arc::from(old.spec.name.to_ascii_lowercase()),
                Arc::from(key),
            );
            idx.by_name.remove(&entry);
            idx.names.remove(key);
            for t in &old.spec.tags {
                let t = t.to_ascii_lowercase();
                if let Some(set) = idx.by_tag.get_mut(&t) {
                    set.remove(&entry);
                    if set.is_empty() {
                        idx.by_tag.remove(&t);
                    }
                }
            }
            if idx.by_name.is_empty() {
                self.ws_by_namespace.remove(&ns);
            }
        }
    }

    /// All organizations.
    pub fn organizations(&self) -> impl Iterator<Item = &Arc<Organization>> {
        self.orgs.values()
    }

    /// The organization with this TFE name.
    pub fn organization(&self, tfe_name: &str) -> Option<&Arc<Organization>> {
        self.org_by_tfe_name
            .get(tfe_name)
            .and_then(|k| self.orgs.get(k))
    }

    /// The organization owning a namespace.
    pub fn organization_of_namespace(&self, ns: &str) -> Option<&Arc<Organization>> {
        self.org_by_namespace.get(ns).and_then(|k| self.orgs.get(k))
    }

    /// The project with this ID.
    pub fn project(&self, id: &str) -> Option<&Arc<Project>> {
        self.projects.get(id)
    }

    /// Projects of a namespace.
    pub fn projects_in<'a>(&'a self, ns: &'a str) -> impl Iterator<Item = &'a Arc<Project>> + 'a {
        self.projects.in_namespace(ns)
    }

    /// The default project of namespace `ns`.
    pub fn default_project(&self, ns: &str) -> Option<&Arc<Project>> {
        self.default_project_by_ns
            .get(ns)
            .and_then(|k| self.projects.by_uid(k))
    }

    /// The project a workspace belongs to: its named project, else the default one.
    pub fn project_of(&self, ws: &Workspace) -> Option<&Arc<Project>> {
        let ns = ws.namespace().unwrap_or_default();
        match ws.spec.project.as_deref().filter(|p| !p.is_empty()) {
            Some(name) => self.project_named(&ns, name),
            None => self.default_project(&ns),
        }
    }

    /// The project object `name` of namespace `ns`.
    pub fn project_named(&self, ns: &str, name: &str) -> Option<&Arc<Project>> {
        self.project_by_name
            .get(&(ns.to_owned(), name.to_owned()))
            .and_then(|k| self.projects.by_uid(k))
    }

    /// The workspace with this ID.
    pub fn workspace(&self, id: &str) -> Option<&Arc<Workspace>> {
        self.ws_by_id.get(id).and_then(|k| self.workspaces.get(k))
    }

    /// The workspace with this uid.
    pub fn workspace_by_uid(&self, uid: &str) -> Option<&Arc<Workspace>> {
        self.workspaces.get(uid)
    }

    /// The workspace of namespace `ns` whose TFE name is `name` (case-insensitive; the
    /// oldest one if kubectl users created duplicates). Only workspaces with an ID count.
    pub fn workspace_named(&self, ns: &str, name: &str) -> Option<&Arc<Workspace>> {
        let idx = self.ws_by_namespace.get(ns)?;
        let lower = name.to_ascii_lowercase();
        idx.named(&lower)
            .filter_map(|(_, uid)| self.workspaces.get(uid))
            .filter(|w| id_label(w.as_ref()).is_some())
            .min_by_key(|w| w.metadata.creation_timestamp.clone())
    }

    /// The workspace of namespace `ns` whose object name is `object` (a scan of the
    /// namespace's workspaces: for objects that name their workspace without its ID).
    pub fn workspace_object(&self, ns: &str, object: &str) -> Option<&Arc<Workspace>> {
        self.ws_by_namespace
            .get(ns)?
            .by_name
            .iter()
            .filter_map(|(_, uid)| self.workspaces.get(uid))
            .find(|w| w.metadata.name.as_deref() == Some(object))
    }

    /// Number of workspaces (with an ID) in project object `project` of namespace `ns`,
    /// counting those without a project in the default project.
    pub fn project_workspace_count(&self, p: &Project) -> usize {
        let ns = p.namespace().unwrap_or_default();
        let own = self
            .ws_per_project
            .get(&(ns.clone(), p.name_any()))
            .copied()
            .unwrap_or(0);
        let unassigned = if is_default_project(p) {
            self.ws_per_project
                .get(&(ns, String::new()))
                .copied()
                .unwrap_or(0)
        } else {
            0
        };
        own + unassigned
    }

    /// Per-namespace workspace indexes.
    pub fn workspaces_in(&self, ns: &str) -> Option<&NamespaceWorkspaces> {
        self.ws_by_namespace.get(ns)
    }

    /// Number of indexed workspaces.
    pub fn workspace_count(&self) -> usize {
        self.workspaces.len()
    }

    /// Variable sets.
    pub fn variable_sets(&self) -> &Keyed<VariableSet> {
        &self.variable_sets
    }

    /// Policy sets.
    pub fn policy_sets(&self) -> &Keyed<PolicySet> {
        &self.policy_sets
    }

    /// Policies.
    pub fn policies(&self) -> &Keyed<Policy> {
        &self.policies
    }

    /// The Policy of namespace `ns` a policy set's reference names (its ID or its object
    /// name).
    pub fn policy_referenced(&self, ns: &str, reference: &str) -> Option<&Arc<Policy>> {
        self.policies
            .get(reference)
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .or_else(|| {
                self.policies
                    .in_namespace(ns)
                    .find(|p| p.metadata.name.as_deref() == Some(reference))
            })
    }

    /// Notification configurations.
    pub fn notification_configurations(&self) -> &Keyed<NotificationConfiguration> {
        &self.notification_configurations
    }

    /// SSH keys.
    pub fn ssh_keys(&self) -> &Keyed<SshKey> {
        &self.ssh_keys
    }

    /// Agent pools.
    pub fn agent_pools(&self) -> &Keyed<AgentPool> {
        &self.agent_pools
    }

    /// OAuth tokens.
    pub fn oauth_tokens(&self) -> &Keyed<OAuthToken> {
        &self.oauth_tokens
    }

    /// Registry modules.
    pub fn registry_modules(&self) -> &Keyed<RegistryModule> {
        &self.registry_modules
    }

    /// Registry module versions.
    pub fn module_versions(&self) -> &Keyed<ModuleVersion> {
        &self.module_versions
    }

    /// Configuration versions.
    pub fn configuration_versions(&self) -> &Keyed<ConfigurationVersion> {
        &self.configuration_versions
    }

    /// Module test runs.
    pub fn test_runs(&self) -> &Keyed<TestRun> {
        &self.test_runs
    }

    /// Module test variables.
    pub fn test_variables(&self) -> &Keyed<TestVariable> {
        &self.test_variables
    }

    /// Workspace runs (never an assessment).
    pub fn runs(&self) -> &Keyed<Run> {
        &self.runs
    }

    /// Health assessments (Runs with `spec.assessment`), by their run ID.
    pub fn assessments(&self) -> &Keyed<Run> {
        &self.assessments
    }

    /// Workspace variables.
    pub fn workspace_variables(&self) -> &Keyed<WorkspaceVariable> {
        &self.workspace_variables
    }

    /// State versions.
    pub fn state_versions(&self) -> &Keyed<StateVersion> {
        &self.state_versions
    }

    /// The state versions of workspace object `ws` of namespace `ns` (any order).
    pub fn state_versions_of<'a>(
        &'a self,
        ns: &str,
        ws: &str,
    ) -> impl Iterator<Item = &'a Arc<StateVersion>> + 'a {
        self.sv_by_workspace
            .uids(ns, ws)
            .filter_map(|uid| self.state_versions.by_uid(uid))
    }

    /// The state version holding output `id`.
    pub fn state_version_of_output(&self, id: &str) -> Option<&Arc<StateVersion>> {
        self.sv_by_output
            .get(id)
            .and_then(|k| self.state_versions.by_uid(k))
    }

    /// The current state version of a workspace: its latest finalized one.
    pub fn current_state_version(&self, ws: &Workspace) -> Option<&Arc<StateVersion>> {
        self.sv_by_workspace
            .current(&ws.namespace().unwrap_or_default(), &ws.name_any())
            .and_then(|uid| self.state_versions.by_uid(uid))
    }

    /// Recomputes the current state version of workspace `wk`: the finalized one that
    /// became current last (the greatest `sequence`, see
    /// [`terrace_crds::state::StateHead`]); versions from before sequences by finalizedAt,
    /// which has milliseconds, then serial.
    fn refresh_current(&mut self, wk: &by_workspace::WorkspaceKey) {
        let finalized = terrace_crds::state::StateVersionState::Finalized.as_str();
        let order = |v: &StateVersion| {
            let s = v.status.as_ref();
            (
                s.and_then(|s| s.sequence),
                s.and_then(|s| s.finalized_at.clone()).unwrap_or_default(),
                v.spec.serial,
            )
        };
        let current = self
            .state_versions_of(&wk.0, &wk.1)
            .filter(|v| v.status.as_ref().and_then(|s| s.status.as_deref()) == Some(finalized))
            .max_by_key(|v| order(v))
            .map(|v| uid(v.as_ref()));
        self.sv_by_workspace.set_current(wk, current);
    }

    fn put_state_version(&mut self, v: StateVersion) {
        let key = uid(&v);
        self.remove_state_version(&key);
        let wk = (v.namespace().unwrap_or_default(), v.spec.workspace.clone());
        self.sv_by_workspace.add(wk.clone(), key.clone());
        for o in v.status.iter().flat_map(|s| &s.outputs) {
            self.sv_by_output.insert(o.id.clone(), key.clone());
        }
        self.state_versions.put(v);
        self.refresh_current(&wk);
    }

    fn remove_state_version(&mut self, key: &str) {
        let Some(old) = self.state_versions.by_uid(key).cloned() else {
            return;
        };
        let wk = (
            old.namespace().unwrap_or_default(),
            old.spec.workspace.clone(),
        );
        self.sv_by_workspace.remove(&wk, key);
        for o in old.status.iter().flat_map(|s| &s.outputs) {
            if self.sv_by_output.get(&o.id).is_some_and(|k| k == key) {
                self.sv_by_output.remove(&o.id);
            }
        }
        self.state_versions.remove(key);
        self.refresh_current(&wk);
    }

    fn clear_state_versions(&mut self) {
        self.state_versions.clear();
        self.sv_by_workspace = Default::default();
        self.sv_by_output.clear();
    }

    /// Number of indexed objects per kind.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        kinds::counts(self)
    }
}

#[cfg(test)]
mod tests {
    //! One object that does not deserialize (here: a Workspace written while the CRD's
    //! schema allowed anything in its spec, as an older or newer terrace might) is skipped
    //! and counted; the rest of its kind is indexed and the index still syncs.

    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Api;
    use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
    use kube::discovery::ApiResource;
    use serde_json::json;
    use terrace_crds::Workspace;

    use crate::testing::{ORG, harness};
    use crate::{AppState, Edition, Settings};

    #[tokio::test]
    async fn a_malformed_object_is_skipped_and_the_kind_still_syncs() {
        let h = harness(Edition::SelfHosted).await;
        // Loosen the Workspace schema: any spec is stored.
        let crds: Api<CustomResourceDefinition> = Api::all(h.admin.clone());
        let loose = json!({"spec": {"versions": [{
            "name": "v1alpha1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "subresources": {"status": {}},
        }]}});
        crds.patch(
            "workspaces.terrace.dev",
            &PatchParams::default(),
            &Patch::Merge(&loose),
        )
        .await
        .unwrap_or_else(|e| panic!("loosen the CRD: {e}"));
        let ar = ApiResource::erase::<Workspace>(&());
        let raw: Api<DynamicObject> = Api::namespaced_with(h.admin.clone(), ORG, &ar);
        let bad: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "terrace.dev/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "bad", "namespace": ORG, "labels": {"terrace.dev/id": "ws-Bad0000000000001"}},
            "spec": {"name": "bad", "autoApply": "certainly"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        raw.create(&PostParams::default(), &bad)
            .await
            .unwrap_or_else(|e| panic!("create the bad object: {e}"));
        h.workspace("ws-Good000000000001", "good", |_| {}).await;
        let skipped = |state: &AppState| {
            state
                .index
                .watch_stats()
                .find(|(k, _)| *k == "Workspace")
                .map(|(_, s)| s.invalid.load(Ordering::Relaxed))
                .unwrap_or_default()
        };
        assert!(skipped(&h.state) >= 1, "the bad object was counted");
        assert!(
            h.state
                .index
                .read()
                .workspace("ws-Bad0000000000001")
                .is_none()
        );
        let (st, _) = h
            .call("GET", "/api/v2/workspaces/ws-Good000000000001", None)
            .await;
        assert_eq!(st, 200);
        // A fresh index over the same cluster lists both and syncs all the same.
        let fresh = AppState::new(Settings::default(), h.admin.clone());
        let tasks = fresh.index.spawn_watches(fresh.client.clone());
        assert!(
            fresh.index.wait_synced(Duration::from_secs(10)).await,
            "the index synced despite the bad object"
        );
        assert!(
            fresh
                .index
                .read()
                .workspace("ws-Good000000000001")
                .is_some()
        );
        assert!(skipped(&fresh) >= 1);
        for t in tasks {
            t.abort();
        }
    }
}
