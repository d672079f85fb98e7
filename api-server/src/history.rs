//! Archived runs and test runs (docs/runs.md, "History"; the operator's `history`
//! controllers write the archive, [`terrace_crds::history`] says its shape). The API
//! serves them as it serves live ones, with the same IDs, in the same order, with their
//! logs: an ID missing from the index is looked up in its namespace's directory, a list
//! merges an owner's manifest with the live objects.
//!
//! Reads are cached: directories (read again on every miss, so an object archived a
//! moment ago is found), manifests (read again when the owner's status counts a
//! different number of archived objects), and segments (bounded, least recently used,
//! typed objects ready to render).

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use terrace_crds::history::{
    Archived, Directory, HistoryKind, Manifest, ManifestItem, Segment, decode, directory_key,
    directory_shard, manifest_key, segment_key, unpack_log,
};

use crate::blobs::{BlobError, BlobStore};
use crate::{ApiError, AppState};

/// Segments kept decoded.
const SEGMENTS: usize = 64;
/// Manifests kept decoded.
const MANIFESTS: usize = 1024;

/// A small least-recently-used map.
struct Lru<K, V> {
    cap: usize,
    tick: u64,
    map: HashMap<K, (u64, V)>,
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Lru<K, V> {
    fn new(cap: usize) -> Self {
        Self {
            cap,
            tick: 0,
            map: HashMap::new(),
        }
    }

    fn get(&mut self, k: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(k).map(|(t, v)| {
            *t = tick;
            v.clone()
        })
    }

    fn put(&mut self, k: K, v: V) {
        self.tick += 1;
        if self.map.len() >= self.cap
            && !self.map.contains_key(&k)
            && let Some(old) = self
                .map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
        {
            self.map.remove(&old);
        }
        self.map.insert(k, (self.tick, v));
    }
}

/// One decoded segment of objects of type `K`.
struct Loaded<K> {
    by_id: HashMap<String, (Arc<K>, BTreeMap<String, String>)>,
}

type ManifestKey = (String, HistoryKind, String);
/// A cached manifest with the archived count its owner's status said when it was read.
type CachedManifest = (Option<i64>, Arc<Manifest>);

/// The API server's view of the archives.
pub struct History {
    /// Directory shards by namespace, kind and shard number.
    directories: Mutex<HashMap<(String, HistoryKind, u32), Arc<Directory>>>,
    manifests: Mutex<Lru<ManifestKey, CachedManifest>>,
    segments: Mutex<Lru<String, Arc<dyn Any + Send + Sync>>>,
    /// One directory reload at a time.
    reloading: tokio::sync::Mutex<()>,
}

impl Default for History {
    fn default() -> Self {
        Self {
            directories: Mutex::default(),
            manifests: Mutex::new(Lru::new(MANIFESTS)),
            segments: Mutex::new(Lru::new(SEGMENTS)),
            reloading: tokio::sync::Mutex::default(),
        }
    }
}

/// An archivable kind.
pub trait Archivable: DeserializeOwned + Send + Sync + 'static {
    const KIND: HistoryKind;
    /// The API ID prefix of its objects.
    const PREFIX: &'static str;
    /// Whether the owner (workspace, module) with this ID is still there: the archive of a
    /// deleted one is gone with it (and a directory may still name it).
    fn owner_exists(idx: &crate::index::Inner, owner_id: &str) -> bool;
}

impl Archivable for terrace_crds::Run {
    const KIND: HistoryKind = HistoryKind::Runs;
    const PREFIX: &'static str = "run-";
    fn owner_exists(idx: &crate::index::Inner, owner_id: &str) -> bool {
        idx.workspace(owner_id).is_some()
    }
}

