//! The rules of workspace state (DESIGN.md §3 "State and runs", issue: state versions),
//! beside the lock state machine they go with:
//!
//! - only the holder of the workspace's lock may write a state version;
//! - a new version's serial is greater than the current one's and its lineage the same,
//!   unless the write is forced;
//! - the bytes must be what the client said (MD5) and a state file (JSON, format version
//!   4, whose serial and lineage are the version's);
//! - a state has a size limit.
//!
//! [`summarize`] reads what the API shows of a state without keeping it: resources (names,
//! types, counts), outputs (names, sensitivity, types) and the engine version. Values
//! stay in the state, which only the blob store holds.

use serde_json::Value;

use crate::common::DataRetentionPolicy;
use crate::lock::LockHolder;

/// The life of a state version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateVersionState {
    /// Created; its bytes have not arrived yet.
    Pending,
    /// Its bytes are stored: it can be the current state.
    Finalized,
    /// Given up (never finalized).
    Discarded,
    /// Its bytes are hidden (downloads answer 404) and kept for a grace period, during
    /// which they can be restored: by the data retention policy or on request.
    BackingDataSoftDeleted,
    /// Its bytes are gone for good.
    BackingDataPermanentlyDeleted,
}

impl StateVersionState {
    pub const ALL: [StateVersionState; 5] = [
        StateVersionState::Pending,
        StateVersionState::Finalized,
        StateVersionState::Discarded,
        StateVersionState::BackingDataSoftDeleted,
        StateVersionState::BackingDataPermanentlyDeleted,
    ];

    /// TFE's word for it.
    pub const fn as_str(self) -> &'static str {
        match self {
            StateVersionState::Pending => "pending",
            StateVersionState::Finalized => "finalized",
            StateVersionState::Discarded => "discarded",
            StateVersionState::BackingDataSoftDeleted => "backing_data_soft_deleted",
            StateVersionState::BackingDataPermanentlyDeleted => "backing_data_permanently_deleted",
        }
    }

    /// The state of a status string (absent: pending).
    pub fn parse(s: Option<&str>) -> Option<StateVersionState> {
        match s {
            None => Some(StateVersionState::Pending),
            Some(s) => StateVersionState::ALL.into_iter().find(|v| v.as_str() == s),
        }
    }
}

/// Why a state version cannot be written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// 409: the workspace is not locked by the writer.
    #[error("{0}")]
    NotLockHolder(String),
    /// 409: the serial does not follow the current one.
    #[error("serial {given} must be greater than the current state's serial {current}")]
    SerialNotGreater { given: i64, current: i64 },
    /// 409: the current serial again, with another state.
    #[error(
        "The MD5 hash of the state provided does not match what is currently known for the same serial number ({serial}): give the state a greater serial"
    )]
    SameSerialOtherState { serial: i64 },
    /// 409: another lineage.
    #[error(
        "lineage {given:?} does not match the current state's lineage {current:?} (force the write to replace the state)"
    )]
    LineageMismatch { given: String, current: String },
    /// 422: the bytes are not the ones described.
    #[error("md5 {given:?} does not match the uploaded state (md5 {actual:?})")]
    Md5Mismatch { given: String, actual: String },
    /// 422: not a state file.
    #[error("the state is not a valid state file: {0}")]
    Invalid(String),
    /// 413.
    #[error("the state is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    /// 409: a backing data action the version's state does not allow.
    #[error("{0}")]
    Transition(String),
}

impl StateError {
    /// The HTTP status the API answers with.
    pub fn status(&self) -> u16 {
        match self {
            StateError::NotLockHolder(_)
            | StateError::SerialNotGreater { .. }
            | StateError::SameSerialOtherState { .. }
            | StateError::LineageMismatch { .. }
            | StateError::Transition(_) => 409,
            StateError::Md5Mismatch { .. } | StateError::Invalid(_) => 422,
            StateError::TooLarge { .. } => 413,
        }
    }
}

/// Only the holder of the workspace's lock writes its state.
pub fn check_lock(holder: Option<&LockHolder>, writer: &LockHolder) -> Result<(), StateError> {
    match holder {
        Some(h) if h == writer => Ok(()),
        Some(h) => Err(StateError::NotLockHolder(format!(
            "the workspace is locked by {h}: only the lock holder may write its state"
        ))),
        None => Err(StateError::NotLockHolder(
            "the workspace is not locked: lock it before writing its state".into(),
        )),
    }
}

