//! Private registry modules: list, create, show and delete (`registry-modules`), the part
//! of the registry API the engine's CLI reads before a cloud test run. A module is a
//! RegistryModule object; its ID is derived from (namespace, name, provider), and so is
//! its object name, so two concurrent creates of one module meet at the Kubernetes API
//! (AlreadyExists) instead of both succeeding. Deleting a module deletes its test runs,
//! test variables and configuration versions through their ownerReferences.

use kube::api::PostParams;
use terrace_crds::{RegistryModule, RegistryModuleSpec};

use super::locate_path;
use crate::prelude::*;
use crate::render::stable_id;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/registry-modules",
            get(list_modules).post(create),
        )
        .route(
            "/api/v2/organizations/{org}/registry-modules/private/{namespace}/{name}/{provider}",
            get(show).patch(update).delete(delete_provider),
        )
        .route(
            "/api/v2/organizations/{org}/registry-modules/private/{namespace}/{name}",
            delete(delete_name),
        )
        .route(
            "/api/v2/registry-modules/actions/delete/{org}/{name}",
            post(delete_by_action),
        )
}

/// The JSON:API `data` of a module; `can_delete`: whether the caller may delete it.
pub fn render(m: &RegistryModule, org: &Organization, can_delete: bool) -> Value {
    render_with(m, org, can_delete, &[])
}

/// [`render`] with the module's `version-statuses`.
pub fn render_with(
    m: &RegistryModule,
    org: &Organization,
    can_delete: bool,
    versions: &[Value],
) -> Value {
    let namespace = m
        .spec
        .namespace
        .clone()
        .unwrap_or_else(|| org.tfe_name().to_owned());
    json!({
        "id": id_of(m),
        "type": "registry-modules",
        "attributes": {
            "name": m.spec.name,
            "namespace": namespace,
            "provider": m.spec.provider,
            "registry-name": m.spec.registry_name,
            "status": "setup_complete",
            "version-statuses": versions,
            "test-config": {
                "tests-enabled": true,
                "publish-only-tested": super::versions::publish_only_tested(m, org),
            },
            "no-code": false,
            "created-at": created_at(m),
            "updated-at": created_at(m),
            "permissions": {"can-delete": can_delete, "can-resync": false, "can-retry": false},
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
        },
        "links": {"self": format!("/api/v2/organizations/{}/registry-modules/private/{namespace}/{}/{}", org.tfe_name(), m.spec.name, m.spec.provider)},
    })
}

async fn org_checked(
    state: &AppState,
    caller: &Caller,
    org: &str,
    verb: &'static str,
) -> Result<Arc<Organization>, ApiError> {
    let o = state.org(org).await?;
    let ok = state
        .allowed(
            caller,
            &Check::new(verb, "registrymodules", o.target_namespace(), None),
        )
        .await?;
    if ok {
        Ok(o)
    } else {
        Err(ApiError::not_found("organization not found"))
    }
}

/// Whether the caller may delete modules of `org`.
async fn may_delete(
    state: &AppState,
    caller: &Caller,
    org: &Organization,
) -> Result<bool, ApiError> {
    state
        .allowed(
            caller,
            &Check::new("delete", "registrymodules", org.target_namespace(), None),
        )
        .await
}

async fn list_modules(
    Authed { state, caller }: Authed,
    Path(org): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    // A visible organization answers its list, empty for a caller who may not list its
    // modules, as every other list does (docs/rbac.md).
    let o = state.org(&org).await?;
    let may_list = state
        .allowed(
            &caller,
            &Check::new("list", "registrymodules", o.target_namespace(), None),
        )
        .await?;
    if !may_list {
        state.visible_org(&caller, &org).await?;
    }
    let page = q.page()?;
    q.supported_filters(&[
        "filter[provider]",
        "filter[registry_name]",
        "filter[organization_name]",
    ])?;
    let text = q.non_empty("q").map(str::to_ascii_lowercase);
    let provider = q.non_empty("filter[provider]");
    let registry = q.non_empty("filter[registry_name]");
    let org_filter = q.non_empty("filter[organization_name]");
    let mut mods: Vec<_> = {
        let idx = state.index.read();
        idx.registry_modules()
            .in_namespace(o.target_namespace())
            .filter(|_| may_list)
            .filter(|m| !id_of(m.as_ref()).is_empty())
            .filter(|m| {
                text.as_deref()
                    .is_none_or(|t| m.spec.name.to_ascii_lowercase().contains(t))
                    && provider.is_none_or(|p| m.spec.provider == p)
                    && registry.is_none_or(|r| m.spec.registry_name == r)
                    && org_filter.is_none_or(|n| n == o.tfe_name())
            })
            .cloned()
            .collect()
    };
    mods.sort_by(|a, b| (&a.spec.name, &a.spec.provider).cmp(&(&b.spec.name, &b.spec.provider)));
    let can_delete = may_delete(&state, &caller, &o).await?;
    let base = format!("/api/v2/organizations/{org}/registry-modules");
    let idx = state.index.read();
    Ok(list(&base, page, &mods, |m| {
        render_with(
            m,
            &o,
            can_delete,
            &super::versions::version_statuses(&idx, m, &o),
        )
    }))
}

