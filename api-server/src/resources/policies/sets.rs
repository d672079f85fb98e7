//! Policy sets: list, show, create, update, delete, and their relationships (policies,
//! workspaces, projects and their exclusions).

use super::*;

/// The Policy objects a set references, as their IDs.
pub(super) fn policy_ids(idx: &Inner, s: &PolicySet) -> Vec<String> {
    let ns = s.namespace().unwrap_or_default();
    s.spec
        .policy_refs
        .iter()
        .filter_map(|r| idx.policy_referenced(&ns, r).map(|p| id_of(p.as_ref())))
        .collect()
}

pub(super) fn render_set(idx: &Inner, s: &PolicySet, org: &Organization) -> Value {
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

pub(super) const SET_INCLUDES: &[&str] = &[
    "policies",
    "workspaces",
    "projects",
    "workspace_exclusions",
    "project_exclusions",
    "current_version",
    "newest_version",
];

pub(super) fn set_included(idx: &Inner, s: &PolicySet, org: &Organization, out: &mut Included) {
    let ns = s.namespace().unwrap_or_default();
    for inc in out.names().to_vec() {
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
}

pub(super) async fn list_sets(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut l = Listing::<PolicySet>::read(
        &state,
        &o,
        &q,
        "policy-sets",
        &["filter[kind]"],
        SET_INCLUDES,
    )
    .await?;
    l.search(&q, "search[name]", |s| &s.spec.name);
    if let Some(kind) = q.non_empty("filter[kind]") {
        l.items.retain(|s| s.spec.kind == kind);
    }
    l.items
        .sort_by(|a, b| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name));
    Ok(l.answer_shown(&state.index.read(), &o.org))
}

impl Shown for PolicySet {
    const INCLUDES: &'static [&'static str] = SET_INCLUDES;
    fn data(&self, idx: &Inner, org: &Organization) -> Value {
        render_set(idx, self, org)
    }
    fn include(&self, idx: &Inner, org: &Organization, inc: &mut Included) {
        set_included(idx, self, org, inc);
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct SetAttributes {
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
pub(super) struct SetRelationships {
    policies: Option<ToMany<PolicyEntry>>,
    workspaces: Option<ToMany<WorkspaceEntry>>,
    workspace_exclusions: Option<ToMany<WorkspaceEntry>>,
    project_exclusions: Option<ToMany<ProjectEntry>>,
    projects: Option<ToMany<ProjectEntry>>,
}

/// Why a set's tag selectors are refused.
pub(super) const TAG_SELECTORS_REFUSED: &str = "tag selectors of policy sets are not offered: apply the set to workspaces, projects or globally (and exclude workspaces or projects) instead";

/// `POST`/`DELETE /policy-sets/:id/tag-selectors` (TFE's beta): 422, as on create and
/// update, after the set is found and the caller may change it.
pub(super) async fn tag_selectors(
    State(state): State<AppState>,
    f: Found<PolicySet>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", SET_NOT_YOURS).await?;
    Err(ApiError::invalid("/data", TAG_SELECTORS_REFUSED))
}

/// 422 for what a set asks that terrace does not do (Sentinel, VCS-backed sets, agents,
/// tag selectors).
pub(super) fn offered(a: &SetAttributes) -> Result<(), ApiError> {
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
pub(super) fn policy_objects(
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

pub(super) fn checked_set_name(
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

pub(super) async fn create_set(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<SetAttributes, SetRelationships>>,
) -> Result<Doc, ApiError> {
    o.require_in_org(
        &state,
        "create",
        SETS,
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
        PolicySetSpec {
            name: checked_set_name(&idx, &ns, &name, None)?,
            description: a.description,
            kind: "opa".to_owned(),
            overridable: a.overridable.unwrap_or(false),
            global: a.global.unwrap_or(false),
            workspaces: related_ids(&idx, &ns, "workspaces", r.workspaces)?.unwrap_or_default(),
            projects: related_ids(&idx, &ns, "projects", r.projects)?.unwrap_or_default(),
            workspace_exclusions: related_ids(
                &idx,
                &ns,
                "workspace-exclusions",
                r.workspace_exclusions,
            )?
            .unwrap_or_default(),
            project_exclusions: related_ids(&idx, &ns, "project-exclusions", r.project_exclusions)?
                .unwrap_or_default(),
            policy_refs: r
                .policies
                .map(|p| policy_objects(&idx, &ns, "/data/relationships/policies/data", p))
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

pub(super) async fn update_set(
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
        (
            data.attributes
                .name
                .as_deref()
                .map(|n| checked_set_name(&idx, &ns, n, Some(&f.at.id())))
                .transpose()?,
            related_ids(&idx, &ns, "workspaces", r.workspaces)?,
            related_ids(&idx, &ns, "projects", r.projects)?,
            related_ids(&idx, &ns, "workspace-exclusions", r.workspace_exclusions)?,
            related_ids(&idx, &ns, "project-exclusions", r.project_exclusions)?,
        )
    };
    let a = data.attributes;
    let updated =
        f.at.change_spec(&state, |s| {
            write::given(&mut s.name, name.as_ref());
            write::given_some(&mut s.description, &a.description);
            write::given(&mut s.global, a.global.as_ref());
            write::given(&mut s.overridable, a.overridable.as_ref());
            write::given(&mut s.workspaces, workspaces.as_ref());
            write::given(&mut s.projects, projects.as_ref());
            write::given(&mut s.workspace_exclusions, exclusions.as_ref());
            write::given(&mut s.project_exclusions, project_exclusions.as_ref());
            Ok(())
        })
        .await?;
    Ok(Doc::ok(render_set(
        &state.index.read(),
        &updated,
        &f.at.org,
    )))
}

pub(super) async fn remove_set(
    State(state): State<AppState>,
    f: Found<PolicySet>,
) -> Result<Response, ApiError> {
    // The Secrets of its sensitive parameters are owned by it: the garbage collector
    // takes them.
    f.delete(&state, SET_NOT_YOURS).await
}

/// `POST` (add) or `DELETE` (remove) of `/policy-sets/:id/relationships/policies`.
pub(super) async fn relate_policies<const ADD: bool>(
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
pub(super) async fn relate<
    T: Typed + Send + Sync + 'static,
    const ADD: bool,
    const EXCLUDE: bool,
>(
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
        crate::relations::relate_ids(list, &ids, ADD, (&state.index.read(), &ns, kind));
        Ok(())
    })
    .await?;
    Ok(no_content())
}

// ---- parameters ----
