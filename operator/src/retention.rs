//! The state retention controller: applies data retention policies (SPEC B20–B22) to
//! state versions. The data of a finalized version older than the policy's
//! `delete-older-than-n-days` is soft-deleted (status `backing_data_soft_deleted`: its
//! download answers 404, it can be restored), never the workspace's current state; soft-
//! deleted data (by the policy or through the API) is deleted from the blob store for
//! good after `--state-soft-delete-grace-hours` (`backing_data_permanently_deleted`).
//! The StateVersion itself stays.
//!
//! With an S3 blob store the data is in a bucket, which owner references do not reach:
//! the API server puts [`FINALIZER`] on every StateVersion it creates, and this
//! controller deletes a deleted version's blobs before removing it.
//!
//! One reconcile per StateVersion, in steps: observe (the version, its workspace's policy
//! or the organization's default, whether it is the current state) → decide
//! ([`terrace_crds::state::retention`], pure) → act (delete the chunk Secrets, then mark
//! the version). Inputs come from caches: the StateVersion feed (with an index of each
//! workspace's versions), the Workspace feed and the Organization index.
//!
//! Triggers, so nothing is polled: a version changing (it and its siblings: a newer
//! finalized version makes the previous current one eligible), a workspace's spec
//! changing (its policy), an organization changing (its default policy). A version kept
//! by time is looked at again when it falls due. Without a policy nothing is requeued.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use terrace_crds::blobs::FINALIZER;
use terrace_crds::constants::{FIELD_MANAGER_OPERATOR, LABEL_ID};
use terrace_crds::state::{
    Retention, StateVersionState, Times, backing_data_marks, effective_policy, retention,
};
use terrace_crds::{Organization, StateVersion, Workspace};

use crate::group_index::GroupIndex;
use crate::identity::{Organizations, synced};
use crate::watch::Feed;
use crate::{Context, Error, metrics};

/// Longest wait before a version kept by time is looked at again (a policy shortened
/// meanwhile reaches it through its workspace's or organization's change anyway).
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// State versions by workspace object name.
type Versions = GroupIndex<StateVersion>;

struct RetentionContext {
    base: Arc<Context>,
    orgs: Organizations,
    workspaces: Store<Workspace>,
    versions: Store<StateVersion>,
    by_workspace: Versions,
}

/// What a reconcile looks at.
struct Observed {
    policy: Option<terrace_crds::common::DataRetentionPolicy>,
    current: bool,
    state: StateVersionState,
    times: Times,
}

/// The controller. `workspaces`: a subscription to the Workspace feed (whose cache is
/// `workspace_store`); `organizations`: one to the Organization feed.
pub fn controller<S, W, O>(
    ctx: Arc<Context>,
    orgs: Organizations,
    workspace_store: Store<Workspace>,
    workspaces: W,
    organizations: O,
    shutdown: S,
) -> impl std::future::Future<Output = ()> + Send + 'static + use<S, W, O>
where
    S: std::future::Future<Output = ()> + Send + Sync + 'static,
    W: futures::Stream<Item = Result<Workspace, watcher::Error>> + Send + 'static,
    O: futures::Stream<Item = Result<Organization, watcher::Error>> + Send + 'static,
{
    let mut feed = Feed::<StateVersion>::new(&ctx.client, (), watcher::Config::default());
    let store = feed.store();
    let by_workspace = Versions::new(|v| Some(v.spec.workspace.clone()));
    let index = by_workspace.clone();
    feed.observe(move |ev| index.observe(ev));
    let siblings = feed.subscribe();
    let rctx = Arc::new(RetentionContext {
        base: ctx,
        orgs,
        workspaces: workspace_store,
        versions: store.clone(),
        by_workspace: by_workspace.clone(),
    });
    let (of_ws, of_org, of_sibling) = (by_workspace.clone(), store.clone(), by_workspace);
    let controller = Controller::for_stream(feed.into_stream(), store)
        .watches_stream(siblings, move |v: StateVersion| {
            versions_of(
                &of_sibling,
                &v.namespace().unwrap_or_default(),
                &v.spec.workspace,
            )
        })
        .watches_stream(
            // Only spec changes (the policy), not locks or status.
            workspaces.predicate_filter(predicates::generation, Default::default()),
            move |w: Workspace| {
                versions_of(&of_ws, &w.namespace().unwrap_or_default(), &w.name_any())
            },
        )
        .watches_stream(organizations, move |o: Organization| {
            crate::watch::of_organization(&of_org, &o, &())
        })
        .graceful_shutdown_on(shutdown);
    metrics::STATE_RETENTION.run(controller, reconcile, rctx)
}

fn versions_of(index: &Versions, ns: &str, workspace: &str) -> Vec<ObjectRef<StateVersion>> {
    index
        .members(ns, workspace)
        .into_iter()
        .map(|name| ObjectRef::new(&name).within(ns))
        .collect()
}

fn state_of(v: &StateVersion) -> StateVersionState {
    StateVersionState::parse(v.status.as_ref().and_then(|s| s.status.as_deref()))
        .unwrap_or(StateVersionState::Pending)
}

