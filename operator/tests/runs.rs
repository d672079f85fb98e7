//! The run controller against the cluster simulator with the real operator, for what the
//! CLI end-to-end tests meet only by chance: a phase Pod the controller finds running or
//! already ended while the run still reads queued (its move to `planning` was not
//! recorded — the write lost to a concurrent one, or the engine failed at once). The run
//! still ends up naming the Pod in `status.plan.podName`, which the API server reads the
//! plan's log through; without it the CLI shows an errored plan with no reason.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::constants::LABEL_ID;
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Run, RunSpec, Workspace};
use tokio::sync::oneshot;

use crate::common::{self, E, R, eventually};

const NS: &str = "acme";

/// A simulator whose node runs nothing (Pod states are written by the test), the
/// operator, Organization `acme` and Workspace `w`.
async fn start() -> Result<(terrace_simulator::Simulator, Client, oneshot::Sender<()>), E> {
    let (sim, client) = common::cluster(false).await?;
    let settings = terrace_operator::Settings {
        api_internal_url: "http://api.test:8080".into(),
        ..Default::default()
    };
    let stop = common::operator(&sim, settings).await?;
    common::organization(&client, NS).await?;
    Api::<Workspace>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &common::workspace("w", "w", None))
        .await?;
    Ok((sim, client, stop))
}

/// A run of `w` that already planned (so the controller leaves it be until the test moves
/// it back to `plan_queued`).
async fn planned_run(runs: &Api<Run>) -> Result<Run, E> {
    let id = new_id(IdKind::Run);
    let name = object_name_for_id(&id);
    let mut run = Run::new(
        &name,
        RunSpec {
            workspace: "w".into(),
            configuration_version: "cv".into(),
            refresh: true,
            plan_only: true,
            ..RunSpec::default()
        },
    );
    run.metadata.labels = Some([(LABEL_ID.to_owned(), id.clone())].into());
    runs.create(&PostParams::default(), &run).await?;
    Ok(runs
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"id": id, "status": "planned"}})),
        )
        .await?)
}

/// The plan Pod of `run` (controlled by it) with its `engine` container in `state`.
async fn plan_pod(pods: &Api<Pod>, run: &Run, state: serde_json::Value) -> R {
    let name = format!("{}-plan", run.name_any());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [run.controller_owner_ref(&())]},
        "spec": {"containers": [{"name": "engine", "image": "terrace"}]},
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running",
            "containerStatuses": [{"name": "engine", "image": "terrace", "imageID": "",
                "ready": false, "restartCount": 0, "state": state}]}})),
    )
    .await?;
    Ok(())
}

async fn queue_again(runs: &Api<Run>, run: &Run) -> R {
    runs.patch_status(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"status": "plan_queued"}})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_phase_pod_found_ahead_of_the_runs_state_is_named_in_its_status() -> R {
    let (_sim, client, _stop) = start().await?;
    let runs: Api<Run> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // The engine failed before the controller saw it run: the run errors with the
    // runner's reason and names the Pod, so the plan's log can be read.
    let failed = planned_run(&runs).await?;
    let report = json!({"ok": false, "message": "Engine version mismatch: wanted ~> 1.5.0"});
    plan_pod(
        &pods,
        &failed,
        json!({"terminated": {"exitCode": 1, "message": report.to_string()}}),
    )
    .await?;
    queue_again(&runs, &failed).await?;
    let ended = eventually("the failed run errored", || async {
        runs.get(&failed.name_any())
            .await
            .ok()
            .filter(|r| status_of(r).0.as_deref() == Some("errored"))
    })
    .await?;
    let s = ended.status.clone().unwrap_or_default();
    assert_eq!(
        s.plan.pod_name.as_deref(),
        Some(format!("{}-plan", failed.name_any()).as_str()),
        "{s:?}"
    );
    assert!(
        s.plan.started_at.is_some() && s.plan.finished_at.is_some(),
        "{s:?}"
    );
    assert!(
        s.message
            .as_deref()
            .unwrap_or_default()
            .contains("Engine version mismatch"),
        "{s:?}"
    );

    // The engine runs while the run reads queued: the run moves to planning, naming it.
    let running = planned_run(&runs).await?;
    plan_pod(
        &pods,
        &running,
        json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
    )
    .await?;
    queue_again(&runs, &running).await?;
    let moved = eventually("the running run planning", || async {
        runs.get(&running.name_any())
            .await
            .ok()
            .filter(|r| status_of(r).0.as_deref() == Some("planning"))
    })
    .await?;
    assert_eq!(
        status_of(&moved).1.as_deref(),
        Some(format!("{}-plan", running.name_any()).as_str())
    );
    Ok(())
}

/// The run's state and its plan's Pod.
fn status_of(r: &Run) -> (Option<String>, Option<String>) {
    let s = r.status.clone().unwrap_or_default();
    (s.status, s.plan.pod_name)
}

