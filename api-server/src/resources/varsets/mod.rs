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

use crate::documents::variables::{
    VarAttributes, checked_spec, ptr, set_var as render_var, set_var_spec as as_spec,
};
use crate::index::Inner;
use crate::prelude::*;
use crate::relations::{
    self, ProjectEntry, Related, WorkspaceEntry, ids_of, linkage, related_ids, unique_name,
};

mod scope;
mod variables;

use scope::*;
use variables::*;

/// The RBAC resource of variable sets.
const RESOURCE: &str = "variablesets";

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "varsets",
        get(list_sets).post(create),
        get(crate::listing::show::<VariableSet>)
            .patch(update)
            .delete(remove),
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
    let parent = match parent_of(idx, s) {
        Some(project) => json!({"id": project, "type": "projects"}),
        None => json!({"id": org.tfe_name(), "type": "organizations"}),
    };
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
            "parent": {"data": parent},
            "vars": {"data": vars},
            "workspaces": {"data": workspaces},
            "projects": {"data": projects},
        },
        "links": {"self": format!("/api/v2/varsets/{id}")},
    })
}

/// The ID of the project that owns set `s` (None: the organization owns it). A set whose
/// project is gone names none.
fn parent_of(idx: &Inner, s: &VariableSet) -> Option<String> {
    let ns = s.namespace().unwrap_or_default();
    s.spec
        .parent_project
        .as_deref()
        .map(|p| resolve(idx, &ns, true, p).unwrap_or_else(|| p.to_owned()))
}

/// What `include` may name on sets.
const INCLUDES: &[&str] = &["vars", "workspaces", "projects"];

/// Adds what `out` asks of set `s`: its variables, workspaces and projects.
fn included(idx: &Inner, s: &VariableSet, org: &Organization, out: &mut Included) {
    let id = id_of(s);
    let ns = s.namespace().unwrap_or_default();
    for inc in out.names().to_vec() {
        match inc.as_str() {
            "vars" => out.extend(s.spec.variables.iter().map(|v| render_var(&id, v))),
            "workspaces" => out.extend(
                s.spec
                    .workspaces
                    .iter()
                    .filter_map(|e| resolve(idx, &ns, false, e))
                    .filter_map(|w| idx.workspace(&w).cloned())
                    .map(|w| crate::resources::runs::workspace_brief(&w, org)),
            ),
            "projects" => out.extend(
                s.spec
                    .projects
                    .iter()
                    .filter_map(|e| resolve(idx, &ns, true, e))
                    .filter_map(|p| idx.project(&p).cloned())
                    .map(|p| crate::documents::project_in(idx, &p, org)),
            ),
            _ => {}
        }
    }
}

impl Shown for VariableSet {
    const INCLUDES: &'static [&'static str] = INCLUDES;
    fn data(&self, idx: &Inner, org: &Organization) -> Value {
        render(idx, self, org)
    }
    fn include(&self, idx: &Inner, org: &Organization, inc: &mut Included) {
        included(idx, self, org, inc);
    }
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
    let mut l = Listing::<VariableSet>::read(&state, &o, &q, "varsets", &[], INCLUDES).await?;
    l.search(&q, "q", |s| &s.spec.name);
    l.items = sorted(l.items);
    Ok(l.answer_shown(&state.index.read(), &o.org))
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

/// A set's relationships on create and update: each list given replaces its list;
/// `parent` (create only) is the organization or a project that owns the set.
#[derive(Default, Deserialize)]
struct SetRelationships {
    workspaces: Option<ToMany<WorkspaceEntry>>,
    projects: Option<ToMany<ProjectEntry>>,
    parent: Option<ToOne>,
}

const PARENT_PTR: &str = "/data/relationships/parent/data";
/// Where a create's or update's workspaces and projects are.
const REL_PTRS: (&str, &str) = (
    "/data/relationships/workspaces/data",
    "/data/relationships/projects/data",
);

