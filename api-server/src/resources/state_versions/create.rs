//! Writing state: `POST /workspaces/:id/state-versions` and the one-time upload URLs.
//!
//! With `state` in the body (go-tfe's legacy form) the version is checked, stored and
//! finalized at once. Without it (what the terraform CLI sends first) the answer carries
//! `hosted-state-upload-url` and `hosted-json-state-upload-url`: capability URLs
//! (`<version id>.<random>`, only their SHA-256 kept, for an hour, used once); the
//! version stays `pending` until the state PUT arrives and checks out. A state that does
//! not (MD5, not a state file of the version's serial and lineage, too large) is refused
//! with the reason and the version is discarded, so it cannot hold the workspace's unlock
//! back.
//!
//! The upload URLs stream the body into the blob store ([`crate::ingest`]): MD5, the
//! state file's summary (read as the bytes go by) and the store's upload all see each
//! piece once, and the blob is committed only once the state checked out, so a refused
//! state leaves no blob and the state is never whole in the API server's memory (with
//! the S3 store; the cluster store gathers it, within its limit).

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use base64::Engine;
use kube::api::ObjectMeta;
use terrace_crds::blobs::{json_state_key, state_key};
use terrace_crds::constants::{
    ANNOTATION_STATE_UPLOAD_EXPIRES as ANNOTATION_UPLOAD_EXPIRES, LABEL_WORKSPACE_ID,
};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::lock::LockHolder;
use terrace_crds::state::{self, Current, StateVersionState};
use terrace_crds::{StateBlob, StateVersion, StateVersionSpec, Workspace};

use super::commit::{self, Writer, state_error};
use super::{JSON_STATE_UPLOAD_PATH, STATE_UPLOAD_PATH, WRITE_STATE, render, state_of, store_of};
use crate::blobs::{AnyBlobStore, BlobError, BlobStore, Stored};
use crate::capability::{base_url, constant_time_eq, random_token, sha256_hex};
use crate::ingest::{BodyError, Settled, ingest, record_or_remove, settle};
use crate::prelude::*;

/// Annotation with the SHA-256 of the pending state upload token.
const ANNOTATION_STATE_UPLOAD: &str = "terrace.dev/state-upload-sha256";
/// Annotation with the SHA-256 of the pending JSON state upload token.
const ANNOTATION_JSON_UPLOAD: &str = "terrace.dev/json-state-upload-sha256";
/// How long the upload URLs work.
const UPLOAD_TTL: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// The attributes of a state version create.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateAttributes {
    serial: Option<i64>,
    md5: Option<String>,
    #[serde(default)]
    lineage: Option<String>,
    #[serde(default)]
    force: Option<bool>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    json_state: Option<String>,
}

impl Typed for CreateAttributes {
    const TYPE: &'static str = "state-versions";
}

/// The relationships of a state version create.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateRelationships {
    run: Option<ToOne>,
}

fn decode(attr: &str, b64: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| ApiError::invalid_attribute(attr, format!("{attr} is not base64: {e}")))
}

