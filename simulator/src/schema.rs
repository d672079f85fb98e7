//! The schema engine for custom resources: a CRD version's `openAPIV3Schema` parsed once into
//! a [`Structural`] schema, then used on every write of that resource to prune unknown
//! fields, apply defaults and validate, in that order, as kube-apiserver's
//! apiextensions-apiserver does on create and update.
//!
//! - [`Structural::from_crd_schema`] is called when a CustomResourceDefinition is created or
//!   updated; its error rejects the CRD (bad regular expressions, CEL rules that do not
//!   compile, non-structural constructs, defaults that do not validate).
//! - [`Structural::prune`] copies apiextensions' `pruning.PruneWithOptions` (plus the
//!   ObjectMeta coercion that drops unknown `metadata` fields) and returns the dotted paths
//!   it removed, which the REST layer turns into `fieldValidation` warnings or errors.
//! - [`Structural::apply_defaults`] copies `defaulting.Default`.
//! - [`Structural::validate`] copies `customResourceStrategy.Validate`/`ValidateUpdate`:
//!   kube-openapi's schema validation (converted to `field.Error`s as
//!   `kubeOpenAPIResultToFieldErrors` does), the `x-kubernetes-list-type` invariants, then the
//!   CEL `x-kubernetes-validations` (see [`crate::cel`]) unless an earlier error blocks them.
//!   On update, errors in values equal to the old object's are dropped (CRD validation
//!   ratcheting, on by default since Kubernetes 1.30).
//!
//! Messages are rendered exactly as `field.Error.Error()` prints them, e.g.
//! `spec.name: Invalid value: "bad name!": spec.name in body should match '^[a-z]+$'`.

use crate::cel::Rule;
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One validation error, as a `metav1.StatusCause` carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `spec.name`, `spec.items[0]`; `<nil>` where kube-apiserver has no
    /// path (rules on the root object, `anyOf` summaries).
    pub field: String,
    /// The StatusCause reason: `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The full message as kube-apiserver prints it, field included.
    pub message: String,
}

impl FieldError {
    fn new(field: &str, reason: &'static str, body: String) -> FieldError {
        let field = if field.is_empty() { "<nil>" } else { field };
        FieldError {
            field: field.to_string(),
            reason,
            message: format!("{field}: {body}"),
        }
    }

    fn with_detail(mut body: String, detail: &str) -> String {
        if !detail.is_empty() {
            body.push_str(": ");
            body.push_str(detail);
        }
        body
    }

    /// `field.Invalid(path, value, detail)`; `value` is already rendered (see [`render`]).
    pub fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
        Self::new(
            field,
            "FieldValueInvalid",
            Self::with_detail(format!("Invalid value: {value}"), detail),
        )
    }

    /// `field.TypeInvalid(path, value, detail)`.
    pub fn type_invalid(field: &str, value: &str, detail: &str) -> FieldError {
        Self::new(
            field,
            "FieldValueTypeInvalid",
            Self::with_detail(format!("Invalid value: {value}"), detail),
        )
    }

    /// `field.Required(path, detail)`.
    pub fn required(field: &str, detail: &str) -> FieldError {
        Self::new(
            field,
            "FieldValueRequired",
            Self::with_detail("Required value".into(), detail),
        )
    }

    /// `field.Forbidden(path, detail)`.
    pub fn forbidden(field: &str, detail: &str) -> FieldError {
        Self::new(
            field,
            "FieldValueForbidden",
            Self::with_detail("Forbidden".into(), detail),
        )
    }

    /// `field.Duplicate(path, value)`.
    pub fn duplicate(field: &str, value: &str) -> FieldError {
        Self::new(
            field,
            "FieldValueDuplicate",
            format!("Duplicate value: {value}"),
        )
    }

    /// `field.NotSupported(path, value, validValues)`.
    pub fn not_supported(field: &str, value: &str, valid: &[String]) -> FieldError {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(
            field,
            "FieldValueNotSupported",
            Self::with_detail(format!("Unsupported value: {value}"), &detail),
        )
    }

    /// `field.TooLong(path, _, max)`.
    pub fn too_long(field: &str, max: i64) -> FieldError {
        let detail = if max >= 0 {
            format!(
                "may not be more than {max} {}",
                if max == 1 { "byte" } else { "bytes" }
            )
        } else {
            "value is too long".into()
        };
        Self::new(field, "FieldValueTooLong", format!("Too long: {detail}"))
    }

    /// `field.TooMany(path, actual, max)`.
    pub fn too_many(field: &str, actual: i64, max: i64) -> FieldError {
        let detail = if max >= 0 {
            format!(
                "must have at most {max} {}",
                if max == 1 { "item" } else { "items" }
            )
        } else {
            "has too many items".into()
        };
        let body = if actual >= 0 {
            format!("Too many: {actual}: {detail}")
        } else {
            format!("Too many: {detail}")
        };
        Self::new(field, "FieldValueTooMany", body)
    }
}

