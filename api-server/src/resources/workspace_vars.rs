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
//! digest of the variable (`WorkspaceVariableSpec::version_id`), so it changes with every
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
use terrace_crds::rules::{
    VariableCategory, new_secret_value, validate_variable_description,
    validate_workspace_variable_hcl, validate_workspace_variable_key,
};
use terrace_crds::{Workspace, WorkspaceVariable, WorkspaceVariableSpec};

pub use crate::documents::variables::secret_name;
use crate::documents::variables::{VarAttributes, VarInput, ptr};
use crate::prelude::*;
use crate::render::{page_slice, pagination};
use terrace_crds::rules::Page;

/// The RBAC resource of the checks on workspace variables.
const RESOURCE: &str = "workspacevariables";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/workspaces/{id}/vars", get(list_vars).post(create))
        .route(
            "/api/v2/workspaces/{id}/vars/{var}",
            get(show).patch(update).delete(remove),
        )
        .route("/api/v2/vars", get(list_legacy).post(create_legacy))
        .route(
            "/api/v2/vars/{var}",
            patch(update_legacy).delete(remove_legacy),
        )
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

/// The variable a create or update leaves, checked against the rules of the CRD: every
/// broken rule is one error in `errs`. `current` is the variable updated (None: create).
fn checked_spec(
    input: &VarInput,
    current: Option<&WorkspaceVariableSpec>,
    workspace: &str,
    errs: &mut Vec<FieldError>,
) -> WorkspaceVariableSpec {
    let given = |attr: &str, errs: &[FieldError]| errs.iter().any(|e| e.pointer == ptr(attr));
    let cur = current.cloned().unwrap_or_default();
    let category_text = input
        .category
        .clone()
        .or_else(|| current.map(|c| c.category.clone()))
        .unwrap_or_default();
    let category = if given("category", errs) {
        None
    } else {
        match VariableCategory::parse(&category_text) {
            Ok(c) => Some(c),
            Err(v) => {
                errs.push(v.into());
                None
            }
        }
    };
    let key = input.key.clone().unwrap_or(cur.key.clone());
    if let Some(c) = category
        && !given("key", errs)
        && let Err(v) = validate_workspace_variable_key(&key, c)
    {
        errs.push(v.into());
    }
    let hcl = input.hcl.unwrap_or(cur.hcl);
    if let Some(c) = category
        && !given("hcl", errs)
        && let Err(v) = validate_workspace_variable_hcl(hcl, c)
    {
        errs.push(v.into());
    }
    if let Some(d) = &input.description
        && let Err(v) = validate_variable_description(d)
    {
        errs.push(v.into());
    }
    if cur.sensitive && input.sensitive == Some(false) {
        errs.push(FieldError::attribute(
            "sensitive",
            "Sensitive cannot be changed from true to false; delete and recreate the variable",
        ));
    }
    let sensitive = cur.sensitive || input.sensitive == Some(true);
    WorkspaceVariableSpec {
        workspace: workspace.to_owned(),
        key,
        value: if sensitive {
            String::new()
        } else {
            input.value.clone().unwrap_or(cur.value)
        },
        value_from: None,
        description: input.description.clone().or(cur.description),
        category: category_text,
        hcl,
        sensitive,
    }
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

/// Ok when the caller may `verb` workspace variables of `ws` (`name`: the one concerned);
/// 404 otherwise.
async fn allow(
    state: &AppState,
    caller: &Caller,
    ws: &Located<Workspace>,
    verb: &'static str,
    name: Option<&str>,
) -> Result<(), ApiError> {
    let check = Check::new(verb, RESOURCE, &ws.ns, name);
    state
        .require(caller, &check, Deny::NotFound, || {
            ApiError::not_found("variable not found")
        })
        .await
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
    let asked = q.get("page[number]").is_some() || q.get("page[size]").is_some();
    let page = q.page()?;
    allow(state, caller, ws, "list", None).await?;
    let vars = vars_of(state, ws);
    let page = if asked {
        page
    } else {
        Page {
            number: 1,
            size: u32::try_from(vars.len().max(1)).unwrap_or(u32::MAX),
        }
    };
    let ws_id = ws.id();
    let base = format!("/api/v2/workspaces/{ws_id}/vars");
    let data: Vec<Value> = page_slice(&vars, page)
        .iter()
        .map(|v| render(v, &ws_id))
        .collect();
    let (meta, links) = pagination(&base, page, vars.len());
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    ))
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
    let mut meta = write::owned_meta(&id, ws, &[]);
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
    let revision = new_secret_value.is_some().then(new_revision);
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
        if spec_patch.is_none() && revision.is_none() {
            return Ok(None);
        }
        let mut patch = json!({"spec": spec_patch.unwrap_or_else(|| json!({}))});
        if let Some(r) = &revision {
            patch["metadata"] = json!({"annotations": {ANNOTATION_VALUE_REVISION: r}});
        }
        Ok(Some(patch))
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

