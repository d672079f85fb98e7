//! Runs through the router, on the simulator (no operator: runs stay where the API puts
//! them): workspace configuration versions, run creation and its rules, the document's
//! shape as the terraform CLI reads it, the actions and their 409s, plans and applies,
//! the CLI's waiting reads, the runner endpoints' token.

use serde_json::{Value, json};
use terrace_crds::ConfigurationVersionState;

use crate::Edition;
use crate::testing::{Harness, harness, targz};

const WS: &str = "ws-RunsHandlers000001";
const WS_PATH: &str = "/api/v2/workspaces/ws-RunsHandlers000001";

async fn setup() -> Harness {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "app", |s| s.allow_destroy_plan = false)
        .await;
    h
}

/// A configuration version of the workspace, uploaded; answers its ID.
async fn uploaded(h: &Harness, speculative: bool) -> String {
    uploaded_with(
        h,
        json!({"auto-queue-runs": false, "speculative": speculative}),
    )
    .await
}

/// A new configuration version of the workspace with `attributes`; answers its ID and
/// the path of its upload URL.
async fn created_cv(h: &Harness, attributes: Value) -> (String, String) {
    let (st, doc) = h
        .call(
            "POST",
            &format!("{WS_PATH}/configuration-versions"),
            Some(json!({"data": {"type": "configuration-versions", "attributes": attributes}})),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(doc["data"]["attributes"]["status"], "pending");
    let url = doc["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap_or_default();
    (id, url[url.find("/api/v2/").unwrap_or(0)..].to_owned())
}

/// The token of a reader of the workspace's `resources` (`get` and `list` on them).
async fn reader_of(h: &Harness, resources: &[&str]) -> String {
    h.token_with_role(Some(vec![crate::testing::rule(
        &["get", "list"],
        resources,
    )]))
    .await
}

/// A configuration version of the workspace with `attributes`, uploaded; answers its ID.
async fn uploaded_with(h: &Harness, attributes: Value) -> String {
    let (id, path) = created_cv(h, attributes).await;
    let path = path.as_str();
    let (st, _, _) = h
        .raw(
            "PUT",
            path,
            &[("content-type", "application/octet-stream")],
            targz(&[("main.tf", "")]),
        )
        .await;
    assert_eq!(st, 200);
    h.wait("uploaded", |i| {
        i.configuration_versions()
            .get(&id)
            .is_some_and(|c| c.state() == Ok(ConfigurationVersionState::Uploaded))
    })
    .await;
    id
}

fn run_body(attributes: Value, ws: Option<&str>, cv: Option<&str>) -> Value {
    let mut rel = json!({});
    if let Some(ws) = ws {
        rel["workspace"] = json!({"data": {"type": "workspaces", "id": ws}});
    }
    if let Some(cv) = cv {
        rel["configuration-version"] =
            json!({"data": {"type": "configuration-versions", "id": cv}});
    }
    json!({"data": {"type": "runs", "attributes": attributes, "relationships": rel}})
}

#[tokio::test]
async fn create_rules_and_the_document_the_cli_reads() {
    let h = setup().await;
    // No workspace: 422 naming it; an unknown one: 404; no upload yet: 422.
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), None, None)),
        )
        .await;
    assert_eq!(st, 422, "{doc}");
    assert_eq!(
        doc["errors"][0]["source"]["pointer"],
        "/data/relationships/workspace/data/id"
    );
    let (st, _) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some("ws-Nope0000000000001"), None)),
        )
        .await;
    assert_eq!(st, 404);
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), None)),
        )
        .await;
    assert_eq!(st, 422, "{doc}");
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("no uploaded configuration version"),
        "{doc}"
    );

    let cv = uploaded(&h, false).await;
    let (st, list) = h
        .call("GET", &format!("{WS_PATH}/configuration-versions"), None)
        .await;
    assert_eq!(
        (st, list["data"][0]["id"].as_str()),
        (200, Some(cv.as_str())),
        "{list}"
    );
    // allow-destroy-plan false refuses destroy runs; a bad variable key is 422.
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({"is-destroy": true}), Some(WS), Some(&cv))),
        )
        .await;
    assert_eq!(st, 422, "{doc}");
    assert_eq!(
        doc["errors"][0]["source"]["pointer"],
        "/data/attributes/is-destroy"
    );
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(
                json!({"variables": [{"key": "bad key", "value": "1"}]}),
                Some(WS),
                Some(&cv),
            )),
        )
        .await;
    assert_eq!(st, 422, "{doc}");

    // Without a configuration version: the newest uploaded one.
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(
                json!({"message": "deploy", "target-addrs": ["terraform_data.a"], "variables": [{"key": "x", "value": "\"1\""}]}),
                Some(WS),
                None,
            )),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let run = &doc["data"];
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("run-"), "{id}");
    let a = &run["attributes"];
    assert_eq!(
        (a["status"].as_str(), a["message"].as_str()),
        (Some("pending"), Some("deploy"))
    );
    assert_eq!(a["target-addrs"], json!(["terraform_data.a"]));
    assert_eq!(a["variables"], json!([{"key": "x", "value": "\"1\""}]));
    assert_eq!(a["actions"]["is-discardable"], true);
    assert_eq!(a["actions"]["is-confirmable"], false);
    assert!(
        a["status-timestamps"]["plan-queueable-at"].is_string(),
        "{a}"
    );
    let r = &run["relationships"];
    assert_eq!(r["workspace"]["data"]["id"], WS);
    assert_eq!(r["configuration-version"]["data"]["id"], cv.as_str());
    let suffix = id.strip_prefix("run-").unwrap_or_default();
    assert_eq!(r["plan"]["data"]["id"], format!("plan-{suffix}"));
    assert_eq!(r["apply"]["data"]["id"], format!("apply-{suffix}"));
    assert_eq!(r["policy-checks"]["data"], json!([]));
    assert_eq!(r["cost-estimate"]["data"], Value::Null);

    // The CLI's reads: include=task_stages and workspace,plan; the plan's log URL.
    let (st, doc) = h
        .call(
            "GET",
            &format!("/api/v2/runs/{id}?include=task_stages"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let (st, doc) = h
        .call(
            "GET",
            &format!("/api/v2/runs/{id}?include=workspace%2Cplan"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let included = doc["included"].as_array().cloned().unwrap_or_default();
    let types: Vec<&str> = included.iter().filter_map(|i| i["type"].as_str()).collect();
    assert!(
        types.contains(&"workspaces") && types.contains(&"plans"),
        "{types:?}"
    );
    let plan = included
        .iter()
        .find(|i| i["type"] == "plans")
        .cloned()
        .unwrap_or_default();
    assert!(
        plan["attributes"]["log-read-url"]
            .as_str()
            .unwrap_or_default()
            .contains("/log/"),
        "{plan}"
    );
    let (st, _) = h
        .call("GET", &format!("/api/v2/runs/{id}?include=nope"), None)
        .await;
    assert_eq!(st, 400);
    let (st, doc) = h
        .call("GET", &format!("/api/v2/runs/{id}/run-events"), None)
        .await;
    assert_eq!(
        (st, doc["data"][0]["attributes"]["action"].as_str()),
        (200, Some("created")),
        "a new run has one event: {doc}"
    );
    let (st, doc) = h
        .call("GET", &format!("/api/v2/plans/plan-{suffix}"), None)
        .await;
    assert_eq!(
        (st, doc["data"]["attributes"]["status"].as_str()),
        (200, Some("pending")),
        "{doc}"
    );
    let (st, doc) = h
        .call("GET", &format!("/api/v2/applies/apply-{suffix}"), None)
        .await;
    assert_eq!(
        (st, doc["data"]["attributes"]["status"].as_str()),
        (200, Some("pending")),
        "{doc}"
    );
    let (st, _) = h
        .call("GET", "/api/v2/plans/plan-Nope0000000000001", None)
        .await;
    assert_eq!(st, 404);
    let (st, doc) = h
        .call(
            "GET",
            &format!("/api/v2/organizations/{}/runs/queue", crate::testing::ORG),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["data"][0]["id"], id.as_str());
    let (st, doc) = h
        .call(
            "GET",
            &format!("/api/v2/organizations/{}/capacity", crate::testing::ORG),
            None,
        )
        .await;
    assert_eq!(
        (st, doc["data"]["attributes"]["pending"].as_u64()),
        (200, Some(1)),
        "{doc}"
    );
    let (st, doc) = h
        .call(
            "GET",
            &format!("{WS_PATH}/runs?filter%5Bstatus%5D=pending"),
            None,
        )
        .await;
    assert_eq!(
        (st, doc["meta"]["pagination"]["total-count"].as_u64()),
        (200, Some(1)),
        "{doc}"
    );
    let (st, doc) = h
        .call(
            "GET",
            &format!("{WS_PATH}/runs?filter%5Bstatus%5D=applied"),
            None,
        )
        .await;
    assert_eq!((st, doc["data"].clone()), (200, json!([])));
    // The workspace shows it as its current run.
    let (_, ws) = h.call("GET", WS_PATH, None).await;
    assert_eq!(
        ws["data"]["relationships"]["current-run"]["data"]["id"],
        id.as_str()
    );
}

#[tokio::test]
async fn actions_only_in_their_states() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&cv))),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let act = |a: &str| format!("/api/v2/runs/{id}/actions/{a}");
    // A pending run cannot be applied nor force-canceled before a cancel.
    let (st, doc) = h.call("POST", &act("apply"), Some(json!({}))).await;
    assert_eq!(st, 409, "{doc}");
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("transition not allowed")
    );
    let (st, _) = h.call("POST", &act("force-cancel"), Some(json!({}))).await;
    assert_eq!(st, 409);
    let (st, _) = h.call("POST", &act("nope"), Some(json!({}))).await;
    assert_eq!(st, 404);
    let (st, _) = h.call("POST", &act("cancel"), Some(json!({}))).await;
    assert_eq!(st, 202);
    // The cancel left the run going (no operator here): it says when a force-cancel
    // becomes available, a time in the future (go-tfe waits for it and checks it is
    // after now), and a force-cancel before then is refused (issue 42 §2).
    let (_, doc) = h.call("GET", &format!("/api/v2/runs/{id}"), None).await;
    let a = &doc["data"]["attributes"];
    assert_eq!(a["actions"]["is-force-cancelable"], false, "{a}");
    let available = a["force-cancel-available-at"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    assert!(available.is_some_and(|t| t > jiff::Timestamp::now()), "{a}");
    let (st, doc) = h.call("POST", &act("force-cancel"), Some(json!({}))).await;
    assert_eq!(st, 409, "{doc}");
    // Past the cool-off (the request backdated a minute) it may be forced.
    let earlier = crate::render::timestamp(
        &jiff::Timestamp::now()
            .checked_sub(jiff::SignedDuration::from_mins(1))
            .unwrap_or_default(),
    );
    crate::write::api::<terrace_crds::Run>(&h.state, "acme")
        .patch_status(
            &terrace_crds::ids::object_name_for_id(&id),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"cancelRequestedAt": earlier}})),
        )
        .await
        .unwrap_or_else(|e| panic!("run status: {e}"));
    h.wait("the earlier request", |i| {
        i.runs().get(&id).is_some_and(|r| {
            r.status
                .as_ref()
                .and_then(|s| s.cancel_requested_at.as_deref())
                == Some(earlier.as_str())
        })
    })
    .await;
    let (_, doc) = h.call("GET", &format!("/api/v2/runs/{id}"), None).await;
    assert_eq!(
        doc["data"]["attributes"]["actions"]["is-force-cancelable"], true,
        "{doc}"
    );
    let (st, doc) = h.call("POST", &act("force-cancel"), Some(json!({}))).await;
    assert_eq!(st, 202, "{doc}");
    // Once canceled (a pending run is canceled at once), the time stays.
    set_status(&h, &id, "canceled").await;
    let (_, doc) = h.call("GET", &format!("/api/v2/runs/{id}"), None).await;
    let a = &doc["data"]["attributes"];
    assert!(a["force-cancel-available-at"].is_string(), "{a}");
    assert_eq!(a["actions"]["is-force-cancelable"], false, "{a}");
    set_status(&h, &id, "pending").await;
    let (st, _) = h.call("POST", &act("discard"), Some(json!({}))).await;
    assert_eq!(st, 202);
    let (_, doc) = h.call("GET", &format!("/api/v2/runs/{id}"), None).await;
    assert_eq!(doc["data"]["attributes"]["status"], "discarded");
    assert!(doc["data"]["attributes"]["status-timestamps"]["discarded-at"].is_string());
    let suffix = id.strip_prefix("run-").unwrap_or_default();
    let (_, plan) = h
        .call("GET", &format!("/api/v2/plans/plan-{suffix}"), None)
        .await;
    assert_eq!(
        plan["data"]["attributes"]["status"], "unreachable",
        "{plan}"
    );
    for a in ["apply", "discard", "cancel"] {
        let (st, _) = h.call("POST", &act(a), Some(json!({}))).await;
        assert_eq!(st, 409, "{a} on a discarded run");
    }
    // A speculative configuration version makes plan-only runs.
    let spec = uploaded(&h, true).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&spec))),
        )
        .await;
    assert_eq!(
        (st, doc["data"]["attributes"]["plan-only"].as_bool()),
        (201, Some(true)),
        "{doc}"
    );
}

