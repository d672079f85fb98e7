use super::*;
use serde_json::json;

fn schema(spec_props: Value) -> Structural {
    Structural::from_crd_schema(&json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": spec_props},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    }))
    .unwrap()
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.message.clone()).collect()
}

/// Copies apiextensions defaulting.Default: absent fields get their default, a defaulted
/// object is defaulted further inside, nulls of non-nullable fields are replaced, present
/// values are kept.
#[test]
fn defaults_nested_objects() {
    let s = schema(json!({
        "mode": {"type": "string", "default": "remote"},
        "limits": {
            "type": "object",
            "default": {},
            "properties": {
                "cpu": {"type": "string", "default": "1"},
                "mem": {"type": "string"}
            }
        },
        "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]},
        "nullable": {"type": "string", "nullable": true, "default": "x"}
    }));
    let mut obj = json!({"spec": {"tags": null, "nullable": null}});
    s.apply_defaults(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {"mode": "remote", "limits": {"cpu": "1"}, "tags": ["a"], "nullable": null}})
    );
    let mut obj = json!({"spec": {"mode": "local", "limits": {"cpu": "2"}}});
    s.apply_defaults(&mut obj);
    assert_eq!(obj["spec"]["mode"], "local");
    assert_eq!(obj["spec"]["limits"], json!({"cpu": "2"}));
}

/// Copies apiextensions defaulting of list items and map values: null items of a
/// non-nullable item schema with a default are replaced, and items are defaulted inside.
#[test]
fn defaults_in_lists_and_maps() {
    let s = schema(json!({
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "port": {"type": "integer", "default": 80}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "default": "v"}}
    }));
    let mut obj = json!({"spec": {"items": [{}, {"port": 8080}], "labels": {"a": null, "b": "x"}}});
    s.apply_defaults(&mut obj);
    assert_eq!(obj["spec"]["items"], json!([{"port": 80}, {"port": 8080}]));
    assert_eq!(obj["spec"]["labels"], json!({"a": "v", "b": "x"}));
}

/// Copies pruning.PruneWithOptions: unknown fields are dropped (paths returned sorted),
/// apiVersion/kind/metadata stay at the root, x-kubernetes-preserve-unknown-fields keeps
/// everything under it, unknown ObjectMeta fields are dropped.
#[test]
fn prune_unknown_fields() {
    let s = schema(json!({
        "name": {"type": "string"},
        "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                 "properties": {"typed": {"type": "object", "properties": {"k": {"type": "string"}}}}}
    }));
    let mut obj = json!({
        "apiVersion": "terrace.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "x", "bogus": 1, "labels": {"a": "b"}},
        "spec": {"name": "n", "extra": 1, "list": [{"a": "x", "b": "y"}],
                 "free": {"anything": {"goes": true}, "typed": {"k": "v", "drop": 1}}},
        "status": {"whatever": [1, 2]},
        "top": true
    });
    let removed = s.prune(&mut obj);
    assert_eq!(
        removed,
        vec![
            "metadata.bogus",
            "spec.extra",
            "spec.free.typed.drop",
            "spec.list[0].b",
            "top"
        ]
    );
    assert_eq!(obj["apiVersion"], "terrace.dev/v1alpha1");
    assert_eq!(obj["metadata"], json!({"name": "x", "labels": {"a": "b"}}));
    assert_eq!(obj["spec"]["list"], json!([{"a": "x"}]));
    assert_eq!(obj["spec"]["free"]["anything"], json!({"goes": true}));
    assert_eq!(obj["status"], json!({"whatever": [1, 2]}));
}

/// Copies pruning of x-kubernetes-embedded-resource: apiVersion/kind/metadata of the
/// embedded object survive, other unknown fields do not.
#[test]
fn prune_embedded_resource() {
    let s = schema(json!({
        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                     "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}
    }));
    let mut obj = json!({"spec": {"template": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1},
        "spec": {"x": "1", "y": "2"}, "other": 3}}});
    let removed = s.prune(&mut obj);
    assert_eq!(
        removed,
        vec![
            "spec.template.metadata.junk",
            "spec.template.other",
            "spec.template.spec.y"
        ]
    );
    assert_eq!(obj["spec"]["template"]["kind"], "Pod");
    assert_eq!(obj["spec"]["template"]["metadata"], json!({"name": "p"}));
}

