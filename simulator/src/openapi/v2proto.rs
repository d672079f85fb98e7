//! The swagger 2.0 document in its protobuf form, `openapi.v2.Document` of gnostic's
//! `OpenAPIv2.proto` (`application/com.github.proto-openapi.spec.v2.v1.0+protobuf`).
//!
//! client-go's `OpenAPISchema()` asks `/openapi/v2` for this form only and parses the
//! answer as protobuf. kubectl does so when the OpenAPI v3 index lacks a manifest's group
//! version (a kind the cluster does not know, such as Argo CD's `Application`) and to
//! validate the items of a `kind: List`; with a real document it finds no schema for an
//! unknown kind, skips client-side validation and reports the REST mapper's `no matches
//! for kind …`.
//!
//! [`encode`] walks the JSON document [`super::v2_document`] builds and writes each
//! swagger object as its message: the fields the proto declares, vendor extensions
//! (`x-…`) as `NamedAny` with the value's YAML (JSON text, which YAML reads) in
//! `Any.yaml`, as gnostic does. Keys the proto has no field for are left out.

use serde_json::{Map, Value};

/// The media type kubectl asks for (gnostic's, with `@`).
pub const MEDIA_TYPE: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The older spelling, also accepted.
pub const MEDIA_TYPE_DOTTED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The document as an `openapi.v2.Document` message.
pub fn encode(doc: &Value) -> Vec<u8> {
    let Some(m) = doc.as_object() else {
        return Vec::new();
    };
    let mut out = Msg::default();
    out.string(1, str_of(m, "swagger"));
    if let Some(info) = obj(m, "info") {
        let mut i = Msg::default();
        i.string(1, str_of(info, "title"));
        i.string(2, str_of(info, "version"));
        i.string(3, str_of(info, "description"));
        i.string(4, str_of(info, "termsOfService"));
        i.extensions(7, info);
        out.message(2, i);
    }
    out.string(3, str_of(m, "host"));
    out.string(4, str_of(m, "basePath"));
    out.strings(5, m.get("schemes"));
    out.strings(6, m.get("consumes"));
    out.strings(7, m.get("produces"));
    if let Some(paths) = obj(m, "paths") {
        let mut p = Msg::default();
        p.extensions(1, paths);
        for (name, item) in paths.iter().filter(|(k, _)| !k.starts_with("x-")) {
            p.named(2, name, path_item(item));
        }
        out.message(8, p);
    }
    if let Some(defs) = obj(m, "definitions") {
        out.message(9, named_schemas(defs));
    }
    for req in arr(m, "security") {
        let mut r = Msg::default();
        for (name, scopes) in req.as_object().into_iter().flatten() {
            r.named(1, name, Msg::build(|a| a.strings(1, Some(scopes))));
        }
        out.message(12, r);
    }
    if let Some(defs) = obj(m, "securityDefinitions") {
        let mut d = Msg::default();
        for (name, def) in defs {
            d.named(1, name, security_definition(def));
        }
        out.message(13, d);
    }
    out.extensions(16, m);
    out.0
}

fn path_item(v: &Value) -> Msg {
    object_msg(v, |p, m| {
        p.string(1, str_of(m, "$ref"));
        for (field, method) in [
            (2, "get"),
            (3, "put"),
            (4, "post"),
            (5, "delete"),
            (6, "options"),
            (7, "head"),
            (8, "patch"),
        ] {
            if let Some(op) = m.get(method) {
                p.message(field, operation(op));
            }
        }
        for param in arr(m, "parameters") {
            p.message(9, parameters_item(param));
        }
        p.extensions(10, m);
    })
}

fn operation(v: &Value) -> Msg {
    object_msg(v, |o, m| {
        o.strings(1, m.get("tags"));
        o.string(2, str_of(m, "summary"));
        o.string(3, str_of(m, "description"));
        o.string(5, str_of(m, "operationId"));
        o.strings(6, m.get("produces"));
        o.strings(7, m.get("consumes"));
        for param in arr(m, "parameters") {
            o.message(8, parameters_item(param));
        }
        if let Some(responses) = obj(m, "responses") {
            let mut r = Msg::default();
            for (code, resp) in responses.iter().filter(|(k, _)| !k.starts_with("x-")) {
                let mut value = Msg::default();
                match resp.get("$ref").and_then(Value::as_str) {
                    Some(reference) => value.message(2, json_reference(reference, resp)),
                    None => value.message(1, response(resp)),
                }
                r.named(1, code, value);
            }
            r.extensions(2, responses);
            o.message(9, r);
        }
        o.strings(10, m.get("schemes"));
        o.boolean(11, m.get("deprecated"));
        o.extensions(13, m);
    })
}

