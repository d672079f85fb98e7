//! Module tests driven by the real terraform CLI (`terraform test -cloud-run`) against
//! `terrace dev --engine terraform`: the same CLI is the client and, inside the test Pods,
//! the engine. The module uses only built-in resources (`terraform_data`, `local-exec`),
//! so nothing is downloaded.

use std::path::Path;
use std::time::Duration;

use terrace_tests::{Api, CLI_HOST, Dev, Terraform, terraform_path, text};

const ORG: &str = "clitests";

const MAIN_TF: &str = r#"
variable "name" {
  type    = string
  default = "world"
}

variable "pause" {
  type    = number
  default = 0
}

resource "terraform_data" "greeting" {
  input = "hello ${var.name}"

  provisioner "local-exec" {
    command = "sleep ${var.pause}"
  }
}

output "greeting" {
  value = terraform_data.greeting.output
}
"#;

const PASSING: &str = r#"
run "greets" {
  assert {
    condition     = output.greeting == "hello world"
    error_message = "wrong greeting"
  }
}
"#;

const FAILING: &str = r#"
run "greets_someone_else" {
  assert {
    condition     = output.greeting == "hello nobody"
    error_message = "the greeting is not for nobody"
  }
}
"#;

/// A module directory with `tests/` files.
fn module(dir: &Path, tests: &[(&str, &str)]) {
    std::fs::create_dir_all(dir.join("tests")).expect("module dir");
    std::fs::write(dir.join("main.tf"), MAIN_TF).expect("main.tf");
    for (name, body) in tests {
        std::fs::write(dir.join("tests").join(name), body).expect("test file");
    }
}

fn setup() -> (Dev, Api, Terraform, tempfile::TempDir) {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    api.create_module(ORG, "greeter", "aws");
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("module dir");
    (dev, api, tf, dir)
}

fn source(name: &str) -> String {
    format!("-cloud-run={CLI_HOST}/{ORG}/{name}/aws")
}

fn runs(api: &Api) -> Vec<serde_json::Value> {
    let r = api.get(&format!(
        "/api/v2/organizations/{ORG}/tests/registry-modules/private/{ORG}/greeter/aws/test-runs?page%5Bsize%5D=100"
    ));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"].as_array().cloned().unwrap_or_default()
}

/// All pass: exit 0 with the engine's summary rendered; a failing assertion: exit 1 with
/// its message; exactly one run per invocation, seen alike through the API and kubectl.
#[test]
fn pass_and_fail_one_run_each() {
    let (dev, api, tf, dir) = setup();
    module(dir.path(), &[("a.tftest.hcl", PASSING)]);
    let out = tf.run(dir.path(), &["test", &source("greeter")]);
    let shown = text(&out);
    assert!(
        out.status.success(),
        "terraform test failed:\n{shown}\n{}",
        dev.log()
    );
    assert!(shown.contains("1 passed, 0 failed"), "{shown}");
    assert!(shown.contains("tests/a.tftest.hcl... pass"), "{shown}");

    std::fs::write(dir.path().join("tests/b.tftest.hcl"), FAILING).expect("failing test");
    let out = tf.run(dir.path(), &["test", &source("greeter")]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("the greeting is not for nobody"), "{shown}");
    assert!(shown.contains("1 passed, 1 failed"), "{shown}");

    // Two invocations, two runs: no automatic run beside each explicit one, even after
    // the automatic run's grace period.
    std::thread::sleep(Duration::from_secs(4));
    let all = runs(&api);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all.iter().all(
            |r| r["attributes"]["source"] == "svc-api" || r["attributes"]["source"] == "engine"
        )
    );
    let objects = dev.kubectl_ok(&["get", "testruns", "-n", ORG, "-o", "name"]);
    assert_eq!(objects.lines().count(), 2, "{objects}");
    // The capability in the log URL never reaches the server's log.
    let url = all[0]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let token = url.rsplit('/').next().unwrap_or_default();
    assert!(!token.is_empty() && !dev.log().contains(token));
}

/// `-filter` runs only the named file; `-var` reaches the engine (and wins over the
/// module's test variable of the same name, given as `TF_VAR_name`); `-verbose` shows
/// the state per run block.
#[test]
fn filter_var_and_verbose() {
    let (_dev, api, tf, dir) = setup();
    module(
        dir.path(),
        &[
            ("a.tftest.hcl", PASSING),
            ("b.tftest.hcl", FAILING),
            (
                "c.tftest.hcl",
                r#"
run "greets_var" {
  assert {
    condition     = output.greeting == "hello cli"
    error_message = "the -var value did not arrive"
  }
}
"#,
            ),
        ],
    );
    let out = tf.run(
        dir.path(),
        &["test", &source("greeter"), "-filter=tests/a.tftest.hcl"],
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("1 passed, 0 failed"), "{shown}");
    assert!(!shown.contains("b.tftest.hcl"), "{shown}");

    let vars = format!(
        "/api/v2/organizations/{ORG}/tests/registry-modules/private/{ORG}/greeter/aws/vars"
    );
    let r = api.post(
        &vars,
        &serde_json::json!({"data": {"type": "vars", "attributes": {"key": "TF_VAR_name", "value": "module", "category": "env"}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let out = tf.run(
        dir.path(),
        &[
            "test",
            &source("greeter"),
            "-filter=tests/c.tftest.hcl",
            "-var=name=cli",
            "-verbose",
        ],
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("terraform_data.greeting"),
        "-verbose shows the state:\n{shown}"
    );
}

/// An unknown module: the CLI's own "not found" error, and no run anywhere.
#[test]
fn unknown_module_is_not_found() {
    let (_dev, api, tf, dir) = setup();
    module(dir.path(), &[("a.tftest.hcl", PASSING)]);
    let out = tf.run(dir.path(), &["test", &source("nosuchmodule")]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("was not found"), "{shown}");
    assert!(runs(&api).is_empty());
}

/// Ctrl-C while a test is running: the CLI sends cancel, the engine gets SIGINT and tears
/// down, the run ends `canceled` and the CLI exits non-zero.
#[test]
fn ctrl_c_cancels_the_run() {
    let (dev, api, tf, dir) = setup();
    module(
        dir.path(),
        &[(
            "slow.tftest.hcl",
            r#"
variables {
  pause = 60
}

run "slow" {
  assert {
    condition     = output.greeting == "hello world"
    error_message = "never checked"
  }
}
"#,
        )],
    );
    let mut child = tf
        .command(dir.path(), &["test", &source("greeter")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terraform");
    // Wait for the run to be running (its Pod started the engine).
    let running = dev.eventually(Duration::from_secs(60), || {
        runs(&api)
            .into_iter()
            .find(|r| r["attributes"]["status"] == "running")
    });
    assert!(
        running.is_some(),
        "the run never started: {:?}\n{}",
        runs(&api),
        dev.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = wait_with_timeout(&mut child, Duration::from_secs(90));
    let shown = text(&out);
    assert_ne!(out.status.code(), Some(0), "{shown}");
    let ended = dev.eventually(Duration::from_secs(60), || {
        runs(&api)
            .into_iter()
            .find(|r| r["attributes"]["status"] == "canceled")
    });
    assert!(ended.is_some(), "not canceled: {:?}\n{shown}", runs(&api));
}

fn wait_with_timeout(child: &mut std::process::Child, timeout: Duration) -> std::process::Output {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    use std::io::Read;
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_end(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_end(&mut stderr);
    }
    let status = child.wait().expect("wait");
    std::process::Output {
        status,
        stdout,
        stderr,
    }
}
