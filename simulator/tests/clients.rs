//! Real clients against the simulator: a `kube_runtime::Controller` in-process, and the
//! `kubectl` binary over HTTPS. Each test's doc comment names the behaviour it copies.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, CustomResource, Resource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use terrace_simulator::{SimConfig, Simulator};

type R = anyhow::Result<()>;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    schema = "disabled"
)]
struct GadgetSpec {
    size: i64,
}

fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "shortNames": ["gd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "description": "What the gadget should be.",
                        "properties": {"size": {"type": "integer", "description": "How big the gadget is."}}},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]
            }]
        }
    })
}

async fn install_gadgets(client: &Client) -> anyhow::Result<()> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crds: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(gadget_crd())?,
    )
    .await?;
    Ok(())
}

struct Ctx {
    client: Client,
    reconciles: AtomicUsize,
}

async fn reconcile(g: Arc<Gadget>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let ns = g.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = g.controller_owner_ref(&()).map(|o| vec![o]);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("gadget-{}", g.name_any()), "labels": {"size": g.spec.size.to_string()}, "ownerReferences": owner},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    });
    pods.patch(
        &format!("gadget-{}", g.name_any()),
        &PatchParams::apply("gadget-controller").force(),
        &Patch::Apply(pod),
    )
    .await?;
    Ok(Action::await_change())
}

fn error_policy(_g: Arc<Gadget>, _e: &kube::Error, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

async fn eventually<F, Fut>(what: &str, mut f: F) -> R
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if f().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("timed out waiting for {what}")
}

/// Copies what kube-runtime needs from kube-apiserver: list + watch with bookmarks,
/// ownerReference-driven `.owns()` mapping and garbage collection of owned Pods. The
/// controller reacts to create, spec change and delete, and never relists in a loop
/// (LIST and WATCH requests are counted at the HTTP layer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_owns_pods_without_relist_loops() -> R {
    let sim = Simulator::open(SimConfig {
        bookmark_interval: Duration::from_millis(300),
        ..SimConfig::default()
    })
    .await?;
    let lists = Arc::new(AtomicUsize::new(0));
    let watches = Arc::new(AtomicUsize::new(0));
    let token = http::HeaderValue::from_str(&format!("Bearer {}", sim.admin_token()))?;
    let (l, w) = (lists.clone(), watches.clone());
    let svc = tower::ServiceBuilder::new()
        .map_request(move |mut req: http::Request<kube::client::Body>| {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, token.clone());
            if req.method() == http::Method::GET {
                let q = req.uri().query().unwrap_or("");
                let collection =
                    req.uri().path().ends_with("/gadgets") || req.uri().path().ends_with("/pods");
                if collection && q.contains("watch=true") {
                    w.fetch_add(1, Ordering::SeqCst);
                } else if collection {
                    l.fetch_add(1, Ordering::SeqCst);
                }
            }
            req
        })
        .service(sim.router());
    let client = Client::new(svc, "default");
    install_gadgets(&client).await?;
    let gadgets: Api<Gadget> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicUsize::new(0),
    });
    let controller = Controller::new(gadgets.clone(), watcher::Config::default())
        .owns(pods.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);

    gadgets
        .create(
            &PostParams::default(),
            &Gadget::new("one", GadgetSpec { size: 1 }),
        )
        .await?;
    eventually("the pod", || async {
        pods.get_opt("gadget-one").await.ok().flatten().is_some()
    })
    .await?;
    gadgets
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await?;
    eventually("the pod to follow the spec", || async {
        pods.get_opt("gadget-one")
            .await
            .ok()
            .flatten()
            .is_some_and(|p| p.labels().get("size").map(String::as_str) == Some("5"))
    })
    .await?;
    gadgets.delete("one", &DeleteParams::default()).await?;
    eventually("garbage collection of the pod", || async {
        matches!(pods.get_opt("gadget-one").await, Ok(None))
    })
    .await?;
    // Let a few bookmark intervals pass: a relist loop would show up here.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    handle.abort();
    let (l, w) = (lists.load(Ordering::SeqCst), watches.load(Ordering::SeqCst));
    assert!(l <= 4, "LIST requests: {l}");
    assert!(w <= 4, "WATCH requests: {w}");
    assert!(ctx.reconciles.load(Ordering::SeqCst) >= 2);
    sim.shutdown().await;
    Ok(())
}

struct Kubectl {
    kubeconfig: std::path::PathBuf,
    cache: std::path::PathBuf,
}

impl Kubectl {
    fn cmd(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt;
        let mut c = self.cmd(args);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn()?;
        if let Some(mut si) = child.stdin.take()
            && let Some(text) = stdin
        {
            si.write_all(text.as_bytes()).await?;
        }
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await??;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?} failed: {}{}",
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(stdout)
    }
}

fn kubectl_available() -> bool {
    let found = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipping: kubectl is not on PATH");
    }
    found
}

async fn serve_for_kubectl() -> anyhow::Result<(Simulator, Kubectl, tempfile::TempDir)> {
    let sim = Simulator::open(SimConfig::default()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let s = sim.clone();
    tokio::spawn(async move { s.serve(listener).await });
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        sim.kubeconfig(&format!("https://{addr}"), &sim.admin_token()),
    )?;
    let k = Kubectl {
        kubeconfig,
        cache: dir.path().join("cache"),
    };
    Ok((sim, k, dir))
}

