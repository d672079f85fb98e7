//! Policies and policy sets (TFE's OPA policies API, docs/policies.md): Policy and
//! PolicySet objects in the organization's namespace, declared with kubectl or GitOps or
//! managed here.
//!
//! - `GET/POST /organizations/:org/policies`, `GET/PATCH/DELETE /policies/:id`,
//!   `PUT /policies/:id/upload` (the Rego, compiled when stored: 422 with the compiler's
//!   words), `GET /policies/:id/download`;
//! - `GET/POST /organizations/:org/policy-sets`, `GET/PATCH/DELETE /policy-sets/:id`,
//!   `POST/DELETE /policy-sets/:id/relationships/{policies,workspaces,projects,
//!   workspace-exclusions,project-exclusions}`;
//! - `GET/POST /policy-sets/:id/parameters`, `GET/PATCH/DELETE
//!   /policy-sets/:id/parameters/:param_id` (a sensitive value goes into a Secret owned by
//!   the set and is never shown).
//!
//! Only OPA is offered: a Sentinel policy or set, or one from a VCS repository, is refused
//! with 422. Rights: `list`/`get`/`create`/`update`/`delete` on `policies` and
//! `policysets` in the organization's namespace.

use axum::body::Bytes;
use terrace_crds::common::SecretKeyRef;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{Policy, PolicySet, PolicySetParameter, PolicySetSpec, PolicySpec};

use crate::index::Inner;
use crate::prelude::*;
use crate::relations::{ProjectEntry, Related, WorkspaceEntry, ids_of, linkage, unique_name};

