//! The engine log of a Pod as TFE's log endpoints serve it (test runs, plans, applies):
//! read live from the Pod through the Kubernetes API (`pods/log`, container `engine`)
//! while the run is not final, else (or when the Pod is gone) from the archive the
//! operator writes before releasing the Pod: ConfigMap `<pod name>-log`, binaryData
//! `log.gz`, gzip-compressed (the operator's log archive contract).
//!
//! Like TFE's log endpoint the text is framed by STX (0x02) at the start and, once final,
//! ETX (0x03) at the end: go-tfe's log reader stops on that frame. It asks for
//! `?limit=N&offset=M` byte windows, which are cut from the framed text. Without Pod or
//! archive the log reads as empty, but for the line saying what the Pod waited for.

use axum::http::header;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::LogParams;

use crate::prelude::*;

/// Start-of-text and end-of-text markers of TFE's log framing.
const STX: u8 = 0x02;
const ETX: u8 = 0x03;
/// binaryData key of the operator's log archive ConfigMap.
pub const ARCHIVE_KEY: &str = "log.gz";
/// The most bytes a log archive may expand to (the operator keeps 4 MiB).
const ARCHIVE_MAX: u64 = 8 * 1024 * 1024;

/// Name of the log archive ConfigMap of Pod `pod` (the operator's contract).
pub fn archive_name(pod: &str) -> String {
    format!("{pod}-log")
}

/// The text of a gzip-compressed archive, at most [`ARCHIVE_MAX`] bytes; `None` when it
/// is not gzip.
pub fn gunzip(gz: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .take(ARCHIVE_MAX)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// The archived engine log of Pod `pod`, if the operator wrote one.
async fn archived(client: &kube::Client, ns: &str, pod: &str) -> Option<Vec<u8>> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = match cms.get_opt(&archive_name(pod)).await {
        Ok(cm) => cm?,
        Err(e) => {
            tracing::debug!(pod = %pod, error = %e, "reading a log archive");
            return None;
        }
    };
    let gz = cm.binary_data?.remove(ARCHIVE_KEY)?;
    let text = gunzip(&gz.0);
    if text.is_none() {
        tracing::warn!(pod = %pod, "a log archive is not gzip");
    }
    text
}

/// The live log of the `engine` container of Pod `pod`; `None` without one.
async fn live(client: &kube::Client, ns: &str, pod: &str) -> Option<Vec<u8>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = LogParams {
        container: Some("engine".to_owned()),
        ..LogParams::default()
    };
    match pods.logs(pod, &lp).await {
        Ok(text) => Some(text.into_bytes()),
        Err(e) => {
            tracing::debug!(pod = %pod, error = %e, "no logs for a Pod");
            None
        }
    }
}

/// The `limit`/`offset` window of `text` (offset past the end: empty).
pub fn window(text: &[u8], offset: Option<usize>, limit: Option<usize>) -> &[u8] {
    let start = offset.unwrap_or(0).min(text.len());
    let end = limit.map_or(text.len(), |l| start.saturating_add(l).min(text.len()));
    &text[start..end]
}

fn number(q: &QueryParams, name: &str) -> Result<Option<usize>, ApiError> {
    q.get(name)
        .map(|v| {
            v.trim().parse::<usize>().map_err(|_| {
                ApiError::bad_parameter(
                    name,
                    format!("{name} must be a non-negative integer, got {v:?}"),
                )
            })
        })
        .transpose()
}

/// The framed `limit`/`offset` window (of `q`) of the log of Pod `pod` in `ns`; `finished`:
/// the run (or phase) is final, so the archive is read first and ETX ends the text.
/// `wait_note` (the run's `waitNote`: what its Pod first waited for, "waiting for a node:
/// …") is the first line, `terrace: <note>`, so a CLI following a run whose Pod no node
/// takes says why nothing happens. It is written once and never changes, so the byte
/// offsets a reader has consumed stay valid when the Pod's own output follows.
/// `readable`: the engine's `-json` UI lines are served as text
/// ([`terrace_crds::run::ui_log::readable`]), for every reader but the terraform CLI.
pub async fn respond(
    client: &kube::Client,
    ns: &str,
    pod: Option<&str>,
    wait_note: Option<&str>,
    finished: bool,
    readable: bool,
    q: &QueryParams,
) -> Result<Response, ApiError> {
    let (offset, limit) = (number(q, "offset")?, number(q, "limit")?);
    let output = match pod {
        Some(p) if finished => match archived(client, ns, p).await {
            Some(text) => text,
            None => live(client, ns, p).await.unwrap_or_default(),
        },
        Some(p) => match live(client, ns, p).await {
            Some(text) => text,
            None => archived(client, ns, p).await.unwrap_or_default(),
        },
        None => Vec::new(),
    };
    let output = if readable {
        terrace_crds::run::ui_log::readable(&output, finished)
    } else {
        output
    };
    let mut framed = Vec::with_capacity(output.len() + 2);
    framed.push(STX);
    if let Some(note) = wait_note {
        framed.extend_from_slice(format!("terrace: {note}\n").as_bytes());
    }
    framed.extend_from_slice(&output);
    if finished {
        framed.push(ETX);
    }
    let body = window(&framed, offset, limit).to_vec();
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response())
}
