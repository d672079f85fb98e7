//! Reading state versions: one, the current one of a workspace, lists (newest first,
//! paged), and the downloads of the state file and its JSON form.
//!
//! The documents (serial, resources, output names) need `read-outputs`; the downloads,
//! which hold every value of the state, need `read-state`.

use axum::http::HeaderMap;
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use terrace_crds::state::StateVersionState;
use terrace_crds::{StateVersion, Workspace};

use super::{READ_OUTPUTS, READ_STATE, ReadOutputs, readable, render, require_verb, state_of};
use crate::capability::base_url;
use crate::prelude::*;
use crate::render::page_slice;

/// The versions of a workspace, newest first (by creation, then serial).
fn versions_of(state: &AppState, ws: &Located<Workspace>) -> Vec<Arc<StateVersion>> {
    let mut all: Vec<Arc<StateVersion>> = state
        .index
        .read()
        .state_versions_of(&ws.ns, &ws.object_name())
        .filter(|v| !id_of(v.as_ref()).is_empty())
        .cloned()
        .collect();
    all.sort_by(|a, b| {
        (&b.metadata.creation_timestamp, b.spec.serial, b.name_any()).cmp(&(
            &a.metadata.creation_timestamp,
            a.spec.serial,
            a.name_any(),
        ))
    });
    all
}

/// What state version reads can include (go-tfe's options); only `outputs` has documents
/// here (runs and users are not terrace objects yet), the others include nothing.
const INCLUDES: &[&str] = &[
    "created_by",
    "outputs",
    "run",
    "run.configuration_version",
    "run.created_by",
];

/// Adds what `out` asks of `versions` of `ws`: their outputs (sensitive values for
/// callers with `read-state`, as the version's output list).
async fn included(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    out: &mut Included,
    versions: &[Arc<StateVersion>],
) -> Result<(), ApiError> {
    if !out.wants("outputs") {
        return Ok(());
    }
    let show_sensitive = state.allowed(caller, &ws.check(READ_STATE)).await?;
    for v in versions {
        out.extend(
            crate::documents::state::rendered_outputs(
                state,
                v,
                crate::documents::state::OUTPUT_TYPE,
                show_sensitive,
            )
            .await?,
        );
    }
    Ok(())
}

/// A page of `versions` of `ws` at `self_url`.
async fn page_of(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    q: &QueryParams,
    ws: &Located<Workspace>,
    versions: &[Arc<StateVersion>],
    self_url: &str,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let mut inc = Included::asked(q, INCLUDES)?;
    included(state, caller, ws, &mut inc, page_slice(versions, page)).await?;
    let base = base_url(state, headers);
    let id = ws.id();
    Ok(inc.list(self_url, page, versions, |v, _| render(v, &id, &base, None)))
}

