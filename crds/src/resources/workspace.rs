use super::default_true;
use crate::common::{DataRetentionPolicy, EffectiveTagBinding, TagBinding};

crd_kind! {
    /// A workspace: running infrastructure managed by terrace, in an organization's namespace
    /// and one of its projects. Field names are the camelCase of the TFE API attributes.
    /// Defaults shown are the TFE create defaults; `terraformVersion` (latest release) and the
    /// organization-dependent defaults are applied by the API server.
    #[kube(
        kind = "Workspace",
        doc = "A workspace: running infrastructure managed by terrace, in an organization's namespace and one of its projects (HCP Terraform / TFE workspace).",
        namespaced,
        status = "WorkspaceStatus",
        shortname = "tfws",
        printcolumn = r#"{"name":"TFE Name","type":"string","jsonPath":".spec.name","description":"The workspace's TFE name."}"#,
        printcolumn = r#"{"name":"Project","type":"string","jsonPath":".spec.project","description":"Project object of the workspace (empty: the organization's default project)."}"#,
        printcolumn = r#"{"name":"Execution","type":"string","jsonPath":".spec.executionMode","description":"Execution mode."}"#,
        printcolumn = r#"{"name":"Locked","type":"string","jsonPath":".metadata.annotations.terrace\\.dev/locked-by","description":"Holder of the workspace lock, if locked."}"#,
        printcolumn = r#"{"name":"Health","type":"string","jsonPath":".status.health.state","description":"The latest health assessment: Healthy, Drifted, ChecksFailed, Drifted+ChecksFailed or Errored."}"#
    )]
    columns: wide_id, age;
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!(has(self.executionMode) && has(self.operations))",
         "message": "operations cannot be given together with executionMode (operations is deprecated)"},
        {"rule": "!has(self.executionMode) || self.executionMode != 'agent' || (has(self.agentPoolId) && self.agentPoolId != '')",
         "message": "agentPoolId is required when executionMode is agent"},
        {"rule": "!has(self.agentPoolId) || (has(self.executionMode) && self.executionMode == 'agent')",
         "message": "agentPoolId can only be given with executionMode agent (not with remote, local or operations)"},
        {"rule": "!(has(self.projectRemoteState) && self.projectRemoteState && has(self.globalRemoteState) && self.globalRemoteState)",
         "message": "projectRemoteState cannot be enabled when globalRemoteState is enabled"},
        {"rule": "!has(self.settingOverwrites) || !has(self.settingOverwrites.executionMode) || !self.settingOverwrites.executionMode || has(self.executionMode)",
         "message": "executionMode must be given when settingOverwrites.executionMode is true"},
        {"rule": "!has(self.assessmentsEnabled) || !self.assessmentsEnabled || ((!has(self.executionMode) || self.executionMode != 'local') && (!has(self.operations) || self.operations))",
         "message": "assessmentsEnabled needs remote or agent execution (not executionMode local)"}
    ]))]
    pub struct WorkspaceSpec {
        /// The workspace's TFE name: letters, digits, `-` and `_`, unique within the
        /// organization. Renaming changes the workspace's URL in the API.
        #[schemars(regex(pattern = r"^[A-Za-z0-9_-]+$"), length(min = 1, max = 90))]
        pub name: String,
        /// Name of the Project object (same namespace) the workspace belongs to. Empty: the
        /// organization's default project.
        pub project: Option<String>,
        /// Workspace description.
        pub description: Option<String>,
        /// ID of an agent pool of the organization (`apool-…`). Required when executionMode is
        /// agent; not allowed otherwise.
        pub agent_pool_id: Option<String>,
        /// Whether destroy plans can be queued.
        #[serde(default = "default_true")]
        pub allow_destroy_plan: bool,
        /// Health assessments (formerly drift detection): a refresh-only plan on a schedule
        /// reports drift and failing checks (docs/health.md). Needs remote or agent
        /// execution; the organization's assessmentsEnforced enables them for every
        /// workspace.
        #[serde(default)]
        pub assessments_enabled: bool,
        /// Apply automatically after a successful plan (runs from VCS, UI or CLI).
        #[serde(default)]
        pub auto_apply: bool,
        /// Apply automatically for runs started by run triggers.
        #[serde(default)]
        pub auto_apply_run_trigger: bool,
        /// Time of the next scheduled destroy run (RFC 3339).
        #[schemars(extend("format" = "date-time"))]
        pub auto_destroy_at: Option<Box<str>>,
        /// Inactivity period before a destroy run is queued: 1-4 digits greater than 0
        /// followed by `d` or `h` (for example `14d`, `36h`).
        #[schemars(regex(
            pattern = r"^([1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9])[dh]$"
        ))]
        pub auto_destroy_activity_duration: Option<Box<str>>,
        /// The auto-destroy activity duration came from the workspace's project when it was
        /// created (TFE's `inherits-project-auto-destroy`); setting one clears it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub inherits_project_auto_destroy: bool,
        /// Execution mode: remote, local (state storage only) or agent. Not together with
        /// operations. Absent: the organization's default execution mode.
        #[schemars(extend("enum" = ["remote", "local", "agent"]))]
        pub execution_mode: Option<String>,
        /// Start runs only for changes matching triggerPrefixes or triggerPatterns; when
        /// false, any push triggers a run.
        #[serde(default = "default_true")]
        pub file_triggers_enabled: bool,
        /// When true every workspace of the organization may read this workspace's state;
        /// when false only the approved remoteStateConsumers may.
        #[serde(default)]
        pub global_remote_state: bool,
        /// When true the workspaces of the same project may read this workspace's state (not
        /// together with globalRemoteState).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub project_remote_state: bool,
        /// Deprecated, use executionMode. false means state storage only (local), true remote.
        /// Not together with executionMode.
        pub operations: Option<bool>,
        /// When false, VCS-triggered runs are not queued until one run was queued manually.
        #[serde(default)]
        pub queue_all_runs: bool,
        /// Friendly name of the client that created the workspace (created-via label).
        pub source_name: Option<Box<str>>,
        /// URL of the creating client or a related resource.
        pub source_url: Option<Box<str>>,
        /// Whether automatic speculative plans (for example on pull requests) are allowed.
        #[serde(default = "default_true")]
        pub speculative_enabled: bool,
        /// Structured run output: runs log the engine's JSON UI, which the terraform CLI
        /// renders (its structured plan output) and other readers get as text; when false
        /// the engine's plain text is the log.
        #[serde(default = "default_true")]
        pub structured_run_output_enabled: bool,
        /// Engine version or constraint (for example `1.9.5` or `~> 1.9.0`). Absent: the
        /// latest release.
        pub terraform_version: Option<String>,
        /// Glob patterns of monitored files, relative to the repository root.
        #[serde(default)]
        pub trigger_patterns: Vec<String>,
        /// Monitored path prefixes in addition to the working directory.
        #[serde(default)]
        pub trigger_prefixes: Vec<String>,
        /// Relative path in which execution takes place. Absent: the repository root.
        pub working_directory: Option<Box<str>>,
        /// Which organization-level defaults this workspace overrides (true, the default) or
        /// inherits (false).
        pub setting_overwrites: Option<SettingOverwrites>,
        // Boxed: rarely set, and without it a cached Workspace (the API index, the
        // operator's cache) would take more than 1 KiB (issue 17).
        /// The VCS repository the workspace is linked to. Absent: none.
        pub vcs_repo: Option<Box<VcsRepo>>,
        /// Flat string tags (legacy; the organization's tag list is derived from these).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend("x-kubernetes-list-type" = "set"))]
        pub tags: Vec<String>,
        /// Key-value tags bound directly to the workspace, in order (at most 10).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(
            length(max = 10),
            extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"])
        )]
        pub tag_bindings: Vec<TagBinding>,
        /// Workspaces (IDs `ws-…` or TFE names in the same organization) allowed to read this
        /// workspace's state while globalRemoteState is false.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub remote_state_consumers: Vec<String>,
        /// Workspaces (IDs `ws-…` or TFE names in the same organization) whose successful
        /// applies queue a run in this one (TFE's inbound run triggers), at most 20.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 20))]
        pub run_trigger_sources: Vec<String>,
        /// SSH key used for module sources: an SshKey ID (`sshkey-…`) or the name of an
        /// SshKey object in this namespace.
        pub ssh_key: Option<Box<str>>,
        /// Data retention policy of this workspace (self-hosted edition). Absent: the
        /// organization default.
        pub data_retention_policy: Option<DataRetentionPolicy>,
    }
}

