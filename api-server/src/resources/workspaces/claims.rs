//! Workspace name uniqueness per organization under concurrent creates and renames: an
//! atomic claim object (a ConfigMap named after a hash of the lowercased name) is created
//! before the workspace and owned by it afterwards, so of N concurrent creates of one name
//! exactly one gets the claim. A claim without an owner older than [`STALE_CLAIM`], whose
//! workspace is not indexed, was left by a create that never finished and is taken over.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use terrace_crds::Workspace;
use terrace_crds::resources::CLAIM_WORKSPACE_ID;

use crate::prelude::*;

/// Label of name-claim ConfigMaps.
pub const LABEL_CLAIM: &str = "terrace.dev/claim";
/// A claim with no owner older than this is considered abandoned (a crashed create).
const STALE_CLAIM: Duration = Duration::from_secs(30);

fn claim_name(name: &str) -> String {
    terrace_crds::resources::name_claim(name)
}

/// 422: the name belongs to another workspace of the organization.
pub fn taken(name: &str) -> ApiError {
    ApiError::invalid_attribute("name", format!("Name {name:?} has already been taken"))
}

/// Claims `name` in `ns` for workspace `id` atomically; 422 when another workspace has it.
pub async fn claim(state: &AppState, ns: &str, name: &str, id: &str) -> Result<(), ApiError> {
    let api = write::api::<ConfigMap>(state, ns);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(claim_name(name)),
            labels: Some(BTreeMap::from([(
                LABEL_CLAIM.to_owned(),
                "workspace-name".to_owned(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("name".to_owned(), name.to_owned()),
            (CLAIM_WORKSPACE_ID.to_owned(), id.to_owned()),
        ])),
        ..Default::default()
    };
    for _ in 0..2 {
        match api.create(&PostParams::default(), &cm).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Taken, unless the claim was abandoned by a create that never finished.
                let existing = api.get(&claim_name(name)).await?;
                let holder = existing
                    .data
                    .as_ref()
                    .and_then(|d| d.get(CLAIM_WORKSPACE_ID))
                    .cloned()
                    .unwrap_or_default();
                let owned = existing
                    .metadata
                    .owner_references
                    .as_ref()
                    .is_some_and(|o| !o.is_empty());
                let age = existing
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| jiff::Timestamp::now().duration_since(t.0))
                    .unwrap_or_default();
                let holder_alive = state.index.read().workspace(&holder).is_some();
                if owned
                    || holder_alive
                    || age < jiff::SignedDuration::try_from(STALE_CLAIM).unwrap_or_default()
                {
                    return Err(taken(name));
                }
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: existing.metadata.uid.clone(),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                let _ = api.delete(&claim_name(name), &dp).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(taken(name))
}

/// Releases the claim of `name` if workspace `id` holds it.
pub async fn release(state: &AppState, ns: &str, name: &str, id: &str) {
    let api = write::api::<ConfigMap>(state, ns);
    if let Ok(cm) = api.get(&claim_name(name)).await
        && cm
            .data
            .as_ref()
            .and_then(|d| d.get(CLAIM_WORKSPACE_ID))
            .map(String::as_str)
            == Some(id)
    {
        let _ = api
            .delete(&claim_name(name), &DeleteParams::default())
            .await;
    }
}

/// Makes the workspace own its claim, so deleting the workspace frees the name.
pub async fn own(state: &AppState, ns: &str, name: &str, ws: &Workspace) {
    let api = write::api::<ConfigMap>(state, ns);
    if let Some(owner) = ws.controller_owner_ref(&()) {
        let patch = json!({"metadata": {"ownerReferences": [owner]}});
        if let Err(e) = api
            .patch(
                &claim_name(name),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(error = %e, "could not attach the name claim to its workspace");
        }
    }
}