/// The project that owns a new set, from its `parent` relationship: None for the
/// organization (or no parent), the project's ID for a project of the organization; 422
/// for anything else (another organization, an unknown project, another type).
fn parent_project(
    idx: &Inner,
    ns: &str,
    org: &Organization,
    parent: Option<&ToOne>,
) -> Result<Option<String>, ApiError> {
    let Some(Some(Some(p))) = parent.map(|r| r.data.as_ref()) else {
        return Ok(None);
    };
    let id = p.id.as_deref().unwrap_or_default();
    match p.kind.as_deref() {
        Some("organizations") if id.is_empty() || id == org.tfe_name() => Ok(None),
        Some("organizations") => Err(ApiError::invalid(
            format!("{PARENT_PTR}/id"),
            format!("{id:?} is not this variable set's organization"),
        )),
        Some("projects") => idx
            .project(id)
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .map(|p| Some(id_of(p.as_ref())))
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{PARENT_PTR}/id"),
                    format!("project {id:?} not found in this organization"),
                )
            }),
        _ => Err(ApiError::invalid(
            format!("{PARENT_PTR}/type"),
            "a variable set's parent is an organization or a project (type \"organizations\" or \"projects\")",
        )),
    }
}

/// 422 unless a set owned by project `owner` (if any) names only workspaces of that
/// project and no project but it: a project's set never reaches beyond its project.
fn check_owned_scope(
    idx: &Inner,
    ns: &str,
    owner: Option<&str>,
    workspaces: &[String],
    projects: &[String],
    pointers: (&str, &str),
) -> Result<(), ApiError> {
    let Some(owner) = owner else {
        return Ok(());
    };
    let mut errs = Vec::new();
    for (i, w) in workspaces.iter().enumerate() {
        let inside = resolve(idx, ns, false, w)
            .and_then(|id| idx.workspace(&id).cloned())
            .and_then(|w| idx.project_of(&w).map(|p| id_of(p.as_ref())))
            .is_some_and(|p| p == owner);
        if !inside {
            errs.push(FieldError::new(
                format!("{}/{i}/id", pointers.0),
                format!("workspace {w:?} is not in project {owner}, which owns this variable set"),
            ));
        }
    }
    for (i, p) in projects.iter().enumerate() {
        if resolve(idx, ns, true, p).as_deref() != Some(owner) {
            errs.push(FieldError::new(
                format!("{}/{i}/id", pointers.1),
                format!("a variable set owned by project {owner} applies to no other project"),
            ));
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::Invalid(errs))
    }
}

/// Ok when the caller may `verb` variable sets in the organization, or the set belongs to
/// a project (`owner`) the caller may update: a project's admins manage its sets, as in
/// TFE. 403 otherwise.
async fn may_manage(
    state: &AppState,
    caller: &Caller,
    ns: &str,
    owner: Option<&str>,
    verb: &'static str,
    deny: &'static str,
) -> Result<(), ApiError> {
    if state
        .allowed(caller, &Check::new(verb, RESOURCE, ns, None))
        .await?
    {
        return Ok(());
    }
    let project = owner.and_then(|o| state.index.read().project(o).map(|p| p.name_any()));
    if let Some(object) = project
        && state
            .allowed(caller, &Check::new("update", "projects", ns, Some(&object)))
            .await?
    {
        return Ok(());
    }
    Err(ApiError::forbidden(deny))
}

