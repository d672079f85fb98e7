//! The embedded object store: every object as JSON, the global resourceVersion counter,
//! per-resource watch history, the indexes garbage collection needs, and persistence.
//!
//! Writes go through [`State::put`] and [`State::remove`], which assign the next
//! resourceVersion, append a watch event to the resource's bounded history and queue a
//! log record. Watchers read the history by resourceVersion (no per-watcher buffers), so
//! a slow watcher costs nothing until it falls out of the window and gets 410 Expired.
//! Persistence is a snapshot plus an append-only JSON-lines log, both under the data
//! directory; the log is appended by a background flusher and on shutdown, and compacted
//! into the snapshot on open.

use crate::registry::Registry;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// (group, plural): all versions of a resource share storage.
pub type ResKey = (String, String);
/// (namespace, name); namespace is "" for cluster-scoped objects.
pub type ObjKey = (String, String);

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

/// One change of one object, as watchers see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change (for DELETED: its last state, stamped with the
    /// deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change, so selector watches can turn a change that stops
    /// matching into DELETED.
    pub prev: Option<Arc<Value>>,
}

#[derive(Default)]
pub struct ResourceData {
    pub objects: BTreeMap<ObjKey, Arc<Value>>,
    pub history: VecDeque<Arc<Event>>,
    /// Watches from a resourceVersion below this are answered 410 Expired.
    pub floor: u64,
}

