//! Routes of a read-only, organization-scoped kind (declared with kubectl or GitOps, only
//! listed and shown by the API): `GET /api/v2/organizations/{org}/<path>` (paged, by object
//! name, with the caller's `list` right) and `GET /api/v2/<path>/{id}` (with `get`). A
//! resource module implements [`ReadOnly`] and uses [`router`].

use crate::access::Guarded;
use crate::prelude::*;

/// A kind the API only lists per organization and shows by ID.
pub trait ReadOnly: Guarded {
    /// The collection's path segment and JSON:API type (`agent-pools`).
    const PATH: &'static str;
    /// The JSON:API `data` of one object of organization `org`.
    fn render(&self, org: &Organization) -> Value;
}

/// The kind's list and show routes.
pub fn router<K: ReadOnly>() -> Router<AppState> {
    Router::new()
        .route(
            &format!("/api/v2/organizations/{{org}}/{}", K::PATH),
            get(list_all::<K>),
        )
        .route(&format!("/api/v2/{}/{{id}}", K::PATH), get(show::<K>))
}

async fn list_all<K: ReadOnly>(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    let mut objects = state.listable::<K>(&o.caller, &o.org).await?;
    objects.sort_by_key(|p| p.name_any());
    let base = format!("/api/v2/organizations/{}/{}", o.org.tfe_name(), K::PATH);
    Ok(list(&base, q.page()?, &objects, |p| p.render(&o.org)))
}

async fn show<K: ReadOnly>(f: Found<K>) -> Doc {
    Doc::ok(f.at.obj.render(&f.at.org))
}
