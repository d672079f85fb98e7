//! Configuration of the API server (flags and environment variables).

use std::time::Duration;

use clap::{Args, ValueEnum};

/// Which edition of the service terrace behaves as (SPEC.md: some endpoints exist only on
/// the self-hosted edition, some attributes only on the hosted one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Edition {
    #[default]
    SelfHosted,
    Hosted,
}

/// Default of `--max-state-bytes`: 32 MiB.
pub const DEFAULT_MAX_STATE_BYTES: usize = 32 * 1024 * 1024;

/// Most bytes a request's header fields may take (names and values): above it the
/// answer is 431, however the client's bytes were split into reads. hyper's own bound
/// is its read buffer (about 400 KiB), which a request that arrives in one read can
/// pass; this one is checked on every parsed request.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Settings of `terrace api-server`.
#[derive(Clone, Debug, Args)]
pub struct Settings {
    /// Address the JSON:API listens on.
    #[arg(long, env = "TERRACE_API_ADDR", default_value = "0.0.0.0:8080")]
    pub api_addr: std::net::SocketAddr,
    /// Externally visible base URL (used in links and upload URLs). Default: derived from
    /// the request's Host header.
    #[arg(long, env = "TERRACE_BASE_URL")]
    pub base_url: Option<String>,
    /// Edition to behave as: self-hosted (data retention endpoints) or hosted
    /// (assessments-enabled).
    #[arg(long, env = "TERRACE_EDITION", value_enum, default_value_t = Edition::SelfHosted)]
    pub edition: Edition,
    /// Engine version given to workspaces created without terraform-version (SPEC.md: the
    /// latest release).
    #[arg(
        long,
        env = "TERRACE_DEFAULT_TERRAFORM_VERSION",
        default_value = "1.9.8"
    )]
    pub default_terraform_version: String,
    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, env = "TERRACE_MAX_BODY_BYTES", default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Largest state file accepted, in bytes (larger: 413). In the cluster blob store a
    /// state is kept compressed in Secrets of at most 512 KiB each, and no blob may be
    /// larger than 32 MiB there; raise this with `--blob-store s3://…`.
    #[arg(long, env = "TERRACE_MAX_STATE_BYTES", default_value_t = DEFAULT_MAX_STATE_BYTES)]
    pub max_state_bytes: usize,
    /// Most bytes a Git server may send for one fetch of a VCS-driven workspace's commit
    /// (docs/vcs.md); past it the fetch stops and the workspace gets an Event saying so.
    #[arg(long, env = "TERRACE_VCS_MAX_FETCH_BYTES", default_value_t = 512 << 20)]
    pub vcs_max_fetch_bytes: u64,
    /// Longest a fetch and its archive may take, in seconds.
    #[arg(long, env = "TERRACE_VCS_FETCH_TIMEOUT", default_value_t = 120)]
    pub vcs_fetch_timeout_seconds: u64,
    /// Largest log a plan, apply or test run keeps, in bytes: past it the log ends with a
    /// line saying it was cut there (docs/runs.md, "Logs").
    #[arg(long, env = "TERRACE_MAX_LOG_BYTES", default_value_t = terrace_crds::run::logs::DEFAULT_MAX_LOG_BYTES)]
    pub max_log_bytes: u64,
    /// Address of `/metrics` (and `/healthz`, `/readyz`), a listener apart from the API
    /// so the public Ingress does not expose it. In-process servers (`terrace dev`,
    /// tests) have none unless they set it.
    #[arg(long, env = "TERRACE_API_METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Also serve `/metrics` on the API router (`terrace dev`, which binds no metrics
    /// port). Not a flag: in a cluster the API port is public.
    #[arg(skip)]
    pub metrics_on_api_router: bool,
    /// Where configuration archives and state files are kept (the same flags on
    /// `terrace operator` and `terrace dev`).
    #[command(flatten, next_help_heading = "Blob store")]
    pub blobs: terrace_blobstore::BlobStoreSettings,
    /// Key that signs capability URLs (log-read URLs). Every replica needs the same one;
    /// without it each process makes a random key (fine for one process).
    #[arg(long, env = "TERRACE_URL_SIGNING_KEY", hide_env_values = true)]
    pub url_signing_key: Option<String>,
    /// Namespace terrace runs in (the chart sets `POD_NAMESPACE`): no organization may
    /// use it (see `terrace_crds::namespaces`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub release_namespace: Option<String>,
    #[command(flatten)]
    pub limits: ConnectionLimits,
    /// The hostname the terraform CLI knows terrace by (the `cloud` block's `hostname`;
    /// the chart's `apiServer.hostname`): the web view shows it in the `cloud` block of
    /// each workspace.
    #[arg(long, env = "TERRACE_HOSTNAME", value_parser = parse_hostname)]
    pub hostname: Option<String>,
    /// A ConfigMap of the release namespace that owns the web view's session Secrets
    /// (the chart's `<release>-ui-sessions`): `helm uninstall` deletes it and garbage
    /// collection then removes every session, so no Secret holding tokens stays behind.
    #[arg(long, env = "TERRACE_UI_SESSIONS_OWNER")]
    pub ui_sessions_owner: Option<String>,
    /// Addresses inside the cluster's reach that notification destinations may name
    /// anyway (the operator's `--notification-allowed-cidrs`, the same variable): any
    /// other internal destination is refused when it is configured.
    #[arg(long, env = "TERRACE_NOTIFICATION_ALLOWED_CIDRS", default_value = "", value_parser = terrace_crds::notification::parse_allowed_cidrs)]
    pub notification_allowed_cidrs: terrace_crds::notification::AllowedCidrs,
    /// How long a web view session lasts after signing in (e.g. 8h, 30m).
    #[arg(long, env = "TERRACE_UI_SESSION_TTL", default_value = "8h", value_parser = parse_duration)]
    pub ui_session_ttl: Duration,
    /// Address-space limit of each policy set's evaluation (MiB): a policy that needs more
    /// is stopped and errors (docs/policies.md).
    #[arg(long, env = "TERRACE_POLICY_MEMORY_LIMIT_MIB", default_value_t = DEFAULT_POLICY_MEMORY_LIMIT_MIB, value_parser = clap::value_parser!(u64).range(64..))]
    pub policy_memory_limit_mib: u64,
    /// The program that evaluates policies in a process of its own under
    /// --policy-memory-limit-mib (`terrace policy-eval`; the `terrace` binary sets itself).
    /// None: in-process, without the memory limit (the crate's own tests).
    #[arg(skip)]
    pub policy_evaluator: Option<std::path::PathBuf>,
}

