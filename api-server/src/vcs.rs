//! Git fetches of VCS-driven workspaces (docs/vcs.md), with libgit2: one ref, shallow
//! (depth 1), into a scratch repository on disk, bounded in bytes received and in time,
//! then the fetched commit's tree written as a tar.gz into a scratch file, entry by entry
//! from the object database (no checkout: no hooks run, no working tree; a symlink is
//! kept only when it points inside the tree). Memory holds one file's content at a time.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use git2::{FetchOptions, RemoteCallbacks, Repository, TreeWalkMode, TreeWalkResult};

/// What to fetch and how.
#[derive(Clone)]
pub struct FetchRequest {
    /// The repository's clone URL.
    pub url: String,
    /// The ref to fetch (`refs/heads/main`, `refs/tags/v1`, `refs/pull/7/head`).
    pub git_ref: String,
    /// HTTP credentials (user, token), when the connection has a token.
    pub credentials: Option<(String, String)>,
    /// Most bytes the server may send.
    pub max_bytes: u64,
    /// Longest the fetch and the archive may take.
    pub timeout: Duration,
    /// Fetch the submodules the commit names too (one level, over HTTP(S); the
    /// connection's token goes only to its own server).
    pub submodules: bool,
}

/// A fetched commit, archived.
pub struct Fetched {
    /// The commit's SHA.
    pub sha: String,
    /// Its message (first 4 KiB).
    pub message: String,
    /// The tar.gz of its tree.
    pub archive: tempfile::NamedTempFile,
    /// Submodules left out (not asked for, not in `.gitmodules`, or nested).
    pub submodules: usize,
}

/// Why a fetch failed, in words a workspace's Event can carry (never a credential).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("the repository sent more than {0} bytes, the connection's limit")]
    TooLarge(u64),
    #[error("fetching took longer than {0:?}")]
    TimedOut(Duration),
    #[error("the repository could not be fetched: {0}")]
    Git(String),
    #[error("the ref {0} does not exist in the repository")]
    NoSuchRef(String),
    #[error("archiving the commit: {0}")]
    Archive(String),
}

fn git_err(e: git2::Error) -> FetchError {
    FetchError::Git(e.message().to_owned())
}

/// Fetches and archives `req` on a blocking thread, answering within its timeout (a
/// fetch still stuck then is told to stop at its next progress report).
pub async fn fetch(req: FetchRequest) -> Result<Fetched, FetchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let timeout = req.timeout;
    let task = tokio::task::spawn_blocking({
        let stop = stop.clone();
        move || fetch_blocking(&req, &stop)
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(FetchError::Git(format!("the fetch task failed: {e}"))),
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            Err(FetchError::TimedOut(timeout))
        }
    }
}

/// The bounds of one fetch and its archive.
struct Limits<'a> {
    stop: &'a AtomicBool,
    deadline: Instant,
    max_bytes: u64,
    timeout: Duration,
}

impl Limits<'_> {
    fn go_on(&self) -> bool {
        !self.stop.load(Ordering::Relaxed) && Instant::now() < self.deadline
    }
}

/// Fetches `refspec` of the repository at `url` into `repo`, shallow, within `lim`.
fn fetch_into(
    repo: &Repository,
    url: &str,
    refspec: &str,
    credentials: Option<&(String, String)>,
    lim: &Limits<'_>,
) -> Result<(), FetchError> {
    let mut remote = repo.remote_anonymous(url).map_err(git_err)?;
    let over = std::cell::Cell::new(false);
    let mut cb = RemoteCallbacks::new();
    let creds = credentials.cloned();
    let mut tried = false;
    cb.credentials(move |_url, _user, allowed| match &creds {
        Some((u, t)) if !tried && allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) => {
            tried = true;
            git2::Cred::userpass_plaintext(u, t)
        }
        _ => Err(git2::Error::from_str(
            "the server refused the connection's credentials",
        )),
    });
    cb.transfer_progress(|p| {
        if p.received_bytes() as u64 > lim.max_bytes {
            over.set(true);
            return false;
        }
        lim.go_on()
    });
    cb.sideband_progress(|_| lim.go_on());
    let mut fo = FetchOptions::new();
    fo.remote_callbacks(cb);
    fo.depth(1);
    fo.download_tags(git2::AutotagOption::None);
    let fetched = remote.fetch(&[refspec], Some(&mut fo), None);
    drop(fo);
    if over.get() {
        return Err(FetchError::TooLarge(lim.max_bytes));
    }
    if !lim.go_on() {
        return Err(FetchError::TimedOut(lim.timeout));
    }
    fetched.map_err(git_err)
}

