//! Remote state consumers (SPEC.md B12–B15).
//!
//! The approved consumers are `spec.remoteStateConsumers` (workspace IDs, or TFE names
//! of the same organization when written with kubectl; the API writes IDs). With
//! `globalRemoteState` true every workspace of the organization may read the state, so
//! the list shows all of them except the subject, and the write endpoints refuse (422).
//! With `projectRemoteState` true the other workspaces of its project may read it too:
//! the list shows them after the approved ones.
//! Lists only show workspaces the caller can read. Replacing the whole list needs the
//! namespace-wide `manage` right; adding and removing need admin on the workspace.

use terrace_crds::Workspace;

use super::render::workspace_id;
use super::{Ws, render_located};
use crate::index::Inner;
use crate::prelude::*;
use crate::render::page_slice;

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/api/v2/workspaces/{id}/relationships/remote-state-consumers",
        get(list_consumers)
            .post(add_or_remove::<true>)
            .patch(replace)
            .delete(add_or_remove::<false>),
    )
}

/// The workspace an entry of `remoteStateConsumers` names (an ID or a TFE name in `ns`).
pub fn resolve<'a>(idx: &'a Inner, ns: &str, entry: &str) -> Option<&'a Arc<Workspace>> {
    idx.workspace(entry)
        .filter(|w| w.namespace().as_deref() == Some(ns))
        .or_else(|| idx.workspace_named(ns, entry))
}

