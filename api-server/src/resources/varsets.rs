//! Variable sets (TFE's Variable Sets API, JSON:API type `varsets`): VariableSet objects
//! in the organization's namespace, declared with kubectl or GitOps or managed here.
//!
//! - `GET/POST /organizations/:org/varsets`, `GET/PATCH/DELETE /varsets/:id`;
//! - `GET/POST /varsets/:id/relationships/vars`, `PATCH/DELETE
//!   /varsets/:id/relationships/vars/:var_id` (the variables, with the rules of workspace
//!   variables; a sensitive value goes into a Secret owned by the set and is never shown);
//! - `POST/DELETE /varsets/:id/relationships/workspaces` and `…/projects` (where the set
//!   applies, besides `global`);
//! - `GET /workspaces/:id/varsets`, `GET /projects/:id/varsets`: the sets applied there.
//!
//! Rights: `list`/`get`/`create`/`update`/`delete` on `variablesets` in the
//! organization's namespace. Which variable a run gets is the operator's, by TFE's
//! precedence ([`terrace_crds::rules::winning_variables`]).

use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::VARIABLE_SECRET_KEY;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::Named;
use terrace_crds::rules::new_secret_value;
use terrace_crds::{
    Project, VariableSet, VariableSetSpec, VariableSetVariable, Workspace, WorkspaceVariableSpec,
};

use crate::documents::variables::{VarAttributes, checked_spec, ptr};
use crate::index::Inner;
use crate::prelude::*;
use crate::relations::{self, ProjectEntry, Related, WorkspaceEntry, ids_of, linkage, unique_name};

/// The RBAC resource of variable sets.
const RESOURCE: &str = "variablesets";

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "varsets",
        get(list_sets).post(create),
        get(show).patch(update).delete(remove),
    )
    .route(
        "/api/v2/varsets/{id}/relationships/vars",
        get(list_vars).post(create_var),
    )
    .route(
        "/api/v2/varsets/{id}/relationships/vars/{var}",
        get(show_var).patch(update_var).delete(remove_var),
    )
    .route(
        "/api/v2/varsets/{id}/relationships/workspaces",
        post(relate::<WorkspaceEntry, true>).delete(relate::<WorkspaceEntry, false>),
    )
    .route(
        "/api/v2/varsets/{id}/relationships/projects",
        post(relate::<ProjectEntry, true>).delete(relate::<ProjectEntry, false>),
    )
    .route("/api/v2/workspaces/{id}/varsets", get(of_workspace))
    .route("/api/v2/projects/{id}/varsets", get(of_project))
}

/// The kind of a set's list: projects or workspaces.
fn kind(projects: bool) -> Related {
    if projects {
        Related::Project
    } else {
        Related::Workspace
    }
}

/// The ID a set's entry (an ID or a name) resolves to in `ns`.
fn resolve(idx: &Inner, ns: &str, projects: bool, entry: &str) -> Option<String> {
    relations::resolve(idx, ns, kind(projects), entry)
}

/// The JSON:API `data` of a variable of set `set_id`; a sensitive value reads `null`.
fn render_var(set_id: &str, v: &VariableSetVariable) -> Value {
    let id = v.id_in(set_id);
    json!({
        "id": id,
        "type": "vars",
        "attributes": {
            "key": v.key,
            "value": if v.sensitive { Value::Null } else { json!(v.value) },
            "description": v.description,
            "category": v.category,
            "hcl": v.hcl,
            "sensitive": v.sensitive,
            // A digest of the variable (its Secret's name for a sensitive value, whose
            // every write goes to a new revision of the set).
            "version-id": as_spec(v).version_id(None),
        },
        "relationships": {"varset": {"data": {"id": set_id, "type": "varsets"}}},
        "links": {"self": format!("/api/v2/varsets/{set_id}/relationships/vars/{id}")},
    })
}

