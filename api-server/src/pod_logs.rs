//! The engine log of a Pod as TFE's log endpoints serve it (test runs, plans, applies).
//! It is read from the blob store when the runner stored it there (parts of
//! [`PART_BYTES`], [`terrace_crds::run::logs`]): live while the phase runs, whole once
//! it ended, only the parts a byte window touches. A log stored before (or one the
//! runner could not store) is read live from the Pod through the Kubernetes API
//! (`pods/log`, container `engine`) while the phase runs, else (or when the Pod is gone)
//! from the archive the operator wrote when releasing the Pod: ConfigMap `<pod
//! name>-log`, binaryData `log.gz`, gzip-compressed (`terrace blobs migrate` moves those
//! into the blob store).
//!
//! Like TFE's log endpoint the text is framed by STX (0x02) at the start and, once final,
//! ETX (0x03) at the end: go-tfe's log reader stops on that frame. It asks for
//! `?limit=N&offset=M` byte windows, which are cut from the framed text. Without Pod or
//! archive the log reads as empty, but for the line saying what the Pod waited for. A
//! phase that errored ends with `terrace: <why>`.

use axum::body::{Body, Bytes};
use axum::http::header;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::LogParams;
use terrace_crds::run::logs::{PART_BYTES, cause_line, cut_marker, part_key, past_cap};

use crate::blobs::{AnyBlobStore, BlobError, BlobStore};
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

/// What a log read needs to know of its phase.
pub struct LogRead<'a> {
    pub client: &'a kube::Client,
    /// The blob store of the Pod's namespace.
    pub store: AnyBlobStore,
    pub ns: &'a str,
    /// The phase's Pod (none yet: an empty log).
    pub pod: Option<&'a str>,
    /// The phase's `waitNote`: what its Pod first waited for ("waiting for a node: …"),
    /// the first line, `terrace: <note>`, so a CLI following a run whose Pod no node takes
    /// says why nothing happens. It is written once and never changes, so the byte
    /// offsets a reader has consumed stay valid when the Pod's own output follows.
    pub wait_note: Option<&'a str>,
    /// The phase is final: ETX ends the text.
    pub finished: bool,
    /// The engine's `-json` UI lines are served as text
    /// ([`terrace_crds::run::ui_log::readable`]), for every reader but the terraform CLI.
    pub readable: bool,
    /// Why the phase errored: the last line once final.
    pub cause: Option<&'a str>,
    /// The log's text from the run's archive (an archived run: [`crate::history`]).
    pub archived: Option<Vec<u8>>,
}

