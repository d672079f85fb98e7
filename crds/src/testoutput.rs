//! The machine-readable output of `terraform test -json` / `tofu test -json`, and the
//! runner's report built from it.
//!
//! Both engines write one JSON object per line (hclog's JSON format): `@level`, `@message`,
//! `@module` (`terraform.ui` / `tofu.ui`), `@timestamp`, `type`, and a payload under a key
//! named like the type (`"test_summary": {…}`). The types a test run cares about:
//! - `test_abstract`: files and run blocks found (Terraform only);
//! - `test_file` / `test_run`: progress. Terraform adds `progress` (`starting`, `running`,
//!   `teardown`, `complete`) and `elapsed`; OpenTofu writes one line per finished file or
//!   run with its `status` and neither field;
//! - `test_summary`: `status` (`pending`, `skip`, `pass`, `fail`, `error`) and the four
//!   counts — the line the run's result comes from;
//! - `test_interrupt`: resources left behind by a hard (second) interrupt;
//! - `log`: free text; a first interrupt is announced as `Interrupt received.`;
//! - `diagnostic`: warnings and errors.
//!
//! The parser never fails: a line that is not a JSON object (plain log output, a provider's
//! stray print), an unknown type or a missing or mistyped field is kept as text or as
//! defaults, because the engine's log must be relayed whatever it contains. CRLF endings
//! are accepted. [`Tally`] folds the lines into progress and the final summary, and
//! [`RunnerReport`] is what `terrace runner exec` writes as the Pod's termination message
//! and what the TestRun controller reads back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::common::cut_marked;
use crate::testrun::TestResult;

/// Status of a run block, a file or the suite, as the engines spell it (their
/// `moduletest.Status`, lower-cased). The order is the engines' precedence: a suite with
/// one failure and many passes has failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestStatus {
    Pending,
    Skip,
    Pass,
    Fail,
    Error,
}

impl TestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TestStatus::Pending => "pending",
            TestStatus::Skip => "skip",
            TestStatus::Pass => "pass",
            TestStatus::Fail => "fail",
            TestStatus::Error => "error",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => TestStatus::Pending,
            "skip" => TestStatus::Skip,
            "pass" => TestStatus::Pass,
            "fail" => TestStatus::Fail,
            "error" => TestStatus::Error,
            _ => return None,
        })
    }
}

/// Terraform's `progress` of a file or run block (absent in OpenTofu's output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Progress {
    Starting,
    Running,
    Teardown,
    Complete,
}

impl Progress {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "starting" => Progress::Starting,
            "running" => Progress::Running,
            "teardown" => Progress::Teardown,
            "complete" => Progress::Complete,
            _ => return None,
        })
    }
}

/// The `test_summary` payload: the result of the whole suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestSummary {
    pub status: TestStatus,
    pub passed: u64,
    pub failed: u64,
    pub errored: u64,
    pub skipped: u64,
}

impl TestSummary {
    /// SPEC.md's `test-status`: `pass` unless a test failed or errored. A suite that ran
    /// nothing (`pending`, every run skipped) has no failure, so it passes.
    pub fn result(&self) -> TestResult {
        match self.status {
            TestStatus::Fail | TestStatus::Error => TestResult::Fail,
            TestStatus::Pending | TestStatus::Skip | TestStatus::Pass => {
                if self.failed > 0 || self.errored > 0 {
                    TestResult::Fail
                } else {
                    TestResult::Pass
                }
            }
        }
    }

    /// The engines' rule when `status` is missing: the highest status with a count.
    fn status_from_counts(passed: u64, failed: u64, errored: u64, skipped: u64) -> TestStatus {
        if errored > 0 {
            TestStatus::Error
        } else if failed > 0 {
            TestStatus::Fail
        } else if passed > 0 {
            TestStatus::Pass
        } else if skipped > 0 {
            TestStatus::Skip
        } else {
            TestStatus::Pending
        }
    }
}

