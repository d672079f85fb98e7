//! kstatus conditions on every kind, against the cluster simulator: objects created the
//! way `kubectl apply` creates them (no ID label, no status) end up with `Ready`,
//! `Reconciling` and `Stalled` conditions and `status.observedGeneration`, which is what
//! Argo CD's and Flux's generic health checks (and `kubectl wait --for=condition=Ready`)
//! read. Each test's doc comment names the behaviour it checks and the Kubernetes
//! behaviour it relies on.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use terrace_crds::constants::{
    CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED, FIELD_MANAGER_API, LABEL_ID,
    LABEL_ORGANIZATION,
};
use terrace_crds::{
    AgentPool, ConfigurationVersion, OAuthToken, Organization, Project, RegistryModule, SshKey,
    TestVariable,
};
use terrace_simulator::Simulator;
use tokio::sync::oneshot;

use crate::common::{self, R, eventually};

/// A simulator with the terrace CRDs and one operator running against it.
struct Cluster {
    _sim: Simulator,
    client: Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    async fn start() -> Result<Cluster, Box<dyn std::error::Error>> {
        let (sim, client) = common::cluster(true).await?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(terrace_operator::run(
            client.clone(),
            terrace_operator::Settings::default(),
            async move {
                let _ = rx.await;
            },
        ));
        Ok(Cluster {
            _sim: sim,
            client,
            stop: Some(tx),
            task: Some(task),
        })
    }

    /// The dynamic API of kind `K` in `ns` (None: cluster-scoped).
    fn api<K: Resource<DynamicType = ()>>(&self, ns: Option<&str>) -> Api<DynamicObject> {
        let ar = ApiResource::erase::<K>(&());
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Creates an object of kind `K` from its manifest, as `kubectl create -f` does.
    async fn create<K: Resource<DynamicType = ()>>(
        &self,
        ns: Option<&str>,
        manifest: Value,
    ) -> Result<DynamicObject, Box<dyn std::error::Error>> {
        let ar = ApiResource::erase::<K>(&());
        let mut obj: DynamicObject = serde_json::from_value(manifest)?;
        obj.types = Some(kube::api::TypeMeta {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        });
        Ok(self
            .api::<K>(ns)
            .create(&PostParams::default(), &obj)
            .await?)
    }

    async fn stop(mut self) -> R {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .map_err(|_| "the operator did not stop after the shutdown signal")??;
        }
        Ok(())
    }
}

/// The kstatus view of an object, as a generic health check reads it.
#[derive(Debug, PartialEq)]
struct Kstatus {
    /// (status, reason) of Ready, Reconciling and Stalled.
    ready: (String, String),
    reconciling: (String, String),
    stalled: (String, String),
    stalled_message: String,
    /// Whether status.observedGeneration and every condition's observedGeneration equal
    /// metadata.generation.
    generation_current: bool,
}

fn kstatus(obj: &DynamicObject) -> Option<Kstatus> {
    let status = obj.data.get("status")?;
    let generation = obj.metadata.generation?;
    let conditions = status.get("conditions")?.as_array()?;
    let find = |t: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .unwrap_or_default()
    };
    let stalled_message = conditions
        .iter()
        .find(|c| c["type"] == CONDITION_STALLED)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_owned();
    Some(Kstatus {
        ready: find(CONDITION_READY),
        reconciling: find(CONDITION_RECONCILING),
        stalled: find(CONDITION_STALLED),
        stalled_message,
        generation_current: status["observedGeneration"].as_i64() == Some(generation)
            && conditions.len() == 3
            && conditions
                .iter()
                .all(|c| c["observedGeneration"].as_i64() == Some(generation)),
    })
}

fn is_ready(k: &Kstatus) -> bool {
    let f = |r: &str| ("False".to_owned(), r.to_owned());
    k.ready == ("True".into(), "Reconciled".into())
        && k.reconciling == f("Reconciled")
        && k.stalled == f("Reconciled")
        && k.generation_current
}

