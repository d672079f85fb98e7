//! The data directory as kube-apiserver's etcd keeps it: a write the client was answered
//! for survives the process being killed (SIGKILL, no shutdown), and the files that
//! hold the objects (Secrets included) are readable by their owner only.
//!
//! The killed simulator is this test binary run again as a child process
//! ([`child_simulator_process`], which does nothing unless the parent's environment
//! variable names its data directory).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use terrace_simulator::{SimConfig, Simulator};

/// The data directory of the child process's simulator.
const CHILD_DATA_DIR: &str = "TERRACE_SIM_TEST_CHILD_DATA_DIR";

/// Creates acknowledged before the child is killed.
const BURST: usize = 500;
/// Concurrent writers, so creates are in flight when the child dies.
const WRITERS: usize = 25;

fn config(dir: PathBuf) -> SimConfig {
    SimConfig {
        data_dir: Some(dir),
        run_pods: false,
        ..SimConfig::default()
    }
}

/// Not a test of its own: the simulator the kill test runs as a child process. Serves
/// plain HTTP on a free port, writes the address to `DIR/addr`, and runs until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_simulator_process() -> anyhow::Result<()> {
    let Some(dir) = std::env::var_os(CHILD_DATA_DIR).map(PathBuf::from) else {
        return Ok(());
    };
    let sim = Simulator::open(config(dir.clone())).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let tmp = dir.join("addr.tmp");
    std::fs::write(&tmp, addr.to_string())?;
    std::fs::rename(&tmp, dir.join("addr"))?;
    sim.serve_plain(listener).await?;
    Ok(())
}

fn wait_for_addr(dir: &Path, child: &mut std::process::Child) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(a) = std::fs::read_to_string(dir.join("addr")) {
            return Ok(a);
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the child simulator exited: {status}");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the child simulator did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn configmap(name: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"v": "created"},
    }))?)
}

/// Copies etcd's guarantee: every create and every PATCH answered before `kill -9` is
/// there after a restart. 25 writers create ConfigMaps and patch each one after its
/// create; the process is killed the moment the 500th create is answered, with other
/// writes still in flight (they may or may not survive: nobody was answered). Before
/// group commit the store answered first and wrote its log every 100 ms, so the last
/// answered writes were lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("cluster");
    std::fs::create_dir_all(&data)?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "durability::child_simulator_process",
            "--test-threads=1",
        ])
        .env(CHILD_DATA_DIR, &data)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
    let result = async {
        let addr = wait_for_addr(&data, &mut child)?;
        let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse()?))?;
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        // name → the last value an answered write gave it.
        let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let creates = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (done_tx, mut done_rx) = tokio::sync::mpsc::channel::<()>(1);
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let (api, acked, creates, done_tx) =
                (api.clone(), acked.clone(), creates.clone(), done_tx.clone());
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("w{w}-{i}");
                    if api
                        .create(&PostParams::default(), &configmap(&name)?)
                        .await
                        .is_err()
                    {
                        return anyhow::Ok(());
                    }
                    lock(&acked).insert(name.clone(), "created".into());
                    if creates.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == BURST {
                        let _ = done_tx.try_send(());
                    }
                    let patch = serde_json::json!({"data": {"v": "patched"}});
                    if api
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .is_err()
                    {
                        return Ok(());
                    }
                    lock(&acked).insert(name, "patched".into());
                }
                Ok(())
            }));
        }
        drop(done_tx);
        tokio::time::timeout(Duration::from_secs(120), done_rx.recv()).await?;
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)?;
        for w in writers {
            w.await??;
        }
        let _ = child.wait();
        // Every answer a writer got, also those that crossed the kill on the wire: the
        // server only answers once the write is on disk.
        let snapshot = lock(&acked).clone();
        anyhow::ensure!(snapshot.len() >= BURST, "only {} creates", snapshot.len());

        let sim = Simulator::open(config(data.clone())).await?;
        let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
        let mut lost = Vec::new();
        for (name, value) in &snapshot {
            match api.get_opt(name).await? {
                None => lost.push(format!("{name} (gone)")),
                Some(cm) => {
                    let v = cm
                        .data
                        .and_then(|d| d.get("v").cloned())
                        .unwrap_or_default();
                    // An unanswered patch may have made it: patched is as good as
                    // created.
                    if value == "patched" && v != "patched" {
                        lost.push(format!("{name} (patch rolled back to {v})"));
                    }
                }
            }
        }
        sim.shutdown().await;
        anyhow::ensure!(
            lost.is_empty(),
            "{} of {} answered writes lost after kill -9: {:?}",
            lost.len(),
            snapshot.len(),
            &lost[..lost.len().min(10)]
        );
        anyhow::Ok(())
    }
    .await;
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    result
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The snapshot and the log hold every Secret in base64: they are created 0600 in a
/// 0700 directory (as the admin token and the signing key always were), and files and
/// a directory an earlier version left readable to others are tightened on open.
#[cfg(unix)]
#[tokio::test]
async fn data_files_are_private() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir()?;
    let mode = |p: &Path| -> anyhow::Result<u32> {
        Ok(std::fs::metadata(p)?.permissions().mode() & 0o777)
    };
    let fresh = tmp.path().join("fresh");
    let sim = Simulator::open(config(fresh.clone())).await?;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
    )?;
    Api::namespaced(sim.client(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    sim.shutdown().await;
    assert_eq!(mode(&fresh)?, 0o700);
    for f in [
        "snapshot.jsonl",
        "log.jsonl",
        "admin-token",
        "sa-signing-key",
    ] {
        assert_eq!(mode(&fresh.join(f))?, 0o600, "{f}");
    }

    let old = tmp.path().join("old");
    std::fs::create_dir_all(&old)?;
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755))?;
    for f in ["snapshot.jsonl", "log.jsonl"] {
        std::fs::write(old.join(f), "")?;
        std::fs::set_permissions(old.join(f), std::fs::Permissions::from_mode(0o644))?;
    }
    let sim = Simulator::open(config(old.clone())).await?;
    sim.shutdown().await;
    assert_eq!(mode(&old)?, 0o700);
    for f in ["snapshot.jsonl", "log.jsonl"] {
        assert_eq!(mode(&old.join(f))?, 0o600, "{f}");
    }
    Ok(())
}