/// The serial, lineage and MD5 of a workspace's current state version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Current<'a> {
    pub serial: i64,
    pub lineage: &'a str,
    pub md5: &'a str,
}

/// A new version's serial follows the current one and its lineage is the same, unless
/// `force` (the first version of a workspace can be anything). As in TFE, writing the
/// current serial again is accepted when it is the same state (same MD5: a client
/// retrying), refused otherwise; a lineage is only compared when both sides have one.
pub fn check_succession(
    current: Option<Current<'_>>,
    serial: i64,
    lineage: &str,
    md5: &str,
    force: bool,
) -> Result<(), StateError> {
    let Some(cur) = current.filter(|_| !force) else {
        return Ok(());
    };
    if !cur.lineage.is_empty() && !lineage.is_empty() && cur.lineage != lineage {
        return Err(StateError::LineageMismatch {
            given: lineage.to_owned(),
            current: cur.lineage.to_owned(),
        });
    }
    if serial == cur.serial && !md5.is_empty() && md5.eq_ignore_ascii_case(cur.md5) {
        return Ok(());
    }
    if serial == cur.serial {
        return Err(StateError::SameSerialOtherState { serial });
    }
    if serial < cur.serial {
        return Err(StateError::SerialNotGreater {
            given: serial,
            current: cur.serial,
        });
    }
    Ok(())
}

/// The longest lineage a state version may name (terraform writes a UUID, 36 characters).
pub const MAX_LINEAGE_LEN: usize = 128;

/// The attributes of a state version create that need no I/O to check: `md5` is 32 hex
/// digits, `serial` is not negative and the lineage is at most [`MAX_LINEAGE_LEN`]
/// characters of printable ASCII. Answers the attribute at fault and why.
pub fn check_create(serial: i64, md5: &str, lineage: &str) -> Result<(), (&'static str, String)> {
    if md5.len() != 32 || !md5.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(("md5", "md5 must be 32 hexadecimal digits".to_owned()));
    }
    if serial < 0 {
        return Err(("serial", "serial must not be negative".to_owned()));
    }
    if lineage.len() > MAX_LINEAGE_LEN {
        return Err((
            "lineage",
            format!("lineage must be at most {MAX_LINEAGE_LEN} characters"),
        ));
    }
    if !lineage.bytes().all(|b| b.is_ascii_graphic()) {
        return Err((
            "lineage",
            "lineage must be printable characters without spaces".to_owned(),
        ));
    }
    Ok(())
}

/// The last state version that became a workspace's current one, as the workspace's
/// `terrace.dev/state-head` annotation records it. A version becomes current by writing
/// this record under the workspace's resourceVersion after [`check_commit`] passed
/// against the previous record, so versions become current one at a time, each checked
/// against the one before it; `seq` counts them and orders the finalized versions (the
/// current one is the finalized version with the greatest `seq`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateHead {
    /// The version's ID (`sv-…`).
    pub id: String,
    pub serial: i64,
    #[serde(default)]
    pub lineage: String,
    pub md5: String,
    /// How many versions became current before this one, plus one.
    pub seq: i64,
    /// When it was written (RFC 3339): a record whose version never finalized is given up
    /// after [`HEAD_GRACE`].
    pub at: String,
}

/// How long a state head may name a version that has not finalized yet (its writer
/// finalizes it right after writing the head) before later writers give it up.
pub const HEAD_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

impl StateHead {
    /// The record of a workspace's annotation value (None when absent or unreadable).
    pub fn parse(annotation: Option<&str>) -> Option<StateHead> {
        serde_json::from_str(annotation?).ok()
    }

    /// The annotation value.
    pub fn annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// As the succession rule sees it.
    pub fn current(&self) -> Current<'_> {
        Current {
            serial: self.serial,
            lineage: &self.lineage,
            md5: &self.md5,
        }
    }

    /// Whether its version may still finalize at `now` (written less than [`HEAD_GRACE`]
    /// ago; an unreadable time counts as old).
    pub fn young(&self, now: jiff::Timestamp) -> bool {
        let grace = jiff::SignedDuration::from_secs(HEAD_GRACE.as_secs() as i64);
        self.at
            .parse::<jiff::Timestamp>()
            .ok()
            .and_then(|at| at.checked_add(grace).ok())
            .is_some_and(|until| now < until)
    }
}

/// A version about to become current, as [`check_commit`] sees it.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub serial: i64,
    pub lineage: &'a str,
    pub md5: &'a str,
    pub force: bool,
    /// Who wrote it.
    pub writer: &'a LockHolder,
    /// When it was created (whole seconds).
    pub created: jiff::Timestamp,
    /// Whether the writer must hold the lock now. A run's apply need not: the state it
    /// produced is kept whatever happened to the lock meanwhile.
    pub needs_lock: bool,
}