/// [`may_manage`] of the found set `f`; its owning project's name, if one owns it.
async fn may_change(
    state: &AppState,
    f: &Found<VariableSet>,
    verb: &'static str,
) -> Result<Option<String>, ApiError> {
    let owner = owner_of(state, &f.at.obj);
    may_manage(
        state,
        &f.caller,
        &f.at.ns,
        owner.as_deref(),
        verb,
        NOT_YOURS,
    )
    .await?;
    Ok(owner)
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
    let data = doc.checked()?;
    let ns = o.ns().to_owned();
    let owner = parent_project(
        &state.index.read(),
        &ns,
        &o.org,
        data.relationships.parent.as_ref(),
    )?;
    may_manage(
        &state,
        &o.caller,
        &ns,
        owner.as_deref(),
        "create",
        "not authorized to create variable sets in this organization",
    )
    .await?;
    let spec = {
        let idx = state.index.read();
        let a = data.attributes;
        let name = a
            .name
            .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
        let r = data.relationships;
        let workspaces = related_ids(&idx, &ns, "workspaces", r.workspaces)?.unwrap_or_default();
        let projects = related_ids(&idx, &ns, "projects", r.projects)?.unwrap_or_default();
        check_owned_scope(
            &idx,
            &ns,
            owner.as_deref(),
            &workspaces,
            &projects,
            REL_PTRS,
        )?;
        VariableSetSpec {
            name: checked_name(&idx, &ns, &name, None)?,
            description: a.description,
            global: a.global.unwrap_or(false),
            priority: a.priority.unwrap_or(false),
            workspaces,
            projects,
            parent_project: owner,
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

/// The ID of the project owning set `s` (None: the organization owns it).
fn owner_of(state: &AppState, s: &VariableSet) -> Option<String> {
    let ns = s.namespace().unwrap_or_default();
    s.spec
        .parent_project
        .as_deref()
        .map(|p| resolve(&state.index.read(), &ns, true, p).unwrap_or_else(|| p.to_owned()))
}

async fn update(
    State(state): State<AppState>,
    f: Found<VariableSet>,
    JsonApi(doc): JsonApi<Document<SetAttributes, SetRelationships>>,
) -> Result<Doc, ApiError> {
    let owner = may_change(&state, &f, "update").await?;
    let data = doc.checked()?;
    let ns = f.at.ns.clone();
    let (name, workspaces, projects) = {
        let idx = state.index.read();
        let r = data.relationships;
        let given = parent_project(&idx, &ns, &f.at.org, r.parent.as_ref())?;
        if r.parent
            .as_ref()
            .is_some_and(|p| matches!(p.data, Some(Some(_))))
            && given != owner
        {
            return Err(ApiError::invalid(
                PARENT_PTR,
                "a variable set's parent cannot be changed",
            ));
        }
        let workspaces = related_ids(&idx, &ns, "workspaces", r.workspaces)?;
        let projects = related_ids(&idx, &ns, "projects", r.projects)?;
        check_owned_scope(
            &idx,
            &ns,
            owner.as_deref(),
            workspaces.as_deref().unwrap_or_default(),
            projects.as_deref().unwrap_or_default(),
            REL_PTRS,
        )?;
        (
            data.attributes
                .name
                .as_deref()
                .map(|n| checked_name(&idx, &ns, n, Some(&f.at.id())))
                .transpose()?,
            workspaces,
            projects,
        )
    };
    let a = data.attributes;
    let updated =
        f.at.change_spec(&state, |s| {
            write::given(&mut s.name, name.as_ref());
            write::given_some(&mut s.description, &a.description);
            write::given(&mut s.global, a.global.as_ref());
            write::given(&mut s.priority, a.priority.as_ref());
            write::given(&mut s.workspaces, workspaces.as_ref());
            write::given(&mut s.projects, projects.as_ref());
            Ok(())
        })
        .await?;
    Ok(Doc::ok(render(&state.index.read(), &updated, &f.at.org)))
}

async fn remove(
    State(state): State<AppState>,
    f: Found<VariableSet>,
) -> Result<Response, ApiError> {
    may_change(&state, &f, "delete").await?;
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
    let owner = may_change(&state, &f, "update").await?;
    let projects = T::TYPE == "projects";
    let ids = ids_of(&state.index.read(), &f.at.ns, "/data", body)?;
    if ADD {
        let (w, p): (&[String], &[String]) = if projects { (&[], &ids) } else { (&ids, &[]) };
        check_owned_scope(
            &state.index.read(),
            &f.at.ns,
            owner.as_deref(),
            w,
            p,
            ("/data", "/data"),
        )?;
    }
    let ns = f.at.ns.clone();
    f.at.change_spec(&state, |s| {
        let list = if projects {
            &mut s.projects
        } else {
            &mut s.workspaces
        };
        relations::relate_ids(list, &ids, ADD, (&state.index.read(), &ns, kind(projects)));
        Ok(())
    })
    .await?;
    Ok(no_content())
}

// ---- the set's variables ----

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

    /// go-tfe's list options send `include=` (empty): it includes nothing on the three
    /// set lists (issue 42 §6); a named include is served on each.
    #[tokio::test]
    async fn an_empty_include_names_nothing() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace(WS, "app", |_| {}).await;
        let (st, doc) = h
            .call(
                "POST",
                SETS,
                set_body(json!({"name": "g", "global": true}), json!({})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        for path in [
            SETS.to_owned(),
            format!("/api/v2/workspaces/{WS}/varsets"),
            format!(
                "/api/v2/projects/{}/varsets",
                crate::testing::DEFAULT_PROJECT
            ),
        ] {
            let (st, doc) = h
                .call("GET", &format!("{path}?include=&page%5Bnumber%5D=1"), None)
                .await;
            assert_eq!(st, 200, "{path}: {doc}");
            assert!(doc.get("included").is_none(), "{path}: {doc}");
            let (st, doc) = h.call("GET", &format!("{path}?include=vars"), None).await;
            assert_eq!(st, 200, "{path}: {doc}");
            let (st, _) = h.call("GET", &format!("{path}?include=nope"), None).await;
            assert_eq!(st, 400, "{path}");
        }
    }

    /// Every update of a set variable is a new version, one that changes nothing too, as
    /// workspace variables are (issue 42 §7).
    #[tokio::test]
    async fn every_variable_update_is_a_new_version() {
        let h = harness(Edition::SelfHosted).await;
        let (_, doc) = h
            .call("POST", SETS, set_body(json!({"name": "s"}), json!({})))
            .await;
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let vars = format!("/api/v2/varsets/{id}/relationships/vars");
        let (st, doc) = h
            .call(
                "POST",
                &vars,
                var_body(json!({"key": "k", "value": "v", "category": "env"})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let var = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let mut seen = vec![doc["data"]["attributes"]["version-id"].clone()];
        for _ in 0..2 {
            let (st, doc) = h
                .call(
                    "PATCH",
                    &format!("{vars}/{var}"),
                    var_body(json!({"value": "v"})),
                )
                .await;
            assert_eq!(st, 200, "{doc}");
            let v = doc["data"]["attributes"]["version-id"].clone();
            assert!(v.is_string() && !seen.contains(&v), "{v} after {seen:?}");
            let (_, shown) = h.call("GET", &format!("{vars}/{var}"), None).await;
            assert_eq!(shown["data"]["attributes"]["version-id"], v);
            seen.push(v);
        }
    }

    /// A set created with a project as its parent is the project's: it says so, applies
    /// only to the project's workspaces (`global`: all of them), names no workspace or
    /// project outside it, keeps its parent, is listed on the project, and the project's
    /// admins manage it (issue 42 §8).
    #[tokio::test]
    async fn project_owned_sets() {
        let h = harness(Edition::SelfHosted).await;
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/organizations/acme/projects",
                Some(json!({"data": {"type": "projects", "attributes": {"name": "platform"}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let prj = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let prj_object = terrace_crds::ids::object_name_for_id(&prj);
        h.workspace(WS, "inside", |s| s.project = Some(prj_object.clone()))
            .await;
        let outside = "ws-VarsetOutside0001";
        h.workspace(outside, "outside", |_| {}).await;
        let parent = |t: &str, id: &str| json!({"parent": {"data": {"type": t, "id": id}}});
        let (st, doc) = h
            .call(
                "POST",
                SETS,
                set_body(
                    json!({"name": "prj", "global": true}),
                    parent("projects", &prj),
                ),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let want = json!({"id": prj, "type": "projects"});
        assert_eq!(doc["data"]["relationships"]["parent"]["data"], want);
        let (_, doc) = h.call("GET", &format!("/api/v2/varsets/{id}"), None).await;
        assert_eq!(doc["data"]["relationships"]["parent"]["data"], want);
        // Where it applies: the project's workspaces only.
        let (_, doc) = h
            .call("GET", &format!("/api/v2/workspaces/{WS}/varsets"), None)
            .await;
        assert_eq!(doc["data"][0]["id"], id.as_str(), "{doc}");
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/workspaces/{outside}/varsets"),
                None,
            )
            .await;
        assert_eq!(doc["data"], json!([]), "{doc}");
        let (_, doc) = h
            .call("GET", &format!("/api/v2/projects/{prj}/varsets"), None)
            .await;
        assert_eq!(doc["data"][0]["id"], id.as_str(), "{doc}");
        // Nothing outside the project, and the parent stays.
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/varsets/{id}/relationships/workspaces"),
                Some(json!({"data": [{"type": "workspaces", "id": outside}]})),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        let (st, doc) = h
            .call(
                "POST",
                SETS,
                set_body(
                    json!({"name": "bad"}),
                    json!({"parent": {"data": {"type": "projects", "id": prj}},
                        "workspaces": {"data": [{"type": "workspaces", "id": outside}]}}),
                ),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/varsets/{id}"),
                set_body(json!({}), parent("organizations", "acme")),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        for (t, pid) in [
            ("projects", "prj-nope"),
            ("workspaces", WS),
            ("organizations", "other"),
        ] {
            let (st, doc) = h
                .call("POST", SETS, set_body(json!({"name": "x"}), parent(t, pid)))
                .await;
            assert_eq!(st, 422, "{t} {pid}: {doc}");
        }
        // An organization parent is the organization's set.
        let (st, doc) = h
            .call(
                "POST",
                SETS,
                set_body(json!({"name": "org"}), parent("organizations", "acme")),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        assert_eq!(
            doc["data"]["relationships"]["parent"]["data"],
            json!({"id": "acme", "type": "organizations"})
        );
        // Who may update the project manages its sets, not the organization's.
        let admin = h
            .token_with_role(Some(vec![
                rule(
                    &["get", "list"],
                    &["workspaces", "variablesets", "projects"],
                ),
                rule(&["update"], &["projects"]),
            ]))
            .await;
        let (st, doc) = h
            .call_as(
                &admin,
                "POST",
                &format!("/api/v2/varsets/{id}/relationships/vars"),
                var_body(json!({"key": "k", "value": "v", "category": "env"})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let (st, doc) = h
            .call_as(
                &admin,
                "POST",
                SETS,
                set_body(json!({"name": "mine"}), parent("projects", &prj)),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let (st, _) = h
            .call_as(
                &admin,
                "POST",
                SETS,
                set_body(json!({"name": "theirs"}), json!({})),
            )
            .await;
        assert_eq!(st, 403);
    }

    /// `GET /workspaces/:id/all-vars`: the workspace's variables and those of the sets
    /// applied to it, one per category and key by TFE's precedence (go-tfe's
    /// TestVariablesListAll; issue 42 §9).
    #[tokio::test]
    async fn all_vars_merges_by_precedence() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace(WS, "app", |_| {}).await;
        let mut set_vars = Vec::new();
        for (name, keys) in [("org", ["key1", "key2"]), ("prj", ["key3", "key4"])] {
            let (_, doc) = h
                .call(
                    "POST",
                    SETS,
                    set_body(
                        json!({"name": name}),
                        json!({"workspaces": {"data": [{"type": "workspaces", "id": WS}]}}),
                    ),
                )
                .await;
            let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
            for k in keys {
                let (st, doc) = h
                    .call(
                        "POST",
                        &format!("/api/v2/varsets/{id}/relationships/vars"),
                        var_body(json!({"key": k, "value": format!("{name}-{k}"), "category": "terraform"})),
                    )
                    .await;
                assert_eq!(st, 201, "{doc}");
                set_vars.push((k, doc["data"]["id"].as_str().unwrap_or_default().to_owned()));
            }
        }
        let mut ws_vars = Vec::new();
        for k in ["key2", "key4", "key5"] {
            let (st, doc) = h
                .call(
                    "POST",
                    &format!("/api/v2/workspaces/{WS}/vars"),
                    Some(json!({"data": {"type": "vars", "attributes": {"key": k, "value": format!("ws-{k}"), "category": "terraform"}}})),
                )
                .await;
            assert_eq!(st, 201, "{doc}");
            ws_vars.push(doc["data"]["id"].as_str().unwrap_or_default().to_owned());
        }
        let (st, doc) = h
            .call("GET", &format!("/api/v2/workspaces/{WS}/all-vars"), None)
            .await;
        assert_eq!(st, 200, "{doc}");
        let got: Vec<(String, String)> = doc["data"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                (
                    v["id"].as_str().unwrap_or_default().to_owned(),
                    v["attributes"]["value"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                )
            })
            .collect();
        let id_of = |k: &str| {
            set_vars
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, i)| i.clone())
        };
        assert_eq!(
            got,
            vec![
                (id_of("key1").unwrap_or_default(), "org-key1".to_owned()),
                (ws_vars[0].clone(), "ws-key2".to_owned()),
                (id_of("key3").unwrap_or_default(), "prj-key3".to_owned()),
                (ws_vars[1].clone(), "ws-key4".to_owned()),
                (ws_vars[2].clone(), "ws-key5".to_owned()),
            ]
        );
        // Without the right to list variable sets: the workspace's own only.
        let reader = h
            .token_with_role(Some(vec![rule(
                &["get", "list"],
                &["workspaces", "workspacevariables"],
            )]))
            .await;
        let (st, doc) = h
            .call_as(
                &reader,
                "GET",
                &format!("/api/v2/workspaces/{WS}/all-vars"),
                None,
            )
            .await;
        assert_eq!(
            (st, doc["data"].as_array().map(Vec::len)),
            (200, Some(3)),
            "{doc}"
        );
    }
}
