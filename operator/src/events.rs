//! Kubernetes Events of the operator's controllers: the recorder, publishing that never
//! fails a reconcile, and the one stall/recover pair every controller records when its
//! kstatus conditions move into or out of `Stalled` (see
//! [`crate::conditions::stall_transition`]).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use terrace_crds::constants::FIELD_MANAGER_OPERATOR;

use crate::conditions::{REASON_RECOVERED, StallTransition, stall_transition};

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

/// Records a Warning Event (reason: the Stalled reason) when `next` shows the object
/// newly stalled, or stalled for another reason, and a Normal `Recovered` Event when it
/// no longer is.
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
