//! The workspace's lock held by a run: taken when the run starts (a guarded merge under
//! the workspace's resourceVersion) and let go when it ends.

use super::*;

/// Locks the workspace for the run (true when it holds the lock now).
pub(super) async fn lock_workspace(
    ctx: &RunContext,
    ws: &Workspace,
    run_id: &str,
) -> Result<bool, Error> {
    let me = LockHolder::Run(run_id.to_owned());
    match holder_of(ws) {
        Some(h) if h == me => return Ok(true),
        Some(_) => return Ok(false),
        None => {}
    }
    let api: Api<Workspace> =
        Api::namespaced(ctx.base.client.clone(), &ws.namespace().unwrap_or_default());
    let annotations = json!({
        ANNOTATION_LOCKED_BY: me.annotation(),
        ANNOTATION_LOCKED_AT: terrace_crds::common::timestamp(&Timestamp::now()),
        ANNOTATION_LOCK_REASON: format!("Locked by run {run_id}"),
    });
    annotate_workspace(&api, ws, annotations).await
}

/// Merges `annotations` (a JSON object; `null` removes one) into the workspace's under
/// its resourceVersion: true when written, false when the workspace changed meanwhile
/// (409).
pub(crate) async fn annotate_workspace(
    api: &Api<Workspace>,
    ws: &Workspace,
    annotations: serde_json::Value,
) -> Result<bool, Error> {
    let body = json!({"metadata": {
        "resourceVersion": ws.resource_version(),
        "annotations": annotations,
    }});
    match api
        .patch(&ws.name_any(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Unlocks the workspace if the run holds it.
pub(super) async fn unlock_workspace(
    ctx: &RunContext,
    ns: &str,
    ws_name: &str,
    run_id: &str,
) -> Result<(), Error> {
    let api: Api<Workspace> = Api::namespaced(ctx.base.client.clone(), ns);
    for _ in 0..5 {
        let Some(ws) = api.get_opt(ws_name).await? else {
            return Ok(());
        };
        if holder_of(&ws) != Some(LockHolder::Run(run_id.to_owned())) {
            return Ok(());
        }
        let annotations = json!({
            ANNOTATION_LOCKED_BY: null,
            ANNOTATION_LOCKED_AT: null,
            ANNOTATION_LOCK_REASON: null,
        });
        if annotate_workspace(&api, &ws, annotations).await? {
            return Ok(());
        }
    }
    Err(Error::Unavailable(
        "the workspace kept changing while unlocking it".into(),
    ))
}
