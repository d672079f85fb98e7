//! The history controllers (docs/runs.md, "History"; [`terrace_crds::history`]): each
//! workspace keeps its newest runs as custom resources, each registry module its newest
//! test runs (the organization's `settings.history`, 100 of each by default); older,
//! final ones are archived into the blob store of the organization's namespace, then
//! deleted with what they own. The API server still lists and shows them.
//!
//! One reconcile per workspace (or module), in steps:
//! 1. observe: its live runs from the catalog's Run cache (an index by workspace), the
//!    organization's setting;
//! 2. decide ([`terrace_crds::history::to_archive`], pure): nothing while at most `keep`
//!    plus a tenth are live; else every final run older than the newest `keep`, but the
//!    one holding the workspace's lock and the one that wrote its current state;
//! 3. act: append the runs (their logs packed: the blob-stored parts, or an old log
//!    ConfigMap) to the archive's open segment, write the manifest and the namespace's
//!    directory, record the count in the owner's status (the API server's cue to read the
//!    manifest again), then delete the runs. A run the manifest lists already (a pass
//!    that stopped before its deletes) is only deleted.
//!
//! Triggers: any change of one of its runs (a run ending makes the pass due), of the
//! workspace itself, and of the organization (its setting). Nothing is polled.
//!
//! The archive's blobs are owned by the workspace (module) in the cluster store, so
//! deleting it deletes its archive; the directory of the namespace is owned by nobody.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_blobstore::cluster::{AnyBlobStore, SecretBlobStore};
use terrace_blobstore::{BlobError, BlobStore, Bytes};
use terrace_crds::constants::{FIELD_MANAGER_OPERATOR, LABEL_ID};
use terrace_crds::history::{
    Archived, Directory, HistoryKind, Live, Manifest, ManifestItem, SEGMENT_MAX, Segment, decode,
    directory_key, directory_shard, encode, expired, manifest_key, pack_log, segment_key,
    to_archive,
};
use terrace_crds::ids::IdKind;
use terrace_crds::run::RunState;
use terrace_crds::run::logs::part_key;
use terrace_crds::testrun::TestRunState;
use terrace_crds::{Organization, RegistryModule, Run, StateVersion, TestRun, Workspace};

use crate::catalog::{Catalog, CatalogStores, typed};
use crate::group_index::GroupIndex;
use crate::identity::Organizations;
use crate::watch::Feed;
use crate::{Context, Error, metrics};

mod store;
use store::*;

/// The largest packed log of one archived object; an object with more stays live (and
/// is said in the operator's log).
const MAX_PACKED_LOGS: usize = 16 * 1024 * 1024;

/// Whose turn it is to write a namespace's directory.
type Turn = Arc<tokio::sync::Mutex<()>>;

/// Catalog objects grouped by owner (workspace or module object name).
type ByOwner = GroupIndex<DynamicObject>;

struct HistoryContext {
    base: Arc<Context>,
    orgs: Organizations,
    stores: CatalogStores,
    runs_by_workspace: ByOwner,
    tests_by_module: ByOwner,
    /// One pass at a time per namespace and kind: passes of several owners share the
    /// namespace's directory, which each reads, changes and writes.
    directories: std::sync::Mutex<HashMap<(String, HistoryKind), Turn>>,
}

