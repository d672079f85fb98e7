//! Configuration of `terrace operator` (flags and environment variables).

use std::time::Duration;

use clap::Args;
use terrace_crds::PodTemplateOverrides;
use terrace_crds::constants::DEFAULT_AUTO_TEST_RUN_DELAY;

/// Default of [`Settings::terrace_image`]: the image of this very build.
pub const DEFAULT_TERRACE_IMAGE: &str =
    concat!("ghcr.io/terrace-dev/terrace:", env!("CARGO_PKG_VERSION"));
/// Default of [`Settings::api_internal_url`]: the chart's API server Service.
pub const DEFAULT_API_INTERNAL_URL: &str = "http://terrace-api-server.terrace-system.svc:8080";

/// Settings of `terrace operator`.
#[derive(Clone, Debug, Args)]
pub struct Settings {
    /// Engine container image of test Pods (OpenTofu by default).
    #[arg(
        long,
        env = "TERRACE_ENGINE_IMAGE",
        default_value = "ghcr.io/opentofu/opentofu:1.10"
    )]
    pub engine_image: String,
    /// Command run in place of the engine image's `tofu` (used by `terrace dev --engine`).
    #[arg(long, env = "TERRACE_ENGINE_COMMAND", default_value = "tofu")]
    pub engine_command: String,
    /// Most test runs queued or running at once across all organizations (each
    /// organization may set a lower limit in `spec.settings.testRuns.concurrency`).
    #[arg(long, env = "TERRACE_TEST_RUN_CONCURRENCY", default_value_t = 50)]
    pub test_run_concurrency: u32,
    /// Grace period between the upload of a module's configuration version (with
    /// `auto-queue-runs`) and its automatic test run: a test run created explicitly for
    /// that configuration version within it (what the terraform CLI and go-tfe do right
    /// after uploading) replaces the automatic one. `0s` creates it at once.
    #[arg(long, env = "TERRACE_AUTO_TEST_RUN_DELAY", default_value = DEFAULT_AUTO_TEST_RUN_DELAY, value_parser = parse_delay)]
    pub auto_test_run_delay: Duration,
    /// Image holding the `terrace` binary at `/usr/local/bin/terrace`: the first init
    /// container of a test Pod runs `terrace runner install` to put it into a shared
    /// volume (no shell needed in the image).
    #[arg(long, env = "TERRACE_IMAGE", default_value = DEFAULT_TERRACE_IMAGE)]
    pub terrace_image: String,
    /// Path of the `terrace` binary inside that image (`terrace dev` points it at its own
    /// executable, since the simulator runs containers as local processes).
    #[arg(
        long,
        env = "TERRACE_BINARY_PATH",
        default_value = "/usr/local/bin/terrace"
    )]
    pub terrace_binary: String,
    /// Base URL at which test Pods reach the API server (no trailing slash needed); test
    /// archives are fetched from `{api_internal_url}/api/v2/test-archives/{cv-id}`.
    #[arg(
        long,
        env = "TERRACE_API_INTERNAL_URL",
        default_value = DEFAULT_API_INTERNAL_URL
    )]
    pub api_internal_url: String,
    /// The hostname the terraform CLI knows terrace by (the `cloud` block's `hostname`):
    /// every run's engine gets a CLI configuration mapping it to `api_internal_url`, with
    /// a credential of the run, so `terraform_remote_state` (backend `remote`) and the
    /// private registry work inside runs. Empty: no such configuration.
    #[arg(long, env = "TERRACE_HOSTNAME", default_value = "")]
    pub hostname: String,
    /// The web view's base URL, for the run links notifications carry (`run_url`), where
    /// it is not `https://{hostname}`: `terrace dev` serves the web view on its plain-http
    /// API address, which the CLI's hostname (`terrace.test`) does not reach. Empty:
    /// `https://{hostname}`.
    #[arg(long, env = "TERRACE_WEB_URL", default_value = "")]
    pub web_url: String,
    /// Address of the operator's metrics and health endpoints.
    #[arg(
        long,
        env = "TERRACE_OPERATOR_METRICS_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_addr: std::net::SocketAddr,
    /// Defaults for every test Pod, as JSON: `labels`, `annotations`, `resources`,
    /// `serviceAccountName`, `nodeSelector`, `tolerations` (an Organization's
    /// `spec.settings.testRuns.podTemplate` is applied on top).
    #[arg(long, env = "TERRACE_TEST_POD_TEMPLATE", value_parser = parse_pod_template, default_value = "{}")]
    pub test_pod_template: PodTemplateOverrides,
    /// Run the controllers only while holding the `terrace-operator` Lease, so of several
    /// replicas exactly one reconciles (`--leader-election=false` for a single replica;
    /// `terrace dev` runs without it).
    #[arg(
        long,
        env = "TERRACE_LEADER_ELECTION",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub leader_election: bool,
    /// Namespace of the leader Lease. Default: the Pod's namespace (`POD_NAMESPACE`, from
    /// the downward API), else the client's default namespace (in a Pod: its service
    /// account's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Identity of this replica in the leader Lease. Default: the Pod name (`POD_NAME`,
    /// from the downward API), else the host name plus a random suffix.
    #[arg(long, env = "POD_NAME")]
    pub leader_election_identity: Option<String>,
    /// How long a run's or test run's Pod may wait for a node before the run errors with
    /// the scheduler's reason. The default leaves a cluster autoscaler time to add a node
    /// (usually a few minutes) and the node time to pull the engine image, without a run
    /// (and, for an apply, its workspace lock) waiting forever on a cluster that can never
    /// place it.
    #[arg(long, env = "TERRACE_POD_START_TIMEOUT", default_value = DEFAULT_POD_START_TIMEOUT, value_parser = parse_delay)]
    pub pod_start_timeout: Duration,
    /// When the kubelet pulls the terrace and engine images of run and test Pods
    /// (`Always`, `IfNotPresent` or `Never`); an organization's or agent pool's Pod
    /// template may say otherwise. `IfNotPresent` lets nodes with the images preloaded
    /// (air-gapped clusters) run them, and a `:latest` engine tag is not pulled every time.
    #[arg(long, env = "TERRACE_POD_IMAGE_PULL_POLICY", default_value = "IfNotPresent", value_parser = terrace_crds::ImagePullPolicy::parse)]
    pub pod_image_pull_policy: terrace_crds::ImagePullPolicy,
    /// The namespace terrace is installed in (default: the Pod's namespace,
    /// `POD_NAMESPACE`): no Organization may use it (see `terrace_crds::namespaces`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub release_namespace: Option<String>,
    /// Hours soft-deleted state data (by a data retention policy or on request) stays
    /// restorable before it is deleted for good.
    #[arg(
        long,
        env = "TERRACE_STATE_SOFT_DELETE_GRACE_HOURS",
        default_value_t = DEFAULT_STATE_SOFT_DELETE_GRACE_HOURS
    )]
    pub state_soft_delete_grace_hours: u32,
    /// Addresses notifications may be sent to although they are inside the cluster's or
    /// the machine's reach (loopback, private, link-local): comma-separated CIDRs, e.g.
    /// `10.20.0.0/16` for an in-cluster receiver. Every other such address is refused
    /// (docs/notifications.md). `terrace dev` allows loopback.
    #[arg(long, env = "TERRACE_NOTIFICATION_ALLOWED_CIDRS", default_value = "", value_parser = parse_allowed_cidrs)]
    pub notification_allowed_cidrs: AllowedCidrs,
    /// Time between two health assessments of a workspace (docs/health.md); each
    /// workspace's place in the interval is a hash of its ID, so assessments spread
    /// over it.
    #[arg(long, env = "TERRACE_ASSESSMENT_INTERVAL", default_value = terrace_crds::assessment::DEFAULT_INTERVAL, value_parser = parse_interval)]
    pub assessment_interval: Duration,
    /// Most health assessments running at once across all organizations. They also
    /// take only the capacity runs leave under --test-run-concurrency, and runs never
    /// wait for them.
    #[arg(long, env = "TERRACE_ASSESSMENT_CONCURRENCY", default_value_t = DEFAULT_ASSESSMENT_CONCURRENCY)]
    pub assessment_concurrency: u32,
    /// Where blobs are kept: the operator deletes them (retention, deleted state
    /// versions). The same flags as `terrace api-server`'s.
    #[command(flatten, next_help_heading = "Blob store")]
    pub blobs: terrace_blobstore::BlobStoreSettings,
}

