use crate::common::TagBinding;

crd_kind! {
    /// A project groups workspaces of an organization; its tag bindings are inherited by its
    /// workspaces. Every organization has a default project.
    #[kube(
        kind = "Project",
        doc = "A project of an organization: a group of workspaces whose tag bindings they inherit.",
        namespaced,
        status = "ProjectStatus",
        shortname = "tfprj"
    )]
    columns: tfe_name, id, age;
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!has(self.defaultAgentPoolId) || (has(self.defaultExecutionMode) && self.defaultExecutionMode == 'agent')",
         "message": "defaultAgentPoolId must not be specified unless using 'agent' execution mode"},
        {"rule": "!has(self.defaultExecutionMode) || self.defaultExecutionMode != 'agent' || has(self.defaultAgentPoolId)",
         "message": "defaultAgentPoolId is required when defaultExecutionMode is agent"}
    ]))]
    pub struct ProjectSpec {
        /// The project's name, unique within the organization (1-40 characters: letters,
        /// digits, spaces, `-`, `_`).
        #[schemars(regex(pattern = r"^[A-Za-z0-9 _-]+$"), length(min = 1, max = 40))]
        pub name: String,
        /// Description of the project.
        pub description: Option<String>,
        /// Key-value tags inherited by every workspace of the project (at most 10).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(
            length(max = 10),
            extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"])
        )]
        pub tag_bindings: Vec<TagBinding>,
        /// Execution mode of the project's workspaces that inherit their mode (`remote`,
        /// `local` or `agent`); applies when settingOverwrites.defaultExecutionMode is true,
        /// otherwise the organization's default does.
        #[schemars(extend("enum" = ["remote", "local", "agent"]))]
        pub default_execution_mode: Option<String>,
        /// Agent pool ID (`apool-…`) of the project's default `agent` execution mode.
        pub default_agent_pool_id: Option<String>,
        /// Which defaults the project sets itself (true) instead of inheriting the
        /// organization's.
        pub setting_overwrites: Option<ProjectSettingOverwrites>,
        /// Inactivity period after which the project's workspaces are destroyed
        /// (`<1-9999><d|h>`).
        #[schemars(regex(
            pattern = r"^([1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9])[dh]$"
        ))]
        pub auto_destroy_activity_duration: Option<String>,
    }
}

crd_struct! {
    /// Which project defaults override the organization's.
    #[derive(Default, Eq)]
    pub struct ProjectSettingOverwrites {
        /// Whether defaultExecutionMode is the project's own (true) or the organization's.
        pub default_execution_mode: Option<bool>,
        /// Whether defaultAgentPoolId is the project's own (true) or the organization's.
        pub default_agent_pool: Option<bool>,
    }
}

kind_status! {
    /// Observed state of a project.
    pub struct ProjectStatus {
        /// The project's ID (`prj-…`), also in the `terrace.dev/id` label.
        pub id: Option<String>,
        /// Number of workspaces in the project.
        pub workspace_count: Option<i64>,
    }
}
