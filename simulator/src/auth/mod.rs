//! Authentication and authorization, as kube-apiserver does them, as pure functions.
//!
//! What flows through here: a bearer token (or none) becomes a [`UserInfo`]
//! ([`tokens::Authenticator`]); impersonation headers may swap it for another one
//! ([`impersonation::impersonate`]); the request line becomes [`rbac::Attributes`]
//! ([`request::request_attributes`]); and the RBAC objects in the store, gathered into an
//! [`rbac::RbacSnapshot`], decide whether that user may do that. The review kinds
//! (TokenRequest, TokenReview, SubjectAccessReview and friends, in [`tokens`] and
//! [`review`]) take a request body and return the response body.
//!
//! Nothing here does I/O, holds locks or reads the clock: the server passes the current
//! time, the RBAC objects and a ServiceAccount lookup in, and turns a [`StatusError`] into
//! an HTTP response with [`StatusError::code`] and [`StatusError::to_json`]. That keeps
//! every rule unit-testable and the server's wiring a few lines:
//!
//! ```text
//! // once: authn = Authenticator::new(TokenSigner::new(persisted_key), StaticTokens::with_admin(t));
//! //       create every object of bootstrap_policy() if missing.
//! // per request:
//! let rbac = RbacSnapshot::from_objects(store.rbac_objects());          // or cache per RV
//! let user = match bearer_token {
//!     None => UserInfo::anonymous(),
//!     Some(t) => authn.authenticate(t, &[], now, |ns, name| store.service_account_uid(ns, name))
//!         .map_err(|_| StatusError::unauthorized())?.user,
//! };
//! let headers = ImpersonationHeaders::from_headers(req.headers().iter().map(..));
//! let user = impersonate(&user, &headers, &rbac)?.unwrap_or(user);    // Malformed → 500, Forbidden → 403
//! let attrs = request_attributes(method, path, query);
//! let decision = rbac.authorize(&user, &attrs);
//! if !decision.allowed { return Err(forbidden_status(&user, &attrs, &decision.reason)) }
//! // review kinds: token_request, token_review(body, |t, auds| authn.authenticate(t, auds, now, ..)),
//! // subject_access_review(body, &rbac), self_subject_access_review(body, &user, &rbac), …
//! ```

pub mod impersonation;
pub mod rbac;
pub mod request;
pub mod review;
pub mod tokens;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use impersonation::{ImpersonationError, ImpersonationHeaders, impersonate};
pub use rbac::{Attributes, Decision, RbacSnapshot, bootstrap_policy};
pub use request::request_attributes;
pub use review::{
    local_subject_access_review, self_subject_access_review, self_subject_rules_review,
    subject_access_review, token_review,
};
pub use tokens::{
    AuthError, Authenticated, Authenticator, ServiceAccountClaims, StaticTokens, TokenError,
    TokenSigner, token_request,
};

/// The group every authenticated user is in.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of requests that carry no credentials.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user name of requests that carry no credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group the privileged-group authorizer lets do anything.
pub const SYSTEM_MASTERS: &str = "system:masters";
/// Prefix of ServiceAccount user names: `system:serviceaccount:<namespace>:<name>`.
pub const SERVICE_ACCOUNT_USERNAME_PREFIX: &str = "system:serviceaccount:";
/// The group of all ServiceAccounts; `system:serviceaccounts:<namespace>` per namespace.
pub const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// Who a request is from: `authentication.k8s.io/v1` UserInfo (the same shape is
/// `status.user` of a TokenReview and `userInfo` of a SelfSubjectReview).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user of a request without credentials (anonymous auth is on by default).
    pub fn anonymous() -> Self {
        UserInfo {
            username: ANONYMOUS.to_string(),
            groups: vec![ALL_UNAUTHENTICATED.to_string()],
            ..UserInfo::default()
        }
    }

    /// Adds `system:authenticated` unless present, as the authenticated-group adder that
    /// wraps every kube-apiserver authenticator does.
    pub(crate) fn with_authenticated_group(mut self) -> Self {
        if !self.groups.iter().any(|g| g == ALL_AUTHENTICATED) {
            self.groups.push(ALL_AUTHENTICATED.to_string());
        }
        self
    }
}

/// `(namespace, name)` if `username` is a valid ServiceAccount user name.
pub fn split_service_account_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_USERNAME_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    if namespace.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((namespace, name))
}

/// The groups a ServiceAccount of `namespace` is in (before `system:authenticated`).
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        ALL_SERVICE_ACCOUNTS.to_string(),
        format!("{ALL_SERVICE_ACCOUNTS}:{namespace}"),
    ]
}

