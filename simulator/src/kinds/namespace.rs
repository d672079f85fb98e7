//! Namespaces, as their strategy and storage treat them: names are DNS-1123 labels, a new
//! Namespace gets the `kubernetes` finalizer in `spec`, phase `Active` and the
//! `kubernetes.io/metadata.name` label, and a deletion marks it `Terminating` and leaves
//! the rest to the namespace finalizer ([`crate::gc::finalize_namespace`]): the content
//! goes (honouring finalizers), then the Namespace. Objects cannot be created in a
//! missing or terminating namespace ([`check_open`]).

use super::KindBehaviour;
use crate::meta::{DeleteOpts, meta_mut};
use crate::resource::ResourceInfo;
use crate::resource::{in_version, res_key};
use crate::status::{ApiError, ApiResult, Qualified, qualified};
use crate::store::{ResKey, State};
use serde_json::{Value, json};

/// The namespaces a cluster starts with.
pub const DEFAULTS: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

pub(crate) fn res() -> ResKey {
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