/// `POST /workspaces/:id/state-versions`.
pub async fn create(
    State(state): State<AppState>,
    f: Found<Workspace>,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<CreateAttributes, CreateRelationships>>,
) -> Result<Response, ApiError> {
    let (caller, ws) = (&f.caller, &f.at);
    super::require_verb(&state, caller, ws, WRITE_STATE).await?;
    let data = doc.checked()?;
    let a = data.attributes;
    let serial = a
        .serial
        .ok_or_else(|| ApiError::invalid_attribute("serial", "serial is required"))?;
    let md5 = a
        .md5
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid_attribute("md5", "md5 is required"))?;
    let lineage = a.lineage.unwrap_or_default();
    state::check_create(serial, &md5, &lineage)
        .map_err(|(attr, detail)| ApiError::invalid_attribute(attr, detail))?;
    let force = a.force.unwrap_or(false);
    let me = LockHolder::User(caller.username.clone());
    state::check_lock(terrace_crds::lock::holder_of(&ws.obj).as_ref(), &me).map_err(state_error)?;
    let cur = commit::create_base(&state.index.read(), &ws.obj);
    state::check_succession(
        cur.as_ref().map(|(s, l, m)| Current {
            serial: *s,
            lineage: l,
            md5: m,
        }),
        serial,
        &lineage,
        &md5,
        force,
    )
    .map_err(state_error)?;
    let limit = state.settings.max_state_bytes as u64;
    // The legacy form: the state inline.
    let inline = match a.state.as_deref().filter(|s| !s.is_empty()) {
        Some(b64) => {
            let bytes = decode("state", b64)?;
            state::check_size(bytes.len() as u64, limit).map_err(state_error)?;
            let summary = state::check_state(&bytes, Some(&md5)).map_err(state_error)?;
            let json = match a.json_state.as_deref().filter(|s| !s.is_empty()) {
                Some(j) => Some(decode("json-state", j)?),
                None => None,
            };
            Some((bytes, json, summary))
        }
        None => None,
    };
    let id = new_id(IdKind::StateVersion);
    let base = base_url(&state, &headers);
    let (state_token, json_token) = (
        format!("{id}.{}", random_token()),
        format!("{id}.{}", random_token()),
    );
    let mut annotations = BTreeMap::new();
    if inline.is_none() {
        let expires = jiff::Timestamp::now()
            .checked_add(UPLOAD_TTL)
            .map_err(|e| ApiError::internal("upload expiry", e))?;
        annotations.insert(
            ANNOTATION_STATE_UPLOAD.to_owned(),
            sha256_hex(state_token.as_bytes()),
        );
        annotations.insert(
            ANNOTATION_JSON_UPLOAD.to_owned(),
            sha256_hex(json_token.as_bytes()),
        );
        annotations.insert(ANNOTATION_UPLOAD_EXPIRES.to_owned(), expires.to_string());
    }
    let run = data
        .relationships
        .run
        .as_ref()
        .and_then(|r| r.id().flatten())
        .map(str::to_owned);
    let sv = StateVersion {
        metadata: ObjectMeta {
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            owner_references: ws.obj.controller_owner_ref(&()).map(|o| vec![o]),
            // Blobs in a bucket are deleted by the operator before the version goes.
            finalizers: state.blobs.owner_finalizers(),
            ..write::new_meta(
                &id,
                &ws.ns,
                ws.org.name_any(),
                &[(LABEL_WORKSPACE_ID, ws.id())],
            )
        },
        spec: StateVersionSpec {
            workspace: ws.object_name(),
            serial,
            lineage,
            md5,
            force,
            created_by: Some(me.annotation()),
            run,
        },
        status: None,
    };
    let created = write::create_with_status(
        &state,
        &ws.ns,
        &sv,
        json!({"id": id, "workspaceName": ws.obj.spec.name, "status": StateVersionState::Pending.as_str()}),
    )
    .await?;
    let done = match inline {
        Some((bytes, json, summary)) => {
            match store_and_finalize(
                &state,
                &created,
                Bytes::from(bytes),
                summary,
                Writer::LockHolder,
            )
            .await
            {
                // The JSON form is optional: the state stands without it.
                Ok(v) => match json {
                    Some(j) => match store_json(&state, &v, Bytes::from(j)).await {
                        Ok(with_json) => with_json,
                        Err(_) => v,
                    },
                    None => v,
                },
                Err(e) => {
                    // Nothing half-written: the version goes with its partial data.
                    let _ = write::delete(&state, &created).await;
                    return Err(e);
                }
            }
        }
        None => created,
    };
    write::wait_seen(&state, &done).await;
    let uploads = (state_of(&done) == StateVersionState::Pending).then(|| {
        (
            format!("{base}{STATE_UPLOAD_PATH}/{state_token}"),
            format!("{base}{JSON_STATE_UPLOAD_PATH}/{json_token}"),
        )
    });
    let data = render(
        &done,
        &ws.id(),
        &base,
        uploads.as_ref().map(|(s, j)| (s.as_str(), j.as_str())),
    );
    Ok(Doc::created(data).into_response())
}

/// Stores `bytes` under `key` in the version's blob store; answers where they are.
pub(super) async fn store_blob(
    state: &AppState,
    v: &StateVersion,
    key: String,
    bytes: Bytes,
    what: &str,
) -> Result<StateBlob, ApiError> {
    let stored = Stored {
        size: bytes.len() as u64,
        sha256: sha256_hex(&bytes),
    };
    store_of(state, v)
        .put(&key, bytes)
        .await
        .map_err(|e| store_error(what, e))?;
    Ok(state_blob(key, stored))
}

