//! Tests of `tokens`.

use super::*;

fn now() -> Timestamp {
    timestamp(1_750_000_000)
}

fn signer() -> TokenSigner {
    TokenSigner::new([7u8; 32])
}

fn payload_of(token: &str) -> Value {
    let part = token.split('.').nth(1).unwrap_or_default();
    URL_SAFE_NO_PAD
        .decode(part)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null)
}

fn auds(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Copies kube-apiserver's ServiceAccount JWT: `iss`, `sub`, `aud`, `exp`, `iat`,
/// `nbf`, `jti` and the `kubernetes.io` claim with namespace and serviceaccount.
#[test]
fn issued_token_has_real_claims() {
    let (token, exp) = signer().issue("acme", "runner", "uid-1", &auds(&["api"]), 3600, now());
    assert_eq!(token.split('.').count(), 3);
    assert_eq!(exp.as_second(), 1_750_003_600);
    let p = payload_of(&token);
    assert_eq!(p["iss"], DEFAULT_ISSUER);
    assert_eq!(p["sub"], "system:serviceaccount:acme:runner");
    assert_eq!(p["aud"], json!(["api"]));
    assert_eq!(p["exp"], 1_750_003_600);
    assert_eq!(p["iat"], 1_750_000_000);
    assert_eq!(p["nbf"], 1_750_000_000);
    assert!(p["jti"].as_str().is_some_and(|j| !j.is_empty()));
    assert_eq!(
        p["kubernetes.io"],
        json!({"namespace": "acme", "serviceaccount": {"name": "runner", "uid": "uid-1"}})
    );
}

/// Copies kube-apiserver: a valid token authenticates as the ServiceAccount user with
/// its groups, `system:authenticated` and the credential id extra.
#[test]
fn verify_round_trip_and_user_info() {
    let s = signer();
    let (token, _) = s.issue(
        "acme",
        "runner",
        "uid-1",
        &auds(&[DEFAULT_ISSUER]),
        3600,
        now(),
    );
    let claims = s
        .verify(&token, &[], now())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(claims.service_account_ref(), ("acme", "runner", "uid-1"));
    assert_eq!(claims.matched_audiences, auds(&[DEFAULT_ISSUER]));
    let user = claims.user_info();
    assert_eq!(user.username, "system:serviceaccount:acme:runner");
    assert_eq!(user.uid, "uid-1");
    assert_eq!(
        user.groups,
        auds(&[
            "system:serviceaccounts",
            "system:serviceaccounts:acme",
            "system:authenticated"
        ])
    );
    assert_eq!(
        user.extra[CREDENTIAL_ID_KEY],
        vec![format!("JTI={}", claims.id)]
    );
}

/// Copies go-jose validation as kube-apiserver uses it: expired a minute past `exp`
/// (one-minute leeway), not valid before `nbf`.
#[test]
fn expiry_with_leeway() {
    let s = signer();
    let (token, _) = s.issue("a", "b", "u", &[], 600, now());
    let at = |secs: i64| timestamp(now().as_second() + secs);
    assert!(s.verify(&token, &[], at(600)).is_ok());
    assert!(s.verify(&token, &[], at(660)).is_ok());
    assert_eq!(s.verify(&token, &[], at(661)), Err(TokenError::Expired));
    assert_eq!(s.verify(&token, &[], at(-61)), Err(TokenError::NotYetValid));
    assert_eq!(
        TokenError::Expired.to_string(),
        "service account token has expired"
    );
}

/// Copies kube-apiserver: a token whose payload or signature was changed, or signed
/// with another key, fails the signature check.
#[test]
fn tampered_tokens_are_rejected() {
    let s = signer();
    let (token, _) = s.issue("a", "b", "u", &[], 3600, now());
    let parts: Vec<&str> = token.split('.').collect();
    let mut p = payload_of(&token);
    p["sub"] = json!("system:serviceaccount:kube-system:admin");
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(p.to_string()),
        parts[2]
    );
    assert_eq!(
        s.verify(&forged, &[], now()),
        Err(TokenError::InvalidSignature)
    );
    let bad_sig = format!(
        "{}.{}.{}",
        parts[0],
        parts[1],
        URL_SAFE_NO_PAD.encode([0u8; 32])
    );
    assert_eq!(
        s.verify(&bad_sig, &[], now()),
        Err(TokenError::InvalidSignature)
    );
    let other = TokenSigner::new([8u8; 32]);
    assert_eq!(
        other.verify(&token, &[], now()),
        Err(TokenError::InvalidSignature)
    );
    let none_alg = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
        parts[1]
    );
    assert_eq!(
        s.verify(&none_alg, &[], now()),
        Err(TokenError::InvalidSignature)
    );
}

