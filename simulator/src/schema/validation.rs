//! Schema validation: kube-openapi's SchemaValidator converted to field errors, and the
//! `x-kubernetes-list-type` invariants (sets and maps).

use super::*;
use std::cmp::Ordering;

// ---------------------------------------------------------------------------------------
// Schema validation (kube-openapi's SchemaValidator, converted to field errors)

/// The JSON type name kube-openapi infers for a value.
pub(super) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(super) fn type_matches(s: &Structural, v: &Value) -> bool {
    let types: Vec<&str> = if s.int_or_string {
        vec!["integer", "string"]
    } else if s.type_.is_empty() {
        return true;
    } else {
        vec![s.type_.as_str()]
    };
    let t = json_type(v);
    if types.contains(&t) {
        return true;
    }
    // A float holding an integral value passes for "integer"; an integer passes for "number".
    let float_int =
        t == "number" && v.as_f64().is_some_and(|f| f.fract() == 0.0) && types.contains(&"integer");
    let int_float = t == "integer" && types.contains(&"number");
    float_int || int_float
}

pub(super) fn type_label(s: &Structural) -> String {
    if s.int_or_string {
        "integer,string".into()
    } else {
        s.type_.clone()
    }
}

pub(super) fn in_body(path: &str) -> String {
    format!("{path} in body")
}

/// A numeric bound as the message prints it: an integer when validating an integer value
/// against an integral bound (kube-openapi's *Int variants), else Go's `%v` of the float.
pub(super) fn bound_text(bound: f64, value: &Value) -> String {
    if value.is_i64() || value.is_u64() {
        (bound as i64).to_string()
    } else {
        crate::table::go_float(bound)
    }
}

pub(super) fn validate_node(
    s: &Structural,
    v: &Value,
    path: &str,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) {
    // Ratcheting: a value equal to the old one keeps its old (possibly invalid) state.
    if old.is_some_and(|o| o == v) {
        return;
    }
    let has_type = !s.type_.is_empty() || s.int_or_string;
    if v.is_null() {
        if has_type && !s.nullable {
            errs.push(FieldError::type_invalid(
                path,
                "\"null\"",
                &format!(
                    "{} must be of type {}: \"null\"",
                    in_body(path),
                    type_label(s)
                ),
            ));
        }
        check_enum(s, v, path, errs);
        return;
    }
    if has_type && !type_matches(s, v) {
        let t = json_type(v);
        errs.push(FieldError::type_invalid(
            path,
            &go_quote(t),
            &format!(
                "{} must be of type {}: {}",
                in_body(path),
                type_label(s),
                go_quote(t)
            ),
        ));
    }
    validate_junctors(s, v, path, errs);
    match v {
        Value::String(text) => {
            validate_string(s, text, path, errs);
            validate_format(s, text, path, errs);
        }
        Value::Number(_) => validate_number(s, v, path, errs),
        Value::Array(list) => validate_array(s, list, path, old, errs),
        _ => {}
    }
    check_enum(s, v, path, errs);
    if let Value::Object(m) = v {
        validate_object(s, m, path, old, errs);
    }
}

pub(super) fn validate_junctors(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let summary = |text: String| FieldError::invalid("", "\"\"", &text);
    if !s.any_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        let mut ok = false;
        for sub in &s.any_of {
            let mut e = Vec::new();
            validate_node(sub, v, path, None, &mut e);
            if e.is_empty() {
                ok = true;
                break;
            }
            if best.is_none() {
                best = Some(e);
            }
        }
        if !ok {
            errs.push(summary(format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(path)
            )));
            errs.extend(best.unwrap_or_default());
        }
    }
    if !s.one_of.is_empty() {
        let mut valid = 0;
        let mut best: Option<Vec<FieldError>> = None;
        for sub in &s.one_of {
            let mut e = Vec::new();
            validate_node(sub, v, path, None, &mut e);
            if e.is_empty() {
                valid += 1;
            } else if best.is_none() {
                best = Some(e);
            }
        }
        if valid != 1 {
            let extra = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            errs.push(summary(format!(
                "{} must validate one and only one schema (oneOf). {extra}",
                go_quote(path)
            )));
            if valid == 0 {
                errs.extend(best.unwrap_or_default());
            }
        }
    }
    if !s.all_of.is_empty() {
        let mut valid = 0;
        for sub in &s.all_of {
            let mut e = Vec::new();
            validate_node(sub, v, path, None, &mut e);
            if e.is_empty() {
                valid += 1;
            }
            errs.extend(e);
        }
        if valid != s.all_of.len() {
            let extra = if valid == 0 { ". None validated" } else { "" };
            errs.push(summary(format!(
                "{} must validate all the schemas (allOf){extra}",
                go_quote(path)
            )));
        }
    }
    if let Some(not) = &s.not {
        let mut e = Vec::new();
        validate_node(not, v, path, None, &mut e);
        if e.is_empty() {
            errs.push(summary(format!(
                "{} must not validate the schema (not)",
                go_quote(path)
            )));
        }
    }
}

