//! Workspace variables: the Terraform and environment variables of a workspace's runs
//! (TFE's workspace variables, JSON:API type `vars`).

use sha2::{Digest, Sha256};

use super::secret_value_rules;
use crate::rules::VariableCategory;

crd_kind! {
    /// A variable of a workspace's runs: a Terraform input variable (`category: terraform`)
    /// or an environment variable (`category: env`). Sensitive values live in a Secret
    /// (valueFrom), never in the spec.
    #[kube(
        kind = "WorkspaceVariable",
        doc = "A Terraform or environment variable of a workspace's runs.",
        namespaced,
        status = "WorkspaceVariableStatus",
        shortname = "tfwsvar",
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".spec.workspace"}"#,
        printcolumn = r#"{"name":"Key","type":"string","jsonPath":".spec.key"}"#,
        printcolumn = r#"{"name":"Category","type":"string","jsonPath":".spec.category"}"#,
        printcolumn = r#"{"name":"Sensitive","type":"boolean","jsonPath":".spec.sensitive"}"#
    )]
    columns: age, wide_id;
    #[schemars(extend("x-kubernetes-validations" = secret_value_rules(&[
        ("!self.hcl || self.category == 'terraform'",
         "hcl is only allowed for terraform variables: environment variables cannot be HCL"),
        ("self.category != 'env' || self.key.matches('^[A-Za-z_][A-Za-z0-9_]*$')",
         "an environment variable's key must begin with a letter or underscore and contain only letters, numbers and underscores"),
        ("self.workspace == oldSelf.workspace",
         "a variable cannot move to another workspace"),
    ])))]
    pub struct WorkspaceVariableSpec {
        /// Name of the Workspace object (`metadata.name`, same namespace) the variable
        /// belongs to.
        #[schemars(length(min = 1))]
        pub workspace: String,
        /// Variable name. Terraform variables: an identifier (a letter or underscore, then
        /// letters, digits, underscores, dashes); environment variables: letters, digits and
        /// underscores, not starting with a digit.
        #[schemars(regex(pattern = r"^[A-Za-z0-9_][A-Za-z0-9_-]*$"), length(min = 1))]
        pub key: String,
        @variable_value;
        /// `terraform` (an input variable of the configuration) or `env` (an environment
        /// variable of the run).
        #[serde(default = "default_category")]
        #[schemars(extend("enum" = ["terraform", "env"]))]
        pub category: String,
        /// Whether the value is an expression of the configuration language (HCL) rather than
        /// a string; terraform variables only.
        #[serde(default)]
        pub hcl: bool,
        /// When true the value is write-once and never shown again.
        #[serde(default)]
        pub sensitive: bool,
    }
}

fn default_category() -> String {
    VariableCategory::Terraform.as_str().to_owned()
}

kind_status! {
    /// Observed state of a workspace variable.
    pub struct WorkspaceVariableStatus {
        /// The variable's ID (`var-…`).
        pub id: Option<String>,
    }
}

impl WorkspaceVariableSpec {
    /// The category, if it is one of `terraform` and `env` (the schema's enum).
    pub fn category(&self) -> Option<VariableCategory> {
        VariableCategory::parse(&self.category).ok()
    }

    /// TFE's `version-id`: a digest of everything that makes up the variable (key, value
    /// or where the value lives, description, category, hcl, sensitive) and of
    /// `value_revision`, which stands for a sensitive value (a token written with each
    /// new sensitive value; the value itself never enters the digest). Any change gives
    /// a new version ID; 32 hex characters.
    pub fn version_id(&self, value_revision: Option<&str>) -> String {
        let mut h = Sha256::new();
        let (from_name, from_key) = self
            .value_from
            .as_ref()
            .map_or(("", ""), |r| (r.name.as_str(), r.key.as_str()));
        for part in [
            self.key.as_str(),
            self.value.as_str(),
            from_name,
            from_key,
            self.description.as_deref().unwrap_or_default(),
            self.category.as_str(),
            if self.hcl { "hcl" } else { "string" },
            if self.sensitive { "sensitive" } else { "plain" },
            value_revision.unwrap_or_default(),
        ] {
            // Length-prefixed, so no two different inputs give the same byte stream.
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        let digest = h.finalize();
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::SecretKeyRef;

    fn spec() -> WorkspaceVariableSpec {
        WorkspaceVariableSpec {
            workspace: "prod".into(),
            key: "region".into(),
            value: "eu".into(),
            category: "terraform".into(),
            ..Default::default()
        }
    }

    #[test]
    fn serde_defaults_are_terraform_and_plain() {
        let s: WorkspaceVariableSpec =
            serde_json::from_value(serde_json::json!({"workspace": "w", "key": "k"}))
                .unwrap_or_default();
        assert_eq!(s.category, "terraform");
        assert_eq!(s.category(), Some(VariableCategory::Terraform));
        assert_eq!((s.value.as_str(), s.hcl, s.sensitive), ("", false, false));
        let v = serde_json::to_value(&s).unwrap_or_default();
        assert!(v.get("valueFrom").is_none() && v.get("description").is_none());
    }

    /// Every attribute takes part in the version ID; a sensitive value through its
    /// revision token only.
    #[test]
    fn version_id_changes_with_every_attribute() {
        let base = spec().version_id(None);
        assert_eq!(base.len(), 32);
        assert_eq!(base, spec().version_id(None), "deterministic");
        let variants: Vec<WorkspaceVariableSpec> = vec![
            WorkspaceVariableSpec {
                key: "zone".into(),
                ..spec()
            },
            WorkspaceVariableSpec {
                value: "us".into(),
                ..spec()
            },
            WorkspaceVariableSpec {
                description: Some("d".into()),
                ..spec()
            },
            WorkspaceVariableSpec {
                category: "env".into(),
                ..spec()
            },
            WorkspaceVariableSpec {
                hcl: true,
                ..spec()
            },
            WorkspaceVariableSpec {
                sensitive: true,
                value: String::new(),
                value_from: Some(SecretKeyRef {
                    name: "s".into(),
                    key: "value".into(),
                }),
                ..spec()
            },
        ];
        for v in &variants {
            assert_ne!(v.version_id(None), base, "{v:?}");
        }
        assert_ne!(spec().version_id(Some("r1")), base);
        assert_ne!(spec().version_id(Some("r1")), spec().version_id(Some("r2")));
        // Parts are delimited: moving a character between parts changes the digest.
        let a = WorkspaceVariableSpec {
            key: "ab".into(),
            value: "c".into(),
            ..spec()
        };
        let b = WorkspaceVariableSpec {
            key: "a".into(),
            value: "bc".into(),
            ..spec()
        };
        assert_ne!(a.version_id(None), b.version_id(None));
    }
}
