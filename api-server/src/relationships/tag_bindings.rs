//! Key-value tag bindings (SPEC.md B17) of workspaces and projects.
//!
//! Direct bindings are `spec.tagBindings` of the Workspace or Project, in the order given.
//! A workspace's effective bindings are its direct ones followed by those of its project
//! that it does not override (a direct binding wins over an inherited key); inherited ones
//! point at the project with `links.inherited-from`. They are computed from the index on
//! every read, so a project change shows at once. Not paginated.
//!
//! Paths: the vendor schema's `/relationships/tag-bindings` (GET, POST adds, PATCH
//! replaces; 204) and the clients' `/tag-bindings` (GET, PATCH adds and answers the
//! resulting list), plus `/effective-tag-bindings`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};
use terrace_crds::common::{EffectiveTagBinding, TagBinding};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::rules::validate_tag_binding;
use terrace_crds::{Organization, Project, Workspace};

use super::{Denied, administrable, data_list, patch_spec, patch_workspace, readable, stable_id};
use crate::auth::{Caller, Check};
use crate::index::{Inner, rv_at_least};
use crate::jsonapi::{Doc, JsonBody};
use crate::workspaces::INDEX_WAIT;
use crate::workspaces::render::workspace_id;
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/tag-bindings",
            get(ws_list).patch(ws_add_listing),
        )
        .route(
            "/api/v2/workspaces/{id}/relationships/tag-bindings",
            get(ws_list).post(ws_add).patch(ws_replace),
        )
        .route(
            "/api/v2/workspaces/{id}/effective-tag-bindings",
            get(ws_effective),
        )
        .route(
            "/api/v2/projects/{id}/tag-bindings",
            get(prj_list).patch(prj_add_listing),
        )
        .route(
            "/api/v2/projects/{id}/relationships/tag-bindings",
            get(prj_list).post(prj_add).patch(prj_replace),
        )
        .route(
            "/api/v2/projects/{id}/effective-tag-bindings",
            get(prj_effective),
        )
}

/// A workspace's effective bindings: direct ones in order, then the project's bindings
/// whose keys it does not bind itself.
pub fn effective(ws: &Workspace, project: Option<&Project>) -> Vec<EffectiveTagBinding> {
    let mut out: Vec<EffectiveTagBinding> = ws
        .spec
        .tag_bindings
        .iter()
        .map(|b| EffectiveTagBinding {
            key: b.key.clone(),
            value: b.value.clone(),
            inherited_from: None,
        })
        .collect();
    if let Some(p) = project {
        let pid = p.labels().get(LABEL_ID).cloned();
        for b in &p.spec.tag_bindings {
            if !ws.spec.tag_bindings.iter().any(|d| d.key == b.key) {
                out.push(EffectiveTagBinding {
                    key: b.key.clone(),
                    value: b.value.clone(),
                    inherited_from: pid.clone(),
                });
            }
        }
    }
    out
}

/// The effective bindings of `ws` with its project looked up in the index.
pub fn effective_in(idx: &Inner, ws: &Workspace) -> Vec<EffectiveTagBinding> {
    effective(ws, idx.project_of(ws).map(Arc::as_ref))
}

fn render_binding(owner_id: &str, b: &TagBinding) -> Value {
    json!({
        "id": stable_id("tb-", &[owner_id, &b.key]),
        "type": "tag-bindings",
        "attributes": {"key": b.key, "value": b.value},
    })
}

fn render_effective(owner_id: &str, b: &EffectiveTagBinding) -> Value {
    let mut doc = json!({
        "id": stable_id("", &[owner_id, &b.key, "effective"]),
        "type": "effective-tag-bindings",
        "attributes": {"key": b.key, "value": b.value},
    });
    if let Some(p) = &b.inherited_from {
        let link = format!("/api/v2/projects/{p}");
        doc["attributes"]["links"] = json!({"inherited-from": link});
        doc["links"] = json!({"inherited-from": link});
        doc["relationships"] = json!({"inherited-from": {"data": {"id": p, "type": "projects"}}});
    }
    doc
}

