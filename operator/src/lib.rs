//! terrace's controllers and the in-Pod test runner.
//!
//! The operator watches terrace objects through kube-runtime and owns their status. It
//! runs the Organization controller (namespace, default project, status), the catalog
//! controllers (every other namespaced kind gets its `terrace.dev/id` and organization
//! labels and its conditions, see [`catalog`]), the Workspace controller (derived status)
//! the TestRun controller (one Pod per module test run, see [`testrun`]) and the state
//! retention controller (data retention policies on state versions, see [`retention`]),
//! concurrently, all sharing one [`Context`] and one shutdown signal.
//!
//! Every watch is guarded and trimmed ([`watch`]), and each kind several controllers need
//! is watched once: the Organization controller's cache answers "who owns this
//! namespace" for everyone ([`identity::Organizations`]), the catalog's caches serve
//! projects, modules, configuration versions and test variables ([`catalog`]).
//!
//! `terrace operator` enters through [`serve`]: metrics and health on `--metrics-addr`
//! ([`metrics`]), then the controllers, only while this replica holds the leader Lease
//! when `--leader-election` is on ([`leader`], [`run_elected`]). In-process users
//! (`terrace dev`, tests) call [`run`].
#![forbid(unsafe_code)]

pub mod annotate;
pub mod blob_finalizer;
pub mod catalog;
pub mod conditions;
pub mod error;
pub mod events;
pub mod finalizers;
pub mod group_index;
pub mod history;
pub mod identity;
pub mod leader;
pub mod metrics;
pub mod module_versions;
pub mod notify;
pub mod organization;
mod pod_parts;
pub mod policy_sets;
pub mod retention;
pub mod rules;
pub mod run;
pub mod runner;
pub mod settings;
pub mod testpod;
pub mod testrun;
pub mod uninstall;
pub mod vcs_status;
pub mod watch;
pub mod workspace;

use std::sync::Arc;

use futures::FutureExt;
use kube::runtime::watcher;
use terrace_crds::ids::IdKind;
use terrace_crds::{Organization, Workspace};

pub use error::Error;
pub use settings::Settings;

/// Shared state of every reconciler.
pub struct Context {
    pub client: kube::Client,
    pub settings: Settings,
    /// The bucket blobs live in (`None`: chunk Secrets in the cluster), or why the S3
    /// settings make no client.
    pub blobs: Result<Option<terrace_blobstore::s3::S3Store>, String>,
}

/// Why the controllers stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The shutdown signal resolved (after the controllers drained).
    Shutdown,
    /// This replica lost the leader Lease: its controllers were stopped at once (in-flight
    /// reconciles cancelled), since another replica may reconcile from now on.
    LeaseLost(leader::Lost),
}

