//! The poller (docs/vcs.md): for servers whose webhooks cannot reach terrace, and for
//! those that send none terrace takes (a plain Git server, Azure DevOps, Bitbucket
//! Cloud). Each workspace following a repository through a polled connection has its
//! branch asked for (`git ls-remote`, nothing fetched) every `pollIntervalSeconds`
//! (default [`DEFAULT_INTERVAL`] for a connection with no webhooks); a commit newer than
//! the workspace's latest from that branch is brought in as a push would be. The
//! configuration version's ID derives from the commit, so two API servers polling the
//! same branch make one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use terrace_crds::vcs::triggers::followed_branch;
use terrace_crds::vcs::{self, Forge};
use terrace_crds::{IngressAttributes, OAuthToken, Workspace};

use super::credentials;
use super::ingress::{self, Job};
use crate::prelude::*;

/// How often the poller looks for due workspaces.
pub const TICK: Duration = Duration::from_secs(2);
/// Interval of a connection with no webhooks and no `pollIntervalSeconds`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// The interval connection `t` is polled at; None: not polled (its webhooks come).
pub fn interval(t: &OAuthToken) -> Option<Duration> {
    match t.spec.poll_interval_seconds.filter(|s| *s > 0) {
        Some(s) => Some(Duration::from_secs(u64::from(s))),
        None if !Forge::of(&t.spec.service_provider).has_webhooks() => Some(DEFAULT_INTERVAL),
        None => None,
    }
}

/// Polls until the process ends.
pub async fn run(state: AppState) {
    let mut last: HashMap<String, Instant> = HashMap::new();
    loop {
        tokio::time::sleep(TICK).await;
        let now = Instant::now();
        let due: Vec<(Arc<Workspace>, Arc<OAuthToken>)> = {
            let idx = state.index.read();
            let mut out = Vec::new();
            for conn in idx.oauth_tokens().iter() {
                let Some(every) = interval(conn) else {
                    continue;
                };
                let ns = conn.namespace().unwrap_or_default();
                let Some(n) = idx.workspaces_in(&ns) else {
                    continue;
                };
                let (id, object) = (id_of(conn.as_ref()), conn.name_any());
                for ws in n.uids_by_name().filter_map(|u| idx.workspace_by_uid(u)) {
                    let follows = ws.spec.vcs_repo.as_ref().is_some_and(|r| {
                        r.oauth_token_id
                            .as_deref()
                            .is_some_and(|t| t == id || t == object)
                            && r.tags_regex.as_deref().is_none_or(str::is_empty)
                    });
                    let uid = ws.metadata.uid.clone().unwrap_or_default();
                    if follows
                        && last
                            .get(&uid)
                            .is_none_or(|t| now.duration_since(*t) >= every)
                    {
                        last.insert(uid, now);
                        out.push((ws.clone(), conn.clone()));
                    }
                }
            }
            out
        };
        for (ws, conn) in due {
            if let Err(e) = poll(&state, ws.clone(), conn).await {
                tracing::debug!(workspace = %ws.name_any(), error = %e, "polling the repository");
                super::mark_repository(&state, &ws, Some(&e)).await;
                crate::events::warning(&state.events, ws.as_ref(), "VcsPollFailed", e);
            }
        }
    }
}

/// The newest commit workspace `ws` brought in from `branch` (not a pull request's).
fn latest_commit(state: &AppState, ws: &Workspace, branch: &str) -> Option<String> {
    let idx = state.index.read();
    idx.configuration_versions_of(&ws.namespace().unwrap_or_default(), &ws.name_any())
        .filter_map(|c| {
            let i = c.spec.ingress_attributes.as_deref()?;
            (i.branch == branch && !i.is_pull_request && i.tag.is_none())
                .then(|| (c.metadata.creation_timestamp.clone(), i.commit_sha.clone()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, sha)| sha)
}

async fn poll(state: &AppState, ws: Arc<Workspace>, conn: Arc<OAuthToken>) -> Result<(), String> {
    let Some(repo) = ws.spec.vcs_repo.clone() else {
        return Ok(());
    };
    let forge = Forge::of(&conn.spec.service_provider);
    let http = conn.spec.http_url.clone().unwrap_or_default();
    let url = vcs::clone_url(forge, &http, &repo.identifier);
    let creds = credentials(state, &conn).await?;
    let timeout = Duration::from_secs(state.settings.vcs_fetch_timeout_seconds);
    let ad = crate::vcs::advertised(url.clone(), creds, timeout)
        .await
        .map_err(|e| format!("asking {} for its branches: {e}", repo.identifier))?;
    let Some(branch) = followed_branch(repo.branch.as_deref(), Some(ad.default_branch.as_str()))
        .map(str::to_owned)
    else {
        return Ok(());
    };
    let git_ref = format!("refs/heads/{branch}");
    let Some(sha) = ad.commit_of(&git_ref).map(str::to_owned) else {
        return Err(format!("the repository has no branch {branch}"));
    };
    if latest_commit(state, &ws, &branch).as_deref() == Some(sha.as_str()) {
        return Ok(());
    }
    let attrs = IngressAttributes {
        identifier: repo.identifier.clone(),
        on_default_branch: branch == ad.default_branch,
        branch,
        clone_url: url,
        commit_sha: sha,
        oauth_token_id: id_of(conn.as_ref()),
        ..IngressAttributes::default()
    };
    ingress::ingest(
        state,
        Job {
            ws,
            conn,
            git_ref,
            attrs,
            speculative: false,
            check_branch: None,
            queue: None,
        },
    )
    .await
    .map(|_| ())
}
