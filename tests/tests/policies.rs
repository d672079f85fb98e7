//! Policy checks (docs/policies.md) end to end: PolicySets applied with kubectl (as a
//! GitOps repository would), the real terraform CLI against `terrace dev` running the real
//! terraform as the engine, and the post-plan task stage API the CLI reads. Advisory and
//! mandatory failures, an override (the `override-policy` verb), a speculative plan, the
//! scope of a set, and a set whose Rego does not compile.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::{Api, Dev, Terraform, strip_colours, terraform_path, text, write_cloud_config};

const ORG: &str = "polorg";

fn config(dir: &Path, workspace: &str, value: &str, count: u32) {
    write_cloud_config(
        dir,
        ORG,
        &format!(r#"name = "{workspace}""#),
        &format!(
            r#"
resource "terraform_data" "item" {{
  count = {count}
  input = "{value}-${{count.index}}"
}}
"#
        ),
    );
}

/// The policy sets, as a GitOps repository would hold them: an advisory set for every
/// workspace, a hard mandatory set for `guarded` (with a parameter), an overridable one
/// for `soft`, and a broken one for the workspaces of project `other`.
const SETS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: forbidden-values
  namespace: polorg
data:
  forbidden.rego: |
    package terraform.forbidden

    import rego.v1

    deny contains msg if {
      some rc in input.plan.resource_changes
      startswith(rc.change.after.input, data.parameters.forbidden_prefix)
      msg := sprintf("%s uses the forbidden value %s", [rc.address, rc.change.after.input])
    }
---
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: sizes
  namespace: polorg
spec:
  name: sizes
  description: Advice on how big a change is
  global: true
  policies:
    - name: small-changes
      description: At most one resource per run
      enforcementLevel: advisory
      query: data.terraform.sizes.deny
      rego: |
        package terraform.sizes

        import rego.v1

        deny contains "more than one resource changes" if count(input.plan.resource_changes) > 1
---
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: guards
  namespace: polorg
spec:
  name: guards
  workspaces: ["guarded"]
  parameters:
    - key: forbidden_prefix
      value: forbidden
  policies:
    - name: no-forbidden-values
      description: Forbidden values never reach the infrastructure
      enforcementLevel: mandatory
      query: data.terraform.forbidden.deny
      regoFrom:
        name: forbidden-values
        key: forbidden.rego
---
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: reviewed
  namespace: polorg
spec:
  name: reviewed
  overridable: true
  workspaces: ["soft"]
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
---
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: broken
  namespace: polorg
spec:
  name: broken
  projects: ["other"]
  policies:
    - name: does-not-compile
      enforcementLevel: mandatory
      query: data.terraform.broken.deny
      rego: |
        package terraform.broken
        deny contains msg if {
"#;

fn setup() -> (Dev, Api, Terraform, tempfile::TempDir) {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], SETS);
    assert!(out.status.success(), "{}", text(&out));
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("work dir");
    (dev, api, tf, dir)
}

/// Runs `terraform args`, answering each prompt once it shows (the CLI reads each answer
/// with a buffered reader of its own, so answers written ahead would be lost): `answers`
/// pairs the words of a prompt with its answer. Returns the exit status's success and the
/// output.
fn answering(
    tf: &Terraform,
    dir: &Path,
    args: &[&str],
    answers: &[(&str, &str)],
) -> (bool, String) {
    use std::io::{Read, Write};
    use std::process::Stdio;
    use std::sync::{Arc, Mutex};
    let mut child = tf
        .command(dir, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("terraform");
    let shown = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    for mut pipe in [
        Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
        Box::new(child.stderr.take().expect("stderr")),
    ] {
        let shown = shown.clone();
        readers.push(std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                shown
                    .lock()
                    .expect("output")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }));
    }
    let mut stdin = child.stdin.take().expect("stdin");
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    for (prompt, answer) in answers {
        while !shown.lock().expect("output").contains(prompt)
            && std::time::Instant::now() < deadline
        {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = stdin.write_all(format!("{answer}\n").as_bytes());
        let _ = stdin.flush();
    }
    drop(stdin);
    let status = child.wait().expect("terraform ends");
    for r in readers {
        let _ = r.join();
    }
    let out = shown.lock().expect("output").clone();
    (status.success(), out)
}

