//! The static rules of SPEC.md as pure functions. The API server calls them to answer
//! 422 with the offending attribute; the CRD schemas carry the same rules as `pattern`,
//! `enum` and CEL `x-kubernetes-validations` so kubectl users meet the same set (the
//! `crdgen` tests check the two agree).

use std::sync::LazyLock;

use regex::Regex;

use crate::constants::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, MAX_WORKSPACE_NAME_LEN};

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
            "is required when using 'agent' execution mode",
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

/// Workspace variable keys of category `terraform`: an identifier of the configuration
/// language (a letter or underscore, then letters, digits, underscores, dashes). Also the
/// CRD `pattern` of `WorkspaceVariable.spec.key`.
pub const TERRAFORM_VARIABLE_KEY_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_-]*$";
/// Workspace variable keys of category `env`: a portable environment variable name (a
/// letter or underscore, then letters, digits, underscores). Also a CEL rule of the CRD.
pub const ENV_VARIABLE_KEY_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";

static TERRAFORM_VARIABLE_KEY: LazyLock<Regex> =
    LazyLock::new(|| re(TERRAFORM_VARIABLE_KEY_PATTERN));
static ENV_VARIABLE_KEY: LazyLock<Regex> = LazyLock::new(|| re(ENV_VARIABLE_KEY_PATTERN));

/// The category of a workspace variable (TFE's `category`: `terraform` or `env`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VariableCategory {
    /// An input variable of the configuration (a line of the run's `.tfvars`).
    Terraform,
    /// An environment variable of the run.
    Env,
}

impl VariableCategory {
    /// Both categories, in the order of the CRD's enum.
    pub const ALL: [VariableCategory; 2] = [VariableCategory::Terraform, VariableCategory::Env];

    /// The wire value (`terraform`, `env`).
    pub const fn as_str(self) -> &'static str {
        match self {
            VariableCategory::Terraform => "terraform",
            VariableCategory::Env => "env",
        }
    }

    /// TFE's `category`: required, one of `terraform` and `env` ("is not included in the
    /// list" otherwise).
    pub fn parse(category: &str) -> Result<VariableCategory, RuleViolation> {
        if category.is_empty() {
            return Err(RuleViolation::new("category", "can't be blank"));
        }
        VariableCategory::ALL
            .into_iter()
            .find(|c| c.as_str() == category)
            .ok_or_else(|| {
                RuleViolation::new(
                    "category",
                    format!("is not included in the list (terraform, env), got {category:?}"),
                )
            })
    }
}

/// A workspace variable's `key` in its category: required; a Terraform variable's key is
/// an identifier ([`TERRAFORM_VARIABLE_KEY_PATTERN`]), an environment variable's a
/// portable variable name ([`ENV_VARIABLE_KEY_PATTERN`]).
pub fn validate_workspace_variable_key(
    key: &str,
    category: VariableCategory,
) -> Result<(), RuleViolation> {
    if key.is_empty() {
        return Err(RuleViolation::new("key", "can't be blank"));
    }
    match category {
        VariableCategory::Terraform if !TERRAFORM_VARIABLE_KEY.is_match(key) => {
            Err(RuleViolation::new(
                "key",
                "must begin with a letter or underscore and contain only letters, numbers, dashes and underscores",
            ))
        }
        VariableCategory::Env if !ENV_VARIABLE_KEY.is_match(key) => Err(RuleViolation::new(
            "key",
            "must begin with a letter or underscore and contain only letters, numbers and underscores",
        )),
        _ => Ok(()),
    }
}

/// `hcl` is a property of Terraform variables only: an environment variable cannot be
/// HCL (TFE's rule; also a CEL rule of the CRD).
pub fn validate_workspace_variable_hcl(
    hcl: bool,
    category: VariableCategory,
) -> Result<(), RuleViolation> {
    if hcl && category == VariableCategory::Env {
        Err(RuleViolation::new(
            "hcl",
            "is only allowed for terraform variables: environment variables cannot be HCL",
        ))
    } else {
        Ok(())
    }
}

