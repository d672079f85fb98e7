//! Parsing of workspace request documents (B1 create, B2 update) into typed changes, and
//! applying them to a `WorkspaceSpec` under SPEC.md's rules. Wrong types and broken rules
//! become 422 errors pointing at the offending attribute; unknown attributes are ignored.

use serde::Deserialize;
use terrace_crds::common::TagBinding;
use terrace_crds::rules::{self, ExecutionMode, RuleViolation, VcsRepoInput};
use terrace_crds::{SettingOverwrites, VcsRepo, WorkspaceSpec};

use crate::ApiError;
use crate::body::{Identifier, Nullable, ToOne, Typed, null_as_default, nullable};
use crate::documents::{TagBindingAttributes, tag_bindings_of};

/// The writable attributes of a workspace request (B1, B2), as sent. Absent attributes
/// are `None`; [`Nullable`] ones tell `null` (remove) from absent (keep). Booleans may not
/// be `null`; unknown attributes are ignored, as TFE does.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WorkspaceAttributes {
    pub name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub description: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub agent_pool_id: Nullable<String>,
    #[serde(default, deserialize_with = "present")]
    pub allow_destroy_plan: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub assessments_enabled: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub auto_apply: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub auto_apply_run_trigger: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub auto_destroy_at: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub auto_destroy_activity_duration: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub execution_mode: Nullable<String>,
    #[serde(default, deserialize_with = "present")]
    pub file_triggers_enabled: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub global_remote_state: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub project_remote_state: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub operations: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub queue_all_runs: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub source_name: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub source_url: Nullable<String>,
    #[serde(default, deserialize_with = "present")]
    pub speculative_enabled: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub structured_run_output_enabled: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    pub terraform_version: Nullable<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub trigger_patterns: Option<Vec<String>>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub trigger_prefixes: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    pub working_directory: Nullable<String>,
    pub setting_overwrites: Option<SettingOverwritesInput>,
    #[serde(default, deserialize_with = "nullable")]
    pub vcs_repo: Nullable<VcsRepoAttributes>,
    /// Legacy flat tags by name (`relationships.tags` is the newer form).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub tag_names: Option<Vec<String>>,
}

impl Typed for WorkspaceAttributes {
    const TYPE: &'static str = "workspaces";
}

/// `setting-overwrites`: only the keys with organization defaults (others are 422).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SettingOverwritesInput {
    #[serde(default, deserialize_with = "present")]
    pub execution_mode: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    pub agent_pool: Option<bool>,
}

/// `vcs-repo` as sent: each key absent, null or a value.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VcsRepoAttributes {
    #[serde(default, deserialize_with = "nullable")]
    pub identifier: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub branch: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub oauth_token_id: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub github_app_installation_id: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub vcs_app_installation_id: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub tags_regex: Nullable<String>,
    #[serde(default, deserialize_with = "present")]
    pub ingress_submodules: Option<bool>,
}

impl VcsRepoAttributes {
    fn is_empty(&self) -> bool {
        self.identifier.is_none()
            && self.branch.is_none()
            && self.oauth_token_id.is_none()
            && self.github_app_installation_id.is_none()
            && self.vcs_app_installation_id.is_none()
            && self.tags_regex.is_none()
            && self.ingress_submodules.is_none()
    }
}

/// The relationships of a workspace request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct WorkspaceRelationships {
    pub project: Option<ToOne>,
    pub tag_bindings: Option<TagBindingsRelationship>,
    pub tags: Option<TagsRelationship>,
}

/// `relationships.tag-bindings`: `{"data": [...]}` (null: none).
#[derive(Debug, Default, Deserialize)]
pub struct TagBindingsRelationship {
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: Vec<Identifier<TagBindingAttributes>>,
}

/// `relationships.tags` (legacy flat tags by name).
#[derive(Debug, Default, Deserialize)]
pub struct TagsRelationship {
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: Vec<TagEntry>,
}

