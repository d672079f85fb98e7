//! The in-cluster blob store and the choice of store: [`SecretBlobStore`] keeps a blob
//! compressed (unless it already is gzip data) in Secrets of at most [`CHUNK_BYTES`] each
//! (Kubernetes caps an object at about 1 MiB), all owned by the blob's object so garbage
//! collection removes them with it. The first chunk is written last and carries the
//! chunk count, so a reader never sees a half-written blob as complete. [`BlobBackend`]
//! is the store `--blob-store` picks and [`AnyBlobStore`] one of them, for the API
//! server (which writes and reads blobs), the operator (which archives history and
//! deletes blobs) and `terrace blobs`.

use std::collections::BTreeMap;

use bytes::Bytes;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams};
use terrace_crds::blobs::{
    ANNOTATION_CHUNKS, ANNOTATION_ENCODING, ANNOTATION_KEY, CHUNK_BYTES, LABEL_BLOB,
    MAX_CLUSTER_BLOB_BYTES, SECRET_TYPE,
};
use terrace_crds::constants::FIELD_MANAGER_API;

use crate::s3::{S3BlobStore, S3Store, S3Upload};
use crate::{BlobError, BlobStore, BlobStream, BlobUpload, Buffered, Stored};

/// Checks `bytes` read from a store that keeps no checksum of its own against the one
/// the blob's owner recorded (`sha256`), when there is one.
pub fn check_owner_sha256(key: &str, sha256: Option<&str>, bytes: &Bytes) -> Result<(), BlobError> {
    match sha256.filter(|s| !s.is_empty()) {
        Some(want) => crate::Verifier::new(key, Some(want), None)?
            .check(&crate::sha256_hex(bytes), bytes.len() as u64),
        None => Ok(()),
    }
}

/// Blobs in chunked Secrets of one namespace, owned by `owner` when given.
#[derive(Clone)]
pub struct SecretBlobStore {
    api: Api<Secret>,
    owner: Option<OwnerReference>,
    /// The field manager of its server-side applies.
    manager: &'static str,
}

impl SecretBlobStore {
    /// A store in namespace `ns` whose new chunks are owned by `owner`.
    pub fn new(client: kube::Client, ns: &str, owner: Option<OwnerReference>) -> Self {
        Self {
            api: Api::namespaced(client, ns),
            owner,
            manager: FIELD_MANAGER_API,
        }
    }

    /// The Secrets of its namespace.
    pub fn secrets(&self) -> &Api<Secret> {
        &self.api
    }

    /// The same store writing as field manager `manager` (the operator's own).
    pub fn managed_by(mut self, manager: &'static str) -> Self {
        self.manager = manager;
        self
    }

