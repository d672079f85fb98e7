//! Writes: how the API server changes objects it shares with kubectl, GitOps tools and
//! the operator, and how it waits until its own index has seen the change.
//!
//! The index holds slimmed copies of the objects (no managed fields, no kubectl
//! last-applied annotation, see [`crate::index`]), so a handler never writes an object
//! back from its index copy: a replace (PUT) of that copy would delete what was slimmed
//! away, and with it whatever else the request did not mean to change. Writes are JSON
//! merge patches (RFC 7386) of exactly the fields a request changes — [`merge_diff`] of
//! the object's spec before and after the request's rules ran — carrying the
//! resourceVersion they were computed from. A concurrent writer makes the patch fail with
//! 409, and [`guarded_patch`] recomputes the change from the live object and retries, with
//! jittered backoff, until [`WRITE_DEADLINE`]: a conflict the caller did not cause never
//! reaches the caller (issue: concurrent PATCHes of different attributes).
//!
//! After a write, a handler waits (bounded by [`INDEX_WAIT`]) until the index has seen the
//! written resourceVersion ([`wait_seen`]), so a create followed by a read never answers
//! 404 and a read after an update shows the update.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Map, Value, json};
use terrace_crds::constants::{ANNOTATION_CREATED_AT, LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::object_name_for_id;

use crate::index::{Indexed, rv_at_least};
use crate::{ApiError, AppState};

/// How long a write waits for the index to reflect it.
pub const INDEX_WAIT: Duration = Duration::from_secs(10);
/// How long a guarded write keeps retrying after conflicts with concurrent writers.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// The JSON merge patch (RFC 7386) that turns `old` into `new`, or None when they are
/// equal. Objects are compared key by key (a key missing from `new` becomes `null`, which
/// removes it); any other value, arrays included, is replaced whole. A `null` in `new`
/// means "absent", as merge patches cannot store nulls.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    None | Some(Value::Null) if nv.is_null() => {}
                    None | Some(Value::Null) => {
                        patch.insert(k.clone(), nv.clone());
                    }
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            patch.insert(k.clone(), d);
                        }
                    }
                }
            }
            for (k, ov) in o {
                if !n.contains_key(k) && !ov.is_null() {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// A kind whose objects the writes here patch through a typed [`Api`] and read back.
pub trait Patchable:
    Resource<DynamicType: Default> + Clone + std::fmt::Debug + serde::de::DeserializeOwned
{
}

impl<K> Patchable for K where
    K: Resource<DynamicType: Default> + Clone + std::fmt::Debug + serde::de::DeserializeOwned
{
}

/// The merge patch of a spec from `old` to `new` (None: nothing changes).
pub fn spec_diff<S: Serialize>(old: &S, new: &S) -> Result<Option<Value>, ApiError> {
    let to_value =
        |s: &S| serde_json::to_value(s).map_err(|e| ApiError::internal("serializing a spec", e));
    Ok(merge_diff(&to_value(old)?, &to_value(new)?))
}

/// The body of a resourceVersion-guarded merge patch of `spec`.
pub fn guarded_spec_patch<K: Resource>(current: &K, spec: Value) -> Value {
    json!({
        "metadata": {"resourceVersion": current.meta().resource_version},
        "spec": spec,
    })
}

/// Applies `change` to an object with a resourceVersion-guarded merge patch, retrying on
/// conflicts with the fresh object until [`WRITE_DEADLINE`]. `change` answers the merge
/// patch of the whole object but its `metadata.resourceVersion` (None: nothing to
/// change); it sees the given copy first and the live object after a conflict. Returns the
/// written (or unchanged) object.
pub async fn guarded_patch<K, F>(api: &Api<K>, current: K, change: F) -> Result<K, ApiError>
where
    K: Patchable,
    F: FnMut(&K) -> Result<Option<Value>, ApiError>,
{
    guarded(api, current, Subresource::Object, change).await
}

/// Consumes a single-use credential an object holds: while `holds` the (live) object,
/// writes `removal` (the merge patch that takes the credential away) under its
/// resourceVersion, so of two concurrent uses exactly one succeeds. `refused()` when
/// the object no longer holds it or is gone.
pub async fn consume<K: Patchable>(
    api: &Api<K>,
    current: K,
    holds: impl Fn(&K) -> bool,
    removal: Value,
    refused: impl Fn() -> ApiError,
) -> Result<K, ApiError> {
    let taken = guarded_patch(api, current, |cur| {
        if holds(cur) {
            Ok(Some(removal.clone()))
        } else {
            Err(refused())
        }
    })
    .await;
    taken.map_err(|e| match e {
        ApiError::NotFound(_) => refused(),
        other => other,
    })
}

/// [`guarded_patch`] of the status subresource: `change` answers the merge patch of
/// `status` (None: nothing to change), written as the API's field manager.
pub async fn guarded_status_patch<K, F>(
    api: &Api<K>,
    current: K,
    mut change: F,
) -> Result<K, ApiError>
where
    K: Patchable,
    F: FnMut(&K) -> Result<Option<Value>, ApiError>,
{
    guarded(api, current, Subresource::Status, |cur| {
        Ok(change(cur)?.map(|status| json!({ "status": status })))
    })
    .await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Subresource {
    Object,
    Status,
}

async fn guarded<K, F>(
    api: &Api<K>,
    current: K,
    target: Subresource,
    mut change: F,
) -> Result<K, ApiError>
where
    K: Patchable,
    F: FnMut(&K) -> Result<Option<Value>, ApiError>,
{
    let name = current.name_any();
    let mut current = current;
    let start = Instant::now();
    let mut attempt: u32 = 0;
    let pp = PatchParams {
        field_manager: Some(terrace_crds::constants::FIELD_MANAGER_API.to_owned()),
        ..Default::default()
    };
    loop {
        let Some(mut patch) = change(&current)? else {
            return Ok(current);
        };
        patch["metadata"]["resourceVersion"] = json!(current.meta().resource_version);
        let result = match target {
            Subresource::Object => api.patch(&name, &pp, &Patch::Merge(&patch)).await,
            Subresource::Status => api.patch_status(&name, &pp, &Patch::Merge(&patch)).await,
        };
        match result {
            Ok(o) => return Ok(o),
            Err(kube::Error::Api(s)) if s.code == 409 && start.elapsed() < WRITE_DEADLINE => {
                attempt += 1;
                tokio::time::sleep(backoff(attempt)).await;
                current = api.get(&name).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Jittered exponential backoff: up to 5 ms, 10 ms, 20 ms … capped at 200 ms.
fn backoff(attempt: u32) -> Duration {
    let cap = 5u64.saturating_mul(1 << attempt.min(6)).min(200);
    Duration::from_millis(rand::random_range(0..=cap))
}

/// [`guarded_patch`] of the object's `spec`: `change` answers the spec's merge patch.
pub async fn patch_spec<K, F>(api: &Api<K>, current: K, mut change: F) -> Result<K, ApiError>
where
    K: Patchable,
    F: FnMut(&K) -> Result<Option<Value>, ApiError>,
{
    guarded_patch(api, current, |cur| {
        Ok(change(cur)?.map(|spec| guarded_spec_patch(cur, spec)))
    })
    .await
}

/// The metadata of a new object with TFE ID `id` in namespace `ns`: its name derived from
/// the ID, and the ID and organization (`org`, the Organization object's name) labels plus
/// `labels`.
pub fn new_meta(id: &str, ns: &str, org: String, labels: &[(&str, String)]) -> ObjectMeta {
    let mut all = BTreeMap::from([
        (LABEL_ID.to_owned(), id.to_owned()),
        (LABEL_ORGANIZATION.to_owned(), org),
    ]);
    all.extend(labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    ObjectMeta {
        name: Some(object_name_for_id(id)),
        namespace: Some(ns.to_owned()),
        labels: Some(all),
        // creationTimestamp has whole seconds: lists by creation order objects created
        // within one second by this, to the millisecond.
        annotations: Some(BTreeMap::from([(
            ANNOTATION_CREATED_AT.to_owned(),
            crate::render::now(),
        )])),
        ..Default::default()
    }
}

/// Sets `field` to the `given` value, if one was given (an update's optional attribute).
pub fn given<T: Clone>(field: &mut T, given: Option<&T>) {
    if let Some(v) = given {
        field.clone_from(v);
    }
}

/// Sets the optional `field` to `given`, if it is some (an update's optional attribute
/// of an optional field).
pub fn given_some<T: Clone>(field: &mut Option<T>, given: &Option<T>) {
    if given.is_some() {
        field.clone_from(given);
    }
}

/// The API of kind `K` in namespace `ns`.
pub fn api<K>(state: &AppState, ns: &str) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    Api::namespaced(state.client.clone(), ns)
}

/// Waits (bounded) until the index holds `o` at least at its resourceVersion.
pub async fn wait_seen<K: Indexed>(state: &AppState, o: &K) {
    wait_seen_meta::<K>(state, o.meta()).await;
}

/// Waits (bounded) until the index holds the object of kind `K` of `meta` at least at
/// its resourceVersion; whether it does.
pub async fn wait_seen_meta<K: Indexed>(state: &AppState, meta: &ObjectMeta) -> bool {
    let key = K::key(meta);
    let rv = meta.resource_version.clone().unwrap_or_default();
    let seen = state
        .index
        .wait_until(INDEX_WAIT, |i| {
            K::by_key(i, &key)
                .is_some_and(|x| rv_at_least(x.meta().resource_version.as_deref(), &rv))
        })
        .await;
    if !seen {
        tracing::warn!(kind = K::NAME, %key, %rv, "index did not catch up with a write in time");
    }
    seen
}

/// Waits (bounded) until the index no longer holds the object with this key.
pub async fn wait_gone<K: Indexed>(state: &AppState, key: &str) {
    state
        .index
        .wait_until(INDEX_WAIT, |i| K::by_key(i, key).is_none())
        .await;
}

/// Creates `o` in namespace `ns` and waits until the index has it.
pub async fn create<K>(state: &AppState, ns: &str, o: &K) -> Result<K, ApiError>
where
    K: Indexed + Serialize + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let created = api::<K>(state, ns)
        .create(&PostParams::default(), o)
        .await?;
    wait_seen(state, &created).await;
    Ok(created)
}

/// Creates `o` in namespace `ns` and writes its first status (as [`patch_status`]);
/// answers the object with that status. It does not wait for the index: the caller
/// [`wait_seen`]s once it has written all it will.
pub async fn create_with_status<K>(
    state: &AppState,
    ns: &str,
    o: &K,
    status: Value,
) -> Result<K, ApiError>
where
    K: Patchable + Serialize + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let api = api::<K>(state, ns);
    let created = api.create(&PostParams::default(), o).await?;
    patch_status(&api, &created.name_any(), status).await
}

/// [`patch_spec`] of a namespaced object, then [`wait_seen`].
pub async fn update_spec<K, F>(
    state: &AppState,
    ns: &str,
    current: K,
    change: F,
) -> Result<K, ApiError>
where
    K: Indexed + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    F: FnMut(&K) -> Result<Option<Value>, ApiError>,
{
    let updated = patch_spec(&api::<K>(state, ns), current, change).await?;
    wait_seen(state, &updated).await;
    Ok(updated)
}

/// Deletes the object (only this very object: a uid precondition) and waits until the
/// index has forgotten it.
pub async fn delete<K>(state: &AppState, o: &K) -> Result<(), ApiError>
where
    K: Indexed + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    delete_object(state, o, false).await
}

/// [`delete`], where an object already gone (deleted meanwhile) is fine.
pub async fn delete_if_present<K>(state: &AppState, o: &K) -> Result<(), ApiError>
where
    K: Indexed + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    delete_object(state, o, true).await
}

async fn delete_object<K>(state: &AppState, o: &K, gone_is_fine: bool) -> Result<(), ApiError>
where
    K: Indexed + Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let ns = o.meta().namespace.clone().unwrap_or_default();
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: o.meta().uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api::<K>(state, &ns).delete(&o.name_any(), &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if gone_is_fine && s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    wait_gone::<K>(state, &K::key(o.meta())).await;
    Ok(())
}

/// Deletes Secret `name` of namespace `ns` that an object owned (best effort: when this
/// fails, the owner's deletion takes it), if `value_from` (a removed sensitive variable's
/// or parameter's) refers to it: a Secret the user named is theirs and stays.
pub async fn delete_owned_secret(
    state: &AppState,
    ns: &str,
    value_from: Option<&terrace_crds::common::SecretKeyRef>,
    name: &str,
) {
    if value_from.is_none_or(|r| r.name != name) {
        return;
    }
    use k8s_openapi::api::core::v1::Secret;
    if let Err(e) = api::<Secret>(state, ns)
        .delete(name, &kube::api::DeleteParams::default())
        .await
    {
        tracing::debug!(error = %e, "a removed value's Secret (its owner's deletion takes it)");
    }
}

/// Secret `name` holding `data` in `owner`'s namespace, labelled with the owner's ID `id`
/// and owned by it (its controller owner reference: deleting the owner deletes the
/// Secret): the values a kind keeps out of its spec (SSH keys, VCS connections), to create.
pub fn secret_of<K>(
    owner: &K,
    id: &str,
    name: String,
    data: BTreeMap<String, k8s_openapi::ByteString>,
) -> k8s_openapi::api::core::v1::Secret
where
    K: Resource<DynamicType = ()>,
{
    k8s_openapi::api::core::v1::Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: owner.meta().namespace.clone(),
            labels: Some(BTreeMap::from([(LABEL_ID.to_owned(), id.to_owned())])),
            owner_references: owner.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// Writes `value` under `key` in Secret `name` (the owner's namespace), owned by `owner`
/// (its controller owner reference, so deleting the owner deletes the Secret), with a
/// forced server-side apply as the API's field manager: created or replaced whole. The
/// value never reaches a log line. For sensitive variable values.
pub async fn owned_secret<K>(
    state: &AppState,
    owner: &K,
    name: &str,
    key: &str,
    value: &str,
) -> Result<(), ApiError>
where
    K: Resource<DynamicType = ()>,
{
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let ns = owner.meta().namespace.clone().unwrap_or_default();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: owner.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            key.to_owned(),
            ByteString(value.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    let mut v = serde_json::to_value(&secret).map_err(|e| ApiError::internal("a Secret", e))?;
    v["apiVersion"] = "v1".into();
    v["kind"] = "Secret".into();
    Api::<Secret>::namespaced(state.client.clone(), &ns)
        .patch(
            name,
            &PatchParams::apply(terrace_crds::constants::FIELD_MANAGER_API).force(),
            &Patch::Apply(&v),
        )
        .await
        .map(|_| ())
        .map_err(ApiError::from)
}

/// Writes status fields (merge patch of the status subresource) as the API's field
/// manager.
pub async fn patch_status<K>(api: &Api<K>, name: &str, status: Value) -> Result<K, ApiError>
where
    K: Patchable,
{
    let pp = PatchParams {
        field_manager: Some(terrace_crds::constants::FIELD_MANAGER_API.to_owned()),
        ..Default::default()
    };
    Ok(api
        .patch_status(name, &pp, &Patch::Merge(&json!({ "status": status })))
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7386 §3 applied to a patch: the result of applying `patch` to `target`.
    fn apply(target: &Value, patch: &Value) -> Value {
        let Value::Object(p) = patch else {
            return patch.clone();
        };
        let mut out = match target {
            Value::Object(t) => t.clone(),
            _ => Map::new(),
        };
        for (k, v) in p {
            if v.is_null() {
                out.remove(k);
            } else {
                let merged = apply(out.get(k).unwrap_or(&Value::Null), v);
                out.insert(k.clone(), merged);
            }
        }
        Value::Object(out)
    }

    #[test]
    fn equal_values_need_no_patch() {
        let v = json!({"a": 1, "b": {"c": [1, 2]}, "d": null});
        assert_eq!(merge_diff(&v, &v), None);
        assert_eq!(merge_diff(&json!({"d": null}), &json!({})), None);
        assert_eq!(merge_diff(&json!({}), &json!({"d": null})), None);
    }

    #[test]
    fn only_changed_keys_are_written() {
        let old = json!({"name": "w", "autoApply": false, "tags": ["a"], "description": "x"});
        let new = json!({"name": "w", "autoApply": true, "tags": ["a"], "description": "x"});
        assert_eq!(merge_diff(&old, &new), Some(json!({"autoApply": true})));
    }

    #[test]
    fn removed_keys_become_null_and_arrays_are_replaced_whole() {
        let old = json!({"description": "x", "tags": ["a", "b"], "vcsRepo": {"identifier": "o/r", "branch": "main"}});
        let new = json!({"tags": ["a"], "vcsRepo": {"identifier": "o/r"}});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"description": null, "tags": ["a"], "vcsRepo": {"branch": null}}))
        );
    }

    #[test]
    fn type_changes_replace_the_value() {
        assert_eq!(
            merge_diff(&json!({"a": "s"}), &json!({"a": {"b": 1}})),
            Some(json!({"a": {"b": 1}}))
        );
        assert_eq!(merge_diff(&json!(1), &json!(2)), Some(json!(2)));
    }

    /// Applying the diff to the old value gives the new one (nulls read as absent), and it
    /// leaves keys neither side knows — such as fields written by other tools — alone.
    #[test]
    fn the_diff_applied_to_old_gives_new_and_keeps_unknown_keys() {
        let cases = [
            (json!({}), json!({"a": 1})),
            (
                json!({"a": 1, "b": [1]}),
                json!({"b": [2], "c": {"d": "e"}}),
            ),
            (
                json!({"s": {"x": true, "y": {"z": 1}}}),
                json!({"s": {"x": false, "y": {}}}),
            ),
            (json!({"a": {"b": 1}}), json!({"a": "flat"})),
        ];
        for (old, new) in cases {
            let patch = merge_diff(&old, &new).expect("differs");
            assert_eq!(apply(&old, &patch), new, "{old} → {new} via {patch}");
            let mut live = old.clone();
            live["other"] = json!({"owner": "kubectl"});
            let mut want = new.clone();
            want["other"] = json!({"owner": "kubectl"});
            assert_eq!(apply(&live, &patch), want, "{patch}");
        }
    }

    #[test]
    fn spec_diff_of_a_workspace_spec_touches_only_the_changed_attribute() {
        let old = terrace_crds::WorkspaceSpec {
            name: "w".into(),
            description: Some("old".into()),
            ..terrace_crds::WorkspaceSpec::default_for_create()
        };
        let mut new = old.clone();
        new.auto_apply = true;
        new.description = None;
        assert_eq!(
            spec_diff(&old, &new).expect("serializes"),
            Some(json!({"autoApply": true, "description": null}))
        );
        assert_eq!(spec_diff(&old, &old.clone()).expect("serializes"), None);
    }

    #[test]
    fn the_patch_carries_the_resource_version() {
        let mut ws =
            terrace_crds::Workspace::new("w", terrace_crds::WorkspaceSpec::default_for_create());
        ws.metadata.resource_version = Some("42".into());
        assert_eq!(
            guarded_spec_patch(&ws, json!({"autoApply": true})),
            json!({"metadata": {"resourceVersion": "42"}, "spec": {"autoApply": true}})
        );
    }
}

#[cfg(test)]
mod handler_tests {
    //! Through the real router against the in-process simulator: API writes keep the
    //! metadata they do not change, and a change computed from a stale index copy does not
    //! undo a concurrent write.

    use kube::api::{Patch, PatchParams};
    use kube::{Api, Resource, ResourceExt};
    use serde_json::{Value, json};
    use terrace_crds::{Organization, Project, Workspace};

    use crate::Edition;
    use crate::index::rv_at_least;
    use crate::testing::{DEFAULT_PROJECT, ORG, harness};

    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    const APPLIED: &str = "{\"apiVersion\":\"terrace.dev/v1alpha1\",\"spec\":{}}\n";

    /// Adds what kubectl and other tools put on an object; answers its resourceVersion.
    async fn decorate<K>(api: &Api<K>, name: &str) -> String
    where
        K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        let patch = json!({"metadata": {
            "annotations": {LAST_APPLIED: APPLIED, "example.com/owner": "alice"},
            "labels": {"example.com/team": "platform"},
        }});
        let o = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("decorate {name}: {e}"));
        o.meta().resource_version.clone().unwrap_or_default()
    }

    fn assert_kept<K: Resource>(o: &K, after: &str) {
        let m = o.meta();
        let a = m.annotations.clone().unwrap_or_default();
        assert_eq!(
            a.get(LAST_APPLIED).map(String::as_str),
            Some(APPLIED),
            "after {after}: {a:?}"
        );
        assert_eq!(
            a.get("example.com/owner").map(String::as_str),
            Some("alice"),
            "after {after}"
        );
        let l = m.labels.clone().unwrap_or_default();
        assert_eq!(
            l.get("example.com/team").map(String::as_str),
            Some("platform"),
            "after {after}"
        );
    }

    #[tokio::test]
    async fn api_writes_keep_the_metadata_they_do_not_change() {
        let h = harness(Edition::SelfHosted).await;
        let id = "ws-KeepMetadata000001";
        let ws = h.workspace(id, "keep", |_| {}).await;
        let name = ws.meta().name.clone().unwrap_or_default();
        let wss: Api<Workspace> = Api::namespaced(h.admin.clone(), ORG);
        let projects: Api<Project> = Api::namespaced(h.admin.clone(), ORG);
        let orgs: Api<Organization> = Api::all(h.admin.clone());
        let ws_rv = decorate(&wss, &name).await;
        let prj_rv = decorate(&projects, "default").await;
        let org_rv = decorate(&orgs, ORG).await;
        // The index copies are slimmed: they lack the annotation the API must not drop.
        h.wait("the decorated objects", |i| {
            i.workspace(id)
                .is_some_and(|w| rv_at_least(w.meta().resource_version.as_deref(), &ws_rv))
                && i.project(DEFAULT_PROJECT)
                    .is_some_and(|p| rv_at_least(p.meta().resource_version.as_deref(), &prj_rv))
                && i.organization(ORG)
                    .is_some_and(|o| rv_at_least(o.meta().resource_version.as_deref(), &org_rv))
        })
        .await;
        assert!(h.ws(id).annotations().get(LAST_APPLIED).is_none());

        let ws_path = format!("/api/v2/workspaces/{id}");
        let writes: Vec<(&str, String, Value, u16)> = vec![
            (
                "PATCH",
                ws_path.clone(),
                json!({"data": {"type": "workspaces", "attributes": {"auto-apply": true, "description": "api"}}}),
                200,
            ),
            (
                "POST",
                format!("{ws_path}/actions/lock"),
                json!({"reason": "r"}),
                200,
            ),
            (
                "POST",
                format!("{ws_path}/actions/unlock"),
                Value::Null,
                200,
            ),
            ("POST", format!("{ws_path}/actions/lock"), json!({}), 200),
            (
                "POST",
                format!("{ws_path}/actions/force-unlock"),
                Value::Null,
                200,
            ),
            (
                "POST",
                format!("{ws_path}/relationships/tags"),
                json!({"data": [{"type": "tags", "attributes": {"name": "api"}}]}),
                204,
            ),
            (
                "PATCH",
                format!("/api/v2/organizations/{ORG}/workspaces/keep"),
                json!({"data": {"type": "workspaces", "attributes": {"description": null}}}),
                200,
            ),
        ];
        for (method, path, body, want) in writes {
            let (status, resp) = h.call(method, &path, Some(body)).await;
            assert_eq!(status, want, "{method} {path}: {resp}");
            let live = wss.get(&name).await.unwrap_or_else(|e| panic!("get: {e}"));
            assert_kept(&live, &format!("{method} {path}"));
        }
        let live = wss.get(&name).await.unwrap_or_else(|e| panic!("get: {e}"));
        assert!(live.spec.auto_apply);
        assert_eq!(
            live.spec.description, None,
            "a null attribute clears the field"
        );
        assert_eq!(live.spec.tags, vec!["api".to_owned()]);
        assert!(
            live.annotations()
                .get(terrace_crds::constants::ANNOTATION_LOCKED_BY)
                .is_none()
        );

        let (status, resp) = h
            .call(
                "PATCH",
                &format!("/api/v2/projects/{DEFAULT_PROJECT}"),
                Some(json!({"data": {"type": "projects", "attributes": {"description": "api"}}})),
            )
            .await;
        assert_eq!(status, 200, "{resp}");
        let live = projects
            .get("default")
            .await
            .unwrap_or_else(|e| panic!("get: {e}"));
        assert_kept(&live, "project PATCH");
        assert_eq!(live.spec.description.as_deref(), Some("api"));
        let (status, resp) = h
            .call(
                "PATCH",
                &format!("/api/v2/projects/{DEFAULT_PROJECT}"),
                Some(json!({"data": {"type": "projects", "attributes": {"description": null}}})),
            )
            .await;
        assert_eq!(status, 200, "{resp}");
        let live = projects
            .get("default")
            .await
            .unwrap_or_else(|e| panic!("get: {e}"));
        assert_eq!(live.spec.description, None, "a null description clears it");

        let (status, resp) = h
            .call("PATCH", &format!("/api/v2/organizations/{ORG}"), Some(json!({"data": {"type": "organizations", "attributes": {"assessments-enforced": true}}})))
            .await;
        assert_eq!(status, 200, "{resp}");
        let live = orgs.get(ORG).await.unwrap_or_else(|e| panic!("get: {e}"));
        assert_kept(&live, "organization PATCH");
        assert!(live.spec.settings.assessments_enforced);
    }

    /// A PATCH computed from an index copy older than the live object (a kubectl write the
    /// watch has not delivered yet) does not undo that write: the resourceVersion
    /// precondition fails and the change is recomputed from the live object — or the index
    /// had caught up already. Either way both changes survive.
    #[tokio::test]
    async fn a_patch_loses_no_concurrent_write() {
        let h = harness(Edition::SelfHosted).await;
        let id = "ws-KeepConcurrent0001";
        let ws = h.workspace(id, "concurrent", |_| {}).await;
        let name = ws.meta().name.clone().unwrap_or_default();
        let wss: Api<Workspace> = Api::namespaced(h.admin.clone(), ORG);
        for round in 0..5 {
            let description = format!("kubectl {round}");
            wss.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"description": description}})),
            )
            .await
            .unwrap_or_else(|e| panic!("kubectl-like write: {e}"));
            let wd = format!("dir{round}");
            let (status, resp) = h
                .call("PATCH", &format!("/api/v2/workspaces/{id}"), Some(json!({"data": {"type": "workspaces", "attributes": {"working-directory": wd}}})))
                .await;
            assert_eq!(status, 200, "{resp}");
            let live = wss.get(&name).await.unwrap_or_else(|e| panic!("get: {e}"));
            assert_eq!(
                live.spec.description.as_deref(),
                Some(description.as_str()),
                "round {round}"
            );
            assert_eq!(
                live.spec.working_directory.as_deref(),
                Some(wd.as_str()),
                "round {round}"
            );
        }
    }
}
