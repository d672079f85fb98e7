//! Organizations: the frame workspaces live in. An Organization object is cluster-scoped;
//! its objects live in its namespace, created by the operator with the default project.
//! Visible to callers who may `get` the organization or `list` workspaces in its namespace
//! ([`AppState::visible_org`]); changing one needs the cluster-wide verb on
//! `organizations`. A rename changes the TFE name (`spec.name`) and keeps the object and
//! its namespace, as a workspace rename keeps its object: the old name stops resolving
//! and the new one resolves everywhere at once.

use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use terrace_crds::OrganizationSpec;

use crate::documents;
use crate::prelude::*;

pub fn router() -> Router<AppState> {
    crate::read_only::collection_routes(
        ("/api/v2/organizations", get(list_orgs).post(create)),
        (
            "/api/v2/organizations/{org}",
            get(show).patch(update).delete(remove),
        ),
    )
    .route(
        "/api/v2/organizations/{org}/entitlement-set",
        get(entitlements),
    )
}

/// The writable attributes of an organization.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct OrgAttributes {
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    email: Nullable<String>,
    allow_force_delete_workspaces: Option<bool>,
    assessments_enforced: Option<bool>,
    default_execution_mode: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    default_agent_pool_id: Nullable<String>,
    session_timeout: Option<i64>,
    session_remember: Option<i64>,
}

/// The relationships of an organization request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct OrgRelationships {
    default_agent_pool: Option<ToOne>,
}

impl Typed for OrgAttributes {
    const TYPE: &'static str = "organizations";
}

type OrgDocument = Document<OrgAttributes, OrgRelationships>;

/// Applies the settings of a request to `spec`, checking TFE's rules on the result: a
/// valid email, an execution mode of remote/local/agent, a default agent pool only with
/// `agent` (and one of this organization's agent pools).
fn apply(
    state: &AppState,
    a: &OrgAttributes,
    r: &OrgRelationships,
    spec: &mut OrganizationSpec,
) -> Result<(), ApiError> {
    if let Some(email) = &a.email {
        if let Some(e) = email {
            terrace_crds::rules::validate_email(e)
                .map_err(|v| ApiError::Invalid(vec![v.into()]))?;
        }
        spec.email = email.clone();
    }
    write::given(
        &mut spec.settings.allow_force_delete_workspaces,
        a.allow_force_delete_workspaces.as_ref(),
    );
    write::given(
        &mut spec.settings.assessments_enforced,
        a.assessments_enforced.as_ref(),
    );
    for (value, attribute, field) in [
        (
            a.session_timeout,
            "session-timeout",
            &mut spec.settings.session_timeout,
        ),
        (
            a.session_remember,
            "session-remember",
            &mut spec.settings.session_remember,
        ),
    ] {
        match value {
            Some(minutes) if minutes < 1 => {
                return Err(ApiError::invalid_attribute(
                    attribute,
                    format!("must be a number of minutes greater than 0, got {minutes}"),
                ));
            }
            Some(minutes) => *field = Some(minutes),
            None => {}
        }
    }
    if let Some(m) = &a.default_execution_mode {
        spec.settings.default_execution_mode = m.clone();
        if m != "agent" && a.default_agent_pool_id.is_none() && r.default_agent_pool.is_none() {
            spec.settings.default_agent_pool_id = None;
        }
    }
    let pool = r
        .default_agent_pool
        .as_ref()
        .map(|rel| rel.id().flatten().map(str::to_owned))
        .or_else(|| a.default_agent_pool_id.clone());
    if let Some(pool) = pool {
        spec.settings.default_agent_pool_id = pool.filter(|p| !p.is_empty());
    }
    let problems = terrace_crds::rules::validate_default_execution(
        Some(&spec.settings.default_execution_mode),
        spec.settings.default_agent_pool_id.as_deref(),
        "default-execution-mode",
        "default-agent-pool-id",
    );
    if !problems.is_empty() {
        return Err(ApiError::Invalid(
            problems.into_iter().map(Into::into).collect(),
        ));
    }
    if let Some(pool) = &spec.settings.default_agent_pool_id {
        let ns = spec.namespace.clone().unwrap_or_default();
        let known =
            state.index.read().agent_pools().get(pool).is_some_and(|p| {
                ns.is_empty() || p.meta().namespace.as_deref() == Some(ns.as_str())
            });
        if !known {
            return Err(ApiError::invalid_attribute(
                "default-agent-pool-id",
                format!("agent pool {pool:?} not found in this organization"),
            ));
        }
    }
    Ok(())
}