impl Archivable for terrace_crds::TestRun {
    const KIND: HistoryKind = HistoryKind::TestRuns;
    const PREFIX: &'static str = "trun-";
    fn owner_exists(idx: &crate::index::Inner, owner_id: &str) -> bool {
        idx.registry_modules().get(owner_id).is_some()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_error(what: &str, e: BlobError) -> ApiError {
    crate::blobs::api_error(what, e)
}

async fn read_doc<T: Default + DeserializeOwned>(
    state: &AppState,
    ns: &str,
    key: &str,
) -> Result<T, ApiError> {
    match crate::blobs::store(state, ns, None).get(key, None).await {
        Ok(b) => decode(&b).map_err(|e| ApiError::Internal {
            context: "reading the run history".into(),
            source: Box::new(crate::error::Bug(format!("{key}: {e}"))),
        }),
        Err(BlobError::NotFound(_)) => Ok(T::default()),
        Err(e) => Err(read_error("the run history", e)),
    }
}

impl History {
    /// The namespace and owner of archived object `id`, if one is archived: from the
    /// cached directories, else from every organization's directory read again.
    async fn owner_of<K: Archivable>(
        &self,
        state: &AppState,
        id: &str,
    ) -> Result<Option<(String, String)>, ApiError> {
        if !id.starts_with(K::PREFIX) {
            return Ok(None);
        }
        let shard = directory_shard(id);
        let cached = |dirs: &HashMap<(String, HistoryKind, u32), Arc<Directory>>| {
            dirs.iter()
                .filter(|((_, k, n), _)| *k == K::KIND && *n == shard)
                .find_map(|((ns, _, _), d)| d.owners.get(id).map(|o| (ns.clone(), o.clone())))
        };
        let alive = |found: Option<(String, String)>| {
            found.filter(|(_, owner)| K::owner_exists(&state.index.read(), owner))
        };
        if let Some(found) = alive(cached(&lock(&self.directories))) {
            return Ok(Some(found));
        }
        let _one = self.reloading.lock().await;
        let namespaces: Vec<String> = state
            .index
            .read()
            .organizations()
            .map(|o| o.target_namespace().to_owned())
            .collect();
        for ns in namespaces {
            let d: Directory = read_doc(state, &ns, &directory_key(K::KIND, shard)).await?;
            lock(&self.directories).insert((ns, K::KIND, shard), Arc::new(d));
        }
        let found = cached(&lock(&self.directories));
        Ok(alive(found))
    }

    /// The manifest of `owner_id`'s archive in `ns`; `archived`: how many objects its
    /// owner's status says it holds (a cached manifest of another count is read again).
    pub async fn manifest(
        &self,
        state: &AppState,
        ns: &str,
        kind: HistoryKind,
        owner_id: &str,
        archived: Option<i64>,
    ) -> Result<Arc<Manifest>, ApiError> {
        if archived.unwrap_or(0) == 0 {
            return Ok(Arc::default());
        }
        let key = (ns.to_owned(), kind, owner_id.to_owned());
        if let Some((n, m)) = lock(&self.manifests).get(&key)
            && n == archived
        {
            return Ok(m);
        }
        let m: Arc<Manifest> = Arc::new(read_doc(state, ns, &manifest_key(kind, owner_id)).await?);
        lock(&self.manifests).put(key, (archived, m.clone()));
        Ok(m)
    }

    /// Segment `seq` of `owner_id`'s archive, decoded; `count`: how many objects the
    /// manifest says it holds (the open segment grows, so a cached copy of another count
    /// is not it).
    async fn segment<K: Archivable>(
        &self,
        state: &AppState,
        ns: &str,
        owner_id: &str,
        seq: u32,
        count: usize,
    ) -> Result<Arc<Loaded<K>>, ApiError> {
        let key = format!("{ns}/{}#{count}", segment_key(K::KIND, owner_id, seq));
        if let Some(any) = lock(&self.segments).get(&key)
            && let Ok(l) = any.downcast::<Loaded<K>>()
        {
            return Ok(l);
        }
        let seg: Segment = read_doc(state, ns, &segment_key(K::KIND, owner_id, seq)).await?;
        let by_id = seg
            .items
            .into_iter()
            .filter_map(|Archived { object, logs }| {
                let id = object["metadata"]["labels"][terrace_crds::constants::LABEL_ID]
                    .as_str()?
                    .to_owned();
                let obj: K = serde_json::from_value(object).ok()?;
                Some((id, (Arc::new(obj), logs)))
            })
            .collect();
        let loaded = Arc::new(Loaded { by_id });
        lock(&self.segments).put(key, loaded.clone());
        Ok(loaded)
    }

    /// The segment holding archived object `id`, with the object's namespace and owner.
    async fn holding<K: Archivable>(
        &self,
        state: &AppState,
        id: &str,
    ) -> Result<Option<(Arc<Loaded<K>>, String, String)>, ApiError> {
        let Some((ns, owner)) = self.owner_of::<K>(state, id).await? else {
            return Ok(None);
        };
        let Some((item, count)) = self.item::<K>(state, &ns, &owner, id).await? else {
            return Ok(None);
        };
        let seg = self
            .segment::<K>(state, &ns, &owner, item.seg, count)
            .await?;
        Ok(Some((seg, ns, owner)))
    }

    /// Archived object `id` with its namespace and owner ID, if there is one.
    pub async fn find<K: Archivable>(
        &self,
        state: &AppState,
        id: &str,
    ) -> Result<Option<(Arc<K>, String, String)>, ApiError> {
        let Some((seg, ns, owner)) = self.holding::<K>(state, id).await? else {
            return Ok(None);
        };
        Ok(seg.by_id.get(id).map(|(o, _)| (o.clone(), ns, owner)))
    }

    /// The manifest entry of `id` and the object count of its segment (the manifest read
    /// again when a cached one lacks it).
    async fn item<K: Archivable>(
        &self,
        state: &AppState,
        ns: &str,
        owner: &str,
        id: &str,
    ) -> Result<Option<(ManifestItem, usize)>, ApiError> {
        let key = (ns.to_owned(), K::KIND, owner.to_owned());
        let entry = |m: &Manifest| {
            let i = m.items.iter().find(|i| i.id == id)?;
            Some((i.clone(), m.segments.get(&i.seg).copied().unwrap_or(0)))
        };
        let cached = lock(&self.manifests).get(&key);
        if let Some(found) = cached.as_ref().and_then(|(_, m)| entry(m)) {
            return Ok(Some(found));
        }
        let m: Manifest = read_doc(state, ns, &manifest_key(K::KIND, owner)).await?;
        Ok(entry(&m))
    }

    /// The objects of a page of `entries` merged from live ones and manifest `m` of
    /// `owner_id` in `ns` ([`merged`]), in order.
    pub async fn page<K: Archivable>(
        &self,
        state: &AppState,
        ns: &str,
        owner_id: &str,
        m: &Manifest,
        entries: &[Entry<'_, K>],
    ) -> Result<Vec<Arc<K>>, ApiError> {
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            match e {
                Entry::Live(o) => out.push(o.clone()),
                Entry::Archived(i) => {
                    let count = m.segments.get(&i.seg).copied().unwrap_or(0);
                    let seg = self.segment::<K>(state, ns, owner_id, i.seg, count).await?;
                    if let Some((o, _)) = seg.by_id.get(&i.id) {
                        out.push(o.clone());
                    }
                }
            }
        }
        Ok(out)
    }

    /// The log of Pod `pod` of archived object `id`, if it was packed.
    pub async fn log<K: Archivable>(
        &self,
        state: &AppState,
        id: &str,
        pod: &str,
    ) -> Result<Option<Vec<u8>>, ApiError> {
        let Some((seg, _, _)) = self.holding::<K>(state, id).await? else {
            return Ok(None);
        };
        let Some(packed) = seg.by_id.get(id).and_then(|(_, logs)| logs.get(pod)) else {
            return Ok(None);
        };
        unpack_log(packed)
            .map(Some)
            .map_err(|e| ApiError::Internal {
                context: "reading an archived log".into(),
                source: Box::new(crate::error::Bug(e)),
            })
    }
}

/// One entry of a list merging live and archived objects.
pub enum Entry<'a, K> {
    Live(Arc<K>),
    Archived(&'a ManifestItem),
}

/// `live` (with their order keys) and the archived `items` not live any more, newest
/// first.
pub fn merged<'a, K>(
    live: Vec<((String, String), Arc<K>, String)>,
    items: &'a [ManifestItem],
    keep: impl Fn(&ManifestItem) -> bool,
) -> Vec<Entry<'a, K>> {
    let live_ids: std::collections::HashSet<String> =
        live.iter().map(|(_, _, id)| id.clone()).collect();
    let mut all: Vec<(&(String, String), Entry<'a, K>)> =
        Vec::with_capacity(live.len() + items.len());
    let live: Vec<((String, String), Arc<K>)> = live.into_iter().map(|(o, k, _)| (o, k)).collect();
    for i in items
        .iter()
        .filter(|i| !live_ids.contains(&i.id) && keep(i))
    {
        all.push((&i.order, Entry::Archived(i)));
    }
    let mut out: Vec<((String, String), Entry<'a, K>)> = all
        .into_iter()
        .map(|(o, e)| (o.clone(), e))
        .chain(live.into_iter().map(|(o, k)| (o, Entry::Live(k))))
        .collect();
    out.sort_by(|a, b| b.0.cmp(&a.0));
    out.into_iter().map(|(_, e)| e).collect()
}
