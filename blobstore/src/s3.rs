//! The S3-compatible blob store (AWS S3, MinIO, Ceph RGW, any gateway), on the
//! `object_store` crate (its request signing, retries and multipart uploads).
//!
//! Keys are laid out per organization, kind and object, so a bucket policy can scope
//! them: `PREFIX/NAMESPACE/KIND/ID/…`, e.g. `terrace/acme/state-versions/sv-…/state` or
//! `terrace/acme/configuration-versions/cv-…` (NAMESPACE: the organization's namespace).
//!
//! Blobs stream both ways. An upload ([`S3Upload`]) gathers the pieces written to it into
//! parts of [`PART_BYTES`]: a blob that ends within one part goes up in one PUT on commit,
//! a larger one in a multipart upload started when its second part begins, at most
//! [`PARTS_IN_FLIGHT`] parts of it on the wire at once, and nothing visible until the
//! commit completes it. Every part held in memory takes one of the process's
//! [`PART_BUFFERS`] permits, so concurrent uploads wait for memory instead of growing it:
//! the API server holds at most that many parts, however many uploads run. A failed or
//! aborted upload is aborted on the server too (no half-written blob becomes visible).
//! A read streams the object's bytes as they arrive.
//!
//! Checksums: a blob put in one request carries the hex SHA-256 of its bytes in its user
//! metadata (`x-amz-meta-sha256`). A multipart upload starts before its last byte is
//! known, and S3 takes no metadata at completion, so a blob uploaded in parts carries
//! none: its checksum is the one its owner records (the state version's or configuration
//! version's status), which readers pass in. A read computes the SHA-256 again as the
//! bytes go by and ends in [`BlobError::Corrupt`] on a mismatch with either record, or
//! when the object has neither. Requests are retried briefly ([`RETRIES`] within
//! [`RETRY_TIMEOUT`]), so an unreachable server surfaces as [`BlobError::Backend`] in
//! seconds, not minutes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, ClientOptions, MultipartUpload, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::settings::{BlobStoreSettings, Location};
use crate::{
    BlobError, BlobStore, BlobStream, BlobUpload, Sha256Hasher, Stored, Verifier, sha256_hex,
};

/// User metadata key holding a blob's hex SHA-256 (`x-amz-meta-sha256` on the wire).
pub const METADATA_SHA256: &str = "sha256";
/// Size of one multipart part (S3's minimum is 5 MiB, except for the last; every part
/// but the last is exactly this size, as some S3-compatible servers require).
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Blobs larger than this go up in a multipart upload.
pub const MULTIPART_THRESHOLD: usize = PART_BYTES;
/// Most parts of one upload on the wire at once.
pub const PARTS_IN_FLIGHT: usize = 4;
/// Most parts of streamed uploads the process holds in memory at once (being filled or
/// on the wire), across all uploads: the bound on upload memory is this times
/// [`PART_BYTES`].
pub const PART_BUFFERS: usize = 6;
/// Retries of a failed request.
pub const RETRIES: usize = 2;
/// Longest a request is retried.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a connection to the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest one request (one PUT, one part, one GET) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Folder (under the prefix) of the objects the readiness probe writes.
pub const PROBE_FOLDER: &str = ".terrace-probe";

/// A bucket (with a prefix): one client shared by every organization's blobs.
#[derive(Clone)]
pub struct S3Store {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// The [`PART_BUFFERS`] permits, one per part held by a streamed upload.
    parts: Arc<Semaphore>,
    /// Shown in logs and errors: `s3://BUCKET/PREFIX`.
    name: String,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store").field("name", &self.name).finish()
    }
}

/// The key of blob `key` of namespace `namespace` under `prefix`.
pub fn object_key(prefix: &str, namespace: &str, key: &str) -> String {
    let key = key.trim_start_matches('/');
    if prefix.is_empty() {
        format!("{namespace}/{key}")
    } else {
        format!("{prefix}/{namespace}/{key}")
    }
}

