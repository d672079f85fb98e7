//! Container processes on the host: spawning one from its [`spec::Plan`] (log and
//! termination files, PATH shims), and reading back termination messages and log tails.

use super::*;

pub(super) fn read_limited(path: &Path, max: usize) -> String {
    use std::io::Read as _;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(max as u64).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// `FallbackToLogsOnError`: the last 80 lines of the log, at most 2048 bytes.
pub(super) fn log_tail(path: &Path) -> String {
    let data = std::fs::read(path).unwrap_or_default();
    let text = logs::select(&data, Some(80), None);
    let start = text.len().saturating_sub(2048);
    String::from_utf8_lossy(&text[start..]).into_owned()
}

pub(super) fn spawn(
    dir: &Path,
    name: &str,
    plan: &spec::Plan,
) -> std::io::Result<tokio::process::Child> {
    for sub in ["logs", "termination", "cwd", "bin"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::create_dir_all(&plan.cwd)?;
    std::fs::write(&plan.termination_path, b"")?;
    let log = spec::log_path(dir, name, false);
    if log.exists() {
        std::fs::rename(&log, spec::log_path(dir, name, true))?;
    }
    let out = std::fs::File::create(&log)?;
    let err = out.try_clone()?;
    tokio::process::Command::new(&plan.program)
        .args(&plan.args)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
}

/// PATH shims: each command override under its name, so `terrace runner exec -- tofu`
/// finds the override too.
pub(super) fn write_shims(dir: &Path, overrides: &[(String, PathBuf)]) {
    let bin = spec::bin_dir(dir);
    let _ = std::fs::create_dir_all(&bin);
    for (name, target) in overrides {
        if name.is_empty() || name.contains('/') {
            continue;
        }
        let link = bin.join(name);
        let _ = std::fs::remove_file(&link);
        let target = std::fs::canonicalize(target).unwrap_or_else(|_| target.clone());
        if let Err(e) = std::os::unix::fs::symlink(&target, &link) {
            tracing::warn!(error = %e, name, "simulator: cannot create a command override shim");
        }
    }
}
