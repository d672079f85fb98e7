//! Watch streams: `?watch=true` on a collection.
//!
//! A watch is a task that reads the resource's event history after its cursor (a
//! resourceVersion), filters by namespace and selectors, and writes one JSON line per
//! event into a channel that backs the chunked HTTP body. It wakes on the store's change
//! notification, sends BOOKMARK events on an interval when asked, ends at
//! `timeoutSeconds`, and answers a cursor older than the history window with an ERROR
//! event carrying a 410 Expired Status — the behaviours kube-runtime's watcher relies on
//! to resume without relisting.

use crate::Shared;
use crate::resource::ResourceInfo;
use crate::rest::matches_stored;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Event, EventType, Obj};
use bytes::Bytes;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Renders one object for the wire (plain JSON in the requested version, or a Table).
pub type Render = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// How events' objects go on the wire.
pub enum Output {
    /// Plain JSON of this apiVersion: a stored object of that version is sent as its
    /// stored text; others are rewritten by the renderer.
    Json(String, Render),
    /// Anything else (Tables): every object goes through the renderer.
    Rendered(Render),
}

pub struct WatchParams {
    pub info: Arc<ResourceInfo>,
    pub namespace: Option<String>,
    pub label: LabelSelector,
    pub field: FieldSelector,
    /// `None` (or "0"): start with synthetic ADDED events for the current objects.
    pub resource_version: Option<u64>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Duration,
    pub output: Output,
}

/// Parses the `resourceVersion` of a watch request.
pub fn parse_rv(rv: Option<&str>) -> Result<Option<u64>, ApiError> {
    match rv {
        None | Some("") | Some("0") => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}"))),
    }
}

/// Starts the watch task; returns the response body.
pub fn start(shared: Arc<Shared>, p: WatchParams) -> axum::body::Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(run(shared, p, tx));
    axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

/// The event line of a stored object.
fn object_line(kind: &str, obj: &Obj, output: &Output) -> Bytes {
    match output {
        Output::Json(api_version, _) if obj.has_api_version(api_version) => {
            let text = obj.text();
            let mut s = String::with_capacity(text.len() + 32);
            s.push_str("{\"type\":\"");
            s.push_str(kind);
            s.push_str("\",\"object\":");
            s.push_str(&text);
            s.push_str("}\n");
            Bytes::from(s)
        }
        Output::Json(_, render) | Output::Rendered(render) => line(kind, render(&obj.value())),
    }
}

fn bookmark(info: &ResourceInfo, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta}),
    )
}

/// What an event means to this watcher, given its filter.
fn translate(ev: &Event, p: &WatchParams) -> Option<(&'static str, Arc<Obj>)> {
    let ns = p.namespace.as_deref();
    let now = matches_stored(&ev.key, &ev.object, ns, &p.label, &p.field);
    let before = ev
        .prev
        .as_ref()
        .is_some_and(|o| matches_stored(&ev.key, o, ns, &p.label, &p.field));
    match ev.kind {
        EventType::Added => now.then(|| ("ADDED", ev.object.clone())),
        EventType::Modified => match (before, now) {
            (true, true) => Some(("MODIFIED", ev.object.clone())),
            (false, true) => Some(("ADDED", ev.object.clone())),
            (true, false) => Some(("DELETED", ev.object.clone())),
            (false, false) => None,
        },
        EventType::Deleted => before.then(|| ("DELETED", ev.object.clone())),
    }
}

enum Step {
    Events(Vec<Arc<Event>>),
    Expired(u64),
}

async fn run(shared: Arc<Shared>, p: WatchParams, tx: mpsc::Sender<Result<Bytes, Infallible>>) {
    let res = crate::resource::res_key(&p.info);
    let deadline = Instant::now() + p.timeout;
    // Woken by the events of this resource only.
    let mut changes = shared.write_from_controller(|st| st.subscribe(&res));
    let mut shutdown = shared.shutdown.subscribe();
    if *shutdown.borrow() {
        return;
    }
    let ns = if p.info.namespaced {
        p.namespace.clone()
    } else {
        None
    };
    let mut cursor = match p.resource_version {
        Some(rv) if !p.send_initial_events => rv,
        _ => {
            let (objs, rv) = shared.read(|st| {
                let objs: Vec<Arc<Obj>> = st
                    .range_selected(&res, ns.as_deref(), None, &p.label)
                    .filter(|(k, o)| matches_stored(k, o, ns.as_deref(), &p.label, &p.field))
                    .map(|(_, o)| o.clone())
                    .collect();
                (objs, st.rv)
            });
            for o in objs {
                if tx
                    .send(Ok(object_line("ADDED", &o, &p.output)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if p.send_initial_events
                && p.bookmarks
                && tx.send(Ok(bookmark(&p.info, rv, true))).await.is_err()
            {
                return;
            }
            rv
        }
    };
    let mut next_bookmark = Instant::now() + shared.config.bookmark_interval;
    loop {
        let step = shared.read(|st| {
            let (floor, hist) = match st.resource(&res) {
                Some(rd) => (rd.floor, Some(&rd.history)),
                None => (st.open_rv, None),
            };
            if cursor < floor {
                return Step::Expired(floor);
            }
            let Some(hist) = hist else {
                return Step::Events(Vec::new());
            };
            let start = hist.partition_point(|e| e.rv <= cursor);
            Step::Events(hist.range(start..).take(512).cloned().collect())
        });
        let events = match step {
            Step::Expired(floor) => {
                let status =
                    ApiError::expired(format!("too old resource version: {cursor} ({floor})"))
                        .to_status();
                let _ = tx.send(Ok(line("ERROR", status))).await;
                return;
            }
            Step::Events(e) => e,
        };
        if !events.is_empty() {
            for ev in &events {
                if let Some((kind, obj)) = translate(ev, &p)
                    && tx
                        .send(Ok(object_line(kind, &obj, &p.output)))
                        .await
                        .is_err()
                {
                    return;
                }
                cursor = ev.rv;
            }
            if Instant::now() >= deadline {
                return;
            }
            continue;
        }
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(next_bookmark) => {
                next_bookmark = Instant::now() + shared.config.bookmark_interval;
                if p.bookmarks {
                    // Only advance to the store's rv when nothing of ours is pending.
                    let rv = shared.read(|st| {
                        let pending = st
                            .resource(&res)
                            .and_then(|rd| rd.history.back())
                            .is_some_and(|e| e.rv > cursor);
                        (!pending).then_some(st.rv)
                    });
                    if let Some(rv) = rv {
                        cursor = cursor.max(rv);
                        if tx.send(Ok(bookmark(&p.info, cursor, false))).await.is_err() {
                            return;
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = shutdown.changed() => return,
            _ = tx.closed() => return,
        }
    }
}
