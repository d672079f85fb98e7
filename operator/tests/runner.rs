//! `terrace runner` through its library functions: `exec` against fake engines (shell
//! scripts printing the engines' real `-json` format, see crds/tests/fixtures) and
//! `fetch`/`unpack` against archives served by a tiny local HTTP server.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use terrace_crds::testoutput::{ERROR_NO_SUMMARY, RunnerReport, TestStatus};
use terrace_operator::runner::{
    ExecOptions, FetchLimits, RunnerError, Signals, UnpackStats, exec, fetch, unpack,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VERSION: &str = r#"{"@level":"info","@message":"OpenTofu 1.10.5","@module":"tofu.ui","@timestamp":"2026-01-05T10:00:00.000001Z","tofu":"1.10.5","type":"version","ui":"1.2"}"#;
const RUN_PASS: &str = r#"{"@level":"info","@message":"  \"defaults\"... pass","@module":"tofu.ui","@testfile":"tests/a.tftest.hcl","@testrun":"defaults","@timestamp":"2026-01-05T10:00:01.000100Z","test_run":{"path":"tests/a.tftest.hcl","run":"defaults","status":"pass"},"type":"test_run"}"#;
const SUMMARY_PASS: &str = r#"{"@level":"info","@message":"Success! 2 passed, 0 failed.","@module":"tofu.ui","@timestamp":"2026-01-05T10:00:02.000000Z","test_summary":{"status":"pass","passed":2,"failed":0,"errored":0,"skipped":0},"type":"test_summary"}"#;
const SUMMARY_FAIL: &str = r#"{"@level":"info","@message":"Failure! 1 passed, 1 failed.","@module":"tofu.ui","@timestamp":"2026-01-05T10:00:02.000000Z","test_summary":{"status":"fail","passed":1,"failed":1,"errored":0,"skipped":0},"type":"test_summary"}"#;
const DIAG_ERROR: &str = r#"{"@level":"error","@message":"Error: Failed to load plugin schemas","@module":"tofu.ui","@timestamp":"2026-01-05T10:00:01.000000Z","diagnostic":{"severity":"error","summary":"Failed to load plugin schemas","detail":"provider registry.opentofu.org/hashicorp/aws is not available"},"type":"diagnostic"}"#;
const LOG_INTERRUPT: &str = r#"{"@level":"info","@message":"\nInterrupt received.\nPlease wait for OpenTofu to exit or data loss may occur.\nGracefully shutting down...\n","@module":"tofu.ui","@timestamp":"2026-01-05T10:00:03.000000Z","type":"log"}"#;
const RUN_SKIP: &str = r#"{"@level":"info","@message":"  \"later\"... skip","@module":"tofu.ui","@testfile":"tests/a.tftest.hcl","@testrun":"later","@timestamp":"2026-01-05T10:00:03.100000Z","test_run":{"path":"tests/a.tftest.hcl","run":"later","status":"skip"},"type":"test_run"}"#;
const SUMMARY_INTERRUPTED: &str = r#"{"@level":"info","@message":"Success! 1 passed, 0 failed, 1 skipped.","@module":"tofu.ui","@timestamp":"2026-01-05T10:00:03.200000Z","test_summary":{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":1},"type":"test_summary"}"#;
const TEST_INTERRUPT: &str = r#"{"@level":"error","@message":"OpenTofu was interrupted during test execution, and may not have performed the expected cleanup operations.","@module":"tofu.ui","@testfile":"tests/a.tftest.hcl","@timestamp":"2026-01-05T10:00:03.000000Z","test_interrupt":{"state":[{"instance":"aws_s3_bucket.b"}]},"type":"test_interrupt"}"#;

/// Writes an executable `/bin/sh` script into `dir`.
fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("engine.sh");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "#!/bin/sh\n{body}").unwrap();
    drop(f);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `echo` of a JSON line, safely quoted for sh.
fn say(line: &str) -> String {
    format!("printf '%s\\n' '{}'\n", line.replace('\'', r"'\''"))
}

struct Ran {
    report: RunnerReport,
    out: String,
    termination: String,
    log: String,
    stderr: String,
}

