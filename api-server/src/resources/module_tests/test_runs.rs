//! Test runs of a module (SPEC.md A1, A4–A7): create, list (paged, `filter[source]`),
//! show, cancel and force-cancel.
//!
//! A run is a TestRun object (spec immutable); the operator's TestRun controller creates
//! its Pod and owns its status. Creating one first claims its configuration version: an
//! automatic run still due from the upload is superseded (a resourceVersion-guarded write
//! of the marker of [`terrace_crds::testrun::automatic`], which the operator races for
//! the same way), so the CLI's upload-then-create makes exactly one run. A run created by
//! the terraform CLI has the source `engine`, any other client's `svc-api`. Cancel and force-cancel are decided by
//! `terrace_crds::testrun::{cancel, force_cancel}` on the indexed status and recorded as
//! `status.cancelRequestedAt` / `forceCancelRequestedAt` with a merge patch on the status
//! subresource carrying the resourceVersion read, so a decision is never made on a stale
//! state (a conflict re-reads and decides again); the controller acts on the request.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use kube::api::{ObjectMeta, PostParams};
use serde_json::Map;
use terrace_crds::constants::{ANNOTATION_AUTOMATIC_TEST_RUN, DEFAULT_TEST_DIRECTORY};
use terrace_crds::history::HistoryKind;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::{RunVariable, TestRunSpec};
use terrace_crds::testrun::automatic::Marker;
use terrace_crds::testrun::{
    self, Accepted, CancelRequest, HEADER_TERRAFORM_INTEGRATION, SourceFilter, TestRunState,
    TestSource, TimestampKey,
};
use terrace_crds::{ConfigurationVersion, ConfigurationVersionState, TestRun};

use super::{
    ANNOTATION_CREATED_BY, ChildPath, LABEL_MODULE, Module, ModulePath, child_of, children_of,
    locate_child, locate_path,
};
use crate::capability::base_url;
use crate::prelude::*;
use crate::render::{by_creation, page_slice, pagination};

const T: &str =
    "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}";
/// The RBAC resource of the checks on a module's test runs.
const RESOURCE: &str = "testruns";

pub fn router() -> Router<AppState> {
    Router::new()
        .route(&format!("{T}/test-runs"), get(list).post(create))
        .route(&format!("{T}/test-runs/{{run}}"), get(show))
        .route(
            &format!("{T}/test-runs/{{run}}/cancel"),
            post(cancel::<false>),
        )
        .route(
            &format!("{T}/test-runs/{{run}}/force-cancel"),
            post(cancel::<true>),
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

    /// A1's attributes, checked; every bad one is recorded in `errors`.
    pub fn from_attributes(a: RunAttributes, errors: &mut Vec<FieldError>) -> RunInput {
        let ptr = |k: &str| format!("/data/attributes/{k}");
        let mut input = RunInput {
            verbose: a
                .verbose
                .take(&ptr("verbose"), "a boolean", errors)
                .unwrap_or(false),
            test_directory: a
                .test_directory
                .take(&ptr("test-directory"), "a string", errors),
            filters: a
                .filters
                .take(&ptr("filters"), "a list of strings", errors)
                .unwrap_or_default(),
            variables: Vec::new(),
        };
        let vars = a
            .variables
            .take(&ptr("variables"), "a list of {key, value} objects", errors);
        for (i, v) in vars.unwrap_or_default().into_iter().enumerate() {
            let at = format!("{}/{i}", ptr("variables"));
            let before = errors.len();
            let key = v.key.take(&format!("{at}/key"), "a string", errors);
            let value = v.value.take(&format!("{at}/value"), "a string", errors);
            if errors.len() > before {
                continue;
            }
            match (key, value) {
                (Some(k), Some(val)) => match terrace_crds::rules::validate_run_variable_key(&k) {
                    Ok(()) => input.variables.push(RunVariable { key: k, value: val }),
                    Err(e) => errors.push(FieldError::new(format!("{at}/key"), e.to_string())),
                },
                (None, _) => errors.push(FieldError::new(
                    format!("{at}/key"),
                    "key is required and must be a string",
                )),
                (_, None) => errors.push(FieldError::new(
                    format!("{at}/value"),
                    "value is required and must be a string holding a literal of the configuration language",
                )),
            }
        }
        input
    }
}

/// A1's attributes as sent.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunAttributes {
    #[serde(default)]
    verbose: Attr<bool>,
    #[serde(default)]
    test_directory: Attr<String>,
    #[serde(default)]
    filters: Attr<Vec<String>>,
    #[serde(default)]
    variables: Attr<Vec<RunVariableEntry>>,
}

impl Typed for RunAttributes {
    const TYPE: &'static str = "test-runs";
}

/// One `{key, value}` of a run's variables.
#[derive(Debug, Default, Deserialize)]
struct RunVariableEntry {
    #[serde(default)]
    key: Attr<String>,
    #[serde(default)]
    value: Attr<String>,
}

