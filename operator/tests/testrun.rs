//! The TestRun controller against the cluster simulator with Pods stored only (the test
//! plays the kubelet by patching Pod status): the Pod and Secret it creates, the
//! concurrency limit, results from the termination message, cancel, and a Pod deleted
//! from under a run. Each test's doc comment names the Kubernetes behaviour it relies on.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::common::SecretKeyRef;
use terrace_crds::{
    ConfigurationVersion, ConfigurationVersionSpec, RegistryModule, RegistryModuleSpec,
    RunVariable, TestRun, TestRunSpec, TestVariable, TestVariableSpec,
};
use terrace_operator::testpod::{FINALIZER, LABEL_TEST_RUN, LOG_ARCHIVE_KEY};
use terrace_simulator::Simulator;
use tokio::sync::oneshot;

use crate::common::{self, E, R, eventually};

const NS: &str = "acme";

const PASS: &str = r#"{"status":"pass","passed":2,"failed":0,"errored":0,"skipped":1,"exitCode":0,"interrupted":false}"#;
const INTERRUPTED: &str = r#"{"status":"pass","passed":1,"failed":0,"errored":0,"skipped":0,"exitCode":0,"interrupted":true}"#;

struct Cluster {
    sim: Simulator,
    client: Client,
    stop: Option<oneshot::Sender<()>>,
}

impl Cluster {
    /// A simulator with the CRDs, the operator (with `concurrency`), Organization `acme`,
    /// module `vpc` and an uploaded configuration version `cv1`.
    async fn start(concurrency: u32) -> Result<Cluster, E> {
        // The test plays the kubelet (Pod status patches), so the simulated node does not
        // run the containers.
        let (sim, client) = common::cluster(false).await?;
        let settings = terrace_operator::Settings {
            test_run_concurrency: concurrency,
            api_internal_url: "http://api.test:8080".into(),
            ..Default::default()
        };
        let tx = common::operator(&sim, settings).await?;
        common::organization(&client, NS).await?;
        let modules: Api<RegistryModule> = Api::namespaced(client.clone(), NS);
        modules
            .create(
                &PostParams::default(),
                &RegistryModule::new(
                    "vpc",
                    RegistryModuleSpec {
                        name: "vpc".into(),
                        provider: "aws".into(),
                        namespace: None,
                        registry_name: "private".into(),
                        publish_only_tested: None,
                    },
                ),
            )
            .await?;
        let cvs: Api<ConfigurationVersion> = Api::namespaced(client.clone(), NS);
        let mut cv = ConfigurationVersion::new(
            "cv1",
            ConfigurationVersionSpec {
                ingress_attributes: None,
                module: Some("vpc".into()),
                workspace: None,
                auto_queue_runs: true,
                speculative: false,
                source: "svc-api".into(),
                provisional: false,
            },
        );
        cv.metadata.labels = Some(
            [(
                "terrace.dev/id".to_owned(),
                "cv-aaaaaaaaaaaaaaaa".to_owned(),
            )]
            .into(),
        );
        cvs.create(&PostParams::default(), &cv).await?;
        cvs.patch_status(
            "cv1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"status": "uploaded"}})),
        )
        .await?;
        Ok(Cluster {
            sim,
            client,
            stop: Some(tx),
        })
    }

    fn runs(&self) -> Api<TestRun> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn create_run(&self, name: &str, variables: Vec<RunVariable>) -> R {
        let run = TestRun::new(
            name,
            TestRunSpec {
                module: "vpc".into(),
                configuration_version: "cv1".into(),
                verbose: true,
                test_directory: "tests".into(),
                filters: vec!["a.tftest.hcl".into()],
                variables,
                source: "svc-api".into(),
            },
        );
        self.runs().create(&PostParams::default(), &run).await?;
        Ok(())
    }

    /// Waits until run `name` has status `want`, returning its status as JSON.
    async fn status(&self, name: &str, want: &str) -> Result<Value, E> {
        let runs = self.runs();
        let res = eventually(&format!("run {name} {want}"), || async {
            let r = runs.get(name).await.ok()?;
            let s = serde_json::to_value(r.status?).ok()?;
            (s["status"] == want).then_some(s)
        })
        .await;
        if res.is_err() {
            let last = runs.get(name).await?;
            return Err(format!(
                "run {name} did not become {want}: {}",
                serde_json::to_string(&last)?
            )
            .into());
        }
        res
    }

