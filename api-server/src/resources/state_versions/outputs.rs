//! State version outputs: per version, the current ones of a workspace, and one by ID.
//!
//! Names, types and sensitivity are in the StateVersion's summary; values are read from
//! the state in the blob store for each answer (the object never holds them). As in TFE,
//! a sensitive value is always `null` in a workspace's current outputs (what
//! `terraform output` and remote state readers list); `GET /state-version-outputs/:id`
//! and a version's own output list (`GET /state-versions/:id/outputs`, `include=outputs`)
//! show it to callers with `read-state` and `null` to callers who may only read outputs.

use terrace_crds::Workspace;

use super::{READ_OUTPUTS, READ_STATE, ReadOutputs, not_found, readable};
use crate::documents::state::{OUTPUT_TYPE, output_values, render_output, rendered_outputs};
use crate::prelude::*;

/// `data` paged when the caller asked for a page, all on one page otherwise (the CLI
/// reads only the first page and sends no page parameters).
fn paged(q: &QueryParams, data: Vec<Value>, self_url: &str) -> Result<Doc, ApiError> {
    let page = q.page_or_whole(data.len())?;
    Ok(list_rendered(self_url, page, &data))
}

/// `GET /state-versions/:id/outputs`.
pub async fn of_version(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let (v, ws) = readable(&state, &caller, &id, READ_OUTPUTS).await?;
    // As TFE: a version's outputs show sensitive values to who may read its state.
    let show_sensitive = state.allowed(&caller, &ws.check(READ_STATE)).await?;
    let data = rendered_outputs(&state, &v, OUTPUT_TYPE, show_sensitive).await?;
    paged(&q, data, &format!("/api/v2/state-versions/{id}/outputs"))
}

/// `GET /workspaces/:id/current-state-version-outputs`: 200 with no outputs when the
/// workspace has no state.
pub async fn current(
    State(state): State<AppState>,
    f: Found<Workspace, ReadOutputs>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let cur = state.index.read().current_state_version(&f.at.obj).cloned();
    let data = match cur {
        Some(v) => rendered_outputs(&state, &v, OUTPUT_TYPE, false).await?,
        None => Vec::new(),
    };
    let self_url = format!(
        "/api/v2/workspaces/{}/current-state-version-outputs",
        f.at.id()
    );
    paged(&q, data, &self_url)
}

/// `GET /state-version-outputs/:id`: one output; a sensitive value only to callers with
/// `read-state`.
pub async fn show(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> Result<Doc, ApiError> {
    let sv_id = state
        .index
        .read()
        .state_version_of_output(&id)
        .map(|v| id_of(v.as_ref()))
        .ok_or_else(|| ApiError::not_found("state version output not found"))?;
    let (v, ws) = readable(&state, &caller, &sv_id, READ_OUTPUTS)
        .await
        .map_err(|e| match e {
            ApiError::NotFound(_) => ApiError::not_found("state version output not found"),
            other => other,
        })?;
    let o = v
        .status
        .as_ref()
        .and_then(|s| s.outputs.iter().find(|o| o.id == id))
        .cloned()
        .ok_or_else(not_found)?;
    let show_sensitive = o.sensitive && state.allowed(&caller, &ws.check(READ_STATE)).await?;
    let value = if o.sensitive && !show_sensitive {
        Value::Null
    } else {
        output_values(&state, &v)
            .await?
            .into_iter()
            .find(|(n, _)| *n == o.name)
            .map(|(_, val)| val)
            .unwrap_or(Value::Null)
    };
    Ok(Doc::ok(render_output(&o, value, OUTPUT_TYPE)))
}
