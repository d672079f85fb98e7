//! The simulator's REST API through a real `kube::Client` (in-process), one test per
//! kube-apiserver behaviour; each test's doc comment names the behaviour it copies.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Error};
use serde_json::{Value, json};
use std::time::Duration;
use terrace_simulator::{SimConfig, Simulator};

type R = anyhow::Result<()>;

async fn sim() -> anyhow::Result<(Simulator, Client)> {
    sim_with(SimConfig::default()).await
}

async fn sim_with(config: SimConfig) -> anyhow::Result<(Simulator, Client)> {
    let sim = Simulator::open(config).await?;
    let client = sim.client();
    Ok((sim, client))
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .unwrap_or_default()
}

fn api_err(r: Result<impl std::fmt::Debug, Error>) -> (u16, String, String) {
    match r {
        Err(Error::Api(s)) => (s.code, s.reason.clone(), s.message.clone()),
        other => (0, format!("{other:?}"), String::new()),
    }
}

fn widget_crd(versions: &[&str]) -> Value {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer", "minimum": 1, "default": 3},
                "name": {"type": "string", "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "items": {"type": "string"}}
            }, "required": ["name"]},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }
    });
    let vs: Vec<Value> = versions
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({
                "name": v, "served": true, "storage": i == 0,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]
            })
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": vs
        }
    })
}

fn widget_ar(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", version, "Widget"),
        "widgets",
    )
}

async fn install_widgets(client: &Client, versions: &[&str]) -> anyhow::Result<()> {
    let crd_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let crds: Api<DynamicObject> = Api::all_with(client.clone(), &crd_ar);
    let crd: DynamicObject = serde_json::from_value(widget_crd(versions))?;
    crds.create(&PostParams::default(), &crd).await?;
    Ok(())
}

fn widget(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec
    }))?)
}

/// Copies kube-apiserver's create/get/list/replace/delete round trip, server-owned
/// metadata (uid, creationTimestamp, resourceVersion), generateName's 5-character suffix,
/// 409 AlreadyExists and 404 NotFound with the real messages.
#[tokio::test]
async fn crud_generate_name_and_errors() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await?;
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert!(created.metadata.resource_version.is_some());
    assert_eq!(created.metadata.generation, None);
    let got = cms.get("a").await?;
    assert_eq!(got.data, created.data);

    let (code, reason, msg) = api_err(
        cms.create(&PostParams::default(), &cm("a", json!({})))
            .await,
    );
    assert_eq!(
        (code, reason.as_str(), msg.as_str()),
        (409, "AlreadyExists", "configmaps \"a\" already exists")
    );
    let (code, _, msg) = api_err(cms.get("nope").await);
    assert_eq!((code, msg.as_str()), (404, "configmaps \"nope\" not found"));

    let mut gen_cm = cm("", json!({}));
    gen_cm.metadata.name = None;
    gen_cm.metadata.generate_name = Some("gen-".into());
    let g = cms.create(&PostParams::default(), &gen_cm).await?;
    let name = g.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let mut upd = got.clone();
    upd.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = cms.replace("a", &PostParams::default(), &upd).await?;
    assert_ne!(
        replaced.metadata.resource_version,
        got.metadata.resource_version
    );
    assert_eq!(cms.list(&ListParams::default()).await?.items.len(), 2);
    cms.delete("a", &DeleteParams::default()).await?;
    assert_eq!(api_err(cms.get("a").await).0, 404);

    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "missing-ns");
    let (code, _, msg) = api_err(
        other
            .create(&PostParams::default(), &cm("x", json!({})))
            .await,
    );
    assert_eq!(
        (code, msg.as_str()),
        (404, "namespaces \"missing-ns\" not found")
    );

    let (code, reason, msg) = api_err(
        cms.create(&PostParams::default(), &cm("Bad_Name", json!({})))
            .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(
        msg.starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value"),
        "{msg}"
    );
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in ["default", "kube-system", "kube-public"] {
        nss.get(ns).await?;
    }
    Ok(())
}

