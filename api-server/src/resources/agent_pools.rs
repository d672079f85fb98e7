//! Agent pools: AgentPool objects in the organization's namespace, declared with kubectl
//! or GitOps or managed through the API (TFE's agent pools API: list, show, create,
//! update, delete). Workspaces in `agent` execution mode name one by ID; which workspaces
//! may is the pool's rule ([`terrace_crds::AgentPoolSpec::admits`]): organization-scoped,
//! or its allowed workspaces and projects, minus its excluded workspaces. The pool's Pod
//! template (what its runs' Pods get) is a Kubernetes-side field the API leaves alone.
//! Agents and agent tokens are out of scope (docs/api.md).
//!
//! Rights are the caller's on `agentpools`: `list`/`get` to read, `create`, `update`,
//! `delete` to write.

use std::collections::BTreeMap;

use terrace_crds::constants::ANNOTATION_CREATED_AT;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::Named;
use terrace_crds::{AgentPool, AgentPoolSpec, Workspace};

use crate::index::Inner;
use crate::prelude::*;
use crate::relations::{ProjectEntry, Related, WorkspaceEntry, linkage, related_ids, unique_name};

/// The RBAC resource of agent pools.
const RESOURCE: &str = "agentpools";
/// What `include` may name.
const INCLUDES: &[&str] = &["workspaces"];

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "agent-pools",
        get(list_pools).post(create),
        get(show).patch(update).delete(remove),
    )
}

/// The IDs of the workspaces of namespace `ns` that use each pool (by pool ID).
fn users_by_pool(idx: &Inner, ns: &str) -> BTreeMap<String, Vec<Arc<Workspace>>> {
    let mut out: BTreeMap<String, Vec<Arc<Workspace>>> = BTreeMap::new();
    if let Some(n) = idx.workspaces_in(ns) {
        for w in n.uids_by_name().filter_map(|u| idx.workspace_by_uid(u)) {
            if let Some(p) = w.spec.agent_pool_id.as_deref().filter(|p| !p.is_empty()) {
                out.entry(p.to_owned()).or_default().push(w.clone());
            }
        }
    }
    out
}

/// The JSON:API `data` of an agent pool; `users`: the workspaces that use it.
pub fn render(idx: &Inner, p: &AgentPool, org: &Organization, users: &[Arc<Workspace>]) -> Value {
    let id = id_of(p);
    let ns = p.namespace().unwrap_or_default();
    let used: Vec<Value> = users
        .iter()
        .map(|w| json!({"id": id_of(w.as_ref()), "type": "workspaces"}))
        .collect();
    json!({
        "id": id,
        "type": "agent-pools",
        "attributes": {
            "name": p.spec.name,
            "created-at": created_at(p),
            "organization-scoped": p.spec.organization_scoped,
            "agent-count": 0,
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "workspaces": {"data": used},
            "allowed-workspaces": linkage(idx, &ns, Related::Workspace, &p.spec.allowed_workspaces),
            "allowed-projects": linkage(idx, &ns, Related::Project, &p.spec.allowed_projects),
            "excluded-workspaces": linkage(idx, &ns, Related::Workspace, &p.spec.excluded_workspaces),
            "agents": {"links": {"related": format!("/api/v2/agent-pools/{id}/agents")}},
            "authentication-tokens": {"links": {"related": format!("/api/v2/agent-pools/{id}/authentication-tokens")}},
        },
        "links": {"self": format!("/api/v2/agent-pools/{id}")},
    })
}

/// A pool's document with `included` for `include=workspaces`.
fn render_with(
    idx: &Inner,
    p: &AgentPool,
    org: &Organization,
    users: &[Arc<Workspace>],
    inc: &mut Included,
) -> Value {
    if inc.wants("workspaces") {
        inc.extend(
            users
                .iter()
                .map(|w| crate::resources::runs::workspace_brief(w, org)),
        );
    }
    render(idx, p, org, users)
}

/// Whether workspace `w` is one the pool lists in `entries` (by ID or name).
fn names_workspace(entries: &[String], w: &Workspace) -> bool {
    Named {
        id: Some(&id_of(w)),
        name: &w.spec.name,
    }
    .listed_in(entries)
}

