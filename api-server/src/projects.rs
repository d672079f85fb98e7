//! Projects: enough of the projects API for the workspace project relationship,
//! `filter[project][id]` and moves between projects.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Organization, Project, ProjectSpec};

use crate::auth::{Caller, Check};
use crate::jsonapi::{
    Doc, JsonBody, QueryParams, attributes, page_slice, pagination, resource_object, timestamp,
};
use crate::orgs::visible_org;
use crate::workspaces::kube_err;
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/projects",
            get(list).post(create),
        )
        .route(
            "/api/v2/projects/{id}",
            get(show).patch(update).delete(delete),
        )
}

fn not_found() -> ApiError {
    ApiError::NotFound("project not found".into())
}

/// The JSON:API `data` of a project.
pub fn render(p: &Project, org: &Organization) -> Value {
    let id = p.labels().get(LABEL_ID).cloned().unwrap_or_default();
    json!({
        "id": id,
        "type": "projects",
        "attributes": {
            "name": p.spec.name,
            "description": p.spec.description.clone().unwrap_or_default(),
            "created-at": p.metadata.creation_timestamp.as_ref().map(|t| timestamp(&t.0)),
            "workspace-count": p.status.as_ref().and_then(|s| s.workspace_count).unwrap_or(0),
            "default-execution-mode": org.spec.settings.default_execution_mode,
            "auto-destroy-activity-duration": Value::Null,
            "permissions": {"can-read": true, "can-update": true, "can-destroy": true, "can-create-workspace": true},
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
        },
        "links": {"self": format!("/api/v2/projects/{id}")},
    })
}

async fn located(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<(Arc<Project>, Arc<Organization>), ApiError> {
    let (p, org) = {
        let idx = state.index.read();
        let p = idx.project(id).cloned().ok_or_else(not_found)?;
        let org = idx
            .organization_of_namespace(&p.namespace().unwrap_or_default())
            .cloned()
            .ok_or_else(not_found)?;
        (p, org)
    };
    let check = Check::new(
        "get",
        "projects",
        org.target_namespace(),
        Some(&p.name_any()),
    );
    if state.auth.allowed(caller, &check).await? {
        Ok((p, org))
    } else {
        Err(not_found())
    }
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let ns = org.target_namespace().to_owned();
    let q = QueryParams::parse(raw.as_deref());
    let page = q.page()?;
    let mut projects: Vec<Arc<Project>> = if state
        .auth
        .allowed(&caller, &Check::new("list", "projects", &ns, None))
        .await?
    {
        state
            .index
            .read()
            .projects_in(&ns)
            .filter(|p| p.labels().contains_key(LABEL_ID))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    if let Some(name) = q.get("filter[names]").or(q.get("q")) {
        let name = name.to_ascii_lowercase();
        projects.retain(|p| p.spec.name.to_ascii_lowercase().contains(&name));
    }
    projects.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    let data: Vec<Value> = page_slice(&projects, page)
        .iter()
        .map(|p| render(p, &org))
        .collect();
    let (meta, links) = pagination(
        &format!("/api/v2/organizations/{}/projects", org.tfe_name()),
        page,
        projects.len(),
    );
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    )
    .into_response())
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (p, org) = located(&state, &caller, &id).await?;
    Ok(Doc(StatusCode::OK, json!({"data": render(&p, &org)})).into_response())
}

