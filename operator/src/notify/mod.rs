//! The notification controller (docs/notifications.md): delivers each workspace's run
//! notifications to its NotificationConfigurations, apart from the Run controller, so a
//! slow or failing destination never delays a run.
//!
//! One reconcile per configuration (woken by its own changes and by every change of a
//! run of its workspace, through the catalog's feeds):
//! - observe: the configuration, its workspace (cache), the workspace's runs (cache),
//!   its token (its Secret, read by name, only when a payload is signed);
//! - decide: the notifications owed ([`notification::due`]: a trigger it listens to,
//!   reached since it exists and within the delivery window, not yet done), and a
//!   verification when the API server asked for one (the `terrace.dev/verify-requested`
//!   annotation differs from `status.verified`);
//! - act: send each, oldest first, on a blocking thread ([`send`]); record each delivery
//!   response (the ten newest) and what is done with (`status.delivered`: delivered, or
//!   given up after the last attempt) in one status patch. A failed attempt is retried
//!   after [`notification::retry_delay`] (kept in memory: an operator restart starts the
//!   count again, so a notification is delivered at least once).

pub mod send;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{
    ANNOTATION_VERIFY_REQUESTED, FIELD_MANAGER_OPERATOR, LABEL_ID, NOTIFICATION_RESPONSES_KEPT,
};
use terrace_crds::ids::IdKind;
use terrace_crds::notification::{
    RunFacts, Subject, at_or_after, due, notices, notify_since, payload, prune_delivered,
    retry_delay, signature,
};
use terrace_crds::resources::Named;
use terrace_crds::{
    DeliveredNotification, DeliveryResponse, NotificationConfiguration, Run, Workspace,
};

use crate::catalog::{Catalog, typed};
use crate::identity::Organizations;
use crate::{Context, Error, Running, Shutdown};
use send::{Outcome, Sender};

/// What every reconcile shares.
pub struct NotifyContext {
    base: Arc<Context>,
    orgs: Organizations,
    workspaces: Store<Workspace>,
    runs: Store<DynamicObject>,
    /// Projects (the catalog's cache): a project's configuration notifies the runs of
    /// every workspace of the project.
    projects: Store<DynamicObject>,
    sender: Sender,
    recorder: Recorder,
    /// Failed attempts of notifications not yet done: (configuration uid, key) → the
    /// attempts so far and when the next may go.
    attempts: Mutex<HashMap<(String, String), (u32, Instant)>>,
    /// What each configuration (uid) was last written to have done with, until the
    /// cache shows that write.
    written: Mutex<HashMap<String, Vec<DeliveredNotification>>>,
}

/// The controller, run until `shutdown` resolves (call before the catalog runs).
pub fn controller(
    ctx: Arc<Context>,
    orgs: Organizations,
    workspaces: Store<Workspace>,
    catalog: &mut Catalog,
    shutdown: Shutdown,
) -> Result<Running, Error> {
    let stores = catalog.stores();
    let (_, runs) = stores.store(IdKind::Run)?;
    let (_, projects) = stores.store(IdKind::Project)?;
    let fed = catalog.controller(IdKind::NotificationConfiguration)?;
    let run_changes = catalog.subscribe(IdKind::Run);
    let resource = fed.resource;
    let (by_run, ws_for_map, res_for_map, prj_for_map) = (
        fed.store,
        workspaces.clone(),
        resource.clone(),
        projects.clone(),
    );
    let controller = fed.controller.watches_stream_with(
        run_changes,
        move |run: DynamicObject| {
            configs_of_run(&res_for_map, &by_run, &ws_for_map, &prj_for_map, &run)
        },
        resource,
    );
    let nctx = Arc::new(NotifyContext {
        sender: Sender::new(ctx.settings.notification_allowed_cidrs.0.clone()),
        recorder: crate::events::new_recorder(&ctx.client),
        base: ctx,
        orgs,
        workspaces,
        runs,
        projects,
        attempts: Mutex::default(),
        written: Mutex::default(),
    });
    Ok(crate::metrics::NOTIFY.running(controller, shutdown, reconcile, nctx))
}

