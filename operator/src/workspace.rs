//! The Workspace controller: keeps each Workspace's derived status current — its ID,
//! its project's ID, normalised tag names, the effective tag bindings (its own plus those
//! inherited from its project), the remote state consumer count — and reports kstatus
//! conditions: Ready, Reconciling while waiting for an ID or the default project, Stalled
//! (`OrganizationNotFound`, `DuplicateName`, `ProjectNotFound`) when only a change by
//! someone else can help.
//!
//! Inputs: the Workspace itself, the Project it names (or the namespace's default
//! project), the other Workspaces of its namespace (from the controller's cache) and the
//! Organization index. Besides Workspace events it reacts to Project changes (a project's
//! tag bindings flow into its workspaces), Organization changes (a namespace gaining its
//! organization) and changes of same-named Workspaces (a deleted name holder frees the
//! name). Status is written with server-side apply under the operator's field manager,
//! and only when it differs from what is stored.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use terrace_crds::common::{Condition, EffectiveTagBinding, TagBinding};
use terrace_crds::constants::{
    API_VERSION, FIELD_MANAGER_OPERATOR, LABEL_DEFAULT_PROJECT, LABEL_ID,
};
use terrace_crds::ids::{IdKind, is_valid_id};
use terrace_crds::{Organization, Project, Workspace};

use crate::conditions::{Outcome, StallTransition, kstatus_conditions, stall_transition};
use crate::ids::{IdTarget, Identity, Organizations, ensure_identity};
use crate::rules::{self, NameClaim};
use crate::{Context, Error, metrics, publish_event};

/// Stalled reason: `spec.project` names a Project that does not exist.
pub const REASON_PROJECT_NOT_FOUND: &str = "ProjectNotFound";
/// Stalled reason: an older Workspace of the namespace has the same TFE name.
pub const REASON_DUPLICATE_NAME: &str = "DuplicateName";
/// Stalled reason: no Organization owns the workspace's namespace.
pub const REASON_ORGANIZATION_NOT_FOUND: &str = "OrganizationNotFound";
/// Reconciling reason: the project (or the default project) has no ID yet or does not
/// exist yet (the Organization controller creates the default project).
pub const REASON_WAITING_FOR_PROJECT: &str = "WaitingForProject";
/// Event reason when a workspace stops being stalled.
pub const REASON_RECOVERED: &str = "Recovered";

/// What the workspace's project turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectLookup {
    /// The project exists; `id` is its ID label when that is a valid project ID.
    Found {
        object: String,
        id: Option<String>,
        tag_bindings: Vec<TagBinding>,
    },
    /// `spec.project` names a Project object that does not exist.
    Missing { object: String },
    /// `spec.project` is empty and the namespace has no default project (yet).
    NoDefault,
}

/// The status fields this controller owns.
#[derive(Clone, Debug, PartialEq)]
pub struct Derived {
    pub id: String,
    pub project_id: Option<String>,
    pub tag_names: Vec<String>,
    pub effective_tag_bindings: Vec<EffectiveTagBinding>,
    pub remote_state_consumer_count: i64,
    pub outcome: Outcome,
}