async fn show(
    Authed { state, caller }: Authed,
    Path(path): Path<super::ModulePath>,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "get", "registrymodules").await?;
    module_doc(&state, &caller, &m.module, &m.org).await
}

/// The document of module `m` as `caller` sees it: its versions, whether they may delete it.
async fn module_doc(
    state: &AppState,
    caller: &Caller,
    m: &RegistryModule,
    org: &Organization,
) -> Result<Doc, ApiError> {
    let can_delete = may_delete(state, caller, org).await?;
    let statuses = super::versions::version_statuses(&state.index.read(), m, org);
    Ok(Doc::ok(render_with(m, org, can_delete, &statuses)))
}

/// Deletes the modules of `org` named `name` (every provider, or only `provider`) that
/// the caller may see; 404 when there is none, 403 without `delete`.
async fn delete_modules(
    state: &AppState,
    caller: &Caller,
    org: &str,
    namespace: &str,
    name: &str,
    provider: Option<&str>,
) -> Result<Response, ApiError> {
    let o = org_checked(state, caller, org, "get").await?;
    if namespace != o.tfe_name() {
        return Err(super::module_not_found());
    }
    let targets: Vec<Arc<RegistryModule>> = state
        .index
        .read()
        .registry_modules()
        .in_namespace(o.target_namespace())
        .filter(|m| !id_of(m.as_ref()).is_empty())
        .filter(|m| m.spec.name == name && provider.is_none_or(|p| m.spec.provider == p))
        .cloned()
        .collect();
    if targets.is_empty() {
        return Err(super::module_not_found());
    }
    if !may_delete(state, caller, &o).await? {
        return Err(ApiError::forbidden(
            "deleting registry modules needs the owners team",
        ));
    }
    for m in targets {
        match write::delete(state, m.as_ref()).await {
            Ok(()) | Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(no_content())
}

/// `PATCH /organizations/:org/registry-modules/private/:namespace/:name/:provider`: the
/// module's `test-config` (`publish-only-tested`; `null` follows the organization's
/// default). Needs `update` on `registrymodules`.
async fn update(
    Authed { state, caller }: Authed,
    Path(path): Path<super::ModulePath>,
    JsonApi(doc): JsonApi<Document<ModuleAttributes>>,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "get", "registrymodules").await?;
    state
        .require_or_403(
            &caller,
            &m.check("update", "registrymodules"),
            "changing registry modules needs the owners team",
        )
        .await?;
    let attrs = doc.checked()?.attributes;
    let renamed = attrs
        .name
        .as_ref()
        .is_some_and(|n| *n != m.module.spec.name)
        || attrs
            .provider
            .as_ref()
            .is_some_and(|p| *p != m.module.spec.provider);
    if renamed {
        return Err(ApiError::invalid_attribute(
            "name",
            "a module's name and provider cannot change; publish a new module",
        ));
    }
    let updated = match attrs.test_config {
        Some(TestConfig {
            publish_only_tested: Some(gate),
        }) => {
            write::guarded_patch(
                &write::api::<RegistryModule>(&state, &m.ns),
                (*m.module).clone(),
                |_| Ok(Some(json!({"spec": {"publishOnlyTested": gate}}))),
            )
            .await?
        }
        _ => (*m.module).clone(),
    };
    write::wait_seen(&state, &updated).await;
    module_doc(&state, &caller, &updated, &m.org).await
}

/// `DELETE /organizations/:org/registry-modules/private/:namespace/:name/:provider`.
async fn delete_provider(
    Authed { state, caller }: Authed,
    Path((org, namespace, name, provider)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    delete_modules(&state, &caller, &org, &namespace, &name, Some(&provider)).await
}

/// `DELETE /organizations/:org/registry-modules/private/:namespace/:name`: every provider.
async fn delete_name(
    Authed { state, caller }: Authed,
    Path((org, namespace, name)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    delete_modules(&state, &caller, &org, &namespace, &name, None).await
}

/// `POST /registry-modules/actions/delete/:org/:name` (go-tfe's Delete): every provider.
async fn delete_by_action(
    Authed { state, caller }: Authed,
    Path((org, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    delete_modules(&state, &caller, &org, &org, &name, None).await
}

/// The attributes of a module create.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ModuleAttributes {
    name: Option<String>,
    provider: Option<String>,
    namespace: Option<String>,
    registry_name: Option<String>,
    test_config: Option<TestConfig>,
}

/// A module's `test-config`: TFE's `tests-enabled` (tests always run here) and terrace's
/// `publish-only-tested` (null: the organization's default).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct TestConfig {
    #[serde(default, deserialize_with = "nullable")]
    publish_only_tested: Nullable<bool>,
}

impl Typed for ModuleAttributes {
    const TYPE: &'static str = "registry-modules";
}

fn matches_pattern(s: &str, allowed: impl Fn(char) -> bool) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(allowed)
}

async fn create(
    Authed { state, caller }: Authed,
    Path(org): Path<String>,
    JsonApi(doc): JsonApi<Document<ModuleAttributes>>,
) -> Result<Doc, ApiError> {
    let o = org_checked(&state, &caller, &org, "get").await?;
    state
        .require_or_403(
            &caller,
            &Check::new("create", "registrymodules", o.target_namespace(), None),
            "creating registry modules needs the owners team",
        )
        .await?;
    let attrs = doc.checked()?.attributes;
    let name = attrs.name.unwrap_or_default();
    let provider = attrs.provider.unwrap_or_default();
    let namespace = attrs.namespace.unwrap_or_else(|| o.tfe_name().to_owned());
    let registry = attrs.registry_name.unwrap_or_else(|| "private".into());
    if !matches_pattern(&name, |c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(ApiError::invalid(
            "/data/attributes/name",
            "name is required: 1-64 letters, numbers, dashes and underscores",
        ));
    }
    if !matches_pattern(&provider, |c| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return Err(ApiError::invalid(
            "/data/attributes/provider",
            "provider is required: 1-64 lowercase letters and numbers",
        ));
    }
    if registry != "private" {
        return Err(ApiError::invalid(
            "/data/attributes/registry-name",
            "only the private registry is served",
        ));
    }
    if namespace != o.tfe_name() {
        return Err(ApiError::invalid(
            "/data/attributes/namespace",
            "the namespace of a private module is the organization's name",
        ));
    }
    let ns = o.target_namespace().to_owned();
    let taken_detail = format!("module {name}/{provider} has already been taken");
    let taken = || ApiError::invalid_attribute("name", taken_detail.clone());
    if super::find_module(&state.index.read(), &ns, &name, &provider).is_some() {
        return Err(taken());
    }
    let id = stable_id("mod-", &[&ns, &name, &provider]);
    let obj = RegistryModule {
        metadata: write::new_meta(&id, &ns, o.name_any(), &[]),
        spec: RegistryModuleSpec {
            name,
            provider,
            namespace: Some(namespace),
            registry_name: registry,
            publish_only_tested: attrs
                .test_config
                .and_then(|t| t.publish_only_tested.flatten()),
        },
        status: None,
    };
    let created = match write::api::<RegistryModule>(&state, &ns)
        .create(&PostParams::default(), &obj)
        .await
    {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 => return Err(taken()),
        Err(e) => return Err(ApiError::from(e)),
    };
    write::wait_seen(&state, &created).await;
    let can_delete = may_delete(&state, &caller, &o).await?;
    Ok(Doc::created(render(&created, &o, can_delete)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::testing::*;

    /// Create, show, list, a duplicate (422), bad fields (422 with pointers), unknown
    /// organization and module (404), a caller without rights (404).
    #[tokio::test]
    async fn registry_module_lifecycle() {
        let h = Mh::start().await;
        let base = "/api/v2/organizations/acme/registry-modules";
        let (st, doc) = h
            .call("POST", base, Some(json!({"data": {"type": "registry-modules", "attributes": {"name": "vpc", "provider": "aws"}}})))
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert!(id.starts_with("mod-"), "{id}");
        assert_eq!(doc["data"]["attributes"]["namespace"], "acme");
        let (st, doc) = h
            .call("GET", &format!("{base}/private/acme/vpc/aws"), None)
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["id"], id.as_str());
        let (st, doc) = h.call("GET", base, None).await;
        assert_eq!(st, 200);
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));
        assert_eq!(doc["meta"]["pagination"]["total-count"], 1);
        let (st, doc) = h
            .call("POST", base, Some(json!({"data": {"type": "registry-modules", "attributes": {"name": "vpc", "provider": "aws"}}})))
            .await;
        assert_eq!(st, 422, "{doc}");
        for (attrs, pointer) in [
            (json!({"provider": "aws"}), "/data/attributes/name"),
            (json!({"name": "x"}), "/data/attributes/provider"),
            (
                json!({"name": "x y", "provider": "aws"}),
                "/data/attributes/name",
            ),
            (
                json!({"name": "x", "provider": "aws", "namespace": "other"}),
                "/data/attributes/namespace",
            ),
        ] {
            let (st, doc) = h
                .call(
                    "POST",
                    base,
                    Some(json!({"data": {"type": "registry-modules", "attributes": attrs}})),
                )
                .await;
            assert_eq!(st, 422, "{doc}");
            assert_eq!(doc["errors"][0]["source"]["pointer"], pointer);
        }
        for path in [
            format!("{base}/private/acme/nope/aws"),
            format!("{base}/private/other/vpc/aws"),
            "/api/v2/organizations/nope/registry-modules/private/nope/vpc/aws".to_owned(),
            "/api/v2/organizations/nope/registry-modules".to_owned(),
        ] {
            assert_eq!(h.call("GET", &path, None).await.0, 404, "{path}");
        }
        let nobody = h.token_with_role(None).await;
        assert_eq!(h.call_as(&nobody, "GET", base, None).await.0, 404);
        assert_eq!(
            h.call_as(
                &nobody,
                "GET",
                &format!("{base}/private/acme/vpc/aws"),
                None
            )
            .await
            .0,
            404
        );
    }

    /// go-tfe's three deletes answer 204 and delete the module with what it owns; the
    /// list honours `q` and the filters; `permissions.can-delete` is the caller's right.
    #[tokio::test]
    async fn delete_filters_and_permissions() {
        let h = Mh::start().await;
        let base = "/api/v2/organizations/acme/registry-modules";
        for (name, provider) in [
            ("vpc", "aws"),
            ("vpc", "gcp"),
            ("dns", "aws"),
            ("db", "aws"),
        ] {
            let (st, _) = h
                .call("POST", base, Some(json!({"data": {"type": "registry-modules", "attributes": {"name": name, "provider": provider}}})))
                .await;
            assert_eq!(st, 201);
        }
        let names = |doc: &serde_json::Value| -> Vec<String> {
            doc["data"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|m| {
                            format!(
                                "{}/{}",
                                m["attributes"]["name"].as_str().unwrap_or(""),
                                m["attributes"]["provider"].as_str().unwrap_or("")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let (_, doc) = h.call("GET", &format!("{base}?q=vp"), None).await;
        assert_eq!(names(&doc), ["vpc/aws", "vpc/gcp"]);
        let (_, doc) = h.call("GET", &format!("{base}?filter%5Bprovider%5D=aws&filter%5Bregistry_name%5D=private&filter%5Borganization_name%5D=acme"), None).await;
        assert_eq!(names(&doc), ["db/aws", "dns/aws", "vpc/aws"]);
        assert_eq!(
            doc["data"][0]["attributes"]["permissions"]["can-delete"],
            true
        );
        let (_, doc) = h
            .call(
                "GET",
                &format!("{base}?filter%5Bregistry_name%5D=public"),
                None,
            )
            .await;
        assert_eq!(names(&doc), Vec::<String>::new());
        let (st, _) = h
            .call("GET", &format!("{base}?filter%5Bnamespace%5D=x"), None)
            .await;
        assert_eq!(st, 400, "an unsupported filter is refused, not ignored");
        let reader = h
            .token_with_role(Some(vec![rule(&["get", "list"], &["registrymodules"])]))
            .await;
        let (_, doc) = h.call_as(&reader, "GET", base, None).await;
        assert_eq!(
            doc["data"][0]["attributes"]["permissions"]["can-delete"],
            false
        );
        assert_eq!(
            h.call_as(
                &reader,
                "DELETE",
                &format!("{base}/private/acme/db/aws"),
                None
            )
            .await
            .0,
            403
        );
        // DeleteProvider, DeleteByName, the deprecated action.
        assert_eq!(
            h.call("DELETE", &format!("{base}/private/acme/vpc/gcp"), None)
                .await
                .0,
            204
        );
        assert_eq!(
            h.call("GET", &format!("{base}/private/acme/vpc/gcp"), None)
                .await
                .0,
            404
        );
        assert_eq!(
            h.call("GET", &format!("{base}/private/acme/vpc/aws"), None)
                .await
                .0,
            200
        );
        assert_eq!(
            h.call("DELETE", &format!("{base}/private/acme/vpc"), None)
                .await
                .0,
            204
        );
        assert_eq!(
            h.call("GET", &format!("{base}/private/acme/vpc/aws"), None)
                .await
                .0,
            404
        );
        assert_eq!(
            h.call(
                "POST",
                "/api/v2/registry-modules/actions/delete/acme/dns",
                None
            )
            .await
            .0,
            204
        );
        assert_eq!(
            h.call("DELETE", &format!("{base}/private/acme/dns"), None)
                .await
                .0,
            404
        );
        let (_, doc) = h.call("GET", base, None).await;
        assert_eq!(names(&doc), ["db/aws"]);
    }
}