/// One flat tag by name.
#[derive(Debug, Deserialize)]
pub struct TagEntry {
    #[serde(default, deserialize_with = "null_as_default")]
    pub attributes: TagEntryAttributes,
}

/// `attributes.name` of a flat tag.
#[derive(Debug, Default, Deserialize)]
pub struct TagEntryAttributes {
    pub name: Option<String>,
}

/// A boolean that may be absent but not `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    bool::deserialize(d).map(Some)
}

/// A list where `null` means empty.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Option::<Vec<String>>::deserialize(d).map(|v| Some(v.unwrap_or_default()))
}

/// The writable attributes and relationships given in one request, checked.
#[derive(Clone, Debug, Default)]
pub struct WorkspaceInput {
    pub name: Option<String>,
    pub description: Nullable<String>,
    pub agent_pool_id: Nullable<String>,
    pub allow_destroy_plan: Option<bool>,
    pub assessments_enabled: Option<bool>,
    pub auto_apply: Option<bool>,
    pub auto_apply_run_trigger: Option<bool>,
    pub auto_destroy_at: Nullable<String>,
    pub auto_destroy_activity_duration: Nullable<String>,
    pub execution_mode: Nullable<String>,
    pub file_triggers_enabled: Option<bool>,
    pub global_remote_state: Option<bool>,
    pub project_remote_state: Option<bool>,
    pub operations: Option<bool>,
    pub queue_all_runs: Option<bool>,
    pub source_name: Nullable<String>,
    pub source_url: Nullable<String>,
    pub speculative_enabled: Option<bool>,
    pub structured_run_output_enabled: Option<bool>,
    pub terraform_version: Nullable<String>,
    pub trigger_patterns: Option<Vec<String>>,
    pub trigger_prefixes: Option<Vec<String>>,
    pub working_directory: Nullable<String>,
    pub setting_overwrites: Option<SettingOverwrites>,
    pub vcs_repo: Nullable<VcsRepoAttributes>,
    /// `relationships.project.data.id`; an empty string means "no move".
    pub project_id: Option<String>,
    pub tag_bindings: Option<Vec<TagBinding>>,
    /// Flat tag names from `relationships.tags`.
    pub tags: Option<Vec<String>>,
}

fn invalid(attr: &str, detail: impl Into<String>) -> ApiError {
    ApiError::invalid_attribute(attr, detail)
}

/// A rule violation as a 422 with its pointer.
pub fn violation(v: RuleViolation) -> ApiError {
    ApiError::Invalid(vec![v.into()])
}

fn rel_invalid(p: &str, d: impl Into<String>) -> ApiError {
    ApiError::invalid(format!("/data/relationships/{p}"), d)
}

