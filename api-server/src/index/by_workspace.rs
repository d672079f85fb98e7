//! Objects of one kind grouped by the workspace they belong to, with each workspace's
//! current one (which one is current is the kind's rule: the latest finalized state
//! version, the newest run that is not plan-only). Kept in step with the kind's watch, so
//! a workspace's state versions or runs, and its current one, are read without going over
//! the organization's objects.

use std::collections::HashMap;

/// (namespace, Workspace object name).
pub type WorkspaceKey = (String, String);

/// Object uids per workspace, and the uid of each workspace's current object.
#[derive(Default)]
pub struct ByWorkspace {
    members: HashMap<WorkspaceKey, Vec<String>>,
    current: HashMap<WorkspaceKey, String>,
    /// Runs only: each workspace's newest run that is not plan-only (its `latest-run`),
    /// where it differs from the current one.
    latest: HashMap<WorkspaceKey, String>,
}

impl ByWorkspace {
    /// Adds object `uid` to workspace `wk`.
    pub fn add(&mut self, wk: WorkspaceKey, uid: String) {
        self.members.entry(wk).or_default().push(uid);
    }

    /// Removes object `uid` from workspace `wk`.
    pub fn remove(&mut self, wk: &WorkspaceKey, uid: &str) {
        if let Some(list) = self.members.get_mut(wk) {
            list.retain(|u| u != uid);
            if list.is_empty() {
                self.members.remove(wk);
            }
        }
    }

    /// The uids of workspace object `ws` of namespace `ns` (any order).
    pub fn uids<'a>(&'a self, ns: &str, ws: &str) -> impl Iterator<Item = &'a String> + 'a {
        self.members
            .get(&(ns.to_owned(), ws.to_owned()))
            .into_iter()
            .flatten()
    }

    /// Records the current object of workspace `wk` (none: it has none).
    pub fn set_current(&mut self, wk: &WorkspaceKey, uid: Option<String>) {
        put_or_remove(&mut self.current, wk, uid);
    }

    /// Records the latest object of workspace `wk` where it is not its current one.
    pub fn set_latest(&mut self, wk: &WorkspaceKey, uid: Option<String>) {
        put_or_remove(&mut self.latest, wk, uid);
    }

    /// The uid of the latest object of workspace object `ws` of namespace `ns`: its
    /// current one unless [`Self::set_latest`] recorded another.
    pub fn latest(&self, ns: &str, ws: &str) -> Option<&String> {
        let k = (ns.to_owned(), ws.to_owned());
        self.latest.get(&k).or_else(|| self.current.get(&k))
    }

    /// The uid of the current object of workspace object `ws` of namespace `ns`.
    pub fn current(&self, ns: &str, ws: &str) -> Option<&String> {
        self.current.get(&(ns.to_owned(), ws.to_owned()))
    }

    /// Whether workspace `wk` has any object (tests).
    #[cfg(test)]
    pub fn has(&self, wk: &WorkspaceKey) -> bool {
        self.members.contains_key(wk)
    }
}

/// `map`'s entry of `wk` set to `uid`, or removed when there is none.
fn put_or_remove(map: &mut HashMap<WorkspaceKey, String>, wk: &WorkspaceKey, uid: Option<String>) {
    match uid {
        Some(u) => {
            map.insert(wk.clone(), u);
        }
        None => {
            map.remove(wk);
        }
    }
}
