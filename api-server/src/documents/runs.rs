//! Runs, plans and applies as the API shows them (the runs resource, and workspaces'
//! `current-run`): TFE's attributes, `actions`, `status-timestamps`, and relationships
//! by type (policy checks, cost estimates and task stages are absent: empty).

use serde_json::Map;
use terrace_crds::constants::{ANNOTATION_POLICY_CHECKS, LABEL_WORKSPACE_ID};
use terrace_crds::resources::RunComment;
use terrace_crds::run::events::{RunEvent, event_id, events};
use terrace_crds::run::{self, Phase, RunState};
use terrace_crds::{Run, RunPhaseStatus, RunPolicyEvaluation};

use crate::index::Inner;
use crate::prelude::*;

/// The run's state (an unknown stored value reads as errored).
pub fn state_of(r: &Run) -> RunState {
    RunState::of(r.status.as_ref().and_then(|s| s.status.as_deref())).unwrap_or(RunState::Errored)
}

/// Whether the run got as far as its apply (confirmed or later).
pub fn reached_apply(r: &Run) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.status_timestamps
            .contains_key(&run::timestamp_key(RunState::Confirmed))
    })
}

/// The ID of the run's workspace and configuration version, from the index.
pub fn links_of(idx: &Inner, r: &Run) -> (Option<String>, Option<String>) {
    let ns = r.namespace().unwrap_or_default();
    let ws = r
        .labels()
        .get(LABEL_WORKSPACE_ID)
        .filter(|id| idx.workspace(id).is_some())
        .cloned()
        .or_else(|| {
            idx.workspace_object(&ns, &r.spec.workspace)
                .map(|w| id_of(w.as_ref()))
        });
    let cv = idx
        .configuration_versions()
        .in_namespace(&ns)
        .find(|c| c.name_any() == r.spec.configuration_version)
        .map(|c| id_of(c.as_ref()));
    (ws, cv)
}

/// Purpose of plan and apply log-read tokens.
const LOG_PURPOSE: &str = "run-log";
/// How long a log-read URL works.
const LOG_URL_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The log-read URL of plan or apply `phase_id`: a capability URL (no Authorization).
pub fn log_url(state: &AppState, base: &str, phase_id: &str) -> String {
    let token = state.signer.sign(LOG_PURPOSE, phase_id, LOG_URL_TTL);
    let kind = if phase_id.starts_with("plan-") {
        "plans"
    } else {
        "applies"
    };
    format!("{base}/api/v2/{kind}/{phase_id}/log/{token}")
}

/// Whether `token` is the log-read token of `phase_id`.
pub fn log_token_ok(state: &AppState, phase_id: &str, token: &str) -> bool {
    state.signer.verify(LOG_PURPOSE, phase_id, token)
}

/// What a workspace's `include=current_run[.plan|.configuration_version]` adds: its
/// current run, and its plan or configuration version.
pub fn current_run_included(
    state: &AppState,
    ws: &Located<terrace_crds::Workspace>,
    include: &str,
) -> Vec<Value> {
    let idx = state.index.read();
    let Some(r) = idx.current_run(&ws.ns, &ws.obj.name_any()).cloned() else {
        return Vec::new();
    };
    let (ws_id, cv_id) = links_of(&idx, &r);
    let mut out = vec![run_data(
        &r,
        ws_id.as_deref(),
        cv_id.as_deref(),
        RunPermissions::default(),
        None,
    )];
    match include {
        "current_run.plan" => {
            out.push(phase_data(
                &r,
                Phase::Plan,
                &log_url(state, "", &run::plan_id(&id_of(r.as_ref()))),
            ));
        }
        "current_run.configuration_version" => {
            if let Some(c) = cv_id
                .as_deref()
                .and_then(|id| idx.configuration_versions().get(id))
            {
                out.push(super::config_versions::render(c, None));
            }
        }
        _ => {}
    }
    out
}

