//! The run pages of the web view (docs/ui.md, "Runs"): a workspace's runs, and a run with
//! its status timeline, change counts, plan and apply logs (streamed by the page's
//! script from [`log`]) and the buttons its state and the person's rights allow.

use askama::Template;
use axum::Json;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use terrace_crds::run::plan_view::{Action, PlanView, ResourceChange};

use super::pages::{RunRow, changes, included, run_rows, text, when, workspace_doc};
use super::session::Session;
use super::{LogQuery, Nav, Ui, UiError, Visit, render, urlencode};

/// Bytes of log one poll reads at most.
const LOG_CHUNK: usize = 256 << 10;
/// Framing of the API's log streams (STX first, ETX once the phase is final).
const STX: u8 = 0x02;
const ETX: u8 = 0x03;

#[derive(Template)]
#[template(path = "runs.html")]
struct RunsPage {
    nav: Nav,
    ws: String,
    runs: Vec<RunRow>,
}

/// `GET /app/:org/workspaces/:ws/runs`: the workspace's runs, newest first.
pub async fn list(
    Visit { ui, s, headers }: Visit,
    Path((org, name)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let ws = workspace_doc(&ui, &s, &headers, &org, &name).await?;
    let id = text(&ws["data"]["id"]);
    let doc = ui
        .get(
            &s,
            &headers,
            &format!("/api/v2/workspaces/{id}/runs?page%5Bsize%5D=50&include=plan"),
        )
        .await?;
    Ok(render(&RunsPage {
        nav: Nav::of(&s, &org),
        ws: name,
        runs: run_rows(&doc),
    }))
}

/// `GET /app/:org/:ws/runs/:run` (the URL the terraform CLI prints): the run's page.
pub async fn cli_link(Path((org, ws, run)): Path<(String, String, String)>) -> Response {
    Redirect::permanent(&format!(
        "/app/{}/workspaces/{}/runs/{}",
        urlencode(&org),
        urlencode(&ws),
        urlencode(&run)
    ))
    .into_response()
}

/// A step of the timeline.
pub struct Step {
    pub state: String,
    pub at: String,
}

/// A button the run page shows.
pub struct Button {
    pub action: String,
    pub label: String,
    pub danger: bool,
}

/// A phase's log as the page first shows it.
pub struct PhaseLog {
    pub phase: String,
    pub text: String,
    pub offset: usize,
    pub done: bool,
}

/// A policy's outcome as the run page shows it.
pub struct PolicyRow {
    pub set: String,
    pub policy: String,
    pub level: String,
    pub status: String,
    pub messages: Vec<String>,
}

/// The run's policy checks (its post-plan task stage).
pub struct PolicyChecks {
    /// The stage's status (`passed`, `awaiting_override`, `failed`, …), or `overridden`
    /// when its evaluation was.
    pub status: String,
    pub rows: Vec<PolicyRow>,
    /// The run waits for an override the caller may give.
    pub overridable: bool,
    /// Who overrode the failed policies and when ("jane at 2026-…"), if someone did.
    pub overridden: Option<String>,
}

/// The policy checks of run document `r`, if it has a task stage.
async fn policy_checks(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    r: &Value,
) -> Result<Option<PolicyChecks>, UiError> {
    let Some(stage) = r["relationships"]["task-stages"]["data"][0]["id"].as_str() else {
        return Ok(None);
    };
    let doc = ui
        .get(
            s,
            headers,
            &format!(
                "/api/v2/task-stages/{}?include=policy_evaluations",
                urlencode(stage)
            ),
        )
        .await?;
    let a = &doc["data"]["attributes"];
    let evaluation_status = doc["included"][0]["attributes"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut rows = Vec::new();
    if let Some(eval) = doc["included"][0]["id"].as_str() {
        let sets = ui
            .get(
                s,
                headers,
                &format!(
                    "/api/v2/policy-evaluations/{}/policy-set-outcomes?page[size]=100",
                    urlencode(eval)
                ),
            )
            .await?;
        for set in sets["data"].as_array().into_iter().flatten() {
            let name = text(&set["attributes"]["policy-set-name"]);
            for o in set["attributes"]["outcomes"]
                .as_array()
                .into_iter()
                .flatten()
            {
                rows.push(PolicyRow {
                    set: name.clone(),
                    policy: text(&o["policy_name"]),
                    level: text(&o["enforcement_level"]),
                    status: text(&o["status"]),
                    messages: o["output"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|m| text(&m["print"]))
                        .collect(),
                });
            }
        }
    }
    Ok(Some(PolicyChecks {
        // The stage passes once overridden; its evaluation says it was.
        status: if evaluation_status == "overridden" {
            evaluation_status
        } else {
            text(&a["status"])
        },
        overridden: None,
        rows,
        overridable: a["actions"]["is-overridable"].as_bool().unwrap_or(false)
            && a["permissions"]["can-override-policy"]
                .as_bool()
                .unwrap_or(false),
    }))
}

/// A group of resource changes of one action.
pub struct ChangeGroup {
    pub action: Action,
    pub title: String,
    pub resources: Vec<ResourceChange>,
}

/// The plan's changes as the run page shows them (HCP's structured run output).
pub struct Changes {
    /// The run applied them: past tense.
    pub applied: bool,
    pub groups: Vec<ChangeGroup>,
    pub outputs: Vec<terrace_crds::run::plan_view::OutputChange>,
    pub drift: Vec<ResourceChange>,
    pub hidden_resources: usize,
    pub empty: bool,
}

impl Changes {
    fn of(view: PlanView, applied: bool) -> Changes {
        let empty = view.changes_nothing();
        let mut groups: Vec<ChangeGroup> = Vec::new();
        for r in view.resources {
            match groups.last_mut() {
                Some(g) if g.action == r.action => g.resources.push(r),
                _ => groups.push(ChangeGroup {
                    action: r.action,
                    title: String::new(),
                    resources: vec![r],
                }),
            }
        }
        for g in &mut groups {
            let n = g.resources.len();
            let word = match (g.action, applied) {
                (Action::Create, false) => "to add",
                (Action::Update, false) => "to change",
                (Action::Replace, false) => "to replace",
                (Action::Delete, false) => "to destroy",
                (Action::Read, false) => "to read",
                (Action::Create, true) => "added",
                (Action::Update, true) => "changed",
                (Action::Replace, true) => "replaced",
                (Action::Delete, true) => "destroyed",
                (Action::Read, true) => "read",
            };
            g.title = format!("{n} {word}");
        }
        Changes {
            applied,
            empty,
            groups,
            outputs: view.outputs,
            drift: view.drift,
            hidden_resources: view.hidden_resources,
        }
    }
}

/// The structured changes of run document `r`'s plan, from its redacted JSON plan (which
/// masks every sensitive value; the same for every reader), once the plan stored it.
async fn plan_changes(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    doc: &Value,
    status: &str,
) -> Result<Option<Changes>, UiError> {
    let r = &doc["data"];
    let Some(plan) = r["relationships"]["plan"]["data"]["id"].as_str() else {
        return Ok(None);
    };
    let finished =
        included(doc, "plans", plan).is_some_and(|p| p["attributes"]["status"] == "finished");
    if !finished {
        return Ok(None);
    }
    let (st, bytes) = ui
        .raw(
            Some(s),
            headers,
            Method::GET,
            &format!("/api/v2/plans/{}/json-output-redacted", urlencode(plan)),
            None,
        )
        .await?;
    if !st.is_success() {
        return Ok(None);
    }
    let Ok(json) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(None);
    };
    Ok(Some(Changes::of(
        terrace_crds::run::plan_view::view(&json),
        status == "applied",
    )))
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    nav: Nav,
    ws: String,
    id: String,
    status: String,
    message: String,
    source: String,
    changes: String,
    timeline: Vec<Step>,
    buttons: Vec<Button>,
    logs: Vec<PhaseLog>,
    final_state: bool,
    policies: Option<PolicyChecks>,
    plan_changes: Option<Changes>,
    why: Option<Why>,
    commit: Option<Commit>,
}

/// Where a run from a repository came from (its configuration version's ingress
/// attributes), as its page shows it.
pub struct Commit {
    pub identifier: String,
    pub short: String,
    pub url: String,
    /// `branch main`, or `tag v1.0.0`.
    pub reference: String,
    pub sender: String,
    /// A pull request's number, page and title.
    pub pull_request: Option<(i64, String, String)>,
}

impl Commit {
    /// The commit of run document `doc` (its included ingress attributes), if any.
    pub fn of(doc: &Value) -> Option<Commit> {
        let ia = doc["included"]
            .as_array()?
            .iter()
            .find(|i| i["type"] == "ingress-attributes")?;
        let a = &ia["attributes"];
        let sha = text(&a["commit-sha"]);
        Some(Commit {
            identifier: text(&a["identifier"]),
            short: sha.chars().take(7).collect(),
            url: text(&a["commit-url"]),
            reference: match a["tag"].as_str() {
                Some(t) => format!("tag {t}"),
                None => format!("branch {}", text(&a["branch"])),
            },
            sender: text(&a["sender-username"]),
            pull_request: a["pull-request-number"].as_i64().map(|n| {
                (
                    n,
                    text(&a["pull-request-url"]),
                    text(&a["pull-request-title"]),
                )
            }),
        })
    }
}

/// The run `run` of workspace `org/name` (404 when it is another's), with its plan and
/// apply included.
async fn run_doc(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    org: &str,
    name: &str,
    run: &str,
) -> Result<Value, UiError> {
    run_and_workspace(ui, s, headers, org, name, run)
        .await
        .map(|(r, _)| r)
}

/// [`run_doc`] and the workspace's document.
async fn run_and_workspace(
    ui: &Ui,
    s: &Session,
    headers: &HeaderMap,
    org: &str,
    name: &str,
    run: &str,
) -> Result<(Value, Value), UiError> {
    let ws = workspace_doc(ui, s, headers, org, name).await?;
    let doc = ui
        .get(
            s,
            headers,
            &format!(
                "/api/v2/runs/{}?include=plan,apply,configuration_version.ingress_attributes",
                urlencode(run)
            ),
        )
        .await?;
    if doc["data"]["relationships"]["workspace"]["data"]["id"] != ws["data"]["id"] {
        return Err(UiError::NotFound);
    }
    Ok((doc, ws))
}

/// Why a run does not go on, as its page says it: what a pending run waits for (the
/// run that holds the workspace, linked, and the lock), or why it errored.
pub struct Why {
    /// `waiting` or `errored`.
    pub kind: String,
    /// The run's own words (`status-message`).
    pub words: String,
    /// The run holding the workspace, when another one does: its ID and status.
    pub ahead: Option<(String, String)>,
    /// Who holds the workspace's lock and why, when a person or team does.
    pub lock: String,
    /// The engine's errors, from the phase logs (an errored run).
    pub errors: Vec<String>,
}

/// The [`Why`] of run document `r` in workspace document `ws`.
fn why(r: &Value, ws: &Value, status: &str, ahead_status: Option<String>) -> Option<Why> {
    let words = r["attributes"]["status-message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match status {
        "pending" => {
            let w = &ws["data"];
            let current = w["relationships"]["current-run"]["data"]["id"]
                .as_str()
                .filter(|c| Some(*c) != r["id"].as_str());
            let ahead = current.zip(ahead_status).map(|(c, st)| (c.to_owned(), st));
            let by = &w["relationships"]["locked-by"]["data"];
            let lock = if w["attributes"]["locked"] == true && by["type"] != "runs" {
                let reason = w["attributes"]["locked-reason"]
                    .as_str()
                    .unwrap_or_default();
                let who = by["id"].as_str().unwrap_or("someone");
                if reason.is_empty() {
                    format!("The workspace is locked by {who}.")
                } else {
                    format!("The workspace is locked by {who}: {reason}")
                }
            } else {
                String::new()
            };
            Some(Why {
                kind: "waiting".to_owned(),
                words: if words.is_empty() {
                    "waiting for its turn".to_owned()
                } else {
                    words
                },
                ahead,
                lock,
                errors: Vec::new(),
            })
        }
        "errored" => Some(Why {
            kind: "errored".to_owned(),
            words,
            ahead: None,
            lock: String::new(),
            errors: Vec::new(),
        }),
        _ => None,
    }
}

/// Run states after which nothing more happens.
const FINAL: [&str; 7] = [
    "applied",
    "planned_and_finished",
    "planned_and_saved",
    "errored",
    "discarded",
    "canceled",
    "force_canceled",
];

/// `GET /app/:org/workspaces/:ws/runs/:run`.
pub async fn show(
    Visit { ui, s, headers }: Visit,
    Path((org, name, run)): Path<(String, String, String)>,
) -> Result<Response, UiError> {
    let (doc, ws) = run_and_workspace(&ui, &s, &headers, &org, &name, &run).await?;
    let r = &doc["data"];
    let a = &r["attributes"];
    let status = text(&a["status"]);
    let ahead_status = match ws["data"]["relationships"]["current-run"]["data"]["id"].as_str() {
        Some(c) if status == "pending" && Some(c) != r["id"].as_str() => ui
            .get(&s, &headers, &format!("/api/v2/runs/{}", urlencode(c)))
            .await
            .ok()
            .map(|d| text(&d["data"]["attributes"]["status"])),
        _ => None,
    };
    let why = why(r, &ws, &status, ahead_status);
    let events = ui
        .get(
            &s,
            &headers,
            &format!("/api/v2/runs/{}/run-events", urlencode(&text(&r["id"]))),
        )
        .await?;
    let mut timeline: Vec<(String, Step)> = a["status-timestamps"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let at = v.as_str()?.to_owned();
            Some((
                at.clone(),
                Step {
                    state: k.trim_end_matches("-at").replace('-', " "),
                    at: when(&json!(at)),
                },
            ))
        })
        .collect();
    // The run's events say what happened and who did it (a confirmation, a discard, an
    // override of failed policies, a comment); the status timestamps are the fallback of
    // a run without them.
    let evs: Vec<&Value> = events["data"].as_array().into_iter().flatten().collect();
    if !evs.is_empty() {
        timeline = evs
            .iter()
            .map(|e| {
                let at = text(&e["attributes"]["created-at"]);
                (
                    at.clone(),
                    Step {
                        state: text(&e["attributes"]["description"]),
                        at: when(&json!(at)),
                    },
                )
            })
            .collect();
    }
    timeline.sort_by(|x, y| x.0.cmp(&y.0));
    let overridden = evs
        .iter()
        .find(|e| e["attributes"]["action"] == "policy_overridden")
        .map(|e| {
            let who = e["relationships"]["actor"]["data"]["id"]
                .as_str()
                .unwrap_or("someone");
            format!("{who} at {}", when(&e["attributes"]["created-at"]))
        });
    let actions = &a["actions"];
    let perms = &a["permissions"];
    let offer = |act: &str, perm: &str| {
        actions[act].as_bool().unwrap_or(false) && perms[perm].as_bool().unwrap_or(false)
    };
    let mut buttons = Vec::new();
    for (act, perm, action, label, danger) in [
        (
            "is-confirmable",
            "can-apply",
            "apply",
            "Confirm & apply",
            false,
        ),
        ("is-discardable", "can-discard", "discard", "Discard", true),
        ("is-cancelable", "can-cancel", "cancel", "Cancel", true),
        (
            "is-force-cancelable",
            "can-force-cancel",
            "force-cancel",
            "Force cancel",
            true,
        ),
    ] {
        if offer(act, perm) {
            buttons.push(Button {
                action: action.to_owned(),
                label: label.to_owned(),
                danger,
            });
        }
    }
    let mut logs = Vec::new();
    for (phase, kind) in [("plan", "plans"), ("apply", "applies")] {
        let Some(p) = r["relationships"][phase]["data"]["id"]
            .as_str()
            .and_then(|id| included(&doc, kind, id))
        else {
            continue;
        };
        let st = p["attributes"]["status"].as_str().unwrap_or_default();
        if phase == "apply" && ["pending", "unreachable", ""].contains(&st) {
            continue;
        }
        let chunk = read_log(&ui, &headers, p, 0).await?;
        // A run still waiting for its turn has no plan log yet; its page says why it
        // waits instead of showing an empty log.
        if status == "pending" && chunk.text.is_empty() {
            continue;
        }
        logs.push(PhaseLog {
            phase: phase.to_owned(),
            text: chunk.text,
            offset: chunk.next,
            done: chunk.done,
        });
    }
    let mut why = why;
    if let Some(w) = why.as_mut().filter(|w| w.kind == "errored") {
        let all: String = logs
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        w.errors = terrace_crds::run::ui_log::errors(&all);
        if w.words.is_empty() && w.errors.is_empty() {
            why = None;
        }
    }
    let mut policies = policy_checks(&ui, &s, &headers, r).await?;
    if let Some(p) = policies.as_mut() {
        p.overridden = overridden;
    }
    let plan_changes = plan_changes(&ui, &s, &headers, &doc, &status).await?;
    Ok(render(&RunPage {
        nav: Nav::of(&s, &org),
        ws: name,
        id: text(&r["id"]),
        final_state: FINAL.contains(&status.as_str()),
        status,
        message: text(&a["message"]),
        source: text(&a["source"]),
        changes: changes(&doc, r),
        timeline: timeline.into_iter().map(|(_, s)| s).collect(),
        buttons,
        logs,
        policies,
        plan_changes,
        why,
        commit: Commit::of(&doc),
    }))
}

