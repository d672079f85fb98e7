//! The catalog controllers: the controller of every namespaced terrace kind that has no
//! controller of its own (Project, RegistryModule, ConfigurationVersion, TestVariable,
//! WorkspaceVariable, SshKey, AgentPool, OAuthToken), plus the IDs of TestRuns. One small controller per
//! kind, over `DynamicObject`, all prepared by [`Catalog::controllers`].
//!
//! Each gives its objects their identity ([`crate::identity::ensure_identity`]: the
//! `terrace.dev/id` and organization labels, `status.id`) and, for every kind but TestRun
//! (whose controller writes its own), the kstatus conditions: `Ready` once the object has
//! its ID, an Organization owns its namespace and what it depends on resolved (a
//! TestVariable's module, a ConfigurationVersion's upload); `Reconciling` while waiting
//! for something that happens by itself; `Stalled` when only a change can help (see
//! [`outcome::derive_outcome`]). `status.id`, `status.observedGeneration` and
//! `status.conditions` are server-side applied under the operator's field manager, so
//! fields other writers own (the API server's upload state, a variable's version ID) are
//! left alone, and only when they differ from what is stored. Besides their own kind, the
//! controllers react to Organizations (a namespace gaining its organization) and, for
//! TestVariables, to RegistryModules (the module appearing).
//!
//! Each kind is watched once, through a [`Feed`]: its cache ([`CatalogStores`]) is the
//! operator's view of the kind. The Workspace controller reads Projects from it and
//! test-run admission reads configuration versions, modules and test variables, so none
//! of them lists or gets these kinds per reconcile; they follow changes through
//! [`Catalog::subscribe`], which wakes them only once the cache shows the change.

pub mod outcome;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use terrace_crds::constants::{FIELD_MANAGER_OPERATOR, LABEL_ID};
use terrace_crds::ids::{IdKind, is_valid_id};
use terrace_crds::{
    AgentPool, ConfigurationVersion, ModuleVersion, NotificationConfiguration, OAuthToken,
    Organization, Policy, PolicySet, Project, RegistryModule, Run, SshKey, TestRun, TestVariable,
    VariableSet, WorkspaceVariable,
};

use crate::conditions::{Outcome, REASON_ASSIGNING_ID, kstatus_conditions};
use crate::events::record_stall_transition;
use crate::identity::{IdTarget, Organizations, ensure_identity, synced};
use crate::watch::Feed;
use crate::{Context, Error, metrics, rules};
use outcome::{
    ConditionPolicy, ModuleLookup, ORPHAN_RECHECK, Observed, StoredStatus, Upload,
    affected_by_organization, derive_outcome, recheck_after, status_apply_body,
    variables_of_module,
};

/// A kind of the catalog: its identity and what its controller reports.
#[derive(Clone, Debug)]
pub struct Target {
    pub id: IdTarget,
    pub conditions: ConditionPolicy,
}

/// The catalog's kinds: every namespaced terrace kind except Workspace.
pub fn targets() -> Vec<Target> {
    use ConditionPolicy::{External, Identity, Module, Upload};
    let t = |id: IdTarget, conditions| Target { id, conditions };
    vec![
        t(IdTarget::of::<Project>(IdKind::Project), Identity),
        t(
            IdTarget::of::<RegistryModule>(IdKind::RegistryModule),
            Identity,
        ),
        t(
            IdTarget::of::<ConfigurationVersion>(IdKind::ConfigurationVersion),
            Upload,
        ),
        t(IdTarget::of::<TestRun>(IdKind::TestRun), External),
        t(IdTarget::of::<Run>(IdKind::Run), External),
        t(IdTarget::of::<TestVariable>(IdKind::TestVariable), Module),
        t(
            IdTarget::of::<WorkspaceVariable>(IdKind::WorkspaceVariable),
            Identity,
        ),
        t(IdTarget::of::<SshKey>(IdKind::SshKey), Identity),
        t(IdTarget::of::<AgentPool>(IdKind::AgentPool), Identity),
        t(IdTarget::of::<OAuthToken>(IdKind::OAuthToken), Identity),
        t(IdTarget::of::<VariableSet>(IdKind::VariableSet), Identity),
        t(
            IdTarget::of::<NotificationConfiguration>(IdKind::NotificationConfiguration),
            Identity,
        ),
        t(
            IdTarget::of::<ModuleVersion>(IdKind::ModuleVersion),
            Identity,
        ),
        // Its own controller (policy_sets.rs) says whether its Rego compiles.
        t(IdTarget::of::<PolicySet>(IdKind::PolicySet), External),
        t(IdTarget::of::<Policy>(IdKind::Policy), Identity),
    ]
}

