//! State versions and their outputs as documents: what the state version endpoints answer
//! and what a workspace includes (`current_state_version`, `outputs`), with the reads of
//! a version's state from the blob store they need.

use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::StateVersion;
use terrace_crds::resources::OutputSummary;
use terrace_crds::state::StateVersionState;

use crate::blobs::BlobStore;
use crate::render::{created_at, id_of};
use crate::{ApiError, AppState};

/// The state of a version.
pub fn state_of(v: &StateVersion) -> StateVersionState {
    StateVersionState::parse(v.status.as_ref().and_then(|s| s.status.as_deref()))
        .unwrap_or(StateVersionState::Pending)
}

/// The JSON:API `data` of a state version. `base`: the external base URL; `uploads`:
/// the one-time upload URLs, only in the answer to the create.
pub fn render(v: &StateVersion, ws_id: &str, base: &str, uploads: Option<(&str, &str)>) -> Value {
    let id = id_of(v);
    let st = v.status.clone().unwrap_or_default();
    let status = state_of(v);
    let finalized = status == StateVersionState::Finalized;
    let download = finalized.then(|| format!("{base}/api/v2/state-versions/{id}/download"));
    let json_download = (finalized && st.json_state.is_some())
        .then(|| format!("{base}/api/v2/state-versions/{id}/json-download"));
    let resources: Vec<Value> = st
        .resources
        .iter()
        .map(|r| {
            json!({"name": r.name, "type": r.type_, "count": r.count, "module": r.module, "provider": r.provider})
        })
        .collect();
    let outputs: Vec<Value> = st
        .outputs
        .iter()
        .map(|o| json!({"id": o.id, "type": "state-version-outputs"}))
        .collect();
    let created_by = v
        .spec
        .created_by
        .as_deref()
        .and_then(|c| c.strip_prefix("user:"))
        .map(|u| json!({"id": u, "type": "users"}));
    json!({
        "id": id,
        "type": "state-versions",
        "attributes": {
            "created-at": created_at(v),
            "size": st.state.as_ref().map(|b| b.size),
            "serial": v.spec.serial,
            "status": status.as_str(),
            "state-version": 4,
            "terraform-version": st.terraform_version,
            "resources": resources,
            "resources-processed": finalized,
            "providers": {},
            "modules": {"root": {}},
            "intermediate": false,
            "vcs-commit-sha": Value::Null,
            "vcs-commit-url": Value::Null,
            // Resources under management: the managed resource instances of the state.
            "billable-rum-count": finalized.then_some(st.resource_count),
            "hosted-state-download-url": download,
            "hosted-json-state-download-url": json_download,
            "hosted-state-upload-url": uploads.map(|u| u.0),
            "hosted-json-state-upload-url": uploads.map(|u| u.1),
            "permissions": {"can-restore-backing-data": false},
        },
        "relationships": {
            "workspace": {"data": {"id": ws_id, "type": "workspaces"}},
            "run": {"data": v.spec.run.as_ref().map(|r| json!({"id": r, "type": "runs"}))},
            "created-by": {"data": created_by},
            "outputs": {"data": outputs},
        },
        "links": {"self": format!("/api/v2/state-versions/{id}")},
    })
}

/// The blob store of a state version (blobs owned by it).
pub fn store_of(state: &AppState, v: &StateVersion) -> crate::blobs::AnyBlobStore {
    let ns = v.namespace().unwrap_or_default();
    crate::blobs::store(state, &ns, v.controller_owner_ref(&()))
}

/// The state file of a finalized version, whole, checked against the SHA-256 its status
/// records (404 when it has none).
pub async fn state_bytes(
    state: &AppState,
    v: &StateVersion,
) -> Result<axum::body::Bytes, ApiError> {
    let (key, sha256) = blob_of(v, |s| s.state.as_ref(), "state")?;
    let got = store_of(state, v).get(&key, Some(&sha256)).await;
    got.map_err(|e| read_error("state", e))
}

/// Which blob of a version's status (its state, its JSON state).
pub type WhichBlob = fn(&terrace_crds::StateVersionStatus) -> Option<&terrace_crds::StateBlob>;

