//! The HTTP face of the simulator: routing, authentication and authorization, discovery,
//! OpenAPI, and the REST verbs' request parsing and response encoding.
//!
//! A request flows: [`auth_layer`] (who is calling — bearer token, then `Impersonate-*`
//! headers — and may they do this, by RBAC through [`crate::access`]) → [`dispatch`]
//! (path → resource, verb from method and query) → the verb's function in
//! [`crate::rest`] under the store lock → JSON (or a Table when the Accept header asks
//! for `as=Table`), with `Warning` headers where the apiserver would send them. Watches
//! hand their body to [`crate::watch`]; the create-only review endpoints (TokenRequest,
//! TokenReview, access reviews) are answered by [`crate::access`].

use crate::Shared;
use crate::auth::{Attributes, UserInfo};
use crate::meta::DeleteOpts;
use crate::patch::PatchType;
use crate::resource::ResourceInfo;
use crate::resource::in_version;
use crate::rest::{self, FieldValidation, ListOpts, WriteOpts, WriteResult};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

mod authn;
mod discovery;
mod options;
pub use authn::authenticate;
pub use authn::authorize;
use authn::*;
use discovery::*;
pub(crate) use options::parse_body;
use options::*;

/// The Kubernetes version the simulator reports.
pub const GIT_VERSION: &str = "v1.33.0-terrace-sim";

/// The whole HTTP API.
///
/// `loopback_admin` copies the old kube-apiserver insecure port for plain-HTTP serving:
/// client-go (so kubectl) never sends a kubeconfig's bearer token over plain HTTP, so a
/// request arriving from a loopback peer *without* an Authorization header is treated as
/// the admin user. A request that carries a token is still authenticated by it.
pub fn router(shared: Arc<Shared>, loopback_admin: bool) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(axum::middleware::from_fn_with_state(
            (shared.clone(), loopback_admin),
            auth_layer,
        ))
        .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(shared)
}

fn json_response(code: StatusCode, body: &Value, warnings: &[String]) -> Response {
    json_text(code, body.to_string(), warnings)
}

fn json_text(code: StatusCode, body: String, warnings: &[String]) -> Response {
    let mut resp = (code, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("Warning", v);
        }
    }
    resp
}

/// How a response body is rendered.
#[derive(Clone, Copy)]
enum Format {
    Json,
    Table(crate::table::IncludeObject),
}

fn format_of(headers: &HeaderMap, query: &HashMap<String, String>) -> ApiResult<Format> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // The first acceptable media type wins, as in the apiserver's negotiation.
    for part in accept.split(',') {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        let media = params.first().copied().unwrap_or("");
        if media != "application/json" && media != "*/*" {
            continue;
        }
        if params.contains(&"as=Table") {
            let include = crate::table::IncludeObject::parse(
                query.get("includeObject").map(String::as_str).unwrap_or(""),
            )
            .map_err(ApiError::bad_request)?;
            return Ok(Format::Table(include));
        }
        return Ok(Format::Json);
    }
    Ok(Format::Json)
}

fn table(
    info: &ResourceInfo,
    items: &[Value],
    list_meta: Value,
    include: crate::table::IncludeObject,
) -> Value {
    crate::table::to_table(info, items, list_meta, include, jiff::Timestamp::now())
}

