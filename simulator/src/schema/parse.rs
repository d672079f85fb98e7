//! Parsing a CRD's `openAPIV3Schema` into a [`Structural`] schema, with the checks
//! kube-apiserver rejects a CRD for (non-structural constructs, bad patterns, defaults that
//! do not prune or validate cleanly).

use super::*;

// ---------------------------------------------------------------------------------------
// Parsing

/// The error of field `key` of the schema at `path`, whose value (`shown`) is not what it
/// must be (`detail`).
fn field_error(path: &str, key: &str, shown: &str, detail: &str) -> String {
    crd_error(&format!("{path}.{key}"), shown, detail)
}

pub(super) fn get_i64(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<i64>, String> {
    get_or(m, key, None, |v| match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| field_error(path, key, &n.to_string(), "must be an integer")),
        other => Err(field_error(path, key, &render(other), "must be an integer")),
    })
}

/// Field `key` of `m`: `absent` when it is missing or null, else what `read` makes of its
/// value.
fn get_or<T>(
    m: &Map<String, Value>,
    key: &str,
    absent: T,
    read: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<T, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(absent),
        Some(v) => read(v),
    }
}

/// Field `key` of the schema at `path`: `absent` when it is missing or null, what `read`
/// takes from its value, or the error that it must be something else (`detail`).
fn get_as<T>(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
    absent: T,
    detail: &str,
    read: impl FnOnce(&Value) -> Option<T>,
) -> Result<T, String> {
    get_or(m, key, absent, |v| {
        read(v).ok_or_else(|| field_error(path, key, &render(v), detail))
    })
}

pub(super) fn get_f64(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<f64>, String> {
    get_as(m, key, path, None, "must be a number", |v| match v {
        Value::Number(n) => Some(n.as_f64()),
        _ => None,
    })
}

pub(super) fn get_bool(m: &Map<String, Value>, key: &str, path: &str) -> Result<bool, String> {
    get_as(m, key, path, false, "must be a boolean", Value::as_bool)
}

pub(super) fn get_str(m: &Map<String, Value>, key: &str, path: &str) -> Result<String, String> {
    get_as(m, key, path, String::new(), "must be a string", |v| {
        v.as_str().map(str::to_string)
    })
}

pub(super) fn get_strings(
    m: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Vec<String>, String> {
    get_or(m, key, Vec::new(), |v| match v {
        Value::Array(a) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| field_error(path, key, &render(v), "must be a list of strings"))
            })
            .collect(),
        other => Err(field_error(
            path,
            key,
            &render(other),
            "must be a list of strings",
        )),
    })
}