const POLICIES: &str = "policies";
const SETS: &str = "policysets";
const NOT_YOURS: &str = "not authorized to change this policy";
const SET_NOT_YOURS: &str = "not authorized to change this policy set";
/// Key of a sensitive parameter's value in its Secret.
const PARAMETER_SECRET_KEY: &str = "value";

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "policies",
        get(list_policies).post(create_policy),
        get(show_policy).patch(update_policy).delete(remove_policy),
    )
    .route("/api/v2/policies/{id}/upload", put(upload))
    .route("/api/v2/policies/{id}/download", get(download))
    .merge(crate::read_only::org_scoped(
        "policy-sets",
        get(list_sets).post(create_set),
        get(show_set).patch(update_set).delete(remove_set),
    ))
    .route(
        "/api/v2/policy-sets/{id}/relationships/policies",
        post(relate_policies::<true>).delete(relate_policies::<false>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/workspaces",
        post(relate::<WorkspaceEntry, true, false>).delete(relate::<WorkspaceEntry, false, false>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/workspace-exclusions",
        post(relate::<WorkspaceEntry, true, true>).delete(relate::<WorkspaceEntry, false, true>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/projects",
        post(relate::<ProjectEntry, true, false>).delete(relate::<ProjectEntry, false, false>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/project-exclusions",
        post(relate::<ProjectEntry, true, true>).delete(relate::<ProjectEntry, false, true>),
    )
    .route(
        "/api/v2/policy-sets/{id}/tag-selectors",
        post(tag_selectors).delete(tag_selectors),
    )
    .route(
        "/api/v2/policy-sets/{id}/parameters",
        get(list_parameters).post(create_parameter),
    )
    .route(
        "/api/v2/policy-sets/{id}/parameters/{param}",
        get(show_parameter)
            .patch(update_parameter)
            .delete(remove_parameter),
    )
}

// ---- policies ----

/// The sets of the namespace that reference policy `p`.
fn sets_of<'a>(idx: &'a Inner, p: &'a Policy) -> impl Iterator<Item = &'a Arc<PolicySet>> + 'a {
    let ns = p.namespace().unwrap_or_default();
    let object = p.name_any();
    let id = id_of(p);
    idx.policy_sets()
        .in_namespace(&ns)
        .filter(move |s| s.references(&object, Some(&id)))
        .collect::<Vec<_>>()
        .into_iter()
}

fn render_policy(idx: &Inner, p: &Policy, org: &Organization) -> Value {
    let id = id_of(p);
    let sets: Vec<Value> = sets_of(idx, p)
        .map(|s| json!({"id": id_of(s.as_ref()), "type": "policy-sets"}))
        .collect();
    let has_code = p.spec.rego.is_some() || p.spec.rego_from.is_some();
    let enforce: Vec<Value> = has_code
        .then(|| json!({"path": format!("{}.rego", p.spec.name), "mode": p.spec.enforcement_level}))
        .into_iter()
        .collect();
    json!({
        "id": id,
        "type": "policies",
        "attributes": {
            "name": p.spec.name,
            "description": p.spec.description,
            "kind": p.spec.kind,
            "query": p.spec.query,
            "enforcement-level": p.spec.enforcement_level,
            "enforce": enforce,
            "policy-set-count": sets.len(),
            "updated-at": created_at(p),
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "policy-sets": {"data": sets},
        },
        "links": {
            "self": format!("/api/v2/policies/{id}"),
            "upload": format!("/api/v2/policies/{id}/upload"),
            "download": format!("/api/v2/policies/{id}/download"),
        },
    })
}

/// One `enforce` entry (TFE's older way of giving the level).
#[derive(Debug, Default, Deserialize)]
struct Enforce {
    #[serde(default)]
    mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct PolicyAttributes {
    name: Option<String>,
    description: Option<String>,
    kind: Option<String>,
    query: Option<String>,
    enforcement_level: Option<String>,
    #[serde(default)]
    enforce: Vec<Enforce>,
}

impl Typed for PolicyAttributes {
    const TYPE: &'static str = "policies";
}

/// 422 unless `kind` is OPA's (absent reads as `opa`).
fn opa_only(kind: Option<&str>) -> Result<(), ApiError> {
    match kind {
        None | Some("opa") => Ok(()),
        Some(k) => Err(ApiError::invalid_attribute(
            "kind",
            format!("kind {k:?} is not offered: terrace evaluates OPA policies (kind opa)"),
        )),
    }
}

/// The enforcement level an OPA policy asks for (`enforcement-level`, else the mode of
/// its first `enforce` entry), checked; None when neither is given.
fn level_of(a: &PolicyAttributes) -> Result<Option<String>, ApiError> {
    let given = a
        .enforcement_level
        .clone()
        .or_else(|| a.enforce.first().and_then(|e| e.mode.clone()));
    match given.as_deref() {
        None => Ok(None),
        Some(l @ ("advisory" | "mandatory")) => Ok(Some(l.to_owned())),
        Some(l) => Err(ApiError::invalid_attribute(
            "enforcement-level",
            format!("enforcement level {l:?} is not one of an OPA policy's: advisory, mandatory"),
        )),
    }
}

fn checked_query(q: &str) -> Result<String, ApiError> {
    let q = q.trim();
    terrace_crds::policy::check_query(q).map_err(|e| ApiError::invalid_attribute("query", e))?;
    Ok(q.to_owned())
}

fn checked_policy_name(
    idx: &Inner,
    ns: &str,
    name: &str,
    this: Option<&str>,
) -> Result<String, ApiError> {
    let name = unique_name(name, |n| {
        idx.policies().in_namespace(ns).any(|p| {
            p.spec.name.eq_ignore_ascii_case(n) && Some(id_of(p.as_ref()).as_str()) != this
        })
    })?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(ApiError::invalid_attribute(
            "name",
            "name can only contain letters, numbers, dashes, underscores and dots",
        ));
    }
    Ok(name)
}

async fn list_policies(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    q.supported_filters(&["filter[kind]"])?;
    let mut all = state.listable::<Policy>(&o.caller, &o.org).await?;
    if let Some(text) = q.non_empty("search[name]") {
        let text = text.to_ascii_lowercase();
        all.retain(|p| p.spec.name.to_ascii_lowercase().contains(&text));
    }
    if let Some(kind) = q.non_empty("filter[kind]") {
        all.retain(|p| p.spec.kind == kind);
    }
    all.sort_by(|a, b| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name));
    let idx = state.index.read();
    let base = format!("/api/v2/organizations/{}/policies", o.org.tfe_name());
    Ok(list(&base, page, &all, |p| render_policy(&idx, p, &o.org)))
}

async fn show_policy(State(state): State<AppState>, f: Found<Policy>) -> Result<Doc, ApiError> {
    Ok(Doc::ok(render_policy(
        &state.index.read(),
        &f.at.obj,
        &f.at.org,
    )))
}

async fn create_policy(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<PolicyAttributes>>,
) -> Result<Doc, ApiError> {
    state
        .require_or_403(
            &o.caller,
            &o.check("create", POLICIES),
            "not authorized to create policies in this organization",
        )
        .await?;
    let a = doc.checked()?.attributes;
    opa_only(a.kind.as_deref())?;
    let ns = o.ns().to_owned();
    let name = a
        .name
        .as_deref()
        .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
    let name = checked_policy_name(&state.index.read(), &ns, name, None)?;
    let query = checked_query(
        a.query
            .as_deref()
            .ok_or_else(|| ApiError::invalid_attribute("query", "an OPA policy needs a query"))?,
    )?;
    let level = level_of(&a)?.ok_or_else(|| {
        ApiError::invalid_attribute(
            "enforcement-level",
            "an enforcement level (advisory or mandatory) is required",
        )
    })?;
    let id = new_id(IdKind::Policy);
    let policy = Policy {
        metadata: write::new_meta(&id, &ns, o.org.name_any(), &[]),
        spec: PolicySpec {
            name,
            description: a.description,
            kind: "opa".to_owned(),
            query,
            enforcement_level: level,
            rego: None,
            rego_from: None,
        },
        status: None,
    };
    let created = write::create(&state, &ns, &policy).await?;
    Ok(Doc::created(render_policy(
        &state.index.read(),
        &created,
        &o.org,
    )))
}

async fn update_policy(
    State(state): State<AppState>,
    f: Found<Policy>,
    JsonApi(doc): JsonApi<Document<PolicyAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let a = doc.checked()?.attributes;
    opa_only(a.kind.as_deref())?;
    let name = a
        .name
        .as_deref()
        .map(|n| checked_policy_name(&state.index.read(), &f.at.ns, n, Some(&f.at.id())))
        .transpose()?;
    let query = a.query.as_deref().map(checked_query).transpose()?;
    let level = level_of(&a)?;
    let updated =
        f.at.change_spec(&state, |p| {
            if let Some(n) = &name {
                p.name.clone_from(n);
            }
            if a.description.is_some() {
                p.description.clone_from(&a.description);
            }
            if let Some(q) = &query {
                p.query.clone_from(q);
            }
            if let Some(l) = &level {
                p.enforcement_level.clone_from(l);
            }
            Ok(())
        })
        .await?;
    Ok(Doc::ok(render_policy(
        &state.index.read(),
        &updated,
        &f.at.org,
    )))
}

async fn remove_policy(
    State(state): State<AppState>,
    f: Found<Policy>,
) -> Result<Response, ApiError> {
    f.require(&state, "delete", NOT_YOURS).await?;
    // As in TFE, a deleted policy leaves the sets that named it (a set that still names a
    // missing policy is not Ready, and its checks error).
    let object = f.at.obj.name_any();
    let id = f.at.id();
    let sets: Vec<Arc<PolicySet>> = sets_of(&state.index.read(), &f.at.obj).cloned().collect();
    for set in sets {
        let at = Located {
            obj: set,
            org: f.at.org.clone(),
            ns: f.at.ns.clone(),
        };
        at.change_spec(&state, |s| {
            s.policy_refs.retain(|r| *r != object && *r != id);
            Ok(())
        })
        .await?;
    }
    write::delete_if_present(&state, f.at.obj.as_ref()).await?;
    Ok(no_content())
}

/// `PUT /policies/:id/upload`: the policy's Rego, compiled first (422 with the compiler's
/// words when it does not compile, or is empty).
async fn upload(
    State(state): State<AppState>,
    f: Found<Policy>,
    body: Bytes,
) -> Result<Response, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let rego = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::invalid("/", "the policy is not UTF-8 text"))?;
    if rego.trim().is_empty() {
        return Err(ApiError::invalid("/", "the policy is empty"));
    }
    crate::policy_eval::compile(&state.settings, &f.at.obj.spec.name, &rego)
        .await
        .map_err(|e| {
            ApiError::invalid("/", format!("the policy does not compile: {}", e.trim()))
        })?;
    f.at.change_spec(&state, |p| {
        p.rego = Some(rego.clone());
        p.rego_from = None;
        Ok(())
    })
    .await?;
    Ok(no_content())
}

