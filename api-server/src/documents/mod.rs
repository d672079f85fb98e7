//! JSON:API representations of kinds that more than one resource shows (an organization
//! or a project in `included`, the data retention policy linkage of workspace and
//! organization documents, tag bindings of workspaces and projects) and the request
//! shapes more than one resource accepts (tag bindings, variables). Shaped after the vendor's OpenAPI schema so pytfe and go-tfe
//! parse them: relationships are `{"data": null}` rather than null, timestamps carry
//! milliseconds.

pub mod config_versions;
pub mod runs;
pub mod state;
pub mod variables;

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use terrace_crds::common::{DataRetentionPolicy, EffectiveTagBinding, TagBinding};
use terrace_crds::rules::validate_tag_binding;
use terrace_crds::{Organization, Project, Workspace};

use crate::ApiError;
use crate::body::{Identifier, Typed, null_as_default};
use crate::index::Inner;
use crate::render::{id_of, stable_id, timestamp};

/// What terrace answers for `remaining-testable-count`: it sets no quota on module test
/// runs (only concurrency limits), so the count never runs out.
pub const UNLIMITED_TESTS: i32 = i32::MAX;

/// The JSON:API `data` of an organization; `hosted`: the edition (data retention policies
/// exist only on the self-hosted one).
pub fn organization(org: &Organization, hosted: bool) -> Value {
    let name = org.tfe_name();
    let s = &org.spec.settings;
    let default_project = org
        .status
        .as_ref()
        .and_then(|st| st.default_project_id.clone());
    let policy = s
        .default_data_retention_policy
        .as_ref()
        .filter(|p| !hosted && valid_policy(p))
        .map(|p| {
            let mut linkage = retention_policy(Target::Organization(name), p);
            if let Some(o) = linkage.as_object_mut() {
                o.remove("relationships");
            }
            linkage
        });
    json!({
        "id": name,
        "type": "organizations",
        "attributes": {
            "name": name,
            "external-id": name,
            "email": org.spec.email,
            "created-at": org.metadata.creation_timestamp.as_ref().map(|t| timestamp(&t.0)),
            "default-execution-mode": s.default_execution_mode,
            "allow-force-delete-workspaces": s.allow_force_delete_workspaces,
            "assessments-enforced": s.assessments_enforced,
            // Kept and returned for clients; terrace has no UI sessions.
            "session-timeout": s.session_timeout.unwrap_or(DEFAULT_SESSION_MINUTES),
            "session-remember": s.session_remember.unwrap_or(DEFAULT_SESSION_MINUTES),
            "collaborator-auth-policy": "password",
            "cost-estimation-enabled": false,
            "plan-expired": false,
            "remaining-testable-count": UNLIMITED_TESTS,
            // Callers authenticate with their own (Kubernetes) tokens.
            "user-tokens-enabled": true,
            "permissions": {
                "can-update": true,
                "can-destroy": true,
                "can-create-workspace": true,
                "can-create-project": true,
            },
        },
        "relationships": {
            "default-project": {"data": default_project.map(|id| json!({"id": id, "type": "projects"}))},
            "default-agent-pool": {"data": s.default_agent_pool_id.as_ref().map(|id| json!({"id": id, "type": "agent-pools"}))},
            // go-tfe decodes its polymorphic choice (delete-older or dont-delete) from
            // `data-retention-policy`, as the workspace's: both carry the policy.
            "data-retention-policy-choice": {"data": policy},
            "data-retention-policy": {"data": policy},
        },
        "links": {"self": format!("/api/v2/organizations/{name}")},
    })
}

/// TFE's default `session-timeout` and `session-remember`: 14 days, in minutes.
const DEFAULT_SESSION_MINUTES: i64 = 20_160;

/// The default execution mode and agent pool a project gives its inheriting workspaces:
/// its own where its setting-overwrites say so, else the organization's.
pub fn project_defaults(p: &Project, org: &Organization) -> (String, Option<String>) {
    let so = p.spec.setting_overwrites.clone().unwrap_or_default();
    let mode = match (&p.spec.default_execution_mode, so.default_execution_mode) {
        (Some(m), Some(true)) => m.clone(),
        _ => org.spec.settings.default_execution_mode.clone(),
    };
    let pool = if so.default_agent_pool == Some(true) || so.default_execution_mode == Some(true) {
        p.spec.default_agent_pool_id.clone()
    } else {
        org.spec.settings.default_agent_pool_id.clone()
    };
    let pool = pool.filter(|_| mode == "agent");
    (mode, pool)
}