/// The JSON:API `data` of a set.
fn render(idx: &Inner, s: &VariableSet, org: &Organization) -> Value {
    let id = id_of(s);
    let ns = s.namespace().unwrap_or_default();
    let workspaces = linkage(idx, &ns, Related::Workspace, &s.spec.workspaces)["data"].clone();
    let projects = linkage(idx, &ns, Related::Project, &s.spec.projects)["data"].clone();
    let vars: Vec<Value> = s
        .spec
        .variables
        .iter()
        .map(|v| json!({"id": v.id_in(&id), "type": "vars"}))
        .collect();
    json!({
        "id": id,
        "type": "varsets",
        "attributes": {
            "name": s.spec.name,
            "description": s.spec.description,
            "global": s.spec.global,
            "priority": s.spec.priority,
            "created-at": created_at(s),
            "var-count": vars.len(),
            "workspace-count": workspaces.as_array().map_or(0, Vec::len),
            "project-count": projects.as_array().map_or(0, Vec::len),
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "parent": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "vars": {"data": vars},
            "workspaces": {"data": workspaces},
            "projects": {"data": projects},
        },
        "links": {"self": format!("/api/v2/varsets/{id}")},
    })
}

/// What `include` may name on sets.
const INCLUDES: &[&str] = &["vars", "workspaces", "projects"];

/// The `included` documents of `sets` for `includes`, each once.
fn included(
    idx: &Inner,
    sets: &[&VariableSet],
    org: &Organization,
    includes: &[String],
) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut add = |doc: Value| {
        if !out
            .iter()
            .any(|d| d["type"] == doc["type"] && d["id"] == doc["id"])
        {
            out.push(doc);
        }
    };
    for s in sets {
        let id = id_of(*s);
        let ns = s.namespace().unwrap_or_default();
        for inc in includes {
            match inc.as_str() {
                "vars" => s
                    .spec
                    .variables
                    .iter()
                    .for_each(|v| add(render_var(&id, v))),
                "workspaces" => s
                    .spec
                    .workspaces
                    .iter()
                    .filter_map(|e| resolve(idx, &ns, false, e))
                    .filter_map(|w| idx.workspace(&w).cloned())
                    .for_each(|w| add(crate::resources::runs::workspace_brief(&w, org))),
                "projects" => s
                    .spec
                    .projects
                    .iter()
                    .filter_map(|e| resolve(idx, &ns, true, e))
                    .filter_map(|p| idx.project(&p).cloned())
                    .for_each(|p| add(crate::documents::project_in(idx, &p, org))),
                _ => {}
            }
        }
    }
    out
}

fn sorted(mut sets: Vec<Arc<VariableSet>>) -> Vec<Arc<VariableSet>> {
    sets.sort_by(|a, b| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name));
    sets
}

async fn list_sets(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    q.supported_filters(&[])?;
    let includes = q.includes(INCLUDES)?;
    let mut sets = state.listable::<VariableSet>(&o.caller, &o.org).await?;
    if let Some(text) = q.non_empty("q") {
        let text = text.to_ascii_lowercase();
        sets.retain(|s| s.spec.name.to_ascii_lowercase().contains(&text));
    }
    let sets = sorted(sets);
    let idx = state.index.read();
    let base = format!("/api/v2/organizations/{}/varsets", o.org.tfe_name());
    let mut doc = list(&base, page, &sets, |s| render(&idx, s, &o.org));
    if !includes.is_empty() {
        let on_page: Vec<&VariableSet> = crate::render::page_slice(&sets, page)
            .iter()
            .map(AsRef::as_ref)
            .collect();
        doc.1["included"] = json!(included(&idx, &on_page, &o.org, &includes));
    }
    Ok(doc)
}

async fn show(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let includes = q.includes(INCLUDES)?;
    let idx = state.index.read();
    let mut doc = json!({"data": render(&idx, &f.at.obj, &f.at.org)});
    if !includes.is_empty() {
        doc["included"] = json!(included(&idx, &[f.at.obj.as_ref()], &f.at.org, &includes));
    }
    Ok(Doc(StatusCode::OK, doc))
}

/// The attributes of a set request.
#[derive(Debug, Default, Deserialize)]
struct SetAttributes {
    name: Option<String>,
    description: Option<String>,
    global: Option<bool>,
    priority: Option<bool>,
}

