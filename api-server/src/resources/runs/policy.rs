//! Policy checks of runs (docs/policies.md), in TFE's shape for the post-plan task stage:
//! the policies of every PolicySet that applies to the run's workspace are evaluated when
//! the plan's runner stores the JSON plan (before the plan Pod ends, so the operator finds
//! the outcome when it moves the run on), and kept in the run's status. The run's task
//! stage (`ts-…`), its policy evaluation (`poleval-…`) and the outcome of each set
//! (`polsetoutcome-…-N`) are views of that record under IDs derived from the run's.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use terrace_crds::policy::{self, Counts, Enforcement, RunFacts, stage_status};
use terrace_crds::resources::Named;
use terrace_crds::run::{self, RunState};
use terrace_crds::{
    PolicySet, PolicySetPolicy, PolicySetResult, Run, RunPolicyEvaluation, Workspace,
    constants::LABEL_ID,
};

use super::comments;
use crate::documents::runs::{evaluation, has_stage, stage_id, state_of, suffix};
use crate::prelude::*;

/// The RBAC verb (on the workspace) of overriding failed mandatory policies.
pub const OVERRIDE_VERB: &str = "override-policy";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/runs/{id}/task-stages", get(list_stages))
        .route("/api/v2/task-stages/{id}", get(show_stage))
        .route(
            "/api/v2/task-stages/{id}/policy-evaluations",
            get(list_evaluations),
        )
        .route(
            "/api/v2/task-stages/{id}/actions/override",
            post(override_stage),
        )
        .route("/api/v2/policy-evaluations/{id}", get(show_evaluation))
        .route(
            "/api/v2/policy-evaluations/{id}/policy-set-outcomes",
            get(list_outcomes),
        )
        .route("/api/v2/runs/{id}/policy-checks", get(list_policy_checks))
        .route("/api/v2/policy-set-outcomes/{id}", get(show_outcome))
}

fn evaluation_id(run_id: &str) -> String {
    format!("poleval-{}", suffix(run_id))
}

fn outcome_id(run_id: &str, i: usize) -> String {
    format!("polsetoutcome-{}-{i}", suffix(run_id))
}

/// The run of a `ts-…` or `poleval-…` ID.
fn run_of(id: &str, prefix: &str) -> Result<String, ApiError> {
    id.strip_prefix(prefix)
        .filter(|s| !s.is_empty() && !s.contains('-'))
        .map(|s| format!("run-{s}"))
        .ok_or_else(|| ApiError::not_found("not found"))
}

fn count_json(c: Counts) -> Value {
    json!({
        "advisory-failed": c.advisory_failed,
        "mandatory-failed": c.mandatory_failed,
        "passed": c.passed,
        "errored": c.errored,
    })
}

fn evaluation_status(r: &Run) -> &'static str {
    match evaluation(r) {
        Some(e) => e.status(),
        None => stage_status(None, state_of(r)),
    }
}

/// The timestamps of a stage or evaluation in `status` (`passed-at`, …): when it ran,
/// when it ended, and when it was overridden.
fn status_timestamps(r: &Run, status: &str) -> Value {
    let Some(e) = evaluation(r).filter(|_| status != "pending") else {
        return json!({});
    };
    let mut t = json!({"running-at": e.evaluated_at});
    let ended = match status {
        "awaiting_override" | "overridden" => "failed-at".to_owned(),
        // An overridden stage passed when the override came.
        "passed" if e.overridden_at.is_some() => "failed-at".to_owned(),
        s => format!("{s}-at"),
    };
    t[ended] = json!(e.evaluated_at);
    if let Some(at) = &e.overridden_at {
        t["overridden-at"] = json!(at);
        if status == "passed" {
            t["passed-at"] = json!(at);
        }
    }
    t
}

