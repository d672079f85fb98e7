//! Workspaces (SPEC.md B1–B15): create, update, list, show, safe and force delete, lock,
//! unlock and force-unlock, by ID and by organization and name; the SSH key assignment
//! (B10, B11) and remote state consumers (B12–B15), which answer workspace documents.
//!
//! Reads come from the watch-fed index; writes go to the Kubernetes API and then wait for
//! the index to see them ([`crate::write`]). Names are unique per organization through an
//! atomic claim object ([`claims`]). Locks live in annotations written with a
//! resourceVersion precondition ([`lock`]).
//!
//! A workspace document depends on the caller (its `permissions`), so single-workspace
//! documents are cached per caller and per resourceVersion of everything they show
//! ([`RenderCache`]) for as long as the permission decisions they embed.

mod assessments;
mod claims;
mod consumers;
mod crud;
pub mod input;
pub mod list;
mod lock;
pub mod references;
pub mod render;
mod run_triggers;
mod ssh_key;

use axum::body::Bytes;
use terrace_crds::Workspace;

use crate::documents;
use crate::prelude::*;
use render::{Permissions, RenderContext};

/// A workspace with its organization.
pub type Ws = Located<Workspace>;

pub fn router() -> Router<AppState> {
    merged_routers![crud, lock, consumers, ssh_key, run_triggers, assessments]
}

/// Whether the caller may force delete: `force-delete`, or `update` when the organization
/// lets workspace admins force delete.
async fn may_force_delete(state: &AppState, caller: &Caller, l: &Ws) -> Result<bool, ApiError> {
    if state.allowed(caller, &l.check("force-delete")).await? {
        return Ok(true);
    }
    Ok(l.org.spec.settings.allow_force_delete_workspaces
        && state.allowed(caller, &l.check("update")).await?)
}

/// The caller's permissions on a workspace.
pub async fn permissions(
    state: &AppState,
    caller: &Caller,
    l: &Ws,
) -> Result<Permissions, ApiError> {
    let checks = [
        l.check("get"),
        l.check("update"),
        l.check("lock"),
        l.check("force-unlock"),
        l.check("delete"),
        l.check("read-outputs"),
        l.check("read-state"),
        l.check("write-state"),
        Check::new("create", "runs", &l.ns, None),
        Check::new("get", "workspacevariables", &l.ns, None),
        Check::new("update", "workspacevariables", &l.ns, None),
    ];
    let r = state.auth.allowed_all(caller, &checks).await?;
    Ok(Permissions {
        read: r[0],
        update: r[1],
        lock: r[2],
        force_unlock: r[3],
        delete: r[4],
        read_outputs: r[5],
        read_state: r[6],
        write_state: r[7],
        queue_run: r[8],
        read_variables: r[9],
        update_variables: r[10],
        force_delete: may_force_delete(state, caller, l).await?,
    })
}

/// The `data` object of a located workspace, with the caller's permissions.
pub async fn render_located(state: &AppState, caller: &Caller, l: &Ws) -> Result<Value, ApiError> {
    let permissions = permissions(state, caller, l).await?;
    let (
        project_id,
        ssh_key_id,
        (inherited_mode, inherited_pool),
        current_state,
        (current_run, latest_run),
        (current_configuration_version, variables),
        vcs_connection,
    ) = {
        let idx = state.index.read();
        let project = idx.project_of(&l.obj);
        (
            project.map(|p| id_of(p.as_ref())),
            ssh_key_of(&idx, l),
            match project {
                Some(p) => documents::project_defaults(p, &l.org),
                None => (
                    l.org.spec.settings.default_execution_mode.clone(),
                    l.org.spec.settings.default_agent_pool_id.clone(),
                ),
            },
            idx.current_state_version(&l.obj).cloned(),
            (
                idx.current_run(&l.ns, &l.obj.name_any())
                    .map(|r| id_of(r.as_ref())),
                idx.latest_run(&l.ns, &l.obj.name_any())
                    .map(|r| id_of(r.as_ref())),
            ),
            configuration_and_variables(&idx, &l.ns, &l.obj),
            l.obj
                .spec
                .vcs_repo
                .as_ref()
                .and_then(|r| r.oauth_token_id.as_deref())
                .and_then(|t| idx.oauth_tokens().get(t).cloned()),
        )
    };
    let ctx = RenderContext {
        current_run,
        latest_run,
        org: &l.org,
        project_id,
        ssh_key_id,
        permissions,
        hosted: state.hosted(),
        inherited_mode,
        inherited_pool,
        current_state,
        current_configuration_version,
        variables,
        vcs_connection,
    };
    Ok(render::workspace(&l.obj, &ctx))
}

