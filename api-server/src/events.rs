//! Kubernetes Events for what the API does to objects (lock, unlock, force-unlock, remote
//! state consumer changes), so `kubectl describe workspace` and `kubectl get events` tell
//! who did what. Published in the background: a failed Event never fails a request.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use terrace_crds::Workspace;
use terrace_crds::constants::FIELD_MANAGER_API;

/// A recorder reporting as the API server (instance: `$POD_NAME`, else the host name).
pub fn recorder(client: kube::Client) -> Recorder {
    let instance = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok());
    Recorder::new(
        client,
        Reporter {
            controller: FIELD_MANAGER_API.to_owned(),
            instance,
        },
    )
}

/// Records a Normal event `reason` with `note` on a workspace.
pub fn workspace_event(recorder: &Recorder, ws: &Workspace, reason: &'static str, note: String) {
    publish(
        recorder,
        ws.object_ref(&()),
        EventType::Normal,
        reason,
        note,
    );
}

/// Records a Warning event `reason` with `note` on any object.
pub fn warning<K: Resource<DynamicType = ()>>(
    recorder: &Recorder,
    obj: &K,
    reason: &'static str,
    note: String,
) {
    publish(
        recorder,
        obj.object_ref(&()),
        EventType::Warning,
        reason,
        note,
    );
}

fn publish(
    recorder: &Recorder,
    reference: k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &'static str,
    note: String,
) {
    let recorder = recorder.clone();
    tokio::spawn(async move {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::debug!(error = %e, "could not record an event");
        }
    });
}
