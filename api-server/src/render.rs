//! Responses: JSON:API documents with their status ([`Doc`], [`DocBytes`]); every list and
//! show with TFE's `meta.pagination`, `links` and the `included` its `include` asked for
//! ([`Included`], [`list`]); and the small pieces every
//! representation shares (IDs, timestamps with milliseconds, relationship objects).
//! Representations of one kind used by several resources (an organization or a project
//! in `included`) live in [`crate::documents`].

use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::LABEL_ID;
use terrace_crds::rules::Page;

use crate::error::{ApiError, MEDIA_TYPE};
use crate::query::QueryParams;

/// A JSON:API response with a status code.
pub struct Doc(pub StatusCode, pub Value);

impl Doc {
    /// 200 with `{"data": data}`.
    pub fn ok(data: Value) -> Doc {
        Doc(StatusCode::OK, json!({ "data": data }))
    }

    /// 201 with `{"data": data}`.
    pub fn created(data: Value) -> Doc {
        Doc(StatusCode::CREATED, json!({ "data": data }))
    }
}

impl IntoResponse for Doc {
    fn into_response(self) -> Response {
        let bytes = serde_json::to_vec(&self.1).unwrap_or_default();
        (self.0, [(header::CONTENT_TYPE, MEDIA_TYPE)], bytes).into_response()
    }
}

/// A pre-serialized JSON:API response with a status code.
pub struct DocBytes(pub StatusCode, pub Bytes);

impl IntoResponse for DocBytes {
    fn into_response(self) -> Response {
        (self.0, [(header::CONTENT_TYPE, MEDIA_TYPE)], self.1).into_response()
    }
}

/// 204 No Content.
pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// `meta.pagination` and `links` for a page of a collection at `base_url` (which may
/// already carry a query string of filters).
pub fn pagination(base_url: &str, page: Page, total: usize) -> (Value, Value) {
    let size = page.size.max(1) as usize;
    let total_pages = total.div_ceil(size).max(1);
    let current = page.number as usize;
    let next = (current < total_pages).then_some(current + 1);
    let prev = (current > 1).then(|| (current - 1).min(total_pages));
    let sep = if base_url.contains('?') { '&' } else { '?' };
    let link = |n: usize| {
        json!(format!(
            "{base_url}{sep}page%5Bnumber%5D={n}&page%5Bsize%5D={size}"
        ))
    };
    let meta = json!({
        "pagination": {
            "current-page": current,
            "page-size": size,
            "prev-page": prev,
            "next-page": next,
            "total-pages": total_pages,
            "total-count": total,
        }
    });
    let links = json!({
        "self": link(current),
        "first": link(1),
        "prev": prev.map_or(Value::Null, link),
        "next": next.map_or(Value::Null, link),
        "last": link(total_pages),
    });
    (meta, links)
}

/// The slice of `items` on `page`.
pub fn page_slice<T>(items: &[T], page: Page) -> &[T] {
    let size = page.size as usize;
    let start = (page.number as usize - 1)
        .saturating_mul(size)
        .min(items.len());
    let end = start.saturating_add(size).min(items.len());
    &items[start..end]
}

/// 200 with the `page` of documents already rendered, `meta.pagination` and `links`.
pub fn list_rendered(base_url: &str, page: Page, data: &[Value]) -> Doc {
    list(base_url, page, data, Clone::clone)
}

/// 200 with the `page` of `items` rendered by `render`, `meta.pagination` and `links`
/// (a list that includes nothing: [`Included::list`]).
pub fn list<T>(
    base_url: &str,
    page: Page,
    items: &[T],
    mut render: impl FnMut(&T) -> Value,
) -> Doc {
    Included::default().list(base_url, page, items, |t, _| render(t))
}

/// The answer of every list and show: its `data`, and in `included` the documents the
/// request's `include` asked for (each one the endpoint offers, 400 otherwise), gathered
/// while `data` is rendered, each once. Lists add TFE's `meta.pagination` and `links`.
#[derive(Debug, Default)]
pub struct Included {
    asked: Vec<String>,
    docs: Vec<Value>,
}

