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
    /// Group → object names.
    holders: HashMap<Arc<str>, Holders>,
    /// Object name → group.
    groups: HashMap<Arc<str>, Arc<str>>,
}

/// The objects filed under one group, sorted. Most groups hold one object (a workspace's
/// TFE name, an ID): that one is kept in place, with no list of its own to allocate (a
/// list's first allocation has room for four, 64 bytes per object and index).
#[derive(Debug)]
enum Holders {
    One(Arc<str>),
    /// Two or more, sorted.
    Many(Vec<Arc<str>>),
}

impl Holders {
    fn iter(&self) -> std::slice::Iter<'_, Arc<str>> {
        match self {
            Holders::One(o) => std::slice::from_ref(o).iter(),
            Holders::Many(v) => v.iter(),
        }
    }

    fn insert(&mut self, object: Arc<str>) {
        match self {
            Holders::One(o) if *o == object => {}
            Holders::One(o) => {
                let mut v = vec![o.clone(), object];
                v.sort();
                *self = Holders::Many(v);
            }
            Holders::Many(v) => {
                if let Err(at) = v.binary_search(&object) {
                    v.insert(at, object);
                }
            }
        }
    }

    /// Removes `object`; false when none is left.
    fn remove(&mut self, object: &str) -> bool {
        match self {
            Holders::One(o) => &**o != object,
            Holders::Many(v) => {
                if let Ok(at) = v.binary_search_by(|o| (**o).cmp(object)) {
                    v.remove(at);
                }
                match v.as_slice() {
                    [] => false,
                    [one] => {
                        let one = one.clone();
                        *self = Holders::One(one);
                        true
                    }
                    _ => true,
                }
            }
        }
    }
}

impl Names {
    fn insert(&mut self, (ns, object, group): Entry) {
        self.remove(&ns, &object);
        let groups = self.namespaces.entry(ns).or_default();
        let (object, group): (Arc<str>, Arc<str>) = (object.into(), group.into());
        match groups.holders.get_mut(&group) {
            Some(holders) => holders.insert(object.clone()),
            None => {
                groups
                    .holders
                    .insert(group.clone(), Holders::One(object.clone()));
            }
        }
        groups.groups.insert(object, group);
    }

    fn remove(&mut self, ns: &str, object: &str) {
        let Some(groups) = self.namespaces.get_mut(ns) else {
            return;
        };
        if let Some(group) = groups.groups.remove(object)
            && let Some(holders) = groups.holders.get_mut(&group)
            && !holders.remove(object)
        {
            groups.holders.remove(&group);
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

    #[test]
    fn a_group_holds_one_object_in_place_and_more_sorted() {
        let names = |h: &Holders| h.iter().map(|o| o.to_string()).collect::<Vec<_>>();
        let mut h = Holders::One("b".into());
        h.insert("b".into());
        assert!(
            matches!(h, Holders::One(_)),
            "the same object again is no second"
        );
        h.insert("c".into());
        h.insert("a".into());
        assert_eq!(names(&h), ["a", "b", "c"]);
        assert!(h.remove("b") && h.remove("x"));
        assert_eq!(names(&h), ["a", "c"]);
        assert!(h.remove("a"));
        assert!(
            matches!(h, Holders::One(_)),
            "back in place once one is left"
        );
        assert_eq!(names(&h), ["c"]);
        assert!(!h.remove("c"), "none left");
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