async fn list_pools(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    const FILTERS: &[&str] = &[
        "filter[allowed_workspaces][name]",
        "filter[allowed_projects][name]",
    ];
    let mut l =
        Listing::<AgentPool>::read(&state, &o, &q, "agent-pools", FILTERS, INCLUDES).await?;
    let ns = o.ns().to_owned();
    let idx = state.index.read();
    l.search(&q, "q", |p| &p.spec.name);
    let pools = &mut l.items;
    // A workspace's (project's) pools: those it may use (TFE: the organization-scoped
    // pools and those that allow it).
    if let Some(name) = q.non_empty("filter[allowed_workspaces][name]") {
        let ws = idx.workspace_named(&ns, name).cloned();
        pools.retain(|p| {
            ws.as_ref().is_some_and(|w| {
                p.spec.organization_scoped || names_workspace(&p.spec.allowed_workspaces, w)
            })
        });
    }
    if let Some(name) = q.non_empty("filter[allowed_projects][name]") {
        let prj = idx
            .projects_in(&ns)
            .find(|p| p.spec.name.eq_ignore_ascii_case(name))
            .cloned();
        pools.retain(|p| {
            prj.as_ref().is_some_and(|j| {
                p.spec.organization_scoped
                    || Named {
                        id: Some(&id_of(j.as_ref())),
                        name: &j.spec.name,
                    }
                    .listed_in(&p.spec.allowed_projects)
            })
        });
    }
    sort(pools, q.get("sort").unwrap_or("name"))?;
    let users = users_by_pool(&idx, &ns);
    Ok(l.answer(|p, inc| {
        let used = users.get(&id_of(p.as_ref())).map_or(&[][..], Vec::as_slice);
        render_with(&idx, p, &o.org, used, inc)
    }))
}

/// When a pool was created, to the millisecond where the API created it (kubectl's
/// whole-second creationTimestamp otherwise), then its object name.
fn created_key(p: &AgentPool) -> (String, String) {
    let at = p
        .annotations()
        .get(ANNOTATION_CREATED_AT)
        .cloned()
        .or_else(|| {
            p.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| crate::render::timestamp(&t.0))
        })
        .unwrap_or_default();
    (at, p.name_any())
}

/// Orders pools by `sort`: `name` or `created-at`, `-` for descending (400 otherwise).
fn sort(pools: &mut [Arc<AgentPool>], sort: &str) -> Result<(), ApiError> {
    let (key, desc) = match sort.strip_prefix('-') {
        Some(k) => (k, true),
        None => (sort, false),
    };
    match key {
        "name" => pools.sort_by(|a, b| {
            terrace_crds::rules::name_order(&a.spec.name, &b.spec.name)
                .then_with(|| crate::render::by_creation(a.as_ref(), b.as_ref()))
        }),
        "created-at" => pools.sort_by_cached_key(|p| created_key(p)),
        _ => {
            return Err(ApiError::bad_parameter(
                "sort",
                format!(
                    "cannot sort agent pools by {sort:?}; sort by name or created-at, with - for descending"
                ),
            ));
        }
    }
    if desc {
        pools.reverse();
    }
    Ok(())
}

async fn show(
    State(state): State<AppState>,
    f: Found<AgentPool>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(&q, INCLUDES)?;
    let idx = state.index.read();
    let users = users_by_pool(&idx, &f.at.ns);
    let used = users.get(&f.at.id()).map_or(&[][..], Vec::as_slice);
    let data = render_with(&idx, &f.at.obj, &f.at.org, used, &mut inc);
    Ok(inc.show(StatusCode::OK, data))
}

/// The attributes of an agent pool request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct PoolAttributes {
    name: Option<String>,
    organization_scoped: Option<bool>,
}

impl Typed for PoolAttributes {
    const TYPE: &'static str = "agent-pools";
}

/// The relationships of an agent pool request: each, when given, replaces the list.
#[derive(Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct PoolRelationships {
    allowed_workspaces: Option<ToMany<WorkspaceEntry>>,
    allowed_projects: Option<ToMany<ProjectEntry>>,
    excluded_workspaces: Option<ToMany<WorkspaceEntry>>,
}