/// Both controllers: runs per workspace (following the Workspace feed) and test runs per
/// module (from the catalog); both follow the Organization feed (their setting).
pub fn controllers<S>(
    ctx: Arc<Context>,
    orgs: Organizations,
    catalog: &mut Catalog,
    workspace_feed: &mut Feed<Workspace>,
    organizations: &mut Feed<Organization>,
    shutdown: S,
) -> Result<impl std::future::Future<Output = ()> + Send + 'static, Error>
where
    S: std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
{
    let (workspaces, workspace_changes) = (workspace_feed.store(), workspace_feed.subscribe());
    let organizations_too = organizations.subscribe();
    let organizations = organizations.subscribe();
    let stores = catalog.stores();
    let runs_by_workspace =
        ByOwner::new(|o| o.data["spec"]["workspace"].as_str().map(str::to_owned));
    let tests_by_module = ByOwner::new(|o| o.data["spec"]["module"].as_str().map(str::to_owned));
    {
        let (a, b) = (runs_by_workspace.clone(), tests_by_module.clone());
        catalog.observe(IdKind::Run, move |ev| a.observe(ev));
        catalog.observe(IdKind::TestRun, move |ev| b.observe(ev));
    }
    let hctx = Arc::new(HistoryContext {
        base: ctx,
        orgs,
        stores: stores.clone(),
        runs_by_workspace,
        tests_by_module,
        directories: std::sync::Mutex::default(),
    });

    // Runs, per workspace. A workspace's own changes matter only once it has runs or an
    // archive (its first run wakes it through the Run watch): the others never enter the
    // controller's queue, whose table would otherwise keep a slot per workspace of the
    // cluster after the start (issue 43's memory per workspace).
    let ws_of_org = workspaces.clone();
    let (run_resource, _) = stores.store(IdKind::Run)?;
    let with_runs = hctx.runs_by_workspace.clone();
    let workspace_changes = workspace_changes.filter(move |w| {
        std::future::ready(w.as_ref().map_or(true, |w| has_history(&with_runs, w)))
    });
    let runs = Controller::for_stream(workspace_changes, workspaces)
        .watches_stream_with(
            catalog.subscribe(IdKind::Run),
            |r: DynamicObject| {
                let ws = r.data["spec"]["workspace"].as_str()?;
                Some(ObjectRef::<Workspace>::new(ws).within(&r.namespace()?))
            },
            run_resource,
        )
        .watches_stream(organizations, move |o: Organization| {
            crate::watch::of_organization(&ws_of_org, &o, &())
        })
        .graceful_shutdown_on(shutdown.clone());
    let runs = metrics::HISTORY.run(runs, reconcile_workspace, hctx.clone());

    // Test runs, per module.
    let (resource, modules) = stores.store(IdKind::RegistryModule)?;
    let (res_run, res_org, of_org) = (resource.clone(), resource.clone(), modules.clone());
    let tests = Controller::for_stream_with(
        catalog.subscribe(IdKind::RegistryModule),
        modules,
        resource.clone(),
    )
    .watches_stream_with(
        catalog.subscribe(IdKind::TestRun),
        move |r: DynamicObject| {
            let m = r.data["spec"]["module"].as_str()?;
            Some(ObjectRef::<DynamicObject>::new_with(m, res_run.clone()).within(&r.namespace()?))
        },
        resource.clone(),
    )
    .watches_stream(organizations_too, move |o: Organization| {
        crate::watch::of_organization(&of_org, &o, &res_org)
    })
    .graceful_shutdown_on(shutdown);
    let tests = metrics::HISTORY.run(tests, reconcile_module, hctx);
    Ok(async move {
        tokio::join!(runs, tests);
    })
}

/// Whether workspace `w` has runs (in the catalog) or archived ones.
fn has_history(runs_by_workspace: &ByOwner, w: &Workspace) -> bool {
    let archived = w.status.as_ref().and_then(|s| s.archived_runs);
    archived.is_some_and(|n| n > 0)
        || runs_by_workspace.any_member(&w.namespace().unwrap_or_default(), &w.name_any())
}

/// One object of the catalog that may be archived.
struct Item {
    id: String,
    /// Its status and source, for the manifest (lists filter on them).
    status: Option<String>,
    source: Option<String>,
    name: String,
    obj: Arc<DynamicObject>,
    live: Live,
    /// Its Pods (their logs are packed).
    pods: Vec<String>,
}

