//! Admit: whether a pending run without a Pod starts now.
//!
//! [`admission`] decides, purely, from what the caches show: the Organization owning the
//! namespace, the run's ID, a free slot, the configuration version (uploaded, with an
//! ID; errored or archived fails the run), the module. [`admit`] gathers those inputs
//! from the Organization index and the catalog's caches (no API read) and carries the
//! verdict out. The catalog's configuration version and module feeds wake the pending
//! runs naming what changed ([`runs_waiting_for`]), so the rechecks below are only the
//! safety net.
//!
//! A run without a free slot stays `pending` with the Reconciling condition
//! `WaitingForSlot` until the waker of [`super::slots`] starts it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde::Deserialize;
use terrace_crds::constants::{FIELD_MANAGER_OPERATOR, LABEL_ID};
use terrace_crds::ids::IdKind;
use terrace_crds::testrun::{CancelRequest, TestRunState, Transition, transition};
use terrace_crds::{ConfigurationVersionState, TestRun, TestVariable};

use super::context::RunContext;
use super::slots::{SLOT_RECHECK, has_slot, slot_for, wait_message};
use super::status::{fail_pending, next_status, record_event, wait_status, write_status};
use crate::Error;
use crate::catalog::typed;
use crate::conditions::{
    Outcome, REASON_ORGANIZATION_NOT_FOUND, REASON_WAITING_FOR_INPUTS, REASON_WAITING_FOR_SLOT,
};
use crate::testpod::{self, PodInputs};

/// How often a run waiting for an ID (its own, its configuration version's) is looked at
/// again.
pub const ID_RECHECK: Duration = Duration::from_secs(2);
/// How often a run waiting for its inputs is looked at again.
pub const WAIT_RECHECK: Duration = Duration::from_secs(30);

/// An input of a pending run that other kinds provide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// `spec.configurationVersion`.
    ConfigurationVersion,
    /// `spec.module`.
    Module,
}

/// The pending runs (among `runs`) that name `obj` (a ConfigurationVersion or a
/// RegistryModule, as `input` says) in its namespace: its change may let them start.
pub fn runs_waiting_for(
    runs: &[Arc<TestRun>],
    obj: &DynamicObject,
    input: Input,
) -> Vec<ObjectRef<TestRun>> {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    runs.iter()
        .filter(|r| r.metadata.namespace == obj.metadata.namespace)
        .filter(|r| match input {
            Input::ConfigurationVersion => r.spec.configuration_version == name,
            Input::Module => r.spec.module == name,
        })
        .filter(|r| TestRunState::of(r.status.as_ref()) == Ok(TestRunState::Pending))
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// A pending run's configuration version, as the cache shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CvView<'a> {
    /// `status.status` (see [`ConfigurationVersionState::of`]).
    pub state: Option<&'a str>,
    /// `status.errorMessage`.
    pub error_message: Option<&'a str>,
    /// Its ID: the `terrace.dev/id` label, else `status.id`.
    pub id: Option<&'a str>,
}

/// What admission needs to know about a pending run, all read from caches.
#[derive(Clone, Debug)]
pub struct AdmissionInputs<'a> {
    /// The run's namespace.
    pub namespace: &'a str,
    /// Whether an Organization owns the namespace.
    pub organization: bool,
    /// The run's ID (its label), once assigned.
    pub run_id: Option<&'a str>,
    /// Whether a concurrency slot is free for the run (checked again, under the lock,
    /// before it is taken).
    pub slot_free: bool,
    /// The concurrency limits, for the waiting message: global, the organization's.
    pub limits: (u32, Option<i32>),
    /// `spec.configurationVersion` and what the cache has of it (None: nothing).
    pub configuration_version: (&'a str, Option<CvView<'a>>),
    /// `spec.module` and whether the cache has it.
    pub module: (&'a str, bool),
}

/// Why a pending run does not start yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// No Organization owns the namespace (Stalled: only creating one helps).
    Organization { namespace: String },
    /// The catalog has not assigned the run's ID yet.
    RunId,
    /// Every slot it may use is taken.
    Slot { message: String },
    /// The configuration version is missing, pending, or in a state terrace cannot read.
    Upload { configuration_version: String },
    /// The configuration version has no ID yet.
    ConfigurationVersionId { configuration_version: String },
    /// The module does not exist (yet).
    Module { module: String },
}