fn list_doc(owner_id: &str, bindings: &[TagBinding]) -> Value {
    json!({"data": bindings.iter().map(|b| render_binding(owner_id, b)).collect::<Vec<_>>()})
}

/// The bindings of a request body (`data[]` of `tag-bindings`), validated; a key given
/// twice keeps its last value.
pub fn parse_bindings(body: &Value) -> Result<Vec<TagBinding>, ApiError> {
    let mut out: Vec<TagBinding> = Vec::new();
    for (i, e) in data_list(body, "tag-bindings")?.iter().enumerate() {
        let attrs = e.get("attributes");
        let key = match attrs.and_then(|a| a.get("key")) {
            Some(Value::String(k)) => k.clone(),
            _ => {
                return Err(ApiError::Invalid {
                    pointer: format!("/data/{i}/attributes/key"),
                    detail: "key is required and must be a string".into(),
                });
            }
        };
        let value = match attrs.and_then(|a| a.get("value")) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(v)) => v.clone(),
            Some(_) => {
                return Err(ApiError::Invalid {
                    pointer: format!("/data/{i}/attributes/value"),
                    detail: "value must be a string".into(),
                });
            }
        };
        validate_tag_binding(&key, &value).map_err(|v| ApiError::Invalid {
            pointer: format!("/data/{i}/attributes/{}", v.attribute),
            detail: format!("{} {}", v.attribute, v.message),
        })?;
        match out.iter_mut().find(|b| b.key == key) {
            Some(b) => b.value = value,
            None => out.push(TagBinding { key, value }),
        }
    }
    Ok(out)
}

/// `current` with `added` merged in: existing keys take the new value in place, new keys
/// are appended.
pub fn merged(current: &[TagBinding], added: &[TagBinding]) -> Vec<TagBinding> {
    let mut out = current.to_vec();
    for a in added {
        match out.iter_mut().find(|b| b.key == a.key) {
            Some(b) => b.value = a.value.clone(),
            None => out.push(a.clone()),
        }
    }
    out
}

fn change(current: &[TagBinding], next: Vec<TagBinding>) -> Option<Value> {
    (current != next.as_slice()).then(|| json!({"tagBindings": next}))
}

// --- workspaces ---------------------------------------------------------------------

async fn ws_list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let l = readable(&state, &caller, &id).await?;
    Ok(Doc(StatusCode::OK, list_doc(&id, &l.ws.spec.tag_bindings)).into_response())
}

async fn ws_effective(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let l = readable(&state, &caller, &id).await?;
    let bindings = effective_in(&state.index.read(), &l.ws);
    let data: Vec<Value> = bindings.iter().map(|b| render_effective(&id, b)).collect();
    Ok(Doc(StatusCode::OK, json!({ "data": data })).into_response())
}

async fn ws_write(
    state: &AppState,
    caller: &Caller,
    id: &str,
    body: &Value,
    replace: bool,
) -> Result<Workspace, ApiError> {
    let l = administrable(state, caller, id, Denied::Forbidden).await?;
    let given = parse_bindings(body)?;
    let l = patch_workspace(state, &l, |w| {
        let next = if replace {
            given.clone()
        } else {
            merged(&w.spec.tag_bindings, &given)
        };
        Ok(change(&w.spec.tag_bindings, next))
    })
    .await?;
    Ok((*l.ws).clone())
}

async fn ws_add_listing(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let ws = ws_write(&state, &caller, &id, &body, false).await?;
    Ok(Doc(
        StatusCode::OK,
        list_doc(&workspace_id(&ws), &ws.spec.tag_bindings),
    )
    .into_response())
}

