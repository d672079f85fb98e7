//! The credentials of a run's Pod: the runner token (`<namespace>.<secret>`, for the
//! runner endpoints) and the run's API credential (`tfrun.<run object>.<token>`, in the
//! engine's CLI configuration), and how the API server reads them back before it knows
//! the run (every part a Kubernetes name or URL-safe, else refused).

/// A run's token for the runner endpoints: the run's namespace, a dot and `secret`
/// (namespaces have no dots). The namespace lets the API server check the token against
/// the run's Secret before it knows the run, so an unknown run costs an anonymous caller
/// nothing (no wait for the index).
pub fn runner_token(namespace: &str, secret: &str) -> String {
    format!("{namespace}.{secret}")
}

/// The namespace a runner token names, if the token is of [`runner_token`]'s form: a
/// namespace that is a DNS-1123 label, a dot and a secret of 16 to 128 URL-safe base64
/// characters. Anything else is no token of a run, refused before any request is made
/// with it: the namespace goes into the path of a Kubernetes request.
pub fn runner_token_namespace(token: &str) -> Option<&str> {
    let (ns, secret) = token.split_once('.')?;
    (crate::ids::is_dns1123_label(ns)
        && (16..=128).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then_some(ns)
}

/// What starts a run's API credential ([`run_credential`]).
pub const RUN_CREDENTIAL_PREFIX: &str = "tfrun.";

/// The credential the engine of run object `run_object` presents to the API (its CLI
/// configuration's `credentials` block), made from the run's runner token: the prefix, the
/// run object, a dot and the runner token (`tfrun.<run object>.<namespace>.<secret>`). It
/// holds nothing more than the runner token, so the run's Secret stays its one source;
/// the prefix keeps it apart from Kubernetes tokens (JWTs never start with it).
pub fn run_credential(runner_token: &str, run_object: &str) -> String {
    format!("{RUN_CREDENTIAL_PREFIX}{run_object}.{runner_token}")
}

/// The run object and the runner token of a [`run_credential`].
pub fn parse_run_credential(credential: &str) -> Option<(&str, &str)> {
    let (object, token) = credential
        .strip_prefix(RUN_CREDENTIAL_PREFIX)?
        .split_once('.')?;
    (crate::ids::is_dns1123_subdomain(object) && runner_token_namespace(token).is_some())
        .then_some((object, token))
}
