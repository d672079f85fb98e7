//! Defaulting: apiextensions' `defaulting.Default` over a [`Structural`] schema.

use super::*;

// ---------------------------------------------------------------------------------------
// Defaulting

pub(super) fn is_non_nullable_null(x: &Value, s: &Structural) -> bool {
    x.is_null() && !s.nullable
}

pub(super) fn default_node(x: &mut Value, s: &Structural) {
    match x {
        Value::Object(m) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                match m.get(k) {
                    Some(v) if !is_non_nullable_null(v, prop) => {}
                    _ => {
                        m.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, v) in m.iter_mut() {
                if let Some(prop) = s.properties.get(k) {
                    default_node(v, prop);
                } else if let Some(Additional::Schema(a)) = &s.additional {
                    if is_non_nullable_null(v, a)
                        && let Some(d) = &a.default
                    {
                        *v = d.clone();
                    }
                    default_node(v, a);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = &s.items {
                for v in list.iter_mut() {
                    if is_non_nullable_null(v, items)
                        && let Some(d) = &items.default
                    {
                        *v = d.clone();
                    }
                    default_node(v, items);
                }
            }
        }
        _ => {}
    }
}
