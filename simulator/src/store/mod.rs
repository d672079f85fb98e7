//! The embedded object store: every object as JSON, the global resourceVersion counter,
//! per-resource watch history, the indexes garbage collection needs, and persistence.
//!
//! Writes go through [`State::put`] and [`State::remove`], which assign the next
//! resourceVersion, append a watch event to the resource's bounded history and queue a
//! log record. Watchers read the history by resourceVersion (no per-watcher buffers), so
//! a slow watcher costs nothing until it falls out of the window and gets 410 Expired.
//! Persistence is a snapshot plus an append-only JSON-lines log, both under the data
//! directory (mode 0700, files 0600: they hold every Secret); the log is appended and
//! synced by the flusher in batches (group commit: a writer is answered once the batch
//! holding its records is on disk, see [`crate::Shared::write_durably`]), and compacted
//! into the snapshot on open.

use crate::registry::Registry;
use crate::selectors::LabelSelector;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod files;
pub mod packed;
pub use files::Files;
pub use files::create_private_dir;
pub use files::load_or_create_signing_key;
pub use files::load_or_create_token;
pub use files::new_token;

/// (group, plural): all versions of a resource share storage.
pub type ResKey = (String, String);
/// (namespace, name); namespace is "" for cluster-scoped objects.
pub type ObjKey = (String, String);
/// An owned object, by keys shared with the store's tables.
pub type Dependent = (Arc<ResKey>, Arc<ObjKey>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A stored object: its JSON text, which gets, lists, watches and the log send as they
/// are, and the metadata the store's indexes and selectors read. The text is kept
/// deflated against its resource's dictionary ([`packed`]): a workspace costs about 150
/// bytes so, 1.8 KB as text, and about ten times that as a parsed `serde_json::Value`
/// (a B-tree node per map, an allocation per string); code that needs its fields parses
/// it ([`Obj::value`]).
#[derive(Debug)]
pub struct Obj {
    text: packed::Text,
    /// `apiVersion`: an object whose text is already in the version a client asked for
    /// is sent as it is.
    api_version: Arc<str>,
    /// Shared with [`State::uids`].
    uid: Option<Arc<str>>,
    /// `metadata.labels` (string values), sorted by key; the keys are shared by the
    /// resource's objects.
    labels: Box<[(Arc<str>, Box<str>)]>,
    /// The uids of `metadata.ownerReferences`.
    owners: Box<[Box<str>]>,
    /// Whether `metadata.deletionTimestamp` is set.
    deleting: bool,
}

impl Obj {
    /// Serializes `obj` for the store, packed by its resource's `packer`.
    pub fn new(obj: &Value, packer: &mut packed::Packer) -> Obj {
        let mut labels: Vec<(Arc<str>, Box<str>)> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((packer.shared(k), v.as_str()?.into())))
            .collect();
        labels.sort();
        Obj {
            text: packer.text(obj.to_string()),
            api_version: packer.shared(
                obj.get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            uid: uid_of(obj).map(Into::into),
            labels: labels.into_boxed_slice(),
            owners: owner_uids(obj).into_iter().map(Into::into).collect(),
            deleting: obj.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }

    /// The object as JSON text.
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        self.text.get()
    }

    /// The object, parsed.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.text()).unwrap_or(Value::Null)
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    /// The labels as (key, value), sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Whether `metadata.deletionTimestamp` is present.
    pub fn is_deleting(&self) -> bool {
        self.deleting
    }

    /// The uids of the object's owners.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owners.iter().map(|o| &**o)
    }

    /// Whether the stored `apiVersion` is `api_version` (then the text is what a client
    /// of that version gets, with no rewriting).
    pub fn has_api_version(&self, api_version: &str) -> bool {
        *self.api_version == *api_version
    }
}

/// One change of one object, as watchers see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    /// When it happened (events older than the history's age limit are dropped).
    pub at: std::time::Instant,
    pub kind: EventType,
    /// (namespace, name) of the object.
    pub key: ObjKey,
    /// The object after the change (for DELETED: its last state, stamped with the
    /// deletion's resourceVersion).
    pub object: Arc<Obj>,
    /// The object before the change, so selector watches can turn a change that stops
    /// matching into DELETED.
    pub prev: Option<Arc<Obj>>,
}