async fn run_engine(dir: &Path, engine: &Path, signals: Option<Signals>) -> Ran {
    let (tx, rx) = Signals::channel();
    let tx = signals.unwrap_or(tx);
    let opts = ExecOptions {
        command: vec![engine.display().to_string(), "test".into(), "-json".into()],
        termination_message_path: Some(dir.join("termination-log")),
        log_file: Some(dir.join("engine.log")),
        stderr_file: Some(dir.join("engine.stderr")),
    };
    let mut out = Vec::new();
    let report = tokio::time::timeout(Duration::from_secs(30), exec(&opts, rx, &mut out))
        .await
        .expect("exec did not finish")
        .unwrap();
    drop(tx);
    Ran {
        report,
        out: String::from_utf8(out).unwrap(),
        termination: std::fs::read_to_string(dir.join("termination-log")).unwrap(),
        log: std::fs::read_to_string(dir.join("engine.log")).unwrap_or_default(),
        stderr: std::fs::read_to_string(dir.join("engine.stderr")).unwrap_or_default(),
    }
}

/// Copies DESIGN.md §3 step 3: a passing `tofu test -json` — its stdout lines are relayed,
/// unchanged and in order, to the container log and the log file (issue 13: the stored
/// log is exactly the engine's `-json` lines, which the CLI renders); its stderr goes to
/// its own file, never between them; the counts become the termination message.
#[tokio::test]
async fn exec_pass_writes_summary() {
    let dir = tempfile::tempdir().unwrap();
    let engine = script(
        dir.path(),
        &format!(
            "[ \"$1 $2\" = 'test -json' ] || exit 9\n{}echo 'Initializing plugins...' >&2\n{}{}",
            say(VERSION),
            say(RUN_PASS),
            say(SUMMARY_PASS)
        ),
    );
    let ran = run_engine(dir.path(), &engine, None).await;
    assert_eq!(
        ran.termination,
        r#"{"status":"pass","passed":2,"failed":0,"errored":0,"skipped":0,"exitCode":0,"interrupted":false}"#
    );
    assert_eq!(ran.report.status, Some(TestStatus::Pass));
    assert_eq!(
        ran.out,
        format!("{VERSION}\n{RUN_PASS}\n{SUMMARY_PASS}\n"),
        "exactly the stdout lines"
    );
    assert_eq!(ran.log, ran.out);
    assert_eq!(ran.stderr, "Initializing plugins...\n");
}

/// A failing suite is a result, not a runner failure: status fail, the engine's exit code.
#[tokio::test]
async fn exec_fail_reports_counts_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let engine = script(
        dir.path(),
        &format!("{}{}exit 1", say(VERSION), say(SUMMARY_FAIL)),
    );
    let ran = run_engine(dir.path(), &engine, None).await;
    let report = RunnerReport::parse(&ran.termination).unwrap();
    assert_eq!(report.status, Some(TestStatus::Fail));
    assert_eq!((report.passed, report.failed), (Some(1), Some(1)));
    assert_eq!(report.exit_code, Some(1));
    assert_eq!(report.error, None);
}

/// Copies issue 5: "an engine that exits without a summary → errored with a message saying
/// which": the termination message carries the error and the engine's last diagnostic.
#[tokio::test]
async fn exec_without_summary_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let engine = script(
        dir.path(),
        &format!("{}{}exit 1", say(VERSION), say(DIAG_ERROR)),
    );
    let ran = run_engine(dir.path(), &engine, None).await;
    let report = RunnerReport::parse(&ran.termination).unwrap();
    assert_eq!(report.error.as_deref(), Some(ERROR_NO_SUMMARY));
    assert_eq!(
        report.message.as_deref(),
        Some(
            "Failed to load plugin schemas: provider registry.opentofu.org/hashicorp/aws is not available"
        )
    );
    assert_eq!(report.exit_code, Some(1));
    assert!(!report.interrupted);
    assert_eq!(report.summary(), None);
}