impl Included {
    /// What `q`'s `include` asks for, each one of `offered` (400 naming `include`
    /// otherwise; an empty value asks for nothing).
    pub fn asked(q: &QueryParams, offered: &[&str]) -> Result<Self, ApiError> {
        Ok(Included {
            asked: q.includes(offered)?,
            docs: Vec::new(),
        })
    }

    /// An answer asked to include `names` (already checked).
    pub fn of(names: &[String]) -> Self {
        Included {
            asked: names.to_vec(),
            docs: Vec::new(),
        }
    }

    /// The documents gathered so far.
    pub fn documents(&self) -> &[Value] {
        &self.docs
    }

    /// Whether `include` asked for anything (the answer then has `included`, even empty).
    pub fn any(&self) -> bool {
        !self.asked.is_empty()
    }

    /// Whether `include` asked for `name`.
    pub fn wants(&self, name: &str) -> bool {
        self.asked.iter().any(|a| a == name)
    }

    /// The names `include` asked for.
    pub fn names(&self) -> &[String] {
        &self.asked
    }

    /// Adds `doc` unless a document of its type and ID is there already.
    pub fn add(&mut self, doc: Value) {
        if !self
            .docs
            .iter()
            .any(|d| d["type"] == doc["type"] && d["id"] == doc["id"])
        {
            self.docs.push(doc);
        }
    }

    /// Adds each of `docs` ([`Self::add`]).
    pub fn extend(&mut self, docs: impl IntoIterator<Item = Value>) {
        for doc in docs {
            self.add(doc);
        }
    }

    /// `status` with `{"data": data}`, and `included` when anything was asked for.
    pub fn show(self, status: StatusCode, data: Value) -> Doc {
        self.answer(status, json!({ "data": data }))
    }

    /// 200 with the `page` of `items` rendered by `render` (which adds what each item
    /// includes), `meta.pagination`, `links`, and `included` when anything was asked for.
    pub fn list<T>(
        mut self,
        base_url: &str,
        page: Page,
        items: &[T],
        mut render: impl FnMut(&T, &mut Included) -> Value,
    ) -> Doc {
        let data: Vec<Value> = page_slice(items, page)
            .iter()
            .map(|t| render(t, &mut self))
            .collect();
        self.paged(base_url, page, items.len(), data)
    }

    /// 200 with `data`, the `page` of a collection of `total` that the caller rendered
    /// itself (a list it did not hold whole), `meta.pagination`, `links` and `included`.
    pub fn paged(self, base_url: &str, page: Page, total: usize, data: Vec<Value>) -> Doc {
        let (meta, links) = pagination(base_url, page, total);
        self.answer(
            StatusCode::OK,
            json!({"data": data, "meta": meta, "links": links}),
        )
    }

    fn answer(self, status: StatusCode, mut doc: Value) -> Doc {
        if self.any() {
            doc["included"] = Value::Array(self.docs);
        }
        Doc(status, doc)
    }
}

/// `s` percent-encoded for a query string value (RFC 3986 unreserved characters kept).
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// RFC 3339 UTC with milliseconds, as TFE prints timestamps.
pub fn timestamp(t: &jiff::Timestamp) -> String {
    terrace_crds::common::timestamp(t)
}

/// Now, as TFE prints timestamps.
pub fn now() -> String {
    timestamp(&jiff::Timestamp::now())
}

/// An object's creation timestamp as TFE prints it (null without one).
pub fn created_at<K: Resource>(o: &K) -> Value {
    o.meta()
        .creation_timestamp
        .as_ref()
        .map_or(Value::Null, |t| json!(timestamp(&t.0)))
}

/// Objects by age: by creation time, then by name (older first).
pub fn by_creation<K: Resource>(a: &K, b: &K) -> std::cmp::Ordering {
    a.meta()
        .creation_timestamp
        .cmp(&b.meta().creation_timestamp)
        .then_with(|| created_at_ms(a).cmp(&created_at_ms(b)))
        .then_with(|| a.name_any().cmp(&b.name_any()))
}

