//! Configuration of `terrace operator` (flags and environment variables).

use clap::Args;

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
    /// Most test runs running at once across all organizations.
    #[arg(long, env = "TERRACE_TEST_RUN_CONCURRENCY", default_value_t = 50)]
    pub test_run_concurrency: u32,
    /// Address of the operator's metrics and health endpoints.
    #[arg(
        long,
        env = "TERRACE_OPERATOR_METRICS_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_addr: std::net::SocketAddr,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            engine_image: "ghcr.io/opentofu/opentofu:1.10".into(),
            engine_command: "tofu".into(),
            test_run_concurrency: 50,
            metrics_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 9090)),
        }
    }
}
