//! A commit into a workspace (docs/vcs.md): fetch it through the connection, make a
//! configuration version with its ingress attributes, upload the archive as any upload
//! goes (the same checks), and let the upload queue the run (the operator's run of an
//! upload). The version's ID derives from the workspace, the ref and the commit, so a
//! webhook delivered twice (or by two API servers) makes one version.

use axum::body::Body;
use axum::http::HeaderMap;
use futures::StreamExt;
use kube::api::ObjectMeta;
use terrace_crds::constants::LABEL_WORKSPACE_ID;
use terrace_crds::ids::stable_id;
use terrace_crds::run::{self, RunState};
use terrace_crds::vcs::events::Push;
use terrace_crds::vcs::triggers::{Verdict, judge};
use terrace_crds::vcs::{self, Forge};
use terrace_crds::{
    ConfigurationVersion, ConfigurationVersionSpec, IngressAttributes, OAuthToken, Run, Workspace,
};

use super::{credentials, triggers};
use crate::documents::config_versions::{create_pending_raw, pending_meta};
use crate::prelude::*;
use crate::vcs::{FetchRequest, fetch};

/// One commit to bring into one workspace.
#[derive(Clone)]
pub struct Job {
    pub ws: Arc<Workspace>,
    pub conn: Arc<OAuthToken>,
    /// The ref fetched.
    pub git_ref: String,
    pub attrs: IngressAttributes,
    /// A pull request's plan.
    pub speculative: bool,
    /// A push whose branch is judged once the server says its default branch.
    pub check_branch: Option<Push>,
    /// Whether the upload queues a run (None: as TFE's `queue-all-runs` says).
    pub queue: Option<bool>,
}

/// Runs `job` in the background; a failure is a Warning Event on the workspace.
pub fn spawn(state: AppState, job: Job) {
    tokio::spawn(async move {
        let ws = job.ws.clone();
        if let Err(e) = ingest(&state, job).await {
            tracing::warn!(workspace = %ws.name_any(), error = %e, "VCS ingress failed");
            super::mark_repository(&state, &ws, Some(&e)).await;
            crate::events::warning(&state.events, ws.as_ref(), "VcsIngressFailed", e);
        }
    });
}

