//! Tests of `rules`.

#[test]
fn emails() {
    for ok in ["ops@example.com", "a.b+c@sub.example.org"] {
        assert!(validate_email(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "ops",
        "@example.com",
        "ops@",
        "ops@example",
        "a b@example.com",
        "a@b@c.com",
        "a@.com",
    ] {
        assert!(validate_email(bad).is_err(), "{bad}");
    }
}

#[test]
fn default_execution_rules() {
    let v = |m, p| {
        validate_default_execution(m, p, "default-execution-mode", "default-agent-pool-id")
            .into_iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    };
    assert!(v(Some("remote"), None).is_empty());
    assert!(v(Some("agent"), Some("apool-1")).is_empty());
    assert_eq!(
        v(Some("remote"), Some("apool-1")),
        ["default-agent-pool-id must not be specified unless using 'agent' execution mode"]
    );
    assert_eq!(
        v(Some("agent"), None),
        ["default-agent-pool-id must be specified when using 'agent' execution mode"]
    );
    assert_eq!(
        v(Some("cloud"), None),
        ["default-execution-mode must be one of remote, local, agent"]
    );
}

#[test]
fn tag_binding_limits() {
    assert!(validate_tag_binding(&"ü".repeat(128), &"é".repeat(256)).is_ok());
    assert!(validate_tag_binding(&"k".repeat(129), "").is_err());
    assert_eq!(
        validate_tag_binding("a\u{0}b", "")
            .err()
            .map(|e| e.attribute),
        Some("key")
    );
    assert_eq!(
        validate_tag_binding("env", "pr\rod")
            .err()
            .map(|e| e.attribute),
        Some("value")
    );
    assert!(validate_tag_binding_count(10).is_ok());
    let e = validate_tag_binding_count(11).err().map(|e| e.to_string());
    assert_eq!(
        e.as_deref(),
        Some("tag-bindings cannot exceed 10 bindings per resource")
    );
}

#[test]
fn variable_descriptions() {
    assert!(validate_variable_description(&"é".repeat(512)).is_ok());
    let e = validate_variable_description(&"d".repeat(513)).err();
    assert_eq!(e.map(|e| e.attribute), Some("description"));
}

#[test]
fn run_variable_keys() {
    for ok in ["a", "_x", "region-1", "A_b"] {
        assert!(validate_run_variable_key(ok).is_ok(), "{ok}");
    }
    for bad in ["", "1x", "-a", "a b", "a.b"] {
        assert!(validate_run_variable_key(bad).is_err(), "{bad}");
    }
}

#[test]
fn project_names() {
    for ok in ["a", "Team A", "x_y-z", &"p".repeat(40)] {
        assert!(validate_project_name(ok).is_ok(), "{ok}");
    }
    for bad in ["", "   ", "a/b", "ä", &"p".repeat(41)] {
        let e = validate_project_name(bad).err();
        assert_eq!(e.map(|e| e.attribute), Some("name"), "{bad}");
    }
}

use super::*;

/// Sensitive after the update: the value given, or the plain value moving into the
/// Secret; nothing for a plain variable or a sensitive one without a new value.
#[test]
fn new_secret_values() {
    for (sensitive, given, was, plain, want) in [
        (false, Some("v"), false, "p", None),
        (true, Some("v"), true, "", Some("v")),
        (true, Some("v"), false, "p", Some("v")),
        (true, None, false, "p", Some("p")),
        (true, None, true, "", None),
    ] {
        assert_eq!(
            new_secret_value(sensitive, given, was, plain).as_deref(),
            want,
            "{sensitive} {given:?} {was}"
        );
    }
}

fn attrs(v: &[RuleViolation]) -> Vec<&'static str> {
    v.iter().map(|e| e.attribute).collect()
}

#[test]
fn workspace_name_allows_letters_digits_dash_underscore_only() {
    for ok in ["prod", "Prod_2", "a-b_c", "X", "0", &"a".repeat(90)] {
        assert_eq!(validate_workspace_name(ok), Ok(()), "{ok}");
    }
    for bad in [
        "",
        "bad name!",
        "a.b",
        "a/b",
        "ü",
        "a b",
        " x",
        &"a".repeat(91),
    ] {
        assert!(validate_workspace_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn auto_destroy_duration_is_1_to_4_digits_above_zero_with_d_or_h() {
    assert_eq!(
        parse_auto_destroy_activity_duration("14d"),
        Ok((14, DurationUnit::Days))
    );
    assert_eq!(
        parse_auto_destroy_activity_duration("1h"),
        Ok((1, DurationUnit::Hours))
    );
    assert_eq!(
        parse_auto_destroy_activity_duration("9999h"),
        Ok((9999, DurationUnit::Hours))
    );
    assert_eq!(
        parse_auto_destroy_activity_duration("0010d"),
        Ok((10, DurationUnit::Days))
    );
    assert_eq!(
        parse_auto_destroy_activity_duration("001d"),
        Ok((1, DurationUnit::Days))
    );
    assert_eq!(
        parse_auto_destroy_activity_duration("0001h"),
        Ok((1, DurationUnit::Hours))
    );
    for bad in [
        "0d", "00h", "0000d", "10000d", "d", "14", "14m", "-1d", "1.5d", " 1d", "1D", "",
    ] {
        assert!(
            parse_auto_destroy_activity_duration(bad).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn auto_destroy_pattern_matches_parser_on_all_short_inputs() {
    // Exhaustive over 0..=99999 with both units: the regex (also the CRD pattern) and
    // the numeric rule agree everywhere.
    for n in 0..=99_999u32 {
        for unit in ["d", "h"] {
            for width in [1usize, 2, 3, 4, 5] {
                let digits = format!("{n:0width$}");
                if digits.len() != width {
                    continue;
                }
                let v = format!("{digits}{unit}");
                let expect = width <= 4 && n > 0;
                assert_eq!(
                    parse_auto_destroy_activity_duration(&v).is_ok(),
                    expect,
                    "{v}"
                );
            }
        }
    }
}

#[test]
fn execution_mode_values() {
    for m in ExecutionMode::ALL {
        assert_eq!(ExecutionMode::parse(m.as_str()), Ok(m));
    }
    assert!(ExecutionMode::parse("Remote").is_err());
    assert!(ExecutionMode::parse("").is_err());
    assert!(!ExecutionMode::Local.operations());
    assert!(ExecutionMode::Remote.operations());
    assert!(ExecutionMode::Agent.operations());
    assert_eq!(ExecutionMode::from_operations(false), ExecutionMode::Local);
    assert_eq!(ExecutionMode::from_operations(true), ExecutionMode::Remote);
}

#[test]
fn agent_pool_required_with_agent_mode() {
    let s = ExecutionSettings {
        execution_mode: Some("agent"),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_execution_settings(s)), ["agent-pool-id"]);
    let s = ExecutionSettings {
        execution_mode: Some("agent"),
        agent_pool_id: Some("apool-0123456789abcdef"),
        ..Default::default()
    };
    assert!(validate_execution_settings(s).is_empty());
}

#[test]
fn agent_pool_forbidden_with_remote_local_or_operations_true() {
    for mode in ["remote", "local"] {
        let s = ExecutionSettings {
            execution_mode: Some(mode),
            agent_pool_id: Some("apool-x"),
            ..Default::default()
        };
        assert_eq!(
            attrs(&validate_execution_settings(s)),
            ["agent-pool-id"],
            "{mode}"
        );
    }
    let s = ExecutionSettings {
        operations: Some(true),
        agent_pool_id: Some("apool-x"),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_execution_settings(s)), ["agent-pool-id"]);
    let s = ExecutionSettings {
        agent_pool_id: Some("apool-x"),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_execution_settings(s)), ["agent-pool-id"]);
}

#[test]
fn execution_mode_and_operations_are_exclusive() {
    let s = ExecutionSettings {
        execution_mode: Some("remote"),
        operations: Some(true),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_execution_settings(s)), ["operations"]);
    let s = ExecutionSettings {
        operations: Some(false),
        ..Default::default()
    };
    assert!(validate_execution_settings(s).is_empty());
}

#[test]
fn execution_mode_required_when_overwritten() {
    let s = ExecutionSettings {
        overwrites_execution_mode: Some(true),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_execution_settings(s)), ["execution-mode"]);
    let s = ExecutionSettings {
        overwrites_execution_mode: Some(false),
        ..Default::default()
    };
    assert!(validate_execution_settings(s).is_empty());
    let s = ExecutionSettings {
        overwrites_execution_mode: Some(true),
        execution_mode: Some("local"),
        ..Default::default()
    };
    assert!(validate_execution_settings(s).is_empty());
}

#[test]
fn unknown_execution_mode_is_reported() {
    let s = ExecutionSettings {
        execution_mode: Some("cloud"),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_execution_settings(s)), ["execution-mode"]);
}

#[test]
fn vcs_repo_needs_identifier_and_exactly_one_credential() {
    let ok = VcsRepoInput {
        identifier: Some("acme/infra"),
        oauth_token_id: Some("ot-1"),
        ..Default::default()
    };
    assert!(validate_vcs_repo(ok).is_empty());
    let azure = VcsRepoInput {
        identifier: Some("acme/Platform Team/_git/infra"),
        app_installation_id: Some("ghain-1"),
        ..Default::default()
    };
    assert!(validate_vcs_repo(azure).is_empty());
    let missing = VcsRepoInput::default();
    assert_eq!(
        attrs(&validate_vcs_repo(missing)),
        ["vcs-repo.identifier", "vcs-repo.oauth-token-id"]
    );
    let both = VcsRepoInput {
        identifier: Some("acme/infra"),
        oauth_token_id: Some("ot-1"),
        app_installation_id: Some("ghain-1"),
        ..Default::default()
    };
    assert_eq!(attrs(&validate_vcs_repo(both)), ["vcs-repo.oauth-token-id"]);
    let bad = VcsRepoInput {
        identifier: Some("no-slash"),
        oauth_token_id: Some("ot-1"),
        tags_regex: Some("("),
        ..Default::default()
    };
    assert_eq!(
        attrs(&validate_vcs_repo(bad)),
        ["vcs-repo.identifier", "vcs-repo.tags-regex"]
    );
}

#[test]
fn terraform_versions_and_constraints() {
    for ok in [
        "1.9.5",
        "latest",
        "~> 1.9.0",
        ">= 1.2, < 2.0",
        "1.10.0-beta1",
        "= 1.5.7",
    ] {
        assert_eq!(validate_terraform_version(ok), Ok(()), "{ok}");
    }
    for bad in ["", "one", "~>", "1.2.3.4", "> = 1"] {
        assert!(validate_terraform_version(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn variable_categories() {
    assert_eq!(
        VariableCategory::parse("terraform"),
        Ok(VariableCategory::Terraform)
    );
    assert_eq!(VariableCategory::parse("env"), Ok(VariableCategory::Env));
    for c in VariableCategory::ALL {
        assert_eq!(VariableCategory::parse(c.as_str()), Ok(c));
    }
    for bad in ["", "ENV", "policy-set", "terraform-cloud", " env"] {
        let e = VariableCategory::parse(bad).err();
        assert_eq!(e.map(|e| e.attribute), Some("category"), "{bad:?}");
    }
    assert_eq!(
        VariableCategory::parse("").err().map(|e| e.message),
        Some("can't be blank".to_owned())
    );
}

/// One row per key and category: ok for terraform, ok for env.
#[test]
fn workspace_variable_keys() {
    let rows = [
        ("region", true, true),
        ("_x", true, true),
        ("AWS_REGION", true, true),
        ("a1", true, true),
        ("instance-type", true, false),
        ("", false, false),
        ("1abc", true, false),
        ("3f2b1c9e-7d4a-4b8e-9c1d-2e3f4a5b6c7d", true, false),
        ("-a", false, false),
        ("a b", false, false),
        ("a.b", false, false),
        ("a=b", false, false),
        ("ü", false, false),
    ];
    for (key, terraform, env) in rows {
        assert_eq!(
            validate_workspace_variable_key(key, VariableCategory::Terraform).is_ok(),
            terraform,
            "terraform {key:?}"
        );
        assert_eq!(
            validate_workspace_variable_key(key, VariableCategory::Env).is_ok(),
            env,
            "env {key:?}"
        );
    }
    let e = validate_workspace_variable_key("", VariableCategory::Env).err();
    assert_eq!(e.map(|e| e.to_string()), Some("key can't be blank".into()));
    assert_eq!(ENV_VARIABLE_KEY_PATTERN, TEST_VARIABLE_KEY_PATTERN);
}

#[test]
fn hcl_only_for_terraform_variables() {
    use VariableCategory::{Env, Terraform};
    assert!(validate_workspace_variable_hcl(true, Terraform).is_ok());
    assert!(validate_workspace_variable_hcl(false, Terraform).is_ok());
    assert!(validate_workspace_variable_hcl(false, Env).is_ok());
    let e = validate_workspace_variable_hcl(true, Env).err();
    assert_eq!(e.map(|e| e.attribute), Some("hcl"));
}

/// One row per escape of a string value; HCL values verbatim.
#[test]
fn tfvars_lines() {
    let rows = [
        ("eu-west-1", r#"region = "eu-west-1""#),
        ("", r#"region = """#),
        (r#"say "hi""#, r#"region = "say \"hi\"""#),
        (r"C:\dir", r#"region = "C:\\dir""#),
        ("a\nb", r#"region = "a\nb""#),
        ("a\r\n\tb", r#"region = "a\r\n\tb""#),
        ("${var.x}", r#"region = "$${var.x}""#),
        ("%{ if x }", r#"region = "%%{ if x }""#),
        ("$ {x} % {y} $x %", r#"region = "$ {x} % {y} $x %""#),
        ("$${x}", r#"region = "$$${x}""#),
        ("bell\u{7}", r#"region = "bell\u0007""#),
        ("ünïcödé ✓", r#"region = "ünïcödé ✓""#),
    ];
    for (value, line) in rows {
        assert_eq!(tfvars_line("region", value, false), line, "{value:?}");
    }
    assert_eq!(
        tfvars_line("tags", r#"{ env = "prod" }"#, true),
        r#"tags = { env = "prod" }"#
    );
    assert_eq!(tfvars_line("n", "3", true), "n = 3");
    assert_eq!(
        tfvars_line("list", "[\n  1,\n  2,\n]", true),
        "list = [\n  1,\n  2,\n]"
    );
}

#[test]
fn test_variable_key_rule() {
    for ok in ["A", "_x", "AWS_REGION", "a1_b2"] {
        assert_eq!(validate_test_variable_key(ok), Ok(()), "{ok}");
    }
    for bad in ["", "1abc", "a-b", "a b", "a.b", "ä"] {
        assert!(validate_test_variable_key(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn test_variable_category_must_be_env() {
    assert_eq!(validate_test_variable_category(Some("env")), Ok(()));
    assert!(validate_test_variable_category(Some("terraform")).is_err());
    assert!(validate_test_variable_category(None).is_err());
    assert!(validate_test_variable_category(Some("")).is_err());
}

#[test]
fn tag_rules() {
    assert_eq!(validate_tag_name("env:prod"), Ok(()));
    assert!(validate_tag_name("").is_err());
    assert!(validate_tag_name("has space").is_err());
    assert!(validate_tag_name(&"a".repeat(129)).is_err());
    assert_eq!(validate_tag_binding("team", ""), Ok(()));
    assert!(validate_tag_binding("", "x").is_err());
    assert!(validate_tag_binding(&"k".repeat(129), "x").is_err());
    assert!(validate_tag_binding("k", &"v".repeat(257)).is_err());
}

#[test]
fn page_defaults_and_bad_values() {
    assert_eq!(
        parse_page(None, None),
        Ok(Page {
            number: 1,
            size: 20
        })
    );
    assert_eq!(
        parse_page(Some("3"), Some("5")),
        Ok(Page { number: 3, size: 5 })
    );
    assert_eq!(
        parse_page(None, Some("1000")),
        Ok(Page {
            number: 1,
            size: 100
        })
    );
    for bad in ["0", "-1", "abc", "1.5", ""] {
        assert!(parse_page(Some(bad), None).is_err(), "{bad:?}");
        assert!(parse_page(None, Some(bad)).is_err(), "{bad:?}");
    }
}

/// Copies TFE: tag names are lowercase and listed once each, sorted.
#[test]
fn tag_names_are_lowercased_sorted_and_deduplicated() {
    let tags = ["Prod", "app:web", "prod", " ", "APP:web", "beta"].map(String::from);
    assert_eq!(tag_names(&tags), ["app:web", "beta", "prod"]);
    assert!(tag_names(&[]).is_empty());
}

#[test]
fn names_are_listed_ignoring_case() {
    let mut names = vec!["zeta", "Default Project", "alpha", "Beta", "beta"];
    names.sort_by(|a, b| name_order(a, b));
    assert_eq!(names, ["alpha", "Beta", "beta", "Default Project", "zeta"]);
}

#[test]
fn setting_overwrites_agree_when_both_are_given() {
    assert!(validate_setting_overwrites(Some(true), Some(true)).is_ok());
    assert!(validate_setting_overwrites(Some(false), None).is_ok());
    assert!(validate_setting_overwrites(None, Some(true)).is_ok());
    let e = validate_setting_overwrites(Some(true), Some(false)).err();
    assert_eq!(e.as_ref().map(|e| e.attribute), Some("setting-overwrites"));
    assert!(e.is_some_and(|e| e.message.contains("their values must be the same")));
}

#[test]
fn run_triggers_refuse_themselves_cycles_and_more_than_twenty_sources() {
    let e = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    assert!(validate_run_trigger(&[], "a", "b").is_ok());
    assert!(validate_run_trigger(&[], "a", "a").is_err());
    // a -> b -> c: c -> a closes a cycle, c -> d does not.
    let chain = e(&[("a", "b"), ("b", "c")]);
    assert!(validate_run_trigger(&chain, "c", "a").is_err());
    assert!(validate_run_trigger(&chain, "b", "a").is_err());
    assert!(validate_run_trigger(&chain, "c", "d").is_ok());
    assert!(
        validate_run_trigger(&chain, "a", "c").is_ok(),
        "a second path is no cycle"
    );
    let full: Vec<(String, String)> = (0..MAX_RUN_TRIGGER_SOURCES)
        .map(|i| (format!("s{i}"), "t".to_owned()))
        .collect();
    assert!(validate_run_trigger(&full, "x", "t").is_err());
    assert!(validate_run_trigger(&full[1..], "x", "t").is_ok());
}

/// Every rule of TFE's variable precedence, one row each: the candidates and the source
/// that wins.
#[test]
fn variable_precedence_follows_tfe() {
    use VariableSource::*;
    let c = |source: VariableSource, set: &str, item: &str| Candidate {
        source,
        set_name: set.to_owned(),
        category: "terraform".to_owned(),
        key: "region".to_owned(),
        item: item.to_owned(),
    };
    let rows: Vec<(Vec<Candidate<String>>, &str)> = vec![
        (vec![c(GlobalSet, "g", "global")], "global"),
        (
            vec![c(GlobalSet, "g", "global"), c(ProjectSet, "p", "project")],
            "project",
        ),
        (
            vec![
                c(ProjectSet, "p", "project"),
                c(WorkspaceSet, "w", "ws-set"),
            ],
            "ws-set",
        ),
        (
            vec![
                c(WorkspaceSet, "w", "ws-set"),
                c(Workspace, "", "workspace"),
            ],
            "workspace",
        ),
        (
            vec![c(Workspace, "", "workspace"), c(Run, "", "run")],
            "run",
        ),
        (
            vec![c(Run, "", "run"), c(PriorityWorkspaceSet, "w", "prio-ws")],
            "prio-ws",
        ),
        (
            vec![
                c(PriorityWorkspaceSet, "w", "prio-ws"),
                c(PriorityProjectSet, "p", "prio-prj"),
            ],
            "prio-prj",
        ),
        (
            vec![
                c(PriorityProjectSet, "p", "prio-prj"),
                c(PriorityGlobalSet, "g", "prio-global"),
            ],
            "prio-global",
        ),
        // Two sets of one source: the name that sorts first.
        (
            vec![c(ProjectSet, "B_set", "b"), c(ProjectSet, "A_set", "a")],
            "a",
        ),
        (
            vec![
                c(GlobalSet, "a", "a"),
                c(Workspace, "", "workspace"),
                c(GlobalSet, "b", "b"),
            ],
            "workspace",
        ),
    ];
    for (candidates, want) in rows {
        let won = winning_variables(candidates);
        assert_eq!(won.len(), 1);
        assert_eq!(won[0].item, want);
    }
    // Categories do not shadow each other.
    let mut env = c(Workspace, "", "env");
    env.category = "env".into();
    assert_eq!(
        winning_variables(vec![c(GlobalSet, "g", "tf"), env]).len(),
        2
    );
    assert!(PriorityWorkspaceSet.overrides_run() && !Workspace.overrides_run());
    assert_eq!(
        VariableSource::of_set(SetScope::Global, true),
        PriorityGlobalSet
    );
    assert_eq!(VariableSource::of_set(SetScope::Project, false), ProjectSet);
}
