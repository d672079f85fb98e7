//! Data retention policies (SPEC.md B20–B22), self-hosted edition only: on the hosted
//! edition every endpoint here answers 404, as the service does.
//!
//! A workspace's own policy is `spec.dataRetentionPolicy`; the organization default is
//! `spec.settings.defaultDataRetentionPolicy` of the Organization. Two variants exist:
//! delete data older than N days (`data-retention-policy-delete-olders`; the legacy type
//! `data-retention-policies` is accepted on input) and never delete
//! (`data-retention-policy-dont-deletes`). A policy's ID (`drp-…`) is a hash of its
//! target and content, so reading it twice gives the same ID and replacing it a new one.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};
use terrace_crds::common::DataRetentionPolicy;
use terrace_crds::{Organization, Workspace};

use super::{Denied, administrable, patch_spec, patch_workspace, readable, stable_id};
use crate::auth::{Caller, Check};
use crate::index::rv_at_least;
use crate::jsonapi::{Doc, JsonBody};
use crate::orgs::visible_org;
use crate::workspaces::INDEX_WAIT;
use crate::workspaces::render::workspace_id;
use crate::{ApiError, AppState};

pub const TYPE_DELETE_OLDER: &str = "data-retention-policy-delete-olders";
pub const TYPE_DONT_DELETE: &str = "data-retention-policy-dont-deletes";
pub const TYPE_LEGACY: &str = "data-retention-policies";

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/relationships/data-retention-policy",
            get(ws_show)
                .post(ws_create)
                .patch(ws_update)
                .delete(ws_delete),
        )
        .route(
            "/api/v2/organizations/{org}/relationships/data-retention-policy",
            get(org_show)
                .post(org_create)
                .patch(org_update)
                .delete(org_delete),
        )
}

/// What a policy applies to.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Workspace(&'a str),
    Organization(&'a str),
}

impl Target<'_> {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            Target::Workspace(id) => ("workspaces", id),
            Target::Organization(name) => ("organizations", name),
        }
    }
}

/// The policy's ID.
pub fn policy_id(target: Target<'_>, p: &DataRetentionPolicy) -> String {
    let (kind, id) = target.parts();
    let days = p
        .delete_older_than_n_days
        .map_or_else(|| "dont-delete".to_owned(), |d| d.to_string());
    stable_id("drp-", &[kind, id, &days])
}

/// The JSON:API `data` of a policy applying to `target`.
pub fn render(target: Target<'_>, p: &DataRetentionPolicy) -> Value {
    let id = policy_id(target, p);
    let (kind, target_id) = target.parts();
    let (ty, attributes) = match p.delete_older_than_n_days {
        Some(days) => (TYPE_DELETE_OLDER, json!({"delete-older-than-n-days": days})),
        None => (TYPE_DONT_DELETE, json!({})),
    };
    json!({
        "id": id,
        "type": ty,
        "attributes": attributes,
        "relationships": {"target": {"data": {"id": target_id, "type": kind}}},
    })
}

/// The policy that applies to a workspace: its own, else the organization default.
pub fn effective<'a>(
    ws: &'a Workspace,
    org: &'a Organization,
) -> Option<(Target<'a>, &'a DataRetentionPolicy)> {
    let own = ws
        .spec
        .data_retention_policy
        .as_ref()
        .filter(|p| valid(p))
        .map(|p| (Target::Workspace(workspace_id_ref(ws)), p));
    own.or_else(|| {
        org.spec
            .settings
            .default_data_retention_policy
            .as_ref()
            .filter(|p| valid(p))
            .map(|p| (Target::Organization(org.tfe_name()), p))
    })
}

fn workspace_id_ref(ws: &Workspace) -> &str {
    ws.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(terrace_crds::constants::LABEL_ID))
        .map_or("", String::as_str)
}

fn valid(p: &DataRetentionPolicy) -> bool {
    p.delete_older_than_n_days.is_some() || p.dont_delete == Some(true)
}

