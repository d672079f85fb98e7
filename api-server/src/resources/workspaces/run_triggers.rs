//! Run triggers (TFE's): `POST/GET /workspaces/:id/run-triggers`, `GET/DELETE
//! /run-triggers/:id`. A workspace's inbound triggers are its `spec.runTriggerSources`
//! (workspace IDs; TFE names when written with kubectl), so a GitOps repository declares
//! them on the workspace; the operator queues the triggered runs (its `run::triggers`).
//! A trigger's ID is derived from its two workspaces (`rt-…`), so nothing else is
//! stored. Creating or deleting one needs `update` on the triggered workspace and `get`
//! on the source; a source that is the workspace itself, a cycle, or a 21st source is
//! 422.

use terrace_crds::Workspace;

use super::Ws;
use super::consumers::resolve;
use crate::index::Inner;
use crate::prelude::*;
use crate::render::{Included, stable_id};

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/run-triggers",
            get(list).post(create),
        )
        .route("/api/v2/run-triggers/{rt}", get(show).delete(remove))
}

/// What `include` may name.
const INCLUDES: &[&str] = &["workspace", "sourceable"];

/// A run trigger: `source` triggers `target` (both with IDs).
struct Trigger {
    target: Arc<Workspace>,
    source: Arc<Workspace>,
}

impl Trigger {
    fn id(&self) -> String {
        stable_id(
            "rt-",
            &[&id_of(self.target.as_ref()), &id_of(self.source.as_ref())],
        )
    }
}

/// The triggers whose target is a workspace of namespace `ns` (every edge of the
/// organization's trigger graph).
fn triggers_in(idx: &Inner, ns: &str) -> Vec<Trigger> {
    let Some(all) = idx.workspaces_in(ns) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for target in all.uids_by_name().filter_map(|u| idx.workspace_by_uid(u)) {
        for entry in &target.spec.run_trigger_sources {
            if let Some(source) = resolve(idx, ns, entry) {
                out.push(Trigger {
                    target: target.clone(),
                    source: source.clone(),
                });
            }
        }
    }
    out
}

/// The JSON:API `data` of a trigger.
fn render(t: &Trigger) -> Value {
    let id = t.id();
    let ws = |w: &Workspace| json!({"id": id_of(w), "type": "workspaces"});
    json!({
        "id": id,
        "type": "run-triggers",
        "attributes": {
            "workspace-name": t.target.spec.name,
            "sourceable-name": t.source.spec.name,
            // The trigger is a list entry of its workspace's spec, with no time of its own.
            "created-at": Value::Null,
        },
        "relationships": {
            "workspace": {"data": ws(&t.target)},
            "sourceable": {"data": ws(&t.source)},
        },
        "links": {"self": format!("/api/v2/run-triggers/{id}")},
    })
}

/// `included` of `triggers` for `includes`, each workspace once.
/// Adds what `inc` asks of trigger `t`: its workspace and its source, as workspaces.
fn include(t: &Trigger, inc: &mut Included, org: &Organization) {
    for (name, w) in [("workspace", &t.target), ("sourceable", &t.source)] {
        if inc.wants(name) {
            inc.add(crate::resources::runs::workspace_brief(w, org));
        }
    }
}

async fn list(
    f: Found<Workspace>,
    q: QueryParams,
    State(state): State<AppState>,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let inc = Included::asked(&q, INCLUDES)?;
    q.supported_filters(&["filter[run-trigger][type]"])?;
    let inbound = match q.get("filter[run-trigger][type]") {
        Some("inbound") => true,
        Some("outbound") => false,
        _ => {
            return Err(ApiError::bad_parameter(
                "filter[run-trigger][type]",
                "filter[run-trigger][type] is required: inbound or outbound",
            ));
        }
    };
    let me = f.at.id();
    let all = triggers_in(&state.index.read(), &f.at.ns);
    let mine: Vec<&Trigger> = all
        .iter()
        .filter(|t| {
            let w = if inbound { &t.target } else { &t.source };
            id_of(w.as_ref()) == me
        })
        .collect();
    let base = format!("/api/v2/workspaces/{me}/run-triggers");
    Ok(inc.list(&base, page, &mine, |t, inc| {
        include(t, inc, &f.at.org);
        render(t)
    }))
}