/// Whether a version whose bytes arrived may become current, checked again at that moment
/// (its create was checked against an earlier current state and lock): the writer still
/// holds the lock it created the version under (`lock`, taken at `locked_at`), and the
/// version succeeds `base`, the version current now. Never lets the current serial go
/// down or other contents finalize at the current serial, unless forced. The current
/// state again (same serial, lineage and MD5: a client retrying, or go-tfe's create
/// with the state inline) succeeds it, as in HCP Terraform: the repeat is finalized and
/// becomes current, a newer copy of the same state.
pub fn check_commit(
    lock: Option<&LockHolder>,
    locked_at: Option<jiff::Timestamp>,
    base: Option<Current<'_>>,
    c: &Candidate<'_>,
) -> Result<(), StateError> {
    if c.needs_lock {
        check_lock(lock, c.writer)?;
        let since = locked_at.map(|t| t.as_second()).unwrap_or(i64::MIN);
        if c.created.as_second() < since {
            return Err(StateError::NotLockHolder(
                "the workspace was unlocked and locked again after this state version was created: its lock is lost; create a new state version".into(),
            ));
        }
    }
    check_succession(base, c.serial, c.lineage, c.md5, c.force)
}

/// A state version as the unlock rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrittenVersion {
    /// Creation time (whole seconds, as Kubernetes keeps it).
    pub created: jiff::Timestamp,
    pub serial: i64,
    pub state: StateVersionState,
    /// It can no longer finalize (its upload URLs expired, or it was superseded).
    pub abandoned: bool,
}

/// Whether the latest state version written under the current lock (created at or after
/// `locked_at`, compared in whole seconds) is still pending: SPEC B8's unlock 503, so the
/// lock is not given up before the state it protects is stored. An abandoned version does
/// not hold the unlock back (force-unlock never waits).
pub fn latest_pending_since(
    locked_at: Option<jiff::Timestamp>,
    versions: impl IntoIterator<Item = WrittenVersion>,
) -> bool {
    let Some(locked_at) = locked_at else {
        return false;
    };
    let since = jiff::Timestamp::from_second(locked_at.as_second()).unwrap_or(locked_at);
    versions
        .into_iter()
        .filter(|v| v.created >= since)
        .max_by_key(|v| (v.created, v.serial))
        .is_some_and(|v| v.state == StateVersionState::Pending && !v.abandoned)
}

/// What the data retention policy decides for the data of a state version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    /// Kept, with nothing to look at again by time (no policy, or a policy that keeps
    /// everything, or the workspace's current state, or no data).
    Keep,
    /// Kept as it is until then.
    KeepUntil(jiff::Timestamp),
    /// Its data is hidden now (soft delete), restorable during the grace period.
    SoftDelete,
    /// Its data goes for good (a soft delete older than the grace period).
    PermanentlyDelete,
}

/// The policy in force for a workspace: its own, else its organization's default.
pub fn effective_policy<'a>(
    workspace: Option<&'a DataRetentionPolicy>,
    organization: Option<&'a DataRetentionPolicy>,
) -> Option<&'a DataRetentionPolicy> {
    workspace.or(organization)
}

/// When a version's data changed state, for [`retention`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Times {
    /// When the data arrived.
    pub written: Option<jiff::Timestamp>,
    /// When it was soft-deleted.
    pub soft_deleted: Option<jiff::Timestamp>,
}

fn plus(t: jiff::Timestamp, d: jiff::SignedDuration) -> jiff::Timestamp {
    t.checked_add(d).unwrap_or(jiff::Timestamp::MAX)
}

/// SPEC B20–B22 applied to state: the data of a finalized version older than
/// `delete-older-than-n-days` is soft-deleted, unless it is the workspace's current state
/// (never) or the policy says `dont-delete`; soft-deleted data (by the policy or on
/// request) goes for good once `grace` has passed since.
pub fn retention(
    policy: Option<&DataRetentionPolicy>,
    state: StateVersionState,
    times: Times,
    current: bool,
    grace: jiff::SignedDuration,
    now: jiff::Timestamp,
) -> Retention {
    if state == StateVersionState::BackingDataSoftDeleted {
        let Some(at) = times.soft_deleted else {
            return Retention::Keep;
        };
        let due = plus(at, grace);
        return if now >= due {
            Retention::PermanentlyDelete
        } else {
            Retention::KeepUntil(due)
        };
    }
    let days = match policy {
        Some(p) if p.dont_delete != Some(true) => p.delete_older_than_n_days,
        _ => None,
    };
    let (Some(days), Some(written)) = (days.filter(|d| *d >= 1), times.written) else {
        return Retention::Keep;
    };
    if state != StateVersionState::Finalized || current {
        return Retention::Keep;
    }
    let due = plus(
        written,
        jiff::SignedDuration::from_hours(i64::from(days) * 24),
    );
    if now >= due {
        Retention::SoftDelete
    } else {
        Retention::KeepUntil(due)
    }
}