/// `GET /policies/:id/download`: the stored Rego (404 before an upload; a policy whose
/// Rego lives in a ConfigMap answers it from there).
async fn download(State(state): State<AppState>, f: Found<Policy>) -> Result<Response, ApiError> {
    let rego = match (&f.at.obj.spec.rego, &f.at.obj.spec.rego_from) {
        (Some(r), _) => r.clone(),
        (None, Some(from)) => {
            use k8s_openapi::api::core::v1::ConfigMap;
            write::api::<ConfigMap>(&state, &f.at.ns)
                .get_opt(&from.name)
                .await?
                .and_then(|c| c.data)
                .and_then(|mut d| d.remove(&from.key))
                .ok_or_else(|| ApiError::not_found("the policy's ConfigMap has no such key"))?
        }
        (None, None) => return Err(ApiError::not_found("the policy has no content yet")),
    };
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
        rego,
    )
        .into_response())
}

// ---- policy sets ----

/// The Policy objects a set references, as their IDs.
fn policy_ids(idx: &Inner, s: &PolicySet) -> Vec<String> {
    let ns = s.namespace().unwrap_or_default();
    s.spec
        .policy_refs
        .iter()
        .filter_map(|r| idx.policy_referenced(&ns, r).map(|p| id_of(p.as_ref())))
        .collect()
}

