//! The review kinds: a request body in, the response body out, copying
//! `pkg/registry/authentication/tokenreview` and `pkg/registry/authorization/*`.
//!
//! - TokenReview: "who is this token?" (through the server's authenticator closure);
//! - SubjectAccessReview: "may this user do this?" for any user (needs `create` on it);
//! - LocalSubjectAccessReview: the same, limited to the namespace of the URL;
//! - SelfSubjectAccessReview: "may I do this?" (`kubectl auth can-i`);
//! - SelfSubjectRulesReview: "what may I do in this namespace?" (`kubectl auth can-i --list`).
//!
//! The response echoes the request with `status` filled in, as real; validation failures
//! are the real Invalid/BadRequest statuses.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::rbac::{Attributes, RbacSnapshot};
use super::tokens::{AuthError, Authenticated};
use super::{BadValue, FieldError, StatusError, UserInfo, aggregate_message, null_as_default};

const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";

fn decode_error(kind: &str, detail: impl std::fmt::Display) -> StatusError {
    StatusError::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {detail}"
    ))
}

/// The body of a review of kind `kind`, which must be a JSON object.
fn check_body(kind: &str, request: &Value) -> Result<(), StatusError> {
    if request.is_object() {
        Ok(())
    } else {
        Err(decode_error(kind, "body is not a JSON object"))
    }
}

/// `spec.<field>` of a review of kind `kind`: a string, `""` when absent or null.
fn spec_str<'a>(kind: &str, request: &'a Value, field: &str) -> Result<&'a str, StatusError> {
    match request.pointer(&format!("/spec/{field}")) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(_) => Err(decode_error(kind, format!("spec.{field} must be a string"))),
    }
}

/// The request echoed back with `metadata.creationTimestamp: null` (as the API server
/// encodes a never-stored object) and the given status.
fn respond(request: &Value, status: Value) -> Value {
    let mut response = request.clone();
    if !response.get("metadata").is_some_and(Value::is_object) {
        response["metadata"] = json!({});
    }
    if response["metadata"].get("creationTimestamp").is_none() {
        response["metadata"]["creationTimestamp"] = Value::Null;
    }
    response["status"] = status;
    response
}

