//! The Organization controller: for each Organization it keeps the organization's
//! namespace and default project in place and reports the outcome in status (kstatus
//! conditions, the effective TFE name and namespace, the default project's ID).
//!
//! Namespaces (issue 12): terrace never takes a namespace someone else made (the rules
//! are [`terrace_crds::namespaces`]). A missing namespace is created with the
//! Organization as its controller, the organization label and the annotation
//! `terrace.dev/created-for`, so deleting the Organization deletes it (and everything in
//! it) through Kubernetes garbage collection. An existing namespace is used only when
//! terrace created it for this organization, or when its owner opted in with the
//! annotation `terrace.dev/adopt: <organization>`: an adopted namespace gets the
//! organization label but no ownerReference, so deleting the Organization leaves it.
//! Nothing else deletes namespaces: the controller has no finalizer.
//!
//! Conditions: `Reconciling` (`Creating`) while the namespace or the default project is
//! being created, or (`NamespaceTerminating`) while a namespace left over from a deleted
//! organization is still going away; `Ready` once both are in place; `Stalled` when only
//! a change by someone else can help: the namespace is a reserved name
//! (`NamespaceReserved`: `kube-*`, `default`, terrace's own namespace…), it exists and is
//! not terrace's (`ForeignNamespace`, saying how to opt in), an older Organization uses it
//! (`NamespaceConflict`), another object controls it (`NamespaceOwnedElsewhere`), or the
//! Kubernetes API refuses the namespace or the default project (`NamespaceFailed`,
//! `DefaultProjectFailed`, with the API's message). A stalled organization does not touch
//! the namespace — except to let go of a reserved namespace an earlier terrace adopted —
//! so two organizations naming one namespace do not fight over it. Status is server-side
//! applied under the operator's field manager, only when it changed; Events mark becoming
//! stalled and recovering.
//!
//! Besides its own kind the controller follows namespaces (by name) and default projects
//! (a deleted one is created again), so a Ready organization is never requeued: it costs
//! nothing while nothing changes, and relists after a broken watch cover missed events.

pub mod decide;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::Stream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::{
    API_VERSION, FIELD_MANAGER_OPERATOR, LABEL_DEFAULT_PROJECT, LABEL_ID, LABEL_ORGANIZATION,
};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::namespaces::{NamespaceUse, namespace_use};
use terrace_crds::{Organization, OrganizationStatus, Project, ProjectSpec};

use crate::conditions::{
    Outcome, REASON_CREATING, REASON_DEFAULT_PROJECT_FAILED, REASON_NAMESPACE_FAILED,
};
use crate::events::record_stall_transition;
use crate::rules::owning_organization;
use crate::watch::{Feed, guarded};
use crate::{Context, Error, finalizers, metrics};
use decide::{
    blocking_outcome, default_project_owners, desired_namespace, desired_status,
    namespace_is_current, organizations_using, recheck_after, refusal, same_namespace_claimants,
    status_is_current,
};

/// Object name of every organization's default project.
pub const DEFAULT_PROJECT_OBJECT: &str = "default";
/// TFE name of every organization's default project.
pub const DEFAULT_PROJECT_NAME: &str = "Default Project";

struct OrgContext {
    base: Arc<Context>,
    recorder: Recorder,
    orgs: Store<Organization>,
}

/// The controller, run until `shutdown` resolves. It drives `organizations` (whose cache
/// every other controller reads; subscribe to it before) and follows `default_projects`,
/// the Project feed's events.
pub fn controller(
    ctx: Arc<Context>,
    mut organizations: Feed<Organization>,
    default_projects: impl Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let store = organizations.store();
    let claimants = organizations.subscribe();
    let namespaces = guarded::<Namespace>(&ctx.client, (), watcher::Config::default());
    let (by_claim, by_namespace, by_project) = (store.clone(), store.clone(), store.clone());
    let octx = Arc::new(OrgContext {
        recorder: crate::events::new_recorder(&ctx.client),
        base: ctx,
        orgs: store.clone(),
    });
    let controller = Controller::for_stream(organizations.into_stream(), store)
        .watches_stream(claimants, move |o| {
            same_namespace_claimants(&by_claim.state(), &o)
        })
        .watches_stream(namespaces.touched_objects(), move |ns| {
            organizations_using(&by_namespace.state(), &ns.name_any())
        })
        .watches_stream_with(
            default_projects,
            move |p| default_project_owners(&by_project.state(), &p),
            ApiResource::erase::<Project>(&()),
        )
        .graceful_shutdown_on(shutdown);
    metrics::ORGANIZATION.run(controller, reconcile, octx)
}

