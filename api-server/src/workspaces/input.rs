//! Parsing of workspace request documents (B1 create, B2 update) into typed changes, and
//! applying them to a `WorkspaceSpec` under SPEC.md's rules. Wrong types and broken rules
//! become 422 errors pointing at the offending attribute; unknown attributes are ignored.

use serde_json::{Map, Value};
use terrace_crds::common::TagBinding;
use terrace_crds::rules::{self, ExecutionMode, RuleViolation, VcsRepoInput};
use terrace_crds::{SettingOverwrites, VcsRepo, WorkspaceSpec};

use crate::ApiError;

/// A `Option<Option<T>>`: absent (None), null (Some(None)) or a value.
pub type Nullable<T> = Option<Option<T>>;

/// The writable attributes and relationships given in one request.
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
    pub operations: Option<bool>,
    pub queue_all_runs: Option<bool>,
    pub source_name: Nullable<String>,
    pub source_url: Nullable<String>,
    pub speculative_enabled: Option<bool>,
    pub terraform_version: Nullable<String>,
    pub trigger_patterns: Option<Vec<String>>,
    pub trigger_prefixes: Option<Vec<String>>,
    pub working_directory: Nullable<String>,
    pub setting_overwrites: Option<SettingOverwrites>,
    pub vcs_repo: Nullable<Map<String, Value>>,
    /// `relationships.project.data.id`; an empty string means "no move".
    pub project_id: Option<String>,
    pub tag_bindings: Option<Vec<TagBinding>>,
    /// Flat tag names from `relationships.tags` (or the legacy `tag-names` attribute).
    pub tags: Option<Vec<String>>,
}

fn pointer(attr: &str) -> String {
    format!("/data/attributes/{}", attr.replace('.', "/"))
}

fn invalid(attr: &str, detail: impl Into<String>) -> ApiError {
    ApiError::Invalid {
        pointer: pointer(attr),
        detail: detail.into(),
    }
}

/// A rule violation as a 422 with its pointer.
pub fn violation(v: RuleViolation) -> ApiError {
    let detail = v.to_string();
    ApiError::Invalid {
        pointer: pointer(v.attribute),
        detail,
    }
}

fn boolean(attrs: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match attrs.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::Null) => Err(invalid(
            key,
            format!("{key} must be true or false, not null"),
        )),
        Some(other) => Err(invalid(
            key,
            format!("{key} must be a boolean, got {other}"),
        )),
    }
}

fn string(attrs: &Map<String, Value>, key: &str) -> Result<Nullable<String>, ApiError> {
    match attrs.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
        Some(other) => Err(invalid(key, format!("{key} must be a string, got {other}"))),
    }
}

fn strings(attrs: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, ApiError> {
    match attrs.get(key) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(Vec::new())),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .map(Some)
            .ok_or_else(|| invalid(key, format!("{key} must be an array of strings"))),
        Some(other) => Err(invalid(
            key,
            format!("{key} must be an array of strings, got {other}"),
        )),
    }
}

