//! Workspace variables (TFE's Workspace Variables API, JSON:API type `vars`): the
//! Terraform and environment variables of a workspace's runs.
//!
//! - `GET/POST /workspaces/:workspace_id/vars`, `GET/PATCH/DELETE
//!   /workspaces/:workspace_id/vars/:variable_id`;
//! - the older `GET /vars?filter[organization][name]=&filter[workspace][name]=`,
//!   `POST /vars` (the workspace in `relationships.workspace`) and `PATCH/DELETE
//!   /vars/:variable_id`.
//!
//! A variable is a WorkspaceVariable object in the organization's namespace, owned by its
//! Workspace (deleting the workspace deletes its variables), checked with the rules of
//! its CRD (`terrace_crds::rules`): category `terraform` or `env`, a key valid in its
//! category and unique per workspace and category, `hcl` for terraform variables only, a
//! description of at most 512 characters. A sensitive value is written into a Secret owned
//! by the variable (`spec.valueFrom` points at it); no response shows it (the value reads
//! as `null`), and a sensitive variable cannot become non-sensitive. `version-id` is a
//! digest of the variable and a revision token written by every update
//! (`WorkspaceVariableSpec::version_id`), so it changes with every
//! update, a new sensitive value included (through the `terrace.dev/value-revision`
//! annotation).
//!
//! Rights, in the organization's namespace: the workspace readable (`get` on it, else
//! 404), then `list` (list), `get` (show), `create`, `update` or `delete` on
//! `workspacevariables` (else 404; the object's name in the review where there is one).

use std::collections::BTreeMap;

use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::{ANNOTATION_VALUE_REVISION, VARIABLE_SECRET_KEY};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::rules::new_secret_value;
use terrace_crds::{Workspace, WorkspaceVariable, WorkspaceVariableSpec};

pub use crate::documents::variables::secret_name;
use crate::documents::variables::{VarAttributes, checked_spec, ptr};
use crate::prelude::*;
use crate::query::whole_page;

/// The RBAC resource of the checks on workspace variables.
const RESOURCE: &str = "workspacevariables";

pub fn router() -> Router<AppState> {
    use crate::read_only::collection_routes;
    collection_routes(
        ("/api/v2/workspaces/{id}/vars", get(list_vars).post(create)),
        (
            "/api/v2/workspaces/{id}/vars/{var}",
            get(show).patch(update).delete(remove),
        ),
    )
    .route("/api/v2/workspaces/{id}/all-vars", get(all_vars))
    .merge(collection_routes(
        ("/api/v2/vars", get(list_legacy).post(create_legacy)),
        (
            "/api/v2/vars/{var}",
            patch(update_legacy).delete(remove_legacy),
        ),
    ))
}

/// The variable's `version-id` (see [`WorkspaceVariableSpec::version_id`]).
fn version_id(v: &WorkspaceVariable) -> String {
    v.spec.version_id(
        v.annotations()
            .get(ANNOTATION_VALUE_REVISION)
            .map(String::as_str),
    )
}

/// The JSON:API `data` of a variable of workspace `ws_id`; a sensitive value reads as
/// `null`, as in TFE.
pub fn render(v: &WorkspaceVariable, ws_id: &str) -> Value {
    let id = id_of(v);
    json!({
        "id": id,
        "type": "vars",
        "attributes": {
            "key": v.spec.key,
            "value": if v.spec.sensitive { Value::Null } else { json!(v.spec.value) },
            "description": v.spec.description,
            "category": v.spec.category,
            "hcl": v.spec.hcl,
            "sensitive": v.spec.sensitive,
            "version-id": version_id(v),
            "created-at": created_at(v),
        },
        "relationships": {
            "configurable": {
                "data": {"id": ws_id, "type": "workspaces"},
                "links": {"related": format!("/api/v2/workspaces/{ws_id}")},
            },
        },
        "links": {"self": format!("/api/v2/workspaces/{ws_id}/vars/{id}")},
    })
}

/// The relationships of a `POST /vars` (the workspace of the variable).
#[derive(Debug, Default, Deserialize)]
struct VarRelationships {
    #[serde(default)]
    workspace: Option<ToOne>,
}

/// The workspace's variables (those with an ID), by category and key.
fn vars_of(state: &AppState, ws: &Located<Workspace>) -> Vec<Arc<WorkspaceVariable>> {
    let name = ws.object_name();
    let mut vars: Vec<_> = state
        .index
        .read()
        .workspace_variables()
        .in_namespace(&ws.ns)
        .filter(|v| v.spec.workspace == name && !id_of(v.as_ref()).is_empty())
        .cloned()
        .collect();
    vars.sort_by(|a, b| {
        (a.spec.category.as_str(), a.spec.key.as_str(), a.name_any()).cmp(&(
            b.spec.category.as_str(),
            b.spec.key.as_str(),
            b.name_any(),
        ))
    });
    vars
}

