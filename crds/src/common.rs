//! Small types shared by several kinds: tag bindings, Secret references, data retention
//! policies, conditions.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// A key-value tag.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TagBinding {
    /// Tag key (1-128 characters).
    #[schemars(length(min = 1, max = 128))]
    pub key: String,
    /// Tag value (at most 256 characters; may be empty).
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub value: String,
}

crd_struct! {
    /// A tag binding that applies to a workspace, directly or inherited from its project.
    #[derive(Default, Eq)]
    pub struct EffectiveTagBinding {
        /// Tag key.
        pub key: String,
        /// Tag value.
        #[serde(default)]
        pub value: String,
        /// ID of the project the binding is inherited from; absent for direct bindings.
        pub inherited_from: Option<String>,
    }
}

impl EffectiveTagBinding {
    /// Binding `b` as it applies: bound directly (`inherited_from` None) or inherited from
    /// the project with that ID.
    pub fn of(b: &TagBinding, inherited_from: Option<String>) -> EffectiveTagBinding {
        EffectiveTagBinding {
            key: b.key.clone(),
            value: b.value.clone(),
            inherited_from,
        }
    }
}

/// A reference to one key of a Secret in the object's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretKeyRef {
    /// Name of the Secret, in the same namespace as the referring object.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key within the Secret's data.
    #[schemars(length(min = 1))]
    pub key: String,
}

crd_struct! {
    /// A data retention policy (self-hosted edition): either delete backing data older than a
    /// number of days, or never delete it. Exactly one of the two fields is set.
    #[derive(Default, Eq)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "has(self.deleteOlderThanNDays) != (has(self.dontDelete) && self.dontDelete)",
         "message": "set exactly one of deleteOlderThanNDays or dontDelete: true"}
    ]))]
    pub struct DataRetentionPolicy {
        /// Delete state versions and run data older than this many days (at least 1).
        #[schemars(range(min = 1))]
        pub delete_older_than_n_days: Option<i32>,
        /// Never delete backing data.
        pub dont_delete: Option<bool>,
    }
}

/// Fields every terrace status carries.
pub trait HasConditions {
    fn conditions(&self) -> &[Condition];
}

/// The longest prefix of `s` of at most `max` bytes that ends at a character boundary.
pub fn prefix_within(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut to at most `max` bytes at a character boundary, with `…` where it was cut
/// (messages kept in a status).
pub fn cut_marked(mut s: String, max: usize) -> String {
    if s.len() > max {
        s.truncate(prefix_within(&s, max).len());
        s.push('…');
    }
    s
}

/// `base` followed by `suffix` in at most `max` bytes: a `base` too long is cut at a
/// character boundary and loses a trailing `-` or `.`, so an object name made of a valid
/// DNS subdomain stays one (a run's or a Pod's name derived from another object's).
pub fn name_with_suffix(base: &str, suffix: &str, max: usize) -> String {
    let mut base = base;
    if base.len() + suffix.len() > max {
        base = prefix_within(base, max - suffix.len()).trim_end_matches(['-', '.']);
    }
    format!("{base}{suffix}")
}

/// `bytes` in lower-case hex (signatures, digests).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A timestamp as the API and the objects' status write it: RFC 3339, UTC,
/// milliseconds (`2026-01-05T10:00:02.000Z`).
pub fn timestamp(t: &jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// The terraform CLI configuration of a terrace instance: a `host` block mapping
/// `hostname` to the services at `api_url` (no trailing slash), so the CLI skips service
/// discovery (and may reach the API over plain HTTP), and a `credentials` block with
/// `token`. `terrace dev` writes it for people; a run's engine gets one with its run
/// credential.
pub fn cli_config(hostname: &str, api_url: &str, token: &str) -> String {
    let services: String = crate::constants::DISCOVERY_SERVICES
        .iter()
        .map(|(name, path)| format!("    \"{name}\" = \"{api_url}{path}\"\n"))
        .collect();
    format!(
        "host \"{hostname}\" {{\n  services = {{\n{services}  }}\n}}\n\
         credentials \"{hostname}\" {{\n  token = \"{token}\"\n}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // "é" is two bytes: a cut inside it backs off to before it.
        assert_eq!(prefix_within("abé", 3), "ab");
        assert_eq!(prefix_within("abé", 4), "abé");
        assert_eq!(prefix_within("abé", 99), "abé");
        assert_eq!(prefix_within("", 0), "");
        assert_eq!(cut_marked("abé".into(), 3), "ab…");
        assert_eq!(cut_marked("abc".into(), 3), "abc");
    }

    #[test]
    fn a_name_with_a_suffix_stays_within_its_limit_and_a_valid_name() {
        assert_eq!(name_with_suffix("run-abc", "-apply", 63), "run-abc-apply");
        // Cut to 10 - 4 = 6 bytes ("ab-cd-"), then the trailing '-' is dropped.
        assert_eq!(name_with_suffix("ab-cd-efgh", "-pod", 10), "ab-cd-pod");
        assert_eq!(name_with_suffix("ab.c", "-pod", 6), "ab-pod");
        let long = "x".repeat(300);
        assert_eq!(name_with_suffix(&long, "-auto", 253).len(), 253);
    }
}
