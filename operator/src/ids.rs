//! ID assignment: every namespaced terrace object carries a TFE-shaped ID in its
//! `terrace.dev/id` label and the name of its Organization in `terrace.dev/organization`.
//!
//! The API server creates objects with both labels set; objects applied with kubectl
//! arrive without them, or with an ID the user pinned. This module decides (through
//! [`crate::rules::decide_id`]) whether the label is kept, assigned or replaced, and writes
//! the labels with a merge patch carrying `metadata.resourceVersion`: the API server then
//! rejects the write with 409 Conflict if the object changed since it was read, so two
//! operator replicas racing on the same object assign exactly one ID (the loser re-reads
//! and finds it). `status.id` mirrors the label.
//!
//! Workspaces get their ID from the Workspace controller (it calls [`ensure_identity`]
//! before deriving its status); every other kind goes through the small controllers that
//! [`run`] starts, one per kind, over `DynamicObject` so a malformed spec cannot stop them.
//!
//! Those controllers also own the kstatus conditions of the kinds no other controller
//! reports on (every kind but TestRun, whose controller writes its own): `Ready` once the
//! object has its ID, an Organization owns its namespace and what it depends on resolved
//! (a TestVariable's module, a ConfigurationVersion's upload); `Reconciling` while waiting
//! for something that happens by itself; `Stalled` when only a change can help (see
//! [`derive_outcome`]). `status.id`, `status.observedGeneration` and `status.conditions`
//! are server-side applied under the operator's field manager, so fields other writers own
//! (the API server's upload state, a variable's version ID) are left alone, and only when
//! they differ from what is stored: every object of these kinds passes through here. Besides
//! their own kind, the controllers react to Organizations (a namespace gaining its
//! organization) and, for TestVariables, to RegistryModules (the module appearing).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use terrace_crds::constants::{
    CONDITION_READY, FIELD_MANAGER_OPERATOR, LABEL_ID, LABEL_ORGANIZATION,
};
use terrace_crds::ids::{IdKind, is_valid_id, new_id};
use terrace_crds::{
    AgentPool, ConfigurationVersion, OAuthToken, Organization, Project, RegistryModule, SshKey,
    TestRun, TestVariable,
};

use crate::conditions::{
    self, Outcome, REASON_ASSIGNING_ID, REASON_MODULE_NOT_FOUND, REASON_RECOVERED,
    REASON_UPLOAD_ERRORED, REASON_WAITING_FOR_MODULE, REASON_WAITING_FOR_UPLOAD, StallTransition,
    kstatus_conditions, stall_transition,
};
use crate::rules::{self, IdDecision, IdHolder, decide_id, owning_organization};
use crate::workspace::REASON_ORGANIZATION_NOT_FOUND;
use crate::{Context, Error, metrics, publish_event};

/// Event reason when an ID was assigned.
pub const REASON_ID_ASSIGNED: &str = "IdAssigned";
/// Event reason when a user-set ID label was not a valid ID of the kind.
pub const REASON_INVALID_ID: &str = "InvalidId";
/// Event reason when an object's ID label was already held by another object.
pub const REASON_DUPLICATE_ID: &str = "DuplicateId";

/// How often a write is retried after 409 Conflict before giving up until the next event.
const MAX_CONFLICT_RETRIES: usize = 5;
/// How long a reconcile waits for the Organization cache's first list.
const ORG_CACHE_TIMEOUT: Duration = Duration::from_secs(30);
/// Recheck interval of objects in a namespace no Organization owns (yet). Organization
/// events trigger a recheck at once; this catches the Organization cache lagging behind
/// the watch that triggered it.
const ORPHAN_RECHECK: Duration = Duration::from_secs(15);
/// Recheck interval of objects waiting for something that happens by itself.
const PROGRESS_RECHECK: Duration = Duration::from_secs(5);
/// Recheck interval of TestVariables naming a missing module (module events trigger a
/// recheck at once).
const MISSING_MODULE_RECHECK: Duration = Duration::from_secs(60);

/// An in-memory view of every Organization, kept current by a watch, answering "which
/// organization owns this namespace" without an API call per reconcile.
#[derive(Clone)]
pub struct Organizations {
    store: Store<Organization>,
}