/// Renders a bad value as `field.Error.ErrorBody` does: numbers and booleans plainly,
/// strings Go-quoted, anything else as JSON (keys sorted, as Go's encoding/json).
pub fn render(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => number_text(n),
        Value::Bool(b) => b.to_string(),
        other => canonical_json(other),
    }
}

fn number_text(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        u.to_string()
    } else {
        crate::table::go_float(n.as_f64().unwrap_or(0.0))
    }
}

/// JSON with object keys sorted, whatever serde_json's map order is.
pub(crate) fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        canonical_json(&m[k])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        Value::Number(n) => number_text(n),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Go's `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `additionalProperties` of a structural schema.
#[derive(Clone, Debug)]
pub(crate) enum Additional {
    /// `additionalProperties: true`: any value, not described further.
    Any,
    /// A schema for every value of the map.
    Schema(Box<Structural>),
}

/// A parsed structural schema node (one per schema level of the CRD's `openAPIV3Schema`).
#[derive(Clone, Debug, Default)]
pub struct Structural {
    /// `type`, empty when absent (int-or-string, preserve-unknown-fields nodes).
    pub(crate) type_: String,
    pub(crate) format: String,
    pub(crate) description: String,
    pub(crate) properties: BTreeMap<String, Structural>,
    pub(crate) additional: Option<Additional>,
    pub(crate) items: Option<Box<Structural>>,
    pub(crate) required: Vec<String>,
    pub(crate) enum_: Option<Vec<Value>>,
    pub(crate) pattern: Option<(String, Regex)>,
    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_maximum: bool,
    pub(crate) minimum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) max_length: Option<i64>,
    pub(crate) min_length: Option<i64>,
    pub(crate) max_items: Option<i64>,
    pub(crate) min_items: Option<i64>,
    pub(crate) max_properties: Option<i64>,
    pub(crate) min_properties: Option<i64>,
    pub(crate) unique_items: bool,
    pub(crate) nullable: bool,
    pub(crate) default: Option<Value>,
    pub(crate) preserve_unknown: bool,
    pub(crate) int_or_string: bool,
    pub(crate) embedded: bool,
    pub(crate) list_type: Option<String>,
    pub(crate) list_map_keys: Vec<String>,
    pub(crate) map_type: Option<String>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) all_of: Vec<Structural>,
    pub(crate) any_of: Vec<Structural>,
    pub(crate) one_of: Vec<Structural>,
    pub(crate) not: Option<Box<Structural>>,
    /// Whether this node or a node below it has CEL rules (real kube-apiserver builds no
    /// CEL validator, and so never reports skipped rules, when there are none).
    pub(crate) has_rules: bool,
}

/// Fields of ObjectMeta; other `metadata` fields are dropped as unknown.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

const KNOWN_TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];

/// Formats kube-apiserver validates for CRDs; any other format is stripped (not validated),
/// including the numeric `int32`, `int64`, `float`, `double`.
const VALIDATED_FORMATS: &[&str] = &[
    "date-time",
    "datetime",
    "date",
    "byte",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "ipv4",
    "ipv6",
    "cidr",
    "hostname",
    "email",
    "mac",
    "duration",
    "hexcolor",
];

