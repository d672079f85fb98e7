//! User impersonation (`kubectl --as X --as-group G`), copying apiserver's
//! `WithImpersonation` filter: the `Impersonate-*` headers of a request name a user
//! (or ServiceAccount), groups, a uid and extra values; the *caller* must be allowed verb
//! `impersonate` on each (`users`, `serviceaccounts`, `groups` in the core group;
//! `uids`, `userextras/<key>` in `authentication.k8s.io`); then the request proceeds as
//! the impersonated user, with `system:authenticated` added as real.

use std::collections::BTreeMap;

use super::rbac::{Attributes, RbacSnapshot};
use super::{
    ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, StatusError, UserInfo, forbidden_status,
    percent_decode, service_account_groups, split_service_account_username,
};

const USER_HEADER: &str = "impersonate-user";
const GROUP_HEADER: &str = "impersonate-group";
const UID_HEADER: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// The impersonation headers of one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImpersonationHeaders {
    /// `Impersonate-User` (empty when absent).
    pub user: String,
    /// Every `Impersonate-Group` value, in order.
    pub groups: Vec<String>,
    /// `Impersonate-Uid` (empty when absent).
    pub uid: String,
    /// `Impersonate-Extra-<key>` values; keys lower-cased and percent-decoded.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl ImpersonationHeaders {
    /// Collects the impersonation headers from `(name, value)` pairs (any case), one pair
    /// per header line so repeated headers keep every value.
    pub fn from_headers<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut h = ImpersonationHeaders::default();
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            if name == USER_HEADER {
                if h.user.is_empty() {
                    h.user = value.to_string();
                }
            } else if name == GROUP_HEADER {
                h.groups.push(value.to_string());
            } else if name == UID_HEADER {
                if h.uid.is_empty() {
                    h.uid = value.to_string();
                }
            } else if let Some(key) = name.strip_prefix(EXTRA_PREFIX) {
                let key = percent_decode(key, false).unwrap_or_else(|| key.to_string());
                h.extra.entry(key).or_default().push(value.to_string());
            }
        }
        h
    }

    /// Whether the request asks for impersonation at all.
    pub fn is_empty(&self) -> bool {
        self.user.is_empty()
            && self.groups.is_empty()
            && self.uid.is_empty()
            && self.extra.is_empty()
    }
}

/// Why impersonation failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ImpersonationError {
    /// Groups, uid or extra without a user. Real kube-apiserver answers this with a plain
    /// text `500 Internal Server Error: "<request URI>": <message>`.
    #[error("{0}")]
    Malformed(String),
    /// The caller may not impersonate what it asked for (403 Status).
    #[error("{0}")]
    Forbidden(StatusError),
}

/// `v1.ObjectReference` printed with Go's `%v`, as the real error message does.
fn object_reference(kind: &str, name: &str, api_version: &str, field_path: &str) -> String {
    format!("{{{kind}  {name}  {api_version}  {field_path}}}")
}

