//! The REST verbs' semantics on the store, independent of HTTP: create, update, patch,
//! delete, deletecollection, get and list.
//!
//! Each function takes the locked [`State`], the resolved resource and the request's
//! options, and either changes the store or answers an [`ApiError`]. The rules are
//! kube-apiserver's generic registry and its strategies: system metadata (`uid`,
//! `creationTimestamp`, `generation`, `resourceVersion`) belongs to the server; status
//! subresource separation; finalizers and `deletionTimestamp`; `fieldValidation`. Where a
//! kind differs (Pods, Namespaces, CRDs, custom resources' schemas, RBAC names) the verbs
//! ask its [`KindBehaviour`](crate::kinds::KindBehaviour) ([`crate::kinds`]); they name no kind themselves.

use crate::kinds;
use crate::meta;
use crate::resource::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult, Qualified};
use crate::store::{Obj, ObjKey, ResKey, State};
use base64::Engine;
use serde_json::{Map, Value, json};
use std::sync::Arc;

pub fn qualified(info: &ResourceInfo) -> Qualified {
    Qualified {
        group: info.group.clone(),
        plural: info.plural.clone(),
        kind: info.kind.clone(),
    }
}

pub fn res_key(info: &ResourceInfo) -> ResKey {
    (info.group.clone(), info.plural.clone())
}

/// `fieldValidation` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> ApiResult<FieldValidation> {
        match s {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of: Ignore, Warn, Strict, got: {other}"
            ))),
        }
    }
}

/// Options every write carries.
#[derive(Clone, Debug, Default)]
pub struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: String,
    /// Whether `fieldManager` was given explicitly (required for apply).
    pub field_manager_given: bool,
    pub field_validation: FieldValidation,
}

/// What a write produced.
#[derive(Debug)]
pub struct WriteResult {
    pub object: Value,
    pub created: bool,
    /// `Warning` header texts (unknown fields under fieldValidation=Warn).
    pub warnings: Vec<String>,
}

/// The object as the requested version serves it (one stored copy, apiVersion rewritten).
pub fn in_version(obj: &Value, info: &ResourceInfo) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.insert("apiVersion".into(), json!(info.api_version()));
        m.insert("kind".into(), json!(info.kind));
    }
    o
}

pub(crate) fn meta_of(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta_of(obj)?.get(field)?.as_str()
}

pub(crate) fn meta_mut(obj: &mut Value) -> ApiResult<&mut Map<String, Value>> {
    let m = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the object must be a JSON object"))?;
    let meta = m.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be a JSON object"))
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    meta_of(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn check_type(body: &mut Value, info: &ResourceInfo) -> ApiResult<()> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the object must be a JSON object"))?;
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the body ({k}) does not match the expected kind ({})",
            info.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let group = av.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        if !av.is_empty() && group != info.group {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
    }
    obj.insert("apiVersion".into(), json!(info.api_version()));
    obj.insert("kind".into(), json!(info.kind));
    Ok(())
}

fn field_validation(opts: &WriteOpts, pruned: Vec<String>) -> ApiResult<Vec<String>> {
    if pruned.is_empty() {
        return Ok(Vec::new());
    }
    match opts.field_validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(pruned
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect()),
        FieldValidation::Strict => {
            let list: Vec<String> = pruned
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect();
            Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )))
        }
    }
}

fn invalid1(info: &ResourceInfo, name: &str, field: &str, reason: &str, msg: String) -> ApiError {
    ApiError::invalid(
        &qualified(info),
        name,
        &[(field.to_string(), reason.to_string(), msg)],
    )
}