/// A bad value in a field error, printed the way apimachinery's `field.Error` prints it.
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    Int(i64),
    Str(String),
    Null,
    /// Anything else; printed as JSON (Go prints a Go literal).
    Other(Value),
}

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Str(s) => write!(f, "{}", Value::String(s.clone())),
            BadValue::Null => f.write_str("\"null\""),
            BadValue::Other(v) => write!(f, "{v}"),
        }
    }
}

/// One `FieldValueInvalid` cause of an Invalid status.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub value: BadValue,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(field: &str, value: BadValue, detail: &str) -> Self {
        FieldError {
            field: field.to_string(),
            value,
            detail: detail.to_string(),
        }
    }

    /// `field.Error.ErrorBody()`: `Invalid value: <value>: <detail>`.
    pub fn body(&self) -> String {
        format!("Invalid value: {}: {}", self.value, self.detail)
    }
}

/// A failure `v1` Status object, the body of every error answer.
pub fn failure_status(code: u16, reason: &str, message: &str, details: Option<&Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let Some(details) = details {
        status["details"] = details.clone();
    }
    status
}

/// A `metav1.Status` failure, ready for the server to send with [`StatusError::code`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct StatusError {
    pub code: u16,
    /// `metav1.StatusReason`: `BadRequest`, `Invalid`, `Forbidden`, `Unauthorized`, …
    pub reason: String,
    pub message: String,
    /// `details` of the Status (group, kind, name, causes), if any.
    pub details: Option<Value>,
}

impl StatusError {
    /// `apierrors.NewBadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        StatusError {
            code: 400,
            reason: "BadRequest".to_string(),
            message: message.into(),
            details: None,
        }
    }

    /// `apierrors.NewUnauthorized("Unauthorized")`, what a request with a rejected token gets.
    pub fn unauthorized() -> Self {
        StatusError {
            code: 401,
            reason: "Unauthorized".to_string(),
            message: "Unauthorized".to_string(),
            details: None,
        }
    }

    /// `apierrors.NewInvalid(GroupKind{group, kind}, name, errs)`.
    pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut messages: Vec<String> = Vec::new();
        for e in errors {
            let m = format!("{}: {}", e.field, e.body());
            if !messages.contains(&m) {
                messages.push(m);
            }
        }
        let aggregate = match messages.len() {
            0 => String::new(),
            1 => format!(": {}", messages[0]),
            _ => format!(": [{}]", messages.join(", ")),
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": "FieldValueInvalid", "message": e.body(), "field": e.field}))
            .collect();
        let mut details = json!({"group": group, "kind": kind, "causes": causes});
        if !name.is_empty() {
            details["name"] = json!(name);
        }
        StatusError {
            code: 422,
            reason: "Invalid".to_string(),
            message: format!("{qualified} {} is invalid{aggregate}", go_quote(name)),
            details: Some(details),
        }
    }

    /// `apierrors.NewForbidden(GroupResource{group, resource}, name, errors.New(cause))`.
    pub fn forbidden(group: &str, resource: &str, name: &str, cause: &str) -> Self {
        let qualified = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let message = if qualified.is_empty() {
            format!("forbidden: {cause}")
        } else if name.is_empty() {
            format!("{qualified} is forbidden: {cause}")
        } else {
            format!("{qualified} {} is forbidden: {cause}", go_quote(name))
        };
        let mut details = serde_json::Map::new();
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        if !resource.is_empty() {
            details.insert("kind".into(), json!(resource));
        }
        if !name.is_empty() {
            details.insert("name".into(), json!(name));
        }
        StatusError {
            code: 403,
            reason: "Forbidden".to_string(),
            message,
            details: Some(Value::Object(details)),
        }
    }

    /// The `v1` Status object to send as the response body.
    pub fn to_json(&self) -> Value {
        failure_status(
            self.code,
            &self.reason,
            &self.message,
            self.details.as_ref(),
        )
    }
}

/// The 403 a request gets when `user` may not do `attrs`, worded like
/// `responsewriters.Forbidden`: `pods "x" is forbidden: User "u" cannot get resource "pods"
/// in API group "" in the namespace "ns"` (plus `: <reason>` when the authorizer gave one).
pub fn forbidden_status(user: &UserInfo, attrs: &Attributes, reason: &str) -> StatusError {
    let msg = forbidden_message(&user.username, attrs);
    let cause = if reason.is_empty() {
        msg
    } else {
        format!("{msg}: {reason}")
    };
    if attrs.resource_request {
        StatusError::forbidden(&attrs.api_group, &attrs.resource, &attrs.name, &cause)
    } else {
        StatusError::forbidden("", "", "", &cause)
    }
}