/// An `object_store` error with its causes (the transport's reason is in the sources).
fn describe(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let c_s = c.to_string();
        if !s.contains(&c_s) {
            s.push_str(": ");
            s.push_str(&c_s);
        }
        cur = c.source();
    }
    s
}

fn backend(what: &str, e: &object_store::Error) -> BlobError {
    BlobError::Backend(format!("{what}: {}", describe(e)))
}

impl S3Store {
    /// The store of `settings`, or `None` when blobs live in the cluster. Credentials and
    /// any other `AWS_*` settings come from the environment.
    pub fn from_settings(settings: &BlobStoreSettings) -> Result<Option<S3Store>, BlobError> {
        Self::build(settings, AmazonS3Builder::from_env())
    }

    /// The store of `settings` over `builder` (which may hold credentials).
    fn build(
        settings: &BlobStoreSettings,
        builder: AmazonS3Builder,
    ) -> Result<Option<S3Store>, BlobError> {
        let Location::S3 { bucket, prefix } = &settings.location else {
            return Ok(None);
        };
        let mut b = builder
            .with_bucket_name(bucket)
            .with_virtual_hosted_style_request(!settings.s3_path_style)
            .with_retry(RetryConfig {
                max_retries: RETRIES,
                retry_timeout: RETRY_TIMEOUT,
                ..Default::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(CONNECT_TIMEOUT)
                    .with_timeout(REQUEST_TIMEOUT),
            );
        if let Some(endpoint) = &settings.s3_endpoint {
            b = b
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        if let Some(region) = &settings.s3_region {
            b = b.with_region(region);
        }
        let s3 = b.build().map_err(|e| backend("configuring S3", &e))?;
        Ok(Some(S3Store {
            store: Arc::new(s3),
            prefix: prefix.clone(),
            parts: Arc::new(Semaphore::new(PART_BUFFERS)),
            name: settings.location.to_string(),
        }))
    }

    /// A store over any `object_store` backend (tests use the in-memory one).
    pub fn with_object_store(store: Arc<dyn ObjectStore>, prefix: &str) -> S3Store {
        S3Store {
            store,
            prefix: prefix.trim_matches('/').to_owned(),
            parts: Arc::new(Semaphore::new(PART_BUFFERS)),
            name: format!("object store /{prefix}"),
        }
    }

    /// Where the blobs are (`s3://BUCKET/PREFIX`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The blobs of one namespace (organization).
    pub fn scoped(&self, namespace: &str) -> S3BlobStore {
        S3BlobStore {
            bucket: self.clone(),
            namespace: namespace.to_owned(),
        }
    }

    fn path(&self, namespace: &str, key: &str) -> Result<Path, BlobError> {
        Path::parse(object_key(&self.prefix, namespace, key))
            .map_err(|e| BlobError::Backend(format!("blob key {key:?}: {e}")))
    }

    /// Writes, reads back and deletes a probe object: whether the server is reachable
    /// and the credentials may do what terrace needs. The error says why not.
    pub async fn probe(&self) -> Result<(), BlobError> {
        let id = uuid::Uuid::new_v4().to_string();
        let probe = self.scoped(PROBE_FOLDER);
        let body = Bytes::from(format!("terrace readiness probe {id}"));
        probe.put(&id, body.clone()).await?;
        let back = probe.get(&id, None).await?;
        if back != body {
            return Err(BlobError::Backend(
                "the probe object read back differently".into(),
            ));
        }
        probe.delete(&id).await
    }

    async fn put_at(&self, path: &Path, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        let attributes = Attributes::from_iter([(
            Attribute::Metadata(METADATA_SHA256.into()),
            sha256_hex(&bytes),
        )]);
        if bytes.len() <= MULTIPART_THRESHOLD {
            let opts = PutOptions {
                attributes,
                ..Default::default()
            };
            self.store
                .put_opts(path, PutPayload::from_bytes(bytes), opts)
                .await
                .map_err(|e| backend(&format!("storing {key:?}"), &e))?;
            return Ok(());
        }
        let opts = PutMultipartOptions {
            attributes,
            ..Default::default()
        };
        let upload = self
            .store
            .put_multipart_opts(path, opts)
            .await
            .map_err(|e| backend(&format!("starting the upload of {key:?}"), &e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut rest = bytes;
        while !rest.is_empty() {
            if let Err(e) = w.wait_for_capacity(PARTS_IN_FLIGHT).await {
                let err = backend(&format!("uploading a part of {key:?}"), &e);
                if let Err(a) = w.abort().await {
                    tracing::warn!(key, error = %describe(&a), "aborting a multipart upload");
                }
                return Err(err);
            }
            let part = rest.split_to(rest.len().min(PART_BYTES));
            w.put(part);
        }
        // On failure the parts already sent stay invisible (an incomplete upload); a
        // bucket lifecycle rule (AbortIncompleteMultipartUpload) reclaims them.
        w.finish()
            .await
            .map_err(|e| backend(&format!("completing the upload of {key:?}"), &e))?;
        Ok(())
    }

    async fn get_stream_at(
        &self,
        path: &Path,
        key: &str,
        sha256: Option<&str>,
    ) -> Result<BlobStream, BlobError> {
        let result = match self.store.get(path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(BlobError::NotFound(key.to_owned()));
            }
            Err(e) => return Err(backend(&format!("reading {key:?}"), &e)),
        };
        let stored = result
            .attributes
            .get(&Attribute::Metadata(METADATA_SHA256.into()))
            .map(|v| v.to_string());
        let verifier = Verifier::new(key, sha256, stored.as_deref())?;
        let size = result.meta.size;
        let what = format!("reading {key:?}");
        let pieces = result
            .into_stream()
            .map_err(move |e| backend(&what, &e))
            .boxed();
        Ok(BlobStream {
            size,
            pieces: verifier.stream(pieces),
        })
    }

    async fn delete_at(&self, path: &Path, key: &str) -> Result<(), BlobError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(backend(&format!("deleting {key:?}"), &e)),
        }
    }
}

/// An object of the bucket under the store's prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The full object key (with the prefix).
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// What terrace blob it is, when its key follows the layout.
    pub owner: Option<BlobOwner>,
}

