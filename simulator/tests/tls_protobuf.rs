//! The simulator's HTTPS serving (`Simulator::serve`) with kube::Client and kubectl, and
//! the protobuf bodies kubectl's typed commands send. kubectl tests are skipped (passing)
//! when kubectl is not on PATH. Each test's doc comment names the behaviour it copies.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::{Path, PathBuf};
use std::time::Duration;
use terrace_simulator::{SimConfig, Simulator};

type R = anyhow::Result<()>;

/// Serves `sim` over TLS on `addr` and returns its `https://` URL.
async fn serve_tls(sim: &Simulator, addr: &str) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let s = sim.clone();
    tokio::spawn(async move { s.serve(listener).await });
    Ok(format!("https://{local}"))
}

async fn config_for(sim: &Simulator, url: &str, token: &str) -> anyhow::Result<kube::Config> {
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig(url, token))?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?)
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Copies kube-apiserver's secure port as client-go and kube-rs use it: the kubeconfig's
/// `certificate-authority-data` verifies the serving certificate (for `127.0.0.1`,
/// `localhost` and, when the host has IPv6, `::1`), a client that does not trust the CA
/// fails the handshake, the bearer token authenticates, a request without a token is
/// `system:anonymous` (403, even from loopback) and a wrong token is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_client_over_tls_from_kubeconfig() -> R {
    let sim = Simulator::open(SimConfig::default()).await?;
    let url = serve_tls(&sim, "127.0.0.1:0").await?;
    let client = kube::Client::try_from(config_for(&sim, &url, &sim.admin_token()).await?)?;
    let names: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"default".to_string()), "{names:?}");

    let port = url.rsplit(':').next().unwrap_or_default();
    let by_name = format!("https://localhost:{port}");
    let client = kube::Client::try_from(config_for(&sim, &by_name, &sim.admin_token()).await?)?;
    assert_eq!(client.apiserver_version().await?.major, "1");

    let mut untrusted = config_for(&sim, &url, &sim.admin_token()).await?;
    untrusted.root_cert = None;
    let err = kube::Client::try_from(untrusted)?
        .apiserver_version()
        .await
        .err();
    assert!(
        err.as_ref().is_some_and(|e| status_code(e).is_none()),
        "{err:?}"
    );

    let mut anonymous = config_for(&sim, &url, &sim.admin_token()).await?;
    anonymous.auth_info = Default::default();
    let anonymous = kube::Client::try_from(anonymous)?;
    // Discovery and version stay public; resources do not.
    assert_eq!(anonymous.apiserver_version().await?.major, "1");
    let err = Api::<Namespace>::all(anonymous)
        .list(&ListParams::default())
        .await
        .err();
    assert_eq!(err.as_ref().and_then(status_code), Some(403), "{err:?}");

    let wrong = kube::Client::try_from(config_for(&sim, &url, "not-a-token").await?)?;
    let err = Api::<Namespace>::all(wrong)
        .list(&ListParams::default())
        .await
        .err();
    assert_eq!(err.as_ref().and_then(status_code), Some(401), "{err:?}");

    if let Ok(v6) = serve_tls(&sim, "[::1]:0").await {
        let client = kube::Client::try_from(config_for(&sim, &v6, &sim.admin_token()).await?)?;
        assert_eq!(client.apiserver_version().await?.major, "1");
    }
    sim.shutdown().await;
    Ok(())
}

/// Copies the old kube-apiserver insecure port, kept for `serve_plain`: over plain HTTP
/// a loopback request without an Authorization header acts as the admin, while a wrong
/// token is still 401; the kubeconfig for an `http://` URL carries no CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_plain_keeps_the_loopback_admin_rule() -> R {
    let sim = Simulator::open(SimConfig::default()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let s = sim.clone();
    tokio::spawn(async move { s.serve_plain(listener).await });
    assert!(
        !sim.kubeconfig(&url, "t")
            .contains("certificate-authority-data")
    );
    let mut cfg = config_for(&sim, &url, &sim.admin_token()).await?;
    cfg.auth_info = Default::default();
    let client = kube::Client::try_from(cfg)?;
    let list = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await?;
    assert!(!list.items.is_empty());
    let wrong = kube::Client::try_from(config_for(&sim, &url, "not-a-token").await?)?;
    let err = Api::<Namespace>::all(wrong)
        .list(&ListParams::default())
        .await
        .err();
    assert_eq!(err.as_ref().and_then(status_code), Some(401), "{err:?}");
    sim.shutdown().await;
    Ok(())
}

