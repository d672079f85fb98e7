//! `terrace blobs migrate`: copies every blob the cluster's objects reference (state
//! versions' state and JSON state, configuration versions' archives) from one blob store
//! to the other (`cluster` ↔ `s3://BUCKET[/PREFIX]`), verifies each copy against the
//! SHA-256 recorded in the object's status, and switches the object's finalizer
//! (`terrace.dev/blobs` on with S3, off with the cluster store). The keys stay the same,
//! so once it has run, restarting the API server and the operator with the new
//! `--blob-store` switches the references. Resumable: a blob already in the target with
//! the recorded checksum is not copied again, so an interrupted run is simply run again.
//! The source blobs are left in place (delete them once the switch is done). Log
//! archives of earlier versions (ConfigMaps `<pod>-log`) are moved into the target store
//! as the parts of their logs; with `--from` and `--to` naming the same store only they
//! are moved (after an upgrade: `terrace blobs migrate --from cluster --to cluster`).
//!
//! `terrace blobs sweep`: lists the objects of an S3 blob store whose owner (the
//! StateVersion or ConfigurationVersion their key names, or the Workspace or
//! RegistryModule of a run history archive) no longer exists, and with
//! `--delete` removes them. The bucket is listed before the objects, so a blob written
//! meanwhile has an owner that the object listing sees.

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use std::collections::HashSet;
use terrace_api_server::blobs::{AnyBlobStore, BlobError, BlobStore, SecretBlobStore};

use terrace_blobstore::s3::{BlobOwner, S3Store};
use terrace_blobstore::{BlobStoreSettings, Location, sha256_hex};
use terrace_crds::blobs::FINALIZER;
use terrace_crds::constants::LABEL_ID;
use terrace_crds::{ConfigurationVersion, StateVersion};

/// Flags of `terrace blobs migrate`.
#[derive(Clone, Debug, Args)]
pub struct MigrateArgs {
    /// The store the blobs are in now: `cluster` or `s3://BUCKET[/PREFIX]`.
    #[arg(long, value_parser = Location::parse)]
    pub from: Location,
    /// The store to copy them to: `cluster` or `s3://BUCKET[/PREFIX]`.
    #[arg(long, value_parser = Location::parse)]
    pub to: Location,
    /// URL of the S3-compatible server (as `--s3-endpoint` of `terrace api-server`).
    #[arg(long, env = "TERRACE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// Region of the bucket.
    #[arg(long, env = "TERRACE_S3_REGION")]
    pub s3_region: Option<String>,
    /// Address the bucket in the URL path.
    #[arg(long, env = "TERRACE_S3_PATH_STYLE")]
    pub s3_path_style: bool,
}

/// What a run did.
#[derive(Debug, Default)]
struct Tally {
    copied: usize,
    already: usize,
    missing: usize,
}

/// One side of the migration.
#[derive(Clone)]
enum Side {
    Cluster(kube::Client),
    S3(S3Store),
}

impl Side {
    fn store(&self, ns: &str, owner: Option<OwnerReference>) -> AnyBlobStore {
        match self {
            Side::Cluster(c) => {
                AnyBlobStore::Secrets(Box::new(SecretBlobStore::new(c.clone(), ns, owner)))
            }
            Side::S3(s) => AnyBlobStore::S3(s.scoped(ns)),
        }
    }
}

pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    if args.from == args.to {
        // One store: only the log archives of earlier versions move into it.
        let dst = match &args.to {
            Location::Cluster => Side::Cluster(client.clone()),
            s3 @ Location::S3 { .. } => Side::S3(s3_store(&args, s3).await?),
        };
        let logs = migrate_logs(&client, &dst).await?;
        println!("moved {logs} log archives (ConfigMaps) into {}", args.to);
        return Ok(());
    }
    let s3_location = match (&args.from, &args.to) {
        (Location::Cluster, s @ Location::S3 { .. })
        | (s @ Location::S3 { .. }, Location::Cluster) => s.clone(),
        _ => anyhow::bail!(
            "one of --from and --to must be `cluster`, the other `s3://…` (or both the same store, to move log archives into it)"
        ),
    };
    let s3 = s3_store(&args, &s3_location).await?;
    let to_s3 = matches!(args.to, Location::S3 { .. });
    let (src, dst) = if to_s3 {
        (Side::Cluster(client.clone()), Side::S3(s3))
    } else {
        (Side::S3(s3), Side::Cluster(client.clone()))
    };
    let mut tally = Tally::default();

    let versions: Api<StateVersion> = Api::all(client.clone());
    for v in versions.list(&ListParams::default()).await?.items {
        let blobs: Vec<(String, String)> = v
            .status
            .iter()
            .flat_map(|s| s.blobs())
            .map(|b| (b.key.clone(), b.sha256.clone()))
            .collect();
        migrate_object(&client, &v, &blobs, &src, &dst, to_s3, &mut tally).await?;
    }
    let cvs: Api<ConfigurationVersion> = Api::all(client.clone());
    for cv in cvs.list(&ListParams::default()).await?.items {
        let blobs: Vec<(String, String)> = cv
            .status
            .as_ref()
            .and_then(|s| s.archive.as_ref())
            .map(|a| (a.key.clone(), a.sha256.clone()))
            .into_iter()
            .collect();
        migrate_object(&client, &cv, &blobs, &src, &dst, to_s3, &mut tally).await?;
    }
    let logs = migrate_logs(&client, &dst).await?;
    println!(
        "migrated from {} to {}: {} copied, {} already there, {} missing in the source (deleted data); {logs} log archives (ConfigMaps) moved",
        args.from, args.to, tally.copied, tally.already, tally.missing
    );
    println!(
        "now restart the API server and the operator with --blob-store {}",
        args.to
    );
    Ok(())
}

/// The S3 store of `location`, probed.
async fn s3_store(args: &MigrateArgs, location: &Location) -> anyhow::Result<S3Store> {
    let s3 = S3Store::from_settings(&BlobStoreSettings {
        location: location.clone(),
        s3_endpoint: args.s3_endpoint.clone(),
        s3_region: args.s3_region.clone(),
        s3_path_style: args.s3_path_style,
    })?
    .context("no S3 store")?;
    s3.probe()
        .await
        .with_context(|| format!("the bucket {} failed its probe", s3.name()))?;
    Ok(s3)
}

/// Moves every log archive ConfigMap (`<pod>-log`, binaryData `log.gz`, written by
/// terrace before logs went to the blob store) into `dst` as the parts of its Pod's log
/// (`terrace_crds::run::logs`), owned by the ConfigMap's owner (the run or test run),
/// then deletes the ConfigMap. A log whose first part is there already is only deleted.
async fn migrate_logs(client: &kube::Client, dst: &Side) -> anyhow::Result<usize> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use terrace_crds::constants::{LABEL_MANAGED_BY, MANAGED_BY};
    use terrace_crds::run::logs::{part_key, parts};
    let cms: Api<ConfigMap> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let mut moved = 0;
    for cm in cms.list(&lp).await?.items {
        let name = cm.name_any();
        let ns = cm.namespace().unwrap_or_default();
        let (Some(pod), Some(gz)) = (
            name.strip_suffix("-log"),
            cm.binary_data
                .as_ref()
                .and_then(|d| d.get(terrace_api_server::pod_logs::ARCHIVE_KEY)),
        ) else {
            continue;
        };
        let text = terrace_api_server::pod_logs::gunzip(&gz.0)
            .with_context(|| format!("the log archive {ns}/{name} is not gzip"))?;
        let owner = cm
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .cloned();
        let store = dst.store(&ns, owner);
        match store.get(&part_key(pod, 0), None).await {
            Ok(_) => {}
            Err(BlobError::NotFound(_)) => {
                for (n, part) in (0u64..).zip(parts(&text)) {
                    let gz = terrace_api_server::blobs::gzip(part)?;
                    store
                        .put(&part_key(pod, n), gz.into())
                        .await
                        .with_context(|| format!("storing the log of {ns}/{pod}"))?;
                }
            }
            Err(e) => return Err(e).with_context(|| format!("reading the log of {ns}/{pod}")),
        }
        let ns_cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        match ns_cms.delete(&name, &Default::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
        moved += 1;
    }
    Ok(moved)
}

