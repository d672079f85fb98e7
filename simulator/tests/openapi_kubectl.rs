//! The simulator's OpenAPI documents and Table output as the real kubectl (1.32) consumes
//! them: `kubectl explain` of a custom kind, `kubectl apply --validate=strict` with an
//! unknown field, `kubectl get` printer columns. Skipped (passing) when kubectl is not
//! installed.

use std::process::Command;
use terrace_simulator::{SimConfig, Simulator};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.terrace.dev
spec:
  group: terrace.dev
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget, shortNames: [gd]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: TFE Name, type: string, jsonPath: .spec.name}
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        description: A gadget for the kubectl test.
        properties:
          spec:
            type: object
            description: Desired state of the gadget.
            properties:
              name:
                type: string
                description: The gadget's display name.
                pattern: '^[a-z]+$'
              size:
                type: integer
                description: How big it is.
                default: 3
"#;

fn kubectl(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use std::io::Write;
    let mut cmd = Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let Ok(mut child) = cmd.spawn() else {
        return (false, String::new(), "spawn failed".into());
    };
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        let _ = input.write_all(text.as_bytes());
    }
    match child.wait_with_output() {
        Ok(out) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Err(e) => (false, String::new(), e.to_string()),
    }
}

/// Copies what kubectl needs from kube-apiserver: OpenAPI v3 documents with field
/// descriptions (`kubectl explain`), a `fieldValidation` parameter on PATCH/POST so
/// `--validate=strict` is enforced by the server, and Table responses with printer columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_apply_get() -> anyhow::Result<()> {
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("kubectl not installed; skipping");
        return Ok(());
    }
    let sim = Simulator::open(SimConfig::default()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn({
        let sim = sim.clone();
        async move { sim.serve(listener).await }
    });
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        sim.kubeconfig(&format!("https://{addr}"), &sim.admin_token()),
    )?;
    let kc2 = kc.clone();

    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let kc = kc2.as_path();
        let (ok, out, err) = kubectl(kc, &["apply", "-f", "-"], Some(CRD));
        anyhow::ensure!(ok, "create CRD: {out}{err}");
        // Discovery and OpenAPI are cached by kubectl per server; give the CRD a moment.
        let mut explained = String::new();
        for _ in 0..20 {
            let (ok, out, err) = kubectl(kc, &["explain", "gadgets.spec"], None);
            if ok {
                explained = out;
                break;
            }
            explained = err;
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        anyhow::ensure!(explained.contains("Desired state of the gadget."), "explain: {explained}");
        anyhow::ensure!(explained.contains("The gadget's display name."), "explain: {explained}");

        let bad = "apiVersion: terrace.dev/v1alpha1\nkind: Gadget\nmetadata: {name: g1, namespace: default}\nspec: {name: abc, colour: red}\n";
        let (ok, out, err) = kubectl(kc, &["apply", "--validate=strict", "-f", "-"], Some(bad));
        anyhow::ensure!(!ok, "strict apply with an unknown field succeeded: {out}");
        anyhow::ensure!(err.contains("unknown field") && err.contains("spec.colour"), "strict apply: {err}");

        let good = "apiVersion: terrace.dev/v1alpha1\nkind: Gadget\nmetadata: {name: g1, namespace: default}\nspec: {name: abc}\n";
        let (ok, out, err) = kubectl(kc, &["apply", "--validate=strict", "-f", "-"], Some(good));
        anyhow::ensure!(ok, "apply: {out}{err}");

        let invalid = "apiVersion: terrace.dev/v1alpha1\nkind: Gadget\nmetadata: {name: g2, namespace: default}\nspec: {name: 'Bad Name'}\n";
        let (ok, _, err) = kubectl(kc, &["apply", "-f", "-"], Some(invalid));
        anyhow::ensure!(!ok && err.contains("spec.name in body should match '^[a-z]+$'"), "invalid apply: {err}");

        let (ok, out, err) = kubectl(kc, &["get", "gadgets"], None);
        anyhow::ensure!(ok, "get: {err}");
        let header = out.lines().next().unwrap_or_default();
        anyhow::ensure!(
            header.split_whitespace().collect::<Vec<_>>() == ["NAME", "TFE", "NAME", "SIZE", "AGE"],
            "get: {out}"
        );
        anyhow::ensure!(out.contains("g1") && out.contains("abc") && out.contains('3'), "get: {out}");

        let (ok, out, err) = kubectl(kc, &["explain", "secrets"], None);
        anyhow::ensure!(ok && out.contains("KIND:") && out.contains("Secret"), "explain secrets: {out}{err}");
        Ok(())
    })
    .await?;
    sim.shutdown().await;
    server.abort();
    result
}