fn render_set(idx: &Inner, s: &PolicySet, org: &Organization) -> Value {
    let id = id_of(s);
    let ns = s.namespace().unwrap_or_default();
    let workspaces = linkage(idx, &ns, Related::Workspace, &s.spec.workspaces)["data"].clone();
    let exclusions =
        linkage(idx, &ns, Related::Workspace, &s.spec.workspace_exclusions)["data"].clone();
    let project_exclusions =
        linkage(idx, &ns, Related::Project, &s.spec.project_exclusions)["data"].clone();
    let projects = linkage(idx, &ns, Related::Project, &s.spec.projects)["data"].clone();
    let policies: Vec<Value> = policy_ids(idx, s)
        .into_iter()
        .map(|p| json!({"id": p, "type": "policies"}))
        .collect();
    json!({
        "id": id,
        "type": "policy-sets",
        "attributes": {
            "name": s.spec.name,
            "description": s.spec.description,
            "kind": s.spec.kind,
            "global": s.spec.global,
            "overridable": s.spec.overridable,
            "agent-enabled": false,
            "policy-tool-version": "latest",
            "policies-path": Value::Null,
            "policy-update-patterns": [],
            "tag-selectors": [],
            "policy-count": s.spec.policies.len() + policies.len(),
            "workspace-count": workspaces.as_array().map_or(0, Vec::len),
            "project-count": projects.as_array().map_or(0, Vec::len),
            "created-at": created_at(s),
            "updated-at": created_at(s),
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "policies": {"data": policies},
            "workspaces": {"data": workspaces},
            "workspace-exclusions": {"data": exclusions},
            "project-exclusions": {"data": project_exclusions},
            "projects": {"data": projects},
            "newest-version": {"data": null},
            "current-version": {"data": null},
        },
        "links": {"self": format!("/api/v2/policy-sets/{id}")},
    })
}

const SET_INCLUDES: &[&str] = &[
    "policies",
    "workspaces",
    "projects",
    "workspace_exclusions",
    "project_exclusions",
    "current_version",
    "newest_version",
];

fn set_included(idx: &Inner, s: &PolicySet, org: &Organization, includes: &[String]) -> Vec<Value> {
    let ns = s.namespace().unwrap_or_default();
    let mut out = Vec::new();
    for inc in includes {
        match inc.as_str() {
            "policies" => out.extend(
                policy_ids(idx, s)
                    .iter()
                    .filter_map(|id| idx.policies().get(id))
                    .map(|p| render_policy(idx, p, org)),
            ),
            "workspaces" | "workspace_exclusions" => {
                let list = if inc == "workspaces" {
                    &s.spec.workspaces
                } else {
                    &s.spec.workspace_exclusions
                };
                out.extend(
                    list.iter()
                        .filter_map(|e| crate::relations::resolve(idx, &ns, Related::Workspace, e))
                        .filter_map(|w| idx.workspace(&w).cloned())
                        .map(|w| crate::resources::runs::workspace_brief(&w, org)),
                );
            }
            "projects" | "project_exclusions" => out.extend(
                if inc == "projects" {
                    &s.spec.projects
                } else {
                    &s.spec.project_exclusions
                }
                .iter()
                .filter_map(|e| crate::relations::resolve(idx, &ns, Related::Project, e))
                .filter_map(|p| idx.project(&p).cloned())
                .map(|p| crate::documents::project_in(idx, &p, org)),
            ),
            _ => {}
        }
    }
    out
}

async fn list_sets(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    q.supported_filters(&["filter[kind]"])?;
    let includes = q.includes(SET_INCLUDES)?;
    let mut all = state.listable::<PolicySet>(&o.caller, &o.org).await?;
    if let Some(text) = q.non_empty("search[name]") {
        let text = text.to_ascii_lowercase();
        all.retain(|s| s.spec.name.to_ascii_lowercase().contains(&text));
    }
    if let Some(kind) = q.non_empty("filter[kind]") {
        all.retain(|s| s.spec.kind == kind);
    }
    all.sort_by(|a, b| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name));
    let idx = state.index.read();
    let base = format!("/api/v2/organizations/{}/policy-sets", o.org.tfe_name());
    let mut doc = list(&base, page, &all, |s| render_set(&idx, s, &o.org));
    if !includes.is_empty() {
        let included: Vec<Value> = crate::render::page_slice(&all, page)
            .iter()
            .flat_map(|s| set_included(&idx, s, &o.org, &includes))
            .collect();
        doc.1["included"] = json!(included);
    }
    Ok(doc)
}

