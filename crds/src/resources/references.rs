use super::default_true;
use crate::common::SecretKeyRef;

kind_status! {
    /// Observed state shared by the reference kinds (SshKey, AgentPool, OAuthToken).
    pub struct ReferenceStatus {
        /// The object's TFE ID (`sshkey-…`, `apool-…`, `ot-…`).
        pub id: Option<String>,
    }
}

crd_kind! {
    /// An SSH private key workspaces use to fetch private module sources. The key itself is in
    /// a Secret and is never returned by the API.
    #[kube(
        kind = "SshKey",
        doc = "An SSH private key (kept in a Secret) workspaces use for private module sources.",
        namespaced,
        status = "ReferenceStatus",
        shortname = "tfssh"
    )]
    columns: tfe_name, id, age;
    pub struct SshKeySpec {
        /// Display name of the key.
        #[schemars(length(min = 1))]
        pub name: String,
        /// Secret key holding the PEM private key.
        pub private_key_secret_ref: SecretKeyRef,
    }
}

crd_kind! {
    /// A pool of agents that run workspaces with execution mode `agent`.
    #[kube(
        kind = "AgentPool",
        doc = "A pool of agents running workspaces with execution mode agent.",
        namespaced,
        status = "ReferenceStatus",
        shortname = "tfpool"
    )]
    columns: tfe_name, id, age;
    pub struct AgentPoolSpec {
        /// Name of the agent pool.
        #[schemars(length(min = 1))]
        pub name: String,
        /// Whether every workspace of the organization may use the pool.
        #[serde(default = "default_true")]
        pub organization_scoped: bool,
        /// Workspaces (IDs or TFE names) allowed to use the pool when not organization-scoped.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub allowed_workspaces: Vec<String>,
        /// Projects (IDs or names) whose workspaces may use the pool when not
        /// organization-scoped.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub allowed_projects: Vec<String>,
        /// Workspaces (IDs or TFE names) that may not use the pool although it is
        /// organization-scoped or allowed to their project (an allowedWorkspaces entry
        /// still admits them).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub excluded_workspaces: Vec<String>,
        /// What the Pods of runs in this pool get over the organization's Pod template (node
        /// selector, tolerations, service account, labels, annotations, resources): the
        /// Kubernetes meaning of an agent pool.
        pub pod_template: Option<super::PodTemplateOverrides>,
    }
}

crd_kind! {
    /// A VCS OAuth connection token workspaces reference through vcsRepo.oauthTokenId.
    #[kube(
        kind = "OAuthToken",
        doc = "A VCS OAuth connection token referenced by workspaces' vcsRepo.oauthTokenId.",
        namespaced,
        status = "ReferenceStatus",
        shortname = "tfot",
        printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.serviceProvider"}"#
    )]
    columns: id, age;
    pub struct OAuthTokenSpec {
        /// VCS provider: TFE's (github, github_enterprise, gitlab_hosted,
        /// gitlab_community_edition, gitlab_enterprise_edition, bitbucket_hosted,
        /// bitbucket_server, bitbucket_data_center, ado_server, ado_services), or gitea,
        /// forgejo, git (a plain Git server with no API, polled).
        #[schemars(extend("enum" = ["github", "github_enterprise", "gitlab_hosted", "gitlab_community_edition", "gitlab_enterprise_edition", "bitbucket_hosted", "bitbucket_server", "bitbucket_data_center", "ado_server", "ado_services", "gitea", "forgejo", "git"]))]
        pub service_provider: String,
        /// Display name of the connection.
        pub name: Option<String>,
        /// Base URL of the VCS provider's web interface (repositories are cloned under it).
        pub http_url: Option<String>,
        /// Base URL of the VCS provider's API (commit statuses go there).
        pub api_url: Option<String>,
        /// Secret key holding the access token (a personal access token).
        pub token_secret_ref: Option<SecretKeyRef>,
        /// Secret key holding the secret the provider signs webhooks with.
        pub webhook_secret_ref: Option<SecretKeyRef>,
        /// Secret key holding an SSH private key of the connection (TFE's `ssh-key`).
        pub ssh_key_secret_ref: Option<SecretKeyRef>,
        /// The OAuth application's key (TFE's `key`; Bitbucket Data Center's consumer
        /// key), kept and shown.
        pub key: Option<String>,
        /// The RSA public key of the application link (Bitbucket Server / Data Center),
        /// kept and shown.
        pub rsa_public_key: Option<String>,
        /// ID of the agent pool (`apool-…`) that reaches the server (TFE's private VCS),
        /// kept and shown.
        pub agent_pool_id: Option<String>,
        /// Whether every workspace of the organization may use the connection (else only
        /// those of `projects`).
        #[serde(default = "default_true")]
        pub organization_scoped: bool,
        /// Projects (IDs) whose workspaces may use the connection.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub projects: Vec<String>,
        /// Whether a pull request from a fork gets a speculative plan (with the
        /// workspace's variables). Off by default.
        #[serde(default)]
        pub allow_fork_pull_requests: bool,
        /// Seconds between polls of each workspace's branch (for servers whose webhooks
        /// cannot reach terrace). Absent or 0: not polled.
        pub poll_interval_seconds: Option<u32>,
    }
}