/// Copies a cluster's long-lived serving CA (kubeadm keeps `/etc/kubernetes/pki`): the CA
/// and serving certificate are created once under the data directory (the key readable
/// by the owner only) and reused after a restart, so an earlier kubeconfig still
/// verifies; without a data directory each simulator has its own CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_material_persists_in_the_data_dir() -> R {
    let dir = tempfile::tempdir()?;
    let config = SimConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..SimConfig::default()
    };
    let sim = Simulator::open(config.clone()).await?;
    let ca = sim.ca_pem().to_string();
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    let tls_dir = dir.path().join("tls");
    for f in ["ca.crt", "tls.crt", "tls.key"] {
        assert!(tls_dir.join(f).is_file(), "{f} missing");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(tls_dir.join("tls.key"))?
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "key mode {mode:o}");
    }
    let kubeconfig_before = sim.kubeconfig("https://127.0.0.1:1", &sim.admin_token());
    sim.shutdown().await;

    let sim = Simulator::open(config).await?;
    assert_eq!(sim.ca_pem(), ca);
    let url = serve_tls(&sim, "127.0.0.1:0").await?;
    let before = Kubeconfig::from_yaml(&kubeconfig_before.replace("https://127.0.0.1:1", &url))?;
    let cfg = kube::Config::from_custom_kubeconfig(before, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(cfg)?;
    Api::<Namespace>::all(client).get("default").await?;
    sim.shutdown().await;

    let other = Simulator::open(SimConfig::default()).await?;
    assert_ne!(other.ca_pem(), ca);
    other.shutdown().await;
    Ok(())
}

fn kubectl_available() -> bool {
    let found = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipping: kubectl is not on PATH");
    }
    found
}

struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    async fn start(sim: &Simulator, dir: &Path) -> anyhow::Result<Kubectl> {
        let url = serve_tls(sim, "127.0.0.1:0").await?;
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, sim.kubeconfig(&url, &sim.admin_token()))?;
        Ok(Kubectl {
            kubeconfig,
            cache: dir.join("cache"),
        })
    }

    async fn run(&self, args: &[&str]) -> anyhow::Result<Out> {
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .arg("--cache-dir")
                .arg(&self.cache)
                .args(args)
                .kill_on_drop(true)
                .output(),
        )
        .await??;
        Ok(Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    async fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.run(args).await?;
        anyhow::ensure!(
            out.ok,
            "kubectl {args:?} failed: {}{}",
            out.stdout,
            out.stderr
        );
        Ok(out.stdout)
    }
}

/// Copies kube-apiserver's protobuf serializer for the built-in kinds kubectl's typed
/// `create` commands send as `application/vnd.kubernetes.protobuf` (namespace,
/// configmap `--from-literal`, secret generic, serviceaccount, clusterrole): the objects
/// are created as their JSON would have created them, answered in JSON (kubectl's Accept
/// allows it), and kubectl reaches the server over TLS with its kubeconfig unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_create_commands_send_protobuf() -> R {
    if !kubectl_available() {
        return Ok(());
    }
    let sim = Simulator::open(SimConfig::default()).await?;
    let dir = tempfile::tempdir()?;
    let k = Kubectl::start(&sim, dir.path()).await?;

    let out = k.ok(&["create", "namespace", "team"]).await?;
    assert!(out.contains("namespace/team created"), "{out}");
    let out = k
        .ok(&[
            "create",
            "configmap",
            "settings",
            "-n",
            "team",
            "--from-literal=colour=blue",
            "--from-literal=size=3",
        ])
        .await?;
    assert!(out.contains("configmap/settings created"), "{out}");
    let out = k
        .ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "team",
            "--from-literal=password=s3cret",
        ])
        .await?;
    assert!(out.contains("secret/creds created"), "{out}");
    let out = k
        .ok(&["create", "serviceaccount", "robot", "-n", "team"])
        .await?;
    assert!(out.contains("serviceaccount/robot created"), "{out}");
    let out = k
        .ok(&[
            "create",
            "clusterrole",
            "log-reader",
            "--verb=get",
            "--non-resource-url=/logs/*",
        ])
        .await?;
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/log-reader created"),
        "{out}"
    );
    // Creating it again is AlreadyExists, reported by kubectl from the JSON Status.
    let out = k.run(&["create", "namespace", "team"]).await?;
    assert!(
        !out.ok && out.stderr.contains("AlreadyExists"),
        "{}",
        out.stderr
    );

    let client = sim.client();
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "team")
        .get("settings")
        .await?;
    let data = cm.data.unwrap_or_default();
    assert_eq!(data.get("colour").map(String::as_str), Some("blue"));
    assert_eq!(data.get("size").map(String::as_str), Some("3"));
    let out = k
        .ok(&[
            "get",
            "secret",
            "creds",
            "-n",
            "team",
            "-o",
            "jsonpath={.data.password}",
        ])
        .await?;
    assert_eq!(out, "czNjcmV0");
    let out = k
        .ok(&[
            "get",
            "clusterrole",
            "log-reader",
            "-o",
            "jsonpath={.rules}",
        ])
        .await?;
    assert!(out.contains("/logs/*"), "{out}");
    sim.shutdown().await;
    Ok(())
}