impl WorkspaceInput {
    /// The input of a request document. `hosted`: whether the server acts as the hosted
    /// edition (only it accepts assessments-enabled).
    pub fn new(
        a: WorkspaceAttributes,
        rels: WorkspaceRelationships,
        hosted: bool,
    ) -> Result<WorkspaceInput, ApiError> {
        let a_tag_names = a.tag_names;
        let mut input = WorkspaceInput {
            name: a.name,
            description: a.description,
            agent_pool_id: a.agent_pool_id,
            allow_destroy_plan: a.allow_destroy_plan,
            assessments_enabled: match a.assessments_enabled {
                // SPEC.md: only the hosted edition takes the attribute. Refused rather
                // than dropped: a 2xx must not lose what it was asked (false is what the
                // self-hosted edition reads anyway, so it is written).
                Some(true) if !hosted => {
                    return Err(invalid(
                        "assessments-enabled",
                        "health assessments are set through the API on the hosted edition only (--edition hosted); on this server enable them with the Workspace's spec.assessmentsEnabled or the organization's assessments-enforced (docs/health.md)",
                    ));
                }
                other => other,
            },
            auto_apply: a.auto_apply,
            auto_apply_run_trigger: a.auto_apply_run_trigger,
            auto_destroy_at: a.auto_destroy_at,
            auto_destroy_activity_duration: a.auto_destroy_activity_duration,
            execution_mode: a.execution_mode,
            file_triggers_enabled: a.file_triggers_enabled,
            global_remote_state: a.global_remote_state,
            project_remote_state: a.project_remote_state,
            operations: a.operations,
            queue_all_runs: a.queue_all_runs,
            source_name: a.source_name,
            source_url: a.source_url,
            speculative_enabled: a.speculative_enabled,
            structured_run_output_enabled: a.structured_run_output_enabled,
            terraform_version: a.terraform_version,
            trigger_patterns: a.trigger_patterns,
            trigger_prefixes: a.trigger_prefixes,
            working_directory: a.working_directory,
            setting_overwrites: a.setting_overwrites.map(|s| SettingOverwrites {
                execution_mode: s.execution_mode,
                agent_pool: s.agent_pool,
            }),
            // pytfe always sends `"vcs-repo": {}`: an empty object changes nothing.
            vcs_repo: a
                .vcs_repo
                .filter(|v| v.as_ref().is_none_or(|r| !r.is_empty())),
            project_id: None,
            tag_bindings: None,
            tags: None,
        };
        if let Some(project) = rels.project {
            input.project_id = Some(project.id().flatten().unwrap_or_default().to_owned());
        }
        if let Some(tb) = rels.tag_bindings {
            input.tag_bindings = Some(tag_bindings_of(
                tb.data,
                "/data/relationships/tag-bindings/data",
            )?);
        }
        if let Some(names) = a_tag_names {
            let mut tags = Vec::new();
            for (i, name) in names.iter().enumerate() {
                rules::validate_tag_name(name).map_err(|e| {
                    ApiError::invalid(format!("/data/attributes/tag-names/{i}"), e.humanized())
                })?;
                tags.push(name.to_ascii_lowercase());
            }
            input.tags = Some(tags);
        }
        if let Some(tags) = rels.tags {
            let mut names = Vec::new();
            for (i, item) in tags.data.iter().enumerate() {
                let pointer = format!("tags/data/{i}/attributes/name");
                let name = item
                    .attributes
                    .name
                    .as_deref()
                    .ok_or_else(|| rel_invalid(&pointer, "tag name is required"))?;
                rules::validate_tag_name(name).map_err(|e| rel_invalid(&pointer, e.to_string()))?;
                names.push(name.to_ascii_lowercase());
            }
            input.tags = Some(names);
        }
        Ok(input)
    }
}

/// Organization-level defaults the rules depend on.
#[derive(Clone, Debug)]
pub struct OrgDefaults {
    pub execution_mode: String,
    pub global_remote_state: bool,
    pub terraform_version: String,
}

