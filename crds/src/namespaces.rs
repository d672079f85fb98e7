//! Which namespace an Organization may use (issue 12, "namespace takeover"), as pure
//! rules shared by the Organization controller and the API server.
//!
//! An Organization keeps its objects in one namespace (`spec.namespace`, by default its
//! name). terrace never takes a namespace that someone else made:
//! - names Kubernetes or the installation reserve ([`reserved_organization_name`]:
//!   `kube-*`, `default`, `openshift`/`openshift-*`, terrace's own release namespace) are
//!   never used, whatever their annotations say;
//! - a namespace the Organization controller creates carries
//!   [`ANNOTATION_CREATED_FOR`] (the Organization's name), the organization label and a
//!   controller ownerReference to the Organization, so deleting the Organization deletes
//!   it through garbage collection;
//! - an existing namespace is used only when it says so itself: the annotation
//!   [`ANNOTATION_ADOPT`] naming the Organization (the documented opt-in, e.g. for a
//!   Namespace declared in a GitOps repository next to its Organization). terrace then
//!   labels it with the organization but gives it no ownerReference: deleting the
//!   Organization leaves an adopted namespace, and everything in it, in place;
//! - any other existing namespace is foreign: the Organization is Stalled and the API
//!   server refuses the name.
//!
//! [`namespace_use`] classifies a namespace for an Organization; the API server calls it
//! (with [`reserved_organization_name`]) before creating or renaming an organization.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use crate::constants::{ANNOTATION_ADOPT, ANNOTATION_CREATED_FOR};

/// Why `name` can never be an Organization's namespace, if it cannot: Kubernetes'
/// system namespaces (`kube-*`, `default`), OpenShift's (`openshift`, `openshift-*`) and
/// the namespace terrace itself runs in (`release_namespace`, when known). The reason
/// completes "namespace NAME ...". Applies to the Organization's namespace, which is its
/// name unless `spec.namespace` says otherwise: the API server checks both.
pub fn reserved_organization_name(
    name: &str,
    release_namespace: Option<&str>,
) -> Option<&'static str> {
    if name == "default" {
        return Some("is the Kubernetes default namespace");
    }
    if name.starts_with("kube-") {
        return Some("is reserved for Kubernetes system namespaces (kube-*)");
    }
    if name == "openshift" || name.starts_with("openshift-") {
        return Some("is reserved for OpenShift system namespaces (openshift-*)");
    }
    if release_namespace.is_some_and(|r| !r.is_empty() && r == name) {
        return Some("is the namespace terrace runs in");
    }
    None
}

/// What an Organization may do with a namespace (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceUse {
    /// The name is reserved: never used, not even with the opt-in annotation. `owned`
    /// tells that the namespace nevertheless names this Organization as its controller
    /// (left by a version of terrace that adopted any namespace): the reference is to be
    /// removed, so deleting the Organization cannot delete the namespace.
    Reserved { reason: &'static str, owned: bool },
    /// No such namespace: the Organization controller creates it.
    Missing,
    /// The namespace is being deleted (left over from a deleted organization).
    Terminating,
    /// terrace created it for this Organization (controller reference to it, or
    /// [`ANNOTATION_CREATED_FOR`] naming it): kept owned, deleted with the Organization.
    Created,
    /// Its owner opted in ([`ANNOTATION_ADOPT`] names this Organization): used and
    /// labelled, never owned.
    Adopted,
    /// Another object is the namespace's controller.
    ControlledBy { kind: String, name: String },
    /// The namespace exists and nothing lets this Organization use it; `adopt_for` is the
    /// value of an [`ANNOTATION_ADOPT`] naming another organization.
    Foreign { adopt_for: Option<String> },
}

impl NamespaceUse {
    /// Whether the Organization may keep its objects there.
    pub fn usable(&self) -> bool {
        matches!(
            self,
            NamespaceUse::Missing | NamespaceUse::Created | NamespaceUse::Adopted
        )
    }
}