    /// Plays the kubelet: writes the engine container's state.
    async fn engine_state(&self, pod: &str, phase: &str, state: Value) -> R {
        let status = json!({"status": {
            "phase": phase,
            "containerStatuses": [{
                "name": "engine", "image": "img", "imageID": "", "ready": false,
                "restartCount": 0, "state": state,
            }],
        }});
        self.pods()
            .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    async fn terminate_engine(&self, pod: &str, message: &str) -> R {
        let state =
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "message": message}});
        self.engine_state(pod, "Succeeded", state).await
    }

    /// A deleted Pod whose engine still runs (tearing down, writing its log) keeps the
    /// finalizer: its log is archived only once the engine has ended.
    async fn held_while_engine_runs(&self, pod: &str) -> R {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let p = self.pods().get(pod).await?;
        assert!(
            p.metadata.deletion_timestamp.is_some(),
            "{pod} not deleting"
        );
        assert!(
            p.finalizers().iter().any(|f| f == FINALIZER),
            "{pod} let go of while its engine runs"
        );
        Ok(())
    }

    async fn start_engine(&self, pod: &str) -> R {
        let state = json!({"running": {"startedAt": "2025-01-01T00:00:00Z"}});
        self.engine_state(pod, "Running", state).await
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Creating a TestRun produces its token Secret and its Pod: owner reference (as the
/// garbage collector follows), finalizer, labels, the engine command line, module
/// variables as env (a sensitive one via secretKeyRef, as the kubelet resolves them) and
/// the run's variables as a var-file; the run is queued with its Pod's name.
#[tokio::test]
async fn run_gets_secret_and_pod() -> R {
    let c = Cluster::start(10).await?;
    let vars: Api<TestVariable> = Api::namespaced(c.client.clone(), NS);
    for (name, key, value, from) in [
        ("v1", "TF_VAR_region", "eu-west-1", None),
        ("v2", "AWS_SECRET_ACCESS_KEY", "", Some(("vpc-vars", "aws"))),
    ] {
        let v = TestVariable::new(
            name,
            TestVariableSpec {
                module: "vpc".into(),
                key: key.into(),
                value: value.into(),
                value_from: from.map(|(n, k): (&str, &str)| SecretKeyRef {
                    name: n.into(),
                    key: k.into(),
                }),
                description: None,
                hcl: false,
                category: "env".into(),
                sensitive: from.is_some(),
            },
        );
        vars.create(&PostParams::default(), &v).await?;
    }
    c.create_run(
        "r1",
        vec![RunVariable {
            key: "region".into(),
            value: "\"us-east-1\"".into(),
        }],
    )
    .await?;
    let status = c.status("r1", "queued").await?;
    assert_eq!(status["podName"], "r1-run");
    assert!(status["statusTimestamps"]["queuedAt"].is_string());
    let run = c.runs().get("r1").await?;
    let run_id = run.labels()["terrace.dev/id"].clone();

    let pod = c.pods().get("r1-run").await?;
    assert_eq!(pod.finalizers(), [FINALIZER.to_owned()]);
    assert_eq!(pod.labels()[LABEL_TEST_RUN], run_id);
    let owner = &pod.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("TestRun", Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), run.uid());
    let spec = pod.spec.as_ref().ok_or("no spec")?;
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let fetch = &spec.init_containers.as_ref().ok_or("no init")?[1];
    let fetch_cmd = fetch.command.clone().unwrap_or_default();
    assert!(
        fetch_cmd
            .contains(&"http://api.test:8080/api/v2/test-archives/cv-aaaaaaaaaaaaaaaa".to_owned())
    );
    let engine = &spec.containers[0];
    let cmd = engine.command.clone().unwrap_or_default();
    let engine_part: Vec<&str> = cmd
        .iter()
        .skip_while(|a| *a != "--")
        .skip(1)
        .map(String::as_str)
        .collect();
    assert_eq!(
        engine_part,
        [
            "tofu",
            "test",
            "-json",
            "-verbose",
            "-test-directory",
            "tests",
            "-filter",
            "a.tftest.hcl",
            "-var-file",
            "/var/run/terrace/run.tfvars"
        ]
    );
    let env = engine.env.clone().unwrap_or_default();
    let by_name = |n: &str| env.iter().find(|e| e.name == n).cloned();
    assert_eq!(
        by_name("TF_VAR_region").and_then(|e| e.value).as_deref(),
        Some("eu-west-1")
    );
    let secret_ref = by_name("AWS_SECRET_ACCESS_KEY")
        .and_then(|e| e.value_from)
        .and_then(|f| f.secret_key_ref)
        .ok_or("no secretKeyRef")?;
    assert_eq!(
        (secret_ref.name.as_str(), secret_ref.key.as_str()),
        ("vpc-vars", "aws")
    );

    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), NS);
    let secret = secrets.get("r1-run").await?;
    let data = secret.data.ok_or("no data")?;
    assert_eq!(data["token"].0.len(), 43);
    assert_eq!(data["run.tfvars"].0, b"region = \"us-east-1\"\n");
    assert_eq!(
        secret.metadata.owner_references.ok_or("no owner")?[0].name,
        "r1"
    );
    Ok(())
}