async fn list_legacy(
    State(state): State<AppState>,
    caller: Caller,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let ws = filtered_workspace(&state, &caller, &q).await?;
    list_of(&state, &caller, &ws, &q).await
}

async fn create_legacy(
    State(state): State<AppState>,
    caller: Caller,
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
    State(state): State<AppState>,
    caller: Caller,
    Path(var): Path<String>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    let attrs = doc.checked()?.attributes;
    let ws = workspace_of_var(&state, &caller, &var).await?;
    update_in(&state, &caller, &ws, &var, attrs).await
}

async fn remove_legacy(
    State(state): State<AppState>,
    caller: Caller,
    Path(var): Path<String>,
) -> Result<Response, ApiError> {
    let ws = workspace_of_var(&state, &caller, &var).await?;
    remove_in(&state, &caller, &ws, &var).await
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{DeleteParams, PostParams};
    use kube::{Api, ResourceExt};
    use serde_json::{Value, json};
    use terrace_crds::{WorkspaceVariable, WorkspaceVariableSpec};

    use super::{VARIABLE_SECRET_KEY, secret_name};
    use crate::Edition;
    use crate::testing::*;

    const WS: &str = "ws-VarsWorkspace0001";

    async fn with_workspace() -> Harness {
        let h = harness(Edition::SelfHosted).await;
        h.workspace(WS, "prod", |_| {}).await;
        h
    }

    fn vars() -> String {
        format!("/api/v2/workspaces/{WS}/vars")
    }

    fn body(attrs: Value) -> Option<Value> {
        Some(json!({"data": {"type": "vars", "attributes": attrs}}))
    }

    fn pointers(doc: &Value) -> Vec<String> {
        let mut p: Vec<String> = doc["errors"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|x| x["source"]["pointer"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        p.sort();
        p
    }

    fn indexed(h: &Harness, id: &str) -> WorkspaceVariable {
        h.state
            .index
            .read()
            .workspace_variables()
            .get(id)
            .map(|v| (**v).clone())
            .unwrap_or_else(|| panic!("{id} not indexed"))
    }

    /// Create (TFE's shape: configurable, version-id, created-at), show, update
    /// (version-id changes), list, delete; the object is owned by its workspace.
    #[tokio::test]
    async fn crud() {
        let h = with_workspace().await;
        let (st, doc) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": "region", "value": "eu-west-1", "description": "where", "category": "terraform"})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let d = &doc["data"];
        let id = d["id"].as_str().unwrap_or_default().to_owned();
        assert!(id.starts_with("var-"), "{id}");
        assert_eq!(d["type"], "vars");
        let a = &d["attributes"];
        assert_eq!(a["key"], "region");
        assert_eq!(a["value"], "eu-west-1");
        assert_eq!(a["description"], "where");
        assert_eq!(a["category"], "terraform");
        assert_eq!(
            (a["hcl"].as_bool(), a["sensitive"].as_bool()),
            (Some(false), Some(false))
        );
        assert!(a["created-at"].is_string(), "{a}");
        let v1 = a["version-id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(v1.len(), 32);
        assert_eq!(
            d["relationships"]["configurable"]["data"],
            json!({"id": WS, "type": "workspaces"})
        );
        assert_eq!(
            d["relationships"]["configurable"]["links"]["related"],
            format!("/api/v2/workspaces/{WS}")
        );
        let obj = indexed(&h, &id);
        assert_eq!(obj.spec.workspace, "ws-varsworkspace0001");
        let owners = obj.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            (
                owners.len(),
                owners[0].kind.as_str(),
                owners[0].name.as_str()
            ),
            (1, "Workspace", "ws-varsworkspace0001")
        );
        let one = format!("{}/{id}", vars());
        let (st, doc) = h.call("GET", &one, None).await;
        assert_eq!(
            (st, doc["data"]["attributes"]["version-id"].as_str()),
            (200, Some(v1.as_str()))
        );
        // Update: only what is given changes; version-id follows.
        let (st, doc) = h
            .call(
                "PATCH",
                &one,
                body(json!({"value": "[\"a\"]", "hcl": true})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let a = &doc["data"]["attributes"];
        assert_eq!(
            (a["value"].as_str(), a["hcl"].as_bool()),
            (Some("[\"a\"]"), Some(true))
        );
        assert_eq!(a["description"], "where");
        assert_ne!(a["version-id"].as_str(), Some(v1.as_str()));
        // An update that changes nothing keeps the version.
        let v2 = a["version-id"].clone();
        let (st, doc) = h.call("PATCH", &one, body(json!({"key": "region"}))).await;
        assert_eq!((st, &doc["data"]["attributes"]["version-id"]), (200, &v2));
        let (st, doc) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": "TF_LOG", "value": "INFO", "category": "env"})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let (st, doc) = h.call("GET", &vars(), None).await;
        assert_eq!(st, 200);
        let keys: Vec<&str> = doc["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v["attributes"]["key"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(keys, ["TF_LOG", "region"], "env first, then terraform");
        assert_eq!(doc["meta"]["pagination"]["total-count"], 2);
        // Delete.
        assert_eq!(h.call("DELETE", &one, None).await.0, 204);
        assert_eq!(h.call("GET", &one, None).await.0, 404);
        assert_eq!(h.call("DELETE", &one, None).await.0, 404);
        assert_eq!(h.call("PATCH", &one, body(json!({}))).await.0, 404);
        let (_, doc) = h.call("GET", &vars(), None).await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));
    }

    /// A sensitive value goes into a Secret owned by the variable and is never answered
    /// (`value: null`) nor kept in the object; a new value changes the version; it cannot
    /// become non-sensitive; a plain variable made sensitive moves its value.
    #[tokio::test]
    async fn sensitive_values_are_never_returned() {
        let h = with_workspace().await;
        let (st, doc) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": "AWS_SECRET_ACCESS_KEY", "value": "hunter2", "category": "env", "sensitive": true})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        assert!(!doc.to_string().contains("hunter2"), "{doc}");
        assert_eq!(doc["data"]["attributes"]["value"], Value::Null);
        assert_eq!(doc["data"]["attributes"]["sensitive"], true);
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let v1 = doc["data"]["attributes"]["version-id"].clone();
        let obj = indexed(&h, &id);
        assert_eq!(obj.spec.value, "");
        let from = obj.spec.value_from.clone().unwrap_or_default();
        assert_eq!(
            (from.name.clone(), from.key.as_str()),
            (secret_name(&obj.name_any()), VARIABLE_SECRET_KEY)
        );
        let secrets: Api<Secret> = Api::namespaced(h.state.client.clone(), ORG);
        let secret_value = |s: Secret| {
            s.data
                .and_then(|d| d.get(VARIABLE_SECRET_KEY).cloned())
                .map(|b| b.0)
        };
        let s = secrets
            .get(&from.name)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.metadata
                .owner_references
                .as_ref()
                .map(|o| o[0].name.clone()),
            Some(obj.name_any())
        );
        assert_eq!(secret_value(s), Some(b"hunter2".to_vec()));
        let one = format!("{}/{id}", vars());
        for (m, u) in [("GET", one.as_str()), ("GET", vars().as_str())] {
            let (st, doc) = h.call(m, u, None).await;
            assert_eq!(st, 200);
            assert!(!doc.to_string().contains("hunter2"), "{doc}");
        }
        // A new value: into the Secret, new version, still not shown.
        let (st, doc) = h
            .call("PATCH", &one, body(json!({"value": "correct-horse"})))
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["attributes"]["value"], Value::Null);
        assert_ne!(doc["data"]["attributes"]["version-id"], v1);
        let s = secrets
            .get(&from.name)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(secret_value(s), Some(b"correct-horse".to_vec()));
        let annotations = indexed(&h, &id).annotations().clone();
        assert!(!format!("{annotations:?}").contains("correct-horse"));
        // No way back.
        let (st, doc) = h
            .call("PATCH", &one, body(json!({"sensitive": false})))
            .await;
        assert_eq!(st, 422);
        assert_eq!(pointers(&doc), ["/data/attributes/sensitive"]);
        // A plain variable made sensitive: its value moves into the Secret.
        let (_, doc) = h
            .call(
                "POST",
                &vars(),
                body(
                    json!({"key": "token", "value": "plain-then-secret", "category": "terraform"}),
                ),
            )
            .await;
        let id2 = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("{}/{id2}", vars()),
                body(json!({"sensitive": true})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert!(!doc.to_string().contains("plain-then-secret"));
        let obj2 = indexed(&h, &id2);
        assert_eq!(obj2.spec.value, "");
        let s = secrets
            .get(&secret_name(&obj2.name_any()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(secret_value(s), Some(b"plain-then-secret".to_vec()));
    }

    /// 422s, one error per attribute: category missing or unknown, a key invalid in its
    /// category, hcl on an env variable, a duplicate key in the same category (the same
    /// key in the other category is fine), a long description, wrong types.
    #[tokio::test]
    async fn invalid_variables_are_422() {
        let h = with_workspace().await;
        let post = |attrs: Value| {
            let h = &h;
            async move { h.call("POST", &vars(), body(attrs)).await }
        };
        let (st, doc) = post(json!({"key": "a", "value": "b"})).await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/category".to_owned()])
        );
        let (st, doc) = post(json!({"key": "a", "category": "policy-set"})).await;
        assert_eq!(st, 422);
        assert_eq!(pointers(&doc), ["/data/attributes/category"]);
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("is not included in the list"),
            "{doc}"
        );
        let (st, doc) = post(json!({"value": "b", "category": "env"})).await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/key".to_owned()])
        );
        let (st, doc) = post(json!({"key": "my-var", "category": "env"})).await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/key".to_owned()])
        );
        let (st, _) = post(json!({"key": "my-var", "category": "terraform"})).await;
        assert_eq!(st, 201);
        let (st, doc) = post(json!({"key": "1x", "category": "terraform", "hcl": "yes", "description": "d".repeat(513)})).await;
        assert_eq!(st, 422);
        assert_eq!(
            pointers(&doc),
            [
                "/data/attributes/description",
                "/data/attributes/hcl",
                "/data/attributes/key"
            ]
        );
        let (st, doc) = post(json!({"key": "TF_LOG", "category": "env", "hcl": true})).await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/hcl".to_owned()])
        );
        // Duplicates: same key and category is taken, the other category is not.
        let (st, doc) = post(json!({"key": "my-var", "category": "terraform"})).await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/key".to_owned()])
        );
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("has already been taken"),
            "{doc}"
        );
        let (st, doc) = post(json!({"key": "REGION", "category": "env"})).await;
        assert_eq!(st, 201, "{doc}");
        let (st, doc) = post(json!({"key": "REGION", "category": "terraform"})).await;
        assert_eq!(st, 201, "{doc}");
        let env_id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        // An update into a taken key, or making a terraform HCL variable env, is refused.
        let one = format!("{}/{env_id}", vars());
        let (st, doc) = h.call("PATCH", &one, body(json!({"key": "my-var"}))).await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/key".to_owned()])
        );
        let (st, _) = h.call("PATCH", &one, body(json!({"hcl": true}))).await;
        assert_eq!(st, 200);
        let (st, doc) = h
            .call("PATCH", &one, body(json!({"category": "env"})))
            .await;
        assert_eq!(st, 422, "{doc}");
        assert_eq!(pointers(&doc), ["/data/attributes/hcl"]);
        // Without hcl it would collide with the env REGION.
        let (st, doc) = h
            .call(
                "PATCH",
                &one,
                body(json!({"category": "env", "hcl": false})),
            )
            .await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/attributes/key".to_owned()])
        );
        let (st, doc) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "workspaces", "attributes": {"key": "k", "category": "env"}}})))
            .await;
        assert_eq!((st, pointers(&doc)), (422, vec!["/data/type".to_owned()]));
    }

    /// 404 for an unknown workspace, for one the caller cannot read, and for variables
    /// without the right on workspacevariables; a reader lists and reads, a writer writes.
    #[tokio::test]
    async fn rights() {
        let h = with_workspace().await;
        assert_eq!(
            h.call("GET", "/api/v2/workspaces/ws-NoSuchWorkspace01/vars", None)
                .await
                .0,
            404
        );
        assert_eq!(
            h.call(
                "POST",
                "/api/v2/workspaces/ws-NoSuchWorkspace01/vars",
                body(json!({"key": "k", "category": "env"}))
            )
            .await
            .0,
            404
        );
        let (_, doc) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": "k", "value": "v", "category": "env"})),
            )
            .await;
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let one = format!("{}/{id}", vars());
        // No rights at all: the workspace does not exist for the caller.
        let nobody = h.token_with_role(None).await;
        for (m, u) in [("GET", vars()), ("GET", one.clone())] {
            assert_eq!(h.call_as(&nobody, m, &u, None).await.0, 404, "{m} {u}");
        }
        // The workspace but no variables: 404 too.
        let ws_only = h
            .token_with_role(Some(vec![rule(&["get", "list"], &["workspaces"])]))
            .await;
        assert_eq!(h.call_as(&ws_only, "GET", &vars(), None).await.0, 404);
        assert_eq!(h.call_as(&ws_only, "GET", &one, None).await.0, 404);
        // Variables but not the workspace: 404.
        let vars_only = h
            .token_with_role(Some(vec![rule(
                &["get", "list", "create"],
                &["workspacevariables"],
            )]))
            .await;
        assert_eq!(h.call_as(&vars_only, "GET", &vars(), None).await.0, 404);
        // A reader reads, cannot write.
        let reader = h
            .token_with_role(Some(vec![rule(
                &["get", "list"],
                &["workspaces", "workspacevariables"],
            )]))
            .await;
        let (st, doc) = h.call_as(&reader, "GET", &vars(), None).await;
        assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(1)));
        assert_eq!(h.call_as(&reader, "GET", &one, None).await.0, 200);
        assert_eq!(
            h.call_as(
                &reader,
                "POST",
                &vars(),
                body(json!({"key": "x", "category": "env"}))
            )
            .await
            .0,
            404
        );
        assert_eq!(
            h.call_as(&reader, "PATCH", &one, body(json!({"value": "w"})))
                .await
                .0,
            404
        );
        assert_eq!(h.call_as(&reader, "DELETE", &one, None).await.0, 404);
        // A writer.
        let writer = h
            .token_with_role(Some(vec![
                rule(&["get", "list"], &["workspaces"]),
                rule(
                    &["get", "list", "create", "update", "delete"],
                    &["workspacevariables"],
                ),
            ]))
            .await;
        assert_eq!(
            h.call_as(
                &writer,
                "POST",
                &vars(),
                body(json!({"key": "x", "category": "env"}))
            )
            .await
            .0,
            201
        );
        assert_eq!(
            h.call_as(&writer, "PATCH", &one, body(json!({"value": "w"})))
                .await
                .0,
            200
        );
        assert_eq!(h.call_as(&writer, "DELETE", &one, None).await.0, 204);
        // A variable of another workspace is not found through this one.
        h.workspace("ws-OtherWorkspace0001", "staging", |_| {})
            .await;
        let (_, doc) = h.call("GET", &vars(), None).await;
        let x = doc["data"][0]["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            h.call(
                "GET",
                &format!("/api/v2/workspaces/ws-OtherWorkspace0001/vars/{x}"),
                None
            )
            .await
            .0,
            404
        );
    }

    /// Without page parameters the list is whole (TFE's list is not paginated); with them,
    /// paged like every list.
    #[tokio::test]
    async fn paging() {
        let h = with_workspace().await;
        for i in 0..25 {
            let (st, _) = h
                .call(
                    "POST",
                    &vars(),
                    body(json!({"key": format!("k{i:02}"), "category": "terraform"})),
                )
                .await;
            assert_eq!(st, 201);
        }
        let (st, doc) = h.call("GET", &vars(), None).await;
        assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(25)));
        assert_eq!(doc["meta"]["pagination"]["total-count"], 25);
        let (st, doc) = h
            .call(
                "GET",
                &format!("{}?page%5Bsize%5D=10&page%5Bnumber%5D=3", vars()),
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(5));
        assert_eq!(doc["data"][0]["attributes"]["key"], "k20");
        assert_eq!(doc["meta"]["pagination"]["current-page"], 3);
        assert_eq!(doc["meta"]["pagination"]["total-pages"], 3);
        assert_eq!(
            h.call("GET", &format!("{}?page%5Bsize%5D=x", vars()), None)
                .await
                .0,
            400
        );
        assert_eq!(
            h.call("GET", &format!("{}?filter%5Bkey%5D=x", vars()), None)
                .await
                .0,
            400
        );
    }

    /// The older routes: list by organization and workspace name, create with the
    /// workspace as a relationship, update and delete by variable ID.
    #[tokio::test]
    async fn legacy_routes() {
        let h = with_workspace().await;
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/vars",
                Some(json!({"data": {"type": "vars", "attributes": {"key": "region", "value": "eu", "category": "terraform"},
                    "relationships": {"workspace": {"data": {"id": WS, "type": "workspaces"}}}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/vars",
                body(json!({"key": "k", "category": "env"})),
            )
            .await;
        assert_eq!(
            (st, pointers(&doc)),
            (422, vec!["/data/relationships/workspace".to_owned()])
        );
        let list = "/api/v2/vars?filter%5Borganization%5D%5Bname%5D=acme&filter%5Bworkspace%5D%5Bname%5D=prod";
        let (st, doc) = h.call("GET", list, None).await;
        assert_eq!(
            (st, doc["data"][0]["id"].as_str()),
            (200, Some(id.as_str()))
        );
        assert_eq!(
            h.call(
                "GET",
                "/api/v2/vars?filter%5Borganization%5D%5Bname%5D=acme",
                None
            )
            .await
            .0,
            400
        );
        assert_eq!(
            h.call("GET", "/api/v2/vars?filter%5Borganization%5D%5Bname%5D=acme&filter%5Bworkspace%5D%5Bname%5D=nope", None).await.0,
            404
        );
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/vars/{id}"),
                body(json!({"value": "us"})),
            )
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["value"].as_str()),
            (200, Some("us"))
        );
        assert_eq!(
            h.call("DELETE", &format!("/api/v2/vars/{id}"), None)
                .await
                .0,
            204
        );
        assert_eq!(
            h.call("DELETE", &format!("/api/v2/vars/{id}"), None)
                .await
                .0,
            404
        );
    }

    /// The CRD's CEL rules hold for kubectl users too: hcl on env, an env key with a dash,
    /// a sensitive value in the spec, un-sensitive, moving to another workspace.
    #[tokio::test]
    async fn kubectl_writes_meet_the_same_rules() {
        let h = with_workspace().await;
        let api: Api<WorkspaceVariable> = Api::namespaced(h.state.client.clone(), ORG);
        let spec = |f: &dyn Fn(&mut WorkspaceVariableSpec)| {
            let mut s = WorkspaceVariableSpec {
                workspace: "ws-varsworkspace0001".into(),
                key: "region".into(),
                category: "terraform".into(),
                ..Default::default()
            };
            f(&mut s);
            s
        };
        type Change<'a> = &'a dyn Fn(&mut WorkspaceVariableSpec);
        let refused: [(&str, Change); 4] = [
            ("hcl", &|s| {
                s.category = "env".into();
                s.hcl = true;
            }),
            ("env key", &|s| {
                s.category = "env".into();
                s.key = "my-var".into();
            }),
            ("sensitive value", &|s| {
                s.sensitive = true;
                s.value = "x".into();
            }),
            ("category", &|s| s.category = "policy-set".into()),
        ];
        for (what, f) in refused {
            let r = api
                .create(
                    &PostParams::default(),
                    &WorkspaceVariable::new("bad", spec(f)),
                )
                .await;
            assert!(r.is_err(), "{what} accepted");
        }
        let ok = api
            .create(
                &PostParams::default(),
                &WorkspaceVariable::new("good", spec(&|s| s.sensitive = true)),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut back = ok.clone();
        back.spec.sensitive = false;
        assert!(
            api.replace("good", &PostParams::default(), &back)
                .await
                .is_err()
        );
        let mut moved = ok.clone();
        moved.spec.workspace = "other".into();
        assert!(
            api.replace("good", &PostParams::default(), &moved)
                .await
                .is_err()
        );
        api.delete("good", &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