/// The `include` values of workspace reads (SPEC.md "Optional related resources"); those
/// naming what terrace does not have (readmes, ingress attributes) are accepted and include
/// nothing of their own.
pub const INCLUDES: &[&str] = &[
    "current_configuration_version",
    "current_configuration_version.ingress_attributes",
    "current_assessment_result",
    "current_run",
    "current_run.configuration_version",
    "current_run.configuration_version.ingress_attributes",
    "current_run.plan",
    "current_state_version",
    "current-state-version",
    "effective_tag_bindings",
    "locked_by",
    "organization",
    "outputs",
    "project",
    "readme",
];

/// What `includes` asks of the `located` workspaces: their organization, project, tag
/// bindings, current run, assessment and configuration version, and the state documents
/// ([`state_included`]).
pub async fn included(
    state: &AppState,
    caller: &Caller,
    located: &[&Ws],
    includes: &[String],
) -> Result<Included, ApiError> {
    let mut out = Included::of(includes);
    for inc in includes {
        for l in located {
            let docs = match inc.as_str() {
                "organization" => vec![documents::organization(&l.org, state.hosted())],
                "project" => {
                    let idx = state.index.read();
                    idx.project_of(&l.obj)
                        .map(|p| documents::project_in(&idx, p, &l.org))
                        .into_iter()
                        .collect()
                }
                "effective_tag_bindings" => {
                    let id = l.id();
                    documents::effective_tag_bindings_in(&state.index.read(), &l.obj)
                        .iter()
                        .map(|b| documents::effective_tag_binding(&id, b))
                        .collect()
                }
                "current_run" | "current_run.plan" | "current_run.configuration_version" => {
                    documents::runs::current_run_included(state, l, inc)
                }
                "current_assessment_result" => assessments::current_included(state, l)
                    .into_iter()
                    .collect(),
                "current_configuration_version"
                | "current_configuration_version.ingress_attributes" => state
                    .index
                    .read()
                    .newest_configuration_version(&l.ns, &l.obj.name_any())
                    .map(|c| documents::config_versions::render(c, None))
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            };
            out.extend(docs);
        }
    }
    state_included(state, caller, located, &mut out).await?;
    Ok(out)
}

/// Adds the state documents `out` asks for (`outputs`: `workspace-outputs` with values,
/// sensitive ones null; `current_state_version`) of the workspaces whose outputs the
/// caller may read.
async fn state_included(
    state: &AppState,
    caller: &Caller,
    located: &[&Ws],
    out: &mut Included,
) -> Result<(), ApiError> {
    use crate::documents::state::{WORKSPACE_OUTPUT_TYPE, render, rendered_outputs};
    let outputs = out.wants("outputs");
    let version = out.wants("current_state_version") || out.wants("current-state-version");
    if !outputs && !version {
        return Ok(());
    }
    let base = state.settings.base_url.clone().unwrap_or_default();
    for l in located {
        let current = state.index.read().current_state_version(&l.obj).cloned();
        let Some(v) = current else { continue };
        if !state.allowed(caller, &l.check("read-outputs")).await? {
            continue;
        }
        if version {
            out.add(render(&v, &l.id(), base.trim_end_matches('/'), None));
        }
        if outputs {
            out.extend(rendered_outputs(state, &v, WORKSPACE_OUTPUT_TYPE, false).await?);
        }
    }
    Ok(())
}

