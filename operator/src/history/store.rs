//! The archive in the blob store: each owner's manifest and segments of archived runs
//! and test runs with their packed logs, the namespace's directory in shards, and pruning
//! and deleting what retention lets go.

use super::*;

/// The blob store of namespace `ns`, its new blobs owned by `owner` (cluster store).
pub(super) fn store(
    ctx: &Context,
    ns: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
) -> Result<AnyBlobStore, Error> {
    match &ctx.blobs {
        Ok(None) => Ok(AnyBlobStore::Secrets(Box::new(
            SecretBlobStore::new(ctx.client.clone(), ns, owner).managed_by(FIELD_MANAGER_OPERATOR),
        ))),
        Ok(Some(s3)) => Ok(AnyBlobStore::S3(s3.scoped(ns))),
        Err(why) => Err(Error::Unavailable(format!("the blob store: {why}"))),
    }
}

pub(super) fn blob_error(e: BlobError) -> Error {
    Error::Unavailable(format!("the blob store: {e}"))
}

/// A stored document, or its default when there is none.
pub(super) async fn read_doc<T: Default + for<'de> serde::Deserialize<'de>>(
    store: &AnyBlobStore,
    key: &str,
) -> Result<T, Error> {
    match store.get(key, None).await {
        Ok(b) => decode(&b).map_err(|e| Error::Invalid(format!("the archive document {key}: {e}"))),
        Err(BlobError::NotFound(_)) => Ok(T::default()),
        Err(e) => Err(blob_error(e)),
    }
}

pub(super) async fn write_doc<T: serde::Serialize>(
    store: &AnyBlobStore,
    key: &str,
    doc: &T,
) -> Result<(), Error> {
    let bytes = encode(doc).map_err(Error::Invalid)?;
    store.put(key, Bytes::from(bytes)).await.map_err(blob_error)
}

/// The whole log of Pod `pod`: its blob-stored parts, else an old log ConfigMap.
pub(super) async fn log_of(
    client: &kube::Client,
    store: &AnyBlobStore,
    ns: &str,
    pod: &str,
) -> Result<Option<Vec<u8>>, Error> {
    let mut text = Vec::new();
    let mut n = 0;
    loop {
        match store.get(&part_key(pod, n), None).await {
            Ok(gz) => {
                let part = terrace_crds::run::logs::gunzip(
                    &gz,
                    2 * terrace_crds::run::logs::PART_BYTES as u64,
                )
                .ok_or_else(|| {
                    Error::Invalid(format!("part {n} of the log of {pod} is not gzip"))
                })?;
                text.extend_from_slice(&part);
                n += 1;
            }
            Err(BlobError::NotFound(_)) => break,
            Err(e) => return Err(blob_error(e)),
        }
    }
    if n > 0 {
        return Ok(Some(text));
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let Some(cm) = cms.get_opt(&crate::testpod::log_archive_name(pod)).await? else {
        return Ok(None);
    };
    Ok(cm
        .binary_data
        .and_then(|mut d| d.remove(crate::testpod::LOG_ARCHIVE_KEY))
        .and_then(|gz| terrace_crds::run::logs::gunzip(&gz.0, 64 << 20)))
}

/// Appends `items` to the archive of owner `owner_id`, then deletes them; answers how
/// many objects the archive holds.
pub(super) async fn archive(
    ctx: &HistoryContext,
    kind: HistoryKind,
    ns: &str,
    owner_id: &str,
    owner: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
    items: Vec<Item>,
    retention_days: Option<i64>,
) -> Result<usize, Error> {
    let turn = ctx
        .directories
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((ns.to_owned(), kind))
        .or_default()
        .clone();
    let _turn = turn.lock().await;
    let client = &ctx.base.client;
    let owned = store(&ctx.base, ns, owner)?;
    let unowned = store(&ctx.base, ns, None)?;
    let mut manifest: Manifest = read_doc(&owned, &manifest_key(kind, owner_id)).await?;
    let mut directory = Shards::default();
    let pruned = match retention_days {
        Some(days) => {
            prune(
                &owned,
                &unowned,
                kind,
                owner_id,
                &mut manifest,
                &mut directory,
                days,
            )
            .await?
        }
        None => false,
    };
    if items.is_empty() && !pruned {
        return Ok(manifest.items.len());
    }
    let (mut seq, fresh) = manifest.open_segment();
    let mut segment: Segment = if fresh {
        Segment::default()
    } else {
        read_doc(&owned, &segment_key(kind, owner_id, seq)).await?
    };
    let known: std::collections::HashSet<String> =
        manifest.items.iter().map(|i| i.id.clone()).collect();
    let mut done = Vec::new();
    for item in items {
        if known.contains(&item.id) {
            done.push(item);
            continue;
        }
        let mut logs = std::collections::BTreeMap::new();
        let mut size = 0;
        for pod in &item.pods {
            if let Some(text) = log_of(client, &owned, ns, pod).await? {
                let packed = pack_log(&text).map_err(Error::Invalid)?;
                size += packed.len();
                logs.insert(pod.clone(), packed);
            }
        }
        if size > MAX_PACKED_LOGS {
            tracing::warn!(namespace = %ns, id = %item.id, bytes = size, "the logs are too large to archive; the object stays");
            continue;
        }
        let mut object = serde_json::to_value(item.obj.as_ref())
            .map_err(|e| Error::Invalid(format!("archiving {}: {e}", item.id)))?;
        if let Some(meta) = object["metadata"].as_object_mut() {
            for k in [
                "managedFields",
                "resourceVersion",
                "generation",
                "ownerReferences",
                "finalizers",
            ] {
                meta.remove(k);
            }
        }
        segment.items.push(Archived { object, logs });
        manifest.items.push(ManifestItem {
            id: item.id.clone(),
            order: item.live.order.clone(),
            seg: seq,
            status: item.status.clone(),
            source: item.source.clone(),
        });
        directory
            .shard(&unowned, kind, &item.id)
            .await?
            .owners
            .insert(item.id.clone(), owner_id.to_owned());
        if segment.items.len() >= SEGMENT_MAX {
            write_doc(&owned, &segment_key(kind, owner_id, seq), &segment).await?;
            manifest.segments.insert(seq, segment.items.len());
            seq += 1;
            segment = Segment::default();
        }
        done.push(item);
    }
    if !segment.items.is_empty() {
        write_doc(&owned, &segment_key(kind, owner_id, seq), &segment).await?;
        manifest.segments.insert(seq, segment.items.len());
    }
    write_doc(&owned, &manifest_key(kind, owner_id), &manifest).await?;
    directory.write(&unowned, kind).await?;
    let archived = manifest.items.len();
    for item in &done {
        delete(client, kind, ns, &item.name).await?;
        // Parts in a bucket are not reached by owner references.
        if matches!(owned, AnyBlobStore::S3(_)) {
            for pod in &item.pods {
                let mut n = 0;
                while owned.get(&part_key(pod, n), None).await.is_ok() {
                    let _ = owned.delete(&part_key(pod, n)).await;
                    n += 1;
                }
            }
        }
    }
    if !done.is_empty() {
        tracing::info!(namespace = %ns, owner = %owner_id, kind = kind.as_str(), count = done.len(), archived, "archived history");
    }
    Ok(archived)
}

/// The shards of a namespace's directory a pass read (and changes), by shard number.
#[derive(Default)]
pub(super) struct Shards(BTreeMap<u32, Directory>);

impl Shards {
    /// The shard of `id`, read on first use.
    async fn shard(
        &mut self,
        store: &AnyBlobStore,
        kind: HistoryKind,
        id: &str,
    ) -> Result<&mut Directory, Error> {
        use std::collections::btree_map::Entry;
        let n = directory_shard(id);
        Ok(match self.0.entry(n) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(read_doc(store, &directory_key(kind, n)).await?),
        })
    }

    /// Writes every shard read.
    async fn write(&self, store: &AnyBlobStore, kind: HistoryKind) -> Result<(), Error> {
        for (n, d) in &self.0 {
            write_doc(store, &directory_key(kind, *n), d).await?;
        }
        Ok(())
    }
}

