//! Component identities as a Helm install gives them, for tests that run terrace's
//! components under exactly the chart's RBAC: the rules of a chart template's
//! ClusterRole ([`chart_cluster_role_rules`]) and a client of a ServiceAccount bound
//! cluster-wide by them ([`crate::Simulator::service_account_client`]).

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The rules of the first ClusterRole of a chart template (the text up to its first
/// `---`), with the template's own lines (`{{ … }}` alone on a line) dropped.
pub fn chart_cluster_role_rules(template: &str) -> Result<Vec<PolicyRule>, String> {
    let role = template.split("\n---").next().unwrap_or_default();
    let rules = role
        .split_once("\nrules:\n")
        .map(|(_, r)| r)
        .ok_or("the template has no rules")?;
    let yaml: Vec<&str> = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with("{{"))
        .collect();
    serde_saphyr::from_str(&yaml.join("\n")).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_read_without_the_template_lines() {
        let t = "{{- if x }}\nkind: ClusterRole\nrules:\n  # a comment\n  - apiGroups: [\"\"]\n    resources: [\"pods\"]\n    verbs: [\"get\"]\n{{- end }}\n---\nkind: ClusterRoleBinding\n";
        let rules = chart_cluster_role_rules(t).unwrap_or_default();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, vec!["get".to_owned()]);
    }
}
