//! Test runs of a module (SPEC.md A1, A4–A7): create, list (paged, `filter[source]`),
//! show, cancel and force-cancel.
//!
//! A run is a TestRun object (spec immutable); the operator's TestRun controller creates
//! its Pod and owns its status. Cancel and force-cancel are decided by
//! `terrace_crds::testrun::{cancel, force_cancel}` on the indexed status and recorded as
//! `status.cancelRequestedAt` / `forceCancelRequestedAt` with a merge patch on the status
//! subresource carrying the resourceVersion read, so a decision is never made on a stale
//! state (a conflict re-reads and decides again); the controller acts on the request.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use terrace_crds::TestRun;
use terrace_crds::constants::{
    DEFAULT_TEST_DIRECTORY, FIELD_MANAGER_API, LABEL_ID, LABEL_ORGANIZATION,
};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::resources::{RunVariable, TestRunSpec};
use terrace_crds::testrun::{
    self, Accepted, CancelRequest, SourceFilter, TestRunState, TestSource, TimestampKey,
};

use super::{
    ANNOTATION_CREATED_BY, Kind, LABEL_MODULE, Module, base_url, created_at, id_of, invalid_all,
    locate, wait_seen,
};
use crate::auth::Caller;
use crate::jsonapi::{
    Doc, JsonBody, QueryParams, attributes, page_slice, pagination, resource_object,
};
use crate::workspaces::kube_err;
use crate::{ApiError, AppState};

const T: &str =
    "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}";
type TPath = (String, String, String, String);
type RunPath = (String, String, String, String, String);

pub fn router() -> Router<AppState> {
    Router::new()
        .route(&format!("{T}/test-runs"), get(list).post(create))
        .route(&format!("{T}/test-runs/{{run}}"), get(show))
        .route(&format!("{T}/test-runs/{{run}}/cancel"), post(cancel))
        .route(
            &format!("{T}/test-runs/{{run}}/force-cancel"),
            post(force_cancel),
        )
}

/// The writable attributes of a test run (A1).
#[derive(Clone, Debug, Default)]
pub struct RunInput {
    pub verbose: bool,
    pub test_directory: Option<String>,
    pub filters: Vec<String>,
    pub variables: Vec<RunVariable>,
}

impl RunInput {
    /// The spec of a run of module object `module` on configuration version object `cv`.
    pub fn into_spec(self, module: String, cv: String, source: TestSource) -> TestRunSpec {
        TestRunSpec {
            module,
            configuration_version: cv,
            verbose: self.verbose,
            test_directory: self
                .test_directory
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| DEFAULT_TEST_DIRECTORY.to_owned()),
            filters: self.filters,
            variables: self.variables,
            source: source.as_str().to_owned(),
        }
    }

    /// Parses A1's attributes; every bad one gives a `(pointer, detail)`.
    pub fn parse(attrs: &Map<String, Value>) -> (RunInput, Vec<(String, String)>) {
        let mut errs = Vec::new();
        let mut input = RunInput::default();
        let ptr = |k: &str| format!("/data/attributes/{k}");
        match attrs.get("verbose") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => input.verbose = *b,
            Some(_) => errs.push((ptr("verbose"), "verbose must be a boolean".into())),
        }
        match attrs.get("test-directory") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => input.test_directory = Some(s.clone()),
            Some(_) => errs.push((
                ptr("test-directory"),
                "test-directory must be a string".into(),
            )),
        }
        match attrs.get("filters") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, f) in items.iter().enumerate() {
                    match f.as_str() {
                        Some(s) => input.filters.push(s.to_owned()),
                        None => errs.push((
                            format!("{}/{i}", ptr("filters")),
                            "each filter must be a string".into(),
                        )),
                    }
                }
            }
            Some(_) => errs.push((ptr("filters"), "filters must be a list of strings".into())),
        }
        match attrs.get("variables") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    let at = format!("{}/{i}", ptr("variables"));
                    let key = v.get("key").and_then(Value::as_str);
                    let value = v.get("value").and_then(Value::as_str);
                    match (key, value) {
                        (Some(k), Some(val)) if valid_run_var_key(k) => input.variables.push(RunVariable {
                            key: k.to_owned(),
                            value: val.to_owned(),
                        }),
                        (Some(_), Some(_)) => errs.push((
                            format!("{at}/key"),
                            "key must begin with a letter or underscore and contain only letters, numbers, dashes and underscores".into(),
                        )),
                        (None, _) => errs.push((format!("{at}/key"), "key is required and must be a string".into())),
                        (_, None) => errs.push((
                            format!("{at}/value"),
                            "value is required and must be a string holding a literal of the configuration language".into(),
                        )),
                    }
                }
            }
            Some(_) => errs.push((
                ptr("variables"),
                "variables must be a list of {key, value} objects".into(),
            )),
        }
        (input, errs)
    }
}

