use k8s_openapi::api::core::v1::{
    PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
};
use std::collections::BTreeMap;

use crate::common::DataRetentionPolicy;

crd_kind! {
    /// An HCP Terraform / TFE organization. Cluster-scoped: its objects (projects, workspaces,
    /// modules, test runs) live in the organization's namespace, which terrace creates together
    /// with the organization's default project.
    #[kube(
        kind = "Organization",
        doc = "An HCP Terraform / TFE organization; its objects live in the namespace it names.",
        status = "OrganizationStatus",
        shortname = "tforg",
        printcolumn = r#"{"name":"TFE Name","type":"string","jsonPath":".status.name","description":"The organization's TFE name."}"#,
        printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".status.namespace","description":"Namespace holding the organization's objects."}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
    )]
    columns: age;
    pub struct OrganizationSpec {
        /// The organization's TFE name (letters, digits, `-`, `_`). Defaults to metadata.name.
        #[schemars(regex(pattern = r"^[A-Za-z0-9_-]+$"), length(min = 1, max = 90))]
        pub name: Option<String>,
        /// Namespace holding the organization's objects. Defaults to metadata.name. Immutable.
        #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
        pub namespace: Option<String>,
        /// Notification email of the organization.
        pub email: Option<String>,
        /// Organization settings.
        #[serde(default)]
        pub settings: OrganizationSettings,
    }
}

crd_struct! {
    /// Organization-wide settings and defaults.
    pub struct OrganizationSettings {
        /// Whether workspace admins may force delete workspaces (by default only organization
        /// owners may).
        #[serde(default)]
        pub allow_force_delete_workspaces: bool,
        /// Execution mode of workspaces that inherit it (setting-overwrites.execution-mode false
        /// or no execution mode given): remote, local or agent.
        #[serde(default = "default_execution_mode")]
        #[schemars(extend("enum" = ["remote", "local", "agent"]))]
        pub default_execution_mode: String,
        /// Agent pool used by workspaces inheriting the default execution mode `agent`.
        pub default_agent_pool_id: Option<String>,
        /// Whether health assessments are enforced for all workspaces, overriding each
        /// workspace's assessments-enabled.
        #[serde(default)]
        pub assessments_enforced: bool,
        /// Default of global-remote-state for new workspaces that do not give it (self-hosted
        /// edition: chosen by administrators).
        #[serde(default)]
        pub default_global_remote_state: bool,
        /// Data retention policy applying to workspaces that have none of their own.
        pub default_data_retention_policy: Option<DataRetentionPolicy>,
        /// Overrides for module test runs of this organization.
        #[serde(default)]
        pub test_runs: TestRunSettings,
        /// How many runs of each workspace and test runs of each module stay custom
        /// resources; older, final ones are archived in the blob store and still served by
        /// the API (docs/runs.md, "History").
        #[serde(default)]
        pub history: HistorySettings,
        /// TFE's `session-timeout` (minutes of inactivity before a UI session ends; default
        /// 20160). Kept and returned for clients; terrace has no sessions, callers
        /// authenticate with Kubernetes tokens.
        #[schemars(range(min = 1))]
        pub session_timeout: Option<i64>,
        /// TFE's `session-remember` (minutes a UI session is remembered; default 20160).
        /// Kept and returned; it governs nothing in terrace.
        #[schemars(range(min = 1))]
        pub session_remember: Option<i64>,
    }
}

impl Default for OrganizationSettings {
    fn default() -> Self {
        Self {
            allow_force_delete_workspaces: false,
            default_execution_mode: default_execution_mode(),
            default_agent_pool_id: None,
            assessments_enforced: false,
            default_global_remote_state: false,
            default_data_retention_policy: None,
            test_runs: TestRunSettings::default(),
            history: HistorySettings::default(),
            session_timeout: None,
            session_remember: None,
        }
    }
}

fn default_execution_mode() -> String {
    "remote".to_owned()
}

