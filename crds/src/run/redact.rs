//! The redacted JSON plan (TFE's `json-output-redacted`): what the terraform CLI renders
//! for `terraform show` of a saved cloud plan and for structured run output. Its shape is
//! the CLI's own (`plan_format_version`, `resource_changes`, `output_changes`,
//! `resource_drift`, `relevant_attributes`, and the provider schemas the renderer needs),
//! made from the engine's JSON plan (`show -json`) and its provider schemas (`providers
//! schema -json`). Every value the plan marks sensitive (`before_sensitive`,
//! `after_sensitive`) is replaced by an opaque marker, a digest under a salt drawn for
//! this plan alone: two equal sensitive values still read as equal (so the renderer still
//! tells a change from none), and no value can be recovered or guessed across plans. The
//! plan's `variables`, `planned_values`, `prior_state` and `configuration`, which hold
//! values as they are, are left out.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The redacted plan of JSON plan `plan` with provider schemas `schemas`, sensitive
/// values replaced under `salt`.
pub fn redacted_plan(plan: &Value, schemas: &Value, salt: &[u8]) -> Value {
    let changes = |key: &str| -> Value {
        match plan.get(key) {
            Some(Value::Array(list)) => {
                Value::Array(list.iter().map(|rc| redact_resource(rc, salt)).collect())
            }
            _ => json!([]),
        }
    };
    let outputs: Map<String, Value> = plan
        .get("output_changes")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, c)| (k.clone(), redact_change(c, salt)))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "plan_format_version": plan.get("format_version").cloned().unwrap_or(json!("1.2")),
        "output_changes": outputs,
        "resource_changes": changes("resource_changes"),
        "resource_drift": changes("resource_drift"),
        "relevant_attributes": plan.get("relevant_attributes").cloned().unwrap_or(json!([])),
        "provider_format_version": schemas.get("format_version").cloned().unwrap_or(json!("1.0")),
        "provider_schemas": schemas.get("provider_schemas").cloned().unwrap_or(json!({})),
    })
}

fn redact_resource(rc: &Value, salt: &[u8]) -> Value {
    let mut out = rc.clone();
    if let Some(change) = rc.get("change") {
        out["change"] = redact_change(change, salt);
    }
    out
}

/// A change (`before`/`after` with their sensitivity masks), its sensitive values
/// replaced.
fn redact_change(change: &Value, salt: &[u8]) -> Value {
    let mut out = change.clone();
    for (value, mask) in [("before", "before_sensitive"), ("after", "after_sensitive")] {
        if let (Some(v), Some(m)) = (change.get(value), change.get(mask)) {
            out[value] = redact(v, m, salt);
        }
    }
    // A replaced value that was unknown is still unknown: `after_unknown` stays as it is.
    out
}

