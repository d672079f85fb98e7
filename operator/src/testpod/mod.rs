//! The test Pod of a TestRun (DESIGN.md §3, "Test run Pod contract") as pure functions:
//! the TestRun, its module's test variables, the Organization's `testRuns` settings and the
//! operator settings go in; the Pod and the Secret holding its one-time token come out.
//!
//! The Pod:
//! - is owned by the TestRun (controller reference) and carries the [`FINALIZER`], so it
//!   stays readable until the controller has recorded the outcome;
//! - `restartPolicy: Never`, labels [`LABEL_TEST_RUN`] (the run's ID) and the
//!   organization, emptyDirs `workspace` (`/workspace`) and `tools` (`/terrace`);
//! - init container `install-terrace` (the terrace image) copies the `terrace` binary
//!   into `/terrace`;
//! - init container `fetch` runs `terrace runner fetch` with the token file of the
//!   Secret (key [`SECRET_KEY_TOKEN`], mounted at [`SECRET_DIR`]);
//! - container `engine` (the engine image) runs `terrace runner exec -- <engine> test
//!   -json …` in `/workspace`, non-interactive ([`ENGINE_ENV`]: no checkpoint calls, no
//!   input). Module variables are its environment, verbatim (their category is `env`; a
//!   sensitive one comes from its Secret through `secretKeyRef`), except `hcl` ones named
//!   `TF_VAR_<name>`, whose values are expressions: they go into the var-file as
//!   `<name> = <value>`. The run's `variables` are HCL lines of that var-file too (a key
//!   both define keeps the run's value), the Secret's key [`SECRET_KEY_TFVARS`], mounted
//!   alone at [`SECRET_DIR`] in this container and passed as `-var-file`; a var-file wins
//!   over `TF_VAR_*` environment variables, so the run's values take precedence over
//!   module variables of the same name.
//!
//! ## Archive URL contract (with the API server)
//! The fetch init container downloads `{api_internal_url}/api/v2/test-archives/{cv-id}`
//! (see [`archive_url`]) with `Authorization: Bearer <token>`. The token is 32 random
//! bytes, base64url without padding ([`new_token`]), stored only in the run's Secret
//! `<testrun-object-name>-run` (same namespace, owned by the TestRun) under key
//! [`SECRET_KEY_TOKEN`]; the TestRun's status never carries it. The API server finds the
//! Secret through its label [`LABEL_TEST_RUN`] (the run's ID) and the configuration
//! version ID in label [`LABEL_CONFIGURATION_VERSION`], and answers the archive once.
//!
//! ## Log archive contract (with the API server)
//! See [`log_archive`]: the engine log of a finished run, gzip-compressed in a ConfigMap.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, KeyToPath, Pod, Secret, SecretVolumeSource, Volume,
};
use kube::ResourceExt;
use rand::RngCore;
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{TestRun, TestRunSettings, TestVariable};

use crate::pod_parts::{self, empty_dir, mount, owned_meta};

/// The Pod contract's names and paths, shared with the Pods of runs.
pub use crate::pod_parts::{
    ENGINE_CONTAINER, ENGINE_ENV, INSTALL_CONTAINER, TERMINATION_MESSAGE_PATH, TOOLS_DIR,
    WORKSPACE_DIR,
};
use crate::{Error, Settings};

pub mod log_archive;

pub use log_archive::{
    LOG_ARCHIVE_KEY, LOG_ARCHIVE_MAX, build_log_archive, build_log_archive_for, gzip,
    log_archive_name, log_tail, with_cause,
};

