//! B1 create, B2 update, B4 show, B5 safe delete and B6 force delete, by ID and by
//! organization and name (one [`Found`] extractor serves both addressings).

use std::collections::BTreeMap;

use kube::api::ObjectMeta;
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::{Workspace, WorkspaceSpec};

use super::input::{
    self, OrgDefaults, WorkspaceAttributes, WorkspaceInput, WorkspaceRelationships,
};
use super::render::{lock_holder, workspace_id};
use super::{INCLUDES, Ws, claims, references, respond_one};
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/workspaces",
            get(super::list::list).post(create),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces/{name}",
            get(show).patch(update).delete(force_delete),
        )
        .route(
            "/api/v2/organizations/{org}/workspaces/{name}/actions/safe-delete",
            post(safe_delete),
        )
        .route(
            "/api/v2/workspaces/{id}",
            get(show).patch(update).delete(force_delete),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/safe-delete",
            post(safe_delete),
        )
}

type WorkspaceDocument = Document<WorkspaceAttributes, WorkspaceRelationships>;

async fn show(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let includes = q.includes(INCLUDES)?;
    respond_one(&state, &f.caller, &f.at, StatusCode::OK, &includes, f.by_name).await
}

fn org_defaults(state: &AppState, org: &Organization) -> OrgDefaults {
    OrgDefaults {
        execution_mode: org.spec.settings.default_execution_mode.clone(),
        global_remote_state: !state.hosted() && org.spec.settings.default_global_remote_state,
        terraform_version: state.settings.default_terraform_version.clone(),
    }
}

/// The object name of the project with this ID in namespace `ns` (422 when none).
fn project_from_input(state: &AppState, ns: &str, project_id: &str) -> Result<String, ApiError> {
    let idx = state.index.read();
    let p = idx
        .project(project_id)
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .ok_or_else(|| {
            ApiError::invalid(
                "/data/relationships/project/data/id",
                format!("project {project_id:?} not found in this organization"),
            )
        })?;
    Ok(p.name_any())
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
    JsonApi(doc): JsonApi<WorkspaceDocument>,
) -> Result<Response, ApiError> {
    let (caller, org) = (o.caller.clone(), o.org.clone());
    let ns = o.ns().to_owned();
    state
        .require_or_403(
            &caller,
            &o.check("create", "workspaces"),
            "not allowed to create workspaces in this organization",
        )
        .await?;
    let includes = q.includes(INCLUDES)?;
    let data = doc.checked()?;
    let input = WorkspaceInput::new(data.attributes, data.relationships, state.hosted())?;
    let project = match input.project_id.as_deref() {
        Some(id) if !id.is_empty() => Some(project_from_input(&state, &ns, id)?),
        _ => None,
    };
    let mut spec = WorkspaceSpec::default_for_create();
    input::apply(&mut spec, input, true, &org_defaults(&state, &org))?;
    spec.project = project;
    references::check(&state, &ns, None, None, &spec)?;
    if state
        .index
        .read()
        .workspace_named(&ns, &spec.name)
        .is_some()
    {
        return Err(claims::taken(&spec.name));
    }
    let id = new_id(IdKind::Workspace);
    claims::claim(&state, &ns, &spec.name, &id).await?;
    let ws = Workspace {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&id)),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), org.name_any()),
            ])),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let created = match write::api::<Workspace>(&state, &ns)
        .create(&Default::default(), &ws)
        .await
    {
        Ok(w) => w,
        Err(e) => {
            claims::release(&state, &ns, &ws.spec.name, &id).await;
            return Err(e.into());
        }
    };
    claims::own(&state, &ns, &created.spec.name, &created).await;
    write::wait_seen(&state, &created).await;
    let l = Located {
        obj: Arc::new(created),
        org,
        ns,
    };
    respond_one(&state, &caller, &l, StatusCode::CREATED, &includes, false).await
}