impl Typed for SetAttributes {
    const TYPE: &'static str = "varsets";
}

/// A set's relationships on create and update: each given replaces its list.
#[derive(Default, Deserialize)]
struct SetRelationships {
    workspaces: Option<ToMany<WorkspaceEntry>>,
    projects: Option<ToMany<ProjectEntry>>,
}

/// The name: [`unique_name`] among the organization's sets but `this`.
fn checked_name(idx: &Inner, ns: &str, name: &str, this: Option<&str>) -> Result<String, ApiError> {
    unique_name(name, |n| {
        idx.variable_sets().in_namespace(ns).any(|s| {
            s.spec.name.eq_ignore_ascii_case(n) && Some(id_of(s.as_ref()).as_str()) != this
        })
    })
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<SetAttributes, SetRelationships>>,
) -> Result<Doc, ApiError> {
    state
        .require_or_403(
            &o.caller,
            &o.check("create", RESOURCE),
            "not authorized to create variable sets in this organization",
        )
        .await?;
    let data = doc.checked()?;
    let ns = o.ns().to_owned();
    let spec = {
        let idx = state.index.read();
        let a = data.attributes;
        let name = a
            .name
            .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
        let r = data.relationships;
        VariableSetSpec {
            name: checked_name(&idx, &ns, &name, None)?,
            description: a.description,
            global: a.global.unwrap_or(false),
            priority: a.priority.unwrap_or(false),
            workspaces: r
                .workspaces
                .map(|w| ids_of(&idx, &ns, "/data/relationships/workspaces/data", w))
                .transpose()?
                .unwrap_or_default(),
            projects: r
                .projects
                .map(|p| ids_of(&idx, &ns, "/data/relationships/projects/data", p))
                .transpose()?
                .unwrap_or_default(),
            variables: Vec::new(),
        }
    };
    let id = new_id(IdKind::VariableSet);
    let set = VariableSet {
        metadata: write::new_meta(&id, &ns, o.org.name_any(), &[]),
        spec,
        status: None,
    };
    let created = write::create(&state, &ns, &set).await?;
    Ok(Doc::created(render(&state.index.read(), &created, &o.org)))
}

/// Why a caller who reads the object may not change it.
const NOT_YOURS: &str = "not authorized to change this variable set";

async fn update(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    JsonApi(doc): JsonApi<Document<SetAttributes, SetRelationships>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let data = doc.checked()?;
    let ns = f.at.ns.clone();
    let (name, workspaces, projects) = {
        let idx = state.index.read();
        let r = data.relationships;
        (
            data.attributes
                .name
                .as_deref()
                .map(|n| checked_name(&idx, &ns, n, Some(&f.at.id())))
                .transpose()?,
            r.workspaces
                .map(|w| ids_of(&idx, &ns, "/data/relationships/workspaces/data", w))
                .transpose()?,
            r.projects
                .map(|p| ids_of(&idx, &ns, "/data/relationships/projects/data", p))
                .transpose()?,
        )
    };
    let a = data.attributes;
    let updated = write::change_spec(&state, &f.at, |s| {
        if let Some(n) = &name {
            s.name.clone_from(n);
        }
        if a.description.is_some() {
            s.description.clone_from(&a.description);
        }
        if let Some(g) = a.global {
            s.global = g;
        }
        if let Some(p) = a.priority {
            s.priority = p;
        }
        if let Some(w) = &workspaces {
            s.workspaces.clone_from(w);
        }
        if let Some(p) = &projects {
            s.projects.clone_from(p);
        }
        Ok(())
    })
    .await?;
    Ok(Doc::ok(render(&state.index.read(), &updated, &f.at.org)))
}

async fn remove(
    State(state): State<AppState>,
    f: Found<VariableSet>,
) -> Result<Response, ApiError> {
    f.require(&state, "delete", NOT_YOURS).await?;
    // The Secrets of its sensitive values are owned by it: the garbage collector takes them.
    write::delete_if_present(&state, f.at.obj.as_ref()).await?;
    Ok(no_content())
}

