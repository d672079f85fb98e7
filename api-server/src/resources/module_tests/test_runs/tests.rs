//! Tests of `test_runs`.

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use terrace_crds::{ConfigurationVersion, ConfigurationVersionState, TestRun};

use crate::testing::*;

async fn set_status(h: &Mh, id: &str, status: serde_json::Value) {
    let api: Api<TestRun> = Api::namespaced(h.admin.clone(), ORG);
    let r = api
        .patch_status(
            &id.to_ascii_lowercase(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    crate::write::wait_seen(&h.state, &r).await;
}

/// A1: defaults, every attribute of A5, created-by and the configuration version
/// relationship; bad input is 422 with a pointer per bad field.
#[tokio::test]
async fn create_and_show_with_every_attribute() {
    let h = Mh::with_module().await;
    let cv = h.uploaded_cv().await;
    let (st, doc) = h.run(&cv, json!({})).await;
    assert_eq!(st, 201, "{doc}");
    let a = &doc["data"]["attributes"];
    assert_eq!(doc["data"]["type"], "test-runs");
    assert_eq!(a["status"], "pending");
    assert_eq!(a["test-directory"], "tests");
    assert_eq!(a["verbose"], false);
    assert_eq!(a["source"], "svc-api");
    assert_eq!(a["filters"], json!([]));
    assert_eq!(a["variables"], json!([]));
    assert_eq!(a["status-timestamps"], json!({}));
    for k in [
        "tests-passed",
        "tests-failed",
        "tests-errored",
        "tests-skipped",
        "test-status",
    ] {
        assert!(a[k].is_null(), "{k}");
    }
    assert!(a["created-at"].is_string());
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    // A capability URL of this run (issue 13: go-tfe reads it without a token).
    assert!(
            a["log-read-url"].as_str().is_some_and(
                |u| u.starts_with(&format!("http://localhost/api/v2/test-runs/{id}/log/"))
            ),
            "{a}"
        );
    assert_eq!(
        doc["data"]["relationships"]["configuration-version"]["data"]["id"],
        cv.as_str()
    );
    assert_eq!(
        doc["data"]["relationships"]["created-by"]["data"]["type"],
        "users"
    );

    let (st, doc) = h
            .run(&cv, json!({"verbose": true, "test-directory": "t2", "filters": ["a.tftest.hcl"], "variables": [{"key": "region", "value": "\"eu\""}]}))
            .await;
    assert_eq!(st, 201, "{doc}");
    let id2 = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    set_status(&h, &id2, json!({"status": "finished", "testStatus": "pass", "testsPassed": 3, "testsFailed": 0, "testsErrored": 0, "testsSkipped": 1,
            "statusTimestamps": {"queuedAt": "2024-01-01T00:00:00Z", "finishedAt": "2024-01-01T00:01:00Z"}})).await;
    let (st, doc) = h.call("GET", &format!("{T}/test-runs/{id2}"), None).await;
    assert_eq!(st, 200, "{doc}");
    let a = &doc["data"]["attributes"];
    assert_eq!(a["verbose"], true);
    assert_eq!(a["test-directory"], "t2");
    assert_eq!(a["filters"], json!(["a.tftest.hcl"]));
    assert_eq!(
        a["variables"],
        json!([{"key": "region", "value": "\"eu\""}])
    );
    assert_eq!(a["status"], "finished");
    assert_eq!(a["test-status"], "pass");
    assert_eq!(a["tests-passed"], 3);
    assert_eq!(a["tests-skipped"], 1);
    assert_eq!(a["status-timestamps"]["queued-at"], "2024-01-01T00:00:00Z");
    assert_eq!(
        a["status-timestamps"]["finished-at"],
        "2024-01-01T00:01:00Z"
    );

    // Bad input: no cv (pointer), an unknown one, wrong types (one error each).
    let (st, doc) = h
            .call("POST", &format!("{T}/test-runs"), Some(json!({"data": {"type": "test-runs", "attributes": {"verbose": "yes", "filters": "x"}}})))
            .await;
    assert_eq!(st, 422, "{doc}");
    let pointers: Vec<&str> = doc["errors"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|x| x["source"]["pointer"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        pointers,
        [
            "/data/attributes/verbose",
            "/data/attributes/filters",
            "/data/relationships/configuration-version/data/id"
        ]
    );
    let (st, _) = h.run("cv-unknown", json!({})).await;
    assert_eq!(st, 422);
    let (st, doc) = h
        .run(&cv, json!({"variables": [{"key": "1x", "value": "1"}]}))
        .await;
    assert_eq!(st, 422);
    assert_eq!(
        doc["errors"][0]["source"]["pointer"],
        "/data/attributes/variables/0/key"
    );
    let (cv_pending, _) = h.cv(false).await;
    let (st, doc) = h.run(&cv_pending, json!({})).await;
    assert_eq!(st, 422);
    assert!(doc.to_string().contains("not uploaded"));
    // Unknown run, module, organization: 404.
    assert_eq!(
        h.call("GET", &format!("{T}/test-runs/trun-nope"), None)
            .await
            .0,
        404
    );
    assert_eq!(
        h.call(
            "GET",
            "/api/v2/organizations/acme/tests/registry-modules/private/acme/nope/aws/test-runs",
            None
        )
        .await
        .0,
        404
    );
    assert_eq!(
        h.call(
            "GET",
            "/api/v2/organizations/nope/tests/registry-modules/private/nope/vpc/aws/test-runs",
            None
        )
        .await
        .0,
        404
    );
}

/// A configuration version of another module of the organization may be tested
/// (promotion of known good code); the run belongs to the module in the path.
#[tokio::test]
async fn cv_of_another_module_is_allowed() {
    let h = Mh::with_module().await;
    h.module("net").await;
    let (st, doc) = h
            .call("POST", "/api/v2/organizations/acme/tests/registry-modules/private/acme/net/aws/test-runs/configuration-versions", None)
            .await;
    assert_eq!(st, 201, "{doc}");
    let url = doc["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap_or_default();
    let path = url[url.find("/api/v2/").unwrap_or(0)..].to_owned();
    let cv = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(h.upload(&path, targz(&[("main.tf", "")])).await, 200);
    h.wait("cv uploaded", |i| {
        i.configuration_versions()
            .get(&cv)
            .is_some_and(|c| c.state() == Ok(ConfigurationVersionState::Uploaded))
    })
    .await;
    let (st, doc) = h.run(&cv, json!({})).await;
    assert_eq!(st, 201, "{doc}");
    let (_, list) = h.call("GET", &format!("{T}/test-runs"), None).await;
    assert_eq!(list["meta"]["pagination"]["total-count"], 1);
}

/// A4: page[size] (default 20), page[number], filter[source] with SPEC.md values and
/// vendor aliases; a bad source is 400 naming the parameter.
#[tokio::test]
async fn list_pages_and_filters_by_source() {
    let h = Mh::with_module().await;
    let cv = h.uploaded_cv().await;
    for _ in 0..3 {
        assert_eq!(h.run(&cv, json!({})).await.0, 201);
    }
    // The operator's automatic run of an upload (see automatic_test_runs in tests/).
    let module = h
        .state
        .index
        .read()
        .registry_modules()
        .in_namespace(ORG)
        .next()
        .map(|m| m.name_any());
    let cv_name = cv.to_ascii_lowercase();
    let spec = terrace_crds::testrun::automatic::run_spec(&module.unwrap_or_default(), &cv_name);
    super::create_run(&h.state, ORG, spec, None)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let (st, doc) = h.call("GET", &format!("{T}/test-runs"), None).await;
    assert_eq!(st, 200);
    assert_eq!(doc["meta"]["pagination"]["total-count"], 4);
    assert_eq!(doc["meta"]["pagination"]["page-size"], 20);
    let (_, doc) = h
        .call(
            "GET",
            &format!("{T}/test-runs?page%5Bsize%5D=3&page%5Bnumber%5D=2"),
            None,
        )
        .await;
    assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(doc["meta"]["pagination"]["total-pages"], 2);
    for (filter, n) in [
        ("svc-api", 3),
        ("tfe-api", 3),
        ("tfe-configuration-version", 1),
        ("engine", 0),
        ("engine,svc-configuration-version", 1),
    ] {
        let (st, doc) = h
            .call(
                "GET",
                &format!("{T}/test-runs?filter%5Bsource%5D={filter}"),
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(doc["meta"]["pagination"]["total-count"], n, "{filter}");
    }
    let (st, doc) = h
        .call(
            "GET",
            &format!("{T}/test-runs?filter%5Bsource%5D=bogus"),
            None,
        )
        .await;
    assert_eq!(st, 400);
    assert_eq!(doc["errors"][0]["source"]["parameter"], "filter[source]");
}

/// A6/A7 as `terrace_crds::testrun::{cancel, force_cancel}` decide them: force-cancel
/// 409 before a cancel; cancel 202 and recorded for a run that is not final (pending
/// too: the CLI cancels as soon as the run exists), 202 again; force-cancel 202 after
/// it; a repeated cancel of a canceled run 202 (the CLI's second Ctrl-C); cancel of a
/// run that ended on its own 409; 404 for an unknown run and a caller without rights.
#[tokio::test]
async fn cancel_and_force_cancel() {
    let h = Mh::with_module().await;
    let cv = h.uploaded_cv().await;
    let (_, doc) = h.run(&cv, json!({})).await;
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let cancel = format!("{T}/test-runs/{id}/cancel");
    let force = format!("{T}/test-runs/{id}/force-cancel");
    let (st, doc) = h.call("POST", &force, None).await;
    assert_eq!(st, 409);
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("cancel it before")
    );
    let (st, body) = h.call("POST", &cancel, None).await;
    assert_eq!((st, body), (202, serde_json::Value::Null));
    let run = h.state.index.read().test_runs().get(&id).cloned();
    assert!(
        run.and_then(|r| r.status.clone())
            .and_then(|s| s.cancel_requested_at)
            .is_some()
    );
    set_status(&h, &id, json!({"status": "running"})).await;
    assert_eq!(h.call("POST", &cancel, None).await.0, 202);
    assert_eq!(h.call("POST", &force, None).await.0, 202);
    let run = h.state.index.read().test_runs().get(&id).cloned();
    assert!(
        run.and_then(|r| r.status.clone())
            .and_then(|s| s.force_cancel_requested_at)
            .is_some()
    );
    set_status(&h, &id, json!({"status": "canceled"})).await;
    assert_eq!(h.call("POST", &cancel, None).await.0, 202);
    assert_eq!(h.call("POST", &force, None).await.0, 202);
    // A run that finished on its own: 409 not running.
    let (_, doc) = h.run(&cv, json!({})).await;
    let done = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    set_status(
        &h,
        &done,
        json!({"status": "finished", "testStatus": "pass"}),
    )
    .await;
    let (st, doc) = h
        .call("POST", &format!("{T}/test-runs/{done}/cancel"), None)
        .await;
    assert_eq!(st, 409, "{doc}");
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("not running")
    );
    assert_eq!(
        h.call("POST", &format!("{T}/test-runs/trun-nope/cancel"), None)
            .await
            .0,
        404
    );
    // A reader (get/list only) cannot cancel: 404; without any binding nothing is seen.
    let reader = h
        .token_with_role(Some(vec![rule(
            &["get", "list"],
            &["testruns", "registrymodules"],
        )]))
        .await;
    assert_eq!(
        h.call_as(&reader, "GET", &format!("{T}/test-runs/{id}"), None)
            .await
            .0,
        200
    );
    assert_eq!(h.call_as(&reader, "POST", &cancel, None).await.0, 404);
    assert_eq!(
        h.call_as(
            &reader,
            "POST",
            &format!("{T}/test-runs"),
            Some(json!({"data": {"type": "test-runs"}}))
        )
        .await
        .0,
        404
    );
    let nobody = h.token_with_role(None).await;
    assert_eq!(
        h.call_as(&nobody, "GET", &format!("{T}/test-runs"), None)
            .await
            .0,
        404
    );
    let owner = h
        .token_with_role(Some(vec![rule(&["get", "list", "create"], &["testruns"])]))
        .await;
    let (st, doc) = h.call_as(&owner, "POST", &format!("{T}/test-runs"), Some(json!({"data": {"type": "test-runs",
            "relationships": {"configuration-version": {"data": {"id": cv, "type": "configuration-versions"}}}}}))).await;
    assert_eq!(st, 201, "{doc}");
    assert!(
        doc["data"]["relationships"]["created-by"]["data"]["id"]
            .as_str()
            .unwrap_or_default()
            .starts_with("system:serviceaccount:acme:")
    );
}

fn marker(h: &Mh, cv: &str) -> Option<String> {
    let cvo = h
        .state
        .index
        .read()
        .configuration_versions()
        .get(cv)
        .cloned();
    cvo.and_then(|c| {
        c.annotations()
            .get(terrace_crds::constants::ANNOTATION_AUTOMATIC_TEST_RUN)
            .cloned()
    })
}

async fn uploaded_auto_cv(h: &Mh) -> String {
    let (cv, path) = h.cv(true).await;
    assert_eq!(h.upload(&path, targz(&[("main.tf", "")])).await, 200);
    cv
}

/// An explicit run on a configuration version whose automatic run is due supersedes
/// it (the operator then creates none); the marker once superseded stays, and runs
/// on it are created as usual.
#[tokio::test]
async fn an_explicit_run_supersedes_the_due_automatic_run() {
    let h = Mh::with_module().await;
    let cv = uploaded_auto_cv(&h).await;
    assert_eq!(marker(&h, &cv).as_deref(), Some("due"));
    let (st, doc) = h.run(&cv, json!({})).await;
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["attributes"]["source"], "svc-api");
    h.wait("the marker superseded", |i| {
        i.configuration_versions().get(&cv).is_some_and(|c| {
            c.annotations()
                .get(terrace_crds::constants::ANNOTATION_AUTOMATIC_TEST_RUN)
                .map(String::as_str)
                == Some("superseded")
        })
    })
    .await;
    assert_eq!(h.run(&cv, json!({})).await.0, 201);
    assert_eq!(marker(&h, &cv).as_deref(), Some("superseded"));
    // After the operator claimed it (grace period over), an explicit run leaves the
    // marker alone: it is a run of its own.
    let cv2 = uploaded_auto_cv(&h).await;
    let api: Api<ConfigurationVersion> = Api::namespaced(h.admin.clone(), ORG);
    let patched = api
        .patch(
            &cv2.to_ascii_lowercase(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                    terrace_crds::constants::ANNOTATION_AUTOMATIC_TEST_RUN: "claimed"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    crate::write::wait_seen(&h.state, &patched).await;
    assert_eq!(h.run(&cv2, json!({})).await.0, 201);
    assert_eq!(marker(&h, &cv2).as_deref(), Some("claimed"));
}

/// Many concurrent explicit creates on a due configuration version: every one is a
/// run, each claim is guarded, and the marker ends superseded.
#[tokio::test]
async fn concurrent_explicit_runs_all_claim_the_same_marker() {
    let h = Mh::with_module().await;
    let cv = uploaded_auto_cv(&h).await;
    let results = futures::future::join_all((0..8).map(|_| h.run(&cv, json!({})))).await;
    for (st, doc) in &results {
        assert_eq!(*st, 201, "{doc}");
    }
    assert_eq!(marker(&h, &cv).as_deref(), Some("superseded"));
    let (_, list) = h.call("GET", &format!("{T}/test-runs"), None).await;
    assert_eq!(list["meta"]["pagination"]["total-count"], 8);
}

/// The terraform CLI's requests (X-Terraform-Integration) create `engine` runs.
#[tokio::test]
async fn runs_created_by_the_cli_come_from_the_engine() {
    let h = Mh::with_module().await;
    let cv = h.uploaded_cv().await;
    let body = json!({"data": {"type": "test-runs", "attributes": {"variables": []},
            "relationships": {"configuration-version": {"data": {"type": "configuration-versions", "id": cv}}}}});
    let auth = format!("Bearer {}", h.token);
    let (st, _, bytes) = h
        .raw(
            "POST",
            &format!("{T}/test-runs"),
            &[
                ("authorization", &auth),
                ("content-type", "application/vnd.api+json"),
                ("x-terraform-integration", "cloud"),
                ("terraform-version", "1.11.4"),
            ],
            body.to_string().into_bytes(),
        )
        .await;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["attributes"]["source"], "engine");
    let (_, list) = h
        .call(
            "GET",
            &format!("{T}/test-runs?filter%5Bsource%5D=terraform"),
            None,
        )
        .await;
    assert_eq!(list["meta"]["pagination"]["total-count"], 1);
}
