//! `terrace runner fetch`: the configuration archive downloaded with a one-time token
//! and unpacked safely (see the [module docs](super)), also used by `runner remote`.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use terrace_crds::archive::{self, ArchiveError, ArchiveLimits, ArchiveStats, Capped, Checked};

use super::error::RunnerError;

/// Bounds on what `fetch` accepts.
#[derive(Clone, Debug)]
pub struct FetchLimits {
    /// Largest compressed body read from the server.
    pub max_archive_bytes: u64,
    /// Largest total size of the unpacked files.
    pub max_unpacked_bytes: u64,
    /// Most entries (files, directories, links).
    pub max_entries: u64,
    /// Whole-request timeout.
    pub timeout: Duration,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            max_archive_bytes: 256 << 20,
            max_unpacked_bytes: 1 << 30,
            max_entries: 100_000,
            timeout: Duration::from_secs(300),
        }
    }
}

/// What an unpack wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnpackStats {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Total size of the files.
    pub bytes: u64,
}

/// Reads the token file (surrounding whitespace, such as a trailing newline, is dropped).
pub fn read_token(path: &Path) -> Result<String, RunnerError> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_owned())
        .map_err(|source| RunnerError::TokenFile {
            path: path.to_owned(),
            source,
        })
}

fn tls_roots(ca_file: &Path) -> Result<ureq::tls::RootCerts, RunnerError> {
    let ca_err = |message: String| RunnerError::CaFile {
        path: ca_file.to_owned(),
        message,
    };
    let pem = std::fs::read(ca_file).map_err(|e| ca_err(e.to_string()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(ca_err(e.to_string())),
        }
    }
    if certs.is_empty() {
        return Err(ca_err("no certificate in the file".into()));
    }
    Ok(ureq::tls::RootCerts::new_with_certs(&certs))
}

/// `terrace runner fetch`: GET `url` with `Authorization: Bearer <token>` and unpack the
/// tar.gz body into `dest`. Any status but 2xx is an error; the token never appears in one.
pub fn fetch(
    url: &str,
    token: &str,
    dest: &Path,
    ca_file: Option<&Path>,
    limits: &FetchLimits,
) -> Result<UnpackStats, RunnerError> {
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(limits.timeout))
        .http_status_as_error(true);
    if let Some(ca) = ca_file {
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(tls_roots(ca)?)
                .build(),
        );
    }
    let agent: ureq::Agent = config.build().into();
    let response = agent
        .get(url)
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .map_err(|e| RunnerError::Download(e.to_string()))?;
    let (body, exceeded) =
        Capped::new(response.into_body().into_reader(), limits.max_archive_bytes);
    let result = unpack(body, dest, limits);
    if exceeded.get() {
        return Err(RunnerError::TooLarge {
            what: "archive size",
            limit: limits.max_archive_bytes,
        });
    }
    result
}

/// The physical location of `rel` under `root`: its longest existing ancestor
/// canonicalized (following links already unpacked), then the rest.
fn physical(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    let mut existing = root.join(rel);
    let mut rest = Vec::new();
    loop {
        if existing.symlink_metadata().is_ok() {
            let mut p = existing.canonicalize()?;
            p.extend(rest.iter().rev());
            return Ok(p);
        }
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return Ok(root.join(rel)),
        }
    }
}

/// Unpacks a tar.gz stream into `dest` (created if missing) with the archive rules of
/// [`terrace_crds::archive`] (the API server checked the upload with the same ones):
/// refusing absolute paths and `..` components, symbolic links whose target (absolute, or
/// resolved from where the link physically lands) leaves `dest`, hard links, device files
/// and FIFOs, and archives beyond `limits`. The tar crate additionally refuses to write
/// through a directory that resolves outside `dest`, and replaces existing files instead
/// of writing through links. An error can leave a partial tree behind; the init container
/// fails then.
pub fn unpack(
    archive: impl Read,
    dest: &Path,
    limits: &FetchLimits,
) -> Result<UnpackStats, RunnerError> {
    let unpack_err = |e: io::Error| RunnerError::Unpack(e.to_string());
    std::fs::create_dir_all(dest).map_err(unpack_err)?;
    let root = dest.canonicalize().map_err(unpack_err)?;
    let (stream, exceeded) = Capped::new(
        flate2::read::GzDecoder::new(archive),
        limits
            .max_unpacked_bytes
            .saturating_add(archive::TAR_OVERHEAD_BYTES),
    );
    let result = unpack_entries(tar::Archive::new(stream), &root, limits);
    if exceeded.get() {
        return Err(RunnerError::TooLarge {
            what: "unpacked size",
            limit: limits.max_unpacked_bytes,
        });
    }
    result
}

impl From<ArchiveError> for RunnerError {
    fn from(e: ArchiveError) -> RunnerError {
        match e {
            ArchiveError::TooLarge { what, limit } => RunnerError::TooLarge { what, limit },
            ArchiveError::UnsafeEntry { path, reason } => RunnerError::UnsafeEntry { path, reason },
            ArchiveError::Unreadable(m) => RunnerError::Unpack(m),
        }
    }
}

fn unpack_entries<R: Read>(
    mut archive: tar::Archive<R>,
    root: &Path,
    limits: &FetchLimits,
) -> Result<UnpackStats, RunnerError> {
    let unpack_err = |e: io::Error| RunnerError::Unpack(e.to_string());
    archive.set_overwrite(true);
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    let rules = ArchiveLimits {
        max_unpacked_bytes: limits.max_unpacked_bytes,
        max_entries: limits.max_entries,
    };
    let mut stats = ArchiveStats::default();
    let mut entries_seen = 0u64;
    for entry in archive.entries().map_err(unpack_err)? {
        let mut entry = entry.map_err(unpack_err)?;
        entries_seen += 1;
        if entries_seen > limits.max_entries {
            return Err(RunnerError::TooLarge {
                what: "entry count",
                limit: limits.max_entries,
            });
        }
        let checked =
            archive::check_entry(&entry, root, |rel| physical(root, rel), &mut stats, &rules)?;
        if let Checked::Unpack(rel) = checked
            && !entry.unpack_in(root).map_err(unpack_err)?
        {
            return Err(RunnerError::UnsafeEntry {
                path: rel.display().to_string(),
                reason: "refused by the unpacker",
            });
        }
    }
    Ok(UnpackStats {
        files: stats.files,
        directories: stats.directories,
        symlinks: stats.symlinks,
        bytes: stats.bytes,
    })
}
