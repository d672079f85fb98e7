//! Object identity: every namespaced terrace object carries a TFE-shaped ID in its
//! `terrace.dev/id` label and the name of its Organization in `terrace.dev/organization`.
//!
//! The API server creates objects with both labels set; objects applied with kubectl
//! arrive without them, or with an ID the user pinned. [`ensure_identity`] decides
//! (through [`crate::rules::decide_id`]) whether the label is kept, assigned or replaced,
//! and writes the labels with a merge patch carrying `metadata.resourceVersion`: the API
//! server then rejects the write with 409 Conflict if the object changed since it was
//! read, so two operator replicas racing on the same object assign exactly one ID (the
//! loser re-reads and finds it). An object whose `status.id` already shows its label
//! costs no API call at all.
//!
//! The Workspace controller calls it before deriving a workspace's status, the catalog
//! controllers ([`crate::catalog`]) for every other kind. Both answer "which Organization
//! owns this namespace" from [`Organizations`], the Organization controller's cache.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::Organization;
use terrace_crds::constants::{FIELD_MANAGER_OPERATOR, LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id};

use crate::Error;
use crate::events::publish_once;
use crate::group_index::GroupIndex;
use crate::rules::{self, IdDecision, IdHolder, decide_id, owning_organization};

/// Event reason when an ID was assigned.
pub const REASON_ID_ASSIGNED: &str = "IdAssigned";
/// Event reason when a user-set ID label was not a valid ID of the kind.
pub const REASON_INVALID_ID: &str = "InvalidId";
/// Event reason when an object's ID label was already held by another object.
pub const REASON_DUPLICATE_ID: &str = "DuplicateId";

/// How often a write is retried after 409 Conflict before giving up until the next event.
const MAX_CONFLICT_RETRIES: usize = 5;
/// How long a reconcile waits for a cache's first list.
const CACHE_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits (boundedly) until `store` has its first list: before that an empty store would
/// read as "nothing exists".
pub async fn synced<K>(store: &Store<K>, what: &str) -> Result<(), Error>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    match tokio::time::timeout(CACHE_TIMEOUT, store.wait_until_ready()).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(Error::Unavailable(format!("the {what} cache is not ready"))),
    }
}

/// An in-memory view of every Organization (the Organization controller's cache),
/// answering "which organization owns this namespace" without an API call per reconcile.
#[derive(Clone)]
pub struct Organizations {
    store: Store<Organization>,
}

impl Organizations {
    /// The view over `store`, kept current by whoever drives its reflector.
    pub fn new(store: Store<Organization>) -> Self {
        Self { store }
    }

    /// The Organization owning namespace `ns`, once the first list arrived.
    pub async fn owner(&self, ns: &str) -> Result<Option<Arc<Organization>>, Error> {
        synced(&self.store, "organization").await?;
        let all = self.store.state();
        let owner = owning_organization(all.iter().map(Arc::as_ref), ns);
        Ok(owner.and_then(|o| all.iter().find(|a| std::ptr::eq(a.as_ref(), o)).cloned()))
    }

    /// The name of the Organization owning namespace `ns`, once the first list arrived.
    pub async fn owner_of(&self, ns: &str) -> Result<Option<String>, Error> {
        Ok(self.owner(ns).await?.map(|o| o.name_any()))
    }

    /// The cached Organizations.
    pub fn store(&self) -> &Store<Organization> {
        &self.store
    }
}

/// A kind whose objects get IDs.
#[derive(Clone, Debug)]
pub struct IdTarget {
    pub resource: ApiResource,
    pub kind: IdKind,
}

impl IdTarget {
    /// The target for the typed resource `K`.
    pub fn of<K: Resource<DynamicType = ()>>(kind: IdKind) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            kind,
        }
    }
}

/// An object's identity after [`ensure_identity`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The object's ID (its `terrace.dev/id` label).
    pub id: String,
    /// The owning Organization's name, when an Organization owns the namespace (or,
    /// failing that, the object's existing `terrace.dev/organization` label).
    pub organization: Option<String>,
    /// Whether an Organization owning the namespace was found.
    pub organization_found: bool,
}