/// Copies `kubectl create token` (TokenRequest subresource, protobuf body) and
/// `kubectl auth can-i` (SelfSubjectAccessReview, protobuf body) against kube-apiserver
/// with RBAC: the admin may, an impersonated user without bindings (`--as`) may not until
/// a ClusterRole and RoleBinding created with `kubectl create` (protobuf) grant it, and the
/// ServiceAccount token kubectl printed authenticates as that ServiceAccount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_and_auth_can_i() -> R {
    if !kubectl_available() {
        return Ok(());
    }
    let sim = Simulator::open(SimConfig::default()).await?;
    let dir = tempfile::tempdir()?;
    let k = Kubectl::start(&sim, dir.path()).await?;

    let out = k.run(&["auth", "can-i", "create", "namespaces"]).await?;
    assert!(
        out.ok && out.stdout.trim() == "yes",
        "{}{}",
        out.stdout,
        out.stderr
    );
    let out = k
        .run(&[
            "auth",
            "can-i",
            "get",
            "pods",
            "-n",
            "default",
            "--as=alice",
        ])
        .await?;
    assert!(
        !out.ok && out.stdout.trim() == "no",
        "{}{}",
        out.stdout,
        out.stderr
    );
    k.ok(&[
        "create",
        "clusterrole",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ])
    .await?;
    k.ok(&[
        "create",
        "rolebinding",
        "alice-reads-pods",
        "-n",
        "default",
        "--clusterrole=pod-reader",
        "--user=alice",
    ])
    .await?;
    let out = k
        .run(&[
            "auth",
            "can-i",
            "get",
            "pods",
            "-n",
            "default",
            "--as=alice",
        ])
        .await?;
    assert!(
        out.ok && out.stdout.trim() == "yes",
        "{}{}",
        out.stdout,
        out.stderr
    );
    let out = k
        .run(&[
            "auth",
            "can-i",
            "delete",
            "pods",
            "-n",
            "default",
            "--as=alice",
        ])
        .await?;
    assert!(
        !out.ok && out.stdout.trim() == "no",
        "{}{}",
        out.stdout,
        out.stderr
    );
    let out = k.run(&["auth", "can-i", "--list", "-n", "default"]).await?;
    assert!(out.ok, "{}{}", out.stdout, out.stderr);

    k.ok(&["create", "serviceaccount", "robot", "-n", "default"])
        .await?;
    let token = k
        .ok(&["create", "token", "robot", "-n", "default", "--duration=1h"])
        .await?;
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "not a JWT: {token}");
    let out = k
        .run(&[
            "--token", token, "auth", "can-i", "list", "pods", "-n", "default",
        ])
        .await?;
    assert!(
        !out.ok && out.stdout.trim() == "no",
        "{}{}",
        out.stdout,
        out.stderr
    );
    let out = k
        .ok(&[
            "--token",
            token,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .await;
    if let Ok(name) = out {
        assert_eq!(name, "system:serviceaccount:default:robot");
    }
    sim.shutdown().await;
    Ok(())
}
