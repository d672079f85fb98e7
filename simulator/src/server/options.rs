//! A request's options from its query string, headers and body: the query map,
//! `fieldValidation`/`dryRun` write options, list options, DeleteOptions, and body decoding
//! by Content-Type.

use super::*;

pub(super) fn query_map(uri: &http::Uri) -> ApiResult<HashMap<String, String>> {
    let Some(q) = uri.query() else {
        return Ok(HashMap::new());
    };
    let pairs: Vec<(String, String)> = serde_urlencoded_pairs(q)?;
    Ok(pairs.into_iter().collect())
}

pub(super) fn serde_urlencoded_pairs(q: &str) -> ApiResult<Vec<(String, String)>> {
    let uri: http::Uri = format!("/?{q}")
        .parse()
        .map_err(|_| ApiError::bad_request("malformed query string"))?;
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("malformed query string: {e}")))
}
pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(hex) = std::str::from_utf8(&b[i + 1..i + 3])
            && let Ok(v) = u8::from_str_radix(hex, 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

pub(super) fn write_opts(headers: &HeaderMap, q: &HashMap<String, String>) -> ApiResult<WriteOpts> {
    let given = q.get("fieldManager").filter(|m| !m.is_empty()).cloned();
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    Ok(WriteOpts {
        dry_run: q.get("dryRun").is_some_and(|v| v == "All"),
        field_manager_given: given.is_some(),
        field_manager: given.unwrap_or_else(|| crate::meta::manager_from_user_agent(ua)),
        field_validation: FieldValidation::parse(q.get("fieldValidation").map(String::as_str))?,
    })
}

pub(super) fn list_opts(q: &HashMap<String, String>) -> ApiResult<ListOpts> {
    Ok(ListOpts {
        label: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        field: FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))?,
        limit: match q.get("limit") {
            Some(l) if !l.is_empty() => Some(
                l.parse::<usize>()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?,
            ),
            _ => None,
        },
        continue_token: q.get("continue").cloned(),
    })
}

pub(super) fn delete_opts(q: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = crate::patch::parse_json(body)?;
        o.grace_period = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.propagation = v
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            o.propagation = Some("Orphan".into());
        }
        o.precondition_uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.precondition_rv = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.dry_run = v
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        o.grace_period = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g}")))?,
        );
    }
    if let Some(p) = q.get("propagationPolicy") {
        o.propagation = Some(p.clone());
    }
    if q.get("dryRun").is_some_and(|v| v == "All") {
        o.dry_run = true;
    }
    Ok(o)
}

/// Decodes a create/update body by its Content-Type: JSON, YAML, or protobuf for the
/// built-in kinds [`crate::protobuf`] knows (others 415); CBOR is not supported (415, as
/// a server without that serializer answers).
pub(crate) fn parse_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = ct.split(';').next().unwrap_or("").trim();
    match media {
        "application/json" | "" | "*/*" => crate::patch::parse_json(body),
        "application/yaml" => crate::patch::parse_yaml_or_json(body),
        crate::protobuf::MEDIA_TYPE => Ok(crate::protobuf::decode(body)?),
        _ => Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {media})"
        ))),
    }
}
