//! The `BlobStore` of DESIGN.md §2: where configuration archives (and later state files)
//! live. [`SecretBlobStore`] is the cluster default: a blob is compressed (unless it already
//! is gzip data, as archives are) and split into Secrets of at most [`CHUNK_BYTES`] each
//! (Kubernetes caps an object at about 1 MiB), all owned by the blob's object so garbage
//! collection removes them with it. The first chunk is written last and carries the chunk
//! count, so a reader never sees a half-written blob as complete.
//! [`MemoryBlobStore`] keeps blobs in memory (tests, and a template for other stores).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Mutex;

use axum::body::Bytes;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use terrace_crds::constants::FIELD_MANAGER_API;

pub use terrace_crds::blobs::{
    ANNOTATION_CHUNKS, ANNOTATION_ENCODING, ANNOTATION_KEY, CHUNK_BYTES, LABEL_BLOB, SECRET_TYPE,
};

/// A failure of a blob store.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("blob {0:?} not found")]
    NotFound(String),
    #[error("blob {key:?} is damaged: {detail}")]
    Corrupt { key: String, detail: String },
    #[error("blob store: {0}")]
    Backend(String),
}

/// Stores opaque byte blobs under string keys.
pub trait BlobStore: Send + Sync {
    /// Stores `bytes` under `key`, replacing any earlier blob of that key.
    fn put(&self, key: &str, bytes: Bytes) -> impl Future<Output = Result<(), BlobError>> + Send;
    /// The blob stored under `key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Bytes, BlobError>> + Send;
    /// Removes the blob of `key`; removing an absent blob succeeds.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), BlobError>> + Send;
}

/// Blobs in memory.
#[derive(Default)]
pub struct MemoryBlobStore {
    blobs: Mutex<HashMap<String, Bytes>>,
}

impl MemoryBlobStore {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        self.blobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl BlobStore for MemoryBlobStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        self.map().insert(key.to_owned(), bytes);
        Ok(())
    }
    async fn get(&self, key: &str) -> Result<Bytes, BlobError> {
        self.map()
            .get(key)
            .cloned()
            .ok_or_else(|| BlobError::NotFound(key.to_owned()))
    }
    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        self.map().remove(key);
        Ok(())
    }
}

/// Blobs in chunked Secrets of one namespace, owned by `owner` when given.
pub struct SecretBlobStore {
    api: Api<Secret>,
    owner: Option<OwnerReference>,
}

impl SecretBlobStore {
    /// A store in namespace `ns` whose new chunks are owned by `owner`.
    pub fn new(client: kube::Client, ns: &str, owner: Option<OwnerReference>) -> Self {
        Self {
            api: Api::namespaced(client, ns),
            owner,
        }
    }

    fn blob_name(key: &str) -> String {
        terrace_crds::blobs::blob_name(key)
    }

    fn chunk_name(key: &str, i: usize) -> String {
        terrace_crds::blobs::chunk_name(key, i)
    }

    async fn apply_chunk(
        &self,
        key: &str,
        i: usize,
        data: &[u8],
        annotations: Option<BTreeMap<String, String>>,
    ) -> Result<(), BlobError> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(Self::chunk_name(key, i)),
                labels: Some(BTreeMap::from([(
                    LABEL_BLOB.to_owned(),
                    Self::blob_name(key),
                )])),
                annotations,
                owner_references: self.owner.clone().map(|o| vec![o]),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.to_owned()),
            data: Some(BTreeMap::from([(
                "chunk".to_owned(),
                ByteString(data.to_vec()),
            )])),
            ..Default::default()
        };
        let mut value =
            serde_json::to_value(&secret).map_err(|e| BlobError::Backend(e.to_string()))?;
        value["apiVersion"] = "v1".into();
        value["kind"] = "Secret".into();
        self.api
            .patch(
                &Self::chunk_name(key, i),
                &PatchParams::apply(FIELD_MANAGER_API).force(),
                &Patch::Apply(&value),
            )
            .await
            .map(|_| ())
            .map_err(|e| BlobError::Backend(e.to_string()))
    }

    async fn chunk(&self, key: &str, i: usize) -> Result<Option<Secret>, BlobError> {
        match self.api.get_opt(&Self::chunk_name(key, i)).await {
            Ok(s) => Ok(s),
            Err(e) => Err(BlobError::Backend(e.to_string())),
        }
    }

    fn chunk_count(key: &str, first: &Secret) -> Result<usize, BlobError> {
        first
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_CHUNKS))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| BlobError::Corrupt {
                key: key.to_owned(),
                detail: "no chunk count".into(),
            })
    }
}

