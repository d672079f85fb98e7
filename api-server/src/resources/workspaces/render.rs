//! The JSON:API representation of a workspace, shaped after the vendor's OpenAPI schema
//! (`workspaces` in reference/tfe-api-v2-openapi.json) so pytfe and go-tfe parse it: lists
//! are never null, relationships are `{"data": null}` rather than null, timestamps carry
//! milliseconds.

use serde_json::{Value, json};
use terrace_crds::constants::{ANNOTATION_LOCK_REASON, LABEL_ID};
use terrace_crds::lock::LockHolder;
use terrace_crds::{Organization, SshKey, StateVersion, Workspace};

use crate::documents::retention_relationship;
use crate::render::timestamp;

/// What the caller may do with a workspace (the `permissions` attribute).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    pub read: bool,
    pub update: bool,
    pub lock: bool,
    pub force_unlock: bool,
    pub delete: bool,
    pub force_delete: bool,
    /// `read-outputs`, `read-state`, `write-state` (state version rights).
    pub read_outputs: bool,
    pub read_state: bool,
    pub write_state: bool,
    /// `create` on runs: queue plans and applies.
    pub queue_run: bool,
    /// `get` / `update` on workspace variables.
    pub read_variables: bool,
    pub update_variables: bool,
}

/// Everything besides the object the representation needs.
pub struct RenderContext<'a> {
    pub org: &'a Organization,
    pub project_id: Option<String>,
    /// The assigned SSH key's ID ([`ssh_key_id`]).
    pub ssh_key_id: Option<String>,
    pub permissions: Permissions,
    pub hosted: bool,
    /// The execution mode the workspace inherits (its project's default where the project
    /// sets one, else the organization's).
    pub inherited_mode: String,
    /// The agent pool it inherits with it.
    pub inherited_pool: Option<String>,
    /// The current state version (the latest finalized one), if any.
    pub current_state: Option<std::sync::Arc<StateVersion>>,
    /// The current run's ID (the run that holds the workspace, else the next in line,
    /// else the newest; [`terrace_crds::run::current_run`]), if any.
    pub current_run: Option<String>,
    /// The latest run's ID (its newest run that is not plan-only), if any.
    pub latest_run: Option<String>,
    /// The current configuration version's ID (its newest uploaded one that is not
    /// provisional), if any.
    pub current_configuration_version: Option<String>,
    /// The IDs of its variables.
    pub variables: Vec<String>,
    /// The VCS connection its `vcs-repo` names, if it exists.
    pub vcs_connection: Option<std::sync::Arc<terrace_crds::OAuthToken>>,
}

/// The ID of the SSH key a workspace uses: `spec.sshKey` is an SSH key ID (what the API
/// writes) or the name of an SshKey object in the workspace's namespace (what a manifest
/// may say), resolved through `by_name`. None when unset or unknown.
pub fn ssh_key_id<'a>(
    ws: &Workspace,
    by_name: impl FnOnce(&str) -> Option<&'a SshKey>,
) -> Option<String> {
    let key = ws.spec.ssh_key.as_deref().filter(|k| !k.is_empty())?;
    if terrace_crds::ids::is_valid_id(terrace_crds::ids::IdKind::SshKey, key) {
        return Some(key.to_owned());
    }
    let obj = by_name(key)?;
    obj.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ID))
        .cloned()
        .or_else(|| obj.status.as_ref().and_then(|s| s.id.clone()))
}

/// The workspace's ID.
pub fn workspace_id(ws: &Workspace) -> String {
    ws.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ID))
        .cloned()
        .unwrap_or_default()
}

/// The current lock holder, from the annotations.
pub fn lock_holder(ws: &Workspace) -> Option<LockHolder> {
    terrace_crds::lock::holder_of(ws)
}

/// Whether the workspace inherits its execution mode (and agent pool):
/// `setting-overwrites.execution-mode` is false.
fn inherits_execution_mode(ws: &Workspace) -> bool {
    ws.spec
        .setting_overwrites
        .as_ref()
        .and_then(|o| o.execution_mode)
        == Some(false)
}

/// The effective execution mode: the workspace's own unless it inherits (`inherited`:
/// its project's default, else the organization's).
pub fn effective_execution_mode(ws: &Workspace, inherited: &str) -> String {
    let inherits = inherits_execution_mode(ws);
    match (&ws.spec.execution_mode, ws.spec.operations) {
        (Some(m), _) if !inherits => m.clone(),
        (None, Some(ops)) if !inherits => {
            if ops {
                "remote".into()
            } else {
                "local".into()
            }
        }
        _ => inherited.to_owned(),
    }
}

