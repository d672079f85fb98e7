//! The Run: a plan (and apply) of a workspace's configuration version, executed in Pods
//! by the operator's run controller (docs/runs.md). Its state machine and the rules of
//! the runs API are in [`crate::run`].

use super::{RunVariable, default_true};

crd_kind! {
    /// What a run does, as created through `POST /runs` (or `kubectl apply`): immutable.
    #[kube(
        kind = "Run",
        doc = "A plan and apply of a workspace's configuration version, executed in Pods.",
        namespaced,
        status = "RunStatus",
        shortname = "tfrun",
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".status.workspaceName","description":"The workspace's TFE name."}"#,
        printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
        printcolumn = r#"{"name":"Add","type":"integer","jsonPath":".status.plan.resourceAdditions"}"#,
        printcolumn = r#"{"name":"Change","type":"integer","jsonPath":".status.plan.resourceChanges"}"#,
        printcolumn = r#"{"name":"Destroy","type":"integer","jsonPath":".status.plan.resourceDestructions"}"#,
        printcolumn = r#"{"name":"Origin","type":"string","priority":1,"jsonPath":".spec.origin","description":"The commit a run from a repository plans."}"#
    )]
    columns: wide_id, age;
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
        /// Where a run from a repository came from, in words: `org/repo@abc1234 (main)`,
        /// `org/repo@abc1234 (tag v1.0.0)`, `org/repo#7@abc1234` (a pull request).
        pub origin: Option<String>,
        /// The user who queued it (`user:NAME`).
        pub created_by: Option<String>,
        /// Apply even when the plan has no changes (TFE's `allow-empty-apply`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub allow_empty_apply: bool,
        /// TFE's `allow-config-generation`: kept and returned (the engine's `-generate-config-out`
        /// is not run by terrace).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub allow_config_generation: bool,
        /// The engine version of a plan-only run (TFE's `terraform-version`), over the
        /// workspace's.
        pub terraform_version: Option<String>,
        /// TFE's `debugging-mode`: kept and returned (the engine log level is not raised).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub debugging_mode: bool,
        /// TFE's `invoke-action-addrs`: kept and returned.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub invoke_action_addrs: Vec<String>,
        /// TFE's `policy-paths` (relative directories of policy configuration, a beta of
        /// HCP Terraform's): kept and returned; terrace's policy checks come from policy
        /// sets.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub policy_paths: Vec<String>,
        /// A health assessment (docs/health.md), created by the operator: a plan-only,
        /// refresh-only plan with detailed exit codes that never locks the workspace,
        /// never writes state and is no run of the runs API; its result is the
        /// assessment result `asmtres-…` of the same ID.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub assessment: bool,
    }
}

fn default_source() -> String {
    "tfe-api".to_owned()
}

crd_struct! {
    /// The plan or the apply of a run.
    #[derive(Default)]
    pub struct RunPhaseStatus {
        /// `pending`, `queued`, `running`, `finished`, `errored`, `canceled`, `unreachable`.
        pub status: Option<String>,
        /// The plan changes something (resources or outputs).
        pub has_changes: Option<bool>,
        /// Resources created.
        pub resource_additions: Option<i64>,
        /// Resources changed in place.
        pub resource_changes: Option<i64>,
        /// Resources destroyed.
        pub resource_destructions: Option<i64>,
        /// Resources imported.
        pub resource_imports: Option<i64>,
        /// When its Pod was created.
        pub started_at: Option<String>,
        /// When it ended.
        pub finished_at: Option<String>,
        /// The Pod that runs (ran) this phase.
        pub pod_name: Option<String>,
        /// What the phase's Pod first waited for before it could start (`waiting for a
        /// node: …`), kept once seen: the first line of the phase's log.
        pub wait_note: Option<String>,
    }
}

kind_status! {
    /// What the controller and the API recorded of a run.
    pub struct RunStatus {
        /// The run's API ID (`run-…`).
        pub id: Option<String>,
        /// Its workspace's TFE name (`spec.workspace` is the object's name): kubectl's
        /// WORKSPACE column. Written with the run's ID and at each move of its state.
        pub workspace_name: Option<String>,
        /// The run's status, as TFE's.
        #[schemars(extend("enum" = ["pending", "plan_queued", "planning", "planned", "planned_and_finished",
            "planned_and_saved", "post_plan_completed", "post_plan_awaiting_decision", "confirmed", "apply_queued", "applying", "applied", "discarded",
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
        pub confirmed_by: Option<String>,
        /// When a cancel was asked.
        pub cancel_requested_at: Option<String>,
        /// When a force-cancel was asked.
        pub force_cancel_requested_at: Option<String>,
        /// Why the run errored, or what it waits for.
        pub message: Option<String>,
        /// Who asked for each action other than the confirmation (`discard`, `cancel`,
        /// `force-cancel`; a force-execute discards as `discard`): `user:NAME`.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        pub acted_by: std::collections::BTreeMap<String, String>,
        /// The plan's policy checks (TFE's post-plan task stage), recorded when the plan
        /// is stored.
        pub policy_evaluation: Option<crate::resources::RunPolicyEvaluation>,
        /// Comments on the run, oldest first (`POST /runs/:id/comments`, or the
        /// `comment` of an action).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub comments: Vec<RunComment>,
        /// An assessment's result, recorded when it ends.
        pub assessment: Option<Box<RunAssessment>>,
    }
}

crd_struct! {
    /// The result of a health assessment run, and what it changed of its workspace's
    /// health.
    #[derive(Default)]
    pub struct RunAssessment {
        /// What it found.
        #[serde(default)]
        pub summary: crate::assessment::AssessmentSummary,
        /// The notification triggers it fires (`assessment:drifted`, …), against the
        /// workspace's previous result.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub triggers: Vec<String>,
        /// The workspace's previous result (`asmtres-…`), when there was one.
        pub prior_result_id: Option<String>,
        /// What the previous result found.
        pub prior: Option<crate::assessment::AssessmentSummary>,
    }
}

crd_struct! {
    /// A comment on a run.
    pub struct RunComment {
        /// Its API ID (`wsc-…`).
        pub id: String,
        /// The text.
        pub body: String,
        /// Who wrote it (`user:NAME`).
        pub author: String,
        /// When, RFC 3339.
        pub created_at: String,
        /// The action it came with (`apply`, `discard`, `cancel`, `force-cancel`), if any.
        pub action: Option<String>,
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
