//! `terrace runner`: the commands that run inside test Pods (DESIGN.md §3, "Test run Pod
//! contract").
//!
//! - `install` (first init container): puts this very binary at a path in the shared
//!   volume, so the engine image needs nothing of terrace's. It hard-links when source
//!   and destination share a filesystem (the simulator) and copies otherwise (a Pod's
//!   emptyDir), so the terrace image needs no shell or `cp`.
//! - `fetch` (init container): downloads the configuration archive from the API server's
//!   object endpoint with a one-time bearer token and unpacks the tar.gz into the shared
//!   emptyDir. The archive is the module author's upload, so unpacking refuses anything that
//!   could write outside the destination (absolute paths, `..`, links leading out, hard
//!   links, device files) and stops at size and entry-count limits.
//! - `remote` (the engine container of a workspace run's plan or apply Pod): one phase
//!   of the run, see [`remote`]; it fetches the configuration with `fetch`'s rules.
//! - `exec` (engine container): runs `<engine> test -json …`, relays every line the
//!   engine writes to its stdout, in order and unchanged, to stdout (the container log,
//!   which becomes the run's log the terraform CLI renders) and to an optional log file,
//!   folds the `-json` lines into a [`Tally`], and on exit writes a [`RunnerReport`] as the
//!   container's termination message, which the TestRun controller reads. The engine's
//!   stderr never reaches that log (a Pod's log mixes both streams, which would put text
//!   between the JSON lines): it goes to an optional file, and its last lines become the
//!   report's message when the engine ends without a summary. An engine that cannot be
//!   started (a missing command) is reported, and said in the log as one diagnostic line
//!   in the engine's own `-json` shape, so the CLI shows why. A SIGTERM (the kubelet deleting the Pod for a cancel) becomes a SIGINT for the
//!   engine, which then stops gracefully and destroys what it created; the runner waits for
//!   it. Escalation is not the runner's business: the grace period ending (SIGKILL of the
//!   whole container) does that.
//!
//! The engine stays in the runner's process group, like every process of a container. A
//! local emulation of a Pod (the simulator) should therefore send SIGTERM to the runner's
//! PID only, as CRI runtimes do to PID 1 — a SIGTERM to the group would also reach the
//! engine directly and count as its second interrupt — and SIGKILL to the whole group.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use clap::Subcommand;
use terrace_crds::testoutput::{RunnerReport, Tally, diagnostic_line};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

mod api;
mod bundle;
mod error;
mod fetch;
pub mod log_ship;
mod process;
pub mod remote;
mod snapshots;

pub use error::RunnerError;
pub use fetch::{FetchLimits, UnpackStats, fetch, read_token, unpack};

#[derive(Clone, Debug, Subcommand)]
pub enum RunnerCommand {
    /// Put this binary at DEST (hard link when possible, else a copy), executable.
    Install {
        /// Where the binary goes, e.g. `/terrace/terrace` in the shared volume.
        dest: PathBuf,
    },
    /// Download the configuration archive with a one-time token and unpack it.
    Fetch {
        /// URL of the archive on the API server's object endpoint (http or https).
        #[arg(long, env = "TERRACE_ARCHIVE_URL")]
        url: String,
        /// File holding the one-time token (sent as `Authorization: Bearer`).
        #[arg(long, env = "TERRACE_ARCHIVE_TOKEN_FILE")]
        token_file: PathBuf,
        /// Directory to unpack into.
        #[arg(long, default_value = "/workspace")]
        dest: PathBuf,
        /// PEM file of the CA certificates to trust for an https URL (default: the
        /// webpki roots).
        #[arg(long, env = "TERRACE_ARCHIVE_CA_FILE")]
        ca_file: Option<PathBuf>,
    },
    /// Run the engine (`-- tofu test -json …`), parse its output, write the summary.
    Exec {
        /// Where the termination message is written.
        #[arg(long, default_value = "/dev/termination-log")]
        termination_message_path: PathBuf,
        /// Also append the engine's output to this file.
        #[arg(long)]
        log_file: Option<PathBuf>,
        /// Append the engine's stderr to this file (it is never part of the log).
        #[arg(long)]
        stderr_file: Option<PathBuf>,
        /// Store the log's parts here as it is written (`{url}/{part}`), with the token
        /// of `--log-token-file` (a missing file: the log stays in the Pod's log only).
        #[arg(long, requires = "log_token_file")]
        log_url: Option<String>,
        /// File holding the log token.
        #[arg(long)]
        log_token_file: Option<PathBuf>,
        /// The engine command line.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run one phase (plan or apply) of a workspace run (see [`remote`]).
    Remote(remote::RemoteArgs),
}

/// A signal delivered to the runner, as [`exec`] acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerSignal {
    /// SIGTERM (the Pod is being deleted): send the engine a SIGINT.
    Terminate,
    /// SIGINT: the engine, in the same process group, got it too (a terminal's Ctrl-C);
    /// only recorded.
    Interrupt,
}

