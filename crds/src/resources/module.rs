use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{default_true, secret_value_rules};
use crate::testrun::{UnknownValue, wire_values};

crd_kind! {
    /// A private registry module of the organization (namespace = the organization's name).
    #[kube(
        kind = "RegistryModule",
        doc = "A private registry module of the organization.",
        namespaced,
        status = "RegistryModuleStatus",
        shortname = "tfmod",
        printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.name"}"#,
        printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.provider"}"#
    )]
    columns: wide_id, age;
    pub struct RegistryModuleSpec {
        /// Module name (letters, digits, `-`, `_`).
        #[schemars(regex(pattern = r"^[A-Za-z0-9_-]+$"), length(min = 1, max = 64))]
        pub name: String,
        /// Provider name of the module (lowercase letters and digits), e.g. `aws`.
        #[schemars(regex(pattern = r"^[a-z0-9]+$"), length(min = 1, max = 64))]
        pub provider: String,
        /// Module namespace; for private modules the organization's name (the default).
        pub namespace: Option<String>,
        /// Registry: only `private` is served.
        #[serde(default = "default_registry")]
        #[schemars(extend("enum" = ["private"]))]
        pub registry_name: String,
        /// Versions are installable only once their tests passed (a terrace extension,
        /// TFE's `test-config.publish-only-tested`). Absent: the organization's
        /// `settings.testRuns.publishOnlyTested` (default false).
        pub publish_only_tested: Option<bool>,
    }
}

fn default_registry() -> String {
    "private".to_owned()
}

kind_status! {
    /// Observed state of a registry module.
    pub struct RegistryModuleStatus {
        /// The module's ID (`mod-…`).
        pub id: Option<String>,
        /// Test runs archived in the blob store (older than the organization's
        /// `settings.history.testRuns` newest; the API still serves them).
        pub archived_test_runs: Option<i64>,
    }
}

crd_kind! {
    /// A configuration version: an uploaded archive of configuration files, owned by a
    /// registry module (for test runs) or a workspace.
    #[kube(
        kind = "ConfigurationVersion",
        doc = "An uploaded archive of configuration files of a registry module or workspace.",
        namespaced,
        status = "ConfigurationVersionStatus",
        shortname = "tfcv",
        printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.module"}"#,
        printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#
    )]
    columns: age;
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "has(self.module) != has(self.workspace)",
         "message": "exactly one of module or workspace must be given"}
    ]))]
    pub struct ConfigurationVersionSpec {
        /// Name of the RegistryModule object (same namespace) this configuration belongs to.
        pub module: Option<String>,
        /// Name of the Workspace object (same namespace) this configuration belongs to.
        pub workspace: Option<String>,
        /// Whether uploading the archive queues a test run automatically.
        #[serde(default = "default_true")]
        pub auto_queue_runs: bool,
        /// Whether this is a plan-only configuration.
        #[serde(default)]
        pub speculative: bool,
        /// Origin of the configuration: `svc-api`, `engine` or `svc-configuration-version`.
        #[serde(default = "default_source")]
        #[schemars(extend("enum" = ["engine", "svc-api", "svc-configuration-version", "tfe-api", "terraform+cloud", "github", "gitlab", "gitea", "bitbucket", "ado", "git"]))]
        pub source: String,
        /// Where a configuration from a repository came from (TFE's ingress attributes):
        /// absent for an upload. Boxed: most versions have none.
        pub ingress_attributes: Option<Box<IngressAttributes>>,
        /// A provisional version never becomes its workspace's current configuration
        /// (TFE's `provisional`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub provisional: bool,
    }
}

fn default_source() -> String {
    "svc-api".to_owned()
}

