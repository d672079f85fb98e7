//! The commit status a run from a repository reports on its commit (a pull request's
//! speculative plan, a push's run), and the documented request of each forge that sets it.

use serde_json::{Value, json};

use super::Forge;
use crate::run::RunState;

/// A commit status, in GitHub's words (each forge gets its own, [`request`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitState {
    Pending,
    Success,
    Failure,
    Error,
}

impl CommitState {
    pub fn as_str(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failure",
            CommitState::Error => "error",
        }
    }
}

/// The status of a run in `state` (`plan_only`: a speculative plan, done once planned),
/// with its description (TFE's words).
pub fn of_run(
    state: RunState,
    plan_only: bool,
    has_changes: Option<bool>,
) -> (CommitState, String) {
    let planned = match has_changes {
        Some(false) => "Terraform plan has no changes.".to_owned(),
        _ => "Terraform plan has changes.".to_owned(),
    };
    match state {
        RunState::Pending | RunState::PlanQueued => {
            (CommitState::Pending, "Terraform plan is queued.".into())
        }
        RunState::Planning => (CommitState::Pending, "Terraform is planning.".into()),
        RunState::PlannedAndFinished => (CommitState::Success, planned),
        RunState::Planned | RunState::PostPlanCompleted | RunState::PlannedAndSaved
            if plan_only =>
        {
            (CommitState::Success, planned)
        }
        RunState::Planned | RunState::PostPlanCompleted | RunState::PlannedAndSaved => (
            CommitState::Pending,
            format!("{planned} Waiting for a confirmation."),
        ),
        RunState::PostPlanAwaitingDecision => (
            CommitState::Failure,
            "A mandatory policy failed; waiting for an override.".into(),
        ),
        RunState::Confirmed | RunState::ApplyQueued | RunState::Applying => {
            (CommitState::Pending, "Terraform is applying.".into())
        }
        RunState::Applied => (CommitState::Success, "Terraform applied.".into()),
        RunState::Errored => (CommitState::Failure, "Terraform run errored.".into()),
        RunState::Discarded => (CommitState::Error, "Run discarded.".into()),
        RunState::Canceled | RunState::ForceCanceled => {
            (CommitState::Error, "Run canceled.".into())
        }
    }
}

/// An HTTP request to a forge's API.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub method: &'static str,
    pub url: String,
    /// The header carrying the token and its value's prefix (the token follows it).
    pub auth: (&'static str, &'static str),
    pub body: Value,
}

/// Percent-encodes a GitLab project path for its API (`group/repo` → `group%2Frepo`).
fn encode_path(p: &str) -> String {
    p.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The request setting status `state` on commit `sha` of repository `identifier`, as
/// `forge` documents it: GitHub's and Gitea's `POST /repos/{owner}/{repo}/statuses/{sha}`,
/// GitLab's `POST /projects/{id}/statuses/{sha}`, Bitbucket Server's
/// `POST /rest/build-status/1.0/commits/{sha}` (under the web URL, not the REST one).
/// `context` names the check (one per workspace); `target_url` is the run's page. None
/// where the forge has no statuses terrace sets.
#[allow(clippy::too_many_arguments)]
pub fn request(
    forge: Forge,
    api_url: &str,
    http_url: &str,
    identifier: &str,
    sha: &str,
    state: CommitState,
    description: &str,
    target_url: &str,
    context: &str,
) -> Option<Request> {
    let api = api_url.trim_end_matches('/');
    match forge {
        Forge::GitHub | Forge::Gitea => Some(Request {
            method: "POST",
            url: format!("{api}/repos/{identifier}/statuses/{sha}"),
            auth: if forge == Forge::GitHub {
                ("Authorization", "Bearer ")
            } else {
                ("Authorization", "token ")
            },
            body: json!({
                "state": state.as_str(),
                "target_url": target_url,
                "description": description,
                "context": context,
            }),
        }),
        Forge::GitLab => Some(Request {
            method: "POST",
            url: format!("{api}/projects/{}/statuses/{sha}", encode_path(identifier)),
            auth: ("PRIVATE-TOKEN", ""),
            body: json!({
                "state": match state {
                    CommitState::Pending => "running",
                    CommitState::Success => "success",
                    CommitState::Failure => "failed",
                    CommitState::Error => "canceled",
                },
                "target_url": target_url,
                "description": description,
                "name": context,
            }),
        }),
        Forge::BitbucketServer => Some(Request {
            method: "POST",
            url: format!(
                "{}/rest/build-status/1.0/commits/{sha}",
                http_url.trim_end_matches('/')
            ),
            auth: ("Authorization", "Bearer "),
            body: json!({
                "state": match state {
                    CommitState::Pending => "INPROGRESS",
                    CommitState::Success => "SUCCESSFUL",
                    CommitState::Failure | CommitState::Error => "FAILED",
                },
                "key": context,
                "name": context,
                "url": target_url,
                "description": description,
            }),
        }),
        Forge::BitbucketCloud | Forge::AzureDevOps | Forge::Git => None,
    }
}