/// The workspace's names: its ID and TFE name.
fn named(ws: &Workspace) -> Named<'_> {
    Named {
        id: ws.labels().get(LABEL_ID).map(String::as_str),
        name: &ws.spec.name,
    }
}

/// The cached workspace of namespace `ns` a configuration names (`ws-…` or TFE name).
fn workspace_of(workspaces: &Store<Workspace>, ns: &str, entry: &str) -> Option<Arc<Workspace>> {
    let entry = [entry.to_owned()];
    workspaces
        .state()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some(ns) && named(w).listed_in(&entry))
}

/// The cached project of workspace `ws` (its `spec.project`, else the namespace's
/// default project): its ID and TFE name.
fn project_names(projects: &Store<DynamicObject>, ws: &Workspace) -> Option<(String, String)> {
    let ns = ws.namespace().unwrap_or_default();
    let mut in_ns = projects
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()));
    match ws.spec.project.as_deref().filter(|p| !p.is_empty()) {
        Some(name) => in_ns.find(|p| p.name_any() == name),
        None => crate::workspace::default_project(in_ns),
    }
    .map(|p| {
        (
            p.labels().get(LABEL_ID).cloned().unwrap_or_default(),
            p.data["spec"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    })
}

/// Whether configuration entry `project` (an ID or a name) is workspace `ws`'s project.
fn in_project(projects: &Store<DynamicObject>, ws: &Workspace, project: &str) -> bool {
    project_names(projects, ws).is_some_and(|(id, name)| {
        Named {
            id: Some(&id).filter(|i| !i.is_empty()).map(String::as_str),
            name: &name,
        }
        .listed_in(&[project.to_owned()])
    })
}

/// The workspaces whose runs configuration `nc` of `ns` notifies: the one it names, or
/// every workspace of the project it names.
fn workspaces_of(
    ctx: &NotifyContext,
    ns: &str,
    nc: &NotificationConfiguration,
) -> Vec<Arc<Workspace>> {
    match nc.spec.project.as_deref() {
        Some(project) => ctx
            .workspaces
            .state()
            .into_iter()
            .filter(|w| w.namespace().as_deref() == Some(ns))
            .filter(|w| in_project(&ctx.projects, w, project))
            .collect(),
        None => workspace_of(&ctx.workspaces, ns, &nc.spec.workspace)
            .into_iter()
            .collect(),
    }
}

/// The configurations a change of `run` concerns: those of its workspace and of its
/// workspace's project.
fn configs_of_run(
    resource: &ApiResource,
    configs: &Store<DynamicObject>,
    workspaces: &Store<Workspace>,
    projects: &Store<DynamicObject>,
    run: &DynamicObject,
) -> Vec<ObjectRef<DynamicObject>> {
    let ns = run.namespace().unwrap_or_default();
    let Some(ws_object) = run.data["spec"]["workspace"].as_str() else {
        return Vec::new();
    };
    let Some(ws) = workspaces.get(&ObjectRef::new(ws_object).within(&ns)) else {
        return Vec::new();
    };
    let names = named(&ws);
    configs
        .state()
        .into_iter()
        .filter(|c| c.namespace().as_deref() == Some(ns.as_str()))
        .filter(|c| match c.data["spec"]["project"].as_str() {
            Some(project) => in_project(projects, &ws, project),
            None => c.data["spec"]["workspace"]
                .as_str()
                .is_some_and(|w| names.listed_in(&[w.to_owned()])),
        })
        .map(|c| ObjectRef::from_obj_with(c.as_ref(), resource.clone()))
        .collect()
}

/// One notification to send: its key, the payload and what to record.
struct Job {
    key: String,
    run: String,
    trigger: String,
    at: String,
    body: Vec<u8>,
    attempt: u32,
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<NotifyContext>) -> Result<Action, Error> {
    let Some(nc) = typed::<NotificationConfiguration>(&obj) else {
        return Ok(Action::await_change());
    };
    let (Some(id), Some(uid)) = (nc.labels().get(LABEL_ID).cloned(), nc.uid()) else {
        // The catalog gives it its ID first.
        return Ok(Action::await_change());
    };
    if nc.meta().deletion_timestamp.is_some() {
        forget(&ctx, &uid);
        return Ok(Action::await_change());
    }
    let ns = nc.namespace().unwrap_or_default();
    let status = nc.status.clone().unwrap_or_default();
    let asked = nc
        .annotations()
        .get(ANNOTATION_VERIFY_REQUESTED)
        .filter(|a| Some(*a) != status.verified.as_ref())
        .cloned();
    let workspaces = workspaces_of(&ctx, &ns, &nc);
    let org = ctx.orgs.owner(&ns).await?;
    let org_name = org
        .as_ref()
        .map(|o| o.tfe_name().to_owned())
        .unwrap_or_default();
    // Each workspace's ID and name, as its payloads say (a project's configuration
    // verifies without one).
    let ws_ids = |w: Option<&Arc<Workspace>>| -> (String, String) {
        match w {
            Some(w) => (
                w.labels()
                    .get(LABEL_ID)
                    .cloned()
                    .unwrap_or_else(|| nc.spec.workspace.clone()),
                w.spec.name.clone(),
            ),
            None => (nc.spec.workspace.clone(), nc.spec.workspace.clone()),
        }
    };
    let (ws_id, ws_name) = ws_ids(workspaces.first().filter(|_| nc.spec.project.is_none()));
    let subject = Subject {
        configuration_id: &id,
        configuration_name: &nc.spec.name,
        workspace_id: &ws_id,
        workspace_name: &ws_name,
        organization: &org_name,
    };

    let now = Timestamp::now();
    let created = nc.metadata.creation_timestamp.as_ref().map_or(now, |t| t.0);
    let (enabled_since, enabled_changed) = enabled_since(&nc, created, now);
    let since = notify_since(enabled_since.unwrap_or(created), now);
    let mut ledger = status.delivered.clone();
    if let Some(mine) = ctx.written.lock().expect("lock").get(&uid) {
        for d in mine {
            if !ledger
                .iter()
                .any(|l| l.run == d.run && l.trigger == d.trigger)
            {
                ledger.push(d.clone());
            }
        }
    }
    prune_delivered(&mut ledger, since);

    // What is owed, and what waits for its retry.
    let mut jobs = Vec::new();
    let mut next_retry: Option<Duration> = None;
    let attempts = ctx.attempts.lock().expect("lock").clone();
    for ws in workspaces.iter().filter(|_| nc.spec.enabled) {
        let (ws_id, ws_name) = ws_ids(Some(ws));
        let subject = Subject {
            workspace_id: &ws_id,
            workspace_name: &ws_name,
            ..subject
        };
        let runs = runs_of(&ctx.runs, &ns, &ws.name_any(), since);
        for run in &runs {
            let run_id = run.labels().get(LABEL_ID).cloned().unwrap_or_default();
            if run_id.is_empty() {
                continue;
            }
            let owed = due(&run_id, notices(run), &nc.spec.triggers, since, &ledger);
            for n in owed {
                let key = n.key(&run_id);
                let (tried, next) = attempts
                    .get(&(uid.clone(), key.clone()))
                    .copied()
                    .unwrap_or((0, Instant::now()));
                let wait = next.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    next_retry = Some(next_retry.map_or(wait, |w| w.min(wait)));
                    continue;
                }
                let facts = run_facts(&ctx, run, &run_id, &org_name, &ws_name);
                let body = payload(&nc.spec.destination_type, &subject, Some((&facts, &n)));
                jobs.push(Job {
                    key,
                    run: run_id.clone(),
                    trigger: n.trigger.to_owned(),
                    at: n.at.clone(),
                    body: serde_json::to_vec(&body)?,
                    attempt: tried + 1,
                });
            }
        }
    }
    jobs.sort_by(|a, b| a.at.cmp(&b.at));
    if jobs.is_empty() && asked.is_none() && !enabled_changed {
        remember(&ctx, &uid, &ledger);
        return Ok(next_retry.map_or_else(Action::await_change, Action::requeue));
    }

    let token = if jobs.is_empty() && asked.is_none() {
        None
    } else {
        token_of(&ctx, &nc, &ns).await?
    };
    let sign = |body: &[u8]| {
        (nc.spec.destination_type == "generic")
            .then(|| token.as_deref().map(|t| signature(t, body)))
            .flatten()
    };
    let mut responses: Vec<DeliveryResponse> = Vec::new();
    let mut verified = None;
    if let Some(asked) = &asked {
        let body = serde_json::to_vec(&payload(&nc.spec.destination_type, &subject, None))?;
        let (mut r, outcome) = deliver(&ctx.sender, &nc.spec.url, body.clone(), sign(&body)).await;
        r.notification = "verification".to_owned();
        r.attempt = 1;
        crate::metrics::notification_delivered(outcome.as_str());
        responses.push(r);
        verified = Some(asked.clone());
    }
    for job in jobs {
        let sig = sign(&job.body);
        let (mut r, outcome) = deliver(&ctx.sender, &nc.spec.url, job.body, sig).await;
        r.notification = job.key.clone();
        r.attempt = job.attempt;
        crate::metrics::notification_delivered(outcome.as_str());
        let slot = (uid.clone(), job.key.clone());
        let done = match (outcome, retry_delay(job.attempt)) {
            (Outcome::Delivered, _) => true,
            (_, Some(delay)) => {
                next_retry = Some(next_retry.map_or(delay, |w| w.min(delay)));
                ctx.attempts
                    .lock()
                    .expect("lock")
                    .insert(slot.clone(), (job.attempt, Instant::now() + delay));
                false
            }
            (_, None) => {
                give_up_event(&ctx, &nc, &job.key, &r).await;
                true
            }
        };
        if done {
            ctx.attempts.lock().expect("lock").remove(&slot);
            ledger.push(DeliveredNotification {
                run: job.run,
                trigger: job.trigger,
                at: job.at,
            });
        }
        responses.push(r);
    }

    // Newest first, then the earlier ones.
    responses.reverse();
    responses.extend(status.delivery_responses.iter().cloned());
    responses.truncate(NOTIFICATION_RESPONSES_KEPT);
    let mut patch = json!({"status": {
        "deliveryResponses": responses,
        "delivered": ledger,
        "enabledSince": enabled_since.map(|t| terrace_crds::common::timestamp(&t)),
    }});
    if let Some(v) = verified {
        patch["status"]["verified"] = json!(v);
    }
    let api: Api<NotificationConfiguration> = Api::namespaced(ctx.base.client.clone(), &ns);
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
        ..Default::default()
    };
    api.patch_status(&nc.name_any(), &pp, &Patch::Merge(&patch))
        .await?;
    remember(&ctx, &uid, &ledger);
    Ok(next_retry.map_or_else(Action::await_change, Action::requeue))
}