/// POST: create an object.
pub fn create(
    st: &mut State,
    info: &ResourceInfo,
    url_ns: Option<&str>,
    mut body: Value,
    opts: &WriteOpts,
    operation: &str,
) -> ApiResult<WriteResult> {
    check_type(&mut body, info)?;
    let kind = kinds::of(info);
    let now = meta::now_rfc3339();
    let ns = if info.namespaced {
        let body_ns = meta_str(&body, "namespace").unwrap_or("").to_string();
        let url_ns = url_ns.unwrap_or("");
        if !body_ns.is_empty() && !url_ns.is_empty() && body_ns != url_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let ns = if url_ns.is_empty() {
            body_ns
        } else {
            url_ns.to_string()
        };
        if ns.is_empty() {
            return Err(ApiError::bad_request(
                "the server could not find the requested resource",
            ));
        }
        Some(ns)
    } else {
        None
    };
    let generate = meta_str(&body, "generateName").unwrap_or("").to_string();
    let mut name = meta_str(&body, "name").unwrap_or("").to_string();
    if name.is_empty() && generate.is_empty() {
        return Err(invalid1(
            info,
            "",
            "metadata.name",
            "FieldValueRequired",
            "metadata.name: Required value: name or generateName is required".into(),
        ));
    }
    let res = res_key(info);
    if name.is_empty() {
        let base: String = generate.chars().take(58).collect();
        for _ in 0..8 {
            name = format!("{base}{}", meta::random_suffix());
            if st
                .get(&res, &(ns.clone().unwrap_or_default(), name.clone()))
                .is_none()
            {
                break;
            }
        }
    }
    if let Some(msg) = kind.validate_name(&name) {
        return Err(invalid1(
            info,
            &name,
            "metadata.name",
            "FieldValueInvalid",
            msg,
        ));
    }
    if let Some(ns) = &ns {
        kinds::namespace::check_open(st, info, ns, &name)?;
    }
    {
        let m = meta_mut(&mut body)?;
        m.insert("name".into(), json!(name));
        match &ns {
            Some(ns) => {
                m.insert("namespace".into(), json!(ns));
            }
            None => {
                m.remove("namespace");
            }
        }
        m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        m.insert("creationTimestamp".into(), json!(now));
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            m.remove(f);
        }
        if kind.tracks_generation() {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    kind.prepare_for_create(info, &mut body, &name)?;
    let pruned = kind.validate(info, &mut body, None, &name)?;
    let warnings = field_validation(opts, pruned)?;
    let key: ObjKey = (ns.clone().unwrap_or_default(), name.clone());
    if st.contains(&res, &key) {
        return Err(ApiError::already_exists(&qualified(info), &name));
    }
    meta::record_manager(
        &mut body,
        &opts.field_manager,
        operation,
        &info.api_version(),
        None,
        &now,
    );
    if opts.dry_run {
        return Ok(WriteResult {
            object: body,
            created: true,
            warnings,
        });
    }
    kind.before_store(st, info, &mut body, &name)?;
    let stored = st.put(&res, body);
    Ok(WriteResult {
        object: in_version(&stored, info),
        created: true,
        warnings,
    })
}

/// The object an update leaves, before validation: server-owned metadata from `old`,
/// status separation.
fn merge_for_update(
    info: &ResourceInfo,
    old: &Value,
    mut new: Value,
    status_write: bool,
) -> ApiResult<Value> {
    if status_write {
        let mut out = old.clone();
        let status = new.as_object_mut().and_then(|m| m.remove("status"));
        if let Some(m) = out.as_object_mut() {
            match status {
                Some(s) => {
                    m.insert("status".into(), s);
                }
                None => {
                    m.remove("status");
                }
            }
        }
        return Ok(out);
    }
    if info.status_subresource {
        let old_status = old.get("status").cloned();
        if let Some(m) = new.as_object_mut() {
            match old_status {
                Some(s) => {
                    m.insert("status".into(), s);
                }
                None => {
                    m.remove("status");
                }
            }
        }
    }
    let old_meta = meta_of(old).cloned().unwrap_or_default();
    let m = meta_mut(&mut new)?;
    for f in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "namespace",
        "name",
    ] {
        match old_meta.get(f) {
            Some(v) => {
                m.insert(f.into(), v.clone());
            }
            None => {
                m.remove(f);
            }
        }
    }
    m.remove("selfLink");
    Ok(new)
}

fn strip_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