/// An engine that cannot be started is reported, not a panic or a hang: the report and
/// the log (one diagnostic line in the engine's `-json` shape, which the CLI renders)
/// name the missing command.
#[tokio::test]
async fn exec_missing_engine() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-tofu");
    let ran = run_engine(dir.path(), &missing, None).await;
    let report = RunnerReport::parse(&ran.termination).unwrap();
    let error = report.error.clone().unwrap_or_default();
    assert!(error.starts_with("Engine not found"), "{report:?}");
    assert!(error.contains(&missing.display().to_string()), "{error}");
    assert_eq!(report.exit_code, None);
    assert_eq!(ran.out.lines().count(), 1, "{}", ran.out);
    let line: serde_json::Value = serde_json::from_str(ran.out.trim()).unwrap();
    assert_eq!(line["type"], "diagnostic");
    assert_eq!(line["diagnostic"]["summary"], "Engine not found");
    assert!(
        line["diagnostic"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("no-such-tofu")),
        "{line}"
    );
    assert_eq!(ran.log, ran.out);
}

/// An engine that crashes without a summary or an error diagnostic: its stderr (a
/// panic) explains the errored run, and stays out of the log.
#[tokio::test]
async fn exec_crash_reports_the_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let engine = script(
        dir.path(),
        &format!(
            "{}echo 'panic: runtime error: index out of range' >&2\necho 'goroutine 1 [running]:' >&2\nexit 2",
            say(VERSION)
        ),
    );
    let ran = run_engine(dir.path(), &engine, None).await;
    assert_eq!(ran.report.error.as_deref(), Some(ERROR_NO_SUMMARY));
    assert_eq!(
        ran.report.message.as_deref(),
        Some("panic: runtime error: index out of range\ngoroutine 1 [running]:")
    );
    assert_eq!(ran.out, format!("{VERSION}\n"));
}

/// An engine that exits while a child it left behind (a provider plugin) still holds its
/// output open: the runner reports after a short drain instead of waiting for the child.
#[tokio::test]
async fn exec_does_not_wait_for_leftover_children() {
    let dir = tempfile::tempdir().unwrap();
    let engine = script(
        dir.path(),
        &format!("sleep 60 &\n{}{}exit 0", say(VERSION), say(SUMMARY_PASS)),
    );
    let started = std::time::Instant::now();
    let ran = run_engine(dir.path(), &engine, None).await;
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(ran.report.status, Some(TestStatus::Pass));
    assert_eq!(ran.report.exit_code, Some(0));
}

/// Waits for the fake engine to say its INT trap is installed.
async fn wait_for(path: &Path) {
    for _ in 0..300 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} never appeared", path.display());
}

/// Copies DESIGN.md §3 step 4 and the kubelet's graceful deletion: SIGTERM to the runner
/// becomes one SIGINT for the engine, which stops gracefully, prints its summary and exits;
/// the runner waited for it and reports the run as interrupted.
#[tokio::test]
async fn exec_sigterm_becomes_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let ints = dir.path().join("ints");
    let engine = script(
        dir.path(),
        &format!(
            "on_int() {{\nkill $SLEEP\necho int >> '{ints}'\n{}{}{}exit 0\n}}\ntrap on_int INT\n{}{}sleep 30 &\nSLEEP=$!\ntouch '{ready}'\nwait $SLEEP\nexit 7",
            say(LOG_INTERRUPT),
            say(RUN_SKIP),
            say(SUMMARY_INTERRUPTED),
            say(VERSION),
            say(RUN_PASS),
            ints = ints.display(),
            ready = ready.display(),
        ),
    );
    let (tx, rx) = Signals::channel();
    let opts = ExecOptions {
        command: vec![engine.display().to_string()],
        termination_message_path: Some(dir.path().join("termination-log")),
        log_file: None,
        stderr_file: None,
    };
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        let r = exec(&opts, rx, &mut out).await;
        (r, out)
    });
    wait_for(&ready).await;
    tx.terminate();
    let (report, out) = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the runner did not return after the engine's graceful stop")
        .unwrap();
    let report = report.unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("Interrupt received."), "{out}");
    assert_eq!(std::fs::read_to_string(&ints).unwrap(), "int\n");
    assert!(report.interrupted);
    assert_eq!(report.status, Some(TestStatus::Pass));
    assert_eq!(report.skipped, Some(1));
    assert_eq!(report.exit_code, Some(0));
    let written =
        RunnerReport::parse(&std::fs::read_to_string(dir.path().join("termination-log")).unwrap())
            .unwrap();
    assert_eq!(written, report);
}