crd_struct! {
    /// How much run history stays in the cluster.
    pub struct HistorySettings {
        /// Runs kept as custom resources per workspace (the newest; default 100).
        #[serde(default = "default_keep")]
        #[schemars(range(min = 1))]
        pub runs: i32,
        /// Test runs kept as custom resources per registry module (the newest; default
        /// 100).
        #[serde(default = "default_keep")]
        #[schemars(range(min = 1))]
        pub test_runs: i32,
    }
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            runs: default_keep(),
            test_runs: default_keep(),
        }
    }
}

fn default_keep() -> i32 {
    crate::history::DEFAULT_KEEP
}

crd_struct! {
    /// How the organization's module test runs execute.
    #[derive(Default)]
    pub struct TestRunSettings {
        /// Most test runs of this organization running at once (in addition to the global limit).
        #[schemars(range(min = 1))]
        pub concurrency: Option<i32>,
        /// Engine container image (default from the operator settings, OpenTofu).
        pub engine_image: Option<String>,
        /// Overrides applied to the Pods that run tests.
        #[serde(default)]
        pub pod_template: PodTemplateOverrides,
        /// The default of a registry module's `publishOnlyTested`: a version is installable
        /// only once its tests passed.
        #[serde(default)]
        pub publish_only_tested: bool,
    }
}

crd_struct! {
    /// Overrides for the Pods terrace creates for test runs.
    #[derive(Default)]
    pub struct PodTemplateOverrides {
        /// Extra labels on test Pods.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub labels: BTreeMap<String, String>,
        /// Extra annotations on test Pods.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub annotations: BTreeMap<String, String>,
        /// Resources of the engine container.
        pub resources: Option<ResourceRequirements>,
        /// ServiceAccount the test Pods run as.
        pub service_account_name: Option<String>,
        /// Node selector of test Pods.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub node_selector: BTreeMap<String, String>,
        /// Tolerations of test Pods.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub tolerations: Vec<Toleration>,
        /// The Pods' `securityContext`, in place of terrace's default (which satisfies Pod
        /// Security `restricted`: non-root user and group 65532, `fsGroup` 65532,
        /// `RuntimeDefault` seccomp). Set it whole: it is not merged field by field.
        pub security_context: Option<PodSecurityContext>,
        /// Every container's `securityContext`, in place of terrace's default (no
        /// privilege escalation, every capability dropped, a read-only root filesystem).
        pub container_security_context: Option<SecurityContext>,
        /// When the kubelet pulls the engine and terrace images (default: the operator's
        /// `--pod-image-pull-policy`, itself `IfNotPresent`).
        pub image_pull_policy: Option<ImagePullPolicy>,
    }
}

/// When the kubelet pulls a container's image (Kubernetes' `imagePullPolicy`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub enum ImagePullPolicy {
    /// On every start.
    Always,
    /// Only when the node does not have it (images preloaded on air-gapped nodes work).
    IfNotPresent,
    /// Never: the node must have it.
    Never,
}

impl ImagePullPolicy {
    /// Kubernetes' spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ImagePullPolicy::Always => "Always",
            ImagePullPolicy::IfNotPresent => "IfNotPresent",
            ImagePullPolicy::Never => "Never",
        }
    }

    /// The policy `s` spells (Kubernetes' spelling), if any.
    pub fn parse(s: &str) -> Result<ImagePullPolicy, String> {
        match s {
            "Always" => Ok(ImagePullPolicy::Always),
            "IfNotPresent" => Ok(ImagePullPolicy::IfNotPresent),
            "Never" => Ok(ImagePullPolicy::Never),
            other => Err(format!(
                "{other:?} is not an image pull policy: Always, IfNotPresent or Never"
            )),
        }
    }
}

