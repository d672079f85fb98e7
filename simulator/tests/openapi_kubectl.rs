//! The simulator's OpenAPI documents and Table output as the real kubectl (1.32+) consumes
//! them: `kubectl explain` of a custom kind, `kubectl apply --validate=strict` with an
//! unknown field, `kubectl get` printer columns, a manifest of a kind the cluster does
//! not know, `kind: List` files; and the media types `/openapi/*` answers in. The
//! kubectl tests are skipped (passing) when kubectl is not installed.

use std::process::Command;
use terrace_simulator::{SimConfig, Simulator};
use tower::ServiceExt as _;

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

fn kubectl_installed() -> bool {
    let found = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok();
    if !found {
        eprintln!("kubectl not installed; skipping");
    }
    found
}

/// A simulator served over HTTPS with a kubeconfig for kubectl; the CRD above installed.
async fn served() -> anyhow::Result<(Simulator, tempfile::TempDir, std::path::PathBuf)> {
    let sim = Simulator::open(SimConfig::default()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn({
        let sim = sim.clone();
        async move { sim.serve(listener).await }
    });
    let dir = tempfile::tempdir()?;
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        sim.kubeconfig(&format!("https://{addr}"), &sim.admin_token()),
    )?;
    Ok((sim, dir, kc))
}

const ARGO_APPLICATION: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: terrace-acme, namespace: default}\nspec: {project: default}\n";

/// Copies what kubectl sees from kube-apiserver for a kind the cluster does not serve:
/// its group version is not in the OpenAPI v3 index, so kubectl falls back to
/// `/openapi/v2` as protobuf, finds no schema for it, skips client-side validation and
/// reports the REST mapper's error (before the fix: `error validating … proto: cannot
/// parse invalid wire-format data`, from a JSON body where protobuf was asked for).
/// `kind: List` files, which kubectl validates item by item against the v2 document,
/// apply with validation on, and an unknown field in an item is still caught.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_unknown_kind_and_lists() -> anyhow::Result<()> {
    if !kubectl_installed() {
        return Ok(());
    }
    let (sim, _dir, kc) = served().await?;
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let kc = kc.as_path();
        let (ok, out, err) = kubectl(kc, &["apply", "-f", "-"], Some(CRD));
        anyhow::ensure!(ok, "create CRD: {out}{err}");

        let (ok, out, err) = kubectl(kc, &["apply", "-f", "-"], Some(ARGO_APPLICATION));
        anyhow::ensure!(!ok, "an unknown kind applied: {out}");
        anyhow::ensure!(
            err.contains(r#"no matches for kind "Application" in version "argoproj.io/v1alpha1""#)
                && err.contains("ensure CRDs are installed first")
                && !err.contains("proto:"),
            "unknown kind: {err}"
        );

        let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: listed, namespace: default}\n  data: {a: b}\n- apiVersion: terrace.dev/v1alpha1\n  kind: Gadget\n  metadata: {name: listed, namespace: default}\n  spec: {name: abc}\n";
        let (ok, out, err) = kubectl(kc, &["apply", "-f", "-"], Some(list));
        anyhow::ensure!(ok, "apply a List: {out}{err}");
        anyhow::ensure!(
            out.contains("configmap/listed created") && out.contains("gadget.terrace.dev/listed created"),
            "apply a List: {out}"
        );

        let bad = list.replace("spec: {name: abc}", "spec: {name: abc, colour: red}");
        let (ok, out, err) = kubectl(kc, &["apply", "--validate=strict", "-f", "-"], Some(&bad));
        anyhow::ensure!(!ok, "a List item with an unknown field applied: {out}");
        anyhow::ensure!(
            err.contains(r#"unknown field "colour""#),
            "a List item with an unknown field: {err}"
        );
        Ok(())
    })
    .await?;
    sim.shutdown().await;
    result
}

/// Copies kube-openapi's handlers: `/openapi/v2` in JSON or, for gnostic's protobuf
/// media type (what client-go's `OpenAPISchema()` asks for), as `openapi.v2.Document`;
/// an Accept header nothing matches is 406; a group version nobody serves is 404.
#[tokio::test]
async fn openapi_media_types() -> anyhow::Result<()> {
    let sim = Simulator::open(SimConfig::default()).await?;
    let get = |path: &str, accept: &str| -> anyhow::Result<http::Request<axum::body::Body>> {
        Ok(http::Request::get(path)
            .header("authorization", format!("Bearer {}", sim.admin_token()))
            .header("accept", accept)
            .body(axum::body::Body::empty())?)
    };
    let call = |req: http::Request<axum::body::Body>| async {
        let resp = sim.router().oneshot(req).await?;
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
        anyhow::Ok((status, ct, body))
    };

    let proto = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let (status, ct, body) = call(get("/openapi/v2", proto)?).await?;
    assert_eq!(status, 200);
    assert_eq!(
        ct,
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    // Field 1 (swagger), length 3: "2.0".
    assert!(
        body.starts_with(b"\x0a\x032.0"),
        "{:?}",
        &body[..body.len().min(16)]
    );

    let (status, ct, body) = call(get("/openapi/v2", "application/json, */*")?).await?;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    let doc: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(doc["swagger"], "2.0");

    let (status, _, _) = call(get("/openapi/v2", "application/xml")?).await?;
    assert_eq!(status, 406);
    let (status, _, _) = call(get("/openapi/v3/api/v1", proto)?).await?;
    assert_eq!(status, 406);
    let (status, _, body) = call(get(
        "/openapi/v3/apis/argoproj.io/v1alpha1",
        "application/json",
    )?)
    .await?;
    assert_eq!(status, 404);
    let st: serde_json::Value = serde_json::from_slice(&body)?;
    assert_eq!(st["reason"], "NotFound");
    sim.shutdown().await;
    Ok(())
}
