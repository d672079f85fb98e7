//! Agent pools and OAuth tokens: minimal read endpoints, and the check that a workspace's
//! `agent-pool-id` and `vcs-repo.oauth-token-id` name objects of its own organization.
//!
//! Both kinds are declared as AgentPool / OAuthToken objects in the organization's
//! namespace (kubectl or GitOps); the API only reads them. The check runs on create and
//! on update, and only for values that change, so a workspace whose pool was deleted
//! later can still be edited in other ways.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{AgentPool, OAuthToken, Organization, WorkspaceSpec};

use crate::auth::{Caller, Check};
use crate::index::Keyed;
use crate::jsonapi::{Doc, QueryParams, page_slice, pagination, timestamp};
use crate::orgs::visible_org;
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/organizations/{org}/agent-pools", get(list_pools))
        .route("/api/v2/agent-pools/{id}", get(show_pool))
        .route("/api/v2/organizations/{org}/oauth-tokens", get(list_tokens))
        .route("/api/v2/oauth-tokens/{id}", get(show_token))
}

fn id_of<K: Resource>(o: &K) -> String {
    o.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ID))
        .cloned()
        .unwrap_or_default()
}

fn created<K: Resource>(o: &K) -> Value {
    o.meta()
        .creation_timestamp
        .as_ref()
        .map_or(Value::Null, |t| json!(timestamp(&t.0)))
}

/// The JSON:API `data` of an agent pool.
pub fn render_pool(p: &AgentPool, org: &Organization) -> Value {
    let id = id_of(p);
    json!({
        "id": id,
        "type": "agent-pools",
        "attributes": {
            "name": p.spec.name,
            "created-at": created(p),
            "organization-scoped": p.spec.organization_scoped,
            "agent-count": 0,
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "agents": {"links": {"related": format!("/api/v2/agent-pools/{id}/agents")}},
        },
        "links": {"self": format!("/api/v2/agent-pools/{id}")},
    })
}

/// The JSON:API `data` of an OAuth token (never the token itself).
pub fn render_token(t: &OAuthToken, _org: &Organization) -> Value {
    let id = id_of(t);
    json!({
        "id": id,
        "type": "oauth-tokens",
        "attributes": {
            "created-at": created(t),
            // pytfe requires a string here (null fails its model).
            "service-provider-user": "",
            "has-ssh-key": false,
            "service-provider": t.spec.service_provider,
            "name": t.spec.name,
        },
        "relationships": {"oauth-client": {"data": Value::Null}},
        "links": {"self": format!("/api/v2/oauth-tokens/{id}")},
    })
}

async fn list_of<K: Resource + 'static>(
    state: &AppState,
    caller: &Caller,
    org: &str,
    resource: &'static str,
    raw: Option<&str>,
    pick: fn(&crate::index::Inner) -> &Keyed<K>,
    render: fn(&K, &Organization) -> Value,
) -> Result<Response, ApiError> {
    let org = visible_org(state, caller, org).await?;
    let ns = org.target_namespace().to_owned();
    let q = QueryParams::parse(raw);
    let page = q.page()?;
    let mut items: Vec<Arc<K>> = if state
        .auth
        .allowed(caller, &Check::new("list", resource, &ns, None))
        .await?
    {
        pick(&state.index.read())
            .in_namespace(&ns)
            .filter(|o| !id_of(o.as_ref()).is_empty())
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    items.sort_by_key(|o| o.name_any());
    let data: Vec<Value> = page_slice(&items, page)
        .iter()
        .map(|o| render(o, &org))
        .collect();
    let kind = if resource == "agentpools" {
        "agent-pools"
    } else {
        "oauth-tokens"
    };
    let (meta, links) = pagination(
        &format!("/api/v2/organizations/{}/{kind}", org.tfe_name()),
        page,
        items.len(),
    );
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    )
    .into_response())
}

async fn show_of<K: Resource + 'static>(
    state: &AppState,
    caller: &Caller,
    id: &str,
    resource: &'static str,
    pick: fn(&crate::index::Inner) -> &Keyed<K>,
    render: fn(&K, &Organization) -> Value,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound(format!("{resource} {id:?} not found"));
    let (o, org) = {
        let idx = state.index.read();
        let o = pick(&idx).get(id).cloned().ok_or_else(not_found)?;
        let ns = o.meta().namespace.clone().unwrap_or_default();
        let org = idx
            .organization_of_namespace(&ns)
            .cloned()
            .ok_or_else(not_found)?;
        (o, org)
    };
    let check = Check::new("get", resource, org.target_namespace(), Some(&o.name_any()));
    if !state.auth.allowed(caller, &check).await? {
        return Err(not_found());
    }
    Ok(Doc(StatusCode::OK, json!({"data": render(&o, &org)})).into_response())
}

async fn list_pools(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    list_of(
        &state,
        &caller,
        &org,
        "agentpools",
        raw.as_deref(),
        |i| i.agent_pools(),
        render_pool,
    )
    .await
}

async fn show_pool(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    show_of(
        &state,
        &caller,
        &id,
        "agentpools",
        |i| i.agent_pools(),
        render_pool,
    )
    .await
}

async fn list_tokens(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    list_of(
        &state,
        &caller,
        &org,
        "oauthtokens",
        raw.as_deref(),
        |i| i.oauth_tokens(),
        render_token,
    )
    .await
}

async fn show_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    show_of(
        &state,
        &caller,
        &id,
        "oauthtokens",
        |i| i.oauth_tokens(),
        render_token,
    )
    .await
}

