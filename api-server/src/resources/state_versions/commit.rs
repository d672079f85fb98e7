//! Making a state version current, once its bytes are stored: the one place every state
//! write (the upload URL, the legacy inline create, a run's apply) goes through.
//!
//! A version's create was checked against the lock and the current state of its moment;
//! by the time the bytes arrive either may have changed (the lock force-unlocked and taken
//! by someone else, a later serial uploaded first, a concurrent upload of the same
//! serial). So the checks run again here ([`terrace_crds::state::check_commit`]), against
//! the workspace's state head (`terrace.dev/state-head`, [`StateHead`]), and the new head
//! is written under the workspace's resourceVersion: of concurrent commits each sees the
//! one before it, the current serial never goes down and other contents never finalize at
//! the current serial; the same state again does, as in HCP (docs/state.md "Invariants"). Only then is the version marked finalized, with the
//! head's sequence number, which is what the index orders current versions by.

use std::time::{Duration, Instant};

use terrace_crds::constants::ANNOTATION_STATE_HEAD;
use terrace_crds::lock::{self, LockHolder};
use terrace_crds::state::{
    self, Candidate, Current, HEAD_GRACE, StateHead, StateSummary, StateVersionState,
};
use terrace_crds::{StateBlob, StateVersion, Workspace};

use crate::index::Inner;
use crate::prelude::*;

/// The state a new version must succeed, as this server knows it now.
pub(super) enum Base {
    /// The current version's serial, lineage and MD5 (None: the workspace has no state).
    Known(Option<(i64, String, String)>),
    /// The head names a version that became current a moment ago and has not finalized
    /// yet: its writer is about to.
    Settling(StateHead),
}

/// The state a version written to `ws` now must succeed: the head's, unless the head's
/// version can no longer finalize (discarded, gone or silent for [`HEAD_GRACE`]), or the
/// workspace has no head (written before heads, or by hand): then the index's current
/// version.
pub(super) fn base(idx: &Inner, ws: &Workspace) -> Base {
    if let Some(h) = head_of(ws) {
        let status = idx
            .state_versions()
            .get(&h.id)
            .map(|v| StateVersionState::parse(v.status.as_ref().and_then(|s| s.status.as_deref())));
        match status {
            Some(Some(StateVersionState::Pending)) | None if h.young(jiff::Timestamp::now()) => {
                return Base::Settling(h);
            }
            Some(Some(
                StateVersionState::Finalized
                | StateVersionState::BackingDataSoftDeleted
                | StateVersionState::BackingDataPermanentlyDeleted,
            )) => return Base::Known(Some((h.serial, h.lineage, h.md5))),
            _ => {}
        }
    }
    Base::Known(
        idx.current_state_version(ws)
            .map(|v| (v.spec.serial, v.spec.lineage.clone(), v.spec.md5.clone())),
    )
}

/// The workspace's state head, if it has one.
fn head_of(ws: &Workspace) -> Option<StateHead> {
    StateHead::parse(
        ws.annotations()
            .get(ANNOTATION_STATE_HEAD)
            .map(String::as_str),
    )
}

/// The succession base of a create: as [`base`], a settling head counting as current.
pub(super) fn create_base(idx: &Inner, ws: &Workspace) -> Option<(i64, String, String)> {
    match base(idx, ws) {
        Base::Known(b) => b,
        Base::Settling(h) => Some((h.serial, h.lineage, h.md5)),
    }
}

/// Who commits a version.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    /// A client through the upload URL or the inline create: it must still hold the lock
    /// it created the version under.
    LockHolder,
    /// A run's apply: its state is kept whatever happened to the lock meanwhile.
    Run,
}

/// Why a commit did not make the version current.
pub(super) enum Refused {
    /// The rules refused it (409 with TFE's words): the caller discards the version.
    Rule(ApiError),
    /// The workspace or the API failed.
    Failed(ApiError),
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> ApiError {
        match r {
            Refused::Rule(e) | Refused::Failed(e) => e,
        }
    }
}

