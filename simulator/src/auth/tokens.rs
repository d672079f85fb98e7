//! Bearer tokens: ServiceAccount tokens the simulator signs (TokenRequest,
//! `kubectl create token`) and static tokens (the admin token of `terrace dev`), and the
//! [`Authenticator`] that turns a presented token into a [`UserInfo`].
//!
//! ServiceAccount tokens have the real JWT layout and claims (`iss`, `sub`, `aud`, `exp`,
//! `iat`, `nbf`, `jti`, `kubernetes.io`), so tools that decode them see what a cluster
//! issues; they are signed with HMAC-SHA256 under a 32-byte key the server persists,
//! where a cluster signs with RS256/ES256 under its service-account key.
//! Validation copies `pkg/serviceaccount/jwt.go` and `claims.go`: a token with another
//! issuer is "not ours", then signature, audiences, then time with go-jose's one-minute
//! leeway, then the ServiceAccount must still exist with the same uid (the server answers
//! that lookup through a closure).

use crate::redacted::Redacted;
use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use jiff::Timestamp;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{
    ALL_AUTHENTICATED, BadValue, FieldError, SYSTEM_MASTERS, StatusError, UserInfo, go_quote,
    go_quote_list, service_account_groups,
};

type HmacSha256 = Hmac<Sha256>;

/// The issuer (and default API audience) of a kubeadm/kind cluster's tokens.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// go-jose's `DefaultLeeway` for `exp`, `nbf` and `iat`.
const LEEWAY_SECONDS: i64 = 60;
/// The UserInfo extra key carrying the token's `jti`.
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Why a ServiceAccount token was not accepted. `Display` is the message kube-apiserver
/// puts after `invalid bearer token, `.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not JWT-shaped or issued by someone else: the authenticator has no opinion.
    #[error("not a service account token of this issuer")]
    NotServiceAccountToken,
    #[error("go-jose/go-jose: error in cryptographic primitive")]
    InvalidSignature,
    #[error("service account token claims could not be validated")]
    InvalidClaims,
    #[error("token audiences {token} is invalid for the target audiences {target}")]
    AudienceMismatch { token: String, target: String },
    #[error("service account token has expired")]
    Expired,
    #[error("service account token is not valid yet")]
    NotYetValid,
    #[error("service account token is issued in the future")]
    IssuedInFuture,
}

/// What a verified ServiceAccount token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountClaims {
    pub issuer: String,
    pub subject: String,
    /// The token's `aud`.
    pub audiences: Vec<String>,
    /// The token's audiences that the request asked for (TokenReview `status.audiences`).
    pub matched_audiences: Vec<String>,
    pub expires_at: Timestamp,
    pub issued_at: Timestamp,
    pub not_before: Timestamp,
    /// `jti`.
    pub id: String,
    pub namespace: String,
    pub service_account_name: String,
    pub service_account_uid: String,
}

impl ServiceAccountClaims {
    /// `system:serviceaccount:<ns>:<name>` with the ServiceAccount groups,
    /// `system:authenticated` and the credential id, as kube-apiserver authenticates it.
    pub fn user_info(&self) -> UserInfo {
        let mut extra = BTreeMap::new();
        if !self.id.is_empty() {
            extra.insert(
                CREDENTIAL_ID_KEY.to_string(),
                vec![format!("JTI={}", self.id)],
            );
        }
        UserInfo {
            username: format!(
                "{}{}:{}",
                super::SERVICE_ACCOUNT_USERNAME_PREFIX,
                self.namespace,
                self.service_account_name
            ),
            uid: self.service_account_uid.clone(),
            groups: service_account_groups(&self.namespace),
            extra,
        }
        .with_authenticated_group()
    }

    /// `(namespace, name, uid)`: the server must check the ServiceAccount still exists with
    /// this uid before accepting the token.
    pub fn service_account_ref(&self) -> (&str, &str, &str) {
        (
            &self.namespace,
            &self.service_account_name,
            &self.service_account_uid,
        )
    }
}

/// Signs and verifies ServiceAccount tokens (`Debug` leaves the key out).
#[derive(Clone, Debug)]
pub struct TokenSigner {
    key: Redacted<[u8; 32]>,
    issuer: String,
    api_audiences: Vec<String>,
}