/// The common tail of update, patch and status writes.
#[allow(clippy::too_many_arguments)]
fn finish_update(
    st: &mut State,
    info: &ResourceInfo,
    old: &Value,
    new: Value,
    opts: &WriteOpts,
    operation: &str,
    subresource: Option<&str>,
) -> ApiResult<WriteResult> {
    let kind = kinds::of(info);
    let name = meta_str(old, "name").unwrap_or("").to_string();
    let mut new = merge_for_update(info, old, new, subresource == Some("status"))?;
    check_type(&mut new, info)?;
    if meta_of(old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        let before = finalizers(old);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let list = added
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(invalid1(
                info,
                &name,
                "metadata.finalizers",
                "FieldValueForbidden",
                format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                ),
            ));
        }
    }
    let pruned = kind.validate(info, &mut new, Some(old), &name)?;
    let warnings = field_validation(opts, pruned)?;
    if kind.tracks_generation()
        && meta::spec_part(old, info.status_subresource)
            != meta::spec_part(&new, info.status_subresource)
    {
        let g = meta_of(old)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new)?.insert("generation".into(), json!(g + 1));
    }
    if !opts.dry_run {
        kind.before_store(st, info, &mut new, &name)?;
    }
    if strip_rv(&new) == strip_rv(old) {
        // A no-op write does not touch storage (no new resourceVersion, no event).
        return Ok(WriteResult {
            object: in_version(old, info),
            created: false,
            warnings,
        });
    }
    let now = meta::now_rfc3339();
    meta::record_manager(
        &mut new,
        &opts.field_manager,
        operation,
        &info.api_version(),
        subresource,
        &now,
    );
    if opts.dry_run {
        return Ok(WriteResult {
            object: new,
            created: false,
            warnings,
        });
    }
    let res = res_key(info);
    let being_deleted = meta_of(&new).is_some_and(|m| m.contains_key("deletionTimestamp"));
    // As the generic registry's `ShouldDeleteDuringUpdate`: the last finalizer going
    // completes a deletion only when no grace period is pending (a Pod its kubelet is
    // still stopping stays until the kubelet deletes it with grace 0).
    let grace_pending = meta_of(old)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    if being_deleted && finalizers(&new).is_empty() && !grace_pending {
        let key = crate::store::obj_key(&new);
        st.put(&res, new);
        let last = st
            .remove(&res, &key)
            .ok_or_else(|| ApiError::internal("object vanished"))?;
        return Ok(WriteResult {
            object: in_version(&last, info),
            created: false,
            warnings,
        });
    }
    let stored = st.put(&res, new);
    Ok(WriteResult {
        object: in_version(&stored, info),
        created: false,
        warnings,
    })
}

fn key_for(info: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjKey {
    let ns = if info.namespaced {
        ns.unwrap_or("")
    } else {
        ""
    };
    (ns.to_string(), name.to_string())
}

/// GET of one object.
pub fn get(st: &State, info: &ResourceInfo, ns: Option<&str>, name: &str) -> ApiResult<Arc<Value>> {
    st.get(&res_key(info), &key_for(info, ns, name))
        .ok_or_else(|| ApiError::not_found(&qualified(info), name))
}

/// GET as stored (the text a client gets when it asks for the stored version).
pub fn get_stored(
    st: &State,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
) -> ApiResult<Arc<Obj>> {
    st.get_obj(&res_key(info), &key_for(info, ns, name))
        .ok_or_else(|| ApiError::not_found(&qualified(info), name))
}

/// PUT: replace an object (or its status).
pub fn update(
    st: &mut State,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    mut body: Value,
    opts: &WriteOpts,
    subresource: Option<&str>,
) -> ApiResult<WriteResult> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    }
    let body_name = meta_str(&body, "name").unwrap_or("").to_string();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if info.namespaced {
        let body_ns = meta_str(&body, "namespace").unwrap_or("");
        if !body_ns.is_empty() && Some(body_ns) != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let old = get(st, info, ns, name)?;
    let rv = meta_str(&body, "resourceVersion").unwrap_or("").to_string();
    if rv.is_empty() {
        if !kinds::of(info).allows_unconditional_update() {
            return Err(invalid1(
                info,
                name,
                "metadata.resourceVersion",
                "FieldValueInvalid",
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                    .into(),
            ));
        }
    } else if Some(rv.as_str()) != meta_str(&old, "resourceVersion") {
        return Err(ApiError::conflict(&qualified(info), name));
    }
    meta_mut(&mut body)?.remove("resourceVersion");
    finish_update(st, info, &old, body, opts, "Update", subresource)
}

