//! Workspaces (SPEC.md B1–B9): create, update, list, show, safe and force delete, lock,
//! unlock and force-unlock, by ID and by organization and name.
//!
//! Reads come from the watch-fed [`crate::index`]; writes go to the Kubernetes API and then
//! wait for the index to see them. Names are unique per organization through an atomic
//! claim object (a ConfigMap named after the lowercased name, created before the
//! workspace and owned by it afterwards), so of N concurrent creates exactly one wins.
//! Locks live in annotations written with a resourceVersion precondition.

pub mod input;
pub mod list;
pub mod render;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRequestParts, Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use terrace_crds::constants::{
    ANNOTATION_LOCK_REASON, ANNOTATION_LOCKED_AT, ANNOTATION_LOCKED_BY, LABEL_ID,
    LABEL_ORGANIZATION,
};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::lock::{self, LockHolder, LockOp, LockOutcome, StateVersions};
use terrace_crds::{Organization, Workspace, WorkspaceSpec};

use crate::auth::{Caller, Check};
use crate::jsonapi::{JsonBody, QueryParams, attributes, resource_object};
use crate::orgs::visible_org;
use crate::{ApiError, AppState};
use input::{OrgDefaults, WorkspaceInput};
use render::{Permissions, RenderContext, lock_holder, workspace_id};

/// How long a write waits for the index to reflect it.
pub const INDEX_WAIT: Duration = Duration::from_secs(10);
/// Label of name-claim ConfigMaps.
pub const LABEL_CLAIM: &str = "terrace.dev/claim";
/// A claim with no owner older than this is considered abandoned (a crashed create).
const STALE_CLAIM: Duration = Duration::from_secs(30);

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/workspaces",
            get(list::list).post(create),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces/{name}",
            get(show).patch(update_by_name).delete(force_delete),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces/{name}/actions/safe-delete",
            post(safe_delete),
        )
        .route(
            "/api/v2/workspaces/{id}",
            get(show).patch(update_by_id).delete(force_delete),
        )
        .route("/api/v2/workspaces/{id}/actions/lock", post(lock_ws))
        .route("/api/v2/workspaces/{id}/actions/unlock", post(unlock_ws))
        .route(
            "/api/v2/workspaces/{id}/actions/force-unlock",
            post(force_unlock_ws),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/safe-delete",
            post(safe_delete),
        )
}

/// A workspace with its organization.
#[derive(Clone)]
pub struct Located {
    pub ws: Arc<Workspace>,
    pub org: Arc<Organization>,
    pub ns: String,
}

impl Located {
    fn object_name(&self) -> String {
        self.ws.name_any()
    }
    fn check(&self, verb: &'static str) -> Check {
        Check::new(verb, "workspaces", &self.ns, Some(&self.object_name()))
    }
}

fn not_found() -> ApiError {
    ApiError::NotFound("workspace not found".into())
}

fn locate_id(state: &AppState, id: &str) -> Option<Located> {
    let idx = state.index.read();
    let ws = idx.workspace(id)?.clone();
    let ns = ws.namespace().unwrap_or_default();
    let org = idx.organization_of_namespace(&ns)?.clone();
    Some(Located { ws, org, ns })
}

async fn locate_name(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
) -> Result<Located, ApiError> {
    let org = visible_org(state, caller, org).await?;
    let ns = org.target_namespace().to_owned();
    let ws = state
        .index
        .read()
        .workspace_named(&ns, name)
        .cloned()
        .ok_or_else(not_found)?;
    Ok(Located { ws, org, ns })
}

/// The workspace if the caller may read it; 404 otherwise.
async fn readable(
    state: &AppState,
    caller: &Caller,
    located: Option<Located>,
) -> Result<Located, ApiError> {
    let l = located.ok_or_else(not_found)?;
    let name = l.object_name();
    if state
        .auth
        .allowed_on(caller, "get", "workspaces", &l.ns, Some(&name))
        .await?
    {
        Ok(l)
    } else {
        Err(not_found())
    }
}

