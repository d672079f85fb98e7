//! The credential of a run's Pod: the run token the operator put in the run's Secret
//! (`<run object>-run`, key `token`; see the operator's `run::pod`). The runner presents
//! it as `Authorization: Bearer` on the runner endpoints of that one run (its archive,
//! its workspace's state, its plan); it is compared in constant time and works only while
//! the run is not final (the operator deletes the Secret when the run ends).

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use k8s_openapi::api::core::v1::Secret;
use std::sync::Arc;
use terrace_crds::Run;
use terrace_crds::run::RunState;

use kube::ResourceExt;

use axum::extract::Path;

use crate::auth::Caller;
use crate::render::id_of;
use crate::{ApiError, AppState, write};

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
/// same for an unknown run). A token that is not of a run token's form, or that names a
/// namespace no organization uses, is refused before anything else; a run not indexed
/// yet (created by the operator a moment ago) is waited for (bounded) in the index. No
/// Kubernetes request is made before the run is known, and the run's Secret is read at
/// most once per run ([`SecretTokens`]).
async fn authorize(
    state: &AppState,
    run_id: &str,
    headers: &HeaderMap,
) -> Result<Arc<Run>, ApiError> {
    let presented = crate::auth::bearer_token(headers)
        .map(str::to_owned)
        .ok_or_else(unauthorized)?;
    let ns = terrace_crds::run::runner_token_namespace(&presented).ok_or_else(unauthorized)?;
    if state.index.read().organization_of_namespace(ns).is_none() {
        return Err(unauthorized());
    }
    let find = |i: &crate::index::Inner| indexed_run(i, run_id);
    let indexed = |i: &crate::index::Inner| find(i).is_some();
    if !indexed(&state.index.read()) {
        state.index.wait_until(INDEX_GRACE, indexed).await;
    }
    let run = find(&state.index.read()).ok_or_else(unauthorized)?;
    if run.namespace().as_deref() != Some(ns) || is_final(&run) {
        return Err(unauthorized());
    }
    if holds_token(state, &run, &presented).await? {
        Ok(run)
    } else {
        Err(unauthorized())
    }
}

/// `run` once `ready` holds for it: the index may be a moment behind the operator's
/// write that moved it on (its Pod can start and call before the API server's watch has
/// delivered that write), so a run for which `ready` fails is looked up again as the
/// index changes, for a bounded time. The run as last indexed otherwise.
pub async fn once_indexed(
    state: &AppState,
    id: &str,
    run: Arc<Run>,
    ready: impl Fn(&Run) -> bool,
) -> Arc<Run> {
    if ready(&run) {
        return run;
    }
    let find = |i: &crate::index::Inner| indexed_run(i, id);
    state
        .index
        .wait_until(INDEX_GRACE, |i| find(i).is_some_and(|r| ready(&r)))
        .await;
    find(&state.index.read()).unwrap_or(run)
}

/// The run `id` in the index: a run, or a health assessment (a Run kept apart there).
fn indexed_run(i: &crate::index::Inner, id: &str) -> Option<Arc<Run>> {
    i.runs()
        .get(id)
        .or_else(|| i.assessments().get(id))
        .cloned()
}

fn is_final(run: &Run) -> bool {
    RunState::of(run.status.as_ref().and_then(|s| s.status.as_deref()))
        .is_ok_and(RunState::is_final)
}