/// What a controller that reads only the catalog's caches shares between its reconciles
/// (module versions, policy sets).
pub struct WithStores {
    pub base: Arc<Context>,
    pub stores: CatalogStores,
}

/// The catalog controllers' caches, one per kind (trimmed objects, see [`crate::watch`]),
/// for every controller of the operator to read.
#[derive(Clone)]
pub struct CatalogStores {
    stores: HashMap<IdKind, (ApiResource, Store<DynamicObject>)>,
    /// Each kind's objects by ID, kept by its feed with the cache.
    ids: HashMap<IdKind, crate::identity::IdIndex<DynamicObject>>,
    /// Each kind's objects by namespace, kept the same way (one group per namespace).
    namespaces: HashMap<IdKind, crate::group_index::GroupIndex<DynamicObject>>,
}

impl CatalogStores {
    fn entry(&self, kind: IdKind) -> Result<&(ApiResource, Store<DynamicObject>), Error> {
        self.stores
            .get(&kind)
            .ok_or_else(|| Error::Unavailable(format!("no cache of {kind:?}")))
    }

    /// The cache of `kind` and the resource it holds.
    pub fn store(&self, kind: IdKind) -> Result<(ApiResource, Store<DynamicObject>), Error> {
        self.entry(kind).cloned()
    }

    /// Who carries which ID among `kind`'s cached objects.
    pub fn ids(&self, kind: IdKind) -> Result<crate::identity::IdIndex<DynamicObject>, Error> {
        self.ids
            .get(&kind)
            .cloned()
            .ok_or_else(|| Error::Unavailable(format!("no cache of {kind:?}")))
    }

    /// Waits (boundedly) for the first list of `kind`'s cache.
    pub async fn synced(&self, kind: IdKind) -> Result<(), Error> {
        let (ar, store) = self.entry(kind)?;
        synced(store, &ar.kind).await
    }

    /// The cached object `ns/name` of `kind`.
    pub fn get(&self, kind: IdKind, ns: &str, name: &str) -> Option<Arc<DynamicObject>> {
        let (ar, store) = self.entry(kind).ok()?;
        store.get(&ObjectRef::new_with(name, ar.clone()).within(ns))
    }

    /// How many cached objects of `kind` have a `status.status` in `statuses`: in all,
    /// and per namespace (the runs and test runs holding a concurrency slot, which the two
    /// controllers share). Health assessments are not counted.
    pub fn count_in_status(
        &self,
        kind: IdKind,
        statuses: &[&str],
    ) -> (usize, HashMap<String, usize>) {
        let mut per_ns: HashMap<String, usize> = HashMap::new();
        let Ok((_, store)) = self.entry(kind) else {
            return (0, per_ns);
        };
        let mut all = 0;
        for o in store.state() {
            // Health assessments take only the capacity runs and test runs leave: they
            // hold no slot of these limits (docs/health.md).
            if o.data.pointer("/spec/assessment") == Some(&Value::Bool(true)) {
                continue;
            }
            let status = o.data.pointer("/status/status").and_then(|s| s.as_str());
            if status.is_some_and(|s| statuses.contains(&s)) {
                all += 1;
                *per_ns
                    .entry(o.metadata.namespace.clone().unwrap_or_default())
                    .or_default() += 1;
            }
        }
        (all, per_ns)
    }