/// The workspace with this ID, if the caller may read it; 404 otherwise.
async fn readable_id(state: &AppState, caller: &Caller, id: &str) -> Result<Located, ApiError> {
    readable(state, caller, locate_id(state, id)).await
}

/// The workspace `name` of organization `org`, if the caller may read it; 404 otherwise.
async fn readable_name(
    state: &AppState,
    caller: &Caller,
    org: &str,
    name: &str,
) -> Result<Located, ApiError> {
    let located = locate_name(state, caller, org, name).await.ok();
    readable(state, caller, located).await
}

/// The authenticated caller and the workspace of the path, by ID (`{id}`) or by
/// organization and name (`{org}`, `{name}`), if the caller may read it (404 otherwise).
/// One extractor for both addressings of SPEC B2–B4.
pub struct Readable(pub Caller, pub Located);

impl FromRequestParts<AppState> for Readable {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let params = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| not_found())?;
        let param = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
        let l = match (param("id"), param("org"), param("name")) {
            (Some(id), _, _) => readable_id(state, &caller, id).await?,
            (None, Some(org), Some(name)) => readable_name(state, &caller, org, name).await?,
            _ => return Err(not_found()),
        };
        Ok(Readable(caller, l))
    }
}

/// Whether the caller may force delete: `force-delete`, or `update` when the organization
/// lets workspace admins force delete.
async fn may_force_delete(
    state: &AppState,
    caller: &Caller,
    l: &Located,
) -> Result<bool, ApiError> {
    if state.auth.allowed(caller, &l.check("force-delete")).await? {
        return Ok(true);
    }
    Ok(l.org.spec.settings.allow_force_delete_workspaces
        && state.auth.allowed(caller, &l.check("update")).await?)
}

/// The caller's permissions on a workspace.
pub async fn permissions(
    state: &AppState,
    caller: &Caller,
    l: &Located,
) -> Result<Permissions, ApiError> {
    let checks = [
        l.check("get"),
        l.check("update"),
        l.check("lock"),
        l.check("force-unlock"),
        l.check("delete"),
    ];
    let r = state.auth.allowed_all(caller, &checks).await?;
    Ok(Permissions {
        read: r[0],
        update: r[1],
        lock: r[2],
        force_unlock: r[3],
        delete: r[4],
        force_delete: may_force_delete(state, caller, l).await?,
    })
}

/// The `data` object of a located workspace, with the caller's permissions.
pub async fn render_located(
    state: &AppState,
    caller: &Caller,
    l: &Located,
) -> Result<Value, ApiError> {
    let permissions = permissions(state, caller, l).await?;
    let (project_id, ssh_key_id) = {
        let idx = state.index.read();
        (
            idx.project_of(&l.ws)
                .and_then(|p| p.labels().get(LABEL_ID).cloned()),
            ssh_key_of(&idx, l),
        )
    };
    let ctx = RenderContext {
        org: &l.org,
        project_id,
        ssh_key_id,
        permissions,
        hosted: state.hosted(),
    };
    Ok(render::workspace(&l.ws, &ctx))
}

