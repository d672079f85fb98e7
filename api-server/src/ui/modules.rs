//! The registry pages of the web view (docs/ui.md, "Module tests"): the organization's
//! modules, a module with its published versions, test runs and test variables, and a
//! test run with its per-file and per-run-block results, its live log and its cancel.

use askama::Template;
use axum::Json;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Value, json};
use terrace_crds::testoutput::{FileResult, results};

use super::pages::{Pair, text, variables_of, when};
use super::session::Session;
use super::{CsrfForm, LogQuery, Nav, Ui, UiError, Visit, render, urlencode};

/// A module in the list.
pub struct ModuleRow {
    pub name: String,
    pub provider: String,
    pub versions: String,
    pub gate: bool,
}

#[derive(Template)]
#[template(path = "modules.html")]
struct ModulesPage {
    nav: Nav,
    modules: Vec<ModuleRow>,
}

/// `GET /app/:org/registry/modules`.
pub async fn list(
    Visit { ui, s, headers }: Visit,
    Path(org): Path<String>,
) -> Result<Response, UiError> {
    let doc = ui
        .get(
            &s,
            &headers,
            &format!(
                "/api/v2/organizations/{}/registry-modules?page%5Bsize%5D=100",
                urlencode(&org)
            ),
        )
        .await?;
    let modules = doc["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let a = &m["attributes"];
            let versions: Vec<String> = a["version-statuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["version"].as_str().map(str::to_owned))
                .collect();
            ModuleRow {
                name: text(&a["name"]),
                provider: text(&a["provider"]),
                versions: if versions.is_empty() {
                    "-".to_owned()
                } else {
                    versions.join(", ")
                },
                gate: a["test-config"]["publish-only-tested"]
                    .as_bool()
                    .unwrap_or(false),
            }
        })
        .collect();
    Ok(render(&ModulesPage {
        nav: Nav::of(&s, &org),
        modules,
    }))
}

/// The test API's path of module `org/name/provider`.
fn tests_path(org: &str, name: &str, provider: &str) -> String {
    format!(
        "/api/v2/organizations/{o}/tests/registry-modules/private/{o}/{}/{}",
        urlencode(name),
        urlencode(provider),
        o = urlencode(org)
    )
}

/// A test run in a list.
pub struct TestRunRow {
    pub id: String,
    pub status: String,
    pub result: String,
    pub counts: String,
    pub source: String,
    pub created: String,
}

fn test_run_row(r: &Value) -> TestRunRow {
    let a = &r["attributes"];
    let n = |k: &str| a[k].as_u64().unwrap_or(0);
    TestRunRow {
        id: text(&r["id"]),
        status: text(&a["status"]),
        result: text(&a["test-status"]),
        counts: format!(
            "{} passed, {} failed, {} errored, {} skipped",
            n("tests-passed"),
            n("tests-failed"),
            n("tests-errored"),
            n("tests-skipped")
        ),
        source: text(&a["source"]),
        created: when(&a["created-at"]),
    }
}

/// A string attribute as it is (empty when absent), where [`text`]'s "-" would read as a
/// value.
fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// A published version as the module's page shows it.
pub struct VersionRow {
    pub version: String,
    pub status: String,
    /// Why the archive was refused, if it was.
    pub error: String,
    /// `pending`, `pass`, `fail`, `error` (empty: never tested).
    pub tests: String,
    /// The test run that tested it.
    pub test_run: String,
    pub offered: bool,
    /// Why `terraform init` does not get it.
    pub why_not: String,
}

/// What the latest offered version's root module holds (the registry protocol's
/// document), and how to use it.
pub struct ModuleDocView {
    pub version: String,
    pub readme: String,
    pub inputs: Vec<Pair>,
    pub outputs: Vec<Pair>,
    pub resources: Vec<String>,
    pub usage: String,
}

#[derive(Template)]
#[template(path = "module.html")]
struct ModulePage {
    nav: Nav,
    name: String,
    provider: String,
    gate: bool,
    versions: Vec<VersionRow>,
    doc: Option<ModuleDocView>,
    runs: Vec<TestRunRow>,
    variables: Vec<Pair>,
}

