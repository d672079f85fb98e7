//! The API layer's error type. Every failure of a handler becomes one of these and is
//! rendered as a JSON:API error document with the status code SPEC.md gives; details of
//! 5xx errors are logged, never returned.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::jsonapi::{ErrorDocument, ErrorObject, ErrorSource, MEDIA_TYPE};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 404: the resource does not exist or the caller may not see it.
    #[error("not found: {0}")]
    NotFound(String),
    /// 422 with a pointer into the request document.
    #[error("invalid attribute {pointer}: {detail}")]
    Invalid { pointer: String, detail: String },
    /// 400 for a malformed request (bad JSON, bad query parameter).
    #[error("bad request: {detail}")]
    BadRequest {
        detail: String,
        parameter: Option<String>,
    },
    /// Any other status with a detail that is safe to show.
    #[error("{1}")]
    Status(StatusCode, String),
    /// 500: an internal failure; the detail is logged, not returned.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status code.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Status(code, _) => *code,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) => "not_found",
            ApiError::Invalid { .. } => "invalid",
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::Status(..) => "status",
            ApiError::Internal(_) => "internal",
        }
    }

    fn to_object(&self) -> ErrorObject {
        let status = self.status();
        let title = status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase();
        let (detail, source) = match self {
            ApiError::NotFound(d) | ApiError::Status(_, d) => (Some(d.clone()), None),
            ApiError::Invalid { pointer, detail } => (
                Some(detail.clone()),
                Some(ErrorSource {
                    pointer: Some(pointer.clone()),
                    parameter: None,
                }),
            ),
            ApiError::BadRequest { detail, parameter } => (
                Some(detail.clone()),
                parameter.clone().map(|p| ErrorSource {
                    pointer: None,
                    parameter: Some(p),
                }),
            ),
            ApiError::Internal(_) => (None, None),
        };
        ErrorObject {
            status: status.as_u16().to_string(),
            title,
            detail,
            source,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let body = ErrorDocument {
            errors: vec![self.to_object()],
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{\"errors\":[]}".to_vec());
        (self.status(), [(header::CONTENT_TYPE, MEDIA_TYPE)], bytes).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_renders_pointer_and_422() {
        let e = ApiError::Invalid {
            pointer: "/data/attributes/name".into(),
            detail: "bad".into(),
        };
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let o = e.to_object();
        assert_eq!(o.status, "422");
        assert_eq!(
            o.source.and_then(|s| s.pointer).as_deref(),
            Some("/data/attributes/name")
        );
    }

    #[test]
    fn internal_errors_hide_their_detail() {
        let o = ApiError::Internal("secret connection string".into()).to_object();
        assert_eq!(o.status, "500");
        assert_eq!(o.detail, None);
    }
}
