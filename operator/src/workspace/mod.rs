//! The Workspace controller: keeps each Workspace's derived status current — its ID,
//! its project's ID, normalised tag names, the effective tag bindings (its own plus those
//! inherited from its project), the remote state consumer count — and reports kstatus
//! conditions: Ready, Reconciling while waiting for an ID or the default project, Stalled
//! (`OrganizationNotFound`, `DuplicateName`, `ProjectNotFound`) when only a change by
//! someone else can help.
//!
//! Inputs, all from caches: the Workspace itself, the Project it names (or the
//! namespace's default project, from the catalog's Project cache), the Workspaces of its
//! namespace with the same TFE name (from the controller's cache, found through the name
//! index of [`GroupIndex`], so no reconcile or event scans every workspace of the cluster) and
//! the Organization index. Besides
//! Workspace events it reacts to Project changes (a project's tag bindings flow into its
//! workspaces), Organization changes (a namespace gaining its organization) and changes
//! of same-named Workspaces (a deleted name holder frees the name), each through the feed
//! that fills the cache it reads, so it never reads a cache older than its trigger.
//!
//! Steady state costs nothing: a workspace whose stored status already shows what it
//! derives is neither written nor requeued (nothing in its status depends on time);
//! waits that resolve by themselves are looked at again, and relists after a broken
//! watch cover missed events. Status is written with server-side apply under the
//! operator's field manager, and only when it differs from what is stored.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use terrace_crds::common::{Condition, EffectiveTagBinding, TagBinding};
use terrace_crds::constants::{
    API_VERSION, FIELD_MANAGER_OPERATOR, LABEL_DEFAULT_PROJECT, LABEL_ID,
};
use terrace_crds::ids::{IdKind, is_valid_id};
use terrace_crds::{Organization, Project, Workspace};

use crate::catalog::{Catalog, CatalogStores, typed};
use crate::conditions::{
    Outcome, REASON_DUPLICATE_NAME, REASON_ORGANIZATION_NOT_FOUND, REASON_PROJECT_NOT_FOUND,
    REASON_WAITING_FOR_PROJECT, kstatus_conditions,
};
use crate::events::record_stall_transition;
use crate::group_index::GroupIndex;
use crate::identity::{IdIndex, IdTarget, Identity, Organizations, ensure_identity};
use crate::rules::{self, NameClaim};
use crate::watch::Feed;
use crate::{Context, Error, metrics};

/// Workspaces by lowercase TFE name.
type NameIndex = GroupIndex<Workspace>;

/// How often a workspace waiting for its project's ID (or the default project) is looked
/// at again.
const PROGRESS_RECHECK: Duration = Duration::from_secs(5);
/// How often a workspace stalled on a duplicate name is looked at again: a holder renamed
/// away does not reach it through the same-name watch (only its new name does).
const DUPLICATE_RECHECK: Duration = Duration::from_secs(60);
/// How often another stalled workspace is looked at again (the safety net; the events
/// that resolve it trigger a reconcile at once).
const STALLED_RECHECK: Duration = Duration::from_secs(300);

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
            && crate::conditions::same_conditions(&s.conditions, conditions)
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
    refs_where(workspaces, |w| {
        w.metadata.namespace.as_deref() == ns
            && match w.spec.project.as_deref() {
                Some(p) if !p.is_empty() => p == name,
                _ => is_default,
            }
    })
}

/// Every Workspace of namespace `ns`.
pub fn workspaces_in_namespace(
    workspaces: &[Arc<Workspace>],
    ns: &str,
) -> Vec<ObjectRef<Workspace>> {
    refs_where(workspaces, |w| w.metadata.namespace.as_deref() == Some(ns))
}

/// The other Workspaces of `ws`'s namespace with the same TFE name (case-insensitively):
/// their DuplicateName verdict may change when `ws` appears, changes or goes.
pub fn same_name_siblings(
    workspaces: &[Arc<Workspace>],
    ws: &Workspace,
) -> Vec<ObjectRef<Workspace>> {
    let name = ws.spec.name.to_lowercase();
    refs_where(workspaces, |w| {
        w.metadata.namespace == ws.metadata.namespace
            && w.metadata.name != ws.metadata.name
            && w.spec.name.to_lowercase() == name
    })
}

