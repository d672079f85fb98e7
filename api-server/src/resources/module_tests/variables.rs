//! Test variables of a module (SPEC.md A8–A11, JSON:API type `vars`): environment
//! variables of every test run of the module.
//!
//! A variable is a TestVariable object checked with the same rules as its CRD
//! (`terrace_crds::rules`): key pattern, category `env`, value default `""`. A sensitive
//! value is written once into a Secret owned by the variable (`spec.valueFrom` points at
//! it); no response shows it again (the value reads as `""`), and a sensitive variable
//! cannot become non-sensitive. `version-id` (in status) is a new random value after
//! every create and update. Each bad attribute gets its own 422 error with a pointer.

use kube::api::PostParams;
use terrace_crds::TestVariable;
use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::VARIABLE_SECRET_KEY;
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::resources::TestVariableSpec;
use terrace_crds::rules::{
    TEST_VARIABLE_CATEGORY, new_secret_value, validate_test_variable_category,
    validate_test_variable_key,
};

use super::{ChildPath, Module, ModulePath, child_of, children_of, locate_child, locate_path};
pub use crate::documents::variables::secret_name;
use crate::documents::variables::{VarAttributes, VarInput, ptr};
use crate::prelude::*;

const T: &str =
    "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}";
/// The RBAC resource of the checks on a module's test variables.
const RESOURCE: &str = "testvariables";

/// Key of the value in a sensitive variable's Secret.
pub const SECRET_KEY: &str = VARIABLE_SECRET_KEY;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(&format!("{T}/vars"), get(list_vars).post(create))
        .route(
            &format!("{T}/vars/{{var}}"),
            get(show).patch(update).delete(remove),
        )
}

/// The JSON:API `data` of a variable (sensitive values read as `""`). No
/// `configurable` relationship: go-tfe decodes test variables with its workspace variable
/// type, whose `configurable` is a workspace, and fails on a module there.
pub fn render(v: &TestVariable) -> Value {
    json!({
        "id": id_of(v),
        "type": "vars",
        "attributes": {
            "key": v.spec.key,
            "value": if v.spec.sensitive { "" } else { v.spec.value.as_str() },
            "description": v.spec.description,
            "category": v.spec.category,
            "hcl": v.spec.hcl,
            "sensitive": v.spec.sensitive,
            "version-id": v.status.as_ref().and_then(|s| s.version_id.clone()),
        },
    })
}

/// The input of a request; every broken rule is recorded in `errs`.
fn parse(a: VarAttributes, creating: bool, errs: &mut Vec<FieldError>) -> VarInput {
    let input = a.parse(errs);
    if let Some(d) = &input.description
        && let Err(v) = terrace_crds::rules::validate_variable_description(d)
    {
        errs.push(v.into());
    }
    let typed = |k: &str, errs: &[FieldError]| errs.iter().any(|e| e.pointer == ptr(k));
    if (creating || input.key.is_some())
        && !typed("key", errs)
        && let Err(v) = validate_test_variable_key(input.key.as_deref().unwrap_or(""))
    {
        errs.push(v.into());
    }
    if (creating || input.category.is_some())
        && !typed("category", errs)
        && let Err(v) = validate_test_variable_category(input.category.as_deref())
    {
        errs.push(v.into());
    }
    input
}

