//! `terrace runner remote`: one phase (plan or apply) of a workspace run, inside the
//! run's Pod (docs/runs.md, "What runs where").
//!
//! The engine container runs this command; everything it and the engine print is the
//! phase's log: the engine's JSON UI (`-json`) with structured run output, which the
//! terraform CLI renders and the API serves as text to other readers, else plain text
//! (`-no-color`) the CLI prints line by line.
//! The steps:
//!
//! 1. Three preamble lines (the engine's version, the platform, "Initializing…"): the
//!    CLI skips the first three lines of an apply log unconditionally.
//! 2. Download the configuration archive from the API server with the run's token
//!    (`GET {api}/api/v2/runner/runs/{run}/archive`) and unpack it with the rules of
//!    `terrace runner fetch`.
//! 3. In the workspace's working directory, write an override file that points the
//!    configuration's backend (`cloud` block or none) at a local state file, and put the
//!    workspace's current state there (`GET …/state`; 204 means none). The engine never
//!    talks to the API: the run holds the workspace's lock, and this runner writes the
//!    new state back as the run's state version.
//! 4. `init`, then `plan -out` (with the run's flags and var-files), `show -json` of the
//!    plan (counted into the [`PhaseReport`]), and upload the plan file and its JSON
//!    (`PUT …/plan`, `PUT …/plan-json`); or, for the apply, download the plan file,
//!    `apply` it and upload the state (`PUT …/state`) — also after a failed or
//!    interrupted apply, so what was created is never lost.
//! 5. The [`PhaseReport`] as the container's termination message.
//!
//! A health assessment (`assessment` in the options) is a plan phase whose plan is
//! refresh-only with detailed exit codes; it uploads the JSON plan and the provider
//! schemas, never a plan file or state, and reports what it found ([`assess`]).
//!
//! A SIGTERM (the Pod deleted for a cancel) becomes a SIGINT for the engine, which then
//! stops gracefully; the runner waits for it and still uploads the state.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};
use terrace_crds::run::{Phase, PhaseReport, count_changes};

use super::api::Api;
use super::bundle::*;
use super::error::{StepError, step};
use super::fetch::{FetchLimits, read_token, unpack};
use super::process::*;
use super::snapshots::*;

/// Name of the override file that points the backend at the local state file.
pub const OVERRIDE_FILE: &str = "zzz_terrace_backend_override.tf";
/// Where the runner keeps its own files (state, plan) inside the workspace volume.
pub const DATA_DIR: &str = ".terrace";
/// The local state file, in [`DATA_DIR`].
pub const STATE_FILE: &str = "terraform.tfstate";

/// How a run's engine is invoked: the run's flags, in the run's Secret as JSON (key
/// `run.json`), so the Pod's command line stays short and fixed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunOptions {
    #[serde(default)]
    pub working_directory: String,
    #[serde(default)]
    pub is_destroy: bool,
    #[serde(default = "yes")]
    pub refresh: bool,
    #[serde(default)]
    pub refresh_only: bool,
    #[serde(default)]
    pub target_addrs: Vec<String>,
    #[serde(default)]
    pub replace_addrs: Vec<String>,
    /// The workspace's `terraform-version`: the engine must satisfy it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terraform_version: Option<String>,
    /// The hostname terrace is known by: with it, the engine gets a CLI configuration for
    /// that host with the run's credential ([`cli_config_for_run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The Run object's name (the run's credential names it).
    #[serde(default)]
    pub run_object: String,
    /// TFE's run environment (`TFC_RUN_ID`, `TFC_WORKSPACE_NAME`, …), for the engine.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub environment: std::collections::BTreeMap<String, String>,
    /// Structured run output: the engine's plan and apply write their JSON UI (`-json`)
    /// instead of plain text (`-no-color`).
    #[serde(default)]
    pub json_log: bool,
    /// A health assessment (docs/health.md): the plan is refresh-only with detailed exit
    /// codes (2, drift, is a success), its JSON and the provider schemas are uploaded,
    /// and the report carries what it found; no plan file is kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub assessment: bool,
}

impl RunOptions {
    /// The engine's output flag: `-json` or `-no-color`.
    fn output_flag(&self) -> String {
        if self.json_log { "-json" } else { "-no-color" }.to_owned()
    }
}

