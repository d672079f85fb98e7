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
    let main = main_tf(cidr);
    let files = [("main.tf", main.as_str()), ("tests/main.tftest.hcl", test)];
    assert_eq!(api.put_unauthenticated(path, targz(&files)), 200);
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
        json!([{"version": "1.0.0", "root": {"providers": [], "dependencies": []}, "submodules": []}])
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
