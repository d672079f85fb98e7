//! The README's first hour, as a new user follows it (issue 24): `terrace dev` started as
//! the README says (no flags: its data in `./.terrace-dev`, a relative path, and its
//! default addresses), then the tour's shell block run as it is written in README.md,
//! from the same directory, ending with a remote `terraform apply` through the CLI
//! configuration `terrace dev` wrote. If the README drifts from what terrace does, this
//! fails.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use terrace_tests::{terrace_bin, terraform_path, workspace_root};

/// The marker the tour's block follows in README.md.
const MARKER: &str = "<!-- the README tour: tests/tests/readme.rs runs the next sh block -->";

/// The first ```sh block after [`MARKER`].
fn tour(readme: &str) -> String {
    let after = &readme[readme.find(MARKER).expect("the tour marker in README.md")..];
    let start = after.find("```sh\n").expect("the tour's sh block") + "```sh\n".len();
    let len = after[start..]
        .find("\n```")
        .expect("the end of the tour's block");
    after[start..start + len].to_owned()
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

#[test]
fn the_readme_tour_runs_as_written() {
    let _addresses = terrace_tests::default_addresses();
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README");
    // The README's command, with the binary `cargo run -p terrace` builds.
    assert!(
        readme.contains("cargo run -p terrace -- dev "),
        "the README no longer starts terrace dev with `cargo run -p terrace -- dev`"
    );
    let script = tour(&readme);
    let home = tempfile::tempdir().expect("tempdir");
    let cwd = home.path();
    copy_dir(&workspace_root().join("examples"), &cwd.join("examples"));
    // The engine of the run Pods: terrace dev takes tofu, else terraform, from PATH; the
    // test's PATH gets the terraform the CLI tests use first.
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
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cwd.join(".terrace-dev/endpoints.json").exists() {
        assert!(
            Instant::now() < deadline,
            "terrace dev (no flags, in {}) did not become ready; are 127.0.0.1:8080 and :6443 free?\n{}",
            cwd.display(),
            std::fs::read_to_string(&out_file).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let printed = std::fs::read_to_string(&out_file).unwrap_or_default();
    let rc = cwd.join(".terrace-dev/terraform.rc");
    assert!(
        printed.contains(&format!("export TF_CLI_CONFIG_FILE={}", rc.display())),
        "terrace dev prints the CLI configuration's export line:\n{printed}"
    );
    // The banner names the web view and how to open the CLI's run links (issue 41 §7).
    for line in [
        "Web view    http://127.0.0.1:8080/app",
        "Run links   the CLI prints https://terrace.test/app/…: open them as http://127.0.0.1:8080/app/…",
    ] {
        assert!(
            printed.contains(line),
            "the banner lacks {line:?}:\n{printed}"
        );
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
        .stdin(Stdio::null())
        .output()
        .expect("bash");
    let shown = terrace_tests::text(&out);
    let dev_log = || std::fs::read_to_string(&out_file).unwrap_or_default();
    assert!(
        out.status.success(),
        "the README tour failed:\n{shown}\n--- terrace dev:\n{}",
        dev_log()
    );
    eprintln!("the README tour took {:?}", started.elapsed());
    // The tour's first run is clean (issue 41 §6): the examples' global variable set adds
    // nothing the engine complains about (no internal log lines, no warning about a
    // variable the configuration does not declare, no path inside the run's Pod).
    let start = shown
        .find("Running apply")
        .unwrap_or_else(|| panic!("no remote apply:\n{shown}"));
    let end = shown[start..]
        .find("Apply complete!")
        .map_or(shown.len(), |e| start + e);
    let run = &shown[start..end];
    for noise in [
        "[ERROR]",
        "[WARN]",
        "AttachSchemaTransformer",
        "undeclared variable",
        "Warning:",
        "/v/",
    ] {
        assert!(
            !run.contains(noise),
            "the tour's run prints {noise:?}:\n{run}"
        );
    }
    for needle in [
        "refused, as it should be",
        "from-curl",
        "user:system:serviceaccount:acme:alice",
        "Apply complete! Resources: 1 added",
        "greeting = \"hello from a run Pod\"",
    ] {
        assert!(
            shown.contains(needle),
            "the tour's output lacks {needle:?}:\n{shown}"
        );
    }
    // The CLI's run link, opened as the README says, reaches the run (after signing in).
    let link = shown
        .lines()
        .find_map(|l| l.trim().strip_prefix("https://terrace.test/app/"))
        .unwrap_or_else(|| panic!("no run link in the CLI's output:\n{shown}"));
    let run = link.rsplit('/').next().unwrap_or_default().to_owned();
    use ureq::ResponseExt;
    let opened = ureq::get(&format!("http://127.0.0.1:8080/app/{link}"))
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .expect("the run link answers");
    let at = opened.get_uri().to_string();
    assert!(
        opened.status() == 200 && at.contains("/app/session/new") && at.contains(&run),
        "{} {at}",
        opened.status()
    );
    drop(dev);
}