/// A duration such as `5s`, `1m` or `500ms` (zero allowed).
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    let d: k8s_openapi::jiff::SignedDuration = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a duration such as 5s or 500ms: {e}"))?;
    Duration::try_from(d).map_err(|_| format!("{s:?}: the duration must not be negative"))
}

/// A health assessment interval: a duration of at least a second.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_delay(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!("{s:?}: the interval must be at least 1s"));
    }
    Ok(d)
}

/// Default of [`Settings::assessment_concurrency`]: below the default run limit (50), so
/// assessments never hold most of the capacity.
pub const DEFAULT_ASSESSMENT_CONCURRENCY: u32 = 5;

/// Default of [`Settings::pod_start_timeout`].
pub const DEFAULT_POD_START_TIMEOUT: &str = "15m";

/// Default of [`Settings::state_soft_delete_grace_hours`]: a week.
pub const DEFAULT_STATE_SOFT_DELETE_GRACE_HOURS: u32 = 7 * 24;

pub use terrace_crds::notification::{AllowedCidrs, parse_allowed_cidrs};

/// Parses [`Settings::test_pod_template`].
fn parse_pod_template(s: &str) -> Result<PodTemplateOverrides, String> {
    serde_json::from_str(s).map_err(|e| format!("not a test Pod template: {e}"))
}

