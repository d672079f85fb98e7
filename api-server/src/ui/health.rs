//! The health page of a workspace (docs/health.md, docs/ui.md): its current assessment
//! result, the drifted resources with their changed attributes and the checks with their
//! messages, and "Start an assessment" for whoever may manage assessments. Made, as every
//! page, from the API's own documents with the signed-in person's token.

use askama::Template;
use axum::extract::{Form, Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::Value;

use super::pages::{health_label, text, when, workspace_doc};
use super::{Nav, Ui, UiError, Visit, render, urlencode};

/// A drifted resource on the page.
pub struct DriftRow {
    pub address: String,
    pub action: String,
    pub attributes: String,
}

/// A check on the page.
pub struct CheckRow {
    pub address: String,
    pub status: String,
    pub problems: Vec<String>,
}

#[derive(Template)]
#[template(path = "workspace_health.html")]
struct HealthPage {
    nav: Nav,
    ws: String,
    enabled: bool,
    can_assess: bool,
    /// Empty: no result yet.
    result: String,
    assessed: String,
    state: String,
    error: String,
    drifted_count: String,
    /// Whether the details (the result's JSON) are readable (`read-state`).
    details: bool,
    drift: Vec<DriftRow>,
    checks: Vec<CheckRow>,
}

/// `GET /app/:org/workspaces/:ws/health`.
pub async fn show(
    Visit { ui, s, headers }: Visit,
    Path((org, name)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let ws = workspace_doc(&ui, &s, &headers, &org, &name).await?;
    let a = &ws["data"]["attributes"];
    let id = text(&ws["data"]["id"]);
    let mut page = HealthPage {
        nav: Nav::of(&s, &org),
        ws: name,
        enabled: a["assessments-enabled"].as_bool().unwrap_or(false),
        can_assess: a["permissions"]["can-manage-assessments"]
            .as_bool()
            .unwrap_or(false),
        result: String::new(),
        assessed: String::new(),
        state: String::new(),
        error: String::new(),
        drifted_count: String::new(),
        details: false,
        drift: Vec::new(),
        checks: Vec::new(),
    };
    let current = match ui
        .get(
            &s,
            &headers,
            &format!("/api/v2/workspaces/{id}/current-assessment-result"),
        )
        .await
    {
        Ok(doc) => doc,
        Err(UiError::NotFound) => return Ok(render(&page)),
        Err(e) => return Err(e),
    };
    let r = &current["data"]["attributes"];
    page.result = text(&current["data"]["id"]);
    page.assessed = when(&r["created-at"]);
    page.error = r["error-msg"].as_str().unwrap_or_default().to_owned();
    page.drifted_count = text(&r["resources-drifted"]);
    page.state = health_label(r).to_owned();
    if r["succeeded"].as_bool() == Some(true) {
        let detail = ui
            .get(
                &s,
                &headers,
                &format!("/api/v2/assessment-results/{}/health", page.result),
            )
            .await;
        if let Ok(d) = detail {
            page.details = true;
            let list = |k: &str| -> Vec<Value> {
                d["data"]["attributes"][k]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            };
            page.drift = list("drift")
                .iter()
                .map(|x| DriftRow {
                    address: text(&x["address"]),
                    action: text(&x["action"]),
                    attributes: x["attributes"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(", ")
                        })
                        .unwrap_or_default(),
                })
                .collect();
            page.checks = list("checks")
                .iter()
                .map(|c| CheckRow {
                    address: text(&c["address"]),
                    status: text(&c["status"]),
                    problems: c["problems"]
                        .as_array()
                        .map(|p| {
                            p.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect();
        }
    }
    Ok(render(&page))
}

#[derive(Deserialize)]
pub struct AssessForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /app/:org/workspaces/:ws/health/assess`: the API's `actions/assess`.
pub async fn assess(
    State(ui): State<Ui>,
    Path((org, name)): Path<(String, String)>,
    headers: HeaderMap,
    Form(f): Form<AssessForm>,
) -> Result<Response, UiError> {
    let s = ui.form_session(&headers, &f.csrf).await?;
    let doc = workspace_doc(&ui, &s, &headers, &org, &name).await?;
    let id = text(&doc["data"]["id"]);
    ui.call(
        &s,
        &headers,
        Method::POST,
        &format!("/api/v2/workspaces/{id}/actions/assess"),
        None,
    )
    .await?;
    Ok(Redirect::to(&format!(
        "/app/{}/workspaces/{}/health",
        urlencode(&org),
        urlencode(&name)
    ))
    .into_response())
}
