//! The S3-compatible blob store (AWS S3, MinIO, Ceph RGW, any gateway), on the
//! `object_store` crate (its request signing, retries and multipart uploads).
//!
//! Keys are laid out per organization, kind and object, so a bucket policy can scope
//! them: `PREFIX/NAMESPACE/KIND/ID/…`, e.g. `terrace/acme/state-versions/sv-…/state` or
//! `terrace/acme/configuration-versions/cv-…` (NAMESPACE: the organization's namespace).
//!
//! Every blob carries the hex SHA-256 of its bytes in its user metadata
//! (`x-amz-meta-sha256`); a read computes it again and answers
//! [`BlobError::Corrupt`] on a mismatch. Blobs up to [`MULTIPART_THRESHOLD`] go in one
//! PUT; larger ones in a multipart upload of [`PART_BYTES`] parts, at most
//! [`PARTS_IN_FLIGHT`] at once, sliced from the caller's buffer without copying. An
//! upload that fails part-way is aborted, so no half-written blob becomes visible.
//! Requests are retried briefly ([`RETRIES`] within [`RETRY_TIMEOUT`]), so an
//! unreachable server surfaces as [`BlobError::Backend`] in seconds, not minutes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, ClientOptions, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    RetryConfig, WriteMultipart,
};

use crate::settings::{BlobStoreSettings, Location};
use crate::{BlobError, BlobStore, sha256_hex};