/// Copies optimistic concurrency: a PUT with a stale resourceVersion is 409 Conflict with
/// the apiserver's message; built-in kinds accept an unconditional PUT (no resourceVersion).
#[tokio::test]
async fn update_conflict() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let v1 = cms
        .create(&PostParams::default(), &cm("c", json!({})))
        .await?;
    let mut a = v1.clone();
    a.data = Some([("k".to_string(), "1".to_string())].into());
    cms.replace("c", &PostParams::default(), &a).await?;
    let (code, reason, msg) = api_err(cms.replace("c", &PostParams::default(), &a).await);
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        msg,
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    a.metadata.resource_version = None;
    cms.replace("c", &PostParams::default(), &a).await?;
    Ok(())
}

/// Copies list filtering and paging: label selector operators, field selectors on
/// metadata.name/namespace, limit + continue with a stable list resourceVersion.
#[tokio::test]
async fn selectors_and_paging() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for i in 0..7 {
        let tier = if i % 2 == 0 { "front" } else { "back" };
        cms.create(
            &PostParams::default(),
            &cm(&format!("cm{i}"), json!({"app": "x", "tier": tier})),
        )
        .await?;
    }
    cms.create(&PostParams::default(), &cm("plain", json!({})))
        .await?;
    let names = |l: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier=front"))
                .await?
        )
        .len(),
        4
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier!=front"))
                .await?
        )
        .len(),
        4
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier in (front,back)"))
                .await?
        )
        .len(),
        7
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier notin (front)"))
                .await?
        )
        .len(),
        4
    );
    assert_eq!(
        names(cms.list(&ListParams::default().labels("!app")).await?),
        ["plain"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app,tier==back"))
                .await?
        )
        .len(),
        3
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=cm3"))
                .await?
        ),
        ["cm3"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name!=cm3"))
                .await?
        )
        .len(),
        7
    );
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default().fields("metadata.namespace=default"))
            .await?
            .items
            .len(),
        8
    );
    assert_eq!(
        api_err(cms.list(&ListParams::default().labels("a in b")).await).0,
        400
    );

    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    let mut rvs = Vec::new();
    loop {
        let page = cms.list(&lp).await?;
        rvs.push(page.metadata.resource_version.clone());
        seen.extend(names(page.clone()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(seen.len(), 8);
    assert_eq!(rvs.len(), 3);
    assert!(rvs.windows(2).all(|w| w[0] == w[1]));
    Ok(())
}

/// Copies watch semantics: from "0" synthetic ADDED events then live changes; resuming
/// from a resourceVersion replays what followed; a resourceVersion older than the watch
/// cache window gets an ERROR event with a 410 Expired Status.
#[tokio::test]
async fn watch_resume_and_expired() -> R {
    let (_sim, client) = sim_with(SimConfig {
        watch_history: 5,
        ..SimConfig::default()
    })
    .await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = cms
        .create(&PostParams::default(), &cm("w0", json!({})))
        .await?;
    let rv0 = first.metadata.resource_version.clone().unwrap_or_default();
    let mut s = cms
        .watch(&WatchParams::default().timeout(5), "0")
        .await?
        .boxed();
    match s.try_next().await? {
        Some(WatchEvent::Added(c)) => assert_eq!(c.metadata.name.as_deref(), Some("w0")),
        other => panic!("expected ADDED w0, got {other:?}"),
    }
    cms.create(&PostParams::default(), &cm("w1", json!({})))
        .await?;
    match s.try_next().await? {
        Some(WatchEvent::Added(c)) => assert_eq!(c.metadata.name.as_deref(), Some("w1")),
        other => panic!("expected ADDED w1, got {other:?}"),
    }
    cms.delete("w1", &DeleteParams::default()).await?;
    match s.try_next().await? {
        Some(WatchEvent::Deleted(c)) => assert_eq!(c.metadata.name.as_deref(), Some("w1")),
        other => panic!("expected DELETED w1, got {other:?}"),
    }
    // Resume from the first object's resourceVersion: w1 ADDED then DELETED again.
    let mut r = cms
        .watch(&WatchParams::default().timeout(5), &rv0)
        .await?
        .boxed();
    assert!(matches!(r.try_next().await?, Some(WatchEvent::Added(_))));
    assert!(matches!(r.try_next().await?, Some(WatchEvent::Deleted(_))));
    // Push rv0 out of the 5-event window.
    for i in 2..10 {
        cms.create(&PostParams::default(), &cm(&format!("w{i}"), json!({})))
            .await?;
    }
    let mut e = cms
        .watch(&WatchParams::default().timeout(5), &rv0)
        .await?
        .boxed();
    match e.try_next().await? {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
            assert!(
                status
                    .message
                    .starts_with(&format!("too old resource version: {rv0} (")),
                "{}",
                status.message
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    Ok(())
}

/// Copies selector watches: an object modified so it stops matching arrives as
/// DELETED, one that starts matching as ADDED.
#[tokio::test]
async fn watch_selector_transitions() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c = cms
        .create(&PostParams::default(), &cm("t", json!({"on": "yes"})))
        .await?;
    let rv = c.metadata.resource_version.clone().unwrap_or_default();
    let mut s = cms
        .watch(&WatchParams::default().labels("on=yes").timeout(5), &rv)
        .await?
        .boxed();
    let pp = PatchParams::default();
    cms.patch(
        "t",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"on": "no"}}})),
    )
    .await?;
    assert!(matches!(s.try_next().await?, Some(WatchEvent::Deleted(_))));
    cms.patch(
        "t",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"on": "yes"}}})),
    )
    .await?;
    assert!(matches!(s.try_next().await?, Some(WatchEvent::Added(_))));
    Ok(())
}