impl WorkspaceInput {
    /// Parses `data.attributes` and `data.relationships`. `hosted`: whether the server acts
    /// as the hosted edition (only it accepts assessments-enabled).
    pub fn parse(
        attrs: &Map<String, Value>,
        relationships: Option<&Value>,
        hosted: bool,
    ) -> Result<WorkspaceInput, ApiError> {
        let name = match attrs.get("name") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(invalid(
                    "name",
                    format!("name must be a string, got {other}"),
                ));
            }
        };
        let setting_overwrites = match attrs.get("setting-overwrites") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(SettingOverwrites {
                execution_mode: boolean(m, "execution-mode").map_err(|_| {
                    invalid("setting-overwrites.execution-mode", "must be a boolean")
                })?,
                agent_pool: boolean(m, "agent-pool")
                    .map_err(|_| invalid("setting-overwrites.agent-pool", "must be a boolean"))?,
            }),
            Some(_) => {
                return Err(invalid(
                    "setting-overwrites",
                    "setting-overwrites must be an object",
                ));
            }
        };
        let vcs_repo = match attrs.get("vcs-repo") {
            None => None,
            Some(Value::Null) => Some(None),
            // pytfe always sends `"vcs-repo": {}`: an empty object changes nothing.
            Some(Value::Object(m)) if m.is_empty() => None,
            Some(Value::Object(m)) => Some(Some(m.clone())),
            Some(_) => return Err(invalid("vcs-repo", "vcs-repo must be an object or null")),
        };
        let mut input = WorkspaceInput {
            name,
            description: string(attrs, "description")?,
            agent_pool_id: string(attrs, "agent-pool-id")?,
            allow_destroy_plan: boolean(attrs, "allow-destroy-plan")?,
            assessments_enabled: if hosted {
                boolean(attrs, "assessments-enabled")?
            } else {
                None
            },
            auto_apply: boolean(attrs, "auto-apply")?,
            auto_apply_run_trigger: boolean(attrs, "auto-apply-run-trigger")?,
            auto_destroy_at: string(attrs, "auto-destroy-at")?,
            auto_destroy_activity_duration: string(attrs, "auto-destroy-activity-duration")?,
            execution_mode: string(attrs, "execution-mode")?,
            file_triggers_enabled: boolean(attrs, "file-triggers-enabled")?,
            global_remote_state: boolean(attrs, "global-remote-state")?,
            operations: boolean(attrs, "operations")?,
            queue_all_runs: boolean(attrs, "queue-all-runs")?,
            source_name: string(attrs, "source-name")?,
            source_url: string(attrs, "source-url")?,
            speculative_enabled: boolean(attrs, "speculative-enabled")?,
            terraform_version: string(attrs, "terraform-version")?,
            trigger_patterns: strings(attrs, "trigger-patterns")?,
            trigger_prefixes: strings(attrs, "trigger-prefixes")?,
            working_directory: string(attrs, "working-directory")?,
            setting_overwrites,
            vcs_repo,
            project_id: None,
            tag_bindings: None,
            tags: None,
        };
        if let Some(rels) = relationships {
            input.parse_relationships(rels)?;
        }
        Ok(input)
    }

    fn parse_relationships(&mut self, rels: &Value) -> Result<(), ApiError> {
        let rel_invalid = |p: &str, d: &str| ApiError::Invalid {
            pointer: format!("/data/relationships/{p}"),
            detail: d.to_owned(),
        };
        let Some(rels) = rels.as_object() else {
            return Err(rel_invalid("", "relationships must be an object"));
        };
        if let Some(project) = rels.get("project") {
            match project.get("data") {
                Some(Value::Null) | None => self.project_id = Some(String::new()),
                Some(d) => match d.get("id") {
                    Some(Value::String(id)) => self.project_id = Some(id.clone()),
                    Some(Value::Null) | None => self.project_id = Some(String::new()),
                    Some(_) => {
                        return Err(rel_invalid(
                            "project/data/id",
                            "project id must be a string",
                        ));
                    }
                },
            }
        }
        if let Some(tb) = rels.get("tag-bindings") {
            let items = match tb.get("data") {
                Some(Value::Array(a)) => a.clone(),
                Some(Value::Null) | None => Vec::new(),
                Some(_) => {
                    return Err(rel_invalid(
                        "tag-bindings/data",
                        "tag-bindings data must be a list",
                    ));
                }
            };
            let mut out: Vec<TagBinding> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if item.get("type").and_then(Value::as_str) != Some("tag-bindings") {
                    return Err(rel_invalid(
                        &format!("tag-bindings/data/{i}/type"),
                        "type must be \"tag-bindings\"",
                    ));
                }
                let key = item.pointer("/attributes/key").and_then(Value::as_str);
                let value = item.pointer("/attributes/value");
                let value = match value {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(_) => {
                        return Err(rel_invalid(
                            &format!("tag-bindings/data/{i}/attributes/value"),
                            "value must be a string",
                        ));
                    }
                };
                let Some(key) = key else {
                    return Err(rel_invalid(
                        &format!("tag-bindings/data/{i}/attributes/key"),
                        "key is required",
                    ));
                };
                rules::validate_tag_binding(key, &value).map_err(|e| {
                    rel_invalid(
                        &format!("tag-bindings/data/{i}/attributes/{}", e.attribute),
                        &e.to_string(),
                    )
                })?;
                match out.iter_mut().find(|b| b.key == key) {
                    Some(existing) => existing.value = value,
                    None => out.push(TagBinding {
                        key: key.to_owned(),
                        value,
                    }),
                }
            }
            self.tag_bindings = Some(out);
        }
        if let Some(tags) = rels.get("tags") {
            let items = tags
                .get("data")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut names = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Some(name) = item.pointer("/attributes/name").and_then(Value::as_str) else {
                    return Err(rel_invalid(
                        &format!("tags/data/{i}/attributes/name"),
                        "tag name is required",
                    ));
                };
                rules::validate_tag_name(name).map_err(|e| {
                    rel_invalid(&format!("tags/data/{i}/attributes/name"), &e.to_string())
                })?;
                names.push(name.to_ascii_lowercase());
            }
            self.tags = Some(names);
        }
        Ok(())
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
    set!(queue_all_runs);
    set!(source_name);
    set!(source_url);
    set!(speculative_enabled);
    set!(trigger_patterns);
    set!(trigger_prefixes);
    set!(working_directory);
    if create && input.global_remote_state.is_none() {
        spec.global_remote_state = org.global_remote_state;
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
        spec.auto_destroy_at = v;
    }
    if let Some(v) = input.auto_destroy_activity_duration {
        if let Some(d) = &v {
            rules::parse_auto_destroy_activity_duration(d).map_err(violation)?;
        }
        spec.auto_destroy_activity_duration = v;
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
    if let Some(vcs) = input.vcs_repo {
        spec.vcs_repo = match vcs {
            None => None,
            Some(m) => Some(merge_vcs_repo(spec.vcs_repo.take(), &m)?),
        };
    }
    if let Some(tb) = input.tag_bindings {
        spec.tag_bindings = tb;
    }
    if let Some(tags) = input.tags {
        let mut tags = tags;
        tags.sort();
        tags.dedup();
        spec.tags = tags;
    }
    Ok(())
}

