//! The credential of a run's Pod: the run token the operator put in the run's Secret
//! (`<run object>-run`, key `token`; see the operator's `run::pod`). The runner presents
//! it as `Authorization: Bearer` on the runner endpoints of that one run (its archive,
//! its workspace's state, its plan); it is compared in constant time and works only while
//! the run is not final (the operator deletes the Secret when the run ends).

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use k8s_openapi::api::core::v1::Secret;
use terrace_crds::Run;
use terrace_crds::run::RunState;

use crate::capability::constant_time_eq;
use crate::prelude::*;

/// How long a runner request for a run not indexed yet waits for it, once its token
/// checked out against the run's Secret.
const INDEX_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Secret key of the run token.
pub const TOKEN_KEY: &str = "token";

/// Name of the run's Secret (the operator's naming: `<run object>-run`).
pub fn secret_name(run_object: &str) -> String {
    format!("{run_object}-run")
}

/// The run of a runner request (`{id}` in its path), its token checked ([`authorize`]):
/// the extractor of every runner endpoint.
pub struct RunnerRun {
    /// The run's ID, as the path gave it.
    pub id: String,
    pub run: Arc<Run>,
}

impl FromRequestParts<AppState> for RunnerRun {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Path(params) =
            Path::<std::collections::HashMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(|_| unauthorized())?;
        let id = params.get("id").cloned().ok_or_else(unauthorized)?;
        let run = authorize(state, &id, &parts.headers).await?;
        Ok(RunnerRun { id, run })
    }
}

fn unauthorized() -> ApiError {
    ApiError::Unauthorized("a valid run token is required".into())
}

/// The run `run_id` if `headers` carry its token and it is not final (401 otherwise, the
/// same for an unknown run). A run not indexed yet (created by the operator a moment
/// ago) is waited for only once the token checked out against the Secret of the run in
/// the namespace the token names: an anonymous caller never holds a request open.
async fn authorize(
    state: &AppState,
    run_id: &str,
    headers: &HeaderMap,
) -> Result<Arc<Run>, ApiError> {
    let presented = crate::auth::bearer_token(headers)
        .map(str::to_owned)
        .ok_or_else(unauthorized)?;
    let indexed = |i: &crate::index::Inner| i.runs().get(run_id).is_some();
    if !indexed(&state.index.read()) {
        let ns = terrace_crds::run::runner_token_namespace(&presented).ok_or_else(unauthorized)?;
        let object = terrace_crds::ids::object_name_for_id(run_id);
        if !holds_token(state, ns, &object, &presented).await? {
            return Err(unauthorized());
        }
        state.index.wait_until(INDEX_GRACE, indexed).await;
    }
    let run = state
        .index
        .read()
        .runs()
        .get(run_id)
        .cloned()
        .ok_or_else(unauthorized)?;
    let status = RunState::of(run.status.as_ref().and_then(|s| s.status.as_deref()));
    if status.is_ok_and(RunState::is_final) {
        return Err(unauthorized());
    }
    let ns = run.namespace().unwrap_or_default();
    if holds_token(state, &ns, &run.name_any(), &presented).await? {
        Ok(run)
    } else {
        Err(unauthorized())
    }
}

/// The caller of a run's API credential ([`terrace_crds::run::run_credential`], the
/// token in the CLI configuration of the run's engine): the run's token checked against
/// its Secret, the run not final, and its scope ([`RunScope`]) taken from the index now:
/// its workspace and the workspaces that share their state with it. None when any of it
/// fails (401).
pub async fn run_caller(state: &AppState, credential: &str) -> Result<Option<Caller>, ApiError> {
    use terrace_crds::resources::Named;
    let Some((object, token)) = terrace_crds::run::parse_run_credential(credential) else {
        return Ok(None);
    };
    let Some(ns) = terrace_crds::run::runner_token_namespace(token) else {
        return Ok(None);
    };
    if !holds_token(state, ns, object, token).await? {
        return Ok(None);
    }
    let idx = state.index.read();
    let Some(run) = idx
        .runs()
        .in_namespace(ns)
        .find(|r| r.metadata.name.as_deref() == Some(object))
        .cloned()
    else {
        return Ok(None);
    };
    let status = RunState::of(run.status.as_ref().and_then(|s| s.status.as_deref()));
    if status.is_ok_and(RunState::is_final) {
        return Ok(None);
    }
    let mut workspaces = std::collections::BTreeSet::from([run.spec.workspace.clone()]);
    if let Some(own) = idx.workspace_object(ns, &run.spec.workspace) {
        let own_id = id_of(own.as_ref());
        let me = Named {
            id: Some(&own_id),
            name: &own.spec.name,
        };
        let own_project = idx.project_of(own).map(|p| p.name_any());
        if let Some(all) = idx.workspaces_in(ns) {
            for w in all.uids_by_name().filter_map(|u| idx.workspace_by_uid(u)) {
                let same_project = idx.project_of(w).map(|p| p.name_any()) == own_project;
                if w.spec.shares_state_with(me, same_project) {
                    workspaces.insert(w.name_any());
                }
            }
        }
    }
    let scope = crate::auth::RunScope {
        namespace: ns.to_owned(),
        workspaces,
    };
    Ok(Some(Caller::for_run(
        &id_of(run.as_ref()),
        scope,
        credential,
    )))
}

/// Whether the Secret of run object `object` in `ns` holds `presented` as its token.
async fn holds_token(
    state: &AppState,
    ns: &str,
    object: &str,
    presented: &str,
) -> Result<bool, ApiError> {
    let secrets = write::api::<Secret>(state, ns);
    let secret = match secrets.get_opt(&secret_name(object)).await {
        Ok(s) => s,
        // A namespace name the API server refuses is no run's.
        Err(kube::Error::Api(s)) if s.code == 400 || s.code == 403 || s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    Ok(secret
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(TOKEN_KEY))
        .is_some_and(|t| constant_time_eq(&t.0, presented.as_bytes())))
}