/// Variable `id` if it belongs to workspace `ws`; 404 otherwise.
fn var_of(
    state: &AppState,
    ws: &Located<Workspace>,
    id: &str,
) -> Result<Arc<WorkspaceVariable>, ApiError> {
    state
        .index
        .read()
        .workspace_variables()
        .get(id)
        .filter(|v| {
            v.namespace().as_deref() == Some(ws.ns.as_str()) && v.spec.workspace == ws.object_name()
        })
        .cloned()
        .ok_or_else(|| ApiError::not_found("variable not found"))
}

/// 422 when another variable of the workspace has this key in this category.
fn key_taken(
    state: &AppState,
    ws: &Located<Workspace>,
    spec: &WorkspaceVariableSpec,
    except: Option<&str>,
) -> Option<FieldError> {
    vars_of(state, ws)
        .iter()
        .any(|v| {
            v.spec.key == spec.key
                && v.spec.category == spec.category
                && Some(v.name_any().as_str()) != except
        })
        .then(|| FieldError::attribute("key", "Key has already been taken"))
}

/// Ok when the caller may `verb` workspace variables of `ws` (`name`: the one concerned).
/// Otherwise 404 to a caller who may not read them either, and 403 to one who may (a
/// reader's write), as for the workspace's settings, runs and uploads (docs/rbac.md).
async fn allow(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    verb: &'static str,
    name: Option<&str>,
) -> Result<(), ApiError> {
    let check = Check::new(verb, RESOURCE, &ws.ns, name);
    if state.allowed(caller, &check).await? {
        return Ok(());
    }
    let reads = ["get", "list"].contains(&verb)
        || !state
            .allowed(caller, &Check::new("list", RESOURCE, &ws.ns, None))
            .await?;
    if reads {
        Err(ApiError::not_found("variable not found"))
    } else {
        Err(ApiError::forbidden(
            "changing workspace variables needs the right to write workspacevariables in the organization",
        ))
    }
}

/// The variable `var` of `ws`, if the caller may `verb` it.
async fn allowed_var(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    var: &str,
    verb: &'static str,
) -> Result<Arc<WorkspaceVariable>, ApiError> {
    let v = var_of(state, ws, var)?;
    allow(state, caller, ws, verb, Some(&v.name_any())).await?;
    Ok(v)
}

/// A new random value revision (see [`ANNOTATION_VALUE_REVISION`]).
fn new_revision() -> String {
    crate::capability::random_token()
}

// ---- the workspace's variables ----

async fn list_vars(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    list_of(&state, &f.caller, &f.at, &q).await
}

/// The list: every variable in one page unless the client asks for pages (TFE's list is
/// not paginated, and pytfe reads only its first response), always with
/// `meta.pagination`.
async fn list_of(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    q: &QueryParams,
) -> Result<Doc, ApiError> {
    q.page()?; // 400 on a bad page before the rights are checked
    allow(state, caller, ws, "list", None).await?;
    let vars = vars_of(state, ws);
    let page = q.page_or_whole(vars.len())?;
    let ws_id = ws.id();
    let base = format!("/api/v2/workspaces/{ws_id}/vars");
    Ok(list(&base, page, &vars, |v| render(v, &ws_id)))
}

/// `GET /workspaces/:id/all-vars`: the variables a run of the workspace gets, its own
/// and those of the variable sets applied to it, the winner of each category and key by
/// TFE's precedence ([`winning_variables`], the rule the operator applies to runs), by
/// category and key, in one page. Set variables are shown to a caller who may list
/// variable sets (as `GET /workspaces/:id/varsets`); sensitive values read `null`.
async fn all_vars(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    use terrace_crds::resources::Named;
    use terrace_crds::rules::{Candidate, VariableSource, winning_variables};
    q.supported_filters(&[])?;
    let ws = &f.at;
    allow(&state, &f.caller, ws, "list", None).await?;
    let sets_visible = state
        .allowed(&f.caller, &Check::new("list", "variablesets", &ws.ns, None))
        .await?;
    let ws_id = ws.id();
    let mut candidates: Vec<Candidate<Value>> = vars_of(&state, ws)
        .iter()
        .map(|v| Candidate {
            source: VariableSource::Workspace,
            set_name: String::new(),
            category: v.spec.category.clone(),
            key: v.spec.key.clone(),
            item: render(v, &ws_id),
        })
        .collect();
    if sets_visible {
        let idx = state.index.read();
        let me = Named {
            id: Some(&ws_id),
            name: &ws.obj.spec.name,
        };
        let project = idx.project_of(&ws.obj);
        let project_id = project.map(|p| id_of(p.as_ref()));
        let project = project.map(|p| Named {
            id: project_id.as_deref(),
            name: &p.spec.name,
        });
        for set in idx.variable_sets().in_namespace(&ws.ns) {
            let Some(scope) = set.spec.scope_for(me, project) else {
                continue;
            };
            let source = VariableSource::of_set(scope, set.spec.priority);
            let set_id = id_of(set.as_ref());
            candidates.extend(set.spec.variables.iter().map(|v| Candidate {
                source,
                set_name: set.spec.name.clone(),
                category: v.category.clone(),
                key: v.key.clone(),
                item: crate::documents::variables::set_var(&set_id, v),
            }));
        }
    }
    let won: Vec<Value> = winning_variables(candidates)
        .into_iter()
        .map(|c| c.item)
        .collect();
    let base = format!("/api/v2/workspaces/{ws_id}/all-vars");
    Ok(list_rendered(&base, whole_page(won.len()), &won))
}