    /// The `terrace.dev/blob` label value of every chunk of blob `key`.
    pub fn blob_name(key: &str) -> String {
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
                &PatchParams::apply(self.manager).force(),
                &Patch::Apply(&value),
            )
            .await
            .map(|_| ())
            .map_err(|e| BlobError::Backend(e.to_string()))
    }

    /// Chunk `i` of blob `key`, if it is there.
    pub async fn chunk(&self, key: &str, i: usize) -> Result<Option<Secret>, BlobError> {
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

/// The blob store chosen at start from `--blob-store`.
#[derive(Clone, Debug)]
pub enum BlobBackend {
    /// Chunked Secrets.
    Cluster,
    /// A bucket.
    S3(S3Store),
    /// The S3 settings do not make a client (the reason): every blob operation fails.
    Misconfigured(String),
}

impl BlobBackend {
    /// The backend of `settings`.
    pub fn from_settings(settings: &crate::BlobStoreSettings) -> BlobBackend {
        match S3Store::from_settings(settings) {
            Ok(None) => BlobBackend::Cluster,
            Ok(Some(s3)) => BlobBackend::S3(s3),
            Err(e) => BlobBackend::Misconfigured(e.to_string()),
        }
    }

    /// Whether blobs live outside the cluster (so owner references do not reach them).
    pub fn is_external(&self) -> bool {
        !matches!(self, BlobBackend::Cluster)
    }

    /// The finalizers of a new object that owns blobs: the operator's blob finalizer when
    /// blobs live outside the cluster (the operator deletes them before the object goes),
    /// none for the cluster store (owner references delete its Secrets).
    pub fn owner_finalizers(&self) -> Option<Vec<String>> {
        self.is_external()
            .then(|| vec![terrace_crds::blobs::FINALIZER.to_owned()])
    }
}

/// One of the stores, as [`store`] answers.
pub enum AnyBlobStore {
    Secrets(Box<SecretBlobStore>),
    S3(S3BlobStore),
    Broken(String),
}

/// The upload of an [`AnyBlobStore`].
pub enum AnyUpload {
    Secrets(Box<Buffered<SecretBlobStore>>),
    S3(Box<S3Upload>),
}

impl BlobUpload for AnyUpload {
    async fn write(&mut self, piece: Bytes) -> Result<(), BlobError> {
        match self {
            AnyUpload::Secrets(u) => u.write(piece).await,
            AnyUpload::S3(u) => u.write(piece).await,
        }
    }
    async fn commit(self) -> Result<Stored, BlobError> {
        match self {
            AnyUpload::Secrets(u) => u.commit().await,
            AnyUpload::S3(u) => u.commit().await,
        }
    }
    async fn abort(self) {
        match self {
            AnyUpload::Secrets(u) => u.abort().await,
            AnyUpload::S3(u) => u.abort().await,
        }
    }
}

impl BlobStore for AnyBlobStore {
    type Upload = AnyUpload;

    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        match self {
            AnyBlobStore::Secrets(s) => s.put(key, bytes).await,
            AnyBlobStore::S3(s) => s.put(key, bytes).await,
            AnyBlobStore::Broken(why) => Err(BlobError::Backend(why.clone())),
        }
    }
    async fn upload(&self, key: &str) -> Result<AnyUpload, BlobError> {
        match self {
            AnyBlobStore::Secrets(s) => Ok(AnyUpload::Secrets(Box::new(s.upload(key).await?))),
            AnyBlobStore::S3(s) => Ok(AnyUpload::S3(Box::new(s.upload(key).await?))),
            AnyBlobStore::Broken(why) => Err(BlobError::Backend(why.clone())),
        }
    }
    async fn get(&self, key: &str, sha256: Option<&str>) -> Result<Bytes, BlobError> {
        match self {
            AnyBlobStore::Secrets(s) => s.get(key, sha256).await,
            AnyBlobStore::S3(s) => s.get(key, sha256).await,
            AnyBlobStore::Broken(why) => Err(BlobError::Backend(why.clone())),
        }
    }
    async fn get_stream(&self, key: &str, sha256: Option<&str>) -> Result<BlobStream, BlobError> {
        match self {
            AnyBlobStore::Secrets(s) => s.get_stream(key, sha256).await,
            AnyBlobStore::S3(s) => s.get_stream(key, sha256).await,
            AnyBlobStore::Broken(why) => Err(BlobError::Backend(why.clone())),
        }
    }
    async fn delete(&self, key: &str) -> Result<(), BlobError> {
        match self {
            AnyBlobStore::Secrets(s) => s.delete(key).await,
            AnyBlobStore::S3(s) => s.delete(key).await,
            AnyBlobStore::Broken(why) => Err(BlobError::Backend(why.clone())),
        }
    }
}

pub use terrace_crds::archive::is_gzip;

pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>, BlobError> {
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
    /// Gathered in memory, within the store's limit, and put on commit.
    type Upload = Buffered<SecretBlobStore>;

    async fn upload(&self, key: &str) -> Result<Self::Upload, BlobError> {
        Ok(Buffered::new(
            self.clone(),
            key,
            Some((MAX_CLUSTER_BLOB_BYTES, "cluster")),
        ))
    }

    async fn get_stream(&self, key: &str, sha256: Option<&str>) -> Result<BlobStream, BlobError> {
        Ok(crate::one_piece(self.get(key, sha256).await?))
    }

    async fn put(&self, key: &str, bytes: Bytes) -> Result<(), BlobError> {
        if bytes.len() > MAX_CLUSTER_BLOB_BYTES {
            return Err(BlobError::TooLarge {
                size: bytes.len(),
                limit: MAX_CLUSTER_BLOB_BYTES,
                store: "cluster",
            });
        }
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

    async fn get(&self, key: &str, sha256: Option<&str>) -> Result<Bytes, BlobError> {
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
        let out = Bytes::from(out);
        check_owner_sha256(key, sha256, &out)?;
        Ok(out)
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
