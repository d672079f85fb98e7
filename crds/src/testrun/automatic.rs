//! The automatic test run of an upload (SPEC.md A3: "Uploading triggers automatic creation
//! of a test run"), made to agree with clients that create the run themselves.
//!
//! terraform's CLI and go-tfe upload a configuration version and then create the test run
//! explicitly; go-tfe's own tests expect exactly one run per such sequence. So an upload
//! does not create a run at once: the API server marks the configuration version
//! [`Marker::Due`] (annotation [`ANNOTATION_AUTOMATIC_TEST_RUN`]) and the operator creates
//! the automatic run (`svc-configuration-version`) once a grace period after the upload
//! has passed, unless an explicit run claimed the configuration version first.
//!
//! Both claims move the marker away from `due` with a resourceVersion-preconditioned
//! write, so of an explicit create and the operator exactly one wins: the explicit run
//! ([`Marker::Superseded`]) or the operator ([`Marker::Claimed`], then the run under the
//! deterministic name [`run_name`], then [`Marker::Created`]). A crashed operator finds
//! `claimed` again and creates the same object (409 AlreadyExists is success), so a retry
//! never makes a second automatic run and a claim never ends without one. An explicit run
//! created after the grace period is a run of its own, beside the automatic one.
//!
//! [`decide`] is the operator's step, a pure function of what it observed.

use std::fmt;
use std::time::Duration;

use crate::constants::DEFAULT_TEST_DIRECTORY;
pub use crate::constants::{ANNOTATION_AUTOMATIC_TEST_RUN, DEFAULT_AUTO_TEST_RUN_DELAY};
use crate::resources::{ConfigurationVersionState, TestRunSpec};

use super::TestSource;

/// The value of [`ANNOTATION_AUTOMATIC_TEST_RUN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Marker {
    /// The upload was accepted: an automatic run follows after the grace period unless
    /// an explicit run claims the configuration version first.
    Due,
    /// An explicit run claimed the configuration version in time: no automatic run.
    Superseded,
    /// The operator claimed it and creates the automatic run (named [`run_name`]).
    Claimed,
    /// The automatic run exists (or existed).
    Created,
}

impl Marker {
    pub const ALL: [Marker; 4] = [
        Marker::Due,
        Marker::Superseded,
        Marker::Claimed,
        Marker::Created,
    ];

    /// The annotation's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Marker::Due => "due",
            Marker::Superseded => "superseded",
            Marker::Claimed => "claimed",
            Marker::Created => "created",
        }
    }

    /// The marker of an annotation value; None for no annotation or a value terrace did
    /// not write (then nothing is automatic).
    pub fn parse(value: Option<&str>) -> Option<Self> {
        let v = value?;
        Marker::ALL.into_iter().find(|m| m.as_str() == v)
    }

    /// What an explicit test run (A1) does to the marker before it is created: `due`
    /// becomes `superseded` (the explicit run replaces the automatic one); any other value
    /// stays (None: nothing to write).
    pub fn claimed_by_explicit_run(current: Option<&str>) -> Option<Self> {
        (Marker::parse(current) == Some(Marker::Due)).then_some(Marker::Superseded)
    }
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The object name of the automatic run of configuration version object `cv`:
/// deterministic, so a retried create finds the first one. Cut to the longest object
/// name Kubernetes accepts.
pub fn run_name(cv: &str) -> String {
    const SUFFIX: &str = "-auto";
    const MAX: usize = 253;
    crate::common::name_with_suffix(cv, SUFFIX, MAX)
}

/// The spec of the automatic run of configuration version object `cv` of module object
/// `module`: A1's defaults, source `svc-configuration-version`.
pub fn run_spec(module: &str, cv: &str) -> TestRunSpec {
    TestRunSpec {
        module: module.to_owned(),
        configuration_version: cv.to_owned(),
        verbose: false,
        test_directory: DEFAULT_TEST_DIRECTORY.to_owned(),
        filters: Vec::new(),
        variables: Vec::new(),
        source: TestSource::SvcConfigurationVersion.as_str().to_owned(),
    }
}

/// What the operator observed of a configuration version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed<'a> {
    /// The value of [`ANNOTATION_AUTOMATIC_TEST_RUN`].
    pub marker: Option<&'a str>,
    /// Its upload state (an unknown stored value: None).
    pub state: Option<ConfigurationVersionState>,
    /// `spec.autoQueueRuns`.
    pub auto_queue_runs: bool,
    /// `spec.module` is set (a module's configuration version).
    pub has_module: bool,
    /// Time since `status.uploadedAt` (None: not recorded or unreadable).
    pub since_upload: Option<Duration>,
    /// Test runs naming this configuration version (explicit ones created with kubectl
    /// do not claim it).
    pub runs: usize,
    /// The object [`run_name`] exists.
    pub automatic_run_exists: bool,
}

/// The operator's next step for a configuration version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing automatic about it (now or ever, until it changes).
    Nothing,
    /// Due, inside the grace period: look again after this long.
    WaitFor(Duration),
    /// Due, the grace period is over: claim it (`due` → `claimed`, guarded).
    Claim,
    /// Due, but a run already tests it (created with kubectl): `due` → `superseded`.
    Supersede,
    /// Claimed: create the run [`run_name`] (AlreadyExists is fine), then mark it created.
    Create,
    /// Claimed and the run exists (created before a restart): `claimed` → `created`.
    MarkCreated,
}