/// User metadata key holding a blob's hex SHA-256 (`x-amz-meta-sha256` on the wire).
pub const METADATA_SHA256: &str = "sha256";
/// Blobs larger than this go up in a multipart upload.
pub const MULTIPART_THRESHOLD: usize = 8 * 1024 * 1024;
/// Size of one multipart part (S3's minimum is 5 MiB, except for the last).
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Most parts uploading at once.
pub const PARTS_IN_FLIGHT: usize = 4;
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
            name: settings.location.to_string(),
        }))
    }

    /// A store over any `object_store` backend (tests use the in-memory one).
    pub fn with_object_store(store: Arc<dyn ObjectStore>, prefix: &str) -> S3Store {
        S3Store {
            store,
            prefix: prefix.trim_matches('/').to_owned(),
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
        let back = probe.get(&id).await?;
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

    async fn get_at(&self, path: &Path, key: &str) -> Result<Bytes, BlobError> {
        let result = match self.store.get(path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(BlobError::NotFound(key.to_owned()));
            }
            Err(e) => return Err(backend(&format!("reading {key:?}"), &e)),
        };
        let want = result
            .attributes
            .get(&Attribute::Metadata(METADATA_SHA256.into()))
            .map(|v| v.to_string());
        // Preallocated from the object's size: the blob is in memory once.
        let bytes = result
            .bytes()
            .await
            .map_err(|e| backend(&format!("reading {key:?}"), &e))?;
        verify(key, want.as_deref(), &bytes)?;
        Ok(bytes)
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
    /// `state-versions` or `configuration-versions`.
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
    (namespace != PROBE_FOLDER && OWNER_KINDS.contains(&kind) && !id.is_empty()).then(|| {
        BlobOwner {
            namespace: namespace.to_owned(),
            kind: kind.to_owned(),
            id: id.to_owned(),
        }
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
    let corrupt = |detail: String| BlobError::Corrupt {
        key: key.to_owned(),
        detail,
    };
    let want = want.ok_or_else(|| {
        corrupt("the object has no sha256 metadata (not written by terrace?)".into())
    })?;
    let got = sha256_hex(bytes);
    if !got.eq_ignore_ascii_case(want) {
        return Err(corrupt(format!(
            "SHA-256 {got} of the {} bytes read differs from {want} recorded at upload",
            bytes.len()
        )));
    }
    Ok(())
}

/// The blobs of one namespace in a bucket.
#[derive(Clone, Debug)]
pub struct S3BlobStore {
    bucket: S3Store,
    namespace: String,
}

impl BlobStore for S3BlobStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        self.bucket.put_at(&path, key, bytes).await
    }

    async fn get(&self, key: &str) -> Result<Bytes, BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        self.bucket.get_at(&path, key).await
    }

    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        let path = self.bucket.path(&self.namespace, key)?;
        self.bucket.delete_at(&path, key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn memory() -> (Arc<InMemory>, S3Store) {
        let mem = Arc::new(InMemory::new());
        let store = S3Store::with_object_store(mem.clone(), "pre/fix");
        (mem, store)
    }

    /// Keys: prefix, organization namespace, kind, object.
    #[test]
    fn key_layout() {
        assert_eq!(
            object_key("terrace", "acme", "state-versions/sv-1/state"),
            "terrace/acme/state-versions/sv-1/state"
        );
        assert_eq!(
            object_key("", "acme", "configuration-versions/cv-1"),
            "acme/configuration-versions/cv-1"
        );
        let (_, s) = memory();
        assert_eq!(
            s.path("acme", "state-versions/sv-1/json-state")
                .map(|p| p.to_string())
                .ok()
                .as_deref(),
            Some("pre/fix/acme/state-versions/sv-1/json-state")
        );
    }

    /// The store contract, small and multipart blobs, and the bytes under the laid-out
    /// key with their checksum.
    #[tokio::test]
    async fn contract_and_multipart() {
        let (mem, s) = memory();
        let b = s.scoped("acme");
        assert!(matches!(b.get("a").await, Err(BlobError::NotFound(_))));
        b.put("a", Bytes::from_static(b"hello")).await.expect("put");
        assert_eq!(b.get("a").await.ok().as_deref(), Some(&b"hello"[..]));
        let big: Vec<u8> = (0..(2 * PART_BYTES + 12345))
            .map(|i| (i % 251) as u8)
            .collect();
        b.put("state-versions/sv-1/state", Bytes::from(big.clone()))
            .await
            .expect("multipart put");
        let back = b.get("state-versions/sv-1/state").await.expect("get");
        assert!(back[..] == big[..]);
        let raw = mem
            .get(&Path::from("pre/fix/acme/state-versions/sv-1/state"))
            .await
            .expect("raw");
        assert_eq!(
            raw.attributes
                .get(&Attribute::Metadata(METADATA_SHA256.into()))
                .map(|v| v.to_string()),
            Some(sha256_hex(&big))
        );
        b.delete("a").await.expect("delete");
        b.delete("a").await.expect("delete again");
        assert!(matches!(b.get("a").await, Err(BlobError::NotFound(_))));
        // Another organization does not see the blob.
        assert!(matches!(
            s.scoped("other").get("state-versions/sv-1/state").await,
            Err(BlobError::NotFound(_))
        ));
        s.probe().await.expect("probe");
    }

    /// Keys name their owners; the probe's and foreign objects name none; a listing
    /// shows both with their full keys.
    #[tokio::test]
    async fn owners_of_keys() {
        assert_eq!(
            owner_of("acme/state-versions/sv-1/state"),
            Some(BlobOwner {
                namespace: "acme".into(),
                kind: "state-versions".into(),
                id: "sv-1".into()
            })
        );
        assert_eq!(
            owner_of("acme/configuration-versions/cv-1").map(|o| o.id),
            Some("cv-1".to_owned())
        );
        for other in [
            ".terrace-probe/x/y",
            "acme/other/x",
            "acme",
            "acme/state-versions",
        ] {
            assert_eq!(owner_of(other), None, "{other}");
        }
        let (_, s) = memory();
        s.scoped("acme")
            .put("configuration-versions/cv-9", Bytes::from_static(b"x"))
            .await
            .expect("put");
        let listed = s.list().await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, "pre/fix/acme/configuration-versions/cv-9");
        assert_eq!(
            listed[0].owner.as_ref().map(|o| o.id.as_str()),
            Some("cv-9")
        );
        s.delete_listed(&listed[0].key).await.expect("delete");
        assert!(s.list().await.expect("list").is_empty());
    }

    /// Bytes changed (or written without a checksum) behind terrace's back read as
    /// corrupt, not as the blob.
    #[tokio::test]
    async fn checksum_is_verified() {
        let (mem, s) = memory();
        let b = s.scoped("acme");
        b.put("k", Bytes::from_static(b"original"))
            .await
            .expect("put");
        let path = Path::from("pre/fix/acme/k");
        let raw = mem.get(&path).await.expect("raw");
        let attributes = raw.attributes.clone();
        mem.put_opts(
            &path,
            PutPayload::from_static(b"tampered"),
            PutOptions {
                attributes,
                ..Default::default()
            },
        )
        .await
        .expect("tamper");
        let e = b.get("k").await.expect_err("mismatch");
        assert!(
            matches!(&e, BlobError::Corrupt { detail, .. } if detail.contains("differs")),
            "{e}"
        );
        mem.put(&path, PutPayload::from_static(b"plain"))
            .await
            .expect("plain");
        assert!(matches!(b.get("k").await, Err(BlobError::Corrupt { .. })));
        assert!(verify("k", Some(&sha256_hex(b"x").to_uppercase()), b"x").is_ok());
    }

    /// An unreachable server is a backend error with the reason, within the retry bound.
    #[tokio::test]
    async fn unreachable_server_is_a_backend_error() {
        // A port nothing listens on: bind, note it, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let settings = BlobStoreSettings {
            location: Location::parse("s3://bucket/p").expect("location"),
            s3_endpoint: Some(format!("http://127.0.0.1:{port}")),
            s3_region: Some("us-east-1".into()),
            s3_path_style: true,
        };
        let creds = AmazonS3Builder::new()
            .with_access_key_id("test")
            .with_secret_access_key("test");
        let s = S3Store::build(&settings, creds)
            .expect("build")
            .expect("s3");
        let started = std::time::Instant::now();
        let e = s.probe().await.expect_err("unreachable");
        assert!(matches!(e, BlobError::Backend(_)), "{e}");
        assert!(started.elapsed() < Duration::from_secs(60));
    }
}
