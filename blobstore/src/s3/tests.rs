//! Tests of the S3 store against an in-memory object store (and an unreachable endpoint).

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
    assert!(matches!(
        b.get("a", None).await,
        Err(BlobError::NotFound(_))
    ));
    b.put("a", Bytes::from_static(b"hello")).await.expect("put");
    assert_eq!(b.get("a", None).await.ok().as_deref(), Some(&b"hello"[..]));
    let big: Vec<u8> = (0..(2 * PART_BYTES + 12345))
        .map(|i| (i % 251) as u8)
        .collect();
    b.put("state-versions/sv-1/state", Bytes::from(big.clone()))
        .await
        .expect("multipart put");
    let back = b.get("state-versions/sv-1/state", None).await.expect("get");
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
    assert!(matches!(
        b.get("a", None).await,
        Err(BlobError::NotFound(_))
    ));
    // Another organization does not see the blob.
    assert!(matches!(
        s.scoped("other")
            .get("state-versions/sv-1/state", None)
            .await,
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
    assert_eq!(
        owner_of("acme/history/runs/ws-1/000000.json").map(|o| (o.kind, o.id)),
        Some(("history/runs".to_owned(), "ws-1".to_owned()))
    );
    assert_eq!(owner_of("acme/history/runs/directory/07.json"), None);
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
    let e = b.get("k", None).await.expect_err("mismatch");
    assert!(
        matches!(&e, BlobError::Corrupt { detail, .. } if detail.contains("differs")),
        "{e}"
    );
    mem.put(&path, PutPayload::from_static(b"plain"))
        .await
        .expect("plain");
    assert!(matches!(
        b.get("k", None).await,
        Err(BlobError::Corrupt { .. })
    ));
    assert!(verify("k", Some(&sha256_hex(b"x").to_uppercase()), b"x").is_ok());
}

/// Pieces of a pseudo-random blob of `len` bytes, in uneven sizes.
fn blob(len: usize) -> (Vec<u8>, Vec<Bytes>) {
    let mut x: u32 = 7;
    let all: Vec<u8> = (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    let mut pieces = Vec::new();
    let mut at = 0;
    let mut n = 1000;
    while at < len {
        let end = (at + n).min(len);
        pieces.push(Bytes::copy_from_slice(&all[at..end]));
        at = end;
        n = n * 3 % 700_001 + 1;
    }
    (all, pieces)
}

async fn stream_in(b: &S3BlobStore, key: &str, pieces: &[Bytes]) -> S3Upload {
    let mut up = b.upload(key).await.expect("upload");
    for p in pieces {
        up.write(p.clone()).await.expect("write");
    }
    up
}

/// A streamed blob of more than two parts: invisible until committed, then read back
/// whole (and as a stream) against the checksum the commit answered; it carries no
/// metadata checksum, so a read without the owner's is corrupt. A blob of exactly one
/// part goes in one PUT with its checksum. Every part permit is given back.
#[tokio::test]
async fn streamed_uploads_in_parts() {
    let (mem, s) = memory();
    let b = s.scoped("acme");
    let (all, pieces) = blob(2 * PART_BYTES + 4321);
    let up = stream_in(&b, "state-versions/sv-2/state", &pieces).await;
    assert!(matches!(
        b.get("state-versions/sv-2/state", None).await,
        Err(BlobError::NotFound(_))
    ));
    let stored = up.commit().await.expect("commit");
    assert_eq!(stored.size, all.len() as u64);
    assert_eq!(stored.sha256, sha256_hex(&all));
    let back = b
        .get("state-versions/sv-2/state", Some(&stored.sha256))
        .await
        .expect("get");
    assert!(back[..] == all[..]);
    let mut streamed = b
        .get_stream("state-versions/sv-2/state", Some(&stored.sha256))
        .await
        .expect("stream");
    assert_eq!(streamed.size, all.len() as u64);
    let mut got = Vec::new();
    while let Some(p) = streamed.pieces.next().await {
        got.extend_from_slice(&p.expect("piece"));
    }
    assert!(got == all);
    assert!(matches!(
        b.get("state-versions/sv-2/state", None).await,
        Err(BlobError::Corrupt { .. })
    ));
    assert!(matches!(
        b.get("state-versions/sv-2/state", Some(&sha256_hex(b"other")))
            .await,
        Err(BlobError::Corrupt { .. })
    ));

    let (one, pieces) = blob(PART_BYTES);
    let stored = stream_in(&b, "one", &pieces)
        .await
        .commit()
        .await
        .expect("commit");
    let raw = mem.get(&Path::from("pre/fix/acme/one")).await.expect("raw");
    assert_eq!(
        raw.attributes
            .get(&Attribute::Metadata(METADATA_SHA256.into()))
            .map(|v| v.to_string()),
        Some(stored.sha256.clone())
    );
    assert!(b.get("one", None).await.expect("get")[..] == one[..]);
    assert_eq!(s.parts.available_permits(), PART_BUFFERS);
}

/// An aborted upload (one part or many) leaves nothing under its key and gives its
/// permits back.
#[tokio::test]
async fn aborted_uploads_leave_nothing() {
    let (_, s) = memory();
    let b = s.scoped("acme");
    for len in [100, 3 * PART_BYTES] {
        let (_, pieces) = blob(len);
        stream_in(&b, "gone", &pieces).await.abort().await;
        assert!(matches!(
            b.get("gone", None).await,
            Err(BlobError::NotFound(_))
        ));
    }
    assert!(s.list().await.expect("list").is_empty());
    assert_eq!(s.parts.available_permits(), PART_BUFFERS);
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