/// The JSON:API `data` of run `r`'s task stage.
pub fn stage_data(r: &Run, can_override: bool) -> Value {
    let run_id = id_of(r);
    let status = stage_status(evaluation(r), state_of(r));
    let updated = evaluation(r)
        .map(|e| json!(e.overridden_at.as_deref().unwrap_or(&e.evaluated_at)))
        .unwrap_or_else(|| created_at(r));
    json!({
        "id": stage_id(&run_id),
        "type": "task-stages",
        "attributes": {
            "stage": "post_plan",
            "status": status,
            "status-timestamps": status_timestamps(r, status),
            "created-at": created_at(r),
            "updated-at": updated,
            "permissions": {
                "can-override-policy": can_override,
                "can-override-tasks": false,
                "can-override": can_override,
            },
            "actions": {"is-overridable": status == "awaiting_override"},
        },
        "relationships": {
            "run": {"data": {"id": run_id, "type": "runs"}},
            "task-results": {"data": []},
            "cost-estimate": {"data": null},
            "policy-evaluations": {"data": [{"id": evaluation_id(&run_id), "type": "policy-evaluations"}]},
        },
        "links": {"self": format!("/api/v2/task-stages/{}", stage_id(&run_id))},
    })
}

/// The JSON:API `data` of run `r`'s policy evaluation.
fn evaluation_data(r: &Run) -> Value {
    let run_id = id_of(r);
    let status = evaluation_status(r);
    let (counts, outcomes) = match evaluation(r) {
        Some(e) => (
            Counts::of(e.results()),
            (0..e.sets.len())
                .map(|i| json!({"id": outcome_id(&run_id, i), "type": "policy-set-outcomes"}))
                .collect(),
        ),
        None => (Counts::default(), Vec::new()),
    };
    json!({
        "id": evaluation_id(&run_id),
        "type": "policy-evaluations",
        "attributes": {
            "status": status,
            "policy-kind": "opa",
            "policy-tool-version": "regorus",
            "result-count": count_json(counts),
            "status-timestamps": status_timestamps(r, status),
            "created-at": created_at(r),
            "updated-at": evaluation(r).map(|e| json!(e.evaluated_at)).unwrap_or_else(|| created_at(r)),
        },
        "relationships": {
            "policy-attachable": {"data": {"id": stage_id(&run_id), "type": "task-stages"}},
            "policy-set-outcomes": {"data": outcomes},
        },
        "links": {"self": format!("/api/v2/policy-evaluations/{}", evaluation_id(&run_id))},
    })
}

/// What `filter[N][status]` and `filter[N][enforcement_level]` keep (none: everything).
#[derive(Default)]
struct OutcomeFilter(Vec<(Option<String>, Option<String>)>);

impl OutcomeFilter {
    fn parse(q: &QueryParams) -> Result<OutcomeFilter, ApiError> {
        let mut by_n: std::collections::BTreeMap<String, (Option<String>, Option<String>)> =
            Default::default();
        for (k, v) in &q.0 {
            let Some(rest) = k.strip_prefix("filter[") else {
                continue;
            };
            let Some((n, field)) = rest.split_once("][") else {
                return Err(ApiError::bad_parameter(k.clone(), "unsupported filter"));
            };
            let entry = by_n.entry(n.to_owned()).or_default();
            match field {
                "status]" => entry.0 = Some(v.clone()),
                "enforcement_level]" => entry.1 = Some(v.clone()),
                _ => return Err(ApiError::bad_parameter(k.clone(), "unsupported filter")),
            }
        }
        Ok(OutcomeFilter(by_n.into_values().collect()))
    }

    /// Whether the set is listed: with a filter, only when some of its outcomes are kept
    /// (go-tfe expects a set whose outcomes all filter away to be left out).
    fn keeps_set(&self, set: &PolicySetResult) -> bool {
        self.0.is_empty() || set.outcomes.iter().any(|o| self.keeps(o))
    }

    fn keeps(&self, o: &terrace_crds::PolicyResult) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|(status, level)| {
                status.as_deref().is_none_or(|s| s == o.status)
                    && level.as_deref().is_none_or(|l| l == o.enforcement_level)
            })
    }
}