fn name_attr(
    attrs: &serde_json::Map<String, Value>,
    required: bool,
) -> Result<Option<String>, ApiError> {
    let bad = |d: &str| ApiError::Invalid {
        pointer: "/data/attributes/name".into(),
        detail: d.to_owned(),
    };
    match attrs.get("name") {
        None if required => Err(bad("name is required")),
        None => Ok(None),
        Some(Value::String(n)) => {
            let ok = !n.trim().is_empty()
                && n.len() <= 40
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || " _-".contains(c));
            if ok {
                Ok(Some(n.clone()))
            } else {
                Err(bad(
                    "name must be 1-40 letters, numbers, spaces, dashes or underscores",
                ))
            }
        }
        Some(_) => Err(bad("name must be a string")),
    }
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let ns = org.target_namespace().to_owned();
    if !state
        .auth
        .allowed(&caller, &Check::new("create", "projects", &ns, None))
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not allowed to create projects".into(),
        ));
    }
    let data = resource_object(&body, "projects")?;
    let attrs = attributes(data)?;
    let name = name_attr(&attrs, true)?.unwrap_or_default();
    if state
        .index
        .read()
        .projects_in(&ns)
        .any(|p| p.spec.name.eq_ignore_ascii_case(&name))
    {
        return Err(ApiError::Invalid {
            pointer: "/data/attributes/name".into(),
            detail: format!("Name {name:?} has already been taken"),
        });
    }
    let id = new_id(IdKind::Project);
    let project = Project {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&id)),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), org.name_any()),
            ])),
            ..Default::default()
        },
        spec: ProjectSpec {
            name,
            description: attrs
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            tag_bindings: Vec::new(),
        },
        status: None,
    };
    let api: Api<Project> = Api::namespaced(state.client.clone(), &ns);
    let created = api
        .create(&PostParams::default(), &project)
        .await
        .map_err(kube_err)?;
    state
        .index
        .wait_until(crate::workspaces::INDEX_WAIT, |i| i.project(&id).is_some())
        .await;
    Ok(Doc(StatusCode::CREATED, json!({"data": render(&created, &org)})).into_response())
}

async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (p, org) = located(&state, &caller, &id).await?;
    let ns = org.target_namespace().to_owned();
    if !state
        .auth
        .allowed(
            &caller,
            &Check::new("update", "projects", &ns, Some(&p.name_any())),
        )
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not allowed to update this project".into(),
        ));
    }
    let data = resource_object(&body, "projects")?;
    let attrs = attributes(data)?;
    let name = name_attr(&attrs, false)?;
    let description = attrs
        .get("description")
        .map(|d| d.as_str().map(str::to_owned));
    let api: Api<Project> = Api::namespaced(state.client.clone(), &ns);
    // Only the attributes that change, guarded by the resourceVersion (crate::patch).
    let updated = crate::patch::patch_spec(&api, (*p).clone(), |cur| {
        let mut spec = cur.spec.clone();
        if let Some(n) = &name {
            spec.name = n.clone();
        }
        if let Some(d) = &description {
            spec.description = d.clone();
        }
        crate::patch::spec_diff(&cur.spec, &spec)
    })
    .await?;
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    state
        .index
        .wait_until(crate::workspaces::INDEX_WAIT, |i| {
            i.project(&id).is_some_and(|p| {
                crate::index::rv_at_least(p.metadata.resource_version.as_deref(), &rv)
            })
        })
        .await;
    Ok(Doc(StatusCode::OK, json!({"data": render(&updated, &org)})).into_response())
}

async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (p, org) = located(&state, &caller, &id).await?;
    let ns = org.target_namespace().to_owned();
    if !state
        .auth
        .allowed(
            &caller,
            &Check::new("delete", "projects", &ns, Some(&p.name_any())),
        )
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not allowed to delete this project".into(),
        ));
    }
    if p.labels().get(LABEL_DEFAULT_PROJECT).map(String::as_str) == Some("true") {
        return Err(ApiError::Status(
            StatusCode::CONFLICT,
            "the organization's default project cannot be deleted".into(),
        ));
    }
    let has_workspaces = {
        let idx = state.index.read();
        idx.workspaces_in(&ns).is_some_and(|w| {
            w.uids_by_name()
                .filter_map(|u| idx.workspace_by_uid(u))
                .any(|ws| ws.spec.project.as_deref() == Some(&p.name_any()))
        })
    };
    if has_workspaces {
        return Err(ApiError::Status(
            StatusCode::CONFLICT,
            "the project still contains workspaces; move or delete them first".into(),
        ));
    }
    let api: Api<Project> = Api::namespaced(state.client.clone(), &ns);
    api.delete(&p.name_any(), &DeleteParams::default())
        .await
        .map_err(kube_err)?;
    state
        .index
        .wait_until(crate::workspaces::INDEX_WAIT, |i| i.project(&id).is_none())
        .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}
