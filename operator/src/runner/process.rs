//! The engine as a child process of the runner: started with its output logged (or
//! quiet), interrupted with SIGINT when the run is canceled, and what the runner says in
//! the log between its steps.

use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use super::error::{StepError, step};

/// The engine child currently running, for the signal handler.
#[derive(Default)]
pub(super) struct Current {
    pub(super) pid: AtomicU32,
    pub(super) interrupted: AtomicBool,
}

pub(super) fn sigint(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if pid != 0
        && let Ok(pid) = i32::try_from(pid)
    {
        let _ = kill(Pid::from_raw(pid), Signal::SIGINT);
    }
}

/// Forwards SIGTERM to the running engine as SIGINT, for the process's life (a
/// terminal's SIGINT reached the engine too, in the same process group: only recorded).
pub(super) fn listen(current: Arc<Current>) -> Result<(), StepError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(step("setting up signal handling"))?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            loop {
                let forward = tokio::select! {
                    s = term.recv() => s.is_some(),
                    _ = int.recv() => false,
                };
                current.interrupted.store(true, Ordering::SeqCst);
                if forward {
                    sigint(current.pid.load(Ordering::SeqCst));
                }
            }
        });
    });
    Ok(())
}

/// What the runner adds to the engine's environment (set once per phase, before the
/// engine first runs): TFE's run variables and the CLI configuration.
pub(super) static ENGINE_ENV: std::sync::OnceLock<Vec<(String, String)>> =
    std::sync::OnceLock::new();

/// Runs `program args…` in `dir` with stdout and stderr going to the log (inherited);
/// answers whether it exited 0.
pub(super) fn run_logged(
    current: &Current,
    dir: &Path,
    program: &str,
    args: &[String],
) -> Result<bool, StepError> {
    Ok(run_logged_code(current, dir, program, args)? == Some(0))
}

/// `program` with `args` in `dir`, as every engine step runs: the engine's environment
/// ([`ENGINE_ENV`]) on top of the runner's, no input.
fn engine_command<S: AsRef<std::ffi::OsStr>>(
    dir: &Path,
    program: &str,
    args: &[S],
) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .envs(ENGINE_ENV.get().into_iter().flatten().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdin(Stdio::null());
    command
}

/// [`run_logged`], answering the exit code (None: ended by a signal).
pub(super) fn run_logged_code(
    current: &Current,
    dir: &Path,
    program: &str,
    args: &[String],
) -> Result<Option<i32>, StepError> {
    let mut child = engine_command(dir, program, args)
        .spawn()
        .map_err(|e| not_started(program, &e))?;
    current.pid.store(child.id(), Ordering::SeqCst);
    let status = child.wait().map_err(step("waiting for the engine"));
    current.pid.store(0, Ordering::SeqCst);
    Ok(status?.code())
}

/// Runs a quiet step: its output goes to the log only when it fails.
pub(super) fn run_quiet(dir: &Path, program: &str, args: &[&str]) -> Result<Vec<u8>, StepError> {
    let out = engine_command(dir, program, args)
        .output()
        .map_err(|e| not_started(program, &e))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    print_bytes(&out.stdout);
    print_bytes(&out.stderr);
    Err(StepError(format!(
        "`{program} {}` failed ({})",
        args.join(" "),
        out.status
    )))
}

pub(super) fn print_bytes(b: &[u8]) {
    use std::io::Write;
    let mut out = io::stdout().lock();
    let _ = out.write_all(b);
    let _ = out.flush();
}

pub(super) fn say(line: &str) {
    print_bytes(format!("{line}\n").as_bytes());
}

pub(super) fn not_started(program: &str, e: &io::Error) -> StepError {
    match e.kind() {
        io::ErrorKind::NotFound => StepError(format!(
            "Engine not found: the command {program:?} is not installed in the engine image (or, under terrace dev, not on PATH and not given with --engine)"
        )),
        _ => StepError(format!(
            "the engine command {program:?} could not be started: {e}"
        )),
    }
}
