//! State versions through the router, on the simulator: the CLI's create → upload →
//! read flow, the rules (lock holder, serial, lineage, MD5, state file, size), rights
//! (read-outputs, read-state, write-state) and what the workspace shows of its state.

use base64::Engine;
use serde_json::{Value, json};
use terrace_crds::state::md5_hex;

use crate::Edition;
use crate::testing::{Harness, harness, rule};

pub(super) const WS: &str = "ws-StateVersions0001";
pub(super) const WS_PATH: &str = "/api/v2/workspaces/ws-StateVersions0001";

pub(super) fn state_file(serial: i64, lineage: &str, resources: usize) -> Vec<u8> {
    let instances: Vec<Value> = (0..resources)
        .map(|i| json!({"index_key": i, "schema_version": 0, "attributes": {"id": format!("r{i}"), "input": "secret-input"}}))
        .collect();
    let mut resources_json = Vec::new();
    if resources > 0 {
        resources_json.push(json!({
            "mode": "managed", "type": "terraform_data", "name": "r",
            "provider": "provider[\"terraform.io/builtin/terraform\"]",
            "instances": instances,
        }));
    }
    serde_json::to_vec(&json!({
        "version": 4,
        "terraform_version": "1.11.4",
        "serial": serial,
        "lineage": lineage,
        "outputs": {
            "greeting": {"value": "hello", "type": "string"},
            "token": {"value": "t0ps3cret", "type": "string", "sensitive": true},
            "list": {"value": ["a", "b"], "type": ["tuple", ["string", "string"]]},
        },
        "resources": resources_json,
        "check_results": null,
    }))
    .unwrap_or_default()
}

pub(super) fn create_body(serial: i64, lineage: &str, bytes: &[u8]) -> Value {
    json!({"data": {"type": "state-versions", "attributes": {
        "serial": serial, "md5": md5_hex(bytes), "lineage": lineage, "force": false,
    }}})
}

pub(super) fn path_of(url: &Value) -> String {
    let url = url.as_str().unwrap_or_default();
    url.find("/api/v2/")
        .map(|i| url[i..].to_owned())
        .unwrap_or_default()
}

pub(super) async fn setup() -> Harness {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "app", |_| {}).await;
    h
}

pub(super) async fn lock(h: &Harness) {
    let (st, doc) = h
        .call(
            "POST",
            &format!("{WS_PATH}/actions/lock"),
            Some(json!({"reason": "apply"})),
        )
        .await;
    assert_eq!(st, 200, "{doc}");
}

