//! Configuration of the API server (flags and environment variables).

use clap::{Args, ValueEnum};

/// Which edition of the service terrace behaves as (SPEC.md: some endpoints exist only on
/// the self-hosted edition, some attributes only on the hosted one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Edition {
    #[default]
    SelfHosted,
    Hosted,
}

/// Where configuration archives are kept (DESIGN.md §2, the BlobStore).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BlobStoreKind {
    /// Compressed, chunked Secrets in the organization's namespace, owned by the
    /// ConfigurationVersion (deleted with it). The only store so far.
    #[default]
    Secrets,
}

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
    /// Address of `/metrics` (and `/healthz`, `/readyz`), a listener apart from the API
    /// so the public Ingress does not expose it. In-process servers (`terrace dev`,
    /// tests) have none unless they set it.
    #[arg(long, env = "TERRACE_API_METRICS_ADDR", default_value = "0.0.0.0:9090")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Also serve `/metrics` on the API router (`terrace dev`, which binds no metrics
    /// port). Not a flag: in a cluster the API port is public.
    #[arg(skip)]
    pub metrics_on_api_router: bool,
    /// Where configuration archives are kept.
    #[arg(long, env = "TERRACE_BLOB_STORE", value_enum, default_value_t = BlobStoreKind::Secrets)]
    pub blob_store: BlobStoreKind,
    /// Key that signs capability URLs (log-read URLs). Every replica needs the same one;
    /// without it each process makes a random key (fine for one process).
    #[arg(long, env = "TERRACE_URL_SIGNING_KEY", hide_env_values = true)]
    pub url_signing_key: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            api_addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8080)),
            base_url: None,
            edition: Edition::SelfHosted,
            default_terraform_version: "1.9.8".into(),
            max_body_bytes: 1024 * 1024,
            blob_store: BlobStoreKind::Secrets,
            metrics_addr: None,
            metrics_on_api_router: false,
            url_signing_key: None,
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
}