fn vars_of(state: &AppState, m: &Module) -> Vec<Arc<TestVariable>> {
    let mut vars = children_of(state.index.read().test_variables(), m);
    vars.sort_by(|a, b| {
        a.spec
            .key
            .cmp(&b.spec.key)
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    vars
}

fn key_taken(state: &AppState, m: &Module, key: &str, except: Option<&str>) -> bool {
    vars_of(state, m)
        .iter()
        .any(|v| v.spec.key == key && Some(id_of(v.as_ref()).as_str()) != except)
}

async fn write_secret(state: &AppState, var: &TestVariable, value: &str) -> Result<(), ApiError> {
    write::owned_secret(state, var, &secret_name(&var.name_any()), SECRET_KEY, value).await
}

/// Gives the variable a new `version-id` (and its ID in status) and waits for the index.
async fn new_version(state: &AppState, var: &TestVariable) -> Result<TestVariable, ApiError> {
    let ns = var.namespace().unwrap_or_default();
    let status =
        json!({"id": id_of(var), "versionId": format!("sv-{}", crate::capability::random_token())});
    let updated = write::patch_status(
        &write::api::<TestVariable>(state, &ns),
        &var.name_any(),
        status,
    )
    .await?;
    write::wait_seen(state, &updated).await;
    Ok(updated)
}

async fn list_vars(
    Authed { state, caller }: Authed,
    Path(path): Path<ModulePath>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "list", RESOURCE).await?;
    let (org, namespace, name, provider) = &path;
    let page = q.page()?;
    q.supported_filters(&[])?;
    let vars = vars_of(&state, &m);
    let base = format!(
        "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}/vars"
    );
    Ok(list(&base, page, &vars, |v| render(v)))
}

async fn show(
    Authed { state, caller }: Authed,
    Path(path): Path<ChildPath>,
) -> Result<Doc, ApiError> {
    let (m, var) = locate_child(&state, &caller, path, "get", RESOURCE).await?;
    let v = var_of(&state, &m, &var)?;
    Ok(Doc::ok(render(&v)))
}

async fn create(
    Authed { state, caller }: Authed,
    Path(path): Path<ModulePath>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "create", RESOURCE).await?;
    let mut errs = Vec::new();
    let input = parse(doc.checked()?.attributes, true, &mut errs);
    let key = input.key.clone().unwrap_or_default();
    if errs.is_empty() && key_taken(&state, &m, &key, None) {
        errs.push(FieldError::attribute(
            "key",
            format!("key {key:?} has already been taken"),
        ));
    }
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let sensitive = input.sensitive.unwrap_or(false);
    let value = input.value.unwrap_or_default();
    let id = new_id(IdKind::TestVariable);
    let object_name = object_name_for_id(&id);
    let var = TestVariable {
        metadata: m.child_meta(&id),
        spec: TestVariableSpec {
            module: m.object_name(),
            key,
            value: if sensitive {
                String::new()
            } else {
                value.clone()
            },
            value_from: sensitive.then(|| SecretKeyRef {
                name: secret_name(&object_name),
                key: SECRET_KEY.to_owned(),
            }),
            description: input.description,
            hcl: input.hcl.unwrap_or(false),
            category: TEST_VARIABLE_CATEGORY.to_owned(),
            sensitive,
        },
        status: None,
    };
    let created = write::api::<TestVariable>(&state, &m.ns)
        .create(&PostParams::default(), &var)
        .await?;
    if sensitive {
        write_secret(&state, &created, &value).await?;
    }
    let created = new_version(&state, &created).await?;
    Ok(Doc::created(render(&created)))
}

fn var_of(state: &AppState, m: &Module, id: &str) -> Result<Arc<TestVariable>, ApiError> {
    child_of(state.index.read().test_variables(), m, id)
        .ok_or_else(|| ApiError::not_found("variable not found"))
}

async fn update(
    Authed { state, caller }: Authed,
    Path(path): Path<ChildPath>,
    JsonApi(doc): JsonApi<Document<VarAttributes>>,
) -> Result<Doc, ApiError> {
    let (m, var) = locate_child(&state, &caller, path, "update", RESOURCE).await?;
    let current = var_of(&state, &m, &var)?;
    let mut errs = Vec::new();
    let input = parse(doc.checked()?.attributes, false, &mut errs);
    if current.spec.sensitive && input.sensitive == Some(false) {
        errs.push(FieldError::attribute(
            "sensitive",
            "a sensitive variable cannot be made non-sensitive",
        ));
    }
    if let Some(k) = &input.key
        && errs.is_empty()
        && key_taken(&state, &m, k, Some(&var))
    {
        errs.push(FieldError::attribute(
            "key",
            format!("key {k:?} has already been taken"),
        ));
    }
    if !errs.is_empty() {
        return Err(ApiError::Invalid(errs));
    }
    let sensitive = current.spec.sensitive || input.sensitive == Some(true);
    // Becoming sensitive moves the plain value into the Secret.
    if let Some(v) = new_secret_value(
        sensitive,
        input.value.as_deref(),
        current.spec.sensitive,
        &current.spec.value,
    ) {
        write_secret(&state, &current, &v).await?;
    }
    let api = write::api::<TestVariable>(&state, &m.ns);
    let object_name = current.name_any();
    let updated = write::patch_spec(&api, (*current).clone(), |cur| {
        let mut spec = json!({"sensitive": sensitive, "category": TEST_VARIABLE_CATEGORY});
        if let Some(k) = &input.key {
            spec["key"] = json!(k);
        }
        if let Some(d) = &input.description {
            spec["description"] = json!(d);
        }
        if let Some(h) = input.hcl {
            spec["hcl"] = json!(h);
        }
        if sensitive {
            spec["value"] = json!("");
            spec["valueFrom"] = json!({"name": secret_name(&object_name), "key": SECRET_KEY});
        } else {
            spec["value"] = json!(
                input
                    .value
                    .clone()
                    .unwrap_or_else(|| cur.spec.value.clone())
            );
        }
        Ok(Some(spec))
    })
    .await?;
    let updated = new_version(&state, &updated).await?;
    Ok(Doc::ok(render(&updated)))
}

