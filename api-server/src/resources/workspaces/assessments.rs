//! Health assessments of a workspace (docs/health.md), in TFE's shape:
//!
//! - `GET /assessment-results/:id`: a result (`drifted`, `succeeded`, `error-msg`,
//!   `created-at`, the counts of TFE's schema), for whoever may read the workspace;
//! - `GET /assessment-results/:id/json-output`, `…/json-schema`, `…/log-output`: the
//!   refresh-only plan's JSON, the provider schemas and the log, with `read-state` on the
//!   workspace, as a run's JSON plan (they hold the state's values);
//! - `GET /assessment-results/:id/health`: what the page shows, the drifted resources
//!   with their changed attributes and the checks with their messages (terrace's own;
//!   the same rights as `json-output`, from which it is read);
//! - `GET /workspaces/:id/current-assessment-result`: the workspace's current result;
//! - `POST /workspaces/:id/actions/assess`: an assessment now, for whoever may change
//!   the workspace's settings (`update`).
//!
//! A result is an assessment Run (`spec.assessment`) the operator created and finished;
//! its ID is the run's with the `asmtres-` prefix. The index keeps assessments apart from
//! runs, so no run list or lookup sees one.

use terrace_crds::assessment::{self, run_id_of_result};
use terrace_crds::constants::ANNOTATION_ASSESSMENT_REQUESTED;
use terrace_crds::run::RunState;
use terrace_crds::{Run, Workspace};

use super::{Ws, respond_one};
use crate::blobs::BlobStore;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/assessment-results/{id}", get(show))
        .route(
            "/api/v2/assessment-results/{id}/json-output",
            get(blob::<JsonOutput>),
        )
        .route(
            "/api/v2/assessment-results/{id}/json-schema",
            get(blob::<JsonSchema>),
        )
        .route(
            "/api/v2/assessment-results/{id}/log-output",
            get(log_output),
        )
        .route("/api/v2/assessment-results/{id}/health", get(health))
        .route(
            "/api/v2/workspaces/{id}/current-assessment-result",
            get(current),
        )
        .route("/api/v2/workspaces/{id}/actions/assess", post(assess))
}

/// An assessment result: its run and its workspace (readable by the caller).
struct AssessmentAt {
    run: Arc<Run>,
    ws: Ws,
    result_id: String,
}

fn not_found() -> ApiError {
    ApiError::not_found("assessment result not found")
}

fn state_of(r: &Run) -> RunState {
    RunState::of(r.status.as_ref().and_then(|s| s.status.as_deref())).unwrap_or(RunState::Errored)
}

/// The assessment result `id` if the caller may read its workspace (404 otherwise, as
/// for a result that does not exist, or one still running).
async fn result_of(state: &AppState, caller: &Caller, id: &str) -> Result<AssessmentAt, ApiError> {
    let run_id = run_id_of_result(id).ok_or_else(not_found)?;
    let (run, ws_id) = {
        let idx = state.index.read();
        let run = idx
            .assessments()
            .get(&run_id)
            .cloned()
            .ok_or_else(not_found)?;
        let ns = run.namespace().unwrap_or_default();
        let ws = idx
            .workspace_object(&ns, &run.spec.workspace)
            .map(|w| id_of(w.as_ref()))
            .ok_or_else(not_found)?;
        (run, ws)
    };
    if !state_of(&run).is_final() {
        return Err(not_found());
    }
    let ws = state
        .readable::<Workspace>(caller, &ws_id)
        .await
        .map_err(|_| not_found())?;
    Ok(AssessmentAt {
        run,
        ws,
        result_id: id.to_owned(),
    })
}

