//! Kubernetes protobuf request bodies → the JSON objects the rest of the server handles.
//!
//! client-go's typed clients (so kubectl's imperative commands: `create namespace`,
//! `create configmap`, `create token`, `auth can-i`, `create rolebinding`, ...) send
//! built-in kinds as `application/vnd.kubernetes.protobuf` and never fall back to JSON.
//! Such a body is the magic `k8s\0` followed by a `runtime.Unknown` message (typeMeta,
//! raw, contentEncoding, contentType) whose `raw` is the object as encoded by
//! `k8s.io/api/.../generated.proto`. This module reads that envelope with a small
//! wire-format reader (varints and length-delimited fields, no code generation) and
//! converts the kinds listed in [`KINDS`] through static field tables copied from the
//! upstream `generated.proto` files. Other kinds are [`DecodeError::UnsupportedKind`]
//! (415, as a server without a protobuf serializer for them answers).
//!
//! The conversion follows what the object's JSON would have been: Go's protobuf encoder
//! writes every non-pointer field, so empty strings (`omitempty` in JSON) are dropped;
//! `bytes` become base64 strings; maps become objects; server-owned and status fields are
//! not read (unknown fields are skipped, as protobuf readers do).

use crate::status::ApiError;
use base64::Engine as _;
use serde_json::{Map, Value};

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Why a protobuf body could not become JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not a well-formed Kubernetes protobuf envelope or object.
    #[error("{0}")]
    Malformed(String),
    /// A well-formed envelope for a kind this module has no field table for.
    #[error("no protobuf decoding for {api_version}, Kind={kind}")]
    UnsupportedKind { api_version: String, kind: String },
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> ApiError {
        match e {
            DecodeError::Malformed(m) => ApiError::bad_request(format!(
                "the object provided is unrecognized: invalid protobuf body: {m}"
            )),
            DecodeError::UnsupportedKind { api_version, kind } => {
                ApiError::unsupported_media_type(format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (protobuf is only accepted for some built-in kinds, not {api_version}, Kind={kind})"
                ))
            }
        }
    }
}

/// Decodes a Kubernetes protobuf body into the object's JSON, with `apiVersion` and
/// `kind` from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let rest = body
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| malformed("missing the k8s\\0 prefix"))?;
    let unknown = decode_message(rest, UNKNOWN)?;
    let text = |k: &str| -> String {
        unknown
            .get("typeMeta")
            .and_then(|t| t.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let Some((_, _, fields)) = KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
    else {
        return Err(DecodeError::UnsupportedKind { api_version, kind });
    };
    let raw = match unknown.get("raw").and_then(Value::as_str) {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| malformed(&e.to_string()))?,
        None => Vec::new(),
    };
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    obj.extend(decode_message(&raw, fields)?);
    Ok(Value::Object(obj))
}

/// The kinds [`decode`] converts: (apiVersion, kind, top-level fields).
pub const KINDS: &[(&str, &str, &[Field])] = &[
    ("v1", "Namespace", NAMESPACE),
    ("v1", "ServiceAccount", SERVICE_ACCOUNT),
    ("v1", "ConfigMap", CONFIG_MAP),
    ("v1", "Secret", SECRET),
    ("authentication.k8s.io/v1", "TokenRequest", TOKEN_REQUEST),
    (
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
        SELF_SUBJECT_REVIEW,
    ),
    (
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        SELF_SUBJECT_ACCESS_REVIEW,
    ),
    (
        "authorization.k8s.io/v1",
        "SelfSubjectRulesReview",
        SELF_SUBJECT_RULES_REVIEW,
    ),
    ("rbac.authorization.k8s.io/v1", "Role", ROLE),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", CLUSTER_ROLE),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", ROLE_BINDING),
    (
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        ROLE_BINDING,
    ),
];

/// The protobuf type of a field, and how it becomes JSON.
#[derive(Clone, Copy, Debug)]
pub enum Ty {
    /// `string`; a non-repeated empty string is omitted.
    Str,
    /// `bytes` → base64 string.
    Bytes,
    /// `int32` / `int64` → number.
    Int,
    Bool,
    /// A nested message, kept even when empty (it was set).
    Msg(&'static [Field]),
    /// `map<string, string>`.
    MapStr,
    /// `map<string, bytes>` → object of base64 strings.
    MapBytes,
}

/// One field of a message table.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub number: u64,
    pub json: &'static str,
    pub ty: Ty,
    pub repeated: bool,
}