fn crd_error(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

impl Structural {
    /// Parses a CRD version's `openAPIV3Schema`. Errors are what kube-apiserver rejects the
    /// CRD for, with paths relative to `openAPIV3Schema`.
    pub fn from_crd_schema(open_api_v3_schema: &Value) -> Result<Structural, String> {
        let s = parse(open_api_v3_schema, "openAPIV3Schema", false)?;
        check_defaults(&s, "openAPIV3Schema")?;
        Ok(s)
    }

    /// The node's `description`.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Applies `default`s top-down where a field is absent (or null while not nullable),
    /// as apiextensions' `defaulting.Default`. A defaulted object is itself defaulted further.
    pub fn apply_defaults(&self, obj: &mut Value) {
        default_node(obj, self);
    }

    /// Removes fields not in the schema (honouring x-kubernetes-preserve-unknown-fields, and
    /// keeping apiVersion/kind/metadata at the root). Returns the dotted paths removed.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut removed = Vec::new();
        prune_node(obj, Some(self), "", &mut removed, true);
        coerce_meta(obj, self, "", &mut removed, true);
        removed.sort();
        removed
    }

    /// Types, required, enum, pattern, min/max(length/items/properties), formats, and the
    /// CEL x-kubernetes-validations (with oldSelf for transition rules when `old` is given).
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_node(self, obj, "", old, &mut errs);
        // x-kubernetes-list-type invariants; on update only when the old object met them.
        let old_list_ok = match old {
            Some(o) => {
                let mut e = Vec::new();
                validate_lists(self, o, "", &mut e);
                e.is_empty()
            }
            None => true,
        };
        if old_list_ok {
            validate_lists(self, obj, "", &mut errs);
        }
        let blocking = errs.iter().any(|e| {
            matches!(
                e.reason,
                "FieldValueNotSupported"
                    | "FieldValueRequired"
                    | "FieldValueTooLong"
                    | "FieldValueTooMany"
                    | "FieldValueTypeInvalid"
            )
        });
        if !self.has_rules {
            return errs;
        }
        if blocking {
            errs.push(FieldError::invalid(
                "",
                "null",
                "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
            ));
        } else {
            crate::cel::validate_tree(self, obj, old, &mut errs);
        }
        errs
    }

    /// Validates against the schema only (no list-type invariants, no CEL), as CRD
    /// registration does for defaults.
    fn validate_schema_only(&self, obj: &Value, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_node(self, obj, path, None, &mut errs);
        errs
    }

    /// The schema a property or map value is described by.
    pub(crate) fn child(&self, key: &str) -> Option<&Structural> {
        if let Some(p) = self.properties.get(key) {
            return Some(p);
        }
        match &self.additional {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parsing

fn get_i64(m: &Map<String, Value>, key: &str, path: &str) -> Result<Option<i64>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| {
                crd_error(
                    &format!("{path}.{key}"),
                    &n.to_string(),
                    "must be an integer",
                )
            }),
        Some(other) => Err(crd_error(
            &format!("{path}.{key}"),
            &render(other),
            "must be an integer",
        )),
    }
}

fn get_f64(m: &Map<String, Value>, key: &str, path: &str) -> Result<Option<f64>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(other) => Err(crd_error(
            &format!("{path}.{key}"),
            &render(other),
            "must be a number",
        )),
    }
}

fn get_bool(m: &Map<String, Value>, key: &str, path: &str) -> Result<bool, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(crd_error(
            &format!("{path}.{key}"),
            &render(other),
            "must be a boolean",
        )),
    }
}

fn get_str(m: &Map<String, Value>, key: &str, path: &str) -> Result<String, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(crd_error(
            &format!("{path}.{key}"),
            &render(other),
            "must be a string",
        )),
    }
}

fn get_strings(m: &Map<String, Value>, key: &str, path: &str) -> Result<Vec<String>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    crd_error(
                        &format!("{path}.{key}"),
                        &render(v),
                        "must be a list of strings",
                    )
                })
            })
            .collect(),
        Some(other) => Err(crd_error(
            &format!("{path}.{key}"),
            &render(other),
            "must be a list of strings",
        )),
    }
}