impl Organizations {
    /// The index and the future that keeps it current (run it until shutdown).
    pub fn new(client: kube::Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let api: Api<Organization> = Api::all(client);
        let driver = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .for_each(|ev| async move {
                if let Err(e) = ev {
                    tracing::debug!(error = %e, "organization watch");
                }
            });
        (Self { store }, driver)
    }

    /// The name of the Organization owning namespace `ns`, once the first list arrived.
    pub async fn owner_of(&self, ns: &str) -> Result<Option<String>, Error> {
        match tokio::time::timeout(ORG_CACHE_TIMEOUT, self.store.wait_until_ready()).await {
            Ok(Ok(())) => {}
            _ => return Err(Error::Unavailable("organization cache is not ready".into())),
        }
        let all = self.store.state();
        Ok(owning_organization(all.iter().map(Arc::as_ref), ns).map(ResourceExt::name_any))
    }

    /// The cached Organizations.
    pub fn store(&self) -> &Store<Organization> {
        &self.store
    }
}

/// What the generic controller reports in a kind's status besides `status.id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionPolicy {
    /// Another controller owns the kind's conditions (TestRun): `status.id` only.
    External,
    /// Ready once the object has its ID and an Organization owns its namespace.
    Identity,
    /// As [`ConditionPolicy::Identity`], and the RegistryModule named in `spec.module`
    /// exists with an ID (TestVariable).
    Module,
    /// As [`ConditionPolicy::Identity`], following the upload state the API server
    /// writes in `status.status` (ConfigurationVersion).
    Upload,
}

/// A kind whose objects get IDs, as the generic controller sees it.
#[derive(Clone, Debug)]
pub struct IdTarget {
    pub resource: ApiResource,
    pub kind: IdKind,
    pub conditions: ConditionPolicy,
}

impl IdTarget {
    /// The target for the typed resource `K`, whose conditions another controller owns.
    pub fn of<K: Resource<DynamicType = ()>>(kind: IdKind) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            kind,
            conditions: ConditionPolicy::External,
        }
    }

    /// The same target with the ID controller reporting conditions under `policy`.
    pub fn with_conditions(mut self, policy: ConditionPolicy) -> Self {
        self.conditions = policy;
        self
    }
}

/// The kinds [`run`] assigns IDs to: every namespaced terrace kind except Workspace.
pub fn targets() -> Vec<IdTarget> {
    use ConditionPolicy::{Identity, Module, Upload};
    vec![
        IdTarget::of::<Project>(IdKind::Project).with_conditions(Identity),
        IdTarget::of::<RegistryModule>(IdKind::RegistryModule).with_conditions(Identity),
        IdTarget::of::<ConfigurationVersion>(IdKind::ConfigurationVersion).with_conditions(Upload),
        IdTarget::of::<TestRun>(IdKind::TestRun),
        IdTarget::of::<TestVariable>(IdKind::TestVariable).with_conditions(Module),
        IdTarget::of::<SshKey>(IdKind::SshKey).with_conditions(Identity),
        IdTarget::of::<AgentPool>(IdKind::AgentPool).with_conditions(Identity),
        IdTarget::of::<OAuthToken>(IdKind::OAuthToken).with_conditions(Identity),
    ]
}

/// What a TestVariable's `spec.module` turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleLookup {
    /// The RegistryModule exists; `id` is its ID label when that is a valid module ID.
    Found { object: String, id: Option<String> },
    /// No RegistryModule of that name in the namespace.
    Missing { object: String },
}

/// The upload state the API server keeps in a ConfigurationVersion's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Upload<'a> {
    /// `status.status`: pending, uploaded, errored or archived (absent before the API
    /// server's first write, or for a ConfigurationVersion applied with kubectl).
    pub state: Option<&'a str>,
    /// `status.errorMessage`.
    pub error_message: Option<&'a str>,
}

/// What one reconcile found about an object, as [`derive_outcome`] needs it.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    /// The object's kind (`Project`, `TestVariable`…), for messages.
    pub kind: &'a str,
    /// The object's namespace.
    pub namespace: &'a str,
    /// The object's identity after [`ensure_identity`].
    pub identity: &'a Identity,
    /// A TestVariable's module ([`ConditionPolicy::Module`]).
    pub module: Option<&'a ModuleLookup>,
    /// A ConfigurationVersion's upload state ([`ConditionPolicy::Upload`]).
    pub upload: Option<Upload<'a>>,
}

