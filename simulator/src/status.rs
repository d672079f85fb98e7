//! Errors as Kubernetes `Status` objects.
//!
//! Every failure a handler can meet becomes an [`ApiError`], which renders as the
//! `{"kind":"Status","apiVersion":"v1","status":"Failure",...}` body kube-apiserver sends, with
//! the same `reason`, `code`, message wording and `details`, because kube-rs and kubectl
//! branch on those (`reason == "AlreadyExists"`, `code == 409`, `code == 410`, ...).

use crate::resource::ResourceInfo;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// An error answered as a Kubernetes `Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (`name`, `group`, `kind`, `causes`), if any.
    pub details: Option<Value>,
}

/// How a resource is named in error messages: `workspaces.terrace.dev` / `pods`.
#[derive(Clone, Debug)]
pub struct Qualified {
    pub group: String,
    pub plural: String,
    pub kind: String,
}

/// The group, plural and kind of `info`, as errors name them.
pub fn qualified(info: &ResourceInfo) -> Qualified {
    Qualified {
        group: info.group.clone(),
        plural: info.plural.clone(),
        kind: info.kind.clone(),
    }
}

impl Qualified {
    pub fn resource(&self) -> String {
        self.with_group(&self.plural)
    }
    pub fn kind_name(&self) -> String {
        self.with_group(&self.kind)
    }

    /// `name.group`, or `name` alone in the core group.
    fn with_group(&self, name: &str) -> String {
        if self.group.is_empty() {
            name.to_string()
        } else {
            format!("{name}.{}", self.group)
        }
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// An error about object `name` of resource `q`, named in the details as
    /// kube-apiserver's are.
    fn about(
        code: u16,
        reason: &'static str,
        message: String,
        q: &Qualified,
        name: &str,
    ) -> ApiError {
        ApiError::new(code, reason, message)
            .with_details(json!({"name": name, "group": q.group, "kind": q.plural}))
    }

    pub fn not_found(q: &Qualified, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" not found", q.resource());
        ApiError::about(404, "NotFound", message, q, name)
    }

    pub fn already_exists(q: &Qualified, name: &str) -> ApiError {
        let message = format!("{} \"{name}\" already exists", q.resource());
        ApiError::about(409, "AlreadyExists", message, q, name)
    }

    pub fn conflict(q: &Qualified, name: &str) -> ApiError {
        ApiError::conflict_msg(
            q,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn conflict_msg(q: &Qualified, name: &str, why: &str) -> ApiError {
        let resource = q.resource();
        let message = format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}");
        ApiError::about(409, "Conflict", message, q, name)
    }

    /// 422 Invalid with one cause per field error, worded like kube-apiserver:
    /// `Workspace.terrace.dev "x" is invalid: spec.name: Invalid value: ...`.
    pub fn invalid(q: &Qualified, name: &str, causes: &[(String, String, String)]) -> ApiError {
        let messages: Vec<&str> = causes.iter().map(|(_, _, m)| m.as_str()).collect();
        let joined = if messages.len() == 1 {
            messages[0].to_string()
        } else {
            format!("[{}]", messages.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(field, reason, message)| {
                let body = message
                    .strip_prefix(&format!("{field}: "))
                    .unwrap_or(message);
                json!({"reason": reason, "message": body, "field": field})
            })
            .collect();
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {joined}", q.kind_name()),
        )
        .with_details(json!({"name": name, "group": q.group, "kind": q.kind, "causes": causes}))
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(403, "Forbidden", message)
    }

    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    pub fn page_not_found() -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    /// The `Status` body.
    pub fn to_status(&self) -> Value {
        crate::auth::failure_status(self.code, self.reason, &self.message, self.details.as_ref())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        (
            code,
            [(http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