async fn show(
    State(state): State<AppState>,
    f: Found<Workspace>,
    Path((_, var)): Path<(String, String)>,
) -> Result<Doc, ApiError> {
    let v = allowed_var(&state, &f.caller, &f.at, &var, "get").await?;
    Ok(Doc::ok(render(&v, &f.at.id())))
}

async fn create(
    State(state): State<AppState>,
    f: Found<Workspace>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    let attrs = doc.checked()?.attributes;
    create_in(&state, &f.caller, &f.at, attrs).await
}

async fn create_in(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    attrs: VarAttributes,
) -> Result<Doc, ApiError> {
    allow(state, caller, ws, "create", None).await?;
    let mut errs = Vec::new();
    let input = attrs.parse(&mut errs);
    if input.key.is_none() && !errs.iter().any(|e| e.pointer == ptr("key")) {
        errs.push(FieldError::attribute("key", "Key can't be blank"));
    }
    let mut spec = checked_spec(&input, None, &ws.object_name(), &mut errs);
    if errs.is_empty()
        && let Some(e) = key_taken(state, ws, &spec, None)
    {
        errs.push(e);
    }
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let id = new_id(IdKind::WorkspaceVariable);
    let object_name = object_name_for_id(&id);
    let mut meta = ws.owned_meta(&id, &[]);
    if spec.sensitive {
        spec.value_from = Some(SecretKeyRef {
            name: secret_name(&object_name),
            key: VARIABLE_SECRET_KEY.to_owned(),
        });
        meta.annotations = Some(BTreeMap::from([(
            ANNOTATION_VALUE_REVISION.to_owned(),
            new_revision(),
        )]));
    }
    let var = WorkspaceVariable {
        metadata: meta,
        spec,
        status: None,
    };
    let created = write::create(state, &ws.ns, &var).await?;
    if created.spec.sensitive {
        let value = input.value.unwrap_or_default();
        if let Err(e) = write::owned_secret(
            state,
            &created,
            &secret_name(&object_name),
            VARIABLE_SECRET_KEY,
            &value,
        )
        .await
        {
            // No variable without its value: undo the create.
            if let Err(d) = write::delete(state, &created).await {
                tracing::warn!(error = %d, variable = %id, "removing a variable whose value could not be stored");
            }
            return Err(e);
        }
    }
    Ok(Doc::created(render(&created, &ws.id())))
}

async fn update(
    State(state): State<AppState>,
    f: Found<Workspace>,
    Path((_, var)): Path<(String, String)>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    let attrs = doc.checked()?.attributes;
    update_in(&state, &f.caller, &f.at, &var, attrs).await
}