/// The objects carrying one label value: most label values (IDs, names) are carried by
/// one object, which needs no set of its own. Keys are the object map's own (shared).
#[derive(Debug)]
enum Posting {
    One(Arc<ObjKey>),
    Many(BTreeSet<Arc<ObjKey>>),
}

impl Posting {
    fn insert(&mut self, key: &Arc<ObjKey>) {
        match self {
            Posting::One(k) if k == key => {}
            Posting::One(k) => {
                *self = Posting::Many(BTreeSet::from([k.clone(), key.clone()]));
            }
            Posting::Many(set) => {
                set.insert(key.clone());
            }
        }
    }

    /// Removes `key`; answers whether the posting is empty now.
    fn remove(&mut self, key: &ObjKey) -> bool {
        match self {
            Posting::One(k) => **k == *key,
            Posting::Many(set) => {
                set.remove(key);
                if set.len() == 1
                    && let Some(last) = set.pop_first()
                {
                    *self = Posting::One(last);
                }
                false
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Posting::One(_) => 1,
            Posting::Many(set) => set.len(),
        }
    }

    fn keys(&self) -> Box<dyn Iterator<Item = &ObjKey> + '_> {
        match self {
            Posting::One(k) => Box::new(std::iter::once(&**k)),
            Posting::Many(set) => Box::new(set.iter().map(|k| &**k)),
        }
    }
}

pub struct ResourceData {
    /// The objects by key; the label index shares the keys.
    pub objects: BTreeMap<Arc<ObjKey>, Arc<Obj>>,
    pub history: VecDeque<Arc<Event>>,
    /// Watches from a resourceVersion below this are answered 410 Expired.
    pub floor: u64,
    /// Label key → value → the objects carrying it, so a list or watch selecting on a
    /// label's value (`key=value`, `key in (…)`) reads only those objects instead of
    /// every object of the resource.
    labels: HashMap<Box<str>, HashMap<Box<str>, Posting>>,
    /// The resourceVersion of the resource's latest event: its watches wait on it, so a
    /// write wakes only the watches of its own resource.
    notify: tokio::sync::watch::Sender<u64>,
    /// What the resource's objects are packed with.
    packer: packed::Packer,
}

impl Default for ResourceData {
    fn default() -> Self {
        ResourceData {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            floor: 0,
            labels: HashMap::new(),
            notify: tokio::sync::watch::Sender::new(0),
            packer: packed::Packer::default(),
        }
    }
}

impl ResourceData {
    /// `obj` packed for this resource.
    fn pack(&mut self, obj: &Value) -> Obj {
        Obj::new(obj, &mut self.packer)
    }

    fn labels_add(&mut self, key: &Arc<ObjKey>, obj: &Obj) {
        for (k, v) in obj.labels() {
            let values = self.labels.entry(k.into()).or_default();
            match values.get_mut(v) {
                Some(p) => p.insert(key),
                None => {
                    values.insert(v.into(), Posting::One(key.clone()));
                }
            }
        }
    }

    fn labels_remove(&mut self, key: &ObjKey, obj: &Obj) {
        for (k, v) in obj.labels() {
            let Some(values) = self.labels.get_mut(k) else {
                continue;
            };
            if values.get_mut(v).is_some_and(|p| p.remove(key)) {
                values.remove(v);
            }
            if values.is_empty() {
                self.labels.remove(k);
            }
        }
    }

    /// The keys of the objects a selector's most selective value requirement allows
    /// (those carrying one of its values), in key order; `None` when it has no such
    /// requirement (every object is a candidate).
    fn candidates<'a>(&'a self, selector: &LabelSelector) -> Option<Vec<&'a ObjKey>> {
        let mut best: Option<Vec<&Posting>> = None;
        for (key, values) in selector.value_requirements() {
            let postings: Vec<&Posting> = values
                .iter()
                .filter_map(|v| self.labels.get(key).and_then(|p| p.get(*v)))
                .collect();
            let len = |p: &[&Posting]| p.iter().map(|s| s.len()).sum::<usize>();
            if best.as_ref().is_none_or(|b| len(&postings) < len(b)) {
                best = Some(postings);
            }
        }
        let mut keys: Vec<&ObjKey> = best?.into_iter().flat_map(Posting::keys).collect();
        keys.sort_unstable();
        keys.dedup();
        Some(keys)
    }
}

