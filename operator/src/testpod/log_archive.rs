//! The log archive of a test run (a contract with the API server): before the TestRun
//! controller releases a finished run's Pod it copies the `engine` container's log (its
//! last [`LOG_ARCHIVE_MAX`] bytes) gzip-compressed into the ConfigMap
//! [`log_archive_name`] (`<pod name>-log`, same namespace, owned by the TestRun,
//! labelled [`LABEL_TEST_RUN`]) under binaryData key [`LOG_ARCHIVE_KEY`]; the API
//! server's log endpoint serves it once the Pod is gone ([`build_log_archive`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use terrace_crds::TestRun;
use terrace_crds::constants::{LABEL_MANAGED_BY, MANAGED_BY};

use super::LABEL_TEST_RUN;
use crate::Error;

/// binaryData key of the log archive ConfigMap: the gzip-compressed engine log.
pub const LOG_ARCHIVE_KEY: &str = "log.gz";
/// The most engine log bytes archived (the tail is kept); a ConfigMap holds at most 1 MiB,
/// which the compressed text of a test log stays far below.
pub const LOG_ARCHIVE_MAX: usize = 4 * 1024 * 1024;

/// Name of the ConfigMap archiving the engine log of Pod `pod_name`.
pub fn log_archive_name(pod_name: &str) -> String {
    format!("{pod_name}-log")
}

/// The last `max` bytes of `log`, cut forward to a character boundary.
pub fn log_tail(log: &str, max: usize) -> &str {
    let mut start = log.len().saturating_sub(max);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    &log[start..]
}

/// `text` gzip-compressed.
pub fn gzip(text: &[u8]) -> Result<Vec<u8>, Error> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text)
        .and_then(|()| enc.finish())
        .map_err(|e| Error::Invalid(format!("compressing the engine log: {e}")))
}

/// The log archive ConfigMap of `run` (ID `run_id`) whose Pod `pod_name` wrote `log`:
/// its tail ([`LOG_ARCHIVE_MAX`]) gzip-compressed under [`LOG_ARCHIVE_KEY`].
pub fn build_log_archive(
    run: &TestRun,
    run_id: &str,
    pod_name: &str,
    log: &str,
) -> Result<ConfigMap, Error> {
    let owner = run
        .controller_owner_ref(&())
        .ok_or_else(|| Error::Invalid("the test run has no uid".into()))?;
    build_log_archive_for(
        owner,
        &run.namespace().unwrap_or_default(),
        LABEL_TEST_RUN,
        run_id,
        pod_name,
        log,
    )
}

/// The log archive ConfigMap of Pod `pod_name` in `ns`, owned by `owner` and labelled
/// `label = id` (a test run's or a workspace run's).
pub fn build_log_archive_for(
    owner: OwnerReference,
    ns: &str,
    label: &str,
    id: &str,
    pod_name: &str,
    log: &str,
) -> Result<ConfigMap, Error> {
    let gz = gzip(log_tail(log, LOG_ARCHIVE_MAX).as_bytes())?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(log_archive_name(pod_name)),
            namespace: Some(ns.to_owned()),
            labels: Some(BTreeMap::from([
                (label.to_owned(), id.to_owned()),
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
            ])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            LOG_ARCHIVE_KEY.to_owned(),
            ByteString(gz),
        )])),
        ..Default::default()
    })
}

/// `log` with the line terrace adds when a run or test run errored: `terrace: <cause>`,
/// so the log the CLI shows says why (an engine that never started has no log at all).
pub fn with_cause(mut log: String, cause: Option<&str>) -> String {
    if let Some(cause) = cause.filter(|c| !c.is_empty()) {
        if !log.is_empty() && !log.ends_with('\n') {
            log.push('\n');
        }
        log.push_str("terrace: ");
        log.push_str(cause);
        log.push('\n');
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_crds::TestRunSpec;

    fn run() -> TestRun {
        let mut r = TestRun::new(
            "r1",
            TestRunSpec {
                module: "vpc".into(),
                configuration_version: "cv1".into(),
                ..Default::default()
            },
        );
        r.metadata.namespace = Some("acme".into());
        r.metadata.uid = Some("uid-1".into());
        r
    }

    /// The log archive ConfigMap: owned by the TestRun as its controller (so the garbage
    /// collector of kube-controller-manager deletes it with the run), labelled with the
    /// run's ID, the tail of the log gzip-compressed under `binaryData` (a ConfigMap's
    /// binary values, base64 in JSON as kube-apiserver stores them).
    #[test]
    fn log_archive_configmap() {
        use std::io::Read;
        let r = run();
        let cm = build_log_archive(&r, "trun-abc", "r1-run", "engine saw the interrupt\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cm.metadata.name.as_deref(), Some("r1-run-log"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("acme"));
        assert_eq!(cm.labels()[LABEL_TEST_RUN], "trun-abc");
        let owner = &cm.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TestRun", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let gz = &cm
            .binary_data
            .as_ref()
            .map(|d| d[LOG_ARCHIVE_KEY].0.clone())
            .unwrap_or_default();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, "engine saw the interrupt\n");
        let mut no_uid = r.clone();
        no_uid.metadata.uid = None;
        assert!(build_log_archive(&no_uid, "trun-abc", "r1-run", "").is_err());
    }

    /// The archive keeps the end of a long log (like `kubectl logs --limit-bytes` from the
    /// end), never splitting a UTF-8 character.
    #[test]
    fn log_tail_keeps_the_end() {
        assert_eq!(log_tail("abcdef", 3), "def");
        assert_eq!(log_tail("ab", 3), "ab");
        assert_eq!(log_tail("xé", 1), "");
        assert_eq!(log_tail("xéy", 2), "y");
        assert_eq!(log_tail("xéy", 3), "éy");
    }
}
