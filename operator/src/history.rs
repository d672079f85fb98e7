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

    // Runs, per workspace.
    let ws_of_org = workspaces.clone();
    let (run_resource, _) = stores.store(IdKind::Run)?;
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
            let ns = crate::rules::organization_namespace(&o).to_owned();
            ws_of_org
                .state()
                .iter()
                .filter(|w| w.namespace().as_deref() == Some(ns.as_str()))
                .map(|w| ObjectRef::from_obj(w.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.clone());
    let runs = metrics::run(
        runs,
        metrics::CONTROLLER_HISTORY,
        reconcile_workspace,
        |w: Arc<Workspace>, e: &Error, _| {
            e.log_and_retry("history", &w.name_any(), Duration::from_secs(30))
        },
        hctx.clone(),
    );

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
        let ns = crate::rules::organization_namespace(&o).to_owned();
        of_org
            .state()
            .iter()
            .filter(|m| m.namespace().as_deref() == Some(ns.as_str()))
            .map(|m| ObjectRef::from_obj_with(m.as_ref(), res_org.clone()))
            .collect::<Vec<_>>()
    })
    .graceful_shutdown_on(shutdown);
    let tests = metrics::run(
        tests,
        metrics::CONTROLLER_HISTORY,
        reconcile_module,
        |m: Arc<DynamicObject>, e: &Error, _| {
            e.log_and_retry("history", &m.name_any(), Duration::from_secs(30))
        },
        hctx,
    );
    Ok(async move {
        tokio::join!(runs, tests);
    })
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