/// A piece of a phase's log.
struct Chunk {
    text: String,
    /// The offset to read from next.
    next: usize,
    done: bool,
}

/// The log of phase document `p` from byte `offset` of the API's framed stream (its
/// capability URL, as any log reader), as text.
async fn read_log(
    ui: &Ui,
    headers: &HeaderMap,
    p: &Value,
    offset: usize,
) -> Result<Chunk, UiError> {
    let url = p["attributes"]["log-read-url"].as_str().unwrap_or_default();
    let Some(path) = url.find("/api/").map(|i| &url[i..]) else {
        return Ok(Chunk {
            text: String::new(),
            next: offset,
            done: false,
        });
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let (status, bytes) = ui
        .raw(
            None,
            headers,
            Method::GET,
            &format!("{path}{sep}offset={offset}&limit={LOG_CHUNK}"),
            None,
        )
        .await?;
    if !status.is_success() {
        return Ok(Chunk {
            text: String::new(),
            next: offset,
            done: false,
        });
    }
    Ok(chunk_of(&bytes, offset))
}

/// The text of framed log bytes read from `offset`: STX and ETX dropped, a character cut
/// at the end left for the next read.
fn chunk_of(bytes: &[u8], offset: usize) -> Chunk {
    let done = bytes.contains(&ETX);
    let usable = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    let text: String = String::from_utf8_lossy(&bytes[..usable])
        .chars()
        .filter(|c| *c != STX as char && *c != ETX as char)
        .collect();
    Chunk {
        text,
        next: offset + usable,
        done,
    }
}

/// `GET /app/:org/workspaces/:ws/runs/:run/log/(plan|apply)?offset=N`: the log from byte
/// N as JSON (`text`, `next`, `done`) with the run's `status`, for the page's script.
pub async fn log(
    State(ui): State<Ui>,
    Path((org, name, run, phase)): Path<(String, String, String, String)>,
    Query(q): Query<LogQuery>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let s = ui.script_session(&headers).await?;
    let kind = match phase.as_str() {
        "plan" => "plans",
        "apply" => "applies",
        _ => return Err(UiError::NotFound),
    };
    let doc = run_doc(&ui, &s, &headers, &org, &name, &run).await?;
    let p = doc["data"]["relationships"][phase.as_str()]["data"]["id"]
        .as_str()
        .and_then(|id| included(&doc, kind, id))
        .ok_or(UiError::NotFound)?;
    let chunk = read_log(&ui, &headers, p, q.offset).await?;
    Ok(Json(json!({
        "text": chunk.text,
        "next": chunk.next,
        "done": chunk.done,
        "status": doc["data"]["attributes"]["status"],
    }))
    .into_response())
}

#[derive(Deserialize)]
pub struct ActionForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    comment: String,
}