/// Makes sure the object described by `meta` (of `target`'s kind) has a valid ID label
/// and the label of the Organization owning its namespace, writing them when needed, and
/// returns them. `status_id` is the object's `status.id`: until it equals the label, the
/// ID is checked for uniqueness across the kind, in `carriers` (the kind's synced cache). Records `IdAssigned` (and `InvalidId` /
/// `DuplicateId` for a replaced label) events on `regarding`.
#[allow(clippy::too_many_arguments)]
pub async fn ensure_identity(
    client: &kube::Client,
    orgs: &Organizations,
    target: &IdTarget,
    carriers: &(dyn IdCarriers + Sync),
    meta: &ObjectMeta,
    status_id: Option<&str>,
    regarding: &ObjectReference,
) -> Result<Identity, Error> {
    let ns = meta
        .namespace
        .as_deref()
        .ok_or_else(|| Error::Invalid("object has no namespace".into()))?;
    let name = meta
        .name
        .as_deref()
        .ok_or_else(|| Error::Invalid("object has no name".into()))?;
    let owner = orgs.owner_of(ns).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &target.resource);
    let mut meta = meta.clone();
    for _ in 0..MAX_CONFLICT_RETRIES {
        let labels = meta.labels.clone().unwrap_or_default();
        let mut decision = decide_id(target.kind, labels.get(LABEL_ID).map(String::as_str));
        if let IdDecision::Keep(id) = &decision
            && status_id != Some(id.as_str())
            && held_elsewhere(carriers, &meta, id)
        {
            decision = IdDecision::Taken { id: id.clone() };
        }
        let id = match &decision {
            IdDecision::Keep(id) => id.clone(),
            IdDecision::Assign | IdDecision::Replace { .. } | IdDecision::Taken { .. } => {
                new_id(target.kind)
            }
        };
        let mut patch_labels = BTreeMap::new();
        if !matches!(decision, IdDecision::Keep(_)) {
            patch_labels.insert(LABEL_ID, id.clone());
        }
        if let Some(org) = &owner
            && labels.get(LABEL_ORGANIZATION) != Some(org)
        {
            patch_labels.insert(LABEL_ORGANIZATION, org.clone());
        }
        let identity = Identity {
            id: id.clone(),
            organization: owner
                .clone()
                .or_else(|| labels.get(LABEL_ORGANIZATION).cloned()),
            organization_found: owner.is_some(),
        };
        if patch_labels.is_empty() {
            return Ok(identity);
        }
        let rv = meta
            .resource_version
            .clone()
            .ok_or_else(|| Error::Invalid("object has no resourceVersion".into()))?;
        let patch = json!({"metadata": {"resourceVersion": rv, "labels": patch_labels}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
            ..Default::default()
        };
        match api.patch(name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {
                record_assignment(client, regarding, target.kind, &decision, &id).await;
                return Ok(identity);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Someone else wrote the object since we read it (maybe another replica
                // assigned the ID): decide again on what is stored now.
                meta = api.get(name).await?.metadata;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Conflict(format!(
        "{ns}/{name}: labels kept changing"
    )))
}

/// An object of one kind that carries an ID label, as the operator's cache shows it.
pub struct Carrier {
    pub uid: String,
    /// `namespace/name`.
    pub object: String,
    pub created: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Its `status.id` is the ID (confirmed by an earlier reconcile).
    pub confirmed: bool,
}

impl Carrier {
    fn of(meta: &ObjectMeta, status_id: Option<&str>, id: &str) -> Carrier {
        Carrier {
            uid: meta.uid.clone().unwrap_or_default(),
            object: object_key(meta),
            created: meta.creation_timestamp.clone(),
            confirmed: status_id == Some(id),
        }
    }
}

/// The objects of a kind carrying an ID, from a synced cache of the kind: no request
/// to the API server, so checking a new object's ID costs the same however large the
/// cluster (a label-selector LIST made a real API server read every object of the kind
/// from etcd, for every new object).
pub trait IdCarriers {
    fn carriers(&self, id: &str) -> Vec<Carrier>;
}

fn carries(meta: &ObjectMeta, id: &str) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ID))
        .is_some_and(|v| v == id)
}

/// An object's `status.id`, where its kind keeps it.
pub trait StatusId {
    fn status_id(&self) -> Option<&str>;
}

