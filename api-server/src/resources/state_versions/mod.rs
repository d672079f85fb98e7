//! State versions (the terraform `cloud` backend's state): create, upload, read, list,
//! download, outputs, backing data actions.
//!
//! A state version is a StateVersion object in the organization's namespace, owned by its
//! Workspace; the state file (which holds secrets) is in the blob store, owned by the
//! StateVersion, never in the object, a log line or an Event. The terraform CLI creates a
//! version without the state, then PUTs the state to the one-time
//! `hosted-state-upload-url` (and the `terraform show -json` form to
//! `hosted-json-state-upload-url`); the version is `pending` until the state arrives and
//! checks out (MD5, a state file of its serial and lineage), then `finalized`. The current
//! state of a workspace is its latest finalized version.
//!
//! Rights, as TFE's three state levels, are verbs on the workspace: `read-outputs`
//! (output values; sensitive ones need `read-state`), `read-state` (versions, downloads),
//! `write-state` (create; only the holder of the workspace's lock may, and its serial and
//! lineage must follow the current state's unless forced). A caller who may not read the
//! workspace gets 404 on all of it.

mod backing_data;
mod commit;
mod create;
#[cfg(test)]
mod integrity_tests;
mod outputs;
mod read;
mod resources;
mod run_state;
#[cfg(test)]
mod tests;

use axum::extract::DefaultBodyLimit;
use terrace_crds::{StateVersion, Workspace};
use tower_http::limit::RequestBodyLimitLayer;

use crate::access::Need;
pub use crate::documents::state::{render, state_bytes, state_of, store_of};
use crate::index::Indexed;
use crate::prelude::*;

/// Verb to read output values (non-sensitive ones).
pub const READ_OUTPUTS: &str = "read-outputs";
/// Verb to read state versions, their downloads and sensitive output values.
pub const READ_STATE: &str = "read-state";
/// Verb to create state versions.
pub const WRITE_STATE: &str = "write-state";

/// The 403 detail of a caller without [`READ_OUTPUTS`].
const READ_OUTPUTS_DENIED: &str =
    "reading state outputs needs the read-outputs right on the workspace";

/// What the documents of a workspace's state (versions, outputs, resources) need:
/// [`READ_OUTPUTS`] on the workspace, 403 without it.
pub struct ReadOutputs;
impl Need for ReadOutputs {
    const VERB: Option<&'static str> = Some(READ_OUTPUTS);
    const DENY: Deny = Deny::Forbidden(READ_OUTPUTS_DENIED);
}

/// Path prefix of the state upload URLs.
pub const STATE_UPLOAD_PATH: &str = "/api/v2/uploads/v1/state";
/// Path prefix of the JSON state upload URLs.
pub const JSON_STATE_UPLOAD_PATH: &str = "/api/v2/uploads/v1/json-state";

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/state-versions",
            post(create::create).get(read::list_of_workspace),
        )
        .route(
            "/api/v2/workspaces/{id}/current-state-version",
            get(read::current),
        )
        .route("/api/v2/state-versions", get(read::list))
        .route("/api/v2/state-versions/{sv}", get(read::show))
        .route(
            "/api/v2/state-versions/{sv}/download",
            get(read::download::<false>),
        )
        .route(
            "/api/v2/state-versions/{sv}/actions/{action}",
            post(backing_data::act),
        )
        .route(
            "/api/v2/state-versions/{sv}/json-download",
            get(read::download::<true>),
        )
        .route(
            "/api/v2/state-versions/{sv}/outputs",
            get(outputs::of_version),
        )
        .route(
            "/api/v2/workspaces/{id}/current-state-version-outputs",
            get(outputs::current),
        )
        .route("/api/v2/state-version-outputs/{out}", get(outputs::show))
        .route(
            "/api/v2/workspaces/{id}/resources",
            get(resources::list_resources),
        )
}

/// The upload routes, with the state size limit instead of the global body limit. The
/// upload URLs apply it themselves while they read, so a state over it still discards its
/// version (a layer would answer 413 before the handler and leave the version pending).
pub fn upload_router(max_state_bytes: usize) -> Router<AppState> {
    // Room for the request beyond the state: the limit itself answers 413 in our words.
    let limit = max_state_bytes.saturating_add(1);
    let uploads = Router::new()
        .route(
            &format!("{STATE_UPLOAD_PATH}/{{token}}"),
            put(create::upload_state),
        )
        .route(
            &format!("{JSON_STATE_UPLOAD_PATH}/{{token}}"),
            put(create::upload_json_state),
        )
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .route(
            "/api/v2/runner/runs/{id}/state",
            get(run_state::read).put(run_state::write),
        )
        .layer(DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit))
        .merge(uploads)
}

/// 404 for a state version.
pub fn not_found() -> ApiError {
    ApiError::not_found("state version not found")
}

/// The workspace of a state version, with its organization.
fn workspace_of(state: &AppState, v: &StateVersion) -> Option<Located<Workspace>> {
    let idx = state.index.read();
    let by_label = v
        .labels()
        .get(terrace_crds::constants::LABEL_WORKSPACE_ID)
        .and_then(|id| idx.workspace(id))
        .filter(|w| w.name_any() == v.spec.workspace)
        .cloned();
    let ws = match by_label {
        Some(w) => w,
        // Written by hand (kubectl): found by object name.
        None => Workspace::in_namespace(&idx, &v.namespace().unwrap_or_default())
            .into_iter()
            .find(|w| w.name_any() == v.spec.workspace)?,
    };
    crate::access::located(&idx, ws)
}

/// The state version `id` and its workspace, if the caller may read the workspace (404
/// otherwise) and do `verb` on it (403 otherwise).
pub async fn readable(
    state: &AppState,
    caller: &Caller,
    id: &str,
    verb: &'static str,
) -> Result<(Arc<StateVersion>, Located<Workspace>), ApiError> {
    let v = state
        .index
        .read()
        .state_versions()
        .get(id)
        .cloned()
        .ok_or_else(not_found)?;
    let ws = workspace_of(state, &v).ok_or_else(not_found)?;
    state
        .require(caller, &ws.check("get"), Deny::NotFound, not_found)
        .await?;
    require_verb(state, caller, &ws, verb).await?;
    Ok((v, ws))
}

/// 403 unless the caller may do `verb` on the workspace.
pub async fn require_verb(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    verb: &'static str,
) -> Result<(), ApiError> {
    let detail = match verb {
        READ_OUTPUTS => READ_OUTPUTS_DENIED,
        READ_STATE => "reading state versions needs the read-state right on the workspace",
        _ => "writing state versions needs the write-state right on the workspace",
    };
    state.require_or_403(caller, &ws.check(verb), detail).await
}
