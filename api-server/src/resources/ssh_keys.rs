//! SSH keys of an organization (their assignment to workspaces, SPEC.md B10/B11, is a
//! workspace relationship: see the workspaces resource).
//!
//! An SSH key is an SshKey object in the organization's namespace; the private key goes
//! into a Secret owned by it (so the garbage collector removes it with the key) and is
//! never returned, logged or copied into status. Workspaces reference a key by ID in
//! `spec.sshKey`. Deleting a key first unassigns it from every workspace using it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use terrace_crds::common::SecretKeyRef;
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{SshKey, SshKeySpec, Workspace};

use crate::prelude::*;

/// Key of the private key in the key's Secret.
pub const SECRET_KEY: &str = "private-key";

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "ssh-keys",
        get(list_keys).post(create),
        get(crate::listing::show::<SshKey>)
            .patch(update)
            .delete(remove),
    )
}

/// The JSON:API `data` of an SSH key (never the key itself).
pub fn render(k: &SshKey) -> Value {
    let id = id_of(k);
    json!({
        "id": id,
        "type": "ssh-keys",
        "attributes": {"name": k.spec.name},
        "links": {"self": format!("/api/v2/ssh-keys/{id}")},
    })
}

/// 403 details (a caller who may not even read the key gets 404 from [`Found`]).
const NO_CREATE: &str = "not authorized to create SSH keys in this organization";
const NO_UPDATE: &str = "not authorized to update SSH keys in this organization";
const NO_DELETE: &str = "not authorized to delete SSH keys in this organization";

async fn list_keys(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut l = Listing::<SshKey>::read(&state, &o, &q, "ssh-keys", &[], &[]).await?;
    l.items.sort_by(|a, b| {
        (
            &a.spec.name,
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
        )
            .cmp(&(
                &b.spec.name,
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
            ))
    });
    Ok(l.answer_shown(&state.index.read(), &o.org))
}

/// The attributes of an SSH key request.
#[derive(Debug, Default, Deserialize)]
struct SshKeyAttributes {
    name: Option<String>,
    value: Option<String>,
}

impl Typed for SshKeyAttributes {
    const TYPE: &'static str = "ssh-keys";
}

/// A given string attribute that may not be blank (`required`: nor absent).
fn non_blank<'a>(
    v: Option<&'a str>,
    attr: &str,
    required: bool,
) -> Result<Option<&'a str>, ApiError> {
    match v {
        Some(s) if !s.trim().is_empty() => Ok(Some(s)),
        Some(_) => Err(ApiError::invalid_attribute(
            attr,
            format!("{attr} can't be blank"),
        )),
        None if required => Err(ApiError::invalid_attribute(
            attr,
            format!("{attr} is required"),
        )),
        None => Ok(None),
    }
}

/// Whether a value looks like PEM or OpenSSH private key text. TFE stores whatever it is
/// given, and clients that create keys and assign them rely on that, so terrace stores
/// any non-empty value too and only warns (an Event on the SshKey, never the value) when
/// it does not look like a private key.
fn looks_like_private_key(value: &str) -> bool {
    value.contains("-----BEGIN") && value.contains("PRIVATE KEY-----")
}

fn warn_if_not_a_key(state: &AppState, key: &SshKey, value: &str) {
    if !looks_like_private_key(value) {
        crate::events::warning(
            &state.events,
            key,
            "NotAPrivateKey",
            "the stored value does not look like a PEM or OpenSSH private key; Git clones using it will fail".into(),
        );
    }
}

