//! VCS-driven workspaces end to end (issue 45, docs/vcs.md): `terrace dev` with the real
//! terraform, a real Git server on loopback (`git http-backend` behind basic auth whose
//! password is the connection's token, `terrace_tests::git_server`), and a loopback
//! fixture of GitHub's commit status API (`Receiver`). A connection is made through the
//! OAuth clients API; webhooks are sent as GitHub sends them, signed. A push applies a
//! run with the commit's ingress attributes; a push outside the trigger paths, a push to
//! another branch and a bad signature queue nothing; a tag does with `tags-regex`; a pull
//! request gets a speculative plan and a commit status; the token never shows.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::git_server::{GitServer, git, github_webhook, work_tree};
use terrace_tests::receiver::Receiver;
use terrace_tests::{Api, Dev};

const ORG: &str = "vcsorg";
const TOKEN: &str = "ghp_Tok3nThatMustNeverShow";
const HOOK_SECRET: &str = "hook-secret-1";

/// Creates an OAuth client of [`ORG`] with `attributes`: its ID and its token's.
fn connect(api: &Api, attributes: Value) -> (String, String) {
    let r = api.post(
        &format!("/api/v2/organizations/{ORG}/oauth-clients"),
        &json!({"data": {"type": "oauth-clients", "attributes": attributes}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let id = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        id(&r.body["data"]["id"]),
        id(&r.body["data"]["relationships"]["oauth-tokens"]["data"][0]["id"]),
    )
}

/// Sends `payload` as GitHub's `event` webhook to `path` of `dev`, signed with `secret`.
fn send(dev: &Dev, path: &str, event: &str, payload: &Value, secret: &str) -> (u16, Value) {
    github_webhook(&format!("{}{path}", dev.api), event, payload, secret)
}

fn push_payload(git_ref: &str, sha: &str, files: &[&str], message: &str) -> Value {
    json!({
        "ref": git_ref, "before": "0".repeat(40), "after": sha,
        "repository": {"full_name": "acme/infra", "default_branch": "main"},
        "head_commit": {"id": sha, "message": message, "url": format!("https://git.example/acme/infra/commit/{sha}")},
        "commits": [{"id": sha, "added": files, "modified": [], "removed": []}],
        "sender": {"login": "ana", "avatar_url": "https://a.example/ana.png", "html_url": "https://git.example/ana"},
        "compare": "https://git.example/acme/infra/compare/x...y"
    })
}

/// Commits `files` in work tree `work` and pushes `refspec` to the bare repository;
/// answers the commit's SHA.
fn commit(work: &Path, files: &[(&str, &str)], message: &str, refspec: &str) -> String {
    for (name, content) in files {
        let p = work.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", message]);
    git(work, &["push", "-q", "origin", refspec]);
    git(work, &["rev-parse", "HEAD"])
}

const CONFIG: &str = r#"
variable "who" {
  default = "git"
}
resource "terraform_data" "hello" {
  input = "hello ${var.who}"
}
output "greeting" {
  value = terraform_data.hello.output
}
"#;

/// The workspace's configuration versions from the repository (newest first).
fn vcs_versions(api: &Api, ws: &str) -> Vec<Value> {
    let r = api.get(&format!("/api/v2/workspaces/{ws}/configuration-versions"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["attributes"]["source"] == "github")
        .collect()
}

/// The run of the configuration version made from commit `sha`, once it is in `want`.
fn run_of_commit(dev: &Dev, api: &Api, ws: &str, sha: &str, want: &[&str]) -> Value {
    dev.eventually(Duration::from_secs(120), || {
        let runs = api.get(&format!(
            "/api/v2/workspaces/{ws}/runs?include=configuration_version.ingress_attributes"
        ));
        let included = runs.body["included"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let data = runs.body["data"].as_array().cloned().unwrap_or_default();
        data.into_iter().find(|r| {
            let cv = r["relationships"]["configuration-version"]["data"]["id"].clone();
            let from_sha = included.iter().any(|i| {
                i["type"] == "ingress-attributes"
                    && i["attributes"]["commit-sha"] == sha
                    && included.iter().any(|c| {
                        c["id"] == cv
                            && c["relationships"]["ingress-attributes"]["data"]["id"] == i["id"]
                    })
            });
            from_sha && want.contains(&r["attributes"]["status"].as_str().unwrap_or_default())
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no run of {sha} reached {want:?}: {:?}\n{}",
            api.get(&format!("/api/v2/workspaces/{ws}/runs")).body,
            dev.log()
        )
    })
}

#[test]
fn a_repository_drives_a_workspace() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let repos = tempfile::tempdir().unwrap();
    let server = GitServer::start(repos.path(), TOKEN);
    let bare = server.create_repo("acme/infra");
    let statuses = Receiver::start(|_, _| (201, Duration::ZERO));

    // The connection, through the OAuth clients API (go-tfe's shape).
    let r = api.post(
        &format!("/api/v2/organizations/{ORG}/oauth-clients"),
        &json!({"data": {"type": "oauth-clients", "attributes": {
            "name": "loopback", "service-provider": "github",
            "http-url": server.url(), "api-url": statuses.url("/api/v3"),
            "oauth-token-string": TOKEN, "webhook-secret": HOOK_SECRET}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let client = r.body["data"].clone();
    let client_id = client["id"].as_str().unwrap().to_owned();
    assert!(client_id.starts_with("oc-"), "{client}");
    let token_id = client["relationships"]["oauth-tokens"]["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        client["attributes"]["service-provider-display-name"],
        "GitHub"
    );
    let hook = format!("/webhooks/vcs/{client_id}");
    let push_hook = |git_ref: &str, sha: &str, files: &[&str], message: &str| {
        send(
            &dev,
            &hook,
            "push",
            &push_payload(git_ref, sha, files, message),
            HOOK_SECRET,
        )
    };
    assert!(
        client["attributes"]["webhook-url"]
            .as_str()
            .unwrap()
            .ends_with(&hook)
    );
    // Bad input is a 422, not a connection.
    let bad = api.post(
        &format!("/api/v2/organizations/{ORG}/oauth-clients"),
        &json!({"data": {"type": "oauth-clients", "attributes": {
            "service-provider": "github", "http-url": "not a url", "api-url": statuses.url("/"),
            "oauth-token-string": "x"}}}),
    );
    assert_eq!(bad.status, 422, "{:?}", bad.body);
    // go-tfe's includes (`oauth_tokens`, `projects`), listed and shown: the token once,
    // never its secret; what the endpoint does not offer is 400, not ignored.
    let listed = api.get(&format!(
        "/api/v2/organizations/{ORG}/oauth-clients?include=oauth_tokens,projects"
    ));
    assert_eq!(listed.status, 200, "{:?}", listed.body);
    assert_eq!(
        listed.body["included"],
        json!([api.get(&format!("/api/v2/oauth-tokens/{token_id}")).body["data"]])
    );
    let shown = api.get(&format!(
        "/api/v2/oauth-clients/{client_id}?include=oauth_tokens"
    ));
    assert_eq!(
        shown.body["included"][0]["id"], token_id,
        "{:?}",
        shown.body
    );
    assert!(!shown.body.to_string().contains(TOKEN), "{:?}", shown.body);
    for query in ["include=workspaces", "filter%5Bname%5D=x"] {
        let refused = api.get(&format!(
            "/api/v2/organizations/{ORG}/oauth-clients?{query}"
        ));
        assert_eq!(refused.status, 400, "{query}: {:?}", refused.body);
    }

    // The workspace follows main; only .tf files trigger.
    let ws = api.create_workspace(
        ORG,
        json!({"name": "net", "auto-apply": true, "queue-all-runs": true,
            "file-triggers-enabled": true, "trigger-patterns": ["**/*.tf", "*.tf"],
            "vcs-repo": {"identifier": "acme/infra", "oauth-token-id": token_id, "branch": ""}}),
    );
    let shown = api.get(&format!("/api/v2/workspaces/{ws}"));
    let vcs = &shown.body["data"]["attributes"]["vcs-repo"];
    assert_eq!(vcs["service-provider"], "github", "{vcs}");
    assert_eq!(
        vcs["repository-http-url"],
        format!("{}/acme/infra", server.url())
    );

    // A push to main: a run applies the commit, with its ingress attributes.
    let work = work_tree(&bare);
    let sha = commit(work.path(), &[("main.tf", CONFIG)], "Add hello", "main");
    let (st, answer) = push_hook("refs/heads/main", &sha, &["main.tf"], "Add hello");
    assert_eq!(st, 202, "{answer}");
    assert_eq!(answer["workspaces"][0]["decision"], "queued", "{answer}");
    let run = run_of_commit(&dev, &api, &ws, &sha, &["applied", "errored"]);
    assert_eq!(
        run["attributes"]["status"],
        "applied",
        "{run}\n{}",
        dev.log()
    );
    assert_eq!(run["attributes"]["message"], "Add hello");
    let cv_id = run["relationships"]["configuration-version"]["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ia = api.get(&format!(
        "/api/v2/configuration-versions/{cv_id}/ingress-attributes"
    ));
    assert_eq!(ia.status, 200, "{:?}", ia.body);
    let a = &ia.body["data"]["attributes"];
    assert_eq!(
        (&a["commit-sha"], &a["branch"], &a["identifier"]),
        (&json!(sha), &json!("main"), &json!("acme/infra"))
    );
    assert_eq!(a["sender-username"], "ana");
    assert_eq!(a["on-default-branch"], true);
    assert_eq!(a["is-pull-request"], false);
    // The Git server saw the token (basic auth), and the run's commit got statuses.
    let posted = dev
        .eventually(Duration::from_secs(30), || {
            let got: Vec<_> = statuses
                .received()
                .into_iter()
                .filter(|r| r.path == format!("/api/v3/repos/acme/infra/statuses/{sha}"))
                .collect();
            got.iter()
                .any(|r| r.json()["state"] == "success")
                .then_some(got)
        })
        .unwrap_or_else(|| panic!("no success status: {:?}", statuses.received()));
    let last = posted.last().unwrap();
    assert_eq!(
        last.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    assert_eq!(last.json()["context"], format!("terrace/{ORG}/net"));
    assert!(
        last.json()["target_url"]
            .as_str()
            .unwrap()
            .contains(&run["id"].as_str().unwrap().to_string())
    );

    // The run's page says where it came from.
    let cookie = terrace_tests::web::sign_in(&dev.api, &dev.token);
    let (st, html) = terrace_tests::web::page(
        &dev.api,
        &cookie,
        &format!(
            "/app/{ORG}/workspaces/net/runs/{}",
            run["id"].as_str().unwrap()
        ),
    );
    assert_eq!(st, 200, "{html}");
    assert!(
        html.contains(&format!("<code>{}</code>", &sha[..7])),
        "{html}"
    );
    assert!(html.contains("of acme/infra, branch main"), "{html}");
    assert!(html.contains("by ana"), "{html}");

    // And `kubectl get runs -o wide`.
    let wide = dev.kubectl_ok(&["get", "runs", "-n", ORG, "-o", "wide"]);
    assert!(
        wide.contains("ORIGIN") && wide.contains(&format!("acme/infra@{} (main)", &sha[..7])),
        "{wide}"
    );

    // The same webhook delivered again makes no second version.
    let (st, _) = push_hook("refs/heads/main", &sha, &["main.tf"], "Add hello");
    assert_eq!(st, 202);

    // Outside the trigger paths, another branch, a bad signature: nothing queued.
    let docs = commit(
        work.path(),
        &[("docs/readme.md", "# infra")],
        "Docs",
        "main",
    );
    let (st, answer) = push_hook("refs/heads/main", &docs, &["docs/readme.md"], "Docs");
    assert_eq!(st, 202);
    assert_eq!(
        answer["workspaces"][0]["decision"],
        "no changed file is under the workspace's trigger paths"
    );
    let (st, answer) = push_hook("refs/heads/dev", &docs, &["main.tf"], "Dev");
    assert_eq!(
        (st, &answer["workspaces"][0]["decision"]),
        (202, &json!("a push to another branch"))
    );
    let (st, answer) = send(
        &dev,
        &hook,
        "push",
        &push_payload("refs/heads/main", &docs, &["main.tf"], "Forged"),
        "wrong-secret",
    );
    assert_eq!(st, 401, "{answer}");
    assert!(
        answer.to_string().contains("signature"),
        "the refusal says why: {answer}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        vcs_versions(&api, &ws).len(),
        1,
        "only the first push made a version"
    );

    // A run without a configuration version runs the branch's latest commit, fetched
    // then (the docs commit above was never sent by a webhook).
    let run = api.queue(&ws, None, json!({"message": "by hand"}));
    let done = api
        .wait_run(
            &run,
            &["applied", "planned_and_finished", "errored"],
            Duration::from_secs(120),
        )
        .unwrap_or_else(|| panic!("the run by hand never finished: {}", api.run(&run)));
    // The docs commit changes no resource: a plan without changes.
    assert_eq!(
        done["attributes"]["status"], "planned_and_finished",
        "{done}"
    );
    let by_hand = done["relationships"]["configuration-version"]["data"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ia = api.get(&format!(
        "/api/v2/configuration-versions/{by_hand}/ingress-attributes"
    ));
    assert_eq!(
        ia.body["data"]["attributes"]["commit-sha"], docs,
        "{:?}",
        ia.body
    );

    // A pull request: a speculative plan of its head and a status on it.
    git(work.path(), &["checkout", "-q", "-b", "feature"]);
    let head = commit(
        work.path(),
        &[("main.tf", &CONFIG.replace("\"git\"", "\"pr\""))],
        "Change greeting",
        "feature:refs/pull/7/head",
    );
    let pr = json!({
        "action": "opened", "number": 7,
        "pull_request": {"number": 7, "html_url": "https://git.example/acme/infra/pull/7",
            "title": "Change greeting", "body": "Please",
            "head": {"sha": head, "ref": "feature", "repo": {"full_name": "acme/infra"}},
            "base": {"ref": "main", "repo": {"full_name": "acme/infra"}}},
        "repository": {"full_name": "acme/infra", "default_branch": "main"},
        "sender": {"login": "bo"}
    });
    let (st, answer) = send(&dev, &hook, "pull_request", &pr, HOOK_SECRET);
    assert_eq!(
        (st, &answer["workspaces"][0]["decision"]),
        (202, &json!("queued")),
        "{answer}"
    );
    let plan = run_of_commit(&dev, &api, &ws, &head, &["planned_and_finished", "errored"]);
    assert_eq!(
        plan["attributes"]["status"], "planned_and_finished",
        "{plan}"
    );
    assert_eq!(plan["attributes"]["plan-only"], true);
    dev.eventually(Duration::from_secs(30), || {
        statuses.received().into_iter().find(|r| {
            r.path == format!("/api/v3/repos/acme/infra/statuses/{head}")
                && r.json()["state"] == "success"
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no status on the pull request's head: {:?}",
            statuses.received()
        )
    });
    let (_, html) = terrace_tests::web::page(
        &dev.api,
        &cookie,
        &format!(
            "/app/{ORG}/workspaces/net/runs/{}",
            plan["id"].as_str().unwrap()
        ),
    );
    assert!(html.contains("pull request <a href=\"https://git.example/acme/infra/pull/7\" id=\"vcs-pr\">#7</a> Change greeting"), "{html}");
    // A fork's pull request is not planned: the connection does not allow it.
    let mut fork = pr.clone();
    fork["pull_request"]["head"]["repo"]["full_name"] = json!("eve/infra");
    let (_, answer) = send(&dev, &hook, "pull_request", &fork, HOOK_SECRET);
    assert!(
        answer["workspaces"][0]["decision"]
            .as_str()
            .unwrap()
            .contains("fork"),
        "{answer}"
    );

    // The token never shows: not in the client, the token, the workspace, the versions.
    for path in [
        format!("/api/v2/oauth-clients/{client_id}"),
        format!("/api/v2/oauth-tokens/{token_id}"),
        format!("/api/v2/organizations/{ORG}/oauth-clients"),
        format!("/api/v2/workspaces/{ws}"),
        format!("/api/v2/configuration-versions/{cv_id}/ingress-attributes"),
        format!("/api/v2/workspaces/{ws}/runs"),
    ] {
        let r = api.get(&path);
        assert_eq!(r.status, 200, "{path}: {:?}", r.body);
        assert!(
            !r.body.to_string().contains(TOKEN),
            "{path} shows the token"
        );
        assert!(
            !r.body.to_string().contains(HOOK_SECRET),
            "{path} shows the webhook secret"
        );
    }
    assert!(!dev.log().contains(TOKEN), "the log shows the token");
    assert!(
        !server.requests.lock().unwrap().is_empty(),
        "the Git server was asked"
    );

    // Deleting the client deletes the connection.
    let r = api.call(
        "DELETE",
        &format!("/api/v2/oauth-clients/{client_id}"),
        None,
    );
    assert_eq!(r.status, 204, "{:?}", r.body);
    assert_eq!(
        api.get(&format!("/api/v2/oauth-tokens/{token_id}")).status,
        404
    );
}

#[test]
fn a_tag_runs_with_tags_regex_and_an_unreadable_repository_says_why() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let repos = tempfile::tempdir().unwrap();
    let server = GitServer::start(repos.path(), TOKEN);
    let bare = server.create_repo("acme/infra");
    let (client_id, token_id) = connect(
        &api,
        json!({
            "service-provider": "github", "http-url": server.url(), "api-url": server.url(),
            // A wrong token: the server refuses the fetch.
            "oauth-token-string": "wrong", "webhook-secret": HOOK_SECRET}),
    );
    let ws = api.create_workspace(
        ORG,
        json!({"name": "tagged", "auto-apply": true, "queue-all-runs": true,
            "vcs-repo": {"identifier": "acme/infra", "oauth-token-id": token_id,
                "tags-regex": r"^v\d+\.\d+\.\d+$"}}),
    );
    let work = work_tree(&bare);
    let sha = commit(work.path(), &[("main.tf", CONFIG)], "Release", "main");
    git(work.path(), &["tag", "v1.0.0"]);
    git(work.path(), &["push", "-q", "origin", "v1.0.0"]);
    let hook = format!("/webhooks/vcs/{client_id}");
    let push_hook = |git_ref: &str, sha: &str, files: &[&str], message: &str| {
        send(
            &dev,
            &hook,
            "push",
            &push_payload(git_ref, sha, files, message),
            HOOK_SECRET,
        )
    };
    // A branch push does not run a tag-driven workspace.
    let (_, answer) = push_hook("refs/heads/main", &sha, &["main.tf"], "Release");
    assert!(
        answer["workspaces"][0]["decision"]
            .as_str()
            .unwrap()
            .contains("tags"),
        "{answer}"
    );
    // The tag is taken, but the token is refused: an Event says why.
    let mut tag = push_payload("refs/tags/v1.0.0", &sha, &[], "Release");
    tag["commits"] = json!([]);
    let (st, answer) = send(&dev, &hook, "push", &tag, HOOK_SECRET);
    assert_eq!(
        (st, &answer["workspaces"][0]["decision"]),
        (202, &json!("queued"))
    );
    let event = dev
        .eventually(Duration::from_secs(60), || {
            let out = dev.kubectl(&["get", "events", "-A", "-o", "json"]);
            let all: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            all["items"].as_array().and_then(|items| {
                items
                    .iter()
                    .find(|e| e["reason"] == "VcsIngressFailed")
                    .cloned()
            })
        })
        .unwrap_or_else(|| panic!("no VcsIngressFailed Event: {}", dev.log()));
    assert!(
        !event.to_string().contains("wrong"),
        "the Event shows the token: {event}"
    );
    // The Workspace says so too, in a condition.
    let readable = |want: &str| {
        dev.eventually(Duration::from_secs(30), || {
            let out = dev.kubectl_ok(&["get", "workspaces", "-n", ORG, "-o", "json"]);
            let list: Value = serde_json::from_str(&out).ok()?;
            list["items"][0]["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "RepositoryReadable" && c["status"] == want)
                .cloned()
        })
        .unwrap_or_else(|| panic!("no RepositoryReadable={want}"))
    };
    let c = readable("False");
    assert_eq!(c["reason"], "FetchFailed", "{c}");
    assert!(!c.to_string().contains("wrong"), "{c}");
    assert!(vcs_versions(&api, &ws).is_empty());

    // With the right token the tag applies.
    let r = api.call(
        "PATCH",
        &format!("/api/v2/oauth-clients/{client_id}"),
        Some(&json!({"data": {"type": "oauth-clients", "attributes": {"oauth-token-string": TOKEN}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    let (st, _) = send(&dev, &hook, "push", &tag, HOOK_SECRET);
    assert_eq!(st, 202);
    let run = run_of_commit(&dev, &api, &ws, &sha, &["applied", "errored"]);
    assert_eq!(run["attributes"]["status"], "applied", "{run}");
    let cv = run["relationships"]["configuration-version"]["data"]["id"]
        .as_str()
        .unwrap();
    let ia = api.get(&format!(
        "/api/v2/configuration-versions/{cv}/ingress-attributes"
    ));
    assert_eq!(ia.body["data"]["attributes"]["tag"], "v1.0.0");
    readable("True");
}

#[test]
fn a_plain_git_server_is_polled() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let repos = tempfile::tempdir().unwrap();
    let server = GitServer::start(repos.path(), TOKEN);
    let bare = server.create_repo("acme/infra");
    let work = work_tree(&bare);
    let first = commit(work.path(), &[("main.tf", CONFIG)], "First", "main");
    // A plain Git server: no API, no webhooks, polled every second here.
    let (_, token_id) = connect(
        &api,
        json!({
            "service-provider": "git", "http-url": server.url(),
            "oauth-token-string": TOKEN, "poll-interval-seconds": 1}),
    );
    let ws = api.create_workspace(
        ORG,
        json!({"name": "polled", "auto-apply": true, "queue-all-runs": true,
            "vcs-repo": {"identifier": "acme/infra", "oauth-token-id": token_id}}),
    );
    let run = run_of_commit(&dev, &api, &ws, &first, &["applied", "errored"]);
    assert_eq!(run["attributes"]["status"], "applied", "{run}");
    assert_eq!(run["attributes"]["message"], "First");
    // A new commit is found by the next poll; an unchanged branch makes nothing new.
    let second = commit(
        work.path(),
        &[("main.tf", &CONFIG.replace("\"git\"", "\"polled\""))],
        "Second",
        "main",
    );
    let run = run_of_commit(&dev, &api, &ws, &second, &["applied", "errored"]);
    assert_eq!(run["attributes"]["status"], "applied", "{run}");
    std::thread::sleep(Duration::from_secs(3));
    let versions = api.get(&format!("/api/v2/workspaces/{ws}/configuration-versions"));
    let from_git = versions.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["attributes"]["source"] == "git")
        .count();
    assert_eq!(from_git, 2, "one version per commit: {:?}", versions.body);
}

/// The OAuth clients API in go-tfe's shapes (its integration tests' flows): a Bitbucket
/// Data Center client with a consumer key, a secret and an RSA public key; updates;
/// projects; an agent pool; the token's SSH key.
#[test]
fn oauth_clients_take_go_tfes_shapes() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let path = format!("/api/v2/organizations/{ORG}/oauth-clients");
    let r = api.post(
        &path,
        &json!({"data": {"type": "oauth-clients", "attributes": {
            "api-url": "https://bbdc.example", "http-url": "https://bbdc.example",
            "service-provider": "bitbucket_data_center", "key": "consumer-1",
            "secret": "-----BEGIN RSA PRIVATE KEY-----\nx\n-----END RSA PRIVATE KEY-----\n",
            "rsa-public-key": "-----BEGIN PUBLIC KEY-----\ny\n-----END PUBLIC KEY-----\n",
            "organization-scoped": true}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let oc = r.body["data"].clone();
    let id = oc["id"].as_str().unwrap().to_owned();
    assert_eq!(oc["attributes"]["key"], "consumer-1");
    assert!(
        oc["attributes"]["rsa-public-key"]
            .as_str()
            .unwrap()
            .contains("PUBLIC KEY")
    );
    assert_eq!(
        oc["attributes"]["secret"],
        Value::Null,
        "the secret is write-only"
    );
    assert_eq!(oc["attributes"]["name"], Value::Null);
    assert_eq!(oc["relationships"]["organization"]["data"]["id"], ORG);
    assert_eq!(
        oc["relationships"]["oauth-tokens"]["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Listed, read back the same.
    let list = api.get(&path);
    assert_eq!(list.body["data"][0]["id"], id.as_str());
    let read = api.get(&format!("/api/v2/oauth-clients/{id}"));
    assert_eq!(
        read.body["data"]["relationships"]["oauth-tokens"],
        oc["relationships"]["oauth-tokens"]
    );
    // Updates: organization-scoped, the key (an empty one is refused), the agent pool.
    let update = |attrs: Value, rels: Value| {
        api.call(
            "PATCH",
            &format!("/api/v2/oauth-clients/{id}"),
            Some(&json!({"data": {"type": "oauth-clients", "attributes": attrs, "relationships": rels}})),
        )
    };
    let r = update(
        json!({"organization-scoped": false, "key": "consumer-2"}),
        json!({}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["organization-scoped"], false);
    assert_eq!(r.body["data"]["attributes"]["key"], "consumer-2");
    assert_eq!(
        r.body["data"]["attributes"]["rsa-public-key"],
        oc["attributes"]["rsa-public-key"]
    );
    let r = update(json!({"key": ""}), json!({}));
    assert_eq!(r.status, 422, "{:?}", r.body);
    assert!(r.body.to_string().contains("Consumer Key"), "{:?}", r.body);
    let r = update(
        json!({}),
        json!({"agent-pool": {"data": {"type": "agent-pools", "id": "apool-NoSuchPool000001"}}}),
    );
    assert_eq!(r.status, 422, "{:?}", r.body);
    // Projects: added and removed through the relationship.
    let p = api.post(
        &format!("/api/v2/organizations/{ORG}/projects"),
        &json!({"data": {"type": "projects", "attributes": {"name": "infra"}}}),
    );
    assert_eq!(p.status, 201, "{:?}", p.body);
    let project = p.body["data"]["id"].as_str().unwrap().to_owned();
    let rel = format!("/api/v2/oauth-clients/{id}/relationships/projects");
    let body = json!({"data": [{"type": "projects", "id": project}]});
    assert_eq!(api.post(&rel, &body).status, 204);
    let read = api.get(&format!("/api/v2/oauth-clients/{id}"));
    assert_eq!(
        read.body["data"]["relationships"]["projects"]["data"][0]["id"],
        project.as_str()
    );
    assert_eq!(api.call("DELETE", &rel, Some(&body)).status, 204);
    let read = api.get(&format!("/api/v2/oauth-clients/{id}"));
    assert_eq!(
        read.body["data"]["relationships"]["projects"]["data"],
        json!([])
    );
    // The token: its client, an SSH key set (never shown), then deleted with the client.
    let token = oc["relationships"]["oauth-tokens"]["data"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = api.get(&format!("/api/v2/oauth-clients/{id}/oauth-tokens"));
    assert_eq!(
        t.body["data"][0]["relationships"]["oauth-client"]["data"]["id"],
        id.as_str()
    );
    assert_eq!(t.body["data"][0]["attributes"]["has-ssh-key"], false);
    let r = api.call(
        "PATCH",
        &format!("/api/v2/oauth-tokens/{token}"),
        Some(&json!({"data": {"type": "oauth-tokens", "attributes": {"ssh-key": "-----BEGIN OPENSSH PRIVATE KEY-----\nz\n-----END OPENSSH PRIVATE KEY-----\n"}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["has-ssh-key"], true);
    assert!(!r.body.to_string().contains("OPENSSH"));
    // Unknown and malformed IDs are 404.
    assert_eq!(
        api.get("/api/v2/oauth-clients/oc-NoSuchClient000001")
            .status,
        404
    );
    assert_eq!(api.get("/api/v2/oauth-clients/nope").status, 404);
    let r = api.call("DELETE", &format!("/api/v2/oauth-clients/{id}"), None);
    assert_eq!(r.status, 204);
    assert_eq!(
        api.get(&format!("/api/v2/oauth-tokens/{token}")).status,
        404
    );
    // Anything but a known service provider is a 422.
    let r = api.post(
        &path,
        &json!({"data": {"type": "oauth-clients", "attributes": {
            "api-url": "https://x.example", "http-url": "https://x.example",
            "service-provider": "svn", "oauth-token-string": "t"}}}),
    );
    assert_eq!(r.status, 422, "{:?}", r.body);
}

/// `ingress-submodules`: a submodule named by a relative URL is fetched from the same
/// server with the connection's token, and the run uses it (terraform init fails
/// without the module's files).
#[test]
fn submodules_come_when_asked() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let repos = tempfile::tempdir().unwrap();
    let server = GitServer::start(repos.path(), TOKEN);
    let net = server.create_repo("acme/net");
    let infra = server.create_repo("acme/infra");
    let work = tempfile::tempdir().unwrap();
    let m = work.path().join("net");
    std::fs::create_dir_all(&m).unwrap();
    git(&m, &["init", "-q", "-b", "main"]);
    commit_in(
        &m,
        &[("main.tf", "output \"name\" {\n  value = \"net\"\n}\n")],
        net.to_str().unwrap(),
    );
    let w = work.path().join("infra");
    std::fs::create_dir_all(&w).unwrap();
    git(&w, &["init", "-q", "-b", "main"]);
    git(&w, &["remote", "add", "origin", infra.to_str().unwrap()]);
    git(
        &w,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            "../net.git",
            "modules/net",
        ],
    );
    let sha = commit(
        &w,
        &[(
            "main.tf",
            "module \"net\" {\n  source = \"./modules/net\"\n}\noutput \"net\" {\n  value = module.net.name\n}\n",
        )],
        "With a submodule",
        "main",
    );
    let (_, token_id) = connect(
        &api,
        json!({
            "service-provider": "git", "http-url": server.url(),
            "oauth-token-string": TOKEN, "poll-interval-seconds": 1}),
    );
    let ws = api.create_workspace(
        ORG,
        json!({"name": "with-modules", "auto-apply": true, "queue-all-runs": true,
            "vcs-repo": {"identifier": "acme/infra", "oauth-token-id": token_id,
                "ingress-submodules": true}}),
    );
    let run = run_of_commit(&dev, &api, &ws, &sha, &["applied", "errored"]);
    assert_eq!(
        run["attributes"]["status"],
        "applied",
        "{run}\n{}",
        dev.log()
    );
}

/// Commits `files` in work tree `work` and pushes main to `remote`.
fn commit_in(work: &Path, files: &[(&str, &str)], remote: &str) {
    for (name, content) in files {
        std::fs::write(work.join(name), content).unwrap();
    }
    git(work, &["add", "-A"]);
    git(work, &["commit", "-q", "-m", "module"]);
    git(work, &["push", "-q", remote, "main"]);
}

/// Gitea and GitLab sign their webhooks and take commit statuses their own way: Gitea's
/// `X-Gitea-Signature` (the bare hex HMAC) and `Authorization: token …` on
/// `/repos/{owner}/{repo}/statuses/{sha}`; GitLab's `X-Gitlab-Token` and `PRIVATE-TOKEN`
/// on `/projects/{url-encoded path}/statuses/{sha}`.
#[test]
fn gitea_and_gitlab_webhooks_and_statuses() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let repos = tempfile::tempdir().unwrap();
    let server = GitServer::start(repos.path(), TOKEN);
    let statuses = Receiver::start(|_, _| (201, Duration::ZERO));
    for (sp, api_path, repo) in [
        ("gitea", "/api/v1", "acme/tea"),
        ("gitlab_community_edition", "/api/v4", "acme/lab"),
    ] {
        let bare = server.create_repo(repo);
        let (client, token_id) = connect(
            &api,
            json!({
                "service-provider": sp, "http-url": server.url(), "api-url": statuses.url(api_path),
                "oauth-token-string": TOKEN, "webhook-secret": HOOK_SECRET}),
        );
        let ws = api.create_workspace(
            ORG,
            json!({"name": sp, "auto-apply": true, "queue-all-runs": true,
                "vcs-repo": {"identifier": repo, "oauth-token-id": token_id}}),
        );
        let work = work_tree(&bare);
        let sha = commit(work.path(), &[("main.tf", CONFIG)], "Hello", "main");
        let (event_header, event, body, signature) = if sp == "gitea" {
            let body = push_payload("refs/heads/main", &sha, &["main.tf"], "Hello")
                .to_string()
                .replace("acme/infra", repo);
            let sig = terrace_crds::vcs::hmac_sha256_hex(HOOK_SECRET.as_bytes(), body.as_bytes());
            ("X-Gitea-Event", "push", body, ("X-Gitea-Signature", sig))
        } else {
            let body = json!({
                "object_kind": "push", "ref": "refs/heads/main", "before": "0".repeat(40),
                "after": sha, "checkout_sha": sha, "user_username": "bo",
                "project": {"path_with_namespace": repo, "default_branch": "main",
                    "web_url": format!("{}/{repo}", server.url())},
                "commits": [{"id": sha, "message": "Hello", "added": ["main.tf"], "modified": [], "removed": []}]
            })
            .to_string();
            (
                "X-Gitlab-Event",
                "Push Hook",
                body,
                ("X-Gitlab-Token", HOOK_SECRET.to_owned()),
            )
        };
        let post = |sig: &str| {
            let req = ureq::http::Request::builder()
                .method("POST")
                .uri(format!("{}/webhooks/vcs/{client}", dev.api))
                .header("Content-Type", "application/json")
                .header(event_header, event)
                .header(signature.0, sig)
                .body(body.clone())
                .unwrap();
            let mut res = terrace_tests::web::agent().run(req).unwrap();
            let status = res.status().as_u16();
            (status, res.body_mut().read_to_string().unwrap_or_default())
        };
        // A wrong signature is refused; the right one queues.
        assert_eq!(post("0badc0de").0, 401, "{sp}");
        let (status, answer) = post(&signature.1);
        assert_eq!(status, 202, "{sp}: {answer}");
        assert!(answer.contains("queued"), "{sp}: {answer}");
        let run = run_of_commit(&dev, &api, &ws, &sha, &["applied", "errored"]);
        assert_eq!(run["attributes"]["status"], "applied", "{sp}: {run}");
        let (path, auth) = if sp == "gitea" {
            (
                format!("/api/v1/repos/{repo}/statuses/{sha}"),
                ("authorization", format!("token {TOKEN}")),
            )
        } else {
            (
                format!(
                    "/api/v4/projects/{}/statuses/{sha}",
                    repo.replace('/', "%2F")
                ),
                ("private-token", TOKEN.to_owned()),
            )
        };
        let got = dev
            .eventually(Duration::from_secs(30), || {
                statuses.received().into_iter().find(|r| {
                    r.path == path && matches!(r.json()["state"].as_str(), Some("success"))
                })
            })
            .unwrap_or_else(|| {
                panic!(
                    "{sp}: no success status at {path}: {:?}",
                    statuses.received()
                )
            });
        assert_eq!(got.headers.get(auth.0), Some(&auth.1), "{sp}");
        let context = if sp == "gitea" { "context" } else { "name" };
        assert_eq!(got.json()[context], format!("terrace/{ORG}/{sp}"), "{sp}");
    }
}
