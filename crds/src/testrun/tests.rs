use super::*;
use CancelRequest as C;
use TestRunState as S;

/// Copies SPEC.md "Test run states": six values, three of them final.
#[test]
fn states_and_finality() {
    let names: Vec<_> = S::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "pending", "queued", "running", "errored", "canceled", "finished"
        ]
    );
    for s in S::ALL {
        assert_eq!(s.as_str().parse::<S>(), Ok(s));
        assert_eq!(
            s.is_final(),
            matches!(s, S::Errored | S::Canceled | S::Finished),
            "{s}"
        );
    }
    assert!("Running".parse::<S>().is_err());
    assert_eq!(S::of(None), Ok(S::Pending));
    let status = TestRunStatus {
        status: Some("queued".into()),
        ..Default::default()
    };
    assert_eq!(S::of(Some(&status)), Ok(S::Queued));
}

const NOT_RUNNING: Conflict = Conflict {
    message: MSG_NOT_RUNNING,
};

/// Cancel row "pending, queued, running | no cancel before | 202, recorded": SPEC.md's
/// "running | cancel | 202", and a run the CLI cancels before its engine started.
#[test]
fn cancel_of_a_run_that_is_not_final_is_recorded() {
    for s in [S::Pending, S::Queued, S::Running] {
        assert_eq!(cancel(s, C::None), Ok(Accepted::Requested), "{s}");
    }
    assert_eq!(Accepted::HTTP_STATUS, 202);
}

/// Cancel row "pending, queued, running | cancel before | 202, nothing new": clients retry.
#[test]
fn cancel_again_before_the_end_is_accepted_again() {
    for s in [S::Pending, S::Queued, S::Running] {
        for r in [C::Requested, C::ForceRequested] {
            assert_eq!(cancel(s, r), Ok(Accepted::AlreadyRequested), "{s} {r:?}");
        }
    }
}

/// Cancel row "canceled | cancel before | 202, nothing new": terraform's second Ctrl-C
/// cancels again, possibly after the run ended; an error would make it print "Could not
/// cancel the test run".
#[test]
fn cancel_again_after_the_cancel_took_effect_is_accepted() {
    for r in [C::Requested, C::ForceRequested] {
        assert_eq!(
            cancel(S::Canceled, r),
            Ok(Accepted::AlreadyRequested),
            "{r:?}"
        );
    }
}

/// Cancel row "finished, errored, canceled | no cancel before | 409": SPEC.md Errors
/// "Cancel test 409: test not running".
#[test]
fn cancel_of_a_run_that_ended_on_its_own_is_409() {
    for s in [S::Finished, S::Errored, S::Canceled] {
        assert_eq!(cancel(s, C::None), Err(NOT_RUNNING), "{s}");
    }
    for s in [S::Finished, S::Errored] {
        for r in [C::Requested, C::ForceRequested] {
            assert_eq!(cancel(s, r), Err(NOT_RUNNING), "{s} {r:?}");
        }
    }
    assert_eq!(Conflict::HTTP_STATUS, 409);
}

/// Force-cancel row "not final | cancel before | 202": SPEC.md "running (after a cancel)
/// | force-cancel | 202"; repeated, nothing new.
#[test]
fn force_cancel_after_a_cancel_is_accepted() {
    for s in [S::Pending, S::Queued, S::Running] {
        assert_eq!(
            force_cancel(s, C::Requested),
            Ok(Accepted::Requested),
            "{s}"
        );
        assert_eq!(
            force_cancel(s, C::ForceRequested),
            Ok(Accepted::AlreadyRequested),
            "{s}"
        );
    }
}

/// Force-cancel row "not final | no cancel before | 409 not canceled first".
#[test]
fn force_cancel_without_a_cancel_is_409_saying_so() {
    for s in [S::Pending, S::Queued, S::Running] {
        assert_eq!(
            force_cancel(s, C::None),
            Err(Conflict {
                message: MSG_NOT_CANCELED_FIRST
            }),
            "{s}"
        );
    }
}

/// Force-cancel row "final | 409 not running", except the repeat of a force-cancel that
/// took effect (202, nothing new).
#[test]
fn force_cancel_of_a_final_run_is_409() {
    for s in [S::Finished, S::Errored, S::Canceled] {
        for r in [C::None, C::Requested] {
            assert_eq!(force_cancel(s, r), Err(NOT_RUNNING), "{s} {r:?}");
        }
    }
    for s in [S::Finished, S::Errored] {
        assert_eq!(force_cancel(s, C::ForceRequested), Err(NOT_RUNNING), "{s}");
    }
    assert_eq!(
        force_cancel(S::Canceled, C::ForceRequested),
        Ok(Accepted::AlreadyRequested)
    );
}

