//! `terrace dev`: everything on one laptop. Starts the cluster simulator (HTTPS on
//! `--kube-addr`, with a self-signed CA kept in `DIR/cluster/tls` and written into the
//! kubeconfig, so kubectl sends its token and RBAC applies), installs the CRDs, runs the
//! operator against it in-process and serves the JSON:API on `--api-addr`. When ready it
//! writes `DIR/kubeconfig` (for kubectl), `DIR/token` (a bearer token with full rights),
//! `DIR/terraform.rc` (the terraform CLI's configuration for `--hostname`) and
//! `DIR/endpoints.json`, then prints the URLs. Objects persist in `DIR/cluster`, so a
//! restart with the same directory keeps them.
//!
//! The operator runs without leader election (one in-process replica) and no metrics
//! port is bound: `/metrics` on the API address serves the API server's and the
//! operator's metrics together.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use terrace_simulator::{SimConfig, Simulator};

/// Flags of `terrace dev`.
#[derive(Clone, Debug, Args)]
pub struct DevArgs {
    /// Directory for the simulator's objects, the kubeconfig and the token.
    #[arg(long, env = "TERRACE_DEV_DATA_DIR", default_value = ".terrace-dev")]
    pub data_dir: PathBuf,
    /// Address of the JSON:API (port 0 picks a free port).
    #[arg(long, env = "TERRACE_DEV_API_ADDR", default_value = "127.0.0.1:8080")]
    pub api_addr: SocketAddr,
    /// The hostname the terraform CLI knows this terrace by: the `cloud` block's
    /// `hostname`, and the host of the CLI configuration `terrace dev` writes
    /// (`DIR/terraform.rc`). The default is a reserved `.test` name, so it can never be a
    /// real host.
    #[arg(long, env = "TERRACE_HOSTNAME", default_value = DEFAULT_HOSTNAME, value_parser = terrace_api_server::settings::parse_hostname)]
    pub hostname: String,
    /// Address of the simulated Kubernetes API (port 0 picks a free port).
    #[arg(long, env = "TERRACE_DEV_KUBE_ADDR", default_value = "127.0.0.1:6443")]
    pub kube_addr: SocketAddr,
    /// Program run as the engine (`tofu`/`terraform`) in test and run Pods. Default: `tofu`, else
    /// `terraform`, from PATH.
    #[arg(long, env = "TERRACE_DEV_ENGINE")]
    pub engine: Option<PathBuf>,
    /// Edition the JSON:API behaves as: self-hosted (data retention endpoints) or hosted
    /// (the assessments-enabled attribute).
    #[arg(long, env = "TERRACE_EDITION", value_enum, default_value_t = terrace_api_server::Edition::SelfHosted)]
    pub edition: terrace_api_server::Edition,
    /// Most test runs queued or running at once (0: no limit).
    #[arg(long, env = "TERRACE_TEST_RUN_CONCURRENCY", default_value_t = terrace_operator::Settings::default().test_run_concurrency)]
    pub test_run_concurrency: u32,
    /// Time between two health assessments of a workspace (as `terrace operator
    /// --assessment-interval`, docs/health.md).
    #[arg(long, env = "TERRACE_ASSESSMENT_INTERVAL", default_value = terrace_crds::assessment::DEFAULT_INTERVAL, value_parser = terrace_operator::settings::parse_interval)]
    pub assessment_interval: Duration,
    /// Most health assessments running at once (as `terrace operator
    /// --assessment-concurrency`).
    #[arg(long, env = "TERRACE_ASSESSMENT_CONCURRENCY", default_value_t = terrace_operator::settings::DEFAULT_ASSESSMENT_CONCURRENCY)]
    pub assessment_concurrency: u32,
    /// Grace period between an upload and its automatic test run; an explicit test run
    /// created within it (the terraform CLI creates one right after uploading) replaces
    /// the automatic one (as `terrace operator --auto-test-run-delay`).
    #[arg(long, env = "TERRACE_AUTO_TEST_RUN_DELAY", default_value = terrace_crds::constants::DEFAULT_AUTO_TEST_RUN_DELAY, value_parser = terrace_operator::settings::parse_delay)]
    pub auto_test_run_delay: Duration,
    /// Key that signs capability URLs (log-read URLs); with the same key they stay valid
    /// across restarts. Default: a random key per start.
    #[arg(long, env = "TERRACE_URL_SIGNING_KEY", hide_env_values = true)]
    pub url_signing_key: Option<String>,
    /// Do not run Pods: they stay Pending, as in a cluster without nodes (to measure the
    /// operator alone, e.g. in the test-run benchmark).
    #[arg(long)]
    pub no_kubelet: bool,
    /// Run only the cluster (simulator, CRDs, user ClusterRoles): no operator, no API
    /// server. Run `terrace operator` and `terrace api-server` yourself with a kubeconfig
    /// made from DIR/kubeconfig (e.g. with a ServiceAccount token, to try RBAC).
    #[arg(long)]
    pub cluster_only: bool,
    /// Timeouts and connection cap of the JSON:API listener (as `terrace api-server`'s).
    #[command(flatten, next_help_heading = "JSON:API listener")]
    pub api_limits: terrace_api_server::settings::ConnectionLimits,
    /// Largest state file accepted, in bytes (as `terrace api-server`'s; the cluster
    /// blob store takes no blob over 32 MiB, an S3 store any size).
    #[arg(long, env = "TERRACE_MAX_STATE_BYTES", default_value_t = terrace_api_server::settings::DEFAULT_MAX_STATE_BYTES)]
    pub max_state_bytes: usize,
    /// Largest log a plan, apply or test run keeps, in bytes (as `terrace api-server`'s).
    #[arg(long, env = "TERRACE_MAX_LOG_BYTES", default_value_t = terrace_crds::run::logs::DEFAULT_MAX_LOG_BYTES)]
    pub max_log_bytes: u64,
    /// How long a web view session lasts after signing in (as `terrace api-server`'s).
    #[arg(long, env = "TERRACE_UI_SESSION_TTL", default_value = "8h", value_parser = terrace_api_server::settings::parse_duration)]
    pub ui_session_ttl: std::time::Duration,
    /// Address-space limit of each policy set's evaluation, in MiB (as `terrace
    /// api-server`'s).
    #[arg(long, env = "TERRACE_POLICY_MEMORY_LIMIT_MIB", default_value_t = terrace_api_server::settings::DEFAULT_POLICY_MEMORY_LIMIT_MIB, value_parser = clap::value_parser!(u64).range(64..))]
    pub policy_memory_limit_mib: u64,
    /// Addresses notifications may be sent to although inside the machine's reach (as
    /// `terrace operator --notification-allowed-cidrs`): loopback by default, so a
    /// receiver on this machine gets them.
    #[arg(long, env = "TERRACE_NOTIFICATION_ALLOWED_CIDRS", default_value = DEV_NOTIFICATION_CIDRS, value_parser = terrace_operator::settings::parse_allowed_cidrs)]
    pub notification_allowed_cidrs: terrace_operator::settings::AllowedCidrs,
    /// Where blobs are kept (as `terrace api-server`'s and `terrace operator`'s flags).
    #[command(flatten, next_help_heading = "Blob store")]
    pub blobs: terrace_blobstore::BlobStoreSettings,
}

