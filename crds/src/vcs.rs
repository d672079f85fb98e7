//! VCS-driven workspaces (docs/vcs.md), the pure part: what kind of server a connection
//! talks to, the URLs of a repository on it, a webhook's signature and its event in one
//! shape ([`events`]), which pushes a workspace's triggers take ([`triggers`]), and the
//! commit status a run reports back ([`status`]).

pub mod events;
pub mod status;
pub mod triggers;

#[cfg(test)]
mod tests;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The kind of server a connection (an OAuthToken object) talks to, from its
/// `serviceProvider`: how its webhooks are signed and shaped, where its repositories and
/// commit statuses are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forge {
    /// GitHub and GitHub Enterprise.
    GitHub,
    /// GitLab (hosted, community and enterprise editions).
    GitLab,
    /// Gitea and Forgejo.
    Gitea,
    /// Bitbucket Server and Data Center.
    BitbucketServer,
    /// Bitbucket Cloud: cloned, not driven by its webhooks (it does not sign them).
    BitbucketCloud,
    /// Azure DevOps Server and Services: cloned and polled.
    AzureDevOps,
    /// A plain Git server with no API: cloned and polled.
    Git,
}

/// The `serviceProvider` values a connection takes (TFE's, and terrace's `gitea`,
/// `forgejo` and `git`).
pub const SERVICE_PROVIDERS: [&str; 13] = [
    "github",
    "github_enterprise",
    "gitlab_hosted",
    "gitlab_community_edition",
    "gitlab_enterprise_edition",
    "bitbucket_hosted",
    "bitbucket_server",
    "bitbucket_data_center",
    "ado_server",
    "ado_services",
    "gitea",
    "forgejo",
    "git",
];

impl Forge {
    /// The forge of service provider `sp` (one of [`SERVICE_PROVIDERS`]; anything else is
    /// a plain Git server).
    pub fn of(sp: &str) -> Forge {
        match sp {
            "github" | "github_enterprise" => Forge::GitHub,
            "gitlab_hosted" | "gitlab_community_edition" | "gitlab_enterprise_edition" => {
                Forge::GitLab
            }
            "gitea" | "forgejo" => Forge::Gitea,
            "bitbucket_server" | "bitbucket_data_center" => Forge::BitbucketServer,
            "bitbucket_hosted" => Forge::BitbucketCloud,
            "ado_server" | "ado_services" => Forge::AzureDevOps,
            _ => Forge::Git,
        }
    }

    /// The `source` of the configuration versions its events make (TFE's words).
    pub fn source(self) -> &'static str {
        match self {
            Forge::GitHub => "github",
            Forge::GitLab => "gitlab",
            Forge::Gitea => "gitea",
            Forge::BitbucketServer | Forge::BitbucketCloud => "bitbucket",
            Forge::AzureDevOps => "ado",
            Forge::Git => "git",
        }
    }

    /// Whether terrace takes its webhooks (it verifies their signatures); the others are
    /// polled.
    pub fn has_webhooks(self) -> bool {
        matches!(
            self,
            Forge::GitHub | Forge::GitLab | Forge::Gitea | Forge::BitbucketServer
        )
    }

    /// The user name a token is sent with over HTTPS (the token is the password).
    pub fn clone_username(self) -> &'static str {
        match self {
            Forge::GitLab => "oauth2",
            Forge::BitbucketServer | Forge::BitbucketCloud => "x-token-auth",
            _ => "x-access-token",
        }
    }
}

/// TFE's display name of service provider `sp`.
pub fn display_name(sp: &str) -> &'static str {
    match sp {
        "github" => "GitHub",
        "github_enterprise" => "GitHub Enterprise",
        "gitlab_hosted" => "GitLab.com",
        "gitlab_community_edition" => "GitLab Community Edition",
        "gitlab_enterprise_edition" => "GitLab Enterprise Edition",
        "bitbucket_hosted" => "Bitbucket Cloud",
        "bitbucket_server" => "Bitbucket Server",
        "bitbucket_data_center" => "Bitbucket Data Center",
        "ado_server" => "Azure DevOps Server",
        "ado_services" => "Azure DevOps Services",
        "gitea" => "Gitea",
        "forgejo" => "Forgejo",
        _ => "Git",
    }
}

/// Bitbucket Server names a repository `PROJECT/repo`; its pages and clone URLs put
/// them apart.
fn project_and_repo(identifier: &str) -> (&str, &str) {
    identifier.split_once('/').unwrap_or(("", identifier))
}

/// The web page of repository `identifier` on a server whose web interface is at
/// `http_url` (TFE's `repository-http-url`).
pub fn repository_url(forge: Forge, http_url: &str, identifier: &str) -> String {
    let base = http_url.trim_end_matches('/');
    match forge {
        Forge::BitbucketServer => {
            let (project, repo) = project_and_repo(identifier);
            format!("{base}/projects/{project}/repos/{repo}")
        }
        _ => format!("{base}/{identifier}"),
    }
}