/// Copies kube-apiserver's pattern, enum and min/max messages (kube-openapi errors via
/// kubeOpenAPIResultToFieldErrors).
#[test]
fn value_validation_messages() {
    let s = schema(json!({
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
        "mode": {"type": "string", "enum": ["remote", "local", "agent"]},
        "n": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1.5},
        "count": {"type": "integer"},
        "short": {"type": "string", "minLength": 3, "maxLength": 5},
        "list": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "uniq": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true},
        "m": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}
    }));
    let errs = s.validate(
        &json!({"spec": {"name": "bad name!", "mode": "foo", "n": 0, "ratio": 1.5,
                         "count": "string", "short": "ab", "list": [], "uniq": [1, 1],
                         "m": {"a": "1", "b": "2"}}}),
        None,
    );
    let m = messages(&errs);
    for want in [
        "spec.name: Invalid value: \"bad name!\": spec.name in body should match '^[A-Za-z0-9_-]+$'",
        "spec.mode: Unsupported value: \"foo\": supported values: \"remote\", \"local\", \"agent\"",
        "spec.n: Invalid value: 0: spec.n in body should be greater than or equal to 1",
        "spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5",
        "spec.count: Invalid value: \"string\": spec.count in body must be of type integer: \"string\"",
        "spec.short: Invalid value: \"ab\": spec.short in body should be at least 3 chars long",
        "spec.list: Invalid value: 0: spec.list in body should have at least 1 items",
        "spec.uniq: Invalid value: \"\": spec.uniq in body shouldn't contain duplicates",
        "spec.m: Too many: 2: must have at most 1 item",
    ] {
        assert!(m.contains(&want.to_string()), "missing {want:?} in {m:#?}");
    }
    let reasons: Vec<(&str, &str)> = errs.iter().map(|e| (e.field.as_str(), e.reason)).collect();
    assert!(reasons.contains(&("spec.mode", "FieldValueNotSupported")));
    assert!(reasons.contains(&("spec.count", "FieldValueTypeInvalid")));
    assert!(reasons.contains(&("spec.name", "FieldValueInvalid")));
    assert!(reasons.contains(&("spec.m", "FieldValueTooMany")));
}

/// Copies field.TooLong and field.TooMany as kube-apiserver renders maxLength/maxItems.
#[test]
fn too_long_and_too_many() {
    let s = schema(json!({
        "short": {"type": "string", "maxLength": 5},
        "list": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
    }));
    let errs = s.validate(
        &json!({"spec": {"short": "toolong", "list": ["a", "b", "c"]}}),
        None,
    );
    let m = messages(&errs);
    assert!(
        m.contains(&"spec.short: Too long: may not be more than 5 bytes".to_string()),
        "{m:?}"
    );
    assert!(
        m.contains(&"spec.list: Too many: 3: must have at most 2 items".to_string()),
        "{m:?}"
    );
    assert!(
        errs.iter()
            .any(|e| e.field == "spec.short" && e.reason == "FieldValueTooLong")
    );
}

/// Copies required-field errors (`spec.x: Required value`), including at the root.
#[test]
fn required_fields() {
    let s = Structural::from_crd_schema(&json!({
        "type": "object",
        "required": ["spec"],
        "properties": {"spec": {"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}}}
    }))
    .unwrap();
    let errs = s.validate(&json!({"spec": {}}), None);
    assert_eq!(errs[0].message, "spec.x: Required value");
    assert_eq!(errs[0].reason, "FieldValueRequired");
    assert_eq!(errs[0].field, "spec.x");
    let errs = s.validate(&json!({"metadata": {"name": "a"}}), None);
    assert_eq!(errs[0].message, "spec: Required value");
}

/// Copies x-kubernetes-int-or-string: integers and strings pass, other types fail with
/// type "integer,string".
#[test]
fn int_or_string() {
    let s = schema(json!({"port": {"x-kubernetes-int-or-string": true}}));
    assert!(s.validate(&json!({"spec": {"port": 80}}), None).is_empty());
    assert!(
        s.validate(&json!({"spec": {"port": "http"}}), None)
            .is_empty()
    );
    let errs = s.validate(&json!({"spec": {"port": true}}), None);
    assert_eq!(
        errs[0].message,
        "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
    );
}

/// Copies nullable handling: null is accepted only where `nullable: true`.
#[test]
fn nullable() {
    let s = schema(json!({"a": {"type": "string", "nullable": true}, "b": {"type": "string"}}));
    let errs = s.validate(&json!({"spec": {"a": null, "b": null}}), None);
    assert_eq!(
        messages(&errs),
        vec![
            "spec.b: Invalid value: \"null\": spec.b in body must be of type string: \"null\""
                .to_string()
        ]
    );
}

/// Copies the CRD format validation: date-time is checked, int32/int64 formats are
/// stripped by apiextensions (not validated), an integral float passes as integer.
#[test]
fn formats() {
    let s = schema(json!({
        "at": {"type": "string", "format": "date-time"},
        "small": {"type": "integer", "format": "int32"},
        "id": {"type": "string", "format": "uuid"}
    }));
    assert!(s
        .validate(&json!({"spec": {"at": "2024-05-01T10:00:00Z", "small": 1.0, "id": "0b4e7f7e-7d3a-4d3a-9d3a-0b4e7f7e7d3a"}}), None)
        .is_empty());
    assert!(
        s.validate(&json!({"spec": {"small": 99999999999i64}}), None)
            .is_empty()
    );
    let errs = s.validate(&json!({"spec": {"at": "yesterday", "id": "nope"}}), None);
    assert_eq!(
        messages(&errs),
        vec![
            "spec.at: Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"".to_string(),
            "spec.id: Invalid value: \"nope\": spec.id in body must be of type uuid: \"nope\"".to_string(),
        ]
    );
}

/// Copies listtype validation: duplicates in a set and duplicate keys in a map list are
/// `Duplicate value` errors at the second occurrence.
#[test]
fn list_types() {
    let s = schema(json!({
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}}
    }));
    let errs = s.validate(
        &json!({"spec": {"set": ["a", "b", "a"], "map": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]}}),
        None,
    );
    assert_eq!(
        messages(&errs)[..2],
        [
            "spec.map[1]: Duplicate value: {\"name\":\"x\"}".to_string(),
            "spec.set[2]: Duplicate value: \"a\"".to_string(),
        ]
    );
    assert_eq!(errs[0].reason, "FieldValueDuplicate");
}

