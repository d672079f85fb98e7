//! Bounded run and test-run history (docs/runs.md, "History"): the operator keeps the
//! newest runs of each workspace and the newest test runs of each module as custom
//! resources (the organization's `settings.history`, 100 of each by default) and archives
//! older, final ones into the blob store of the organization's namespace; the API server
//! still lists and shows them, with their logs.
//!
//! The archive of one workspace's runs (or one module's test runs), under
//! [`owner_prefix`]:
//! - segments ([`segment_key`]): JSON documents of up to [`SEGMENT_MAX`] archived objects
//!   ([`Archived`]: the object as it was, its logs packed);
//! - the manifest ([`manifest_key`]): every archived object's ID, list order key and
//!   segment ([`Manifest`]), written after the segments;
//! - the directory of the namespace ([`directory_key`], in [`DIRECTORY_SHARDS`] shards by
//!   ID): archived ID → owner ID, so an object is found by its ID alone.
//!
//! All are stored gzip-compressed ([`encode`], [`decode`]). The rules here are pure:
//! which objects a pass archives ([`to_archive`]) and what the documents hold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Runs (or test runs) kept as custom resources per workspace (module) by default.
pub const DEFAULT_KEEP: i32 = 100;
/// Objects per archive segment.
pub const SEGMENT_MAX: usize = 200;

/// What is archived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistoryKind {
    /// Runs of a workspace.
    Runs,
    /// Test runs of a registry module.
    TestRuns,
}

impl HistoryKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            HistoryKind::Runs => "runs",
            HistoryKind::TestRuns => "test-runs",
        }
    }
}

/// Where the archive of owner `owner_id` (a workspace's or module's ID) lives.
pub fn owner_prefix(kind: HistoryKind, owner_id: &str) -> String {
    format!("history/{}/{owner_id}", kind.as_str())
}

/// The manifest of an owner's archive.
pub fn manifest_key(kind: HistoryKind, owner_id: &str) -> String {
    format!("{}/manifest.json", owner_prefix(kind, owner_id))
}

/// Segment `seq` of an owner's archive.
pub fn segment_key(kind: HistoryKind, owner_id: &str, seq: u32) -> String {
    format!("{}/{seq:06}.json", owner_prefix(kind, owner_id))
}

/// Shards of a namespace's directory: a pass rewrites only the shards of the objects it
/// archives, and a lookup reads only the shard of its ID.
pub const DIRECTORY_SHARDS: u32 = 32;

/// The directory shard of archived object `id`.
pub fn directory_shard(id: &str) -> u32 {
    id.bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % DIRECTORY_SHARDS
}

/// Shard `shard` of the directory of a namespace's archived objects of `kind`.
pub fn directory_key(kind: HistoryKind, shard: u32) -> String {
    format!("history/{}/directory/{shard:02}.json", kind.as_str())
}

/// One archived object in a manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestItem {
    /// Its API ID.
    pub id: String,
    /// Its list order key (newest first = greatest first): for runs when they became
    /// queueable, then the object name, as the live list sorts them.
    pub order: (String, String),
    /// The segment holding it.
    pub seg: u32,
    /// Its status when archived (lists filter on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Its source (test runs: lists filter on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The manifest of an owner's archive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Every archived object, in no particular order.
    #[serde(default)]
    pub items: Vec<ManifestItem>,
    /// Objects per segment, by segment number.
    #[serde(default)]
    pub segments: BTreeMap<u32, usize>,
}

impl Manifest {
    /// The segment new objects go into: the last one while it has room, else a new one.
    pub fn open_segment(&self) -> (u32, bool) {
        match self.segments.iter().next_back() {
            Some((seq, n)) if *n < SEGMENT_MAX => (*seq, false),
            Some((seq, _)) => (seq + 1, true),
            None => (0, true),
        }
    }
}

/// One archived object: the custom resource as it was (its metadata trimmed to what the
/// API reads), and the logs of its Pods (Pod name → the log's text, gzip-compressed,
/// base64).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Archived {
    pub object: serde_json::Value,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub logs: BTreeMap<String, String>,
}

/// A segment: archived objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    #[serde(default)]
    pub items: Vec<Archived>,
}

/// The directory of a namespace's archived objects of one kind: ID → owner ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Directory {
    #[serde(default)]
    pub owners: BTreeMap<String, String>,
}

/// `value` as stored: JSON, gzip-compressed.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    use std::io::Write;
    let json = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&json)
        .and_then(|()| enc.finish())
        .map_err(|e| e.to_string())
}

/// A stored document read back.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    use std::io::Read;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut json)
        .map_err(|e| format!("not gzip: {e}"))?;
    serde_json::from_slice(&json).map_err(|e| e.to_string())
}

/// A log's text packed for an [`Archived`] document.
pub fn pack_log(text: &[u8]) -> Result<String, String> {
    use base64::Engine as _;
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text).map_err(|e| e.to_string())?;
    let gz = enc.finish().map_err(|e| e.to_string())?;
    Ok(base64::engine::general_purpose::STANDARD.encode(gz))
}

/// A packed log's text.
pub fn unpack_log(packed: &str) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    use std::io::Read;
    let gz = base64::engine::general_purpose::STANDARD
        .decode(packed)
        .map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    Ok(text)
}