/// Checks that the references of `next` (a workspace of namespace `ns`; `before` is its
/// previous spec on update) name objects of the same organization: `agent-pool-id` an
/// AgentPool that the workspace may use, `vcs-repo.oauth-token-id` an OAuthToken. Only
/// values that change are checked. 422 with the attribute's pointer otherwise.
pub fn check(
    state: &AppState,
    ns: &str,
    workspace_id: Option<&str>,
    before: Option<&WorkspaceSpec>,
    next: &WorkspaceSpec,
) -> Result<(), ApiError> {
    let idx = state.index.read();
    if let Some(pool_id) = next.agent_pool_id.as_deref().filter(|p| !p.is_empty())
        && before.and_then(|b| b.agent_pool_id.as_deref()) != Some(pool_id)
    {
        let pointer = "/data/attributes/agent-pool-id".to_owned();
        let pool = idx
            .agent_pools()
            .get(pool_id)
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .ok_or_else(|| ApiError::Invalid {
                pointer: pointer.clone(),
                detail: format!("agent pool {pool_id:?} not found in this organization"),
            })?;
        let allowed =
            pool.spec.organization_scoped
                || pool.spec.allowed_workspaces.iter().any(|a| {
                    Some(a.as_str()) == workspace_id || a.eq_ignore_ascii_case(&next.name)
                });
        if !allowed {
            return Err(ApiError::Invalid {
                pointer,
                detail: format!("agent pool {pool_id:?} is not available to this workspace"),
            });
        }
    }
    let token = |s: &WorkspaceSpec| {
        s.vcs_repo
            .as_ref()
            .and_then(|r| r.oauth_token_id.clone())
            .filter(|t| !t.is_empty())
    };
    if let Some(token_id) = token(next)
        && before.and_then(token) != Some(token_id.clone())
        && idx
            .oauth_tokens()
            .get(&token_id)
            .is_none_or(|t| t.namespace().as_deref() != Some(ns))
    {
        return Err(ApiError::Invalid {
            pointer: "/data/attributes/vcs-repo/oauth-token-id".into(),
            detail: format!("OAuth token {token_id:?} not found in this organization"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::relationships::testing::{ORG, harness, meta};
    use terrace_crds::{AgentPoolSpec, OAuthTokenSpec, VcsRepo};

    /// Pools and tokens are readable by ID and listed per organization; references in
    /// workspace specs must name them (only changed values are checked).
    #[tokio::test]
    async fn reads_and_reference_checks() {
        let h = harness(Edition::SelfHosted).await;
        h.create(AgentPool {
            metadata: meta("pool", Some(ORG), &[(LABEL_ID, "apool-Pool000000000001")]),
            spec: AgentPoolSpec {
                name: "pool".into(),
                organization_scoped: false,
                allowed_workspaces: vec!["allowed".into()],
            },
            status: None,
        })
        .await;
        h.create(OAuthToken {
            metadata: meta("gh", Some(ORG), &[(LABEL_ID, "ot-Token00000000000001")]),
            spec: OAuthTokenSpec {
                service_provider: "github".into(),
                ..Default::default()
            },
            status: None,
        })
        .await;
        h.wait("pool and token", |i| {
            i.agent_pools().get("apool-Pool000000000001").is_some()
                && i.oauth_tokens().get("ot-Token00000000000001").is_some()
        })
        .await;

        let (st, doc) = h
            .call("GET", "/api/v2/agent-pools/apool-Pool000000000001", None)
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["name"].as_str()),
            (200, Some("pool"))
        );
        let (st, doc) = h
            .call(
                "GET",
                &format!("/api/v2/organizations/{ORG}/oauth-tokens"),
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(doc["data"][0]["id"], "ot-Token00000000000001");
        assert_eq!(
            h.call("GET", "/api/v2/oauth-tokens/ot-nope", None).await.0,
            404
        );

        let mut spec = WorkspaceSpec::default_for_create();
        spec.name = "allowed".into();
        spec.agent_pool_id = Some("apool-Pool000000000001".into());
        assert!(check(&h.state, ORG, None, None, &spec).is_ok());
        spec.name = "other".into();
        assert!(matches!(
            check(&h.state, ORG, None, None, &spec),
            Err(ApiError::Invalid { pointer, .. }) if pointer == "/data/attributes/agent-pool-id"
        ));
        // Unchanged values are not re-checked.
        let before = spec.clone();
        assert!(check(&h.state, ORG, None, Some(&before), &spec).is_ok());
        spec.agent_pool_id = Some("apool-Missing00000001".into());
        assert!(check(&h.state, ORG, None, None, &spec).is_err());
        assert!(check(&h.state, "elsewhere", None, None, &before).is_err());

        let mut spec = WorkspaceSpec::default_for_create();
        spec.vcs_repo = Some(VcsRepo {
            identifier: "a/b".into(),
            oauth_token_id: Some("ot-Token00000000000001".into()),
            ..Default::default()
        });
        assert!(check(&h.state, ORG, None, None, &spec).is_ok());
        if let Some(r) = spec.vcs_repo.as_mut() {
            r.oauth_token_id = Some("ot-Other000000000001".into());
        }
        assert!(matches!(
            check(&h.state, ORG, None, None, &spec),
            Err(ApiError::Invalid { pointer, .. }) if pointer == "/data/attributes/vcs-repo/oauth-token-id"
        ));
    }
}