impl StatusId for DynamicObject {
    fn status_id(&self) -> Option<&str> {
        self.data.pointer("/status/id").and_then(Value::as_str)
    }
}

impl StatusId for terrace_crds::Workspace {
    fn status_id(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.id.as_deref())
    }
}

/// The objects of a kind by their ID label, beside the kind's cache: who carries an ID is
/// a lookup, so a new object's ID check costs the same at 100 or 100,000 objects (it
/// scanned the whole cache: the operator's CPU per workspace create grew with the
/// cluster, issue 43).
pub struct IdIndex<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + std::hash::Hash,
{
    store: Store<K>,
    ids: GroupIndex<K>,
    dt: K::DynamicType,
}

impl<K> IdIndex<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    /// The index of `store`'s objects, kept by `observe` on the feed that fills it.
    pub fn new(store: Store<K>, dt: K::DynamicType) -> Self {
        Self {
            store,
            ids: GroupIndex::new(|o: &K| o.meta().labels.as_ref()?.get(LABEL_ID).cloned()),
            dt,
        }
    }

    /// The index's hook on the feed (see [`crate::watch::Feed::observe`]).
    pub fn observer(&self) -> impl FnMut(&kube::runtime::watcher::Event<K>) + Send + 'static
    where
        K: Send,
    {
        let ids = self.ids.clone();
        move |ev| ids.observe(ev)
    }
}

impl<K> Clone for IdIndex<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            ids: self.ids.clone(),
            dt: self.dt.clone(),
        }
    }
}

impl<K> IdCarriers for IdIndex<K>
where
    K: Resource + StatusId + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    fn carriers(&self, id: &str) -> Vec<Carrier> {
        self.ids
            .members_anywhere(id)
            .into_iter()
            .filter_map(|(ns, name)| {
                self.store
                    .get(&ObjectRef::new_with(&name, self.dt.clone()).within(&ns))
            })
            .filter(|o| carries(o.meta(), id))
            .map(|o| Carrier::of(o.meta(), o.status_id(), id))
            .collect()
    }
}

/// Whether another object of the kind holds `id` in a way that makes this one
/// (described by `meta`) yield it (see [`rules::must_yield_id`]). The watch delivers
/// objects in order, so an object created before this one is in the cache by now.
fn held_elsewhere(carriers: &dyn IdCarriers, meta: &ObjectMeta, id: &str) -> bool {
    let found = carriers.carriers(id);
    let others: Vec<IdHolder<'_>> = found
        .iter()
        .map(|c| IdHolder {
            uid: &c.uid,
            object: &c.object,
            created: c.created.as_ref(),
            confirmed: c.confirmed,
        })
        .collect();
    let (my_uid, my_object) = (meta.uid.clone().unwrap_or_default(), object_key(meta));
    let me = IdHolder {
        uid: &my_uid,
        object: &my_object,
        created: meta.creation_timestamp.as_ref(),
        confirmed: false,
    };
    rules::must_yield_id(me, &others)
}

fn object_key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

async fn record_assignment(
    client: &kube::Client,
    regarding: &ObjectReference,
    kind: IdKind,
    decision: &IdDecision,
    id: &str,
) {
    let what = regarding.kind.as_deref().unwrap_or("object");
    let (type_, reason, note) = match decision {
        IdDecision::Keep(_) => return,
        IdDecision::Assign => (
            EventType::Normal,
            REASON_ID_ASSIGNED,
            format!("assigned ID {id}"),
        ),
        IdDecision::Replace { invalid } => (
            EventType::Warning,
            REASON_INVALID_ID,
            format!(
                "label {LABEL_ID}={invalid:?} is not a valid {what} ID (expected {}<16 letters or digits>); replaced with {id}",
                kind.prefix()
            ),
        ),
        IdDecision::Taken { id: taken } => (
            EventType::Warning,
            REASON_DUPLICATE_ID,
            format!(
                "ID {taken} in label {LABEL_ID} is already used by another {what}; replaced with {id}"
            ),
        ),
    };
    // An object gets its ID (or has its label replaced) once: no series to count.
    publish_once(client, regarding, type_, reason, "AssignId", note).await;
}