/// The JSON:API `data` of a project; `workspace_count` from the index.
pub fn project(p: &Project, org: &Organization, workspace_count: usize) -> Value {
    let id = id_of(p);
    let so = p.spec.setting_overwrites.clone().unwrap_or_default();
    let (mode, pool) = project_defaults(p, org);
    json!({
        "id": id,
        "type": "projects",
        "attributes": {
            "name": p.spec.name,
            "description": p.spec.description.clone().unwrap_or_default(),
            "created-at": p.metadata.creation_timestamp.as_ref().map(|t| timestamp(&t.0)),
            "workspace-count": workspace_count,
            "default-execution-mode": mode,
            "setting-overwrites": {
                "default-execution-mode": so.default_execution_mode.unwrap_or(false),
                "default-agent-pool": so.default_agent_pool.unwrap_or(false),
            },
            "auto-destroy-activity-duration": p.spec.auto_destroy_activity_duration,
            "permissions": {"can-read": true, "can-update": true, "can-destroy": true, "can-create-workspace": true},
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "default-agent-pool": {"data": pool.map(|p| json!({"id": p, "type": "agent-pools"}))},
            "tag-bindings": {"links": {"related": format!("/api/v2/projects/{id}/tag-bindings")}},
            "effective-tag-bindings": {"links": {"related": format!("/api/v2/projects/{id}/effective-tag-bindings")}},
        },
        "links": {"self": format!("/api/v2/projects/{id}")},
    })
}

/// [`project`] with its workspace count read from the index.
pub fn project_in(idx: &Inner, p: &Project, org: &Organization) -> Value {
    project(p, org, idx.project_workspace_count(p))
}

// --- data retention policies ---------------------------------------------------------

pub const TYPE_DELETE_OLDER: &str = "data-retention-policy-delete-olders";
pub const TYPE_DONT_DELETE: &str = "data-retention-policy-dont-deletes";
pub const TYPE_LEGACY: &str = "data-retention-policies";

/// What a policy applies to.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Workspace(&'a str),
    Organization(&'a str),
}

impl Target<'_> {
    fn parts(&self) -> (&'static str, &str) {
        match self {
            Target::Workspace(id) => ("workspaces", id),
            Target::Organization(name) => ("organizations", name),
        }
    }
}

/// The policy's ID.
pub fn policy_id(target: Target<'_>, p: &DataRetentionPolicy) -> String {
    let (kind, id) = target.parts();
    let days = p
        .delete_older_than_n_days
        .map_or_else(|| "dont-delete".to_owned(), |d| d.to_string());
    stable_id("drp-", &[kind, id, &days])
}

/// The JSON:API `data` of a policy applying to `target`.
pub fn retention_policy(target: Target<'_>, p: &DataRetentionPolicy) -> Value {
    let id = policy_id(target, p);
    let (kind, target_id) = target.parts();
    let (ty, attributes) = match p.delete_older_than_n_days {
        Some(days) => (TYPE_DELETE_OLDER, json!({"delete-older-than-n-days": days})),
        None => (TYPE_DONT_DELETE, json!({})),
    };
    json!({
        "id": id,
        "type": ty,
        "attributes": attributes,
        "relationships": {"target": {"data": {"id": target_id, "type": kind}}},
    })
}

/// The policy that applies to a workspace: its own, else the organization default.
pub fn effective_policy<'a>(
    ws: &'a Workspace,
    org: &'a Organization,
) -> Option<(Target<'a>, &'a DataRetentionPolicy)> {
    let own = ws
        .spec
        .data_retention_policy
        .as_ref()
        .filter(|p| valid_policy(p))
        .map(|p| (Target::Workspace(workspace_id_ref(ws)), p));
    own.or_else(|| {
        org.spec
            .settings
            .default_data_retention_policy
            .as_ref()
            .filter(|p| valid_policy(p))
            .map(|p| (Target::Organization(org.tfe_name()), p))
    })
}

fn workspace_id_ref(ws: &Workspace) -> &str {
    ws.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(terrace_crds::constants::LABEL_ID))
        .map_or("", String::as_str)
}

pub fn valid_policy(p: &DataRetentionPolicy) -> bool {
    p.delete_older_than_n_days.is_some() || p.dont_delete == Some(true)
}

/// The workspace document's `data-retention-policy` / `-choice` relationship value:
/// `{"data": null}` on the hosted edition or when no policy applies, else the linkage
/// with `attributes.delete-older-than-n-days` (clients read it from the linkage).
pub fn retention_relationship(ws: &Workspace, org: &Organization, hosted: bool) -> Value {
    if hosted {
        return json!({"data": null});
    }
    match effective_policy(ws, org) {
        Some((t, p)) => {
            let mut linkage = retention_policy(t, p);
            if let Some(o) = linkage.as_object_mut() {
                o.remove("relationships");
            }
            json!({ "data": linkage })
        }
        None => json!({"data": null}),
    }
}