fn forbidden_message(username: &str, attrs: &Attributes) -> String {
    let user = go_quote(username);
    if !attrs.resource_request {
        return format!(
            "User {user} cannot {} path {}",
            attrs.verb,
            go_quote(&attrs.path)
        );
    }
    let mut resource = attrs.resource.clone();
    if !attrs.subresource.is_empty() {
        resource = format!("{resource}/{}", attrs.subresource);
    }
    let scope = if attrs.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {}", go_quote(&attrs.namespace))
    };
    format!(
        "User {user} cannot {} resource {} in API group {} {scope}",
        attrs.verb,
        go_quote(&resource),
        go_quote(&attrs.api_group)
    )
}

pub(crate) use crate::gofmt::{go_quote, go_quote_list};

/// `utilerrors.NewAggregate(errs).Error()`: one message alone, several as `[a, b]`,
/// duplicates removed.
pub(crate) fn aggregate_message(errors: &[String]) -> String {
    let mut unique: Vec<&String> = Vec::new();
    for e in errors {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    match unique.as_slice() {
        [] => String::new(),
        [one] => (*one).clone(),
        many => format!(
            "[{}]",
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Serde helper: a JSON `null` reads as the type's default, like a missing field.
pub(crate) fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Percent-decodes a URL component (`+` is a space when `plus_is_space`); `None` if malformed.
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies apimachinery `apierrors.NewInvalid`: message `Kind.group "name" is invalid:
    /// field: Invalid value: v: detail`, code 422, one `FieldValueInvalid` cause per error.
    #[test]
    fn invalid_status_shape() {
        let err = StatusError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            "",
            &[FieldError::invalid(
                "spec.expirationSeconds",
                BadValue::Int(60),
                "may not specify a duration less than 10 minutes",
            )],
        );
        assert_eq!(
            err.message,
            "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: \
             Invalid value: 60: may not specify a duration less than 10 minutes"
        );
        let status = err.to_json();
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["details"]["kind"], "TokenRequest");
        assert!(status["details"].get("name").is_none());
        assert_eq!(
            status["details"]["causes"][0],
            json!({"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
                   "message": "Invalid value: 60: may not specify a duration less than 10 minutes"})
        );
    }

    /// Copies apimachinery: several field errors aggregate as `[a, b]` in the message.
    #[test]
    fn invalid_status_aggregates_several_errors() {
        let err = StatusError::invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "",
            &[
                FieldError::invalid("spec.a", BadValue::Null, "x"),
                FieldError::invalid("spec.user", BadValue::Str(String::new()), "y"),
            ],
        );
        assert_eq!(
            err.message,
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: \
             [spec.a: Invalid value: \"null\": x, spec.user: Invalid value: \"\": y]"
        );
    }

    /// Copies kube-apiserver `responsewriters.Forbidden` wording for namespaced,
    /// cluster-scoped and non-resource requests.
    #[test]
    fn forbidden_wording() {
        let user = UserInfo {
            username: "alice".into(),
            ..UserInfo::default()
        };
        let attrs = Attributes::resource("lock", "terrace.dev", "workspaces", "acme", "ws-1");
        let err = forbidden_status(&user, &attrs, "");
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "workspaces.terrace.dev \"ws-1\" is forbidden: User \"alice\" cannot lock resource \
             \"workspaces\" in API group \"terrace.dev\" in the namespace \"acme\""
        );
        assert_eq!(
            err.details,
            Some(json!({"group": "terrace.dev", "kind": "workspaces", "name": "ws-1"}))
        );
        let attrs = Attributes::resource("list", "", "namespaces", "", "");
        assert_eq!(
            forbidden_status(&user, &attrs, "").message,
            "namespaces is forbidden: User \"alice\" cannot list resource \"namespaces\" in API \
             group \"\" at the cluster scope"
        );
        let attrs = Attributes::non_resource("get", "/metrics");
        assert_eq!(
            forbidden_status(&user, &attrs, "RBAC: x").message,
            "forbidden: User \"alice\" cannot get path \"/metrics\": RBAC: x"
        );
    }

    /// Copies apiserver `serviceaccount.SplitUsername`: exactly namespace and name.
    #[test]
    fn service_account_usernames() {
        assert_eq!(
            split_service_account_username("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(
            split_service_account_username("system:serviceaccount:ns"),
            None
        );
        assert_eq!(
            split_service_account_username("system:serviceaccount:a:b:c"),
            None
        );
        assert_eq!(split_service_account_username("alice"), None);
    }

    /// Copies `utilerrors.NewAggregate`: a single error prints bare, several in brackets.
    #[test]
    fn aggregate_formatting() {
        assert_eq!(aggregate_message(&["a".into()]), "a");
        assert_eq!(
            aggregate_message(&["a".into(), "b".into(), "a".into()]),
            "[a, b]"
        );
    }
}