/// Global concurrency 1: the second run stays pending (Reconciling WaitingForSlot) until
/// the first run's engine terminates; the termination message (as the kubelet copies it
/// from the container's file) gives finished/pass with the counts, and the finalizer is
/// removed so the Pod can go.
#[tokio::test]
async fn concurrency_and_result() -> R {
    let c = Cluster::start(1).await?;
    c.create_run("r1", vec![]).await?;
    c.status("r1", "queued").await?;
    c.create_run("r2", vec![]).await?;
    let waiting = c.status("r2", "pending").await?;
    // Give the controller time to (wrongly) admit it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(c.pods().get_opt("r2-run").await?.is_none());
    let conditions = waiting["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(conditions.iter().any(|c| c["type"] == "Reconciling"
        && c["status"] == "True"
        && c["reason"] == "WaitingForSlot"));

    c.start_engine("r1-run").await?;
    let s = c.status("r1", "running").await?;
    assert!(s["statusTimestamps"]["startedAt"].is_string());
    c.terminate_engine("r1-run", PASS).await?;
    let s = c.status("r1", "finished").await?;
    assert_eq!(s["testStatus"], "pass");
    assert_eq!(
        (
            &s["testsPassed"],
            &s["testsFailed"],
            &s["testsErrored"],
            &s["testsSkipped"]
        ),
        (&json!(2), &json!(0), &json!(0), &json!(1))
    );
    assert!(s["statusTimestamps"]["finishedAt"].is_string());
    let pods = c.pods();
    eventually("the finalizer removed", || async {
        let p = pods.get_opt("r1-run").await.ok()?;
        p.is_none_or(|p| p.finalizers().is_empty()).then_some(())
    })
    .await?;
    c.status("r2", "queued").await?;
    Ok(())
}

/// Cancel (status.cancelRequestedAt, as the API server records it): the Pod is deleted
/// with a grace period (kube-apiserver keeps it, with deletionTimestamp, while our
/// finalizer holds it); when the engine ends the run is canceled and the Pod released.
#[tokio::test]
async fn cancel_deletes_the_pod() -> R {
    let c = Cluster::start(5).await?;
    c.create_run("r1", vec![]).await?;
    c.status("r1", "queued").await?;
    c.start_engine("r1-run").await?;
    c.status("r1", "running").await?;
    c.runs()
        .patch_status(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"cancelRequestedAt": "2025-01-01T00:00:00Z"}})),
        )
        .await?;
    let pods = c.pods();
    eventually("the Pod deleted", || async {
        let p = pods.get_opt("r1-run").await.ok()?;
        match p {
            None => Some(()),
            Some(p) => p.metadata.deletion_timestamp.is_some().then_some(()),
        }
    })
    .await?;
    // The run is still running until the engine ends.
    let s = serde_json::to_value(c.runs().get("r1").await?.status)?;
    assert_eq!(s["status"], "running");
    if pods.get_opt("r1-run").await?.is_some() {
        c.terminate_engine("r1-run", INTERRUPTED).await?;
    }
    let s = c.status("r1", "canceled").await?;
    assert!(s["statusTimestamps"]["canceledAt"].is_string());
    assert!(s["testStatus"].is_null());
    eventually("the Pod gone", || async {
        pods.get_opt("r1-run").await.ok()?.is_none().then_some(())
    })
    .await?;
    Ok(())
}

/// Force-cancel after cancel: the run is canceled at once (force-canceled-at set); the
/// Pod goes once its engine has been killed (its log archived complete).
#[tokio::test]
async fn force_cancel() -> R {
    let c = Cluster::start(5).await?;
    c.create_run("r1", vec![]).await?;
    c.status("r1", "queued").await?;
    c.start_engine("r1-run").await?;
    c.status("r1", "running").await?;
    c.runs()
        .patch_status(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "cancelRequestedAt": "2025-01-01T00:00:00Z",
                "forceCancelRequestedAt": "2025-01-01T00:00:01Z",
            }})),
        )
        .await?;
    let s = c.status("r1", "canceled").await?;
    assert!(s["statusTimestamps"]["forceCanceledAt"].is_string());
    let pods = c.pods();
    c.held_while_engine_runs("r1-run").await?;
    // The kubelet kills the engine (grace period 0: SIGKILL).
    let killed = json!({"terminated": {"exitCode": 137, "reason": "Error"}});
    c.engine_state("r1-run", "Failed", killed).await?;
    eventually("the Pod gone", || async {
        pods.get_opt("r1-run").await.ok()?.is_none().then_some(())
    })
    .await?;
    Ok(())
}

