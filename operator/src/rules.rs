//! Pure rules of the operator's controllers: what an object's ID label should become, which
//! Organization owns a namespace, a workspace's derived tag data and name conflicts.
//!
//! Controllers feed these functions what they read from the cluster and write back what
//! they return; nothing here performs I/O, so every rule is unit-tested without a cluster.
//! None of it depends on kube's client or runtime (only on two condition reasons of
//! [`crate::conditions`]), so it could move to `terrace-crds` with them (the API server
//! computes the same effective tag bindings).

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use terrace_crds::Organization;
use terrace_crds::common::{EffectiveTagBinding, TagBinding};
use terrace_crds::constants::CONDITION_STALLED;
use terrace_crds::ids::{IdKind, is_valid_id};

use crate::conditions::{REASON_FOREIGN_NAMESPACE, REASON_NAMESPACE_RESERVED};

/// What to do with an object's `terrace.dev/id` label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdDecision {
    /// The label holds a valid ID of the kind (assigned earlier, by the API server, or
    /// pinned by a user): keep it.
    Keep(String),
    /// No label: assign a new ID.
    Assign,
    /// The label holds something that is not an ID of the kind: replace it (and warn).
    Replace { invalid: String },
    /// The label holds a valid ID that another object of the kind already holds (a
    /// copied manifest, a pinned ID used twice): replace it (and warn).
    Taken { id: String },
}

/// Decides what happens to an object's ID label (`label` is its current value).
pub fn decide_id(kind: IdKind, label: Option<&str>) -> IdDecision {
    match label {
        Some(id) if is_valid_id(kind, id) => IdDecision::Keep(id.to_owned()),
        Some(invalid) => IdDecision::Replace {
            invalid: invalid.to_owned(),
        },
        None => IdDecision::Assign,
    }
}

/// One object carrying a given ID label, as [`must_yield_id`] compares them.
#[derive(Clone, Copy, Debug)]
pub struct IdHolder<'a> {
    /// metadata.uid.
    pub uid: &'a str,
    /// `namespace/name`, the tie-breaker for equal creation times.
    pub object: &'a str,
    /// metadata.creationTimestamp.
    pub created: Option<&'a Time>,
    /// Whether the object already reports the ID in status.id (it has been using it).
    pub confirmed: bool,
}

/// Whether `me` must give up the ID it carries because `others` (objects of the same
/// kind carrying the same ID label) hold it: one that already reports the ID in its
/// status keeps it; otherwise the oldest claimant does.
pub fn must_yield_id(me: IdHolder<'_>, others: &[IdHolder<'_>]) -> bool {
    if me.confirmed {
        return false;
    }
    let mine = age_key(&me.created.cloned(), Some(me.object));
    others
        .iter()
        .filter(|o| o.uid != me.uid)
        .any(|o| o.confirmed || age_key(&o.created.cloned(), Some(o.object)) < mine)
}

/// The namespace an Organization's objects live in, as far as the cluster shows it:
/// `status.namespace` once the Organization controller reported it, else the namespace
/// the spec asks for (`spec.namespace`, else metadata.name).
pub fn organization_namespace(org: &Organization) -> &str {
    org.status
        .as_ref()
        .and_then(|s| s.namespace.as_deref())
        .unwrap_or_else(|| org.target_namespace())
}

/// Whether the Organization controller found that `org` may not use its namespace at all
/// (Stalled `ForeignNamespace` or `NamespaceReserved`): such an organization owns nothing
/// there, so objects someone puts into, say, `kube-system` are not labelled with it.
pub fn barred_from_namespace(org: &Organization) -> bool {
    org.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == CONDITION_STALLED
                && c.status == "True"
                && (c.reason == REASON_FOREIGN_NAMESPACE || c.reason == REASON_NAMESPACE_RESERVED)
        })
    })
}