/// The `data` of a workspace with the linkage of what `includes` asks for that the
/// cached representation leaves as links only (`effective-tag-bindings`).
pub fn with_included_linkage(
    state: &AppState,
    l: &Ws,
    data: Bytes,
    includes: &[String],
) -> Result<Bytes, ApiError> {
    if !includes.iter().any(|i| i == "effective_tag_bindings") {
        return Ok(data);
    }
    let mut doc: Value =
        serde_json::from_slice(&data).map_err(|e| ApiError::internal("a cached workspace", e))?;
    let id = l.id();
    let linkage: Vec<Value> = documents::effective_tag_bindings_in(&state.index.read(), &l.obj)
        .iter()
        .map(|b| {
            let d = documents::effective_tag_binding(&id, b);
            json!({"id": d["id"], "type": d["type"]})
        })
        .collect();
    doc["relationships"]["effective-tag-bindings"]["data"] = json!(linkage);
    serde_json::to_vec(&doc)
        .map(Bytes::from)
        .map_err(|e| ApiError::internal("rendering a workspace", e))
}

/// Whole responses to `GET` of one workspace, keyed by the bearer token and the request's
/// path and query: the fast path that skips authentication, authorization and rendering
/// when the same caller reads the same unchanged workspace again. An entry holds the very
/// objects (the index's `Arc`s) it was made from and serves only while the index still
/// holds those (any write replaces them) and for [`crate::auth::CACHE_TTL`], as long as
/// the token and permission decisions it stands on are reused anyway.
#[derive(Default)]
pub struct ResponseCache {
    entries: std::sync::Mutex<
        std::collections::HashMap<u128, CachedResponse, std::hash::BuildHasherDefault<KeyHasher>>,
    >,
}

/// The keys are already keyed digests: their low bits are the hash.
#[derive(Default)]
pub struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u128(&mut self, n: u128) {
        self.0 = n as u64;
    }
}

struct CachedResponse {
    at: std::time::Instant,
    /// The index generation it was last found valid at.
    generation: u64,
    ws: Arc<Workspace>,
    org: Arc<Organization>,
    project: Option<Arc<terrace_crds::Project>>,
    current_state: Option<Arc<terrace_crds::StateVersion>>,
    current_run: Option<Arc<terrace_crds::Run>>,
    latest_run: Option<Arc<terrace_crds::Run>>,
    /// Its current configuration version's ID and its variables' IDs.
    configuration_and_variables: (Option<String>, Vec<String>),
    bytes: Bytes,
}

impl ResponseCache {
    /// Entries live [`crate::auth::CACHE_TTL`] (5 s): this holds more than 5 s of reads,
    /// and a fill of many workspaces read once each keeps no more than this many.
    const MAX: usize = 4_096;

    /// The key of a request: its token and URI.
    pub fn key(token: &str, uri: &axum::http::Uri) -> u128 {
        crate::auth::keyed_digest(&(token, uri.path(), uri.query()))
    }

    /// The cached response, if the objects it shows are still the indexed ones.
    pub fn get(&self, state: &AppState, key: u128) -> Option<Bytes> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let c = entries.get_mut(&key)?;
        if c.at.elapsed() >= crate::auth::CACHE_TTL {
            return None;
        }
        // Nothing changed in the index since it was valid: still valid.
        let generation = state.index.generation();
        if c.generation == generation {
            return Some(c.bytes.clone());
        }
        let idx = state.index.read();
        let same = still_indexed(&idx, &c.ws, &c.org)
            && same_arc(idx.project_of(&c.ws), c.project.as_ref())
            && same_arc(idx.current_state_version(&c.ws), c.current_state.as_ref())
            && same_arc(
                idx.current_run(c.org.target_namespace(), &c.ws.name_any()),
                c.current_run.as_ref(),
            )
            && same_arc(
                idx.latest_run(c.org.target_namespace(), &c.ws.name_any()),
                c.latest_run.as_ref(),
            )
            && configuration_and_variables(&idx, c.org.target_namespace(), &c.ws)
                == c.configuration_and_variables;
        if same {
            c.generation = generation;
        }
        same.then(|| c.bytes.clone())
    }

    /// Keeps `bytes` as the response of `key` for workspace `l` (not for one whose SSH key
    /// is named by object name: that representation also depends on the key object).
    pub fn put(&self, state: &AppState, key: u128, l: &Ws, bytes: Bytes) {
        if ssh_key_by_name(&l.obj).is_some() {
            return;
        }
        // Read before the objects are checked below, so a change racing with this put
        // makes the entry re-validate instead of trusting it.
        let generation = state.index.generation();
        let (project, current_state, (current_run, latest_run), configuration_and_variables) = {
            let idx = state.index.read();
            if !still_indexed(&idx, &l.obj, &l.org) {
                // Rendered from objects the index has replaced since: not worth keeping.
                return;
            }
            (
                idx.project_of(&l.obj).cloned(),
                idx.current_state_version(&l.obj).cloned(),
                (
                    idx.current_run(&l.ns, &l.obj.name_any()).cloned(),
                    idx.latest_run(&l.ns, &l.obj.name_any()).cloned(),
                ),
                configuration_and_variables(&idx, &l.ns, &l.obj),
            )
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        make_room(&mut entries, Self::MAX, |c| c.at);
        entries.insert(
            key,
            CachedResponse {
                at: std::time::Instant::now(),
                generation,
                ws: l.obj.clone(),
                org: l.org.clone(),
                project,
                current_state,
                current_run,
                latest_run,
                configuration_and_variables,
                bytes,
            },
        );
    }
}