/// The pool's name, if given (`required`: it must be): [`unique_name`] among the
/// organization's pools but `this`.
fn checked_name(
    idx: &Inner,
    ns: &str,
    name: Option<&str>,
    required: bool,
    this: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let Some(name) = name else {
        return if required {
            Err(ApiError::invalid_attribute("name", "name is required"))
        } else {
            Ok(None)
        };
    };
    unique_name(name, |n| {
        idx.agent_pools().in_namespace(ns).any(|p| {
            p.spec.name.eq_ignore_ascii_case(n) && Some(id_of(p.as_ref()).as_str()) != this
        })
    })
    .map(Some)
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<PoolAttributes, PoolRelationships>>,
) -> Result<Doc, ApiError> {
    o.require_in_org(
        &state,
        "create",
        RESOURCE,
        "not authorized to create agent pools in this organization",
    )
    .await?;
    let data = doc.checked()?;
    let ns = o.ns().to_owned();
    let spec = {
        let idx = state.index.read();
        let name = checked_name(&idx, &ns, data.attributes.name.as_deref(), true, None)?;
        let r = data.relationships;
        AgentPoolSpec {
            name: name.unwrap_or_default(),
            organization_scoped: data.attributes.organization_scoped.unwrap_or(true),
            allowed_workspaces: related_ids(&idx, &ns, "allowed-workspaces", r.allowed_workspaces)?
                .unwrap_or_default(),
            allowed_projects: related_ids(&idx, &ns, "allowed-projects", r.allowed_projects)?
                .unwrap_or_default(),
            excluded_workspaces: related_ids(
                &idx,
                &ns,
                "excluded-workspaces",
                r.excluded_workspaces,
            )?
            .unwrap_or_default(),
            pod_template: None,
        }
    };
    let id = new_id(IdKind::AgentPool);
    let mut metadata = write::new_meta(&id, &ns, o.org.name_any(), &[]);
    metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_CREATED_AT.to_owned(), crate::render::now());
    let pool = AgentPool {
        metadata,
        spec,
        status: None,
    };
    let created = write::create(&state, &ns, &pool).await?;
    let idx = state.index.read();
    Ok(Doc::created(render(&idx, &created, &o.org, &[])))
}

async fn update(
    State(state): State<AppState>,
    f: Found<AgentPool>,
    JsonApi(doc): JsonApi<Document<PoolAttributes, PoolRelationships>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", "not authorized to update this agent pool")
        .await?;
    let data = doc.checked()?;
    let ns = f.at.ns.clone();
    let id = f.at.id();
    let (name, allowed_ws, allowed_prj, excluded) = {
        let idx = state.index.read();
        let r = data.relationships;
        (
            checked_name(&idx, &ns, data.attributes.name.as_deref(), false, Some(&id))?,
            related_ids(&idx, &ns, "allowed-workspaces", r.allowed_workspaces)?,
            related_ids(&idx, &ns, "allowed-projects", r.allowed_projects)?,
            related_ids(&idx, &ns, "excluded-workspaces", r.excluded_workspaces)?,
        )
    };
    let scoped = data.attributes.organization_scoped;
    let updated = write::update_spec(&state, &ns, (*f.at.obj).clone(), |p| {
        let mut next = p.spec.clone();
        write::given(&mut next.name, name.as_ref());
        write::given(&mut next.organization_scoped, scoped.as_ref());
        write::given(&mut next.allowed_workspaces, allowed_ws.as_ref());
        write::given(&mut next.allowed_projects, allowed_prj.as_ref());
        write::given(&mut next.excluded_workspaces, excluded.as_ref());
        write::spec_diff(&p.spec, &next)
    })
    .await?;
    let idx = state.index.read();
    let users = users_by_pool(&idx, &ns);
    let used = users.get(&id).map_or(&[][..], Vec::as_slice);
    Ok(Doc::ok(render(&idx, &updated, &f.at.org, used)))
}