/// Copies kube-apiserver: garbage and tokens of another issuer are "not ours" (the
/// authenticator has no opinion), never a panic.
#[test]
fn foreign_and_garbage_tokens() {
    let s = signer();
    for t in ["", "abc", "a.b.c", "a.b.c.d", "....", "é.é.é"] {
        assert_eq!(
            s.verify(t, &[], now()),
            Err(TokenError::NotServiceAccountToken),
            "{t}"
        );
    }
    let (token, _) = TokenSigner::new([7u8; 32])
        .with_issuer("https://elsewhere")
        .issue("a", "b", "u", &[], 3600, now());
    assert_eq!(
        s.verify(&token, &[], now()),
        Err(TokenError::NotServiceAccountToken)
    );
}

/// Copies kube-apiserver's audience check: the token's audiences must intersect the
/// requested ones (the API audiences by default), with the real error text.
#[test]
fn audiences_are_checked() {
    let s = signer();
    let (token, _) = s.issue("a", "b", "u", &auds(&["vault", "other"]), 3600, now());
    assert_eq!(
        s.verify(&token, &[], now()),
        Err(TokenError::AudienceMismatch {
            token: "[\"vault\" \"other\"]".into(),
            target: format!("[\"{DEFAULT_ISSUER}\"]"),
        })
    );
    assert_eq!(
        s.verify(&token, &[], now())
            .map_err(|e| e.to_string())
            .err()
            .as_deref(),
        Some(
            "token audiences [\"vault\" \"other\"] is invalid for the target audiences \
                 [\"https://kubernetes.default.svc.cluster.local\"]"
        )
    );
    let claims = s.verify(&token, &auds(&["vault"]), now());
    assert_eq!(claims.map(|c| c.matched_audiences), Ok(auds(&["vault"])));
}

/// Copies the token-file authenticator: exact token match, the user's groups plus
/// `system:authenticated`.
#[test]
fn static_tokens() {
    let tokens = StaticTokens::with_admin("s3cret");
    assert_eq!(tokens.lookup("s3cret"), Some(&StaticTokens::admin_user()));
    assert_eq!(tokens.lookup("s3cre"), None);
    assert_eq!(tokens.lookup("s3cret "), None);
    assert_eq!(tokens.lookup(""), None);
}

fn authenticator() -> Authenticator {
    Authenticator::new(signer(), StaticTokens::with_admin("admin-token"))
}

/// Copies kube-apiserver's authenticator chain: static token, ServiceAccount token
/// checked against the live ServiceAccount (missing or recreated → rejected with the
/// real messages), unknown token → `invalid bearer token`.
#[test]
fn authenticator_chain() {
    let a = authenticator();
    let live =
        |ns: &str, name: &str| (ns == "acme" && name == "runner").then(|| "uid-1".to_string());
    let admin = a.authenticate("admin-token", &[], now(), live);
    assert_eq!(
        admin.map(|x| x.user.groups),
        Ok(auds(&["system:masters", "system:authenticated"]))
    );
    let (token, _) = a.signer.issue("acme", "runner", "uid-1", &[], 3600, now());
    let ok = a.authenticate(&token, &[], now(), live);
    assert_eq!(
        ok.map(|x| (x.user.username, x.audiences)),
        Ok((
            "system:serviceaccount:acme:runner".to_string(),
            auds(&[DEFAULT_ISSUER])
        ))
    );
    let gone = a.authenticate(&token, &[], now(), |_: &str, _: &str| None);
    assert_eq!(
        gone.map_err(|e| e.to_string()),
        Err("[invalid bearer token, serviceaccounts \"runner\" not found]".to_string())
    );
    let recreated = a.authenticate(&token, &[], now(), |_: &str, _: &str| Some("uid-2".into()));
    assert_eq!(
        recreated.map_err(|e| e.to_string()),
        Err(
            "[invalid bearer token, service account UID (uid-2) does not match claim (uid-1)]"
                .to_string()
        )
    );
    let late = a.authenticate(&token, &[], timestamp(now().as_second() + 7200), live);
    assert_eq!(
        late.map_err(|e| e.to_string()),
        Err("[invalid bearer token, service account token has expired]".to_string())
    );
    assert_eq!(
        a.authenticate("nope", &[], now(), live),
        Err(AuthError::InvalidToken)
    );
}