/// A hard interrupt: the engine prints `test_interrupt` and exits without a summary; the
/// report is an error that says the run was interrupted.
#[tokio::test]
async fn exec_interrupt_without_summary() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let engine = script(
        dir.path(),
        &format!(
            "on_int() {{\nkill $SLEEP\n{}exit 130\n}}\ntrap on_int INT\n{}sleep 30 &\nSLEEP=$!\ntouch '{ready}'\nwait $SLEEP\nexit 7",
            say(TEST_INTERRUPT),
            say(VERSION),
            ready = ready.display(),
        ),
    );
    let (tx, rx) = Signals::channel();
    let opts = ExecOptions {
        command: vec![engine.display().to_string()],
        termination_message_path: None,
        log_file: None,
        stderr_file: None,
    };
    let task = tokio::spawn(async move { exec(&opts, rx, &mut tokio::io::sink()).await });
    wait_for(&ready).await;
    tx.terminate();
    let report = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("runner hung")
        .unwrap()
        .unwrap();
    assert_eq!(report.error.as_deref(), Some(ERROR_NO_SUMMARY));
    assert!(report.interrupted);
    assert_eq!(report.exit_code, Some(130));
}

// ---- fetch / unpack ----

enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    Hardlink(&'a str, &'a str),
}

/// Builds a tar.gz, writing names raw so that malicious paths (which `tar::Builder`
/// refuses) can be produced.
fn targz(entries: &[Entry<'_>]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for e in entries {
        let mut h = tar::Header::new_gnu();
        let (name, data, kind, link): (&str, &[u8], tar::EntryType, Option<&str>) = match e {
            Entry::Dir(n) => (n, b"", tar::EntryType::Directory, None),
            Entry::File(n, d) => (n, d, tar::EntryType::Regular, None),
            Entry::Symlink(n, t) => (n, b"", tar::EntryType::Symlink, Some(t)),
            Entry::Hardlink(n, t) => (n, b"", tar::EntryType::Link, Some(t)),
        };
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(t) = link {
            h.as_old_mut().linkname[..t.len()].copy_from_slice(t.as_bytes());
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(if kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn unpack_into(dir: &Path, archive: &[u8]) -> Result<UnpackStats, RunnerError> {
    unpack(archive, &dir.join("ws"), &FetchLimits::default())
}

/// A configuration archive as `go-slug` packs it (`./`, directories, files, a link to a
/// sibling) unpacks completely.
#[test]
fn unpack_good_archive() {
    let dir = tempfile::tempdir().unwrap();
    let archive = targz(&[
        Entry::Dir("./"),
        Entry::File("main.tf", b"resource \"null_resource\" \"a\" {}\n"),
        Entry::Dir("tests/"),
        Entry::File("tests/main.tftest.hcl", b"run \"a\" {}\n"),
        Entry::Dir("modules/"),
        Entry::Symlink("modules/shared.tf", "../main.tf"),
    ]);
    let stats = unpack_into(dir.path(), &archive).unwrap();
    assert_eq!(
        stats,
        UnpackStats {
            files: 2,
            directories: 2,
            symlinks: 1,
            bytes: 43
        }
    );
    let ws = dir.path().join("ws");
    assert_eq!(
        std::fs::read_to_string(ws.join("tests/main.tftest.hcl")).unwrap(),
        "run \"a\" {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("modules/shared.tf")).unwrap(),
        "resource \"null_resource\" \"a\" {}\n"
    );
}

fn assert_unsafe(result: Result<UnpackStats, RunnerError>, reason_part: &str) {
    match result {
        Err(RunnerError::UnsafeEntry { reason, .. }) => {
            assert!(reason.contains(reason_part), "{reason}")
        }
        other => panic!("expected an unsafe entry error, got {other:?}"),
    }
}

/// Path traversal (CVE-2018-1002200-style "zip slip"): `..`, absolute paths, links leading
/// out (directly, or through a link that already points back up), hard links. Nothing is
/// written outside the destination.
#[test]
fn unpack_rejects_traversal() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<Entry<'_>>, &str)> = vec![
        (vec![Entry::File("../evil", b"x")], "`..`"),
        (vec![Entry::File("a/../../evil", b"x")], "`..`"),
        (vec![Entry::File("/tmp/evil-abs", b"x")], "absolute"),
        (vec![Entry::Symlink("up", "../..")], "outside"),
        (vec![Entry::Symlink("etc", "/etc")], "outside"),
        (
            vec![
                Entry::Symlink("here", "."),
                Entry::Symlink("here/l", "../evil"),
            ],
            "outside",
        ),
        (vec![Entry::Hardlink("h", "/etc/passwd")], "hard links"),
    ];
    for (i, (entries, reason)) in cases.into_iter().enumerate() {
        let sub = dir.path().join(i.to_string());
        std::fs::create_dir_all(&sub).unwrap();
        assert_unsafe(unpack_into(&sub, &targz(&entries)), reason);
        assert!(!sub.join("evil").exists(), "case {i}");
    }
    assert!(!Path::new("/tmp/evil-abs").exists());
}

/// Limits stop size and entry-count bombs; a corrupt body is an unpack error.
#[test]
fn unpack_limits_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let limits = FetchLimits {
        max_unpacked_bytes: 10,
        max_entries: 2,
        ..Default::default()
    };
    let big = targz(&[Entry::File("big", &[b'a'; 11])]);
    assert!(matches!(
        unpack(&big[..], &dir.path().join("a"), &limits),
        Err(RunnerError::TooLarge {
            what: "unpacked size",
            ..
        })
    ));
    let many = targz(&[Entry::Dir("a/"), Entry::Dir("b/"), Entry::Dir("c/")]);
    assert!(matches!(
        unpack(&many[..], &dir.path().join("b"), &limits),
        Err(RunnerError::TooLarge {
            what: "entry count",
            ..
        })
    ));
    assert!(matches!(
        unpack(&b"not gzip at all"[..], &dir.path().join("c"), &limits),
        Err(RunnerError::Unpack(_))
    ));
}

/// Serves one response to one request; returns the URL and the request head received.
async fn serve_once(
    status: &'static str,
    body: Vec<u8>,
) -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/object/obj-1", listener.local_addr().unwrap());
    let handle = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = sock.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        sock.write_all(reply.as_bytes()).await.unwrap();
        sock.write_all(&body).await.unwrap();
        sock.shutdown().await.ok();
        String::from_utf8_lossy(&head).into_owned()
    });
    (url, handle)
}