/// A workspace or project as an agent pool's lists name it: by ID or by TFE name (names
/// compare case-insensitively, as TFE names are unique that way).
#[derive(Clone, Copy, Debug)]
pub struct Named<'a> {
    pub id: Option<&'a str>,
    pub name: &'a str,
}

impl Named<'_> {
    /// Whether `entries` names it.
    pub fn listed_in(&self, entries: &[String]) -> bool {
        entries
            .iter()
            .any(|e| Some(e.as_str()) == self.id || e.eq_ignore_ascii_case(self.name))
    }
}

impl AgentPoolSpec {
    /// Whether workspace `ws` of project `project` may use the pool: named in
    /// allowedWorkspaces; otherwise not excluded, and the pool is organization-scoped or
    /// allowed to the project.
    pub fn admits(&self, ws: Named<'_>, project: Option<Named<'_>>) -> bool {
        if ws.listed_in(&self.allowed_workspaces) {
            return true;
        }
        !ws.listed_in(&self.excluded_workspaces)
            && (self.organization_scoped
                || project.is_some_and(|p| p.listed_in(&self.allowed_projects)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(scoped: bool, ws: &[&str], projects: &[&str], excluded: &[&str]) -> AgentPoolSpec {
        let v = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect();
        AgentPoolSpec {
            name: "p".into(),
            organization_scoped: scoped,
            allowed_workspaces: v(ws),
            allowed_projects: v(projects),
            excluded_workspaces: v(excluded),
            pod_template: None,
        }
    }

    #[test]
    fn a_pool_admits_what_its_lists_say() {
        let ws = Named {
            id: Some("ws-1"),
            name: "Web",
        };
        let prj = Some(Named {
            id: Some("prj-1"),
            name: "Apps",
        });
        assert!(pool(true, &[], &[], &[]).admits(ws, prj));
        assert!(!pool(true, &[], &[], &["web"]).admits(ws, prj));
        assert!(pool(true, &["ws-1"], &[], &["web"]).admits(ws, prj));
        assert!(!pool(false, &[], &[], &[]).admits(ws, prj));
        assert!(pool(false, &["WEB"], &[], &[]).admits(ws, prj));
        assert!(pool(false, &[], &["prj-1"], &[]).admits(ws, prj));
        assert!(pool(false, &[], &["apps"], &[]).admits(ws, prj));
        assert!(!pool(false, &[], &["apps"], &["ws-1"]).admits(ws, prj));
        assert!(!pool(false, &[], &["apps"], &[]).admits(ws, None));
    }
}