/// Keeps the versions in `filter[status]` when given (400 on an unknown status).
fn status_filter(q: &QueryParams, versions: &mut Vec<Arc<StateVersion>>) -> Result<(), ApiError> {
    let Some(f) = q.non_empty("filter[status]") else {
        return Ok(());
    };
    let wanted = f
        .split(',')
        .map(|s| {
            StateVersionState::parse(Some(s.trim())).ok_or_else(|| {
                ApiError::bad_parameter(
                    "filter[status]",
                    format!(
                        "unknown state version status {s:?}; one of: pending, finalized, discarded, backing_data_soft_deleted, backing_data_permanently_deleted"
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    versions.retain(|v| wanted.contains(&state_of(v)));
    Ok(())
}

/// `GET /workspaces/:id/state-versions`.
pub async fn list_of_workspace(
    State(state): State<AppState>,
    f: Found<Workspace, ReadOutputs>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&["filter[status]"])?;
    let mut versions = versions_of(&state, &f.at);
    status_filter(&q, &mut versions)?;
    let self_url = format!("/api/v2/workspaces/{}/state-versions", f.at.id());
    page_of(&state, &f.caller, &headers, &q, &f.at, &versions, &self_url).await
}

/// `GET /state-versions?filter[workspace][name]=…&filter[organization][name]=…`: both
/// filters are required (as in TFE).
pub async fn list(
    Authed { state, caller }: Authed,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&[
        "filter[workspace][name]",
        "filter[organization][name]",
        "filter[status]",
    ])?;
    let required = |key: &'static str| {
        q.non_empty(key).ok_or_else(|| {
            ApiError::bad_parameter(
                key,
                format!(
                    "{key} is required: state versions are listed per workspace (filter[workspace][name] and filter[organization][name])"
                ),
            )
        })
    };
    let org = required("filter[organization][name]")?;
    let name = required("filter[workspace][name]")?;
    let ws = state
        .readable_by_name::<Workspace>(&caller, org, name)
        .await?;
    require_verb(&state, &caller, &ws, READ_OUTPUTS).await?;
    let mut versions = versions_of(&state, &ws);
    status_filter(&q, &mut versions)?;
    let enc = |s: &str| crate::render::query_escape(s);
    let self_url = format!(
        "/api/v2/state-versions?filter%5Borganization%5D%5Bname%5D={}&filter%5Bworkspace%5D%5Bname%5D={}",
        enc(org),
        enc(name)
    );
    page_of(&state, &caller, &headers, &q, &ws, &versions, &self_url).await
}

/// `GET /workspaces/:id/current-state-version`: the latest finalized version (404 when
/// the workspace has no state: the CLI reads that as "no state yet").
pub async fn current(
    State(state): State<AppState>,
    f: Found<Workspace, ReadOutputs>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let cur = state.index.read().current_state_version(&f.at.obj).cloned();
    let v = cur.ok_or_else(|| ApiError::not_found("this workspace has no state version yet"))?;
    one(&state, &f.caller, &v, &f.at, &headers, &q).await
}

/// The document of one version, with what `q` includes.
async fn one(
    state: &AppState,
    caller: &Caller,
    v: &Arc<StateVersion>,
    ws: &Located<Workspace>,
    headers: &HeaderMap,
    q: &QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(q, INCLUDES)?;
    included(state, caller, ws, &mut inc, std::slice::from_ref(v)).await?;
    Ok(inc.show(
        StatusCode::OK,
        render(v, &ws.id(), &base_url(state, headers), None),
    ))
}

/// `GET /state-versions/:id`.
pub async fn show(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let (v, ws) = readable(&state, &caller, &id, READ_OUTPUTS).await?;
    one(&state, &caller, &v, &ws, &headers, &q).await
}

/// A download: the blob's bytes streamed from the store as they come, never cached by
/// intermediaries. A blob that does not check out mid-way ends the body with an error
/// (the connection is cut short of the Content-Length) rather than passing for whole.
fn download_response(blob: crate::blobs::BlobStream) -> Response {
    (
        StatusCode::OK,
        [
            (CONTENT_TYPE, "application/json".to_owned()),
            (CACHE_CONTROL, "no-store".to_owned()),
            (CONTENT_LENGTH, blob.size.to_string()),
        ],
        axum::body::Body::from_stream(blob.pieces),
    )
        .into_response()
}

/// `GET /state-versions/:id/download`: the state file, and (`JSON`) `…/json-download`:
/// the `terraform show -json` form, when the client uploaded one (authenticated,
/// `read-state`).
pub async fn download<const JSON: bool>(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (v, _) = readable(&state, &caller, &id, READ_STATE).await?;
    let (which, what): (crate::documents::state::WhichBlob, _) = if JSON {
        (|s| s.json_state.as_ref(), "JSON state")
    } else {
        (|s| s.state.as_ref(), "state")
    };
    let blob = crate::documents::state::blob_stream(&state, &v, which, what).await?;
    Ok(download_response(blob))
}
