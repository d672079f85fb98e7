//! Issue 12, item 1 (namespace takeover), against the cluster simulator: an Organization
//! never adopts a namespace terrace did not create unless the namespace opts in, never
//! uses a reserved one, and deleting it never deletes a namespace it did not create.
//! Relies on kube-apiserver's ownerReferences and garbage collection (dependents whose
//! owners are all gone are deleted), and on events.k8s.io/v1 Events.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use terrace_crds::constants::{
    ANNOTATION_ADOPT, ANNOTATION_CREATED_FOR, CONDITION_READY, CONDITION_STALLED,
    LABEL_DEFAULT_PROJECT, LABEL_ORGANIZATION,
};
use terrace_crds::{Organization, OrganizationSpec, Project, Workspace};
use tokio::sync::oneshot;

use crate::common::{self, E, R, eventually};

/// Starts one operator; dropping the sender stops it.
fn start_operator(client: &Client) -> oneshot::Sender<()> {
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(terrace_operator::run(
        client.clone(),
        terrace_operator::Settings {
            release_namespace: Some("terrace-system".into()),
            ..Default::default()
        },
        async move {
            let _ = rx.await;
        },
    ));
    tx
}

async fn namespace_with_configmap(client: &Client, name: &str, annotations: &[(&str, &str)]) -> R {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("keep".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "owner".to_owned(),
            "not terrace".to_owned(),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), name)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

async fn create_org(client: &Client, name: &str) -> R {
    let org = Organization {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: OrganizationSpec::default(),
        status: None,
    };
    Api::<Organization>::all(client.clone())
        .create(&PostParams::default(), &org)
        .await?;
    Ok(())
}