async fn list_orgs(Authed { state, caller }: Authed, q: QueryParams) -> Result<Doc, ApiError> {
    let page = q.page()?;
    q.supported_filters(&[])?;
    let text = q.non_empty("q").map(str::to_lowercase);
    let mut orgs: Vec<Arc<Organization>> = state
        .index
        .read()
        .organizations()
        .filter(|o| {
            text.as_deref().is_none_or(|t| {
                o.tfe_name().to_lowercase().contains(t)
                    || o.spec
                        .email
                        .as_deref()
                        .is_some_and(|e| e.to_lowercase().contains(t))
            })
        })
        .cloned()
        .collect();
    orgs.sort_by(|a, b| a.tfe_name().cmp(b.tfe_name()));
    let mut visible = Vec::new();
    for o in orgs {
        // A run's engine lists no organization (docs/runs.md).
        if caller.scope.is_none() && state.can_see_org(&caller, &o).await? {
            visible.push(o);
        }
    }
    let hosted = state.hosted();
    Ok(list("/api/v2/organizations", page, &visible, |o| {
        documents::organization(o, hosted)
    }))
}

async fn show(State(state): State<AppState>, o: VisibleOrg) -> Doc {
    Doc::ok(documents::organization(&o.org, state.hosted()))
}

/// An object name (DNS-1123) for an organization's TFE name.
pub fn object_name(tfe_name: &str) -> String {
    let lower: String = tfe_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = lower.trim_matches('-');
    if trimmed == tfe_name && trimmed.len() <= 50 {
        return trimmed.to_owned();
    }
    // Keep names unique when case or underscores were folded.
    let hash: u32 = tfe_name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let base: String = trimmed.chars().take(50).collect();
    format!("{}-{hash:08x}", if base.is_empty() { "org" } else { &base })
}

fn taken(name: &str) -> ApiError {
    ApiError::invalid_attribute("name", format!("Name {name:?} has already been taken"))
}

/// Waits (bounded) until the index shows organization `name` satisfying `cond`.
async fn wait_org(state: &AppState, name: &str, cond: impl Fn(&Organization) -> bool) -> bool {
    state
        .index
        .wait_until(write::INDEX_WAIT, |i| {
            i.organization(name).is_some_and(|o| cond(o))
        })
        .await
}

async fn create(
    Authed { state, caller }: Authed,
    JsonApi(doc): JsonApi<OrgDocument>,
) -> Result<Doc, ApiError> {
    state
        .require_or_403(
            &caller,
            &Check::cluster("create", "organizations", None),
            "creating organizations needs cluster-wide create rights on organizations",
        )
        .await?;
    let data = doc.checked()?;
    let name = data
        .attributes
        .name
        .clone()
        .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
    check_name(&state, &name, None)?;
    // A renamed organization keeps its object name: a new one of its old name gets
    // another object (and namespace) name.
    let obj_name = {
        let idx = state.index.read();
        let base = object_name(&name);
        if idx
            .organizations()
            .any(|o| o.name_any() == base || o.target_namespace() == base)
        {
            let suffix = crate::capability::random_token()[..8].to_ascii_lowercase();
            format!("{}-{suffix}", &base[..base.len().min(40)])
        } else {
            base
        }
    };
    check_namespace(&state, &obj_name, &name).await?;
    let mut spec = OrganizationSpec {
        name: Some(name.clone()),
        namespace: Some(obj_name.clone()),
        ..Default::default()
    };
    apply(&state, &data.attributes, &data.relationships, &mut spec)?;
    let org = Organization {
        metadata: ObjectMeta {
            name: Some(obj_name),
            ..Default::default()
        },
        spec,
        status: None,
    };
    let api: Api<Organization> = Api::all(state.client.clone());
    let created = api
        .create(&PostParams::default(), &org)
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 409 => taken(&name),
            other => other.into(),
        })?;
    // Ready means the namespace and the default project exist (the operator makes them).
    let ns = created.target_namespace().to_owned();
    let ready = state
        .index
        .wait_until(Duration::from_secs(20), |i| {
            i.organization(&name).is_some_and(|o| {
                o.status
                    .as_ref()
                    .is_some_and(|s| s.default_project_id.is_some())
            }) && i.default_project(&ns).is_some()
        })
        .await;
    if !ready {
        tracing::warn!(org = %name, "organization not ready yet (is the operator running?)");
    }
    let org = state
        .index
        .read()
        .organization(&name)
        .cloned()
        .unwrap_or_else(|| Arc::new(created));
    Ok(Doc::created(documents::organization(&org, state.hosted())))
}

