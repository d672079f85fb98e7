//! The real-cluster tier (issue 25, see `terrace_tests::real`): the features that need no
//! Pod to run, against a real kube-apiserver, with the operator and the API server as
//! processes holding the chart's ServiceAccount tokens and nothing else. Skipped (one
//! line) without `TERRACE_E2E_KUBECONFIG`.

use std::time::Duration;

use serde_json::json;
use terrace_tests::real::{RealCluster, eventually};
use terrace_tests::{Api, CLI_HOST, Terraform, terraform_path, text};

/// The workspace features through the JSON:API, the RBAC matrix of the chart's user
/// roles, and no `forbidden` from the components' own identities.
#[test]
fn workspaces_projects_locks_tags_keys_modules_and_rbac() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    let (api, url) = cluster.api_server();
    let operator = cluster.operator(&url, "terrace-operator-tier-0");
    let logs = || RealCluster::logs_of(&[&api, &operator]);
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("tier"));

    // A workspace, once the operator made the organization's namespace and default project.
    let ws = admin.first_workspace(
        &org,
        json!({"name": "net", "global-remote-state": false}),
        logs,
    );
    // Read your writes: the workspace answers at once, by ID and by name.
    assert_eq!(admin.get(&format!("/api/v2/workspaces/{ws}")).status, 200);
    let by_name = admin.get(&format!("/api/v2/organizations/{org}/workspaces/net"));
    assert_eq!(by_name.body["data"]["id"], ws.as_str());
    let app = admin.create_workspace(&org, json!({"name": "app"}));

    // Projects.
    let p = admin.post(
        &format!("/api/v2/organizations/{org}/projects"),
        &json!({"data": {"type": "projects", "attributes": {"name": "platform"}}}),
    );
    assert_eq!(p.status, 201, "{:?}", p.body);

    // Locks.
    let lock = admin.post(
        &format!("/api/v2/workspaces/{ws}/actions/lock"),
        &json!({"reason": "tier"}),
    );
    assert_eq!(lock.status, 200, "{:?}\n{}", lock.body, logs());
    assert_eq!(lock.body["data"]["attributes"]["locked"], true);
    let again = admin.post(&format!("/api/v2/workspaces/{ws}/actions/lock"), &json!({}));
    assert_eq!(again.status, 409);
    let unlock = admin.post(
        &format!("/api/v2/workspaces/{ws}/actions/unlock"),
        &json!({}),
    );
    assert_eq!(unlock.status, 200, "{:?}", unlock.body);

    // Tags and tag bindings.
    let tags = admin.post(
        &format!("/api/v2/workspaces/{ws}/relationships/tags"),
        &json!({"data": [{"type": "tags", "attributes": {"name": "network"}}]}),
    );
    assert_eq!(tags.status, 204, "{:?}", tags.body);
    let listed = admin.get(&format!(
        "/api/v2/organizations/{org}/workspaces?search[tags]=network"
    ));
    assert_eq!(
        listed.body["data"][0]["id"],
        ws.as_str(),
        "{:?}",
        listed.body
    );

    // Remote state consumers.
    let consumers = admin.post(
        &format!("/api/v2/workspaces/{ws}/relationships/remote-state-consumers"),
        &json!({"data": [{"type": "workspaces", "id": app}]}),
    );
    assert_eq!(consumers.status, 204, "{:?}", consumers.body);
    let read = admin.get(&format!(
        "/api/v2/workspaces/{ws}/relationships/remote-state-consumers"
    ));
    assert_eq!(read.body["data"][0]["id"], app.as_str(), "{:?}", read.body);

    // SSH keys (the private key in a Secret).
    let key = admin.post(
        &format!("/api/v2/organizations/{org}/ssh-keys"),
        &json!({"data": {"type": "ssh-keys", "attributes": {"name": "deploy", "value": "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"}}}),
    );
    assert_eq!(key.status, 201, "{:?}\n{}", key.body, logs());

    // Registry modules: created and deleted (the chart's API server role once lacked
    // delete, which answered 500 here).
    admin.create_module(&org, "vpc", "aws");
    let deleted = admin.post(
        &format!("/api/v2/registry-modules/actions/delete/{org}/vpc"),
        &json!({}),
    );
    assert!(
        deleted.status == 204 || deleted.status == 200,
        "delete module: {} {:?}\n{}",
        deleted.status,
        deleted.body,
        logs()
    );

    // A module test run whose Pod no node takes says what it waits for.
    let t = admin.create_module(&org, "waits", "aws");
    let cv = admin.uploaded_cv(&t);
    let created = admin.create_test_run(&t, &cv);
    assert_eq!(created.status, 201, "{:?}", created.body);
    let run = created.body["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let waiting = eventually(Duration::from_secs(60), || {
        let message = cluster.kubectl_ok(&[
            "get",
            "testrun",
            &run,
            "-n",
            &org,
            "-o",
            "jsonpath={.status.message}",
        ]);
        message.starts_with("waiting for a node").then_some(message)
    });
    assert!(
        waiting.is_some(),
        "the test run does not say it waits for a node\n{}",
        logs()
    );
    // So does its log, which `terraform test -cloud-run` follows.
    let log_url = created.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = log_url.strip_prefix(url.as_str()).unwrap_or(&log_url);
    let anonymous = Api::at(&url, None);
    let log = eventually(Duration::from_secs(30), || {
        let (status, log) = anonymous.get_text(path);
        (status == 200 && log.starts_with("\u{2}terrace: waiting for a node: ")).then_some(())
    });
    assert!(
        log.is_some(),
        "the test run's log while its Pod waits: {:?}",
        anonymous.get_text(path)
    );

    // The chart's user roles decide: a reader reads and may not lock (404, SPEC B7); a
    // locker locks.
    let sa = |role: &str| {
        let name = RealCluster::unique(role).replace("terrace-", "");
        cluster.kubectl_ok(&["create", "serviceaccount", &name, "-n", &org]);
        cluster.kubectl_ok(&[
            "create",
            "rolebinding",
            &name,
            "-n",
            &org,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={org}:{name}"),
        ]);
        Api::at(
            &url,
            Some(
                cluster
                    .kubectl_ok(&["create", "token", &name, "-n", &org])
                    .trim(),
            ),
        )
    };
    let reader = sa("terrace-workspace-reader");
    let seen = eventually(Duration::from_secs(30), || {
        let r = reader.get(&format!("/api/v2/workspaces/{ws}"));
        (r.status == 200).then_some(())
    });
    assert!(seen.is_some(), "a reader reads the workspace");
    let refused = reader.post(&format!("/api/v2/workspaces/{ws}/actions/lock"), &json!({}));
    assert_eq!(refused.status, 404, "{:?}", refused.body);
    let locker = sa("terrace-workspace-locker");
    let locked = locker.post(
        &format!("/api/v2/workspaces/{app}/actions/lock"),
        &json!({}),
    );
    assert_eq!(locked.status, 200, "{:?}", locked.body);
    let force = locker.post(
        &format!("/api/v2/workspaces/{app}/actions/force-unlock"),
        &json!({}),
    );
    assert_eq!(force.status, 404, "a locker may not force-unlock");
    let force = admin.post(
        &format!("/api/v2/workspaces/{app}/actions/force-unlock"),
        &json!({}),
    );
    assert_eq!(force.status, 200, "{:?}", force.body);

    // A notification configuration: its token in a Secret the API server writes, read by
    // the operator (by name, under the chart's rights) to sign the verification it sends.
    let receiver = terrace_tests::receiver::Receiver::start(|_, _| (200, Duration::ZERO));
    let r = admin.post(
        &format!("/api/v2/workspaces/{ws}/notification-configurations"),
        &json!({"data": {"type": "notification-configurations", "attributes": {
            "name": "hooks", "destination-type": "generic", "enabled": true,
            "token": "tier-token", "url": receiver.url("/hook"), "triggers": ["run:completed"]}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let nc = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let r = admin.post(
        &format!("/api/v2/notification-configurations/{nc}/actions/verify"),
        &json!({}),
    );
    assert_eq!(r.status, 200, "{:?}\n{}", r.body, logs());
    assert_eq!(
        r.body["data"]["attributes"]["delivery-responses"][0]["successful"], "true",
        "{:?}",
        r.body
    );
    let got = receiver.at("/hook");
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].headers.get("x-tfe-notification-signature"),
        Some(&terrace_crds::notification::signature(
            "tier-token",
            &got[0].body
        )),
        "signed with the token from its Secret"
    );

    // Deletes: safe delete of a workspace without state, force delete.
    let safe = admin.post(
        &format!("/api/v2/workspaces/{app}/actions/safe-delete"),
        &json!({}),
    );
    assert_eq!(safe.status, 204, "{:?}", safe.body);
    let gone = admin.call("DELETE", &format!("/api/v2/workspaces/{ws}"), None);
    assert_eq!(gone.status, 204, "{:?}", gone.body);
    let after = eventually(Duration::from_secs(30), || {
        (admin.get(&format!("/api/v2/workspaces/{ws}")).status == 404).then_some(())
    });
    assert!(after.is_some(), "the deleted workspace still answers");

    for c in [&api, &operator] {
        assert!(
            !c.log().to_lowercase().contains("forbidden"),
            "a component was refused by the chart's RBAC:\n{}",
            c.log()
        );
    }
    drop(operator);
    drop(api);
}

/// State through the terraform CLI's `cloud` block on a `local` workspace: the CLI plans
/// and applies here, terrace keeps the state and the lock.
#[test]
fn state_through_the_cloud_block_in_local_mode() {
    let Some(cluster) = RealCluster::from_env() else {
        return;
    };
    terraform_path();
    let (api, url) = cluster.api_server();
    let operator = cluster.operator(&url, "terrace-operator-tier-1");
    let admin = cluster.admin(&url);
    let org = admin.create_org(&RealCluster::unique("state"));
    admin.first_workspace(
        &org,
        json!({"name": "local", "execution-mode": "local"}),
        || RealCluster::logs_of(&[&api, &operator]),
    );
    let tf = Terraform::for_api(cluster.path(), &url, &cluster.admin_token);
    let dir = cluster.path().join("config");
    std::fs::create_dir_all(&dir).expect("config dir");
    std::fs::write(
        dir.join("main.tf"),
        format!(
            "terraform {{\n  cloud {{\n    hostname = \"{CLI_HOST}\"\n    organization = \"{org}\"\n    workspaces {{ name = \"local\" }}\n  }}\n}}\nresource \"terraform_data\" \"x\" {{ input = \"real\" }}\noutput \"x\" {{ value = terraform_data.x.output }}\n"
        ),
    )
    .expect("main.tf");
    let init = tf.run(&dir, &["init", "-input=false"]);
    assert!(init.status.success(), "init:\n{}", text(&init));
    let apply = tf.run(&dir, &["apply", "-auto-approve", "-input=false"]);
    let shown = text(&apply);
    assert!(apply.status.success(), "apply:\n{shown}\n{}", api.log());
    assert!(
        shown.contains("Apply complete! Resources: 1 added"),
        "{shown}"
    );
    let out = tf.run(&dir, &["output", "-raw", "x"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "real",
        "{}",
        text(&out)
    );
    let versions = cluster.kubectl_ok(&["get", "stateversions", "-n", &org, "-o", "name"]);
    assert_eq!(versions.lines().count(), 1, "{versions}");
}
