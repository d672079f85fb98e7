//! The private module registry's rules (docs/registry.md): what a version's state is,
//! when it may be installed, and which is the latest.

pub mod doc;

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
        // Before its test run exists (the archive still to come, or its automatic run
        // due), a version's tests are pending; a refused archive is never tested.
        tests: match newest {
            Some(r) => Some(test_status(r)),
            None if state == "reg_ingress_failed" => None,
            None => Some("pending"),
        },
    }
}

/// Why a version in `state` with tests in `tests` is not offered to `terraform init`
/// (None: it is), in words a module's page shows.
pub fn why_not_offered(
    state: &str,
    error: Option<&str>,
    tests: Option<&str>,
    publish_only_tested: bool,
) -> Option<String> {
    match state {
        "ok" => {}
        "reg_ingress_failed" => {
            return Some(format!(
                "its archive was refused: {}",
                error.unwrap_or("the archive could not be read")
            ));
        }
        _ => return Some("its archive is not uploaded yet".to_owned()),
    }
    if !publish_only_tested || tests == Some("pass") {
        return None;
    }
    Some(
        match tests {
            Some("fail") => "its tests failed, and the module publishes only tested versions",
            Some("error") => "its test run errored, and the module publishes only tested versions",
            _ => "its tests have not passed yet, and the module publishes only tested versions",
        }
        .to_owned(),
    )
}

/// Whether a version in `state` with tests in `tests` may be installed: its archive is in
/// (`ok`), and when the module publishes only tested versions, its tests passed.
pub fn installable(state: &str, tests: Option<&str>, publish_only_tested: bool) -> bool {
    state == "ok" && (!publish_only_tested || tests == Some("pass"))
}

/// A deprecation from its reason and link (empty ones are none), or the field that is
/// wrong and why: a reason of at most 1,000 characters, an http or https link of at most
/// 2,048.
pub fn deprecation(
    reason: Option<String>,
    link: Option<String>,
) -> Result<crate::resources::VersionDeprecation, (&'static str, String)> {
    let reason = reason.filter(|r| !r.is_empty());
    if reason.as_ref().is_some_and(|r| r.chars().count() > 1000) {
        return Err((
            "deprecation/reason",
            "reason is too long (at most 1,000 characters)".to_owned(),
        ));
    }
    let link = link.filter(|l| !l.is_empty());
    if let Some(l) = &link {
        if l.len() > 2048 {
            return Err((
                "deprecation/link",
                "link is too long (at most 2,048 characters)".to_owned(),
            ));
        }
        crate::notification::check_url(l).map_err(|e| ("deprecation/link", format!("link {e}")))?;
    }
    Ok(crate::resources::VersionDeprecation { reason, link })
}

/// A registry module an engine's `init` installed from terrace's registry at `host`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// The module call's key (`vpc`, `vpc.subnets`).
    pub key: String,
    /// `ORG/NAME/PROVIDER`.
    pub module: String,
    pub version: String,
}

/// The modules of `host`'s registry in an engine's `.terraform/modules/modules.json`
/// (`{"Modules": [{"Key", "Source", "Version"}]}`), each once.
pub fn installed_from(modules_json: &[u8], host: &str) -> Vec<Installed> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        #[serde(rename = "Modules", default)]
        modules: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "Key", default)]
        key: String,
        #[serde(rename = "Source", default)]
        source: String,
        #[serde(rename = "Version", default)]
        version: String,
    }
    let Ok(m) = serde_json::from_slice::<Manifest>(modules_json) else {
        return Vec::new();
    };
    let mut out: Vec<Installed> = Vec::new();
    for e in m.modules {
        let Some((h, module)) = e.source.split_once('/') else {
            continue;
        };
        let ours = h.eq_ignore_ascii_case(host) && module.split('/').count() == 3;
        if ours
            && !e.version.is_empty()
            && !out
                .iter()
                .any(|i| i.module == module && i.version == e.version)
        {
            out.push(Installed {
                key: e.key,
                module: module.to_owned(),
                version: e.version,
            });
        }
    }
    out
}