/// The typed payload of one `-json` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// `version`: first line of every run. `engine` is the key holding the version
    /// (`terraform` or `tofu`).
    Version { engine: String, version: String },
    /// `test_abstract`: test files and their run blocks (Terraform only).
    Abstract {
        files: BTreeMap<String, Vec<String>>,
    },
    /// `test_file`.
    File {
        path: String,
        progress: Option<Progress>,
        status: Option<TestStatus>,
    },
    /// `test_run`.
    Run {
        path: String,
        run: String,
        progress: Option<Progress>,
        /// Milliseconds since the run block started (Terraform only).
        elapsed_ms: Option<u64>,
        status: Option<TestStatus>,
    },
    /// `test_summary`.
    Summary(TestSummary),
    /// `test_interrupt`: a hard interrupt left these resources behind (instance addresses
    /// of `state`, `states` and `planned`).
    Interrupt { resources: Vec<String> },
    /// `diagnostic`.
    Diagnostic {
        severity: String,
        summary: String,
        detail: Option<String>,
        file: Option<String>,
        run: Option<String>,
    },
    /// `log`: free text (`@message`).
    Log,
    /// Any other type (`test_plan`, `test_state`, `test_cleanup`, `test_status`, types of
    /// future versions, …), or an object without `type` (empty string).
    Other { kind: String },
}

/// One parsed line of engine output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// A JSON object: the envelope fields and the typed payload.
    Json {
        /// `@level` (`info`, `warn`, `error`…).
        level: Option<String>,
        /// `@message`: the human text of the line.
        message: Option<String>,
        payload: Message,
    },
    /// Anything else (plain text, a JSON value that is not an object), without the line end.
    Text(String),
}

fn str_of(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn u64_of(obj: &Map<String, Value>, key: &str) -> Option<u64> {
    // Go's encoding/json writes integers; a float (as a generic JSON encoder might produce
    // for 3.0) is accepted when whole.
    match obj.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                .map(|f| f as u64)
        }),
        _ => None,
    }
}

fn obj_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    obj.get(key).and_then(Value::as_object)
}

fn instances(list: Option<&Value>, out: &mut Vec<String>) {
    for r in list.and_then(Value::as_array).into_iter().flatten() {
        if let Some(i) = r.get("instance").and_then(Value::as_str) {
            out.push(i.to_owned());
        }
    }
}

/// Parses one line of engine output (with or without its `\n` / `\r\n`). Never fails.
pub fn parse_line(line: &str) -> Line {
    let line = line.trim_end_matches(['\n', '\r']);
    let trimmed = line.trim_start();
    if !trimmed.starts_with('{') {
        return Line::Text(line.to_owned());
    }
    let obj = match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(obj)) => obj,
        _ => return Line::Text(line.to_owned()),
    };
    let kind = str_of(&obj, "type").unwrap_or_default();
    let empty = Map::new();
    let body = obj_of(&obj, &kind).unwrap_or(&empty);
    let payload = match kind.as_str() {
        "version" => {
            let engine = ["tofu", "terraform"]
                .into_iter()
                .find(|k| obj.contains_key(*k))
                .unwrap_or_default();
            Message::Version {
                engine: engine.to_owned(),
                version: str_of(&obj, engine).unwrap_or_default(),
            }
        }
        "test_abstract" => Message::Abstract {
            files: body
                .iter()
                .map(|(file, runs)| {
                    let runs = runs
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r.as_str().map(str::to_owned))
                        .collect();
                    (file.clone(), runs)
                })
                .collect(),
        },
        "test_file" => Message::File {
            path: str_of(body, "path")
                .or_else(|| str_of(&obj, "@testfile"))
                .unwrap_or_default(),
            progress: str_of(body, "progress").and_then(|p| Progress::parse(&p)),
            status: str_of(body, "status").and_then(|s| TestStatus::parse(&s)),
        },
        "test_run" => Message::Run {
            path: str_of(body, "path")
                .or_else(|| str_of(&obj, "@testfile"))
                .unwrap_or_default(),
            run: str_of(body, "run")
                .or_else(|| str_of(&obj, "@testrun"))
                .unwrap_or_default(),
            progress: str_of(body, "progress").and_then(|p| Progress::parse(&p)),
            elapsed_ms: u64_of(body, "elapsed"),
            status: str_of(body, "status").and_then(|s| TestStatus::parse(&s)),
        },
        "test_summary" => {
            let passed = u64_of(body, "passed").unwrap_or(0);
            let failed = u64_of(body, "failed").unwrap_or(0);
            let errored = u64_of(body, "errored").unwrap_or(0);
            let skipped = u64_of(body, "skipped").unwrap_or(0);
            Message::Summary(TestSummary {
                status: str_of(body, "status")
                    .and_then(|s| TestStatus::parse(&s))
                    .unwrap_or_else(|| {
                        TestSummary::status_from_counts(passed, failed, errored, skipped)
                    }),
                passed,
                failed,
                errored,
                skipped,
            })
        }
        "test_interrupt" => {
            let mut resources = Vec::new();
            instances(body.get("state"), &mut resources);
            for list in obj_of(body, "states").into_iter().flat_map(|m| m.values()) {
                instances(Some(list), &mut resources);
            }
            for p in body
                .get("planned")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(p) = p.as_str() {
                    resources.push(p.to_owned());
                }
            }
            Message::Interrupt { resources }
        }
        "diagnostic" => Message::Diagnostic {
            severity: str_of(body, "severity").unwrap_or_default(),
            summary: str_of(body, "summary").unwrap_or_default(),
            detail: str_of(body, "detail").filter(|d| !d.is_empty()),
            file: str_of(&obj, "@testfile"),
            run: str_of(&obj, "@testrun"),
        },
        "log" => Message::Log,
        _ => Message::Other { kind },
    };
    Line::Json {
        level: str_of(&obj, "@level"),
        message: str_of(&obj, "@message"),
        payload,
    }
}

