//! Health assessments (docs/health.md): the scheduler that starts them, and what the run
//! controller does with an assessment run beyond a plan-only run's life.
//!
//! An assessment is a Run with `spec.assessment` (plan-only, refresh-only, never
//! locking, never writing state): the run controller gives it a plan Pod like any
//! plan-only run, in which `terrace runner remote` plans with `-refresh-only
//! -detailed-exitcode` and reports what the JSON plan says ([`terrace_crds::assessment`]).
//!
//! - [`scheduler`]: one pass every few seconds over the cached workspaces (a scheduler
//!   waits for time itself, so it ticks; a pass is a walk over two caches, no request),
//!   every second while due workspaces wait for a slot ([`BACKLOG_TICK`]):
//!   each eligible workspace is due at its own time ([`assessment::due_at`], spread by a
//!   hash of its ID), skipped while a run of it is active or an assessment of it is under
//!   way, and at most `--assessment-concurrency` assessments exist at once, the longest
//!   due first.
//! - [`at_limit`]: before its Pod, an assessment waits while assessments hold their own
//!   limit or while runs and test runs leave no slot of `--test-run-concurrency`; runs
//!   never count assessments, so an assessment never delays a run.
//! - [`result`]: when an assessment ends, its result against the workspace's previous one
//!   (the triggers it fires), written with its final status in one write.
//! - [`record`]: once ended, the result becomes the workspace's health
//!   (`status.health`, from which the workspace controller derives the conditions
//!   Drifted and ChecksPassing), with an Event per change of health and the metrics.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use terrace_crds::assessment::{self, AssessmentSummary};
use terrace_crds::constants::{
    ANNOTATION_ASSESSMENT_REQUESTED, ANNOTATION_STATE_HEAD, FIELD_MANAGER_RUNS, LABEL_ID,
};
use terrace_crds::ids::IdKind;
use terrace_crds::run::{PhaseReport, RunState};
use terrace_crds::{ConfigurationVersion, Organization, Run, RunAssessment, RunSpec, Workspace};

use super::{RunContext, state_of};
use crate::Error;
use crate::catalog::typed;
use crate::events::publish_event;

/// The source of an assessment run.
pub const SOURCE: &str = "terrace-assessment";

/// Why an assessment's Pod may not start now (None: it may): see the module docs.
pub fn at_limit(ctx: &RunContext) -> Option<String> {
    let all = ctx.runs.state();
    let assessing = all
        .iter()
        .filter(|r| r.spec.assessment && state_of(r).is_running())
        .count();
    let (runs, tests, _) = super::slot_holders(ctx, &all);
    let runs = runs.len();
    let limit = ctx.base.settings.assessment_concurrency as usize;
    let global = ctx.base.settings.test_run_concurrency as usize;
    (!assessment::may_start(assessing, limit.max(1), runs + tests, global)).then(|| {
        format!(
            "waiting for a slot: {assessing} assessments (their limit is {limit}) and {} runs and test runs are running (the limit is {global})",
            runs + tests
        )
    })
}

/// The result of assessment run `run` ending as `to`, against workspace `ws`'s previous
/// one: what its report found (a failed one: `message`), and the notification triggers
/// it fires. None for an end that says nothing of health (canceled).
pub fn result(
    run: &Run,
    ws: &Workspace,
    to: RunState,
    message: Option<&str>,
    report: Option<&PhaseReport>,
) -> Option<RunAssessment> {
    let summary = match (to, report.and_then(|r| r.assessment.clone())) {
        (RunState::PlannedAndFinished, Some(s)) => s,
        (RunState::PlannedAndFinished | RunState::Errored, _) => {
            AssessmentSummary::failed(message.unwrap_or("the assessment ended without a result"))
        }
        _ => return None,
    };
    let health = ws.status.as_ref().and_then(|s| s.health.as_deref());
    let prior = health
        .filter(|h| h.result_id.is_some() && h.run.as_deref() != Some(&run.name_any()))
        .map(|h| (h.result_id.clone(), h.summary.clone()));
    let triggers = assessment::triggers(prior.as_ref().map(|(_, s)| s), &summary);
    Some(RunAssessment {
        summary,
        triggers,
        prior_result_id: prior.as_ref().and_then(|(id, _)| id.clone()),
        prior: prior.map(|(_, s)| s),
    })
}