/// The warning a run prints for installed module `i` whose version is deprecated (the
/// registry's `deprecation`: `reason`, `link`): its summary and detail.
pub fn deprecation_warning(
    i: &Installed,
    host: &str,
    reason: &str,
    link: &str,
) -> (String, String) {
    let summary = format!(
        "Deprecated module version: {host}/{} {}",
        i.module, i.version
    );
    let mut detail = format!(
        "Module \"{}\" uses version {} of {host}/{}, which its publisher deprecated.",
        i.key, i.version, i.module
    );
    if !reason.is_empty() {
        detail.push_str(&format!(" Reason: {reason}"));
    }
    if !link.is_empty() {
        detail.push_str(&format!(" More: {link}"));
    }
    (summary, detail)
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
    fn the_installed_modules_of_our_registry_are_found_once() {
        let manifest = br#"{"Modules":[
            {"Key":"","Source":"","Dir":"."},
            {"Key":"vpc","Source":"terrace.example/acme/vpc/aws","Version":"1.2.0","Dir":".terraform/modules/vpc"},
            {"Key":"vpc2","Source":"TERRACE.example/acme/vpc/aws","Version":"1.2.0"},
            {"Key":"public","Source":"registry.terraform.io/hashicorp/consul/aws","Version":"0.1.0"},
            {"Key":"local","Source":"./modules/x"},
            {"Key":"old","Source":"terrace.example/acme/vpc/aws","Version":"1.0.0"}
        ]}"#;
        let got = installed_from(manifest, "terrace.example");
        let keys: Vec<(&str, &str)> = got
            .iter()
            .map(|i| (i.key.as_str(), i.version.as_str()))
            .collect();
        assert_eq!(keys, [("vpc", "1.2.0"), ("old", "1.0.0")]);
        assert_eq!(got[0].module, "acme/vpc/aws");
        assert!(installed_from(b"not json", "h").is_empty());
        let (summary, detail) =
            deprecation_warning(&got[0], "terrace.example", "use 2.x", "https://x/y");
        assert!(
            summary.contains("terrace.example/acme/vpc/aws 1.2.0"),
            "{summary}"
        );
        assert!(
            detail.contains("Reason: use 2.x") && detail.contains("More: https://x/y"),
            "{detail}"
        );
    }

    #[test]
    fn a_deprecation_has_a_short_reason_and_a_web_link() {
        let d = deprecation(
            Some("use 2.x".into()),
            Some("https://example.com/up".into()),
        )
        .unwrap();
        assert_eq!(d.reason.as_deref(), Some("use 2.x"));
        assert_eq!(deprecation(Some(String::new()), None).unwrap().reason, None);
        assert_eq!(
            deprecation(None, Some("ftp://x".into())).unwrap_err().0,
            "deprecation/link"
        );
        assert_eq!(
            deprecation(Some("x".repeat(1001)), None).unwrap_err().0,
            "deprecation/reason"
        );
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
        assert_eq!((none.state, none.tests), ("pending", Some("pending")));
        // Uploaded, its test run not made yet: pending, not null (issue 41 §4).
        let due = version_facts(Some(&cv("uploaded", None)), []);
        assert_eq!(
            (due.state, due.tests, due.test_run),
            ("ok", Some("pending"), None)
        );
        let bad = version_facts(Some(&cv("errored", Some("not a tar.gz"))), []);
        assert_eq!(
            (bad.state, bad.error.as_deref(), bad.tests),
            ("reg_ingress_failed", Some("not a tar.gz"), None)
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

    /// A module's page says why a version is not offered (issue 41 §4).
    #[test]
    fn why_a_version_is_not_offered() {
        let gate = "and the module publishes only tested versions";
        for (state, tests, gated, want) in [
            ("ok", Some("pass"), true, None),
            ("ok", Some("fail"), false, None),
            (
                "ok",
                Some("fail"),
                true,
                Some(format!("its tests failed, {gate}")),
            ),
            (
                "ok",
                Some("error"),
                true,
                Some(format!("its test run errored, {gate}")),
            ),
            (
                "ok",
                Some("pending"),
                true,
                Some(format!("its tests have not passed yet, {gate}")),
            ),
            (
                "pending",
                Some("pending"),
                false,
                Some("its archive is not uploaded yet".to_owned()),
            ),
            (
                "reg_ingress_failed",
                None,
                false,
                Some("its archive was refused: main.tf:1: bad".to_owned()),
            ),
        ] {
            assert_eq!(
                why_not_offered(state, Some("main.tf:1: bad"), tests, gated),
                want,
                "{state} {tests:?} {gated}"
            );
            assert_eq!(
                want.is_none(),
                installable(state, tests, gated),
                "the words agree with the gate: {state} {tests:?} {gated}"
            );
        }
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
