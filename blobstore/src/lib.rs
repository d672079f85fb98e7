//! The `BlobStore` of DESIGN.md §2, shared by the API server (which writes and reads
//! blobs) and the operator (which deletes them: retention, finalizers): the interface and
//! its errors, the configuration that picks a store ([`BlobStoreSettings`], the same
//! flags on `terrace api-server`, `terrace operator` and `terrace dev`), and the
//! S3-compatible store ([`s3::S3Store`]). The in-cluster store (chunked Secrets) lives
//! in the API server, since it needs a Kubernetes client.
//!
//! A blob goes in whole ([`BlobStore::put`], for bytes already in memory) or piece by
//! piece ([`BlobStore::upload`]: an [`BlobUpload`] that is written to, then committed or
//! aborted, so a caller can check what it streamed before anything becomes visible). It
//! comes out whole ([`BlobStore::get`]) or as a stream ([`BlobStore::get_stream`]); both
//! are checked against the SHA-256 recorded at upload ([`Verifier`]). [`Buffered`] is
//! the upload of stores that keep a blob in one piece: it gathers the pieces, within a
//! limit, and puts them on commit.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod s3;
pub mod settings;

use std::future::Future;

pub use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
pub use settings::{BlobStoreSettings, Location};
use sha2::{Digest, Sha256};

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

/// A blob read piece by piece. Every piece has been read from the store; the last one
/// is only handed out once the whole blob has checked out, and an `Err` ends the stream
/// instead when it has not (the pieces before it are then not the blob).
pub struct BlobStream {
    /// The blob's size in bytes, as the store knows it.
    pub size: u64,
    pub pieces: BoxStream<'static, Result<Bytes, BlobError>>,
}

impl BlobStream {
    /// The whole blob, once it has checked out.
    pub async fn into_bytes(mut self) -> Result<Bytes, BlobError> {
        // Preallocated from the object's size: the blob is in memory once.
        let mut out = Vec::with_capacity(usize::try_from(self.size).unwrap_or(0));
        while let Some(piece) = self.pieces.next().await {
            out.extend_from_slice(&piece?);
        }
        Ok(Bytes::from(out))
    }
}

/// What a committed upload stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
}

/// A blob being written piece by piece: nothing is visible under its key until
/// [`BlobUpload::commit`]; [`BlobUpload::abort`] (or an error) leaves no blob behind.
pub trait BlobUpload: Send {
    /// Appends `piece`; may wait for the store to take earlier pieces (back pressure).
    /// After an error the upload can only be aborted.
    fn write(&mut self, piece: Bytes) -> impl Future<Output = Result<(), BlobError>> + Send;
    /// Makes the blob visible under its key (replacing an earlier blob of that key).
    fn commit(self) -> impl Future<Output = Result<Stored, BlobError>> + Send;
    /// Gives the upload up: nothing is stored, and whatever was sent is removed.
    fn abort(self) -> impl Future<Output = ()> + Send;
}

/// Stores opaque byte blobs under string keys.
pub trait BlobStore: Send + Sync {
    /// The upload of this store.
    type Upload: BlobUpload;
    /// Stores `bytes` under `key`, replacing any earlier blob of that key.
    fn put(&self, key: &str, bytes: Bytes) -> impl Future<Output = Result<(), BlobError>> + Send;
    /// Starts writing a blob under `key` piece by piece.
    fn upload(&self, key: &str) -> impl Future<Output = Result<Self::Upload, BlobError>> + Send;
    /// The blob stored under `key`, checked against `sha256` (the hex SHA-256 its owner
    /// recorded at upload) when given, and against the store's own record when it keeps
    /// one; [`BlobError::Corrupt`] on a mismatch.
    fn get(
        &self,
        key: &str,
        sha256: Option<&str>,
    ) -> impl Future<Output = Result<Bytes, BlobError>> + Send;
    /// The blob stored under `key` as a stream, checked as [`BlobStore::get`] checks it,
    /// as the pieces go by.
    fn get_stream(
        &self,
        key: &str,
        sha256: Option<&str>,
    ) -> impl Future<Output = Result<BlobStream, BlobError>> + Send;
    /// Removes the blob of `key`; removing an absent blob succeeds.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), BlobError>> + Send;
}