/// The trigger `rt` if the caller may read its workspace; 404 otherwise.
async fn readable(
    state: &AppState,
    caller: &Caller,
    rt: &str,
) -> Result<(Ws, Arc<Workspace>), ApiError> {
    let not_found = || ApiError::not_found("run trigger not found");
    let found = {
        let idx = state.index.read();
        idx.organizations()
            .map(|o| o.target_namespace().to_owned())
            .find_map(|ns| {
                triggers_in(&idx, &ns)
                    .into_iter()
                    .find(|t| t.id() == rt)
                    .map(|t| (id_of(t.target.as_ref()), t.source))
            })
    };
    let (target, source) = found.ok_or_else(not_found)?;
    let at = state
        .readable::<Workspace>(caller, &target)
        .await
        .map_err(|_| not_found())?;
    Ok((at, source))
}

async fn show(
    Authed { state, caller }: Authed,
    Path(rt): Path<String>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(&q, INCLUDES)?;
    let (at, source) = readable(&state, &caller, &rt).await?;
    let t = Trigger {
        target: at.obj.clone(),
        source,
    };
    include(&t, &mut inc, &at.org);
    Ok(inc.show(StatusCode::OK, render(&t)))
}

/// The body of `POST /workspaces/:id/run-triggers`.
#[derive(Debug, Default, Deserialize)]
struct TriggerAttributes {}

impl Typed for TriggerAttributes {
    const TYPE: &'static str = "run-triggers";
}

#[derive(Debug, Default, Deserialize)]
struct TriggerRelationships {
    sourceable: Option<ToOne>,
}

const SOURCE_PTR: &str = "/data/relationships/sourceable/data/id";

async fn create(
    State(state): State<AppState>,
    f: Found<Workspace>,
    JsonApi(doc): JsonApi<Document<TriggerAttributes, TriggerRelationships>>,
) -> Result<Doc, ApiError> {
    f.require(
        &state,
        "update",
        "not authorized to add run triggers to this workspace",
    )
    .await?;
    let data = doc.checked()?;
    let source_id = ToOne::given_id(data.relationships.sourceable.as_ref())
        .ok_or_else(|| ApiError::invalid(SOURCE_PTR, "sourceable is required"))?
        .to_owned();
    let source = {
        let idx = state.index.read();
        idx.workspace(&source_id)
            .filter(|w| w.namespace().as_deref() == Some(f.at.ns.as_str()))
            .cloned()
    };
    let readable = match &source {
        Some(w) => {
            state
                .allowed(&f.caller, &f.at.with((**w).clone()).check("get"))
                .await?
        }
        None => false,
    };
    let Some(source) = source.filter(|_| readable) else {
        return Err(ApiError::invalid(
            SOURCE_PTR,
            format!("workspace {source_id:?} not found in this organization"),
        ));
    };
    let target_id = f.at.id();
    let edges: Vec<(String, String)> = triggers_in(&state.index.read(), &f.at.ns)
        .iter()
        .map(|t| (id_of(t.source.as_ref()), id_of(t.target.as_ref())))
        .collect();
    if edges
        .iter()
        .any(|(s, t)| *s == source_id && *t == target_id)
    {
        return Err(ApiError::invalid(
            SOURCE_PTR,
            "this run trigger exists already",
        ));
    }
    terrace_crds::rules::validate_run_trigger(&edges, &source_id, &target_id)
        .map_err(|e| ApiError::invalid(SOURCE_PTR, e.message))?;
    let updated = write::update_spec(&state, &f.at.ns, (*f.at.obj).clone(), |w| {
        let mut next = w.spec.clone();
        next.run_trigger_sources.push(source_id.clone());
        write::spec_diff(&w.spec, &next)
    })
    .await?;
    Ok(Doc::created(render(&Trigger {
        target: Arc::new(updated),
        source,
    })))
}

