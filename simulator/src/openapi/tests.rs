use super::*;

fn workspace() -> ResourceInfo {
    ResourceInfo {
        group: "terrace.dev".into(),
        version: "v1alpha1".into(),
        kind: "Workspace".into(),
        list_kind: "WorkspaceList".into(),
        plural: "workspaces".into(),
        singular: "workspace".into(),
        namespaced: true,
        short_names: vec!["ws".into()],
        categories: vec!["terrace".into()],
        schema: Some(json!({
            "type": "object",
            "description": "A TFE workspace.",
            "properties": {"spec": {"type": "object", "description": "Desired state.",
                "properties": {"name": {"type": "string", "description": "The workspace name."}}}}
        })),
        printer_columns: vec![],
        status_subresource: true,
        custom: true,
    }
}

fn secret() -> ResourceInfo {
    ResourceInfo {
        group: String::new(),
        version: "v1".into(),
        kind: "Secret".into(),
        list_kind: "SecretList".into(),
        plural: "secrets".into(),
        singular: "secret".into(),
        namespaced: true,
        short_names: vec![],
        categories: vec![],
        schema: None,
        printer_columns: vec![],
        status_subresource: false,
        custom: false,
    }
}

/// Copies kube-openapi's /openapi/v3 index: one serverRelativeURL with a hash per group
/// version, `api/v1` for the core group.
#[test]
fn v3_index_lists_group_versions() {
    let idx = v3_index(&[workspace(), secret()]);
    let paths = idx["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 2);
    let url = paths["apis/terrace.dev/v1alpha1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    assert!(
        url.starts_with("/openapi/v3/apis/terrace.dev/v1alpha1?hash="),
        "{url}"
    );
    assert!(url.len() > "/openapi/v3/apis/terrace.dev/v1alpha1?hash=".len() + 32);
    assert!(
        paths["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .starts_with("/openapi/v3/api/v1?hash=")
    );
}

/// Copies the CRD OpenAPI builder: the kind's schema is named by reversed group, carries
/// x-kubernetes-group-version-kind, keeps field descriptions, and gets apiVersion, kind
/// and metadata (a reference to ObjectMeta, which is included with descriptions).
#[test]
fn v3_kind_schema() {
    let doc = v3_group_version("terrace.dev", "v1alpha1", &[workspace(), secret()]).unwrap();
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = &doc["components"]["schemas"];
    let ws = &schemas["dev.terrace.v1alpha1.Workspace"];
    assert_eq!(
        ws["x-kubernetes-group-version-kind"],
        json!([{"group": "terrace.dev", "version": "v1alpha1", "kind": "Workspace"}])
    );
    assert_eq!(
        ws["properties"]["spec"]["properties"]["name"]["description"],
        "The workspace name."
    );
    assert_eq!(ws["properties"]["apiVersion"]["type"], "string");
    assert_eq!(
        ws["properties"]["metadata"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let meta = &schemas["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
    assert!(
        meta["properties"]["name"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Name must be unique")
    );
    let list = &schemas["dev.terrace.v1alpha1.WorkspaceList"];
    assert_eq!(
        list["x-kubernetes-group-version-kind"][0]["kind"],
        "WorkspaceList"
    );
    assert_eq!(
        list["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/dev.terrace.v1alpha1.Workspace"
    );
    // Every reference resolves inside the document.
    let text = doc.to_string();
    for part in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = part.split('"').next().unwrap();
        assert!(schemas.get(name).is_some(), "dangling $ref {name}");
    }
    assert!(v3_group_version("terrace.dev", "v9", &[workspace()]).is_none());
}

/// Copies what kubectl's field-validation detection reads: the kind's PATCH operation has
/// the GVK extension, a `fieldValidation` query parameter, and request body content types
/// (strategic merge patch only for built-in kinds on a real server; see the module docs).
#[test]
fn v3_patch_operation() {
    let doc = v3_group_version("terrace.dev", "v1alpha1", &[workspace()]).unwrap();
    let item = &doc["paths"]["/apis/terrace.dev/v1alpha1/namespaces/{namespace}/workspaces/{name}"];
    let patch = &item["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"]["kind"],
        "Workspace"
    );
    assert_eq!(patch["x-kubernetes-action"], "patch");
    let params = patch["parameters"].as_array().unwrap();
    assert!(
        params
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
    );
    let content = patch["requestBody"]["content"].as_object().unwrap();
    assert!(content.contains_key("application/merge-patch+json"));
    assert!(content.contains_key("application/apply-patch+yaml"));
    assert!(!content.contains_key("application/strategic-merge-patch+json"));
    assert!(
        doc["paths"]["/apis/terrace.dev/v1alpha1/namespaces/{namespace}/workspaces/{name}/status"]
            ["put"]
            .is_object()
    );
    assert!(doc["paths"]["/apis/terrace.dev/v1alpha1/workspaces"]["get"].is_object());
    assert_eq!(item["parameters"][0]["name"], "namespace");
}

/// Copies the names of built-in definitions (`io.k8s.api.core.v1.Secret`) with a permissive
/// schema, so kubectl's validation accepts real manifests.
#[test]
fn builtin_kinds_are_permissive() {
    let doc = v3_group_version("", "v1", &[secret()]).unwrap();
    let s = &doc["components"]["schemas"]["io.k8s.api.core.v1.Secret"];
    assert_eq!(s["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(
        s["x-kubernetes-group-version-kind"][0],
        json!({"group": "", "version": "v1", "kind": "Secret"})
    );
    assert!(doc["paths"]["/api/v1/namespaces/{namespace}/secrets/{name}"]["patch"].is_object());
}

/// Copies /openapi/v2: swagger 2.0 with definitions, `#/definitions/` references, body
/// parameters and `consumes` on operations.
#[test]
fn v2_swagger() {
    let doc = v2_document(&[workspace(), secret()]);
    assert_eq!(doc["swagger"], "2.0");
    let defs = &doc["definitions"];
    assert!(defs["dev.terrace.v1alpha1.Workspace"].is_object());
    assert!(defs["io.k8s.api.core.v1.Secret"].is_object());
    assert_eq!(
        defs["dev.terrace.v1alpha1.Workspace"]["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let text = doc.to_string();
    assert!(!text.contains("#/components/schemas/"));
    let patch = &doc["paths"]["/apis/terrace.dev/v1alpha1/namespaces/{namespace}/workspaces/{name}"]
        ["patch"];
    assert!(
        patch["consumes"]
            .as_array()
            .unwrap()
            .contains(&json!("application/merge-patch+json"))
    );
    assert_eq!(patch["parameters"][0]["in"], "body");
}
