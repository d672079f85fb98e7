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
use crate::gofmt::{canonical_json, go_quote, render};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

mod defaulting;
mod parse;
mod pruning;
mod rules;
mod validation;
use defaulting::*;
use parse::*;
pub(crate) use pruning::join_key;
use pruning::*;
pub(crate) use validation::correlate_list;
use validation::*;

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
            rules::validate_tree(self, obj, old, &mut errs);
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

#[cfg(test)]
mod tests;
