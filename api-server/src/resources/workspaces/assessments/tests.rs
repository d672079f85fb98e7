//! Health assessments through the router (docs/health.md), on the simulator under the
//! chart's RBAC: a result as the operator leaves it (an assessment Run, its JSON plan in
//! the blob store, the workspace's `status.health`) read by an admin, a reader and a
//! stranger; the current result; an assessment asked for; assessments never runs.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::{ANNOTATION_ASSESSMENT_REQUESTED, LABEL_ID};
use terrace_crds::{Run, RunSpec, Workspace};

use crate::Edition;
use crate::blobs::BlobStore;
use crate::testing::{Harness, harness, meta, rule};

const WS: &str = "ws-AsmtHandlers000001";
const RUN: &str = "run-AsmtHandlers000001";
const RESULT: &str = "asmtres-AsmtHandlers000001";

fn plan() -> Value {
    json!({
        "format_version": "1.2",
        "prior_state": {"values": {"root_module": {"resources": [
            {"address": "terraform_data.a", "mode": "managed"},
            {"address": "terraform_data.b", "mode": "managed"}
        ]}}},
        "resource_drift": [{"address": "terraform_data.a", "change": {"actions": ["update"],
            "before": {"input": "one", "id": "1"}, "after": {"input": "two", "id": "1"}}}],
        "checks": [{"address": {"kind": "check", "to_display": "check.up"}, "status": "fail",
            "instances": [{"problems": [{"message": "upstream is not ok"}]}]}]
    })
}

/// A workspace with an ended assessment, as the operator leaves it.
async fn assessed(edition: Edition) -> Harness {
    let h = harness(edition).await;
    h.workspace(WS, "app", |s| s.assessments_enabled = true)
        .await;
    let run = h
        .create(Run {
            metadata: meta(&RUN.to_ascii_lowercase(), Some("acme"), &[(LABEL_ID, RUN)]),
            spec: RunSpec {
                workspace: WS.to_ascii_lowercase(),
                configuration_version: "cv-x".into(),
                plan_only: true,
                refresh_only: true,
                assessment: true,
                message: "Health assessment".into(),
                ..RunSpec::default()
            },
            status: None,
        })
        .await;
    let found = terrace_crds::assessment::assess(&plan()).summary();
    let runs: Api<Run> = Api::namespaced(h.admin.clone(), "acme");
    runs.patch_status(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "status": "planned_and_finished",
            "statusTimestamps": {"planned-and-finished-at": "2026-03-01T00:00:05.000Z"},
            "plan": {"finishedAt": "2026-03-01T00:00:05.000Z", "podName": "run-x-plan"},
            "assessment": {"summary": found, "triggers": ["assessment:drifted"]},
        }})),
    )
    .await
    .unwrap_or_else(|e| panic!("run status: {e}"));
    crate::blobs::store(&h.state, "acme", run.controller_owner_ref(&()))
        .put(
            &crate::resources::runs::plan_json_key(RUN),
            serde_json::to_vec(&plan()).unwrap().into(),
        )
        .await
        .unwrap_or_else(|e| panic!("blob: {e}"));
    let wss: Api<Workspace> = Api::namespaced(h.admin.clone(), "acme");
    wss.patch_status(
        &WS.to_ascii_lowercase(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"health": {
            "resultId": RESULT,
            "run": RUN.to_ascii_lowercase(),
            "assessedAt": "2026-03-01T00:00:05.000Z",
            "state": found.state(),
            "summary": found,
        }}})),
    )
    .await
    .unwrap_or_else(|e| panic!("workspace status: {e}"));
    h.wait("the assessment and the health", |i| {
        i.assessments()
            .get(RUN)
            .is_some_and(|r| r.status.as_ref().is_some_and(|s| s.assessment.is_some()))
            && i.workspace(WS)
                .is_some_and(|w| w.status.as_ref().is_some_and(|s| s.health.is_some()))
    })
    .await;
    h
}