impl Wait {
    /// The condition the run shows while it waits.
    pub fn outcome(&self) -> Outcome {
        match self {
            Wait::Organization { namespace } => Outcome::stalled(
                REASON_ORGANIZATION_NOT_FOUND,
                format!("no Organization owns namespace {namespace}"),
            ),
            Wait::RunId => {
                Outcome::progressing(REASON_WAITING_FOR_INPUTS, "waiting for the run's ID")
            }
            Wait::Slot { message } => Outcome::progressing(REASON_WAITING_FOR_SLOT, message),
            Wait::Upload {
                configuration_version,
            } => Outcome::progressing(
                REASON_WAITING_FOR_INPUTS,
                format!("waiting for the upload of configuration version {configuration_version}"),
            ),
            Wait::ConfigurationVersionId {
                configuration_version,
            } => Outcome::progressing(
                REASON_WAITING_FOR_INPUTS,
                format!("waiting for the ID of configuration version {configuration_version}"),
            ),
            Wait::Module { module } => Outcome::progressing(
                REASON_WAITING_FOR_INPUTS,
                format!("waiting for registry module {module}"),
            ),
        }
    }

    /// When to look at the run again (the events of what it waits for usually come
    /// first: a configuration version or module changing, a slot freed, the ID label).
    pub fn recheck(&self) -> Duration {
        match self {
            Wait::RunId | Wait::ConfigurationVersionId { .. } => ID_RECHECK,
            Wait::Slot { .. } => SLOT_RECHECK,
            Wait::Organization { .. } | Wait::Upload { .. } | Wait::Module { .. } => WAIT_RECHECK,
        }
    }
}

/// The admission verdict of a pending run without a Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Everything is there: take the slot and create the Pod with this configuration
    /// version ID.
    Admit { configuration_version_id: String },
    /// Not yet: record why and look again.
    Wait(Wait),
    /// It can never start (its configuration version errored or was archived): error
    /// the run with this message.
    Fail(String),
}

/// Decides whether a pending run starts, in this order: the organization, the run's
/// ID, a free slot (without one nothing else is looked at), the configuration version's
/// upload (errored or archived fails the run), its ID, the module. Pure.
pub fn admission(i: &AdmissionInputs<'_>) -> Admission {
    use ConfigurationVersionState as S;
    if !i.organization {
        return Admission::Wait(Wait::Organization {
            namespace: i.namespace.to_owned(),
        });
    }
    if i.run_id.is_none() {
        return Admission::Wait(Wait::RunId);
    }
    if !i.slot_free {
        return Admission::Wait(Wait::Slot {
            message: wait_message(i.limits.0, i.limits.1),
        });
    }
    let (cv_name, cv) = &i.configuration_version;
    let upload = || {
        Admission::Wait(Wait::Upload {
            configuration_version: (*cv_name).to_owned(),
        })
    };
    let Some(cv) = cv else {
        return upload();
    };
    match S::of(cv.state) {
        Ok(state @ (S::Errored | S::Archived)) => {
            let detail = cv
                .error_message
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            return Admission::Fail(format!(
                "configuration version {cv_name} is {state}{detail}"
            ));
        }
        Ok(S::Uploaded) => {}
        Ok(S::Pending) | Err(_) => return upload(),
    }
    let Some(cv_id) = cv.id else {
        return Admission::Wait(Wait::ConfigurationVersionId {
            configuration_version: (*cv_name).to_owned(),
        });
    };
    let (module, module_found) = i.module;
    if !module_found {
        return Admission::Wait(Wait::Module {
            module: module.to_owned(),
        });
    }
    Admission::Admit {
        configuration_version_id: cv_id.to_owned(),
    }
}

