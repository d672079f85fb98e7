//! End-to-end tests of the workspace API that pytfe cannot express: concurrency, bad
//! input on the wire, and kubectl/API agreement. (The pytfe suite in tests/pytfe covers
//! the endpoints through HashiCorp's client.)

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use terrace_tests::{Api, Dev, have_kubectl};

/// DESIGN.md §6: of many concurrent lockers exactly one wins, every time.
#[test]
fn of_32_concurrent_lockers_exactly_one_wins() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    let org = api.create_org("lockers");
    let id = api.create_workspace(&org, json!({"name": "contended"}));
    let dev = Arc::new(dev);
    for round in 0..3 {
        let handles: Vec<_> = (0..32)
            .map(|_| {
                let dev = dev.clone();
                let id = id.clone();
                std::thread::spawn(move || {
                    Api::admin(&dev)
                        .post(
                            &format!("/api/v2/workspaces/{id}/actions/lock"),
                            &json!({"reason": "race"}),
                        )
                        .status
                })
            })
            .collect();
        let statuses: Vec<u16> = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        assert_eq!(
            statuses.iter().filter(|s| **s == 200).count(),
            1,
            "round {round}: {statuses:?}"
        );
        assert!(
            statuses.iter().all(|s| *s == 200 || *s == 409),
            "round {round}: {statuses:?}"
        );
        let api = Api::admin(&dev);
        assert_eq!(
            api.post(
                &format!("/api/v2/workspaces/{id}/actions/unlock"),
                &json!(null)
            )
            .status,
            200
        );
    }
}

/// Names are unique per organization also under concurrent creates: exactly one of 8
/// simultaneous creates of one name wins, the others get 422 "has already been taken".
#[test]
fn of_8_concurrent_creates_of_one_name_exactly_one_wins() {
    let dev = Arc::new(Dev::start());
    let org = Api::admin(&dev).create_org("racers");
    for round in 0..3 {
        let name = format!("same-name-{round}");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let dev = dev.clone();
                let org = org.clone();
                let name = name.clone();
                std::thread::spawn(move || {
                    let r = Api::admin(&dev).post(
                        &format!("/api/v2/organizations/{org}/workspaces"),
                        &json!({"data": {"type": "workspaces", "attributes": {"name": name}}}),
                    );
                    (r.status, r.body)
                })
            })
            .collect();
        let results: Vec<(u16, serde_json::Value)> = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        let created = results.iter().filter(|(s, _)| *s == 201).count();
        assert_eq!(created, 1, "round {round}: {results:?}");
        for (s, body) in &results {
            if *s != 201 {
                assert_eq!(*s, 422, "{body}");
                let detail = body["errors"][0]["detail"].as_str().unwrap_or_default();
                assert!(detail.contains("has already been taken"), "{detail}");
            }
        }
        let list = Api::admin(&dev).get(&format!(
            "/api/v2/organizations/{org}/workspaces?search%5Bname%5D={name}"
        ));
        assert_eq!(
            list.body["meta"]["pagination"]["total-count"], 1,
            "{:?}",
            list.body
        );
    }
}