async fn update(
    State(state): State<AppState>,
    f: Found<Workspace, Admin>,
    JsonApi(doc): JsonApi<WorkspaceDocument>,
) -> Result<Response, ApiError> {
    let (state, caller, l, by_name) = (&state, &f.caller, f.at, f.by_name);
    let data = doc.checked()?;
    let input = WorkspaceInput::new(data.attributes, data.relationships, state.hosted())?;
    // Project move: blank or unchanged means no move; a move needs admin on both projects.
    let current_project = state.index.read().project_of(&l.obj).map(|p| p.name_any());
    let target_project = match input.project_id.as_deref() {
        Some(id) if !id.is_empty() => Some(project_from_input(state, &l.ns, id)?),
        _ => None,
    };
    if let Some(target) = &target_project
        && Some(target) != current_project.as_ref()
    {
        let checks = [
            Check::new("update", "projects", &l.ns, current_project.as_deref()),
            Check::new("update", "projects", &l.ns, Some(target)),
        ];
        if !state
            .auth
            .allowed_all(caller, &checks)
            .await?
            .into_iter()
            .all(|b| b)
        {
            return Err(ApiError::forbidden(
                "moving a workspace needs admin access to both projects",
            ));
        }
    }
    let id = workspace_id(&l.obj);
    let old_name = l.obj.spec.name.clone();
    let renamed_to = input
        .name
        .clone()
        .filter(|n| !n.eq_ignore_ascii_case(&old_name));
    if let Some(new_name) = &renamed_to {
        terrace_crds::rules::validate_workspace_name(new_name).map_err(input::violation)?;
        if state
            .index
            .read()
            .workspace_named(&l.ns, new_name)
            .is_some()
        {
            return Err(claims::taken(new_name));
        }
        claims::claim(state, &l.ns, new_name, &id).await?;
    }
    let defaults = org_defaults(state, &l.org);
    // A merge patch of only the attributes that change, guarded by the resourceVersion the
    // change was computed from; never a replace of the index copy, which lacks the kubectl
    // last-applied annotation and managed fields (crate::write).
    let result = write::patch_spec(
        &write::api::<Workspace>(state, &l.ns),
        (*l.obj).clone(),
        |current| {
            let mut next = current.spec.clone();
            input::apply(&mut next, input.clone(), false, &defaults)?;
            references::check(state, &l.ns, Some(&id), Some(&current.spec), &next)?;
            if let Some(t) = &target_project {
                next.project = Some(t.clone());
            }
            write::spec_diff(&current.spec, &next)
        },
    )
    .await;
    let updated = match result {
        Ok(w) => w,
        Err(e) => {
            if let Some(n) = &renamed_to {
                claims::release(state, &l.ns, n, &id).await;
            }
            return Err(e);
        }
    };
    if let Some(n) = &renamed_to {
        claims::own(state, &l.ns, n, &updated).await;
        claims::release(state, &l.ns, &old_name, &id).await;
    }
    let l = super::written(state, &l, updated).await;
    respond_one(state, caller, &l, StatusCode::OK, &[], by_name).await
}

async fn force_delete(
    State(state): State<AppState>,
    f: Found<Workspace>,
) -> Result<Response, ApiError> {
    if !super::may_force_delete(&state, &f.caller, &f.at).await? {
        return Err(ApiError::forbidden(
            "not authorized to force delete this workspace",
        ));
    }
    delete_workspace(&state, &f.at).await
}

async fn safe_delete(
    State(state): State<AppState>,
    f: Found<Workspace>,
) -> Result<Response, ApiError> {
    let l = &f.at;
    state
        .require(&f.caller, &l.check("delete"), Deny::NotFound, || {
            ApiError::not_found("workspace not found")
        })
        .await?;
    if let Some(h) = lock_holder(&l.obj) {
        return Err(ApiError::conflict(format!(
            "Workspace cannot be safely deleted: it is locked by {h}"
        )));
    }
    let count = l.obj.status.as_ref().map_or(0, |s| s.resource_count);
    if count > 0 {
        return Err(ApiError::conflict(format!(
            "Workspace cannot be safely deleted: it is managing {count} resources"
        )));
    }
    delete_workspace(&state, l).await
}

async fn delete_workspace(state: &AppState, l: &Ws) -> Result<Response, ApiError> {
    write::delete(state, l.obj.as_ref()).await?;
    Ok(no_content())
}
