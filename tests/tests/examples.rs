//! End-to-end test of `examples/`. Everything outside `examples/gitops` must apply with a
//! single `kubectl apply -R -f` against `terrace dev` and then become what the comments in
//! the files say: IDs (pinned or assigned), workspaces in the JSON:API with their tags,
//! agent pool, VCS repository, SSH key and remote state consumers, a module whose
//! sensitive test variable never shows its value, a test run waiting for its upload, and
//! RoleBindings that give each subject the answers `kubectl auth can-i` and the API agree
//! on. The GitOps manifests (Argo CD, Flux) need CRDs that `terrace dev` doesn't have, so
//! they are only parsed.
//!
//! Where possible the expectations come from the manifests themselves (every Workspace's
//! TFE name, tags and execution mode), so a change to an example that breaks it fails
//! here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::{Api, Dev, have_kubectl, workspace_root};

/// The subfolder of GitOps objects that `kubectl apply -R -f examples/` can't apply.
const GITOPS_DIR: &str = "gitops";
/// The organization (and namespace) of the examples.
const ORG: &str = "acme";
/// The module test API of the example module.
const MODULE_T: &str = "/api/v2/organizations/acme/tests/registry-modules/private/acme/vpc/aws";
/// How long the operator may take to assign IDs and write status.
const SETTLE: Duration = Duration::from_secs(30);

fn examples_dir() -> PathBuf {
    workspace_root().join("examples")
}

/// The manifest files under `dir` in the order `kubectl apply -R` visits them (entries
/// sorted by name, folders entered where they sort), leaving out folders named `skip`.
fn manifest_files(dir: &Path, skip: Option<&str>) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    let mut out = Vec::new();
    for path in entries {
        if path.is_dir() {
            if skip.is_some_and(|s| path.file_name().is_some_and(|n| n == s)) {
                continue;
            }
            out.extend(manifest_files(&path, skip));
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        {
            out.push(path);
        }
    }
    out
}

/// The documents of a (multi-document) YAML file; documents holding only comments are
/// left out.
fn documents(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut flush = |current: &mut String| {
        let body = std::mem::take(current);
        let meaningful = body.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        });
        if meaningful {
            let v = terrace_simulator::patch::parse_yaml_or_json(body.as_bytes())
                .unwrap_or_else(|e| panic!("{} does not parse: {e:?}", path.display()));
            docs.push(v);
        }
    };
    for line in text.lines() {
        if line.trim_end() == "---" {
            flush(&mut current);
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current);
    docs
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Copies `examples/` without its GitOps folder into `dest`.
fn copy_without_gitops(src: &Path, dest: &Path) {
    std::fs::create_dir_all(dest).expect("create copy");
    for entry in std::fs::read_dir(src).expect("read examples") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("file name").to_owned();
        if path.is_dir() {
            if name != GITOPS_DIR {
                copy_without_gitops(&path, &dest.join(&name));
            }
        } else {
            std::fs::copy(&path, dest.join(&name)).expect("copy example");
        }
    }
}

