use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::default_true;
use crate::common::SecretKeyRef;

kind_status! {
    /// Observed state shared by the reference kinds (SshKey, AgentPool, OAuthToken).
    pub struct ReferenceStatus {
        /// The object's TFE ID (`sshkey-…`, `apool-…`, `ot-…`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub id: Option<String>,
    }
}

/// An SSH private key workspaces use to fetch private module sources. The key itself is in
/// a Secret and is never returned by the API.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "terrace.dev",
    version = "v1alpha1",
    kind = "SshKey",
    doc = "An SSH private key (kept in a Secret) workspaces use for private module sources.",
    plural = "sshkeys",
    namespaced,
    status = "ReferenceStatus",
    shortname = "tfssh",
    category = "terrace",
    printcolumn = r#"{"name":"TFE Name","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SshKeySpec {
    /// Display name of the key.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Secret key holding the PEM private key.
    pub private_key_secret_ref: SecretKeyRef,
}

/// A pool of agents that run workspaces with execution mode `agent`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "terrace.dev",
    version = "v1alpha1",
    kind = "AgentPool",
    doc = "A pool of agents running workspaces with execution mode agent.",
    plural = "agentpools",
    namespaced,
    status = "ReferenceStatus",
    shortname = "tfpool",
    category = "terrace",
    printcolumn = r#"{"name":"TFE Name","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
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
    /// What the Pods of runs in this pool get over the organization's Pod template (node
    /// selector, tolerations, service account, labels, annotations, resources): the
    /// Kubernetes meaning of an agent pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<super::PodTemplateOverrides>,
}

/// A VCS OAuth connection token workspaces reference through vcsRepo.oauthTokenId.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "terrace.dev",
    version = "v1alpha1",
    kind = "OAuthToken",
    doc = "A VCS OAuth connection token referenced by workspaces' vcsRepo.oauthTokenId.",
    plural = "oauthtokens",
    namespaced,
    status = "ReferenceStatus",
    shortname = "tfot",
    category = "terrace",
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.serviceProvider"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct OAuthTokenSpec {
    /// VCS provider, e.g. github, github_enterprise, gitlab_hosted, bitbucket_hosted,
    /// ado_services.
    #[schemars(extend("enum" = ["github", "github_enterprise", "gitlab_hosted", "gitlab_community_edition", "gitlab_enterprise_edition", "bitbucket_hosted", "bitbucket_server", "bitbucket_data_center", "ado_server", "ado_services"]))]
    pub service_provider: String,
    /// Display name of the connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Base URL of the VCS provider's web interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_url: Option<String>,
    /// Base URL of the VCS provider's API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// Secret key holding the OAuth token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeyRef>,
}