/// Derives the owned status fields of `ws` from what the reconcile found. Pure.
/// `name_held_by` is the object name of an older Workspace with the same TFE name.
pub fn derive(
    ws: &Workspace,
    identity: &Identity,
    project: &ProjectLookup,
    name_held_by: Option<&str>,
) -> Derived {
    let ns = ws.metadata.namespace.as_deref().unwrap_or_default();
    let (project_id, inherited): (Option<&str>, &[TagBinding]) = match project {
        ProjectLookup::Found {
            id, tag_bindings, ..
        } => (id.as_deref(), tag_bindings),
        _ => (None, &[]),
    };
    let outcome = if !identity.organization_found {
        Outcome::stalled(
            REASON_ORGANIZATION_NOT_FOUND,
            format!("no Organization owns namespace {ns}"),
        )
    } else if let Some(holder) = name_held_by {
        Outcome::stalled(
            REASON_DUPLICATE_NAME,
            format!(
                "workspace name {:?} is already used by Workspace {holder} (names are unique case-insensitively)",
                ws.spec.name
            ),
        )
    } else {
        match project {
            ProjectLookup::Missing { object } => Outcome::stalled(
                REASON_PROJECT_NOT_FOUND,
                format!("Project {object} not found in namespace {ns}"),
            ),
            ProjectLookup::NoDefault => Outcome::progressing(
                REASON_WAITING_FOR_PROJECT,
                format!("waiting for the default project of namespace {ns}"),
            ),
            ProjectLookup::Found {
                object, id: None, ..
            } => Outcome::progressing(
                REASON_WAITING_FOR_PROJECT,
                format!("waiting for Project {object} to get an ID"),
            ),
            ProjectLookup::Found {
                object,
                id: Some(id),
                ..
            } => Outcome::Ready {
                message: format!("workspace {} is in project {object} ({id})", identity.id),
            },
        }
    };
    Derived {
        id: identity.id.clone(),
        project_id: project_id.map(str::to_owned),
        tag_names: rules::tag_names(&ws.spec.tags),
        effective_tag_bindings: rules::effective_tag_bindings(
            &ws.spec.tag_bindings,
            inherited,
            project_id,
        ),
        remote_state_consumer_count: rules::remote_state_consumer_count(
            &ws.spec.remote_state_consumers,
        ),
        outcome,
    }
}

/// Whether the stored status already shows `derived` with `conditions` at `generation`.
fn status_is_current(
    ws: &Workspace,
    derived: &Derived,
    conditions: &[Condition],
    generation: Option<i64>,
) -> bool {
    ws.status.as_ref().is_some_and(|s| {
        s.id.as_deref() == Some(derived.id.as_str())
            && s.project_id == derived.project_id
            && s.tag_names == derived.tag_names
            && s.effective_tag_bindings == derived.effective_tag_bindings
            && s.remote_state_consumer_count == Some(derived.remote_state_consumer_count)
            && s.observed_generation == generation
            && s.conditions == conditions
    })
}

/// The server-side apply body for the owned status fields.
fn status_patch(derived: &Derived, conditions: &[Condition], generation: Option<i64>) -> Value {
    let mut status = Map::new();
    status.insert("id".into(), json!(derived.id));
    if let Some(p) = &derived.project_id {
        status.insert("projectId".into(), json!(p));
    }
    status.insert("tagNames".into(), json!(derived.tag_names));
    status.insert(
        "effectiveTagBindings".into(),
        json!(derived.effective_tag_bindings),
    );
    status.insert(
        "remoteStateConsumerCount".into(),
        json!(derived.remote_state_consumer_count),
    );
    if let Some(g) = generation {
        status.insert("observedGeneration".into(), json!(g));
    }
    status.insert("conditions".into(), json!(conditions));
    json!({"apiVersion": API_VERSION, "kind": "Workspace", "status": status})
}

/// Workspaces whose effective bindings depend on `project`: those naming it, and when
/// it is its namespace's default project, those naming no project.
pub fn workspaces_of_project(
    workspaces: &[Arc<Workspace>],
    project: &Project,
) -> Vec<ObjectRef<Workspace>> {
    let ns = project.metadata.namespace.as_deref();
    let name = project.metadata.name.as_deref().unwrap_or_default();
    let is_default = project
        .labels()
        .get(LABEL_DEFAULT_PROJECT)
        .is_some_and(|v| v == "true");
    workspaces
        .iter()
        .filter(|w| w.metadata.namespace.as_deref() == ns)
        .filter(|w| match w.spec.project.as_deref() {
            Some(p) if !p.is_empty() => p == name,
            _ => is_default,
        })
        .map(|w| ObjectRef::from_obj(w.as_ref()))
        .collect()
}