/// The workspace document's `data-retention-policy` / `-choice` relationship value:
/// `{"data": null}` on the hosted edition or when no policy applies, else the linkage
/// with `attributes.delete-older-than-n-days` (clients read it from the linkage).
pub fn relationship(ws: &Workspace, org: &Organization, hosted: bool) -> Value {
    if hosted {
        return json!({"data": null});
    }
    match effective(ws, org) {
        Some((t, p)) => {
            let mut linkage = render(t, p);
            if let Some(o) = linkage.as_object_mut() {
                o.remove("relationships");
            }
            json!({ "data": linkage })
        }
        None => json!({"data": null}),
    }
}

/// The policy a request body asks for (422 with a pointer on anything else).
pub fn parse(body: &Value) -> Result<DataRetentionPolicy, ApiError> {
    let data = body
        .get("data")
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::Invalid {
            pointer: "/data".into(),
            detail: "the request document needs a data object".into(),
        })?;
    let ty = data.get("type").and_then(Value::as_str).unwrap_or_default();
    match ty {
        TYPE_DONT_DELETE => Ok(DataRetentionPolicy {
            delete_older_than_n_days: None,
            dont_delete: Some(true),
        }),
        TYPE_DELETE_OLDER | TYPE_LEGACY => {
            let attrs = data.get("attributes");
            let raw = attrs
                .and_then(|a| a.get("delete-older-than-n-days"))
                .or_else(|| attrs.and_then(|a| a.get("deleteOlderThanNDays")));
            let days = raw
                .and_then(Value::as_i64)
                .filter(|d| *d >= 1)
                .and_then(|d| i32::try_from(d).ok())
                .ok_or_else(|| ApiError::Invalid {
                    pointer: "/data/attributes/delete-older-than-n-days".into(),
                    detail: "delete-older-than-n-days must be a whole number of days, at least 1"
                        .into(),
                })?;
            Ok(DataRetentionPolicy {
                delete_older_than_n_days: Some(days),
                dont_delete: None,
            })
        }
        other => Err(ApiError::Invalid {
            pointer: "/data/type".into(),
            detail: format!(
                "type must be {TYPE_DELETE_OLDER:?} or {TYPE_DONT_DELETE:?}, got {other:?}"
            ),
        }),
    }
}

/// A merge patch value setting the policy (both fields, so switching variants clears the
/// other) or removing it.
fn patch_value(p: Option<&DataRetentionPolicy>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "deleteOlderThanNDays": p.delete_older_than_n_days,
            "dontDelete": p.dont_delete,
        }),
    }
}

fn hosted_404(state: &AppState) -> Result<(), ApiError> {
    if state.hosted() {
        Err(ApiError::NotFound(
            "data retention policies exist only on the self-hosted edition".into(),
        ))
    } else {
        Ok(())
    }
}

// --- workspaces ---------------------------------------------------------------------

async fn ws_show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    hosted_404(&state)?;
    let l = readable(&state, &caller, &id).await?;
    let data = effective(&l.ws, &l.org).map_or(Value::Null, |(t, p)| render(t, p));
    Ok(Doc(StatusCode::OK, json!({ "data": data })).into_response())
}

async fn ws_set(
    state: &AppState,
    caller: &Caller,
    id: &str,
    body: &Value,
    created_status: StatusCode,
) -> Result<Response, ApiError> {
    hosted_404(state)?;
    let l = administrable(state, caller, id, Denied::Forbidden).await?;
    let policy = parse(body)?;
    let had_own = l.ws.spec.data_retention_policy.is_some();
    let l = patch_workspace(state, &l, |w| {
        Ok((w.spec.data_retention_policy.as_ref() != Some(&policy))
            .then(|| json!({"dataRetentionPolicy": patch_value(Some(&policy))})))
    })
    .await?;
    let wid = workspace_id(&l.ws);
    let status = if had_own {
        StatusCode::OK
    } else {
        created_status
    };
    Ok(Doc(
        status,
        json!({"data": render(Target::Workspace(&wid), &policy)}),
    )
    .into_response())
}

