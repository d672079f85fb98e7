//! Notifications end to end (issue 27 §5, docs/notifications.md): `terrace dev` with the
//! real terraform as the engine, notification configurations made through the API, and a
//! webhook receiver on loopback (which `terrace dev` allows). A run's notifications reach
//! a generic destination signed with its token, a failing destination is retried, a
//! disabled one gets nothing, verify sends a verification, and a private address is
//! refused without a request.

use std::time::Duration;

use serde_json::{Value, json};
use terrace_crds::notification::signature;
use terrace_tests::receiver::Receiver;
use terrace_tests::{Api, Dev, terraform_path};

const ORG: &str = "notifyorg";
const TOKEN: &str = "hook-s3cret";

fn nc(api: &Api, ws: &str, attrs: Value) -> String {
    let r = api.post(
        &format!("/api/v2/workspaces/{ws}/notification-configurations"),
        &json!({"data": {"type": "notification-configurations", "attributes": attrs}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
}

/// Checks a generic delivery: the signature is the HMAC-SHA512 of the body with the
/// token, and answers its payload.
fn signed(r: &terrace_tests::receiver::Received) -> Value {
    assert_eq!(
        r.headers
            .get("x-tfe-notification-signature")
            .map(String::as_str),
        Some(signature(TOKEN, &r.body).as_str()),
        "signature of {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(
        r.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    r.json()
}

#[test]
fn a_runs_notifications_reach_their_destinations() {
    let receiver = Receiver::start(|path, n| match (path, n) {
        // The flaky destination fails its first delivery.
        ("/flaky", 0) => (500, Duration::ZERO),
        _ => (200, Duration::ZERO),
    });
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let ws = api.create_workspace(ORG, json!({"name": "app", "auto-apply": true}));

    let generic = nc(
        &api,
        &ws,
        json!({"name": "hooks", "destination-type": "generic", "enabled": true, "token": TOKEN,
               "url": receiver.url("/generic"),
               "triggers": ["run:created", "run:planning", "run:needs_attention",
                            "run:applying", "run:completed", "run:errored"]}),
    );
    let flaky = nc(
        &api,
        &ws,
        json!({"name": "chat", "destination-type": "slack", "enabled": true,
               "url": receiver.url("/flaky"), "triggers": ["run:completed"]}),
    );
    let off = nc(
        &api,
        &ws,
        json!({"name": "off", "destination-type": "generic", "enabled": false,
               "url": receiver.url("/disabled"), "triggers": ["run:created", "run:completed"]}),
    );

    // A project's configuration: the runs of every workspace of the project (issue 42
    // §15); `app` is in the default project.
    let projects = api.get(&format!("/api/v2/organizations/{ORG}/projects"));
    let prj = projects.body["data"][0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = api.post(
        &format!("/api/v2/projects/{prj}/notification-configurations"),
        &json!({"data": {"type": "notification-configurations", "attributes": {
            "name": "project-hooks", "destination-type": "generic", "enabled": true,
            "token": TOKEN, "url": receiver.url("/project"), "triggers": ["run:completed"]}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);

    // Verify: the operator sends a verification, and the answer shows its response.
    let r = api.post(
        &format!("/api/v2/notification-configurations/{generic}/actions/verify"),
        &json!({}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let resp = &r.body["data"]["attributes"]["delivery-responses"][0];
    assert_eq!(resp["successful"], "true", "{resp}");
    assert_eq!(resp["code"], "200");
    let verification = signed(&receiver.at("/generic")[0]);
    assert_eq!(verification["notifications"][0]["trigger"], "verification");
    assert_eq!(verification["notification_configuration_id"], generic);
    assert_eq!(verification["run_id"], Value::Null);

    // A run, applied automatically.
    let cv = api.upload_config(
        &ws,
        &[(
            "main.tf",
            "resource \"terraform_data\" \"x\" {\n  input = \"hello\"\n}\n",
        )],
    );
    let r = api.post(
        "/api/v2/runs",
        &json!({"data": {"type": "runs", "attributes": {"message": "notify me"}, "relationships": {
            "workspace": {"data": {"type": "workspaces", "id": ws}},
            "configuration-version": {"data": {"type": "configuration-versions", "id": cv}}}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let run = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();

    let want = [
        "run:created",
        "run:planning",
        "run:applying",
        "run:completed",
    ];
    let got = dev
        .eventually(Duration::from_secs(300), || {
            let run_ones: Vec<Value> = receiver
                .at("/generic")
                .iter()
                .map(signed)
                .filter(|p| p["run_id"] == run.as_str())
                .collect();
            (run_ones.len() >= want.len()).then_some(run_ones)
        })
        .unwrap_or_else(|| panic!("the run's notifications: {:?}", receiver.received()));
    let triggers: Vec<&str> = got
        .iter()
        .map(|p| {
            p["notifications"][0]["trigger"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        triggers, want,
        "each once, in order; an auto-applied plan needs no attention"
    );
    let done = &got[3];
    assert_eq!(done["payload_version"], 1);
    assert_eq!(done["run_message"], "notify me");
    assert_eq!(done["workspace_id"], ws.as_str());
    assert_eq!(done["workspace_name"], "app");
    assert_eq!(done["organization_name"], ORG);
    assert_eq!(done["notifications"][0]["message"], "Run Applied");
    assert_eq!(done["notifications"][0]["run_status"], "applied");
    // Under terrace dev the link opens the web view it serves (issue 41 §7): the CLI's
    // hostname (terrace.test) reaches nothing in a browser.
    let url = done["run_url"].as_str().unwrap_or_default();
    assert_eq!(
        url,
        format!("{}/app/{ORG}/app/runs/{run}", dev.api),
        "{done}"
    );
    use ureq::ResponseExt;
    let opened = ureq::get(url)
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .expect("the run link answers");
    assert_eq!(
        opened.get_uri().path(),
        "/app/session/new",
        "the run link leads to the sign-in page, then the run: {url}"
    );

    // The project's configuration got the run's completion, about its workspace.
    let project_got = dev
        .eventually(Duration::from_secs(60), || {
            let got: Vec<Value> = receiver.at("/project").iter().map(signed).collect();
            (!got.is_empty()).then_some(got)
        })
        .unwrap_or_else(|| panic!("the project's notification: {:?}", receiver.received()));
    assert_eq!(project_got[0]["run_id"], run.as_str());
    assert_eq!(project_got[0]["workspace_name"], "app");
    assert_eq!(project_got[0]["workspace_id"], ws.as_str());
    assert_eq!(
        project_got[0]["notifications"][0]["trigger"],
        "run:completed"
    );

    // The flaky destination: a 500, then the retry delivers.
    let flaky_got = dev
        .eventually(Duration::from_secs(60), || {
            let got = receiver.at("/flaky");
            (got.len() >= 2).then_some(got)
        })
        .expect("the retry after a 500");
    assert_eq!((flaky_got[0].answered, flaky_got[1].answered), (500, 200));
    assert_eq!(
        flaky_got[0].body, flaky_got[1].body,
        "the same notification again"
    );
    let slack = flaky_got[1].json();
    assert_eq!(slack["attachments"][0]["title"], "Run Applied");
    assert!(
        !flaky_got[1]
            .headers
            .contains_key("x-tfe-notification-signature")
    );
    let shown = dev
        .eventually(Duration::from_secs(10), || {
            let r = api.get(&format!("/api/v2/notification-configurations/{flaky}"));
            let responses = r.body["data"]["attributes"]["delivery-responses"].clone();
            (responses.as_array().map_or(0, Vec::len) >= 2).then_some(responses)
        })
        .expect("both deliveries recorded");
    assert_eq!(
        (shown[0]["code"].as_str(), shown[1]["code"].as_str()),
        (Some("200"), Some("500"))
    );
    assert_eq!(
        (
            shown[0]["successful"].as_str(),
            shown[1]["successful"].as_str()
        ),
        (Some("true"), Some("false"))
    );

    // Nothing twice, nothing to the disabled one.
    std::thread::sleep(Duration::from_secs(2));
    let again = receiver
        .at("/generic")
        .iter()
        .filter(|r| r.json()["run_id"] == run.as_str())
        .count();
    assert_eq!(again, 4, "each notification once");
    assert!(receiver.at("/disabled").is_empty());
    assert_eq!(receiver.at("/flaky").len(), 2);

    // Enabled later, the disabled one reports the runs from then on, not the past one.
    let r = api.call(
        "PATCH",
        &format!("/api/v2/notification-configurations/{off}"),
        Some(&json!({"data": {"type": "notification-configurations", "attributes": {"enabled": true}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let r = api.post(
        "/api/v2/runs",
        &json!({"data": {"type": "runs", "attributes": {}, "relationships": {
            "workspace": {"data": {"type": "workspaces", "id": ws}},
            "configuration-version": {"data": {"type": "configuration-versions", "id": cv}}}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let second = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
    let late = dev
        .eventually(Duration::from_secs(300), || {
            let got = receiver.at("/disabled");
            (got.len() >= 2).then_some(got)
        })
        .expect("the enabled configuration's notifications");
    assert!(
        late.iter().all(|r| r.json()["run_id"] == second.as_str()),
        "only the run after enabling: {:?}",
        late.iter().map(|r| r.json()).collect::<Vec<_>>()
    );
}

#[test]
fn destinations_inside_the_cluster_are_refused() {
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let ws = api.create_workspace(ORG, json!({"name": "app"}));
    // Issue 39 §10: internal destinations, in any spelling, are refused when configured
    // through the API (422 naming why), never stored to fail later.
    for (url, words) in [
        ("http://10.255.255.1/hook", "private address"),
        (
            "http://169.254.169.254/latest/meta-data",
            "link-local address",
        ),
        ("http://2852039166/latest/meta-data", "link-local address"),
        ("http://[64:ff9b::a9fe:a9fe]/", "link-local address"),
        (
            "http://metadata.google.internal/computeMetadata/v1/",
            "metadata service",
        ),
    ] {
        let r = api.post(
            &format!("/api/v2/workspaces/{ws}/notification-configurations"),
            &json!({"data": {"type": "notification-configurations", "attributes":
                {"name": "n", "destination-type": "generic", "enabled": true, "url": url}}}),
        );
        assert_eq!(r.status, 422, "{url}: {:?}", r.body);
        let detail = r.body["errors"][0]["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(words), "{url}: {detail}");
    }
    // Declared with kubectl (not checked on the way in): not sent, and said why.
    let manifest = format!(
        "apiVersion: terrace.dev/v1alpha1\nkind: NotificationConfiguration\nmetadata: {{name: inner, namespace: {ORG}}}\nspec: {{name: inner, destinationType: generic, enabled: true, url: 'http://10.255.255.1/hook', workspace: {ws}}}\n"
    );
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], &manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = dev
        .eventually(Duration::from_secs(30), || {
            let doc = api.get(&format!(
                "/api/v2/workspaces/{ws}/notification-configurations"
            ));
            doc.body["data"][0]["id"].as_str().map(str::to_owned)
        })
        .expect("the configuration has an ID");
    let r = api.post(
        &format!("/api/v2/notification-configurations/{id}/actions/verify"),
        &json!({}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let resp = &r.body["data"]["attributes"]["delivery-responses"][0];
    assert_eq!(resp["successful"], "false", "{resp}");
    assert_eq!(resp["code"], "", "nothing was sent");
    assert!(
        resp["body"]
            .as_str()
            .unwrap_or_default()
            .contains("private address"),
        "{resp}"
    );
}
