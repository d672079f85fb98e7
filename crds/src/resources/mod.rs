//! The custom resource kinds of DESIGN.md §2, group `terrace.dev`, version `v1alpha1`.
//! Doc comments become the CRD field descriptions (`kubectl explain`).

mod module;
mod notification;
mod organization;
mod policyset;
mod project;
mod references;
mod run;
mod state;
mod variable;
mod varset;
mod workspace;

pub use module::*;
pub use notification::*;
pub use organization::*;
pub use policyset::*;
pub use project::*;
pub use references::*;
pub use run::*;
pub use state::*;
pub use variable::*;
pub use varset::*;
pub use workspace::*;

pub(crate) fn default_true() -> bool {
    true
}

/// The CEL validations of a variable whose value may live in a Secret (workspace and test
/// variables: `value` or `valueFrom`, and sensitive for good), then the kind's own
/// `rules`, each a CEL rule and its message.
pub(crate) fn secret_value_rules(rules: &[(&str, &str)]) -> serde_json::Value {
    const SECRET_VALUE: [(&str, &str); 3] = [
        (
            "!self.sensitive || self.value == ''",
            "a sensitive variable keeps its value in a Secret: use valueFrom, not value",
        ),
        (
            "!has(self.valueFrom) || self.value == ''",
            "value and valueFrom cannot both be given",
        ),
        (
            "!has(oldSelf.sensitive) || !oldSelf.sensitive || self.sensitive",
            "a sensitive variable cannot be made non-sensitive",
        ),
    ];
    SECRET_VALUE
        .iter()
        .chain(rules)
        .map(|(rule, message)| serde_json::json!({ "rule": rule, "message": message }))
        .collect()
}
