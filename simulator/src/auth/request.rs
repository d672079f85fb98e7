//! From an HTTP request line to the authorizer's [`Attributes`], copying apiserver's
//! `RequestInfoFactory` (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`):
//! `/api/v1/...` and `/apis/<group>/<version>/...` are resource requests, everything else
//! (discovery roots, `/version`, `/openapi/v3`, `/healthz`) non-resource; GET without a
//! name is `list` (or `watch` with `?watch=true`), DELETE without a name
//! `deletecollection`, and `/watch/` path prefixes still work.

use super::percent_decode;
use super::rbac::Attributes;

/// The authorization attributes of `method path?query` (`query` without the `?`).
pub fn request_attributes(method: &str, path: &str, query: Option<&str>) -> Attributes {
    let lower_method = method.to_ascii_lowercase();
    let non_resource = Attributes::non_resource(&lower_method, path);
    let mut parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    if parts.len() < 3 {
        return non_resource;
    }
    let api_group = match parts[0] {
        "api" => {
            parts.remove(0);
            String::new()
        }
        "apis" => {
            if parts.len() < 4 {
                return non_resource;
            }
            parts.remove(0);
            parts.remove(0).to_string()
        }
        _ => return non_resource,
    };
    parts.remove(0); // version

    let mut verb = match method.to_ascii_uppercase().as_str() {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
    .to_string();
    if matches!(parts.first(), Some(&"watch") | Some(&"proxy")) {
        if parts.len() < 2 {
            // Real apiserver fails such a request; treat it as the non-resource path.
            return non_resource;
        }
        verb = parts.remove(0).to_string();
    }

    let mut namespace = String::new();
    if parts.first() == Some(&"namespaces") && parts.len() > 1 {
        namespace = parts[1].to_string();
        if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
            parts.drain(..2);
        }
    }

    let mut attrs = Attributes {
        verb: String::new(),
        api_group,
        namespace,
        resource_request: true,
        ..Attributes::default()
    };
    if let Some(resource) = parts.first() {
        attrs.resource = resource.to_string();
    }
    if let Some(name) = parts.get(1) {
        attrs.name = name.to_string();
    }
    if parts.len() >= 3 && verb != "proxy" {
        attrs.subresource = parts[2].to_string();
    }

    let params: Vec<(String, String)> = query
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            Some((percent_decode(k, true)?, percent_decode(v, true)?))
        })
        .collect();
    let param = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };

    if attrs.name.is_empty() && verb == "get" {
        let watch = param("watch")
            .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"));
        verb = if watch { "watch" } else { "list" }.to_string();
        if let Some(name) = param("fieldSelector").and_then(exact_name) {
            attrs.name = name;
        }
    }
    if attrs.name.is_empty() && verb == "delete" {
        verb = "deletecollection".to_string();
    }
    attrs.verb = verb;
    attrs
}