async fn reconcile(org: Arc<Organization>, ctx: Arc<OrgContext>) -> Result<Action, Error> {
    if org.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Updated with each status write, so later writes compare against what is stored.
    let mut org = (*org).clone();
    let org = &mut org;
    let ns = org.target_namespace().to_owned();
    let uid = org.meta().uid.clone().unwrap_or_default();
    let all = ctx.orgs.state();
    let claimant = owning_organization(all.iter().map(Arc::as_ref), &ns);
    let namespaces: Api<Namespace> = Api::all(ctx.base.client.clone());
    let current = namespaces.get_opt(&ns).await?;
    let usage = namespace_use(
        &ns,
        current.as_ref().map(|n| &n.metadata),
        &org.name_any(),
        Some(&uid),
        ctx.base.settings.release_namespace.as_deref(),
    );
    if let (NamespaceUse::Reserved { owned: true, .. }, Some(current)) = (&usage, &current) {
        disown(&namespaces, current, org).await?;
    }
    if let Some(outcome) = blocking_outcome(org, &ns, claimant, &usage) {
        return finish(org, &ctx, &outcome, None).await;
    }
    let default = find_default_project(&ns, &ctx.base).await?;
    if usage == NamespaceUse::Missing || default.is_none() {
        let what = if usage == NamespaceUse::Missing {
            format!("creating namespace {ns} and its default project")
        } else {
            format!("creating the default project of namespace {ns}")
        };
        write_status(
            org,
            &ctx,
            &Outcome::progressing(REASON_CREATING, what),
            None,
        )
        .await?;
    }
    if let Err(e) = ensure_namespace(org, &ns, &usage, current.as_ref(), &namespaces).await {
        return stall_on_refusal(
            org,
            &ctx,
            e,
            REASON_NAMESPACE_FAILED,
            &format!("namespace {ns}"),
        )
        .await;
    }
    let project_id = match default {
        Some(id) => id,
        None => match create_default_project(org, &ns, &ctx.base).await {
            Ok(id) => id,
            Err(e) => {
                let what = format!("default project in namespace {ns}");
                return stall_on_refusal(org, &ctx, e, REASON_DEFAULT_PROJECT_FAILED, &what).await;
            }
        },
    };
    let outcome = Outcome::Ready {
        message: format!("namespace {ns} and the default project ({project_id}) are in place"),
    };
    finish(org, &ctx, &outcome, Some((&ns, &project_id))).await
}

/// Writes the status of `outcome` and picks the next reconcile.
/// After a failed step: Stalled with `reason` and "`what`: message" when the API refused
/// the step for good ([`refusal`]), else the error (which is retried).
async fn stall_on_refusal(
    org: &mut Organization,
    ctx: &OrgContext,
    e: Error,
    reason: &str,
    what: &str,
) -> Result<Action, Error> {
    match refusal(&e) {
        Some(message) => {
            let outcome = Outcome::stalled(reason, format!("{what}: {message}"));
            finish(org, ctx, &outcome, None).await
        }
        None => Err(e),
    }
}