/// The default `--notification-allowed-cidrs` of `terrace dev`: loopback.
const DEV_NOTIFICATION_CIDRS: &str = "127.0.0.0/8,::1/128";

/// The default `--hostname` (RFC 2606 reserves `.test`).
pub const DEFAULT_HOSTNAME: &str = "terrace.test";

/// The terraform CLI configuration of this instance: a `host` block mapping `hostname`
/// to the services at `api_url`, and a `credentials` block with `token`.
fn cli_config(hostname: &str, api_url: &str, token: &str) -> String {
    format!(
        "# Written by `terrace dev`: the terraform CLI's configuration for this instance.\n\
         # Use it with: export TF_CLI_CONFIG_FILE=<this file>\n{}",
        terrace_crds::common::cli_config(hostname, api_url, token)
    )
}

/// The first of `tofu` and `terraform` found on PATH.
fn engine_on_path() -> Option<PathBuf> {
    ["tofu", "terraform"].into_iter().find_map(on_path)
}

/// `name` found in a directory of PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The engine's version (`<engine> version -json`), if it says one.
fn engine_version(engine: &std::path::Path) -> Option<String> {
    let out = std::process::Command::new(engine)
        .args(["version", "-json"])
        .env("CHECKPOINT_DISABLE", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()?
        .get("terraform_version")?
        .as_str()
        .map(str::to_owned)
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    // Absolute from here on: Pods run in directories of their own, and the paths printed
    // and written (TF_CLI_CONFIG_FILE) must work from any directory.
    let dir = &std::path::absolute(&args.data_dir)
        .with_context(|| format!("resolving {}", args.data_dir.display()))?;
    // Test Pods run as local processes: `tofu` (and `terraform`) in them is the engine.
    let engine = match &args.engine {
        // A bare name is looked up on PATH, as a shell would.
        Some(e) if e.components().count() == 1 && !e.exists() => {
            on_path(&e.to_string_lossy()).or_else(|| Some(e.clone()))
        }
        // Absolute: test Pods run in their own working directory.
        Some(e) => Some(std::path::absolute(e).unwrap_or_else(|_| e.clone())),
        None => engine_on_path(),
    };
    match &engine {
        Some(e) => tracing::info!(engine = %e.display(), "test and run Pods run this engine"),
        None => tracing::warn!(
            "neither tofu nor terraform is on PATH: test runs will error until one is (or --engine names one)"
        ),
    }
    let command_overrides = engine
        .iter()
        .flat_map(|e| {
            [
                ("tofu".to_owned(), e.clone()),
                ("terraform".to_owned(), e.clone()),
            ]
        })
        .collect();
    let sim = Simulator::open(SimConfig {
        data_dir: Some(dir.join("cluster")),
        command_overrides,
        run_pods: !args.no_kubelet,
        ..Default::default()
    })
    .await
    .context("opening the cluster simulator")?;

    let kube_listener = tokio::net::TcpListener::bind(args.kube_addr)
        .await
        .with_context(|| format!("binding the Kubernetes API to {}", args.kube_addr))?;
    let kube_url = format!("https://{}", kube_listener.local_addr()?);
    let api_listener = tokio::net::TcpListener::bind(args.api_addr)
        .await
        .with_context(|| format!("binding the JSON:API to {}", args.api_addr))?;
    let api_url = format!("http://{}", api_listener.local_addr()?);

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let sim_task = {
        let sim = sim.clone();
        tokio::spawn(async move { sim.serve(kube_listener).await })
    };

    let client = sim.client();
    install_crds(&client).await?;
    install_user_roles(&client).await?;

    // The test Pod's first init container copies this very binary into the Pod, and the
    // fetch container downloads the configuration from this API server.
    let operator_settings = terrace_operator::Settings {
        // The engine by its path, so a missing one is named as the user gave it.
        engine_command: engine.as_ref().map_or_else(
            || terrace_operator::Settings::default().engine_command,
            |e| e.display().to_string(),
        ),
        terrace_binary: std::env::current_exe()
            .context("locating the terrace binary")?
            .display()
            .to_string(),
        api_internal_url: api_url.clone(),
        hostname: args.hostname.clone(),
        // Notifications link runs to the web view this process serves.
        web_url: api_url.clone(),
        test_run_concurrency: args.test_run_concurrency,
        auto_test_run_delay: args.auto_test_run_delay,
        assessment_interval: args.assessment_interval,
        assessment_concurrency: args.assessment_concurrency,
        blobs: args.blobs.clone(),
        notification_allowed_cidrs: args.notification_allowed_cidrs.clone(),
        ..Default::default()
    };
    let operator_task = (!args.cluster_only).then(|| {
        tokio::spawn(terrace_operator::run(
            client.clone(),
            operator_settings,
            stopped(),
        ))
    });

    let api_settings = terrace_api_server::Settings {
        api_addr: api_listener.local_addr()?,
        base_url: Some(api_url.clone()),
        edition: args.edition,
        // No extra port in dev: `/metrics` (the API's and the operator's) is on the API.
        metrics_on_api_router: true,
        limits: args.api_limits.clone(),
        url_signing_key: args.url_signing_key.clone(),
        blobs: args.blobs.clone(),
        max_state_bytes: args.max_state_bytes,
        max_log_bytes: args.max_log_bytes,
        ui_session_ttl: args.ui_session_ttl,
        notification_allowed_cidrs: args.notification_allowed_cidrs.clone(),
        hostname: Some(args.hostname.clone()),
        policy_evaluator: std::env::current_exe().ok(),
        policy_memory_limit_mib: args.policy_memory_limit_mib,
        // Workspaces created without a terraform-version get the engine's own (the
        // "latest release" terrace dev has): runs check it.
        default_terraform_version: engine
            .as_deref()
            .and_then(engine_version)
            .unwrap_or_else(|| terrace_api_server::Settings::default().default_terraform_version),
        ..Default::default()
    };
    let (index_tasks, api_task) = if args.cluster_only {
        drop(api_listener);
        (Vec::new(), None)
    } else {
        let state = terrace_api_server::AppState::new(api_settings, client);
        state
            .auth
            .review_rules_as_callers(sim.uncredentialed_client());
        state
            .metrics
            .also_expose(terrace_operator::metrics::encode_into);
        let index_tasks = state.start().await;
        // With an S3 blob store, announce readiness only once its probe passed.
        wait_ready(&state.readiness).await;
        let api_task = tokio::spawn(terrace_api_server::serve_state(
            state,
            api_listener,
            stopped(),
        ));
        (index_tasks, Some(api_task))
    };

    // Everything answers now: tell the user (and tests waiting for endpoints.json).
    let token = sim.admin_token();
    write_private(&dir.join("kubeconfig"), &sim.kubeconfig(&kube_url, &token))?;
    write_private(&dir.join("token"), &token)?;
    let cli_rc = dir.join("terraform.rc");
    write_private(&cli_rc, &cli_config(&args.hostname, &api_url, &token))?;
    let api_shown = (!args.cluster_only).then_some(&api_url);
    let endpoints = serde_json::json!({"api": api_shown, "kube": kube_url});
    std::fs::write(dir.join("endpoints.json"), endpoints.to_string())?;

    let dir_shown = dir.display();
    println!("terrace dev is ready");
    match api_shown {
        Some(url) => println!("  JSON:API    {url}/api/v2/    bearer token in {dir_shown}/token"),
        None => println!("  cluster only: no operator, no JSON:API (--cluster-only)"),
    }
    println!(
        "  Kubernetes  {kube_url}    kubectl --kubeconfig {dir_shown}/kubeconfig get workspaces -A"
    );
    println!("  Metrics     {api_url}/metrics");
    if api_shown.is_some() {
        println!(
            "  Web view    {api_url}/app    sign in with the token in {dir_shown}/token (cat it)"
        );
        println!(
            "  terraform   export TF_CLI_CONFIG_FILE={}    (cloud block: hostname = \"{}\")",
            cli_rc.display(),
            args.hostname
        );
        println!(
            "  Run links   the CLI prints https://{}/app/…: open them as {api_url}/app/…",
            args.hostname
        );
    }
    match &engine {
        Some(e) => println!("  Engine      {} (test and run Pods)", e.display()),
        None => println!("  Engine      none: neither tofu nor terraform is on PATH (--engine)"),
    }

    crate::signal::shutdown().await;
    let _ = stop_tx.send(true);
    for t in index_tasks {
        t.abort();
    }
    let drain = async {
        if let Some(t) = api_task {
            let _ = t.await;
        }
        if let Some(t) = operator_task {
            let _ = t.await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        tracing::warn!("components did not stop within 10s");
    }
    sim.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(5), sim_task).await;
    Ok(())
}

/// Waits (bounded by [`READY_WAIT`]) until the API server is ready (the blob store
/// answers its probe); says why when it is not.
async fn wait_ready(readiness: &terrace_api_server::blobs::Readiness) {
    let deadline = tokio::time::Instant::now() + READY_WAIT;
    while let Some(why) = readiness.blocker() {
        if tokio::time::Instant::now() >= deadline {
            tracing::error!("the JSON:API is not ready: {why}");
            eprintln!("terrace dev: the JSON:API is not ready: {why}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Longest `terrace dev` waits for the blob store before it announces the endpoints.
const READY_WAIT: Duration = Duration::from_secs(30);

/// Applies every terrace CRD (server-side apply, so a restart updates them in place).
async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("terrace-dev").force();
    for crd in terrace_crds::crdgen::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &pp, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("installing CRD {name}"))?;
    }
    Ok(())
}

/// The user-facing ClusterRoles, the same file the chart installs.
const USER_CLUSTER_ROLES: &str = include_str!("../../charts/terrace/files/user-clusterroles.yaml");

/// Applies terrace-owner, terrace-workspace-admin, -locker and -reader.
async fn install_user_roles(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<ClusterRole> = Api::all(client.clone());
    let pp = PatchParams::apply("terrace-dev").force();
    for doc in USER_CLUSTER_ROLES.split("\n---\n") {
        let role: ClusterRole =
            serde_saphyr::from_str(doc).context("parsing the user ClusterRoles")?;
        let name = role.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &pp, &Patch::Apply(&role))
            .await
            .with_context(|| format!("installing ClusterRole {name}"))?;
    }
    Ok(())
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}
