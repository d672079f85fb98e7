//! Organizations: the frame workspaces live in. An Organization object is cluster-scoped;
//! its objects live in its namespace, created by the operator with the default project.
//! Visible to callers who may `get` the organization or `list` workspaces in its namespace
//! ([`AppState::visible_org`]); changing one needs the cluster-wide verb on
//! `organizations`.

use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use terrace_crds::OrganizationSpec;

use crate::documents;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v2/organizations", get(list_orgs).post(create))
        .route(
            "/api/v2/organizations/{org}",
            get(show).patch(update).delete(remove),
        )
        .route(
            "/api/v2/organizations/{org}/entitlement-set",
            get(entitlements),
        )
}

/// The writable attributes of an organization.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct OrgAttributes {
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    email: Nullable<String>,
    allow_force_delete_workspaces: Option<bool>,
    assessments_enforced: Option<bool>,
    default_execution_mode: Option<String>,
}

impl Typed for OrgAttributes {
    const TYPE: &'static str = "organizations";
}

impl OrgAttributes {
    /// Applies the settings given to `spec` (422 for a bad execution mode).
    fn apply(&self, spec: &mut OrganizationSpec) -> Result<(), ApiError> {
        if let Some(email) = &self.email {
            spec.email = email.clone();
        }
        if let Some(b) = self.allow_force_delete_workspaces {
            spec.settings.allow_force_delete_workspaces = b;
        }
        if let Some(b) = self.assessments_enforced {
            spec.settings.assessments_enforced = b;
        }
        if let Some(m) = &self.default_execution_mode {
            terrace_crds::rules::ExecutionMode::parse(m).map_err(|_| {
                ApiError::invalid_attribute(
                    "default-execution-mode",
                    "default-execution-mode must be one of remote, local, agent",
                )
            })?;
            spec.settings.default_execution_mode = m.clone();
        }
        Ok(())
    }
}

async fn list_orgs(
    State(state): State<AppState>,
    caller: Caller,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let mut orgs: Vec<Arc<Organization>> = state.index.read().organizations().cloned().collect();
    orgs.sort_by(|a, b| a.tfe_name().cmp(b.tfe_name()));
    let mut visible = Vec::new();
    for o in orgs {
        if state.can_see_org(&caller, &o).await? {
            visible.push(o);
        }
    }
    Ok(list("/api/v2/organizations", page, &visible, |o| {
        documents::organization(o)
    }))
}

async fn show(o: VisibleOrg) -> Doc {
    Doc::ok(documents::organization(&o.org))
}

/// An object name (DNS-1123) for an organization's TFE name.
pub fn object_name(tfe_name: &str) -> String {
    let lower: String = tfe_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = lower.trim_matches('-');
    if trimmed == tfe_name && trimmed.len() <= 50 {
        return trimmed.to_owned();
    }
    // Keep names unique when case or underscores were folded.
    let hash: u32 = tfe_name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let base: String = trimmed.chars().take(50).collect();
    format!("{}-{hash:08x}", if base.is_empty() { "org" } else { &base })
}

fn taken(name: &str) -> ApiError {
    ApiError::invalid_attribute("name", format!("Name {name:?} has already been taken"))
}

/// Waits (bounded) until the index shows organization `name` satisfying `cond`.
async fn wait_org(state: &AppState, name: &str, cond: impl Fn(&Organization) -> bool) -> bool {
    state
        .index
        .wait_until(write::INDEX_WAIT, |i| {
            i.organization(name).is_some_and(|o| cond(o))
        })
        .await
}