#[tokio::test]
async fn runner_endpoints_need_the_run_token() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let (_, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&cv))),
        )
        .await;
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    for path in ["archive", "state", "plan"] {
        let uri = format!("/api/v2/runner/runs/{id}/{path}");
        let (st, _, _) = h.raw("GET", &uri, &[], vec![]).await;
        assert_eq!(st, 401, "{uri} without a token");
        let (st, _, _) = h
            .raw("GET", &uri, &[("authorization", "Bearer forged")], vec![])
            .await;
        assert_eq!(st, 401, "{uri} with a forged token");
        // The API's own admin token is no run token either.
        let auth = format!("Bearer {}", h.token);
        let (st, _, _) = h
            .raw("GET", &uri, &[("authorization", &auth)], vec![])
            .await;
        assert_eq!(st, 401, "{uri} with a user token");
    }
    let (st, _, _) = h
        .raw(
            "PUT",
            &format!("/api/v2/runner/runs/{id}/state"),
            &[("authorization", "Bearer forged")],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(st, 401);
}

/// A state file of `serial` (lineage `lin`) with one output.
fn run_state_file(serial: i64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": "lin",
        "outputs": {"o": {"value": serial, "type": "number"}}, "resources": [],
    }))
    .unwrap_or_default()
}

/// A run of the workspace made `applying`, holding the workspace's lock, with its runner
/// token (`acme.<random>`) in its Secret as the operator writes it; answers its ID and
/// the token.
async fn applying_run(h: &Harness) -> (String, String) {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Patch, PatchParams, PostParams};
    let cv = uploaded(h, false).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&cv))),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let object = terrace_crds::ids::object_name_for_id(&id);
    let runs = crate::write::api::<terrace_crds::Run>(&h.state, "acme");
    let pp = PatchParams::default();
    runs.patch_status(
        &object,
        &pp,
        &Patch::Merge(json!({"status": {"status": "applying"}})),
    )
    .await
    .unwrap_or_else(|e| panic!("run status: {e}"));
    let token = terrace_crds::run::runner_token("acme", "s3cret-run-token");
    let secret = Secret {
        metadata: crate::testing::meta(
            &crate::runner_auth::secret_name(&object),
            Some("acme"),
            &[],
        ),
        data: Some(
            [(
                "token".to_owned(),
                k8s_openapi::ByteString(token.clone().into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    crate::write::api::<Secret>(&h.state, "acme")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("secret: {e}"));
    let lock = json!({"metadata": {"annotations": {
        terrace_crds::constants::ANNOTATION_LOCKED_BY: format!("run:{id}"),
        terrace_crds::constants::ANNOTATION_LOCKED_AT: "2026-01-01T00:00:00Z",
    }}});
    crate::write::api::<terrace_crds::Workspace>(&h.state, "acme")
        .patch(&WS.to_ascii_lowercase(), &pp, &Patch::Merge(lock))
        .await
        .unwrap_or_else(|e| panic!("lock: {e}"));
    h.wait("the run applying and the lock", |i| {
        i.runs()
            .get(&id)
            .and_then(|r| r.status.as_ref()?.status.clone())
            .as_deref()
            == Some("applying")
            && i.workspace(WS).is_some_and(|w| {
                terrace_crds::lock::holder_of(w)
                    == Some(terrace_crds::lock::LockHolder::Run(id.clone()))
            })
    })
    .await;
    (id, token)
}

/// Force-unlock of an active run's lock is refused (cancel the run instead), so the
/// apply keeps the right to save its state; and whatever happens to the lock, the state an
/// apply produced is kept as a version of its run: current when it can be, else discarded
/// with its bytes, downloadable, and the runner told which version holds it.
#[tokio::test]
async fn an_apply_never_loses_its_state() {
    let h = setup().await;
    let (id, token) = applying_run(&h).await;
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/actions/force-unlock"), None)
        .await;
    assert_eq!(st, 409, "{doc}");
    let detail = doc["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("cancel the run"), "{detail}");
    let auth = format!("Bearer {token}");
    let state_path = format!("/api/v2/runner/runs/{id}/state");
    let (st, _, body) = h
        .raw(
            "PUT",
            &state_path,
            &[("authorization", &auth)],
            run_state_file(1),
        )
        .await;
    assert_eq!(st, 204, "{}", String::from_utf8_lossy(&body));
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(cur["data"]["attributes"]["serial"], 1, "{cur}");
    // The lock is taken away behind the API's back (kubectl) and someone writes serial 5.
    let pp = kube::api::PatchParams::default();
    let unlock = json!({"metadata": {"annotations": {
        terrace_crds::constants::ANNOTATION_LOCKED_BY: null,
        terrace_crds::constants::ANNOTATION_LOCKED_AT: null,
    }}});
    crate::write::api::<terrace_crds::Workspace>(&h.state, "acme")
        .patch(
            &WS.to_ascii_lowercase(),
            &pp,
            &kube::api::Patch::Merge(unlock),
        )
        .await
        .unwrap_or_else(|e| panic!("unlock: {e}"));
    h.wait("unlocked", |i| {
        i.workspace(WS)
            .is_some_and(|w| terrace_crds::lock::holder_of(w).is_none())
    })
    .await;
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/actions/lock"), Some(json!({})))
        .await;
    assert_eq!(st, 200, "{doc}");
    let five = run_state_file(5);
    let (st, doc) = h
        .call(
            "POST",
            &format!("{WS_PATH}/state-versions"),
            Some(json!({"data": {"type": "state-versions", "attributes": {
                "serial": 5, "lineage": "lin", "md5": terrace_crds::state::md5_hex(&five),
                "state": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &five),
            }}})),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    // The apply's serial 2 cannot become current, but it is kept.
    let two = run_state_file(2);
    let (st, _, body) = h
        .raw("PUT", &state_path, &[("authorization", &auth)], two.clone())
        .await;
    assert_eq!(st, 409);
    let err: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let detail = err["errors"][0]["detail"].as_str().unwrap_or_default();
    let kept = detail
        .split_whitespace()
        .find(|w| w.starts_with("sv-"))
        .unwrap_or_default();
    assert!(!kept.is_empty(), "{detail}");
    let (_, v) = h
        .call("GET", &format!("/api/v2/state-versions/{kept}"), None)
        .await;
    assert_eq!(v["data"]["attributes"]["status"], "discarded", "{v}");
    assert_eq!(
        v["data"]["relationships"]["run"]["data"]["id"],
        id.as_str(),
        "{v}"
    );
    let (st, _, bytes) = h
        .raw(
            "GET",
            &format!("/api/v2/state-versions/{kept}/download"),
            &[("authorization", &format!("Bearer {}", h.token))],
            vec![],
        )
        .await;
    assert_eq!((st, bytes.to_vec()), (200, two));
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(cur["data"]["attributes"]["serial"], 5, "{cur}");
}

/// A runner request for a run nobody knows is refused at once: the token is checked
/// against the Secret of the run it names before anything waits for the run.
#[tokio::test]
async fn an_unknown_run_is_refused_without_waiting() {
    let h = setup().await;
    for token in ["forged", "acme.forged"] {
        let started = std::time::Instant::now();
        let (st, _, _) = h
            .raw(
                "GET",
                "/api/v2/runner/runs/run-NoSuchRun00000001/state",
                &[("authorization", &format!("Bearer {token}"))],
                vec![],
            )
            .await;
        assert_eq!(st, 401, "{token}");
        // The index wait for a run is 3 s; an unauthenticated caller gets none of it.
        assert!(
            started.elapsed() < std::time::Duration::from_millis(1500),
            "{token}: {:?}",
            started.elapsed()
        );
    }
}

/// Issue 26: what go-tfe sends on a run create is kept and returned, never dropped:
/// `allow-empty-apply`, `terraform-version` on a plan-only run (refused on any other),
/// `invoke-action-addrs`, `allow-config-generation`, `debugging-mode`.
#[tokio::test]
async fn create_attributes_are_kept_not_dropped() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(
                json!({"allow-empty-apply": true, "invoke-action-addrs": ["action.a.b"],
                    "allow-config-generation": true, "debugging-mode": true,
                    "policy-paths": ["./path/to/dir1", "./path/to/dir2"]}),
                Some(WS),
                Some(&cv),
            )),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let (_, doc) = h.call("GET", &format!("/api/v2/runs/{id}"), None).await;
    let a = &doc["data"]["attributes"];
    assert_eq!(a["allow-empty-apply"], true, "{a}");
    assert_eq!(a["invoke-action-addrs"], json!(["action.a.b"]));
    assert_eq!(a["allow-config-generation"], true);
    assert_eq!(a["debugging-mode"], true);
    assert_eq!(
        a["policy-paths"],
        json!(["./path/to/dir1", "./path/to/dir2"]),
        "issue 42 §4"
    );
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(
                json!({"plan-only": true, "terraform-version": "1.0.0"}),
                Some(WS),
                Some(&cv),
            )),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["attributes"]["terraform-version"], "1.0.0");
    assert_eq!(doc["data"]["attributes"]["plan-only"], true);
    for attrs in [
        json!({"terraform-version": "1.0.0"}),
        json!({"plan-only": true, "terraform-version": "~> 1.0"}),
    ] {
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/runs",
                Some(run_body(attrs, Some(WS), Some(&cv))),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/attributes/terraform-version"
        );
    }
}