fn fetch_blocking(req: &FetchRequest, stop: &AtomicBool) -> Result<Fetched, FetchError> {
    let lim = Limits {
        stop,
        deadline: Instant::now() + req.timeout,
        max_bytes: req.max_bytes,
        timeout: req.timeout,
    };
    let scratch = tempfile::tempdir().map_err(|e| FetchError::Archive(e.to_string()))?;
    let repo = Repository::init_bare(scratch.path()).map_err(git_err)?;
    let target = "refs/terrace/fetched";
    fetch_into(
        &repo,
        &req.url,
        &format!("+{}:{target}", req.git_ref),
        req.credentials.as_ref(),
        &lim,
    )?;
    let commit = repo
        .find_reference(target)
        .and_then(|r| r.peel_to_commit())
        .map_err(|_| FetchError::NoSuchRef(req.git_ref.clone()))?;
    let message: String = commit
        .message()
        .unwrap_or_default()
        .chars()
        .take(4096)
        .collect();
    let tree = commit.tree().map_err(git_err)?;
    let file = tempfile::NamedTempFile::new().map_err(|e| FetchError::Archive(e.to_string()))?;
    let gz = flate2::write::GzEncoder::new(file.as_file(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let links = append_tree(&repo, &tree, "", &mut tar, &lim)?;
    let mut left_out = 0;
    if req.submodules {
        let modules = gitmodules(&repo, &tree);
        for (i, (path, oid)) in links.iter().enumerate() {
            let Some(url) = modules
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, u)| resolve_url(&req.url, u))
            else {
                left_out += 1;
                continue;
            };
            // The connection's token goes only to its own server.
            let creds = req
                .credentials
                .as_ref()
                .filter(|_| origin_of(&url) == origin_of(&req.url));
            fetch_into(
                &repo,
                &url,
                &format!("+{oid}:refs/terrace/sub/{i}"),
                creds,
                &lim,
            )
            .map_err(|e| FetchError::Git(format!("submodule {path}: {e}")))?;
            let sub = repo
                .find_commit(*oid)
                .and_then(|c| c.tree())
                .map_err(|e| FetchError::Git(format!("submodule {path}: {}", e.message())))?;
            // Submodules of submodules are not fetched.
            left_out += append_tree(&repo, &sub, &format!("{path}/"), &mut tar, &lim)?.len();
        }
    } else {
        left_out = links.len();
    }
    let gz = tar
        .into_inner()
        .map_err(|e| FetchError::Archive(e.to_string()))?;
    let mut f = gz
        .finish()
        .map_err(|e| FetchError::Archive(e.to_string()))?;
    f.flush().map_err(|e| FetchError::Archive(e.to_string()))?;
    Ok(Fetched {
        sha: commit.id().to_string(),
        message,
        archive: file,
        submodules: left_out,
    })
}

/// The `path` and `url` of each submodule `.gitmodules` of `tree` names.
fn gitmodules(repo: &Repository, tree: &git2::Tree<'_>) -> Vec<(String, String)> {
    let Some(text) = tree
        .get_path(Path::new(".gitmodules"))
        .ok()
        .and_then(|e| repo.find_blob(e.id()).ok())
        .map(|b| String::from_utf8_lossy(b.content()).into_owned())
    else {
        return Vec::new();
    };
    parse_gitmodules(&text)
}

