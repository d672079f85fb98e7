//! The operator's controllers against the cluster simulator: CRDs installed with
//! server-side apply, the operator running in-process, objects created the way `kubectl
//! apply` creates them (no ID label). Each test's doc comment names the behaviour it
//! checks and the Kubernetes behaviour it relies on.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use terrace_crds::common::TagBinding;
use terrace_crds::constants::{
    CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED, LABEL_DEFAULT_PROJECT, LABEL_ID,
    LABEL_ORGANIZATION,
};
use terrace_crds::ids::{IdKind, is_valid_id};
use terrace_crds::{
    Organization, OrganizationSpec, Project, ProjectSpec, SshKey, SshKeySpec, Workspace,
};
use terrace_simulator::Simulator;
use tokio::sync::oneshot;

use crate::common::{self, R, eventually};

/// A simulator with the terrace CRDs and `replicas` operators running against it.
struct Cluster {
    _sim: Simulator,
    client: Client,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    async fn start(replicas: usize) -> Result<Cluster, Box<dyn std::error::Error>> {
        let (sim, client) = common::cluster(true).await?;
        let mut stops = Vec::new();
        let mut tasks = Vec::new();
        for _ in 0..replicas {
            let (tx, rx) = oneshot::channel::<()>();
            stops.push(tx);
            tasks.push(tokio::spawn(terrace_operator::run(
                client.clone(),
                terrace_operator::Settings::default(),
                async move {
                    let _ = rx.await;
                },
            )));
        }
        Ok(Cluster {
            _sim: sim,
            client,
            stops,
            tasks,
        })
    }

    /// Creates Organization `name` and waits for its default project's ID.
    async fn organization(&self, name: &str) -> Result<String, Box<dyn std::error::Error>> {
        let orgs: Api<Organization> = Api::all(self.client.clone());
        let org = Organization {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: OrganizationSpec::default(),
            status: None,
        };
        orgs.create(&PostParams::default(), &org).await?;
        let projects: Api<Project> = Api::namespaced(self.client.clone(), name);
        let id = eventually("the default project", || async {
            let p = projects.get_opt("default").await.ok()??;
            (p.labels().get(LABEL_DEFAULT_PROJECT)? == "true")
                .then(|| p.labels().get(LABEL_ID).cloned())?
        })
        .await?;
        Ok(id)
    }

    /// Signals shutdown and checks that every operator (all of its controllers and the
    /// Organization cache) returns: the one signal reaches every controller.
    async fn stop(mut self) -> R {
        for tx in self.stops.drain(..) {
            let _ = tx.send(());
        }
        for t in self.tasks.drain(..) {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .map_err(|_| "the operator did not stop after the shutdown signal")??;
        }
        Ok(())
    }
}

fn tb(key: &str, value: &str) -> TagBinding {
    TagBinding {
        key: key.into(),
        value: value.into(),
    }
}

