//! Kubernetes Events of the operator's controllers: the recorder, publishing that never
//! fails a reconcile, and the one stall/recover pair every controller records when its
//! kstatus conditions move into or out of `Stalled` (see
//! [`crate::conditions::stall_transition`]).

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use terrace_crds::constants::FIELD_MANAGER_OPERATOR;

use crate::conditions::{REASON_RECOVERED, StallTransition, stall_transition};

/// The Event recorder of the operator's controllers. The reporting instance is the Pod
/// name when the Deployment passes it in `POD_NAME`, else the controller name.
pub(crate) fn new_recorder(client: &kube::Client) -> Recorder {
    Recorder::new(client.clone(), reporter())
}

fn reporter() -> Reporter {
    Reporter {
        controller: FIELD_MANAGER_OPERATOR.to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    }
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

/// Records an Event that its object never has twice (its ID assigned or replaced), as the
/// recorder's would read, without the recorder: to count repeats as a series, it keeps
/// every Event it published for six minutes and walks them all on each publish, so a bulk
/// `kubectl apply` of 5,000 workspaces held ~14 MB of Events there (the operator's memory
/// on a real cluster, issue 43) and made each publish cost in proportion to the batch.
/// A failed Event is logged, as [`publish_event`]'s.
pub(crate) async fn publish_once(
    client: &kube::Client,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = once_event(&reporter(), regarding, type_, reason, action, note);
    let ns = regarding.namespace.as_deref().unwrap_or("default");
    let api: kube::Api<K8sEvent> = kube::Api::namespaced(client.clone(), ns);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(error = %e, reason, "recording event");
    }
}

/// The events.k8s.io Event [`publish_once`] creates: the fields and name the recorder
/// gives a new Event (`<object>.<nanoseconds in hex>`).
fn once_event(
    reporter: &Reporter,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) -> K8sEvent {
    let now = k8s_openapi::jiff::Timestamp::now();
    let controller = &reporter.controller;
    K8sEvent {
        action: Some(action.to_owned()),
        reason: Some(reason.to_owned()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        note: Some(note),
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(format!(
                "{}.{:x}",
                regarding.name.as_ref().unwrap_or(controller),
                now.as_nanosecond()
            )),
            ..Default::default()
        },
        reporting_controller: Some(controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| controller.clone()),
        ),
        type_: Some(
            match type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_owned(),
        ),
        ..Default::default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_published_once_reads_as_the_recorders_would() {
        let regarding = ObjectReference {
            api_version: Some("terrace.dev/v1alpha1".into()),
            kind: Some("Workspace".into()),
            name: Some("networking".into()),
            namespace: Some("acme".into()),
            uid: Some("0b1c".into()),
            ..Default::default()
        };
        let reporter = Reporter {
            controller: FIELD_MANAGER_OPERATOR.to_owned(),
            instance: None,
        };
        let e = once_event(
            &reporter,
            &regarding,
            EventType::Normal,
            "IdAssigned",
            "AssignId",
            "assigned ID ws-abc".into(),
        );
        let name = e.metadata.name.as_deref().unwrap_or_default();
        let suffix = name.strip_prefix("networking.").unwrap_or_default();
        assert!(
            !suffix.is_empty() && suffix.chars().all(|c| c.is_ascii_hexdigit()),
            "{name}"
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("acme"));
        assert_eq!(e.regarding.as_ref(), Some(&regarding));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reason.as_deref(), Some("IdAssigned"));
        assert_eq!(e.action.as_deref(), Some("AssignId"));
        assert_eq!(e.note.as_deref(), Some("assigned ID ws-abc"));
        assert_eq!(
            e.reporting_controller.as_deref(),
            Some(FIELD_MANAGER_OPERATOR)
        );
        // Without a Pod name the instance is the controller, as the recorder's.
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some(FIELD_MANAGER_OPERATOR)
        );
        assert!(e.event_time.is_some() && e.series.is_none());
        let warning = once_event(
            &Reporter {
                instance: Some("terrace-operator-0".into()),
                ..reporter
            },
            &regarding,
            EventType::Warning,
            "DuplicateId",
            "AssignId",
            String::new(),
        );
        assert_eq!(warning.type_.as_deref(), Some("Warning"));
        assert_eq!(
            warning.reporting_instance.as_deref(),
            Some("terrace-operator-0")
        );
    }
}
