//! Object metadata rules shared by every write path: the name rules kinds choose from
//! ([`crate::kinds::KindBehaviour::validate_name`]), generated names, timestamps,
//! `managedFields` entries and the comparison that decides `generation` bumps.

use crate::status::{ApiError, ApiResult};
use rand::Rng;
use serde_json::{Map, Value, json};

/// The strings of a JSON array (other items skipped); empty when `v` is not an array.
pub fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// RFC 3339, seconds precision, UTC with `Z`, as metav1.Time serializes.
pub fn now_rfc3339() -> String {
    let ts = jiff::Timestamp::now();
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `RFC3339` form of now plus `secs` seconds.
pub fn rfc3339_in(secs: i64) -> String {
    let ts = jiff::Timestamp::now();
    let ts = ts
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or(ts);
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The 5-character suffix of `metadata.generateName` (apiserver's `SimpleNameGenerator`).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label)
}

/// `metadata.name` as a DNS-1123 subdomain (most kinds); the field error on failure.
pub fn validate_subdomain_name(name: &str) -> Option<String> {
    if !is_dns1123_subdomain(name) {
        let extra = if name.len() > 253 {
            "must be no more than 253 characters"
        } else {
            DNS1123_SUBDOMAIN_MSG
        };
        return Some(format!("metadata.name: Invalid value: \"{name}\": {extra}"));
    }
    None
}

/// `metadata.name` as a DNS-1123 label (Namespaces); the field error on failure.
pub fn validate_label_name(name: &str) -> Option<String> {
    if !is_label(name) {
        let extra = if name.len() > 63 {
            "must be no more than 63 characters".to_string()
        } else {
            DNS1123_LABEL_MSG.to_string()
        };
        return Some(format!("metadata.name: Invalid value: \"{name}\": {extra}"));
    }
    None
}

/// `metadata.name` as a path segment (RBAC objects: `system:controller:foo` is valid);
/// the field error on failure.
pub fn validate_path_segment_name(name: &str) -> Option<String> {
    if name == "." || name == ".." {
        return Some(format!(
            "metadata.name: Invalid value: \"{name}\": may not be '{name}'"
        ));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            return Some(format!(
                "metadata.name: Invalid value: \"{name}\": may not contain '{bad}'"
            ));
        }
    }
    None
}

/// The part of an object that a generation bump looks at: everything but `metadata`,
/// and but `status` when the kind has a status subresource.
pub fn spec_part(obj: &Value, status_subresource: bool) -> Map<String, Value> {
    let mut m = obj.as_object().cloned().unwrap_or_default();
    m.remove("metadata");
    m.remove("apiVersion");
    m.remove("kind");
    if status_subresource {
        m.remove("status");
    }
    m
}

/// Records a write by `manager` in `metadata.managedFields`: one entry per
/// (manager, operation, subresource), with `fieldsV1` left empty.
pub fn record_manager(
    obj: &mut Value,
    manager: &str,
    operation: &str,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut entries: Vec<Value> = meta
        .get("managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    entries.retain(|e| {
        !(e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some(operation)
            && e.get("subresource").and_then(Value::as_str) == subresource)
    });
    let mut entry = json!({
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": {},
    });
    if let Some(sub) = subresource {
        entry["subresource"] = json!(sub);
    }
    entries.push(entry);
    meta.insert("managedFields".into(), Value::Array(entries));
}

/// The default field manager kube-apiserver derives from the User-Agent: its part
/// before the first `/`.
pub fn manager_from_user_agent(ua: Option<&str>) -> String {
    let ua = ua.unwrap_or("unknown");
    let m = ua.split('/').next().unwrap_or(ua);
    if m.is_empty() {
        "unknown".into()
    } else {
        m.chars().take(128).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies apimachinery's IsDNS1123Subdomain.
    #[test]
    fn subdomain_names() {
        assert!(is_dns1123_subdomain("a.b-c.d"));
        assert!(!is_dns1123_subdomain("bad name!"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(!is_dns1123_subdomain("A"));
        assert!(!is_dns1123_subdomain(""));
    }

    /// Copies names.SimpleNameGenerator's alphabet and length.
    #[test]
    fn suffix_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    /// Copies the apiserver's default field manager from `kubectl/v1.32 (...)`.
    #[test]
    fn manager_from_ua() {
        assert_eq!(
            manager_from_user_agent(Some("kubectl/v1.32.4 (linux/amd64)")),
            "kubectl"
        );
        assert_eq!(manager_from_user_agent(None), "unknown");
    }
}

/// DeleteOptions from the query string and the body.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

pub(crate) fn meta_of(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_mut(obj: &mut Value) -> ApiResult<&mut Map<String, Value>> {
    let m = obj
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the object must be a JSON object"))?;
    let meta = m.entry("metadata").or_insert_with(|| json!({}));
    if meta.is_null() {
        *meta = json!({});
    }
    meta.as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be a JSON object"))
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    string_list(meta_of(obj).and_then(|m| m.get("finalizers")))
}
