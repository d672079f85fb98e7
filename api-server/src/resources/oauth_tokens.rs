//! OAuth tokens (read-only): declared as OAuthToken objects in the organization's
//! namespace; a workspace's `vcs-repo.oauth-token-id` names one. The token itself lives in
//! a Secret and is never shown.

use crate::prelude::*;
use crate::read_only::{self, ReadOnly};
use terrace_crds::OAuthToken;

pub fn router() -> Router<AppState> {
    read_only::router::<OAuthToken>()
}

impl ReadOnly for OAuthToken {
    const PATH: &'static str = "oauth-tokens";
    fn render(&self, _org: &Organization) -> Value {
        render(self)
    }
}

/// The JSON:API `data` of an OAuth token (never the token itself).
pub fn render(t: &OAuthToken) -> Value {
    let id = id_of(t);
    json!({
        "id": id,
        "type": "oauth-tokens",
        "attributes": {
            "created-at": created_at(t),
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
