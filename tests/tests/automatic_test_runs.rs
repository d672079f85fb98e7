//! The automatic test run of an upload through the real API server and operator
//! (`terrace dev`, Pods not run: runs stay pending or queued, which is all that matters
//! here). SPEC.md A3 says an upload creates a run; the terraform CLI and go-tfe create
//! one themselves right after uploading. Both hold: an upload nobody follows up gets
//! exactly one automatic run once the grace period is over; an explicit run within it is
//! the only run; and when many explicit creates race the operator at the end of the grace
//! period, exactly one of them claims the upload: never two automatic runs, never none.

use std::time::Duration;

use terrace_tests::{Api, Dev, MODULE_FILES, targz};

const ORG: &str = "autoruns";

fn start(delay: &str) -> (Dev, Api, String) {
    let dev = Dev::start_with(&["--no-kubelet", "--auto-test-run-delay", delay]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let t = api.create_module(ORG, "net", "aws");
    (dev, api, t)
}

/// Creates a configuration version with auto-queue-runs and uploads to it; answers its ID.
fn upload(api: &Api, t: &str) -> String {
    let r = api.post(
        &format!("{t}/test-runs/configuration-versions"),
        &serde_json::json!({"data": {"type": "configuration-versions"}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert_eq!(r.body["data"]["attributes"]["auto-queue-runs"], true);
    let url = r.body["data"]["attributes"]["upload-url"]
        .as_str()
        .unwrap_or_default();
    let path = &url[url.find("/api/v2/").unwrap_or(0)..];
    assert_eq!(api.put_unauthenticated(path, targz(MODULE_FILES)), 200);
    r.body["data"]["id"].as_str().unwrap_or_default().to_owned()
}

/// The runs of configuration version `cv`: (automatic, explicit).
fn runs_of(api: &Api, t: &str, cv: &str) -> (usize, usize) {
    let r = api.get(&format!("{t}/test-runs?page%5Bsize%5D=100"));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let mine: Vec<_> = r.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["relationships"]["configuration-version"]["data"]["id"] == cv)
        .collect();
    let automatic = mine
        .iter()
        .filter(|d| d["attributes"]["source"] == "svc-configuration-version")
        .count();
    (automatic, mine.len() - automatic)
}

/// An upload with no explicit run: nothing within the grace period, then exactly one
/// automatic run, and still one later. An upload followed at once by an explicit run:
/// that run only, also after the grace period.
#[test]
fn one_run_per_upload_automatic_or_explicit() {
    let (dev, api, t) = start("2s");
    let lone = upload(&api, &t);
    let followed = upload(&api, &t);
    assert_eq!(api.create_test_run(&t, &followed).status, 201);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(runs_of(&api, &t, &lone), (0, 0), "within the grace period");
    let seen = dev.eventually(Duration::from_secs(20), || {
        (runs_of(&api, &t, &lone) == (1, 0)).then_some(())
    });
    assert!(seen.is_some(), "no automatic run:\n{}", dev.log());
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(runs_of(&api, &t, &lone), (1, 0));
    assert_eq!(runs_of(&api, &t, &followed), (0, 1));
    // kubectl shows the same: two TestRuns in all.
    let names = dev.kubectl_ok(&["get", "testruns", "-n", ORG, "-o", "name"]);
    assert_eq!(names.lines().count(), 2, "{names}");
}

/// Explicit creates racing the operator at the end of the grace period, for several
/// uploads: every explicit create is a run, and per upload there is at most one automatic
/// run, exactly when the operator's claim came first (the configuration version's
/// marker says which claim won).
#[test]
fn explicit_creates_racing_the_operator() {
    let (dev, api, t) = start("300ms");
    const EXPLICIT: usize = 6;
    let mut cvs = Vec::new();
    for i in 0..6u64 {
        let cv = upload(&api, &t);
        // Around the end of the grace period: a little before, at, or after it.
        std::thread::sleep(Duration::from_millis(200 + 40 * i));
        std::thread::scope(|s| {
            for _ in 0..EXPLICIT {
                s.spawn(|| assert_eq!(api.create_test_run(&t, &cv).status, 201));
            }
        });
        cvs.push(cv);
    }
    std::thread::sleep(Duration::from_secs(2));
    let objects = dev.kubectl_ok(&["get", "configurationversions", "-n", ORG, "-o", "json"]);
    let objects: serde_json::Value = serde_json::from_str(&objects).expect("JSON");
    let (mut by_operator, mut by_explicit) = (0, 0);
    for cv in &cvs {
        let (automatic, explicit) = runs_of(&api, &t, cv);
        assert_eq!(explicit, EXPLICIT, "{cv}");
        let marker = objects["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["status"]["id"] == cv.as_str())
            .map(|o| o["metadata"]["annotations"]["terrace.dev/automatic-test-run"].clone());
        match marker.as_ref().and_then(|m| m.as_str()) {
            Some("created") => {
                assert_eq!(automatic, 1, "{cv}");
                by_operator += 1;
            }
            Some("superseded") => {
                assert_eq!(automatic, 0, "{cv}");
                by_explicit += 1;
            }
            other => panic!("{cv}: marker {other:?}, {automatic} automatic runs"),
        }
    }
    eprintln!("claimed by the operator: {by_operator}, by an explicit run: {by_explicit}");
}
