//! The four PATCH content types, applied to a live object's JSON.
//!
//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) come from the json-patch crate.
//! Strategic merge patch is accepted for built-in kinds and applied as a merge patch once
//! its `$patch` / `$setElementOrder` / `$retainKeys` / `$deleteFromPrimitiveList` directives
//! are stripped (lists are replaced, not merged by key — a documented simplification).
//! Server-side apply deep-merges the applied configuration into the live object (maps
//! recursively, everything else replaced) without field-ownership conflicts.

use crate::status::ApiError;
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PatchType {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: Option<&str>) -> Option<PatchType> {
        let ct = ct?.split(';').next()?.trim();
        match ct {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Parses a request body as JSON, answering 400 like the apiserver's decoder.
pub fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}"
        ))
    })
}

/// Parses an apply body: YAML (of which JSON is a subset).
pub fn parse_yaml_or_json(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::bad_request("error decoding YAML: invalid UTF-8"))?;
    serde_saphyr::from_str::<Value>(text)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

fn strip_directives(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|k, _| !k.starts_with("$patch") && !k.starts_with('$'));
            for (_, x) in m.iter_mut() {
                strip_directives(x);
            }
        }
        Value::Array(a) => {
            a.retain(|x| {
                !(x.as_object()
                    .is_some_and(|m| m.len() == 1 && m.contains_key("$patch")))
            });
            for x in a.iter_mut() {
                strip_directives(x);
            }
        }
        _ => {}
    }
}

/// Deep merge used by server-side apply: objects merge recursively, anything else
/// (scalars, lists) from `applied` replaces the live value.
pub fn apply_merge(live: &mut Value, applied: &Value) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, av) in a {
                match l.get_mut(k) {
                    Some(lv) if lv.is_object() && av.is_object() => apply_merge(lv, av),
                    _ => {
                        l.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        (l, a) => *l = a.clone(),
    }
}

/// Applies a patch body of the given type to `doc` (the live object).
pub fn apply_patch(doc: &mut Value, kind: PatchType, body: &[u8]) -> Result<(), ApiError> {
    match kind {
        PatchType::Merge => {
            let p = parse_json(body)?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}",
                ));
            }
            json_patch::merge(doc, &p);
        }
        PatchType::Strategic => {
            let mut p = parse_json(body)?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}",
                ));
            }
            strip_directives(&mut p);
            json_patch::merge(doc, &p);
        }
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(doc, &p).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?;
        }
        PatchType::Apply => {
            let p = parse_yaml_or_json(body)?;
            if !p.is_object() {
                return Err(ApiError::bad_request("error decoding YAML: not an object"));
            }
            apply_merge(doc, &p);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Copies RFC 7386 merge-patch: null deletes, maps merge, lists replace.
    #[test]
    fn merge_patch() {
        let mut d = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        apply_patch(
            &mut d,
            PatchType::Merge,
            br#"{"a": {"b": null, "d": 3}, "l": [3]}"#,
        )
        .map_err(|e| e.message)
        .ok();
        assert_eq!(d, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    /// Copies RFC 6902 including a failing `test` op (the apiserver answers 422).
    #[test]
    fn json_patch_test_op() {
        let mut d = json!({"a": 1});
        let r = apply_patch(
            &mut d,
            PatchType::Json,
            br#"[{"op":"test","path":"/a","value":2},{"op":"replace","path":"/a","value":3}]"#,
        );
        assert_eq!(r.map_err(|e| e.code), Err(422));
        assert_eq!(d, json!({"a": 1}));
    }

    /// Copies kubectl's strategic patches for built-in kinds: directives never land in
    /// the object.
    #[test]
    fn strategic_strips_directives() {
        let mut d = json!({"data": {"a": "1"}});
        let r = apply_patch(
            &mut d,
            PatchType::Strategic,
            br#"{"$setElementOrder/x": [{"name": "a"}], "data": {"b": "2", "$retainKeys": ["b"]}}"#,
        );
        assert!(r.is_ok());
        assert_eq!(d, json!({"data": {"a": "1", "b": "2"}}));
    }

    /// Copies server-side apply's YAML body and map merging.
    #[test]
    fn apply_yaml() {
        let mut d = json!({"spec": {"a": 1, "b": [1]}});
        let r = apply_patch(&mut d, PatchType::Apply, b"spec:\n  b: [2, 3]\n  c: x\n");
        assert!(r.is_ok());
        assert_eq!(d, json!({"spec": {"a": 1, "b": [2, 3], "c": "x"}}));
    }

    /// Malformed bodies are 400, never a panic.
    #[test]
    fn malformed() {
        let mut d = json!({});
        assert_eq!(
            apply_patch(&mut d, PatchType::Merge, b"{nope").map_err(|e| e.code),
            Err(400)
        );
        assert_eq!(
            apply_patch(&mut d, PatchType::Json, b"{}").map_err(|e| e.code),
            Err(400)
        );
    }
}