/// The newest run of workspace `name`.
fn newest_run(api: &Api, name: &str) -> Value {
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/{name}"));
    let id = ws.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = api.get(&format!("/api/v2/workspaces/{id}/runs"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"][0].clone()
}

fn status(run: &Value) -> String {
    run["attributes"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The outcomes of run `run_id`'s policy evaluation, through the API the CLI reads:
/// (set name, policy, status, enforcement level, messages).
fn outcomes(api: &Api, run_id: &str) -> Vec<(String, String, String, String, Vec<String>)> {
    let stages = api.get(&format!("/api/v2/runs/{run_id}/task-stages"));
    assert_eq!(stages.status, 200, "{:?}", stages.body);
    let stage = stages.body["data"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let shown = api.get(&format!(
        "/api/v2/task-stages/{stage}?include=policy_evaluations"
    ));
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let eval = shown.body["included"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let one = api.get(&format!("/api/v2/policy-evaluations/{eval}"));
    assert_eq!(one.status, 200, "{:?}", one.body);
    assert_eq!(one.body["data"], shown.body["included"][0]);
    let checks = api.get(&format!("/api/v2/runs/{run_id}/policy-checks"));
    assert_eq!(
        (checks.status, checks.body["data"].clone()),
        (200, json!([]))
    );
    let sets = api.get(&format!(
        "/api/v2/policy-evaluations/{eval}/policy-set-outcomes"
    ));
    assert_eq!(sets.status, 200, "{:?}", sets.body);
    let mut out = Vec::new();
    for set in sets.body["data"].as_array().cloned().unwrap_or_default() {
        let name = set["attributes"]["policy-set-name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for o in set["attributes"]["outcomes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let s = |k: &str| o[k].as_str().unwrap_or_default().to_owned();
            let messages = o["output"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|m| m["print"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            out.push((
                name.clone(),
                s("policy_name"),
                s("status"),
                s("enforcement_level"),
                messages,
            ));
        }
    }
    out
}

/// A failed mandatory policy stops `terraform apply` with the CLI's own words and errors
/// the run (its message names the policy, an Event says which failed); values the
/// policy allows apply, with the advisory failure shown; a speculative plan is checked and
/// reported but never blocks anything; the broken set of another project touches nothing
/// here and shows Ready=False with the compiler's words.
#[test]
fn mandatory_and_advisory_policies_in_the_cli() {
    let (dev, api, tf, dir) = setup();
    let d = dir.path().join("guarded");
    config(&d, "guarded", "forbidden", 2);
    let init = tf.run(&d, &["init", "-input=false"]);
    assert!(init.status.success(), "{}", text(&init));

    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    let shown = strip_colours(&text(&out));
    assert!(!out.status.success(), "{shown}");
    assert!(shown.contains("Post-plan Tasks"), "{shown}");
    assert!(shown.contains("OPA Policy Evaluation"), "{shown}");
    assert!(shown.contains("Overall Result: FAILED"), "{shown}");
    assert!(shown.contains("Policy set 1: guards (1)"), "{shown}");
    assert!(
        shown.contains("Policy name: no-forbidden-values"),
        "{shown}"
    );
    assert!(shown.contains("Policy name: small-changes"), "{shown}");
    assert!(shown.contains("Advisory"), "{shown}");
    assert!(shown.contains("Task Stage failed."), "{shown}");
    assert!(!shown.contains("Apply complete"), "{shown}");
    let run = newest_run(&api, "guarded");
    let run_id = run["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(status(&run), "errored");
    let got = outcomes(&api, &run_id);
    assert!(
        got.contains(&(
            "guards".into(),
            "no-forbidden-values".into(),
            "failed".into(),
            "mandatory".into(),
            vec![
                "terraform_data.item[0] uses the forbidden value forbidden-0".into(),
                "terraform_data.item[1] uses the forbidden value forbidden-1".into()
            ]
        )),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|o| o.1 == "small-changes" && o.2 == "failed" && o.3 == "advisory"),
        "{got:?}"
    );
    // The broken set applies to project `other` only.
    assert!(got.iter().all(|o| o.0 != "broken"), "{got:?}");
    let objects = dev.kubectl_ok(&["get", "runs", "-n", ORG, "-o", "json"]);
    assert!(
        objects.contains("mandatory policies failed: guards/no-forbidden-values"),
        "{objects}"
    );
    let events = dev.eventually(Duration::from_secs(20), || {
        let e = dev.kubectl_ok(&["get", "events.events.k8s.io", "-n", ORG, "-o", "json"]);
        e.contains("PolicyFailed").then_some(e)
    });
    let events = events.expect("an Event for each failed policy");
    assert!(
        events.contains("mandatory policy guards/no-forbidden-values failed"),
        "{events}"
    );

    // Allowed values apply; the advisory failure is shown and lets the run go on.
    config(&d, "guarded", "allowed", 2);
    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    let shown = strip_colours(&text(&out));
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("Overall Result: PASSED (with advisory)"),
        "{shown}"
    );
    assert!(
        shown.contains("Apply complete! Resources: 2 added"),
        "{shown}"
    );
    assert_eq!(status(&newest_run(&api, "guarded")), "applied");

    // A speculative plan is checked and reported, and blocks nothing.
    config(&d, "guarded", "forbidden", 3);
    let out = tf.run(&d, &["plan", "-input=false"]);
    let shown = strip_colours(&text(&out));
    assert!(shown.contains("Overall Result: FAILED"), "{shown}");
    let run = newest_run(&api, "guarded");
    assert_eq!(status(&run), "planned_and_finished");
    assert_eq!(run["attributes"]["plan-only"], true);
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/guarded"));
    assert_eq!(ws.body["data"]["attributes"]["locked"], false);

    // The broken set says why it cannot be evaluated.
    let sets = dev.kubectl_ok(&["get", "policysets", "-n", ORG]);
    assert!(
        sets.lines()
            .any(|l| l.starts_with("broken") && l.contains("False")),
        "{sets}"
    );
    assert!(
        sets.lines()
            .any(|l| l.starts_with("guards") && l.contains("True")),
        "{sets}"
    );
    let broken = dev.kubectl_ok(&["get", "policyset", "broken", "-n", ORG, "-o", "json"]);
    assert!(broken.contains("does not compile"), "{broken}");
}

/// A failed mandatory policy of an overridable set waits for a decision: the CLI asks,
/// and `override` lets the apply go on. Through the API, only a caller with the
/// `override-policy` verb on the workspace may override (kubectl auth can-i agrees).
#[test]
fn an_overridable_failure_waits_for_an_override() {
    let (dev, api, tf, dir) = setup();
    let d = dir.path().join("soft");
    config(&d, "soft", "ok", 1);
    let init = tf.run(&d, &["init", "-input=false"]);
    assert!(init.status.success(), "{}", text(&init));
    let (ok, shown) = answering(
        &tf,
        &d,
        &["apply"],
        &[
            ("override the failed policies?", "override"),
            ("Do you want to perform these actions", "yes"),
        ],
    );
    let shown = strip_colours(&shown);
    assert!(ok, "{shown}");
    assert!(
        shown.contains("Do you want to override the failed policies?"),
        "{shown}"
    );
    assert!(
        shown.contains("Apply complete! Resources: 1 added"),
        "{shown}"
    );
    let run = newest_run(&api, "soft");
    assert_eq!(status(&run), "applied");
    let run_id = run["id"].as_str().unwrap_or_default().to_owned();
    let eval = api.get(&format!(
        "/api/v2/task-stages/{}/policy-evaluations",
        run_id.replace("run-", "ts-")
    ));
    assert_eq!(
        eval.body["data"][0]["attributes"]["status"], "overridden",
        "{:?}",
        eval.body
    );

    // Through the API: a run waits post_plan_awaiting_decision.
    config(&d, "soft", "ok", 2);
    let (ok, shown) = answering(
        &tf,
        &d,
        &["apply"],
        &[("override the failed policies?", "no")],
    );
    assert!(!ok, "{shown}");
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/soft"));
    let ws_id = ws.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let created = api.post(
        "/api/v2/runs",
        &json!({"data": {"type": "runs", "attributes": {"message": "needs review"},
            "relationships": {"workspace": {"data": {"type": "workspaces", "id": ws_id}}}}}),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let run_id = created.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let stage_rel = &created.body["data"]["relationships"]["task-stages"]["data"][0]["id"];
    let stage = stage_rel.as_str().unwrap_or_default().to_owned();
    assert_eq!(stage, run_id.replace("run-", "ts-"));
    let waiting = dev.eventually(Duration::from_secs(120), || {
        let r = api.get(&format!("/api/v2/runs/{run_id}"));
        (status(&r.body["data"]) == "post_plan_awaiting_decision").then_some(r.body)
    });
    let waiting = waiting.expect("the run waits for a decision");
    assert_eq!(
        waiting["data"]["attributes"]["actions"]["is-confirmable"],
        false
    );
    assert_eq!(
        waiting["data"]["attributes"]["actions"]["is-discardable"],
        true
    );
    let st = api.get(&format!("/api/v2/task-stages/{stage}"));
    assert_eq!(st.body["data"]["attributes"]["status"], "awaiting_override");
    assert_eq!(
        st.body["data"]["attributes"]["actions"]["is-overridable"],
        true
    );

    let locker = dev.role_token(ORG, "locker", "terrace-workspace-locker");
    let admin = dev.role_token(ORG, "wsadmin", "terrace-workspace-admin");
    let can_i = |who: &str| {
        let out = dev.kubectl(&[
            "auth",
            "can-i",
            "override-policy",
            "workspaces",
            "-n",
            ORG,
            "--as",
            &format!("system:serviceaccount:{ORG}:{who}"),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        (can_i("locker").as_str(), can_i("wsadmin").as_str()),
        ("no", "yes")
    );
    let path = format!("/api/v2/task-stages/{stage}/actions/override");
    let body = json!({"comment": "reviewed by the platform team"});
    let refused = Api::with_token(&dev, Some(&locker)).post(&path, &body);
    assert_eq!(refused.status, 403, "{:?}", refused.body);
    let done = Api::with_token(&dev, Some(&admin)).post(&path, &body);
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert_eq!(done.body["data"]["attributes"]["status"], "passed");
    let again = Api::with_token(&dev, Some(&admin)).post(&path, &body);
    assert_eq!(again.status, 409, "{:?}", again.body);
    let r = api.get(&format!("/api/v2/runs/{run_id}"));
    assert_eq!(status(&r.body["data"]), "post_plan_completed");
    assert_eq!(
        r.body["data"]["attributes"]["actions"]["is-confirmable"],
        true
    );
    let comments = api.get(&format!("/api/v2/runs/{run_id}/comments"));
    assert!(format!("{:?}", comments.body).contains("reviewed by the platform team"));
    let discard = api.post(
        &format!("/api/v2/runs/{run_id}/actions/discard"),
        &json!({}),
    );
    assert_eq!(discard.status, 202, "{:?}", discard.body);
}

/// Policies and a policy set made through TFE's API (as go-tfe makes them): a policy
/// created, its Rego uploaded, a set naming it and one workspace, a parameter; the CLI's
/// plan of that workspace shows the set's outcome; the operator says the set is Ready.
#[test]
fn policies_and_sets_made_through_the_api_check_plans() {
    let (dev, api, tf, dir) = setup();
    let created = api.post(
        &format!("/api/v2/organizations/{ORG}/policies"),
        &json!({"data": {"type": "policies", "attributes": {"name": "max-items", "kind": "opa",
            "query": "data.terraform.limits.deny", "enforcement-level": "mandatory",
            "description": "No more items than the limit"}}}),
    );
    assert_eq!(created.status, 201, "{:?}", created.body);
    let pol = created.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The message quotes the inputs, which are sensitive: they never reach the reader.
    let rego = "package terraform.limits\n\nimport rego.v1\n\ndeny contains sprintf(\"%d items, the limit is %d (first: %s)\", [count(input.plan.resource_changes), data.parameters.limit, input.plan.resource_changes[0].change.after.input]) if count(input.plan.resource_changes) > data.parameters.limit\n";
    let uploaded = api.put_bytes(
        &format!("/api/v2/policies/{pol}/upload"),
        rego.as_bytes().to_vec(),
    );
    assert_eq!(uploaded.status, 204, "{:?}", uploaded.body);

    let d = dir.path().join("limited");
    config(&d, "limited", "item", 3);
    let main = std::fs::read_to_string(d.join("main.tf")).expect("main.tf");
    let main = main.replace(
        "\"item-${count.index}\"",
        "\"${var.secret}-${count.index}\"",
    ) + "\nvariable \"secret\" {\n  type      = string\n  sensitive = true\n  default   = \"s3cr3t-token\"\n}\n";
    std::fs::write(d.join("main.tf"), main).expect("main.tf");
    let init = tf.run(&d, &["init", "-input=false"]);
    assert!(init.status.success(), "{}", text(&init));
    let ws = api.get(&format!("/api/v2/organizations/{ORG}/workspaces/limited"));
    let ws_id = ws.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let set = api.post(
        &format!("/api/v2/organizations/{ORG}/policy-sets"),
        &json!({"data": {"type": "policy-sets", "attributes": {"name": "limits", "kind": "opa"},
            "relationships": {
                "policies": {"data": [{"type": "policies", "id": pol}]},
                "workspaces": {"data": [{"type": "workspaces", "id": ws_id}]}}}}),
    );
    assert_eq!(set.status, 201, "{:?}", set.body);
    let set_id = set.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let param = api.post(
        &format!("/api/v2/policy-sets/{set_id}/parameters"),
        &json!({"data": {"type": "vars", "attributes": {"key": "limit", "value": "2", "category": "policy-set"}}}),
    );
    assert_eq!(param.status, 201, "{:?}", param.body);
    let ready = dev.eventually(Duration::from_secs(30), || {
        let out = dev.kubectl_ok(&["get", "policysets", "-n", ORG, "-o", "wide"]);
        out.lines()
            .any(|l| l.starts_with("limits") || l.contains(" limits "))
            .then_some(out)
    });
    assert!(ready.is_some());

    let out = tf.run(&d, &["plan", "-input=false"]);
    let shown = strip_colours(&text(&out));
    assert!(shown.contains("Policy set 1: limits (1)"), "{shown}");
    assert!(shown.contains("Policy name: max-items"), "{shown}");
    assert!(shown.contains("Overall Result: FAILED"), "{shown}");
    let run = newest_run(&api, "limited");
    let got = outcomes(&api, run["id"].as_str().unwrap_or_default());
    assert!(
        got.iter().any(|o| o.0 == "limits"
            && o.2 == "failed"
            && o.4 == vec!["3 items, the limit is 2 (first: (sensitive value))".to_owned()]),
        "{got:?}"
    );
    let sets = dev.kubectl_ok(&["get", "policysets", "-n", ORG]);
    assert!(
        sets.lines()
            .any(|l| l.starts_with("polset-") && l.contains("limits") && l.contains("True")),
        "{sets}"
    );
}

/// A policy that needs more memory than the limit is stopped in its own process: it
/// errors with a clear reason, the policies after it in its set are not evaluated, other
/// sets are, and the API server goes on answering.
#[test]
fn a_policy_past_the_memory_limit_is_stopped_and_nothing_else_is() {
    let dev = Dev::start_with(&[
        "--engine",
        &terraform_path(),
        "--policy-memory-limit-mib",
        "256",
    ]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let hog = r#"
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: hungry
  namespace: polorg
spec:
  name: hungry
  workspaces: ["hog"]
  policies:
    - name: allocates
      enforcementLevel: advisory
      query: data.hog.deny
      rego: |
        package hog

        import rego.v1

        deny contains "big" if count(numbers.range(1, 300000000)) > 0
    - name: after-it
      enforcementLevel: advisory
      query: data.after.deny
      rego: |
        package after

        import rego.v1

        deny contains "never" if false
---
apiVersion: terrace.dev/v1alpha1
kind: PolicySet
metadata:
  name: calm
  namespace: polorg
spec:
  name: calm
  global: true
  policies:
    - name: fine
      enforcementLevel: mandatory
      query: data.fine.deny
      rego: |
        package fine

        import rego.v1

        deny contains "never" if false
"#;
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], hog);
    assert!(out.status.success(), "{}", text(&out));
    let tf = Terraform::for_dev(&dev);
    let dir = tempfile::tempdir().expect("work dir");
    let d = dir.path().join("hog");
    config(&d, "hog", "v", 1);
    let init = tf.run(&d, &["init", "-input=false"]);
    assert!(init.status.success(), "{}", text(&init));
    let out = tf.run(&d, &["plan", "-input=false"]);
    let shown = strip_colours(&text(&out));
    assert!(shown.contains("Policy set 2: hungry (2)"), "{shown}");
    let run = newest_run(&api, "hog");
    let got = outcomes(&api, run["id"].as_str().unwrap_or_default());
    let find = |name: &str| {
        got.iter()
            .find(|o| o.1 == name)
            .unwrap_or_else(|| panic!("{name} in {got:?}"))
            .clone()
    };
    let stopped = find("allocates");
    assert_eq!(stopped.2, "errored");
    assert!(
        stopped.4[0].contains("memory limit of 256 MiB"),
        "{stopped:?}"
    );
    let after = find("after-it");
    assert_eq!(after.2, "errored");
    assert!(after.4[0].contains("not evaluated"), "{after:?}");
    assert_eq!(find("fine").2, "passed");
    // The API server lives on.
    assert_eq!(api.get(&format!("/api/v2/organizations/{ORG}")).status, 200);
}
