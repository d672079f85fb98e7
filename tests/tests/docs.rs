//! Every shell block of README.md, docs/ and examples/README.md that a reader is meant to
//! run is run as it is written (issue 41 §10), as `readme.rs` runs the README tour.
//!
//! Each ```sh (`bash`, `shell`, `console`) block is preceded by a marker comment:
//!
//! - `<!-- doc-test -->`: run here, after the README tour, in the tour's directory and
//!   shell (`KUBECONFIG`, `TOKEN`, `API`, `TF_CLI_CONFIG_FILE` as the tour sets them);
//!   the blocks of one file run in order in one `bash -euo pipefail`, so a later block
//!   may use what an earlier one set;
//! - `<!-- illustration: WHY -->`: not run (a real cluster, a command that never ends,
//!   placeholders), saying why;
//! - the README tour's own marker (`readme.rs` runs it).
//!
//! A block without a marker fails [`every_shell_block_is_run_or_marked_an_illustration`].
//! While the blocks run, `curl` fails on a 404 or a 5xx (a path the docs got wrong, as
//! `$API/api/v2/…` with `API` already ending in `/api/v2`); other refusals the docs show
//! (a 409, a 422 for something that exists already) pass. `kubectl auth can-i` answering
//! "no" passes too.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use terrace_tests::{terrace_bin, terraform_path, workspace_root};

const RUN: &str = "<!-- doc-test -->";
const ILLUSTRATION: &str = "<!-- illustration:";
const TOUR: &str = "<!-- the README tour: tests/tests/readme.rs runs the next sh block -->";

/// The files, in the order their blocks run (later ones use what earlier ones made).
const FILES: &[&str] = &[
    "README.md",
    "examples/README.md",
    "docs/install.md",
    "docs/gitops.md",
    "docs/api.md",
    "docs/state.md",
    "docs/runs.md",
    "docs/variables.md",
    "docs/rbac.md",
    "docs/policies.md",
    "docs/notifications.md",
    "docs/ui.md",
    "docs/module-tests.md",
    "docs/registry.md",
    "docs/operations.md",
];

/// A shell block: its file, the line of its opening fence, its marker and its text.
struct Block {
    file: &'static str,
    line: usize,
    marker: Option<String>,
    text: String,
}