/// Makes the result of ended assessment run `run` its workspace's health, unless the
/// workspace shows it (or a later one) already: `status.health` (a merge patch under the
/// run controller's field manager), an Event per change of health, the metrics.
pub async fn record(ctx: &RunContext, run: &Run) -> Result<(), Error> {
    let Some(result) = run.status.as_ref().and_then(|s| s.assessment.as_deref()) else {
        return Ok(());
    };
    let ns = run.namespace().unwrap_or_default();
    let api: Api<Workspace> = Api::namespaced(ctx.base.client.clone(), &ns);
    let Some(ws) = api.get_opt(&run.spec.workspace).await? else {
        return Ok(());
    };
    let started = run
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| terrace_crds::common::timestamp(&t.0));
    let health = ws.status.as_ref().and_then(|s| s.health.as_deref());
    if health.is_some_and(|h| h.run.as_deref() == Some(&run.name_any()) || h.started_at > started) {
        return Ok(());
    }
    let Some(run_id) = run.labels().get(LABEL_ID) else {
        return Ok(());
    };
    let st = run.status.clone().unwrap_or_default();
    let assessed_at = st
        .plan
        .finished_at
        .clone()
        .or_else(|| Some(terrace_crds::common::timestamp(&Timestamp::now())));
    let s = &result.summary;
    let patch = json!({"status": {"health": {
        "resultId": assessment::result_id(run_id),
        "run": run.name_any(),
        "startedAt": started,
        "assessedAt": assessed_at,
        "state": s.state(),
        "summary": s,
    }}});
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER_RUNS.to_owned()),
        ..PatchParams::default()
    };
    api.patch_status(&ws.name_any(), &pp, &Patch::Merge(&patch))
        .await?;
    let regarding = ws.object_ref(&());
    for e in assessment::changes(result.prior.as_ref(), s) {
        let kind = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish_event(
            &ctx.recorder,
            &regarding,
            kind,
            e.reason,
            "Assess",
            e.message,
        )
        .await;
    }
    let outcome = match (s.succeeded, s.drifted, s.checks_failing()) {
        (false, _, _) => "failed",
        (true, true, _) => "drifted",
        (true, false, true) => "check_failure",
        (true, false, false) => "healthy",
    };
    let took = run
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|c| {
            let end: Timestamp = assessed_at.as_deref()?.parse().ok()?;
            Duration::try_from(end.duration_since(c.0)).ok()
        })
        .unwrap_or_default();
    crate::metrics::assessment_finished(outcome, took);
    Ok(())
}

/// How often the scheduler looks for due workspaces: a twentieth of the interval, between
/// one and ten seconds.
pub fn tick(interval: Duration) -> Duration {
    (interval / 20).clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// How soon the next pass comes while due workspaces wait for a slot: a slot frees as
/// soon as an assessment ends, and a backlog must not wait a whole tick for each round
/// of `--assessment-concurrency` (it capped assessments at that many per tick).
pub const BACKLOG_TICK: Duration = Duration::from_secs(1);

/// Starts due assessments until the future is dropped (with the run controller).
pub async fn scheduler(ctx: Arc<RunContext>) {
    let interval = ctx.base.settings.assessment_interval;
    let mut first_seen: HashMap<String, Timestamp> = HashMap::new();
    let mut memo = Memo::default();
    let mut wait = tick(interval);
    loop {
        tokio::time::sleep(wait).await;
        wait = match pass(&ctx, &mut first_seen, &mut memo).await {
            Ok(Pass::Backlog) => BACKLOG_TICK.min(tick(interval)),
            Ok(Pass::Done) => tick(interval),
            Err(e) => {
                e.log("assessment scheduler", "");
                tick(interval)
            }
        };
    }
}

/// What passes keep for the next one, so a pass over 10,000 workspaces every second
/// (a backlog) does not convert every cached configuration version and project again.
#[derive(Default)]
struct Memo {
    /// Per namespace: a fingerprint of its configuration versions (names and resource
    /// versions) and the current configuration of each workspace they gave.
    configs: HashMap<String, (u64, Arc<HashMap<String, String>>)>,
}

impl Memo {
    /// The current configuration of each workspace of namespace `ns` (see
    /// [`current_configurations`]), computed again only when its versions changed.
    fn configs(&mut self, ctx: &RunContext, ns: &str) -> Arc<HashMap<String, String>> {
        use std::hash::{Hash, Hasher};
        let versions = ctx.catalog.in_namespace(IdKind::ConfigurationVersion, ns);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut keys: Vec<(&str, &str)> = versions
            .iter()
            .map(|v| {
                (
                    v.metadata.name.as_deref().unwrap_or_default(),
                    v.metadata.resource_version.as_deref().unwrap_or_default(),
                )
            })
            .collect();
        keys.sort_unstable();
        keys.hash(&mut h);
        let print = h.finish();
        if let Some((p, m)) = self.configs.get(ns)
            && *p == print
        {
            return m.clone();
        }
        let m = Arc::new(current_configurations(versions));
        self.configs.insert(ns.to_owned(), (print, m.clone()));
        m
    }
}

/// What a pass left behind.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// Every due workspace got its assessment.
    Done,
    /// Due workspaces wait for a slot.
    Backlog,
}