crd_struct! {
    /// The commit a configuration version was fetched from (TFE's `ingress-attributes`).
    #[derive(Default, Eq)]
    pub struct IngressAttributes {
        /// Repository identifier (`org/repo`).
        pub identifier: String,
        /// Branch of the push or the pull request's head; empty for a tag.
        #[serde(default)]
        pub branch: String,
        /// URL the commit was cloned from.
        #[serde(default)]
        pub clone_url: String,
        /// The commit's message.
        #[serde(default)]
        pub commit_message: String,
        /// The commit's SHA.
        pub commit_sha: String,
        /// The commit's page.
        #[serde(default)]
        pub commit_url: String,
        /// The push's compare page.
        #[serde(default)]
        pub compare_url: String,
        /// Whether it is a pull request's head.
        #[serde(default)]
        pub is_pull_request: bool,
        /// Whether the branch is the repository's default branch.
        #[serde(default)]
        pub on_default_branch: bool,
        /// The pull request's number.
        pub pull_request_number: Option<i64>,
        /// The pull request's page.
        #[serde(default)]
        pub pull_request_url: String,
        /// The pull request's title.
        #[serde(default)]
        pub pull_request_title: String,
        /// The pull request's description.
        #[serde(default)]
        pub pull_request_body: String,
        /// The tag pushed, if it was a tag.
        pub tag: Option<String>,
        /// Who pushed or opened the pull request.
        #[serde(default)]
        pub sender_username: String,
        /// Their avatar.
        #[serde(default)]
        pub sender_avatar_url: String,
        /// Their page.
        #[serde(default)]
        pub sender_html_url: String,
        /// The connection (OAuthToken ID, `ot-…`) it was fetched through.
        #[serde(default)]
        pub oauth_token_id: String,
    }
}

crd_struct! {
    /// Where an uploaded archive is stored.
    #[derive(Default)]
    pub struct ArchiveRef {
        /// Blob store key of the archive.
        pub key: String,
        /// Size of the uploaded archive in bytes.
        pub size: i64,
        /// SHA-256 of the uploaded archive, hex.
        pub sha256: String,
    }
}

kind_status! {
    /// Observed state of a configuration version.
    pub struct ConfigurationVersionStatus {
        /// The configuration version's ID (`cv-…`).
        pub id: Option<String>,
        /// pending (waiting for the upload), uploaded, errored or archived.
        #[schemars(extend("enum" = ["pending", "uploaded", "errored", "archived"]))]
        pub status: Option<String>,
        /// Why the configuration version errored.
        pub error_message: Option<String>,
        /// The stored archive, once uploaded.
        pub archive: Option<ArchiveRef>,
        /// Time of the upload (RFC 3339).
        pub uploaded_at: Option<String>,
        /// When its archive was soft-deleted (TFE's `soft_delete_backing_data`): hidden
        /// from downloads and runs until restored.
        pub backing_data_deleted_at: Option<String>,
        /// When its archive was deleted for good (`permanently_delete_backing_data`).
        pub backing_data_permanently_deleted_at: Option<String>,
        /// A module version's archive: what its modules hold (inputs, outputs,
        /// resources, providers, submodules, examples), read when it was uploaded.
        pub module_doc: Option<crate::registry::doc::ModuleDoc>,
    }
}

/// `status.status` of a configuration version: where its archive upload stands (TFE's
/// configuration version states as terrace serves them). The wire values are the CRD
/// schema's enum of `status.status`; a status not written yet counts as `pending`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigurationVersionState {
    /// Created, waiting for its archive (the upload URL is open).
    #[default]
    Pending,
    /// The archive was uploaded and accepted: test runs can use it.
    Uploaded,
    /// The upload was rejected (`status.errorMessage` says why); final.
    Errored,
    /// The archive is gone (retention); final.
    Archived,
}

impl ConfigurationVersionState {
    pub const ALL: [ConfigurationVersionState; 4] = [
        ConfigurationVersionState::Pending,
        ConfigurationVersionState::Uploaded,
        ConfigurationVersionState::Errored,
        ConfigurationVersionState::Archived,
    ];

    /// The wire value (`pending`, `uploaded`, `errored`, `archived`).
    pub fn as_str(self) -> &'static str {
        match self {
            ConfigurationVersionState::Pending => "pending",
            ConfigurationVersionState::Uploaded => "uploaded",
            ConfigurationVersionState::Errored => "errored",
            ConfigurationVersionState::Archived => "archived",
        }
    }

    /// Whether the configuration will never become usable (errored or archived).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ConfigurationVersionState::Errored | ConfigurationVersionState::Archived
        )
    }

    /// The state a stored `status.status` names: none yet is `pending`; an unknown value
    /// (hand-edited object) is an error, not a guess.
    pub fn of(status: Option<&str>) -> Result<Self, UnknownValue> {
        status.map_or(Ok(ConfigurationVersionState::Pending), str::parse)
    }
}

wire_values!(ConfigurationVersionState, "configuration version status");

impl ConfigurationVersionStatus {
    /// The upload state `status.status` records (see [`ConfigurationVersionState::of`]).
    pub fn state(&self) -> Result<ConfigurationVersionState, UnknownValue> {
        ConfigurationVersionState::of(self.status.as_deref())
    }
}

