//! Guarded watches (issue 10, DESIGN.md §8), against the cluster simulator: an object
//! that does not deserialize — here a Workspace whose `spec.name` is a number and an
//! Organization whose `spec.settings` is a string, stored while the CRD schema allowed
//! anything, as after a schema change — is reported (a Warning `MalformedObject` Event and
//! `terrace_watch_malformed_objects_total`) and skipped, and every controller carries on
//! with the good objects; once fixed, the object is reconciled like any other. Relies on
//! kube-apiserver validating objects against the CRD schema at write time only.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;
use terrace_crds::constants::{CONDITION_READY, LABEL_ID};
use terrace_crds::{Organization, OrganizationSpec, Workspace, WorkspaceSpec};
use tokio::sync::oneshot;

use crate::common::{self, E, R, eventually};

/// Replaces the schema of `crd`'s `spec` with one that accepts anything, so a malformed
/// object can be stored (the way objects written before a schema change are).
async fn loosen(client: &Client, mut crd: CustomResourceDefinition) -> R {
    let mut v = serde_json::to_value(&crd)?;
    v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    crd = serde_json::from_value(v)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply("terrace-tests").force();
    crds.patch(&crd.name_any(), &pp, &Patch::Apply(&crd))
        .await?;
    Ok(())
}

/// Creates `manifest` of kind `ar` (in `ns`), retrying while the simulator picks up a
/// changed CRD.
async fn create_raw(
    client: &Client,
    ar: &ApiResource,
    ns: Option<&str>,
    manifest: serde_json::Value,
) -> R {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let obj: DynamicObject = serde_json::from_value(manifest)?;
    eventually("the malformed object stored", || async {
        api.create(&PostParams::default(), &obj).await.ok()
    })
    .await?;
    Ok(())
}

fn is_ready(conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == CONDITION_READY && c.status == "True")
}

async fn events_for(client: &Client, ns: &str, object: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

async fn wait_workspace_ready(api: &Api<Workspace>, name: &str) -> Result<Workspace, E> {
    eventually(&format!("workspace {name} Ready"), || async {
        let ws = api.get(name).await.ok()?;
        ws.status
            .as_ref()
            .is_some_and(|s| is_ready(&s.conditions))
            .then_some(ws)
    })
    .await
}

/// A malformed Workspace and a malformed Organization in the cluster before the operator
/// starts do not stop its lists: the good Organization gets its namespace and default
/// project, good workspaces their IDs and Ready (also one created afterwards), each
/// malformed object is reported once by a Warning Event and counted in the metric, and
/// the broken workspace, once fixed, is reconciled too.
#[tokio::test]
async fn malformed_objects_are_reported_and_skipped() -> R {
    let (_sim, client) = common::cluster(false).await?;
    let orgs: Api<Organization> = Api::all(client.clone());
    orgs.create(
        &PostParams::default(),
        &Organization {
            metadata: ObjectMeta {
                name: Some("acme".into()),
                ..Default::default()
            },
            spec: OrganizationSpec::default(),
            status: None,
        },
    )
    .await?;
    // The namespace exists ahead (opted in for acme), so workspaces are in the cluster
    // before the operator starts and lists them.
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
        "metadata": {"name": "acme", "annotations": {"terrace.dev/adopt": "acme"}}
    }))?;
    Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;

    loosen(&client, Workspace::crd()).await?;
    loosen(&client, Organization::crd()).await?;
    let ws_ar = ApiResource::erase::<Workspace>(&());
    let org_ar = ApiResource::erase::<Organization>(&());
    create_raw(
        &client,
        &ws_ar,
        Some("acme"),
        json!({"apiVersion": "terrace.dev/v1alpha1", "kind": "Workspace",
               "metadata": {"name": "broken"}, "spec": {"name": 42}}),
    )
    .await?;
    create_raw(
        &client,
        &org_ar,
        None,
        json!({"apiVersion": "terrace.dev/v1alpha1", "kind": "Organization",
               "metadata": {"name": "broken"}, "spec": {"settings": "nope"}}),
    )
    .await?;
    common::install_crds(&client).await?;

    let workspaces: Api<Workspace> = Api::namespaced(client.clone(), "acme");
    let good = Workspace {
        metadata: ObjectMeta {
            name: Some("good".into()),
            ..Default::default()
        },
        spec: WorkspaceSpec {
            name: "good".into(),
            ..WorkspaceSpec::default_for_create()
        },
        status: None,
    };
    workspaces.create(&PostParams::default(), &good).await?;

    let (stop, stopped) = oneshot::channel::<()>();
    let operator = tokio::spawn(terrace_operator::run(
        client.clone(),
        terrace_operator::Settings::default(),
        async move {
            let _ = stopped.await;
        },
    ));

    eventually("acme Ready", || async {
        let org = orgs.get("acme").await.ok()?;
        org.status
            .as_ref()
            .is_some_and(|s| is_ready(&s.conditions))
            .then_some(())
    })
    .await?;
    let ws = wait_workspace_ready(&workspaces, "good").await?;
    assert!(ws.labels().contains_key(LABEL_ID));
    let mut later = good.clone();
    later.metadata.name = Some("later".into());
    later.spec.name = "later".into();
    workspaces.create(&PostParams::default(), &later).await?;
    wait_workspace_ready(&workspaces, "later").await?;

    for (ns, name) in [("acme", "broken"), ("default", "broken")] {
        let reported = eventually(
            &format!("MalformedObject event for {ns}/{name}"),
            || async {
                let e = events_for(&client, ns, name, "MalformedObject").await;
                (!e.is_empty()).then_some(e)
            },
        )
        .await?;
        assert_eq!(reported.len(), 1, "reported once: {reported:?}");
        assert_eq!(reported[0].type_.as_deref(), Some("Warning"));
    }
    let metrics = terrace_operator::metrics::encode();
    for kind in ["Workspace", "Organization"] {
        let line = format!("terrace_watch_malformed_objects_total{{kind=\"{kind}\"}} 1");
        assert!(metrics.contains(&line), "{line} not in\n{metrics}");
    }
    // The broken objects were skipped, not reconciled.
    let broken = Api::<DynamicObject>::namespaced_with(client.clone(), "acme", &ws_ar)
        .get("broken")
        .await?;
    assert!(!broken.labels().contains_key(LABEL_ID));

    // Fixed, the workspace is reconciled like any other.
    workspaces
        .patch(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"name": "fixed"}})),
        )
        .await?;
    let fixed = wait_workspace_ready(&workspaces, "broken").await?;
    assert!(fixed.labels().contains_key(LABEL_ID));

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), operator)
        .await
        .map_err(|_| "the operator did not stop")??;
    Ok(())
}