/// 422 unless the new organization `org` may keep its objects in namespace `ns`: never a
/// reserved one (`kube-*`, `default`, terrace's own), never an existing namespace terrace
/// did not create unless its owner opted in (`terrace.dev/adopt: ORG` on the namespace).
async fn check_namespace(state: &AppState, ns: &str, org: &str) -> Result<(), ApiError> {
    use terrace_crds::namespaces::{NamespaceUse, namespace_use};
    let release = state.settings.release_namespace.as_deref();
    let refuse = |detail: String| Err(ApiError::invalid_attribute("name", detail));
    if let Some(reason) = terrace_crds::namespaces::reserved_organization_name(ns, release) {
        return refuse(format!(
            "organization {org:?} cannot be created: its namespace {ns} {reason}"
        ));
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(state.client.clone());
    let existing = namespaces.get_opt(ns).await?;
    match namespace_use(
        ns,
        existing.as_ref().map(|n| &n.metadata),
        org,
        None,
        release,
    ) {
        u if u.usable() => Ok(()),
        NamespaceUse::Terminating => refuse(format!(
            "organization {org:?} cannot be created yet: its namespace {ns} is still being deleted; retry shortly"
        )),
        NamespaceUse::ControlledBy { kind, name } => refuse(format!(
            "organization {org:?} cannot be created: namespace {ns} exists and belongs to {kind} {name}"
        )),
        _ => refuse(format!(
            "organization {org:?} cannot be created: namespace {ns} exists and terrace did not create it; \
             to let the organization use it, annotate it: kubectl annotate namespace {ns} {}={org}",
            terrace_crds::constants::ANNOTATION_ADOPT
        )),
    }
}

/// The rules on an organization's name, for create and rename alike: the workspace name
/// rule, not a reserved name (one whose namespace would be `kube-*`, `default`, …), and
/// not taken by another organization in any case (`except`: the one being renamed).
fn check_name(state: &AppState, name: &str, except: Option<&str>) -> Result<(), ApiError> {
    terrace_crds::rules::validate_workspace_name(name).map_err(|e| {
        ApiError::invalid_attribute(
            "name",
            e.to_string().replacen("name", "organization name", 1),
        )
    })?;
    let release = state.settings.release_namespace.as_deref();
    let ns = object_name(name);
    if let Some(reason) = terrace_crds::namespaces::reserved_organization_name(&ns, release) {
        return Err(ApiError::invalid_attribute(
            "name",
            format!("organization name {name:?} is reserved: namespace {ns} {reason}"),
        ));
    }
    let holder = state
        .index
        .read()
        .organizations()
        .find(|o| o.tfe_name().eq_ignore_ascii_case(name) && Some(o.name_any().as_str()) != except)
        .map(|o| o.name_any());
    match holder {
        Some(h) if Some(h.as_str()) != except => Err(taken(name)),
        _ => Ok(()),
    }
}

async fn update(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<OrgDocument>,
) -> Result<Doc, ApiError> {
    o.require_on_org(&state, "update", "not allowed to update this organization")
        .await?;
    let org = o.org;
    let data = doc.checked()?;
    let rename = data.attributes.name.clone().filter(|n| n != org.tfe_name());
    if let Some(n) = &rename {
        check_name(&state, n, Some(&org.name_any()))?;
    }
    let api: Api<Organization> = Api::all(state.client.clone());
    // Only the settings that change, guarded by the resourceVersion (crate::write).
    let updated = write::patch_spec(&api, (*org).clone(), |cur| {
        let mut spec = cur.spec.clone();
        if let Some(n) = &rename {
            spec.name = Some(n.clone());
            // The namespace stays: pin it, since it was derived from the object name.
            spec.namespace = Some(cur.target_namespace().to_owned());
        }
        apply(&state, &data.attributes, &data.relationships, &mut spec)?;
        write::spec_diff(&cur.spec, &spec)
    })
    .await?;
    let rv = updated
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();
    wait_org(&state, updated.tfe_name(), |o| {
        crate::index::rv_at_least(o.metadata.resource_version.as_deref(), &rv)
    })
    .await;
    Ok(Doc::ok(documents::organization(&updated, state.hosted())))
}

async fn remove(State(state): State<AppState>, o: VisibleOrg) -> Result<Response, ApiError> {
    o.require_on_org(&state, "delete", "not allowed to delete this organization")
        .await?;
    let org = o.org;
    let api: Api<Organization> = Api::all(state.client.clone());
    api.delete(&org.name_any(), &DeleteParams::default())
        .await?;
    let name = org.tfe_name().to_owned();
    state
        .index
        .wait_until(write::INDEX_WAIT, |i| i.organization(&name).is_none())
        .await;
    Ok(no_content())
}

/// The organization's entitlements. `operations` is true: terrace runs plans and applies
/// (the terraform CLI's `cloud` backend reads only this attribute, then each workspace's
/// `execution-mode`, to decide between a remote run and a local one storing state here).
async fn entitlements(State(state): State<AppState>, o: VisibleOrg) -> Doc {
    let hosted = state.hosted();
    let name = o.org.tfe_name();
    Doc::ok(json!({
        "id": name,
        "type": "entitlement-sets",
        "attributes": {
            "agents": true,
            "assessments": hosted,
            "audit-logging": false,
            "configuration-designer": false,
            "cost-estimation": false,
            "global-run-tasks": false,
            "module-tests-generation": false,
            "operations": true,
            "private-module-registry": true,
            // OPA policy sets (docs/policies.md); Sentinel is not offered.
            "policy-enforcement": true,
            "run-tasks": false,
            "self-serve-billing": false,
            "sentinel": false,
            "sso": false,
            "state-storage": true,
            "teams": false,
            "usage-reporting": false,
            "user-limit": Value::Null,
            // No VCS connection is served (OAuth tokens are read-only records).
            "vcs-integrations": false,
        },
        "links": {"self": format!("/api/v2/entitlement-sets/{name}")},
    }))
}

#[cfg(test)]
mod tests {
    use super::object_name;

    #[test]
    fn object_names_are_dns_labels_and_unique() {
        assert_eq!(object_name("acme"), "acme");
        assert_ne!(object_name("Acme"), object_name("acme"));
        assert!(object_name("My_Org").starts_with("my-org-"));
        let long = object_name(&"x".repeat(90));
        assert!(long.len() <= 63, "{long}");
    }

    use serde_json::json;
    use terrace_crds::AgentPool;
    use terrace_crds::constants::LABEL_ID;

    use crate::Edition;
    use crate::testing::{ORG, harness, meta};

    fn body(attrs: serde_json::Value) -> Option<serde_json::Value> {
        Some(json!({"data": {"type": "organizations", "attributes": attrs}}))
    }

    /// What clients read of an organization: rename keeps the namespace (the old name
    /// stops resolving, the new one resolves at once), the retention and default agent
    /// pool relationships, remaining-testable-count, `q`, email and name checks.
    #[tokio::test]
    async fn organization_conformance() {
        let h = harness(Edition::SelfHosted).await;
        h.create(AgentPool {
            metadata: meta("pool", Some(ORG), &[(LABEL_ID, "apool-Pool000000000009")]),
            spec: terrace_crds::AgentPoolSpec {
                name: "pool".into(),
                organization_scoped: true,
                ..Default::default()
            },
            status: None,
        })
        .await;
        h.wait("the pool", |i| {
            i.agent_pools().get("apool-Pool000000000009").is_some()
        })
        .await;
        let (st, doc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}"), None)
            .await;
        assert_eq!(st, 200);
        assert!(doc["data"]["attributes"]["remaining-testable-count"].as_i64() > Some(0));
        assert_eq!(doc["data"]["attributes"]["user-tokens-enabled"], true);
        // A default agent pool only with agent mode.
        let (st, doc) = h
            .call("PATCH", &format!("/api/v2/organizations/{ORG}"), body(json!({"default-execution-mode": "remote", "default-agent-pool-id": "apool-Pool000000000009"})))
            .await;
        assert_eq!(st, 422, "{doc}");
        assert!(doc["errors"][0]["detail"].as_str().is_some_and(|d| {
            d.contains("must not be specified unless using 'agent' execution mode")
        }));
        let (st, doc) = h
            .call("PATCH", &format!("/api/v2/organizations/{ORG}"), body(json!({"default-execution-mode": "agent", "default-agent-pool-id": "apool-Pool000000000009"})))
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(
            doc["data"]["relationships"]["default-agent-pool"]["data"]["id"],
            "apool-Pool000000000009"
        );
        // Entitlements are true only where terrace serves the feature.
        let (st, doc) = h
            .call(
                "GET",
                &format!("/api/v2/organizations/{ORG}/entitlement-set"),
                None,
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let e = &doc["data"]["attributes"];
        assert_eq!(
            (
                &e["state-storage"],
                &e["operations"],
                &e["policy-enforcement"]
            ),
            (&json!(true), &json!(true), &json!(true))
        );
        for unserved in ["vcs-integrations", "sentinel", "teams", "sso"] {
            assert_eq!(e[unserved], false, "{unserved}");
        }
        // Session settings are kept and returned (TFE's defaults: 14 days in minutes).
        let (_, doc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}"), None)
            .await;
        assert_eq!(doc["data"]["attributes"]["session-timeout"], 20160);
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/organizations/{ORG}"),
                body(json!({"session-timeout": 60, "session-remember": 120})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let (_, doc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}"), None)
            .await;
        assert_eq!(doc["data"]["attributes"]["session-timeout"], 60);
        assert_eq!(doc["data"]["attributes"]["session-remember"], 120);
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/organizations/{ORG}"),
                body(json!({"session-timeout": 0})),
            )
            .await;
        assert_eq!(st, 422, "{doc}");
        assert_eq!(
            doc["errors"][0]["source"]["pointer"],
            "/data/attributes/session-timeout"
        );
        // The retention policy choice.
        let (st, _) = h
            .call("POST", &format!("/api/v2/organizations/{ORG}/relationships/data-retention-policy"), Some(json!({"data": {"type": "data-retention-policy-delete-olders", "attributes": {"delete-older-than-n-days": 30}}})))
            .await;
        assert_eq!(st, 200);
        let (_, doc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}"), None)
            .await;
        let rels = &doc["data"]["relationships"];
        assert_eq!(
            rels["data-retention-policy-choice"]["data"]["type"],
            "data-retention-policy-delete-olders"
        );
        assert_eq!(
            rels["data-retention-policy-choice"]["data"]["attributes"]["delete-older-than-n-days"],
            30
        );
        assert_eq!(
            rels["data-retention-policy"]["data"]["type"],
            "data-retention-policy-delete-olders"
        );
        // A "don't delete" choice is there too (go-tfe reads it from
        // `data-retention-policy` and panics on null).
        let (st, _) = h
            .call("POST", &format!("/api/v2/organizations/{ORG}/relationships/data-retention-policy"), Some(json!({"data": {"type": "data-retention-policy-dont-deletes", "attributes": {}}})))
            .await;
        assert_eq!(st, 200);
        let (_, doc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}"), None)
            .await;
        for rel in ["data-retention-policy", "data-retention-policy-choice"] {
            assert_eq!(
                doc["data"]["relationships"][rel]["data"]["type"],
                "data-retention-policy-dont-deletes",
                "{rel}"
            );
        }
        // Bad input.
        for attrs in [
            json!({"email": ""}),
            json!({"email": "not-an-address"}),
            json!({"name": {}}),
        ] {
            let (st, doc) = h
                .call(
                    "PATCH",
                    &format!("/api/v2/organizations/{ORG}"),
                    body(attrs.clone()),
                )
                .await;
            assert_eq!(st, 422, "{attrs}: {doc}");
        }
        // q filters by name or email.
        let (_, doc) = h
            .call("GET", "/api/v2/organizations?q=example.com", None)
            .await;
        assert_eq!(doc["data"][0]["id"], ORG);
        let (_, doc) = h.call("GET", "/api/v2/organizations?q=nomatch", None).await;
        assert_eq!(doc["data"], json!([]));
        // Rename follows create's name rules: no reserved name, no name another
        // organization has in another case; its own name in another case is fine.
        let (st, doc) = h
            .call(
                "POST",
                "/api/v2/organizations",
                body(json!({"name": "beta", "email": "b@example.com"})),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        for taken in ["BETA", "Beta", "kube-system", "default"] {
            let (st, doc) = h
                .call(
                    "PATCH",
                    &format!("/api/v2/organizations/{ORG}"),
                    body(json!({"name": taken})),
                )
                .await;
            assert_eq!(st, 422, "rename to {taken}: {doc}");
            assert_eq!(
                doc["errors"][0]["source"]["pointer"],
                "/data/attributes/name"
            );
        }
        // Rename: the namespace stays, the old name is gone, the new one resolves.
        h.workspace("ws-RenameOrg00000001", "w", |_| {}).await;
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("/api/v2/organizations/{ORG}"),
                body(json!({"name": "acme-renamed"})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"]["id"], "acme-renamed");
        assert_eq!(
            h.call("GET", &format!("/api/v2/organizations/{ORG}"), None)
                .await
                .0,
            404
        );
        let (st, doc) = h
            .call(
                "GET",
                "/api/v2/organizations/acme-renamed/workspaces/w",
                None,
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(
            doc["data"]["relationships"]["organization"]["data"]["id"],
            "acme-renamed"
        );
        assert_eq!(
            h.state
                .index
                .read()
                .organization("acme-renamed")
                .map(|o| o.target_namespace().to_owned()),
            Some(ORG.to_owned())
        );
    }

    /// An organization never takes over a namespace terrace did not create: reserved
    /// names and existing foreign namespaces are 422 with what to do; a namespace whose
    /// owner opted in is used.
    #[tokio::test]
    async fn organizations_never_take_over_namespaces() {
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::{Api, PostParams};
        let h = harness(Edition::SelfHosted).await;
        let create = |name: &str| {
            let h = &h;
            let b = body(json!({"name": name, "email": "ops@example.com"}));
            async move { h.call("POST", "/api/v2/organizations", b).await }
        };
        for reserved in ["kube-system", "kube-public", "default"] {
            let (st, err) = create(reserved).await;
            assert_eq!(st, 422, "{reserved}: {err}");
            assert_eq!(
                err["errors"][0]["source"]["pointer"],
                "/data/attributes/name"
            );
        }
        let nss: Api<Namespace> = Api::all(h.admin.clone());
        for (name, adopt) in [("monitoring", None), ("shared", Some("shared"))] {
            let mut ns = Namespace {
                metadata: meta(name, None, &[]),
                ..Default::default()
            };
            ns.metadata.annotations = adopt.map(|o| {
                [(
                    terrace_crds::constants::ANNOTATION_ADOPT.to_owned(),
                    o.to_owned(),
                )]
                .into()
            });
            nss.create(&PostParams::default(), &ns)
                .await
                .unwrap_or_else(|e| panic!("namespace: {e}"));
        }
        let (st, err) = create("monitoring").await;
        assert_eq!(st, 422, "{err}");
        assert!(
            err.to_string().contains("terrace.dev/adopt=monitoring"),
            "the detail says how to opt in: {err}"
        );
        let untouched = nss.get("monitoring").await.unwrap_or_default();
        assert!(untouched.metadata.owner_references.is_none());
        // Opted in: usable (the create itself would then wait for the operator).
        assert!(
            super::check_namespace(&h.state, "shared", "shared")
                .await
                .is_ok()
        );
        assert!(
            super::check_namespace(&h.state, "shared", "other")
                .await
                .is_err()
        );
    }
}