/// A1's relationships.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunRelationships {
    configuration_version: Option<ToOne>,
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
            annotations: Some(annotations).filter(|a| !a.is_empty()),
            owner_references: owner.map(|o| vec![o]),
            ..write::new_meta(&id, ns, org, &[(LABEL_MODULE, spec.module.clone())])
        },
        spec,
        status: None,
    };
    let created = write::api::<TestRun>(state, ns)
        .create(&PostParams::default(), &run)
        .await?;
    write::wait_seen(state, &created).await;
    Ok(created)
}

/// The JSON:API `data` of a test run; `log_path`: its log-read URL's path.
pub fn render(run: &TestRun, base: &str, log_path: &str) -> Value {
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
            "log-read-url": format!("{base}{log_path}"),
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
    let mut doc = render(run, base, &super::logs::log_read_path(state, &id_of(run)));
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
    Authed { state, caller }: Authed,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<RunAttributes, RunRelationships>>,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "create", RESOURCE).await?;
    let data = doc.checked()?;
    let mut errs = Vec::new();
    let input = RunInput::from_attributes(data.attributes, &mut errs);
    let cv_ptr = "/data/relationships/configuration-version/data/id";
    let cv_id = ToOne::given_id(data.relationships.configuration_version.as_ref());
    let mut cv_found = None;
    match cv_id {
        None => errs.push(FieldError::new(
            cv_ptr,
            "a configuration version is required",
        )),
        Some(id) => {
            let cv = state.index.read().configuration_versions().get(id).cloned();
            match cv.filter(|c| {
                c.namespace().as_deref() == Some(m.ns.as_str()) && c.spec.module.is_some()
            }) {
                None => errs.push(FieldError::new(
                    cv_ptr,
                    format!("configuration version {id:?} not found in this organization"),
                )),
                Some(c) if c.state() != Ok(ConfigurationVersionState::Uploaded) => {
                    errs.push(FieldError::new(
                        cv_ptr,
                        format!(
                            "configuration version is not uploaded (it is {})",
                            super::config_versions::status_of(&c)
                        ),
                    ));
                }
                Some(c) => cv_found = Some(c),
            }
        }
    }
    let cv = match cv_found {
        Some(cv) if errs.is_empty() => cv,
        _ => return Err(ApiError::Invalid(errs)),
    };
    supersede_automatic_run(&state, &m.ns, &cv).await?;
    let source = TestSource::of_api_request(
        headers
            .get(HEADER_TERRAFORM_INTEGRATION)
            .and_then(|v| v.to_str().ok()),
    );
    let spec = input.into_spec(m.object_name(), cv.name_any(), source);
    let run = create_run(&state, &m.ns, spec, Some(&caller.username)).await?;
    let base = base_url(&state, &headers);
    Ok(Doc::created(render_indexed(&state, &run, &base)))
}

/// Claims configuration version `cv` for an explicit run: a due automatic run becomes
/// superseded, written with a resourceVersion precondition (re-read and decided again
/// after a conflict), so of this claim and the operator's exactly one wins. Any other
/// marker (none, claimed by the operator after the grace period, …) is left as it is: the
/// explicit run is then a run of its own.
async fn supersede_automatic_run(
    state: &AppState,
    ns: &str,
    cv: &ConfigurationVersion,
) -> Result<(), ApiError> {
    let marker = |c: &ConfigurationVersion| {
        Marker::claimed_by_explicit_run(
            c.annotations()
                .get(ANNOTATION_AUTOMATIC_TEST_RUN)
                .map(String::as_str),
        )
    };
    if marker(cv).is_none() {
        return Ok(());
    }
    let api = write::api::<ConfigurationVersion>(state, ns);
    write::guarded_patch(&api, cv.clone(), |cur| {
        Ok(marker(cur).map(
            |m| json!({"metadata": {"annotations": {ANNOTATION_AUTOMATIC_TEST_RUN: m.as_str()}}}),
        ))
    })
    .await
    .map_err(|e| match e {
        ApiError::NotFound(_) => ApiError::Invalid(vec![FieldError::new(
            "/data/relationships/configuration-version/data/id",
            "configuration version not found in this organization",
        )]),
        other => other,
    })?;
    Ok(())
}

/// The runs of a module, newest first.
fn runs_of(state: &AppState, m: &Module) -> Vec<Arc<TestRun>> {
    let mut runs = children_of(state.index.read().test_runs(), m);
    runs.sort_by(|a, b| by_creation(b.as_ref(), a.as_ref()));
    runs
}

