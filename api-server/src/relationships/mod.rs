//! Workspace relationships (SPEC.md B10–B22) and the small organization-level resources
//! they point at: flat tags and the organization tag list, key-value tag bindings of
//! workspaces and projects, remote state consumers, SSH keys, data retention policies,
//! and read endpoints for agent pools and OAuth tokens.
//!
//! Everything here is stored in the Workspace, Project, Organization and SshKey objects
//! themselves (so a GitOps repository can declare it and kubectl sees what the API sees).
//! Reads come from the watch-fed index; writes are JSON merge patches carrying the
//! object's resourceVersion (a concurrent writer makes the patch fail with 409, and the
//! handler recomputes from the fresh object), followed by a bounded wait until the index
//! has seen the write. IDs of derived things (tags, tag bindings, retention policies) are
//! hashes of what identifies them, so they are stable without being stored.

pub mod consumers;
pub mod references;
pub mod retention;
pub mod ssh_keys;
pub mod tag_bindings;
pub mod tags;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use kube::{Api, ResourceExt};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use terrace_crds::Workspace;

use crate::auth::{Caller, Check};
use crate::index::rv_at_least;
use crate::workspaces::{INDEX_WAIT, Located};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(tags::router())
        .merge(tag_bindings::router())
        .merge(consumers::router())
        .merge(ssh_keys::router())
        .merge(retention::router())
        .merge(references::router())
}

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// A stable TFE-shaped ID: `prefix` and 16 base62 characters of the SHA-256 of `parts`.
pub fn stable_id(prefix: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(prefix.len() + 16);
    out.push_str(prefix);
    for b in digest.iter().take(16) {
        out.push(char::from(BASE62[usize::from(*b) % BASE62.len()]));
    }
    out
}

pub(crate) fn ws_not_found() -> ApiError {
    ApiError::NotFound("workspace not found".into())
}

/// The workspace with this ID and its organization, from the index.
pub(crate) fn locate(state: &AppState, id: &str) -> Option<Located> {
    let idx = state.index.read();
    let ws = idx.workspace(id)?.clone();
    let ns = ws.namespace().unwrap_or_default();
    let org = idx.organization_of_namespace(&ns)?.clone();
    Some(Located { ws, org, ns })
}

/// A check on one workspace.
pub(crate) fn ws_check(l: &Located, verb: &'static str) -> Check {
    Check::new(verb, "workspaces", &l.ns, Some(&l.ws.name_any()))
}

/// The workspace if the caller may read it; 404 otherwise.
pub(crate) async fn readable(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Located, ApiError> {
    let l = locate(state, id).ok_or_else(ws_not_found)?;
    if state.auth.allowed(caller, &ws_check(&l, "get")).await? {
        Ok(l)
    } else {
        Err(ws_not_found())
    }
}

/// How a readable workspace answers a caller without admin rights.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Denied {
    /// 404, as SPEC.md's error table has it for consumers and flat tags.
    NotFound,
    /// 403, as for the workspace's settings.
    Forbidden,
}

/// The workspace if the caller may read and administer (`update`) it.
pub(crate) async fn administrable(
    state: &AppState,
    caller: &Caller,
    id: &str,
    denied: Denied,
) -> Result<Located, ApiError> {
    let l = readable(state, caller, id).await?;
    if state.auth.allowed(caller, &ws_check(&l, "update")).await? {
        return Ok(l);
    }
    Err(match denied {
        Denied::NotFound => ApiError::NotFound(
            "workspace not found or not authorized (admin access to the workspace is required)"
                .into(),
        ),
        Denied::Forbidden => ApiError::Status(
            StatusCode::FORBIDDEN,
            "admin access to the workspace is required".into(),
        ),
    })
}

pub(crate) use crate::patch::patch_spec;

/// Patches a workspace's spec (see [`patch_spec`]) and waits until the index has seen it.
pub(crate) async fn patch_workspace<F>(
    state: &AppState,
    l: &Located,
    change: F,
) -> Result<Located, ApiError>
where
    F: FnMut(&Workspace) -> Result<Option<Value>, ApiError>,
{
    let api: Api<Workspace> = Api::namespaced(state.client.clone(), &l.ns);
    let updated = patch_spec(&api, (*l.ws).clone(), change).await?;
    wait_workspace(state, &updated).await;
    Ok(Located {
        ws: Arc::new(updated),
        org: l.org.clone(),
        ns: l.ns.clone(),
    })
}

