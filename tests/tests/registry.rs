//! The private module registry end to end (issue 28, docs/registry.md): versions
//! published through TFE's API (go-tfe's paths), their archives tested at upload, and
//! the real terraform CLI resolving `source = "HOST/ORG/NAME/PROVIDER"` through
//! `modules.v1`. A module that publishes only tested versions never offers one whose
//! tests failed.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::{Api, CLI_HOST, Dev, Terraform, targz, terraform_path, text};

const ORG: &str = "regorg";

fn main_tf(cidr: &str) -> String {
    format!(
        "variable \"cidr\" {{\n  type    = string\n  default = \"{cidr}\"\n}}\n\noutput \"cidr\" {{\n  value = var.cidr\n}}\n"
    )
}

const PASSING: &str = "run \"cidr\" {\n  assert {\n    condition     = output.cidr != \"\"\n    error_message = \"no cidr\"\n  }\n}\n";
const FAILING: &str = "run \"cidr\" {\n  assert {\n    condition     = output.cidr == \"nope\"\n    error_message = \"this version's test fails\"\n  }\n}\n";

fn create_module(api: &Api, name: &str, only_tested: bool) {
    let r = api.post(
        &format!("/api/v2/organizations/{ORG}/registry-modules"),
        &json!({"data": {"type": "registry-modules", "attributes": {
            "name": name, "provider": "aws", "registry-name": "private",
            "test-config": {"publish-only-tested": only_tested}}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(
        r.body["data"]["attributes"]["test-config"]["publish-only-tested"],
        only_tested
    );
}

/// Publishes `version` of module `name` (go-tfe's create path) with `test` as its test.
fn publish(api: &Api, name: &str, version: &str, cidr: &str, test: &str) -> Value {
    let main = main_tf(cidr);
    publish_files(
        api,
        name,
        version,
        &[("main.tf", main.as_str()), ("tests/main.tftest.hcl", test)],
    )
}

/// Publishes `version` of module `name` with an archive of `files`.
fn publish_files(api: &Api, name: &str, version: &str, files: &[(&str, &str)]) -> Value {
    let r = api.post(
        &format!("/api/v2/registry-modules/{ORG}/{name}/aws/versions"),
        &json!({"data": {"type": "registry-module-versions", "attributes": {"version": version, "commit-sha": "abc123"}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["status"], "pending");
    let upload = r.body["data"]["links"]["upload"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = &upload[upload.find("/api/v2/").expect("upload path")..];
    assert_eq!(api.put_unauthenticated(path, targz(files)), 200);
    r.body["data"].clone()
}

/// The version document once its tests finished.
fn tested(dev: &Dev, api: &Api, name: &str, version: &str) -> Value {
    dev.eventually(Duration::from_secs(120), || {
        let r = api.get(&format!(
            "/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/{name}/aws/version?module_version={version}"
        ));
        let t = r.body["data"]["attributes"]["test-status"].as_str().unwrap_or_default();
        (r.status == 200 && ["pass", "fail", "error"].contains(&t)).then(|| r.body["data"].clone())
    })
    .unwrap_or_else(|| panic!("{name} {version} was never tested: {}", dev.log()))
}

fn root(dir: &Path, module: &str) {
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::write(
        dir.join("main.tf"),
        format!(
            "module \"net\" {{\n  source  = \"{CLI_HOST}/{ORG}/{module}/aws\"\n  version = \"~> 1.0\"\n}}\n\noutput \"cidr\" {{\n  value = module.net.cidr\n}}\n"
        ),
    )
    .expect("main.tf");
}

/// The version `terraform init` installed.
fn installed(dir: &Path) -> String {
    let manifest =
        std::fs::read_to_string(dir.join(".terraform/modules/modules.json")).expect("modules.json");
    let v: Value = serde_json::from_str(&manifest).expect("json");
    v["Modules"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["Key"] == "net")
        .and_then(|m| m["Version"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn published_versions_install_with_the_cli_and_untested_ones_are_held_back() {
    let dev = Dev::start_with(&["--engine", &terraform_path(), "--auto-test-run-delay", "0s"]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let work = tempfile::tempdir().expect("work dir");

    // A module that publishes only tested versions: 1.0.0 passes, 1.1.0 fails.
    create_module(&api, "vpc", true);
    publish(&api, "vpc", "1.0.0", "10.0.0.0/16", PASSING);
    publish(&api, "vpc", "1.1.0", "10.1.0.0/16", FAILING);
    let passed = tested(&dev, &api, "vpc", "1.0.0");
    assert_eq!(passed["attributes"]["status"], "ok");
    assert_eq!(passed["attributes"]["test-status"], "pass");
    assert_eq!(passed["attributes"]["installable"], true);
    let failed = tested(&dev, &api, "vpc", "1.1.0");
    assert_eq!(failed["attributes"]["test-status"], "fail");
    assert_eq!(failed["attributes"]["installable"], false);
    assert!(
        failed["relationships"]["test-run"]["data"]["id"]
            .as_str()
            .unwrap_or_default()
            .starts_with("trun-"),
        "{failed}"
    );
    let dup = api.post(
        &format!("/api/v2/registry-modules/{ORG}/vpc/aws/versions"),
        &json!({"data": {"type": "registry-module-versions", "attributes": {"version": "1.0.0"}}}),
    );
    assert_eq!(dup.status, 422, "{:?}", dup.body);
    let bad = api.post(
        &format!("/api/v2/registry-modules/{ORG}/vpc/aws/versions"),
        &json!({"data": {"type": "registry-module-versions", "attributes": {"version": "one"}}}),
    );
    assert_eq!(bad.status, 422, "{:?}", bad.body);

    // The protocol offers 1.0.0 only; 1.1.0's download is 404.
    let listed = api.get(&format!("/api/registry/v1/modules/{ORG}/vpc/aws/versions"));
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    let versions: Vec<&str> = listed.body["modules"][0]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["1.0.0"]);
    let (st, _) = api.get_text(&format!(
        "/api/registry/v1/modules/{ORG}/vpc/aws/1.1.0/download"
    ));
    assert_eq!(st, 404);
    let outsider = Api::with_token(&dev, None);
    assert_eq!(
        outsider
            .get(&format!("/api/registry/v1/modules/{ORG}/vpc/aws/versions"))
            .status,
        401
    );

    // The CLI installs the newest tested version that matches ~> 1.0.
    let d = work.path().join("gated");
    root(&d, "vpc");
    let out = tf.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    assert_eq!(installed(&d), "1.0.0");
    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    let shown = text(&out);
    assert!(
        out.status.success() && shown.contains("10.0.0.0/16"),
        "{shown}"
    );

    // Every member of the organization reads its private registry, as in HCP Terraform
    // (issue 41 §5): an engineer bound to terrace-workspace-locker, the role of who runs
    // terraform against a workspace, installs the module too.
    let engineer = dev.role_token(ORG, "engineer", "terrace-workspace-locker");
    let as_engineer = Terraform::with_token(&dev, &engineer);
    let d = work.path().join("engineer");
    root(&d, "vpc");
    let out = as_engineer.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "the engineer's init: {}", text(&out));
    assert_eq!(installed(&d), "1.0.0");

    // Inside a remote run: the run's own CLI configuration and credential reach the
    // registry, and the engine in the run's Pod installs the same version.
    let d = work.path().join("remote");
    root(&d, "vpc");
    let main = std::fs::read_to_string(d.join("main.tf")).expect("main.tf");
    std::fs::write(
        d.join("main.tf"),
        format!(
            "terraform {{\n  cloud {{\n    hostname     = \"{CLI_HOST}\"\n    organization = \"{ORG}\"\n    workspaces {{\n      name = \"consumer\"\n    }}\n  }}\n}}\n{main}"
        ),
    )
    .expect("main.tf");
    let out = tf.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    let shown = text(&out);
    assert!(
        out.status.success() && shown.contains("10.0.0.0/16"),
        "the remote run installed the module: {shown}"
    );

    // Without the gate the newest version installs, tests or not.
    create_module(&api, "subnets", false);
    publish(&api, "subnets", "1.0.0", "10.2.0.0/16", PASSING);
    publish(&api, "subnets", "1.2.0", "10.3.0.0/16", FAILING);
    tested(&dev, &api, "subnets", "1.2.0");
    let d = work.path().join("open");
    root(&d, "subnets");
    let out = tf.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    assert_eq!(installed(&d), "1.2.0");
    // Turned on later (go-tfe's Update), the gate holds the failed version back at once.
    tested(&dev, &api, "subnets", "1.0.0");
    let r = api.call(
        "PATCH",
        &format!("/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/subnets/aws"),
        Some(&json!({"data": {"type": "registry-modules", "attributes": {"test-config": {"publish-only-tested": true}}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        r.body["data"]["attributes"]["test-config"]["publish-only-tested"],
        true
    );
    let listed = api.get(&format!(
        "/api/registry/v1/modules/{ORG}/subnets/aws/versions"
    ));
    assert_eq!(
        listed.body["modules"][0]["versions"],
        json!([{"version": "1.0.0", "root": {"path": "", "providers": [], "dependencies": []}, "submodules": []}])
    );

    // The module shows its versions; kubectl shows them with their tests.
    let m = api.get(&format!(
        "/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/vpc/aws"
    ));
    let statuses = &m.body["data"]["attributes"]["version-statuses"];
    assert_eq!(statuses[0]["version"], "1.1.0", "{statuses}");
    assert_eq!(statuses[1]["status"], "ok", "{statuses}");
    let shown = dev
        .eventually(Duration::from_secs(30), || {
            let out = dev.kubectl_ok(&["get", "moduleversions", "-n", ORG]);
            (out.contains("pass") && out.contains("fail")).then_some(out)
        })
        .expect("kubectl get moduleversions shows the tests");
    assert!(shown.contains("1.0.0") && shown.contains("ok"), "{shown}");

    // Deleting a version takes it out of the registry.
    let r = api.call(
        "DELETE",
        &format!("/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/vpc/aws/1.0.0"),
        None,
    );
    assert_eq!(r.status, 204, "{:?}", r.body);
    let gone = dev.eventually(Duration::from_secs(30), || {
        let r = api.get(&format!("/api/registry/v1/modules/{ORG}/vpc/aws/versions"));
        (r.body["modules"][0]["versions"].as_array().map(Vec::len) == Some(0)).then_some(())
    });
    assert!(gone.is_some(), "the deleted version is still offered");
}

/// The version document of `name` `version` once `ready` holds of it.
fn version_when(
    dev: &Dev,
    api: &Api,
    name: &str,
    version: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    dev.eventually(Duration::from_secs(60), || {
        let r = api.get(&format!(
            "/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/{name}/aws/version?module_version={version}"
        ));
        (r.status == 200 && ready(&r.body["data"])).then(|| r.body["data"].clone())
    })
    .unwrap_or_else(|| panic!("{name} {version} never got there: {}", dev.log()))
}

const LB_MAIN: &str = r#"
variable "cidr" {
  type        = string
  description = "The network's range."
  default     = "10.9.0.0/16"
}

variable "name" {
  type = string
  default = "lb"
}

resource "terraform_data" "marker" {
  input = var.name
}

module "listener" {
  source = "./modules/listener"
}

output "cidr" {
  description = "The range in use."
  value       = var.cidr
}
"#;

const DEPRECATE: &str = "deprecation";

#[test]
fn a_version_shows_what_its_modules_hold_and_deprecated_versions_warn_their_consumers() {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let work = tempfile::tempdir().expect("work dir");
    create_module(&api, "lb", false);

    // What the archive holds, read at upload: inputs, outputs, resources, the README,
    // submodules and examples, as the registry protocol shows a version.
    publish_files(
        &api,
        "lb",
        "1.0.0",
        &[
            ("main.tf", LB_MAIN),
            ("README.md", "# lb\n\nA load balancer.\n"),
            (
                "modules/listener/main.tf",
                "variable \"port\" {\n  type    = number\n  default = 443\n}\n",
            ),
            (
                "examples/basic/main.tf",
                "module \"lb\" {\n  source = \"../..\"\n}\n",
            ),
        ],
    );
    version_when(&dev, &api, "lb", "1.0.0", |d| {
        d["attributes"]["status"] == "ok"
    });
    let shown = api.get(&format!("/api/registry/v1/modules/{ORG}/lb/aws/1.0.0"));
    assert_eq!(shown.status, 200, "{:?}", shown.body);
    let root = &shown.body["root"];
    assert_eq!(root["readme"], "# lb\n\nA load balancer.\n", "{root}");
    assert_eq!(root["inputs"][0]["name"], "cidr", "{root}");
    assert_eq!(root["inputs"][0]["description"], "The network's range.");
    assert_eq!(root["inputs"][0]["default"], "\"10.9.0.0/16\"");
    assert_eq!(root["inputs"][0]["required"], false);
    assert_eq!(root["outputs"][0]["name"], "cidr");
    assert_eq!(root["outputs"][0]["description"], "The range in use.");
    assert_eq!(
        root["resources"],
        json!([{"name": "marker", "type": "terraform_data"}])
    );
    assert_eq!(root["dependencies"][0]["source"], "./modules/listener");
    assert_eq!(shown.body["submodules"][0]["path"], "modules/listener");
    assert_eq!(shown.body["submodules"][0]["inputs"][0]["default"], "443");
    assert_eq!(shown.body["examples"][0]["path"], "examples/basic");
    assert_eq!(shown.body["deprecation"], Value::Null);

    // A file that is not HCL refuses the version, saying which and why; it is never offered.
    publish_files(&api, "lb", "1.0.1", &[("main.tf", "variable \"x\" {\n")]);
    let refused = version_when(&dev, &api, "lb", "1.0.1", |d| {
        d["attributes"]["status"] == "reg_ingress_failed"
    });
    let why = refused["attributes"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("main.tf"), "{refused}");
    let listed = api.get(&format!("/api/registry/v1/modules/{ORG}/lb/aws/versions"));
    assert_eq!(
        listed.body["modules"][0]["versions"][0]["version"], "1.0.0",
        "{:?}",
        listed.body
    );
    assert_eq!(
        listed.body["modules"][0]["versions"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    // Deprecating (TFE's manage module versions API): bad requests are 422s.
    let at = format!("/api/v2/organizations/{ORG}/registry-modules/private/{ORG}/lb/aws/1.0.0");
    let body = |attrs: Value| json!({"data": {"type": "module-versions", "attributes": {DEPRECATE: attrs}}});
    let r = api.call(
        "PATCH",
        &at,
        Some(&body(json!({"deprecated-status": "Gone"}))),
    );
    assert_eq!(r.status, 422, "{:?}", r.body);
    let r = api.call(
        "PATCH",
        &at,
        Some(&body(
            json!({"deprecated-status": "Deprecated", "link": "ftp://example.com"}),
        )),
    );
    assert_eq!(r.status, 422, "{:?}", r.body);
    let r = api.call(
        "PATCH",
        &at,
        Some(&body(json!({
            "deprecated-status": "Deprecated",
            "reason": "Replaced by 2.x: it leaks connections.",
            "link": "https://example.com/lb-upgrade",
        }))),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["included"][0]["type"], "deprecations");
    assert_eq!(
        r.body["data"]["attributes"][DEPRECATE]["reason"],
        "Replaced by 2.x: it leaks connections."
    );
    let shown = api.get(&format!("/api/registry/v1/modules/{ORG}/lb/aws/1.0.0"));
    assert_eq!(
        shown.body[DEPRECATE]["link"],
        "https://example.com/lb-upgrade"
    );
    let wide = dev.kubectl_ok(&["get", "moduleversions", "-n", ORG, "-o", "wide"]);
    assert!(wide.contains("Replaced by 2.x"), "{wide}");

    // Still installable; a remote run that installs it warns in its output.
    let d = work.path().join("consumer");
    std::fs::create_dir_all(&d).expect("dir");
    std::fs::write(
        d.join("main.tf"),
        format!(
            "terraform {{\n  cloud {{\n    hostname     = \"{CLI_HOST}\"\n    organization = \"{ORG}\"\n    workspaces {{\n      name = \"lb-consumer\"\n    }}\n  }}\n}}\n\nmodule \"net\" {{\n  source  = \"{CLI_HOST}/{ORG}/lb/aws\"\n  version = \"~> 1.0\"\n}}\n\noutput \"cidr\" {{\n  value = module.net.cidr\n}}\n"
        ),
    )
    .expect("main.tf");
    let out = tf.run(&d, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    let out = tf.run(&d, &["apply", "-auto-approve", "-input=false"]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("Deprecated module version") && shown.contains("it leaks connections"),
        "the remote run warns of the deprecated version: {shown}"
    );
    assert!(shown.contains("10.9.0.0/16"), "{shown}");

    // Reverted, the version is as it was.
    let r = api.call(
        "PATCH",
        &at,
        Some(&body(json!({"deprecated-status": "Undeprecated"}))),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"][DEPRECATE], Value::Null);
    let shown = api.get(&format!("/api/registry/v1/modules/{ORG}/lb/aws/1.0.0"));
    assert_eq!(shown.body[DEPRECATE], Value::Null);
}
