//! The organization and workspace pages of the web view (docs/ui.md), each made
//! from the JSON:API documents the signed-in person may read.

use askama::Template;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::session::Session;
use super::{Nav, Ui, UiError, Visit, render, urlencode};

/// A document attribute as display text (`-` when absent).
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) if s.is_empty() => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An RFC 3339 time as `2026-11-28 09:12:05 UTC`.
pub fn when(v: &Value) -> String {
    match v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) {
        Some(t) => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None => "-".to_owned(),
    }
}

/// The row of a variable's or output's document: its attribute `name` and its `value`
/// (masked when `sensitive`), with attribute `note` (if any) beside them.
pub fn masked(doc: &Value, name: &str, note: Option<&str>) -> Pair {
    let a = &doc["attributes"];
    Pair {
        name: text(&a[name]),
        value: if a["sensitive"].as_bool().unwrap_or(false) {
            "(sensitive)".into()
        } else {
            text(&a["value"])
        },
        note: note.map(|n| text(&a[n])).unwrap_or_default(),
    }
}

/// The variables of a `vars` list document (a workspace's or a module's tests'),
/// sensitive values masked.
pub fn variables_of(d: &Value) -> Vec<Pair> {
    rows(d, |v| masked(v, "key", Some("category")))
}

/// Each document of list document `d`'s `data`, as `row` reads it.
fn rows(d: &Value, row: impl Fn(&Value) -> Pair) -> Vec<Pair> {
    d["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(row)
        .collect()
}

/// The workspace `org/name` as the person may read it (its document).
pub async fn workspace_doc(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    org: &str,
    name: &str,
) -> Result<Value, UiError> {
    ui.get(
        s,
        headers,
        &format!(
            "/api/v2/organizations/{}/workspaces/{}",
            urlencode(org),
            urlencode(name)
        ),
    )
    .await
}

/// The included document of `kind` and `id`.
pub fn included<'a>(doc: &'a Value, kind: &str, id: &str) -> Option<&'a Value> {
    doc["included"]
        .as_array()?
        .iter()
        .find(|i| i["type"] == kind && i["id"] == id)
}

#[derive(Template)]
#[template(path = "organizations.html")]
struct OrganizationsPage {
    nav: Nav,
    orgs: Vec<String>,
}

