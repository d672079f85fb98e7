//! The web view in a real browser (issue 29, docs/ui.md): headless Chromium through its
//! WebDriver against `terrace dev`. Signing in and out, finding workspaces, locking, a
//! run started by the terraform CLI followed live from the URL the CLI printed and
//! confirmed in the browser, another discarded, what a reader may not do, CSRF, and an
//! expired session. The main pages are saved as PNGs (into docs/ui/ with
//! `TERRACE_UI_SCREENSHOTS=1`).

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use terrace_tests::browser::Browser;
use terrace_tests::{Api, Dev, Terraform, terraform_path, workspace_root};

const ORG: &str = "acme";

/// Saves a PNG of the page: into docs/ui/ (the screenshots docs/ui.md shows) with
/// `TERRACE_UI_SCREENSHOTS=1`, else into target/ui-screenshots/ (so a test run leaves
/// the committed ones alone).
fn shot(b: &Browser, name: &str) {
    let dir = if std::env::var_os("TERRACE_UI_SCREENSHOTS").is_some() {
        workspace_root().join("docs/ui")
    } else {
        workspace_root().join("target/ui-screenshots")
    };
    b.screenshot(&dir.join(format!("{name}.png")));
}

fn sign_in(b: &Browser, dev: &Dev, token: &str) {
    b.goto(&format!("{}/app", dev.api));
    assert!(
        b.wait(Duration::from_secs(10), |b| b.find("#token").is_some()),
        "the sign-in page: {}",
        b.source()
    );
    b.fill("#token", token);
    b.click("#sign-in");
    assert!(
        b.wait(Duration::from_secs(10), |b| b.find("#sign-out").is_some()),
        "signed in: {}",
        b.source()
    );
}

/// A token of a new ServiceAccount of the organization bound to ClusterRole `role`.
fn token_for(dev: &Dev, name: &str, role: &str) -> String {
    dev.role_token(ORG, name, role)
}

