//! Tests of `workspace_vars`.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::{WorkspaceVariable, WorkspaceVariableSpec};

use super::{VARIABLE_SECRET_KEY, secret_name};
use crate::Edition;
use crate::testing::*;

const WS: &str = "ws-VarsWorkspace0001";

async fn with_workspace() -> Harness {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "prod", |_| {}).await;
    h
}

fn vars() -> String {
    format!("/api/v2/workspaces/{WS}/vars")
}

fn body(attrs: Value) -> Option<Value> {
    Some(json!({"data": {"type": "vars", "attributes": attrs}}))
}

fn pointers(doc: &Value) -> Vec<String> {
    let mut p: Vec<String> = doc["errors"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|x| x["source"]["pointer"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    p.sort();
    p
}

fn indexed(h: &Harness, id: &str) -> WorkspaceVariable {
    h.state
        .index
        .read()
        .workspace_variables()
        .get(id)
        .map(|v| (**v).clone())
        .unwrap_or_else(|| panic!("{id} not indexed"))
}

/// Create (TFE's shape: configurable, version-id, created-at), show, update
/// (version-id changes), list, delete; the object is owned by its workspace.
#[tokio::test]
async fn crud() {
    let h = with_workspace().await;
    let (st, doc) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": "region", "value": "eu-west-1", "description": "where", "category": "terraform"})),
            )
            .await;
    assert_eq!(st, 201, "{doc}");
    let d = &doc["data"];
    let id = d["id"].as_str().unwrap_or_default().to_owned();
    assert!(id.starts_with("var-"), "{id}");
    assert_eq!(d["type"], "vars");
    let a = &d["attributes"];
    assert_eq!(a["key"], "region");
    assert_eq!(a["value"], "eu-west-1");
    assert_eq!(a["description"], "where");
    assert_eq!(a["category"], "terraform");
    assert_eq!(
        (a["hcl"].as_bool(), a["sensitive"].as_bool()),
        (Some(false), Some(false))
    );
    assert!(a["created-at"].is_string(), "{a}");
    let v1 = a["version-id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(v1.len(), 32);
    assert_eq!(
        d["relationships"]["configurable"]["data"],
        json!({"id": WS, "type": "workspaces"})
    );
    assert_eq!(
        d["relationships"]["configurable"]["links"]["related"],
        format!("/api/v2/workspaces/{WS}")
    );
    let obj = indexed(&h, &id);
    assert_eq!(obj.spec.workspace, "ws-varsworkspace0001");
    let owners = obj.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(
        (
            owners.len(),
            owners[0].kind.as_str(),
            owners[0].name.as_str()
        ),
        (1, "Workspace", "ws-varsworkspace0001")
    );
    let one = format!("{}/{id}", vars());
    let (st, doc) = h.call("GET", &one, None).await;
    assert_eq!(
        (st, doc["data"]["attributes"]["version-id"].as_str()),
        (200, Some(v1.as_str()))
    );
    // Update: only what is given changes; version-id follows.
    let (st, doc) = h
        .call(
            "PATCH",
            &one,
            body(json!({"value": "[\"a\"]", "hcl": true})),
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    let a = &doc["data"]["attributes"];
    assert_eq!(
        (a["value"].as_str(), a["hcl"].as_bool()),
        (Some("[\"a\"]"), Some(true))
    );
    assert_eq!(a["description"], "where");
    assert_ne!(a["version-id"].as_str(), Some(v1.as_str()));
    // An update that changes nothing is a new version all the same (TFE's).
    let v2 = a["version-id"].clone();
    let (st, doc) = h.call("PATCH", &one, body(json!({"key": "region"}))).await;
    assert_eq!(st, 200, "{doc}");
    assert_ne!(&doc["data"]["attributes"]["version-id"], &v2);
    let (st, doc) = h
        .call(
            "POST",
            &vars(),
            body(json!({"key": "TF_LOG", "value": "INFO", "category": "env"})),
        )
        .await;
    assert_eq!(st, 201, "{doc}");
    let (st, doc) = h.call("GET", &vars(), None).await;
    assert_eq!(st, 200);
    let keys: Vec<&str> = doc["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v["attributes"]["key"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(keys, ["TF_LOG", "region"], "env first, then terraform");
    assert_eq!(doc["meta"]["pagination"]["total-count"], 2);
    // Delete.
    assert_eq!(h.call("DELETE", &one, None).await.0, 204);
    assert_eq!(h.call("GET", &one, None).await.0, 404);
    assert_eq!(h.call("DELETE", &one, None).await.0, 404);
    assert_eq!(h.call("PATCH", &one, body(json!({}))).await.0, 404);
    let (_, doc) = h.call("GET", &vars(), None).await;
    assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));
}

/// A sensitive value goes into a Secret owned by the variable and is never answered
/// (`value: null`) nor kept in the object; a new value changes the version; it cannot
/// become non-sensitive; a plain variable made sensitive moves its value.
#[tokio::test]
async fn sensitive_values_are_never_returned() {
    let h = with_workspace().await;
    let (st, doc) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": "AWS_SECRET_ACCESS_KEY", "value": "hunter2", "category": "env", "sensitive": true})),
            )
            .await;
    assert_eq!(st, 201, "{doc}");
    assert!(!doc.to_string().contains("hunter2"), "{doc}");
    assert_eq!(doc["data"]["attributes"]["value"], Value::Null);
    assert_eq!(doc["data"]["attributes"]["sensitive"], true);
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let v1 = doc["data"]["attributes"]["version-id"].clone();
    let obj = indexed(&h, &id);
    assert_eq!(obj.spec.value, "");
    let from = obj.spec.value_from.clone().unwrap_or_default();
    assert_eq!(
        (from.name.clone(), from.key.as_str()),
        (secret_name(&obj.name_any()), VARIABLE_SECRET_KEY)
    );
    let secrets: Api<Secret> = Api::namespaced(h.admin.clone(), ORG);
    let secret_value = |s: Secret| {
        s.data
            .and_then(|d| d.get(VARIABLE_SECRET_KEY).cloned())
            .map(|b| b.0)
    };
    let s = secrets
        .get(&from.name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].name.clone()),
        Some(obj.name_any())
    );
    assert_eq!(secret_value(s), Some(b"hunter2".to_vec()));
    let one = format!("{}/{id}", vars());
    for (m, u) in [("GET", one.as_str()), ("GET", vars().as_str())] {
        let (st, doc) = h.call(m, u, None).await;
        assert_eq!(st, 200);
        assert!(!doc.to_string().contains("hunter2"), "{doc}");
    }
    // A new value: into the Secret, new version, still not shown.
    let (st, doc) = h
        .call("PATCH", &one, body(json!({"value": "correct-horse"})))
        .await;
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["data"]["attributes"]["value"], Value::Null);
    assert_ne!(doc["data"]["attributes"]["version-id"], v1);
    let s = secrets
        .get(&from.name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(secret_value(s), Some(b"correct-horse".to_vec()));
    let annotations = indexed(&h, &id).annotations().clone();
    assert!(!format!("{annotations:?}").contains("correct-horse"));
    // No way back.
    let (st, doc) = h
        .call("PATCH", &one, body(json!({"sensitive": false})))
        .await;
    assert_eq!(st, 422);
    assert_eq!(pointers(&doc), ["/data/attributes/sensitive"]);
    // A plain variable made sensitive: its value moves into the Secret.
    let (_, doc) = h
        .call(
            "POST",
            &vars(),
            body(json!({"key": "token", "value": "plain-then-secret", "category": "terraform"})),
        )
        .await;
    let id2 = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let (st, doc) = h
        .call(
            "PATCH",
            &format!("{}/{id2}", vars()),
            body(json!({"sensitive": true})),
        )
        .await;
    assert_eq!(st, 200, "{doc}");
    assert!(!doc.to_string().contains("plain-then-secret"));
    let obj2 = indexed(&h, &id2);
    assert_eq!(obj2.spec.value, "");
    let s = secrets
        .get(&secret_name(&obj2.name_any()))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(secret_value(s), Some(b"plain-then-secret".to_vec()));
}