/// References to the Workspaces among `workspaces` that `keep` accepts.
fn refs_where(
    workspaces: &[Arc<Workspace>],
    keep: impl Fn(&Workspace) -> bool,
) -> Vec<ObjectRef<Workspace>> {
    workspaces
        .iter()
        .filter(|w| keep(w))
        .map(|w| ObjectRef::from_obj(w.as_ref()))
        .collect()
}

struct WsContext {
    base: Arc<Context>,
    orgs: Organizations,
    recorder: Recorder,
    workspaces: Store<Workspace>,
    /// TFE names of the cached workspaces, kept by the feed with the cache.
    names: NameIndex,
    /// Their IDs, kept the same way.
    ids: IdIndex<Workspace>,
    projects: CatalogStores,
}

/// The controller, run until `shutdown` resolves. It subscribes to `organizations` and to
/// the catalog's Projects, so call it before those feeds run.
pub fn controller<S>(
    ctx: Arc<Context>,
    orgs: Organizations,
    mut workspaces: Feed<Workspace>,
    organizations: &mut Feed<Organization>,
    catalog: &mut Catalog,
    shutdown: S,
) -> impl std::future::Future<Output = ()> + Send + 'static + use<S>
where
    S: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    let client = ctx.client.clone();
    let store = workspaces.store();
    let names = NameIndex::new(|w| Some(w.spec.name.to_lowercase()));
    let index = names.clone();
    workspaces.observe(move |ev| index.observe(ev));
    let ids = IdIndex::new(store.clone(), ());
    workspaces.observe(ids.observer());
    let same_name = workspaces.subscribe();
    let (by_project, by_org, by_name) = (store.clone(), store.clone(), store.clone());
    let names_of = names.clone();
    let wctx = Arc::new(WsContext {
        recorder: crate::events::new_recorder(&client),
        base: ctx,
        orgs,
        workspaces: store.clone(),
        names,
        ids,
        projects: catalog.stores(),
    });
    let controller = Controller::for_stream(workspaces.into_stream(), store)
        .watches_stream_with(
            catalog.subscribe(IdKind::Project),
            move |p: DynamicObject| match typed::<Project>(&p) {
                Some(p) => workspaces_of_project(&by_project.state(), &p),
                None => Vec::new(),
            },
            ApiResource::erase::<Project>(&()),
        )
        .watches_stream(organizations.subscribe(), move |o| {
            workspaces_in_namespace(&by_org.state(), rules::organization_namespace(&o))
        })
        .watches_stream(same_name, move |w| {
            let candidates = same_named(&by_name, &names_of, &w);
            same_name_siblings(&candidates, &w)
        })
        .graceful_shutdown_on(shutdown);
    metrics::WORKSPACE.run(controller, reconcile, wctx)
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
    crate::identity::synced(&ctx.workspaces, "workspace").await?;
    let identity = ensure_identity(
        client,
        &ctx.orgs,
        &IdTarget::of::<Workspace>(IdKind::Workspace),
        &ctx.ids,
        ws.meta(),
        ws.status.as_ref().and_then(|s| s.id.as_deref()),
        &regarding,
    )
    .await?;
    ctx.projects.synced(IdKind::Project).await?;
    let project = lookup_project(&ctx.projects, &ns, ws.spec.project.as_deref());
    let siblings = same_named(&ctx.workspaces, &ctx.names, &ws);
    let claims: Vec<NameClaim<'_>> = siblings
        .iter()
        .filter(|w| w.metadata.namespace.as_deref() == Some(ns.as_str()))
        .map(|w| claim(w))
        .collect();
    let held_by = rules::name_held_by(claim(&ws), &claims);
    let derived = derive(&ws, &identity, &project, held_by);

    let generation = ws.meta().generation;
    let previous = ws
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let now = Timestamp::now();
    let conditions = crate::conditions::with_repository(
        crate::conditions::with_health(
            kstatus_conditions(previous, &derived.outcome, generation, now),
            previous,
            ws.status.as_ref().and_then(|s| s.health.as_deref()),
            generation,
            now,
        ),
        previous,
        &ws,
        generation,
        now,
    );
    if !status_is_current(&ws, &derived, &conditions, generation) {
        let api: Api<Workspace> = Api::namespaced(client.clone(), &ns);
        let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
        let body = status_patch(&derived, &conditions, generation);
        api.patch_status(&ws.name_any(), &pp, &Patch::Apply(&body))
            .await?;
        record_stall_transition(&ctx.recorder, &regarding, previous, &conditions).await;
    }
    Ok(match recheck_after(&derived.outcome) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// When to look at a workspace again after `outcome` (None: on its next change). Nothing
/// in a Ready workspace's status depends on time, so it waits for a change.
pub fn recheck_after(outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Ready { .. } => None,
        Outcome::Progressing { .. } => Some(PROGRESS_RECHECK),
        Outcome::Stalled { reason, .. } if reason == REASON_DUPLICATE_NAME => {
            Some(DUPLICATE_RECHECK)
        }
        Outcome::Stalled { .. } => Some(STALLED_RECHECK),
    }
}

