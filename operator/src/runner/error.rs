//! The runner's own errors.

use std::io;
use std::path::PathBuf;

/// Errors of the runner itself. An engine that fails is not one: it is reported in the
/// [`RunnerReport`](terrace_crds::testoutput::RunnerReport).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("reading the token file {}: {source}", path.display())]
    TokenFile { path: PathBuf, source: io::Error },
    #[error("reading the CA file {}: {message}", path.display())]
    CaFile { path: PathBuf, message: String },
    #[error("downloading the configuration archive: {0}")]
    Download(String),
    #[error("unpacking the configuration archive: {0}")]
    Unpack(String),
    #[error("unsafe archive entry {path:?}: {reason}")]
    UnsafeEntry { path: String, reason: &'static str },
    #[error("the configuration archive exceeds the {what} limit of {limit}")]
    TooLarge { what: &'static str, limit: u64 },
    #[error("no engine command given")]
    NoCommand,
    #[error("opening the log file {}: {source}", path.display())]
    LogFile { path: PathBuf, source: io::Error },
    #[error("writing the termination message to {}: {source}", path.display())]
    TerminationMessage { path: PathBuf, source: io::Error },
    #[error("setting up signal handling: {0}")]
    Signals(io::Error),
    #[error("starting the runtime: {0}")]
    Runtime(io::Error),
}

/// A failure of a step, said in the log and the report.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StepError(pub String);

pub fn step<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> StepError + '_ {
    move |e| StepError(format!("{what}: {e}"))
}
