//! Label and field selectors, parsed from the `labelSelector` / `fieldSelector` query
//! parameters of list, watch and deletecollection requests and matched against stored
//! objects.
//!
//! The grammar is the one of k8s.io/apimachinery's `labels.Parse`: comma-separated
//! requirements (AND) of the forms `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k` and `!k`. Field selectors accept `=`, `==` and `!=` on dotted paths
//! (`metadata.name`, `metadata.namespace`, and for convenience any other dotted path).

use crate::status::ApiError;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unexpected )".into());
                }
                cur.push(c);
            }
            ',' if depth == 0 => parts.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    if depth != 0 {
        return Err("unclosed (".into());
    }
    parts.push(cur);
    Ok(parts)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{rest}', expected: '('"))?;
    let vals: Vec<String> = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    for v in &vals {
        if !valid_value(v) {
            return Err(format!("invalid label value: \"{v}\""));
        }
    }
    Ok(vals)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    let p = part.trim();
    if let Some(k) = p.strip_prefix('!') {
        let k = k.trim();
        if !valid_key(k) {
            return Err(format!("invalid label key \"{k}\""));
        }
        return Ok(Requirement {
            key: k.into(),
            op: Op::NotExists,
        });
    }
    for (sep, ctor) in [("!=", 0), ("==", 1), ("=", 1)] {
        if let Some((k, v)) = p.split_once(sep) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) {
                return Err(format!("invalid label key \"{k}\""));
            }
            if !valid_value(v) {
                return Err(format!("invalid label value: \"{v}\""));
            }
            let op = if ctor == 0 {
                Op::NotEq(v.into())
            } else {
                Op::Eq(v.into())
            };
            return Ok(Requirement { key: k.into(), op });
        }
    }
    let mut words = p.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or("").trim();
    let rest = words.next().unwrap_or("").trim();
    if !valid_key(key) {
        return Err(format!("invalid label key \"{key}\""));
    }
    if rest.is_empty() {
        return Ok(Requirement {
            key: key.into(),
            op: Op::Exists,
        });
    }
    if let Some(r) = rest.strip_prefix("notin") {
        return Ok(Requirement {
            key: key.into(),
            op: Op::NotIn(parse_set(r)?),
        });
    }
    if let Some(r) = rest.strip_prefix("in") {
        return Ok(Requirement {
            key: key.into(),
            op: Op::In(parse_set(r)?),
        });
    }
    Err(format!(
        "found '{rest}', expected: in, notin, =, ==, !=, gt, lt"
    ))
}

impl LabelSelector {
    /// Parses a `labelSelector` query value; errors become 400 BadRequest.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        let parts = split_top(s)
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        for part in parts {
            if part.trim().is_empty() {
                continue;
            }
            reqs.push(
                parse_requirement(&part).map_err(|e| {
                    ApiError::bad_request(format!("unable to parse requirement: {e}"))
                })?,
            );
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The requirements that a label have one of some values (`k=v`, `k==v`,
    /// `k in (a,b)`): (key, allowed values). An object matching the selector carries one
    /// of those values, which lets the store read only those objects.
    pub fn value_requirements(&self) -> impl Iterator<Item = (&str, Vec<&str>)> {
        self.reqs.iter().filter_map(|r| match &r.op {
            Op::Eq(v) => Some((r.key.as_str(), vec![v.as_str()])),
            Op::In(vs) => Some((r.key.as_str(), vs.iter().map(String::as_str).collect())),
            _ => None,
        })
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.matches_labels(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Whether labels (`get` answers a key's value) satisfy every requirement.
    pub fn matches_labels<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| match &r.op {
            Op::Eq(v) => get(&r.key) == Some(v.as_str()),
            Op::NotEq(v) => get(&r.key) != Some(v.as_str()),
            Op::In(vs) => get(&r.key).is_some_and(|x| vs.iter().any(|v| v == x)),
            Op::NotIn(vs) => get(&r.key).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Op::Exists => get(&r.key).is_some(),
            Op::NotExists => get(&r.key).is_none(),
        })
    }
}

/// A parsed field selector (`metadata.name=x,metadata.namespace!=y`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<FieldSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{p}'"
                )));
            };
            let k = k.trim();
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            reqs.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// A requirement `metadata.name=x` lets list skip straight to one key.
    pub fn exact_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether an object at `key` (namespace, name) matches, when every requirement is
    /// on `metadata.name` or `metadata.namespace`; `None` when one is on another field.
    pub fn matches_key(&self, key: &(String, String)) -> Option<bool> {
        let mut all = true;
        for (k, eq, v) in &self.reqs {
            let actual = match k.as_str() {
                "metadata.namespace" => &key.0,
                "metadata.name" => &key.1,
                _ => return None,
            };
            all &= (actual == v) == *eq;
        }
        Some(all)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(k, eq, v)| {
            let mut cur = Some(obj);
            for seg in k.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    /// Copies apimachinery labels.Parse: every operator of the selector grammar.
    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).map(|sel| sel.matches(&o));
        assert_eq!(m("app=web"), Ok(true));
        assert_eq!(m("app==web"), Ok(true));
        assert_eq!(m("app!=web"), Ok(false));
        assert_eq!(m("app in (web, db)"), Ok(true));
        assert_eq!(m("app notin (web,db)"), Ok(false));
        assert_eq!(m("missing notin (web)"), Ok(true));
        assert_eq!(m("app"), Ok(true));
        assert_eq!(m("!app"), Ok(false));
        assert_eq!(m("!nope"), Ok(true));
        assert_eq!(m("app=web,tier=back"), Ok(false));
        assert_eq!(m("app=web,tier in (front)"), Ok(true));
        assert_eq!(m(""), Ok(true));
        assert!(m("app in web").is_err());
        assert!(m("a b c").is_err());
    }

    /// Copies apiserver field selectors on metadata.name / metadata.namespace.
    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s).map(|sel| sel.matches(&o));
        assert_eq!(m("metadata.name=a"), Ok(true));
        assert_eq!(m("metadata.name==b"), Ok(false));
        assert_eq!(m("metadata.namespace!=ns"), Ok(false));
        assert_eq!(m("metadata.name=a,metadata.namespace=ns"), Ok(true));
        assert!(m("nonsense").is_err());
    }
}