/// Starts a pending run when [`admission`] says so: takes a slot, creates the Secret and
/// the Pod, records `queued`. Otherwise records why it waits, or errors it. Every input
/// comes from a cache: the Organization index and the catalog's configuration versions,
/// modules and test variables.
pub(super) async fn admit(
    run: &TestRun,
    ctx: &RunContext,
    ns: &str,
    pod_name: &str,
    me: ObjectRef<TestRun>,
) -> Result<Action, Error> {
    let org = ctx.orgs.owner(ns).await?;
    let org_limit = org
        .as_ref()
        .and_then(|o| o.spec.settings.test_runs.concurrency);
    let run_id = testpod::run_id(run);
    // Without an organization or an ID the slot is not looked at; without a free slot
    // nothing else is (checked again below, under the lock, before the slot is taken).
    let slot_free = org.is_some() && run_id.is_some() && has_slot(ctx, ns, &me, org_limit).await;
    let catalog = &ctx.catalog;
    for kind in [
        IdKind::ConfigurationVersion,
        IdKind::RegistryModule,
        IdKind::TestVariable,
    ] {
        catalog.synced(kind).await?;
    }
    let cv_name = run.spec.configuration_version.as_str();
    let cv = catalog.get(IdKind::ConfigurationVersion, ns, cv_name);
    let cv_status = cv.as_ref().map(|c| StoredCv::of(c));
    let inputs = AdmissionInputs {
        namespace: ns,
        organization: org.is_some(),
        run_id,
        slot_free,
        limits: (ctx.base.settings.test_run_concurrency, org_limit),
        configuration_version: (
            cv_name,
            cv.as_ref().zip(cv_status.as_ref()).map(|(c, s)| CvView {
                state: s.status.as_deref(),
                error_message: s.error_message.as_deref(),
                id: c
                    .labels()
                    .get(LABEL_ID)
                    .map(String::as_str)
                    .or(s.id.as_deref()),
            }),
        ),
        module: (
            run.spec.module.as_str(),
            catalog
                .get(IdKind::RegistryModule, ns, &run.spec.module)
                .is_some(),
        ),
    };
    let cv_id = match admission(&inputs) {
        Admission::Admit {
            configuration_version_id,
        } => configuration_version_id,
        Admission::Wait(wait) => {
            wait_status(ctx, run, wait.outcome()).await?;
            return Ok(Action::requeue(wait.recheck()));
        }
        Admission::Fail(message) => {
            return fail_pending(ctx, run, &Transition::Errored(message)).await;
        }
    };
    let (Some(org), Some(run_id)) = (org, run_id) else {
        return Err(Error::Invalid("admitted without organization or ID".into()));
    };
    let variables: Vec<TestVariable> = catalog
        .in_namespace(IdKind::TestVariable, ns)
        .iter()
        .filter_map(|v| typed(v))
        .collect();
    let inputs = PodInputs {
        run,
        run_id,
        organization: &org.name_any(),
        configuration_version_id: &cv_id,
        variables: &variables,
        org_settings: &org.spec.settings.test_runs,
        settings: &ctx.base.settings,
    };
    // Admission is serialised only around the count: a run takes its slot (joins
    // `admitted`) under the lock, then creates its Secret and Pod with the lock released,
    // so admissions proceed in parallel and the cache's lag cannot admit too many.
    {
        let mut admitted = ctx.admitted.lock().await;
        if !slot_for(ctx, &mut admitted, ns, &me, org_limit) {
            drop(admitted);
            return wait_for_slot(ctx, run, org_limit).await;
        }
        admitted.insert(me.clone());
    }
    match create_run_objects(ctx, ns, &inputs).await {
        Ok(None) => {}
        Ok(Some(why)) => {
            // Refused for good (Pod Security, admission, an invalid template): the run
            // errors with the cluster's words and gives its slot back.
            ctx.admitted.lock().await.remove(&me);
            let message = format!("the cluster refused the test Pod: {why}");
            return fail_pending(ctx, run, &Transition::Errored(message)).await;
        }
        Err(e) => {
            // Give the slot back: the next attempt takes one again.
            ctx.admitted.lock().await.remove(&me);
            return Err(e);
        }
    }
    let step = transition(
        TestRunState::Pending,
        CancelRequest::None,
        &Transition::PodCreated,
    )
    .map_err(|e| Error::Invalid(e.to_string()))?;
    let status = next_status(
        run.status.as_ref(),
        &step,
        None,
        Some(pod_name.to_owned()),
        run.meta().generation,
        Timestamp::now(),
    );
    write_status(ctx, run, &status).await?;
    record_event(ctx, &run.object_ref(&()), &step, None).await;
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// The status fields of a cached ConfigurationVersion admission reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredCv {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
}

impl StoredCv {
    fn of(cv: &DynamicObject) -> Self {
        cv.data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default()
    }
}

/// Records that a pending run waits for a slot, and looks at it again later (the waker
/// usually comes first).
async fn wait_for_slot(
    ctx: &RunContext,
    run: &TestRun,
    org_limit: Option<i32>,
) -> Result<Action, Error> {
    // A message that does not change with the counts: one status write per wait.
    let wait = Wait::Slot {
        message: wait_message(ctx.base.settings.test_run_concurrency, org_limit),
    };
    wait_status(ctx, run, wait.outcome()).await?;
    Ok(Action::requeue(wait.recheck()))
}

