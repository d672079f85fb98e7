//! Variable sets (TFE's varsets): variables shared by many workspaces of an organization,
//! applied to all of them (`global`), to the workspaces of some projects, or to some
//! workspaces; a `priority` set wins over the workspaces' own variables and the run's.
//! The order of precedence is [`crate::rules::VariableSource`].

use crate::common::SecretKeyRef;

crd_kind! {
    /// A set of Terraform and environment variables shared by workspaces of the
    /// organization. Sensitive values live in a Secret (valueFrom), never in the spec.
    #[kube(
        kind = "VariableSet",
        doc = "A set of variables shared by workspaces of an organization.",
        namespaced,
        status = "VariableSetStatus",
        shortname = "tfvarset",
        printcolumn = r#"{"name":"Global","type":"boolean","jsonPath":".spec.global"}"#,
        printcolumn = r#"{"name":"Priority","type":"boolean","jsonPath":".spec.priority"}"#
    )]
    columns: tfe_name, id, age;
    pub struct VariableSetSpec {
        /// The set's name, unique in the organization (ignoring case).
        #[schemars(length(min = 1, max = 90))]
        pub name: String,
        /// What the set is for.
        pub description: Option<String>,
        /// Applied to every workspace of the organization.
        #[serde(default)]
        pub global: bool,
        /// Its variables win over the workspaces' own and the run's (`-var`).
        #[serde(default)]
        pub priority: bool,
        /// Workspaces (IDs `ws-…` or TFE names) the set is applied to.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub workspaces: Vec<String>,
        /// Projects (IDs `prj-…` or names) whose workspaces the set is applied to.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub projects: Vec<String>,
        /// The project that owns the set (ID `prj-…` or name; TFE's `parent` of type
        /// `projects`), none for a set the organization owns. A project-owned set applies
        /// only to the workspaces of its project: `global` then means every workspace of
        /// the project, and `workspaces` must be in it.
        pub parent_project: Option<String>,
        /// The variables, each key once per category (a list map: the API server refuses
        /// a second entry with the same key and category).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["key", "category"]
        ))]
        pub variables: Vec<VariableSetVariable>,
    }
}

crd_struct! {
    /// A variable of a set.
    #[derive(Default)]
    #[schemars(transform = without_defaults)]
    pub struct VariableSetVariable {
        /// Its API ID (`var-…`); given by the API, derived from the set and the key when
        /// absent (a set written with kubectl).
        pub id: Option<String>,
        /// Variable name (the rules of workspace variables).
        #[schemars(regex(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_-]*$"), length(min = 1))]
        pub key: String,
        /// The value (non-sensitive variables only).
        #[serde(default)]
        pub value: String,
        /// The value from a Secret key (sensitive variables).
        pub value_from: Option<SecretKeyRef>,
        /// Description of the variable (at most 512 characters).
        #[schemars(length(max = 512))]
        pub description: Option<String>,
        /// `terraform` or `env` (required: with the key, it names the variable).
        #[schemars(extend("enum" = ["terraform", "env"]))]
        pub category: String,
        /// The value is an HCL expression (terraform variables only).
        #[serde(default)]
        pub hcl: bool,
        /// Write-once: the value is never shown again.
        #[serde(default)]
        pub sensitive: bool,
        /// A token the API writes with every create and update, so the variable's
        /// `version-id` changes with each, even one that changes nothing (TFE's).
        pub revision: Option<String>,
    }
}

/// The schema of a list item without `default`s: the API server would fill them in, and
/// `kubectl apply` (a JSON merge patch replaces a list whole) would then find the list
/// changed on every apply. Omitted fields still read as their defaults.
pub(crate) fn without_defaults(schema: &mut schemars::Schema) {
    if let Some(props) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for prop in props.values_mut() {
            if let Some(p) = prop.as_object_mut() {
                p.remove("default");
            }
        }
    }
}

kind_status! {
    /// Observed state of a variable set.
    pub struct VariableSetStatus {
        /// The set's ID (`varset-…`).
        pub id: Option<String>,
    }
}

impl VariableSetVariable {
    /// Its ID: the one stored, else one derived from set `set_id`, the category and key.
    pub fn id_in(&self, set_id: &str) -> String {
        crate::ids::stored_or_stable(
            self.id.as_deref(),
            crate::ids::IdKind::WorkspaceVariable,
            &[set_id, &self.category, &self.key],
        )
    }
}

impl VariableSetSpec {
    /// How the set applies to workspace `ws` of project `project` (None: it does not):
    /// globally, through the project, or to the workspace itself.
    pub fn scope_for(
        &self,
        ws: super::Named<'_>,
        project: Option<super::Named<'_>>,
    ) -> Option<crate::rules::SetScope> {
        use crate::rules::SetScope;
        if let Some(owner) = self.parent_project.as_deref() {
            // A project's set: only within its project; `global` is the whole project.
            if !project.is_some_and(|p| p.listed_in(&[owner.to_owned()])) {
                return None;
            }
        }
        if ws.listed_in(&self.workspaces) {
            Some(SetScope::Workspace)
        } else if project.is_some_and(|p| p.listed_in(&self.projects))
            || (self.global && self.parent_project.is_some())
        {
            Some(SetScope::Project)
        } else if self.global {
            Some(SetScope::Global)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Named;
    use crate::rules::SetScope;

    fn named<'a>(id: &'a str, name: &'a str) -> Named<'a> {
        Named { id: Some(id), name }
    }

    /// A project-owned set applies only within its project: to the workspaces it names
    /// there, and with `global` to every workspace of the project, at the project's level
    /// of precedence (issue 42 §8).
    #[test]
    fn a_project_owned_set_applies_only_in_its_project() {
        let set = |global: bool, workspaces: &[&str]| VariableSetSpec {
            name: "s".into(),
            global,
            parent_project: Some("prj-A".into()),
            workspaces: workspaces.iter().map(|w| (*w).to_owned()).collect(),
            ..Default::default()
        };
        let (in_a, in_b) = (named("prj-A", "alpha"), named("prj-B", "beta"));
        let ws = named("ws-1", "app");
        assert_eq!(
            set(true, &[]).scope_for(ws, Some(in_a)),
            Some(SetScope::Project)
        );
        assert_eq!(set(true, &[]).scope_for(ws, Some(in_b)), None);
        assert_eq!(set(true, &[]).scope_for(ws, None), None);
        assert_eq!(set(false, &[]).scope_for(ws, Some(in_a)), None);
        assert_eq!(
            set(false, &["ws-1"]).scope_for(ws, Some(in_a)),
            Some(SetScope::Workspace)
        );
        assert_eq!(set(false, &["ws-1"]).scope_for(ws, Some(in_b)), None);
        // By the project's name too.
        let by_name = VariableSetSpec {
            parent_project: Some("ALPHA".into()),
            ..set(true, &[])
        };
        assert_eq!(by_name.scope_for(ws, Some(in_a)), Some(SetScope::Project));
        // An organization's set, as before.
        let org = VariableSetSpec {
            parent_project: None,
            ..set(true, &[])
        };
        assert_eq!(org.scope_for(ws, Some(in_b)), Some(SetScope::Global));
    }
}
