//! DELETE of one object and of a collection: graceful deletion, finalizers, propagation
//! (orphaning dependents), and deletes on behalf of controllers.

use super::*;

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
    let preconditions = [
        (&opts.precondition_uid, "uid", "UID"),
        (&opts.precondition_rv, "resourceVersion", "ResourceVersion"),
    ];
    for (given, field, what) in preconditions {
        let actual = meta_str(&old, field).unwrap_or("");
        if let Some(want) = given
            && want != actual
        {
            return Err(ApiError::conflict_msg(
                &q,
                name,
                &format!(
                    "Precondition failed: {what} in precondition: {want}, {what} in object meta: {actual}"
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
    if opts.dry_run {
        return Ok(in_version(&old, info));
    }
    if let Some(done) = kind.delete(st, info, &old, opts) {
        return done;
    }
    // Deleting an object already being deleted changes nothing (unless its kind said
    // otherwise above).
    if kinds::being_deleted(&old) {
        return Ok(in_version(&old, info));
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
        if kind.write_rules().tracks_generation {
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
pub(super) fn orphan_dependents(st: &mut State, owner: &Value) {
    let Some(uid) = meta_str(owner, "uid") else {
        return;
    };
    let deps: Vec<(ResKey, ObjKey)> = st
        .dependents
        .get(uid)
        .into_iter()
        .flatten()
        .map(|(r, k)| ((**r).clone(), (**k).clone()))
        .collect();
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