/// What can be done to a version's data on request (TFE's backing data actions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackingDataAction {
    SoftDelete,
    Restore,
    PermanentlyDelete,
}

/// The state a backing data action leads to: soft delete of finalized data (not the
/// workspace's current state), restore of soft-deleted data, permanent deletion of
/// either. Anything else: 409 "transition not allowed".
pub fn backing_data_transition(
    state: StateVersionState,
    action: BackingDataAction,
    current: bool,
) -> Result<StateVersionState, StateError> {
    use StateVersionState::*;
    match (state, action) {
        (Finalized, BackingDataAction::SoftDelete | BackingDataAction::PermanentlyDelete)
            if current =>
        {
            Err(StateError::Transition(
                "the current state version's data cannot be deleted".into(),
            ))
        }
        (Finalized, BackingDataAction::SoftDelete) => Ok(BackingDataSoftDeleted),
        (BackingDataSoftDeleted, BackingDataAction::Restore) => Ok(Finalized),
        (Finalized | BackingDataSoftDeleted, BackingDataAction::PermanentlyDelete) => {
            Ok(BackingDataPermanentlyDeleted)
        }
        (from, _) => Err(StateError::Transition(format!(
            "transition not allowed from {}",
            from.as_str()
        ))),
    }
}

/// The merge patch of `status` that records a version's data reaching `to` at `at`: the
/// soft delete's time, the permanent deletion's time, or (restored) no soft delete.
pub fn backing_data_marks(to: StateVersionState, at: &jiff::Timestamp) -> Value {
    let at = crate::common::timestamp(at);
    match to {
        StateVersionState::BackingDataSoftDeleted => {
            serde_json::json!({"status": to.as_str(), "backingDataDeletedAt": at})
        }
        StateVersionState::BackingDataPermanentlyDeleted => {
            serde_json::json!({"status": to.as_str(), "backingDataPermanentlyDeletedAt": at})
        }
        _ => serde_json::json!({"status": to.as_str(), "backingDataDeletedAt": null}),
    }
}

/// Hex MD5 of `bytes`.
pub fn md5_hex(bytes: &[u8]) -> String {
    let mut h = Md5Hasher::default();
    h.update(bytes);
    h.finish()
}

/// The MD5 of a state computed piece by piece, as its upload streams by.
#[derive(Clone, Default)]
pub struct Md5Hasher(md5::Md5);

