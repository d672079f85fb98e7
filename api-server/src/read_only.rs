//! Routes of organization-scoped collections ([`org_scoped`]), and of a read-only kind
//! (declared with kubectl or GitOps, only listed and shown by the API): `GET /api/v2/organizations/{org}/<path>` (paged, by object
//! name, with the caller's `list` right) and `GET /api/v2/<path>/{id}` (with `get`). A
//! resource module implements [`ReadOnly`] and uses [`router`].

use axum::routing::MethodRouter;

use crate::prelude::*;

/// A kind the API only lists per organization and shows by ID ([`Shown`]).
pub trait ReadOnly: Shown {
    /// The collection's path segment and JSON:API type (`agent-pools`).
    const PATH: &'static str;
}

/// The kind's list and show routes.
pub fn router<K: ReadOnly>() -> Router<AppState> {
    org_scoped(K::PATH, get(list_all::<K>), get(crate::listing::show::<K>))
}

/// The two routes of an organization-scoped collection `path` (`ssh-keys`): the
/// organization's collection, `/api/v2/organizations/{org}/<path>`, and one member by
/// ID, `/api/v2/<path>/{id}`.
pub fn org_scoped(
    path: &str,
    collection: MethodRouter<AppState>,
    member: MethodRouter<AppState>,
) -> Router<AppState> {
    collection_routes(
        (&format!("/api/v2/organizations/{{org}}/{path}"), collection),
        (&format!("/api/v2/{path}/{{id}}"), member),
    )
}

/// The two routes of a collection: the collection itself (list, create) and one member
/// (show, update, delete), each a path and its methods.
pub fn collection_routes(
    (collection_path, collection): (&str, MethodRouter<AppState>),
    (member_path, member): (&str, MethodRouter<AppState>),
) -> Router<AppState> {
    Router::new()
        .route(collection_path, collection)
        .route(member_path, member)
}

/// The organization's objects of kind `K`, paged.
pub async fn list_all<K: ReadOnly>(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut l = Listing::<K>::read(&state, &o, &q, K::PATH, &[], K::INCLUDES).await?;
    l.items.sort_by_key(|p| p.name_any());
    Ok(l.answer_shown(&state.index.read(), &o.org))
}