/// 422s, one error per attribute: category missing or unknown, a key invalid in its
/// category, hcl on an env variable, a duplicate key in the same category (the same
/// key in the other category is fine), a long description, wrong types.
#[tokio::test]
async fn invalid_variables_are_422() {
    let h = with_workspace().await;
    let post = |attrs: Value| {
        let h = &h;
        async move { h.call("POST", &vars(), body(attrs)).await }
    };
    let (st, doc) = post(json!({"key": "a", "value": "b"})).await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/category".to_owned()])
    );
    let (st, doc) = post(json!({"key": "a", "category": "policy-set"})).await;
    assert_eq!(st, 422);
    assert_eq!(pointers(&doc), ["/data/attributes/category"]);
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("is not included in the list"),
        "{doc}"
    );
    let (st, doc) = post(json!({"value": "b", "category": "env"})).await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/key".to_owned()])
    );
    let (st, doc) = post(json!({"key": "my-var", "category": "env"})).await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/key".to_owned()])
    );
    let (st, _) = post(json!({"key": "my-var", "category": "terraform"})).await;
    assert_eq!(st, 201);
    let (st, doc) = post(
        json!({"key": "x y", "category": "terraform", "hcl": "yes", "description": "d".repeat(513)}),
    )
    .await;
    assert_eq!(st, 422);
    assert_eq!(
        pointers(&doc),
        [
            "/data/attributes/description",
            "/data/attributes/hcl",
            "/data/attributes/key"
        ]
    );
    let (st, doc) = post(json!({"key": "TF_LOG", "category": "env", "hcl": true})).await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/hcl".to_owned()])
    );
    // Duplicates: same key and category is taken, the other category is not.
    let (st, doc) = post(json!({"key": "my-var", "category": "terraform"})).await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/key".to_owned()])
    );
    assert!(
        doc["errors"][0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("has already been taken"),
        "{doc}"
    );
    let (st, doc) = post(json!({"key": "REGION", "category": "env"})).await;
    assert_eq!(st, 201, "{doc}");
    let (st, doc) = post(json!({"key": "REGION", "category": "terraform"})).await;
    assert_eq!(st, 201, "{doc}");
    let env_id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    // An update into a taken key, or making a terraform HCL variable env, is refused.
    let one = format!("{}/{env_id}", vars());
    let (st, doc) = h.call("PATCH", &one, body(json!({"key": "my-var"}))).await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/key".to_owned()])
    );
    let (st, _) = h.call("PATCH", &one, body(json!({"hcl": true}))).await;
    assert_eq!(st, 200);
    let (st, doc) = h
        .call("PATCH", &one, body(json!({"category": "env"})))
        .await;
    assert_eq!(st, 422, "{doc}");
    assert_eq!(pointers(&doc), ["/data/attributes/hcl"]);
    // Without hcl it would collide with the env REGION.
    let (st, doc) = h
        .call(
            "PATCH",
            &one,
            body(json!({"category": "env", "hcl": false})),
        )
        .await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/attributes/key".to_owned()])
    );
    let (st, doc) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "workspaces", "attributes": {"key": "k", "category": "env"}}})))
            .await;
    assert_eq!((st, pointers(&doc)), (422, vec!["/data/type".to_owned()]));
}