async fn update_in(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    var: &str,
    attrs: VarAttributes,
) -> Result<Doc, ApiError> {
    let current = allowed_var(state, caller, ws, var, "update").await?;
    let mut errs = Vec::new();
    let input = attrs.parse(&mut errs);
    let spec = checked_spec(&input, Some(&current.spec), &ws.object_name(), &mut errs);
    if errs.is_empty()
        && let Some(e) = key_taken(state, ws, &spec, Some(&current.name_any()))
    {
        errs.push(e);
    }
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let object_name = current.name_any();
    let new_secret_value = new_secret_value(
        spec.sensitive,
        input.value.as_deref(),
        current.spec.sensitive,
        &current.spec.value,
    );
    if let Some(value) = &new_secret_value {
        write::owned_secret(
            state,
            current.as_ref(),
            &secret_name(&object_name),
            VARIABLE_SECRET_KEY,
            value,
        )
        .await?;
    }
    // Every update is a new version (TFE issues a new `version-id` even when nothing
    // changed).
    let revision = new_revision();
    let api = write::api::<WorkspaceVariable>(state, &ws.ns);
    let updated = write::guarded_patch(&api, (*current).clone(), |cur| {
        let mut target = spec.clone();
        if target.sensitive {
            target.value_from = Some(SecretKeyRef {
                name: secret_name(&object_name),
                key: VARIABLE_SECRET_KEY.to_owned(),
            });
        }
        let spec_patch = write::spec_diff(&cur.spec, &target)?;
        Ok(Some(json!({
            "spec": spec_patch.unwrap_or_else(|| json!({})),
            "metadata": {"annotations": {ANNOTATION_VALUE_REVISION: &revision}},
        })))
    })
    .await?;
    write::wait_seen(state, &updated).await;
    Ok(Doc::ok(render(&updated, &ws.id())))
}

async fn remove(
    State(state): State<AppState>,
    f: Found<Workspace>,
    Path((_, var)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    remove_in(&state, &f.caller, &f.at, &var).await
}

async fn remove_in(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    var: &str,
) -> Result<Response, ApiError> {
    let current = allowed_var(state, caller, ws, var, "delete").await?;
    write::delete_if_present(state, current.as_ref()).await?;
    Ok(no_content())
}

// ---- the older /vars routes ----

/// The workspace of `filter[organization][name]` and `filter[workspace][name]` (both
/// required: 400 without), if the caller may read it.
async fn filtered_workspace(
    state: &AppState,
    caller: &Caller,
    q: &QueryParams,
) -> Result<Located<Workspace>, ApiError> {
    q.supported_filters(&["filter[organization][name]", "filter[workspace][name]"])?;
    let required = |key: &'static str| {
        q.non_empty(key).ok_or_else(|| {
            ApiError::bad_parameter(key, format!("{key} is required to list variables"))
        })
    };
    let org = required("filter[organization][name]")?;
    let name = required("filter[workspace][name]")?;
    state.readable_by_name::<Workspace>(caller, org, name).await
}

async fn list_legacy(Authed { state, caller }: Authed, q: QueryParams) -> Result<Doc, ApiError> {
    let ws = filtered_workspace(&state, &caller, &q).await?;
    list_of(&state, &caller, &ws, &q).await
}

async fn create_legacy(
    Authed { state, caller }: Authed,
    JsonApi(doc): JsonApi<Document<VarAttributes, VarRelationships>>,
) -> Result<Doc, ApiError> {
    let data = doc.checked()?;
    let ws_id = match data.relationships.workspace.as_ref().map(ToOne::id) {
        Some(Some(Some(id))) => id.to_owned(),
        _ => {
            return Err(ApiError::invalid(
                "/data/relationships/workspace",
                "the variable's workspace is required (relationships.workspace)",
            ));
        }
    };
    let ws = state.readable::<Workspace>(&caller, &ws_id).await?;
    create_in(&state, &caller, &ws, data.attributes).await
}

/// The workspace of variable `var`, if the caller may read both the workspace and
/// variables (404 otherwise, whichever is missing).
async fn workspace_of_var(
    state: &AppState,
    caller: &Caller,
    var: &str,
) -> Result<Located<Workspace>, ApiError> {
    let not_found = || ApiError::not_found("variable not found");
    let (ns, ws_name) = {
        let idx = state.index.read();
        let v = idx.workspace_variables().get(var).ok_or_else(not_found)?;
        (v.namespace().unwrap_or_default(), v.spec.workspace.clone())
    };
    let ws_id = {
        let idx = state.index.read();
        idx.workspaces_in(&ns)
            .and_then(|w| {
                w.uids_by_name()
                    .filter_map(|u| idx.workspace_by_uid(u))
                    .find(|w| w.name_any() == ws_name)
                    .map(|w| id_of(w.as_ref()))
            })
            .ok_or_else(not_found)?
    };
    state
        .readable::<Workspace>(caller, &ws_id)
        .await
        .map_err(|_| not_found())
}

async fn update_legacy(
    Authed { state, caller }: Authed,
    Path(var): Path<String>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    let attrs = doc.checked()?.attributes;
    let ws = workspace_of_var(&state, &caller, &var).await?;
    update_in(&state, &caller, &ws, &var, attrs).await
}

async fn remove_legacy(
    Authed { state, caller }: Authed,
    Path(var): Path<String>,
) -> Result<Response, ApiError> {
    let ws = workspace_of_var(&state, &caller, &var).await?;
    remove_in(&state, &caller, &ws, &var).await
}

#[cfg(test)]
mod tests;
