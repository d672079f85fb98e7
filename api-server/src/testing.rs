//! The harness of the API server's handler tests: an in-process cluster (the simulator,
//! with the terrace CRDs installed) under a started [`AppState`], so tests go through the
//! real router, reviews and writes. Objects are created directly through the Kubernetes
//! API, as kubectl users and the operator would, with their IDs already assigned. For
//! module tests ([`Mh`]): ServiceAccount tokens bound to a Role, raw requests (the upload
//! has no auth header and a binary body), a module, and real tar.gz archives.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::Request;
use http_body_util::BodyExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Resource};
use serde_json::{Value, json};
use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID};
use terrace_crds::{
    ConfigurationVersionState, Organization, OrganizationSpec, Project, ProjectSpec, Workspace,
    WorkspaceSpec,
};

use crate::{AppState, Edition, Settings};

/// The organization (and namespace) every harness has.
pub const ORG: &str = "acme";
/// ID of its default project.
pub const DEFAULT_PROJECT: &str = "prj-DefaultProject01";

pub struct Harness {
    _sim: terrace_simulator::Simulator,
    /// The API server, whose Kubernetes client is the chart's `terrace-api-server`
    /// ServiceAccount bound by exactly the chart's ClusterRole ([`chart_rules`]): a right
    /// the chart lacks fails the test that needs it.
    pub state: AppState,
    /// A cluster admin's client, for the objects a test sets up.
    pub admin: kube::Client,
    /// The bearer token of a cluster admin, as a caller of the API.
    pub token: String,
    /// The API server's own client (the chart's identity).
    own: kube::Client,
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

/// A server over an empty simulator (no CRDs, no organization): for the router's own
/// behaviour (request IDs, metrics, limits). Keep the simulator alive while testing.
pub async fn bare_state(settings: Settings) -> (terrace_simulator::Simulator, AppState) {
    let sim = terrace_simulator::Simulator::open(Default::default())
        .await
        .unwrap_or_else(|e| panic!("simulator: {e}"));
    let state = AppState::new(settings, sim.client());
    (sim, state)
}

/// `req` sent through the whole router of `state`.
pub async fn send(
    state: &AppState,
    req: axum::http::Request<axum::body::Body>,
) -> axum::http::Response<axum::body::Body> {
    use tower::ServiceExt;
    crate::router(state.clone())
        .oneshot(req)
        .await
        .unwrap_or_else(|e| match e {})
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
    let own = chart_identity(&sim).await;
    let state = AppState::new(settings, own.clone());
    state
        .auth
        .review_rules_as_callers(sim.uncredentialed_client());
    let tasks = state.start().await;
    let h = Harness {
        token: sim.admin_token(),
        admin: client,
        own,
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

/// A client of the chart's API server ServiceAccount (`terrace-system/terrace-api-server`)
/// bound cluster-wide by exactly the rules of the chart's ClusterRole
/// (charts/terrace/templates/rbac-api-server.yaml), as a Helm install runs it.
async fn chart_identity(sim: &terrace_simulator::Simulator) -> kube::Client {
    let template = include_str!("../../charts/terrace/templates/rbac-api-server.yaml");
    let rules = terrace_simulator::identities::chart_cluster_role_rules(template)
        .unwrap_or_else(|e| panic!("the chart's API server rules: {e}"));
    sim.service_account_client("terrace-system", "terrace-api-server", rules)
        .await
        .unwrap_or_else(|e| panic!("the chart's API server identity: {e}"))
}

impl Harness {
    /// How many requests the API server (the chart's ServiceAccount) has made of the
    /// cluster so far: a test takes the difference around a request.
    pub fn api_server_calls(&self) -> u64 {
        self._sim
            .requests_of("system:serviceaccount:terrace-system:terrace-api-server")
    }

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
        let api: Api<K> = Api::namespaced(self.admin.clone(), ORG);
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
        call_on(&self.state, token, method, uri, body).await
    }

    /// A second API server replica over the same cluster, with the chart's identity and
    /// an index of its own whose watches are not started ([`crate::index::Index::spawn_watches`]
    /// starts them): a replica whose watch has not delivered yet.
    pub async fn replica_not_watching(&self) -> AppState {
        let state = AppState::new(Settings::default(), self.own.clone());
        state
            .auth
            .review_rules_as_callers(self._sim.uncredentialed_client());
        state
    }
}

/// One request to the server of `state` with `token`: its status and JSON body.
pub async fn call_on(
    state: &AppState,
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
    let resp = send(state, req).await;
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

impl Harness {
    /// The token of a new ServiceAccount of `acme` bound to a Role with `rules`
    /// (`None`: no binding at all).
    pub async fn token_with_role(&self, rules: Option<Vec<PolicyRule>>) -> String {
        let client = self.admin.clone();
        let name = format!(
            "sa-{}",
            crate::capability::random_token().to_ascii_lowercase()
        );
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ORG);
        sas.create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta(&name, Some(ORG), &[]),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("sa: {e}"));
        if let Some(rules) = rules {
            let roles: Api<Role> = Api::namespaced(client.clone(), ORG);
            roles
                .create(
                    &PostParams::default(),
                    &Role {
                        metadata: meta(&name, Some(ORG), &[]),
                        rules: Some(rules),
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("role: {e}"));
            let rbs: Api<RoleBinding> = Api::namespaced(client.clone(), ORG);
            rbs.create(
                &PostParams::default(),
                &RoleBinding {
                    metadata: meta(&name, Some(ORG), &[]),
                    role_ref: RoleRef {
                        api_group: "rbac.authorization.k8s.io".into(),
                        kind: "Role".into(),
                        name: name.clone(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: name.clone(),
                        namespace: Some(ORG.into()),
                        ..Default::default()
                    }]),
                },
            )
            .await
            .unwrap_or_else(|e| panic!("binding: {e}"));
        }
        let tr = sas
            .create_token_request(
                &name,
                &PostParams::default(),
                &TokenRequest {
                    spec: TokenRequestSpec {
                        audiences: vec![],
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("token: {e}"));
        tr.status.map(|s| s.token).unwrap_or_default()
    }

    /// One request with arbitrary headers and a raw body; answers status, headers, body.
    pub async fn raw(
        &self,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, BTreeMap<String, String>, Bytes) {
        let mut req = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Body::from(body))
            .unwrap_or_else(|e| panic!("request: {e}"));
        let resp = send(&self.state, req).await;
        let status = resp.status().as_u16();
        let hdrs = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        (status, hdrs, bytes)
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

/// The `{T}` prefix of module `vpc/aws` of `acme`.
pub const T: &str = "/api/v2/organizations/acme/tests/registry-modules/private/acme/vpc/aws";

pub struct Mh {
    pub h: Harness,
}

impl std::ops::Deref for Mh {
    type Target = Harness;
    fn deref(&self) -> &Harness {
        &self.h
    }
}

/// A gzip-compressed tar with the given files.
pub fn targz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        b.append_data(&mut header, path, content.as_bytes())
            .unwrap_or_else(|e| panic!("tar: {e}"));
    }
    let tar = b.into_inner().unwrap_or_else(|e| panic!("tar: {e}"));
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut enc, &tar).unwrap_or_else(|e| panic!("gz: {e}"));
    enc.finish().unwrap_or_else(|e| panic!("gz: {e}"))
}

impl Mh {
    /// A harness without any module.
    pub async fn start() -> Mh {
        Mh {
            h: harness(crate::Edition::SelfHosted).await,
        }
    }

