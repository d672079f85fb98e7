//! Benchmark of issue 30 (policy as code): evaluating 10 OPA policies with regorus
//! against the JSON plan of 1,000 resources (`TERRACE_POLICY_RESOURCES`), p50 of 20
//! rounds, beside a baseline taken in the same run: the real engine's own plan of the
//! same number of resources (`terraform plan` of `terraform_data` resources, local
//! state, the part of a remote plan the engine spends), median of 3. Targets: p50 ≤ 100
//! ms, and ≤ 10% of the plan's time.
//!
//! Run: `cargo bench -p terrace-tests --bench policy` (needs terraform on PATH for the
//! baseline).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terrace_crds::policy::{DEFAULT_TIME_LIMIT, Enforcement, Policy, RunFacts, evaluate, input};
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

fn main() {
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
    match engine_plan(n) {
        Some(plan_time) => println!(
            "  the engine's plan of {n} resources (baseline) {:>8.1} ms  ratio {:.1}%  (target <= 10%)",
            plan_time.as_secs_f64() * 1e3,
            100.0 * p50.as_secs_f64() / plan_time.as_secs_f64()
        ),
        None => println!("  no terraform on PATH: the plan baseline was not measured"),
    }
}