/// The owner's objects of `kind` from the catalog.
fn members(
    ctx: &HistoryContext,
    kind: IdKind,
    index: &ByOwner,
    ns: &str,
    owner: &str,
) -> Result<(ApiResource, Vec<Arc<DynamicObject>>), Error> {
    let (ar, store) = ctx.stores.store(kind)?;
    let objs = index
        .members(ns, owner)
        .into_iter()
        .filter_map(|n| store.get(&ObjectRef::new_with(&n, ar.clone()).within(ns)))
        .collect();
    Ok((ar, objs))
}

/// The namespace, ID and organization of `obj` whose history is kept; None (nothing to do
/// until it changes) while it has no ID yet, is being deleted, or its namespace belongs to
/// no organization.
async fn history_owner<K: Resource>(
    ctx: &HistoryContext,
    obj: &K,
) -> Result<Option<(String, String, Arc<Organization>)>, Error> {
    let ns = obj.namespace().unwrap_or_default();
    let Some(id) = obj.labels().get(LABEL_ID).cloned() else {
        return Ok(None);
    };
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(None);
    }
    Ok(ctx.orgs.owner(&ns).await?.map(|org| (ns, id, org)))
}

async fn reconcile_workspace(
    ws: Arc<Workspace>,
    ctx: Arc<HistoryContext>,
) -> Result<Action, Error> {
    let Some((ns, ws_id, org)) = history_owner(&ctx, ws.as_ref()).await? else {
        return Ok(Action::await_change());
    };
    let keep = usize::try_from(org.spec.settings.history.runs)
        .unwrap_or(1)
        .max(1);
    let days = retention_days(
        ws.spec.data_retention_policy.as_ref(),
        org.spec.settings.default_data_retention_policy.as_ref(),
    );
    let archived_before = ws
        .status
        .as_ref()
        .and_then(|s| s.archived_runs)
        .unwrap_or(0);
    let (_, runs) = members(
        &ctx,
        IdKind::Run,
        &ctx.runs_by_workspace,
        &ns,
        &ws.name_any(),
    )?;
    let lock_holder = terrace_crds::lock::holder_of(&ws).and_then(|h| match h {
        terrace_crds::lock::LockHolder::Run(id) => Some(id),
        _ => None,
    });
    // Health assessments are not archived: the newest are kept, older ones deleted
    // (their results are no run's history; docs/health.md).
    let (assessments, runs): (Vec<_>, Vec<_>) = runs
        .into_iter()
        .partition(|o| o.data.pointer("/spec/assessment") == Some(&json!(true)));
    prune_assessments(&ctx.base.client, &ns, &ws, &assessments).await?;
    let mut items: Vec<Item> = runs
        .into_iter()
        .filter_map(|o| {
            let r: Run = typed(&o)?;
            let id = r.labels().get(LABEL_ID)?.clone();
            let st = r.status.clone().unwrap_or_default();
            let is_final = RunState::of(st.status.as_deref()).is_ok_and(RunState::is_final);
            Some(Item {
                live: Live {
                    order: (r.queued_at(), r.name_any()),
                    is_final,
                    protected: lock_holder.as_deref() == Some(id.as_str()),
                },
                status: st.status.clone(),
                source: None,
                pods: [st.plan.pod_name, st.apply.pod_name]
                    .into_iter()
                    .flatten()
                    .collect(),
                name: r.name_any(),
                id,
                obj: o,
            })
        })
        .collect();
    let lives = |items: &[Item]| items.iter().map(|i| i.live.clone()).collect::<Vec<_>>();
    let mut chosen = to_archive(&lives(&items), keep);
    if !chosen.is_empty() {
        // The run that wrote the current state stays (read only when a pass is due).
        if let Some(run) = current_state_run(&ctx.base.client, &ns, &ws.name_any(), &ws_id).await? {
            for i in items.iter_mut().filter(|i| i.id == run) {
                i.live.protected = true;
            }
        }
        chosen = to_archive(&lives(&items), keep);
    }
    // Nothing to archive, and nothing archived to let go under a retention policy.
    if chosen.is_empty() && (days.is_none() || archived_before == 0) {
        return Ok(after(days));
    }
    let owner = archive_owner(ws.controller_owner_ref(&()));
    let chosen = pick(items, &chosen);
    let archived = archive(&ctx, HistoryKind::Runs, &ns, &ws_id, owner, chosen, days).await?;
    record(
        &ctx.base.client,
        HistoryKind::Runs,
        &ns,
        &ws.name_any(),
        archived_before,
        archived,
    )
    .await?;
    Ok(after(days))
}