/// A phase Pod whose engine cannot even start (the container runtime's StartError) errors
/// its run with the cause in all three places a person looks: the run's status message,
/// a Warning Event on the run, and the log the CLI shows (archived with a `terrace:` line,
/// although the engine wrote nothing).
#[tokio::test]
async fn a_pod_whose_engine_cannot_start_says_why_everywhere() -> R {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::api::events::v1::Event;
    let (_sim, client, _stop) = start().await?;
    let runs: Api<Run> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let run = planned_run(&runs).await?;
    let why = "exec: \"/tools/terrace\": no such file or directory";
    plan_pod(
        &pods,
        &run,
        json!({"terminated": {"exitCode": 128, "reason": "StartError", "message": why}}),
    )
    .await?;
    pods.patch_status(
        &format!("{}-plan", run.name_any()),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Failed"}})),
    )
    .await?;
    queue_again(&runs, &run).await?;
    let ended = eventually("the run errored", || async {
        runs.get(&run.name_any())
            .await
            .ok()
            .filter(|r| status_of(r).0.as_deref() == Some("errored"))
    })
    .await?;
    let expected = format!("the plan Pod could not start its engine: {why}");
    let message = ended
        .status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    assert_eq!(message, expected);
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let noted = eventually("the Warning Event", || async {
        events.list(&Default::default()).await.ok().and_then(|l| {
            l.items.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&run.name_any())
                    && e.type_.as_deref() == Some("Warning")
            })
        })
    })
    .await?;
    assert!(
        noted
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(&expected),
        "{noted:?}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let archive = cms.get(&format!("{}-plan-log", run.name_any())).await?;
    let gz = archive
        .binary_data
        .as_ref()
        .and_then(|d| d.get("log.gz"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let mut log = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gz[..]), &mut log)?;
    assert!(log.contains(&format!("terrace: {expected}")), "{log:?}");
    Ok(())
}

/// No decision from a cache before its first list (issue 25): an operator whose
/// Workspace cache cannot fill (its identity may not read workspaces yet, as a slow
/// first list on a large cluster) leaves the runs in flight alone instead of erroring
/// them with "the workspace is gone", and carries on once the cache fills.
#[tokio::test]
async fn a_run_is_not_decided_from_an_empty_workspace_cache() -> R {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    // The organization, its namespace and workspace `w` as an earlier operator left them.
    let (sim, client, first) = start().await?;
    let workspaces: Api<Workspace> = Api::namespaced(client.clone(), NS);
    eventually("the workspace's ID", || async {
        workspaces
            .get("w")
            .await
            .ok()
            .filter(|w| w.status.as_ref().and_then(|s| s.id.as_ref()).is_some())
    })
    .await?;
    drop(first);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let runs: Api<Run> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let run = planned_run(&runs).await?;
    plan_pod(
        &pods,
        &run,
        json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
    )
    .await?;
    runs.patch_status(
        &run.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"status": "planning"}})),
    )
    .await?;
    // The chart's rules without workspaces: the operator's workspace cache stays empty.
    let full = common::chart_operator_rules()?;
    let blind: Vec<_> = full
        .iter()
        .cloned()
        .filter_map(|mut r| {
            if let Some(res) = r.resources.as_mut() {
                res.retain(|x| x != "workspaces");
                if res.is_empty() {
                    return None;
                }
            }
            Some(r)
        })
        .collect();
    let op = sim
        .service_account_client("terrace-system", "terrace-operator-blind", blind)
        .await?;
    let settings = terrace_operator::Settings {
        api_internal_url: "http://api.test:8080".into(),
        ..Default::default()
    };
    let _stop = common::operator_as(&op, settings);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let seen = runs.get(&run.name_any()).await?;
    assert_eq!(
        status_of(&seen).0.as_deref(),
        Some("planning"),
        "{:?}",
        seen.status
    );
    assert!(
        pods.get_opt(&format!("{}-plan", run.name_any()))
            .await?
            .is_some()
    );
    // The cache fills: the run goes on (its Pod runs, so it stays planning).
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .patch(
            "terrace-operator-blind",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": full})),
        )
        .await?;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let seen = runs.get(&run.name_any()).await?;
    assert_eq!(
        status_of(&seen).0.as_deref(),
        Some("planning"),
        "{:?}",
        seen.status
    );
    Ok(())
}

/// A phase Pod no node takes (issue 25): the run says what it waits for, with the
/// scheduler's words, and errors with that cause once `pod_start_timeout` has passed.
#[tokio::test]
async fn a_pod_no_node_takes_is_named_then_times_out() -> R {
    let (sim, client) = common::cluster(false).await?;
    let settings = terrace_operator::Settings {
        api_internal_url: "http://api.test:8080".into(),
        // Past the wait after which the log keeps a note (5 s).
        pod_start_timeout: std::time::Duration::from_secs(9),
        ..Default::default()
    };
    let _stop = common::operator(&sim, settings).await?;
    common::organization(&client, NS).await?;
    Api::<Workspace>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &common::workspace("w", "w", None))
        .await?;
    let runs: Api<Run> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let run = planned_run(&runs).await?;
    let name = format!("{}-plan", run.name_any());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [run.controller_owner_ref(&())]},
        "spec": {"containers": [{"name": "engine", "image": "terrace"}]},
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let why = "0/3 nodes are available: 3 Insufficient memory.";
    pods.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": why,
        }]}})),
    )
    .await?;
    queue_again(&runs, &run).await?;
    let waiting = eventually("the run names what it waits for", || async {
        runs.get(&run.name_any()).await.ok().filter(|r| {
            r.status.as_ref().and_then(|s| s.message.as_deref())
                == Some(&format!("waiting for a node: {why}"))
        })
    })
    .await?;
    assert_eq!(status_of(&waiting).0.as_deref(), Some("planning"));
    // The first wait is kept for the head of the plan's log.
    let noted = eventually("the plan keeps what its Pod waited for", || async {
        runs.get(&run.name_any())
            .await
            .ok()
            .and_then(|r| r.status?.plan.wait_note)
    })
    .await?;
    assert_eq!(noted, format!("waiting for a node: {why}"));
    let ended = eventually("the run errored after the start timeout", || async {
        runs.get(&run.name_any())
            .await
            .ok()
            .filter(|r| status_of(r).0.as_deref() == Some("errored"))
    })
    .await?;
    let status = ended.status.unwrap_or_default();
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("did not start within") && message.contains(why),
        "{message}"
    );
    assert_eq!(
        status.plan.wait_note,
        Some(noted),
        "the note is never rewritten"
    );
    Ok(())
}
