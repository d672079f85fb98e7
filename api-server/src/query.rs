//! Query strings: parameters in request order, percent-decoded, with brackets
//! (`page%5Bsize%5D` = `page[size]`); the page request (400 on bad values); `include`
//! values checked against what an endpoint can include and `filter[...]` parameters
//! against what it can filter on (JSON:API: an unsupported one is 400, never silently
//! ignored). [`QueryParams`] is also an extractor.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use terrace_crds::rules::{Page, parse_page};

use crate::ApiError;

/// Query parameters in request order, percent-decoded (`page%5Bsize%5D` = `page[size]`).
#[derive(Clone, Debug, Default)]
pub struct QueryParams(pub Vec<(String, String)>);

/// One page holding all `total` items.
pub fn whole_page(total: usize) -> Page {
    Page {
        number: 1,
        size: u32::try_from(total.max(1)).unwrap_or(u32::MAX),
    }
}

/// `list` for an error message: comma-separated, or "nothing".
fn listed(list: &[&str]) -> String {
    if list.is_empty() {
        "nothing".to_owned()
    } else {
        list.join(", ")
    }
}

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

    /// Keeps the `items` whose name (`name`) contains the value of `key`, in any case,
    /// when the request gives one (TFE's `q` and `search[name]` searches).
    pub fn retain_named<T>(&self, key: &str, items: &mut Vec<T>, name: impl Fn(&T) -> &str) {
        if let Some(text) = self.non_empty(key) {
            let text = text.to_ascii_lowercase();
            items.retain(|t| name(t).to_ascii_lowercase().contains(&text));
        }
    }

    /// The page asked for (400 on bad values); when none is (no `page[number]` nor
    /// `page[size]`), one page of all `total` items: the lists TFE answers whole (run
    /// events, comments, variables, outputs: go-tfe and the CLI read one page, asking none).
    pub fn page_or_whole(&self, total: usize) -> Result<Page, ApiError> {
        let page = self.page()?;
        if self.get("page[number]").is_some() || self.get("page[size]").is_some() {
            return Ok(page);
        }
        Ok(whole_page(total))
    }

    /// The page request (`page[number]`, `page[size]`), 400 on bad values.
    pub fn page(&self) -> Result<Page, ApiError> {
        parse_page(self.get("page[number]"), self.get("page[size]"))
            .map_err(|e| ApiError::bad_parameter(e.attribute, e.to_string()))
    }

    /// Comma-separated `include` values, each one of `allowed` (400 naming `include`
    /// otherwise). An empty value includes nothing: go-tfe sends `include=` when its
    /// options name none.
    pub fn includes(&self, allowed: &[&str]) -> Result<Vec<String>, ApiError> {
        let Some(v) = self.get("include") else {
            return Ok(Vec::new());
        };
        let mut out: Vec<String> = Vec::new();
        for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if !allowed.contains(&s) {
                return Err(ApiError::bad_parameter(
                    "include",
                    format!(
                        "Invalid include parameter: cannot include {s:?}; this endpoint can include: {}",
                        listed(allowed)
                    ),
                ));
            }
            if !out.iter().any(|o| o == s) {
                out.push(s.to_owned());
            }
        }
        Ok(out)
    }

    /// 400 naming the first `filter[...]` parameter whose name does not start with one
    /// of `supported` (e.g. `filter[tagged]`, which covers `filter[tagged][0][key]`).
    pub fn supported_filters(&self, supported: &[&str]) -> Result<(), ApiError> {
        match self
            .0
            .iter()
            .map(|(k, _)| k)
            .find(|k| k.starts_with("filter[") && !supported.iter().any(|s| k.starts_with(s)))
        {
            None => Ok(()),
            Some(k) => Err(ApiError::bad_parameter(
                k.clone(),
                format!(
                    "unsupported filter {k}; this endpoint filters on: {}",
                    listed(supported)
                ),
            )),
        }
    }

    /// The `filter[tagged][i][key]` / `filter[tagged][i][value]` filters, in index order.
    /// go-tfe always sends the value, empty when only a key was given: an empty value
    /// means "this key with any value".
    pub fn tagged(&self) -> Result<Vec<TagFilter>, ApiError> {
        let mut tagged: Vec<(usize, TagFilter)> = Vec::new();
        for (k, v) in &self.0 {
            let Some(rest) = k.strip_prefix("filter[tagged][") else {
                continue;
            };
            let Some((i, field)) = rest.split_once("][") else {
                return Err(ApiError::bad_parameter(
                    k.clone(),
                    format!("bad tag filter {k}"),
                ));
            };
            let Ok(i) = i.parse::<usize>() else {
                return Err(ApiError::bad_parameter(
                    k.clone(),
                    format!("bad filter index in {k}"),
                ));
            };
            let at = match tagged.iter().position(|(j, _)| *j == i) {
                Some(at) => at,
                None => {
                    tagged.push((i, TagFilter::default()));
                    tagged.len() - 1
                }
            };
            let entry = &mut tagged[at].1;
            match field.trim_end_matches(']') {
                "key" => entry.key = Some(v.clone()).filter(|v| !v.is_empty()),
                "value" => entry.value = Some(v.clone()).filter(|v| !v.is_empty()),
                other => {
                    return Err(ApiError::bad_parameter(
                        k.clone(),
                        format!("unsupported tag filter field {other:?}; use key or value"),
                    ));
                }
            }
        }
        tagged.sort_by_key(|(i, _)| *i);
        Ok(tagged.into_iter().map(|(_, f)| f).collect())
    }

    /// A non-empty value of `key`.
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// The comma-separated values of `key` (`filter[status]=planned,applied`), trimmed,
    /// empty ones left out; none when it is not given.
    pub fn values(&self, key: &str) -> Vec<String> {
        self.get(key)
            .map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_owned())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One `filter[tagged][i]`: a key and optionally a value a tag binding must have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagFilter {
    pub key: Option<String>,
    pub value: Option<String>,
}