/// The assessments of a workspace kept as Run objects (the newest; the current result
/// always). A bounded history as runs have, without an archive: a result older than these
/// is gone.
pub const ASSESSMENTS_KEPT: usize = 20;

/// Deletes a workspace's final assessment runs beyond the newest [`ASSESSMENTS_KEPT`]
/// (never its current result), once there are a tenth more.
async fn prune_assessments(
    client: &kube::Client,
    ns: &str,
    ws: &Workspace,
    assessments: &[Arc<DynamicObject>],
) -> Result<(), Error> {
    let current = ws
        .status
        .as_ref()
        .and_then(|s| s.health.as_ref())
        .and_then(|h| h.run.clone());
    let runs: Vec<Run> = assessments.iter().filter_map(|o| typed(o)).collect();
    let lives: Vec<Live> = runs
        .iter()
        .map(|r| Live {
            order: (
                r.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| terrace_crds::common::timestamp(&t.0))
                    .unwrap_or_default(),
                r.name_any(),
            ),
            is_final: RunState::of(r.status.as_ref().and_then(|s| s.status.as_deref()))
                .is_ok_and(RunState::is_final),
            protected: current.as_deref() == Some(&r.name_any()),
        })
        .collect();
    for i in to_archive(&lives, ASSESSMENTS_KEPT) {
        delete(client, HistoryKind::Runs, ns, &runs[i].name_any()).await?;
    }
    Ok(())
}

async fn reconcile_module(
    m: Arc<DynamicObject>,
    ctx: Arc<HistoryContext>,
) -> Result<Action, Error> {
    let Some((ns, module_id, org)) = history_owner(&ctx, m.as_ref()).await? else {
        return Ok(Action::await_change());
    };
    let keep = usize::try_from(org.spec.settings.history.test_runs)
        .unwrap_or(1)
        .max(1);
    let days = retention_days(
        None,
        org.spec.settings.default_data_retention_policy.as_ref(),
    );
    let archived_before = m.data["status"]["archivedTestRuns"].as_i64().unwrap_or(0);
    let (_, runs) = members(
        &ctx,
        IdKind::TestRun,
        &ctx.tests_by_module,
        &ns,
        &m.name_any(),
    )?;
    let items: Vec<Item> = runs
        .into_iter()
        .filter_map(|o| {
            let r: TestRun = typed(&o)?;
            let id = r.labels().get(LABEL_ID)?.clone();
            let st = r.status.clone().unwrap_or_default();
            let created = r.created_at();
            Some(Item {
                live: Live {
                    order: (created, r.name_any()),
                    is_final: TestRunState::of(r.status.as_ref()).is_ok_and(TestRunState::is_final),
                    protected: false,
                },
                status: st.status.clone(),
                source: Some(r.spec.source.clone()),
                pods: st.pod_name.into_iter().collect(),
                name: r.name_any(),
                id,
                obj: o,
            })
        })
        .collect();
    let chosen = to_archive(
        &items.iter().map(|i| i.live.clone()).collect::<Vec<_>>(),
        keep,
    );
    if chosen.is_empty() && (days.is_none() || archived_before == 0) {
        return Ok(after(days));
    }
    let owner = m.metadata.uid.clone().map(|uid| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: RegistryModule::api_version(&()).into_owned(),
            kind: RegistryModule::kind(&()).into_owned(),
            name: m.name_any(),
            uid,
            ..Default::default()
        }
    });
    let chosen = pick(items, &chosen);
    let archived = archive(
        &ctx,
        HistoryKind::TestRuns,
        &ns,
        &module_id,
        owner,
        chosen,
        days,
    )
    .await?;
    record(
        &ctx.base.client,
        HistoryKind::TestRuns,
        &ns,
        &m.name_any(),
        archived_before,
        archived,
    )
    .await?;
    Ok(after(days))
}

