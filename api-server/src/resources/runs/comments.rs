//! Comments on runs and run events: `GET/POST /runs/:id/comments`, `GET /comments/:id`,
//! `GET /runs/:id/run-events`, `GET /run-events/:id`.
//!
//! Comments live in the run's status (`status.comments`), written with a guarded merge
//! patch, so two comments at once both land; an action's `comment` is one of them. Run
//! events are derived from the status ([`terrace_crds::run::events`]), so their IDs name
//! their run. Reading needs `get` on the run; commenting `patch`, as the actions.

use terrace_crds::Run;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::RunComment;
use terrace_crds::run::events::{RunEvent, events, parse_event_id};

use crate::documents::runs::{actor_name, comment_data, event_data};
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/runs/{id}/comments", get(list).post(create))
        .route("/api/v2/comments/{id}", get(show))
        .route("/api/v2/runs/{id}/run-events", get(list_events))
        .route("/api/v2/run-events/{id}", get(show_event))
}

/// What `include` may name on run events.
const EVENT_INCLUDES: &[&str] = &["actor", "comment"];

/// A new comment by `who` (`user:NAME`) at `now`, with the action it came with.
pub fn new_comment(body: &str, who: &str, now: &str, action: Option<&str>) -> RunComment {
    RunComment {
        id: new_id(IdKind::Comment),
        body: body.to_owned(),
        author: who.to_owned(),
        created_at: now.to_owned(),
        action: action.map(str::to_owned),
    }
}

/// The status patch that adds comment `c` to run `r` (the whole list: a merge patch
/// replaces lists, and the guarded write re-decides on a fresh run after a conflict);
/// 422 when the run holds the most comments already.
pub fn comments_patch(r: &Run, c: &RunComment) -> Result<Value, ApiError> {
    let mut all = r
        .status
        .as_ref()
        .map(|s| s.comments.clone())
        .unwrap_or_default();
    terrace_crds::run::check_comment(&c.body, all.len(), c.action.is_some())
        .map_err(|e| ApiError::invalid_attribute("body", e))?;
    all.push(c.clone());
    serde_json::to_value(all).map_err(|e| ApiError::internal("serializing comments", e))
}

/// The attributes of `POST /runs/:id/comments`.
#[derive(Debug, Default, Deserialize)]
struct CommentAttributes {
    body: Option<String>,
}

impl Typed for CommentAttributes {
    const TYPE: &'static str = "comments";
}

async fn create(
    State(state): State<AppState>,
    f: Found<Run>,
    JsonApi(doc): JsonApi<Document<CommentAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "patch", "not authorized to comment on this run")
        .await?;
    let body = doc.checked()?.attributes.body.unwrap_or_default();
    let who = format!("user:{}", f.caller.username);
    let comment = new_comment(&body, &who, &crate::render::now(), None);
    let api = write::api::<Run>(&state, &f.at.ns);
    let written = write::guarded_status_patch(&api, (*f.at.obj).clone(), |r| {
        Ok(Some(json!({"comments": comments_patch(r, &comment)?})))
    })
    .await?;
    write::wait_seen(&state, &written).await;
    Ok(Doc::created(comment_data(&f.at.id(), &comment)))
}

async fn list(f: Found<Run>, q: QueryParams) -> Result<Doc, ApiError> {
    let id = f.at.id();
    let comments =
        f.at.obj
            .status
            .as_ref()
            .map(|s| s.comments.clone())
            .unwrap_or_default();
    let page = q.page_or_whole(comments.len())?;
    let base = format!("/api/v2/runs/{id}/comments");
    Ok(crate::render::list(&base, page, &comments, |c| {
        comment_data(&id, c)
    }))
}

/// `GET /comments/:id`: the run holding it is found in the index, then read with the
/// caller's rights (404 when it may not read that run).
async fn show(Authed { state, caller }: Authed, Path(id): Path<String>) -> Result<Doc, ApiError> {
    let not_found = || ApiError::not_found("comment not found");
    if !id.starts_with(IdKind::Comment.prefix()) {
        return Err(not_found());
    }
    let run_id = {
        let idx = state.index.read();
        idx.runs()
            .iter()
            .find(|r| {
                r.status
                    .as_ref()
                    .is_some_and(|s| s.comments.iter().any(|c| c.id == id))
            })
            .map(|r| id_of(r.as_ref()))
            .ok_or_else(not_found)?
    };
    let at = state.readable::<Run>(&caller, &run_id).await?;
    let c = at
        .obj
        .status
        .as_ref()
        .and_then(|s| s.comments.iter().find(|c| c.id == id))
        .ok_or_else(not_found)?;
    Ok(Doc::ok(comment_data(&run_id, c)))
}

/// The document of event `e` of run `r`, adding what `inc` asks of it (its actor as a
/// user, its comment).
fn render_event(r: &Run, e: &RunEvent<'_>, inc: &mut Included) -> Value {
    let id = id_of(r);
    if inc.wants("actor")
        && let Some(a) = e.actor.and_then(actor_name)
    {
        inc.add(super::user_document(a));
    }
    if inc.wants("comment")
        && let Some(c) = e.comment
    {
        inc.add(comment_data(&id, c));
    }
    event_data(&id, e)
}

async fn list_events(f: Found<Run>, q: QueryParams) -> Result<Doc, ApiError> {
    let inc = Included::asked(&q, EVENT_INCLUDES)?;
    let evs = events(&f.at.obj);
    let page = q.page_or_whole(evs.len())?;
    let base = format!("/api/v2/runs/{}/run-events", f.at.id());
    Ok(inc.list(&base, page, &evs, |e, inc| render_event(&f.at.obj, e, inc)))
}

async fn show_event(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(&q, EVENT_INCLUDES)?;
    let not_found = || ApiError::not_found("run event not found");
    let (run_id, key) = parse_event_id(&id).ok_or_else(not_found)?;
    let at = state.readable::<Run>(&caller, &run_id).await?;
    let evs = events(&at.obj);
    let e = evs.iter().find(|e| e.key == key).ok_or_else(not_found)?;
    let data = render_event(&at.obj, e, &mut inc);
    Ok(inc.show(StatusCode::OK, data))
}