/// The HTTP(S) URL repository `identifier` is cloned from.
pub fn clone_url(forge: Forge, http_url: &str, identifier: &str) -> String {
    let base = http_url.trim_end_matches('/');
    match forge {
        Forge::BitbucketServer => {
            let (project, repo) = project_and_repo(identifier);
            format!("{base}/scm/{}/{repo}.git", project.to_lowercase())
        }
        Forge::AzureDevOps => format!("{base}/{identifier}"),
        _ => format!("{base}/{identifier}.git"),
    }
}

/// The web page of commit `sha` of repository `identifier`; None where the server has
/// no pages (a plain Git server).
pub fn commit_url(forge: Forge, http_url: &str, identifier: &str, sha: &str) -> Option<String> {
    let repo = repository_url(forge, http_url, identifier);
    match forge {
        Forge::Git => None,
        Forge::GitLab => Some(format!("{repo}/-/commit/{sha}")),
        Forge::BitbucketServer => Some(format!("{repo}/commits/{sha}")),
        _ => Some(format!("{repo}/commit/{sha}")),
    }
}

/// A run's `origin` from the ingress attributes of its configuration version:
/// `org/repo@abc1234 (main)`, `org/repo@abc1234 (tag v1.0.0)`, `org/repo#7@abc1234`.
pub fn origin(i: &crate::IngressAttributes) -> String {
    let short: String = i.commit_sha.chars().take(7).collect();
    match (i.pull_request_number, &i.tag) {
        (Some(n), _) => format!("{}#{n}@{short}", i.identifier),
        (None, Some(tag)) => format!("{}@{short} (tag {tag})", i.identifier),
        (None, None) => format!("{}@{short} ({})", i.identifier, i.branch),
    }
}

/// Why a webhook was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The header carrying the signature is absent.
    #[error("the request carries no {0} header")]
    Missing(&'static str),
    /// It is there but does not match the connection's webhook secret.
    #[error("the {0} signature does not match the connection's webhook secret")]
    Mismatch(&'static str),
    /// The connection's server sends no webhooks terrace takes.
    #[error("this connection's service provider sends no webhooks terrace takes (it is polled)")]
    NotTaken,
}

/// Checks a webhook's signature as `forge` signs it, with the connection's `secret`:
/// GitHub's `X-Hub-Signature-256` (`sha256=` and the HMAC-SHA256 of the body), Gitea's
/// and Forgejo's `X-Gitea-Signature`/`X-Forgejo-Signature` (the bare hex HMAC-SHA256),
/// GitLab's `X-Gitlab-Token` (the secret itself), Bitbucket Server's `X-Hub-Signature`
/// (`sha256=` and the HMAC-SHA256). `header` answers a request header by its lower-case
/// name. Comparisons take the same time whatever matches.
pub fn verify(
    forge: Forge,
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
    secret: &[u8],
) -> Result<(), SignatureError> {
    let hmac_hex = |given: &str, what: &'static str| {
        let bytes = decode_hex(given.trim()).ok_or(SignatureError::Mismatch(what))?;
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(body);
        mac.verify_slice(&bytes)
            .map_err(|_| SignatureError::Mismatch(what))
    };
    match forge {
        Forge::GitHub => {
            let given = header("x-hub-signature-256")
                .ok_or(SignatureError::Missing("X-Hub-Signature-256"))?;
            let hex = given
                .strip_prefix("sha256=")
                .ok_or(SignatureError::Mismatch("X-Hub-Signature-256"))?;
            hmac_hex(hex, "X-Hub-Signature-256")
        }
        Forge::Gitea => {
            let given = header("x-gitea-signature")
                .or_else(|| header("x-forgejo-signature"))
                .ok_or(SignatureError::Missing("X-Gitea-Signature"))?;
            hmac_hex(&given, "X-Gitea-Signature")
        }
        Forge::BitbucketServer => {
            let given =
                header("x-hub-signature").ok_or(SignatureError::Missing("X-Hub-Signature"))?;
            let hex = given
                .strip_prefix("sha256=")
                .ok_or(SignatureError::Mismatch("X-Hub-Signature"))?;
            hmac_hex(hex, "X-Hub-Signature")
        }
        Forge::GitLab => {
            let given =
                header("x-gitlab-token").ok_or(SignatureError::Missing("X-Gitlab-Token"))?;
            if equal_in_constant_time(given.as_bytes(), secret) {
                Ok(())
            } else {
                Err(SignatureError::Mismatch("X-Gitlab-Token"))
            }
        }
        Forge::BitbucketCloud | Forge::AzureDevOps | Forge::Git => Err(SignatureError::NotTaken),
    }
}

/// Whether `a` and `b` are equal, in a time that depends only on their lengths.
fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The hex HMAC-SHA256 of `body` with `secret`: what GitHub, Gitea and Bitbucket Server
/// sign a webhook with (tests and fixtures sign with it too).
pub fn hmac_sha256_hex(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(body);
    crate::common::hex(&mac.finalize().into_bytes())
}
