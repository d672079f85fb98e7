//! State never goes backwards or is lost (issue 23): the lock and the succession are
//! checked again when the bytes arrive, under the workspace's resourceVersion, so a
//! writer who lost the lock, an older upload arriving last or concurrent uploads cannot
//! move the current version back or finalize one serial twice; refused uploads discard
//! their version and never hold the unlock back.

use futures::future::join_all;
use serde_json::{Value, json};
use terrace_crds::state::md5_hex;

use super::tests::{WS_PATH, create_body, lock, path_of, put, setup, state_file, write_state};
use crate::testing::{Harness, rule};

/// Creates a version (201 expected) and answers its ID and its state upload path.
async fn create_as(h: &Harness, token: &str, serial: i64, bytes: &[u8]) -> (String, String) {
    let (st, doc) = h
        .call_as(
            token,
            "POST",
            &format!("{WS_PATH}/state-versions"),
            Some(create_body(serial, "lin", bytes)),
        )
        .await;
    assert_eq!(st, 201, "create of serial {serial}: {doc}");
    (
        doc["data"]["id"].as_str().unwrap_or_default().to_owned(),
        path_of(&doc["data"]["attributes"]["hosted-state-upload-url"]),
    )
}

async fn version(h: &Harness, id: &str) -> Value {
    let (st, doc) = h
        .call("GET", &format!("/api/v2/state-versions/{id}"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
    doc["data"].clone()
}

async fn current_serial(h: &Harness) -> i64 {
    let (st, doc) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
    doc["data"]["attributes"]["serial"].as_i64().unwrap_or(-1)
}

/// The serials of the workspace's finalized versions.
async fn finalized_serials(h: &Harness) -> Vec<i64> {
    let (st, doc) = h
        .call(
            "GET",
            "/api/v2/state-versions?filter[workspace][name]=app&filter[organization][name]=acme&page[size]=100",
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let mut serials: Vec<i64> = doc["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["attributes"]["status"] == "finalized")
        .filter_map(|v| v["attributes"]["serial"].as_i64())
        .collect();
    serials.sort_unstable();
    serials
}

/// A writer whose lock was force-unlocked and taken by someone else cannot finalize the
/// version it created under its lock: 409 in TFE's words, the version discarded, the new
/// holder's state stays current and serial 2 is finalized once.
#[tokio::test]
async fn an_upload_by_a_writer_who_lost_the_lock_is_refused() {
    let h = setup().await;
    lock(&h).await;
    let a_bytes = state_file(2, "lin", 1);
    let (a_id, a_upload) = create_as(&h, &h.token, 2, &a_bytes).await;
    let bob = h
        .token_with_role(Some(vec![rule(
            &[
                "get",
                "list",
                "lock",
                "force-unlock",
                "write-state",
                "read-state",
                "read-outputs",
            ],
            &["workspaces"],
        )]))
        .await;
    let (st, doc) = h
        .call_as(
            &bob,
            "POST",
            &format!("{WS_PATH}/actions/force-unlock"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let (st, doc) = h
        .call_as(
            &bob,
            "POST",
            &format!("{WS_PATH}/actions/lock"),
            Some(json!({})),
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let b_bytes = state_file(2, "lin", 3);
    let (b_id, b_upload) = create_as(&h, &bob, 2, &b_bytes).await;
    let (st, body) = put(&h, &b_upload, b_bytes).await;
    assert_eq!(st, 200, "{body}");
    // A's URL still exists, but its bytes can no longer become current.
    let (st, body) = put(&h, &a_upload, a_bytes).await;
    assert_eq!(st, 409, "{body}");
    let detail = body["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("is locked by"), "{detail}");
    assert_eq!(
        version(&h, &a_id).await["attributes"]["status"],
        "discarded"
    );
    assert_eq!(
        version(&h, &b_id).await["attributes"]["status"],
        "finalized"
    );
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(cur["data"]["id"], b_id.as_str());
    assert_eq!(finalized_serials(&h).await, vec![2]);
}

/// Create serial 2, create serial 3, upload 3, upload 2: the late upload of 2 is refused
/// and the current version stays at 3.
#[tokio::test]
async fn an_older_upload_arriving_last_does_not_roll_the_state_back() {
    let h = setup().await;
    lock(&h).await;
    let two = state_file(2, "lin", 1);
    let three = state_file(3, "lin", 2);
    let (two_id, two_up) = create_as(&h, &h.token, 2, &two).await;
    let (_, three_up) = create_as(&h, &h.token, 3, &three).await;
    let (st, body) = put(&h, &three_up, three).await;
    assert_eq!(st, 200, "{body}");
    let (st, body) = put(&h, &two_up, two).await;
    assert_eq!(st, 409, "{body}");
    let detail = body["errors"][0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("serial 2 must be greater"), "{detail}");
    assert_eq!(current_serial(&h).await, 3);
    assert_eq!(
        version(&h, &two_id).await["attributes"]["status"],
        "discarded"
    );
    // The superseded version does not hold the unlock back.
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/actions/unlock"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
}

/// 20 concurrent create+upload pairs with serials 2–21: whatever the order the bytes
/// arrive in, the current version ends at 21, finalized serials are distinct and each
/// became current after every smaller one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uploads_never_move_the_current_serial_down() {
    let h = setup().await;
    lock(&h).await;
    let pairs = (2..=21).map(|serial| {
        let h = &h;
        async move {
            let bytes = state_file(serial, "lin", 1);
            let (st, doc) = h
                .call(
                    "POST",
                    &format!("{WS_PATH}/state-versions"),
                    Some(create_body(serial, "lin", &bytes)),
                )
                .await;
            if st != 201 {
                return (serial, st);
            }
            let upload = path_of(&doc["data"]["attributes"]["hosted-state-upload-url"]);
            (serial, put(h, &upload, bytes).await.0)
        }
    });
    let answers = join_all(pairs).await;
    for (serial, st) in &answers {
        assert!([200, 201, 409].contains(st), "serial {serial}: {st}");
    }
    assert_eq!(current_serial(&h).await, 21, "{answers:?}");
    let finalized = finalized_serials(&h).await;
    let mut distinct = finalized.clone();
    distinct.dedup();
    assert_eq!(finalized, distinct, "one finalized version per serial");
    // Each finalized version became current after the smaller ones (sequence order is
    // serial order).
    let idx = h.state.index.read();
    let mut by_seq: Vec<(i64, i64)> = idx
        .state_versions_of("acme", "app")
        .filter_map(|v| {
            let s = v.status.as_ref()?;
            (s.status.as_deref() == Some("finalized")).then_some((s.sequence?, v.spec.serial))
        })
        .collect();
    by_seq.sort_unstable();
    let serials: Vec<i64> = by_seq.iter().map(|(_, s)| *s).collect();
    assert!(serials.windows(2).all(|w| w[0] < w[1]), "{by_seq:?}");
}

/// 20 concurrent versions of the same serial with different contents: exactly one is
/// finalized, and it is the current one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_uploads_of_one_serial_finalize_exactly_one() {
    let h = setup().await;
    lock(&h).await;
    let pairs = (0..20).map(|i| {
        let h = &h;
        async move {
            let bytes = state_file(2, "lin", i + 1);
            let (st, doc) = h
                .call(
                    "POST",
                    &format!("{WS_PATH}/state-versions"),
                    Some(create_body(2, "lin", &bytes)),
                )
                .await;
            if st != 201 {
                return (st, None);
            }
            let id = doc["data"]["id"].as_str().map(str::to_owned);
            let upload = path_of(&doc["data"]["attributes"]["hosted-state-upload-url"]);
            (put(h, &upload, bytes).await.0, id)
        }
    });
    let answers = join_all(pairs).await;
    let accepted: Vec<_> = answers.iter().filter(|(st, _)| *st == 200).collect();
    assert_eq!(accepted.len(), 1, "{answers:?}");
    assert_eq!(finalized_serials(&h).await, vec![2]);
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(
        cur["data"]["id"].as_str(),
        accepted[0].1.as_deref(),
        "{answers:?}"
    );
}

/// A client that repeats the current state (same serial and MD5: a retry, or go-tfe's
/// create with the state inline) is finalized and becomes current, as in HCP Terraform:
/// it gets a download URL, and the version it repeats is no longer current, so its
/// backing data may be soft deleted, restored and deleted for good (issue 42 §1).
#[tokio::test]
async fn a_repeated_upload_of_the_current_state_becomes_current() {
    let h = setup().await;
    lock(&h).await;
    let bytes = state_file(2, "lin", 1);
    let first = write_state(&h, 2, "lin", &bytes).await;
    let again = write_state(&h, 2, "lin", &bytes).await;
    let v = version(&h, &again).await;
    assert_eq!(v["attributes"]["status"], "finalized", "{v}");
    assert!(
        v["attributes"]["hosted-state-download-url"].is_string(),
        "{v}"
    );
    let (st, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(
        (st, cur["data"]["id"].as_str()),
        (200, Some(again.as_str()))
    );
    assert_eq!(finalized_serials(&h).await, vec![2, 2]);
    // The inline form (go-tfe's `State`) too.
    let mut inline = super::tests::create_body(2, "lin", &bytes);
    inline["data"]["attributes"]["state"] = json!(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        &bytes
    ));
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/state-versions"), Some(inline))
        .await;
    assert_eq!(st, 201, "{doc}");
    assert_eq!(doc["data"]["attributes"]["status"], "finalized", "{doc}");
    let third = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let (_, cur) = h
        .call("GET", &format!("{WS_PATH}/current-state-version"), None)
        .await;
    assert_eq!(cur["data"]["id"].as_str(), Some(third.as_str()));
    // Other bytes at the current serial are still refused, and the serial never goes back.
    let other = state_file(2, "lin", 3);
    let (st, doc) = h
        .call(
            "POST",
            &format!("{WS_PATH}/state-versions"),
            Some(super::tests::create_body(2, "lin", &other)),
        )
        .await;
    assert_eq!(st, 409, "{doc}");
    // The repeated version is not current: its data may go.
    for action in [
        "soft_delete_backing_data",
        "restore_backing_data",
        "permanently_delete_backing_data",
    ] {
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/state-versions/{first}/actions/{action}"),
                None,
            )
            .await;
        assert_eq!(st, 204, "{action}: {doc}");
    }
    assert_eq!(current_serial(&h).await, 2);
    // A pending repeat may still become current: it holds the unlock back.
    let _ = create_as(&h, &h.token, 2, &bytes).await;
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/actions/unlock"), None)
        .await;
    assert_eq!(st, 503, "{doc}");
}

/// Bytes over --max-state-bytes are refused with 413 and discard their version, so the
/// unlock is not held back by a version that can never finalize.
#[tokio::test]
async fn a_state_over_the_limit_discards_its_version_and_unlock_works() {
    let h = setup().await;
    lock(&h).await;
    let limit = h.state.settings.max_state_bytes;
    let big = vec![b' '; limit + 1];
    let (id, upload) = create_as(&h, &h.token, 1, &big).await;
    let (st, body) = put(&h, &upload, big).await;
    assert_eq!(st, 413, "{body}");
    let v = version(&h, &id).await;
    assert_eq!(v["attributes"]["status"], "discarded", "{v}");
    // The URL was used up.
    let (st, _) = put(&h, &upload, b"{}".to_vec()).await;
    assert_eq!(st, 404);
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/actions/unlock"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
}

/// md5, serial and lineage are checked at create (422 with the attribute), so junk never
/// makes a version that blocks the unlock.
#[tokio::test]
async fn junk_create_attributes_are_422() {
    let h = setup().await;
    lock(&h).await;
    let md5 = md5_hex(b"x");
    let long = "l".repeat(200);
    for (attrs, attr) in [
        (json!({"serial": 1, "md5": "zz", "lineage": "lin"}), "md5"),
        (
            json!({"serial": 1, "md5": "a".repeat(100_000), "lineage": "lin"}),
            "md5",
        ),
        (
            json!({"serial": -1, "md5": md5, "lineage": "lin"}),
            "serial",
        ),
        (json!({"serial": 1, "md5": md5, "lineage": long}), "lineage"),
    ] {
        let (st, doc) = h
            .call(
                "POST",
                &format!("{WS_PATH}/state-versions"),
                Some(json!({"data": {"type": "state-versions", "attributes": attrs}})),
            )
            .await;
        assert_eq!(st, 422, "{attr}: {doc}");
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            format!("/data/attributes/{attr}"),
            "{doc}"
        );
    }
    let (st, doc) = h
        .call("POST", &format!("{WS_PATH}/actions/unlock"), None)
        .await;
    assert_eq!(st, 200, "{doc}");
}
