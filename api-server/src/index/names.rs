//! The name indexes of one organization's workspaces that make `search[name]` and
//! `search[wildcard-name]` cost what their matches cost, not what the organization holds:
//! byte trigrams of the lowercased names for substrings (`*x*`, `search[name]`), the
//! reversed names in order for suffixes (`*x`). Prefixes and exact names read the
//! name-ordered set the namespace index already keeps.
//!
//! Each entry has a small slot number, so a trigram's posting list costs a few bytes per
//! name instead of a copy of the name and uid.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::NameKey;

/// A condition on a lowercased workspace name that the index can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameMatch<'a> {
    /// The name contains the string (`search[name]`, `*x*`).
    Contains(&'a str),
    /// The name starts with the string (`x*`).
    Prefix(&'a str),
    /// The name ends with the string (`*x`).
    Suffix(&'a str),
    /// The name is the string (`x`).
    Exact(&'a str),
}

impl NameMatch<'_> {
    /// Whether a lowercased name satisfies the condition.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            NameMatch::Contains(s) => name.contains(s),
            NameMatch::Prefix(s) => name.starts_with(s),
            NameMatch::Suffix(s) => name.ends_with(s),
            NameMatch::Exact(s) => name == *s,
        }
    }
}

/// Trigram and suffix indexes over one namespace's (lowercased name, uid) entries.
#[derive(Default)]
pub struct NameIndex {
    /// Entries by slot; `None` for a free slot.
    slots: Vec<Option<NameKey>>,
    free: Vec<u32>,
    /// uid → slot.
    slot_of: HashMap<Arc<str>, u32>,
    /// Byte trigram of a name → slots of the names containing it.
    trigrams: HashMap<[u8; 3], BTreeSet<u32>>,
    /// (reversed name, slot), in order: a suffix is a range.
    reversed: BTreeSet<(String, u32)>,
}

/// The distinct byte trigrams of `s`.
fn trigrams(s: &str) -> BTreeSet<[u8; 3]> {
    s.as_bytes()
        .windows(3)
        .map(|w| [w[0], w[1], w[2]])
        .collect()
}

fn reverse(s: &str) -> String {
    s.chars().rev().collect()
}

impl NameIndex {
    /// Adds an entry (replacing the entry of the same uid).
    pub fn insert(&mut self, key: &NameKey) {
        self.remove(&key.1);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        for t in trigrams(&key.0) {
            self.trigrams.entry(t).or_default().insert(slot);
        }
        self.reversed.insert((reverse(&key.0), slot));
        self.slot_of.insert(key.1.clone(), slot);
        if let Some(s) = self.slots.get_mut(slot as usize) {
            *s = Some(key.clone());
        }
    }

    /// Removes the entry of `uid`, if any.
    pub fn remove(&mut self, uid: &str) {
        let Some(slot) = self.slot_of.remove(uid) else {
            return;
        };
        let Some(key) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        for t in trigrams(&key.0) {
            if let Some(set) = self.trigrams.get_mut(&t) {
                set.remove(&slot);
                if set.is_empty() {
                    self.trigrams.remove(&t);
                }
            }
        }
        self.reversed.remove(&(reverse(&key.0), slot));
        self.free.push(slot);
    }

    /// The entries whose name contains `s` (at least 3 bytes long), in name order.
    fn containing(&self, s: &str) -> Vec<&NameKey> {
        // Every name containing `s` contains each of its trigrams: read the rarest one's
        // names and keep those that contain `s`.
        let rarest = trigrams(s)
            .into_iter()
            .map(|t| self.trigrams.get(&t))
            .min_by_key(|p| p.map_or(0, BTreeSet::len));
        let Some(Some(posting)) = rarest else {
            return Vec::new();
        };
        let mut out: Vec<&NameKey> = posting
            .iter()
            .filter_map(|slot| self.slots.get(*slot as usize)?.as_ref())
            .filter(|k| k.0.contains(s))
            .collect();
        out.sort_unstable();
        out
    }

    /// The entries whose name ends with `s` (not empty), in name order.
    fn ending_with(&self, s: &str) -> Vec<&NameKey> {
        let rev = reverse(s);
        let mut out: Vec<&NameKey> = self
            .reversed
            .range((rev.clone(), 0)..)
            .take_while(|(r, _)| r.starts_with(&rev))
            .filter_map(|(_, slot)| self.slots.get(*slot as usize)?.as_ref())
            .collect();
        out.sort_unstable();
        out
    }

    /// The entries satisfying a substring or suffix condition, in name order; `None`
    /// when the index cannot narrow it down (a substring shorter than a trigram, an empty
    /// string, or a prefix / exact condition: see the name-ordered set).
    pub fn matching(&self, m: NameMatch<'_>) -> Option<Vec<&NameKey>> {
        match m {
            NameMatch::Contains(s) if s.len() >= 3 => Some(self.containing(s)),
            NameMatch::Suffix(s) if !s.is_empty() => Some(self.ending_with(s)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, uid: &str) -> NameKey {
        (Arc::from(name), Arc::from(uid))
    }

    fn names(v: Option<Vec<&NameKey>>) -> Option<Vec<String>> {
        v.map(|v| v.into_iter().map(|k| k.0.to_string()).collect())
    }

    /// Substring and suffix matches come from the indexes, in name order, exactly as a
    /// scan would find them; they follow renames and removals; short substrings and
    /// prefixes are left to the caller.
    #[test]
    fn substrings_and_suffixes_match_like_a_scan() {
        let mut idx = NameIndex::default();
        let all = [
            key("net-prod", "1"),
            key("web-prod-2", "2"),
            key("prod", "3"),
            key("staging", "4"),
            key("a-prod-b", "5"),
        ];
        for k in &all {
            idx.insert(k);
        }
        let scan = |m: NameMatch<'_>| -> Vec<String> {
            let mut v: Vec<String> = all
                .iter()
                .filter(|k| m.matches(&k.0))
                .map(|k| k.0.to_string())
                .collect();
            v.sort();
            v
        };
        for m in [
            NameMatch::Contains("prod"),
            NameMatch::Contains("rod-"),
            NameMatch::Contains("xyz"),
            NameMatch::Suffix("-prod"),
            NameMatch::Suffix("d"),
            NameMatch::Suffix("staging"),
        ] {
            assert_eq!(names(idx.matching(m)), Some(scan(m)), "{m:?}");
        }
        assert_eq!(idx.matching(NameMatch::Contains("pr")), None);
        assert_eq!(idx.matching(NameMatch::Prefix("net")), None);
        assert_eq!(idx.matching(NameMatch::Suffix("")), None);
        // Rename uid 2, remove uid 1; slots are reused.
        idx.insert(&key("web-staging", "2"));
        idx.remove("1");
        idx.insert(&key("new-prod", "6"));
        assert_eq!(
            names(idx.matching(NameMatch::Contains("prod"))),
            Some(vec!["a-prod-b".into(), "new-prod".into(), "prod".into()])
        );
        assert_eq!(
            names(idx.matching(NameMatch::Suffix("staging"))),
            Some(vec!["staging".into(), "web-staging".into()])
        );
        assert_eq!(idx.slot_of.len(), 5);
        assert_eq!(idx.slots.len(), 5, "the freed slot was reused");
        for uid in ["2", "3", "4", "5", "6"] {
            idx.remove(uid);
        }
        assert!(idx.slot_of.is_empty() && idx.trigrams.is_empty() && idx.reversed.is_empty());
    }
}