/// The framed `limit`/`offset` window (of `q`) of a phase's log (see the module's
/// documentation).
pub async fn respond(read: LogRead<'_>, q: &QueryParams) -> Result<Response, ApiError> {
    let (offset, limit) = (number(q, "offset")?, number(q, "limit")?);
    let mut head = vec![STX];
    if let Some(note) = read.wait_note {
        head.extend_from_slice(format!("terrace: {note}\n").as_bytes());
    }
    let stored = match read.pod {
        _ if read.archived.is_some() => None,
        Some(pod) => match read.store.get(&part_key(pod, 0), None).await {
            Ok(first) => Some((pod, first)),
            Err(BlobError::NotFound(_)) => None,
            Err(e) => return Err(crate::blobs::api_error("the log", e)),
        },
        None => None,
    };
    // Once final: the cause (unless the log ends with it already: an archive moved
    // into the blob store has it), then ETX.
    let cause = read
        .cause
        .filter(|c| read.finished && !c.is_empty())
        .map(|c| cause_line(c).into_bytes())
        .unwrap_or_default();
    let tail_after = |text_end: &[u8]| {
        let mut tail = Vec::new();
        if read.finished {
            if !text_end.ends_with(&cause) {
                tail.extend_from_slice(&cause);
            }
            tail.push(ETX);
        }
        tail
    };
    let body = match stored {
        Some((pod, first)) if !read.readable => {
            let parts = Parts {
                store: read.store,
                pod: pod.to_owned(),
                first: Some(first),
            };
            let ends = Ends {
                cause,
                etx: read.finished,
            };
            windowed(head, parts, ends, offset.unwrap_or(0) as u64, limit)
        }
        Some((pod, first)) => {
            let mut parts = Parts {
                store: read.store,
                pod: pod.to_owned(),
                first: Some(first),
            };
            let mut text = Vec::new();
            let mut n = 0;
            while let Some(piece) = parts.get(n).await? {
                let last = piece.len() < PART_BYTES;
                text.extend_from_slice(&piece);
                if last {
                    break;
                }
                n += 1;
            }
            let tail = tail_after(&text);
            let text = terrace_crds::run::ui_log::readable(&text, read.finished);
            Body::from(frame(&head, &text, &tail, offset, limit))
        }
        None if read.archived.is_some() => {
            let text = read.archived.clone().unwrap_or_default();
            let tail = tail_after(&text);
            let text = if read.readable {
                terrace_crds::run::ui_log::readable(&text, read.finished)
            } else {
                text
            };
            Body::from(frame(&head, &text, &tail, offset, limit))
        }
        None => {
            let (output, archived) = match read.pod {
                Some(p) if read.finished => match archived(read.client, read.ns, p).await {
                    Some(text) => (text, true),
                    None => (
                        live(read.client, read.ns, p).await.unwrap_or_default(),
                        false,
                    ),
                },
                Some(p) => match live(read.client, read.ns, p).await {
                    Some(text) => (text, false),
                    None => (
                        archived(read.client, read.ns, p).await.unwrap_or_default(),
                        true,
                    ),
                },
                None => (Vec::new(), false),
            };
            let output = if read.readable {
                terrace_crds::run::ui_log::readable(&output, read.finished)
            } else {
                output
            };
            // An archive ends with the cause already (the operator wrote it there).
            let tail = if archived && read.finished {
                vec![ETX]
            } else {
                tail_after(&output)
            };
            Body::from(frame(&head, &output, &tail, offset, limit))
        }
    };
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response())
}

/// `head` + `text` + `tail`, cut to the window.
fn frame(
    head: &[u8],
    text: &[u8],
    tail: &[u8],
    offset: Option<usize>,
    limit: Option<usize>,
) -> Vec<u8> {
    let mut framed = Vec::with_capacity(head.len() + text.len() + tail.len());
    framed.extend_from_slice(head);
    framed.extend_from_slice(text);
    framed.extend_from_slice(tail);
    window(&framed, offset, limit).to_vec()
}

/// The parts of a stored log.
struct Parts {
    store: AnyBlobStore,
    pod: String,
    /// Part 0, read already.
    first: Option<Bytes>,
}

impl Parts {
    /// The text of part `n`; `None` past the last.
    async fn get(&mut self, n: u64) -> Result<Option<Vec<u8>>, ApiError> {
        let gz = match self.first.take().filter(|_| n == 0) {
            Some(b) => b,
            None => match self.store.get(&part_key(&self.pod, n), None).await {
                Ok(b) => b,
                Err(BlobError::NotFound(_)) => return Ok(None),
                Err(e) => return Err(crate::blobs::api_error("the log", e)),
            },
        };
        gunzip(&gz).map(Some).ok_or_else(|| ApiError::Internal {
            context: "reading a stored log".into(),
            source: Box::new(crate::error::Bug(format!(
                "part {n} of the log of {} is not gzip",
                self.pod
            ))),
        })
    }
}

/// A stored log's window as a stream: only the parts the window touches are read, one
/// at a time, so memory stays within a part whatever the log's size.
/// What ends a stored log once final: the cause line (unless the log ends with it) and
/// ETX.
struct Ends {
    cause: Vec<u8>,
    etx: bool,
}