/// 404 for an unknown workspace, for one the caller cannot read, and for variables
/// without the right on workspacevariables; a reader lists and reads and gets 403 on
/// writes, a writer writes.
#[tokio::test]
async fn rights() {
    let h = with_workspace().await;
    assert_eq!(
        h.call("GET", "/api/v2/workspaces/ws-NoSuchWorkspace01/vars", None)
            .await
            .0,
        404
    );
    assert_eq!(
        h.call(
            "POST",
            "/api/v2/workspaces/ws-NoSuchWorkspace01/vars",
            body(json!({"key": "k", "category": "env"}))
        )
        .await
        .0,
        404
    );
    let (_, doc) = h
        .call(
            "POST",
            &vars(),
            body(json!({"key": "k", "value": "v", "category": "env"})),
        )
        .await;
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let one = format!("{}/{id}", vars());
    // No rights at all: the workspace does not exist for the caller.
    let nobody = h.token_with_role(None).await;
    for (m, u) in [("GET", vars()), ("GET", one.clone())] {
        assert_eq!(h.call_as(&nobody, m, &u, None).await.0, 404, "{m} {u}");
    }
    // The workspace but no variables: 404 too.
    let ws_only = h
        .token_with_role(Some(vec![rule(&["get", "list"], &["workspaces"])]))
        .await;
    assert_eq!(h.call_as(&ws_only, "GET", &vars(), None).await.0, 404);
    assert_eq!(h.call_as(&ws_only, "GET", &one, None).await.0, 404);
    // Variables but not the workspace: 404.
    let vars_only = h
        .token_with_role(Some(vec![rule(
            &["get", "list", "create"],
            &["workspacevariables"],
        )]))
        .await;
    assert_eq!(h.call_as(&vars_only, "GET", &vars(), None).await.0, 404);
    // A reader reads, and is told 403 on writes (it can see them: docs/rbac.md).
    let reader = h
        .token_with_role(Some(vec![rule(
            &["get", "list"],
            &["workspaces", "workspacevariables"],
        )]))
        .await;
    let (st, doc) = h.call_as(&reader, "GET", &vars(), None).await;
    assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(1)));
    assert_eq!(h.call_as(&reader, "GET", &one, None).await.0, 200);
    assert_eq!(
        h.call_as(
            &reader,
            "POST",
            &vars(),
            body(json!({"key": "x", "category": "env"}))
        )
        .await
        .0,
        403
    );
    assert_eq!(
        h.call_as(&reader, "PATCH", &one, body(json!({"value": "w"})))
            .await
            .0,
        403
    );
    assert_eq!(h.call_as(&reader, "DELETE", &one, None).await.0, 403);
    // Who cannot read the variables cannot learn of them through a write: 404.
    assert_eq!(h.call_as(&ws_only, "DELETE", &one, None).await.0, 404);
    // A writer.
    let writer = h
        .token_with_role(Some(vec![
            rule(&["get", "list"], &["workspaces"]),
            rule(
                &["get", "list", "create", "update", "delete"],
                &["workspacevariables"],
            ),
        ]))
        .await;
    assert_eq!(
        h.call_as(
            &writer,
            "POST",
            &vars(),
            body(json!({"key": "x", "category": "env"}))
        )
        .await
        .0,
        201
    );
    assert_eq!(
        h.call_as(&writer, "PATCH", &one, body(json!({"value": "w"})))
            .await
            .0,
        200
    );
    assert_eq!(h.call_as(&writer, "DELETE", &one, None).await.0, 204);
    // A variable of another workspace is not found through this one.
    h.workspace("ws-OtherWorkspace0001", "staging", |_| {})
        .await;
    let (_, doc) = h.call("GET", &vars(), None).await;
    let x = doc["data"][0]["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        h.call(
            "GET",
            &format!("/api/v2/workspaces/ws-OtherWorkspace0001/vars/{x}"),
            None
        )
        .await
        .0,
        404
    );
}

