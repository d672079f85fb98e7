//! Persistence on disk: the data directory's snapshot and append-only log (written in
//! group-commit batches, compacted on open), owner-only files and directories, and the
//! admin token and signing key kept there.

use super::*;

/// The files of a data directory: the snapshot and the log hold every object (Secrets
/// included), so they, like the directory, are readable by their owner only.
#[derive(Clone)]
pub struct Files {
    pub dir: PathBuf,
    /// The log, open for appending once the first batch is written.
    log_file: Arc<std::sync::Mutex<Option<std::fs::File>>>,
}

impl Files {
    pub fn new(dir: PathBuf) -> Files {
        Files {
            dir,
            log_file: Arc::default(),
        }
    }
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
    /// a fresh snapshot. Creates the directory (mode 0700) when missing and takes group
    /// and other access away from one made by an earlier version.
    pub fn load(&self, st: &mut State) -> std::io::Result<()> {
        create_private_dir(&self.dir)?;
        let mut objects: HashMap<ResKey, BTreeMap<ObjKey, Obj>> = HashMap::new();
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
                    let obj = Obj::new(o, &mut st.resource_mut(&res).packer);
                    objects.entry(res).or_default().insert(obj_key(o), obj);
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
                let key = Arc::new(key);
                st.index_add(&res, &key, &obj);
                let rd = st.resource_mut(&res);
                rd.labels_add(&key, &obj);
                rd.objects.insert(key, obj);
            }
        }
        st.rv = rv;
        st.open_rv = rv;
        for rd in st.data.values_mut() {
            rd.floor = rv;
        }
        self.compact(st)
    }

    /// Writes every object as a new snapshot (atomically, synced with its directory
    /// entry) and empties the log. A crash between the two leaves a log whose replay
    /// over the new snapshot ends in the same state.
    pub fn compact(&self, st: &State) -> std::io::Result<()> {
        let tmp = self.dir.join("snapshot.jsonl.tmp");
        {
            let mut w = std::io::BufWriter::new(open_private(&tmp, true)?);
            writeln!(w, "{}", json!({"rv": st.rv}))?;
            for (res, rd) in &st.data {
                for obj in rd.objects.values() {
                    writeln!(w, "{}", put_record(st.rv, res, obj))?;
                }
            }
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        std::fs::rename(&tmp, self.snapshot())?;
        sync_dir(&self.dir)?;
        let log = open_private(&self.log(), true)?;
        log.sync_all()?;
        *self.log_file.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// Appends log records in one write and, with `sync`, waits until they are on disk
    /// (`fdatasync`). After a failure the file is reopened by the next call; the caller
    /// appends the same records again (replaying a record twice ends in the same state,
    /// and a torn line is skipped on load).
    pub fn append(&self, lines: &[String], sync: bool) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for l in lines {
            buf.extend_from_slice(l.as_bytes());
            buf.push(b'\n');
        }
        let mut guard = self.log_file.lock().unwrap_or_else(|e| e.into_inner());
        let file = match guard.as_mut() {
            Some(f) => f,
            None => guard.insert(open_private(&self.log(), false)?),
        };
        let written = file
            .write_all(&buf)
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
        if written.is_err() {
            *guard = None;
        }
        written
    }
}

/// Creates `dir` (and its parents) and makes it readable by its owner only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir)?.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & 0o700))?;
        }
    }
    Ok(())
}

/// Opens a file of the data directory for writing, mode 0600 (also when it already
/// existed with another mode): truncated, or for appending.
pub(super) fn open_private(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true);
    if truncate {
        opts.write(true).truncate(true);
    } else {
        opts.append(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        opts.mode(0o600);
        let f = opts.open(path)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(f)
    }
    #[cfg(not(unix))]
    opts.open(path)
}

/// Makes a rename in `dir` durable.
pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
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
pub(super) fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    open_private(path, true)?.write_all(text.as_bytes())
}

pub fn new_token() -> String {
    use base64::Engine;
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}