async fn list(
    Authed { state, caller }: Authed,
    Path(path): Path<ModulePath>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let m = locate_path(&state, &caller, &path, "list", RESOURCE).await?;
    let (org, namespace, name, provider) = &path;
    let page = q.page()?;
    q.supported_filters(&["filter[source]"])?;
    let filter = SourceFilter::parse(q.get("filter[source]").unwrap_or(""))
        .map_err(|e| ApiError::bad_parameter(e.attribute, e.to_string()))?;
    let live: Vec<_> = runs_of(&state, &m)
        .into_iter()
        .filter(|r| filter.matches(&r.spec.source))
        .map(|r| {
            let created = r.created_at();
            ((created, r.name_any()), r.clone(), id_of(r.as_ref()))
        })
        .collect();
    // Older runs are archived (crate::history): merged in, in the same order.
    let module_id = id_of(m.module.as_ref());
    let archived_count = m.module.status.as_ref().and_then(|s| s.archived_test_runs);
    let manifest = state
        .history
        .manifest(
            &state,
            &m.ns,
            HistoryKind::TestRuns,
            &module_id,
            archived_count,
        )
        .await?;
    let entries = crate::history::merged(live, &manifest.items, |i| {
        filter.matches(i.source.as_deref().unwrap_or_default())
    });
    let on_page = page_slice(&entries, page);
    let base = base_url(&state, &headers);
    let data: Vec<Value> = state
        .history
        .page::<TestRun>(&state, &m.ns, &module_id, &manifest, on_page)
        .await?
        .iter()
        .map(|r| render_indexed(&state, r, &base))
        .collect();
    let total = entries.len();
    let mut self_url = format!(
        "/api/v2/organizations/{org}/tests/registry-modules/private/{namespace}/{name}/{provider}/test-runs"
    );
    if let Some(f) = q.get("filter[source]") {
        self_url.push_str(&format!("?filter%5Bsource%5D={f}"));
    }
    let (meta, links) = pagination(&self_url, page, total);
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    ))
}

fn run_not_found() -> ApiError {
    ApiError::not_found("test run not found")
}

/// The run `id` of module `m` from the index.
fn run_of(state: &AppState, m: &Module, id: &str) -> Result<Arc<TestRun>, ApiError> {
    child_of(state.index.read().test_runs(), m, id).ok_or_else(run_not_found)
}

/// The archived run `id` of module `m` ([`crate::history`]).
async fn archived_run_of(
    state: &AppState,
    m: &Module,
    id: &str,
) -> Result<Option<Arc<TestRun>>, ApiError> {
    Ok(state
        .history
        .find::<TestRun>(state, id)
        .await?
        .map(|(r, _, _)| r)
        .filter(|r| {
            r.namespace().as_deref() == Some(m.ns.as_str()) && r.spec.module == m.object_name()
        }))
}

async fn show(
    Authed { state, caller }: Authed,
    Path(path): Path<ChildPath>,
    headers: HeaderMap,
) -> Result<Doc, ApiError> {
    let (m, run) = locate_child(&state, &caller, path, "get", RESOURCE).await?;
    let r = match run_of(&state, &m, &run) {
        Ok(r) => r,
        Err(e) => archived_run_of(&state, &m, &run).await?.ok_or(e)?,
    };
    let base = base_url(&state, &headers);
    Ok(Doc(
        StatusCode::OK,
        json!({"data": render_indexed(&state, &r, &base)}),
    ))
}

/// `POST …/cancel`, or with `FORCE` `…/force-cancel`.
async fn cancel<const FORCE: bool>(
    Authed { state, caller }: Authed,
    Path(p): Path<ChildPath>,
) -> Result<Response, ApiError> {
    request_cancel(&state, &caller, p, FORCE).await
}

async fn request_cancel(
    state: &AppState,
    caller: &Caller,
    path: ChildPath,
    force: bool,
) -> Result<Response, ApiError> {
    let (m, run) = locate_child(state, caller, path, "create", RESOURCE).await?;
    let current = (*run_of(state, &m, &run)?).clone();
    let field = if force {
        "forceCancelRequestedAt"
    } else {
        "cancelRequestedAt"
    };
    let api = write::api::<TestRun>(state, &m.ns);
    let written = write::guarded_status_patch(&api, current, |cur| {
        let st = TestRunState::of(cur.status.as_ref()).map_err(|e| ApiError::bug(e.to_string()))?;
        let requested = CancelRequest::of(cur.status.as_ref());
        let decision = if force {
            testrun::force_cancel(st, requested)
        } else {
            testrun::cancel(st, requested)
        };
        match decision {
            Err(c) => Err(ApiError::conflict(c.message.to_owned())),
            Ok(Accepted::AlreadyRequested) => Ok(None),
            Ok(Accepted::Requested) => Ok(Some(json!({ field: crate::render::now() }))),
        }
    })
    .await
    .map_err(|e| match e {
        ApiError::NotFound(_) => run_not_found(),
        other => other,
    })?;
    write::wait_seen(state, &written).await;
    Ok(StatusCode::ACCEPTED.into_response())
}

#[cfg(test)]
mod tests;