/// Copies `allowWatchBookmarks` (BOOKMARK events carrying only a resourceVersion) and
/// `timeoutSeconds` (the server ends the stream).
#[tokio::test]
async fn bookmarks_and_timeout() -> R {
    let (_sim, client) = sim_with(SimConfig {
        bookmark_interval: Duration::from_millis(200),
        ..SimConfig::default()
    })
    .await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c = cms
        .create(&PostParams::default(), &cm("b", json!({})))
        .await?;
    let rv = c.metadata.resource_version.clone().unwrap_or_default();
    let started = std::time::Instant::now();
    let mut s = cms
        .watch(&WatchParams::default().timeout(1), &rv)
        .await?
        .boxed();
    let mut bookmarks = 0;
    while let Some(ev) = s.try_next().await? {
        if let WatchEvent::Bookmark(b) = ev {
            assert!(!b.metadata.resource_version.is_empty());
            bookmarks += 1;
        }
    }
    assert!(bookmarks >= 2, "{bookmarks}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    Ok(())
}

/// Copies CRD registration: creating a CRD makes its kind servable and discoverable (with
/// Established/NamesAccepted conditions), every served version reads the same stored
/// object, and deleting the CRD removes the kind and its objects.
#[tokio::test]
async fn crd_registration_and_versions() -> R {
    let (_sim, client) = sim().await?;
    install_widgets(&client, &["v1", "v1beta1"]).await?;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd = crds.get("widgets.example.com").await?;
    let conds = crd
        .data
        .pointer("/status/conditions")
        .cloned()
        .unwrap_or_default();
    assert!(conds.to_string().contains("Established"), "{conds}");
    let groups = client.list_api_groups().await?;
    assert!(groups.groups.iter().any(|g| g.name == "example.com"));
    let resources = client.list_api_group_resources("example.com/v1").await?;
    let w = resources.resources.iter().find(|r| r.name == "widgets");
    assert_eq!(
        w.map(|r| r.short_names.clone()),
        Some(Some(vec!["wd".to_string()]))
    );
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "widgets/status")
    );

    let v1: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &widget_ar("v1"));
    v1.create(
        &PostParams::default(),
        &widget("w", json!({"name": "abc", "size": 2}))?,
    )
    .await?;
    let beta: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &widget_ar("v1beta1"));
    let b = beta.get("w").await?;
    assert_eq!(
        b.types.map(|t| t.api_version),
        Some("example.com/v1beta1".to_string())
    );

    crds.delete("widgets.example.com", &DeleteParams::default())
        .await?;
    assert_eq!(api_err(v1.get("w").await).0, 404);
    let groups = client.list_api_groups().await?;
    assert!(!groups.groups.iter().any(|g| g.name == "example.com"));
    Ok(())
}