/// A workspace object of a namespace.
type WsKey = (String, String);

/// What the runs of each workspace say for the scheduler.
#[derive(Default)]
struct RunFacts {
    /// Workspaces with a run that is not final.
    busy: HashSet<WsKey>,
    /// Workspaces with an assessment that is not final.
    assessing: HashSet<WsKey>,
    /// Assessments not final, in all.
    in_flight: usize,
    /// When each workspace's newest assessment was created.
    last: HashMap<WsKey, Timestamp>,
}

fn run_facts(runs: &[Arc<Run>]) -> RunFacts {
    let mut f = RunFacts::default();
    for r in runs {
        let key = (r.namespace().unwrap_or_default(), r.spec.workspace.clone());
        let open = !state_of(r).is_final();
        if r.spec.assessment {
            if open {
                f.in_flight += 1;
                f.assessing.insert(key.clone());
            }
            if let Some(t) = r.metadata.creation_timestamp.as_ref() {
                let e = f.last.entry(key).or_insert(t.0);
                *e = (*e).max(t.0);
            }
        } else if open {
            f.busy.insert(key);
        }
    }
    f
}

/// One pass of the scheduler (see the module docs).
async fn pass(
    ctx: &RunContext,
    first_seen: &mut HashMap<String, Timestamp>,
    memo: &mut Memo,
) -> Result<Pass, Error> {
    crate::identity::synced(&ctx.workspaces, "workspace").await?;
    crate::identity::synced(&ctx.runs, "run").await?;
    ctx.catalog.synced(IdKind::ConfigurationVersion).await?;
    ctx.catalog.synced(IdKind::Project).await?;
    let now = Timestamp::now();
    let interval = SignedDuration::try_from(ctx.base.settings.assessment_interval)
        .unwrap_or(SignedDuration::from_hours(24));
    let facts = run_facts(&ctx.runs.state());
    let mut orgs: HashMap<String, Option<Arc<Organization>>> = HashMap::new();
    let mut configs: HashMap<String, Arc<HashMap<String, String>>> = HashMap::new();
    // Projects converted once per pass (every workspace of a project asks for it).
    let mut projects: HashMap<(String, String), Option<Arc<terrace_crds::Project>>> =
        HashMap::new();
    let mut due: Vec<(Timestamp, Arc<Workspace>, String)> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let (mut drifted, mut failing) = (0, 0);
    for ws in ctx.workspaces.state() {
        let ns = ws.namespace().unwrap_or_default();
        let health = ws.status.as_ref().and_then(|s| s.health.as_deref());
        if let Some(h) = health.filter(|h| h.result_id.is_some()) {
            drifted += usize::from(h.summary.drifted);
            failing += usize::from(h.summary.checks_failing());
        }
        let (Some(id), Some(uid)) = (ws.labels().get(LABEL_ID), ws.uid()) else {
            continue;
        };
        if ws.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let org = match orgs.get(&ns) {
            Some(o) => o.clone(),
            None => {
                let o = ctx.orgs.owner(&ns).await?;
                orgs.insert(ns.clone(), o.clone());
                o
            }
        };
        let Some(org) = org else { continue };
        // Most workspaces do not ask for assessments: they cost this check and nothing
        // more (the pass walks every workspace every few seconds).
        if !(ws.spec.assessments_enabled || org.spec.settings.assessments_enforced) {
            continue;
        }
        let cv = configs
            .entry(ns.clone())
            .or_insert_with(|| memo.configs(ctx, &ns))
            .get(&ws.name_any())
            .cloned();
        let eligible = assessment::eligibility(
            ws.spec.assessments_enabled,
            org.spec.settings.assessments_enforced,
            &execution_mode(ctx, &mut projects, &ns, &ws, &org),
            cv.is_some(),
            ws.annotations().contains_key(ANNOTATION_STATE_HEAD)
                || ws.status.as_ref().is_some_and(|s| s.resource_count > 0),
        );
        let Some(cv) = cv.filter(|_| eligible.is_ok()) else {
            continue;
        };
        seen.insert(uid.clone());
        let first = *first_seen.entry(uid).or_insert(now);
        let key = (ns, ws.name_any());
        let last = facts.last.get(&key).copied().or_else(|| {
            health
                .and_then(|h| h.started_at.as_deref())
                .and_then(|t| t.parse().ok())
        });
        let requested = ws
            .annotations()
            .get(ANNOTATION_ASSESSMENT_REQUESTED)
            .and_then(|t| t.parse::<Timestamp>().ok());
        let at = assessment::due_at(id, interval, last, first, requested);
        if at <= now && !facts.busy.contains(&key) && !facts.assessing.contains(&key) {
            due.push((at, ws.clone(), cv));
        }
    }
    first_seen.retain(|uid, _| seen.contains(uid));
    // Namespaces with no assessed workspace left are forgotten.
    memo.configs.retain(|ns, _| configs.contains_key(ns));
    crate::metrics::workspaces_unhealthy(drifted, failing);
    let free = (ctx.base.settings.assessment_concurrency as usize)
        .max(1)
        .saturating_sub(facts.in_flight);
    due.sort_by_key(|(at, _, _)| *at);
    let left = if due.len() > free {
        Pass::Backlog
    } else {
        Pass::Done
    };
    for (_, ws, cv) in due.into_iter().take(free) {
        start(ctx, &ws, &cv).await?;
    }
    Ok(left)
}

