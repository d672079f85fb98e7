//! The references of a workspace spec to other objects of its organization:
//! `agent-pool-id` must name an AgentPool the workspace may use, `vcs-repo.oauth-token-id`
//! an OAuthToken. Checked on create and on update, only for values that change, so a
//! workspace whose pool was deleted later can still be edited in other ways.

use terrace_crds::WorkspaceSpec;
use terrace_crds::resources::Named;

use crate::prelude::*;

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
            .ok_or_else(|| {
                ApiError::invalid(
                    pointer.clone(),
                    format!("agent pool {pool_id:?} not found in this organization"),
                )
            })?;
        let project = match next.project.as_deref().filter(|p| !p.is_empty()) {
            Some(name) => idx.project_named(ns, name),
            None => idx.default_project(ns),
        };
        let project_id = project.map(|p| id_of(p.as_ref()));
        let allowed = pool.spec.admits(
            Named {
                id: workspace_id,
                name: &next.name,
            },
            project.map(|p| Named {
                id: project_id.as_deref(),
                name: &p.spec.name,
            }),
        );
        if !allowed {
            return Err(ApiError::invalid(
                pointer,
                format!("agent pool {pool_id:?} is not available to this workspace"),
            ));
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
        return Err(ApiError::invalid(
            "/data/attributes/vcs-repo/oauth-token-id",
            format!("OAuth token {token_id:?} not found in this organization"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::{ORG, harness, meta};
    use terrace_crds::constants::LABEL_ID;
    use terrace_crds::{AgentPool, OAuthToken};
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
                allowed_projects: Vec::new(),
                excluded_workspaces: Vec::new(),
                pod_template: None,
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
            Err(ApiError::Invalid(f)) if f[0].pointer == "/data/attributes/agent-pool-id"
        ));
        // Unchanged values are not re-checked.
        let before = spec.clone();
        assert!(check(&h.state, ORG, None, Some(&before), &spec).is_ok());
        spec.agent_pool_id = Some("apool-Missing00000001".into());
        assert!(check(&h.state, ORG, None, None, &spec).is_err());
        assert!(check(&h.state, "elsewhere", None, None, &before).is_err());

        let mut spec = WorkspaceSpec::default_for_create();
        spec.vcs_repo = Some(Box::new(VcsRepo {
            identifier: "a/b".into(),
            oauth_token_id: Some("ot-Token00000000000001".into()),
            ..Default::default()
        }));
        assert!(check(&h.state, ORG, None, None, &spec).is_ok());
        if let Some(r) = spec.vcs_repo.as_mut() {
            r.oauth_token_id = Some("ot-Other000000000001".into());
        }
        assert!(matches!(
            check(&h.state, ORG, None, None, &spec),
            Err(ApiError::Invalid(f)) if f[0].pointer == "/data/attributes/vcs-repo/oauth-token-id"
        ));
    }
}
