//! Tests of `state`.

use super::*;

fn state(serial: i64, lineage: &str) -> Vec<u8> {
    serde_json::json!({
        "version": 4,
        "terraform_version": "1.11.4",
        "serial": serial,
        "lineage": lineage,
        "outputs": {
            "greeting": {"value": "hello", "type": "string"},
            "secret": {"value": "s3cret", "type": "string", "sensitive": true},
        },
        "resources": [
            {"mode": "managed", "type": "terraform_data", "name": "a",
             "provider": "provider[\"terraform.io/builtin/terraform\"]",
             "instances": [{"attributes": {}}, {"attributes": {}}]},
            {"mode": "data", "type": "terraform_remote_state", "name": "r",
             "provider": "provider[\"terraform.io/builtin/terraform\"]",
             "instances": [{}]},
            {"module": "module.m", "mode": "managed", "type": "terraform_data", "name": "b",
             "provider": "provider[\"terraform.io/builtin/terraform\"]",
             "instances": [{}]},
        ],
    })
    .to_string()
    .into_bytes()
}

#[test]
fn only_the_lock_holder_writes() {
    let me = LockHolder::User("alice".into());
    assert!(check_lock(Some(&me), &me).is_ok());
    let other = LockHolder::User("bob".into());
    let e = check_lock(Some(&other), &me).err();
    assert_eq!(e.as_ref().map(StateError::status), Some(409));
    assert!(e.is_some_and(|e| e.to_string().contains("locked by User bob")));
    assert_eq!(check_lock(None, &me).err().map(|e| e.status()), Some(409));
}

#[test]
fn succession_rows() {
    let cur = || {
        Some(Current {
            serial: 3,
            lineage: "L",
            md5: "abc",
        })
    };
    assert!(
        check_succession(None, 1, "X", "m", false).is_ok(),
        "first version"
    );
    assert!(check_succession(cur(), 4, "L", "m", false).is_ok());
    assert!(matches!(
        check_succession(cur(), 2, "L", "m", false),
        Err(StateError::SerialNotGreater { .. })
    ));
    // The current serial again: the same state is a retry, another state a conflict.
    assert!(check_succession(cur(), 3, "L", "ABC", false).is_ok());
    assert!(matches!(
        check_succession(cur(), 3, "L", "other", false),
        Err(StateError::SameSerialOtherState { .. })
    ));
    assert!(matches!(
        check_succession(cur(), 9, "M", "m", false),
        Err(StateError::LineageMismatch { .. })
    ));
    // A lineage is only compared when both sides have one.
    assert!(check_succession(cur(), 4, "", "m", false).is_ok());
    let unnamed = Some(Current {
        serial: 3,
        lineage: "",
        md5: "abc",
    });
    assert!(check_succession(unnamed, 4, "M", "m", false).is_ok());
    assert!(
        check_succession(cur(), 1, "M", "m", true).is_ok(),
        "force waives both"
    );
}

/// When the bytes arrive: the lock again, then the succession; the current state again
/// (same serial and MD5) becomes current, as in HCP (issue 42 §1).
#[test]
fn commit_rows() {
    let me = LockHolder::User("alice".into());
    let other = LockHolder::User("bob".into());
    let at = |s| jiff::Timestamp::from_second(s).unwrap_or_default();
    let cand = |serial, md5, needs_lock| Candidate {
        serial,
        lineage: "L",
        md5,
        force: false,
        writer: &me,
        created: at(100),
        needs_lock,
    };
    let cur = || {
        Some(Current {
            serial: 3,
            lineage: "L",
            md5: "abc",
        })
    };
    assert!(check_commit(Some(&me), Some(at(50)), cur(), &cand(4, "m", true)).is_ok());
    assert!(
        check_commit(Some(&me), Some(at(50)), cur(), &cand(3, "ABC", true)).is_ok(),
        "an identical repeat becomes current"
    );
    assert!(matches!(
        check_commit(Some(&me), Some(at(50)), cur(), &cand(3, "other", true)),
        Err(StateError::SameSerialOtherState { .. })
    ));
    assert!(matches!(
        check_commit(Some(&me), Some(at(50)), cur(), &cand(2, "abc", true)),
        Err(StateError::SerialNotGreater { .. })
    ));
    // The lock: held by another, or taken again after the create.
    assert_eq!(
        check_commit(Some(&other), Some(at(50)), cur(), &cand(4, "m", true))
            .err()
            .map(|e| e.status()),
        Some(409)
    );
    assert!(check_commit(Some(&me), Some(at(200)), cur(), &cand(4, "m", true)).is_err());
    // A run's apply needs no lock.
    assert!(check_commit(None, None, cur(), &cand(4, "m", false)).is_ok());
}