async fn reconcile_workspace(
    ws: Arc<Workspace>,
    ctx: Arc<HistoryContext>,
) -> Result<Action, Error> {
    let ns = ws.namespace().unwrap_or_default();
    let Some(ws_id) = ws.labels().get(LABEL_ID).cloned() else {
        return Ok(Action::await_change());
    };
    if ws.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(org) = ctx.orgs.owner(&ns).await? else {
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
    let ns = m.namespace().unwrap_or_default();
    let Some(module_id) = m.labels().get(LABEL_ID).cloned() else {
        return Ok(Action::await_change());
    };
    if m.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(org) = ctx.orgs.owner(&ns).await? else {
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

/// The blob store of namespace `ns`, its new blobs owned by `owner` (cluster store).
fn store(
    ctx: &Context,
    ns: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Result<AnyBlobStore, Error> {
    match &ctx.blobs {
        Ok(None) => Ok(AnyBlobStore::Secrets(Box::new(
            SecretBlobStore::new(ctx.client.clone(), ns, owner).managed_by(FIELD_MANAGER_OPERATOR),
        ))),
        Ok(Some(s3)) => Ok(AnyBlobStore::S3(s3.scoped(ns))),
        Err(why) => Err(Error::Unavailable(format!("the blob store: {why}"))),
    }
}

fn blob_error(e: BlobError) -> Error {
    Error::Unavailable(format!("the blob store: {e}"))
}

/// A stored document, or its default when there is none.
async fn read_doc<T: Default + for<'de> serde::Deserialize<'de>>(
    store: &AnyBlobStore,
    key: &str,
) -> Result<T, Error> {
    match store.get(key, None).await {
        Ok(b) => decode(&b).map_err(|e| Error::Invalid(format!("the archive document {key}: {e}"))),
        Err(BlobError::NotFound(_)) => Ok(T::default()),
        Err(e) => Err(blob_error(e)),
    }
}

async fn write_doc<T: serde::Serialize>(
    store: &AnyBlobStore,
    key: &str,
    doc: &T,
) -> Result<(), Error> {
    let bytes = encode(doc).map_err(Error::Invalid)?;
    store.put(key, Bytes::from(bytes)).await.map_err(blob_error)
}

/// The whole log of Pod `pod`: its blob-stored parts, else an old log ConfigMap.
async fn log_of(
    client: &kube::Client,
    store: &AnyBlobStore,
    ns: &str,
    pod: &str,
) -> Result<Option<Vec<u8>>, Error> {
    let mut text = Vec::new();
    let mut n = 0;
    loop {
        match store.get(&part_key(pod, n), None).await {
            Ok(gz) => {
                let part = terrace_crds::run::logs::gunzip(
                    &gz,
                    2 * terrace_crds::run::logs::PART_BYTES as u64,
                )
                .ok_or_else(|| {
                    Error::Invalid(format!("part {n} of the log of {pod} is not gzip"))
                })?;
                text.extend_from_slice(&part);
                n += 1;
            }
            Err(BlobError::NotFound(_)) => break,
            Err(e) => return Err(blob_error(e)),
        }
    }
    if n > 0 {
        return Ok(Some(text));
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let Some(cm) = cms.get_opt(&crate::testpod::log_archive_name(pod)).await? else {
        return Ok(None);
    };
    Ok(cm
        .binary_data
        .and_then(|mut d| d.remove(crate::testpod::LOG_ARCHIVE_KEY))
        .and_then(|gz| terrace_crds::run::logs::gunzip(&gz.0, 64 << 20)))
}

/// Appends `items` to the archive of owner `owner_id`, then deletes them; answers how
/// many objects the archive holds.
async fn archive(
    ctx: &HistoryContext,
    kind: HistoryKind,
    ns: &str,
    owner_id: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    items: Vec<Item>,
    retention_days: Option<i64>,
) -> Result<usize, Error> {
    let turn = ctx
        .directories
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((ns.to_owned(), kind))
        .or_default()
        .clone();
    let _turn = turn.lock().await;
    let client = &ctx.base.client;
    let owned = store(&ctx.base, ns, owner)?;
    let unowned = store(&ctx.base, ns, None)?;
    let mut manifest: Manifest = read_doc(&owned, &manifest_key(kind, owner_id)).await?;
    let mut directory = Shards::default();
    let pruned = match retention_days {
        Some(days) => {
            prune(
                &owned,
                &unowned,
                kind,
                owner_id,
                &mut manifest,
                &mut directory,
                days,
            )
            .await?
        }
        None => false,
    };
    if items.is_empty() && !pruned {
        return Ok(manifest.items.len());
    }
    let (mut seq, fresh) = manifest.open_segment();
    let mut segment: Segment = if fresh {
        Segment::default()
    } else {
        read_doc(&owned, &segment_key(kind, owner_id, seq)).await?
    };
    let known: std::collections::HashSet<String> =
        manifest.items.iter().map(|i| i.id.clone()).collect();
    let mut done = Vec::new();
    for item in items {
        if known.contains(&item.id) {
            done.push(item);
            continue;
        }
        let mut logs = std::collections::BTreeMap::new();
        let mut size = 0;
        for pod in &item.pods {
            if let Some(text) = log_of(client, &owned, ns, pod).await? {
                let packed = pack_log(&text).map_err(Error::Invalid)?;
                size += packed.len();
                logs.insert(pod.clone(), packed);
            }
        }
        if size > MAX_PACKED_LOGS {
            tracing::warn!(namespace = %ns, id = %item.id, bytes = size, "the logs are too large to archive; the object stays");
            continue;
        }
        let mut object = serde_json::to_value(item.obj.as_ref())
            .map_err(|e| Error::Invalid(format!("archiving {}: {e}", item.id)))?;
        if let Some(meta) = object["metadata"].as_object_mut() {
            for k in [
                "managedFields",
                "resourceVersion",
                "generation",
                "ownerReferences",
                "finalizers",
            ] {
                meta.remove(k);
            }
        }
        segment.items.push(Archived { object, logs });
        manifest.items.push(ManifestItem {
            id: item.id.clone(),
            order: item.live.order.clone(),
            seg: seq,
            status: item.status.clone(),
            source: item.source.clone(),
        });
        directory
            .shard(&unowned, kind, &item.id)
            .await?
            .owners
            .insert(item.id.clone(), owner_id.to_owned());
        if segment.items.len() >= SEGMENT_MAX {
            write_doc(&owned, &segment_key(kind, owner_id, seq), &segment).await?;
            manifest.segments.insert(seq, segment.items.len());
            seq += 1;
            segment = Segment::default();
        }
        done.push(item);
    }
    if !segment.items.is_empty() {
        write_doc(&owned, &segment_key(kind, owner_id, seq), &segment).await?;
        manifest.segments.insert(seq, segment.items.len());
    }
    write_doc(&owned, &manifest_key(kind, owner_id), &manifest).await?;
    directory.write(&unowned, kind).await?;
    let archived = manifest.items.len();
    for item in &done {
        delete(client, kind, ns, &item.name).await?;
        // Parts in a bucket are not reached by owner references.
        if matches!(owned, AnyBlobStore::S3(_)) {
            for pod in &item.pods {
                let mut n = 0;
                while owned.get(&part_key(pod, n), None).await.is_ok() {
                    let _ = owned.delete(&part_key(pod, n)).await;
                    n += 1;
                }
            }
        }
    }
    if !done.is_empty() {
        tracing::info!(namespace = %ns, owner = %owner_id, kind = kind.as_str(), count = done.len(), archived, "archived history");
    }
    Ok(archived)
}

/// The shards of a namespace's directory a pass read (and changes), by shard number.
#[derive(Default)]
struct Shards(BTreeMap<u32, Directory>);

impl Shards {
    /// The shard of `id`, read on first use.
    async fn shard(
        &mut self,
        store: &AnyBlobStore,
        kind: HistoryKind,
        id: &str,
    ) -> Result<&mut Directory, Error> {
        use std::collections::btree_map::Entry;
        let n = directory_shard(id);
        Ok(match self.0.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(read_doc(store, &directory_key(kind, n)).await?),
        })
    }

    /// Writes every shard read.
    async fn write(&self, store: &AnyBlobStore, kind: HistoryKind) -> Result<(), Error> {
        for (n, d) in &self.0 {
            write_doc(store, &directory_key(kind, *n), d).await?;
        }
        Ok(())
    }
}

/// Removes from the archive what a data retention policy of `days` days lets go: the
/// objects leave their segments (an emptied segment is deleted), the manifest and the
/// directory.
async fn prune(
    store: &AnyBlobStore,
    unowned: &AnyBlobStore,
    kind: HistoryKind,
    owner_id: &str,
    manifest: &mut Manifest,
    directory: &mut Shards,
    days: i64,
) -> Result<bool, Error> {
    let gone = expired(manifest, days, k8s_openapi::jiff::Timestamp::now());
    for (seq, ids) in &gone {
        let key = segment_key(kind, owner_id, *seq);
        let mut segment: Segment = read_doc(store, &key).await?;
        segment.items.retain(|a| {
            let id = a.object["metadata"]["labels"][LABEL_ID]
                .as_str()
                .unwrap_or_default();
            !ids.iter().any(|g| g == id)
        });
        if segment.items.is_empty() {
            store.delete(&key).await.map_err(blob_error)?;
            manifest.segments.remove(seq);
        } else {
            write_doc(store, &key, &segment).await?;
            manifest.segments.insert(*seq, segment.items.len());
        }
        manifest.items.retain(|i| !ids.contains(&i.id));
        for id in ids {
            directory.shard(unowned, kind, id).await?.owners.remove(id);
        }
        tracing::info!(owner = %owner_id, kind = kind.as_str(), count = ids.len(), days, "archived history past the data retention policy deleted");
    }
    Ok(!gone.is_empty())
}

async fn delete(
    client: &kube::Client,
    kind: HistoryKind,
    ns: &str,
    name: &str,
) -> Result<(), Error> {
    let dp = DeleteParams::background();
    let r = match kind {
        HistoryKind::Runs => Api::<Run>::namespaced(client.clone(), ns)
            .delete(name, &dp)
            .await
            .map(|_| ()),
        HistoryKind::TestRuns => Api::<TestRun>::namespaced(client.clone(), ns)
            .delete(name, &dp)
            .await
            .map(|_| ()),
    };
    match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