/// Everything behind the store's one lock.
pub struct State {
    pub registry: Registry,
    pub data: HashMap<ResKey, ResourceData>,
    pub rv: u64,
    /// resourceVersion at open: history before it is gone.
    pub open_rv: u64,
    pub history_cap: usize,
    /// uid → where the object lives.
    pub uids: HashMap<String, (ResKey, ObjKey)>,
    /// owner uid → dependents.
    pub dependents: HashMap<String, BTreeSet<(ResKey, ObjKey)>>,
    /// Dependents whose owners should be checked by the garbage collector.
    pub gc_queue: Vec<(ResKey, ObjKey)>,
    /// Namespaces being deleted whose content the namespace finalizer must remove.
    pub terminating: BTreeSet<String>,
    /// Log records not yet appended to disk.
    pub pending_log: Vec<String>,
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

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl State {
    pub fn new(history_cap: usize, persistent: bool) -> State {
        State {
            registry: Registry::with_builtins(),
            data: HashMap::new(),
            rv: 0,
            open_rv: 0,
            history_cap: history_cap.max(1),
            uids: HashMap::new(),
            dependents: HashMap::new(),
            gc_queue: Vec::new(),
            terminating: BTreeSet::new(),
            pending_log: Vec::new(),
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

    pub fn get(&self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        self.data.get(res)?.objects.get(key).cloned()
    }

    fn index_remove(&mut self, res: &ResKey, key: &ObjKey, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.remove(uid);
        }
        for owner in owner_uids(obj) {
            if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(&(res.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    fn index_add(&mut self, res: &ResKey, key: &ObjKey, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids
                .insert(uid.to_string(), (res.clone(), key.clone()));
        }
        let owners = owner_uids(obj);
        if !owners.is_empty() {
            self.gc_queue.push((res.clone(), key.clone()));
        }
        for owner in owners {
            self.dependents
                .entry(owner)
                .or_default()
                .insert((res.clone(), key.clone()));
        }
    }

    fn record(&mut self, res: &ResKey, ev: Event) {
        let cap = self.history_cap;
        let rd = self.resource_mut(res);
        rd.history.push_back(Arc::new(ev));
        while rd.history.len() > cap {
            if let Some(old) = rd.history.pop_front() {
                rd.floor = old.rv;
            }
        }
    }

    /// Stores `obj` (creating or replacing), stamping the next resourceVersion.
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
        let obj = Arc::new(obj);
        let prev = self
            .resource_mut(res)
            .objects
            .insert(key.clone(), obj.clone());
        if let Some(p) = &prev {
            self.index_remove(res, &key, p);
        }
        self.index_add(res, &key, &obj);
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(
            res,
            Event {
                rv,
                kind,
                object: obj.clone(),
                prev,
            },
        );
        if self.persistent {
            self.pending_log
                .push(json!({"rv": rv, "g": res.0, "r": res.1, "o": &*obj}).to_string());
        }
        obj
    }

    /// Removes an object for good; returns its last state stamped with the deletion's
    /// resourceVersion.
    pub fn remove(&mut self, res: &ResKey, key: &ObjKey) -> Option<Arc<Value>> {
        let prev = self.data.get_mut(res)?.objects.remove(key)?;
        self.rv += 1;
        if res.0 == RBAC_GROUP {
            self.rbac_revision += 1;
        }
        let rv = self.rv;
        self.index_remove(res, key, &prev);
        if let Some(uid) = uid_of(&prev)
            && let Some(deps) = self.dependents.get(uid)
        {
            self.gc_queue.extend(deps.iter().cloned());
        }
        let mut last = (*prev).clone();
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let last = Arc::new(last);
        self.record(
            res,
            Event {
                rv,
                kind: EventType::Deleted,
                object: last.clone(),
                prev: Some(prev),
            },
        );
        if self.persistent {
            self.pending_log.push(
                json!({"rv": rv, "g": res.0, "r": res.1, "ns": key.0, "n": key.1}).to_string(),
            );
        }
        Some(last)
    }

    /// Objects of a resource in key order, optionally only one namespace, starting after
    /// `after`.
    pub fn range<'a>(
        &'a self,
        res: &ResKey,
        namespace: Option<&'a str>,
        after: Option<&'a ObjKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a> {
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
            .range((lower, Bound::Unbounded))
            .take_while(move |(k, _)| namespace.is_none_or(|ns| k.0 == ns));
        Box::new(it)
    }
}

/// The files of a data directory.
pub struct Files {
    pub dir: PathBuf,
}

impl Files {
    fn snapshot(&self) -> PathBuf {
        self.dir.join("snapshot.jsonl")
    }
    fn log(&self) -> PathBuf {
        self.dir.join("log.jsonl")
    }
    pub fn token(&self) -> PathBuf {
        self.dir.join("admin-token")
    }
    /// The ServiceAccount token signing key (base64 of 32 bytes).
    pub fn signing_key(&self) -> PathBuf {
        self.dir.join("sa-signing-key")
    }

    /// Loads the snapshot and the log into `st` (without events), then compacts them into
    /// a fresh snapshot.
    pub fn load(&self, st: &mut State) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut objects: HashMap<ResKey, BTreeMap<ObjKey, Value>> = HashMap::new();
        let mut rv = 0u64;
        for path in [self.snapshot(), self.log()] {
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for line in std::io::BufReader::new(file).lines() {
                let line = line?;
                // A torn last line (crash mid-append) is skipped.
                let Ok(rec) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if let Some(r) = rec.get("rv").and_then(Value::as_u64) {
                    rv = rv.max(r);
                }
                let s = |k: &str| rec.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let res = (s("g"), s("r"));
                if let Some(o) = rec.get("o") {
                    objects
                        .entry(res)
                        .or_default()
                        .insert(obj_key(o), o.clone());
                } else if rec.get("n").is_some()
                    && let Some(m) = objects.get_mut(&res)
                {
                    m.remove(&(s("ns"), s("n")));
                }
            }
        }
        for (res, objs) in objects {
            for (key, obj) in objs {
                let obj = Arc::new(obj);
                st.index_add(&res, &key, &obj);
                st.resource_mut(&res).objects.insert(key, obj);
            }
        }
        st.rv = rv;
        st.open_rv = rv;
        for rd in st.data.values_mut() {
            rd.floor = rv;
        }
        self.compact(st)
    }

    /// Writes every object as a new snapshot (atomically) and empties the log.
    pub fn compact(&self, st: &State) -> std::io::Result<()> {
        let tmp = self.dir.join("snapshot.jsonl.tmp");
        {
            let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            writeln!(w, "{}", json!({"rv": st.rv}))?;
            for (res, rd) in &st.data {
                for obj in rd.objects.values() {
                    writeln!(
                        w,
                        "{}",
                        json!({"rv": st.rv, "g": res.0, "r": res.1, "o": &**obj})
                    )?;
                }
            }
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        std::fs::rename(&tmp, self.snapshot())?;
        std::fs::write(self.log(), b"")?;
        Ok(())
    }

    /// Appends log records.
    pub fn append(&self, lines: &[String]) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())?;
        let mut w = std::io::BufWriter::new(f);
        for l in lines {
            w.write_all(l.as_bytes())?;
            w.write_all(b"\n")?;
        }
        w.flush()?;
        Ok(())
    }

    pub fn sync(&self) -> std::io::Result<()> {
        match std::fs::File::open(self.log()) {
            Ok(f) => f.sync_all(),
            Err(_) => Ok(()),
        }
    }
}

/// Reads or creates the admin token file.
pub fn load_or_create_token(path: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let t = new_token();
    write_private(path, &t)?;
    Ok(t)
}

/// Reads or creates the 32-byte ServiceAccount token signing key (stored as base64, so
/// tokens issued before a restart stay valid after it). A file that does not hold a
/// 32-byte key is an error rather than silently replaced: replacing it would invalidate
/// every issued token.
pub fn load_or_create_signing_key(path: &Path) -> std::io::Result<[u8; 32]> {
    use base64::Engine;
    let engine = base64::engine::general_purpose::STANDARD;
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let bytes = engine.decode(text.trim()).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e}"))
            })?;
            return <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the signing key is not 32 bytes",
                )
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let key = crate::auth::TokenSigner::generate_key();
    write_private(path, &engine.encode(key))?;
    Ok(key)
}

/// Writes a file readable by its owner only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)?.write_all(text.as_bytes())
}

pub fn new_token() -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
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

    /// Persistence: objects and the counter survive a reload.
    #[test]
    fn snapshot_and_log_reload() {
        let dir = std::env::temp_dir().join(format!("sim-store-{}", new_token()));
        let files = Files { dir: dir.clone() };
        let res: ResKey = ("".into(), "configmaps".into());
        let mut st = State::new(10, true);
        assert!(files.load(&mut st).is_ok());
        st.put(&res, obj("a", "x"));
        st.put(&res, obj("a", "y"));
        st.remove(&res, &("a".into(), "x".into()));
        let lines = std::mem::take(&mut st.pending_log);
        assert!(files.append(&lines).is_ok());
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
