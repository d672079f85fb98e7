//! The Run: a plan (and apply) of a workspace's configuration version, executed in Pods
//! by the operator's run controller (docs/runs.md). Its state machine and the rules of
//! the runs API are in [`crate::run`].

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{RunVariable, default_true};

/// What a run does, as created through `POST /runs` (or `kubectl apply`): immutable.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "terrace.dev",
    version = "v1alpha1",
    kind = "Run",
    doc = "A plan and apply of a workspace's configuration version, executed in Pods.",
    plural = "runs",
    namespaced,
    status = "RunStatus",
    shortname = "tfrun",
    category = "terrace",
    printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".spec.workspace"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"Add","type":"integer","jsonPath":".status.plan.resourceAdditions"}"#,
    printcolumn = r#"{"name":"Change","type":"integer","jsonPath":".status.plan.resourceChanges"}"#,
    printcolumn = r#"{"name":"Destroy","type":"integer","jsonPath":".status.plan.resourceDestructions"}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".metadata.labels.terrace\\.dev/id","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "self == oldSelf", "message": "the spec of a run is immutable"}
]))]
pub struct RunSpec {
    /// The Workspace object's name.
    #[schemars(length(min = 1))]
    pub workspace: String,
    /// The ConfigurationVersion object's name.
    #[schemars(length(min = 1))]
    pub configuration_version: String,
    /// Plan to destroy every resource.
    #[serde(default)]
    pub is_destroy: bool,
    /// Refresh the state before planning.
    #[serde(default = "default_true")]
    pub refresh: bool,
    /// Only refresh the state.
    #[serde(default)]
    pub refresh_only: bool,
    /// Plan only: never applied, neither locks the workspace nor waits in its queue.
    #[serde(default)]
    pub plan_only: bool,
    /// Apply after a successful plan without waiting for a confirmation.
    #[serde(default)]
    pub auto_apply: bool,
    /// A saved plan (`terraform plan -out`): it waits `planned_and_saved` to be applied.
    #[serde(default)]
    pub save_plan: bool,
    /// Why the run was queued.
    #[serde(default)]
    pub message: String,
    /// `-target` addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_addrs: Vec<String>,
    /// `-replace` addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace_addrs: Vec<String>,
    /// The run's own input variables (HCL literals), over the workspace's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<RunVariable>,
    /// Who queued it: `tfe-api`, `tfe-configuration-version`, `terraform+cloud`, `terrace`
    /// (auto-destroy).
    #[serde(default = "default_source")]
    pub source: String,
    /// The user who queued it (`user:NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

fn default_source() -> String {
    "tfe-api".to_owned()
}

/// The plan or the apply of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPhaseStatus {
    /// `pending`, `queued`, `running`, `finished`, `errored`, `canceled`, `unreachable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The plan changes something (resources or outputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_changes: Option<bool>,
    /// Resources created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_additions: Option<i64>,
    /// Resources changed in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_changes: Option<i64>,
    /// Resources destroyed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_destructions: Option<i64>,
    /// Resources imported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_imports: Option<i64>,
    /// When its Pod was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// The Pod that runs (ran) this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
}

kind_status! {
    /// What the controller and the API recorded of a run.
    pub struct RunStatus {
        /// The run's API ID (`run-…`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub id: Option<String>,
        /// The run's status, as TFE's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(extend("enum" = ["pending", "plan_queued", "planning", "planned", "planned_and_finished",
            "planned_and_saved", "confirmed", "apply_queued", "applying", "applied", "discarded",
            "errored", "canceled", "force_canceled"]))]
        pub status: Option<String>,
        /// `<status>-at` → RFC 3339 time, as TFE's `status-timestamps`.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        pub status_timestamps: std::collections::BTreeMap<String, String>,
        /// The plan.
        #[serde(default)]
        pub plan: RunPhaseStatus,
        /// The apply.
        #[serde(default)]
        pub apply: RunPhaseStatus,
        /// Who confirmed the apply (`user:NAME`, or `auto-apply`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub confirmed_by: Option<String>,
        /// When a cancel was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cancel_requested_at: Option<String>,
        /// When a force-cancel was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub force_cancel_requested_at: Option<String>,
        /// Why the run errored, or what it waits for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub message: Option<String>,
    }
}

impl Run {
    /// When the run was queued, in milliseconds (RFC 3339, the API's format): its
    /// `plan-queueable-at` (creation timestamps have whole seconds, and runs created within
    /// one second must keep their order), else its creation time. Orders a workspace's
    /// queue and its list of runs.
    pub fn queued_at(&self) -> String {
        self.status
            .as_ref()
            .and_then(|s| s.status_timestamps.get(crate::run::QUEUEABLE_AT).cloned())
            .or_else(|| {
                self.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| crate::common::timestamp(&t.0))
            })
            .unwrap_or_default()
    }
}
