//! Per-kind behaviour behind one hook: what a kind does beyond the generic registry's
//! verbs, as kube-apiserver's per-kind REST strategies and storages do.
//!
//! The verbs in [`crate::rest`] and the routing in [`crate::server`] are generic: at each
//! point where a kind may differ they ask the kind's [`KindBehaviour`], which [`of`] finds
//! by (group, plural). The default methods are the generic registry's behaviour, so a
//! kind implements only where it differs:
//!
//! | kind | module | differs in |
//! |---|---|---|
//! | Pod | [`pod`] | generation, initial status, graceful deletion, `pods/log` |
//! | Namespace | [`namespace`] | label names, initial spec/status/label, deletion (Terminating, then finalized) |
//! | CustomResourceDefinition | [`crd`] | generation, validation, status, registering and dropping its kind |
//! | RBAC kinds | [`rbac`] | path-segment names |
//! | custom resources | [`custom`] | generation, schema (defaulting, pruning, validation), status on create, resourceVersion required on update, no strategic merge |
//!
//! Every other built-in kind (Secret, ConfigMap, ServiceAccount, Event, Lease) is
//! [`Generic`].

pub mod crd;
pub mod custom;
pub mod event;
pub mod namespace;
pub mod pod;
pub mod rbac;

use crate::Shared;
use crate::meta::DeleteOpts;
use crate::resource::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use crate::store::State;
use axum::response::Response;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// The switches of a kind's REST strategy that the generic writes read.
#[derive(Clone, Copy, Debug)]
pub struct WriteRules {
    /// Whether writes maintain `metadata.generation` (1 on create, +1 when anything
    /// outside metadata — and status, with a status subresource — changes, and when
    /// `deletionTimestamp` is set).
    pub tracks_generation: bool,
    /// Whether an update without `metadata.resourceVersion` is accepted (the strategy's
    /// `AllowUnconditionalUpdate`).
    pub unconditional_update: bool,
    /// Whether strategic merge patches apply.
    pub strategic_merge: bool,
}

impl WriteRules {
    /// The generic registry's: no generation, unconditional updates and strategic merge
    /// patches accepted (built-in kinds).
    pub const GENERIC: WriteRules = WriteRules {
        tracks_generation: false,
        unconditional_update: true,
        strategic_merge: true,
    };
}

/// What one kind does at the points where the generic verbs let kinds differ. Every
/// method has the generic registry's behaviour as its default.
pub trait KindBehaviour: Send + Sync {
    /// Verbs advertised in discovery. Default: all eight.
    fn verbs(&self) -> &'static [&'static str] {
        &crate::registry::ALL_VERBS
    }

    /// Checks `metadata.name` on create: `None` when valid, else the field error
    /// (`metadata.name: Invalid value: …`). Default: a DNS-1123 subdomain.
    fn validate_name(&self, name: &str) -> Option<String> {
        crate::meta::validate_subdomain_name(name)
    }

    /// How the generic writes treat the kind. Default: [`WriteRules::GENERIC`].
    fn write_rules(&self) -> WriteRules {
        WriteRules::GENERIC
    }

    /// Sets the fields the server owns on a new object (the strategy's
    /// `PrepareForCreate`), after the generic metadata (name, namespace, uid, timestamps).
    fn prepare_for_create(
        &self,
        _info: &ResourceInfo,
        _obj: &mut Value,
        _name: &str,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// Defaults, prunes and validates a created (`old` is `None`) or updated object;
    /// answers the pruned unknown fields (for `fieldValidation`) or a 422. Default:
    /// nothing to check.
    fn validate(
        &self,
        _info: &ResourceInfo,
        _obj: &mut Value,
        _old: Option<&Value>,
        _name: &str,
    ) -> ApiResult<Vec<String>> {
        Ok(Vec::new())
    }

    /// The last step before a create or update (not a dry run) is stored: may refuse it
    /// or change the store (a CRD registers its kind and gets its status here).
    fn before_store(
        &self,
        _st: &mut State,
        _info: &ResourceInfo,
        _obj: &mut Value,
        _name: &str,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// A kind whose deletion is its own: `Some` answers a delete (not a dry run) instead
    /// of the generic path; see [`being_deleted`] for a delete of an object already
    /// being deleted, which the generic path answers with the object unchanged. Default:
    /// `None`.
    fn delete(
        &self,
        _st: &mut State,
        _info: &ResourceInfo,
        _old: &Value,
        _opts: &DeleteOpts,
    ) -> Option<ApiResult<Value>> {
        None
    }

    /// The grace period of a deletion (the strategy's `CheckGracefulDelete`): above 0 the
    /// object stays with `deletionTimestamp` until whoever runs it removes it. Default: 0.
    fn grace_period(&self, _obj: &Value, _opts: &DeleteOpts) -> i64 {
        0
    }

    /// After an object is removed for good by a delete.
    fn after_remove(&self, _st: &mut State, _last: &Value) {}

    /// Read-only subresources besides `status` (GET only), for routing and discovery.
    fn read_subresources(&self) -> &'static [&'static str] {
        &[]
    }

    /// Answers a GET of one of [`KindBehaviour::read_subresources`] of `obj`.
    fn get_subresource(
        &self,
        _shared: &Arc<Shared>,
        _sub: &str,
        _obj: Arc<Value>,
        _query: &HashMap<String, String>,
    ) -> ApiResult<Response> {
        Err(ApiError::page_not_found())
    }
}

/// A built-in kind stored as the generic registry stores it.
pub struct Generic;

impl KindBehaviour for Generic {}

/// The built-in kinds that differ from [`Generic`], by (group, plural).
static BUILTIN: &[(&str, &str, &dyn KindBehaviour)] = &[
    ("", "pods", &pod::Pods),
    ("", "events", &event::Events),
    (event::GROUP, "events", &event::Events),
    ("", "namespaces", &namespace::Namespaces),
    (crd::GROUP, crd::PLURAL, &crd::Crds),
    (crate::store::RBAC_GROUP, "roles", &rbac::Rbac),
    (crate::store::RBAC_GROUP, "rolebindings", &rbac::Rbac),
    (crate::store::RBAC_GROUP, "clusterroles", &rbac::Rbac),
    (crate::store::RBAC_GROUP, "clusterrolebindings", &rbac::Rbac),
];

/// The behaviour of a served resource: a custom resource's, a built-in kind's own, or
/// [`Generic`].
pub fn of(info: &ResourceInfo) -> &'static dyn KindBehaviour {
    if info.custom {
        return &custom::CustomResources;
    }
    BUILTIN
        .iter()
        .find(|(g, p, _)| *g == info.group && *p == info.plural)
        .map_or(&Generic, |(_, _, b)| *b)
}

/// Whether `obj` is already being deleted (`metadata.deletionTimestamp` is set).
pub fn being_deleted(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some()
}
