//! Every watch of the operator goes through [`guarded`]: kube-runtime's watcher over
//! [`DeserializeGuard`], trimmed objects, malformed objects reported and skipped.
//!
//! Without the guard one object of a kind that does not deserialize (a field of the
//! wrong type, written before a schema change or with validation bypassed) fails the
//! whole list, so that kind's cache never syncs and every controller reading it stops.
//! With it, the object is reported once per resourceVersion — a warning log, the metric
//! `terrace_watch_malformed_objects_total{kind}` and a Warning Event `MalformedObject` on
//! the object — and counts as absent: a (re)list leaves it out, and an object that turns
//! malformed after it was cached leaves the cache (the stream carries a deletion for it,
//! built by [`Watched::tombstone`]). The controllers carry on with every other object;
//! once the object is fixed its next event brings it back.
//!
//! Objects are trimmed before they reach a cache or a mapper ([`Watched::trim`]):
//! `managedFields` and kubectl's last-applied-configuration annotation ([`trim`]), which
//! no controller reads and which make up most of a kubectl-applied object's size, and for
//! the kind kept in the largest numbers, Workspace, every spec and status field its
//! controller does not read. Nothing in the operator writes a cached object back whole,
//! so the trimmed fields are never lost on the server.
//!
//! A kind several controllers need is watched once, through a [`Feed`]: one guarded watch
//! fills one cache, drives the kind's own controller, and hands every object it saw to
//! the other controllers that [`Feed::subscribe`]d — after the cache has it, so a
//! controller woken by a subscription reads a cache that already shows the change.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{LazyLock, Mutex};

use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod};
use kube::api::{ApiResource, DynamicObject, ObjectMeta};
use kube::core::DeserializeGuard;
use kube::core::error_boundary::InvalidObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use terrace_crds::{
    AgentPool, ConfigurationVersion, ModuleVersion, NotificationConfiguration, OAuthToken,
    Organization, Project, RegistryModule, Run, SshKey, StateVersion, TestRun, TestVariable,
    VariableSet, Workspace, WorkspaceSpec, WorkspaceStatus, WorkspaceVariable,
};

use crate::events::{new_recorder, publish_event};
use crate::metrics;

/// kubectl's copy of the applied manifest (client-side apply).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Event reason of a watched object that does not deserialize.
pub const REASON_MALFORMED_OBJECT: &str = "MalformedObject";
/// Reported malformed object versions remembered at most (then forgotten all at once:
/// a report repeated after that is harmless).
const REPORTED_CAP: usize = 4096;

/// A kind the operator watches.
pub trait Watched:
    Resource<DynamicType: Clone + Eq + Hash + Send + Sync>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// An object of the kind with only `meta`, enough for a cache to remove the object
    /// of that name (what a malformed object becomes).
    fn tombstone(meta: ObjectMeta, dt: &Self::DynamicType) -> Self;

    /// Drops what no controller reads before the object is cached (by default the
    /// metadata [`trim`] drops).
    fn trim(&mut self) {
        trim(self);
    }
}

/// [`Watched::tombstone`] of a CRD kind: its metadata, a default spec, no status.
macro_rules! crd_tombstone {
    () => {
        fn tombstone(meta: ObjectMeta, _: &()) -> Self {
            Self {
                metadata: meta,
                spec: Default::default(),
                status: None,
            }
        }
    };
}

/// [`Watched`] for CRD kinds cached as they are (the default [`Watched::trim`]).
macro_rules! watched_crds {
    ($($kind:ty),* $(,)?) => {$(
        impl Watched for $kind {
            crd_tombstone!();
        }
    )*};
}

watched_crds!(
    Organization,
    Project,
    TestRun,
    ConfigurationVersion,
    RegistryModule,
    TestVariable,
    WorkspaceVariable,
    SshKey,
    AgentPool,
    OAuthToken,
    Run,
    VariableSet,
    NotificationConfiguration,
    ModuleVersion,
);

impl Watched for Workspace {
    crd_tombstone!();