/// Where a stored blob is, as the status records it.
fn state_blob(key: String, stored: Stored) -> StateBlob {
    StateBlob {
        key,
        size: i64::try_from(stored.size).unwrap_or(i64::MAX),
        sha256: stored.sha256,
    }
}

/// The API's answer to the store failing to keep the `what`.
fn store_error(what: &str, e: crate::blobs::BlobError) -> ApiError {
    tracing::warn!(error = %e, what, "storing state data failed");
    crate::blobs::api_error(&format!("the {what}"), e)
}

/// Stores the state bytes and makes the version current ([`commit`]).
pub(super) async fn store_and_finalize(
    state: &AppState,
    v: &StateVersion,
    bytes: Bytes,
    summary: state::StateSummary,
    writer: Writer,
) -> Result<StateVersion, ApiError> {
    let key = terrace_crds::blobs::state_key(&id_of(v));
    let blob = store_blob(state, v, key, bytes, "state").await?;
    Ok(commit::commit(state, v, blob, summary, writer).await?)
}

/// Stores the JSON form of the state.
async fn store_json(
    state: &AppState,
    v: &StateVersion,
    bytes: Bytes,
) -> Result<StateVersion, ApiError> {
    let key = terrace_crds::blobs::json_state_key(&id_of(v));
    let blob = store_blob(state, v, key, bytes, "JSON state").await?;
    record_json(state, v, blob).await
}

/// Records the stored JSON form of the state.
async fn record_json(
    state: &AppState,
    v: &StateVersion,
    blob: StateBlob,
) -> Result<StateVersion, ApiError> {
    let api = write::api::<StateVersion>(state, &v.namespace().unwrap_or_default());
    write::patch_status(&api, &v.name_any(), json!({"jsonState": blob})).await
}

fn gone() -> ApiError {
    ApiError::not_found("upload URL not found, expired or already used")
}

/// The version a token is for, if the token is its pending one of `annotation`; the
/// token is consumed (its annotation removed under the resourceVersion, so of concurrent
/// PUTs exactly one proceeds).
async fn claim(
    state: &AppState,
    token: &str,
    annotation: &'static str,
) -> Result<StateVersion, ApiError> {
    let id = token.split_once('.').map(|(id, _)| id).ok_or_else(gone)?;
    let v = state
        .index
        .read()
        .state_versions()
        .get(id)
        .cloned()
        .ok_or_else(gone)?;
    let sha = sha256_hex(token.as_bytes());
    let holds = |v: &StateVersion| {
        let expired = v
            .annotations()
            .get(ANNOTATION_UPLOAD_EXPIRES)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .is_none_or(|t| t < jiff::Timestamp::now());
        !expired
            && v.annotations()
                .get(annotation)
                .is_some_and(|h| constant_time_eq(h.as_bytes(), sha.as_bytes()))
    };
    let api = write::api::<StateVersion>(state, &v.namespace().unwrap_or_default());
    let removal = json!({"metadata": {"annotations": {annotation: null}}});
    write::consume(&api, (*v).clone(), holds, removal, gone).await
}

fn body_error(e: BodyError, limit: usize) -> ApiError {
    match e {
        BodyError::TooLarge => ApiError::TooLarge(
            format!(
                "the state is larger than the limit of {limit} bytes (--max-state-bytes; the cluster blob store takes blobs of up to {} bytes, larger states need an S3-compatible store: --blob-store s3://BUCKET[/PREFIX])",
                crate::blobs::MAX_CLUSTER_BLOB_BYTES
            )
            .into(),
        ),
        BodyError::Unreadable(_) => ApiError::bad_body(e.to_string()),
        BodyError::Check(_) => ApiError::internal("checking the state", e),
    }
}

/// An upload to a version's upload URL, begun: the version its token names (claimed,
/// see [`claim`]), the key of its blob (`key_of` the version's ID), the store and the
/// store's upload of the blob.
type Begun = (
    StateVersion,
    String,
    AnyBlobStore,
    Result<<AnyBlobStore as BlobStore>::Upload, BlobError>,
);