/// `POST /app/:org/workspaces/:ws/runs/:run/actions/(apply|discard|cancel|force-cancel|
/// override)` with an optional comment: the API's run action (an override is the action of
/// the run's task stage).
pub async fn action(
    State(ui): State<Ui>,
    Path((org, name, run, action)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    Form(f): Form<ActionForm>,
) -> Result<Response, UiError> {
    let s = ui.form_session(&headers, &f.csrf).await?;
    if !["apply", "discard", "cancel", "force-cancel", "override"].contains(&action.as_str()) {
        return Err(UiError::NotFound);
    }
    let doc = run_doc(&ui, &s, &headers, &org, &name, &run).await?;
    let id = text(&doc["data"]["id"]);
    let comment = f.comment.trim();
    let body = (!comment.is_empty()).then(|| json!({"comment": comment}));
    let path = if action == "override" {
        let stage = text(&doc["data"]["relationships"]["task-stages"]["data"][0]["id"]);
        format!("/api/v2/task-stages/{}/actions/override", urlencode(&stage))
    } else {
        format!("/api/v2/runs/{id}/actions/{action}")
    };
    ui.call(&s, &headers, Method::POST, &path, body).await?;
    Ok(Redirect::to(&format!(
        "/app/{}/workspaces/{}/runs/{}",
        urlencode(&org),
        urlencode(&name),
        urlencode(&run)
    ))
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_chunks_drop_the_framing_and_keep_a_cut_character_for_later() {
        let mut b = vec![STX];
        b.extend_from_slice("plan é".as_bytes());
        let cut = &b[..b.len() - 1];
        let c = chunk_of(cut, 0);
        assert_eq!(c.text, "plan ");
        assert_eq!(c.next, cut.len() - 1);
        assert!(!c.done);
        let mut whole = b.clone();
        whole.push(ETX);
        let c = chunk_of(&whole[3..], 3);
        assert_eq!(c.text, "an é");
        assert!(c.done);
        assert_eq!(c.next, whole.len());
    }
}