/// PATCH of any of the four types (server-side apply creates missing objects).
#[allow(clippy::too_many_arguments)]
pub fn patch(
    st: &mut State,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    kind: crate::patch::PatchType,
    body: &[u8],
    opts: &WriteOpts,
    subresource: Option<&str>,
) -> ApiResult<WriteResult> {
    use crate::patch::PatchType;
    if kind == PatchType::Strategic && !kinds::of(info).strategic_merge() {
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    if kind == PatchType::Apply && !opts.field_manager_given {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
        .with_details(json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [{"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}]})));
    }
    let operation = if kind == PatchType::Apply {
        "Apply"
    } else {
        "Update"
    };
    let Some(old) = st.get(&res_key(info), &key_for(info, ns, name)) else {
        if kind == PatchType::Apply && subresource.is_none() {
            let mut obj = crate::patch::parse_yaml_or_json(body)?;
            let body_name = meta_str(&obj, "name").unwrap_or("").to_string();
            if body_name != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
            meta_mut(&mut obj)?.remove("resourceVersion");
            return create(st, info, ns, obj, opts, "Apply");
        }
        return Err(ApiError::not_found(&qualified(info), name));
    };
    let mut doc = in_version(&old, info);
    crate::patch::apply_patch(&mut doc, kind, body)?;
    if !doc.is_object() {
        return Err(ApiError::bad_request(
            "the patched object must be a JSON object",
        ));
    }
    if meta_str(&doc, "name").is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta_str(&doc, "name").unwrap_or("")
        )));
    }
    if meta_str(&doc, "resourceVersion") != meta_str(&old, "resourceVersion") {
        return Err(ApiError::conflict(&qualified(info), name));
    }
    meta_mut(&mut doc)?.remove("resourceVersion");
    finish_update(st, info, &old, doc, opts, operation, subresource)
}

/// DeleteOptions from the query string and the body.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