    /// Keeps only what the Workspace controller reads: the spec fields its status derives
    /// from and the status fields it owns (see `crate::workspace`). Whoever reads another
    /// field from the Workspace cache must keep it here.
    fn trim(&mut self) {
        trim(self);
        let spec = std::mem::take(&mut self.spec);
        self.spec = WorkspaceSpec {
            name: spec.name,
            project: spec.project,
            tags: spec.tags,
            tag_bindings: spec.tag_bindings,
            remote_state_consumers: spec.remote_state_consumers,
            // The run controller queues the runs a successful apply triggers.
            run_trigger_sources: spec.run_trigger_sources,
            auto_apply: spec.auto_apply,
            auto_apply_run_trigger: spec.auto_apply_run_trigger,
            // The run controller logs the engine's JSON UI for these workspaces.
            structured_run_output_enabled: spec.structured_run_output_enabled,
            // The state retention controller reads the policy.
            data_retention_policy: spec.data_retention_policy,
            // The run controller reads where the configuration is, and when the
            // workspace is due to be destroyed.
            working_directory: spec.working_directory,
            auto_destroy_at: spec.auto_destroy_at,
            auto_destroy_activity_duration: spec.auto_destroy_activity_duration,
            terraform_version: spec.terraform_version,
            execution_mode: spec.execution_mode,
            agent_pool_id: spec.agent_pool_id,
            // The assessment scheduler reads whether and how the workspace runs.
            assessments_enabled: spec.assessments_enabled,
            operations: spec.operations,
            setting_overwrites: spec.setting_overwrites,
            // The workspace controller's RepositoryReadable condition (docs/vcs.md).
            vcs_repo: spec.vcs_repo,
            ..WorkspaceSpec::default()
        };
        self.status = self.status.take().map(|s| WorkspaceStatus {
            id: s.id,
            project_id: s.project_id,
            tag_names: s.tag_names,
            effective_tag_bindings: s.effective_tag_bindings,
            remote_state_consumer_count: s.remote_state_consumer_count,
            latest_change_at: s.latest_change_at,
            // The assessment scheduler: a state to assess, the last result; the
            // workspace controller derives the health conditions from it.
            resource_count: s.resource_count,
            health: s.health,
            observed_generation: s.observed_generation,
            conditions: crate::conditions::with_message_digests(s.conditions),
            ..WorkspaceStatus::default()
        });
    }
}

impl Watched for StateVersion {
    crd_tombstone!();

    /// Keeps what the state retention controller reads: not the resource and output
    /// summaries.
    fn trim(&mut self) {
        trim(self);
        if let Some(s) = self.status.as_mut() {
            s.resources = Vec::new();
            s.outputs = Vec::new();
            s.providers = Vec::new();
            s.conditions = Vec::new();
        }
    }
}

impl Watched for Pod {
    fn tombstone(meta: ObjectMeta, _: &()) -> Self {
        Pod {
            metadata: meta,
            ..Pod::default()
        }
    }
}

impl Watched for Namespace {
    fn tombstone(meta: ObjectMeta, _: &()) -> Self {
        Namespace {
            metadata: meta,
            ..Namespace::default()
        }
    }
}

impl Watched for DynamicObject {
    fn tombstone(meta: ObjectMeta, dt: &ApiResource) -> Self {
        let mut o = DynamicObject::new(meta.name.as_deref().unwrap_or_default(), dt);
        o.metadata = meta;
        o
    }
}

/// The cached objects of `store` in organization `o`'s namespace: what an Organization's
/// change wakes in a controller of one of its kinds (`dt`: the kind's dynamic type).
pub fn of_organization<K>(
    store: &Store<K>,
    o: &Organization,
    dt: &K::DynamicType,
) -> Vec<ObjectRef<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + Hash,
{
    let ns = crate::rules::organization_namespace(o);
    store
        .state()
        .iter()
        .filter(|x| x.namespace().as_deref() == Some(ns))
        .map(|x| ObjectRef::from_obj_with(x.as_ref(), dt.clone()))
        .collect()
}

/// Drops what no controller reads: `managedFields` and kubectl's last-applied annotation.
pub fn trim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            meta.annotations = None;
        }
    }
}

