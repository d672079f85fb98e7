//! The server side of authentication and authorization: it joins the pure rules of
//! [`crate::auth`] to the store.
//!
//! What flows through here:
//! - at startup, the persisted ServiceAccount signing key and the admin token become the
//!   [`Access::authenticator`], and the default RBAC objects of a real cluster
//!   ([`bootstrap_policy`]) are created if missing ([`bootstrap`]);
//! - per request, a bearer token becomes a user ([`Access::authenticate`], which looks the
//!   token's ServiceAccount up in the store so deleting it revokes the token), and the
//!   authorizer asks [`Access::rbac`] for the RBAC snapshot. The snapshot is cached and
//!   rebuilt only when an RBAC object was written ([`crate::store::State::rbac_revision`]);
//!   a rebuild also writes aggregated ClusterRoles' rules back to the stored objects, as
//!   kube-controller-manager's clusterrole-aggregation controller does;
//! - the create-only review endpoints (TokenRequest, TokenReview, the access reviews,
//!   SelfSubjectReview) are recognised by [`review_route`], answered by [`handle_review`]
//!   and advertised in discovery through [`discovery_resources`].

use crate::Shared;
use crate::auth::{
    AuthError, Authenticated, Authenticator, RbacSnapshot, StaticTokens, StatusError, TokenSigner,
    UserInfo, bootstrap_policy, local_subject_access_review, self_subject_access_review,
    self_subject_rules_review, subject_access_review, token_request, token_review,
};
use crate::status::ApiError;
use crate::store::{RBAC_GROUP, ResKey};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The authentication.k8s.io API group.
pub const AUTHENTICATION_GROUP: &str = "authentication.k8s.io";
/// The authorization.k8s.io API group.
pub const AUTHORIZATION_GROUP: &str = "authorization.k8s.io";
/// The field manager of aggregated-rule write-backs, as in kube-controller-manager.
const AGGREGATION_MANAGER: &str = "clusterrole-aggregation-controller";

/// Authenticator plus the cached RBAC snapshot; one per simulator.
pub struct Access {
    pub authenticator: Authenticator,
    /// `(rbac_revision it was built at, snapshot)`.
    cache: Mutex<Option<(u64, Arc<RbacSnapshot>)>>,
    /// How many snapshots were built (observability for the cache's tests).
    builds: AtomicU64,
}

fn res(plural: &str) -> ResKey {
    (RBAC_GROUP.to_string(), plural.to_string())
}

impl Access {
    /// Signs ServiceAccount tokens with `signing_key`; `admin_token` is user `admin` in
    /// `system:masters`.
    pub fn new(signing_key: [u8; 32], admin_token: &str) -> Access {
        Access {
            authenticator: Authenticator::new(
                TokenSigner::new(signing_key),
                StaticTokens::with_admin(admin_token),
            ),
            cache: Mutex::new(None),
            builds: AtomicU64::new(0),
        }
    }

