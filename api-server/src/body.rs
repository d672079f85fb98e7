//! Request bodies: [`JsonApi<T>`] reads a body of any JSON media type (TFE clients send
//! `application/vnd.api+json`, curl sends whatever it likes) into a typed document. A
//! body that is not JSON is 400; a document of the wrong shape is 422 whose `source.pointer`
//! names the offending field (`/data/attributes/auto-apply`), found with
//! serde_path_to_error. [`Nullable`] tells a `null` from an absent attribute, which
//! update semantics need ("null removes, absent keeps").
//!
//! The document types ([`Document`], [`ResourceObject`], [`ToMany`]) check `data.type`
//! against the attributes' [`Typed::TYPE`], so a handler receives only documents of its
//! own resource type.

use std::marker::PhantomData;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};

use crate::error::{ApiError, FieldError};

/// A request body parsed into `T`. An empty body reads as JSON `null` (so
/// `JsonApi<Option<T>>` accepts no body at all).
pub struct JsonApi<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonApi<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::TooLarge("request body too large".into())
            } else {
                ApiError::bad_body(format!("unreadable body: {e}"))
            }
        })?;
        parse(&bytes).map(JsonApi)
    }
}

/// Parses a body into `T` with the API's errors (400 for bad JSON, 422 with a pointer for
/// a wrong shape). Whitespace only reads as `null`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"null"
    } else {
        bytes
    };
    // Syntax first (no allocation), so a malformed document is 400 whatever its shape.
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
        .map_err(|e| ApiError::bad_body(format!("malformed JSON body: {e}")))?;
    // Every body of this API is a document: an object (or nothing). A list or a scalar is
    // not one (serde would read a list as a struct's fields in order).
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | Some(b'n') | None => {}
        Some(_) => {
            return Err(ApiError::bad_body(
                "the body must be a JSON object: a JSON:API document such as {\"data\": {…}}",
            ));
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        if inner.is_syntax() || inner.is_eof() || inner.is_io() {
            ApiError::bad_body(format!("malformed JSON body: {inner}"))
        } else {
            ApiError::Invalid(vec![FieldError::new(pointer(e.path()), message(inner))])
        }
    })?;
    de.end()
        .map_err(|e| ApiError::bad_body(format!("malformed JSON body: {e}")))?;
    Ok(value)
}

/// serde's message without its position suffix (" at line 1 column 42").
fn message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// The JSON pointer (RFC 6901) of a serde path.
pub fn pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in path.iter() {
        out.push('/');
        match seg {
            Segment::Seq { index } => out.push_str(&index.to_string()),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                out.push_str(&key.replace('~', "~0").replace('/', "~1"))
            }
            Segment::Unknown => out.push('-'),
        }
    }
    if out.is_empty() { "/".into() } else { out }
}

/// An attribute that may be absent (`None`), `null` (`Some(None)`) or a value. Use with
/// `#[serde(default, deserialize_with = "nullable")]`.
pub type Nullable<T> = Option<Option<T>>;

/// Deserializes a present attribute of a [`Nullable`] (absent ones take the default).
pub fn nullable<'de, D, T>(d: D) -> Result<Nullable<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Deserializes `null` as the type's default (for objects clients send as null).
pub fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(d).map(Option::unwrap_or_default)
}

/// An attribute read leniently, so a document's every wrong attribute is reported at
/// once (one error object per field) rather than only the first: absent, `null`, a value
/// of the expected type, or a value of another type (with serde's message).
#[derive(Clone, Debug, Default)]
pub enum Attr<T> {
    #[default]
    Absent,
    Null,
    Value(T),
    Wrong(String),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Attr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if v.is_null() {
            return Ok(Attr::Null);
        }
        Ok(match serde_json::from_value::<T>(v) {
            Ok(t) => Attr::Value(t),
            Err(e) => Attr::Wrong(message(&e)),
        })
    }
}

impl<T> Attr<T> {
    /// The value (None when absent or null); a wrong one is recorded in `errors` at
    /// `pointer` as "`name` must be `what`".
    pub fn take(self, pointer: &str, what: &str, errors: &mut Vec<FieldError>) -> Option<T> {
        match self {
            Attr::Value(v) => Some(v),
            Attr::Absent | Attr::Null => None,
            Attr::Wrong(_) => {
                let name = pointer.rsplit('/').next().unwrap_or(pointer);
                errors.push(FieldError::new(pointer, format!("{name} must be {what}")));
                None
            }
        }
    }
}