/// The file of the engine's CLI configuration, in the runner's directory.
pub const CLI_CONFIG_FILE: &str = "terraform.rc";

/// The engine's CLI configuration in a run: `hostname` mapped to the API at `api`, with
/// the run's credential (made from its runner token).
pub fn cli_config_for_run(
    hostname: &str,
    api: &str,
    runner_token: &str,
    run_object: &str,
) -> String {
    terrace_crds::common::cli_config(
        hostname,
        api.trim_end_matches('/'),
        &terrace_crds::run::run_credential(runner_token, run_object),
    )
}

fn yes() -> bool {
    true
}

/// The arguments of `terrace runner remote`.
#[derive(Clone, Debug, Args)]
pub struct RemoteArgs {
    /// `plan` or `apply`.
    #[arg(long)]
    pub phase: String,
    /// The API server's base URL (e.g. `http://terrace-api:8080`).
    #[arg(long, env = "TERRACE_API_URL")]
    pub api: String,
    /// The run's ID.
    #[arg(long, env = "TERRACE_RUN_ID")]
    pub run: String,
    /// File holding the run's token.
    #[arg(long, env = "TERRACE_RUN_TOKEN_FILE")]
    pub token_file: PathBuf,
    /// The run's options ([`RunOptions`] as JSON).
    #[arg(long)]
    pub options_file: Option<PathBuf>,
    /// Var-files passed to the engine, in order (later ones win).
    #[arg(long)]
    pub var_file: Vec<PathBuf>,
    /// Directory to unpack the configuration into.
    #[arg(long, default_value = "/workspace")]
    pub dest: PathBuf,
    /// Where the termination message is written.
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_message_path: PathBuf,
    /// The engine program.
    #[arg(last = true, required = true)]
    pub engine: Vec<String>,
}