/// Every Workspace of namespace `ns`.
pub fn workspaces_in_namespace(
    workspaces: &[Arc<Workspace>],
    ns: &str,
) -> Vec<ObjectRef<Workspace>> {
    workspaces
        .iter()
        .filter(|w| w.metadata.namespace.as_deref() == Some(ns))
        .map(|w| ObjectRef::from_obj(w.as_ref()))
        .collect()
}

/// Workspace object names by namespace and lowercased TFE name, kept current by the
/// same-name watch, so finding the workspaces sharing a name reads those few instead of
/// every cached workspace of the cluster (which made each create cost more the more
/// workspaces there were).
#[derive(Clone, Default)]
pub struct SameNames(Arc<std::sync::Mutex<NameIndex>>);

#[derive(Default)]
struct NameIndex {
    /// (namespace, lowercased TFE name) → object names.
    by_name: HashMap<(String, String), BTreeSet<String>>,
    /// (namespace, object name) → lowercased TFE name.
    name_of: HashMap<(String, String), String>,
    /// The index being rebuilt by a relist (swapped in when it is complete).
    relist: Option<Box<NameIndex>>,
}

impl NameIndex {
    fn key(w: &Workspace) -> (String, String) {
        (
            w.metadata.namespace.clone().unwrap_or_default(),
            w.metadata.name.clone().unwrap_or_default(),
        )
    }

    fn put(&mut self, w: &Workspace) {
        let object = Self::key(w);
        let name = w.spec.name.to_lowercase();
        if self.name_of.get(&object) == Some(&name) {
            return;
        }
        self.remove(w);
        self.by_name
            .entry((object.0.clone(), name.clone()))
            .or_default()
            .insert(object.1.clone());
        self.name_of.insert(object, name);
    }

    fn remove(&mut self, w: &Workspace) {
        let object = Self::key(w);
        if let Some(old) = self.name_of.remove(&object) {
            let key = (object.0, old);
            if let Some(set) = self.by_name.get_mut(&key) {
                set.remove(&object.1);
                if set.is_empty() {
                    self.by_name.remove(&key);
                }
            }
        }
    }
}

impl SameNames {
    fn lock(&self) -> std::sync::MutexGuard<'_, NameIndex> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows one event of the workspace watch.
    pub fn apply(&self, event: &watcher::Event<Workspace>) {
        let mut idx = self.lock();
        match event {
            watcher::Event::Apply(w) => idx.put(w),
            watcher::Event::Delete(w) => idx.remove(w),
            watcher::Event::Init => idx.relist = Some(Box::default()),
            watcher::Event::InitApply(w) => idx.relist.get_or_insert_with(Box::default).put(w),
            watcher::Event::InitDone => {
                if let Some(fresh) = idx.relist.take() {
                    *idx = *fresh;
                }
            }
        }
    }

