use super::*;
use crate::resources::{RunSpec, RunStatus};

fn run(auto_apply: bool, stamps: &[(&str, &str)], edit: impl FnOnce(&mut RunStatus)) -> Run {
    let mut r = Run::new(
        "r",
        RunSpec {
            workspace: "w".into(),
            auto_apply,
            created_by: Some("user:ann".into()),
            ..RunSpec::default()
        },
    );
    let mut st = RunStatus::default();
    for (k, t) in stamps {
        st.status_timestamps.insert((*k).into(), (*t).into());
    }
    edit(&mut st);
    r.status = Some(st);
    r
}

fn t(s: &str) -> String {
    format!("2026-01-01T00:00:{s}.000Z")
}

fn triggers(n: &[Notice]) -> Vec<&str> {
    n.iter().map(|n| n.trigger).collect()
}

#[test]
fn an_auto_applied_run_notifies_each_step_and_needs_no_attention() {
    let (a, b, c, d, e, f) = (t("00"), t("01"), t("02"), t("03"), t("04"), t("05"));
    let r = run(
        true,
        &[
            (QUEUEABLE_AT, &a),
            ("plan-queued-at", &b),
            ("planning-at", &c),
            ("planned-at", &d),
            ("applying-at", &e),
            ("applied-at", &f),
        ],
        |st| st.confirmed_by = Some("auto-apply".into()),
    );
    let n = notices(&r);
    assert_eq!(
        triggers(&n),
        [
            "run:created",
            "run:planning",
            "run:applying",
            "run:completed"
        ]
    );
    assert_eq!(n[0].by.as_deref(), Some("user:ann"));
    assert_eq!(n[3].message(), "Run Applied");
    assert_eq!(n[3].at, f);
    assert_eq!(n[2].by, None, "auto-apply is nobody");
}

#[test]
fn a_plan_waiting_for_a_person_needs_attention_and_the_confirmer_applies() {
    let (a, c, d, e) = (t("00"), t("02"), t("03"), t("09"));
    let r = run(
        false,
        &[
            (QUEUEABLE_AT, &a),
            ("planning-at", &c),
            ("planned-at", &d),
            ("applying-at", &e),
        ],
        |st| st.confirmed_by = Some("user:bob".into()),
    );
    let n = notices(&r);
    assert_eq!(
        triggers(&n),
        [
            "run:created",
            "run:planning",
            "run:needs_attention",
            "run:applying"
        ]
    );
    assert_eq!(n[2].message(), "Run Needs Attention");
    assert_eq!(n[3].by.as_deref(), Some("user:bob"));
}

#[test]
fn runs_that_stop_short_error_and_plans_that_end_complete() {
    for (key, message, trigger) in [
        ("errored-at", "Run Errored", "run:errored"),
        ("canceled-at", "Run Canceled", "run:errored"),
        ("force-canceled-at", "Run Canceled", "run:errored"),
        ("discarded-at", "Run Discarded", "run:errored"),
        (
            "planned-and-finished-at",
            "Run Planned and Finished",
            "run:completed",
        ),
        (
            "planned-and-saved-at",
            "Run Planned and Saved",
            "run:completed",
        ),
    ] {
        let (a, z) = (t("00"), t("30"));
        let r = run(false, &[(QUEUEABLE_AT, &a), (key, &z)], |st| {
            st.acted_by.insert("discard".into(), "user:cy".into());
        });
        let n = notices(&r);
        let last = n.last().unwrap();
        assert_eq!((last.trigger, last.message()), (trigger, message), "{key}");
        if key == "discarded-at" {
            assert_eq!(last.by.as_deref(), Some("user:cy"));
        }
    }
    assert!(notices(&Run::new("r", RunSpec::default())).is_empty());
}

#[test]
fn a_configuration_owes_what_it_listens_to_since_it_exists_and_not_twice() {
    let (a, c, z) = (t("00"), t("02"), t("30"));
    let r = run(
        true,
        &[(QUEUEABLE_AT, &a), ("planning-at", &c), ("applied-at", &z)],
        |_| {},
    );
    let all = || notices(&r);
    let listen: Vec<String> = ["run:created", "run:completed"].map(String::from).to_vec();
    let epoch: Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
    assert_eq!(
        triggers(&due("run-1", all(), &listen, epoch, &[])),
        ["run:created", "run:completed"]
    );
    // Created after the run was: only what came later.
    let later: Timestamp = t("01").parse().unwrap();
    assert_eq!(
        triggers(&due("run-1", all(), &listen, later, &[])),
        ["run:completed"]
    );
    let done = [DeliveredNotification {
        run: "run-1".into(),
        trigger: "run:completed".into(),
        at: z.clone(),
    }];
    assert_eq!(
        triggers(&due("run-1", all(), &listen, epoch, &done)),
        ["run:created"]
    );
    assert_eq!(
        triggers(&due("run-2", all(), &listen, epoch, &done)),
        ["run:created", "run:completed"],
        "another run's delivery is not this one's"
    );
    // The window: a day after, nothing of that run is owed, and its entries go.
    let next_day: Timestamp = "2026-01-02T00:00:31Z".parse().unwrap();
    let since = notify_since(epoch, next_day);
    assert!(due("run-1", all(), &listen, since, &[]).is_empty());
    let mut kept = done.to_vec();
    prune_delivered(&mut kept, since);
    assert!(kept.is_empty());
    let created_later: Timestamp = "2026-01-01T23:00:00Z".parse().unwrap();
    assert_eq!(notify_since(created_later, next_day), created_later);
}

