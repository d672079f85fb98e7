//! Projects: enough of the projects API for the workspace project relationship,
//! `filter[project][id]` and moves between projects. A project is a Project object in the
//! organization's namespace; each organization has a default one (made by the operator)
//! that cannot be deleted.

use std::collections::BTreeMap;

use kube::api::ObjectMeta;
use terrace_crds::constants::{LABEL_DEFAULT_PROJECT, LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Project, ProjectSpec};

use crate::documents;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/projects",
            get(list_projects).post(create),
        )
        .route(
            "/api/v2/projects/{id}",
            get(show).patch(update).delete(remove),
        )
}

/// The writable attributes of a project.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ProjectAttributes {
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    description: Nullable<String>,
}

impl Typed for ProjectAttributes {
    const TYPE: &'static str = "projects";
}

impl ProjectAttributes {
    /// The name given, checked (422 when it breaks the project name rule).
    fn name(&self) -> Result<Option<&str>, ApiError> {
        match &self.name {
            None => Ok(None),
            Some(n) => {
                terrace_crds::rules::validate_project_name(n)
                    .map_err(|v| ApiError::Invalid(vec![v.into()]))?;
                Ok(Some(n))
            }
        }
    }
}

async fn list_projects(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let mut projects = state.listable::<Project>(&o.caller, &o.org).await?;
    if let Some(name) = q.get("filter[names]").or(q.get("q")) {
        let name = name.to_ascii_lowercase();
        projects.retain(|p| p.spec.name.to_ascii_lowercase().contains(&name));
    }
    projects.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    let base = format!("/api/v2/organizations/{}/projects", o.org.tfe_name());
    Ok(list(&base, page, &projects, |p| {
        documents::project(p, &o.org)
    }))
}

async fn show(f: Found<Project>) -> Doc {
    Doc::ok(documents::project(&f.at.obj, &f.at.org))
}

fn taken(name: &str) -> ApiError {
    ApiError::invalid_attribute("name", format!("Name {name:?} has already been taken"))
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<ProjectAttributes>>,
) -> Result<Doc, ApiError> {
    let ns = o.ns().to_owned();
    state
        .require_or_403(
            &o.caller,
            &o.check("create", "projects"),
            "not allowed to create projects",
        )
        .await?;
    let attrs = doc.checked()?.attributes;
    let name = attrs
        .name()?
        .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?
        .to_owned();
    if state
        .index
        .read()
        .projects_in(&ns)
        .any(|p| p.spec.name.eq_ignore_ascii_case(&name))
    {
        return Err(taken(&name));
    }
    let id = new_id(IdKind::Project);
    let project = Project {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&id)),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), o.org.name_any()),
            ])),
            ..Default::default()
        },
        spec: ProjectSpec {
            name,
            description: attrs.description.flatten(),
            tag_bindings: Vec::new(),
        },
        status: None,
    };
    let created = write::create(&state, &ns, &project).await?;
    Ok(Doc::created(documents::project(&created, &o.org)))
}

async fn update(
    State(state): State<AppState>,
    f: Found<Project, Admin>,
    JsonApi(doc): JsonApi<Document<ProjectAttributes>>,
) -> Result<Doc, ApiError> {
    let attrs = doc.checked()?.attributes;
    let name = attrs.name()?.map(str::to_owned);
    let at = f.at;
    // Only the attributes that change, guarded by the resourceVersion (crate::write).
    let updated = write::update_spec(&state, &at.ns, (*at.obj).clone(), |cur| {
        let mut spec = cur.spec.clone();
        if let Some(n) = &name {
            spec.name = n.clone();
        }
        if let Some(d) = &attrs.description {
            spec.description = d.clone();
        }
        write::spec_diff(&cur.spec, &spec)
    })
    .await?;
    Ok(Doc::ok(documents::project(&updated, &at.org)))
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
    let object_name = at.object_name();
    let has_workspaces = {
        let idx = state.index.read();
        idx.workspaces_in(&at.ns).is_some_and(|w| {
            w.uids_by_name()
                .filter_map(|u| idx.workspace_by_uid(u))
                .any(|ws| ws.spec.project.as_deref() == Some(&object_name))
        })
    };
    if has_workspaces {
        return Err(ApiError::conflict(
            "the project still contains workspaces; move or delete them first",
        ));
    }
    write::delete(&state, at.obj.as_ref()).await?;
    Ok(no_content())
}
