//! The static rules of SPEC.md as pure functions. The API server calls them to answer
//! 422 with the offending attribute; the CRD schemas carry the same rules as `pattern`,
//! `enum` and CEL `x-kubernetes-validations` so kubectl users meet the same set (the
//! `crdgen` tests check the two agree).

use std::sync::LazyLock;

use regex::Regex;

use crate::constants::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_WORKSPACE_NAME_LEN};

mod variables;
pub use variables::*;

/// A broken rule: the SPEC.md attribute name (JSON:API spelling, e.g. `agent-pool-id`)
/// and a message that completes the sentence "<attribute> <message>".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{attribute} {message}")]
pub struct RuleViolation {
    pub attribute: &'static str,
    pub message: String,
}

impl RuleViolation {
    /// The message as TFE words it: the attribute humanized ("Auto destroy activity
    /// duration has an incorrect format…", "Name may only contain…").
    pub fn humanized(&self) -> String {
        let mut words = self.attribute.replace(['-', '.', '_'], " ");
        if let Some(first) = words.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        format!("{words} {}", self.message)
    }

    fn new(attribute: &'static str, message: impl Into<String>) -> Self {
        Self {
            attribute,
            message: message.into(),
        }
    }
}

/// Workspace names: letters, digits, `-`, `_` (SPEC.md Limits). Also the CRD `pattern`.
pub const WORKSPACE_NAME_PATTERN: &str = r"^[A-Za-z0-9_-]+$";
/// `auto-destroy-activity-duration`: 1–4 digits, greater than 0, then `d` or `h`.
pub const AUTO_DESTROY_DURATION_PATTERN: &str =
    r"^([1-9][0-9]{0,3}|0[1-9][0-9]{0,2}|00[1-9][0-9]?|000[1-9])[dh]$";
/// Test variable keys: a letter or underscore, then letters, digits, underscores.
pub const TEST_VARIABLE_KEY_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";
/// The only test variable category (SPEC.md test variable table).
pub const TEST_VARIABLE_CATEGORY: &str = "env";
/// Flat tag names: letters, digits, `:`, `-`, `_`, starting with a letter or digit.
pub const TAG_NAME_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9:_-]*$";
/// Longest flat tag name and tag-binding key.
pub const MAX_TAG_KEY_LEN: usize = 128;
/// Longest tag-binding value.
pub const MAX_TAG_VALUE_LEN: usize = 256;
/// VCS repository identifiers: `:org/:repo`, or `:org/:project/_git/:repo` for Azure DevOps.
pub const VCS_IDENTIFIER_PATTERN: &str =
    r"^[A-Za-z0-9_.-]+/([A-Za-z0-9_. -]+/_git/)?[A-Za-z0-9_.-]+$";

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this module, covered by tests.
    Regex::new(pattern).unwrap_or_else(|e| panic!("invalid built-in pattern {pattern}: {e}"))
}

static WORKSPACE_NAME: LazyLock<Regex> = LazyLock::new(|| re(WORKSPACE_NAME_PATTERN));
static AUTO_DESTROY: LazyLock<Regex> = LazyLock::new(|| re(AUTO_DESTROY_DURATION_PATTERN));
static TEST_VARIABLE_KEY: LazyLock<Regex> = LazyLock::new(|| re(TEST_VARIABLE_KEY_PATTERN));
static TAG_NAME: LazyLock<Regex> = LazyLock::new(|| re(TAG_NAME_PATTERN));
static VCS_IDENTIFIER: LazyLock<Regex> = LazyLock::new(|| re(VCS_IDENTIFIER_PATTERN));
static ENGINE_VERSION: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"^(latest|(\s*(=|!=|>|>=|<|<=|~>)?\s*v?[0-9]+(\.[0-9]+){0,2}(-[0-9A-Za-z.-]+)?\s*)(,(\s*(=|!=|>|>=|<|<=|~>)?\s*v?[0-9]+(\.[0-9]+){0,2}(-[0-9A-Za-z.-]+)?\s*))*)$",
    )
});

/// Longest variable description (TFE's limit).
pub const MAX_VARIABLE_DESCRIPTION_LEN: usize = 512;

/// Variable descriptions: at most [`MAX_VARIABLE_DESCRIPTION_LEN`] characters.
pub fn validate_variable_description(description: &str) -> Result<(), RuleViolation> {
    if description.chars().count() > MAX_VARIABLE_DESCRIPTION_LEN {
        Err(RuleViolation::new(
            "description",
            format!("is too long (maximum is {MAX_VARIABLE_DESCRIPTION_LEN} characters)"),
        ))
    } else {
        Ok(())
    }
}

