//! Bounded history (issue 31, docs/runs.md "History"): with the organization's
//! `settings.history` at 3 runs and 2 test runs, the operator archives older final ones
//! into the blob store and deletes their objects; the API still lists every run in the
//! same order, shows an archived run, its plan and its log, and the same for test runs;
//! deleting the workspace deletes its archive.

use std::time::Duration;

use serde_json::{Value, json};
use terrace_tests::{Api, Dev, write_engine};

const ORG: &str = "histories";

/// A fake terraform whose plan and test print a few numbered lines.
const ENGINE: &str = r#"#!/bin/sh
case "$1" in
  version) if [ "$2" = "-json" ]; then echo '{"terraform_version":"1.11.4"}'; else echo 'Terraform v1.11.4'; fi ;;
  init) exit 0 ;;
  plan)
    for a in "$@"; do case "$a" in -out=*) echo plan > "${a#-out=}" ;; esac; done
    echo "planned line one"; echo "planned line two" ;;
  show) echo '{"format_version":"1.2","resource_changes":[]}' ;;
  providers) echo '{"format_version":"1.0","provider_schemas":{}}' ;;
  test)
    echo "tested line one"
    echo '{"@level":"info","@message":"Success! 1 passed, 0 failed.","@module":"tofu.ui","type":"test_summary","test_summary":{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0}}' ;;
esac
"#;

