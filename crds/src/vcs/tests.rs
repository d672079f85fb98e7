use serde_json::json;

use super::events::{Event, PrAction, Push, parse};
use super::status::{CommitState, of_run, request};
use super::triggers::{Triggers, Verdict, judge, watched};
use super::*;
use crate::run::RunState;

fn headers(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let list: Vec<(String, String)> = list
        .iter()
        .map(|(k, v)| (k.to_lowercase(), (*v).to_owned()))
        .collect();
    move |name: &str| list.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

#[test]
fn each_forge_signs_its_own_way_and_nothing_else_passes() {
    let body = br#"{"ref":"refs/heads/main"}"#;
    let sig = hmac_sha256_hex(b"s3cret", body);
    // GitHub: sha256=<hex> in X-Hub-Signature-256.
    let gh = format!("sha256={sig}");
    assert_eq!(
        verify(
            Forge::GitHub,
            headers(&[("X-Hub-Signature-256", &gh)]),
            body,
            b"s3cret"
        ),
        Ok(())
    );
    assert_eq!(
        verify(
            Forge::GitHub,
            headers(&[("X-Hub-Signature-256", &gh)]),
            body,
            b"other"
        ),
        Err(SignatureError::Mismatch("X-Hub-Signature-256"))
    );
    assert_eq!(
        verify(
            Forge::GitHub,
            headers(&[("X-Hub-Signature-256", &sig)]),
            body,
            b"s3cret"
        ),
        Err(SignatureError::Mismatch("X-Hub-Signature-256")),
        "the bare hex is not GitHub's form"
    );
    assert_eq!(
        verify(Forge::GitHub, headers(&[]), body, b"s3cret"),
        Err(SignatureError::Missing("X-Hub-Signature-256"))
    );
    // A body changed after signing fails.
    assert!(
        verify(
            Forge::GitHub,
            headers(&[("X-Hub-Signature-256", &gh)]),
            b"{}",
            b"s3cret"
        )
        .is_err()
    );
    // Gitea and Forgejo: the bare hex.
    for h in ["X-Gitea-Signature", "X-Forgejo-Signature"] {
        assert_eq!(
            verify(Forge::Gitea, headers(&[(h, &sig)]), body, b"s3cret"),
            Ok(())
        );
    }
    // GitLab: the secret itself.
    assert_eq!(
        verify(
            Forge::GitLab,
            headers(&[("X-Gitlab-Token", "s3cret")]),
            body,
            b"s3cret"
        ),
        Ok(())
    );
    assert!(
        verify(
            Forge::GitLab,
            headers(&[("X-Gitlab-Token", "s3cre")]),
            body,
            b"s3cret"
        )
        .is_err()
    );
    // Bitbucket Server: sha256=<hex> in X-Hub-Signature.
    assert_eq!(
        verify(
            Forge::BitbucketServer,
            headers(&[("X-Hub-Signature", &gh)]),
            body,
            b"s3cret"
        ),
        Ok(())
    );
    // A plain Git server sends no webhooks terrace takes.
    assert_eq!(
        verify(
            Forge::Git,
            headers(&[("X-Hub-Signature-256", &gh)]),
            body,
            b"s3cret"
        ),
        Err(SignatureError::NotTaken)
    );
}

#[test]
fn github_push_and_pull_request_read() {
    let push = json!({
        "ref": "refs/heads/main", "before": "a", "after": "b".repeat(40),
        "repository": {"full_name": "acme/infra", "default_branch": "main"},
        "head_commit": {"id": "b", "message": "Add network", "url": "https://gh/acme/infra/commit/b"},
        "commits": [{"added": ["net/main.tf"], "modified": ["README.md"], "removed": []},
                    {"added": [], "modified": ["net/main.tf"], "removed": ["old.tf"]}],
        "sender": {"login": "ana", "avatar_url": "https://a", "html_url": "https://gh/ana"},
        "compare": "https://gh/compare"
    });
    let body = serde_json::to_vec(&push).unwrap();
    let Ok(Event::Push(p)) = parse(Forge::GitHub, headers(&[("X-GitHub-Event", "push")]), &body)
    else {
        panic!("a push")
    };
    assert_eq!(p.repository, "acme/infra");
    assert_eq!(p.branch.as_deref(), Some("main"));
    assert_eq!(p.tag, None);
    assert_eq!(
        p.changed_files,
        Some(vec![
            "net/main.tf".into(),
            "README.md".into(),
            "old.tf".into()
        ])
    );
    assert_eq!(p.message, "Add network");
    assert_eq!(p.sender.username, "ana");
    assert_eq!(p.default_branch.as_deref(), Some("main"));

    let pr = json!({
        "action": "synchronize", "number": 7,
        "pull_request": {"html_url": "https://gh/acme/infra/pull/7", "title": "T", "body": "B",
            "head": {"sha": "c".repeat(40), "ref": "feature", "repo": {"full_name": "eve/infra"}},
            "base": {"ref": "main", "repo": {"full_name": "acme/infra"}}},
        "repository": {"full_name": "acme/infra"},
        "sender": {"login": "eve"}
    });
    let body = serde_json::to_vec(&pr).unwrap();
    let Ok(Event::PullRequest(p)) = parse(
        Forge::GitHub,
        headers(&[("X-GitHub-Event", "pull_request")]),
        &body,
    ) else {
        panic!("a pull request")
    };
    assert_eq!((p.number, p.action, p.fork), (7, PrAction::Updated, true));
    assert_eq!(p.base_branch, "main");
    assert_eq!(p.repository, "acme/infra");
    assert!(matches!(
        parse(Forge::GitHub, headers(&[("X-GitHub-Event", "ping")]), b"{}"),
        Ok(Event::Ping)
    ));
    assert!(
        parse(
            Forge::GitHub,
            headers(&[("X-GitHub-Event", "push")]),
            b"not json"
        )
        .is_err()
    );
    assert!(parse(Forge::GitHub, headers(&[]), b"{}").is_err());
}

#[test]
fn gitlab_push_tag_and_merge_request_read() {
    let push = json!({
        "ref": "refs/tags/v1.2.0", "before": "0", "after": "d", "checkout_sha": "d",
        "project": {"path_with_namespace": "grp/infra", "default_branch": "main", "web_url": "https://gl/grp/infra"},
        "commits": [], "user_username": "bo"
    });
    let body = serde_json::to_vec(&push).unwrap();
    let Ok(Event::Push(p)) = parse(
        Forge::GitLab,
        headers(&[("X-Gitlab-Event", "Tag Push Hook")]),
        &body,
    ) else {
        panic!("a push")
    };
    assert_eq!((p.tag.as_deref(), p.branch), (Some("v1.2.0"), None));
    assert_eq!(
        p.changed_files, None,
        "no commits listed: the files are unknown"
    );
    let mr = json!({
        "object_attributes": {"iid": 3, "action": "open", "url": "https://gl/mr/3", "title": "T",
            "last_commit": {"id": "e"}, "source_branch": "f", "target_branch": "main",
            "source_project_id": 1, "target_project_id": 1},
        "project": {"path_with_namespace": "grp/infra"}, "user": {"username": "bo"}
    });
    let body = serde_json::to_vec(&mr).unwrap();
    let Ok(Event::PullRequest(p)) = parse(
        Forge::GitLab,
        headers(&[("X-Gitlab-Event", "Merge Request Hook")]),
        &body,
    ) else {
        panic!("a merge request")
    };
    assert_eq!(
        (p.number, p.action, p.fork, p.head_sha.as_str()),
        (3, PrAction::Opened, false, "e")
    );
}

fn push(branch: Option<&str>, tag: Option<&str>, files: Option<&[&str]>) -> Push {
    Push {
        repository: "acme/infra".into(),
        branch: branch.map(Into::into),
        tag: tag.map(Into::into),
        sha: "f".repeat(40),
        changed_files: files.map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
        ..Push::default()
    }
}

#[test]
fn triggers_follow_the_branch_the_paths_and_the_tags() {
    let none: Vec<String> = Vec::new();
    let t = Triggers {
        branch: None,
        tags_regex: None,
        file_triggers_enabled: true,
        working_directory: Some("net"),
        trigger_prefixes: &none,
        trigger_patterns: &none,
    };
    let main = Some("main");
    assert_eq!(
        judge(&t, &push(main, None, Some(&["net/a.tf"])), main),
        Verdict::Run
    );
    assert!(matches!(
        judge(&t, &push(main, None, Some(&["docs/a.md"])), main),
        Verdict::Skip(_)
    ));
    assert!(matches!(
        judge(&t, &push(Some("dev"), None, Some(&["net/a.tf"])), main),
        Verdict::Skip(_)
    ));
    // Files unknown: the push is taken.
    assert_eq!(judge(&t, &push(main, None, None), main), Verdict::Run);
    // File triggers off: any push to the branch.
    let off = Triggers {
        file_triggers_enabled: false,
        ..t
    };
    assert_eq!(
        judge(&off, &push(main, None, Some(&["docs/a.md"])), main),
        Verdict::Run
    );
    // Prefixes add directories; patterns replace both.
    let prefixes = vec!["modules".to_owned()];
    let with_prefix = Triggers {
        trigger_prefixes: &prefixes,
        ..t
    };
    assert!(watched(&with_prefix, "modules/vpc/main.tf"));
    assert!(!watched(&with_prefix, "modulesx/a.tf"));
    let patterns = vec!["/net/**/*.tf".to_owned()];
    let with_patterns = Triggers {
        trigger_patterns: &patterns,
        ..t
    };
    assert!(watched(&with_patterns, "net/x/y.tf"));
    assert!(!watched(&with_patterns, "net/readme.md"));
    // No working directory: everything is watched.
    let root = Triggers {
        working_directory: None,
        ..t
    };
    assert!(watched(&root, "anything/at/all"));
    // Tags: with tags-regex only matching tags run, branch pushes do not.
    let tags = Triggers {
        tags_regex: Some(r"^v\d+\.\d+\.\d+$"),
        ..t
    };
    assert_eq!(
        judge(&tags, &push(None, Some("v1.0.0"), None), main),
        Verdict::Run
    );
    assert!(matches!(
        judge(&tags, &push(None, Some("nightly"), None), main),
        Verdict::Skip(_)
    ));
    assert!(matches!(
        judge(&tags, &push(main, None, Some(&["net/a.tf"])), main),
        Verdict::Skip(_)
    ));
    assert!(matches!(
        judge(&t, &push(None, Some("v1.0.0"), None), main),
        Verdict::Skip(_)
    ));
    // A deleted branch queues nothing.
    let mut deleted = push(main, None, None);
    deleted.deleted = true;
    assert!(matches!(judge(&t, &deleted, main), Verdict::Skip(_)));
}

#[test]
fn statuses_follow_the_run_and_each_forge_gets_its_words() {
    assert_eq!(
        of_run(RunState::Planning, true, None).0,
        CommitState::Pending
    );
    assert_eq!(
        of_run(RunState::PlannedAndFinished, true, Some(false)).0,
        CommitState::Success
    );
    assert_eq!(
        of_run(RunState::Planned, true, Some(true)).0,
        CommitState::Success
    );
    assert_eq!(
        of_run(RunState::Planned, false, Some(true)).0,
        CommitState::Pending
    );
    assert_eq!(
        of_run(RunState::Errored, true, None).0,
        CommitState::Failure
    );
    assert_eq!(
        of_run(RunState::Applied, false, None).0,
        CommitState::Success
    );

    let r = request(
        Forge::GitHub,
        "https://api.example/",
        "https://example",
        "acme/infra",
        "abc",
        CommitState::Success,
        "ok",
        "https://terrace/run",
        "terrace/org/ws",
    )
    .unwrap();
    assert_eq!(r.url, "https://api.example/repos/acme/infra/statuses/abc");
    assert_eq!(r.body["state"], "success");
    assert_eq!(r.body["context"], "terrace/org/ws");
    let r = request(
        Forge::GitLab,
        "https://gl/api/v4",
        "https://gl",
        "grp/sub/infra",
        "abc",
        CommitState::Failure,
        "x",
        "u",
        "c",
    )
    .unwrap();
    assert_eq!(
        r.url,
        "https://gl/api/v4/projects/grp%2Fsub%2Finfra/statuses/abc"
    );
    assert_eq!(
        (r.body["state"].as_str(), r.auth.0),
        (Some("failed"), "PRIVATE-TOKEN")
    );
    let r = request(
        Forge::BitbucketServer,
        "https://bb/rest/api/1.0",
        "https://bb",
        "PRJ/infra",
        "abc",
        CommitState::Pending,
        "x",
        "u",
        "c",
    )
    .unwrap();
    assert_eq!(r.url, "https://bb/rest/build-status/1.0/commits/abc");
    assert_eq!(r.body["state"], "INPROGRESS");
    assert!(
        request(
            Forge::Git,
            "",
            "",
            "a/b",
            "c",
            CommitState::Success,
            "",
            "",
            ""
        )
        .is_none()
    );
}

#[test]
fn repository_urls_per_forge() {
    assert_eq!(
        clone_url(Forge::GitHub, "https://github.example/", "acme/infra"),
        "https://github.example/acme/infra.git"
    );
    assert_eq!(
        clone_url(Forge::BitbucketServer, "https://bb", "PRJ/infra"),
        "https://bb/scm/prj/infra.git"
    );
    assert_eq!(
        repository_url(Forge::BitbucketServer, "https://bb", "PRJ/infra"),
        "https://bb/projects/PRJ/repos/infra"
    );
    assert_eq!(
        commit_url(Forge::GitLab, "https://gl", "g/r", "abc").as_deref(),
        Some("https://gl/g/r/-/commit/abc")
    );
    assert_eq!(Forge::of("forgejo"), Forge::Gitea);
    assert_eq!(Forge::of("github_enterprise").source(), "github");
}

#[test]
fn a_runs_origin_names_the_commit() {
    let mut i = crate::IngressAttributes {
        identifier: "acme/infra".into(),
        branch: "main".into(),
        commit_sha: "abcdef0123".into(),
        ..Default::default()
    };
    assert_eq!(origin(&i), "acme/infra@abcdef0 (main)");
    i.tag = Some("v1.0.0".into());
    assert_eq!(origin(&i), "acme/infra@abcdef0 (tag v1.0.0)");
    i.pull_request_number = Some(7);
    assert_eq!(origin(&i), "acme/infra#7@abcdef0");
}