/// Everything behind the store's one lock.
pub struct State {
    pub registry: Registry,
    pub data: HashMap<ResKey, ResourceData>,
    pub rv: u64,
    /// resourceVersion at open: history before it is gone.
    pub open_rv: u64,
    pub history_cap: usize,
    /// The uid of every object (owners are looked up by uid).
    pub uids: std::collections::HashSet<Arc<str>>,
    /// owner uid → dependents (keys shared with the resource table and the object
    /// table: an owned object costs two pointers here, not four strings).
    pub dependents: HashMap<Box<str>, Vec<Dependent>>,
    /// One shared copy of each resource's key, for [`State::dependents`].
    res_keys: HashMap<ResKey, Arc<ResKey>>,
    /// Dependents whose owners should be checked by the garbage collector.
    pub gc_queue: Vec<(ResKey, ObjKey)>,
    /// Namespaces being deleted whose content the namespace finalizer must remove.
    pub terminating: BTreeSet<String>,
    /// Log records not yet appended to disk.
    pub pending_log: Vec<String>,
    /// How many log records were ever queued: a writer waits until the flusher has
    /// made this many durable ([`crate::Shared::write_durably`]).
    pub log_seq: u64,
    pub persistent: bool,
    /// Bumped by every write to an RBAC object (Role, ClusterRole and their bindings), so
    /// the authorizer rebuilds its snapshot only when one changed.
    pub rbac_revision: u64,
}

/// The API group whose writes bump [`State::rbac_revision`].
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

pub fn obj_key(obj: &Value) -> ObjKey {
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    (s("/metadata/namespace"), s("/metadata/name"))
}

fn uid_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid").and_then(Value::as_str)
}

fn owner_uids(obj: &Value) -> Vec<&str> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// A log record storing `obj` (its text, not serialized again).
fn put_record(rv: u64, res: &ResKey, obj: &Obj) -> String {
    format!(
        "{{\"rv\":{rv},\"g\":{},\"r\":{},\"o\":{}}}",
        json!(res.0),
        json!(res.1),
        obj.text()
    )
}

impl State {
    pub fn new(history_cap: usize, persistent: bool) -> State {
        State {
            registry: Registry::with_builtins(),
            data: HashMap::new(),
            rv: 0,
            open_rv: 0,
            history_cap: history_cap.max(1),
            uids: Default::default(),
            dependents: HashMap::new(),
            res_keys: HashMap::new(),
            gc_queue: Vec::new(),
            terminating: BTreeSet::new(),
            pending_log: Vec::new(),
            log_seq: 0,
            persistent,
            rbac_revision: 0,
        }
    }

    pub fn resource(&self, res: &ResKey) -> Option<&ResourceData> {
        self.data.get(res)
    }

    fn resource_mut(&mut self, res: &ResKey) -> &mut ResourceData {
        let floor = self.open_rv;
        self.data
            .entry(res.clone())
            .or_insert_with(|| ResourceData {
                floor,
                ..ResourceData::default()
            })
    }

    /// The object, parsed (every call parses: where the text will do, use
    /// [`State::get_obj`]).
    pub fn get(&self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        self.get_obj(res, key).map(|o| Arc::new(o.value()))
    }

    /// The stored object.
    pub fn get_obj(&self, res: &ResKey, key: &ObjKey) -> Option<Arc<Obj>> {
        self.data.get(res)?.objects.get(key).cloned()
    }

    /// Whether the object exists.
    pub fn contains(&self, res: &ResKey, key: &ObjKey) -> bool {
        self.data
            .get(res)
            .is_some_and(|rd| rd.objects.contains_key(key))
    }