async fn show_set(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let includes = q.includes(SET_INCLUDES)?;
    let idx = state.index.read();
    let mut doc = json!({"data": render_set(&idx, &f.at.obj, &f.at.org)});
    if !includes.is_empty() {
        doc["included"] = json!(set_included(&idx, &f.at.obj, &f.at.org, &includes));
    }
    Ok(Doc(StatusCode::OK, doc))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SetAttributes {
    name: Option<String>,
    description: Option<String>,
    kind: Option<String>,
    global: Option<bool>,
    overridable: Option<bool>,
    agent_enabled: Option<bool>,
    policy_tool_version: Option<String>,
    policies_path: Option<String>,
    vcs_repo: Option<Value>,
    #[serde(default)]
    policy_update_patterns: Vec<String>,
    /// TFE's tag selectors (a beta): refused, never dropped.
    #[serde(default)]
    tag_selectors: Option<Value>,
}

impl Typed for SetAttributes {
    const TYPE: &'static str = "policy-sets";
}

/// Entries of a policies relationship.
pub struct PolicyEntry;
impl Typed for PolicyEntry {
    const TYPE: &'static str = "policies";
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SetRelationships {
    policies: Option<ToMany<PolicyEntry>>,
    workspaces: Option<ToMany<WorkspaceEntry>>,
    workspace_exclusions: Option<ToMany<WorkspaceEntry>>,
    project_exclusions: Option<ToMany<ProjectEntry>>,
    projects: Option<ToMany<ProjectEntry>>,
}

/// Why a set's tag selectors are refused.
const TAG_SELECTORS_REFUSED: &str = "tag selectors of policy sets are not offered: apply the set to workspaces, projects or globally (and exclude workspaces or projects) instead";

/// `POST`/`DELETE /policy-sets/:id/tag-selectors` (TFE's beta): 422, as on create and
/// update, after the set is found and the caller may change it.
async fn tag_selectors(
    State(state): State<AppState>,
    f: Found<PolicySet>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    Err(ApiError::invalid("/data", TAG_SELECTORS_REFUSED))
}

/// 422 for what a set asks that terrace does not do (Sentinel, VCS-backed sets, agents,
/// tag selectors).
fn offered(a: &SetAttributes) -> Result<(), ApiError> {
    opa_only(a.kind.as_deref())?;
    let refuse = |attr: &str, why: &str| Err(ApiError::invalid_attribute(attr, why.to_owned()));
    if a.vcs_repo.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse(
            "vcs-repo",
            "policy sets from VCS repositories are not offered: keep them in Git as PolicySet objects (GitOps)",
        );
    }
    if a.policies_path.as_deref().is_some_and(|p| !p.is_empty()) {
        return refuse(
            "policies-path",
            "policies-path applies to VCS-backed sets, which are not offered",
        );
    }
    if a.agent_enabled == Some(true) {
        return refuse(
            "agent-enabled",
            "policies are evaluated by terrace itself, not by agents",
        );
    }
    if a.policy_tool_version
        .as_deref()
        .is_some_and(|v| v != "latest")
    {
        return refuse(
            "policy-tool-version",
            "terrace evaluates with its built-in OPA interpreter: only \"latest\" is accepted",
        );
    }
    let no_selectors = match &a.tag_selectors {
        None | Some(Value::Null) => true,
        Some(Value::Array(list)) => list.is_empty(),
        Some(_) => false,
    };
    if !no_selectors {
        return refuse("tag-selectors", TAG_SELECTORS_REFUSED);
    }
    if !a.policy_update_patterns.is_empty() {
        return refuse(
            "policy-update-patterns",
            "policy update patterns apply to VCS-backed sets, which are not offered",
        );
    }
    Ok(())
}

/// The Policy object names a request's policies relationship names (IDs of the
/// organization's policies); 422 for an entry that is not one.
fn policy_objects(
    idx: &Inner,
    ns: &str,
    pointer: &str,
    given: ToMany<PolicyEntry>,
) -> Result<Vec<String>, ApiError> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, e) in given.entries.iter().enumerate() {
        if e.kind.as_deref() != Some(PolicyEntry::TYPE) {
            errors.push(FieldError::new(
                format!("{pointer}/{i}/type"),
                "type must be \"policies\"",
            ));
            continue;
        }
        let id = e.id.as_deref().unwrap_or_default();
        match idx
            .policies()
            .get(id)
            .filter(|p| p.namespace().as_deref() == Some(ns))
        {
            Some(p) => {
                let name = p.name_any();
                if !out.contains(&name) {
                    out.push(name);
                }
            }
            None => errors.push(FieldError::new(
                format!("{pointer}/{i}/id"),
                format!("{id:?} not found in this organization"),
            )),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(ApiError::Invalid(errors))
    }
}

fn checked_set_name(
    idx: &Inner,
    ns: &str,
    name: &str,
    this: Option<&str>,
) -> Result<String, ApiError> {
    let name = unique_name(name, |n| {
        idx.policy_sets().in_namespace(ns).any(|s| {
            s.spec.name.eq_ignore_ascii_case(n) && Some(id_of(s.as_ref()).as_str()) != this
        })
    })?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
    {
        return Err(ApiError::invalid_attribute(
            "name",
            "name can only contain letters, numbers, dashes and underscores",
        ));
    }
    Ok(name)
}

