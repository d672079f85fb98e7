//! terrace's controllers and the in-Pod test runner.
//!
//! The operator watches terrace objects through kube-runtime and owns their status. It
//! runs the Organization controller (namespace, default project, status), the ID
//! controllers (every namespaced kind gets its `terrace.dev/id` and organization labels)
//! the Workspace controller (derived status) and the TestRun controller (one Pod per module
//! test run, see [`testrun`]), concurrently, all sharing one
//! [`Context`] and one shutdown signal.
#![forbid(unsafe_code)]

pub mod conditions;
pub mod error;
pub mod ids;
pub mod organization;
pub mod rules;
pub mod runner;
pub mod settings;
pub mod testpod;
pub mod testrun;
pub mod workspace;

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use terrace_crds::constants::FIELD_MANAGER_OPERATOR;

pub use error::Error;
pub use settings::Settings;

/// Shared state of every reconciler.
pub struct Context {
    pub client: kube::Client,
    pub settings: Settings,
}

/// Runs every controller until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // Every controller waits on the same signal.
    let shutdown = shutdown.boxed().shared();
    let ctx = Arc::new(Context { client, settings });
    let (orgs, orgs_driver) = ids::Organizations::new(ctx.client.clone());
    let orgs_driver = futures::stream::once(orgs_driver)
        .take_until(shutdown.clone())
        .for_each(|()| async {});
    tokio::join!(
        organization::run(ctx.clone(), shutdown.clone()),
        ids::run(ctx.clone(), orgs.clone(), shutdown.clone()),
        workspace::run(ctx.clone(), orgs.clone(), shutdown.clone()),
        testrun::run(ctx, orgs, shutdown),
        orgs_driver,
    );
}

/// The Event recorder of the operator's controllers. The reporting instance is the Pod
/// name when the Deployment passes it in `POD_NAME`, else the controller name.
pub(crate) fn new_recorder(client: &kube::Client) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER_OPERATOR.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

/// Records an Event about `regarding`. A failed Event is logged: it must not fail the
/// reconcile that produced it.
pub(crate) async fn publish_event(
    recorder: &Recorder,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, regarding).await {
        tracing::debug!(error = %e, reason, "recording event");
    }
}
