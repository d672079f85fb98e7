//! The rules a configuration archive (a module's or a workspace's `.tar.gz` upload) must
//! follow, applied twice with the same functions: by the API server when the upload
//! arrives ([`validate`], in memory, so a bad archive errors its configuration version at
//! once with the reason) and by `terrace runner fetch` when it unpacks the archive in a
//! Pod ([`check_entry`] on each entry, against the real directory).
//!
//! Refused: absolute paths and `..` components; symbolic links whose target is absolute
//! or, resolved from where the link lands, leaves the archive's root; hard links, device
//! files, FIFOs and sparse files; more than [`ArchiveLimits::max_entries`] entries or more
//! than [`ArchiveLimits::max_unpacked_bytes`] of content. Decompression is bounded by
//! [`Capped`], so a small upload cannot make either side inflate gigabytes.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// Bounds on what an archive may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveLimits {
    /// Largest total size of the unpacked files.
    pub max_unpacked_bytes: u64,
    /// Most entries (files, directories, links).
    pub max_entries: u64,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        Self {
            max_unpacked_bytes: 1 << 30,
            max_entries: 100_000,
        }
    }
}

/// Room for tar headers and padding on top of the file contents.
pub const TAR_OVERHEAD_BYTES: u64 = 16 << 20;

/// Why an archive is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("the configuration archive exceeds the {what} limit of {limit}")]
    TooLarge { what: &'static str, limit: u64 },
    #[error("the configuration archive has an unsafe path {path:?}: {reason}")]
    UnsafeEntry { path: String, reason: &'static str },
    #[error("the configuration archive cannot be read: {0}")]
    Unreadable(String),
}

/// What an archive holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArchiveStats {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Total size of the files.
    pub bytes: u64,
}

/// What to do with an entry that passed the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// Unpack it at this relative path.
    Unpack(PathBuf),
    /// Metadata or the archive's own root: nothing to unpack.
    Skip,
}

/// The entry path as a relative path of normal components (`.` dropped), or why not.
pub fn safe_relative(path: &Path) -> Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err("path contains a `..` component"),
            Component::RootDir | Component::Prefix(_) => return Err("path is absolute"),
        }
    }
    Ok(out)
}

/// Where a symbolic link's `target` lands, resolved from the directory `at` (physical,
/// under `root`) one component at a time, each step through `physical` (so a link
/// unpacked earlier is followed before a later `..` climbs out of it, as the kernel
/// does); `None` when any step leaves `root`.
pub fn resolve_physically(
    root: &Path,
    at: &Path,
    target: &Path,
    physical: &impl Fn(&Path) -> io::Result<PathBuf>,
) -> io::Result<Option<PathBuf>> {
    let mut out = at.to_path_buf();
    for c in target.components() {
        match c {
            Component::Normal(p) => {
                out.push(p);
                let Ok(rel) = out.strip_prefix(root) else {
                    return Ok(None);
                };
                out = physical(rel)?;
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Ok(None);
                }
            }
            Component::RootDir | Component::Prefix(_) => return Ok(None),
        }
        if !out.starts_with(root) {
            return Ok(None);
        }
    }
    Ok(Some(out))
}