/// Copies the blobs of one object (keys with their recorded SHA-256), then sets its
/// finalizer for the target store.
async fn migrate_object<K>(
    client: &kube::Client,
    obj: &K,
    blobs: &[(String, String)],
    src: &Side,
    dst: &Side,
    to_s3: bool,
    tally: &mut Tally,
) -> anyhow::Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if obj.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    let ns = obj.namespace().unwrap_or_default();
    let owner = obj.controller_owner_ref(&());
    let (from, to) = (src.store(&ns, owner.clone()), dst.store(&ns, owner));
    for (key, sha) in blobs {
        let what = format!("{ns}/{} {key}", obj.name_any());
        if let Ok(bytes) = to.get(key, Some(sha)).await
            && sha256_hex(&bytes) == *sha
        {
            tally.already += 1;
            continue;
        }
        let bytes = match from.get(key, Some(sha)).await {
            Ok(b) => b,
            Err(BlobError::NotFound(_)) => {
                tally.missing += 1;
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {what}")),
        };
        anyhow::ensure!(
            sha256_hex(&bytes) == *sha,
            "{what}: the source bytes do not match the recorded SHA-256"
        );
        to.put(key, bytes)
            .await
            .with_context(|| format!("writing {what}"))?;
        let back = to
            .get(key, Some(sha))
            .await
            .with_context(|| format!("reading back {what}"))?;
        anyhow::ensure!(
            sha256_hex(&back) == *sha,
            "{what}: the copy read back differs"
        );
        tally.copied += 1;
    }
    set_finalizer(client, obj, to_s3).await
}

/// Puts [`FINALIZER`] on `obj` (`on`) or takes it off, under its resourceVersion.
async fn set_finalizer<K>(client: &kube::Client, obj: &K, on: bool) -> anyhow::Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let has = obj.finalizers().iter().any(|f| f == FINALIZER);
    if has == on {
        return Ok(());
    }
    let mut list: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if on {
        list.push(FINALIZER.to_owned());
    }
    let api: Api<K> = Api::namespaced(client.clone(), &obj.namespace().unwrap_or_default());
    let patch = serde_json::json!({"metadata": {"resourceVersion": obj.resource_version(), "finalizers": list}});
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .with_context(|| format!("setting the finalizer of {}", obj.name_any()))?;
    Ok(())
}

/// Flags of `terrace blobs sweep`.
#[derive(Clone, Debug, Args)]
pub struct SweepArgs {
    /// The S3 blob store (the same flags and variables as `terrace api-server`'s).
    #[command(flatten)]
    pub blobs: BlobStoreSettings,
    /// Delete the orphaned objects (without it they are only listed).
    #[arg(long)]
    pub delete: bool,
}

/// Every object of kind `K` with an ID, as the owner of blobs whose keys name it as
/// `kind`.
async fn live_owners<K>(client: &kube::Client, kind: &str) -> anyhow::Result<Vec<BlobOwner>>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let objects = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    Ok(objects
        .iter()
        .filter_map(|o| {
            Some(BlobOwner {
                namespace: o.namespace().unwrap_or_default(),
                kind: kind.to_owned(),
                id: o.labels().get(LABEL_ID).cloned()?,
            })
        })
        .collect())
}

pub async fn sweep(args: SweepArgs) -> anyhow::Result<()> {
    let s3 = S3Store::from_settings(&args.blobs)?.context(
        "the sweep is for an S3 blob store (--blob-store s3://…); the cluster store's chunk \
         Secrets are removed with their owners by garbage collection",
    )?;
    let listed = s3.list().await?;
    let client = kube::Client::try_default().await?;
    let mut live: HashSet<BlobOwner> = HashSet::new();
    live.extend(live_owners::<StateVersion>(&client, "state-versions").await?);
    live.extend(live_owners::<ConfigurationVersion>(&client, "configuration-versions").await?);
    live.extend(live_owners::<terrace_crds::Workspace>(&client, "history/runs").await?);
    live.extend(live_owners::<terrace_crds::RegistryModule>(&client, "history/test-runs").await?);
    let orphans: Vec<_> = listed
        .iter()
        .filter(|l| l.owner.as_ref().is_some_and(|o| !live.contains(o)))
        .collect();
    let mut bytes = 0;
    for o in &orphans {
        println!("orphan {} ({} bytes)", o.key, o.size);
        bytes += o.size;
        if args.delete {
            s3.delete_listed(&o.key).await?;
        }
    }
    println!(
        "{} objects in {}, {} orphaned ({bytes} bytes){}",
        listed.len(),
        s3.name(),
        orphans.len(),
        match (args.delete, orphans.is_empty()) {
            (_, true) => "",
            (true, false) => ", deleted",
            (false, false) => "; run with --delete to remove them",
        }
    );
    Ok(())
}