fn valid_run_var_key(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Creates a TestRun object in `ns` (owned by its module) and waits for the index.
pub async fn create_run(
    state: &AppState,
    ns: &str,
    spec: TestRunSpec,
    created_by: Option<&str>,
) -> Result<TestRun, ApiError> {
    let id = new_id(IdKind::TestRun);
    let (org, owner) = {
        let idx = state.index.read();
        let org = idx
            .organization_of_namespace(ns)
            .map(|o| o.name_any())
            .unwrap_or_default();
        let owner = idx
            .registry_modules()
            .in_namespace(ns)
            .find(|m| m.name_any() == spec.module)
            .and_then(|m| m.controller_owner_ref(&()));
        (org, owner)
    };
    let mut annotations = BTreeMap::new();
    if let Some(u) = created_by {
        annotations.insert(ANNOTATION_CREATED_BY.to_owned(), u.to_owned());
    }
    let run = TestRun {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&id)),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), org),
                (LABEL_MODULE.to_owned(), spec.module.clone()),
            ])),
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let api: Api<TestRun> = Api::namespaced(state.client.clone(), ns);
    let created = api
        .create(&PostParams::default(), &run)
        .await
        .map_err(kube_err)?;
    wait_seen(state, &created, Kind::TestRun).await;
    Ok(created)
}

/// The JSON:API `data` of a test run.
pub fn render(run: &TestRun, base: &str) -> Value {
    let st = run.status.clone().unwrap_or_default();
    let id = id_of(run);
    let state = TestRunState::of(run.status.as_ref()).map_or_else(
        |_| st.status.clone().unwrap_or_default(),
        |s| s.as_str().to_owned(),
    );
    let finished = state == "finished";
    let count = |c: Option<i64>| {
        if finished {
            json!(c.unwrap_or(0))
        } else {
            Value::Null
        }
    };
    let mut timestamps = Map::new();
    for k in TimestampKey::ALL {
        if let Some(t) = k.get(&st.status_timestamps) {
            timestamps.insert(k.as_str().to_owned(), json!(t));
        }
    }
    let created_by = run.annotations().get(ANNOTATION_CREATED_BY).cloned();
    json!({
        "id": id,
        "type": "test-runs",
        "attributes": {
            "status": state,
            "status-timestamps": timestamps,
            "test-status": st.test_status,
            "tests-passed": count(st.tests_passed),
            "tests-failed": count(st.tests_failed),
            "tests-errored": count(st.tests_errored),
            "tests-skipped": count(st.tests_skipped),
            "source": run.spec.source,
            "verbose": run.spec.verbose,
            "test-directory": run.spec.test_directory,
            "filters": run.spec.filters,
            "variables": run.spec.variables.iter().map(|v| json!({"key": v.key, "value": v.value})).collect::<Vec<_>>(),
            "log-read-url": format!("{base}{}", super::logs::log_path(&id)),
            "created-at": created_at(run),
        },
        "relationships": {
            "configuration-version": {"data": null},
            "created-by": match created_by {
                Some(u) => json!({"data": {"id": u, "type": "users"}}),
                None => json!({"data": null}),
            },
        },
    })
}