/// What an update writes into a variable's Secret (None: the Secret stays as it is): for
/// a variable sensitive after the update, the value given, else the plain value of one
/// becoming sensitive (it moves into the Secret).
pub fn new_secret_value(
    sensitive: bool,
    given: Option<&str>,
    was_sensitive: bool,
    plain_value: &str,
) -> Option<String> {
    if !sensitive {
        return None;
    }
    given
        .or((!was_sensitive).then_some(plain_value))
        .map(str::to_owned)
}

/// An organization's email: something that looks like an address (`local@domain.tld`,
/// no spaces or control characters, at most 254 characters).
pub fn validate_email(email: &str) -> Result<(), RuleViolation> {
    let bad = || RuleViolation::new("email", "is invalid");
    if email.chars().count() > 254 || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad());
    }
    let (local, domain) = email.split_once('@').ok_or_else(bad)?;
    let labels_ok = domain.split('.').count() >= 2
        && domain
            .split('.')
            .all(|l| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-'));
    if local.is_empty() || domain.contains('@') || !labels_ok {
        return Err(bad());
    }
    Ok(())
}

/// Keys of a test run's `variables`: a letter or underscore, then letters, digits,
/// underscores or dashes (the configuration language's identifiers).
pub fn validate_run_variable_key(key: &str) -> Result<(), RuleViolation> {
    let mut chars = key.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(RuleViolation::new(
            "key",
            "must begin with a letter or underscore and contain only letters, numbers, dashes and underscores",
        ))
    }
}

/// The order of names in TFE's lists (projects, tags): case-insensitive, so "Default
/// Project" sits among the d's; names equal but for case keep a stable byte order.
pub fn name_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.to_lowercase()
        .cmp(&b.to_lowercase())
        .then_with(|| a.cmp(b))
}

/// Project names: 1–40 letters, digits, spaces, `-` or `_`, not only spaces (TFE's rule).
pub fn validate_project_name(name: &str) -> Result<(), RuleViolation> {
    let ok = !name.trim().is_empty()
        && name.chars().count() <= 40
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(RuleViolation::new(
            "name",
            "may only contain letters, numbers, spaces, dashes (-) and underscores (_), and be 1-40 characters long",
        ))
    }
}

/// SPEC.md: name — only letters, digits, `-`, `_`; required; at most 90 characters.
pub fn validate_workspace_name(name: &str) -> Result<(), RuleViolation> {
    if name.is_empty() {
        return Err(RuleViolation::new("name", "can't be blank"));
    }
    if name.len() > MAX_WORKSPACE_NAME_LEN {
        return Err(RuleViolation::new(
            "name",
            format!("is too long (maximum is {MAX_WORKSPACE_NAME_LEN} characters)"),
        ));
    }
    if !WORKSPACE_NAME.is_match(name) {
        return Err(RuleViolation::new(
            "name",
            "may only contain letters, numbers, dashes (-) and underscores (_)",
        ));
    }
    Ok(())
}

/// Unit of an `auto-destroy-activity-duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationUnit {
    Days,
    Hours,
}

/// SPEC.md: auto-destroy-activity-duration — `<number><d or h>`, number > 0, at most four
/// digits. Returns the parsed amount and unit.
pub fn parse_auto_destroy_activity_duration(
    value: &str,
) -> Result<(u32, DurationUnit), RuleViolation> {
    let invalid = || {
        RuleViolation::new(
            "auto-destroy-activity-duration",
            format!(
                "has an incorrect format, we expect up to 4 numeric digits and 1 unit ('d' or 'h'), greater than 0 (e.g. 14d or 36h), got {value:?}"
            ),
        )
    };
    if !AUTO_DESTROY.is_match(value) {
        return Err(invalid());
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let amount: u32 = digits.parse().map_err(|_| invalid())?;
    let unit = if unit == "d" {
        DurationUnit::Days
    } else {
        DurationUnit::Hours
    };
    Ok((amount, unit))
}

/// Workspace execution modes (SPEC.md `execution-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionMode {
    Remote,
    Local,
    Agent,
}

