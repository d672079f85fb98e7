//! Organizations: the frame workspaces live in. An Organization object is cluster-scoped;
//! its objects live in its namespace, created by the operator with the default project.
//! Visible to callers who may `get` the organization or `list` workspaces in its namespace.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::{Organization, OrganizationSpec};

use crate::auth::{Caller, Check};
use crate::jsonapi::{
    Doc, JsonBody, QueryParams, attributes, page_slice, pagination, resource_object, timestamp,
};
use crate::workspaces::kube_err;
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/organizations", get(list).post(create))
        .route(
            "/api/v2/organizations/{org}",
            get(show).patch(update).delete(delete),
        )
        .route(
            "/api/v2/organizations/{org}/entitlement-set",
            get(entitlements),
        )
}

fn not_found() -> ApiError {
    ApiError::NotFound("organization not found".into())
}

async fn can_see(state: &AppState, caller: &Caller, org: &Organization) -> Result<bool, ApiError> {
    if state
        .auth
        .allowed(
            caller,
            &Check::cluster("get", "organizations", Some(&org.name_any())),
        )
        .await?
    {
        return Ok(true);
    }
    state
        .auth
        .allowed(
            caller,
            &Check::new("list", "workspaces", org.target_namespace(), None),
        )
        .await
}

/// The organization named `name` if the caller may see it; 404 otherwise.
pub async fn visible_org(
    state: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<Arc<Organization>, ApiError> {
    let org = state
        .index
        .read()
        .organization(name)
        .cloned()
        .ok_or_else(not_found)?;
    if can_see(state, caller, &org).await? {
        Ok(org)
    } else {
        Err(not_found())
    }
}

/// The JSON:API `data` of an organization.
pub fn render(org: &Organization) -> Value {
    let name = org.tfe_name();
    let s = &org.spec.settings;
    let default_project = org
        .status
        .as_ref()
        .and_then(|st| st.default_project_id.clone());
    json!({
        "id": name,
        "type": "organizations",
        "attributes": {
            "name": name,
            "external-id": name,
            "email": org.spec.email,
            "created-at": org.metadata.creation_timestamp.as_ref().map(|t| timestamp(&t.0)),
            "default-execution-mode": s.default_execution_mode,
            "allow-force-delete-workspaces": s.allow_force_delete_workspaces,
            "assessments-enforced": s.assessments_enforced,
            "collaborator-auth-policy": "password",
            "cost-estimation-enabled": false,
            "plan-expired": false,
            "permissions": {
                "can-update": true,
                "can-destroy": true,
                "can-create-workspace": true,
                "can-create-project": true,
            },
        },
        "relationships": {
            "default-project": {"data": default_project.map(|id| json!({"id": id, "type": "projects"}))},
        },
        "links": {"self": format!("/api/v2/organizations/{name}")},
    })
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let q = QueryParams::parse(raw.as_deref());
    let page = q.page()?;
    let mut orgs: Vec<Arc<Organization>> = state.index.read().organizations().cloned().collect();
    orgs.sort_by(|a, b| a.tfe_name().cmp(b.tfe_name()));
    let mut visible = Vec::new();
    for o in orgs {
        if can_see(&state, &caller, &o).await? {
            visible.push(o);
        }
    }
    let data: Vec<Value> = page_slice(&visible, page)
        .iter()
        .map(|o| render(o))
        .collect();
    let (meta, links) = pagination("/api/v2/organizations", page, visible.len());
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    )
    .into_response())
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    Ok(Doc(StatusCode::OK, json!({"data": render(&org)})).into_response())
}

/// An object name (DNS-1123) for an organization's TFE name.
pub fn object_name(tfe_name: &str) -> String {
    let lower: String = tfe_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = lower.trim_matches('-');
    if trimmed == tfe_name && trimmed.len() <= 50 {
        return trimmed.to_owned();
    }
    // Keep names unique when case or underscores were folded.
    let hash: u32 = tfe_name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let base: String = trimmed.chars().take(50).collect();
    format!("{}-{hash:08x}", if base.is_empty() { "org" } else { &base })
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    if !state
        .auth
        .allowed(&caller, &Check::cluster("create", "organizations", None))
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "creating organizations needs cluster-wide create rights on organizations".into(),
        ));
    }
    let data = resource_object(&body, "organizations")?;
    let attrs = attributes(data)?;
    let name = match attrs.get("name") {
        Some(Value::String(n)) => n.clone(),
        _ => {
            return Err(ApiError::Invalid {
                pointer: "/data/attributes/name".into(),
                detail: "name is required".into(),
            });
        }
    };
    terrace_crds::rules::validate_workspace_name(&name).map_err(|e| ApiError::Invalid {
        pointer: "/data/attributes/name".into(),
        detail: e.to_string().replacen("name", "organization name", 1),
    })?;
    if state.index.read().organization(&name).is_some() {
        return Err(ApiError::Invalid {
            pointer: "/data/attributes/name".into(),
            detail: format!("Name {name:?} has already been taken"),
        });
    }
    let mut spec = OrganizationSpec {
        name: Some(name.clone()),
        ..Default::default()
    };
    apply_settings(&mut spec, &attrs)?;
    let obj_name = object_name(&name);
    spec.namespace = Some(obj_name.clone());
    let org = Organization {
        metadata: ObjectMeta {
            name: Some(obj_name),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let api: Api<Organization> = Api::all(state.client.clone());
    let created = api
        .create(&PostParams::default(), &org)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 409 => ApiError::Invalid {
                pointer: "/data/attributes/name".into(),
                detail: format!("Name {name:?} has already been taken"),
            },
            other => kube_err(other),
        })?;
    // Ready means the namespace and the default project exist (the operator makes them).
    let ready = state
        .index
        .wait_until(Duration::from_secs(20), |i| {
            i.organization(&name).is_some_and(|o| {
                o.status
                    .as_ref()
                    .is_some_and(|s| s.default_project_id.is_some())
            }) && i.default_project(created.target_namespace()).is_some()
        })
        .await;
    if !ready {
        tracing::warn!(org = %name, "organization not ready yet (is the operator running?)");
    }
    let org = state
        .index
        .read()
        .organization(&name)
        .cloned()
        .unwrap_or_else(|| Arc::new(created));
    Ok(Doc(StatusCode::CREATED, json!({"data": render(&org)})).into_response())
}

