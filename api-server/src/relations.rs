//! Lists of workspaces and projects that objects of an organization name (an agent pool's
//! allowed workspaces and projects, a variable set's workspaces and projects): resolving
//! an entry (an ID, or a name as kubectl users write it) and checking the entries of a
//! request, and the unique display name such objects have.

use crate::index::Inner;
use crate::prelude::*;

/// Entries of a workspaces relationship.
pub struct WorkspaceEntry;
impl Typed for WorkspaceEntry {
    const TYPE: &'static str = "workspaces";
}

/// Entries of a projects relationship.
pub struct ProjectEntry;
impl Typed for ProjectEntry {
    const TYPE: &'static str = "projects";
}

/// The kind of object an entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Related {
    Workspace,
    Project,
}

impl Related {
    fn of<T: Typed>() -> Related {
        if T::TYPE == ProjectEntry::TYPE {
            Related::Project
        } else {
            Related::Workspace
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            Related::Workspace => WorkspaceEntry::TYPE,
            Related::Project => ProjectEntry::TYPE,
        }
    }
}

/// Relationship list `list` (IDs or names of workspaces or projects, `kind`, of `ns`)
/// with `ids` added, each once; or, when not `add`, without every entry that names one
/// of them (a `POST` or `DELETE` of a relationship).
pub fn relate_ids(list: &mut Vec<String>, ids: &[String], add: bool, at: (&Inner, &str, Related)) {
    if add {
        for id in ids {
            if !list.contains(id) {
                list.push(id.clone());
            }
        }
    } else {
        let (idx, ns, kind) = at;
        list.retain(|e| resolve(idx, ns, kind, e).is_none_or(|id| !ids.contains(&id)));
    }
}

/// The ID of the workspace (project) of `ns` that `entry` names: an ID, else a TFE name
/// (ignoring case).
pub fn resolve(idx: &Inner, ns: &str, kind: Related, entry: &str) -> Option<String> {
    match kind {
        Related::Project => idx
            .project(entry)
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .or_else(|| {
                idx.projects_in(ns)
                    .find(|p| p.spec.name.eq_ignore_ascii_case(entry))
            })
            .map(|p| id_of(p.as_ref())),
        Related::Workspace => idx
            .workspace(entry)
            .filter(|w| w.namespace().as_deref() == Some(ns))
            .or_else(|| idx.workspace_named(ns, entry))
            .map(|w| id_of(w.as_ref())),
    }
}

/// `{"data": [...]}` of the IDs `entries` resolve to (an entry naming nothing, such as a
/// deleted workspace, is left out).
pub fn linkage(idx: &Inner, ns: &str, kind: Related, entries: &[String]) -> Value {
    let data: Vec<Value> = entries
        .iter()
        .filter_map(|e| resolve(idx, ns, kind, e))
        .map(|id| json!({"id": id, "type": kind.type_name()}))
        .collect();
    json!({ "data": data })
}

/// The IDs of a request's relationship, each a workspace (project) of `ns`, without
/// duplicates; 422 at `{pointer}/{i}/type` or `/id` for an entry that is not.
pub fn ids_of<T: Typed>(
    idx: &Inner,
    ns: &str,
    pointer: &str,
    given: ToMany<T>,
) -> Result<Vec<String>, ApiError> {
    let kind = Related::of::<T>();
    let mut ids: Vec<String> = Vec::new();
    let mut errors = Vec::new();
    for (i, e) in given.entries.iter().enumerate() {
        if e.kind.as_deref() != Some(T::TYPE) {
            errors.push(FieldError::new(
                format!("{pointer}/{i}/type"),
                format!("type must be {:?}", T::TYPE),
            ));
            continue;
        }
        let id = e.id.as_deref().unwrap_or_default();
        let found = match kind {
            Related::Project => idx
                .project(id)
                .is_some_and(|p| p.namespace().as_deref() == Some(ns)),
            Related::Workspace => idx
                .workspace(id)
                .is_some_and(|w| w.namespace().as_deref() == Some(ns)),
        };
        if !found {
            errors.push(FieldError::new(
                format!("{pointer}/{i}/id"),
                format!("{id:?} not found in this organization"),
            ));
        } else if !ids.iter().any(|x| x == id) {
            ids.push(id.to_owned());
        }
    }
    if errors.is_empty() {
        Ok(ids)
    } else {
        Err(ApiError::Invalid(errors))
    }
}

/// The IDs of relationship `rel` of a request (`/data/relationships/{rel}/data`, see
/// [`ids_of`]); None when the request does not give it.
pub fn related_ids<T: Typed>(
    idx: &Inner,
    ns: &str,
    rel: &str,
    given: Option<ToMany<T>>,
) -> Result<Option<Vec<String>>, ApiError> {
    given
        .map(|g| ids_of(idx, ns, &format!("/data/relationships/{rel}/data"), g))
        .transpose()
}

/// A display name given in a request: not blank, at most 90 characters, and not `taken`
/// (by another object of the organization, ignoring case: TFE's "has already been
/// taken"). Answers it trimmed.
pub fn unique_name(name: &str, taken: impl FnOnce(&str) -> bool) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ApiError::invalid_attribute("name", "name can't be blank"));
    }
    if name.chars().count() > 90 {
        return Err(ApiError::invalid_attribute(
            "name",
            "name is too long (maximum is 90 characters)",
        ));
    }
    if taken(name) {
        return Err(ApiError::invalid_attribute(
            "name",
            "name has already been taken",
        ));
    }
    Ok(name.to_owned())
}