/// `POST` (add) or `DELETE` (remove) of `/varsets/:id/relationships/{workspaces,projects}`.
async fn relate<T: Typed + Send + Sync + 'static, const ADD: bool>(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    JsonApi(body): JsonApi<ToMany<T>>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let projects = T::TYPE == "projects";
    let ids = ids_of(&state.index.read(), &f.at.ns, "/data", body)?;
    let ns = f.at.ns.clone();
    write::change_spec(&state, &f.at, |s| {
        let list = if projects {
            &mut s.projects
        } else {
            &mut s.workspaces
        };
        if ADD {
            for id in &ids {
                if !list.iter().any(|e| e == id) {
                    list.push(id.clone());
                }
            }
        } else {
            let idx = state.index.read();
            list.retain(|e| resolve(&idx, &ns, projects, e).is_none_or(|id| !ids.contains(&id)));
        }
        Ok(())
    })
    .await?;
    Ok(no_content())
}

// ---- the set's variables ----

async fn list_vars(f: Found<VariableSet>, q: QueryParams) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    let id = f.at.id();
    let vars: Vec<&VariableSetVariable> = f.at.obj.spec.variables.iter().collect();
    let page = match (q.get("page[number]"), q.get("page[size]")) {
        (None, None) => terrace_crds::rules::Page {
            number: 1,
            size: u32::try_from(vars.len().max(1)).unwrap_or(u32::MAX),
        },
        _ => q.page()?,
    };
    Ok(list(
        &format!("/api/v2/varsets/{id}/relationships/vars"),
        page,
        &vars,
        |v| render_var(&id, v),
    ))
}

fn var_in<'a>(
    set: &'a VariableSet,
    set_id: &str,
    var: &str,
) -> Result<&'a VariableSetVariable, ApiError> {
    set.spec
        .variables
        .iter()
        .find(|v| v.id_in(set_id) == var)
        .ok_or_else(|| ApiError::not_found("variable not found"))
}

async fn show_var(
    f: Found<VariableSet>,
    Path((_, var)): Path<(String, String)>,
) -> Result<Doc, ApiError> {
    let id = f.at.id();
    Ok(Doc::ok(render_var(&id, var_in(&f.at.obj, &id, &var)?)))
}

/// The workspace-variable spec a set variable stands for (for the shared rules).
fn as_spec(v: &VariableSetVariable) -> WorkspaceVariableSpec {
    WorkspaceVariableSpec {
        workspace: String::new(),
        key: v.key.clone(),
        value: v.value.clone(),
        value_from: v.value_from.clone(),
        description: v.description.clone(),
        category: v.category.clone(),
        hcl: v.hcl,
        sensitive: v.sensitive,
    }
}

/// Name of the Secret of sensitive variable `var_id` of set object `set_object`.
fn secret_name(set_object: &str, var_id: &str) -> String {
    format!("{set_object}-{}", var_id.to_ascii_lowercase())
}

/// The variable `spec` leaves, as the set keeps it (a sensitive value by reference).
fn stored(id: &str, set_object: &str, spec: WorkspaceVariableSpec) -> VariableSetVariable {
    VariableSetVariable {
        id: Some(id.to_owned()),
        value_from: spec.sensitive.then(|| SecretKeyRef {
            name: secret_name(set_object, id),
            key: VARIABLE_SECRET_KEY.to_owned(),
        }),
        key: spec.key,
        value: if spec.sensitive {
            String::new()
        } else {
            spec.value
        },
        description: spec.description,
        category: spec.category,
        hcl: spec.hcl,
        sensitive: spec.sensitive,
    }
}

/// 422 when another variable of set `s` (ID `set_id`) has `v`'s key in its category.
fn key_taken(s: &VariableSetSpec, set_id: &str, v: &VariableSetVariable) -> Result<(), ApiError> {
    let taken = s
        .variables
        .iter()
        .any(|o| o.key == v.key && o.category == v.category && o.id_in(set_id) != v.id_in(set_id));
    if taken {
        return Err(ApiError::Invalid(vec![FieldError::attribute(
            "key",
            "Key has already been taken",
        )]));
    }
    Ok(())
}