/// Applies the rules to one entry. `physical` says where a path relative to `root`
/// really is (following symbolic links unpacked before it); `stats` accumulates what the
/// archive holds.
pub fn check_entry<R: Read>(
    entry: &tar::Entry<'_, R>,
    root: &Path,
    physical: impl Fn(&Path) -> io::Result<PathBuf>,
    stats: &mut ArchiveStats,
    limits: &ArchiveLimits,
) -> Result<Checked, ArchiveError> {
    let unreadable = |e: io::Error| ArchiveError::Unreadable(e.to_string());
    let raw = entry.path().map_err(unreadable)?.into_owned();
    let shown = raw.display().to_string();
    let unsafe_entry = |reason| ArchiveError::UnsafeEntry {
        path: shown.clone(),
        reason,
    };
    let rel = safe_relative(&raw).map_err(unsafe_entry)?;
    let kind = entry.header().entry_type();
    if kind.is_pax_global_extensions() {
        // `git archive` writes one (the commit ID): metadata, nothing to unpack.
        return Ok(Checked::Skip);
    }
    if rel.as_os_str().is_empty() {
        // The archive's own root (`./`).
        return Ok(Checked::Skip);
    }
    if kind.is_file() || kind.is_contiguous() {
        stats.files += 1;
        stats.bytes = stats.bytes.saturating_add(entry.size());
        if stats.bytes > limits.max_unpacked_bytes {
            return Err(ArchiveError::TooLarge {
                what: "unpacked size",
                limit: limits.max_unpacked_bytes,
            });
        }
    } else if kind.is_dir() {
        stats.directories += 1;
    } else if kind.is_symlink() {
        let target = entry
            .link_name()
            .map_err(unreadable)?
            .ok_or_else(|| unsafe_entry("symbolic link without a target"))?
            .into_owned();
        let parent = rel.parent().unwrap_or(Path::new(""));
        let at = physical(parent).map_err(unreadable)?;
        let landing = if target.is_relative() && at.starts_with(root) {
            resolve_physically(root, &at, &target, &physical).map_err(unreadable)?
        } else {
            None
        };
        if landing.is_none() {
            return Err(unsafe_entry("symbolic link points outside the archive"));
        }
        stats.symlinks += 1;
    } else if kind.is_hard_link() {
        return Err(unsafe_entry("hard links are not supported"));
    } else if kind.is_gnu_sparse() {
        return Err(unsafe_entry("sparse files are not supported"));
    } else {
        return Err(unsafe_entry(
            "only files, directories and symbolic links are supported",
        ));
    }
    Ok(Checked::Unpack(rel))
}

/// Errors once more than `left` bytes have been read, and says so in `exceeded` (the tar
/// crate wraps the I/O error in its own message).
pub struct Capped<R> {
    inner: R,
    left: u64,
    exceeded: Rc<Cell<bool>>,
}

impl<R> Capped<R> {
    /// A reader of at most `left` bytes of `inner`; `exceeded` turns true past that.
    pub fn new(inner: R, left: u64) -> (Capped<R>, Rc<Cell<bool>>) {
        let exceeded = Rc::new(Cell::new(false));
        (
            Capped {
                inner,
                left,
                exceeded: exceeded.clone(),
            },
            exceeded,
        )
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a stream that ends exactly at the cap from a longer one.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    self.exceeded.set(true);
                    Err(io::Error::other("size cap exceeded"))
                }
            };
        }
        let max = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..max])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Whether the bytes start like gzip data.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// Checks a whole `.tar.gz` in memory with the unpacker's rules, inflating at most
/// `max_unpacked_bytes` plus room for headers. Symbolic links are followed as the
/// unpacker would find them on disk.
pub fn validate(mut bytes: &[u8], limits: &ArchiveLimits) -> Result<ArchiveStats, ArchiveError> {
    validate_reader(&mut bytes, limits)
}

/// [`validate`] of the `.tar.gz` that `reader` gives, read as it comes (an upload
/// streaming by), never whole in memory. Not generic, so the inflater and the walk are
/// compiled (and optimized) here.
pub fn validate_reader(
    reader: &mut dyn Read,
    limits: &ArchiveLimits,
) -> Result<ArchiveStats, ArchiveError> {
    validate_keeping(reader, limits, &Keep::nothing()).map(|(stats, _)| stats)
}

/// Which regular files a check keeps the contents of while it validates (a module
/// version's configuration files and READMEs, to describe it), and at most how many bytes
/// of them in all.
pub struct Keep<'a> {
    pub wanted: &'a dyn Fn(&Path) -> bool,
    pub budget: u64,
}

impl Keep<'_> {
    /// Keeps nothing.
    pub fn nothing() -> Keep<'static> {
        Keep {
            wanted: &|_| false,
            budget: 0,
        }
    }
}

/// Files kept by [`validate_keeping`], by their relative path.
pub type KeptFiles = std::collections::BTreeMap<PathBuf, Vec<u8>>;

/// [`validate_reader`] that also keeps the contents of the regular files `keep` wants;
/// more than `keep.budget` bytes of them refuse the archive.
pub fn validate_keeping(
    reader: &mut dyn Read,
    limits: &ArchiveLimits,
    keep: &Keep<'_>,
) -> Result<(ArchiveStats, KeptFiles), ArchiveError> {
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < magic.len() {
        match reader.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ArchiveError::Unreadable(e.to_string())),
        }
    }
    if !is_gzip(&magic[..got]) {
        return Err(ArchiveError::Unreadable(
            "the archive is not gzip-compressed (expected a .tar.gz)".into(),
        ));
    }
    let (stream, exceeded) = Capped::new(
        flate2::read::GzDecoder::new(io::BufReader::new(io::Cursor::new(magic).chain(reader))),
        limits.max_unpacked_bytes.saturating_add(TAR_OVERHEAD_BYTES),
    );
    let result = walk(tar::Archive::new(stream), limits, keep);
    if exceeded.get() {
        return Err(ArchiveError::TooLarge {
            what: "unpacked size",
            limit: limits.max_unpacked_bytes,
        });
    }
    result
}