/// Included documents for `include` values this server can answer.
pub fn included(state: &AppState, located: &[&Located], includes: &[String]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for inc in includes {
        for l in located {
            let doc = match inc.as_str() {
                "organization" => Some(crate::orgs::render(&l.org)),
                "project" => {
                    let idx = state.index.read();
                    idx.project_of(&l.ws)
                        .map(|p| crate::projects::render(p, &l.org))
                }
                _ => None,
            };
            if let Some(d) = doc {
                let key = (d["type"].to_string(), d["id"].to_string());
                if seen.insert(key) {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// Rendered single-workspace documents, keyed by everything they depend on (the
/// workspace's, organization's and project's resourceVersions, the caller, the edition)
/// and kept as long as the permission decisions they embed ([`crate::auth::CACHE_TTL`]).
#[derive(Default)]
pub struct RenderCache {
    docs:
        std::sync::Mutex<std::collections::HashMap<u128, (std::time::Instant, axum::body::Bytes)>>,
}

impl RenderCache {
    const MAX: usize = 20_000;

    fn get(&self, key: u128) -> Option<axum::body::Bytes> {
        let docs = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        docs.get(&key)
            .filter(|(at, _)| at.elapsed() < crate::auth::CACHE_TTL)
            .map(|(_, b)| b.clone())
    }

    fn put(&self, key: u128, bytes: axum::body::Bytes) {
        let mut docs = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        if docs.len() >= Self::MAX {
            docs.retain(|_, (at, _)| at.elapsed() < crate::auth::CACHE_TTL);
            if docs.len() >= Self::MAX {
                docs.clear();
            }
        }
        docs.insert(key, (std::time::Instant::now(), bytes));
    }
}

/// The ID of the workspace's SSH key, resolving an object name (see
/// [`render::ssh_key_id`]).
fn ssh_key_of(idx: &crate::index::Inner, l: &Located) -> Option<String> {
    render::ssh_key_id(&l.ws, |name| {
        idx.ssh_keys()
            .in_namespace(&l.ns)
            .find(|k| k.metadata.name.as_deref() == Some(name))
            .map(AsRef::as_ref)
    })
}

fn render_key(state: &AppState, caller: &Caller, l: &Located) -> u128 {
    let idx = state.index.read();
    // A key named by object name: the representation changes when that key's ID does.
    let ssh_key =
        l.ws.spec
            .ssh_key
            .as_ref()
            .filter(|k| !terrace_crds::ids::is_valid_id(terrace_crds::ids::IdKind::SshKey, k))
            .and_then(|_| ssh_key_of(&idx, l));
    let project = idx.project_of(&l.ws).map(|p| {
        (
            p.metadata.uid.as_deref(),
            p.metadata.resource_version.as_deref(),
        )
    });
    crate::auth::digest(&(
        l.ws.metadata.uid.as_deref(),
        l.ws.metadata.resource_version.as_deref(),
        l.org.metadata.uid.as_deref(),
        l.org.metadata.resource_version.as_deref(),
        project,
        ssh_key,
        caller.fingerprint,
        state.hosted(),
    ))
}

/// The serialized `data` object of a workspace for this caller, from the render cache
/// when nothing it depends on changed.
pub async fn rendered_data(
    state: &AppState,
    caller: &Caller,
    l: &Located,
) -> Result<axum::body::Bytes, ApiError> {
    let key = render_key(state, caller, l);
    if let Some(bytes) = state.rendered.get(key) {
        return Ok(bytes);
    }
    let data = render_located(state, caller, l).await?;
    let bytes = axum::body::Bytes::from(
        serde_json::to_vec(&data).map_err(|e| ApiError::Internal(e.to_string()))?,
    );
    state.rendered.put(key, bytes.clone());
    Ok(bytes)
}

async fn respond_one(
    state: &AppState,
    caller: &Caller,
    l: &Located,
    status: StatusCode,
    q: &QueryParams,
) -> Result<Response, ApiError> {
    let includes = q.includes();
    // The whole single-workspace document is cached too when nothing is included.
    let doc_key = includes
        .is_empty()
        .then(|| crate::auth::digest(&(render_key(state, caller, l), "doc")));
    if let Some(bytes) = doc_key.and_then(|k| state.rendered.get(k)) {
        return Ok(crate::jsonapi::DocBytes(status, bytes).into_response());
    }
    let data = rendered_data(state, caller, l).await?;
    let inc = included(state, &[l], &includes);
    let mut body = Vec::with_capacity(data.len() + 16);
    body.extend_from_slice(b"{\"data\":");
    body.extend_from_slice(&data);
    if !inc.is_empty() {
        body.extend_from_slice(b",\"included\":");
        serde_json::to_writer(&mut body, &inc).map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    body.push(b'}');
    let bytes = axum::body::Bytes::from(body);
    if let Some(k) = doc_key {
        state.rendered.put(k, bytes.clone());
    }
    Ok(crate::jsonapi::DocBytes(status, bytes).into_response())
}

async fn show(
    State(state): State<AppState>,
    Readable(caller, l): Readable,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    respond_one(
        &state,
        &caller,
        &l,
        StatusCode::OK,
        &QueryParams::parse(q.as_deref()),
    )
    .await
}

fn org_defaults(state: &AppState, org: &Organization) -> OrgDefaults {
    OrgDefaults {
        execution_mode: org.spec.settings.default_execution_mode.clone(),
        global_remote_state: !state.hosted() && org.spec.settings.default_global_remote_state,
        terraform_version: state.settings.default_terraform_version.clone(),
    }
}

fn claim_name(name: &str) -> String {
    let digest = Sha256::digest(name.to_ascii_lowercase().as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("terrace-wsname-{hex}")
}

fn taken(name: &str) -> ApiError {
    ApiError::Invalid {
        pointer: "/data/attributes/name".into(),
        detail: format!("Name {name:?} has already been taken"),
    }
}

/// Claims `name` in `ns` for workspace `id` atomically; 422 when another workspace has it.
async fn claim(state: &AppState, ns: &str, name: &str, id: &str) -> Result<(), ApiError> {
    let api: Api<ConfigMap> = Api::namespaced(state.client.clone(), ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(claim_name(name)),
            labels: Some(BTreeMap::from([(
                LABEL_CLAIM.to_owned(),
                "workspace-name".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("name".to_owned(), name.to_owned()),
            ("workspace-id".to_owned(), id.to_owned()),
        ])),
        ..Default::default()
    };
    for _ in 0..2 {
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Taken, unless the claim was abandoned by a create that never finished.
                let existing = api.get(&claim_name(name)).await.map_err(kube_err)?;
                let holder = existing
                    .data
                    .as_ref()
                    .and_then(|d| d.get("workspace-id"))
                    .cloned()
                    .unwrap_or_default();
                let owned = existing
                    .metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| !o.is_empty());
                let age = existing
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| jiff::Timestamp::now().duration_since(t.0))
                    .unwrap_or_default();
                let holder_alive = state.index.read().workspace(&holder).is_some();
                if owned
                    || holder_alive
                    || age < jiff::SignedDuration::try_from(STALE_CLAIM).unwrap_or_default()
                {
                    return Err(taken(name));
                }
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: existing.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                let _ = api.delete(&claim_name(name), &dp).await;
            }
            Err(e) => return Err(kube_err(e)),
        }
    }
    Err(taken(name))
}

async fn release_claim(state: &AppState, ns: &str, name: &str, id: &str) {
    let api: Api<ConfigMap> = Api::namespaced(state.client.clone(), ns);
    if let Ok(cm) = api.get(&claim_name(name)).await
        && cm
            .data
            .as_ref()
            .and_then(|d| d.get("workspace-id"))
            .map(String::as_str)
            == Some(id)
    {
        let _ = api
            .delete(&claim_name(name), &DeleteParams::default())
            .await;
    }
}

async fn own_claim(state: &AppState, ns: &str, name: &str, ws: &Workspace) {
    let api: Api<ConfigMap> = Api::namespaced(state.client.clone(), ns);
    if let Some(owner) = ws.controller_owner_ref(&()) {
        let patch = json!({"metadata": {"ownerReferences": [owner]}});
        if let Err(e) = api
            .patch(
                &claim_name(name),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(error = %e, "could not attach the name claim to its workspace");
        }
    }
}

/// Maps a Kubernetes API failure to the API's error.
pub fn kube_err(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) if s.code == 404 => ApiError::NotFound(s.message),
        kube::Error::Api(s) if s.code == 409 => ApiError::Status(StatusCode::CONFLICT, s.message),
        kube::Error::Api(s) if s.code == 422 => ApiError::Invalid {
            pointer: "/data".into(),
            detail: s.message,
        },
        kube::Error::Api(s) if s.code == 403 => ApiError::Internal(format!(
            "terrace's service account lacks a permission: {}",
            s.message
        )),
        other => ApiError::Internal(other.to_string()),
    }
}

fn project_from_input(state: &AppState, ns: &str, project_id: &str) -> Result<String, ApiError> {
    let idx = state.index.read();
    let p = idx
        .project(project_id)
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .ok_or_else(|| ApiError::Invalid {
            pointer: "/data/relationships/project/data/id".into(),
            detail: format!("project {project_id:?} not found in this organization"),
        })?;
    Ok(p.name_any())
}

async fn wait_for(state: &AppState, ws: &Workspace) {
    let uid = ws.metadata.uid.clone().unwrap_or_default();
    let rv = ws.metadata.resource_version.clone().unwrap_or_default();
    let seen = state
        .index
        .wait_until(INDEX_WAIT, |i| {
            i.workspace_by_uid(&uid).is_some_and(|w| {
                crate::index::rv_at_least(w.metadata.resource_version.as_deref(), &rv)
            })
        })
        .await;
    if !seen {
        tracing::warn!(%uid, %rv, "index did not catch up with a write in time");
    }
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let ns = org.target_namespace().to_owned();
    if !state
        .auth
        .allowed(&caller, &Check::new("create", "workspaces", &ns, None))
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not allowed to create workspaces in this organization".into(),
        ));
    }
    let data = resource_object(&body, "workspaces")?;
    let attrs = attributes(data)?;
    let input = WorkspaceInput::parse(&attrs, data.get("relationships"), state.hosted())?;
    let project = match input.project_id.as_deref() {
        Some(id) if !id.is_empty() => Some(project_from_input(&state, &ns, id)?),
        _ => None,
    };
    let mut spec = WorkspaceSpec::default_for_create();
    input::apply(&mut spec, input, true, &org_defaults(&state, &org))?;
    spec.project = project;
    crate::relationships::references::check(&state, &ns, None, None, &spec)?;
    if state
        .index
        .read()
        .workspace_named(&ns, &spec.name)
        .is_some()
    {
        return Err(taken(&spec.name));
    }
    let id = new_id(IdKind::Workspace);
    claim(&state, &ns, &spec.name, &id).await?;
    let ws = Workspace {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&id)),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), org.name_any()),
            ])),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let api: Api<Workspace> = Api::namespaced(state.client.clone(), &ns);
    let created = match api.create(&PostParams::default(), &ws).await {
        Ok(w) => w,
        Err(e) => {
            release_claim(&state, &ns, &ws.spec.name, &id).await;
            return Err(kube_err(e));
        }
    };
    own_claim(&state, &ns, &created.spec.name, &created).await;
    wait_for(&state, &created).await;
    let l = Located {
        ws: Arc::new(created),
        org,
        ns,
    };
    respond_one(
        &state,
        &caller,
        &l,
        StatusCode::CREATED,
        &QueryParams::parse(q.as_deref()),
    )
    .await
}