/// The interrupt an engine announced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Interrupt {
    #[default]
    None,
    /// `Interrupt received.`: the engine stops gracefully, skips the remaining run blocks,
    /// destroys what it created and still prints a summary.
    Graceful,
    /// `Two interrupts received.` or a `test_interrupt` line: the engine exits at once,
    /// may leave resources behind and prints no summary.
    Hard,
}

/// Counts of finished run blocks seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    pub passed: u64,
    pub failed: u64,
    pub errored: u64,
    pub skipped: u64,
}

/// The running state of one engine invocation, fed line by line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// `terraform` or `tofu` and its version, from the `version` line.
    pub engine: Option<(String, String)>,
    /// Run blocks announced by `test_abstract` (Terraform only).
    pub runs_total: Option<u64>,
    /// Run blocks finished so far, by status (progress before the summary).
    pub runs: RunCounts,
    /// Test files finished so far.
    pub files_done: u64,
    /// The suite's summary, once printed (the last one wins).
    pub summary: Option<TestSummary>,
    /// The strongest interrupt the engine announced.
    pub interrupt: Interrupt,
    /// Resources a hard interrupt left behind.
    pub left_behind: Vec<String>,
    /// The last error diagnostic (`summary: detail`), to explain an engine that failed.
    pub last_error: Option<String>,
    /// JSON lines and text lines seen.
    pub json_lines: u64,
    pub text_lines: u64,
}

impl Tally {
    /// Parses a line and folds it in; returns the parsed line for callers that also show it.
    pub fn feed(&mut self, line: &str) -> Line {
        let parsed = parse_line(line);
        self.observe(&parsed);
        parsed
    }