/// Writes `text` to a new file only its owner may read (it holds the run's credential).
fn write_private(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

/// Warns, in the plan's log, of each module `init` installed from terrace's registry
/// whose version is deprecated (the registry's document of the version, read with the
/// run's credential). Best effort: a registry that does not answer warns of nothing.
fn warn_of_deprecated_modules(dir: &Path, opts: &RunOptions, api: &str, runner_token: &str) {
    use terrace_crds::registry::{deprecation_warning, installed_from};
    let Some(host) = opts.hostname.as_deref().filter(|h| !h.is_empty()) else {
        return;
    };
    let Ok(manifest) = std::fs::read(dir.join(".terraform/modules/modules.json")) else {
        return;
    };
    let installed = installed_from(&manifest, host);
    if installed.is_empty() {
        return;
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let credential = terrace_crds::run::run_credential(runner_token, &opts.run_object);
    for i in installed {
        let url = format!(
            "{}/api/registry/v1/modules/{}/{}",
            api.trim_end_matches('/'),
            i.module,
            i.version
        );
        let doc: Option<serde_json::Value> = agent
            .get(&url)
            .header("Authorization", format!("Bearer {credential}"))
            .call()
            .ok()
            .filter(|r| r.status() == 200)
            .and_then(|mut r| r.body_mut().read_to_vec().ok())
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(d) = doc
            .as_ref()
            .map(|d| &d["deprecation"])
            .filter(|d| d.is_object())
        else {
            continue;
        };
        let text = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
        let (summary, detail) = deprecation_warning(&i, host, &text("reason"), &text("link"));
        if opts.json_log {
            say(&serde_json::json!({
                "@level": "warn",
                "@message": format!("Warning: {summary}"),
                "@module": "terraform.ui",
                "type": "diagnostic",
                "diagnostic": {"severity": "warning", "summary": summary, "detail": detail},
            })
            .to_string());
        } else {
            say(&format!("\nWarning: {summary}\n\n{detail}\n"));
        }
    }
}

/// The three preamble lines (the CLI skips the first three lines of an apply's log).
fn preamble(program: &str) {
    let version = std::process::Command::new(program)
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| program.to_owned());
    say(&version);
    say(&format!(
        "on {}_{}",
        std::env::consts::OS,
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    ));
    say("Initializing plugins and modules...");
}

/// Checks that the engine's version satisfies the workspace's `terraform-version`. An
/// OpenTofu engine is not checked: its versions are not terraform's.
fn check_version(program: &str, wanted: &str) -> Result<(), StepError> {
    let name = Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.contains("tofu") {
        return Ok(());
    }
    let out = run_quiet(Path::new("."), program, &["version", "-json"])?;
    let have = serde_json::from_slice::<serde_json::Value>(&out)
        .ok()
        .and_then(|v| v["terraform_version"].as_str().map(str::to_owned))
        .ok_or_else(|| StepError(format!("{program} did not say its version")))?;
    match terrace_crds::run::version_satisfies(wanted, &have) {
        Ok(true) => Ok(()),
        Ok(false) => Err(StepError(format!(
            "Engine version mismatch: the workspace's terraform-version is {wanted:?}, the engine in this Pod ({program}) is version {have}. Change the workspace's terraform-version, or run a matching engine (in a cluster: engine.image with a {{version}} tag; under terrace dev: --engine)"
        ))),
        Err(e) => Err(StepError(format!("the workspace's terraform-version: {e}"))),
    }
}

/// The override file's text: the backend is a local state file at `state`.
pub fn override_text(state: &Path) -> String {
    let path = state
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!("terraform {{\n  backend \"local\" {{\n    path = \"{path}\"\n  }}\n}}\n")
}

/// The engine arguments of a plan with these options and var-files.
pub fn plan_args(opts: &RunOptions, plan_file: &Path, var_files: &[PathBuf]) -> Vec<String> {
    let mut args = vec![
        "plan".to_owned(),
        "-input=false".to_owned(),
        opts.output_flag(),
        format!("-out={}", plan_file.display()),
    ];
    if opts.is_destroy {
        args.push("-destroy".to_owned());
    }
    if !opts.refresh {
        args.push("-refresh=false".to_owned());
    }
    if opts.refresh_only || opts.assessment {
        args.push("-refresh-only".to_owned());
    }
    if opts.assessment {
        args.push("-detailed-exitcode".to_owned());
    }
    for t in &opts.target_addrs {
        args.push(format!("-target={t}"));
    }
    for r in &opts.replace_addrs {
        args.push(format!("-replace={r}"));
    }
    for f in var_files {
        args.push(format!("-var-file={}", f.display()));
    }
    args
}

/// Runs one phase; the report says how it ended (the `Err` of a step is a failed report).
pub fn remote(args: &RemoteArgs) -> PhaseReport {
    let tee = log_target(args).and_then(|target| match super::log_ship::start(target) {
        Ok(tee) => Some(tee),
        Err(e) => {
            eprintln!("terrace runner: the log is kept in the Pod's log only: {e}");
            None
        }
    });
    let mut report = match phase(args) {
        Ok(r) => r,
        Err(e) => {
            // The line the API server ends a failed phase's log with (the run's cause):
            // it sees the log ends with it, and does not say it twice.
            say("");
            print_bytes(terrace_crds::run::logs::cause_line(&e.0).as_bytes());
            PhaseReport {
                ok: false,
                message: Some(e.0),
                ..PhaseReport::default()
            }
        }
    };
    report.log_stored = tee.is_some_and(super::log_ship::Tee::finish);
    let message = serde_json::to_string(&report).unwrap_or_default();
    if let Err(e) = std::fs::write(&args.termination_message_path, message) {
        eprintln!(
            "writing the termination message to {}: {e}",
            args.termination_message_path.display()
        );
    }
    report
}

/// Where the phase's log parts go (`…/runner/runs/{run}/log/{phase}`), with the run's
/// token; `None` (the log stays in the Pod's log only) without a token.
fn log_target(args: &RemoteArgs) -> Option<super::log_ship::LogTarget> {
    let token = read_token(&args.token_file).ok()?;
    let phase: Phase = args.phase.parse().ok()?;
    Some(super::log_ship::LogTarget {
        url: format!(
            "{}/api/v2/runner/runs/{}/log/{}",
            args.api.trim_end_matches('/'),
            args.run,
            phase.as_str()
        ),
        token,
    })
}

fn phase(args: &RemoteArgs) -> Result<PhaseReport, StepError> {
    let phase: Phase = args.phase.parse().map_err(step("--phase"))?;
    let program = args
        .engine
        .first()
        .ok_or_else(|| StepError("no engine command given".into()))?;
    let current = Arc::new(Current::default());
    listen(current.clone())?;
    preamble(program);
    let token = read_token(&args.token_file).map_err(step("the run token"))?;
    let opts: RunOptions = match &args.options_file {
        Some(f) => serde_json::from_slice(&std::fs::read(f).map_err(step("the run options"))?)
            .map_err(step("the run options"))?,
        None => RunOptions::default(),
    };
    if let Some(wanted) = opts.terraform_version.as_deref() {
        check_version(program, wanted)?;
    }
    let api = Api::new(&args.api, &args.run, token.clone());
    let limits = FetchLimits::default();
    let archive = api
        .get("archive", limits.max_archive_bytes)?
        .ok_or_else(|| StepError("the configuration archive is gone".into()))?;
    unpack(archive.as_slice(), &args.dest, &limits).map_err(step("unpacking the configuration"))?;
    let root = args.dest.canonicalize().map_err(step("the workspace"))?;
    let dir = working_dir(&root, &opts.working_directory)?;
    // In the working directory, named relatively: the plan file records the backend,
    // and the apply runs in another Pod (another absolute path under a simulator).
    let data = dir.join(DATA_DIR);
    std::fs::create_dir_all(&data).map_err(step("the runner's directory"))?;
    let state_rel = Path::new(DATA_DIR).join(STATE_FILE);
    let state_file = dir.join(&state_rel);
    std::fs::write(dir.join(OVERRIDE_FILE), override_text(&state_rel))
        .map_err(step("writing the backend override"))?;
    let mut env: Vec<(String, String)> = opts
        .environment
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // The engine reaches terrace as the CLI does (its own configuration, if the
    // workspace sets TF_CLI_CONFIG_FILE, wins).
    if let Some(host) = opts.hostname.as_deref().filter(|h| !h.is_empty())
        && std::env::var_os("TF_CLI_CONFIG_FILE").is_none()
    {
        let file = data.join(CLI_CONFIG_FILE);
        write_private(
            &file,
            &cli_config_for_run(host, &args.api, &token, &opts.run_object),
        )
        .map_err(step("writing the CLI configuration"))?;
        env.push(("TF_CLI_CONFIG_FILE".to_owned(), file.display().to_string()));
    }
    let _ = ENGINE_ENV.set(env);
    let before = api.get("state", 1 << 30)?;
    if let Some(s) = &before {
        std::fs::write(&state_file, s).map_err(step("writing the current state"))?;
    }
    let plan_file = data.join("tfplan");
    if phase == Phase::Apply {
        // The plan and the provider lock file the plan's init wrote: the apply installs
        // the same providers.
        let bundle = api
            .get("plan", 1 << 30)?
            .ok_or_else(|| StepError("the run's plan file is gone".into()))?;
        let (plan, lock) = open_bundle(&bundle).map_err(step("reading the plan bundle"))?;
        std::fs::write(&plan_file, plan).map_err(step("writing the plan file"))?;
        if let Some(lock) = lock {
            std::fs::write(dir.join(LOCK_FILE), lock).map_err(step("writing the lock file"))?;
        }
    }
    run_quiet(&dir, program, &["init", "-input=false", "-no-color"])?;
    if phase == Phase::Plan {
        warn_of_deprecated_modules(&dir, &opts, &args.api, &token);
    }
    let var_files = local_var_files(&dir, &args.var_file)?;
    match phase {
        Phase::Plan if opts.assessment => assess(&api, &current, &dir, program, &var_files, &opts),
        Phase::Plan => {
            if !run_logged(
                &current,
                &dir,
                program,
                &plan_args(&opts, &plan_file, &var_files),
            )? {
                return Err(StepError(if current.interrupted.load(Ordering::SeqCst) {
                    "the plan was interrupted".into()
                } else {
                    "the plan failed".into()
                }));
            }
            let json = run_quiet(
                &dir,
                program,
                &["show", "-json", &plan_file.display().to_string()],
            )?;
            let parsed: serde_json::Value =
                serde_json::from_slice(&json).map_err(step("reading the plan's JSON"))?;
            let plan = std::fs::read(&plan_file).map_err(step("reading the plan file"))?;
            let lock = std::fs::read(dir.join(LOCK_FILE)).ok();
            let bundle =
                make_bundle(&plan, lock.as_deref()).map_err(step("packing the plan bundle"))?;
            api.put("plan", &bundle)?;
            api.put("plan-json", &json)?;
            // The redacted plan the CLI renders (`terraform show` of a saved plan): the
            // provider schemas come from the engine.
            let schemas = run_quiet(&dir, program, &["providers", "schema", "-json"])?;
            let schemas: serde_json::Value =
                serde_json::from_slice(&schemas).map_err(step("reading the provider schemas"))?;
            let salt: [u8; 16] = rand::random();
            let redacted = terrace_crds::run::redact::redacted_plan(&parsed, &schemas, &salt);
            api.put(
                "plan-json-redacted",
                &serde_json::to_vec(&redacted).map_err(step("writing the redacted plan"))?,
            )?;
            Ok(count_changes(&parsed))
        }
        Phase::Apply => {
            let snapshots = Snapshots::start(api.clone(), state_file.clone(), before.as_deref());
            let applied = run_logged(
                &current,
                &dir,
                program,
                &[
                    "apply".to_owned(),
                    "-input=false".to_owned(),
                    opts.output_flag(),
                    plan_file.display().to_string(),
                ],
            );
            let (saved, serial) = snapshots.stop();
            let applied = applied?;
            // What the engine wrote is kept even when the apply failed half way.
            let after = std::fs::read(&state_file).ok();
            match &after {
                Some(a) if after != before && after != saved => {
                    api.put("state", &with_serial(a, serial + 1))?
                }
                Some(_) => {}
                None if applied => {
                    return Err(StepError(format!(
                        "the engine wrote no state file at {}",
                        state_file.display()
                    )));
                }
                None => {}
            }
            if !applied {
                return Err(StepError(if current.interrupted.load(Ordering::SeqCst) {
                    "the apply was interrupted".into()
                } else {
                    "the apply failed".into()
                }));
            }
            Ok(PhaseReport {
                ok: true,
                ..PhaseReport::default()
            })
        }
    }
}

/// The run's var-files (mounted from its Secret) copied into [`DATA_DIR`] of the working
/// directory `dir`, named relatively: what the engine says of them (a value for an
/// undeclared variable) names `.terrace/workspace.tfvars`, not a path of the Pod.
fn local_var_files(dir: &Path, mounted: &[PathBuf]) -> Result<Vec<PathBuf>, StepError> {
    let mut out = Vec::new();
    for f in mounted {
        let name = f
            .file_name()
            .ok_or_else(|| StepError(format!("{}: no file name", f.display())))?;
        let rel = Path::new(DATA_DIR).join(name);
        std::fs::copy(f, dir.join(&rel)).map_err(step("copying the run's variables"))?;
        out.push(rel);
    }
    Ok(out)
}

/// The plan of a health assessment: `plan -refresh-only -detailed-exitcode` (exit 0: no
/// drift, 2: drift, both successes), then the JSON plan and the provider schemas
/// uploaded (the result's `json-output` and `json-schema`), and what they say of the
/// workspace's health in the report ([`terrace_crds::assessment::assess`]). The state
/// is never written back and the plan file is not kept.
fn assess(
    api: &Api,
    current: &Current,
    dir: &Path,
    program: &str,
    var_files: &[PathBuf],
    opts: &RunOptions,
) -> Result<PhaseReport, StepError> {
    let plan_file = dir.join(DATA_DIR).join("tfplan");
    let code = run_logged_code(
        current,
        dir,
        program,
        &plan_args(opts, &plan_file, var_files),
    )?;
    if !matches!(code, Some(0 | 2)) {
        return Err(StepError(if current.interrupted.load(Ordering::SeqCst) {
            "the assessment was interrupted".into()
        } else {
            "the refresh-only plan failed (its log says why)".into()
        }));
    }
    let json = run_quiet(
        dir,
        program,
        &["show", "-json", &plan_file.display().to_string()],
    )?;
    let parsed: serde_json::Value =
        serde_json::from_slice(&json).map_err(step("reading the plan's JSON"))?;
    api.put("plan-json", &json)?;
    let schemas = run_quiet(dir, program, &["providers", "schema", "-json"])?;
    api.put("provider-schemas", &schemas)?;
    let found = terrace_crds::assessment::assess(&parsed).summary();
    let mut report = count_changes(&parsed);
    report.assessment = Some(found);
    Ok(report)
}

/// The working directory inside the unpacked configuration (no `..`, no absolute path).
fn working_dir(root: &Path, rel: &str) -> Result<PathBuf, StepError> {
    let rel = rel.trim_matches('/');
    if rel.is_empty() {
        return Ok(root.to_owned());
    }
    let p = Path::new(rel);
    if p.components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(StepError(format!(
            "the working directory {rel:?} is not a relative path inside the configuration"
        )));
    }
    let dir = root.join(p);
    if !dir.is_dir() {
        return Err(StepError(format!(
            "the working directory {rel:?} does not exist in the configuration"
        )));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_arguments() {
        let opts = RunOptions {
            is_destroy: true,
            refresh: false,
            target_addrs: vec!["terraform_data.a".into()],
            replace_addrs: vec!["terraform_data.b".into()],
            ..RunOptions::default()
        };
        let args = plan_args(
            &opts,
            Path::new("/w/.terrace/tfplan"),
            &[PathBuf::from("/v/a.tfvars")],
        );
        assert_eq!(
            args,
            [
                "plan",
                "-input=false",
                "-no-color",
                "-out=/w/.terrace/tfplan",
                "-destroy",
                "-refresh=false",
                "-target=terraform_data.a",
                "-replace=terraform_data.b",
                "-var-file=/v/a.tfvars"
            ]
        );
        let defaults: RunOptions = serde_json::from_str("{}").unwrap();
        assert!(defaults.refresh);
        let structured = RunOptions {
            json_log: true,
            ..RunOptions::default()
        };
        let args = plan_args(&structured, Path::new("/p"), &[]);
        assert_eq!(args[..4], ["plan", "-input=false", "-json", "-out=/p"]);
    }

    #[test]
    fn an_assessment_plans_refresh_only_with_detailed_exit_codes() {
        let opts = RunOptions {
            assessment: true,
            json_log: true,
            refresh: true,
            ..RunOptions::default()
        };
        let args = plan_args(&opts, Path::new("/p"), &[PathBuf::from("/v/w.tfvars")]);
        assert_eq!(
            args,
            [
                "plan",
                "-input=false",
                "-json",
                "-out=/p",
                "-refresh-only",
                "-detailed-exitcode",
                "-var-file=/v/w.tfvars"
            ]
        );
    }

    #[test]
    fn working_directories() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("envs/dev")).unwrap();
        assert_eq!(working_dir(root.path(), "").unwrap(), root.path());
        assert_eq!(
            working_dir(root.path(), "/envs/dev/").unwrap(),
            root.path().join("envs/dev")
        );
        assert!(working_dir(root.path(), "../x").is_err());
        assert!(working_dir(root.path(), "missing").is_err());
    }

    #[test]
    fn override_points_at_the_state_file() {
        let t = override_text(Path::new(".terrace/terraform.tfstate"));
        assert!(t.contains("backend \"local\""));
        assert!(t.contains("path = \".terrace/terraform.tfstate\""));
    }

    #[test]
    fn plan_bundles() {
        let b = make_bundle(b"plan bytes", Some(b"provider lock")).unwrap();
        assert_eq!(
            open_bundle(&b).unwrap(),
            (b"plan bytes".to_vec(), Some(b"provider lock".to_vec()))
        );
        let b = make_bundle(b"plan", None).unwrap();
        assert_eq!(open_bundle(&b).unwrap(), (b"plan".to_vec(), None));
        assert!(open_bundle(b"not a bundle").is_err());
    }

    #[test]
    fn one_serial_per_run() {
        let after = br#"{"version":4,"serial":7,"lineage":"l","resources":[]}"#;
        let v: serde_json::Value = serde_json::from_slice(&with_serial(after, 1)).unwrap();
        assert_eq!(
            (v["serial"].as_i64(), v["lineage"].as_str()),
            (Some(1), Some("l"))
        );
        let before = br#"{"version":4,"serial":3,"lineage":"l"}"#;
        assert_eq!(serial_of(before), Some(3));
        assert_eq!(serial_of(b"not json"), None);
        assert_eq!(with_serial(b"not json", 4), b"not json");
    }
}