/// Copies DESIGN.md §3 step 5: pending → queued (Pod exists) → running → finished, each
/// step setting its status-timestamps key.
#[test]
fn happy_path_sets_each_timestamp() {
    let step = transition(S::Pending, C::None, &Transition::PodCreated).unwrap();
    assert_eq!(step.to, S::Queued);
    assert_eq!(step.timestamps, [TimestampKey::QueuedAt]);
    let step = transition(S::Queued, C::None, &Transition::EngineStarted).unwrap();
    assert_eq!(step.to, S::Running);
    assert_eq!(step.timestamps, [TimestampKey::StartedAt]);
    for r in [TestResult::Pass, TestResult::Fail] {
        let step = transition(S::Running, C::None, &Transition::Finished(r)).unwrap();
        assert_eq!(step.to, S::Finished);
        assert_eq!(step.timestamps, [TimestampKey::FinishedAt]);
        assert_eq!(step.test_status, Some(r));
    }
}

/// A controller that first sees a run late (operator restart) records the states it
/// skipped; repeating the current state is an empty step.
#[test]
fn skipping_and_repeating_states() {
    let step = transition(S::Pending, C::None, &Transition::EngineStarted).unwrap();
    assert_eq!(step.to, S::Running);
    assert_eq!(
        step.timestamps,
        [TimestampKey::QueuedAt, TimestampKey::StartedAt]
    );
    let step = transition(S::Queued, C::None, &Transition::Finished(TestResult::Pass)).unwrap();
    assert_eq!(
        step.timestamps,
        [TimestampKey::StartedAt, TimestampKey::FinishedAt]
    );
    let step = transition(S::Running, C::None, &Transition::EngineStarted).unwrap();
    assert_eq!((step.to, step.timestamps.len()), (S::Running, 0));
    let step = transition(S::Queued, C::None, &Transition::PodCreated).unwrap();
    assert_eq!((step.to, step.timestamps.len()), (S::Queued, 0));
}

/// Refused moves: backwards, finishing a run that never had a Pod, leaving a final state.
#[test]
fn illegal_moves_are_refused() {
    assert_eq!(
        transition(S::Running, C::None, &Transition::PodCreated),
        Err(IllegalTransition::Backwards {
            from: S::Running,
            to: S::Queued
        })
    );
    assert_eq!(
        transition(S::Pending, C::None, &Transition::Finished(TestResult::Pass)),
        Err(IllegalTransition::NotRunning(S::Pending))
    );
    let all_events = [
        Transition::PodCreated,
        Transition::EngineStarted,
        Transition::Finished(TestResult::Pass),
        Transition::Errored("x".into()),
        Transition::Canceled { forced: false },
        Transition::Canceled { forced: true },
    ];
    for s in S::ALL.into_iter().filter(|s| s.is_final()) {
        for e in &all_events {
            assert_eq!(
                transition(s, C::ForceRequested, e),
                Err(IllegalTransition::AlreadyFinal(s)),
                "{s} {e:?}"
            );
        }
    }
}

/// Copies SPEC.md: a canceled run went through an accepted cancel; a force-cancel
/// additionally sets force-canceled-at.
#[test]
fn canceled_needs_a_request() {
    let step = transition(
        S::Running,
        C::Requested,
        &Transition::Canceled { forced: false },
    )
    .unwrap();
    assert_eq!(step.to, S::Canceled);
    assert_eq!(step.timestamps, [TimestampKey::CanceledAt]);
    let step = transition(
        S::Running,
        C::ForceRequested,
        &Transition::Canceled { forced: true },
    )
    .unwrap();
    assert_eq!(
        step.timestamps,
        [TimestampKey::CanceledAt, TimestampKey::ForceCanceledAt]
    );
    for s in [S::Pending, S::Queued, S::Running] {
        assert_eq!(
            transition(s, C::None, &Transition::Canceled { forced: false }),
            Err(IllegalTransition::NotCanceled),
            "{s}"
        );
    }
    assert_eq!(
        transition(
            S::Running,
            C::Requested,
            &Transition::Canceled { forced: true }
        ),
        Err(IllegalTransition::NotForceCanceled)
    );
}

/// A run canceled before its engine started (pending: no Pod; queued: Pod not started)
/// ends canceled with only canceled-at: it never started.
#[test]
fn canceled_before_the_engine_started() {
    for s in [S::Pending, S::Queued] {
        let step = transition(s, C::Requested, &Transition::Canceled { forced: false }).unwrap();
        assert_eq!(step.to, S::Canceled, "{s}");
        assert_eq!(step.timestamps, [TimestampKey::CanceledAt], "{s}");
        let step =
            transition(s, C::ForceRequested, &Transition::Canceled { forced: true }).unwrap();
        assert_eq!(
            step.timestamps,
            [TimestampKey::CanceledAt, TimestampKey::ForceCanceledAt],
            "{s}"
        );
    }
}

