use super::*;
use crate::Edition;
use crate::testing::{harness, rule};
use k8s_openapi::api::core::v1::Secret;

const WS: &str = "ws-NotifyUser0000001";

fn body(attrs: Value) -> Option<Value> {
    Some(json!({"data": {"type": "notification-configurations", "attributes": attrs}}))
}

fn generic(name: &str) -> Value {
    json!({
        "destination-type": "generic",
        "enabled": false,
        "name": name,
        "token": "s3cret-token",
        "url": "https://hooks.example.com/tfe",
        "triggers": ["run:created", "run:completed"],
    })
}

/// go-tfe's notification configuration flow: create (a token kept in a Secret the
/// configuration owns, never shown), list (items equal to what create answered, paged),
/// read, update, the validation errors, a reader's rights, delete.
#[tokio::test]
async fn notification_configurations_through_the_api() {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "app", |_| {}).await;
    let coll = format!("/api/v2/workspaces/{WS}/notification-configurations");
    let (st, created) = h.call("POST", &coll, body(generic("ops"))).await;
    assert_eq!(st, 201, "{created}");
    let id = created["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("nc-"), "{id}");
    let a = &created["data"]["attributes"];
    assert_eq!(a["token"], Value::Null, "write-only");
    assert!(!created.to_string().contains("s3cret-token"));
    assert_eq!(a["triggers"], json!(["run:created", "run:completed"]));
    assert_eq!(a["delivery-responses"], json!([]));
    assert_eq!(
        created["data"]["relationships"]["subscribable"]["data"],
        json!({"id": WS, "type": "workspaces"})
    );
    // The token lives in a Secret the configuration owns.
    let n = h
        .state
        .index
        .read()
        .notification_configurations()
        .get(&id)
        .cloned()
        .expect("indexed");
    let owner = &n.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(owner.kind, "Workspace", "deleted with its workspace");
    let secret_ref = n.spec.token_from.clone().expect("a token reference");
    let secrets: kube::Api<Secret> = kube::Api::namespaced(h.admin.clone(), "acme");
    let secret = secrets
        .get(&secret_ref.name)
        .await
        .expect("the token's Secret");
    assert_eq!(
        secret.data.unwrap()[&secret_ref.key].0,
        b"s3cret-token",
        "the token as given"
    );
    assert_eq!(
        secret.metadata.owner_references.unwrap()[0].uid,
        n.metadata.uid.clone().unwrap()
    );

    let (st, second) = h.call("POST", &coll, body(generic("dev"))).await;
    assert_eq!(st, 201, "{second}");
    let (st, listed) = h.call("GET", &coll, None).await;
    assert_eq!(st, 200);
    assert_eq!(
        listed["data"][0], created["data"],
        "list items are what create answered"
    );
    // As TFE answers it: no meta.pagination unless a page is asked for (go-tfe reads a
    // zero page; issue 42 §14).
    assert!(listed.get("meta").is_none(), "{listed}");
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2));
    let (_, page) = h
        .call("GET", &format!("{coll}?page%5Bsize%5D=1"), None)
        .await;
    assert_eq!(page["meta"]["pagination"]["total-count"], 2, "{page}");
    assert_eq!(page["data"].as_array().map(Vec::len), Some(1));
    let (_, page) = h
        .call("GET", &format!("{coll}?page%5Bnumber%5D=999"), None)
        .await;
    assert_eq!(page["data"], json!([]));
    assert_eq!(page["meta"]["pagination"]["current-page"], 999);
    let one = format!("/api/v2/notification-configurations/{id}");
    let (st, shown) = h.call("GET", &one, None).await;
    assert_eq!((st, &shown["data"]), (200, &created["data"]));

    // Validation, each with a pointer.
    for (attrs, pointer) in [
        (
            json!({"destination-type": "generic", "url": "https://x.example"}),
            "/data/attributes/name",
        ),
        (
            json!({"name": "n", "destination-type": "generic"}),
            "/data/attributes/url",
        ),
        (
            json!({"name": "n", "destination-type": "slack"}),
            "/data/attributes/url",
        ),
        (
            json!({"name": "n", "destination-type": "microsoft-teams"}),
            "/data/attributes/url",
        ),
        (
            json!({"name": "n", "url": "https://x.example"}),
            "/data/attributes/destination-type",
        ),
        (
            json!({"name": "n", "destination-type": "pigeon", "url": "https://x.example"}),
            "/data/attributes/destination-type",
        ),
        (
            json!({"name": "n", "destination-type": "email", "email-addresses": ["a@b.c"]}),
            "/data/attributes/destination-type",
        ),
        (
            json!({"name": "n", "destination-type": "generic", "url": "ftp://x.example"}),
            "/data/attributes/url",
        ),
        (
            json!({"name": "n", "destination-type": "generic", "url": "https://x.example",
                "triggers": ["the beacons of gondor are lit"]}),
            "/data/attributes/triggers/0",
        ),
    ] {
        let (st, doc) = h.call("POST", &coll, body(attrs.clone())).await;
        assert_eq!(st, 422, "{attrs} → {doc}");
        let pointers: Vec<&str> = doc["errors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["source"]["pointer"].as_str())
            .collect();
        assert!(pointers.contains(&pointer), "{attrs}: {pointers:?}");
    }
    let (st, _) = h
        .call(
            "POST",
            "/api/v2/workspaces/ws-nope/notification-configurations",
            body(generic("x")),
        )
        .await;
    assert_eq!(st, 404);

    // Update: what is given changes, the rest stays; a bad trigger is 422 and changes nothing.
    let (st, doc) = h
        .call(
            "PATCH",
            &one,
            Some(json!({"data": {"type": "notification-configurations",
                "attributes": {"enabled": true, "name": "newName"}}})),
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["data"]["attributes"]["enabled"], true);
    assert_eq!(doc["data"]["attributes"]["name"], "newName");
    assert_eq!(
        doc["data"]["attributes"]["url"],
        "https://hooks.example.com/tfe"
    );
    let (st, _) = h
        .call(
            "PATCH",
            &one,
            Some(json!({"data": {"type": "notification-configurations",
                "attributes": {"triggers": ["fly you fools!"]}}})),
        )
        .await;
    assert_eq!(st, 422);
    let (st, doc) = h
        .call(
            "PATCH",
            &one,
            Some(json!({"data": {"type": "notification-configurations",
                "attributes": {"token": "", "triggers": []}}})),
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["data"]["attributes"]["triggers"], json!([]));
    let n = h
        .state
        .index
        .read()
        .notification_configurations()
        .get(&id)
        .cloned()
        .unwrap();
    assert_eq!(n.spec.token_from, None, "an empty token removes it");
    assert!(n.spec.triggers.is_empty());

    // A reader reads, and may not change.
    let reader = h
        .token_with_role(Some(vec![rule(
            &["get", "list"],
            &["workspaces", "notificationconfigurations"],
        )]))
        .await;
    let (st, doc) = h.call_as(&reader, "GET", &coll, None).await;
    assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(2)));
    let (st, _) = h.call_as(&reader, "DELETE", &one, None).await;
    assert_eq!(st, 403);
    let (st, _) = h.call_as(&reader, "POST", &coll, body(generic("z"))).await;
    assert_eq!(st, 403);

    let (st, _) = h.call("DELETE", &one, None).await;
    assert_eq!(st, 204);
    let (st, _) = h.call("GET", &one, None).await;
    assert_eq!(st, 404);
    let (st, _) = h.call("DELETE", &one, None).await;
    assert_eq!(st, 404);
}