/// Sends signals to a running [`exec`]; the library's entry point for tests and embedders.
#[derive(Clone, Debug)]
pub struct Signals(mpsc::UnboundedSender<RunnerSignal>);

impl Signals {
    /// A new sender and the receiving end to give to [`exec`].
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<RunnerSignal>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self(tx), rx)
    }

    /// As if the runner had received SIGTERM.
    pub fn terminate(&self) {
        let _ = self.0.send(RunnerSignal::Terminate);
    }

    /// As if the runner had received SIGINT.
    pub fn interrupt(&self) {
        let _ = self.0.send(RunnerSignal::Interrupt);
    }

    /// Forwards the process's SIGTERM and SIGINT to this sender, for as long as the runtime
    /// runs. Must be called within a tokio runtime.
    pub fn listen_to_os(&self) -> Result<(), RunnerError> {
        use tokio::signal::unix::{SignalKind, signal};
        for (kind, what) in [
            (SignalKind::terminate(), RunnerSignal::Terminate),
            (SignalKind::interrupt(), RunnerSignal::Interrupt),
        ] {
            let mut stream = signal(kind).map_err(RunnerError::Signals)?;
            let tx = self.0.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    if tx.send(what).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(())
    }
}

/// What `exec` runs and where it writes.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    /// Program and arguments, e.g. `["tofu", "test", "-json"]`.
    pub command: Vec<String>,
    /// Where to write the termination message (none: not written).
    pub termination_message_path: Option<PathBuf>,
    /// File the engine's output is appended to as well.
    pub log_file: Option<PathBuf>,
    /// File the engine's stderr is appended to.
    pub stderr_file: Option<PathBuf>,
}

/// After the engine exits, how long output still held open by its leftover children
/// (provider plugins) is relayed before the runner stops reading.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(5);

fn sigint(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(pid) = i32::try_from(pid)
        && let Err(e) = kill(Pid::from_raw(pid), Signal::SIGINT)
    {
        tracing::warn!(pid, error = %e, "sending SIGINT to the engine");
    }
}

/// Which of the engine's streams a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

