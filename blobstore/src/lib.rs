//! The `BlobStore` of DESIGN.md §2, shared by the API server (which writes and reads
//! blobs) and the operator (which deletes them: retention, finalizers): the interface and
//! its errors, the configuration that picks a store ([`BlobStoreSettings`], the same
//! flags on `terrace api-server`, `terrace operator` and `terrace dev`), and the
//! S3-compatible store ([`s3::S3Store`]). The in-cluster store (chunked Secrets) lives
//! in the API server, since it needs a Kubernetes client.
#![forbid(unsafe_code)]

pub mod s3;
pub mod settings;

use std::future::Future;

pub use bytes::Bytes;
pub use settings::{BlobStoreSettings, Location};

/// A failure of a blob store.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// No blob under the key (deleted, expired, or removed behind terrace's back).
    #[error("blob {0:?} not found")]
    NotFound(String),
    /// The blob is there but not as it was written (a missing chunk, a checksum mismatch).
    #[error("blob {key:?} is damaged: {detail}")]
    Corrupt { key: String, detail: String },
    /// The blob is larger than the store takes.
    #[error("blob of {size} bytes is over the {store} store's limit of {limit} bytes")]
    TooLarge {
        size: usize,
        limit: usize,
        store: &'static str,
    },
    /// The store could not be reached or refused the request (retrying may help).
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

/// The hex SHA-256 of `bytes` (the checksum kept with every S3 blob).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
