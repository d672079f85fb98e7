//! Capabilities: the unguessable tokens of URLs that work without an Authorization header
//! (upload URLs, log-read URLs, archive fetches of Pods), as TFE's pre-signed URLs do —
//! real clients (go-tfe, the CLI) send no credentials to them. One-time tokens are random
//! and only their SHA-256 is ever stored; reusable ones (log-read URLs) are signed
//! ([`Signer`]): bound to one purpose and one object, expiring, verified without any
//! storage. Tokens are compared in constant time, and the externally visible base URL of
//! the links is derived here.

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

/// Signs and verifies capability tokens: `<expiry unix seconds>.<hex HMAC-SHA256 of
/// purpose, object ID and expiry>`. Every API server replica must have the same key
/// (`--url-signing-key`, a Secret in the chart); without one a random key is made at start,
/// which suits a single process (`terrace dev`).
pub struct Signer {
    key: [u8; 32],
}

impl Signer {
    /// A signer with a key derived from `secret`, or a random one.
    pub fn new(secret: Option<&str>) -> Signer {
        use sha2::{Digest, Sha256};
        let key = match secret.filter(|s| !s.is_empty()) {
            Some(s) => Sha256::digest(s.as_bytes()).into(),
            None => rand::random(),
        };
        Signer { key }
    }

    fn mac(&self, purpose: &str, id: &str, expiry: i64) -> String {
        use hmac::{Hmac, Mac};
        let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(purpose.as_bytes());
        m.update(&[0]);
        m.update(id.as_bytes());
        m.update(&[0]);
        m.update(expiry.to_string().as_bytes());
        m.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// A token for `purpose` on object `id`, valid for `ttl`.
    pub fn sign(&self, purpose: &str, id: &str, ttl: std::time::Duration) -> String {
        let expiry = jiff::Timestamp::now().as_second()
            + i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX / 2);
        self.sign_until(purpose, id, expiry)
    }

    /// A token for `purpose` on object `id` that expires after `expiry` (Unix seconds;
    /// one in the past makes an expired token, as tests need).
    pub fn sign_until(&self, purpose: &str, id: &str, expiry: i64) -> String {
        format!("{expiry}.{}", self.mac(purpose, id, expiry))
    }

    /// Whether `token` was signed for `purpose` on `id` and has not expired.
    pub fn verify(&self, purpose: &str, id: &str, token: &str) -> bool {
        let Some((expiry, mac)) = token.split_once('.') else {
            return false;
        };
        // Strictly the digits `sign_until` wrote: `+<exp>` or `0<exp>` would name the same
        // expiry in other bytes.
        let canonical = !expiry.is_empty()
            && expiry.bytes().all(|b| b.is_ascii_digit())
            && (expiry == "0" || !expiry.starts_with('0'));
        let Some(expiry) = expiry.parse::<i64>().ok().filter(|_| canonical) else {
            return false;
        };
        expiry >= jiff::Timestamp::now().as_second()
            && constant_time_eq(self.mac(purpose, id, expiry).as_bytes(), mac.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_tokens_are_bound_and_expire() {
        let s = Signer::new(Some("k"));
        let t = s.sign("log", "trun-1", std::time::Duration::from_secs(60));
        assert!(s.verify("log", "trun-1", &t));
        assert!(!s.verify("log", "trun-2", &t), "another object");
        assert!(!s.verify("archive", "trun-1", &t), "another purpose");
        let (exp, mac) = t.split_once('.').unwrap_or_default();
        for other in [
            format!("0{exp}.{mac}"),
            format!("+{exp}.{mac}"),
            format!(" {exp}.{mac}"),
        ] {
            assert!(
                !s.verify("log", "trun-1", &other),
                "{other}: the expiry in other bytes"
            );
        }
        assert!(
            !Signer::new(Some("other")).verify("log", "trun-1", &t),
            "another key"
        );
        assert!(!s.verify("log", "trun-1", "garbage"));
        let (exp, mac) = t.split_once('.').unwrap_or_default();
        let later = format!("{}.{mac}", exp.parse::<i64>().unwrap_or(0) + 1000);
        assert!(!s.verify("log", "trun-1", &later), "expiry is signed");
        let expired = format!("1.{}", s.mac("log", "trun-1", 1));
        assert!(!s.verify("log", "trun-1", &expired), "expired");
    }

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