/// Whether the index still holds these very workspace and organization objects (none of
/// them was replaced by a write since).
fn still_indexed(idx: &crate::index::Inner, ws: &Arc<Workspace>, org: &Arc<Organization>) -> bool {
    ws.metadata
        .uid
        .as_deref()
        .and_then(|u| idx.workspace_by_uid(u))
        .is_some_and(|w| Arc::ptr_eq(w, ws))
        && idx
            .organization_of_namespace(org.target_namespace())
            .is_some_and(|o| Arc::ptr_eq(o, org))
}

/// Makes room in a cache of at most `max` entries before an insert: when full, drops the
/// entries older than [`crate::auth::CACHE_TTL`] (`at`: when an entry was made), and
/// everything when none is.
fn make_room<V, S>(
    entries: &mut std::collections::HashMap<u128, V, S>,
    max: usize,
    at: impl Fn(&V) -> std::time::Instant,
) {
    if entries.len() >= max {
        entries.retain(|_, v| at(v).elapsed() < crate::auth::CACHE_TTL);
        if entries.len() >= max {
            entries.clear();
        }
    }
}

/// Both absent, or the same object.
fn same_arc<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Rendered single-workspace documents, keyed by everything they depend on (the
/// workspace's, organization's and project's resourceVersions, the caller, the edition)
/// and kept as long as the permission decisions they embed ([`crate::auth::CACHE_TTL`]).
#[derive(Default)]
pub struct RenderCache {
    docs: std::sync::Mutex<std::collections::HashMap<u128, (std::time::Instant, Bytes)>>,
}

impl RenderCache {
    /// Entries live [`crate::auth::CACHE_TTL`] (5 s): this holds more than 5 s of reads.
    const MAX: usize = 4_096;

    fn get(&self, key: u128) -> Option<Bytes> {
        let docs = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        docs.get(&key)
            .filter(|(at, _)| at.elapsed() < crate::auth::CACHE_TTL)
            .map(|(_, b)| b.clone())
    }

    fn put(&self, key: u128, bytes: Bytes) {
        let mut docs = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        make_room(&mut docs, Self::MAX, |(at, _)| *at);
        docs.insert(key, (std::time::Instant::now(), bytes));
    }
}

/// The workspace's SSH key when it is named by object name rather than by ID.
fn ssh_key_by_name(ws: &Workspace) -> Option<&str> {
    ws.spec
        .ssh_key
        .as_deref()
        .filter(|k| !terrace_crds::ids::is_valid_id(terrace_crds::ids::IdKind::SshKey, k))
}

/// The ID of the workspace's SSH key, resolving an object name (see
/// [`render::ssh_key_id`]).
fn ssh_key_of(idx: &crate::index::Inner, l: &Ws) -> Option<String> {
    render::ssh_key_id(&l.obj, |name| {
        idx.ssh_keys()
            .in_namespace(&l.ns)
            .find(|k| k.metadata.name.as_deref() == Some(name))
            .map(AsRef::as_ref)
    })
}

/// The ID of a workspace's current configuration version, and its variables' IDs (in
/// order).
fn configuration_and_variables(
    idx: &crate::index::Inner,
    ns: &str,
    ws: &Workspace,
) -> (Option<String>, Vec<String>) {
    let object = ws.name_any();
    let cv = idx
        .newest_configuration_version(ns, &object)
        .map(|c| id_of(c.as_ref()))
        .filter(|id| !id.is_empty());
    let mut vars: Vec<String> = idx
        .variables_of(ns, &object)
        .map(|v| id_of(v.as_ref()))
        .filter(|id| !id.is_empty())
        .collect();
    vars.sort();
    (cv, vars)
}

fn render_key(state: &AppState, caller: &Caller, l: &Ws) -> u128 {
    let idx = state.index.read();
    // A key named by object name: the representation changes when that key's ID does.
    let ssh_key = ssh_key_by_name(&l.obj).and_then(|_| ssh_key_of(&idx, l));
    let project = idx.project_of(&l.obj).map(|p| {
        (
            p.metadata.uid.as_deref(),
            p.metadata.resource_version.as_deref(),
        )
    });
    let current_state = idx.current_state_version(&l.obj).map(|v| {
        (
            v.metadata.uid.as_deref(),
            v.metadata.resource_version.as_deref(),
        )
    });
    let current_run = idx
        .current_run(&l.ns, &l.obj.name_any())
        .and_then(|r| r.metadata.uid.clone());
    let latest_run = idx
        .latest_run(&l.ns, &l.obj.name_any())
        .and_then(|r| r.metadata.uid.clone());
    let configuration_and_variables = configuration_and_variables(&idx, &l.ns, &l.obj);
    crate::auth::digest(&(
        current_state,
        (current_run, latest_run),
        configuration_and_variables,
        l.obj.metadata.uid.as_deref(),
        l.obj.metadata.resource_version.as_deref(),
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
pub async fn rendered_data(state: &AppState, caller: &Caller, l: &Ws) -> Result<Bytes, ApiError> {
    let key = render_key(state, caller, l);
    if let Some(bytes) = state.rendered.get(key) {
        return Ok(bytes);
    }
    let bytes = data_bytes(state, caller, l).await?;
    state.rendered.put(key, bytes.clone());
    Ok(bytes)
}

/// The serialized `data` object of a workspace for this caller, rendered now, in an
/// allocation of its exact size (a cached one keeps no spare capacity).
async fn data_bytes(state: &AppState, caller: &Caller, l: &Ws) -> Result<Bytes, ApiError> {
    let data = render_located(state, caller, l).await?;
    let mut vec =
        serde_json::to_vec(&data).map_err(|e| ApiError::internal("rendering a workspace", e))?;
    vec.shrink_to_fit();
    Ok(Bytes::from(vec))
}

/// The response of one workspace just written (created, updated, locked):
/// `{"data": …, "included": […]}`. Rendered, never cached: the operator's next status
/// write replaces the version at once, so a cached copy would only be memory kept for
/// every write until the cache fills (issue 31: several KiB per created workspace).
async fn respond_one(
    state: &AppState,
    caller: &Caller,
    l: &Ws,
    status: StatusCode,
    includes: &[String],
) -> Result<Response, ApiError> {
    let bytes = one_document(state, caller, l, includes).await?;
    Ok(crate::render::DocBytes(status, bytes).into_response())
}

/// The document of one workspace for this caller.
async fn one_document(
    state: &AppState,
    caller: &Caller,
    l: &Ws,
    includes: &[String],
) -> Result<Bytes, ApiError> {
    let data = with_included_linkage(state, l, data_bytes(state, caller, l).await?, includes)?;
    let inc = included(state, caller, &[l], includes).await?;
    let mut body = Vec::with_capacity(data.len() + 16);
    body.extend_from_slice(b"{\"data\":");
    body.extend_from_slice(&data);
    if inc.any() {
        body.extend_from_slice(b",\"included\":");
        serde_json::to_writer(&mut body, inc.documents())
            .map_err(|e| ApiError::internal("rendering included documents", e))?;
    }
    body.push(b'}');
    Ok(Bytes::from(body))
}

/// Waits (bounded) until the index has seen `ws` and answers it located.
async fn written(state: &AppState, l: &Ws, ws: Workspace) -> Ws {
    write::wait_seen(state, &ws).await;
    l.with(ws)
}