fn walk<R: Read>(
    mut archive: tar::Archive<R>,
    limits: &ArchiveLimits,
    keep: &Keep<'_>,
) -> Result<(ArchiveStats, KeptFiles), ArchiveError> {
    let mut kept = KeptFiles::new();
    let mut left = keep.budget;
    let unreadable = |e: io::Error| ArchiveError::Unreadable(e.to_string());
    // A virtual root; symbolic links seen so far, by their path under it.
    let root = PathBuf::from("/archive-root");
    let mut links: HashMap<PathBuf, PathBuf> = HashMap::new();
    let mut stats = ArchiveStats::default();
    let mut seen = 0u64;
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        seen += 1;
        if seen > limits.max_entries {
            return Err(ArchiveError::TooLarge {
                what: "entry count",
                limit: limits.max_entries,
            });
        }
        let physical = |rel: &Path| Ok(follow(&root, &links, rel));
        let checked = check_entry(&entry, &root, physical, &mut stats, limits)?;
        if let Checked::Unpack(rel) = &checked
            && entry.header().entry_type().is_symlink()
            && let Some(target) = entry.link_name().map_err(unreadable)?
        {
            let at = follow(&root, &links, rel.parent().unwrap_or(Path::new("")));
            let physical = |rel: &Path| Ok(follow(&root, &links, rel));
            let resolved =
                resolve_physically(&root, &at, &target, &physical).map_err(unreadable)?;
            if let Some(resolved) = resolved {
                links.insert(root.join(rel), resolved);
                if hops(&root, &links, rel) > MAX_LINK_HOPS {
                    return Err(ArchiveError::UnsafeEntry {
                        path: rel.display().to_string(),
                        reason: "symbolic links that form a loop (or a chain of more than 40)",
                    });
                }
            }
        }
        if let Checked::Unpack(rel) = checked
            && entry.header().entry_type().is_file()
            && (keep.wanted)(&rel)
        {
            let mut content = Vec::new();
            entry
                .by_ref()
                .take(left.saturating_add(1))
                .read_to_end(&mut content)
                .map_err(unreadable)?;
            left = left
                .checked_sub(content.len() as u64)
                .ok_or(ArchiveError::TooLarge {
                    what: "size of the files to describe",
                    limit: keep.budget,
                })?;
            kept.insert(rel, content);
        }
        io::copy(&mut entry, &mut io::sink()).map_err(unreadable)?;
    }
    Ok((stats, kept))
}

/// Most symbolic links followed for one path (the kernel's limit).
const MAX_LINK_HOPS: usize = 40;

/// Where `rel` lands under `root` once the links of `links` are followed (at most
/// [`MAX_LINK_HOPS`] per component, as the kernel's limit).
fn follow(root: &Path, links: &HashMap<PathBuf, PathBuf>, rel: &Path) -> PathBuf {
    walk_links(root, links, rel).0
}

/// The most links followed for one component of `rel` (over [`MAX_LINK_HOPS`]: a loop,
/// which the engine would fail on).
fn hops(root: &Path, links: &HashMap<PathBuf, PathBuf>, rel: &Path) -> usize {
    walk_links(root, links, rel).1
}