const fn one(number: u64, json: &'static str, ty: Ty) -> Field {
    Field {
        number,
        json,
        ty,
        repeated: false,
    }
}

const fn rep(number: u64, json: &'static str, ty: Ty) -> Field {
    Field {
        number,
        json,
        ty,
        repeated: true,
    }
}

// k8s.io/apimachinery/pkg/runtime/generated.proto
const TYPE_META: &[Field] = &[one(1, "apiVersion", Ty::Str), one(2, "kind", Ty::Str)];
const UNKNOWN: &[Field] = &[
    one(1, "typeMeta", Ty::Msg(TYPE_META)),
    one(2, "raw", Ty::Bytes),
    one(3, "contentEncoding", Ty::Str),
    one(4, "contentType", Ty::Str),
];

// k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto. Server-owned fields (selfLink,
// generation, timestamps, managedFields) are not read.
const OWNER_REFERENCE: &[Field] = &[
    one(5, "apiVersion", Ty::Str),
    one(1, "kind", Ty::Str),
    one(3, "name", Ty::Str),
    one(4, "uid", Ty::Str),
    one(6, "controller", Ty::Bool),
    one(7, "blockOwnerDeletion", Ty::Bool),
];
const OBJECT_META: &[Field] = &[
    one(1, "name", Ty::Str),
    one(2, "generateName", Ty::Str),
    one(3, "namespace", Ty::Str),
    one(5, "uid", Ty::Str),
    one(6, "resourceVersion", Ty::Str),
    one(11, "labels", Ty::MapStr),
    one(12, "annotations", Ty::MapStr),
    rep(13, "ownerReferences", Ty::Msg(OWNER_REFERENCE)),
    rep(14, "finalizers", Ty::Str),
];
const METADATA: Field = one(1, "metadata", Ty::Msg(OBJECT_META));
const SELECTOR_REQUIREMENT: &[Field] = &[
    one(1, "key", Ty::Str),
    one(2, "operator", Ty::Str),
    rep(3, "values", Ty::Str),
];
const SELECTOR_ATTRIBUTES: &[Field] = &[
    one(1, "rawSelector", Ty::Str),
    rep(2, "requirements", Ty::Msg(SELECTOR_REQUIREMENT)),
];