/// Issue 26: the workspace names its current configuration version (the newest one that
/// is not provisional, uploaded or not) and its variables; a provisional version is kept as such
/// and never becomes current, nor the configuration of a run that names none.
#[tokio::test]
async fn the_workspace_names_its_current_configuration_and_its_variables() {
    let h = setup().await;
    let rels = |doc: &Value| doc["data"]["relationships"].clone();
    let (_, doc) = h.call("GET", WS_PATH, None).await;
    assert_eq!(
        rels(&doc)["current-configuration-version"]["data"],
        Value::Null
    );
    assert_eq!(rels(&doc)["vars"]["data"], json!([]));
    let first = uploaded(&h, false).await;
    let provisional =
        uploaded_with(&h, json!({"auto-queue-runs": false, "provisional": true})).await;
    let (_, cv) = h
        .call(
            "GET",
            &format!("/api/v2/configuration-versions/{provisional}"),
            None,
        )
        .await;
    assert_eq!(cv["data"]["attributes"]["provisional"], true);
    let (_, doc) = h.call("GET", WS_PATH, None).await;
    assert_eq!(
        rels(&doc)["current-configuration-version"]["data"],
        json!({"id": first, "type": "configuration-versions"}),
        "a provisional version is not current"
    );
    let (st, run) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), None)),
        )
        .await;
    assert_eq!(st, 201, "{run}");
    assert_eq!(
        run["data"]["relationships"]["configuration-version"]["data"]["id"],
        first.as_str()
    );
    let second = uploaded(&h, false).await;
    let (st, var) = h
        .call(
            "POST",
            &format!("{WS_PATH}/vars"),
            Some(json!({"data": {"type": "vars", "attributes": {"key": "region", "value": "eu", "category": "terraform"}}})),
        )
        .await;
    assert_eq!(st, 201, "{var}");
    let (_, doc) = h.call("GET", WS_PATH, None).await;
    assert_eq!(
        rels(&doc)["current-configuration-version"]["data"]["id"],
        second.as_str()
    );
    assert_eq!(
        rels(&doc)["vars"]["data"],
        json!([{"id": var["data"]["id"], "type": "vars"}])
    );
    // go-tfe's flow: a pending version (never uploaded), then a provisional one; the
    // workspace shows the pending one, while a run without a configuration still takes
    // the newest uploaded (issue 42 §3).
    let (pending, _) = created_cv(&h, json!({})).await;
    let _ = created_cv(&h, json!({"provisional": true})).await;
    let (_, doc) = h.call("GET", WS_PATH, None).await;
    assert_eq!(
        rels(&doc)["current-configuration-version"]["data"],
        json!({"id": pending, "type": "configuration-versions"})
    );
    let (_, doc) = h
        .call(
            "GET",
            &format!("{WS_PATH}?include=current_configuration_version"),
            None,
        )
        .await;
    assert_eq!(doc["included"][0]["id"], pending.as_str(), "{doc}");
    let (st, run) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), None)),
        )
        .await;
    assert_eq!(st, 201, "{run}");
    assert_eq!(
        run["data"]["relationships"]["configuration-version"]["data"]["id"],
        second.as_str()
    );
    // Neither may be archived while current.
    for cv in [&pending, &second] {
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/configuration-versions/{cv}/actions/archive"),
                None,
            )
            .await;
        assert_eq!(st, 409, "{doc}");
    }
}

