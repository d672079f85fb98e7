//! The simulated node runs Pods as local processes; each test names the kubelet (or
//! kube-apiserver Pod strategy) behaviour it copies.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use terrace_simulator::{SimConfig, Simulator};

type R = anyhow::Result<()>;

async fn sim_with(config: SimConfig) -> anyhow::Result<(Simulator, Api<Pod>)> {
    let sim = Simulator::open(config).await?;
    let pods = Api::default_namespaced(sim.client());
    Ok((sim, pods))
}

async fn sim() -> anyhow::Result<(Simulator, Api<Pod>)> {
    sim_with(SimConfig::default()).await
}

fn pod(v: Value) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(v)?)
}

fn sh(name: &str, script: &str) -> Value {
    json!({"name": name, "image": "busybox", "command": ["sh", "-c", script]})
}

fn status(p: &Pod) -> Value {
    serde_json::to_value(&p.status).unwrap_or(Value::Null)
}

fn phase(p: &Pod) -> String {
    status(p)["phase"].as_str().unwrap_or("").to_string()
}

/// Polls the Pod until `f` holds (10 s at most); answers the last state.
async fn wait_for(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    f: impl Fn(&Pod) -> bool,
) -> anyhow::Result<Pod> {
    let start = Instant::now();
    loop {
        let p = pods.get(name).await?;
        if f(&p) {
            return Ok(p);
        }
        if start.elapsed() > Duration::from_secs(10) {
            anyhow::bail!("timed out waiting for {what}: {}", status(&p));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_gone(pods: &Api<Pod>, name: &str, within: Duration) -> R {
    let start = Instant::now();
    while pods.get_opt(name).await?.is_some() {
        if start.elapsed() > within {
            anyhow::bail!("pod {name} still there after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn finished(p: &Pod) -> bool {
    matches!(phase(p).as_str(), "Succeeded" | "Failed")
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// Copies kubelet: init containers run to completion, in order, before the containers
/// start; an emptyDir volume is shared between them; the phase goes Pending → Running →
/// Succeeded with `Initialized`/`Ready` conditions and `Completed` terminated states.
#[tokio::test]
async fn init_container_fills_empty_dir() -> R {
    let (sim, pods) = sim().await?;
    let p = pod(json!({
        "metadata": {"name": "init"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [
                {"name": "one", "image": "x", "command": ["sh", "-c", "echo hello > /work/greeting"], "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
                {"name": "two", "image": "x", "command": ["sh", "-c", "echo world >> /work/greeting"], "volumeMounts": [{"name": "work", "mountPath": "/work"}]}
            ],
            "containers": [{
                "name": "main", "image": "x",
                "command": ["sh", "-c", "cat greeting; test \"$TERRACE_SIM_MOUNT_WORK\" = \"$(pwd)\""],
                "workingDir": "/work",
                "volumeMounts": [{"name": "work", "mountPath": "/work"}]
            }]
        }
    }))?;
    let created = pods.create(&PostParams::default(), &p).await?;
    assert_eq!(phase(&created), "Pending");
    let done = wait_for(&pods, "init", "success", finished).await?;
    let s = status(&done);
    assert_eq!(s["phase"], "Succeeded", "{s}");
    assert_eq!(
        done.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .as_deref(),
        Some("terrace-sim")
    );
    let inits = s["initContainerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(inits.len(), 2);
    for i in &inits {
        assert_eq!(i["state"]["terminated"]["reason"], "Completed", "{i}");
        assert_eq!(i["ready"], true);
    }
    let main = &s["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (main["exitCode"].as_i64(), main["reason"].as_str()),
        (Some(0), Some("Completed")),
        "{s}"
    );
    assert!(main["startedAt"].is_string() && main["finishedAt"].is_string());
    let cond = |t: &str| {
        s["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == t).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(cond("Initialized")["status"], "True");
    assert_eq!(cond("PodScheduled")["status"], "True");
    assert_eq!(cond("Ready")["status"], "False");
    assert_eq!(cond("Ready")["reason"], "PodCompleted");
    assert!(s["startTime"].is_string());
    let log = pods.logs("init", &LogParams::default()).await?;
    assert_eq!(log, "hello\nworld\n");
    sim.shutdown().await;
    Ok(())
}

/// Copies kubelet: `env` with `valueFrom.secretKeyRef` and `configMapKeyRef`; a missing
/// Secret keeps the container waiting with `CreateContainerConfigError` and the
/// kubelet's message, and it starts once the Secret exists.
#[tokio::test]
async fn env_from_secret() -> R {
    let (sim, pods) = sim().await?;
    let p = pod(json!({
        "metadata": {"name": "env"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "x",
            "command": ["sh", "-c", "echo \"$TOKEN $PLAIN $(GREETING)\""],
            "args": [],
            "env": [
                {"name": "PLAIN", "value": "plain"},
                {"name": "GREETING", "value": "hi-$(PLAIN)"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}
            ]
        }]}
    }))?;
    pods.create(&PostParams::default(), &p).await?;
    let waiting = wait_for(&pods, "env", "the config error", |p| {
        status(p)["containerStatuses"][0]["state"]["waiting"]["reason"]
            == "CreateContainerConfigError"
    })
    .await?;
    let s = status(&waiting);
    assert_eq!(
        s["containerStatuses"][0]["state"]["waiting"]["message"],
        "secret \"creds\" not found"
    );
    assert_eq!(s["phase"], "Pending");
    let secrets: Api<Secret> = Api::default_namespaced(sim.client());
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "creds"}, "data": {"token": "czNjcjN0"}}),
            )?,
        )
        .await?;
    let done = wait_for(&pods, "env", "success", finished).await?;
    assert_eq!(phase(&done), "Succeeded", "{}", status(&done));
    // `$(GREETING)` in a command is expanded by the kubelet, not the shell.
    assert_eq!(
        pods.logs("env", &LogParams::default()).await?,
        "s3cr3t plain hi-plain\n"
    );
    sim.shutdown().await;
    Ok(())
}

/// Copies kubelet: the file at `terminationMessagePath` (default
/// `/dev/termination-log`, or one on a volume) becomes `state.terminated.message`,
/// at most 4096 bytes; `FallbackToLogsOnError` takes the log tail when it is empty.
#[tokio::test]
async fn termination_message() -> R {
    let (sim, pods) = sim().await?;
    let p = pod(json!({
        "metadata": {"name": "tm"},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "out", "emptyDir": {}}],
            "containers": [
                sh("default", "printf '{\"passed\":3}' > /dev/termination-log"),
                {"name": "custom", "image": "x", "command": ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a > /out/msg"],
                 "terminationMessagePath": "/out/msg", "volumeMounts": [{"name": "out", "mountPath": "/out"}]},
                {"name": "fallback", "image": "x", "command": ["sh", "-c", "echo boom; exit 2"],
                 "terminationMessagePolicy": "FallbackToLogsOnError"}
            ]
        }
    }))?;
    pods.create(&PostParams::default(), &p).await?;
    let done = wait_for(&pods, "tm", "the end", finished).await?;
    let s = status(&done);
    let by_name = |n: &str| {
        s["containerStatuses"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == n).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        by_name("default")["state"]["terminated"]["message"],
        "{\"passed\":3}"
    );
    let long = by_name("custom")["state"]["terminated"]["message"]
        .as_str()
        .map(str::len);
    assert_eq!(long, Some(4096));
    assert_eq!(
        by_name("fallback")["state"]["terminated"]["message"],
        "boom\n"
    );
    assert_eq!(s["phase"], "Failed");
    sim.shutdown().await;
    Ok(())
}

/// Copies kube-apiserver's `pods/log` (served from the kubelet): `container`,
/// `tailLines`, `limitBytes`, `follow`; 400 without a container name when there are
/// several, and for an unknown one; `pods/log` in discovery.
#[tokio::test]
async fn logs_endpoint() -> R {
    let (sim, pods) = sim().await?;
    let p = pod(json!({
        "metadata": {"name": "logs"},
        "spec": {"restartPolicy": "Never", "containers": [
            sh("a", "for i in 1 2 3 4; do echo line$i; done; echo err >&2"),
            sh("b", "echo b-start; sleep 0.5; echo b-end")
        ]}
    }))?;
    pods.create(&PostParams::default(), &p).await?;
    // Before its first start a container has no log (400 "waiting to start").
    wait_for(&pods, "logs", "b to start", |p| {
        status(p)["containerStatuses"].as_array().is_some_and(|a| {
            a.iter()
                .any(|c| c["name"] == "b" && c["state"]["waiting"].is_null())
        })
    })
    .await?;
    let params = LogParams {
        container: Some("b".into()),
        follow: true,
        ..LogParams::default()
    };
    let follow = pods.log_stream("logs", &params);
    let followed = tokio::time::timeout(Duration::from_secs(10), async {
        use futures::AsyncReadExt as _;
        let mut s = String::new();
        follow.await?.read_to_string(&mut s).await?;
        anyhow::Ok(s)
    })
    .await??;
    assert_eq!(followed, "b-start\nb-end\n");
    wait_for(&pods, "logs", "the end", finished).await?;
    let a = |lp: LogParams| {
        let pods = pods.clone();
        async move {
            pods.logs(
                "logs",
                &LogParams {
                    container: Some("a".into()),
                    ..lp
                },
            )
            .await
        }
    };
    assert_eq!(
        a(LogParams::default()).await?,
        "line1\nline2\nline3\nline4\nerr\n"
    );
    assert_eq!(
        a(LogParams {
            tail_lines: Some(2),
            ..LogParams::default()
        })
        .await?,
        "line4\nerr\n"
    );
    assert_eq!(
        a(LogParams {
            limit_bytes: Some(3),
            ..LogParams::default()
        })
        .await?,
        "lin"
    );
    match pods.logs("logs", &LogParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 400);
            assert_eq!(
                s.message,
                "a container name must be specified for pod logs, choose one of: [a b]"
            );
        }
        other => anyhow::bail!("expected 400, got {other:?}"),
    }
    match pods
        .logs(
            "logs",
            &LogParams {
                container: Some("zz".into()),
                ..LogParams::default()
            },
        )
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message.as_str()),
            (400, "container zz is not valid for pod logs")
        ),
        other => anyhow::bail!("expected 400, got {other:?}"),
    }
    let discovery = sim.client().list_core_api_resources("v1").await?;
    let log = discovery.resources.iter().find(|r| r.name == "pods/log");
    assert_eq!(log.map(|r| r.verbs.clone()), Some(vec!["get".to_string()]));
    sim.shutdown().await;
    Ok(())
}