// k8s.io/api/core/v1/generated.proto
const NAMESPACE_SPEC: &[Field] = &[rep(1, "finalizers", Ty::Str)];
const NAMESPACE: &[Field] = &[METADATA, one(2, "spec", Ty::Msg(NAMESPACE_SPEC))];
const OBJECT_REFERENCE: &[Field] = &[
    one(1, "kind", Ty::Str),
    one(2, "namespace", Ty::Str),
    one(3, "name", Ty::Str),
    one(4, "uid", Ty::Str),
    one(5, "apiVersion", Ty::Str),
    one(6, "resourceVersion", Ty::Str),
    one(7, "fieldPath", Ty::Str),
];
const LOCAL_OBJECT_REFERENCE: &[Field] = &[one(1, "name", Ty::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    METADATA,
    rep(2, "secrets", Ty::Msg(OBJECT_REFERENCE)),
    rep(3, "imagePullSecrets", Ty::Msg(LOCAL_OBJECT_REFERENCE)),
    one(4, "automountServiceAccountToken", Ty::Bool),
];
const CONFIG_MAP: &[Field] = &[
    METADATA,
    one(4, "immutable", Ty::Bool),
    one(2, "data", Ty::MapStr),
    one(3, "binaryData", Ty::MapBytes),
];
const SECRET: &[Field] = &[
    METADATA,
    one(5, "immutable", Ty::Bool),
    one(2, "data", Ty::MapBytes),
    one(4, "stringData", Ty::MapStr),
    one(3, "type", Ty::Str),
];

// k8s.io/api/authentication/v1/generated.proto
const BOUND_OBJECT_REFERENCE: &[Field] = &[
    one(1, "kind", Ty::Str),
    one(2, "apiVersion", Ty::Str),
    one(3, "name", Ty::Str),
    one(4, "uid", Ty::Str),
];
const TOKEN_REQUEST_SPEC: &[Field] = &[
    rep(1, "audiences", Ty::Str),
    one(4, "expirationSeconds", Ty::Int),
    one(3, "boundObjectRef", Ty::Msg(BOUND_OBJECT_REFERENCE)),
];
const TOKEN_REQUEST: &[Field] = &[METADATA, one(2, "spec", Ty::Msg(TOKEN_REQUEST_SPEC))];
const SELF_SUBJECT_REVIEW: &[Field] = &[METADATA];

// k8s.io/api/authorization/v1/generated.proto
const RESOURCE_ATTRIBUTES: &[Field] = &[
    one(1, "namespace", Ty::Str),
    one(2, "verb", Ty::Str),
    one(3, "group", Ty::Str),
    one(4, "version", Ty::Str),
    one(5, "resource", Ty::Str),
    one(6, "subresource", Ty::Str),
    one(7, "name", Ty::Str),
    one(8, "fieldSelector", Ty::Msg(SELECTOR_ATTRIBUTES)),
    one(9, "labelSelector", Ty::Msg(SELECTOR_ATTRIBUTES)),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[one(1, "path", Ty::Str), one(2, "verb", Ty::Str)];
const SELF_SUBJECT_ACCESS_REVIEW_SPEC: &[Field] = &[
    one(1, "resourceAttributes", Ty::Msg(RESOURCE_ATTRIBUTES)),
    one(2, "nonResourceAttributes", Ty::Msg(NON_RESOURCE_ATTRIBUTES)),
];
const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    METADATA,
    one(2, "spec", Ty::Msg(SELF_SUBJECT_ACCESS_REVIEW_SPEC)),
];
const SELF_SUBJECT_RULES_REVIEW_SPEC: &[Field] = &[one(1, "namespace", Ty::Str)];
const SELF_SUBJECT_RULES_REVIEW: &[Field] = &[
    METADATA,
    one(2, "spec", Ty::Msg(SELF_SUBJECT_RULES_REVIEW_SPEC)),
];

// k8s.io/api/rbac/v1/generated.proto
const POLICY_RULE: &[Field] = &[
    rep(1, "verbs", Ty::Str),
    rep(2, "apiGroups", Ty::Str),
    rep(3, "resources", Ty::Str),
    rep(4, "resourceNames", Ty::Str),
    rep(5, "nonResourceURLs", Ty::Str),
];
const LABEL_SELECTOR: &[Field] = &[
    one(1, "matchLabels", Ty::MapStr),
    rep(2, "matchExpressions", Ty::Msg(SELECTOR_REQUIREMENT)),
];
const AGGREGATION_RULE: &[Field] = &[rep(1, "clusterRoleSelectors", Ty::Msg(LABEL_SELECTOR))];
const ROLE: &[Field] = &[METADATA, rep(2, "rules", Ty::Msg(POLICY_RULE))];
const CLUSTER_ROLE: &[Field] = &[
    METADATA,
    rep(2, "rules", Ty::Msg(POLICY_RULE)),
    one(3, "aggregationRule", Ty::Msg(AGGREGATION_RULE)),
];
const SUBJECT: &[Field] = &[
    one(1, "kind", Ty::Str),
    one(2, "apiGroup", Ty::Str),
    one(3, "name", Ty::Str),
    one(4, "namespace", Ty::Str),
];
const ROLE_REF: &[Field] = &[
    one(1, "apiGroup", Ty::Str),
    one(2, "kind", Ty::Str),
    one(3, "name", Ty::Str),
];
const ROLE_BINDING: &[Field] = &[
    METADATA,
    rep(2, "subjects", Ty::Msg(SUBJECT)),
    one(3, "roleRef", Ty::Msg(ROLE_REF)),
];

fn malformed(detail: &str) -> DecodeError {
    DecodeError::Malformed(detail.to_string())
}

/// One field's payload as it appears on the wire.
#[derive(Debug, PartialEq)]
pub enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Len(&'a [u8]),
}

/// Reads protobuf wire format: (field number, payload) pairs.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(malformed("unexpected end of data"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// A base-128 varint of at most 10 bytes.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = *self
                .buf
                .get(i)
                .ok_or_else(|| malformed("unexpected end of data in a varint"))?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(malformed("varint longer than 10 bytes"))
    }

    /// The next field, or `None` at the end of the message.
    pub fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return Err(malformed("field number 0"));
        }
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Wire::Fixed64(u64::from_le_bytes(
                    b.try_into().map_err(|_| malformed("fixed64"))?,
                ))
            }
            2 => {
                let len = usize::try_from(self.varint()?)
                    .map_err(|_| malformed("length out of range"))?;
                Wire::Len(self.take(len)?)
            }
            5 => {
                let b = self.take(4)?;
                Wire::Fixed32(u32::from_le_bytes(
                    b.try_into().map_err(|_| malformed("fixed32"))?,
                ))
            }
            t => return Err(malformed(&format!("unsupported wire type {t}"))),
        };
        Ok(Some((number, wire)))
    }
}

