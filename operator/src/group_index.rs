//! An index of the objects of a kind by group within their namespace, kept current from
//! a feed's events (see [`crate::watch::Feed::observe`]): the Workspace controller finds a
//! workspace's same-named siblings by TFE name (compared case-insensitively, as name
//! conflicts are), the state retention controller a workspace's state versions. A lookup,
//! not a scan of every object in the cluster on every event and reconcile (issue 17: the
//! per-create cost grew with the number of workspaces in the cluster).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Resource;
use kube::runtime::watcher::Event;

/// An object as the index files it: (namespace, object name, group).
type Entry = (String, String, String);

/// Shared handle on the index; [`GroupIndex::observe`] is the feed's hook.
pub struct GroupIndex<K> {
    inner: Arc<Mutex<Names>>,
    group: fn(&K) -> Option<String>,
}

impl<K> Clone for GroupIndex<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            group: self.group,
        }
    }
}

#[derive(Debug, Default)]
struct Names {
    /// Namespace → its objects' groups.
    namespaces: HashMap<String, Groups>,
    /// The objects of a (re)list in progress; they replace the index once it is done.
    relist: Option<Vec<Entry>>,
}

/// The groups of one namespace. Names are shared (`Arc<str>`) between the two maps, so
/// an object costs one copy of its name and of its group, whatever the cluster's size.
#[derive(Debug, Default)]
struct Groups {
    /// Group → object names, sorted (a Vec: most groups hold one object, and a set's
    /// first node would cost a dozen names' room).
    holders: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Object name → group.
    groups: HashMap<Arc<str>, Arc<str>>,
}

impl Names {
    fn insert(&mut self, (ns, object, group): Entry) {
        self.remove(&ns, &object);
        let groups = self.namespaces.entry(ns).or_default();
        let (object, group): (Arc<str>, Arc<str>) = (object.into(), group.into());
        let holders = groups.holders.entry(group.clone()).or_default();
        if let Err(at) = holders.binary_search(&object) {
            holders.insert(at, object.clone());
        }
        groups.groups.insert(object, group);
    }

    fn remove(&mut self, ns: &str, object: &str) {
        let Some(groups) = self.namespaces.get_mut(ns) else {
            return;
        };
        if let Some(group) = groups.groups.remove(object)
            && let Some(holders) = groups.holders.get_mut(&group)
        {
            if let Ok(at) = holders.binary_search_by(|o| (**o).cmp(object)) {
                holders.remove(at);
            }
            if holders.is_empty() {
                groups.holders.remove(&group);
            }
        }
        if groups.groups.is_empty() {
            self.namespaces.remove(ns);
        }
    }
}

impl<K: Resource> GroupIndex<K> {
    /// An empty index filing each object under `group(object)` (not at all when None).
    pub fn new(group: fn(&K) -> Option<String>) -> Self {
        Self {
            inner: Arc::default(),
            group,
        }
    }

    fn entry(&self, o: &K) -> Option<Entry> {
        Some((
            o.meta().namespace.clone()?,
            o.meta().name.clone()?,
            (self.group)(o)?,
        ))
    }

    /// Follows one event of the watch (after the cache applied it).
    pub fn observe(&self, ev: &Event<K>) {
        let entry = |o: &K| self.entry(o);
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
                names.namespaces.clear();
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
                if let (Some(ns), Some(object)) = (&w.meta().namespace, &w.meta().name) {
                    names.remove(ns, object);
                }
            }
        }
    }

    /// The objects (namespace, object name) of every namespace filed under `group`: a
    /// lookup per namespace, not a scan of the objects.
    pub fn members_anywhere(&self, group: &str) -> Vec<(String, String)> {
        let names = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        names
            .namespaces
            .iter()
            .filter_map(|(ns, g)| g.holders.get(group).map(|h| (ns, h)))
            .flat_map(|(ns, h)| h.iter().map(move |o| (ns.clone(), o.to_string())))
            .collect()
    }

    /// The object names of the objects of `ns` filed under `group`.
    pub fn members(&self, ns: &str, group: &str) -> Vec<String> {
        let names = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        names
            .namespaces
            .get(ns)
            .and_then(|g| g.holders.get(group))
            .map(|h| h.iter().map(|o| o.to_string()).collect())
            .unwrap_or_default()
    }

    /// Whether any object of `ns` is filed under `group`.
    pub fn any_member(&self, ns: &str, group: &str) -> bool {
        let names = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        names
            .namespaces
            .get(ns)
            .is_some_and(|g| g.holders.contains_key(group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use terrace_crds::{Workspace, WorkspaceSpec};

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
        let index = GroupIndex::new(|w: &Workspace| Some(w.spec.name.to_lowercase()));
        let holders = |ns: &str, name: &str| index.members(ns, &name.to_lowercase());
        index.observe(&Event::Apply(ws("acme", "stale", "web")));
        index.observe(&Event::Init);
        index.observe(&Event::InitApply(ws("acme", "a", "Web")));
        index.observe(&Event::InitApply(ws("acme", "b", "web")));
        index.observe(&Event::InitApply(ws("globex", "c", "web")));
        assert_eq!(holders("acme", "web"), ["stale"], "before the list is done");
        index.observe(&Event::InitDone);
        assert_eq!(holders("acme", "WEB"), ["a", "b"]);
        assert_eq!(holders("globex", "web"), ["c"]);
        index.observe(&Event::Apply(ws("acme", "b", "api")));
        assert_eq!(holders("acme", "web"), ["a"]);
        assert_eq!(holders("acme", "api"), ["b"]);
        let mut anywhere = index.members_anywhere("web");
        anywhere.sort();
        assert_eq!(
            anywhere,
            [
                ("acme".to_owned(), "a".to_owned()),
                ("globex".to_owned(), "c".to_owned())
            ],
            "acme's b is no longer web"
        );
        index.observe(&Event::Apply(ws("acme", "d", "web")));
        let mut anywhere = index.members_anywhere("web");
        anywhere.sort();
        assert_eq!(
            anywhere,
            [
                ("acme".to_owned(), "a".to_owned()),
                ("acme".to_owned(), "d".to_owned()),
                ("globex".to_owned(), "c".to_owned())
            ]
        );
        index.observe(&Event::Delete(ws("acme", "d", "web")));
        index.observe(&Event::Delete(ws("acme", "a", "web")));
        assert!(holders("acme", "web").is_empty());
        assert!(holders("other", "web").is_empty());
    }
}
