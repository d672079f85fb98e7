//! `GET /workspaces/:id/resources`: the managed resource instances of a workspace's
//! current state (TFE's workspace resources), read from the state in the blob store.
//! Addresses are not values: `read-outputs` is enough. `q` filters by address, `sort`
//! orders (`name`, `nameIndex`, `provider`, `providerType`, `module`, `updatedAt`, each
//! `:asc` or `:desc`), paged.

use terrace_crds::Workspace;
use terrace_crds::state::ResourceInstance;

use super::{ReadOutputs, state_bytes};
use crate::prelude::*;
use crate::render::stable_id;

const SORTS: &[&str] = &[
    "name",
    "nameIndex",
    "provider",
    "providerType",
    "module",
    "updatedAt",
];

fn sort(q: &QueryParams, items: &mut [ResourceInstance]) -> Result<(), ApiError> {
    let Some(s) = q.non_empty("sort") else {
        return Ok(());
    };
    let (field, desc) = match s.split_once(':') {
        Some((f, "asc")) => (f, false),
        Some((f, "desc")) => (f, true),
        None => (s, false),
        Some(_) => ("", false),
    };
    if !SORTS.contains(&field) {
        return Err(ApiError::bad_parameter(
            "sort",
            format!(
                "cannot sort by {s:?}; one of {} with :asc or :desc",
                SORTS.join(", ")
            ),
        ));
    }
    let key = |r: &ResourceInstance| -> String {
        match field {
            "name" => r.name.clone(),
            "nameIndex" => r.name_index.clone().unwrap_or_default(),
            "provider" => r.provider.clone(),
            "providerType" => r.provider_type.clone(),
            "module" => r.module.clone(),
            // Every instance of one state changed with it: the address keeps it stable.
            _ => r.address.clone(),
        }
    };
    items.sort_by_key(key);
    if desc {
        items.reverse();
    }
    Ok(())
}

pub async fn list_resources(
    State(state): State<AppState>,
    f: Found<Workspace, ReadOutputs>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    q.supported_filters(&[])?;
    let page = q.page()?;
    let current = state.index.read().current_state_version(&f.at.obj).cloned();
    let (mut items, sv_id, at) = match current {
        Some(v) => {
            let bytes = state_bytes(&state, &v).await?;
            let items = terrace_crds::state::resource_instances(&bytes)
                .map_err(|e| ApiError::internal("reading a stored state", e))?;
            let at = v.status.as_ref().and_then(|s| s.finalized_at.clone());
            (items, id_of(v.as_ref()), at)
        }
        None => (Vec::new(), String::new(), None),
    };
    if let Some(needle) = q.non_empty("q") {
        items.retain(|r| r.address.contains(needle));
    }
    sort(&q, &mut items)?;
    let ws_id = f.at.id();
    let base = format!("/api/v2/workspaces/{ws_id}/resources");
    Ok(list(&base, page, &items, |r| {
        json!({
            "id": stable_id("wsr-", &[&ws_id, &r.address]),
            "type": "resources",
            "attributes": {
                "address": r.address,
                "name": r.name,
                "created-at": at,
                "updated-at": at,
                "module": r.module,
                "provider": r.provider,
                "provider-type": r.provider_type,
                "modified-by-state-version-id": sv_id,
                "name-index": r.name_index,
            },
        })
    }))
}
