//! JSON:API representations of kinds that more than one resource shows (an organization
//! or a project in `included`, the data retention policy linkage of workspace and
//! organization documents, tag bindings of workspaces and projects) and the request
//! shapes more than one resource accepts (tag bindings). Shaped after the vendor's OpenAPI schema so pytfe and go-tfe
//! parse them: relationships are `{"data": null}` rather than null, timestamps carry
//! milliseconds.

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

/// The JSON:API `data` of an organization.
pub fn organization(org: &Organization) -> Value {
    let name = org.tfe_name();
    let s = &org.spec.settings;
    let default_project = org
        .status
        .as_ref()
        .and_then(|st| st.default_project_id.clone());
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
            "collaborator-auth-policy": "password",
            "cost-estimation-enabled": false,
            "plan-expired": false,
            "permissions": {
                "can-update": true,
                "can-destroy": true,
                "can-create-workspace": true,
                "can-create-project": true,
            },
        },
        "relationships": {
            "default-project": {"data": default_project.map(|id| json!({"id": id, "type": "projects"}))},
        },
        "links": {"self": format!("/api/v2/organizations/{name}")},
    })
}

/// The JSON:API `data` of a project.
pub fn project(p: &Project, org: &Organization) -> Value {
    let id = id_of(p);
    json!({
        "id": id,
        "type": "projects",
        "attributes": {
            "name": p.spec.name,
            "description": p.spec.description.clone().unwrap_or_default(),
            "created-at": p.metadata.creation_timestamp.as_ref().map(|t| timestamp(&t.0)),
            "workspace-count": p.status.as_ref().and_then(|s| s.workspace_count).unwrap_or(0),
            "default-execution-mode": org.spec.settings.default_execution_mode,
            "auto-destroy-activity-duration": Value::Null,
            "permissions": {"can-read": true, "can-update": true, "can-destroy": true, "can-create-workspace": true},
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
        },
        "links": {"self": format!("/api/v2/projects/{id}")},
    })
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
        .map(|b| EffectiveTagBinding {
            key: b.key.clone(),
            value: b.value.clone(),
            inherited_from: None,
        })
        .collect();
    if let Some(p) = project {
        let pid = Some(id_of(p)).filter(|i| !i.is_empty());
        for b in &p.spec.tag_bindings {
            if !ws.spec.tag_bindings.iter().any(|d| d.key == b.key) {
                out.push(EffectiveTagBinding {
                    key: b.key.clone(),
                    value: b.value.clone(),
                    inherited_from: pid.clone(),
                });
            }
        }
    }
    out
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
#[derive(Debug, Default, Deserialize)]
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
    Ok(out)
}