/// `DELETE /agent-pools/:id`: 204; a pool that workspaces still use is 409 naming them
/// (TFE refuses it too: the workspaces would be left pointing at nothing).
async fn remove(State(state): State<AppState>, f: Found<AgentPool>) -> Result<Response, ApiError> {
    f.require(&state, "delete", "not authorized to delete this agent pool")
        .await?;
    let used: Vec<String> = {
        let idx = state.index.read();
        users_by_pool(&idx, &f.at.ns)
            .remove(&f.at.id())
            .unwrap_or_default()
            .iter()
            .map(|w| w.spec.name.clone())
            .collect()
    };
    if !used.is_empty() {
        return Err(ApiError::conflict(format!(
            "the agent pool is in use by workspaces ({}): move them to another pool or execution mode first",
            used.join(", ")
        )));
    }
    write::delete_if_present(&state, f.at.obj.as_ref()).await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::{ORG, harness, rule};

    const POOLS: &str = "/api/v2/organizations/acme/agent-pools";

    fn body(attrs: Value, rels: Value) -> Option<Value> {
        Some(json!({"data": {"type": "agent-pools", "attributes": attrs, "relationships": rels}}))
    }

    fn ids(rel: &Value) -> Vec<&str> {
        rel["data"]
            .as_array()
            .map(|a| a.iter().filter_map(|d| d["id"].as_str()).collect())
            .unwrap_or_default()
    }

    /// go-tfe's agent pool flow: create with and without scope lists, read (the same
    /// document as the create), update a list alone (the others stay), empty a list,
    /// list with q, sort and both name filters, include the workspaces using a pool, and
    /// delete (refused while a workspace uses it).
    #[tokio::test]
    async fn agent_pools_are_managed_through_the_api() {
        let h = harness(Edition::SelfHosted).await;
        let (w1, w2) = ("ws-PoolUser00000001", "ws-PoolUser00000002");
        h.workspace(w1, "web", |_| {}).await;
        h.workspace(w2, "db", |_| {}).await;
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/organizations/{ORG}/projects"),
                Some(json!({"data": {"type": "projects", "attributes": {"name": "apps"}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let prj = doc["data"]["id"].as_str().unwrap_or_default().to_owned();

        let (st, doc) = h.call("POST", POOLS, body(json!({}), json!({}))).await;
        assert_eq!(st, 422, "a name is required: {doc}");
        let (st, wide) = h
            .call("POST", POOLS, body(json!({"name": "wide"}), json!({})))
            .await;
        assert_eq!(st, 201, "{wide}");
        assert_eq!(wide["data"]["attributes"]["organization-scoped"], true);
        let wide_id = wide["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert!(wide_id.starts_with("apool-"), "{wide_id}");
        let (st, read) = h
            .call("GET", &format!("/api/v2/agent-pools/{wide_id}"), None)
            .await;
        assert_eq!(st, 200);
        assert_eq!(read["data"], wide["data"], "read answers what create did");
        let (st, _) = h
            .call("POST", POOLS, body(json!({"name": "WIDE"}), json!({})))
            .await;
        assert_eq!(st, 422, "names are unique in the organization");

        let (st, narrow) = h
            .call(
                "POST",
                POOLS,
                body(
                    json!({"name": "a-pool", "organization-scoped": false}),
                    json!({
                        "allowed-workspaces": {"data": [{"type": "workspaces", "id": w1}]},
                        "allowed-projects": {"data": [{"type": "projects", "id": prj}]},
                        "excluded-workspaces": {"data": [{"type": "workspaces", "id": w2}]},
                    }),
                ),
            )
            .await;
        assert_eq!(st, 201, "{narrow}");
        let narrow_id = narrow["data"]["id"].as_str().unwrap_or_default().to_owned();
        let rels = &narrow["data"]["relationships"];
        assert_eq!(ids(&rels["allowed-workspaces"]), [w1]);
        assert_eq!(ids(&rels["allowed-projects"]), [prj.as_str()]);
        assert_eq!(ids(&rels["excluded-workspaces"]), [w2]);
        let stored = h
            .state
            .index
            .read()
            .agent_pools()
            .get(&narrow_id)
            .cloned()
            .unwrap_or_else(|| panic!("pool not indexed"));
        assert_eq!(stored.spec.allowed_projects, vec![prj.clone()]);
        let (st, doc) = h
            .call(
                "POST",
                POOLS,
                body(
                    json!({"name": "bad"}),
                    json!({"allowed-workspaces": {"data": [{"type": "workspaces", "id": "ws-NotThere0000001"}]}}),
                ),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/relationships/allowed-workspaces/data/0/id"
        );

        // Only the name: the lists stay. Then one list emptied alone.
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/agent-pools/{narrow_id}"),
                body(json!({"name": "renamed"}), json!({})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["attributes"]["name"], "renamed");
        assert_eq!(
            ids(&doc["data"]["relationships"]["allowed-workspaces"]),
            [w1]
        );
        assert_eq!(
            ids(&doc["data"]["relationships"]["excluded-workspaces"]),
            [w2]
        );
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/agent-pools/{narrow_id}"),
                body(json!({}), json!({"allowed-workspaces": {"data": []}})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert!(ids(&doc["data"]["relationships"]["allowed-workspaces"]).is_empty());
        assert_eq!(
            ids(&doc["data"]["relationships"]["allowed-projects"]),
            [prj.as_str()]
        );
        assert_eq!(doc["data"]["attributes"]["organization-scoped"], false);

        // Lists: q, sort, the allowed-workspace and allowed-project filters.
        let names = |doc: &Value| -> Vec<String> {
            doc["data"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|d| {
                            d["attributes"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let (_, doc) = h.call("GET", &format!("{POOLS}?q=REN"), None).await;
        assert_eq!(names(&doc), ["renamed"]);
        let (_, doc) = h
            .call("GET", &format!("{POOLS}?sort=-created-at"), None)
            .await;
        assert_eq!(names(&doc), ["renamed", "wide"]);
        let (_, doc) = h
            .call("GET", &format!("{POOLS}?sort=created-at"), None)
            .await;
        assert_eq!(names(&doc), ["wide", "renamed"]);
        let (st, _) = h.call("GET", &format!("{POOLS}?sort=agents"), None).await;
        assert_eq!(st, 400);
        let (_, doc) = h
            .call(
                "GET",
                &format!("{POOLS}?filter%5Ballowed_projects%5D%5Bname%5D=apps"),
                None,
            )
            .await;
        assert_eq!(names(&doc), ["renamed", "wide"]);
        assert_eq!(doc["meta"]["pagination"]["total-count"], 2);
        let (_, doc) = h
            .call(
                "GET",
                &format!("{POOLS}?filter%5Ballowed_workspaces%5D%5Bname%5D=web"),
                None,
            )
            .await;
        assert_eq!(
            names(&doc),
            ["wide"],
            "web is no longer allowed in the renamed pool"
        );

        // A workspace that uses the pool: the pool's `workspaces`, the include, and a
        // delete refused until it moves.
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/workspaces/{w1}"),
                Some(json!({"data": {"type": "workspaces", "attributes": {"execution-mode": "agent", "agent-pool-id": wide_id}}})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/agent-pools/{wide_id}?include=workspaces"),
                None,
            )
            .await;
        assert_eq!(ids(&doc["data"]["relationships"]["workspaces"]), [w1]);
        assert_eq!(doc["included"][0]["id"], w1);
        let (st, doc) = h
            .call("DELETE", &format!("/api/v2/agent-pools/{wide_id}"), None)
            .await;
        assert_eq!(st, 409, "{doc}");
        let (st, _) = h
            .call("DELETE", &format!("/api/v2/agent-pools/{narrow_id}"), None)
            .await;
        assert_eq!(st, 204);
        let (st, _) = h
            .call("GET", &format!("/api/v2/agent-pools/{narrow_id}"), None)
            .await;
        assert_eq!(st, 404);
        let (st, _) = h
            .call("DELETE", &format!("/api/v2/agent-pools/{narrow_id}"), None)
            .await;
        assert_eq!(st, 404);
    }

    /// A reader lists pools but may not create, update or delete them (403), as the
    /// chart's workspace roles say.
    #[tokio::test]
    async fn writing_pools_needs_the_rights() {
        let h = harness(Edition::SelfHosted).await;
        let (st, doc) = h
            .call("POST", POOLS, body(json!({"name": "p"}), json!({})))
            .await;
        assert_eq!(st, 201, "{doc}");
        let id = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        let reader = h
            .token_with_role(Some(vec![rule(
                &["get", "list"],
                &["workspaces", "agentpools"],
            )]))
            .await;
        let (st, doc) = h.call_as(&reader, "GET", POOLS, None).await;
        assert_eq!((st, doc["data"].as_array().map(Vec::len)), (200, Some(1)));
        let (st, _) = h
            .call_as(
                &reader,
                "POST",
                POOLS,
                body(json!({"name": "q"}), json!({})),
            )
            .await;
        assert_eq!(st, 403);
        let (st, _) = h
            .call_as(
                &reader,
                "PATCH",
                &format!("/api/v2/agent-pools/{id}"),
                body(json!({"name": "q"}), json!({})),
            )
            .await;
        assert_eq!(st, 403);
        let (st, _) = h
            .call_as(
                &reader,
                "DELETE",
                &format!("/api/v2/agent-pools/{id}"),
                None,
            )
            .await;
        assert_eq!(st, 403);
    }
}