async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonApi(doc): JsonApi<Document<OrgAttributes>>,
) -> Result<Doc, ApiError> {
    state
        .require_or_403(
            &caller,
            &Check::cluster("create", "organizations", None),
            "creating organizations needs cluster-wide create rights on organizations",
        )
        .await?;
    let attrs = doc.checked()?.attributes;
    let name = attrs
        .name
        .clone()
        .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
    terrace_crds::rules::validate_workspace_name(&name).map_err(|e| {
        ApiError::invalid_attribute(
            "name",
            e.to_string().replacen("name", "organization name", 1),
        )
    })?;
    if state.index.read().organization(&name).is_some() {
        return Err(taken(&name));
    }
    let mut spec = OrganizationSpec {
        name: Some(name.clone()),
        ..Default::default()
    };
    attrs.apply(&mut spec)?;
    let obj_name = object_name(&name);
    spec.namespace = Some(obj_name.clone());
    let org = Organization {
        metadata: ObjectMeta {
            name: Some(obj_name),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let api: Api<Organization> = Api::all(state.client.clone());
    let created = api
        .create(&PostParams::default(), &org)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 409 => taken(&name),
            other => other.into(),
        })?;
    // Ready means the namespace and the default project exist (the operator makes them).
    let ns = created.target_namespace().to_owned();
    let ready = state
        .index
        .wait_until(Duration::from_secs(20), |i| {
            i.organization(&name).is_some_and(|o| {
                o.status
                    .as_ref()
                    .is_some_and(|s| s.default_project_id.is_some())
            }) && i.default_project(&ns).is_some()
        })
        .await;
    if !ready {
        tracing::warn!(org = %name, "organization not ready yet (is the operator running?)");
    }
    let org = state
        .index
        .read()
        .organization(&name)
        .cloned()
        .unwrap_or_else(|| Arc::new(created));
    Ok(Doc::created(documents::organization(&org)))
}

async fn update(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<OrgAttributes>>,
) -> Result<Doc, ApiError> {
    let org = o.org;
    state
        .require_or_403(
            &o.caller,
            &Check::cluster("update", "organizations", Some(&org.name_any())),
            "not allowed to update this organization",
        )
        .await?;
    let attrs = doc.checked()?.attributes;
    if attrs.name.as_deref().is_some_and(|n| n != org.tfe_name()) {
        return Err(ApiError::invalid_attribute(
            "name",
            "renaming organizations is not supported",
        ));
    }
    let api: Api<Organization> = Api::all(state.client.clone());
    // Only the settings that change, guarded by the resourceVersion (crate::write).
    let updated = write::patch_spec(&api, (*org).clone(), |cur| {
        let mut spec = cur.spec.clone();
        attrs.apply(&mut spec)?;
        write::spec_diff(&cur.spec, &spec)
    })
    .await?;
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    wait_org(&state, org.tfe_name(), |o| {
        crate::index::rv_at_least(o.metadata.resource_version.as_deref(), &rv)
    })
    .await;
    Ok(Doc::ok(documents::organization(&updated)))
}

async fn remove(State(state): State<AppState>, o: VisibleOrg) -> Result<Response, ApiError> {
    let org = o.org;
    state
        .require_or_403(
            &o.caller,
            &Check::cluster("delete", "organizations", Some(&org.name_any())),
            "not allowed to delete this organization",
        )
        .await?;
    let api: Api<Organization> = Api::all(state.client.clone());
    api.delete(&org.name_any(), &DeleteParams::default())
        .await?;
    let name = org.tfe_name().to_owned();
    state
        .index
        .wait_until(write::INDEX_WAIT, |i| i.organization(&name).is_none())
        .await;
    Ok(no_content())
}

async fn entitlements(State(state): State<AppState>, o: VisibleOrg) -> Doc {
    let hosted = state.hosted();
    let name = o.org.tfe_name();
    Doc::ok(json!({
        "id": name,
        "type": "entitlement-sets",
        "attributes": {
            "agents": true,
            "assessments": hosted,
            "audit-logging": false,
            "configuration-designer": false,
            "cost-estimation": false,
            "global-run-tasks": false,
            "module-tests-generation": false,
            "operations": true,
            "private-module-registry": true,
            "policy-enforcement": false,
            "run-tasks": false,
            "self-serve-billing": false,
            "sentinel": false,
            "sso": false,
            "state-storage": true,
            "teams": false,
            "usage-reporting": false,
            "user-limit": Value::Null,
            "vcs-integrations": true,
        },
        "links": {"self": format!("/api/v2/entitlement-sets/{name}")},
    }))
}

#[cfg(test)]
mod tests {
    use super::object_name;

    #[test]
    fn object_names_are_dns_labels_and_unique() {
        assert_eq!(object_name("acme"), "acme");
        assert_ne!(object_name("Acme"), object_name("acme"));
        assert!(object_name("My_Org").starts_with("my-org-"));
        let long = object_name(&"x".repeat(90));
        assert!(long.len() <= 63, "{long}");
    }
}