/// Creates a run's token Secret and Pod; either existing already (an earlier attempt, an
/// operator restarted in between) is fine. Answers the cluster's words when it refuses
/// either for good ([`crate::pod_parts::refused_for_good`]).
async fn create_run_objects(
    ctx: &RunContext,
    ns: &str,
    inputs: &PodInputs<'_>,
) -> Result<Option<String>, Error> {
    let client = &ctx.base.client;
    let secret = testpod::build_secret(inputs, &testpod::new_token())?;
    let pod = testpod::build_pod(inputs)?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER_OPERATOR.to_owned()),
        ..Default::default()
    };
    for res in [
        secrets.create(&pp, &secret).await.map(|_| ()),
        pods.create(&pp, &pod).await.map(|_| ()),
    ] {
        match res {
            Ok(()) => {}
            // Created by an earlier attempt (an operator restarted in between).
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(kube::Error::Api(s)) if crate::pod_parts::refused_for_good(s.code) => {
                return Ok(Some(s.message));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use terrace_crds::{TestRunSpec, TestRunStatus};

    fn inputs<'a>() -> AdmissionInputs<'a> {
        AdmissionInputs {
            namespace: "acme",
            organization: true,
            run_id: Some("trun-0123456789abcdef"),
            slot_free: true,
            limits: (50, Some(3)),
            configuration_version: (
                "cv1",
                Some(CvView {
                    state: Some("uploaded"),
                    error_message: None,
                    id: Some("cv-0123456789abcdef"),
                }),
            ),
            module: ("vpc", true),
        }
    }

    fn cv<'a>(
        state: Option<&'a str>,
        error: Option<&'a str>,
        id: Option<&'a str>,
    ) -> Option<CvView<'a>> {
        Some(CvView {
            state,
            error_message: error,
            id,
        })
    }

    fn waiting_reason(a: &Admission) -> Option<(String, Duration)> {
        match a {
            Admission::Wait(w) => Some((w.outcome().reason().to_owned(), w.recheck())),
            _ => None,
        }
    }

    /// Every row of admission, in its order: all inputs there → admit with the
    /// configuration version's ID; each missing input → its wait, condition and recheck;
    /// an errored or archived configuration version → the run errors (SPEC A3).
    #[test]
    fn admission_rows() {
        assert_eq!(
            admission(&inputs()),
            Admission::Admit {
                configuration_version_id: "cv-0123456789abcdef".into()
            }
        );
        let rows: Vec<(&str, AdmissionInputs<'_>, Admission)> = vec![
            (
                "no organization (even without a slot)",
                AdmissionInputs {
                    organization: false,
                    slot_free: false,
                    ..inputs()
                },
                Admission::Wait(Wait::Organization {
                    namespace: "acme".into(),
                }),
            ),
            (
                "no run ID",
                AdmissionInputs {
                    run_id: None,
                    configuration_version: ("cv1", None),
                    ..inputs()
                },
                Admission::Wait(Wait::RunId),
            ),
            (
                "no slot: nothing else is looked at",
                AdmissionInputs {
                    slot_free: false,
                    configuration_version: ("cv1", None),
                    module: ("vpc", false),
                    ..inputs()
                },
                Admission::Wait(Wait::Slot {
                    message:
                        "waiting for a test run slot (at most 50 at once, 3 in this organization)"
                            .into(),
                }),
            ),
            (
                "configuration version missing",
                AdmissionInputs {
                    configuration_version: ("cv1", None),
                    ..inputs()
                },
                Admission::Wait(Wait::Upload {
                    configuration_version: "cv1".into(),
                }),
            ),
            (
                "configuration version without a status yet",
                AdmissionInputs {
                    configuration_version: ("cv1", cv(None, None, Some("cv-1"))),
                    ..inputs()
                },
                Admission::Wait(Wait::Upload {
                    configuration_version: "cv1".into(),
                }),
            ),
            (
                "configuration version pending",
                AdmissionInputs {
                    configuration_version: ("cv1", cv(Some("pending"), None, Some("cv-1"))),
                    ..inputs()
                },
                Admission::Wait(Wait::Upload {
                    configuration_version: "cv1".into(),
                }),
            ),
            (
                "configuration version in an unknown state",
                AdmissionInputs {
                    configuration_version: ("cv1", cv(Some("fetching"), None, Some("cv-1"))),
                    ..inputs()
                },
                Admission::Wait(Wait::Upload {
                    configuration_version: "cv1".into(),
                }),
            ),
            (
                "configuration version errored",
                AdmissionInputs {
                    configuration_version: (
                        "cv1",
                        cv(Some("errored"), Some("not gzip"), Some("cv-1")),
                    ),
                    ..inputs()
                },
                Admission::Fail("configuration version cv1 is errored: not gzip".into()),
            ),
            (
                "configuration version archived",
                AdmissionInputs {
                    configuration_version: ("cv1", cv(Some("archived"), None, None)),
                    ..inputs()
                },
                Admission::Fail("configuration version cv1 is archived".into()),
            ),
            (
                "configuration version without an ID",
                AdmissionInputs {
                    configuration_version: ("cv1", cv(Some("uploaded"), None, None)),
                    ..inputs()
                },
                Admission::Wait(Wait::ConfigurationVersionId {
                    configuration_version: "cv1".into(),
                }),
            ),
            (
                "module missing",
                AdmissionInputs {
                    module: ("vpc", false),
                    ..inputs()
                },
                Admission::Wait(Wait::Module {
                    module: "vpc".into(),
                }),
            ),
        ];
        for (row, i, want) in rows {
            assert_eq!(admission(&i), want, "{row}");
        }
    }

    /// What each wait shows and when it is looked at again: a missing organization
    /// stalls, everything else is Reconciling; IDs come quickly, slots are woken, uploads
    /// and modules wake the run through their feeds.
    #[test]
    fn waits_say_why_and_when() {
        let cases = [
            (
                Wait::Organization {
                    namespace: "acme".into(),
                },
                REASON_ORGANIZATION_NOT_FOUND,
                WAIT_RECHECK,
                "no Organization owns namespace acme",
            ),
            (
                Wait::RunId,
                REASON_WAITING_FOR_INPUTS,
                ID_RECHECK,
                "waiting for the run's ID",
            ),
            (
                Wait::Slot {
                    message: "m".into(),
                },
                REASON_WAITING_FOR_SLOT,
                SLOT_RECHECK,
                "m",
            ),
            (
                Wait::Upload {
                    configuration_version: "cv1".into(),
                },
                REASON_WAITING_FOR_INPUTS,
                WAIT_RECHECK,
                "waiting for the upload of configuration version cv1",
            ),
            (
                Wait::ConfigurationVersionId {
                    configuration_version: "cv1".into(),
                },
                REASON_WAITING_FOR_INPUTS,
                ID_RECHECK,
                "waiting for the ID of configuration version cv1",
            ),
            (
                Wait::Module {
                    module: "vpc".into(),
                },
                REASON_WAITING_FOR_INPUTS,
                WAIT_RECHECK,
                "waiting for registry module vpc",
            ),
        ];
        for (wait, reason, recheck, message) in cases {
            let o = wait.outcome();
            assert_eq!((o.reason(), o.message()), (reason, message), "{wait:?}");
            assert_eq!(wait.recheck(), recheck, "{wait:?}");
            assert_eq!(
                matches!(o, Outcome::Stalled { .. }),
                matches!(wait, Wait::Organization { .. })
            );
        }
        assert_eq!(
            waiting_reason(&admission(&AdmissionInputs {
                run_id: None,
                ..inputs()
            })),
            Some((REASON_WAITING_FOR_INPUTS.to_owned(), ID_RECHECK))
        );
    }

    fn test_run(name: &str, ns: &str, cv: &str, module: &str, state: Option<&str>) -> Arc<TestRun> {
        let mut r = TestRun::new(
            name,
            TestRunSpec {
                module: module.into(),
                configuration_version: cv.into(),
                ..Default::default()
            },
        );
        r.metadata.namespace = Some(ns.into());
        r.status = state.map(|s| TestRunStatus {
            status: Some(s.into()),
            ..Default::default()
        });
        Arc::new(r)
    }

    /// A configuration version or module changing wakes the pending runs of its namespace
    /// naming it, not runs that started, ended or live elsewhere.
    #[test]
    fn inputs_wake_the_runs_naming_them() {
        let runs = vec![
            test_run("a", "acme", "cv1", "vpc", None),
            test_run("b", "acme", "cv1", "net", Some("pending")),
            test_run("c", "acme", "cv1", "vpc", Some("running")),
            test_run("d", "acme", "cv2", "vpc", Some("pending")),
            test_run("e", "globex", "cv1", "vpc", None),
        ];
        let obj = |kind_ar: kube::api::ApiResource, name: &str| {
            DynamicObject::new(name, &kind_ar).within("acme")
        };
        let names =
            |refs: Vec<ObjectRef<TestRun>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        let cv_ar = kube::api::ApiResource::erase::<terrace_crds::ConfigurationVersion>(&());
        let mod_ar = kube::api::ApiResource::erase::<terrace_crds::RegistryModule>(&());
        assert_eq!(
            names(runs_waiting_for(
                &runs,
                &obj(cv_ar, "cv1"),
                Input::ConfigurationVersion
            )),
            ["a", "b"]
        );
        assert_eq!(
            names(runs_waiting_for(&runs, &obj(mod_ar, "vpc"), Input::Module)),
            ["a", "d"]
        );
    }
}
