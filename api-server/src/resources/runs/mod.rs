//! Runs of workspaces (docs/runs.md): `POST /runs`, show, the workspace's list, the
//! actions (apply, discard, cancel, force-cancel), plans and applies with their logs and
//! JSON plan, and the reads the terraform CLI makes while it waits (run events, the
//! organization's queue and capacity). Workspace configuration versions are in
//! [`config_versions`], the runner's endpoints (a run's Pod's only way in) in [`runner`].
//!
//! A run is a Run object (spec immutable) owned by its workspace; the operator's run
//! controller executes it and owns its status. The API records what a caller asks — a
//! confirmation (`confirmed`), a discard (`discarded`), a cancel request — with merge
//! patches of the status under the resourceVersion read, decided on the fresh object
//! after a conflict, so an action never applies to a run that moved on.

pub mod comments;
pub mod config_versions;
pub mod policy;
pub mod runner;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use kube::api::PostParams;
use terrace_crds::constants::LABEL_WORKSPACE_ID;
use terrace_crds::history::HistoryKind;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::RunVariable;
use terrace_crds::run::{self, Phase, RunState};
use terrace_crds::{ConfigurationVersionState, Run, RunSpec, Workspace};

use crate::blobs::BlobStore;
use crate::capability::base_url;
use crate::documents::runs::{RunPermissions, links_of, log_url, phase_data, run_data, state_of};
use crate::prelude::*;
use crate::render::page_slice;

/// The RBAC resource of runs.
pub const RESOURCE: &str = "runs";
/// Blob key of a run's plan file and of its JSON form.
pub fn plan_key(run_id: &str) -> String {
    format!("runs/{run_id}/plan")
}
pub fn plan_json_key(run_id: &str) -> String {
    format!("runs/{run_id}/plan.json")
}
/// Blob key of a run's redacted JSON plan (`json-output-redacted`).
pub fn plan_json_redacted_key(run_id: &str) -> String {
    format!("runs/{run_id}/plan.redacted.json")
}
/// Blob key of the provider schemas an assessment's runner uploads (its result's
/// `json-schema`).
pub fn provider_schemas_key(run_id: &str) -> String {
    format!("runs/{run_id}/provider-schemas.json")
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/runs", post(create))
        .route("/api/v2/runs/{id}", get(show))
        .route("/api/v2/workspaces/{id}/runs", get(list))
        .route("/api/v2/runs/{id}/actions/{action}", post(act))
        .route("/api/v2/runs/{id}/plan", get(phase_of_run::<PlanRoute>))
        .route("/api/v2/runs/{id}/apply", get(phase_of_run::<ApplyRoute>))
        .route("/api/v2/plans/{plan}", get(show_phase::<PlanRoute>))
        .route("/api/v2/applies/{apply}", get(show_phase::<ApplyRoute>))
        .route("/api/v2/plans/{plan}/json-output", get(json_output))
        .route(
            "/api/v2/plans/{plan}/json-output-redacted",
            get(json_output_redacted),
        )
        .route(
            "/api/v2/runs/{id}/plan/json-output",
            get(json_output_of_run),
        )
        .route("/api/v2/plans/{plan}/log/{token}", get(log))
        .route("/api/v2/applies/{apply}/log/{token}", get(log))
        .route("/api/v2/organizations/{org}/runs", get(org_list))
        .route("/api/v2/organizations/{org}/runs/queue", get(queue))
        .route("/api/v2/organizations/{org}/capacity", get(capacity))
        .merge(comments::router())
        .merge(policy::router())
        .merge(config_versions::router())
        .merge(runner::router())
}

/// The attributes of `POST /runs`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateAttributes {
    auto_apply: Option<bool>,
    #[serde(default)]
    is_destroy: bool,
    #[serde(default)]
    message: Option<String>,
    refresh: Option<bool>,
    #[serde(default)]
    refresh_only: bool,
    #[serde(default)]
    plan_only: bool,
    #[serde(default)]
    save_plan: bool,
    #[serde(default)]
    target_addrs: Vec<String>,
    #[serde(default)]
    replace_addrs: Vec<String>,
    #[serde(default)]
    variables: Vec<VariableEntry>,
    #[serde(default)]
    allow_empty_apply: bool,
    #[serde(default)]
    allow_config_generation: bool,
    #[serde(default)]
    terraform_version: Option<String>,
    #[serde(default)]
    debugging_mode: bool,
    #[serde(default)]
    invoke_action_addrs: Vec<String>,
    #[serde(default)]
    policy_paths: Vec<String>,
}

impl Typed for CreateAttributes {
    const TYPE: &'static str = "runs";
}

