//! OAuth tokens: a connection as its token `ot-…` (see the module above); a workspace's
//! `vcs-repo.oauth-token-id` names one. The token itself lives in a Secret and is never
//! shown.

use terrace_crds::OAuthToken;

use super::{NO_DELETE, NO_UPDATE, SSH_KEY_KEY, client_id, put_secret_values};
use crate::prelude::*;
use crate::read_only::{self, ReadOnly};

pub fn router() -> Router<AppState> {
    read_only::org_scoped(
        OAuthToken::PATH,
        get(read_only::list_all::<OAuthToken>),
        get(crate::listing::show::<OAuthToken>)
            .patch(update)
            .delete(remove),
    )
}

impl ReadOnly for OAuthToken {
    const PATH: &'static str = "oauth-tokens";
}

impl Shown for OAuthToken {
    fn data(&self, _idx: &crate::index::Inner, _org: &Organization) -> Value {
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
            "has-ssh-key": t.spec.ssh_key_secret_ref.is_some(),
            "service-provider": t.spec.service_provider,
            "name": t.spec.name,
        },
        "relationships": {"oauth-client": {
            "data": {"id": client_id(t), "type": "oauth-clients"},
            "links": {"related": format!("/api/v2/oauth-clients/{}", client_id(t))},
        }},
        "links": {"self": format!("/api/v2/oauth-tokens/{id}")},
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct TokenAttributes {
    ssh_key: Option<String>,
}

impl Typed for TokenAttributes {
    const TYPE: &'static str = "oauth-tokens";
}

async fn update(
    State(state): State<AppState>,
    f: Found<OAuthToken>,
    JsonApi(doc): JsonApi<Document<TokenAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NO_UPDATE).await?;
    let a = doc.checked()?.attributes;
    let Some(key) = a.ssh_key.filter(|k| !k.is_empty()) else {
        return Ok(Doc::ok(render(&f.at.obj)));
    };
    let refs = put_secret_values(&state, &f.at.obj, &[(SSH_KEY_KEY, &key)]).await?;
    let updated = write::update_spec(&state, &f.at.ns, (*f.at.obj).clone(), |_| {
        Ok(Some(refs.clone()))
    })
    .await?;
    Ok(Doc::ok(render(&updated)))
}

/// Deleting the token deletes the connection (its client has no other token).
async fn remove(State(state): State<AppState>, f: Found<OAuthToken>) -> Result<Response, ApiError> {
    f.delete(&state, NO_DELETE).await
}