/// One live object as a pass sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// List order key (greatest = newest).
    pub order: (String, String),
    /// In a final state.
    pub is_final: bool,
    /// Never archived whatever its age: the run holding the workspace's lock, the run
    /// that wrote the current state.
    pub protected: bool,
}

/// How many objects beyond `keep` may gather before a pass archives them: a tenth of
/// `keep`, so a pass archives a batch rather than one object per new run.
pub fn slack(keep: usize) -> usize {
    keep / 10
}

/// Which of `live` a pass archives (their indexes, oldest first): none while there are
/// at most `keep` + [`slack`]; else every final, unprotected object older than the
/// newest `keep`.
pub fn to_archive(live: &[Live], keep: usize) -> Vec<usize> {
    if live.len() <= keep + slack(keep) {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..live.len()).collect();
    order.sort_by(|a, b| live[*b].order.cmp(&live[*a].order));
    let mut out: Vec<usize> = order
        .into_iter()
        .skip(keep)
        .filter(|i| live[*i].is_final && !live[*i].protected)
        .collect();
    out.reverse();
    out
}

/// Whether an archived object whose order key starts with `at` (RFC 3339) is past a data
/// retention policy of `days` days at `now`.
pub fn past_retention(at: &str, days: i64, now: jiff::Timestamp) -> bool {
    at.parse::<jiff::Timestamp>()
        .is_ok_and(|t| now.duration_since(t).as_secs() > days.saturating_mul(86_400))
}

/// The archived objects a data retention policy of `days` days removes at `now`: their
/// IDs, by segment. The manifest's items are ordered by when they were queued (runs) or
/// created (test runs), the first part of their order key.
pub fn expired(manifest: &Manifest, days: i64, now: jiff::Timestamp) -> BTreeMap<u32, Vec<String>> {
    let mut out: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for i in manifest
        .items
        .iter()
        .filter(|i| past_retention(&i.order.0, days, now))
    {
        out.entry(i.seg).or_default().push(i.id.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(at: &str, is_final: bool, protected: bool) -> Live {
        Live {
            order: (at.to_owned(), "r".to_owned()),
            is_final,
            protected,
        }
    }

    /// The newest `keep` stay; older final, unprotected ones go, oldest first, once more
    /// than `keep` + a tenth gathered.
    #[test]
    fn what_a_pass_archives() {
        let l = vec![
            live("2026-01-05", true, false),
            live("2026-01-01", true, false),
            live("2026-01-03", false, false),
            live("2026-01-02", true, true),
            live("2026-01-04", true, false),
        ];
        assert_eq!(to_archive(&l, 5), Vec::<usize>::new());
        // keep 2: 01-05 and 01-04 stay; 01-03 is not final, 01-02 protected.
        assert_eq!(to_archive(&l, 2), vec![1]);
        assert_eq!(to_archive(&l, 1), vec![1, 4]);
        // 100 kept: nothing until 111.
        let many: Vec<Live> = (0..110)
            .map(|i| {
                live(
                    &format!("2026-01-01T00:{:02}:{:02}Z", i / 60, i % 60),
                    true,
                    false,
                )
            })
            .collect();
        assert!(to_archive(&many, 100).is_empty());
        let mut more = many.clone();
        more.push(live("2026-01-02", true, false));
        assert_eq!(to_archive(&more, 100).len(), 11);
        assert_eq!(to_archive(&more, 100)[0], 0, "oldest first");
    }

    #[test]
    fn documents_round_trip() {
        let mut m = Manifest::default();
        assert_eq!(m.open_segment(), (0, true));
        m.segments.insert(0, SEGMENT_MAX - 1);
        assert_eq!(m.open_segment(), (0, false));
        m.segments.insert(0, SEGMENT_MAX);
        assert_eq!(m.open_segment(), (1, true));
        m.items.push(ManifestItem {
            id: "run-a".into(),
            order: ("t".into(), "n".into()),
            seg: 0,
            ..ManifestItem::default()
        });
        let back: Manifest = decode(&encode(&m).unwrap_or_default()).unwrap_or_default();
        assert_eq!(back, m);
        let packed = pack_log(b"hello\n").unwrap_or_default();
        assert_eq!(unpack_log(&packed).unwrap_or_default(), b"hello\n");
        assert_eq!(
            manifest_key(HistoryKind::Runs, "ws-1"),
            "history/runs/ws-1/manifest.json"
        );
        assert_eq!(
            segment_key(HistoryKind::TestRuns, "mod-1", 3),
            "history/test-runs/mod-1/000003.json"
        );
        let now: jiff::Timestamp = "2026-02-01T00:00:00Z".parse().unwrap_or_default();
        assert!(past_retention("2026-01-01T00:00:00Z", 30, now));
        assert!(!past_retention("2026-01-15T00:00:00Z", 30, now));
        let item = |id: &str, at: &str, seg| ManifestItem {
            id: id.into(),
            order: (at.into(), id.into()),
            seg,
            ..ManifestItem::default()
        };
        let m = Manifest {
            items: vec![
                item("run-old", "2025-12-01T00:00:00Z", 0),
                item("run-new", "2026-01-30T00:00:00Z", 1),
                item("run-older", "2025-11-01T00:00:00Z", 0),
            ],
            segments: BTreeMap::from([(0, 2), (1, 1)]),
        };
        let gone = expired(&m, 30, now);
        assert_eq!(
            gone,
            BTreeMap::from([(0, vec!["run-old".to_owned(), "run-older".to_owned()])])
        );
    }
}