#[derive(Debug, Default, Deserialize)]
struct VariableEntry {
    key: String,
    value: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CreateRelationships {
    workspace: Option<ToOne>,
    configuration_version: Option<ToOne>,
}

const WS_PTR: &str = "/data/relationships/workspace/data/id";
const CV_PTR: &str = "/data/relationships/configuration-version/data/id";

async fn create(
    Authed { state, caller }: Authed,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<CreateAttributes, CreateRelationships>>,
) -> Result<Doc, ApiError> {
    let data = doc.checked()?;
    let ws_id = ToOne::given_id(data.relationships.workspace.as_ref())
        .ok_or_else(|| ApiError::invalid(WS_PTR, "a workspace is required"))?
        .to_owned();
    let ws = state.readable::<Workspace>(&caller, &ws_id).await?;
    state
        .require_or_403(
            &caller,
            &Check::new("create", RESOURCE, &ws.ns, None),
            "not authorized to queue runs in this workspace",
        )
        .await?;
    let a = data.attributes;
    let mut errs = Vec::new();
    if a.is_destroy && !ws.obj.spec.allow_destroy_plan {
        errs.push(FieldError::new(
            "/data/attributes/is-destroy",
            "destroy plans are not allowed in this workspace (allow-destroy-plan is false)",
        ));
    }
    if a.is_destroy && a.refresh_only {
        errs.push(FieldError::new(
            "/data/attributes/refresh-only",
            "a run cannot be both a destroy and a refresh-only run",
        ));
    }
    let plan_only = a.plan_only;
    if let Some(v) = &a.terraform_version {
        if !plan_only {
            errs.push(FieldError::new(
                "/data/attributes/terraform-version",
                "terraform-version can only be set on plan-only runs",
            ));
        } else if terrace_crds::run::exact_version(v).is_none() {
            errs.push(FieldError::new(
                "/data/attributes/terraform-version",
                format!("must be an exact version such as 1.11.4, got {v:?}"),
            ));
        }
    }
    let mut variables = Vec::new();
    for (i, v) in a.variables.into_iter().enumerate() {
        match terrace_crds::rules::validate_run_variable_key(&v.key) {
            Ok(()) => variables.push(RunVariable {
                key: v.key,
                value: v.value,
            }),
            Err(e) => errs.push(FieldError::new(
                format!("/data/attributes/variables/{i}/key"),
                e.to_string(),
            )),
        }
    }
    let ws_object = ws.object_name();
    let cv_id = ToOne::given_id(data.relationships.configuration_version.as_ref());
    let cv = match cv_id {
        Some(id) => {
            let cv = state.index.read().configuration_versions().get(id).cloned();
            match cv.filter(|c| {
                c.namespace().as_deref() == Some(ws.ns.as_str())
                    && c.spec.workspace.as_deref() == Some(ws_object.as_str())
            }) {
                None => {
                    errs.push(FieldError::new(
                        CV_PTR,
                        format!("configuration version {id:?} not found in this workspace"),
                    ));
                    None
                }
                Some(c) if c.state() != Ok(ConfigurationVersionState::Uploaded) => {
                    errs.push(FieldError::new(
                        CV_PTR,
                        format!(
                            "configuration version is not uploaded (it is {})",
                            crate::documents::config_versions::status_of(&c)
                        ),
                    ));
                    None
                }
                Some(c) if !c.usable() => {
                    errs.push(FieldError::new(
                        CV_PTR,
                        "configuration version's data was deleted (restore it first)",
                    ));
                    None
                }
                Some(c) => Some(c),
            }
        }
        None => {
            // A VCS-driven workspace runs the latest commit of its branch (TFE's); when
            // that cannot be fetched, its current configuration, with an Event saying why.
            let fetched = match crate::resources::oauth_clients::ingress::latest(
                &state,
                ws.obj.clone(),
            )
            .await
            {
                Some(Ok(id)) => state
                    .index
                    .read()
                    .configuration_versions()
                    .get(&id)
                    .cloned(),
                Some(Err(e)) => {
                    crate::resources::oauth_clients::mark_repository(&state, &ws.obj, Some(&e))
                        .await;
                    crate::events::warning(
                        &state.events,
                        ws.obj.as_ref(),
                        "VcsIngressFailed",
                        format!(
                            "the run uses the latest configuration version instead of the branch's latest commit: {e}"
                        ),
                    );
                    None
                }
                None => None,
            };
            // The workspace's current configuration: its newest uploaded, not provisional.
            let latest = fetched.or_else(|| {
                state
                    .index
                    .read()
                    .current_configuration_version(&ws.ns, &ws_object)
                    .cloned()
            });
            if latest.is_none() {
                errs.push(FieldError::new(
                    CV_PTR,
                    "the workspace has no uploaded configuration version: upload one first",
                ));
            }
            latest
        }
    };
    let cv = match cv {
        Some(cv) if errs.is_empty() => cv,
        _ => return Err(ApiError::Invalid(errs)),
    };
    let id = new_id(IdKind::Run);
    let integration = headers
        .get(terrace_crds::testrun::HEADER_TERRAFORM_INTEGRATION)
        .and_then(|v| v.to_str().ok());
    let source = if integration == Some("cloud") {
        "terraform+cloud"
    } else {
        "tfe-api"
    };
    let message = a.message.filter(|m| !m.is_empty()).unwrap_or_else(|| {
        if source == "terraform+cloud" {
            "Triggered via CLI".to_owned()
        } else {
            "Queued manually via the Terraform Enterprise API".to_owned()
        }
    });
    let spec = RunSpec {
        workspace: ws_object,
        configuration_version: cv.name_any(),
        is_destroy: a.is_destroy,
        refresh: a.refresh.unwrap_or(true),
        refresh_only: a.refresh_only,
        plan_only: a.plan_only || cv.spec.speculative,
        auto_apply: a.auto_apply.unwrap_or(ws.obj.spec.auto_apply),
        save_plan: a.save_plan,
        message,
        target_addrs: a.target_addrs,
        replace_addrs: a.replace_addrs,
        variables,
        source: source.to_owned(),
        origin: cv
            .spec
            .ingress_attributes
            .as_deref()
            .map(terrace_crds::vcs::origin),
        created_by: Some(format!("user:{}", caller.username)),
        allow_empty_apply: a.allow_empty_apply,
        allow_config_generation: a.allow_config_generation,
        terraform_version: a.terraform_version,
        debugging_mode: a.debugging_mode,
        invoke_action_addrs: a.invoke_action_addrs,
        policy_paths: a.policy_paths,
        assessment: false,
    };
    let mut run = Run {
        metadata: ws.owned_meta(&id, &[(LABEL_WORKSPACE_ID, ws.id())]),
        spec,
        status: None,
    };
    // The CLI reads a run's task stages once, right after creating it: a run whose plan
    // will be checked has its stage from the start.
    if !policy::sets_for(&state.index.read(), &ws.ns, &ws.obj).is_empty() {
        run.annotations_mut().insert(
            terrace_crds::constants::ANNOTATION_POLICY_CHECKS.to_owned(),
            "true".to_owned(),
        );
    }
    let api = write::api::<Run>(&state, &ws.ns);
    // Taken before the create: the operator may queue the run the moment it exists, and
    // its `plan-queued-at` must not precede the run's creation.
    let now = crate::render::now();
    let created = api.create(&PostParams::default(), &run).await?;
    // No `status`: a run without one is pending, and the operator may have moved it on
    // already (this patch must not take it back).
    let created = write::patch_status(
        &api,
        &created.name_any(),
        json!({"id": id, "workspaceName": ws.obj.spec.name, "statusTimestamps": {run::QUEUEABLE_AT: now}}),
    )
    .await?;
    write::wait_seen(&state, &created).await;
    let at = Located {
        obj: Arc::new(created),
        org: ws.org.clone(),
        ns: ws.ns.clone(),
    };
    render(
        &state,
        &caller,
        &at,
        StatusCode::CREATED,
        Included::default(),
    )
    .await
}

/// `status` with the run's document and what `inc` asks to include.
async fn render(
    state: &AppState,
    caller: &Caller,
    at: &Located<Run>,
    status: StatusCode,
    mut inc: Included,
) -> Result<Doc, ApiError> {
    let act = state
        .allowed(caller, &Check::new("patch", RESOURCE, &at.ns, None))
        .await?;
    let (ws_id, cv_id) = links_of(&state.index.read(), &at.obj);
    let data = run_data(
        &at.obj,
        ws_id.as_deref(),
        cv_id.as_deref(),
        RunPermissions { act },
        None,
    );
    include(
        state,
        &at.obj,
        &at.org,
        ws_id.as_deref(),
        cv_id.as_deref(),
        &mut inc,
    );
    if inc.wants("task_stages") && crate::documents::runs::has_stage(&at.obj) {
        let can = policy::may_override(state, caller, at).await?;
        inc.add(policy::stage_data(&at.obj, can));
    }
    Ok(inc.show(status, data))
}

/// Adds what `included` asks of run `r` (TFE's run includes; those terrace has no
/// objects for, such as `cost_estimate`, include nothing; `task_stages` is [`render`]'s).
fn include(
    state: &AppState,
    r: &Run,
    org: &Organization,
    ws_id: Option<&str>,
    cv_id: Option<&str>,
    included: &mut Included,
) {
    let id = id_of(r);
    for inc in included.names().to_vec() {
        match inc.as_str() {
            "plan" | "apply" => {
                let phase = if inc == "plan" {
                    Phase::Plan
                } else {
                    Phase::Apply
                };
                let url = log_url(state, "", &phase.id(&id));
                included.add(phase_data(r, phase, &url));
            }
            "workspace" => {
                if let Some(w) = ws_id.and_then(|id| state.index.read().workspace(id).cloned()) {
                    included.add(workspace_brief(&w, org));
                }
            }
            "configuration_version" | "configuration_version.ingress_attributes" => {
                if let Some(c) = cv_id
                    .and_then(|id| state.index.read().configuration_versions().get(id).cloned())
                {
                    included.add(crate::documents::config_versions::render(&c, None));
                    if inc == "configuration_version.ingress_attributes"
                        && let Some(i) = crate::documents::config_versions::render_ingress(&c)
                    {
                        included.add(i);
                    }
                }
            }
            "created_by" => {
                if let Some(user) = r
                    .spec
                    .created_by
                    .as_deref()
                    .and_then(|c| c.strip_prefix("user:"))
                {
                    included.add(user_document(user));
                }
            }
            _ => {}
        }
    }
}

/// A `users` document for a Kubernetes identity: its name is the ID and the `username`;
/// ServiceAccounts say so (`is-service-account`). terrace keeps no profile, so there is
/// no e-mail or avatar.
pub fn user_document(username: &str) -> Value {
    json!({
        "id": username,
        "type": "users",
        "attributes": {
            "username": username,
            "is-service-account": username.starts_with("system:serviceaccount:"),
            "avatar-url": Value::Null,
            "two-factor": {"enabled": false, "verified": false},
            "permissions": {"can-create-organizations": false, "can-change-email": false, "can-change-username": false},
        },
        "links": {"self": format!("/api/v2/users/{username}")},
    })
}

/// A workspace as a run's `included` shows it: what the CLI reads of it (name,
/// organization, lock, structured run output: whether its runs log the engine's JSON UI,
/// which the CLI then renders).
pub fn workspace_brief(w: &Workspace, org: &Organization) -> Value {
    let holder = terrace_crds::lock::holder_of(w);
    json!({
        "id": id_of(w),
        "type": "workspaces",
        "attributes": {
            "name": w.spec.name,
            "locked": holder.is_some(),
            "structured-run-output-enabled": w.spec.structured_run_output_enabled,
            "execution-mode": w.spec.execution_mode,
            "auto-apply": w.spec.auto_apply,
            "working-directory": w.spec.working_directory,
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
        },
    })
}

const RUN_INCLUDES: &[&str] = &[
    "plan",
    "apply",
    "workspace",
    "configuration_version",
    "created_by",
    "task_stages",
    "cost_estimate",
    "policy_checks",
    "run_events",
    "configuration_version.ingress_attributes",
];

async fn show(
    State(state): State<AppState>,
    f: Found<Run>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let inc = Included::asked(&q, RUN_INCLUDES)?;
    let mut doc = render(&state, &f.caller, &f.at, StatusCode::OK, inc).await?;
    absolutize(&mut doc.1, &base_url(&state, &headers));
    Ok(doc)
}

/// Makes the log-read URLs of a document absolute.
fn absolutize(doc: &mut Value, base: &str) {
    if let Some(items) = doc["included"].as_array_mut() {
        for i in items {
            if let Some(u) = i["attributes"]["log-read-url"].as_str()
                && u.starts_with('/')
            {
                i["attributes"]["log-read-url"] = json!(format!("{base}{u}"));
            }
        }
    }
}

async fn list(
    State(state): State<AppState>,
    f: Found<Workspace>,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let mut inc = Included::asked(&q, RUN_INCLUDES)?;
    q.supported_filters(&[
        "filter[status]",
        "filter[operation]",
        "filter[source]",
        "filter[status_group]",
    ])?;
    let statuses = q.values("filter[status]");
    let ws = &f.at;
    if !state
        .allowed(&f.caller, &Check::new("list", RESOURCE, &ws.ns, None))
        .await?
    {
        let base = format!("/api/v2/workspaces/{}/runs", ws.id());
        return Ok(inc.paged(&base, page, 0, Vec::new()));
    }
    let act = state
        .allowed(&f.caller, &Check::new("patch", RESOURCE, &ws.ns, None))
        .await?;
    let object = ws.object_name();
    let (runs, cv_ids) = {
        let idx = state.index.read();
        let mut runs: Vec<Arc<Run>> = idx
            .runs_of(&ws.ns, &object)
            .filter(|r| statuses.is_empty() || statuses.iter().any(|s| s == state_of(r).as_str()))
            .cloned()
            .collect();
        runs.sort_by_cached_key(|r| std::cmp::Reverse((r.queued_at(), r.name_any())));
        let cv_ids: BTreeMap<String, String> = idx
            .configuration_versions()
            .in_namespace(&ws.ns)
            .filter(|c| c.spec.workspace.as_deref() == Some(object.as_str()))
            .map(|c| (c.name_any(), id_of(c.as_ref())))
            .collect();
        (runs, cv_ids)
    };
    let ws_id = ws.id();
    // Older runs are archived (crate::history): merged in, in the same order.
    let archived_count = ws.obj.status.as_ref().and_then(|s| s.archived_runs);
    let manifest = state
        .history
        .manifest(&state, &ws.ns, HistoryKind::Runs, &ws_id, archived_count)
        .await?;
    let live = runs
        .into_iter()
        .map(|r| ((r.queued_at(), r.name_any()), id_of(r.as_ref()), r))
        .map(|(order, id, r)| (order, r, id))
        .collect();
    let entries = crate::history::merged(live, &manifest.items, |i| {
        statuses.is_empty()
            || statuses
                .iter()
                .any(|s| i.status.as_deref() == Some(s.as_str()))
    });
    let total = entries.len();
    let on_page = page_slice(&entries, page);
    let runs = state
        .history
        .page::<Run>(&state, &ws.ns, &ws_id, &manifest, on_page)
        .await?;
    let data: Vec<Value> = runs
        .iter()
        .map(|r| {
            let cv_id = cv_ids
                .get(&r.spec.configuration_version)
                .map(String::as_str);
            include(&state, r, &ws.org, Some(&ws_id), cv_id, &mut inc);
            run_data(r, Some(&ws_id), cv_id, RunPermissions { act }, None)
        })
        .collect();
    let base = format!("/api/v2/workspaces/{ws_id}/runs");
    let mut doc = inc.paged(&base, page, total, data);
    absolutize(&mut doc.1, &base_url(&state, &headers));
    Ok(doc)
}

/// The run actions.
const ACTIONS: [&str; 5] = [
    "apply",
    "discard",
    "cancel",
    "force-cancel",
    "force-execute",
];

/// The status patch that records `action` on run `r` asked by `who` at `now`: None when
/// it is recorded already (a repeated cancel), 409 when the run's state does not allow it.
/// Who asked a discard or a cancel is kept for the run's events (`actedBy`).
fn action_patch(action: &str, r: &Run, who: &str, now: &str) -> Result<Option<Value>, ApiError> {
    let s = state_of(r);
    let refuse = |what: &str| {
        ApiError::conflict(format!(
            "transition not allowed: the run is {s}, it cannot be {what}"
        ))
    };
    let cancel_asked = r
        .status
        .as_ref()
        .and_then(|st| st.cancel_requested_at.as_deref());
    let cancel_requested = cancel_asked.is_some();
    match action {
        "apply" if s.is_confirmable() => Ok(Some(json!({
            "status": RunState::Confirmed.as_str(),
            "confirmedBy": who,
            "statusTimestamps": {run::timestamp_key(RunState::Confirmed): now},
        }))),
        "apply" => Err(refuse("applied")),
        "discard" if s.is_discardable() => Ok(Some(json!({
            "status": RunState::Discarded.as_str(),
            "statusTimestamps": {run::timestamp_key(RunState::Discarded): now},
            "actedBy": {"discard": who},
        }))),
        "discard" => Err(refuse("discarded")),
        "cancel" if !s.is_cancelable() => Err(refuse("canceled")),
        "cancel" if cancel_requested => Ok(None),
        "cancel" => Ok(Some(
            json!({"cancelRequestedAt": now, "actedBy": {"cancel": who}}),
        )),
        "force-cancel" if !s.is_cancelable() => Err(refuse("force-canceled")),
        "force-cancel" if !cancel_requested => Err(ApiError::conflict(
            "transition not allowed: force-cancel is available after a cancel",
        )),
        "force-cancel" if !run::force_cancelable(s, cancel_asked, jiff::Timestamp::now()) => {
            Err(ApiError::conflict(format!(
                "transition not allowed: force-cancel is available from {} (force-cancel-available-at), {} seconds after the cancel",
                run::force_cancel_available_at(cancel_asked)
                    .map(|t| crate::render::timestamp(&t))
                    .unwrap_or_default(),
                run::FORCE_CANCEL_COOL_OFF_SECONDS
            )))
        }
        "force-cancel" => Ok(Some(
            json!({"forceCancelRequestedAt": now, "actedBy": {"force-cancel": who}}),
        )),
        _ => Err(ApiError::not_found("unknown run action")),
    }
}

/// The body an action may carry: `{"comment": "…"}` (or nothing).
#[derive(Debug, Default, Deserialize)]
struct ActionBody {
    #[serde(default)]
    comment: Option<String>,
}

/// `POST /runs/:id/actions/{apply,discard,cancel,force-cancel,force-execute}`: 202 when
/// recorded, 409 when the run is not in a state that allows it. A `comment` is kept as
/// one of the run's comments, in the same write as the action.
async fn act(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    caller: Caller,
    JsonApi(body): JsonApi<Option<ActionBody>>,
) -> Result<Response, ApiError> {
    let at = state.readable_live::<Run>(&caller, &id).await?;
    state
        .require_or_403(
            &caller,
            &at.check("patch"),
            "not authorized to act on this run",
        )
        .await?;
    if !ACTIONS.contains(&action.as_str()) {
        return Err(ApiError::not_found("unknown run action"));
    }
    let who = format!("user:{}", caller.username);
    let now = crate::render::now();
    let comment = body
        .and_then(|b| b.comment)
        .filter(|c| !c.trim().is_empty())
        .map(|c| comments::new_comment(&c, &who, &now, Some(&action)));
    if action == "force-execute" {
        return force_execute(&state, &at, &who, &now).await;
    }
    let change = |r: &Run| {
        let patch = action_patch(&action, r, &who, &now)?;
        match &comment {
            None => Ok(patch),
            Some(c) => {
                let mut patch = patch.unwrap_or_else(|| json!({}));
                patch["comments"] = comments::comments_patch(r, c)?;
                Ok(Some(patch))
            }
        }
    };
    let api = write::api::<Run>(&state, &at.ns);
    // Decided on the indexed copy first; a conflict re-reads the live object.
    let written = write::guarded_status_patch(&api, (*at.obj).clone(), change).await?;
    write::wait_seen(&state, &written).await;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `POST /runs/:id/actions/force-execute`: the pending run goes next, by discarding every
/// run of the workspace ahead of it ([`run::force_execute`] decides which, or why not:
/// 409). Each discard is its own guarded write, so a run that moved on meanwhile (started
/// planning) stops it with 409.
async fn force_execute(
    state: &AppState,
    at: &Located<Run>,
    who: &str,
    now: &str,
) -> Result<Response, ApiError> {
    let ahead: Vec<Arc<Run>> = {
        let idx = state.index.read();
        let runs: Vec<(String, Arc<Run>)> = idx
            .runs_of(&at.ns, &at.obj.spec.workspace)
            .map(|r| (r.queued_at(), r.clone()))
            .collect();
        let queue: Vec<run::QueuedRun<'_>> = runs
            .iter()
            .map(|(t, r)| run::QueuedRun {
                name: r.metadata.name.as_deref().unwrap_or_default(),
                created: t,
                state: state_of(r),
                plan_only: r.spec.plan_only,
            })
            .collect();
        let lock = idx
            .workspace_object(&at.ns, &at.obj.spec.workspace)
            .and_then(|w| terrace_crds::lock::holder_of(w));
        let names = run::force_execute(&at.obj.name_any(), &queue, lock.as_ref())
            .map_err(|e| ApiError::conflict(e.to_string()))?;
        runs.iter()
            .filter(|(_, r)| names.contains(&r.metadata.name.as_deref().unwrap_or_default()))
            .map(|(_, r)| r.clone())
            .collect()
    };
    let api = write::api::<Run>(state, &at.ns);
    for r in ahead {
        let written = write::guarded_status_patch(&api, (*r).clone(), |r| {
            action_patch("discard", r, who, now)
        })
        .await?;
        write::wait_seen(state, &written).await;
    }
    Ok(StatusCode::ACCEPTED.into_response())
}

/// The run of plan or apply `phase_id`, if the caller may read it.
async fn run_of_phase(
    state: &AppState,
    caller: &Caller,
    phase_id: &str,
) -> Result<Located<Run>, ApiError> {
    let run_id = run::run_of(phase_id).ok_or_else(|| ApiError::not_found("not found"))?;
    state.readable::<Run>(caller, &run_id).await
}

/// A phase as a type, so that one handler serves the route of the plan and of the apply.
trait PhaseRoute: Send + Sync + 'static {
    const PHASE: Phase;
}

struct PlanRoute;
struct ApplyRoute;

impl PhaseRoute for PlanRoute {
    const PHASE: Phase = Phase::Plan;
}

impl PhaseRoute for ApplyRoute {
    const PHASE: Phase = Phase::Apply;
}

/// `GET /plans/:id`, `GET /applies/:id`.
async fn show_phase<P: PhaseRoute>(
    Authed { state, caller }: Authed,
    Path(phase_id): Path<String>,
    headers: HeaderMap,
) -> Result<Doc, ApiError> {
    let phase = P::PHASE.as_str();
    if !phase_id.starts_with(&format!("{phase}-")) {
        return Err(ApiError::not_found(format!("{phase} not found")));
    }
    let at = run_of_phase(&state, &caller, &phase_id).await?;
    let base = base_url(&state, &headers);
    let url = log_url(&state, &base, &phase_id);
    Ok(Doc::ok(phase_data(&at.obj, P::PHASE, &url)))
}

/// `GET /runs/:id/plan`, `GET /runs/:id/apply`.
async fn phase_of_run<P: PhaseRoute>(
    State(state): State<AppState>,
    f: Found<Run>,
    headers: HeaderMap,
) -> Doc {
    let base = base_url(&state, &headers);
    let url = log_url(&state, &base, &P::PHASE.id(&f.at.id()));
    Doc::ok(phase_data(&f.at.obj, P::PHASE, &url))
}

/// The JSON plan (`terraform show -json` of the plan file): it holds sensitive values,
/// so it needs `read-state` on the workspace, as the state does.
async fn json_plan(
    state: &AppState,
    caller: &Caller,
    at: &Located<Run>,
) -> Result<Response, ApiError> {
    let ws = Check::new(
        "read-state",
        "workspaces",
        &at.ns,
        Some(&at.obj.spec.workspace),
    );
    state
        .require_or_403(
            caller,
            &ws,
            "reading a plan's JSON output needs the read-state right on the workspace",
        )
        .await?;
    json_blob(
        state,
        at,
        &plan_json_key(&at.id()),
        "the JSON plan",
        "this plan has no JSON output (yet)",
    )
    .await
}

/// The JSON blob `key` of run `at` as a response (`what`/`missing`: the words of a read
/// error).
async fn json_blob(
    state: &AppState,
    at: &Located<Run>,
    key: &str,
    what: &'static str,
    missing: &'static str,
) -> Result<Response, ApiError> {
    let bytes = crate::blobs::store(state, &at.ns, at.obj.controller_owner_ref(&()))
        .get(key, None)
        .await
        .map_err(|e| crate::blobs::read_error(what, missing, e))?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response())
}

