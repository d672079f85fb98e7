//! Where the cluster blob store keeps a blob (DESIGN.md §2): the names and markings of its
//! chunk Secrets, shared by the API server (which writes and reads them) and the operator
//! (which deletes the state of versions the data retention policy expires). A blob of key
//! K is gzip-compressed (unless it already is gzip) and split into Secrets
//! `blob-<H>-<i>` of at most [`CHUNK_BYTES`] each, H being a hash of K; chunk 0 is written
//! last and carries the chunk count, so a reader never takes a half-written blob for a
//! whole one.

/// Largest blob (before compression) the cluster store takes: etcd is sized for small
/// objects; larger blobs need the S3-compatible store (`--blob-store s3://…`).
pub const MAX_CLUSTER_BLOB_BYTES: usize = 32 * 1024 * 1024;
/// Finalizer on an object whose blobs are in a bucket (`--blob-store s3://…`): owner
/// references do not reach outside the cluster, so the operator deletes the blobs, then
/// removes it.
pub const FINALIZER: &str = "terrace.dev/blobs";
/// Largest chunk stored in one Secret (Kubernetes caps an object at about 1 MiB).
pub const CHUNK_BYTES: usize = 512 * 1024;
/// Label on every chunk Secret: the hash naming the blob.
pub const LABEL_BLOB: &str = "terrace.dev/blob";
/// Annotation on chunk 0: the number of chunks.
pub const ANNOTATION_CHUNKS: &str = "terrace.dev/blob-chunks";
/// Annotation on chunk 0: `gzip` or `identity`.
pub const ANNOTATION_ENCODING: &str = "terrace.dev/blob-encoding";
/// Annotation on chunk 0: the blob's key.
pub const ANNOTATION_KEY: &str = "terrace.dev/blob-key";
/// Type of the chunk Secrets.
pub const SECRET_TYPE: &str = "terrace.dev/blob";

/// The hash naming a key's chunks (keys may hold any character).
pub fn blob_name(key: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(key.as_bytes())
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The name of chunk `i` of the blob of `key`.
pub fn chunk_name(key: &str, i: usize) -> String {
    format!("blob-{}-{i}", blob_name(key))
}

/// The key of a state version's state file.
pub fn state_key(state_version_id: &str) -> String {
    format!("state-versions/{state_version_id}/state")
}

/// The key of a state version's JSON (`terraform show -json`) state.
pub fn json_state_key(state_version_id: &str) -> String {
    format!("state-versions/{state_version_id}/json-state")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_names_are_stable_dns_names() {
        // Stable: blobs written by earlier versions keep their names.
        assert_eq!(blob_name("a"), "ca978112ca1bbdcafac231b3");
        let n = chunk_name("state-versions/sv-x/state", 3);
        assert!(
            n.starts_with("blob-") && n.ends_with("-3") && n.len() <= 253,
            "{n}"
        );
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert_ne!(
            chunk_name(&state_key("sv-a"), 0),
            chunk_name(&json_state_key("sv-a"), 0)
        );
    }
}
