//! Who is calling: the first extractors of a handler. A request's bearer token is a run's
//! API credential (`tfrun.…`, decided by [`crate::runner_auth`] without Kubernetes RBAC)
//! or a Kubernetes identity (TokenReview and reviews, [`crate::auth`]). Both of those stand
//! below this module and import nothing of it.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::auth::{Caller, bearer};
use crate::{ApiError, AppState};

/// The server's state and the authenticated caller of a request: the first extractor of
/// a handler that checks the caller's rights itself (401 without a valid token).
pub struct Authed {
    pub state: AppState,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        Ok(Authed {
            state: state.clone(),
            caller,
        })
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let unauthorized = || ApiError::Unauthorized("unauthorized".into());
        let token = bearer(parts).ok_or_else(unauthorized)?;
        if token.starts_with(terrace_crds::run::RUN_CREDENTIAL_PREFIX) {
            return crate::runner_auth::run_caller(state, token)
                .await?
                .ok_or_else(unauthorized);
        }
        state
            .auth
            .authenticate(token)
            .await?
            .ok_or_else(unauthorized)
    }
}