    fn index_remove(&mut self, res: &ResKey, key: &ObjKey, obj: &Obj) {
        if let Some(uid) = obj.uid() {
            self.uids.remove(uid);
        }
        for owner in obj.owner_uids() {
            if let Some(deps) = self.dependents.get_mut(owner) {
                deps.retain(|(r, k)| **r != *res || **k != *key);
                if deps.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    fn index_add(&mut self, res: &ResKey, key: &Arc<ObjKey>, obj: &Obj) {
        if let Some(uid) = &obj.uid {
            self.uids.insert(uid.clone());
        }
        if obj.owners.is_empty() {
            return;
        }
        self.gc_queue.push((res.clone(), (**key).clone()));
        let shared_res = self
            .res_keys
            .entry(res.clone())
            .or_insert_with(|| Arc::new(res.clone()))
            .clone();
        for owner in obj.owner_uids() {
            let deps = self.dependents.entry(owner.into()).or_default();
            if !deps.iter().any(|(r, k)| **r == *res && k == key) {
                deps.push((shared_res.clone(), key.clone()));
            }
        }
    }

    fn record(&mut self, res: &ResKey, ev: Event) {
        let cap = self.history_cap;
        let rd = self.resource_mut(res);
        let rv = ev.rv;
        rd.history.push_back(Arc::new(ev));
        while rd.history.len() > cap {
            if let Some(old) = rd.history.pop_front() {
                rd.floor = old.rv;
            }
        }
        rd.notify.send_replace(rv);
    }

    /// Drops the history events from before `cutoff`; watches from before them get 410
    /// Expired.
    pub fn trim_history(&mut self, cutoff: std::time::Instant) {
        for rd in self.data.values_mut() {
            while rd.history.front().is_some_and(|e| e.at < cutoff) {
                if let Some(old) = rd.history.pop_front() {
                    rd.floor = old.rv;
                }
            }
        }
    }

    /// Changes with every event of the resource (its latest resourceVersion).
    pub fn subscribe(&mut self, res: &ResKey) -> tokio::sync::watch::Receiver<u64> {
        self.resource_mut(res).notify.subscribe()
    }

    /// Stores `obj` (creating or replacing), stamping the next resourceVersion; returns
    /// it as stored.
    pub fn put(&mut self, res: &ResKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        if res.0 == RBAC_GROUP {
            self.rbac_revision += 1;
        }
        let rv = self.rv;
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let key = obj_key(&obj);
        let rd = self.resource_mut(res);
        let stored = Arc::new(rd.pack(&obj));
        let shared = rd
            .objects
            .get_key_value(&key)
            .map_or_else(|| Arc::new(key.clone()), |(k, _)| k.clone());
        let prev = rd.objects.insert(shared.clone(), stored.clone());
        if let Some(p) = &prev {
            rd.labels_remove(&key, p);
        }
        rd.labels_add(&shared, &stored);
        if let Some(p) = &prev {
            self.index_remove(res, &key, p);
        }
        self.index_add(res, &shared, &stored);
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        if self.persistent {
            self.pending_log.push(put_record(rv, res, &stored));
            self.log_seq += 1;
        }
        self.record(
            res,
            Event {
                rv,
                at: std::time::Instant::now(),
                kind,
                key,
                object: stored,
                prev,
            },
        );
        Arc::new(obj)
    }

    /// Removes an object for good; returns its last state stamped with the deletion's
    /// resourceVersion.
    pub fn remove(&mut self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        let rd = self.data.get_mut(res)?;
        let prev = rd.objects.remove(key)?;
        rd.labels_remove(key, &prev);
        self.rv += 1;
        if res.0 == RBAC_GROUP {
            self.rbac_revision += 1;
        }
        let rv = self.rv;
        self.index_remove(res, key, &prev);
        if let Some(uid) = prev.uid()
            && let Some(deps) = self.dependents.get(uid)
        {
            self.gc_queue
                .extend(deps.iter().map(|(r, k)| ((**r).clone(), (**k).clone())));
        }
        let mut last = prev.value();
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let object = Arc::new(self.resource_mut(res).pack(&last));
        self.record(
            res,
            Event {
                rv,
                at: std::time::Instant::now(),
                kind: EventType::Deleted,
                key: key.clone(),
                object,
                prev: Some(prev),
            },
        );
        if self.persistent {
            self.pending_log.push(
                json!({"rv": rv, "g": res.0, "r": res.1, "ns": key.0, "n": key.1}).to_string(),
            );
            self.log_seq += 1;
        }
        Some(Arc::new(last))
    }

    /// Objects of a resource in key order, optionally only one namespace, starting after
    /// `after`.
    pub fn range<'a>(
        &'a self,
        res: &ResKey,
        namespace: Option<&'a str>,
        after: Option<&'a ObjKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Obj>)> + 'a> {
        use std::ops::Bound;
        let Some(rd) = self.data.get(res) else {
            return Box::new(std::iter::empty());
        };
        let lower = match (after, namespace) {
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let it = rd
            .objects
            .range::<ObjKey, _>((lower, Bound::Unbounded))
            .map(|(k, o)| (&**k, o))
            .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns));
        Box::new(it)
    }

    /// As [`State::range`], but only objects that may match `selector`: when it
    /// requires a label's value, only the objects carrying it are read (from the label
    /// index), so selecting a few objects of many costs what those few cost. Callers
    /// still check every object against the whole selector.
    pub fn range_selected<'a>(
        &'a self,
        res: &ResKey,
        namespace: Option<&'a str>,
        after: Option<&'a ObjKey>,
        selector: &LabelSelector,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Obj>)> + 'a> {
        let Some(rd) = self.data.get(res) else {
            return Box::new(std::iter::empty());
        };
        let Some(keys) = rd.candidates(selector) else {
            return self.range(res, namespace, after);
        };
        // The first candidate after `after`, else the first of `namespace`.
        let start = match (after, namespace) {
            (Some(a), _) => keys.partition_point(|k| *k <= a),
            (None, Some(ns)) => keys.partition_point(|k| k.0.as_str() < ns),
            (None, None) => 0,
        };
        let it = keys
            .into_iter()
            .skip(start)
            .take_while(move |k| namespace.is_none_or(|ns| k.0 == ns))
            .filter_map(|k| rd.objects.get_key_value(k))
            .map(|(k, o)| (&**k, o));
        Box::new(it)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: &str, name: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "uid": format!("{ns}-{name}")}})
    }

    /// Copies etcd-backed storage: one global counter across kinds, history per
    /// resource bounded by the watch cache size (older resourceVersions expire).
    #[test]
    fn rv_and_history_window() {
        let mut st = State::new(2, false);
        let res: ResKey = ("".into(), "configmaps".into());
        for i in 0..3 {
            st.put(&res, obj("a", &format!("o{i}")));
        }
        assert_eq!(st.rv, 3);
        let rd = st.resource(&res).map(|r| (r.history.len(), r.floor));
        assert_eq!(rd, Some((2, 1)));
        let removed = st.remove(&res, &("a".into(), "o0".into()));
        assert_eq!(
            removed.and_then(|o| o.pointer("/metadata/resourceVersion").cloned()),
            Some(json!("4"))
        );
    }

    /// Copies a namespaced list: only that namespace, in name order.
    #[test]
    fn range_by_namespace() {
        let mut st = State::new(10, false);
        let res: ResKey = ("".into(), "configmaps".into());
        for (ns, n) in [("b", "y"), ("a", "x"), ("b", "x"), ("c", "z")] {
            st.put(&res, obj(ns, n));
        }
        let names: Vec<String> = st
            .range(&res, Some("b"), None)
            .map(|(k, _)| k.1.clone())
            .collect();
        assert_eq!(names, ["x", "y"]);
    }

    /// Copies the watch cache's freshness bound: events older than the cutoff leave the
    /// history and move its floor (watches from before it get 410).
    #[test]
    fn history_is_trimmed_by_age() {
        let mut st = State::new(10, false);
        let res: ResKey = ("".into(), "configmaps".into());
        st.put(&res, obj("a", "o0"));
        st.put(&res, obj("a", "o1"));
        let cutoff = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        st.put(&res, obj("a", "o2"));
        st.trim_history(cutoff);
        let rd = st.resource(&res).map(|r| (r.history.len(), r.floor));
        assert_eq!(rd, Some((1, 2)));
        st.trim_history(std::time::Instant::now());
        let rd = st.resource(&res).map(|r| (r.history.len(), r.floor));
        assert_eq!(rd, Some((0, 3)));
        assert_eq!(st.range(&res, None, None).count(), 3, "objects stay");
    }

    /// A label selector on a value reads the label index: only objects carrying the
    /// value, in key order, from `after` and within the namespace, kept current as labels
    /// change and objects go. Selectors without a value requirement read every object.
    #[test]
    fn range_selected_reads_the_label_index() {
        let mut st = State::new(10, false);
        let res: ResKey = ("".into(), "configmaps".into());
        let labelled = |ns: &str, name: &str, labels: Value| json!({"metadata": {"namespace": ns, "name": name, "labels": labels}});
        st.put(&res, labelled("b", "y", json!({"id": "1", "org": "o"})));
        st.put(&res, labelled("a", "x", json!({"id": "1"})));
        st.put(&res, labelled("b", "x", json!({"id": "2", "org": "o"})));
        st.put(&res, labelled("c", "z", json!({"id": "1"})));
        fn keys(st: &State, ns: Option<&str>, after: Option<&ObjKey>, s: &str) -> Vec<String> {
            let res: ResKey = ("".into(), "configmaps".into());
            let sel = LabelSelector::parse(s).unwrap_or_default();
            st.range_selected(&res, ns, after, &sel)
                .map(|(k, _)| format!("{}/{}", k.0, k.1))
                .collect()
        }
        assert_eq!(keys(&st, None, None, "id=1"), ["a/x", "b/y", "c/z"]);
        assert_eq!(keys(&st, Some("b"), None, "id=1"), ["b/y"]);
        assert_eq!(keys(&st, None, None, "id in (2, 1),org=o"), ["b/x", "b/y"]);
        let after = ("a".to_string(), "x".to_string());
        assert_eq!(keys(&st, None, Some(&after), "id=1"), ["b/y", "c/z"]);
        assert!(keys(&st, None, None, "id=3").is_empty());
        assert_eq!(keys(&st, Some("b"), None, "org").len(), 2);
        // A relabelled object moves; a removed one leaves; empty postings go.
        st.put(&res, labelled("b", "y", json!({"id": "3"})));
        st.remove(&res, &("c".to_string(), "z".to_string()));
        st.remove(&res, &("b".to_string(), "x".to_string()));
        assert_eq!(keys(&st, None, None, "id=1"), ["a/x"]);
        assert_eq!(keys(&st, None, None, "id=3"), ["b/y"]);
        let index = st.resource(&res).map(|rd| {
            let mut v: Vec<(String, usize)> = rd
                .labels
                .iter()
                .map(|(k, vals)| (k.to_string(), vals.len()))
                .collect();
            v.sort();
            v
        });
        assert_eq!(index, Some(vec![("id".to_string(), 2)]));
    }

    /// Persistence: objects and the counter survive a reload.
    #[test]
    fn snapshot_and_log_reload() {
        let dir = std::env::temp_dir().join(format!("sim-store-{}", new_token()));
        let files = Files::new(dir.clone());
        let res: ResKey = ("".into(), "configmaps".into());
        let mut st = State::new(10, true);
        assert!(files.load(&mut st).is_ok());
        st.put(&res, obj("a", "x"));
        st.put(&res, obj("a", "y"));
        st.remove(&res, &("a".into(), "x".into()));
        let lines = std::mem::take(&mut st.pending_log);
        assert!(files.append(&lines, true).is_ok());
        let mut st2 = State::new(10, true);
        assert!(files.load(&mut st2).is_ok());
        assert_eq!(st2.rv, 3);
        let keys: Vec<ObjKey> = st2
            .range(&res, None, None)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(keys, [("a".to_string(), "y".to_string())]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