#[test]
fn retries_back_off_and_end() {
    let d: Vec<u64> = (1..=5)
        .map(|a| retry_delay(a).map_or(0, |d| d.as_secs()))
        .collect();
    assert_eq!(d, [5, 15, 45, 135, 0]);
}

#[test]
fn the_signature_is_hmac_sha512_hex() {
    assert_eq!(
        signature("key", b"The quick brown fox jumps over the lazy dog"),
        "b42af09057bac1e2d41708e48a902e09b5ff7f12ab428a4fe86653c73dd248fb\
         82f948a549f7b791a5b41915ee4d1ec3935357e4e2317250d0372afa2ebeeb3a"
    );
}

#[test]
fn payloads_have_each_destinations_shape() {
    let s = Subject {
        configuration_id: "nc-1",
        configuration_name: "ops",
        workspace_id: "ws-1",
        workspace_name: "net",
        organization: "acme",
    };
    let r = RunFacts {
        id: "run-1",
        message: "more queues",
        created_at: "2026-01-01T00:00:00.000Z",
        created_by: Some("user:ann"),
        url: "https://tf.example/app/acme/net/runs/run-1".into(),
        assessment: None,
    };
    let n = Notice {
        trigger: "run:errored",
        state: RunState::Canceled,
        at: t("09"),
        by: Some("user:bob".into()),
    };
    let g = generic_payload(&s, Some((&r, &n)));
    assert_eq!(g["payload_version"], 1);
    assert_eq!(g["run_created_by"], "ann");
    assert_eq!(g["run_url"], r.url);
    assert_eq!(
        g["notifications"][0],
        json!({"message": "Run Canceled", "trigger": "run:errored", "run_status": "canceled",
               "run_updated_at": t("09"), "run_updated_by": "bob"})
    );
    let v = generic_payload(&s, None);
    assert_eq!(v["run_id"], Value::Null);
    assert_eq!(v["notifications"][0]["trigger"], "verification");
    assert_eq!(v["notifications"][0]["message"], "Verification of ops");
    let slack = payload("slack", &s, Some((&r, &n)));
    assert_eq!(slack["attachments"][0]["title"], "Run Canceled");
    assert_eq!(slack["attachments"][0]["title_link"], r.url);
    let teams = payload("microsoft-teams", &s, Some((&r, &n)));
    assert_eq!(teams["@type"], "MessageCard");
    assert_eq!(teams["potentialAction"][0]["targets"][0]["uri"], r.url);
    assert!(
        payload("microsoft-teams", &s, None)
            .get("potentialAction")
            .is_none()
    );
}