/// The JSON:API `data` of assessment result `id` of run `run`.
fn document(run: &Run, ws_id: &str, id: &str) -> Value {
    let st = run.status.clone().unwrap_or_default();
    let a = st.assessment.map(|a| a.summary).unwrap_or_else(|| {
        assessment::AssessmentSummary::failed(
            st.message
                .as_deref()
                .unwrap_or("the assessment ended without a result"),
        )
    });
    let created = st.plan.finished_at.clone().or_else(|| {
        run.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| timestamp(&t.0))
    });
    let base = format!("/api/v2/assessment-results/{id}");
    let ok = a.succeeded;
    json!({
        "id": id,
        "type": "assessment-results",
        "attributes": {
            "drifted": a.drifted,
            "succeeded": a.succeeded,
            // TFE's documented name, and the OpenAPI schema's.
            "error-msg": a.error_message,
            "error-message": a.error_message,
            "created-at": created,
            "all-checks-succeeded": a.all_checks_succeeded(),
            "resources-drifted": ok.then_some(a.resources_drifted),
            "resources-undrifted": ok.then_some(a.resources_undrifted),
            "checks-passed": ok.then_some(a.checks_passed),
            "checks-failed": ok.then_some(a.checks_failed),
            "checks-errored": ok.then_some(a.checks_errored),
            "checks-unknown": ok.then_some(a.checks_unknown),
        },
        "relationships": {
            "workspace": {"data": {"id": ws_id, "type": "workspaces"}},
        },
        "links": {
            "self": base,
            "json-output": ok.then(|| format!("{base}/json-output")),
            "json-schema": ok.then(|| format!("{base}/json-schema")),
            "log-output": format!("{base}/log-output"),
        },
    })
}

async fn show(Authed { state, caller }: Authed, Path(id): Path<String>) -> Result<Doc, ApiError> {
    let r = result_of(&state, &caller, &id).await?;
    Ok(Doc::ok(document(&r.run, &r.ws.id(), &r.result_id)))
}

/// `GET /workspaces/:id/current-assessment-result`: 404 while the workspace has none.
async fn current(State(state): State<AppState>, f: Found<Workspace>) -> Result<Doc, ApiError> {
    current_included(&state, &f.at)
        .map(Doc::ok)
        .ok_or_else(|| ApiError::not_found("the workspace has no assessment result"))
}

/// The document of workspace `ws`'s current assessment result (also the workspace
/// reads' `include=current_assessment_result`, which the web view's list shows as a
/// health badge); `None` while it has none.
pub fn current_included(state: &AppState, ws: &Ws) -> Option<Value> {
    let id = ws
        .obj
        .status
        .as_ref()
        .and_then(|s| s.health.as_ref())
        .and_then(|h| h.result_id.clone())?;
    let run_id = run_id_of_result(&id)?;
    let run = state.index.read().assessments().get(&run_id).cloned()?;
    Some(document(&run, &ws.id(), &id))
}

/// 403 unless the caller may read the workspace's state (`read-state`): an assessment's
/// plan holds the state's values, as a run's JSON plan does.
async fn require_read_state(
    state: &AppState,
    caller: &Caller,
    r: &AssessmentAt,
) -> Result<(), ApiError> {
    state
        .require_or_403(
            caller,
            &r.ws.check("read-state"),
            "reading an assessment's output needs the read-state right on the workspace",
        )
        .await
}

/// What an assessment stored (its JSON plan, the provider schemas).
trait Stored: Send + Sync + 'static {
    const WHAT: &'static str;
    fn key(run_id: &str) -> String;
}

struct JsonOutput;
struct JsonSchema;

impl Stored for JsonOutput {
    const WHAT: &'static str = "the assessment's JSON output";
    fn key(run_id: &str) -> String {
        crate::resources::runs::plan_json_key(run_id)
    }
}

impl Stored for JsonSchema {
    const WHAT: &'static str = "the assessment's JSON schema";
    fn key(run_id: &str) -> String {
        crate::resources::runs::provider_schemas_key(run_id)
    }
}