/// Checks and applies the impersonation `headers` of a request by `requestor`.
/// `Ok(None)`: no impersonation asked; `Ok(Some(user))`: proceed as `user`.
pub fn impersonate(
    requestor: &UserInfo,
    headers: &ImpersonationHeaders,
    rbac: &RbacSnapshot,
) -> Result<Option<UserInfo>, ImpersonationError> {
    if headers.is_empty() {
        return Ok(None);
    }
    if headers.user.is_empty() {
        let mut requests = Vec::new();
        for g in &headers.groups {
            requests.push(object_reference("Group", g, "", ""));
        }
        for (key, values) in &headers.extra {
            for v in values {
                requests.push(object_reference(
                    "UserExtra",
                    v,
                    "authentication.k8s.io/v1",
                    key,
                ));
            }
        }
        if !headers.uid.is_empty() {
            requests.push(object_reference(
                "UID",
                &headers.uid,
                "authentication.k8s.io/v1",
                "",
            ));
        }
        return Err(ImpersonationError::Malformed(format!(
            "requested [{}] without impersonating a user",
            requests.join(" ")
        )));
    }

    let check = |attrs: Attributes| -> Result<(), ImpersonationError> {
        let decision = rbac.authorize(requestor, &attrs);
        if decision.allowed {
            Ok(())
        } else {
            Err(ImpersonationError::Forbidden(forbidden_status(
                requestor,
                &attrs,
                &decision.reason,
            )))
        }
    };

    let mut groups = Vec::new();
    let username = headers.user.clone();
    if let Some((namespace, name)) = split_service_account_username(&headers.user) {
        check(Attributes::resource(
            "impersonate",
            "",
            "serviceaccounts",
            namespace,
            name,
        ))?;
        if headers.groups.is_empty() {
            groups = service_account_groups(namespace);
        }
    } else {
        check(Attributes::resource(
            "impersonate",
            "",
            "users",
            "",
            &headers.user,
        ))?;
    }
    for group in &headers.groups {
        check(Attributes::resource("impersonate", "", "groups", "", group))?;
        groups.push(group.clone());
    }
    for (key, values) in &headers.extra {
        for value in values {
            check(
                Attributes::resource(
                    "impersonate",
                    "authentication.k8s.io",
                    "userextras",
                    "",
                    value,
                )
                .with_subresource(key),
            )?;
        }
    }
    if !headers.uid.is_empty() {
        check(Attributes::resource(
            "impersonate",
            "authentication.k8s.io",
            "uids",
            "",
            &headers.uid,
        ))?;
    }

    if username != ANONYMOUS {
        if !groups
            .iter()
            .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED)
        {
            groups.push(ALL_AUTHENTICATED.to_string());
        }
    } else if !groups.iter().any(|g| g == ALL_UNAUTHENTICATED) {
        groups.push(ALL_UNAUTHENTICATED.to_string());
    }
    Ok(Some(UserInfo {
        username,
        uid: headers.uid.clone(),
        groups,
        extra: headers.extra.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snapshot() -> RbacSnapshot {
        RbacSnapshot::from_objects([
            json!({"kind": "ClusterRole", "metadata": {"name": "impersonator"},
                   "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["users", "groups"]},
                             {"verbs": ["impersonate"], "apiGroups": ["authentication.k8s.io"],
                              "resources": ["userextras/scopes", "uids"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "ops"},
                   "roleRef": {"kind": "ClusterRole", "name": "impersonator"},
                   "subjects": [{"kind": "User", "name": "ops"}]}),
            json!({"kind": "ClusterRole", "metadata": {"name": "sa-impersonator"},
                   "rules": [{"verbs": ["impersonate"], "apiGroups": [""], "resources": ["serviceaccounts"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "ci", "namespace": "acme"},
                   "roleRef": {"kind": "ClusterRole", "name": "sa-impersonator"},
                   "subjects": [{"kind": "User", "name": "ci"}]}),
        ])
    }

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: name.into(),
            groups: vec![ALL_AUTHENTICATED.into()],
            ..UserInfo::default()
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> ImpersonationHeaders {
        ImpersonationHeaders::from_headers(pairs.iter().copied())
    }

    /// Copies apiserver `WithImpersonation`: an allowed caller becomes the user with the
    /// requested groups plus `system:authenticated`, uid and extra.
    #[test]
    fn allowed_impersonation() {
        let h = headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "devs"),
            ("impersonate-group", "qa"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes", "view"),
            ("Impersonate-Extra-Scopes", "edit"),
        ]);
        let out = impersonate(&user("ops"), &h, &snapshot());
        assert_eq!(
            out,
            Ok(Some(UserInfo {
                username: "alice".into(),
                uid: "u-1".into(),
                groups: vec!["devs".into(), "qa".into(), ALL_AUTHENTICATED.into()],
                extra: [(
                    "scopes".to_string(),
                    vec!["view".to_string(), "edit".to_string()]
                )]
                .into(),
            }))
        );
        assert_eq!(
            impersonate(&user("ops"), &headers(&[]), &snapshot()),
            Ok(None)
        );
    }

    /// Copies apiserver `WithImpersonation`: a caller without `impersonate` on users gets
    /// 403 with the real message.
    #[test]
    fn forbidden_impersonation() {
        let h = headers(&[("Impersonate-User", "alice")]);
        let Err(ImpersonationError::Forbidden(err)) = impersonate(&user("bob"), &h, &snapshot())
        else {
            panic!("impersonation by bob was not forbidden");
        };
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "users \"alice\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in \
             API group \"\" at the cluster scope"
        );
        // Allowed the user but not this extra key.
        let h = headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Extra-Other", "x"),
        ]);
        let Err(ImpersonationError::Forbidden(err)) = impersonate(&user("ops"), &h, &snapshot())
        else {
            panic!("extra key not checked");
        };
        assert!(err.message.contains("cannot impersonate resource \"userextras/other\" in API group \"authentication.k8s.io\""));
    }

    /// Copies apiserver `WithImpersonation`: a ServiceAccount user name is checked as
    /// `serviceaccounts` in its namespace and gets the ServiceAccount groups.
    #[test]
    fn service_account_impersonation() {
        let h = headers(&[("Impersonate-User", "system:serviceaccount:acme:runner")]);
        let out = impersonate(&user("ci"), &h, &snapshot());
        assert_eq!(
            out.map(|u| u.map(|u| u.groups)),
            Ok(Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:acme".into(),
                ALL_AUTHENTICATED.into()
            ]))
        );
        let h = headers(&[("Impersonate-User", "system:serviceaccount:other:runner")]);
        let Err(ImpersonationError::Forbidden(err)) = impersonate(&user("ci"), &h, &snapshot())
        else {
            panic!("cross-namespace SA impersonation allowed");
        };
        assert_eq!(
            err.message,
            "serviceaccounts \"runner\" is forbidden: User \"ci\" cannot impersonate resource \
             \"serviceaccounts\" in API group \"\" in the namespace \"other\""
        );
    }

    /// Copies apiserver `WithImpersonation`: groups without a user are refused; asking for
    /// `system:unauthenticated` suppresses `system:authenticated`; `system:masters` callers
    /// may impersonate anyone.
    #[test]
    fn edge_cases() {
        let h = headers(&[("Impersonate-Group", "system:masters")]);
        let err = impersonate(&user("ops"), &h, &snapshot());
        assert!(
            matches!(&err, Err(ImpersonationError::Malformed(m)) if m.ends_with("without impersonating a user") && m.contains("system:masters"))
        );
        let h = headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "system:unauthenticated"),
        ]);
        let out = impersonate(&user("ops"), &h, &snapshot());
        assert_eq!(
            out.map(|u| u.map(|u| u.groups)),
            Ok(Some(vec![ALL_UNAUTHENTICATED.to_string()]))
        );
        let admin = UserInfo {
            username: "admin".into(),
            groups: vec!["system:masters".into()],
            ..UserInfo::default()
        };
        let h = headers(&[("Impersonate-User", "system:anonymous")]);
        let out = impersonate(&admin, &h, &RbacSnapshot::default());
        assert_eq!(
            out.map(|u| u.map(|u| u.groups)),
            Ok(Some(vec![ALL_UNAUTHENTICATED.to_string()]))
        );
    }

    /// Copies apiserver: extra header keys are lower-cased and percent-decoded.
    #[test]
    fn extra_keys_are_decoded() {
        let h = headers(&[("Impersonate-Extra-Example.com%2fteam", "a")]);
        assert_eq!(
            h.extra.get("example.com/team"),
            Some(&vec!["a".to_string()])
        );
    }
}