/// A Pod deleted by someone else (kubectl delete pod; kube-apiserver marks it with
/// deletionTimestamp while the finalizer holds it) errors the run with a message saying
/// so; the finalizer holds the Pod until the interrupted engine has ended. A Pod removed
/// completely does the same.
#[tokio::test]
async fn pod_deleted_externally() -> R {
    let c = Cluster::start(5).await?;
    c.create_run("r1", vec![]).await?;
    c.status("r1", "queued").await?;
    c.start_engine("r1-run").await?;
    c.status("r1", "running").await?;
    c.pods().delete("r1-run", &DeleteParams::default()).await?;
    let s = c.status("r1", "errored").await?;
    assert_eq!(s["message"], "the test Pod was deleted");
    assert!(s["statusTimestamps"]["erroredAt"].is_string());
    let pods = c.pods();
    c.held_while_engine_runs("r1-run").await?;
    c.terminate_engine("r1-run", INTERRUPTED).await?;
    eventually("the Pod gone", || async {
        pods.get_opt("r1-run").await.ok()?.is_none().then_some(())
    })
    .await?;
    Ok(())
}

/// An image the kubelet retries pulling (ImagePullBackOff: a registry's blip, a rate
/// limit) is waited for, the run saying so with the kubelet's words (issue 40 §4); an
/// image that can never be pulled (InvalidImageName) errors the run with the reason.
#[tokio::test]
async fn image_pull_failure() -> R {
    let c = Cluster::start(5).await?;
    c.create_run("r1", vec![]).await?;
    c.status("r1", "queued").await?;
    c.engine_state(
        "r1-run",
        "Pending",
        json!({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}),
    )
    .await?;
    let runs = c.runs();
    let waiting = eventually("the run says it waits for the image", || async {
        let r = runs.get("r1").await.ok()?;
        let s = r.status?;
        let m = s.message.unwrap_or_default();
        (m.contains("waiting for an image") && m.contains("ImagePullBackOff")).then_some(s.status)
    })
    .await?;
    assert_eq!(
        waiting.as_deref(),
        Some("queued"),
        "still queued, not errored"
    );
    c.engine_state(
        "r1-run",
        "Pending",
        json!({"waiting": {"reason": "InvalidImageName", "message": "couldn't parse image name"}}),
    )
    .await?;
    let s = c.status("r1", "errored").await?;
    let msg = s["message"].as_str().unwrap_or_default();
    assert!(msg.contains("InvalidImageName"), "{msg}");
    Ok(())
}

/// A canceled run's engine log outlives its Pod: before the finalizer goes, the log the
/// kubelet serves through `pods/log` (here written where the simulated node keeps the
/// container's captured output, since this test plays the kubelet) is copied, gzipped,
/// into ConfigMap `<pod>-log`, owned by the TestRun (so the garbage collector deletes it
/// with the run) and labelled with the run's ID.
#[tokio::test]
async fn log_archived_before_the_pod_goes() -> R {
    use std::io::Read;
    let c = Cluster::start(5).await?;
    c.create_run("r1", vec![]).await?;
    c.status("r1", "queued").await?;
    c.start_engine("r1-run").await?;
    c.status("r1", "running").await?;
    let pod = c.pods().get("r1-run").await?;
    let logs = c
        .sim
        .pods_dir()
        .join(pod.uid().unwrap_or_default())
        .join("logs");
    std::fs::create_dir_all(&logs)?;
    std::fs::write(logs.join("engine.log"), "engine saw the interrupt\n")?;
    c.runs()
        .patch_status(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"cancelRequestedAt": "2025-01-01T00:00:00Z"}})),
        )
        .await?;
    let pods = c.pods();
    eventually("the Pod deleting", || async {
        let p = pods.get_opt("r1-run").await.ok()??;
        p.metadata.deletion_timestamp.is_some().then_some(())
    })
    .await?;
    c.terminate_engine("r1-run", INTERRUPTED).await?;
    c.status("r1", "canceled").await?;
    eventually("the Pod gone", || async {
        pods.get_opt("r1-run").await.ok()?.is_none().then_some(())
    })
    .await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), NS);
    let cm = cms.get("r1-run-log").await?;
    let run = c.runs().get("r1").await?;
    let owner = cm.owner_references().first().cloned().ok_or("no owner")?;
    assert_eq!(
        (owner.kind.as_str(), Some(owner.uid)),
        ("TestRun", run.uid())
    );
    assert_eq!(
        cm.labels().get(LABEL_TEST_RUN),
        run.labels().get("terrace.dev/id")
    );
    let gz = cm
        .binary_data
        .and_then(|mut d| d.remove(LOG_ARCHIVE_KEY))
        .ok_or("no log.gz")?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz.0[..]).read_to_string(&mut text)?;
    assert_eq!(text, "engine saw the interrupt\n");
    Ok(())
}
