//! Pruning: apiextensions' `pruning.PruneWithOptions` plus the ObjectMeta coercion that
//! drops unknown `metadata` fields, collecting the dotted paths removed.

use super::*;

// ---------------------------------------------------------------------------------------
// Pruning

pub(super) const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

/// The dotted path of field `key` under `parent` (`key` itself at the root).
pub(crate) fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// `root` marks the resource root, which keeps apiVersion/kind/metadata like an embedded
/// resource.
pub(super) fn prune_node(
    x: &mut Value,
    s: Option<&Structural>,
    path: &str,
    removed: &mut Vec<String>,
    root: bool,
) {
    if let Some(s) = s
        && s.preserve_unknown
    {
        skip_prune(x, s, path, removed, root);
        return;
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in m.keys() {
                    removed.push(join_key(path, k));
                }
                m.clear();
                return;
            };
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if (s.embedded || root) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(&k) {
                    if let Some(v) = m.get_mut(&k) {
                        prune_node(v, Some(prop), &join_key(path, &k), removed, false);
                    }
                } else if let Some(a) = &s.additional {
                    let sub = match a {
                        Additional::Any => None,
                        Additional::Schema(sub) => Some(sub.as_ref()),
                    };
                    if let Some(v) = m.get_mut(&k) {
                        prune_node(v, sub, &join_key(path, &k), removed, false);
                    }
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                        removed.push(join_key(path, &k));
                    }
                    m.remove(&k);
                }
            }
        }
        Value::Array(list) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, v) in list.iter_mut().enumerate() {
                prune_node(v, items, &format!("{path}[{i}]"), removed, false);
            }
        }
        _ => {}
    }
}

pub(super) fn skip_prune(
    x: &mut Value,
    s: &Structural,
    path: &str,
    removed: &mut Vec<String>,
    root: bool,
) {
    // A field or map value is pruned again; list items keep skipping.
    each_child(x, s, path, root, |v, c, path, item| {
        if item {
            skip_prune(v, c, path, removed, false);
        } else {
            prune_node(v, Some(c), path, removed, false);
        }
    });
}

/// Drops unknown ObjectMeta fields of the root object and of embedded resources, as the
/// apiextensions decoder's ObjectMeta coercion does.
pub(super) fn coerce_meta(
    x: &mut Value,
    s: &Structural,
    path: &str,
    removed: &mut Vec<String>,
    root: bool,
) {
    if (s.embedded || root)
        && let Some(Value::Object(meta)) = x.get_mut("metadata")
    {
        let unknown: Vec<String> = meta
            .keys()
            .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        for k in unknown {
            meta.remove(&k);
            removed.push(join_key(&join_key(path, "metadata"), &k));
        }
    }
    each_child(x, s, path, root, |v, c, path, _| {
        coerce_meta(v, c, path, removed, false)
    });
}

/// Calls `visit` with each child of `x` that `s` describes (a field or map value of an
/// object, an item of a list: `item`), its schema and its path. The apiVersion, kind and
/// metadata of the root and of embedded resources are not visited.
fn each_child(
    x: &mut Value,
    s: &Structural,
    path: &str,
    root: bool,
    mut visit: impl FnMut(&mut Value, &Structural, &str, bool),
) {
    match x {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if (s.embedded || root) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(c) = s.child(k) {
                    visit(v, c, &join_key(path, k), false);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = &s.items {
                for (i, v) in list.iter_mut().enumerate() {
                    visit(v, items, &format!("{path}[{i}]"), true);
                }
            }
        }
        _ => {}
    }
}
