//! A configuration version as the API shows it (module tests, workspace runs).

use terrace_crds::{ConfigurationVersion, ConfigurationVersionState};

use crate::prelude::*;

/// Annotation with the SHA-256 (hex) of the pending upload token.
pub const ANNOTATION_UPLOAD_SHA256: &str = "terrace.dev/upload-token-sha256";
/// Annotation with the RFC 3339 time after which the upload URL no longer works.
pub const ANNOTATION_UPLOAD_EXPIRES: &str = "terrace.dev/upload-expires-at";
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
        "provisional": false,
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
        "relationships": {"ingress-attributes": {"data": null}},
        "links": {"self": format!("/api/v2/configuration-versions/{}", id_of(cv))},
    })
}