/// Waits (bounded) until the index holds `ws` at least at its resourceVersion.
pub(crate) async fn wait_workspace(state: &AppState, ws: &Workspace) {
    let uid = ws.metadata.uid.clone().unwrap_or_default();
    let rv = ws.metadata.resource_version.clone().unwrap_or_default();
    let seen = state
        .index
        .wait_until(INDEX_WAIT, |i| {
            i.workspace_by_uid(&uid)
                .is_some_and(|w| rv_at_least(w.metadata.resource_version.as_deref(), &rv))
        })
        .await;
    if !seen {
        tracing::warn!(%uid, %rv, "index did not catch up with a workspace write in time");
    }
}

/// `data` of a relationship document that must be a list of objects of `expected_type`.
pub(crate) fn data_list<'a>(
    body: &'a Value,
    expected_type: &str,
) -> Result<Vec<&'a Map<String, Value>>, ApiError> {
    let items = match body.get("data") {
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::Invalid {
                pointer: "/data".into(),
                detail: "data must be a list".into(),
            });
        }
        None => {
            return Err(ApiError::Invalid {
                pointer: "/data".into(),
                detail: "the request document needs a data list".into(),
            });
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let obj = item.as_object().ok_or_else(|| ApiError::Invalid {
                pointer: format!("/data/{i}"),
                detail: "each entry of data must be an object".into(),
            })?;
            match obj.get("type").and_then(Value::as_str) {
                Some(t) if t == expected_type => Ok(obj),
                other => Err(ApiError::Invalid {
                    pointer: format!("/data/{i}/type"),
                    detail: format!(
                        "type must be {expected_type:?}, got {}",
                        other.map_or("nothing".to_owned(), |t| format!("{t:?}"))
                    ),
                }),
            }
        })
        .collect()
}

