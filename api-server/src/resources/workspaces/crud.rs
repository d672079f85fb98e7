//! B1 create, B2 update, B4 show, B5 safe delete and B6 force delete, by ID and by
//! organization and name (one [`Found`] extractor serves both addressings).

use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::{Workspace, WorkspaceSpec};

use super::input::{
    self, OrgDefaults, WorkspaceAttributes, WorkspaceInput, WorkspaceRelationships,
};
use super::render::{lock_holder, workspace_id};
use super::{INCLUDES, Ws, claims, references, respond_one};
use crate::prelude::*;
use axum::extract::FromRequestParts;

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

/// B4. A caller reading the same unchanged workspace again is answered from the
/// [`super::ResponseCache`] without authentication, authorization or rendering.
async fn show(
    State(state): State<AppState>,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (parts, _) = req.into_parts();
    let key = crate::auth::bearer(&parts).map(|t| super::ResponseCache::key(t, &parts.uri));
    if let Some(bytes) = key.and_then(|k| state.responses.get(&state, k)) {
        return Ok(crate::render::DocBytes(StatusCode::OK, bytes).into_response());
    }
    // The slow path boxed, so the fast path's future stays small.
    Box::pin(show_slow(state, parts, key)).await
}

async fn show_slow(
    state: AppState,
    mut parts: axum::http::request::Parts,
    key: Option<u128>,
) -> Result<Response, ApiError> {
    let f = Found::<Workspace>::from_request_parts(&mut parts, &state).await?;
    let includes = QueryParams::parse(parts.uri.query()).includes(INCLUDES)?;
    let bytes = super::one_document(&state, &f.caller, &f.at, &includes).await?;
    if let Some(k) = key {
        state.responses.put(&state, k, &f.at, bytes.clone());
    }
    Ok(crate::render::DocBytes(StatusCode::OK, bytes).into_response())
}

fn org_defaults(state: &AppState, org: &Organization) -> OrgDefaults {
    OrgDefaults {
        execution_mode: org.spec.settings.default_execution_mode.clone(),
        global_remote_state: !state.hosted() && org.spec.settings.default_global_remote_state,
        terraform_version: state.settings.default_terraform_version.clone(),
    }
}