/// The latest offered version's document of module `org/name/provider` (None when no
/// version is offered, or the protocol refuses).
async fn latest_doc(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    (org, name, provider): (&str, &str, &str),
) -> Result<Option<ModuleDocView>, UiError> {
    let (st, bytes) = ui
        .raw(
            Some(s),
            headers,
            Method::GET,
            &format!(
                "/api/registry/v1/modules/{}/{}/{}",
                urlencode(org),
                urlencode(name),
                urlencode(provider)
            ),
            None,
        )
        .await?;
    if !st.is_success() {
        return Ok(None);
    }
    let Ok(d) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(None);
    };
    let root = &d["root"];
    let version = text(&d["version"]);
    let inputs: Vec<Pair> = root["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| Pair {
            name: text(&i["name"]),
            value: if i["required"].as_bool().unwrap_or(false) {
                "required".to_owned()
            } else {
                format!("default {}", text(&i["default"]))
            },
            note: [str_of(&i["type"]), str_of(&i["description"])]
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join(" · "),
        })
        .collect();
    let host = ui
        .state
        .settings
        .hostname
        .clone()
        .unwrap_or_else(|| "HOST".to_owned());
    let minor: Vec<&str> = version.split('.').take(2).collect();
    let mut usage = format!(
        "module \"{name}\" {{\n  source  = \"{host}/{org}/{name}/{provider}\"\n  version = \"~> {}\"\n",
        minor.join(".")
    );
    for i in root["inputs"].as_array().into_iter().flatten() {
        if i["required"].as_bool().unwrap_or(false) {
            usage.push_str(&format!("\n  {} = …\n", text(&i["name"])));
        }
    }
    usage.push_str("}\n");
    Ok(Some(ModuleDocView {
        version,
        readme: str_of(&root["readme"]),
        inputs,
        outputs: root["outputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| Pair {
                name: text(&o["name"]),
                value: String::new(),
                note: str_of(&o["description"]),
            })
            .collect(),
        resources: root["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{}.{}", text(&r["type"]), text(&r["name"])))
            .collect(),
        usage,
    }))
}

/// `GET /app/:org/registry/modules/:name/:provider`.
pub async fn show(
    Visit { ui, s, headers }: Visit,
    Path((org, name, provider)): Path<(String, String, String)>,
) -> Result<Response, UiError> {
    let doc = ui
        .get(
            &s,
            &headers,
            &format!(
                "/api/v2/organizations/{o}/registry-modules/private/{o}/{}/{}",
                urlencode(&name),
                urlencode(&provider),
                o = urlencode(&org)
            ),
        )
        .await?;
    let gate = doc["data"]["attributes"]["test-config"]["publish-only-tested"]
        .as_bool()
        .unwrap_or(false);
    let versions = doc["data"]["attributes"]["version-statuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| VersionRow {
            version: text(&v["version"]),
            status: text(&v["status"]),
            error: str_of(&v["error"]),
            tests: str_of(&v["test-status"]),
            test_run: str_of(&v["test-run"]),
            offered: v["installable"].as_bool().unwrap_or(false),
            why_not: str_of(&v["not-offered-because"]),
        })
        .collect();
    let described = latest_doc(&ui, &s, &headers, (&org, &name, &provider)).await?;
    let base = tests_path(&org, &name, &provider);
    let runs = ui
        .get(&s, &headers, &format!("{base}/test-runs?page%5Bsize%5D=20"))
        .await
        .map(|d| {
            let mut rows: Vec<TestRunRow> = d["data"]
                .as_array()
                .into_iter()
                .flatten()
                .map(test_run_row)
                .collect();
            rows.sort_by(|a, b| b.created.cmp(&a.created));
            rows
        })
        .unwrap_or_default();
    let variables = ui
        .get(&s, &headers, &format!("{base}/vars"))
        .await
        .map(|d| variables_of(&d))
        .unwrap_or_default();
    Ok(render(&ModulePage {
        nav: Nav::of(&s, &org),
        name,
        provider,
        gate,
        versions,
        doc: described,
        runs,
        variables,
    }))
}

