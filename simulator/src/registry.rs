//! The resource registry: which group/version/resource paths are served, and how.
//!
//! Built-in kinds are listed here once; custom kinds enter and leave when
//! CustomResourceDefinition objects are written and deleted. The store asks the registry
//! for the [`ResourceInfo`] behind a request path; discovery and OpenAPI read the whole
//! list. Objects of all versions of one resource share storage, keyed by (group, plural).

use crate::resource::{PrinterColumn, ResourceInfo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

const ALL_VERBS: [&str; 8] = [
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
    /// Extra paths that are served but not resources of their own (`pods/status`).
    extra_subresources: BTreeMap<(String, String, String), Vec<String>>,
}

impl Registry {
    pub fn with_builtins() -> Registry {
        let mut r = Registry::default();
        for &(group, version, kind, plural, namespaced, short, status, cats) in BUILTINS {
            let mut verbs: Vec<String> = ALL_VERBS.iter().map(|s| s.to_string()).collect();
            if plural == "namespaces" {
                verbs.retain(|v| v != "deletecollection");
            }
            let info = ResourceInfo {
                group: group.into(),
                version: version.into(),
                kind: kind.into(),
                list_kind: format!("{kind}List"),
                plural: plural.into(),
                singular: kind.to_lowercase(),
                namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                categories: cats.iter().map(|s| s.to_string()).collect(),
                verbs,
                schema: None,
                printer_columns: Vec::new(),
                status_subresource: status,
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

    pub fn subresources(&self, info: &ResourceInfo) -> Vec<String> {
        let mut subs = Vec::new();
        if info.status_subresource {
            subs.push("status".to_string());
        }
        if let Some(extra) = self.extra_subresources.get(&(
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        )) {
            subs.extend(extra.iter().cloned());
        }
        subs
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

/// The served versions of a CRD object as [`ResourceInfo`]s, or a list of
/// `(field, message)` problems when the CRD is not acceptable.
pub fn crd_to_infos(crd: &Value) -> Result<Vec<ResourceInfo>, Vec<(String, String)>> {
    let mut errs = Vec::new();
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
    let group = s(&spec, "/group").unwrap_or_default();
    let plural = s(&spec, "/names/plural").unwrap_or_default();
    let kind = s(&spec, "/names/kind").unwrap_or_default();
    if group.is_empty() {
        errs.push(("spec.group".into(), "Required value".into()));
    }
    if plural.is_empty() {
        errs.push(("spec.names.plural".into(), "Required value".into()));
    }
    if kind.is_empty() {
        errs.push(("spec.names.kind".into(), "Required value".into()));
    }
    let name = s(crd, "/metadata/name").unwrap_or_default();
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        errs.push((
            "metadata.name".into(),
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let scope = s(&spec, "/scope").unwrap_or_default();
    if scope != "Namespaced" && scope != "Cluster" {
        errs.push((
            "spec.scope".into(),
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        errs.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage_count = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        errs.push((
            "spec.versions".into(),
            "Invalid value: must have exactly one version marked as storage version".into(),
        ));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let strings = |p: &str| -> Vec<String> {
        spec.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = s(&spec, "/names/singular").unwrap_or_else(|| kind.to_lowercase());
    let list_kind = s(&spec, "/names/listKind").unwrap_or_else(|| format!("{kind}List"));
    let mut infos = Vec::new();
    for v in &versions {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let version = s(v, "/name").unwrap_or_default();
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: s(c, "/name").unwrap_or_default(),
                        type_: s(c, "/type").unwrap_or_else(|| "string".into()),
                        format: s(c, "/format").unwrap_or_default(),
                        description: s(c, "/description").unwrap_or_default(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
                        json_path: s(c, "/jsonPath").unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        infos.push(ResourceInfo {
            group: group.clone(),
            version,
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced: scope == "Namespaced",
            short_names: strings("/names/shortNames"),
            categories: strings("/names/categories"),
            verbs: ALL_VERBS.iter().map(|s| s.to_string()).collect(),
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
            printer_columns: columns,
            status_subresource: v.pointer("/subresources/status").is_some(),
            custom: true,
        });
    }
    Ok(infos)
}

/// The status kube-apiserver's CRD controllers give an accepted CRD.
pub fn crd_status(crd: &Value, now: &str) -> Value {
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted = names.clone();
    if accepted.get("singular").is_none()
        && let Some(k) = names.get("kind").and_then(Value::as_str)
    {
        accepted["singular"] = json!(k.to_lowercase());
    }
    if accepted.get("listKind").is_none()
        && let Some(k) = names.get("kind").and_then(Value::as_str)
    {
        accepted["listKind"] = json!(format!("{k}List"));
    }
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let mut stored_versions: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in stored {
        if !stored_versions.contains(&v) {
            stored_versions.push(v);
        }
    }
    json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "storedVersions": stored_versions,
    })
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

    /// Copies apiextensions validation: a CRD's name must be `<plural>.<group>`.
    #[test]
    fn crd_name_must_match() {
        let crd = json!({"metadata": {"name": "x.example.com"}, "spec": {"group": "example.com",
            "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let errs = crd_to_infos(&crd).err().unwrap_or_default();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "metadata.name");
    }
}