    /// The object names of the workspaces of `ns` whose TFE name is `name`
    /// (case-insensitively).
    pub fn named(&self, ns: &str, name: &str) -> Vec<String> {
        self.lock()
            .by_name
            .get(&(ns.to_owned(), name.to_lowercase()))
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The other Workspaces of `ws`'s namespace with the same TFE name
    /// (case-insensitively): their DuplicateName verdict may change when `ws` appears,
    /// changes or goes.
    pub fn siblings(&self, ws: &Workspace) -> Vec<ObjectRef<Workspace>> {
        let ns = ws.metadata.namespace.as_deref().unwrap_or_default();
        self.named(ns, &ws.spec.name)
            .into_iter()
            .filter(|n| Some(n.as_str()) != ws.metadata.name.as_deref())
            .map(|n| ObjectRef::new(&n).within(ns))
            .collect()
    }
}

struct WsContext {
    base: Arc<Context>,
    orgs: Organizations,
    recorder: Recorder,
    workspaces: Store<Workspace>,
    names: SameNames,
}

/// Runs the controller until `shutdown` resolves.
pub async fn run<S>(ctx: Arc<Context>, orgs: Organizations, shutdown: S)
where
    S: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    let client = ctx.client.clone();
    let workspaces: Api<Workspace> = Api::all(client.clone());
    let controller = Controller::new(workspaces.clone(), watcher::Config::default());
    let store = controller.store();
    let (by_project, by_org) = (store.clone(), store.clone());
    let names = SameNames::default();
    let same_name = {
        let names = names.clone();
        watcher(workspaces.clone(), watcher::Config::default())
            .map_ok(move |event| {
                names.apply(&event);
                event
            })
            .touched_objects()
    };
    let wctx = Arc::new(WsContext {
        recorder: crate::new_recorder(&client),
        base: ctx,
        orgs,
        workspaces: store,
        names: names.clone(),
    });
    controller
        .watches(
            Api::<Project>::all(client.clone()),
            watcher::Config::default(),
            move |p| workspaces_of_project(&by_project.state(), &p),
        )
        .watches(
            Api::<Organization>::all(client.clone()),
            watcher::Config::default(),
            move |o| workspaces_in_namespace(&by_org.state(), rules::organization_namespace(&o)),
        )
        .watches_stream(same_name, move |w| names.siblings(&w))
        .graceful_shutdown_on(shutdown)
        .run(
            |ws, ctx| {
                metrics::instrument(
                    metrics::CONTROLLER_WORKSPACE,
                    ws.as_ref(),
                    reconcile(ws.clone(), ctx),
                )
            },
            error_policy,
            wctx,
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "workspace reconcile");
            }
        })
        .await;
}