/// The cached workspaces of `ws`'s namespace with its TFE name (case-insensitively, `ws`
/// itself included), from the name index: the only ones its DuplicateName verdict
/// depends on.
fn same_named(store: &Store<Workspace>, names: &NameIndex, ws: &Workspace) -> Vec<Arc<Workspace>> {
    let Some(ns) = ws.metadata.namespace.as_deref() else {
        return Vec::new();
    };
    names
        .members(ns, &ws.spec.name.to_lowercase())
        .iter()
        .filter_map(|object| store.get(&ObjectRef::new(object).within(ns)))
        .collect()
}

fn claim(w: &Workspace) -> NameClaim<'_> {
    NameClaim {
        object: w.metadata.name.as_deref().unwrap_or_default(),
        tfe_name: &w.spec.name,
        created: w.metadata.creation_timestamp.as_ref(),
    }
}

/// The workspace's project, from the catalog's Project cache: the Project named
/// `project`, or the namespace's default project (label `terrace.dev/default-project=true`)
/// when `project` is empty.
fn lookup_project(projects: &CatalogStores, ns: &str, project: Option<&str>) -> ProjectLookup {
    let found = |p: &DynamicObject| ProjectLookup::Found {
        object: p.name_any(),
        id: p
            .labels()
            .get(LABEL_ID)
            .filter(|id| is_valid_id(IdKind::Project, id))
            .cloned(),
        tag_bindings: p
            .data
            .pointer("/spec/tagBindings")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default(),
    };
    match project.filter(|p| !p.is_empty()) {
        Some(name) => match projects.get(IdKind::Project, ns, name) {
            Some(p) => found(&p),
            None => ProjectLookup::Missing {
                object: name.to_owned(),
            },
        },
        None => default_project(projects.in_namespace(IdKind::Project, ns))
            .map_or(ProjectLookup::NoDefault, |p| found(&p)),
    }
}