crd_struct! {
    /// Settings with organization-level defaults. true (the default): the workspace's own
    /// value applies; false: the organization default is inherited.
    #[derive(Default, Eq)]
    pub struct SettingOverwrites {
        /// Whether executionMode is the workspace's own (true) or the organization's default.
        pub execution_mode: Option<bool>,
        /// Whether agentPoolId is the workspace's own (true) or the organization's default.
        pub agent_pool: Option<bool>,
    }
}

crd_struct! {
    /// A linked VCS repository.
    #[derive(Default, Eq)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!(has(self.oauthTokenId) && has(self.vcsAppInstallationId))",
         "message": "oauthTokenId cannot be combined with vcsAppInstallationId"},
        {"rule": "has(self.oauthTokenId) || has(self.vcsAppInstallationId)",
         "message": "one of oauthTokenId or vcsAppInstallationId is required"}
    ]))]
    pub struct VcsRepo {
        /// Repository identifier, `:org/:repo` (Azure DevOps: `:org/:project/_git/:repo`).
        #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]+/([A-Za-z0-9_. -]+/_git/)?[A-Za-z0-9_.-]+$"))]
        pub identifier: String,
        /// Branch to use. Empty or absent: the repository's default branch.
        pub branch: Option<String>,
        /// Fetch submodules when cloning.
        #[serde(default)]
        pub ingress_submodules: bool,
        /// ID of the VCS OAuth token (`ot-…`) from the oauth-tokens endpoint.
        pub oauth_token_id: Option<String>,
        /// ID of a VCS app installation (the vendor's `github-app-installation-id`). Cannot be
        /// combined with oauthTokenId.
        #[serde(alias = "githubAppInstallationId")]
        pub vcs_app_installation_id: Option<String>,
        /// Regular expression; a VCS event with a matching Git tag triggers a run.
        pub tags_regex: Option<String>,
    }
}

