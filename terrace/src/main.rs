//! `terrace`: one binary, one container image. The subcommands pick the component:
//! `operator`, `api-server`, `runner` (inside test Pods), `crds` (prints the CRD YAML) and
//! `dev` (simulator + operator + API server in one process, see `dev.rs`) and `blobs
//! migrate` (moves blobs between the cluster store and a bucket, see `blobs.rs`).
#![forbid(unsafe_code)]

mod blobs;
mod dev;
mod signal;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// jemalloc: after a start that lists every object, the caches of the simulator, the
/// operator and the API server hold less memory in it than in glibc's malloc, which
/// keeps more of what the start-up lists freed (about 0.7 KiB per workspace at 10,000
/// and 50,000 workspaces under `terrace dev`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "terrace",
    version,
    about = "A Kubernetes-native HCP Terraform / TFE API for workspaces and module tests"
)]
struct Cli {
    /// Log format: text for terminals, json in the cluster.
    #[arg(long, global = true, env = "TERRACE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the local cluster simulator, the operator and the API server in one process.
    Dev(dev::DevArgs),
    /// Run the controllers against the cluster of the current kubeconfig / service account.
    Operator(Box<terrace_operator::Settings>),
    /// Serve the JSON:API against the cluster of the current kubeconfig / service account.
    ApiServer(terrace_api_server::Settings),
    /// Commands that run inside test Pods.
    #[command(subcommand)]
    Runner(terrace_operator::runner::RunnerCommand),
    /// Blob store maintenance.
    #[command(subcommand)]
    Blobs(BlobsCommand),
    /// Evaluate the policies of one policy set (the API server runs this, one process per
    /// set, so each evaluation is bounded in memory): reads the request on stdin, answers
    /// one outcome per line on stdout.
    #[command(hide = true)]
    PolicyEval {
        /// The process's address-space limit, in MiB.
        #[arg(long)]
        memory_limit_mib: u64,
    },
    /// Prepare an uninstall (the chart's pre-delete hook): wait for applies in flight,
    /// stop the operator so it releases its lease, and let go of run and test Pods.
    Uninstall(terrace_operator::uninstall::UninstallArgs),
    /// Print the CustomResourceDefinitions as YAML (or write one file per CRD).
    Crds {
        /// Write `<crd-name>.yaml` files into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BlobsCommand {
    /// Copy every referenced blob from one store to the other (`cluster` ↔ `s3://…`),
    /// verify it and switch the finalizers; resumable (run it again after an
    /// interruption). Credentials from the AWS environment.
    Migrate(blobs::MigrateArgs),
    /// List (and with --delete remove) the objects of an S3 blob store whose owner is
    /// gone.
    Sweep(blobs::SweepArgs),
}

/// The Kubernetes client logs whole response bodies (at WARN when one does not decode,
/// at TRACE otherwise): Secrets, state chunks and Pod logs would reach the log. Its
/// client module is kept to errors whatever `RUST_LOG` says; failed requests are logged by
/// terrace's own code, without bodies.
const QUIET_KUBE_CLIENT: &str = "kube_client::client=error";

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(QUIET_KUBE_CLIENT.parse().expect("a directive"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // Each line carries the fields of its spans (the API's request span with
        // `request_id`, the operator's reconcile span with `reconcile_id` and the
        // object): the innermost in `span`, all of them in `spans`.
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let result = match cli.command {
        Command::Crds { out_dir } => crds(out_dir),
        Command::PolicyEval { memory_limit_mib } => policy_eval(memory_limit_mib),
        Command::Runner(cmd) => terrace_operator::runner::run(&cmd).map_err(anyhow::Error::msg),
        Command::Dev(args) => runtime().and_then(|rt| rt.block_on(dev::run(args))),
        Command::Blobs(BlobsCommand::Migrate(args)) => {
            runtime().and_then(|rt| rt.block_on(blobs::migrate(args)))
        }
        Command::Blobs(BlobsCommand::Sweep(args)) => {
            runtime().and_then(|rt| rt.block_on(blobs::sweep(args)))
        }
        Command::Operator(settings) => runtime().and_then(|rt| rt.block_on(operator(*settings))),
        Command::ApiServer(settings) => runtime().and_then(|rt| rt.block_on(api_server(settings))),
        Command::Uninstall(args) => runtime().and_then(|rt| {
            rt.block_on(async {
                let client = kube::Client::try_default().await?;
                terrace_operator::uninstall::prepare(client, &args).await?;
                Ok(())
            })
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("terrace: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `terrace policy-eval`: limits its own address space, then evaluates each policy of the
/// request on stdin and writes its outcome as one JSON line, flushed at once (so the API
/// server knows which policy was running if the limit stops the process).
fn policy_eval(memory_limit_mib: u64) -> anyhow::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    let bytes = memory_limit_mib.saturating_mul(1 << 20);
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        },
    )?;
    terrace_crds::policy::serve(std::io::stdin().lock(), std::io::stdout().lock())
        .map_err(anyhow::Error::msg)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn crds(out_dir: Option<PathBuf>) -> anyhow::Result<()> {
    match out_dir {
        None => {
            use std::io::Write;
            let yaml = terrace_crds::crdgen::all_crds_yaml()?;
            let mut out = std::io::stdout().lock();
            match out.write_all(yaml.as_bytes()).and_then(|()| out.flush()) {
                // A reader that stopped early (`terrace crds | head`): done, quietly.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                other => other?,
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            for crd in terrace_crds::crdgen::all_crds() {
                let path = dir.join(terrace_crds::crdgen::file_name(&crd));
                std::fs::write(&path, terrace_crds::crdgen::to_yaml(&crd)?)?;
            }
        }
    }
    Ok(())
}

async fn operator(settings: terrace_operator::Settings) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    match terrace_operator::serve(client, settings, signal::shutdown()).await? {
        terrace_operator::Stopped::Shutdown => Ok(()),
        // Exiting lets Kubernetes restart this replica, which then stands by.
        terrace_operator::Stopped::LeaseLost(why) => {
            anyhow::bail!("lost the leader lease ({why:?}); exiting")
        }
    }
}

async fn api_server(mut settings: terrace_api_server::Settings) -> anyhow::Result<()> {
    // Policies are evaluated by this binary's `policy-eval`, in processes of their own.
    settings.policy_evaluator = std::env::current_exe().ok();
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let client = kube::Client::try_from(config.clone())?;
    // The same cluster without the server's credentials: callers' rules reviews go out
    // under the callers' own tokens.
    let mut uncredentialed = config;
    uncredentialed.auth_info = kube::config::AuthInfo::default();
    let callers = kube::Client::try_from(uncredentialed)?;
    let listener = tokio::net::TcpListener::bind(settings.api_addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "API server listening");
    terrace_api_server::serve(
        settings,
        client,
        Some(callers),
        listener,
        signal::shutdown(),
    )
    .await?;
    Ok(())
}