async fn ws_add(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    ws_write(&state, &caller, &id, &body, false).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn ws_replace(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    ws_write(&state, &caller, &id, &body, true).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// --- projects -----------------------------------------------------------------------

fn prj_not_found() -> ApiError {
    ApiError::NotFound("project not found".into())
}

/// The project if the caller may read it (and, with `admin`, update it).
async fn project(
    state: &AppState,
    caller: &Caller,
    id: &str,
    admin: bool,
) -> Result<(Arc<Project>, Arc<Organization>), ApiError> {
    let (p, org) = {
        let idx = state.index.read();
        let p = idx.project(id).cloned().ok_or_else(prj_not_found)?;
        let org = idx
            .organization_of_namespace(&p.namespace().unwrap_or_default())
            .cloned()
            .ok_or_else(prj_not_found)?;
        (p, org)
    };
    let ns = org.target_namespace();
    let name = p.name_any();
    if !state
        .auth
        .allowed(caller, &Check::new("get", "projects", ns, Some(&name)))
        .await?
    {
        return Err(prj_not_found());
    }
    if admin
        && !state
            .auth
            .allowed(caller, &Check::new("update", "projects", ns, Some(&name)))
            .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "admin access to the project is required".into(),
        ));
    }
    Ok((p, org))
}

async fn prj_list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (p, _) = project(&state, &caller, &id, false).await?;
    Ok(Doc(StatusCode::OK, list_doc(&id, &p.spec.tag_bindings)).into_response())
}

async fn prj_effective(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (p, _) = project(&state, &caller, &id, false).await?;
    let data: Vec<Value> = p
        .spec
        .tag_bindings
        .iter()
        .map(|b| {
            render_effective(
                &id,
                &EffectiveTagBinding {
                    key: b.key.clone(),
                    value: b.value.clone(),
                    inherited_from: None,
                },
            )
        })
        .collect();
    Ok(Doc(StatusCode::OK, json!({ "data": data })).into_response())
}

async fn prj_write(
    state: &AppState,
    caller: &Caller,
    id: &str,
    body: &Value,
    replace: bool,
) -> Result<Project, ApiError> {
    let (p, _) = project(state, caller, id, true).await?;
    let given = parse_bindings(body)?;
    let ns = p.namespace().unwrap_or_default();
    let api: Api<Project> = Api::namespaced(state.client.clone(), &ns);
    let updated = patch_spec(&api, (*p).clone(), |cur| {
        let next = if replace {
            given.clone()
        } else {
            merged(&cur.spec.tag_bindings, &given)
        };
        Ok(change(&cur.spec.tag_bindings, next))
    })
    .await?;
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let pid = id.to_owned();
    state
        .index
        .wait_until(INDEX_WAIT, |i| {
            i.project(&pid)
                .is_some_and(|p| rv_at_least(p.metadata.resource_version.as_deref(), &rv))
        })
        .await;
    Ok(updated)
}

async fn prj_add_listing(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let p = prj_write(&state, &caller, &id, &body, false).await?;
    Ok(Doc(StatusCode::OK, list_doc(&id, &p.spec.tag_bindings)).into_response())
}