async fn relay_lines<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    stream: Stream,
    tx: mpsc::Sender<(Stream, Vec<u8>)>,
) {
    let mut reader = BufReader::new(reader);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if tx.send((stream, line)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The last lines of the engine's stderr, for the report of an engine that ended without
/// a summary.
#[derive(Default)]
struct StderrTail {
    lines: std::collections::VecDeque<String>,
    bytes: usize,
}

impl StderrTail {
    const MAX_BYTES: usize = 2048;

    fn push(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line).trim_end().to_owned();
        if text.is_empty() {
            return;
        }
        self.bytes += text.len() + 1;
        self.lines.push_back(text);
        while self.bytes > Self::MAX_BYTES && self.lines.len() > 1 {
            if let Some(dropped) = self.lines.pop_front() {
                self.bytes -= dropped.len() + 1;
            }
        }
    }

    fn text(&self) -> Option<String> {
        (!self.lines.is_empty()).then(|| Vec::from(self.lines.clone()).join("\n"))
    }
}

/// Why the engine did not start, in words naming the command.
fn not_started(program: &str, e: &io::Error) -> (String, String) {
    match e.kind() {
        io::ErrorKind::NotFound => (
            "Engine not found".to_owned(),
            format!(
                "The test engine command {program:?} was not found: it is not installed in the engine image (or, under terrace dev, not on PATH and not given with --engine)."
            ),
        ),
        io::ErrorKind::PermissionDenied => (
            "Engine not executable".to_owned(),
            format!("The test engine command {program:?} cannot be executed: {e}."),
        ),
        _ => (
            "Engine could not be started".to_owned(),
            format!("Starting the test engine command {program:?} failed: {e}."),
        ),
    }
}

async fn open_append(path: &Path) -> Result<tokio::fs::File, RunnerError> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|source| RunnerError::LogFile {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
        .map_err(|source| RunnerError::LogFile {
            path: path.to_owned(),
            source,
        })
}

/// `terrace runner exec`: runs the engine, relays its output to `out` (and the log file),
/// acts on `signals`, and returns the report it wrote as the termination message. An
/// engine that fails, prints no summary or cannot start is a report with `error`, not an
/// `Err`; `Err` means the runner itself failed (log file, termination message).
pub async fn exec<W: AsyncWrite + Unpin>(
    opts: &ExecOptions,
    mut signals: mpsc::UnboundedReceiver<RunnerSignal>,
    out: &mut W,
) -> Result<RunnerReport, RunnerError> {
    let (program, args) = opts.command.split_first().ok_or(RunnerError::NoCommand)?;
    let mut log = match &opts.log_file {
        Some(path) => Some(open_append(path).await?),
        None => None,
    };
    let mut err_log = match &opts.stderr_file {
        Some(path) => Some(open_append(path).await?),
        None => None,
    };
    let spawned = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let (summary, detail) = not_started(program, &e);
            let mut line = diagnostic_line(
                &summary,
                &detail,
                &k8s_openapi::jiff::Timestamp::now().to_string(),
            )
            .into_bytes();
            line.push(b'\n');
            let _ = out.write_all(&line).await.and(out.flush().await);
            if let Some(f) = log.as_mut() {
                // A tokio file writes in the background: flushed, the line is on disk
                // before the report says the run ended.
                let _ = f.write_all(&line).await.and(f.flush().await);
            }
            let report = RunnerReport::not_started(format!("{summary}: {detail}"));
            write_report(opts, &report).await?;
            return Ok(report);
        }
    };
    let pid = child.id();
    let (tx, mut lines) = mpsc::channel::<(Stream, Vec<u8>)>(256);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(relay_lines(stdout, Stream::Stdout, tx.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(relay_lines(stderr, Stream::Stderr, tx.clone()));
    }
    drop(tx);
    let mut stderr_tail = StderrTail::default();

    let mut tally = Tally::default();
    let mut interrupted = false;
    let mut signals_open = true;
    let mut status = None;
    let mut out_ok = true;
    // Armed when the engine exits (the branch is disabled until then).
    let drain_deadline = tokio::time::sleep(Duration::MAX);
    tokio::pin!(drain_deadline);
    loop {
        tokio::select! {
            line = lines.recv() => {
                let Some((stream, mut line)) = line else { break };
                if stream == Stream::Stderr {
                    stderr_tail.push(&line);
                    if let Some(f) = err_log.as_mut()
                        && f.write_all(&line).await.is_err()
                    {
                        err_log = None;
                    }
                    continue;
                }
                tally.feed(&String::from_utf8_lossy(&line));
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if out_ok && out.write_all(&line).await.and(out.flush().await).is_err() {
                    // Keep the engine running: a broken stdout must not fail the tests.
                    out_ok = false;
                }
                if let Some(f) = log.as_mut()
                    && let Err(e) = f.write_all(&line).await
                {
                    tracing::warn!(error = %e, "writing the log file; no longer writing it");
                    log = None;
                }
            }
            sig = signals.recv(), if signals_open => match sig {
                Some(RunnerSignal::Terminate) => {
                    interrupted = true;
                    // After the exit has been reaped the PID may belong to another process.
                    if status.is_none()
                        && let Some(pid) = pid
                    {
                        sigint(pid);
                    }
                }
                Some(RunnerSignal::Interrupt) => interrupted = true,
                None => signals_open = false,
            },
            exit = child.wait(), if status.is_none() => {
                status = Some(exit);
                drain_deadline.as_mut().reset(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            () = &mut drain_deadline, if status.is_some() => break,
        }
    }
    let status = match status {
        Some(s) => s,
        None => child.wait().await,
    };
    for f in [log.as_mut(), err_log.as_mut()].into_iter().flatten() {
        let _ = f.flush().await;
    }
    let mut report = match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            RunnerReport::from_tally(&tally, status.code(), status.signal(), interrupted)
        }
        Err(e) => {
            let mut r = RunnerReport::from_tally(&tally, None, None, interrupted);
            r.message = Some(format!("waiting for the engine: {e}"));
            r
        }
    };
    // No summary and no error diagnostic: what the engine said on stderr (a panic, a
    // crash) is the best explanation there is.
    if report.error.is_some() && report.message.is_none() {
        report.message = stderr_tail.text();
    }
    write_report(opts, &report).await?;
    Ok(report)
}

