//! `-json` samples in the engines' real formats (crds/tests/fixtures, written after
//! Terraform's and OpenTofu's `internal/command/views` JSON test views) fed through the
//! parser as the runner feeds them, line by line.

use terrace_crds::testoutput::{
    ERROR_NO_SUMMARY, Interrupt, Line, Message, Progress, RunCounts, RunnerReport, Tally,
    TestStatus, TestSummary, parse_line,
};
use terrace_crds::testrun::TestResult;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn tally(name: &str) -> Tally {
    let mut t = Tally::default();
    // split_inclusive keeps the "\r\n" / "\n" the parser must strip.
    for line in fixture(name).split_inclusive('\n') {
        t.feed(line);
    }
    t
}

fn summary(
    status: TestStatus,
    passed: u64,
    failed: u64,
    errored: u64,
    skipped: u64,
) -> TestSummary {
    TestSummary {
        status,
        passed,
        failed,
        errored,
        skipped,
    }
}

/// Copies `terraform test -json` of a passing suite: version, abstract, progress lines
/// (starting/running/teardown with `elapsed`), completions and "Success!" summary.
#[test]
fn terraform_pass() {
    let t = tally("terraform_pass.jsonl");
    assert_eq!(t.engine, Some(("terraform".into(), "1.13.1".into())));
    assert_eq!(t.runs_total, Some(2));
    assert_eq!(
        t.runs,
        RunCounts {
            passed: 2,
            ..Default::default()
        }
    );
    assert_eq!(t.files_done, 1);
    assert_eq!(t.summary, Some(summary(TestStatus::Pass, 2, 0, 0, 0)));
    assert_eq!(t.interrupt, Interrupt::None);
    assert_eq!((t.json_lines, t.text_lines), (12, 0));
    assert_eq!(t.summary.map(|s| s.result()), Some(TestResult::Pass));
}

/// A progress line mid-run carries `elapsed` in milliseconds and no status.
#[test]
fn terraform_progress_line() {
    let text = fixture("terraform_pass.jsonl");
    let line = text.lines().nth(4).unwrap_or_default();
    assert_eq!(
        parse_line(line),
        Line::Json {
            level: Some("info".into()),
            message: Some("  \"setup\"... in progress".into()),
            payload: Message::Run {
                path: "tests/main.tftest.hcl".into(),
                run: "setup".into(),
                progress: Some(Progress::Running),
                elapsed_ms: Some(2024),
                status: None,
            },
        }
    );
}

/// Copies a failing assertion: the run fails, a diagnostic explains it, "Failure!" summary.
#[test]
fn terraform_fail() {
    let t = tally("terraform_fail.jsonl");
    assert_eq!(t.runs.passed, 1);
    assert_eq!(t.runs.failed, 1);
    assert_eq!(t.summary, Some(summary(TestStatus::Fail, 1, 1, 0, 0)));
    assert_eq!(
        t.last_error.as_deref(),
        Some("Test assertion failed: the bucket name is too long")
    );
    assert_eq!(t.summary.map(|s| s.result()), Some(TestResult::Fail));
}

/// Copies a run block that errors (the next one is skipped): summary status `error`.
#[test]
fn terraform_error() {
    let t = tally("terraform_error.jsonl");
    assert_eq!(
        t.runs,
        RunCounts {
            errored: 1,
            skipped: 1,
            ..Default::default()
        }
    );
    assert_eq!(t.summary, Some(summary(TestStatus::Error, 0, 0, 1, 1)));
    assert_eq!(t.summary.map(|s| s.result()), Some(TestResult::Fail));
}

/// Copies "Executed 0 tests, 2 skipped.": summary status `skip`, which is not a failure.
#[test]
fn terraform_skip() {
    let t = tally("terraform_skip.jsonl");
    assert_eq!(t.runs.skipped, 2);
    assert_eq!(t.summary, Some(summary(TestStatus::Skip, 0, 0, 0, 2)));
    assert_eq!(t.summary.map(|s| s.result()), Some(TestResult::Pass));
}

/// Copies a first interrupt (SIGINT): the `log` line "Interrupt received.", the running
/// block errors with "Test interrupted", the rest are skipped, the summary still comes.
#[test]
fn terraform_graceful_interrupt() {
    let t = tally("terraform_interrupt.jsonl");
    assert_eq!(t.interrupt, Interrupt::Graceful);
    assert_eq!(t.summary, Some(summary(TestStatus::Error, 1, 0, 1, 1)));
    let report = RunnerReport::from_tally(&t, Some(1), None, false);
    assert!(report.interrupted);
    assert_eq!(report.status, Some(TestStatus::Error));
}

/// Copies a second interrupt: "Two interrupts received.", a `test_interrupt` listing what
/// was left behind, and no summary — the report says so.
#[test]
fn terraform_hard_interrupt() {
    let t = tally("terraform_hard_interrupt.jsonl");
    assert_eq!(t.interrupt, Interrupt::Hard);
    assert_eq!(t.left_behind, ["aws_s3_bucket.b", "aws_s3_bucket_policy.p"]);
    assert_eq!(t.summary, None);
    let report = RunnerReport::from_tally(&t, Some(1), None, true);
    assert_eq!(report.error.as_deref(), Some(ERROR_NO_SUMMARY));
    assert!(report.interrupted);
    assert_eq!(report.summary(), None);
}

/// Copies OpenTofu's variant: `tofu` version key, `tofu.ui` module, `test_file` and
/// `test_run` without `progress` or `elapsed` (one line per finished file or run), plain
/// text between JSON lines, CRLF line ends.
#[test]
fn opentofu_format() {
    let t = tally("tofu_fail_crlf.jsonl");
    assert_eq!(t.engine, Some(("tofu".into(), "1.10.5".into())));
    assert_eq!(t.runs_total, None);
    assert_eq!(
        t.runs,
        RunCounts {
            passed: 1,
            failed: 1,
            skipped: 1,
            ..Default::default()
        }
    );
    assert_eq!(t.files_done, 2);
    assert_eq!((t.json_lines, t.text_lines), (8, 1));
    assert_eq!(t.summary, Some(summary(TestStatus::Fail, 1, 1, 0, 1)));
    assert_eq!(
        t.last_error.as_deref(),
        Some("Test assertion failed: expected 3 instances")
    );
    let line = fixture("tofu_fail_crlf.jsonl");
    let run_line = line.split_inclusive('\n').nth(3).unwrap_or_default();
    assert!(run_line.ends_with("\r\n"));
    assert_eq!(
        parse_line(run_line),
        Line::Json {
            level: Some("info".into()),
            message: Some("  \"defaults\"... pass".into()),
            payload: Message::Run {
                path: "tests/a.tftest.hcl".into(),
                run: "defaults".into(),
                progress: None,
                elapsed_ms: None,
                status: Some(TestStatus::Pass),
            },
        }
    );
}
