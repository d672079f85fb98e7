//! Namespaces, as their strategy and storage treat them: names are DNS-1123 labels, a new
//! Namespace gets the `kubernetes` finalizer in `spec`, phase `Active` and the
//! `kubernetes.io/metadata.name` label, and a deletion marks it `Terminating` and leaves
//! the rest to the namespace finalizer ([`finalize`], run by [`crate::gc`]): the content
//! goes (honouring finalizers), then the Namespace. Objects cannot be created in a
//! missing or terminating namespace ([`check_open`]).

use super::KindBehaviour;
use crate::resource::ResourceInfo;
use crate::rest::{DeleteOpts, WriteOpts, in_version, meta_mut, qualified, res_key};
use crate::status::{ApiError, ApiResult, Qualified};
use crate::store::{ObjKey, ResKey, State};
use serde_json::{Value, json};

/// The namespaces a cluster starts with.
pub const DEFAULTS: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

fn res() -> ResKey {
    (String::new(), "namespaces".into())
}

/// Core `v1` Namespaces.
pub struct Namespaces;

impl KindBehaviour for Namespaces {
    /// No `deletecollection`: the Namespace storage is not a collection deleter.
    fn verbs(&self) -> &'static [&'static str] {
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ]
    }

    fn validate_name(&self, name: &str) -> Option<String> {
        crate::meta::validate_label_name(name)
    }

    fn prepare_for_create(&self, _: &ResourceInfo, obj: &mut Value, name: &str) -> ApiResult<()> {
        if let Some(m) = obj.as_object_mut() {
            m.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            m.insert("status".into(), json!({"phase": "Active"}));
        }
        let m = meta_mut(obj)?;
        let labels = m.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
        Ok(())
    }

    /// `Terminating` at once; [`finalize`] deletes the content, then the Namespace. A
    /// Namespace already terminating is answered as it is.
    fn delete(
        &self,
        st: &mut State,
        info: &ResourceInfo,
        old: &Value,
        _opts: &DeleteOpts,
    ) -> Option<ApiResult<Value>> {
        if super::being_deleted(old) {
            return None;
        }
        let mut o = old.clone();
        let m = match meta_mut(&mut o) {
            Ok(m) => m,
            Err(e) => return Some(Err(e)),
        };
        m.insert(
            "deletionTimestamp".into(),
            json!(crate::meta::now_rfc3339()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        o["status"] = json!({"phase": "Terminating"});
        let name = crate::store::obj_key(old).1;
        let stored = st.put(&res_key(info), o);
        st.terminating.insert(name);
        Some(Ok(in_version(&stored, info)))
    }
}

/// Whether `info`'s objects may be created in namespace `ns`: 404 when it does not
/// exist, 403 (`NamespaceTerminating`) while it is being deleted.
pub fn check_open(st: &State, info: &ResourceInfo, ns: &str, name: &str) -> ApiResult<()> {
    if !info.namespaced {
        return Ok(());
    }
    let nsq = Qualified {
        group: String::new(),
        plural: "namespaces".into(),
        kind: "Namespace".into(),
    };
    match st.get_obj(&res(), &(String::new(), ns.into())) {
        None => Err(ApiError::not_found(&nsq, ns)),
        Some(n) if n.is_deleting() => Err(ApiError::forbidden(
            format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                qualified(info).resource(),
                name,
            ),
        )
        .with_details(json!({"causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]}))),
        Some(_) => Ok(()),
    }
}

/// Creates the [`DEFAULTS`] that are missing (at open, as kube-apiserver's
/// system-namespaces controller does).
pub fn create_defaults(st: &mut State) -> Result<(), String> {
    let info = st
        .registry
        .get("", "v1", "namespaces")
        .ok_or_else(|| "namespaces not registered".to_string())?;
    for ns in DEFAULTS {
        if !st.contains(&res(), &(String::new(), ns.into())) {
            let opts = WriteOpts {
                field_manager: "kube-apiserver".into(),
                ..Default::default()
            };
            crate::rest::create(
                st,
                &info,
                None,
                json!({"metadata": {"name": ns}}),
                &opts,
                "Update",
            )
            .map_err(|e| e.message)?;
        }
    }
    Ok(())
}

/// The namespace finalizer's pass over one terminating namespace: deletes its content
/// (honouring finalizers); once nothing is left, removes the Namespace unless its own
/// `metadata.finalizers` still hold it (their owner removes them, and the update path
/// then deletes it).
pub fn finalize(st: &mut State, ns: &str) {
    let mut remaining = 0usize;
    let resources: Vec<ResKey> = st.data.keys().cloned().collect();
    for r in resources {
        let keys: Vec<(ObjKey, bool)> = st
            .range(&r, Some(ns), None)
            .map(|(k, o)| (k.clone(), o.is_deleting()))
            .collect();
        for (key, deleting) in keys {
            if !deleting {
                crate::rest::controller_delete(st, &r, &key);
            }
            if st.contains(&r, &key) {
                remaining += 1;
            }
        }
    }
    if remaining > 0 {
        return;
    }
    let nkey: ObjKey = (String::new(), ns.to_string());
    st.terminating.remove(ns);
    let Some(obj) = st.get(&res(), &nkey) else {
        return;
    };
    let has_finalizers = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_finalizers {
        st.remove(&res(), &nkey);
    }
}