async fn write_report(opts: &ExecOptions, report: &RunnerReport) -> Result<(), RunnerError> {
    if let Some(path) = &opts.termination_message_path {
        tokio::fs::write(path, report.to_termination_message())
            .await
            .map_err(|source| RunnerError::TerminationMessage {
                path: path.clone(),
                source,
            })?;
    }
    Ok(())
}

/// The `terrace runner` entry point. `exec` fails (non-zero exit) when the engine produced
/// no test summary — it errored, crashed or could not start; failing tests are a summary and
/// exit 0, the result being in the termination message.
/// Puts `source` at `dest`: a hard link when both are on one filesystem, else a copy made
/// executable. Answers which of the two it did.
pub fn install(source: &Path, dest: &Path) -> io::Result<&'static str> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::remove_file(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if std::fs::hard_link(source, dest).is_ok() {
        return Ok("hard link");
    }
    std::fs::copy(source, dest)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok("copy")
}

pub fn run(command: &RunnerCommand) -> Result<(), String> {
    match command {
        RunnerCommand::Remote(args) => {
            let report = remote::remote(args);
            match report.message {
                Some(m) if !report.ok => Err(m),
                _ => Ok(()),
            }
        }
        RunnerCommand::Install { dest } => {
            let source = std::env::current_exe().map_err(|e| format!("locating myself: {e}"))?;
            let how = install(&source, dest).map_err(|e| {
                format!("installing {} at {}: {e}", source.display(), dest.display())
            })?;
            tracing::info!(dest = %dest.display(), how, "terrace binary installed");
            Ok(())
        }
        RunnerCommand::Fetch {
            url,
            token_file,
            dest,
            ca_file,
        } => {
            let token = read_token(token_file).map_err(|e| e.to_string())?;
            let stats = fetch(
                url,
                &token,
                dest,
                ca_file.as_deref(),
                &FetchLimits::default(),
            )
            .map_err(|e| e.to_string())?;
            tracing::info!(
                files = stats.files,
                directories = stats.directories,
                symlinks = stats.symlinks,
                bytes = stats.bytes,
                dest = %dest.display(),
                "configuration archive unpacked"
            );
            Ok(())
        }
        RunnerCommand::Exec {
            termination_message_path,
            log_file,
            stderr_file,
            log_url,
            log_token_file,
            command,
        } => {
            let tee = match (log_url, log_token_file.as_deref().map(read_token)) {
                (Some(url), Some(Ok(token))) => log_ship::start(log_ship::LogTarget {
                    url: url.clone(),
                    token,
                })
                .map_err(|e| {
                    eprintln!("terrace runner: the log is kept in the Pod's log only: {e}")
                })
                .ok(),
                _ => None,
            };
            let opts = ExecOptions {
                command: command.clone(),
                termination_message_path: Some(termination_message_path.clone()),
                log_file: log_file.clone(),
                stderr_file: stderr_file.clone(),
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| RunnerError::Runtime(e).to_string())?;
            let report = runtime
                .block_on(async {
                    let (signals, rx) = Signals::channel();
                    signals.listen_to_os()?;
                    exec(&opts, rx, &mut tokio::io::stdout()).await
                })
                .map_err(|e| e.to_string());
            let stored = tee.is_some_and(log_ship::Tee::finish);
            let mut report = report?;
            if stored {
                report.log_stored = true;
                runtime
                    .block_on(write_report(&opts, &report))
                    .map_err(|e| e.to_string())?;
            }
            match report.error {
                None => Ok(()),
                Some(error) => Err(match report.message {
                    Some(m) => format!("{error}: {m}"),
                    None => error,
                }),
            }
        }
    }
}