fn condition(ws: &Workspace, type_: &str) -> Option<(String, String)> {
    let c = ws
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

fn is_ready(ws: &Workspace) -> bool {
    condition(ws, CONDITION_READY).is_some_and(|(s, _)| s == "True")
        && ws.status.as_ref().and_then(|s| s.observed_generation) == ws.metadata.generation
}

async fn wait_ready(
    api: &Api<Workspace>,
    name: &str,
) -> Result<Workspace, Box<dyn std::error::Error>> {
    eventually(&format!("workspace {name} Ready"), || async {
        api.get(name).await.ok().filter(is_ready)
    })
    .await
}

async fn events_for(client: &Client, ns: &str, object: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
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

/// A workspace applied without labels gets a `ws-` ID, the organization label, its
/// derived status (ID, default project ID, normalised tag names, effective bindings with
/// the project's inherited ones) and Ready; a change of the project's tag bindings reaches
/// the workspace. Relies on kube-apiserver's merge patch of labels, server-side apply of
/// the status subresource, and watch events for Projects.
#[tokio::test]
async fn workspace_gets_id_and_derived_status_and_follows_project_tags() -> R {
    let cluster = Cluster::start(1).await?;
    let default_id = cluster.organization("acme").await?;
    let projects: Api<Project> = Api::namespaced(cluster.client.clone(), "acme");
    let patch = json!({"spec": {"tagBindings": [{"key": "env", "value": "dev"}, {"key": "cost", "value": "1"}]}});
    projects
        .patch("default", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;

    let api: Api<Workspace> = Api::namespaced(cluster.client.clone(), "acme");
    let mut ws = common::workspace("web", "web", None);
    ws.spec.tags = vec!["Prod".into(), "app".into(), "prod".into()];
    ws.spec.tag_bindings = vec![tb("env", "prod")];
    ws.spec.remote_state_consumers = vec!["ws-a".into(), "ws-b".into()];
    api.create(&PostParams::default(), &ws).await?;
    let ws = wait_ready(&api, "web").await?;

    let id = ws.labels().get(LABEL_ID).cloned().unwrap_or_default();
    assert!(is_valid_id(IdKind::Workspace, &id), "{id}");
    assert_eq!(
        ws.labels().get(LABEL_ORGANIZATION).map(String::as_str),
        Some("acme")
    );
    let status = ws.status.clone().unwrap_or_default();
    assert_eq!(status.id.as_deref(), Some(id.as_str()));
    assert_eq!(status.project_id.as_deref(), Some(default_id.as_str()));
    assert_eq!(status.tag_names, ["app", "prod"]);
    assert_eq!(status.remote_state_consumer_count, Some(2));
    let bindings = |s: &terrace_crds::WorkspaceStatus| {
        s.effective_tag_bindings
            .iter()
            .map(|b| (b.key.clone(), b.value.clone(), b.inherited_from.clone()))
            .collect::<Vec<_>>()
    };
    let inherited = Some(default_id.clone());
    assert_eq!(
        bindings(&status),
        [
            ("env".into(), "prod".into(), None),
            ("cost".into(), "1".into(), inherited.clone()),
        ]
    );
    assert_eq!(
        condition(&ws, CONDITION_STALLED).map(|c| c.0).as_deref(),
        Some("False")
    );
    assert_eq!(
        condition(&ws, CONDITION_RECONCILING)
            .map(|c| c.0)
            .as_deref(),
        Some("False")
    );
    assert_eq!(
        events_for(&cluster.client, "acme", "web", "IdAssigned")
            .await
            .len(),
        1
    );

    let patch = json!({"spec": {"tagBindings": [{"key": "cost", "value": "2"}, {"key": "owner", "value": "ops"}]}});
    projects
        .patch("default", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let want = vec![
        ("env".to_owned(), "prod".to_owned(), None),
        ("cost".to_owned(), "2".to_owned(), inherited.clone()),
        ("owner".to_owned(), "ops".to_owned(), inherited.clone()),
    ];
    eventually("updated effective bindings", || async {
        let ws = api.get("web").await.ok()?;
        (bindings(ws.status.as_ref()?) == want).then_some(())
    })
    .await?;
    // The ID never changes once assigned.
    let after = api.get("web").await?;
    assert_eq!(after.labels().get(LABEL_ID), Some(&id));
    cluster.stop().await
}

/// A project applied without an ID gets one (and status.id); a workspace naming it
/// reports that ID and inherits its bindings; an SshKey applied without an ID gets an
/// `sshkey-` ID. Relies on kube-apiserver's merge patch with a resourceVersion
/// precondition and the status subresource.
#[tokio::test]
async fn other_kinds_get_ids_and_named_projects_resolve() -> R {
    let cluster = Cluster::start(1).await?;
    cluster.organization("acme").await?;
    let projects: Api<Project> = Api::namespaced(cluster.client.clone(), "acme");
    let infra = Project {
        metadata: ObjectMeta {
            name: Some("infra".into()),
            ..Default::default()
        },
        spec: ProjectSpec {
            name: "Infra".into(),
            tag_bindings: vec![tb("team", "infra")],
            ..Default::default()
        },
        status: None,
    };
    projects.create(&PostParams::default(), &infra).await?;
    let prj_id = eventually("the project's ID", || async {
        let p = projects.get("infra").await.ok()?;
        let id = p.labels().get(LABEL_ID)?.clone();
        (p.status.as_ref()?.id.as_deref() == Some(id.as_str())).then_some(id)
    })
    .await?;
    assert!(is_valid_id(IdKind::Project, &prj_id), "{prj_id}");

    let api: Api<Workspace> = Api::namespaced(cluster.client.clone(), "acme");
    api.create(
        &PostParams::default(),
        &common::workspace("w", "w", Some("infra")),
    )
    .await?;
    let ws = wait_ready(&api, "w").await?;
    let status = ws.status.unwrap_or_default();
    assert_eq!(status.project_id.as_deref(), Some(prj_id.as_str()));
    assert_eq!(status.effective_tag_bindings.len(), 1);
    assert_eq!(
        status.effective_tag_bindings[0].inherited_from.as_deref(),
        Some(prj_id.as_str())
    );

    let keys: Api<SshKey> = Api::namespaced(cluster.client.clone(), "acme");
    let key = SshKey {
        metadata: ObjectMeta {
            name: Some("deploy".into()),
            ..Default::default()
        },
        spec: SshKeySpec {
            name: "deploy".into(),
            private_key_secret_ref: terrace_crds::common::SecretKeyRef {
                name: "deploy".into(),
                key: "id_ed25519".into(),
            },
        },
        status: None,
    };
    keys.create(&PostParams::default(), &key).await?;
    let key_id = eventually("the SSH key's ID", || async {
        let k = keys.get("deploy").await.ok()?;
        let id = k.labels().get(LABEL_ID)?.clone();
        (k.labels().get(LABEL_ORGANIZATION)? == "acme"
            && k.status.as_ref()?.id.as_deref() == Some(id.as_str()))
        .then_some(id)
    })
    .await?;
    assert!(is_valid_id(IdKind::SshKey, &key_id), "{key_id}");
    cluster.stop().await
}

/// An ID pinned with the label is kept; a label that is not a valid ID of the kind, or
/// an ID another workspace already uses, is replaced and a Warning event says so. Relies
/// on kube-apiserver's label selectors and events.k8s.io/v1 Events.
#[tokio::test]
async fn pinned_ids_are_kept_and_invalid_ones_replaced() -> R {
    let cluster = Cluster::start(1).await?;
    cluster.organization("acme").await?;
    let api: Api<Workspace> = Api::namespaced(cluster.client.clone(), "acme");
    let pinned = "ws-PinnedIdPinned01";
    let mut ws = common::workspace("pinned", "pinned", None);
    ws.metadata.labels = Some([(LABEL_ID.to_owned(), pinned.to_owned())].into());
    api.create(&PostParams::default(), &ws).await?;
    let mut bad = common::workspace("bad", "bad", None);
    bad.metadata.labels = Some([(LABEL_ID.to_owned(), "ws-nope".to_owned())].into());
    api.create(&PostParams::default(), &bad).await?;

    let ws = wait_ready(&api, "pinned").await?;
    assert_eq!(ws.labels().get(LABEL_ID).map(String::as_str), Some(pinned));
    assert_eq!(ws.status.and_then(|s| s.id).as_deref(), Some(pinned));
    assert!(
        events_for(&cluster.client, "acme", "pinned", "IdAssigned")
            .await
            .is_empty()
    );

    let bad = wait_ready(&api, "bad").await?;
    let id = bad.labels().get(LABEL_ID).cloned().unwrap_or_default();
    assert!(is_valid_id(IdKind::Workspace, &id), "{id}");
    let warnings = events_for(&cluster.client, "acme", "bad", "InvalidId").await;
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));

    // A copy pinning an ID another workspace already uses gets a new one.
    let mut copy = common::workspace("copy", "copy", None);
    copy.metadata.labels = Some([(LABEL_ID.to_owned(), pinned.to_owned())].into());
    api.create(&PostParams::default(), &copy).await?;
    let copy = wait_ready(&api, "copy").await?;
    let copy_id = copy.labels().get(LABEL_ID).cloned().unwrap_or_default();
    assert!(is_valid_id(IdKind::Workspace, &copy_id), "{copy_id}");
    assert_ne!(copy_id, pinned);
    assert_eq!(
        events_for(&cluster.client, "acme", "copy", "DuplicateId")
            .await
            .len(),
        1
    );
    let original = api.get("pinned").await?;
    assert_eq!(
        original.labels().get(LABEL_ID).map(String::as_str),
        Some(pinned)
    );
    cluster.stop().await
}

/// A second workspace with the same name (other case) is Stalled with DuplicateName and
/// a Warning event, and becomes Ready when the older one is deleted. Relies on
/// kube-apiserver's creationTimestamp and DELETE watch events.
#[tokio::test]
async fn duplicate_name_is_stalled_until_the_holder_goes() -> R {
    let cluster = Cluster::start(1).await?;
    cluster.organization("acme").await?;
    let api: Api<Workspace> = Api::namespaced(cluster.client.clone(), "acme");
    api.create(
        &PostParams::default(),
        &common::workspace("first", "Web", None),
    )
    .await?;
    wait_ready(&api, "first").await?;
    api.create(
        &PostParams::default(),
        &common::workspace("second", "web", None),
    )
    .await?;
    let stalled = eventually("second Stalled", || async {
        let ws = api.get("second").await.ok()?;
        (condition(&ws, CONDITION_STALLED)? == ("True".into(), "DuplicateName".into()))
            .then_some(ws)
    })
    .await?;
    assert_eq!(
        condition(&stalled, CONDITION_READY).map(|c| c.0).as_deref(),
        Some("False")
    );
    // The ID is assigned even while stalled.
    assert!(stalled.labels().contains_key(LABEL_ID));
    let warnings = events_for(&cluster.client, "acme", "second", "DuplicateName").await;
    assert_eq!(warnings.len(), 1);

    // The older workspace keeps its name and stays Ready.
    wait_ready(&api, "first").await?;
    api.delete("first", &DeleteParams::default()).await?;
    wait_ready(&api, "second").await?;
    assert_eq!(
        events_for(&cluster.client, "acme", "second", "Recovered")
            .await
            .len(),
        1
    );
    cluster.stop().await
}

/// A workspace naming a missing project is Stalled with ProjectNotFound and resolves as
/// soon as the project is created; a workspace in a namespace no Organization owns is
/// Stalled with OrganizationNotFound but still gets its ID.
#[tokio::test]
async fn missing_project_and_missing_organization_stall() -> R {
    let cluster = Cluster::start(1).await?;
    cluster.organization("acme").await?;
    let api: Api<Workspace> = Api::namespaced(cluster.client.clone(), "acme");
    api.create(
        &PostParams::default(),
        &common::workspace("w", "w", Some("later")),
    )
    .await?;
    eventually("ProjectNotFound", || async {
        let ws = api.get("w").await.ok()?;
        (condition(&ws, CONDITION_STALLED)? == ("True".into(), "ProjectNotFound".into()))
            .then_some(())
    })
    .await?;
    let projects: Api<Project> = Api::namespaced(cluster.client.clone(), "acme");
    let later = Project {
        metadata: ObjectMeta {
            name: Some("later".into()),
            ..Default::default()
        },
        spec: ProjectSpec {
            name: "Later".into(),
            ..Default::default()
        },
        status: None,
    };
    projects.create(&PostParams::default(), &later).await?;
    let ws = wait_ready(&api, "w").await?;
    let later = projects.get("later").await?;
    assert_eq!(
        ws.status.and_then(|s| s.project_id),
        later.labels().get(LABEL_ID).cloned()
    );

    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("orphan".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces.create(&PostParams::default(), &ns).await?;
    let orphans: Api<Workspace> = Api::namespaced(cluster.client.clone(), "orphan");
    orphans
        .create(&PostParams::default(), &common::workspace("o", "o", None))
        .await?;
    let o = eventually("OrganizationNotFound", || async {
        let ws = orphans.get("o").await.ok()?;
        (condition(&ws, CONDITION_STALLED)? == ("True".into(), "OrganizationNotFound".into()))
            .then_some(ws)
    })
    .await?;
    let id = o.labels().get(LABEL_ID).cloned().unwrap_or_default();
    assert!(is_valid_id(IdKind::Workspace, &id), "{id}");
    assert!(!o.labels().contains_key(LABEL_ORGANIZATION));
    cluster.stop().await
}

/// Two operator replicas racing on the same objects assign exactly one ID each: the
/// resourceVersion precondition of kube-apiserver's merge patch (409 Conflict for a stale
/// write) lets only one replica's label write through, so only one IdAssigned event is
/// recorded and the ID never changes.
#[tokio::test]
async fn two_replicas_assign_one_id() -> R {
    let cluster = Cluster::start(2).await?;
    cluster.organization("acme").await?;
    let api: Api<Workspace> = Api::namespaced(cluster.client.clone(), "acme");
    let names: Vec<String> = (0..8).map(|i| format!("w{i}")).collect();
    for n in &names {
        api.create(&PostParams::default(), &common::workspace(n, n, None))
            .await?;
    }
    for n in &names {
        let ws = wait_ready(&api, n).await?;
        let id = ws.labels().get(LABEL_ID).cloned();
        assert_eq!(ws.status.and_then(|s| s.id), id, "{n}");
    }
    // Let both replicas settle, then check nothing was assigned twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in &names {
        assert_eq!(
            events_for(&cluster.client, "acme", n, "IdAssigned")
                .await
                .len(),
            1,
            "{n}"
        );
    }
    cluster.stop().await
}