fn walk_links(root: &Path, links: &HashMap<PathBuf, PathBuf>, rel: &Path) -> (PathBuf, usize) {
    let mut at = root.to_path_buf();
    let mut most = 0;
    for c in rel.components() {
        at.push(c);
        let mut hops = 0;
        while let Some(t) = links.get(&at) {
            at = t.clone();
            hops += 1;
            if hops > MAX_LINK_HOPS {
                break;
            }
        }
        most = most.max(hops);
    }
    (at, most)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targz(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        let tar = b.into_inner().unwrap_or_else(|e| panic!("{e}"));
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut enc, &tar).unwrap_or_else(|e| panic!("{e}"));
        enc.finish().unwrap_or_else(|e| panic!("{e}"))
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, content: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, path, content)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn special(b: &mut tar::Builder<Vec<u8>>, path: &str, kind: tar::EntryType, link: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o644);
        if !link.is_empty() {
            h.set_link_name(link).unwrap_or_else(|e| panic!("{e}"));
        }
        h.set_cksum();
        b.append_data(&mut h, path, &[][..])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    fn reason(r: Result<ArchiveStats, ArchiveError>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(s) => panic!("accepted: {s:?}"),
        }
    }

    #[test]
    fn a_plain_module_is_accepted() {
        let a = targz(|b| {
            file(b, "main.tf", b"x");
            file(b, "tests/a.tftest.hcl", b"");
            special(b, "link", tar::EntryType::Symlink, "main.tf");
        });
        let s = validate(&a, &ArchiveLimits::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.files, s.symlinks, s.bytes), (2, 1, 1));
    }

    #[test]
    fn unsafe_entries_are_refused() {
        let l = ArchiveLimits::default();
        for (kind, link, want) in [
            (
                tar::EntryType::Symlink,
                "../../etc/passwd",
                "points outside",
            ),
            (tar::EntryType::Symlink, "/etc/passwd", "points outside"),
            (tar::EntryType::Link, "main.tf", "hard links"),
            (tar::EntryType::Char, "", "only files"),
            (tar::EntryType::Block, "", "only files"),
            (tar::EntryType::Fifo, "", "only files"),
        ] {
            let a = targz(|b| {
                file(b, "main.tf", b"x");
                special(b, "bad", kind, link);
            });
            let r = reason(validate(&a, &l));
            assert!(r.contains(want), "{kind:?}: {r}");
        }
    }

    #[test]
    fn links_through_earlier_links_are_followed() {
        // `up` points at the root's parent's sibling via a chain: `d -> .`, then `d/x -> ..`
        // lands outside once `d` is followed.
        let a = targz(|b| {
            special(b, "sub/d", tar::EntryType::Symlink, "..");
            special(b, "sub/d/escape", tar::EntryType::Symlink, "..");
        });
        assert!(reason(validate(&a, &ArchiveLimits::default())).contains("outside"));
    }

    #[test]
    fn a_chain_through_a_link_to_the_root_is_refused() {
        // `d -> .`, then `d2 -> d/..`: lexically `d2` is the root, but `d` is the root
        // itself, so `d/..` is the root's parent, and `d2/x` would be written outside.
        let a = targz(|b| {
            special(b, "d", tar::EntryType::Symlink, ".");
            special(b, "d2", tar::EntryType::Symlink, "d/..");
            file(b, "d2/x", b"x");
        });
        assert!(reason(validate(&a, &ArchiveLimits::default())).contains("outside"));
        // A link through an earlier link that stays inside is fine.
        let ok = targz(|b| {
            file(b, "sub/main.tf", b"");
            special(b, "s", tar::EntryType::Symlink, "sub");
            special(b, "m", tar::EntryType::Symlink, "s/../sub/main.tf");
        });
        assert!(validate(&ok, &ArchiveLimits::default()).is_ok());
    }

    /// Issue 39 §11: a loop of links passed the upload check and failed at plan.
    #[test]
    fn a_loop_of_links_is_refused() {
        for build in [
            (|b: &mut tar::Builder<Vec<u8>>| {
                special(b, "a", tar::EntryType::Symlink, "b");
                special(b, "b", tar::EntryType::Symlink, "a");
            }) as fn(&mut tar::Builder<Vec<u8>>),
            |b| special(b, "self", tar::EntryType::Symlink, "self"),
            |b| {
                file(b, "main.tf", b"");
                special(b, "m/x", tar::EntryType::Symlink, "y");
                special(b, "m/y", tar::EntryType::Symlink, "z");
                special(b, "m/z", tar::EntryType::Symlink, "x");
            },
        ] {
            let a = targz(build);
            assert!(reason(validate(&a, &ArchiveLimits::default())).contains("loop"));
        }
    }

    #[test]
    fn limits_bound_the_work() {
        let limits = ArchiveLimits {
            max_unpacked_bytes: 1 << 20,
            max_entries: 3,
        };
        let big = targz(|b| file(b, "big", &vec![0u8; 2 << 20]));
        assert!(reason(validate(&big, &limits)).contains("unpacked size"));
        let many = targz(|b| {
            for i in 0..5 {
                file(b, &format!("f{i}"), b"");
            }
        });
        assert!(reason(validate(&many, &limits)).contains("entry count"));
        assert!(reason(validate(b"plain", &limits)).contains("gzip"));
    }
}
