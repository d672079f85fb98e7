//! A webhook's event in one shape, whatever forge sent it: a push to a branch or a tag,
//! or a pull request (a merge request on GitLab) opened, updated or closed.

use serde_json::Value;

use super::Forge;

/// What a webhook says happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Commits or a tag pushed.
    Push(Push),
    /// A pull request changed.
    PullRequest(PullRequest),
    /// The forge checks that the hook works (GitHub's `ping`).
    Ping,
    /// An event terrace does not act on (its name).
    Other(String),
}

/// Who caused an event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sender {
    pub username: String,
    pub avatar_url: String,
    pub html_url: String,
}

/// A push.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Push {
    /// The repository as workspaces name it (`org/repo`).
    pub repository: String,
    /// The branch pushed to; None for a tag.
    pub branch: Option<String>,
    /// The tag pushed; None for a branch.
    pub tag: Option<String>,
    /// The commit the ref points at now.
    pub sha: String,
    /// The ref was deleted.
    pub deleted: bool,
    /// Every file the pushed commits add, change or remove; None when the event does not
    /// say (a forge that does not list them, or too many commits): then every workspace's
    /// triggers take it.
    pub changed_files: Option<Vec<String>>,
    /// The head commit's message.
    pub message: String,
    /// The head commit's page.
    pub commit_url: Option<String>,
    /// The compare page of the push.
    pub compare_url: Option<String>,
    /// The repository's default branch when the event says.
    pub default_branch: Option<String>,
    pub sender: Sender,
}

/// What happened to a pull request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrAction {
    /// Opened or reopened.
    Opened,
    /// New commits on its head.
    Updated,
    /// Closed or merged.
    Closed,
    /// Anything else (edited, labeled, …): no plan.
    Other,
}

/// A pull request event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequest {
    /// The repository it is against (`org/repo`).
    pub repository: String,
    pub number: u64,
    pub action: PrAction,
    pub url: String,
    pub title: String,
    pub body: String,
    /// The head commit, planned.
    pub head_sha: String,
    /// The head branch.
    pub head_branch: String,
    /// The branch it would merge into.
    pub base_branch: String,
    /// Its head is in another repository (a fork).
    pub fork: bool,
    pub sender: Sender,
}

/// Why a webhook's body could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the webhook's body does not read as a {forge} event: {reason}")]
pub struct EventError {
    pub forge: &'static str,
    pub reason: String,
}

