//! The Pods of a Run (docs/runs.md, "What runs where") as pure functions: the Run, the
//! workspace's variables, the Organization's run settings and the operator settings go
//! in; the Secret and the Pod of a phase come out.
//!
//! - The Secret `<run>-run` (owned by the Run, deleted when it ends) holds the run's
//!   token ([`SECRET_KEY_TOKEN`]: the runner's credential for the API server's runner
//!   endpoints of this one run), its options ([`SECRET_KEY_OPTIONS`], see
//!   [`RunOptions`](crate::runner_remote::RunOptions)) and two var-files: the workspace's
//!   `terraform` variables, then the run's own (later wins).
//! - The Pod `<run>-plan` / `<run>-apply`: owned by the Run, finalizer [`FINALIZER`] (kept
//!   until its log is archived), labels [`LABEL_RUN`] and [`LABEL_PHASE`]; init container
//!   `install-terrace`; container `engine` (the engine image) running `terrace runner
//!   remote --phase …`, with the workspace's `env` variables as its environment (a
//!   sensitive one through `secretKeyRef`).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, Pod, PodSpec, Secret, SecretKeySelector,
    SecretVolumeSource, Volume, VolumeMount,
};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::{LABEL_MANAGED_BY, LABEL_ORGANIZATION, MANAGED_BY};
use terrace_crds::run::Phase;
use terrace_crds::{PodTemplateOverrides, Run, TestRunSettings};

use crate::runner_remote::RunOptions;
use crate::testpod::{ENGINE_CONTAINER, ENGINE_ENV, INSTALL_CONTAINER, TOOLS_DIR, WORKSPACE_DIR};
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
/// Where the Secret is mounted in the engine container.
pub const SECRET_DIR: &str = "/var/run/terrace";
/// Termination message path of the engine container.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

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

/// The var-file of the run's own variables (HCL literals, as the CLI sends them).
pub fn run_tfvars(run: &Run) -> String {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for v in &run.spec.variables {
        last.insert(&v.key, &v.value);
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
            Some(match &v.value_from {
                Some(from) => EnvVar {
                    name,
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: from.name.clone(),
                            key: from.key.clone(),
                            optional: Some(false),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                None => EnvVar {
                    name,
                    value: Some(v.value.clone()),
                    ..Default::default()
                },
            })
        })
        .collect();
    own.sort_by(|a, b| a.name.cmp(&b.name));
    own.dedup_by(|a, b| a.name == b.name);
    let mut all: Vec<EnvVar> = ENGINE_ENV
        .iter()
        .filter(|(k, _)| !own.iter().any(|m| m.name == *k))
        .map(|(k, v)| EnvVar {
            name: (*k).to_owned(),
            value: Some((*v).to_owned()),
            ..Default::default()
        })
        .collect();
    all.extend(own);
    all
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
    pub variables: &'a [Variable],
    pub org_settings: &'a TestRunSettings,
    /// The agent pool's Pod template (an `agent`-mode workspace), over the organization's.
    pub pool_template: Option<&'a PodTemplateOverrides>,
    pub settings: &'a Settings,
}

fn owned_meta(
    run: &Run,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, Error> {
    let owner = run
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid("the run has no uid".into()))?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: run.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..Default::default()
    })
}

fn labels(inputs: &RunPodInputs<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_RUN.to_owned(), inputs.run_id.to_owned()),
        (
            LABEL_ORGANIZATION.to_owned(),
            inputs.organization.to_owned(),
        ),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// The run's options as the runner reads them.
pub fn options(run: &Run, working_directory: &str, terraform_version: Option<&str>) -> RunOptions {
    RunOptions {
        working_directory: working_directory.to_owned(),
        is_destroy: run.spec.is_destroy,
        refresh: run.spec.refresh,
        refresh_only: run.spec.refresh_only,
        target_addrs: run.spec.target_addrs.clone(),
        replace_addrs: run.spec.replace_addrs.clone(),
        terraform_version: terraform_version
            .filter(|v| !v.is_empty() && *v != "latest")
            .map(str::to_owned),
    }
}