/// The caller of a run's API credential ([`terrace_crds::run::run_credential`], the
/// token in the CLI configuration of the run's engine): the run's token checked against
/// its Secret, the run not final, and its scope ([`RunScope`]) taken from the index now:
/// its workspace and the workspaces that share their state with it. None when any of it
/// fails (401); a credential whose parts are not Kubernetes names, or whose run the
/// index does not hold, costs no Kubernetes request.
pub async fn run_caller(state: &AppState, credential: &str) -> Result<Option<Caller>, ApiError> {
    use terrace_crds::resources::Named;
    let Some((object, token)) = terrace_crds::run::parse_run_credential(credential) else {
        return Ok(None);
    };
    let Some(ns) = terrace_crds::run::runner_token_namespace(token) else {
        return Ok(None);
    };
    let found = {
        let idx = state.index.read();
        let named = |r: &&Arc<Run>| r.metadata.name.as_deref() == Some(object);
        idx.runs()
            .in_namespace(ns)
            .find(named)
            .or_else(|| idx.assessments().in_namespace(ns).find(named))
            .cloned()
    };
    let Some(run) = found.filter(|r| !is_final(r)) else {
        return Ok(None);
    };
    if !holds_token(state, &run, token).await? {
        return Ok(None);
    }
    let idx = state.index.read();
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
        run: id_of(run.as_ref()),
        workspace: idx
            .workspace_object(ns, &run.spec.workspace)
            .map(|w| w.spec.name.clone())
            .unwrap_or_default(),
        workspaces,
    };
    Ok(Some(Caller::for_run(
        &id_of(run.as_ref()),
        scope,
        credential,
    )))
}

/// Whether the Secret of `run` (indexed, so its names are the cluster's) holds
/// `presented` as its token.
async fn holds_token(state: &AppState, run: &Run, presented: &str) -> Result<bool, ApiError> {
    let ns = run.namespace().unwrap_or_default();
    let uid = run.metadata.uid.clone().unwrap_or_default();
    state
        .secret_tokens
        .holds(
            state,
            &ns,
            &uid,
            &secret_name(&run.name_any()),
            TOKEN_KEY,
            presented,
        )
        .await
}

/// The tokens of run and test-run Secrets the API server has read: the SHA-256 of the
/// value of each (owner UID, key), read once per owner (a run's token never changes while
/// it runs). A runner calls several times a second (log parts, state, plan); the check of
/// each call is a hash and a comparison, not a Kubernetes request, and a wrong token
/// presented for a known run costs nothing more than the first read.
#[derive(Default)]
pub struct SecretTokens {
    held: std::sync::Mutex<std::collections::HashMap<(String, &'static str), [u8; 32]>>,
}

/// Most entries kept; beyond it the map starts again (entries of final runs are no longer
/// asked for).
const MAX_SECRET_TOKENS: usize = 20_000;

impl SecretTokens {
    /// Whether Secret `secret` of namespace `ns` (the Secret of the object with UID
    /// `uid`) holds `presented` under `key`. `ns` and `secret` must come from indexed
    /// objects, never from a request.
    pub async fn holds(
        &self,
        state: &AppState,
        ns: &str,
        uid: &str,
        secret: &str,
        key: &'static str,
        presented: &str,
    ) -> Result<bool, ApiError> {
        use sha2::{Digest, Sha256};
        let slot = (uid.to_owned(), key);
        let known = self.lock().get(&slot).copied();
        let held = match known {
            Some(h) => h,
            None => {
                let Some(value) = read_secret_key(state, ns, secret, key).await? else {
                    return Ok(false);
                };
                let h: [u8; 32] = Sha256::digest(&value).into();
                let mut map = self.lock();
                if map.len() >= MAX_SECRET_TOKENS {
                    map.clear();
                }
                map.insert(slot, h);
                h
            }
        };
        Ok(crate::capability::constant_time_eq(
            &held,
            &Sha256::digest(presented.as_bytes()),
        ))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, &'static str), [u8; 32]>>
    {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn read_secret_key(
    state: &AppState,
    ns: &str,
    name: &str,
    key: &str,
) -> Result<Option<Vec<u8>>, ApiError> {
    let secrets = write::api::<Secret>(state, ns);
    let secret = match secrets.get_opt(name).await {
        Ok(s) => s,
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => None,
        Err(e) => return Err(e.into()),
    };
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove(key))
        .map(|v| v.0))
}