    /// Who `token` is, for `audiences` (empty: the API server's own audience). A
    /// ServiceAccount token is good only while its ServiceAccount exists with the uid
    /// the token was issued for.
    pub fn authenticate(
        &self,
        shared: &Shared,
        token: &str,
        audiences: &[String],
    ) -> Result<Authenticated, AuthError> {
        self.authenticator
            .authenticate(token, audiences, jiff::Timestamp::now(), |ns, name| {
                service_account(shared, ns, name).and_then(|sa| {
                    sa.pointer("/metadata/uid")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
            })
    }

    /// The RBAC objects of the store as a snapshot, rebuilt only when one of them changed
    /// since the cached one was built.
    pub fn rbac(&self, shared: &Shared) -> Arc<RbacSnapshot> {
        let revision = shared.read(|st| st.rbac_revision);
        // Held while rebuilding, so concurrent requests after a change wait for one
        // rebuild instead of each doing their own.
        let mut cache = self.lock();
        if let Some((built_at, snapshot)) = &*cache
            && *built_at >= revision
        {
            return snapshot.clone();
        }
        let (revision, [roles, cluster_roles, role_bindings, cluster_role_bindings]) =
            shared.read(|st| {
                let objects = [
                    "roles",
                    "clusterroles",
                    "rolebindings",
                    "clusterrolebindings",
                ]
                .map(|plural| {
                    st.range(&res(plural), None, None)
                        .map(|(_, o)| Arc::new(o.value()))
                        .collect::<Vec<Arc<Value>>>()
                });
                (st.rbac_revision, objects)
            });
        self.builds.fetch_add(1, Ordering::Relaxed);
        let snapshot = Arc::new(RbacSnapshot::new(
            roles.iter().map(|o| &**o),
            cluster_roles.iter().map(|o| &**o),
            role_bindings.iter().map(|o| &**o),
            cluster_role_bindings.iter().map(|o| &**o),
        ));
        *cache = Some((revision, snapshot.clone()));
        drop(cache);
        write_back_aggregation(shared, &cluster_roles, &snapshot);
        snapshot
    }

    /// How many RBAC snapshots have been built so far.
    pub fn snapshot_builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, Arc<RbacSnapshot>)>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The stored ServiceAccount `namespace/name`, if any.
fn service_account(shared: &Shared, namespace: &str, name: &str) -> Option<Arc<Value>> {
    shared.read(|st| {
        st.get(
            &(String::new(), "serviceaccounts".to_string()),
            &(namespace.to_string(), name.to_string()),
        )
    })
}

/// `rules` of a stored ClusterRole in the snapshot's normal form, for comparison.
fn normalized_rules(role: &Value) -> Vec<Value> {
    role.get("rules")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    serde_json::from_value::<crate::auth::rbac::PolicyRule>(r.clone())
                        .map(|p| p.to_json())
                        .unwrap_or_else(|_| r.clone())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Writes each aggregated ClusterRole's effective rules into the stored object when they
/// differ, with a resourceVersion precondition (a concurrent change wins and triggers
/// another rebuild, as the controller's requeue would).
fn write_back_aggregation(shared: &Shared, cluster_roles: &[Arc<Value>], snapshot: &RbacSnapshot) {
    let mut updates = Vec::new();
    for role in cluster_roles {
        if role.get("aggregationRule").is_none_or(Value::is_null) {
            continue;
        }
        let Some(name) = role.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let Some(effective) = snapshot.cluster_role_rules(name) else {
            continue;
        };
        if normalized_rules(role) != effective {
            let mut updated = (**role).clone();
            updated["rules"] = Value::Array(effective);
            updates.push((name.to_string(), updated));
        }
    }
    if updates.is_empty() {
        return;
    }
    shared.write_from_controller(|st| {
        let Some(info) = st.registry.get(RBAC_GROUP, "v1", "clusterroles") else {
            return;
        };
        let opts = crate::rest::WriteOpts {
            field_manager: AGGREGATION_MANAGER.to_string(),
            ..Default::default()
        };
        for (name, object) in updates {
            if let Err(e) = crate::rest::update(st, &info, None, &name, object, &opts, None) {
                tracing::debug!(clusterrole = %name, error = %e.message, "aggregation write-back skipped");
            }
        }
    });
}

/// Creates the default ClusterRoles and ClusterRoleBindings of a real cluster that are
/// missing (existing ones, possibly edited, are left alone).
pub fn bootstrap(shared: &Shared) -> Result<(), String> {
    shared.write(|st| {
        for object in bootstrap_policy() {
            let plural = match object.get("kind").and_then(Value::as_str) {
                Some("ClusterRole") => "clusterroles",
                Some("ClusterRoleBinding") => "clusterrolebindings",
                _ => continue,
            };
            let info = st
                .registry
                .get(RBAC_GROUP, "v1", plural)
                .ok_or_else(|| format!("{plural} not registered"))?;
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if st
                .get(&res(plural), &(String::new(), name.clone()))
                .is_some()
            {
                continue;
            }
            let opts = crate::rest::WriteOpts {
                field_manager: "kube-apiserver".into(),
                ..Default::default()
            };
            crate::rest::create(st, &info, None, object, &opts, "Update")
                .map_err(|e| format!("creating {plural} {name}: {}", e.message))?;
        }
        Ok(())
    })
}

/// A create-only endpoint of the authentication and authorization groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Review {
    /// `POST /api/v1/namespaces/{namespace}/serviceaccounts/{name}/token`.
    TokenRequest {
        namespace: String,
        name: String,
    },
    TokenReview,
    SelfSubjectReview,
    SubjectAccessReview,
    LocalSubjectAccessReview {
        namespace: String,
    },
    SelfSubjectAccessReview,
    SelfSubjectRulesReview,
}

/// The review endpoint a (percent-decoded) path names, if any.
pub fn review_route(segs: &[&str]) -> Option<Review> {
    match segs {
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "serviceaccounts",
            name,
            "token",
        ] => Some(Review::TokenRequest {
            namespace: ns.to_string(),
            name: name.to_string(),
        }),
        ["apis", AUTHENTICATION_GROUP, "v1", "tokenreviews"] => Some(Review::TokenReview),
        ["apis", AUTHENTICATION_GROUP, "v1", "selfsubjectreviews"] => {
            Some(Review::SelfSubjectReview)
        }
        ["apis", AUTHORIZATION_GROUP, "v1", "subjectaccessreviews"] => {
            Some(Review::SubjectAccessReview)
        }
        [
            "apis",
            AUTHORIZATION_GROUP,
            "v1",
            "selfsubjectaccessreviews",
        ] => Some(Review::SelfSubjectAccessReview),
        ["apis", AUTHORIZATION_GROUP, "v1", "selfsubjectrulesreviews"] => {
            Some(Review::SelfSubjectRulesReview)
        }
        [
            "apis",
            AUTHORIZATION_GROUP,
            "v1",
            "namespaces",
            ns,
            "localsubjectaccessreviews",
        ] => Some(Review::LocalSubjectAccessReview {
            namespace: ns.to_string(),
        }),
        _ => None,
    }
}

/// Answers a review `request` (the decoded body) made by `user`; the response is sent
/// with 201 Created, as kube-apiserver does for these create-only kinds.
pub fn handle_review(
    shared: &Shared,
    review: &Review,
    user: &UserInfo,
    request: &Value,
) -> Result<Value, StatusError> {
    let access = &shared.access;
    match review {
        Review::TokenRequest { namespace, name } => {
            let sa = service_account(shared, namespace, name).ok_or_else(|| StatusError {
                code: 404,
                reason: "NotFound".into(),
                message: format!("serviceaccounts {} not found", json!(name)),
                details: Some(json!({"name": name, "kind": "serviceaccounts"})),
            })?;
            token_request(
                &access.authenticator.signer,
                request,
                &sa,
                jiff::Timestamp::now(),
            )
        }
        Review::TokenReview => token_review(request, |token, audiences| {
            access.authenticate(shared, token, audiences)
        }),
        Review::SelfSubjectReview => {
            if !request.is_object() {
                return Err(StatusError::bad_request(
                    "SelfSubjectReview in version \"v1\" cannot be handled as a SelfSubjectReview: body is not a JSON object",
                ));
            }
            Ok(json!({
                "kind": "SelfSubjectReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": null},
                "status": {"userInfo": user},
            }))
        }
        Review::SubjectAccessReview => subject_access_review(request, &access.rbac(shared)),
        Review::LocalSubjectAccessReview { namespace } => {
            local_subject_access_review(request, namespace, &access.rbac(shared))
        }
        Review::SelfSubjectAccessReview => {
            self_subject_access_review(request, user, &access.rbac(shared))
        }
        Review::SelfSubjectRulesReview => {
            self_subject_rules_review(request, user, &access.rbac(shared))
        }
    }
}

