//! A phase's end: its Pod let go of once its log is archived (or already stored by the
//! runner).

use super::*;

/// Archives the log of `phase`'s Pod (if it exists and its engine ended) and lets go of it.
pub(super) async fn release_phase(
    ctx: &RunContext,
    run: &Run,
    run_id: &str,
    pods: &Api<Pod>,
    phase: Phase,
) -> Result<(), Error> {
    let name = pod::pod_name(&run.name_any(), phase);
    let Some(p) = pods.get_opt(&name).await? else {
        return Ok(());
    };
    if !p.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(());
    }
    archive(&ctx.base.client, run, run_id, pods, &name, None).await;
    crate::finalizers::remove(pods, &p, FINALIZER).await?;
    match pods.delete(&name, &DeleteParams::default()).await {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Copies the engine log of Pod `pod_name` into its archive ConfigMap (best effort),
/// with `terrace: <cause>` after it when the phase errored (alone when the engine has no
/// log: it never started, or the Pod is gone).
pub(super) async fn archive(
    client: &kube::Client,
    run: &Run,
    run_id: &str,
    pods: &Api<Pod>,
    pod_name: &str,
    cause: Option<&str>,
) {
    let ns = run.namespace().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    if let Ok(Some(_)) = cms.get_opt(&log_archive_name(pod_name)).await {
        return;
    }
    if let Ok(Some(pod)) = pods.get_opt(pod_name).await
        && log_stored(&pod)
    {
        // The runner stored the whole log in the blob store; the API adds the cause.
        return;
    }
    let lp = LogParams {
        container: Some(ENGINE_CONTAINER.to_owned()),
        ..LogParams::default()
    };
    let log = match pods.logs(pod_name, &lp).await {
        Ok(log) => log,
        Err(e) if cause.is_some() => {
            tracing::debug!(pod = %pod_name, error = %e, "no engine log; archiving the cause");
            String::new()
        }
        Err(e) => {
            tracing::debug!(pod = %pod_name, error = %e, "no engine log to archive");
            return;
        }
    };
    let log = crate::testpod::with_cause(log, cause);
    let Some(owner) = run.controller_owner_ref(&()) else {
        return;
    };
    match build_log_archive_for(owner, &ns, LABEL_RUN, run_id, pod_name, &log) {
        Ok(cm) => match cms.create(&PostParams::default(), &cm).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => tracing::warn!(pod = %pod_name, error = %e, "archiving a run's log"),
        },
        Err(e) => tracing::warn!(pod = %pod_name, error = %e, "archiving a run's log"),
    }
}

/// Whether the engine container of `pod` ended saying its runner stored the whole log
/// in the blob store (`log_stored` in its [`PhaseReport`]).
pub(super) fn log_stored(pod: &Pod) -> bool {
    crate::testpod::engine_message(pod)
        .and_then(|m| serde_json::from_str::<PhaseReport>(m.trim()).ok())
        .is_some_and(|r| r.log_stored)
}