/// Bad input gets a JSON:API 4xx, never a 500 or a hang.
#[test]
fn bad_input_is_a_clear_4xx() {
    let dev = Dev::start();
    let api = Api::admin(&dev);
    let org = api.create_org("badinput");
    let ws = format!("/api/v2/organizations/{org}/workspaces");
    let cases: Vec<(&str, String, Option<String>, u16)> = vec![
        ("malformed JSON", ws.clone(), Some("{not json".into()), 400),
        ("wrong data.type", ws.clone(), Some(json!({"data": {"type": "projects", "attributes": {"name": "x"}}}).to_string()), 422),
        ("no data", ws.clone(), Some(json!({"name": "x"}).to_string()), 422),
        ("attribute of the wrong type", ws.clone(), Some(json!({"data": {"type": "workspaces", "attributes": {"name": "x", "auto-apply": "yes"}}}).to_string()), 422),
        ("unknown enum value", ws.clone(), Some(json!({"data": {"type": "workspaces", "attributes": {"name": "x", "execution-mode": "cloud"}}}).to_string()), 422),
        ("negative page size", format!("{ws}?page%5Bsize%5D=-1"), None, 400),
        ("non-numeric page number", format!("{ws}?page%5Bnumber%5D=abc"), None, 400),
        ("unknown workspace id", "/api/v2/workspaces/ws-doesnotexist00000".into(), None, 404),
        ("unknown organization", "/api/v2/organizations/nope/workspaces".into(), None, 404),
    ];
    for (what, path, body, want) in cases {
        let method = if body.is_some() { "POST" } else { "GET" };
        let parsed = body
            .as_deref()
            .map(|b| serde_json::from_str(b).unwrap_or(serde_json::Value::String(b.to_owned())));
        let r = match (&parsed, body.as_deref()) {
            (Some(serde_json::Value::String(_)), Some(raw)) => raw_post(&dev, &path, raw),
            _ => api.call(method, &path, parsed.as_ref()),
        };
        assert_eq!(r.status, want, "{what}: {:?}", r.body);
        assert_eq!(
            r.body["errors"][0]["status"],
            want.to_string(),
            "{what}: {:?}",
            r.body
        );
        if want == 422 {
            assert!(
                r.body["errors"][0]["source"]["pointer"].is_string(),
                "{what}: {:?}",
                r.body
            );
        }
    }
    // A body over the size limit is refused from its Content-Length, before it is read.
    assert_eq!(oversized_post_status(&dev, &ws, 2 * 1024 * 1024), 413);
    // No token: 401.
    assert_eq!(Api::with_token(&dev, None).get(&ws).status, 401);
    assert_eq!(Api::with_token(&dev, Some("wrong")).get(&ws).status, 401);
}