/// When the version's data arrived (its creation when it does not say).
fn written(v: &StateVersion) -> Option<k8s_openapi::jiff::Timestamp> {
    v.status
        .as_ref()
        .and_then(|s| s.finalized_at.as_deref())
        .and_then(|t| t.parse().ok())
        .or_else(|| v.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Whether `v` is its workspace's current state: the latest finalized version.
fn is_current(ctx: &RetentionContext, v: &StateVersion) -> bool {
    let ns = v.namespace().unwrap_or_default();
    let key = |s: &StateVersion| (written(s), s.spec.serial);
    versions_of(&ctx.by_workspace, &ns, &v.spec.workspace)
        .iter()
        .filter_map(|r| ctx.versions.get(r))
        .filter(|s| state_of(s) == StateVersionState::Finalized)
        .max_by_key(|s| key(s))
        .is_some_and(|s| s.name_any() == v.name_any())
}

async fn observe(ctx: &RetentionContext, v: &StateVersion) -> Result<Observed, Error> {
    let ns = v.namespace().unwrap_or_default();
    synced(&ctx.workspaces, "workspace").await?;
    synced(&ctx.versions, "state version").await?;
    let ws = ctx
        .workspaces
        .get(&ObjectRef::new(&v.spec.workspace).within(&ns));
    let org = ctx.orgs.owner(&ns).await?;
    let policy = effective_policy(
        ws.as_ref()
            .and_then(|w| w.spec.data_retention_policy.as_ref()),
        org.as_ref()
            .and_then(|o| o.spec.settings.default_data_retention_policy.as_ref()),
    )
    .cloned();
    Ok(Observed {
        policy,
        current: is_current(ctx, v),
        state: state_of(v),
        times: Times {
            written: written(v),
            soft_deleted: v
                .status
                .as_ref()
                .and_then(|s| s.backing_data_deleted_at.as_deref())
                .and_then(|t| t.parse().ok()),
        },
    })
}

async fn reconcile(v: Arc<StateVersion>, ctx: Arc<RetentionContext>) -> Result<Action, Error> {
    if v.metadata.deletion_timestamp.is_some() {
        if v.finalizers().iter().any(|f| f == FINALIZER) {
            delete_data(&ctx.base, &v).await?;
            crate::blob_finalizer::release(&ctx.base.client, v.as_ref()).await?;
        }
        return Ok(Action::await_change());
    }
    let o = observe(&ctx, &v).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let grace = k8s_openapi::jiff::SignedDuration::from_hours(i64::from(
        ctx.base.settings.state_soft_delete_grace_hours,
    ));
    match retention(o.policy.as_ref(), o.state, o.times, o.current, grace, now) {
        Retention::Keep => Ok(Action::await_change()),
        Retention::KeepUntil(due) => {
            let wait = Duration::try_from(due.duration_since(now)).unwrap_or_default();
            Ok(Action::requeue(
                wait.min(MAX_WAIT).max(Duration::from_secs(1)),
            ))
        }
        Retention::SoftDelete => {
            mark(&ctx.base, &v, StateVersionState::BackingDataSoftDeleted).await?;
            Ok(Action::await_change())
        }
        Retention::PermanentlyDelete => {
            delete_data(&ctx.base, &v).await?;
            mark(
                &ctx.base,
                &v,
                StateVersionState::BackingDataPermanentlyDeleted,
            )
            .await?;
            Ok(Action::await_change())
        }
    }
}

/// Deletes the version's data: its state and JSON state, from the bucket or as chunk
/// Secrets.
async fn delete_data(ctx: &Context, v: &StateVersion) -> Result<(), Error> {
    use terrace_blobstore::BlobStore;
    let ns = v.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let bucket = match &ctx.blobs {
        Ok(b) => b.as_ref().map(|s| s.scoped(&ns)),
        Err(why) => return Err(Error::Unavailable(format!("blob store: {why}"))),
    };
    let keys = v
        .status
        .iter()
        .flat_map(|s| s.blobs())
        .map(|b| b.key.clone());
    for key in keys {
        match &bucket {
            Some(b) => b
                .delete(&key)
                .await
                .map_err(|e| Error::Unavailable(format!("blob store: {e}")))?,
            None => delete_blob(&secrets, &key).await?,
        }
    }
    Ok(())
}

/// Marks the version soft- or permanently deleted, with the time.
async fn mark(ctx: &Context, v: &StateVersion, to: StateVersionState) -> Result<(), Error> {
    let ns = v.namespace().unwrap_or_default();
    let api: Api<StateVersion> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch_status(
        &v.name_any(),
        &PatchParams::apply(FIELD_MANAGER_OPERATOR),
        &Patch::Merge(
            &json!({"status": backing_data_marks(to, &k8s_openapi::jiff::Timestamp::now())}),
        ),
    )
    .await?;
    let id = v.labels().get(LABEL_ID).cloned().unwrap_or_default();
    tracing::info!(namespace = %ns, state_version = %id, to = to.as_str(), "state data retention");
    Ok(())
}

/// Deletes the chunks of the blob of `key`: chunks 1.. until one is missing, then 0.
async fn delete_blob(secrets: &Api<Secret>, key: &str) -> Result<(), Error> {
    let gone = |r: Result<_, kube::Error>| match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(Error::Kube(e)),
    };
    let mut i = 1;
    loop {
        let name = terrace_crds::blobs::chunk_name(key, i);
        if !gone(secrets.delete(&name, &DeleteParams::default()).await)? {
            break;
        }
        i += 1;
    }
    let first = terrace_crds::blobs::chunk_name(key, 0);
    gone(secrets.delete(&first, &DeleteParams::default()).await)?;
    Ok(())
}