async fn json_output(
    Authed { state, caller }: Authed,
    Path(plan): Path<String>,
) -> Result<Response, ApiError> {
    let at = run_of_phase(&state, &caller, &plan).await?;
    json_plan(&state, &caller, &at).await
}

/// `GET /plans/:id/json-output-redacted`: the plan as the CLI renders it (`terraform
/// show` of a saved plan), sensitive values replaced
/// ([`terrace_crds::run::redact`]), so whoever may read the run may read it.
async fn json_output_redacted(
    Authed { state, caller }: Authed,
    Path(plan): Path<String>,
) -> Result<Response, ApiError> {
    let at = run_of_phase(&state, &caller, &plan).await?;
    json_blob(
        &state,
        &at,
        &plan_json_redacted_key(&at.id()),
        "the redacted JSON plan",
        "this plan has no redacted JSON output (yet)",
    )
    .await
}

async fn json_output_of_run(
    State(state): State<AppState>,
    f: Found<Run>,
) -> Result<Response, ApiError> {
    json_plan(&state, &f.caller, &f.at).await
}

/// `GET /plans/:id/log/:token`, `GET /applies/:id/log/:token`: a phase's log through its
/// capability URL (no Authorization; another phase's ID, a forged or expired token: 404).
/// The terraform CLI's `cloud` backend (`X-Terraform-Integration: cloud`) reads the
/// engine's `-json` UI lines and renders them (structured run output); every other reader
/// gets them as text (docs/runs.md, "Structured run output").
async fn log(
    State(state): State<AppState>,
    Path((phase_id, token)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    q: QueryParams,
) -> Result<Response, ApiError> {
    if !crate::documents::runs::log_token_ok(&state, &phase_id, &token) {
        return Err(ApiError::not_found("log not found"));
    }
    let run_id = run::run_of(&phase_id).ok_or_else(|| ApiError::not_found("log not found"))?;
    let live = state.index.read().runs().get(&run_id).cloned();
    let (r, is_archived) = match live {
        Some(r) => (r, false),
        None => match state.history.find::<Run>(&state, &run_id).await? {
            Some((r, _, _)) => (r, true),
            None => return Err(ApiError::not_found("log not found")),
        },
    };
    let st = r.status.clone().unwrap_or_default();
    let s = state_of(&r);
    let reached = crate::documents::runs::reached_apply(&r);
    // The operator's `terrace: <why>` line ends the log of the phase the run errored in
    // (the last one that ran).
    let last_phase = st.apply.pod_name.is_none() == phase_id.starts_with("plan-");
    let (phase, status) = if phase_id.starts_with("plan-") {
        (st.plan, s.plan_status(reached))
    } else {
        (st.apply, s.apply_status(reached))
    };
    let finished = matches!(status, "finished" | "errored" | "canceled" | "unreachable");
    let ns = r.namespace().unwrap_or_default();
    let cause = st
        .message
        .as_deref()
        .filter(|_| last_phase && s == RunState::Errored);
    let archived = match (is_archived, phase.pod_name.as_deref()) {
        (true, Some(pod)) => Some(
            state
                .history
                .log::<Run>(&state, &run_id, pod)
                .await?
                .unwrap_or_default(),
        ),
        (true, None) => Some(Vec::new()),
        (false, _) => None,
    };
    crate::pod_logs::respond(
        crate::pod_logs::LogRead {
            client: &state.client,
            store: crate::blobs::store(&state, &ns, None),
            ns: &ns,
            pod: phase.pod_name.as_deref(),
            wait_note: phase.wait_note.as_deref(),
            finished,
            readable: !renders_structured_output(&headers),
            cause,
            archived,
        },
        &q,
    )
    .await
}

/// Whether the caller is the terraform CLI's `cloud` backend, which renders the engine's
/// JSON UI lines itself.
fn renders_structured_output(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(terrace_crds::constants::HEADER_TERRAFORM_INTEGRATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cloud"))
}

/// The organization's runs waiting or running (`GET /organizations/:org/runs/queue`).
async fn queue(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let runs = state.listable::<Run>(&o.caller, &o.org).await?;
    let mut active: Vec<Arc<Run>> = runs
        .into_iter()
        .filter(|r| {
            let s = state_of(r);
            !s.is_final()
                && !matches!(
                    s,
                    RunState::Planned
                        | RunState::PlannedAndSaved
                        | RunState::PostPlanCompleted
                        | RunState::PostPlanAwaitingDecision
                )
        })
        .collect();
    active.sort_by_cached_key(|r| (r.queued_at(), r.name_any()));
    let idx = state.index.read();
    let base = format!("/api/v2/organizations/{}/runs/queue", o.org.tfe_name());
    Ok(crate::render::list(&base, page, &active, |r| {
        let (ws, cv) = links_of(&idx, r);
        run_data(
            r,
            ws.as_deref(),
            cv.as_deref(),
            RunPermissions::default(),
            Some(0),
        )
    }))
}

/// `GET /organizations/:org/runs`: the organization's runs the caller may list, newest
/// first, paged, with `include` as a run's and the filters TFE's list takes:
/// `filter[workspace_names]`, `filter[status]`, `filter[agent_pool_names]` (each a
/// comma-separated list).
async fn org_list(
    State(state): State<AppState>,
    o: VisibleOrg,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let inc = Included::asked(&q, RUN_INCLUDES)?;
    q.supported_filters(&[
        "filter[workspace_names]",
        "filter[status]",
        "filter[agent_pool_names]",
        "filter[source]",
        "filter[operation]",
        "filter[status_group]",
    ])?;
    let (names, statuses, pools) = (
        q.values("filter[workspace_names]"),
        q.values("filter[status]"),
        q.values("filter[agent_pool_names]"),
    );
    let ns = o.org.target_namespace().to_owned();
    let mut runs: Vec<Arc<Run>> = {
        let listed = state.listable::<Run>(&o.caller, &o.org).await?;
        let idx = state.index.read();
        listed
            .into_iter()
            .filter(|r| statuses.is_empty() || statuses.iter().any(|s| s == state_of(r).as_str()))
            .filter(|r| {
                let ws = idx.workspace_object(&ns, &r.spec.workspace);
                let named =
                    names.is_empty() || ws.is_some_and(|w| names.iter().any(|n| *n == w.spec.name));
                let pooled = pools.is_empty()
                    || ws
                        .and_then(|w| w.spec.agent_pool_id.as_deref())
                        .and_then(|p| idx.agent_pools().get(p))
                        .is_some_and(|p| pools.iter().any(|n| *n == p.spec.name));
                named && pooled
            })
            .collect()
    };
    runs.sort_by_cached_key(|r| std::cmp::Reverse((r.queued_at(), r.name_any())));
    let act = state
        .allowed(&o.caller, &Check::new("patch", RESOURCE, &ns, None))
        .await?;
    let base = format!("/api/v2/organizations/{}/runs", o.org.tfe_name());
    let mut doc = inc.list(&base, page, &runs, |r, inc| {
        let (ws, cv) = links_of(&state.index.read(), r);
        include(&state, r, &o.org, ws.as_deref(), cv.as_deref(), inc);
        run_data(
            r,
            ws.as_deref(),
            cv.as_deref(),
            RunPermissions { act },
            None,
        )
    });
    absolutize(&mut doc.1, &base_url(&state, &headers));
    Ok(doc)
}

/// How many of the organization's runs wait and run (`GET /organizations/:org/capacity`).
async fn capacity(State(state): State<AppState>, o: VisibleOrg) -> Result<Doc, ApiError> {
    let runs = state.listable::<Run>(&o.caller, &o.org).await?;
    let running = runs.iter().filter(|r| state_of(r).is_running()).count();
    let pending = runs
        .iter()
        .filter(|r| {
            matches!(
                state_of(r),
                RunState::Pending
                    | RunState::PlanQueued
                    | RunState::ApplyQueued
                    | RunState::Confirmed
            )
        })
        .count();
    Ok(Doc::ok(json!({
        "id": o.org.tfe_name(),
        "type": "organization-capacity",
        "attributes": {"pending": pending, "running": running},
    })))
}