/// `value` with every part `mask` marks sensitive (`true`) replaced by its marker.
pub fn redact(value: &Value, mask: &Value, salt: &[u8]) -> Value {
    match (value, mask) {
        (_, Value::Bool(true)) if !value.is_null() => marker(value, salt),
        (Value::Object(o), Value::Object(m)) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let r = m.get(k).map_or_else(|| v.clone(), |mk| redact(v, mk, salt));
                    (k.clone(), r)
                })
                .collect(),
        ),
        (Value::Array(a), Value::Array(m)) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, v)| m.get(i).map_or_else(|| v.clone(), |mk| redact(v, mk, salt)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// Every value JSON plan `plan` marks sensitive, as text (strings as they are, other
/// values as JSON): of resource and output changes and drift (`before_sensitive`,
/// `after_sensitive`), of the prior state and the planned values (`sensitive_values`), and
/// of variables the configuration declares sensitive. What a policy's messages must not
/// repeat ([`crate::policy::scrub`]).
pub fn sensitive_values(plan: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let change = |c: &Value, out: &mut Vec<String>| {
        for (value, mask) in [("before", "before_sensitive"), ("after", "after_sensitive")] {
            if let (Some(v), Some(m)) = (c.get(value), c.get(mask)) {
                collect(v, m, out);
            }
        }
    };
    for key in ["resource_changes", "resource_drift"] {
        for rc in plan
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(c) = rc.get("change") {
                change(c, &mut out);
            }
        }
    }
    for c in plan
        .get("output_changes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        change(c.1, &mut out);
    }
    fn module(m: &Value, out: &mut Vec<String>) {
        for r in m
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(v), Some(mask)) = (r.get("values"), r.get("sensitive_values")) {
                collect(v, mask, out);
            }
        }
        for child in m
            .get("child_modules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            module(child, out);
        }
    }
    for root in [
        &plan["prior_state"]["values"]["root_module"],
        &plan["planned_values"]["root_module"],
    ] {
        module(root, &mut out);
    }
    let declared = &plan["configuration"]["root_module"]["variables"];
    for (name, v) in plan
        .get("variables")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if declared[name]["sensitive"] == true {
            collect(&v["value"], &json!(true), &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The parts of `value` that `mask` marks sensitive, as text.
fn collect(value: &Value, mask: &Value, out: &mut Vec<String>) {
    match (value, mask) {
        (Value::Null, _) => {}
        (_, Value::Bool(true)) => {
            let mut leaves = Vec::new();
            leaves_of(value, &mut leaves);
            out.extend(leaves);
            if !matches!(value, Value::String(_)) {
                out.push(value.to_string());
            }
        }
        (Value::Object(o), Value::Object(m)) => {
            for (k, v) in o {
                if let Some(mk) = m.get(k) {
                    collect(v, mk, out);
                }
            }
        }
        (Value::Array(a), Value::Array(m)) => {
            for (v, mk) in a.iter().zip(m) {
                collect(v, mk, out);
            }
        }
        _ => {}
    }
}

fn leaves_of(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Null => {}
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| leaves_of(v, out)),
        Value::Object(o) => o.values().for_each(|v| leaves_of(v, out)),
        other => out.push(other.to_string()),
    }
}

/// The opaque stand-in of a sensitive value.
fn marker(value: &Value, salt: &[u8]) -> Value {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(value.to_string().as_bytes());
    let hex: String = h
        .finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    json!(format!("(sensitive value {hex})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_values_are_replaced_and_the_rest_kept() {
        let plan = json!({
            "format_version": "1.2",
            "variables": {"pw": {"value": "hunter2"}},
            "planned_values": {"x": "hunter2"},
            "resource_changes": [{
                "address": "terraform_data.x",
                "change": {
                    "actions": ["update"],
                    "before": {"input": "old-secret", "tags": {"a": "open", "b": "closed"}, "n": 1},
                    "after": {"input": "hunter2", "tags": {"a": "open", "b": "closed"}, "n": 2},
                    "before_sensitive": {"input": true, "tags": {"b": true}},
                    "after_sensitive": {"input": true, "tags": {"b": true}},
                    "after_unknown": {}
                }
            }],
            "output_changes": {
                "o": {"actions": ["create"], "before": null, "after": "s3cr3t",
                      "before_sensitive": false, "after_sensitive": true},
                "p": {"actions": ["create"], "before": null, "after": "visible",
                      "before_sensitive": false, "after_sensitive": false}
            }
        });
        let schemas = json!({"format_version": "1.0", "provider_schemas": {"p": {}}});
        let r = redacted_plan(&plan, &schemas, b"salt");
        let text = r.to_string();
        for secret in ["hunter2", "old-secret", "s3cr3t"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(r.get("variables").is_none() && r.get("planned_values").is_none());
        let c = &r["resource_changes"][0]["change"];
        assert_eq!(c["after"]["n"], 2);
        assert_eq!(c["after"]["tags"]["a"], "open");
        assert_eq!(
            c["before"]["tags"]["b"], c["after"]["tags"]["b"],
            "equal stays equal"
        );
        assert_ne!(
            c["before"]["input"], c["after"]["input"],
            "a change stays a change"
        );
        assert_eq!(r["output_changes"]["p"]["after"], "visible");
        assert_eq!(r["provider_schemas"], json!({"p": {}}));
        assert_eq!(r["plan_format_version"], "1.2");
        let other = redacted_plan(&plan, &schemas, b"another salt");
        assert_ne!(
            other["resource_changes"][0]["change"]["after"]["input"], c["after"]["input"],
            "markers differ across plans"
        );
    }
}