#[test]
fn state_files_are_checked_and_summarized() {
    let bytes = state(4, "L");
    let md5 = md5_hex(&bytes);
    let s = check_state(&bytes, Some(&md5)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.resource_count, 3, "managed instances only");
    assert_eq!(s.resources.len(), 2);
    assert_eq!(s.resources[1].module, "module.m");
    assert_eq!(s.outputs.len(), 2);
    assert!(s.outputs.iter().any(|o| o.name == "secret" && o.sensitive));
    assert_eq!(s.outputs[0].type_json.as_deref(), Some("\"string\""));
    assert_eq!(s.terraform_version.as_deref(), Some("1.11.4"));
    assert_eq!(s.providers.len(), 1);
    let e = check_state(&bytes, Some("00")).err();
    assert_eq!(e.map(|e| e.status()), Some(422));
    // The file's own serial and lineage are not the version's business.
    assert_eq!(check_state(&bytes, None).map(|s| s.serial), Ok(4));
    assert!(matches!(summarize(b"{}"), Err(StateError::Invalid(_))));
    assert!(matches!(summarize(b"nope"), Err(StateError::Invalid(_))));
    assert!(matches!(
        summarize(br#"{"version": 3, "serial": 1}"#),
        Err(StateError::Invalid(_))
    ));
    assert_eq!(
        output_value(&bytes, "secret"),
        Some(serde_json::json!("s3cret"))
    );
    assert_eq!(output_values(&bytes).len(), 2);
    assert_eq!(check_size(10, 5).err().map(|e| e.status()), Some(413));
}

/// A state read from a reader in small pieces sums up as the bytes do; the streamed
/// verdict checks the size, then the MD5, then the summary, as [`check_state`].
#[test]
fn streamed_states_are_checked_as_whole_ones() {
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let bytes = state(4, "L");
    let mut whole = summarize(&bytes).unwrap_or_default();
    let mut streamed = summarize_reader(&mut Trickle(&bytes)).unwrap_or_default();
    // Output IDs are new each time.
    for o in whole.outputs.iter_mut().chain(streamed.outputs.iter_mut()) {
        o.id.clear();
    }
    assert_eq!(whole, streamed);
    let mut h = Md5Hasher::default();
    for piece in bytes.chunks(10) {
        h.update(piece);
    }
    let md5 = h.finish();
    assert_eq!(md5, md5_hex(&bytes));
    let n = bytes.len() as u64;
    let ok = || summarize_reader(&mut Trickle(&bytes));
    assert!(check_streamed(n, n, Some(&md5), &md5, ok()).is_ok());
    assert_eq!(
        check_streamed(n, n - 1, Some("00"), &md5, ok()).map_err(|e| e.status()),
        Err(413)
    );
    assert!(matches!(
        check_streamed(
            n,
            n,
            Some("00"),
            &md5,
            summarize_reader(&mut Trickle(b"nope"))
        ),
        Err(StateError::Md5Mismatch { .. })
    ));
    assert!(matches!(
        check_streamed(n, n, None, &md5, summarize_reader(&mut Trickle(b"{} x"))),
        Err(StateError::Invalid(_))
    ));
    assert!(check_json(&mut Trickle(&bytes)).is_ok());
    assert!(check_json(&mut Trickle(b"{} x")).is_err());
}

#[test]
fn states_round_trip() {
    for s in StateVersionState::ALL {
        assert_eq!(StateVersionState::parse(Some(s.as_str())), Some(s));
    }
    assert_eq!(
        StateVersionState::parse(None),
        Some(StateVersionState::Pending)
    );
    assert_eq!(StateVersionState::parse(Some("weird")), None);
}

fn written(at: i64, serial: i64, state: StateVersionState) -> WrittenVersion {
    WrittenVersion {
        created: jiff::Timestamp::from_second(at).unwrap(),
        serial,
        state,
        abandoned: false,
    }
}

#[test]
fn unlock_waits_only_for_the_latest_version_written_under_the_lock() {
    use StateVersionState::*;
    let lock = Some(jiff::Timestamp::from_second(1000).unwrap());
    // Nothing written under the lock, or not locked: no wait.
    assert!(!latest_pending_since(lock, []));
    assert!(!latest_pending_since(None, [written(1001, 1, Pending)]));
    // The latest under the lock is pending: wait.
    assert!(latest_pending_since(lock, [written(1001, 1, Pending)]));
    assert!(latest_pending_since(
        lock,
        [written(1001, 1, Finalized), written(1002, 2, Pending)]
    ));
    // The latest is finalized (an earlier one stayed pending): no wait.
    assert!(!latest_pending_since(
        lock,
        [written(1001, 1, Pending), written(1002, 2, Finalized)]
    ));
    // Pending from before the lock: not this lock's.
    assert!(!latest_pending_since(lock, [written(999, 1, Pending)]));
    // Same second as the lock (creation times are whole seconds): this lock's.
    let lock_ms = Some(jiff::Timestamp::from_millisecond(1_000_700).unwrap());
    assert!(latest_pending_since(lock_ms, [written(1000, 1, Pending)]));
    // Discarded, or abandoned (its upload URLs expired): no wait.
    assert!(!latest_pending_since(lock, [written(1001, 1, Discarded)]));
    let mut abandoned = written(1001, 1, Pending);
    abandoned.abandoned = true;
    assert!(!latest_pending_since(lock, [abandoned]));
}

#[test]
fn retention_of_state_data() {
    use StateVersionState::*;
    let day = |d: i64| jiff::Timestamp::from_second(d * 86_400).unwrap();
    let keep = |n: i32| DataRetentionPolicy {
        delete_older_than_n_days: Some(n),
        dont_delete: None,
    };
    let never = DataRetentionPolicy {
        delete_older_than_n_days: None,
        dont_delete: Some(true),
    };
    let grace = jiff::SignedDuration::from_hours(48);
    let now = day(10);
    let written = |d: i64| Times {
        written: Some(day(d)),
        soft_deleted: None,
    };
    let r =
        |p: Option<&DataRetentionPolicy>, s, t, current| retention(p, s, t, current, grace, now);
    // No policy, dont-delete: kept, nothing to look at again.
    assert_eq!(r(None, Finalized, written(1), false), Retention::Keep);
    assert_eq!(
        r(Some(&never), Finalized, written(1), false),
        Retention::Keep
    );
    // Older than the policy: soft-deleted; younger: kept until it is due.
    assert_eq!(
        r(Some(&keep(3)), Finalized, written(1), false),
        Retention::SoftDelete
    );
    assert_eq!(
        r(Some(&keep(3)), Finalized, written(8), false),
        Retention::KeepUntil(day(11))
    );
    // Due exactly now: goes.
    assert_eq!(
        r(Some(&keep(3)), Finalized, written(7), false),
        Retention::SoftDelete
    );
    // The current state never goes; nor data not finalized.
    assert_eq!(
        r(Some(&keep(3)), Finalized, written(1), true),
        Retention::Keep
    );
    for s in [Pending, Discarded, BackingDataPermanentlyDeleted] {
        assert_eq!(r(Some(&keep(3)), s, written(1), false), Retention::Keep);
    }
    // Soft-deleted data goes for good after the grace period, whatever the policy.
    let soft = |d: i64| Times {
        written: Some(day(1)),
        soft_deleted: Some(day(d)),
    };
    assert_eq!(
        r(None, BackingDataSoftDeleted, soft(9), false),
        Retention::KeepUntil(day(11))
    );
    assert_eq!(
        r(None, BackingDataSoftDeleted, soft(8), false),
        Retention::PermanentlyDelete
    );
    assert_eq!(
        r(None, BackingDataSoftDeleted, soft(6), false),
        Retention::PermanentlyDelete
    );
    // The workspace's own policy wins over the organization's default.
    assert_eq!(effective_policy(Some(&never), Some(&keep(1))), Some(&never));
    assert_eq!(effective_policy(None, Some(&keep(1))), Some(&keep(1)));
    assert_eq!(effective_policy(None, None), None);
}

#[test]
fn backing_data_transitions() {
    use BackingDataAction::*;
    use StateVersionState::*;
    let t = |s, a, c| backing_data_transition(s, a, c).map_err(|e| e.status());
    assert_eq!(t(Finalized, SoftDelete, false), Ok(BackingDataSoftDeleted));
    assert_eq!(t(BackingDataSoftDeleted, Restore, false), Ok(Finalized));
    assert_eq!(
        t(BackingDataSoftDeleted, PermanentlyDelete, false),
        Ok(BackingDataPermanentlyDeleted)
    );
    assert_eq!(
        t(Finalized, PermanentlyDelete, false),
        Ok(BackingDataPermanentlyDeleted)
    );
    // Not the current state; not back from permanent deletion; nothing for pending.
    assert_eq!(t(Finalized, SoftDelete, true), Err(409));
    assert_eq!(t(Finalized, PermanentlyDelete, true), Err(409));
    let e = backing_data_transition(BackingDataPermanentlyDeleted, Restore, false).err();
    assert!(e.is_some_and(|e| e.to_string().contains("transition not allowed")));
    assert_eq!(t(Finalized, Restore, false), Err(409));
    assert_eq!(t(Pending, SoftDelete, false), Err(409));
}

#[test]
fn resource_instances_as_tfe_lists_them() {
    let bytes = br#"{"version": 4, "serial": 1, "resources": [
            {"module": "module.media_bucket", "mode": "managed", "type": "aws_s3_bucket_public_access_block",
             "name": "this", "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
             "instances": [{"index_key": 0, "attributes": {}}]},
            {"mode": "managed", "type": "terraform_data", "name": "one",
             "provider": "provider[\"terraform.io/builtin/terraform\"]", "instances": [{"attributes": {}}]},
            {"mode": "managed", "type": "terraform_data", "name": "each",
             "provider": "provider[\"terraform.io/builtin/terraform\"]", "instances": [{"index_key": "blue"}]},
            {"mode": "data", "type": "terraform_remote_state", "name": "x", "provider": "p", "instances": [{}]}
        ]}"#;
    let r = resource_instances(bytes).unwrap_or_default();
    assert_eq!(r.len(), 3, "managed instances only");
    assert_eq!(
        r[0].address,
        "media_bucket.aws_s3_bucket_public_access_block.this[0]"
    );
    assert_eq!(r[0].module, "media_bucket");
    assert_eq!(r[0].provider, "hashicorp/aws");
    assert_eq!(r[0].name_index.as_deref(), Some("0"));
    assert_eq!(r[1].address, "terraform_data.one");
    assert_eq!(r[1].module, "root");
    assert_eq!(r[1].provider, "builtin/terraform");
    assert_eq!(r[1].name_index, None);
    assert_eq!(r[2].address, "terraform_data.each[\"blue\"]");
    assert_eq!(module_name("module.a.module.b"), "a.b");
}