/// A form POST as the browser's session would send it (its cookie), with `csrf`.
fn post_form(dev: &Dev, cookie: &str, path: &str, csrf: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut res = agent
        .post(&format!("{}{path}", dev.api))
        .header("Cookie", format!("terrace_session={cookie}"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("csrf={csrf}&reason=forged"))
        .expect("POST");
    let status = res.status().as_u16();
    (status, res.body_mut().read_to_string().unwrap_or_default())
}

/// The CSRF token of the page the browser shows.
fn csrf_of(b: &Browser) -> String {
    b.execute("return document.querySelector('input[name=csrf]').value")
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn people_sign_in_find_workspaces_lock_them_and_sign_out() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    for i in 0..25 {
        let tags = if i % 5 == 0 {
            json!(["prod"])
        } else {
            json!(["dev"])
        };
        api.create_workspace(
            ORG,
            json!({"name": format!("svc-{i:02}"), "tag-names": tags}),
        );
    }
    let b = Browser::start();

    // Every page asks for a token first, then comes back.
    b.goto(&format!("{}/app/{ORG}/workspaces", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#token").is_some()));
    shot(&b, "sign-in");
    b.fill("#token", "not-a-token");
    b.click("#sign-in");
    assert!(
        b.wait(Duration::from_secs(10), |b| b
            .text("#signin-error")
            .contains("not accepted")),
        "{}",
        b.source()
    );
    b.fill("#token", &dev.token);
    b.click("#sign-in");
    assert!(
        b.wait(Duration::from_secs(10), |b| b
            .url()
            .ends_with(&format!("/app/{ORG}/workspaces"))),
        "back where the person was going: {}",
        b.url()
    );
    assert!(b.text("#count").starts_with("25"), "{}", b.text("#count"));
    assert!(b.find("a[rel=next]").is_some(), "a second page");
    shot(&b, "workspaces");

    // Search by name, filter by tag, page.
    b.fill("#q", "svc-1");
    b.click("#filter");
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("#count").starts_with("10 ")
    }));
    b.goto(&format!("{}/app/{ORG}/workspaces?tag=prod", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("#count").starts_with("5 ")
    }));
    let listed = b.text("#workspaces");
    assert!(
        listed.contains("svc-05") && !listed.contains("svc-01"),
        "{listed}"
    );
    b.goto(&format!("{}/app/{ORG}/workspaces?page=2", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("#workspaces").contains("svc-24")
    }));

    // Lock with a reason, then unlock.
    b.goto(&format!("{}/app/{ORG}/workspaces/svc-03", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#lock").is_some()));
    b.fill("#reason", "maintenance window");
    b.click("#lock");
    assert!(
        b.wait(Duration::from_secs(10), |b| b
            .text("#lock-state")
            .contains("maintenance window")),
        "{}",
        b.source()
    );
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/svc-03"));
    assert_eq!(ws.body["data"]["attributes"]["locked"], true);
    assert!(b.find("#lock").is_none() && b.find("#unlock").is_some());
    assert!(
        b.text("#cloud-block")
            .contains("hostname     = \"terrace.test\""),
        "the cloud block names the CLI's hostname: {}",
        b.text("#cloud-block")
    );
    shot(&b, "workspace");

    // A form without the session's CSRF token is refused, whoever sends it.
    let cookie = b.cookie("terrace_session").expect("the session cookie");
    let (status, page) = post_form(
        &dev,
        &cookie,
        &format!("/app/{ORG}/workspaces/svc-03/actions/unlock"),
        "forged",
    );
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("CSRF"), "{page}");
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/svc-03"));
    assert_eq!(
        ws.body["data"]["attributes"]["locked"], true,
        "the forged unlock did nothing"
    );

    b.click("#unlock");
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("#lock-state").contains("Unlocked")
    }));

    // Another site's form cannot sign a browser in (no session yet, so no CSRF token:
    // the Origin decides).
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let cross = agent
        .post(&format!("{}/app/session", dev.api))
        .header("Origin", "https://evil.example")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("token={}", dev.token))
        .expect("POST");
    assert_eq!(cross.status().as_u16(), 403);
    assert!(
        cross.headers().get("set-cookie").is_none(),
        "no session for another site"
    );

    // Unknown pages answer 404 in the same look.
    b.goto(&format!("{}/app/{ORG}/workspaces/nope", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("h1").contains("Not found")
    }));

    // Signing out ends the session: its cookie no longer opens a page.
    b.goto(&format!("{}/app/{ORG}/workspaces", dev.api));
    b.click("#sign-out");
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#token").is_some()));
    let (status, _) = post_form(
        &dev,
        &cookie,
        &format!("/app/{ORG}/workspaces/svc-03/actions/lock"),
        "x",
    );
    assert_eq!(status, 303, "an ended session is sent to sign in");
    b.goto(&format!("{}/app", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#token").is_some()));
}

const MAIN_TF: &str = r#"
terraform {
  cloud {
    hostname     = "terrace.test"
    organization = "acme"
    workspaces {
      name = "web"
    }
  }
}

resource "terraform_data" "slow" {
  input            = var.round
  triggers_replace = { token = var.token }

  provisioner "local-exec" {
    command = "for i in 1 2 3 4 5 6 7 8; do echo tick-$i; sleep 1; done"
  }
}

variable "round" {
  type    = string
  default = "one"
}

variable "token" {
  type      = string
  sensitive = true
  default   = "hunter2-never-shown"
}

output "greeting" {
  value = "hello ${var.round}"
}
"#;

/// `terraform apply` waiting for its confirmation, its output gathered as it comes.
struct Waiting {
    child: std::process::Child,
    out: Arc<Mutex<String>>,
    /// The threads copying stdout and stderr into `out`; they end at the pipes' end.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Waiting {
    fn start(tf: &Terraform, dir: &Path, args: &[&str]) -> Waiting {
        let mut child = tf
            .command(dir, args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("terraform apply");
        let out = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        for mut pipe in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let out = out.clone();
            readers.push(std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    out.lock()
                        .expect("out")
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            }));
        }
        Waiting {
            child,
            out,
            readers,
        }
    }

    fn text(&self) -> String {
        terrace_tests::strip_colours(&self.out.lock().expect("out"))
    }

    /// The run page's path from the URL the CLI printed.
    fn run_path(&self, dev: &Dev) -> String {
        let found = dev.eventually(Duration::from_secs(60), || {
            let t = self.text();
            let at = t.find("/app/")?;
            let url: String = t[at..].chars().take_while(|c| !c.is_whitespace()).collect();
            url.contains("/runs/run-").then_some(url)
        });
        found.unwrap_or_else(|| panic!("the CLI printed no run URL: {}", self.text()))
    }

    /// Waits for the CLI to end by itself (its stdin stays open: the browser, not the
    /// keyboard, decides).
    fn finish(mut self) -> (bool, String) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let ok = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st.success();
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                break false;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        // All it wrote before it ended, however loaded the machine (a fixed pause once
        // lost the CLI's last lines).
        let read_by = std::time::Instant::now() + Duration::from_secs(10);
        while !self.readers.iter().all(|r| r.is_finished()) && std::time::Instant::now() < read_by {
            std::thread::sleep(Duration::from_millis(50));
        }
        (ok, self.text())
    }
}

