//! Projects: groups of workspaces of an organization. A project is a Project object in the
//! organization's namespace; each organization has a default one (made by the operator)
//! that cannot be deleted. A project carries tag bindings its workspaces inherit, and
//! defaults its inheriting workspaces take (execution mode and agent pool, where its
//! setting-overwrites say so; an auto-destroy activity duration).

use terrace_crds::constants::LABEL_DEFAULT_PROJECT;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::ProjectSettingOverwrites;
use terrace_crds::rules;
use terrace_crds::{Project, ProjectSpec};

use crate::body::Identifier;
use crate::documents::{self, TagBindingAttributes, tag_bindings_of};
use crate::index::Inner;
use crate::prelude::*;
use crate::query::TagFilter;

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "projects",
        get(list_projects).post(create),
        get(show).patch(update).delete(remove),
    )
}

/// What a project read can include.
const INCLUDES: &[&str] = &["effective_tag_bindings"];

/// The writable attributes of a project.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ProjectAttributes {
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    description: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    default_execution_mode: Nullable<String>,
    #[serde(default, deserialize_with = "nullable")]
    default_agent_pool_id: Nullable<String>,
    setting_overwrites: Option<OverwritesInput>,
    #[serde(default, deserialize_with = "nullable")]
    auto_destroy_activity_duration: Nullable<String>,
}

impl Typed for ProjectAttributes {
    const TYPE: &'static str = "projects";
}

/// `setting-overwrites` of a project: only the keys with organization defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct OverwritesInput {
    default_execution_mode: Option<bool>,
    default_agent_pool: Option<bool>,
}

/// The relationships of a project request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ProjectRelationships {
    tag_bindings: Option<BindingsRelationship>,
    default_agent_pool: Option<ToOne>,
}

/// `relationships.tag-bindings`: `{"data": [...]}`; `[]` or null clears them.
#[derive(Debug, Default, Deserialize)]
struct BindingsRelationship {
    #[serde(default, deserialize_with = "crate::body::null_as_default")]
    data: Vec<Identifier<TagBindingAttributes>>,
}

type ProjectDocument = Document<ProjectAttributes, ProjectRelationships>;

fn invalid(v: rules::RuleViolation) -> ApiError {
    ApiError::Invalid(vec![v.into()])
}

/// Applies a request to `spec` and checks the result with the project rules.
fn apply(
    state: &AppState,
    ns: &str,
    a: &ProjectAttributes,
    r: &ProjectRelationships,
    spec: &mut ProjectSpec,
) -> Result<(), ApiError> {
    if let Some(n) = &a.name {
        rules::validate_project_name(n).map_err(invalid)?;
        spec.name = n.clone();
    }
    if let Some(d) = &a.description {
        spec.description = d.clone();
    }
    if let Some(d) = &a.auto_destroy_activity_duration {
        if let Some(v) = d {
            rules::parse_auto_destroy_activity_duration(v).map_err(invalid)?;
        }
        spec.auto_destroy_activity_duration = d.clone();
    }
    let mut so = spec.setting_overwrites.clone().unwrap_or_default();
    if let Some(m) = &a.default_execution_mode {
        // Giving a mode makes it the project's own unless overwrites say otherwise.
        so.default_execution_mode = Some(m.is_some());
        spec.default_execution_mode = m.clone();
    }
    let pool = r
        .default_agent_pool
        .as_ref()
        .map(|rel| rel.id().flatten().map(str::to_owned))
        .or_else(|| a.default_agent_pool_id.clone());
    let pool_given = pool.is_some();
    if let Some(p) = pool {
        so.default_agent_pool = Some(p.is_some());
        spec.default_agent_pool_id = p.filter(|p| !p.is_empty());
    }
    if let Some(o) = &a.setting_overwrites {
        rules::validate_setting_overwrites(o.default_execution_mode, o.default_agent_pool)
            .map_err(invalid)?;
        so.default_execution_mode = o.default_execution_mode.or(so.default_execution_mode);
        so.default_agent_pool = o.default_agent_pool.or(so.default_agent_pool);
    }
    // A pool kept from an earlier `agent` mode goes with that mode.
    if !pool_given && spec.default_execution_mode.as_deref() != Some("agent") {
        spec.default_agent_pool_id = None;
    }
    spec.setting_overwrites = Some(so).filter(|s| *s != ProjectSettingOverwrites::default());
    let problems = rules::validate_default_execution(
        spec.default_execution_mode.as_deref(),
        spec.default_agent_pool_id.as_deref(),
        "default-execution-mode",
        "default-agent-pool-id",
    );
    if !problems.is_empty() {
        return Err(ApiError::Invalid(
            problems.into_iter().map(Into::into).collect(),
        ));
    }
    if let Some(pool) = &spec.default_agent_pool_id {
        let known = state
            .index
            .read()
            .agent_pools()
            .get(pool)
            .is_some_and(|p| p.meta().namespace.as_deref() == Some(ns));
        if !known {
            return Err(ApiError::invalid_attribute(
                "default-agent-pool-id",
                format!("agent pool {pool:?} not found in this organization"),
            ));
        }
    }
    if let Some(tb) = &r.tag_bindings {
        spec.tag_bindings =
            tag_bindings_of(tb.data.clone(), "/data/relationships/tag-bindings/data")?;
    }
    Ok(())
}