impl ExecutionMode {
    pub const ALL: [ExecutionMode; 3] = [
        ExecutionMode::Remote,
        ExecutionMode::Local,
        ExecutionMode::Agent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Remote => "remote",
            ExecutionMode::Local => "local",
            ExecutionMode::Agent => "agent",
        }
    }

    pub fn parse(value: &str) -> Result<ExecutionMode, RuleViolation> {
        ExecutionMode::ALL
            .into_iter()
            .find(|m| m.as_str() == value)
            .ok_or_else(|| {
                RuleViolation::new(
                    "execution-mode",
                    format!("must be one of remote, local, agent; got {value:?}"),
                )
            })
    }

    /// The deprecated `operations` flag this mode implies: `local` means state storage only.
    pub fn operations(self) -> bool {
        self != ExecutionMode::Local
    }

    /// The mode a deprecated `operations` value stands for.
    pub fn from_operations(operations: bool) -> ExecutionMode {
        if operations {
            ExecutionMode::Remote
        } else {
            ExecutionMode::Local
        }
    }
}

/// The attributes that take part in the execution-mode rules, as given in one request
/// (create) or as they will be after an update (`None` = not given / not set).
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecutionSettings<'a> {
    pub execution_mode: Option<&'a str>,
    pub operations: Option<bool>,
    pub agent_pool_id: Option<&'a str>,
    /// `setting-overwrites.execution-mode`.
    pub overwrites_execution_mode: Option<bool>,
}

/// SPEC.md rules of `execution-mode`, `operations` and `agent-pool-id`:
/// - execution-mode is one of remote, local, agent;
/// - execution-mode and operations are not given together;
/// - agent-pool-id is required when execution-mode is agent;
/// - agent-pool-id is not given with execution-mode remote or local, nor with operations true;
/// - execution-mode is given when setting-overwrites.execution-mode is true.
pub fn validate_execution_settings(s: ExecutionSettings<'_>) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    let mode = match s.execution_mode.map(ExecutionMode::parse) {
        Some(Err(e)) => {
            out.push(e);
            None
        }
        Some(Ok(m)) => Some(m),
        None => None,
    };
    if s.execution_mode.is_some() && s.operations.is_some() {
        out.push(RuleViolation::new(
            "operations",
            "cannot be given together with execution-mode; use execution-mode (operations is deprecated)",
        ));
    }
    let has_pool = s.agent_pool_id.is_some_and(|p| !p.is_empty());
    match mode {
        Some(ExecutionMode::Agent) if !has_pool => out.push(RuleViolation::new(
            "agent-pool-id",
            "is required when execution-mode is agent",
        )),
        Some(m @ (ExecutionMode::Remote | ExecutionMode::Local)) if has_pool => {
            out.push(RuleViolation::new(
                "agent-pool-id",
                format!("must not be given when execution-mode is {}", m.as_str()),
            ))
        }
        _ => {}
    }
    if has_pool && s.operations == Some(true) {
        out.push(RuleViolation::new(
            "agent-pool-id",
            "must not be given when operations is true",
        ));
    }
    if has_pool && mode.is_none() && s.operations.is_none() {
        out.push(RuleViolation::new(
            "agent-pool-id",
            "can only be given with execution-mode agent",
        ));
    }
    if s.overwrites_execution_mode == Some(true) && s.execution_mode.is_none() {
        out.push(RuleViolation::new(
            "execution-mode",
            "must be given when setting-overwrites.execution-mode is true",
        ));
    }
    out
}

/// The default execution mode of an organization or project and its agent pool:
/// the mode is one of remote, local, agent; `agent` needs a pool; a pool is only allowed
/// with `agent` (TFE's words). `mode_attr`/`pool_attr` name the attributes.
pub fn validate_default_execution(
    mode: Option<&str>,
    pool: Option<&str>,
    mode_attr: &'static str,
    pool_attr: &'static str,
) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    let mode = match mode.map(ExecutionMode::parse) {
        Some(Err(_)) => {
            out.push(RuleViolation::new(
                mode_attr,
                "must be one of remote, local, agent",
            ));
            return out;
        }
        Some(Ok(m)) => Some(m),
        None => None,
    };
    let has_pool = pool.is_some_and(|p| !p.is_empty());
    match mode {
        Some(ExecutionMode::Agent) if !has_pool => out.push(RuleViolation::new(
            pool_attr,
            "must be specified when using 'agent' execution mode",
        )),
        Some(ExecutionMode::Agent) => {}
        _ if has_pool => out.push(RuleViolation::new(
            pool_attr,
            "must not be specified unless using 'agent' execution mode",
        )),
        _ => {}
    }
    out
}

/// `setting-overwrites` of a workspace (`execution-mode`, `agent-pool`) or a project
/// (`default-execution-mode`, `default-agent-pool`) as sent: when both keys are given
/// they must agree, TFE's rule (the pool goes with the mode).
pub fn validate_setting_overwrites(
    mode: Option<bool>,
    pool: Option<bool>,
) -> Result<(), RuleViolation> {
    match (mode, pool) {
        (Some(m), Some(p)) if m != p => Err(RuleViolation::new(
            "setting-overwrites",
            "If agent-pool and execution-mode are both included in setting-overwrites, their values must be the same.",
        )),
        _ => Ok(()),
    }
}

