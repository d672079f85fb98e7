//! What the Organization controller decides, as pure functions: whether the
//! organization may use its namespace ([`blocking_outcome`], on top of
//! [`terrace_crds::namespaces::namespace_use`]), what the namespace must carry
//! ([`desired_namespace`]), the status to write, when to look again, and which
//! organizations an event of another object concerns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use terrace_crds::constants::{
    ANNOTATION_ADOPT, ANNOTATION_CREATED_FOR, LABEL_DEFAULT_PROJECT, LABEL_MANAGED_BY,
    LABEL_ORGANIZATION, MANAGED_BY,
};
use terrace_crds::namespaces::NamespaceUse;
use terrace_crds::{Organization, OrganizationStatus};

use crate::Error;
use crate::conditions::{
    Outcome, REASON_DEFAULT_PROJECT_FAILED, REASON_FOREIGN_NAMESPACE, REASON_NAMESPACE_CONFLICT,
    REASON_NAMESPACE_FAILED, REASON_NAMESPACE_OWNED_ELSEWHERE, REASON_NAMESPACE_RESERVED,
    REASON_NAMESPACE_TERMINATING, kstatus_conditions,
};
use crate::rules::organization_namespace;

/// Recheck interval while a left-over namespace terminates.
pub const TERMINATING_RECHECK: Duration = Duration::from_secs(5);
/// Recheck interval of a namespace conflict, a namespace controlled elsewhere or a
/// foreign one (events of the other Organization or of the namespace trigger a recheck
/// at once; this is the safety net).
pub const CONFLICT_RECHECK: Duration = Duration::from_secs(60);
/// Recheck interval after the Kubernetes API refused a write.
pub const REFUSED_RECHECK: Duration = Duration::from_secs(300);

/// Why the reconcile of `org` stops before touching namespace `ns`, if it does: the
/// name is reserved, the namespace is claimed by `claimant` (another, older Organization)
/// while `org` did not create it, or `usage` forbids using it. Pure.
pub fn blocking_outcome(
    org: &Organization,
    ns: &str,
    claimant: Option<&Organization>,
    usage: &NamespaceUse,
) -> Option<Outcome> {
    if let NamespaceUse::Reserved { reason, .. } = usage {
        return Some(Outcome::stalled(
            REASON_NAMESPACE_RESERVED,
            format!(
                "namespace {ns} {reason}: an organization cannot use it; give the organization another name or spec.namespace"
            ),
        ));
    }
    if let Some(other) = claimant.filter(|c| c.metadata.uid != org.metadata.uid)
        && *usage != NamespaceUse::Created
    {
        return Some(Outcome::stalled(
            REASON_NAMESPACE_CONFLICT,
            format!(
                "namespace {ns} already belongs to Organization {}; give this organization another spec.namespace",
                other.name_any()
            ),
        ));
    }
    match usage {
        NamespaceUse::Terminating => Some(Outcome::progressing(
            REASON_NAMESPACE_TERMINATING,
            format!(
                "waiting for the terminating namespace {ns} to be gone before creating it again"
            ),
        )),
        NamespaceUse::ControlledBy { kind, name } => Some(Outcome::stalled(
            REASON_NAMESPACE_OWNED_ELSEWHERE,
            format!("namespace {ns} is controlled by {kind} {name}, not by this organization"),
        )),
        NamespaceUse::Foreign { adopt_for } => {
            let org_name = org.name_any();
            let why = match adopt_for {
                Some(other) => format!(
                    "its {ANNOTATION_ADOPT} annotation names organization {other:?}, not {org_name:?}"
                ),
                None => "terrace did not create it".to_owned(),
            };
            Some(Outcome::stalled(
                REASON_FOREIGN_NAMESPACE,
                format!(
                    "namespace {ns} exists and {why}; to let this organization use it, annotate it {ANNOTATION_ADOPT}={org_name} (terrace then never deletes it), or give the organization another spec.namespace"
                ),
            ))
        }
        NamespaceUse::Reserved { .. }
        | NamespaceUse::Missing
        | NamespaceUse::Created
        | NamespaceUse::Adopted => None,
    }
}

/// The metadata namespace `ns` must carry for `org` under `usage`, None when there is
/// nothing to keep (not usable). A namespace terrace creates is labelled, annotated
/// [`ANNOTATION_CREATED_FOR`] and controlled by the Organization (garbage collection
/// deletes it with the organization); an adopted one only gets the organization label.
pub fn desired_namespace(org: &Organization, ns: &str, usage: &NamespaceUse) -> Option<Namespace> {
    let org_name = org.name_any();
    let mut meta = ObjectMeta {
        name: Some(ns.to_owned()),
        labels: Some(BTreeMap::from([(
            LABEL_ORGANIZATION.to_owned(),
            org_name.clone(),
        )])),
        ..Default::default()
    };
    match usage {
        NamespaceUse::Missing | NamespaceUse::Created => {
            if let Some(labels) = meta.labels.as_mut() {
                labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned());
            }
            meta.annotations = Some(BTreeMap::from([(
                ANNOTATION_CREATED_FOR.to_owned(),
                org_name,
            )]));
            meta.owner_references = Some(vec![org.controller_owner_ref(&())?]);
        }
        NamespaceUse::Adopted => {}
        _ => return None,
    }
    Some(Namespace {
        metadata: meta,
        ..Default::default()
    })
}