/// Runs every controller until `shutdown` resolves (with `settings.leader_election`,
/// only while holding the leader Lease; see [`run_elected`]).
pub async fn run(
    client: kube::Client,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let _ = run_elected(client, settings, shutdown).await;
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `settings.metrics_addr` and runs the
/// controllers as [`run_elected`] does: what `terrace operator` runs. A replica that lost
/// the lease returns [`Stopped::LeaseLost`]; the binary then exits non-zero, so
/// Kubernetes restarts it as a fresh standby.
pub async fn serve(
    client: kube::Client,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> std::io::Result<Stopped> {
    let listener = tokio::net::TcpListener::bind(settings.metrics_addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "operator metrics and health listening");
    let shutdown = shutdown.boxed().shared();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, metrics::router())
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    let stopped = run_elected(client, settings, shutdown).await;
    let _ = stop_tx.send(());
    match server.await {
        Ok(result) => result?,
        Err(e) => tracing::warn!(error = %e, "metrics server task"),
    }
    Ok(stopped)
}

/// Runs the controllers until `shutdown` resolves. With `settings.leader_election`, first
/// waits to acquire the leader Lease (standing by meanwhile), keeps renewing it while the
/// controllers run, stops them the moment it is lost, and releases it on shutdown so a
/// standby takes over within one retry period.
pub async fn run_elected(
    client: kube::Client,
    settings: Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Stopped {
    run_elected_with(client, settings, leader::Timing::default(), shutdown).await
}

/// [`run_elected`] with the election's timing (tests shorten it).
pub async fn run_elected_with(
    client: kube::Client,
    settings: Settings,
    timing: leader::Timing,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Stopped {
    let shutdown = shutdown.boxed().shared();
    if !settings.leader_election {
        metrics::set_leader(true);
        run_controllers(client, settings, shutdown).await;
        metrics::set_leader(false);
        return Stopped::Shutdown;
    }
    let namespace = settings
        .leader_election_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let identity = leader::default_identity(settings.leader_election_identity.as_deref());
    let mut elector = leader::LeaderElector::new(client.clone(), &namespace, identity, timing);
    metrics::set_leader(false);
    tokio::select! {
        () = shutdown.clone() => return Stopped::Shutdown,
        () = elector.acquire() => {}
    }
    metrics::set_leader(true);
    let stopped = tokio::select! {
        () = run_controllers(client, settings, shutdown.clone()) => Stopped::Shutdown,
        lost = elector.hold() => {
            tracing::error!(identity = %elector.identity(), reason = ?lost, "lost the leader lease: stopping the controllers");
            Stopped::LeaseLost(lost)
        }
    };
    metrics::set_leader(false);
    if stopped == Stopped::Shutdown {
        let release = tokio::time::timeout(std::time::Duration::from_secs(5), elector.release());
        match release.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader lease"),
            Err(_) => tracing::warn!("releasing the leader lease timed out"),
        }
    }
    stopped
}

/// The shutdown signal every controller shares.
pub type Shutdown = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;
/// A controller, running until [`Shutdown`].
pub type Running = futures::future::BoxFuture<'static, ()>;

/// Controller `started`, or nothing (said in the log, `without` what) when a cache it
/// needs is missing.
pub(crate) fn or_idle(started: Result<Running, Error>, without: &str) -> Running {
    started.unwrap_or_else(|e| {
        tracing::error!(error = %e, "no {without}: a cache it needs is missing");
        futures::future::ready(()).boxed()
    })
}

/// Runs every controller until `shutdown` resolves. The feeds shared between
/// controllers are created first and subscribed to before the controllers that drive
/// them are built (see [`watch::Feed`]).
async fn run_controllers(client: kube::Client, settings: Settings, shutdown: Shutdown) {
    let blobs = terrace_blobstore::s3::S3Store::from_settings(&settings.blobs).map_err(|e| {
        tracing::error!(error = %e, "the S3 blob store is misconfigured: blobs cannot be deleted");
        e.to_string()
    });
    let ctx = Arc::new(Context {
        client,
        settings,
        blobs,
    });
    let mut organizations =
        watch::Feed::<Organization>::new(&ctx.client, (), watcher::Config::default());
    let orgs = identity::Organizations::new(organizations.store());
    let mut catalog = catalog::Catalog::new(&ctx.client);
    let mut workspace_feed =
        watch::Feed::<Workspace>::new(&ctx.client, (), watcher::Config::default());
    let state_retention = retention::controller(
        ctx.clone(),
        orgs.clone(),
        workspace_feed.store(),
        workspace_feed.subscribe(),
        organizations.subscribe(),
        shutdown.clone(),
    );
    let history = match history::controllers(
        ctx.clone(),
        orgs.clone(),
        &mut catalog,
        &mut workspace_feed,
        &mut organizations,
        shutdown.clone(),
    ) {
        Ok(c) => c.boxed(),
        Err(e) => {
            tracing::error!(error = %e, "no history archiving: a cache it needs is missing");
            futures::future::ready(()).boxed()
        }
    };
    let auto_destroy = run::auto_destroy::controller(
        ctx.clone(),
        workspace_feed.store(),
        workspace_feed.subscribe(),
        shutdown.clone(),
    );
    let auto_queue = or_idle(
        run::auto_queue::controller(ctx.clone(), &mut catalog, shutdown.clone()),
        "runs of uploads",
    );
    let commit_statuses = or_idle(
        vcs_status::controller(ctx.clone(), &mut catalog, shutdown.clone()),
        "commit statuses",
    );
    let notifications = or_idle(
        notify::controller(
            ctx.clone(),
            orgs.clone(),
            workspace_feed.store(),
            &mut catalog,
            shutdown.clone(),
        ),
        "notifications",
    );
    let module_versions = or_idle(
        module_versions::controller(ctx.clone(), &mut catalog, shutdown.clone()),
        "module version status",
    );
    let policy_sets = or_idle(
        policy_sets::controller(ctx.clone(), &mut catalog, shutdown.clone()),
        "policy set status",
    );
    let runs = run::controller(
        ctx.clone(),
        orgs.clone(),
        workspace_feed.store(),
        workspace_feed.subscribe(),
        catalog.stores(),
        shutdown.clone(),
    );
    let workspaces = workspace::controller(
        ctx.clone(),
        orgs.clone(),
        workspace_feed,
        &mut organizations,
        &mut catalog,
        shutdown.clone(),
    );
    let test_runs = testrun::controller(ctx.clone(), orgs.clone(), &mut catalog, shutdown.clone());
    let default_projects = catalog.subscribe(IdKind::Project);
    let catalog = catalog.controllers(ctx.clone(), orgs, &mut organizations, shutdown.clone());
    let archives = match &ctx.blobs {
        Ok(Some(s3)) => Some(blob_finalizer::controller(
            ctx.clone(),
            s3.clone(),
            shutdown.clone(),
        )),
        _ => None,
    };
    let archives = async move {
        if let Some(c) = archives {
            c.await;
        }
    };
    let organizations = organization::controller(ctx, organizations, default_projects, shutdown);
    tokio::join!(
        organizations,
        catalog,
        workspaces,
        test_runs,
        runs,
        auto_destroy,
        auto_queue,
        commit_statuses,
        notifications,
        module_versions,
        policy_sets,
        state_retention,
        archives,
        history
    );
}
