//! Publishing registry module versions (TFE's registry module versions API,
//! docs/registry.md):
//!
//! - `POST /organizations/:org/registry-modules/private/:ns/:name/:provider/versions` and
//!   go-tfe's `POST /registry-modules/:org/:name/:provider/versions` create a version
//!   (`version`, semver; `commit-sha`) and answer its document with an `upload` link;
//! - `GET /organizations/:org/registry-modules/private/:ns/:name/:provider/version?module_version=V`
//!   reads one; `DELETE …/:provider/:version` deletes one.
//!
//! A version is a ModuleVersion object owned by its RegistryModule; its archive is a
//! configuration version of the module owned by the version, so the upload, its checks,
//! the blob store and the automatic test run of the archive's tests are the configuration
//! versions' (see [`crate::resources::module_tests::config_versions`]). What a version's state is and whether it
//! may be installed are [`terrace_crds::registry`]'s rules. Rights: `create`, `get`,
//! `delete` on `moduleversions` in the organization's namespace.

use std::collections::HashMap;

use axum::http::HeaderMap;
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::registry::doc::ModuleDoc;
use terrace_crds::registry::{
    VersionFacts, deprecation, installable, parse_version, version_facts, why_not_offered,
};
use terrace_crds::resources::{ConfigurationVersionSpec, ModuleVersionSpec, VersionDeprecation};
use terrace_crds::{ConfigurationVersion, ModuleVersion, RegistryModule, TestRun};

use super::{Module, ModulePath, locate, locate_path};
use crate::documents::config_versions::{
    create_pending_raw, module_version_pending_meta, module_version_upload_url,
};
use crate::index::Inner;
use crate::prelude::*;
use crate::render::stable_id;

/// The RBAC resource of module versions.
pub const RESOURCE: &str = "moduleversions";

pub fn router() -> Router<AppState> {
    const MODULE: &str =
        "/api/v2/organizations/{org}/registry-modules/private/{namespace}/{name}/{provider}";
    Router::new()
        .route(&format!("{MODULE}/versions"), post(create_at))
        .route(
            "/api/v2/registry-modules/{org}/{name}/{provider}/versions",
            post(create_short),
        )
        .route(&format!("{MODULE}/version"), get(read))
        .route(
            &format!("{MODULE}/{{version}}"),
            delete(remove).patch(deprecate),
        )
}

/// The module's versions (any order).
pub fn versions_of<'a>(idx: &'a Inner, m: &RegistryModule) -> Vec<&'a Arc<ModuleVersion>> {
    let ns = m.namespace().unwrap_or_default();
    let object = m.name_any();
    idx.module_versions()
        .in_namespace(&ns)
        .filter(|v| v.spec.module == object)
        .collect()
}

/// Whether module `m` of organization `org` publishes only tested versions.
pub fn publish_only_tested(m: &RegistryModule, org: &Organization) -> bool {
    m.spec
        .publish_only_tested
        .unwrap_or(org.spec.settings.test_runs.publish_only_tested)
}

/// The configuration versions and test runs of one namespace by configuration version
/// name, gathered once per request: what a version is comes from them.
pub struct Lookup<'a> {
    cvs: HashMap<&'a str, &'a ConfigurationVersion>,
    runs: HashMap<&'a str, Vec<&'a TestRun>>,
}

impl<'a> Lookup<'a> {
    /// The lookup of namespace `ns`.
    pub fn of(idx: &'a Inner, ns: &str) -> Lookup<'a> {
        let cvs = idx
            .configuration_versions()
            .in_namespace(ns)
            .filter(|c| c.spec.module.is_some())
            .map(|c| (c.metadata.name.as_deref().unwrap_or_default(), c.as_ref()))
            .collect();
        let mut runs: HashMap<&str, Vec<&TestRun>> = HashMap::new();
        for r in idx.test_runs().in_namespace(ns) {
            runs.entry(r.spec.configuration_version.as_str())
                .or_default()
                .push(r.as_ref());
        }
        Lookup { cvs, runs }
    }

    /// What version `v` is ([`version_facts`]: its configuration version and that
    /// configuration version's newest test run).
    pub fn facts(&self, v: &ModuleVersion) -> VersionFacts {
        let cv = v.spec.configuration_version.as_deref().unwrap_or_default();
        let runs = self.runs.get(cv).into_iter().flatten().copied();
        version_facts(self.cvs.get(cv).copied(), runs)
    }

    /// What version `v`'s modules hold, read when its archive was uploaded (None before,
    /// and for versions uploaded before terrace described them).
    pub fn doc(&self, v: &ModuleVersion) -> Option<&'a ModuleDoc> {
        let cv = v.spec.configuration_version.as_deref().unwrap_or_default();
        self.cvs
            .get(cv)
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.module_doc.as_ref())
    }

    /// Whether version `v` of `m` may be installed.
    pub fn installable(&self, v: &ModuleVersion, m: &RegistryModule, org: &Organization) -> bool {
        let f = self.facts(v);
        installable(f.state, f.tests, publish_only_tested(m, org))
    }
}