/// The kstatus outcome of an object of the generic controller's kinds. Pure.
///
/// In order: no Organization owning the namespace stalls it (`OrganizationNotFound`);
/// a TestVariable whose module does not exist stalls (`ModuleNotFound`) and one whose
/// module has no ID yet is reconciling (`WaitingForModule`); a ConfigurationVersion is
/// reconciling until its archive is uploaded (`WaitingForUpload`), stalled when the upload
/// errored (`UploadErrored`, with the API server's error message) and Ready once uploaded
/// (or archived); everything else with an ID is Ready (`Reconciled`).
pub fn derive_outcome(o: &Observed<'_>) -> Outcome {
    let (kind, ns, id) = (o.kind, o.namespace, o.identity.id.as_str());
    if !o.identity.organization_found {
        return Outcome::stalled(
            REASON_ORGANIZATION_NOT_FOUND,
            format!("no Organization owns namespace {ns}"),
        );
    }
    let org = o.identity.organization.as_deref().unwrap_or_default();
    match o.module {
        Some(ModuleLookup::Missing { object }) => {
            return Outcome::stalled(
                REASON_MODULE_NOT_FOUND,
                format!("RegistryModule {object:?} not found in namespace {ns}"),
            );
        }
        Some(ModuleLookup::Found { object, id: None }) => {
            return Outcome::progressing(
                REASON_WAITING_FOR_MODULE,
                format!("waiting for RegistryModule {object} to get an ID"),
            );
        }
        Some(ModuleLookup::Found {
            object,
            id: Some(module_id),
        }) => {
            return Outcome::Ready {
                message: format!(
                    "{kind} {id} of RegistryModule {object} ({module_id}) in organization {org}"
                ),
            };
        }
        None => {}
    }
    if let Some(upload) = o.upload {
        return match upload.state {
            Some("errored") => Outcome::stalled(
                REASON_UPLOAD_ERRORED,
                upload
                    .error_message
                    .filter(|m| !m.is_empty())
                    .unwrap_or("the uploaded archive was rejected")
                    .to_owned(),
            ),
            Some(state @ ("uploaded" | "archived")) => Outcome::Ready {
                message: format!("{kind} {id} is {state}"),
            },
            _ => Outcome::progressing(
                REASON_WAITING_FOR_UPLOAD,
                format!("{kind} {id} is waiting for its configuration archive to be uploaded"),
            ),
        };
    }
    Outcome::Ready {
        message: format!("{kind} {id} in organization {org}"),
    }
}

/// When to look at an object again after reaching `outcome` (None: on its next change).
pub fn recheck_after(outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Ready { .. } => None,
        // The API server's status write (the upload) is a change of the object.
        Outcome::Progressing { reason, .. } if reason == REASON_WAITING_FOR_UPLOAD => None,
        Outcome::Progressing { .. } => Some(PROGRESS_RECHECK),
        Outcome::Stalled { reason, .. } if reason == REASON_ORGANIZATION_NOT_FOUND => {
            Some(ORPHAN_RECHECK)
        }
        Outcome::Stalled { reason, .. } if reason == REASON_MODULE_NOT_FOUND => {
            Some(MISSING_MODULE_RECHECK)
        }
        Outcome::Stalled { .. } => None,
    }
}

/// The status fields the generic controller reads back from an object.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredStatus {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// A ConfigurationVersion's upload state (the API server's).
    #[serde(default)]
    pub status: Option<String>,
    /// A ConfigurationVersion's upload error (the API server's).
    #[serde(default)]
    pub error_message: Option<String>,
}

impl StoredStatus {
    /// The status of `obj`; what cannot be read counts as absent (rewritten then).
    pub fn of(obj: &DynamicObject) -> Self {
        let Some(status) = obj.data.get("status") else {
            return Self::default();
        };
        serde_json::from_value(status.clone()).unwrap_or_else(|_| Self {
            id: status.get("id").and_then(Value::as_str).map(str::to_owned),
            ..Self::default()
        })
    }

    /// Whether the stored status already shows `id`, `conditions` and `generation`.
    pub fn shows(
        &self,
        id: Option<&str>,
        conditions: &[Condition],
        generation: Option<i64>,
    ) -> bool {
        self.id.as_deref() == id
            && self.observed_generation == generation
            && self.conditions == conditions
    }
}

