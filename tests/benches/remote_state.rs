//! Benchmark of issue 27 §1 (the engine inside a run reaches terrace), against
//! `terrace dev` whose Pods run the real terraform: a remote `terraform plan` of a
//! configuration that reads one `terraform_remote_state` (backend `remote`, through the
//! run's CLI configuration and credential) vs. the same plan without the read, measured
//! alternately in the same run. Target: ≤ 1.3x.
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench remote_state`
//! (`TERRACE_BENCH_REPS`, default 5; `TERRACE_BENCH_RESOURCES`, default 50).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use terrace_tests::bench::{env_usize, median};
use terrace_tests::{Api, CLI_HOST, Dev, Terraform, terraform_path, text, write_cloud_config};

const ORG: &str = "benchstate";

fn write_config(dir: &Path, workspace: &str, body: &str) {
    write_cloud_config(dir, ORG, &format!("name = \"{workspace}\""), body);
}

fn resources(n: usize) -> String {
    format!(
        "resource \"terraform_data\" \"item\" {{\n  count = {n}\n  input = \"item-${{count.index}}\"\n}}\n"
    )
}

const READ: &str = r#"
data "terraform_remote_state" "producer" {
  backend = "remote"
  config = {
    hostname     = "HOST"
    organization = "ORG"
    workspaces = {
      name = "producer"
    }
  }
}
output "endpoint" {
  value = data.terraform_remote_state.producer.outputs.endpoint
}
"#;

fn run(tf: &Terraform, dir: &Path, args: &[&str]) {
    let out = tf.run(dir, args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
}

/// Wall time of `terraform plan` in `dir` (init not counted).
fn timed_plan(tf: &Terraform, dir: &Path) -> Duration {
    run(tf, dir, &["init", "-input=false"]);
    let start = Instant::now();
    run(tf, dir, &["plan", "-input=false"]);
    start.elapsed()
}

fn main() {
    let reps = env_usize("TERRACE_BENCH_REPS", 5);
    let n = env_usize("TERRACE_BENCH_RESOURCES", 50);
    let dev = Dev::start_with(&["--engine", &terraform_path()]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let tf = Terraform::for_dev(&dev);
    let work = tempfile::tempdir().expect("work dir");

    let producer = work.path().join("producer");
    write_config(
        &producer,
        "producer",
        "output \"endpoint\" { value = \"db.internal:5432\" }\n",
    );
    run(&tf, &producer, &["init", "-input=false"]);
    run(&tf, &producer, &["apply", "-auto-approve", "-input=false"]);
    let r = api.call(
        "PATCH",
        &format!("/api/v2/organizations/{ORG}/workspaces/producer"),
        Some(&json!({"data": {"type": "workspaces", "attributes": {"global-remote-state": true}}})),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);

    let read = READ.replace("HOST", CLI_HOST).replace("ORG", ORG);
    let (mut plain, mut reading) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        let p = work.path().join(format!("plain-{rep}"));
        write_config(&p, &format!("plain-{rep}"), &resources(n));
        plain.push(timed_plan(&tf, &p));
        let r = work.path().join(format!("reading-{rep}"));
        write_config(
            &r,
            &format!("reading-{rep}"),
            &format!("{}{read}", resources(n)),
        );
        reading.push(timed_plan(&tf, &r));
    }
    let (p, r) = (median(plain), median(reading));
    println!("remote plan of {n} terraform_data resources ({reps} reps, medians):");
    println!(
        "  without a remote state read: {:.2} s (baseline)",
        p.as_secs_f64()
    );
    println!(
        "  reading one terraform_remote_state (backend remote): {:.2} s ({:.2}x baseline, target <= 1.3x)",
        r.as_secs_f64(),
        r.as_secs_f64() / p.as_secs_f64()
    );
}