/// The response of one project, with what `inc` asks for.
fn respond(
    state: &AppState,
    p: &Project,
    org: &Organization,
    status: StatusCode,
    mut inc: Included,
) -> Doc {
    let data = rendered(&state.index.read(), p, org, &mut inc);
    inc.show(status, data)
}

/// Project `p`'s document, with its effective tag bindings (its own) linked and added
/// to `inc` when it asks for them.
fn rendered(idx: &Inner, p: &Project, org: &Organization, inc: &mut Included) -> Value {
    let mut data = documents::project_in(idx, p, org);
    if inc.wants("effective_tag_bindings") {
        let id = id_of(p);
        let docs: Vec<Value> = documents::project_effective_tag_bindings(p)
            .iter()
            .map(|b| documents::effective_tag_binding(&id, b))
            .collect();
        let linkage: Vec<Value> = docs
            .iter()
            .map(|d| json!({"id": d["id"], "type": d["type"]}))
            .collect();
        data["relationships"]["effective-tag-bindings"]["data"] = json!(linkage);
        inc.extend(docs);
    }
    data
}

async fn list_projects(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    const FILTERS: &[&str] = &["filter[names]", "filter[tagged]"];
    let mut l = Listing::<Project>::read(&state, &o, &q, "projects", FILTERS, INCLUDES).await?;
    let tagged = q.tagged()?;
    let projects = &mut l.items;
    if let Some(name) = q.non_empty("filter[names]").or(q.non_empty("q")) {
        let names: Vec<String> = name.split(',').map(str::to_ascii_lowercase).collect();
        projects.retain(|p| {
            let n = p.spec.name.to_ascii_lowercase();
            names.iter().any(|f| n.contains(f.as_str()))
        });
    }
    if !tagged.is_empty() {
        projects.retain(|p| {
            let b: Vec<(String, String)> = p
                .spec
                .tag_bindings
                .iter()
                .map(|b| (b.key.clone(), b.value.clone()))
                .collect();
            TagFilter::all_match(&tagged, &b)
        });
    }
    match q.non_empty("sort") {
        // TFE's `sort=name` (`-name` reversed): by name ignoring case.
        Some(sort @ ("name" | "-name")) => {
            projects.sort_by(|a, b| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name));
            if sort == "-name" {
                projects.reverse();
            }
        }
        Some(other) => {
            return Err(ApiError::bad_parameter(
                "sort",
                format!("unsupported sort {other:?}; use name or -name"),
            ));
        }
        // Omitted: TFE's "arbitrary but stable" order; terrace lists the newest first
        // (go-tfe expects a project it just made before the default project).
        None => projects.sort_by(|a, b| {
            crate::render::by_creation(b.as_ref(), a.as_ref())
                .then_with(|| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name))
        }),
    }
    let idx = state.index.read();
    Ok(l.answer(|p, inc| rendered(&idx, p, &o.org, inc)))
}

async fn show(
    State(state): State<AppState>,
    f: Found<Project>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let inc = Included::asked(&q, INCLUDES)?;
    Ok(respond(&state, &f.at.obj, &f.at.org, StatusCode::OK, inc))
}