/// Issue 26: runs serve their includes: `created_by` (a `users` document for the
/// Kubernetes identity that queued it) on a run, `workspace` on a workspace's run list
/// (once, however many of its runs the page holds).
#[tokio::test]
async fn runs_include_who_created_them_and_their_workspace() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    for _ in 0..2 {
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/runs",
                Some(run_body(json!({}), Some(WS), Some(&cv))),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
    }
    let (st, doc) = h
        .call(
            "GET",
            &format!("{WS_PATH}/runs?include=workspace,created_by"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let included = doc["included"].as_array().cloned().unwrap_or_default();
    let of_type = |t: &str| included.iter().filter(|i| i["type"] == t).count();
    assert_eq!((of_type("workspaces"), of_type("users")), (1, 1), "{doc}");
    let run = doc["data"][0]["id"].as_str().unwrap_or_default().to_owned();
    let (st, doc) = h
        .call(
            "GET",
            &format!("/api/v2/runs/{run}?include=created_by"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let creator = &doc["data"]["relationships"]["created-by"]["data"];
    assert_eq!(doc["included"][0]["type"], "users");
    assert_eq!(&doc["included"][0]["id"], &creator["id"]);
    assert_eq!(doc["included"][0]["attributes"]["username"], creator["id"]);
}

/// Issue 26: a configuration version's upload downloads byte for byte; an older one is
/// archived (then neither downloadable nor usable by a run), the current one is 409.
#[tokio::test]
async fn configuration_versions_download_and_archive() {
    let h = setup().await;
    let older = uploaded(&h, false).await;
    let current = uploaded(&h, false).await;
    let auth = format!("Bearer {}", h.token);
    let (st, _, bytes) = h
        .raw(
            "GET",
            &format!("/api/v2/configuration-versions/{older}/download"),
            &[("authorization", &auth)],
            Vec::new(),
        )
        .await;
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&bytes));
    assert_eq!(
        bytes,
        targz(&[("main.tf", "")]),
        "the upload, byte for byte"
    );
    let (st, doc) = h
        .call(
            "POST",
            &format!("/api/v2/configuration-versions/{current}/actions/archive"),
            None,
        )
        .await;
    assert_eq!(st, 409, "{doc}");
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("because it is current"))
    );
    let (st, doc) = h
        .call(
            "POST",
            &format!("/api/v2/configuration-versions/{older}/actions/archive"),
            None,
        )
        .await;
    assert_eq!(st, 202, "{doc}");
    let (_, doc) = h
        .call(
            "GET",
            &format!("/api/v2/configuration-versions/{older}"),
            None,
        )
        .await;
    assert_eq!(doc["data"]["attributes"]["status"], "archived");
    let (st, _, _) = h
        .raw(
            "GET",
            &format!("/api/v2/configuration-versions/{older}/download"),
            &[("authorization", &auth)],
            Vec::new(),
        )
        .await;
    assert_eq!(st, 404);
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&older))),
        )
        .await;
    assert_eq!(st, 422, "an archived configuration runs nothing: {doc}");
}

