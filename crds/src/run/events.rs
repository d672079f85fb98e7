//! A run's events (TFE's run events): derived from what its status already records, the
//! time of each state it reached (`statusTimestamps`), who asked for each action, cancel
//! requests, and its comments. Nothing is stored for them, so an event's ID names its run
//! and its key: `re-<the run ID's suffix>-<key>`, where the key is a state (`planned`), a
//! request (`cancel-requested`) or a comment's ID (`wsc-…`).

use crate::resources::{Run, RunComment};
use crate::run::{QUEUEABLE_AT, RunState, timestamp_key};

/// One event of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEvent<'a> {
    /// Its key within the run (see the module's words).
    pub key: String,
    /// TFE's `action`: `created`, a state's name, `cancel_requested`,
    /// `force_cancel_requested`, `commented`.
    pub action: String,
    /// When, RFC 3339.
    pub at: String,
    /// Who did it (`user:NAME`), when a person (or client) did.
    pub actor: Option<&'a str>,
    /// The comment of a `commented` event.
    pub comment: Option<&'a RunComment>,
    /// What happened, in words.
    pub description: String,
}

/// The ID of run `run_id`'s event `key`.
pub fn event_id(run_id: &str, key: &str) -> String {
    format!("re-{}-{key}", run_id.strip_prefix("run-").unwrap_or(run_id))
}

/// The run ID and the key of event ID `id` (None when it is not one).
pub fn parse_event_id(id: &str) -> Option<(String, &str)> {
    let (suffix, key) = id.strip_prefix("re-")?.split_once('-')?;
    (!suffix.is_empty() && !key.is_empty()).then(|| (format!("run-{suffix}"), key))
}

/// The words of reaching `state`.
fn describe(r: &Run, state: RunState, actor: Option<&str>) -> String {
    let st = r.status.as_ref();
    let who = actor
        .and_then(|a| a.strip_prefix("user:"))
        .map(|u| format!(" by {u}"))
        .unwrap_or_default();
    match state {
        RunState::Pending => "Run created".to_owned(),
        RunState::PlanQueued => "Plan queued".to_owned(),
        RunState::Planning => "Plan started".to_owned(),
        RunState::Planned | RunState::PlannedAndFinished | RunState::PlannedAndSaved => {
            let n = |f: fn(&crate::resources::RunPhaseStatus) -> Option<i64>| {
                st.and_then(|s| f(&s.plan)).unwrap_or(0)
            };
            let counts = format!(
                "{} to add, {} to change, {} to destroy",
                n(|p| p.resource_additions),
                n(|p| p.resource_changes),
                n(|p| p.resource_destructions)
            );
            match state {
                RunState::Planned => format!("Plan finished: {counts}"),
                RunState::PlannedAndSaved => format!("Plan saved: {counts}"),
                _ => format!("Plan finished, nothing to apply: {counts}"),
            }
        }
        RunState::PostPlanCompleted => match overridden_by(r) {
            Some(by) => format!("Policy checks failed and were overridden{}", by_words(by)),
            None => "Policy checks passed".to_owned(),
        },
        RunState::PostPlanAwaitingDecision => {
            "Policy checks failed: waiting for an override or a discard".to_owned()
        }
        RunState::Confirmed if st.and_then(|s| s.confirmed_by.as_deref()) == Some("auto-apply") => {
            "Apply confirmed automatically (auto-apply)".to_owned()
        }
        RunState::Confirmed => format!("Apply confirmed{who}"),
        RunState::ApplyQueued => "Apply queued".to_owned(),
        RunState::Applying => "Apply started".to_owned(),
        RunState::Applied => "Apply finished".to_owned(),
        RunState::Discarded => format!("Run discarded{who}"),
        RunState::Errored => "Run errored".to_owned(),
        RunState::Canceled => "Run canceled".to_owned(),
        RunState::ForceCanceled => "Run force-canceled".to_owned(),
    }
}

/// Who overrode the run's failed policies (`user:NAME`), if someone did.
fn overridden_by(r: &Run) -> Option<&str> {
    r.status
        .as_ref()?
        .policy_evaluation
        .as_ref()?
        .overridden_by
        .as_deref()
}

/// " by NAME" of an actor `user:NAME` (nothing for another actor).
fn by_words(actor: &str) -> String {
    actor
        .strip_prefix("user:")
        .map(|u| format!(" by {u}"))
        .unwrap_or_default()
}

