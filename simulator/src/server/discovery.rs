//! The discovery documents: `/version`, the API group and resource lists, and the OpenAPI
//! v2/v3 documents in JSON or protobuf.

use super::*;

pub(super) fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}

pub(super) fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(json!({})),
    })
}

pub(super) fn group_list(shared: &Shared) -> Value {
    let groups: Vec<Value> = shared.read(|st| {
        let registered = st.registry.groups();
        let reviews = crate::access::REVIEW_GROUPS
            .iter()
            .filter(|g| !registered.iter().any(|(r, _)| r == *g))
            .map(|g| group_entry(g, &["v1".to_string()]));
        registered
            .iter()
            .filter(|(g, _)| !g.is_empty())
            .map(|(g, vs)| group_entry(g, vs))
            .chain(reviews)
            .collect()
    });
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(super) fn group_doc(shared: &Shared, group: &str) -> Option<Value> {
    let review_versions = ["v1".to_string()];
    shared.read(|st| {
        let vs = match st.registry.versions(group) {
            Some(vs) => vs,
            None if crate::access::REVIEW_GROUPS.contains(&group) => &review_versions[..],
            None => return None,
        };
        let mut g = group_entry(group, vs);
        g["kind"] = json!("APIGroup");
        g["apiVersion"] = json!("v1");
        Some(g)
    })
}

pub(super) fn resource_list(shared: &Shared, group: &str, version: &str) -> Option<Value> {
    shared.read(|st| {
        let infos = st.registry.resources_of(group, version);
        let reviews = crate::access::discovery_resources(group, version);
        if infos.is_empty() && reviews.is_empty() && !(group.is_empty() && version == "v1") {
            return None;
        }
        let mut resources = reviews;
        for i in &infos {
            let mut r = json!({
                "name": i.plural,
                "singularName": i.singular,
                "namespaced": i.namespaced,
                "kind": i.kind,
                // The kind's own verbs (a custom resource's: all of them).
                "verbs": crate::kinds::of(i).verbs(),
            });
            if !i.short_names.is_empty() {
                r["shortNames"] = json!(i.short_names);
            }
            if !i.categories.is_empty() {
                r["categories"] = json!(i.categories);
            }
            resources.push(r);
            for sub in crate::kinds::of(i).read_subresources() {
                resources.push(json!({
                    "name": format!("{}/{sub}", i.plural),
                    "singularName": "",
                    "namespaced": i.namespaced,
                    "kind": i.kind,
                    "verbs": ["get"],
                }));
            }
            if i.status_subresource {
                resources.push(json!({
                    "name": format!("{}/status", i.plural),
                    "singularName": "",
                    "namespaced": i.namespaced,
                    "kind": i.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
    })
}

/// `/openapi/v2` and `/openapi/v3/...`, in the media type the Accept header picks
/// ([`crate::openapi::negotiate`]): JSON, or the v2 document as protobuf; 406 (empty, as
/// kube-openapi answers) when none is acceptable, 404 for a group version not served.
pub(super) fn openapi(shared: &Shared, rest: &[&str], headers: &HeaderMap) -> ApiResult<Response> {
    use crate::openapi::{V2_MEDIA_TYPES, V3_MEDIA_TYPES, negotiate, v2proto};
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let offers = if rest.first() == Some(&"v2") {
        V2_MEDIA_TYPES
    } else {
        V3_MEDIA_TYPES
    };
    let all = shared.read(|st| st.registry.all());
    let doc = match rest {
        ["v2"] => Some(crate::openapi::v2_document(&all)),
        ["v3"] => Some(crate::openapi::v3_index(&all)),
        ["v3", "api", v] => crate::openapi::v3_group_version("", v, &all),
        ["v3", "apis", g, v] => crate::openapi::v3_group_version(g, v, &all),
        _ => None,
    };
    let Some(doc) = doc else {
        return Err(ApiError::page_not_found());
    };
    match negotiate(accept, offers) {
        Some("application/json") => {
            let mut r = json_response(StatusCode::OK, &doc, &[]);
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept"));
            Ok(r)
        }
        Some(_) => Ok((
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, v2proto::MEDIA_TYPE_DOTTED),
                (header::VARY, "Accept"),
            ],
            v2proto::encode(&doc),
        )
            .into_response()),
        None => Ok((StatusCode::NOT_ACCEPTABLE, [(header::VARY, "Accept")]).into_response()),
    }
}