/// The string `id` of a list entry, if present (422 when it is not a string).
pub(crate) fn entry_id(obj: &Map<String, Value>, i: usize) -> Result<Option<&str>, ApiError> {
    match obj.get("id") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(ApiError::Invalid {
            pointer: format!("/data/{i}/id"),
            detail: "id must be a string".into(),
        }),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! An in-process cluster (the simulator, with the terrace CRDs installed) under a
    //! started [`AppState`], for handler tests that go through the real router, reviews
    //! and writes. Objects are created directly through the Kubernetes API, as kubectl
    //! users and the operator would, with their IDs already assigned.

    use std::collections::BTreeMap;
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ObjectMeta, PostParams};
    use kube::{Api, Resource};
    use serde_json::Value;
    use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID};
    use terrace_crds::{
        Organization, OrganizationSpec, Project, ProjectSpec, Workspace, WorkspaceSpec,
    };
    use tower::ServiceExt;

    use crate::{AppState, Edition, Settings};

    /// The organization (and namespace) every harness has.
    pub const ORG: &str = "acme";
    /// ID of its default project.
    pub const DEFAULT_PROJECT: &str = "prj-DefaultProject01";

    pub struct Harness {
        _sim: terrace_simulator::Simulator,
        pub state: AppState,
        pub token: String,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    }

    impl Drop for Harness {
        fn drop(&mut self) {
            for t in &self.tasks {
                t.abort();
            }
        }
    }

    pub fn meta(name: &str, ns: Option<&str>, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: ns.map(str::to_owned),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    /// An Organization object named `name` (not stored anywhere).
    pub fn org_object(name: &str) -> Organization {
        Organization {
            metadata: meta(name, None, &[]),
            spec: serde_json::from_value(serde_json::json!({"name": name}))
                .unwrap_or_else(|e| panic!("org spec: {e}")),
            status: None,
        }
    }

    /// Starts a simulator with the CRDs, organization `acme` and its default project.
    pub async fn harness(edition: Edition) -> Harness {
        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .unwrap_or_else(|e| panic!("simulator: {e}"));
        let client = sim.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in terrace_crds::crdgen::all_crds() {
            crds.create(&PostParams::default(), &crd)
                .await
                .unwrap_or_else(|e| panic!("crd: {e}"));
        }
        let nss: Api<Namespace> = Api::all(client.clone());
        nss.create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(ORG, None, &[]),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("namespace: {e}"));
        let orgs: Api<Organization> = Api::all(client.clone());
        let spec: OrganizationSpec =
            serde_json::from_value(serde_json::json!({"name": ORG, "email": "a@example.com"}))
                .unwrap_or_else(|e| panic!("org spec: {e}"));
        orgs.create(
            &PostParams::default(),
            &Organization {
                metadata: meta(ORG, None, &[]),
                spec,
                status: None,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("org: {e}"));
        let settings = Settings {
            edition,
            ..Default::default()
        };
        let state = AppState::new(settings, client);
        let tasks = state.start().await;
        let h = Harness {
            token: sim.admin_token(),
            _sim: sim,
            state,
            tasks,
        };
        h.create(Project {
            metadata: meta(
                "default",
                Some(ORG),
                &[(LABEL_ID, DEFAULT_PROJECT), (LABEL_DEFAULT_PROJECT, "true")],
            ),
            spec: ProjectSpec {
                name: "Default Project".into(),
                ..Default::default()
            },
            status: None,
        })
        .await;
        h.wait("the default project", |i| {
            i.project(DEFAULT_PROJECT).is_some()
        })
        .await;
        h
    }

    impl Harness {
        /// Creates a namespaced object in `acme` (callers wait for the index themselves).
        pub async fn create<K>(&self, o: K) -> K
        where
            K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned
                + serde::Serialize,
            K::DynamicType: Default,
        {
            let api: Api<K> = Api::namespaced(self.state.client.clone(), ORG);
            api.create(&PostParams::default(), &o)
                .await
                .unwrap_or_else(|e| panic!("create: {e}"))
        }

        /// Waits until `cond` holds on the index (panics after 5 s).
        pub async fn wait(&self, what: &str, cond: impl FnMut(&crate::index::Inner) -> bool) {
            assert!(
                self.state
                    .index
                    .wait_until(Duration::from_secs(5), cond)
                    .await,
                "index never showed {what}"
            );
        }

        /// Creates workspace `id` named `name` (spec adjusted by `f`), indexed on return.
        pub async fn workspace(
            &self,
            id: &str,
            name: &str,
            f: impl FnOnce(&mut WorkspaceSpec),
        ) -> Workspace {
            let mut spec = WorkspaceSpec::default_for_create();
            spec.name = name.to_owned();
            f(&mut spec);
            let ws = self
                .create(Workspace {
                    metadata: meta(&id.to_ascii_lowercase(), Some(ORG), &[(LABEL_ID, id)]),
                    spec,
                    status: None,
                })
                .await;
            self.wait(id, |i| i.workspace(id).is_some()).await;
            ws
        }

        /// One request with the admin token.
        pub async fn call(&self, method: &str, uri: &str, body: Option<Value>) -> (u16, Value) {
            self.call_as(&self.token.clone(), method, uri, body).await
        }

        /// One request with `token`.
        pub async fn call_as(
            &self,
            token: &str,
            method: &str,
            uri: &str,
            body: Option<Value>,
        ) -> (u16, Value) {
            let mut req = Request::builder()
                .method(method)
                .uri(uri)
                .header("authorization", format!("Bearer {token}"));
            let body = match body {
                Some(b) => {
                    req = req.header("content-type", "application/vnd.api+json");
                    Body::from(b.to_string())
                }
                None => Body::empty(),
            };
            let req = req.body(body).unwrap_or_else(|e| panic!("request: {e}"));
            let resp = crate::router(self.state.clone())
                .oneshot(req)
                .await
                .unwrap_or_else(|e| match e {});
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        }

        /// The indexed workspace `id`.
        pub fn ws(&self, id: &str) -> Workspace {
            self.state
                .index
                .read()
                .workspace(id)
                .map(|w| (**w).clone())
                .unwrap_or_else(|| panic!("workspace {id} not indexed"))
        }
    }
}
