//! TFE's backing data actions on a state version:
//! `POST /state-versions/:id/actions/{soft_delete,restore,permanently_delete}_backing_data`.
//!
//! Soft delete hides a finalized version's data (downloads answer 404; it stays in the
//! blob store); restore brings it back (the same download URL works again); permanent
//! deletion removes it from the blob store, after which nothing brings it back (409
//! "transition not allowed"). The workspace's current state cannot be deleted. A soft
//! delete not restored is made permanent by the operator after its grace period
//! (`--state-soft-delete-grace-hours`). Managing state data needs `read-state` and the
//! `delete` right on the workspace (an admin's, as in TFE).

use terrace_crds::StateVersion;
use terrace_crds::state::{
    BackingDataAction, StateVersionState, backing_data_marks, backing_data_transition,
};

use super::{READ_STATE, readable, state_of, store_of};
use crate::blobs::BlobStore;
use crate::prelude::*;

/// The action of the `:action` path segment (404 for anything else).
fn action_of(name: &str) -> Result<BackingDataAction, ApiError> {
    match name {
        "soft_delete_backing_data" => Ok(BackingDataAction::SoftDelete),
        "restore_backing_data" => Ok(BackingDataAction::Restore),
        "permanently_delete_backing_data" => Ok(BackingDataAction::PermanentlyDelete),
        _ => Err(ApiError::not_found(format!(
            "no state version action {name:?}; one of: soft_delete_backing_data, restore_backing_data, permanently_delete_backing_data"
        ))),
    }
}

/// `POST /state-versions/:id/actions/:action`: 204 when done.
pub async fn act(
    Authed { state, caller }: Authed,
    Path((id, action)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let action = action_of(&action)?;
    let (v, ws) = readable(&state, &caller, &id, READ_STATE).await?;
    state
        .require_or_403(
            &caller,
            &ws.check("delete"),
            "managing a state version's data needs the delete right on the workspace",
        )
        .await?;
    let current = state
        .index
        .read()
        .current_state_version(&ws.obj)
        .is_some_and(|c| c.uid() == v.uid());
    let api = write::api::<StateVersion>(&state, &ws.ns);
    let now = jiff::Timestamp::now();
    let done = write::guarded_status_patch(&api, (*v).clone(), |cur| {
        let to = backing_data_transition(state_of(cur), action, current)
            .map_err(|e| ApiError::conflict(e.to_string()))?;
        Ok(Some(backing_data_marks(to, &now)))
    })
    .await?;
    if state_of(&done) == StateVersionState::BackingDataPermanentlyDeleted {
        delete_data(&state, &done).await?;
    }
    write::wait_seen(&state, &done).await;
    tracing::info!(namespace = %ws.ns, state_version = %id, to = state_of(&done).as_str(), "state data");
    Ok(StatusCode::NO_CONTENT)
}

/// Removes the version's state and JSON state from the blob store.
async fn delete_data(state: &AppState, v: &StateVersion) -> Result<(), ApiError> {
    let store = store_of(state, v);
    let blobs = v.status.iter().flat_map(|s| s.blobs());
    for blob in blobs {
        match store.delete(&blob.key).await {
            Ok(()) | Err(crate::blobs::BlobError::NotFound(_)) => {}
            Err(e) => return Err(crate::blobs::api_error("the state data", e)),
        }
    }
    Ok(())
}