async fn update_by_id(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let l = readable_id(&state, &caller, &id).await?;
    update(&state, &caller, l, body).await
}

async fn update_by_name(
    State(state): State<AppState>,
    caller: Caller,
    Path((org, name)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let l = readable_name(&state, &caller, &org, &name).await?;
    update(&state, &caller, l, body).await
}

async fn update(
    state: &AppState,
    caller: &Caller,
    l: Located,
    body: Value,
) -> Result<Response, ApiError> {
    if !state.auth.allowed(caller, &l.check("update")).await? {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "admin access to the workspace is required".into(),
        ));
    }
    let data = resource_object(&body, "workspaces")?;
    let attrs = attributes(data)?;
    let input = WorkspaceInput::parse(&attrs, data.get("relationships"), state.hosted())?;
    // Project move: blank or unchanged means no move; a move needs admin on both projects.
    let current_project = state.index.read().project_of(&l.ws).map(|p| p.name_any());
    let target_project = match input.project_id.as_deref() {
        Some(id) if !id.is_empty() => Some(project_from_input(state, &l.ns, id)?),
        _ => None,
    };
    if let Some(target) = &target_project
        && Some(target) != current_project.as_ref()
    {
        let checks = [
            Check::new("update", "projects", &l.ns, current_project.as_deref()),
            Check::new("update", "projects", &l.ns, Some(target)),
        ];
        if !state
            .auth
            .allowed_all(caller, &checks)
            .await?
            .into_iter()
            .all(|b| b)
        {
            return Err(ApiError::Status(
                StatusCode::FORBIDDEN,
                "moving a workspace needs admin access to both projects".into(),
            ));
        }
    }
    let id = workspace_id(&l.ws);
    let old_name = l.ws.spec.name.clone();
    let renamed_to = input
        .name
        .clone()
        .filter(|n| !n.eq_ignore_ascii_case(&old_name));
    if let Some(new_name) = &renamed_to {
        terrace_crds::rules::validate_workspace_name(new_name).map_err(input::violation)?;
        if state
            .index
            .read()
            .workspace_named(&l.ns, new_name)
            .is_some()
        {
            return Err(taken(new_name));
        }
        claim(state, &l.ns, new_name, &id).await?;
    }
    let api: Api<Workspace> = Api::namespaced(state.client.clone(), &l.ns);
    let defaults = org_defaults(state, &l.org);
    // A merge patch of only the attributes that change, guarded by the resourceVersion the
    // change was computed from; never a replace of the index copy, which lacks the kubectl
    // last-applied annotation and managed fields (crate::patch).
    let result = crate::patch::patch_spec(&api, (*l.ws).clone(), |current| {
        let mut next = current.spec.clone();
        input::apply(&mut next, input.clone(), false, &defaults)?;
        crate::relationships::references::check(
            state,
            &l.ns,
            Some(&id),
            Some(&current.spec),
            &next,
        )?;
        if let Some(t) = &target_project {
            next.project = Some(t.clone());
        }
        crate::patch::spec_diff(&current.spec, &next)
    })
    .await;
    let updated = match result {
        Ok(w) => w,
        Err(e) => {
            if let Some(n) = &renamed_to {
                release_claim(state, &l.ns, n, &id).await;
            }
            return Err(e);
        }
    };
    if let Some(n) = &renamed_to {
        own_claim(state, &l.ns, n, &updated).await;
        release_claim(state, &l.ns, &old_name, &id).await;
    }
    wait_for(state, &updated).await;
    let l = Located {
        ws: Arc::new(updated),
        ..l
    };
    respond_one(state, caller, &l, StatusCode::OK, &QueryParams::default()).await
}