/// A new workspace that sets no auto-destroy of its own takes its project's
/// `auto-destroy-activity-duration` (TFE's inheritance), and says so.
fn inherit_auto_destroy(state: &AppState, ns: &str, spec: &mut WorkspaceSpec) {
    if spec.auto_destroy_activity_duration.is_some() || spec.auto_destroy_at.is_some() {
        return;
    }
    let idx = state.index.read();
    let project = match spec.project.as_deref() {
        Some(name) => idx.project_named(ns, name),
        None => idx.default_project(ns),
    };
    if let Some(d) = project.and_then(|p| p.spec.auto_destroy_activity_duration.clone()) {
        spec.auto_destroy_activity_duration = Some(d.into());
        spec.inherits_project_auto_destroy = true;
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
    inherit_auto_destroy(&state, &ns, &mut spec);
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
        metadata: write::new_meta(&id, &ns, org.name_any(), &[]),
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
    respond_one(&state, &caller, &l, StatusCode::CREATED, &includes).await
}

async fn update(
    State(state): State<AppState>,
    f: Found<Workspace, Admin>,
    JsonApi(doc): JsonApi<WorkspaceDocument>,
) -> Result<Response, ApiError> {
    let (state, caller, l) = (&state, &f.caller, f.at);
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
    respond_one(state, caller, &l, StatusCode::OK, &[]).await
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
    // The current state's resources (a workspace without state: what its status says).
    let count = state
        .index
        .read()
        .current_state_version(&l.obj)
        .and_then(|v| v.status.as_ref().map(|s| s.resource_count))
        .unwrap_or_else(|| l.obj.status.as_ref().map_or(0, |s| s.resource_count));
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

#[cfg(test)]
mod tests {
    use futures::future::join_all;
    use serde_json::{Value, json};
    use terrace_crds::WorkspaceSpec;
    use terrace_crds::common::TagBinding;

    use crate::Edition;
    use crate::testing::{ORG, harness, rule};

    fn ws_body(attrs: Value) -> Option<Value> {
        Some(json!({"data": {"type": "workspaces", "attributes": attrs}}))
    }

    fn names(doc: &Value) -> Vec<String> {
        doc["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|w| w["attributes"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// What go-tfe and the terraform CLI send and read of workspaces: an empty
    /// `filter[tagged][i][value]` means any value; `include=effective_tag_bindings` fills
    /// the relationship and `included`; at most ten bindings; the self link of a read by
    /// name is by name; the legacy `tag-names` attribute sets flat tags.
    #[tokio::test]
    async fn what_clients_send_and_read() {
        let h = harness(Edition::SelfHosted).await;
        let tb = |k: &str, v: &str| TagBinding {
            key: k.into(),
            value: v.into(),
        };
        h.workspace(
            "ws-Tagged0000000001",
            "prod-app",
            |s: &mut WorkspaceSpec| s.tag_bindings = vec![tb("env", "prod")],
        )
        .await;
        h.workspace("ws-Tagged0000000002", "dev-app", |s: &mut WorkspaceSpec| {
            s.tag_bindings = vec![tb("env", "")]
        })
        .await;
        h.workspace("ws-Tagged0000000003", "plain", |_| {}).await;
        let list = format!("/api/v2/organizations/{ORG}/workspaces");
        let (_, doc) = h
            .call(
                "GET",
                &format!("{list}?filter%5Btagged%5D%5B0%5D%5Bkey%5D=env&filter%5Btagged%5D%5B0%5D%5Bvalue%5D=&TagBindings=%7B+env+%7D"),
                None,
            )
            .await;
        assert_eq!(names(&doc), ["dev-app", "prod-app"]);
        let (st, doc) = h
            .call(
                "GET",
                &format!("{list}?include=effective_tag_bindings&search%5Bname%5D=prod"),
                None,
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(
            doc["data"][0]["relationships"]["effective-tag-bindings"]["data"][0]["type"],
            "effective-tag-bindings"
        );
        assert_eq!(doc["included"][0]["attributes"]["key"], "env");
        let (_, doc) = h
            .call(
                "GET",
                "/api/v2/workspaces/ws-Tagged0000000001?include=effective_tag_bindings",
                None,
            )
            .await;
        assert_eq!(doc["included"][0]["attributes"]["value"], "prod");
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/organizations/{ORG}/workspaces/prod-app"),
                None,
            )
            .await;
        assert_eq!(
            doc["data"]["links"]["self"],
            format!("/api/v2/organizations/{ORG}/workspaces/prod-app")
        );
        // The same self link however it is read (TFE's organization/name form).
        let (_, doc) = h
            .call("GET", "/api/v2/workspaces/ws-Tagged0000000001", None)
            .await;
        assert_eq!(
            doc["data"]["links"]["self"],
            format!("/api/v2/organizations/{ORG}/workspaces/prod-app")
        );
        let eleven: Vec<Value> = (0..11)
            .map(|i| json!({"type": "tag-bindings", "attributes": {"key": format!("k{i}"), "value": "v"}}))
            .collect();
        let (st, doc) = h
            .call(
                "POST",
                &list,
                Some(json!({"data": {"type": "workspaces", "attributes": {"name": "many"}, "relationships": {"tag-bindings": {"data": eleven}}}})),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("cannot exceed 10 bindings per resource"))
        );
        let (st, doc) = h
            .call(
                "POST",
                &list,
                ws_body(json!({"name": "legacy", "tag-names": ["Web", "db"]})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        assert_eq!(doc["data"]["attributes"]["tag-names"], json!(["db", "web"]));
        // Unknown includes and filters are 400, not silently ignored.
        let (st, doc) = h
            .call("GET", &format!("{list}?include=nonsense"), None)
            .await;
        assert_eq!(st, 400);
        assert!(
            doc["errors"][0]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("Invalid include parameter"))
        );
        assert_eq!(
            h.call("GET", &format!("{list}?include="), None).await.0,
            200,
            "an empty include names nothing"
        );
        let (st, doc) = h
            .call("GET", &format!("{list}?filter%5Bcolor%5D=red"), None)
            .await;
        assert_eq!(st, 400);
        assert_eq!(doc["errors"][0]["source"]["parameter"], "filter[color]");
    }

    /// project-remote-state: stored, refused together with global-remote-state (422), and
    /// the consumers list then answers the project's other workspaces.
    #[tokio::test]
    async fn project_remote_state() {
        let h = harness(Edition::SelfHosted).await;
        // c is in another project, and named as a consumer of a.
        h.create(terrace_crds::Project {
            metadata: crate::testing::meta(
                "elsewhere",
                Some(ORG),
                &[(terrace_crds::constants::LABEL_ID, "prj-Elsewhere0000001")],
            ),
            spec: terrace_crds::ProjectSpec {
                name: "Elsewhere".into(),
                ..Default::default()
            },
            status: None,
        })
        .await;
        h.workspace("ws-ProjectState00003", "c", |s| {
            s.project = Some("elsewhere".into());
        })
        .await;
        h.workspace("ws-ProjectState00001", "a", |s| {
            s.remote_state_consumers = vec!["ws-ProjectState00003".into()];
        })
        .await;
        h.workspace("ws-ProjectState00002", "b", |_| {}).await;
        let (st, doc) = h
            .call(
                "PATCH",
                "/api/v2/workspaces/ws-ProjectState00001",
                ws_body(json!({"project-remote-state": true, "global-remote-state": true})),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(doc["errors"][0]["detail"].as_str().is_some_and(|d| d.contains("Project remote state cannot be enabled when global remote state sharing is enabled")));
        let (st, doc) = h
            .call(
                "PATCH",
                "/api/v2/workspaces/ws-ProjectState00001",
                ws_body(json!({"project-remote-state": true})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["attributes"]["project-remote-state"], true);
        let (_, doc) = h
            .call(
                "GET",
                "/api/v2/workspaces/ws-ProjectState00001/relationships/remote-state-consumers",
                None,
            )
            .await;
        assert_eq!(names(&doc), ["b"], "the project's other workspaces only");
    }

    /// A Role limited to one workspace by name reads it by organization and name as by ID
    /// (SPEC B4: identical behaviour), and nothing else.
    #[tokio::test]
    async fn a_role_limited_by_resource_name_reads_by_name_too() {
        let h = harness(Edition::SelfHosted).await;
        let ws = h.workspace("ws-OnlyThisOne000001", "only", |_| {}).await;
        h.workspace("ws-NotThatOne0000001", "other", |_| {}).await;
        let mut r = rule(&["get"], &["workspaces"]);
        r.resource_names = ws.metadata.name.clone().map(|n| vec![n]);
        let token = h.token_with_role(Some(vec![r])).await;
        assert_eq!(
            h.call_as(
                &token,
                "GET",
                "/api/v2/workspaces/ws-OnlyThisOne000001",
                None
            )
            .await
            .0,
            200
        );
        assert_eq!(
            h.call_as(
                &token,
                "GET",
                &format!("/api/v2/organizations/{ORG}/workspaces/only"),
                None
            )
            .await
            .0,
            200
        );
        assert_eq!(
            h.call_as(
                &token,
                "GET",
                &format!("/api/v2/organizations/{ORG}/workspaces/other"),
                None
            )
            .await
            .0,
            404
        );
    }

    /// Concurrent updates of different attributes all succeed: a conflict the caller did
    /// not cause is retried, never answered 409.
    #[tokio::test]
    async fn concurrent_patches_of_distinct_attributes_all_succeed() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-Concurrent0000001", "busy", |_| {}).await;
        let attrs: Vec<Value> = (0..50)
            .map(|i| match i % 5 {
                0 => json!({"description": format!("d{i}")}),
                1 => json!({"auto-apply": i % 2 == 0}),
                2 => json!({"working-directory": format!("dir{i}")}),
                3 => json!({"queue-all-runs": i % 2 == 0}),
                _ => json!({"source-name": format!("s{i}")}),
            })
            .collect();
        let results = join_all(attrs.into_iter().map(|a| {
            let h = &h;
            async move {
                h.call(
                    "PATCH",
                    "/api/v2/workspaces/ws-Concurrent0000001",
                    ws_body(a),
                )
                .await
                .0
            }
        }))
        .await;
        assert!(results.iter().all(|s| *s == 200), "{results:?}");
    }

    /// A lock body that is not an object is refused.
    #[tokio::test]
    async fn lock_bodies() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-LockBodies0000001", "l", |_| {}).await;
        let path = "/api/v2/workspaces/ws-LockBodies0000001/actions/lock";
        let (st, err) = h.call("POST", path, Some(json!([null, null]))).await;
        assert_eq!(st, 400, "{err}");
        assert!(err.to_string().contains("must be a JSON object"), "{err}");
        let (st, doc) = h
            .call(
                "POST",
                path,
                Some(
                    json!({"data": {"type": "", "attributes": {"reason": "Locked by Terraform"}}}),
                ),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(
            doc["data"]["attributes"]["locked-reason"],
            "Locked by Terraform"
        );
    }

    /// The response cache of GET never crosses callers and never outlives a change of
    /// what it shows.
    #[tokio::test]
    async fn cached_responses_are_per_caller_and_follow_changes() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-CachedResponse001", "cached", |_| {}).await;
        let path = "/api/v2/workspaces/ws-CachedResponse001";
        let reader = h
            .token_with_role(Some(vec![rule(&["get", "list"], &["workspaces"])]))
            .await;
        for _ in 0..2 {
            let (_, admin) = h.call("GET", path, None).await;
            assert_eq!(
                admin["data"]["attributes"]["permissions"]["can-update"],
                true
            );
            let (_, read) = h.call_as(&reader, "GET", path, None).await;
            assert_eq!(
                read["data"]["attributes"]["permissions"]["can-update"],
                false
            );
        }
        let (st, _) = h
            .call("PATCH", path, ws_body(json!({"description": "changed"})))
            .await;
        assert_eq!(st, 200);
        let (_, read) = h.call_as(&reader, "GET", path, None).await;
        assert_eq!(read["data"]["attributes"]["description"], "changed");
        let (_, read) = h
            .call_as(
                &reader,
                "GET",
                &format!("{path}?include=organization"),
                None,
            )
            .await;
        assert_eq!(read["included"][0]["type"], "organizations");
        let nobody = h.token_with_role(None).await;
        assert_eq!(h.call_as(&nobody, "GET", path, None).await.0, 404);
    }
}