/// `fieldSelector.RequiresExactMatch("metadata.name")` for a valid path segment name.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        let valid = !value.is_empty()
            && value != "."
            && value != ".."
            && !value.contains('/')
            && !value.contains('%');
        valid.then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes::resource(verb, group, resource, ns, name).with_subresource(sub)
    }

    /// Copies apiserver `RequestInfoFactory`: core and group paths, namespaced and
    /// cluster-scoped, names and subresources, HTTP method to verb.
    #[test]
    fn resource_requests() {
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/acme/pods/p1",
                None,
                attrs("get", "", "pods", "", "acme", "p1"),
            ),
            (
                "GET",
                "/api/v1/namespaces/acme/pods",
                None,
                attrs("list", "", "pods", "", "acme", ""),
            ),
            (
                "GET",
                "/api/v1/pods",
                None,
                attrs("list", "", "pods", "", "", ""),
            ),
            (
                "GET",
                "/api/v1/namespaces/acme/pods/p1/log",
                None,
                attrs("get", "", "pods", "log", "acme", "p1"),
            ),
            (
                "POST",
                "/apis/terrace.dev/v1alpha1/namespaces/acme/workspaces",
                None,
                attrs("create", "terrace.dev", "workspaces", "", "acme", ""),
            ),
            (
                "PUT",
                "/apis/terrace.dev/v1alpha1/namespaces/acme/workspaces/w/status",
                None,
                attrs("update", "terrace.dev", "workspaces", "status", "acme", "w"),
            ),
            (
                "PATCH",
                "/apis/terrace.dev/v1alpha1/organizations/o",
                None,
                attrs("patch", "terrace.dev", "organizations", "", "", "o"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/acme/pods/p1",
                None,
                attrs("delete", "", "pods", "", "acme", "p1"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/acme/pods",
                None,
                attrs("deletecollection", "", "pods", "", "acme", ""),
            ),
            (
                "POST",
                "/api/v1/namespaces/acme/serviceaccounts/sa/token",
                None,
                attrs("create", "", "serviceaccounts", "token", "acme", "sa"),
            ),
            (
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                None,
                attrs(
                    "create",
                    "authorization.k8s.io",
                    "selfsubjectaccessreviews",
                    "",
                    "",
                    "",
                ),
            ),
        ];
        for (method, path, query, expected) in cases {
            assert_eq!(
                request_attributes(method, path, query),
                expected,
                "{method} {path}"
            );
        }
    }

    /// Copies apiserver `RequestInfoFactory`: a Namespace object's own path puts its name
    /// in both namespace and name, and `namespaces/x/status` is its subresource.
    #[test]
    fn namespace_paths() {
        assert_eq!(
            request_attributes("GET", "/api/v1/namespaces/acme", None),
            attrs("get", "", "namespaces", "", "acme", "acme")
        );
        assert_eq!(
            request_attributes("PUT", "/api/v1/namespaces/acme/finalize", None),
            attrs("update", "", "namespaces", "finalize", "acme", "acme")
        );
        assert_eq!(
            request_attributes("GET", "/api/v1/namespaces", None),
            attrs("list", "", "namespaces", "", "", "")
        );
    }

    /// Copies apiserver `RequestInfoFactory`: `?watch=true` and `/watch/` make `watch`;
    /// `watch=false`/`0` stay `list`; a `metadata.name` field selector names the object.
    #[test]
    fn watch_and_field_selector() {
        let p = "/apis/terrace.dev/v1alpha1/namespaces/acme/workspaces";
        assert_eq!(
            request_attributes("GET", p, Some("watch=true")).verb,
            "watch"
        );
        assert_eq!(
            request_attributes("GET", p, Some("watch=1&resourceVersion=5")).verb,
            "watch"
        );
        assert_eq!(
            request_attributes("GET", p, Some("watch=false")).verb,
            "list"
        );
        assert_eq!(request_attributes("GET", p, Some("watch=0")).verb, "list");
        assert_eq!(
            request_attributes("GET", "/api/v1/watch/namespaces/acme/pods", None),
            attrs("watch", "", "pods", "", "acme", "")
        );
        let named =
            request_attributes("GET", p, Some("fieldSelector=metadata.name%3Dws-1&watch=1"));
        assert_eq!(
            (named.verb.as_str(), named.name.as_str()),
            ("watch", "ws-1")
        );
        let bad = request_attributes("GET", p, Some("fieldSelector=metadata.name%3Da%2Fb"));
        assert_eq!(bad.name, "");
    }

    /// Copies apiserver `RequestInfoFactory`: discovery roots and other paths are
    /// non-resource requests with the lower-cased method as verb.
    #[test]
    fn non_resource_requests() {
        for path in [
            "/api",
            "/api/",
            "/apis",
            "/apis/terrace.dev",
            "/version",
            "/openapi/v3",
            "/healthz",
            "/",
            "/x/y/z",
        ] {
            let a = request_attributes("GET", path, None);
            assert!(!a.resource_request, "{path}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", path));
        }
        // Group-version discovery is non-resource too (covered by `/api/*`, `/apis/*`).
        assert!(!request_attributes("GET", "/api/v1", None).resource_request);
        assert!(!request_attributes("GET", "/apis/terrace.dev/v1alpha1", None).resource_request);
    }
}