fn ts(value: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Value {
    value.map_or(Value::Null, |t| json!(timestamp(&t.0)))
}

/// The `data` object of a workspace.
pub fn workspace(ws: &Workspace, ctx: &RenderContext<'_>) -> Value {
    let id = workspace_id(ws);
    let org_name = ctx.org.tfe_name();
    let spec = &ws.spec;
    let status = ws.status.clone().unwrap_or_default();
    let holder = lock_holder(ws);
    let reason = ws
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_LOCK_REASON))
        .cloned();
    let mode = effective_execution_mode(ws, &ctx.inherited_mode);
    let inherits = inherits_execution_mode(ws);
    let agent_pool = if inherits {
        ctx.inherited_pool.clone()
    } else {
        spec.agent_pool_id.clone()
    };
    let overwrites = spec.setting_overwrites.clone().unwrap_or_default();
    let created = ts(ws.metadata.creation_timestamp.as_ref());
    let current = ctx.current_state.as_deref();
    let state_status = current.and_then(|v| v.status.as_ref());
    // The current state's count; a workspace without state versions keeps what its status says.
    let resource_count = state_status.map_or(status.resource_count, |s| s.resource_count);
    let latest_change = [
        status.latest_change_at.as_deref().map(str::to_owned),
        state_status.and_then(|s| s.finalized_at.clone()),
    ]
    .into_iter()
    .flatten()
    .max()
    .map_or(created.clone(), Value::String);
    let current_id = current.map(crate::render::id_of);
    let output_linkage: Vec<Value> = state_status
        .map(|s| {
            s.outputs
                .iter()
                .map(|o| json!({"id": o.id, "type": "workspace-outputs"}))
                .collect()
        })
        .unwrap_or_default();
    let p = ctx.permissions;
    let conn = ctx.vcs_connection.as_deref();
    let vcs = spec.vcs_repo.as_ref().map_or(Value::Null, |r| {
        json!({
            "identifier": r.identifier,
            "display-identifier": r.identifier,
            "branch": r.branch.clone().unwrap_or_default(),
            "ingress-submodules": r.ingress_submodules,
            "oauth-token-id": r.oauth_token_id,
            "github-app-installation-id": r.vcs_app_installation_id,
            "tags-regex": r.tags_regex,
            "repository-http-url": conn.map_or_else(
                || format!("https://github.com/{}", r.identifier),
                |c| terrace_crds::vcs::repository_url(
                    terrace_crds::vcs::Forge::of(&c.spec.service_provider),
                    c.spec.http_url.as_deref().unwrap_or_default(),
                    &r.identifier,
                ),
            ),
            "service-provider": conn.map(|c| c.spec.service_provider.clone()),
        })
    });
    let metrics = &status.metrics;
    let health = status.health.as_deref();
    let mut attributes = json!({
        "name": spec.name,
        "description": spec.description,
        "allow-destroy-plan": spec.allow_destroy_plan,
        "auto-apply": spec.auto_apply,
        "auto-apply-run-trigger": spec.auto_apply_run_trigger,
        "auto-destroy-at": spec.auto_destroy_at,
        "auto-destroy-activity-duration": spec.auto_destroy_activity_duration,
        "auto-destroy-status": Value::Null,
        "inherits-project-auto-destroy": spec.inherits_project_auto_destroy,
        "created-at": created,
        "updated-at": latest_change,
        "latest-change-at": latest_change,
        "environment": "default",
        "execution-mode": mode,
        "operations": mode != "local",
        "agent-pool-id": agent_pool,
        "file-triggers-enabled": spec.file_triggers_enabled,
        "global-remote-state": spec.global_remote_state,
        "project-remote-state": spec.project_remote_state,
        "queue-all-runs": spec.queue_all_runs,
        "speculative-enabled": spec.speculative_enabled,
        "structured-run-output-enabled": spec.structured_run_output_enabled,
        "terraform-version": spec.terraform_version.clone().unwrap_or_default(),
        "trigger-prefixes": spec.trigger_prefixes,
        "trigger-patterns": spec.trigger_patterns,
        "working-directory": spec.working_directory.clone().unwrap_or_default(),
        "setting-overwrites": {
            "execution-mode": overwrites.execution_mode.unwrap_or(true),
            "agent-pool": overwrites.agent_pool.unwrap_or(true),
        },
        "vcs-repo": vcs,
        "vcs-repo-identifier": spec.vcs_repo.as_ref().map(|r| r.identifier.clone()),
        "locked": holder.is_some(),
        "locked-reason": if holder.is_some() { reason.unwrap_or_default() } else { String::new() },
        "resource-count": resource_count,
        "apply-duration-average": metrics.apply_duration_average,
        "plan-duration-average": metrics.plan_duration_average,
        "policy-check-failures": metrics.policy_check_failures,
        "run-failures": metrics.run_failures,
        "workspace-kpis-runs-count": metrics.workspace_kpis_run_count,
        "workspace-kpis-run-count": metrics.workspace_kpis_run_count,
        "source": "tfe-api",
        "source-name": spec.source_name,
        "source-url": spec.source_url,
        "tag-names": status_tag_names(ws),
        "last-assessment-result-at": health.and_then(|h| h.assessed_at.clone()),
        "permissions": {
            "can-update": p.update,
            "can-destroy": p.delete,
            "can-queue-run": p.queue_run,
            "can-read-run": p.read,
            "can-read-variable": p.read_variables,
            "can-update-variable": p.update_variables,
            "can-read-state-versions": p.read_state,
            "can-read-state-outputs": p.read_outputs,
            "can-create-state-versions": p.write_state,
            "can-queue-apply": p.queue_run,
            "can-lock": p.lock,
            "can-unlock": p.lock,
            "can-force-unlock": p.force_unlock,
            "can-read-settings": p.read,
            "can-manage-tags": p.update,
            "can-manage-run-tasks": p.update,
            "can-force-delete": p.force_delete,
            "can-manage-assessments": p.update,
            "can-manage-ephemeral-workspaces": p.update,
            "can-read-assessment-results": p.read,
            "can-queue-destroy": p.queue_run,
        },
        "actions": { "is-destroyable": resource_count == 0 && holder.is_none() },
    });
    if ctx.hosted
        && let Some(a) = attributes.as_object_mut()
    {
        a.insert(
            "assessments-enabled".into(),
            json!(spec.assessments_enabled),
        );
    }
    let locked_by = holder.as_ref().map_or(
        Value::Null,
        |h| json!({"id": h.id(), "type": h.jsonapi_type()}),
    );
    let base = format!("/api/v2/workspaces/{id}");
    json!({
        "id": id,
        "type": "workspaces",
        "attributes": attributes,
        "relationships": {
            "organization": {"data": {"id": org_name, "type": "organizations"}},
            "project": {"data": ctx.project_id.as_ref().map(|p| json!({"id": p, "type": "projects"}))},
            "ssh-key": {"data": ctx.ssh_key_id.as_ref().map(|k| json!({"id": k, "type": "ssh-keys"}))},
            "data-retention-policy": retention_relationship(ws, ctx.org, ctx.hosted),
            "data-retention-policy-choice": retention_relationship(ws, ctx.org, ctx.hosted),
            "locked-by": {"data": locked_by},
            "current-run": {"data": ctx.current_run.as_ref().map(|r| json!({"id": r, "type": "runs"}))},
            "latest-run": {"data": ctx.latest_run.as_ref().map(|r| json!({"id": r, "type": "runs"}))},
            "outputs": {"data": output_linkage},
            "remote-state-consumers": {"links": {"related": format!("{base}/relationships/remote-state-consumers")}},
            "current-state-version": {"data": current_id.map(|i| json!({"id": i, "type": "state-versions"}))},
            "current-configuration-version": {"data": ctx.current_configuration_version.as_ref().map(|id| json!({"id": id, "type": "configuration-versions"}))},
            "agent-pool": {"data": agent_pool.as_ref().map(|a| json!({"id": a, "type": "agent-pools"}))},
            "readme": {"data": Value::Null},
            "current-assessment-result": {"data": health
                .and_then(|h| h.result_id.as_ref())
                .map(|id| json!({"id": id, "type": "assessment-results"}))},
            "vars": {"data": ctx.variables.iter().map(|id| json!({"id": id, "type": "vars"})).collect::<Vec<_>>()},
            "tag-bindings": {"links": {"related": format!("{base}/tag-bindings")}},
            "effective-tag-bindings": {"links": {"related": format!("{base}/effective-tag-bindings")}},
        },
        "links": {
            // By organization and name, however it was read, as TFE's.
            "self": format!("/api/v2/organizations/{org_name}/workspaces/{}", spec.name),
            "self-html": format!("/app/{org_name}/workspaces/{}", spec.name),
        },
    })
}