/// Attributes (or a relationship entry) of one JSON:API resource type.
pub trait Typed {
    /// The `type` the document must carry.
    const TYPE: &'static str;
}

/// `{"data": {...}}` with `data.type` checked against `A::TYPE`.
#[derive(Debug)]
pub struct Document<A, R = Empty> {
    pub data: ResourceObject<A, R>,
}

/// `data` of a request document: an optional ID, the attributes (absent or null: the
/// default) and the relationships (likewise).
#[derive(Clone, Debug, Deserialize)]
#[serde(bound(deserialize = "A: Deserialize<'de> + Default, R: Deserialize<'de> + Default"))]
pub struct ResourceObject<A, R = Empty> {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub attributes: A,
    #[serde(default, deserialize_with = "null_as_default")]
    pub relationships: R,
}

/// No attributes or relationships of interest.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Empty {}

/// Checks a resource object's `type`: absent is read as the endpoint's own type, as TFE
/// does (its documented run-trigger create payload has none, and its schema marks it
/// optional for variable sets; docs/api.md lists the cases), a wrong one is 422.
fn check_type(kind: Option<&str>, expected: &str, pointer: String) -> Result<(), FieldError> {
    match kind {
        None => Ok(()),
        Some(t) if t == expected => Ok(()),
        Some(t) => Err(FieldError::new(
            pointer,
            format!("type must be {expected:?}, got {t:?}"),
        )),
    }
}

impl<'de, A, R> Deserialize<'de> for Document<A, R>
where
    A: Deserialize<'de> + Default + Typed,
    R: Deserialize<'de> + Default,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(bound(
            deserialize = "A: Deserialize<'de> + Default, R: Deserialize<'de> + Default"
        ))]
        struct Raw<A, R> {
            data: Option<ResourceObject<A, R>>,
        }
        let raw = Option::<Raw<A, R>>::deserialize(d)?;
        let data = raw
            .and_then(|r| r.data)
            .ok_or_else(|| serde::de::Error::custom("the request document needs a data object"))?;
        Ok(Document { data })
    }
}

impl<A: Typed, R> Document<A, R> {
    /// The document, its `data.type` checked (422 at `/data/type` when wrong).
    pub fn checked(self) -> Result<ResourceObject<A, R>, ApiError> {
        check_type(self.data.kind.as_deref(), A::TYPE, "/data/type".into())
            .map_err(|e| ApiError::Invalid(vec![e]))?;
        Ok(self.data)
    }
}

/// One entry of a to-many relationship body: `{"type": T, "id": ...}` with optional
/// attributes (flat tags are named by `attributes.name`): a resource object whose
/// relationships are of no interest.
pub type Identifier<A = Empty> = ResourceObject<A, Empty>;

/// `{"data": [...]}` of identifiers of type `T::TYPE`, each type checked.
pub struct ToMany<T, A = Empty> {
    pub entries: Vec<Identifier<A>>,
    _t: PhantomData<T>,
}

impl<'de, T: Typed, A: Deserialize<'de> + Default> Deserialize<'de> for ToMany<T, A> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(bound(deserialize = "A: Deserialize<'de> + Default"))]
        struct Raw<A> {
            data: Option<Vec<Identifier<A>>>,
        }
        let raw = Option::<Raw<A>>::deserialize(d)?;
        let entries = raw
            .and_then(|r| r.data)
            .ok_or_else(|| serde::de::Error::custom("the request document needs a data list"))?;
        Ok(ToMany {
            entries,
            _t: PhantomData,
        })
    }
}

impl<T: Typed, A> ToMany<T, A> {
    /// The entries, every `type` checked (422 at `/data/i/type`).
    pub fn checked(self) -> Result<Vec<Identifier<A>>, ApiError> {
        let errors: Vec<FieldError> = self
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                check_type(e.kind.as_deref(), T::TYPE, format!("/data/{i}/type")).err()
            })
            .collect();
        if errors.is_empty() {
            Ok(self.entries)
        } else {
            Err(ApiError::Invalid(errors))
        }
    }
}

/// `{"data": {"type": ..., "id": ...}}` or `{"data": null}` of a to-one relationship.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ToOne {
    #[serde(default, deserialize_with = "nullable")]
    pub data: Nullable<Identifier>,
}