/// When the API created an object, to the millisecond (`terrace.dev/created-at`, set by
/// [`crate::write::new_meta`]; none for objects written by kubectl).
pub fn created_at_ms<K: Resource>(o: &K) -> Option<&str> {
    o.meta()
        .annotations
        .as_ref()?
        .get(terrace_crds::constants::ANNOTATION_CREATED_AT)
        .map(String::as_str)
}

/// The `terrace.dev/id` label of an object ("" without one).
pub fn id_of<K: Resource>(o: &K) -> String {
    o.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ID))
        .cloned()
        .unwrap_or_default()
}

/// A stable TFE-shaped ID for something derived rather than stored (see
/// [`terrace_crds::ids::stable_id`]).
pub use terrace_crds::ids::stable_id;

/// A to-one relationship: `{"data": {"id": id, "type": kind}}`, or `{"data": null}`.
pub fn to_one(kind: &str, id: Option<&str>) -> Value {
    json!({"data": id.map(|i| json!({"id": i, "type": kind}))})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pagination_meta_matches_tfe() {
        let (meta, links) = pagination(
            "/api/v2/x",
            Page {
                number: 2,
                size: 20,
            },
            45,
        );
        let p = &meta["pagination"];
        assert_eq!(p["current-page"], 2);
        assert_eq!(p["prev-page"], 1);
        assert_eq!(p["next-page"], 3);
        assert_eq!(p["total-pages"], 3);
        assert_eq!(p["total-count"], 45);
        assert_eq!(p["page-size"], 20);
        assert!(
            links["next"]
                .as_str()
                .is_some_and(|l| l.contains("page%5Bnumber%5D=3"))
        );
        let (meta, links) = pagination(
            "/x",
            Page {
                number: 1,
                size: 20,
            },
            0,
        );
        assert_eq!(meta["pagination"]["total-pages"], 1);
        assert_eq!(meta["pagination"]["next-page"], Value::Null);
        assert_eq!(links["prev"], Value::Null);
    }

    #[test]
    fn included_documents_are_there_when_asked_and_once_each() {
        let q = QueryParams::parse(Some("include=workspace,created_by"));
        let inc = Included::asked(&q, &["workspace", "created_by", "plan"]).unwrap();
        assert!(inc.wants("workspace") && !inc.wants("plan"));
        let items = ["a", "b", "c"];
        let doc = inc.list("/x", Page { number: 1, size: 2 }, &items, |i, inc| {
            inc.add(json!({"type": "workspaces", "id": "ws-1"}));
            inc.add(json!({"type": "users", "id": *i}));
            json!({"id": i})
        });
        // The page's two items, the workspace they share once, each creator.
        assert_eq!(doc.1["data"].as_array().unwrap().len(), 2);
        assert_eq!(
            doc.1["included"],
            json!([{"type": "workspaces", "id": "ws-1"}, {"type": "users", "id": "a"}, {"type": "users", "id": "b"}])
        );
        assert_eq!(doc.1["meta"]["pagination"]["total-count"], 3);
        // Asked for, found nothing: an empty `included`; not asked: none.
        let none = Included::asked(&q, &["workspace", "created_by"]).unwrap();
        assert_eq!(
            none.show(StatusCode::OK, json!({})).1["included"],
            json!([])
        );
        let unasked = Included::asked(&QueryParams::parse(None), &["workspace"]).unwrap();
        assert!(
            unasked
                .show(StatusCode::OK, json!({}))
                .1
                .get("included")
                .is_none()
        );
        // An include the endpoint does not offer is 400.
        assert!(Included::asked(&q, &["workspace"]).is_err());
    }

    #[test]
    fn page_slices() {
        let v: Vec<u32> = (0..45).collect();
        assert_eq!(
            page_slice(
                &v,
                Page {
                    number: 3,
                    size: 20
                }
            ),
            &v[40..45]
        );
        assert!(
            page_slice(
                &v,
                Page {
                    number: 9,
                    size: 20
                }
            )
            .is_empty()
        );
    }

    #[test]
    fn relationships_are_never_bare_null() {
        assert_eq!(to_one("projects", None), json!({"data": null}));
        assert_eq!(
            to_one("projects", Some("prj-1")),
            json!({"data": {"id": "prj-1", "type": "projects"}})
        );
    }
}
