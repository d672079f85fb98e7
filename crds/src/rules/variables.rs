//! The rules of variables: keys, categories and HCL values of workspace variables, how
//! a value becomes a `.tfvars` line, and which of a workspace's, its variable sets' and a
//! run's variables wins (TFE's precedence).

use super::*;

/// How a variable set applies to a workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetScope {
    /// To every workspace of the organization.
    Global,
    /// Through the workspace's project.
    Project,
    /// To the workspace itself.
    Workspace,
}

/// Where a variable of a run comes from, in TFE's order of precedence: each wins over
/// the ones before it. Non-priority sets: global, then project, then workspace-scoped;
/// the workspace's own variables; the run's (`-var`); then priority sets, the widest
/// winning (a priority global set wins over everything).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VariableSource {
    GlobalSet,
    ProjectSet,
    WorkspaceSet,
    Workspace,
    Run,
    PriorityWorkspaceSet,
    PriorityProjectSet,
    PriorityGlobalSet,
}

impl VariableSource {
    /// The source of a set applied with `scope`.
    pub fn of_set(scope: SetScope, priority: bool) -> VariableSource {
        match (scope, priority) {
            (SetScope::Global, false) => VariableSource::GlobalSet,
            (SetScope::Project, false) => VariableSource::ProjectSet,
            (SetScope::Workspace, false) => VariableSource::WorkspaceSet,
            (SetScope::Workspace, true) => VariableSource::PriorityWorkspaceSet,
            (SetScope::Project, true) => VariableSource::PriorityProjectSet,
            (SetScope::Global, true) => VariableSource::PriorityGlobalSet,
        }
    }

    /// Whether it wins over the run's own variables.
    pub fn overrides_run(self) -> bool {
        self > VariableSource::Run
    }
}

/// One candidate value of a run's variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate<T> {
    pub source: VariableSource,
    /// The set's name (empty for other sources): of two sets of one source, the one whose
    /// name sorts first wins, as in TFE.
    pub set_name: String,
    pub category: String,
    pub key: String,
    pub item: T,
}

/// The winner of each category and key among `candidates`: the highest source, and
/// between sets of one source the set whose name sorts first. Ordered by category, key.
pub fn winning_variables<T>(candidates: Vec<Candidate<T>>) -> Vec<Candidate<T>> {
    let mut best: std::collections::BTreeMap<(String, String), Candidate<T>> =
        std::collections::BTreeMap::new();
    for c in candidates {
        let slot = (c.category.clone(), c.key.clone());
        let better = best.get(&slot).is_none_or(|b| {
            c.source > b.source || (c.source == b.source && c.set_name < b.set_name)
        });
        if better {
            best.insert(slot, c);
        }
    }
    best.into_values().collect()
}

/// Workspace variable keys of category `terraform`: letters, digits, underscores and
/// dashes. HCP Terraform accepts a key that begins with a digit (go-tfe's own tests use
/// UUIDs as keys), so terrace does too; such a variable is set, but a configuration
/// cannot declare or reference it (the language's identifiers begin with a letter or an
/// underscore). Also the CRD `pattern` of `WorkspaceVariable.spec.key`.
pub const TERRAFORM_VARIABLE_KEY_PATTERN: &str = r"^[A-Za-z0-9_][A-Za-z0-9_-]*$";
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
/// letters, digits, underscores and dashes ([`TERRAFORM_VARIABLE_KEY_PATTERN`]), an
/// environment variable's a
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
                "must contain only letters, numbers, dashes and underscores",
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
