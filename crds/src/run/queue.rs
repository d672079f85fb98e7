//! A workspace's queue of runs: which run may start, which one is the workspace's current
//! run, what a pending run says it waits for, and force-execute.

use std::fmt;

use super::RunState;

/// The run statuses that hold a concurrency slot (a Pod runs the engine). Runs and test
/// runs ([`crate::testrun::HOLDING_SLOT`]) count against the same limits.
pub const HOLDING_SLOT: [&str; 2] = [RunState::Planning.as_str(), RunState::Applying.as_str()];

/// The runs of one workspace that wait or hold it, as the queue needs them: apply runs
/// (not plan-only) in creation order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedRun<'a> {
    pub name: &'a str,
    /// Creation time, RFC 3339 (orders the queue; the name breaks ties).
    pub created: &'a str,
    pub state: RunState,
    pub plan_only: bool,
}

/// Whether the pending run `name` may start now: plan-only runs always; an apply run when
/// no other apply run of the workspace holds it and none created before it is waiting,
/// and the workspace is not locked by anybody but this run.
pub fn may_start(
    name: &str,
    runs: &[QueuedRun<'_>],
    lock: Option<&crate::lock::LockHolder>,
    run_id: &str,
) -> Result<(), Wait> {
    let me = runs.iter().find(|r| r.name == name);
    if me.is_some_and(|r| r.plan_only) {
        return Ok(());
    }
    let Some(me) = me else {
        return Err(Wait::Queue);
    };
    let applies = runs.iter().filter(|r| !r.plan_only && r.name != name);
    for r in applies {
        if r.state.holds_workspace() {
            return Err(Wait::Active(r.name.to_owned()));
        }
        if r.state == RunState::Pending && (r.created, r.name) < (me.created, me.name) {
            return Err(Wait::Queue);
        }
    }
    match lock {
        Some(crate::lock::LockHolder::Run(id)) if id == run_id => Ok(()),
        Some(holder) => Err(Wait::Locked(holder.annotation())),
        None => Ok(()),
    }
}

/// Which of a workspace's apply runs is its `current-run`, as in TFE, where it is the
/// run that holds the workspace: the run between its turn and its end; else the first
/// pending run (the next to take the workspace; the CLI prints "Waiting for the manually
/// locked workspace to be unlocked" exactly when a locked workspace's current run is
/// pending, so a run waiting only for a person's lock must be current, and one waiting
/// behind another run must not); else the newest run. `runs` are the workspace's apply
/// runs (not plan-only) in queue order, oldest first; the answer is an index into them.
pub fn current_run(runs: &[RunState]) -> Option<usize> {
    runs.iter()
        .rposition(|s| s.holds_workspace())
        .or_else(|| runs.iter().position(|s| *s == RunState::Pending))
        .or_else(|| runs.len().checked_sub(1))
}

/// What pending run `me` waits for, in words people read (its `status.message`, which
/// the run page and the API's `status-message` show): the run that holds the workspace
/// by its ID and state, how many runs are ahead of it, or who holds the lock and why.
/// `wait` is [`may_start`]'s answer for the same `runs`; `id_of` gives a run's ID from
/// its object name.
pub fn wait_message(
    wait: &Wait,
    me: &str,
    runs: &[QueuedRun<'_>],
    id_of: impl Fn(&str) -> String,
    lock_reason: Option<&str>,
) -> String {
    let mine = runs.iter().find(|r| r.name == me);
    let ahead = runs
        .iter()
        .filter(|r| !r.plan_only && r.name != me)
        .filter(|r| {
            r.state.holds_workspace()
                || (r.state == RunState::Pending
                    && mine.is_some_and(|m| (r.created, r.name) < (m.created, m.name)))
        })
        .count();
    let more = |n: usize| match n {
        0 | 1 => String::new(),
        n => format!("; {n} runs are ahead of this one"),
    };
    match wait {
        Wait::Active(name) => {
            let state = runs
                .iter()
                .find(|r| r.name == name.as_str())
                .map(|r| r.state.as_str())
                .unwrap_or("active");
            format!(
                "waiting for run {} ({state}) to finish{}",
                id_of(name),
                more(ahead)
            )
        }
        Wait::Queue if ahead == 0 => "waiting for its turn".to_owned(),
        Wait::Queue if ahead == 1 => "waiting for 1 earlier run of the workspace".to_owned(),
        Wait::Queue => format!("waiting for {ahead} earlier runs of the workspace"),
        Wait::Locked(holder) => {
            let holder = crate::lock::LockHolder::parse(holder);
            let reason = lock_reason
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            format!("waiting for the workspace to be unlocked (locked by {holder}{reason})")
        }
    }
}

/// Why a comment cannot be added to a run that has `existing` comments: a blank body, a
/// body over [`MAX_COMMENT_BYTES`](crate::constants::MAX_COMMENT_BYTES), or a run that
/// holds [`MAX_RUN_COMMENTS`](crate::constants::MAX_RUN_COMMENTS) already (an action's
/// comment, `with_action`, may go a few beyond it).
pub fn check_comment(body: &str, existing: usize, with_action: bool) -> Result<(), String> {
    use crate::constants::{ACTION_COMMENT_MARGIN, MAX_COMMENT_BYTES, MAX_RUN_COMMENTS};
    let most = if with_action {
        MAX_RUN_COMMENTS + ACTION_COMMENT_MARGIN
    } else {
        MAX_RUN_COMMENTS
    };
    if body.trim().is_empty() {
        return Err("body can't be blank".to_owned());
    }
    if body.len() > MAX_COMMENT_BYTES {
        return Err(format!(
            "body is too long (at most {MAX_COMMENT_BYTES} bytes)"
        ));
    }
    if existing >= most {
        return Err(format!(
            "the run has {existing} comments already, the most one run holds"
        ));
    }
    Ok(())
}

/// Why `POST /runs/:id/actions/force-execute` is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForceExecuteRefusal {
    /// Only a pending run can be forced.
    NotPending(RunState),
    /// Nothing is ahead of it: it starts on its own.
    NothingAhead,
    /// A run ahead of it cannot be discarded (it is planning, applying, …).
    Undiscardable { name: String, state: RunState },
    /// The workspace is locked by someone other than a run.
    Locked(String),
}

impl fmt::Display for ForceExecuteRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForceExecuteRefusal::NotPending(s) => write!(
                f,
                "transition not allowed: the run is {s}; only a pending run can be force-executed"
            ),
            ForceExecuteRefusal::NothingAhead => f.write_str(
                "transition not allowed: no run is ahead of this one, it starts on its own",
            ),
            ForceExecuteRefusal::Undiscardable { name, state } => write!(
                f,
                "transition not allowed: run {name} ahead of this one is {state} and cannot be discarded; cancel it instead"
            ),
            ForceExecuteRefusal::Locked(h) => write!(
                f,
                "transition not allowed: the workspace is locked by {h}; unlock it instead"
            ),
        }
    }
}