/// [`render`] with the configuration version's ID filled in from the index.
pub fn render_indexed(state: &AppState, run: &TestRun, base: &str) -> Value {
    let mut doc = render(run, base);
    let ns = run.namespace().unwrap_or_default();
    let cv = state
        .index
        .read()
        .configuration_versions()
        .in_namespace(&ns)
        .find(|c| c.name_any() == run.spec.configuration_version)
        .map(|c| id_of(c.as_ref()));
    if let Some(cv) = cv {
        doc["relationships"]["configuration-version"] =
            json!({"data": {"id": cv, "type": "configuration-versions"}});
    }
    doc
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path((org, namespace, name, provider)): Path<TPath>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let m = locate(
        &state,
        &caller,
        (&org, &namespace, &name, &provider),
        "create",
        "testruns",
    )
    .await?;
    let data = resource_object(&body, "test-runs")?;
    let attrs = attributes(data)?;
    let (input, mut errs) = RunInput::parse(&attrs);
    let cv_ptr = "/data/relationships/configuration-version/data/id";
    let cv_id = data
        .get("relationships")
        .and_then(|r| r.get("configuration-version"))
        .and_then(|r| r.get("data"))
        .and_then(|d| d.get("id"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let mut cv_name = String::new();
    match cv_id {
        None => errs.push((cv_ptr.into(), "a configuration version is required".into())),
        Some(id) => {
            let cv = state.index.read().configuration_versions().get(id).cloned();
            match cv.filter(|c| {
                c.namespace().as_deref() == Some(m.ns.as_str()) && c.spec.module.is_some()
            }) {
                None => errs.push((
                    cv_ptr.into(),
                    format!("configuration version {id:?} not found in this organization"),
                )),
                Some(c) if super::config_versions::status_of(&c) != "uploaded" => {
                    errs.push((
                        cv_ptr.into(),
                        format!(
                            "configuration version is not uploaded (it is {})",
                            super::config_versions::status_of(&c)
                        ),
                    ));
                }
                Some(c) => cv_name = c.name_any(),
            }
        }
    }
    if !errs.is_empty() {
        return Ok(invalid_all(errs));
    }
    let spec = input.into_spec(m.object_name(), cv_name, TestSource::SvcApi);
    let run = create_run(&state, &m.ns, spec, Some(&caller.username)).await?;
    let base = base_url(&state, &headers);
    Ok(Doc(
        StatusCode::CREATED,
        json!({"data": render_indexed(&state, &run, &base)}),
    )
    .into_response())
}

/// The runs of a module, newest first.
fn runs_of(state: &AppState, m: &Module) -> Vec<Arc<TestRun>> {
    let module = m.object_name();
    let mut runs: Vec<Arc<TestRun>> = state
        .index
        .read()
        .test_runs()
        .in_namespace(&m.ns)
        .filter(|r| r.spec.module == module && !id_of(r.as_ref()).is_empty())
        .cloned()
        .collect();
    runs.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
            .then_with(|| b.name_any().cmp(&a.name_any()))
    });
    runs
}

async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((org, namespace, name, provider)): Path<TPath>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> Result<Doc, ApiError> {
    let m = locate(
        &state,
        &caller,
        (&org, &namespace, &name, &provider),
        "list",
        "testruns",
    )
    .await?;
    let q = QueryParams::parse(q.as_deref());
    let page = q.page()?;
    let filter = SourceFilter::parse(q.get("filter[source]").unwrap_or("")).map_err(|e| {
        ApiError::BadRequest {
            detail: e.to_string(),
            parameter: Some(e.attribute.to_owned()),
        }
    })?;
    let runs: Vec<_> = runs_of(&state, &m)
        .into_iter()
        .filter(|r| filter.matches(&r.spec.source))
        .collect();
    let base = base_url(&state, &headers);
    let data: Vec<Value> = page_slice(&runs, page)
        .iter()
        .map(|r| render_indexed(&state, r, &base))
        .collect();
    let mut self_url = format!(
        "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}/test-runs"
    );
    if let Some(f) = q.get("filter[source]") {
        self_url.push_str(&format!("?filter%5Bsource%5D={f}"));
    }
    let (meta, links) = pagination(&self_url, page, runs.len());
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    ))
}