/// The Organization owning namespace `ns`. Organizations being deleted still own their
/// namespace until they are gone; organizations barred from it
/// ([`barred_from_namespace`]) never do. When two Organizations claim the same namespace
/// (a misconfiguration the API server prevents), the older one wins, then the smaller
/// name.
pub fn owning_organization<'a, I>(orgs: I, ns: &str) -> Option<&'a Organization>
where
    I: IntoIterator<Item = &'a Organization>,
{
    orgs.into_iter()
        .filter(|o| !ns.is_empty() && organization_namespace(o) == ns)
        .filter(|o| !barred_from_namespace(o))
        .min_by(|a, b| {
            age_key(&a.metadata.creation_timestamp, a.metadata.name.as_deref()).cmp(&age_key(
                &b.metadata.creation_timestamp,
                b.metadata.name.as_deref(),
            ))
        })
}

pub use terrace_crds::rules::tag_names;

/// A workspace's effective tag bindings: its own bindings first, in their given order,
/// then the project's bindings whose key the workspace does not bind itself, marked as
/// inherited from `project_id`. A key bound twice in one list keeps its first binding.
pub fn effective_tag_bindings(
    direct: &[TagBinding],
    project: &[TagBinding],
    project_id: Option<&str>,
) -> Vec<EffectiveTagBinding> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(direct.len() + project.len());
    for b in direct {
        if seen.insert(b.key.as_str()) {
            out.push(EffectiveTagBinding::of(b, None));
        }
    }
    if let Some(project_id) = project_id {
        for b in project {
            if seen.insert(b.key.as_str()) {
                out.push(EffectiveTagBinding::of(b, Some(project_id.to_owned())));
            }
        }
    }
    out
}

/// Number of distinct remote state consumers a workspace approves.
pub fn remote_state_consumer_count(consumers: &[String]) -> i64 {
    let distinct: HashSet<&str> = consumers.iter().map(String::as_str).collect();
    i64::try_from(distinct.len()).unwrap_or(i64::MAX)
}

/// The facts about one Workspace that decide TFE name conflicts in a namespace.
#[derive(Clone, Copy, Debug)]
pub struct NameClaim<'a> {
    /// Object name (metadata.name).
    pub object: &'a str,
    /// TFE name (spec.name).
    pub tfe_name: &'a str,
    /// metadata.creationTimestamp.
    pub created: Option<&'a Time>,
}