// --- tag bindings ------------------------------------------------------------------

/// A workspace's effective bindings: direct ones in order, then the project's bindings
/// whose keys it does not bind itself.
pub fn effective_tag_bindings(
    ws: &Workspace,
    project: Option<&Project>,
) -> Vec<EffectiveTagBinding> {
    let mut out: Vec<EffectiveTagBinding> = ws
        .spec
        .tag_bindings
        .iter()
        .map(|b| EffectiveTagBinding::of(b, None))
        .collect();
    if let Some(p) = project {
        let pid = Some(id_of(p)).filter(|i| !i.is_empty());
        for b in &p.spec.tag_bindings {
            if !ws.spec.tag_bindings.iter().any(|d| d.key == b.key) {
                out.push(EffectiveTagBinding::of(b, pid.clone()));
            }
        }
    }
    out
}

/// A project's effective bindings: its own (a project inherits none).
pub fn project_effective_tag_bindings(p: &Project) -> Vec<EffectiveTagBinding> {
    p.spec
        .tag_bindings
        .iter()
        .map(|b| EffectiveTagBinding::of(b, None))
        .collect()
}

/// The effective bindings of `ws` with its project looked up in the index.
pub fn effective_tag_bindings_in(idx: &Inner, ws: &Workspace) -> Vec<EffectiveTagBinding> {
    effective_tag_bindings(ws, idx.project_of(ws).map(Arc::as_ref))
}

pub fn tag_binding(owner_id: &str, b: &TagBinding) -> Value {
    json!({
        "id": stable_id("tb-", &[owner_id, &b.key]),
        "type": "tag-bindings",
        "attributes": {"key": b.key, "value": b.value},
    })
}

pub fn effective_tag_binding(owner_id: &str, b: &EffectiveTagBinding) -> Value {
    let mut doc = json!({
        "id": stable_id("", &[owner_id, &b.key, "effective"]),
        "type": "effective-tag-bindings",
        "attributes": {"key": b.key, "value": b.value},
    });
    if let Some(p) = &b.inherited_from {
        let link = format!("/api/v2/projects/{p}");
        doc["attributes"]["links"] = json!({"inherited-from": link});
        doc["links"] = json!({"inherited-from": link});
        doc["relationships"] = json!({"inherited-from": {"data": {"id": p, "type": "projects"}}});
    }
    doc
}

/// Entries of tag-binding bodies and relationships are `tag-bindings`.
pub struct TagBindingType;
impl Typed for TagBindingType {
    const TYPE: &'static str = "tag-bindings";
}

/// `key` and `value` of a tag binding in a request (a null value is empty).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TagBindingAttributes {
    pub key: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub value: String,
}

/// The tag bindings of request entries, checked (type, key, value rules; 422 at
/// `{prefix}/i/...`); a key given twice keeps its last value.
pub fn tag_bindings_of(
    entries: Vec<Identifier<TagBindingAttributes>>,
    prefix: &str,
) -> Result<Vec<TagBinding>, ApiError> {
    let mut out: Vec<TagBinding> = Vec::new();
    for (i, e) in entries.into_iter().enumerate() {
        if e.kind.as_deref() != Some(TagBindingType::TYPE) {
            return Err(ApiError::invalid(
                format!("{prefix}/{i}/type"),
                "type must be \"tag-bindings\"",
            ));
        }
        let TagBindingAttributes { key, value } = e.attributes;
        let Some(key) = key else {
            return Err(ApiError::invalid(
                format!("{prefix}/{i}/attributes/key"),
                "key is required and must be a string",
            ));
        };
        validate_tag_binding(&key, &value).map_err(|v| {
            ApiError::invalid(
                format!("{prefix}/{i}/attributes/{}", v.attribute),
                format!("{} {}", v.attribute, v.message),
            )
        })?;
        match out.iter_mut().find(|b| b.key == key) {
            Some(b) => b.value = value,
            None => out.push(TagBinding { key, value }),
        }
    }
    check_binding_count(out.len(), prefix)?;
    Ok(out)
}

/// 422 when a resource would carry more tag bindings than allowed.
pub fn check_binding_count(n: usize, pointer: &str) -> Result<(), ApiError> {
    terrace_crds::rules::validate_tag_binding_count(n)
        .map_err(|v| ApiError::invalid(pointer, v.to_string()))
}