fn run_not_found() -> ApiError {
    ApiError::NotFound("test run not found".into())
}

/// The run `id` of module `m` from the index.
fn run_of(state: &AppState, m: &Module, id: &str) -> Result<Arc<TestRun>, ApiError> {
    state
        .index
        .read()
        .test_runs()
        .get(id)
        .filter(|r| {
            r.namespace().as_deref() == Some(m.ns.as_str()) && r.spec.module == m.object_name()
        })
        .cloned()
        .ok_or_else(run_not_found)
}

async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path((org, namespace, name, provider, run)): Path<RunPath>,
    headers: HeaderMap,
) -> Result<Doc, ApiError> {
    let m = locate(
        &state,
        &caller,
        (&org, &namespace, &name, &provider),
        "get",
        "testruns",
    )
    .await?;
    let r = run_of(&state, &m, &run)?;
    let base = base_url(&state, &headers);
    Ok(Doc(
        StatusCode::OK,
        json!({"data": render_indexed(&state, &r, &base)}),
    ))
}

async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(p): Path<RunPath>,
) -> Result<Response, ApiError> {
    request_cancel(&state, &caller, p, false).await
}

async fn force_cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path(p): Path<RunPath>,
) -> Result<Response, ApiError> {
    request_cancel(&state, &caller, p, true).await
}

async fn request_cancel(
    state: &AppState,
    caller: &Caller,
    (org, namespace, name, provider, run): RunPath,
    force: bool,
) -> Result<Response, ApiError> {
    let m = locate(
        state,
        caller,
        (&org, &namespace, &name, &provider),
        "create",
        "testruns",
    )
    .await?;
    let mut current = (*run_of(state, &m, &run)?).clone();
    let api: Api<TestRun> = Api::namespaced(state.client.clone(), &m.ns);
    let field = if force {
        "forceCancelRequestedAt"
    } else {
        "cancelRequestedAt"
    };
    for _ in 0..5 {
        let st = TestRunState::of(current.status.as_ref())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let requested = CancelRequest::of(current.status.as_ref());
        let decision = if force {
            testrun::force_cancel(st, requested)
        } else {
            testrun::cancel(st, requested)
        };
        match decision {
            Err(c) => return Err(ApiError::Status(StatusCode::CONFLICT, c.message.to_owned())),
            Ok(Accepted::AlreadyRequested) => return Ok(StatusCode::ACCEPTED.into_response()),
            Ok(Accepted::Requested) => {}
        }
        let patch = json!({
            "metadata": {"resourceVersion": current.metadata.resource_version},
            "status": {field: super::now()},
        });
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER_API.to_owned()),
            ..Default::default()
        };
        match api
            .patch_status(&current.name_any(), &pp, &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                wait_seen(state, &updated, Kind::TestRun).await;
                return Ok(StatusCode::ACCEPTED.into_response());
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = api.get(&current.name_any()).await.map_err(kube_err)?;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(run_not_found()),
            Err(e) => return Err(kube_err(e)),
        }
    }
    Err(ApiError::Status(
        StatusCode::CONFLICT,
        "the test run changed concurrently; retry".into(),
    ))
}

#[cfg(test)]
mod tests {
    use kube::Api;
    use kube::api::{Patch, PatchParams};
    use serde_json::json;
    use terrace_crds::TestRun;

    use crate::modules::testing::*;
    use crate::modules::{Kind, wait_seen};