async fn remove(
    Authed { state, caller }: Authed,
    Path(path): Path<ChildPath>,
) -> Result<Response, ApiError> {
    let (m, var) = locate_child(&state, &caller, path, "delete", RESOURCE).await?;
    let current = var_of(&state, &m, &var)?;
    write::delete_if_present(&state, current.as_ref()).await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Secret;
    use kube::Api;
    use serde_json::json;

    use super::{SECRET_KEY, secret_name};
    use crate::testing::*;
    use kube::ResourceExt;

    fn vars() -> String {
        format!("{T}/vars")
    }

    /// A8–A11: create (defaults), list, update (version-id changes), sensitive values
    /// written once into an owned Secret and never shown, no way back to non-sensitive,
    /// delete; 422 with one pointer per bad field.
    #[tokio::test]
    async fn variable_lifecycle() {
        let h = Mh::with_module().await;
        let (st, doc) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "vars", "attributes": {"key": "TF_VAR_region", "category": "env"}}})))
            .await;
        assert_eq!(st, 201, "{doc}");
        let a = &doc["data"]["attributes"];
        assert_eq!(a["value"], "");
        assert_eq!(a["sensitive"], false);
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert!(id.starts_with("var-"));
        let v1 = a["version-id"].as_str().unwrap_or_default().to_owned();
        assert!(!v1.is_empty());
        let one = format!("{}/{id}", vars());
        let (st, doc) = h
            .call("PATCH", &one, Some(json!({"data": {"type": "vars", "attributes": {"value": "eu", "description": "where"}}})))
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["attributes"]["value"], "eu");
        assert_eq!(doc["data"]["attributes"]["description"], "where");
        let v2 = doc["data"]["attributes"]["version-id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_ne!(v1, v2);
        // Make it sensitive: the value moves to a Secret and is never shown again.
        let (st, doc) = h
            .call(
                "PATCH",
                &one,
                Some(json!({"data": {"type": "vars", "attributes": {"sensitive": true}}})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["attributes"]["value"], "");
        let obj = h
            .state
            .index
            .read()
            .test_variables()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| panic!("indexed"));
        assert_eq!(obj.spec.value, "");
        let secrets: Api<Secret> = Api::namespaced(h.admin.clone(), ORG);
        let s = secrets
            .get(&secret_name(&obj.name_any()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.data.and_then(|d| d.get(SECRET_KEY).cloned()).map(|b| b.0),
            Some(b"eu".to_vec())
        );
        assert_eq!(
            s.metadata.owner_references.map(|o| o[0].name.clone()),
            Some(obj.name_any())
        );
        let (st, doc) = h
            .call(
                "PATCH",
                &one,
                Some(json!({"data": {"type": "vars", "attributes": {"sensitive": false}}})),
            )
            .await;
        assert_eq!(st, 422);
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/attributes/sensitive"
        );
        // A sensitive create.
        let (st, doc) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "vars", "attributes": {"key": "TOKEN", "value": "hunter2", "category": "env", "sensitive": true}}})))
            .await;
        assert_eq!(st, 201, "{doc}");
        assert!(!doc.to_string().contains("hunter2"));
        let (st, doc) = h.call("GET", &vars(), None).await;
        assert_eq!(st, 200);
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        assert!(!doc.to_string().contains("hunter2") && !doc.to_string().contains("\"eu\""));
        // Bad fields: one error per field; a duplicate key.
        let (st, doc) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "vars", "attributes": {"key": "1bad", "category": "terraform", "sensitive": "no"}}})))
            .await;
        assert_eq!(st, 422);
        let mut pointers: Vec<&str> = doc["errors"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|x| x["source"]["pointer"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        pointers.sort_unstable();
        assert_eq!(
            pointers,
            [
                "/data/attributes/category",
                "/data/attributes/key",
                "/data/attributes/sensitive"
            ]
        );
        let (st, _) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "vars", "attributes": {"key": "TOKEN", "category": "env"}}})))
            .await;
        assert_eq!(st, 422);
        let (st, _) = h
            .call(
                "POST",
                &vars(),
                Some(json!({"data": {"type": "vars", "attributes": {"key": "X"}}})),
            )
            .await;
        assert_eq!(st, 422);
        // Delete.
        assert_eq!(h.call("DELETE", &one, None).await.0, 204);
        assert_eq!(h.call("DELETE", &one, None).await.0, 404);
        assert_eq!(
            h.call(
                "PATCH",
                &one,
                Some(json!({"data": {"type": "vars", "attributes": {}}}))
            )
            .await
            .0,
            404
        );
        let (_, doc) = h.call("GET", &vars(), None).await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            h.call(
                "GET",
                "/api/v2/organizations/acme/tests/registry-modules/private/acme/nope/aws/vars",
                None
            )
            .await
            .0,
            404
        );
    }

    /// go-tfe decodes test variables with its workspace variable type: no `configurable`
    /// relationship; `hcl` is stored and returned; a description over 512 characters is
    /// 422 with its pointer; one variable is readable by ID (404 for another); the list
    /// is paginated like every list.
    #[tokio::test]
    async fn what_go_tfe_expects_of_test_variables() {
        let h = Mh::with_module().await;
        let (st, doc) = h
            .call("POST", &vars(), Some(json!({"data": {"type": "vars", "attributes": {"key": "REGION", "value": "{a = 1}", "category": "env", "hcl": true}}})))
            .await;
        assert_eq!(st, 201, "{doc}");
        assert!(doc["data"].get("relationships").is_none(), "{doc}");
        assert_eq!(doc["data"]["attributes"]["hcl"], true);
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let one = format!("{}/{id}", vars());
        let (st, doc) = h.call("GET", &one, None).await;
        assert_eq!(
            (st, doc["data"]["attributes"]["key"].as_str()),
            (200, Some("REGION"))
        );
        assert_eq!(doc["data"]["attributes"]["hcl"], true);
        let (st, doc) = h
            .call(
                "PATCH",
                &one,
                Some(
                    json!({"data": {"type": "vars", "attributes": {"hcl": false, "value": "eu"}}}),
                ),
            )
            .await;
        assert_eq!(
            (st, doc["data"]["attributes"]["hcl"].as_bool()),
            (200, Some(false))
        );
        assert_eq!(
            h.call("GET", &format!("{}/var-nope", vars()), None).await.0,
            404
        );
        let (st, doc) = h
            .call("PATCH", &one, Some(json!({"data": {"type": "vars", "attributes": {"description": "d".repeat(513)}}})))
            .await;
        assert_eq!(st, 422, "{doc}");
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/attributes/description"
        );
        assert_eq!(doc["errors"][0]["title"], "invalid attribute");
        for i in 0..3 {
            let (st, _) = h
                .call("POST", &vars(), Some(json!({"data": {"type": "vars", "attributes": {"key": format!("K{i}"), "category": "env"}}})))
                .await;
            assert_eq!(st, 201);
        }
        let (st, doc) = h
            .call(
                "GET",
                &format!("{}?page%5Bsize%5D=2&page%5Bnumber%5D=2", vars()),
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        assert_eq!(doc["meta"]["pagination"]["total-count"], 4);
        assert_eq!(doc["meta"]["pagination"]["current-page"], 2);
    }
}