/// What the index says of version `v` (one version; [`Lookup`] for many).
pub fn facts(idx: &Inner, v: &ModuleVersion) -> VersionFacts {
    Lookup::of(idx, &v.namespace().unwrap_or_default()).facts(v)
}

/// The JSON:API `data` of version `v` of module `m`.
pub fn render(idx: &Inner, v: &ModuleVersion, m: &RegistryModule, org: &Organization) -> Value {
    let f = facts(idx, v);
    let ns_name = m
        .spec
        .namespace
        .clone()
        .unwrap_or_else(|| org.tfe_name().to_owned());
    let gate = publish_only_tested(m, org);
    json!({
        "id": id_of(v),
        "type": "registry-module-versions",
        "attributes": {
            "source": "tfe-api",
            "status": f.state,
            "error": f.error,
            "version": v.spec.version,
            "commit-sha": v.spec.commit_sha,
            "test-status": f.tests,
            "installable": installable(f.state, f.tests, gate),
            "created-at": created_at(v),
            "updated-at": created_at(v),
            "deprecation": deprecation_json(v),
        },
        "relationships": {
            "registry-module": {"data": {"id": id_of(m), "type": "registry-modules"}},
            "deprecation": {"data": v.spec.deprecation.as_ref().map(|_| json!({"id": id_of(v), "type": "deprecations"}))},
            "test-run": {"data": f.test_run.map(|id| json!({"id": id, "type": "test-runs"}))},
        },
        "links": {
            "self": format!(
                "/api/v2/organizations/{}/registry-modules/private/{ns_name}/{}/{}/version?module_version={}",
                org.tfe_name(), m.spec.name, m.spec.provider, v.spec.version
            ),
        },
    })
}

/// The module's `version-statuses`: each version, newest first, with TFE's `version`,
/// `status` and `error`, and terrace's `test-status`, `test-run` (its ID), `installable`
/// and `not-offered-because` (why `terraform init` does not get it, else null).
pub fn version_statuses(idx: &Inner, m: &RegistryModule, org: &Organization) -> Vec<Value> {
    let lookup = Lookup::of(idx, &m.namespace().unwrap_or_default());
    let gate = publish_only_tested(m, org);
    let mut all = versions_of(idx, m);
    all.sort_by_cached_key(|v| std::cmp::Reverse(parse_version(&v.spec.version)));
    all.into_iter()
        .map(|v| {
            let f = lookup.facts(v);
            json!({
                "version": v.spec.version,
                "status": f.state,
                "error": f.error.clone().unwrap_or_default(),
                "test-status": f.tests,
                "test-run": f.test_run,
                "installable": installable(f.state, f.tests, gate),
                "not-offered-because": why_not_offered(f.state, f.error.as_deref(), f.tests, gate),
            })
        })
        .collect()
}

/// The attributes of a version request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct VersionAttributes {
    version: Option<String>,
    commit_sha: Option<String>,
}

impl Typed for VersionAttributes {
    const TYPE: &'static str = "registry-module-versions";
}

async fn create_at(
    Authed { state, caller }: Authed,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<VersionAttributes>>,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "get", RESOURCE).await?;
    create(&state, &caller, &headers, m, doc).await
}

async fn create_short(
    Authed { state, caller }: Authed,
    Path((org, name, provider)): Path<(String, String, String)>,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<VersionAttributes>>,
) -> Result<Doc, ApiError> {
    let m = locate(
        &state,
        &caller,
        (&org, &org, &name, &provider),
        "get",
        RESOURCE,
    )
    .await?;
    create(&state, &caller, &headers, m, doc).await
}