fn taken(name: &str) -> ApiError {
    ApiError::invalid_attribute("name", format!("Name {name:?} has already been taken"))
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<ProjectDocument>,
) -> Result<Doc, ApiError> {
    let ns = o.ns().to_owned();
    o.require_in_org(
        &state,
        "create",
        "projects",
        "not allowed to create projects",
    )
    .await?;
    let data = doc.checked()?;
    if data.attributes.name.is_none() {
        return Err(ApiError::invalid_attribute("name", "Name can't be blank"));
    }
    let mut spec = ProjectSpec::default();
    apply(
        &state,
        &ns,
        &data.attributes,
        &data.relationships,
        &mut spec,
    )?;
    if state
        .index
        .read()
        .projects_in(&ns)
        .any(|p| p.spec.name.eq_ignore_ascii_case(&spec.name))
    {
        return Err(taken(&spec.name));
    }
    let id = new_id(IdKind::Project);
    let project = Project {
        metadata: write::new_meta(&id, &ns, o.org.name_any(), &[]),
        spec,
        status: None,
    };
    let created = write::create(&state, &ns, &project).await?;
    Ok(respond(
        &state,
        &created,
        &o.org,
        StatusCode::CREATED,
        Included::default(),
    ))
}

async fn update(
    State(state): State<AppState>,
    f: Found<Project, Admin>,
    JsonApi(doc): JsonApi<ProjectDocument>,
) -> Result<Doc, ApiError> {
    let data = doc.checked()?;
    let at = f.at;
    if let Some(n) = &data.attributes.name
        && state
            .index
            .read()
            .projects_in(&at.ns)
            .any(|p| p.name_any() != at.object_name() && p.spec.name.eq_ignore_ascii_case(n))
    {
        return Err(taken(n));
    }
    // Only the attributes that change, guarded by the resourceVersion (crate::write).
    let updated = write::update_spec(&state, &at.ns, (*at.obj).clone(), |cur| {
        let mut next = cur.spec.clone();
        apply(
            &state,
            &at.ns,
            &data.attributes,
            &data.relationships,
            &mut next,
        )?;
        write::spec_diff(&cur.spec, &next)
    })
    .await?;
    Ok(respond(
        &state,
        &updated,
        &at.org,
        StatusCode::OK,
        Included::default(),
    ))
}