impl TagFilter {
    /// Whether every filter matches one of `bindings` (key, value).
    pub fn all_match(filters: &[TagFilter], bindings: &[(String, String)]) -> bool {
        filters.iter().all(|f| {
            bindings.iter().any(|(k, v)| {
                f.key.as_ref().is_none_or(|fk| fk == k) && f.value.as_ref().is_none_or(|fv| fv == v)
            })
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(QueryParams::parse(parts.uri.query()))
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
    fn tag_filters_with_an_empty_value_match_any_value() {
        let q = QueryParams::parse(Some(
            "filter%5Btagged%5D%5B0%5D%5Bkey%5D=env&filter%5Btagged%5D%5B0%5D%5Bvalue%5D=",
        ));
        let f = q.tagged().unwrap_or_default();
        assert_eq!(
            f,
            [TagFilter {
                key: Some("env".into()),
                value: None
            }]
        );
        let b = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert!(TagFilter::all_match(&f, &[b("env", "prod")]));
        assert!(TagFilter::all_match(&f, &[b("env", "")]));
        assert!(!TagFilter::all_match(&f, &[b("team", "a")]));
    }

    #[test]
    fn includes_and_filters_are_checked() {
        let q = QueryParams::parse(Some("include=project,organization,project"));
        assert_eq!(
            q.includes(&["organization", "project"]).ok(),
            Some(vec!["project".to_owned(), "organization".to_owned()])
        );
        assert!(q.includes(&["project"]).is_err());
        // An empty include names nothing (issue 42 §6: go-tfe sends `include=`).
        assert_eq!(
            QueryParams::parse(Some("include="))
                .includes(&["project"])
                .ok(),
            Some(Vec::new())
        );
        assert_eq!(
            QueryParams::parse(Some("include=")).includes(&[]).ok(),
            Some(Vec::new())
        );
        assert_eq!(
            QueryParams::parse(Some("include=a,,b"))
                .includes(&["a", "b"])
                .ok(),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert!(
            QueryParams::parse(Some("include=a,c"))
                .includes(&["a", "b"])
                .is_err()
        );
        let q = QueryParams::parse(Some("filter%5Btagged%5D%5B0%5D%5Bkey%5D=env&filter[x]=1"));
        assert!(
            q.supported_filters(&["filter[tagged]", "filter[x]"])
                .is_ok()
        );
        match q.supported_filters(&["filter[tagged]"]) {
            Err(ApiError::BadRequest { parameter, .. }) => {
                assert_eq!(parameter.as_deref(), Some("filter[x]"))
            }
            other => panic!("{other:?}"),
        }
    }
}
