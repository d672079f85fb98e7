//! OAuth tokens (read-only): declared as OAuthToken objects in the organization's
//! namespace; a workspace's `vcs-repo.oauth-token-id` names one. The token itself lives in
//! a Secret and is never shown.

use crate::prelude::*;
use terrace_crds::OAuthToken;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/organizations/{org}/oauth-tokens", get(list_tokens))
        .route("/api/v2/oauth-tokens/{id}", get(show))
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

async fn list_tokens(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    let mut tokens = state.listable::<OAuthToken>(&o.caller, &o.org).await?;
    tokens.sort_by_key(|t| t.name_any());
    let base = format!("/api/v2/organizations/{}/oauth-tokens", o.org.tfe_name());
    Ok(list(&base, q.page()?, &tokens, |t| render(t)))
}

async fn show(f: Found<OAuthToken>) -> Doc {
    Doc::ok(render(&f.at.obj))
}