#[test]
fn a_cli_run_is_followed_live_from_its_link_confirmed_in_the_browser_and_another_discarded() {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let work = tempfile::tempdir().expect("work");
    std::fs::write(work.path().join("main.tf"), MAIN_TF).expect("main.tf");
    let out = tf.run(work.path(), &["init", "-input=false"]);
    assert!(out.status.success(), "{}", terrace_tests::text(&out));
    let b = Browser::start();
    sign_in(&b, &dev, &dev.token);

    // The CLI plans remotely and waits for "yes"; its link opens the run's page.
    let apply = Waiting::start(&tf, work.path(), &["apply"]);
    let path = apply.run_path(&dev);
    b.goto(&format!("{}{path}", dev.api));
    assert!(
        b.wait(Duration::from_secs(90), |b| b
            .find("#action-apply")
            .is_some()),
        "the run waits for confirmation: {}\nCLI: {}",
        b.source(),
        apply.text()
    );
    assert!(b.url().contains("/workspaces/web/runs/run-"), "{}", b.url());
    assert!(
        b.text("#log-plan").contains("Plan: 1 to add"),
        "{}",
        b.text("#log-plan")
    );
    assert_eq!(b.text("#changes"), "+1 ~0 -0");
    assert!(b.find("#action-discard").is_some());
    // The approval is not blind (issue 41 §3): the structured plan shows the resource
    // with its attributes, the outputs, and masks the sensitive value.
    let planned = b.text("#plan-changes");
    for needle in [
        "Planned changes",
        "1 to add",
        "+ terraform_data.slow",
        "will be created",
        "input",
        "\"one\"",
        "triggers_replace.token",
        "(sensitive value)",
        "greeting",
        "\"hello one\"",
    ] {
        assert!(planned.contains(needle), "{needle:?} in {planned}");
    }
    assert!(
        !b.source().contains("hunter2"),
        "a sensitive value on the page"
    );
    // The timeline stays inside its card (issue 41 §12).
    let overflow = b.execute(
        "const t = document.getElementById('timeline'); return t.scrollWidth > t.clientWidth + 1 || t.getBoundingClientRect().right > t.parentElement.getBoundingClientRect().right;",
    );
    assert_eq!(overflow, false, "the timeline overflows its card");
    shot(&b, "run-planned");

    // Confirmed here, the CLI sees it and streams the apply, while the page's apply log
    // grows without a reload.
    b.fill("#comment-apply", "looks good");
    b.click("#action-apply");
    assert!(
        b.wait(Duration::from_secs(60), |b| b
            .text("#log-apply")
            .contains("tick-2")),
        "the apply log streams: {}",
        b.source()
    );
    b.execute("window.__stayed = 'yes'; return 1;");
    assert!(
        b.wait(Duration::from_secs(30), |b| b
            .text("#log-apply")
            .contains("tick-5")),
        "{}",
        b.text("#log-apply")
    );
    assert_eq!(
        b.execute("return window.__stayed || 'reloaded'"),
        "yes",
        "the log grew in place"
    );
    assert!(
        b.wait(Duration::from_secs(60), |b| b.text("#run-status")
            == "applied"),
        "{}",
        b.source()
    );
    assert!(b.text("#log-apply").contains("Apply complete"));
    let applied = b.text("#plan-changes");
    assert!(
        applied.contains("Applied changes")
            && applied.contains("1 added")
            && applied.contains("created"),
        "{applied}"
    );
    assert!(
        b.find("#action-apply").is_none(),
        "no buttons on a finished run"
    );
    shot(&b, "run-applied");
    let (ok, cli) = apply.finish();
    assert!(ok && cli.contains("Apply complete"), "{cli}");
    let id = path.rsplit('/').next().unwrap_or_default();
    let comments = api.get(&format!("/api/v2/runs/{id}/comments"));
    assert!(
        comments.body.to_string().contains("looks good"),
        "the comment was kept: {:?}",
        comments.body
    );

    // A second run, discarded from the browser: the CLI says so and fails.
    let apply = Waiting::start(&tf, work.path(), &["apply", "-var", "round=two"]);
    let path = apply.run_path(&dev);
    b.goto(&format!("{}{path}", dev.api));
    assert!(b.wait(Duration::from_secs(90), |b| {
        b.find("#action-discard").is_some()
    }));
    let planned = b.text("#plan-changes");
    for needle in [
        "1 to change",
        "~ terraform_data.slow",
        "will be updated in-place",
        "\"two\"",
        "\"hello two\"",
        "unchanged attributes hidden",
    ] {
        assert!(planned.contains(needle), "{needle:?} in {planned}");
    }
    assert!(
        !b.source().contains("hunter2"),
        "a sensitive value on the page"
    );
    b.execute("document.getElementById('plan-changes').scrollIntoView(); return 1;");
    shot(&b, "run-update-planned");
    b.click("#action-discard");
    assert!(b.wait(Duration::from_secs(30), |b| b.text("#run-status")
        == "discarded"));
    let (ok, cli) = apply.finish();
    assert!(!ok && cli.to_lowercase().contains("discarded"), "{cli}");

    // The workspace shows the state and its outputs; the states page lists it.
    b.goto(&format!("{}/app/{ORG}/workspaces/web", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("#outputs").contains("hello one")
    }));
    b.goto(&format!("{}/app/{ORG}/workspaces/web/states", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.source().contains("Serial 1")));
    assert!(b.find("a.download").is_some());
}

