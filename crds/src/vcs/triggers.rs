//! Which pushes queue a run in a workspace (TFE's VCS triggers): a push to its branch
//! whose files match its trigger paths, or a tag matching its `tags-regex`.

use super::events::Push;

/// The settings of a workspace its triggers read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Triggers<'a> {
    /// The workspace's branch; None or empty: the repository's default branch.
    pub branch: Option<&'a str>,
    /// `tags-regex`: when set, tags matching it queue runs and branch pushes do not.
    pub tags_regex: Option<&'a str>,
    /// `file-triggers-enabled`: false, every push to the branch queues a run.
    pub file_triggers_enabled: bool,
    /// `working-directory`.
    pub working_directory: Option<&'a str>,
    /// `trigger-prefixes`.
    pub trigger_prefixes: &'a [String],
    /// `trigger-patterns` (globs; they replace the prefixes when given).
    pub trigger_patterns: &'a [String],
}

/// What a push means to a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A run is queued.
    Run,
    /// Not for this workspace: another branch, a tag its regex does not match, a
    /// deleted ref, or no file under its trigger paths changed (why, in words).
    Skip(&'static str),
}

/// The branch a workspace follows: its own, else the repository's default (`default`,
/// when known).
pub fn followed_branch<'a>(own: Option<&'a str>, default: Option<&'a str>) -> Option<&'a str> {
    own.filter(|b| !b.is_empty()).or(default)
}

/// Whether `push` queues a run in a workspace with triggers `t`; `default_branch` is the
/// repository's default branch (the event's, or the server's when the event does not say).
pub fn judge(t: &Triggers<'_>, push: &Push, default_branch: Option<&str>) -> Verdict {
    if push.deleted {
        return Verdict::Skip("the ref was deleted");
    }
    if let Some(re) = t.tags_regex.filter(|r| !r.is_empty()) {
        let Some(tag) = &push.tag else {
            return Verdict::Skip("the workspace runs on tags (tags-regex), not on branch pushes");
        };
        return match regex::Regex::new(re) {
            Ok(r) if r.is_match(tag) => Verdict::Run,
            _ => Verdict::Skip("the tag does not match the workspace's tags-regex"),
        };
    }
    let Some(branch) = &push.branch else {
        return Verdict::Skip("a tag, and the workspace has no tags-regex");
    };
    match followed_branch(t.branch, default_branch) {
        Some(b) if b == branch => {}
        _ => return Verdict::Skip("a push to another branch"),
    }
    if !t.file_triggers_enabled {
        return Verdict::Run;
    }
    match &push.changed_files {
        None => Verdict::Run,
        Some(files) if files.iter().any(|f| watched(t, f)) => Verdict::Run,
        Some(_) => Verdict::Skip("no changed file is under the workspace's trigger paths"),
    }
}

/// Whether a change of `file` (relative to the repository root) concerns a workspace:
/// with trigger patterns, one of them matches it; otherwise it is under the working
/// directory (everything is when there is none) or one of the trigger prefixes.
pub fn watched(t: &Triggers<'_>, file: &str) -> bool {
    if !t.trigger_patterns.is_empty() {
        let opts = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: false,
        };
        return t.trigger_patterns.iter().any(|p| {
            let p = p.trim_start_matches('/');
            glob::Pattern::new(p).is_ok_and(|g| g.matches_with(file, opts))
        });
    }
    let under = |dir: &str| {
        let dir = dir.trim_matches('/');
        dir.is_empty() || file == dir || file.starts_with(&format!("{dir}/"))
    };
    let wd = t.working_directory.unwrap_or_default();
    under(wd)
        || t.trigger_prefixes
            .iter()
            .any(|p| !p.trim_matches('/').is_empty() && under(p))
}
