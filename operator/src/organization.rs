//! The Organization controller: for each Organization it keeps the organization's
//! namespace and default project in place and reports the outcome in status (kstatus
//! conditions, the effective TFE name and namespace, the default project's ID).
//!
//! Conditions: `Reconciling` (`Creating`) while the namespace or the default project is
//! being created, or (`NamespaceTerminating`) while a namespace left over from a deleted
//! organization is still going away; `Ready` once both are in place; `Stalled` when only
//! a change by someone else can help: an older Organization uses the namespace
//! (`NamespaceConflict`), another object controls it (`NamespaceOwnedElsewhere`), or the
//! Kubernetes API refuses the namespace or the default project (`NamespaceFailed`,
//! `DefaultProjectFailed`, with the API's message). A stalled organization does not touch
//! the namespace, so two organizations naming one namespace do not fight over it. Status is
//! server-side applied under the operator's field manager, only when it changed; Events
//! mark becoming stalled and recovering.
//!
//! The namespace is owned by the Organization, so deleting the organization removes its
//! namespace and everything in it through Kubernetes garbage collection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::{
    API_VERSION, FIELD_MANAGER_OPERATOR, LABEL_DEFAULT_PROJECT, LABEL_ID, LABEL_MANAGED_BY,
    LABEL_ORGANIZATION, MANAGED_BY,
};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{Organization, OrganizationStatus, Project, ProjectSpec};

use crate::conditions::{
    Outcome, REASON_CREATING, REASON_DEFAULT_PROJECT_FAILED, REASON_NAMESPACE_CONFLICT,
    REASON_NAMESPACE_FAILED, REASON_NAMESPACE_OWNED_ELSEWHERE, REASON_NAMESPACE_TERMINATING,
    kstatus_conditions,
};
use crate::rules::{organization_namespace, owning_organization};
use crate::{Context, Error, metrics};

/// Object name of every organization's default project.
pub const DEFAULT_PROJECT_OBJECT: &str = "default";
/// TFE name of every organization's default project.
pub const DEFAULT_PROJECT_NAME: &str = "Default Project";

/// Recheck interval of a Ready organization (namespace and default project re-applied).
const READY_RECHECK: Duration = Duration::from_secs(600);
/// Recheck interval while a left-over namespace terminates.
const TERMINATING_RECHECK: Duration = Duration::from_secs(5);
/// Recheck interval of a namespace conflict or a namespace controlled elsewhere (events of
/// the other Organization trigger a recheck at once).
const CONFLICT_RECHECK: Duration = Duration::from_secs(60);
/// Recheck interval after the Kubernetes API refused a write.
const REFUSED_RECHECK: Duration = Duration::from_secs(300);

/// The organization's namespace, as the reconcile found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    /// No such namespace: it is created.
    Missing,
    /// The namespace is being deleted.
    Terminating,
    /// Another object is the namespace's controller (ownerReference with controller true).
    ControlledBy { kind: String, name: String },
    /// This organization is the namespace's controller.
    Ours,
    /// The namespace exists and has no controller: the organization adopts it.
    Usable,
}

/// The state of namespace `ns` (None: it does not exist) for the Organization with UID
/// `org_uid`. Pure.
pub fn namespace_state(ns: Option<&Namespace>, org_uid: &str) -> NamespaceState {
    let Some(ns) = ns else {
        return NamespaceState::Missing;
    };
    if ns.metadata.deletion_timestamp.is_some() {
        return NamespaceState::Terminating;
    }
    match ns
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    {
        Some(o) if o.uid == org_uid => NamespaceState::Ours,
        Some(o) => NamespaceState::ControlledBy {
            kind: o.kind.clone(),
            name: o.name.clone(),
        },
        None => NamespaceState::Usable,
    }
}

/// Why the reconcile of `org` stops before touching namespace `ns`, if it does: the
/// namespace is claimed by `claimant`, another (older) Organization, while `org` does not
/// control it already, or its `state` forbids using it. Pure.
pub fn blocking_outcome(
    org: &Organization,
    ns: &str,
    claimant: Option<&Organization>,
    state: &NamespaceState,
) -> Option<Outcome> {
    if let Some(other) = claimant.filter(|c| c.metadata.uid != org.metadata.uid)
        && *state != NamespaceState::Ours
    {
        return Some(Outcome::stalled(
            REASON_NAMESPACE_CONFLICT,
            format!(
                "namespace {ns} already belongs to Organization {}; give this organization another spec.namespace",
                other.name_any()
            ),
        ));
    }
    match state {
        NamespaceState::Terminating => Some(Outcome::progressing(
            REASON_NAMESPACE_TERMINATING,
            format!(
                "waiting for the terminating namespace {ns} to be gone before creating it again"
            ),
        )),
        NamespaceState::ControlledBy { kind, name } => Some(Outcome::stalled(
            REASON_NAMESPACE_OWNED_ELSEWHERE,
            format!("namespace {ns} is controlled by {kind} {name}, not by this organization"),
        )),
        NamespaceState::Missing | NamespaceState::Ours | NamespaceState::Usable => None,
    }
}