/// Default of --policy-memory-limit-mib.
pub const DEFAULT_POLICY_MEMORY_LIMIT_MIB: u64 = 512;

/// What one client may hold of the API listener (see the `listener` module): timeouts
/// that close connections a slow, idle or hostile client does not use, and a cap on how
/// many are open. The defaults let a real client on a slow link through.
#[derive(Clone, Debug, Args)]
pub struct ConnectionLimits {
    /// Longest a client may take to send a request's headers, from their first byte
    /// (e.g. 30s, 1m).
    #[arg(long, env = "TERRACE_API_HEADER_READ_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Longest a request body may take from the end of the headers, extended by one
    /// second for every --body-min-rate bytes received (a large upload on a slow link
    /// passes, a trickle does not). Late: 408.
    #[arg(long, env = "TERRACE_API_BODY_READ_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// Bytes per second of request body that earn one more second of --body-read-timeout.
    #[arg(long, env = "TERRACE_API_BODY_MIN_RATE", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_min_rate: u64,
    /// Longest a kept-alive connection may wait for its next request, and a response
    /// for the client to read it, before the connection is closed.
    #[arg(long, env = "TERRACE_API_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Most connections open at once; more wait in the kernel's backlog until one closes.
    #[arg(long, env = "TERRACE_API_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            body_read_timeout: Duration::from_secs(60),
            body_min_rate: 1024,
            idle_timeout: Duration::from_secs(120),
            max_connections: 4096,
        }
    }
}