async fn prj_add(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    prj_write(&state, &caller, &id, &body, false).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn prj_replace(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    prj_write(&state, &caller, &id, &body, true).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::relationships::testing::{DEFAULT_PROJECT, harness};

    fn tb(k: &str, v: &str) -> TagBinding {
        TagBinding {
            key: k.into(),
            value: v.into(),
        }
    }

    /// Adding merges by key in place; the body's last value for a key wins.
    #[test]
    fn merge_and_parse() {
        let cur = vec![tb("env", "dev"), tb("team", "a")];
        assert_eq!(
            merged(&cur, &[tb("env", "prod"), tb("new", "")]),
            vec![tb("env", "prod"), tb("team", "a"), tb("new", "")]
        );
        let body = json!({"data": [
            {"type": "tag-bindings", "attributes": {"key": "k", "value": "1"}},
            {"type": "tag-bindings", "attributes": {"key": "k", "value": "2"}},
            {"type": "tag-bindings", "attributes": {"key": "v"}},
        ]});
        assert_eq!(
            parse_bindings(&body).ok(),
            Some(vec![tb("k", "2"), tb("v", "")])
        );
        for bad in [
            json!({"data": [{"type": "tag-bindings", "attributes": {"key": ""}}]}),
            json!({"data": [{"type": "tag-bindings", "attributes": {"key": "k".repeat(129)}}]}),
            json!({"data": [{"type": "tag-bindings", "attributes": {"key": "k", "value": "v".repeat(257)}}]}),
            json!({"data": [{"type": "tags", "attributes": {"key": "k"}}]}),
            json!({"data": [{"type": "tag-bindings", "attributes": {"value": "v"}}]}),
        ] {
            assert!(
                matches!(parse_bindings(&bad), Err(ApiError::Invalid { .. })),
                "{bad}"
            );
        }
    }

    /// Effective bindings: direct first, then inherited keys the workspace does not bind,
    /// marked with the project.
    #[test]
    fn effective_overrides_inherited() {
        let mut ws = Workspace::new("w", Default::default());
        ws.spec.tag_bindings = vec![tb("env", "prod")];
        let mut p = Project::new("p", Default::default());
        p.metadata.labels = Some([(LABEL_ID.to_owned(), "prj-1".to_owned())].into());
        p.spec.tag_bindings = vec![tb("env", "dev"), tb("team", "core")];
        let e = effective(&ws, Some(&p));
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].key.as_str(), e[0].value.as_str()), ("env", "prod"));
        assert_eq!(e[0].inherited_from, None);
        assert_eq!(
            (e[1].key.as_str(), e[1].inherited_from.as_deref()),
            ("team", Some("prj-1"))
        );
    }

    /// Through the API: PATCH /tag-bindings adds and lists; the relationships PATCH
    /// replaces; effective bindings show the project's with links.inherited-from.
    #[tokio::test]
    async fn workspace_and_project_bindings() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-BBBBBBBBBBBBBBB1", "tb", |s| {
            s.tag_bindings = vec![tb("a", "1")]
        })
        .await;
        let base = "/api/v2/workspaces/ws-BBBBBBBBBBBBBBB1";
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("{base}/tag-bindings"),
                Some(json!({"data": [{"type": "tag-bindings", "attributes": {"key": "b", "value": "2"}}]})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        assert_eq!(doc["data"][1]["attributes"]["key"], "b");

        let (st, _) = h
            .call(
                "PATCH",
                &format!("{base}/relationships/tag-bindings"),
                Some(json!({"data": [{"type": "tag-bindings", "attributes": {"key": "env", "value": "prod"}}]})),
            )
            .await;
        assert_eq!(st, 204);
        let (_, doc) = h.call("GET", &format!("{base}/tag-bindings"), None).await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));

        let (st, _) = h
            .call(
                "POST",
                &format!("/api/v2/projects/{DEFAULT_PROJECT}/relationships/tag-bindings"),
                Some(json!({"data": [
                    {"type": "tag-bindings", "attributes": {"key": "env", "value": "dev"}},
                    {"type": "tag-bindings", "attributes": {"key": "team", "value": "core"}},
                ]})),
            )
            .await;
        assert_eq!(st, 204);
        let (st, doc) = h
            .call("GET", &format!("{base}/effective-tag-bindings"), None)
            .await;
        assert_eq!(st, 200);
        let data = doc["data"].as_array().cloned().unwrap_or_default();
        assert_eq!(data.len(), 2, "{doc}");
        assert_eq!(data[0]["attributes"]["value"], "prod");
        assert!(data[0].get("links").is_none());
        assert_eq!(data[1]["attributes"]["key"], "team");
        assert_eq!(
            data[1]["links"]["inherited-from"],
            format!("/api/v2/projects/{DEFAULT_PROJECT}")
        );
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/projects/{DEFAULT_PROJECT}/tag-bindings"),
                None,
            )
            .await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        let (st, _) = h
            .call("GET", "/api/v2/projects/prj-nope/tag-bindings", None)
            .await;
        assert_eq!(st, 404);
    }
}
