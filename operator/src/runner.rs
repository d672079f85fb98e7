//! `terrace runner`: the commands that run inside test Pods. `fetch` downloads and unpacks
//! the configuration archive; `exec` runs the engine, relays signals and writes the test
//! summary as the termination message. Only the command line is defined so far: the test
//! Pod contract (DESIGN.md §3) arrives with the module-tests issue.

use clap::Subcommand;

#[derive(Clone, Debug, Subcommand)]
pub enum RunnerCommand {
    /// Download the configuration archive with a one-time token and unpack it.
    Fetch {
        /// URL of the archive on the API server's object endpoint.
        #[arg(long, env = "TERRACE_ARCHIVE_URL")]
        url: String,
        /// File holding the one-time token.
        #[arg(long, env = "TERRACE_ARCHIVE_TOKEN_FILE")]
        token_file: std::path::PathBuf,
        /// Directory to unpack into.
        #[arg(long, default_value = "/workspace")]
        dest: std::path::PathBuf,
    },
    /// Run the engine (`-- tofu test -json …`), parse its output, write the summary.
    Exec {
        /// Where the termination message is written.
        #[arg(long, default_value = "/dev/termination-log")]
        termination_message_path: std::path::PathBuf,
        /// The engine command line.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// Not implemented yet: reports so and fails, rather than pretending to succeed.
pub fn run(command: &RunnerCommand) -> Result<(), String> {
    Err(format!(
        "terrace runner {command:?}: not implemented yet (module tests issue)"
    ))
}