/// The server-side apply body of the fields the generic controller owns.
pub fn status_apply_body(
    resource: &ApiResource,
    id: Option<&str>,
    conditions: &[Condition],
    generation: Option<i64>,
) -> Value {
    let mut status = Map::new();
    if let Some(id) = id {
        status.insert("id".into(), json!(id));
    }
    if let Some(g) = generation {
        status.insert("observedGeneration".into(), json!(g));
    }
    status.insert("conditions".into(), json!(conditions));
    json!({"apiVersion": resource.api_version, "kind": resource.kind, "status": status})
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
/// ID is checked for uniqueness across the kind. Records `IdAssigned` (and `InvalidId` /
/// `DuplicateId` for a replaced label) events on `regarding`.
pub async fn ensure_identity(
    client: &kube::Client,
    recorder: &Recorder,
    orgs: &Organizations,
    target: &IdTarget,
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
            && held_elsewhere(client, target, &meta, id).await?
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
                record_assignment(recorder, regarding, target.kind, &decision, &id).await;
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

/// Whether another object of `target`'s kind holds `id` in a way that makes this one
/// (described by `meta`) yield it (see [`rules::must_yield_id`]).
async fn held_elsewhere(
    client: &kube::Client,
    target: &IdTarget,
    meta: &ObjectMeta,
    id: &str,
) -> Result<bool, Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &target.resource);
    let lp = ListParams::default().labels(&format!("{LABEL_ID}={id}"));
    let carriers = api.list(&lp).await?.items;
    let keys: Vec<(String, String, bool)> = carriers
        .iter()
        .map(|o| {
            let confirmed = o.data.pointer("/status/id").and_then(Value::as_str) == Some(id);
            (
                o.uid().unwrap_or_default(),
                object_key(&o.metadata),
                confirmed,
            )
        })
        .collect();
    let others: Vec<IdHolder<'_>> = carriers
        .iter()
        .zip(&keys)
        .map(|(o, (uid, object, confirmed))| IdHolder {
            uid,
            object,
            created: o.metadata.creation_timestamp.as_ref(),
            confirmed: *confirmed,
        })
        .collect();
    let (my_uid, my_object) = (meta.uid.clone().unwrap_or_default(), object_key(meta));
    let me = IdHolder {
        uid: &my_uid,
        object: &my_object,
        created: meta.creation_timestamp.as_ref(),
        confirmed: false,
    };
    Ok(rules::must_yield_id(me, &others))
}

fn object_key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

async fn record_assignment(
    recorder: &Recorder,
    regarding: &ObjectReference,
    kind: IdKind,
    decision: &IdDecision,
    id: &str,
) {
    let what = regarding.kind.as_deref().unwrap_or("object");
    match decision {
        IdDecision::Keep(_) => {}
        IdDecision::Assign => {
            let note = format!("assigned ID {id}");
            publish_event(
                recorder,
                regarding,
                EventType::Normal,
                REASON_ID_ASSIGNED,
                "AssignId",
                note,
            )
            .await;
        }
        IdDecision::Replace { invalid } => {
            let note = format!(
                "label {LABEL_ID}={invalid:?} is not a valid {what} ID (expected {}<16 letters or digits>); replaced with {id}",
                kind.prefix()
            );
            publish_event(
                recorder,
                regarding,
                EventType::Warning,
                REASON_INVALID_ID,
                "AssignId",
                note,
            )
            .await;
        }
        IdDecision::Taken { id: taken } => {
            let note = format!(
                "ID {taken} in label {LABEL_ID} is already used by another {what}; replaced with {id}"
            );
            publish_event(
                recorder,
                regarding,
                EventType::Warning,
                REASON_DUPLICATE_ID,
                "AssignId",
                note,
            )
            .await;
        }
    }
}

/// Objects of namespace `ns` (among `objects`, of kind `resource`) whose verdict an event
/// of Organization `org` (owning `ns`) may change: those not Ready, or not labelled with
/// `org`. Ready objects of the organization stay untouched, so an Organization's status
/// write does not reconcile every object of its namespace.
pub fn affected_by_organization(
    objects: &[Arc<DynamicObject>],
    resource: &ApiResource,
    ns: &str,
    org: &str,
) -> Vec<ObjectRef<DynamicObject>> {
    objects
        .iter()
        .filter(|o| o.metadata.namespace.as_deref() == Some(ns))
        .filter(|o| {
            o.labels().get(LABEL_ORGANIZATION).map(String::as_str) != Some(org)
                || !conditions::is_true(&StoredStatus::of(o).conditions, CONDITION_READY)
        })
        .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
        .collect()
}