/// Discovery entries the review endpoints add to `group/version` (`serviceaccounts/token`
/// to core `v1`, the review kinds to the two groups), as kube-apiserver lists them.
pub fn discovery_resources(group: &str, version: &str) -> Vec<Value> {
    let create_only = |name: &str, kind: &str, namespaced: bool| {
        json!({
            "name": name,
            "singularName": kind.to_ascii_lowercase(),
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["create"],
        })
    };
    match (group, version) {
        ("", "v1") => vec![json!({
            "name": "serviceaccounts/token",
            "singularName": "",
            "namespaced": true,
            "group": AUTHENTICATION_GROUP,
            "version": "v1",
            "kind": "TokenRequest",
            "verbs": ["create"],
        })],
        (AUTHENTICATION_GROUP, "v1") => vec![
            create_only("selfsubjectreviews", "SelfSubjectReview", false),
            create_only("tokenreviews", "TokenReview", false),
        ],
        (AUTHORIZATION_GROUP, "v1") => vec![
            create_only(
                "localsubjectaccessreviews",
                "LocalSubjectAccessReview",
                true,
            ),
            create_only("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
            create_only("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
            create_only("subjectaccessreviews", "SubjectAccessReview", false),
        ],
        _ => Vec::new(),
    }
}

/// The API groups that exist only for the review endpoints.
pub const REVIEW_GROUPS: [&str; 2] = [AUTHENTICATION_GROUP, AUTHORIZATION_GROUP];

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        let code = http::StatusCode::from_u16(self.code)
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        (
            code,
            [(http::header::CONTENT_TYPE, "application/json")],
            self.to_json().to_string(),
        )
            .into_response()
    }
}

