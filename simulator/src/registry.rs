//! The resource registry: which group/version/resource paths are served, and how.
//!
//! Built-in kinds are listed here once (what they do beyond the generic verbs is their
//! [`crate::kinds::KindBehaviour`]); custom kinds enter and leave when
//! CustomResourceDefinition objects are written and deleted ([`crate::kinds::crd`]). The store asks the registry
//! for the [`ResourceInfo`] behind a request path; discovery and OpenAPI read the whole
//! list. Objects of all versions of one resource share storage, keyed by (group, plural).

use crate::resource::ResourceInfo;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Built-in kinds: (group, version, kind, plural, namespaced, short names, status subresource, categories).
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    &'static [&'static str],
);

const BUILTINS: &[Builtin] = &[
    (
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        true,
        &[],
    ),
    ("", "v1", "Pod", "pods", true, &["po"], true, &["all"]),
    ("", "v1", "Secret", "secrets", true, &[], false, &[]),
    (
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        true,
        &["cm"],
        false,
        &[],
    ),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        true,
        &["sa"],
        false,
        &[],
    ),
    ("", "v1", "Event", "events", true, &["ev"], false, &[]),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        true,
        &["ev"],
        false,
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        false,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        true,
        &[],
        false,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
        &[],
        false,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
        &[],
        false,
        &[],
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        &[],
        false,
        &[],
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
        &["crd", "crds"],
        true,
        &["api-extensions"],
    ),
];

/// The served resources, in discovery order.
#[derive(Clone, Default)]
pub struct Registry {
    /// (group, version, plural) → info.
    by_gvr: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    /// Groups in the order they were first registered (built-ins first), with their
    /// versions in preference order.
    groups: Vec<(String, Vec<String>)>,
}

impl Registry {
    pub fn with_builtins() -> Registry {
        let mut r = Registry::default();
        for &(group, version, kind, plural, namespaced, short, status, cats) in BUILTINS {
            let mut info = ResourceInfo {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                list_kind: format!("{kind}List"),
                plural: plural.into(),
                singular: kind.to_lowercase(),
                namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                categories: cats.iter().map(|s| s.to_string()).collect(),
                verbs: Vec::new(),
                schema: None,
                printer_columns: Vec::new(),
                status_subresource: status,
                custom: false,
            };
            info.verbs = crate::kinds::of(&info)
                .verbs()
                .iter()
                .map(|s| s.to_string())
                .collect();
            r.insert(info);
        }
        r
    }

    fn insert(&mut self, info: ResourceInfo) {
        let key = (
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        );
        match self.groups.iter_mut().find(|(g, _)| *g == info.group) {
            Some((_, versions)) => {
                if !versions.contains(&info.version) {
                    versions.push(info.version.clone());
                }
            }
            None => self
                .groups
                .push((info.group.clone(), vec![info.version.clone()])),
        }
        self.by_gvr.insert(key, Arc::new(info));
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Any served version of (group, plural), the first in preference order.
    pub fn any_version(&self, group: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let versions = self.versions(group)?;
        versions.iter().find_map(|v| self.get(group, v, plural))
    }

    /// The group's versions in preference order, if the group is served.
    pub fn versions(&self, group: &str) -> Option<&[String]> {
        self.groups
            .iter()
            .find(|(g, _)| g == group)
            .map(|(_, v)| v.as_slice())
    }

    pub fn groups(&self) -> &[(String, Vec<String>)] {
        &self.groups
    }

    /// Every served resource of one group/version.
    pub fn resources_of(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.by_gvr
            .values()
            .filter(|i| i.group == group && i.version == version)
            .cloned()
            .collect()
    }

    pub fn all(&self) -> Vec<ResourceInfo> {
        self.by_gvr.values().map(|i| (**i).clone()).collect()
    }

    /// Removes every version of a custom resource (group, plural).
    pub fn remove_custom(&mut self, group: &str, plural: &str) {
        self.by_gvr
            .retain(|(g, _, p), info| !(g == group && p == plural && info.custom));
        let by_gvr = &self.by_gvr;
        for (g, versions) in self.groups.iter_mut() {
            versions.retain(|v| by_gvr.keys().any(|(gg, vv, _)| gg == g && vv == v));
        }
        self.groups.retain(|(_, versions)| !versions.is_empty());
    }

    /// Registers the served versions of a CRD, replacing what it registered before.
    pub fn register_crd(&mut self, infos: Vec<ResourceInfo>) {
        if let Some(first) = infos.first() {
            let (g, p) = (first.group.clone(), first.plural.clone());
            self.remove_custom(&g, &p);
        }
        for info in infos {
            self.insert(info);
        }
        // Keep the versions of each group ordered as kube-apiserver prefers them.
        for (_, versions) in self.groups.iter_mut() {
            versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
    }
}

/// Orders versions as apimachinery's `version.CompareKubeAwareVersionStrings`:
/// GA > beta > alpha, then higher numbers first; non-Kubernetes versions last.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<u32>() {
        Ok(n) => (level, major, n),
        Err(_) => (0, 0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies apimachinery's kube-aware version ordering used for group version priority.
    #[test]
    fn version_ordering() {
        let mut v = vec!["v1alpha1", "v2", "v1beta1", "v1", "foo", "v1beta2"];
        v.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(v, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