/// Creates the version and its pending configuration version; answers the version with
/// the upload link (`GET …/version` shows the same link while it works).
async fn create(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    m: Module,
    doc: Document<VersionAttributes>,
) -> Result<Doc, ApiError> {
    // A caller who can read the module is told it may not publish (docs/rbac.md).
    state
        .require_or_403(
            caller,
            &m.check("create", RESOURCE),
            "publishing module versions needs the right to create them",
        )
        .await?;
    let a = doc.checked()?.attributes;
    let version = a.version.unwrap_or_default();
    if parse_version(&version).is_none() {
        return Err(ApiError::invalid_attribute(
            "version",
            format!("{version:?} is not a semantic version such as 1.2.0"),
        ));
    }
    let taken = || {
        ApiError::invalid_attribute(
            "version",
            format!("version {version} has already been taken"),
        )
    };
    let object = m.object_name();
    let exists = versions_of(&state.index.read(), &m.module)
        .iter()
        .any(|v| parse_version(&v.spec.version) == parse_version(&version));
    if exists {
        return Err(taken());
    }
    let id = stable_id("modver-", &[&m.ns, &object, &version]);
    let cv_id = new_id(IdKind::ConfigurationVersion);
    let mv = ModuleVersion {
        metadata: m.child_meta(&id),
        spec: ModuleVersionSpec {
            module: object.clone(),
            version: version.clone(),
            commit_sha: a.commit_sha.filter(|s| !s.is_empty()),
            configuration_version: Some(object_name_for_id(&cv_id)),
            deprecation: None,
        },
        status: None,
    };
    let created = match write::api::<ModuleVersion>(state, &m.ns)
        .create(&Default::default(), &mv)
        .await
    {
        Ok(c) => c,
        Err(kube::Error::Api(s)) if s.code == 409 => return Err(taken()),
        Err(e) => return Err(ApiError::from(e)),
    };
    // The archive: a configuration version of the module owned by the version, whose
    // upload queues the run of the archive's tests.
    let mut base = m.child_meta(&cv_id);
    base.owner_references = created.controller_owner_ref(&()).map(|o| vec![o]);
    let (token, metadata) = module_version_pending_meta(state, &cv_id, base)?;
    let cv = ConfigurationVersion {
        metadata,
        spec: ConfigurationVersionSpec {
            ingress_attributes: None,
            module: Some(object),
            workspace: None,
            auto_queue_runs: true,
            speculative: false,
            source: "svc-api".to_owned(),
            provisional: false,
        },
        status: None,
    };
    let upload = create_pending_raw(state, headers, &cv, &cv_id, &token).await?;
    write::wait_seen(state, &created).await;
    let mut data = render(&state.index.read(), &created, &m.module, &m.org);
    data["links"]["upload"] = json!(upload);
    Ok(Doc::created(data))
}

/// The version of module `m` whose version string is `version`.
fn find<'a>(idx: &'a Inner, m: &RegistryModule, version: &str) -> Option<&'a Arc<ModuleVersion>> {
    let want = parse_version(version)?;
    versions_of(idx, m)
        .into_iter()
        .find(|v| parse_version(&v.spec.version).as_ref() == Some(&want))
}

fn version_not_found() -> ApiError {
    ApiError::not_found("registry module version not found")
}

/// `GET …/version?module_version=V`: the version, with its `upload` link while it works
/// (the link create answered: an upload may be made again until a test run used the
/// archive), to a caller who may publish versions.
async fn read(
    Authed { state, caller }: Authed,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "get", RESOURCE).await?;
    let version = q
        .non_empty("module_version")
        .ok_or_else(|| ApiError::bad_parameter("module_version", "module_version is required"))?;
    let may_upload = state.allowed(&caller, &m.check("create", RESOURCE)).await?;
    let idx = state.index.read();
    let v = find(&idx, &m.module, version).ok_or_else(version_not_found)?;
    let mut data = render(&idx, v, &m.module, &m.org);
    let upload = v
        .spec
        .configuration_version
        .as_deref()
        .filter(|_| may_upload)
        .and_then(|cv| {
            idx.configuration_versions()
                .in_namespace(&m.ns)
                .find(|c| c.name_any() == cv)
        })
        .and_then(|cv| module_version_upload_url(&state, &headers, cv));
    if let Some(u) = upload {
        data["links"]["upload"] = json!(u);
    }
    Ok(Doc::ok(data))
}
/// The module and version `path` names, readable by the caller (404 otherwise), if the
/// caller may also `verb` module versions (403 with `denial` otherwise).
async fn version_for(
    state: &AppState,
    caller: &Caller,
    (org, namespace, name, provider, version): (&str, &str, &str, &str, &str),
    verb: &'static str,
    denial: &'static str,
) -> Result<(Module, Arc<ModuleVersion>), ApiError> {
    let m = locate(
        state,
        caller,
        (org, namespace, name, provider),
        "get",
        RESOURCE,
    )
    .await?;
    let v = find(&state.index.read(), &m.module, version)
        .cloned()
        .ok_or_else(version_not_found)?;
    state
        .require_or_403(caller, &m.check(verb, RESOURCE), denial)
        .await?;
    Ok((m, v))
}

