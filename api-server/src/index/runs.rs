//! Runs by workspace ([`super::by_workspace`]): each workspace's runs and its current run,
//! kept in step with the run watch. A workspace's render (its `current-run`), the workspace list's current-run filter
//! and sort, and a workspace's runs list read these instead of going over the
//! organization's runs, so their cost does not grow with the runs of other workspaces.

use std::sync::Arc;

use kube::ResourceExt;
use terrace_crds::Run;
use terrace_crds::run::RunState;

use super::by_workspace::WorkspaceKey;
use super::{Inner, uid};

fn workspace_of(r: &Run) -> WorkspaceKey {
    (r.namespace().unwrap_or_default(), r.spec.workspace.clone())
}

/// The order of a workspace's runs: queue time (milliseconds), then object name.
fn queue_order(r: &Run) -> (String, String) {
    (r.queued_at(), r.name_any())
}

impl Inner {
    pub(super) fn put_run(&mut self, r: Run) {
        let key = uid(&r);
        self.remove_run(&key);
        if r.spec.assessment {
            self.assessments.put(r);
            return;
        }
        let wk = workspace_of(&r);
        self.runs_by_workspace.add(wk.clone(), key);
        self.runs.put(r);
        self.refresh_current_run(&wk);
    }

    pub(super) fn remove_run(&mut self, key: &str) {
        self.assessments.remove(key);
        let Some(old) = self.runs.by_uid(key).cloned() else {
            return;
        };
        let wk = workspace_of(&old);
        self.runs_by_workspace.remove(&wk, key);
        self.runs.remove(key);
        self.refresh_current_run(&wk);
    }

    pub(super) fn clear_runs(&mut self) {
        self.runs.clear();
        self.assessments.clear();
        self.runs_by_workspace = Default::default();
    }

    /// Recomputes the current run of workspace `wk` (the one that holds it,
    /// [`terrace_crds::run::current_run`]) and its latest (its newest run that is not
    /// plan-only).
    fn refresh_current_run(&mut self, wk: &WorkspaceKey) {
        let mut applies: Vec<&Arc<Run>> = self
            .runs_of(&wk.0, &wk.1)
            .filter(|r| !r.spec.plan_only)
            .collect();
        applies.sort_by_cached_key(|r| queue_order(r));
        let states: Vec<RunState> = applies
            .iter()
            .map(|r| {
                RunState::of(r.status.as_ref().and_then(|s| s.status.as_deref()))
                    .unwrap_or_default()
            })
            .collect();
        let current = terrace_crds::run::current_run(&states).map(|i| uid(applies[i].as_ref()));
        let latest = applies.last().map(|r| uid(r.as_ref()));
        let latest = latest.filter(|l| current.as_ref() != Some(l));
        self.runs_by_workspace.set_current(wk, current);
        self.runs_by_workspace.set_latest(wk, latest);
    }