    /// Every cached object of `kind` in namespace `ns`: a lookup of the namespace's
    /// objects, not a scan of the kind's.
    pub fn in_namespace(&self, kind: IdKind, ns: &str) -> Vec<Arc<DynamicObject>> {
        let (Ok((ar, store)), Some(index)) = (self.entry(kind), self.namespaces.get(&kind)) else {
            return Vec::new();
        };
        index
            .members(ns, "")
            .iter()
            .filter_map(|name| store.get(&ObjectRef::new_with(name, ar.clone()).within(ns)))
            .collect()
    }
}

/// `obj` as the typed resource `K`; None (logged) when it does not deserialize, which
/// the guarded watch (see [`crate::watch`]) already reported.
pub fn typed<K: DeserializeOwned>(obj: &DynamicObject) -> Option<K> {
    let converted = serde_json::to_value(obj).and_then(serde_json::from_value);
    match converted {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::debug!(error = %e, name = %obj.name_any(), "cached object is not of its kind");
            None
        }
    }
}

/// The catalog's feeds and caches, before its controllers run.
pub struct Catalog {
    stores: CatalogStores,
    feeds: Vec<(Target, Feed<DynamicObject>)>,
}

/// A controller over one kind of the catalog ([`Catalog::controller`]).
pub struct Fed {
    pub controller: Controller<DynamicObject>,
    pub store: Store<DynamicObject>,
    pub resource: ApiResource,
}

impl Catalog {
    /// A feed and an (empty) cache for every kind of [`targets`].
    pub fn new(client: &kube::Client) -> Self {
        let mut stores = HashMap::new();
        let mut ids = HashMap::new();
        let mut namespaces = HashMap::new();
        let mut feeds = Vec::new();
        for target in targets() {
            let resource = target.id.resource.clone();
            let mut feed = Feed::new(client, resource.clone(), watcher::Config::default());
            let index = crate::identity::IdIndex::new(feed.store(), resource.clone());
            feed.observe(index.observer());
            let in_ns =
                crate::group_index::GroupIndex::new(|_: &DynamicObject| Some(String::new()));
            let observer = in_ns.clone();
            feed.observe(move |ev| observer.observe(ev));
            stores.insert(target.id.kind, (resource, feed.store()));
            ids.insert(target.id.kind, index);
            namespaces.insert(target.id.kind, in_ns);
            feeds.push((target, feed));
        }
        Self {
            stores: CatalogStores {
                stores,
                ids,
                namespaces,
            },
            feeds,
        }
    }

    /// A controller over `kind`'s feed (woken by each change its cache shows), with the
    /// kind's cache and resource for the maps of its `watches_stream_with`.
    pub fn controller(&mut self, kind: IdKind) -> Result<Fed, Error> {
        let (resource, store) = self.stores.store(kind)?;
        let changes = self.subscribe(kind);
        Ok(Fed {
            controller: Controller::for_stream_with(changes, store.clone(), resource.clone()),
            store,
            resource,
        })
    }

    /// The caches (empty until the controllers run and list each kind).
    pub fn stores(&self) -> CatalogStores {
        self.stores.clone()
    }

    /// Every object of `kind` the catalog's watch applies or deletes, once its cache shows
    /// it (see [`Feed::subscribe`]); a kind outside the catalog yields nothing.
    pub fn subscribe(
        &mut self,
        kind: IdKind,
    ) -> impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static + use<> {
        match self.feeds.iter_mut().find(|(t, _)| t.id.kind == kind) {
            Some((_, feed)) => Either::Left(feed.subscribe()),
            None => Either::Right(futures::stream::empty()),
        }
    }