/// Copies the status subresource: writes to the main resource ignore `.status`, writes
/// to `/status` change only `.status`; `generation` starts at 1 and bumps only when the
/// spec changes; no-op writes keep the resourceVersion.
#[tokio::test]
async fn status_subresource_and_generation() -> R {
    let (_sim, client) = sim().await?;
    install_widgets(&client, &["v1"]).await?;
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &widget_ar("v1"));
    let mut w = widget("s", json!({"name": "abc"}))?;
    w.data["status"] = json!({"ready": true});
    let c = api.create(&PostParams::default(), &w).await?;
    assert_eq!(c.metadata.generation, Some(1));
    assert_eq!(c.data.get("status"), None, "create drops status");

    let pp = PatchParams::default();
    let s = api
        .patch_status("s", &pp, &Patch::Merge(json!({"status": {"ready": true}, "spec": {"name": "zzz"}, "metadata": {"labels": {"x": "y"}}})))
        .await?;
    assert_eq!(s.data.pointer("/status/ready"), Some(&json!(true)));
    assert_eq!(s.data.pointer("/spec/name"), Some(&json!("abc")));
    assert_eq!(s.metadata.labels, None);
    assert_eq!(s.metadata.generation, Some(1));

    let m = api
        .patch(
            "s",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}, "status": {"ready": false}})),
        )
        .await?;
    assert_eq!(m.metadata.generation, Some(1), "metadata-only change");
    assert_eq!(
        m.data.pointer("/status/ready"),
        Some(&json!(true)),
        "main write ignores status"
    );

    let sp = api
        .patch("s", &pp, &Patch::Merge(json!({"spec": {"name": "def"}})))
        .await?;
    assert_eq!(sp.metadata.generation, Some(2));
    let same = api
        .patch("s", &pp, &Patch::Merge(json!({"spec": {"name": "def"}})))
        .await?;
    assert_eq!(same.metadata.resource_version, sp.metadata.resource_version);

    let mut stale = sp.clone();
    stale.metadata.resource_version = None;
    let (code, _, msg) = api_err(api.replace("s", &PostParams::default(), &stale).await);
    assert_eq!(
        code, 422,
        "custom resources need a resourceVersion on update: {msg}"
    );
    Ok(())
}

/// Copies finalizers: delete sets deletionTimestamp and keeps the object (MODIFIED),
/// no finalizer may be added afterwards, removing the last finalizer deletes it.
#[tokio::test]
async fn finalizers_and_deletion_timestamp() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut c = cm("f", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    cms.create(&PostParams::default(), &c).await?;
    cms.delete("f", &DeleteParams::default()).await?;
    let d = cms.get("f").await?;
    assert!(d.metadata.deletion_timestamp.is_some());
    let pp = PatchParams::default();
    let add = cms
        .patch(
            "f",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/keep", "example.com/more"]}}),
            ),
        )
        .await;
    let (code, _, msg) = api_err(add);
    assert_eq!(code, 422);
    assert!(
        msg.contains("no new finalizers can be added if the object is being deleted"),
        "{msg}"
    );
    cms.patch(
        "f",
        &pp,
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    assert_eq!(api_err(cms.get("f").await).0, 404);
    Ok(())
}