fn vcs_string(m: &Map<String, Value>, key: &str) -> Result<Nullable<String>, ApiError> {
    string(m, key).map_err(|_| {
        invalid(
            &format!("vcs-repo.{key}"),
            format!("vcs-repo.{key} must be a string"),
        )
    })
}

/// `vcs-repo` on create or update: an object modifies the listed keys of an existing repo;
/// attaching a repo to a workspace without one needs identifier and a credential.
fn merge_vcs_repo(existing: Option<VcsRepo>, m: &Map<String, Value>) -> Result<VcsRepo, ApiError> {
    let attaching = existing.is_none();
    let mut repo = existing.unwrap_or_default();
    if let Some(v) = vcs_string(m, "identifier")? {
        repo.identifier = v.unwrap_or_default();
    }
    if let Some(v) = vcs_string(m, "branch")? {
        repo.branch = v.filter(|b| !b.is_empty());
    }
    if let Some(v) = vcs_string(m, "oauth-token-id")? {
        repo.oauth_token_id = v.filter(|s| !s.is_empty());
    }
    for key in ["github-app-installation-id", "vcs-app-installation-id"] {
        if let Some(v) = vcs_string(m, key)? {
            repo.vcs_app_installation_id = v.filter(|s| !s.is_empty());
        }
    }
    if let Some(v) = vcs_string(m, "tags-regex")? {
        repo.tags_regex = v.filter(|s| !s.is_empty());
    }
    if let Some(v) = boolean(m, "ingress-submodules")
        .map_err(|_| invalid("vcs-repo.ingress-submodules", "must be a boolean"))?
    {
        repo.ingress_submodules = v;
    }
    let both_given = m.contains_key("oauth-token-id")
        && (m.contains_key("github-app-installation-id")
            || m.contains_key("vcs-app-installation-id"));
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
    use serde_json::json;

    fn org() -> OrgDefaults {
        OrgDefaults {
            execution_mode: "remote".into(),
            global_remote_state: false,
            terraform_version: "1.9.8".into(),
        }
    }

    fn create(attrs: Value) -> Result<WorkspaceSpec, ApiError> {
        let attrs = attrs.as_object().cloned().unwrap_or_default();
        let input = WorkspaceInput::parse(&attrs, None, false)?;
        let mut spec = WorkspaceSpec::default_for_create();
        apply(&mut spec, input, true, &org())?;
        Ok(spec)
    }

    fn pointer_of(e: ApiError) -> String {
        match e {
            ApiError::Invalid { pointer, .. } => pointer,
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
            WorkspaceInput::parse(&attrs, None, false).expect("parse"),
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
            WorkspaceInput::parse(&attrs, None, false).expect("parse"),
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
            WorkspaceInput::parse(&attrs, None, false).expect("parse"),
            false,
            &org(),
        )
        .expect("update");
        assert!(s.auto_apply && s.queue_all_runs);
        assert_eq!(s.description.as_deref(), Some("d"));
    }

    #[test]
    fn assessments_only_on_hosted() {
        let attrs = json!({"name": "w", "assessments-enabled": true})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            WorkspaceInput::parse(&attrs, None, false)
                .expect("p")
                .assessments_enabled,
            None
        );
        assert_eq!(
            WorkspaceInput::parse(&attrs, None, true)
                .expect("p")
                .assessments_enabled,
            Some(true)
        );
    }

    #[test]
    fn tag_bindings_relationship() {
        let rels = json!({"tag-bindings": {"data": [{"type": "tag-bindings", "attributes": {"key": "env", "value": "prod"}}]}});
        let attrs = json!({"name": "w"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let input = WorkspaceInput::parse(&attrs, Some(&rels), false).expect("parse");
        assert_eq!(input.tag_bindings.map(|t| t.len()), Some(1));
        let bad =
            json!({"tag-bindings": {"data": [{"type": "tags", "attributes": {"key": "env"}}]}});
        assert!(WorkspaceInput::parse(&attrs, Some(&bad), false).is_err());
    }
}
