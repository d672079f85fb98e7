//! The API's one error type. Every failure of a handler becomes an [`ApiError`] and is
//! rendered as a JSON:API error document with the status code SPEC.md gives and the
//! titles TFE uses ("invalid attribute", "not found", …), so the terraform CLI and go-tfe
//! show it well. Kubernetes answers are mapped into the API's own words
//! ([`From<kube::Error>`]): a client never sees an object name, a field path of the CRD or
//! a message of the cluster. Details of 5xx errors are logged with their source, never
//! returned.

use std::borrow::Cow;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The JSON:API media type TFE answers with.
pub const MEDIA_TYPE: &str = "application/vnd.api+json";

/// One offending field of a request: a JSON pointer into the request document
/// (`/data/attributes/name`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub pointer: String,
    pub detail: String,
}

impl FieldError {
    pub fn new(pointer: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError {
            pointer: pointer.into(),
            detail: detail.into(),
        }
    }

    /// An error on `data.attributes.<attr>` (dots in `attr` become pointer segments).
    pub fn attribute(attr: &str, detail: impl Into<String>) -> FieldError {
        FieldError::new(
            format!("/data/attributes/{}", attr.replace('.', "/")),
            detail,
        )
    }
}

impl From<terrace_crds::rules::RuleViolation> for FieldError {
    fn from(v: terrace_crds::rules::RuleViolation) -> FieldError {
        FieldError::attribute(v.attribute, v.humanized())
    }
}

/// A failure of a request, with the status it answers.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: a malformed request (bad JSON, a bad query parameter).
    #[error("bad request: {detail}")]
    BadRequest {
        detail: String,
        parameter: Option<String>,
    },
    /// 401: no token, or one the cluster does not accept.
    #[error("unauthorized")]
    Unauthorized(Cow<'static, str>),
    /// 403: the caller may see the object but not do this to it.
    #[error("forbidden: {0}")]
    Forbidden(Cow<'static, str>),
    /// 404: the object does not exist or the caller may not see it.
    #[error("not found: {0}")]
    NotFound(Cow<'static, str>),
    /// 405.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 409: the object's state does not allow the operation.
    #[error("conflict: {0}")]
    Conflict(Cow<'static, str>),
    /// 413: a body over a limit.
    #[error("payload too large: {0}")]
    TooLarge(Cow<'static, str>),
    /// 422: broken rules, one entry per offending field.
    #[error("invalid: {}", .0.iter().map(|e| format!("{}: {}", e.pointer, e.detail)).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldError>),
    /// 503: something the request needs is not ready; retrying shortly is the cure.
    #[error("unavailable: {0}")]
    Unavailable(Cow<'static, str>),
    /// 500: an internal failure; `context` and `source` are logged, not returned.
    #[error("{context}: {source}")]
    Internal {
        context: Cow<'static, str>,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A plain message as an error source.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Bug(pub String);

impl ApiError {
    /// 422 for one field.
    pub fn invalid(pointer: impl Into<String>, detail: impl Into<String>) -> ApiError {
        ApiError::Invalid(vec![FieldError::new(pointer, detail)])
    }

    /// 422 for one attribute of `data.attributes`.
    pub fn invalid_attribute(attr: &str, detail: impl Into<String>) -> ApiError {
        ApiError::Invalid(vec![FieldError::attribute(attr, detail)])
    }

    /// 404 with a detail.
    pub fn not_found(what: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::NotFound(what.into())
    }

    /// 403 with a detail.
    pub fn forbidden(detail: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::Forbidden(detail.into())
    }

    /// 409 with a detail.
    pub fn conflict(detail: impl Into<Cow<'static, str>>) -> ApiError {
        ApiError::Conflict(detail.into())
    }

    /// 400 naming a query parameter.
    pub fn bad_parameter(parameter: impl Into<String>, detail: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            detail: detail.into(),
            parameter: Some(parameter.into()),
        }
    }

    /// 400 about the body.
    pub fn bad_body(detail: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            detail: detail.into(),
            parameter: None,
        }
    }

    /// 500 with its cause.
    pub fn internal(
        context: impl Into<Cow<'static, str>>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> ApiError {
        ApiError::Internal {
            context: context.into(),
            source: source.into(),
        }
    }

    /// 500 for a state that should not happen.
    pub fn bug(detail: impl Into<String>) -> ApiError {
        ApiError::internal("internal error", Bug(detail.into()))
    }

    /// The HTTP status code.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// A short label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ApiError::BadRequest { .. } => "bad_request",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::TooLarge(_) => "too_large",
            ApiError::Invalid(_) => "invalid",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal { .. } => "internal",
        }
    }

    /// The error objects of the document.
    pub fn objects(&self) -> Vec<ErrorObject> {
        let status = self.status();
        let code = status.as_u16().to_string();
        let object =
            |title: &str, detail: Option<String>, source: Option<ErrorSource>| ErrorObject {
                status: code.clone(),
                title: title.to_owned(),
                detail,
                source,
            };
        match self {
            ApiError::Invalid(fields) => fields
                .iter()
                .map(|f| {
                    object(
                        "invalid attribute",
                        Some(f.detail.clone()),
                        Some(ErrorSource {
                            pointer: Some(f.pointer.clone()),
                            parameter: None,
                        }),
                    )
                })
                .collect(),
            ApiError::BadRequest { detail, parameter } => vec![object(
                "bad request",
                Some(detail.clone()),
                parameter.clone().map(|p| ErrorSource {
                    pointer: None,
                    parameter: Some(p),
                }),
            )],
            ApiError::Internal { .. } => vec![object("internal server error", None, None)],
            ApiError::MethodNotAllowed => vec![object(
                "method not allowed",
                Some("method not allowed".into()),
                None,
            )],
            ApiError::Unauthorized(d)
            | ApiError::Forbidden(d)
            | ApiError::NotFound(d)
            | ApiError::Conflict(d)
            | ApiError::TooLarge(d)
            | ApiError::Unavailable(d) => {
                let title = status
                    .canonical_reason()
                    .unwrap_or("error")
                    .to_ascii_lowercase();
                vec![object(&title, Some(d.to_string()), None)]
            }
        }
    }
}

/// The rejection of an extractor is the API's error (axum renders it with our format).
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal { context, source } = &self {
            tracing::error!(%context, error = %source, "internal error");
        }
        let body = ErrorDocument {
            errors: self.objects(),
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{\"errors\":[]}".to_vec());
        (self.status(), [(header::CONTENT_TYPE, MEDIA_TYPE)], bytes).into_response()
    }
}

/// Kubernetes answers in the API's own words. 404 and 409 keep their meaning; a 422 of
/// the cluster's schema names the fields it refused (paths of the object, not of the
/// request, so without a pointer into it); a 403 means terrace's own service account
/// lacks a right (a deployment problem: 500, logged); an unreachable cluster is 503.
impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> ApiError {
        match e {
            kube::Error::Api(s) => match s.code {
                404 => ApiError::not_found("not found"),
                409 if s.reason == "AlreadyExists" => {
                    ApiError::conflict("an object with this name already exists")
                }
                409 => ApiError::conflict("the object changed concurrently; retry the request"),
                422 | 400 => {
                    let causes: Vec<String> = s
                        .details
                        .iter()
                        .flat_map(|d| d.causes.iter())
                        .map(|c| format!("{}: {}", c.field, c.message))
                        .collect();
                    let fields = if causes.is_empty() {
                        s.message
                            .split_once(" is invalid: ")
                            .map_or("the object was refused", |(_, f)| f)
                            .to_owned()
                    } else {
                        causes.join("; ")
                    };
                    ApiError::invalid("/data", format!("the cluster refused the change: {fields}"))
                }
                403 => {
                    // The caller was allowed; terrace's own identity is not: the chart's
                    // RBAC lacks a rule. Named in the log, where an operator looks.
                    tracing::error!(
                        missing_permission = %s.message,
                        "Kubernetes forbids terrace's own service account a call it needs: grant it in the chart's ClusterRole"
                    );
                    ApiError::internal(
                        "terrace's service account lacks a permission",
                        kube::Error::Api(s),
                    )
                }
                429 | 500..=599 => ApiError::Unavailable(
                    "the cluster API is not available right now; retry shortly".into(),
                ),
                _ => ApiError::internal("the cluster API answered an error", kube::Error::Api(s)),
            },
            other @ (kube::Error::HyperError(_)
            | kube::Error::Service(_)
            | kube::Error::HttpError(_)) => {
                tracing::warn!(error = %other, "cluster API unreachable");
                ApiError::Unavailable(
                    "the cluster API is not reachable right now; retry shortly".into(),
                )
            }
            other => ApiError::internal("cluster API call failed", other),
        }
    }
}

/// One JSON:API error object.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorObject {
    pub status: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ErrorSource>,
}

