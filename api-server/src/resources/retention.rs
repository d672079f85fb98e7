//! Data retention policies (SPEC.md B20–B22), self-hosted edition only: on the hosted
//! edition every endpoint here answers 404, as the service does.
//!
//! A workspace's own policy is `spec.dataRetentionPolicy`; the organization default is
//! `spec.settings.defaultDataRetentionPolicy` of the Organization. Two variants exist:
//! delete data older than N days (`data-retention-policy-delete-olders`; the legacy type
//! `data-retention-policies` is accepted on input) and never delete
//! (`data-retention-policy-dont-deletes`). A policy's ID (`drp-…`) is a hash of its
//! target and content, so reading it twice gives the same ID and replacing it a new one.

use kube::api::Api;
use terrace_crds::Workspace;
use terrace_crds::common::DataRetentionPolicy;

use crate::documents::{
    TYPE_DELETE_OLDER, TYPE_DONT_DELETE, TYPE_LEGACY, Target, effective_policy, retention_policy,
    valid_policy,
};
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/relationships/data-retention-policy",
            get(ws_show)
                .post(ws_set::<true>)
                .patch(ws_set::<false>)
                .delete(ws_delete),
        )
        .route(
            "/api/v2/organizations/{org}/relationships/data-retention-policy",
            get(org_show)
                .post(org_set)
                .patch(org_set)
                .delete(org_delete),
        )
}

/// The policy a request body asks for (422 with a pointer on anything else).
pub fn parse(body: &Value) -> Result<DataRetentionPolicy, ApiError> {
    let data = body
        .get("data")
        .and_then(Value::as_object)
        .ok_or_else(|| ApiError::invalid("/data", "the request document needs a data object"))?;
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
                .ok_or_else(|| {
                    ApiError::invalid_attribute(
                        "delete-older-than-n-days",
                        "delete-older-than-n-days must be a whole number of days, at least 1",
                    )
                })?;
            Ok(DataRetentionPolicy {
                delete_older_than_n_days: Some(days),
                dont_delete: None,
            })
        }
        other => Err(ApiError::invalid(
            "/data/type",
            format!("type must be {TYPE_DELETE_OLDER:?} or {TYPE_DONT_DELETE:?}, got {other:?}"),
        )),
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
        Err(ApiError::not_found(
            "data retention policies exist only on the self-hosted edition",
        ))
    } else {
        Ok(())
    }
}

// --- workspaces ---------------------------------------------------------------------

async fn ws_show(State(state): State<AppState>, f: Found<Workspace>) -> Result<Doc, ApiError> {
    hosted_404(&state)?;
    let l = f.at;
    let data =
        effective_policy(&l.obj, &l.org).map_or(Value::Null, |(t, p)| retention_policy(t, p));
    Ok(Doc::ok(data))
}

/// `POST` (`CREATE`: 201 when the workspace had no policy of its own) or `PATCH` (200).
async fn ws_set<const CREATE: bool>(
    State(state): State<AppState>,
    f: Found<Workspace, Admin>,
    JsonApi(body): JsonApi<Value>,
) -> Result<Doc, ApiError> {
    hosted_404(&state)?;
    let policy = parse(&body)?;
    let l = f.at;
    let had_own = l.obj.spec.data_retention_policy.is_some();
    write::update_spec(&state, &l.ns, (*l.obj).clone(), |w| {
        Ok((w.spec.data_retention_policy.as_ref() != Some(&policy))
            .then(|| json!({"dataRetentionPolicy": patch_value(Some(&policy))})))
    })
    .await?;
    let wid = l.id();
    let status = if CREATE && !had_own {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Doc(
        status,
        json!({"data": retention_policy(Target::Workspace(&wid), &policy)}),
    ))
}

async fn ws_delete(
    State(state): State<AppState>,
    f: Found<Workspace, Admin>,
) -> Result<Response, ApiError> {
    hosted_404(&state)?;
    let l = f.at;
    write::update_spec(&state, &l.ns, (*l.obj).clone(), |w| {
        Ok(w.spec
            .data_retention_policy
            .is_some()
            .then(|| json!({"dataRetentionPolicy": Value::Null})))
    })
    .await?;
    Ok(no_content())
}

// --- organizations ------------------------------------------------------------------

async fn org_show(State(state): State<AppState>, o: VisibleOrg) -> Result<Doc, ApiError> {
    hosted_404(&state)?;
    let org = o.org;
    let data = org
        .spec
        .settings
        .default_data_retention_policy
        .as_ref()
        .filter(|p| valid_policy(p))
        .map_or(Value::Null, |p| {
            retention_policy(Target::Organization(org.tfe_name()), p)
        });
    Ok(Doc::ok(data))
}

async fn org_write(
    state: &AppState,
    o: VisibleOrg,
    policy: Option<&DataRetentionPolicy>,
) -> Result<Organization, ApiError> {
    o.require_on_org(
        state,
        "update",
        "changing the organization's data retention policy needs update rights on it",
    )
    .await?;
    let org = o.org;
    let api: Api<Organization> = Api::all(state.client.clone());
    let updated = write::patch_spec(&api, (*org).clone(), |o| {
        Ok(
            (o.spec.settings.default_data_retention_policy.as_ref() != policy)
                .then(|| json!({"settings": {"defaultDataRetentionPolicy": patch_value(policy)}})),
        )
    })
    .await?;
    write::wait_seen(state, &updated).await;
    Ok(updated)
}

/// `POST` or `PATCH` of the organization's default policy: 200.
async fn org_set(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(body): JsonApi<Value>,
) -> Result<Doc, ApiError> {
    hosted_404(&state)?;
    let policy = parse(&body)?;
    let org = org_write(&state, o, Some(&policy)).await?;
    Ok(Doc::ok(retention_policy(
        Target::Organization(org.tfe_name()),
        &policy,
    )))
}

async fn org_delete(State(state): State<AppState>, o: VisibleOrg) -> Result<Response, ApiError> {
    hosted_404(&state)?;
    org_write(&state, o, None).await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::{ORG, harness};

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
            assert!(matches!(parse(&bad), Err(ApiError::Invalid(_))), "{bad}");
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
