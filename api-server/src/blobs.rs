//! The `BlobStore` of DESIGN.md §2 as the API server uses it: where configuration
//! archives, state files, plans and logs live. [`SecretBlobStore`] (in
//! `terrace_blobstore::cluster`, shared with the operator) is the cluster default: a blob
//! compressed and split into Secrets owned by the blob's object.
//! [`MemoryBlobStore`] keeps blobs in memory (tests, and a template for other stores).
//! Both take a streamed upload by buffering it ([`Buffered`]: the cluster store within
//! its limit), and check a read against the SHA-256 its owner recorded, when given.
//! With `--blob-store s3://…` blobs go to a bucket instead (`terrace_blobstore::s3`);
//! [`store`] picks the configured one, [`Readiness`] says whether it answers, and
//! [`api_error`] turns a store's failure into the API's answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub use terrace_crds::blobs::{
    ANNOTATION_CHUNKS, ANNOTATION_ENCODING, ANNOTATION_KEY, CHUNK_BYTES, LABEL_BLOB,
    MAX_CLUSTER_BLOB_BYTES, SECRET_TYPE,
};

pub use terrace_blobstore::cluster::{
    AnyBlobStore, AnyUpload, BlobBackend, SecretBlobStore, check_owner_sha256, gzip, is_gzip,
};
pub use terrace_blobstore::{BlobError, BlobStore, BlobStream, BlobUpload, Buffered, Stored};

/// Blobs in memory (clones share them).
#[derive(Clone, Default)]
pub struct MemoryBlobStore {
    blobs: Arc<Mutex<HashMap<String, Bytes>>>,
}

impl MemoryBlobStore {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        self.blobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl BlobStore for MemoryBlobStore {
    type Upload = Buffered<MemoryBlobStore>;

    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        self.map().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn upload(&self, key: &str) -> Result<Self::Upload, BlobError> {
        Ok(Buffered::new(self.clone(), key, None))
    }
    async fn get(&self, key: &str, sha256: Option<&str>) -> Result<Bytes, BlobError> {
        let bytes = self
            .map()
            .get(key)
            .cloned()
            .ok_or_else(|| BlobError::NotFound(key.to_owned()))?;
        check_owner_sha256(key, sha256, &bytes)?;
        Ok(bytes)
    }
    async fn get_stream(&self, key: &str, sha256: Option<&str>) -> Result<BlobStream, BlobError> {
        Ok(terrace_blobstore::one_piece(self.get(key, sha256).await?))
    }
    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        self.map().remove(key);
        Ok(())
    }
}

/// The store the server is configured with, for blobs of namespace `ns` whose new parts
/// are owned by `owner` (so deleting the owner removes them; a bucket's blobs are
/// removed by the operator instead, see `terrace_crds::blobs::FINALIZER`).
pub fn store(state: &crate::AppState, ns: &str, owner: Option<OwnerReference>) -> AnyBlobStore {
    match &state.blobs {
        BlobBackend::Cluster => AnyBlobStore::Secrets(Box::new(SecretBlobStore::new(
            state.client.clone(),
            ns,
            owner,
        ))),
        BlobBackend::S3(s3) => AnyBlobStore::S3(s3.scoped(ns)),
        BlobBackend::Misconfigured(why) => AnyBlobStore::Broken(why.clone()),
    }
}