/// Copies kube-apiserver's graceful Pod deletion and the kubelet's termination: the
/// delete answers the Pod with `deletionTimestamp` and `deletionGracePeriodSeconds` 30
/// (the default), the main process gets SIGTERM (it traps it and writes a marker into
/// its emptyDir), its exit is recorded (exit code, phase Failed) while a finalizer holds
/// the Pod, which goes once the finalizer is removed.
#[tokio::test]
async fn graceful_delete_sends_sigterm() -> R {
    let (sim, pods) = sim().await?;
    let p = pod(json!({
        "metadata": {"name": "graceful", "finalizers": ["example.com/hold"]},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "command": ["sh", "-c", "trap 'echo bye > /data/marker; exit 3' TERM; echo ready; while true; do sleep 0.1; done"]}]
        }
    }))?;
    let created = pods.create(&PostParams::default(), &p).await?;
    wait_for(&pods, "graceful", "running", |p| {
        phase(p) == "Running" && status(p)["containerStatuses"][0]["state"]["running"].is_object()
    })
    .await?;
    // Running is reported at spawn; the trap is set once the shell has printed "ready".
    read_line(sim.pods_dir().join(uid(&created)).join("logs/c.log")).await?;
    let deleted = pods.delete("graceful", &DeleteParams::default()).await?;
    let deleting = deleted
        .left()
        .ok_or_else(|| anyhow::anyhow!("the pod was removed at once"))?;
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(30));
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let started = Instant::now();
    let done = wait_for(&pods, "graceful", "termination", finished).await?;
    assert!(started.elapsed() < Duration::from_secs(5));
    let s = status(&done);
    assert_eq!(s["phase"], "Failed");
    assert_eq!(
        s["containerStatuses"][0]["state"]["terminated"]["exitCode"], 3,
        "{s}"
    );
    let marker = sim
        .pods_dir()
        .join(uid(&created))
        .join("volumes/data/marker");
    assert_eq!(std::fs::read_to_string(marker)?, "bye\n");
    assert_eq!(done.metadata.deletion_grace_period_seconds, Some(0));
    pods.patch(
        "graceful",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    wait_gone(&pods, "graceful", Duration::from_secs(2)).await?;
    sim.shutdown().await;
    Ok(())
}