pub(super) fn validate_string(s: &Structural, text: &str, path: &str, errs: &mut Vec<FieldError>) {
    let len = text.chars().count() as i64;
    if let Some(max) = s.max_length
        && len > max
    {
        errs.push(FieldError::too_long(path, max));
        return;
    }
    if let Some(min) = s.min_length
        && len < min
    {
        errs.push(FieldError::invalid(
            path,
            &go_quote(text),
            &format!("{} should be at least {min} chars long", in_body(path)),
        ));
        return;
    }
    if let Some((p, re)) = &s.pattern
        && !re.is_match(text)
    {
        errs.push(FieldError::invalid(
            path,
            &go_quote(text),
            &format!("{} should match '{p}'", in_body(path)),
        ));
    }
}

pub(super) fn validate_format(s: &Structural, text: &str, path: &str, errs: &mut Vec<FieldError>) {
    let f = s.format.as_str();
    if f.is_empty() || !VALIDATED_FORMATS.contains(&f) {
        return;
    }
    if !format_ok(f, text) {
        errs.push(FieldError::type_invalid(
            path,
            &go_quote(text),
            &format!("{} must be of type {f}: {}", in_body(path), go_quote(text)),
        ));
    }
}

pub(super) fn format_ok(format: &str, s: &str) -> bool {
    fn re(p: &str, s: &str) -> bool {
        Regex::new(p).map(|r| r.is_match(s)).unwrap_or(true)
    }
    match format {
        "date-time" | "datetime" => {
            s.parse::<jiff::Timestamp>().is_ok()
                || jiff::civil::DateTime::strptime("%Y-%m-%dT%H:%M:%S", s).is_ok()
        }
        "date" => jiff::civil::Date::strptime("%Y-%m-%d", s).is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "uuid" => re(
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid3" => re(
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid4" => re(
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            s,
        ),
        "uuid5" => re(
            r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
            s,
        ),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => match s.split_once('/') {
            Some((ip, bits)) => match (ip.parse::<std::net::IpAddr>(), bits.parse::<u8>()) {
                (Ok(std::net::IpAddr::V4(_)), Ok(b)) => b <= 32,
                (Ok(std::net::IpAddr::V6(_)), Ok(b)) => b <= 128,
                _ => false,
            },
            None => false,
        },
        "hostname" => {
            s.len() <= 255
                && !s.is_empty()
                && s.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                        && l.chars().all(|c| c.is_alphanumeric() || c == '-')
                })
        }
        "email" => re(r"^[^@\s]+@[^@\s]+$", s),
        "mac" => re(
            r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$",
            s,
        ),
        "hexcolor" => re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
        "duration" => re(
            r"^(-?\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$|^\d+\s*(ns|nanos?|nanoseconds?|us|micros?|microseconds?|ms|millis?|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?|w|weeks?)$",
            s,
        ),
        _ => true,
    }
}

pub(super) fn validate_number(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(x) = v.as_f64() else { return };
    let shown = render(v);
    if let Some(f) = s.multiple_of {
        let not_multiple = if let (Some(i), true) = (v.as_i64(), f.fract() == 0.0) {
            i % (f as i64) != 0
        } else {
            let q = x / f;
            q.fract() != 0.0
        };
        if not_multiple {
            errs.push(FieldError::invalid(
                path,
                &shown,
                &format!(
                    "{} should be a multiple of {}",
                    in_body(path),
                    bound_text(f, v)
                ),
            ));
        }
    }
    // minimum, then maximum: the bound, whether it is exclusive, the side `x` must be on.
    let bounds = [
        (
            s.minimum,
            s.exclusive_minimum,
            Ordering::Greater,
            "greater than",
        ),
        (s.maximum, s.exclusive_maximum, Ordering::Less, "less than"),
    ];
    for (bound, exclusive, side, rel) in bounds {
        let Some(b) = bound else { continue };
        let within = match x.partial_cmp(&b) {
            Some(Ordering::Equal) => !exclusive,
            Some(o) => o == side,
            None => true,
        };
        if !within {
            let rel = if exclusive {
                rel.to_string()
            } else {
                format!("{rel} or equal to")
            };
            errs.push(FieldError::invalid(
                path,
                &shown,
                &format!("{} should be {rel} {}", in_body(path), bound_text(b, v)),
            ));
        }
    }
}

pub(super) fn validate_array(
    s: &Structural,
    list: &[Value],
    path: &str,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) {
    if let Some(items) = &s.items {
        let old_items = correlate_list(s, old);
        for (i, item) in list.iter().enumerate() {
            let o = old_items.as_ref().and_then(|f| f(item));
            validate_node(items, item, &format!("{path}[{i}]"), o, errs);
        }
    }
    let size = list.len() as i64;
    validate_size(path, size, (s.min_items, s.max_items), "items", errs);
    if s.unique_items {
        let mut seen = std::collections::HashSet::new();
        if list.iter().any(|v| !seen.insert(canonical_json(v))) {
            errs.push(FieldError::invalid(
                path,
                "\"\"",
                &format!("{} shouldn't contain duplicates", in_body(path)),
            ));
        }
    }
}

