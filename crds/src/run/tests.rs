//! Tests of `run`.

use super::*;
use crate::lock::LockHolder;

#[test]
fn performance_over_applied_and_errored_runs() {
    let t = |s: &'static str| Some(s);
    let runs = [
        RunTimes {
            created: "2026-01-01T00:00:01Z",
            state: RunState::Applied,
            plan: (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:02Z")),
            apply: (t("2026-01-01T00:00:03Z"), t("2026-01-01T00:00:07Z")),
        },
        RunTimes {
            created: "2026-01-01T00:00:02Z",
            state: RunState::Errored,
            plan: (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:00:04Z")),
            apply: (None, None),
        },
        RunTimes {
            created: "2026-01-01T00:00:03Z",
            state: RunState::Discarded,
            plan: (t("2026-01-01T00:00:00Z"), t("2026-01-01T00:01:00Z")),
            apply: (None, None),
        },
    ];
    let m = performance(&runs);
    assert_eq!(m.plan_duration_average, Some(3000));
    assert_eq!(m.apply_duration_average, Some(4000));
    assert_eq!(
        (m.run_failures, m.workspace_kpis_run_count),
        (Some(1), Some(2))
    );
    let none = performance(&[]);
    assert_eq!(
        (none.plan_duration_average, none.workspace_kpis_run_count),
        (None, Some(0))
    );
}

#[test]
fn auto_destroy_due_times() {
    let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    assert_eq!(auto_destroy_due(None, None, None), None);
    assert_eq!(
        auto_destroy_due(Some("2026-01-02T00:00:00Z"), None, None),
        Some(t("2026-01-02T00:00:00Z"))
    );
    assert_eq!(
        auto_destroy_due(None, Some("2d"), Some("2026-01-01T00:00:00Z")),
        Some(t("2026-01-03T00:00:00Z"))
    );
    assert_eq!(
        auto_destroy_due(
            Some("2026-01-05T00:00:00Z"),
            Some("36h"),
            Some("2026-01-01T00:00:00Z")
        ),
        Some(t("2026-01-02T12:00:00Z"))
    );
    assert_eq!(auto_destroy_due(Some("not a time"), Some("0d"), None), None);
}

#[test]
fn engine_versions() {
    let ok = |c: &str, v: &str| version_satisfies(c, v).unwrap();
    assert!(ok("1.11.4", "1.11.4") && !ok("1.11.3", "1.11.4"));
    assert!(ok("latest", "1.2.3") && ok("", "1.2.3"));
    assert!(ok("~> 1.11.0", "1.11.9") && !ok("~> 1.11.0", "1.12.0"));
    assert!(ok("~> 1.11", "1.12.0") && !ok("~> 1.11", "2.0.0") && !ok("~> 1.11", "1.10.9"));
    assert!(ok(">= 1.5, < 2.0", "1.11.4") && !ok(">= 1.5, < 1.10", "1.11.4"));
    assert!(ok("!= 1.0.0", "1.11.4") && ok("v1.11.4", "1.11.4"));
    assert!(version_satisfies(">= banana", "1.0.0").is_err());
    assert_eq!(exact_version("1.11.4"), Some("1.11.4"));
    assert_eq!(exact_version("= 1.11.4"), Some("1.11.4"));
    assert_eq!(exact_version("~> 1.11"), None);
    assert_eq!(exact_version("latest"), None);
}

fn q<'a>(name: &'a str, created: &'a str, state: RunState, plan_only: bool) -> QueuedRun<'a> {
    QueuedRun {
        name,
        created,
        state,
        plan_only,
    }
}

#[test]
fn states_round_trip_and_actions() {
    for s in RunState::ALL {
        assert_eq!(s.as_str().parse::<RunState>().unwrap(), s);
    }
    assert!("nope".parse::<RunState>().is_err());
    assert_eq!(RunState::of(None).unwrap(), RunState::Pending);
    assert!(RunState::Planned.is_confirmable());
    assert!(!RunState::Applying.is_confirmable());
    assert!(RunState::Pending.is_discardable() && RunState::Planned.is_discardable());
    assert!(!RunState::Applying.is_discardable());
    assert!(RunState::Applying.is_cancelable() && !RunState::Planned.is_cancelable());
    assert!(RunState::Applied.is_final() && !RunState::Planned.is_final());
    assert_eq!(timestamp_key(RunState::PlanQueued), "plan-queued-at");
}

#[test]
fn phase_ids() {
    assert_eq!(plan_id("run-abc"), "plan-abc");
    assert_eq!(apply_id("run-abc"), "apply-abc");
    assert_eq!(run_of("plan-abc").as_deref(), Some("run-abc"));
    assert_eq!(run_of("apply-abc").as_deref(), Some("run-abc"));
    assert_eq!(run_of("ws-abc"), None);
    assert_eq!(run_of("plan-"), None);
}

#[test]
fn force_execute_discards_what_is_ahead_or_says_why_not() {
    let runs = [
        q("a", "2026-01-01T00:00:01Z", RunState::Planned, false),
        q("b", "2026-01-01T00:00:02Z", RunState::Pending, false),
        q("c", "2026-01-01T00:00:03Z", RunState::Pending, false),
        q("p", "2026-01-01T00:00:04Z", RunState::Pending, true),
        q("d", "2026-01-01T00:00:00Z", RunState::Applied, false),
    ];
    assert_eq!(force_execute("c", &runs, None), Ok(vec!["a", "b"]));
    assert_eq!(force_execute("b", &runs, None), Ok(vec!["a"]));
    assert_eq!(
        force_execute("a", &runs, None),
        Err(ForceExecuteRefusal::NotPending(RunState::Planned))
    );
    assert_eq!(
        force_execute("p", &runs, None),
        Err(ForceExecuteRefusal::NothingAhead)
    );
    let applying = [
        q("a", "2026-01-01T00:00:01Z", RunState::Applying, false),
        runs[1].clone(),
    ];
    assert_eq!(
        force_execute("b", &applying, None),
        Err(ForceExecuteRefusal::Undiscardable {
            name: "a".into(),
            state: RunState::Applying
        })
    );
    let first = [runs[1].clone(), runs[4].clone()];
    assert_eq!(
        force_execute("b", &first, None),
        Err(ForceExecuteRefusal::NothingAhead)
    );
    let user = LockHolder::User("ann".into());
    assert!(matches!(
        force_execute("c", &runs, Some(&user)),
        Err(ForceExecuteRefusal::Locked(_))
    ));
    let by_run = LockHolder::Run("run-a".into());
    assert_eq!(force_execute("b", &runs, Some(&by_run)), Ok(vec!["a"]));
}

#[test]
fn queue_one_apply_run_at_a_time_in_order() {
    let runs = [
        q("a", "2026-01-01T00:00:01Z", RunState::Applying, false),
        q("b", "2026-01-01T00:00:02Z", RunState::Pending, false),
        q("c", "2026-01-01T00:00:03Z", RunState::Pending, false),
        q("p", "2026-01-01T00:00:04Z", RunState::Pending, true),
    ];
    assert_eq!(
        may_start("b", &runs, None, "run-b"),
        Err(Wait::Active("a".into()))
    );
    // Plan-only runs never wait.
    assert_eq!(may_start("p", &runs, None, "run-p"), Ok(()));
    let after = [
        q("a", "2026-01-01T00:00:01Z", RunState::Applied, false),
        runs[1].clone(),
        runs[2].clone(),
    ];
    assert_eq!(may_start("b", &after, None, "run-b"), Ok(()));
    assert_eq!(may_start("c", &after, None, "run-c"), Err(Wait::Queue));
    // A workspace locked by a user holds the queue; locked by this run, it goes on.
    let user = LockHolder::User("ann".into());
    assert_eq!(
        may_start("b", &after, Some(&user), "run-b"),
        Err(Wait::Locked("user:ann".into()))
    );
    let mine = LockHolder::Run("run-b".into());
    assert_eq!(may_start("b", &after, Some(&mine), "run-b"), Ok(()));
    // A run not in the list (not in the cache yet) waits.
    assert_eq!(may_start("z", &after, None, "run-z"), Err(Wait::Queue));
}

#[test]
fn decide_phases() {
    use PodSeen::*;
    const MANUAL: Flags = Flags {
        plan_only: false,
        save_plan: false,
        auto_apply: false,
        allow_empty_apply: false,
        policy: crate::policy::Gate::None,
    };
    const AUTO: Flags = Flags {
        auto_apply: true,
        ..MANUAL
    };
    let ok = |has_changes| PhaseReport {
        ok: true,
        has_changes,
        ..PhaseReport::default()
    };
    let d = decide(RunState::PlanQueued, Cancel::None, &Absent, MANUAL);
    assert_eq!(
        (d.create_pod, d.to),
        (Some(Phase::Plan), Some(RunState::Planning))
    );
    let d = decide(RunState::Confirmed, Cancel::None, &Absent, MANUAL);
    assert_eq!(
        (d.create_pod, d.to),
        (Some(Phase::Apply), Some(RunState::Applying))
    );
    assert_eq!(
        decide(RunState::Planning, Cancel::None, &Running, MANUAL),
        Decision::default()
    );
    // A Pod running while the run still reads queued (the move's write was lost): the
    // move is written now; a cancel still stops the Pod.
    assert_eq!(
        decide(RunState::PlanQueued, Cancel::None, &Running, MANUAL).to,
        Some(RunState::Planning)
    );
    assert_eq!(
        decide(RunState::ApplyQueued, Cancel::None, &Running, MANUAL).to,
        Some(RunState::Applying)
    );
    assert_eq!(
        decide(RunState::Confirmed, Cancel::Cancel, &Running, MANUAL),
        Decision {
            delete_pod: Some(CANCEL_GRACE_SECONDS),
            ..Decision::default()
        }
    );
    assert_eq!(
        decide(RunState::Planning, Cancel::Cancel, &Running, MANUAL).delete_pod,
        Some(CANCEL_GRACE_SECONDS)
    );
    assert_eq!(
        decide(RunState::Applying, Cancel::Force, &Running, MANUAL).delete_pod,
        Some(0)
    );
    assert_eq!(
        decide(
            RunState::Planning,
            Cancel::None,
            &Ended(Some(ok(true))),
            MANUAL
        )
        .to,
        Some(RunState::Planned)
    );
    assert_eq!(
        decide(
            RunState::Planning,
            Cancel::None,
            &Ended(Some(ok(true))),
            AUTO
        )
        .to,
        Some(RunState::Confirmed)
    );
    assert_eq!(
        decide(
            RunState::Planning,
            Cancel::None,
            &Ended(Some(ok(false))),
            AUTO
        )
        .to,
        Some(RunState::PlannedAndFinished)
    );
    assert_eq!(
        decide(
            RunState::Applying,
            Cancel::None,
            &Ended(Some(ok(true))),
            MANUAL
        )
        .to,
        Some(RunState::Applied)
    );
    let failed = PhaseReport {
        ok: false,
        message: Some("boom".into()),
        ..PhaseReport::default()
    };
    let d = decide(
        RunState::Applying,
        Cancel::None,
        &Ended(Some(failed)),
        MANUAL,
    );
    assert_eq!(
        (d.to, d.message.as_deref()),
        (Some(RunState::Errored), Some("boom"))
    );
    assert_eq!(
        decide(RunState::Planning, Cancel::None, &Ended(None), MANUAL).to,
        Some(RunState::Errored)
    );
    // A lost Pod errors the run, with the cause.
    let d = decide(RunState::Applying, Cancel::None, &Absent, MANUAL);
    assert_eq!(d.to, Some(RunState::Errored));
    assert!(d.message.unwrap().contains("lost"));
    // Cancels.
    assert_eq!(
        decide(RunState::Applying, Cancel::Cancel, &Ended(None), MANUAL).to,
        Some(RunState::Canceled)
    );
    assert_eq!(
        decide(RunState::Applying, Cancel::Force, &Absent, MANUAL).to,
        Some(RunState::ForceCanceled)
    );
    assert_eq!(
        decide(RunState::PlanQueued, Cancel::Cancel, &Absent, MANUAL).to,
        Some(RunState::Canceled)
    );
    assert_eq!(
        decide(RunState::Planned, Cancel::None, &Absent, MANUAL),
        Decision::default()
    );
}

#[test]
fn after_plan_flags() {
    use RunState::*;
    let f = |plan_only, save_plan, auto_apply| Flags {
        plan_only,
        save_plan,
        auto_apply,
        allow_empty_apply: false,
        policy: crate::policy::Gate::None,
    };
    // allow-empty-apply: no changes, and the run goes on to its apply all the same.
    let empty = Flags {
        allow_empty_apply: true,
        ..f(false, false, false)
    };
    assert_eq!(after_successful_plan(false, empty), Planned);
    assert_eq!(
        after_successful_plan(
            false,
            Flags {
                auto_apply: true,
                ..empty
            }
        ),
        Confirmed
    );
    assert_eq!(
        after_successful_plan(
            false,
            Flags {
                plan_only: true,
                ..empty
            }
        ),
        PlannedAndFinished
    );
    assert_eq!(
        after_successful_plan(true, f(true, false, true)),
        PlannedAndFinished
    );
    assert_eq!(
        after_successful_plan(false, f(false, false, true)),
        PlannedAndFinished
    );
    assert_eq!(
        after_successful_plan(true, f(false, true, true)),
        PlannedAndSaved
    );
    assert_eq!(
        after_successful_plan(true, f(false, false, true)),
        Confirmed
    );
    assert_eq!(after_successful_plan(true, f(false, false, false)), Planned);
}

#[test]
fn counting_changes() {
    let plan = serde_json::json!({"resource_changes": [
        {"change": {"actions": ["create"]}},
        {"change": {"actions": ["update"]}},
        {"change": {"actions": ["delete", "create"]}},
        {"change": {"actions": ["no-op"]}},
        {"change": {"actions": ["delete"]}}
    ]});
    let r = count_changes(&plan);
    assert_eq!(
        (r.additions, r.changes, r.destructions, r.has_changes),
        (2, 1, 2, true)
    );
    let none = count_changes(&serde_json::json!({"resource_changes": [
            {"change": {"actions": ["no-op"]}}]}));
    assert!(!none.has_changes);
    let outputs = count_changes(&serde_json::json!({"output_changes": {
            "o": {"actions": ["create"]}}}));
    assert!(outputs.has_changes);
}

#[test]
fn a_run_credential_carries_its_run_and_runner_token() {
    let secret = "s3cret_0123456789-abcdefXYZ";
    let token = runner_token("acme", secret);
    let cred = run_credential(&token, "run-abc");
    assert_eq!(cred, format!("tfrun.run-abc.acme.{secret}"));
    assert_eq!(
        parse_run_credential(&cred),
        Some(("run-abc", token.as_str()))
    );
    assert_eq!(parse_run_credential("eyJhbGciOi.x.y"), None);
    assert_eq!(parse_run_credential("tfrun.run-abc"), None);
    assert_eq!(parse_run_credential(&format!("tfrun..acme.{secret}")), None);
}

/// Issue 39 §1: a token's parts go into the paths of Kubernetes requests, so every part
/// that is not a Kubernetes name (or a token's secret) refuses the whole token.
#[test]
fn run_tokens_with_parts_that_are_not_names_are_refused() {
    let secret = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    assert_eq!(
        runner_token_namespace(&format!("acme.{secret}")),
        Some("acme")
    );
    for ns in [
        "acme/secrets?",
        "acme/secrets",
        "..",
        "ACME",
        "-acme",
        "acme-",
        "ac%2Fme",
        "ac me",
        "",
        &"a".repeat(64),
    ] {
        assert_eq!(
            runner_token_namespace(&format!("{ns}.{secret}")),
            None,
            "{ns:?}"
        );
    }
    for bad_secret in [
        "y",
        "short",
        "has space in it........",
        "slash/slash/slash/slash",
    ] {
        assert_eq!(runner_token_namespace(&format!("acme.{bad_secret}")), None);
    }
    assert_eq!(
        runner_token_namespace(&format!("acme.{}", "A".repeat(129))),
        None
    );
    for object in [
        "x/..",
        "X",
        "a?b",
        "run-1/log",
        "",
        "a..b",
        &"a".repeat(254),
    ] {
        let cred = format!("tfrun.{object}.acme.{secret}");
        assert_eq!(parse_run_credential(&cred), None, "{object:?}");
    }
    assert_eq!(parse_run_credential("tfrun.x.acme/secrets?.y"), None);
    // Token shapes at random: whatever parses has only name characters in its parts.
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(39);
    let alphabet = b"abc-./?%#:@AZ09_ \\\0";
    for _ in 0..20_000 {
        let len = rng.random_range(0..80);
        let s: String = (0..len)
            .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
            .collect();
        let cred = format!("tfrun.{s}");
        if let Some((object, token)) = parse_run_credential(&cred) {
            let ns = runner_token_namespace(token).expect("parsed");
            assert!(crate::ids::is_dns1123_subdomain(object) && crate::ids::is_dns1123_label(ns));
            assert!(!cred.contains(['/', '?', '%', '#', ' ']));
        }
    }
}

/// Issue 39 §11: a run full of comments refuses another plain comment, but an action's
/// comment still lands (the action never fails on its comment).
#[test]
fn an_actions_comment_passes_the_comment_limit() {
    use crate::constants::MAX_RUN_COMMENTS;
    assert!(check_comment("lgtm", MAX_RUN_COMMENTS - 1, false).is_ok());
    assert!(check_comment("lgtm", MAX_RUN_COMMENTS, false).is_err());
    assert!(check_comment("approving", MAX_RUN_COMMENTS, true).is_ok());
    assert!(check_comment(" ", 0, true).is_err());
}

/// After every cancel request the run says when a force-cancel becomes available (the
/// cool-off after the request), also once the run is canceled (a pending run is canceled
/// at once); it may be forced only while cancelable and after the cool-off (issue 42 §2).
#[test]
fn force_cancel_after_the_cool_off() {
    let asked = "2025-01-01T00:00:00Z";
    let at = force_cancel_available_at(Some(asked));
    assert_eq!(
        at.map(|t| t.to_string()),
        Some("2025-01-01T00:00:10Z".to_owned())
    );
    assert_eq!(force_cancel_available_at(None), None);
    assert_eq!(force_cancel_available_at(Some("junk")), None);
    let t = |s: &str| s.parse::<jiff::Timestamp>().unwrap_or_default();
    assert!(!force_cancelable(
        RunState::Planning,
        Some(asked),
        t("2025-01-01T00:00:09Z")
    ));
    assert!(force_cancelable(
        RunState::Planning,
        Some(asked),
        t("2025-01-01T00:00:10Z")
    ));
    assert!(!force_cancelable(
        RunState::Canceled,
        Some(asked),
        t("2025-01-01T01:00:00Z")
    ));
    assert!(!force_cancelable(
        RunState::Planning,
        None,
        t("2025-01-01T01:00:00Z")
    ));
}

/// `current-run` is the run that holds the workspace (issue 41 §1): a pending run behind
/// a run waiting for confirmation is not current (the CLI then counts the runs ahead
/// instead of saying "manually locked"), and once that run is canceled the next in line is.
#[test]
fn the_current_run_is_the_one_that_holds_the_workspace() {
    use RunState::*;
    let cases: [(&[RunState], Option<usize>); 8] = [
        (&[], None),
        (&[Applied], Some(0)),
        (&[Applied, Errored], Some(1)),
        // A triggered run waiting for confirmation holds it; a later run waits behind.
        (&[Applied, PostPlanCompleted, Pending], Some(1)),
        (&[Applied, Planning, Pending, Pending], Some(1)),
        // That run canceled: the first pending run is next (and current while it starts).
        (&[Applied, Canceled, Pending, Pending], Some(2)),
        // Only pending runs (a person's lock keeps them): the first is current, pending.
        (&[Pending, Pending], Some(0)),
        (&[Applied, PlanQueued], Some(1)),
    ];
    for (runs, want) in cases {
        assert_eq!(current_run(runs), want, "{runs:?}");
    }
}

/// A pending run says what it waits for (issue 41 §12): the run ahead by its ID and
/// state, how many are ahead, or who holds the lock and why.
#[test]
fn a_waiting_run_says_what_for() {
    let runs = [
        q(
            "a",
            "2026-01-01T00:00:01Z",
            RunState::PostPlanCompleted,
            false,
        ),
        q("b", "2026-01-01T00:00:02Z", RunState::Pending, false),
        q("c", "2026-01-01T00:00:03Z", RunState::Pending, false),
    ];
    let id = |n: &str| format!("run-{}", n.to_uppercase());
    let words = |me: &str, lock: Option<&LockHolder>, reason: Option<&str>| {
        let wait = may_start(me, &runs, lock, &id(me)).expect_err("it waits");
        wait_message(&wait, me, &runs, id, reason)
    };
    assert_eq!(
        words("b", None, None),
        "waiting for run run-A (post_plan_completed) to finish"
    );
    assert_eq!(
        words("c", None, None),
        "waiting for run run-A (post_plan_completed) to finish; 2 runs are ahead of this one"
    );
    let after = [
        q("a", "2026-01-01T00:00:01Z", RunState::Applied, false),
        runs[1].clone(),
        runs[2].clone(),
    ];
    let wait = may_start("c", &after, None, "run-C").expect_err("it waits");
    assert_eq!(
        wait_message(&wait, "c", &after, id, None),
        "waiting for 1 earlier run of the workspace"
    );
    let ann = LockHolder::User("ann".into());
    let wait = may_start("b", &after, Some(&ann), "run-B").expect_err("it waits");
    assert_eq!(
        wait_message(&wait, "b", &after, id, Some("deploying the network")),
        "waiting for the workspace to be unlocked (locked by User ann: deploying the network)"
    );
}