/// Waits for a file the Pod writes to hold a line.
async fn read_line(path: PathBuf) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        let s = std::fs::read_to_string(&path).unwrap_or_default();
        if s.ends_with('\n') {
            return Ok(s);
        }
        if start.elapsed() > Duration::from_secs(5) {
            anyhow::bail!("{} not written", path.display());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a process exists and is not a zombie (an orphan killed here may wait for a
/// reaper that a container's PID 1 never is).
fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    state.is_some_and(|s| s != 'Z' && s != 'X')
}

/// Copies kube-apiserver's delete with `gracePeriodSeconds` (shortening a pending
/// graceful deletion; 0 = at once) and the kubelet's SIGKILL: a process that ignores
/// SIGTERM survives a 30 s grace period, is killed (exit 137) when grace 0 follows, and
/// a Pod without finalizers deleted with grace 0 is removed at once, its processes
/// killed.
#[tokio::test]
async fn grace_period_zero_kills() -> R {
    let (sim, pods) = sim().await?;
    // `$$$$`: the kubelet turns `$$` into `$` (its escape for `$(VAR)`).
    let stubborn = |name: &str, finalizers: Value| {
        pod(json!({
            "metadata": {"name": name, "finalizers": finalizers},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "command": ["sh", "-c", "trap '' TERM; echo $$$$ > /data/pid; sleep 60 & echo $! > /data/child; wait"]}]
            }
        }))
    };
    let held = pods
        .create(
            &PostParams::default(),
            &stubborn("held", json!(["example.com/hold"]))?,
        )
        .await?;
    wait_for(&pods, "held", "running", |p| phase(p) == "Running").await?;
    let dir = sim.pods_dir().join(uid(&held)).join("volumes/data");
    let (pid, child) = (
        read_line(dir.join("pid")).await?,
        read_line(dir.join("child")).await?,
    );
    pods.delete("held", &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        alive(&pid),
        "SIGTERM is ignored, the grace period still runs: {}",
        status(&pods.get("held").await?)
    );
    assert_eq!(phase(&pods.get("held").await?), "Running");
    let started = Instant::now();
    pods.delete(
        "held",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await?;
    let done = wait_for(&pods, "held", "the kill", finished).await?;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(
        status(&done)["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    assert!(
        !alive(&pid) && !alive(&child),
        "the whole process group is killed"
    );

    let free = pods
        .create(&PostParams::default(), &stubborn("free", json!([]))?)
        .await?;
    wait_for(&pods, "free", "running", |p| phase(p) == "Running").await?;
    let pid = read_line(sim.pods_dir().join(uid(&free)).join("volumes/data/pid")).await?;
    let gone = pods
        .delete(
            "free",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await?;
    assert!(gone.is_left(), "the deleted Pod is answered");
    assert!(pods.get_opt("free").await?.is_none());
    let start = Instant::now();
    while alive(&pid) && start.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(&pid));
    sim.shutdown().await;
    Ok(())
}

/// Copies kubelet with `restartPolicy: Never`: a non-zero exit is `terminated` with
/// reason `Error` and its exit code, and the Pod's phase is Failed; a deleted finished
/// Pod goes at once (grace 0, as the Pod strategy decides for terminal Pods).
#[tokio::test]
async fn failed_exit_code() -> R {
    let (sim, pods) = sim().await?;
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "fail"}, "spec": {"restartPolicy": "Never", "containers": [sh("c", "exit 7")]}}))?,
    )
    .await?;
    let done = wait_for(&pods, "fail", "failure", finished).await?;
    let s = status(&done);
    assert_eq!(s["phase"], "Failed");
    let t = &s["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(7), Some("Error"))
    );
    assert_eq!(s["containerStatuses"][0]["restartCount"], 0);
    pods.delete("fail", &DeleteParams::default()).await?;
    assert!(pods.get_opt("fail").await?.is_none());
    // A command that does not exist is a StartError (exit 128).
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "nocmd"}, "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "command": ["/nonexistent/prog"]}]}}))?,
    )
    .await?;
    let done = wait_for(&pods, "nocmd", "failure", finished).await?;
    let t = status(&done)["containerStatuses"][0]["state"]["terminated"].clone();
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(128), Some("StartError")),
        "{t}"
    );
    sim.shutdown().await;
    Ok(())
}