/// `GET /app`: the organizations the person can see.
pub async fn organizations(State(ui): State<Ui>, headers: HeaderMap) -> Result<Response, UiError> {
    let s = ui.session(&headers, "/app").await?;
    let doc = ui
        .get(&s, &headers, "/api/v2/organizations?page%5Bsize%5D=100")
        .await?;
    let orgs = doc["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["attributes"]["name"].as_str().map(str::to_owned))
        .collect();
    Ok(render(&OrganizationsPage {
        nav: Nav::of(&s, ""),
        orgs,
    }))
}

/// `GET /app/:org`: its workspaces.
pub async fn organization(Path(org): Path<String>) -> Response {
    Redirect::to(&format!("/app/{}/workspaces", urlencode(&org))).into_response()
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    tag: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    sort: String,
    #[serde(default)]
    page: Option<u32>,
}

/// One row of the workspace list.
pub struct WsRow {
    pub name: String,
    pub project: String,
    pub mode: String,
    pub locked: bool,
    pub holder: String,
    pub run_status: String,
    pub resources: String,
    pub changed: String,
    /// The current assessment's health in words; empty when assessments are off.
    pub health: String,
    /// The badge's class: `ok`, `warn` or `err`.
    pub health_class: &'static str,
}

/// An option of a filter.
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

#[derive(Template)]
#[template(path = "workspaces.html")]
struct WorkspacesPage {
    nav: Nav,
    rows: Vec<WsRow>,
    q: String,
    tag: String,
    projects: Vec<Choice>,
    sorts: Vec<Choice>,
    total: String,
    page: u32,
    pages: u32,
    prev: String,
    next: String,
}

/// The sorts the list offers (the API's `sort`).
const SORTS: [(&str, &str); 4] = [
    ("name", "Name"),
    ("-latest-change-at", "Latest change"),
    ("-current-run.created-at", "Latest run"),
    ("-name", "Name, Z to A"),
];

/// `GET /app/:org/workspaces`: search by name, filter by tag and project, sort, pages of
/// 20 (the API's list, so 10,000 workspaces page as fast as 10).
pub async fn workspaces(
    Visit { ui, s, headers }: Visit,
    Path(org): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Response, UiError> {
    let page = q.page.unwrap_or(1).max(1);
    let sort = SORTS
        .iter()
        .find(|(k, _)| *k == q.sort)
        .map_or("name", |(k, _)| k);
    let mut path = format!(
        "/api/v2/organizations/{}/workspaces?include=current_run,project,current_assessment_result&page%5Bsize%5D=20&page%5Bnumber%5D={page}&sort={sort}",
        urlencode(&org)
    );
    if !q.q.is_empty() {
        path.push_str(&format!("&search%5Bname%5D={}", urlencode(&q.q)));
    }
    if !q.tag.is_empty() {
        path.push_str(&format!("&search%5Btags%5D={}", urlencode(&q.tag)));
    }
    if !q.project.is_empty() {
        path.push_str(&format!(
            "&filter%5Bproject%5D%5Bid%5D={}",
            urlencode(&q.project)
        ));
    }
    let doc = ui.get(&s, &headers, &path).await?;
    let rows = doc["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| ws_row(&doc, w))
        .collect();
    let projects_doc = ui
        .get(
            &s,
            &headers,
            &format!(
                "/api/v2/organizations/{}/projects?page%5Bsize%5D=100&sort=name",
                urlencode(&org)
            ),
        )
        .await
        .unwrap_or(Value::Null);
    let mut projects = vec![Choice {
        value: String::new(),
        label: "All projects".into(),
        selected: q.project.is_empty(),
    }];
    projects.extend(
        projects_doc["data"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let id = p["id"].as_str().unwrap_or_default().to_owned();
                Choice {
                    selected: id == q.project,
                    label: text(&p["attributes"]["name"]),
                    value: id,
                }
            }),
    );
    let sorts = SORTS
        .iter()
        .map(|(k, l)| Choice {
            value: (*k).to_owned(),
            label: (*l).to_owned(),
            selected: *k == sort,
        })
        .collect();
    let p = &doc["meta"]["pagination"];
    let pages = p["total-pages"].as_u64().unwrap_or(1).max(1) as u32;
    let link = |n: u32| {
        format!(
            "/app/{}/workspaces?q={}&tag={}&project={}&sort={}&page={n}",
            urlencode(&org),
            urlencode(&q.q),
            urlencode(&q.tag),
            urlencode(&q.project),
            urlencode(sort)
        )
    };
    Ok(render(&WorkspacesPage {
        nav: Nav::of(&s, &org),
        rows,
        tag: q.tag.clone(),
        q: q.q.clone(),
        projects,
        sorts,
        total: text(&p["total-count"]),
        page,
        pages,
        prev: if page > 1 {
            link(page - 1)
        } else {
            String::new()
        },
        next: if page < pages {
            link(page + 1)
        } else {
            String::new()
        },
    }))
}

fn ws_row(doc: &Value, w: &Value) -> WsRow {
    let a = &w["attributes"];
    let r = &w["relationships"];
    let project = r["project"]["data"]["id"]
        .as_str()
        .and_then(|id| included(doc, "projects", id))
        .map_or_else(|| "-".to_owned(), |p| text(&p["attributes"]["name"]));
    let run_status = r["current-run"]["data"]["id"]
        .as_str()
        .and_then(|id| included(doc, "runs", id))
        .map_or_else(|| "-".to_owned(), |run| text(&run["attributes"]["status"]));
    let result = r["current-assessment-result"]["data"]["id"]
        .as_str()
        .and_then(|id| included(doc, "assessment-results", id));
    // A result is shown whoever enabled assessments (the workspace, or its organization
    // enforcing them, which the workspace's own `assessments-enabled` does not say).
    let (health, health_class) = match result {
        None if a["assessments-enabled"].as_bool() == Some(true) => {
            ("Not assessed yet".to_owned(), "")
        }
        None => (String::new(), ""),
        Some(res) => {
            let label = health_label(&res["attributes"]);
            let class = match label {
                "Healthy" => "ok",
                "Errored" => "err",
                _ => "warn",
            };
            (label.to_owned(), class)
        }
    };
    WsRow {
        health,
        health_class,
        name: text(&a["name"]),
        project,
        mode: text(&a["execution-mode"]),
        locked: a["locked"].as_bool().unwrap_or(false),
        holder: holder(&r["locked-by"]["data"]),
        run_status,
        resources: text(&a["resource-count"]),
        changed: when(&a["latest-change-at"]),
    }
}

/// What an assessment result's attributes `r` say of a workspace's health, in words.
pub fn health_label(r: &Value) -> &'static str {
    match (
        r["succeeded"].as_bool(),
        r["drifted"].as_bool(),
        r["all-checks-succeeded"].as_bool(),
    ) {
        (Some(false), _, _) => "Errored",
        (_, Some(true), Some(false)) => "Drifted, checks failed",
        (_, Some(true), _) => "Drifted",
        (_, _, Some(false)) => "Checks failed",
        _ => "Healthy",
    }
}

/// Who holds a lock, from the `locked-by` relationship.
fn holder(data: &Value) -> String {
    match (data["type"].as_str(), data["id"].as_str()) {
        (Some("runs"), Some(id)) => format!("run {id}"),
        (Some(kind), Some(id)) => format!("{} {id}", kind.trim_end_matches('s')),
        _ => String::new(),
    }
}

/// A name and value shown in a table (sensitive values masked).
pub struct Pair {
    pub name: String,
    pub value: String,
    pub note: String,
}

/// A run in a list.
pub struct RunRow {
    pub id: String,
    pub status: String,
    pub message: String,
    pub created: String,
    pub changes: String,
}

/// A run's change counts as `+1 ~0 -0`, from its plan (included in `doc`); `-` before
/// the plan counted them.
pub fn changes(doc: &Value, run: &Value) -> String {
    let plan = run["relationships"]["plan"]["data"]["id"]
        .as_str()
        .and_then(|id| included(doc, "plans", id));
    let Some(a) = plan
        .map(|p| &p["attributes"])
        .filter(|a| !a["resource-additions"].is_null())
    else {
        return "-".to_owned();
    };
    let n = |k: &str| a[k].as_u64().unwrap_or(0);
    format!(
        "+{} ~{} -{}",
        n("resource-additions"),
        n("resource-changes"),
        n("resource-destructions")
    )
}

/// The rows of a run list document.
pub fn run_rows(doc: &Value) -> Vec<RunRow> {
    doc["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| RunRow {
            id: text(&r["id"]),
            status: text(&r["attributes"]["status"]),
            message: text(&r["attributes"]["message"]),
            created: when(&r["attributes"]["created-at"]),
            changes: changes(doc, r),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "workspace.html")]
struct WorkspacePage {
    nav: Nav,
    ws: String,
    id: String,
    settings: Vec<Pair>,
    tags: Vec<String>,
    locked: bool,
    holder: String,
    lock_reason: String,
    /// The run that holds the lock, while it runs: its ID and status (no unlock then).
    lock_run: Option<(String, String)>,
    can_lock: bool,
    can_unlock: bool,
    can_force_unlock: bool,
    /// What the API said of the last lock action, when it refused it.
    notice: String,
    current_run: Option<RunRow>,
    varsets: Vec<VarsetRow>,
    serial: String,
    outputs: Vec<Pair>,
    outputs_note: String,
    variables: Vec<Pair>,
    sharing: String,
    runs: Vec<RunRow>,
    /// The hostname of the `cloud` block (`--hostname`), empty when not set.
    hostname: String,
}

/// A variable set applied to the workspace, with its variables (sensitive ones masked).
pub struct VarsetRow {
    pub name: String,
    /// How it applies: "global", "priority", …
    pub scope: String,
    pub variables: Vec<Pair>,
}

/// The variable sets applied to workspace `id`, as the person may read them.
async fn varsets_of(ui: &Ui, s: &Session, headers: &HeaderMap, id: &str) -> Vec<VarsetRow> {
    let Ok(d) = ui
        .get(
            s,
            headers,
            &format!("/api/v2/workspaces/{id}/varsets?include=vars&page%5Bsize%5D=100"),
        )
        .await
    else {
        return Vec::new();
    };
    d["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|set| {
            let a = &set["attributes"];
            let mut scope = Vec::new();
            if a["priority"] == true {
                scope.push("priority: wins over the workspace's own variables");
            }
            if a["global"] == true {
                scope.push("global");
            } else {
                scope.push("applied to this workspace or its project");
            }
            let vars: Vec<Value> = set["relationships"]["vars"]["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| included(&d, "vars", v["id"].as_str()?).cloned())
                .collect();
            VarsetRow {
                name: text(&a["name"]),
                scope: scope.join(", "),
                variables: variables_of(&json!({ "data": vars })),
            }
        })
        .collect()
}

/// `GET /app/:org/workspaces/:ws`.
pub async fn workspace(
    Visit { ui, s, headers }: Visit,
    Path((org, name)): Path<(String, String)>,
) -> Result<Response, UiError> {
    workspace_page(&ui, &s, &headers, &org, &name, String::new()).await
}

/// The workspace page of `org/name`, with `notice` (a refusal of the lock action just
/// asked for, in the API's words) above its lock.
async fn workspace_page(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    org: &str,
    name: &str,
    notice: String,
) -> Result<Response, UiError> {
    let (org, name) = (org.to_owned(), name.to_owned());
    let doc = ui
        .get(s, headers, &format!(
                "/api/v2/organizations/{}/workspaces/{}?include=current_run,current_run.plan,project",
                urlencode(&org),
                urlencode(&name)
            ))
        .await?;
    let w = &doc["data"];
    let id = text(&w["id"]);
    let a = &w["attributes"];
    let p = &a["permissions"];
    let allowed = |k: &str| p[k].as_bool().unwrap_or(false);
    let project = w["relationships"]["project"]["data"]["id"]
        .as_str()
        .and_then(|pid| included(&doc, "projects", pid))
        .map_or_else(|| "-".to_owned(), |p| text(&p["attributes"]["name"]));
    let setting = |name: &str, v: String| Pair {
        name: name.to_owned(),
        value: v,
        note: String::new(),
    };
    let settings = vec![
        setting("Project", project),
        setting("Execution mode", text(&a["execution-mode"])),
        setting("Terraform version", text(&a["terraform-version"])),
        setting("Working directory", text(&a["working-directory"])),
        setting("Auto apply", text(&a["auto-apply"])),
        setting("Resources", text(&a["resource-count"])),
        setting("Latest change", when(&a["latest-change-at"])),
    ];
    let tags = a["tag-names"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    let current_run = w["relationships"]["current-run"]["data"]["id"]
        .as_str()
        .and_then(|rid| included(&doc, "runs", rid))
        .map(|r| RunRow {
            id: text(&r["id"]),
            status: text(&r["attributes"]["status"]),
            message: text(&r["attributes"]["message"]),
            created: when(&r["attributes"]["created-at"]),
            changes: changes(&doc, r),
        });
    // The latest state: its serial, and its outputs (sensitive ones masked) for those
    // who may read them.
    let sv = ui
        .get(
            s,
            headers,
            &format!("/api/v2/workspaces/{id}/current-state-version"),
        )
        .await
        .ok();
    let serial = sv.as_ref().map_or_else(
        || "none yet".to_owned(),
        |d| text(&d["data"]["attributes"]["serial"]),
    );
    let (outputs, outputs_note) = match ui
        .get(
            s,
            headers,
            &format!("/api/v2/workspaces/{id}/current-state-version-outputs"),
        )
        .await
    {
        Ok(d) => (outputs_of(&d), String::new()),
        Err(UiError::Forbidden(_) | UiError::NotFound) if sv.is_some() => (
            Vec::new(),
            "You may not read this workspace's outputs.".to_owned(),
        ),
        Err(_) => (Vec::new(), String::new()),
    };
    let variables = ui
        .get(s, headers, &format!("/api/v2/workspaces/{id}/vars"))
        .await
        .map(|d| variables_of(&d))
        .unwrap_or_default();
    let sharing = if a["global-remote-state"].as_bool().unwrap_or(false) {
        "Shared with every workspace of the organization".to_owned()
    } else {
        let consumers = ui
            .get(
                s,
                headers,
                &format!("/api/v2/workspaces/{id}/relationships/remote-state-consumers"),
            )
            .await
            .map(|d| {
                d["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| text(&c["attributes"]["name"]))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if consumers.is_empty() {
            "Not shared".to_owned()
        } else {
            format!("Shared with {}", consumers.join(", "))
        }
    };
    let runs = ui
        .get(
            s,
            headers,
            &format!("/api/v2/workspaces/{id}/runs?page%5Bsize%5D=5&include=plan"),
        )
        .await
        .map(|d| run_rows(&d))
        .unwrap_or_default();
    let locked = a["locked"].as_bool().unwrap_or(false);
    let by = &w["relationships"]["locked-by"]["data"];
    // A run's lock is the run's while it runs: the API refuses to unlock it (cancel or
    // discard the run instead), so the page offers no unlock and links the run.
    let lock_run = match (locked, by["type"].as_str(), by["id"].as_str()) {
        (true, Some("runs"), Some(rid)) => {
            let st = ui
                .get(s, headers, &format!("/api/v2/runs/{}", urlencode(rid)))
                .await
                .ok()
                .map(|d| text(&d["data"]["attributes"]["status"]));
            Some((rid.to_owned(), st.unwrap_or_else(|| "-".to_owned())))
        }
        _ => None,
    };
    let run_active = lock_run.as_ref().is_some_and(|(_, st)| {
        !matches!(
            st.as_str(),
            "applied"
                | "planned_and_finished"
                | "errored"
                | "discarded"
                | "canceled"
                | "force_canceled"
                | "-"
        )
    });
    let reason = a["locked-reason"].as_str().unwrap_or_default();
    // The reason only where it says more than who holds the lock ("Locked by run …",
    // "Locked by Terraform" repeat the holder line).
    let lock_reason = if reason.starts_with("Locked by") {
        String::new()
    } else {
        reason.to_owned()
    };
    let varsets = varsets_of(ui, s, headers, &id).await;
    Ok(render(&WorkspacePage {
        nav: Nav::of(s, &org),
        ws: text(&a["name"]),
        settings,
        tags,
        locked,
        holder: holder(by),
        lock_reason,
        lock_run: lock_run.clone(),
        can_lock: !locked && allowed("can-lock"),
        can_unlock: locked && !run_active && lock_run.is_none() && allowed("can-unlock"),
        can_force_unlock: locked && !run_active && allowed("can-force-unlock"),
        notice,
        current_run,
        varsets,
        serial,
        outputs,
        outputs_note,
        variables,
        sharing,
        runs,
        id,
        hostname: ui.state.settings.hostname.clone().unwrap_or_default(),
    }))
}

/// Outputs of a state version outputs document, sensitive values masked.
fn outputs_of(d: &Value) -> Vec<Pair> {
    rows(d, |o| masked(o, "name", Some("type")))
}

#[derive(Deserialize)]
pub struct LockForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    reason: String,
    /// A force unlock's confirmation (its checkbox).
    #[serde(default)]
    confirm: String,
}

/// `POST /app/:org/workspaces/:ws/actions/(lock|unlock|force-unlock)`: the API's action.
pub async fn workspace_action(
    State(ui): State<Ui>,
    Path((org, name, action)): Path<(String, String, String)>,
    headers: HeaderMap,
    Form(f): Form<LockForm>,
) -> Result<Response, UiError> {
    let s = ui.form_session(&headers, &f.csrf).await?;
    if !["lock", "unlock", "force-unlock"].contains(&action.as_str()) {
        return Err(UiError::NotFound);
    }
    let doc = workspace_doc(&ui, &s, &headers, &org, &name).await?;
    let id = text(&doc["data"]["id"]);
    // A force unlock is confirmed first: whoever holds the lock may still be writing
    // the workspace's state.
    if action == "force-unlock" && f.confirm != "yes" {
        let notice = "Not unlocked: confirm the force unlock first (tick the box).".to_owned();
        let page = workspace_page(&ui, &s, &headers, &org, &name, notice).await?;
        return Ok((axum::http::StatusCode::UNPROCESSABLE_ENTITY, page).into_response());
    }
    let body = (action == "lock").then(|| json!({"reason": f.reason}));
    let done = ui
        .call(
            &s,
            &headers,
            Method::POST,
            &format!("/api/v2/workspaces/{id}/actions/{action}"),
            body,
        )
        .await;
    match done {
        Ok(_) => Ok(Redirect::to(&format!(
            "/app/{}/workspaces/{}",
            urlencode(&org),
            urlencode(&name)
        ))
        .into_response()),
        // A refusal is said on the workspace's own page, not on an error page that
        // leads nowhere (someone else took the lock meanwhile, a run holds it).
        Err(UiError::Refused(status, words)) => {
            let page = workspace_page(&ui, &s, &headers, &org, &name, words).await?;
            Ok((status, page).into_response())
        }
        Err(UiError::Forbidden(words)) => {
            let page = workspace_page(&ui, &s, &headers, &org, &name, words).await?;
            Ok((axum::http::StatusCode::FORBIDDEN, page).into_response())
        }
        Err(e) => Err(e),
    }
}
