//! Auto-destroy: a workspace whose `auto-destroy-at` (or its inactivity period,
//! `auto-destroy-activity-duration` after its latest change) has come gets one destroy
//! run, queued by the operator — not by a request handler — with an Event. The due time
//! ([`run::auto_destroy_due`]) is recorded in the workspace's annotation
//! [`ANNOTATION_AUTO_DESTROY_QUEUED`] with a resourceVersion precondition before the run
//! is created, so a restarted operator (or a second replica) never queues it twice.
//! Nothing is requeued on a timer but a workspace that waits for its due time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::LABEL_ID;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::run;
use terrace_crds::{Run, RunSpec, Workspace};

use crate::events::publish_event;
use crate::{Context, Error};

/// Annotation on a workspace: the due time (RFC 3339) whose destroy run was queued.
pub const ANNOTATION_AUTO_DESTROY_QUEUED: &str = "terrace.dev/auto-destroy-queued";
/// The `source` of the runs it queues.
pub const SOURCE: &str = "terrace-auto-destroy";

struct Ctx {
    base: Arc<Context>,
    recorder: Recorder,
}

/// The auto-destroy controller over the workspaces' shared cache and its changes.
pub fn controller<S>(
    ctx: Arc<Context>,
    workspaces: Store<Workspace>,
    changes: impl futures::Stream<Item = Result<Workspace, watcher::Error>> + Send + 'static,
    shutdown: S,
) -> impl Future<Output = ()> + Send + 'static
where
    S: Future<Output = ()> + Send + Sync + 'static,
{
    let c = Arc::new(Ctx {
        recorder: crate::events::new_recorder(&ctx.client),
        base: ctx,
    });
    // Only workspaces with an auto-destroy setting have anything to do here: the others
    // never reach the controller, so a (re)start does not queue a reconcile of every
    // workspace in the cluster (issue 17). One whose setting is removed is seen no more,
    // and a wake-up already scheduled for it finds nothing due.
    let changes = changes.filter(|w| {
        futures::future::ready(w.as_ref().map_or(true, |w| {
            w.spec.auto_destroy_at.is_some() || w.spec.auto_destroy_activity_duration.is_some()
        }))
    });
    let controller = Controller::for_stream(changes, workspaces).graceful_shutdown_on(shutdown);
    crate::metrics::AUTO_DESTROY.run(controller, reconcile, c)
}

async fn reconcile(ws: Arc<Workspace>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let created = ws
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string());
    let due = run::auto_destroy_due(
        ws.spec.auto_destroy_at.as_deref(),
        ws.spec.auto_destroy_activity_duration.as_deref(),
        ws.status
            .as_ref()
            .and_then(|s| s.latest_change_at.as_deref())
            .or(created.as_deref()),
    );
    let Some(due) = due else {
        return Ok(Action::await_change());
    };
    let now = Timestamp::now();
    if due > now {
        let wait = due.duration_since(now).unsigned_abs();
        return Ok(Action::requeue(wait.min(Duration::from_secs(3600))));
    }
    let key = due.to_string();
    if ws.annotations().get(ANNOTATION_AUTO_DESTROY_QUEUED) == Some(&key) {
        return Ok(Action::await_change());
    }
    let ns = ws.namespace().unwrap_or_default();
    let Some(ws_id) = ws.labels().get(LABEL_ID).cloned() else {
        return Ok(Action::await_change());
    };
    let cv = super::current_configuration(&ctx.base.client, &ns, &ws_id).await?;
    let regarding = ws.object_ref(&());
    let Some(cv) = cv else {
        publish_event(
            &ctx.recorder,
            &regarding,
            EventType::Warning,
            "AutoDestroySkipped",
            "AutoDestroy",
            "auto-destroy is due but the workspace has no uploaded configuration version".into(),
        )
        .await;
        mark(&ctx, &ws, &key).await?;
        return Ok(Action::await_change());
    };
    // Claim the due time first: of two claims (a restart, a second replica) one wins.
    if !mark(&ctx, &ws, &key).await? {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let id = new_id(IdKind::Run);
    let r = Run {
        metadata: super::new_run_meta(&ws, &id, &[]),
        spec: RunSpec {
            workspace: ws.name_any(),
            configuration_version: cv.name_any(),
            is_destroy: true,
            refresh: true,
            auto_apply: true,
            message: format!("Triggered by auto-destroy (due {key})"),
            source: SOURCE.to_owned(),
            ..RunSpec::default()
        },
        status: None,
    };
    let runs: Api<Run> = Api::namespaced(ctx.base.client.clone(), &ns);
    runs.create(&PostParams::default(), &r).await?;
    publish_event(
        &ctx.recorder,
        &regarding,
        EventType::Normal,
        "AutoDestroyQueued",
        "AutoDestroy",
        format!("auto-destroy was due at {key}: destroy run {id} queued"),
    )
    .await;
    Ok(Action::await_change())
}

/// Records `key` as queued on the workspace (false: it changed meanwhile).
async fn mark(ctx: &Ctx, ws: &Workspace, key: &str) -> Result<bool, Error> {
    let api: Api<Workspace> =
        Api::namespaced(ctx.base.client.clone(), &ws.namespace().unwrap_or_default());
    super::annotate_workspace(&api, ws, json!({ANNOTATION_AUTO_DESTROY_QUEUED: key})).await
}