/// Brings `job`'s commit in: the ID of its configuration version (None: a push its
/// triggers skip once the default branch is known).
pub async fn ingest(state: &AppState, mut job: Job) -> Result<Option<String>, String> {
    let conn = &job.conn;
    let forge = Forge::of(&conn.spec.service_provider);
    let http = conn.spec.http_url.clone().unwrap_or_default();
    let url = vcs::clone_url(forge, &http, &job.attrs.identifier);
    let credentials = credentials(state, conn).await?;
    let timeout = std::time::Duration::from_secs(state.settings.vcs_fetch_timeout_seconds);
    if let Some(push) = &job.check_branch {
        let default = crate::vcs::default_branch_of(url.clone(), credentials.clone(), timeout)
            .await
            .map_err(|e| e.to_string())?;
        if let Verdict::Skip(_) = judge(&triggers(&job.ws), push, Some(&default)) {
            return Ok(None);
        }
        job.attrs.on_default_branch = push.branch.as_deref() == Some(default.as_str());
    }
    let ws = job.ws.clone();
    let ns = ws.namespace().unwrap_or_default();
    let ws_id = id_of(ws.as_ref());
    let cv_id = |sha: &str| stable_id("cv-", &[&ws_id, &job.git_ref, sha]);
    if !job.attrs.commit_sha.is_empty() {
        let known = cv_id(&job.attrs.commit_sha);
        if state
            .index
            .read()
            .configuration_versions()
            .get(&known)
            .is_some()
        {
            return Ok(Some(known));
        }
    }
    if job.speculative
        && let Some(n) = job.attrs.pull_request_number
    {
        supersede_now(state, &ws, n).await;
    }
    let fetched = fetch(FetchRequest {
        url,
        git_ref: job.git_ref.clone(),
        credentials,
        max_bytes: state.settings.vcs_max_fetch_bytes,
        timeout,
        submodules: ws
            .spec
            .vcs_repo
            .as_ref()
            .is_some_and(|r| r.ingress_submodules),
    })
    .await
    .map_err(|e| format!("{} of {}: {e}", job.git_ref, job.attrs.identifier))?;
    let mut attrs = job.attrs.clone();
    attrs.commit_sha = fetched.sha.clone();
    if attrs.commit_url.is_empty() {
        attrs.commit_url =
            vcs::commit_url(forge, &http, &attrs.identifier, &fetched.sha).unwrap_or_default();
    }
    if attrs.commit_message.is_empty() {
        attrs.commit_message = fetched.message.clone();
    }
    if fetched.submodules > 0
        && ws
            .spec
            .vcs_repo
            .as_ref()
            .is_some_and(|r| r.ingress_submodules)
    {
        crate::events::warning(
            &state.events,
            ws.as_ref(),
            "SubmodulesNotFetched",
            format!(
                "{} submodule(s) left out, their directories empty: a submodule of a submodule, or one .gitmodules does not name",
                fetched.submodules
            ),
        );
    }
    let id = cv_id(&fetched.sha);
    let (org, queue) = {
        let idx = state.index.read();
        let org = idx
            .organization_of_namespace(&ns)
            .map(|o| o.name_any())
            .ok_or("the workspace's organization is gone")?;
        // TFE's queue-all-runs: until one run was queued by other means, a push only
        // makes the configuration version.
        let queue = job.queue.unwrap_or_else(|| {
            job.speculative
                || ws.spec.queue_all_runs
                || idx.runs_of(&ns, &ws.name_any()).next().is_some()
        });
        (org, queue)
    };
    let base = ObjectMeta {
        owner_references: ws.controller_owner_ref(&()).map(|o| vec![o]),
        ..write::new_meta(&id, &ns, org, &[(LABEL_WORKSPACE_ID, ws_id.clone())])
    };
    let (token, metadata) = pending_meta(state, base).map_err(|e| e.to_string())?;
    let short = fetched.sha.chars().take(7).collect::<String>();
    let cv = ConfigurationVersion {
        metadata,
        spec: ConfigurationVersionSpec {
            module: None,
            workspace: Some(ws.name_any()),
            auto_queue_runs: queue,
            speculative: job.speculative,
            source: forge.source().to_owned(),
            provisional: false,
            ingress_attributes: Some(Box::new(attrs)),
        },
        status: None,
    };
    match create_pending_raw(state, &HeaderMap::new(), &cv, &id, &token).await {
        Ok(_) => {}
        // The same commit, already brought in (a webhook delivered twice).
        Err(ApiError::Conflict(_)) => return Ok(Some(id)),
        Err(e) => return Err(format!("creating the configuration version: {e}")),
    }
    let file = tokio::fs::File::from_std(
        fetched
            .archive
            .reopen()
            .map_err(|e| format!("reading the archive: {e}"))?,
    );
    let stream = futures::stream::unfold(file, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 256 << 10];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(axum::body::Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    })
    .boxed();
    let uploaded = crate::resources::module_tests::config_versions::upload_archive(
        state,
        &token,
        Body::from_stream(stream),
    )
    .await;
    if let Err(e) = uploaded {
        // A refused archive (over the store's limit, not a tar.gz…) leaves the version
        // errored, saying why, rather than pending.
        let why = format!("uploading the archive: {e}");
        let _ = write::patch_status(
            &write::api::<ConfigurationVersion>(state, &ns),
            &terrace_crds::ids::object_name_for_id(&id),
            json!({"status": "errored", "errorMessage": why}),
        )
        .await;
        return Err(why);
    }
    super::mark_repository(state, &ws, None).await;
    crate::events::workspace_event(
        &state.events,
        &ws,
        "VcsIngress",
        format!(
            "configuration version {id} from {short} of {}{}",
            job.attrs.identifier,
            if job.speculative {
                " (a pull request's speculative plan)"
            } else if queue || job.queue.is_some() {
                ""
            } else {
                " (not queued: queue-all-runs is off and the workspace has no run yet)"
            }
        ),
    );
    Ok(Some(id))
}