async fn delete_workspace(state: &AppState, l: &Located) -> Result<Response, ApiError> {
    let api: Api<Workspace> = Api::namespaced(state.client.clone(), &l.ns);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: l.ws.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    api.delete(&l.object_name(), &dp).await.map_err(kube_err)?;
    let uid = l.ws.metadata.uid.clone().unwrap_or_default();
    state
        .index
        .wait_until(INDEX_WAIT, |i| i.workspace_by_uid(&uid).is_none())
        .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn force_delete(
    State(state): State<AppState>,
    Readable(caller, l): Readable,
) -> Result<Response, ApiError> {
    let (state, caller) = (&state, &caller);
    if !may_force_delete(state, caller, &l).await? {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not authorized to force delete this workspace".into(),
        ));
    }
    delete_workspace(state, &l).await
}

async fn safe_delete(
    State(state): State<AppState>,
    Readable(caller, l): Readable,
) -> Result<Response, ApiError> {
    let (state, caller) = (&state, &caller);
    if !state.auth.allowed(caller, &l.check("delete")).await? {
        return Err(not_found());
    }
    if let Some(h) = lock_holder(&l.ws) {
        return Err(ApiError::Status(
            StatusCode::CONFLICT,
            format!("Workspace cannot be safely deleted: it is locked by {h}"),
        ));
    }
    let count = l.ws.status.as_ref().map_or(0, |s| s.resource_count);
    if count > 0 {
        return Err(ApiError::Status(
            StatusCode::CONFLICT,
            format!("Workspace cannot be safely deleted: it is managing {count} resources"),
        ));
    }
    delete_workspace(state, &l).await
}

