//! The runner's endpoints of a run (`/api/v2/runner/runs/:id/…`), authorized by the run
//! token ([`crate::runner_auth`]): the configuration archive, and the plan file and its
//! JSON, which the plan Pod uploads and the apply Pod downloads. The workspace's state is
//! read and written through the state versions resource's runner endpoints.

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::BytesRejection;
use axum::http::header;
use terrace_crds::run::{Phase, RunState};
use terrace_crds::{ConfigurationVersion, Run};
use tower_http::limit::RequestBodyLimitLayer;

use super::{plan_json_key, plan_key};
use crate::blobs::BlobStore;
use crate::documents::runs::state_of;
use crate::prelude::*;
use crate::runner_auth::RunnerRun;

/// Largest plan file (or JSON plan) accepted from a runner.
pub const MAX_PLAN_BYTES: usize = 256 * 1024 * 1024;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v2/runner/runs/{id}/archive", get(archive))
}

/// The upload routes (their own body limit).
pub fn upload_router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/runner/runs/{id}/plan",
            put(put_upload::<PlanFile>).get(get_plan),
        )
        .route(
            "/api/v2/runner/runs/{id}/plan-json",
            put(put_upload::<PlanJson>),
        )
        .route(
            "/api/v2/runner/runs/{id}/plan-json-redacted",
            put(put_upload::<PlanJsonRedacted>),
        )
        .route(
            "/api/v2/runner/runs/{id}/provider-schemas",
            put(put_upload::<ProviderSchemas>),
        )
        .route(
            "/api/v2/runner/runs/{id}/log/{phase}/{part}",
            put(put_log_part),
        )
        .layer(DefaultBodyLimit::max(MAX_PLAN_BYTES))
        .layer(RequestBodyLimitLayer::new(MAX_PLAN_BYTES))
}

fn store(state: &AppState, run: &Run) -> impl BlobStore + use<> {
    crate::blobs::store(
        state,
        &run.namespace().unwrap_or_default(),
        run.controller_owner_ref(&()),
    )
}

fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge(format!("larger than {MAX_PLAN_BYTES} bytes").into())
        } else {
            ApiError::bad_body(format!("unreadable body: {e}"))
        }
    })
}

/// Only the phase that writes it may upload the plan (and only the apply read it). The
/// run's Pod may call before the index shows the phase it runs (see
/// [`crate::runner_auth::once_indexed`]).
async fn in_phase(
    state: &AppState,
    id: &str,
    run: Arc<Run>,
    phase: Phase,
) -> Result<Arc<Run>, ApiError> {
    let running = |r: &Run| match phase {
        Phase::Plan => state_of(r) == RunState::Planning,
        Phase::Apply => state_of(r) == RunState::Applying,
    };
    let run = crate::runner_auth::once_indexed(state, id, run, running).await;
    let s = state_of(&run);
    if running(&run) {
        Ok(run)
    } else {
        Err(ApiError::conflict(format!(
            "the run is {s}: its {} phase is not running",
            phase.as_str()
        )))
    }
}

/// `PUT …/log/:phase/:part`: part `part` of the phase's log, as the runner copies it
/// (docs/runs.md, "Logs"; the part being written is sent again as it grows). Past
/// `--max-log-bytes` the part after the last kept one is the cut marker, and the answer
/// 413 tells the runner to stop sending.
async fn put_log_part(
    State(state): State<AppState>,
    RunnerRun { id, run }: RunnerRun,
    Path(params): Path<std::collections::HashMap<String, String>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let phase: Phase = params
        .get("phase")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| ApiError::not_found("no such phase"))?;
    let part: u64 = params
        .get("part")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| ApiError::bad_parameter("part", "the part must be a number"))?;
    let bytes = body(b)?;
    let pod_of = |r: &Run| {
        r.status.as_ref().and_then(|s| match phase {
            Phase::Plan => s.plan.pod_name.clone(),
            Phase::Apply => s.apply.pod_name.clone(),
        })
    };
    let run = crate::runner_auth::once_indexed(&state, &id, run, |r| pod_of(r).is_some()).await;
    let pod = pod_of(&run);
    let pod =
        pod.ok_or_else(|| ApiError::conflict(format!("the run's {} has no Pod", phase.as_str())))?;
    crate::pod_logs::store_part(
        &store(&state, &run),
        &pod,
        part,
        &bytes,
        state.settings.max_log_bytes,
    )
    .await
}

