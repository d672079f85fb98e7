//! SSH keys of an organization and their assignment to workspaces (SPEC.md B10, B11).
//!
//! An SSH key is an SshKey object in the organization's namespace; the private key goes
//! into a Secret owned by it (so the garbage collector removes it with the key) and is
//! never returned, logged or copied into status. Workspaces reference a key by ID in
//! `spec.sshKey`. Deleting a key first unassigns it from every workspace using it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Organization, SshKey, SshKeySpec, Workspace};

use super::{Denied, administrable, patch_spec, patch_workspace};
use crate::auth::{Caller, Check};
use crate::index::rv_at_least;
use crate::jsonapi::{
    Doc, JsonBody, QueryParams, attributes, page_slice, pagination, resource_object,
};
use crate::orgs::visible_org;
use crate::workspaces::{INDEX_WAIT, Located, kube_err, render_located};
use crate::{ApiError, AppState};

/// Key of the private key in the key's Secret.
pub const SECRET_KEY: &str = "private-key";

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/ssh-keys",
            get(list).post(create),
        )
        .route(
            "/api/v2/ssh-keys/{id}",
            get(show).patch(update).delete(delete),
        )
        .route(
            "/api/v2/workspaces/{id}/relationships/ssh-key",
            patch(assign),
        )
}

fn not_found() -> ApiError {
    ApiError::NotFound("ssh key not found".into())
}

fn key_id(k: &SshKey) -> String {
    k.labels().get(LABEL_ID).cloned().unwrap_or_default()
}

/// The JSON:API `data` of an SSH key (never the key itself).
pub fn render(k: &SshKey) -> Value {
    let id = key_id(k);
    json!({
        "id": id,
        "type": "ssh-keys",
        "attributes": {"name": k.spec.name},
        "links": {"self": format!("/api/v2/ssh-keys/{id}")},
    })
}

/// The SshKey a workspace's `spec.sshKey` names (an ID, or an object name of `ns`).
pub fn resolve(state: &AppState, ns: &str, reference: &str) -> Option<Arc<SshKey>> {
    let idx = state.index.read();
    idx.ssh_keys()
        .get(reference)
        .filter(|k| k.namespace().as_deref() == Some(ns))
        .or_else(|| {
            idx.ssh_keys()
                .in_namespace(ns)
                .find(|k| k.name_any() == reference)
        })
        .cloned()
}

fn forbidden(what: &str) -> ApiError {
    ApiError::Status(
        StatusCode::FORBIDDEN,
        format!("not authorized to {what} SSH keys in this organization"),
    )
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let ns = org.target_namespace().to_owned();
    let q = QueryParams::parse(raw.as_deref());
    let page = q.page()?;
    let mut keys: Vec<Arc<SshKey>> = if state
        .auth
        .allowed(&caller, &Check::new("list", "sshkeys", &ns, None))
        .await?
    {
        state
            .index
            .read()
            .ssh_keys()
            .in_namespace(&ns)
            .filter(|k| k.labels().contains_key(LABEL_ID))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    keys.sort_by(|a, b| {
        (
            &a.spec.name,
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
        )
            .cmp(&(
                &b.spec.name,
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ))
    });
    let data: Vec<Value> = page_slice(&keys, page).iter().map(|k| render(k)).collect();
    let (meta, links) = pagination(
        &format!("/api/v2/organizations/{}/ssh-keys", org.tfe_name()),
        page,
        keys.len(),
    );
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    )
    .into_response())
}

fn string_attr(
    attrs: &Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<String>, ApiError> {
    let pointer = format!("/data/attributes/{name}");
    match attrs.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
        None if !required => Ok(None),
        Some(Value::String(_)) => Err(ApiError::Invalid {
            pointer,
            detail: format!("{name} can't be blank"),
        }),
        None | Some(Value::Null) if required => Err(ApiError::Invalid {
            pointer,
            detail: format!("{name} is required"),
        }),
        _ => Err(ApiError::Invalid {
            pointer,
            detail: format!("{name} must be a string"),
        }),
    }
}

/// A private key must at least look like PEM or OpenSSH private key text.
fn check_private_key(value: &str) -> Result<(), ApiError> {
    if value.contains("-----BEGIN") && value.contains("PRIVATE KEY-----") {
        Ok(())
    } else {
        Err(ApiError::Invalid {
            pointer: "/data/attributes/value".into(),
            detail: "value must be a PEM or OpenSSH private key".into(),
        })
    }
}

