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
//!   -json …` in `/workspace`. Module variables are its environment, verbatim (their
//!   category is `env`; a sensitive one comes from its Secret through `secretKeyRef`).
//!   The run's `variables` are the HCL lines of the Secret's key [`SECRET_KEY_TFVARS`],
//!   mounted alone at [`SECRET_DIR`] in this container and passed as `-var-file`; a
//!   var-file wins over `TF_VAR_*` environment variables, so the run's values take
//!   precedence over module variables of the same name.
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
//! Before the controller releases a finished run's Pod it copies the `engine` container's
//! log (its last [`LOG_ARCHIVE_MAX`] bytes) gzip-compressed into the ConfigMap
//! [`log_archive_name`] (`<pod name>-log`, same namespace, owned by the TestRun, labelled
//! [`LABEL_TEST_RUN`]) under binaryData key [`LOG_ARCHIVE_KEY`]; the API server's log
//! endpoint serves it once the Pod is gone ([`build_log_archive`]).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, KeyToPath, Pod, PodSpec,
    Secret, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use rand::RngCore;
use terrace_crds::constants::{LABEL_ID, LABEL_MANAGED_BY, LABEL_ORGANIZATION, MANAGED_BY};
use terrace_crds::{RunVariable, TestRun, TestRunSettings, TestVariable};

use crate::{Error, Settings};

/// Finalizer on test Pods: the controller removes it after recording the run's outcome.
pub const FINALIZER: &str = "terrace.dev/test-run";
/// Label on test Pods and Secrets: the TestRun's ID (`trun-…`).
pub const LABEL_TEST_RUN: &str = "terrace.dev/test-run";
/// Label on the token Secret: the ID of the configuration version the token unlocks.
pub const LABEL_CONFIGURATION_VERSION: &str = "terrace.dev/configuration-version";
/// Secret key of the one-time archive token.
pub const SECRET_KEY_TOKEN: &str = "token";
/// Secret key of the run's variables as HCL `key = value` lines.
pub const SECRET_KEY_TFVARS: &str = "run.tfvars";
/// Where the Secret is mounted (the token in `fetch`, the var-file in `engine`).
pub const SECRET_DIR: &str = "/var/run/terrace";
/// Name of the engine container (its termination message is the runner's report).
pub const ENGINE_CONTAINER: &str = "engine";
/// Name of the init container fetching the archive.
pub const FETCH_CONTAINER: &str = "fetch";
/// Name of the init container copying the terrace binary.
pub const INSTALL_CONTAINER: &str = "install-terrace";
/// Where the configuration is unpacked and the engine runs.
pub const WORKSPACE_DIR: &str = "/workspace";
/// Where the terrace binary is copied.
pub const TOOLS_DIR: &str = "/terrace";
/// Termination message path of the engine container.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The runner's copy of the engine log inside the workspace.
pub const LOG_FILE: &str = "/workspace/.terrace/test.log";

/// binaryData key of the log archive ConfigMap: the gzip-compressed engine log.
pub const LOG_ARCHIVE_KEY: &str = "log.gz";
/// The most engine log bytes archived (the tail is kept); a ConfigMap holds at most 1 MiB,
/// which the compressed text of a test log stays far below.
pub const LOG_ARCHIVE_MAX: usize = 4 * 1024 * 1024;

/// The longest object name Kubernetes accepts (DNS subdomain).
const MAX_NAME: usize = 253;
const NAME_SUFFIX: &str = "-run";

/// Name of the Pod (and of the token Secret) of the TestRun object `run_name`:
/// deterministic, so a restarted controller finds the Pod instead of starting a second.
/// Names too long for the suffix are cut (a trailing `-` or `.` is dropped so the result
/// stays a valid DNS subdomain).
pub fn pod_name(run_name: &str) -> String {
    let mut base = run_name;
    if base.len() + NAME_SUFFIX.len() > MAX_NAME {
        let mut cut = MAX_NAME - NAME_SUFFIX.len();
        while !base.is_char_boundary(cut) {
            cut -= 1;
        }
        base = base[..cut].trim_end_matches(['-', '.']);
    }
    format!("{base}{NAME_SUFFIX}")
}

/// Name of the ConfigMap archiving the engine log of Pod `pod_name`.
pub fn log_archive_name(pod_name: &str) -> String {
    format!("{pod_name}-log")
}

/// The last `max` bytes of `log`, cut forward to a character boundary.
pub fn log_tail(log: &str, max: usize) -> &str {
    let mut start = log.len().saturating_sub(max);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    &log[start..]
}