async fn create_set(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<SetAttributes, SetRelationships>>,
) -> Result<Doc, ApiError> {
    state
        .require_or_403(
            &o.caller,
            &o.check("create", SETS),
            "not authorized to create policy sets in this organization",
        )
        .await?;
    let data = doc.checked()?;
    offered(&data.attributes)?;
    let ns = o.ns().to_owned();
    let spec = {
        let idx = state.index.read();
        let a = data.attributes;
        let r = data.relationships;
        let name = a
            .name
            .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
        let rel = "/data/relationships";
        PolicySetSpec {
            name: checked_set_name(&idx, &ns, &name, None)?,
            description: a.description,
            kind: "opa".to_owned(),
            overridable: a.overridable.unwrap_or(false),
            global: a.global.unwrap_or(false),
            workspaces: r
                .workspaces
                .map(|w| ids_of(&idx, &ns, &format!("{rel}/workspaces/data"), w))
                .transpose()?
                .unwrap_or_default(),
            projects: r
                .projects
                .map(|p| ids_of(&idx, &ns, &format!("{rel}/projects/data"), p))
                .transpose()?
                .unwrap_or_default(),
            workspace_exclusions: r
                .workspace_exclusions
                .map(|w| ids_of(&idx, &ns, &format!("{rel}/workspace-exclusions/data"), w))
                .transpose()?
                .unwrap_or_default(),
            project_exclusions: r
                .project_exclusions
                .map(|p| ids_of(&idx, &ns, &format!("{rel}/project-exclusions/data"), p))
                .transpose()?
                .unwrap_or_default(),
            policy_refs: r
                .policies
                .map(|p| policy_objects(&idx, &ns, &format!("{rel}/policies/data"), p))
                .transpose()?
                .unwrap_or_default(),
            policies: Vec::new(),
            parameters: Vec::new(),
        }
    };
    let id = new_id(IdKind::PolicySet);
    let set = PolicySet {
        metadata: write::new_meta(&id, &ns, o.org.name_any(), &[]),
        spec,
        status: None,
    };
    let created = write::create(&state, &ns, &set).await?;
    Ok(Doc::created(render_set(
        &state.index.read(),
        &created,
        &o.org,
    )))
}

async fn update_set(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    JsonApi(doc): JsonApi<Document<SetAttributes, SetRelationships>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let data = doc.checked()?;
    offered(&data.attributes)?;
    let ns = f.at.ns.clone();
    let (name, workspaces, projects, exclusions, project_exclusions) = {
        let idx = state.index.read();
        let r = data.relationships;
        let rel = "/data/relationships";
        (
            data.attributes
                .name
                .as_deref()
                .map(|n| checked_set_name(&idx, &ns, n, Some(&f.at.id())))
                .transpose()?,
            r.workspaces
                .map(|w| ids_of(&idx, &ns, &format!("{rel}/workspaces/data"), w))
                .transpose()?,
            r.projects
                .map(|p| ids_of(&idx, &ns, &format!("{rel}/projects/data"), p))
                .transpose()?,
            r.workspace_exclusions
                .map(|w| ids_of(&idx, &ns, &format!("{rel}/workspace-exclusions/data"), w))
                .transpose()?,
            r.project_exclusions
                .map(|p| ids_of(&idx, &ns, &format!("{rel}/project-exclusions/data"), p))
                .transpose()?,
        )
    };
    let a = data.attributes;
    let updated =
        f.at.change_spec(&state, |s| {
            if let Some(n) = &name {
                s.name.clone_from(n);
            }
            if a.description.is_some() {
                s.description.clone_from(&a.description);
            }
            if let Some(g) = a.global {
                s.global = g;
            }
            if let Some(o) = a.overridable {
                s.overridable = o;
            }
            if let Some(w) = &workspaces {
                s.workspaces.clone_from(w);
            }
            if let Some(p) = &projects {
                s.projects.clone_from(p);
            }
            if let Some(e) = &exclusions {
                s.workspace_exclusions.clone_from(e);
            }
            if let Some(e) = &project_exclusions {
                s.project_exclusions.clone_from(e);
            }
            Ok(())
        })
        .await?;
    Ok(Doc::ok(render_set(
        &state.index.read(),
        &updated,
        &f.at.org,
    )))
}

async fn remove_set(
    State(state): State<AppState>,
    f: Found<PolicySet>,
) -> Result<Response, ApiError> {
    f.require(&state, "delete", SET_NOT_YOURS).await?;
    // The Secrets of its sensitive parameters are owned by it: the garbage collector
    // takes them.
    write::delete_if_present(&state, f.at.obj.as_ref()).await?;
    Ok(no_content())
}