/// Copies the garbage collector: dependents whose owners are all gone are deleted in
/// the background (Background propagation), while Orphan propagation strips the
/// ownerReference and keeps them.
#[tokio::test]
async fn garbage_collection() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await?;
    let owner2 = cms
        .create(&PostParams::default(), &cm("owner2", json!({})))
        .await?;
    let dep = |name: &str, o: &ConfigMap| -> ConfigMap {
        let mut c = cm(name, json!({}));
        c.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: o.metadata.name.clone().unwrap_or_default(),
                uid: o.metadata.uid.clone().unwrap_or_default(),
                ..Default::default()
            },
        ]);
        c
    };
    cms.create(&PostParams::default(), &dep("dep", &owner))
        .await?;
    cms.create(&PostParams::default(), &dep("kept", &owner2))
        .await?;
    cms.delete("owner", &DeleteParams::default()).await?;
    cms.delete("owner2", &DeleteParams::orphan()).await?;
    let mut gone = false;
    for _ in 0..50 {
        if api_err(cms.get("dep").await).0 == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "dependent was not collected");
    let kept = cms.get("kept").await?;
    assert_eq!(
        kept.metadata.owner_references.map(|r| r.len()).unwrap_or(0),
        0
    );
    Ok(())
}

/// Copies namespace deletion: the namespace turns Terminating, its content is deleted,
/// then it disappears; new content is refused meanwhile.
#[tokio::test]
async fn namespace_deletion() -> R {
    let (_sim, client) = sim().await?;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}}))?;
    nss.create(&PostParams::default(), &ns).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let mut held = cm("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await?;
    cms.create(&PostParams::default(), &cm("free", json!({})))
        .await?;
    nss.delete("doomed", &DeleteParams::default()).await?;
    let t = nss.get("doomed").await?;
    assert_eq!(
        t.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    let (code, _, _) = api_err(
        cms.create(&PostParams::default(), &cm("late", json!({})))
            .await,
    );
    assert_eq!(code, 403);
    let mut free_gone = false;
    for _ in 0..100 {
        if api_err(cms.get("free").await).0 == 404 {
            free_gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(free_gone, "namespace content was not deleted");
    assert!(cms.get("held").await?.metadata.deletion_timestamp.is_some());
    assert!(nss.get("doomed").await.is_ok(), "waits for the finalizer");
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    let mut gone = false;
    for _ in 0..50 {
        if api_err(nss.get("doomed").await).0 == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone);
    Ok(())
}

/// Copies the PATCH content types: merge patch, JSON patch (a failing `test` op is 422),
/// strategic merge for built-in kinds (415 for custom resources), server-side apply
/// (fieldManager required, creates when missing, records managedFields) and
/// resourceVersion preconditions inside a patch.
#[tokio::test]
async fn patch_types() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("p", json!({})))
        .await?;
    let pp = PatchParams::default();
    let m = cms
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"data": {"a": "1", "k": null}})),
        )
        .await?;
    assert_eq!(m.data, Some([("a".to_string(), "1".to_string())].into()));
    let j = cms
        .patch(
            "p",
            &pp,
            &Patch::Json::<()>(serde_json::from_value(
                json!([{"op": "add", "path": "/data/b", "value": "2"}]),
            )?),
        )
        .await?;
    assert_eq!(j.data.map(|d| d.len()), Some(2));
    let bad = cms
        .patch(
            "p",
            &pp,
            &Patch::Json::<()>(serde_json::from_value(
                json!([{"op": "test", "path": "/data/a", "value": "9"}]),
            )?),
        )
        .await;
    assert_eq!(api_err(bad).0, 422);
    let s = cms
        .patch("p", &pp, &Patch::Strategic(json!({"data": {"c": "3"}})))
        .await?;
    assert_eq!(s.data.map(|d| d.len()), Some(3));
    let stale = cms
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"x": "y"}})),
        )
        .await;
    assert_eq!(api_err(stale).0, 409);

    let no_manager = cms
        .patch(
            "q",
            &pp,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q"}}),
            ),
        )
        .await;
    assert_eq!(api_err(no_manager).0, 422);
    let ap = PatchParams::apply("tester").force();
    let a = cms
        .patch("q", &ap, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q"}, "data": {"one": "1"}})))
        .await?;
    assert_eq!(a.data.map(|d| d.len()), Some(1));
    let a2 = cms
        .patch("q", &ap, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "q", "labels": {"l": "v"}}, "data": {"two": "2"}})))
        .await?;
    assert_eq!(a2.data.map(|d| d.len()), Some(2));
    let managers: Vec<String> = a2
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(managers.contains(&"tester".to_string()), "{managers:?}");

    install_widgets(&client, &["v1"]).await?;
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &widget_ar("v1"));
    api.create(
        &PostParams::default(),
        &widget("w", json!({"name": "abc"}))?,
    )
    .await?;
    let r = api
        .patch("w", &pp, &Patch::Strategic(json!({"spec": {"name": "x"}})))
        .await;
    assert_eq!(api_err(r).0, 415);
    Ok(())
}