/// The watch events of kind `K` (every namespace) selected by `config`, guarded and
/// trimmed (see the module docs). Errors are the watcher's; feed the stream to a
/// reflector or a controller, which back off on them.
pub fn guarded<K: Watched>(
    client: &kube::Client,
    dt: K::DynamicType,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static + use<K> {
    let api: Api<DeserializeGuard<K>> = Api::all_with(client.clone(), &dt);
    let client = client.clone();
    watcher::watcher(api, config).filter_map(move |ev| {
        let ev = match ev {
            Ok(ev) => unguard(ev, &dt, &client).map(Ok),
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(ev)
    })
}

/// One guarded watch of a kind: its cache, the stream driving it, and the subscribers it
/// hands what it sees to (see the module docs).
pub struct Feed<K: Watched> {
    client: kube::Client,
    dt: K::DynamicType,
    config: watcher::Config,
    writer: Writer<K>,
    subscribers: Vec<UnboundedSender<K>>,
    observers: Vec<Observer<K>>,
}

/// A hook following every event of a feed (see [`Feed::observe`]).
type Observer<K> = Box<dyn FnMut(&Event<K>) + Send>;

impl<K: Watched> Feed<K> {
    /// A feed of the objects of `K` (every namespace) selected by `config`; it watches
    /// once [`Feed::into_stream`]'s stream is polled.
    pub fn new(client: &kube::Client, dt: K::DynamicType, config: watcher::Config) -> Self {
        Self {
            client: client.clone(),
            writer: Writer::new(dt.clone()),
            dt,
            config,
            subscribers: Vec::new(),
            observers: Vec::new(),
        }
    }

    /// The feed's cache (empty until the stream has listed the kind).
    pub fn store(&self) -> Store<K> {
        self.writer.as_reader()
    }

    /// Every object the watch applies or deletes from now on, once the cache shows it,
    /// as a trigger stream for `Controller::watches_stream`/`owns_stream`.
    pub fn subscribe(
        &mut self,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static + use<K> {
        let (tx, rx) = unbounded();
        self.subscribers.push(tx);
        rx.map(Ok)
    }

    /// Calls `observer` with every event the watch applies to the cache, right after the
    /// cache and before the subscribers: for an index of its own kept in step with it.
    pub fn observe(&mut self, observer: impl FnMut(&Event<K>) + Send + 'static) {
        self.observers.push(Box::new(observer));
    }

    /// The stream that runs the watch and fills the cache: the objects applied, for the
    /// kind's own controller (`Controller::for_stream`).
    pub fn into_stream(self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (subscribers, mut observers) = (self.subscribers, self.observers);
        reflector::reflector(
            self.writer,
            guarded::<K>(&self.client, self.dt, self.config),
        )
        .inspect(move |ev| {
            if let Ok(ev) = ev {
                for o in &mut observers {
                    o(ev);
                }
            }
            if let Ok(Event::Apply(k) | Event::InitApply(k) | Event::Delete(k)) = ev {
                for s in &subscribers {
                    // A subscriber that stopped (shutdown) no longer listens.
                    let _ = s.unbounded_send(k.clone());
                }
            }
        })
        .applied_objects()
    }
}

/// One guarded event as the caches should see it (None: skip it).
fn unguard<K: Watched>(
    ev: Event<DeserializeGuard<K>>,
    dt: &K::DynamicType,
    client: &kube::Client,
) -> Option<Event<K>> {
    let ok = |mut k: K| {
        k.trim();
        k
    };
    Some(match ev {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(DeserializeGuard(Ok(k))) => Event::InitApply(ok(k)),
        Event::InitApply(DeserializeGuard(Err(bad))) => {
            report::<K>(&bad, dt, client);
            return None;
        }
        Event::Apply(DeserializeGuard(Ok(k))) => Event::Apply(ok(k)),
        Event::Apply(DeserializeGuard(Err(bad))) => {
            report::<K>(&bad, dt, client);
            Event::Delete(K::tombstone(bad.metadata, dt))
        }
        Event::Delete(DeserializeGuard(Ok(k))) => Event::Delete(ok(k)),
        Event::Delete(DeserializeGuard(Err(bad))) => Event::Delete(K::tombstone(bad.metadata, dt)),
    })
}

/// Object versions reported already (kind, uid, resourceVersion): several watches of one
/// kind see the same object, and a relist sees it again.
static REPORTED: LazyLock<Mutex<HashSet<(String, String, String)>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// Whether the malformed version (`kind`, `uid`, `rv`) is reported for the first time.
fn first_report(kind: &str, uid: &str, rv: &str) -> bool {
    let mut seen = REPORTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.len() >= REPORTED_CAP {
        seen.clear();
    }
    seen.insert((kind.to_owned(), uid.to_owned(), rv.to_owned()))
}

/// Reports a malformed object: log, metric and a Warning Event (once per version).
fn report<K: Watched>(bad: &InvalidObject, dt: &K::DynamicType, client: &kube::Client) {
    let kind = K::kind(dt).into_owned();
    let meta = &bad.metadata;
    let (uid, rv) = (
        meta.uid.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
    );
    if !first_report(&kind, &uid, &rv) {
        return;
    }
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta.namespace.clone();
    tracing::warn!(
        kind,
        name,
        namespace = namespace.as_deref().unwrap_or_default(),
        error = %bad.error,
        "skipping a watched object that does not deserialize"
    );
    metrics::malformed_object(&kind);
    let regarding = ObjectReference {
        api_version: Some(K::api_version(dt).into_owned()),
        kind: Some(kind),
        name: Some(name),
        namespace,
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..ObjectReference::default()
    };
    let note = format!(
        "terrace ignores this object until it is fixed: it does not match its schema ({})",
        bad.error
    );
    let client = client.clone();
    // Reporting must not hold up the watch.
    tokio::spawn(async move {
        let recorder = new_recorder(&client);
        publish_event(
            &recorder,
            &regarding,
            EventType::Warning,
            REASON_MALFORMED_OBJECT,
            "Watch",
            note,
        )
        .await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn guard<K: Watched>(v: serde_json::Value) -> DeserializeGuard<K> {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("not even metadata: {e}"))
    }

    fn workspace(name: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "terrace.dev/v1alpha1", "kind": "Workspace",
            "metadata": {"name": name, "namespace": "acme", "uid": format!("u-{name}"),
                "resourceVersion": "7",
                "annotations": {LAST_APPLIED: "{}", "keep": "me"},
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": spec,
        })
    }

    fn name_of<K: Resource>(ev: &Event<K>) -> Option<(&'static str, String)> {
        let (what, k) = match ev {
            Event::InitApply(k) => ("init-apply", k),
            Event::Apply(k) => ("apply", k),
            Event::Delete(k) => ("delete", k),
            _ => return None,
        };
        Some((what, k.meta().name.clone().unwrap_or_default()))
    }

    /// Copies kube-runtime's DeserializeGuard: a well-formed object passes trimmed; a
    /// malformed one is skipped in a list and becomes a deletion of its cache entry in a
    /// watch; a deletion of a malformed object still deletes.
    #[tokio::test]
    async fn malformed_objects_are_skipped_or_removed() {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().unwrap_or_default(),
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let good = guard::<Workspace>(workspace("good", json!({"name": "web"})));
        let bad = guard::<Workspace>(workspace("bad", json!({"name": 42})));
        assert!(good.0.is_ok() && bad.0.is_err());

        let ev = unguard(Event::InitApply(good.clone()), &(), &client);
        assert_eq!(
            ev.as_ref().and_then(name_of),
            Some(("init-apply", "good".into()))
        );
        if let Some(Event::InitApply(ws)) = &ev {
            assert_eq!(ws.metadata.managed_fields, None);
            assert_eq!(
                ws.metadata.annotations,
                Some(BTreeMap::from([("keep".to_owned(), "me".to_owned())]))
            );
        }
        assert!(unguard(Event::InitApply(bad.clone()), &(), &client).is_none());
        let ev = unguard(Event::Apply(bad.clone()), &(), &client);
        assert_eq!(
            ev.as_ref().and_then(name_of),
            Some(("delete", "bad".into()))
        );
        let ev = unguard(Event::Delete(bad), &(), &client);
        assert_eq!(
            ev.as_ref().and_then(name_of),
            Some(("delete", "bad".into()))
        );
        assert!(matches!(
            unguard(Event::<DeserializeGuard<Workspace>>::InitDone, &(), &client),
            Some(Event::InitDone)
        ));
    }

    /// Each malformed version is reported once, however many watches see it.
    #[test]
    fn reports_are_once_per_version() {
        assert!(first_report("Workspace", "u-once", "1"));
        assert!(!first_report("Workspace", "u-once", "1"));
        assert!(first_report("Workspace", "u-once", "2"));
    }
}
