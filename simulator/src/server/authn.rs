//! Who is calling and whether they may: the authenticator chain (admin and ServiceAccount
//! bearer tokens, anonymous), impersonation, authorization through [`crate::access`], and
//! the middleware that runs them before dispatch.

use super::*;

/// Who is calling, copying kube-apiserver's authenticator chain: a `Bearer` token is the
/// admin token's user or a ServiceAccount token's (401 Unauthorized if neither accepts
/// it); a request without one (or with another scheme, which the bearer-token
/// authenticator ignores) is `system:anonymous`.
pub fn authenticate(shared: &Shared, headers: &HeaderMap) -> ApiResult<UserInfo> {
    let Some(token) = bearer_token(headers)? else {
        return Ok(UserInfo::anonymous());
    };
    shared
        .access
        .authenticate(shared, token, &[])
        .map(|a| a.user)
        .map_err(|e| {
            tracing::debug!(error = %e, "simulator: bearer token rejected");
            ApiError::unauthorized()
        })
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub(super) fn bearer_token(headers: &HeaderMap) -> ApiResult<Option<&str>> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| ApiError::unauthorized())?;
    Ok(value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty()))
}

/// Whether `user` may perform the request: `system:masters` always, anyone else as the
/// RBAC objects of the store allow (kube-apiserver's `Node,RBAC` chain without Node).
/// Denials are 403 Forbidden worded as `responsewriters.Forbidden` words them.
pub fn authorize(shared: &Shared, user: &UserInfo, attrs: &Attributes) -> ApiResult<()> {
    if user.groups.iter().any(|g| g == crate::auth::SYSTEM_MASTERS) {
        return Ok(());
    }
    let decision = shared.access.rbac(shared).authorize(user, attrs);
    if decision.allowed {
        return Ok(());
    }
    Err(crate::auth::forbidden_status(user, attrs, &decision.reason).into())
}

/// Applies `Impersonate-*` headers (`kubectl --as`), copying apiserver's
/// `WithImpersonation` filter: the caller needs `impersonate` on what it names.
#[allow(clippy::result_large_err)] // a Response, built once per failing request
pub(super) fn impersonation(
    shared: &Shared,
    user: UserInfo,
    req: &Request,
) -> Result<UserInfo, Response> {
    let headers = crate::auth::ImpersonationHeaders::from_headers(
        req.headers()
            .iter()
            .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?))),
    );
    if headers.is_empty() {
        return Ok(user);
    }
    let rbac = shared.access.rbac(shared);
    match crate::auth::impersonate(&user, &headers, &rbac) {
        Ok(Some(as_user)) => Ok(as_user),
        Ok(None) => Ok(user),
        Err(crate::auth::ImpersonationError::Forbidden(status)) => Err(status.into_response()),
        // kube-apiserver answers this one in plain text.
        Err(crate::auth::ImpersonationError::Malformed(msg)) => Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("Internal Server Error: {:?}: {msg}", req.uri().to_string()),
        )
            .into_response()),
    }
}

pub(super) fn admin() -> UserInfo {
    crate::auth::StaticTokens::admin_user()
}

pub(super) async fn auth_layer(
    State((shared, loopback_admin)): State<(Arc<Shared>, bool)>,
    mut req: Request,
    next: Next,
) -> Response {
    let from_loopback = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .is_some_and(|c| c.0.ip().is_loopback());
    let user =
        if loopback_admin && from_loopback && !req.headers().contains_key(header::AUTHORIZATION) {
            admin()
        } else {
            match authenticate(&shared, req.headers()) {
                Ok(u) => u,
                Err(e) => return e.into_response(),
            }
        };
    let user = match impersonation(&shared, user, &req) {
        Ok(u) => u,
        Err(resp) => return resp,
    };
    let attrs =
        crate::auth::request_attributes(req.method().as_str(), req.uri().path(), req.uri().query());
    if let Err(e) = authorize(&shared, &user, &attrs) {
        return e.into_response();
    }
    if let Ok(mut counts) = shared.requests_by_user.lock() {
        *counts.entry(user.username.clone()).or_default() += 1;
    }
    req.extensions_mut().insert(user);
    let response = next.run(req).await;
    if attrs.api_group == crate::store::RBAC_GROUP
        && !matches!(attrs.verb.as_str(), "get" | "list" | "watch")
    {
        // Brings the snapshot (and aggregated ClusterRoles' written-back rules) up to
        // date before the writer sees its answer, so a read that follows sees them.
        shared.access.rbac(&shared);
    }
    response
}