/// Copies custom resource schema handling: defaults applied, unknown fields pruned (a
/// Warning by default, 400 under fieldValidation=Strict), violations 422 Invalid with
/// the apiserver's message and causes.
#[tokio::test]
async fn schema_validation() -> R {
    let (_sim, client) = sim().await?;
    install_widgets(&client, &["v1"]).await?;
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &widget_ar("v1"));
    let c = api
        .create(
            &PostParams::default(),
            &widget("d", json!({"name": "abc", "extra": 1}))?,
        )
        .await?;
    assert_eq!(c.data.pointer("/spec/size"), Some(&json!(3)), "default");
    assert_eq!(c.data.pointer("/spec/extra"), None, "pruned");
    let (code, reason, msg) = api_err(
        api.create(
            &PostParams::default(),
            &widget("bad", json!({"name": "ABC!"}))?,
        )
        .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(
        msg.starts_with("Widget.example.com \"bad\" is invalid: spec.name"),
        "{msg}"
    );
    let (code, _, _) = api_err(
        api.create(&PostParams::default(), &widget("bad2", json!({"size": 1}))?)
            .await,
    );
    assert_eq!(code, 422, "required");

    let req = http::Request::post("/apis/example.com/v1/namespaces/default/widgets?fieldValidation=Strict")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "strict"}, "spec": {"name": "abc", "foo": 1}}))?)?;
    let err = client.request::<Value>(req).await;
    let (code, _, msg) = api_err(err);
    assert_eq!(
        (code, msg.as_str()),
        (400, "strict decoding error: unknown field \"spec.foo\"")
    );
    Ok(())
}

/// Copies persistence: after shutdown and reopen on the same data directory every
/// object, the resourceVersion counter (never backwards), CRD-registered kinds and the
/// admin token are back.
#[tokio::test]
async fn persistence_across_restart() -> R {
    let dir = tempfile::tempdir()?;
    let config = SimConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..SimConfig::default()
    };
    let (sim, client) = sim_with(config.clone()).await?;
    let token = sim.admin_token();
    install_widgets(&client, &["v1"]).await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for i in 0..1000 {
        cms.create(&PostParams::default(), &cm(&format!("p{i}"), json!({})))
            .await?;
    }
    cms.delete("p5", &DeleteParams::default()).await?;
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &widget_ar("v1"));
    api.create(
        &PostParams::default(),
        &widget("kept", json!({"name": "abc"}))?,
    )
    .await?;
    let last_rv: u64 = cms
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default()
        .parse()?;
    sim.shutdown().await;

    let (sim2, client2) = sim_with(config).await?;
    assert_eq!(sim2.admin_token(), token);
    let cms2: Api<ConfigMap> = Api::default_namespaced(client2.clone());
    assert_eq!(cms2.list(&ListParams::default()).await?.items.len(), 999);
    let api2: Api<DynamicObject> = Api::default_namespaced_with(client2.clone(), &widget_ar("v1"));
    api2.get("kept").await?;
    let n = cms2
        .create(&PostParams::default(), &cm("after", json!({})))
        .await?;
    let rv: u64 = n.metadata.resource_version.unwrap_or_default().parse()?;
    assert!(rv > last_rv, "{rv} <= {last_rv}");
    sim2.shutdown().await;
    Ok(())
}