/// The API's answer to a failed blob operation on `what` (e.g. "the state"): 404 when
/// the blob is gone, 413 over the store's limit (naming the S3 option), 503 when the
/// store cannot be reached (the cause is logged), 500 when the blob is damaged.
pub fn api_error(what: &str, e: BlobError) -> crate::ApiError {
    use crate::ApiError;
    match e {
        BlobError::NotFound(_) => {
            ApiError::not_found(format!("{what} is missing from the blob store ({e})"))
        }
        BlobError::TooLarge { size, limit, store } => ApiError::TooLarge(
            format!(
                "{what} is {size} bytes, over the {store} blob store's limit of {limit} bytes; \
                 large blobs need an S3-compatible store (--blob-store s3://BUCKET[/PREFIX], \
                 chart value blobStore.type=s3)"
            )
            .into(),
        ),
        BlobError::Backend(ref cause) => {
            tracing::warn!(what, cause = %cause, "blob store unavailable");
            ApiError::Unavailable(
                format!("the blob store is unavailable, so {what} cannot be read or stored right now; retry shortly")
                    .into(),
            )
        }
        BlobError::Corrupt { .. } => ApiError::internal(format!("reading {what}"), e),
    }
}

/// [`api_error`] of a read of `what`, where a blob that is not there is 404 `missing`.
pub fn read_error(
    what: &str,
    missing: impl Into<std::borrow::Cow<'static, str>>,
    e: BlobError,
) -> crate::ApiError {
    match e {
        BlobError::NotFound(_) => crate::ApiError::not_found(missing),
        other => api_error(what, other),
    }
}

/// Whether the blob store answers: `/readyz` fails (with the reason) until it does.
#[derive(Default, Debug)]
pub struct Readiness {
    blocker: std::sync::RwLock<Option<String>>,
}

