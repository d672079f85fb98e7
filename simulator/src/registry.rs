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

/// A built-in kind, all at version `v1`. [`builtin`] gives the common case (namespaced,
/// no short names, no status subresource, no categories); the methods say what differs.
struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
    categories: &'static [&'static str],
}

const fn builtin(group: &'static str, kind: &'static str, plural: &'static str) -> Builtin {
    Builtin {
        group,
        kind,
        plural,
        namespaced: true,
        short_names: &[],
        status: false,
        categories: &[],
    }
}

impl Builtin {
    const fn cluster_scoped(self) -> Builtin {
        Builtin {
            namespaced: false,
            ..self
        }
    }

    const fn short(self, short_names: &'static [&'static str]) -> Builtin {
        Builtin {
            short_names,
            ..self
        }
    }

    const fn with_status(self) -> Builtin {
        Builtin {
            status: true,
            ..self
        }
    }

    const fn categories(self, categories: &'static [&'static str]) -> Builtin {
        Builtin { categories, ..self }
    }
}

const RBAC: &str = "rbac.authorization.k8s.io";

const BUILTINS: &[Builtin] = &[
    builtin("", "Namespace", "namespaces")
        .cluster_scoped()
        .short(&["ns"])
        .with_status(),
    builtin("", "Pod", "pods")
        .short(&["po"])
        .with_status()
        .categories(&["all"]),
    builtin("", "Secret", "secrets"),
    builtin("", "ConfigMap", "configmaps").short(&["cm"]),
    builtin("", "ServiceAccount", "serviceaccounts").short(&["sa"]),
    builtin("", "Event", "events").short(&["ev"]),
    builtin("events.k8s.io", "Event", "events").short(&["ev"]),
    builtin("coordination.k8s.io", "Lease", "leases"),
    builtin(RBAC, "Role", "roles"),
    builtin(RBAC, "RoleBinding", "rolebindings"),
    builtin(RBAC, "ClusterRole", "clusterroles").cluster_scoped(),
    builtin(RBAC, "ClusterRoleBinding", "clusterrolebindings").cluster_scoped(),
    builtin(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
    .cluster_scoped()
    .short(&["crd", "crds"])
    .with_status()
    .categories(&["api-extensions"]),
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
        for b in BUILTINS {
            let kind = b.kind;
            let info = ResourceInfo {
                group: b.group.into(),
                version: "v1".into(),
                kind: kind.into(),
                list_kind: format!("{kind}List"),
                plural: b.plural.into(),
                singular: kind.to_lowercase(),
                namespaced: b.namespaced,
                short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
                categories: b.categories.iter().map(|s| s.to_string()).collect(),
                schema: None,
                printer_columns: Vec::new(),
                status_subresource: b.status,
                custom: false,
            };
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
