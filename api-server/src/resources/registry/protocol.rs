//! The Module Registry Protocol (`modules.v1`, docs/registry.md), as the terraform CLI
//! speaks it to resolve `source = "HOST/ORG/NAME/PROVIDER"`:
//!
//! - `GET /api/registry/v1/modules/:ns/:name/:provider/versions`: the installable versions;
//! - `GET …/:provider/:version/download`: 204 with `X-Terraform-Get`, a short-lived
//!   capability URL of the archive (`/api/registry/v1/archives/:id/:token?archive=tar.gz`);
//! - `GET …/:provider/download`: a redirect to the latest version's download;
//! - `GET …/:provider` and `…/:provider/:version`: a module (latest) or a version;
//! - `GET /api/registry/v1/modules/search?q=`.
//!
//! `:ns` is the organization. The same tokens and RBAC as the rest of the API: reading
//! needs `get` on the module (`registrymodules`); anything else is 404. A version is
//! offered only while it is installable ([`super::versions::is_installable`]): uploaded,
//! and, when the module publishes only tested versions, passed its tests; a download of
//! another answers 404.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use terrace_crds::registry::doc::{self, ModuleDescription};
use terrace_crds::registry::{latest, parse_version};
use terrace_crds::{ModuleVersion, RegistryModule};

use super::versions::{Lookup, deprecation_json, versions_of};
use super::{Module, locate};
use crate::index::Inner;
use crate::prelude::*;

/// Where `modules.v1` is served (the discovery document names it).
pub const BASE: &str = "/api/registry/v1/modules/";
/// Purpose of the archives' capability tokens.
const ARCHIVE_PURPOSE: &str = "module-archive";
/// How long an `X-Terraform-Get` URL works.
const ARCHIVE_URL_TTL: Duration = Duration::from_secs(300);

pub fn router() -> Router<AppState> {
    const M: &str = "/api/registry/v1/modules/{namespace}/{name}/{provider}";
    Router::new()
        .route("/api/registry/v1/modules/search", get(search))
        .route(M, get(show_latest))
        .route(&format!("{M}/versions"), get(list_versions))
        .route(&format!("{M}/download"), get(download_latest))
        .route(&format!("{M}/{{version}}"), get(show_version))
        .route(&format!("{M}/{{version}}/download"), get(download))
        .route("/api/registry/v1/archives/{id}/{token}", get(archive))
}

type MPath = (String, String, String);

/// The module `ns/name/provider` the caller may read.
async fn module(
    state: &AppState,
    caller: &Caller,
    (ns, name, provider): &MPath,
) -> Result<Module, ApiError> {
    locate(
        state,
        caller,
        (ns, ns, name, provider),
        "get",
        "registrymodules",
    )
    .await
}

/// A module's installable versions, newest first, and what each is.
struct Offered<'a> {
    lookup: Lookup<'a>,
    versions: Vec<&'a Arc<ModuleVersion>>,
}

impl<'a> Offered<'a> {
    /// The installable versions of `m`.
    fn of(idx: &'a Inner, m: &Module) -> Offered<'a> {
        let lookup = Lookup::of(idx, &m.ns);
        let mut versions: Vec<&Arc<ModuleVersion>> = versions_of(idx, &m.module)
            .into_iter()
            .filter(|v| lookup.installable(v, &m.module, &m.org))
            .collect();
        versions.sort_by_cached_key(|v| std::cmp::Reverse(parse_version(&v.spec.version)));
        Offered { lookup, versions }
    }

    /// Version `version`, if offered.
    fn find(&self, version: &str) -> Result<&'a Arc<ModuleVersion>, ApiError> {
        let want = parse_version(version).ok_or_else(version_not_found)?;
        self.versions
            .iter()
            .find(|v| parse_version(&v.spec.version).as_ref() == Some(&want))
            .copied()
            .ok_or_else(version_not_found)
    }

    /// The latest offered version.
    fn latest(&self) -> Result<&'a ModuleVersion, ApiError> {
        latest(self.versions.iter().map(|v| Arc::as_ref(*v))).ok_or_else(version_not_found)
    }

    /// The protocol's document of version `v` of module `m`: what its modules hold
    /// ([`doc::protocol_json`]), whether it is deprecated, its tests.
    fn describe(&self, m: &RegistryModule, org: &Organization, v: &ModuleVersion) -> Value {
        let ns = org.tfe_name();
        let f = self.lookup.facts(v);
        let described = self.lookup.doc(v);
        let root = described.map(|d| d.root.clone()).unwrap_or_default();
        let list = |l: Option<&Vec<ModuleDescription>>| -> Vec<Value> {
            l.into_iter().flatten().map(doc::protocol_json).collect()
        };
        json!({
            "id": format!("{ns}/{}/{}/{}", m.spec.name, m.spec.provider, v.spec.version),
            "owner": "",
            "namespace": ns,
            "name": m.spec.name,
            "version": v.spec.version,
            "provider": m.spec.provider,
            "provider_logo_url": "",
            "description": "",
            "source": "",
            "tag": "",
            "published_at": created_at(v),
            "downloads": 0,
            "verified": false,
            "test_status": f.tests,
            "deprecation": deprecation_json(v),
            "root": doc::protocol_json(&root),
            "submodules": list(described.map(|d| &d.submodules)),
            "examples": list(described.map(|d| &d.examples)),
            "providers": [m.spec.provider],
            "versions": self.versions.iter().map(|x| x.spec.version.clone()).collect::<Vec<_>>(),
        })
    }
}