/// A test run created by the terraform CLI (it sends X-Terraform-Integration) is queued
/// from the `engine`; every other API client's is `svc-api`.
#[test]
fn source_of_an_api_request() {
    assert_eq!(
        TestSource::of_api_request(Some("cloud")),
        TestSource::Engine
    );
    assert_eq!(TestSource::of_api_request(None), TestSource::SvcApi);
    assert_eq!(TestSource::of_api_request(Some(" ")), TestSource::SvcApi);
    assert_eq!(HEADER_TERRAFORM_INTEGRATION, "x-terraform-integration");
}
/// Copies issue 5: a deleted Pod, a pull failure, a missing summary… → errored with a
/// message, from every non-final state.
#[test]
fn errored_from_every_non_final_state() {
    for s in [S::Pending, S::Queued, S::Running] {
        let step =
            transition(s, C::None, &Transition::Errored("image pull failed".into())).unwrap();
        assert_eq!(step.to, S::Errored);
        assert_eq!(step.timestamps, [TimestampKey::ErroredAt]);
        assert_eq!(step.message.as_deref(), Some("image pull failed"));
    }
}

/// After an accepted cancel the run is canceled even though the interrupted engine
/// printed a summary; without one the summary decides.
#[test]
fn outcome_on_exit() {
    assert_eq!(
        Transition::on_exit(C::Requested, Ok(TestResult::Pass)),
        Transition::Canceled { forced: false }
    );
    assert_eq!(
        Transition::on_exit(C::ForceRequested, Err("killed".into())),
        Transition::Canceled { forced: true }
    );
    assert_eq!(
        Transition::on_exit(C::None, Ok(TestResult::Fail)),
        Transition::Finished(TestResult::Fail)
    );
    assert_eq!(
        Transition::on_exit(C::None, Err("no summary".into())),
        Transition::Errored("no summary".into())
    );
}

/// status-timestamps keys use the API's spelling; the first time wins.
#[test]
fn timestamp_keys() {
    let keys: Vec<_> = TimestampKey::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "queued-at",
            "started-at",
            "finished-at",
            "canceled-at",
            "errored-at",
            "force-canceled-at"
        ]
    );
    let mut ts = TestRunTimestamps::default();
    for k in TimestampKey::ALL {
        k.set(&mut ts, "2026-01-01T00:00:00Z");
        k.set(&mut ts, "2026-01-02T00:00:00Z");
        assert_eq!(k.get(&ts), Some("2026-01-01T00:00:00Z"), "{}", k.as_str());
    }
    let status = TestRunStatus {
        cancel_requested_at: Some("t".into()),
        ..Default::default()
    };
    assert_eq!(C::of(Some(&status)), C::Requested);
    assert_eq!(C::of(None), C::None);
}

/// Copies SPEC.md's test source table and issue 5's vendor aliases for filter[source].
#[test]
fn sources_and_aliases() {
    for (spec, alias, src) in [
        ("engine", "terraform", TestSource::Engine),
        ("svc-api", "tfe-api", TestSource::SvcApi),
        (
            "svc-configuration-version",
            "tfe-configuration-version",
            TestSource::SvcConfigurationVersion,
        ),
    ] {
        assert_eq!(src.as_str(), spec);
        assert_eq!(spec.parse::<TestSource>(), Ok(src));
        // Stored values are SPEC.md's only.
        assert!(alias.parse::<TestSource>().is_err());
        assert_eq!(TestSource::from_filter_value(alias), Some(src));
        assert_eq!(TestSource::from_filter_value(spec), Some(src));
    }
}

/// Copies SPEC.md A4: filter[source] is a comma-separated list; a run is listed when its
/// source is one of them.
#[test]
fn source_filter() {
    let f = SourceFilter::parse("terraform, svc-api,,engine").unwrap();
    assert_eq!(f.sources, [TestSource::Engine, TestSource::SvcApi]);
    assert!(f.matches("engine"));
    assert!(f.matches("svc-api"));
    assert!(!f.matches("svc-configuration-version"));
    let all = SourceFilter::parse("").unwrap();
    assert!(all.sources.is_empty());
    assert!(all.matches("svc-configuration-version"));
    let err = SourceFilter::parse("engine,tfe-ui").unwrap_err();
    assert_eq!(err.attribute, "filter[source]");
    assert!(err.message.contains("\"tfe-ui\""), "{}", err.message);
    assert!(SourceFilter::parse("Engine").is_err());
}
