//! The private module registry's rules (docs/registry.md): what a version's state is,
//! when it may be installed, and which is the latest.

use crate::resources::{ConfigurationVersion, ModuleVersion, TestRun};

/// A version string as semver (a leading `v` allowed), or None.
pub fn parse_version(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v.strip_prefix('v').unwrap_or(v)).ok()
}

/// The state of a version from its archive's configuration version: `pending` until an
/// archive is uploaded, `ok` once one is, `reg_ingress_failed` with the reason when it
/// was refused.
pub fn version_state(cv: Option<&ConfigurationVersion>) -> (&'static str, Option<String>) {
    let st = cv.and_then(|c| c.status.as_ref());
    match st.and_then(|s| s.status.as_deref()) {
        Some("uploaded") => ("ok", None),
        Some("errored") => (
            "reg_ingress_failed",
            st.and_then(|s| s.error_message.clone())
                .or_else(|| Some("the archive was refused".to_owned())),
        ),
        _ => ("pending", None),
    }
}

/// A test run's result as a version shows it: `pass`, `fail`, `error` once it finished
/// (canceled and errored runs are `error`), else `pending`.
pub fn test_status(run: &TestRun) -> &'static str {
    let st = run.status.as_ref();
    match st.and_then(|s| s.status.as_deref()) {
        Some("finished") => match st.and_then(|s| s.test_status.as_deref()) {
            Some("pass") => "pass",
            Some("fail") => "fail",
            _ => "error",
        },
        Some("errored" | "canceled") => "error",
        _ => "pending",
    }
}

/// What a version is, from its archive's configuration version and the test runs of
/// that configuration version (the newest counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionFacts {
    pub state: &'static str,
    pub error: Option<String>,
    /// The newest test run's ID.
    pub test_run: Option<String>,
    pub tests: Option<&'static str>,
}

/// The [`VersionFacts`] of a version whose archive is `cv`, tested by `runs`.
pub fn version_facts<'a>(
    cv: Option<&ConfigurationVersion>,
    runs: impl IntoIterator<Item = &'a TestRun>,
) -> VersionFacts {
    let (state, error) = version_state(cv);
    let newest = runs
        .into_iter()
        .max_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0));
    VersionFacts {
        state,
        error,
        test_run: newest.and_then(|r| {
            r.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::constants::LABEL_ID).cloned())
        }),
        tests: newest.map(test_status),
    }
}

/// Whether a version in `state` with tests in `tests` may be installed: its archive is in
/// (`ok`), and when the module publishes only tested versions, its tests passed.
pub fn installable(state: &str, tests: Option<&str>, publish_only_tested: bool) -> bool {
    state == "ok" && (!publish_only_tested || tests == Some("pass"))
}

/// The latest of `versions`: the highest release, else (only pre-releases) the highest
/// pre-release.
pub fn latest<'a>(
    versions: impl IntoIterator<Item = &'a ModuleVersion>,
) -> Option<&'a ModuleVersion> {
    let parsed: Vec<(semver::Version, &ModuleVersion)> = versions
        .into_iter()
        .filter_map(|m| parse_version(&m.spec.version).map(|v| (v, m)))
        .collect();
    let release = parsed
        .iter()
        .filter(|(v, _)| v.pre.is_empty())
        .max_by(|a, b| a.0.cmp(&b.0));
    release
        .or_else(|| parsed.iter().max_by(|a, b| a.0.cmp(&b.0)))
        .map(|(_, m)| *m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::ModuleVersionSpec;

    fn mv(v: &str) -> ModuleVersion {
        ModuleVersion::new(
            v,
            ModuleVersionSpec {
                module: "m".into(),
                version: v.into(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn the_latest_is_the_highest_release() {
        let all = [mv("1.2.0"), mv("1.10.0"), mv("2.0.0-rc.1"), mv("1.9.9")];
        assert_eq!(
            latest(&all).map(|m| m.spec.version.as_str()),
            Some("1.10.0")
        );
        let pre = [mv("0.1.0-alpha"), mv("0.1.0-beta")];
        assert_eq!(
            latest(&pre).map(|m| m.spec.version.as_str()),
            Some("0.1.0-beta")
        );
        assert!(latest(&[]).is_none());
        assert_eq!(parse_version("v1.2.3").map(|v| v.minor), Some(2));
        assert!(parse_version("1.2").is_none());
    }

    #[test]
    fn a_version_is_what_its_archive_and_newest_test_run_are() {
        use crate::resources::{
            ConfigurationVersionSpec, ConfigurationVersionStatus, TestRunSpec, TestRunStatus,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let cv = |status: &str, error: Option<&str>| {
            let mut c = ConfigurationVersion::new("cv", ConfigurationVersionSpec::default());
            c.status = Some(ConfigurationVersionStatus {
                status: Some(status.into()),
                error_message: error.map(str::to_owned),
                ..Default::default()
            });
            c
        };
        let run = |id: &str, secs: i64, status: &str, tests: Option<&str>| {
            let mut r = TestRun::new(id, TestRunSpec::default());
            r.metadata.labels =
                Some([(crate::constants::LABEL_ID.to_owned(), id.to_owned())].into());
            r.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(secs).unwrap()));
            r.status = Some(TestRunStatus {
                status: Some(status.into()),
                test_status: tests.map(str::to_owned),
                ..Default::default()
            });
            r
        };
        let none = version_facts(None, []);
        assert_eq!((none.state, none.tests), ("pending", None));
        let bad = version_facts(Some(&cv("errored", Some("not a tar.gz"))), []);
        assert_eq!(
            (bad.state, bad.error.as_deref()),
            ("reg_ingress_failed", Some("not a tar.gz"))
        );
        let runs = [
            run("trun-old", 1, "finished", Some("fail")),
            run("trun-new", 2, "finished", Some("pass")),
        ];
        let f = version_facts(Some(&cv("uploaded", None)), runs.iter());
        assert_eq!(
            (f.state, f.test_run.as_deref(), f.tests),
            ("ok", Some("trun-new"), Some("pass"))
        );
        assert_eq!(test_status(&run("t", 1, "running", None)), "pending");
        assert_eq!(test_status(&run("t", 1, "canceled", None)), "error");
    }

    #[test]
    fn the_gate_holds_back_what_did_not_pass() {
        assert!(installable("ok", None, false));
        assert!(installable("ok", Some("fail"), false));
        assert!(!installable("pending", None, false));
        assert!(!installable("reg_ingress_failed", None, false));
        assert!(installable("ok", Some("pass"), true));
        for t in [None, Some("pending"), Some("fail"), Some("error")] {
            assert!(!installable("ok", t, true), "{t:?}");
        }
    }
}