/// Copies kubelet with `restartPolicy: OnFailure`: a failing container is restarted
/// (`restartCount`, `lastState.terminated`) until it succeeds.
#[tokio::test]
async fn on_failure_restarts() -> R {
    let (sim, pods) = sim().await?;
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "retry"}, "spec": {"restartPolicy": "OnFailure",
            "volumes": [{"name": "d", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "d", "mountPath": "/d"}],
                "command": ["sh", "-c", "if [ -e /d/once ]; then exit 0; fi; touch /d/once; exit 1"]}]}}))?,
    )
    .await?;
    let done = wait_for(&pods, "retry", "success", finished).await?;
    let s = status(&done);
    assert_eq!(s["phase"], "Succeeded", "{s}");
    assert_eq!(s["containerStatuses"][0]["restartCount"], 1);
    assert_eq!(
        s["containerStatuses"][0]["lastState"]["terminated"]["exitCode"],
        1
    );
    sim.shutdown().await;
    Ok(())
}

/// Copies an image's entrypoint, for `terrace dev --engine`: a command override runs a
/// local program for a command name (directly and through PATH from another process),
/// an image override for a container without `command`; a container with neither
/// waits with `ErrImagePull`, as an image that cannot be pulled.
#[tokio::test]
async fn command_and_image_overrides() -> R {
    let tmp = tempfile::tempdir()?;
    let engine = tmp.path().join("fake-engine");
    std::fs::write(&engine, "#!/bin/sh\necho \"engine $*\"\n")?;
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&engine)
        .status()?;
    let (sim, pods) = sim_with(SimConfig {
        command_overrides: vec![("tofu".into(), engine.clone())],
        image_overrides: vec![("example.com/tool".into(), PathBuf::from("/bin/echo"))],
        ..SimConfig::default()
    })
    .await?;
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "ovr"}, "spec": {"restartPolicy": "Never", "containers": [
            {"name": "direct", "image": "ghcr.io/opentofu/opentofu:1.10", "command": ["/usr/local/bin/tofu", "test"], "args": ["-json"]},
            sh("nested", "tofu version"),
            {"name": "entry", "image": "example.com/tool:1.0", "args": ["from", "image"]}
        ]}}))?,
    )
    .await?;
    wait_for(&pods, "ovr", "success", |p| phase(p) == "Succeeded").await?;
    let log = |c: &str| {
        let pods = pods.clone();
        let c = c.to_string();
        async move {
            pods.logs(
                "ovr",
                &LogParams {
                    container: Some(c),
                    ..LogParams::default()
                },
            )
            .await
        }
    };
    assert_eq!(log("direct").await?, "engine test -json\n");
    assert_eq!(log("nested").await?, "engine version\n");
    assert_eq!(log("entry").await?, "from image\n");
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "noimg"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?,
    )
    .await?;
    let p = wait_for(&pods, "noimg", "the pull error", |p| {
        status(p)["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    })
    .await?;
    assert_eq!(phase(&p), "Pending");
    // Nothing runs, so deletion is immediate after the kubelet's last word.
    pods.delete("noimg", &DeleteParams::default()).await?;
    wait_gone(&pods, "noimg", Duration::from_secs(3)).await?;
    sim.shutdown().await;
    Ok(())
}

/// Copies a node that went away: Pods that were Running when the simulator stopped are
/// Failed (reason `NodeLost`) when it opens again, their running containers terminated
/// with `ContainerStatusUnknown`, since their processes are gone.
#[tokio::test]
async fn restart_marks_running_pods_lost() -> R {
    let tmp = tempfile::tempdir()?;
    let config = SimConfig {
        data_dir: Some(tmp.path().to_path_buf()),
        ..SimConfig::default()
    };
    let (sim, pods) = sim_with(config.clone()).await?;
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "long"}, "spec": {"restartPolicy": "Never", "containers": [sh("c", "echo up; sleep 60")]}}))?,
    )
    .await?;
    wait_for(&pods, "long", "running", |p| phase(p) == "Running").await?;
    read_line(
        sim.pods_dir()
            .join(uid(&pods.get("long").await?))
            .join("logs/c.log"),
    )
    .await?;
    sim.shutdown().await;
    let (sim, pods) = sim_with(config).await?;
    let p = pods.get("long").await?;
    let s = status(&p);
    assert_eq!(
        (s["phase"].as_str(), s["reason"].as_str()),
        (Some("Failed"), Some("NodeLost")),
        "{s}"
    );
    assert_eq!(
        s["containerStatuses"][0]["state"]["terminated"]["reason"],
        "ContainerStatusUnknown"
    );
    assert_eq!(pods.logs("long", &LogParams::default()).await?, "up\n");
    pods.delete("long", &DeleteParams::default()).await?;
    assert!(pods.get_opt("long").await?.is_none());
    sim.shutdown().await;
    Ok(())
}

/// Copies a cluster without a node (`run_pods: false`): Pods stay Pending and
/// unscheduled, and are deleted at once.
#[tokio::test]
async fn without_a_node_pods_are_stored_only() -> R {
    let (sim, pods) = sim_with(SimConfig {
        run_pods: false,
        ..SimConfig::default()
    })
    .await?;
    pods.create(
        &PostParams::default(),
        &pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [sh("c", "exit 0")]}}))?,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p = pods.get("p").await?;
    assert_eq!(phase(&p), "Pending");
    assert!(p.spec.and_then(|s| s.node_name).is_none());
    pods.delete("p", &DeleteParams::default()).await?;
    assert!(pods.get_opt("p").await?.is_none());
    sim.shutdown().await;
    Ok(())
}
