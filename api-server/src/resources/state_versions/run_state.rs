//! The state of a run's workspace as its Pod reads and writes it (`GET`/`PUT
//! /api/v2/runner/runs/:id/state`, authorized by the run token, see
//! [`crate::runner_auth`]). The engine in the Pod works on a local state file; the runner
//! downloads the current state before and uploads the new one after the apply. The new
//! state becomes a state version of the run (`run` relationship); it becomes current when
//! its serial and lineage succeed the current version's, and is kept otherwise (see
//! [`write`]).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::header;
use kube::api::PostParams;
use terrace_crds::blobs::state_key;
use terrace_crds::constants::LABEL_WORKSPACE_ID;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::lock::LockHolder;
use terrace_crds::run::RunState;
use terrace_crds::state::{self, StateVersionState};
use terrace_crds::{Run, StateVersion, StateVersionSpec, Workspace};

use super::commit::state_error;
use super::commit::{self, Writer};
use super::create::{discard, store_blob};
use super::state_bytes;
use crate::index::Indexed;
use crate::prelude::*;
use crate::runner_auth::RunnerRun;

/// The run's workspace (404 when it is gone).
fn workspace_of(state: &AppState, run: &Run) -> Result<Arc<Workspace>, ApiError> {
    let idx = state.index.read();
    let ns = run.namespace().unwrap_or_default();
    run.labels()
        .get(LABEL_WORKSPACE_ID)
        .and_then(|id| idx.workspace(id))
        .filter(|w| w.name_any() == run.spec.workspace)
        .cloned()
        .or_else(|| {
            Workspace::in_namespace(&idx, &ns)
                .into_iter()
                .find(|w| w.name_any() == run.spec.workspace)
        })
        .ok_or_else(|| ApiError::not_found("the run's workspace is gone"))
}

/// `GET …/state`: the current state file, or 204 when the workspace has none.
pub async fn read(
    State(state): State<AppState>,
    RunnerRun { run, .. }: RunnerRun,
) -> Result<Response, ApiError> {
    let ws = workspace_of(&state, &run)?;
    let current = state.index.read().current_state_version(&ws).cloned();
    let Some(v) = current else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let bytes = state_bytes(&state, &v).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

/// `PUT …/state`: the state after the run's apply, as a new state version of the run.
/// It becomes current when it succeeds the current state; the run's lock is not
/// required (force-unlock of an active run's lock is refused, but whatever happened to
/// the lock, the apply happened). A state that cannot become current (someone else wrote
/// a later one meanwhile) is still kept, discarded with its bytes and the reason, and the
/// run is told which version holds it: an apply's state is never dropped.
pub async fn write(
    State(state): State<AppState>,
    RunnerRun { id, run }: RunnerRun,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let s = RunState::of(run.status.as_ref().and_then(|s| s.status.as_deref()));
    if run.spec.assessment {
        return Err(ApiError::conflict("a health assessment never writes state"));
    }
    if s != Ok(RunState::Applying) {
        return Err(ApiError::conflict(
            "only a run that is applying writes state",
        ));
    }
    let bytes = body.map_err(|e| match e.status().as_u16() {
        413 => ApiError::TooLarge(format!("the state is over the limit: {e}").into()),
        _ => ApiError::bad_body(format!("unreadable body: {e}")),
    })?;
    let limit = state.settings.max_state_bytes as u64;
    state::check_size(bytes.len() as u64, limit).map_err(state_error)?;
    let summary = state::check_state(&bytes, None).map_err(state_error)?;
    let ws = workspace_of(&state, &run)?;
    let me = LockHolder::Run(id.clone());
    let md5 = state::md5_hex(&bytes);
    let ns = ws.namespace().unwrap_or_default();
    let org = state
        .index
        .read()
        .organization_of_namespace(&ns)
        .map(|o| o.name_any())
        .unwrap_or_default();
    let sv_id = new_id(IdKind::StateVersion);
    let sv = StateVersion {
        metadata: kube::api::ObjectMeta {
            owner_references: ws.controller_owner_ref(&()).map(|o| vec![o]),
            finalizers: state
                .blobs
                .is_external()
                .then(|| vec![terrace_crds::blobs::FINALIZER.to_owned()]),
            ..write::new_meta(
                &sv_id,
                &ns,
                org,
                &[(LABEL_WORKSPACE_ID, id_of(ws.as_ref()))],
            )
        },
        spec: StateVersionSpec {
            workspace: ws.name_any(),
            serial: summary.serial,
            lineage: summary.lineage.clone(),
            md5,
            force: false,
            created_by: Some(me.annotation()),
            run: Some(id),
        },
        status: None,
    };
    let api = write::api::<StateVersion>(&state, &ns);
    let created = api.create(&PostParams::default(), &sv).await?;
    let created = write::patch_status(
        &api,
        &created.name_any(),
        json!({"id": sv_id, "workspaceName": ws.spec.name, "status": StateVersionState::Pending.as_str()}),
    )
    .await?;
    let blob = match store_blob(&state, &created, state_key(&sv_id), bytes, "state").await {
        Ok(b) => b,
        Err(e) => {
            discard(&state, &created, &commit::reason(&e)).await;
            return Err(e);
        }
    };
    match commit::commit(&state, &created, blob.clone(), summary, Writer::Run).await {
        Ok(done) => {
            write::wait_seen(&state, &done).await;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Err(refused) => {
            let e = ApiError::from(refused);
            let why = commit::reason(&e);
            let kept = commit::keep(&state, &created, blob, &why).await?;
            write::wait_seen(&state, &kept).await;
            Err(ApiError::conflict(format!(
                "{why}; the apply's state is kept as state version {sv_id} (GET /api/v2/state-versions/{sv_id}/download; push it again with `terraform state push` once the workspace is sorted out)"
            )))
        }
    }
}