async fn remove(
    Authed { state, caller }: Authed,
    Path((org, namespace, name, provider, version)): Path<(String, String, String, String, String)>,
) -> Result<Response, ApiError> {
    let (_, v) = version_for(
        &state,
        &caller,
        (&org, &namespace, &name, &provider, &version),
        "delete",
        "deleting module versions needs the right to delete them",
    )
    .await?;
    // Its configuration version (and so its archive) is owned by it.
    write::delete_if_present(&state, v.as_ref()).await?;
    Ok(no_content())
}

/// The attributes of a deprecation request (TFE's manage module versions API).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct DeprecateAttributes {
    deprecation: Option<DeprecationRequest>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct DeprecationRequest {
    deprecated_status: Option<String>,
    reason: Option<String>,
    link: Option<String>,
}

impl Typed for DeprecateAttributes {
    const TYPE: &'static str = "module-versions";
}

/// The deprecation a request asks for: `Deprecated` with an optional reason and link, or
/// `Undeprecated` (None).
fn requested_deprecation(a: DeprecateAttributes) -> Result<Option<VersionDeprecation>, ApiError> {
    const STATUS: &str = "deprecation/deprecated-status";
    let d = a
        .deprecation
        .ok_or_else(|| ApiError::invalid_attribute("deprecation", "deprecation is required"))?;
    match d.deprecated_status.as_deref() {
        Some("Deprecated") => {}
        Some("Undeprecated") => return Ok(None),
        other => {
            return Err(ApiError::invalid_attribute(
                STATUS,
                format!(
                    "deprecated-status must be \"Deprecated\" or \"Undeprecated\", got {other:?}"
                ),
            ));
        }
    }
    deprecation(d.reason, d.link)
        .map(Some)
        .map_err(|(field, message)| ApiError::invalid_attribute(field, message))
}

/// `PATCH /organizations/:org/registry-modules/private/:ns/:name/:provider/:version`:
/// deprecates a version (`deprecated-status: Deprecated`, with a reason and a link) or
/// reverts that (`Undeprecated`). A deprecated version stays installable; the registry's
/// documents show the deprecation and remote runs that install it warn. Needs `update`
/// on `moduleversions`.
async fn deprecate(
    Authed { state, caller }: Authed,
    Path((org, namespace, name, provider, version)): Path<(String, String, String, String, String)>,
    JsonApi(doc): JsonApi<Document<DeprecateAttributes>>,
) -> Result<Doc, ApiError> {
    let (m, v) = version_for(
        &state,
        &caller,
        (&org, &namespace, &name, &provider, &version),
        "update",
        "deprecating module versions needs the owners team",
    )
    .await?;
    let wanted = requested_deprecation(doc.checked()?.attributes)?;
    let updated = write::patch_spec(
        &write::api::<ModuleVersion>(&state, &m.ns),
        (*v).clone(),
        |cur| Ok((cur.spec.deprecation != wanted).then(|| json!({"deprecation": wanted}))),
    )
    .await?;
    write::wait_seen(&state, &updated).await;
    let data = render(&state.index.read(), &updated, &m.module, &m.org);
    let included: Vec<Value> = updated
        .spec
        .deprecation
        .iter()
        .map(|d| {
            json!({"id": id_of(&updated), "type": "deprecations", "attributes": {
                "reason": d.reason, "link": d.link,
            }})
        })
        .collect();
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "included": included}),
    ))
}

/// A version's deprecation as the registry shows it (`reason`, `link`), or null.
pub fn deprecation_json(v: &ModuleVersion) -> Value {
    v.spec.deprecation.as_ref().map_or(Value::Null, |d| {
        json!({"reason": d.reason.clone().unwrap_or_default(), "link": d.link.clone().unwrap_or_default()})
    })
}