/// Copies the kube-apiserver behaviours kubectl 1.32 relies on: legacy discovery after
/// the aggregated-discovery request, client-side `apply` (create, then GET + merge
/// patch) of a CRD and of a custom object, `get` with the CRD's printer columns through
/// `as=Table`, `get -o yaml`, `patch --type merge`, `get -w` reporting a later create,
/// and `delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_round_trip() -> R {
    if !kubectl_available() {
        return Ok(());
    }
    let (sim, k, dir) = serve_for_kubectl().await?;
    let crd_yaml = serde_json::to_string(&gadget_crd())?;
    let crd_file = dir.path().join("crd.json");
    std::fs::write(&crd_file, &crd_yaml)?;
    let out = k
        .run(&["apply", "-f", &crd_file.to_string_lossy()], None)
        .await?;
    assert!(out.contains("gadgets.example.com created"), "{out}");
    let obj =
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: first\nspec:\n  size: 3\n";
    let out = k.run(&["apply", "-f", "-"], Some(obj)).await?;
    assert!(out.contains("gadget.example.com/first created"), "{out}");
    let out = k
        .run(
            &["apply", "-f", "-"],
            Some(&obj.replace("size: 3", "size: 4")),
        )
        .await?;
    assert!(out.contains("gadget.example.com/first configured"), "{out}");

    let out = k.run(&["get", "gadgets"], None).await?;
    let header = out.lines().next().unwrap_or("");
    assert!(header.contains("NAME") && header.contains("SIZE"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("first") && l.contains('4')),
        "{out}"
    );

    let out = k.run(&["get", "gd", "first", "-o", "yaml"], None).await?;
    assert!(
        out.contains("kind: Gadget") && out.contains("size: 4"),
        "{out}"
    );

    let out = k
        .run(
            &[
                "patch",
                "gadget",
                "first",
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"size":7}}"#,
            ],
            None,
        )
        .await?;
    assert!(out.contains("patched"), "{out}");
    let out = k
        .run(
            &["get", "gadget", "first", "-o", "jsonpath={.spec.size}"],
            None,
        )
        .await?;
    assert_eq!(out, "7");

    // get -w sees a gadget created afterwards.
    let mut watch = k.cmd(&["get", "gadgets", "-w"]);
    watch
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = watch.spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let reader = tokio::spawn(async move {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut seen = String::new();
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push_str(&l);
            seen.push('\n');
            if l.starts_with("second") {
                break;
            }
        }
        seen
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let gadgets: Api<DynamicObject> = Api::default_namespaced_with(
        sim.client(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
            "gadgets",
        ),
    );
    gadgets
        .create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "second"}, "spec": {"size": 2}}))?)
        .await?;
    let seen = tokio::time::timeout(Duration::from_secs(20), reader).await??;
    let _ = child.kill().await;
    assert!(seen.lines().any(|l| l.starts_with("second")), "{seen}");

    let out = k.run(&["delete", "gadget", "first"], None).await?;
    assert!(out.contains("deleted"), "{out}");
    let out = k.run(&["get", "gadgets", "-o", "name"], None).await?;
    assert_eq!(out.trim(), "gadget.example.com/second");
    sim.shutdown().await;
    Ok(())
}

/// Copies `kubectl explain` against the OpenAPI v3 documents kube-apiserver builds from
/// CRD schemas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain() -> R {
    if !kubectl_available() {
        return Ok(());
    }
    let (sim, k, dir) = serve_for_kubectl().await?;
    let crd_file = dir.path().join("crd.json");
    std::fs::write(&crd_file, serde_json::to_string(&gadget_crd())?)?;
    k.run(&["apply", "-f", &crd_file.to_string_lossy()], None)
        .await?;
    let out = k.run(&["explain", "gadget.spec"], None).await?;
    assert!(out.contains("How big the gadget is."), "{out}");
    sim.shutdown().await;
    Ok(())
}

/// Copies kubectl against built-in kinds: `apply` of a Namespace, client-side `apply` of a
/// ConfigMap twice (the second is a strategic merge patch), `get` Tables for kinds
/// without printer columns, `delete namespace` (waits for the namespace to go).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_builtin_kinds() -> R {
    if !kubectl_available() {
        return Ok(());
    }
    let (sim, k, _dir) = serve_for_kubectl().await?;
    // `apply` sends JSON (typed `kubectl create` sends protobuf: see tls_protobuf.rs).
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n";
    let out = k.run(&["apply", "-f", "-"], Some(ns)).await?;
    assert!(out.contains("namespace/team created"), "{out}");
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team\ndata:\n  a: \"1\"\n";
    let out = k.run(&["apply", "-f", "-"], Some(cm)).await?;
    assert!(out.contains("configmap/settings created"), "{out}");
    let out = k
        .run(
            &["apply", "-f", "-"],
            Some(&cm.replace("a: \"1\"", "b: \"2\"")),
        )
        .await?;
    assert!(out.contains("configmap/settings configured"), "{out}");
    let out = k
        .run(
            &[
                "get",
                "configmap",
                "settings",
                "-n",
                "team",
                "-o",
                "jsonpath={.data}",
            ],
            None,
        )
        .await?;
    assert_eq!(out, r#"{"b":"2"}"#);
    let out = k.run(&["get", "namespaces"], None).await?;
    assert!(out.lines().any(|l| l.starts_with("team")), "{out}");
    let out = k.run(&["delete", "namespace", "team"], None).await?;
    assert!(out.contains("deleted"), "{out}");
    let out = k.run(&["get", "namespaces", "-o", "name"], None).await?;
    assert!(!out.contains("namespace/team"), "{out}");
    sim.shutdown().await;
    Ok(())
}