crd_struct! {
    /// Performance attributes over the past 30 runs that errored or applied.
    #[derive(Default)]
    pub struct WorkspaceMetrics {
        /// Average apply phase time, milliseconds.
        pub apply_duration_average: Option<i64>,
        /// Average plan phase time, milliseconds.
        pub plan_duration_average: Option<i64>,
        /// Run failures caused by a policy check failure.
        pub policy_check_failures: Option<i64>,
        /// Count of failed runs.
        pub run_failures: Option<i64>,
        /// Number of runs taken into account.
        pub workspace_kpis_run_count: Option<i64>,
    }
}

kind_status! {
    /// Observed state of a workspace, owned by the workspace controller.
    pub struct WorkspaceStatus {
        /// The workspace's ID (`ws-…`), also in the `terrace.dev/id` label.
        pub id: Option<String>,
        /// ID of the workspace's project.
        pub project_id: Option<String>,
        /// Number of resources the workspace's current state manages.
        #[serde(default)]
        pub resource_count: i64,
        /// Time of the latest change of state or configuration (RFC 3339).
        pub latest_change_at: Option<Box<str>>,
        /// Flat tag names, sorted.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub tag_names: Vec<String>,
        /// Direct tag bindings plus those inherited from the project.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub effective_tag_bindings: Vec<EffectiveTagBinding>,
        /// Number of approved remote state consumers.
        pub remote_state_consumer_count: Option<i64>,
        // Boxed: rarely set, and without it a cached Workspace (the API index, the
        // operator's cache) would take more than 1 KiB (issue 17).
        /// ID of the data retention policy set on the workspace (`drp-…`).
        pub data_retention_policy_id: Option<Box<str>>,
        // Boxed: rarely set, and without it a cached Workspace (the API index, the
        // operator's cache) would take more than 1 KiB (issue 17).
        /// Performance attributes.
        #[serde(default)]
        pub metrics: Box<WorkspaceMetrics>,
        /// Runs archived in the blob store (older than the organization's
        /// `settings.history.runs` newest; the API still serves them).
        pub archived_runs: Option<i64>,
        // Boxed: only assessed workspaces have it (issue 17's cache size).
        /// The workspace's health: its current assessment result (docs/health.md), from
        /// which the conditions Drifted and ChecksPassing are derived.
        pub health: Option<Box<WorkspaceHealth>>,
    }
}