/// Issue 26: `GET /organizations/:org/runs` lists the organization's runs, newest first,
/// with `include=workspace` and `filter[workspace_names]` / `filter[status]`.
#[tokio::test]
async fn the_organization_lists_its_runs() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/runs",
                Some(run_body(json!({}), Some(WS), Some(&cv))),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        ids.push(doc["data"]["id"].as_str().unwrap_or_default().to_owned());
    }
    let base = format!("/api/v2/organizations/{}/runs", crate::testing::ORG);
    let (st, doc) = h
        .call(
            "GET",
            &format!("{base}?include=workspace&page%5Bsize%5D=2"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["meta"]["pagination"]["total-count"], 3);
    assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(doc["included"][0]["type"], "workspaces");
    assert_eq!(doc["included"][0]["attributes"]["name"], "app");
    let (_, doc) = h
        .call(
            "GET",
            &format!("{base}?filter%5Bworkspace_names%5D=nope"),
            None,
        )
        .await;
    assert_eq!(doc["data"], json!([]));
    let (_, doc) = h
        .call(
            "GET",
            &format!("{base}?filter%5Bworkspace_names%5D=app&filter%5Bstatus%5D=pending"),
            None,
        )
        .await;
    assert_eq!(doc["meta"]["pagination"]["total-count"], 3, "{doc}");
    let (st, _) = h
        .call("GET", &format!("{base}?filter%5Bcolor%5D=red"), None)
        .await;
    assert_eq!(st, 400);
}

/// A new run of the workspace on `cv`; answers its ID.
async fn new_run(h: &Harness, cv: &str) -> String {
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(cv))),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    doc["data"]["id"].as_str().unwrap_or_default().to_owned()
}

/// Moves run `id` to `status` as the operator would (no operator runs here).
async fn set_status(h: &Harness, id: &str, status: &str) {
    use kube::api::{Patch, PatchParams};
    crate::write::api::<terrace_crds::Run>(&h.state, "acme")
        .patch_status(
            &terrace_crds::ids::object_name_for_id(id),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"status": status}})),
        )
        .await
        .unwrap_or_else(|e| panic!("run status: {e}"));
    h.wait(status, |i| {
        i.runs()
            .get(id)
            .and_then(|r| r.status.as_ref()?.status.clone())
            .as_deref()
            == Some(status)
    })
    .await;
}