/// How the Organization `org_name` (with UID `org_uid`, None before it exists) may use
/// namespace `ns_name`, whose metadata is `ns` (None: no such namespace). Pure.
pub fn namespace_use(
    ns_name: &str,
    ns: Option<&ObjectMeta>,
    org_name: &str,
    org_uid: Option<&str>,
    release_namespace: Option<&str>,
) -> NamespaceUse {
    let controller = ns.and_then(|m| {
        m.owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
    });
    let ours = controller.is_some_and(|o| org_uid.is_some_and(|u| u == o.uid));
    if let Some(reason) = reserved_organization_name(ns_name, release_namespace) {
        return NamespaceUse::Reserved {
            reason,
            owned: ours,
        };
    }
    let Some(meta) = ns else {
        return NamespaceUse::Missing;
    };
    if meta.deletion_timestamp.is_some() {
        return NamespaceUse::Terminating;
    }
    let annotation = |key: &str| meta.annotations.as_ref().and_then(|a| a.get(key));
    if ours {
        return NamespaceUse::Created;
    }
    if let Some(o) = controller {
        return NamespaceUse::ControlledBy {
            kind: o.kind.clone(),
            name: o.name.clone(),
        };
    }
    if annotation(ANNOTATION_CREATED_FOR).is_some_and(|v| v == org_name) {
        return NamespaceUse::Created;
    }
    match annotation(ANNOTATION_ADOPT) {
        Some(v) if v == org_name => NamespaceUse::Adopted,
        other => NamespaceUse::Foreign {
            adopt_for: other.cloned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    /// Copies Kubernetes' system namespaces (`kube-system`, `kube-public`,
    /// `kube-node-lease`, `default`), OpenShift's, and the release namespace; ordinary
    /// names, and names merely containing `kube`, are free.
    #[test]
    fn reserved_names() {
        for name in [
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "openshift",
            "openshift-monitoring",
        ] {
            let reason = reserved_organization_name(name, None);
            assert!(reason.is_some(), "{name}");
        }
        assert_eq!(
            reserved_organization_name("terrace-system", Some("terrace-system")),
            Some("is the namespace terrace runs in")
        );
        for name in [
            "acme",
            "kube",
            "kubernetes",
            "my-kube-x",
            "defaults",
            "terrace-system",
        ] {
            assert_eq!(
                reserved_organization_name(name, Some("ops")),
                None,
                "{name}"
            );
        }
        assert_eq!(reserved_organization_name("ops", Some("")), None);
    }

    fn meta(controller: Option<(&str, &str)>, annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("acme".into()),
            owner_references: controller.map(|(kind, uid)| {
                vec![OwnerReference {
                    kind: kind.into(),
                    name: "owner".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        }
    }

    fn use_of(m: Option<&ObjectMeta>) -> NamespaceUse {
        namespace_use("acme", m, "acme", Some("u1"), None)
    }

    /// Copies Kubernetes ownership: a namespace controlled by this organization is its
    /// own, one controlled by anything else is not; a namespace without a controller is
    /// used only when terrace created it for this organization or its owner opted in.
    #[test]
    fn existing_namespaces_need_terrace_or_an_opt_in() {
        assert_eq!(use_of(None), NamespaceUse::Missing);
        assert_eq!(
            use_of(Some(&meta(Some(("Organization", "u1")), &[]))),
            NamespaceUse::Created
        );
        assert_eq!(
            use_of(Some(&meta(None, &[(ANNOTATION_CREATED_FOR, "acme")]))),
            NamespaceUse::Created
        );
        assert_eq!(
            use_of(Some(&meta(None, &[(ANNOTATION_ADOPT, "acme")]))),
            NamespaceUse::Adopted
        );
        assert_eq!(
            use_of(Some(&meta(None, &[]))),
            NamespaceUse::Foreign { adopt_for: None }
        );
        assert_eq!(
            use_of(Some(&meta(None, &[(ANNOTATION_ADOPT, "globex")]))),
            NamespaceUse::Foreign {
                adopt_for: Some("globex".into())
            }
        );
        // Created for another organization of the same namespace: not this one's.
        assert_eq!(
            use_of(Some(&meta(None, &[(ANNOTATION_CREATED_FOR, "globex")]))),
            NamespaceUse::Foreign { adopt_for: None }
        );
        // Another controller wins over any annotation.
        assert_eq!(
            use_of(Some(&meta(
                Some(("Application", "u9")),
                &[(ANNOTATION_ADOPT, "acme")]
            ))),
            NamespaceUse::ControlledBy {
                kind: "Application".into(),
                name: "owner".into()
            }
        );
        // Before the organization exists (the API server's check) nothing is "ours".
        assert_eq!(
            namespace_use(
                "acme",
                Some(&meta(Some(("Organization", "u1")), &[])),
                "acme",
                None,
                None
            ),
            NamespaceUse::ControlledBy {
                kind: "Organization".into(),
                name: "owner".into()
            }
        );
        let mut terminating = meta(Some(("Organization", "u1")), &[]);
        terminating.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        assert_eq!(use_of(Some(&terminating)), NamespaceUse::Terminating);
        assert!(NamespaceUse::Missing.usable() && NamespaceUse::Adopted.usable());
        assert!(!NamespaceUse::Foreign { adopt_for: None }.usable());
    }

    /// A reserved namespace is never used, not even annotated for adoption; one this
    /// organization controls (adopted by an earlier terrace) is reported as owned so the
    /// controller can let go of it.
    #[test]
    fn reserved_namespaces_are_never_used() {
        let annotated = meta(None, &[(ANNOTATION_ADOPT, "kube-public")]);
        let u = namespace_use(
            "kube-public",
            Some(&annotated),
            "kube-public",
            Some("u1"),
            None,
        );
        assert!(
            matches!(u, NamespaceUse::Reserved { owned: false, .. }),
            "{u:?}"
        );
        assert!(!u.usable());
        let owned = meta(Some(("Organization", "u1")), &[]);
        let u = namespace_use("default", Some(&owned), "default", Some("u1"), None);
        assert!(
            matches!(u, NamespaceUse::Reserved { owned: true, .. }),
            "{u:?}"
        );
        let u = namespace_use("ops", None, "ops", None, Some("ops"));
        assert_eq!(
            u,
            NamespaceUse::Reserved {
                reason: "is the namespace terrace runs in",
                owned: false
            }
        );
    }
}