/// Who caused reaching `state`, as the status records it.
fn actor_of(r: &Run, state: RunState) -> Option<&str> {
    let st = r.status.as_ref()?;
    let by = |action: &str| st.acted_by.get(action).map(String::as_str);
    match state {
        RunState::Confirmed => st
            .confirmed_by
            .as_deref()
            .filter(|c| c.starts_with("user:")),
        RunState::PostPlanCompleted => overridden_by(r),
        RunState::Discarded => by("discard"),
        RunState::Canceled => by("cancel"),
        RunState::ForceCanceled => by("force-cancel"),
        _ => None,
    }
}

/// The events of run `r`, oldest first.
pub fn events(r: &Run) -> Vec<RunEvent<'_>> {
    let Some(st) = r.status.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let created = st.status_timestamps.get(QUEUEABLE_AT).cloned().or_else(|| {
        r.metadata
            .creation_timestamp
            .as_ref()
            .map(|t| crate::common::timestamp(&t.0))
    });
    if let Some(at) = created {
        out.push(RunEvent {
            key: "created".to_owned(),
            action: "created".to_owned(),
            at,
            actor: r.spec.created_by.as_deref(),
            comment: None,
            description: describe(r, RunState::Pending, None),
        });
    }
    for c in &st.comments {
        out.push(RunEvent {
            key: c.id.clone(),
            action: "commented".to_owned(),
            at: c.created_at.clone(),
            actor: Some(&c.author),
            comment: Some(c),
            description: match &c.action {
                Some(a) => format!("Comment on {a}"),
                None => "Comment added".to_owned(),
            },
        });
    }
    // An override of failed mandatory policies (TFE shows who overrode them).
    if let Some(e) = st.policy_evaluation.as_ref()
        && let Some(at) = &e.overridden_at
    {
        let actor = e.overridden_by.as_deref();
        out.push(RunEvent {
            key: "policy-overridden".to_owned(),
            action: "policy_overridden".to_owned(),
            at: at.clone(),
            actor,
            comment: None,
            description: format!(
                "Failed mandatory policies overridden{}",
                actor.map(by_words).unwrap_or_default()
            ),
        });
    }
    for state in RunState::ALL {
        if state == RunState::Pending {
            continue;
        }
        if let Some(at) = st.status_timestamps.get(&timestamp_key(state)) {
            let actor = actor_of(r, state);
            out.push(RunEvent {
                key: state.as_str().to_owned(),
                action: state.as_str().to_owned(),
                at: at.clone(),
                actor,
                comment: None,
                description: describe(r, state, actor),
            });
        }
    }
    let requests = [
        ("cancel", &st.cancel_requested_at, "Cancel requested"),
        (
            "force-cancel",
            &st.force_cancel_requested_at,
            "Force-cancel requested",
        ),
    ];
    for (action, at, words) in requests {
        if let Some(at) = at {
            let actor = st.acted_by.get(action).map(String::as_str);
            let who = actor
                .and_then(|a| a.strip_prefix("user:"))
                .map(|u| format!(" by {u}"))
                .unwrap_or_default();
            out.push(RunEvent {
                key: format!("{action}-requested"),
                action: format!("{}_requested", action.replace('-', "_")),
                at: at.clone(),
                actor,
                comment: None,
                description: format!("{words}{who}"),
            });
        }
    }
    // Stable: events of one instant keep the order above (an action's comment, and an
    // override, before the state it led to). The creation comes first whatever the
    // clocks say: the operator that queued the run may run a few milliseconds behind the
    // API server that created it.
    out.sort_by(|a, b| (a.key != "created", &a.at).cmp(&(b.key != "created", &b.at)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{RunSpec, RunStatus};

    fn run(status: RunStatus) -> Run {
        let mut r = Run::new(
            "r",
            RunSpec {
                origin: None,
                workspace: "w".into(),
                configuration_version: "c".into(),
                is_destroy: false,
                refresh: true,
                refresh_only: false,
                plan_only: false,
                auto_apply: false,
                save_plan: false,
                message: String::new(),
                target_addrs: Vec::new(),
                replace_addrs: Vec::new(),
                variables: Vec::new(),
                source: "tfe-api".into(),
                created_by: Some("user:ann".into()),
                allow_empty_apply: false,
                allow_config_generation: false,
                terraform_version: None,
                debugging_mode: false,
                invoke_action_addrs: Vec::new(),
                policy_paths: Vec::new(),
                assessment: false,
            },
        );
        r.status = Some(status);
        r
    }

    #[test]
    fn the_creation_comes_first_when_the_operator_clock_is_behind() {
        let mut st = RunStatus::default();
        st.status_timestamps
            .insert(QUEUEABLE_AT.into(), "2026-01-01T00:00:00.010Z".into());
        st.status_timestamps
            .insert("plan-queued-at".into(), "2026-01-01T00:00:00.004Z".into());
        let r = run(st);
        let actions: Vec<String> = events(&r).into_iter().map(|e| e.action).collect();
        assert_eq!(actions, ["created", "plan_queued"]);
    }

    #[test]
    fn events_follow_the_status_in_time_with_their_actors() {
        let mut st = RunStatus::default();
        for (k, t) in [
            (QUEUEABLE_AT, "2026-01-01T00:00:00.000Z"),
            ("plan-queued-at", "2026-01-01T00:00:01.000Z"),
            ("planning-at", "2026-01-01T00:00:02.000Z"),
            ("planned-at", "2026-01-01T00:00:03.000Z"),
            ("discarded-at", "2026-01-01T00:00:05.000Z"),
        ] {
            st.status_timestamps.insert(k.into(), t.into());
        }
        st.plan.resource_additions = Some(2);
        st.acted_by.insert("discard".into(), "user:bob".into());
        st.comments.push(RunComment {
            id: "wsc-0123456789abcdef".into(),
            body: "not today".into(),
            author: "user:bob".into(),
            created_at: "2026-01-01T00:00:04.000Z".into(),
            action: Some("discard".into()),
        });
        let r = run(st);
        let ev = events(&r);
        let actions: Vec<&str> = ev.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(
            actions,
            [
                "created",
                "plan_queued",
                "planning",
                "planned",
                "commented",
                "discarded"
            ]
        );
        assert_eq!(ev[0].actor, Some("user:ann"));
        assert_eq!(
            ev[3].description,
            "Plan finished: 2 to add, 0 to change, 0 to destroy"
        );
        assert_eq!(ev[4].comment.map(|c| c.body.as_str()), Some("not today"));
        assert_eq!(ev[5].actor, Some("user:bob"));
        assert_eq!(ev[5].description, "Run discarded by bob");
        assert_eq!(
            ev[2].actor, None,
            "the operator's transitions have no actor"
        );
    }

    /// An override is an event of its own, by whom, and the state it led to says so
    /// (issue 41 §9): not "Policy checks passed".
    #[test]
    fn an_override_is_recorded_with_who_gave_it() {
        let mut st = RunStatus::default();
        for (k, t) in [
            (QUEUEABLE_AT, "2026-01-01T00:00:00.000Z"),
            ("planned-at", "2026-01-01T00:00:03.000Z"),
            ("post-plan-awaiting-decision-at", "2026-01-01T00:00:04.000Z"),
            ("post-plan-completed-at", "2026-01-01T00:00:06.000Z"),
        ] {
            st.status_timestamps.insert(k.into(), t.into());
        }
        st.policy_evaluation = Some(crate::resources::RunPolicyEvaluation {
            evaluated_at: "2026-01-01T00:00:04.000Z".into(),
            sets: Vec::new(),
            overridden_by: Some("user:jane".into()),
            overridden_at: Some("2026-01-01T00:00:06.000Z".into()),
        });
        let r = run(st);
        let ev = events(&r);
        let o = ev
            .iter()
            .find(|e| e.action == "policy_overridden")
            .expect("an override event");
        assert_eq!(
            (o.key.as_str(), o.actor, o.description.as_str()),
            (
                "policy-overridden",
                Some("user:jane"),
                "Failed mandatory policies overridden by jane"
            )
        );
        let done = ev
            .iter()
            .find(|e| e.action == "post_plan_completed")
            .expect("post_plan_completed");
        assert_eq!(
            done.description,
            "Policy checks failed and were overridden by jane"
        );
        assert_eq!(done.actor, Some("user:jane"));
    }

    #[test]
    fn an_event_id_names_its_run_and_key() {
        let id = event_id("run-AbC123", "wsc-0123456789abcdef");
        assert_eq!(id, "re-AbC123-wsc-0123456789abcdef");
        assert_eq!(
            parse_event_id(&id),
            Some(("run-AbC123".to_owned(), "wsc-0123456789abcdef"))
        );
        assert_eq!(
            parse_event_id("re-AbC123-planned_and_finished"),
            Some(("run-AbC123".to_owned(), "planned_and_finished"))
        );
        assert_eq!(parse_event_id("re-AbC123"), None);
        assert_eq!(parse_event_id("run-AbC123-x"), None);
    }
}