    /// The runs of workspace object `ws` of namespace `ns` (any order).
    pub fn runs_of<'a>(&'a self, ns: &str, ws: &str) -> impl Iterator<Item = &'a Arc<Run>> + 'a {
        self.runs_by_workspace
            .uids(ns, ws)
            .filter_map(|u| self.runs.by_uid(u))
    }

    /// The latest run of workspace object `ws` of namespace `ns`: its newest run (by
    /// queue time, then name) that is not plan-only.
    pub fn latest_run(&self, ns: &str, ws: &str) -> Option<&Arc<Run>> {
        self.runs_by_workspace
            .latest(ns, ws)
            .and_then(|u| self.runs.by_uid(u))
    }

    /// The current run of workspace object `ws` of namespace `ns`: the one that holds it,
    /// else the first pending one, else its newest ([`terrace_crds::run::current_run`]).
    pub fn current_run(&self, ns: &str, ws: &str) -> Option<&Arc<Run>> {
        self.runs_by_workspace
            .current(ns, ws)
            .and_then(|u| self.runs.by_uid(u))
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;
    use terrace_crds::{Run, RunSpec};

    use super::Inner;

    fn run(name: &str, ws: &str, plan_only: bool, queued: &str) -> Run {
        with_status(name, ws, plan_only, queued, "applied")
    }

    fn with_status(name: &str, ws: &str, plan_only: bool, queued: &str, st: &str) -> Run {
        let mut r = Run::new(
            name,
            RunSpec {
                workspace: ws.into(),
                plan_only,
                ..Default::default()
            },
        );
        r.metadata = ObjectMeta {
            name: Some(name.into()),
            namespace: Some("org".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        };
        let mut status = terrace_crds::RunStatus {
            status: Some(st.into()),
            ..Default::default()
        };
        status
            .status_timestamps
            .insert(terrace_crds::run::QUEUEABLE_AT.into(), queued.into());
        r.status = Some(status);
        r
    }

    fn current(i: &Inner, ws: &str) -> Option<String> {
        i.current_run("org", ws)
            .map(|r| r.metadata.name.clone().unwrap())
    }

    fn latest(i: &Inner, ws: &str) -> Option<String> {
        i.latest_run("org", ws)
            .map(|r| r.metadata.name.clone().unwrap())
    }

    /// A run waiting for its turn behind a run waiting for confirmation is the latest run,
    /// not the current one (issue 41 §1); canceled, the one ahead gives way to it.
    #[test]
    fn the_current_run_holds_the_workspace_and_the_latest_is_the_newest() {
        let mut i = Inner::default();
        i.put_run(run("r1", "a", false, "2026-01-01T00:00:01.000Z"));
        i.put_run(with_status(
            "r2",
            "a",
            false,
            "2026-01-01T00:00:02.000Z",
            "post_plan_completed",
        ));
        i.put_run(with_status(
            "r3",
            "a",
            false,
            "2026-01-01T00:00:03.000Z",
            "pending",
        ));
        assert_eq!(current(&i, "a").as_deref(), Some("r2"));
        assert_eq!(latest(&i, "a").as_deref(), Some("r3"));
        i.put_run(with_status(
            "r2",
            "a",
            false,
            "2026-01-01T00:00:02.000Z",
            "canceled",
        ));
        assert_eq!(current(&i, "a").as_deref(), Some("r3"));
        assert_eq!(latest(&i, "a").as_deref(), Some("r3"));
        i.put_run(with_status(
            "r3",
            "a",
            false,
            "2026-01-01T00:00:03.000Z",
            "planning",
        ));
        assert_eq!(current(&i, "a").as_deref(), Some("r3"));
        i.remove_run("uid-r3");
        assert_eq!(latest(&i, "a").as_deref(), Some("r2"));
    }

    #[test]
    fn the_current_run_is_the_newest_that_is_not_plan_only_and_follows_every_change() {
        let mut i = Inner::default();
        assert_eq!(current(&i, "a"), None);
        i.put_run(run("r1", "a", false, "2026-01-01T00:00:01.000Z"));
        i.put_run(run("r2", "a", false, "2026-01-01T00:00:02.000Z"));
        i.put_run(run("p3", "a", true, "2026-01-01T00:00:03.000Z"));
        i.put_run(run("r9", "b", false, "2026-01-01T00:00:09.000Z"));
        assert_eq!(current(&i, "a").as_deref(), Some("r2"));
        assert_eq!(current(&i, "b").as_deref(), Some("r9"));
        assert_eq!(i.runs_of("org", "a").count(), 3);
        assert_eq!(i.runs_of("other", "a").count(), 0);
        // A status change that moves a run's queue time moves the current run.
        i.put_run(run("r1", "a", false, "2026-01-01T00:00:05.000Z"));
        assert_eq!(current(&i, "a").as_deref(), Some("r1"));
        assert_eq!(i.runs_of("org", "a").count(), 3);
        i.remove_run("uid-r1");
        assert_eq!(current(&i, "a").as_deref(), Some("r2"));
        i.remove_run("uid-r2");
        assert_eq!(current(&i, "a"), None, "a plan-only run is never current");
        i.remove_run("uid-p3");
        assert_eq!(i.runs_of("org", "a").count(), 0);
        // An assessment is no run: indexed apart, never current, never listed.
        let mut a = run("a1", "a", true, "2026-01-01T00:00:10.000Z");
        a.spec.assessment = true;
        i.put_run(a);
        assert_eq!(i.runs_of("org", "a").count(), 0);
        assert!(i.runs().in_namespace("org").all(|r| !r.spec.assessment));
        assert_eq!(i.assessments().in_namespace("org").count(), 1);
        i.remove_run("uid-a1");
        assert_eq!(i.assessments().in_namespace("org").count(), 0);
        assert!(!i.runs_by_workspace.has(&("org".into(), "a".into())));
        i.clear_runs();
        assert_eq!(current(&i, "b"), None);
        assert_eq!(i.runs().in_namespace("org").count(), 0);
    }
}
