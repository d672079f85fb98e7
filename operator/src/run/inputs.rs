//! What a run's Pod is given from the catalog: its workspace's variables and variable
//! sets, the current configuration version, the project and the agent pool.

use super::*;

/// The workspace's variables as the run needs them, from the catalog's cache: its own
/// (a key defined twice in a category keeps the variable with the smallest object name)
/// and those of the variable sets applied to it, the winner of each key by TFE's
/// precedence ([`terrace_crds::rules::winning_variables`]). A variable of a priority set
/// says so (`overrides_run`): it wins over the run's own.
pub(super) fn variables_of(catalog: &CatalogStores, ns: &str, ws: &Workspace) -> Vec<Variable> {
    use terrace_crds::resources::Named;
    use terrace_crds::rules::{Candidate, VariableSource, winning_variables};
    let mut own: Vec<(String, WorkspaceVariable)> = catalog
        .in_namespace(IdKind::WorkspaceVariable, ns)
        .into_iter()
        .filter_map(|o| crate::catalog::typed::<WorkspaceVariable>(&o).map(|v| (o.name_any(), v)))
        .filter(|(_, v)| v.spec.workspace == ws.name_any())
        .collect();
    own.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = std::collections::HashSet::new();
    let mut candidates: Vec<Candidate<Variable>> = own
        .into_iter()
        .filter(|(_, v)| seen.insert((v.spec.category.clone(), v.spec.key.clone())))
        .map(|(_, v)| Candidate {
            source: VariableSource::Workspace,
            set_name: String::new(),
            category: v.spec.category.clone(),
            key: v.spec.key.clone(),
            item: Variable {
                key: v.spec.key,
                value: v.spec.value,
                category: v.spec.category,
                hcl: v.spec.hcl,
                value_from: v.spec.value_from,
                overrides_run: false,
            },
        })
        .collect();
    let ws_id = ws.labels().get(LABEL_ID).cloned();
    let me = Named {
        id: ws_id.as_deref(),
        name: &ws.spec.name,
    };
    let project = project_of(catalog, ns, ws);
    let project_id = project
        .as_ref()
        .and_then(|p| p.labels().get(LABEL_ID).cloned());
    let project_name = project
        .as_deref()
        .and_then(crate::catalog::typed::<terrace_crds::Project>)
        .map(|p| p.spec.name)
        .unwrap_or_default();
    let project = project.as_ref().map(|_| Named {
        id: project_id.as_deref(),
        name: &project_name,
    });
    for set in catalog
        .in_namespace(IdKind::VariableSet, ns)
        .iter()
        .filter_map(|o| crate::catalog::typed::<terrace_crds::VariableSet>(o))
    {
        let Some(scope) = set.spec.scope_for(me, project) else {
            continue;
        };
        let source = VariableSource::of_set(scope, set.spec.priority);
        for v in &set.spec.variables {
            candidates.push(Candidate {
                source,
                set_name: set.spec.name.clone(),
                category: v.category.clone(),
                key: v.key.clone(),
                item: Variable {
                    key: v.key.clone(),
                    value: v.value.clone(),
                    category: v.category.clone(),
                    hcl: v.hcl,
                    value_from: v.value_from.clone(),
                    overrides_run: source.overrides_run(),
                },
            });
        }
    }
    winning_variables(candidates)
        .into_iter()
        .map(|c| c.item)
        .collect()
}

/// The current configuration version of workspace `ws_id` in `ns`: its newest uploaded,
/// usable one that is not provisional (what a run queued without one uses).
pub async fn current_configuration(
    client: &kube::Client,
    ns: &str,
    ws_id: &str,
) -> Result<Option<terrace_crds::ConfigurationVersion>, Error> {
    let cvs: Api<terrace_crds::ConfigurationVersion> = Api::namespaced(client.clone(), ns);
    let list = cvs
        .list(&kube::api::ListParams::default().labels(&format!(
            "{}={ws_id}",
            terrace_crds::constants::LABEL_WORKSPACE_ID
        )))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| c.usable() && !c.spec.provisional)
        .max_by(|a, b| {
            let at = |c: &terrace_crds::ConfigurationVersion| {
                (
                    c.status.as_ref().and_then(|s| s.uploaded_at.clone()),
                    c.metadata.creation_timestamp.clone(),
                )
            };
            at(a).cmp(&at(b))
        }))
}

/// The workspace's Project object from the catalog: its named project, else the
/// namespace's default one.
pub(super) fn project_of(
    catalog: &CatalogStores,
    ns: &str,
    ws: &Workspace,
) -> Option<Arc<kube::api::DynamicObject>> {
    match ws.spec.project.as_deref().filter(|p| !p.is_empty()) {
        Some(name) => catalog.get(IdKind::Project, ns, name),
        None => crate::workspace::default_project(catalog.in_namespace(IdKind::Project, ns)),
    }
}

/// The TFE name of the workspace's project; empty when the cache has none.
pub(super) fn project_name_of(catalog: &CatalogStores, ns: &str, ws: &Workspace) -> String {
    project_of(catalog, ns, ws)
        .as_deref()
        .and_then(crate::catalog::typed::<terrace_crds::Project>)
        .map(|p| p.spec.name)
        .unwrap_or_default()
}

/// The agent pool of an `agent`-mode workspace (its `agent-pool-id`), from the catalog.
pub(super) fn agent_pool_of(
    catalog: &CatalogStores,
    ns: &str,
    ws: &Workspace,
) -> Option<AgentPool> {
    if ws.spec.execution_mode.as_deref() != Some("agent") {
        return None;
    }
    let id = ws.spec.agent_pool_id.as_deref()?;
    catalog
        .in_namespace(IdKind::AgentPool, ns)
        .into_iter()
        .find(|p| p.labels().get(LABEL_ID).map(String::as_str) == Some(id))
        .and_then(|p| crate::catalog::typed::<AgentPool>(&p))
}

/// The metadata of a new run `id` of workspace `ws`: named after its ID, in the
/// workspace's namespace, labelled with its ID, organization and workspace, owned by the
/// workspace (so it goes when the workspace goes); `labels` adds more.
pub fn new_run_meta(ws: &Workspace, id: &str, labels: &[(&str, &str)]) -> kube::api::ObjectMeta {
    use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION, LABEL_WORKSPACE_ID};
    let label = |k: &str| ws.labels().get(k).cloned().unwrap_or_default();
    let mut all = std::collections::BTreeMap::from([
        (LABEL_ID.to_owned(), id.to_owned()),
        (LABEL_ORGANIZATION.to_owned(), label(LABEL_ORGANIZATION)),
        (LABEL_WORKSPACE_ID.to_owned(), label(LABEL_ID)),
    ]);
    all.extend(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    kube::api::ObjectMeta {
        name: Some(terrace_crds::ids::object_name_for_id(id)),
        namespace: ws.namespace(),
        labels: Some(all),
        owner_references: ws.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    }
}
