//! Capabilities: the unguessable tokens of URLs that work without an Authorization header
//! (upload URLs, log-read URLs, archive fetches of Pods), as TFE's pre-signed URLs do —
//! real clients (go-tfe, the CLI) send no credentials to them. Only a token's SHA-256 is
//! ever stored, tokens are compared in constant time, and the externally visible base URL
//! of the links is derived here.

use axum::http::{HeaderMap, header};

use crate::AppState;

/// A fresh random token of about 190 bits (two base62 IDs' worth of the thread-local
/// CSPRNG), for one-time capability URLs and version IDs.
pub fn random_token() -> String {
    use terrace_crds::ids::{IdKind, new_id};
    let p = IdKind::Tag.prefix().len();
    let a = new_id(IdKind::Tag);
    let b = new_id(IdKind::Tag);
    format!("{}{}", &a[p..], &b[p..])
}

/// Whether two byte strings are equal, in time independent of where they differ (both are
/// hashed first, so lengths do not leak either).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (x, y) = (Sha256::digest(a), Sha256::digest(b));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The externally visible base URL: the settings' base URL, else derived from the
/// request's Host header (`http://` unless `X-Forwarded-Proto` says otherwise).
pub fn base_url(state: &AppState, headers: &HeaderMap) -> String {
    if let Some(b) = state.settings.base_url.as_deref().filter(|b| !b.is_empty()) {
        return b.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("localhost");
    let proto = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| *p == "https" || *p == "http")
        .unwrap_or("http");
    format!("{proto}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_content() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn random_tokens_are_long_and_distinct() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