async fn lock_ws(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let reason = match body.get("reason") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err(ApiError::Invalid {
                pointer: "/reason".into(),
                detail: "reason must be a string".into(),
            });
        }
    };
    lock_action(&state, &caller, &id, LockOp::Lock { reason }, "lock").await
}

async fn unlock_ws(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    lock_action(&state, &caller, &id, LockOp::Unlock, "lock").await
}

async fn force_unlock_ws(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    lock_action(&state, &caller, &id, LockOp::ForceUnlock, "force-unlock").await
}

/// Lock, unlock and force-unlock: SPEC.md's lock table through [`lock::transition`],
/// written with a resourceVersion precondition so concurrent lockers cannot both win.
async fn lock_action(
    state: &AppState,
    caller: &Caller,
    id: &str,
    op: LockOp,
    verb: &'static str,
) -> Result<Response, ApiError> {
    let l = readable(state, caller, locate_id(state, id)).await?;
    if !state.auth.allowed(caller, &l.check(verb)).await? {
        return Err(not_found());
    }
    let me = LockHolder::User(caller.username.clone());
    let api: Api<Workspace> = Api::namespaced(state.client.clone(), &l.ns);
    let mut current = (*l.ws).clone();
    for _ in 0..10 {
        let outcome = lock::transition(
            lock_holder(&current).as_ref(),
            &op,
            &me,
            StateVersions::default(),
        )
        .map_err(|e| {
            let code = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::CONFLICT);
            ApiError::Status(code, e.to_string())
        })?;
        let annotations = match &outcome {
            LockOutcome::Locked { holder, reason } => json!({
                ANNOTATION_LOCKED_BY: holder.annotation(),
                ANNOTATION_LOCK_REASON: reason,
                ANNOTATION_LOCKED_AT: crate::jsonapi::timestamp(&jiff::Timestamp::now()),
            }),
            LockOutcome::Unlocked => json!({
                ANNOTATION_LOCKED_BY: Value::Null,
                ANNOTATION_LOCK_REASON: Value::Null,
                ANNOTATION_LOCKED_AT: Value::Null,
            }),
        };
        let patch = json!({"metadata": {
            "resourceVersion": current.metadata.resource_version,
            "annotations": annotations,
        }});
        match api
            .patch(
                &l.object_name(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(updated) => {
                let (reason, note) = match (&op, &outcome) {
                    (LockOp::Lock { .. }, LockOutcome::Locked { holder, reason }) => {
                        ("Locked", format!("locked by {holder}: {reason}"))
                    }
                    (LockOp::ForceUnlock, _) => {
                        ("ForceUnlocked", format!("force-unlocked by {}", me))
                    }
                    _ => ("Unlocked", format!("unlocked by {}", me)),
                };
                crate::events::workspace_event(&state.events, &updated, reason, note);
                wait_for(state, &updated).await;
                let l = Located {
                    ws: Arc::new(updated),
                    ..l
                };
                return respond_one(state, caller, &l, StatusCode::OK, &QueryParams::default())
                    .await;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = api.get(&l.object_name()).await.map_err(kube_err)?;
            }
            Err(e) => return Err(kube_err(e)),
        }
    }
    Err(ApiError::Status(
        StatusCode::CONFLICT,
        "the workspace changed concurrently; retry".into(),
    ))
}