async fn list_versions(
    Authed { state, caller }: Authed,
    Path(p): Path<MPath>,
) -> Result<Response, ApiError> {
    let m = module(&state, &caller, &p).await?;
    let idx = state.index.read();
    let offered = Offered::of(&idx, &m);
    let versions: Vec<Value> = offered
        .versions
        .iter()
        .map(|v| {
            let d = offered.lookup.doc(v);
            let summary = |m: &ModuleDescription| {
                json!({
                    "path": m.path,
                    "providers": doc::providers_json(m),
                    "dependencies": m.dependencies.iter().map(|d| json!({
                        "name": d.name, "source": d.source, "version": d.version,
                    })).collect::<Vec<_>>(),
                })
            };
            let root = d
                .map(|d| summary(&d.root))
                .unwrap_or_else(|| json!({"path": "", "providers": [], "dependencies": []}));
            let submodules: Vec<Value> = d
                .into_iter()
                .flat_map(|d| &d.submodules)
                .map(summary)
                .collect();
            json!({"version": v.spec.version, "root": root, "submodules": submodules})
        })
        .collect();
    Ok(plain_json(json!({"modules": [{
        "source": format!("{}/{}/{}", p.0, p.1, p.2),
        "versions": versions,
    }]})))
}

/// A protocol answer: plain JSON (not JSON:API).
fn plain_json(v: Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn version_not_found() -> ApiError {
    ApiError::not_found("module version not found")
}

async fn show_version(
    Authed { state, caller }: Authed,
    Path((ns, name, provider, version)): Path<(String, String, String, String)>,
) -> Result<Response, ApiError> {
    let m = module(&state, &caller, &(ns, name, provider)).await?;
    let idx = state.index.read();
    let offered = Offered::of(&idx, &m);
    let v = offered.find(&version)?;
    Ok(plain_json(offered.describe(&m.module, &m.org, v)))
}

async fn show_latest(
    Authed { state, caller }: Authed,
    Path(p): Path<MPath>,
) -> Result<Response, ApiError> {
    let m = module(&state, &caller, &p).await?;
    let idx = state.index.read();
    let offered = Offered::of(&idx, &m);
    let v = offered.latest()?;
    Ok(plain_json(offered.describe(&m.module, &m.org, v)))
}

async fn download(
    Authed { state, caller }: Authed,
    Path((ns, name, provider, version)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let m = module(&state, &caller, &(ns, name, provider)).await?;
    let id = {
        let idx = state.index.read();
        id_of(Offered::of(&idx, &m).find(&version)?.as_ref())
    };
    let token = state.signer.sign(ARCHIVE_PURPOSE, &id, ARCHIVE_URL_TTL);
    let url = format!(
        "{}/api/registry/v1/archives/{id}/{token}?archive=tar.gz",
        crate::capability::base_url(&state, &headers)
    );
    let value = HeaderValue::from_str(&url).map_err(|e| ApiError::internal("a download URL", e))?;
    let mut res = StatusCode::NO_CONTENT.into_response();
    res.headers_mut().insert("x-terraform-get", value);
    Ok(res)
}

async fn download_latest(
    Authed { state, caller }: Authed,
    Path(p): Path<MPath>,
) -> Result<Response, ApiError> {
    let m = module(&state, &caller, &p).await?;
    let version = {
        let idx = state.index.read();
        Offered::of(&idx, &m).latest()?.spec.version.clone()
    };
    let to = format!("{BASE}{}/{}/{}/{version}/download", p.0, p.1, p.2);
    let location = HeaderValue::from_str(&to).map_err(|e| ApiError::internal("a redirect", e))?;
    let mut res = StatusCode::FOUND.into_response();
    res.headers_mut().insert(header::LOCATION, location);
    Ok(res)
}

/// `GET /api/registry/v1/modules/search?q=`: the latest installable version of each
/// module the caller may read whose name or provider contains `q`.
async fn search(Authed { state, caller }: Authed, q: QueryParams) -> Result<Response, ApiError> {
    let text = q.get("q").unwrap_or_default().to_ascii_lowercase();
    let mut found = Vec::new();
    let modules: Vec<Arc<RegistryModule>> = state
        .index
        .read()
        .registry_modules()
        .iter()
        .cloned()
        .collect();
    for rm in modules {
        let matches = rm.spec.name.to_ascii_lowercase().contains(&text)
            || rm.spec.provider.to_ascii_lowercase().contains(&text);
        if !matches {
            continue;
        }
        let org = state
            .index
            .read()
            .organization_of_namespace(&rm.namespace().unwrap_or_default())
            .cloned();
        let Some(org) = org else {
            continue;
        };
        let p = (
            org.tfe_name().to_owned(),
            rm.spec.name.clone(),
            rm.spec.provider.clone(),
        );
        let Ok(m) = module(&state, &caller, &p).await else {
            continue;
        };
        let idx = state.index.read();
        let offered = Offered::of(&idx, &m);
        if let Ok(v) = offered.latest() {
            found.push(offered.describe(&m.module, &m.org, v));
        }
    }
    found.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Ok(plain_json(json!({
        "meta": {"limit": found.len(), "current_offset": 0},
        "modules": found,
    })))
}

/// `GET /api/registry/v1/archives/:id/:token`: the archive of version `id` through its
/// capability URL (no Authorization; a forged or expired token, or a version no longer
/// installable: 404).
async fn archive(
    State(state): State<AppState>,
    Path((id, token)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if !state.signer.verify(ARCHIVE_PURPOSE, &id, &token) {
        return Err(version_not_found());
    }
    let (v, cv) = {
        let idx = state.index.read();
        let v = idx
            .module_versions()
            .get(&id)
            .cloned()
            .ok_or_else(version_not_found)?;
        let ns = v.namespace().unwrap_or_default();
        let module = idx
            .registry_modules()
            .in_namespace(&ns)
            .find(|m| m.name_any() == v.spec.module)
            .cloned()
            .ok_or_else(version_not_found)?;
        let org = idx
            .organization_of_namespace(&ns)
            .ok_or_else(version_not_found)?;
        if !Lookup::of(&idx, &ns).installable(&v, &module, org.as_ref()) {
            return Err(version_not_found());
        }
        let cv_name = v.spec.configuration_version.clone().unwrap_or_default();
        let cv = idx
            .configuration_versions()
            .in_namespace(&ns)
            .find(|c| c.name_any() == cv_name)
            .cloned()
            .ok_or_else(version_not_found)?;
        (v, cv)
    };
    let ns = v.namespace().unwrap_or_default();
    let (key, sha256) = cv
        .status
        .as_ref()
        .and_then(|s| s.archive.as_ref())
        .map(|a| (a.key.clone(), a.sha256.clone()))
        .ok_or_else(version_not_found)?;
    let bytes = match state.module_archives.get(&key, &sha256) {
        Some(b) => b,
        None => {
            use crate::blobs::BlobStore;
            let b = crate::blobs::store(&state, &ns, None)
                .get(&key, Some(&sha256))
                .await
                .map_err(|e| {
                    crate::blobs::read_error(
                        "the archive",
                        "the module version's archive is gone",
                        e,
                    )
                })?;
            state.module_archives.put(&key, &sha256, b.clone());
            b
        }
    };
    Ok(([(header::CONTENT_TYPE, "application/gzip")], bytes).into_response())
}

/// Module archives recently downloaded, in memory (a registry serves the same versions
/// over and over; each is immutable once uploaded and is keyed by its blob key and
/// SHA-256, which the store checked on the first read). Bounded in bytes; the oldest go
/// first.
pub struct ArchiveCache {
    budget: usize,
    inner: std::sync::Mutex<(
        std::collections::VecDeque<String>,
        std::collections::HashMap<String, bytes::Bytes>,
        usize,
    )>,
}

impl ArchiveCache {
    /// A cache of at most `budget` bytes.
    pub fn new(budget: usize) -> ArchiveCache {
        ArchiveCache {
            budget,
            inner: std::sync::Mutex::default(),
        }
    }

    fn slot(key: &str, sha256: &str) -> String {
        format!("{key}@{sha256}")
    }

    /// The cached archive of `key` with `sha256`.
    pub fn get(&self, key: &str, sha256: &str) -> Option<bytes::Bytes> {
        let inner = self.inner.lock().expect("lock");
        inner.1.get(&Self::slot(key, sha256)).cloned()
    }

    /// Keeps `bytes` (an archive larger than the budget is not kept).
    pub fn put(&self, key: &str, sha256: &str, bytes: bytes::Bytes) {
        if bytes.len() > self.budget {
            return;
        }
        let slot = Self::slot(key, sha256);
        let mut inner = self.inner.lock().expect("lock");
        let (order, map, used) = &mut *inner;
        if map.contains_key(&slot) {
            return;
        }
        while *used + bytes.len() > self.budget {
            let Some(old) = order.pop_front() else { break };
            if let Some(b) = map.remove(&old) {
                *used -= b.len();
            }
        }
        *used += bytes.len();
        order.push_back(slot.clone());
        map.insert(slot, bytes);
    }
}
