//! A schema's CEL rules on an object: [`validate_tree`] walks the object with its
//! structural schema and evaluates each node's `x-kubernetes-validations` (compiled by
//! [`crate::cel`]) with `self` bound to the node's value, as [`to_cel`] converts it, and
//! `oldSelf` to the correlated old value; failures are [`FieldError`]s in kube-apiserver's
//! words (see the [`crate::cel`] module for what is and is not supported).

use super::{Additional, FieldError, Structural, correlate_list, join_key};
use crate::cel::{Verdict, escape, with_self};
use crate::gofmt::go_quote;
use kube_cel::cel::{Context, Value as CelValue};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Converts a JSON value to the CEL value a rule sees, guided by its schema: declared
/// properties under their escaped names, maps (`additionalProperties`) with their keys,
/// `number` fields as doubles, the root and embedded resources with `apiVersion`, `kind`
/// and `metadata.name`/`generateName`.
fn to_cel(v: &Value, s: Option<&Structural>, resource: bool) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::String(text) => CelValue::String(Arc::new(text.clone())),
        Value::Number(n) => {
            if s.is_some_and(|s| s.type_ == "number") {
                CelValue::Float(n.as_f64().unwrap_or(0.0))
            } else if let Some(i) = n.as_i64() {
                CelValue::Int(i)
            } else if let Some(u) = n.as_u64() {
                CelValue::UInt(u)
            } else {
                CelValue::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::Array(list) => {
            let items = s.and_then(|s| s.items.as_deref());
            CelValue::List(Arc::new(
                list.iter().map(|x| to_cel(x, items, false)).collect(),
            ))
        }
        Value::Object(m) => {
            let mut out: HashMap<String, CelValue> = HashMap::new();
            let resource = resource || s.is_some_and(|s| s.embedded);
            match s {
                Some(s) if !s.properties.is_empty() || resource => {
                    for (k, x) in m {
                        if let Some(p) = s.properties.get(k) {
                            if let Some(name) = escape(k) {
                                out.insert(name, to_cel(x, Some(p), false));
                            }
                        } else if resource && (k == "apiVersion" || k == "kind") {
                            out.insert(k.clone(), to_cel(x, None, false));
                        } else if resource && k == "metadata" {
                            let mut meta: HashMap<String, CelValue> = HashMap::new();
                            for f in ["name", "generateName"] {
                                if let Some(Value::String(text)) = x.get(f) {
                                    meta.insert(f.into(), CelValue::String(Arc::new(text.clone())));
                                }
                            }
                            out.insert("metadata".into(), meta.into());
                        } else if s.preserve_unknown {
                            out.insert(k.clone(), to_cel(x, None, false));
                        }
                    }
                }
                Some(s) => {
                    let sub = s.child("");
                    for (k, x) in m {
                        out.insert(k.clone(), to_cel(x, sub, false));
                    }
                }
                None => {
                    for (k, x) in m {
                        out.insert(k.clone(), to_cel(x, None, false));
                    }
                }
            }
            out.into()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Evaluation

/// Evaluates every rule of the schema tree against `obj` (and the correlated parts of
/// `old` for transition rules), appending failures to `errs`.
pub(super) fn validate_tree(
    s: &Structural,
    obj: &Value,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) {
    walk(s, obj, old, "", true, errs);
}

fn walk(
    s: &Structural,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    if v.is_null() {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    // This node's rules, with `self` (and `oldSelf` when there is an old value) bound.
    if !s.rules.is_empty() {
        let type_name = go_quote(&s.type_);
        let unchanged = old.is_some_and(|o| o == v);
        let self_value = to_cel(v, Some(s), root);
        let old_value = old.map(|o| to_cel(o, Some(s), root));
        with_self(self_value, old_value, |ctx| {
            eval_with(s, ctx, path, &type_name, old.is_some(), unchanged, errs);
        });
    }
    for sub in &s.all_of {
        walk(sub, v, old, path, false, errs);
    }
    match v {
        Value::Array(list) => {
            if let Some(items) = &s.items {
                let lookup = correlate_list(s, old);
                for (i, item) in list.iter().enumerate() {
                    let o = lookup.as_ref().and_then(|f| f(item));
                    walk(items, item, o, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        Value::Object(m) => {
            let correlatable = s.map_type.as_deref() != Some("atomic");
            let old_map = if correlatable {
                old.and_then(Value::as_object)
            } else {
                None
            };
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            if let Some(Additional::Schema(a)) = &s.additional {
                for k in &keys {
                    let o = old_map.and_then(|om| om.get(*k));
                    walk(a, &m[*k], o, &format!("{path}[{k}]"), false, errs);
                }
            }
            for k in &keys {
                if let Some(p) = s.properties.get(*k) {
                    let o = old_map.and_then(|om| om.get(*k));
                    walk(p, &m[*k], o, &join_key(path, k), false, errs);
                }
            }
        }
        _ => {}
    }
}

fn eval_with(
    s: &Structural,
    ctx: &Context<'_>,
    path: &str,
    type_name: &str,
    has_old: bool,
    unchanged: bool,
    errs: &mut Vec<FieldError>,
) {
    for rule in &s.rules {
        if rule.uses_old_self() && !has_old {
            continue;
        }
        match rule.verdict(ctx) {
            Verdict::Holds => continue,
            Verdict::Errs(e) => {
                errs.push(FieldError::invalid(path, type_name, &e));
                continue;
            }
            // Ratcheting: a failure on a value the update did not change is dropped.
            Verdict::Fails if unchanged && !rule.uses_old_self() => continue,
            Verdict::Fails => {}
        }
        let at = if rule.field_path.is_empty() {
            path.to_string()
        } else if rule.field_path.starts_with('[') {
            format!("{path}{}", rule.field_path)
        } else {
            join_key(path, &rule.field_path)
        };
        let detail = rule.failure_detail(ctx);
        errs.push(match rule.reason {
            Some("FieldValueForbidden") => FieldError::forbidden(&at, &detail),
            Some("FieldValueRequired") => FieldError::required(&at, &detail),
            Some("FieldValueDuplicate") => FieldError::duplicate(&at, type_name),
            _ => FieldError::invalid(&at, type_name, &detail),
        });
    }
}