/// The object a blob belongs to, read from its key
/// (`NAMESPACE/state-versions/ID/…` or `NAMESPACE/configuration-versions/ID`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlobOwner {
    pub namespace: String,
    /// `state-versions`, `configuration-versions`, or the history archive of a workspace
    /// (`history/runs`) or module (`history/test-runs`).
    pub kind: String,
    /// The object's ID (`sv-…`, `cv-…`).
    pub id: String,
}

/// Kinds of objects that own blobs, as they appear in keys.
pub const OWNER_KINDS: [&str; 2] = ["state-versions", "configuration-versions"];

/// The owner of the blob at `rest` (a key with the prefix removed), if `rest` follows
/// the layout (the probe's objects and anything else do not).
pub fn owner_of(rest: &str) -> Option<BlobOwner> {
    let mut parts = rest.split('/');
    let (namespace, kind, id) = (parts.next()?, parts.next()?, parts.next()?);
    if namespace == PROBE_FOLDER {
        return None;
    }
    // The run history archive of a workspace or module: `history/runs/<ws ID>/…`,
    // `history/test-runs/<module ID>/…` (the namespace's directory has no owner).
    if kind == "history" {
        let owner = parts.next()?;
        return (matches!(id, "runs" | "test-runs") && owner != "directory" && !owner.is_empty())
            .then(|| BlobOwner {
                namespace: namespace.to_owned(),
                kind: format!("history/{id}"),
                id: owner.to_owned(),
            });
    }
    (OWNER_KINDS.contains(&kind) && !id.is_empty()).then(|| BlobOwner {
        namespace: namespace.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
    })
}

