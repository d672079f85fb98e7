//! Agent pools (read-only): declared as AgentPool objects in the organization's namespace
//! (kubectl or GitOps); workspaces in `agent` execution mode name one by ID. The API
//! lists and shows them with the caller's `list`/`get` rights on `agentpools`.

use crate::prelude::*;
use terrace_crds::AgentPool;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/organizations/{org}/agent-pools", get(list_pools))
        .route("/api/v2/agent-pools/{id}", get(show))
}

/// The JSON:API `data` of an agent pool.
pub fn render(p: &AgentPool, org: &Organization) -> Value {
    let id = id_of(p);
    json!({
        "id": id,
        "type": "agent-pools",
        "attributes": {
            "name": p.spec.name,
            "created-at": created_at(p),
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

async fn list_pools(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    let mut pools = state.listable::<AgentPool>(&o.caller, &o.org).await?;
    pools.sort_by_key(|p| p.name_any());
    let base = format!("/api/v2/organizations/{}/agent-pools", o.org.tfe_name());
    Ok(list(&base, q.page()?, &pools, |p| render(p, &o.org)))
}

async fn show(f: Found<AgentPool>) -> Doc {
    Doc::ok(render(&f.at.obj, &f.at.org))
}