fn timestamps(r: &Run) -> Map<String, Value> {
    r.status
        .as_ref()
        .map(|s| {
            s.status_timestamps
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// What the caller may do with runs (one RBAC answer: `patch` on runs).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunPermissions {
    pub act: bool,
}

/// The JSON:API `data` of a run.
pub fn run_data(
    r: &Run,
    ws_id: Option<&str>,
    cv_id: Option<&str>,
    perms: RunPermissions,
    position: Option<usize>,
) -> Value {
    let id = id_of(r);
    let state = state_of(r);
    let st = r.status.clone().unwrap_or_default();
    let has_changes = st.plan.has_changes.unwrap_or(false);
    let rel = |t: &str, v: Option<&str>| match v {
        Some(v) => json!({"data": {"id": v, "type": t}}),
        None => json!({"data": null}),
    };
    let created_by = r
        .spec
        .created_by
        .as_deref()
        .and_then(|c| c.strip_prefix("user:"));
    // The identity that confirmed the apply (none for an auto-apply): go-tfe dereferences
    // `confirmed-by` once a run is confirmed.
    let confirmed_by = st
        .confirmed_by
        .as_deref()
        .and_then(|c| c.strip_prefix("user:"));
    // After every cancel request: when a force-cancel becomes available (TFE's cool-off;
    // go-tfe waits for this time), also once the run is canceled.
    let cancel_asked = st.cancel_requested_at.as_deref();
    let force_at = run::force_cancel_available_at(cancel_asked).map(|t| timestamp(&t));
    let force_cancelable = run::force_cancelable(state, cancel_asked, jiff::Timestamp::now());
    json!({
        "id": id,
        "type": "runs",
        "attributes": {
            "actions": {
                "is-cancelable": state.is_cancelable(),
                "is-confirmable": state.is_confirmable(),
                "is-discardable": state.is_discardable(),
                "is-force-cancelable": force_cancelable,
            },
            "force-cancel-available-at": force_at,
            "allow-config-generation": r.spec.allow_config_generation,
            "allow-empty-apply": r.spec.allow_empty_apply,
            "debugging-mode": r.spec.debugging_mode,
            "invoke-action-addrs": r.spec.invoke_action_addrs,
            "policy-paths": r.spec.policy_paths,
            "auto-apply": r.spec.auto_apply,
            "canceled-at": st.status_timestamps.get(&run::timestamp_key(RunState::Canceled)),
            "created-at": created_at(r),
            "has-changes": has_changes,
            "is-destroy": r.spec.is_destroy,
            "message": r.spec.message,
            // terrace: what a pending run waits for, or why a run errored (its
            // `status.message`), in words; null otherwise.
            "status-message": st.message.as_deref().filter(|m| !m.is_empty() && matches!(state, RunState::Pending | RunState::Errored | RunState::Canceled | RunState::ForceCanceled)),
            "plan-only": r.spec.plan_only,
            "refresh": r.spec.refresh,
            "refresh-only": r.spec.refresh_only,
            "replace-addrs": r.spec.replace_addrs,
            "save-plan": r.spec.save_plan,
            "source": r.spec.source,
            "status": state.as_str(),
            "status-timestamps": timestamps(r),
            "target-addrs": r.spec.target_addrs,
            "trigger-reason": "manual",
            "terraform-version": r.spec.terraform_version,
            "variables": r.spec.variables.iter().map(|v| json!({"key": v.key, "value": v.value})).collect::<Vec<_>>(),
            "position-in-queue": position.unwrap_or(0),
            "permissions": {
                "can-apply": perms.act,
                "can-cancel": perms.act,
                "can-comment": perms.act,
                "can-discard": perms.act,
                "can-force-execute": perms.act,
                "can-force-cancel": perms.act,
                "can-override-policy-check": false,
            },
        },
        "relationships": {
            "workspace": rel("workspaces", ws_id),
            "configuration-version": rel("configuration-versions", cv_id),
            "plan": rel("plans", Some(&run::plan_id(&id))),
            "apply": rel("applies", Some(&run::apply_id(&id))),
            "created-by": rel("users", created_by),
            "confirmed-by": rel("users", confirmed_by),
            "cost-estimate": {"data": null},
            "policy-checks": {"data": []},
            "run-events": {"data": events(r).iter().map(|e| json!({"id": event_id(&id, &e.key), "type": "run-events"})).collect::<Vec<_>>()},
            "task-stages": stages_relationship(r),
            "comments": {"data": st.comments.iter().map(|c| json!({"id": c.id, "type": "comments"})).collect::<Vec<_>>()},
        },
        "links": {"self": format!("/api/v2/runs/{id}")},
    })
}

fn counts(p: &RunPhaseStatus, finished: bool) -> (Value, Value, Value, Value) {
    let n = |v: Option<i64>| {
        if finished {
            json!(v.unwrap_or(0))
        } else {
            json!(0)
        }
    };
    (
        n(p.resource_additions),
        n(p.resource_changes),
        n(p.resource_destructions),
        n(p.resource_imports),
    )
}

/// The JSON:API `data` of a run's plan or apply; `log_url`: its log-read URL. A plan
/// also shows whether it changes anything, its exports and its JSON output links.
pub fn phase_data(r: &Run, phase: Phase, log_url: &str) -> Value {
    let id = phase.id(&id_of(r));
    let reached = reached_apply(r);
    let st = r.status.clone().unwrap_or_default();
    let state = state_of(r);
    let (kind, status, p) = match phase {
        // Discarded or canceled before its plan started: the plan never runs.
        Phase::Plan
            if st.plan.started_at.is_none()
                && matches!(
                    state,
                    RunState::Discarded | RunState::Canceled | RunState::ForceCanceled
                ) =>
        {
            ("plans", "unreachable", st.plan)
        }
        Phase::Plan => ("plans", state.plan_status(reached), st.plan),
        Phase::Apply => ("applies", state.apply_status(reached), st.apply),
    };
    let (add, change, destroy, import) = counts(&p, status == "finished");
    let mut ts = Map::new();
    if let Some(t) = &p.started_at {
        ts.insert("started-at".into(), json!(t));
    }
    if let Some(t) = &p.finished_at {
        ts.insert(format!("{status}-at"), json!(t));
    }
    let mut data = json!({
        "id": id,
        "type": kind,
        "attributes": {
            "status": status,
            "resource-additions": add,
            "resource-changes": change,
            "resource-destructions": destroy,
            "resource-imports": import,
            "log-read-url": log_url,
            "status-timestamps": ts,
            "execution-details": {"mode": "remote"},
        },
        "relationships": {"state-versions": {"data": []}},
        "links": {"self": format!("/api/v2/{kind}/{id}")},
    });
    if phase == Phase::Plan {
        data["attributes"]["has-changes"] = json!(p.has_changes.unwrap_or(false));
        data["attributes"]["generated-configuration"] = json!(false);
        data["relationships"]["exports"] = json!({"data": []});
        data["links"]["json-output"] = json!(format!("/api/v2/plans/{id}/json-output"));
        data["links"]["json-output-redacted"] =
            json!(format!("/api/v2/plans/{id}/json-output-redacted"));
    }
    data
}

/// The user name of a recorded actor (`user:NAME`; `auto-apply` and the like are none).
pub fn actor_name(who: &str) -> Option<&str> {
    who.strip_prefix("user:")
}

/// The JSON:API `data` of a comment on run `run_id`.
pub fn comment_data(run_id: &str, c: &RunComment) -> Value {
    let event = event_id(run_id, &c.id);
    json!({
        "id": c.id,
        "type": "comments",
        "attributes": {"body": c.body},
        "relationships": {
            "run-event": {
                "data": {"id": event, "type": "run-events"},
                "links": {"related": format!("/api/v2/run-events/{event}")},
            },
        },
        "links": {"self": format!("/api/v2/comments/{}", c.id)},
    })
}

/// The JSON:API `data` of event `e` of run `run_id`.
pub fn event_data(run_id: &str, e: &RunEvent<'_>) -> Value {
    let id = event_id(run_id, &e.key);
    let actor = e.actor.and_then(actor_name);
    json!({
        "id": id,
        "type": "run-events",
        "attributes": {
            "action": e.action,
            "created-at": e.at,
            "description": e.description,
        },
        "relationships": {
            "actor": {"data": actor.map(|a| json!({"id": a, "type": "users"}))},
            "comment": {"data": e.comment.map(|c| json!({"id": c.id, "type": "comments"}))},
        },
        "links": {"self": format!("/api/v2/run-events/{id}")},
    })
}

/// The part of a run's ID its derived IDs share (`run-X` → `X`).
pub fn suffix(run_id: &str) -> &str {
    run_id.strip_prefix("run-").unwrap_or(run_id)
}

/// The task stage ID of run `run_id`.
pub fn stage_id(run_id: &str) -> String {
    format!("ts-{}", suffix(run_id))
}

/// The run's policy evaluation, once its policies were checked.
pub fn evaluation(r: &Run) -> Option<&RunPolicyEvaluation> {
    r.status.as_ref()?.policy_evaluation.as_ref()
}

/// Whether run `r` has a post-plan task stage: its policies were checked, or sets applied
/// to its workspace when it was created.
pub fn has_stage(r: &Run) -> bool {
    evaluation(r).is_some() || r.annotations().contains_key(ANNOTATION_POLICY_CHECKS)
}

/// The `task-stages` relationship of run `r`.
pub fn stages_relationship(r: &Run) -> Value {
    let data: Vec<Value> = has_stage(r)
        .then(|| json!({"id": stage_id(&id_of(r)), "type": "task-stages"}))
        .into_iter()
        .collect();
    json!({ "data": data })
}