crd_struct! {
    /// A workspace's current health assessment result.
    #[derive(Default)]
    pub struct WorkspaceHealth {
        /// The assessment result's ID (`asmtres-…`).
        pub result_id: Option<String>,
        /// The assessment Run object that produced it.
        pub run: Option<String>,
        /// When that assessment started (RFC 3339).
        pub started_at: Option<String>,
        /// When it ended (RFC 3339): the result's time.
        pub assessed_at: Option<String>,
        /// Healthy, Drifted, ChecksFailed, Drifted+ChecksFailed or Errored.
        pub state: Option<String>,
        /// What it found.
        #[serde(default)]
        pub summary: crate::assessment::AssessmentSummary,
    }
}

impl WorkspaceSpec {
    /// A spec with SPEC.md's create defaults (the serde defaults, which are also the CRD
    /// schema defaults) and an empty name.
    pub fn default_for_create() -> WorkspaceSpec {
        serde_json::from_value(serde_json::json!({ "name": "" })).unwrap_or_default()
    }
}

/// The name of the ConfigMap that claims workspace name `name` in its organization's
/// namespace (a hash of the lowercased name): the API server creates it before the
/// workspace, so of concurrent creates of one name exactly one wins. Its data holds
/// `name` and `workspace-id`.
pub fn name_claim(name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(name.to_ascii_lowercase().as_bytes());
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!("terrace-wsname-{hex}")
}

/// The data key of a name claim that holds the workspace's ID.
pub const CLAIM_WORKSPACE_ID: &str = "workspace-id";

impl WorkspaceSpec {
    /// Whether this workspace shares its state (and outputs) with workspace `consumer`:
    /// with every workspace of the organization (`globalRemoteState`), with those of its
    /// project (`projectRemoteState`, `same_project`), or with those it lists as remote
    /// state consumers (by ID or name). TFE's rule for `terraform_remote_state`.
    pub fn shares_state_with(&self, consumer: super::Named<'_>, same_project: bool) -> bool {
        self.global_remote_state
            || (self.project_remote_state && same_project)
            || consumer.listed_in(&self.remote_state_consumers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_defaults_match_spec_table() {
        let s = WorkspaceSpec::default_for_create();
        assert!(s.allow_destroy_plan && s.file_triggers_enabled && s.speculative_enabled);
        assert!(s.structured_run_output_enabled);
        assert!(!s.assessments_enabled && !s.auto_apply && !s.auto_apply_run_trigger);
        assert!(!s.global_remote_state && !s.queue_all_runs);
        assert!(s.trigger_patterns.is_empty() && s.trigger_prefixes.is_empty());
        assert_eq!((s.operations, s.execution_mode.as_deref()), (None, None));
    }

    #[test]
    fn a_workspace_shares_its_state_as_its_settings_say() {
        let me = super::super::Named {
            id: Some("ws-1"),
            name: "consumer",
        };
        let mut p = WorkspaceSpec::default_for_create();
        assert!(!p.shares_state_with(me, true));
        p.remote_state_consumers = vec!["CONSUMER".into()];
        assert!(p.shares_state_with(me, false), "listed by name");
        p.remote_state_consumers = vec!["ws-1".into()];
        assert!(p.shares_state_with(me, false), "listed by ID");
        p.remote_state_consumers.clear();
        p.project_remote_state = true;
        assert!(p.shares_state_with(me, true) && !p.shares_state_with(me, false));
        p.project_remote_state = false;
        p.global_remote_state = true;
        assert!(p.shares_state_with(me, false));
    }

    /// The operator's cache and the API server's index each hold every workspace as an
    /// `Arc<Workspace>`: 16 bytes of counts and the struct. jemalloc rounds 1,008 + 16
    /// bytes to 1 KiB and anything larger to 1.25 KiB, 256 bytes more per workspace in
    /// each (issue 43). Rarely set fields are `Option<Box<str>>` or boxed structs for it.
    #[test]
    fn a_cached_workspace_fits_in_one_kib() {
        assert!(
            std::mem::size_of::<Workspace>() <= 1008,
            "Workspace is {} bytes: box a rarely set field",
            std::mem::size_of::<Workspace>()
        );
    }
}