/// Finalizer on test Pods: the controller removes it after recording the run's outcome.
pub const FINALIZER: &str = "terrace.dev/test-run";
/// Label on test Pods and Secrets: the TestRun's ID (`trun-…`).
pub const LABEL_TEST_RUN: &str = "terrace.dev/test-run";
/// Label on the token Secret: the ID of the configuration version the token unlocks.
pub const LABEL_CONFIGURATION_VERSION: &str = "terrace.dev/configuration-version";
/// Secret key of the one-time archive token.
pub const SECRET_KEY_TOKEN: &str = "token";
/// Secret key of the token the runner stores the run's log with (`PUT
/// {api}/api/v2/runner/test-runs/{id}/log/{part}`, [`log_url`]).
pub const SECRET_KEY_LOG_TOKEN: &str = "log-token";
/// Where the engine container finds the log token.
pub const LOG_TOKEN_DIR: &str = "/var/run/terrace-log";
/// Secret key of the run's variables as HCL `key = value` lines.
pub const SECRET_KEY_TFVARS: &str = "run.tfvars";
/// Where the Secret is mounted (the token in `fetch`, the var-file in `engine`).
pub const SECRET_DIR: &str = "/var/run/terrace";
/// Name of the init container fetching the archive.
pub const FETCH_CONTAINER: &str = "fetch";
/// The runner's copy of the engine log inside the workspace.
pub const LOG_FILE: &str = "/workspace/.terrace/test.log";
/// Where the runner keeps the engine's stderr (never part of the run's log).
pub const STDERR_FILE: &str = "/workspace/.terrace/engine.stderr";
/// Prefix of the environment variables that set the engine's input variables.
const TF_VAR_PREFIX: &str = "TF_VAR_";

/// The longest object name Kubernetes accepts (DNS subdomain).
const MAX_NAME: usize = 253;
const NAME_SUFFIX: &str = "-run";

/// Name of the Pod (and of the token Secret) of the TestRun object `run_name`:
/// deterministic, so a restarted controller finds the Pod instead of starting a second.
/// Names too long for the suffix are cut (a trailing `-` or `.` is dropped so the result
/// stays a valid DNS subdomain).
pub fn pod_name(run_name: &str) -> String {
    terrace_crds::common::name_with_suffix(run_name, NAME_SUFFIX, MAX_NAME)
}

/// The URL the fetch init container downloads the archive of configuration version
/// `cv_id` from (see the module docs for the contract).
pub fn archive_url(api_internal_url: &str, cv_id: &str) -> String {
    format!(
        "{}/api/v2/test-archives/{cv_id}",
        api_internal_url.trim_end_matches('/')
    )
}

/// Where the runner of test run `run_id` stores the parts of its log.
pub fn log_url(api_internal_url: &str, run_id: &str) -> String {
    format!(
        "{}/api/v2/runner/test-runs/{run_id}/log",
        api_internal_url.trim_end_matches('/')
    )
}

/// A new one-time archive token: 32 random bytes, base64url without padding.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The input variable a module test variable sets through the var-file: an `hcl`,
/// non-sensitive variable (its value in the spec) named `TF_VAR_<name>`.
fn hcl_input(v: &TestVariable) -> Option<&str> {
    if !v.spec.hcl || v.spec.value_from.is_some() || v.spec.sensitive {
        return None;
    }
    v.spec
        .key
        .strip_prefix(TF_VAR_PREFIX)
        .filter(|n| !n.is_empty())
}

/// The run's var-file: one `name = value` line each for the module's `hcl` input
/// variables ([`hcl_input`]) and the run's variables, values verbatim (they are
/// expressions of the configuration language), sorted by name. The run's value of a name
/// wins over the module's; a key the run gives twice keeps its last value, as the
/// engine's `-var` flags do.
pub fn run_tfvars(run: &TestRun, variables: &[TestVariable]) -> String {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for v in module_variables(run, variables) {
        if let Some(name) = hcl_input(v) {
            last.insert(name, &v.spec.value);
        }
    }
    for v in &run.spec.variables {
        last.insert(&v.key, &v.value);
    }
    let mut out = String::new();
    for (k, v) in last {
        out.push_str(k);
        out.push_str(" = ");
        out.push_str(v);
        out.push('\n');
    }
    out
}

/// The engine command line: `<engine> test -json [-verbose] [-test-directory D]
/// [-filter F]… [-var-file …]` (the var-file when [`run_tfvars`] has lines).
pub fn engine_command(engine: &str, run: &TestRun, var_file: bool) -> Vec<String> {
    let spec = &run.spec;
    let mut cmd = vec![engine.to_owned(), "test".to_owned(), "-json".to_owned()];
    if spec.verbose {
        cmd.push("-verbose".to_owned());
    }
    if !spec.test_directory.is_empty() {
        cmd.push("-test-directory".to_owned());
        cmd.push(spec.test_directory.clone());
    }
    for f in &spec.filters {
        cmd.push("-filter".to_owned());
        cmd.push(f.clone());
    }
    if var_file {
        cmd.push("-var-file".to_owned());
        cmd.push(format!("{SECRET_DIR}/{SECRET_KEY_TFVARS}"));
    }
    cmd
}