fn secret_data(value: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([(SECRET_KEY.to_owned(), ByteString(value.as_bytes().to_vec()))])
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<SshKeyAttributes>>,
) -> Result<Doc, ApiError> {
    let (org, ns) = (o.org.clone(), o.ns().to_owned());
    if !state
        .allowed(&o.caller, &o.check("create", "sshkeys"))
        .await?
    {
        return Err(ApiError::forbidden(NO_CREATE));
    }
    let attrs = doc.checked()?.attributes;
    let name = non_blank(attrs.name.as_deref(), "name", true)?
        .unwrap_or_default()
        .to_owned();
    let value = non_blank(attrs.value.as_deref(), "value", true)?
        .unwrap_or_default()
        .to_owned();
    let id = new_id(IdKind::SshKey);
    let object_name = object_name_for_id(&id);
    let secret_name = format!("{object_name}-private-key");
    let key = SshKey {
        metadata: write::new_meta(&id, &ns, org.name_any(), &[]),
        spec: SshKeySpec {
            name,
            private_key_secret_ref: SecretKeyRef {
                name: secret_name.clone(),
                key: SECRET_KEY.to_owned(),
            },
        },
        status: None,
    };
    let keys = write::api::<SshKey>(&state, &ns);
    let created = keys.create(&PostParams::default(), &key).await?;
    let secret = write::secret_of(&created, &id, secret_name, secret_data(&value));
    let secrets = write::api::<Secret>(&state, &ns);
    if let Err(e) = secrets.create(&PostParams::default(), &secret).await {
        let _ = keys.delete(&object_name, &DeleteParams::default()).await;
        return Err(e.into());
    }
    write::wait_seen(&state, &created).await;
    warn_if_not_a_key(&state, &created, &value);
    Ok(Doc::created(render(&created)))
}

impl Shown for SshKey {
    fn data(&self, _idx: &crate::index::Inner, _org: &Organization) -> Value {
        render(self)
    }
}

async fn update(
    State(state): State<AppState>,
    f: Found<SshKey>,
    JsonApi(doc): JsonApi<Document<SshKeyAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NO_UPDATE).await?;
    let key = f.at.obj.clone();
    let attrs = doc.checked()?.attributes;
    let name = non_blank(attrs.name.as_deref(), "name", false)?.map(str::to_owned);
    let value = non_blank(attrs.value.as_deref(), "value", false)?;
    if let Some(v) = value {
        warn_if_not_a_key(&state, &key, v);
        let patch = json!({"data": {key.spec.private_key_secret_ref.key.clone(): ByteString(v.as_bytes().to_vec())}});
        write::api::<Secret>(&state, &f.at.ns)
            .patch(
                &key.spec.private_key_secret_ref.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    let updated = write::update_spec(&state, &f.at.ns, (*key).clone(), |k| {
        Ok(name
            .as_ref()
            .filter(|n| **n != k.spec.name)
            .map(|n| json!({"name": n})))
    })
    .await?;
    Ok(Doc::ok(render(&updated)))
}

async fn remove(State(state): State<AppState>, f: Found<SshKey>) -> Result<Response, ApiError> {
    f.require(&state, "delete", NO_DELETE).await?;
    let (key, ns, id) = (f.at.obj.clone(), f.at.ns.clone(), f.at.id());
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
        write::update_spec(&state, &ns, (*ws).clone(), |w| {
            Ok(w.spec
                .ssh_key
                .as_deref()
                .is_some_and(|r| r == id || r == object_name)
                .then(|| json!({"sshKey": Value::Null})))
        })
        .await?;
    }
    match write::api::<SshKey>(&state, &ns)
        .delete(&object_name, &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    // The garbage collector removes the owned Secret; deleting it now keeps the key
    // material from outliving the key where no collector runs.
    let secrets = write::api::<Secret>(&state, &ns);
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
    write::wait_gone::<SshKey>(&state, &key.metadata.uid.clone().unwrap_or_default()).await;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::{ORG, harness};
    use kube::Api;

    const PEM: &str =
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecret\n-----END RSA PRIVATE KEY-----\n";

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
        let secrets: Api<Secret> = Api::namespaced(h.admin.clone(), ORG);
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

    /// Name and value are required; any non-empty value is stored (as TFE does).
    #[tokio::test]
    async fn create_validation() {
        let h = harness(Edition::SelfHosted).await;
        let path = format!("/api/v2/organizations/{ORG}/ssh-keys");
        for (attrs, pointer) in [
            (json!({"value": PEM}), "/data/attributes/name"),
            (json!({"name": "x"}), "/data/attributes/value"),
            (
                json!({"name": "x", "value": "  "}),
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

    /// A value that is not a private key is stored as TFE does (a Warning Event says so),
    /// so clients that create keys with placeholder values and assign them work.
    #[tokio::test]
    async fn any_non_empty_value_is_stored() {
        let h = harness(Edition::SelfHosted).await;
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/organizations/{ORG}/ssh-keys"),
                Some(json!({"data": {"type": "ssh-keys", "attributes": {"name": "x", "value": "not a key"}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        assert!(!doc.to_string().contains("not a key"));
    }
}
