//! Generation of the CustomResourceDefinitions from the Rust types. `terrace crds` prints
//! them; the committed copies under `charts/terrace/crds/` must equal the generated ones
//! (a test below fails when they drift).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::resources::*;

/// Every terrace CRD, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        Organization::crd(),
        Project::crd(),
        Workspace::crd(),
        RegistryModule::crd(),
        ConfigurationVersion::crd(),
        TestRun::crd(),
        TestVariable::crd(),
        WorkspaceVariable::crd(),
        SshKey::crd(),
        AgentPool::crd(),
        OAuthToken::crd(),
        NotificationConfiguration::crd(),
        ModuleVersion::crd(),
        StateVersion::crd(),
        Run::crd(),
        VariableSet::crd(),
        PolicySet::crd(),
        Policy::crd(),
    ]
}

/// The file name of a CRD under `charts/terrace/crds/`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// One CRD as a YAML document.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(crd)
}

/// Every CRD as one multi-document YAML stream (what `terrace crds` prints).
pub fn all_crds_yaml() -> Result<String, serde_saphyr::ser::Error> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules;
    use serde_json::Value;
    use std::path::PathBuf;

    fn chart_crds_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/terrace/crds")
    }

    /// The committed CRD YAML is exactly what the code generates. To refresh it run
    /// `cargo run -p terrace -- crds --out-dir charts/terrace/crds`.
    #[test]
    fn committed_crds_match_generated() {
        let dir = chart_crds_dir();
        let mut expected: Vec<String> = Vec::new();
        for crd in all_crds() {
            let name = file_name(&crd);
            expected.push(name.clone());
            let committed = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            let generated = to_yaml(&crd).expect("serialize CRD");
            assert!(
                committed == generated,
                "charts/terrace/crds/{name} differs from the generated CRD; run \
                 `cargo run -p terrace -- crds --out-dir charts/terrace/crds`"
            );
        }
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .expect("charts/terrace/crds exists")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        present.sort();
        expected.sort();
        assert_eq!(
            present, expected,
            "stale or missing files in charts/terrace/crds"
        );
    }

    fn crd_json(kind: &str) -> Value {
        let crd = all_crds()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("no CRD of kind {kind}"));
        serde_json::to_value(crd).expect("CRD to JSON")
    }

    fn schema(kind: &str) -> Value {
        crd_json(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn every_kind_has_status_subresource_category_short_name_and_columns() {
        for crd in all_crds() {
            let v = serde_json::to_value(&crd).expect("json");
            let kind = crd.spec.names.kind.clone();
            assert_eq!(crd.spec.group, "terrace.dev");
            assert_eq!(v["spec"]["versions"][0]["name"], "v1alpha1", "{kind}");
            assert!(
                v["spec"]["versions"][0]["subresources"]["status"].is_object(),
                "{kind}"
            );
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&["terrace".to_owned()][..])
            );
            assert!(
                crd.spec
                    .names
                    .short_names
                    .as_ref()
                    .is_some_and(|s| !s.is_empty()),
                "{kind}"
            );
            let cols = v["spec"]["versions"][0]["additionalPrinterColumns"]
                .as_array()
                .cloned();
            assert!(
                cols.is_some_and(|c| c.iter().any(|c| c["name"] == "Age")),
                "{kind}"
            );
        }
        assert_eq!(Organization::crd().spec.scope, "Cluster");
        assert_eq!(Workspace::crd().spec.scope, "Namespaced");
    }

    /// `kubectl explain` documents every field: each property in every schema has a
    /// description (except the well-known apiVersion/kind/metadata and k8s-openapi types).
    #[test]
    fn every_spec_and_status_field_has_a_description() {
        fn walk(path: &str, s: &Value, missing: &mut Vec<String>) {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    let p = format!("{path}.{k}");
                    if v.get("description").is_none() {
                        missing.push(p.clone());
                    }
                    walk(&p, v, missing);
                }
            }
            if let Some(items) = s.get("items") {
                walk(&format!("{path}[]"), items, missing);
            }
        }
        let mut missing = Vec::new();
        for crd in all_crds() {
            let v = serde_json::to_value(&crd).expect("json");
            let root = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            for part in ["spec", "status"] {
                let kind = &crd.spec.names.kind;
                walk(
                    &format!("{kind}.{part}"),
                    &root["properties"][part],
                    &mut missing,
                );
            }
        }
        // k8s-openapi types (conditions, tolerations, resources) are documented upstream;
        // only our own fields are checked.
        missing.retain(|p| {
            !p.contains(".conditions[].")
                && !p.contains(".tolerations[].")
                && !p.contains(".resources.")
        });
        assert!(
            missing.is_empty(),
            "fields without description: {missing:#?}"
        );
    }

    #[test]
    fn crd_patterns_are_the_rules_patterns() {
        let ws = schema("Workspace");
        let spec = &ws["properties"]["spec"]["properties"];
        assert_eq!(spec["name"]["pattern"], rules::WORKSPACE_NAME_PATTERN);
        assert_eq!(
            spec["autoDestroyActivityDuration"]["pattern"],
            rules::AUTO_DESTROY_DURATION_PATTERN
        );
        assert_eq!(
            spec["vcsRepo"]["properties"]["identifier"]["pattern"],
            rules::VCS_IDENTIFIER_PATTERN
        );
        let prj = schema("Project");
        assert_eq!(
            prj["properties"]["spec"]["properties"]["autoDestroyActivityDuration"]["pattern"],
            rules::AUTO_DESTROY_DURATION_PATTERN
        );
        assert_eq!(
            spec["executionMode"]["enum"],
            serde_json::json!(["remote", "local", "agent"])
        );
        let var = schema("TestVariable");
        let vspec = &var["properties"]["spec"]["properties"];
        assert_eq!(vspec["key"]["pattern"], rules::TEST_VARIABLE_KEY_PATTERN);
        assert_eq!(
            vspec["category"]["enum"],
            serde_json::json!([rules::TEST_VARIABLE_CATEGORY])
        );
    }

    /// The workspace variable schema carries the rules of `rules`: the Terraform key
    /// pattern, the two categories, the env key pattern and the hcl rule as CEL, and the
    /// create defaults (category terraform, plain, not HCL).
    #[test]
    fn workspace_variable_schema_is_the_rules() {
        let var = schema("WorkspaceVariable");
        let spec = &var["properties"]["spec"];
        let props = &spec["properties"];
        assert_eq!(
            props["key"]["pattern"],
            rules::TERRAFORM_VARIABLE_KEY_PATTERN
        );
        let categories: Vec<&str> = rules::VariableCategory::ALL
            .iter()
            .map(|c| c.as_str())
            .collect();
        assert_eq!(props["category"]["enum"], serde_json::json!(categories));
        assert_eq!(props["category"]["default"], "terraform");
        assert_eq!(props["value"]["default"], "");
        assert_eq!(props["hcl"]["default"], false);
        assert_eq!(props["sensitive"]["default"], false);
        assert_eq!(props["description"]["maxLength"], 512);
        assert_eq!(props["workspace"]["minLength"], 1);
        let required: Vec<&str> = spec["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(required, ["key", "workspace"]);
        let cel: Vec<String> = spec["x-kubernetes-validations"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| r["rule"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(cel.len(), 6, "{cel:?}");
        assert!(
            cel.iter()
                .any(|r| r.contains(&format!("matches('{}')", rules::ENV_VARIABLE_KEY_PATTERN))),
            "{cel:?}"
        );
        assert!(cel.iter().any(|r| r.contains("self.hcl")), "{cel:?}");
        assert!(
            cel.iter().any(|r| r.contains("oldSelf.sensitive")),
            "{cel:?}"
        );
        let crd = crd_json("WorkspaceVariable");
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!(["tfwsvar"])
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let columns: Vec<&str> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(
            columns,
            ["Workspace", "Key", "Category", "Sensitive", "Age", "ID"]
        );
    }

    /// SPEC.md's workspace create defaults, as schema defaults where Kubernetes applies them.
    #[test]
    fn workspace_schema_defaults_are_spec_create_defaults() {
        let ws = schema("Workspace");
        let spec = &ws["properties"]["spec"]["properties"];
        let expect = [
            ("allowDestroyPlan", serde_json::json!(true)),
            ("assessmentsEnabled", serde_json::json!(false)),
            ("autoApply", serde_json::json!(false)),
            ("autoApplyRunTrigger", serde_json::json!(false)),
            ("fileTriggersEnabled", serde_json::json!(true)),
            ("globalRemoteState", serde_json::json!(false)),
            ("queueAllRuns", serde_json::json!(false)),
            ("speculativeEnabled", serde_json::json!(true)),
            ("triggerPatterns", serde_json::json!([])),
            ("triggerPrefixes", serde_json::json!([])),
        ];
        for (field, default) in expect {
            assert_eq!(spec[field]["default"], default, "{field}");
        }
        // No schema default where SPEC.md's default is "none" or depends on the request.
        for field in [
            "operations",
            "executionMode",
            "terraformVersion",
            "agentPoolId",
            "vcsRepo",
        ] {
            assert!(
                spec[field].get("default").is_none(),
                "{field} must not be defaulted"
            );
        }
        assert_eq!(
            spec["vcsRepo"]["properties"]["ingressSubmodules"]["default"],
            false
        );
        let tr = schema("TestRun");
        let trs = &tr["properties"]["spec"]["properties"];
        assert_eq!(trs["testDirectory"]["default"], "tests");
        assert_eq!(trs["verbose"]["default"], false);
        assert_eq!(trs["filters"]["default"], serde_json::json!([]));
        let var = schema("TestVariable");
        let vs = &var["properties"]["spec"]["properties"];
        assert_eq!(vs["value"]["default"], "");
        assert_eq!(vs["sensitive"]["default"], false);
        let required: Vec<&str> = var["properties"]["spec"]["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(
            required.contains(&"key") && required.contains(&"category"),
            "{required:?}"
        );
    }

    #[test]
    fn cross_field_rules_are_cel_validations() {
        let ws = schema("Workspace");
        let rules: Vec<String> = ws["properties"]["spec"]["x-kubernetes-validations"]
            .as_array()
            .expect("workspace spec has CEL rules")
            .iter()
            .filter_map(|r| r["rule"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(rules.len(), 5, "{rules:?}");
        assert!(rules.iter().any(|r| r.contains("projectRemoteState")));
        assert!(rules.iter().any(|r| r.contains("agentPoolId")));
        assert!(rules.iter().any(|r| r.contains("operations")));
        assert!(rules.iter().any(|r| r.contains("settingOverwrites")));
    }

    #[test]
    fn crds_yaml_roundtrips() {
        let yaml = all_crds_yaml().expect("yaml");
        // Separator lines only: a description may end in dashes ("rw-rw----").
        assert_eq!(
            yaml.lines().filter(|l| *l == "---").count(),
            all_crds().len()
        );
        for crd in all_crds() {
            let back: CustomResourceDefinition =
                serde_saphyr::from_str(&to_yaml(&crd).expect("yaml")).expect("parse back");
            assert_eq!(back, crd);
        }
    }
}
