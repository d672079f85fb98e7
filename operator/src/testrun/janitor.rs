//! The janitor: a test Pod that is being deleted while its TestRun is gone (deleted with
//! background propagation) keeps its finalizer forever unless someone removes it. This
//! small controller over test Pods does, once the owning TestRun is gone. It drives the
//! test Pod feed the TestRun controller follows.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use terrace_crds::TestRun;

use super::archive::release;
use crate::testpod::FINALIZER;
use crate::watch::Feed;
use crate::{Context, Error};

struct JanitorContext {
    base: Arc<Context>,
    runs: Store<TestRun>,
}

/// The janitor over the Pods of `pods`, run until `shutdown` resolves; `runs` is the
/// TestRun controller's cache.
pub(super) fn controller(
    base: Arc<Context>,
    runs: Store<TestRun>,
    pods: Feed<Pod>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let store = pods.store();
    crate::metrics::bounded(Controller::for_stream(pods.into_stream(), store))
        .graceful_shutdown_on(shutdown)
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_secs(10)),
            Arc::new(JanitorContext { base, runs }),
        )
        .for_each(|_| async {})
}

/// The janitor: a test Pod that is being deleted while its TestRun is gone (deleted with
/// background propagation) loses its finalizer, else it would stay forever.
async fn reconcile(pod: Arc<Pod>, ctx: Arc<JanitorContext>) -> Result<Action, Error> {
    let (base, store) = (&ctx.base, &ctx.runs);
    if pod.metadata.deletion_timestamp.is_none() || !pod.finalizers().iter().any(|f| f == FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let ns = pod.namespace().unwrap_or_default();
    let Some(owner) = pod.owner_references().iter().find(|o| o.kind == "TestRun") else {
        // Not ours to keep.
        release(&Api::namespaced(base.client.clone(), &ns), &pod).await?;
        return Ok(Action::await_change());
    };
    let cached = store
        .get(&ObjectRef::new(&owner.name).within(&ns))
        .is_some_and(|r| r.uid().as_deref() == Some(owner.uid.as_str()));
    if cached {
        // The TestRun controller handles it.
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let runs: Api<TestRun> = Api::namespaced(base.client.clone(), &ns);
    let live = runs.get_opt(&owner.name).await?;
    if live.is_some_and(|r| r.uid().as_deref() == Some(owner.uid.as_str())) {
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    release(&Api::namespaced(base.client.clone(), &ns), &pod).await?;
    Ok(Action::await_change())
}