fn windowed(head: Vec<u8>, parts: Parts, ends: Ends, offset: u64, limit: Option<usize>) -> Body {
    enum Next {
        Head,
        Part(u64),
        Tail,
        Done,
    }
    let end = limit.map(|l| offset.saturating_add(l as u64));
    let head_len = head.len() as u64;
    struct St {
        next: Next,
        /// Absolute offset of the next piece in the framed text.
        pos: u64,
        head: Vec<u8>,
        ends: Ends,
        /// The text read last ends with the cause line.
        has_cause: bool,
        parts: Parts,
    }
    let st = St {
        next: Next::Head,
        pos: 0,
        head,
        ends,
        has_cause: false,
        parts,
    };
    let stream = futures::stream::unfold(st, move |mut st| async move {
        loop {
            if end.is_some_and(|e| st.pos >= e) {
                return None;
            }
            let piece: Vec<u8> = match st.next {
                Next::Done => return None,
                Next::Head => {
                    // A window past the head starts at the part it falls in.
                    let skip = offset.saturating_sub(head_len) / PART_BYTES as u64;
                    st.next = Next::Part(skip);
                    if skip > 0 {
                        st.pos = head_len + skip * PART_BYTES as u64;
                        continue;
                    }
                    std::mem::take(&mut st.head)
                }
                Next::Part(n) => match st.parts.get(n).await {
                    Ok(Some(text)) => {
                        st.has_cause = !st.ends.cause.is_empty() && text.ends_with(&st.ends.cause);
                        st.next = if text.len() < PART_BYTES {
                            Next::Tail
                        } else {
                            Next::Part(n + 1)
                        };
                        text
                    }
                    Ok(None) => {
                        st.next = Next::Tail;
                        continue;
                    }
                    Err(e) => {
                        st.next = Next::Done;
                        tracing::warn!(error = %e, "reading a stored log");
                        return Some((Err(std::io::Error::other("reading the log")), st));
                    }
                },
                Next::Tail => {
                    st.next = Next::Done;
                    let mut tail = Vec::new();
                    if st.ends.etx {
                        if !st.has_cause {
                            tail.append(&mut st.ends.cause);
                        }
                        tail.push(ETX);
                    }
                    tail
                }
            };
            let (from, to) = (st.pos, st.pos + piece.len() as u64);
            st.pos = to;
            let lo = offset.max(from);
            let hi = end.map_or(to, |e| e.min(to));
            if lo >= hi {
                continue;
            }
            let cut = Bytes::from(piece).slice((lo - from) as usize..(hi - from) as usize);
            return Some((Ok(cut), st));
        }
    });
    Body::from_stream(stream)
}

/// Stores part `part` of Pod `pod`'s log, compressed; past `cap` bytes the part after
/// the last one kept is the cut marker and the answer is 413.
pub async fn store_part(
    store: &impl BlobStore,
    pod: &str,
    part: u64,
    text: &[u8],
    cap: u64,
) -> Result<Response, ApiError> {
    if text.len() > PART_BYTES {
        return Err(ApiError::bad_body(format!(
            "a log part holds at most {PART_BYTES} bytes, this one has {}",
            text.len()
        )));
    }
    let (key, text, cut) = if past_cap(part, cap) {
        let first_past = cap.div_ceil(PART_BYTES as u64);
        (
            part_key(pod, first_past),
            cut_marker(cap).into_bytes(),
            true,
        )
    } else {
        (part_key(pod, part), text.to_vec(), false)
    };
    let gz = crate::blobs::gzip(&text).map_err(|e| crate::blobs::api_error("the log", e))?;
    store
        .put(&key, Bytes::from(gz))
        .await
        .map_err(|e| crate::blobs::api_error("the log", e))?;
    if cut {
        return Err(ApiError::TooLarge(
            format!(
                "the log passed the limit of {cap} bytes (--max-log-bytes): the rest is not kept"
            )
            .into(),
        ));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
