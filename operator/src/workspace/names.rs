//! The Workspace controller's index of TFE names: which workspaces of a namespace carry a
//! name (compared case-insensitively, as name conflicts are), kept current from the
//! Workspace feed's events. Finding a workspace's same-named siblings is then a lookup,
//! not a scan of every workspace in the cluster on every event and reconcile (issue 17:
//! the per-create cost grew with the number of workspaces in the cluster).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kube::runtime::watcher::Event;
use terrace_crds::Workspace;

/// A workspace as the index files it: (namespace, object name, lowercase TFE name).
type Entry = (String, String, String);

/// Shared handle on the index; [`NameIndex::observe`] is the feed's hook.
#[derive(Clone, Default)]
pub struct NameIndex {
    inner: Arc<Mutex<Names>>,
}

#[derive(Debug, Default)]
struct Names {
    /// (namespace, lowercase TFE name) → object names.
    holders: HashMap<(String, String), BTreeSet<String>>,
    /// (namespace, object name) → lowercase TFE name.
    names: HashMap<(String, String), String>,
    /// The objects of a (re)list in progress; they replace the index once it is done.
    relist: Option<Vec<Entry>>,
}

fn entry(w: &Workspace) -> Option<Entry> {
    Some((
        w.metadata.namespace.clone()?,
        w.metadata.name.clone()?,
        w.spec.name.to_lowercase(),
    ))
}

impl Names {
    fn insert(&mut self, (ns, object, name): Entry) {
        self.remove(&ns, &object);
        self.holders
            .entry((ns.clone(), name.clone()))
            .or_default()
            .insert(object.clone());
        self.names.insert((ns, object), name);
    }

    fn remove(&mut self, ns: &str, object: &str) {
        let key = (ns.to_owned(), object.to_owned());
        if let Some(name) = self.names.remove(&key) {
            let by_name = (key.0, name);
            if let Some(set) = self.holders.get_mut(&by_name) {
                set.remove(object);
                if set.is_empty() {
                    self.holders.remove(&by_name);
                }
            }
        }
    }
}

impl NameIndex {
    /// Follows one event of the Workspace watch (after the cache applied it).
    pub fn observe(&self, ev: &Event<Workspace>) {
        let mut names = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match ev {
            Event::Init => names.relist = Some(Vec::new()),
            Event::InitApply(w) => {
                if let (Some(relist), Some(e)) = (names.relist.as_mut(), entry(w)) {
                    relist.push(e);
                }
            }
            Event::InitDone => {
                let relist = names.relist.take().unwrap_or_default();
                names.holders.clear();
                names.names.clear();
                for e in relist {
                    names.insert(e);
                }
            }
            Event::Apply(w) => {
                if let Some(e) = entry(w) {
                    names.insert(e);
                }
            }
            Event::Delete(w) => {
                if let Some((ns, object, _)) = entry(w) {
                    names.remove(&ns, &object);
                }
            }
        }
    }

    /// The object names of the workspaces of `ns` whose TFE name is `tfe_name`,
    /// case-insensitively.
    pub fn holders(&self, ns: &str, tfe_name: &str) -> Vec<String> {
        let names = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        names
            .holders
            .get(&(ns.to_owned(), tfe_name.to_lowercase()))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use terrace_crds::WorkspaceSpec;

    fn ws(ns: &str, object: &str, name: &str) -> Workspace {
        Workspace {
            metadata: ObjectMeta {
                name: Some(object.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: WorkspaceSpec {
                name: name.into(),
                ..Default::default()
            },
            status: None,
        }
    }

    /// Follows kube-runtime's watcher events: a list fills the index (replacing what was
    /// there), applies file an object under its current name (a rename moves it),
    /// deletions remove it; names match case-insensitively within a namespace.
    #[test]
    fn the_index_follows_the_watch() {
        let index = NameIndex::default();
        index.observe(&Event::Apply(ws("acme", "stale", "web")));
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(ws("acme", "a", "Web")));
        index.observe(&Event::InitApply(ws("acme", "b", "web")));
        index.observe(&Event::InitApply(ws("globex", "c", "web")));
        assert_eq!(
            index.holders("acme", "web"),
            ["stale"],
            "before the list is done"
        );
        index.observe(&Event::InitDone);
        assert_eq!(index.holders("acme", "WEB"), ["a", "b"]);
        assert_eq!(index.holders("globex", "web"), ["c"]);
        index.observe(&Event::Apply(ws("acme", "b", "api")));
        assert_eq!(index.holders("acme", "web"), ["a"]);
        assert_eq!(index.holders("acme", "api"), ["b"]);
        index.observe(&Event::Delete(ws("acme", "a", "web")));
        assert!(index.holders("acme", "web").is_empty());
        assert!(index.holders("other", "web").is_empty());
    }
}