impl S3Store {
    /// Every object under the prefix, with the owner its key names.
    pub async fn list(&self) -> Result<Vec<Listed>, BlobError> {
        use futures::TryStreamExt;
        let prefix = (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()));
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(prefix.as_ref())
            .try_collect()
            .await
            .map_err(|e| backend("listing the bucket", &e))?;
        Ok(metas
            .into_iter()
            .map(|m| {
                let key = m.location.to_string();
                let rest = if self.prefix.is_empty() {
                    key.as_str()
                } else {
                    key.strip_prefix(&format!("{}/", self.prefix))
                        .unwrap_or(key.as_str())
                };
                Listed {
                    owner: owner_of(rest),
                    size: m.size,
                    key: key.clone(),
                }
            })
            .collect())
    }

    /// Deletes the object of full key `key` (as [`S3Store::list`] answers it).
    pub async fn delete_listed(&self, key: &str) -> Result<(), BlobError> {
        let path = Path::parse(key).map_err(|e| BlobError::Backend(format!("{key:?}: {e}")))?;
        self.delete_at(&path, key).await
    }
}

/// Checks `bytes` against the SHA-256 recorded when they were written.
pub fn verify(key: &str, want: Option<&str>, bytes: &[u8]) -> Result<(), BlobError> {
    Verifier::new(key, None, want)?.check(&sha256_hex(bytes), bytes.len() as u64)
}

/// The blobs of one namespace in a bucket.
#[derive(Clone, Debug)]
pub struct S3BlobStore {
    bucket: S3Store,
    namespace: String,
}

impl BlobStore for S3BlobStore {
    type Upload = S3Upload;

    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        self.bucket.put_at(&path, key, bytes).await
    }

    async fn upload(&self, key: &str) -> Result<S3Upload, BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        Ok(S3Upload {
            bucket: self.bucket.clone(),
            path,
            key: key.to_owned(),
            hasher: Sha256Hasher::default(),
            size: 0,
            part: Vec::new(),
            part_len: 0,
            permit: None,
            multipart: None,
            in_flight: JoinSet::new(),
        })
    }

    async fn get(&self, key: &str, sha256: Option<&str>) -> Result<Bytes, BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        let blob = self.bucket.get_stream_at(&path, key, sha256).await?;
        blob.into_bytes().await
    }

    async fn get_stream(&self, key: &str, sha256: Option<&str>) -> Result<BlobStream, BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        self.bucket.get_stream_at(&path, key, sha256).await
    }

    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        self.bucket.delete_at(&path, key).await
    }
}

/// A blob streamed into the bucket (see the module's docs): the part being filled, the
/// parts on the wire, and the multipart upload once there is more than one part.
pub struct S3Upload {
    bucket: S3Store,
    path: Path,
    key: String,
    hasher: Sha256Hasher,
    size: u64,
    /// The part being filled (pieces as written, not copied) and its length.
    part: Vec<Bytes>,
    part_len: usize,
    /// The [`PART_BUFFERS`] permit of the part being filled.
    permit: Option<OwnedSemaphorePermit>,
    multipart: Option<Box<dyn MultipartUpload>>,
    /// Parts on the wire, each with its permit.
    in_flight: JoinSet<Result<(), object_store::Error>>,
}

impl S3Upload {
    fn failed(&self, what: &str, e: &object_store::Error) -> BlobError {
        backend(&format!("{what} of {:?}", self.key), e)
    }

    /// The first error of the parts that have finished, if any.
    fn finished_parts(&mut self) -> Result<(), BlobError> {
        while let Some(done) = self.in_flight.try_join_next() {
            self.part_done(done)?;
        }
        Ok(())
    }