/// `text` gzip-compressed.
pub fn gzip(text: &[u8]) -> Result<Vec<u8>, Error> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text)
        .and_then(|()| enc.finish())
        .map_err(|e| Error::Invalid(format!("compressing the engine log: {e}")))
}

/// The log archive ConfigMap of `run` (ID `run_id`) whose Pod `pod_name` wrote `log`:
/// its tail ([`LOG_ARCHIVE_MAX`]) gzip-compressed under [`LOG_ARCHIVE_KEY`].
pub fn build_log_archive(
    run: &TestRun,
    run_id: &str,
    pod_name: &str,
    log: &str,
) -> Result<ConfigMap, Error> {
    let owner = run
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid("the test run has no uid".into()))?;
    let gz = gzip(log_tail(log, LOG_ARCHIVE_MAX).as_bytes())?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(log_archive_name(pod_name)),
            namespace: run.namespace(),
            labels: Some(BTreeMap::from([
                (LABEL_TEST_RUN.to_owned(), run_id.to_owned()),
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
            ])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            LOG_ARCHIVE_KEY.to_owned(),
            ByteString(gz),
        )])),
        ..Default::default()
    })
}

/// The URL the fetch init container downloads the archive of configuration version
/// `cv_id` from (see the module docs for the contract).
pub fn archive_url(api_internal_url: &str, cv_id: &str) -> String {
    format!(
        "{}/api/v2/test-archives/{cv_id}",
        api_internal_url.trim_end_matches('/')
    )
}