/// `POST` (add) or `DELETE` (remove) of `/policy-sets/:id/relationships/policies`.
async fn relate_policies<const ADD: bool>(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    JsonApi(body): JsonApi<ToMany<PolicyEntry>>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let objects = policy_objects(&state.index.read(), &f.at.ns, "/data", body)?;
    let ids: Vec<String> = {
        let idx = state.index.read();
        objects
            .iter()
            .filter_map(|o| {
                idx.policies()
                    .in_namespace(&f.at.ns)
                    .find(|p| p.name_any() == *o)
            })
            .map(|p| id_of(p.as_ref()))
            .collect()
    };
    f.at.change_spec(&state, |s| {
        if ADD {
            for o in &objects {
                if !s.policy_refs.contains(o) {
                    s.policy_refs.push(o.clone());
                }
            }
        } else {
            s.policy_refs
                .retain(|r| !objects.contains(r) && !ids.contains(r));
        }
        Ok(())
    })
    .await?;
    Ok(no_content())
}

/// `POST` (add) or `DELETE` (remove) of `/policy-sets/:id/relationships/{workspaces,
/// projects,workspace-exclusions,project-exclusions}` (`EXCLUDE`: the exclusions).
async fn relate<T: Typed + Send + Sync + 'static, const ADD: bool, const EXCLUDE: bool>(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    JsonApi(body): JsonApi<ToMany<T>>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let projects = T::TYPE == ProjectEntry::TYPE;
    let kind = if projects {
        Related::Project
    } else {
        Related::Workspace
    };
    let ids = ids_of(&state.index.read(), &f.at.ns, "/data", body)?;
    let ns = f.at.ns.clone();
    f.at.change_spec(&state, |s| {
        let list = match (projects, EXCLUDE) {
            (true, true) => &mut s.project_exclusions,
            (true, false) => &mut s.projects,
            (false, true) => &mut s.workspace_exclusions,
            (false, false) => &mut s.workspaces,
        };
        if ADD {
            for id in &ids {
                if !list.iter().any(|e| e == id) {
                    list.push(id.clone());
                }
            }
        } else {
            let idx = state.index.read();
            list.retain(|e| {
                crate::relations::resolve(&idx, &ns, kind, e).is_none_or(|id| !ids.contains(&id))
            });
        }
        Ok(())
    })
    .await?;
    Ok(no_content())
}

// ---- parameters ----

fn render_parameter(set_id: &str, p: &PolicySetParameter) -> Value {
    let id = p.id_in(set_id);
    json!({
        "id": id,
        "type": "vars",
        "attributes": {
            "key": p.key,
            "value": if p.sensitive { json!("") } else { json!(p.value.clone().unwrap_or_default()) },
            "category": "policy-set",
            "sensitive": p.sensitive,
        },
        "relationships": {
            "configurable": {
                "data": {"id": set_id, "type": "policy-sets"},
                "links": {"related": format!("/api/v2/policy-sets/{set_id}")},
            },
        },
        "links": {"self": format!("/api/v2/policy-sets/{set_id}/parameters/{id}")},
    })
}

#[derive(Debug, Default, Deserialize)]
struct ParameterAttributes {
    key: Option<String>,
    value: Option<String>,
    category: Option<String>,
    sensitive: Option<bool>,
}

impl Typed for ParameterAttributes {
    const TYPE: &'static str = "vars";
}

fn checked_key(key: &str) -> Result<String, ApiError> {
    let key = key.trim();
    let ok = !key.is_empty()
        && key.len() <= 128
        && key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(key.to_owned())
    } else {
        Err(ApiError::invalid_attribute(
            "key",
            "key must start with a letter or underscore and hold only letters, digits and underscores (at most 128)",
        ))
    }
}

fn checked_category(c: Option<&str>) -> Result<(), ApiError> {
    match c {
        None | Some("policy-set") => Ok(()),
        Some(other) => Err(ApiError::invalid_attribute(
            "category",
            format!("category {other:?} is not a policy set parameter's: policy-set"),
        )),
    }
}

fn parameter_in<'a>(
    set: &'a PolicySet,
    set_id: &str,
    param: &str,
) -> Result<&'a PolicySetParameter, ApiError> {
    set.spec
        .parameters
        .iter()
        .find(|p| p.id_in(set_id) == param)
        .ok_or_else(|| ApiError::not_found("parameter not found"))
}

fn key_taken(s: &PolicySetSpec, set_id: &str, key: &str, this: &str) -> Result<(), ApiError> {
    if s.parameters
        .iter()
        .any(|p| p.key == key && p.id_in(set_id) != this)
    {
        return Err(ApiError::invalid_attribute(
            "key",
            "Key has already been taken",
        ));
    }
    Ok(())
}

fn secret_name(set_object: &str, param_id: &str) -> String {
    format!("{set_object}-{}", param_id.to_ascii_lowercase())
}

async fn list_parameters(f: Found<PolicySet>, q: QueryParams) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let id = f.at.id();
    let params: Vec<&PolicySetParameter> = f.at.obj.spec.parameters.iter().collect();
    Ok(list(
        &format!("/api/v2/policy-sets/{id}/parameters"),
        page,
        &params,
        |p| render_parameter(&id, p),
    ))
}