    async fn set_status(h: &Mh, id: &str, status: serde_json::Value) {
        let api: Api<TestRun> = Api::namespaced(h.state.client.clone(), ORG);
        let r = api
            .patch_status(
                &id.to_ascii_lowercase(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        wait_seen(&h.state, &r, Kind::TestRun).await;
    }

    /// A1: defaults, every attribute of A5, created-by and the configuration version
    /// relationship; bad input is 422 with a pointer per bad field.
    #[tokio::test]
    async fn create_and_show_with_every_attribute() {
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        let (st, doc) = h.run(&cv, json!({})).await;
        assert_eq!(st, 201, "{doc}");
        let a = &doc["data"]["attributes"];
        assert_eq!(doc["data"]["type"], "test-runs");
        assert_eq!(a["status"], "pending");
        assert_eq!(a["test-directory"], "tests");
        assert_eq!(a["verbose"], false);
        assert_eq!(a["source"], "svc-api");
        assert_eq!(a["filters"], json!([]));
        assert_eq!(a["variables"], json!([]));
        assert_eq!(a["status-timestamps"], json!({}));
        for k in [
            "tests-passed",
            "tests-failed",
            "tests-errored",
            "tests-skipped",
            "test-status",
        ] {
            assert!(a[k].is_null(), "{k}");
        }
        assert!(a["created-at"].is_string());
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            a["log-read-url"],
            format!("http://localhost/api/v2/test-runs/{id}/logs")
        );
        assert_eq!(
            doc["data"]["relationships"]["configuration-version"]["data"]["id"],
            cv.as_str()
        );
        assert_eq!(
            doc["data"]["relationships"]["created-by"]["data"]["type"],
            "users"
        );

        let (st, doc) = h
            .run(&cv, json!({"verbose": true, "test-directory": "t2", "filters": ["a.tftest.hcl"], "variables": [{"key": "region", "value": "\"eu\""}]}))
            .await;
        assert_eq!(st, 201, "{doc}");
        let id2 = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        set_status(&h, &id2, json!({"status": "finished", "testStatus": "pass", "testsPassed": 3, "testsFailed": 0, "testsErrored": 0, "testsSkipped": 1,
            "statusTimestamps": {"queuedAt": "2024-01-01T00:00:00Z", "finishedAt": "2024-01-01T00:01:00Z"}})).await;
        let (st, doc) = h.call("GET", &format!("{T}/test-runs/{id2}"), None).await;
        assert_eq!(st, 200, "{doc}");
        let a = &doc["data"]["attributes"];
        assert_eq!(a["verbose"], true);
        assert_eq!(a["test-directory"], "t2");
        assert_eq!(a["filters"], json!(["a.tftest.hcl"]));
        assert_eq!(
            a["variables"],
            json!([{"key": "region", "value": "\"eu\""}])
        );
        assert_eq!(a["status"], "finished");
        assert_eq!(a["test-status"], "pass");
        assert_eq!(a["tests-passed"], 3);
        assert_eq!(a["tests-skipped"], 1);
        assert_eq!(a["status-timestamps"]["queued-at"], "2024-01-01T00:00:00Z");
        assert_eq!(
            a["status-timestamps"]["finished-at"],
            "2024-01-01T00:01:00Z"
        );

        // Bad input: no cv (pointer), an unknown one, wrong types (one error each).
        let (st, doc) = h
            .call("POST", &format!("{T}/test-runs"), Some(json!({"data": {"type": "test-runs", "attributes": {"verbose": "yes", "filters": "x"}}})))
            .await;
        assert_eq!(st, 422, "{doc}");
        let pointers: Vec<&str> = doc["errors"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|x| x["source"]["pointer"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            pointers,
            [
                "/data/attributes/verbose",
                "/data/attributes/filters",
                "/data/relationships/configuration-version/data/id"
            ]
        );
        let (st, _) = h.run("cv-unknown", json!({})).await;
        assert_eq!(st, 422);
        let (st, doc) = h
            .run(&cv, json!({"variables": [{"key": "1x", "value": "1"}]}))
            .await;
        assert_eq!(st, 422);
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/attributes/variables/0/key"
        );
        let (cv_pending, _) = h.cv(false).await;
        let (st, doc) = h.run(&cv_pending, json!({})).await;
        assert_eq!(st, 422);
        assert!(doc.to_string().contains("not uploaded"));
        // Unknown run, module, organization: 404.
        assert_eq!(
            h.call("GET", &format!("{T}/test-runs/trun-nope"), None)
                .await
                .0,
            404
        );
        assert_eq!(
            h.call(
                "GET",
                "/api/v2/organizations/acme/tests/registry-modules/private/acme/nope/aws/test-runs",
                None
            )
            .await
            .0,
            404
        );
        assert_eq!(
            h.call(
                "GET",
                "/api/v2/organizations/nope/tests/registry-modules/private/nope/vpc/aws/test-runs",
                None
            )
            .await
            .0,
            404
        );
    }

    /// A configuration version of another module of the organization may be tested
    /// (promotion of known good code); the run belongs to the module in the path.
    #[tokio::test]
    async fn cv_of_another_module_is_allowed() {
        let h = Mh::with_module().await;
        h.module("net").await;
        let (st, doc) = h
            .call("POST", "/api/v2/organizations/acme/tests/registry-modules/private/acme/net/aws/test-runs/configuration-versions", None)
            .await;
        assert_eq!(st, 201, "{doc}");
        let url = doc["data"]["attributes"]["upload-url"]
            .as_str()
            .unwrap_or_default();
        let path = url[url.find("/api/v2/").unwrap_or(0)..].to_owned();
        let cv = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(h.upload(&path, targz(&[("main.tf", "")])).await, 200);
        h.wait("cv uploaded", |i| {
            i.configuration_versions()
                .get(&cv)
                .and_then(|c| c.status.as_ref())
                .and_then(|s| s.status.as_deref())
                == Some("uploaded")
        })
        .await;
        let (st, doc) = h.run(&cv, json!({})).await;
        assert_eq!(st, 201, "{doc}");
        let (_, list) = h.call("GET", &format!("{T}/test-runs"), None).await;
        assert_eq!(list["meta"]["pagination"]["total-count"], 1);
    }

    /// A4: page[size] (default 20), page[number], filter[source] with SPEC.md values and
    /// vendor aliases; a bad source is 400 naming the parameter.
    #[tokio::test]
    async fn list_pages_and_filters_by_source() {
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        for _ in 0..3 {
            assert_eq!(h.run(&cv, json!({})).await.0, 201);
        }
        let (_, path) = h.cv(true).await;
        assert_eq!(h.upload(&path, targz(&[("main.tf", "")])).await, 200);
        let (st, doc) = h.call("GET", &format!("{T}/test-runs"), None).await;
        assert_eq!(st, 200);
        assert_eq!(doc["meta"]["pagination"]["total-count"], 4);
        assert_eq!(doc["meta"]["pagination"]["page-size"], 20);
        let (_, doc) = h
            .call(
                "GET",
                &format!("{T}/test-runs?page%5Bsize%5D=3&page%5Bnumber%5D=2"),
                None,
            )
            .await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));
        assert_eq!(doc["meta"]["pagination"]["total-pages"], 2);
        for (filter, n) in [
            ("svc-api", 3),
            ("tfe-api", 3),
            ("tfe-configuration-version", 1),
            ("engine", 0),
            ("engine,svc-configuration-version", 1),
        ] {
            let (st, doc) = h
                .call(
                    "GET",
                    &format!("{T}/test-runs?filter%5Bsource%5D={filter}"),
                    None,
                )
                .await;
            assert_eq!(st, 200);
            assert_eq!(doc["meta"]["pagination"]["total-count"], n, "{filter}");
        }
        let (st, doc) = h
            .call(
                "GET",
                &format!("{T}/test-runs?filter%5Bsource%5D=bogus"),
                None,
            )
            .await;
        assert_eq!(st, 400);
        assert_eq!(doc["errors"][0]["source"]["parameter"], "filter[source]");
    }

    /// A6/A7: SPEC.md's statuses — cancel 409 unless running, 202 and recorded when
    /// running; force-cancel 409 before a cancel, 202 after; 404 for an unknown run and a
    /// caller without rights.
    #[tokio::test]
    async fn cancel_and_force_cancel() {
        let h = Mh::with_module().await;
        let cv = h.uploaded_cv().await;
        let (_, doc) = h.run(&cv, json!({})).await;
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let cancel = format!("{T}/test-runs/{id}/cancel");
        let force = format!("{T}/test-runs/{id}/force-cancel");
        let (st, doc) = h.call("POST", &cancel, None).await;
        assert_eq!(st, 409, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("not running")
        );
        assert_eq!(h.call("POST", &force, None).await.0, 409);
        set_status(&h, &id, json!({"status": "running"})).await;
        let (st, doc) = h.call("POST", &force, None).await;
        assert_eq!(st, 409);
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("cancel it before")
        );
        let (st, body) = h.call("POST", &cancel, None).await;
        assert_eq!((st, body), (202, serde_json::Value::Null));
        let run = h.state.index.read().test_runs().get(&id).cloned();
        assert!(
            run.and_then(|r| r.status.clone())
                .and_then(|s| s.cancel_requested_at)
                .is_some()
        );
        assert_eq!(h.call("POST", &cancel, None).await.0, 202);
        assert_eq!(h.call("POST", &force, None).await.0, 202);
        let run = h.state.index.read().test_runs().get(&id).cloned();
        assert!(
            run.and_then(|r| r.status.clone())
                .and_then(|s| s.force_cancel_requested_at)
                .is_some()
        );
        set_status(&h, &id, json!({"status": "canceled"})).await;
        assert_eq!(h.call("POST", &cancel, None).await.0, 409);
        assert_eq!(
            h.call("POST", &format!("{T}/test-runs/trun-nope/cancel"), None)
                .await
                .0,
            404
        );
        // A reader (get/list only) cannot cancel: 404; without any binding nothing is seen.
        let reader = h
            .token_with_role(Some(vec![Mh::rule(
                &["get", "list"],
                &["testruns", "registrymodules"],
            )]))
            .await;
        assert_eq!(
            h.call_as(&reader, "GET", &format!("{T}/test-runs/{id}"), None)
                .await
                .0,
            200
        );
        assert_eq!(h.call_as(&reader, "POST", &cancel, None).await.0, 404);
        assert_eq!(
            h.call_as(
                &reader,
                "POST",
                &format!("{T}/test-runs"),
                Some(json!({"data": {"type": "test-runs"}}))
            )
            .await
            .0,
            404
        );
        let nobody = h.token_with_role(None).await;
        assert_eq!(
            h.call_as(&nobody, "GET", &format!("{T}/test-runs"), None)
                .await
                .0,
            404
        );
        assert_eq!(h.call("POST", &cancel, None).await.0, 409);
        let owner = h
            .token_with_role(Some(vec![Mh::rule(
                &["get", "list", "create"],
                &["testruns"],
            )]))
            .await;
        let (st, doc) = h.call_as(&owner, "POST", &format!("{T}/test-runs"), Some(json!({"data": {"type": "test-runs",
            "relationships": {"configuration-version": {"data": {"id": cv, "type": "configuration-versions"}}}}}))).await;
        assert_eq!(st, 201, "{doc}");
        assert!(
            doc["data"]["relationships"]["created-by"]["data"]["id"]
                .as_str()
                .unwrap_or_default()
                .starts_with("system:serviceaccount:acme:")
        );
    }
}