/// One assignment of a `.tfvars` file: `key = value` with the value verbatim when it is
/// HCL (an expression of the configuration language), else `key = "<value>"` with the
/// value as a quoted string literal: `\` and `"` escaped, newlines, carriage returns and
/// tabs as `\n`, `\r`, `\t`, other control characters as `\uNNNN`, and the template
/// sequences `${` and `%{` written `$${` and `%%{` so the engine reads them literally. No
/// trailing newline. The key is not checked (see [`validate_workspace_variable_key`]).
pub fn tfvars_line(key: &str, value: &str, hcl: bool) -> String {
    if hcl {
        return format!("{key} = {value}");
    }
    let mut out = String::with_capacity(key.len() + value.len() + 6);
    out.push_str(key);
    out.push_str(" = \"");
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
mod tests {
    #[test]
    fn emails() {
        for ok in ["ops@example.com", "a.b+c@sub.example.org"] {
            assert!(validate_email(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "ops",
            "@example.com",
            "ops@",
            "ops@example",
            "a b@example.com",
            "a@b@c.com",
            "a@.com",
        ] {
            assert!(validate_email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn default_execution_rules() {
        let v = |m, p| {
            validate_default_execution(m, p, "default-execution-mode", "default-agent-pool-id")
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        };
        assert!(v(Some("remote"), None).is_empty());
        assert!(v(Some("agent"), Some("apool-1")).is_empty());
        assert_eq!(
            v(Some("remote"), Some("apool-1")),
            ["default-agent-pool-id must not be specified unless using 'agent' execution mode"]
        );
        assert_eq!(
            v(Some("agent"), None),
            ["default-agent-pool-id is required when using 'agent' execution mode"]
        );
        assert_eq!(
            v(Some("cloud"), None),
            ["default-execution-mode must be one of remote, local, agent"]
        );
    }

    #[test]
    fn tag_binding_limits() {
        assert!(validate_tag_binding(&"ü".repeat(128), &"é".repeat(256)).is_ok());
        assert!(validate_tag_binding(&"k".repeat(129), "").is_err());
        assert_eq!(
            validate_tag_binding("a\u{0}b", "")
                .err()
                .map(|e| e.attribute),
            Some("key")
        );
        assert_eq!(
            validate_tag_binding("env", "pr\rod")
                .err()
                .map(|e| e.attribute),
            Some("value")
        );
        assert!(validate_tag_binding_count(10).is_ok());
        let e = validate_tag_binding_count(11).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("tag-bindings cannot exceed 10 bindings per resource")
        );
    }

    #[test]
    fn variable_descriptions() {
        assert!(validate_variable_description(&"é".repeat(512)).is_ok());
        let e = validate_variable_description(&"d".repeat(513)).err();
        assert_eq!(e.map(|e| e.attribute), Some("description"));
    }

    #[test]
    fn run_variable_keys() {
        for ok in ["a", "_x", "region-1", "A_b"] {
            assert!(validate_run_variable_key(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1x", "-a", "a b", "a.b"] {
            assert!(validate_run_variable_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn project_names() {
        for ok in ["a", "Team A", "x_y-z", &"p".repeat(40)] {
            assert!(validate_project_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "   ", "a/b", "ä", &"p".repeat(41)] {
            let e = validate_project_name(bad).err();
            assert_eq!(e.map(|e| e.attribute), Some("name"), "{bad}");
        }
    }

    use super::*;

    /// Sensitive after the update: the value given, or the plain value moving into the
    /// Secret; nothing for a plain variable or a sensitive one without a new value.
    #[test]
    fn new_secret_values() {
        for (sensitive, given, was, plain, want) in [
            (false, Some("v"), false, "p", None),
            (true, Some("v"), true, "", Some("v")),
            (true, Some("v"), false, "p", Some("v")),
            (true, None, false, "p", Some("p")),
            (true, None, true, "", None),
        ] {
            assert_eq!(
                new_secret_value(sensitive, given, was, plain).as_deref(),
                want,
                "{sensitive} {given:?} {was}"
            );
        }
    }

    fn attrs(v: &[RuleViolation]) -> Vec<&'static str> {
        v.iter().map(|e| e.attribute).collect()
    }

    #[test]
    fn workspace_name_allows_letters_digits_dash_underscore_only() {
        for ok in ["prod", "Prod_2", "a-b_c", "X", "0", &"a".repeat(90)] {
            assert_eq!(validate_workspace_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "bad name!",
            "a.b",
            "a/b",
            "ü",
            "a b",
            " x",
            &"a".repeat(91),
        ] {
            assert!(validate_workspace_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn auto_destroy_duration_is_1_to_4_digits_above_zero_with_d_or_h() {
        assert_eq!(
            parse_auto_destroy_activity_duration("14d"),
            Ok((14, DurationUnit::Days))
        );
        assert_eq!(
            parse_auto_destroy_activity_duration("1h"),
            Ok((1, DurationUnit::Hours))
        );
        assert_eq!(
            parse_auto_destroy_activity_duration("9999h"),
            Ok((9999, DurationUnit::Hours))
        );
        assert_eq!(
            parse_auto_destroy_activity_duration("0010d"),
            Ok((10, DurationUnit::Days))
        );
        assert_eq!(
            parse_auto_destroy_activity_duration("001d"),
            Ok((1, DurationUnit::Days))
        );
        assert_eq!(
            parse_auto_destroy_activity_duration("0001h"),
            Ok((1, DurationUnit::Hours))
        );
        for bad in [
            "0d", "00h", "0000d", "10000d", "d", "14", "14m", "-1d", "1.5d", " 1d", "1D", "",
        ] {
            assert!(
                parse_auto_destroy_activity_duration(bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn auto_destroy_pattern_matches_parser_on_all_short_inputs() {
        // Exhaustive over 0..=99999 with both units: the regex (also the CRD pattern) and
        // the numeric rule agree everywhere.
        for n in 0..=99_999u32 {
            for unit in ["d", "h"] {
                for width in [1usize, 2, 3, 4, 5] {
                    let digits = format!("{n:0width$}");
                    if digits.len() != width {
                        continue;
                    }
                    let v = format!("{digits}{unit}");
                    let expect = width <= 4 && n > 0;
                    assert_eq!(
                        parse_auto_destroy_activity_duration(&v).is_ok(),
                        expect,
                        "{v}"
                    );
                }
            }
        }
    }

    #[test]
    fn execution_mode_values() {
        for m in ExecutionMode::ALL {
            assert_eq!(ExecutionMode::parse(m.as_str()), Ok(m));
        }
        assert!(ExecutionMode::parse("Remote").is_err());
        assert!(ExecutionMode::parse("").is_err());
        assert!(!ExecutionMode::Local.operations());
        assert!(ExecutionMode::Remote.operations());
        assert!(ExecutionMode::Agent.operations());
        assert_eq!(ExecutionMode::from_operations(false), ExecutionMode::Local);
        assert_eq!(ExecutionMode::from_operations(true), ExecutionMode::Remote);
    }

    #[test]
    fn agent_pool_required_with_agent_mode() {
        let s = ExecutionSettings {
            execution_mode: Some("agent"),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_execution_settings(s)), ["agent-pool-id"]);
        let s = ExecutionSettings {
            execution_mode: Some("agent"),
            agent_pool_id: Some("apool-0123456789abcdef"),
            ..Default::default()
        };
        assert!(validate_execution_settings(s).is_empty());
    }

    #[test]
    fn agent_pool_forbidden_with_remote_local_or_operations_true() {
        for mode in ["remote", "local"] {
            let s = ExecutionSettings {
                execution_mode: Some(mode),
                agent_pool_id: Some("apool-x"),
                ..Default::default()
            };
            assert_eq!(
                attrs(&validate_execution_settings(s)),
                ["agent-pool-id"],
                "{mode}"
            );
        }
        let s = ExecutionSettings {
            operations: Some(true),
            agent_pool_id: Some("apool-x"),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_execution_settings(s)), ["agent-pool-id"]);
        let s = ExecutionSettings {
            agent_pool_id: Some("apool-x"),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_execution_settings(s)), ["agent-pool-id"]);
    }

    #[test]
    fn execution_mode_and_operations_are_exclusive() {
        let s = ExecutionSettings {
            execution_mode: Some("remote"),
            operations: Some(true),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_execution_settings(s)), ["operations"]);
        let s = ExecutionSettings {
            operations: Some(false),
            ..Default::default()
        };
        assert!(validate_execution_settings(s).is_empty());
    }

    #[test]
    fn execution_mode_required_when_overwritten() {
        let s = ExecutionSettings {
            overwrites_execution_mode: Some(true),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_execution_settings(s)), ["execution-mode"]);
        let s = ExecutionSettings {
            overwrites_execution_mode: Some(false),
            ..Default::default()
        };
        assert!(validate_execution_settings(s).is_empty());
        let s = ExecutionSettings {
            overwrites_execution_mode: Some(true),
            execution_mode: Some("local"),
            ..Default::default()
        };
        assert!(validate_execution_settings(s).is_empty());
    }

    #[test]
    fn unknown_execution_mode_is_reported() {
        let s = ExecutionSettings {
            execution_mode: Some("cloud"),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_execution_settings(s)), ["execution-mode"]);
    }

    #[test]
    fn vcs_repo_needs_identifier_and_exactly_one_credential() {
        let ok = VcsRepoInput {
            identifier: Some("acme/infra"),
            oauth_token_id: Some("ot-1"),
            ..Default::default()
        };
        assert!(validate_vcs_repo(ok).is_empty());
        let azure = VcsRepoInput {
            identifier: Some("acme/Platform Team/_git/infra"),
            app_installation_id: Some("ghain-1"),
            ..Default::default()
        };
        assert!(validate_vcs_repo(azure).is_empty());
        let missing = VcsRepoInput::default();
        assert_eq!(
            attrs(&validate_vcs_repo(missing)),
            ["vcs-repo.identifier", "vcs-repo.oauth-token-id"]
        );
        let both = VcsRepoInput {
            identifier: Some("acme/infra"),
            oauth_token_id: Some("ot-1"),
            app_installation_id: Some("ghain-1"),
            ..Default::default()
        };
        assert_eq!(attrs(&validate_vcs_repo(both)), ["vcs-repo.oauth-token-id"]);
        let bad = VcsRepoInput {
            identifier: Some("no-slash"),
            oauth_token_id: Some("ot-1"),
            tags_regex: Some("("),
            ..Default::default()
        };
        assert_eq!(
            attrs(&validate_vcs_repo(bad)),
            ["vcs-repo.identifier", "vcs-repo.tags-regex"]
        );
    }

    #[test]
    fn terraform_versions_and_constraints() {
        for ok in [
            "1.9.5",
            "latest",
            "~> 1.9.0",
            ">= 1.2, < 2.0",
            "1.10.0-beta1",
            "= 1.5.7",
        ] {
            assert_eq!(validate_terraform_version(ok), Ok(()), "{ok}");
        }
        for bad in ["", "one", "~>", "1.2.3.4", "> = 1"] {
            assert!(validate_terraform_version(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn variable_categories() {
        assert_eq!(
            VariableCategory::parse("terraform"),
            Ok(VariableCategory::Terraform)
        );
        assert_eq!(VariableCategory::parse("env"), Ok(VariableCategory::Env));
        for c in VariableCategory::ALL {
            assert_eq!(VariableCategory::parse(c.as_str()), Ok(c));
        }
        for bad in ["", "ENV", "policy-set", "terraform-cloud", " env"] {
            let e = VariableCategory::parse(bad).err();
            assert_eq!(e.map(|e| e.attribute), Some("category"), "{bad:?}");
        }
        assert_eq!(
            VariableCategory::parse("").err().map(|e| e.message),
            Some("can't be blank".to_owned())
        );
    }

    /// One row per key and category: ok for terraform, ok for env.
    #[test]
    fn workspace_variable_keys() {
        let rows = [
            ("region", true, true),
            ("_x", true, true),
            ("AWS_REGION", true, true),
            ("a1", true, true),
            ("instance-type", true, false),
            ("", false, false),
            ("1abc", false, false),
            ("-a", false, false),
            ("a b", false, false),
            ("a.b", false, false),
            ("a=b", false, false),
            ("ü", false, false),
        ];
        for (key, terraform, env) in rows {
            assert_eq!(
                validate_workspace_variable_key(key, VariableCategory::Terraform).is_ok(),
                terraform,
                "terraform {key:?}"
            );
            assert_eq!(
                validate_workspace_variable_key(key, VariableCategory::Env).is_ok(),
                env,
                "env {key:?}"
            );
        }
        let e = validate_workspace_variable_key("", VariableCategory::Env).err();
        assert_eq!(e.map(|e| e.to_string()), Some("key can't be blank".into()));
        assert_eq!(ENV_VARIABLE_KEY_PATTERN, TEST_VARIABLE_KEY_PATTERN);
    }

    #[test]
    fn hcl_only_for_terraform_variables() {
        use VariableCategory::{Env, Terraform};
        assert!(validate_workspace_variable_hcl(true, Terraform).is_ok());
        assert!(validate_workspace_variable_hcl(false, Terraform).is_ok());
        assert!(validate_workspace_variable_hcl(false, Env).is_ok());
        let e = validate_workspace_variable_hcl(true, Env).err();
        assert_eq!(e.map(|e| e.attribute), Some("hcl"));
    }

    /// One row per escape of a string value; HCL values verbatim.
    #[test]
    fn tfvars_lines() {
        let rows = [
            ("eu-west-1", r#"region = "eu-west-1""#),
            ("", r#"region = """#),
            (r#"say "hi""#, r#"region = "say \"hi\"""#),
            (r"C:\dir", r#"region = "C:\\dir""#),
            ("a\nb", r#"region = "a\nb""#),
            ("a\r\n\tb", r#"region = "a\r\n\tb""#),
            ("${var.x}", r#"region = "$${var.x}""#),
            ("%{ if x }", r#"region = "%%{ if x }""#),
            ("$ {x} % {y} $x %", r#"region = "$ {x} % {y} $x %""#),
            ("$${x}", r#"region = "$$${x}""#),
            ("bell\u{7}", r#"region = "bell\u0007""#),
            ("ünïcödé ✓", r#"region = "ünïcödé ✓""#),
        ];
        for (value, line) in rows {
            assert_eq!(tfvars_line("region", value, false), line, "{value:?}");
        }
        assert_eq!(
            tfvars_line("tags", r#"{ env = "prod" }"#, true),
            r#"tags = { env = "prod" }"#
        );
        assert_eq!(tfvars_line("n", "3", true), "n = 3");
        assert_eq!(
            tfvars_line("list", "[\n  1,\n  2,\n]", true),
            "list = [\n  1,\n  2,\n]"
        );
    }

    #[test]
    fn test_variable_key_rule() {
        for ok in ["A", "_x", "AWS_REGION", "a1_b2"] {
            assert_eq!(validate_test_variable_key(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1abc", "a-b", "a b", "a.b", "ä"] {
            assert!(validate_test_variable_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn test_variable_category_must_be_env() {
        assert_eq!(validate_test_variable_category(Some("env")), Ok(()));
        assert!(validate_test_variable_category(Some("terraform")).is_err());
        assert!(validate_test_variable_category(None).is_err());
        assert!(validate_test_variable_category(Some("")).is_err());
    }

    #[test]
    fn tag_rules() {
        assert_eq!(validate_tag_name("env:prod"), Ok(()));
        assert!(validate_tag_name("").is_err());
        assert!(validate_tag_name("has space").is_err());
        assert!(validate_tag_name(&"a".repeat(129)).is_err());
        assert_eq!(validate_tag_binding("team", ""), Ok(()));
        assert!(validate_tag_binding("", "x").is_err());
        assert!(validate_tag_binding(&"k".repeat(129), "x").is_err());
        assert!(validate_tag_binding("k", &"v".repeat(257)).is_err());
    }

    #[test]
    fn page_defaults_and_bad_values() {
        assert_eq!(
            parse_page(None, None),
            Ok(Page {
                number: 1,
                size: 20
            })
        );
        assert_eq!(
            parse_page(Some("3"), Some("5")),
            Ok(Page { number: 3, size: 5 })
        );
        assert_eq!(
            parse_page(None, Some("1000")),
            Ok(Page {
                number: 1,
                size: 100
            })
        );
        for bad in ["0", "-1", "abc", "1.5", ""] {
            assert!(parse_page(Some(bad), None).is_err(), "{bad:?}");
            assert!(parse_page(None, Some(bad)).is_err(), "{bad:?}");
        }
    }

    /// Copies TFE: tag names are lowercase and listed once each, sorted.
    #[test]
    fn tag_names_are_lowercased_sorted_and_deduplicated() {
        let tags = ["Prod", "app:web", "prod", " ", "APP:web", "beta"].map(String::from);
        assert_eq!(tag_names(&tags), ["app:web", "beta", "prod"]);
        assert!(tag_names(&[]).is_empty());
    }
}
