//! Archive: the engine log of a run that reached a final state is copied into a
//! ConfigMap before the Pod's finalizer goes (see `testpod`'s log archive contract), so
//! the API server can serve it after the Pod is deleted; then the Pod is released.
//!
//! Best effort: the outcome is recorded first, a log that cannot be read (container
//! never started: 400) is skipped, and a transient failure is retried on the next
//! reconciles at most [`ARCHIVE_ATTEMPTS`] times before the Pod is released without an
//! archive.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{LogParams, PostParams};
use kube::{Api, ResourceExt};
use terrace_crds::TestRun;
use terrace_crds::testoutput::RunnerReport;

use super::context::RunContext;
use crate::Error;
use crate::testpod::{self, ENGINE_CONTAINER, FINALIZER};

/// Attempts at archiving a final run's engine log before its Pod is released without.
pub const ARCHIVE_ATTEMPTS: u32 = 3;

/// Archives the engine log of `run`'s Pod `pod_name` (see [`archive_log`]). True when the
/// Pod may be released: archived, nothing to archive, or given up after
/// [`ARCHIVE_ATTEMPTS`] transient failures (or one permanent one).
pub(super) async fn archive_with_retries(
    ctx: &RunContext,
    run: &TestRun,
    pods: &Api<Pod>,
    pod_name: &str,
    cause: Option<&str>,
) -> bool {
    let key = run.uid().unwrap_or_default();
    let result = archive_log(&ctx.base.client, run, pods, pod_name, cause).await;
    let mut failures = ctx
        .archive_failures
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match result {
        Ok(()) => {
            failures.remove(&key);
            true
        }
        Err(e) => {
            let n = failures.entry(key.clone()).or_insert(0);
            *n += 1;
            if e.is_transient() && *n < ARCHIVE_ATTEMPTS {
                tracing::warn!(error = %e, pod = %pod_name, attempt = *n, "archiving the engine log failed; retrying");
                false
            } else {
                tracing::warn!(error = %e, pod = %pod_name, attempt = *n, "archiving the engine log failed; releasing the Pod without it");
                failures.remove(&key);
                true
            }
        }
    }
}

/// Copies the `engine` container's log of Pod `pod_name` into the run's log archive
/// ConfigMap ([`testpod::build_log_archive`]), with `terrace: <cause>` after it when the
/// run errored. An archive that exists already is kept; a log the kubelet cannot serve
/// (400: the container never started; 404: the Pod is gone) leaves only the cause to
/// archive, or nothing.
pub async fn archive_log(
    client: &kube::Client,
    run: &TestRun,
    pods: &Api<Pod>,
    pod_name: &str,
    cause: Option<&str>,
) -> Result<(), Error> {
    let ns = run
        .namespace()
        .ok_or_else(|| Error::Invalid("test run without namespace".into()))?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let name = testpod::log_archive_name(pod_name);
    if cms.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    if let Some(pod) = pods.get_opt(pod_name).await?
        && testpod::engine_message(&pod)
            .and_then(|m| serde_json::from_str::<RunnerReport>(m.trim()).ok())
            .is_some_and(|r| r.log_stored)
    {
        // The runner stored the whole log in the blob store.
        return Ok(());
    }
    let lp = LogParams {
        container: Some(ENGINE_CONTAINER.to_owned()),
        ..LogParams::default()
    };
    let log = match pods.logs(pod_name, &lp).await {
        Ok(log) => log,
        Err(kube::Error::Api(s)) if (s.code == 400 || s.code == 404) && cause.is_some() => {
            tracing::debug!(pod = %pod_name, message = %s.message, "no engine log; archiving the cause");
            String::new()
        }
        Err(kube::Error::Api(s)) if s.code == 400 || s.code == 404 => {
            tracing::debug!(pod = %pod_name, message = %s.message, "no engine log to archive");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let log = testpod::with_cause(log, cause);
    let run_id = testpod::run_id(run).map_or_else(|| run.name_any(), str::to_owned);
    let cm = testpod::build_log_archive(run, &run_id, pod_name, &log)?;
    match cms.create(&PostParams::default(), &cm).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Removes [`FINALIZER`] from the Pod (see [`crate::finalizers::remove`]).
pub(super) async fn release(pods: &Api<Pod>, pod: &Pod) -> Result<(), Error> {
    crate::finalizers::remove(pods, pod, FINALIZER).await
}