/// Makes `v` (its bytes stored as `blob`, read as `summary`) the current version of its
/// workspace if the rules still allow it, then marks it finalized. A version that repeats
/// the current one (same serial and MD5: a client retrying) becomes current too, as in
/// HCP Terraform: a newer copy of the same state.
pub(super) async fn commit(
    state: &AppState,
    v: &StateVersion,
    blob: StateBlob,
    summary: StateSummary,
    writer: Writer,
) -> Result<StateVersion, Refused> {
    let ns = v.namespace().unwrap_or_default();
    let ws_name = v.spec.workspace.clone();
    let holder = LockHolder::parse(v.spec.created_by.as_deref().unwrap_or_default());
    let created = v
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or_else(jiff::Timestamp::now);
    let candidate = Candidate {
        serial: v.spec.serial,
        lineage: &v.spec.lineage,
        md5: &v.spec.md5,
        force: v.spec.force,
        writer: &holder,
        created,
        needs_lock: writer == Writer::LockHolder,
    };
    let ws_api = write::api::<Workspace>(state, &ns);
    let gone = || Refused::Rule(ApiError::conflict("the state version's workspace is gone"));
    let started = Instant::now();
    let outcome = loop {
        let live = match ws_api.get_opt(&ws_name).await {
            Ok(Some(w)) => w,
            Ok(None) => return Err(gone()),
            Err(e) => return Err(Refused::Failed(e.into())),
        };
        let mut outcome = None;
        let written = write::guarded_patch(&ws_api, live, |ws| {
            let (base, head) = match base(&state.index.read(), ws) {
                Base::Settling(_) => return Err(ApiError::Unavailable("settling".into())),
                Base::Known(b) => (b, head_of(ws)),
            };
            let locked_at = lock::locked_at(ws).and_then(|t| t.parse::<jiff::Timestamp>().ok());
            state::check_commit(
                lock::holder_of(ws).as_ref(),
                locked_at,
                base.as_ref().map(|(serial, lineage, md5)| Current {
                    serial: *serial,
                    lineage,
                    md5,
                }),
                &candidate,
            )
            .map_err(state_error)?;
            let seq = head.map_or(0, |h| h.seq) + 1;
            outcome = Some(seq);
            let record = StateHead {
                id: id_of(v),
                serial: v.spec.serial,
                lineage: v.spec.lineage.clone(),
                md5: v.spec.md5.clone(),
                seq,
                at: crate::render::now(),
            };
            Ok(Some(
                json!({"metadata": {"annotations": {ANNOTATION_STATE_HEAD: record.annotation()}}}),
            ))
        })
        .await;
        match written {
            Ok(_) => break outcome,
            // The head's writer is finalizing its version: wait for it, as long as it
            // may take.
            Err(ApiError::Unavailable(_)) if started.elapsed() < HEAD_GRACE => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(ApiError::Unavailable(_)) => {
                return Err(Refused::Failed(ApiError::Unavailable(
                    "another state version of the workspace is being saved; retry".into(),
                )));
            }
            Err(ApiError::NotFound(_)) => return Err(gone()),
            Err(e @ ApiError::Conflict(_)) => return Err(Refused::Rule(e)),
            Err(e) => return Err(Refused::Failed(e)),
        }
    };
    let api = write::api::<StateVersion>(state, &ns);
    let Some(seq) = outcome else {
        return Err(Refused::Failed(ApiError::bug(
            "a state version's workspace was written without a verdict",
        )));
    };
    let status = json!({
        "status": StateVersionState::Finalized.as_str(),
        "state": blob,
        "terraformVersion": summary.terraform_version,
        "resourceCount": summary.resource_count,
        "resources": summary.resources,
        "outputs": summary.outputs,
        "providers": summary.providers,
        "finalizedAt": crate::render::now(),
        "sequence": seq,
    });
    write::patch_status(&api, &v.name_any(), status)
        .await
        .map_err(Refused::Failed)
}

/// The detail of a refusal, as a discarded version records it.
pub(super) fn reason(e: &ApiError) -> String {
    e.objects()
        .into_iter()
        .find_map(|o| o.detail)
        .unwrap_or_else(|| e.to_string())
}

/// Keeps the bytes of a version that could not become current (a run's apply: its state
/// is never dropped): discarded, with its stored state and the reason, downloadable by
/// whoever may read the workspace's state.
pub(super) async fn keep(
    state: &AppState,
    v: &StateVersion,
    blob: StateBlob,
    why: &str,
) -> Result<StateVersion, ApiError> {
    let api = write::api::<StateVersion>(state, &v.namespace().unwrap_or_default());
    write::patch_status(
        &api,
        &v.name_any(),
        json!({"status": StateVersionState::Discarded.as_str(), "state": blob, "message": why}),
    )
    .await
}

/// A state rule's refusal as the API answers it.
pub(super) fn state_error(e: terrace_crds::state::StateError) -> ApiError {
    match e.status() {
        409 => ApiError::conflict(e.to_string()),
        413 => ApiError::TooLarge(e.to_string().into()),
        _ => ApiError::invalid("/data/attributes/state", e.to_string()),
    }
}
