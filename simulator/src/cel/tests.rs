use crate::schema::Structural;
use serde_json::{Value, json};

fn spec_schema(spec: Value) -> Structural {
    Structural::from_crd_schema(&json!({
        "type": "object",
        "properties": {"spec": spec}
    }))
    .unwrap()
}

fn messages(s: &Structural, obj: Value, old: Option<Value>) -> Vec<String> {
    s.validate(&obj, old.as_ref())
        .into_iter()
        .map(|e| e.message)
        .collect()
}

/// Copies apiextensions CEL validation: a rule on an object using has() across sibling
/// fields; failures read `spec: Invalid value: "object": <message>`.
#[test]
fn has_across_siblings() {
    let s = spec_schema(json!({
        "type": "object",
        "properties": {"mode": {"type": "string"}, "agentPool": {"type": "string"}},
        "x-kubernetes-validations": [{
            "rule": "!has(self.agentPool) || self.mode == 'agent'",
            "message": "agentPool requires mode agent"
        }]
    }));
    assert!(
        messages(
            &s,
            json!({"spec": {"mode": "agent", "agentPool": "p"}}),
            None
        )
        .is_empty()
    );
    assert!(messages(&s, json!({"spec": {"mode": "remote"}}), None).is_empty());
    assert_eq!(
        messages(
            &s,
            json!({"spec": {"mode": "remote", "agentPool": "p"}}),
            None
        ),
        vec!["spec: Invalid value: \"object\": agentPool requires mode agent"]
    );
}

/// Copies transition rules: rules using oldSelf are skipped on create and evaluated on
/// update against the correlated old value.
#[test]
fn transition_rule_with_old_self() {
    let s = spec_schema(json!({
        "type": "object",
        "properties": {"name": {"type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]}}
    }));
    assert!(messages(&s, json!({"spec": {"name": "a"}}), None).is_empty());
    assert!(
        messages(
            &s,
            json!({"spec": {"name": "a"}}),
            Some(json!({"spec": {"name": "a"}}))
        )
        .is_empty()
    );
    assert_eq!(
        messages(
            &s,
            json!({"spec": {"name": "b"}}),
            Some(json!({"spec": {"name": "a"}}))
        ),
        vec!["spec.name: Invalid value: \"string\": name is immutable"]
    );
    // A field added on update has no old counterpart: the transition rule does not run.
    assert!(
        messages(
            &s,
            json!({"spec": {"name": "b"}}),
            Some(json!({"spec": {}}))
        )
        .is_empty()
    );
}

/// Copies the default message (`failed rule: <rule>`), fieldPath, reason, and
/// messageExpression of x-kubernetes-validations.
#[test]
fn message_field_path_reason() {
    let s = spec_schema(json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "x-kubernetes-validations": [
            {"rule": "self.a < self.b"},
            {"rule": "self.a != 3", "fieldPath": ".a", "reason": "FieldValueForbidden", "message": "no threes"},
            {"rule": "self.b != 7", "messageExpression": "'b is ' + string(self.b)"}
        ]
    }));
    assert_eq!(
        messages(&s, json!({"spec": {"a": 3, "b": 1}}), None),
        vec![
            "spec: Invalid value: \"object\": failed rule: self.a < self.b",
            "spec.a: Forbidden: no threes",
        ]
    );
    assert_eq!(
        messages(&s, json!({"spec": {"a": 1, "b": 7}}), None),
        vec!["spec: Invalid value: \"object\": b is 7"]
    );
}

/// Copies rules on the root object: reported at `<nil>`, with apiVersion, kind and
/// metadata.name visible to the rule.
#[test]
fn root_rules() {
    let s = Structural::from_crd_schema(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object"}},
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('ws-') && self.kind == 'Workspace'", "message": "bad name"}]
    }))
    .unwrap();
    assert!(
        messages(
            &s,
            json!({"kind": "Workspace", "metadata": {"name": "ws-1"}}),
            None
        )
        .is_empty()
    );
    assert_eq!(
        messages(
            &s,
            json!({"kind": "Workspace", "metadata": {"name": "x"}}),
            None
        ),
        vec!["<nil>: Invalid value: \"object\": bad name"]
    );
}