impl PodTemplateOverrides {
    /// These overrides (an organization's) on top of `defaults` (the operator's settings):
    /// labels, annotations and node selector are merged key by key with these winning;
    /// resources, service account, security contexts and pull policy are these when set;
    /// tolerations are both lists, without repeats.
    pub fn over(&self, defaults: &PodTemplateOverrides) -> PodTemplateOverrides {
        let merged = |d: &BTreeMap<String, String>, o: &BTreeMap<String, String>| {
            let mut m = d.clone();
            m.extend(o.iter().map(|(k, v)| (k.clone(), v.clone())));
            m
        };
        let mut tolerations = defaults.tolerations.clone();
        for t in &self.tolerations {
            if !tolerations.contains(t) {
                tolerations.push(t.clone());
            }
        }
        PodTemplateOverrides {
            labels: merged(&defaults.labels, &self.labels),
            annotations: merged(&defaults.annotations, &self.annotations),
            resources: self
                .resources
                .clone()
                .or_else(|| defaults.resources.clone()),
            service_account_name: self
                .service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .or_else(|| defaults.service_account_name.clone()),
            node_selector: merged(&defaults.node_selector, &self.node_selector),
            tolerations,
            security_context: self
                .security_context
                .clone()
                .or_else(|| defaults.security_context.clone()),
            container_security_context: self
                .container_security_context
                .clone()
                .or_else(|| defaults.container_security_context.clone()),
            image_pull_policy: self.image_pull_policy.or(defaults.image_pull_policy),
        }
    }
}

kind_status! {
    /// Observed state of an organization.
    pub struct OrganizationStatus {
        /// The organization's effective TFE name.
        pub name: Option<String>,
        /// The namespace holding the organization's objects.
        pub namespace: Option<String>,
        /// ID of the organization's default project.
        pub default_project_id: Option<String>,
    }
}

impl Organization {
    /// The TFE name: spec.name, else metadata.name.
    pub fn tfe_name(&self) -> &str {
        self.spec
            .name
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or_default()
    }

    /// The namespace of the organization's objects: spec.namespace, else metadata.name.
    pub fn target_namespace(&self) -> &str {
        self.spec
            .namespace
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Toleration;

    fn toleration(key: &str) -> Toleration {
        Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn organization_overrides_win_over_settings() {
        let defaults: PodTemplateOverrides = serde_json::from_value(serde_json::json!({
            "labels": {"team": "platform", "tier": "tests"},
            "annotations": {"a": "1"},
            "resources": {"limits": {"memory": "1Gi"}},
            "serviceAccountName": "terrace-tests",
            "nodeSelector": {"pool": "tests"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]
        }))
        .unwrap();
        let org: PodTemplateOverrides = serde_json::from_value(serde_json::json!({
            "labels": {"team": "acme"},
            "nodeSelector": {"zone": "a"},
            "tolerations": [
                {"key": "dedicated", "operator": "Exists"},
                {"key": "acme", "operator": "Exists"}
            ]
        }))
        .unwrap();
        let m = org.over(&defaults);
        assert_eq!(m.labels["team"], "acme");
        assert_eq!(m.labels["tier"], "tests");
        assert_eq!(m.annotations["a"], "1");
        assert_eq!(m.service_account_name.as_deref(), Some("terrace-tests"));
        assert_eq!(m.resources, defaults.resources);
        assert_eq!(m.node_selector.len(), 2);
        assert_eq!(m.tolerations, [toleration("dedicated"), toleration("acme")]);

        // The organization's own resources and service account replace the defaults.
        let own = PodTemplateOverrides {
            service_account_name: Some("acme-tests".into()),
            resources: Some(Default::default()),
            ..Default::default()
        };
        let m = own.over(&defaults);
        assert_eq!(m.service_account_name.as_deref(), Some("acme-tests"));
        assert_eq!(m.resources, Some(Default::default()));
        // No overrides at all: the defaults.
        assert_eq!(PodTemplateOverrides::default().over(&defaults), defaults);
    }
}
