//! CustomResourceDefinitions, as apiextensions-apiserver treats them: `generation` is
//! maintained; writing one validates its names and versions, refuses a plural a built-in
//! kind serves, registers every served version as a kind ([`crd_to_infos`]) and sets the
//! status its controllers would set ([`crd_status`]); deleting one drops its kind and
//! every object of it. On open, the stored CRDs register their kinds again
//! ([`register_stored`]).

use super::{KindBehaviour, WriteRules};
use crate::resource::{PrinterColumn, ResourceInfo};
use crate::status::qualified;
use crate::status::{ApiError, ApiResult};
use crate::store::{ObjKey, ResKey, State};
use serde_json::{Value, json};
use std::sync::Arc;

/// The API group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";
/// Their resource name.
pub const PLURAL: &str = "customresourcedefinitions";

/// `apiextensions.k8s.io/v1` CustomResourceDefinitions.
pub struct Crds;

impl KindBehaviour for Crds {
    fn write_rules(&self) -> WriteRules {
        WriteRules {
            tracks_generation: true,
            ..WriteRules::GENERIC
        }
    }

    /// Validates the CRD, registers its served versions and sets the status the CRD
    /// controllers would set.
    fn before_store(
        &self,
        st: &mut State,
        info: &ResourceInfo,
        obj: &mut Value,
        name: &str,
    ) -> ApiResult<()> {
        let invalid =
            |causes: &[(String, String, String)]| ApiError::invalid(&qualified(info), name, causes);
        let infos = crd_to_infos(obj).map_err(|errs| {
            let causes: Vec<(String, String, String)> = errs
                .into_iter()
                .map(|(f, m)| {
                    (
                        f.clone(),
                        "FieldValueInvalid".to_string(),
                        format!("{f}: {m}"),
                    )
                })
                .collect();
            invalid(&causes)
        })?;
        if let Some(first) = infos.first() {
            for existing in st.registry.all() {
                if existing.group == first.group
                    && existing.plural == first.plural
                    && !existing.custom
                {
                    return Err(invalid(&[(
                        "spec.names.plural".to_string(),
                        "FieldValueInvalid".to_string(),
                        format!(
                            "spec.names.plural: Invalid value: \"{}\": is served by a built-in resource",
                            first.plural
                        ),
                    )]));
                }
            }
        }
        let status = crd_status(obj, &crate::meta::now_rfc3339());
        if let Some(m) = obj.as_object_mut() {
            let keep_times = m.get("status").cloned();
            let mut status = status;
            // Keep the first transition times so a no-op write stays a no-op.
            if let (Some(old), Some(conds)) = (
                keep_times
                    .as_ref()
                    .and_then(|s| s.get("conditions"))
                    .and_then(Value::as_array),
                status.get_mut("conditions").and_then(Value::as_array_mut),
            ) {
                for c in conds.iter_mut() {
                    if let Some(prev) = old.iter().find(|o| o.get("type") == c.get("type"))
                        && let Some(t) = prev.get("lastTransitionTime")
                    {
                        c["lastTransitionTime"] = t.clone();
                    }
                }
            }
            m.insert("status".into(), status);
        }
        st.registry.register_crd(infos);
        Ok(())
    }

    /// A deleted CRD takes its kind and every object of it along (their finalizers are
    /// not honoured).
    fn after_remove(&self, st: &mut State, crd: &Value) {
        let s = |p: &str| {
            crd.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (group, plural) = (s("/spec/group"), s("/spec/names/plural"));
        let res: ResKey = (group.clone(), plural.clone());
        let keys: Vec<ObjKey> = st.range(&res, None, None).map(|(k, _)| k.clone()).collect();
        for k in keys {
            st.remove(&res, &k);
        }
        st.registry.remove_custom(&group, &plural);
    }
}

/// Registers the kinds of every stored CRD (after loading the store from disk).
pub fn register_stored(st: &mut State) {
    let crds: Vec<Arc<Value>> = st
        .data
        .get(&(GROUP.to_string(), PLURAL.to_string()))
        .map(|rd| rd.objects.values().map(|o| Arc::new(o.value())).collect())
        .unwrap_or_default();
    for crd in crds {
        if let Ok(infos) = crd_to_infos(&crd) {
            st.registry.register_crd(infos);
        }
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
    let strings = |p: &str| crate::meta::string_list(spec.pointer(p));
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