impl From<StatusError> for ApiError {
    fn from(e: StatusError) -> ApiError {
        let reason = match e.reason.as_str() {
            "BadRequest" => "BadRequest",
            "Unauthorized" => "Unauthorized",
            "Forbidden" => "Forbidden",
            "NotFound" => "NotFound",
            "Invalid" => "Invalid",
            "Conflict" => "Conflict",
            "AlreadyExists" => "AlreadyExists",
            "MethodNotAllowed" => "MethodNotAllowed",
            _ => "InternalError",
        };
        ApiError {
            code: e.code,
            reason,
            message: e.message,
            details: e.details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SimConfig, Simulator};
    use tower::ServiceExt;

    async fn get(sim: &Simulator, path: &str, token: &str) -> u16 {
        let req = http::Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(axum::body::Body::empty());
        match req {
            Ok(req) => match sim.router().oneshot(req).await {
                Ok(resp) => resp.status().as_u16(),
                Err(_) => 0,
            },
            Err(_) => 0,
        }
    }

    /// Copies kube-apiserver's RBAC authorizer, which reads roles and bindings from
    /// informer caches: a stream of requests does not rebuild the rule index, an RBAC
    /// write makes the next request see it (one rebuild), and other writes do not.
    #[tokio::test]
    async fn snapshot_is_rebuilt_only_on_rbac_changes() -> Result<(), String> {
        let sim = Simulator::open(SimConfig::default())
            .await
            .map_err(|e| e.to_string())?;
        let shared = sim.shared.clone();
        let admin = sim.admin_token();
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r", "namespace": "default"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]});
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "b", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}]});
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "default"}});
        let token = shared.write(|st| {
            let mut created = Vec::new();
            for (plural, group, object) in [
                ("roles", RBAC_GROUP, role),
                ("rolebindings", RBAC_GROUP, binding),
                ("serviceaccounts", "", sa),
            ] {
                let info = st
                    .registry
                    .get(group, "v1", plural)
                    .ok_or("not registered")?;
                let r = crate::rest::create(
                    st,
                    &info,
                    Some("default"),
                    object,
                    &crate::rest::WriteOpts::default(),
                    "Update",
                )
                .map_err(|e| e.message)?;
                created.push(r.object);
            }
            let sa = created.pop().ok_or("no ServiceAccount")?;
            let (token, _) = shared.access.authenticator.signer.issue(
                "default",
                "sa",
                sa.pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                &[],
                3600,
                jiff::Timestamp::now(),
            );
            Ok::<_, String>(token)
        })?;
        let path = "/api/v1/namespaces/default/configmaps";
        assert_eq!(get(&sim, path, &token).await, 200);
        let before = shared.access.snapshot_builds();
        for _ in 0..500 {
            assert_eq!(get(&sim, path, &token).await, 200);
        }
        // A non-RBAC write does not invalidate the snapshot.
        assert_eq!(
            get(&sim, "/api/v1/namespaces/default/secrets", &admin).await,
            200
        );
        assert_eq!(shared.access.snapshot_builds(), before);

        shared.write(|st| {
            let res = (RBAC_GROUP.to_string(), "rolebindings".to_string());
            st.remove(&res, &("default".to_string(), "b".to_string()))
        });
        assert_eq!(get(&sim, path, &token).await, 403);
        assert_eq!(get(&sim, path, &token).await, 403);
        assert_eq!(shared.access.snapshot_builds(), before + 1);
        sim.shutdown().await;
        Ok(())
    }

    /// Copies kube-apiserver's ServiceAccount token authenticator: the token's account is
    /// looked up on every request (the SA getter), so a missing account rejects it.
    #[tokio::test]
    async fn authenticate_looks_the_service_account_up() -> Result<(), String> {
        let sim = Simulator::open(SimConfig::default())
            .await
            .map_err(|e| e.to_string())?;
        let shared = sim.shared.clone();
        let (token, _) = shared.access.authenticator.signer.issue(
            "default",
            "ghost",
            "uid-1",
            &[],
            3600,
            jiff::Timestamp::now(),
        );
        let err = shared.access.authenticate(&shared, &token, &[]);
        assert_eq!(
            err.map(|a| a.user.username),
            Err(AuthError::Rejected(
                "serviceaccounts \"ghost\" not found".to_string()
            ))
        );
        sim.shutdown().await;
        Ok(())
    }
}