    /// Folds a parsed line in.
    pub fn observe(&mut self, line: &Line) {
        let (level, message, payload) = match line {
            Line::Text(_) => {
                self.text_lines += 1;
                return;
            }
            Line::Json {
                level,
                message,
                payload,
            } => (level, message, payload),
        };
        self.json_lines += 1;
        match payload {
            Message::Version { engine, version } => {
                self.engine = Some((engine.clone(), version.clone()));
            }
            Message::Abstract { files } => {
                self.runs_total = Some(files.values().map(|r| r.len() as u64).sum());
            }
            Message::File {
                progress, status, ..
            } => {
                if is_complete(*progress, *status) {
                    self.files_done += 1;
                }
            }
            Message::Run {
                progress, status, ..
            } => {
                if is_complete(*progress, *status) {
                    match status {
                        Some(TestStatus::Pass) => self.runs.passed += 1,
                        Some(TestStatus::Fail) => self.runs.failed += 1,
                        Some(TestStatus::Error) => self.runs.errored += 1,
                        Some(TestStatus::Skip) => self.runs.skipped += 1,
                        Some(TestStatus::Pending) | None => {}
                    }
                }
            }
            Message::Summary(s) => self.summary = Some(*s),
            Message::Interrupt { resources } => {
                self.interrupt = Interrupt::Hard;
                self.left_behind.extend(resources.iter().cloned());
            }
            Message::Diagnostic {
                severity,
                summary,
                detail,
                ..
            } => {
                if severity == "error" {
                    self.last_error = Some(match detail {
                        Some(d) => format!("{summary}: {d}"),
                        None => summary.clone(),
                    });
                }
            }
            Message::Log => {
                let text = message.as_deref().unwrap_or_default().trim_start();
                if text.starts_with("Two interrupts received") {
                    self.interrupt = Interrupt::Hard;
                } else if text.starts_with("Interrupt received") {
                    self.interrupt = self.interrupt.max(Interrupt::Graceful);
                } else if level.as_deref() == Some("error") && !text.is_empty() {
                    self.last_error = Some(text.trim_end().to_owned());
                }
            }
            Message::Other { .. } => {}
        }
    }
}

/// A file or run line marks completion: Terraform's `progress: complete`, or OpenTofu's
/// line without `progress` (written once, when done) carrying a status past pending.
fn is_complete(progress: Option<Progress>, status: Option<TestStatus>) -> bool {
    match progress {
        Some(p) => p == Progress::Complete,
        None => status.is_some_and(|s| s != TestStatus::Pending),
    }
}

/// `error` of a report whose engine printed no `test_summary`.
pub const ERROR_NO_SUMMARY: &str = "engine exited without a test summary";
/// Kubernetes keeps at most this many bytes of a termination message.
pub const MAX_TERMINATION_MESSAGE_BYTES: usize = 4096;

/// What `terrace runner exec` writes as the termination message of the engine container:
/// the summary counts, or an `error`, plus how the engine ended. Read back by the TestRun
/// controller from `status.containerStatuses[].state.terminated.message`.
///
/// On the wire: `{"status":"pass","passed":2,"failed":0,"errored":0,"skipped":0,
/// "exitCode":0,"interrupted":false}` or `{"error":"engine exited without a test
/// summary","message":"…","exitCode":1,"interrupted":false}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TestStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errored: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// Why there is no result ([`ERROR_NO_SUMMARY`], or the engine could not start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Detail for people: the engine's last error diagnostic, truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The engine's exit code; absent when a signal ended it or it never started.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that ended the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// The engine was interrupted (the runner forwarded a SIGTERM, or the engine said so).
    #[serde(default)]
    pub interrupted: bool,
    /// The runner stored the whole log in the blob store (`crate::run::logs`): no log
    /// ConfigMap is needed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_stored: bool,
}

const MAX_MESSAGE_BYTES: usize = 2048;

impl RunnerReport {
    /// The report of an engine that ran: the summary if it printed one, else
    /// [`ERROR_NO_SUMMARY`] with its last error.
    pub fn from_tally(
        tally: &Tally,
        exit_code: Option<i32>,
        signal: Option<i32>,
        interrupted: bool,
    ) -> Self {
        let interrupted = interrupted || tally.interrupt != Interrupt::None;
        let mut report = RunnerReport {
            exit_code,
            signal,
            interrupted,
            ..Default::default()
        };
        match tally.summary {
            Some(s) => {
                report.status = Some(s.status);
                report.passed = Some(s.passed);
                report.failed = Some(s.failed);
                report.errored = Some(s.errored);
                report.skipped = Some(s.skipped);
            }
            None => {
                report.error = Some(ERROR_NO_SUMMARY.to_owned());
                report.message = tally
                    .last_error
                    .clone()
                    .map(|m| cut_marked(m, MAX_MESSAGE_BYTES));
            }
        }
        report
    }

