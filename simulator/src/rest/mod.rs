//! The REST verbs' semantics on the store, independent of HTTP: create, update, patch,
//! delete, deletecollection, get and list.
//!
//! Each function takes the locked [`State`], the resolved resource and the request's
//! options, and either changes the store or answers an [`ApiError`]. The rules are
//! kube-apiserver's generic registry and its strategies: system metadata (`uid`,
//! `creationTimestamp`, `generation`, `resourceVersion`) belongs to the server; status
//! subresource separation; finalizers and `deletionTimestamp`; `fieldValidation`. Where a
//! kind differs (Pods, Namespaces, CRDs, custom resources' schemas, RBAC names) the verbs
//! ask its [`KindBehaviour`](crate::kinds::KindBehaviour) ([`crate::kinds`]); they name no kind themselves.

use crate::kinds;
use crate::meta;
use crate::resource::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use crate::store::{Obj, ObjKey, ResKey, State};
use base64::Engine;
use serde_json::{Value, json};
use std::sync::Arc;

mod delete;
mod list;
mod write;
use crate::meta::{DeleteOpts, finalizers, meta_mut, meta_of};
use crate::resource::{in_version, res_key};
use crate::status::qualified;
pub use delete::controller_delete;
pub use delete::delete;
pub use delete::delete_collection;
pub use list::ListOpts;
pub use list::ListPage;
pub use list::list;
pub use list::matches;
pub use list::matches_stored;
pub use write::create;
pub use write::patch;
pub use write::update;

/// `fieldValidation` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: Option<&str>) -> ApiResult<FieldValidation> {
        match s {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of: Ignore, Warn, Strict, got: {other}"
            ))),
        }
    }
}

/// Options every write carries.
#[derive(Clone, Debug, Default)]
pub struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: String,
    /// Whether `fieldManager` was given explicitly (required for apply).
    pub field_manager_given: bool,
    pub field_validation: FieldValidation,
}

impl WriteOpts {
    /// Records a write of `obj` by this request's field manager in its `managedFields`
    /// ([`meta::record_manager`]).
    pub fn record_manager(
        &self,
        obj: &mut Value,
        operation: &str,
        info: &ResourceInfo,
        subresource: Option<&str>,
        now: &str,
    ) {
        meta::record_manager(
            obj,
            &self.field_manager,
            operation,
            &info.api_version(),
            subresource,
            now,
        );
    }
}

/// What a write produced.
#[derive(Debug)]
pub struct WriteResult {
    pub object: Value,
    pub created: bool,
    /// `Warning` header texts (unknown fields under fieldValidation=Warn).
    pub warnings: Vec<String>,
}

impl WriteResult {
    /// A create's result.
    pub fn created(object: Value, warnings: Vec<String>) -> WriteResult {
        WriteResult {
            object,
            created: true,
            warnings,
        }
    }

    /// The result of a write to an object that already was there.
    pub fn updated(object: Value, warnings: Vec<String>) -> WriteResult {
        WriteResult {
            object,
            created: false,
            warnings,
        }
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta_of(obj)?.get(field)?.as_str()
}

fn check_type(body: &mut Value, info: &ResourceInfo) -> ApiResult<()> {
    let obj = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the object must be a JSON object"))?;
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the body ({k}) does not match the expected kind ({})",
            info.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str) {
        let group = av.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        if !av.is_empty() && group != info.group {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
    }
    obj.insert("apiVersion".into(), json!(info.api_version()));
    obj.insert("kind".into(), json!(info.kind));
    Ok(())
}

fn field_validation(opts: &WriteOpts, pruned: Vec<String>) -> ApiResult<Vec<String>> {
    if pruned.is_empty() {
        return Ok(Vec::new());
    }
    match opts.field_validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(pruned
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect()),
        FieldValidation::Strict => {
            let list: Vec<String> = pruned
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect();
            Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )))
        }
    }
}

fn invalid1(info: &ResourceInfo, name: &str, field: &str, reason: &str, msg: String) -> ApiError {
    ApiError::invalid(
        &qualified(info),
        name,
        &[(field.to_string(), reason.to_string(), msg)],
    )
}

fn key_for(info: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjKey {
    let ns = if info.namespaced {
        ns.unwrap_or("")
    } else {
        ""
    };
    (ns.to_string(), name.to_string())
}

/// GET of one object.
pub fn get(st: &State, info: &ResourceInfo, ns: Option<&str>, name: &str) -> ApiResult<Arc<Value>> {
    st.get(&res_key(info), &key_for(info, ns, name))
        .ok_or_else(|| ApiError::not_found(&qualified(info), name))
}

/// GET as stored (the text a client gets when it asks for the stored version).
pub fn get_stored(
    st: &State,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
) -> ApiResult<Arc<Obj>> {
    st.get_obj(&res_key(info), &key_for(info, ns, name))
        .ok_or_else(|| ApiError::not_found(&qualified(info), name))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies the apiserver's paged LIST cost: each page starts where the continue
    /// token points (no rescans), so paging through 100,000 objects is linear.
    #[test]
    fn paging_100k_is_linear() {
        let mut st = State::new(10_000, false);
        let info = st
            .registry
            .get("", "v1", "configmaps")
            .map(|i| (*i).clone());
        let Some(info) = info else {
            panic!("configmaps not registered");
        };
        let res = res_key(&info);
        for i in 0..100_000 {
            st.put(
                &res,
                json!({"metadata": {"namespace": "default", "name": format!("cm{i:06}")}}),
            );
        }
        let started = std::time::Instant::now();
        let mut opts = ListOpts {
            limit: Some(500),
            ..ListOpts::default()
        };
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let page = list(&st, &info, Some("default"), &opts).map_err(|e| e.message);
            let Ok(page) = page else {
                panic!("list failed");
            };
            seen += page.items.len();
            pages += 1;
            match page.continue_token {
                Some(t) => opts.continue_token = Some(t),
                None => break,
            }
        }
        assert_eq!((seen, pages), (100_000, 200));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    /// Copies `limit` semantics: no continue token when the page holds the rest.
    #[test]
    fn last_page_has_no_token() {
        let mut st = State::new(10, false);
        let Some(info) = st.registry.get("", "v1", "configmaps") else {
            panic!("configmaps not registered");
        };
        let res = res_key(&info);
        for n in ["a", "b"] {
            st.put(&res, json!({"metadata": {"namespace": "d", "name": n}}));
        }
        let opts = ListOpts {
            limit: Some(2),
            ..ListOpts::default()
        };
        let page = list(&st, &info, Some("d"), &opts).map_err(|e| e.message);
        assert!(page.is_ok_and(|p| p.items.len() == 2 && p.continue_token.is_none()));
    }
}