/// The module's test variables (those whose `spec.module` is the run's module), sorted by
/// key; a key defined twice keeps the variable with the smallest object name, so the
/// choice does not depend on list order.
fn module_variables<'a>(run: &TestRun, variables: &'a [TestVariable]) -> Vec<&'a TestVariable> {
    let mut chosen: BTreeMap<&str, &TestVariable> = BTreeMap::new();
    for v in variables
        .iter()
        .filter(|v| v.spec.module == run.spec.module)
    {
        match chosen.get(v.spec.key.as_str()) {
            Some(prev) if prev.name_any() <= v.name_any() => {}
            _ => {
                chosen.insert(&v.spec.key, v);
            }
        }
    }
    chosen.into_values().collect()
}

/// The module's test variables as environment of the engine container (see
/// [`module_variables`]), but the `hcl` inputs that go into the var-file. A variable
/// with `valueFrom` reads its Secret key through `secretKeyRef`.
pub fn module_env(run: &TestRun, variables: &[TestVariable]) -> Vec<EnvVar> {
    module_variables(run, variables)
        .into_iter()
        .filter(|v| hcl_input(v).is_none())
        .map(|v| {
            pod_parts::env_var(
                v.spec.key.clone(),
                &v.spec.value,
                v.spec.value_from.as_ref(),
            )
        })
        .collect()
}

/// Everything a test Pod is built from.
pub struct PodInputs<'a> {
    /// The run (must have a name, namespace and uid: it owns the Pod).
    pub run: &'a TestRun,
    /// The run's ID (its `terrace.dev/id` label).
    pub run_id: &'a str,
    /// Name of the Organization owning the run's namespace.
    pub organization: &'a str,
    /// ID of the configuration version to test.
    pub configuration_version_id: &'a str,
    /// The namespace's test variables (those of other modules are ignored).
    pub variables: &'a [TestVariable],
    /// The Organization's `spec.settings.testRuns`.
    pub org_settings: &'a TestRunSettings,
    /// The operator's settings.
    pub settings: &'a Settings,
}

fn our_labels(inputs: &PodInputs<'_>) -> BTreeMap<String, String> {
    pod_parts::labels(LABEL_TEST_RUN, inputs.run_id, inputs.organization)
}

/// The whole environment of the engine container: [`ENGINE_ENV`], then the module's
/// variables ([`module_env`]), which win over it.
pub fn engine_env(run: &TestRun, variables: &[TestVariable]) -> Vec<EnvVar> {
    pod_parts::with_engine_env(module_env(run, variables))
}

/// The Secret of the run: the one-time `token` and the var-file `run.tfvars`.
pub fn build_secret(inputs: &PodInputs<'_>, token: &str) -> Result<Secret, Error> {
    let mut labels = our_labels(inputs);
    labels.insert(
        LABEL_CONFIGURATION_VERSION.to_owned(),
        inputs.configuration_version_id.to_owned(),
    );
    let metadata = owned_meta(
        inputs.run,
        "test run",
        pod_name(&inputs.run.name_any()),
        labels,
    )?;
    Ok(pod_parts::opaque_secret(
        metadata,
        [
            (SECRET_KEY_TOKEN, token.as_bytes().to_vec()),
            (SECRET_KEY_LOG_TOKEN, new_token().into_bytes()),
            (
                SECRET_KEY_TFVARS,
                run_tfvars(inputs.run, inputs.variables).into_bytes(),
            ),
        ],
    ))
}

fn secret_volume(name: &str, secret: &str, key: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(vec![KeyToPath {
                key: key.to_owned(),
                path: key.to_owned(),
                mode: None,
            }]),
            default_mode: Some(0o440),
            optional: Some(false),
        }),
        ..Default::default()
    }
}

