//! Benchmark of issue 30 (policy as code): evaluating 10 OPA policies with regorus
//! against the JSON plan of 1,000 resources (`TERRACE_POLICY_RESOURCES`), p50 of 20
//! rounds, beside a baseline taken in the same run: the real engine's own plan of the
//! same number of resources (`terraform plan` of `terraform_data` resources, local
//! state, the part of a remote plan the engine spends), median of 3. Targets: p50 ≤ 100
//! ms, and ≤ 10% of the plan's time.
//!
//! The API server evaluates each set in a process of its own (`terrace policy-eval`, under
//! an address-space limit), so the set is also measured that way: the process started, the
//! request (the plan in it) written, the outcomes read. The evaluator is `$TERRACE_BIN
//! policy-eval` when given (a release build of terrace), else this benchmark itself
//! (re-executed; the same `terrace_crds::policy::serve` as `terrace policy-eval`).
//!
//! Run: `cargo bench -p terrace-tests --bench policy` (needs terraform on PATH for the
//! baseline).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terrace_crds::policy::{
    DEFAULT_TIME_LIMIT, Enforcement, EvalPolicy, EvalRequest, Policy, RunFacts, evaluate, input,
};
use terrace_tests::bench::{env_usize, median};

fn plan(n: usize) -> Value {
    json!({
        "format_version": "1.2",
        "resource_changes": (0..n).map(|i| {
            let kind = ["aws_instance", "aws_s3_bucket", "aws_security_group", "aws_iam_role"][i % 4];
            json!({
                "address": format!("{kind}.r{i}"),
                "type": kind,
                "name": format!("r{i}"),
                "change": {"actions": ["create"], "after": {
                    "tags": if i % 7 == 0 { json!({}) } else { json!({"owner": "team", "env": "prod"}) },
                    "instance_type": if i % 11 == 0 { "m5.24xlarge" } else { "t3.micro" },
                    "acl": if i % 13 == 0 { "public-read" } else { "private" },
                }},
            })
        }).collect::<Vec<_>>(),
    })
}

