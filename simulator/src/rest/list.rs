//! LIST: selectors, paging with continue tokens, and the visibility test lists and
//! watches share.

use super::*;

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

pub(super) fn encode_continue(rv: u64, key: &ObjKey) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "ns": key.0, "n": key.1}).to_string();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

pub(super) fn decode_continue(tok: &str) -> ApiResult<(u64, ObjKey)> {
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