fn utf8(b: &[u8], field: &str) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec())
        .map_err(|_| DecodeError::Malformed(format!("{field}: string is not valid UTF-8")))
}

fn base64(b: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(b))
}

/// A map entry message: key = 1 (string), value = 2 (string or bytes).
fn map_entry(b: &[u8], bytes_value: bool, field: &str) -> Result<(String, Value), DecodeError> {
    let mut r = Reader::new(b);
    let (mut key, mut value) = (String::new(), None);
    while let Some((n, w)) = r.field()? {
        match (n, w) {
            (1, Wire::Len(k)) => key = utf8(k, field)?,
            (2, Wire::Len(v)) => {
                value = Some(if bytes_value {
                    base64(v)
                } else {
                    Value::String(utf8(v, field)?)
                });
            }
            (1 | 2, _) => {
                return Err(DecodeError::Malformed(format!(
                    "{field}: map entry with a wrong wire type"
                )));
            }
            _ => {}
        }
    }
    let empty = if bytes_value {
        base64(&[])
    } else {
        Value::String(String::new())
    };
    Ok((key, value.unwrap_or(empty)))
}

/// Decodes one message with its field table; fields not in the table are skipped.
pub fn decode_message(b: &[u8], fields: &[Field]) -> Result<Map<String, Value>, DecodeError> {
    let mut out = Map::new();
    let mut r = Reader::new(b);
    while let Some((n, wire)) = r.field()? {
        let Some(f) = fields.iter().find(|f| f.number == n) else {
            continue;
        };
        let value = match (f.ty, wire) {
            (Ty::Str, Wire::Len(b)) => Value::String(utf8(b, f.json)?),
            (Ty::Bytes, Wire::Len(b)) => base64(b),
            (Ty::Int, Wire::Varint(v)) => Value::from(v as i64),
            (Ty::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
            (Ty::Msg(inner), Wire::Len(b)) => Value::Object(decode_message(b, inner)?),
            (ty @ (Ty::MapStr | Ty::MapBytes), Wire::Len(b)) => {
                let (k, v) = map_entry(b, matches!(ty, Ty::MapBytes), f.json)?;
                let entry = out
                    .entry(f.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = entry {
                    m.insert(k, v);
                }
                continue;
            }
            (_, w) => {
                return Err(DecodeError::Malformed(format!(
                    "field {} ({n}) has an unexpected wire type: {w:?}",
                    f.json
                )));
            }
        };
        if f.repeated {
            let entry = out
                .entry(f.json)
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = entry {
                a.push(value);
            }
        } else if value.as_str() == Some("") && matches!(f.ty, Ty::Str) {
            out.remove(f.json);
        } else {
            out.insert(f.json.to_string(), value);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Copies kubectl 1.32's `kubectl create namespace foo` body byte for byte (captured
    /// with a logging server): Go's encoder writes every non-pointer field, so empty
    /// strings and empty messages appear and must vanish in the JSON.
    #[test]
    fn kubectl_create_namespace_body() {
        let body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1b\n\x13\n\x03foo\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00\"\x00";
        assert_eq!(
            decode(body),
            Ok(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}, "spec": {}})
            )
        );
    }

    /// Copies kubectl's `create configmap cm1 --from-literal=a=b -n ns1` and `create
    /// secret generic s1 --from-literal=k=v` bodies: map<string,string> data, and
    /// map<string,bytes> data that JSON carries as base64.
    #[test]
    fn kubectl_configmap_and_secret_bodies() {
        let cm = b"k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12 \n\x16\n\x03cm1\x12\x00\x1a\x03ns1\"\x00*\x002\x008\x00B\x00\x12\x06\n\x01a\x12\x01b\x1a\x00\"\x00";
        assert_eq!(
            decode(cm),
            Ok(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm1", "namespace": "ns1"}, "data": {"a": "b"}}))
        );
        let secret = b"k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12!\n\x15\n\x02s1\x12\x00\x1a\x03ns1\"\x00*\x002\x008\x00B\x00\x12\x06\n\x01k\x12\x01v\x1a\x00\x1a\x00\"\x00";
        assert_eq!(
            decode(secret),
            Ok(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s1", "namespace": "ns1"}, "data": {"k": "dg=="}}))
        );
    }

    /// Copies kubectl's `create token sa1 --audience=x --duration=1h` body: repeated
    /// audiences, int64 expirationSeconds (field 4), the status message ignored.
    #[test]
    fn kubectl_token_request_body() {
        let body = b"k8s\x00\n(\n\x18authentication.k8s.io/v1\x12\x0cTokenRequest\x12 \n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\n\x01x \x90\x1c\x1a\x04\n\x00\x12\x00\x1a\x00\"\x00";
        assert_eq!(
            decode(body),
            Ok(
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {}, "spec": {"audiences": ["x"], "expirationSeconds": 3600}})
            )
        );
    }

    /// Copies kubectl's `auth can-i get pods -n ns1` and `auth can-i get /healthz` bodies
    /// (SelfSubjectAccessReview with resource or non-resource attributes) and `auth can-i
    /// --list -n ns1` (SelfSubjectRulesReview).
    #[test]
    fn kubectl_auth_can_i_bodies() {
        let resource = b"k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x128\n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x1a\n\x18\n\x03ns1\x12\x03get\x1a\x00\"\x00*\x04pods2\x00:\x00\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";
        assert_eq!(
            decode(resource),
            Ok(
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "metadata": {}, "spec": {"resourceAttributes":
                    {"namespace": "ns1", "verb": "get", "resource": "pods"}}})
            )
        );
        let path = b"k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12/\n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x11\x12\x0f\n\x08/healthz\x12\x03get\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";
        assert_eq!(
            decode(path).map(|v| v["spec"].clone()),
            Ok(json!({"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}))
        );
        let rules = b"k8s\x00\n1\n\x17authorization.k8s.io/v1\x12\x16SelfSubjectRulesReview\x12\x1f\n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x05\n\x03ns1\x1a\x04\x18\x00\"\x00\x1a\x00\"\x00";
        assert_eq!(
            decode(rules).map(|v| v["spec"].clone()),
            Ok(json!({"namespace": "ns1"}))
        );
    }

    /// Copies kubectl's `create clusterrolebinding crb --clusterrole=view --user=bob` and
    /// `create clusterrole cr1 --verb=get --non-resource-url=/logs` bodies.
    #[test]
    fn kubectl_rbac_bodies() {
        let crb = b"k8s\x00\n2\n\x1crbac.authorization.k8s.io/v1\x12\x12ClusterRoleBinding\x12o\n\x13\n\x03crb\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12(\n\x04User\x12\x19rbac.authorization.k8s.io\x1a\x03bob\"\x00\x1a.\n\x19rbac.authorization.k8s.io\x12\x0bClusterRole\x1a\x04view\x1a\x00\"\x00";
        assert_eq!(
            decode(crb),
            Ok(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "crb"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
            )
        );
        let cr = b"k8s\x00\n+\n\x1crbac.authorization.k8s.io/v1\x12\x0bClusterRole\x12#\n\x13\n\x03cr1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x0c\n\x03get*\x05/logs\x1a\x00\"\x00";
        assert_eq!(
            decode(cr).map(|v| v["rules"].clone()),
            Ok(json!([{"verbs": ["get"], "nonResourceURLs": ["/logs"]}]))
        );
    }

    fn len_field(out: &mut Vec<u8>, number: u8, payload: &[u8]) {
        out.push(number << 3 | 2);
        out.push(u8::try_from(payload.len()).unwrap_or(0));
        out.extend_from_slice(payload);
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        len_field(&mut type_meta, 1, api_version.as_bytes());
        len_field(&mut type_meta, 2, kind.as_bytes());
        let mut body = MAGIC.to_vec();
        len_field(&mut body, 1, &type_meta);
        len_field(&mut body, 2, raw);
        body
    }

    /// Copies the metadata a typed client can set: labels and annotations (maps),
    /// generateName, finalizers, ownerReferences with their bool pointers.
    #[test]
    fn object_meta_maps_and_lists() {
        let mut meta = Vec::new();
        len_field(&mut meta, 2, b"gen-");
        len_field(&mut meta, 11, b"\n\x03app\x12\x03web");
        len_field(&mut meta, 11, b"\n\x04tier\x12\x00");
        len_field(&mut meta, 12, b"\n\x04note\x12\x02hi");
        len_field(&mut meta, 14, b"example.com/f");
        len_field(
            &mut meta,
            13,
            b"\n\x03Pod\x1a\x02p1\"\x03uid*\x02v10\x018\x00",
        );
        let mut raw = Vec::new();
        len_field(&mut raw, 1, &meta);
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", &raw)).map(|v| v["metadata"].clone()),
            Ok(json!({
                "generateName": "gen-",
                "labels": {"app": "web", "tier": ""},
                "annotations": {"note": "hi"},
                "finalizers": ["example.com/f"],
                "ownerReferences": [{"kind": "Pod", "name": "p1", "uid": "uid", "apiVersion": "v1",
                    "controller": true, "blockOwnerDeletion": false}],
            }))
        );
    }

    /// Copies kube-apiserver for kinds without a protobuf serializer (custom resources,
    /// here anything this module has no table for): 415 UnsupportedMediaType.
    #[test]
    fn unknown_kind_is_unsupported() {
        let err = decode(&envelope("terrace.dev/v1alpha1", "Gizmo", b"\n\x00"));
        assert_eq!(
            err,
            Err(DecodeError::UnsupportedKind {
                api_version: "terrace.dev/v1alpha1".into(),
                kind: "Gizmo".into()
            })
        );
        let api: ApiError = err
            .err()
            .map(Into::into)
            .unwrap_or_else(|| ApiError::bad_request(""));
        assert_eq!(api.code, 415);
        // Pods are built in, but not among the decoded kinds.
        let err = decode(&envelope("v1", "Pod", b""));
        assert!(matches!(err, Err(DecodeError::UnsupportedKind { .. })));
    }

    /// Copies kube-apiserver's answer to bodies that do not decode: 400 BadRequest, never
    /// a panic — missing magic, truncated length, overlong varint, wrong wire type,
    /// invalid UTF-8.
    #[test]
    fn malformed_bodies_are_bad_requests() {
        let cases: &[&[u8]] = &[
            b"",
            b"{\"kind\":\"Namespace\"}",
            b"k8s\x00\n",
            b"k8s\x00\n\xff",
            b"k8s\x00\n\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"k8s\x00\x08\x01",
            b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x04\n\x02\n\x05",
            b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x04\n\x02\x08\x01",
            b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x05\n\x03\n\x01\xff",
            b"k8s\x00\x03",
            b"k8s\x00\x00\x01",
        ];
        for c in cases {
            let err = decode(c);
            assert!(
                matches!(err, Err(DecodeError::Malformed(_))),
                "{c:?}: {err:?}"
            );
            let api: ApiError = err
                .err()
                .map(Into::into)
                .unwrap_or_else(|| ApiError::bad_request(""));
            assert_eq!(api.code, 400, "{c:?}");
        }
    }

    /// Copies protobuf's reader rules: varints little-endian base 128, unknown fields of
    /// every wire type skipped, the last value of a non-repeated field wins.
    #[test]
    fn reader_skips_unknown_fields_and_last_wins() {
        let mut r = Reader::new(b"\x08\x96\x01");
        assert_eq!(r.field(), Ok(Some((1, Wire::Varint(150)))));
        assert_eq!(r.field(), Ok(None));
        // name "a", unknown fixed64 (9), fixed32 (10), varint (99), name "b".
        let msg =
            b"\n\x01a\x49\x01\x02\x03\x04\x05\x06\x07\x08\x55\x01\x02\x03\x04\x98\x06\x01\n\x01b";
        assert_eq!(
            decode_message(msg, OBJECT_META),
            Ok(json!({"name": "b"})
                .as_object()
                .cloned()
                .unwrap_or_default())
        );
    }
}