/// `.gitmodules` read: each section's `path` and `url`.
pub fn parse_gitmodules(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let (mut path, mut url) = (None::<String>, None::<String>);
    let mut flush = |path: &mut Option<String>, url: &mut Option<String>| {
        if let (Some(p), Some(u)) = (path.take(), url.take()) {
            out.push((p, u));
        }
    };
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(&mut path, &mut url);
        } else if let Some((k, v)) = line.split_once('=') {
            match k.trim() {
                "path" => path = Some(v.trim().trim_end_matches('/').to_owned()),
                "url" => url = Some(v.trim().to_owned()),
                _ => {}
            }
        }
    }
    flush(&mut path, &mut url);
    out
}

/// A submodule's URL: absolute as given, or relative (`../other.git`) to the
/// superproject's, as git resolves it.
pub fn resolve_url(base: &str, url: &str) -> String {
    if !(url.starts_with("./") || url.starts_with("../")) {
        return url.to_owned();
    }
    let mut base = base.trim_end_matches('/').to_owned();
    let mut rest = url;
    loop {
        if let Some(r) = rest.strip_prefix("./") {
            rest = r;
        } else if let Some(r) = rest.strip_prefix("../") {
            if let Some(i) = base.rfind('/') {
                base.truncate(i);
            }
            rest = r;
        } else {
            break;
        }
    }
    format!("{base}/{rest}")
}

/// The scheme and authority of a URL (`https://host:port`).
fn origin_of(url: &str) -> &str {
    match url.find("://") {
        Some(i) => {
            let after = &url[i + 3..];
            &url[..i + 3 + after.find('/').unwrap_or(after.len())]
        }
        None => url,
    }
}