fn status(v: &Value) -> String {
    v["attributes"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn ids(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn live_objects(dev: &Dev, kind: &str) -> usize {
    dev.kubectl_ok(&["get", kind, "-n", ORG, "-o", "name"])
        .lines()
        .count()
}

#[test]
fn older_runs_are_archived_and_still_served() {
    let dir = tempfile::tempdir().expect("engine dir");
    let engine = write_engine(dir.path(), ENGINE);
    let dev = Dev::start_with(&["--engine", &engine]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    dev.kubectl_ok(&[
        "patch",
        "organizations.terrace.dev",
        ORG,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"settings":{"history":{"runs":3,"testRuns":2}}}}"#,
    ]);
    let ws = api.create_workspace(ORG, json!({"name": "busy"}));
    let cv = api.upload_config(&ws, &[("main.tf", "# fake\n")]);
    let mut created = Vec::new();
    for _ in 0..8 {
        let run = api.plan_only_run(&ws, &cv, Duration::from_secs(120));
        let id = run["id"].as_str().unwrap_or_default().to_owned();
        created.push(id);
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();

    // The cluster keeps 3 runs; the rest are archived.
    dev.eventually(Duration::from_secs(60), || {
        (live_objects(&dev, "runs") == 3).then_some(())
    })
    .unwrap_or_else(|| panic!("runs in the cluster: {}", live_objects(&dev, "runs")));
    let archived = dev.kubectl_ok(&[
        "get",
        "workspaces",
        "-n",
        ORG,
        "-o",
        "jsonpath={.items[0].status.archivedRuns}",
    ]);
    assert_eq!(archived, "5");

    // The API lists all 8, newest first, paged.
    let list = api.get(&format!("/api/v2/workspaces/{ws}/runs?page[size]=100"));
    assert_eq!(list.status, 200);
    assert_eq!(ids(&list.body), newest_first);
    assert_eq!(list.body["meta"]["pagination"]["total-count"], 8);
    let page2 = api.get(&format!(
        "/api/v2/workspaces/{ws}/runs?page[size]=3&page[number]=2"
    ));
    assert_eq!(ids(&page2.body), newest_first[3..6].to_vec());
    let filtered = api.get(&format!(
        "/api/v2/workspaces/{ws}/runs?filter[status]=planned_and_finished&page[size]=100"
    ));
    assert_eq!(ids(&filtered.body).len(), 8);

    // An archived run shows as before, with its plan and its log.
    let oldest = &created[0];
    let r = api.get(&format!("/api/v2/runs/{oldest}?include=plan"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(status(&r.body["data"]), "planned_and_finished");
    let plan_id = r.body["data"]["relationships"]["plan"]["data"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let plan = api.get(&format!("/api/v2/plans/{plan_id}"));
    assert_eq!(plan.status, 200, "{:?}", plan.body);
    assert_eq!(plan.body["data"]["attributes"]["status"], "finished");
    let url = plan.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (st, log) = api.get_text(&url[url.find("/api/v2/").expect("log path")..]);
    assert_eq!(st, 200);
    assert!(log.contains("planned line two"), "{log:?}");
    assert!(log.ends_with('\u{3}'), "{log:?}");
    assert_eq!(api.get("/api/v2/runs/run-NoSuchRun0000000x").status, 404);

    // Test runs: 2 kept per module.
    let t = api.create_module(ORG, "net", "aws");
    let mut tests = Vec::new();
    for _ in 0..5 {
        // Test runs list by creation time (seconds), then name: a second apart, their
        // order is the order of creation.
        std::thread::sleep(Duration::from_millis(1100));
        let cv = api.uploaded_cv(&t);
        let r = api.create_test_run(&t, &cv);
        assert_eq!(r.status, 201, "{:?}", r.body);
        let id = r.body["data"]["id"].as_str().unwrap_or_default().to_owned();
        dev.eventually(Duration::from_secs(120), || {
            let s = status(&api.get(&format!("{t}/test-runs/{id}")).body["data"]);
            (s == "finished").then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "test run {id} never finished: {:?}\nlist: {:?}\nlive: {}\nlog: {}",
                api.get(&format!("{t}/test-runs/{id}")).body,
                ids(&api.get(&format!("{t}/test-runs?page[size]=100")).body),
                dev.kubectl_ok(&["get", "testruns", "-n", ORG, "-o", "wide", "--show-labels"]),
                dev.log()
                    .lines()
                    .filter(|l| l.contains("history") || l.contains("ERROR") || l.contains("WARN"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
        tests.push(id);
    }
    dev.eventually(Duration::from_secs(60), || {
        (live_objects(&dev, "testruns") == 2).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "test runs in the cluster: {}",
            live_objects(&dev, "testruns")
        )
    });
    let list = api.get(&format!("{t}/test-runs?page[size]=100"));
    assert_eq!(
        ids(&list.body),
        tests.iter().rev().cloned().collect::<Vec<_>>()
    );
    let old = api.get(&format!("{t}/test-runs/{}", tests[0]));
    assert_eq!(old.status, 200, "{:?}", old.body);
    assert_eq!(status(&old.body["data"]), "finished");
    let url = old.body["data"]["attributes"]["log-read-url"]
        .as_str()
        .unwrap_or_default();
    let (st, log) = api.get_text(&url[url.find("/api/v2/").expect("log path")..]);
    assert_eq!(st, 200);
    assert!(log.contains("tested line one"), "{log:?}");

    // Deleting the workspace deletes its archive (its blobs are owned by it).
    let blob = terrace_crds::blobs::blob_name(&terrace_crds::history::manifest_key(
        terrace_crds::history::HistoryKind::Runs,
        &ws,
    ));
    let selector = format!("{}={blob}", terrace_crds::blobs::LABEL_BLOB);
    let secrets = |dev: &Dev| {
        dev.kubectl_ok(&["get", "secrets", "-n", ORG, "-l", &selector, "-o", "name"])
            .lines()
            .count()
    };
    assert_eq!(secrets(&dev), 1, "the manifest is stored");
    assert_eq!(
        api.call("DELETE", &format!("/api/v2/workspaces/{ws}"), None)
            .status,
        204
    );
    dev.eventually(Duration::from_secs(60), || {
        (secrets(&dev) == 0).then_some(())
    })
    .expect("the archive goes with its workspace");
    assert_eq!(api.get(&format!("/api/v2/runs/{oldest}")).status, 404);
}