/// Applies `input` to `spec` (a fresh spec with create defaults on create, the stored spec on
/// update) and checks SPEC.md's rules on the request and on the result.
pub fn apply(
    spec: &mut WorkspaceSpec,
    input: WorkspaceInput,
    create: bool,
    org: &OrgDefaults,
) -> Result<(), ApiError> {
    if create && input.name.is_none() {
        return Err(invalid("name", "name can't be blank"));
    }
    if let Some(name) = &input.name {
        rules::validate_workspace_name(name).map_err(violation)?;
        spec.name = name.clone();
    }
    // Rules on what the request gives.
    let given_pool = input
        .agent_pool_id
        .clone()
        .flatten()
        .filter(|p| !p.is_empty());
    if input.execution_mode.as_ref().is_some_and(Option::is_some) && input.operations.is_some() {
        return Err(invalid(
            "operations",
            "operations cannot be given together with execution-mode; use execution-mode (operations is deprecated)",
        ));
    }
    if given_pool.is_some() && input.operations == Some(true) {
        return Err(invalid(
            "agent-pool-id",
            "agent-pool-id must not be given when operations is true",
        ));
    }
    let requested_mode = match (&input.execution_mode, input.operations) {
        (Some(Some(m)), _) => Some(ExecutionMode::parse(m).map_err(violation)?),
        (_, Some(ops)) => Some(ExecutionMode::from_operations(ops)),
        _ => None,
    };
    if let (Some(m @ (ExecutionMode::Remote | ExecutionMode::Local)), Some(_)) =
        (requested_mode, &given_pool)
    {
        return Err(invalid(
            "agent-pool-id",
            format!(
                "agent-pool-id must not be given when execution-mode is {}",
                m.as_str()
            ),
        ));
    }
    // The result.
    if let Some(mode) = requested_mode {
        spec.execution_mode = Some(mode.as_str().to_owned());
        spec.operations = None;
        if mode != ExecutionMode::Agent {
            spec.agent_pool_id = None;
        }
    } else if input.execution_mode == Some(None) {
        spec.execution_mode = None;
    }
    if let Some(pool) = input.agent_pool_id.clone() {
        spec.agent_pool_id = pool.filter(|p| !p.is_empty());
    }
    let mut overwrites = spec.setting_overwrites.clone().unwrap_or_default();
    if let Some(so) = &input.setting_overwrites {
        terrace_crds::rules::validate_setting_overwrites(so.execution_mode, so.agent_pool)
            .map_err(|v| ApiError::Invalid(vec![v.into()]))?;
        if so.execution_mode.is_some() {
            overwrites.execution_mode = so.execution_mode;
        }
        if so.agent_pool.is_some() {
            overwrites.agent_pool = so.agent_pool;
        }
    }
    let explicit_so = input
        .setting_overwrites
        .as_ref()
        .and_then(|s| s.execution_mode);
    if requested_mode.is_some() && explicit_so.is_none() {
        overwrites.execution_mode = Some(true);
        overwrites.agent_pool = Some(true);
    } else if create && requested_mode.is_none() && explicit_so.is_none() {
        // Nothing given: the workspace inherits the organization's default.
        overwrites.execution_mode = Some(false);
        overwrites.agent_pool = Some(false);
    }
    if explicit_so == Some(true) && spec.execution_mode.is_none() {
        return Err(invalid(
            "execution-mode",
            "execution-mode must be given when setting-overwrites.execution-mode is true",
        ));
    }
    spec.setting_overwrites = Some(overwrites);
    let effective_mode = spec.execution_mode.clone();
    if effective_mode.as_deref() == Some("agent") && spec.agent_pool_id.is_none() {
        return Err(invalid(
            "agent-pool-id",
            "agent-pool-id is required when execution-mode is agent",
        ));
    }
    if effective_mode.as_deref() != Some("agent") && spec.agent_pool_id.is_some() {
        return Err(invalid(
            "agent-pool-id",
            "agent-pool-id can only be given with execution-mode agent",
        ));
    }

    macro_rules! set {
        ($field:ident) => {
            if let Some(v) = input.$field {
                spec.$field = v;
            }
        };
    }
    set!(description);
    set!(allow_destroy_plan);
    set!(assessments_enabled);
    set!(auto_apply);
    set!(auto_apply_run_trigger);
    set!(file_triggers_enabled);
    set!(global_remote_state);
    set!(project_remote_state);
    set!(queue_all_runs);
    if let Some(v) = input.source_name {
        spec.source_name = v.map(Into::into);
    }
    if let Some(v) = input.source_url {
        spec.source_url = v.map(Into::into);
    }
    set!(speculative_enabled);
    set!(structured_run_output_enabled);
    set!(trigger_patterns);
    set!(trigger_prefixes);
    if let Some(v) = input.working_directory {
        spec.working_directory = v.map(Into::into);
    }
    if create && input.global_remote_state.is_none() {
        spec.global_remote_state = org.global_remote_state && !spec.project_remote_state;
    }
    if spec.project_remote_state && spec.global_remote_state {
        return Err(invalid(
            "project-remote-state",
            "Project remote state cannot be enabled when global remote state sharing is enabled",
        ));
    }
    if let Some(v) = input.auto_destroy_at {
        if let Some(ts) = &v
            && ts.parse::<jiff::Timestamp>().is_err()
        {
            return Err(invalid(
                "auto-destroy-at",
                format!("auto-destroy-at must be an RFC 3339 timestamp, got {ts:?}"),
            ));
        }
        spec.auto_destroy_at = v.map(Into::into);
    }
    if let Some(v) = input.auto_destroy_activity_duration {
        if let Some(d) = &v {
            rules::parse_auto_destroy_activity_duration(d).map_err(violation)?;
        }
        spec.auto_destroy_activity_duration = v.map(Into::into);
        spec.inherits_project_auto_destroy = false;
    }
    match input.terraform_version {
        Some(Some(v)) if !v.is_empty() => {
            rules::validate_terraform_version(&v).map_err(violation)?;
            spec.terraform_version = Some(v);
        }
        Some(_) => spec.terraform_version = Some(org.terraform_version.clone()),
        None if create => spec.terraform_version = Some(org.terraform_version.clone()),
        None => {}
    }
    // HCP Terraform's requirements of health assessments: remote or agent execution, an
    // engine that has them. Checked when the request enables them or changes what they
    // need.
    let touches = input.assessments_enabled == Some(true) || requested_mode.is_some();
    if spec.assessments_enabled && touches {
        let pointer = if input.assessments_enabled.is_some() {
            "assessments-enabled"
        } else {
            "execution-mode"
        };
        let mode = spec
            .execution_mode
            .as_deref()
            .unwrap_or(org.execution_mode.as_str());
        if mode == "local" {
            return Err(invalid(
                pointer,
                "health assessments need remote or agent execution: a local workspace runs nothing in terrace",
            ));
        }
        if !terrace_crds::assessment::engine_allows(spec.terraform_version.as_deref()) {
            return Err(invalid(
                "assessments-enabled",
                format!(
                    "health assessments need terraform {} or later",
                    terrace_crds::assessment::MIN_ENGINE_VERSION
                ),
            ));
        }
    }
    if let Some(vcs) = input.vcs_repo {
        spec.vcs_repo = match vcs {
            None => None,
            Some(m) => Some(Box::new(merge_vcs_repo(
                spec.vcs_repo.take().map(|b| *b),
                &m,
            )?)),
        };
    }
    crate::write::given(&mut spec.tag_bindings, input.tag_bindings.as_ref());
    if let Some(tags) = input.tags {
        let mut tags = tags;
        tags.sort();
        tags.dedup();
        spec.tags = tags;
    }
    Ok(())
}