fn s(v: &Value, path: &[&str]) -> String {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

fn opt(v: &Value, path: &[&str]) -> Option<String> {
    Some(s(v, path)).filter(|x| !x.is_empty())
}

/// The files the commits of a GitHub/Gitea/GitLab push add, change or remove, in order,
/// once each; None when the event lists no commits' files.
fn changed_files(commits: &Value) -> Option<Vec<String>> {
    let list = commits.as_array()?;
    let mut out: Vec<String> = Vec::new();
    for c in list {
        for key in ["added", "modified", "removed"] {
            for f in c[key].as_array().into_iter().flatten() {
                if let Some(f) = f.as_str()
                    && !out.iter().any(|o| o == f)
                {
                    out.push(f.to_owned());
                }
            }
        }
    }
    (!list.is_empty()).then_some(out)
}

/// Splits a full ref into a branch or a tag.
fn branch_or_tag(r: &str) -> (Option<String>, Option<String>) {
    if let Some(b) = r.strip_prefix("refs/heads/") {
        (Some(b.to_owned()), None)
    } else if let Some(t) = r.strip_prefix("refs/tags/") {
        (None, Some(t.to_owned()))
    } else {
        (None, None)
    }
}

const ZERO_SHA: &str = "0000000000000000000000000000000000000000";

/// Reads a webhook of `forge`: `header` answers a request header by its lower-case name.
pub fn parse(
    forge: Forge,
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<Event, EventError> {
    let name = match forge {
        Forge::GitHub => "GitHub",
        Forge::Gitea => "Gitea",
        Forge::GitLab => "GitLab",
        Forge::BitbucketServer => "Bitbucket Server",
        _ => "VCS",
    };
    let err = |reason: String| EventError {
        forge: name,
        reason,
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| err(e.to_string()))?;
    if !v.is_object() {
        return Err(err("not a JSON object".into()));
    }
    let event = match forge {
        Forge::GitHub => header("x-github-event"),
        Forge::Gitea => header("x-gitea-event")
            .or_else(|| header("x-forgejo-event"))
            .or_else(|| header("x-github-event")),
        Forge::GitLab => header("x-gitlab-event"),
        Forge::BitbucketServer => header("x-event-key"),
        _ => None,
    }
    .ok_or_else(|| err("the request names no event".into()))?;
    Ok(match (forge, event.as_str()) {
        (_, "ping" | "diagnostics:ping") => Event::Ping,
        (Forge::GitHub | Forge::Gitea, "push") => Event::Push(github_push(&v)),
        (Forge::GitHub | Forge::Gitea, "pull_request") => {
            Event::PullRequest(github_pull_request(forge, &v))
        }
        (Forge::GitLab, "Push Hook" | "Tag Push Hook") => Event::Push(gitlab_push(&v)),
        (Forge::GitLab, "Merge Request Hook") => Event::PullRequest(gitlab_merge_request(&v)),
        (Forge::BitbucketServer, "repo:refs_changed") => match bitbucket_push(&v) {
            Some(p) => Event::Push(p),
            None => Event::Other(event),
        },
        (
            Forge::BitbucketServer,
            "pr:opened" | "pr:from_ref_updated" | "pr:merged" | "pr:declined",
        ) => Event::PullRequest(bitbucket_pull_request(&v, &event)),
        _ => Event::Other(event),
    })
}

fn github_sender(v: &Value) -> Sender {
    Sender {
        username: s(v, &["sender", "login"]),
        avatar_url: s(v, &["sender", "avatar_url"]),
        html_url: s(v, &["sender", "html_url"]),
    }
}

/// GitHub's push (Gitea's has the same shape).
fn github_push(v: &Value) -> Push {
    let (branch, tag) = branch_or_tag(&s(v, &["ref"]));
    let sha = s(v, &["after"]);
    Push {
        repository: s(v, &["repository", "full_name"]),
        branch,
        tag,
        deleted: v["deleted"].as_bool().unwrap_or(false) || sha == ZERO_SHA,
        sha,
        changed_files: changed_files(&v["commits"]),
        message: s(v, &["head_commit", "message"]),
        commit_url: opt(v, &["head_commit", "url"]),
        compare_url: opt(v, &["compare"]).or_else(|| opt(v, &["compare_url"])),
        default_branch: opt(v, &["repository", "default_branch"]),
        sender: github_sender(v),
    }
}

fn pr_action(a: &str) -> PrAction {
    match a {
        "opened" | "reopened" | "open" | "reopen" => PrAction::Opened,
        "synchronize" | "synchronized" | "update" => PrAction::Updated,
        "closed" | "close" | "merge" => PrAction::Closed,
        _ => PrAction::Other,
    }
}

/// GitHub's pull_request (Gitea's has the same shape).
fn github_pull_request(forge: Forge, v: &Value) -> PullRequest {
    let pr = &v["pull_request"];
    let head_repo = s(pr, &["head", "repo", "full_name"]);
    let base_repo = s(pr, &["base", "repo", "full_name"]);
    let _ = forge;
    PullRequest {
        repository: Some(base_repo.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| s(v, &["repository", "full_name"])),
        number: v["number"]
            .as_u64()
            .or_else(|| pr["number"].as_u64())
            .unwrap_or_default(),
        action: pr_action(&s(v, &["action"])),
        url: s(pr, &["html_url"]),
        title: s(pr, &["title"]),
        body: s(pr, &["body"]),
        head_sha: s(pr, &["head", "sha"]),
        head_branch: s(pr, &["head", "ref"]),
        base_branch: s(pr, &["base", "ref"]),
        fork: !head_repo.is_empty() && !base_repo.is_empty() && head_repo != base_repo,
        sender: github_sender(v),
    }
}

fn gitlab_push(v: &Value) -> Push {
    let (branch, tag) = branch_or_tag(&s(v, &["ref"]));
    let sha = opt(v, &["checkout_sha"]).unwrap_or_else(|| s(v, &["after"]));
    let commits = v["commits"].as_array();
    let head = commits
        .and_then(|c| c.iter().find(|c| s(c, &["id"]) == sha))
        .or_else(|| commits.and_then(|c| c.last()));
    let web = s(v, &["project", "web_url"]);
    Push {
        repository: s(v, &["project", "path_with_namespace"]),
        branch,
        tag,
        deleted: s(v, &["after"]) == ZERO_SHA,
        changed_files: changed_files(&v["commits"]),
        message: head.map(|c| s(c, &["message"])).unwrap_or_default(),
        commit_url: head.and_then(|c| opt(c, &["url"])),
        compare_url: (!web.is_empty())
            .then(|| format!("{web}/-/compare/{}...{sha}", s(v, &["before"]))),
        sha,
        default_branch: opt(v, &["project", "default_branch"]),
        sender: Sender {
            username: s(v, &["user_username"]),
            avatar_url: s(v, &["user_avatar"]),
            html_url: String::new(),
        },
    }
}

fn gitlab_merge_request(v: &Value) -> PullRequest {
    let mr = &v["object_attributes"];
    let source = mr["source_project_id"].as_u64();
    let target = mr["target_project_id"].as_u64();
    let action = s(mr, &["action"]);
    PullRequest {
        repository: s(v, &["project", "path_with_namespace"]),
        number: mr["iid"].as_u64().unwrap_or_default(),
        action: pr_action(&action),
        url: s(mr, &["url"]),
        title: s(mr, &["title"]),
        body: s(mr, &["description"]),
        head_sha: s(mr, &["last_commit", "id"]),
        head_branch: s(mr, &["source_branch"]),
        base_branch: s(mr, &["target_branch"]),
        fork: source.is_some() && target.is_some() && source != target,
        sender: Sender {
            username: s(v, &["user", "username"]),
            avatar_url: s(v, &["user", "avatar_url"]),
            html_url: String::new(),
        },
    }
}

fn bitbucket_repository(repo: &Value) -> String {
    format!("{}/{}", s(repo, &["project", "key"]), s(repo, &["slug"]))
}

/// Bitbucket Server's `repo:refs_changed`: its first change (it lists no files).
fn bitbucket_push(v: &Value) -> Option<Push> {
    let change = v["changes"].as_array()?.first()?;
    let (branch, tag) = branch_or_tag(&s(change, &["refId"]));
    let (branch, tag) = if branch.is_none() && tag.is_none() {
        branch_or_tag(&s(change, &["ref", "id"]))
    } else {
        (branch, tag)
    };
    let sha = s(change, &["toHash"]);
    Some(Push {
        repository: bitbucket_repository(&v["repository"]),
        branch,
        tag,
        deleted: s(change, &["type"]) == "DELETE" || sha == ZERO_SHA,
        sha,
        changed_files: None,
        message: String::new(),
        commit_url: None,
        compare_url: None,
        default_branch: None,
        sender: Sender {
            username: s(v, &["actor", "name"]),
            ..Sender::default()
        },
    })
}

fn bitbucket_pull_request(v: &Value, event: &str) -> PullRequest {
    let pr = &v["pullRequest"];
    let head_repo = bitbucket_repository(&pr["fromRef"]["repository"]);
    let base_repo = bitbucket_repository(&pr["toRef"]["repository"]);
    PullRequest {
        repository: base_repo.clone(),
        number: pr["id"].as_u64().unwrap_or_default(),
        action: match event {
            "pr:opened" => PrAction::Opened,
            "pr:from_ref_updated" => PrAction::Updated,
            _ => PrAction::Closed,
        },
        url: pr["links"]["self"][0]["href"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        title: s(pr, &["title"]),
        body: s(pr, &["description"]),
        head_sha: s(pr, &["fromRef", "latestCommit"]),
        head_branch: s(pr, &["fromRef", "displayId"]),
        base_branch: s(pr, &["toRef", "displayId"]),
        fork: head_repo != base_repo,
        sender: Sender {
            username: s(v, &["actor", "name"]),
            ..Sender::default()
        },
    }
}

/// The ref a pull request's head is fetched from on `forge`.
pub fn pull_request_ref(forge: Forge, number: u64) -> String {
    match forge {
        Forge::GitLab => format!("refs/merge-requests/{number}/head"),
        Forge::BitbucketServer => format!("refs/pull-requests/{number}/from"),
        _ => format!("refs/pull/{number}/head"),
    }
}