async fn ws_create(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    ws_set(&state, &caller, &id, &body, StatusCode::CREATED).await
}

async fn ws_update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    ws_set(&state, &caller, &id, &body, StatusCode::OK).await
}

async fn ws_delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    hosted_404(&state)?;
    let l = administrable(&state, &caller, &id, Denied::Forbidden).await?;
    patch_workspace(&state, &l, |w| {
        Ok(w.spec
            .data_retention_policy
            .is_some()
            .then(|| json!({"dataRetentionPolicy": Value::Null})))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// --- organizations ------------------------------------------------------------------

async fn org_show(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
) -> Result<Response, ApiError> {
    hosted_404(&state)?;
    let org = visible_org(&state, &caller, &org).await?;
    let data = org
        .spec
        .settings
        .default_data_retention_policy
        .as_ref()
        .filter(|p| valid(p))
        .map_or(Value::Null, |p| {
            render(Target::Organization(org.tfe_name()), p)
        });
    Ok(Doc(StatusCode::OK, json!({ "data": data })).into_response())
}

async fn org_write(
    state: &AppState,
    caller: &Caller,
    name: &str,
    policy: Option<&DataRetentionPolicy>,
) -> Result<Organization, ApiError> {
    let org = visible_org(state, caller, name).await?;
    if !state
        .auth
        .allowed(
            caller,
            &Check::cluster("update", "organizations", Some(&org.name_any())),
        )
        .await?
    {
        return Err(ApiError::Status(
            StatusCode::FORBIDDEN,
            "changing the organization's data retention policy needs update rights on it".into(),
        ));
    }
    let api: Api<Organization> = Api::all(state.client.clone());
    let updated = patch_spec(&api, (*org).clone(), |o| {
        Ok(
            (o.spec.settings.default_data_retention_policy.as_ref() != policy)
                .then(|| json!({"settings": {"defaultDataRetentionPolicy": patch_value(policy)}})),
        )
    })
    .await?;
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    let tfe = updated.tfe_name().to_owned();
    state
        .index
        .wait_until(INDEX_WAIT, |i| {
            i.organization(&tfe)
                .is_some_and(|o| rv_at_least(o.metadata.resource_version.as_deref(), &rv))
        })
        .await;
    Ok(updated)
}

async fn org_set(
    state: &AppState,
    caller: &Caller,
    name: &str,
    body: &Value,
) -> Result<Response, ApiError> {
    hosted_404(state)?;
    let policy = parse(body)?;
    let org = org_write(state, caller, name, Some(&policy)).await?;
    Ok(Doc(
        StatusCode::OK,
        json!({"data": render(Target::Organization(org.tfe_name()), &policy)}),
    )
    .into_response())
}

async fn org_create(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    org_set(&state, &caller, &org, &body).await
}

async fn org_update(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    org_set(&state, &caller, &org, &body).await
}

async fn org_delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
) -> Result<Response, ApiError> {
    hosted_404(&state)?;
    org_write(&state, &caller, &org, None).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::relationships::testing::{ORG, harness};

    /// Both variants and the legacy type parse; bad days and types are 422.
    #[test]
    fn parse_bodies() {
        let p = parse(
            &json!({"data": {"type": TYPE_DELETE_OLDER, "attributes": {"delete-older-than-n-days": 30}}}),
        );
        assert_eq!(p.ok().and_then(|p| p.delete_older_than_n_days), Some(30));
        let p = parse(
            &json!({"data": {"type": TYPE_LEGACY, "attributes": {"delete-older-than-n-days": 7}}}),
        );
        assert_eq!(p.ok().and_then(|p| p.delete_older_than_n_days), Some(7));
        let p = parse(&json!({"data": {"type": TYPE_DONT_DELETE, "attributes": {}}}));
        assert_eq!(p.ok().and_then(|p| p.dont_delete), Some(true));
        for bad in [
            json!({"data": {"type": TYPE_DELETE_OLDER, "attributes": {"delete-older-than-n-days": 0}}}),
            json!({"data": {"type": TYPE_DELETE_OLDER, "attributes": {"delete-older-than-n-days": "3"}}}),
            json!({"data": {"type": TYPE_DELETE_OLDER}}),
            json!({"data": {"type": "workspaces"}}),
            json!({"data": null}),
        ] {
            assert!(
                matches!(parse(&bad), Err(ApiError::Invalid { .. })),
                "{bad}"
            );
        }
    }

    /// The workspace's own policy wins; without one the organization default applies;
    /// IDs are stable for the same target and content.
    #[tokio::test]
    async fn workspace_and_org_policies() {
        let h = harness(Edition::SelfHosted).await;
        let ws = "ws-EEEEEEEEEEEEEEE1";
        h.workspace(ws, "kept", |_| {}).await;
        let path = format!("/api/v2/workspaces/{ws}/relationships/data-retention-policy");
        let (st, doc) = h.call("GET", &path, None).await;
        assert_eq!((st, doc["data"].is_null()), (200, true));

        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/organizations/{ORG}/relationships/data-retention-policy"),
                Some(json!({"data": {"type": TYPE_DONT_DELETE, "attributes": {}}})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let (_, doc) = h.call("GET", &path, None).await;
        assert_eq!(doc["data"]["type"], TYPE_DONT_DELETE);
        assert_eq!(
            doc["data"]["relationships"]["target"]["data"]["type"],
            "organizations"
        );

        let set = json!({"data": {"type": TYPE_DELETE_OLDER, "attributes": {"delete-older-than-n-days": 30}}});
        let (st, doc) = h.call("POST", &path, Some(set.clone())).await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].clone();
        assert!(id.as_str().is_some_and(|i| i.starts_with("drp-")));
        let (st, doc) = h.call("PATCH", &path, Some(set)).await;
        assert_eq!((st, &doc["data"]["id"]), (200, &id));
        let (_, doc) = h.call("GET", &path, None).await;
        assert_eq!(doc["data"]["attributes"]["delete-older-than-n-days"], 30);
        let (_, wsdoc) = h
            .call("GET", &format!("/api/v2/workspaces/{ws}"), None)
            .await;
        assert_eq!(
            wsdoc["data"]["relationships"]["data-retention-policy-choice"]["data"]["type"],
            TYPE_DELETE_OLDER
        );

        // Switching variants clears the other field (the CRD allows exactly one).
        let (st, _) = h
            .call(
                "POST",
                &path,
                Some(json!({"data": {"type": TYPE_DONT_DELETE}})),
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(
            h.ws(ws).spec.data_retention_policy,
            Some(DataRetentionPolicy {
                delete_older_than_n_days: None,
                dont_delete: Some(true)
            })
        );

        let (st, _) = h.call("DELETE", &path, None).await;
        assert_eq!(st, 204);
        let (_, doc) = h.call("GET", &path, None).await;
        assert_eq!(
            doc["data"]["relationships"]["target"]["data"]["type"],
            "organizations"
        );
    }

    /// On the hosted edition the endpoints do not exist.
    #[tokio::test]
    async fn hosted_edition_is_404() {
        let h = harness(Edition::Hosted).await;
        let ws = "ws-EEEEEEEEEEEEEEE2";
        h.workspace(ws, "hosted", |_| {}).await;
        let path = format!("/api/v2/workspaces/{ws}/relationships/data-retention-policy");
        assert_eq!(h.call("GET", &path, None).await.0, 404);
        assert_eq!(h.call("DELETE", &path, None).await.0, 404);
        let org = format!("/api/v2/organizations/{ORG}/relationships/data-retention-policy");
        assert_eq!(h.call("GET", &org, None).await.0, 404);
        let (_, wsdoc) = h
            .call("GET", &format!("/api/v2/workspaces/{ws}"), None)
            .await;
        assert_eq!(
            wsdoc["data"]["relationships"]["data-retention-policy-choice"],
            json!({"data": null})
        );
    }
}