fn secret_data(value: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([(SECRET_KEY.to_owned(), ByteString(value.as_bytes().to_vec()))])
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let ns = org.target_namespace().to_owned();
    if !state
        .auth
        .allowed(&caller, &Check::new("create", "sshkeys", &ns, None))
        .await?
    {
        return Err(forbidden("create"));
    }
    let data = resource_object(&body, "ssh-keys")?;
    let attrs = attributes(data)?;
    let name = string_attr(&attrs, "name", true)?.unwrap_or_default();
    let value = string_attr(&attrs, "value", true)?.unwrap_or_default();
    check_private_key(&value)?;
    let id = new_id(IdKind::SshKey);
    let object_name = object_name_for_id(&id);
    let secret_name = format!("{object_name}-private-key");
    let key = SshKey {
        metadata: ObjectMeta {
            name: Some(object_name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), org.name_any()),
            ])),
            ..Default::default()
        },
        spec: SshKeySpec {
            name,
            private_key_secret_ref: SecretKeyRef {
                name: secret_name.clone(),
                key: SECRET_KEY.to_owned(),
            },
        },
        status: None,
    };
    let keys: Api<SshKey> = Api::namespaced(state.client.clone(), &ns);
    let created = keys
        .create(&PostParams::default(), &key)
        .await
        .map_err(kube_err)?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([(LABEL_ID.to_owned(), id.clone())])),
            owner_references: created.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(secret_data(&value)),
        ..Default::default()
    };
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &ns);
    if let Err(e) = secrets.create(&PostParams::default(), &secret).await {
        let _ = keys.delete(&object_name, &DeleteParams::default()).await;
        return Err(kube_err(e));
    }
    state
        .index
        .wait_until(INDEX_WAIT, |i| i.ssh_keys().get(&id).is_some())
        .await;
    Ok(Doc(StatusCode::CREATED, json!({"data": render(&created)})).into_response())
}

/// The key with this ID and its organization, if the caller may `verb` it (404 when it
/// may not even read it, 403 when it may read but not `verb`).
async fn located(
    state: &AppState,
    caller: &Caller,
    id: &str,
    verb: &'static str,
) -> Result<(Arc<SshKey>, Arc<Organization>), ApiError> {
    let (key, org) = {
        let idx = state.index.read();
        let key = idx.ssh_keys().get(id).cloned().ok_or_else(not_found)?;
        let org = idx
            .organization_of_namespace(&key.namespace().unwrap_or_default())
            .cloned()
            .ok_or_else(not_found)?;
        (key, org)
    };
    let ns = org.target_namespace();
    let name = key.name_any();
    if !state
        .auth
        .allowed(caller, &Check::new("get", "sshkeys", ns, Some(&name)))
        .await?
    {
        return Err(not_found());
    }
    if verb != "get"
        && !state
            .auth
            .allowed(caller, &Check::new(verb, "sshkeys", ns, Some(&name)))
            .await?
    {
        return Err(forbidden(verb));
    }
    Ok((key, org))
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (key, _) = located(&state, &caller, &id, "get").await?;
    Ok(Doc(StatusCode::OK, json!({"data": render(&key)})).into_response())
}

async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let (key, _) = located(&state, &caller, &id, "update").await?;
    let data = resource_object(&body, "ssh-keys")?;
    let attrs = attributes(data)?;
    let name = string_attr(&attrs, "name", false)?;
    let value = string_attr(&attrs, "value", false)?;
    if let Some(v) = &value {
        check_private_key(v)?;
    }
    let ns = key.namespace().unwrap_or_default();
    if let Some(v) = &value {
        let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &ns);
        let patch = json!({"data": {key.spec.private_key_secret_ref.key.clone(): ByteString(v.as_bytes().to_vec())}});
        secrets
            .patch(
                &key.spec.private_key_secret_ref.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(kube_err)?;
    }
    let api: Api<SshKey> = Api::namespaced(state.client.clone(), &ns);
    let updated = patch_spec(&api, (*key).clone(), |k| {
        Ok(name
            .as_ref()
            .filter(|n| **n != k.spec.name)
            .map(|n| json!({"name": n})))
    })
    .await?;
    let uid = updated.metadata.uid.clone().unwrap_or_default();
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    state
        .index
        .wait_until(INDEX_WAIT, |i| {
            i.ssh_keys()
                .by_uid(&uid)
                .is_some_and(|k| rv_at_least(k.metadata.resource_version.as_deref(), &rv))
        })
        .await;
    Ok(Doc(StatusCode::OK, json!({"data": render(&updated)})).into_response())
}