/// Writes sensitive `value` of variable `var_id` into its Secret, owned by the set.
async fn store_value(
    state: &AppState,
    set: &VariableSet,
    var_id: &str,
    value: &str,
) -> Result<(), ApiError> {
    let name = secret_name(&set.name_any(), var_id);
    write::owned_secret(state, set, &name, VARIABLE_SECRET_KEY, value).await
}

async fn create_var(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let mut errs = Vec::new();
    let input = doc.checked()?.attributes.parse(&mut errs);
    if input.key.is_none() && !errs.iter().any(|e| e.pointer == ptr("key")) {
        errs.push(FieldError::attribute("key", "Key can't be blank"));
    }
    let spec = checked_spec(&input, None, "", &mut errs);
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let set_id = f.at.id();
    let var_id = new_id(IdKind::WorkspaceVariable);
    let object = f.at.obj.name_any();
    let var = stored(&var_id, &object, spec);
    key_taken(&f.at.obj.spec, &set_id, &var)?;
    if var.sensitive {
        let value = input.value.clone().unwrap_or_default();
        store_value(&state, &f.at.obj, &var_id, &value).await?;
    }
    write::change_spec(&state, &f.at, |s| {
        key_taken(s, &set_id, &var)?;
        s.variables.push(var.clone());
        Ok(())
    })
    .await?;
    Ok(Doc::created(render_var(&set_id, &var)))
}

async fn update_var(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    Path((_, var)): Path<(String, String)>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let set_id = f.at.id();
    let current = var_in(&f.at.obj, &set_id, &var)?.clone();
    let mut errs = Vec::new();
    let input = doc.checked()?.attributes.parse(&mut errs);
    let cur_spec = as_spec(&current);
    let spec = checked_spec(&input, Some(&cur_spec), "", &mut errs);
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let object = f.at.obj.name_any();
    let next = stored(&var, &object, spec);
    key_taken(&f.at.obj.spec, &set_id, &next)?;
    if let Some(value) = new_secret_value(
        next.sensitive,
        input.value.as_deref(),
        current.sensitive,
        &current.value,
    ) {
        store_value(&state, &f.at.obj, &var, &value).await?;
    }
    write::change_spec(&state, &f.at, |s| {
        key_taken(s, &set_id, &next)?;
        let slot = s
            .variables
            .iter_mut()
            .find(|v| v.id_in(&set_id) == var)
            .ok_or_else(|| ApiError::not_found("variable not found"))?;
        *slot = next.clone();
        Ok(())
    })
    .await?;
    Ok(Doc::ok(render_var(&set_id, &next)))
}