/// Waits until `name` is Ready (Ready True, Reconciling and Stalled False, all at the
/// current generation) and returns it.
async fn wait_ready(
    api: &Api<DynamicObject>,
    name: &str,
) -> Result<DynamicObject, Box<dyn std::error::Error>> {
    eventually(&format!("{name} Ready"), || async {
        let obj = api.get(name).await.ok()?;
        kstatus(&obj).filter(is_ready).map(|_| obj)
    })
    .await
}

/// Waits until `name` is Stalled with `reason` (Ready and Reconciling False).
async fn wait_stalled(
    api: &Api<DynamicObject>,
    name: &str,
    reason: &str,
) -> Result<Kstatus, Box<dyn std::error::Error>> {
    eventually(&format!("{name} Stalled with {reason}"), || async {
        let k = kstatus(&api.get(name).await.ok()?)?;
        (k.stalled == ("True".into(), reason.into())
            && k.ready == ("False".into(), reason.into())
            && k.reconciling.0 == "False"
            && k.generation_current)
            .then_some(k)
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

fn id_of(obj: &DynamicObject) -> Option<String> {
    obj.labels().get(LABEL_ID).cloned()
}

/// An Organization and a Project, RegistryModule, TestVariable, SshKey, AgentPool and
/// OAuthToken created with plain API calls (as `kubectl apply` does: no ID label, no
/// status) all end up Ready True, Reconciling and Stalled False with reason Reconciled,
/// `status.observedGeneration` equal to `metadata.generation`, and `status.id` equal to
/// their ID label; a spec change is observed at the new generation. Relies on
/// kube-apiserver's status subresource (status writes leave metadata.generation alone,
/// spec writes bump it) and server-side apply of status.
#[tokio::test]
async fn every_kind_created_with_kubectl_becomes_ready() -> R {
    let cluster = Cluster::start().await?;
    cluster
        .create::<Organization>(None, json!({"metadata": {"name": "acme"}, "spec": {}}))
        .await?;
    let orgs = cluster.api::<Organization>(None);
    let org = wait_ready(&orgs, "acme").await?;
    assert_eq!(org.data["status"]["namespace"], "acme");
    assert!(org.data["status"]["defaultProjectId"].is_string());

    let ns = Some("acme");
    cluster
        .create::<Project>(
            ns,
            json!({"metadata": {"name": "infra"}, "spec": {"name": "Infra"}}),
        )
        .await?;
    cluster
        .create::<RegistryModule>(
            ns,
            json!({"metadata": {"name": "net"}, "spec": {"name": "net", "provider": "aws"}}),
        )
        .await?;
    cluster
        .create::<TestVariable>(
            ns,
            json!({"metadata": {"name": "region"}, "spec": {"module": "net", "key": "AWS_REGION", "value": "eu-west-1", "category": "env"}}),
        )
        .await?;
    cluster
        .create::<SshKey>(
            ns,
            json!({"metadata": {"name": "deploy"}, "spec": {"name": "deploy", "privateKeySecretRef": {"name": "deploy", "key": "id_ed25519"}}}),
        )
        .await?;
    cluster
        .create::<AgentPool>(
            ns,
            json!({"metadata": {"name": "pool"}, "spec": {"name": "pool"}}),
        )
        .await?;
    cluster
        .create::<OAuthToken>(
            ns,
            json!({"metadata": {"name": "gh"}, "spec": {"serviceProvider": "github"}}),
        )
        .await?;

    let apis = [
        (cluster.api::<Project>(ns), "default"),
        (cluster.api::<Project>(ns), "infra"),
        (cluster.api::<RegistryModule>(ns), "net"),
        (cluster.api::<TestVariable>(ns), "region"),
        (cluster.api::<SshKey>(ns), "deploy"),
        (cluster.api::<AgentPool>(ns), "pool"),
        (cluster.api::<OAuthToken>(ns), "gh"),
    ];
    for (api, name) in &apis {
        let obj = wait_ready(api, name).await?;
        let id = id_of(&obj);
        assert!(id.is_some(), "{name} has an ID label");
        assert_eq!(obj.data["status"]["id"].as_str(), id.as_deref(), "{name}");
        assert_eq!(
            obj.labels().get(LABEL_ORGANIZATION).map(String::as_str),
            Some("acme"),
            "{name}"
        );
    }
    // The Organization itself reports conditions at its generation too.
    let org = wait_ready(&orgs, "acme").await?;
    assert_eq!(
        org.data["status"]["observedGeneration"].as_i64(),
        org.metadata.generation
    );

    // A spec change bumps metadata.generation; the controller observes it.
    let projects = cluster.api::<Project>(ns);
    let before = projects.get("infra").await?.metadata.generation;
    let patch = json!({"spec": {"description": "shared infrastructure"}});
    let changed = projects
        .patch("infra", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    assert!(changed.metadata.generation > before);
    let after = wait_ready(&projects, "infra").await?;
    assert_eq!(after.metadata.generation, changed.metadata.generation);
    // Nothing is stalled, so no Warning events were recorded.
    for (_, name) in &apis {
        assert!(
            events_for(&cluster.client, "acme", name, "OrganizationNotFound")
                .await
                .is_empty()
        );
    }
    cluster.stop().await
}

/// Stalled cases and their recovery: a TestVariable naming a missing module is Stalled
/// (`ModuleNotFound`, with a Warning event) until the module is created; an SshKey in a
/// namespace no Organization owns is Stalled (`OrganizationNotFound`) until an
/// Organization adopts that namespace; a second Organization naming a namespace an older
/// one uses is Stalled (`NamespaceConflict`) and leaves the namespace alone. Relies on
/// watch events for RegistryModules and Organizations and on events.k8s.io/v1 Events.
#[tokio::test]
async fn stalled_objects_say_why_and_recover() -> R {
    let cluster = Cluster::start().await?;
    cluster
        .create::<Organization>(None, json!({"metadata": {"name": "acme"}, "spec": {}}))
        .await?;
    let orgs = cluster.api::<Organization>(None);
    wait_ready(&orgs, "acme").await?;
    let ns = Some("acme");

    cluster
        .create::<TestVariable>(
            ns,
            json!({"metadata": {"name": "region"}, "spec": {"module": "later", "key": "AWS_REGION", "value": "eu-west-1", "category": "env"}}),
        )
        .await?;
    let vars = cluster.api::<TestVariable>(ns);
    let k = wait_stalled(&vars, "region", "ModuleNotFound").await?;
    assert!(k.stalled_message.contains("later"), "{}", k.stalled_message);
    // The ID is assigned even while stalled.
    assert!(id_of(&vars.get("region").await?).is_some());
    let warnings = events_for(&cluster.client, "acme", "region", "ModuleNotFound").await;
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    cluster
        .create::<RegistryModule>(
            ns,
            json!({"metadata": {"name": "later"}, "spec": {"name": "later", "provider": "aws"}}),
        )
        .await?;
    wait_ready(&vars, "region").await?;
    assert_eq!(
        events_for(&cluster.client, "acme", "region", "Recovered")
            .await
            .len(),
        1
    );

    // A namespace no Organization owns (its owner lets Organization globex adopt it).
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let orphan: Namespace = serde_json::from_value(
        json!({"metadata": {"name": "orphan", "annotations": {"terrace.dev/adopt": "globex"}}}),
    )?;
    namespaces.create(&PostParams::default(), &orphan).await?;
    let orphan_ns = Some("orphan");
    cluster
        .create::<SshKey>(
            orphan_ns,
            json!({"metadata": {"name": "deploy"}, "spec": {"name": "deploy", "privateKeySecretRef": {"name": "deploy", "key": "k"}}}),
        )
        .await?;
    let keys = cluster.api::<SshKey>(orphan_ns);
    let k = wait_stalled(&keys, "deploy", "OrganizationNotFound").await?;
    assert!(
        k.stalled_message.contains("orphan"),
        "{}",
        k.stalled_message
    );
    // An Organization adopting the namespace resolves it.
    cluster
        .create::<Organization>(
            None,
            json!({"metadata": {"name": "globex"}, "spec": {"namespace": "orphan"}}),
        )
        .await?;
    wait_ready(&orgs, "globex").await?;
    let key = wait_ready(&keys, "deploy").await?;
    assert_eq!(
        key.labels().get(LABEL_ORGANIZATION).map(String::as_str),
        Some("globex")
    );

    // A younger Organization naming acme's namespace is stalled and does not touch it.
    cluster
        .create::<Organization>(
            None,
            json!({"metadata": {"name": "late"}, "spec": {"namespace": "acme"}}),
        )
        .await?;
    let k = wait_stalled(&orgs, "late", "NamespaceConflict").await?;
    assert!(k.stalled_message.contains("acme"), "{}", k.stalled_message);
    let late = orgs.get("late").await?;
    assert!(late.data["status"].get("namespace").is_none());
    assert!(late.data["status"].get("defaultProjectId").is_none());
    let acme_ns = namespaces.get("acme").await?;
    let owners: Vec<String> = acme_ns
        .owner_references()
        .iter()
        .map(|o| o.name.clone())
        .collect();
    assert_eq!(owners, ["acme"]);
    assert_eq!(
        acme_ns.labels().get(LABEL_ORGANIZATION).map(String::as_str),
        Some("acme")
    );
    wait_ready(&orgs, "acme").await?;
    cluster.stop().await
}

/// A ConfigurationVersion follows the upload state the API server writes in its status:
/// Reconciling (`WaitingForUpload`) while pending, Stalled (`UploadErrored`, with the
/// error message) when the archive was rejected, Ready once uploaded. The operator's
/// server-side apply leaves the API server's status fields (written with merge patches
/// under its own field manager) alone. Relies on kube-apiserver merging a merge patch and
/// a server-side apply of different fields of one status.
#[tokio::test]
async fn configuration_versions_follow_their_upload() -> R {
    let cluster = Cluster::start().await?;
    cluster
        .create::<Organization>(None, json!({"metadata": {"name": "acme"}, "spec": {}}))
        .await?;
    wait_ready(&cluster.api::<Organization>(None), "acme").await?;
    let ns = Some("acme");
    cluster
        .create::<RegistryModule>(
            ns,
            json!({"metadata": {"name": "net"}, "spec": {"name": "net", "provider": "aws"}}),
        )
        .await?;
    cluster
        .create::<ConfigurationVersion>(
            ns,
            json!({"metadata": {"name": "cv"}, "spec": {"module": "net"}}),
        )
        .await?;
    let cvs = cluster.api::<ConfigurationVersion>(ns);
    eventually("cv WaitingForUpload", || async {
        let k = kstatus(&cvs.get("cv").await.ok()?)?;
        (k.reconciling == ("True".into(), "WaitingForUpload".into())
            && k.ready.0 == "False"
            && k.stalled.0 == "False"
            && k.generation_current)
            .then_some(())
    })
    .await?;

    let api_write = |status: Value| {
        let cvs = cvs.clone();
        async move {
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER_API.to_owned()),
                ..Default::default()
            };
            cvs.patch_status("cv", &pp, &Patch::Merge(&json!({"status": status})))
                .await
        }
    };
    api_write(json!({"status": "pending"})).await?;
    api_write(json!({"status": "errored", "errorMessage": "the archive is not gzip-compressed (expected a .tar.gz)"}))
        .await?;
    let k = wait_stalled(&cvs, "cv", "UploadErrored").await?;
    assert_eq!(
        k.stalled_message,
        "the archive is not gzip-compressed (expected a .tar.gz)"
    );
    let cv = cvs.get("cv").await?;
    assert_eq!(cv.data["status"]["status"], "errored");

    api_write(
        json!({"status": "uploaded", "errorMessage": null, "uploadedAt": "2025-01-01T00:00:00Z"}),
    )
    .await?;
    let cv = wait_ready(&cvs, "cv").await?;
    assert_eq!(cv.data["status"]["status"], "uploaded");
    assert_eq!(cv.data["status"]["uploadedAt"], "2025-01-01T00:00:00Z");
    assert_eq!(cv.data["status"]["id"].as_str(), id_of(&cv).as_deref());
    cluster.stop().await
}
