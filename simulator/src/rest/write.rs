//! The writing verbs: POST (create), PUT (update, of the object or its status) and PATCH
//! (all four patch types, server-side apply creating missing objects), with the shared
//! update path that keeps server-owned metadata and separates status.

use super::*;

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
        if kind.write_rules().tracks_generation {
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
    opts.record_manager(&mut body, operation, info, None, &now);
    if opts.dry_run {
        return Ok(WriteResult::created(body, warnings));
    }
    kind.before_store(st, info, &mut body, &name)?;
    let stored = st.put(&res, body);
    Ok(WriteResult::created(in_version(&stored, info), warnings))
}

/// Sets the `status` of the object `obj` to `status`, or removes it for `None`.
fn set_status(obj: &mut Value, status: Option<Value>) {
    if let Some(m) = obj.as_object_mut() {
        match status {
            Some(s) => {
                m.insert("status".into(), s);
            }
            None => {
                m.remove("status");
            }
        }
    }
}

/// The object an update leaves, before validation: server-owned metadata from `old`,
/// status separation.
pub(super) fn merge_for_update(
    info: &ResourceInfo,
    old: &Value,
    mut new: Value,
    status_write: bool,
) -> ApiResult<Value> {
    if status_write {
        let mut out = old.clone();
        let status = new.as_object_mut().and_then(|m| m.remove("status"));
        set_status(&mut out, status);
        return Ok(out);
    }
    if info.status_subresource {
        set_status(&mut new, old.get("status").cloned());
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

pub(super) fn strip_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

/// The common tail of update, patch and status writes.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_update(
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
    if kind.write_rules().tracks_generation
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
        return Ok(WriteResult::updated(in_version(old, info), warnings));
    }
    let now = meta::now_rfc3339();
    opts.record_manager(&mut new, operation, info, subresource, &now);
    if opts.dry_run {
        return Ok(WriteResult::updated(new, warnings));
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
        return Ok(WriteResult::updated(in_version(&last, info), warnings));
    }
    let stored = st.put(&res, new);
    Ok(WriteResult::updated(in_version(&stored, info), warnings))
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
        if !kinds::of(info).write_rules().unconditional_update {
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
    if kind == PatchType::Strategic && !kinds::of(info).write_rules().strategic_merge {
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