/// Without page parameters the list is whole (TFE's list is not paginated); with them,
/// paged like every list.
#[tokio::test]
async fn paging() {
    let h = with_workspace().await;
    for i in 0..25 {
        let (st, _) = h
            .call(
                "POST",
                &vars(),
                body(json!({"key": format!("k{i:02}"), "category": "terraform"})),
            )
            .await;
        assert_eq!(st, 201);
    }
    let (st, doc) = h.call("GET", &vars(), None).await;
    assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(25)));
    assert_eq!(doc["meta"]["pagination"]["total-count"], 25);
    let (st, doc) = h
        .call(
            "GET",
            &format!("{}?page%5Bsize%5D=10&page%5Bnumber%5D=3", vars()),
            None,
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(doc["data"].as_array().map(Vec::len), Some(5));
    assert_eq!(doc["data"][0]["attributes"]["key"], "k20");
    assert_eq!(doc["meta"]["pagination"]["current-page"], 3);
    assert_eq!(doc["meta"]["pagination"]["total-pages"], 3);
    assert_eq!(
        h.call("GET", &format!("{}?page%5Bsize%5D=x", vars()), None)
            .await
            .0,
        400
    );
    assert_eq!(
        h.call("GET", &format!("{}?filter%5Bkey%5D=x", vars()), None)
            .await
            .0,
        400
    );
}