/// Where a configuration version's archive stands for TFE's backing data actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigurationData {
    /// Stored and served.
    Kept,
    /// Hidden, restorable.
    SoftDeleted,
    /// Gone.
    PermanentlyDeleted,
}

/// The data state a backing data action leads a configuration version to: soft delete
/// and permanent deletion of an uploaded version that is neither its workspace's current
/// configuration nor used by a run in progress; restore of a soft-deleted one. Anything
/// else is refused with the reason ("transition not allowed: …").
pub fn configuration_data_transition(
    state: ConfigurationVersionState,
    data: ConfigurationData,
    action: crate::state::BackingDataAction,
    current: bool,
    in_use: bool,
) -> Result<ConfigurationData, String> {
    use crate::state::BackingDataAction::*;
    let deleting = matches!(action, SoftDelete | PermanentlyDelete);
    if deleting && current {
        return Err("transition not allowed: the workspace's current configuration version's data cannot be deleted".into());
    }
    if deleting && in_use {
        return Err(
            "transition not allowed: a run in progress uses this configuration version".into(),
        );
    }
    match (state, data, action) {
        (ConfigurationVersionState::Uploaded, ConfigurationData::Kept, SoftDelete) => {
            Ok(ConfigurationData::SoftDeleted)
        }
        (_, ConfigurationData::SoftDeleted, Restore) => Ok(ConfigurationData::Kept),
        (
            ConfigurationVersionState::Uploaded | ConfigurationVersionState::Archived,
            ConfigurationData::Kept | ConfigurationData::SoftDeleted,
            PermanentlyDelete,
        ) => Ok(ConfigurationData::PermanentlyDeleted),
        (state, data, _) => Err(format!(
            "transition not allowed: the configuration version is {} and its data {}",
            state.as_str(),
            match data {
                ConfigurationData::Kept => "kept",
                ConfigurationData::SoftDeleted => "soft-deleted",
                ConfigurationData::PermanentlyDeleted => "permanently deleted",
            }
        )),
    }
}

impl ConfigurationVersion {
    /// Where its archive stands for the backing data actions.
    pub fn data(&self) -> ConfigurationData {
        let st = self.status.as_ref();
        if st.is_some_and(|s| s.backing_data_permanently_deleted_at.is_some()) {
            ConfigurationData::PermanentlyDeleted
        } else if st.is_some_and(|s| s.backing_data_deleted_at.is_some()) {
            ConfigurationData::SoftDeleted
        } else {
            ConfigurationData::Kept
        }
    }

    /// Whether runs may use it and its archive is served: uploaded, data kept.
    pub fn usable(&self) -> bool {
        self.state() == Ok(ConfigurationVersionState::Uploaded)
            && self.data() == ConfigurationData::Kept
    }

    /// The upload state of this configuration version: `pending` until a status is
    /// written.
    pub fn state(&self) -> Result<ConfigurationVersionState, UnknownValue> {
        self.status.as_ref().map_or(
            Ok(ConfigurationVersionState::Pending),
            ConfigurationVersionStatus::state,
        )
    }
}

crd_kind! {
    /// A module test run: `<engine> test` of a configuration version of a registry module,
    /// executed in a Pod with the module's test variables.
    #[kube(
        kind = "TestRun",
        doc = "A module test run executed in a Pod.",
        namespaced,
        status = "TestRunStatus",
        shortname = "tftr",
        printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.module"}"#,
        printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
        printcolumn = r#"{"name":"Result","type":"string","jsonPath":".status.testStatus"}"#,
        printcolumn = r#"{"name":"Passed","type":"integer","jsonPath":".status.testsPassed"}"#,
        printcolumn = r#"{"name":"Failed","type":"integer","jsonPath":".status.testsFailed"}"#
    )]
    columns: age;
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self == oldSelf", "message": "the spec of a test run is immutable"}
    ]))]
    pub struct TestRunSpec {
        /// Name of the RegistryModule object (same namespace) whose tests run.
        #[schemars(length(min = 1))]
        pub module: String,
        /// Name of the ConfigurationVersion object (same namespace) to test; it may belong to
        /// another module of the organization.
        #[schemars(length(min = 1))]
        pub configuration_version: String,
        /// Print the plan or state of each run block.
        #[serde(default)]
        pub verbose: bool,
        /// Directory in which the tests execute.
        #[serde(default = "default_test_directory")]
        pub test_directory: String,
        /// If given, only these test files run.
        #[serde(default)]
        pub filters: Vec<String>,
        /// Test-specific variables; they take precedence over module variables with the same
        /// key. Values are literals in the configuration language's syntax.
        #[serde(default)]
        pub variables: Vec<RunVariable>,
        /// Where the run was queued from: engine (CLI), svc-api or svc-configuration-version.
        #[serde(default = "default_source")]
        #[schemars(extend("enum" = ["engine", "svc-api", "svc-configuration-version"]))]
        pub source: String,
    }
}