/// Since when configuration `nc` is enabled (None: it is not), and whether that differs
/// from its status. Enabled when first seen: since its creation if its spec never changed
/// (created enabled), else since the API's last change of it (`terrace.dev/updated-at`,
/// the write that enabled it: this reconcile may come seconds later on a loaded
/// operator, after the first runs it owes notices for moved on), else since now (enabled
/// with kubectl).
fn enabled_since(
    nc: &NotificationConfiguration,
    created: Timestamp,
    now: Timestamp,
) -> (Option<Timestamp>, bool) {
    let recorded = nc
        .status
        .as_ref()
        .and_then(|s| s.enabled_since.as_deref())
        .and_then(|t| t.parse::<Timestamp>().ok());
    let since = match (nc.spec.enabled, recorded) {
        (false, _) => None,
        (true, Some(t)) => Some(t),
        (true, None) if nc.metadata.generation.unwrap_or(1) <= 1 => Some(created),
        (true, None) => Some(
            nc.annotations()
                .get(terrace_crds::constants::ANNOTATION_UPDATED_AT)
                .and_then(|t| t.parse::<Timestamp>().ok())
                .filter(|t| *t <= now)
                .unwrap_or(now),
        ),
    };
    (since, since != recorded)
}

/// Remembers configuration `uid`'s ledger as written.
fn remember(ctx: &NotifyContext, uid: &str, ledger: &[DeliveredNotification]) {
    ctx.written
        .lock()
        .expect("lock")
        .insert(uid.to_owned(), ledger.to_vec());
}