/// `GET …/archive`: the run's configuration archive.
async fn archive(
    State(state): State<AppState>,
    RunnerRun { run, .. }: RunnerRun,
) -> Result<Response, ApiError> {
    let ns = run.namespace().unwrap_or_default();
    let cv: Option<Arc<ConfigurationVersion>> = state
        .index
        .read()
        .configuration_versions()
        .in_namespace(&ns)
        .find(|c| c.name_any() == run.spec.configuration_version)
        .cloned();
    let archive = cv
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.archive.clone())
        .ok_or_else(|| ApiError::not_found("the run's configuration version has no archive"))?;
    let bytes = crate::blobs::store(&state, &ns, None)
        .get(&archive.key, Some(&archive.sha256))
        .await
        .map_err(|e| crate::blobs::read_error("the archive", "archive not found", e))?;
    Ok(([(header::CONTENT_TYPE, "application/gzip")], bytes).into_response())
}

/// What the plan phase uploads (the plan file, its JSON): one handler stores either.
trait PlanUpload: Send + Sync + 'static {
    /// Its name in errors.
    const WHAT: &'static str;
    /// Its blob key for run `run_id`.
    fn key(run_id: &str) -> String;
    /// Refuses a body that is not what it should be.
    fn check(_bytes: &Bytes) -> Result<(), ApiError> {
        Ok(())
    }
    /// The run's policies are checked against it once stored (the JSON plan).
    const CHECKS_POLICIES: bool = false;
}

/// `PUT …/plan`.
struct PlanFile;
/// `PUT …/plan-json-redacted`.
struct PlanJsonRedacted;

impl PlanUpload for PlanJsonRedacted {
    const WHAT: &'static str = "the redacted JSON plan";
    fn key(run_id: &str) -> String {
        super::plan_json_redacted_key(run_id)
    }
    fn check(bytes: &Bytes) -> Result<(), ApiError> {
        PlanJson::check(bytes)
    }
}
/// `PUT …/plan-json`.
struct PlanJson;
/// `PUT …/provider-schemas`: `providers schema -json` of an assessment (its result's
/// `json-schema`).
struct ProviderSchemas;

impl PlanUpload for ProviderSchemas {
    const WHAT: &'static str = "the provider schemas";
    fn key(run_id: &str) -> String {
        super::provider_schemas_key(run_id)
    }
    fn check(bytes: &Bytes) -> Result<(), ApiError> {
        PlanJson::check(bytes)
    }
}

impl PlanUpload for PlanFile {
    const WHAT: &'static str = "the plan";
    fn key(run_id: &str) -> String {
        plan_key(run_id)
    }
}

impl PlanUpload for PlanJson {
    const WHAT: &'static str = "the JSON plan";
    const CHECKS_POLICIES: bool = true;
    fn key(run_id: &str) -> String {
        plan_json_key(run_id)
    }
    fn check(bytes: &Bytes) -> Result<(), ApiError> {
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map(|_| ())
            .map_err(|e| ApiError::invalid("/", format!("the JSON plan is not JSON: {e}")))
    }
}

/// `PUT …/plan`, `PUT …/plan-json`: stores the body the run's runner (authorized by its
/// token, in the plan phase) sends, if it passes `U`'s check.
async fn put_upload<U: PlanUpload>(
    State(state): State<AppState>,
    RunnerRun { id, run }: RunnerRun,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = in_phase(&state, &id, run, Phase::Plan).await?;
    let bytes = body(b)?;
    U::check(&bytes)?;
    // An assessment's plan is no run's: no policy checks it (docs/health.md).
    let plan = (U::CHECKS_POLICIES && !run.spec.assessment)
        .then(|| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .flatten();
    store(&state, &run)
        .put(&U::key(&id), bytes)
        .await
        .map_err(|e| crate::blobs::api_error(U::WHAT, e))?;
    // Checked before the runner's request ends, so before the plan Pod ends: the operator
    // finds the outcome when it moves the run on.
    if let Some(plan) = plan {
        super::policy::check_plan(&state, &run, &id, &plan).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn get_plan(
    State(state): State<AppState>,
    RunnerRun { id, run }: RunnerRun,
) -> Result<Response, ApiError> {
    let run = in_phase(&state, &id, run, Phase::Apply).await?;
    let bytes = store(&state, &run)
        .get(&plan_key(&id), None)
        .await
        .map_err(|e| crate::blobs::read_error("the plan", "the run has no plan file", e))?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}