/// Whether `current` already carries every label, annotation and owner reference of
/// `desired` (then nothing is written).
pub fn namespace_is_current(current: &Namespace, desired: &Namespace) -> bool {
    let has_all = |want: &Option<BTreeMap<String, String>>,
                   have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let (want, have) = (&desired.metadata, &current.metadata);
    has_all(&want.labels, &have.labels)
        && has_all(&want.annotations, &have.annotations)
        && want.owner_references.iter().flatten().all(|w| {
            have.owner_references
                .iter()
                .flatten()
                .any(|h| h.uid == w.uid && h.controller == w.controller)
        })
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

/// When to reconcile an organization again after `outcome` (None: on its next change,
/// or one of its namespace, its default project or an organization naming the same
/// namespace; a Ready organization costs nothing while nothing changes).
pub fn recheck_after(outcome: &Outcome) -> Option<Duration> {
    match outcome {
        Outcome::Ready { .. } => None,
        Outcome::Progressing { .. } => Some(TERMINATING_RECHECK),
        Outcome::Stalled { reason, .. }
            if reason == REASON_NAMESPACE_FAILED || reason == REASON_DEFAULT_PROJECT_FAILED =>
        {
            Some(REFUSED_RECHECK)
        }
        // Only a new organization (spec.namespace cannot change) helps.
        Outcome::Stalled { reason, .. } if reason == REASON_NAMESPACE_RESERVED => None,
        Outcome::Stalled { .. } => Some(CONFLICT_RECHECK),
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

/// Whether `stored` already shows every field of `desired`.
pub fn status_is_current(
    stored: Option<&OrganizationStatus>,
    desired: &OrganizationStatus,
) -> bool {
    stored.is_some_and(|s| s == desired)
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

/// The Organizations whose namespace is `ns`: a change of the namespace (created,
/// annotated for adoption, deleted) may change their verdict.
pub fn organizations_using(orgs: &[Arc<Organization>], ns: &str) -> Vec<ObjectRef<Organization>> {
    orgs.iter()
        .filter(|o| organization_namespace(o) == ns || o.target_namespace() == ns)
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// The Organizations whose default project `project` is (a Project labelled
/// `terrace.dev/default-project=true` in their namespace): one deleted is created again.
pub fn default_project_owners(
    orgs: &[Arc<Organization>],
    project: &DynamicObject,
) -> Vec<ObjectRef<Organization>> {
    let is_default = project
        .labels()
        .get(LABEL_DEFAULT_PROJECT)
        .is_some_and(|v| v == "true");
    match project.metadata.namespace.as_deref() {
        Some(ns) if is_default => organizations_using(orgs, ns),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::organization::status_body;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
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

    fn reason(o: &Option<Outcome>) -> Option<&str> {
        o.as_ref().map(Outcome::reason)
    }

    /// An older Organization using the namespace stalls the younger one (unless terrace
    /// created the namespace for the younger one); a namespace controlled elsewhere
    /// stalls; a terminating one is waited for; a missing, created or adopted one goes
    /// ahead. Reserved and foreign namespaces stall and say why.
    #[test]
    fn blocking_outcomes() {
        let me = org("b", "u2", Some("acme"), 20);
        let older = org("acme", "u1", None, 10);
        let conflict = blocking_outcome(&me, "acme", Some(&older), &NamespaceUse::Missing);
        assert_eq!(reason(&conflict), Some(REASON_NAMESPACE_CONFLICT));
        assert!(conflict.is_some_and(|o| o.message().contains("Organization acme")));
        assert_eq!(
            blocking_outcome(&me, "acme", Some(&older), &NamespaceUse::Created),
            None
        );
        assert_eq!(
            blocking_outcome(&me, "acme", Some(&me), &NamespaceUse::Missing),
            None
        );
        assert_eq!(
            blocking_outcome(&me, "acme", None, &NamespaceUse::Adopted),
            None
        );
        let elsewhere = NamespaceUse::ControlledBy {
            kind: "Application".into(),
            name: "x".into(),
        };
        let o = blocking_outcome(&me, "acme", None, &elsewhere);
        assert_eq!(reason(&o), Some(REASON_NAMESPACE_OWNED_ELSEWHERE));
        assert!(matches!(o, Some(Outcome::Stalled { .. })));
        let o = blocking_outcome(&me, "acme", Some(&me), &NamespaceUse::Terminating);
        assert_eq!(reason(&o), Some(REASON_NAMESPACE_TERMINATING));
        assert!(matches!(o, Some(Outcome::Progressing { .. })));
        let reserved = NamespaceUse::Reserved {
            reason: "is the Kubernetes default namespace",
            owned: false,
        };
        let o = blocking_outcome(&me, "default", Some(&me), &reserved);
        assert_eq!(reason(&o), Some(REASON_NAMESPACE_RESERVED));
        assert!(o.is_some_and(|o| o.message().contains("default is the Kubernetes default")));
        let o = blocking_outcome(
            &me,
            "acme",
            None,
            &NamespaceUse::Foreign { adopt_for: None },
        );
        assert_eq!(reason(&o), Some(REASON_FOREIGN_NAMESPACE));
        assert!(o.is_some_and(|o| o.message().contains("terrace.dev/adopt=b")));
        let o = blocking_outcome(
            &me,
            "acme",
            None,
            &NamespaceUse::Foreign {
                adopt_for: Some("globex".into()),
            },
        );
        assert!(o.is_some_and(|o| o.message().contains("\"globex\"")));
    }

    /// A namespace terrace creates is owned (controller reference), labelled and
    /// annotated created-for; an adopted one only gets the organization label; nothing is
    /// written for a namespace that is not usable or already carries it all.
    #[test]
    fn desired_namespaces() {
        let o = org("acme", "u1", None, 1);
        let created = desired_namespace(&o, "acme", &NamespaceUse::Missing);
        let created = created.unwrap_or_default();
        let meta = &created.metadata;
        assert_eq!(meta.labels.as_ref().map(|l| l.len()), Some(2));
        assert_eq!(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_CREATED_FOR))
                .map(String::as_str),
            Some("acme")
        );
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].uid.as_str(), owners[0].controller),
            ("u1", Some(true))
        );
        let adopted = desired_namespace(&o, "acme", &NamespaceUse::Adopted).unwrap_or_default();
        assert_eq!(adopted.metadata.owner_references, None);
        assert_eq!(adopted.metadata.annotations, None);
        assert_eq!(
            adopted.metadata.labels,
            Some(BTreeMap::from([(
                LABEL_ORGANIZATION.to_owned(),
                "acme".to_owned()
            )]))
        );
        assert!(
            desired_namespace(&o, "acme", &NamespaceUse::Foreign { adopt_for: None }).is_none()
        );
        assert!(namespace_is_current(&created, &created));
        assert!(!namespace_is_current(&adopted, &created));
        let mut more = created.clone();
        more.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("team".into(), "x".into());
        assert!(namespace_is_current(&more, &created));
        assert!(namespace_is_current(&more, &adopted));
    }

    /// A namespace event reconciles the organizations using it; a default project's event
    /// reconciles its organization, other projects' none.
    #[test]
    fn namespace_and_default_project_events_map_to_organizations() {
        let orgs: Vec<Arc<Organization>> = vec![
            Arc::new(org("acme", "u1", None, 1)),
            Arc::new(org("b", "u2", Some("shared"), 2)),
        ];
        let names = |refs: Vec<ObjectRef<Organization>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(names(organizations_using(&orgs, "acme")), ["acme"]);
        assert_eq!(names(organizations_using(&orgs, "shared")), ["b"]);
        assert!(organizations_using(&orgs, "other").is_empty());
        let ar = kube::api::ApiResource::erase::<terrace_crds::Project>(&());
        let mut p = DynamicObject::new("default", &ar).within("acme");
        assert!(default_project_owners(&orgs, &p).is_empty());
        p.metadata.labels = Some(BTreeMap::from([(
            LABEL_DEFAULT_PROJECT.to_owned(),
            "true".to_owned(),
        )]));
        assert_eq!(names(default_project_owners(&orgs, &p)), ["acme"]);
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

    /// Ready organizations are not re-checked (their namespace, default project and
    /// same-namespace organizations wake them), terrace's own creations quickly,
    /// conflicts sooner than API refusals, reserved names never.
    #[test]
    fn rechecks_follow_the_outcome() {
        let ready = Outcome::Ready { message: "".into() };
        assert_eq!(recheck_after(&ready), None);
        assert_eq!(
            recheck_after(&Outcome::progressing(REASON_NAMESPACE_TERMINATING, "")),
            Some(TERMINATING_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_NAMESPACE_CONFLICT, "")),
            Some(CONFLICT_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_FOREIGN_NAMESPACE, "")),
            Some(CONFLICT_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_DEFAULT_PROJECT_FAILED, "")),
            Some(REFUSED_RECHECK)
        );
        assert_eq!(
            recheck_after(&Outcome::stalled(REASON_NAMESPACE_RESERVED, "")),
            None
        );
    }
}