impl ToOne {
    /// The related ID: `Some(None)` for `{"data": null}`, None when `data` is absent.
    pub fn id(&self) -> Nullable<&str> {
        self.data
            .as_ref()
            .map(|d| d.as_ref().and_then(|i| i.id.as_deref()))
    }

    /// The related ID of an optional relationship, if one is given and not empty.
    pub fn given_id(rel: Option<&ToOne>) -> Option<&str> {
        rel.and_then(|r| r.id().flatten()).filter(|s| !s.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    #[allow(dead_code)]
    struct Attrs {
        name: Option<String>,
        auto_apply: Option<bool>,
        #[serde(default, deserialize_with = "nullable")]
        description: Nullable<String>,
        tags: Option<Vec<String>>,
    }
    impl Typed for Attrs {
        const TYPE: &'static str = "workspaces";
    }

    fn doc(body: &str) -> Result<ResourceObject<Attrs>, ApiError> {
        parse::<Document<Attrs>>(body.as_bytes())?.checked()
    }

    fn pointer_of(e: ApiError) -> String {
        match e {
            ApiError::Invalid(f) => f[0].pointer.clone(),
            other => panic!("not 422: {other:?}"),
        }
    }

    #[test]
    fn wrong_types_point_at_the_field() {
        let e = doc(r#"{"data":{"type":"workspaces","attributes":{"auto-apply":"yes"}}}"#)
            .err()
            .map(pointer_of);
        assert_eq!(e.as_deref(), Some("/data/attributes/auto-apply"));
        let e = doc(r#"{"data":{"type":"workspaces","attributes":{"tags":["a",3]}}}"#)
            .err()
            .map(pointer_of);
        assert_eq!(e.as_deref(), Some("/data/attributes/tags/1"));
    }

    #[test]
    fn null_differs_from_absent() {
        let d = doc(r#"{"data":{"type":"workspaces","attributes":{"description":null}}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.attributes.description, Some(None));
        let d = doc(r#"{"data":{"type":"workspaces","attributes":{}}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.attributes.description, None);
        let d = doc(r#"{"data":{"type":"workspaces","attributes":null}}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.attributes.name, None);
    }

    #[test]
    fn bad_json_is_400_and_wrong_type_422() {
        assert!(matches!(doc("{not json"), Err(ApiError::BadRequest { .. })));
        assert!(matches!(doc("{} {}"), Err(ApiError::BadRequest { .. })));
        let e = doc(r#"{"data":{"type":"projects"}}"#).err().map(pointer_of);
        assert_eq!(e.as_deref(), Some("/data/type"));
        assert!(matches!(doc("{}"), Err(ApiError::Invalid(_))));
        // No type: the endpoint's own (TFE's documented run-trigger payload has none).
        let d = doc(r#"{"data":{"attributes":{"name":"a"}}}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.attributes.name.as_deref(), Some("a"));
        let e = doc(r#"{"data":{"type":null,"attributes":{}}}"#).err();
        assert!(e.is_none(), "a null type reads as absent: {e:?}");
        assert!(matches!(doc(""), Err(ApiError::Invalid(_))));
        assert!(matches!(doc(r#"{"data":[]}"#), Err(ApiError::Invalid(_))));
    }

    #[test]
    fn to_many_checks_each_type() {
        struct Ws;
        impl Typed for Ws {
            const TYPE: &'static str = "workspaces";
        }
        let ok = parse::<ToMany<Ws>>(br#"{"data":[{"type":"workspaces","id":"ws-1"}]}"#)
            .and_then(ToMany::checked)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok[0].id.as_deref(), Some("ws-1"));
        let e = parse::<ToMany<Ws>>(
            br#"{"data":[{"type":"workspaces","id":"a"},{"type":"tags","id":"b"}]}"#,
        )
        .and_then(ToMany::checked)
        .err()
        .map(pointer_of);
        assert_eq!(e.as_deref(), Some("/data/1/type"));
        assert!(parse::<ToMany<Ws>>(br#"{"data":{"type":"workspaces"}}"#).is_err());
    }

    #[test]
    fn pointers_escape_keys() {
        #[derive(Debug, Deserialize)]
        struct M {
            #[allow(dead_code)]
            m: std::collections::BTreeMap<String, bool>,
        }
        let e = parse::<M>(br#"{"m":{"a/b":1}}"#).err().map(pointer_of);
        assert_eq!(e.as_deref(), Some("/m/a~1b"));
    }
}
