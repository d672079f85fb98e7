//! The Pods of a Run (docs/runs.md, "What runs where") as pure functions: the Run, the
//! workspace's variables, the Organization's run settings and the operator settings go
//! in; the Secret and the Pod of a phase come out.
//!
//! - The Secret `<run>-run` (owned by the Run, deleted when it ends) holds the run's
//!   token ([`SECRET_KEY_TOKEN`]: the runner's credential for the API server's runner
//!   endpoints of this one run), its options ([`SECRET_KEY_OPTIONS`], see
//!   [`RunOptions`](crate::runner::remote::RunOptions)) and two var-files: the workspace's
//!   `terraform` variables, then the run's own (later wins).
//! - The Pod `<run>-plan` / `<run>-apply`: owned by the Run, finalizer [`FINALIZER`] (kept
//!   until its log is archived), labels [`LABEL_RUN`] and [`LABEL_PHASE`]; init container
//!   `install-terrace`; container `engine` (the engine image) running `terrace runner
//!   remote --phase …`, with the workspace's `env` variables as its environment (a
//!   sensitive one through `secretKeyRef`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Pod, Secret, SecretVolumeSource, Volume};
use kube::ResourceExt;
use terrace_crds::common::SecretKeyRef;
use terrace_crds::run::Phase;
use terrace_crds::{PodTemplateOverrides, Run, TestRunSettings};

use crate::pod_parts::{self, empty_dir, mount, owned_meta};
use crate::runner::remote::RunOptions;
use crate::testpod::{SECRET_DIR, TERMINATION_MESSAGE_PATH, TOOLS_DIR, WORKSPACE_DIR};
use crate::{Error, Settings};

/// Finalizer on run Pods: removed after the phase's log is archived.
pub const FINALIZER: &str = "terrace.dev/run";
/// Label on run Pods, Secrets and log archives: the run's ID.
pub const LABEL_RUN: &str = "terrace.dev/run";
/// Label on run Pods: `plan` or `apply`.
pub const LABEL_PHASE: &str = "terrace.dev/run-phase";
/// Secret key of the run's token.
pub const SECRET_KEY_TOKEN: &str = "token";
/// Secret key of the run's options (JSON).
pub const SECRET_KEY_OPTIONS: &str = "run.json";
/// Secret key of the workspace's terraform variables (a var-file).
pub const SECRET_KEY_WORKSPACE_VARS: &str = "workspace.tfvars";
/// Secret key of the run's own variables (a var-file).
pub const SECRET_KEY_RUN_VARS: &str = "run.tfvars";

/// Name of the Secret of Run object `run_name`.
pub fn secret_name(run_name: &str) -> String {
    crate::testpod::pod_name(run_name)
}

/// Name of the Pod of `phase` of Run object `run_name`.
pub fn pod_name(run_name: &str, phase: Phase) -> String {
    let base = crate::testpod::pod_name(run_name);
    format!("{}-{}", base.trim_end_matches("-run"), phase.as_str())
}

/// A workspace variable as the run needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Variable {
    pub key: String,
    pub value: String,
    /// `terraform` or `env`.
    pub category: String,
    pub hcl: bool,
    pub value_from: Option<SecretKeyRef>,
    /// From a priority variable set: the run's own variable of this key is dropped.
    pub overrides_run: bool,
}

/// The var-file of the workspace's `terraform` variables with a value in the spec (a
/// sensitive one, in a Secret, goes to the environment as `TF_VAR_<key>`, see [`env`]).
pub fn workspace_tfvars(vars: &[Variable]) -> String {
    let mut out = String::new();
    let mut sorted: Vec<&Variable> = vars
        .iter()
        .filter(|v| v.category == "terraform" && v.value_from.is_none())
        .collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    for v in sorted {
        out.push_str(&terrace_crds::rules::tfvars_line(&v.key, &v.value, v.hcl));
        out.push('\n');
    }
    out
}