/// Decides the operator's step (`delay`: the grace period). Rows, in order:
/// - no marker, an unknown one, `superseded`, `created` → nothing;
/// - `claimed` → create the run, or only mark it created when it exists;
/// - `due` on a configuration version that is not a module's, without auto-queue-runs,
///   or not uploaded (pending: its upload status wakes it; errored or archived: no run
///   can use it) → nothing;
/// - `due` with a run already naming it → supersede;
/// - `due` inside the grace period → wait for the rest of it; after it (or without a
///   readable upload time) → claim.
pub fn decide(o: &Observed<'_>, delay: Duration) -> Step {
    match Marker::parse(o.marker) {
        None | Some(Marker::Superseded | Marker::Created) => Step::Nothing,
        Some(Marker::Claimed) if o.automatic_run_exists => Step::MarkCreated,
        Some(Marker::Claimed) => Step::Create,
        Some(Marker::Due) => {
            if !o.has_module
                || !o.auto_queue_runs
                || o.state != Some(ConfigurationVersionState::Uploaded)
            {
                return Step::Nothing;
            }
            if o.runs > 0 {
                return Step::Supersede;
            }
            match o.since_upload {
                Some(since) if since < delay => Step::WaitFor(delay - since),
                _ => Step::Claim,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfigurationVersionState as S;

    fn due() -> Observed<'static> {
        Observed {
            marker: Some("due"),
            state: Some(S::Uploaded),
            auto_queue_runs: true,
            has_module: true,
            since_upload: Some(Duration::from_secs(10)),
            runs: 0,
            automatic_run_exists: false,
        }
    }

    const DELAY: Duration = Duration::from_secs(5);

    /// The annotation's values round-trip; anything else is no marker.
    #[test]
    fn markers() {
        for m in Marker::ALL {
            assert_eq!(Marker::parse(Some(m.as_str())), Some(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        assert_eq!(Marker::parse(None), None);
        assert_eq!(Marker::parse(Some("Due")), None);
        assert_eq!(
            ANNOTATION_AUTOMATIC_TEST_RUN,
            "terrace.dev/automatic-test-run"
        );
    }

    /// An explicit run supersedes a due automatic run and changes nothing else.
    #[test]
    fn explicit_runs_claim_only_a_due_marker() {
        assert_eq!(
            Marker::claimed_by_explicit_run(Some("due")),
            Some(Marker::Superseded)
        );
        for other in [
            None,
            Some("superseded"),
            Some("claimed"),
            Some("created"),
            Some("x"),
        ] {
            assert_eq!(Marker::claimed_by_explicit_run(other), None, "{other:?}");
        }
    }

    /// Every row of [`decide`], in its order.
    #[test]
    fn decide_rows() {
        let rows: Vec<(&str, Observed<'static>, Step)> = vec![
            ("due, grace period over", due(), Step::Claim),
            (
                "due, inside the grace period",
                Observed {
                    since_upload: Some(Duration::from_secs(2)),
                    ..due()
                },
                Step::WaitFor(Duration::from_secs(3)),
            ),
            (
                "due, exactly at the end of the grace period",
                Observed {
                    since_upload: Some(DELAY),
                    ..due()
                },
                Step::Claim,
            ),
            (
                "due, upload time unknown",
                Observed {
                    since_upload: None,
                    ..due()
                },
                Step::Claim,
            ),
            (
                "due, a run (kubectl) already tests it",
                Observed { runs: 1, ..due() },
                Step::Supersede,
            ),
            (
                "due, still pending",
                Observed {
                    state: Some(S::Pending),
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "due, errored",
                Observed {
                    state: Some(S::Errored),
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "due, archived",
                Observed {
                    state: Some(S::Archived),
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "due, unknown state",
                Observed {
                    state: None,
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "due, no auto-queue-runs",
                Observed {
                    auto_queue_runs: false,
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "due, a workspace's configuration version",
                Observed {
                    has_module: false,
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "no marker (kubectl, or uploaded before automatic runs moved to the operator)",
                Observed {
                    marker: None,
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "unknown marker",
                Observed {
                    marker: Some("maybe"),
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "superseded by an explicit run",
                Observed {
                    marker: Some("superseded"),
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "claimed, run not created yet (or a crash before it was)",
                Observed {
                    marker: Some("claimed"),
                    runs: 3,
                    ..due()
                },
                Step::Create,
            ),
            (
                "claimed, run exists (a crash before it was marked)",
                Observed {
                    marker: Some("claimed"),
                    automatic_run_exists: true,
                    ..due()
                },
                Step::MarkCreated,
            ),
            (
                "created",
                Observed {
                    marker: Some("created"),
                    ..due()
                },
                Step::Nothing,
            ),
            (
                "created, run deleted since: never recreated",
                Observed {
                    marker: Some("created"),
                    automatic_run_exists: false,
                    ..due()
                },
                Step::Nothing,
            ),
        ];
        for (row, o, want) in rows {
            assert_eq!(decide(&o, DELAY), want, "{row}");
        }
    }

    /// The automatic run's name is deterministic and a valid object name; its spec has
    /// A1's defaults and the source SPEC.md gives uploads.
    #[test]
    fn name_and_spec() {
        assert_eq!(run_name("cv-abc"), "cv-abc-auto");
        let long = "a".repeat(260);
        let name = run_name(&long);
        assert_eq!(name.len(), 253);
        assert!(name.ends_with("-auto"));
        let spec = run_spec("vpc", "cv-abc");
        assert_eq!(spec.module, "vpc");
        assert_eq!(spec.configuration_version, "cv-abc");
        assert_eq!(spec.test_directory, "tests");
        assert!(!spec.verbose && spec.filters.is_empty() && spec.variables.is_empty());
        assert_eq!(spec.source, "svc-configuration-version");
    }
}
