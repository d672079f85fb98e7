//! `POST /webhooks/vcs/{oc-…}`: a connection's webhook (docs/vcs.md). No token: the
//! request is taken only when signed with the connection's webhook secret, as its
//! provider signs. The answer says, per workspace following the repository, what the
//! event means to it; fetches and configuration versions follow in the background
//! ([`super::ingress`]).

use axum::body::Bytes;
use axum::http::HeaderMap;
use terrace_crds::vcs::events::{Event, PrAction, PullRequest, Push, Sender, pull_request_ref};
use terrace_crds::vcs::triggers::{Verdict, followed_branch, judge};
use terrace_crds::vcs::{self, Forge};
use terrace_crds::{IngressAttributes, OAuthToken, Workspace};

use super::ingress::{self, Job};
use super::{secret_value, token_id_of, triggers};
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new().route("/webhooks/vcs/{id}", post(receive))
}

fn unauthorized(detail: String) -> ApiError {
    ApiError::Unauthorized(detail.into())
}

async fn receive(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::not_found("no VCS connection has this webhook");
    let token_id = if id.starts_with("ot-") {
        id.clone()
    } else {
        token_id_of(&id).ok_or_else(not_found)?
    };
    let conn = state
        .index
        .read()
        .oauth_tokens()
        .get(&token_id)
        .cloned()
        .ok_or_else(not_found)?;
    let forge = Forge::of(&conn.spec.service_provider);
    let secret = secret_value(&state, &conn, conn.spec.webhook_secret_ref.as_ref())
        .await?
        .ok_or_else(|| {
            unauthorized("the connection has no webhook secret: set one first".into())
        })?;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    vcs::verify(forge, header, &body, secret.as_bytes())
        .map_err(|e| unauthorized(e.to_string()))?;
    let event =
        vcs::events::parse(forge, header, &body).map_err(|e| ApiError::bad_body(e.to_string()))?;
    let decisions = match event {
        Event::Ping => return Ok(Doc::ok(json!({"event": "ping"})).into_response()),
        Event::Other(name) => {
            return Ok(Doc::ok(json!({"event": name, "ignored": true})).into_response());
        }
        Event::Push(p) => on_push(&state, &conn, forge, p),
        Event::PullRequest(pr) => on_pull_request(&state, &conn, forge, pr),
    };
    let answer: Vec<Value> = decisions
        .iter()
        .map(|(ws, d)| json!({"workspace": id_of(ws.as_ref()), "decision": d}))
        .collect();
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({"workspaces": answer})),
    )
        .into_response())
}

/// The workspaces of the connection's namespace that follow `repository` through it.
fn followers(state: &AppState, conn: &OAuthToken, repository: &str) -> Vec<Arc<Workspace>> {
    let ns = conn.namespace().unwrap_or_default();
    let token_id = id_of(conn);
    let object = conn.name_any();
    let idx = state.index.read();
    let Some(n) = idx.workspaces_in(&ns) else {
        return Vec::new();
    };
    n.uids_by_name()
        .filter_map(|u| idx.workspace_by_uid(u))
        .filter(|w| {
            w.spec.vcs_repo.as_ref().is_some_and(|r| {
                r.identifier.eq_ignore_ascii_case(repository)
                    && r.oauth_token_id
                        .as_deref()
                        .is_some_and(|t| t == token_id || t == object)
            }) && super::admits(conn, idx.project_of(w).map(|p| p.as_ref()))
        })
        .cloned()
        .collect()
}

/// The ingress attributes every commit `sha` of `repository` through `conn` has: the
/// clone and commit URLs, the sender, the connection.
fn attributes(
    conn: &OAuthToken,
    forge: Forge,
    repository: &str,
    sha: &str,
    sender: &Sender,
) -> IngressAttributes {
    let http = conn.spec.http_url.as_deref().unwrap_or_default();
    IngressAttributes {
        identifier: repository.to_owned(),
        clone_url: vcs::clone_url(forge, http, repository),
        commit_sha: sha.to_owned(),
        commit_url: vcs::commit_url(forge, http, repository, sha).unwrap_or_default(),
        sender_username: sender.username.clone(),
        sender_avatar_url: sender.avatar_url.clone(),
        sender_html_url: sender.html_url.clone(),
        oauth_token_id: id_of(conn),
        ..IngressAttributes::default()
    }
}