/// The var-file of the run's own variables (HCL literals, as the CLI sends them),
/// without those a priority variable set overrides (`vars`' `overrides_run`).
pub fn run_tfvars(run: &Run, vars: &[Variable]) -> String {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for v in &run.spec.variables {
        let overridden = vars
            .iter()
            .any(|w| w.overrides_run && w.category == "terraform" && w.key == v.key);
        if !overridden {
            last.insert(&v.key, &v.value);
        }
    }
    last.into_iter()
        .map(|(k, v)| format!("{k} = {v}\n"))
        .collect()
}

/// The engine's environment: [`ENGINE_ENV`], then the workspace's `env` variables (and
/// its sensitive `terraform` ones as `TF_VAR_<key>`), which win over it.
pub fn env(vars: &[Variable]) -> Vec<EnvVar> {
    let mut own: Vec<EnvVar> = vars
        .iter()
        .filter_map(|v| {
            let name = match (v.category.as_str(), &v.value_from) {
                ("env", _) => v.key.clone(),
                ("terraform", Some(_)) => format!("TF_VAR_{}", v.key),
                _ => return None,
            };
            Some(pod_parts::env_var(name, &v.value, v.value_from.as_ref()))
        })
        .collect();
    own.sort_by(|a, b| a.name.cmp(&b.name));
    own.dedup_by(|a, b| a.name == b.name);
    pod_parts::with_engine_env(own)
}

/// The engine image of a run: `{version}` in the configured image becomes the workspace's
/// exact `terraform-version` (`latest` for a constraint or none).
pub fn engine_image(configured: &str, terraform_version: Option<&str>) -> String {
    let tag = terraform_version
        .and_then(terrace_crds::run::exact_version)
        .unwrap_or("latest");
    configured.replace("{version}", tag)
}

/// Everything a run's Pod and Secret are built from.
pub struct RunPodInputs<'a> {
    pub run: &'a Run,
    pub run_id: &'a str,
    pub organization: &'a str,
    pub working_directory: &'a str,
    /// The workspace's `terraform-version`.
    pub terraform_version: Option<&'a str>,
    /// The workspace's structured run output: the engine logs its JSON UI.
    pub structured_output: bool,
    pub variables: &'a [Variable],
    pub org_settings: &'a TestRunSettings,
    /// The agent pool's Pod template (an `agent`-mode workspace), over the organization's.
    pub pool_template: Option<&'a PodTemplateOverrides>,
    pub settings: &'a Settings,
    /// The names TFE's run environment gives.
    pub environment: RunNames<'a>,
}

/// The TFE names of a run's organization, workspace and project.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunNames<'a> {
    pub organization_name: &'a str,
    pub workspace_name: &'a str,
    pub project_name: &'a str,
}

fn labels(inputs: &RunPodInputs<'_>) -> BTreeMap<String, String> {
    pod_parts::labels(LABEL_RUN, inputs.run_id, inputs.organization)
}

/// The run's options as the runner reads them.
pub fn options(inputs: &RunPodInputs<'_>) -> RunOptions {
    let run = inputs.run;
    RunOptions {
        working_directory: inputs.working_directory.to_owned(),
        is_destroy: run.spec.is_destroy,
        refresh: run.spec.refresh,
        refresh_only: run.spec.refresh_only || run.spec.assessment,
        target_addrs: run.spec.target_addrs.clone(),
        replace_addrs: run.spec.replace_addrs.clone(),
        terraform_version: inputs
            .terraform_version
            .filter(|v| !v.is_empty() && *v != "latest")
            .map(str::to_owned),
        hostname: Some(inputs.settings.hostname.clone()).filter(|h| !h.is_empty()),
        run_object: run.name_any(),
        environment: run_environment(inputs),
        json_log: inputs.structured_output,
        assessment: run.spec.assessment,
    }
}