/// A policy set applied with kubectl (overridable, mandatory, failing on every creation).
const REVIEW_SET: &str = r#"
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: reviewed
  namespace: acme
spec:
  name: reviewed
  overridable: true
  global: true
  policies:
    - name: creations-need-review
      enforcementLevel: mandatory
      query: data.terraform.review.deny
      rego: |
        package terraform.review

        import rego.v1

        deny contains sprintf("%s is created", [rc.address]) if {
          some rc in input.plan.resource_changes
          "create" in rc.change.actions
        }
"#;

/// A run stopped by a failed overridable policy shows its policy checks on its page, and
/// a workspace admin overrides them there; the run then waits for its confirmation.
#[test]
fn the_run_page_shows_policy_checks_and_overrides_them() {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], REVIEW_SET);
    assert!(out.status.success(), "{}", terrace_tests::text(&out));
    let ws = api.create_workspace(ORG, json!({"name": "guarded"}));
    api.upload_config(
        &ws,
        &[("main.tf", "resource \"terraform_data\" \"x\" {}\n")],
    );
    let created = api.post(
        "/api/v2/runs",
        &json!({"data": {"type": "runs", "attributes": {},
            "relationships": {"workspace": {"data": {"type": "workspaces", "id": ws}}}}}),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let run = created.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let admin = token_for(&dev, "ws-admin", "terrace-workspace-admin");
    let b = Browser::start();
    sign_in(&b, &dev, &admin);
    let page = format!("{}/app/{ORG}/workspaces/guarded/runs/{run}", dev.api);
    b.goto(&page);
    assert!(
        b.wait(Duration::from_secs(120), |b| {
            if b.find("#action-override").is_none() {
                std::thread::sleep(Duration::from_millis(500));
                b.goto(&page);
            }
            b.find("#action-override").is_some()
        }),
        "the run waits for an override: {}",
        b.source()
    );
    assert_eq!(b.text("#run-status"), "post_plan_awaiting_decision");
    assert_eq!(b.text("#policy-status"), "awaiting_override");
    let table = b.text("#policies");
    assert!(table.contains("creations-need-review"), "{table}");
    assert!(table.contains("terraform_data.x is created"), "{table}");
    assert!(
        b.find("#action-apply").is_none(),
        "not confirmable before the override"
    );
    shot(&b, "run-policy-checks");
    b.fill("#comment-override", "reviewed");
    b.click("#action-override");
    assert!(
        b.wait(Duration::from_secs(30), |b| b.text("#run-status")
            == "post_plan_completed"),
        "{}",
        b.source()
    );
    // The override is recorded, with who gave it (issue 41 §9): not "passed" above the
    // failed policy, and the timeline says so.
    assert_eq!(b.text("#policy-status"), "overridden");
    let by = "system:serviceaccount:acme:ws-admin";
    assert!(
        b.text("#policy-overridden")
            .contains(&format!("Overridden by {by}")),
        "{}",
        b.source()
    );
    let timeline = b.text("#timeline");
    assert!(
        timeline.contains(&format!("Failed mandatory policies overridden by {by}"))
            && timeline.contains(&format!("Policy checks failed and were overridden by {by}")),
        "{timeline}"
    );
    assert!(
        b.find("#action-apply").is_some(),
        "confirmable after the override"
    );
    let overflow = b.execute(
        "const t = document.getElementById('timeline'); return t.scrollWidth > t.clientWidth + 1;",
    );
    assert_eq!(overflow, false, "the timeline overflows its card");
    b.execute("document.getElementById('policies-title').scrollIntoView(); return 1;");
    shot(&b, "run-policy-overridden");
    let events = api.get(&format!("/api/v2/runs/{run}/run-events?include=actor"));
    let overridden = events.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["attributes"]["action"] == "policy_overridden")
        .cloned()
        .unwrap_or_else(|| panic!("no override event: {:?}", events.body));
    assert_eq!(overridden["relationships"]["actor"]["data"]["id"], by);
}