async fn stored_bytes<S: Stored>(
    state: &AppState,
    r: &AssessmentAt,
) -> Result<axum::body::Bytes, ApiError> {
    let run_id = id_of(r.run.as_ref());
    crate::blobs::store(state, &r.ws.ns, r.run.controller_owner_ref(&()))
        .get(&S::key(&run_id), None)
        .await
        .map_err(|e| {
            crate::blobs::read_error(S::WHAT, "the assessment has no such output (it failed)", e)
        })
}

async fn blob<S: Stored>(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let r = result_of(&state, &caller, &id).await?;
    require_read_state(&state, &caller, &r).await?;
    let bytes = stored_bytes::<S>(&state, &r).await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response())
}

/// `GET …/health`: the drifted resources with their changed attributes and the checks
/// with their messages ([`terrace_crds::assessment::assess`] of the JSON output).
async fn health(Authed { state, caller }: Authed, Path(id): Path<String>) -> Result<Doc, ApiError> {
    let r = result_of(&state, &caller, &id).await?;
    require_read_state(&state, &caller, &r).await?;
    let summary = r
        .run
        .status
        .as_ref()
        .and_then(|s| s.assessment.as_ref())
        .map(|a| a.summary.clone())
        .unwrap_or_default();
    let found = if summary.succeeded {
        let bytes = stored_bytes::<JsonOutput>(&state, &r).await?;
        let plan: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::internal("reading an assessment's JSON output", e))?;
        assessment::assess(&plan)
    } else {
        assessment::Assessment::default()
    };
    Ok(Doc::ok(json!({
        "id": id,
        "type": "assessment-health",
        "attributes": {
            "drift": found.drift,
            "checks": found.checks,
        },
    })))
}

/// `GET …/log-output`: the assessment's log as text (`limit`, `offset`).
async fn log_output(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let r = result_of(&state, &caller, &id).await?;
    require_read_state(&state, &caller, &r).await?;
    let st = r.run.status.clone().unwrap_or_default();
    let cause = st
        .message
        .as_deref()
        .filter(|_| state_of(&r.run) == RunState::Errored);
    crate::pod_logs::respond(
        crate::pod_logs::LogRead {
            client: &state.client,
            store: crate::blobs::store(&state, &r.ws.ns, None),
            ns: &r.ws.ns,
            pod: st.plan.pod_name.as_deref(),
            wait_note: st.plan.wait_note.as_deref(),
            finished: true,
            readable: true,
            cause,
            archived: None,
        },
        &q,
    )
    .await
}

/// `POST /workspaces/:id/actions/assess`: marks the workspace for an assessment now
/// (`terrace.dev/assessment-requested`), which the operator starts as soon as no run is
/// active. 404 without `update` (TFE: "user unauthorized to manage assessments"), 409
/// when assessments are not enabled, the workspace runs locally, or one is already under
/// way.
async fn assess(
    State(state): State<AppState>,
    f: Found<Workspace, AdminOr404>,
) -> Result<Response, ApiError> {
    let l = f.at.clone();
    let enabled = l.obj.spec.assessments_enabled || l.org.spec.settings.assessments_enforced;
    if !enabled {
        return Err(ApiError::conflict(
            "health assessments are not enabled for this workspace",
        ));
    }
    let busy = state
        .index
        .read()
        .assessments()
        .in_namespace(&l.ns)
        .any(|r| r.spec.workspace == l.object_name() && !state_of(r).is_final());
    if busy {
        return Err(ApiError::conflict(
            "an assessment of this workspace is already under way",
        ));
    }
    let now = timestamp(&jiff::Timestamp::now());
    let updated = write::guarded_patch(
        &write::api::<Workspace>(&state, &l.ns),
        (*l.obj).clone(),
        |_| {
            Ok(Some(
                json!({"metadata": {"annotations": {ANNOTATION_ASSESSMENT_REQUESTED: now}}}),
            ))
        },
    )
    .await?;
    let l = super::written(&state, &l, updated).await;
    respond_one(&state, &f.caller, &l, StatusCode::OK, &[]).await
}

#[cfg(test)]
mod tests;