/// Handles `POST /apis/authentication.k8s.io/v1/tokenreviews`. `authenticate(token,
/// audiences)` is the server's authenticator (empty audiences: the API audiences); see
/// [`super::Authenticator::authenticate`].
pub fn token_review(
    request: &Value,
    authenticate: impl FnOnce(&str, &[String]) -> Result<Authenticated, AuthError>,
) -> Result<Value, StatusError> {
    const KIND: &str = "TokenReview";
    check_body(KIND, request)?;
    let token = spec_str(KIND, request, "token")?;
    let audiences: Vec<String> = match request.pointer("/spec/audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => Vec::<String>::deserialize(v).map_err(|e| decode_error(KIND, e))?,
    };
    if token.is_empty() {
        return Err(StatusError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let status = match authenticate(token, &audiences) {
        Ok(auth) => {
            if !audiences.is_empty() && !auth.audiences.iter().any(|a| audiences.contains(a)) {
                return Err(StatusError {
                    code: 500,
                    reason: "InternalError".into(),
                    message: "Internal error occurred: error validating audiences".into(),
                    details: Some(json!({"causes": [{"message": "error validating audiences"}]})),
                });
            }
            json!({"authenticated": true, "user": auth.user, "audiences": auth.audiences})
        }
        Err(e) => json!({"user": {}, "error": e.to_string()}),
    };
    Ok(respond(request, status))
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceAttributes {
    #[serde(default, deserialize_with = "null_as_default")]
    namespace: String,
    #[serde(default, deserialize_with = "null_as_default")]
    verb: String,
    #[serde(default, deserialize_with = "null_as_default")]
    group: String,
    #[serde(default, deserialize_with = "null_as_default")]
    resource: String,
    #[serde(default, deserialize_with = "null_as_default")]
    subresource: String,
    #[serde(default, deserialize_with = "null_as_default")]
    name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct NonResourceAttributes {
    #[serde(default, deserialize_with = "null_as_default")]
    path: String,
    #[serde(default, deserialize_with = "null_as_default")]
    verb: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccessReviewSpec {
    #[serde(default)]
    resource_attributes: Option<ResourceAttributes>,
    #[serde(default)]
    non_resource_attributes: Option<NonResourceAttributes>,
    #[serde(default, deserialize_with = "null_as_default")]
    user: String,
    #[serde(default, deserialize_with = "null_as_default")]
    groups: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    uid: String,
    #[serde(default, deserialize_with = "null_as_default")]
    extra: BTreeMap<String, Vec<String>>,
}

impl AccessReviewSpec {
    fn attributes(&self) -> Attributes {
        match (&self.resource_attributes, &self.non_resource_attributes) {
            (Some(r), _) => {
                Attributes::resource(&r.verb, &r.group, &r.resource, &r.namespace, &r.name)
                    .with_subresource(&r.subresource)
            }
            (None, Some(n)) => Attributes::non_resource(&n.verb, &n.path),
            (None, None) => Attributes::default(),
        }
    }
}

fn parse_spec(kind: &str, request: &Value) -> Result<AccessReviewSpec, StatusError> {
    check_body(kind, request)?;
    match request.get("spec") {
        None | Some(Value::Null) => Ok(AccessReviewSpec::default()),
        Some(spec) => AccessReviewSpec::deserialize(spec).map_err(|e| decode_error(kind, e)),
    }
}

/// The error of a spec's `nonResourceAttributes` (shown as the Go struct it is).
fn non_resource_error(n: &NonResourceAttributes, detail: &str) -> FieldError {
    FieldError::invalid(
        "spec.nonResourceAttributes",
        BadValue::Other(Value::String(format!(
            "authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
            super::go_quote(&n.path),
            super::go_quote(&n.verb)
        ))),
        detail,
    )
}

/// `ValidateSubjectAccessReviewSpec` / `ValidateSelfSubjectAccessReviewSpec`.
fn validate_attributes(spec: &AccessReviewSpec, errors: &mut Vec<FieldError>) {
    match (&spec.resource_attributes, &spec.non_resource_attributes) {
        (Some(_), Some(n)) => errors.push(non_resource_error(
            n,
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => errors.push(FieldError::invalid(
            "spec.resourceAttributes",
            BadValue::Null,
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
}

/// Metadata other than `managedFields` and a null `creationTimestamp` (what kubectl
/// sends), i.e. what the validation's "must be empty" looks at.
fn meaningful_metadata(request: &Value, allow_namespace: bool) -> Option<Value> {
    let Some(Value::Object(meta)) = request.get("metadata") else {
        return None;
    };
    let mut meta = meta.clone();
    meta.remove("managedFields");
    if meta.get("creationTimestamp").is_some_and(Value::is_null) {
        meta.remove("creationTimestamp");
    }
    if allow_namespace {
        meta.remove("namespace");
    }
    meta.retain(|_, v| !(v.is_null() || v == "" || v == &json!({}) || v == &json!([])));
    (!meta.is_empty()).then_some(Value::Object(meta))
}

fn invalid_kind(kind: &str, errors: &[FieldError]) -> StatusError {
    StatusError::invalid(AUTHORIZATION_GROUP, kind, "", errors)
}

fn access_status(rbac: &RbacSnapshot, user: &UserInfo, attrs: &Attributes) -> Value {
    let decision = rbac.authorize(user, attrs);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    status
}

/// The checks every access review kind shares, in kube-apiserver's order: the attributes,
/// a user or group when the review names one (`names_user`), and empty metadata (but for
/// the namespace when `namespaced`).
fn review_errors(
    spec: &AccessReviewSpec,
    request: &Value,
    names_user: bool,
    namespaced: bool,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_attributes(spec, &mut errors);
    if names_user && spec.user.is_empty() && spec.groups.is_empty() {
        errors.push(FieldError::invalid(
            "spec.user",
            BadValue::Str(String::new()),
            "at least one of user or group must be specified",
        ));
    }
    if let Some(meta) = meaningful_metadata(request, namespaced) {
        let detail = if namespaced {
            "must be empty except for namespace"
        } else {
            "must be empty"
        };
        errors.push(FieldError::invalid(
            "metadata",
            BadValue::Other(meta),
            detail,
        ));
    }
    errors
}

fn spec_user(spec: &AccessReviewSpec) -> UserInfo {
    UserInfo {
        username: spec.user.clone(),
        uid: spec.uid.clone(),
        groups: spec.groups.clone(),
        extra: spec.extra.clone(),
    }
}

/// Handles `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`: may `spec.user`
/// (with exactly `spec.groups`; nothing is added) do `spec.resourceAttributes` or
/// `spec.nonResourceAttributes`?
pub fn subject_access_review(request: &Value, rbac: &RbacSnapshot) -> Result<Value, StatusError> {
    const KIND: &str = "SubjectAccessReview";
    let spec = parse_spec(KIND, request)?;
    let errors = review_errors(&spec, request, true, false);
    access_answer(KIND, request, &spec, errors, rbac, &spec_user(&spec))
}

/// The answer to an access review of kind `kind` whose spec had these validation `errors`
/// (422 unless none): whether `user` may do what the spec asks.
fn access_answer(
    kind: &str,
    request: &Value,
    spec: &AccessReviewSpec,
    errors: Vec<FieldError>,
    rbac: &RbacSnapshot,
    user: &UserInfo,
) -> Result<Value, StatusError> {
    if !errors.is_empty() {
        return Err(invalid_kind(kind, &errors));
    }
    Ok(respond(
        request,
        access_status(rbac, user, &spec.attributes()),
    ))
}

/// Handles `POST /apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews`
/// with `path_namespace` = `{ns}`.
pub fn local_subject_access_review(
    request: &Value,
    path_namespace: &str,
    rbac: &RbacSnapshot,
) -> Result<Value, StatusError> {
    const KIND: &str = "LocalSubjectAccessReview";
    let spec = parse_spec(KIND, request)?;
    if path_namespace.is_empty() {
        return Err(StatusError::bad_request(
            "namespace is required on this type: ",
        ));
    }
    let object_namespace = request
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !object_namespace.is_empty() && object_namespace != path_namespace {
        return Err(StatusError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut errors = review_errors(&spec, request, true, true);
    if let Some(r) = &spec.resource_attributes
        && r.namespace != path_namespace
    {
        errors.push(FieldError::invalid(
            "spec.resourceAttributes.namespace",
            BadValue::Str(r.namespace.clone()),
            "must match metadata.namespace",
        ));
    }
    if let Some(n) = &spec.non_resource_attributes {
        errors.push(non_resource_error(n, "disallowed on this kind of request"));
    }
    let mut response = access_answer(KIND, request, &spec, errors, rbac, &spec_user(&spec))?;
    response["metadata"]["namespace"] = json!(path_namespace);
    Ok(response)
}

/// Handles `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: may the
/// caller (`user`, as authenticated) do this?
pub fn self_subject_access_review(
    request: &Value,
    user: &UserInfo,
    rbac: &RbacSnapshot,
) -> Result<Value, StatusError> {
    const KIND: &str = "SelfSubjectAccessReview";
    let spec = parse_spec(KIND, request)?;
    let errors = review_errors(&spec, request, false, false);
    access_answer(KIND, request, &spec, errors, rbac, user)
}

/// Handles `POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`: the caller's
/// rules in `spec.namespace` (cluster-wide ones included), split into resource and
/// non-resource rules as real.
pub fn self_subject_rules_review(
    request: &Value,
    user: &UserInfo,
    rbac: &RbacSnapshot,
) -> Result<Value, StatusError> {
    const KIND: &str = "SelfSubjectRulesReview";
    check_body(KIND, request)?;
    let namespace = spec_str(KIND, request, "namespace")?;
    if namespace.is_empty() {
        return Err(StatusError::bad_request("no namespace on request"));
    }
    let (rules, errors) = rbac.rules_for(user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rules {
        if !rule.resources.is_empty() {
            let mut r = json!({"verbs": rule.verbs});
            for (key, list) in [
                ("apiGroups", &rule.api_groups),
                ("resources", &rule.resources),
                ("resourceNames", &rule.resource_names),
            ] {
                if !list.is_empty() {
                    r[key] = json!(list);
                }
            }
            resource_rules.push(r);
        }
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(aggregate_message(&errors));
    }
    Ok(json!({
        "kind": KIND,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": {},
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::rbac::bootstrap_policy;

    fn snapshot() -> RbacSnapshot {
        let mut objects = bootstrap_policy();
        objects.extend([
            json!({"kind": "ClusterRole", "metadata": {"name": "terrace-workspace-locker"},
                   "rules": [{"verbs": ["get", "list", "lock"], "apiGroups": ["terrace.dev"], "resources": ["workspaces"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "lockers", "namespace": "acme"},
                   "roleRef": {"kind": "ClusterRole", "name": "terrace-workspace-locker"},
                   "subjects": [{"kind": "User", "name": "alice"}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "broken", "namespace": "acme"},
                   "roleRef": {"kind": "ClusterRole", "name": "missing"},
                   "subjects": [{"kind": "User", "name": "alice"}]}),
        ]);
        RbacSnapshot::from_objects(objects)
    }

    fn alice() -> UserInfo {
        UserInfo {
            username: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..UserInfo::default()
        }
    }

    /// What `kubectl auth can-i <verb> workspaces.terrace.dev -n <ns>` sends.
    fn can_i(verb: &str, namespace: &str) -> Value {
        json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
               "metadata": {"creationTimestamp": null},
               "spec": {"resourceAttributes": {"namespace": namespace, "verb": verb,
                        "group": "terrace.dev", "resource": "workspaces"}},
               "status": {"allowed": false}})
    }

    /// Copies kube-apiserver's SelfSubjectAccessReview: the request echoed with
    /// `status.allowed` and the RBAC reason (`kubectl auth can-i lock workspaces -n acme`).
    #[test]
    fn ssar_allowed_response_shape() {
        let resp = self_subject_access_review(&can_i("lock", "acme"), &alice(), &snapshot());
        let resp = resp.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resp["kind"], "SelfSubjectAccessReview");
        assert_eq!(resp["metadata"], json!({"creationTimestamp": null}));
        assert_eq!(resp["spec"], can_i("lock", "acme")["spec"]);
        assert_eq!(
            resp["status"],
            json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"lockers/acme\" of \
                   ClusterRole \"terrace-workspace-locker\" to User \"alice\""})
        );
    }

    /// Copies kube-apiserver's SelfSubjectAccessReview: not allowed is `allowed: false`
    /// with no `denied` (RBAC has no opinion) and no reason unless a binding failed to
    /// resolve; resolution errors appear in the reason.
    #[test]
    fn ssar_not_allowed_response_shape() {
        let snap = snapshot();
        let resp = self_subject_access_review(&can_i("delete", "other"), &alice(), &snap);
        assert_eq!(
            resp.map(|r| r["status"].clone()),
            Ok(json!({"allowed": false}))
        );
        let resp = self_subject_access_review(&can_i("delete", "acme"), &alice(), &snap);
        assert_eq!(
            resp.map(|r| r["status"].clone()),
            Ok(json!({"allowed": false,
                      "reason": "RBAC: clusterrole.rbac.authorization.k8s.io \"missing\" not found"}))
        );
    }

    /// Copies kube-apiserver's SelfSubjectAccessReview validation: exactly one of
    /// resourceAttributes / nonResourceAttributes, metadata empty; a nonResource check works.
    #[test]
    fn ssar_validation_and_non_resource() {
        let snap = snapshot();
        let err = self_subject_access_review(&json!({"spec": {}}), &alice(), &snap);
        let err = err.err().unwrap_or_else(|| panic!("accepted"));
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: \
             Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
        );
        let both = json!({"spec": {"resourceAttributes": {"verb": "get"},
                                   "nonResourceAttributes": {"path": "/x", "verb": "get"}}});
        let err = self_subject_access_review(&both, &alice(), &snap);
        assert!(err.is_err_and(|e| {
            e.message
                .contains("cannot be specified in combination with resourceAttributes")
        }));
        let named =
            json!({"metadata": {"name": "x"}, "spec": {"resourceAttributes": {"verb": "get"}}});
        let err = self_subject_access_review(&named, &alice(), &snap);
        assert!(
            err.is_err_and(|e| e.message.contains("metadata: Invalid value")
                && e.message.ends_with("must be empty"))
        );
        let typed = json!({"spec": {"resourceAttributes": {"verb": 3}}});
        assert!(self_subject_access_review(&typed, &alice(), &snap).is_err_and(|e| e.code == 400));
        let nr = json!({"spec": {"nonResourceAttributes": {"path": "/apis", "verb": "get"}}});
        let resp = self_subject_access_review(&nr, &alice(), &snap);
        assert_eq!(
            resp.map(|r| r["status"]["allowed"].clone()),
            Ok(json!(true))
        );
    }

    /// Copies kube-apiserver's SubjectAccessReview: checks the spec's user and groups as
    /// given (no `system:authenticated` added), and requires a user or group.
    #[test]
    fn sar_checks_the_spec_user() {
        let snap = snapshot();
        let sar = |user: Value, groups: Value| {
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": user, "groups": groups,
                            "resourceAttributes": {"namespace": "acme", "verb": "lock",
                                                   "group": "terrace.dev", "resource": "workspaces", "name": "ws-1"}}})
        };
        let resp = subject_access_review(&sar(json!("alice"), json!(null)), &snap);
        let resp = resp.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resp["status"]["allowed"], true);
        assert_eq!(resp["metadata"], json!({"creationTimestamp": null}));
        let resp =
            subject_access_review(&sar(json!("bob"), json!(["system:authenticated"])), &snap);
        assert_eq!(
            resp.map(|r| r["status"].clone()),
            Ok(json!({"allowed": false}))
        );
        // SelfSubjectAccessReview is allowed to all authenticated users only via the group.
        let ssar_attrs = json!({"spec": {"user": "bob", "resourceAttributes": {"verb": "create",
            "group": "authorization.k8s.io", "resource": "selfsubjectaccessreviews"}}});
        assert_eq!(
            subject_access_review(&ssar_attrs, &snap).map(|r| r["status"]["allowed"].clone()),
            Ok(json!(false))
        );
        let err = subject_access_review(&sar(json!(""), json!([])), &snap);
        assert!(err.is_err_and(|e| e.code == 422 && e.message
            == "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": \
                at least one of user or group must be specified"));
        let err = subject_access_review(&json!({"spec": {}}), &snap).err();
        assert_eq!(
            err.and_then(|e| e.details)
                .map(|d| d["causes"].as_array().map_or(0, Vec::len)),
            Some(2)
        );
    }

    /// Copies kube-apiserver's LocalSubjectAccessReview: the resource namespace must match
    /// the URL's; nonResourceAttributes are refused.
    #[test]
    fn local_sar() {
        let snap = snapshot();
        let lsar = |ns: &str| {
            json!({"metadata": {"namespace": "acme"},
                   "spec": {"user": "alice", "resourceAttributes": {"namespace": ns, "verb": "get",
                            "group": "terrace.dev", "resource": "workspaces"}}})
        };
        let resp = local_subject_access_review(&lsar("acme"), "acme", &snap);
        assert_eq!(
            resp.map(|r| r["status"]["allowed"].clone()),
            Ok(json!(true))
        );
        let err = local_subject_access_review(&lsar("other"), "acme", &snap);
        assert!(err.is_err_and(|e| e.message.contains(
            "spec.resourceAttributes.namespace: Invalid value: \"other\": must match metadata.namespace")));
        let err = local_subject_access_review(&lsar("acme"), "elsewhere", &snap);
        assert!(err.is_err_and(|e| e.code == 400));
        let nr = json!({"spec": {"user": "alice", "nonResourceAttributes": {"path": "/x", "verb": "get"}}});
        let err = local_subject_access_review(&nr, "acme", &snap);
        assert!(err.is_err_and(|e| e.message.contains("disallowed on this kind of request")));
    }

    /// Copies kube-apiserver's TokenReview: authenticated → user and audiences; rejected →
    /// `user: {}` with the error and no `authenticated`; empty token → 400.
    #[test]
    fn token_review_shapes() {
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                             "spec": {"token": "t0k"}});
        let resp = token_review(&request, |token, auds| {
            assert_eq!((token, auds.len()), ("t0k", 0));
            Ok(Authenticated {
                user: alice(),
                audiences: vec!["api".into()],
            })
        });
        let resp = resp.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            resp["status"],
            json!({"authenticated": true, "audiences": ["api"],
                   "user": {"username": "alice", "groups": ["system:authenticated"]}})
        );
        assert_eq!(resp["spec"], request["spec"]);
        let resp = token_review(&request, |_, _| Err(AuthError::InvalidToken));
        assert_eq!(
            resp.map(|r| r["status"].clone()),
            Ok(json!({"user": {}, "error": "invalid bearer token"}))
        );
        let empty = json!({"spec": {"token": ""}});
        let err = token_review(&empty, |_, _| Err(AuthError::InvalidToken));
        assert_eq!(
            err.map_err(|e| (e.code, e.message)),
            Err((
                400,
                "token is required for TokenReview in authentication".to_string()
            ))
        );
    }

    /// Copies kube-apiserver's TokenReview with `spec.audiences`: they are passed to the
    /// authenticator, and a response for none of them is an internal error.
    #[test]
    fn token_review_audiences() {
        let request = json!({"spec": {"token": "t", "audiences": ["vault"]}});
        let ok = token_review(&request, |_, auds| {
            Ok(Authenticated {
                user: alice(),
                audiences: auds.to_vec(),
            })
        });
        assert_eq!(
            ok.map(|r| r["status"]["audiences"].clone()),
            Ok(json!(["vault"]))
        );
        let wrong = token_review(&request, |_, _| {
            Ok(Authenticated {
                user: alice(),
                audiences: vec!["api".into()],
            })
        });
        assert!(wrong.is_err_and(|e| e.code == 500));
    }

    /// Copies kube-apiserver's SelfSubjectRulesReview (`kubectl auth can-i --list -n acme`):
    /// resource and non-resource rules, `incomplete: false`, resolution errors as
    /// `evaluationError`; no namespace → 400.
    #[test]
    fn self_subject_rules_review_lists_rules() {
        let snap = snapshot();
        let request = json!({"spec": {"namespace": "acme"}});
        let resp = self_subject_rules_review(&request, &alice(), &snap);
        let resp = resp.unwrap_or_else(|e| panic!("{e}"));
        let status = &resp["status"];
        assert_eq!(status["incomplete"], false);
        let resource_rules = status["resourceRules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            resource_rules.contains(&json!({"verbs": ["get", "list", "lock"],
            "apiGroups": ["terrace.dev"], "resources": ["workspaces"]}))
        );
        assert!(resource_rules.contains(&json!({"verbs": ["create"],
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]})));
        let non_resource = status["nonResourceRules"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(non_resource.iter().any(|r| {
            r["nonResourceURLs"]
                .as_array()
                .is_some_and(|u| u.contains(&json!("/apis/*")))
        }));
        assert_eq!(
            status["evaluationError"],
            "clusterrole.rbac.authorization.k8s.io \"missing\" not found"
        );
        let other =
            self_subject_rules_review(&json!({"spec": {"namespace": "other"}}), &alice(), &snap);
        let other = other.unwrap_or_else(|e| panic!("{e}"));
        assert!(other["status"].get("evaluationError").is_none());
        assert!(
            !other["status"]["resourceRules"]
                .as_array()
                .is_some_and(|r| r.iter().any(|x| x["resources"] == json!(["workspaces"])))
        );
        let err = self_subject_rules_review(&json!({"spec": {}}), &alice(), &snap);
        assert_eq!(
            err.map_err(|e| (e.code, e.message)),
            Err((400, "no namespace on request".to_string()))
        );
    }
}