/// The configuration version of the latest commit of the branch workspace `ws` follows
/// (TFE's run without a configuration version on a VCS-driven workspace), fetched now;
/// None when the workspace follows no repository through a connection that exists.
pub async fn latest(state: &AppState, ws: Arc<Workspace>) -> Option<Result<String, String>> {
    let repo = ws.spec.vcs_repo.clone()?;
    let conn = state
        .index
        .read()
        .oauth_tokens()
        .get(repo.oauth_token_id.as_deref()?)
        .cloned()?;
    let forge = Forge::of(&conn.spec.service_provider);
    let http = conn.spec.http_url.clone().unwrap_or_default();
    let url = vcs::clone_url(forge, &http, &repo.identifier);
    let result = async {
        let branch = match repo.branch.as_deref().filter(|b| !b.is_empty()) {
            Some(b) => b.to_owned(),
            None => {
                let credentials = credentials(state, &conn).await?;
                let timeout =
                    std::time::Duration::from_secs(state.settings.vcs_fetch_timeout_seconds);
                crate::vcs::default_branch_of(url.clone(), credentials, timeout)
                    .await
                    .map_err(|e| e.to_string())?
            }
        };
        let job = Job {
            ws: ws.clone(),
            conn: conn.clone(),
            git_ref: format!("refs/heads/{branch}"),
            attrs: IngressAttributes {
                identifier: repo.identifier.clone(),
                branch,
                clone_url: url.clone(),
                on_default_branch: repo.branch.as_deref().is_none_or(str::is_empty),
                oauth_token_id: id_of(conn.as_ref()),
                ..IngressAttributes::default()
            },
            speculative: false,
            check_branch: None,
            queue: Some(false),
        };
        ingest(state, job)
            .await?
            .ok_or_else(|| "the commit was not brought in".to_owned())
    }
    .await;
    Some(result)
}

/// In the background: [`supersede_now`].
pub fn supersede(state: AppState, ws: Arc<Workspace>, pr: u64) {
    tokio::spawn(async move {
        supersede_now(&state, &ws, i64::try_from(pr).unwrap_or_default()).await;
    });
}

/// Discards (or cancels, once it runs) the unfinished speculative runs of pull request
/// `pr` in workspace `ws`: an updated or closed pull request's older plan is of no use.
pub async fn supersede_now(state: &AppState, ws: &Workspace, pr: i64) {
    let ns = ws.namespace().unwrap_or_default();
    let object = ws.name_any();
    let stale: Vec<Arc<Run>> = {
        let idx = state.index.read();
        let of_pr: Vec<String> = idx
            .configuration_versions_of(&ns, &object)
            .filter(|c| {
                c.spec
                    .ingress_attributes
                    .as_ref()
                    .is_some_and(|i| i.pull_request_number == Some(pr))
            })
            .map(|c| c.name_any())
            .collect();
        idx.runs_of(&ns, &object)
            .filter(|r| {
                r.spec.plan_only
                    && of_pr.contains(&r.spec.configuration_version)
                    && !crate::documents::runs::state_of(r).is_final()
            })
            .cloned()
            .collect()
    };
    let now = crate::render::now();
    for r in stale {
        let s = crate::documents::runs::state_of(&r);
        let patch = if s.is_discardable() {
            json!({
                "status": RunState::Discarded.as_str(),
                "statusTimestamps": {run::timestamp_key(RunState::Discarded): now},
                "actedBy": {"discard": "terrace (superseded by a newer commit of the pull request)"},
            })
        } else if s.is_cancelable() {
            json!({"cancelRequestedAt": now, "actedBy": {"cancel": "terrace (superseded by a newer commit of the pull request)"}})
        } else {
            continue;
        };
        if let Err(e) =
            write::patch_status(&write::api::<Run>(state, &ns), &r.name_any(), patch).await
        {
            tracing::warn!(run = %r.name_any(), error = %e, "a superseded speculative run was not stopped");
        }
    }
}