async fn remove(State(state): State<AppState>, f: Found<Project>) -> Result<Response, ApiError> {
    let at = f.at;
    state
        .require_or_403(
            &f.caller,
            &at.check("delete"),
            "not allowed to delete this project",
        )
        .await?;
    if at
        .obj
        .labels()
        .get(LABEL_DEFAULT_PROJECT)
        .map(String::as_str)
        == Some("true")
    {
        return Err(ApiError::conflict(
            "the organization's default project cannot be deleted",
        ));
    }
    if state.index.read().project_workspace_count(&at.obj) > 0 {
        return Err(ApiError::conflict(
            "the project still contains workspaces; move or delete them first",
        ));
    }
    write::delete(&state, at.obj.as_ref()).await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::Edition;
    use crate::testing::{ORG, harness};

    fn project_body(attrs: serde_json::Value, rels: serde_json::Value) -> serde_json::Value {
        json!({"data": {"type": "projects", "attributes": attrs, "relationships": rels}})
    }

    /// Tag bindings given on create and update are stored (`[]` clears them) and inherited
    /// by workspaces; `workspace-count` counts the project's workspaces; `filter[tagged]`
    /// with an empty value matches the key with any value; effective bindings include.
    #[tokio::test]
    async fn bindings_counts_and_filters() {
        let h = harness(Edition::SelfHosted).await;
        let base = format!("/api/v2/organizations/{ORG}/projects");
        let (st, doc) = h
            .call(
                "POST",
                &base,
                Some(project_body(
                    json!({"name": "Infra"}),
                    json!({"tag-bindings": {"data": [{"type": "tag-bindings", "attributes": {"key": "env", "value": "prod"}}]}}),
                )),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let (_, tb) = h
            .call("GET", &format!("/api/v2/projects/{id}/tag-bindings"), None)
            .await;
        assert_eq!(tb["data"][0]["attributes"]["key"], "env");
        // A workspace in it inherits them and is counted.
        let (st, ws) = h
            .call(
                "POST",
                &format!("/api/v2/organizations/{ORG}/workspaces"),
                Some(json!({"data": {"type": "workspaces", "attributes": {"name": "w1"}, "relationships": {"project": {"data": {"type": "projects", "id": id}}}}})),
            )
            .await;
        assert_eq!(st, 201, "{ws}");
        let wid = ws["data"]["id"].as_str().unwrap_or_default().to_owned();
        let (_, eff) = h
            .call(
                "GET",
                &format!("/api/v2/workspaces/{wid}/effective-tag-bindings"),
                None,
            )
            .await;
        assert_eq!(eff["data"][0]["attributes"]["value"], "prod");
        let (_, doc) = h.call("GET", &format!("/api/v2/projects/{id}"), None).await;
        assert_eq!(doc["data"]["attributes"]["workspace-count"], 1);
        let (_, doc) = h
            .call(
                "GET",
                &format!("{base}?filter%5Btagged%5D%5B0%5D%5Bkey%5D=env&filter%5Btagged%5D%5B0%5D%5Bvalue%5D="),
                None,
            )
            .await;
        let names: Vec<&str> = doc["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p["attributes"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, ["Infra"]);
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/projects/{id}?include=effective_tag_bindings"),
                None,
            )
            .await;
        assert_eq!(doc["included"][0]["type"], "effective-tag-bindings");
        assert_eq!(
            doc["data"]["relationships"]["effective-tag-bindings"]["data"][0]["type"],
            "effective-tag-bindings"
        );
        // An update with an empty list clears them.
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/projects/{id}"),
                Some(project_body(
                    json!({}),
                    json!({"tag-bindings": {"data": []}}),
                )),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let (_, tb) = h
            .call("GET", &format!("/api/v2/projects/{id}/tag-bindings"), None)
            .await;
        assert_eq!(tb["data"], json!([]));
        // More than ten: 422 and nothing stored.
        let eleven: Vec<serde_json::Value> = (0..11)
            .map(|i| json!({"type": "tag-bindings", "attributes": {"key": format!("k{i}"), "value": "v"}}))
            .collect();
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/projects/{id}"),
                Some(project_body(
                    json!({}),
                    json!({"tag-bindings": {"data": eleven}}),
                )),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("cannot exceed 10 bindings per resource")),
            "{doc}"
        );
    }

    /// The project settings are stored and returned, and validated with the workspace
    /// rules and TFE's words.
    /// `sort=name` lists projects by name ignoring case ("Default Project" among the
    /// d's, not before every lowercase name), `-name` the other way; without a sort the
    /// newest come first (issue 42 §5: go-tfe's TestProjectsList reads the project it
    /// made first, before the default project).
    #[tokio::test]
    async fn projects_are_listed_by_name_ignoring_case() {
        let h = harness(Edition::SelfHosted).await;
        let base = format!("/api/v2/organizations/{ORG}/projects");
        for name in ["zeta", "alpha", "Beta"] {
            let (st, doc) = h
                .call(
                    "POST",
                    &base,
                    Some(project_body(json!({"name": name}), json!({}))),
                )
                .await;
            assert_eq!(st, 201, "{doc}");
        }
        let names = |doc: &Value| -> Vec<String> {
            doc["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["attributes"]["name"].as_str().map(str::to_owned))
                .collect()
        };
        let (st, doc) = h.call("GET", &format!("{base}?sort=name"), None).await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(names(&doc), ["alpha", "Beta", "Default Project", "zeta"]);
        let (_, doc) = h.call("GET", &format!("{base}?sort=-name"), None).await;
        assert_eq!(names(&doc), ["zeta", "Default Project", "Beta", "alpha"]);
        let (st, doc) = h.call("GET", &base, None).await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(names(&doc), ["Beta", "alpha", "zeta", "Default Project"]);
        let (st, _) = h.call("GET", &format!("{base}?sort=size"), None).await;
        assert_eq!(st, 400);
    }

    #[tokio::test]
    async fn settings_are_stored_and_validated() {
        let h = harness(Edition::SelfHosted).await;
        let base = format!("/api/v2/organizations/{ORG}/projects");
        let (st, doc) = h
            .call(
                "POST",
                &base,
                Some(project_body(
                    json!({"name": "Ops", "default-execution-mode": "local", "auto-destroy-activity-duration": "14d"}),
                    json!({}),
                )),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let a = &doc["data"]["attributes"];
        assert_eq!(a["default-execution-mode"], "local");
        assert_eq!(a["setting-overwrites"]["default-execution-mode"], true);
        assert_eq!(a["auto-destroy-activity-duration"], "14d");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        for bad in ["20m", "bar", "0d"] {
            let (st, doc) = h
                .call(
                    "PATCH",
                    &format!("/api/v2/projects/{id}"),
                    Some(project_body(
                        json!({"auto-destroy-activity-duration": bad}),
                        json!({}),
                    )),
                )
                .await;
            assert_eq!(st, 422, "{bad}: {doc}");
            assert_eq!(doc["errors"][0]["title"], "invalid attribute");
            assert!(
                doc["errors"][0]["detail"].as_str().is_some_and(
                    |d| d.starts_with("Auto destroy activity duration has an incorrect format")
                ),
                "{doc}"
            );
        }
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/projects/{id}"),
                Some(project_body(
                    json!({"default-execution-mode": "remote", "default-agent-pool-id": "apool-x"}),
                    json!({}),
                )),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(doc["errors"][0]["detail"].as_str().is_some_and(|d| {
            d.contains("must not be specified unless using 'agent' execution mode")
        }));
        let (st, doc) = h
            .call(
                "POST",
                &base,
                Some(project_body(json!({"name": "bad/name"}), json!({}))),
            )
            .await;
        assert_eq!(st, 422);
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("Name may only contain")),
            "{doc}"
        );
        let (st, _) = h
            .call(
                "PATCH",
                &format!("/api/v2/projects/{id}"),
                Some(project_body(
                    json!({"setting-overwrites": {"nonsense": true}}),
                    json!({}),
                )),
            )
            .await;
        assert_eq!(st, 422, "unknown setting-overwrites keys are refused");
        // TFE's words: agent mode without a pool; overwrites that disagree (projects and
        // workspaces alike).
        let (st, doc) = h
            .call(
                "POST",
                &base,
                Some(project_body(
                    json!({"name": "agents", "default-execution-mode": "agent"}),
                    json!({}),
                )),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with("must be specified when using 'agent' execution mode")),
            "{doc}"
        );
        let mismatch = "If agent-pool and execution-mode are both included in setting-overwrites, their values must be the same.";
        let (st, doc) = h
            .call(
                "POST",
                &base,
                Some(project_body(
                    json!({"name": "mixed", "setting-overwrites": {"default-execution-mode": true, "default-agent-pool": false}}),
                    json!({}),
                )),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with(mismatch)),
            "{doc}"
        );
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/organizations/{ORG}/workspaces"),
                Some(
                    json!({"data": {"type": "workspaces", "attributes": {"name": "mixed",
                    "setting-overwrites": {"execution-mode": false, "agent-pool": true}}}}),
                ),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.ends_with(mismatch)),
            "{doc}"
        );
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/attributes/setting-overwrites"
        );
        // A workspace created in a project with an auto-destroy activity duration inherits
        // it (and says so) unless it sets its own.
        let (st, p) = h
            .call(
                "POST",
                &base,
                Some(project_body(
                    json!({"name": "ephemeral", "auto-destroy-activity-duration": "14d"}),
                    json!({}),
                )),
            )
            .await;
        assert_eq!(st, 201, "{p}");
        let pid = p["data"]["id"].clone();
        for (name, own, want, inherits) in [
            ("inherits", None, "14d", true),
            ("own", Some("3d"), "3d", false),
        ] {
            let mut attrs = json!({"name": name});
            if let Some(d) = own {
                attrs["auto-destroy-activity-duration"] = json!(d);
            }
            let (st, ws) = h
                .call(
                    "POST",
                    &format!("/api/v2/organizations/{ORG}/workspaces"),
                    Some(json!({"data": {"type": "workspaces", "attributes": attrs,
                        "relationships": {"project": {"data": {"type": "projects", "id": pid}}}}})),
                )
                .await;
            assert_eq!(st, 201, "{ws}");
            let a = &ws["data"]["attributes"];
            assert_eq!(a["auto-destroy-activity-duration"], want, "{name}");
            assert_eq!(a["inherits-project-auto-destroy"], inherits, "{name}");
        }
    }
}
