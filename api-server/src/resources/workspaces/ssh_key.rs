//! B10, B11: assigning and unassigning a workspace's SSH key (`spec.sshKey`, an SSH key
//! ID of the same organization). Answers the workspace document.

use terrace_crds::Workspace;

use super::render_located;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/api/v2/workspaces/{id}/relationships/ssh-key",
        patch(assign),
    )
}

/// The key ID a B10/B11 body names: `Some(id)` to assign, `None` to unassign. Accepts
/// the clients' shape (`type: workspaces`, `attributes.id`) and the vendor schema's
/// (`type: ssh-keys`, `id`, or `data: null`).
pub fn requested_key(body: &Value) -> Result<Option<String>, ApiError> {
    let data = match body.get("data") {
        Some(Value::Null) => return Ok(None),
        Some(Value::Object(d)) => d,
        Some(_) => return Err(ApiError::invalid("/data", "data must be an object")),
        None => {
            return Err(ApiError::invalid(
                "/data",
                "the request document needs a data object",
            ));
        }
    };
    // No type reads as TFE's documented one, "workspaces" (its schema marks it optional).
    let (value, pointer) = match data.get("type").and_then(Value::as_str) {
        Some("workspaces") | None => (
            data.get("attributes").and_then(|a| a.get("id")),
            "/data/attributes/id",
        ),
        Some("ssh-keys") => (data.get("id"), "/data/id"),
        _ => {
            return Err(ApiError::invalid(
                "/data/type",
                "type must be \"workspaces\" (or \"ssh-keys\")",
            ));
        }
    };
    match value {
        Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None => Err(ApiError::invalid(
            pointer,
            "the SSH key id is required (null to unassign the key)",
        )),
        Some(_) => Err(ApiError::invalid(
            pointer,
            "the SSH key id must be a non-empty string or null",
        )),
    }
}

/// B10 / B11: assigns or unassigns the workspace's SSH key; answers the workspace.
async fn assign(
    State(state): State<AppState>,
    f: Found<Workspace, Admin>,
    JsonApi(body): JsonApi<Value>,
) -> Result<Doc, ApiError> {
    let (caller, l) = (&f.caller, f.at);
    let wanted = requested_key(&body)?;
    if let Some(key) = &wanted {
        let found = {
            let idx = state.index.read();
            idx.ssh_keys()
                .get(key)
                .filter(|k| k.namespace().as_deref() == Some(l.ns.as_str()))
                .is_some()
        };
        if !found {
            let pointer = if body.pointer("/data/type").and_then(Value::as_str) == Some("ssh-keys")
            {
                "/data/id"
            } else {
                "/data/attributes/id"
            };
            return Err(ApiError::invalid(
                pointer,
                format!("SSH key {key:?} not found in this organization"),
            ));
        }
    }
    let updated = write::update_spec(&state, &l.ns, (*l.obj).clone(), |w| {
        Ok((w.spec.ssh_key.as_deref() != wanted.as_deref()).then(|| json!({"sshKey": wanted})))
    })
    .await?;
    let data = render_located(&state, caller, &l.with(updated)).await?;
    Ok(Doc::ok(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both body shapes parse; anything else is 422 with a pointer.
    #[test]
    fn assign_bodies() {
        let ok = |b: Value| requested_key(&b).ok();
        assert_eq!(
            ok(json!({"data": {"type": "workspaces", "attributes": {"id": "sshkey-1"}}})),
            Some(Some("sshkey-1".into()))
        );
        assert_eq!(
            ok(json!({"data": {"type": "workspaces", "attributes": {"id": null}}})),
            Some(None)
        );
        assert_eq!(
            ok(json!({"data": {"type": "ssh-keys", "id": "sshkey-2"}})),
            Some(Some("sshkey-2".into()))
        );
        assert_eq!(ok(json!({"data": null})), Some(None));
        for bad in [
            json!({"data": {"type": "workspaces", "attributes": {}}}),
            json!({"data": {"type": "workspaces", "attributes": {"id": 5}}}),
            json!({"data": {"type": "projects"}}),
            json!({}),
        ] {
            assert!(
                matches!(requested_key(&bad), Err(ApiError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
