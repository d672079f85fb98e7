use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, TagBinding};

/// A project groups workspaces of an organization; its tag bindings are inherited by its
/// workspaces. Every organization has a default project.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "terrace.dev",
    version = "v1alpha1",
    kind = "Project",
    doc = "A project of an organization: a group of workspaces whose tag bindings they inherit.",
    plural = "projects",
    namespaced,
    status = "ProjectStatus",
    shortname = "tfprj",
    category = "terrace",
    printcolumn = r#"{"name":"TFE Name","type":"string","jsonPath":".spec.name"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProjectSpec {
    /// The project's name, unique within the organization (1-40 characters: letters,
    /// digits, spaces, `-`, `_`).
    #[schemars(regex(pattern = r"^[A-Za-z0-9 _-]+$"), length(min = 1, max = 40))]
    pub name: String,
    /// Description of the project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Key-value tags inherited by every workspace of the project.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"]))]
    pub tag_bindings: Vec<TagBinding>,
}

/// Observed state of a project.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectStatus {
    /// The project's ID (`prj-…`), also in the `terrace.dev/id` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Number of workspaces in the project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_count: Option<i64>,
    /// Generation last acted on by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// kstatus conditions: Ready, Reconciling, Stalled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