pub(super) async fn put(h: &Harness, path: &str, body: Vec<u8>) -> (u16, Value) {
    let (st, _, bytes) = h
        .raw(
            "PUT",
            path,
            &[("content-type", "application/octet-stream")],
            body,
        )
        .await;
    (st, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Creates a version of `bytes` and uploads it the CLI's way; answers its ID.
pub(super) async fn write_state(h: &Harness, serial: i64, lineage: &str, bytes: &[u8]) -> String {
    let (st, doc) = h
        .call(
            "POST",
            &format!("{WS_PATH}/state-versions"),
            Some(create_body(serial, lineage, bytes)),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let upload = path_of(&doc["data"]["attributes"]["hosted-state-upload-url"]);
    let (st, body) = put(h, &upload, bytes.to_vec()).await;
    assert_eq!(st, 200, "{body}");
    doc["data"]["id"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_cli_flow_create_upload_read_download_outputs() {
    let h = setup().await;
    // No state yet: current is 404 (the CLI's "no state"), current outputs an empty list.
    assert_eq!(
        h.call("GET", &format!("{WS_PATH}/current-state-version"), None)
            .await
            .0,
        404
    );
    let (st, outs) = h
        .call(
            "GET",
            &format!("{WS_PATH}/current-state-version-outputs"),
            None,
        )
        .await;
    assert_eq!((st, outs["data"].clone()), (200, json!([])));

    lock(&h).await;
    let bytes = state_file(1, "lin-1", 2);
    let (st, doc) = h
        .call(
            "POST",
            &format!("{WS_PATH}/state-versions"),
            Some(create_body(1, "lin-1", &bytes)),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let a = &doc["data"]["attributes"];
    assert_eq!(a["status"], "pending");
    assert_eq!(doc["data"]["type"], "state-versions");
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("sv-"), "{id}");
    let upload = path_of(&a["hosted-state-upload-url"]);
    let json_upload = path_of(&a["hosted-json-state-upload-url"]);
    assert!(!upload.is_empty() && !json_upload.is_empty(), "{doc}");

    // Unlock waits for the pending state (503, the CLI's "still pending" retry).
    let (st, err) = h
        .call("POST", &format!("{WS_PATH}/actions/unlock"), None)
        .await;
    assert_eq!(st, 503, "{err}");
    assert!(
        err.to_string()
            .contains("latest state version is still pending"),
        "{err}"
    );

    // The JSON form, then the state; each URL works once.
    assert_eq!(
        put(&h, &json_upload, br#"{"format_version":"1.0"}"#.to_vec())
            .await
            .0,
        200
    );
    assert_eq!(put(&h, &upload, bytes.clone()).await.0, 200);
    let (st, again) = put(&h, &upload, bytes.clone()).await;
    assert_eq!(st, 404, "an upload URL works once: {again}");

    let (st, doc) = h
        .call("GET", &format!("/api/v2/state-versions/{id}"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
    let a = &doc["data"]["attributes"];
    assert_eq!(a["status"], "finalized");
    assert_eq!(a["serial"], 1);
    assert_eq!(a["size"], bytes.len());
    assert_eq!(a["resources-processed"], true);
    assert_eq!(a["terraform-version"], "1.11.4");
    assert_eq!(a["resources"][0]["type"], "terraform_data");
    assert_eq!(a["resources"][0]["count"], 2);
    assert_eq!(doc["data"]["relationships"]["workspace"]["data"]["id"], WS);
    assert_eq!(
        doc["data"]["relationships"]["outputs"]["data"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    assert!(
        !doc.to_string().contains("secret-input"),
        "no state content in documents"
    );
    // Current, download (byte for byte) and the JSON download.
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(cur["data"]["id"], id.as_str());
    let download = path_of(&a["hosted-state-download-url"]);
    let (st, _, got) = h
        .raw(
            "GET",
            &download,
            &[("authorization", &format!("Bearer {}", h.token))],
            vec![],
        )
        .await;
    assert_eq!((st, got.to_vec()), (200, bytes.clone()));
    let json_download = path_of(&a["hosted-json-state-download-url"]);
    let (st, _, got) = h
        .raw(
            "GET",
            &json_download,
            &[("authorization", &format!("Bearer {}", h.token))],
            vec![],
        )
        .await;
    assert_eq!((st, &got[..]), (200, &br#"{"format_version":"1.0"}"#[..]));
    // A download needs authentication.
    assert_eq!(h.raw("GET", &download, &[], vec![]).await.0, 401);

    // Outputs: values, types; the sensitive value only through its own endpoint.
    let (st, outs) = h
        .call(
            "GET",
            &format!("{WS_PATH}/current-state-version-outputs"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{outs}");
    let by_name = |name: &str| {
        outs["data"]
            .as_array()
            .and_then(|l| l.iter().find(|o| o["attributes"]["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(by_name("greeting")["attributes"]["value"], "hello");
    assert_eq!(by_name("greeting")["attributes"]["detailed-type"], "string");
    assert_eq!(by_name("list")["attributes"]["type"], "tuple");
    assert_eq!(by_name("list")["attributes"]["value"], json!(["a", "b"]));
    let secret = by_name("token");
    assert_eq!(secret["attributes"]["sensitive"], true);
    assert_eq!(secret["attributes"]["value"], Value::Null);
    assert!(!outs.to_string().contains("t0ps3cret"));
    let secret_path = format!(
        "/api/v2/state-version-outputs/{}",
        secret["id"].as_str().unwrap_or_default()
    );
    let (st, one) = h.call("GET", &secret_path, None).await;
    assert_eq!(
        (st, one["data"]["attributes"]["value"].clone()),
        (200, json!("t0ps3cret"))
    );
    // go-tfe's include options: outputs are included (sensitive values to read-state
    // callers, as the version's output list), the others accepted; anything else is 400.
    let (st, with) = h
        .call(
            "GET",
            &format!("/api/v2/state-versions/{id}?include=outputs,created_by"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{with}");
    assert_eq!(with["included"].as_array().map(Vec::len), Some(3), "{with}");
    assert!(with.to_string().contains("t0ps3cret"));
    let (st, _) = h
        .call(
            "GET",
            &format!("/api/v2/state-versions/{id}?include=nonsense"),
            None,
        )
        .await;
    assert_eq!(st, 400);
    let (_, per_version) = h
        .call("GET", &format!("/api/v2/state-versions/{id}/outputs"), None)
        .await;
    assert_eq!(per_version["data"].as_array().map(Vec::len), Some(3));
    assert!(
        per_version.to_string().contains("t0ps3cret"),
        "read-state sees it"
    );

    // The workspace shows its state.
    let (_, ws) = h
        .call(
            "GET",
            &format!("{WS_PATH}?include=outputs,current_state_version"),
            None,
        )
        .await;
    assert_eq!(ws["data"]["attributes"]["resource-count"], 2);
    assert_eq!(
        ws["data"]["relationships"]["current-state-version"]["data"]["id"],
        id.as_str()
    );
    assert_eq!(
        ws["data"]["relationships"]["outputs"]["data"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    let included = ws["included"].as_array().cloned().unwrap_or_default();
    assert!(
        included.iter().any(|d| d["type"] == "state-versions"),
        "{ws}"
    );
    assert_eq!(
        included
            .iter()
            .filter(|d| d["type"] == "workspace-outputs")
            .count(),
        3,
        "{ws}"
    );
    assert!(!ws.to_string().contains("t0ps3cret"));

    // Its resources, TFE's way.
    let (st, res) = h.call("GET", &format!("{WS_PATH}/resources"), None).await;
    assert_eq!(st, 200, "{res}");
    assert_eq!(res["meta"]["pagination"]["total-count"], 2);
    assert_eq!(res["data"][0]["type"], "resources");
    assert_eq!(
        res["data"][0]["attributes"]["address"],
        "terraform_data.r[0]"
    );
    assert_eq!(
        res["data"][0]["attributes"]["provider"],
        "builtin/terraform"
    );
    assert_eq!(res["data"][1]["attributes"]["name-index"], "1");
    let (_, sorted) = h
        .call(
            "GET",
            &format!("{WS_PATH}/resources?sort=nameIndex:desc&q=r%5B"),
            None,
        )
        .await;
    assert_eq!(
        sorted["data"][0]["attributes"]["address"],
        "terraform_data.r[1]"
    );
    assert_eq!(
        h.call("GET", &format!("{WS_PATH}/resources?sort=size"), None)
            .await
            .0,
        400
    );
    let (_, past) = h
        .call(
            "GET",
            &format!("{WS_PATH}/resources?page%5Bnumber%5D=999&page%5Bsize%5D=100"),
            None,
        )
        .await;
    assert_eq!(past["data"], json!([]));
    assert_eq!(past["meta"]["pagination"]["current-page"], 999);
    assert_eq!(past["meta"]["pagination"]["total-count"], 2);
    // The state is written: unlock works; safe delete refuses while it has resources.
    assert_eq!(
        h.call("POST", &format!("{WS_PATH}/actions/unlock"), None)
            .await
            .0,
        200
    );
    let (st, err) = h
        .call("POST", &format!("{WS_PATH}/actions/safe-delete"), None)
        .await;
    assert_eq!(st, 409, "{err}");
    assert!(err.to_string().contains("managing 2 resources"), "{err}");
    lock(&h).await;
    write_state(&h, 2, "lin-1", &state_file(2, "lin-1", 0)).await;
    assert_eq!(
        h.call("POST", &format!("{WS_PATH}/actions/unlock"), None)
            .await
            .0,
        200
    );
    // Listed newest first, with both filters.
    let (st, list) = h
        .call(
            "GET",
            "/api/v2/state-versions?filter%5Bworkspace%5D%5Bname%5D=app&filter%5Borganization%5D%5Bname%5D=acme",
            None,
        )
        .await;
    assert_eq!(st, 200, "{list}");
    assert_eq!(list["data"][0]["attributes"]["serial"], 2);
    assert_eq!(list["data"][1]["attributes"]["serial"], 1);
    assert_eq!(list["meta"]["pagination"]["total-count"], 2);
    assert_eq!(
        h.call(
            "GET",
            "/api/v2/state-versions?filter%5Bworkspace%5D%5Bname%5D=app",
            None
        )
        .await
        .0,
        400
    );
    assert_eq!(
        h.call("POST", &format!("{WS_PATH}/actions/safe-delete"), None)
            .await
            .0,
        204
    );
}

#[tokio::test]
async fn the_rules_of_writing_state() {
    let h = setup().await;
    let bytes = state_file(1, "lin-1", 1);
    let create = |body: Value| {
        let h = &h;
        async move {
            h.call("POST", &format!("{WS_PATH}/state-versions"), Some(body))
                .await
        }
    };
    // Not locked by the writer: 409 with the reason.
    let (st, err) = create(create_body(1, "lin-1", &bytes)).await;
    assert_eq!(st, 409, "{err}");
    assert!(err.to_string().contains("lock it before writing"), "{err}");
    lock(&h).await;
    // Missing attributes: 422 naming them.
    let (st, err) =
        create(json!({"data": {"type": "state-versions", "attributes": {"md5": "x"}}})).await;
    assert_eq!(st, 422, "{err}");
    assert_eq!(
        err["errors"][0]["source"]["pointer"],
        "/data/attributes/serial"
    );
    let (st, _) =
        create(json!({"data": {"type": "state-versions", "attributes": {"serial": 1}}})).await;
    assert_eq!(st, 422);
    // A wrong MD5 or a non-state is refused at upload (422) and the version discarded:
    // it does not hold the unlock back.
    for bad in [state_file(1, "lin-1", 2), b"not json".to_vec()] {
        let (st, doc) = create(create_body(1, "lin-1", &bytes)).await;
        assert_eq!(st, 201, "{doc}");
        let upload = path_of(&doc["data"]["attributes"]["hosted-state-upload-url"]);
        let (st, err) = put(&h, &upload, bad).await;
        assert_eq!(st, 422, "{err}");
        assert!(err["errors"][0]["detail"].is_string(), "{err}");
        let id = doc["data"]["id"].as_str().unwrap_or_default();
        let (_, v) = h
            .call("GET", &format!("/api/v2/state-versions/{id}"), None)
            .await;
        assert_eq!(v["data"]["attributes"]["status"], "discarded");
    }
    // The legacy inline form is finalized at once.
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let mut body = create_body(1, "lin-1", &bytes);
    body["data"]["attributes"]["state"] = json!(b64);
    let (st, doc) = create(body).await;
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["attributes"]["status"], "finalized");
    assert_eq!(
        doc["data"]["attributes"]["hosted-state-upload-url"],
        Value::Null
    );
    // An inline state that is not base64 / not the MD5 given: 422, nothing stored.
    let mut body = create_body(2, "lin-1", &bytes);
    body["data"]["attributes"]["state"] = json!("%%%");
    assert_eq!(create(body).await.0, 422);
    // Serial must grow, lineage stay, unless forced; the current serial again is only
    // accepted for the same state (a client's retry).
    let (st, err) = create(create_body(0, "lin-1", &bytes)).await;
    assert_eq!(st, 409, "{err}");
    assert!(err.to_string().contains("greater"), "{err}");
    let (st, err) = create(create_body(1, "lin-1", &state_file(1, "lin-1", 2))).await;
    assert_eq!(st, 409, "{err}");
    assert!(err.to_string().contains("MD5"), "{err}");
    let (st, retry) = create(create_body(1, "lin-1", &bytes)).await;
    assert_eq!(st, 201, "the same state again: {retry}");
    let (st, err) = create(create_body(2, "other", &bytes)).await;
    assert_eq!(st, 409, "{err}");
    assert!(err.to_string().contains("lineage"), "{err}");
    let mut forced = create_body(1, "other", &state_file(1, "other", 1));
    forced["data"]["attributes"]["force"] = json!(true);
    assert_eq!(create(forced).await.0, 201);
    // The unlock is not held back by the discarded versions; the forced one is pending.
    assert_eq!(
        h.call("POST", &format!("{WS_PATH}/actions/unlock"), None)
            .await
            .0,
        503
    );
    assert_eq!(
        h.call("POST", &format!("{WS_PATH}/actions/force-unlock"), None)
            .await
            .0,
        200
    );
    // Too large: 413 with the limit in words.
    lock(&h).await;
    let (st, doc) = create(create_body(2, "lin-1", &bytes)).await;
    assert_eq!(st, 201, "{doc}");
    let upload = path_of(&doc["data"]["attributes"]["hosted-state-upload-url"]);
    let big = vec![b' '; crate::settings::DEFAULT_MAX_STATE_BYTES + 10];
    let (st, err) = put(&h, &upload, big).await;
    assert_eq!(st, 413, "{err}");
    assert!(err.to_string().contains("limit"), "{err}");
    // An unknown or malformed upload token: 404.
    assert_eq!(
        put(&h, "/api/v2/uploads/v1/state/sv-Nope.abc", bytes.clone())
            .await
            .0,
        404
    );
    assert_eq!(
        put(&h, "/api/v2/uploads/v1/state/garbage", bytes.clone())
            .await
            .0,
        404
    );
}

#[tokio::test]
async fn rights_read_outputs_read_state_write_state() {
    let h = setup().await;
    lock(&h).await;
    write_state(&h, 1, "lin-1", &state_file(1, "lin-1", 1)).await;
    assert_eq!(
        h.call("POST", &format!("{WS_PATH}/actions/unlock"), None)
            .await
            .0,
        200
    );
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    let id = cur["data"]["id"].as_str().unwrap_or_default().to_owned();
    let (_, outs) = h
        .call("GET", &format!("/api/v2/state-versions/{id}/outputs"), None)
        .await;
    let secret = outs["data"]
        .as_array()
        .and_then(|l| {
            l.iter()
                .find(|o| o["attributes"]["sensitive"] == true)
                .cloned()
        })
        .unwrap_or(Value::Null);
    let secret_path = format!(
        "/api/v2/state-version-outputs/{}",
        secret["id"].as_str().unwrap_or_default()
    );

    // A reader (read-outputs): outputs, sensitive ones null; no download; no write.
    let reader = h
        .token_with_role(Some(vec![
            rule(&["get", "list"], &["workspaces"]),
            rule(&["read-outputs"], &["workspaces"]),
        ]))
        .await;
    let (_, listed) = h
        .call_as(
            &reader,
            "GET",
            &format!("/api/v2/state-versions/{id}/outputs"),
            None,
        )
        .await;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(3), "{listed}");
    assert!(!listed.to_string().contains("t0ps3cret"), "{listed}");
    let (st, one) = h.call_as(&reader, "GET", &secret_path, None).await;
    assert_eq!(
        (st, one["data"]["attributes"]["value"].clone()),
        (200, Value::Null)
    );
    assert_eq!(
        h.call_as(
            &reader,
            "GET",
            &format!("/api/v2/state-versions/{id}"),
            None
        )
        .await
        .0,
        200
    );
    let (st, err) = h
        .call_as(
            &reader,
            "GET",
            &format!("/api/v2/state-versions/{id}/download"),
            None,
        )
        .await;
    assert_eq!(st, 403, "{err}");
    let (_, ws) = h.call_as(&reader, "GET", WS_PATH, None).await;
    let perms = &ws["data"]["attributes"]["permissions"];
    assert_eq!(
        (
            perms["can-read-state-outputs"].clone(),
            perms["can-read-state-versions"].clone(),
            perms["can-create-state-versions"].clone()
        ),
        (json!(true), json!(false), json!(false))
    );
    // read-state: the sensitive value and the download.
    let state_reader = h
        .token_with_role(Some(vec![
            rule(&["get"], &["workspaces"]),
            rule(&["read-outputs", "read-state"], &["workspaces"]),
        ]))
        .await;
    let (_, one) = h.call_as(&state_reader, "GET", &secret_path, None).await;
    assert_eq!(one["data"]["attributes"]["value"], "t0ps3cret");
    assert_eq!(
        h.call_as(
            &state_reader,
            "GET",
            &format!("/api/v2/state-versions/{id}/download"),
            None
        )
        .await
        .0,
        200
    );
    // A locker without write-state cannot write state, even holding the lock.
    let locker = h
        .token_with_role(Some(vec![rule(&["get", "lock"], &["workspaces"])]))
        .await;
    assert_eq!(
        h.call_as(
            &locker,
            "POST",
            &format!("{WS_PATH}/actions/lock"),
            Some(json!({}))
        )
        .await
        .0,
        200
    );
    let bytes = state_file(2, "lin-1", 1);
    let (st, err) = h
        .call_as(
            &locker,
            "POST",
            &format!("{WS_PATH}/state-versions"),
            Some(create_body(2, "lin-1", &bytes)),
        )
        .await;
    assert_eq!(st, 403, "{err}");
    // No right to read the workspace: 404 on all of it.
    let nobody = h.token_with_role(None).await;
    for path in [
        format!("/api/v2/state-versions/{id}"),
        format!("/api/v2/state-versions/{id}/download"),
        format!("/api/v2/state-versions/{id}/outputs"),
        secret_path.clone(),
        format!("{WS_PATH}/current-state-version"),
        format!("{WS_PATH}/current-state-version-outputs"),
    ] {
        assert_eq!(
            h.call_as(&nobody, "GET", &path, None).await.0,
            404,
            "{path}"
        );
    }
}

/// TFE's backing data actions, as go-tfe's `ManageBackingData` test drives them: soft
/// delete hides the data (404), restore brings it back under the same URL, permanent
/// deletion cannot be undone ("transition not allowed"); never the current state; admins
/// only.
#[tokio::test]
async fn backing_data_soft_delete_restore_permanently_delete() {
    let h = setup().await;
    lock(&h).await;
    let bytes = state_file(1, "lin-1", 1);
    let first = write_state(&h, 1, "lin-1", &bytes).await;
    let second = write_state(&h, 2, "lin-1", &state_file(2, "lin-1", 1)).await;
    let act = |id: &str, a: &str| format!("/api/v2/state-versions/{id}/actions/{a}");
    let download = format!("/api/v2/state-versions/{first}/download");
    let status = |doc: &Value| doc["data"]["attributes"]["status"].clone();

    // The current state's data cannot go.
    let (st, doc) = h
        .call("POST", &act(&second, "soft_delete_backing_data"), None)
        .await;
    assert_eq!(st, 409, "{doc}");
    // An unknown action is 404.
    assert_eq!(h.call("POST", &act(&first, "shred"), None).await.0, 404);
    // A reader who may not delete the workspace: 403.
    let reader = h
        .token_with_role(Some(vec![
            rule(&["get", "list"], &["workspaces"]),
            rule(&["read-outputs", "read-state"], &["workspaces"]),
        ]))
        .await;
    let (st, _) = h
        .call_as(
            &reader,
            "POST",
            &act(&first, "soft_delete_backing_data"),
            None,
        )
        .await;
    assert_eq!(st, 403);

    // Soft delete: 204, the download 404, the status says so.
    let (st, doc) = h
        .call("POST", &act(&first, "soft_delete_backing_data"), None)
        .await;
    assert_eq!(st, 204, "{doc}");
    assert_eq!(h.call("GET", &download, None).await.0, 404);
    let (_, shown) = h
        .call("GET", &format!("/api/v2/state-versions/{first}"), None)
        .await;
    assert_eq!(status(&shown), "backing_data_soft_deleted");
    // Restore: the same URL serves the same bytes again.
    let (st, _) = h
        .call("POST", &act(&first, "restore_backing_data"), None)
        .await;
    assert_eq!(st, 204);
    let auth = format!("Bearer {}", h.token);
    let (st, _, body) = h
        .raw("GET", &download, &[("authorization", &auth)], Vec::new())
        .await;
    assert_eq!((st, body.to_vec()), (200, bytes.clone()));
    // Restoring data that is not soft-deleted is not a transition.
    let (st, doc) = h
        .call("POST", &act(&first, "restore_backing_data"), None)
        .await;
    assert_eq!(st, 409, "{doc}");

    // Soft delete then permanent deletion: gone for good.
    for a in [
        "soft_delete_backing_data",
        "permanently_delete_backing_data",
    ] {
        assert_eq!(h.call("POST", &act(&first, a), None).await.0, 204, "{a}");
    }
    let (st, doc) = h
        .call("POST", &act(&first, "restore_backing_data"), None)
        .await;
    assert_eq!(st, 409);
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("transition not allowed"),
        "{doc}"
    );
    assert_eq!(h.call("GET", &download, None).await.0, 404);
    let (_, shown) = h
        .call("GET", &format!("/api/v2/state-versions/{first}"), None)
        .await;
    assert_eq!(status(&shown), "backing_data_permanently_deleted");
    // The current state is untouched.
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(cur["data"]["id"], second.as_str());
}