/// Copies the apiserver's error surface over raw HTTP: unknown paths 404 Status,
/// malformed JSON 400, a wrong bearer token 401, anonymous requests to resources and
/// discovery 403, anonymous access to health and version (the default RBAC policy's
/// `system:public-info-viewer`).
#[tokio::test]
async fn http_errors_and_auth() -> R {
    use tower::ServiceExt;
    let (sim, _client) = sim().await?;
    let call = |method: &str, path: &str, token: Option<String>, body: &'static str| {
        let mut b = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json");
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let req = b.body(axum::body::Body::from(body));
        let router = sim.router();
        async move {
            let resp = router.oneshot(req?).await?;
            let code = resp.status().as_u16();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await?;
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            anyhow::Ok((code, v, String::from_utf8_lossy(&bytes).to_string()))
        }
    };
    let t = Some(sim.admin_token());
    let (code, v, _) = call("GET", "/apis/nope/v1/things", t.clone(), "").await?;
    assert_eq!(
        (code, v["kind"].as_str(), v["reason"].as_str()),
        (404, Some("Status"), Some("NotFound"))
    );
    let (code, v, _) = call(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        t.clone(),
        "{not json",
    )
    .await?;
    assert_eq!((code, v["reason"].as_str()), (400, Some("BadRequest")));
    let (code, v, _) = call("GET", "/api/v1/namespaces", Some("wrong".into()), "").await?;
    assert_eq!((code, v["reason"].as_str()), (401, Some("Unauthorized")));
    let (code, v, _) = call("GET", "/api/v1/namespaces", None, "").await?;
    assert_eq!((code, v["reason"].as_str()), (403, Some("Forbidden")));
    let (code, v, _) = call("GET", "/version", None, "").await?;
    assert_eq!(
        (code, v["gitVersion"].as_str()),
        (200, Some("v1.33.0-terrace-sim"))
    );
    let (code, _, text) = call("GET", "/healthz", None, "").await?;
    assert_eq!((code, text.as_str()), (200, "ok"));
    // Discovery is for system:authenticated only (the system:discovery binding).
    let (code, v, _) = call("GET", "/api/v1", None, "").await?;
    assert_eq!(
        (code, v["message"].as_str()),
        (
            403,
            Some("forbidden: User \"system:anonymous\" cannot get path \"/api/v1\"")
        )
    );
    let (code, v, _) = call("GET", "/api/v1", t.clone(), "").await?;
    assert_eq!(code, 200);
    let pods = v["resources"].as_array().cloned().unwrap_or_default();
    assert!(pods.iter().any(|r| r["name"] == "pods/status"));
    let (code, _, _) = call(
        "PUT",
        "/api/v1/namespaces/default/configmaps",
        t.clone(),
        "{}",
    )
    .await?;
    assert_eq!(code, 405);
    Ok(())
}

/// Copies `as=Table` content negotiation: lists, gets and watches answer with
/// meta.k8s.io/v1 Tables built from the printer columns.
#[tokio::test]
async fn table_output() -> R {
    let (_sim, client) = sim().await?;
    install_widgets(&client, &["v1"]).await?;
    let api: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &widget_ar("v1"));
    api.create(
        &PostParams::default(),
        &widget("t", json!({"name": "abc", "size": 7}))?,
    )
    .await?;
    let req = http::Request::get("/apis/example.com/v1/namespaces/default/widgets")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())?;
    let t: Value = client.request(req).await?;
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(cols, ["Name", "Size"]);
    assert_eq!(t["rows"][0]["cells"], json!(["t", 7]));
    Ok(())
}