/// Verify asks the operator (an annotation) and answers once the status shows the
/// operator's delivery (with no operator answering it is 503, not a silent 200).
#[tokio::test]
async fn verify_waits_for_the_operators_delivery() {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "app", |_| {}).await;
    let coll = format!("/api/v2/workspaces/{WS}/notification-configurations");
    let (_, created) = h.call("POST", &coll, body(generic("ops"))).await;
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let object = h
        .state
        .index
        .read()
        .notification_configurations()
        .get(&id)
        .unwrap()
        .name_any();
    // A stand-in for the operator: answers each request with a delivery response.
    let api: kube::Api<NotificationConfiguration> = kube::Api::namespaced(h.admin.clone(), "acme");
    let operator = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let Ok(n) = api.get(&object).await else {
                continue;
            };
            let asked = n.annotations().get(ANNOTATION_VERIFY_REQUESTED).cloned();
            let answered = n.status.as_ref().and_then(|s| s.verified.clone());
            if let Some(asked) = asked.filter(|a| Some(a) != answered.as_ref()) {
                let status = json!({"status": {"verified": asked, "deliveryResponses": [{
                    "url": n.spec.url, "code": "200", "body": "ok", "sentAt": "2026-11-28T00:00:00.000Z",
                    "successful": true, "notification": "verification", "attempt": 1,
                    "headers": {"content-type": ["text/plain"]}}]}});
                api.patch_status(
                    &object,
                    &Default::default(),
                    &kube::api::Patch::Merge(status),
                )
                .await
                .unwrap();
            }
        }
    });
    let verify = format!("/api/v2/notification-configurations/{id}/actions/verify");
    let (st, doc) = h.call("POST", &verify, None).await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(
        doc["data"]["attributes"]["delivery-responses"][0],
        json!({"url": "https://hooks.example.com/tfe", "body": "ok", "code": "200",
               "headers": {"content-type": ["text/plain"]},
               "sent-at": "2026-11-28T00:00:00.000Z", "successful": "true"})
    );
    operator.abort();
}