/// Most run trigger sources a workspace has (TFE's limit).
pub const MAX_RUN_TRIGGER_SOURCES: usize = 20;

/// Whether `source` may trigger `target` given the triggers there are (`edges`: each
/// source with a workspace it triggers): not itself, at most
/// [`MAX_RUN_TRIGGER_SOURCES`] sources on `target`, and no cycle (an apply of `target`
/// must never lead back to `source`). Workspaces by any one key (IDs).
pub fn validate_run_trigger(
    edges: &[(String, String)],
    source: &str,
    target: &str,
) -> Result<(), RuleViolation> {
    if source == target {
        return Err(RuleViolation::new(
            "sourceable",
            "a workspace cannot trigger runs in itself",
        ));
    }
    if edges.iter().filter(|(_, t)| t == target).count() >= MAX_RUN_TRIGGER_SOURCES {
        return Err(RuleViolation::new(
            "sourceable",
            format!("a workspace has at most {MAX_RUN_TRIGGER_SOURCES} run trigger sources"),
        ));
    }
    if triggers_reach(edges, target, source) {
        return Err(RuleViolation::new(
            "sourceable",
            "this run trigger would make a cycle: the source is already triggered (directly or not) by this workspace",
        ));
    }
    Ok(())
}

/// Whether an apply of `from` leads, through the run triggers `edges` (each source with
/// a workspace it triggers), to a run in `to`. The trigger `source` → `target` is on a
/// cycle exactly when `triggers_reach(edges, target, source)`: the operator then queues
/// nothing through it (triggers declared with kubectl are not checked on the way in).
pub fn triggers_reach(edges: &[(String, String)], from: &str, to: &str) -> bool {
    let mut seen = vec![from.to_owned()];
    let mut next = vec![from.to_owned()];
    while let Some(w) = next.pop() {
        for (_, t) in edges.iter().filter(|(s, _)| *s == w) {
            if t == to {
                return true;
            }
            if !seen.contains(t) {
                seen.push(t.clone());
                next.push(t.clone());
            }
        }
    }
    false
}

/// The `vcs-repo` keys that take part in its rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct VcsRepoInput<'a> {
    pub identifier: Option<&'a str>,
    pub oauth_token_id: Option<&'a str>,
    pub app_installation_id: Option<&'a str>,
    pub tags_regex: Option<&'a str>,
}

/// SPEC.md `vcs-repo` rules for a repository being attached (create, or update of a
/// workspace without one): identifier required in `:org/:repo` form; exactly one of
/// oauth-token-id and the app installation id; tags-regex a valid regular expression.
pub fn validate_vcs_repo(v: VcsRepoInput<'_>) -> Vec<RuleViolation> {
    let mut out = Vec::new();
    match v.identifier {
        None | Some("") => out.push(RuleViolation::new("vcs-repo.identifier", "is required")),
        Some(id) if !VCS_IDENTIFIER.is_match(id) => out.push(RuleViolation::new(
            "vcs-repo.identifier",
            format!("must have the form :org/:repo (or :org/:project/_git/:repo), got {id:?}"),
        )),
        Some(_) => {}
    }
    let oauth = v.oauth_token_id.is_some_and(|s| !s.is_empty());
    let app = v.app_installation_id.is_some_and(|s| !s.is_empty());
    match (oauth, app) {
        (true, true) => out.push(RuleViolation::new(
            "vcs-repo.oauth-token-id",
            "cannot be combined with vcs-repo.github-app-installation-id",
        )),
        (false, false) => out.push(RuleViolation::new(
            "vcs-repo.oauth-token-id",
            "is required (or vcs-repo.github-app-installation-id)",
        )),
        _ => {}
    }
    if let Some(rx) = v.tags_regex.filter(|s| !s.is_empty())
        && let Err(e) = Regex::new(rx)
    {
        out.push(RuleViolation::new(
            "vcs-repo.tags-regex",
            format!("is not a valid regular expression: {e}"),
        ));
    }
    out
}

/// SPEC.md `terraform-version`: an exact version, a constraint (`~> 1.5`, `>= 1.2, < 2.0`)
/// or `latest`.
pub fn validate_terraform_version(value: &str) -> Result<(), RuleViolation> {
    if ENGINE_VERSION.is_match(value) {
        Ok(())
    } else {
        Err(RuleViolation::new(
            "terraform-version",
            format!(
                "must be a version or a version constraint such as \"~> 1.9.0\", got {value:?}"
            ),
        ))
    }
}