/// A new one-time archive token: 32 random bytes, base64url without padding.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The run's variables as a var-file: one `key = value` line each, values verbatim (they
/// are literals of the configuration language). A key given twice keeps its last value,
/// as the engine's `-var` flags do.
pub fn run_tfvars(variables: &[RunVariable]) -> String {
    let mut last: BTreeMap<&str, &str> = BTreeMap::new();
    for v in variables {
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
/// [-filter F]… [-var-file …]`.
pub fn engine_command(engine: &str, run: &TestRun) -> Vec<String> {
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
    if !spec.variables.is_empty() {
        cmd.push("-var-file".to_owned());
        cmd.push(format!("{SECRET_DIR}/{SECRET_KEY_TFVARS}"));
    }
    cmd
}

/// The environment of the engine container: the module's test variables (those whose
/// `spec.module` is the run's module), sorted by key; a key defined twice keeps the
/// variable with the smallest object name, so the choice does not depend on list order.
/// A variable with `valueFrom` reads its Secret key through `secretKeyRef`.
pub fn module_env(run: &TestRun, variables: &[TestVariable]) -> Vec<EnvVar> {
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
    chosen
        .into_values()
        .map(|v| match &v.spec.value_from {
            Some(from) => EnvVar {
                name: v.spec.key.clone(),
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
                name: v.spec.key.clone(),
                value: Some(v.spec.value.clone()),
                ..Default::default()
            },
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

fn owner_meta(
    run: &TestRun,
    name: String,
    labels: BTreeMap<String, String>,
) -> Result<ObjectMeta, Error> {
    let owner = run
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid("the test run has no uid".into()))?;
    Ok(ObjectMeta {
        name: Some(name),
        namespace: run.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..Default::default()
    })
}

fn our_labels(inputs: &PodInputs<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_TEST_RUN.to_owned(), inputs.run_id.to_owned()),
        (
            LABEL_ORGANIZATION.to_owned(),
            inputs.organization.to_owned(),
        ),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// The Secret of the run: the one-time `token` and the var-file `run.tfvars`.
pub fn build_secret(inputs: &PodInputs<'_>, token: &str) -> Result<Secret, Error> {
    let mut labels = our_labels(inputs);
    labels.insert(
        LABEL_CONFIGURATION_VERSION.to_owned(),
        inputs.configuration_version_id.to_owned(),
    );
    Ok(Secret {
        metadata: owner_meta(inputs.run, pod_name(&inputs.run.name_any()), labels)?,
        data: Some(BTreeMap::from([
            (
                SECRET_KEY_TOKEN.to_owned(),
                ByteString(token.as_bytes().to_vec()),
            ),
            (
                SECRET_KEY_TFVARS.to_owned(),
                ByteString(run_tfvars(&inputs.run.spec.variables).into_bytes()),
            ),
        ])),
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
            default_mode: Some(0o400),
            optional: Some(false),
        }),
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

/// The test Pod of the run (see the module docs).
pub fn build_pod(inputs: &PodInputs<'_>) -> Result<Pod, Error> {
    let run = inputs.run;
    let overrides = &inputs
        .org_settings
        .pod_template
        .over(&inputs.settings.test_pod_template);
    let name = pod_name(&run.name_any());
    // Our labels win over the organization's extra labels.
    let mut labels = overrides.labels.clone();
    labels.extend(our_labels(inputs));
    let mut meta = owner_meta(run, name.clone(), labels)?;
    meta.finalizers = Some(vec![FINALIZER.to_owned()]);
    if !overrides.annotations.is_empty() {
        meta.annotations = Some(overrides.annotations.clone());
    }
    let engine_image = inputs
        .org_settings
        .engine_image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| inputs.settings.engine_image.clone());
    let terrace = format!("{TOOLS_DIR}/terrace");
    let has_vars = !run.spec.variables.is_empty();

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
        "--".to_owned(),
    ];
    command.extend(engine_command(&inputs.settings.engine_command, run));
    let mut engine_mounts = vec![
        mount("tools", TOOLS_DIR, true),
        mount("workspace", WORKSPACE_DIR, false),
    ];
    if has_vars {
        engine_mounts.push(mount("run-vars", SECRET_DIR, true));
    }
    let env = module_env(run, inputs.variables);
    let engine = Container {
        name: ENGINE_CONTAINER.to_owned(),
        image: Some(engine_image),
        command: Some(command),
        working_dir: Some(WORKSPACE_DIR.to_owned()),
        env: (!env.is_empty()).then_some(env),
        resources: overrides.resources.clone(),
        volume_mounts: Some(engine_mounts),
        termination_message_path: Some(TERMINATION_MESSAGE_PATH.to_owned()),
        termination_message_policy: Some("File".to_owned()),
        ..Default::default()
    };

    let secret = pod_name(&run.name_any());
    let mut volumes = vec![
        empty_dir("workspace"),
        empty_dir("tools"),
        secret_volume("token", &secret, SECRET_KEY_TOKEN),
    ];
    if has_vars {
        volumes.push(secret_volume("run-vars", &secret, SECRET_KEY_TFVARS));
    }
    let service_account = overrides
        .service_account_name
        .clone()
        .filter(|s| !s.is_empty());
    Ok(Pod {
        metadata: meta,
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            init_containers: Some(vec![install, fetch]),
            containers: vec![engine],
            volumes: Some(volumes),
            // The tests need no Kubernetes API access unless the organization picked an
            // account on purpose (e.g. for cloud workload identity).
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

/// The run's ID from its `terrace.dev/id` label (set by the ID controller).
pub fn run_id(run: &TestRun) -> Option<&str> {
    run.labels().get(LABEL_ID).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use terrace_crds::common::SecretKeyRef;
    use terrace_crds::{PodTemplateOverrides, TestRunSpec, TestVariableSpec};

    fn run(variables: Vec<RunVariable>) -> TestRun {
        let mut r = TestRun::new(
            "r1",
            TestRunSpec {
                module: "vpc".into(),
                configuration_version: "cv1".into(),
                verbose: false,
                test_directory: "tests".into(),
                filters: vec![],
                variables,
                source: "svc-api".into(),
            },
        );
        r.metadata.namespace = Some("acme".into());
        r.metadata.uid = Some("uid-1".into());
        r
    }

    fn var(
        name: &str,
        module: &str,
        key: &str,
        value: &str,
        from: Option<(&str, &str)>,
    ) -> TestVariable {
        TestVariable::new(
            name,
            TestVariableSpec {
                module: module.into(),
                key: key.into(),
                value: value.into(),
                value_from: from.map(|(n, k)| SecretKeyRef {
                    name: n.into(),
                    key: k.into(),
                }),
                description: None,
                hcl: false,
                category: "env".into(),
                sensitive: from.is_some(),
            },
        )
    }

    fn inputs<'a>(
        run: &'a TestRun,
        vars: &'a [TestVariable],
        org: &'a TestRunSettings,
        settings: &'a Settings,
    ) -> PodInputs<'a> {
        PodInputs {
            run,
            run_id: "trun-abc",
            organization: "acme",
            configuration_version_id: "cv-xyz",
            variables: vars,
            org_settings: org,
            settings,
        }
    }

    fn container<'a>(pod: &'a Pod, name: &str) -> &'a Container {
        let spec = pod.spec.as_ref().unwrap();
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .find(|c| c.name == name)
            .unwrap()
    }

    /// Copies the kube-apiserver's name rule: object names are DNS subdomains of at most
    /// 253 characters, so a long TestRun name is cut before the suffix.
    #[test]
    fn pod_name_is_deterministic_and_bounded() {
        assert_eq!(pod_name("r1"), "r1-run");
        let long = format!("{}-{}", "a".repeat(248), "b".repeat(10));
        let name = pod_name(&long);
        assert_eq!(name.len(), 253 - 1);
        assert!(name.ends_with("aaa-run"));
        assert!(!name.contains("--"));
        let exact = "c".repeat(249);
        assert_eq!(pod_name(&exact).len(), 253);
    }

    /// The archive URL contract with the API server; a trailing slash of the base does
    /// not double.
    #[test]
    fn archive_url_contract() {
        assert_eq!(
            archive_url("http://api:8080/", "cv-1"),
            "http://api:8080/api/v2/test-archives/cv-1"
        );
        assert_eq!(
            archive_url("https://api", "cv-2"),
            "https://api/api/v2/test-archives/cv-2"
        );
    }

    /// Tokens are 32 random bytes in base64url without padding: 43 URL-safe characters,
    /// different each time.
    #[test]
    fn tokens_are_random_base64url() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }

    /// Copies the engines' `-var` semantics: the last value of a repeated key wins.
    #[test]
    fn run_tfvars_lines() {
        let vars = vec![
            RunVariable {
                key: "b".into(),
                value: "[\"x\"]".into(),
            },
            RunVariable {
                key: "a".into(),
                value: "\"one\"".into(),
            },
            RunVariable {
                key: "a".into(),
                value: "\"two\"".into(),
            },
        ];
        assert_eq!(run_tfvars(&vars), "a = \"two\"\nb = [\"x\"]\n");
        assert_eq!(run_tfvars(&[]), "");
    }

    /// The engine flags of SPEC.md A1: verbose, test directory, filters, and the var-file
    /// only when the run has variables.
    #[test]
    fn engine_command_flags() {
        let mut r = run(vec![]);
        assert_eq!(
            engine_command("tofu", &r),
            ["tofu", "test", "-json", "-test-directory", "tests"]
        );
        r.spec.verbose = true;
        r.spec.test_directory = "it".into();
        r.spec.filters = vec!["a.tftest.hcl".into(), "b.tftest.hcl".into()];
        r.spec.variables = vec![RunVariable {
            key: "k".into(),
            value: "1".into(),
        }];
        assert_eq!(
            engine_command("/usr/bin/terraform", &r),
            [
                "/usr/bin/terraform",
                "test",
                "-json",
                "-verbose",
                "-test-directory",
                "it",
                "-filter",
                "a.tftest.hcl",
                "-filter",
                "b.tftest.hcl",
                "-var-file",
                "/var/run/terrace/run.tfvars"
            ]
        );
    }

    /// Copies the kubelet's env semantics: a literal `value` or a `secretKeyRef`; only the
    /// run's module's variables; a duplicated key resolves the same way whatever the list
    /// order.
    #[test]
    fn module_env_literal_and_secret() {
        let r = run(vec![]);
        let vars = [
            var("v2", "vpc", "TF_VAR_region", "eu", None),
            var("v1", "vpc", "AWS_SECRET", "", Some(("vpc-secrets", "aws"))),
            var("v3", "other", "OTHER", "x", None),
            var("v0", "vpc", "TF_VAR_region", "us", None),
        ];
        let env = module_env(&r, &vars);
        assert_eq!(env.len(), 2);
        assert_eq!(env[0].name, "AWS_SECRET");
        assert_eq!(env[0].value, None);
        let sel = env[0]
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (sel.name.as_str(), sel.key.as_str()),
            ("vpc-secrets", "aws")
        );
        assert_eq!(env[1].name, "TF_VAR_region");
        assert_eq!(env[1].value.as_deref(), Some("us"));
        let mut reversed = vars.to_vec();
        reversed.reverse();
        assert_eq!(module_env(&r, &reversed), env);
    }

    /// The Pod contract of DESIGN.md §3 with default settings: owner, finalizer, labels,
    /// volumes, the three containers and their command lines.
    #[test]
    fn pod_with_defaults() {
        let r = run(vec![]);
        let settings = Settings::default();
        let org = TestRunSettings::default();
        let pod = build_pod(&inputs(&r, &[], &org, &settings)).unwrap();
        let meta = &pod.metadata;
        assert_eq!(meta.name.as_deref(), Some("r1-run"));
        assert_eq!(meta.namespace.as_deref(), Some("acme"));
        assert_eq!(
            meta.finalizers.as_deref(),
            Some(&[FINALIZER.to_owned()][..])
        );
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TestRun", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_TEST_RUN], "trun-abc");
        assert_eq!(labels[LABEL_ORGANIZATION], "acme");
        assert_eq!(meta.annotations, None);
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let vols: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(vols, ["workspace", "tools", "token"]);
        let names: Vec<&str> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, [INSTALL_CONTAINER, FETCH_CONTAINER]);

        let install = container(&pod, INSTALL_CONTAINER);
        assert_eq!(
            install.image.as_deref(),
            Some(settings.terrace_image.as_str())
        );
        assert_eq!(
            install.command.as_deref().unwrap(),
            [
                "/usr/local/bin/terrace",
                "runner",
                "install",
                "/terrace/terrace"
            ]
        );
        let fetch = container(&pod, FETCH_CONTAINER);
        assert_eq!(
            fetch.command.as_deref().unwrap(),
            [
                "/terrace/terrace",
                "runner",
                "fetch",
                "--url",
                &format!("{}/api/v2/test-archives/cv-xyz", settings.api_internal_url),
                "--token-file",
                "/var/run/terrace/token",
                "--dest",
                "/workspace"
            ]
        );
        let engine = container(&pod, ENGINE_CONTAINER);
        assert_eq!(
            engine.image.as_deref(),
            Some(settings.engine_image.as_str())
        );
        assert_eq!(engine.working_dir.as_deref(), Some("/workspace"));
        assert_eq!(engine.termination_message_policy.as_deref(), Some("File"));
        assert_eq!(
            engine.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(
            engine.command.as_deref().unwrap(),
            [
                "/terrace/terrace",
                "runner",
                "exec",
                "--termination-message-path",
                "/dev/termination-log",
                "--log-file",
                "/workspace/.terrace/test.log",
                "--",
                "tofu",
                "test",
                "-json",
                "-test-directory",
                "tests"
            ]
        );
        assert_eq!(engine.env, None);
        assert_eq!(engine.resources, None);
        let mounts: Vec<&str> = engine
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(mounts, ["/terrace", "/workspace"]);
        // The token is only visible to the fetch container.
        assert!(
            fetch
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "token" && m.mount_path == SECRET_DIR)
        );
    }

    /// The operator's default Pod template applies to every organization's Pods; an
    /// organization's own settings win.
    #[test]
    fn pod_with_settings_defaults() {
        let r = run(vec![]);
        let settings = Settings {
            test_pod_template: serde_json::from_value(serde_json::json!({
                "labels": {"team": "platform"},
                "serviceAccountName": "terrace-tests",
                "nodeSelector": {"pool": "tests"}
            }))
            .unwrap(),
            ..Settings::default()
        };
        let pod = build_pod(&inputs(&r, &[], &TestRunSettings::default(), &settings)).unwrap();
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["team"], "platform");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("terrace-tests"));
        assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "tests");

        let org = TestRunSettings {
            pod_template: PodTemplateOverrides {
                labels: BTreeMap::from([("team".to_owned(), "net".to_owned())]),
                ..Default::default()
            },
            ..Default::default()
        };
        let pod = build_pod(&inputs(&r, &[], &org, &settings)).unwrap();
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["team"], "net");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("terrace-tests"));
    }

    /// Organization overrides reach the Pod (labels, annotations, resources, service
    /// account, node selector, tolerations, engine image), without replacing terrace's
    /// own labels.
    #[test]
    fn pod_with_organization_overrides() {
        let r = run(vec![RunVariable {
            key: "size".into(),
            value: "3".into(),
        }]);
        let settings = Settings {
            engine_command: "terraform".into(),
            ..Settings::default()
        };
        let resources = ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                Quantity("1Gi".into()),
            )])),
            ..Default::default()
        };
        let org = TestRunSettings {
            concurrency: Some(2),
            engine_image: Some("hashicorp/terraform:1.9".into()),
            pod_template: PodTemplateOverrides {
                labels: BTreeMap::from([
                    ("team".to_owned(), "net".to_owned()),
                    (LABEL_TEST_RUN.to_owned(), "spoofed".to_owned()),
                ]),
                annotations: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
                resources: Some(resources.clone()),
                service_account_name: Some("tests".into()),
                node_selector: BTreeMap::from([("pool".to_owned(), "ci".to_owned())]),
                tolerations: vec![Toleration {
                    key: Some("ci".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }],
            },
        };
        let vars = [var("v1", "vpc", "TF_VAR_size", "1", None)];
        let pod = build_pod(&inputs(&r, &vars, &org, &settings)).unwrap();
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "net");
        assert_eq!(labels[LABEL_TEST_RUN], "trun-abc");
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()["a"], "b");
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("tests"));
        assert_eq!(spec.automount_service_account_token, None);
        assert_eq!(spec.node_selector.as_ref().unwrap()["pool"], "ci");
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        let engine = container(&pod, ENGINE_CONTAINER);
        assert_eq!(engine.image.as_deref(), Some("hashicorp/terraform:1.9"));
        assert_eq!(engine.resources.as_ref(), Some(&resources));
        let cmd = engine.command.as_deref().unwrap();
        assert_eq!(&cmd[8..11], ["terraform", "test", "-json"]);
        assert_eq!(
            &cmd[cmd.len() - 2..],
            ["-var-file", "/var/run/terrace/run.tfvars"]
        );
        let env = engine.env.as_ref().unwrap();
        assert_eq!(env[0].name, "TF_VAR_size");
        // The var-file volume holds only run.tfvars (never the token) and is mounted.
        let run_vars = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "run-vars")
            .unwrap();
        let items = run_vars.secret.as_ref().unwrap().items.as_ref().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].key, SECRET_KEY_TFVARS);
        assert!(
            engine
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "run-vars" && m.mount_path == SECRET_DIR)
        );
    }

    /// The Secret: owned by the run, named like the Pod, labelled for the API server's
    /// lookup, holding the token and the var-file.
    #[test]
    fn secret_contents() {
        let r = run(vec![RunVariable {
            key: "n".into(),
            value: "\"x\"".into(),
        }]);
        let settings = Settings::default();
        let org = TestRunSettings::default();
        let s = build_secret(&inputs(&r, &[], &org, &settings), "tok").unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("r1-run"));
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_TEST_RUN], "trun-abc");
        assert_eq!(labels[LABEL_CONFIGURATION_VERSION], "cv-xyz");
        let data = s.data.as_ref().unwrap();
        assert_eq!(data[SECRET_KEY_TOKEN].0, b"tok");
        assert_eq!(data[SECRET_KEY_TFVARS].0, b"n = \"x\"\n");
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].name, "r1");
    }

    /// A run without a uid (not yet stored) cannot own anything: an error, not a panic.
    #[test]
    fn no_uid_is_an_error() {
        let mut r = run(vec![]);
        r.metadata.uid = None;
        let settings = Settings::default();
        let org = TestRunSettings::default();
        assert!(build_pod(&inputs(&r, &[], &org, &settings)).is_err());
    }

    /// The log archive ConfigMap: owned by the TestRun as its controller (so the garbage
    /// collector of kube-controller-manager deletes it with the run), labelled with the
    /// run's ID, the tail of the log gzip-compressed under `binaryData` (a ConfigMap's
    /// binary values, base64 in JSON as kube-apiserver stores them).
    #[test]
    fn log_archive_configmap() {
        use std::io::Read;
        let r = run(vec![]);
        let cm = build_log_archive(&r, "trun-abc", "r1-run", "engine saw the interrupt\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cm.metadata.name.as_deref(), Some("r1-run-log"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("acme"));
        assert_eq!(cm.labels()[LABEL_TEST_RUN], "trun-abc");
        let owner = &cm.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TestRun", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let gz = &cm
            .binary_data
            .as_ref()
            .map(|d| d[LOG_ARCHIVE_KEY].0.clone())
            .unwrap_or_default();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, "engine saw the interrupt\n");
        let mut no_uid = r.clone();
        no_uid.metadata.uid = None;
        assert!(build_log_archive(&no_uid, "trun-abc", "r1-run", "").is_err());
    }

    /// The archive keeps the end of a long log (like `kubectl logs --limit-bytes` from the
    /// end), never splitting a UTF-8 character.
    #[test]
    fn log_tail_keeps_the_end() {
        assert_eq!(log_tail("abcdef", 3), "def");
        assert_eq!(log_tail("ab", 3), "ab");
        assert_eq!(log_tail("xé", 1), "");
        assert_eq!(log_tail("xéy", 2), "y");
        assert_eq!(log_tail("xéy", 3), "éy");
    }
}