    /// The report of an engine that could not be started.
    pub fn not_started(error: String) -> Self {
        RunnerReport {
            error: Some(cut_marked(error, MAX_MESSAGE_BYTES)),
            ..Default::default()
        }
    }

    /// The summary, when the report has one (a status; missing counts read as 0).
    pub fn summary(&self) -> Option<TestSummary> {
        Some(TestSummary {
            status: self.status?,
            passed: self.passed.unwrap_or(0),
            failed: self.failed.unwrap_or(0),
            errored: self.errored.unwrap_or(0),
            skipped: self.skipped.unwrap_or(0),
        })
    }

    /// The termination message: compact JSON, within Kubernetes' 4096 bytes (the free-text
    /// `message` is what gets shortened).
    pub fn to_termination_message(&self) -> String {
        let mut report = self.clone();
        loop {
            let text = serde_json::to_string(&report).unwrap_or_default();
            if text.len() <= MAX_TERMINATION_MESSAGE_BYTES {
                return text;
            }
            match report.message.take() {
                Some(m) if m.len() > 64 => {
                    let half = m.len() / 2;
                    report.message = Some(cut_marked(m, half));
                }
                _ => report.error = report.error.take().map(|e| cut_marked(e, 256)),
            }
        }
    }

    /// Reads a termination message back. Not a report (a crash message, an OOM kill's
    /// empty message): an error for the controller to turn into `errored`.
    pub fn parse(message: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(message.trim())
    }
}

/// `@module` of the lines terrace itself adds to a run's log (only when the engine could
/// not say anything: it never started).
pub const RUNNER_MODULE: &str = "terrace.runner";

