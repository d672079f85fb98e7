//! The chart and the binary agree: every `TERRACE_*` variable a rendered Deployment sets
//! is a setting of the command that Deployment runs (`terrace <command> --help` lists it
//! as `[env: NAME=…]`), and the binary accepts the values the chart renders, with default
//! and with non-default values. A chart setting the binary ignores would be silently
//! dead; a value it rejects would crash-loop the Pods.

use std::process::Command;

use terrace_tests::{helm, terrace_bin, workspace_root};

/// A container's environment: name and literal value (None for `valueFrom`).
type Env = Vec<(String, Option<String>)>;

/// (command, env) of each container of each rendered Deployment.
fn deployments(values: Option<&str>) -> Vec<(Vec<String>, Env)> {
    let mut cmd = Command::new(helm());
    cmd.args([
        "template",
        "terrace",
        "charts/terrace",
        "--namespace",
        "terrace-system",
    ]);
    if let Some(v) = values {
        cmd.args(["-f", v]);
    }
    let out = cmd.current_dir(workspace_root()).output().expect("helm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut found = Vec::new();
    for doc in text.split("\n---") {
        let v = terrace_simulator::patch::parse_yaml_or_json(doc.as_bytes()).unwrap_or_default();
        if v["kind"] != "Deployment" {
            continue;
        }
        for c in v["spec"]["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let words = |k: &str| -> Vec<String> {
                c[k].as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|w| w.as_str().map(str::to_owned))
                    .collect()
            };
            let mut command = words("command");
            command.extend(words("args"));
            let env = c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or_default().to_owned(),
                        e["value"].as_str().map(str::to_owned),
                    )
                })
                .collect();
            found.push((command, env));
        }
    }
    found
}

fn check(values: Option<&str>) {
    let deps = deployments(values);
    assert_eq!(deps.len(), 2, "operator and API server Deployments");
    for (command, env) in deps {
        let sub: Vec<&str> = command.iter().skip(1).map(String::as_str).collect();
        assert!(
            matches!(sub.first(), Some(&"operator" | &"api-server")),
            "unexpected command {command:?}"
        );
        let help = Command::new(terrace_bin())
            .args(&sub)
            .arg("--help")
            .output()
            .expect("terrace --help");
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        for (name, _) in env.iter().filter(|(n, _)| n.starts_with("TERRACE_")) {
            // `[env: NAME=…]`, or `[env: NAME]` for a secret whose value clap hides.
            assert!(
                help.contains(&format!("[env: {name}="))
                    || help.contains(&format!("[env: {name}]")),
                "the chart sets {name} for `terrace {}`, which has no such setting",
                sub.join(" ")
            );
        }
        // The values parse: with them, the command gets past its settings and only then
        // fails, for want of a cluster (no kubeconfig, not in a Pod).
        let home = tempfile::tempdir().expect("tempdir");
        let mut run = Command::new(terrace_bin());
        run.args(&sub)
            .env_clear()
            .env("HOME", home.path())
            .env("KUBECONFIG", home.path().join("no-kubeconfig"));
        for (name, value) in &env {
            if let Some(v) = value {
                run.env(name, v);
            }
        }
        let out = run.output().expect("terrace");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && !err.contains("invalid value")
                && err.contains("Failed to infer configuration"),
            "terrace {} did not accept the chart's values: {err}",
            sub.join(" ")
        );
    }
}

#[test]
fn chart_env_is_what_the_binary_reads_default_values() {
    check(None);
}

#[test]
fn chart_env_is_what_the_binary_reads_non_default_values() {
    check(Some("tests/chart/values-nondefault.yaml"));
}