/// Forgets what was kept of configuration `uid` (it is going).
fn forget(ctx: &NotifyContext, uid: &str) {
    ctx.written.lock().expect("lock").remove(uid);
    ctx.attempts
        .lock()
        .expect("lock")
        .retain(|(u, _), _| u != uid);
}

/// The cached runs of workspace object `ws_object` in `ns` that reached a state since
/// `since` (the others owe nothing: a workspace's history is not read whole on every
/// change of one of its runs).
fn runs_of(runs: &Store<DynamicObject>, ns: &str, ws_object: &str, since: Timestamp) -> Vec<Run> {
    let recent = |r: &DynamicObject| {
        let stamps = r.data["status"]["statusTimestamps"].as_object();
        stamps
            .into_iter()
            .flat_map(|m| m.values())
            .filter_map(|v| v.as_str())
            .any(|t| at_or_after(t, since))
            || r.metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|t| t.0 >= since)
    };
    runs.state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns))
        .filter(|r| r.data["spec"]["workspace"].as_str() == Some(ws_object))
        .filter(|r| recent(r))
        .filter_map(|r| typed::<Run>(&r))
        .collect()
}

/// What a payload says of run `run`.
fn run_facts<'a>(
    ctx: &NotifyContext,
    run: &'a Run,
    run_id: &'a str,
    org: &str,
    ws: &str,
) -> RunFacts<'a> {
    let settings = &ctx.base.settings;
    let base = settings.web_base();
    // A health assessment's notification is about its result, shown on the workspace's
    // page (docs/health.md).
    let assessment = run
        .status
        .as_ref()
        .filter(|_| run.spec.assessment)
        .and_then(|s| {
            let result = s.assessment.as_deref()?;
            Some(terrace_crds::notification::AssessmentFacts {
                result,
                result_id: terrace_crds::assessment::result_id(run_id)?,
                at: s.plan.finished_at.as_deref().unwrap_or_default(),
                base: base.clone(),
            })
        });
    let url = if assessment.is_some() {
        format!("{base}/app/{org}/workspaces/{ws}")
    } else {
        format!("{base}/app/{org}/{ws}/runs/{run_id}")
    };
    RunFacts {
        id: run_id,
        message: &run.spec.message,
        created_at: run
            .status
            .as_ref()
            .and_then(|s| s.status_timestamps.get(terrace_crds::run::QUEUEABLE_AT))
            .map_or("", String::as_str),
        created_by: run.spec.created_by.as_deref(),
        url,
        assessment,
    }
}