/// The runs a force-execute of pending run `name` discards so that it goes next (TFE's
/// "run this plan now"): every apply run of the workspace that holds it or waits before
/// it. Refused unless the run is pending, something is ahead of it, each run ahead can
/// be discarded (pending, planned or saved), and nobody but a run locks the workspace.
pub fn force_execute<'a>(
    name: &str,
    runs: &'a [QueuedRun<'a>],
    lock: Option<&crate::lock::LockHolder>,
) -> Result<Vec<&'a str>, ForceExecuteRefusal> {
    let me = runs
        .iter()
        .find(|r| r.name == name)
        .ok_or(ForceExecuteRefusal::NothingAhead)?;
    if me.state != RunState::Pending {
        return Err(ForceExecuteRefusal::NotPending(me.state));
    }
    if let Some(holder @ (crate::lock::LockHolder::User(_) | crate::lock::LockHolder::Team(_))) =
        lock
    {
        return Err(ForceExecuteRefusal::Locked(holder.annotation()));
    }
    if me.plan_only {
        return Err(ForceExecuteRefusal::NothingAhead);
    }
    let mut ahead = Vec::new();
    for r in runs.iter().filter(|r| !r.plan_only && r.name != name) {
        let before = r.state == RunState::Pending && (r.created, r.name) < (me.created, me.name);
        if !(r.state.holds_workspace() || before) {
            continue;
        }
        if !r.state.is_discardable() {
            return Err(ForceExecuteRefusal::Undiscardable {
                name: r.name.to_owned(),
                state: r.state,
            });
        }
        ahead.push(r.name);
    }
    if ahead.is_empty() {
        return Err(ForceExecuteRefusal::NothingAhead);
    }
    Ok(ahead)
}

/// Why a pending run waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Another run holds the workspace.
    Active(String),
    /// Runs queued before it go first.
    Queue,
    /// The workspace is locked (by this holder).
    Locked(String),
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Active(r) => write!(f, "waiting for run {r} to finish"),
            Wait::Queue => f.write_str("waiting for earlier runs of the workspace"),
            Wait::Locked(h) => write!(f, "waiting for the workspace to be unlocked ({h})"),
        }
    }
}