/// The consumer IDs of `ws` (entries that name no workspace are kept as written).
pub fn consumer_ids(idx: &Inner, ws: &Workspace) -> Vec<String> {
    let ns = ws.namespace().unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for e in &ws.spec.remote_state_consumers {
        let id = resolve(idx, &ns, e).map_or_else(|| e.clone(), |w| workspace_id(w));
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

async fn list_consumers(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let (caller, l) = (&f.caller, &f.at);
    let id = l.id();
    let page = q.page()?;
    let candidates: Vec<Ws> = {
        let idx = state.index.read();
        // The namespace's other workspaces with an ID that `shares` admits, by name.
        let others = |shares: &dyn Fn(&Workspace) -> bool| -> Vec<Arc<Workspace>> {
            idx.workspaces_in(&l.ns)
                .map(|n| {
                    n.uids_by_name()
                        .filter_map(|u| idx.workspace_by_uid(u))
                        .filter(|w| {
                            let wid = workspace_id(w);
                            !wid.is_empty() && wid != id && shares(w)
                        })
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        };
        let wss: Vec<Arc<Workspace>> = if l.obj.spec.global_remote_state {
            others(&|_| true)
        } else if l.obj.spec.project_remote_state {
            // Shared with its project: the project's other workspaces, and only those (a
            // consumer named in another project does not read it, as in TFE).
            let project = idx.project_of(&l.obj).map(|p| p.name_any());
            others(&|w| idx.project_of(w).map(|p| p.name_any()) == project)
        } else {
            consumer_ids(&idx, &l.obj)
                .iter()
                .filter_map(|c| resolve(&idx, &l.ns, c).cloned())
                .collect()
        };
        wss.into_iter().map(|ws| l.with((*ws).clone())).collect()
    };
    let mut visible = Vec::new();
    for c in candidates {
        if state.allowed(caller, &c.check("get")).await? {
            visible.push(c);
        }
    }
    let mut data = Vec::new();
    for c in page_slice(&visible, page) {
        data.push(render_located(&state, caller, c).await?);
    }
    let base = format!("/api/v2/workspaces/{id}/relationships/remote-state-consumers");
    Ok(Included::default().paged(&base, page, visible.len(), data))
}

/// Entries of a consumers body are workspaces.
struct WorkspaceEntry;
impl Typed for WorkspaceEntry {
    const TYPE: &'static str = "workspaces";
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Add,
    Replace,
    Remove,
}

fn not_while_global() -> ApiError {
    ApiError::invalid(
        "/data",
        "remote state consumers can only be changed while global-remote-state is false",
    )
}

/// The consumer IDs of a request body, in order without duplicates. Each must be another
/// workspace of the organization that the caller can read — except, for removal, one
/// already in the list.
async fn body_ids(
    state: &AppState,
    caller: &Caller,
    l: &Ws,
    body: ToMany<WorkspaceEntry>,
    op: Op,
) -> Result<Vec<String>, ApiError> {
    let subject = workspace_id(&l.obj);
    let current = consumer_ids(&state.index.read(), &l.obj);
    let mut out: Vec<String> = Vec::new();
    for (i, e) in body.checked()?.iter().enumerate() {
        let pointer = format!("/data/{i}/id");
        let id =
            e.id.as_deref()
                .ok_or_else(|| ApiError::invalid(pointer.clone(), "id is required"))?;
        if id == subject {
            return Err(ApiError::invalid(
                pointer,
                "a workspace cannot be its own remote state consumer",
            ));
        }
        if op == Op::Remove && current.iter().any(|c| c == id) {
            if !out.iter().any(|o| o == id) {
                out.push(id.to_owned());
            }
            continue;
        }
        let target = {
            let idx = state.index.read();
            idx.workspace(id)
                .filter(|w| w.namespace().as_deref() == Some(l.ns.as_str()))
                .cloned()
        };
        let readable = match target {
            Some(ws) => {
                state
                    .allowed(caller, &l.with((*ws).clone()).check("get"))
                    .await?
            }
            None => false,
        };
        if !readable {
            return Err(ApiError::invalid(
                pointer,
                format!("workspace {id:?} not found in this organization"),
            ));
        }
        if !out.iter().any(|o| o == id) {
            out.push(id.to_owned());
        }
    }
    Ok(out)
}

async fn change(
    state: &AppState,
    caller: &Caller,
    l: Ws,
    body: ToMany<WorkspaceEntry>,
    op: Op,
) -> Result<Response, ApiError> {
    if l.obj.spec.global_remote_state {
        return Err(not_while_global());
    }
    let given = body_ids(state, caller, &l, body, op).await?;
    let index = state.index.clone();
    write::update_spec(state, &l.ns, (*l.obj).clone(), |w| {
        if w.spec.global_remote_state {
            return Err(not_while_global());
        }
        let current = consumer_ids(&index.read(), w);
        let next: Vec<String> = match op {
            Op::Replace => given.clone(),
            Op::Add => {
                let mut n = current.clone();
                n.extend(given.iter().filter(|g| !current.contains(g)).cloned());
                n
            }
            Op::Remove => current
                .iter()
                .filter(|c| !given.contains(c))
                .cloned()
                .collect(),
        };
        Ok((next != w.spec.remote_state_consumers).then(|| json!({"remoteStateConsumers": next})))
    })
    .await?;
    let verb = match op {
        Op::Replace => "replaced",
        Op::Add => "added",
        Op::Remove => "removed",
    };
    crate::events::workspace_event(
        &state.events,
        &l.obj,
        "RemoteStateConsumersChanged",
        format!(
            "{} {verb} remote state consumers {}",
            caller.username,
            given.join(", ")
        ),
    );
    Ok(no_content())
}

/// `POST` (`ADD`) or `DELETE` of consumers: the workspace's admins (404 without).
async fn add_or_remove<const ADD: bool>(
    State(state): State<AppState>,
    f: Found<Workspace, AdminOr404>,
    JsonApi(body): JsonApi<ToMany<WorkspaceEntry>>,
) -> Result<Response, ApiError> {
    let op = if ADD { Op::Add } else { Op::Remove };
    change(&state, &f.caller, f.at, body, op).await
}

/// Replacing the whole list needs the namespace-wide `manage` right (404 without it).
async fn replace(
    State(state): State<AppState>,
    f: Found<Workspace>,
    JsonApi(body): JsonApi<ToMany<WorkspaceEntry>>,
) -> Result<Response, ApiError> {
    state
        .require(
            &f.caller,
            &Check::new("manage", "workspaces", &f.at.ns, None),
            Deny::NotFound,
            || {
                ApiError::not_found(
                    "workspace not found or not authorized: replacing all remote state \
                     consumers needs the right to manage all workspaces of the organization",
                )
            },
        )
        .await?;
    change(&state, &f.caller, f.at, body, Op::Replace).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::harness;

    const A: &str = "ws-CCCCCCCCCCCCCCC1";
    const B: &str = "ws-CCCCCCCCCCCCCCC2";
    const C: &str = "ws-CCCCCCCCCCCCCCC3";

    fn path(id: &str) -> String {
        format!("/api/v2/workspaces/{id}/relationships/remote-state-consumers")
    }

    fn body(ids: &[&str]) -> Value {
        json!({"data": ids.iter().map(|i| json!({"type": "workspaces", "id": i})).collect::<Vec<_>>()})
    }

    fn ids(doc: &Value) -> Vec<String> {
        doc["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|w| w["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Add ignores duplicates, remove ignores absent ones, replace sets exactly; the
    /// self-consumer and unknown workspaces are 422 naming the entry.
    #[tokio::test]
    async fn add_remove_replace() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace(A, "a", |_| {}).await;
        h.workspace(B, "b", |_| {}).await;
        h.workspace(C, "c", |s| s.remote_state_consumers = vec!["b".into()])
            .await;

        // A consumer written by name (kubectl) is listed as the workspace.
        let (st, doc) = h.call("GET", &path(C), None).await;
        assert_eq!(st, 200);
        assert_eq!(ids(&doc), [B]);
        assert_eq!(doc["data"][0]["type"], "workspaces");

        let (st, _) = h.call("POST", &path(A), Some(body(&[B, B, C]))).await;
        assert_eq!(st, 204);
        let (st, _) = h.call("POST", &path(A), Some(body(&[B]))).await;
        assert_eq!(st, 204);
        assert_eq!(h.ws(A).spec.remote_state_consumers, [B, C]);

        let (st, doc) = h.call("POST", &path(A), Some(body(&[A]))).await;
        assert_eq!(st, 422);
        assert_eq!(doc["errors"][0]["source"]["pointer"], "/data/0/id");
        let (st, _) = h.call("POST", &path(A), Some(body(&["ws-nope"]))).await;
        assert_eq!(st, 422);

        let (st, _) = h.call("DELETE", &path(A), Some(body(&[C]))).await;
        assert_eq!(st, 204);
        let (st, _) = h.call("DELETE", &path(A), Some(body(&[C]))).await;
        assert_eq!(st, 204, "removing an absent consumer is ignored");
        assert_eq!(h.ws(A).spec.remote_state_consumers, [B]);

        let (st, _) = h.call("PATCH", &path(A), Some(body(&[C]))).await;
        assert_eq!(st, 204);
        let (_, doc) = h.call("GET", &path(A), None).await;
        assert_eq!(ids(&doc), [C]);
        assert_eq!(doc["meta"]["pagination"]["total-count"], 1);

        let (st, _) = h.call("PATCH", &path("ws-missing"), Some(body(&[C]))).await;
        assert_eq!(st, 404);
    }

    /// With global-remote-state every other workspace is listed (paginated) and the
    /// write endpoints answer 422.
    #[tokio::test]
    async fn global_remote_state() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace(A, "a", |s| s.global_remote_state = true).await;
        h.workspace(B, "b", |_| {}).await;
        h.workspace(C, "c", |_| {}).await;
        let (st, doc) = h
            .call("GET", &format!("{}?page%5Bsize%5D=1", path(A)), None)
            .await;
        assert_eq!(st, 200);
        assert_eq!(ids(&doc), [B]);
        assert_eq!(doc["meta"]["pagination"]["total-count"], 2);
        assert_eq!(doc["meta"]["pagination"]["next-page"], 2);
        for m in ["POST", "PATCH", "DELETE"] {
            let (st, doc) = h.call(m, &path(A), Some(body(&[B]))).await;
            assert_eq!(st, 422, "{m}");
            assert!(
                doc["errors"][0]["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("global-remote-state")),
                "{doc}"
            );
        }
    }
}