/// Copies the Pods kube-apiserver stores: created Pending (an image-only container
/// never starts on the simulated node), status
/// subresource served, label selection works.
#[tokio::test]
async fn pods_are_stored() -> R {
    let (_sim, client) = sim().await?;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )?;
    let c = pods.create(&PostParams::default(), &p).await?;
    assert_eq!(c.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    let s = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await?;
    assert_eq!(s.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    assert_eq!(
        pods.list(&ListParams::default().labels("a=b"))
            .await?
            .items
            .len(),
        1
    );
    Ok(())
}

/// Copies streaming lists (`sendInitialEvents=true`): the current objects as ADDED, then
/// a BOOKMARK annotated `k8s.io/initial-events-end`, then live events.
#[tokio::test]
async fn watch_send_initial_events() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("i1", json!({})))
        .await?;
    let wp = WatchParams::default().initial_events().timeout(3);
    let mut s = cms.watch(&wp, "").await?.boxed();
    assert!(matches!(s.try_next().await?, Some(WatchEvent::Added(_))));
    match s.try_next().await? {
        Some(WatchEvent::Bookmark(b)) => assert_eq!(
            b.metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        ),
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    Ok(())
}

/// Copies deletecollection with a label selector, and `dryRun=All` leaving storage
/// untouched.
#[tokio::test]
async fn delete_collection_and_dry_run() -> R {
    let (_sim, client) = sim().await?;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for (n, l) in [("x1", "x"), ("x2", "x"), ("y1", "y")] {
        cms.create(&PostParams::default(), &cm(n, json!({"g": l})))
            .await?;
    }
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    cms.create(&dry, &cm("ghost", json!({}))).await?;
    assert_eq!(api_err(cms.get("ghost").await).0, 404);
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("g=x"),
    )
    .await?;
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(left, ["y1"]);
    Ok(())
}

/// Copies fieldValidation=Warn (the default): unknown fields are pruned and reported in
/// a `Warning: 299 - "unknown field ..."` response header.
#[tokio::test]
async fn unknown_field_warning_header() -> R {
    let (sim, client) = sim().await?;
    install_widgets(&client, &["v1"]).await?;
    use tower::ServiceExt;
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "warn"}, "spec": {"name": "abc", "foo": 1}});
    let req = http::Request::post("/apis/example.com/v1/namespaces/default/widgets")
        .header("authorization", format!("Bearer {}", sim.admin_token()))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))?;
    let resp = sim.router().oneshot(req).await?;
    assert_eq!(resp.status().as_u16(), 201);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.foo\"""#]);
    Ok(())
}

/// Copies the apiserver's body negotiation: YAML bodies are accepted on create, a
/// serializer the server does not have (here CBOR, and protobuf for a kind without a
/// protobuf decoding) is 415 UnsupportedMediaType.
#[tokio::test]
async fn body_content_types() -> R {
    use tower::ServiceExt;
    let (sim, _client) = sim().await?;
    let post = |ct: &str, body: &'static [u8]| {
        http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("authorization", format!("Bearer {}", sim.admin_token()))
            .header("content-type", ct)
            .body(axum::body::Body::from(body))
    };
    let yaml = sim
        .router()
        .oneshot(post(
            "application/yaml",
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\n",
        )?)
        .await?;
    assert_eq!(yaml.status().as_u16(), 201);
    // A Pod in protobuf (typeMeta v1/Pod): the simulator decodes only some kinds.
    let proto = sim
        .router()
        .oneshot(post(
            "application/vnd.kubernetes.protobuf",
            b"k8s\x00\n\t\n\x02v1\x12\x03Pod\x12\x00",
        )?)
        .await?;
    assert_eq!(proto.status().as_u16(), 415);
    let cbor = sim
        .router()
        .oneshot(post("application/cbor", b"\xa0")?)
        .await?;
    assert_eq!(cbor.status().as_u16(), 415);
    Ok(())
}