impl Readiness {
    /// Not ready, because of `why`.
    pub fn block(&self, why: impl Into<String>) {
        *self.blocker.write().unwrap_or_else(|e| e.into_inner()) = Some(why.into());
    }
    /// Ready.
    pub fn clear(&self) {
        *self.blocker.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
    /// Why the server is not ready, if it is not.
    pub fn blocker(&self) -> Option<String> {
        self.blocker
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// The `/readyz` answer: 200 `ok`, or 503 with the reason.
    pub fn answer(&self) -> (http::StatusCode, String) {
        match self.blocker() {
            None => (http::StatusCode::OK, "ok".into()),
            Some(why) => (
                http::StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        }
    }
}

/// Probes the bucket until a write, read and delete succeed, keeping `readiness`
/// blocked (and logging why) meanwhile. Returns at once for the cluster store.
pub async fn probe_until_ready(backend: BlobBackend, readiness: std::sync::Arc<Readiness>) {
    let s3 = match backend {
        BlobBackend::Cluster => return,
        BlobBackend::Misconfigured(why) => {
            let why = format!("the S3 blob store is misconfigured: {why}");
            tracing::error!("{why}");
            readiness.block(why);
            return;
        }
        BlobBackend::S3(s3) => s3,
    };
    readiness.block(format!("probing the blob store {}", s3.name()));
    loop {
        match s3.probe().await {
            Ok(()) => {
                tracing::info!(store = %s3.name(), "blob store probe passed (write, read, delete)");
                readiness.clear();
                return;
            }
            Err(e) => {
                let why = format!("the blob store {} failed its probe: {e}", s3.name());
                tracing::error!("{why}; retrying in {:?}", PROBE_RETRY);
                readiness.block(why);
            }
        }
        tokio::time::sleep(PROBE_RETRY).await;
    }
}

/// Wait between two failed probes of the blob store.
pub const PROBE_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    async fn contract(store: &impl BlobStore) {
        assert!(matches!(
            store.get("a", None).await,
            Err(BlobError::NotFound(_))
        ));
        store
            .put("a", Bytes::from_static(b"hello"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            store.get("a", None).await.ok().as_deref(),
            Some(&b"hello"[..])
        );
        store
            .put("a", Bytes::from_static(b"bye"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            store.get("a", None).await.ok().as_deref(),
            Some(&b"bye"[..])
        );
        store.delete("a").await.unwrap_or_else(|e| panic!("{e}"));
        store.delete("a").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            store.get("a", None).await,
            Err(BlobError::NotFound(_))
        ));
    }

    /// A store's failures as the API answers them: gone 404, over the cluster limit 413
    /// naming the S3 option, unreachable 503 (cause logged, not returned), damaged 500.
    #[test]
    fn blob_errors_as_api_answers() {
        use http::StatusCode;
        let e = api_error("the state", BlobError::NotFound("k".into()));
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let e = api_error(
            "the state",
            BlobError::TooLarge {
                size: 40 << 20,
                limit: MAX_CLUSTER_BLOB_BYTES,
                store: "cluster",
            },
        );
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.to_string().contains("--blob-store s3://"), "{e}");
        let e = api_error(
            "the state",
            BlobError::Backend("connect refused 10.0.0.1".into()),
        );
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.to_string().contains("blob store is unavailable"), "{e}");
        assert!(!e.to_string().contains("10.0.0.1"), "{e}");
        let e = api_error(
            "the state",
            BlobError::Corrupt {
                key: "k".into(),
                detail: "x".into(),
            },
        );
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    /// `/readyz` is 503 with the reason while blocked.
    #[test]
    fn readiness_answers() {
        let r = Readiness::default();
        assert_eq!(r.answer().0, http::StatusCode::OK);
        r.block("the blob store s3://b failed its probe: refused");
        let (status, body) = r.answer();
        assert_eq!(status, http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("failed its probe"), "{body}");
        r.clear();
        assert_eq!(r.answer().0, http::StatusCode::OK);
    }

    /// The cluster store refuses a blob over its limit before writing anything.
    #[tokio::test]
    async fn cluster_store_has_a_size_limit() {
        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .unwrap_or_else(|e| panic!("simulator: {e}"));
        let store = SecretBlobStore::new(sim.client(), "default", None);
        let big = Bytes::from(vec![0u8; MAX_CLUSTER_BLOB_BYTES + 1]);
        assert!(matches!(
            store.put("big", big).await,
            Err(BlobError::TooLarge { .. })
        ));
        assert!(store.chunk("big", 0).await.ok().flatten().is_none());
    }

    /// The store contract (put replaces, get returns, delete is idempotent).
    #[tokio::test]
    async fn memory_store_keeps_the_contract() {
        contract(&MemoryBlobStore::default()).await;
    }

    /// Copies kube-apiserver: Secrets hold bytes exactly (base64 on the wire) and a blob
    /// larger than one chunk spans several Secrets that read back as the same bytes,
    /// whether already gzip (stored as is) or not (compressed).
    #[tokio::test]
    async fn secret_store_chunks_and_compresses() {
        let sim = terrace_simulator::Simulator::open(Default::default())
            .await
            .unwrap_or_else(|e| panic!("simulator: {e}"));
        let store = SecretBlobStore::new(sim.client(), "default", None);
        contract(&store).await;
        // Pseudo-random bytes that do not compress, more than two chunks long.
        let mut x: u32 = 12345;
        let big: Vec<u8> = (0..(2 * CHUNK_BYTES + 1000))
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        let mut gz = vec![0x1f, 0x8b];
        gz.extend_from_slice(&big);
        for blob in [big.clone(), gz] {
            store
                .put("cv/x", Bytes::from(blob.clone()))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let back = store
                .get("cv/x", None)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.len(), blob.len());
            assert!(back[..] == blob[..]);
            let secrets = store
                .secrets()
                .list(&kube::api::ListParams::default().labels(&format!(
                    "{LABEL_BLOB}={}",
                    SecretBlobStore::blob_name("cv/x")
                )))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(secrets.items.len() >= 3, "{}", secrets.items.len());
        }
        // Text compresses into a single chunk.
        store
            .put("t", Bytes::from(vec![b'a'; 3 * CHUNK_BYTES]))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(store.chunk("t", 1).await.ok().flatten().is_none());
        assert_eq!(
            store.get("t", None).await.map(|b| b.len()).ok(),
            Some(3 * CHUNK_BYTES)
        );
        store.delete("cv/x").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            store.get("cv/x", None).await,
            Err(BlobError::NotFound(_))
        ));
    }
}