/// A JWT segment (base64url without padding) read as JSON.
fn json_segment(segment: &str) -> Option<Value> {
    let bytes = URL_SAFE_NO_PAD.decode(segment).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn timestamp(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `metav1.Time` encoding: RFC 3339 in UTC, whole seconds.
pub(crate) fn rfc3339(ts: Timestamp) -> String {
    timestamp(ts.as_second()).to_string()
}

impl TokenSigner {
    /// A signer with the default issuer, which is also the only API audience.
    pub fn new(key: [u8; 32]) -> Self {
        TokenSigner {
            key: Redacted(key),
            issuer: DEFAULT_ISSUER.to_string(),
            api_audiences: vec![DEFAULT_ISSUER.to_string()],
        }
    }

    /// A fresh random key, for the server to persist.
    pub fn generate_key() -> [u8; 32] {
        rand::random()
    }

    /// Sets the issuer (`--service-account-issuer`), which also becomes the API audience.
    pub fn with_issuer(mut self, issuer: &str) -> Self {
        self.issuer = issuer.to_string();
        self.api_audiences = vec![issuer.to_string()];
        self
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences the API server itself accepts (`--api-audiences`).
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        <HmacSha256 as Mac>::new_from_slice(&self.key.0).unwrap_or_else(|_| unreachable!())
    }

    fn key_id(&self) -> String {
        let digest = Sha256::new()
            .chain_update(b"terrace-simulator-kid:")
            .chain_update(self.key.0)
            .finalize();
        URL_SAFE_NO_PAD.encode(&digest[..16])
    }

    /// Issues a token for a ServiceAccount, valid from `now` for `expiration_seconds`;
    /// returns it with its expiration time.
    pub fn issue(
        &self,
        namespace: &str,
        service_account_name: &str,
        service_account_uid: &str,
        audiences: &[String],
        expiration_seconds: i64,
        now: Timestamp,
    ) -> (String, Timestamp) {
        let iat = now.as_second();
        let exp = iat.saturating_add(expiration_seconds);
        let header = json!({"alg": "HS256", "kid": self.key_id()});
        let payload = json!({
            "aud": audiences,
            "exp": exp,
            "iat": iat,
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": service_account_name, "uid": service_account_uid},
            },
            "nbf": iat,
            "sub": format!("{}{namespace}:{service_account_name}", super::SERVICE_ACCOUNT_USERNAME_PREFIX),
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        let signature = self.mac().chain_update(signing_input.as_bytes()).finalize();
        let token = format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.into_bytes())
        );
        (token, timestamp(exp))
    }

    /// Verifies a token for the requested `audiences` (empty: the API audiences) at `now`.
    /// Does not check that the ServiceAccount still exists: see
    /// [`ServiceAccountClaims::service_account_ref`].
    pub fn verify(
        &self,
        token: &str,
        audiences: &[String],
        now: Timestamp,
    ) -> Result<ServiceAccountClaims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::NotServiceAccountToken);
        };
        let claims = json_segment(payload).ok_or(TokenError::NotServiceAccountToken)?;
        if claims.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err(TokenError::NotServiceAccountToken);
        }
        let header = json_segment(header).ok_or(TokenError::InvalidSignature)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::InvalidSignature)?;
        let signing_input_len = token.rfind('.').unwrap_or(0);
        if header.get("alg").and_then(Value::as_str) != Some("HS256")
            || self
                .mac()
                .chain_update(&token.as_bytes()[..signing_input_len])
                .verify_slice(&signature)
                .is_err()
        {
            return Err(TokenError::InvalidSignature);
        }

        let str_claim = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(String::from);
        let int_claim = |key: &str| claims.get(key).and_then(Value::as_i64);
        let token_audiences: Vec<String> = match claims.get("aud") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(String::from))
                .collect::<Option<_>>()
                .ok_or(TokenError::InvalidClaims)?,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(TokenError::InvalidClaims),
        };
        let effective_token_audiences = if token_audiences.is_empty() {
            self.api_audiences.clone()
        } else {
            token_audiences.clone()
        };
        let requested = if audiences.is_empty() {
            self.api_audiences.as_slice()
        } else {
            audiences
        };
        let matched: Vec<String> = effective_token_audiences
            .iter()
            .filter(|a| requested.contains(a))
            .cloned()
            .collect();
        if matched.is_empty() {
            return Err(TokenError::AudienceMismatch {
                token: go_quote_list(&effective_token_audiences),
                target: go_quote_list(requested),
            });
        }

        let k8s = claims
            .get("kubernetes.io")
            .ok_or(TokenError::InvalidClaims)?;
        let sa = k8s.get("serviceaccount").ok_or(TokenError::InvalidClaims)?;
        let (Some(namespace), Some(name), Some(subject)) = (
            str_claim(k8s, "namespace"),
            str_claim(sa, "name"),
            str_claim(&claims, "sub"),
        ) else {
            return Err(TokenError::InvalidClaims);
        };
        let now_s = now.as_second();
        let exp = int_claim("exp").ok_or(TokenError::InvalidClaims)?;
        let nbf = int_claim("nbf");
        let iat = int_claim("iat");
        if now_s > exp.saturating_add(LEEWAY_SECONDS) {
            return Err(TokenError::Expired);
        }
        if nbf.is_some_and(|nbf| now_s < nbf.saturating_sub(LEEWAY_SECONDS)) {
            return Err(TokenError::NotYetValid);
        }
        if iat.is_some_and(|iat| now_s < iat.saturating_sub(LEEWAY_SECONDS)) {
            return Err(TokenError::IssuedInFuture);
        }
        Ok(ServiceAccountClaims {
            issuer: self.issuer.clone(),
            subject,
            audiences: token_audiences,
            matched_audiences: matched,
            expires_at: timestamp(exp),
            issued_at: timestamp(iat.unwrap_or(0)),
            not_before: timestamp(nbf.unwrap_or(0)),
            id: str_claim(&claims, "jti").unwrap_or_default(),
            namespace,
            service_account_name: name,
            service_account_uid: str_claim(sa, "uid").unwrap_or_default(),
        })
    }
}