fn chunk_data(key: &str, s: &Secret) -> Result<Vec<u8>, BlobError> {
    s.data
        .as_ref()
        .and_then(|d| d.get("chunk"))
        .map(|b| b.0.clone())
        .ok_or_else(|| BlobError::Corrupt {
            key: key.to_owned(),
            detail: format!("chunk {:?} has no data", s.metadata.name),
        })
}

/// Whether `bytes` start with the gzip magic number.
/// The store the server is configured with, for blobs of namespace `ns` whose new parts
/// are owned by `owner` (so deleting the owner removes them).
pub fn store(
    state: &crate::AppState,
    ns: &str,
    owner: Option<OwnerReference>,
) -> impl BlobStore + use<> {
    match state.settings.blob_store {
        crate::settings::BlobStoreKind::Secrets => {
            SecretBlobStore::new(state.client.clone(), ns, owner)
        }
    }
}

pub use terrace_crds::archive::is_gzip;

fn gzip(bytes: &[u8]) -> Result<Vec<u8>, BlobError> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes)
        .and_then(|()| enc.finish())
        .map_err(|e| BlobError::Backend(format!("compressing: {e}")))
}

fn gunzip(key: &str, bytes: &[u8]) -> Result<Vec<u8>, BlobError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| BlobError::Corrupt {
            key: key.to_owned(),
            detail: format!("decompressing: {e}"),
        })?;
    Ok(out)
}

impl BlobStore for SecretBlobStore {
    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        let (stored, encoding) = if is_gzip(&bytes) {
            (bytes.to_vec(), "identity")
        } else {
            (gzip(&bytes)?, "gzip")
        };
        // Drop a longer earlier blob's tail first, so a shorter replacement leaves no
        // orphaned chunks behind.
        self.delete(key).await?;
        let chunks: Vec<&[u8]> = if stored.is_empty() {
            vec![&[]]
        } else {
            stored.chunks(CHUNK_BYTES).collect()
        };
        for (i, c) in chunks.iter().enumerate().skip(1) {
            self.apply_chunk(key, i, c, None).await?;
        }
        let annotations = BTreeMap::from([
            (ANNOTATION_CHUNKS.to_owned(), chunks.len().to_string()),
            (ANNOTATION_ENCODING.to_owned(), encoding.to_owned()),
            (ANNOTATION_KEY.to_owned(), key.to_owned()),
        ]);
        self.apply_chunk(key, 0, chunks[0], Some(annotations)).await
    }

    async fn get(&self, key: &str) -> Result<Bytes, BlobError> {
        let first = self
            .chunk(key, 0)
            .await?
            .ok_or_else(|| BlobError::NotFound(key.to_owned()))?;
        let n = Self::chunk_count(key, &first)?;
        let mut out = chunk_data(key, &first)?;
        for i in 1..n {
            let c = self
                .chunk(key, i)
                .await?
                .ok_or_else(|| BlobError::Corrupt {
                    key: key.to_owned(),
                    detail: format!("chunk {i} of {n} is missing"),
                })?;
            out.extend_from_slice(&chunk_data(key, &c)?);
        }
        let gzipped = first
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_ENCODING))
            .is_some_and(|e| e == "gzip");
        if gzipped {
            out = gunzip(key, &out)?;
        }
        Ok(Bytes::from(out))
    }

    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        let Some(first) = self.chunk(key, 0).await? else {
            return Ok(());
        };
        let n = Self::chunk_count(key, &first).unwrap_or(1);
        // The first chunk last: until it is gone the blob still reads as whole or corrupt,
        // never as a shorter valid one.
        for i in (0..n).rev() {
            match self
                .api
                .delete(&Self::chunk_name(key, i), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(BlobError::Backend(e.to_string())),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn contract(store: &impl BlobStore) {
        assert!(matches!(store.get("a").await, Err(BlobError::NotFound(_))));
        store
            .put("a", Bytes::from_static(b"hello"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.get("a").await.ok().as_deref(), Some(&b"hello"[..]));
        store
            .put("a", Bytes::from_static(b"bye"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(store.get("a").await.ok().as_deref(), Some(&b"bye"[..]));
        store.delete("a").await.unwrap_or_else(|e| panic!("{e}"));
        store.delete("a").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(store.get("a").await, Err(BlobError::NotFound(_))));
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
            let back = store.get("cv/x").await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back.len(), blob.len());
            assert!(back[..] == blob[..]);
            let secrets = store
                .api
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
            store.get("t").await.map(|b| b.len()).ok(),
            Some(3 * CHUNK_BYTES)
        );
        store.delete("cv/x").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            store.get("cv/x").await,
            Err(BlobError::NotFound(_))
        ));
    }
}