impl Settings {
    /// The web view's base URL, for the run links of notifications and commit statuses:
    /// `web_url`, else `https://{hostname}`, else the API's internal URL.
    pub fn web_base(&self) -> String {
        if !self.web_url.is_empty() {
            self.web_url.trim_end_matches('/').to_owned()
        } else if self.hostname.is_empty() {
            self.api_internal_url.trim_end_matches('/').to_owned()
        } else {
            format!("https://{}", self.hostname)
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            engine_image: "ghcr.io/opentofu/opentofu:1.10".into(),
            engine_command: "tofu".into(),
            test_run_concurrency: 50,
            auto_test_run_delay: parse_delay(DEFAULT_AUTO_TEST_RUN_DELAY)
                .unwrap_or(Duration::from_secs(5)),
            pod_start_timeout: parse_delay(DEFAULT_POD_START_TIMEOUT)
                .unwrap_or(Duration::from_secs(900)),
            terrace_image: DEFAULT_TERRACE_IMAGE.into(),
            terrace_binary: "/usr/local/bin/terrace".into(),
            api_internal_url: DEFAULT_API_INTERNAL_URL.into(),
            hostname: String::new(),
            web_url: String::new(),
            metrics_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 9090)),
            test_pod_template: PodTemplateOverrides::default(),
            // In-process uses (`terrace dev`, tests) run one operator: no election.
            leader_election: false,
            leader_election_namespace: None,
            leader_election_identity: None,
            release_namespace: None,
            pod_image_pull_policy: terrace_crds::ImagePullPolicy::IfNotPresent,
            state_soft_delete_grace_hours: DEFAULT_STATE_SOFT_DELETE_GRACE_HOURS,
            notification_allowed_cidrs: AllowedCidrs::default(),
            assessment_interval: Duration::from_secs(24 * 3600),
            assessment_concurrency: DEFAULT_ASSESSMENT_CONCURRENCY,
            blobs: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    fn parse(args: &[&str]) -> Settings {
        Cli::try_parse_from(std::iter::once("operator").chain(args.iter().copied()))
            .expect("parse")
            .settings
    }

    /// The binary elects a leader unless told not to; in-process users (Default) don't.
    #[test]
    fn leader_election_is_on_for_the_binary_and_off_in_process() {
        assert!(parse(&[]).leader_election);
        assert!(!parse(&["--leader-election=false"]).leader_election);
        assert!(!parse(&["--leader-election", "false"]).leader_election);
        assert!(!Settings::default().leader_election);
        let s = parse(&[
            "--leader-election-namespace",
            "terrace-system",
            "--leader-election-identity",
            "op-0",
        ]);
        assert_eq!(
            s.leader_election_namespace.as_deref(),
            Some("terrace-system")
        );
        assert_eq!(s.leader_election_identity.as_deref(), Some("op-0"));
    }

    /// The automatic run's grace period: a few seconds by default, any duration (zero
    /// too) from the flag.
    #[test]
    fn auto_test_run_delay() {
        assert_eq!(parse(&[]).auto_test_run_delay, Duration::from_secs(5));
        assert_eq!(
            Settings::default().auto_test_run_delay,
            Duration::from_secs(5)
        );
        let d = |v: &str| parse(&["--auto-test-run-delay", v]).auto_test_run_delay;
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("0s"), Duration::ZERO);
        assert_eq!(d("1m"), Duration::from_secs(60));
        assert!(parse_delay("soon").is_err());
        assert!(parse_delay("-1s").is_err());
    }
}