/// Where in the request the error is (`/data/attributes/name`) or which query parameter.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
}

/// `{"errors": [...]}`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorDocument {
    pub errors: Vec<ErrorObject>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_renders_one_object_per_field_with_pointers() {
        let e = ApiError::Invalid(vec![
            FieldError::attribute("name", "bad"),
            FieldError::attribute("setting-overwrites.agent-pool", "worse"),
        ]);
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let o = e.objects();
        assert_eq!(o.len(), 2);
        assert_eq!(o[0].status, "422");
        assert_eq!(o[0].title, "invalid attribute");
        assert_eq!(
            o[1].source.as_ref().and_then(|s| s.pointer.as_deref()),
            Some("/data/attributes/setting-overwrites/agent-pool")
        );
    }

    #[test]
    fn internal_errors_hide_their_detail() {
        let o = ApiError::bug("secret connection string").objects();
        assert_eq!(o[0].status, "500");
        assert_eq!(o[0].detail, None);
    }

    fn api(code: u16, reason: &str, message: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": message, "reason": reason, "code": code,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn kubernetes_answers_are_mapped_without_their_words() {
        let e = ApiError::from(api(
            409,
            "Conflict",
            "Operation cannot be fulfilled on workspaces.terrace.dev \"ws-x\": the object has been modified",
        ));
        assert_eq!(e.status(), StatusCode::CONFLICT);
        assert!(
            !e.objects()[0]
                .detail
                .clone()
                .unwrap_or_default()
                .contains("terrace.dev")
        );
        let e = ApiError::from(api(
            404,
            "NotFound",
            "workspaces.terrace.dev \"ws-x\" not found",
        ));
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert!(
            !e.objects()[0]
                .detail
                .clone()
                .unwrap_or_default()
                .contains("ws-x")
        );
        let e = ApiError::from(api(
            422,
            "Invalid",
            "Workspace.terrace.dev \"ws-x\" is invalid: spec.name: Invalid value: \"a b\"",
        ));
        let detail = e.objects()[0].detail.clone().unwrap_or_default();
        assert!(
            detail.contains("spec.name") && !detail.contains("ws-x"),
            "{detail}"
        );
        assert_eq!(
            ApiError::from(api(403, "Forbidden", "x")).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            ApiError::from(api(503, "ServiceUnavailable", "x")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
