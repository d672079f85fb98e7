//! A configuration version as the API shows it (module tests, workspace runs), and its
//! creation with a one-time upload URL, which both create the same way.

use axum::http::HeaderMap;
use kube::api::ObjectMeta;
use terrace_crds::{ConfigurationVersion, ConfigurationVersionState};

use crate::capability::{base_url, random_token, sha256_hex};
use crate::prelude::*;

/// Annotation with the SHA-256 (hex) of the pending upload token.
pub const ANNOTATION_UPLOAD_SHA256: &str = "terrace.dev/upload-token-sha256";
/// Annotation with the RFC 3339 time after which the upload URL no longer works.
pub const ANNOTATION_UPLOAD_EXPIRES: &str = "terrace.dev/upload-expires-at";
/// Annotation of a workspace's configuration version while an upload to it streams (the
/// RFC 3339 time it began): one upload at a time, as its URL stays open for more.
pub const ANNOTATION_UPLOADING: &str = "terrace.dev/uploading-since";
/// After how long an upload still marked as streaming is taken as dead (its server
/// stopped), so the URL works again.
pub const UPLOADING_STALE: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);
/// How long an upload URL works.
pub const UPLOAD_TTL: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);
/// Path prefix of upload URLs.
pub const UPLOAD_PATH: &str = "/api/v2/uploads/v1/object";

/// The `status` a configuration version shows: its state (`pending` until written), or
/// the stored value as it is when terrace does not know it (a hand-edited object).
pub fn status_of(cv: &ConfigurationVersion) -> &str {
    match cv.state() {
        Ok(state) => state.as_str(),
        Err(_) => cv
            .status
            .as_ref()
            .and_then(|s| s.status.as_deref())
            .unwrap_or_default(),
    }
}

/// The JSON:API `data` of a configuration version; `upload_url` only at creation.
pub fn render(cv: &ConfigurationVersion, upload_url: Option<&str>) -> Value {
    let st = cv.status.clone().unwrap_or_default();
    let mut attrs = json!({
        "auto-queue-runs": cv.spec.auto_queue_runs,
        "error": st.error_message.as_ref().map(|_| ConfigurationVersionState::Errored.as_str()),
        "error-message": st.error_message,
        "source": cv.spec.source,
        "speculative": cv.spec.speculative,
        "provisional": cv.spec.provisional,
        "status": status_of(cv),
        "status-timestamps": match st.uploaded_at.as_deref() {
            Some(t) => json!({"uploaded-at": t}),
            None => json!({}),
        },
        "changed-files": [],
        "created-at": created_at(cv),
    });
    if let Some(u) = upload_url {
        attrs["upload-url"] = json!(u);
    }
    json!({
        "id": id_of(cv),
        "type": "configuration-versions",
        "attributes": attrs,
        "relationships": {"ingress-attributes": match &cv.spec.ingress_attributes {
            Some(_) => json!({
                "data": {"id": ingress_id(cv), "type": "ingress-attributes"},
                "links": {"related": format!("/api/v2/configuration-versions/{}/ingress-attributes", id_of(cv))},
            }),
            None => json!({"data": null}),
        }},
        "links": {"self": format!("/api/v2/configuration-versions/{}", id_of(cv))},
    })
}

/// The ID of a configuration version's ingress attributes (`ia-` and its own random part).
pub fn ingress_id(cv: &ConfigurationVersion) -> String {
    let id = id_of(cv);
    format!("ia-{}", id.strip_prefix("cv-").unwrap_or(&id))
}

/// The JSON:API `data` of the ingress attributes of `cv` (a version from a repository).
pub fn render_ingress(cv: &ConfigurationVersion) -> Option<Value> {
    let i = cv.spec.ingress_attributes.as_deref()?;
    Some(json!({
        "id": ingress_id(cv),
        "type": "ingress-attributes",
        "attributes": {
            "branch": i.branch,
            "clone-url": i.clone_url,
            "commit-message": i.commit_message,
            "commit-sha": i.commit_sha,
            "commit-url": i.commit_url,
            "compare-url": i.compare_url,
            "identifier": i.identifier,
            "is-pull-request": i.is_pull_request,
            "on-default-branch": i.on_default_branch,
            "pull-request-number": i.pull_request_number,
            "pull-request-url": i.pull_request_url,
            "pull-request-title": i.pull_request_title,
            "pull-request-body": i.pull_request_body,
            "tag": i.tag,
            "sender-username": i.sender_username,
            "sender-avatar-url": i.sender_avatar_url,
            "sender-html-url": i.sender_html_url,
        },
        "relationships": {"created-by": {"data": null}},
        "links": {"self": format!("/api/v2/configuration-versions/{}/ingress-attributes", id_of(cv))},
    }))
}

/// The metadata of a new configuration version: `base` with the annotations of a new
/// upload capability (their SHA-256 and expiry; the token is answered, to be shown once
/// in the upload URL) and, where archives go to a bucket, the finalizer under which the
/// operator deletes the archive before the version goes.
pub fn pending_meta(state: &AppState, base: ObjectMeta) -> Result<(String, ObjectMeta), ApiError> {
    let token = random_token();
    let expires = jiff::Timestamp::now()
        .checked_add(UPLOAD_TTL)
        .map_err(|e| ApiError::internal("upload expiry", e))?;
    let mut annotations = base.annotations.clone().unwrap_or_default();
    annotations.extend([
        (
            ANNOTATION_UPLOAD_SHA256.to_owned(),
            sha256_hex(token.as_bytes()),
        ),
        (ANNOTATION_UPLOAD_EXPIRES.to_owned(), expires.to_string()),
    ]);
    let meta = ObjectMeta {
        annotations: Some(annotations),
        finalizers: state.blobs.owner_finalizers(),
        ..base
    };
    Ok((token, meta))
}

