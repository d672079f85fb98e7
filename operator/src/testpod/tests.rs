//! Unit tests of the test Pod and Secret builders.

use super::*;
use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::LABEL_ORGANIZATION;
use terrace_crds::{PodTemplateOverrides, RunVariable, TestRunSpec, TestVariableSpec};

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
    let r = run(vec![
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
    ]);
    assert_eq!(run_tfvars(&r, &[]), "a = \"two\"\nb = [\"x\"]\n");
    assert_eq!(run_tfvars(&run(vec![]), &[]), "");
}

fn hcl(v: TestVariable) -> TestVariable {
    let mut v = v;
    v.spec.hcl = true;
    v
}

/// Module test variables: `hcl` ones named `TF_VAR_<name>` are expressions and go into
/// the var-file as `<name> = <value>` (a run variable of the same name wins); every
/// other one (sensitive hcl ones too: their value is in a Secret) stays environment.
#[test]
fn hcl_test_variables_go_into_the_var_file() {
    let r = run(vec![RunVariable {
        key: "tags".into(),
        value: "{ a = 1 }".into(),
    }]);
    let vars = [
        hcl(var("v1", "vpc", "TF_VAR_zones", "[\"a\", \"b\"]", None)),
        hcl(var("v2", "vpc", "TF_VAR_tags", "{ b = 2 }", None)),
        hcl(var("v3", "vpc", "NOT_AN_INPUT", "[1]", None)),
        hcl(var("v4", "vpc", "TF_VAR_secret", "", Some(("s", "k")))),
        var("v5", "vpc", "TF_VAR_plain", "text", None),
        hcl(var("v6", "other", "TF_VAR_elsewhere", "1", None)),
    ];
    assert_eq!(
        run_tfvars(&r, &vars),
        "tags = { a = 1 }\nzones = [\"a\", \"b\"]\n"
    );
    let names: Vec<String> = module_env(&r, &vars).into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["NOT_AN_INPUT", "TF_VAR_plain", "TF_VAR_secret"]);
    // A run without variables still gets the var-file when the module has hcl inputs.
    let plain = run(vec![]);
    let settings = Settings::default();
    let org = TestRunSettings::default();
    let pod = build_pod(&inputs(&plain, &vars, &org, &settings)).unwrap();
    let cmd = container(&pod, ENGINE_CONTAINER).command.clone().unwrap();
    assert_eq!(
        &cmd[cmd.len() - 2..],
        ["-var-file", "/var/run/terrace/run.tfvars"]
    );
}

/// The engine never waits for input or calls home: CHECKPOINT_DISABLE, TF_INPUT=0 and
/// TF_IN_AUTOMATION are set, and a module test variable of the same name wins.
#[test]
fn engine_env_is_non_interactive() {
    let r = run(vec![]);
    let env = engine_env(&r, &[]);
    let pairs: Vec<(&str, Option<&str>)> = env
        .iter()
        .map(|e| (e.name.as_str(), e.value.as_deref()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("CHECKPOINT_DISABLE", Some("1")),
            ("TF_IN_AUTOMATION", Some("1")),
            ("TF_INPUT", Some("0")),
            ("HOME", Some("/home/terrace"))
        ]
    );
    let vars = [var("v1", "vpc", "TF_IN_AUTOMATION", "", None)];
    let env = engine_env(&r, &vars);
    assert_eq!(
        env.iter().filter(|e| e.name == "TF_IN_AUTOMATION").count(),
        1
    );
    assert_eq!(env.last().and_then(|e| e.value.as_deref()), Some(""));
}

/// The engine flags of SPEC.md A1: verbose, test directory, filters, and the var-file
/// only when the run has variables.
#[test]
fn engine_command_flags() {
    let mut r = run(vec![]);
    assert_eq!(
        engine_command("tofu", &r, false),
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
        engine_command("/usr/bin/terraform", &r, true),
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
    assert_eq!(
        vols,
        ["workspace", "tools", "token", "log-token", "tmp", "home"]
    );
    // Issue 40: Pod Security `restricted` by default, and the Secret readable to the
    // non-root user through fsGroup.
    let psc = spec.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!((psc.run_as_user, psc.fs_group), (Some(65532), Some(65532)));
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
        assert_eq!(
            sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
            Some(vec!["ALL".to_owned()]),
            "{}",
            c.name
        );
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(
            c.image_pull_policy.as_deref(),
            Some("IfNotPresent"),
            "{}",
            c.name
        );
    }
    for v in spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref())
    {
        assert_eq!(v.default_mode, Some(0o440));
    }
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
            "--stderr-file",
            "/workspace/.terrace/engine.stderr",
            "--log-url",
            &format!(
                "{}/api/v2/runner/test-runs/trun-abc/log",
                settings.api_internal_url
            ),
            "--log-token-file",
            "/var/run/terrace-log/log-token",
            "--",
            "tofu",
            "test",
            "-json",
            "-test-directory",
            "tests"
        ]
    );
    assert_eq!(
        engine.env.as_ref().map(Vec::len),
        Some(ENGINE_ENV.len()),
        "only the engine's fixed environment"
    );
    assert_eq!(engine.resources, None);
    let mounts: Vec<&str> = engine
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect();
    // The log token (its own key of the run's Secret) is the engine's; the archive token
    // is only visible to the fetch container.
    assert_eq!(
        mounts,
        [
            "/terrace",
            "/workspace",
            "/var/run/terrace-log",
            "/home/terrace",
            "/tmp"
        ]
    );
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
        publish_only_tested: false,
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
            ..Default::default()
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
    let engine_at = cmd.iter().position(|a| a == "--").unwrap() + 1;
    assert_eq!(
        &cmd[engine_at..engine_at + 3],
        ["terraform", "test", "-json"]
    );
    assert_eq!(
        &cmd[cmd.len() - 2..],
        ["-var-file", "/var/run/terrace/run.tfvars"]
    );
    let env = engine.env.as_ref().unwrap();
    assert_eq!(env[ENGINE_ENV.len()].name, "TF_VAR_size");
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