/// Every example file, including the GitOps ones, is well-formed: each document has an
/// apiVersion, a kind and a name; the folder applies in order (the organization's
/// Namespace before anything in it); the GitOps objects are the Argo CD and Flux kinds
/// and skip their own folder.
#[test]
fn every_example_is_well_formed() {
    let all = manifest_files(&examples_dir(), None);
    assert!(!all.is_empty(), "no examples found");
    let mut gitops_kinds = BTreeSet::new();
    let mut namespace_seen = false;
    for file in &all {
        let docs = documents(file);
        assert!(!docs.is_empty(), "{} holds no object", file.display());
        let in_gitops = file
            .strip_prefix(examples_dir())
            .is_ok_and(|rel| rel.starts_with(GITOPS_DIR));
        for doc in &docs {
            let what = format!("{}: {doc}", file.display());
            assert!(
                !str_at(doc, "/apiVersion").is_empty(),
                "no apiVersion in {what}"
            );
            assert!(!str_at(doc, "/kind").is_empty(), "no kind in {what}");
            assert!(
                !str_at(doc, "/metadata/name").is_empty(),
                "no name in {what}"
            );
            if in_gitops {
                gitops_kinds.insert(format!(
                    "{} {}",
                    str_at(doc, "/apiVersion"),
                    str_at(doc, "/kind")
                ));
                continue;
            }
            if str_at(doc, "/kind") == "Namespace" && str_at(doc, "/metadata/name") == ORG {
                namespace_seen = true;
            }
            if str_at(doc, "/metadata/namespace") == ORG {
                assert!(
                    namespace_seen,
                    "{what} comes before the Namespace {ORG} in apply order"
                );
            }
            if str_at(doc, "/apiVersion").starts_with("terrace.dev/")
                && str_at(doc, "/kind") != "Organization"
            {
                assert_eq!(str_at(doc, "/metadata/namespace"), ORG, "{what}");
            }
        }
        if in_gitops {
            let text = std::fs::read_to_string(file).expect("read");
            assert!(
                text.contains("gitops"),
                "{} must keep its own folder out of what it syncs",
                file.display()
            );
        }
    }
    for kind in [
        "argoproj.io/v1alpha1 Application",
        "source.toolkit.fluxcd.io/v1 GitRepository",
        "kustomize.toolkit.fluxcd.io/v1 Kustomization",
    ] {
        assert!(
            gitops_kinds.contains(kind),
            "examples/{GITOPS_DIR} has no {kind}: {gitops_kinds:?}"
        );
    }
    let app = manifest_files(&examples_dir().join(GITOPS_DIR), None)
        .iter()
        .flat_map(|f| documents(f))
        .find(|d| str_at(d, "/kind") == "Application")
        .expect("Application");
    assert_eq!(
        app.pointer("/spec/source/directory/recurse"),
        Some(&json!(true))
    );
    assert!(str_at(&app, "/spec/source/directory/exclude").contains(GITOPS_DIR));
}

