//! Module tests driven by the real terraform CLI (`terraform test -cloud-run`) against
//! `terrace dev --engine terraform`: the same CLI is the client and, inside the test Pods,
//! the engine. The module uses only built-in resources (`terraform_data`, `local-exec`),
//! so nothing is downloaded.

use std::path::Path;
use std::time::Duration;

use terrace_tests::{Api, CLI_HOST, Dev, Terraform, terraform_path, text};

const ORG: &str = "clitests";
/// The automatic run's grace period these instances run with (shorter than the default,
/// so "also after the grace period" is quick to check).
const AUTO_RUN_DELAY: &str = "2s";
/// The capability URL signing key of these instances (to make an expired log URL).
const SIGNING_KEY: &str = "cli-tests-signing-key";

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
    setup_with_engine(&terraform_path())
}

fn setup_with_engine(engine: &str) -> (Dev, Api, Terraform, tempfile::TempDir) {
    let dev = Dev::start_with(&[
        "--engine",
        engine,
        "--auto-test-run-delay",
        AUTO_RUN_DELAY,
        "--url-signing-key",
        SIGNING_KEY,
    ]);
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

/// The path of a URL (from `/api/v2/`).
fn path_of(url: &str) -> String {
    url.find("/api/v2/")
        .map(|i| url[i..].to_owned())
        .unwrap_or_default()
}

/// All pass: exit 0 with the engine's summary rendered; a failing assertion: exit 1 with
/// its message; exactly one run per invocation (source `engine`), seen alike through the
/// API and kubectl, also after the automatic run's grace period.
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
    // The log the CLI shows is the engine's, read through the log URL: when it stops
    // short, the operator's and API server's lines say where it came from.
    assert!(
        shown.contains("1 passed, 0 failed"),
        "{shown}\n{}",
        dev.log()
    );
    assert!(shown.contains("tests/a.tftest.hcl... pass"), "{shown}");

    std::fs::write(dir.path().join("tests/b.tftest.hcl"), FAILING).expect("failing test");
    let out = tf.run(dir.path(), &["test", &source("greeter")]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("Error: Test assertion failed"), "{shown}");
    assert!(shown.contains("the greeting is not for nobody"), "{shown}");
    assert!(shown.contains("1 passed, 1 failed"), "{shown}");

    // Two invocations, two runs: no automatic run beside each explicit one, even after
    // the automatic run's grace period.
    std::thread::sleep(Duration::from_secs(3));
    let all = runs(&api);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all.iter().all(|r| r["attributes"]["source"] == "engine"),
        "{all:?}"
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
/// the state per run block; `-test-directory` picks another directory.
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
    assert!(shown.contains("1 passed, 0 failed"), "{shown}");
    // Without -var the module's test variable (environment) is what the engine sees.
    std::fs::create_dir_all(dir.path().join("spec")).expect("spec dir");
    std::fs::write(
        dir.path().join("spec/module.tftest.hcl"),
        r#"
run "greets_module" {
  assert {
    condition     = output.greeting == "hello module"
    error_message = "the module's test variable did not arrive"
  }
}
"#,
    )
    .expect("spec test");
    let out = tf.run(
        dir.path(),
        &["test", &source("greeter"), "-test-directory=spec"],
    );
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("spec/module.tftest.hcl... pass"), "{shown}");
    assert!(!shown.contains("tests/"), "{shown}");
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