fn status_tag_names(ws: &Workspace) -> Vec<String> {
    terrace_crds::rules::tag_names(&ws.spec.tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn ws_with_key(key: Option<&str>) -> Workspace {
        let mut ws = Workspace::new("net", Default::default());
        ws.spec.ssh_key = key.map(Into::into);
        ws
    }

    fn key_object(name: &str, id: Option<&str>) -> SshKey {
        let mut k = SshKey::new(name, Default::default());
        k.metadata = ObjectMeta {
            name: Some(name.to_owned()),
            labels: id.map(|i| BTreeMap::from([(LABEL_ID.to_owned(), i.to_owned())])),
            ..Default::default()
        };
        k
    }

    #[test]
    fn ssh_key_by_id_or_by_object_name() {
        let deploy = key_object("deploy-key", Some("sshkey-DeployKey00001"));
        let pending = key_object("new-key", None);
        let by_name = |n: &str| {
            [&deploy, &pending]
                .into_iter()
                .find(|k| k.metadata.name.as_deref() == Some(n))
        };
        // An ID is the key (what the API writes), even before the index knows it.
        assert_eq!(
            ssh_key_id(&ws_with_key(Some("sshkey-AbCdEfGh12345678")), |_| None),
            Some("sshkey-AbCdEfGh12345678".to_owned())
        );
        // An object name (what a manifest may say) resolves to that key's ID.
        assert_eq!(
            ssh_key_id(&ws_with_key(Some("deploy-key")), by_name),
            Some("sshkey-DeployKey00001".to_owned())
        );
        // A key without an ID yet, an unknown name, none: no key.
        assert_eq!(ssh_key_id(&ws_with_key(Some("new-key")), by_name), None);
        assert_eq!(ssh_key_id(&ws_with_key(Some("nope")), by_name), None);
        assert_eq!(ssh_key_id(&ws_with_key(None), by_name), None);
    }
}