/// The key and SHA-256 of one blob of a finalized version, or of a discarded one that
/// kept its bytes (a run's apply whose state could not become current) (`which` picks it
/// from the status; `what` names it in errors): 404 when the version has none (pending,
/// refused, expired).
fn blob_of(v: &StateVersion, which: WhichBlob, what: &str) -> Result<(String, String), ApiError> {
    let none = || ApiError::not_found(format!("this state version has no {what} data"));
    if !matches!(
        state_of(v),
        StateVersionState::Finalized | StateVersionState::Discarded
    ) {
        return Err(none());
    }
    v.status
        .as_ref()
        .and_then(which)
        .map(|b| (b.key.clone(), b.sha256.clone()))
        .ok_or_else(none)
}

fn read_error(what: &str, e: crate::blobs::BlobError) -> ApiError {
    crate::blobs::read_error(
        &format!("the {what} data of this version"),
        format!("the {what} data of this version is gone"),
        e,
    )
}

/// One blob of a finalized version as a stream (see [`blob_of`]), checked against the
/// SHA-256 its status records as it goes by.
pub async fn blob_stream(
    state: &AppState,
    v: &StateVersion,
    which: WhichBlob,
    what: &str,
) -> Result<crate::blobs::BlobStream, ApiError> {
    let (key, sha256) = blob_of(v, which, what)?;
    store_of(state, v)
        .get_stream(&key, Some(&sha256))
        .await
        .map_err(|e| read_error(what, e))
}

/// Kind of one output document: in state version answers, and in a workspace's
/// `outputs` relationship.
pub const OUTPUT_TYPE: &str = "state-version-outputs";
/// Kind of a workspace's current outputs when included in a workspace answer.
pub const WORKSPACE_OUTPUT_TYPE: &str = "workspace-outputs";

/// The `type` attribute: the kind of the cty type (`"string"`, `"list"`, `"object"`…).
fn simple_type(detailed: &Value) -> Value {
    match detailed {
        Value::String(s) => json!(s),
        Value::Array(a) => a.first().cloned().unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// The JSON:API `data` of one output. `value`: the value to show (already `null` when
/// the caller may not see it).
pub fn render_output(o: &OutputSummary, value: Value, kind: &str) -> Value {
    let detailed: Value = o
        .type_json
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null);
    let simple = simple_type(&detailed);
    let mut doc = json!({
        "id": o.id,
        "type": kind,
        "attributes": {
            "name": o.name,
            "sensitive": o.sensitive,
            "type": simple,
            "detailed-type": detailed,
            "value": value,
        },
        "links": {"self": format!("/api/v2/state-version-outputs/{}", o.id)},
    });
    // A workspace's outputs name the type `output-type` (go-tfe's WorkspaceOutputs).
    if kind == WORKSPACE_OUTPUT_TYPE {
        doc["attributes"]["output-type"] = simple;
    }
    doc
}

/// The output values of a version's state by name (empty when it has none to read).
pub async fn output_values(
    state: &AppState,
    v: &StateVersion,
) -> Result<Vec<(String, Value)>, ApiError> {
    if state_of(v) != StateVersionState::Finalized {
        return Ok(Vec::new());
    }
    Ok(terrace_crds::state::output_values(
        &state_bytes(state, v).await?,
    ))
}

/// Every output of `v`, sensitive values hidden unless `show_sensitive`.
pub async fn rendered_outputs(
    state: &AppState,
    v: &StateVersion,
    kind: &str,
    show_sensitive: bool,
) -> Result<Vec<Value>, ApiError> {
    let outputs = v
        .status
        .as_ref()
        .map(|s| s.outputs.as_slice())
        .unwrap_or(&[]);
    if outputs.is_empty() {
        return Ok(Vec::new());
    }
    let values = output_values(state, v).await?;
    Ok(outputs
        .iter()
        .map(|o| {
            let value = if o.sensitive && !show_sensitive {
                Value::Null
            } else {
                values
                    .iter()
                    .find(|(n, _)| *n == o.name)
                    .map(|(_, val)| val.clone())
                    .unwrap_or(Value::Null)
            };
            render_output(o, value, kind)
        })
        .collect())
}
