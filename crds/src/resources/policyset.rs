//! Policy sets (TFE's OPA policy sets, docs/policies.md): Rego policies evaluated against
//! the plan of every run of the workspaces they apply to, and what a run recorded of
//! them ([`RunPolicyEvaluation`], in the run's status). The evaluation rules are in
//! [`crate::policy`].

use super::Named;
use crate::common::SecretKeyRef;

crd_kind! {
    /// OPA policies checked against the plan of each run of the workspaces the set
    /// applies to: globally, to the workspaces of some projects, or to some workspaces,
    /// less the excluded ones.
    #[kube(
        kind = "PolicySet",
        doc = "OPA policies checked against the plans of an organization's workspaces.",
        namespaced,
        status = "PolicySetStatus",
        shortname = "tfpolicyset",
        printcolumn = r#"{"name":"Global","type":"boolean","jsonPath":".spec.global"}"#,
        printcolumn = r#"{"name":"Overridable","type":"boolean","jsonPath":".spec.overridable"}"#,
        printcolumn = r#"{"name":"Policies","type":"integer","jsonPath":".status.policies"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
    )]
    columns: tfe_name, id, age;
    pub struct PolicySetSpec {
        /// The set's name, unique in the organization (letters, digits, `-`, `_`).
        #[schemars(length(min = 1, max = 90), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
        pub name: String,
        /// What the set is for.
        pub description: Option<String>,
        /// The policy language: `opa` (Sentinel is not offered).
        #[serde(default = "default_kind")]
        #[schemars(extend("enum" = ["opa"]))]
        pub kind: String,
        /// A failed mandatory policy of this set may be overridden (`POST
        /// /task-stages/:id/actions/override`, the `override-policy` verb on the workspace).
        #[serde(default)]
        pub overridable: bool,
        /// Applied to every workspace of the organization.
        #[serde(default)]
        pub global: bool,
        /// Workspaces (IDs `ws-…` or TFE names) the set applies to.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub workspaces: Vec<String>,
        /// Projects (IDs `prj-…` or names) whose workspaces the set applies to.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub projects: Vec<String>,
        /// Workspaces (IDs or names) the set never applies to, even when global or
        /// through a project.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub workspace_exclusions: Vec<String>,
        /// Projects (IDs or names) whose workspaces the set never applies to (unless it
        /// names the workspace itself), even when global.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub project_exclusions: Vec<String>,
        /// Policy objects (their object names, or IDs `pol-…`) the set checks besides its
        /// own `policies` (what the API's `relationships.policies` lists).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub policy_refs: Vec<String>,
        /// The set's own policies, each name once.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
        pub policies: Vec<PolicySetPolicy>,
        /// Parameters, `data.parameters.KEY` in the policies: a value that parses as JSON
        /// is that JSON value, any other is a string. Sensitive ones come from a Secret.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"]))]
        pub parameters: Vec<PolicySetParameter>,
    }
}

fn default_kind() -> String {
    "opa".to_owned()
}

crd_struct! {
    /// One policy of a set.
    #[schemars(transform = super::varset::without_defaults)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "has(self.rego) != has(self.regoFrom)", "message": "give exactly one of rego and regoFrom"}
    ]))]
    pub struct PolicySetPolicy {
        /// The policy's name, unique in the set.
        #[schemars(length(min = 1, max = 90), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
        pub name: String,
        /// What it checks (shown with its outcome).
        pub description: Option<String>,
        /// `advisory` (a failure warns) or `mandatory` (a failure stops the run before
        /// apply).
        #[serde(default = "default_enforcement")]
        #[schemars(extend("enum" = ["advisory", "mandatory"]))]
        pub enforcement_level: String,
        /// The query whose value decides, as in TFE (`data.terraform.policies.tags.deny`):
        /// undefined or empty passes, anything else fails with its entries as messages.
        #[schemars(length(min = 1))]
        pub query: String,
        /// The Rego module, inline.
        pub rego: Option<String>,
        /// The Rego module from a ConfigMap key in the same namespace.
        pub rego_from: Option<ConfigMapKeyRef>,
    }
}

fn default_enforcement() -> String {
    "advisory".to_owned()
}

crd_struct! {
    /// A key of a ConfigMap in the object's namespace.
    #[derive(Default, Eq)]
    pub struct ConfigMapKeyRef {
        /// Name of the ConfigMap.
        #[schemars(length(min = 1))]
        pub name: String,
        /// Key within its data.
        #[schemars(length(min = 1))]
        pub key: String,
    }
}

crd_struct! {
    /// A parameter of a policy set.
    #[schemars(transform = super::varset::without_defaults)]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!has(self.sensitive) || !self.sensitive || !has(self.value)", "message": "a sensitive parameter keeps its value in a Secret: use valueFrom, not value"},
        {"rule": "!(has(self.value) && has(self.valueFrom))", "message": "value and valueFrom cannot both be given"}
    ]))]
    pub struct PolicySetParameter {
        /// Its API ID (`var-…`); given by the API, derived from the set and the key when
        /// absent.
        pub id: Option<String>,
        /// The parameter's key.
        #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
        pub key: String,
        /// Its value (non-sensitive parameters).
        pub value: Option<String>,
        /// Its value from a Secret key.
        pub value_from: Option<SecretKeyRef>,
        /// Never shown again (its value must come from a Secret).
        #[serde(default)]
        pub sensitive: bool,
    }
}