/// `minItems`/`maxItems` or `minProperties`/`maxProperties`: a collection of `n` `what`
/// ("items", "properties") against its `(min, max)`.
fn validate_size(
    path: &str,
    n: i64,
    (min, max): (Option<i64>, Option<i64>),
    what: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(min) = min
        && n < min
    {
        errs.push(FieldError::invalid(
            path,
            &n.to_string(),
            &format!("{} should have at least {min} {what}", in_body(path)),
        ));
    }
    if let Some(max) = max
        && n > max
    {
        errs.push(FieldError::too_many(path, n, max));
    }
}

/// For `x-kubernetes-list-type: map`, a lookup of an item's old counterpart by its keys;
/// other lists do not correlate items.
#[allow(clippy::type_complexity)]
pub(crate) fn correlate_list<'a>(
    s: &'a Structural,
    old: Option<&'a Value>,
) -> Option<Box<dyn Fn(&Value) -> Option<&'a Value> + 'a>> {
    if s.list_type.as_deref() != Some("map") {
        return None;
    }
    let old_list = old?.as_array()?;
    let keys = &s.list_map_keys;
    Some(Box::new(move |item: &Value| {
        let want: Vec<Option<&Value>> = keys.iter().map(|k| item.get(k)).collect();
        old_list
            .iter()
            .find(|o| keys.iter().map(|k| o.get(k)).collect::<Vec<_>>() == want)
    }))
}

pub(super) fn check_enum(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(values) = &s.enum_ else { return };
    if values.is_empty() {
        return;
    }
    let matches = values.iter().any(|e| match (e.as_f64(), v.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => e == v,
    });
    if !matches {
        let allowed: Vec<String> = values
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                other => canonical_json(other),
            })
            .collect();
        errs.push(FieldError::not_supported(path, &render(v), &allowed));
    }
}

pub(super) fn validate_object(
    s: &Structural,
    m: &Map<String, Value>,
    path: &str,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) {
    let n = m.len() as i64;
    validate_size(
        path,
        n,
        (s.min_properties, s.max_properties),
        "properties",
        errs,
    );
    let old_map = old.and_then(Value::as_object);
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    if let Some(Additional::Schema(a)) = &s.additional {
        for k in &keys {
            if !s.properties.contains_key(*k) {
                let o = old_map.and_then(|om| om.get(*k));
                validate_node(a, &m[*k], &format!("{path}.{k}"), o, errs);
            }
        }
    }
    for (k, prop) in &s.properties {
        if let Some(v) = m.get(k) {
            let o = old_map.and_then(|om| om.get(k));
            validate_node(prop, v, &join_key(path, k), o, errs);
        }
    }
    for k in &s.required {
        if !m.contains_key(k) {
            errs.push(FieldError::required(&join_key(path, k), ""));
        }
    }
}

// ---------------------------------------------------------------------------------------
// x-kubernetes-list-type invariants

pub(super) fn validate_lists(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
    match v {
        Value::Array(list) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in non_unique(list) {
                        errs.push(FieldError::duplicate(
                            &format!("{path}[{i}]"),
                            &render(&list[i]),
                        ));
                    }
                }
                Some("map") => validate_list_map(s, list, path, errs),
                _ => {}
            }
            if let Some(items) = &s.items {
                for (i, item) in list.iter().enumerate() {
                    validate_lists(items, item, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(m) => {
            for (k, v) in m {
                if let Some(prop) = s.properties.get(k) {
                    validate_lists(prop, v, &join_key(path, k), errs);
                } else if let Some(Additional::Schema(a)) = &s.additional {
                    validate_lists(a, v, &format!("{path}[{k}]"), errs);
                }
            }
        }
        _ => {}
    }
}

/// Indices of the second occurrence of each repeated value (apiextensions' validateListSet).
pub(super) fn non_unique(list: &[Value]) -> Vec<usize> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let count = seen.entry(canonical_json(v)).or_insert(0);
        *count += 1;
        if *count == 2 {
            out.push(i);
        }
    }
    out
}

pub(super) fn validate_list_map(
    s: &Structural,
    list: &[Value],
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    for (i, x) in list.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            errs.push(FieldError::invalid(
                &format!("{path}[{i}]"),
                &render(x),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    // Key objects; a missing key is distinct from a null one.
    let keys: Vec<Value> = list
        .iter()
        .map(|x| {
            let mut key = Map::new();
            for k in &s.list_map_keys {
                if let Some(v) = x.get(k) {
                    key.insert(k.clone(), v.clone());
                }
            }
            Value::Object(key)
        })
        .collect();
    for i in non_unique(&keys) {
        errs.push(FieldError::duplicate(
            &format!("{path}[{i}]"),
            &render(&keys[i]),
        ));
    }
}
