//! JSON:API conventions shared by every resource: the media type, error documents, the
//! request-body extractor with its own rejection (so malformed bodies get the API's error
//! format), query-string parameters with brackets, and pagination metadata.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value, json};
use terrace_crds::rules::{Page, parse_page};

use crate::ApiError;

/// The JSON:API media type TFE answers with.
pub const MEDIA_TYPE: &str = "application/vnd.api+json";

/// One JSON:API error object.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorObject {
    pub status: String,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ErrorSource>,
}

/// Where in the request the error is (`/data/attributes/name`) or which query parameter.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorSource {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameter: Option<String>,
}

/// `{"errors": [...]}`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ErrorDocument {
    pub errors: Vec<ErrorObject>,
}

/// A JSON:API response with a status code.
pub struct Doc(pub StatusCode, pub Value);

impl IntoResponse for Doc {
    fn into_response(self) -> Response {
        let bytes = serde_json::to_vec(&self.1).unwrap_or_default();
        (self.0, [(header::CONTENT_TYPE, MEDIA_TYPE)], bytes).into_response()
    }
}

/// A request body parsed as JSON, whatever media type it is labelled with (TFE clients send
/// `application/vnd.api+json`). Malformed bodies are 400 JSON:API errors.
pub struct JsonBody(pub Value);

/// A pre-serialized JSON:API response with a status code.
pub struct DocBytes(pub StatusCode, pub Bytes);

impl IntoResponse for DocBytes {
    fn into_response(self) -> Response {
        (self.0, [(header::CONTENT_TYPE, MEDIA_TYPE)], self.1).into_response()
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // Clients send application/vnd.api+json or application/json; curl's default
        // form type is accepted too, the body being JSON all the same.
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::Status(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large".into(),
                )
            } else {
                ApiError::BadRequest {
                    detail: format!("unreadable body: {e}"),
                    parameter: None,
                }
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest {
                detail: format!("malformed JSON body: {e}"),
                parameter: None,
            })
    }
}

/// `data` of a JSON:API request document, checked to be an object of `expected_type`.
pub fn resource_object<'a>(
    body: &'a Value,
    expected_type: &str,
) -> Result<&'a Map<String, Value>, ApiError> {
    let data = body.get("data").ok_or_else(|| ApiError::Invalid {
        pointer: "/data".into(),
        detail: "the request document needs a data object".into(),
    })?;
    let obj = data.as_object().ok_or_else(|| ApiError::Invalid {
        pointer: "/data".into(),
        detail: "data must be an object".into(),
    })?;
    match obj.get("type").and_then(Value::as_str) {
        Some(t) if t == expected_type => Ok(obj),
        Some(t) => Err(ApiError::Invalid {
            pointer: "/data/type".into(),
            detail: format!("type must be {expected_type:?}, got {t:?}"),
        }),
        None => Err(ApiError::Invalid {
            pointer: "/data/type".into(),
            detail: format!("type is required and must be {expected_type:?}"),
        }),
    }
}

/// `data.attributes` (an empty map when absent).
pub fn attributes(obj: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    match obj.get("attributes") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(ApiError::Invalid {
            pointer: "/data/attributes".into(),
            detail: "attributes must be an object".into(),
        }),
    }
}

/// Query parameters in request order, percent-decoded (`page%5Bsize%5D` = `page[size]`).
#[derive(Clone, Debug, Default)]
pub struct QueryParams(pub Vec<(String, String)>);

impl QueryParams {
    pub fn parse(raw: Option<&str>) -> QueryParams {
        let raw = raw.unwrap_or("");
        QueryParams(
            raw.split('&')
                .filter(|s| !s.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    /// The last value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The page request (`page[number]`, `page[size]`), 400 on bad values.
    pub fn page(&self) -> Result<Page, ApiError> {
        parse_page(self.get("page[number]"), self.get("page[size]")).map_err(|e| {
            ApiError::BadRequest {
                detail: e.to_string(),
                parameter: Some(e.attribute.to_owned()),
            }
        })
    }

    /// Comma-separated `include` values.
    pub fn includes(&self) -> Vec<String> {
        self.get("include")
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

/// RFC 3339 UTC with milliseconds, as TFE prints timestamps.
pub fn timestamp(t: &jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_percent_decoded() {
        let q = QueryParams::parse(Some("page%5Bsize%5D=5&search%5Bname%5D=a+b&x=%zz"));
        assert_eq!(q.get("page[size]"), Some("5"));
        assert_eq!(q.get("search[name]"), Some("a b"));
        assert_eq!(q.get("x"), Some("%zz"));
        assert_eq!(q.page().map(|p| p.size).ok(), Some(5));
    }

    #[test]
    fn bad_page_values_are_400_with_the_parameter() {
        for raw in ["page%5Bsize%5D=-1", "page[number]=abc", "page[number]=0"] {
            match QueryParams::parse(Some(raw)).page() {
                Err(ApiError::BadRequest {
                    parameter: Some(p), ..
                }) => assert!(p.starts_with("page["), "{p}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

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
    fn resource_object_checks_type() {
        let body = json!({"data": {"type": "projects"}});
        assert!(matches!(
            resource_object(&body, "workspaces"),
            Err(ApiError::Invalid { .. })
        ));
        assert!(resource_object(&json!({"data": {"type": "workspaces"}}), "workspaces").is_ok());
        assert!(resource_object(&json!({}), "workspaces").is_err());
        assert!(resource_object(&json!({"data": []}), "workspaces").is_err());
    }
}