/// Test run states after which nothing more happens.
const FINAL: [&str; 3] = ["finished", "canceled", "errored"];

#[derive(Template)]
#[template(path = "test_run.html")]
struct TestRunPage {
    nav: Nav,
    name: String,
    provider: String,
    run: TestRunRow,
    final_state: bool,
    cancelable: bool,
    files: Vec<FileResult>,
    log: String,
    offset: usize,
}

/// Test run `id` of the module and its readable log and results.
async fn test_run(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    (org, name, provider, id): (&str, &str, &str, &str),
) -> Result<(Value, String, Vec<FileResult>), UiError> {
    let doc = ui
        .get(
            s,
            headers,
            &format!(
                "{}/test-runs/{}",
                tests_path(org, name, provider),
                urlencode(id)
            ),
        )
        .await?;
    let status = doc["data"]["attributes"]["status"]
        .as_str()
        .unwrap_or_default();
    let url = doc["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default();
    let raw = match url.find("/api/").map(|i| &url[i..]) {
        Some(path) => {
            let (st, bytes) = ui.raw(None, headers, Method::GET, path, None).await?;
            if st.is_success() {
                bytes.to_vec()
            } else {
                Vec::new()
            }
        }
        None => Vec::new(),
    };
    let raw: Vec<u8> = raw
        .into_iter()
        .filter(|b| *b != 0x02 && *b != 0x03)
        .collect();
    let finished = FINAL.contains(&status);
    let readable = terrace_crds::run::ui_log::readable(&raw, finished);
    let files = results(&String::from_utf8_lossy(&raw));
    Ok((doc, String::from_utf8_lossy(&readable).into_owned(), files))
}

/// `GET /app/:org/registry/modules/:name/:provider/test-runs/:id`.
pub async fn show_test_run(
    Visit { ui, s, headers }: Visit,
    Path((org, name, provider, id)): Path<(String, String, String, String)>,
) -> Result<Response, UiError> {
    let (doc, log, files) = test_run(&ui, &s, &headers, (&org, &name, &provider, &id)).await?;
    let run = test_run_row(&doc["data"]);
    Ok(render(&TestRunPage {
        nav: Nav::of(&s, &org),
        final_state: FINAL.contains(&run.status.as_str()),
        cancelable: ["pending", "queued", "running"].contains(&run.status.as_str()),
        run,
        name,
        provider,
        files,
        offset: log.len(),
        log,
    }))
}

/// `GET …/test-runs/:id/log?offset=N`: the readable log from byte N, for the page's
/// script (`text`, `next`, `done`, `status`).
pub async fn test_run_log(
    State(ui): State<Ui>,
    Path((org, name, provider, id)): Path<(String, String, String, String)>,
    Query(q): Query<LogQuery>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let s = ui.script_session(&headers).await?;
    let (doc, log, _) = test_run(&ui, &s, &headers, (&org, &name, &provider, &id)).await?;
    let status = doc["data"]["attributes"]["status"].clone();
    let from = terrace_crds::common::prefix_within(&log, q.offset).len();
    Ok(Json(json!({
        "text": &log[from..],
        "next": log.len(),
        "done": FINAL.contains(&status.as_str().unwrap_or_default()),
        "status": status,
    }))
    .into_response())
}

/// `POST …/test-runs/:id/cancel`: the API's cancel.
pub async fn cancel_test_run(
    State(ui): State<Ui>,
    Path((org, name, provider, id)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    Form(f): Form<CsrfForm>,
) -> Result<Response, UiError> {
    let s = ui.form_session(&headers, &f.csrf).await?;
    ui.call(
        &s,
        &headers,
        Method::POST,
        &format!(
            "{}/test-runs/{}/cancel",
            tests_path(&org, &name, &provider),
            urlencode(&id)
        ),
        None,
    )
    .await?;
    Ok(Redirect::to(&format!(
        "/app/{}/registry/modules/{}/{}/test-runs/{}",
        urlencode(&org),
        urlencode(&name),
        urlencode(&provider),
        urlencode(&id)
    ))
    .into_response())
}
