//! The Organization controller: for each Organization it keeps the organization's
//! namespace and default project in place and reports the outcome in status (kstatus
//! conditions, the effective TFE name and namespace, the default project's ID).
//!
//! The namespace is owned by the Organization, so deleting the organization removes its
//! namespace and everything in it through Kubernetes garbage collection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{
    CONDITION_READY, FIELD_MANAGER_OPERATOR, LABEL_DEFAULT_PROJECT, LABEL_ID, LABEL_MANAGED_BY,
    LABEL_ORGANIZATION, MANAGED_BY,
};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{Organization, Project, ProjectSpec};

use crate::{Context, Error, metrics};

/// Object name of every organization's default project.
pub const DEFAULT_PROJECT_OBJECT: &str = "default";
/// TFE name of every organization's default project.
pub const DEFAULT_PROJECT_NAME: &str = "Default Project";

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let orgs: Api<Organization> = Api::all(ctx.client.clone());
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    Controller::new(orgs, watcher::Config::default())
        .owns(
            namespaces,
            watcher::Config::default().labels(LABEL_MANAGED_BY),
        )
        .graceful_shutdown_on(shutdown)
        .run(
            |org, ctx| {
                metrics::instrument(
                    metrics::CONTROLLER_ORGANIZATION,
                    org.as_ref(),
                    reconcile(org.clone(), ctx),
                )
            },
            error_policy,
            ctx,
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "organization reconcile");
            }
        })
        .await;
}

async fn reconcile(org: Arc<Organization>, ctx: Arc<Context>) -> Result<Action, Error> {
    if org.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = org.target_namespace().to_owned();
    ensure_namespace(&org, &ns, &ctx).await?;
    let project_id = ensure_default_project(&org, &ns, &ctx).await?;
    write_status(&org, &ns, &project_id, &ctx).await?;
    Ok(Action::requeue(Duration::from_secs(600)))
}

fn error_policy(_org: Arc<Organization>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, kind = err.metric_label(), "organization reconcile failed");
    if err.is_transient() {
        Action::requeue(Duration::from_secs(5))
    } else {
        Action::await_change()
    }
}

async fn ensure_namespace(org: &Organization, ns: &str, ctx: &Context) -> Result<(), Error> {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let owner = org
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid("no uid".into()))?;
    let desired = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
                (LABEL_ORGANIZATION.to_owned(), org.name_any()),
            ])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        ..Default::default()
    };
    let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
    api.patch(ns, &pp, &Patch::Apply(&desired)).await?;
    Ok(())
}

async fn ensure_default_project(
    org: &Organization,
    ns: &str,
    ctx: &Context,
) -> Result<String, Error> {
    let api: Api<Project> = Api::namespaced(ctx.client.clone(), ns);
    let existing = api
        .list(&kube::api::ListParams::default().labels(&format!("{LABEL_DEFAULT_PROJECT}=true")))
        .await?;
    if let Some(p) = existing.items.first()
        && let Some(id) = p.labels().get(LABEL_ID)
    {
        return Ok(id.clone());
    }
    let id = new_id(IdKind::Project);
    let project = Project {
        metadata: ObjectMeta {
            name: Some(DEFAULT_PROJECT_OBJECT.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_DEFAULT_PROJECT.to_owned(), "true".to_owned()),
                (LABEL_ORGANIZATION.to_owned(), org.name_any()),
            ])),
            ..Default::default()
        },
        spec: ProjectSpec {
            name: DEFAULT_PROJECT_NAME.to_owned(),
            ..Default::default()
        },
        status: None,
    };
    match api.create(&PostParams::default(), &project).await {
        Ok(_) => Ok(id),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // A project with the default object name exists (e.g. applied by a user):
            // adopt it as the default project.
            let p = api.get(DEFAULT_PROJECT_OBJECT).await?;
            let id = p.labels().get(LABEL_ID).cloned().unwrap_or(id);
            let patch =
                json!({"metadata": {"labels": {LABEL_ID: id, LABEL_DEFAULT_PROJECT: "true"}}});
            api.patch(
                DEFAULT_PROJECT_OBJECT,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
            Ok(id)
        }
        Err(e) => Err(e.into()),
    }
}

async fn write_status(
    org: &Organization,
    ns: &str,
    project_id: &str,
    ctx: &Context,
) -> Result<(), Error> {
    let api: Api<Organization> = Api::all(ctx.client.clone());
    let generation = org.meta().generation;
    let previous = org.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_READY && c.status == "True")
            .cloned()
    });
    let ready = Condition {
        type_: CONDITION_READY.to_owned(),
        status: "True".to_owned(),
        reason: "Reconciled".to_owned(),
        message: format!("namespace {ns} and the default project are in place"),
        observed_generation: generation,
        last_transition_time: previous
            .map(|c| c.last_transition_time)
            .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now())),
    };
    let status = json!({
        "apiVersion": terrace_crds::constants::API_VERSION,
        "kind": "Organization",
        "status": {
            "name": org.tfe_name(),
            "namespace": ns,
            "defaultProjectId": project_id,
            "observedGeneration": generation,
            "conditions": [ready],
        }
    });
    let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
    api.patch_status(&org.name_any(), &pp, &Patch::Apply(&status))
        .await?;
    Ok(())
}
