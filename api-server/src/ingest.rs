//! Uploads streamed into the blob store: [`ingest`] reads a request body piece by piece
//! and hands each piece to three consumers as it arrives — the MD5 of the bytes, a
//! check that reads them as a [`std::io::Read`] on a blocking thread (a state file's
//! summary, a JSON document, an archive's entries; at most [`CHECK_QUEUE`] pieces
//! ahead of it), and the store's [`BlobUpload`] (parts to S3; a bounded buffer for the
//! cluster store). Nothing is committed here: the caller judges the check and the MD5,
//! then commits the upload or aborts it, so a refused upload leaves no blob.
//!
//! A store that fails mid-way is remembered and written to no more, but the body is
//! still read to its end and checked, so the answer is what it would be with the whole
//! body at hand (a wrong MD5 is still a 422, not a 503), and the client is never cut
//! off while it sends.

use std::io::Read;

use axum::body::{Body, Bytes};
use futures::StreamExt;
use terrace_crds::state::Md5Hasher;
use tokio::sync::mpsc;

use crate::blobs::{BlobError, BlobUpload};

/// Most body pieces waiting for the check (back pressure on the body beyond that).
pub const CHECK_QUEUE: usize = 16;

/// Why a body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Over the route's body limit.
    #[error("the request body is over the limit")]
    TooLarge,
    /// The connection failed or the body was malformed.
    #[error("unreadable body: {0}")]
    Unreadable(String),
    /// The check could not run to its end.
    #[error("checking the body: {0}")]
    Check(String),
}

/// A body read to its end.
pub struct Ingested<U, C> {
    /// The upload, not committed yet; or why the store failed (it is aborted then).
    pub upload: Result<U, BlobError>,
    /// Bytes read.
    pub size: u64,
    /// Hex MD5 of them.
    pub md5: String,
    /// What the check answered.
    pub checked: C,
}

/// Reads pieces sent over a channel (the check's side of [`ingest`]); checks buffer
/// their reads themselves.
struct PieceReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for PieceReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(piece) => self.current = piece,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// Whether a body error is the body limit's (tower-http's `RequestBodyLimitLayer`).
fn over_limit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Streams `body` into `upload` (when the store gave one) while computing its MD5 and
/// running `check` over it. On a body error the upload is aborted.
pub async fn ingest<U, C, F>(
    body: Body,
    upload: Result<U, BlobError>,
    check: F,
) -> Result<Ingested<U, C>, BodyError>
where
    U: BlobUpload,
    C: Send + 'static,
    F: FnOnce(&mut dyn Read) -> C + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Bytes>(CHECK_QUEUE);
    let checker = tokio::task::spawn_blocking(move || {
        let mut reader = PieceReader {
            rx,
            current: Bytes::new(),
        };
        check(&mut reader)
    });
    let mut tx = Some(tx);
    let mut upload = upload;
    let mut md5 = Md5Hasher::default();
    let mut size = 0u64;
    let mut pieces = body.into_data_stream();
    while let Some(piece) = pieces.next().await {
        let piece = match piece {
            Ok(p) => p,
            Err(e) => {
                drop(tx);
                if let Ok(u) = upload {
                    u.abort().await;
                }
                let _ = checker.await;
                return Err(if over_limit(&e) {
                    BodyError::TooLarge
                } else {
                    BodyError::Unreadable(e.to_string())
                });
            }
        };
        if piece.is_empty() {
            continue;
        }
        size += piece.len() as u64;
        md5.update(&piece);
        // The check may be done before the end (an archive's last entry, a parse error).
        if let Some(t) = &tx
            && t.send(piece.clone()).await.is_err()
        {
            tx = None;
        }
        if let Ok(u) = upload.as_mut()
            && let Err(e) = u.write(piece).await
            && let Ok(u) = std::mem::replace(&mut upload, Err(e))
        {
            u.abort().await;
        }
    }
    drop(tx);
    let checked = checker.await.map_err(|e| BodyError::Check(e.to_string()))?;
    Ok(Ingested {
        upload,
        size,
        md5: md5.finish(),
        checked,
    })
}

/// Commits `upload` when `verdict` is Ok, aborts it otherwise; answers the verdict, then
/// the store's failure, then what was stored.
pub async fn settle<U: BlobUpload, T, E>(
    upload: Result<U, BlobError>,
    verdict: Result<T, E>,
) -> Result<(T, Stored), Settled<E>> {
    match (verdict, upload) {
        (Err(e), upload) => {
            if let Ok(u) = upload {
                u.abort().await;
            }
            Err(Settled::Refused(e))
        }
        (Ok(_), Err(e)) => Err(Settled::Store(e)),
        (Ok(v), Ok(u)) => match u.commit().await {
            Ok(stored) => Ok((v, stored)),
            Err(e) => Err(Settled::Store(e)),
        },
    }
}

use crate::blobs::Stored;

/// Runs `record` (writing down the blob stored under `key`); when it fails, removes the
/// blob, so nothing stays half-recorded (a blob no object names). `what` names the blob
/// in the warning a failed removal logs.
pub async fn record_or_remove<S: crate::blobs::BlobStore, T, E>(
    store: &S,
    key: &str,
    what: &str,
    record: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let recorded = record.await;
    if recorded.is_err()
        && let Err(d) = store.delete(key).await
    {
        tracing::warn!(error = %d, "removing {what} that was not recorded");
    }
    recorded
}

/// Why [`settle`] stored nothing.
pub enum Settled<E> {
    /// The check refused the bytes.
    Refused(E),
    /// The store failed.
    Store(BlobError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blobs::{BlobStore, MemoryBlobStore};

    /// A body in pieces reaches the store, the MD5 and the check whole; a refused
    /// verdict stores nothing.
    #[tokio::test]
    async fn a_body_streams_to_the_store_the_md5_and_the_check() {
        let store = MemoryBlobStore::default();
        let pieces: Vec<Result<Bytes, std::io::Error>> = (0..50)
            .map(|i| Ok(Bytes::from(format!("{i:04}-").repeat(1000))))
            .collect();
        let whole: Vec<u8> = pieces
            .iter()
            .flat_map(|p| p.as_ref().map(|b| b.to_vec()).unwrap_or_default())
            .collect();
        let body = || {
            Body::from_stream(futures::stream::iter(
                pieces
                    .iter()
                    .map(|p| match p {
                        Ok(b) => Ok(b.clone()),
                        Err(_) => Err(std::io::Error::other("x")),
                    })
                    .collect::<Vec<_>>(),
            ))
        };
        let got = ingest(body(), store.upload("k").await, |r| {
            let mut all = Vec::new();
            r.read_to_end(&mut all).map(|_| all).unwrap_or_default()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.size, whole.len() as u64);
        assert_eq!(got.md5, terrace_crds::state::md5_hex(&whole));
        assert!(got.checked == whole);
        let settled = settle(got.upload, Ok::<_, ()>(())).await;
        let Ok(((), stored)) = settled else {
            panic!("not stored")
        };
        assert_eq!(stored.sha256, terrace_blobstore::sha256_hex(&whole));
        assert!(store.get("k", Some(&stored.sha256)).await.ok().as_deref() == Some(&whole[..]));

        let got = ingest(body(), store.upload("refused").await, |_| ())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            settle(got.upload, Err::<(), _>("no")).await,
            Err(Settled::Refused("no"))
        ));
        assert!(matches!(
            store.get("refused", None).await,
            Err(BlobError::NotFound(_))
        ));
    }
}