/// The effective execution mode of `ws`: its own unless it inherits (its project's
/// default when the project overrides it, else the organization's).
fn execution_mode(
    ctx: &RunContext,
    projects: &mut HashMap<(String, String), Option<Arc<terrace_crds::Project>>>,
    ns: &str,
    ws: &Workspace,
    org: &Organization,
) -> String {
    let inherits = ws
        .spec
        .setting_overwrites
        .as_ref()
        .and_then(|o| o.execution_mode)
        == Some(false);
    let own = match (&ws.spec.execution_mode, ws.spec.operations) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(true)) => Some("remote".to_owned()),
        (None, Some(false)) => Some("local".to_owned()),
        (None, None) => None,
    };
    if let Some(m) = own.filter(|_| !inherits) {
        return m;
    }
    let project = super::inputs::project_of(&ctx.catalog, ns, ws).and_then(|p| {
        projects
            .entry((ns.to_owned(), p.name_any()))
            .or_insert_with(|| typed::<terrace_crds::Project>(&p).map(Arc::new))
            .clone()
    });
    let so = project
        .as_ref()
        .and_then(|p| p.spec.setting_overwrites.clone())
        .unwrap_or_default();
    match project.and_then(|p| p.spec.default_execution_mode.clone()) {
        Some(m) if so.default_execution_mode == Some(true) => m,
        _ => org.spec.settings.default_execution_mode.clone(),
    }
}

/// The current configuration version of each workspace of a namespace for an
/// assessment (by workspace object name), from its cached `versions` in one walk: its
/// newest uploaded, usable version that is neither provisional nor speculative (a
/// speculative plan's upload is no configuration of the workspace).
fn current_configurations(versions: Vec<Arc<kube::api::DynamicObject>>) -> HashMap<String, String> {
    type Key = (
        Option<String>,
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    );
    let mut newest: HashMap<String, (Key, String)> = HashMap::new();
    let versions = versions
        .into_iter()
        .filter_map(|o| typed::<ConfigurationVersion>(&o))
        .filter(|c| c.usable() && !c.spec.provisional && !c.spec.speculative);
    for c in versions {
        let key: Key = (
            c.status.as_ref().and_then(|s| s.uploaded_at.clone()),
            c.metadata.creation_timestamp.clone(),
        );
        let Some(ws) = c.spec.workspace.clone() else {
            continue;
        };
        match newest.get(&ws) {
            Some((k, _)) if *k > key => {}
            _ => {
                newest.insert(ws, (key, c.name_any()));
            }
        }
    }
    newest.into_iter().map(|(ws, (_, cv))| (ws, cv)).collect()
}