    /// A harness with module `vpc/aws` created through the API.
    pub async fn with_module() -> Mh {
        let m = Mh::start().await;
        m.module("vpc").await;
        m
    }

    /// Creates module `name/aws` through the API; returns its ID.
    pub async fn module(&self, name: &str) -> String {
        let (st, doc) = self
            .call(
                "POST",
                "/api/v2/organizations/acme/registry-modules",
                Some(json!({"data": {"type": "registry-modules", "attributes": {"name": name, "provider": "aws"}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        doc["data"]["id"].as_str().unwrap_or_default().to_owned()
    }

    /// Creates a configuration version of `vpc/aws`; answers its ID and upload path.
    pub async fn cv(&self, auto_queue: bool) -> (String, String) {
        let (st, doc) = self
            .call(
                "POST",
                &format!("{T}/test-runs/configuration-versions"),
                Some(json!({"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": auto_queue}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let url = doc["data"]["attributes"]["upload-url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let path = url
            .find("/api/v2/")
            .map(|i| url[i..].to_owned())
            .unwrap_or_default();
        (id, path)
    }

    /// Uploads `body` to `path` without auth; answers the status.
    pub async fn upload(&self, path: &str, body: Vec<u8>) -> u16 {
        self.raw(
            "PUT",
            path,
            &[("content-type", "application/octet-stream")],
            body,
        )
        .await
        .0
    }

    /// A configuration version of `vpc/aws` with a good archive uploaded (no auto-queue).
    pub async fn uploaded_cv(&self) -> String {
        let (id, path) = self.cv(false).await;
        assert_eq!(self.upload(&path, targz(&[("main.tf", "")])).await, 200);
        self.wait("the cv uploaded", |i| {
            i.configuration_versions()
                .get(&id)
                .is_some_and(|c| c.state() == Ok(ConfigurationVersionState::Uploaded))
        })
        .await;
        id
    }

    /// Creates a test run of `vpc/aws` on `cv`; answers status and document.
    pub async fn run(&self, cv: &str, attrs: Value) -> (u16, Value) {
        self.call(
            "POST",
            &format!("{T}/test-runs"),
            Some(json!({"data": {"type": "test-runs", "attributes": attrs,
                "relationships": {"configuration-version": {"data": {"type": "configuration-versions", "id": cv}}}}})),
        )
        .await
    }
}

/// A rule granting `verbs` on terrace.dev `resources` (all objects, or only `names`).
pub fn rule(verbs: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec!["terrace.dev".into()]),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        verbs: verbs.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}