    /// Calls `observer` with every event of `kind`'s watch after its cache applied it
    /// (for secondary indexes; see [`Feed::observe`]).
    pub fn observe(
        &mut self,
        kind: IdKind,
        observer: impl FnMut(&kube::runtime::watcher::Event<DynamicObject>) + Send + 'static,
    ) {
        if let Some((_, feed)) = self.feeds.iter_mut().find(|(t, _)| t.id.kind == kind) {
            feed.observe(observer);
        }
    }

    /// The controllers of every kind, run until `shutdown` resolves. Each follows the
    /// Organizations of `organizations` (subscribed here, so call this before that feed
    /// runs) and TestVariables follow the RegistryModule feed.
    pub fn controllers<S>(
        mut self,
        ctx: Arc<Context>,
        orgs: Organizations,
        organizations: &mut Feed<Organization>,
        shutdown: S,
    ) -> impl Future<Output = ()> + Send + 'static + use<S>
    where
        S: Future<Output = ()> + Clone + Send + Sync + 'static,
    {
        let recorder = crate::events::new_recorder(&ctx.client);
        let modules = self.subscribe(IdKind::RegistryModule);
        let mut modules = Some(modules);
        let stores = self.stores;
        let controllers: Vec<_> = self
            .feeds
            .into_iter()
            .map(|(target, feed)| {
                let resource = target.id.resource.clone();
                let store = feed.store();
                let mut controller = Controller::for_stream_with(
                    feed.into_stream(),
                    store.clone(),
                    resource.clone(),
                );
                if target.conditions != ConditionPolicy::External {
                    let (store, resource) = (store.clone(), resource.clone());
                    controller = controller.watches_stream(organizations.subscribe(), move |org| {
                        let ns = rules::organization_namespace(&org);
                        affected_by_organization(&store.state(), &resource, ns, &org.name_any())
                    });
                }
                if target.conditions == ConditionPolicy::Module
                    && let Some(modules) = modules.take()
                {
                    let (module_resource, resource) =
                        (ApiResource::erase::<RegistryModule>(&()), resource.clone());
                    controller = controller.watches_stream_with(
                        modules,
                        move |module| match typed::<RegistryModule>(&module) {
                            Some(module) => variables_of_module(&store.state(), &resource, &module),
                            None => Vec::new(),
                        },
                        module_resource,
                    );
                }
                let kind = resource.kind.clone();
                let cctx = Arc::new(CatalogContext {
                    base: ctx.clone(),
                    orgs: orgs.clone(),
                    recorder: recorder.clone(),
                    stores: stores.clone(),
                    target,
                });
                crate::metrics::bounded(controller)
                    .graceful_shutdown_on(shutdown.clone())
                    .run(
                        |obj, ctx| {
                            metrics::instrument(
                                metrics::CONTROLLER_CATALOG,
                                obj.as_ref(),
                                reconcile(obj.clone(), ctx),
                            )
                        },
                        error_policy,
                        cctx,
                    )
                    .for_each(move |res| {
                        let kind = kind.clone();
                        async move {
                            if let Err(e) = res {
                                tracing::debug!(error = %e, kind, "catalog reconcile");
                            }
                        }
                    })
            })
            .collect();
        async move {
            futures::future::join_all(controllers).await;
        }
    }
}