/// The object name of the Workspace that holds `me`'s TFE name before `me`: another
/// workspace of the same namespace with the same name, compared case-insensitively, that
/// was created earlier. Creation timestamps have a one-second resolution, so equal times
/// are ordered by object name, which makes exactly one of the claimants the holder.
pub fn name_held_by<'a>(me: NameClaim<'_>, others: &[NameClaim<'a>]) -> Option<&'a str> {
    let mine = me.tfe_name.to_lowercase();
    let my_key = age_key(&me.created.cloned(), Some(me.object));
    others
        .iter()
        .filter(|o| o.object != me.object && o.tfe_name.to_lowercase() == mine)
        .filter(|o| age_key(&o.created.cloned(), Some(o.object)) < my_key)
        .min_by(|a, b| {
            age_key(&a.created.cloned(), Some(a.object))
                .cmp(&age_key(&b.created.cloned(), Some(b.object)))
        })
        .map(|o| o.object)
}

/// Orders objects oldest first; objects without a timestamp (not yet persisted) last.
fn age_key(created: &Option<Time>, name: Option<&str>) -> (bool, i64, String) {
    match created {
        Some(t) => (false, t.0.as_second(), name.unwrap_or_default().to_owned()),
        None => (true, 0, name.unwrap_or_default().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;
    use terrace_crds::{OrganizationSpec, OrganizationStatus};

    fn tb(key: &str, value: &str) -> TagBinding {
        TagBinding {
            key: key.into(),
            value: value.into(),
        }
    }

    fn eff(key: &str, value: &str, from: Option<&str>) -> EffectiveTagBinding {
        EffectiveTagBinding {
            key: key.into(),
            value: value.into(),
            inherited_from: from.map(str::to_owned),
        }
    }

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    fn org(
        name: &str,
        spec_ns: Option<&str>,
        status_ns: Option<&str>,
        created: i64,
    ) -> Organization {
        Organization {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(at(created)),
                ..Default::default()
            },
            spec: OrganizationSpec {
                namespace: spec_ns.map(str::to_owned),
                ..Default::default()
            },
            status: status_ns.map(|ns| OrganizationStatus {
                namespace: Some(ns.into()),
                ..Default::default()
            }),
        }
    }

    /// Copies TFE/terrace: an ID pinned by the creator (API server or `kubectl apply`
    /// with the label) is kept when it is well formed for the kind.
    #[test]
    fn valid_ids_are_kept() {
        assert_eq!(
            decide_id(IdKind::Workspace, Some("ws-0123456789abcDEF")),
            IdDecision::Keep("ws-0123456789abcDEF".into())
        );
    }

    /// Copies TFE/terrace: an object without an ID gets one; a label that is not an ID
    /// of the kind (wrong prefix, wrong length) is replaced.
    #[test]
    fn missing_or_invalid_ids_are_assigned() {
        assert_eq!(decide_id(IdKind::Project, None), IdDecision::Assign);
        assert_eq!(
            decide_id(IdKind::Project, Some("ws-0123456789abcDEF")),
            IdDecision::Replace {
                invalid: "ws-0123456789abcDEF".into()
            }
        );
        assert_eq!(
            decide_id(IdKind::SshKey, Some("sshkey-short")),
            IdDecision::Replace {
                invalid: "sshkey-short".into()
            }
        );
    }

    fn holder<'a>(uid: &'a str, created: Option<&'a Time>, confirmed: bool) -> IdHolder<'a> {
        IdHolder {
            uid,
            object: uid,
            created,
            confirmed,
        }
    }

    /// Copies TFE: IDs are unique. Of two objects carrying the same pinned ID, the one
    /// already using it (status.id) keeps it, else the older one; the other yields.
    #[test]
    fn duplicate_ids_yield_to_the_confirmed_or_older_holder() {
        let (t1, t2) = (at(1), at(2));
        let old = holder("a", Some(&t1), false);
        let young = holder("b", Some(&t2), false);
        assert!(must_yield_id(young, &[old, young]));
        assert!(!must_yield_id(old, &[old, young]));
        let young_confirmed = holder("b", Some(&t2), true);
        assert!(must_yield_id(old, &[young_confirmed]));
        assert!(!must_yield_id(young_confirmed, &[old]));
        assert!(!must_yield_id(old, &[old]));
        assert!(!must_yield_id(old, &[]));
    }

    /// Copies the Organization contract: status.namespace wins, then spec.namespace,
    /// then metadata.name.
    #[test]
    fn organization_namespace_prefers_status_then_spec_then_name() {
        assert_eq!(
            organization_namespace(&org("a", Some("b"), Some("c"), 0)),
            "c"
        );
        assert_eq!(organization_namespace(&org("a", Some("b"), None, 0)), "b");
        assert_eq!(organization_namespace(&org("a", None, None, 0)), "a");
    }

    /// Copies the Organization contract: the organization whose namespace equals the
    /// object's namespace owns the object; no match means no owner; the oldest claimant
    /// wins a conflict.
    #[test]
    fn owning_organization_matches_the_namespace() {
        let orgs = [
            org("acme", None, None, 10),
            org("globex", Some("gx"), None, 5),
            org("late", Some("acme"), None, 20),
        ];
        let name = |ns| owning_organization(&orgs, ns).and_then(|o| o.metadata.name.clone());
        assert_eq!(name("acme").as_deref(), Some("acme"));
        assert_eq!(name("gx").as_deref(), Some("globex"));
        assert_eq!(name("globex"), None);
        assert_eq!(name(""), None);
    }

    /// An organization stalled because it may not use its namespace (foreign or
    /// reserved) owns nothing there; stalled for another reason, it still does.
    #[test]
    fn organizations_barred_from_their_namespace_own_nothing() {
        use crate::conditions::{Outcome, REASON_NAMESPACE_CONFLICT, kstatus_conditions};
        let stalled = |reason: &str| {
            let mut o = org("kube-system", None, None, 1);
            o.status = Some(OrganizationStatus {
                conditions: kstatus_conditions(
                    &[],
                    &Outcome::stalled(reason, "x"),
                    None,
                    Timestamp::UNIX_EPOCH,
                ),
                ..Default::default()
            });
            o
        };
        for reason in [REASON_FOREIGN_NAMESPACE, REASON_NAMESPACE_RESERVED] {
            let orgs = [stalled(reason)];
            assert!(barred_from_namespace(&orgs[0]));
            assert!(
                owning_organization(&orgs, "kube-system").is_none(),
                "{reason}"
            );
        }
        let orgs = [stalled(REASON_NAMESPACE_CONFLICT)];
        assert!(owning_organization(&orgs, "kube-system").is_some());
    }

    /// Copies TFE's effective-tag-bindings: direct bindings in order, then the
    /// project's bindings marked inherited, a direct binding overriding an inherited one
    /// with the same key.
    #[test]
    fn effective_tag_bindings_direct_first_and_override_inherited() {
        let direct = [tb("env", "prod"), tb("team", "web")];
        let project = [tb("cost", "42"), tb("env", "dev"), tb("owner", "ops")];
        assert_eq!(
            effective_tag_bindings(&direct, &project, Some("prj-1")),
            [
                eff("env", "prod", None),
                eff("team", "web", None),
                eff("cost", "42", Some("prj-1")),
                eff("owner", "ops", Some("prj-1")),
            ]
        );
    }

    /// Copies TFE: without a resolved project only the direct bindings apply; duplicate
    /// keys in one list keep the first.
    #[test]
    fn effective_tag_bindings_without_project_and_with_duplicates() {
        let direct = [tb("a", "1"), tb("a", "2")];
        assert_eq!(
            effective_tag_bindings(&direct, &[tb("b", "x")], None),
            [eff("a", "1", None)]
        );
        assert_eq!(
            effective_tag_bindings(&[], &[tb("b", "x"), tb("b", "y")], Some("prj-2")),
            [eff("b", "x", Some("prj-2"))]
        );
    }

    /// Copies TFE: remote-state-consumer count counts each workspace once.
    #[test]
    fn remote_state_consumers_are_counted_once() {
        let c = ["ws-a", "ws-b", "ws-a"].map(String::from);
        assert_eq!(remote_state_consumer_count(&c), 2);
        assert_eq!(remote_state_consumer_count(&[]), 0);
    }

    fn claim<'a>(object: &'a str, name: &'a str, created: Option<&'a Time>) -> NameClaim<'a> {
        NameClaim {
            object,
            tfe_name: name,
            created,
        }
    }

    /// Copies TFE: workspace names are unique per organization, case-insensitively; the
    /// workspace created first keeps the name.
    #[test]
    fn older_workspace_holds_the_name() {
        let (t1, t2) = (at(100), at(200));
        let others = [
            claim("first", "Web", Some(&t1)),
            claim("other", "api", Some(&t1)),
            claim("second", "web", Some(&t2)),
        ];
        assert_eq!(name_held_by(others[2], &others), Some("first"));
        assert_eq!(name_held_by(others[0], &others), None);
        assert_eq!(name_held_by(others[1], &others), None);
    }

    /// Same-second creations: exactly one of the claimants keeps the name (the smaller
    /// object name), and an object without a timestamp never holds it before a stored one.
    #[test]
    fn equal_timestamps_are_ordered_by_object_name() {
        let t = at(100);
        let others = [claim("a", "x", Some(&t)), claim("b", "X", Some(&t))];
        assert_eq!(name_held_by(others[1], &others), Some("a"));
        assert_eq!(name_held_by(others[0], &others), None);
        let unstored = claim("c", "x", None);
        assert_eq!(name_held_by(unstored, &others), Some("a"));
        assert_eq!(name_held_by(others[0], &[unstored]), None);
    }
}