/// The run's Secret (see the module docs).
pub fn build_secret(inputs: &RunPodInputs<'_>, token: &str) -> Result<Secret, Error> {
    let options = serde_json::to_vec(&options(
        inputs.run,
        inputs.working_directory,
        inputs.terraform_version,
    ))
    .map_err(|e| Error::Invalid(format!("the run's options: {e}")))?;
    let data = BTreeMap::from([
        (
            SECRET_KEY_TOKEN.to_owned(),
            ByteString(token.as_bytes().to_vec()),
        ),
        (SECRET_KEY_OPTIONS.to_owned(), ByteString(options)),
        (
            SECRET_KEY_WORKSPACE_VARS.to_owned(),
            ByteString(workspace_tfvars(inputs.variables).into_bytes()),
        ),
        (
            SECRET_KEY_RUN_VARS.to_owned(),
            ByteString(run_tfvars(inputs.run).into_bytes()),
        ),
    ]);
    Ok(Secret {
        metadata: owned_meta(
            inputs.run,
            secret_name(&inputs.run.name_any()),
            labels(inputs),
        )?,
        data: Some(data),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    })
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
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
    let mut all_labels = overrides.labels.clone();
    all_labels.extend(labels(inputs));
    all_labels.insert(LABEL_PHASE.to_owned(), phase.as_str().to_owned());
    let mut meta = owned_meta(run, pod_name(&run.name_any(), phase), all_labels)?;
    meta.finalizers = Some(vec![FINALIZER.to_owned()]);
    if !overrides.annotations.is_empty() {
        meta.annotations = Some(overrides.annotations.clone());
    }
    let engine_image = engine_image(
        inputs
            .org_settings
            .engine_image
            .as_deref()
            .filter(|i| !i.is_empty())
            .unwrap_or(&inputs.settings.engine_image),
        inputs.terraform_version,
    );
    let terrace = format!("{TOOLS_DIR}/terrace");
    let install = Container {
        name: INSTALL_CONTAINER.to_owned(),
        image: Some(inputs.settings.terrace_image.clone()),
        command: Some(vec![
            inputs.settings.terrace_binary.clone(),
            "runner".to_owned(),
            "install".to_owned(),
            terrace.clone(),
        ]),
        volume_mounts: Some(vec![mount("tools", TOOLS_DIR, false)]),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Default::default()
    };
    let command = vec![
        terrace,
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
    let engine = Container {
        name: ENGINE_CONTAINER.to_owned(),
        image: Some(engine_image),
        command: Some(command),
        working_dir: Some(WORKSPACE_DIR.to_owned()),
        env: Some(env(inputs.variables)),
        resources: overrides.resources.clone(),
        volume_mounts: Some(vec![
            mount("tools", TOOLS_DIR, true),
            mount("workspace", WORKSPACE_DIR, false),
            mount("run", SECRET_DIR, true),
        ]),
        termination_message_path: Some(TERMINATION_MESSAGE_PATH.to_owned()),
        termination_message_policy: Some("File".to_owned()),
        ..Default::default()
    };
    let service_account = overrides
        .service_account_name
        .clone()
        .filter(|s| !s.is_empty());
    Ok(Pod {
        metadata: meta,
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            init_containers: Some(vec![install]),
            containers: vec![engine],
            volumes: Some(vec![
                empty_dir("workspace"),
                empty_dir("tools"),
                Volume {
                    name: "run".to_owned(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret_name(&run.name_any())),
                        default_mode: Some(0o400),
                        optional: Some(false),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            automount_service_account_token: service_account.is_none().then_some(false),
            service_account_name: service_account,
            node_selector: (!overrides.node_selector.is_empty())
                .then(|| overrides.node_selector.clone()),
            tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
            ..Default::default()
        }),
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
            variables: &vars,
            org_settings: &org,
            pool_template: Some(&pool),
            settings: &settings,
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
        assert_eq!(run_tfvars(&run), "a = 1\nb = \"x\"\n");
    }
}