async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (key, org) = located(&state, &caller, &id, "delete").await?;
    let ns = key.namespace().unwrap_or_default();
    let object_name = key.name_any();
    // Unassign it everywhere first, so no workspace is left pointing at nothing.
    let users: Vec<Arc<Workspace>> = {
        let idx = state.index.read();
        idx.workspaces_in(&ns)
            .map(|n| {
                n.uids_by_name()
                    .filter_map(|u| idx.workspace_by_uid(u))
                    .filter(|w| {
                        w.spec
                            .ssh_key
                            .as_deref()
                            .is_some_and(|r| r == id || r == object_name)
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    for ws in users {
        let l = Located {
            ws,
            org: org.clone(),
            ns: ns.clone(),
        };
        patch_workspace(&state, &l, |w| {
            Ok(w.spec
                .ssh_key
                .as_deref()
                .is_some_and(|r| r == id || r == object_name)
                .then(|| json!({"sshKey": Value::Null})))
        })
        .await?;
    }
    let api: Api<SshKey> = Api::namespaced(state.client.clone(), &ns);
    match api.delete(&object_name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(kube_err(e)),
    }
    // The garbage collector removes the owned Secret; deleting it now keeps the key
    // material from outliving the key where no collector runs.
    let secrets: Api<Secret> = Api::namespaced(state.client.clone(), &ns);
    let secret_owned = secrets
        .get_opt(&key.spec.private_key_secret_ref.name)
        .await
        .ok()
        .flatten()
        .is_some_and(|s| {
            s.metadata
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|o| Some(&o.uid) == key.metadata.uid.as_ref())
        });
    if secret_owned {
        let _ = secrets
            .delete(
                &key.spec.private_key_secret_ref.name,
                &DeleteParams::default(),
            )
            .await;
    }
    state
        .index
        .wait_until(INDEX_WAIT, |i| i.ssh_keys().get(&id).is_none())
        .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The key ID a B10/B11 body names: `Some(id)` to assign, `None` to unassign. Accepts
/// the clients' shape (`type: workspaces`, `attributes.id`) and the vendor schema's
/// (`type: ssh-keys`, `id`, or `data: null`).
pub fn requested_key(body: &Value) -> Result<Option<String>, ApiError> {
    let data = match body.get("data") {
        Some(Value::Null) => return Ok(None),
        Some(Value::Object(d)) => d,
        Some(_) => {
            return Err(ApiError::Invalid {
                pointer: "/data".into(),
                detail: "data must be an object".into(),
            });
        }
        None => {
            return Err(ApiError::Invalid {
                pointer: "/data".into(),
                detail: "the request document needs a data object".into(),
            });
        }
    };
    let (value, pointer) = match data.get("type").and_then(Value::as_str) {
        Some("workspaces") => (
            data.get("attributes").and_then(|a| a.get("id")),
            "/data/attributes/id",
        ),
        Some("ssh-keys") => (data.get("id"), "/data/id"),
        _ => {
            return Err(ApiError::Invalid {
                pointer: "/data/type".into(),
                detail: "type must be \"workspaces\" (or \"ssh-keys\")".into(),
            });
        }
    };
    match value {
        Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None => Err(ApiError::Invalid {
            pointer: pointer.into(),
            detail: "the SSH key id is required (null to unassign the key)".into(),
        }),
        Some(_) => Err(ApiError::Invalid {
            pointer: pointer.into(),
            detail: "the SSH key id must be a non-empty string or null".into(),
        }),
    }
}

/// B10 / B11: assigns or unassigns the workspace's SSH key; answers the workspace.
async fn assign(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let l = administrable(&state, &caller, &id, Denied::Forbidden).await?;
    let wanted = requested_key(&body)?;
    if let Some(key) = &wanted
        && resolve(&state, &l.ns, key).is_none_or(|k| key_id(&k) != *key)
    {
        let pointer = if body.pointer("/data/type").and_then(Value::as_str) == Some("ssh-keys") {
            "/data/id"
        } else {
            "/data/attributes/id"
        };
        return Err(ApiError::Invalid {
            pointer: pointer.into(),
            detail: format!("SSH key {key:?} not found in this organization"),
        });
    }
    let l = patch_workspace(&state, &l, |w| {
        Ok((w.spec.ssh_key != wanted).then(|| json!({"sshKey": wanted})))
    })
    .await?;
    let data = render_located(&state, &caller, &l).await?;
    Ok(Doc(StatusCode::OK, json!({ "data": data })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::relationships::testing::{ORG, harness};

    const PEM: &str =
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecret\n-----END RSA PRIVATE KEY-----\n";

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
                matches!(requested_key(&bad), Err(ApiError::Invalid { .. })),
                "{bad}"
            );
        }
    }

    /// Create stores the key in an owned Secret and never returns it; assign, unassign,
    /// a key of no organization (422), and delete unassigning it from workspaces.
    #[tokio::test]
    async fn lifecycle() {
        let h = harness(Edition::SelfHosted).await;
        let ws = "ws-DDDDDDDDDDDDDDD1";
        h.workspace(ws, "keyed", |_| {}).await;
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/organizations/{ORG}/ssh-keys"),
                Some(json!({"data": {"type": "ssh-keys", "attributes": {"name": "deploy", "value": PEM}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        assert!(!doc.to_string().contains("MIIEsecret"));
        let key = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert!(key.starts_with("sshkey-"));

        let k8s_key = h
            .state
            .index
            .read()
            .ssh_keys()
            .get(&key)
            .cloned()
            .unwrap_or_else(|| panic!("key not indexed"));
        let secrets: Api<Secret> = Api::namespaced(h.state.client.clone(), ORG);
        let secret = secrets
            .get(&k8s_key.spec.private_key_secret_ref.name)
            .await
            .unwrap_or_else(|e| panic!("secret: {e}"));
        assert_eq!(
            secret
                .data
                .unwrap_or_default()
                .get(SECRET_KEY)
                .map(|b| b.0.clone()),
            Some(PEM.as_bytes().to_vec())
        );
        assert_eq!(
            secret.metadata.owner_references.unwrap_or_default()[0].uid,
            k8s_key.metadata.uid.clone().unwrap_or_default()
        );

        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/workspaces/{ws}/relationships/ssh-key"),
                Some(json!({"data": {"type": "workspaces", "attributes": {"id": key}}})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(
            doc["data"]["relationships"]["ssh-key"]["data"]["id"],
            key.as_str()
        );

        let (st, _) = h
            .call(
                "PATCH",
                &format!("/api/v2/workspaces/{ws}/relationships/ssh-key"),
                Some(json!({"data": {"type": "workspaces", "attributes": {"id": "sshkey-NotInThisOrg01"}}})),
            )
            .await;
        assert_eq!(st, 422);

        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/ssh-keys/{key}"),
                Some(json!({"data": {"type": "ssh-keys", "attributes": {"name": "renamed"}}})),
            )
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["name"].as_str()),
            (200, Some("renamed"))
        );
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/organizations/{ORG}/ssh-keys"),
                None,
            )
            .await;
        assert_eq!(doc["data"][0]["attributes"]["name"], "renamed");

        let (st, _) = h
            .call("DELETE", &format!("/api/v2/ssh-keys/{key}"), None)
            .await;
        assert_eq!(st, 204);
        assert_eq!(h.ws(ws).spec.ssh_key, None, "deleting the key unassigns it");
        let (st, _) = h
            .call("GET", &format!("/api/v2/ssh-keys/{key}"), None)
            .await;
        assert_eq!(st, 404);
    }

    /// Name and value are required and the value must be a private key.
    #[tokio::test]
    async fn create_validation() {
        let h = harness(Edition::SelfHosted).await;
        let path = format!("/api/v2/organizations/{ORG}/ssh-keys");
        for (attrs, pointer) in [
            (json!({"value": PEM}), "/data/attributes/name"),
            (json!({"name": "x"}), "/data/attributes/value"),
            (
                json!({"name": "x", "value": "not a key"}),
                "/data/attributes/value",
            ),
        ] {
            let (st, doc) = h
                .call(
                    "POST",
                    &path,
                    Some(json!({"data": {"type": "ssh-keys", "attributes": attrs}})),
                )
                .await;
            assert_eq!(st, 422, "{doc}");
            assert_eq!(doc["errors"][0]["source"]["pointer"], pointer);
        }
    }
}