#[tokio::test]
async fn a_result_in_tfe_shape_for_whoever_reads_the_workspace() {
    let h = assessed(Edition::Hosted).await;
    let (st, doc) = h
        .call("GET", &format!("/api/v2/assessment-results/{RESULT}"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
    let d = &doc["data"];
    assert_eq!(
        (d["id"].as_str(), d["type"].as_str()),
        (Some(RESULT), Some("assessment-results"))
    );
    let a = &d["attributes"];
    assert_eq!(
        (a["drifted"].clone(), a["succeeded"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(a["error-msg"], Value::Null);
    assert_eq!(a["created-at"], "2026-03-01T00:00:05.000Z");
    assert_eq!(
        (
            a["resources-drifted"].clone(),
            a["resources-undrifted"].clone()
        ),
        (json!(1), json!(1))
    );
    assert_eq!(
        (
            a["checks-failed"].clone(),
            a["all-checks-succeeded"].clone()
        ),
        (json!(1), json!(false))
    );
    let base = format!("/api/v2/assessment-results/{RESULT}");
    assert_eq!(d["links"]["json-output"], format!("{base}/json-output"));
    assert_eq!(d["links"]["json-schema"], format!("{base}/json-schema"));
    assert_eq!(d["links"]["log-output"], format!("{base}/log-output"));
    assert_eq!(d["relationships"]["workspace"]["data"]["id"], WS);

    // The workspace relates its current result, and answers it.
    let (st, ws) = h
        .call("GET", &format!("/api/v2/workspaces/{WS}"), None)
        .await;
    assert_eq!(st, 200, "{ws}");
    assert_eq!(
        ws["data"]["relationships"]["current-assessment-result"]["data"],
        json!({"id": RESULT, "type": "assessment-results"})
    );
    assert_eq!(
        ws["data"]["attributes"]["last-assessment-result-at"],
        "2026-03-01T00:00:05.000Z"
    );
    assert_eq!(ws["data"]["attributes"]["assessments-enabled"], true);
    let (st, cur) = h
        .call(
            "GET",
            &format!("/api/v2/workspaces/{WS}/current-assessment-result"),
            None,
        )
        .await;
    assert_eq!(
        (st, cur["data"]["id"].as_str()),
        (200, Some(RESULT)),
        "{cur}"
    );
    // Also as an include of workspace reads (the web view's list badge).
    let (st, list) = h
        .call(
            "GET",
            &format!("/api/v2/workspaces/{WS}?include=current_assessment_result"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(list["included"][0]["id"], RESULT, "{list}");
    assert_eq!(list["included"][0]["attributes"]["drifted"], true, "{list}");

    // The JSON output and the health page's detail need read-state.
    let (st, out) = h.call("GET", &format!("{base}/json-output"), None).await;
    assert_eq!(st, 200);
    assert_eq!(out, plan());
    let (st, health) = h.call("GET", &format!("{base}/health"), None).await;
    assert_eq!(st, 200, "{health}");
    assert_eq!(
        health["data"]["attributes"]["drift"],
        json!([{"address": "terraform_data.a", "action": "update", "attributes": ["input"]}])
    );
    assert_eq!(
        health["data"]["attributes"]["checks"][0]["problems"],
        json!(["upstream is not ok"])
    );
    let (st, _) = h.call("GET", &format!("{base}/json-schema"), None).await;
    assert_eq!(st, 404, "no schema was stored");

    let reader = h
        .token_with_role(Some(vec![rule(&["get", "list"], &["workspaces"])]))
        .await;
    let (st, doc) = h.call_as(&reader, "GET", &base, None).await;
    assert_eq!(
        st, 200,
        "a reader of the workspace reads its results: {doc}"
    );
    for part in ["json-output", "health", "log-output"] {
        let (st, doc) = h
            .call_as(&reader, "GET", &format!("{base}/{part}"), None)
            .await;
        assert_eq!(st, 403, "{part} needs read-state: {doc}");
    }
    let stranger = h.token_with_role(None).await;
    let (st, _) = h.call_as(&stranger, "GET", &base, None).await;
    assert_eq!(st, 404);
    let (st, _) = h
        .call_as(&stranger, "GET", &format!("{base}/json-output"), None)
        .await;
    assert_eq!(st, 404);
    let (st, _) = h
        .call(
            "GET",
            "/api/v2/assessment-results/asmtres-NoSuchResult0001",
            None,
        )
        .await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn an_assessment_is_no_run() {
    let h = assessed(Edition::Hosted).await;
    let (st, _) = h.call("GET", &format!("/api/v2/runs/{RUN}"), None).await;
    assert_eq!(st, 404);
    let (st, runs) = h
        .call("GET", &format!("/api/v2/workspaces/{WS}/runs"), None)
        .await;
    assert_eq!(st, 200, "{runs}");
    assert_eq!(runs["data"], json!([]));
    let (st, runs) = h.call("GET", "/api/v2/organizations/acme/runs", None).await;
    assert_eq!((st, runs["data"].clone()), (200, json!([])), "{runs}");
    let (_, ws) = h
        .call("GET", &format!("/api/v2/workspaces/{WS}"), None)
        .await;
    assert_eq!(
        ws["data"]["relationships"]["current-run"]["data"],
        Value::Null
    );
}

#[tokio::test]
async fn an_assessment_asked_for_by_whoever_may_change_the_workspace() {
    let h = assessed(Edition::Hosted).await;
    let path = format!("/api/v2/workspaces/{WS}/actions/assess");
    let reader = h
        .token_with_role(Some(vec![rule(&["get", "list"], &["workspaces"])]))
        .await;
    let (st, _) = h.call_as(&reader, "POST", &path, None).await;
    assert_eq!(st, 404, "TFE: unauthorized to manage assessments");
    let (st, doc) = h.call("POST", &path, None).await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["data"]["id"], WS);
    let asked = h.ws(WS);
    assert!(
        asked
            .annotations()
            .contains_key(ANNOTATION_ASSESSMENT_REQUESTED),
        "{:?}",
        asked.annotations()
    );
    // Not enabled: 409.
    h.workspace("ws-AsmtHandlers000002", "off", |_| {}).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/workspaces/ws-AsmtHandlers000002/actions/assess",
            None,
        )
        .await;
    assert_eq!(st, 409, "{doc}");
}

#[tokio::test]
async fn settings_in_tfe_shape_and_where_the_edition_refuses_them() {
    let h = harness(Edition::Hosted).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/organizations/acme/workspaces",
            Some(json!({"data": {"type": "workspaces",
                "attributes": {"name": "a", "assessments-enabled": true}}})),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["attributes"]["assessments-enabled"], true);
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    assert!(h.ws(&id).spec.assessments_enabled);
    let (st, doc) = h
        .call(
            "PATCH",
            &format!("/api/v2/workspaces/{id}"),
            Some(
                json!({"data": {"type": "workspaces", "attributes": {"execution-mode": "local"}}}),
            ),
        )
        .await;
    assert_eq!(st, 422, "an assessed workspace cannot run locally: {doc}");
    // A reader of the workspace may not change it (403, as every setting).
    let reader = h
        .token_with_role(Some(vec![rule(&["get", "list"], &["workspaces"])]))
        .await;
    let (st, _) = h
        .call_as(
            &reader,
            "PATCH",
            &format!("/api/v2/workspaces/{id}"),
            Some(json!({"data": {"type": "workspaces", "attributes": {"assessments-enabled": false}}})),
        )
        .await;
    assert_eq!(st, 403);
    // The organization's setting is kept and shown.
    let (st, org) = h
        .call(
            "PATCH",
            "/api/v2/organizations/acme",
            Some(json!({"data": {"type": "organizations", "attributes": {"assessments-enforced": true}}})),
        )
        .await;
    assert_eq!(st, 200, "{org}");
    assert_eq!(org["data"]["attributes"]["assessments-enforced"], true);

    let h = harness(Edition::SelfHosted).await;
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/organizations/acme/workspaces",
            Some(json!({"data": {"type": "workspaces",
                "attributes": {"name": "a", "assessments-enabled": true}}})),
        )
        .await;
    assert_eq!(st, 422, "refused, not dropped: {doc}");
    assert_eq!(
        doc["errors"][0]["source"]["pointer"],
        "/data/attributes/assessments-enabled"
    );
}