#[test]
fn urls_are_http_with_a_host_and_no_credentials() {
    assert_eq!(
        check_url("https://hooks.example.com/x?y=1").unwrap(),
        Destination {
            https: true,
            host: "hooks.example.com".into(),
            port: 443
        }
    );
    assert_eq!(check_url("http://[::1]:8080/").unwrap().host, "::1");
    assert_eq!(check_url("http://127.0.0.1:9/").unwrap().port, 9);
    for bad in [
        "ftp://x",
        "example.com",
        "http://",
        "http://u:p@x/",
        "http://x:99999/",
        "http://a b/",
    ] {
        assert!(check_url(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_operator_refuses_inner_addresses_unless_allowed() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    for inner in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:10.0.0.1",
    ] {
        assert!(address_refusal(ip(inner), &[]).is_some(), "{inner}");
    }
    for outer in ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"] {
        assert_eq!(address_refusal(ip(outer), &[]), None, "{outer}");
    }
    let loopback = parse_cidrs("127.0.0.0/8, ::1").unwrap();
    assert_eq!(address_refusal(ip("127.0.0.1"), &loopback), None);
    assert_eq!(address_refusal(ip("::1"), &loopback), None);
    assert!(address_refusal(ip("10.0.0.1"), &loopback).is_some());
    assert!(parse_cidrs("10.0.0.0/33").is_err());
    assert!(parse_cidrs("").unwrap().is_empty());
}

/// Issue 39 §10: IPv4 inside IPv6 (NAT64, 6to4, compatible, Teredo) is unwrapped at send
/// time, and internal destinations in any spelling are refused when configured.
#[test]
fn internal_destinations_are_refused_in_every_spelling() {
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    for wrapped in [
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::7f00:1",
        "2002:a9fe:a9fe::1",
        "2002:7f00:1::",
        "::7f00:1",
        "::10.0.0.1",
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",
    ] {
        assert!(address_refusal(ip(wrapped), &[]).is_some(), "{wrapped}");
    }
    assert_eq!(
        address_refusal(ip("64:ff9b::808:808"), &[]),
        None,
        "8.8.8.8 via NAT64"
    );
    for url in [
        "http://169.254.169.254/latest/meta-data",
        "http://2130706433/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://10.1/",
        "http://[::ffff:169.254.169.254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fe80::1]/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://localhost:8080/",
        "http://api.localhost/",
        "https://192.168.0.10/hook",
    ] {
        assert!(destination_refusal(url, &[]).is_some(), "{url}");
    }
    for url in [
        "https://hooks.slack.com/services/T/B/X",
        "https://example.com:8443/x",
        "http://93.184.216.34/",
    ] {
        assert_eq!(destination_refusal(url, &[]), None, "{url}");
    }
    let loopback = parse_cidrs("127.0.0.0/8").unwrap();
    assert_eq!(
        destination_refusal("http://127.0.0.1:9000/", &loopback),
        None
    );
    assert_eq!(
        destination_refusal("http://2130706433:9000/", &loopback),
        None
    );
    assert_eq!(literal_ip("0x7f.1"), Some(ip("127.0.0.1")));
    assert_eq!(literal_ip("example.com"), None);
    assert_eq!(literal_ip("1.2.3.4.5"), None);
    assert_eq!(literal_ip("256.1.1.1"), None);
}

#[test]
fn an_assessment_reaches_only_the_triggers_its_result_fires() {
    use crate::assessment::AssessmentSummary;
    use crate::resources::RunAssessment;
    let mut r = Run::new("a", RunSpec::default());
    r.spec.assessment = true;
    r.spec.plan_only = true;
    let mut st = RunStatus {
        status: Some("planned_and_finished".into()),
        ..Default::default()
    };
    st.status_timestamps.insert(
        "planned-and-finished-at".into(),
        "2026-01-01T00:00:05Z".into(),
    );
    st.status_timestamps
        .insert("planning-at".into(), "2026-01-01T00:00:01Z".into());
    r.status = Some(st.clone());
    assert!(notices(&r).is_empty(), "no run trigger, no result yet");
    let drifted = AssessmentSummary {
        succeeded: true,
        drifted: true,
        resources_drifted: 1,
        resources_undrifted: 2,
        drifted_resources: vec!["terraform_data.x".into()],
        ..AssessmentSummary::default()
    };
    st.assessment = Some(Box::new(RunAssessment {
        summary: drifted,
        triggers: vec!["assessment:drifted".into()],
        prior_result_id: Some("asmtres-old".into()),
        prior: Some(AssessmentSummary {
            succeeded: true,
            ..AssessmentSummary::default()
        }),
    }));
    r.status = Some(st);
    let n = notices(&r);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].trigger, "assessment:drifted");
    assert_eq!(n[0].message(), "Drift Detected");
    assert_eq!(n[0].at, "2026-01-01T00:00:05Z");
    let result = r.status.as_ref().unwrap().assessment.as_deref().unwrap();
    let s = Subject {
        configuration_id: "nc-1",
        configuration_name: "ops",
        workspace_id: "ws-1",
        workspace_name: "net",
        organization: "acme",
    };
    let facts = RunFacts {
        id: "run-X",
        message: "Health assessment",
        created_at: "",
        created_by: None,
        url: "https://tf.example/app/acme/workspaces/net/health".into(),
        assessment: Some(AssessmentFacts {
            result,
            result_id: "asmtres-X".into(),
            at: "2026-01-01T00:00:05Z",
            base: "https://tf.example".into(),
        }),
    };
    let g = payload("generic", &s, Some((&facts, &n[0])));
    assert_eq!(g["payload_version"], "2");
    assert_eq!(g["trigger_scope"], "assessment");
    assert_eq!(g["trigger"], "assessment:drifted");
    assert_eq!(g["message"], "Drift Detected");
    let new = &g["details"]["new_assessment_result"];
    assert_eq!(new["id"], "asmtres-X");
    assert_eq!(
        new["url"],
        "https://tf.example/api/v2/assessment-results/asmtres-X"
    );
    assert_eq!(
        (new["drifted"].clone(), new["resources_drifted"].clone()),
        (json!(true), json!(1))
    );
    assert_eq!(g["details"]["prior_assessment_result"]["id"], "asmtres-old");
    assert_eq!(g["details"]["workspace_name"], "net");
    let slack = payload("slack", &s, Some((&facts, &n[0])));
    let text = slack["text"].as_str().unwrap();
    assert!(
        text.starts_with("Drift Detected") && text.contains("terraform_data.x"),
        "{text}"
    );
    let teams = payload("microsoft-teams", &s, Some((&facts, &n[0])));
    assert_eq!(teams["potentialAction"][0]["name"], "View health");
}