/// (status, reason, message) of condition `type_` of Organization `name`.
async fn condition(client: &Client, name: &str, type_: &str) -> Option<(String, String, String)> {
    let org = Api::<Organization>::all(client.clone())
        .get(name)
        .await
        .ok()?;
    let c = org
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

async fn wait_condition(
    client: &Client,
    name: &str,
    type_: &str,
    reason: Option<&str>,
) -> Result<String, E> {
    eventually(&format!("{name} {type_} {reason:?}"), || async {
        let (status, r, message) = condition(client, name, type_).await?;
        (status == "True" && reason.is_none_or(|want| want == r)).then_some(message)
    })
    .await
}

async fn events_for(client: &Client, object: &str, reason: &str) -> Vec<Event> {
    // Events about cluster-scoped objects land in the default namespace.
    Api::<Event>::namespaced(client.clone(), "default")
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

/// Deletes Organization `name` and waits until it is gone, then gives the garbage
/// collector time to act on its dependents.
async fn delete_org(client: &Client, name: &str) -> R {
    let orgs: Api<Organization> = Api::all(client.clone());
    orgs.delete(name, &DeleteParams::default()).await?;
    eventually(&format!("{name} gone"), || async {
        orgs.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

/// The namespace `name` and its ConfigMap `keep`, unharmed, with neither an
/// ownerReference nor terrace's organization label.
async fn untouched(client: &Client, name: &str) -> Result<Namespace, E> {
    let ns = Api::<Namespace>::all(client.clone()).get(name).await?;
    assert!(
        ns.metadata.deletion_timestamp.is_none(),
        "{name} is being deleted"
    );
    assert!(
        ns.owner_references().is_empty(),
        "{:?}",
        ns.owner_references()
    );
    let cm = Api::<ConfigMap>::namespaced(client.clone(), name)
        .get("keep")
        .await?;
    assert_eq!(
        cm.data.and_then(|d| d.get("owner").cloned()).as_deref(),
        Some("not terrace")
    );
    Ok(ns)
}

/// A namespace someone else created (here `foreign`, holding a ConfigMap) is not adopted
/// by the Organization of the same name: the Organization is Stalled (`ForeignNamespace`,
/// saying how to opt in) with a Warning Event, the namespace gets no ownerReference and
/// no organization label, no default project appears in it, a workspace put there finds
/// no organization, and deleting the Organization leaves the namespace and its ConfigMap. A reserved name (`kube-public`)
/// is never used either (`NamespaceReserved`).
#[tokio::test]
async fn foreign_and_reserved_namespaces_are_not_taken() -> R {
    let (_sim, client) = common::cluster(false).await?;
    namespace_with_configmap(&client, "foreign", &[]).await?;
    let _stop = start_operator(&client);

    create_org(&client, "foreign").await?;
    let message = wait_condition(
        &client,
        "foreign",
        CONDITION_STALLED,
        Some("ForeignNamespace"),
    )
    .await?;
    assert!(message.contains("terrace.dev/adopt=foreign"), "{message}");
    assert_eq!(
        condition(&client, "foreign", CONDITION_READY)
            .await
            .map(|c| c.0)
            .as_deref(),
        Some("False")
    );
    let warned = eventually("the ForeignNamespace event", || async {
        let e = events_for(&client, "foreign", "ForeignNamespace").await;
        (!e.is_empty()).then_some(e)
    })
    .await?;
    assert_eq!(warned[0].type_.as_deref(), Some("Warning"));
    let ns = untouched(&client, "foreign").await?;
    assert!(!ns.labels().contains_key(LABEL_ORGANIZATION));
    let projects = Api::<Project>::namespaced(client.clone(), "foreign")
        .list(&ListParams::default())
        .await?;
    assert!(projects.items.is_empty(), "a default project was created");

    // The organization owns nothing in the namespace it may not use.
    let workspaces: Api<Workspace> = Api::namespaced(client.clone(), "foreign");
    workspaces
        .create(&PostParams::default(), &common::workspace("w", "w", None))
        .await?;
    eventually("the workspace stalled without an organization", || async {
        let ws = workspaces.get("w").await.ok()?;
        ws.status?
            .conditions
            .iter()
            .any(|c| {
                c.type_ == CONDITION_STALLED
                    && c.status == "True"
                    && c.reason == "OrganizationNotFound"
            })
            .then_some(())
    })
    .await?;

    create_org(&client, "kube-public").await?;
    let message = wait_condition(
        &client,
        "kube-public",
        CONDITION_STALLED,
        Some("NamespaceReserved"),
    )
    .await?;
    assert!(message.contains("kube-"), "{message}");
    let public = Api::<Namespace>::all(client.clone())
        .get("kube-public")
        .await?;
    assert!(public.owner_references().is_empty());
    assert!(!public.labels().contains_key(LABEL_ORGANIZATION));

    delete_org(&client, "foreign").await?;
    untouched(&client, "foreign").await?;
    delete_org(&client, "kube-public").await?;
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt("kube-public")
            .await?
            .is_some_and(|ns| ns.metadata.deletion_timestamp.is_none())
    );
    Ok(())
}

/// A namespace whose owner opted in (`terrace.dev/adopt: shared`) is used by Organization
/// `shared`: Ready, the organization label and the default project, but no
/// ownerReference, so deleting the Organization leaves the namespace and what was in it.
/// A namespace terrace creates itself is owned and marked `terrace.dev/created-for`, and
/// goes with its Organization.
#[tokio::test]
async fn opted_in_namespaces_are_adopted_and_only_created_ones_deleted() -> R {
    let (_sim, client) = common::cluster(false).await?;
    namespace_with_configmap(&client, "shared", &[(ANNOTATION_ADOPT, "shared")]).await?;
    let _stop = start_operator(&client);

    create_org(&client, "shared").await?;
    wait_condition(&client, "shared", CONDITION_READY, None).await?;
    let ns = untouched(&client, "shared").await?;
    assert_eq!(
        ns.labels().get(LABEL_ORGANIZATION).map(String::as_str),
        Some("shared")
    );
    assert!(!ns.annotations().contains_key(ANNOTATION_CREATED_FOR));
    let default = Api::<Project>::namespaced(client.clone(), "shared")
        .get("default")
        .await?;
    assert_eq!(
        default
            .labels()
            .get(LABEL_DEFAULT_PROJECT)
            .map(String::as_str),
        Some("true")
    );

    create_org(&client, "fresh").await?;
    wait_condition(&client, "fresh", CONDITION_READY, None).await?;
    let created = Api::<Namespace>::all(client.clone()).get("fresh").await?;
    assert_eq!(
        created
            .annotations()
            .get(ANNOTATION_CREATED_FOR)
            .map(String::as_str),
        Some("fresh")
    );
    let owners: Vec<(&str, Option<bool>)> = created
        .owner_references()
        .iter()
        .map(|o| (o.name.as_str(), o.controller))
        .collect();
    assert_eq!(owners, [("fresh", Some(true))]);

    delete_org(&client, "shared").await?;
    untouched(&client, "shared").await?;
    delete_org(&client, "fresh").await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    eventually(
        "the namespace terrace created goes with its organization",
        || async {
            let ns = namespaces.get_opt("fresh").await.ok()?;
            ns.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
                .then_some(())
        },
    )
    .await?;
    Ok(())
}