/// The test Pod of the run (see the module docs).
pub fn build_pod(inputs: &PodInputs<'_>) -> Result<Pod, Error> {
    let run = inputs.run;
    let overrides = &inputs
        .org_settings
        .pod_template
        .over(&inputs.settings.test_pod_template);
    let meta = pod_parts::pod_meta(
        run,
        "test run",
        pod_name(&run.name_any()),
        our_labels(inputs),
        overrides,
        FINALIZER,
    )?;
    let engine_image = pod_parts::configured_engine_image(inputs.org_settings, inputs.settings);
    let terrace = pod_parts::terrace_binary();
    let has_vars = !run_tfvars(run, inputs.variables).is_empty();

    let fetch = Container {
        name: FETCH_CONTAINER.to_owned(),
        image: Some(inputs.settings.terrace_image.clone()),
        command: Some(vec![
            terrace.clone(),
            "runner".to_owned(),
            "fetch".to_owned(),
            "--url".to_owned(),
            archive_url(
                &inputs.settings.api_internal_url,
                inputs.configuration_version_id,
            ),
            "--token-file".to_owned(),
            format!("{SECRET_DIR}/{SECRET_KEY_TOKEN}"),
            "--dest".to_owned(),
            WORKSPACE_DIR.to_owned(),
        ]),
        volume_mounts: Some(vec![
            mount("tools", TOOLS_DIR, true),
            mount("workspace", WORKSPACE_DIR, false),
            mount("token", SECRET_DIR, true),
        ]),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Default::default()
    };
    let mut command = vec![
        terrace,
        "runner".to_owned(),
        "exec".to_owned(),
        "--termination-message-path".to_owned(),
        TERMINATION_MESSAGE_PATH.to_owned(),
        "--log-file".to_owned(),
        LOG_FILE.to_owned(),
        "--stderr-file".to_owned(),
        STDERR_FILE.to_owned(),
    ];
    command.extend([
        "--log-url".to_owned(),
        log_url(&inputs.settings.api_internal_url, inputs.run_id),
        "--log-token-file".to_owned(),
        format!("{LOG_TOKEN_DIR}/{SECRET_KEY_LOG_TOKEN}"),
        "--".to_owned(),
    ]);
    command.extend(engine_command(
        &inputs.settings.engine_command,
        run,
        has_vars,
    ));
    let mut engine_mounts = vec![
        mount("tools", TOOLS_DIR, true),
        mount("workspace", WORKSPACE_DIR, false),
    ];
    if has_vars {
        engine_mounts.push(mount("run-vars", SECRET_DIR, true));
    }
    engine_mounts.push(mount("log-token", LOG_TOKEN_DIR, true));
    let engine = pod_parts::engine_container(
        engine_image.to_owned(),
        command,
        engine_env(run, inputs.variables),
        overrides,
        engine_mounts,
    );

    let secret = pod_name(&run.name_any());
    let mut volumes = vec![
        empty_dir("workspace"),
        empty_dir("tools"),
        secret_volume("token", &secret, SECRET_KEY_TOKEN),
    ];
    if has_vars {
        volumes.push(secret_volume("run-vars", &secret, SECRET_KEY_TFVARS));
    }
    // Optional: a Secret an older operator made has no log token (the runner then keeps
    // the log in the Pod's log only).
    let mut log_token = secret_volume("log-token", &secret, SECRET_KEY_LOG_TOKEN);
    if let Some(s) = log_token.secret.as_mut() {
        s.optional = Some(true);
    }
    volumes.push(log_token);
    Ok(Pod {
        metadata: meta,
        spec: Some(pod_parts::pod_spec(
            overrides,
            inputs.settings,
            vec![pod_parts::install_container(inputs.settings), fetch],
            engine,
            volumes,
        )),
        status: None,
    })
}

/// The termination message of the `engine` container of `pod`, once it ended.
pub fn engine_message(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == ENGINE_CONTAINER)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?
        .message
        .as_deref()
}

/// The run's ID from its `terrace.dev/id` label (set by the ID controller).
pub fn run_id(run: &TestRun) -> Option<&str> {
    run.labels().get(LABEL_ID).map(String::as_str)
}

#[cfg(test)]
mod tests;