/// Hex of a digest.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hex SHA-256 of `bytes` (the checksum kept with every blob).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// A SHA-256 computed piece by piece.
#[derive(Clone, Default)]
pub struct Sha256Hasher(Sha256);

impl Sha256Hasher {
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }
    /// The hex digest.
    pub fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

/// The SHA-256 values a blob must have: the owner's record and the store's (either may
/// be missing; a blob with neither cannot be checked and reads as corrupt).
#[derive(Clone, Debug, Default)]
pub struct Verifier {
    key: String,
    wanted: Vec<(String, &'static str)>,
}

impl Verifier {
    /// A check of blob `key` against the owner's `owner` and the store's `stored`
    /// checksums (empty ones ignored).
    pub fn new(key: &str, owner: Option<&str>, stored: Option<&str>) -> Result<Self, BlobError> {
        let wanted: Vec<(String, &'static str)> = [
            (owner, "recorded by its owner"),
            (stored, "recorded with the object"),
        ]
        .into_iter()
        .filter_map(|(v, w)| v.filter(|v| !v.is_empty()).map(|v| (v.to_owned(), w)))
        .collect();
        if wanted.is_empty() {
            return Err(BlobError::Corrupt {
                key: key.to_owned(),
                detail: "no SHA-256 to check the object against (not written by terrace?)".into(),
            });
        }
        Ok(Verifier {
            key: key.to_owned(),
            wanted,
        })
    }

    /// Whether `got` (of `size` bytes read) is every wanted checksum.
    pub fn check(&self, got: &str, size: u64) -> Result<(), BlobError> {
        for (want, whose) in &self.wanted {
            if !got.eq_ignore_ascii_case(want) {
                return Err(BlobError::Corrupt {
                    key: self.key.clone(),
                    detail: format!(
                        "SHA-256 {got} of the {size} bytes read differs from {want} {whose} at upload"
                    ),
                });
            }
        }
        Ok(())
    }

    /// `pieces` checked as they go by: the last piece is held back until the SHA-256 of
    /// all of them checks out, and replaced by the error when it does not (logged).
    pub fn stream(
        self,
        pieces: BoxStream<'static, Result<Bytes, BlobError>>,
    ) -> BoxStream<'static, Result<Bytes, BlobError>> {
        struct S {
            pieces: BoxStream<'static, Result<Bytes, BlobError>>,
            verifier: Option<Verifier>,
            hasher: Sha256Hasher,
            size: u64,
            held: Option<Bytes>,
        }
        let state = S {
            pieces,
            verifier: Some(self),
            hasher: Sha256Hasher::default(),
            size: 0,
            held: None,
        };
        futures::stream::unfold(state, |mut s| async move {
            s.verifier.as_ref()?;
            loop {
                match s.pieces.next().await {
                    Some(Ok(piece)) => {
                        if piece.is_empty() {
                            continue;
                        }
                        s.hasher.update(&piece);
                        s.size += piece.len() as u64;
                        if let Some(out) = s.held.replace(piece) {
                            return Some((Ok(out), s));
                        }
                    }
                    Some(Err(e)) => {
                        s.verifier = None;
                        return Some((Err(e), s));
                    }
                    None => {
                        let verifier = s.verifier.take()?;
                        let got = std::mem::take(&mut s.hasher).finish();
                        let checked = verifier.check(&got, s.size);
                        return match (checked, s.held.take()) {
                            (Ok(()), Some(last)) => Some((Ok(last), s)),
                            (Ok(()), None) => None,
                            (Err(e), _) => {
                                tracing::error!(error = %e, "a blob read back differs from what was stored; the download is cut off");
                                Some((Err(e), s))
                            }
                        };
                    }
                }
            }
        })
        .boxed()
    }
}

