//! Which variable sets apply where: a set's workspaces and projects (global, listed,
//! or owned by a project), and the sets of a workspace or a project.

use super::*;

/// Whether set `s` applies to workspace `w` (globally, through its project, or named).
pub(super) fn applies_to(idx: &Inner, s: &VariableSet, w: &Workspace) -> bool {
    let ws_id = id_of(w);
    let project = idx.project_of(w);
    let project_id = project.map(|p| id_of(p.as_ref()));
    let me = Named {
        id: Some(&ws_id),
        name: &w.spec.name,
    };
    let prj = project.map(|p| Named {
        id: project_id.as_deref(),
        name: &p.spec.name,
    });
    s.spec.scope_for(me, prj).is_some()
}

/// Whether set `s` names project `p`, or `p` owns it.
pub(super) fn names_project(s: &VariableSet, p: &Project) -> bool {
    let me = Named {
        id: Some(&id_of(p)),
        name: &p.spec.name,
    };
    me.listed_in(&s.spec.projects)
        || s.spec
            .parent_project
            .as_ref()
            .is_some_and(|o| me.listed_in(std::slice::from_ref(o)))
}

/// The list at `path` of the sets of `at`'s organization that `keep` selects, sorted by
/// name; empty to a caller who may not list variable sets.
pub(super) async fn sets_where<K: Resource>(
    state: &AppState,
    caller: &Caller,
    at: &Located<K>,
    path: String,
    q: &QueryParams,
    keep: impl Fn(&Inner, &VariableSet) -> bool,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let inc = Included::asked(q, INCLUDES)?;
    let allowed = state
        .allowed(caller, &Check::new("list", RESOURCE, &at.ns, None))
        .await?;
    let idx = state.index.read();
    let sets = if allowed {
        sorted(
            idx.variable_sets()
                .in_namespace(&at.ns)
                .filter(|s| keep(&idx, s))
                .cloned()
                .collect(),
        )
    } else {
        Vec::new()
    };
    Ok(inc.list(&path, page, &sets, |s, inc| {
        s.include(&idx, &at.org, inc);
        s.data(&idx, &at.org)
    }))
}

pub(super) async fn of_workspace(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let path = format!("/api/v2/workspaces/{}/varsets", f.at.id());
    sets_where(&state, &f.caller, &f.at, path, &q, |idx, s| {
        applies_to(idx, s, &f.at.obj)
    })
    .await
}

pub(super) async fn of_project(
    State(state): State<AppState>,
    f: Found<Project>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let path = format!("/api/v2/projects/{}/varsets", f.at.id());
    sets_where(&state, &f.caller, &f.at, path, &q, |_, s| {
        names_project(s, &f.at.obj)
    })
    .await
}