    fn part_done(
        &self,
        done: Result<Result<(), object_store::Error>, tokio::task::JoinError>,
    ) -> Result<(), BlobError> {
        match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.failed("uploading a part", &e)),
            Err(e) => Err(BlobError::Backend(format!(
                "uploading a part of {:?}: {e}",
                self.key
            ))),
        }
    }

    /// Waits until fewer than `most` parts are on the wire.
    async fn wait_for_parts(&mut self, most: usize) -> Result<(), BlobError> {
        while self.in_flight.len() >= most.max(1) {
            match self.in_flight.join_next().await {
                Some(done) => self.part_done(done)?,
                None => break,
            }
        }
        if most == 0 {
            while let Some(done) = self.in_flight.join_next().await {
                self.part_done(done)?;
            }
        }
        Ok(())
    }

    /// Sends the part being filled (starting the multipart upload with the first).
    async fn send_part(&mut self) -> Result<(), BlobError> {
        if self.multipart.is_none() {
            let upload = self
                .bucket
                .store
                .put_multipart_opts(&self.path, PutMultipartOptions::default())
                .await
                .map_err(|e| self.failed("starting the upload", &e))?;
            self.multipart = Some(upload);
        }
        self.wait_for_parts(PARTS_IN_FLIGHT).await?;
        let payload = PutPayload::from_iter(std::mem::take(&mut self.part));
        self.part_len = 0;
        let permit = self.permit.take();
        if let Some(upload) = self.multipart.as_mut() {
            let sending = upload.put_part(payload);
            self.in_flight.spawn(async move {
                let sent = sending.await;
                drop(permit);
                sent
            });
        }
        Ok(())
    }
}

impl BlobUpload for S3Upload {
    async fn write(&mut self, mut piece: Bytes) -> Result<(), BlobError> {
        self.finished_parts()?;
        self.hasher.update(&piece);
        self.size += piece.len() as u64;
        while !piece.is_empty() {
            // A full part is sent only once more bytes come: a blob of exactly one part
            // goes up in one PUT, with its checksum.
            if self.part_len == PART_BYTES {
                self.send_part().await?;
            }
            if self.permit.is_none() {
                let permit = self
                    .bucket
                    .parts
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| BlobError::Backend(format!("part buffers: {e}")))?;
                self.permit = Some(permit);
            }
            let take = piece.len().min(PART_BYTES - self.part_len);
            self.part.push(piece.split_to(take));
            self.part_len += take;
        }
        Ok(())
    }

    async fn commit(mut self) -> Result<Stored, BlobError> {
        let sha256 = std::mem::take(&mut self.hasher).finish();
        let stored = Stored {
            size: self.size,
            sha256: sha256.clone(),
        };
        if self.multipart.is_none() {
            let attributes =
                Attributes::from_iter([(Attribute::Metadata(METADATA_SHA256.into()), sha256)]);
            let payload = PutPayload::from_iter(std::mem::take(&mut self.part));
            let opts = PutOptions {
                attributes,
                ..Default::default()
            };
            self.bucket
                .store
                .put_opts(&self.path, payload, opts)
                .await
                .map_err(|e| self.failed("storing", &e))?;
            return Ok(stored);
        }
        let sent = async {
            if self.part_len > 0 {
                self.send_part().await?;
            }
            self.wait_for_parts(0).await
        }
        .await;
        let completed = match sent {
            Ok(()) => match self.multipart.as_mut() {
                Some(upload) => {
                    let key = self.key.clone();
                    upload
                        .complete()
                        .await
                        .map(|_| ())
                        .map_err(|e| backend(&format!("completing the upload of {key:?}"), &e))
                }
                None => Ok(()),
            },
            Err(e) => Err(e),
        };
        match completed {
            Ok(()) => {
                self.multipart = None;
                Ok(stored)
            }
            Err(e) => {
                self.abort().await;
                Err(e)
            }
        }
    }

    async fn abort(mut self) {
        self.in_flight.shutdown().await;
        self.part.clear();
        self.permit = None;
        if let Some(mut upload) = self.multipart.take()
            && let Err(e) = upload.abort().await
        {
            // The parts stay invisible; a bucket lifecycle rule
            // (AbortIncompleteMultipartUpload) reclaims them.
            tracing::warn!(key = self.key, error = %describe(&e), "aborting a multipart upload");
        }
    }
}

impl Drop for S3Upload {
    /// An upload dropped half-way (its request gone) is aborted in the background.
    fn drop(&mut self) {
        if let Some(mut upload) = self.multipart.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let key = std::mem::take(&mut self.key);
            rt.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!(key, error = %describe(&e), "aborting a dropped multipart upload");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests;
