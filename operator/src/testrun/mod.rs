//! The TestRun controller (DESIGN.md §3): one Pod per run, followed until the run's
//! outcome is recorded in its status. One reconcile is observe → decide → act, each step
//! a module of its own:
//!
//! - [`observe`]: the TestRun (from the controller's cache) and its Pod (read from the
//!   API, named deterministically by [`testpod::pod_name`]) reduced to a
//!   [`PodObs`](observe::PodObs) — pure;
//! - [`decide`]: the run's state, its cancel requests and that observation turned into a
//!   [`Plan`](decide::Plan) — pure;
//! - act, here: delete the Pod (cancel: with a grace period; force-cancel: at once),
//!   write the new status ([`status`], through [`terrace_crds::testrun::transition`] with
//!   server-side apply) and record an Event, and only then archive the engine's log and
//!   release the Pod's finalizer ([`archive`]); a pending run without a Pod goes through
//!   [`admit`].
//!
//! Everything is derived from the TestRun's status and the Pod, so an operator restarted
//! at any point neither loses a run nor starts a second Pod (a Pod create answering 409
//! means it already exists).
//!
//! Admission ([`admit`]) reads the run's configuration version, module and test variables
//! from the catalog's caches, never from the API, and decides with the pure
//! [`admit::admission`]; configuration versions and modules changing wake the pending
//! runs naming them. Concurrency: runs in `queued` or `running` count against the global
//! limit ([`Settings::test_run_concurrency`](crate::Settings::test_run_concurrency)) and
//! their organization's (`spec.settings.testRuns.concurrency`); a waker starts the oldest
//! waiting runs that fit when slots free up ([`slots`]).
//!
//! Pods of TestRuns deleted with background propagation would keep their finalizer
//! forever; a small [`janitor`] over test Pods removes it once the owning TestRun is gone.
//!
//! The automatic run of an upload is created by a controller of its own over
//! configuration versions ([`automatic`]), after a grace period in which an explicit run
//! may claim the configuration version instead.

pub mod admit;
pub mod archive;
pub mod automatic;
mod context;
pub mod decide;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod janitor;
pub mod observe;
pub mod slots;
pub mod status;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DeleteParams, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use terrace_crds::ids::IdKind;
use terrace_crds::testrun::{CancelRequest, TestRunState, transition};
use terrace_crds::{ConfigurationVersion, RegistryModule, TestRun};

use crate::catalog::Catalog;
use crate::events::publish_event;
use crate::identity::Organizations;
use crate::testpod::{self, LABEL_TEST_RUN};
use crate::watch::Feed;
use crate::{Context, Error, Shutdown};
use archive::{archive_with_retries, release};
use context::RunContext;
use decide::decide;
use observe::{PodObs, observe_pod_as};
use status::{next_status, record_event, write_status};

pub use decide::{CANCEL_GRACE_SECONDS, MSG_POD_DELETED};

/// The TestRun controller and the test Pod janitor, run until `shutdown` resolves. It
/// subscribes to the catalog's configuration versions and modules, so call it before the
/// catalog runs.
pub fn controller(
    ctx: Arc<Context>,
    orgs: Organizations,
    catalog: &mut Catalog,
    shutdown: Shutdown,
) -> impl Future<Output = ()> + Send + 'static {
    let client = &ctx.client;
    let runs = Feed::<TestRun>::new(client, (), watcher::Config::default());
    let mut pods = Feed::<Pod>::new(
        client,
        (),
        watcher::Config::default().labels(LABEL_TEST_RUN),
    );
    // The runs' token Secrets are not watched: nothing reacts to them, and a cluster-wide
    // Secret watch would need list/watch on every Secret of the cluster.
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let store = runs.store();
    let automatic = crate::or_idle(
        automatic::controller(
            ctx.clone(),
            orgs.clone(),
            catalog,
            store.clone(),
            shutdown.clone(),
        ),
        "automatic test runs",
    );
    let (by_cv, by_module) = (store.clone(), store.clone());
    let controller = Controller::for_stream(runs.into_stream(), store.clone())
        .owns_stream(pods.subscribe())
        .watches_stream_with(
            catalog.subscribe(IdKind::ConfigurationVersion),
            move |cv: DynamicObject| {
                admit::runs_waiting_for(&by_cv.state(), &cv, admit::Input::ConfigurationVersion)
            },
            ApiResource::erase::<ConfigurationVersion>(&()),
        )
        .watches_stream_with(
            catalog.subscribe(IdKind::RegistryModule),
            move |m: DynamicObject| {
                admit::runs_waiting_for(&by_module.state(), &m, admit::Input::Module)
            },
            ApiResource::erase::<RegistryModule>(&()),
        )
        .reconcile_on(woken);
    let rctx = Arc::new(RunContext {
        base: ctx.clone(),
        orgs,
        catalog: catalog.stores(),
        recorder: crate::events::new_recorder(client),
        runs: store.clone(),
        admitted: tokio::sync::Mutex::new(HashSet::new()),
        archive_failures: std::sync::Mutex::new(HashMap::new()),
        slot_freed: tokio::sync::Notify::new(),
        wake,
    });
    crate::metrics::observe_test_runs(store.clone());
    let waker = {
        let rctx = rctx.clone();
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                () = slots::wake_waiting(&rctx) => {}
                () = shutdown => {}
            }
        }
    };
    let main = crate::metrics::TEST_RUN.run(
        controller.graceful_shutdown_on(shutdown.clone()),
        reconcile,
        rctx,
    );
    let janitor = janitor::controller(ctx, store, pods, shutdown);
    async move {
        tokio::join!(main, janitor, waker, automatic);
    }
}