/// The project a workspace without `spec.project` belongs to, among its namespace's
/// Project objects `in_ns`: the one labelled the default. Several carrying the label is a
/// misconfiguration: the one the Organization controller manages wins, else the first by
/// name, so every controller (the workspace's status, a run's inputs, notifications) takes
/// the same one.
pub(crate) fn default_project(
    in_ns: impl IntoIterator<Item = Arc<DynamicObject>>,
) -> Option<Arc<DynamicObject>> {
    in_ns
        .into_iter()
        .filter(|p| {
            p.labels()
                .get(LABEL_DEFAULT_PROJECT)
                .is_some_and(|v| v == "true")
        })
        .min_by_key(|p| {
            (
                p.name_any() != crate::organization::DEFAULT_PROJECT_OBJECT,
                p.name_any(),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;
    use terrace_crds::common::TagBinding;
    use terrace_crds::constants::{CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED};
    use terrace_crds::{ProjectSpec, WorkspaceSpec, WorkspaceStatus};

    #[test]
    fn every_controller_takes_the_same_default_project_of_several() {
        let project = |name: &str, default: bool| {
            let mut p = DynamicObject::new(
                name,
                &kube::api::ApiResource::erase::<terrace_crds::Project>(&()),
            )
            .within("acme");
            if default {
                p.metadata.labels = Some(BTreeMap::from([(
                    LABEL_DEFAULT_PROJECT.to_owned(),
                    "true".to_owned(),
                )]));
            }
            Arc::new(p)
        };
        let pick = |all: Vec<Arc<DynamicObject>>| default_project(all).map(|p| p.name_any());
        assert_eq!(pick(vec![project("a", false)]), None);
        // The one the Organization controller manages wins, in any order.
        for all in [
            vec![
                project("b", true),
                project("default", true),
                project("a", true),
            ],
            vec![project("default", true), project("b", true)],
        ] {
            assert_eq!(pick(all).as_deref(), Some("default"));
        }
        // Without it, the first by name, whatever the cache's order.
        assert_eq!(
            pick(vec![
                project("c", true),
                project("a", false),
                project("b", true)
            ])
            .as_deref(),
            Some("b")
        );
    }

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

    /// The Workspace cache keeps only what this controller reads (see
    /// `crate::watch`): a trimmed workspace derives the same status, and the same "already
    /// current" verdict, as the whole object; what it does not read is gone.
    #[test]
    fn trimmed_workspaces_derive_the_same() {
        use crate::watch::Watched;
        let mut w = ws("w", "web", Some("infra"));
        w.spec.description = Some("described".into());
        w.spec.terraform_version = Some("1.9.0".into());
        w.spec.trigger_patterns = vec!["/modules/**".into()];
        let d = derive(&w, &identity(true), &found(Some(PRJ_ID)), None);
        let conds = kstatus_conditions(&[], &d.outcome, Some(2), Timestamp::UNIX_EPOCH);
        w.status = Some(WorkspaceStatus {
            id: Some(d.id.clone()),
            project_id: d.project_id.clone(),
            resource_count: 7,
            latest_change_at: Some("2026-01-01T00:00:00Z".into()),
            tag_names: d.tag_names.clone(),
            effective_tag_bindings: d.effective_tag_bindings.clone(),
            remote_state_consumer_count: Some(d.remote_state_consumer_count),
            data_retention_policy_id: Some("drp-x".into()),
            observed_generation: Some(2),
            conditions: conds.clone(),
            ..Default::default()
        });
        let mut trimmed = w.clone();
        trimmed.trim();
        assert_eq!(
            derive(&trimmed, &identity(true), &found(Some(PRJ_ID)), None),
            d
        );
        assert!(status_is_current(&w, &d, &conds, Some(2)));
        assert!(status_is_current(&trimmed, &d, &conds, Some(2)));
        assert_eq!(trimmed.spec.project.as_deref(), Some("infra"));
        assert_eq!(trimmed.spec.description, None);
        // The run controllers read the engine version and the latest change.
        assert_eq!(trimmed.spec.terraform_version, w.spec.terraform_version);
        assert!(trimmed.spec.trigger_patterns.is_empty());
        let st = trimmed.status.unwrap_or_default();
        // The assessment scheduler reads the resource count (a state to assess).
        assert_eq!(
            (st.resource_count, st.latest_change_at.as_deref()),
            (7, Some("2026-01-01T00:00:00Z"))
        );
        assert_eq!(st.data_retention_policy_id, None);
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

    /// Copies issue 17's idle budget: a Ready workspace is never requeued (nothing in
    /// its status depends on time); waits that resolve by themselves and stalls are
    /// looked at again.
    #[test]
    fn only_waits_and_stalls_are_rechecked() {
        assert_eq!(recheck_after(&Outcome::Ready { message: "".into() }), None);
        assert_eq!(
            recheck_after(&Outcome::progressing(REASON_WAITING_FOR_PROJECT, "")),
            Some(PROGRESS_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_DUPLICATE_NAME, "")),
            Some(DUPLICATE_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_PROJECT_NOT_FOUND, "")),
            Some(STALLED_RECHECK)
        );
    }

    /// A workspace change reaches the other workspaces with the same name, whatever its
    /// case.
    #[test]
    fn same_name_siblings_are_found_case_insensitively() {
        let all: Vec<Arc<Workspace>> = [
            ws("a", "Web", None),
            ws("b", "web", None),
            ws("c", "api", None),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        assert_eq!(names(same_name_siblings(&all, &all[0])), ["b"]);
        assert!(same_name_siblings(&all, &all[2]).is_empty());
    }
}