/// Parses one schema node. `junctor` is true inside allOf/anyOf/oneOf/not, where only value
/// validations are allowed.
pub(super) fn parse(v: &Value, path: &str, junctor: bool) -> Result<Structural, String> {
    let m = v
        .as_object()
        .ok_or_else(|| crd_error(path, &render(v), "must be an object"))?;
    let mut s = Structural {
        type_: get_str(m, "type", path)?,
        format: get_str(m, "format", path)?,
        description: get_str(m, "description", path)?,
        required: get_strings(m, "required", path)?,
        maximum: get_f64(m, "maximum", path)?,
        exclusive_maximum: get_bool(m, "exclusiveMaximum", path)?,
        minimum: get_f64(m, "minimum", path)?,
        exclusive_minimum: get_bool(m, "exclusiveMinimum", path)?,
        multiple_of: get_f64(m, "multipleOf", path)?,
        max_length: get_i64(m, "maxLength", path)?,
        min_length: get_i64(m, "minLength", path)?,
        max_items: get_i64(m, "maxItems", path)?,
        min_items: get_i64(m, "minItems", path)?,
        max_properties: get_i64(m, "maxProperties", path)?,
        min_properties: get_i64(m, "minProperties", path)?,
        unique_items: get_bool(m, "uniqueItems", path)?,
        nullable: get_bool(m, "nullable", path)?,
        preserve_unknown: get_bool(m, "x-kubernetes-preserve-unknown-fields", path)?,
        int_or_string: get_bool(m, "x-kubernetes-int-or-string", path)?,
        embedded: get_bool(m, "x-kubernetes-embedded-resource", path)?,
        list_map_keys: get_strings(m, "x-kubernetes-list-map-keys", path)?,
        ..Default::default()
    };
    if !s.type_.is_empty() && !KNOWN_TYPES.contains(&s.type_.as_str()) {
        return Err(format!(
            "{path}.type: Unsupported value: {}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
            go_quote(&s.type_)
        ));
    }
    if s.multiple_of.is_some_and(|f| f <= 0.0) {
        return Err(crd_error(
            &format!("{path}.multipleOf"),
            "0",
            "must be positive",
        ));
    }
    let lt = get_str(m, "x-kubernetes-list-type", path)?;
    if !lt.is_empty() {
        if !["atomic", "set", "map"].contains(&lt.as_str()) {
            return Err(format!(
                "{path}.x-kubernetes-list-type: Unsupported value: {}: supported values: \"atomic\", \"set\", \"map\"",
                go_quote(&lt)
            ));
        }
        if lt == "map" && s.list_map_keys.is_empty() {
            return Err(format!(
                "{path}.x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            ));
        }
        s.list_type = Some(lt);
    }
    let mt = get_str(m, "x-kubernetes-map-type", path)?;
    if !mt.is_empty() {
        s.map_type = Some(mt);
    }
    if let Some(p) = m.get("pattern") {
        let p = p
            .as_str()
            .ok_or_else(|| crd_error(&format!("{path}.pattern"), &render(p), "must be a string"))?;
        let re = Regex::new(p).map_err(|e| {
            crd_error(
                &format!("{path}.pattern"),
                &go_quote(p),
                &format!("must be a valid regular expression, but isn't: {e}"),
            )
        })?;
        s.pattern = Some((p.to_string(), re));
    }
    match m.get("enum") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => s.enum_ = Some(a.clone()),
        Some(other) => {
            return Err(crd_error(
                &format!("{path}.enum"),
                &render(other),
                "must be a list",
            ));
        }
    }
    if let Some(d) = m.get("default") {
        if junctor {
            return Err(format!(
                "{path}.default: Forbidden: must not be set inside allOf, anyOf, oneOf or not"
            ));
        }
        s.default = Some(d.clone());
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for (k, pv) in props {
            s.properties.insert(
                k.clone(),
                parse(pv, &format!("{path}.properties[{k}]"), junctor)?,
            );
        }
    }
    match m.get("additionalProperties") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(true)) => s.additional = Some(Additional::Any),
        Some(Value::Bool(false)) => {
            return Err(format!(
                "{path}.additionalProperties: Forbidden: must not be used in structural schemas (additionalProperties: false)"
            ));
        }
        Some(a) => {
            s.additional = Some(Additional::Schema(Box::new(parse(
                a,
                &format!("{path}.additionalProperties"),
                junctor,
            )?)))
        }
    }
    if s.additional.is_some() && !s.properties.is_empty() {
        return Err(format!(
            "{path}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        ));
    }
    if let Some(items) = m.get("items") {
        if items.is_array() {
            return Err(format!(
                "{path}.items: Forbidden: items must be a schema object and not an array"
            ));
        }
        s.items = Some(Box::new(parse(items, &format!("{path}.items"), junctor)?));
    }
    if !junctor && s.type_ == "array" && s.items.is_none() {
        return Err(format!("{path}.items: Required value: must be specified"));
    }
    if !junctor && s.type_.is_empty() && !s.int_or_string && !s.preserve_unknown {
        return Err(format!(
            "{path}.type: Required value: must not be empty for specified object fields"
        ));
    }
    for (key, list) in [
        ("allOf", &mut s.all_of),
        ("anyOf", &mut s.any_of),
        ("oneOf", &mut s.one_of),
    ] {
        if let Some(Value::Array(a)) = m.get(key) {
            for (i, sub) in a.iter().enumerate() {
                list.push(parse(sub, &format!("{path}.{key}[{i}]"), true)?);
            }
        }
    }
    if let Some(n) = m.get("not") {
        s.not = Some(Box::new(parse(n, &format!("{path}.not"), true)?));
    }
    if let Some(rules) = m.get("x-kubernetes-validations") {
        s.rules = crate::cel::compile_rules(rules, &format!("{path}.x-kubernetes-validations"))?;
    }
    s.has_rules = !s.rules.is_empty()
        || s.properties.values().any(|p| p.has_rules)
        || matches!(&s.additional, Some(Additional::Schema(a)) if a.has_rules)
        || s.items.as_ref().is_some_and(|i| i.has_rules)
        || s.all_of.iter().any(|a| a.has_rules);
    Ok(s)
}

/// CRD registration checks defaults: each must survive pruning unchanged and validate
/// against its schema (apiextensions' `validateStructuralDefaults`).
pub(super) fn check_defaults(s: &Structural, path: &str) -> Result<(), String> {
    if let Some(d) = &s.default {
        let mut pruned = d.clone();
        let mut removed = Vec::new();
        prune_node(&mut pruned, Some(s), "", &mut removed, false);
        if let Some(first) = removed.first() {
            return Err(format!(
                "{path}.default: Invalid value: {}: must not have unknown fields, got {first}",
                render(d)
            ));
        }
        let mut defaulted = d.clone();
        default_node(&mut defaulted, s);
        let errs = s.validate_schema_only(&defaulted, "");
        if let Some(e) = errs.first() {
            return Err(format!(
                "{path}.default: Invalid value: {}: {}",
                render(d),
                e.message
            ));
        }
    }
    for (k, p) in &s.properties {
        check_defaults(p, &format!("{path}.properties[{k}]"))?;
    }
    if let Some(Additional::Schema(a)) = &s.additional {
        check_defaults(a, &format!("{path}.additionalProperties"))?;
    }
    if let Some(i) = &s.items {
        check_defaults(i, &format!("{path}.items"))?;
    }
    Ok(())
}