/// Copies anyOf/oneOf/not: the summary error has no field path (`<nil>`), followed by the
/// failing alternative's errors.
#[test]
fn junctors() {
    let s = schema(json!({
        "v": {"type": "string", "anyOf": [{"pattern": "^a"}, {"pattern": "^b"}], "not": {"pattern": "^bad$"}}
    }));
    assert!(s.validate(&json!({"spec": {"v": "abc"}}), None).is_empty());
    let errs = s.validate(&json!({"spec": {"v": "c"}}), None);
    assert_eq!(errs[0].field, "<nil>");
    assert_eq!(
        errs[0].message,
        "<nil>: Invalid value: \"\": \"spec.v\" must validate at least one schema (anyOf)"
    );
    assert_eq!(
        errs[1].message,
        "spec.v: Invalid value: \"c\": spec.v in body should match '^a'"
    );
    let errs = s.validate(&json!({"spec": {"v": "bad"}}), None);
    assert_eq!(
        messages(&errs),
        vec![
            "<nil>: Invalid value: \"\": \"spec.v\" must not validate the schema (not)".to_string()
        ]
    );
}

/// Copies CRD validation ratcheting: on update, an invalid value left unchanged is accepted,
/// a changed invalid value is not.
#[test]
fn ratcheting_on_update() {
    let s =
        schema(json!({"name": {"type": "string", "maxLength": 3}, "other": {"type": "string"}}));
    let old = json!({"spec": {"name": "toolong", "other": "a"}});
    assert!(
        s.validate(
            &json!({"spec": {"name": "toolong", "other": "b"}}),
            Some(&old)
        )
        .is_empty()
    );
    assert_eq!(
        messages(&s.validate(&json!({"spec": {"name": "toolong2"}}), Some(&old))),
        vec!["spec.name: Too long: may not be more than 3 bytes".to_string()]
    );
}

/// Copies customResourceStrategy.Validate: a type/required/enum error stops CEL rules and
/// adds the "some validation rules were not checked" error.
#[test]
fn blocking_errors_skip_cel() {
    let s = schema(json!({
        "n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 5"}]},
        "mode": {"type": "string", "enum": ["a"]}
    }));
    let errs = s.validate(&json!({"spec": {"n": 1, "mode": "b"}}), None);
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert_eq!(
        errs[1].message,
        "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
    );
    let errs = s.validate(&json!({"spec": {"n": 1, "mode": "a"}}), None);
    assert_eq!(
        messages(&errs),
        vec!["spec.n: Invalid value: \"integer\": failed rule: self > 5".to_string()]
    );
}

/// Copies CRD registration checks: bad patterns, uncompilable CEL rules, non-structural
/// constructs and invalid defaults reject the CRD.
#[test]
fn crd_schema_errors() {
    let bad = |s: Value| {
        Structural::from_crd_schema(&json!({"type": "object", "properties": {"spec": s}}))
    };
    let e = bad(json!({"type": "string", "pattern": "("})).unwrap_err();
    assert!(e.starts_with("openAPIV3Schema.properties[spec].pattern: Invalid value: \"(\": must be a valid regular expression"), "{e}");
    let e = bad(json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.a ==="}]}))
        .unwrap_err();
    assert!(
        e.contains("x-kubernetes-validations[0].rule") && e.contains("compilation failed"),
        "{e}"
    );
    let e =
        bad(json!({"type": "object", "x-kubernetes-validations": [{"rule": "nosuchfn(self)"}]}))
            .unwrap_err();
    assert!(e.contains("undeclared reference to 'nosuchfn'"), "{e}");
    assert!(bad(json!({"type": "array"})).is_err());
    assert!(bad(json!({"type": "object", "additionalProperties": false})).is_err());
    assert!(bad(json!({"properties": {}})).is_err());
    assert!(bad(json!({"type": "string", "enum": ["a"], "default": 3})).is_err());
    assert!(bad(json!({"type": "strin"})).is_err());
    assert!(
        bad(json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "map"}))
            .is_err()
    );
}

/// Structural is shared between request handlers on several threads.
#[test]
fn structural_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Structural>();
}
