//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: a container's stdout and stderr as
//! the kubelet serves them through the API server — the file the simulated node
//! captured, with `container`, `tailLines`, `limitBytes`, `previous` and `follow`.

use crate::Shared;
use crate::status::{ApiError, ApiResult};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The last `tail_lines` lines of `data`, then at most `limit_bytes` of them (the
/// kubelet's order).
pub fn select(data: &[u8], tail_lines: Option<usize>, limit_bytes: Option<usize>) -> Vec<u8> {
    let mut start = 0;
    if let Some(n) = tail_lines {
        let body = data.strip_suffix(b"\n").unwrap_or(data);
        let mut seen = 0;
        start = data.len();
        if n > 0 {
            start = 0;
            for (i, b) in body.iter().enumerate().rev() {
                if *b == b'\n' {
                    seen += 1;
                    if seen == n {
                        start = i + 1;
                        break;
                    }
                }
            }
        }
    }
    let mut out = data[start..].to_vec();
    if let Some(l) = limit_bytes {
        out.truncate(l);
    }
    out
}

fn names(pod: &Value, field: &str) -> Vec<String> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn container_state(pod: &Value, container: &str) -> Option<Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|f| {
            pod.pointer(&format!("/status/{f}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
        .and_then(|s| s.get("state").cloned())
}

fn number(q: &HashMap<String, String>, k: &str) -> ApiResult<Option<usize>> {
    match q.get(k).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse::<i64>().ok().filter(|n| *n >= 0).map_or_else(
            || {
                Err(ApiError::bad_request(format!(
                    "{k}: Invalid value: {v}: must be greater than or equal to 0"
                )))
            },
            |n| Ok(Some(n as usize)),
        ),
    }
}

/// Serves the log of one container of a Pod.
pub fn serve(
    shared: &Arc<Shared>,
    pod: Arc<Value>,
    q: &HashMap<String, String>,
) -> ApiResult<Response> {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mains = names(&pod, "containers");
    let inits = names(&pod, "initContainers");
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) => c.clone(),
        None if mains.len() == 1 => mains[0].clone(),
        None => {
            let mut msg = format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                mains.join(" ")
            );
            if !inits.is_empty() {
                msg.push_str(&format!(
                    " or one of the init containers: [{}]",
                    inits.join(" ")
                ));
            }
            return Err(ApiError::bad_request(msg));
        }
    };
    if !mains.contains(&container) && !inits.contains(&container) {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {name}"
        )));
    }
    let previous = matches!(q.get("previous").map(String::as_str), Some("true" | "1"));
    let tail = number(q, "tailLines")?;
    let limit = number(q, "limitBytes")?;
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    let dir = super::pod_dir(&shared.pods_dir, uid);
    let path = super::spec::log_path(&dir, &container, previous);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(_) if previous => {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        Err(_) => {
            let reason = container_state(&pod, &container)
                .and_then(|s| s.pointer("/waiting/reason").cloned())
                .and_then(|r| r.as_str().map(str::to_string))
                .unwrap_or_else(|| "ContainerCreating".into());
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
            )));
        }
    };
    let follow = matches!(q.get("follow").map(String::as_str), Some("true" | "1"));
    let first = select(&data, tail, limit);
    let text = [(header::CONTENT_TYPE, "text/plain")];
    if !follow || previous || limit.is_some() {
        return Ok((StatusCode::OK, text, first).into_response());
    }
    let key = crate::store::obj_key(&pod);
    let stream = follow_stream(
        shared.clone(),
        path,
        data.len() as u64,
        key,
        uid.into(),
        container,
    );
    let first = futures::stream::once(async move { Ok(bytes::Bytes::from(first)) });
    let body = Body::from_stream(futures::StreamExt::chain(first, stream));
    Ok((StatusCode::OK, text, body).into_response())
}

/// Bytes appended to the log after `offset`, until the container is no longer running
/// (or the Pod is gone) and everything was read.
fn follow_stream(
    shared: Arc<Shared>,
    path: PathBuf,
    offset: u64,
    key: crate::store::ObjKey,
    uid: String,
    container: String,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
    futures::stream::unfold(Some(offset), move |state| {
        let (shared, path, key, uid, container) = (
            shared.clone(),
            path.clone(),
            key.clone(),
            uid.clone(),
            container.clone(),
        );
        async move {
            let mut offset = state?;
            loop {
                let running = shared.read(|st| {
                    st.get(&(String::new(), "pods".into()), &key)
                        .filter(|p| {
                            p.pointer("/metadata/uid").and_then(Value::as_str) == Some(&uid)
                        })
                        .and_then(|p| container_state(&p, &container))
                        .is_some_and(|s| s.get("terminated").is_none())
                });
                let data = tokio::fs::read(&path).await.unwrap_or_default();
                if (data.len() as u64) > offset {
                    let chunk = bytes::Bytes::copy_from_slice(&data[offset as usize..]);
                    offset = data.len() as u64;
                    return Some((Ok(chunk), Some(offset)));
                }
                if !running || *shared.shutdown.borrow() {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::select;

    /// Copies the kubelet's `tailLines` then `limitBytes` selection.
    #[test]
    fn tail_and_limit() {
        let d = b"a\nb\nc\n";
        assert_eq!(select(d, Some(2), None), b"b\nc\n");
        assert_eq!(select(d, Some(0), None), b"");
        assert_eq!(select(d, Some(9), None), d);
        assert_eq!(select(d, Some(2), Some(3)), b"b\nc");
        assert_eq!(select(d, None, Some(1)), b"a");
    }
}
