//! Names shared across the operator, the API server and the manifests: the API group,
//! label and annotation keys, condition types and reasons, field managers and limits.
//! Keeping them in one place keeps kubectl users, controllers and the API in agreement.

/// API group of every terrace custom resource.
pub const GROUP: &str = "terrace.dev";
/// The one served (and storage) version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of terrace objects.
pub const API_VERSION: &str = "terrace.dev/v1alpha1";
/// Category every terrace kind belongs to (`kubectl get terrace`).
pub const CATEGORY: &str = "terrace";

/// Label holding an object's TFE-shaped ID (`ws-…`, `prj-…`), so lookups by ID are index hits.
pub const LABEL_ID: &str = "terrace.dev/id";
/// Label naming the organization an object belongs to.
pub const LABEL_ORGANIZATION: &str = "terrace.dev/organization";
/// Label naming the ID (`ws-…`) of the workspace an object belongs to (state versions).
pub const LABEL_WORKSPACE_ID: &str = "terrace.dev/workspace-id";
/// Label on an organization's default project.
pub const LABEL_DEFAULT_PROJECT: &str = "terrace.dev/default-project";
/// Label on Namespaces created for organizations.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "terrace";

/// Annotation naming the lock holder of a workspace (`user:NAME`, `team:ID`, `run:ID`).
pub const ANNOTATION_LOCKED_BY: &str = "terrace.dev/locked-by";
/// Annotation on a run created while policy sets applied to its workspace: its task stage
/// exists from the start, so the CLI (which reads a run's stages once, at creation) waits
/// for it.
pub const ANNOTATION_POLICY_CHECKS: &str = "terrace.dev/policy-checks";
/// Annotation with the reason given when the workspace was locked.
pub const ANNOTATION_LOCK_REASON: &str = "terrace.dev/lock-reason";
/// Annotation with the RFC 3339 time the workspace was locked.
pub const ANNOTATION_LOCKED_AT: &str = "terrace.dev/locked-at";
/// Annotation on a pending StateVersion: when its upload URLs stop working (RFC 3339).
pub const ANNOTATION_STATE_UPLOAD_EXPIRES: &str = "terrace.dev/state-upload-expires-at";
/// Workspace annotation: the last state version that became current (JSON of
/// [`crate::state::StateHead`]), written under the workspace's resourceVersion together
/// with the lock and succession checks, so versions become current one at a time.
pub const ANNOTATION_STATE_HEAD: &str = "terrace.dev/state-head";

/// Annotation on a module's ConfigurationVersion: where its automatic test run stands
/// (`due`, `superseded`, `claimed`, `created`; see `crate::testrun::automatic`). The API
/// server sets `due` when an upload of a configuration version with `auto-queue-runs`
/// is accepted; an explicit test run or the operator claims it, each with a
/// resourceVersion precondition, so exactly one of them does.
pub const ANNOTATION_AUTOMATIC_TEST_RUN: &str = "terrace.dev/automatic-test-run";
/// Label naming the RegistryModule object of a test run, configuration version or test
/// variable.
pub const LABEL_MODULE: &str = "terrace.dev/module";
/// Default grace period between an upload and its automatic test run (the operator's
/// `--auto-test-run-delay`): an explicit test run created within it replaces the
/// automatic one.
pub const DEFAULT_AUTO_TEST_RUN_DELAY: &str = "5s";
/// Request header the terraform CLI sends on every API call (`X-Terraform-Integration:
/// cloud`): a test run it creates has the source `engine`.
pub const HEADER_TERRAFORM_INTEGRATION: &str = "x-terraform-integration";

/// Annotation on a WorkspaceVariable: a random token the API server writes with every
/// update through the API (and with each new value it puts in a sensitive variable's
/// Secret), so the variable's `version-id` (see `WorkspaceVariableSpec::version_id`) is
/// new after every update, as TFE's is, and changes with a sensitive value without the
/// value (or a digest of it) ever being stored outside the Secret.
pub const ANNOTATION_VALUE_REVISION: &str = "terrace.dev/value-revision";
/// Key of the value in the Secret of a sensitive variable created through the API.
pub const VARIABLE_SECRET_KEY: &str = "value";

/// Annotation a namespace's owner sets to let the Organization it names use the existing
/// namespace (value: the Organization's `metadata.name`); see `crate::namespaces`.
pub const ANNOTATION_ADOPT: &str = "terrace.dev/adopt";
/// Annotation the Organization controller sets on a namespace it creates (value: the
/// Organization's `metadata.name`): terrace created it, so deleting the Organization
/// deletes it.
pub const ANNOTATION_CREATED_FOR: &str = "terrace.dev/created-for";
/// Annotation the API sets on objects whose lists sort by creation (agent pools): the
/// creation time in milliseconds (RFC 3339), as creationTimestamp has whole seconds and
/// objects created within one second must keep their order.
pub const ANNOTATION_CREATED_AT: &str = "terrace.dev/created-at";
/// When the API last changed an object of the kinds whose TFE document shows an
/// `updated-at` (notification configurations), to the millisecond; the operator reads it
/// as the time a configuration was enabled.
pub const ANNOTATION_UPDATED_AT: &str = "terrace.dev/updated-at";