/// Copies DESIGN.md §3 step 2: the init container downloads the archive with the one-time
/// token as a bearer token and unpacks it.
#[tokio::test]
async fn fetch_downloads_and_unpacks() {
    let dir = tempfile::tempdir().unwrap();
    let archive = targz(&[Entry::File("main.tf", b"# ok\n")]);
    let (url, server) = serve_once("200 OK", archive).await;
    let dest = dir.path().join("workspace");
    let d = dest.clone();
    let stats = tokio::task::spawn_blocking(move || {
        fetch(&url, "tok-123", &d, None, &FetchLimits::default())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(stats.files, 1);
    assert_eq!(
        std::fs::read_to_string(dest.join("main.tf")).unwrap(),
        "# ok\n"
    );
    let head = server.await.unwrap().to_ascii_lowercase();
    assert!(
        head.starts_with("get /v1/object/obj-1 http/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nauthorization: bearer tok-123\r\n"),
        "{head}"
    );
}

/// A served archive with a traversal entry is refused, and nothing lands outside.
#[tokio::test]
async fn fetch_rejects_traversal() {
    let dir = tempfile::tempdir().unwrap();
    let archive = targz(&[Entry::File("ok.tf", b""), Entry::File("../escaped", b"x")]);
    let (url, _server) = serve_once("200 OK", archive).await;
    let dest = dir.path().join("workspace");
    let result =
        tokio::task::spawn_blocking(move || fetch(&url, "t", &dest, None, &FetchLimits::default()))
            .await
            .unwrap();
    assert_unsafe(result, "`..`");
    assert!(!dir.path().join("escaped").exists());
}

/// A used or expired capability URL answers 404/401: the fetch fails with the status, and
/// the error does not show the token.
#[tokio::test]
async fn fetch_http_error() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _server) = serve_once("404 Not Found", b"gone".to_vec()).await;
    let dest = dir.path().join("workspace");
    let err = tokio::task::spawn_blocking(move || {
        fetch(&url, "secret-token", &dest, None, &FetchLimits::default())
    })
    .await
    .unwrap()
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RunnerError::Download(_)), "{text}");
    assert!(text.contains("404"), "{text}");
    assert!(!text.contains("secret-token"), "{text}");
}