fn policies() -> Vec<Policy> {
    let rules = [
        ("owner", r#"not rc.change.after.tags.owner"#),
        ("env", r#"not rc.change.after.tags.env"#),
        (
            "size",
            r#"rc.change.after.instance_type in data.parameters.forbidden_sizes"#,
        ),
        ("public", r#"rc.change.after.acl == "public-read""#),
        ("iam", r#"rc.type == "aws_iam_user""#),
        ("delete", r#""delete" in rc.change.actions"#),
        ("prodtag", r#"rc.change.after.tags.env == "dev""#),
        (
            "sg",
            r#"rc.type == "aws_security_group"; rc.change.after.ingress_open"#,
        ),
        ("name", r#"startswith(rc.name, "tmp")"#),
        ("count", r#"count(input.plan.resource_changes) > 100000"#),
    ];
    rules
        .iter()
        .map(|(name, cond)| Policy {
            name: (*name).to_owned(),
            rego: format!(
                "package terraform.policies.{name}\n\nimport rego.v1\n\ndeny contains msg if {{\n    some rc in input.plan.resource_changes\n    {cond}\n    msg := sprintf(\"%s breaks {name}\", [rc.address])\n}}\n"
            ),
            query: format!("data.terraform.policies.{name}.deny"),
            enforcement: Enforcement::Advisory,
        })
        .collect()
}

fn engine_plan(n: usize) -> Option<Duration> {
    let tf = std::process::Command::new("sh")
        .args(["-c", "command -v terraform"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| !p.is_empty())?;
    let dir = tempfile::tempdir().ok()?;
    std::fs::write(
        dir.path().join("main.tf"),
        format!("resource \"terraform_data\" \"r\" {{\n  count = {n}\n  input = count.index\n}}\n"),
    )
    .ok()?;
    let run = |args: &[&str]| {
        std::process::Command::new(&tf)
            .args(args)
            .current_dir(dir.path())
            .env("TF_IN_AUTOMATION", "1")
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    run(&["init", "-input=false"])?;
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        run(&["plan", "-input=false", "-out=tfplan"])?;
        run(&["show", "-json", "tfplan"])?;
        times.push(t.elapsed());
    }
    Some(median(times))
}

/// One evaluation of `request` by an evaluator process (`program args`): the outcomes'
/// count.
fn through_process(program: &std::path::Path, args: &[&str], request: &[u8]) -> usize {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the evaluator starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request)
        .expect("the request");
    let out = child.wait_with_output().expect("the evaluator ends");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

fn main() {
    // Re-executed as the evaluator.
    if std::env::args().nth(1).as_deref() == Some("policy-eval") {
        terrace_crds::policy::serve(std::io::stdin().lock(), std::io::stdout().lock())
            .expect("evaluate");
        return;
    }
    let n = env_usize("TERRACE_POLICY_RESOURCES", 1_000);
    let p = plan(n);
    let run = RunFacts {
        id: "run-bench".into(),
        organization: "acme".into(),
        workspace: "web".into(),
        ..Default::default()
    };
    let doc = input(&p, &run);
    let params = json!({"forbidden_sizes": ["m5.24xlarge"]});
    let set = policies();
    let round = || {
        let t = Instant::now();
        let failed = set
            .iter()
            .map(|pol| evaluate(pol, &doc, &params, DEFAULT_TIME_LIMIT))
            .filter(|o| !o.messages.is_empty())
            .count();
        (t.elapsed(), failed)
    };
    let (_, failed) = round();
    let mut samples: Vec<Duration> = (0..20).map(|_| round().0).collect();
    samples.sort();
    let p90 = samples[samples.len() * 9 / 10];
    let p50 = median(samples);
    println!(
        "issue 30 policy benchmark: 10 policies, a JSON plan of {n} resources ({failed} policies fail)"
    );
    println!(
        "  evaluation of the set  p50 {:>8.1} ms  p90 {:>8.1} ms  (target p50 <= 100 ms)",
        p50.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3
    );
    // The path the API server takes: one evaluator process for the set.
    let request = serde_json::to_vec(&EvalRequest {
        limit_ms: DEFAULT_TIME_LIMIT.as_millis() as u64,
        compile_only: false,
        input: doc.clone(),
        parameters: params.clone(),
        policies: set
            .iter()
            .map(|p| EvalPolicy {
                name: p.name.clone(),
                rego: p.rego.clone(),
                query: p.query.clone(),
                enforcement: p.enforcement,
            })
            .collect(),
    })
    .expect("request");
    let (program, args, which) = match std::env::var_os("TERRACE_BIN") {
        Some(bin) => (
            std::path::PathBuf::from(bin),
            vec!["policy-eval", "--memory-limit-mib", "1024"],
            "terrace policy-eval ($TERRACE_BIN)",
        ),
        None => (
            std::env::current_exe().expect("this benchmark"),
            vec!["policy-eval"],
            "this benchmark re-executed as the evaluator",
        ),
    };
    assert_eq!(through_process(&program, &args, &request), set.len());
    let mut process: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            through_process(&program, &args, &request);
            t.elapsed()
        })
        .collect();
    process.sort();
    let pp90 = process[process.len() * 9 / 10];
    let pp50 = median(process);
    println!(
        "  in its own process      p50 {:>8.1} ms  p90 {:>8.1} ms  ({which}; the request is {} KiB)",
        pp50.as_secs_f64() * 1e3,
        pp90.as_secs_f64() * 1e3,
        request.len() / 1024
    );
    match engine_plan(n) {
        Some(plan_time) => println!(
            "  the engine's plan of {n} resources (baseline) {:>8.1} ms  ratio {:.1}% in-process, {:.1}% in its own process  (target <= 10%)",
            plan_time.as_secs_f64() * 1e3,
            100.0 * p50.as_secs_f64() / plan_time.as_secs_f64(),
            100.0 * pp50.as_secs_f64() / plan_time.as_secs_f64()
        ),
        None => println!("  no terraform on PATH: the plan baseline was not measured"),
    }
}