/// Creates `cv` (ID `id`, its metadata from [`pending_meta`]) as `pending` and answers it, 201,
/// with the upload URL of `token`: the only time the URL is shown.
pub async fn create_pending(
    state: &AppState,
    headers: &HeaderMap,
    cv: &ConfigurationVersion,
    id: &str,
    token: &str,
) -> Result<Doc, ApiError> {
    let (created, url) = create_pending_object(state, headers, cv, id, token).await?;
    Ok(Doc::created(render(&created, Some(&url))))
}

/// [`create_pending`] for a caller that shows the upload URL in its own document (a
/// module version's `upload` link): answers the URL.
pub async fn create_pending_raw(
    state: &AppState,
    headers: &HeaderMap,
    cv: &ConfigurationVersion,
    id: &str,
    token: &str,
) -> Result<String, ApiError> {
    Ok(create_pending_object(state, headers, cv, id, token)
        .await?
        .1)
}

/// Creates pending `cv` and answers it with its upload URL.
async fn create_pending_object(
    state: &AppState,
    headers: &HeaderMap,
    cv: &ConfigurationVersion,
    id: &str,
    token: &str,
) -> Result<(ConfigurationVersion, String), ApiError> {
    let ns = cv.namespace().unwrap_or_default();
    let created = write::create_with_status(
        state,
        &ns,
        cv,
        json!({"id": id, "status": ConfigurationVersionState::Pending.as_str()}),
    )
    .await?;
    write::wait_seen(state, &created).await;
    let url = format!("{}{UPLOAD_PATH}/{token}", base_url(state, headers));
    Ok((created, url))
}

/// The uploaded tar.gz of configuration version `cv` of namespace `ns` as a response, byte
/// for byte from the blob store (its SHA-256 checked as it streams); 409 without one,
/// `missing` when the store has none.
pub async fn archive_response(
    state: &AppState,
    ns: &str,
    cv: &ConfigurationVersion,
    missing: &'static str,
) -> Result<Response, ApiError> {
    use crate::blobs::BlobStore;
    let (key, sha256) = cv
        .status
        .as_ref()
        .and_then(|s| s.archive.as_ref())
        .map(|a| (a.key.clone(), a.sha256.clone()))
        .ok_or_else(|| ApiError::conflict("the configuration version has no uploaded archive"))?;
    let blob = crate::blobs::store(state, ns, None)
        .get_stream(&key, Some(&sha256))
        .await
        .map_err(|e| crate::blobs::read_error("the archive", missing, e))?;
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/gzip".to_owned(),
            ),
            (axum::http::header::CONTENT_LENGTH, blob.size.to_string()),
        ],
        axum::body::Body::from_stream(blob.pieces),
    )
        .into_response())
}

/// Purpose of a module version's upload token ([`module_version_token`]).
const MODULE_VERSION_UPLOAD: &str = "module-version-upload";

/// The upload token of module version configuration version `cv_id` whose upload URL
/// expires at `expires` (its `ANNOTATION_UPLOAD_EXPIRES`): derived from them with the
/// server's URL signing key, so the version's `upload` link reads the same every time it
/// is shown (go-tfe reads it again from `GET …/version` and uploads twice), while only
/// its SHA-256 is kept. None when the expiry does not read.
pub fn module_version_token(state: &AppState, cv_id: &str, expires: &str) -> Option<String> {
    let at = expires.parse::<jiff::Timestamp>().ok()?;
    Some(format!(
        "{cv_id}.{}",
        state
            .signer
            .sign_until(MODULE_VERSION_UPLOAD, cv_id, at.as_second())
    ))
}

/// The upload URL of module version configuration version `cv` while its upload link
/// works (not expired, the token kept): the same URL its create answered.
pub fn module_version_upload_url(
    state: &AppState,
    headers: &HeaderMap,
    cv: &ConfigurationVersion,
) -> Option<String> {
    let expires = cv.annotations().get(ANNOTATION_UPLOAD_EXPIRES)?;
    let open = expires
        .parse::<jiff::Timestamp>()
        .is_ok_and(|t| t > jiff::Timestamp::now());
    let token = module_version_token(state, &id_of(cv), expires).filter(|_| open)?;
    let kept = cv.annotations().get(ANNOTATION_UPLOAD_SHA256);
    (kept == Some(&sha256_hex(token.as_bytes())))
        .then(|| format!("{}{UPLOAD_PATH}/{token}", base_url(state, headers)))
}

/// [`pending_meta`] of a module version's configuration version: its token is
/// [`module_version_token`], so its upload link can be shown again.
pub fn module_version_pending_meta(
    state: &AppState,
    cv_id: &str,
    base: ObjectMeta,
) -> Result<(String, ObjectMeta), ApiError> {
    let (_, mut meta) = pending_meta(state, base)?;
    let annotations = meta.annotations.get_or_insert_default();
    let expires = annotations
        .get(ANNOTATION_UPLOAD_EXPIRES)
        .cloned()
        .unwrap_or_default();
    let token = module_version_token(state, cv_id, &expires)
        .ok_or_else(|| ApiError::bug("an upload expiry that does not read"))?;
    annotations.insert(
        ANNOTATION_UPLOAD_SHA256.to_owned(),
        sha256_hex(token.as_bytes()),
    );
    Ok((token, meta))
}