/// Whether symlink `link` (a path in the tree) pointing at `target` stays inside the tree.
pub fn link_stays_inside(link: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let mut depth: Vec<&std::ffi::OsStr> = Vec::new();
    let parent = Path::new(link)
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    for c in parent.join(target).components() {
        match c {
            Component::Normal(n) => depth.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Appends the files of `tree` under `prefix` to `tar`, one blob in memory at a time;
/// answers its submodules (path and commit), left for the caller.
fn append_tree<W: Write>(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    prefix: &str,
    tar: &mut tar::Builder<W>,
    lim: &Limits<'_>,
) -> Result<Vec<(String, git2::Oid)>, FetchError> {
    let mut failure: Option<FetchError> = None;
    let mut links = Vec::new();
    tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
        if !lim.go_on() {
            failure = Some(FetchError::TimedOut(lim.timeout));
            return TreeWalkResult::Abort;
        }
        let Ok(name) = entry.name() else {
            return TreeWalkResult::Skip;
        };
        let path = format!("{prefix}{dir}{name}");
        let mode = entry.filemode();
        let result = match entry.kind() {
            Some(git2::ObjectType::Blob) => {
                repo.find_blob(entry.id())
                    .map_err(git_err)
                    .and_then(|blob| {
                        let mut h = tar::Header::new_gnu();
                        if mode == 0o120000 {
                            let target = String::from_utf8_lossy(blob.content()).into_owned();
                            if !link_stays_inside(&path, &target) {
                                return Ok(());
                            }
                            h.set_entry_type(tar::EntryType::Symlink);
                            h.set_size(0);
                            h.set_mode(0o777);
                            tar.append_link(&mut h, &path, &target)
                                .map_err(|e| FetchError::Archive(e.to_string()))
                        } else {
                            h.set_entry_type(tar::EntryType::Regular);
                            h.set_size(blob.content().len() as u64);
                            h.set_mode(if mode == 0o100755 { 0o755 } else { 0o644 });
                            tar.append_data(&mut h, &path, blob.content())
                                .map_err(|e| FetchError::Archive(e.to_string()))
                        }
                    })
            }
            Some(git2::ObjectType::Commit) => {
                links.push((path.trim_start_matches(prefix).to_owned(), entry.id()));
                Ok(())
            }
            _ => Ok(()),
        };
        match result {
            Ok(()) => TreeWalkResult::Ok,
            Err(e) => {
                failure = Some(e);
                TreeWalkResult::Abort
            }
        }
    })
    .map_err(|e| failure.take().unwrap_or_else(|| git_err(e)))?;
    match failure {
        Some(e) => Err(e),
        None => Ok(links),
    }
}

/// What the server at `url` advertises: its default branch (what HEAD points at) and
/// every ref with its commit, asked without fetching anything.
pub struct Advertised {
    pub default_branch: String,
    pub refs: Vec<(String, String)>,
}

impl Advertised {
    /// The commit ref `name` points at.
    pub fn commit_of(&self, name: &str) -> Option<&str> {
        self.refs
            .iter()
            .find(|(r, _)| r == name)
            .map(|(_, sha)| sha.as_str())
    }
}

/// [`Advertised`] of the repository at `url` (`git ls-remote`).
pub async fn advertised(
    url: String,
    credentials: Option<(String, String)>,
    timeout: Duration,
) -> Result<Advertised, FetchError> {
    let task = tokio::task::spawn_blocking(move || {
        let scratch = tempfile::tempdir().map_err(|e| FetchError::Archive(e.to_string()))?;
        let repo = Repository::init_bare(scratch.path()).map_err(git_err)?;
        let mut remote = repo.remote_anonymous(&url).map_err(git_err)?;
        let mut cb = RemoteCallbacks::new();
        let mut tried = false;
        cb.credentials(move |_u, _n, allowed| match &credentials {
            Some((u, t))
                if !tried && allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) =>
            {
                tried = true;
                git2::Cred::userpass_plaintext(u, t)
            }
            _ => Err(git2::Error::from_str(
                "the server refused the connection's credentials",
            )),
        });
        let conn = remote
            .connect_auth(git2::Direction::Fetch, Some(cb), None)
            .map_err(git_err)?;
        let head = conn.default_branch().map_err(git_err)?;
        let head = head.as_str().unwrap_or_default();
        let default_branch = head.strip_prefix("refs/heads/").unwrap_or(head).to_owned();
        let refs = conn
            .list()
            .map_err(git_err)?
            .iter()
            .map(|h| (h.name().to_owned(), h.oid().to_string()))
            .collect();
        Ok(Advertised {
            default_branch,
            refs,
        })
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(FetchError::Git(e.to_string())),
        Err(_) => Err(FetchError::TimedOut(timeout)),
    }
}

/// The default branch of the repository at `url`.
pub async fn default_branch_of(
    url: String,
    credentials: Option<(String, String)>,
    timeout: Duration,
) -> Result<String, FetchError> {
    Ok(advertised(url, credentials, timeout).await?.default_branch)
}

#[cfg(test)]
mod tests {
    use super::link_stays_inside;

    #[test]
    fn submodules_are_read_and_their_urls_resolved() {
        let text = "[submodule \"net\"]\n\tpath = modules/net\n\turl = ../net.git\n[submodule \"x\"]\n\turl = https://other.example/x.git\n\tpath = x/\n";
        assert_eq!(
            super::parse_gitmodules(text),
            vec![
                ("modules/net".to_owned(), "../net.git".to_owned()),
                ("x".to_owned(), "https://other.example/x.git".to_owned())
            ]
        );
        let base = "http://git.example:8080/acme/infra.git";
        assert_eq!(
            super::resolve_url(base, "../net.git"),
            "http://git.example:8080/acme/net.git"
        );
        assert_eq!(
            super::resolve_url(base, "../../other/net.git"),
            "http://git.example:8080/other/net.git"
        );
        assert_eq!(
            super::resolve_url(base, "https://x/y.git"),
            "https://x/y.git"
        );
        assert_eq!(super::origin_of(base), "http://git.example:8080");
        assert_eq!(super::origin_of("https://h"), "https://h");
    }

    #[test]
    fn symlinks_out_of_the_tree_are_left_out() {
        assert!(link_stays_inside("a/b", "c"));
        assert!(link_stays_inside("a/b", "../c"));
        assert!(!link_stays_inside("a/b", "../../c"));
        assert!(!link_stays_inside("a", "/etc/passwd"));
        assert!(link_stays_inside("a/b/c", "../../d/./e"));
    }
}