async fn reconcile(ws: Arc<Workspace>, ctx: Arc<WsContext>) -> Result<Action, Error> {
    if ws.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = ws
        .namespace()
        .ok_or_else(|| Error::Invalid("workspace has no namespace".into()))?;
    let client = &ctx.base.client;
    let regarding = ws.object_ref(&());
    let identity = ensure_identity(
        client,
        &ctx.recorder,
        &ctx.orgs,
        &IdTarget::of::<Workspace>(IdKind::Workspace),
        ws.meta(),
        ws.status.as_ref().and_then(|s| s.id.as_deref()),
        &regarding,
    )
    .await?;
    let project = lookup_project(client, &ns, ws.spec.project.as_deref()).await?;
    let siblings: Vec<Arc<Workspace>> = ctx
        .names
        .named(&ns, &ws.spec.name)
        .iter()
        .filter_map(|n| ctx.workspaces.get(&ObjectRef::new(n).within(&ns)))
        .collect();
    let claims: Vec<NameClaim<'_>> = siblings.iter().map(|w| claim(w)).collect();
    let held_by = rules::name_held_by(claim(&ws), &claims);
    let derived = derive(&ws, &identity, &project, held_by);

    let generation = ws.meta().generation;
    let previous = ws
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = kstatus_conditions(previous, &derived.outcome, generation, Timestamp::now());
    if !status_is_current(&ws, &derived, &conditions, generation) {
        let api: Api<Workspace> = Api::namespaced(client.clone(), &ns);
        let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
        let body = status_patch(&derived, &conditions, generation);
        api.patch_status(&ws.name_any(), &pp, &Patch::Apply(&body))
            .await?;
        match stall_transition(previous, &conditions) {
            Some(StallTransition::Stalled { reason, message }) => {
                publish_event(
                    &ctx.recorder,
                    &regarding,
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
                    &ctx.recorder,
                    &regarding,
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
    Ok(match &derived.outcome {
        Outcome::Ready { .. } => Action::requeue(Duration::from_secs(600)),
        Outcome::Progressing { .. } => Action::requeue(Duration::from_secs(5)),
        // A holder renamed away does not reach us through the same-name watch.
        Outcome::Stalled { reason, .. } if reason == REASON_DUPLICATE_NAME => {
            Action::requeue(Duration::from_secs(60))
        }
        Outcome::Stalled { .. } => Action::requeue(Duration::from_secs(300)),
    })
}

fn claim(w: &Workspace) -> NameClaim<'_> {
    NameClaim {
        object: w.metadata.name.as_deref().unwrap_or_default(),
        tfe_name: &w.spec.name,
        created: w.metadata.creation_timestamp.as_ref(),
    }
}

/// Reads the workspace's project: the Project named `project`, or the namespace's
/// default project (label `terrace.dev/default-project=true`) when `project` is empty.
async fn lookup_project(
    client: &kube::Client,
    ns: &str,
    project: Option<&str>,
) -> Result<ProjectLookup, Error> {
    let api: Api<Project> = Api::namespaced(client.clone(), ns);
    let found = |p: &Project| ProjectLookup::Found {
        object: p.name_any(),
        id: p
            .labels()
            .get(LABEL_ID)
            .filter(|id| is_valid_id(IdKind::Project, id))
            .cloned(),
        tag_bindings: p.spec.tag_bindings.clone(),
    };
    match project.filter(|p| !p.is_empty()) {
        Some(name) => Ok(match api.get_opt(name).await? {
            Some(p) => found(&p),
            None => ProjectLookup::Missing {
                object: name.to_owned(),
            },
        }),
        None => {
            let lp = ListParams::default().labels(&format!("{LABEL_DEFAULT_PROJECT}=true"));
            let mut defaults = api.list(&lp).await?.items;
            // Several projects carrying the label is a misconfiguration; prefer the one
            // the Organization controller manages.
            defaults.sort_by_key(|p| {
                (
                    p.name_any() != crate::organization::DEFAULT_PROJECT_OBJECT,
                    p.name_any(),
                )
            });
            Ok(defaults.first().map_or(ProjectLookup::NoDefault, found))
        }
    }
}

fn error_policy(ws: Arc<Workspace>, err: &Error, _ctx: Arc<WsContext>) -> Action {
    tracing::warn!(
        error = %err,
        name = %ws.name_any(),
        label = err.metric_label(),
        "workspace reconcile failed"
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
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;
    use terrace_crds::common::TagBinding;
    use terrace_crds::constants::{CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED};
    use terrace_crds::{ProjectSpec, WorkspaceSpec, WorkspaceStatus};

    const WS_ID: &str = "ws-0123456789abcdef";
    const PRJ_ID: &str = "prj-0123456789abcdef";

    fn ws(name: &str, tfe: &str, project: Option<&str>) -> Workspace {
        Workspace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("acme".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: WorkspaceSpec {
                name: tfe.into(),
                project: project.map(str::to_owned),
                tags: vec!["B".into(), "a".into(), "b".into()],
                tag_bindings: vec![TagBinding {
                    key: "env".into(),
                    value: "prod".into(),
                }],
                remote_state_consumers: vec!["ws-x".into()],
                ..Default::default()
            },
            status: None,
        }
    }

    fn identity(found: bool) -> Identity {
        Identity {
            id: WS_ID.into(),
            organization: found.then(|| "acme".into()),
            organization_found: found,
        }
    }

    fn found(id: Option<&str>) -> ProjectLookup {
        ProjectLookup::Found {
            object: "default".into(),
            id: id.map(str::to_owned),
            tag_bindings: vec![
                TagBinding {
                    key: "env".into(),
                    value: "dev".into(),
                },
                TagBinding {
                    key: "cost".into(),
                    value: "7".into(),
                },
            ],
        }
    }

    fn stalled_reason(d: &Derived) -> Option<&str> {
        match &d.outcome {
            Outcome::Stalled { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Copies TFE's workspace attributes: project id, lowercased tag names, effective
    /// bindings with the project's inherited ones after the direct ones.
    #[test]
    fn resolved_workspace_is_ready_with_derived_fields() {
        let d = derive(
            &ws("w", "web", None),
            &identity(true),
            &found(Some(PRJ_ID)),
            None,
        );
        assert!(matches!(d.outcome, Outcome::Ready { .. }));
        assert_eq!(d.id, WS_ID);
        assert_eq!(d.project_id.as_deref(), Some(PRJ_ID));
        assert_eq!(d.tag_names, ["a", "b"]);
        assert_eq!(d.remote_state_consumer_count, 1);
        let keys: Vec<_> = d
            .effective_tag_bindings
            .iter()
            .map(|b| {
                (
                    b.key.as_str(),
                    b.value.as_str(),
                    b.inherited_from.as_deref(),
                )
            })
            .collect();
        assert_eq!(keys, [("env", "prod", None), ("cost", "7", Some(PRJ_ID))]);
    }

    /// Stalled reasons, in priority order: the organization, then the name, then the
    /// project.
    #[test]
    fn stalled_reasons_follow_priority() {
        let w = ws("w", "web", Some("missing"));
        let missing = ProjectLookup::Missing {
            object: "missing".into(),
        };
        let d = derive(&w, &identity(false), &missing, Some("older"));
        assert_eq!(stalled_reason(&d), Some(REASON_ORGANIZATION_NOT_FOUND));
        let d = derive(&w, &identity(true), &missing, Some("older"));
        assert_eq!(stalled_reason(&d), Some(REASON_DUPLICATE_NAME));
        let d = derive(&w, &identity(true), &missing, None);
        assert_eq!(stalled_reason(&d), Some(REASON_PROJECT_NOT_FOUND));
        assert_eq!(d.project_id, None);
        assert!(
            d.effective_tag_bindings
                .iter()
                .all(|b| b.inherited_from.is_none())
        );
    }

    /// Copies kstatus: waiting for something the system does by itself (the default
    /// project, a project ID) is Reconciling, not Stalled; no project ID is reported yet.
    #[test]
    fn waiting_for_project_is_progressing() {
        for lookup in [ProjectLookup::NoDefault, found(None)] {
            let d = derive(&ws("w", "web", None), &identity(true), &lookup, None);
            assert!(
                matches!(&d.outcome, Outcome::Progressing { reason, .. } if reason == REASON_WAITING_FOR_PROJECT),
                "{lookup:?}"
            );
            assert_eq!(d.project_id, None);
            assert_eq!(d.effective_tag_bindings.len(), 1);
        }
    }

    /// A status write is skipped only when every owned field already matches.
    #[test]
    fn status_is_current_compares_every_owned_field() {
        let mut w = ws("w", "web", None);
        let d = derive(&w, &identity(true), &found(Some(PRJ_ID)), None);
        let conds = kstatus_conditions(&[], &d.outcome, Some(2), Timestamp::UNIX_EPOCH);
        assert!(!status_is_current(&w, &d, &conds, Some(2)));
        w.status = Some(WorkspaceStatus {
            id: Some(d.id.clone()),
            project_id: d.project_id.clone(),
            tag_names: d.tag_names.clone(),
            effective_tag_bindings: d.effective_tag_bindings.clone(),
            remote_state_consumer_count: Some(d.remote_state_consumer_count),
            observed_generation: Some(2),
            conditions: conds.clone(),
            ..Default::default()
        });
        assert!(status_is_current(&w, &d, &conds, Some(2)));
        assert!(!status_is_current(&w, &d, &conds, Some(3)));
        let mut other = d.clone();
        other.tag_names.push("z".into());
        assert!(!status_is_current(&w, &other, &conds, Some(2)));
    }

    /// The apply body names only the owned fields (server-side apply would otherwise
    /// take ownership of resourceCount, metrics, …) and omits projectId when unresolved.
    #[test]
    fn status_patch_holds_only_owned_fields() {
        let w = ws("w", "web", None);
        let d = derive(&w, &identity(true), &ProjectLookup::NoDefault, None);
        let conds = kstatus_conditions(&[], &d.outcome, Some(2), Timestamp::UNIX_EPOCH);
        let body = status_patch(&d, &conds, Some(2));
        let mut keys: Vec<_> = body["status"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        assert_eq!(
            keys,
            [
                "conditions",
                "effectiveTagBindings",
                "id",
                "observedGeneration",
                "remoteStateConsumerCount",
                "tagNames"
            ]
        );
        assert_eq!(body["kind"], "Workspace");
        let ready = conds.iter().find(|c| c.type_ == CONDITION_READY);
        assert_eq!(ready.map(|c| c.status.as_str()), Some("False"));
        let rec = conds.iter().find(|c| c.type_ == CONDITION_RECONCILING);
        assert_eq!(rec.map(|c| c.status.as_str()), Some("True"));
        assert!(
            conds
                .iter()
                .any(|c| c.type_ == CONDITION_STALLED && c.status == "False")
        );
    }

    fn project(name: &str, default: bool) -> Project {
        Project {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("acme".into()),
                labels: default.then(|| {
                    BTreeMap::from([(LABEL_DEFAULT_PROJECT.to_owned(), "true".to_owned())])
                }),
                ..Default::default()
            },
            spec: ProjectSpec {
                name: name.into(),
                ..Default::default()
            },
            status: None,
        }
    }

    fn names(refs: Vec<ObjectRef<Workspace>>) -> Vec<String> {
        let mut v: Vec<_> = refs.into_iter().map(|r| r.name).collect();
        v.sort();
        v
    }

    /// A project change reaches the workspaces naming it, plus — for the default project —
    /// the workspaces naming none; never workspaces of other namespaces.
    #[test]
    fn project_changes_map_to_dependent_workspaces() {
        let mut elsewhere = ws("x", "x", None);
        elsewhere.metadata.namespace = Some("other".into());
        let all: Vec<Arc<Workspace>> = [
            ws("a", "a", Some("infra")),
            ws("b", "b", None),
            ws("c", "c", Some("")),
            ws("d", "d", Some("default")),
            elsewhere,
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        assert_eq!(
            names(workspaces_of_project(&all, &project("infra", false))),
            ["a"]
        );
        assert_eq!(
            names(workspaces_of_project(&all, &project("default", true))),
            ["b", "c", "d"]
        );
        assert_eq!(names(workspaces_in_namespace(&all, "other")), ["x"]);
    }

    /// A workspace change reaches the other workspaces of its namespace with the same
    /// name, whatever its case; the index follows renames, deletions and relists.
    #[test]
    fn same_name_siblings_are_found_case_insensitively() {
        use kube::runtime::watcher::Event;
        let mut elsewhere = ws("d", "web", None);
        elsewhere.metadata.namespace = Some("other".into());
        let (a, b, c) = (
            ws("a", "Web", None),
            ws("b", "web", None),
            ws("c", "api", None),
        );
        let idx = SameNames::default();
        for w in [&a, &b, &c, &elsewhere] {
            idx.apply(&Event::Apply(w.clone()));
        }
        assert_eq!(names(idx.siblings(&a)), ["b"]);
        assert!(idx.siblings(&c).is_empty());
        // b renamed to API: now c's sibling, no longer a's.
        let b2 = ws("b", "API", None);
        idx.apply(&Event::Apply(b2.clone()));
        assert!(idx.siblings(&a).is_empty());
        assert_eq!(names(idx.siblings(&c)), ["b"]);
        idx.apply(&Event::Delete(b2));
        assert!(idx.siblings(&c).is_empty());
        // A relist replaces everything, once complete.
        idx.apply(&Event::Init);
        idx.apply(&Event::InitApply(ws("e", "api", None)));
        assert!(idx.siblings(&c).is_empty());
        assert_eq!(idx.named("acme", "web"), ["a"]);
        idx.apply(&Event::InitDone);
        assert_eq!(names(idx.siblings(&c)), ["e"]);
        assert_eq!(idx.named("acme", "API"), ["e"]);
        assert!(idx.named("acme", "web").is_empty());
    }
}