impl Md5Hasher {
    pub fn update(&mut self, piece: &[u8]) {
        use md5::Digest;
        self.0.update(piece);
    }
    /// The hex digest.
    pub fn finish(self) -> String {
        use md5::Digest;
        self.0
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The bytes are what the client said: their MD5 `actual` is the `given` one (when
/// one was given).
pub fn check_md5(given: Option<&str>, actual: &str) -> Result<(), StateError> {
    match given.filter(|m| !m.is_empty()) {
        Some(given) if !given.eq_ignore_ascii_case(actual) => Err(StateError::Md5Mismatch {
            given: given.to_owned(),
            actual: actual.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// The verdict on a state that streamed by (as [`check_state`] on the whole bytes):
/// its size within `limit`, then its MD5, then `summary` (what [`summarize_reader`]
/// read of it).
pub fn check_streamed(
    size: u64,
    limit: u64,
    md5: Option<&str>,
    actual_md5: &str,
    summary: Result<StateSummary, StateError>,
) -> Result<StateSummary, StateError> {
    check_size(size, limit)?;
    check_md5(md5, actual_md5)?;
    summary
}

/// The size limit.
pub fn check_size(size: u64, limit: u64) -> Result<(), StateError> {
    if size > limit {
        Err(StateError::TooLarge { size, limit })
    } else {
        Ok(())
    }
}

/// What the API shows of a state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateSummary {
    pub serial: i64,
    pub lineage: String,
    pub terraform_version: Option<String>,
    /// Managed resource instances.
    pub resource_count: i64,
    pub resources: Vec<crate::resources::ResourceSummary>,
    pub outputs: Vec<crate::resources::OutputSummary>,
    pub providers: Vec<String>,
}

/// Checks that `bytes` are a state file (format version 4) with `md5` (when given);
/// answers its summary. The file's own serial and lineage are not compared with the
/// version's: TFE does not, and clients (go-tfe) rely on it; the version's serial and
/// lineage are what the succession rules apply to.
pub fn check_state(bytes: &[u8], md5: Option<&str>) -> Result<StateSummary, StateError> {
    if md5.is_some_and(|m| !m.is_empty()) {
        check_md5(md5, &md5_hex(bytes))?;
    }
    summarize(bytes)
}

/// One managed resource instance of a state, as TFE's workspace resources list shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInstance {
    /// `[module.]type.name[index]`, the module by its name without `module.` prefixes
    /// (TFE's form: `media_bucket.aws_s3_bucket.this[0]`).
    pub address: String,
    pub name: String,
    /// Module path without `module.` prefixes (`a.b`), `root` for the root module.
    pub module: String,
    /// Provider source without its registry host (`hashicorp/aws`).
    pub provider: String,
    /// Resource type (`aws_s3_bucket`).
    pub provider_type: String,
    /// The instance key (`0`, `"blue"` as `blue`), None for a single instance.
    pub name_index: Option<String>,
}

#[derive(serde::Deserialize)]
struct InstancesFile {
    #[serde(default)]
    resources: Option<Vec<StateResource<InstanceKey>>>,
}

/// One entry of a state file's `resources`, as [`resource_instances`] and [`summarize`]
/// read it: its instances as `I` (their keys, or only how many there are).
#[derive(serde::Deserialize)]
struct StateResource<I> {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default, rename = "type")]
    type_: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    module: Option<String>,
    #[serde(default)]
    instances: Option<Vec<I>>,
}

#[derive(Default, serde::Deserialize)]
struct InstanceKey {
    #[serde(default)]
    index_key: Option<Value>,
}

/// `module.a.module.b` → `a.b`; empty → `root`.
fn module_name(module: &str) -> String {
    if module.is_empty() {
        return "root".into();
    }
    module
        .split('.')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|pair| pair.last().copied().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(".")
}

/// `provider["registry.terraform.io/hashicorp/aws"]` (or with an alias) → `hashicorp/aws`.
fn provider_source(provider: &str) -> String {
    let inner = provider
        .split_once("[\"")
        .and_then(|(_, rest)| rest.split_once("\"]"))
        .map_or(provider, |(source, _)| source);
    let parts: Vec<&str> = inner.split('/').collect();
    match parts.len() {
        n if n >= 2 => parts[n - 2..].join("/"),
        _ => inner.to_owned(),
    }
}

/// The managed resource instances of a state file, in file order.
pub fn resource_instances(bytes: &[u8]) -> Result<Vec<ResourceInstance>, StateError> {
    let file: InstancesFile = serde_json::from_slice(bytes)
        .map_err(|e| StateError::Invalid(format!("not a state file: {e}")))?;
    let mut out = Vec::new();
    for r in file.resources.unwrap_or_default() {
        if r.mode.as_deref() != Some("managed") {
            continue;
        }
        let (name, type_) = (r.name.unwrap_or_default(), r.type_.unwrap_or_default());
        let module = module_name(r.module.as_deref().unwrap_or_default());
        let provider = provider_source(r.provider.as_deref().unwrap_or_default());
        for i in r.instances.unwrap_or_default() {
            let keyed_by_string = matches!(i.index_key, Some(Value::String(_)));
            let name_index = match i.index_key {
                None | Some(Value::Null) => None,
                Some(Value::String(k)) => Some(k),
                Some(other) => Some(other.to_string()),
            };
            let prefix = if module == "root" {
                String::new()
            } else {
                format!("{module}.")
            };
            let suffix = match &name_index {
                None => String::new(),
                Some(k) if keyed_by_string => format!("[\"{k}\"]"),
                Some(k) => format!("[{k}]"),
            };
            out.push(ResourceInstance {
                address: format!("{prefix}{type_}.{name}{suffix}"),
                name: name.clone(),
                module: module.clone(),
                provider: provider.clone(),
                provider_type: type_.clone(),
                name_index,
            });
        }
    }
    Ok(out)
}

/// What [`summarize`] reads of a state file; everything else (resource attributes, which
/// are most of a state) is skipped without being built.
#[derive(serde::Deserialize)]
struct StateFile {
    version: Option<i64>,
    serial: Option<i64>,
    #[serde(default)]
    lineage: Option<String>,
    #[serde(default)]
    terraform_version: Option<String>,
    #[serde(default)]
    outputs: Option<std::collections::BTreeMap<String, OutputEntry>>,
    #[serde(default)]
    resources: Option<Vec<StateResource<serde::de::IgnoredAny>>>,
}

#[derive(serde::Deserialize)]
struct OutputEntry {
    #[serde(default)]
    sensitive: Option<bool>,
    #[serde(default, rename = "type")]
    type_: Option<Value>,
    #[serde(default, rename = "value")]
    _value: serde::de::IgnoredAny,
}

/// The summary of a state file (format version 4).
pub fn summarize(bytes: &[u8]) -> Result<StateSummary, StateError> {
    summary_of(serde_json::from_slice(bytes))
}

/// Buffer of the readers the streamed checks parse from.
const READ_BUFFER: usize = 64 * 1024;

/// The summary of the state file `reader` gives, read to its end as it comes (only
/// the summary is kept: the state itself is never whole in memory). Not generic, so
/// the parser is compiled (and optimized) here, as [`summarize`]'s.
pub fn summarize_reader(reader: &mut dyn std::io::Read) -> Result<StateSummary, StateError> {
    summary_of(serde_json::from_reader(std::io::BufReader::with_capacity(
        READ_BUFFER,
        reader,
    )))
}

/// Whether `reader` gives one JSON document (the JSON form of a state), read to its end
/// as it comes; the parser's message when not.
pub fn check_json(reader: &mut dyn std::io::Read) -> Result<(), String> {
    serde_json::from_reader::<_, serde::de::IgnoredAny>(std::io::BufReader::with_capacity(
        READ_BUFFER,
        reader,
    ))
    .map(|_| ())
    .map_err(|e| e.to_string())
}

fn summary_of(file: Result<StateFile, serde_json::Error>) -> Result<StateSummary, StateError> {
    let file = file.map_err(|e| {
        StateError::Invalid(if e.is_data() {
            format!("not a state file: {e}")
        } else {
            format!("not JSON: {e}")
        })
    })?;
    match file.version {
        Some(4) => {}
        Some(n) => {
            return Err(StateError::Invalid(format!(
                "format version {n} is not supported (4 is)"
            )));
        }
        None => return Err(StateError::Invalid("no format version".into())),
    }
    let serial = file
        .serial
        .ok_or_else(|| StateError::Invalid("no serial".into()))?;
    let mut out = StateSummary {
        serial,
        lineage: file.lineage.unwrap_or_default(),
        terraform_version: file.terraform_version,
        ..Default::default()
    };
    for r in file.resources.unwrap_or_default() {
        let count = r
            .instances
            .as_ref()
            .map_or(0, |i| i64::try_from(i.len()).unwrap_or(i64::MAX));
        let provider = r.provider.unwrap_or_default();
        if !provider.is_empty() && !out.providers.contains(&provider) {
            out.providers.push(provider.clone());
        }
        if r.mode.as_deref() != Some("managed") {
            continue;
        }
        out.resource_count += count;
        out.resources.push(crate::resources::ResourceSummary {
            name: r.name.unwrap_or_default(),
            type_: r.type_.unwrap_or_default(),
            count,
            module: r
                .module
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "root".to_owned()),
            provider,
        });
    }
    for (name, o) in file.outputs.unwrap_or_default() {
        out.outputs.push(crate::resources::OutputSummary {
            id: crate::ids::new_id(crate::ids::IdKind::StateVersionOutput),
            name,
            sensitive: o.sensitive.unwrap_or(false),
            type_json: o.type_.map(|t| t.to_string()),
        });
    }
    Ok(out)
}

/// The value of output `name` of a state file (None when absent or not a state).
pub fn output_value(bytes: &[u8], name: &str) -> Option<Value> {
    let v: Value = serde_json::from_slice(bytes).ok()?;
    v.get("outputs")?.get(name)?.get("value").cloned()
}

/// Every output of a state file: name, value.
pub fn output_values(bytes: &[u8]) -> Vec<(String, Value)> {
    let Ok(v) = serde_json::from_slice::<Value>(bytes) else {
        return Vec::new();
    };
    v.get("outputs")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, o)| (k.clone(), o.get("value").cloned().unwrap_or(Value::Null)))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