fn response(v: &Value) -> Msg {
    object_msg(v, |r, m| {
        r.string(1, str_of(m, "description"));
        if let Some(s) = m.get("schema") {
            r.message(2, Msg::wrap(1, schema(s)));
        }
        r.extensions(5, m);
    })
}

fn json_reference(reference: &str, v: &Value) -> Msg {
    let mut j = Msg::default();
    j.string(1, reference);
    j.string(
        2,
        v.get("description").and_then(Value::as_str).unwrap_or(""),
    );
    j
}

/// `ParametersItem`: a reference, a body parameter or a non-body one (header, formData,
/// query, path).
fn parameters_item(v: &Value) -> Msg {
    object_msg(v, |item, m| {
        if let Some(reference) = m.get("$ref").and_then(Value::as_str) {
            item.message(2, json_reference(reference, v));
            return;
        }
        let mut parameter = Msg::default();
        let location = str_of(m, "in");
        if location == "body" {
            let mut b = Msg::default();
            b.string(1, str_of(m, "description"));
            b.string(2, str_of(m, "name"));
            b.string(3, location);
            b.boolean(4, m.get("required"));
            if let Some(s) = m.get("schema") {
                b.message(5, schema(s));
            }
            b.extensions(6, m);
            parameter.message(1, b);
        } else {
            // Query and formData carry allowEmptyValue (5) before the type; header and path
            // do not, so their later fields are numbered one lower.
            let (which, allow_empty) = match location {
                "header" => (1, false),
                "formData" => (2, true),
                "query" => (3, true),
                _ => (4, false),
            };
            let mut s = Msg::default();
            s.boolean(1, m.get("required"));
            s.string(2, location);
            s.string(3, str_of(m, "description"));
            s.string(4, str_of(m, "name"));
            let base = if allow_empty {
                s.boolean(5, m.get("allowEmptyValue"));
                6
            } else {
                5
            };
            primitive_fields(&mut s, m, base);
            let mut non_body = Msg::default();
            non_body.message(which, s);
            parameter.message(2, non_body);
        }
        item.message(1, parameter);
    })
}

/// The fields a non-body parameter and `PrimitivesItems` share, numbered from `base`
/// (`type`) on.
fn primitive_fields(out: &mut Msg, m: &Map<String, Value>, base: u32) {
    out.string(base, str_of(m, "type"));
    out.string(base + 1, str_of(m, "format"));
    if let Some(items) = m.get("items").and_then(Value::as_object) {
        let mut i = Msg::default();
        primitive_fields(&mut i, items, 1);
        out.message(base + 2, i);
    }
    out.string(base + 3, str_of(m, "collectionFormat"));
    out.any(base + 4, m.get("default"));
    bound_fields(out, m, base + 5);
    for e in arr(m, "enum") {
        out.any(base + 15, Some(e));
    }
    out.double(base + 16, m.get("multipleOf"));
    out.extensions(base + 17, m);
}

/// The validation keywords `Schema` and the primitive fields share, in the same order,
/// numbered from `first` (`maximum`) to `first + 9` (`uniqueItems`).
fn bound_fields(out: &mut Msg, m: &Map<String, Value>, first: u32) {
    out.double(first, m.get("maximum"));
    out.boolean(first + 1, m.get("exclusiveMaximum"));
    out.double(first + 2, m.get("minimum"));
    out.boolean(first + 3, m.get("exclusiveMinimum"));
    out.int64(first + 4, m.get("maxLength"));
    out.int64(first + 5, m.get("minLength"));
    out.string(first + 6, str_of(m, "pattern"));
    out.int64(first + 7, m.get("maxItems"));
    out.int64(first + 8, m.get("minItems"));
    out.boolean(first + 9, m.get("uniqueItems"));
}