/// SPEC.md test variable `key`: begins with a letter or underscore; letters, digits,
/// underscores only.
pub fn validate_test_variable_key(key: &str) -> Result<(), RuleViolation> {
    if key.is_empty() {
        return Err(RuleViolation::new("key", "can't be blank"));
    }
    if !TEST_VARIABLE_KEY.is_match(key) {
        return Err(RuleViolation::new(
            "key",
            "must begin with a letter or underscore and contain only letters, numbers and underscores",
        ));
    }
    Ok(())
}

/// SPEC.md test variable `category`: required, must be `env`.
pub fn validate_test_variable_category(category: Option<&str>) -> Result<(), RuleViolation> {
    match category {
        None | Some("") => Err(RuleViolation::new("category", "can't be blank")),
        Some(TEST_VARIABLE_CATEGORY) => Ok(()),
        Some(other) => Err(RuleViolation::new(
            "category",
            format!("must be \"env\" for module test variables, got {other:?}"),
        )),
    }
}

/// Flat tag names: 1–128 characters of letters, digits, `:`, `-`, `_`.
pub fn validate_tag_name(name: &str) -> Result<(), RuleViolation> {
    if name.is_empty() || name.len() > MAX_TAG_KEY_LEN || !TAG_NAME.is_match(name) {
        return Err(RuleViolation::new(
            "name",
            format!(
                "must be 1-{MAX_TAG_KEY_LEN} characters of letters, numbers, colons, hyphens and underscores, got {name:?}"
            ),
        ));
    }
    Ok(())
}

/// Tag bindings: a non-empty key of at most 128 characters, a value of at most 256.
pub fn validate_tag_binding(key: &str, value: &str) -> Result<(), RuleViolation> {
    if key.trim().is_empty() {
        return Err(RuleViolation::new("key", "can't be blank"));
    }
    if key.chars().count() > MAX_TAG_KEY_LEN {
        return Err(RuleViolation::new(
            "key",
            format!("is too long (maximum is {MAX_TAG_KEY_LEN} characters)"),
        ));
    }
    if value.chars().count() > MAX_TAG_VALUE_LEN {
        return Err(RuleViolation::new(
            "value",
            format!("is too long (maximum is {MAX_TAG_VALUE_LEN} characters)"),
        ));
    }
    for (attr, text) in [("key", key), ("value", value)] {
        if text.chars().any(char::is_control) {
            return Err(RuleViolation::new(
                attr,
                "must not contain control characters",
            ));
        }
    }
    Ok(())
}

/// Most tag bindings one workspace or project may carry (TFE's limit).
pub const MAX_TAG_BINDINGS: usize = 10;

/// A resource carries at most [`MAX_TAG_BINDINGS`] tag bindings.
pub fn validate_tag_binding_count(n: usize) -> Result<(), RuleViolation> {
    if n > MAX_TAG_BINDINGS {
        Err(RuleViolation::new(
            "tag-bindings",
            format!("cannot exceed {MAX_TAG_BINDINGS} bindings per resource"),
        ))
    } else {
        Ok(())
    }
}

/// A validated page request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// 1-based page number.
    pub number: u32,
    pub size: u32,
}

/// `page[number]` (default 1) and `page[size]` (default 20, at most 100). Non-numeric,
/// zero or negative values are errors; sizes above the maximum are capped, as TFE does.
pub fn parse_page(number: Option<&str>, size: Option<&str>) -> Result<Page, RuleViolation> {
    fn positive(attr: &'static str, v: &str) -> Result<u32, RuleViolation> {
        match v.trim().parse::<i64>() {
            Ok(n) if n >= 1 => Ok(u32::try_from(n).unwrap_or(u32::MAX)),
            _ => Err(RuleViolation::new(
                attr,
                format!("must be a positive integer, got {v:?}"),
            )),
        }
    }
    let number = number
        .map(|v| positive("page[number]", v))
        .transpose()?
        .unwrap_or(1);
    let size = size
        .map(|v| positive("page[size]", v))
        .transpose()?
        .unwrap_or(DEFAULT_PAGE_SIZE)
        .min(MAX_PAGE_SIZE);
    Ok(Page { number, size })
}

/// Flat tag names as TFE reports them: lowercased, without empty entries, sorted and
/// deduplicated.
pub fn tag_names(tags: &[String]) -> Vec<String> {
    tags.iter()
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests;