async fn remove_var(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    Path((_, var)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let set_id = f.at.id();
    let current = var_in(&f.at.obj, &set_id, &var)?.clone();
    write::change_spec(&state, &f.at, |s| {
        s.variables.retain(|v| v.id_in(&set_id) != var);
        Ok(())
    })
    .await?;
    if let Some(r) = &current.value_from
        && r.name == secret_name(&f.at.obj.name_any(), &var)
    {
        write::delete_owned_secret(&state, &f.at.ns, &r.name).await;
    }
    Ok(no_content())
}

// ---- the sets applied to a workspace or project ----

/// Whether set `s` applies to workspace `w` (globally, through its project, or named).
fn applies_to(idx: &Inner, s: &VariableSet, w: &Workspace) -> bool {
    let ws_id = id_of(w);
    let project = idx.project_of(w);
    let project_id = project.map(|p| id_of(p.as_ref()));
    let me = Named {
        id: Some(&ws_id),
        name: &w.spec.name,
    };
    let prj = project.map(|p| Named {
        id: project_id.as_deref(),
        name: &p.spec.name,
    });
    s.spec.scope_for(me, prj).is_some()
}

/// Whether set `s` names project `p`.
fn names_project(s: &VariableSet, p: &Project) -> bool {
    Named {
        id: Some(&id_of(p)),
        name: &p.spec.name,
    }
    .listed_in(&s.spec.projects)
}

/// The list at `path` of the sets of `at`'s organization that `keep` selects, sorted by
/// name; empty to a caller who may not list variable sets.
async fn sets_where<K: Resource>(
    state: &AppState,
    caller: &Caller,
    at: &Located<K>,
    path: String,
    q: &QueryParams,
    keep: impl Fn(&Inner, &VariableSet) -> bool,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let allowed = state
        .allowed(caller, &Check::new("list", RESOURCE, &at.ns, None))
        .await?;
    let idx = state.index.read();
    let sets = if allowed {
        sorted(
            idx.variable_sets()
                .in_namespace(&at.ns)
                .filter(|s| keep(&idx, s))
                .cloned()
                .collect(),
        )
    } else {
        Vec::new()
    };
    Ok(list(&path, page, &sets, |s| render(&idx, s, &at.org)))
}

async fn of_workspace(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let path = format!("/api/v2/workspaces/{}/varsets", f.at.id());
    sets_where(&state, &f.caller, &f.at, path, &q, |idx, s| {
        applies_to(idx, s, &f.at.obj)
    })
    .await
}

async fn of_project(
    State(state): State<AppState>,
    f: Found<Project>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let path = format!("/api/v2/projects/{}/varsets", f.at.id());
    sets_where(&state, &f.caller, &f.at, path, &q, |_, s| {
        names_project(s, &f.at.obj)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::{ORG, harness, rule};

    const SETS: &str = "/api/v2/organizations/acme/varsets";
    const WS: &str = "ws-VarsetUser0000001";

    fn set_body(attrs: Value, rels: Value) -> Option<Value> {
        Some(json!({"data": {"type": "varsets", "attributes": attrs, "relationships": rels}}))
    }

    fn var_body(attrs: Value) -> Option<Value> {
        Some(json!({"data": {"type": "vars", "attributes": attrs}}))
    }

    /// TFE's variable set flow: create, name rules, variables (a sensitive value kept in a
    /// Secret owned by the set and never shown, key uniqueness, the workspace variable
    /// rules), applying to workspaces and projects, the sets of a workspace, update,
    /// delete; a reader reads but may not write.
    #[tokio::test]
    async fn variable_sets_through_the_api() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace(WS, "app", |_| {}).await;
        let (st, doc) = h
            .call(
                "POST",
                SETS,
                set_body(json!({"name": "creds", "priority": true}), json!({})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert!(id.starts_with("varset-"), "{id}");
        assert_eq!(doc["data"]["attributes"]["priority"], true);
        assert_eq!(doc["data"]["attributes"]["global"], false);
        let (st, _) = h
            .call("POST", SETS, set_body(json!({"name": "CREDS"}), json!({})))
            .await;
        assert_eq!(st, 422, "names are unique in the organization");
        let (st, _) = h.call("POST", SETS, set_body(json!({}), json!({}))).await;
        assert_eq!(st, 422, "a name is required");

        let vars = format!("/api/v2/varsets/{id}/relationships/vars");
        let (st, doc) = h
            .call(
                "POST",
                &vars,
                var_body(json!({"key": "token", "value": "s3cret", "category": "env", "sensitive": true})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        assert_eq!(doc["data"]["attributes"]["value"], Value::Null);
        let token_id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let (st, doc) = h
            .call(
                "POST",
                &vars,
                var_body(json!({"key": "region", "value": "eu", "category": "terraform"})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let region_id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let (st, _) = h
            .call(
                "POST",
                &vars,
                var_body(json!({"key": "region", "value": "us", "category": "terraform"})),
            )
            .await;
        assert_eq!(st, 422, "a key once per category");
        let (st, _) = h
            .call(
                "POST",
                &vars,
                var_body(json!({"key": "1bad", "value": "x", "category": "env"})),
            )
            .await;
        assert_eq!(st, 422, "the workspace variable key rules");
        let stored = h
            .state
            .index
            .read()
            .variable_sets()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| panic!("set not indexed"));
        assert!(
            !serde_json::to_string(&*stored)
                .unwrap_or_default()
                .contains("s3cret")
        );
        let token = stored
            .spec
            .variables
            .iter()
            .find(|v| v.key == "token")
            .cloned()
            .unwrap_or_default();
        let secret =
            kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(h.admin.clone(), ORG)
                .get(&token.value_from.clone().unwrap_or_default().name)
                .await
                .unwrap_or_else(|e| panic!("secret: {e}"));
        assert_eq!(
            secret.data.unwrap_or_default()[VARIABLE_SECRET_KEY].0,
            b"s3cret".to_vec()
        );
        let (_, doc) = h.call("GET", &vars, None).await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        assert!(doc["data"][0]["attributes"]["version-id"].is_string());
        let (st, doc) = h
            .call("GET", &format!("/api/v2/varsets/{id}?include=vars"), None)
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["included"].as_array().map(Vec::len), Some(2));
        assert!(!doc.to_string().contains("s3cret"));
        let (st, _) = h
            .call("GET", &format!("/api/v2/varsets/{id}?include=nope"), None)
            .await;
        assert_eq!(st, 400);
        assert!(!doc.to_string().contains("s3cret"));
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("{vars}/{region_id}"),
                var_body(json!({"value": "eu-west-1"})),
            )
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["value"].as_str()),
            (200, Some("eu-west-1"))
        );
        let (st, _) = h
            .call(
                "PATCH",
                &format!("{vars}/{token_id}"),
                var_body(json!({"sensitive": false})),
            )
            .await;
        assert_eq!(st, 422, "sensitive stays sensitive");

        // Where it applies.
        let (st, _) = h
            .call(
                "POST",
                &format!("/api/v2/varsets/{id}/relationships/workspaces"),
                Some(json!({"data": [{"type": "workspaces", "id": WS}]})),
            )
            .await;
        assert_eq!(st, 204);
        let (_, doc) = h
            .call("GET", &format!("/api/v2/workspaces/{WS}/varsets"), None)
            .await;
        assert_eq!(doc["data"][0]["id"], id.as_str());
        assert_eq!(
            doc["data"][0]["relationships"]["workspaces"]["data"][0]["id"],
            WS
        );
        let (st, _) = h
            .call(
                "DELETE",
                &format!("/api/v2/varsets/{id}/relationships/workspaces"),
                Some(json!({"data": [{"type": "workspaces", "id": WS}]})),
            )
            .await;
        assert_eq!(st, 204);
        let (_, doc) = h
            .call("GET", &format!("/api/v2/workspaces/{WS}/varsets"), None)
            .await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(0));
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/varsets/{id}"),
                set_body(json!({"global": true}), json!({})),
            )
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["global"].as_bool()),
            (200, Some(true))
        );
        let (_, doc) = h
            .call("GET", &format!("/api/v2/workspaces/{WS}/varsets"), None)
            .await;
        assert_eq!(
            doc["data"].as_array().map(Vec::len),
            Some(1),
            "a global set applies everywhere"
        );

        let reader = h
            .token_with_role(Some(vec![rule(
                &["get", "list"],
                &["workspaces", "variablesets"],
            )]))
            .await;
        let (st, doc) = h.call_as(&reader, "GET", SETS, None).await;
        assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(1)));
        let (st, _) = h
            .call_as(
                &reader,
                "POST",
                &vars,
                var_body(json!({"key": "k", "value": "v"})),
            )
            .await;
        assert_eq!(st, 403);

        let (st, _) = h.call("DELETE", &format!("{vars}/{region_id}"), None).await;
        assert_eq!(st, 204);
        let (st, _) = h.call("GET", &format!("{vars}/{region_id}"), None).await;
        assert_eq!(st, 404);
        let (st, _) = h
            .call("DELETE", &format!("/api/v2/varsets/{id}"), None)
            .await;
        assert_eq!(st, 204);
        let (st, _) = h.call("GET", &format!("/api/v2/varsets/{id}"), None).await;
        assert_eq!(st, 404);
    }
}