/// A `Schema` message.
fn schema(v: &Value) -> Msg {
    object_msg(v, |s, m| {
        s.string(1, str_of(m, "$ref"));
        s.string(2, str_of(m, "format"));
        s.string(3, str_of(m, "title"));
        s.string(4, str_of(m, "description"));
        s.any(5, m.get("default"));
        s.double(6, m.get("multipleOf"));
        bound_fields(s, m, 7);
        s.int64(17, m.get("maxProperties"));
        s.int64(18, m.get("minProperties"));
        s.strings(19, m.get("required"));
        for e in arr(m, "enum") {
            s.any(20, Some(e));
        }
        match m.get("additionalProperties") {
            Some(Value::Bool(b)) => s.message(
                21,
                Msg::build(|a| {
                    // A oneof member is written even when it is false.
                    a.key(2, 0);
                    a.varint(u64::from(*b));
                }),
            ),
            Some(sub @ Value::Object(_)) => s.message(21, Msg::wrap(1, schema(sub))),
            _ => {}
        }
        match m.get("type") {
            Some(Value::String(t)) => s.message(22, Msg::build(|t2| t2.string(1, t))),
            Some(types @ Value::Array(_)) => {
                s.message(22, Msg::build(|t2| t2.strings(1, Some(types))))
            }
            _ => {}
        }
        match m.get("items") {
            Some(one @ Value::Object(_)) => s.message(23, Msg::wrap(1, schema(one))),
            Some(Value::Array(many)) => s.message(
                23,
                Msg::build(|i| many.iter().for_each(|one| i.message(1, schema(one)))),
            ),
            _ => {}
        }
        for sub in arr(m, "allOf") {
            s.message(24, schema(sub));
        }
        if let Some(props) = obj(m, "properties") {
            s.message(25, named_schemas(props));
        }
        s.string(26, str_of(m, "discriminator"));
        s.boolean(27, m.get("readOnly"));
        s.any(30, m.get("example"));
        s.extensions(31, m);
    })
}

/// `SecurityDefinitionsItem`: basic (1) or apiKey (2); the OAuth2 flows are not served.
fn security_definition(v: &Value) -> Msg {
    object_msg(v, |item, m| {
        let mut d = Msg::default();
        d.string(1, str_of(m, "type"));
        if str_of(m, "type") == "basic" {
            d.string(2, str_of(m, "description"));
            d.extensions(3, m);
            item.message(1, d);
        } else {
            d.string(2, str_of(m, "name"));
            d.string(3, str_of(m, "in"));
            d.string(4, str_of(m, "description"));
            d.extensions(5, m);
            item.message(2, d);
        }
    })
}

/// The message `fill` writes from the JSON object `v` (empty when `v` is not an object).
fn object_msg(v: &Value, fill: impl FnOnce(&mut Msg, &Map<String, Value>)) -> Msg {
    Msg::build(|out| {
        if let Some(m) = v.as_object() {
            fill(out, m);
        }
    })
}

fn str_of<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

fn obj<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Map<String, Value>> {
    m.get(k).and_then(Value::as_object)
}

fn arr<'a>(m: &'a Map<String, Value>, k: &str) -> impl Iterator<Item = &'a Value> {
    m.get(k).and_then(Value::as_array).into_iter().flatten()
}

/// An `Any` holding `v` as YAML (its JSON text).
fn yaml_any(v: &Value) -> Msg {
    Msg::build(|a| a.string(2, &v.to_string()))
}

/// A map of schemas by name, as repeated `NamedSchema` (field 1).
fn named_schemas(m: &Map<String, Value>) -> Msg {
    Msg::build(|out| {
        for (name, s) in m {
            out.named(1, name, schema(s));
        }
    })
}