/// TFE's run environment variables: the run, its workspace (name and
/// `organization/workspace` slug) and project, and the configuration's VCS origin (empty:
/// terrace configurations come from uploads).
pub fn run_environment(inputs: &RunPodInputs<'_>) -> BTreeMap<String, String> {
    let e = inputs.environment;
    [
        ("TFC_RUN_ID", inputs.run_id.to_owned()),
        ("TFC_WORKSPACE_NAME", e.workspace_name.to_owned()),
        (
            "TFC_WORKSPACE_SLUG",
            format!("{}/{}", e.organization_name, e.workspace_name),
        ),
        ("TFC_PROJECT_NAME", e.project_name.to_owned()),
        ("TFC_CONFIGURATION_VERSION_GIT_BRANCH", String::new()),
        ("TFC_CONFIGURATION_VERSION_GIT_COMMIT_SHA", String::new()),
        ("TFC_CONFIGURATION_VERSION_GIT_TAG", String::new()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The run's Secret (see the module docs).
pub fn build_secret(inputs: &RunPodInputs<'_>, token: &str) -> Result<Secret, Error> {
    let options = serde_json::to_vec(&options(inputs))
        .map_err(|e| Error::Invalid(format!("the run's options: {e}")))?;
    let metadata = owned_meta(
        inputs.run,
        "run",
        secret_name(&inputs.run.name_any()),
        labels(inputs),
    )?;
    Ok(pod_parts::opaque_secret(
        metadata,
        [
            (SECRET_KEY_TOKEN, token.as_bytes().to_vec()),
            (SECRET_KEY_OPTIONS, options),
            (
                SECRET_KEY_WORKSPACE_VARS,
                workspace_tfvars(inputs.variables).into_bytes(),
            ),
            (
                SECRET_KEY_RUN_VARS,
                run_tfvars(inputs.run, inputs.variables).into_bytes(),
            ),
        ],
    ))
}

/// The Pod of `phase` (see the module docs).
pub fn build_pod(inputs: &RunPodInputs<'_>, phase: Phase) -> Result<Pod, Error> {
    let run = inputs.run;
    let org = inputs
        .org_settings
        .pod_template
        .over(&inputs.settings.test_pod_template);
    let overrides = match inputs.pool_template {
        Some(pool) => pool.over(&org),
        None => org,
    };
    let mut our_labels = labels(inputs);
    our_labels.insert(LABEL_PHASE.to_owned(), phase.as_str().to_owned());
    let meta = pod_parts::pod_meta(
        run,
        "run",
        pod_name(&run.name_any(), phase),
        our_labels,
        &overrides,
        FINALIZER,
    )?;
    let engine_image = engine_image(
        pod_parts::configured_engine_image(inputs.org_settings, inputs.settings),
        inputs.terraform_version,
    );
    let command = vec![
        pod_parts::terrace_binary(),
        "runner".to_owned(),
        "remote".to_owned(),
        "--phase".to_owned(),
        phase.as_str().to_owned(),
        "--api".to_owned(),
        inputs.settings.api_internal_url.clone(),
        "--run".to_owned(),
        inputs.run_id.to_owned(),
        "--token-file".to_owned(),
        format!("{SECRET_DIR}/{SECRET_KEY_TOKEN}"),
        "--options-file".to_owned(),
        format!("{SECRET_DIR}/{SECRET_KEY_OPTIONS}"),
        "--var-file".to_owned(),
        format!("{SECRET_DIR}/{SECRET_KEY_WORKSPACE_VARS}"),
        "--var-file".to_owned(),
        format!("{SECRET_DIR}/{SECRET_KEY_RUN_VARS}"),
        "--dest".to_owned(),
        WORKSPACE_DIR.to_owned(),
        "--termination-message-path".to_owned(),
        TERMINATION_MESSAGE_PATH.to_owned(),
        "--".to_owned(),
        inputs.settings.engine_command.clone(),
    ];
    let engine = pod_parts::engine_container(
        engine_image,
        command,
        env(inputs.variables),
        &overrides,
        vec![
            mount("tools", TOOLS_DIR, true),
            mount("workspace", WORKSPACE_DIR, false),
            mount("run", SECRET_DIR, true),
        ],
    );
    Ok(Pod {
        metadata: meta,
        spec: Some(pod_parts::pod_spec(
            &overrides,
            inputs.settings,
            vec![pod_parts::install_container(inputs.settings)],
            engine,
            vec![
                empty_dir("workspace"),
                empty_dir("tools"),
                Volume {
                    name: "run".to_owned(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret_name(&run.name_any())),
                        default_mode: Some(0o440),
                        optional: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ],
        )),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_crds::{RunSpec, RunVariable};

    fn var(key: &str, value: &str, category: &str, hcl: bool, secret: bool) -> Variable {
        Variable {
            key: key.into(),
            value: value.into(),
            category: category.into(),
            hcl,
            value_from: secret.then(|| SecretKeyRef {
                name: format!("{key}-value"),
                key: "value".into(),
            }),
            overrides_run: false,
        }
    }

    #[test]
    fn engine_image_from_the_terraform_version() {
        let image = "hashicorp/terraform:{version}";
        assert_eq!(
            engine_image(image, Some("1.11.4")),
            "hashicorp/terraform:1.11.4"
        );
        assert_eq!(
            engine_image(image, Some("~> 1.11")),
            "hashicorp/terraform:latest"
        );
        assert_eq!(engine_image(image, None), "hashicorp/terraform:latest");
        assert_eq!(
            engine_image("ghcr.io/opentofu/opentofu:1.8", Some("1.11.4")),
            "ghcr.io/opentofu/opentofu:1.8"
        );
    }

    #[test]
    fn pods_of_a_phase_with_an_agent_pool_template() {
        let mut run = Run::new("run-abc", RunSpec::default());
        run.metadata.namespace = Some("acme".into());
        run.metadata.uid = Some("u1".into());
        let settings = Settings::default();
        let mut org = TestRunSettings::default();
        org.pod_template
            .node_selector
            .insert("tier".into(), "org".into());
        let pool = PodTemplateOverrides {
            node_selector: [("zone".to_owned(), "dc-1".to_owned())].into(),
            service_account_name: Some("terraform-dc".into()),
            ..PodTemplateOverrides::default()
        };
        let vars = [var("AWS_REGION", "eu", "env", false, false)];
        let inputs = RunPodInputs {
            run: &run,
            run_id: "run-ABC",
            organization: "acme",
            working_directory: "envs/dev",
            terraform_version: Some("1.11.4"),
            structured_output: true,
            variables: &vars,
            org_settings: &org,
            pool_template: Some(&pool),
            settings: &settings,
            environment: RunNames {
                organization_name: "acme",
                workspace_name: "web",
                project_name: "Default Project",
            },
        };
        let pod = build_pod(&inputs, Phase::Apply).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("run-abc-apply"));
        assert_eq!(
            pod.labels().get(LABEL_RUN).map(String::as_str),
            Some("run-ABC")
        );
        assert_eq!(
            pod.labels().get(LABEL_PHASE).map(String::as_str),
            Some("apply")
        );
        assert_eq!(pod.finalizers(), [FINALIZER.to_owned()]);
        let spec = pod.spec.unwrap();
        let ns = spec.node_selector.unwrap();
        assert_eq!((ns["zone"].as_str(), ns["tier"].as_str()), ("dc-1", "org"));
        assert_eq!(spec.service_account_name.as_deref(), Some("terraform-dc"));
        let engine = &spec.containers[0];
        let cmd = engine.command.clone().unwrap();
        assert!(cmd.windows(2).any(|w| w == ["--phase", "apply"]), "{cmd:?}");
        assert!(cmd.windows(2).any(|w| w == ["--run", "run-ABC"]), "{cmd:?}");
        let env = engine.env.clone().unwrap();
        assert!(env.iter().any(|e| e.name == "AWS_REGION"));
        let secret = build_secret(&inputs, "tok").unwrap();
        let data = secret.data.unwrap();
        let opts: RunOptions = serde_json::from_slice(&data[SECRET_KEY_OPTIONS].0).unwrap();
        assert_eq!(
            (
                opts.working_directory.as_str(),
                opts.terraform_version.as_deref()
            ),
            ("envs/dev", Some("1.11.4"))
        );
        assert_eq!(&data[SECRET_KEY_TOKEN].0, b"tok");
        // TFE's run environment; no hostname configured, no CLI configuration.
        assert_eq!(opts.environment["TFC_RUN_ID"], "run-ABC");
        assert_eq!(opts.environment["TFC_WORKSPACE_SLUG"], "acme/web");
        assert_eq!(opts.environment["TFC_PROJECT_NAME"], "Default Project");
        assert_eq!(opts.environment["TFC_CONFIGURATION_VERSION_GIT_BRANCH"], "");
        assert_eq!((opts.hostname, opts.run_object.as_str()), (None, "run-abc"));
        let with_host = Settings {
            hostname: "terrace.example.com".into(),
            ..Settings::default()
        };
        let opts = options(&RunPodInputs {
            settings: &with_host,
            ..inputs
        });
        assert_eq!(opts.hostname.as_deref(), Some("terrace.example.com"));
        let rc = crate::runner::remote::cli_config_for_run(
            "terrace.example.com",
            "http://terrace-api.terrace.svc:8080/",
            "acme.s3cret",
            "run-abc",
        );
        assert!(rc.contains("host \"terrace.example.com\""), "{rc}");
        assert!(
            rc.contains("\"tfe.v2.1\" = \"http://terrace-api.terrace.svc:8080/api/v2/\""),
            "{rc}"
        );
        assert!(rc.contains("token = \"tfrun.run-abc.acme.s3cret\""), "{rc}");
    }

    #[test]
    fn names() {
        assert_eq!(pod_name("run-abc", Phase::Plan), "run-abc-plan");
        assert_eq!(pod_name("run-abc", Phase::Apply), "run-abc-apply");
        assert_eq!(secret_name("run-abc"), "run-abc-run");
    }

    #[test]
    fn variables_go_to_var_files_and_environment() {
        let vars = [
            var("region", "eu", "terraform", false, false),
            var("sizes", "[1, 2]", "terraform", true, false),
            var("password", "", "terraform", false, true),
            var("AWS_REGION", "eu-west-1", "env", false, false),
            var("TF_INPUT", "1", "env", false, false),
            var("TOKEN", "", "env", false, true),
        ];
        assert_eq!(workspace_tfvars(&vars), "region = \"eu\"\nsizes = [1, 2]\n");
        let env = env(&vars);
        let names: Vec<&str> = env.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "CHECKPOINT_DISABLE",
                "TF_IN_AUTOMATION",
                "HOME",
                "AWS_REGION",
                "TF_INPUT",
                "TF_VAR_password",
                "TOKEN"
            ]
        );
        let password = env.iter().find(|e| e.name == "TF_VAR_password").unwrap();
        assert!(password.value.is_none() && password.value_from.is_some());
        let run = Run::new(
            "r",
            RunSpec {
                variables: vec![
                    RunVariable {
                        key: "b".into(),
                        value: "\"x\"".into(),
                    },
                    RunVariable {
                        key: "a".into(),
                        value: "1".into(),
                    },
                ],
                ..RunSpec::default()
            },
        );
        assert_eq!(run_tfvars(&run, &[]), "a = 1\nb = \"x\"\n");
        // A priority variable set's `a` wins over the run's: the run's is dropped.
        let priority = Variable {
            overrides_run: true,
            ..var("a", "2", "terraform", false, false)
        };
        assert_eq!(run_tfvars(&run, &[priority]), "b = \"x\"\n");
        let plain = var("a", "2", "terraform", false, false);
        assert_eq!(run_tfvars(&run, &[plain]), "a = 1\nb = \"x\"\n");
    }
}