/// A body above the archive limit is cut off.
#[tokio::test]
async fn fetch_archive_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let archive = targz(&[Entry::File("big", &vec![7u8; 200_000])]);
    let (url, _server) = serve_once("200 OK", archive).await;
    let dest = dir.path().join("workspace");
    let limits = FetchLimits {
        max_archive_bytes: 100,
        ..Default::default()
    };
    let err = tokio::task::spawn_blocking(move || fetch(&url, "t", &dest, None, &limits))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(
            err,
            RunnerError::TooLarge {
                what: "archive size",
                ..
            }
        ),
        "{err}"
    );
}

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    runner: terrace_operator::runner::RunnerCommand,
}

/// The command lines DESIGN.md §3 gives the Pod's containers parse as intended.
#[test]
fn command_lines() {
    use clap::Parser;
    use terrace_operator::runner::RunnerCommand;
    let cli = Cli::try_parse_from([
        "runner",
        "exec",
        "--log-file",
        "/logs/engine.log",
        "--stderr-file",
        "/logs/engine.stderr",
        "--",
        "tofu",
        "test",
        "-json",
        "-filter",
        "tests/a.tftest.hcl",
    ])
    .unwrap();
    let RunnerCommand::Exec {
        termination_message_path,
        log_file,
        stderr_file,
        command,
        ..
    } = cli.runner
    else {
        panic!("not exec");
    };
    assert_eq!(termination_message_path, Path::new("/dev/termination-log"));
    assert_eq!(log_file.as_deref(), Some(Path::new("/logs/engine.log")));
    assert_eq!(
        stderr_file.as_deref(),
        Some(Path::new("/logs/engine.stderr"))
    );
    assert_eq!(
        command,
        ["tofu", "test", "-json", "-filter", "tests/a.tftest.hcl"]
    );
    let cli = Cli::try_parse_from([
        "runner",
        "fetch",
        "--url",
        "http://api/v1/object/x",
        "--token-file",
        "/token/token",
    ])
    .unwrap();
    assert!(matches!(
        cli.runner,
        RunnerCommand::Fetch { dest, ca_file: None, .. } if dest == Path::new("/workspace")
    ));
    assert!(Cli::try_parse_from(["runner", "exec"]).is_err());
}

/// `terrace runner exec` exits 0 with a summary (even a failing one) and non-zero without.
#[test]
fn run_exit_status() {
    use terrace_operator::runner::{RunnerCommand, run};
    let dir = tempfile::tempdir().unwrap();
    let cmd = |body: &str| {
        let engine = script(dir.path(), body);
        RunnerCommand::Exec {
            termination_message_path: dir.path().join("termination-log"),
            log_file: None,
            stderr_file: None,
            log_url: None,
            log_token_file: None,
            command: vec![engine.display().to_string()],
        }
    };
    assert_eq!(run(&cmd(&format!("{}exit 1", say(SUMMARY_FAIL)))), Ok(()));
    let err = run(&cmd(&format!("{}exit 1", say(DIAG_ERROR)))).unwrap_err();
    assert!(err.starts_with(ERROR_NO_SUMMARY), "{err}");
    assert!(err.contains("Failed to load plugin schemas"), "{err}");
}

#[test]
fn install_links_or_copies_an_executable() {
    let dir = tempfile::tempdir().unwrap();
    let source = script(dir.path(), "echo hello");
    // Same filesystem: a hard link (what the simulator's Pods get).
    let dest = dir.path().join("tools/terrace");
    assert_eq!(
        terrace_operator::runner::install(&source, &dest).unwrap(),
        "hard link"
    );
    let out = std::process::Command::new(&dest).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    // A second install replaces the first (an init container restarted).
    assert_eq!(
        terrace_operator::runner::install(&source, &dest).unwrap(),
        "hard link"
    );
    // A source that does not exist is an error naming nothing silently.
    assert!(terrace_operator::runner::install(&dir.path().join("missing"), &dest).is_err());
}