/// Annotation the API sets on a workspace asking for a health assessment now (`POST
/// /workspaces/:id/actions/assess`; the value is the time asked, RFC 3339): the operator
/// starts one unless its last assessment started later (docs/health.md).
pub const ANNOTATION_ASSESSMENT_REQUESTED: &str = "terrace.dev/assessment-requested";

/// Annotation the API server sets on a VCS-driven workspace when its repository could not
/// be read (the reason, never a credential) and removes once a fetch works again; the
/// workspace controller shows it as the `RepositoryReadable` condition (docs/vcs.md).
pub const ANNOTATION_VCS_ERROR: &str = "terrace.dev/vcs-error";
/// Condition of a VCS-driven workspace: whether its repository could be read last time.
pub const CONDITION_REPOSITORY_READABLE: &str = "RepositoryReadable";

/// kstatus condition: the object is reconciled and usable.
pub const CONDITION_READY: &str = "Ready";
/// kstatus condition: the controller is working towards the desired state.
pub const CONDITION_RECONCILING: &str = "Reconciling";
/// kstatus condition: the controller cannot make progress without a change.
pub const CONDITION_STALLED: &str = "Stalled";

/// Field manager of the operator's controllers (server-side apply).
pub const FIELD_MANAGER_OPERATOR: &str = "terrace-operator";
/// Field manager of the run controller's part of a workspace's status (its performance
/// attributes), beside the workspace controller's.
pub const FIELD_MANAGER_RUNS: &str = "terrace-operator-runs";
/// Field manager of the API server's writes.
pub const FIELD_MANAGER_API: &str = "terrace-api-server";

/// Default page size of every paginated list (SPEC.md Limits).
pub const DEFAULT_PAGE_SIZE: u32 = 20;
/// Largest page size a client may ask for.
pub const MAX_PAGE_SIZE: u32 = 100;
/// Default test directory of a test run (SPEC.md A1).
pub const DEFAULT_TEST_DIRECTORY: &str = "tests";
/// Window of runs the workspace performance attributes are computed over (SPEC.md Limits).
pub const METRICS_RUN_WINDOW: usize = 30;
/// Longest workspace name TFE accepts.
pub const MAX_WORKSPACE_NAME_LEN: usize = 90;

/// Most comments a run holds (they live in its status, and etcd objects are small).
pub const MAX_RUN_COMMENTS: usize = 100;
/// Comments beyond [`MAX_RUN_COMMENTS`] that the comments of actions (confirm, discard,
/// cancel, override) may take: an action never fails on its comment, and a run sees a
/// handful of actions at most.
pub const ACTION_COMMENT_MARGIN: usize = 20;
/// Longest comment on a run, in bytes.
pub const MAX_COMMENT_BYTES: usize = 4096;

/// The services terrace serves, by the names of terraform's service discovery, and their
/// paths: the `cloud` block (`tfe.v2`), the `remote` backend and `terraform_remote_state`
/// (`tfe.v2.1`, `state.v2`), go-tfe (`tfe.v2.2`), the private module registry
/// (`modules.v1`, the Module Registry Protocol). Only what is served is announced: a
/// client that finds a service here uses it.
pub const DISCOVERY_SERVICES: [(&str, &str); 5] = [
    ("modules.v1", "/api/registry/v1/modules/"),
    ("state.v2", "/api/v2/"),
    ("tfe.v2", "/api/v2/"),
    ("tfe.v2.1", "/api/v2/"),
    ("tfe.v2.2", "/api/v2/"),
];

/// Notifications (docs/notifications.md): how long after a run reaches a trigger its
/// notification is still sent (the operator catching up after a restart), and how long
/// a configuration remembers what it delivered.
pub const NOTIFICATION_WINDOW_SECS: i64 = 24 * 3600;
/// Attempts of one notification before it is given up (the first and four retries).
pub const NOTIFICATION_MAX_ATTEMPTS: u32 = 5;
/// The first retry's delay; each next one waits three times longer (5 s, 15 s, 45 s,
/// 135 s).
pub const NOTIFICATION_FIRST_RETRY_SECS: u64 = 5;
/// How long one delivery may take, connecting and answering included.
pub const NOTIFICATION_TIMEOUT_SECS: u64 = 10;
/// Deliveries shown per configuration (`delivery-responses`), newest first.
pub const NOTIFICATION_RESPONSES_KEPT: usize = 10;
/// Bytes of a destination's answer kept in a delivery response.
pub const NOTIFICATION_BODY_KEPT: usize = 1024;
/// Annotation the API server sets on a NotificationConfiguration to have the operator
/// send a verification (value: a token the status's `verified` then repeats).
pub const ANNOTATION_VERIFY_REQUESTED: &str = "terrace.dev/verify-requested";
/// Header of a generic destination's signature: the hex HMAC-SHA512 of the body.
pub const NOTIFICATION_SIGNATURE_HEADER: &str = "X-TFE-Notification-Signature";