fn blocks(file: &'static str) -> Vec<Block> {
    let text = std::fs::read_to_string(workspace_root().join(file)).expect("doc file");
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_end();
        if let Some(lang) = fence.strip_prefix("```") {
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .unwrap_or(lines.len());
            if matches!(lang, "sh" | "bash" | "shell" | "console") {
                let marker = lines[..i]
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(|l| l.trim())
                    .filter(|l| l.starts_with("<!--"))
                    .map(str::to_owned);
                out.push(Block {
                    file,
                    line: i + 1,
                    marker,
                    text: lines[i + 1..end].join("\n"),
                });
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

fn every_doc() -> Vec<&'static str> {
    let mut files: Vec<&'static str> = FILES.to_vec();
    // A new page under docs/ is covered too (and must be added to FILES to run).
    for entry in std::fs::read_dir(workspace_root().join("docs"))
        .expect("docs")
        .flatten()
    {
        let name = format!("docs/{}", entry.file_name().to_string_lossy());
        if name.ends_with(".md") && !files.contains(&name.as_str()) {
            files.push(Box::leak(name.into_boxed_str()));
        }
    }
    files
}

#[test]
fn every_shell_block_is_run_or_marked_an_illustration() {
    let mut unmarked = Vec::new();
    let mut unlisted = Vec::new();
    for file in every_doc() {
        for b in blocks(file) {
            match b.marker.as_deref() {
                Some(m) if m == RUN || m == TOUR => {
                    if !FILES.contains(&b.file) {
                        unlisted.push(format!("{}:{}", b.file, b.line));
                    }
                }
                Some(m) if m.starts_with(ILLUSTRATION) && m.len() > ILLUSTRATION.len() + 5 => {}
                _ => unmarked.push(format!("{}:{}", b.file, b.line)),
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell blocks neither run ({RUN}) nor marked {ILLUSTRATION} WHY -->: {unmarked:?}"
    );
    assert!(
        unlisted.is_empty(),
        "doc-test blocks of a file docs.rs does not run (add it to FILES): {unlisted:?}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).expect("copy");
        }
    }
}

struct Stop(Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What every file's blocks run after: the README tour's shell, and the checks of
/// `curl` and `kubectl` the module's doc describes.
const PREAMBLE: &str = r#"
export KUBECONFIG=$PWD/.terrace-dev/kubeconfig
TOKEN=$(cat .terrace-dev/token)
API=http://127.0.0.1:8080/api/v2
export TF_CLI_CONFIG_FILE=$PWD/.terrace-dev/terraform.rc CHECKPOINT_DISABLE=1
curl() {
  local out code url=""
  for a in "$@"; do case $a in http*) url=$a;; esac; done
  out=$(command curl -w '\n%{http_code}' "$@") || return $?
  code=${out##*$'\n'}
  printf '%s\n' "${out%$'\n'*}"
  case $code in
    404|5??) echo "doc-test: HTTP $code from $url" >&2; return 22;;
  esac
}
kubectl() {
  local rc=0
  command kubectl "$@" || rc=$?
  if [ "$1" = auth ] && [ "$rc" = 1 ]; then return 0; fi
  return $rc
}
"#;

/// What the output of a file's blocks must show (beyond running without an error).
fn expected(file: &str) -> &'static [&'static str] {
    match file {
        "docs/state.md" => &["seen = \"hello from a run Pod\"", "\"reader\"", "true"],
        "docs/module-tests.md" => &["Success!", "\"pass\""],
        "docs/registry.md" => &["\"ok\""],
        "docs/api.md" => &["networking-dev", "hello from a run Pod"],
        _ => &[],
    }
}

#[test]
fn the_doc_blocks_run_as_written() {
    let _addresses = terrace_tests::default_addresses();
    let home = tempfile::tempdir().expect("tempdir");
    let cwd = home.path();
    copy_dir(&workspace_root().join("examples"), &cwd.join("examples"));
    let terraform = terraform_path();
    let tf_dir = Path::new(&terraform)
        .parent()
        .expect("terraform's directory");
    let path = format!(
        "{}:{}",
        tf_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = std::fs::File::create(cwd.join("terrace-dev.out")).expect("log");
    let dev = Stop(
        Command::new(terrace_bin())
            .arg("dev")
            .current_dir(cwd)
            .env("PATH", &path)
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("terrace dev"),
    );
    let out_file = cwd.join("terrace-dev.out");
    let dev_log = || std::fs::read_to_string(&out_file).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cwd.join(".terrace-dev/endpoints.json").exists() {
        assert!(
            Instant::now() < deadline,
            "terrace dev did not become ready; are 127.0.0.1:8080 and :6443 free?\n{}",
            dev_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for file in FILES {
        let runnable: Vec<Block> = blocks(file)
            .into_iter()
            .filter(|b| matches!(b.marker.as_deref(), Some(m) if m == RUN || m == TOUR))
            .collect();
        if runnable.is_empty() {
            continue;
        }
        let mut script = String::from(PREAMBLE);
        for b in &runnable {
            script.push_str(&format!("echo '### {}:{}'\n{}\n", b.file, b.line, b.text));
        }
        let started = Instant::now();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{script}"))
            .current_dir(cwd)
            .env("PATH", &path)
            .env("TF_IN_AUTOMATION", "1")
            .env_remove("KUBECONFIG")
            .env_remove("TF_CLI_CONFIG_FILE")
            .env_remove("TF_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("bash");
        let shown = terrace_tests::text(&out);
        assert!(
            out.status.success(),
            "the shell blocks of {file} failed (the last ### line is the block):\n{shown}\n--- terrace dev:\n{}",
            dev_log()
        );
        for needle in expected(file) {
            assert!(
                shown.contains(needle),
                "the blocks of {file} do not show {needle:?}:\n{shown}"
            );
        }
        eprintln!(
            "{file}: {} blocks in {:?}",
            runnable.len(),
            started.elapsed()
        );
    }
    drop(dev);
}