/// A log line in the engine's own `-json` diagnostic shape (`type: diagnostic`), for the
/// runner to say why the engine never started: the terraform CLI streaming the log renders
/// it as "Error: SUMMARY" with DETAIL, as it renders the engine's own diagnostics.
/// `timestamp`: RFC 3339. No trailing newline.
pub fn diagnostic_line(summary: &str, detail: &str, timestamp: &str) -> String {
    serde_json::json!({
        "@level": "error",
        "@message": format!("Error: {summary}"),
        "@module": RUNNER_MODULE,
        "@timestamp": timestamp,
        "diagnostic": {"severity": "error", "summary": summary, "detail": detail},
        "type": "diagnostic",
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies Terraform's `TestJSON.Conclusion` (internal/command/views/test.go): the
    /// summary payload with every field.
    #[test]
    fn terraform_summary_line() {
        let line = r#"{"@level":"info","@message":"Failure! 2 passed, 2 failed, 2 skipped.","@module":"terraform.ui","@timestamp":"2026-01-05T10:00:00.000000Z","test_summary":{"status":"fail","passed":2,"failed":1,"errored":1,"skipped":2},"type":"test_summary"}"#;
        let Line::Json {
            level,
            message,
            payload,
        } = parse_line(line)
        else {
            panic!("not parsed as JSON");
        };
        assert_eq!(level.as_deref(), Some("info"));
        assert_eq!(
            message.as_deref(),
            Some("Failure! 2 passed, 2 failed, 2 skipped.")
        );
        assert_eq!(
            payload,
            Message::Summary(TestSummary {
                status: TestStatus::Fail,
                passed: 2,
                failed: 1,
                errored: 1,
                skipped: 2
            })
        );
    }

    /// Missing counts read as 0; a missing status follows the engines' precedence
    /// (error > fail > pass > skip > pending).
    #[test]
    fn summary_with_missing_fields() {
        let s = |l: &str| match parse_line(l) {
            Line::Json {
                payload: Message::Summary(s),
                ..
            } => s,
            other => panic!("{other:?}"),
        };
        let got = s(r#"{"type":"test_summary","test_summary":{"passed":1,"failed":1}}"#);
        assert_eq!(got.status, TestStatus::Fail);
        assert_eq!((got.errored, got.skipped), (0, 0));
        let got = s(r#"{"type":"test_summary","test_summary":{"skipped":3}}"#);
        assert_eq!(got.status, TestStatus::Skip);
        let got = s(r#"{"type":"test_summary"}"#);
        assert_eq!(got.status, TestStatus::Pending);
        let got = s(r#"{"type":"test_summary","test_summary":{"status":"pass","passed":"x"}}"#);
        assert_eq!((got.status, got.passed), (TestStatus::Pass, 0));
    }

    /// Not everything an engine prints is JSON: plain text, JSON scalars and broken JSON
    /// are text, CRLF endings are stripped.
    #[test]
    fn text_and_line_endings() {
        assert_eq!(
            parse_line("Initializing the backend...\r\n"),
            Line::Text("Initializing the backend...".into())
        );
        assert_eq!(parse_line("42"), Line::Text("42".into()));
        assert_eq!(parse_line("{\"type\":"), Line::Text("{\"type\":".into()));
        assert!(matches!(
            parse_line("{\"type\":\"log\",\"@message\":\"hi\"}\r\n"),
            Line::Json {
                payload: Message::Log,
                ..
            }
        ));
        assert!(matches!(
            parse_line(r#"{"type":"action_start","action_start":{}}"#),
            Line::Json { payload: Message::Other { kind }, .. } if kind == "action_start"
        ));
        assert!(matches!(
            parse_line(r#"{"hello":1}"#),
            Line::Json { payload: Message::Other { kind }, .. } if kind.is_empty()
        ));
    }

    /// `test-status` is pass or fail (SPEC.md); error counts as fail, an empty suite passes.
    #[test]
    fn summary_result() {
        let mk = |status, failed, errored| TestSummary {
            status,
            passed: 1,
            failed,
            errored,
            skipped: 0,
        };
        assert_eq!(mk(TestStatus::Pass, 0, 0).result(), TestResult::Pass);
        assert_eq!(mk(TestStatus::Skip, 0, 0).result(), TestResult::Pass);
        assert_eq!(mk(TestStatus::Pending, 0, 0).result(), TestResult::Pass);
        assert_eq!(mk(TestStatus::Fail, 1, 0).result(), TestResult::Fail);
        assert_eq!(mk(TestStatus::Error, 0, 1).result(), TestResult::Fail);
        assert_eq!(mk(TestStatus::Pass, 0, 1).result(), TestResult::Fail);
    }

    /// The termination message round-trips and stays within Kubernetes' 4096 bytes.
    #[test]
    fn termination_message() {
        let mut tally = Tally::default();
        tally.feed(r#"{"type":"test_summary","test_summary":{"status":"pass","passed":3,"failed":0,"errored":0,"skipped":1}}"#);
        let report = RunnerReport::from_tally(&tally, Some(0), None, false);
        let text = report.to_termination_message();
        assert_eq!(
            text,
            r#"{"status":"pass","passed":3,"failed":0,"errored":0,"skipped":1,"exitCode":0,"interrupted":false}"#
        );
        assert_eq!(RunnerReport::parse(&text).unwrap(), report);
        assert_eq!(report.summary().map(|s| s.passed), Some(3));

        let mut tally = Tally::default();
        tally.feed(&format!(
            r#"{{"type":"diagnostic","@level":"error","diagnostic":{{"severity":"error","summary":"Boom","detail":"{}"}}}}"#,
            "é".repeat(5000)
        ));
        let report = RunnerReport::from_tally(&tally, Some(1), None, false);
        let text = report.to_termination_message();
        assert!(
            text.len() <= MAX_TERMINATION_MESSAGE_BYTES,
            "{}",
            text.len()
        );
        let back = RunnerReport::parse(&text).unwrap();
        assert_eq!(back.error.as_deref(), Some(ERROR_NO_SUMMARY));
        assert!(
            back.message
                .as_deref()
                .unwrap_or_default()
                .starts_with("Boom: é")
        );
        assert_eq!(back.summary(), None);
        assert!(RunnerReport::parse("OOMKilled").is_err());
    }

    /// The runner's own diagnostic parses as the engine's diagnostics do (the CLI
    /// renders it; a tally records it as the last error).
    #[test]
    fn runner_diagnostic_line() {
        let line = diagnostic_line(
            "Engine not found",
            "the command \"tofu\" was not found",
            "2026-01-01T00:00:00Z",
        );
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(v["type"], "diagnostic");
        assert_eq!(v["@message"], "Error: Engine not found");
        assert_eq!(v["diagnostic"]["severity"], "error");
        let mut tally = Tally::default();
        tally.feed(&line);
        assert_eq!(
            tally.last_error.as_deref(),
            Some("Engine not found: the command \"tofu\" was not found")
        );
    }
}

/// One test file's result as the web view shows it: its status and each run block's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileResult {
    pub path: String,
    pub status: String,
    /// Run blocks in the order they first appear, with their status.
    pub runs: Vec<(String, String)>,
}

/// The per-file, per-run-block results in a test run's log (`-json` lines; the latest
/// status of each wins, `pending` until one is given).
pub fn results(log: &str) -> Vec<FileResult> {
    let mut files: Vec<FileResult> = Vec::new();
    fn file<'a>(files: &'a mut Vec<FileResult>, path: &str) -> &'a mut FileResult {
        if let Some(i) = files.iter().position(|f| f.path == path) {
            return &mut files[i];
        }
        files.push(FileResult {
            path: path.to_owned(),
            status: "pending".to_owned(),
            runs: Vec::new(),
        });
        files.last_mut().expect("just pushed")
    }
    for line in log.lines() {
        let Line::Json { payload, .. } = parse_line(line) else {
            continue;
        };
        match payload {
            Message::Abstract { files: found } => {
                for (path, runs) in found {
                    let f = file(&mut files, &path);
                    for r in runs {
                        if !f.runs.iter().any(|(n, _)| *n == r) {
                            f.runs.push((r, "pending".to_owned()));
                        }
                    }
                }
            }
            Message::File { path, status, .. } => {
                let f = file(&mut files, &path);
                if let Some(s) = status {
                    f.status = s.as_str().to_owned();
                }
            }
            Message::Run {
                path, run, status, ..
            } => {
                let f = file(&mut files, &path);
                let at = match f.runs.iter().position(|(n, _)| *n == run) {
                    Some(i) => i,
                    None => {
                        f.runs.push((run, "pending".to_owned()));
                        f.runs.len() - 1
                    }
                };
                if let Some(s) = status {
                    f.runs[at].1 = s.as_str().to_owned();
                }
            }
            _ => {}
        }
    }
    files
}

#[cfg(test)]
mod results_tests {
    use super::*;

    #[test]
    fn files_and_run_blocks_keep_their_latest_status() {
        let log = [
            r#"{"@level":"info","@message":"Found 1 file and 2 run blocks","type":"test_abstract","test_abstract":{"tests/a.tftest.hcl":["one","two"]}}"#,
            r#"{"@level":"info","@message":"tests/a.tftest.hcl... in progress","type":"test_file","test_file":{"path":"tests/a.tftest.hcl","progress":"starting"}}"#,
            r#"{"@level":"info","@message":"  \"one\"... pass","type":"test_run","test_run":{"path":"tests/a.tftest.hcl","run":"one","progress":"complete","status":"pass"}}"#,
            r#"{"@level":"info","@message":"  \"two\"... fail","type":"test_run","test_run":{"path":"tests/a.tftest.hcl","run":"two","progress":"complete","status":"fail"}}"#,
            r#"{"@level":"info","@message":"tests/a.tftest.hcl... fail","type":"test_file","test_file":{"path":"tests/a.tftest.hcl","progress":"complete","status":"fail"}}"#,
            "plain text from a provider",
            r#"{"@level":"info","@message":"tests/b.tftest.hcl... pass","type":"test_file","test_file":{"path":"tests/b.tftest.hcl","status":"pass"}}"#,
        ]
        .join("\n");
        let got = results(&log);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].status, "fail");
        assert_eq!(
            got[0].runs,
            [("one".into(), "pass".into()), ("two".into(), "fail".into())]
        );
        assert_eq!(got[1].path, "tests/b.tftest.hcl");
        assert_eq!(got[1].status, "pass");
        assert!(results("no json at all").is_empty());
    }
}