/// Deletes an object as the generic registry does: finalizers keep it (with a
/// deletionTimestamp) until they are removed; otherwise it is gone at once. Kinds differ
/// through their [`KindBehaviour`](crate::kinds::KindBehaviour): a grace period above 0 keeps the object (with
/// `deletionTimestamp` and `deletionGracePeriodSeconds`) until whoever runs it removes it
/// (a Pod: [`crate::kinds::pod`]), a delete of an object already being deleted may
/// change that deletion, a kind may delete in its own way (a Namespace), and a removal
/// may take more along (a CRD's objects).
pub fn delete(
    st: &mut State,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
    opts: &DeleteOpts,
) -> ApiResult<Value> {
    let q = qualified(info);
    let old = get(st, info, ns, name)?;
    if let Some(uid) = &opts.precondition_uid {
        let actual = meta_str(&old, "uid").unwrap_or("");
        if uid != actual {
            return Err(ApiError::conflict_msg(
                &q,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(rv) = &opts.precondition_rv {
        let actual = meta_str(&old, "resourceVersion").unwrap_or("");
        if rv != actual {
            return Err(ApiError::conflict_msg(
                &q,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(p) = &opts.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            ),
        ));
    }
    let res = res_key(info);
    let key = crate::store::obj_key(&old);
    let kind = kinds::of(info);
    if meta_of(&old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        if opts.dry_run {
            return Ok(in_version(&old, info));
        }
        return kind
            .delete_again(st, info, &old, opts)
            .unwrap_or_else(|| Ok(in_version(&old, info)));
    }
    if opts.dry_run {
        return Ok(in_version(&old, info));
    }
    if let Some(done) = kind.delete(st, info, &old, opts) {
        return done;
    }
    if opts.propagation.as_deref() == Some("Orphan") {
        orphan_dependents(st, &old);
    }
    let period = kind.grace_period(&old, opts);
    if period > 0 || !finalizers(&old).is_empty() {
        let mut o = (*old).clone();
        let m = meta_mut(&mut o)?;
        m.insert("deletionTimestamp".into(), json!(meta::rfc3339_in(period)));
        m.insert("deletionGracePeriodSeconds".into(), json!(period));
        if kind.tracks_generation() {
            let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
            m.insert("generation".into(), json!(g + 1));
        }
        let stored = st.put(&res, o);
        return Ok(in_version(&stored, info));
    }
    let last = st
        .remove(&res, &key)
        .ok_or_else(|| ApiError::not_found(&q, name))?;
    kind.after_remove(st, &last);
    Ok(in_version(&last, info))
}

/// Removes the ownerReferences pointing at `owner` from its dependents (Orphan).
fn orphan_dependents(st: &mut State, owner: &Value) {
    let Some(uid) = meta_str(owner, "uid") else {
        return;
    };
    let deps: Vec<(ResKey, ObjKey)> = st
        .dependents
        .get(uid)
        .map(|s| s.to_vec())
        .unwrap_or_default();
    for (res, key) in deps {
        let Some(dep) = st.get(&res, &key) else {
            continue;
        };
        let mut d = (*dep).clone();
        if let Some(refs) = d
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
        }
        st.put(&res, d);
    }
}

/// list parameters.
#[derive(Clone, Debug, Default)]
pub struct ListOpts {
    pub label: LabelSelector,
    pub field: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

/// A page of a list.
pub struct ListPage {
    pub items: Vec<(ObjKey, Arc<Obj>)>,
    pub resource_version: String,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": key.0, "n": key.1}).to_string();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

fn decode_continue(tok: &str) -> ApiResult<(u64, ObjKey)> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::STANDARD
        .decode(tok)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Ok((rv, (s("ns").ok_or_else(bad)?, s("n").ok_or_else(bad)?)))
}

/// Whether an object is visible to a list/watch of `ns` with the selectors.
pub fn matches(
    obj: &Value,
    ns: Option<&str>,
    label: &LabelSelector,
    field: &FieldSelector,
) -> bool {
    if let Some(ns) = ns
        && meta_str(obj, "namespace").unwrap_or("") != ns
    {
        return false;
    }
    label.matches(obj) && field.matches(obj)
}

/// [`matches`] for a stored object (at `key`): parses it only for a field selector on
/// something other than its name and namespace.
pub fn matches_stored(
    key: &ObjKey,
    obj: &Obj,
    ns: Option<&str>,
    label: &LabelSelector,
    field: &FieldSelector,
) -> bool {
    if ns.is_some_and(|ns| key.0 != ns) || !label.matches_labels(|k| obj.label(k)) {
        return false;
    }
    field
        .matches_key(key)
        .unwrap_or_else(|| field.matches(&obj.value()))
}

/// LIST: one page of matching objects in key order.
pub fn list(
    st: &State,
    info: &ResourceInfo,
    ns: Option<&str>,
    opts: &ListOpts,
) -> ApiResult<ListPage> {
    let res = res_key(info);
    let ns = if info.namespaced { ns } else { None };
    let (rv, after) = match &opts.continue_token {
        Some(t) if !t.is_empty() => {
            let (rv, key) = decode_continue(t)?;
            (rv, Some(key))
        }
        _ => (st.rv, None),
    };
    let limit = opts.limit.filter(|l| *l > 0);
    let mut items = Vec::new();
    let mut next = None;
    if let (Some(name), None) = (opts.field.exact_name(), &after) {
        // Single-key lookups (kubectl get x --field-selector metadata.name=..., and
        // kube-runtime's watcher on one object) need no scan.
        let one = |key: ObjKey| st.get_obj(&res, &key).map(|o| (key, o));
        let candidates: Vec<(ObjKey, Arc<Obj>)> = match ns {
            Some(n) => one((n.to_string(), name.to_string())).into_iter().collect(),
            None if !info.namespaced => {
                one((String::new(), name.to_string())).into_iter().collect()
            }
            None => st
                .range(&res, None, None)
                .filter(|(k, _)| k.1 == name)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        };
        items = candidates
            .into_iter()
            .filter(|(k, o)| matches_stored(k, o, ns, &opts.label, &opts.field))
            .collect();
    } else {
        for (k, v) in st.range_selected(&res, ns, after.as_ref(), &opts.label) {
            if !matches_stored(k, v, ns, &opts.label, &opts.field) {
                continue;
            }
            if let Some(l) = limit
                && items.len() == l
            {
                // Only hand out a token when something follows.
                let last = items.last().map(|(k, _)| k).unwrap_or(k);
                next = Some(encode_continue(rv, last));
                break;
            }
            items.push((k.clone(), v.clone()));
        }
    }
    Ok(ListPage {
        items,
        resource_version: rv.to_string(),
        continue_token: next,
        remaining: None,
    })
}

/// DELETE on a collection: deletes every matching object with the same options.
pub fn delete_collection(
    st: &mut State,
    info: &ResourceInfo,
    ns: Option<&str>,
    list_opts: &ListOpts,
    opts: &DeleteOpts,
) -> ApiResult<Vec<Value>> {
    let page = list(
        st,
        info,
        ns,
        &ListOpts {
            limit: None,
            continue_token: None,
            ..list_opts.clone()
        },
    )?;
    let mut out = Vec::new();
    for ((ons, name), _) in page.items {
        let ons = if info.namespaced {
            Some(ons.as_str())
        } else {
            None
        };
        match delete(st, info, ons, &name, opts) {
            Ok(v) => out.push(v),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Deletes an object on behalf of a controller (garbage collector, namespace
/// finalizer): finalizers are honoured.
pub fn controller_delete(st: &mut State, res: &ResKey, key: &ObjKey) {
    let Some(info) = st.registry.any_version(&res.0, &res.1) else {
        // The kind is gone; drop the object.
        st.remove(res, key);
        return;
    };
    let ns = if info.namespaced {
        Some(key.0.clone())
    } else {
        None
    };
    let _ = delete(st, &info, ns.as_deref(), &key.1, &DeleteOpts::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies the apiserver's paged LIST cost: each page starts where the continue
    /// token points (no rescans), so paging through 100,000 objects is linear.
    #[test]
    fn paging_100k_is_linear() {
        let mut st = State::new(10_000, false);
        let info = st
            .registry
            .get("", "v1", "configmaps")
            .map(|i| (*i).clone());
        let Some(info) = info else {
            panic!("configmaps not registered");
        };
        let res = res_key(&info);
        for i in 0..100_000 {
            st.put(
                &res,
                json!({"metadata": {"namespace": "default", "name": format!("cm{i:06}")}}),
            );
        }
        let started = std::time::Instant::now();
        let mut opts = ListOpts {
            limit: Some(500),
            ..ListOpts::default()
        };
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let page = list(&st, &info, Some("default"), &opts).map_err(|e| e.message);
            let Ok(page) = page else {
                panic!("list failed");
            };
            seen += page.items.len();
            pages += 1;
            match page.continue_token {
                Some(t) => opts.continue_token = Some(t),
                None => break,
            }
        }
        assert_eq!((seen, pages), (100_000, 200));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// Copies `limit` semantics: no continue token when the page holds the rest.
    #[test]
    fn last_page_has_no_token() {
        let mut st = State::new(10, false);
        let Some(info) = st.registry.get("", "v1", "configmaps") else {
            panic!("configmaps not registered");
        };
        let res = res_key(&info);
        for n in ["a", "b"] {
            st.put(&res, json!({"metadata": {"namespace": "d", "name": n}}));
        }
        let opts = ListOpts {
            limit: Some(2),
            ..ListOpts::default()
        };
        let page = list(&st, &info, Some("d"), &opts).map_err(|e| e.message);
        assert!(page.is_ok_and(|p| p.items.len() == 2 && p.continue_token.is_none()));
    }
}