/// Copies kube-apiserver's audience-agnostic wrapper: a static token is only good for
/// the API audiences.
#[test]
fn static_tokens_are_audience_agnostic() {
    let a = authenticator();
    let none = |_: &str, _: &str| None;
    assert_eq!(
        a.authenticate("admin-token", &auds(&["vault"]), now(), none),
        Err(AuthError::InvalidToken)
    );
    let both = a.authenticate(
        "admin-token",
        &auds(&["vault", DEFAULT_ISSUER]),
        now(),
        none,
    );
    assert_eq!(both.map(|x| x.audiences), Ok(auds(&[DEFAULT_ISSUER])));
}

fn service_account() -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "runner", "namespace": "acme", "uid": "uid-1"}})
}

/// Copies kube-apiserver's TokenRequest: `kubectl create token`'s body (nulls) gets
/// expirationSeconds 3600 and the API audiences; the response has a verifiable token
/// and its expiration timestamp.
#[test]
fn token_request_defaults() {
    let body = json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null},
            "spec": {"audiences": null, "expirationSeconds": null, "boundObjectRef": null},
            "status": {"token": "", "expirationTimestamp": null}});
    let s = signer();
    let resp =
        token_request(&s, &body, &service_account(), now()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp["metadata"]["name"], "runner");
    assert_eq!(resp["metadata"]["namespace"], "acme");
    assert_eq!(
        resp["metadata"]["creationTimestamp"],
        "2025-06-15T15:06:40Z"
    );
    assert_eq!(resp["spec"]["expirationSeconds"], 3600);
    assert_eq!(resp["spec"]["audiences"], json!([DEFAULT_ISSUER]));
    assert_eq!(
        resp["status"]["expirationTimestamp"],
        "2025-06-15T16:06:40Z"
    );
    let token = resp["status"]["token"].as_str().unwrap_or_default();
    let claims = s.verify(token, &[], now());
    assert_eq!(
        claims.map(|c| c.service_account_uid),
        Ok("uid-1".to_string())
    );
}

/// Copies kube-apiserver's TokenRequest: explicit audiences and duration are used.
#[test]
fn token_request_explicit_values() {
    let body = json!({"spec": {"audiences": ["terrace"], "expirationSeconds": 600}});
    let resp = token_request(&signer(), &body, &service_account(), now());
    let resp = resp.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp["spec"]["audiences"], json!(["terrace"]));
    assert_eq!(
        resp["status"]["expirationTimestamp"],
        "2025-06-15T15:16:40Z"
    );
    let p = payload_of(resp["status"]["token"].as_str().unwrap_or_default());
    assert_eq!(p["aud"], json!(["terrace"]));
}

/// Copies kube-apiserver's TokenRequest validation: under 10 minutes or over 2^32
/// seconds is Invalid (422) with the real message; a mismatched metadata.name is
/// Invalid; a wrongly typed field is a 400 decode error.
#[test]
fn token_request_validation() {
    let sa = service_account();
    let err = token_request(
        &signer(),
        &json!({"spec": {"expirationSeconds": 60}}),
        &sa,
        now(),
    );
    let err = err.err().unwrap_or_else(|| panic!("accepted"));
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid \
             value: 60: may not specify a duration less than 10 minutes"
    );
    let err = token_request(
        &signer(),
        &json!({"spec": {"expirationSeconds": 5_000_000_000i64}}),
        &sa,
        now(),
    );
    assert!(err.is_err_and(|e| e.message.contains("larger than 2^32 seconds")));
    let err = token_request(
        &signer(),
        &json!({"metadata": {"name": "other"}}),
        &sa,
        now(),
    );
    assert!(err.is_err_and(|e| e.code == 422
            && e.message.contains("metadata.name: Invalid value: \"other\": must match the service account name if specified")));
    let err = token_request(
        &signer(),
        &json!({"spec": {"expirationSeconds": "1h"}}),
        &sa,
        now(),
    );
    assert!(err.is_err_and(|e| e.code == 400));
    let err = token_request(&signer(), &json!({"spec": {"audiences": "x"}}), &sa, now());
    assert!(err.is_err_and(|e| e.code == 400));
    assert!(token_request(&signer(), &json!([]), &sa, now()).is_err());
}