async fn show_parameter(
    f: Found<PolicySet>,
    Path((_, param)): Path<(String, String)>,
) -> Result<Doc, ApiError> {
    let id = f.at.id();
    Ok(Doc::ok(render_parameter(
        &id,
        parameter_in(&f.at.obj, &id, &param)?,
    )))
}

/// The parameter as the set keeps it (a sensitive value by reference to its Secret).
fn stored(
    id: &str,
    set_object: &str,
    key: String,
    value: Option<String>,
    sensitive: bool,
) -> PolicySetParameter {
    PolicySetParameter {
        id: Some(id.to_owned()),
        key,
        value: if sensitive {
            None
        } else {
            Some(value.unwrap_or_default())
        },
        value_from: sensitive.then(|| SecretKeyRef {
            name: secret_name(set_object, id),
            key: PARAMETER_SECRET_KEY.to_owned(),
        }),
        sensitive,
    }
}

async fn create_parameter(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    JsonApi(doc): JsonApi<Document<ParameterAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let a = doc.checked()?.attributes;
    checked_category(a.category.as_deref())?;
    let key = checked_key(
        a.key
            .as_deref()
            .ok_or_else(|| ApiError::invalid_attribute("key", "Key can't be blank"))?,
    )?;
    let set_id = f.at.id();
    let param_id = new_id(IdKind::WorkspaceVariable);
    let sensitive = a.sensitive.unwrap_or(false);
    let param = stored(
        &param_id,
        &f.at.obj.name_any(),
        key,
        a.value.clone(),
        sensitive,
    );
    key_taken(&f.at.obj.spec, &set_id, &param.key, &param_id)?;
    if sensitive {
        let name = secret_name(&f.at.obj.name_any(), &param_id);
        let value = a.value.unwrap_or_default();
        write::owned_secret(
            &state,
            f.at.obj.as_ref(),
            &name,
            PARAMETER_SECRET_KEY,
            &value,
        )
        .await?;
    }
    f.at.change_spec(&state, |s| {
        key_taken(s, &set_id, &param.key, &param_id)?;
        s.parameters.push(param.clone());
        Ok(())
    })
    .await?;
    Ok(Doc::created(render_parameter(&set_id, &param)))
}

async fn update_parameter(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    Path((_, param)): Path<(String, String)>,
    JsonApi(doc): JsonApi<Document<ParameterAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let a = doc.checked()?.attributes;
    checked_category(a.category.as_deref())?;
    let set_id = f.at.id();
    let current = parameter_in(&f.at.obj, &set_id, &param)?.clone();
    let key = a
        .key
        .as_deref()
        .map(checked_key)
        .transpose()?
        .unwrap_or(current.key.clone());
    let sensitive = match a.sensitive {
        Some(false) if current.sensitive => {
            return Err(ApiError::invalid_attribute(
                "sensitive",
                "a sensitive parameter cannot be made non-sensitive",
            ));
        }
        Some(s) => s,
        None => current.sensitive,
    };
    let value = a.value.clone().or_else(|| current.value.clone());
    let next = stored(&param, &f.at.obj.name_any(), key, value, sensitive);
    key_taken(&f.at.obj.spec, &set_id, &next.key, &param)?;
    // A new sensitive value (or a value made sensitive) goes into the Secret.
    if sensitive && (a.value.is_some() || !current.sensitive) {
        let name = secret_name(&f.at.obj.name_any(), &param);
        let value = a
            .value
            .clone()
            .or_else(|| current.value.clone())
            .unwrap_or_default();
        write::owned_secret(
            &state,
            f.at.obj.as_ref(),
            &name,
            PARAMETER_SECRET_KEY,
            &value,
        )
        .await?;
    }
    f.at.change_spec(&state, |s| {
        key_taken(s, &set_id, &next.key, &param)?;
        let slot = s
            .parameters
            .iter_mut()
            .find(|p| p.id_in(&set_id) == param)
            .ok_or_else(|| ApiError::not_found("parameter not found"))?;
        *slot = next.clone();
        Ok(())
    })
    .await?;
    Ok(Doc::ok(render_parameter(&set_id, &next)))
}

async fn remove_parameter(
    State(state): State<AppState>,
    f: Found<PolicySet>,
    Path((_, param)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    let set_id = f.at.id();
    let current = parameter_in(&f.at.obj, &set_id, &param)?.clone();
    f.at.change_spec(&state, |s| {
        s.parameters.retain(|p| p.id_in(&set_id) != param);
        Ok(())
    })
    .await?;
    if let Some(r) = &current.value_from
        && r.name == secret_name(&f.at.obj.name_any(), &param)
    {
        write::delete_owned_secret(&state, &f.at.ns, &r.name).await;
    }
    Ok(no_content())
}

#[cfg(test)]
mod tests;