fn default_test_directory() -> String {
    crate::constants::DEFAULT_TEST_DIRECTORY.to_owned()
}

/// A test-specific variable of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunVariable {
    /// Variable name.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_-]*$"))]
    pub key: String,
    /// Value as a literal of the configuration language (e.g. `"text"`, `3`, `["a"]`).
    pub value: String,
}

crd_struct! {
    /// Times at which a test run entered its states (RFC 3339).
    #[derive(Default)]
    pub struct TestRunTimestamps {
        /// When the run was queued.
        pub queued_at: Option<String>,
        /// When the tests started.
        pub started_at: Option<String>,
        /// When the run finished.
        pub finished_at: Option<String>,
        /// When the run was canceled.
        pub canceled_at: Option<String>,
        /// When the run errored.
        pub errored_at: Option<String>,
        /// When the run was force-canceled.
        pub force_canceled_at: Option<String>,
    }
}

kind_status! {
    /// Observed state of a test run, owned by the test run controller.
    pub struct TestRunStatus {
        /// The run's ID (`trun-…`).
        pub id: Option<String>,
        /// pending, queued, running, errored, canceled or finished.
        #[schemars(extend("enum" = ["pending", "queued", "running", "errored", "canceled", "finished"]))]
        pub status: Option<String>,
        /// Final result: pass or fail.
        #[schemars(extend("enum" = ["pass", "fail"]))]
        pub test_status: Option<String>,
        /// Count of passed tests (set when the run finishes).
        pub tests_passed: Option<i64>,
        /// Count of failed tests.
        pub tests_failed: Option<i64>,
        /// Count of tests that errored.
        pub tests_errored: Option<i64>,
        /// Count of skipped tests.
        pub tests_skipped: Option<i64>,
        /// Times at which the run entered its states.
        #[serde(default)]
        pub status_timestamps: TestRunTimestamps,
        /// When a cancel was requested.
        pub cancel_requested_at: Option<String>,
        /// When a force-cancel was requested.
        pub force_cancel_requested_at: Option<String>,
        /// Name of the Pod running the tests.
        pub pod_name: Option<String>,
        /// What the Pod first waited for before it could start (`waiting for a node: …`),
        /// kept once seen: the first line of the run's log.
        pub wait_note: Option<String>,
        /// Human-readable reason of the current state (for example why the run errored).
        pub message: Option<String>,
    }
}

crd_kind! {
    /// An environment variable of a registry module's test runs. Sensitive values live in a
    /// Secret (valueFrom), never in the spec.
    #[kube(
        kind = "TestVariable",
        doc = "An environment variable of a registry module's test runs.",
        namespaced,
        status = "TestVariableStatus",
        shortname = "tfvar",
        printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.module"}"#,
        printcolumn = r#"{"name":"Key","type":"string","jsonPath":".spec.key"}"#,
        printcolumn = r#"{"name":"Sensitive","type":"boolean","jsonPath":".spec.sensitive"}"#
    )]
    columns: age;
    #[schemars(extend("x-kubernetes-validations" = secret_value_rules(&[])))]
    pub struct TestVariableSpec {
        /// Name of the RegistryModule object (same namespace) the variable belongs to.
        #[schemars(length(min = 1))]
        pub module: String,
        /// Variable name: begins with a letter or underscore; letters, digits, underscores.
        #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
        pub key: String,
        @variable_value;
        /// Whether the value is written in the configuration language (HCL) rather than as a
        /// string.
        #[serde(default)]
        pub hcl: bool,
        /// Category: must be `env` (environment variable of the test run).
        #[schemars(extend("enum" = ["env"]))]
        pub category: String,
        /// When true the value is write-once and never shown again.
        #[serde(default)]
        pub sensitive: bool,
    }
}