/// The message of a Kubernetes API refusal no retry fixes (invalid, forbidden, not
/// found), if `err` is one; conflicts, throttling and server errors are retried instead.
pub fn refusal(err: &Error) -> Option<String> {
    match err {
        Error::Kube(kube::Error::Api(s))
            if (400..500).contains(&s.code) && s.code != 409 && s.code != 429 =>
        {
            Some(if s.message.is_empty() {
                format!("the Kubernetes API answered {}", s.code)
            } else {
                s.message.clone()
            })
        }
        _ => None,
    }
}

/// When to reconcile an organization again after `outcome`.
pub fn recheck_after(outcome: &Outcome) -> Duration {
    match outcome {
        Outcome::Ready { .. } => READY_RECHECK,
        Outcome::Progressing { .. } => TERMINATING_RECHECK,
        Outcome::Stalled { reason, .. }
            if reason == REASON_NAMESPACE_FAILED || reason == REASON_DEFAULT_PROJECT_FAILED =>
        {
            REFUSED_RECHECK
        }
        Outcome::Stalled { .. } => CONFLICT_RECHECK,
    }
}

/// The status the controller writes for `org` after `outcome`. `namespace` and
/// `default_project_id` are None unless Ready; the stored values are kept then, so a
/// passing stall does not erase what clients already read. Pure.
pub fn desired_status(
    org: &Organization,
    outcome: &Outcome,
    ready: Option<(&str, &str)>,
    now: Timestamp,
) -> OrganizationStatus {
    let stored = org.status.clone().unwrap_or_default();
    let generation = org.meta().generation;
    let (namespace, default_project_id) = match ready {
        Some((ns, id)) => (Some(ns.to_owned()), Some(id.to_owned())),
        None => (stored.namespace, stored.default_project_id),
    };
    OrganizationStatus {
        name: Some(org.tfe_name().to_owned()),
        namespace,
        default_project_id,
        observed_generation: generation,
        conditions: kstatus_conditions(&stored.conditions, outcome, generation, now),
    }
}