/// The configuration's token, from its Secret (None: unsigned). A missing Secret is
/// an error to retry: the API server writes it just after the configuration.
async fn token_of(
    ctx: &NotifyContext,
    nc: &NotificationConfiguration,
    ns: &str,
) -> Result<Option<String>, Error> {
    let Some(r) = nc.spec.token_from.as_ref() else {
        return Ok(None);
    };
    if nc.spec.destination_type != "generic" {
        return Ok(None);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), ns);
    // Retried until the Secret is there: a Secret's change does not wake the controller.
    let missing = || {
        Error::Unavailable(format!(
            "the token's Secret {} has no key {}",
            r.name, r.key
        ))
    };
    let secret = secrets.get_opt(&r.name).await?.ok_or_else(missing)?;
    let value = secret
        .data
        .and_then(|d| d.get(&r.key).cloned())
        .ok_or_else(missing)?;
    Ok(Some(String::from_utf8_lossy(&value.0).into_owned()))
}

/// Sends on a blocking thread.
async fn deliver(
    sender: &Sender,
    url: &str,
    body: Vec<u8>,
    sig: Option<String>,
) -> (DeliveryResponse, Outcome) {
    let (sender, url_owned) = (sender.clone(), url.to_owned());
    let sent = tokio::task::spawn_blocking(move || sender.send(&url_owned, &body, sig.as_deref()));
    match sent.await {
        Ok(r) => r,
        Err(e) => (
            DeliveryResponse {
                url: url.to_owned(),
                body: format!("not sent: {e}"),
                sent_at: terrace_crds::common::timestamp(&Timestamp::now()),
                ..Default::default()
            },
            Outcome::Failed,
        ),
    }
}