kind_status! {
    /// Observed state of a test variable.
    pub struct TestVariableStatus {
        /// The variable's ID (`var-…`).
        pub id: Option<String>,
        /// Changes on every update of the variable.
        pub version_id: Option<String>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    /// Copies TFE's configuration version states as terrace stores them: each wire value
    /// parses back to its state, serde uses the same strings, no status yet is pending and
    /// an unknown value is refused rather than guessed.
    #[test]
    fn configuration_version_states_round_trip() {
        for st in ConfigurationVersionState::ALL {
            assert_eq!(st.as_str().parse::<ConfigurationVersionState>(), Ok(st));
            assert_eq!(st.to_string(), st.as_str());
            assert_eq!(serde_json::to_value(st).ok(), Some(st.as_str().into()));
        }
        assert_eq!(
            ConfigurationVersionState::of(None),
            Ok(ConfigurationVersionState::Pending)
        );
        let err = ConfigurationVersionState::of(Some("fetching")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown configuration version status \"fetching\""
        );
        let finals: Vec<_> = ConfigurationVersionState::ALL
            .into_iter()
            .filter(|s| s.is_final())
            .collect();
        assert_eq!(
            finals,
            [
                ConfigurationVersionState::Errored,
                ConfigurationVersionState::Archived
            ]
        );
        let mut cv = ConfigurationVersion::new("cv", ConfigurationVersionSpec::default());
        assert_eq!(cv.state(), Ok(ConfigurationVersionState::Pending));
        cv.status = Some(ConfigurationVersionStatus {
            status: Some("uploaded".into()),
            ..Default::default()
        });
        assert_eq!(cv.state(), Ok(ConfigurationVersionState::Uploaded));
    }

    /// The CRD schema's enum of `status.status` is exactly the enum's wire values, so the
    /// cluster refuses what the controllers could not read.
    #[test]
    fn schema_enum_matches_the_states() {
        let crd = serde_json::to_value(ConfigurationVersion::crd()).unwrap_or_default();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let values = &schema["properties"]["status"]["properties"]["status"]["enum"];
        let wire: Vec<&str> = ConfigurationVersionState::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(values, &serde_json::json!(wire));
    }
}

crd_kind! {
    /// A published version of a private registry module: its archive (a configuration
    /// version of the module, which also runs the version's tests) and what became of it.
    #[kube(
        kind = "ModuleVersion",
        doc = "A published version of a private registry module.",
        namespaced,
        status = "ModuleVersionStatus",
        shortname = "tfmodver",
        printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.module"}"#,
        printcolumn = r#"{"name":"Version","type":"string","jsonPath":".spec.version"}"#,
        printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status"}"#,
        printcolumn = r#"{"name":"Tests","type":"string","jsonPath":".status.testStatus"}"#,
        printcolumn = r#"{"name":"Deprecated","type":"string","jsonPath":".spec.deprecation.reason","priority":1}"#
    )]
    columns: wide_id, age;
    pub struct ModuleVersionSpec {
        /// The RegistryModule object (same namespace) this is a version of.
        #[schemars(length(min = 1))]
        pub module: String,
        /// The version, semantic versioning (`1.2.0`, `2.0.0-rc.1`).
        #[schemars(regex(pattern = r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"))]
        pub version: String,
        /// The commit the version was made from, when the publisher said.
        pub commit_sha: Option<String>,
        /// The ConfigurationVersion object (same namespace) holding the version's archive.
        pub configuration_version: Option<String>,
        /// Set when the version is deprecated: it stays installable, and its consumers
        /// are warned (the registry's documents, remote runs' output) with this reason
        /// and link.
        pub deprecation: Option<VersionDeprecation>,
    }
}

crd_struct! {
    /// Why a module version is deprecated.
    #[derive(Default)]
    pub struct VersionDeprecation {
        /// Why (at most 1,000 characters).
        #[schemars(length(max = 1000))]
        pub reason: Option<String>,
        /// Where to read more, such as an upgrade guide (an http or https URL).
        #[schemars(length(max = 2048))]
        pub link: Option<String>,
    }
}

kind_status! {
    /// Observed state of a module version.
    pub struct ModuleVersionStatus {
        /// The version's ID (`modver-…`).
        pub id: Option<String>,
        /// `pending` (no archive yet), `ok` (installable), `reg_ingress_failed` (the
        /// archive was refused; `error` says why).
        pub status: Option<String>,
        /// Why the version failed.
        pub error: Option<String>,
        /// The test run of the version's archive (`trun-…`).
        pub test_run: Option<String>,
        /// Its result: `pending`, `pass`, `fail` or `error`.
        pub test_status: Option<String>,
    }
}

impl TestRun {
    /// When the run was created (RFC 3339, the API's format; "" before it was stored):
    /// with its object name, the order of a module's test runs.
    pub fn created_at(&self) -> String {
        self.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| crate::common::timestamp(&t.0))
            .unwrap_or_default()
    }
}
