//! Agent pools (read-only): declared as AgentPool objects in the organization's namespace
//! (kubectl or GitOps); workspaces in `agent` execution mode name one by ID. The API
//! lists and shows them with the caller's `list`/`get` rights on `agentpools`.

use crate::prelude::*;
use crate::read_only::{self, ReadOnly};
use terrace_crds::AgentPool;

pub fn router() -> Router<AppState> {
    read_only::router::<AgentPool>()
}

impl ReadOnly for AgentPool {
    const PATH: &'static str = "agent-pools";
    fn render(&self, org: &Organization) -> Value {
        render(self, org)
    }
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