/// Parses one schema node. `junctor` is true inside allOf/anyOf/oneOf/not, where only value
/// validations are allowed.
fn parse(v: &Value, path: &str, junctor: bool) -> Result<Structural, String> {
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
fn check_defaults(s: &Structural, path: &str) -> Result<(), String> {
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

// ---------------------------------------------------------------------------------------
// Defaulting

fn is_non_nullable_null(x: &Value, s: &Structural) -> bool {
    x.is_null() && !s.nullable
}

fn default_node(x: &mut Value, s: &Structural) {
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

// ---------------------------------------------------------------------------------------
// Pruning

const META_FIELDS: &[&str] = &["apiVersion", "kind", "metadata"];

fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// `root` marks the resource root, which keeps apiVersion/kind/metadata like an embedded
/// resource.
fn prune_node(
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

fn skip_prune(x: &mut Value, s: &Structural, path: &str, removed: &mut Vec<String>, root: bool) {
    match x {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if (s.embedded || root) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    prune_node(v, Some(prop), &join_key(path, k), removed, false);
                } else if let Some(Additional::Schema(a)) = &s.additional {
                    prune_node(v, Some(a), &join_key(path, k), removed, false);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = &s.items {
                for (i, v) in list.iter_mut().enumerate() {
                    skip_prune(v, items, &format!("{path}[{i}]"), removed, false);
                }
            }
        }
        _ => {}
    }
}

/// Drops unknown ObjectMeta fields of the root object and of embedded resources, as the
/// apiextensions decoder's ObjectMeta coercion does.
fn coerce_meta(x: &mut Value, s: &Structural, path: &str, removed: &mut Vec<String>, root: bool) {
    match x {
        Value::Object(m) => {
            if (s.embedded || root)
                && let Some(Value::Object(meta)) = m.get_mut("metadata")
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
            for (k, v) in m.iter_mut() {
                if (s.embedded || root) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(c) = s.child(k) {
                    coerce_meta(v, c, &join_key(path, k), removed, false);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = &s.items {
                for (i, v) in list.iter_mut().enumerate() {
                    coerce_meta(v, items, &format!("{path}[{i}]"), removed, false);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// Schema validation (kube-openapi's SchemaValidator, converted to field errors)

/// The JSON type name kube-openapi infers for a value.
fn json_type(v: &Value) -> &'static str {
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

fn type_matches(s: &Structural, v: &Value) -> bool {
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

fn type_label(s: &Structural) -> String {
    if s.int_or_string {
        "integer,string".into()
    } else {
        s.type_.clone()
    }
}

fn in_body(path: &str) -> String {
    format!("{path} in body")
}

/// A numeric bound as the message prints it: an integer when validating an integer value
/// against an integral bound (kube-openapi's *Int variants), else Go's `%v` of the float.
fn bound_text(bound: f64, value: &Value) -> String {
    if value.is_i64() || value.is_u64() {
        (bound as i64).to_string()
    } else {
        crate::table::go_float(bound)
    }
}

fn validate_node(
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

fn validate_junctors(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
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

fn validate_string(s: &Structural, text: &str, path: &str, errs: &mut Vec<FieldError>) {
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

fn validate_format(s: &Structural, text: &str, path: &str, errs: &mut Vec<FieldError>) {
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

fn format_ok(format: &str, s: &str) -> bool {
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

fn validate_number(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
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
    if let Some(min) = s.minimum {
        let bad = if s.exclusive_minimum {
            x <= min
        } else {
            x < min
        };
        if bad {
            let rel = if s.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                &shown,
                &format!("{} should be {rel} {}", in_body(path), bound_text(min, v)),
            ));
        }
    }
    if let Some(max) = s.maximum {
        let bad = if s.exclusive_maximum {
            x >= max
        } else {
            x > max
        };
        if bad {
            let rel = if s.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                &shown,
                &format!("{} should be {rel} {}", in_body(path), bound_text(max, v)),
            ));
        }
    }
}

fn validate_array(
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
    if let Some(min) = s.min_items
        && size < min
    {
        errs.push(FieldError::invalid(
            path,
            &size.to_string(),
            &format!("{} should have at least {min} items", in_body(path)),
        ));
    }
    if let Some(max) = s.max_items
        && size > max
    {
        errs.push(FieldError::too_many(path, size, max));
    }
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

fn check_enum(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
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

fn validate_object(
    s: &Structural,
    m: &Map<String, Value>,
    path: &str,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) {
    let n = m.len() as i64;
    if let Some(min) = s.min_properties
        && n < min
    {
        errs.push(FieldError::invalid(
            path,
            &n.to_string(),
            &format!("{} should have at least {min} properties", in_body(path)),
        ));
    }
    if let Some(max) = s.max_properties
        && n > max
    {
        errs.push(FieldError::too_many(path, n, max));
    }
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

fn validate_lists(s: &Structural, v: &Value, path: &str, errs: &mut Vec<FieldError>) {
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
fn non_unique(list: &[Value]) -> Vec<usize> {
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

fn validate_list_map(s: &Structural, list: &[Value], path: &str, errs: &mut Vec<FieldError>) {
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

#[cfg(test)]
mod tests;