kind_status! {
    /// What the operator found of a policy set: `Ready` is False with the compiler's
    /// words when a policy does not compile or its Rego cannot be read.
    pub struct PolicySetStatus {
        /// The set's ID (`polset-…`).
        pub id: Option<String>,
        /// How many policies the set has (its own and the referenced ones).
        pub policies: Option<i64>,
    }
}

crd_kind! {
    /// An OPA policy of the organization (TFE's policies API), checked by the policy sets
    /// that reference it (`policyRefs`).
    #[kube(
        kind = "Policy",
        doc = "An OPA policy of an organization, checked by the policy sets naming it.",
        namespaced,
        status = "PolicyStatus",
        shortname = "tfpolicy",
        printcolumn = r#"{"name":"Enforcement","type":"string","jsonPath":".spec.enforcementLevel"}"#,
        printcolumn = r#"{"name":"Query","type":"string","jsonPath":".spec.query","priority":1}"#
    )]
    columns: tfe_name, id, age;
    pub struct PolicySpec {
        /// The policy's name, unique in the organization (letters, digits, `-`, `_`, `.`).
        #[schemars(length(min = 1, max = 90), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
        pub name: String,
        /// What it checks.
        pub description: Option<String>,
        /// The policy language: `opa`.
        #[serde(default = "default_kind")]
        #[schemars(extend("enum" = ["opa"]))]
        pub kind: String,
        /// The query whose value decides (`data.terraform.deny`).
        #[schemars(length(min = 1))]
        pub query: String,
        /// `advisory` or `mandatory`.
        #[serde(default = "default_enforcement")]
        #[schemars(extend("enum" = ["advisory", "mandatory"]))]
        pub enforcement_level: String,
        /// The Rego module (what `PUT /policies/:id/upload` stores); none until uploaded.
        pub rego: Option<String>,
        /// The Rego module from a ConfigMap key in the same namespace (instead of `rego`).
        pub rego_from: Option<ConfigMapKeyRef>,
    }
}

kind_status! {
    /// Observed state of a policy.
    pub struct PolicyStatus {
        /// The policy's ID (`pol-…`).
        pub id: Option<String>,
    }
}

impl PolicySetParameter {
    /// Its ID: the one stored, else one derived from set `set_id` and the key.
    pub fn id_in(&self, set_id: &str) -> String {
        crate::ids::stored_or_stable(
            self.id.as_deref(),
            crate::ids::IdKind::WorkspaceVariable,
            &[set_id, "policy-set-parameter", &self.key],
        )
    }
}

impl PolicySet {
    /// Whether the set names Policy object `object` (or its ID `id`).
    pub fn references(&self, object: &str, id: Option<&str>) -> bool {
        self.spec
            .policy_refs
            .iter()
            .any(|r| r == object || Some(r.as_str()) == id)
    }
}

impl From<&PolicySpec> for PolicySetPolicy {
    /// A referenced policy as a set checks it.
    fn from(p: &PolicySpec) -> Self {
        PolicySetPolicy {
            name: p.name.clone(),
            description: p.description.clone(),
            enforcement_level: p.enforcement_level.clone(),
            query: p.query.clone(),
            rego: p.rego.clone(),
            rego_from: p.rego_from.clone(),
        }
    }
}

impl PolicySetSpec {
    /// Whether the set applies to workspace `ws` of project `project`: not excluded, and
    /// named, or global or through the project when the project is not excluded.
    pub fn applies_to(&self, ws: Named<'_>, project: Option<Named<'_>>) -> bool {
        if ws.listed_in(&self.workspace_exclusions) {
            return false;
        }
        if ws.listed_in(&self.workspaces) {
            return true;
        }
        let project_excluded = project.is_some_and(|p| p.listed_in(&self.project_exclusions));
        !project_excluded && (self.global || project.is_some_and(|p| p.listed_in(&self.projects)))
    }
}

crd_struct! {
    /// The policy checks of a run: each policy set that applied to its workspace when
    /// the plan was made, with its policies' outcomes (TFE's post-plan task stage).
    #[derive(Default)]
    pub struct RunPolicyEvaluation {
        /// When the policies were evaluated (RFC 3339).
        pub evaluated_at: String,
        /// The policy sets, in name order.
        #[serde(default)]
        pub sets: Vec<PolicySetResult>,
        /// Who overrode the failed mandatory policies (`user:NAME`).
        pub overridden_by: Option<String>,
        /// When they were overridden.
        pub overridden_at: Option<String>,
    }
}

crd_struct! {
    /// What one policy set came to in a run.
    pub struct PolicySetResult {
        /// The set's name.
        pub name: String,
        /// The PolicySet object's name.
        pub object: String,
        /// The set's description.
        pub description: Option<String>,
        /// Its mandatory failures may be overridden.
        #[serde(default)]
        pub overridable: bool,
        /// Why the set could not be evaluated at all (its Rego or a parameter could not
        /// be read); its policies then count as errored.
        pub error: Option<String>,
        /// Each policy's outcome.
        #[serde(default)]
        pub outcomes: Vec<PolicyResult>,
    }
}

crd_struct! {
    /// What one policy came to.
    pub struct PolicyResult {
        /// The policy's name.
        pub policy: String,
        /// Its description.
        pub description: Option<String>,
        /// `advisory` or `mandatory`.
        pub enforcement_level: String,
        /// The query evaluated.
        pub query: String,
        /// `passed`, `failed` or `errored`.
        pub status: String,
        /// The query's messages, or why it errored.
        #[serde(default)]
        pub output: Vec<String>,
    }
}