/// Tokens with fixed users, like kube-apiserver's `--token-auth-file`. Only SHA-256
/// digests are kept, compared in constant time.
#[derive(Clone, Debug, Default)]
pub struct StaticTokens {
    entries: Vec<([u8; 32], UserInfo)>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl StaticTokens {
    pub fn new() -> Self {
        StaticTokens::default()
    }

    /// The user of `terrace dev`'s admin token: `admin` in `system:masters`.
    pub fn admin_user() -> UserInfo {
        UserInfo {
            username: "admin".to_string(),
            uid: "admin".to_string(),
            groups: vec![SYSTEM_MASTERS.to_string(), ALL_AUTHENTICATED.to_string()],
            extra: BTreeMap::new(),
        }
    }

    /// A set holding only the admin token.
    pub fn with_admin(token: &str) -> Self {
        let mut tokens = StaticTokens::new();
        tokens.insert(token, StaticTokens::admin_user());
        tokens
    }

    pub fn insert(&mut self, token: &str, user: UserInfo) {
        let d = digest(token);
        self.entries.retain(|(e, _)| *e != d);
        self.entries.push((d, user));
    }

    /// The user of `token`; every entry is compared, without early exit.
    pub fn lookup(&self, token: &str) -> Option<&UserInfo> {
        let d = digest(token);
        let mut found = None;
        for (entry, user) in &self.entries {
            let diff = entry
                .iter()
                .zip(d.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(user);
            }
        }
        found
    }
}

/// A successful authentication: the user and the audiences the credential is good for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    pub user: UserInfo,
    pub audiences: Vec<String>,
}

/// A rejected bearer token. `Display` is kube-apiserver's error text (TokenReview
/// `status.error`); the HTTP answer is [`StatusError::unauthorized`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No authenticator recognised the token.
    #[error("invalid bearer token")]
    InvalidToken,
    /// An authenticator recognised the token and rejected it.
    #[error("[invalid bearer token, {0}]")]
    Rejected(String),
}

/// The bearer-token authenticators of the simulator: static tokens, then ServiceAccount
/// tokens.
#[derive(Clone, Debug)]
pub struct Authenticator {
    pub static_tokens: StaticTokens,
    pub signer: TokenSigner,
}

impl Authenticator {
    pub fn new(signer: TokenSigner, static_tokens: StaticTokens) -> Self {
        Authenticator {
            static_tokens,
            signer,
        }
    }

    /// Authenticates `token` for `audiences` (empty: the API audiences, as for ordinary
    /// requests). `service_account_uid(namespace, name)` returns the uid of that
    /// ServiceAccount if it exists.
    pub fn authenticate(
        &self,
        token: &str,
        audiences: &[String],
        now: Timestamp,
        service_account_uid: impl Fn(&str, &str) -> Option<String>,
    ) -> Result<Authenticated, AuthError> {
        let api = self.signer.api_audiences();
        let requested = if audiences.is_empty() { api } else { audiences };
        // Static tokens are audience-agnostic: good for the API audiences only.
        let api_matched: Vec<String> = api
            .iter()
            .filter(|a| requested.contains(a))
            .cloned()
            .collect();
        if !api_matched.is_empty()
            && let Some(user) = self.static_tokens.lookup(token)
        {
            return Ok(Authenticated {
                user: user.clone().with_authenticated_group(),
                audiences: api_matched,
            });
        }
        match self.signer.verify(token, audiences, now) {
            Ok(claims) => {
                let (namespace, name, uid) = claims.service_account_ref();
                match service_account_uid(namespace, name) {
                    None => Err(AuthError::Rejected(format!(
                        "serviceaccounts {} not found",
                        go_quote(name)
                    ))),
                    Some(current) if current != uid => Err(AuthError::Rejected(format!(
                        "service account UID ({current}) does not match claim ({uid})"
                    ))),
                    Some(_) => Ok(Authenticated {
                        user: claims.user_info(),
                        audiences: claims.matched_audiences.clone(),
                    }),
                }
            }
            Err(TokenError::NotServiceAccountToken) => Err(AuthError::InvalidToken),
            Err(e) => Err(AuthError::Rejected(e.to_string())),
        }
    }
}