/// Ctrl-C while a test is running: the CLI sends cancel, the engine gets SIGINT (terraform
/// lets the running `sleep` finish, then tears down), the run ends `canceled`, the CLI
/// prints the log to its end and exits non-zero. The stored log is complete: it shows
/// the interrupt, the teardown and the summary, and ends with ETX.
#[test]
fn ctrl_c_cancels_the_run() {
    let (dev, api, tf, dir) = setup();
    module(
        dir.path(),
        &[(
            "slow.tftest.hcl",
            r#"
variables {
  pause = 12
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
    assert!(shown.contains("Interrupt received"), "{shown}");
    assert!(shown.contains("tearing down"), "{shown}");
    assert!(!shown.contains("Could not"), "{shown}");
    let ended = dev.eventually(Duration::from_secs(60), || {
        runs(&api)
            .into_iter()
            .find(|r| r["attributes"]["status"] == "canceled")
    });
    let ended = ended.unwrap_or_else(|| panic!("not canceled: {:?}\n{shown}", runs(&api)));
    let url = ended["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default();
    let (st, log) = Api::with_token(&dev, None).get_text(&path_of(url));
    assert_eq!(st, 200);
    assert!(
        log.starts_with('\u{2}') && log.ends_with('\u{3}'),
        "{log:?}"
    );
    assert!(log.contains("Interrupt received"), "{log}");
    assert!(log.contains("\"test_summary\""), "{log}");
    assert_eq!(runs(&api).len(), 1);
}

/// The log of a run is exactly the engine's `-json` lines (framed STX … ETX), read
/// through `log-read-url` without a token, by byte windows as go-tfe reads it; the
/// URL's token does not open another run's log, an expired one opens nothing, and
/// neither appears in terrace's own log.
#[test]
fn the_log_url_is_a_capability() {
    let (dev, api, tf, dir) = setup();
    module(dir.path(), &[("a.tftest.hcl", PASSING)]);
    for _ in 0..2 {
        let out = tf.run(dir.path(), &["test", &source("greeter")]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let all = runs(&api);
    assert_eq!(all.len(), 2, "{all:?}");
    let url = |r: &serde_json::Value| {
        path_of(r["attributes"]["log-read-url"].as_str().unwrap_or_default())
    };
    let (a, b) = (&all[0], &all[1]);
    let anonymous = Api::with_token(&dev, None);
    let (st, log) = anonymous.get_text(&url(a));
    assert_eq!(st, 200);
    let body = log
        .strip_prefix('\u{2}')
        .and_then(|l| l.strip_suffix('\u{3}'))
        .unwrap_or_else(|| panic!("not framed: {log:?}"));
    let lines: Vec<serde_json::Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    assert_eq!(
        lines.first().map(|l| l["type"].clone()),
        Some("version".into())
    );
    assert_eq!(
        lines.last().map(|l| l["type"].clone()),
        Some("test_summary".into())
    );
    // go-tfe reads by byte windows; the windows add up to the whole log.
    let mut read = String::new();
    loop {
        let (st, chunk) =
            anonymous.get_text(&format!("{}?limit=100&offset={}", url(a), read.len()));
        assert_eq!(st, 200);
        if chunk.is_empty() {
            break;
        }
        read.push_str(&chunk);
    }
    assert_eq!(read, log);
    // Run a's token on run b's ID, a forged and an expired token: 404.
    let token_a = url(a).rsplit('/').next().unwrap_or_default().to_owned();
    let id_b = b["id"].as_str().unwrap_or_default();
    assert_eq!(
        anonymous
            .get_text(&format!("/api/v2/test-runs/{id_b}/log/{token_a}"))
            .0,
        404
    );
    let id_a = a["id"].as_str().unwrap_or_default();
    let signer = terrace_api_server::capability::Signer::new(Some(SIGNING_KEY));
    let purpose = terrace_api_server::resources::module_tests::logs::LOG_PURPOSE;
    let fresh = signer.sign(purpose, id_a, Duration::from_secs(60));
    assert_eq!(
        anonymous
            .get_text(&format!("/api/v2/test-runs/{id_a}/log/{fresh}"))
            .0,
        200,
        "a token of this key and purpose works (so the next 404 is the expiry's)"
    );
    let expired = signer.sign_until(purpose, id_a, 1_000_000);
    assert_eq!(
        anonymous
            .get_text(&format!("/api/v2/test-runs/{id_a}/log/{expired}"))
            .0,
        404
    );
    let server_log = dev.log();
    assert!(!token_a.is_empty() && !server_log.contains(&token_a));
    assert!(!server_log.contains(&fresh));
}

/// A test Pod whose engine command does not exist: the run errors (never hangs), and the
/// CLI shows the runner's diagnostic naming the command.
#[test]
fn a_missing_engine_is_named() {
    let (dev, api, tf, dir) = setup_with_engine("/nonexistent/terraform");
    module(dir.path(), &[("a.tftest.hcl", PASSING)]);
    let mut child = tf
        .command(dir.path(), &["test", &source("greeter")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("terraform");
    let out = wait_with_timeout(&mut child, Duration::from_secs(90));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}\n{}", dev.log());
    assert!(shown.contains("Engine not found"), "{shown}");
    assert!(shown.contains("/nonexistent/terraform"), "{shown}");
    let all = runs(&api);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["attributes"]["status"], "errored");
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