/// The TestVariables (among `objects`, of kind `resource`) naming `module` in
/// `spec.module`: their verdict changes when the module appears, gets its ID or goes.
pub fn variables_of_module(
    objects: &[Arc<DynamicObject>],
    resource: &ApiResource,
    module: &RegistryModule,
) -> Vec<ObjectRef<DynamicObject>> {
    let name = module.metadata.name.as_deref();
    objects
        .iter()
        .filter(|o| o.metadata.namespace == module.metadata.namespace)
        .filter(|o| o.data.pointer("/spec/module").and_then(Value::as_str) == name)
        .map(|o| ObjectRef::from_obj_with(o.as_ref(), resource.clone()))
        .collect()
}

/// State of one generic ID controller.
struct IdContext {
    base: Arc<Context>,
    orgs: Organizations,
    recorder: Recorder,
    target: IdTarget,
}

/// Runs the ID controllers of every kind in [`targets`] until `shutdown` resolves.
pub async fn run<S>(ctx: Arc<Context>, orgs: Organizations, shutdown: S)
where
    S: Future<Output = ()> + Clone + Send + Sync + 'static,
{
    let recorder = crate::new_recorder(&ctx.client);
    let controllers = targets().into_iter().map(|target| {
        let ictx = Arc::new(IdContext {
            base: ctx.clone(),
            orgs: orgs.clone(),
            recorder: recorder.clone(),
            target: target.clone(),
        });
        let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &target.resource);
        let mut controller =
            Controller::new_with(api, watcher::Config::default(), target.resource.clone());
        let store = controller.store();
        if target.conditions != ConditionPolicy::External {
            let (store, resource) = (store.clone(), target.resource.clone());
            controller = controller.watches(
                Api::<Organization>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |org| {
                    let ns = rules::organization_namespace(&org);
                    affected_by_organization(&store.state(), &resource, ns, &org.name_any())
                },
            );
        }
        if target.conditions == ConditionPolicy::Module {
            let resource = target.resource.clone();
            controller = controller.watches(
                Api::<RegistryModule>::all(ctx.client.clone()),
                watcher::Config::default(),
                move |module| variables_of_module(&store.state(), &resource, &module),
            );
        }
        controller
            .graceful_shutdown_on(shutdown.clone())
            .run(
                |obj, ctx| {
                    metrics::instrument(
                        metrics::CONTROLLER_IDS,
                        obj.as_ref(),
                        reconcile(obj.clone(), ctx),
                    )
                },
                error_policy,
                ictx,
            )
            .for_each(move |res| {
                let kind = target.resource.kind.clone();
                async move {
                    if let Err(e) = res {
                        tracing::debug!(error = %e, kind, "id reconcile");
                    }
                }
            })
    });
    futures::future::join_all(controllers).await;
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<IdContext>) -> Result<Action, Error> {
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let regarding = obj.object_ref(&ctx.target.resource);
    let stored = StoredStatus::of(&obj);
    let identity = match ensure_identity(
        &ctx.base.client,
        &ctx.recorder,
        &ctx.orgs,
        &ctx.target,
        obj.meta(),
        stored.id.as_deref(),
        &regarding,
    )
    .await
    {
        Ok(identity) => identity,
        Err(e) => {
            if ctx.target.conditions != ConditionPolicy::External && stored.id.is_none() {
                let outcome =
                    Outcome::progressing(REASON_ASSIGNING_ID, format!("assigning an ID: {e}"));
                if let Err(w) = write_conditions(&ctx, &obj, &stored, None, &outcome).await {
                    tracing::debug!(error = %w, "recording AssigningId");
                }
            }
            return Err(e);
        }
    };
    if ctx.target.conditions == ConditionPolicy::External {
        if stored.id.as_deref() != Some(identity.id.as_str()) {
            let api = namespaced(&ctx, &obj);
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
                ..Default::default()
            };
            let patch = json!({"status": {"id": identity.id}});
            api.patch_status(&obj.name_any(), &pp, &Patch::Merge(&patch))
                .await?;
        }
        return Ok(if identity.organization_found {
            Action::await_change()
        } else {
            Action::requeue(ORPHAN_RECHECK)
        });
    }
    let ns = obj.namespace().unwrap_or_default();
    let module = match ctx.target.conditions {
        ConditionPolicy::Module => Some(lookup_module(&ctx.base.client, &ns, &obj).await?),
        _ => None,
    };
    let upload = (ctx.target.conditions == ConditionPolicy::Upload).then_some(Upload {
        state: stored.status.as_deref(),
        error_message: stored.error_message.as_deref(),
    });
    let outcome = derive_outcome(&Observed {
        kind: &ctx.target.resource.kind,
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

fn namespaced(ctx: &IdContext, obj: &DynamicObject) -> Api<DynamicObject> {
    let ns = obj.namespace().unwrap_or_default();
    Api::namespaced_with(ctx.base.client.clone(), &ns, &ctx.target.resource)
}

/// Applies `status.id` (when known), `status.observedGeneration` and the conditions of
/// `outcome`, unless the stored status shows them already; records an Event when the
/// object becomes stalled or recovers.
async fn write_conditions(
    ctx: &IdContext,
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
    let body = status_apply_body(&ctx.target.resource, id, &conditions, generation);
    let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
    namespaced(ctx, obj)
        .patch_status(&obj.name_any(), &pp, &Patch::Apply(&body))
        .await?;
    let regarding = obj.object_ref(&ctx.target.resource);
    record_stall_transition(&ctx.recorder, &regarding, &stored.conditions, &conditions).await;
    Ok(())
}

/// Records a Warning Event when `next` shows the object newly stalled (or stalled for
/// another reason) and a Normal `Recovered` Event when it no longer is.
pub(crate) async fn record_stall_transition(
    recorder: &Recorder,
    regarding: &ObjectReference,
    previous: &[Condition],
    next: &[Condition],
) {
    match stall_transition(previous, next) {
        Some(StallTransition::Stalled { reason, message }) => {
            publish_event(
                recorder,
                regarding,
                EventType::Warning,
                &reason,
                "Reconcile",
                message,
            )
            .await;
        }
        Some(StallTransition::Recovered { previous_reason }) => {
            let note = format!("no longer stalled ({previous_reason} resolved)");
            publish_event(
                recorder,
                regarding,
                EventType::Normal,
                REASON_RECOVERED,
                "Reconcile",
                note,
            )
            .await;
        }
        None => {}
    }
}

/// Looks up the RegistryModule a TestVariable names in `spec.module`.
async fn lookup_module(
    client: &kube::Client,
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
    let api: Api<RegistryModule> = Api::namespaced(client.clone(), ns);
    Ok(match api.get_opt(&object).await? {
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

fn error_policy(obj: Arc<DynamicObject>, err: &Error, ctx: Arc<IdContext>) -> Action {
    tracing::warn!(
        error = %err,
        kind = %ctx.target.resource.kind,
        name = %obj.name_any(),
        label = err.metric_label(),
        "id reconcile failed"
    );
    if err.is_transient() {
        Action::requeue(Duration::from_secs(5))
    } else {
        Action::await_change()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_crds::constants::{CONDITION_RECONCILING, CONDITION_STALLED};

    fn identity(found: bool) -> Identity {
        Identity {
            id: "prj-0123456789abcdef".into(),
            organization: found.then(|| "acme".to_owned()),
            organization_found: found,
        }
    }

    fn observed<'a>(
        identity: &'a Identity,
        module: Option<&'a ModuleLookup>,
        upload: Option<Upload<'a>>,
    ) -> Observed<'a> {
        Observed {
            kind: "Project",
            namespace: "acme",
            identity,
            module,
            upload,
        }
    }

    fn stalled_reason(o: &Outcome) -> Option<&str> {
        match o {
            Outcome::Stalled { reason, .. } => Some(reason),
            _ => None,
        }
    }

    fn progressing_reason(o: &Outcome) -> Option<&str> {
        match o {
            Outcome::Progressing { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Copies kstatus: an object with its ID in a namespace an Organization owns is Ready;
    /// without an owning Organization it is Stalled (only creating one helps), whatever
    /// else is true.
    #[test]
    fn identity_kinds_are_ready_or_stalled_without_organization() {
        let id = identity(true);
        let o = derive_outcome(&observed(&id, None, None));
        assert!(
            matches!(&o, Outcome::Ready { message } if message.contains("prj-0123456789abcdef"))
        );
        let orphan = identity(false);
        let missing = ModuleLookup::Missing { object: "m".into() };
        for o in [
            derive_outcome(&observed(&orphan, None, None)),
            derive_outcome(&observed(&orphan, Some(&missing), None)),
            derive_outcome(&observed(&orphan, None, Some(Upload::default()))),
        ] {
            assert_eq!(stalled_reason(&o), Some(REASON_ORGANIZATION_NOT_FOUND));
            assert!(o.message().contains("namespace acme"), "{o:?}");
        }
    }

    /// A test variable needs its module: missing stalls, without an ID it waits, with an
    /// ID it is Ready and names it.
    #[test]
    fn test_variables_follow_their_module() {
        let id = identity(true);
        let missing = ModuleLookup::Missing {
            object: "net".into(),
        };
        let o = derive_outcome(&observed(&id, Some(&missing), None));
        assert_eq!(stalled_reason(&o), Some(REASON_MODULE_NOT_FOUND));
        assert!(o.message().contains("\"net\""));
        let no_id = ModuleLookup::Found {
            object: "net".into(),
            id: None,
        };
        let o = derive_outcome(&observed(&id, Some(&no_id), None));
        assert_eq!(progressing_reason(&o), Some(REASON_WAITING_FOR_MODULE));
        let found = ModuleLookup::Found {
            object: "net".into(),
            id: Some("mod-0123456789abcdef".into()),
        };
        let o = derive_outcome(&observed(&id, Some(&found), None));
        assert!(
            matches!(&o, Outcome::Ready { message } if message.contains("mod-0123456789abcdef"))
        );
    }

    /// Copies TFE's configuration-version states: pending (or no state yet) waits for the
    /// upload, errored stalls with the API server's message, uploaded and archived are
    /// Ready.
    #[test]
    fn configuration_versions_follow_the_upload_state() {
        let id = identity(true);
        let up = |state, error_message| Upload {
            state,
            error_message,
        };
        for state in [None, Some("pending")] {
            let o = derive_outcome(&observed(&id, None, Some(up(state, None))));
            assert_eq!(progressing_reason(&o), Some(REASON_WAITING_FOR_UPLOAD));
            assert_eq!(
                recheck_after(&o),
                None,
                "the upload is a change of the object"
            );
        }
        let o = derive_outcome(&observed(
            &id,
            None,
            Some(up(
                Some("errored"),
                Some("the archive is not gzip-compressed"),
            )),
        ));
        assert_eq!(stalled_reason(&o), Some(REASON_UPLOAD_ERRORED));
        assert_eq!(o.message(), "the archive is not gzip-compressed");
        let o = derive_outcome(&observed(&id, None, Some(up(Some("errored"), Some("")))));
        assert_eq!(o.message(), "the uploaded archive was rejected");
        for state in ["uploaded", "archived"] {
            let o = derive_outcome(&observed(&id, None, Some(up(Some(state), None))));
            assert!(matches!(&o, Outcome::Ready { message } if message.ends_with(state)));
        }
    }

    /// Ready objects and errored uploads wait for a change; orphans, missing modules and
    /// waits that resolve by themselves are looked at again.
    #[test]
    fn rechecks_follow_the_outcome() {
        let ready = Outcome::Ready { message: "".into() };
        assert_eq!(recheck_after(&ready), None);
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_UPLOAD_ERRORED, "")),
            None
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_ORGANIZATION_NOT_FOUND, "")),
            Some(ORPHAN_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_MODULE_NOT_FOUND, "")),
            Some(MISSING_MODULE_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::progressing(REASON_WAITING_FOR_MODULE, "")),
            Some(PROGRESS_RECHECK)
        );
    }

    fn object(ns: &str, name: &str, status: Value, labels: &[(&str, &str)]) -> DynamicObject {
        let ar = ApiResource::erase::<TestVariable>(&());
        let mut o = DynamicObject::new(name, &ar).within(ns);
        o.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        o.data = json!({"spec": {"module": "net"}, "status": status});
        o
    }

    /// The status is rewritten only when the ID, the observed generation or a condition
    /// differs from what is stored; fields of other writers do not count.
    #[test]
    fn stored_status_is_compared_on_owned_fields() {
        let conds = kstatus_conditions(
            &[],
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(2),
            Timestamp::UNIX_EPOCH,
        );
        let obj = object(
            "acme",
            "v",
            json!({"id": "var-1", "observedGeneration": 2, "conditions": conds, "versionId": "sv-x", "status": "uploaded"}),
            &[],
        );
        let stored = StoredStatus::of(&obj);
        assert_eq!(stored.status.as_deref(), Some("uploaded"));
        assert!(stored.shows(Some("var-1"), &conds, Some(2)));
        assert!(!stored.shows(Some("var-2"), &conds, Some(2)));
        assert!(!stored.shows(Some("var-1"), &conds, Some(3)));
        let later = kstatus_conditions(
            &conds,
            &Outcome::progressing(REASON_WAITING_FOR_MODULE, "x"),
            Some(2),
            Timestamp::UNIX_EPOCH,
        );
        assert!(!stored.shows(Some("var-1"), &later, Some(2)));
        // Recomputing the same outcome keeps the stored conditions, so nothing is written.
        let again = kstatus_conditions(
            &stored.conditions,
            &Outcome::Ready {
                message: "ok".into(),
            },
            Some(2),
            Timestamp::now(),
        );
        assert!(stored.shows(Some("var-1"), &again, Some(2)));
        // A malformed status counts as absent, but its ID is still read.
        let bad = object(
            "acme",
            "v",
            json!({"id": "var-1", "conditions": "nope"}),
            &[],
        );
        let stored = StoredStatus::of(&bad);
        assert_eq!(stored.id.as_deref(), Some("var-1"));
        assert!(stored.conditions.is_empty());
        assert_eq!(
            StoredStatus::of(&object("acme", "v", Value::Null, &[])),
            StoredStatus::default()
        );
    }

    /// The apply body names only the fields the controller owns, so server-side apply
    /// leaves the API server's fields (upload state, version ID) alone.
    #[test]
    fn apply_body_holds_only_owned_fields() {
        let ar = ApiResource::erase::<ConfigurationVersion>(&());
        let conds = kstatus_conditions(
            &[],
            &Outcome::progressing(REASON_WAITING_FOR_UPLOAD, "w"),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let body = status_apply_body(&ar, Some("cv-1"), &conds, Some(1));
        assert_eq!(body["apiVersion"], "terrace.dev/v1alpha1");
        assert_eq!(body["kind"], "ConfigurationVersion");
        let keys: Vec<&String> = body["status"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["conditions", "id", "observedGeneration"]);
        let types: Vec<&str> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            [CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED]
        );
        let body = status_apply_body(&ar, None, &conds, None);
        let keys: Vec<&String> = body["status"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["conditions"]);
    }

    /// An Organization event reconciles the objects of its namespace that are not Ready
    /// or not labelled with it; a module event reconciles the variables naming it.
    #[test]
    fn watch_mappers_pick_the_affected_objects() {
        let ar = ApiResource::erase::<TestVariable>(&());
        let ready = kstatus_conditions(
            &[],
            &Outcome::Ready { message: "".into() },
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let stalled = kstatus_conditions(
            &[],
            &Outcome::stalled(REASON_ORGANIZATION_NOT_FOUND, ""),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let objs: Vec<Arc<DynamicObject>> = vec![
            object(
                "acme",
                "ready",
                json!({"conditions": ready}),
                &[(LABEL_ORGANIZATION, "acme")],
            ),
            object("acme", "orphan", json!({"conditions": stalled}), &[]),
            object(
                "acme",
                "fresh",
                Value::Null,
                &[(LABEL_ORGANIZATION, "acme")],
            ),
            object("other", "elsewhere", Value::Null, &[]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let names = |refs: Vec<ObjectRef<DynamicObject>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(
            names(affected_by_organization(&objs, &ar, "acme", "acme")),
            ["orphan", "fresh"]
        );
        assert_eq!(
            names(affected_by_organization(&objs, &ar, "acme", "globex")),
            ["ready", "orphan", "fresh"]
        );
        let module = RegistryModule {
            metadata: ObjectMeta {
                name: Some("net".into()),
                namespace: Some("acme".into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        };
        assert_eq!(
            names(variables_of_module(&objs, &ar, &module)),
            ["ready", "orphan", "fresh"]
        );
    }
}