fn decode_error(kind: &str, detail: &str) -> StatusError {
    StatusError::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: {detail}"
    ))
}

/// Handles `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: from the
/// `authentication.k8s.io/v1` TokenRequest body and the stored ServiceAccount, the
/// response TokenRequest with `status.token` and `status.expirationTimestamp`.
/// `spec.expirationSeconds` defaults to 3600 and must be 600..=2^32; `spec.audiences`
/// defaults to the API audiences; `spec.boundObjectRef` is ignored.
pub fn token_request(
    signer: &TokenSigner,
    request: &Value,
    service_account: &Value,
    now: Timestamp,
) -> Result<Value, StatusError> {
    const KIND: &str = "TokenRequest";
    const GROUP: &str = "authentication.k8s.io";
    if !request.is_object() {
        return Err(decode_error(KIND, "body is not a JSON object"));
    }
    let spec = request.get("spec").cloned().unwrap_or(Value::Null);
    if !(spec.is_object() || spec.is_null()) {
        return Err(decode_error(KIND, "spec must be an object"));
    }
    let audiences: Vec<String> = match spec.get("audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| a.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(|| decode_error(KIND, "spec.audiences must be a list of strings"))?,
        Some(_) => {
            return Err(decode_error(
                KIND,
                "spec.audiences must be a list of strings",
            ));
        }
    };
    let expiration_seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => 3600,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| decode_error(KIND, "spec.expirationSeconds must be an integer"))?,
    };

    let mut errors = Vec::new();
    if expiration_seconds < 600 {
        errors.push(FieldError::invalid(
            "spec.expirationSeconds",
            BadValue::Int(expiration_seconds),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration_seconds > 1 << 32 {
        errors.push(FieldError::invalid(
            "spec.expirationSeconds",
            BadValue::Int(expiration_seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if !errors.is_empty() {
        return Err(StatusError::invalid(GROUP, KIND, "", &errors));
    }

    let meta_str = |obj: &Value, key: &str| {
        obj.pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let sa_name = meta_str(service_account, "name");
    let sa_namespace = meta_str(service_account, "namespace");
    let sa_uid = meta_str(service_account, "uid");
    for (key, expected, what) in [
        ("name", &sa_name, "name"),
        ("namespace", &sa_namespace, "namespace"),
    ] {
        let given = meta_str(request, key);
        if !given.is_empty() && given != *expected {
            return Err(StatusError::invalid(
                GROUP,
                KIND,
                &sa_name,
                &[FieldError::invalid(
                    &format!("metadata.{key}"),
                    BadValue::Str(given),
                    &format!("must match the service account {what} if specified"),
                )],
            ));
        }
    }

    let audiences = if audiences.is_empty() {
        signer.api_audiences().to_vec()
    } else {
        audiences
    };
    let (token, expires) = signer.issue(
        &sa_namespace,
        &sa_name,
        &sa_uid,
        &audiences,
        expiration_seconds,
        now,
    );
    let mut response = request.clone();
    response["apiVersion"] = json!("authentication.k8s.io/v1");
    response["kind"] = json!(KIND);
    let mut metadata = match request.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => serde_json::Map::new(),
    };
    metadata.insert("name".into(), json!(sa_name));
    metadata.insert("namespace".into(), json!(sa_namespace));
    metadata.insert("creationTimestamp".into(), json!(rfc3339(now)));
    response["metadata"] = Value::Object(metadata);
    let mut spec = match spec {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    spec.insert("audiences".into(), json!(audiences));
    spec.insert("expirationSeconds".into(), json!(expiration_seconds));
    spec.entry("boundObjectRef").or_insert(Value::Null);
    response["spec"] = Value::Object(spec);
    response["status"] = json!({"token": token, "expirationTimestamp": rfc3339(expires)});
    Ok(response)
}

#[cfg(test)]
mod tests;
