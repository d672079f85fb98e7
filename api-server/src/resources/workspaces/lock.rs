//! B7 lock, B8 unlock, B9 force-unlock: SPEC.md's lock table through the pure state
//! machine [`terrace_crds::lock::transition`], written to the Workspace's annotations with
//! a resourceVersion precondition ([`write::guarded_patch`]), so of N concurrent lockers
//! exactly one wins and the others get 409. Each change is recorded as an Event.

use terrace_crds::Workspace;
use terrace_crds::constants::{ANNOTATION_LOCK_REASON, ANNOTATION_LOCKED_AT, ANNOTATION_LOCKED_BY};
use terrace_crds::lock::{self, LockHolder, LockOp, LockOutcome, StateVersions};

use super::render::lock_holder;
use super::respond_one;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/workspaces/{id}/actions/lock", post(lock_ws))
        .route("/api/v2/workspaces/{id}/actions/unlock", post(unlock_ws))
        .route(
            "/api/v2/workspaces/{id}/actions/force-unlock",
            post(force_unlock_ws),
        )
}

/// The body of a lock request: `{"reason": …}` as SPEC.md has it, or the JSON:API form
/// the terraform CLI sends (`{"data": {"type": "", "attributes": {"reason": …}}}`).
#[derive(Debug, Default, Deserialize)]
struct LockBody {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    data: Option<LockData>,
}

#[derive(Debug, Default, Deserialize)]
struct LockData {
    #[serde(default)]
    attributes: Option<LockAttributes>,
}

#[derive(Debug, Default, Deserialize)]
struct LockAttributes {
    #[serde(default)]
    reason: Option<String>,
}

async fn lock_ws(
    State(state): State<AppState>,
    f: Found<Workspace>,
    JsonApi(body): JsonApi<Option<serde_json::Map<String, Value>>>,
) -> Result<Response, ApiError> {
    // An object (or no body at all); the map first, so a list is refused, not read as
    // the struct's fields.
    let body: LockBody = match body {
        None => LockBody::default(),
        Some(m) => serde_json::from_value(Value::Object(m))
            .map_err(|e| ApiError::invalid("/", format!("the lock body is not understood: {e}")))?,
    };
    let reason = body
        .reason
        .or_else(|| body.data.and_then(|d| d.attributes).and_then(|a| a.reason))
        .unwrap_or_default();
    lock_action(&state, f, LockOp::Lock { reason }, "lock").await
}

async fn unlock_ws(
    State(state): State<AppState>,
    f: Found<Workspace>,
) -> Result<Response, ApiError> {
    lock_action(&state, f, LockOp::Unlock, "lock").await
}

async fn force_unlock_ws(
    State(state): State<AppState>,
    f: Found<Workspace>,
) -> Result<Response, ApiError> {
    lock_action(&state, f, LockOp::ForceUnlock, "force-unlock").await
}

/// What the unlock rules need to know besides the holder: whether the latest state
/// version written under the current lock is still pending, and whether the lock is an
/// active run's (force-unlock refuses it: cancel the run instead).
fn state_facts(state: &AppState, ns: &str, ws: &Workspace) -> StateVersions {
    use terrace_crds::constants::ANNOTATION_STATE_UPLOAD_EXPIRES;
    use terrace_crds::state::{StateVersionState, WrittenVersion, latest_pending_since};
    let locked_at = lock::locked_at(ws).and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let now = jiff::Timestamp::now();
    let idx = state.index.read();
    let current = idx
        .current_state_version(ws)
        .map(|c| (c.spec.serial, c.spec.md5.clone()));
    let versions = idx.state_versions_of(ns, &ws.name_any()).filter_map(|v| {
        let created = v.metadata.creation_timestamp.as_ref()?.0;
        let state = StateVersionState::parse(v.status.as_ref().and_then(|s| s.status.as_deref()))?;
        // A version that can no longer finalize never holds the unlock back: its upload
        // URLs expired, or a later serial, or other contents of its serial, are current
        // already (the same state again still may: it becomes current).
        let expired = v
            .annotations()
            .get(ANNOTATION_STATE_UPLOAD_EXPIRES)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_some_and(|t| t < now);
        let superseded = !v.spec.force
            && current.as_ref().is_some_and(|(serial, md5)| {
                v.spec.serial < *serial
                    || (v.spec.serial == *serial && !v.spec.md5.eq_ignore_ascii_case(md5))
            });
        let abandoned = expired || superseded;
        Some(WrittenVersion {
            created,
            serial: v.spec.serial,
            state,
            abandoned,
        })
    });
    let latest_intermediate_pending = latest_pending_since(locked_at, versions);
    // A run's lock while the run goes on (a run that is gone or ended leaves a stale lock
    // that force-unlock clears).
    let held_by_active_run = match lock::holder_of(ws) {
        Some(LockHolder::Run(id)) => idx.runs().get(&id).is_some_and(|r| {
            terrace_crds::run::RunState::of(r.status.as_ref().and_then(|s| s.status.as_deref()))
                .is_ok_and(|s| !s.is_final())
        }),
        _ => false,
    };
    StateVersions {
        latest_intermediate_pending,
        held_by_active_run,
    }
}

/// Applies `op` for the caller (who needs `verb` on the workspace; 404 otherwise).
async fn lock_action(
    state: &AppState,
    f: Found<Workspace>,
    op: LockOp,
    verb: &'static str,
) -> Result<Response, ApiError> {
    let (caller, l) = (&f.caller, f.at);
    state
        .require(caller, &l.check(verb), Deny::NotFound, || {
            ApiError::not_found("workspace not found")
        })
        .await?;
    let me = LockHolder::User(caller.username.clone());
    let mut outcome = None;
    let ns = l.ns.clone();
    let updated = write::guarded_patch(
        &write::api::<Workspace>(state, &l.ns),
        (*l.obj).clone(),
        |current| {
            let o = lock::transition(
                lock_holder(current).as_ref(),
                &op,
                &me,
                state_facts(state, &ns, current),
            )
            .map_err(|e| match e.status() {
                503 => ApiError::Unavailable(e.to_string().into()),
                _ => ApiError::conflict(e.to_string()),
            })?;
            let annotations = match &o {
                LockOutcome::Locked { holder, reason } => json!({
                    ANNOTATION_LOCKED_BY: holder.annotation(),
                    ANNOTATION_LOCK_REASON: reason,
                    ANNOTATION_LOCKED_AT: timestamp(&jiff::Timestamp::now()),
                }),
                LockOutcome::Unlocked => json!({
                    ANNOTATION_LOCKED_BY: Value::Null,
                    ANNOTATION_LOCK_REASON: Value::Null,
                    ANNOTATION_LOCKED_AT: Value::Null,
                }),
            };
            outcome = Some(o);
            Ok(Some(json!({"metadata": {"annotations": annotations}})))
        },
    )
    .await?;
    let (reason, note) = match (&op, &outcome) {
        (LockOp::Lock { .. }, Some(LockOutcome::Locked { holder, reason })) => {
            ("Locked", format!("locked by {holder}: {reason}"))
        }
        (LockOp::ForceUnlock, _) => ("ForceUnlocked", format!("force-unlocked by {me}")),
        _ => ("Unlocked", format!("unlocked by {me}")),
    };
    crate::events::workspace_event(&state.events, &updated, reason, note);
    let l = super::written(state, &l, updated).await;
    respond_one(state, caller, &l, StatusCode::OK, &[]).await
}