/// Organizations other than `org` whose namespace is `org`'s: whether one of them
/// stalls on a namespace conflict changes when `org` appears, changes or goes.
pub fn same_namespace_claimants(
    orgs: &[Arc<Organization>],
    org: &Organization,
) -> Vec<ObjectRef<Organization>> {
    let ns = organization_namespace(org);
    orgs.iter()
        .filter(|o| o.metadata.uid != org.metadata.uid)
        .filter(|o| organization_namespace(o) == ns || o.target_namespace() == ns)
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

struct OrgContext {
    base: Arc<Context>,
    recorder: Recorder,
    orgs: Store<Organization>,
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let orgs: Api<Organization> = Api::all(ctx.client.clone());
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let controller = Controller::new(orgs.clone(), watcher::Config::default());
    let store = controller.store();
    let claimants = store.clone();
    let octx = Arc::new(OrgContext {
        recorder: crate::new_recorder(&ctx.client),
        base: ctx,
        orgs: store,
    });
    controller
        .owns(
            namespaces,
            watcher::Config::default().labels(LABEL_MANAGED_BY),
        )
        .watches(orgs, watcher::Config::default(), move |o| {
            same_namespace_claimants(&claimants.state(), &o)
        })
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
            octx,
        )
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "organization reconcile");
            }
        })
        .await;
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
    let state = namespace_state(namespaces.get_opt(&ns).await?.as_ref(), &uid);
    if let Some(outcome) = blocking_outcome(org, &ns, claimant, &state) {
        return finish(org, &ctx, &outcome, None).await;
    }
    let default = find_default_project(&ns, &ctx.base).await?;
    if state == NamespaceState::Missing || default.is_none() {
        let what = if state == NamespaceState::Missing {
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
    if let Err(e) = ensure_namespace(org, &ns, &ctx.base).await {
        return match refusal(&e) {
            Some(message) => {
                let outcome = Outcome::stalled(
                    REASON_NAMESPACE_FAILED,
                    format!("namespace {ns}: {message}"),
                );
                finish(org, &ctx, &outcome, None).await
            }
            None => Err(e),
        };
    }
    let project_id = match default {
        Some(id) => id,
        None => match create_default_project(org, &ns, &ctx.base).await {
            Ok(id) => id,
            Err(e) => {
                return match refusal(&e) {
                    Some(message) => {
                        let outcome = Outcome::stalled(
                            REASON_DEFAULT_PROJECT_FAILED,
                            format!("default project in namespace {ns}: {message}"),
                        );
                        finish(org, &ctx, &outcome, None).await
                    }
                    None => Err(e),
                };
            }
        },
    };
    let outcome = Outcome::Ready {
        message: format!("namespace {ns} and the default project ({project_id}) are in place"),
    };
    finish(org, &ctx, &outcome, Some((&ns, &project_id))).await
}

/// Writes the status of `outcome` and picks the next reconcile.
async fn finish(
    org: &mut Organization,
    ctx: &OrgContext,
    outcome: &Outcome,
    ready: Option<(&str, &str)>,
) -> Result<Action, Error> {
    write_status(org, ctx, outcome, ready).await?;
    Ok(Action::requeue(recheck_after(outcome)))
}

fn error_policy(_org: Arc<Organization>, err: &Error, _ctx: Arc<OrgContext>) -> Action {
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

/// Whether `stored` already shows every field of `desired`.
fn status_is_current(stored: Option<&OrganizationStatus>, desired: &OrganizationStatus) -> bool {
    stored.is_some_and(|s| s == desired)
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
    crate::ids::record_stall_transition(
        &ctx.recorder,
        &org.object_ref(&()),
        previous,
        &desired.conditions,
    )
    .await;
    org.status = Some(desired);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use terrace_crds::OrganizationSpec;
    use terrace_crds::constants::{CONDITION_READY, CONDITION_STALLED};

    use crate::conditions::{find, is_true};

    fn org(name: &str, uid: &str, spec_ns: Option<&str>, created: i64) -> Organization {
        Organization {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                generation: Some(3),
                creation_timestamp: Some(Time(
                    Timestamp::from_second(created).unwrap_or(Timestamp::UNIX_EPOCH),
                )),
                ..Default::default()
            },
            spec: OrganizationSpec {
                namespace: spec_ns.map(str::to_owned),
                ..Default::default()
            },
            status: None,
        }
    }

    fn namespace(controller: Option<(&str, &str)>, terminating: bool) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("acme".into()),
                deletion_timestamp: terminating.then_some(Time(Timestamp::UNIX_EPOCH)),
                owner_references: controller.map(|(kind, uid)| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        name: "owner".into(),
                        uid: uid.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn reason(o: &Option<Outcome>) -> Option<&str> {
        o.as_ref().map(Outcome::reason)
    }

    /// Copies Kubernetes ownership: a namespace controlled by this organization is ours,
    /// one controlled by anything else is not, one without a controller can be adopted;
    /// a namespace being deleted is terminating.
    #[test]
    fn namespace_state_reads_the_controller_reference() {
        assert_eq!(namespace_state(None, "u1"), NamespaceState::Missing);
        assert_eq!(
            namespace_state(Some(&namespace(None, false)), "u1"),
            NamespaceState::Usable
        );
        assert_eq!(
            namespace_state(Some(&namespace(Some(("Organization", "u1")), false)), "u1"),
            NamespaceState::Ours
        );
        assert_eq!(
            namespace_state(Some(&namespace(Some(("Organization", "u2")), false)), "u1"),
            NamespaceState::ControlledBy {
                kind: "Organization".into(),
                name: "owner".into()
            }
        );
        assert_eq!(
            namespace_state(Some(&namespace(Some(("Organization", "u1")), true)), "u1"),
            NamespaceState::Terminating
        );
    }

    /// An older Organization using the namespace stalls the younger one (unless the
    /// younger one controls the namespace already); a namespace controlled elsewhere
    /// stalls; a terminating one is waited for; a missing or usable one goes ahead.
    #[test]
    fn blocking_outcomes() {
        let me = org("b", "u2", Some("acme"), 20);
        let older = org("acme", "u1", None, 10);
        let conflict = blocking_outcome(&me, "acme", Some(&older), &NamespaceState::Missing);
        assert_eq!(reason(&conflict), Some(REASON_NAMESPACE_CONFLICT));
        assert!(conflict.is_some_and(|o| o.message().contains("Organization acme")));
        assert_eq!(
            blocking_outcome(&me, "acme", Some(&older), &NamespaceState::Ours),
            None
        );
        assert_eq!(
            blocking_outcome(&me, "acme", Some(&me), &NamespaceState::Missing),
            None
        );
        assert_eq!(
            blocking_outcome(&me, "acme", None, &NamespaceState::Usable),
            None
        );
        let elsewhere = NamespaceState::ControlledBy {
            kind: "Application".into(),
            name: "x".into(),
        };
        let o = blocking_outcome(&me, "acme", None, &elsewhere);
        assert_eq!(reason(&o), Some(REASON_NAMESPACE_OWNED_ELSEWHERE));
        assert!(matches!(o, Some(Outcome::Stalled { .. })));
        let o = blocking_outcome(&me, "acme", Some(&me), &NamespaceState::Terminating);
        assert_eq!(reason(&o), Some(REASON_NAMESPACE_TERMINATING));
        assert!(matches!(o, Some(Outcome::Progressing { .. })));
    }

    fn api_error(code: u16, message: &str) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.into(),
            ..Default::default()
        })))
    }

    /// Refusals no retry fixes (400, 403, 404, 422) stall with the API's message;
    /// conflicts, throttling, server errors and other errors are retried.
    #[test]
    fn refusals_are_told_from_transient_errors() {
        assert_eq!(
            refusal(&api_error(422, "invalid ownerReferences")).as_deref(),
            Some("invalid ownerReferences")
        );
        assert_eq!(
            refusal(&api_error(403, "")).as_deref(),
            Some("the Kubernetes API answered 403")
        );
        for code in [409, 429, 500, 503] {
            assert_eq!(refusal(&api_error(code, "x")), None, "{code}");
        }
        assert_eq!(refusal(&Error::Unavailable("cache".into())), None);
    }

    /// Ready reports the namespace and default project; a later stall keeps them (clients
    /// already use them) and carries the generation; a stall before Ready reports
    /// neither, so a conflicting organization never claims the namespace in status.
    #[test]
    fn desired_status_reports_and_keeps_namespace_and_project() {
        let mut o = org("acme", "u1", None, 1);
        let ready = Outcome::Ready {
            message: "ok".into(),
        };
        let s = desired_status(&o, &ready, Some(("acme", "prj-1")), Timestamp::UNIX_EPOCH);
        assert_eq!(s.name.as_deref(), Some("acme"));
        assert_eq!(s.namespace.as_deref(), Some("acme"));
        assert_eq!(s.default_project_id.as_deref(), Some("prj-1"));
        assert_eq!(s.observed_generation, Some(3));
        assert!(is_true(&s.conditions, CONDITION_READY));
        assert!(status_is_current(Some(&s), &s));
        o.status = Some(s.clone());
        assert!(status_is_current(
            o.status.as_ref(),
            &desired_status(&o, &ready, Some(("acme", "prj-1")), Timestamp::now())
        ));
        let stalled = Outcome::stalled(REASON_NAMESPACE_FAILED, "no");
        let t = desired_status(&o, &stalled, None, Timestamp::UNIX_EPOCH);
        assert_eq!(t.namespace.as_deref(), Some("acme"));
        assert_eq!(t.default_project_id.as_deref(), Some("prj-1"));
        assert!(is_true(&t.conditions, CONDITION_STALLED));
        assert!(!status_is_current(o.status.as_ref(), &t));
        let fresh = org("b", "u2", Some("acme"), 2);
        let u = desired_status(&fresh, &stalled, None, Timestamp::UNIX_EPOCH);
        assert_eq!((u.namespace, u.default_project_id), (None, None));
        assert_eq!(
            find(&u.conditions, CONDITION_STALLED).and_then(|c| c.observed_generation),
            Some(3)
        );
        let body = status_body(&s);
        assert_eq!(body["kind"], "Organization");
        assert_eq!(body["status"]["defaultProjectId"], "prj-1");
    }

    /// An Organization event reconciles the other organizations naming the same
    /// namespace (a conflict resolves when the older one goes).
    #[test]
    fn namespace_claimants_are_found() {
        let orgs: Vec<Arc<Organization>> = vec![
            Arc::new(org("acme", "u1", None, 1)),
            Arc::new(org("b", "u2", Some("acme"), 2)),
            Arc::new(org("c", "u3", Some("c"), 3)),
        ];
        let names = |refs: Vec<ObjectRef<Organization>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(names(same_namespace_claimants(&orgs, &orgs[0])), ["b"]);
        assert_eq!(names(same_namespace_claimants(&orgs, &orgs[1])), ["acme"]);
        assert!(same_namespace_claimants(&orgs, &orgs[2]).is_empty());
    }

    /// Ready organizations are re-checked slowly, terminating namespaces quickly,
    /// conflicts sooner than API refusals.
    #[test]
    fn rechecks_follow_the_outcome() {
        let ready = Outcome::Ready { message: "".into() };
        assert_eq!(recheck_after(&ready), READY_RECHECK);
        assert_eq!(
            recheck_after(&Outcome::progressing(REASON_NAMESPACE_TERMINATING, "")),
            TERMINATING_RECHECK
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_NAMESPACE_CONFLICT, "")),
            CONFLICT_RECHECK
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_DEFAULT_PROJECT_FAILED, "")),
            REFUSED_RECHECK
        );
    }
}