/// `kubectl auth can-i VERB RESOURCE -n acme --as USER [--as-group GROUP]`.
fn can_i(dev: &Dev, verb: &str, resource: &str, user: &str, group: Option<&str>) -> bool {
    let mut args = vec!["auth", "can-i", verb, resource, "-n", ORG, "--as", user];
    if let Some(g) = group {
        args.extend(["--as-group", g]);
    }
    let out = dev.kubectl(&args);
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl {args:?}: {answer:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

/// The one test that applies the folder: each check below is a promise made by a comment
/// in an example.
#[test]
fn examples_apply_in_one_go_and_become_what_they_promise() {
    if !have_kubectl() {
        eprintln!("kubectl is not installed: skipping (the README's test command installs it)");
        return;
    }
    let dev = Dev::start();
    let api = Api::admin(&dev);

    // One `kubectl apply -R -f` of the folder without gitops/ creates every object.
    let copy = dev.dir().join("examples");
    copy_without_gitops(&examples_dir(), &copy);
    let copy_arg = copy.to_str().expect("utf-8 path");
    let files = manifest_files(&copy, None);
    let docs: Vec<Value> = files.iter().flat_map(|f| documents(f)).collect();
    let out = dev.kubectl_ok(&["apply", "-R", "-f", copy_arg]);
    let created: Vec<&str> = out.lines().filter(|l| l.ends_with(" created")).collect();
    assert_eq!(created.len(), docs.len(), "apply output:\n{out}");
    let listed = dev.kubectl_ok(&["get", "-R", "-f", copy_arg, "-o", "name"]);
    assert_eq!(listed.lines().count(), docs.len(), "{listed}");

    // The organization becomes Ready and shows in the API.
    let ready = dev.eventually(SETTLE, || {
        let out = dev.kubectl(&[
            "get",
            "organization",
            ORG,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    });
    assert!(ready.is_some(), "organization never Ready: {}", dev.log());

    // Every PolicySet compiles: the operator says Ready.
    for set in docs.iter().filter(|d| str_at(d, "/kind") == "PolicySet") {
        let name = str_at(set, "/metadata/name");
        let ready = dev.eventually(SETTLE, || {
            let out = dev.kubectl(&[
                "get",
                "policyset",
                name,
                "-n",
                ORG,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
        });
        assert!(
            ready.is_some(),
            "policy set {name} never Ready: {}",
            dev.kubectl_ok(&["get", "policyset", name, "-n", ORG, "-o", "yaml"])
        );
    }

    // Every Workspace manifest appears in the API with an ID, its TFE name, execution
    // mode and flat tags; a pinned ID is kept; the label and status.id agree.
    let workspaces: Vec<&Value> = docs
        .iter()
        .filter(|d| str_at(d, "/kind") == "Workspace")
        .collect();
    assert!(
        workspaces.len() >= 4,
        "the examples promise several workspaces"
    );
    let listed = dev.eventually(SETTLE, || {
        let r = api.get("/api/v2/organizations/acme/workspaces?page%5Bsize%5D=100");
        let data = r.body["data"].as_array().cloned().unwrap_or_default();
        (r.status == 200 && data.len() == workspaces.len()).then_some(data)
    });
    let listed = listed.unwrap_or_else(|| {
        panic!(
            "the API never listed the {} example workspaces: {}",
            workspaces.len(),
            dev.log()
        )
    });
    let by_name: BTreeMap<String, Value> = listed
        .into_iter()
        .map(|w| (str_at(&w, "/attributes/name").to_owned(), w))
        .collect();
    let mut ids = BTreeMap::new();
    for ws in &workspaces {
        let object = str_at(ws, "/metadata/name");
        let name = str_at(ws, "/spec/name");
        let shown = by_name
            .get(name)
            .unwrap_or_else(|| panic!("workspace {name} missing from {by_name:?}"));
        let id = str_at(shown, "/id").to_owned();
        assert!(id.starts_with("ws-") && id.len() == 19, "{name}: id {id}");
        let pinned = str_at(ws, "/metadata/labels/terrace.dev~1id");
        if !pinned.is_empty() {
            assert_eq!(id, pinned, "{name}: the pinned ID was not kept");
        }
        let label = dev.kubectl_ok(&[
            "get",
            "workspace",
            object,
            "-n",
            ORG,
            "-o",
            "jsonpath={.metadata.labels.terrace\\.dev/id} {.status.id}",
        ]);
        assert_eq!(label, format!("{id} {id}"), "{name}: label and status.id");
        assert_eq!(
            str_at(shown, "/attributes/execution-mode"),
            str_at(ws, "/spec/executionMode"),
            "{name}"
        );
        let mut tags: Vec<String> = ws["spec"]["tags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect();
        tags.sort();
        assert_eq!(
            shown["attributes"]["tag-names"],
            json!(tags),
            "{name}: tag-names"
        );
        ids.insert(object.to_owned(), id);
    }
    let ws = |object: &str| -> (&str, &Value) {
        let id = ids
            .get(object)
            .unwrap_or_else(|| panic!("no example {object}"));
        let name = workspaces
            .iter()
            .find(|w| str_at(w, "/metadata/name") == object)
            .map(|w| str_at(w, "/spec/name"))
            .unwrap_or_default();
        (id.as_str(), &by_name[name])
    };

    // networking-prod: pinned ID, project platform, own + inherited tag bindings, state
    // shared with exactly app-frontend and datacenter; the tag filter finds it.
    let (net_id, net) = ws("networking-prod");
    assert_eq!(net_id, "ws-NetworkingProd01");
    // Its notification configurations (named by the workspace's TFE name) show under it,
    // the token never.
    let ncs = dev
        .eventually(SETTLE, || {
            let r = api.get(&format!(
                "/api/v2/workspaces/{net_id}/notification-configurations"
            ));
            let data = r.body["data"].as_array().cloned().unwrap_or_default();
            (data.len() == 2).then_some(data)
        })
        .expect("the example notification configurations under networking-prod");
    assert!(ncs.iter().all(|n| str_at(n, "/id").starts_with("nc-")));
    assert!(ncs.iter().all(|n| n["attributes"]["token"].is_null()));
    assert!(
        !json!(ncs)
            .to_string()
            .contains("example-not-a-real-hook-token")
    );
    let platform_id = dev.kubectl_ok(&[
        "get",
        "project",
        "platform",
        "-n",
        ORG,
        "-o",
        "jsonpath={.metadata.labels.terrace\\.dev/id}",
    ]);
    assert!(platform_id.starts_with("prj-"), "{platform_id}");
    assert_eq!(str_at(net, "/relationships/project/data/id"), platform_id);
    let effective = dev.eventually(SETTLE, || {
        let r = api.get(&format!(
            "/api/v2/workspaces/{net_id}/effective-tag-bindings"
        ));
        let pairs: BTreeSet<(String, String)> = r.body["data"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| {
                (
                    str_at(b, "/attributes/key").to_owned(),
                    str_at(b, "/attributes/value").to_owned(),
                )
            })
            .collect();
        (pairs.len() == 3).then_some(pairs)
    });
    let expected: BTreeSet<(String, String)> = [
        ("environment", "prod"),
        ("team", "platform"),
        ("cost-center", "1234"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(effective, Some(expected), "effective tag bindings");
    let r = api.get(&format!(
        "/api/v2/workspaces/{net_id}/relationships/remote-state-consumers"
    ));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let consumers: BTreeSet<&str> = r.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| str_at(w, "/id"))
        .collect();
    let expected: BTreeSet<&str> = [ids["app-frontend"].as_str(), ids["datacenter"].as_str()]
        .into_iter()
        .collect();
    assert_eq!(consumers, expected, "remote state consumers");
    let r = api.get("/api/v2/organizations/acme/workspaces?search%5Btags%5D=networking");
    let found: Vec<&str> = r.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| str_at(w, "/id"))
        .collect();
    assert_eq!(found, [net_id], "search[tags]=networking");

    // datacenter: agent execution on the pinned agent pool.
    let (_, dc) = ws("datacenter");
    assert_eq!(
        str_at(dc, "/relationships/agent-pool/data/id"),
        "apool-OnPremAgents0001"
    );
    // app-frontend: linked to GitHub through the pinned OAuth token, with the SSH key.
    let (_, app) = ws("app-frontend");
    assert_eq!(
        str_at(app, "/attributes/vcs-repo/identifier"),
        "acme/app-frontend"
    );
    assert_eq!(
        str_at(app, "/attributes/vcs-repo/oauth-token-id"),
        "ot-GitHubAcme000001"
    );
    assert_eq!(
        str_at(app, "/relationships/ssh-key/data/id"),
        "sshkey-GitHubDeployKey1"
    );
    assert_eq!(app["attributes"]["global-remote-state"], true);
    // state-only: the organization's default project.
    let (_, local) = ws("state-only");
    let default_id = dev.kubectl_ok(&[
        "get",
        "project",
        "default",
        "-n",
        ORG,
        "-o",
        "jsonpath={.metadata.labels.terrace\\.dev/id}",
    ]);
    assert_eq!(str_at(local, "/relationships/project/data/id"), default_id);

    // Secrets never leave the cluster through the API: the SSH key is listed by name.
    let secret_values: Vec<String> = docs
        .iter()
        .filter(|d| str_at(d, "/kind") == "Secret")
        .flat_map(|d| {
            d["stringData"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(secret_values.len() >= 3, "{secret_values:?}");
    let keys = api.get("/api/v2/organizations/acme/ssh-keys");
    assert_eq!(str_at(&keys.body, "/data/0/id"), "sshkey-GitHubDeployKey1");
    assert_eq!(
        str_at(&keys.body, "/data/0/attributes/name"),
        "github-deploy-key"
    );

    // The module and its test variables: the sensitive one reads as "" and its value is
    // nowhere in the API's answer nor in the TestVariable object.
    let vars = dev.eventually(SETTLE, || {
        let r = api.get(&format!("{MODULE_T}/vars"));
        let data = r.body["data"].as_array().cloned().unwrap_or_default();
        (r.status == 200 && data.len() == 2).then_some(r.body)
    });
    let vars = vars.unwrap_or_else(|| panic!("the module's two test variables: {}", dev.log()));
    let var = |key: &str| -> Value {
        vars["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| str_at(v, "/attributes/key") == key)
            .cloned()
            .unwrap_or_else(|| panic!("no variable {key} in {vars}"))
    };
    let region = var("TF_VAR_region");
    assert_eq!(str_at(&region, "/attributes/value"), "eu-west-1");
    assert_eq!(region["attributes"]["sensitive"], false);
    let secret = var("AWS_SECRET_ACCESS_KEY");
    assert_eq!(secret["attributes"]["sensitive"], true);
    assert_eq!(str_at(&secret, "/attributes/value"), "");
    assert_eq!(str_at(&secret, "/attributes/category"), "env");
    let object = dev.kubectl_ok(&[
        "get",
        "testvariable",
        "vpc-aws-secret",
        "-n",
        ORG,
        "-o",
        "json",
    ]);
    for value in &secret_values {
        assert!(
            !vars.to_string().contains(value.as_str()),
            "API shows {value}"
        );
        assert!(
            !object.contains(value.as_str()),
            "the TestVariable holds {value}"
        );
    }

    // networking-prod's workspace variables (35-workspace-variables.yaml): each one of
    // the file in the API, the HCL one verbatim, the sensitive one `null` and its value
    // nowhere in the API's answer nor in the WorkspaceVariable objects.
    let expected: Vec<&Value> = docs
        .iter()
        .filter(|d| str_at(d, "/kind") == "WorkspaceVariable")
        .collect();
    assert!(
        expected.len() >= 4,
        "the examples promise four workspace variables"
    );
    let ws_vars = dev.eventually(SETTLE, || {
        let r = api.get(&format!("/api/v2/workspaces/{net_id}/vars"));
        let data = r.body["data"].as_array().cloned().unwrap_or_default();
        (r.status == 200 && data.len() == expected.len()).then_some(r.body)
    });
    let ws_vars =
        ws_vars.unwrap_or_else(|| panic!("networking-prod's workspace variables: {}", dev.log()));
    for manifest in &expected {
        let key = str_at(manifest, "/spec/key");
        let shown = ws_vars["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| str_at(v, "/attributes/key") == key)
            .unwrap_or_else(|| panic!("no variable {key} in {ws_vars}"));
        assert!(str_at(shown, "/id").starts_with("var-"), "{shown}");
        assert_eq!(
            str_at(shown, "/attributes/category"),
            str_at(manifest, "/spec/category"),
            "{key}"
        );
        assert_eq!(
            str_at(shown, "/relationships/configurable/data/id"),
            net_id,
            "{key}"
        );
        if manifest["spec"]["sensitive"] == true {
            assert_eq!(shown["attributes"]["value"], Value::Null, "{key}");
            assert_eq!(shown["attributes"]["sensitive"], true, "{key}");
        } else {
            assert_eq!(
                str_at(shown, "/attributes/value"),
                str_at(manifest, "/spec/value"),
                "{key}"
            );
            assert_eq!(
                shown["attributes"]["hcl"],
                manifest["spec"]["hcl"].as_bool().unwrap_or(false),
                "{key}"
            );
        }
    }
    let objects = dev.kubectl_ok(&["get", "workspacevariables", "-n", ORG, "-o", "json"]);
    for value in &secret_values {
        assert!(
            !ws_vars.to_string().contains(value.as_str()),
            "API shows {value}"
        );
        assert!(
            !objects.contains(value.as_str()),
            "a WorkspaceVariable holds {value}"
        );
    }

    // The test run waits for the upload of its configuration version, as documented:
    // pending, Ready False, Reconciling True (WaitingForInputs), and no Pod.
    let waiting = dev.eventually(SETTLE, || {
        let out = dev.kubectl(&["get", "testrun", "vpc-smoke", "-n", ORG, "-o", "json"]);
        let run: Value = serde_json::from_slice(&out.stdout).ok()?;
        let cond = |t: &str| {
            run["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == t)
                .cloned()
                .unwrap_or(Value::Null)
        };
        let reconciling = cond("Reconciling");
        (str_at(&run, "/status/status") == "pending"
            && str_at(&run, "/status/id").starts_with("trun-")
            && reconciling["status"] == "True"
            && reconciling["reason"] == "WaitingForInputs"
            && cond("Ready")["status"] == "False")
            .then_some(run)
    });
    let run = waiting.unwrap_or_else(|| {
        let out = dev.kubectl(&["get", "testrun", "vpc-smoke", "-n", ORG, "-o", "yaml"]);
        panic!(
            "the test run never reported waiting for its upload:\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(
        run.to_string()
            .contains("waiting for the upload of configuration version vpc-main"),
        "{run}"
    );
    let run_id = str_at(&run, "/status/id");
    let r = api.get(&format!("{MODULE_T}/test-runs/{run_id}"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(str_at(&r.body, "/data/attributes/status"), "pending");
    let pods = dev.kubectl_ok(&["get", "pods", "-n", ORG, "-o", "name"]);
    assert!(pods.trim().is_empty(), "a waiting run has no Pod: {pods}");

    // RBAC: each subject of 50-rbac.yaml gets the answers its comment promises.
    let sa = |n: &str| format!("system:serviceaccount:{ORG}:{n}");
    let ws_res = "workspaces.terrace.dev";
    let cases: &[(&str, Option<&str>, &str, &str, bool)] = &[
        // terrace-owner: a ServiceAccount and an OIDC group.
        (&sa("terraform-ci"), None, "create", ws_res, true),
        (&sa("terraform-ci"), None, "force-delete", ws_res, true),
        (&sa("terraform-ci"), None, "manage", ws_res, true),
        (
            &sa("terraform-ci"),
            None,
            "create",
            "testruns.terrace.dev",
            true,
        ),
        (
            &sa("terraform-ci"),
            None,
            "create",
            "testvariables.terrace.dev",
            true,
        ),
        (
            "carol@acme.example",
            Some("acme:platform-owners"),
            "create",
            ws_res,
            true,
        ),
        (
            &sa("terraform-ci"),
            None,
            "delete",
            "workspacevariables.terrace.dev",
            true,
        ),
        // terrace-workspace-admin: settings and force-unlock, not create/force-delete.
        ("dana@acme.example", None, "update", ws_res, true),
        ("dana@acme.example", None, "force-unlock", ws_res, true),
        ("dana@acme.example", None, "lock", ws_res, true),
        ("dana@acme.example", None, "create", ws_res, false),
        ("dana@acme.example", None, "force-delete", ws_res, false),
        ("dana@acme.example", None, "manage", ws_res, false),
        (
            "dana@acme.example",
            None,
            "update",
            "workspacevariables.terrace.dev",
            true,
        ),
        // terrace-workspace-locker: lock, not update.
        (&sa("release-bot"), None, "lock", ws_res, true),
        (&sa("release-bot"), None, "list", ws_res, true),
        (&sa("release-bot"), None, "update", ws_res, false),
        (&sa("release-bot"), None, "force-unlock", ws_res, false),
        // Every member reads the private registry (issue 41 §5).
        (
            &sa("release-bot"),
            None,
            "get",
            "registrymodules.terrace.dev",
            true,
        ),
        (
            &sa("release-bot"),
            None,
            "list",
            "moduleversions.terrace.dev",
            true,
        ),
        (
            &sa("release-bot"),
            None,
            "create",
            "moduleversions.terrace.dev",
            false,
        ),
        // terrace-workspace-reader: read only.
        (&sa("dashboard"), None, "list", ws_res, true),
        (&sa("dashboard"), None, "get", "testruns.terrace.dev", true),
        (&sa("dashboard"), None, "lock", ws_res, false),
        (
            &sa("dashboard"),
            None,
            "list",
            "workspacevariables.terrace.dev",
            true,
        ),
        (
            &sa("dashboard"),
            None,
            "create",
            "workspacevariables.terrace.dev",
            false,
        ),
        (
            &sa("release-bot"),
            None,
            "get",
            "workspacevariables.terrace.dev",
            false,
        ),
        (&sa("dashboard"), None, "update", ws_res, false),
        (
            "erin@acme.example",
            Some("acme:developers"),
            "list",
            ws_res,
            true,
        ),
        (
            "erin@acme.example",
            Some("acme:developers"),
            "lock",
            ws_res,
            false,
        ),
        // A Role scoped to one workspace object.
        (
            "oncall@acme.example",
            None,
            "lock",
            "workspaces.terrace.dev/networking-prod",
            true,
        ),
        (
            "oncall@acme.example",
            None,
            "lock",
            "workspaces.terrace.dev/state-only",
            false,
        ),
        ("oncall@acme.example", None, "list", ws_res, false),
        // Nobody else.
        ("mallory@example.com", None, "get", ws_res, false),
    ];
    for (user, group, verb, resource, want) in cases {
        assert_eq!(
            can_i(&dev, verb, resource, user, *group),
            *want,
            "kubectl auth can-i {verb} {resource} --as {user} {group:?}"
        );
    }

    // The API asks the same questions, with ServiceAccount tokens as TFE tokens.
    let token = |n: &str| {
        dev.kubectl_ok(&["create", "token", n, "-n", ORG])
            .trim()
            .to_owned()
    };
    let lock_path = format!("/api/v2/workspaces/{net_id}/actions/lock");
    let unlock_path = format!("/api/v2/workspaces/{net_id}/actions/unlock");
    let update = json!({"data": {"type": "workspaces", "attributes": {"description": "changed"}}});
    let bot_token = token("release-bot");
    let bot = Api::with_token(&dev, Some(&bot_token));
    let r = bot.get(&format!("/api/v2/workspaces/{net_id}"));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["data"]["attributes"]["permissions"]["can-lock"],
        true
    );
    assert_eq!(
        r.body["data"]["attributes"]["permissions"]["can-update"],
        false
    );
    assert_eq!(
        bot.post(&lock_path, &json!({"reason": "deploy"})).status,
        200
    );
    let holder = dev.kubectl_ok(&[
        "get",
        "workspace",
        "networking-prod",
        "-n",
        ORG,
        "-o",
        "jsonpath={.metadata.annotations.terrace\\.dev/locked-by}",
    ]);
    assert!(holder.contains("release-bot"), "lock holder {holder:?}");
    let r = bot.call(
        "PATCH",
        &format!("/api/v2/workspaces/{net_id}"),
        Some(&update),
    );
    assert_eq!(
        r.status, 403,
        "a locker may not change settings: {:?}",
        r.body
    );
    assert_eq!(bot.post(&unlock_path, &json!(null)).status, 200);

    let dashboard_token = token("dashboard");
    let dashboard = Api::with_token(&dev, Some(&dashboard_token));
    let r = dashboard.get("/api/v2/organizations/acme/workspaces");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["data"].as_array().map(Vec::len),
        Some(workspaces.len())
    );
    let r = dashboard.post(&lock_path, &json!({"reason": "nope"}));
    assert_eq!(
        r.status, 404,
        "SPEC: lock without permission is 404: {:?}",
        r.body
    );

    dev.kubectl_ok(&["create", "serviceaccount", "stranger", "-n", ORG]);
    let stranger_token = token("stranger");
    let stranger = Api::with_token(&dev, Some(&stranger_token));
    let r = stranger.get(&format!("/api/v2/workspaces/{net_id}"));
    assert_eq!(
        r.status, 404,
        "an unbound caller sees 404, not 403: {:?}",
        r.body
    );

    let ci_token = token("terraform-ci");
    let ci = Api::with_token(&dev, Some(&ci_token));
    let created = ci.create_workspace(
        ORG,
        json!({"name": "made-by-ci", "execution-mode": "local"}),
    );
    assert!(created.starts_with("ws-"));

    // Applying the same folder again changes nothing (what a GitOps tool does on every
    // sync): the operator's labels and status don't fight the manifests.
    let again = dev.kubectl_ok(&["apply", "-R", "-f", copy_arg]);
    let changed: Vec<&str> = again
        .lines()
        .filter(|l| !l.ends_with(" unchanged"))
        .collect();
    assert!(changed.is_empty(), "a second apply changed {changed:?}");
}