/// `vcs-repo` on create or update: an object modifies the listed keys of an existing repo;
/// attaching a repo to a workspace without one needs identifier and a credential.
fn merge_vcs_repo(existing: Option<VcsRepo>, m: &VcsRepoAttributes) -> Result<VcsRepo, ApiError> {
    let attaching = existing.is_none();
    let mut repo = existing.unwrap_or_default();
    if let Some(v) = &m.identifier {
        repo.identifier = v.clone().unwrap_or_default();
    }
    if let Some(v) = &m.branch {
        repo.branch = v.clone().filter(|b| !b.is_empty());
    }
    if let Some(v) = &m.oauth_token_id {
        repo.oauth_token_id = v.clone().filter(|s| !s.is_empty());
    }
    for v in [&m.github_app_installation_id, &m.vcs_app_installation_id]
        .into_iter()
        .flatten()
    {
        repo.vcs_app_installation_id = v.clone().filter(|s| !s.is_empty());
    }
    if let Some(v) = &m.tags_regex {
        repo.tags_regex = v.clone().filter(|s| !s.is_empty());
    }
    crate::write::given(&mut repo.ingress_submodules, m.ingress_submodules.as_ref());
    let both_given = m.oauth_token_id.is_some()
        && (m.github_app_installation_id.is_some() || m.vcs_app_installation_id.is_some());
    let check = VcsRepoInput {
        identifier: Some(repo.identifier.as_str()),
        oauth_token_id: repo.oauth_token_id.as_deref(),
        app_installation_id: repo.vcs_app_installation_id.as_deref(),
        tags_regex: repo.tags_regex.as_deref(),
    };
    let problems = rules::validate_vcs_repo(check);
    if let Some(p) = problems.into_iter().next() {
        return Err(violation(p));
    }
    if both_given && !attaching {
        return Err(invalid(
            "vcs-repo.oauth-token-id",
            "oauth-token-id cannot be combined with github-app-installation-id",
        ));
    }
    Ok(repo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};

    /// The input of a request document with these attributes and relationships.
    fn parse(
        attrs: &Map<String, Value>,
        rels: Option<&Value>,
        hosted: bool,
    ) -> Result<WorkspaceInput, ApiError> {
        let doc =
            json!({"data": {"type": "workspaces", "attributes": attrs, "relationships": rels}});
        let d = crate::body::parse::<
            crate::body::Document<WorkspaceAttributes, WorkspaceRelationships>,
        >(doc.to_string().as_bytes())?
        .checked()?;
        WorkspaceInput::new(d.attributes, d.relationships, hosted)
    }

    fn org() -> OrgDefaults {
        OrgDefaults {
            execution_mode: "remote".into(),
            global_remote_state: false,
            terraform_version: "1.9.8".into(),
        }
    }

    fn create(attrs: Value) -> Result<WorkspaceSpec, ApiError> {
        let attrs = attrs.as_object().cloned().unwrap_or_default();
        let input = parse(&attrs, None, false)?;
        let mut spec = WorkspaceSpec::default_for_create();
        apply(&mut spec, input, true, &org())?;
        Ok(spec)
    }

    fn pointer_of(e: ApiError) -> String {
        match e {
            ApiError::Invalid(fields) => fields[0].pointer.clone(),
            other => panic!("expected 422, got {other:?}"),
        }
    }

    #[test]
    fn create_defaults_are_spec_defaults() {
        let s = create(json!({"name": "ws"})).expect("create");
        assert!(s.allow_destroy_plan);
        assert!(!s.assessments_enabled);
        assert!(!s.auto_apply);
        assert!(!s.auto_apply_run_trigger);
        assert!(s.file_triggers_enabled);
        assert!(!s.global_remote_state);
        assert!(!s.queue_all_runs);
        assert!(s.speculative_enabled);
        assert!(s.trigger_patterns.is_empty() && s.trigger_prefixes.is_empty());
        assert_eq!(s.terraform_version.as_deref(), Some("1.9.8"));
        assert_eq!(s.execution_mode, None);
        assert_eq!(
            s.setting_overwrites.and_then(|o| o.execution_mode),
            Some(false)
        );
        assert!(s.vcs_repo.is_none() && s.working_directory.is_none() && s.description.is_none());
    }

    #[test]
    fn name_is_required_and_checked() {
        assert_eq!(
            pointer_of(create(json!({})).unwrap_err()),
            "/data/attributes/name"
        );
        assert_eq!(
            pointer_of(create(json!({"name": "bad name!"})).unwrap_err()),
            "/data/attributes/name"
        );
        assert_eq!(
            pointer_of(create(json!({"name": 3})).unwrap_err()),
            "/data/attributes/name"
        );
    }

    #[test]
    fn wrong_types_are_422_with_pointer() {
        for (attr, v) in [
            ("auto-apply", json!("yes")),
            ("trigger-prefixes", json!("x")),
            ("description", json!(1)),
            ("allow-destroy-plan", json!(null)),
        ] {
            let e = create(json!({"name": "ws", attr: v})).unwrap_err();
            assert_eq!(pointer_of(e), format!("/data/attributes/{attr}"));
        }
    }

    #[test]
    fn execution_mode_rules() {
        assert_eq!(
            pointer_of(create(json!({"name": "w", "execution-mode": "agent"})).unwrap_err()),
            "/data/attributes/agent-pool-id"
        );
        assert!(
            create(json!({"name": "w", "execution-mode": "agent", "agent-pool-id": "apool-1"}))
                .is_ok()
        );
        assert_eq!(
            pointer_of(
                create(
                    json!({"name": "w", "execution-mode": "remote", "agent-pool-id": "apool-1"})
                )
                .unwrap_err()
            ),
            "/data/attributes/agent-pool-id"
        );
        assert_eq!(
            pointer_of(
                create(json!({"name": "w", "operations": true, "agent-pool-id": "apool-1"}))
                    .unwrap_err()
            ),
            "/data/attributes/agent-pool-id"
        );
        assert_eq!(
            pointer_of(
                create(json!({"name": "w", "operations": true, "execution-mode": "remote"}))
                    .unwrap_err()
            ),
            "/data/attributes/operations"
        );
        assert_eq!(
            pointer_of(create(json!({"name": "w", "execution-mode": "cloud"})).unwrap_err()),
            "/data/attributes/execution-mode"
        );
        assert_eq!(
            pointer_of(
                create(json!({"name": "w", "setting-overwrites": {"execution-mode": true}}))
                    .unwrap_err()
            ),
            "/data/attributes/execution-mode"
        );
        let s = create(json!({"name": "w", "operations": false})).expect("ops false");
        assert_eq!(s.execution_mode.as_deref(), Some("local"));
        let s = create(json!({"name": "w", "execution-mode": "local"})).expect("local");
        assert_eq!(
            s.setting_overwrites.and_then(|o| o.execution_mode),
            Some(true)
        );
        let s = create(json!({"name": "w", "setting-overwrites": {"execution-mode": false}}))
            .expect("inherit");
        assert_eq!(
            s.setting_overwrites.and_then(|o| o.execution_mode),
            Some(false)
        );
    }

    #[test]
    fn auto_destroy_duration_rule() {
        assert!(create(json!({"name": "w", "auto-destroy-activity-duration": "14d"})).is_ok());
        for bad in ["0d", "10000h", "5m", "d"] {
            let e =
                create(json!({"name": "w", "auto-destroy-activity-duration": bad})).unwrap_err();
            assert_eq!(
                pointer_of(e),
                "/data/attributes/auto-destroy-activity-duration"
            );
        }
    }

    #[test]
    fn vcs_repo_create_and_update() {
        let e = create(json!({"name": "w", "vcs-repo": {"branch": "main"}})).unwrap_err();
        assert_eq!(pointer_of(e), "/data/attributes/vcs-repo/identifier");
        let mut s = create(
            json!({"name": "w", "vcs-repo": {"identifier": "acme/app", "oauth-token-id": "ot-1"}}),
        )
        .expect("vcs");
        assert_eq!(
            s.vcs_repo.as_ref().map(|r| r.identifier.as_str()),
            Some("acme/app")
        );
        // Update modifies listed keys only.
        let attrs = json!({"vcs-repo": {"branch": "dev"}})
            .as_object()
            .cloned()
            .unwrap_or_default();
        apply(
            &mut s,
            parse(&attrs, None, false).expect("parse"),
            false,
            &org(),
        )
        .expect("update");
        let repo = s.vcs_repo.clone().expect("repo");
        assert_eq!(
            (repo.identifier.as_str(), repo.branch.as_deref()),
            ("acme/app", Some("dev"))
        );
        // null removes it.
        let attrs = json!({"vcs-repo": null})
            .as_object()
            .cloned()
            .unwrap_or_default();
        apply(
            &mut s,
            parse(&attrs, None, false).expect("parse"),
            false,
            &org(),
        )
        .expect("remove");
        assert!(s.vcs_repo.is_none());
    }

    #[test]
    fn update_keeps_omitted_attributes() {
        let mut s =
            create(json!({"name": "w", "auto-apply": true, "description": "d"})).expect("create");
        let attrs = json!({"queue-all-runs": true})
            .as_object()
            .cloned()
            .unwrap_or_default();
        apply(
            &mut s,
            parse(&attrs, None, false).expect("parse"),
            false,
            &org(),
        )
        .expect("update");
        assert!(s.auto_apply && s.queue_all_runs);
        assert_eq!(s.description.as_deref(), Some("d"));
    }

    #[test]
    fn assessments_only_on_hosted_and_refused_rather_than_dropped() {
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        let attrs = obj(json!({"name": "w", "assessments-enabled": true}));
        let refused = parse(&attrs, None, false).expect_err("self-hosted refuses true");
        assert!(
            format!("{refused:?}").contains("assessments-enabled"),
            "{refused:?}"
        );
        let off = obj(json!({"name": "w", "assessments-enabled": false}));
        assert_eq!(
            parse(&off, None, false).expect("p").assessments_enabled,
            Some(false),
            "false is written, not dropped"
        );
        assert_eq!(
            parse(&attrs, None, true).expect("p").assessments_enabled,
            Some(true)
        );
    }

    #[test]
    fn assessments_need_remote_or_agent_execution_and_a_recent_engine() {
        let obj = |v: Value| v.as_object().cloned().unwrap_or_default();
        let create = |attrs: Value| {
            let mut s = WorkspaceSpec::default_for_create();
            apply(&mut s, parse(&obj(attrs), None, true)?, true, &org()).map(|()| s)
        };
        let s = create(json!({"name": "w", "assessments-enabled": true})).expect("remote");
        assert!(s.assessments_enabled);
        let local =
            create(json!({"name": "w", "assessments-enabled": true, "execution-mode": "local"}));
        assert!(
            format!("{local:?}").contains("remote or agent"),
            "{local:?}"
        );
        let old = create(
            json!({"name": "w", "assessments-enabled": true, "terraform-version": "0.14.11"}),
        );
        assert!(format!("{old:?}").contains("0.15.4"), "{old:?}");
        // Switching an assessed workspace to local execution is refused too.
        let mut s = s;
        let to_local = apply(
            &mut s,
            parse(&obj(json!({"execution-mode": "local"})), None, true).expect("p"),
            false,
            &org(),
        );
        assert!(
            format!("{to_local:?}").contains("execution-mode"),
            "{to_local:?}"
        );
        // An organization whose default is local: an inheriting workspace cannot assess.
        let mut s = WorkspaceSpec::default_for_create();
        let local_org = OrgDefaults {
            execution_mode: "local".into(),
            ..org()
        };
        let r = apply(
            &mut s,
            parse(
                &obj(json!({"name": "w", "assessments-enabled": true})),
                None,
                true,
            )
            .expect("p"),
            true,
            &local_org,
        );
        assert!(r.is_err(), "{r:?}");
    }

    #[test]
    fn tag_bindings_relationship() {
        let rels = json!({"tag-bindings": {"data": [{"type": "tag-bindings", "attributes": {"key": "env", "value": "prod"}}]}});
        let attrs = json!({"name": "w"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let input = parse(&attrs, Some(&rels), false).expect("parse");
        assert_eq!(input.tag_bindings.map(|t| t.len()), Some(1));
        let bad =
            json!({"tag-bindings": {"data": [{"type": "tags", "attributes": {"key": "env"}}]}});
        assert!(parse(&attrs, Some(&bad), false).is_err());
    }
}