#[test]
fn a_reader_sees_no_buttons_and_their_forged_post_is_refused() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    api.create_workspace(ORG, json!({"name": "shared"}));
    let reader = token_for(&dev, "reader", "terrace-workspace-reader");
    let b = Browser::start();
    sign_in(&b, &dev, &reader);
    b.goto(&format!("{}/app/{ORG}/workspaces/shared", dev.api));
    assert!(
        b.wait(Duration::from_secs(10), |b| b.find("#lock-state").is_some()),
        "{}",
        b.source()
    );
    assert!(
        b.find("#lock").is_none(),
        "a reader is offered no lock: {}",
        b.source()
    );
    assert!(b.find("#force-unlock").is_none());
    let cookie = b.cookie("terrace_session").expect("cookie");
    let csrf = csrf_of(&b);
    let (status, page) = post_form(
        &dev,
        &cookie,
        &format!("/app/{ORG}/workspaces/shared/actions/lock"),
        &csrf,
    );
    assert!(status == 403 || status == 404, "{status}: {page}");
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/shared"));
    assert_eq!(ws.body["data"]["attributes"]["locked"], false);
}

#[test]
fn an_expired_session_signs_in_again() {
    let dev = Dev::start_with(&["--ui-session-ttl", "3s"]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let b = Browser::start();
    sign_in(&b, &dev, &dev.token);
    std::thread::sleep(Duration::from_secs(4));
    b.goto(&format!("{}/app/{ORG}/workspaces", dev.api));
    assert!(
        b.wait(Duration::from_secs(10), |b| b.find("#token").is_some()),
        "an expired session asks for the token again: {}",
        b.source()
    );
}

#[test]
fn a_module_shows_its_versions_variables_and_test_results() {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let t = api.create_module(ORG, "vpc", "aws");
    let r = api.post(
        &format!("{t}/vars"),
        &json!({"data": {"type": "vars", "attributes": {
            "key": "TF_VAR_secret", "value": "hunter2", "category": "env", "sensitive": true}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let cv = api.uploaded_cv(&t);
    let run = api.create_test_run(&t, &cv);
    assert_eq!(run.status, 201, "{:?}", run.body);
    let id = run.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let b = Browser::start();
    sign_in(&b, &dev, &dev.token);
    b.goto(&format!("{}/app/{ORG}/registry/modules", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| {
        b.text("#modules").contains("vpc")
    }));
    b.click("#modules a");
    assert!(
        b.wait(Duration::from_secs(10), |b| b
            .text("#test-runs")
            .contains(&id)),
        "{}",
        b.source()
    );
    let vars = b.text("#variables");
    assert!(
        vars.contains("TF_VAR_secret") && vars.contains("(sensitive)"),
        "{vars}"
    );
    assert!(
        !b.source().contains("hunter2"),
        "a sensitive value never reaches a page"
    );
    b.goto(&format!(
        "{}/app/{ORG}/registry/modules/vpc/aws/test-runs/{id}",
        dev.api
    ));
    assert!(
        b.wait(Duration::from_secs(120), |b| b.text("#run-status")
            == "finished"),
        "{}",
        b.source()
    );
    assert_eq!(b.text("#test-status"), "pass");
    let results = b.text("#results");
    assert!(
        results.contains("tests/main.tftest.hcl") && results.contains("run \"ok\""),
        "{results}"
    );
    assert!(
        b.text("#log-test").contains("Success!"),
        "{}",
        b.text("#log-test")
    );
    shot(&b, "test-run");
}

/// Publishes `version` of module `name` (provider aws) with `files`, as go-tfe does.
fn publish(api: &Api, name: &str, version: &str, files: &[(&str, &str)]) -> serde_json::Value {
    let r = api.post(
        &format!("/api/v2/registry-modules/{ORG}/{name}/aws/versions"),
        &json!({"data": {"type": "registry-module-versions", "attributes": {"version": version}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let upload = r.body["data"]["links"]["upload"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = &upload[upload.find("/api/v2/").expect("upload path")..];
    assert_eq!(
        api.put_unauthenticated(path, terrace_tests::targz(files)),
        200
    );
    api.get(&format!(
        "/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/{name}/aws/version?module_version={version}"
    ))
    .body["data"]
        .clone()
}

const NET_TF: &str = "variable \"cidr\" {\n  type        = string\n  description = \"The network's range\"\n}\n\nvariable \"name\" {\n  type    = string\n  default = \"net\"\n}\n\nresource \"terraform_data\" \"net\" {\n  input = var.cidr\n}\n\noutput \"cidr\" {\n  description = \"The range it got\"\n  value       = var.cidr\n}\n";

/// A module that publishes only tested versions shows each version's tests (linked to
/// the test run), whether `terraform init` gets it and why not, and what the offered
/// version holds with a usage snippet (issue 41 §4); a version reads `pending`, not
/// null, right after its upload.
#[test]
fn the_registry_page_says_which_versions_are_offered_and_why() {
    let dev = Dev::start_with(&["--engine", &terraform_path(), "--auto-test-run-delay", "0s"]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let r = api.post(
        &format!("/api/v2/organizations/{ORG}/registry-modules"),
        &json!({"data": {"type": "registry-modules", "attributes": {
            "name": "net", "provider": "aws", "registry-name": "private",
            "test-config": {"publish-only-tested": true}}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let test = |cond: &str| {
        format!(
            "run \"cidr\" {{\n  variables {{\n    cidr = \"10.0.0.0/16\"\n  }}\n  command = plan\n  assert {{\n    condition     = {cond}\n    error_message = \"the range\"\n  }}\n}}\n"
        )
    };
    let passing = test("output.cidr == \"10.0.0.0/16\"");
    let failing = test("output.cidr == \"nope\"");
    let first = publish(
        &api,
        "net",
        "1.0.0",
        &[
            ("main.tf", NET_TF),
            ("README.md", "# net\n\nA network for the team.\n"),
            ("tests/main.tftest.hcl", &passing),
        ],
    );
    assert_eq!(
        first["attributes"]["test-status"], "pending",
        "right after the upload: {first}"
    );
    publish(
        &api,
        "net",
        "1.1.0",
        &[("main.tf", NET_TF), ("tests/main.tftest.hcl", &failing)],
    );
    let tested = dev.eventually(Duration::from_secs(120), || {
        let m = api.get(&format!(
            "/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/net/aws"
        ));
        let s = m.body["data"]["attributes"]["version-statuses"].clone();
        let done = s.as_array().is_some_and(|l| {
            l.len() == 2
                && l.iter()
                    .all(|v| v["test-status"] == "pass" || v["test-status"] == "fail")
        });
        done.then_some(s)
    });
    let statuses =
        tested.unwrap_or_else(|| panic!("the versions were never tested: {}", dev.log()));
    assert_eq!(statuses[0]["version"], "1.1.0");
    assert_eq!(statuses[0]["installable"], false);
    assert!(
        statuses[0]["not-offered-because"]
            .as_str()
            .is_some_and(|w| w.contains("its tests failed")),
        "{statuses}"
    );
    let failed_run = statuses[0]["test-run"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(failed_run.starts_with("trun-"), "{statuses}");

    let b = Browser::start();
    sign_in(&b, &dev, &dev.token);
    b.goto(&format!("{}/app/{ORG}/registry/modules/net/aws", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#versions").is_some()));
    let held = b.text("#version-1\\.1\\.0");
    assert!(
        held.contains("fail")
            && held.contains("not offered")
            && held.contains("its tests failed")
            && held.contains(&failed_run),
        "{held}"
    );
    let offered = b.text("#version-1\\.0\\.0");
    assert!(
        offered.contains("pass") && offered.contains("offered"),
        "{offered}"
    );
    assert!(!offered.contains("not offered"), "{offered}");
    assert!(b.text("#gate").contains("Only versions whose tests passed"));
    let usage = b.text("#usage");
    assert!(
        usage.contains("source  = \"terrace.test/acme/net/aws\"")
            && usage.contains("version = \"~> 1.0\"")
            && usage.contains("cidr = …"),
        "{usage}"
    );
    let inputs = b.text("#inputs");
    assert!(
        inputs.contains("cidr")
            && inputs.contains("required")
            && inputs.contains("The network's range"),
        "{inputs}"
    );
    assert!(b.text("#outputs").contains("The range it got"));
    assert!(b.text("#resources").contains("terraform_data.net"));
    assert!(b.text("#readme").contains("A network for the team."));
    shot(&b, "module");
    b.click("#version-1\\.1\\.0 a");
    assert!(
        b.wait(Duration::from_secs(10), |b| b.url().contains(&failed_run)),
        "{}",
        b.url()
    );
}

/// Creates a run of workspace `ws` through the API; its ID.
fn queue_run(api: &Api, ws: &str) -> String {
    api.create_run(ws, None, json!({}))
        .unwrap_or_else(|e| panic!("create a run: {e:?}"))
}

/// The web view's dead ends, opened (issue 41 §12): a run's lock is shown as the run's,
/// linked, with no unlock that the API would refuse, and its text said once; a pending
/// run says what it waits for and links the run ahead; a refused unlock is said on the
/// workspace's page; a force unlock asks for a confirmation; the workspace's variable sets
/// are shown (a sensitive value masked); an errored run says why.
#[test]
fn the_web_view_says_why_and_leads_somewhere() {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let ws = api.create_workspace(ORG, json!({"name": "app"}));
    api.upload_config(
        &ws,
        &[("main.tf", "resource \"terraform_data\" \"x\" {}\n")],
    );
    let set = api.post(
        &format!("/api/v2/organizations/{ORG}/varsets"),
        &json!({"data": {"type": "varsets", "attributes": {"name": "org-creds", "global": true}}}),
    );
    assert_eq!(set.status, 201, "{:?}", set.body);
    let set_id = set.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let v = api.post(
        &format!("/api/v2/varsets/{set_id}/relationships/vars"),
        &json!({"data": {"type": "vars", "attributes": {
            "key": "DEPLOY_TOKEN", "value": "hunter2-set", "category": "env", "sensitive": true}}}),
    );
    assert_eq!(v.status, 201, "{:?}", v.body);

    let ahead = queue_run(&api, &ws);
    let holding = dev.eventually(Duration::from_secs(120), || {
        let r = api.get(&format!("/api/v2/runs/{ahead}"));
        (r.body["data"]["attributes"]["status"] == "planned").then_some(())
    });
    assert!(
        holding.is_some(),
        "the first run never planned: {}",
        dev.log()
    );
    let behind = queue_run(&api, &ws);

    let b = Browser::start();
    sign_in(&b, &dev, &dev.token);
    // The pending run says what it waits for, and links the run ahead.
    let page = format!("{}/app/{ORG}/workspaces/app/runs/{behind}", dev.api);
    b.goto(&page);
    assert!(
        b.wait(Duration::from_secs(30), |b| {
            if !b.text("#why-words").contains(&ahead) {
                std::thread::sleep(Duration::from_millis(500));
                b.goto(&page);
            }
            b.text("#why-words").contains(&ahead)
        }),
        "{}",
        b.source()
    );
    assert_eq!(
        b.text("#why-words"),
        format!("waiting for run {ahead} (planned) to finish")
    );
    assert!(b.text("#why-ahead").contains(&ahead));
    shot(&b, "run-waiting");
    b.click("#why-ahead a");
    assert!(b.wait(Duration::from_secs(10), |b| b.url().ends_with(&ahead)));

    // The workspace's lock is the run's: linked, said once, no unlock the API refuses.
    b.goto(&format!("{}/app/{ORG}/workspaces/app", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#lock-state").is_some()));
    let lock = b.text("#lock-state");
    assert!(lock.contains(&ahead) && lock.contains("planned"), "{lock}");
    assert_eq!(lock.matches("Locked").count(), 1, "{lock}");
    assert!(b.find("#unlock").is_none() && b.find("#force-unlock").is_none());
    // The workspace's variable sets, masked.
    let sets = b.text("#varsets");
    assert!(
        sets.contains("org-creds") && sets.contains("DEPLOY_TOKEN") && sets.contains("(sensitive)"),
        "{sets}"
    );
    assert!(
        !b.source().contains("hunter2"),
        "a sensitive value on the page"
    );
    let r = api.post(&format!("/api/v2/runs/{ahead}/actions/discard"), &json!({}));
    assert_eq!(r.status, 202, "{:?}", r.body);
    // The run behind may already be planning once the one ahead is gone (a discard is
    // then refused): discarded or canceled, whichever its state takes.
    let ended = dev.eventually(Duration::from_secs(60), || {
        let st = api.get(&format!("/api/v2/runs/{behind}")).body["data"]["attributes"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if ["discarded", "canceled", "errored", "planned_and_finished"].contains(&st.as_str()) {
            return Some(());
        }
        for action in ["discard", "cancel"] {
            let r = api.post(
                &format!("/api/v2/runs/{behind}/actions/{action}"),
                &json!({}),
            );
            assert!(matches!(r.status, 202 | 409), "{action}: {:?}", r.body);
        }
        None
    });
    assert!(ended.is_some(), "the run behind never ended");
    let free = dev.eventually(Duration::from_secs(60), || {
        let w = api.get(&format!("/api/v2/workspaces/{ws}"));
        (w.body["data"]["attributes"]["locked"] == false).then_some(())
    });
    assert!(free.is_some(), "the runs' lock stayed");

    // Someone else's lock: Unlock is refused on the workspace's page, in the API's words;
    // Force unlock asks first.
    let locker = token_for(&dev, "oncall", "terrace-workspace-locker");
    let oncall = Api::with_token(&dev, Some(&locker));
    let r = oncall.post(
        &format!("/api/v2/workspaces/{ws}/actions/lock"),
        &json!({"reason": "investigating an incident"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    b.goto(&format!("{}/app/{ORG}/workspaces/app", dev.api));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#unlock").is_some()));
    let lock = b.text("#lock-state");
    assert!(lock.contains("investigating an incident"), "{lock}");
    b.click("#unlock");
    assert!(
        b.wait(Duration::from_secs(10), |b| b
            .find("#lock-notice")
            .is_some()),
        "{}",
        b.source()
    );
    assert!(
        b.text("#lock-notice")
            .contains("locked by User system:serviceaccount:acme:oncall"),
        "{}",
        b.text("#lock-notice")
    );
    assert!(
        b.find("#lock-title").is_some(),
        "still the workspace's page"
    );
    // Force unlock sits behind a confirmation, which the server also requires.
    let cookie = b.cookie("terrace_session").expect("the session cookie");
    let (status, page) = post_form(
        &dev,
        &cookie,
        &format!("/app/{ORG}/workspaces/app/actions/force-unlock"),
        &csrf_of(&b),
    );
    assert_eq!(status, 422, "{page}");
    assert!(page.contains("confirm the force unlock"), "{page}");
    let w = api.get(&format!("/api/v2/workspaces/{ws}"));
    assert_eq!(w.body["data"]["attributes"]["locked"], true);
    assert!(
        !b.execute("return document.getElementById('force-unlock').checkVisibility()")
            .as_bool()
            .unwrap_or(true),
        "the button shows only once the confirmation is opened"
    );
    b.click("#force-unlock-open");
    b.click("#force-unlock-sure");
    shot(&b, "workspace-force-unlock");
    b.click("#force-unlock");
    assert!(
        b.wait(Duration::from_secs(10), |b| b
            .text("#lock-state")
            .contains("Unlocked")),
        "{}",
        b.source()
    );

    // An errored run says why.
    api.upload_config(
        &ws,
        &[(
            "main.tf",
            "resource \"terraform_data\" \"x\" {\n  input = var.missing\n}\n",
        )],
    );
    let broken = queue_run(&api, &ws);
    let errored = dev.eventually(Duration::from_secs(120), || {
        let r = api.get(&format!("/api/v2/runs/{broken}"));
        (r.body["data"]["attributes"]["status"] == "errored").then(|| r.body["data"].clone())
    });
    let errored = errored.unwrap_or_else(|| panic!("the run never errored: {}", dev.log()));
    let words = errored["attributes"]["status-message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!words.is_empty(), "{errored}");
    b.goto(&format!(
        "{}/app/{ORG}/workspaces/app/runs/{broken}",
        dev.api
    ));
    assert!(b.wait(Duration::from_secs(10), |b| b.find("#why-words").is_some()));
    assert_eq!(b.text("#why-title"), "Why this run errored");
    assert_eq!(b.text("#why-words"), words);
    let said = b.text("#why-errors");
    assert!(
        said.contains("Error: Reference to undeclared input variable")
            && said.contains("\"missing\" has not been declared"),
        "the engine's own words: {said}"
    );
    shot(&b, "run-errored");
}