/// go-tfe's comments and run events: comments through their endpoint and with an action,
/// each readable by ID and listed on the run; the run's events follow its status with
/// their actors, the comment events carry their comment (included on request), and each
/// event reads by ID. Commenting needs the right to act on runs.
#[tokio::test]
async fn comments_and_run_events() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let id = new_run(&h, &cv).await;
    let comments = format!("/api/v2/runs/{id}/comments");
    let comment =
        |body: &str| Some(json!({"data": {"type": "comments", "attributes": {"body": body}}}));
    let (st, doc) = h.call("POST", &comments, comment("looks fine")).await;
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["type"], "comments");
    assert_eq!(doc["data"]["attributes"]["body"], "looks fine");
    let first = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    assert!(first.starts_with("wsc-"), "{first}");
    let (st, _) = h.call("POST", &comments, comment("  ")).await;
    assert_eq!(st, 422, "a blank comment");
    let (st, _) = h.call("POST", &comments, comment(&"x".repeat(5000))).await;
    assert_eq!(st, 422, "a comment over the limit");
    let (st, _) = h
        .call(
            "POST",
            &format!("/api/v2/runs/{id}/actions/discard"),
            Some(json!({"comment": "not today"})),
        )
        .await;
    assert_eq!(st, 202);

    let (_, doc) = h.call("GET", &comments, None).await;
    let bodies: Vec<&str> = doc["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["attributes"]["body"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(bodies, ["looks fine", "not today"]);
    assert_eq!(doc["meta"]["pagination"]["total-count"], 2);
    let (st, doc) = h
        .call("GET", &format!("/api/v2/comments/{first}"), None)
        .await;
    assert_eq!(
        (st, doc["data"]["attributes"]["body"].as_str()),
        (200, Some("looks fine"))
    );
    let (st, _) = h
        .call("GET", "/api/v2/comments/wsc-NoSuchComment01", None)
        .await;
    assert_eq!(st, 404);
    let (_, run) = h.call("GET", &format!("/api/v2/runs/{id}"), None).await;
    assert_eq!(
        run["data"]["relationships"]["comments"]["data"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        run["data"]["attributes"]["permissions"]["can-comment"],
        true
    );

    // Events: the run's life, in time, with who did what.
    let (st, doc) = h
        .call("GET", &format!("/api/v2/runs/{id}/run-events"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
    let events = doc["data"].as_array().cloned().unwrap_or_default();
    let actions: Vec<&str> = events
        .iter()
        .filter_map(|e| e["attributes"]["action"].as_str())
        .collect();
    assert_eq!(actions, ["created", "commented", "commented", "discarded"]);
    let discarded = &events[3];
    assert_eq!(discarded["relationships"]["actor"]["data"]["type"], "users");
    assert_eq!(discarded["relationships"]["actor"]["data"]["id"], "admin");
    assert!(
        discarded["attributes"]["description"]
            .as_str()
            .unwrap_or_default()
            .contains("discarded by admin")
    );
    let commented = &events[1];
    assert_eq!(
        commented["relationships"]["comment"]["data"]["id"],
        first.as_str()
    );
    assert!(doc.get("included").is_none());
    assert_eq!(
        run["data"]["relationships"]["run-events"]["data"]
            .as_array()
            .map(Vec::len),
        Some(4),
        "the run names its events"
    );

    let (_, doc) = h
        .call(
            "GET",
            &format!("/api/v2/runs/{id}/run-events?include=actor,comment"),
            None,
        )
        .await;
    let included = doc["included"].as_array().cloned().unwrap_or_default();
    assert!(
        included
            .iter()
            .any(|i| i["type"] == "users" && i["attributes"]["username"] == "admin")
    );
    assert_eq!(
        included.iter().filter(|i| i["type"] == "comments").count(),
        2,
        "{doc}"
    );
    let event_id = commented["id"].as_str().unwrap_or_default();
    let (st, doc) = h
        .call(
            "GET",
            &format!("/api/v2/run-events/{event_id}?include=comment"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["data"]["attributes"]["action"], "commented");
    assert_eq!(doc["included"][0]["attributes"]["body"], "looks fine");
    for bad in ["re-nope", "re-NoSuchRun000000-planned", "ws-x"] {
        let (st, _) = h
            .call("GET", &format!("/api/v2/run-events/{bad}"), None)
            .await;
        assert_eq!(st, 404, "{bad}");
    }
    let (st, _) = h
        .call(
            "GET",
            &format!("/api/v2/runs/{id}/run-events?include=plan"),
            None,
        )
        .await;
    assert_eq!(st, 400);

    // A reader reads comments and events but may not comment.
    let reader = reader_of(&h, &["workspaces", "runs"]).await;
    let (st, _) = h.call_as(&reader, "GET", &comments, None).await;
    assert_eq!(st, 200);
    let (st, _) = h
        .call_as(&reader, "POST", &comments, comment("me too"))
        .await;
    assert_eq!(st, 403);
}

/// Force-execute discards the runs ahead of a pending run (TFE's "run this plan now"),
/// and refuses what TFE refuses: a run that is not pending, one with nothing ahead, and
/// a run ahead that cannot be discarded.
#[tokio::test]
async fn force_execute_discards_the_runs_ahead() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let a = new_run(&h, &cv).await;
    set_status(&h, &a, "planned").await;
    let b = new_run(&h, &cv).await;
    let c = new_run(&h, &cv).await;
    let force = |id: &str| format!("/api/v2/runs/{id}/actions/force-execute");
    let status = |id: &str| {
        h.state
            .index
            .read()
            .runs()
            .get(id)
            .and_then(|r| r.status.as_ref()?.status.clone())
            .unwrap_or_default()
    };
    let (st, doc) = h.call("POST", &force(&a), None).await;
    assert_eq!(st, 409, "a planned run is not pending: {doc}");
    let (_, doc) = h.call("GET", &format!("/api/v2/runs/{c}"), None).await;
    assert_eq!(
        doc["data"]["attributes"]["permissions"]["can-force-execute"],
        true
    );
    let (st, doc) = h.call("POST", &force(&c), None).await;
    assert_eq!(st, 202, "{doc}");
    assert_eq!(status(&a), "discarded");
    assert_eq!(status(&b), "discarded");
    assert_eq!(
        status(&c),
        "",
        "the forced run itself is untouched (pending)"
    );
    let (_, doc) = h
        .call("GET", &format!("/api/v2/runs/{a}/run-events"), None)
        .await;
    let last = doc["data"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["attributes"]["action"], "discarded");
    assert_eq!(last["relationships"]["actor"]["data"]["id"], "admin");
    let (st, doc) = h.call("POST", &force(&c), None).await;
    assert_eq!(st, 409, "nothing ahead any more: {doc}");
    set_status(&h, &c, "applying").await;
    let d = new_run(&h, &cv).await;
    let (st, doc) = h.call("POST", &force(&d), None).await;
    assert_eq!(st, 409, "{doc}");
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot be discarded"),
        "{doc}"
    );
}

/// The backing data actions of configuration versions, as state versions have them: a
/// soft-deleted archive is neither downloaded nor run until restored; a permanent
/// deletion archives the version; the current one is 409.
#[tokio::test]
async fn configuration_version_backing_data() {
    let h = setup().await;
    let older = uploaded(&h, false).await;
    let current = uploaded(&h, false).await;
    let auth = format!("Bearer {}", h.token);
    let act = |cv: &str, a: &str| format!("/api/v2/configuration-versions/{cv}/actions/{a}");
    let download = |cv: &str| {
        let path = format!("/api/v2/configuration-versions/{cv}/download");
        let auth = auth.clone();
        let h = &h;
        async move {
            h.raw("GET", &path, &[("authorization", &auth)], Vec::new())
                .await
                .0
        }
    };
    let (st, doc) = h
        .call("POST", &act(&current, "soft_delete_backing_data"), None)
        .await;
    assert_eq!(st, 409, "the current configuration's data stays: {doc}");
    let (st, doc) = h
        .call("POST", &act(&older, "soft_delete_backing_data"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(download(&older).await, 404);
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&older))),
        )
        .await;
    assert_eq!(st, 422, "{doc}");
    let (st, _) = h
        .call("POST", &act(&older, "restore_backing_data"), None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(download(&older).await, 200);
    let (st, _) = h
        .call("POST", &act(&older, "restore_backing_data"), None)
        .await;
    assert_eq!(st, 409, "nothing to restore");
    let (st, _) = h
        .call(
            "POST",
            &act(&older, "permanently_delete_backing_data"),
            None,
        )
        .await;
    assert_eq!(st, 200);
    let (_, doc) = h
        .call(
            "GET",
            &format!("/api/v2/configuration-versions/{older}"),
            None,
        )
        .await;
    assert_eq!(doc["data"]["attributes"]["status"], "archived");
    assert_eq!(download(&older).await, 404);
    let (st, _) = h
        .call("POST", &act(&older, "restore_backing_data"), None)
        .await;
    assert_eq!(st, 409, "a permanent deletion is final");
    let (st, _) = h.call("POST", &act(&older, "nope"), None).await;
    assert_eq!(st, 404);
    let reader = reader_of(&h, &["workspaces", "configurationversions"]).await;
    let (st, _) = h
        .call_as(
            &reader,
            "POST",
            &act(&current, "soft_delete_backing_data"),
            None,
        )
        .await;
    assert_eq!(st, 403);
}

/// A workspace's configuration version takes a new archive through its upload URL until
/// a run uses it (TFE's behaviour, which go-tfe's tests rely on); a refused replacement
/// leaves the version as it was.
#[tokio::test]
async fn a_workspace_upload_url_takes_a_new_archive_until_a_run_uses_it() {
    let h = setup().await;
    let (id, path) = created_cv(&h, json!({"auto-queue-runs": false})).await;
    let put = |body: Vec<u8>| {
        let path = path.clone();
        let h = &h;
        async move {
            h.raw(
                "PUT",
                &path,
                &[("content-type", "application/octet-stream")],
                body,
            )
            .await
        }
    };
    let auth = format!("Bearer {}", h.token);
    let download = || {
        let path = format!("/api/v2/configuration-versions/{id}/download");
        let auth = auth.clone();
        let h = &h;
        async move {
            h.raw("GET", &path, &[("authorization", &auth)], Vec::new())
                .await
                .2
        }
    };
    let first = targz(&[("main.tf", "# first")]);
    let second = targz(&[("main.tf", "# second")]);
    assert_eq!(put(first.clone()).await.0, 200);
    h.wait("uploaded", |i| {
        i.configuration_versions()
            .get(&id)
            .is_some_and(|c| c.state() == Ok(ConfigurationVersionState::Uploaded))
    })
    .await;
    assert_eq!(download().await, first);
    assert_eq!(
        put(second.clone()).await.0,
        200,
        "a second upload replaces the archive"
    );
    assert_eq!(download().await, second);
    let (st, _, body) = put(b"not a tar.gz".to_vec()).await;
    assert_eq!(st, 422, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        download().await,
        second,
        "a refused replacement changes nothing"
    );
    let (_, doc) = h
        .call("GET", &format!("/api/v2/configuration-versions/{id}"), None)
        .await;
    assert_eq!(doc["data"]["attributes"]["status"], "uploaded");
    let _run = new_run(&h, &id).await;
    let (st, _, body) = put(first).await;
    assert_eq!(st, 409, "{}", String::from_utf8_lossy(&body));
    assert_eq!(download().await, second, "what the run plans stays");
}

/// Issue 39 §1: a token's parts went unescaped into the path of a Secret GET made with the
/// API server's own identity, before the caller was authenticated (`acme/secrets?` turned
/// it into a LIST of every Secret, logged whole). A token whose parts are not Kubernetes
/// names, or that names a run the index does not hold, is refused with no request to the
/// cluster at all; a wrong secret for a known run costs at most the one read of its
/// Secret, then nothing.
#[tokio::test]
async fn bogus_run_tokens_cost_no_kubernetes_request() {
    let h = setup().await;
    let (run, token) = applying_run(&h).await;
    let object = terrace_crds::ids::object_name_for_id(&run);
    let secret = "A".repeat(43);
    let mut bogus = vec![
        "tfrun.x.acme/secrets?.y".to_owned(),
        format!("tfrun.x.acme/secrets?.{secret}"),
        format!("tfrun.{object}.acme/secrets?.{secret}"),
        format!("tfrun.{object}/../x.acme.{secret}"),
        format!("tfrun.{object}.ACME.{secret}"),
        format!("tfrun.{object}.acme.has/slash/{secret}"),
        format!("tfrun.run-nosuchrun00000001.acme.{secret}"),
        format!("tfrun.{object}.elsewhere.{secret}"),
    ];
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(39);
    let alphabet = b"acme-./?%#&=AZ09_~ ";
    for _ in 0..200 {
        let tail: String = (0..rng.random_range(0..60))
            .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
            .collect();
        bogus.push(format!("tfrun.{tail}"));
    }
    let before = h.api_server_calls();
    for t in &bogus {
        let (st, _) = h
            .call_as(t, "GET", "/api/v2/organizations/acme/workspaces/app", None)
            .await;
        assert_eq!(st, 401, "{t}");
    }
    for t in [
        "acme/secrets?.y".to_owned(),
        format!("../x.{secret}"),
        format!("ACME.{secret}"),
    ] {
        let (st, _) = h
            .call_as(
                &t,
                "GET",
                &format!("/api/v2/runner/runs/{run}/archive"),
                None,
            )
            .await;
        assert_eq!(st, 401, "{t}");
    }
    assert_eq!(
        h.api_server_calls(),
        before,
        "a bogus token made the API server call the cluster"
    );
    // A wrong secret for a run that exists: the run's Secret is read once, then never
    // again, whatever is presented.
    let wrong = terrace_crds::run::run_credential(&format!("acme.{secret}"), &object);
    let (st, _) = h
        .call_as(
            &wrong,
            "GET",
            "/api/v2/organizations/acme/workspaces/app",
            None,
        )
        .await;
    assert_eq!(st, 401);
    let cred = terrace_crds::run::run_credential(&token, &object);
    let (st, _) = h
        .call_as(
            &cred,
            "GET",
            "/api/v2/organizations/acme/workspaces/app",
            None,
        )
        .await;
    assert_eq!(st, 200);
    let read_once = h.api_server_calls();
    for _ in 0..20 {
        let (st, _) = h
            .call_as(
                &wrong,
                "GET",
                "/api/v2/organizations/acme/workspaces/app",
                None,
            )
            .await;
        assert_eq!(st, 401);
        let (st, _) = h
            .call_as(
                &cred,
                "GET",
                "/api/v2/organizations/acme/workspaces/app",
                None,
            )
            .await;
        assert_eq!(st, 200);
    }
    assert_eq!(
        h.api_server_calls(),
        read_once,
        "the run's Secret is read once"
    );
}

/// Issue 27 §1: the credential of a run's engine (`tfrun.<run>.<runner token>`, in its
/// CLI configuration) reads what the run's workspace may read and nothing else: its own
/// workspace and those sharing their state with it (by consumer list, project or
/// globally), by name and their current state; never another workspace, a list, or a
/// write; and it ends with the run.
#[tokio::test]
async fn a_run_credential_reads_what_its_workspace_may_read() {
    let h = setup().await;
    h.workspace("ws-Producer000000001", "producer", |s| {
        s.remote_state_consumers = vec![WS.to_owned()];
    })
    .await;
    h.workspace("ws-GlobalShare000001", "everyone", |s| {
        s.global_remote_state = true
    })
    .await;
    h.workspace("ws-PrivateState00001", "private", |_| {}).await;
    let (run, token) = applying_run(&h).await;
    let object = terrace_crds::ids::object_name_for_id(&run);
    let cred = terrace_crds::run::run_credential(&token, &object);
    let read = |name: &str| format!("/api/v2/organizations/acme/workspaces/{name}");
    for name in ["app", "producer", "everyone"] {
        let (st, doc) = h.call_as(&cred, "GET", &read(name), None).await;
        assert_eq!(st, 200, "{name}: {doc}");
    }
    // Not shared with the run's workspace: refused with the reason and the setting
    // (issue 41 §2), which the engine prints, instead of a 404 that sends the remote
    // backend to create the workspace ("not allowed to create workspaces").
    for path in [
        read("private"),
        "/api/v2/workspaces/ws-PrivateState00001/current-state-version".to_owned(),
    ] {
        let (st, doc) = h.call_as(&cred, "GET", &path, None).await;
        assert_eq!(st, 403, "{path}: {doc}");
        let detail = doc["errors"][0]["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&format!("Run {run} of workspace \"app\" is not authorized to read the state of workspace \"private\""))
                && detail.contains("global-remote-state")
                && detail.contains("remote-state-consumers"),
            "{doc}"
        );
        assert!(!detail.contains("ws-PrivateState"), "{doc}");
    }
    // A workspace of another organization stays unknown to it.
    let (st, _) = h
        .call_as(
            &cred,
            "GET",
            "/api/v2/workspaces/ws-Nowhere0000000001",
            None,
        )
        .await;
    assert_eq!(st, 404);
    let (st, doc) = h
        .call_as(&cred, "GET", "/api/v2/organizations/acme/workspaces", None)
        .await;
    assert_eq!(
        (st, doc["data"].as_array().map(Vec::len)),
        (200, Some(0)),
        "no lists"
    );
    let (st, _) = h
        .call_as(
            &cred,
            "POST",
            "/api/v2/organizations/acme/workspaces",
            Some(json!({"data": {"type": "workspaces", "attributes": {"name": "sneaky"}}})),
        )
        .await;
    assert_eq!(st, 403, "nothing is written with it");
    let (st, _) = h
        .call_as(
            &cred,
            "POST",
            &format!("/api/v2/workspaces/{WS}/actions/unlock"),
            Some(json!({})),
        )
        .await;
    assert!(matches!(st, 403 | 404), "no lock right: {st}");
    assert!(
        terrace_crds::lock::holder_of(&h.ws(WS)).is_some(),
        "the run's lock stays"
    );
    // Issue 39 §8: the organization's own documents are not the run's to read; what the
    // backends of terraform_remote_state read (the entitlements) is.
    let (st, doc) = h.call_as(&cred, "GET", "/api/v2/organizations", None).await;
    assert_eq!(
        (st, doc["data"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{doc}"
    );
    for path in [
        "/api/v2/organizations/acme",
        "/api/v2/organizations/acme/tags",
        "/api/v2/organizations/acme/capacity",
        "/api/v2/organizations/acme/projects",
    ] {
        let (st, doc) = h.call_as(&cred, "GET", path, None).await;
        assert_eq!(st, 404, "{path}: {doc}");
    }
    let (st, doc) = h
        .call_as(
            &cred,
            "GET",
            "/api/v2/organizations/acme/entitlement-set",
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let forged = terrace_crds::run::run_credential("acme.not-the-token", &object);
    let (st, _) = h.call_as(&forged, "GET", &read("app"), None).await;
    assert_eq!(st, 401);
    set_status(&h, &run, "applied").await;
    let (st, _) = h.call_as(&cred, "GET", &read("app"), None).await;
    assert_eq!(st, 401, "the credential ends with the run");
}

/// The redacted JSON plan the runner uploads is served to whoever may read the run; the
/// full JSON plan (sensitive values in it) needs `read-state`.
#[tokio::test]
async fn the_redacted_plan_needs_only_the_run_read_right() {
    let h = setup().await;
    let (run, token) = applying_run(&h).await;
    set_status(&h, &run, "planning").await;
    let auth = format!("Bearer {token}");
    for (what, body) in [
        (
            "plan-json",
            json!({"variables": {"pw": {"value": "hunter2"}}}),
        ),
        (
            "plan-json-redacted",
            json!({"plan_format_version": "1.2", "resource_changes": []}),
        ),
    ] {
        let (st, _, _) = h
            .raw(
                "PUT",
                &format!("/api/v2/runner/runs/{run}/{what}"),
                &[("authorization", &auth)],
                body.to_string().into_bytes(),
            )
            .await;
        assert_eq!(st, 204, "{what}");
    }
    let reader = reader_of(&h, &["workspaces", "runs"]).await;
    let plan = format!("plan-{}", run.trim_start_matches("run-"));
    let (st, doc) = h
        .call_as(
            &reader,
            "GET",
            &format!("/api/v2/plans/{plan}/json-output-redacted"),
            None,
        )
        .await;
    assert_eq!(
        (st, doc["plan_format_version"].as_str()),
        (200, Some("1.2")),
        "{doc}"
    );
    let (st, _) = h
        .call_as(
            &reader,
            "GET",
            &format!("/api/v2/plans/{plan}/json-output"),
            None,
        )
        .await;
    assert_eq!(st, 403, "the full JSON plan needs read-state");
    let (st, doc) = h
        .call("GET", &format!("/api/v2/plans/{plan}/json-output"), None)
        .await;
    assert_eq!(
        (st, doc["variables"]["pw"]["value"].as_str()),
        (200, Some("hunter2"))
    );
}

/// Issue 43: steady-state reads cost the cluster nothing. After one warm-up round (the
/// caller's rules are reviewed once and cached), reading an organization, its
/// workspaces, a workspace, its runs and variables, a run and its plan, the projects,
/// the entitlements and the registry's modules makes no request to Kubernetes: all of it
/// comes from the watch-fed index.
#[tokio::test]
async fn steady_state_reads_cost_no_kubernetes_request() {
    let h = setup().await;
    let cv = uploaded(&h, false).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/runs",
            Some(run_body(json!({}), Some(WS), Some(&cv))),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let run = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let plan = terrace_crds::run::plan_id(&run);
    let reads = [
        "/api/v2/organizations/acme".to_owned(),
        "/api/v2/organizations/acme/workspaces".to_owned(),
        "/api/v2/organizations/acme/workspaces/app".to_owned(),
        WS_PATH.to_owned(),
        format!("{WS_PATH}/runs"),
        format!("{WS_PATH}/vars"),
        format!("/api/v2/runs/{run}"),
        format!("/api/v2/plans/{plan}"),
        "/api/v2/organizations/acme/projects".to_owned(),
        "/api/v2/organizations/acme/entitlement-set".to_owned(),
        "/api/v2/organizations/acme/registry-modules".to_owned(),
        format!("/api/v2/configuration-versions/{cv}"),
    ];
    for path in &reads {
        let (st, doc) = h.call("GET", path, None).await;
        assert_eq!(st, 200, "{path}: {doc}");
    }
    let before = h.api_server_calls();
    for path in &reads {
        let (st, _) = h.call("GET", path, None).await;
        assert_eq!(st, 200, "{path}");
    }
    assert_eq!(
        h.api_server_calls() - before,
        0,
        "steady-state reads made requests to Kubernetes"
    );
}