/// Creates the assessment run of `ws` on configuration version `cv`.
async fn start(ctx: &RunContext, ws: &Workspace, cv: &str) -> Result<(), Error> {
    let ns = ws.namespace().unwrap_or_default();
    let id = terrace_crds::ids::new_id(IdKind::Run);
    let run = Run {
        metadata: super::new_run_meta(ws, &id, &[]),
        spec: RunSpec {
            workspace: ws.name_any(),
            configuration_version: cv.to_owned(),
            refresh: true,
            refresh_only: true,
            plan_only: true,
            assessment: true,
            message: "Health assessment".to_owned(),
            source: SOURCE.to_owned(),
            ..RunSpec::default()
        },
        status: None,
    };
    let runs: Api<Run> = Api::namespaced(ctx.base.client.clone(), &ns);
    match runs.create(&PostParams::default(), &run).await {
        Ok(_) => {
            tracing::info!(workspace = %ws.spec.name, namespace = %ns, assessment = %id, "health assessment started");
            Ok(())
        }
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 409 | 422) => {
            tracing::warn!(workspace = %ws.spec.name, namespace = %ns, error = %s.message, "a health assessment could not be created");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, ws: &str, assessment: bool, status: &str, created: &str) -> Arc<Run> {
        let mut r = Run::new(
            name,
            RunSpec {
                workspace: ws.into(),
                assessment,
                plan_only: assessment,
                ..RunSpec::default()
            },
        );
        r.metadata.namespace = Some("acme".into());
        r.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            created.parse().unwrap(),
        ));
        r.status = Some(terrace_crds::RunStatus {
            status: Some(status.into()),
            ..Default::default()
        });
        Arc::new(r)
    }

    #[test]
    fn runs_make_workspaces_busy_and_assessments_count_apart() {
        let f = run_facts(&[
            run("a", "web", false, "planning", "2026-01-01T00:00:00Z"),
            run(
                "b",
                "web",
                true,
                "planned_and_finished",
                "2026-01-01T01:00:00Z",
            ),
            run("c", "db", true, "planning", "2026-01-01T02:00:00Z"),
            run("d", "db", true, "errored", "2026-01-01T00:30:00Z"),
            run("e", "cache", false, "applied", "2026-01-01T00:00:00Z"),
        ]);
        let k = |w: &str| ("acme".to_owned(), w.to_owned());
        assert!(f.busy.contains(&k("web")) && !f.busy.contains(&k("cache")));
        assert!(!f.busy.contains(&k("db")), "an assessment is no run");
        assert!(f.assessing.contains(&k("db")) && !f.assessing.contains(&k("web")));
        assert_eq!(f.in_flight, 1);
        assert_eq!(
            f.last.get(&k("db")).copied(),
            Some("2026-01-01T02:00:00Z".parse().unwrap())
        );
        assert_eq!(
            f.last.get(&k("web")).copied(),
            Some("2026-01-01T01:00:00Z".parse().unwrap())
        );
    }

    #[test]
    fn the_tick_follows_the_interval() {
        assert_eq!(tick(Duration::from_secs(86_400)), Duration::from_secs(10));
        assert_eq!(tick(Duration::from_secs(40)), Duration::from_secs(2));
        assert_eq!(tick(Duration::from_secs(5)), Duration::from_secs(1));
    }

    #[test]
    fn a_result_against_the_previous_one() {
        let r = run("x", "web", true, "planning", "2026-01-01T00:00:00Z");
        let mut ws = Workspace::new("web", terrace_crds::WorkspaceSpec::default());
        let drifted = AssessmentSummary {
            succeeded: true,
            drifted: true,
            resources_drifted: 1,
            ..AssessmentSummary::default()
        };
        let report = PhaseReport {
            ok: true,
            assessment: Some(drifted.clone()),
            ..PhaseReport::default()
        };
        let first = result(&r, &ws, RunState::PlannedAndFinished, None, Some(&report)).unwrap();
        assert_eq!(first.triggers, ["assessment:drifted"]);
        assert_eq!(first.prior, None);
        ws.status = Some(terrace_crds::WorkspaceStatus {
            health: Some(Box::new(terrace_crds::WorkspaceHealth {
                result_id: Some("asmtres-old".into()),
                run: Some("old".into()),
                summary: drifted.clone(),
                ..Default::default()
            })),
            ..Default::default()
        });
        let again = result(&r, &ws, RunState::PlannedAndFinished, None, Some(&report)).unwrap();
        assert!(
            again.triggers.is_empty(),
            "still drifted: no new notification"
        );
        assert_eq!(again.prior_result_id.as_deref(), Some("asmtres-old"));
        let failed = result(&r, &ws, RunState::Errored, Some("the plan failed"), None).unwrap();
        assert!(!failed.summary.succeeded);
        assert_eq!(
            failed.summary.error_message.as_deref(),
            Some("the plan failed")
        );
        assert_eq!(failed.triggers, ["assessment:failed"]);
        assert!(result(&r, &ws, RunState::Canceled, None, None).is_none());
    }
}