/// A hostname the terraform CLI accepts in a `cloud` block and a `host` block: lowercase
/// letters, digits, hyphens and at least one dot.
pub fn parse_hostname(s: &str) -> Result<String, String> {
    let ok = s.contains('.')
        && !s.starts_with(['.', '-'])
        && !s.ends_with(['.', '-'])
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{s:?} is not a hostname the terraform CLI accepts: lowercase letters, digits, hyphens and at least one dot (e.g. terrace.example.com)"
        ))
    }
}

/// A positive duration such as `30s`, `1m30s` or `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a duration such as 30s or 2m: {e}"))?;
    Duration::try_from(d)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?}: the duration must be positive"))
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            api_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8080)),
            base_url: None,
            edition: Edition::SelfHosted,
            default_terraform_version: "1.9.8".into(),
            max_body_bytes: 1024 * 1024,
            max_state_bytes: DEFAULT_MAX_STATE_BYTES,
            max_log_bytes: terrace_crds::run::logs::DEFAULT_MAX_LOG_BYTES,
            vcs_max_fetch_bytes: 512 << 20,
            vcs_fetch_timeout_seconds: 120,
            blobs: Default::default(),
            metrics_addr: None,
            metrics_on_api_router: false,
            url_signing_key: None,
            release_namespace: None,
            limits: ConnectionLimits::default(),
            ui_session_ttl: Duration::from_secs(8 * 3600),
            ui_sessions_owner: None,
            notification_allowed_cidrs: Default::default(),
            hostname: None,
            policy_memory_limit_mib: DEFAULT_POLICY_MEMORY_LIMIT_MIB,
            policy_evaluator: None,
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

    /// The binary serves `/metrics` on its own port by default; in-process servers
    /// (Default: `terrace dev`, tests) bind none.
    #[test]
    fn metrics_listener_is_on_for_the_binary_only() {
        let cli = Cli::try_parse_from(["api-server"]).expect("parse");
        assert_eq!(
            cli.settings.metrics_addr,
            Some(std::net::SocketAddr::from(([0, 0, 0, 0], 9090)))
        );
        assert!(!cli.settings.metrics_on_api_router);
        let cli =
            Cli::try_parse_from(["api-server", "--metrics-addr", "127.0.0.1:9191"]).expect("parse");
        assert_eq!(cli.settings.metrics_addr.map(|a| a.port()), Some(9191));
        assert_eq!(Settings::default().metrics_addr, None);
    }

    /// The connection limits' flags parse durations, and their defaults are
    /// `ConnectionLimits::default()`.
    #[test]
    fn connection_limits() {
        let cli = Cli::try_parse_from(["api-server"]).expect("parse");
        let d = ConnectionLimits::default();
        let l = &cli.settings.limits;
        assert_eq!(
            (l.header_read_timeout, l.body_read_timeout, l.body_min_rate),
            (d.header_read_timeout, d.body_read_timeout, d.body_min_rate)
        );
        assert_eq!(
            (l.idle_timeout, l.max_connections),
            (d.idle_timeout, d.max_connections)
        );
        let cli = Cli::try_parse_from([
            "api-server",
            "--header-read-timeout",
            "1m30s",
            "--idle-timeout",
            "500ms",
            "--max-connections",
            "10",
        ])
        .expect("parse");
        assert_eq!(
            cli.settings.limits.header_read_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(cli.settings.limits.idle_timeout, Duration::from_millis(500));
        assert_eq!(cli.settings.limits.max_connections, 10);
        for bad in [
            ["--idle-timeout", "0s"],
            ["--idle-timeout", "soon"],
            ["--max-connections", "0"],
        ] {
            assert!(
                Cli::try_parse_from(["api-server", bad[0], bad[1]]).is_err(),
                "{bad:?}"
            );
        }
    }
}