/// Project notification configurations (`/projects/:id/notification-configurations`,
/// issue 42 §15): created, listed (as create answered them), read and updated like a
/// workspace's, subscribed to the project, owned by it; the project's list holds only
/// its own, the workspace's only the workspace's.
#[tokio::test]
async fn project_notification_configurations() {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "app", |_| {}).await;
    let prj = crate::testing::DEFAULT_PROJECT;
    let coll = format!("/api/v2/projects/{prj}/notification-configurations");
    let (st, created) = h.call("POST", &coll, body(generic("prj-ops"))).await;
    assert_eq!(st, 201, "{created}");
    assert_eq!(
        created["data"]["relationships"]["subscribable"]["data"],
        json!({"id": prj, "type": "projects"})
    );
    let id = created["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let n = h
        .state
        .index
        .read()
        .notification_configurations()
        .get(&id)
        .cloned()
        .expect("indexed");
    assert_eq!(n.spec.project.as_deref(), Some(prj));
    assert_eq!(n.spec.workspace, "");
    let owner = &n.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(owner.kind, "Project", "deleted with its project");
    let (st, listed) = h.call("GET", &coll, None).await;
    assert_eq!(
        (st, listed["data"][0].clone()),
        (200, created["data"].clone())
    );
    let ws_coll = format!("/api/v2/workspaces/{WS}/notification-configurations");
    let (_, ws_listed) = h.call("GET", &ws_coll, None).await;
    assert_eq!(ws_listed["data"], json!([]), "{ws_listed}");
    let one = format!("/api/v2/notification-configurations/{id}");
    let (st, shown) = h.call("GET", &one, None).await;
    assert_eq!((st, &shown["data"]), (200, &created["data"]));
    let (st, updated) = h
        .call(
            "PATCH",
            &one,
            body(json!({"name": "renamed", "enabled": true})),
        )
        .await;
    assert_eq!(st, 200, "{updated}");
    assert_eq!(updated["data"]["attributes"]["name"], "renamed");
    assert_eq!(
        updated["data"]["relationships"]["subscribable"]["data"]["type"],
        "projects"
    );
    let (st, _) = h
        .call(
            "GET",
            "/api/v2/projects/prj-nope/notification-configurations",
            None,
        )
        .await;
    assert_eq!(st, 404);
    let (st, b) = h.call("POST", &coll, body(json!({"name": "x"}))).await;
    assert_eq!(st, 422, "{b}");
    let (st, _) = h.call("DELETE", &one, None).await;
    assert_eq!(st, 204);
}