/// A parsed resource path.
struct Target {
    info: Arc<ResourceInfo>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

async fn dispatch(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    match dispatch_inner(shared, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn dispatch_inner(shared: Arc<Shared>, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match segs.as_slice() {
        ["version"] => return Ok(json_response(StatusCode::OK, &version_info(), &[])),
        ["healthz"] | ["readyz"] | ["livez"] => {
            return Ok(
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response(),
            );
        }
        ["healthz", ..] | ["readyz", ..] | ["livez", ..] => {
            return Ok(
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response(),
            );
        }
        ["openapi", ..] => return openapi(&shared, &segs[1..], &parts.headers),
        ["api"] => {
            return Ok(json_response(
                StatusCode::OK,
                &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
                &[],
            ));
        }
        ["apis"] => return Ok(json_response(StatusCode::OK, &group_list(&shared), &[])),
        _ => {}
    }
    if let Some(review) = crate::access::review_route(&segs) {
        return review_request(&shared, &review, parts, body).await;
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g] => {
            return match group_doc(&shared, g) {
                Some(d) => Ok(json_response(StatusCode::OK, &d, &[])),
                None => Err(ApiError::page_not_found()),
            };
        }
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return Err(ApiError::page_not_found()),
    };
    if rest.is_empty() {
        return match resource_list(&shared, group, version) {
            Some(d) => Ok(json_response(StatusCode::OK, &d, &[])),
            None => Err(ApiError::page_not_found()),
        };
    }
    let mut rest = rest;
    let mut namespace = None;
    if rest[0] == "namespaces" && rest.len() >= 3 && !matches!(rest[2], "status" | "finalize") {
        namespace = Some(rest[1].to_string());
        rest = &rest[2..];
    }
    let info = shared
        .read(|st| st.registry.get(group, version, rest[0]))
        .ok_or_else(ApiError::page_not_found)?;
    if rest.len() > 3 {
        return Err(ApiError::page_not_found());
    }
    if namespace.is_some() && !info.namespaced {
        return Err(ApiError::page_not_found());
    }
    let target = Target {
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
        info,
    };
    let kind = crate::kinds::of(&target.info);
    let read_sub = target
        .subresource
        .as_deref()
        .filter(|s| kind.read_subresources().contains(s));
    if let Some(sub) = &target.subresource
        && !(sub == "status" && target.info.status_subresource)
        && read_sub.is_none()
    {
        return Err(ApiError::page_not_found());
    }
    let query = query_map(&parts.uri)?;
    if let Some(sub) = read_sub {
        if parts.method != Method::GET {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )
            .with_details(json!({})));
        }
        let name = target.name.as_deref().unwrap_or("");
        let obj =
            shared.read(|st| rest::get(st, &target.info, target.namespace.as_deref(), name))?;
        return kind.get_subresource(&shared, sub, obj, &query);
    }
    let body = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
    resource_request(shared, target, parts.method, parts.headers, query, body).await
}

/// A create-only review endpoint (TokenRequest, TokenReview, access reviews): POST only,
/// answered 201 Created with the request echoed and its `status` filled in.
async fn review_request(
    shared: &Shared,
    review: &crate::access::Review,
    parts: http::request::Parts,
    body: Body,
) -> ApiResult<Response> {
    if parts.method != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({})));
    }
    let body = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
    let request = parse_body(&parts.headers, &body)?;
    let anonymous = UserInfo::anonymous();
    let user = parts.extensions.get::<UserInfo>().unwrap_or(&anonymous);
    let response = crate::access::handle_review(shared, review, user, &request)?;
    Ok(json_response(StatusCode::CREATED, &response, &[]))
}

fn write_response(info: &ResourceInfo, r: WriteResult, fmt: Format) -> Response {
    let code = if r.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = match fmt {
        Format::Json => r.object,
        Format::Table(inc) => table(info, std::slice::from_ref(&r.object), json!({}), inc),
    };
    json_response(code, &body, &r.warnings)
}