async fn remove(
    Authed { state, caller }: Authed,
    Path(rt): Path<String>,
) -> Result<Response, ApiError> {
    let (at, source) = readable(&state, &caller, &rt).await?;
    state
        .require_or_403(
            &caller,
            &at.check("update"),
            "not authorized to remove run triggers of this workspace",
        )
        .await?;
    let source_id = id_of(source.as_ref());
    let ns = at.ns.clone();
    write::update_spec(&state, &ns, (*at.obj).clone(), |w| {
        let mut next = w.spec.clone();
        let idx = state.index.read();
        next.run_trigger_sources
            .retain(|e| resolve(&idx, &ns, e).is_none_or(|s| id_of(s.as_ref()) != source_id));
        write::spec_diff(&w.spec, &next)
    })
    .await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::harness;

    const A: &str = "ws-TriggerSourceA001";
    const B: &str = "ws-TriggerTargetB001";
    const C: &str = "ws-TriggerTargetC001";

    fn body(source: &str) -> Option<Value> {
        Some(json!({"data": {"type": "run-triggers", "relationships": {
            "sourceable": {"data": {"type": "workspaces", "id": source}}}}}))
    }

    /// go-tfe's run trigger flow: create (the spec names the source), list inbound and
    /// outbound (the filter is required), read with includes, and the 422s: itself, a
    /// duplicate, a cycle; delete.
    #[tokio::test]
    async fn run_triggers_are_workspace_spec_entries() {
        let h = harness(Edition::SelfHosted).await;
        for (id, name) in [(A, "network"), (B, "app"), (C, "dns")] {
            h.workspace(id, name, |_| {}).await;
        }
        let triggers = |ws: &str| format!("/api/v2/workspaces/{ws}/run-triggers");
        let (st, doc) = h.call("POST", &triggers(B), body(A)).await;
        assert_eq!(st, 201, "{doc}");
        let rt = doc["data"]["id"].as_str().unwrap_or_default().to_owned();
        assert!(rt.starts_with("rt-"), "{rt}");
        assert_eq!(doc["data"]["attributes"]["sourceable-name"], "network");
        assert_eq!(doc["data"]["attributes"]["workspace-name"], "app");
        assert_eq!(doc["data"]["relationships"]["sourceable"]["data"]["id"], A);
        assert_eq!(h.ws(B).spec.run_trigger_sources, vec![A.to_owned()]);

        let (st, inbound) = h
            .call(
                "GET",
                &format!("{}?filter%5Brun-trigger%5D%5Btype%5D=inbound", triggers(B)),
                None,
            )
            .await;
        assert_eq!(st, 200, "{inbound}");
        assert_eq!(inbound["data"][0], doc["data"], "listed as created");
        let (_, outbound) = h
            .call(
                "GET",
                &format!("{}?filter%5Brun-trigger%5D%5Btype%5D=outbound", triggers(A)),
                None,
            )
            .await;
        assert_eq!(outbound["data"][0]["id"], rt.as_str());
        let (st, _) = h.call("GET", &triggers(B), None).await;
        assert_eq!(st, 400, "the type filter is required");
        let (st, read) = h
            .call(
                "GET",
                &format!("/api/v2/run-triggers/{rt}?include=sourceable,workspace"),
                None,
            )
            .await;
        assert_eq!(st, 200, "{read}");
        assert_eq!(read["included"].as_array().map(Vec::len), Some(2));

        let (st, _) = h.call("POST", &triggers(A), body(A)).await;
        assert_eq!(st, 422, "a workspace cannot trigger itself");
        let (st, _) = h.call("POST", &triggers(B), body(A)).await;
        assert_eq!(st, 422, "a duplicate");
        let (st, doc) = h.call("POST", &triggers(C), body(B)).await;
        assert_eq!(st, 201, "{doc}");
        let (st, doc) = h.call("POST", &triggers(A), body(C)).await;
        assert_eq!(
            st, 422,
            "network -> app -> dns -> network is a cycle: {doc}"
        );
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .unwrap_or_default()
                .contains("cycle")
        );

        let (st, _) = h
            .call("DELETE", &format!("/api/v2/run-triggers/{rt}"), None)
            .await;
        assert_eq!(st, 204);
        assert!(h.ws(B).spec.run_trigger_sources.is_empty());
        let (st, _) = h
            .call("GET", &format!("/api/v2/run-triggers/{rt}"), None)
            .await;
        assert_eq!(st, 404);
    }

    /// TFE's documented payloads without `data.type` are accepted as TFE accepts them
    /// (issue 41 §11): the run-trigger create of TFE's API docs, a variable set created
    /// without one; a wrong type stays 422.
    #[tokio::test]
    async fn documented_payloads_without_a_type_are_accepted() {
        let h = harness(Edition::SelfHosted).await;
        for (id, name) in [(A, "network"), (B, "app")] {
            h.workspace(id, name, |_| {}).await;
        }
        let triggers = format!("/api/v2/workspaces/{B}/run-triggers");
        let documented = json!({"data": {"relationships": {
            "sourceable": {"data": {"id": A, "type": "workspaces"}}}}});
        let (st, doc) = h.call("POST", &triggers, Some(documented)).await;
        assert_eq!(st, 201, "{doc}");
        assert_eq!(doc["data"]["type"], "run-triggers");
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/organizations/acme/varsets",
                Some(json!({"data": {"attributes": {"name": "untyped", "global": false}}})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/organizations/acme/varsets",
                Some(json!({"data": {"type": "workspaces", "attributes": {"name": "wrong"}}})),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert_eq!(doc["errors"][0]["source"]["pointer"], "/data/type");
    }
}