/// The JSON:API `data` of the outcome of set `i` of run `r`.
fn outcome_data(r: &Run, i: usize, set: &PolicySetResult, filter: &OutcomeFilter) -> Value {
    let run_id = id_of(r);
    let outcomes: Vec<Value> = set
        .outcomes
        .iter()
        .filter(|o| filter.keeps(o))
        .map(|o| {
            json!({
                "enforcement_level": o.enforcement_level,
                "query": o.query,
                "status": o.status,
                "policy_name": o.policy,
                "description": o.description,
                "output": o.output.iter().map(|m| json!({"print": m})).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "id": outcome_id(&run_id, i),
        "type": "policy-set-outcomes",
        "attributes": {
            "outcomes": outcomes,
            "error": set.error,
            "overridable": set.overridable,
            "policy-set-name": set.name,
            "policy-set-description": set.description,
            "result_count": count_json(Counts::of(set.outcomes.iter())),
        },
        "relationships": {
            "policy-evaluation": {"data": {"id": evaluation_id(&run_id), "type": "policy-evaluations"}},
        },
        "links": {"self": format!("/api/v2/policy-set-outcomes/{}", outcome_id(&run_id, i))},
    })
}

/// May the caller override the failed policies of run `at` (`override-policy` on its
/// workspace)?
pub async fn may_override(
    state: &AppState,
    caller: &Caller,
    at: &Located<Run>,
) -> Result<bool, ApiError> {
    let check = Check::new(
        OVERRIDE_VERB,
        "workspaces",
        &at.ns,
        Some(&at.obj.spec.workspace),
    );
    state.allowed(caller, &check).await
}

/// The run of stage `id` with a stage, if the caller may read it.
async fn staged_run(state: &AppState, caller: &Caller, id: &str) -> Result<Located<Run>, ApiError> {
    let at = state.readable::<Run>(caller, &run_of(id, "ts-")?).await?;
    if has_stage(&at.obj) {
        Ok(at)
    } else {
        Err(ApiError::not_found("task stage not found"))
    }
}

const STAGE_INCLUDES: &[&str] = &["task_results", "policy_evaluations", "run"];

/// `GET /runs/:id/task-stages`.
async fn list_stages(
    State(state): State<AppState>,
    f: Found<Run>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let stages: Vec<Value> = if has_stage(&f.at.obj) {
        vec![stage_data(
            &f.at.obj,
            may_override(&state, &f.caller, &f.at).await?,
        )]
    } else {
        Vec::new()
    };
    Ok(list_rendered(
        &format!("/api/v2/runs/{}/task-stages", f.at.id()),
        page,
        &stages,
    ))
}

/// `GET /task-stages/:id` (`include=policy_evaluations`).
async fn show_stage(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(&q, STAGE_INCLUDES)?;
    let at = staged_run(&state, &caller, &id).await?;
    if inc.wants("policy_evaluations") {
        inc.add(evaluation_data(&at.obj));
    }
    let data = stage_data(&at.obj, may_override(&state, &caller, &at).await?);
    Ok(inc.show(StatusCode::OK, data))
}

/// `GET /task-stages/:id/policy-evaluations`.
async fn list_evaluations(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let at = staged_run(&state, &caller, &id).await?;
    let all = [evaluation_data(&at.obj)];
    Ok(list_rendered(
        &format!("/api/v2/task-stages/{id}/policy-evaluations"),
        page,
        &all,
    ))
}

/// `GET /policy-evaluations/:id`.
async fn show_evaluation(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> Result<Doc, ApiError> {
    let run_id = run_of(&id, "poleval-")?;
    let at = staged_run(&state, &caller, &stage_id(&run_id)).await?;
    Ok(Doc::ok(evaluation_data(&at.obj)))
}

/// `GET /runs/:id/policy-checks`: Sentinel's policy checks, of which terrace has none (its
/// OPA checks are the run's task stage); an empty list, as TFE answers for a run without.
async fn list_policy_checks(f: Found<Run>, q: QueryParams) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let none: [Value; 0] = [];
    Ok(list_rendered(
        &format!("/api/v2/runs/{}/policy-checks", f.at.id()),
        page,
        &none,
    ))
}

/// `GET /policy-evaluations/:id/policy-set-outcomes` (`filter[N][status]`,
/// `filter[N][enforcement_level]`).
async fn list_outcomes(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let filter = OutcomeFilter::parse(&q)?;
    let run_id = run_of(&id, "poleval-")?;
    let at = staged_run(&state, &caller, &stage_id(&run_id)).await?;
    let all: Vec<Value> = evaluation(&at.obj)
        .map(|e| {
            e.sets
                .iter()
                .enumerate()
                .filter(|(_, s)| filter.keeps_set(s))
                .map(|(i, s)| outcome_data(&at.obj, i, s, &filter))
                .collect()
        })
        .unwrap_or_default();
    Ok(list_rendered(
        &format!("/api/v2/policy-evaluations/{id}/policy-set-outcomes"),
        page,
        &all,
    ))
}

/// `GET /policy-set-outcomes/:id`.
async fn show_outcome(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
) -> Result<Doc, ApiError> {
    let not_found = || ApiError::not_found("policy set outcome not found");
    let (run_suffix, i) = id
        .strip_prefix("polsetoutcome-")
        .and_then(|s| s.rsplit_once('-'))
        .ok_or_else(not_found)?;
    let i: usize = i.parse().map_err(|_| not_found())?;
    let at = staged_run(&state, &caller, &format!("ts-{run_suffix}")).await?;
    let set = evaluation(&at.obj)
        .and_then(|e| e.sets.get(i))
        .ok_or_else(not_found)?;
    Ok(Doc(
        StatusCode::OK,
        json!({"data": outcome_data(&at.obj, i, set, &OutcomeFilter::default())}),
    ))
}

/// The body of an override: `{"comment": "…"}` (or nothing).
#[derive(Debug, Default, Deserialize)]
struct OverrideBody {
    #[serde(default)]
    comment: Option<String>,
}

/// `POST /task-stages/:id/actions/override`: a run waiting `post_plan_awaiting_decision`
/// goes on as if its policies had passed (to `post_plan_completed`, or its apply when it
/// auto-applies). 403 without `override-policy` on the workspace; 409 when the run does
/// not wait for a decision.
async fn override_stage(
    Authed { state, caller }: Authed,
    Path(id): Path<String>,
    JsonApi(body): JsonApi<Option<OverrideBody>>,
) -> Result<Doc, ApiError> {
    let at = staged_run(&state, &caller, &id).await?;
    if !may_override(&state, &caller, &at).await? {
        return Err(ApiError::Forbidden(
            "not authorized to override policies in this workspace".into(),
        ));
    }
    let who = format!("user:{}", caller.username);
    let now = crate::render::now();
    let comment = body
        .and_then(|b| b.comment)
        .filter(|c| !c.trim().is_empty())
        .map(|c| comments::new_comment(&c, &who, &now, Some("override")));
    let change = |r: &Run| {
        let s = state_of(r);
        if s != RunState::PostPlanAwaitingDecision {
            return Err(ApiError::conflict(format!(
                "transition not allowed: the run is {s}; only a run awaiting a policy decision can be overridden"
            )));
        }
        let to = run::after_policy_checks(run::Flags {
            save_plan: r.spec.save_plan,
            auto_apply: r.spec.auto_apply,
            policy: policy::Gate::Passed,
            ..run::Flags::default()
        });
        let mut patch = json!({
            "status": to.as_str(),
            "message": null,
            "statusTimestamps": {run::timestamp_key(to): now},
            "policyEvaluation": {"overriddenBy": who, "overriddenAt": now},
        });
        if to == RunState::Confirmed {
            patch["confirmedBy"] = json!("auto-apply");
        }
        if let Some(c) = &comment {
            patch["comments"] = comments::comments_patch(r, c)?;
        }
        Ok(Some(patch))
    };
    let api = write::api::<Run>(&state, &at.ns);
    let written = write::guarded_status_patch(&api, (*at.obj).clone(), change).await?;
    write::wait_seen(&state, &written).await;
    let can = may_override(&state, &caller, &at).await?;
    Ok(Doc(
        StatusCode::OK,
        json!({"data": stage_data(&written, can)}),
    ))
}

/// The policy sets of namespace `ns` that apply to workspace `ws` (from the index), by
/// name.
pub fn sets_for(idx: &crate::index::Inner, ns: &str, ws: &Workspace) -> Vec<Arc<PolicySet>> {
    let ws_id = ws.labels().get(LABEL_ID).cloned();
    let me = Named {
        id: ws_id.as_deref(),
        name: &ws.spec.name,
    };
    let project = idx.project_of(ws).cloned();
    let project_id = project
        .as_ref()
        .and_then(|p| p.labels().get(LABEL_ID).cloned());
    let project = project.as_ref().map(|p| Named {
        id: project_id.as_deref(),
        name: &p.spec.name,
    });
    let mut sets: Vec<Arc<PolicySet>> = idx
        .policy_sets()
        .in_namespace(ns)
        .filter(|s| s.spec.applies_to(me, project))
        .cloned()
        .collect();
    sets.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    sets
}

/// The policies set `set` checks: its own, then the Policy objects it references (by
/// object name or ID), or which reference names nothing.
pub fn policies_of(
    idx: &crate::index::Inner,
    set: &PolicySet,
) -> Result<Vec<PolicySetPolicy>, String> {
    let ns = set.namespace().unwrap_or_default();
    let mut out = set.spec.policies.clone();
    for r in &set.spec.policy_refs {
        match idx.policy_referenced(&ns, r) {
            Some(p) => out.push(PolicySetPolicy::from(&p.spec)),
            None => return Err(format!("policy {r} not found")),
        }
    }
    Ok(out)
}

/// What one set needs evaluated: its policies, the Rego of each, and its parameters.
/// A set ready to evaluate: its policies, the Rego of each, its parameters and the values
/// of its sensitive parameters (which no message may repeat).
type Loaded = (Vec<PolicySetPolicy>, Vec<String>, Value, Vec<String>);

/// The policies of `set`, the Rego of each and the set's parameters, or why the set
/// cannot be evaluated.
async fn load(state: &AppState, ns: &str, set: &PolicySet) -> Result<Loaded, String> {
    let policies = policies_of(&state.index.read(), set)?;
    let mut regos = Vec::new();
    for p in &policies {
        let rego = match (&p.rego, &p.rego_from) {
            (Some(r), _) => r.clone(),
            (None, Some(from)) => {
                let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
                    state.client.clone(),
                    ns,
                )
                .get_opt(&from.name)
                .await
                .map_err(|e| format!("reading ConfigMap {}: {e}", from.name))?;
                cm.and_then(|c| c.data)
                    .and_then(|mut d| d.remove(&from.key))
                    .ok_or_else(|| {
                        format!(
                            "policy {}: ConfigMap {} has no key {}",
                            p.name, from.name, from.key
                        )
                    })?
            }
            (None, None) => return Err(format!("policy {} has no Rego yet", p.name)),
        };
        regos.push(rego);
    }
    let mut pairs = Vec::new();
    let mut sensitive = Vec::new();
    for param in &set.spec.parameters {
        let value = match (&param.value, &param.value_from) {
            (_, Some(from)) => {
                let secret = Api::<Secret>::namespaced(state.client.clone(), ns)
                    .get_opt(&from.name)
                    .await
                    .map_err(|e| format!("reading Secret {}: {e}", from.name))?;
                let bytes = secret
                    .and_then(|s| s.data)
                    .and_then(|mut d| d.remove(&from.key))
                    .ok_or_else(|| {
                        format!(
                            "parameter {}: Secret {} has no key {}",
                            param.key, from.name, from.key
                        )
                    })?;
                String::from_utf8(bytes.0)
                    .map_err(|_| format!("parameter {}: its Secret value is not text", param.key))?
            }
            (Some(v), None) => v.clone(),
            (None, None) => String::new(),
        };
        if param.sensitive || param.value_from.is_some() {
            sensitive.push(value.clone());
        }
        pairs.push((param.key.clone(), value));
    }
    let params = policy::parameters(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Ok((policies, regos, params, sensitive))
}

/// What the input document says of run `r` of workspace `ws`.
fn facts(state: &AppState, r: &Run, run_id: &str, ns: &str, ws: &Workspace) -> RunFacts {
    let idx = state.index.read();
    let org = idx
        .organization_of_namespace(ns)
        .map(|o| o.tfe_name().to_owned())
        .unwrap_or_default();
    let project = idx.project_of(ws);
    RunFacts {
        id: run_id.to_owned(),
        created_at: created_at(r).as_str().unwrap_or_default().to_owned(),
        message: r.spec.message.clone(),
        commit_sha: None,
        is_destroy: r.spec.is_destroy,
        refresh_only: r.spec.refresh_only,
        speculative: r.spec.plan_only,
        replace_addrs: r.spec.replace_addrs.clone(),
        target_addrs: r.spec.target_addrs.clone(),
        variables: r
            .spec
            .variables
            .iter()
            .map(|v| (v.key.clone(), json!(v.value)))
            .collect(),
        organization: org,
        workspace_id: ws.labels().get(LABEL_ID).cloned().unwrap_or_default(),
        workspace: ws.spec.name.clone(),
        execution_mode: ws
            .spec
            .execution_mode
            .clone()
            .unwrap_or_else(|| "remote".to_owned()),
        tags: ws.spec.tags.clone(),
        project_id: project
            .and_then(|p| p.labels().get(LABEL_ID).cloned())
            .unwrap_or_default(),
        project: project.map(|p| p.spec.name.clone()).unwrap_or_default(),
    }
}

/// Evaluates the policy sets that apply to run `r`'s workspace against its JSON plan
/// (`plan`), when the plan changes something, and records the outcome in the run's
/// status. A set that cannot be loaded errors its policies; each policy runs under
/// [`policy::DEFAULT_TIME_LIMIT`] on a blocking thread.
pub async fn check_plan(
    state: &AppState,
    r: &Run,
    run_id: &str,
    plan: &Value,
) -> Result<(), ApiError> {
    if !run::count_changes(plan).has_changes {
        return Ok(());
    }
    let ns = r.namespace().unwrap_or_default();
    let Some(ws) = state
        .index
        .read()
        .workspace_object(&ns, &r.spec.workspace)
        .cloned()
    else {
        return Ok(());
    };
    let sets = sets_for(&state.index.read(), &ns, &ws);
    if sets.is_empty() {
        return Ok(());
    }
    let started = crate::render::now();
    let secrets = run::redact::sensitive_values(plan);
    let input = policy::input(plan, &facts(state, r, run_id, &ns, &ws));
    let mut loaded = Vec::new();
    for set in sets {
        let got = load(state, &ns, &set).await;
        loaded.push((set, got));
    }
    let mut results = Vec::new();
    for (set, got) in loaded {
        results.push(evaluate_set(state, &set, got, &input, &secrets).await);
    }
    let record = RunPolicyEvaluation {
        evaluated_at: crate::render::now(),
        sets: results,
        ..RunPolicyEvaluation::default()
    };
    write::patch_status(
        &write::api::<Run>(state, &ns),
        &r.name_any(),
        // The checks ran while the plan's Pod was still up (the run stays `planning`
        // until it ends): TFE's `post-plan-running-at` says when they started.
        json!({
            "policyEvaluation": record,
            "statusTimestamps": {"post-plan-running-at": started},
        }),
    )
    .await?;
    Ok(())
}

/// The outcome of one set: each policy evaluated, or all errored with why the set could
/// not be loaded.
async fn evaluate_set(
    state: &AppState,
    set: &PolicySet,
    got: Result<Loaded, String>,
    input: &Value,
    secrets: &[String],
) -> PolicySetResult {
    let level = |l: &str| {
        if l == "mandatory" {
            Enforcement::Mandatory
        } else {
            Enforcement::Advisory
        }
    };
    let (outcomes, error) = match got {
        Ok((policies, regos, params, sensitive)) => {
            let secrets: Vec<String> = secrets.iter().cloned().chain(sensitive).collect();
            let request = policy::EvalRequest {
                limit_ms: policy::DEFAULT_TIME_LIMIT.as_millis() as u64,
                compile_only: false,
                input: input.clone(),
                parameters: params,
                policies: policies
                    .iter()
                    .zip(regos)
                    .map(|(p, rego)| policy::EvalPolicy {
                        name: p.name.clone(),
                        rego,
                        query: p.query.clone(),
                        enforcement: level(&p.enforcement_level),
                    })
                    .collect(),
            };
            let outcomes = crate::policy_eval::evaluate(&state.settings, request).await;
            (
                policies
                    .iter()
                    .zip(outcomes)
                    .map(|(p, o)| {
                        let o = policy::scrub(o, &secrets);
                        policy::result_of(&o, p.description.clone(), &p.query)
                    })
                    .collect(),
                None,
            )
        }
        Err(why) => (
            set.spec
                .policies
                .iter()
                .map(|p| {
                    let o = policy::Outcome {
                        policy_name: p.name.clone(),
                        enforcement_level: level(&p.enforcement_level),
                        status: policy::Verdict::Errored,
                        messages: vec![why.clone()],
                    };
                    policy::result_of(&o, p.description.clone(), &p.query)
                })
                .collect(),
            Some(why),
        ),
    };
    PolicySetResult {
        name: set.spec.name.clone(),
        object: set.name_any(),
        description: set.spec.description.clone(),
        overridable: set.spec.overridable,
        error,
        outcomes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: &str, level: &str) -> terrace_crds::PolicyResult {
        terrace_crds::PolicyResult {
            policy: "p".into(),
            description: None,
            enforcement_level: level.into(),
            query: "data.x.deny".into(),
            status: status.into(),
            output: Vec::new(),
        }
    }

    /// go-tfe's filters: a set whose outcomes all filter away is left out; without a
    /// filter every set is listed (issue 42 §13).
    #[test]
    fn outcome_filters_leave_out_sets_with_nothing_kept() {
        let set_of = |outcomes| PolicySetResult {
            name: "s".into(),
            object: "s".into(),
            description: None,
            overridable: false,
            error: None,
            outcomes,
        };
        let set = set_of(vec![result("passed", "advisory")]);
        let parse =
            |q: &str| OutcomeFilter::parse(&QueryParams::parse(Some(q))).unwrap_or_default();
        let none = parse(
            "filter%5B0%5D%5Bstatus%5D=errored&filter%5B1%5D%5Benforcement_level%5D=mandatory&filter%5B1%5D%5Bstatus%5D=failed",
        );
        assert!(!none.keeps_set(&set));
        let some =
            parse("filter%5B0%5D%5Bstatus%5D=passed&filter%5B0%5D%5Benforcement_level%5D=advisory");
        assert!(some.keeps_set(&set));
        assert!(parse("").keeps_set(&set));
        assert!(parse("").keeps_set(&set_of(Vec::new())));
        assert!(
            OutcomeFilter::parse(&QueryParams::parse(Some("filter%5B0%5D%5Bcolor%5D=red")))
                .is_err()
        );
    }
}
