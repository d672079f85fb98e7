//! TFE-shaped object IDs: a kind prefix (`ws-`, `prj-`, …) followed by 16 base62
//! characters. IDs are assigned once and never change; they are stored in the
//! [`crate::constants::LABEL_ID`] label so every lookup by ID is an index hit.

use rand::Rng;

/// Number of random base62 characters after the prefix.
pub const ID_RANDOM_LEN: usize = 16;

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The ID prefixes of DESIGN.md §2, one per kind that has an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdKind {
    Project,
    Workspace,
    RegistryModule,
    ConfigurationVersion,
    TestRun,
    TestVariable,
    WorkspaceVariable,
    SshKey,
    AgentPool,
    OAuthToken,
    Tag,
    DataRetentionPolicy,
    StateVersion,
    StateVersionOutput,
    Run,
    Comment,
    VariableSet,
    NotificationConfiguration,
    ModuleVersion,
    PolicySet,
    Policy,
}

impl IdKind {
    /// Every kind, for exhaustive tests and lookups.
    pub const ALL: [IdKind; 21] = [
        IdKind::Project,
        IdKind::Workspace,
        IdKind::RegistryModule,
        IdKind::ConfigurationVersion,
        IdKind::TestRun,
        IdKind::TestVariable,
        IdKind::WorkspaceVariable,
        IdKind::SshKey,
        IdKind::AgentPool,
        IdKind::OAuthToken,
        IdKind::Tag,
        IdKind::DataRetentionPolicy,
        IdKind::StateVersion,
        IdKind::StateVersionOutput,
        IdKind::Run,
        IdKind::Comment,
        IdKind::VariableSet,
        IdKind::NotificationConfiguration,
        IdKind::ModuleVersion,
        IdKind::PolicySet,
        IdKind::Policy,
    ];

    /// The prefix, including its dash.
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Project => "prj-",
            IdKind::Workspace => "ws-",
            IdKind::RegistryModule => "mod-",
            IdKind::ConfigurationVersion => "cv-",
            IdKind::TestRun => "trun-",
            // TFE uses `var-` for module test variables and workspace variables alike.
            IdKind::TestVariable | IdKind::WorkspaceVariable => "var-",
            IdKind::SshKey => "sshkey-",
            IdKind::AgentPool => "apool-",
            IdKind::OAuthToken => "ot-",
            IdKind::Tag => "tag-",
            IdKind::DataRetentionPolicy => "drp-",
            IdKind::StateVersion => "sv-",
            IdKind::StateVersionOutput => "wsout-",
            IdKind::Run => "run-",
            IdKind::Comment => "wsc-",
            IdKind::VariableSet => "varset-",
            IdKind::NotificationConfiguration => "nc-",
            IdKind::ModuleVersion => "modver-",
            IdKind::PolicySet => "polset-",
            IdKind::Policy => "pol-",
        }
    }

    /// The kind whose prefix `id` carries, if any. Kinds sharing a prefix (`var-`: test
    /// and workspace variables) answer the first of them in [`IdKind::ALL`].
    pub fn of(id: &str) -> Option<IdKind> {
        IdKind::ALL.into_iter().find(|k| id.starts_with(k.prefix()))
    }
}

/// A new random ID of `kind` drawn from `rng`.
pub fn new_id_with<R: Rng + ?Sized>(kind: IdKind, rng: &mut R) -> String {
    let mut id = String::with_capacity(kind.prefix().len() + ID_RANDOM_LEN);
    id.push_str(kind.prefix());
    for _ in 0..ID_RANDOM_LEN {
        id.push(char::from(BASE62[rng.random_range(0..BASE62.len())]));
    }
    id
}

/// A new random ID of `kind` from the thread-local generator.
pub fn new_id(kind: IdKind) -> String {
    new_id_with(kind, &mut rand::rng())
}

/// An entry's ID: `stored` when there is one, else the [`stable_id`] of `kind` derived
/// from `parts` (entries kept in a list of their parent's spec, which TFE gives IDs).
pub fn stored_or_stable(stored: Option<&str>, kind: IdKind, parts: &[&str]) -> String {
    match stored.filter(|i| !i.is_empty()) {
        Some(id) => id.to_owned(),
        None => stable_id(kind.prefix(), parts),
    }
}

/// A stable TFE-shaped ID for something derived rather than stored (a tag, a tag
/// binding, a policy, a variable set's variable written without one): `prefix` and 16
/// base62 characters of the SHA-256 of `parts`, so it is the same on every read and
/// after a restart.
pub fn stable_id(prefix: &str, parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(prefix.len() + ID_RANDOM_LEN);
    out.push_str(prefix);
    for b in digest.iter().take(ID_RANDOM_LEN) {
        out.push(char::from(BASE62[usize::from(*b) % BASE62.len()]));
    }
    out
}

/// Whether `id` is a well-formed ID of `kind`.
pub fn is_valid_id(kind: IdKind, id: &str) -> bool {
    id.strip_prefix(kind.prefix()).is_some_and(|rest| {
        rest.len() == ID_RANDOM_LEN && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// The Kubernetes object name used for an object created through the API: its ID
/// lowercased (IDs are unique; object names must be DNS-1123).
pub fn object_name_for_id(id: &str) -> String {
    id.to_ascii_lowercase()
}

/// Whether `s` is a DNS-1123 label (a namespace's name): 1 to 63 lowercase letters,
/// digits and `-`, starting and ending with a letter or digit.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a DNS-1123 subdomain (the name of most objects): at most 253
/// characters, dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn ids_have_the_kind_prefix_and_16_base62_characters() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for kind in IdKind::ALL {
            let id = new_id_with(kind, &mut rng);
            assert!(id.starts_with(kind.prefix()), "{id}");
            assert_eq!(id.len(), kind.prefix().len() + 16, "{id}");
            assert!(is_valid_id(kind, &id), "{id}");
            assert_eq!(IdKind::of(&id).map(IdKind::prefix), Some(kind.prefix()));
        }
    }

    /// Only the two variable kinds share a prefix (TFE's `var-` for both).
    #[test]
    fn prefixes_are_distinct_but_for_variables() {
        for a in IdKind::ALL {
            for b in IdKind::ALL {
                let shared = a != b && a.prefix() == b.prefix();
                let variables = [IdKind::TestVariable, IdKind::WorkspaceVariable];
                assert_eq!(
                    shared,
                    a != b && variables.contains(&a) && variables.contains(&b),
                    "{a:?} {b:?}"
                );
            }
        }
        assert_eq!(IdKind::WorkspaceVariable.prefix(), "var-");
    }

    #[test]
    fn ids_are_unique_across_many_draws() {
        let ids: std::collections::HashSet<_> =
            (0..10_000).map(|_| new_id(IdKind::Workspace)).collect();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        assert!(!is_valid_id(IdKind::Workspace, "ws-short"));
        assert!(!is_valid_id(IdKind::Workspace, "prj-0123456789abcdef"));
        assert!(!is_valid_id(IdKind::Workspace, "ws-0123456789abcde!"));
        assert!(!is_valid_id(IdKind::Workspace, "ws-0123456789abcdefg"));
        assert!(is_valid_id(IdKind::Workspace, "ws-0123456789abcDEF"));
        assert_eq!(IdKind::of("nope-1"), None);
    }

    #[test]
    fn object_names_are_lowercased_ids() {
        assert_eq!(
            object_name_for_id("ws-AbC0123456789xyz"),
            "ws-abc0123456789xyz"
        );
    }
}
