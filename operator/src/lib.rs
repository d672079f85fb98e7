//! terrace's controllers and the in-Pod test runner.
//!
//! The operator watches terrace objects through kube-runtime and owns their status. Today
//! it runs the Organization controller (namespace, default project, status); the workspace
//! and test run controllers build on the same [`Context`].
#![forbid(unsafe_code)]

pub mod error;
pub mod organization;
pub mod runner;
pub mod settings;

use std::sync::Arc;

pub use error::Error;
pub use settings::Settings;

/// Shared state of every reconciler.
pub struct Context {
    pub client: kube::Client,
    pub settings: Settings,
}

/// Runs every controller until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ctx = Arc::new(Context { client, settings });
    organization::run(ctx, shutdown).await;
}