/// A message being written: proto3 rules (scalars at their default are not written).
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    /// The message `fill` writes.
    fn build(fill: impl FnOnce(&mut Msg)) -> Msg {
        let mut m = Msg::default();
        fill(&mut m);
        m
    }

    /// A message holding only `inner`, as its field `field`.
    fn wrap(field: u32, inner: Msg) -> Msg {
        Msg::build(|m| m.message(field, inner))
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire));
    }

    fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    fn strings(&mut self, field: u32, v: Option<&Value>) {
        for s in v.and_then(Value::as_array).into_iter().flatten() {
            if let Some(s) = s.as_str() {
                self.bytes(field, s.as_bytes());
            }
        }
    }

    fn boolean(&mut self, field: u32, v: Option<&Value>) {
        if v.and_then(Value::as_bool) == Some(true) {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u32, v: Option<&Value>) {
        if let Some(n) = v.and_then(Value::as_i64).filter(|n| *n != 0) {
            self.key(field, 0);
            self.varint(n as u64);
        }
    }

    fn double(&mut self, field: u32, v: Option<&Value>) {
        if let Some(f) = v.and_then(Value::as_f64).filter(|f| *f != 0.0) {
            self.key(field, 1);
            self.0.extend_from_slice(&f.to_le_bytes());
        }
    }

    fn message(&mut self, field: u32, m: Msg) {
        self.bytes(field, &m.0);
    }

    /// An `Any` holding `v` as YAML ([`yaml_any`]), when there is one.
    fn any(&mut self, field: u32, v: Option<&Value>) {
        if let Some(v) = v {
            self.message(field, yaml_any(v));
        }
    }

    /// A `Named…` pair: name (1) and value (2).
    fn named(&mut self, field: u32, name: &str, value: Msg) {
        self.message(
            field,
            Msg::build(|n| {
                n.string(1, name);
                n.message(2, value);
            }),
        );
    }

    /// The `x-…` keys of `m` as repeated `NamedAny`.
    fn extensions(&mut self, field: u32, m: &Map<String, Value>) {
        for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
            self.named(field, k, yaml_any(v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::{Reader, Wire};
    use serde_json::json;

    /// Every length-delimited field of one message, by number.
    fn fields(b: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut r = Reader::new(b);
        let mut out = Vec::new();
        while let Ok(Some((n, w))) = r.field() {
            if let Wire::Len(bytes) = w {
                out.push((n, bytes.to_vec()));
            }
        }
        out
    }

    fn field(b: &[u8], n: u64) -> Vec<u8> {
        fields(b)
            .into_iter()
            .find(|(k, _)| *k == n)
            .map(|(_, v)| v)
            .unwrap_or_default()
    }

    /// Copies gnostic's layout of what kubectl reads: definitions as NamedSchema with
    /// `x-kubernetes-group-version-kind` as a NamedAny whose YAML parses to the GVK list,
    /// properties, `type` as a TypeItem; paths as NamedPathItem with the PATCH operation's
    /// query parameters.
    #[test]
    fn definitions_and_paths() {
        let doc = json!({
            "swagger": "2.0",
            "definitions": {"dev.terrace.v1.W": {
                "type": "object",
                "properties": {"spec": {"type": "string"}},
                "x-kubernetes-group-version-kind": [{"group": "terrace.dev", "version": "v1", "kind": "W"}],
            }},
            "paths": {"/apis/terrace.dev/v1/ws/{name}": {"patch": {
                "parameters": [{"name": "fieldValidation", "in": "query", "type": "string"}],
            }}},
        });
        let b = encode(&doc);
        assert_eq!(field(&b, 1), b"2.0");
        let named = field(&field(&b, 9), 1);
        assert_eq!(field(&named, 1), b"dev.terrace.v1.W");
        let s = field(&named, 2);
        assert_eq!(field(&field(&s, 22), 1), b"object");
        let prop = field(&field(&s, 25), 1);
        assert_eq!(field(&prop, 1), b"spec");
        let ext = field(&s, 31);
        assert_eq!(field(&ext, 1), b"x-kubernetes-group-version-kind");
        let yaml = field(&field(&ext, 2), 2);
        let gvk: Value = serde_json::from_slice(&yaml).unwrap_or_default();
        assert_eq!(gvk[0]["kind"], "W");
        let path = field(&field(&b, 8), 2);
        assert_eq!(field(&path, 1), b"/apis/terrace.dev/v1/ws/{name}");
        let patch = field(&field(&path, 2), 8);
        let query = field(&field(&field(&field(&patch, 8), 1), 2), 3);
        assert_eq!(field(&query, 4), b"fieldValidation");
        assert_eq!(field(&query, 2), b"query");
        assert_eq!(field(&query, 6), b"string");
    }
}