/// A Warning Event: notification `key` was given up after its last attempt.
async fn give_up_event(
    ctx: &NotifyContext,
    nc: &NotificationConfiguration,
    key: &str,
    r: &DeliveryResponse,
) {
    let answer = if r.code.is_empty() {
        "no answer".to_owned()
    } else {
        format!("HTTP {}", r.code)
    };
    crate::events::publish_event(
        &ctx.recorder,
        &nc.object_ref(&()),
        EventType::Warning,
        "NotificationFailed",
        "Deliver",
        format!(
            "gave up on {key} after {} attempts ({answer})",
            terrace_crds::constants::NOTIFICATION_MAX_ATTEMPTS
        ),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(
        enabled: bool,
        generation: i64,
        updated_at: Option<&str>,
    ) -> NotificationConfiguration {
        let mut annotations = serde_json::Map::new();
        if let Some(t) = updated_at {
            annotations.insert(
                terrace_crds::constants::ANNOTATION_UPDATED_AT.into(),
                t.into(),
            );
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "terrace.dev/v1alpha1",
            "kind": "NotificationConfiguration",
            "metadata": {"name": "n", "namespace": "acme", "generation": generation,
                         "annotations": annotations},
            "spec": {"name": "n", "destinationType": "generic", "enabled": enabled,
                     "url": "http://example.com", "workspace": "ws-x"},
        }))
        .expect("configuration")
    }

    #[test]
    fn a_configuration_is_enabled_since_the_write_that_enabled_it() {
        let created: Timestamp = "2026-11-29T10:00:00Z".parse().unwrap();
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        // Created enabled: since its creation.
        assert_eq!(
            enabled_since(&config(true, 1, None), created, now).0,
            Some(created)
        );
        // Enabled through the API a moment before the operator looked: since that write.
        let at = "2026-11-29T11:59:57.250Z";
        assert_eq!(
            enabled_since(&config(true, 2, Some(at)), created, now).0,
            Some(at.parse().unwrap())
        );
        // Enabled with kubectl (no stamp), or a stamp from the future: since now.
        assert_eq!(
            enabled_since(&config(true, 2, None), created, now).0,
            Some(now)
        );
        let ahead = "2026-11-29T12:00:05Z";
        assert_eq!(
            enabled_since(&config(true, 2, Some(ahead)), created, now).0,
            Some(now)
        );
        // Disabled: not at all.
        assert_eq!(
            enabled_since(&config(false, 2, Some(at)), created, now).0,
            None
        );
    }
}
