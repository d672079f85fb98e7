//! Policies and policy sets (TFE's OPA policies API, docs/policies.md): Policy and
//! PolicySet objects in the organization's namespace, declared with kubectl or GitOps or
//! managed here.
//!
//! - `GET/POST /organizations/:org/policies`, `GET/PATCH/DELETE /policies/:id`,
//!   `PUT /policies/:id/upload` (the Rego, compiled when stored: 422 with the compiler's
//!   words), `GET /policies/:id/download`;
//! - `GET/POST /organizations/:org/policy-sets`, `GET/PATCH/DELETE /policy-sets/:id`,
//!   `POST/DELETE /policy-sets/:id/relationships/{policies,workspaces,projects,
//!   workspace-exclusions,project-exclusions}`;
//! - `GET/POST /policy-sets/:id/parameters`, `GET/PATCH/DELETE
//!   /policy-sets/:id/parameters/:param_id` (a sensitive value goes into a Secret owned by
//!   the set and is never shown).
//!
//! Only OPA is offered: a Sentinel policy or set, or one from a VCS repository, is refused
//! with 422. Rights: `list`/`get`/`create`/`update`/`delete` on `policies` and
//! `policysets` in the organization's namespace.

use axum::body::Bytes;
use terrace_crds::common::SecretKeyRef;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{Policy, PolicySet, PolicySetParameter, PolicySetSpec, PolicySpec};

use crate::index::Inner;
use crate::prelude::*;
use crate::relations::{
    ProjectEntry, Related, WorkspaceEntry, ids_of, linkage, related_ids, unique_name,
};

mod parameters;
mod policy;
mod sets;

use parameters::*;
use policy::*;
use sets::*;

const POLICIES: &str = "policies";
const SETS: &str = "policysets";
const NOT_YOURS: &str = "not authorized to change this policy";
const SET_NOT_YOURS: &str = "not authorized to change this policy set";
/// Key of a sensitive parameter's value in its Secret.
const PARAMETER_SECRET_KEY: &str = "value";

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "policies",
        get(list_policies).post(create_policy),
        get(crate::listing::show::<Policy>)
            .patch(update_policy)
            .delete(remove_policy),
    )
    .route("/api/v2/policies/{id}/upload", put(upload))
    .route("/api/v2/policies/{id}/download", get(download))
    .merge(crate::read_only::org_scoped(
        "policy-sets",
        get(list_sets).post(create_set),
        get(crate::listing::show::<PolicySet>)
            .patch(update_set)
            .delete(remove_set),
    ))
    .route(
        "/api/v2/policy-sets/{id}/relationships/policies",
        post(relate_policies::<true>).delete(relate_policies::<false>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/workspaces",
        post(relate::<WorkspaceEntry, true, false>).delete(relate::<WorkspaceEntry, false, false>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/workspace-exclusions",
        post(relate::<WorkspaceEntry, true, true>).delete(relate::<WorkspaceEntry, false, true>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/projects",
        post(relate::<ProjectEntry, true, false>).delete(relate::<ProjectEntry, false, false>),
    )
    .route(
        "/api/v2/policy-sets/{id}/relationships/project-exclusions",
        post(relate::<ProjectEntry, true, true>).delete(relate::<ProjectEntry, false, true>),
    )
    .route(
        "/api/v2/policy-sets/{id}/tag-selectors",
        post(tag_selectors).delete(tag_selectors),
    )
    .route(
        "/api/v2/policy-sets/{id}/parameters",
        get(list_parameters).post(create_parameter),
    )
    .route(
        "/api/v2/policy-sets/{id}/parameters/{param}",
        get(show_parameter)
            .patch(update_parameter)
            .delete(remove_parameter),
    )
}

// ---- policies ----

#[cfg(test)]
mod tests;