fn apply_settings(
    spec: &mut OrganizationSpec,
    attrs: &serde_json::Map<String, Value>,
) -> Result<(), ApiError> {
    let bad = |k: &str, what: &str| ApiError::Invalid {
        pointer: format!("/data/attributes/{k}"),
        detail: format!("{k} must be {what}"),
    };
    if let Some(v) = attrs.get("email") {
        spec.email = match v {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            _ => return Err(bad("email", "a string")),
        };
    }
    if let Some(v) = attrs.get("allow-force-delete-workspaces") {
        spec.settings.allow_force_delete_workspaces = v
            .as_bool()
            .ok_or_else(|| bad("allow-force-delete-workspaces", "a boolean"))?;
    }
    if let Some(v) = attrs.get("assessments-enforced") {
        spec.settings.assessments_enforced = v
            .as_bool()
            .ok_or_else(|| bad("assessments-enforced", "a boolean"))?;
    }
    if let Some(v) = attrs.get("default-execution-mode") {
        let m = v
            .as_str()
            .ok_or_else(|| bad("default-execution-mode", "a string"))?;
        terrace_crds::rules::ExecutionMode::parse(m)
            .map_err(|_| bad("default-execution-mode", "one of remote, local, agent"))?;
        spec.settings.default_execution_mode = m.to_owned();
    }
    Ok(())
}

async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    if !state
        .auth
        .allowed(
            &caller,
            &Check::cluster("update", "organizations", Some(&org.name_any())),
        )
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not allowed to update this organization".into(),
        ));
    }
    let data = resource_object(&body, "organizations")?;
    let attrs = attributes(data)?;
    if attrs
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| n != org.tfe_name())
    {
        return Err(ApiError::Invalid {
            pointer: "/data/attributes/name".into(),
            detail: "renaming organizations is not supported".into(),
        });
    }
    let api: Api<Organization> = Api::all(state.client.clone());
    // Only the settings that change, guarded by the resourceVersion (crate::patch).
    let updated = crate::patch::patch_spec(&api, (*org).clone(), |cur| {
        let mut spec = cur.spec.clone();
        apply_settings(&mut spec, &attrs)?;
        crate::patch::spec_diff(&cur.spec, &spec)
    })
    .await?;
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let name = org.tfe_name().to_owned();
    state
        .index
        .wait_until(Duration::from_secs(10), |i| {
            i.organization(&name).is_some_and(|o| {
                crate::index::rv_at_least(o.metadata.resource_version.as_deref(), &rv)
            })
        })
        .await;
    Ok(Doc(StatusCode::OK, json!({"data": render(&updated)})).into_response())
}

async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    if !state
        .auth
        .allowed(
            &caller,
            &Check::cluster("delete", "organizations", Some(&org.name_any())),
        )
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "not allowed to delete this organization".into(),
        ));
    }
    let api: Api<Organization> = Api::all(state.client.clone());
    api.delete(&org.name_any(), &DeleteParams::default())
        .await
        .map_err(kube_err)?;
    let name = org.tfe_name().to_owned();
    state
        .index
        .wait_until(Duration::from_secs(10), |i| i.organization(&name).is_none())
        .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn entitlements(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let hosted = state.hosted();
    let doc = json!({"data": {
        "id": org.tfe_name(),
        "type": "entitlement-sets",
        "attributes": {
            "agents": true,
            "assessments": hosted,
            "audit-logging": false,
            "configuration-designer": false,
            "cost-estimation": false,
            "global-run-tasks": false,
            "module-tests-generation": false,
            "operations": true,
            "private-module-registry": true,
            "policy-enforcement": false,
            "run-tasks": false,
            "self-serve-billing": false,
            "sentinel": false,
            "sso": false,
            "state-storage": true,
            "teams": false,
            "usage-reporting": false,
            "user-limit": Value::Null,
            "vcs-integrations": true,
        },
        "links": {"self": format!("/api/v2/entitlement-sets/{}", org.tfe_name())},
    }});
    Ok(Doc(StatusCode::OK, doc).into_response())
}

#[cfg(test)]
mod tests {
    use super::object_name;

    #[test]
    fn object_names_are_dns_labels_and_unique() {
        assert_eq!(object_name("acme"), "acme");
        assert_ne!(object_name("Acme"), object_name("acme"));
        assert!(object_name("My_Org").starts_with("my-org-"));
        let long = object_name(&"x".repeat(90));
        assert!(long.len() <= 63, "{long}");
    }
}