/// State of one catalog controller.
struct CatalogContext {
    base: Arc<Context>,
    orgs: Organizations,
    recorder: Recorder,
    stores: CatalogStores,
    target: Target,
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<CatalogContext>) -> Result<Action, Error> {
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let resource = &ctx.target.id.resource;
    let regarding = obj.object_ref(resource);
    let stored = StoredStatus::of(&obj);
    let policy = ctx.target.conditions;
    let kind = ctx.target.id.kind;
    ctx.stores.synced(kind).await?;
    let carriers = ctx.stores.ids(kind)?;
    let identity = match ensure_identity(
        &ctx.base.client,
        &ctx.orgs,
        &ctx.target.id,
        &carriers,
        obj.meta(),
        stored.id.as_deref(),
        &regarding,
    )
    .await
    {
        Ok(identity) => identity,
        Err(e) => {
            if policy != ConditionPolicy::External && stored.id.is_none() {
                let outcome =
                    Outcome::progressing(REASON_ASSIGNING_ID, format!("assigning an ID: {e}"));
                if let Err(w) = write_conditions(&ctx, &obj, &stored, None, &outcome).await {
                    tracing::debug!(error = %w, "recording AssigningId");
                }
            }
            return Err(e);
        }
    };
    if policy == ConditionPolicy::External {
        if stored.id.as_deref() != Some(identity.id.as_str()) {
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
                ..Default::default()
            };
            let patch = json!({"status": {"id": identity.id}});
            namespaced(&ctx, &obj)
                .patch_status(&obj.name_any(), &pp, &Patch::Merge(&patch))
                .await?;
        }
        return Ok(if identity.organization_found {
            Action::await_change()
        } else {
            Action::requeue(ORPHAN_RECHECK)
        });
    }
    let ns = obj.namespace().unwrap_or_default();
    let module = match policy {
        ConditionPolicy::Module => Some(lookup_module(&ctx.stores, &ns, &obj).await?),
        _ => None,
    };
    let upload = (policy == ConditionPolicy::Upload).then_some(Upload {
        state: stored.status.as_deref(),
        error_message: stored.error_message.as_deref(),
    });
    let outcome = derive_outcome(&Observed {
        kind: &resource.kind,
        namespace: &ns,
        identity: &identity,
        module: module.as_ref(),
        upload,
    });
    write_conditions(&ctx, &obj, &stored, Some(&identity.id), &outcome).await?;
    Ok(match recheck_after(&outcome) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

fn namespaced(ctx: &CatalogContext, obj: &DynamicObject) -> Api<DynamicObject> {
    let ns = obj.namespace().unwrap_or_default();
    Api::namespaced_with(ctx.base.client.clone(), &ns, &ctx.target.id.resource)
}

/// Applies `status.id` (when known), `status.observedGeneration` and the conditions of
/// `outcome`, unless the stored status shows them already; records an Event when the
/// object becomes stalled or recovers.
async fn write_conditions(
    ctx: &CatalogContext,
    obj: &DynamicObject,
    stored: &StoredStatus,
    id: Option<&str>,
    outcome: &Outcome,
) -> Result<(), Error> {
    let generation = obj.meta().generation;
    let conditions = kstatus_conditions(&stored.conditions, outcome, generation, Timestamp::now());
    if stored.shows(id, &conditions, generation) {
        return Ok(());
    }
    let resource = &ctx.target.id.resource;
    let body = status_apply_body(resource, id, &conditions, generation);
    let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
    namespaced(ctx, obj)
        .patch_status(&obj.name_any(), &pp, &Patch::Apply(&body))
        .await?;
    let regarding = obj.object_ref(resource);
    record_stall_transition(&ctx.recorder, &regarding, &stored.conditions, &conditions).await;
    Ok(())
}

/// Looks up, in the RegistryModule cache, the module a TestVariable names in
/// `spec.module`.
async fn lookup_module(
    stores: &CatalogStores,
    ns: &str,
    obj: &DynamicObject,
) -> Result<ModuleLookup, Error> {
    let object = obj
        .data
        .pointer("/spec/module")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if object.is_empty() {
        return Ok(ModuleLookup::Missing { object });
    }
    stores.synced(IdKind::RegistryModule).await?;
    Ok(match stores.get(IdKind::RegistryModule, ns, &object) {
        Some(m) => ModuleLookup::Found {
            id: m
                .labels()
                .get(LABEL_ID)
                .filter(|id| is_valid_id(IdKind::RegistryModule, id))
                .cloned(),
            object,
        },
        None => ModuleLookup::Missing { object },
    })
}

fn error_policy(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<CatalogContext>) -> Action {
    let what = format!("catalog ({})", ctx.target.id.resource.kind);
    err.log_and_retry(&what, &obj.name_any(), Duration::from_secs(5))
}
