use super::*;
use crate::Edition;
use crate::testing::{harness, rule};
use k8s_openapi::api::core::v1::Secret;

const WS: &str = "ws-PolicyUser00000001";

fn policy_body(attrs: Value) -> Option<Value> {
    Some(json!({"data": {"type": "policies", "attributes": attrs}}))
}

/// go-tfe's OPA policy flow: create (name, kind, query, enforcement level; its old
/// `enforce` form too), the validation errors, upload (compiled: 422 with the compiler's
/// words), download, read with `enforce` once it has content, list with search and kind,
/// update, delete; a reader reads, may not change.
#[tokio::test]
async fn policies_through_the_api() {
    let h = harness(Edition::SelfHosted).await;
    let coll = "/api/v2/organizations/acme/policies";
    let (st, created) = h
        .call(
            "POST",
            coll,
            policy_body(
                json!({"name": "tags", "kind": "opa", "query": "data.terraform.tags.deny",
                "description": "owner tags", "enforcement-level": "mandatory"}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{created}");
    let id = created["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("pol-"), "{id}");
    let a = &created["data"]["attributes"];
    assert_eq!(
        (a["kind"].clone(), a["query"].clone()),
        (json!("opa"), json!("data.terraform.tags.deny"))
    );
    assert_eq!(a["enforcement-level"], "mandatory");
    assert_eq!(a["enforce"], json!([]), "no content yet");
    assert_eq!(
        created["data"]["relationships"]["organization"]["data"]["id"],
        "acme"
    );

    // The `enforce` form of the level; what is refused.
    let (st, old) = h
        .call(
            "POST",
            coll,
            policy_body(
                json!({"name": "sizes", "kind": "opa", "query": "data.sizes.deny",
                "enforce": [{"path": "sizes.rego", "mode": "advisory"}]}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{old}");
    assert_eq!(old["data"]["attributes"]["enforcement-level"], "advisory");
    for (attrs, word) in [
        (
            json!({"name": "s", "kind": "sentinel", "enforcement-level": "hard-mandatory"}),
            "not offered",
        ),
        (
            json!({"name": "q", "kind": "opa", "enforcement-level": "advisory"}),
            "needs a query",
        ),
        (
            json!({"name": "q", "kind": "opa", "query": "input.x", "enforcement-level": "advisory"}),
            "reference to a rule",
        ),
        (
            json!({"name": "l", "kind": "opa", "query": "data.x", "enforcement-level": "soft-mandatory"}),
            "advisory, mandatory",
        ),
        (
            json!({"name": "l", "kind": "opa", "query": "data.x"}),
            "enforcement level",
        ),
        (
            json!({"kind": "opa", "query": "data.x", "enforcement-level": "advisory"}),
            "name is required",
        ),
        (
            json!({"name": "bad name!", "kind": "opa", "query": "data.x", "enforcement-level": "advisory"}),
            "letters",
        ),
        (
            json!({"name": "TAGS", "kind": "opa", "query": "data.x", "enforcement-level": "advisory"}),
            "taken",
        ),
    ] {
        let (st, body) = h.call("POST", coll, policy_body(attrs.clone())).await;
        assert_eq!(st, 422, "{attrs}: {body}");
        assert!(body.to_string().contains(word), "{attrs}: {body}");
    }

    // Upload: compiled when stored.
    let upload = format!("/api/v2/policies/{id}/upload");
    let auth = format!("Bearer {}", h.token);
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/octet-stream"),
    ];
    let (st, _, body) = h
        .raw(
            "PUT",
            &upload,
            &headers,
            b"package terraform.tags\ndeny contains x if {".to_vec(),
        )
        .await;
    assert_eq!(st, 422, "{body:?}");
    assert!(
        String::from_utf8_lossy(&body).contains("does not compile"),
        "{body:?}"
    );
    let (st, _, _) = h.raw("PUT", &upload, &headers, Vec::new()).await;
    assert_eq!(st, 422);
    let (st, _, _) = h
        .raw(
            "GET",
            &format!("/api/v2/policies/{id}/download"),
            &headers,
            Vec::new(),
        )
        .await;
    assert_eq!(st, 404, "nothing uploaded yet");
    let rego = "package terraform.tags\n\nimport rego.v1\n\ndeny contains \"x\" if false\n";
    let (st, _, body) = h
        .raw("PUT", &upload, &headers, rego.as_bytes().to_vec())
        .await;
    assert_eq!(st, 204, "{body:?}");
    h.wait("the upload", |idx| {
        idx.policies()
            .get(&id)
            .is_some_and(|p| p.spec.rego.is_some())
    })
    .await;
    let (st, _, got) = h
        .raw(
            "GET",
            &format!("/api/v2/policies/{id}/download"),
            &headers,
            Vec::new(),
        )
        .await;
    assert_eq!(
        (st, String::from_utf8_lossy(&got).into_owned()),
        (200, rego.to_owned())
    );
    let (st, read) = h.call("GET", &format!("/api/v2/policies/{id}"), None).await;
    assert_eq!(st, 200);
    assert_eq!(
        read["data"]["attributes"]["enforce"],
        json!([{"path": "tags.rego", "mode": "mandatory"}])
    );

    // List: search and kind.
    let (_, listed) = h
        .call(
            "GET",
            &format!("{coll}?search[name]=tag&filter[kind]=opa"),
            None,
        )
        .await;
    assert_eq!(listed["meta"]["pagination"]["total-count"], 1, "{listed}");
    let names: Vec<&str> = listed["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["attributes"]["name"].as_str())
        .collect();
    assert_eq!(names, ["tags"]);
    assert_eq!(listed["meta"]["pagination"]["total-count"], 1);

    // Update.
    let (st, updated) = h
        .call(
            "PATCH",
            &format!("/api/v2/policies/{id}"),
            policy_body(json!({"description": "new words", "query": "data.terraform.tags.violations", "enforcement-level": "advisory"})),
        )
        .await;
    assert_eq!(st, 200, "{updated}");
    let a = &updated["data"]["attributes"];
    assert_eq!(
        (
            a["description"].clone(),
            a["query"].clone(),
            a["enforcement-level"].clone()
        ),
        (
            json!("new words"),
            json!("data.terraform.tags.violations"),
            json!("advisory")
        )
    );

    // A reader reads and may not change.
    let reader = h
        .token_with_role(Some(vec![rule(
            &["get", "list"],
            &["policies", "policysets"],
        )]))
        .await;
    let (st, _) = h
        .call_as(&reader, "GET", &format!("/api/v2/policies/{id}"), None)
        .await;
    assert_eq!(st, 200);
    let (st, _) = h
        .call_as(
            &reader,
            "PATCH",
            &format!("/api/v2/policies/{id}"),
            policy_body(json!({"description": "x"})),
        )
        .await;
    assert_eq!(st, 403);
    // Without the organization in sight, its collection is not found; with it, 403.
    let (st, _) = h.call_as(&reader, "POST", coll, policy_body(json!({"name": "r", "kind": "opa", "query": "data.r", "enforcement-level": "advisory"}))).await;
    assert!(st == 403 || st == 404, "{st}");

    let (st, _) = h
        .call("DELETE", &format!("/api/v2/policies/{id}"), None)
        .await;
    assert_eq!(st, 204);
    let (st, _) = h.call("GET", &format!("/api/v2/policies/{id}"), None).await;
    assert_eq!(st, 404);
}

/// go-tfe's policy set flow: create with policies, workspaces and exclusions; the
/// relationships added and removed; include; what is refused (Sentinel, VCS, agents);
/// parameters, a sensitive one kept in a Secret the set owns and never shown; delete.
#[tokio::test]
async fn policy_sets_and_their_parameters_through_the_api() {
    let h = harness(Edition::SelfHosted).await;
    h.workspace(WS, "app", |_| {}).await;
    let (_, p) = h
        .call(
            "POST",
            "/api/v2/organizations/acme/policies",
            policy_body(json!({"name": "tags", "kind": "opa", "query": "data.t.deny", "enforcement-level": "mandatory"})),
        )
        .await;
    let pol = p["data"]["id"].as_str().unwrap_or_default().to_owned();
    let coll = "/api/v2/organizations/acme/policy-sets";
    let body = |attrs: Value, rel: Value| {
        Some(json!({"data": {"type": "policy-sets", "attributes": attrs, "relationships": rel}}))
    };
    let (st, created) = h
        .call(
            "POST",
            coll,
            body(
                json!({"name": "guards", "kind": "opa", "overridable": true, "description": "d"}),
                json!({"policies": {"data": [{"type": "policies", "id": pol}]},
                       "workspaces": {"data": [{"type": "workspaces", "id": WS}]}}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{created}");
    let id = created["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("polset-"), "{id}");
    let a = &created["data"]["attributes"];
    assert_eq!(
        (
            a["kind"].clone(),
            a["overridable"].clone(),
            a["policy-count"].clone(),
            a["workspace-count"].clone()
        ),
        (json!("opa"), json!(true), json!(1), json!(1))
    );
    let rel = &created["data"]["relationships"];
    assert_eq!(
        rel["policies"]["data"],
        json!([{"id": pol, "type": "policies"}])
    );
    assert_eq!(
        rel["workspaces"]["data"],
        json!([{"id": WS, "type": "workspaces"}])
    );
    // The policy knows its set.
    let (_, p) = h
        .call("GET", &format!("/api/v2/policies/{pol}"), None)
        .await;
    assert_eq!(p["data"]["attributes"]["policy-set-count"], 1);

    for (attrs, word) in [
        (json!({"name": "s", "kind": "sentinel"}), "not offered"),
        (
            json!({"name": "v", "kind": "opa", "vcs-repo": {"identifier": "a/b"}}),
            "VCS",
        ),
        (
            json!({"name": "a", "kind": "opa", "agent-enabled": true}),
            "agents",
        ),
        (json!({"name": "GUARDS", "kind": "opa"}), "taken"),
        // Refused, never dropped (issue 42 §12).
        (
            json!({"name": "t", "kind": "opa", "tag-selectors": [{"tag-key": "env", "tag-value": "prod", "is-exclude": false}]}),
            "tag selectors",
        ),
    ] {
        let (st, b) = h.call("POST", coll, body(attrs.clone(), json!({}))).await;
        assert_eq!(st, 422, "{attrs}: {b}");
        assert!(b.to_string().contains(word), "{attrs}: {b}");
    }
    let (st, b) = h
        .call(
            "POST",
            coll,
            body(
                json!({"name": "x", "kind": "opa"}),
                json!({"policies": {"data": [{"type": "policies", "id": "pol-nope"}]}}),
            ),
        )
        .await;
    assert_eq!(st, 422, "{b}");

    // Tag selectors: refused on update and on their own endpoint; an empty list asks
    // nothing.
    let (st, b) = h
        .call(
            "PATCH",
            &format!("/api/v2/policy-sets/{id}"),
            body(json!({"tag-selectors": [{"tag-key": "env"}]}), json!({})),
        )
        .await;
    assert_eq!(st, 422, "{b}");
    let (st, b) = h
        .call(
            "POST",
            &format!("/api/v2/policy-sets/{id}/tag-selectors"),
            Some(json!({"data": [{"tag-key": "env", "tag-value": null, "is-exclude": true}]})),
        )
        .await;
    assert_eq!(st, 422, "{b}");
    let (st, b) = h
        .call(
            "PATCH",
            &format!("/api/v2/policy-sets/{id}"),
            body(json!({"tag-selectors": []}), json!({})),
        )
        .await;
    assert_eq!(
        (st, b["data"]["attributes"]["tag-selectors"].clone()),
        (200, json!([])),
        "{b}"
    );

    // Relationships.
    let rel_path = |r: &str| format!("/api/v2/policy-sets/{id}/relationships/{r}");
    let ws_list = Some(json!({"data": [{"type": "workspaces", "id": WS}]}));
    let (st, _) = h
        .call("POST", &rel_path("workspace-exclusions"), ws_list.clone())
        .await;
    assert_eq!(st, 204);
    let (st, _) = h
        .call(
            "POST",
            &rel_path("project-exclusions"),
            Some(json!({"data": [{"type": "projects", "id": "prj-nope"}]})),
        )
        .await;
    assert_eq!(st, 422, "an unknown project");
    let (st, _) = h
        .call("DELETE", &rel_path("workspaces"), ws_list.clone())
        .await;
    assert_eq!(st, 204);
    let (st, _) = h
        .call(
            "DELETE",
            &rel_path("policies"),
            Some(json!({"data": [{"type": "policies", "id": pol}]})),
        )
        .await;
    assert_eq!(st, 204);
    h.wait("the relationship changes", |idx| {
        idx.policy_sets()
            .get(&id)
            .is_some_and(|s| s.spec.policy_refs.is_empty())
    })
    .await;
    let (_, shown) = h
        .call(
            "GET",
            &format!("/api/v2/policy-sets/{id}?include=workspace_exclusions"),
            None,
        )
        .await;
    let rel = &shown["data"]["relationships"];
    assert_eq!(
        rel["workspace-exclusions"]["data"],
        json!([{"id": WS, "type": "workspaces"}])
    );
    assert_eq!(rel["workspaces"]["data"], json!([]));
    assert_eq!(rel["policies"]["data"], json!([]));
    assert_eq!(shown["included"][0]["id"], WS);
    let (st, _) = h
        .call(
            "POST",
            &rel_path("policies"),
            Some(json!({"data": [{"type": "policies", "id": pol}]})),
        )
        .await;
    assert_eq!(st, 204);

    // Update.
    let (st, updated) = h
        .call(
            "PATCH",
            &format!("/api/v2/policy-sets/{id}"),
            body(
                json!({"global": true, "overridable": false, "name": "guards-2"}),
                json!({}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{updated}");
    let a = &updated["data"]["attributes"];
    assert_eq!(
        (
            a["global"].clone(),
            a["overridable"].clone(),
            a["name"].clone()
        ),
        (json!(true), json!(false), json!("guards-2"))
    );

    // Parameters.
    let params = format!("/api/v2/policy-sets/{id}/parameters");
    let param = |attrs: Value| Some(json!({"data": {"type": "vars", "attributes": attrs}}));
    let (st, plain) = h
        .call(
            "POST",
            &params,
            param(json!({"key": "owner", "value": "platform", "category": "policy-set"})),
        )
        .await;
    assert_eq!(st, 201, "{plain}");
    assert_eq!(plain["data"]["attributes"]["value"], "platform");
    assert_eq!(
        plain["data"]["relationships"]["configurable"]["data"]["id"],
        id.as_str()
    );
    let (st, secret) = h
        .call("POST", &params, param(json!({"key": "api_key", "value": "hunter2", "category": "policy-set", "sensitive": true})))
        .await;
    assert_eq!(st, 201, "{secret}");
    assert_eq!(secret["data"]["attributes"]["value"], "");
    assert!(!secret.to_string().contains("hunter2"));
    for (attrs, word) in [
        (
            json!({"key": "owner", "value": "x", "category": "policy-set"}),
            "taken",
        ),
        (
            json!({"key": "x", "value": "x", "category": "terraform"}),
            "category",
        ),
        (json!({"value": "x", "category": "policy-set"}), "blank"),
    ] {
        let (st, b) = h.call("POST", &params, param(attrs.clone())).await;
        assert_eq!(st, 422, "{attrs}: {b}");
        assert!(b.to_string().contains(word), "{attrs}: {b}");
    }
    let secret_id = secret["data"]["id"].as_str().unwrap_or_default().to_owned();
    h.wait("the parameters", |idx| {
        idx.policy_sets()
            .get(&id)
            .is_some_and(|s| s.spec.parameters.len() == 2)
    })
    .await;
    let set = h
        .state
        .index
        .read()
        .policy_sets()
        .get(&id)
        .cloned()
        .expect("indexed");
    assert!(
        !serde_json::to_string(&set.spec)
            .unwrap_or_default()
            .contains("hunter2")
    );
    let r = set.spec.parameters[1]
        .value_from
        .clone()
        .expect("a Secret reference");
    let secrets: kube::Api<Secret> = kube::Api::namespaced(h.admin.clone(), "acme");
    let stored = secrets.get(&r.name).await.expect("the parameter's Secret");
    assert_eq!(
        stored.metadata.owner_references.unwrap_or_default()[0].kind,
        "PolicySet"
    );
    let (_, listed) = h.call("GET", &params, None).await;
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2));
    assert!(!listed.to_string().contains("hunter2"));
    let (st, b) = h
        .call(
            "PATCH",
            &format!("{params}/{secret_id}"),
            param(json!({"sensitive": false})),
        )
        .await;
    assert_eq!(st, 422, "{b}");
    let (st, b) = h
        .call(
            "PATCH",
            &format!("{params}/{secret_id}"),
            param(json!({"key": "token"})),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["data"]["attributes"]["key"], "token");
    let (st, _) = h
        .call("DELETE", &format!("{params}/{secret_id}"), None)
        .await;
    assert_eq!(st, 204);
    let (st, _) = h.call("GET", &format!("{params}/{secret_id}"), None).await;
    assert_eq!(st, 404);

    // Deleting the policy takes it out of the set.
    let (st, _) = h
        .call("DELETE", &format!("/api/v2/policies/{pol}"), None)
        .await;
    assert_eq!(st, 204);
    let (_, shown) = h
        .call("GET", &format!("/api/v2/policy-sets/{id}"), None)
        .await;
    assert_eq!(
        shown["data"]["relationships"]["policies"]["data"],
        json!([])
    );
    assert!(
        h.state
            .index
            .read()
            .policy_sets()
            .get(&id)
            .is_some_and(|s| s.spec.policy_refs.is_empty())
    );

    let (st, _) = h
        .call("DELETE", &format!("/api/v2/policy-sets/{id}"), None)
        .await;
    assert_eq!(st, 204);
    let (st, _) = h
        .call("GET", &format!("/api/v2/policy-sets/{id}"), None)
        .await;
    assert_eq!(st, 404);
}

/// go-tfe's policies: a query without the `data.` root is accepted (and read under
/// `data`), and Rego v0 is accepted on upload (issue 42 §10, §11).
#[tokio::test]
async fn rego_v0_and_queries_as_go_tfe_sends_them() {
    let h = harness(Edition::SelfHosted).await;
    let (st, created) = h
        .call(
            "POST",
            "/api/v2/organizations/acme/policies",
            policy_body(
                json!({"name": "main", "kind": "opa", "query": "terraform.main",
                "enforcement-level": "advisory"}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{created}");
    assert_eq!(created["data"]["attributes"]["query"], "terraform.main");
    let id = created["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (st, b) = h
        .call(
            "PATCH",
            &format!("/api/v2/policies/{id}"),
            policy_body(json!({"query": "terraform.policy1.deny"})),
        )
        .await;
    assert_eq!(
        (st, b["data"]["attributes"]["query"].clone()),
        (200, json!("terraform.policy1.deny")),
        "{b}"
    );
    let auth = format!("Bearer {}", h.token);
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/octet-stream"),
    ];
    let (st, _, body) = h
        .raw(
            "PUT",
            &format!("/api/v2/policies/{id}/upload"),
            &headers,
            b"package example rule[\"not allowed\"] { false }".to_vec(),
        )
        .await;
    assert_eq!(st, 204, "{}", String::from_utf8_lossy(&body));
}