/// The upload of a store that takes a blob in one piece (`put`): the pieces are
/// gathered, at most `limit` bytes of them, and put on commit. Past the limit they are
/// only counted, and the commit is [`BlobError::TooLarge`] with the whole size.
pub struct Buffered<S> {
    store: S,
    key: String,
    buffer: Vec<u8>,
    size: u64,
    hasher: Sha256Hasher,
    limit: Option<(usize, &'static str)>,
}

impl<S: BlobStore> Buffered<S> {
    /// An upload of `key` into `store`, refused over `limit` bytes (`store_name` says
    /// whose limit) when given.
    pub fn new(store: S, key: &str, limit: Option<(usize, &'static str)>) -> Self {
        Buffered {
            store,
            key: key.to_owned(),
            buffer: Vec::new(),
            size: 0,
            hasher: Sha256Hasher::default(),
            limit,
        }
    }

    fn over(&self) -> Option<BlobError> {
        let (limit, store) = self.limit?;
        (self.size > limit as u64).then(|| BlobError::TooLarge {
            size: usize::try_from(self.size).unwrap_or(usize::MAX),
            limit,
            store,
        })
    }
}

impl<S: BlobStore> BlobUpload for Buffered<S> {
    async fn write(&mut self, piece: Bytes) -> Result<(), BlobError> {
        self.hasher.update(&piece);
        self.size += piece.len() as u64;
        if self.over().is_some() {
            self.buffer = Vec::new();
        } else {
            self.buffer.extend_from_slice(&piece);
        }
        Ok(())
    }

    async fn commit(self) -> Result<Stored, BlobError> {
        if let Some(e) = self.over() {
            return Err(e);
        }
        self.store.put(&self.key, Bytes::from(self.buffer)).await?;
        Ok(Stored {
            size: self.size,
            sha256: self.hasher.finish(),
        })
    }

    async fn abort(self) {}
}

/// A stream of one piece.
pub fn one_piece(bytes: Bytes) -> BlobStream {
    BlobStream {
        size: bytes.len() as u64,
        pieces: futures::stream::once(async move { Ok(bytes) }).boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(v: &[&'static [u8]]) -> BoxStream<'static, Result<Bytes, BlobError>> {
        let v: Vec<Result<Bytes, BlobError>> =
            v.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        futures::stream::iter(v).boxed()
    }

    async fn collect(
        s: BoxStream<'static, Result<Bytes, BlobError>>,
    ) -> Vec<Result<Bytes, BlobError>> {
        s.collect().await
    }

    /// A stream that checks out is the pieces; one that does not holds its last piece
    /// back and ends in Corrupt; nothing to check against is Corrupt at once.
    #[tokio::test]
    async fn streams_are_verified_holding_the_last_piece_back() {
        let sha = sha256_hex(b"hello world");
        let v = Verifier::new("k", Some(&sha), None).expect("verifier");
        let out = collect(v.stream(pieces(&[b"hello", b" ", b"world"]))).await;
        let got: Vec<u8> = out
            .iter()
            .flat_map(|p| p.as_ref().map(|b| b.to_vec()).unwrap_or_default())
            .collect();
        assert_eq!(got, b"hello world");
        assert!(out.iter().all(Result::is_ok));

        let v = Verifier::new("k", Some(&sha), Some(&sha)).expect("verifier");
        let out = collect(v.stream(pieces(&[b"hello", b" ", b"w0rld"]))).await;
        assert_eq!(
            out.len(),
            3,
            "two pieces, then the error instead of the last"
        );
        assert!(matches!(out.last(), Some(Err(BlobError::Corrupt { .. }))));

        // The store's record and the owner's must both hold.
        let v = Verifier::new("k", Some(&sha), Some(&sha256_hex(b"x"))).expect("verifier");
        assert!(v.check(&sha, 11).is_err());
        assert!(matches!(
            Verifier::new("k", None, Some("")),
            Err(BlobError::Corrupt { .. })
        ));
    }
}