async fn begin(
    state: &AppState,
    token: &str,
    annotation: &'static str,
    key_of: fn(&str) -> String,
) -> Result<Begun, ApiError> {
    let v = claim(state, token, annotation).await?;
    let key = key_of(&id_of(&v));
    let store = store_of(state, &v);
    let upload = store.upload(&key).await;
    Ok((v, key, store, upload))
}

/// `PUT <hosted-state-upload-url>`: the state file (no Authorization: the URL is the
/// capability), streamed into the blob store. Finalizes the version, or refuses the
/// bytes (the blob aborted or removed) and discards it.
pub async fn upload_state(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let limit = state.settings.max_state_bytes;
    let (v, key, store, upload) = begin(&state, &token, ANNOTATION_STATE_UPLOAD, state_key).await?;
    let ingested = match ingest(limited(body, limit), upload, state::summarize_reader).await {
        Ok(i) => i,
        Err(e) => {
            let e = body_error(e, limit);
            discard(&state, &v, &commit::reason(&e)).await;
            return Err(e);
        }
    };
    let verdict = state::check_streamed(
        ingested.size,
        limit as u64,
        Some(&v.spec.md5),
        &ingested.md5,
        ingested.checked,
    );
    let (summary, stored) = match settle(ingested.upload, verdict).await {
        Ok(done) => done,
        Err(settled) => {
            // Nothing half-recorded: the version never becomes current; the client
            // creates a new one (terraform: `state push errored.tfstate`).
            let e = match settled {
                Settled::Refused(e) => match e.status() {
                    413 => ApiError::TooLarge(e.to_string().into()),
                    _ => ApiError::invalid("/", e.to_string()),
                },
                Settled::Store(e) => store_error("state", e),
            };
            discard(&state, &v, &commit::reason(&e)).await;
            return Err(e);
        }
    };
    // The lock and the succession again, now that the bytes are here.
    let committed = async {
        commit::commit(
            &state,
            &v,
            state_blob(key.clone(), stored),
            summary,
            Writer::LockHolder,
        )
        .await
        .map_err(ApiError::from)
    };
    let done = match record_or_remove(&store, &key, "the state of a version", committed).await {
        Ok(done) => done,
        Err(e) => {
            discard(&state, &v, &commit::reason(&e)).await;
            return Err(e);
        }
    };
    write::wait_seen(&state, &done).await;
    Ok(StatusCode::OK.into_response())
}

/// `PUT <hosted-json-state-upload-url>`: the `terraform show -json` form of the state,
/// streamed into the blob store once it reads as JSON.
pub async fn upload_json_state(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    let (v, key, store, upload) =
        begin(&state, &token, ANNOTATION_JSON_UPLOAD, json_state_key).await?;
    let ingested = ingest(
        limited(body, state.settings.max_state_bytes),
        upload,
        state::check_json,
    )
    .await
    .map_err(|e| body_error(e, state.settings.max_state_bytes))?;
    let verdict = ingested
        .checked
        .map_err(|e| ApiError::invalid("/", format!("the JSON state is not JSON: {e}")));
    let ((), stored) = settle(ingested.upload, verdict)
        .await
        .map_err(|settled| match settled {
            Settled::Refused(e) => e,
            Settled::Store(e) => store_error("JSON state", e),
        })?;
    let recorded = record_json(&state, &v, state_blob(key.clone(), stored));
    let done = record_or_remove(&store, &key, "a JSON state", recorded).await?;
    write::wait_seen(&state, &done).await;
    Ok(StatusCode::OK.into_response())
}

/// The body of an upload, cut at `limit` bytes: what passes the limit fails the read
/// (as [`BodyError::TooLarge`]), so the handler still discards the version. A layer in
/// front of the route would answer 413 before the handler ran and leave it pending.
fn limited(body: Body, limit: usize) -> Body {
    Body::new(http_body_util::Limited::new(body, limit))
}

/// Marks a version whose state was refused as discarded (it will never be finalized),
/// with the reason.
pub(super) async fn discard(state: &AppState, v: &StateVersion, why: &str) {
    let api = write::api::<StateVersion>(state, &v.namespace().unwrap_or_default());
    match write::patch_status(
        &api,
        &v.name_any(),
        json!({"status": StateVersionState::Discarded.as_str(), "message": why}),
    )
    .await
    {
        Ok(d) => write::wait_seen(state, &d).await,
        Err(e) => tracing::warn!(error = %e, "could not discard a refused state version"),
    }
}