/// The older routes: list by organization and workspace name, create with the
/// workspace as a relationship, update and delete by variable ID.
#[tokio::test]
async fn legacy_routes() {
    let h = with_workspace().await;
    let (st, doc) = h
            .call(
                "POST",
                "/api/v2/vars",
                Some(json!({"data": {"type": "vars", "attributes": {"key": "region", "value": "eu", "category": "terraform"},
                    "relationships": {"workspace": {"data": {"id": WS, "type": "workspaces"}}}}})),
            )
            .await;
    assert_eq!(st, 201, "{doc}");
    let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
    let (st, doc) = h
        .call(
            "POST",
            "/api/v2/vars",
            body(json!({"key": "k", "category": "env"})),
        )
        .await;
    assert_eq!(
        (st, pointers(&doc)),
        (422, vec!["/data/relationships/workspace".to_owned()])
    );
    let list =
        "/api/v2/vars?filter%5Borganization%5D%5Bname%5D=acme&filter%5Bworkspace%5D%5Bname%5D=prod";
    let (st, doc) = h.call("GET", list, None).await;
    assert_eq!(
        (st, doc["data"][0]["id"].as_str()),
        (200, Some(id.as_str()))
    );
    assert_eq!(
        h.call(
            "GET",
            "/api/v2/vars?filter%5Borganization%5D%5Bname%5D=acme",
            None
        )
        .await
        .0,
        400
    );
    assert_eq!(
            h.call("GET", "/api/v2/vars?filter%5Borganization%5D%5Bname%5D=acme&filter%5Bworkspace%5D%5Bname%5D=nope", None).await.0,
            404
        );
    let (st, doc) = h
        .call(
            "PATCH",
            &format!("/api/v2/vars/{id}"),
            body(json!({"value": "us"})),
        )
        .await;
    assert_eq!(
        (st, doc["data"]["attributes"]["value"].as_str()),
        (200, Some("us"))
    );
    assert_eq!(
        h.call("DELETE", &format!("/api/v2/vars/{id}"), None)
            .await
            .0,
        204
    );
    assert_eq!(
        h.call("DELETE", &format!("/api/v2/vars/{id}"), None)
            .await
            .0,
        404
    );
}

/// The CRD's CEL rules hold for kubectl users too: hcl on env, an env key with a dash,
/// a sensitive value in the spec, un-sensitive, moving to another workspace.
#[tokio::test]
async fn kubectl_writes_meet_the_same_rules() {
    let h = with_workspace().await;
    let api: Api<WorkspaceVariable> = Api::namespaced(h.admin.clone(), ORG);
    let spec = |f: &dyn Fn(&mut WorkspaceVariableSpec)| {
        let mut s = WorkspaceVariableSpec {
            workspace: "ws-varsworkspace0001".into(),
            key: "region".into(),
            category: "terraform".into(),
            ..Default::default()
        };
        f(&mut s);
        s
    };
    type Change<'a> = &'a dyn Fn(&mut WorkspaceVariableSpec);
    let refused: [(&str, Change); 4] = [
        ("hcl", &|s| {
            s.category = "env".into();
            s.hcl = true;
        }),
        ("env key", &|s| {
            s.category = "env".into();
            s.key = "my-var".into();
        }),
        ("sensitive value", &|s| {
            s.sensitive = true;
            s.value = "x".into();
        }),
        ("category", &|s| s.category = "policy-set".into()),
    ];
    for (what, f) in refused {
        let r = api
            .create(
                &PostParams::default(),
                &WorkspaceVariable::new("bad", spec(f)),
            )
            .await;
        assert!(r.is_err(), "{what} accepted");
    }
    let ok = api
        .create(
            &PostParams::default(),
            &WorkspaceVariable::new("good", spec(&|s| s.sensitive = true)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut back = ok.clone();
    back.spec.sensitive = false;
    assert!(
        api.replace("good", &PostParams::default(), &back)
            .await
            .is_err()
    );
    let mut moved = ok.clone();
    moved.spec.workspace = "other".into();
    assert!(
        api.replace("good", &PostParams::default(), &moved)
            .await
            .is_err()
    );
    api.delete("good", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