/// Removes from the archive what a data retention policy of `days` days lets go: the
/// objects leave their segments (an emptied segment is deleted), the manifest and the
/// directory.
pub(super) async fn prune(
    store: &AnyBlobStore,
    unowned: &AnyBlobStore,
    kind: HistoryKind,
    owner_id: &str,
    manifest: &mut Manifest,
    directory: &mut Shards,
    days: i64,
) -> Result<bool, Error> {
    let gone = expired(manifest, days, k8s_openapi::jiff::Timestamp::now());
    for (seq, ids) in &gone {
        let key = segment_key(kind, owner_id, *seq);
        let mut segment: Segment = read_doc(store, &key).await?;
        segment.items.retain(|a| {
            let id = a.object["metadata"]["labels"][LABEL_ID]
                .as_str()
                .unwrap_or_default();
            !ids.iter().any(|g| g == id)
        });
        if segment.items.is_empty() {
            store.delete(&key).await.map_err(blob_error)?;
            manifest.segments.remove(seq);
        } else {
            write_doc(store, &key, &segment).await?;
            manifest.segments.insert(*seq, segment.items.len());
        }
        manifest.items.retain(|i| !ids.contains(&i.id));
        for id in ids {
            directory.shard(unowned, kind, id).await?.owners.remove(id);
        }
        tracing::info!(owner = %owner_id, kind = kind.as_str(), count = ids.len(), days, "archived history past the data retention policy deleted");
    }
    Ok(!gone.is_empty())
}

pub(super) async fn delete(
    client: &kube::Client,
    kind: HistoryKind,
    ns: &str,
    name: &str,
) -> Result<(), Error> {
    let dp = DeleteParams::background();
    let r = match kind {
        HistoryKind::Runs => Api::<Run>::namespaced(client.clone(), ns)
            .delete(name, &dp)
            .await
            .map(|_| ()),
        HistoryKind::TestRuns => Api::<TestRun>::namespaced(client.clone(), ns)
            .delete(name, &dp)
            .await
            .map(|_| ()),
    };
    match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