async fn resource_request(
    shared: Arc<Shared>,
    t: Target,
    method: Method,
    headers: HeaderMap,
    q: HashMap<String, String>,
    body: Bytes,
) -> ApiResult<Response> {
    let info = t.info.clone();
    let ns = t.namespace.as_deref();
    let fmt = format_of(&headers, &q)?;
    let sub = t.subresource.as_deref();
    match (&method, &t.name) {
        (&Method::GET, None) => {
            let opts = list_opts(&q)?;
            if truthy(&q, "watch") {
                return watch(shared, &t, &q, opts, fmt);
            }
            let page = shared.read(|st| rest::list(st, &info, ns, &opts))?;
            Ok(list_response(&info, page, fmt))
        }
        (&Method::GET, Some(name)) => {
            let stored = shared.read(|st| rest::get_stored(st, &info, ns, name))?;
            if matches!(fmt, Format::Json) && stored.has_api_version(&info.api_version()) {
                return Ok(json_text(StatusCode::OK, stored.text().into_owned(), &[]));
            }
            let obj = in_version(&stored.value(), &info);
            let body = match fmt {
                Format::Json => obj,
                Format::Table(inc) => table(&info, std::slice::from_ref(&obj), json!({}), inc),
            };
            Ok(json_response(StatusCode::OK, &body, &[]))
        }
        (&Method::POST, None) => {
            let opts = write_opts(&headers, &q)?;
            let obj = parse_body(&headers, &body)?;
            let r = shared
                .write_durably(|st| rest::create(st, &info, ns, obj, &opts, "Update"))
                .await?;
            Ok(write_response(&info, r, fmt))
        }
        (&Method::PUT, Some(name)) => {
            let opts = write_opts(&headers, &q)?;
            let obj = parse_body(&headers, &body)?;
            let r = shared
                .write_durably(|st| rest::update(st, &info, ns, name, obj, &opts, sub))
                .await?;
            Ok(write_response(&info, r, fmt))
        }
        (&Method::PATCH, Some(name)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            let kind = PatchType::from_content_type(ct).ok_or_else(|| {
                ApiError::unsupported_media_type(format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                    if crate::kinds::of(&info).write_rules().strategic_merge { ", application/strategic-merge-patch+json" } else { "" }
                ))
            })?;
            let opts = write_opts(&headers, &q)?;
            if kind != PatchType::Apply && q.contains_key("force") {
                return Err(ApiError::bad_request(
                    "force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            let r = shared
                .write_durably(|st| rest::patch(st, &info, ns, name, kind, &body, &opts, sub))
                .await?;
            Ok(write_response(&info, r, fmt))
        }
        (&Method::DELETE, Some(name)) if sub.is_none() => {
            let opts = delete_opts(&q, &body)?;
            let obj = shared
                .write_durably(|st| rest::delete(st, &info, ns, name, &opts))
                .await?;
            Ok(json_response(StatusCode::OK, &obj, &[]))
        }
        (&Method::DELETE, None) => {
            let lo = list_opts(&q)?;
            let opts = delete_opts(&q, &body)?;
            let items = shared
                .write_durably(|st| rest::delete_collection(st, &info, ns, &lo, &opts))
                .await?;
            let rv = shared.read(|st| st.rv.to_string());
            Ok(json_response(
                StatusCode::OK,
                &json!({"apiVersion": info.api_version(), "kind": info.list_kind, "metadata": {"resourceVersion": rv}, "items": items}),
                &[],
            ))
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))),
    }
}

fn list_response(info: &ResourceInfo, page: rest::ListPage, fmt: Format) -> Response {
    let mut meta = json!({"resourceVersion": page.resource_version});
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(r) = page.remaining {
        meta["remainingItemCount"] = json!(r);
    }
    match fmt {
        Format::Table(inc) => {
            let items: Vec<Value> = page
                .items
                .iter()
                .map(|(_, o)| in_version(&o.value(), info))
                .collect();
            json_response(StatusCode::OK, &table(info, &items, meta, inc), &[])
        }
        Format::Json => {
            // Serialized item by item: no deep copy of the store's objects.
            let api_version = info.api_version();
            let mut out = String::with_capacity(64 + page.items.len() * 512);
            out.push_str(&format!(
                "{{\"apiVersion\":{},\"kind\":{},\"metadata\":{},\"items\":[",
                json!(api_version),
                json!(info.list_kind),
                meta
            ));
            for (i, (_, o)) in page.items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if o.has_api_version(&api_version) {
                    out.push_str(&o.text());
                } else {
                    out.push_str(&in_version(&o.value(), info).to_string());
                }
            }
            out.push_str("]}");
            json_text(StatusCode::OK, out, &[])
        }
    }
}

fn watch(
    shared: Arc<Shared>,
    t: &Target,
    q: &HashMap<String, String>,
    opts: ListOpts,
    fmt: Format,
) -> ApiResult<Response> {
    let rv = crate::watch::parse_rv(q.get("resourceVersion").map(String::as_str))?;
    let timeout = match q.get("timeoutSeconds") {
        Some(s) if !s.is_empty() => Duration::from_secs(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {s}")))?,
        ),
        _ => Duration::from_secs(1800),
    };
    let info = t.info.clone();
    let output = match fmt {
        Format::Json => {
            let info2 = info.clone();
            crate::watch::Output::Json(
                info.api_version(),
                Arc::new(move |o: &Value| in_version(o, &info2)),
            )
        }
        Format::Table(inc) => {
            let info = info.clone();
            crate::watch::Output::Rendered(Arc::new(move |o: &Value| {
                let obj = in_version(o, &info);
                table(&info, std::slice::from_ref(&obj), json!({}), inc)
            }))
        }
    };
    let p = crate::watch::WatchParams {
        info,
        namespace: t.namespace.clone(),
        label: opts.label,
        field: opts.field,
        resource_version: rv,
        send_initial_events: truthy(q, "sendInitialEvents"),
        bookmarks: truthy(q, "allowWatchBookmarks"),
        timeout,
        output,
    };
    let body: Body = crate::watch::start(shared, p);
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        body,
    )
        .into_response())
}