/// Copies runtime errors: reading an absent field without has() is `no such key`, reported
/// as FieldValueInvalid with "evaluating rule".
#[test]
fn runtime_error_no_such_key() {
    let s = spec_schema(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "self.a == 'x'"}]
    }));
    let errs = s.validate(&json!({"spec": {}}), None);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].reason, "FieldValueInvalid");
    assert_eq!(
        errs[0].message,
        "spec: Invalid value: \"object\": no such key: a evaluating rule: self.a == 'x'"
    );
}

/// Copies the CEL features CRDs commonly use: size, matches, startsWith, int(), all,
/// exists, in, ternary, map keys, escaped property names, and kube-cel's Kubernetes
/// libraries (quantity, format).
#[test]
fn common_features() {
    let cases: Vec<(&str, Value, bool)> = vec![
        ("size(self.name) <= 5", json!({"name": "abc"}), true),
        ("size(self.name) <= 2", json!({"name": "abc"}), false),
        (
            "self.name.matches('^[a-z]+$')",
            json!({"name": "abc"}),
            true,
        ),
        ("self.name.startsWith('ab')", json!({"name": "abc"}), true),
        ("int(self.count) + 1 == 3", json!({"count": 2}), true),
        (
            "self.tags.all(t, t.size() > 0)",
            json!({"tags": ["a", ""]}),
            false,
        ),
        (
            "self.tags.exists(t, t == 'a')",
            json!({"tags": ["a", ""]}),
            true,
        ),
        (
            "self.mode in ['remote', 'local']",
            json!({"mode": "agent"}),
            false,
        ),
        (
            "self.mode == 'agent' ? has(self.pool) : true",
            json!({"mode": "agent"}),
            false,
        ),
        (
            "self.labels['a'] == 'b'",
            json!({"labels": {"a": "b"}}),
            true,
        ),
        (
            "self.auto__dash__destroy == 'x'",
            json!({"auto-destroy": "x"}),
            true,
        ),
        ("self.__namespace__ == 'n'", json!({"namespace": "n"}), true),
        (
            "quantity(self.mem).isLessThan(quantity('1Gi'))",
            json!({"mem": "512Mi"}),
            true,
        ),
        (
            "self.tags.map(t, t + '!').exists(t, t == 'a!')",
            json!({"tags": ["a"]}),
            true,
        ),
        ("self.ratio > 0.5", json!({"ratio": 1}), true),
    ];
    for (rule, spec, want) in cases {
        let s = spec_schema(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"}, "count": {"type": "integer"}, "mode": {"type": "string"},
                "pool": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "auto-destroy": {"type": "string"}, "namespace": {"type": "string"},
                "mem": {"type": "string"}, "ratio": {"type": "number"}
            },
            "x-kubernetes-validations": [{"rule": rule}]
        }));
        let errs = s.validate(&json!({"spec": spec}), None);
        assert_eq!(errs.is_empty(), want, "{rule}: {errs:#?}");
    }
}

/// Copies rule compilation at CRD registration: a rule using an unknown variable is
/// rejected, comprehension variables are in scope only inside their macro.
#[test]
fn compile_checks() {
    let compile = |rule: &str| {
        Structural::from_crd_schema(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": rule}]}),
        )
    };
    assert!(compile("self.all(k, k != 'x')").is_ok());
    assert!(
        compile("other.a == 1")
            .unwrap_err()
            .contains("undeclared reference to 'other'")
    );
    assert!(compile("self.all(k, k != 'x') && k == 'y'").is_err());
    assert!(compile("format.dns1123Label().validate(self.name).hasValue()").is_ok());
}

/// Copies correlation of list-type map items for transition rules: an item keeps its
/// oldSelf by key even when the list is reordered.
#[test]
fn transition_rules_in_map_lists() {
    let s = spec_schema(json!({
        "type": "object",
        "properties": {"items": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}},
                      "x-kubernetes-validations": [{"rule": "self.v >= oldSelf.v", "message": "v may not decrease"}]}
        }}
    }));
    let old = json!({"spec": {"items": [{"name": "a", "v": 1}, {"name": "b", "v": 5}]}});
    assert!(
        messages(
            &s,
            json!({"spec": {"items": [{"name": "b", "v": 5}, {"name": "a", "v": 2}]}}),
            Some(old.clone())
        )
        .is_empty()
    );
    assert_eq!(
        messages(
            &s,
            json!({"spec": {"items": [{"name": "b", "v": 4}, {"name": "a", "v": 1}]}}),
            Some(old)
        ),
        vec!["spec.items[0]: Invalid value: \"object\": v may not decrease"]
    );
}