fn on_push(
    state: &AppState,
    conn: &Arc<OAuthToken>,
    forge: Forge,
    p: Push,
) -> Vec<(Arc<Workspace>, String)> {
    let mut out = Vec::new();
    for ws in followers(state, conn, &p.repository) {
        let t = triggers(&ws);
        let known_branch = followed_branch(t.branch, p.default_branch.as_deref()).is_some();
        let verdict = if known_branch || p.tag.is_some() {
            judge(&t, &p, p.default_branch.as_deref())
        } else {
            // The event does not say the default branch: the fetch asks the server.
            Verdict::Run
        };
        let decision = match verdict {
            Verdict::Skip(why) => why.to_owned(),
            Verdict::Run => {
                let (git_ref, branch) = match (&p.branch, &p.tag) {
                    (Some(b), _) => (format!("refs/heads/{b}"), b.clone()),
                    (None, Some(tag)) => (format!("refs/tags/{tag}"), String::new()),
                    (None, None) => continue,
                };
                let base = attributes(conn, forge, &p.repository, &p.sha, &p.sender);
                let attrs = IngressAttributes {
                    on_default_branch: p.default_branch.as_deref() == Some(branch.as_str()),
                    branch,
                    commit_message: p.message.clone(),
                    commit_url: p.commit_url.clone().unwrap_or(base.commit_url.clone()),
                    compare_url: p.compare_url.clone().unwrap_or_default(),
                    tag: p.tag.clone(),
                    ..base
                };
                ingress::spawn(
                    state.clone(),
                    Job {
                        ws: ws.clone(),
                        conn: conn.clone(),
                        git_ref,
                        attrs,
                        speculative: false,
                        check_branch: (!known_branch && p.tag.is_none()).then(|| p.clone()),
                        queue: None,
                    },
                );
                "queued".to_owned()
            }
        };
        out.push((ws, decision));
    }
    out
}

fn on_pull_request(
    state: &AppState,
    conn: &Arc<OAuthToken>,
    forge: Forge,
    pr: PullRequest,
) -> Vec<(Arc<Workspace>, String)> {
    let mut out = Vec::new();
    for ws in followers(state, conn, &pr.repository) {
        let t = triggers(&ws);
        let base_ok = t
            .branch
            .filter(|b| !b.is_empty())
            .is_none_or(|b| b == pr.base_branch);
        let decision = if !ws.spec.speculative_enabled {
            "speculative plans are off for the workspace (speculative-enabled)"
        } else if !base_ok {
            "the pull request is against another branch"
        } else if pr.fork && !conn.spec.allow_fork_pull_requests {
            "a pull request from a fork: the connection does not plan those (allowForkPullRequests)"
        } else {
            match pr.action {
                PrAction::Closed => {
                    ingress::supersede(state.clone(), ws.clone(), pr.number);
                    "closed: its pending speculative run is discarded"
                }
                PrAction::Other => "no new commits",
                PrAction::Opened | PrAction::Updated => {
                    let attrs = IngressAttributes {
                        branch: pr.head_branch.clone(),
                        is_pull_request: true,
                        pull_request_number: i64::try_from(pr.number).ok(),
                        pull_request_url: pr.url.clone(),
                        pull_request_title: pr.title.clone(),
                        pull_request_body: pr.body.clone(),
                        ..attributes(conn, forge, &pr.repository, &pr.head_sha, &pr.sender)
                    };
                    ingress::spawn(
                        state.clone(),
                        Job {
                            ws: ws.clone(),
                            conn: conn.clone(),
                            git_ref: pull_request_ref(forge, pr.number),
                            attrs,
                            speculative: true,
                            check_branch: None,
                            queue: None,
                        },
                    );
                    "queued"
                }
            }
        };
        out.push((ws, decision.to_owned()));
    }
    out
}