/// The archive's blobs are owned by the workspace without blocking its deletion.
fn archive_owner(
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    owner.map(|mut o| {
        o.controller = Some(false);
        o.block_owner_deletion = None;
        o
    })
}

/// The days of the data retention policy in force (the workspace's, else the
/// organization's default), unless it keeps everything.
fn retention_days(
    workspace: Option<&terrace_crds::common::DataRetentionPolicy>,
    organization: Option<&terrace_crds::common::DataRetentionPolicy>,
) -> Option<i64> {
    terrace_crds::state::effective_policy(workspace, organization)
        .filter(|p| p.dont_delete != Some(true))
        .and_then(|p| p.delete_older_than_n_days)
        .map(i64::from)
}

/// What follows a pass: under a retention policy, a look again in six hours (archived
/// objects age out of it); else nothing until something changes.
fn after(days: Option<i64>) -> Action {
    match days {
        Some(_) => Action::requeue(Duration::from_secs(6 * 3600)),
        None => Action::await_change(),
    }
}

/// Records how many objects the owner's archive holds in its status (the API server's
/// cue to read its manifest again), when that changed.
async fn record(
    client: &kube::Client,
    kind: HistoryKind,
    ns: &str,
    owner: &str,
    before: i64,
    now: usize,
) -> Result<(), Error> {
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    if now == before {
        return Ok(());
    }
    let pp = PatchParams::default();
    match kind {
        HistoryKind::Runs => {
            let patch = json!({"status": {"archivedRuns": now}});
            Api::<Workspace>::namespaced(client.clone(), ns)
                .patch_status(owner, &pp, &Patch::Merge(patch))
                .await?;
        }
        HistoryKind::TestRuns => {
            let patch = json!({"status": {"archivedTestRuns": now}});
            Api::<RegistryModule>::namespaced(client.clone(), ns)
                .patch_status(owner, &pp, &Patch::Merge(patch))
                .await?;
        }
    }
    Ok(())
}

/// `items` at `chosen`, in that order.
fn pick(items: Vec<Item>, chosen: &[usize]) -> Vec<Item> {
    let mut slots: Vec<Option<Item>> = items.into_iter().map(Some).collect();
    chosen
        .iter()
        .filter_map(|i| slots.get_mut(*i)?.take())
        .collect()
}

/// The run that wrote workspace `ws` (ID `ws_id`)'s current state (its latest finalized
/// version): listed by the workspace-ID label the API server puts on versions, else (a
/// version written with kubectl has none) from the namespace's versions.
async fn current_state_run(
    client: &kube::Client,
    ns: &str,
    ws: &str,
    ws_id: &str,
) -> Result<Option<String>, Error> {
    let api: Api<StateVersion> = Api::namespaced(client.clone(), ns);
    let labelled = ListParams::default().labels(&format!(
        "{}={ws_id}",
        terrace_crds::constants::LABEL_WORKSPACE_ID
    ));
    let mut versions = api.list(&labelled).await?.items;
    if versions.is_empty() {
        versions = api.list(&ListParams::default()).await?.items;
    }
    Ok(versions
        .into_iter()
        .filter(|v| v.spec.workspace == ws)
        .filter(|v| v.status.as_ref().and_then(|s| s.status.as_deref()) == Some("finalized"))
        .max_by_key(|v| v.spec.serial)
        .and_then(|v| v.spec.run))
}