async fn finish(
    org: &mut Organization,
    ctx: &OrgContext,
    outcome: &Outcome,
    ready: Option<(&str, &str)>,
) -> Result<Action, Error> {
    write_status(org, ctx, outcome, ready).await?;
    Ok(match recheck_after(outcome) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// Puts in place what namespace `ns` must carry for `org` ([`desired_namespace`]): a
/// missing one is created (a create, never an apply, so a namespace someone made in the
/// meantime is not taken: its 409 is retried and the next reconcile looks at it); an
/// existing one is patched only when something is missing.
async fn ensure_namespace(
    org: &Organization,
    ns: &str,
    usage: &NamespaceUse,
    current: Option<&Namespace>,
    api: &Api<Namespace>,
) -> Result<(), Error> {
    let desired = desired_namespace(org, ns, usage)
        .ok_or_else(|| Error::Invalid(format!("namespace {ns} cannot be used")))?;
    match current {
        None => {
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
                ..Default::default()
            };
            match api.create(&pp, &desired).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Conflict(format!(
                    "namespace {ns} appeared while it was being created"
                ))),
                Err(e) => Err(e.into()),
            }
        }
        Some(current) if namespace_is_current(current, &desired) => Ok(()),
        Some(_) => {
            let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
            api.patch(ns, &pp, &Patch::Apply(&desired)).await?;
            Ok(())
        }
    }
}

/// Removes `org`'s controller reference and organization label from `current`, a
/// reserved namespace an earlier terrace adopted, so deleting the Organization cannot
/// delete it. The merge patch carries the namespace's resourceVersion (409: retried).
async fn disown(
    api: &Api<Namespace>,
    current: &Namespace,
    org: &Organization,
) -> Result<(), Error> {
    let uid = org.meta().uid.clone().unwrap_or_default();
    let rest: Vec<_> = current
        .owner_references()
        .iter()
        .filter(|o| o.uid != uid)
        .cloned()
        .collect();
    let mut labels = serde_json::Map::new();
    if current.labels().get(LABEL_ORGANIZATION) == Some(&org.name_any()) {
        labels.insert(LABEL_ORGANIZATION.to_owned(), Value::Null);
    }
    let patch = json!({"metadata": {
        "resourceVersion": current.resource_version(),
        "ownerReferences": rest,
        "labels": labels,
    }});
    tracing::warn!(namespace = %current.name_any(), organization = %org.name_any(), "letting go of a reserved namespace an earlier terrace adopted");
    let name = current.name_any();
    finalizers::guarded_merge(api, &name, &patch, &format!("namespace {name}")).await
}

/// The ID of namespace `ns`'s default project, when one exists with an ID.
async fn find_default_project(ns: &str, ctx: &Context) -> Result<Option<String>, Error> {
    let api: Api<Project> = Api::namespaced(ctx.client.clone(), ns);
    let existing = api
        .list(&kube::api::ListParams::default().labels(&format!("{LABEL_DEFAULT_PROJECT}=true")))
        .await?;
    Ok(existing
        .items
        .first()
        .and_then(|p| p.labels().get(LABEL_ID).cloned()))
}

/// Creates the default project of namespace `ns` (or adopts a Project of the default
/// object name) and returns its ID.
async fn create_default_project(
    org: &Organization,
    ns: &str,
    ctx: &Context,
) -> Result<String, Error> {
    let api: Api<Project> = Api::namespaced(ctx.client.clone(), ns);
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

/// The server-side apply body of `status`.
fn status_body(status: &OrganizationStatus) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "Organization", "status": status})
}

/// Applies the status of `outcome` unless it is stored already, and records an Event when
/// the organization becomes stalled or recovers.
async fn write_status(
    org: &mut Organization,
    ctx: &OrgContext,
    outcome: &Outcome,
    ready: Option<(&str, &str)>,
) -> Result<(), Error> {
    let desired = desired_status(org, outcome, ready, Timestamp::now());
    if status_is_current(org.status.as_ref(), &desired) {
        return Ok(());
    }
    let api: Api<Organization> = Api::all(ctx.base.client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER_OPERATOR).force();
    api.patch_status(&org.name_any(), &pp, &Patch::Apply(&status_body(&desired)))
        .await?;
    let previous: &[Condition] = org
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    record_stall_transition(
        &ctx.recorder,
        &org.object_ref(&()),
        previous,
        &desired.conditions,
    )
    .await;
    org.status = Some(desired);
    Ok(())
}