/// POSTs headers announcing a `len`-byte body, sends only its first bytes and returns the
/// status line's code (a server that refuses large bodies answers without reading them).
fn oversized_post_status(dev: &Dev, path: &str, len: usize) -> u16 {
    use std::io::{Read, Write};
    let addr = dev.api.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/vnd.api+json\r\nContent-Length: {len}\r\n\r\n{{\"data\":",
        dev.token
    );
    s.write_all(head.as_bytes()).expect("write");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("read status line");
    let line = String::from_utf8_lossy(&buf[..n]);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// POSTs `body` verbatim over a plain TCP connection (for bodies that are not JSON).
fn raw_post(dev: &Dev, path: &str, body: &str) -> terrace_tests::ApiResponse {
    use std::io::{Read, Write};
    let addr = dev.api.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/vnd.api+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        dev.token,
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    terrace_tests::ApiResponse {
        status,
        body: serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    }
}

/// kubectl and the API see the same thing: an applied Workspace appears in the API with
/// its ID and defaults; one created through the API shows in `kubectl get`; the lock is a
/// printer column.
#[test]
fn kubectl_and_api_agree() {
    if !have_kubectl() {
        eprintln!("kubectl missing: skipped");
        return;
    }
    let dev = Dev::start();
    let api = Api::admin(&dev);
    dev.kubectl_ok(&["apply", "-f", "examples/00-organization.yaml"]);
    let ready = dev.eventually(Duration::from_secs(20), || {
        (api.get("/api/v2/organizations/acme").status == 200).then_some(())
    });
    assert!(
        ready.is_some(),
        "organization from kubectl never appeared in the API"
    );
    let manifest = "apiVersion: terrace.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: gitops\n  namespace: acme\nspec:\n  name: from-git\n";
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = dev.eventually(Duration::from_secs(20), || {
        let r = api.get("/api/v2/organizations/acme/workspaces/from-git");
        (r.status == 200).then_some(r.body)
    });
    let shown = shown.expect("kubectl-applied workspace never appeared in the API (needs its ID)");
    assert!(
        shown["data"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("ws-"))
    );
    assert_eq!(shown["data"]["attributes"]["allow-destroy-plan"], true);
    assert_eq!(shown["data"]["attributes"]["speculative-enabled"], true);

    let id = api.create_workspace(
        "acme",
        json!({"name": "from-api", "execution-mode": "local"}),
    );
    let out = dev.kubectl_ok(&["get", "workspaces", "-n", "acme"]);
    assert!(out.contains("from-api") && out.contains("local"), "{out}");
    assert_eq!(
        api.post(
            &format!("/api/v2/workspaces/{id}/actions/lock"),
            &json!({"reason": "maintenance"})
        )
        .status,
        200
    );
    let out = dev.kubectl_ok(&["get", "workspaces", "-n", "acme"]);
    let line = out
        .lines()
        .find(|l| l.contains("from-api"))
        .unwrap_or_default();
    assert!(
        line.contains("user:"),
        "lock holder missing from the printer column: {out}"
    );
    // The lock is recorded as a Kubernetes Event on the workspace.
    let event = dev.eventually(Duration::from_secs(10), || {
        let out = dev.kubectl(&["get", "events.events.k8s.io", "-n", "acme", "-o", "json"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("\"Locked\"").then_some(text)
    });
    assert!(event.is_some(), "no Locked event recorded");
}

/// SPEC.md: assessments-enabled is accepted and returned only by the hosted edition (the
/// self-hosted one refuses `true` with a 422 naming the attribute instead of dropping it);
/// the data retention endpoints exist only on the self-hosted one.
#[test]
fn editions_switch_assessments_and_data_retention() {
    for (edition, hosted) in [("self-hosted", false), ("hosted", true)] {
        let dev = Dev::start_with(&["--edition", edition]);
        let api = Api::admin(&dev);
        let org = api.create_org("editions");
        let asked = json!({"data": {"type": "workspaces",
            "attributes": {"name": "w", "assessments-enabled": true}}});
        let r = api.post(&format!("/api/v2/organizations/{org}/workspaces"), &asked);
        let id = if hosted {
            assert_eq!(r.status, 201, "{edition}: {:?}", r.body);
            r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
        } else {
            assert_eq!(r.status, 422, "{edition}: {:?}", r.body);
            assert_eq!(
                r.body["errors"][0]["source"]["pointer"], "/data/attributes/assessments-enabled",
                "{:?}",
                r.body
            );
            api.create_workspace(&org, json!({"name": "w"}))
        };
        let ws = api.get(&format!("/api/v2/workspaces/{id}"));
        let attr = &ws.body["data"]["attributes"]["assessments-enabled"];
        if hosted {
            assert_eq!(attr, &json!(true), "{edition}");
        } else {
            assert!(
                attr.is_null(),
                "{edition}: assessments-enabled returned: {attr}"
            );
        }
        let drp = api.get(&format!(
            "/api/v2/workspaces/{id}/relationships/data-retention-policy"
        ));
        assert_eq!(drp.status == 404, hosted, "{edition}: {:?}", drp.body);
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The object `kind/name` of namespace `ns` (empty for cluster-scoped) as kubectl shows it.
fn kubectl_json(dev: &Dev, kind: &str, name: &str, ns: &str) -> serde_json::Value {
    let mut args = vec!["get", kind, name, "-o", "json"];
    if !ns.is_empty() {
        args.extend(["-n", ns]);
    }
    serde_json::from_str(&dev.kubectl_ok(&args)).expect("kubectl get -o json")
}

/// Asserts that the metadata kubectl and other tools own survived an API write: the
/// last-applied annotation unchanged, the manifest's own label and annotation kept.
fn assert_metadata_kept(
    dev: &Dev,
    kind: &str,
    name: &str,
    ns: &str,
    last_applied: &serde_json::Value,
    after: &str,
) {
    let live = kubectl_json(dev, kind, name, ns);
    let meta = &live["metadata"];
    assert_eq!(
        &meta["annotations"][LAST_APPLIED], last_applied,
        "{kind}/{name}: last-applied annotation changed after {after}: {meta}"
    );
    assert_eq!(
        meta["annotations"]["example.com/owner"], "alice",
        "{kind}/{name}: annotation lost after {after}: {meta}"
    );
    assert_eq!(
        meta["labels"]["example.com/team"], "platform",
        "{kind}/{name}: label lost after {after}: {meta}"
    );
}

/// `kubectl apply` of `manifest` succeeds without complaining about the last-applied
/// annotation; answers its stdout.
fn reapply(dev: &Dev, manifest: &str) -> String {
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], manifest);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "kubectl apply failed: {stdout}{stderr}"
    );
    assert!(
        !stderr.contains(LAST_APPLIED),
        "kubectl apply found the last-applied annotation missing: {stderr}"
    );
    assert!(
        stdout.contains("unchanged") || stdout.contains("configured"),
        "{stdout}"
    );
    stdout
}

/// GitOps users `kubectl apply` their workspaces and also change them through the API.
/// API writes (settings PATCH, lock, unlock, force-unlock, tags, projects, organization
/// settings) touch only what they change: the kubectl last-applied annotation and other
/// tools' labels and annotations stay, and a second `kubectl apply` of the same manifest
/// neither warns nor reverts the API's changes of fields the manifest does not set.
#[test]
fn api_writes_keep_kubectl_applied_metadata() {
    if !have_kubectl() {
        eprintln!("kubectl missing: skipped");
        return;
    }
    let dev = Dev::start();
    let api = Api::admin(&dev);
    let org_manifest = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: acme\n  annotations:\n    terrace.dev/adopt: acme\n---\napiVersion: terrace.dev/v1alpha1\nkind: Organization\nmetadata:\n  name: acme\n  labels:\n    example.com/team: platform\n  annotations:\n    example.com/owner: alice\nspec:\n  name: acme\n  email: platform@acme.example\n";
    dev.kubectl_stdin(&["apply", "-f", "-"], org_manifest);
    let ready = dev.eventually(Duration::from_secs(20), || {
        (api.get("/api/v2/organizations/acme").status == 200).then_some(())
    });
    assert!(ready.is_some(), "organization never appeared in the API");
    let manifest = "apiVersion: terrace.dev/v1alpha1\nkind: Project\nmetadata:\n  name: infra\n  namespace: acme\n  labels:\n    example.com/team: platform\n  annotations:\n    example.com/owner: alice\nspec:\n  name: Infra\n---\napiVersion: terrace.dev/v1alpha1\nkind: Workspace\nmetadata:\n  name: gitops\n  namespace: acme\n  labels:\n    example.com/team: platform\n  annotations:\n    example.com/owner: alice\nspec:\n  name: from-git\n  project: infra\n";
    let out = dev.kubectl_stdin(&["apply", "-f", "-"], manifest);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = dev.eventually(Duration::from_secs(20), || {
        let r = api.get("/api/v2/organizations/acme/workspaces/from-git");
        (r.status == 200).then_some(r.body)
    });
    let shown = shown.expect("kubectl-applied workspace never appeared in the API");
    let id = shown["data"]["id"].as_str().unwrap_or_default().to_owned();
    let prj = dev
        .eventually(Duration::from_secs(20), || {
            let r = api.get("/api/v2/organizations/acme/projects");
            r.body["data"]
                .as_array()
                .and_then(|ps| {
                    ps.iter()
                        .find(|p| p["attributes"]["name"] == "Infra")
                        .and_then(|p| p["id"].as_str())
                })
                .map(str::to_owned)
        })
        .expect("kubectl-applied project never appeared in the API");
    let ws_applied = kubectl_json(&dev, "workspace", "gitops", "acme")["metadata"]["annotations"]
        [LAST_APPLIED]
        .clone();
    assert!(
        ws_applied.is_string(),
        "client-side apply sets the annotation"
    );
    let prj_applied = kubectl_json(&dev, "project", "infra", "acme")["metadata"]["annotations"]
        [LAST_APPLIED]
        .clone();
    let org_applied = kubectl_json(&dev, "organization", "acme", "")["metadata"]["annotations"]
        [LAST_APPLIED]
        .clone();
    let ws_kept =
        |after: &str| assert_metadata_kept(&dev, "workspace", "gitops", "acme", &ws_applied, after);

    let ws_path = format!("/api/v2/workspaces/{id}");
    let r = api.call(
        "PATCH",
        &ws_path,
        Some(&json!({"data": {"type": "workspaces", "attributes": {
            "description": "set through the API", "auto-apply": true}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    ws_kept("PATCH");
    let by_name = api.call(
        "PATCH",
        "/api/v2/organizations/acme/workspaces/from-git",
        Some(
            &json!({"data": {"type": "workspaces", "attributes": {"working-directory": "infra"}}}),
        ),
    );
    assert_eq!(by_name.status, 200, "{:?}", by_name.body);
    ws_kept("PATCH by name");
    for (action, body) in [
        ("lock", json!({"reason": "maintenance"})),
        ("unlock", json!(null)),
        ("lock", json!({"reason": "again"})),
        ("force-unlock", json!(null)),
    ] {
        let r = api.post(&format!("{ws_path}/actions/{action}"), &body);
        assert_eq!(r.status, 200, "{action}: {:?}", r.body);
        ws_kept(action);
    }
    let r = api.post(
        &format!("{ws_path}/relationships/tags"),
        &json!({"data": [{"type": "tags", "attributes": {"name": "from-api"}}]}),
    );
    assert_eq!(r.status, 204, "{:?}", r.body);
    ws_kept("adding a tag");

    let r = api.call(
        "PATCH",
        &format!("/api/v2/projects/{prj}"),
        Some(&json!({"data": {"type": "projects", "attributes": {"description": "from the API"}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_metadata_kept(
        &dev,
        "project",
        "infra",
        "acme",
        &prj_applied,
        "project PATCH",
    );
    let r = api.call(
        "PATCH",
        "/api/v2/organizations/acme",
        Some(&json!({"data": {"type": "organizations", "attributes": {"assessments-enforced": true}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_metadata_kept(
        &dev,
        "organization",
        "acme",
        "",
        &org_applied,
        "organization PATCH",
    );

    // Applying the same manifests again: no warning, and the API's changes of fields the
    // manifests do not set stay.
    reapply(&dev, manifest);
    reapply(&dev, org_manifest);
    ws_kept("the second kubectl apply");
    let live = kubectl_json(&dev, "workspace", "gitops", "acme");
    assert_eq!(live["spec"]["description"], "set through the API", "{live}");
    assert_eq!(live["spec"]["autoApply"], true, "{live}");
    assert_eq!(live["spec"]["workingDirectory"], "infra", "{live}");
    let ws = api.get(&ws_path);
    let attrs = &ws.body["data"]["attributes"];
    assert_eq!(attrs["description"], "set through the API", "{attrs}");
    assert_eq!(attrs["auto-apply"], true, "{attrs}");
    assert_eq!(attrs["locked"], false, "{attrs}");
    let names = attrs["tag-names"].as_array().cloned().unwrap_or_default();
    assert!(names.contains(&json!("from-api")), "{attrs}");
    let project = kubectl_json(&dev, "project", "infra", "acme");
    assert_eq!(project["spec"]["description"], "from the API", "{project}");
    let org = kubectl_json(&dev, "organization", "acme", "");
    assert_eq!(
        org["spec"]["settings"]["assessmentsEnforced"], true,
        "{org}"
    );
}