async fn reconcile(run: Arc<TestRun>, ctx: Arc<RunContext>) -> Result<Action, Error> {
    let ns = run
        .namespace()
        .ok_or_else(|| Error::Invalid("test run without namespace".into()))?;
    let uid = run
        .uid()
        .ok_or_else(|| Error::Invalid("test run without uid".into()))?;
    let state = TestRunState::of(run.status.as_ref()).map_err(|e| Error::Invalid(e.to_string()))?;
    let cancel = CancelRequest::of(run.status.as_ref());
    let pod_name = testpod::pod_name(&run.name_any());
    let pods: Api<Pod> = Api::namespaced(ctx.base.client.clone(), &ns);
    let me = ObjectRef::from_obj(run.as_ref());
    let pod = if run.meta().deletion_timestamp.is_some() {
        // A run being deleted only lets go of its Pod.
        if let Some(p) = pods.get_opt(&pod_name).await? {
            release(&pods, &p).await?;
        }
        return Ok(Action::await_change());
    } else {
        pods.get_opt(&pod_name).await?
    };
    let obs = observe_pod_as(
        pod.as_ref(),
        &uid,
        Timestamp::now(),
        "test Pod",
        ctx.base.settings.pod_start_timeout,
    );
    let plan = decide(state, cancel, &obs);

    if plan.create_pod {
        return admit::admit(&run, &ctx, &ns, &pod_name, me).await;
    }
    let regarding = run.object_ref(&());
    let mut final_now = state.is_final();
    // Why the run errored, for the line terrace adds to its log.
    let mut cause: Option<String> = None;
    if let Some(grace) = plan.delete_pod {
        let dp = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace).unwrap_or(0)),
            ..DeleteParams::default()
        };
        match pods.delete(&pod_name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        if cancel != CancelRequest::None && !state.is_final() {
            let note = if grace == 0 {
                format!("force-canceling: deleting Pod {pod_name} at once")
            } else {
                format!("canceling: deleting Pod {pod_name} with a {grace}s grace period")
            };
            publish_event(
                &ctx.recorder,
                &regarding,
                EventType::Normal,
                "Canceling",
                "Cancel",
                note,
            )
            .await;
        }
    }
    if let Some(t) = &plan.transition {
        match transition(state, cancel, t) {
            Ok(step) => {
                let status = next_status(
                    run.status.as_ref(),
                    &step,
                    plan.summary.as_ref(),
                    pod.as_ref().map(|_| pod_name.clone()),
                    run.meta().generation,
                    Timestamp::now(),
                );
                write_status(&ctx, &run, &status).await?;
                if step.to == TestRunState::Errored {
                    cause = step.message.clone();
                }
                if step.to != state {
                    record_event(&ctx, &regarding, &step, plan.summary.as_ref()).await;
                }
                if step.to.is_final() {
                    final_now = true;
                    if matches!(state, TestRunState::Queued | TestRunState::Running) {
                        ctx.slot_freed.notify_one();
                    }
                    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), &ns);
                    match secrets.delete(&pod_name, &DeleteParams::default()).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => tracing::debug!(error = %e, "deleting the token secret"),
                    }
                }
            }
            Err(e) => {
                // A transition that is not allowed any more (another actor moved the run):
                // nothing to record; the next reconcile sees the new state.
                tracing::debug!(error = %e, name = %run.name_any(), "transition refused");
                if !state.is_final() {
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
            }
        }
    }
    if plan.release
        && let Some(p) = &pod
    {
        if final_now && !archive_with_retries(&ctx, &run, &pods, &pod_name, cause.as_deref()).await
        {
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        release(&pods, p).await?;
    }
    // A Pod no node took: the test run says so (it reads queued until the Pod starts).
    if !final_now && let PodObs::Present(p) = &obs {
        let message = run.status.as_ref().and_then(|s| s.message.as_deref());
        let note = crate::pod_parts::WaitNote {
            under: None,
            written: run.status.as_ref().is_some_and(|s| s.wait_note.is_some()),
        };
        crate::pod_parts::note_waiting(
            &ctx.base.client,
            run.as_ref(),
            message,
            p.waiting.as_deref(),
            p.waited.as_deref(),
            note,
        )
        .await?;
        if p.waiting.is_some() {
            // Looked at again soon: the start timeout is measured on reconciles.
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
    }
    Ok(match (&obs, plan.release) {
        // Waiting for the engine to end before archiving its log: its Pod's status
        // changing wakes the run, this is the safety net of an overdue deletion.
        (PodObs::Present(p), false) if p.finalizer && (final_now || p.deleting) => {
            Action::requeue(Duration::from_secs(15))
        }
        _ if state.is_final() && !plan.release => Action::await_change(),
        _ => Action::requeue(Duration::from_secs(60)),
    })
}
