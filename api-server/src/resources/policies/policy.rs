//! Policies: list, show, create, update, delete, and the Rego's upload (compiled when
//! stored) and download.

use super::*;

/// The sets of the namespace that reference policy `p`.
pub(super) fn sets_of<'a>(
    idx: &'a Inner,
    p: &'a Policy,
) -> impl Iterator<Item = &'a Arc<PolicySet>> + 'a {
    let ns = p.namespace().unwrap_or_default();
    let object = p.name_any();
    let id = id_of(p);
    idx.policy_sets()
        .in_namespace(&ns)
        .filter(move |s| s.references(&object, Some(&id)))
        .collect::<Vec<_>>()
        .into_iter()
}

pub(super) fn render_policy(idx: &Inner, p: &Policy, org: &Organization) -> Value {
    let id = id_of(p);
    let sets: Vec<Value> = sets_of(idx, p)
        .map(|s| json!({"id": id_of(s.as_ref()), "type": "policy-sets"}))
        .collect();
    let has_code = p.spec.rego.is_some() || p.spec.rego_from.is_some();
    let enforce: Vec<Value> = has_code
        .then(|| json!({"path": format!("{}.rego", p.spec.name), "mode": p.spec.enforcement_level}))
        .into_iter()
        .collect();
    json!({
        "id": id,
        "type": "policies",
        "attributes": {
            "name": p.spec.name,
            "description": p.spec.description,
            "kind": p.spec.kind,
            "query": p.spec.query,
            "enforcement-level": p.spec.enforcement_level,
            "enforce": enforce,
            "policy-set-count": sets.len(),
            "updated-at": created_at(p),
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "policy-sets": {"data": sets},
        },
        "links": {
            "self": format!("/api/v2/policies/{id}"),
            "upload": format!("/api/v2/policies/{id}/upload"),
            "download": format!("/api/v2/policies/{id}/download"),
        },
    })
}

/// One `enforce` entry (TFE's older way of giving the level).
#[derive(Debug, Default, Deserialize)]
pub(super) struct Enforce {
    #[serde(default)]
    mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct PolicyAttributes {
    name: Option<String>,
    description: Option<String>,
    kind: Option<String>,
    query: Option<String>,
    enforcement_level: Option<String>,
    #[serde(default)]
    enforce: Vec<Enforce>,
}

impl Typed for PolicyAttributes {
    const TYPE: &'static str = "policies";
}

/// 422 unless `kind` is OPA's (absent reads as `opa`).
pub(super) fn opa_only(kind: Option<&str>) -> Result<(), ApiError> {
    match kind {
        None | Some("opa") => Ok(()),
        Some(k) => Err(ApiError::invalid_attribute(
            "kind",
            format!("kind {k:?} is not offered: terrace evaluates OPA policies (kind opa)"),
        )),
    }
}

/// The enforcement level an OPA policy asks for (`enforcement-level`, else the mode of
/// its first `enforce` entry), checked; None when neither is given.
pub(super) fn level_of(a: &PolicyAttributes) -> Result<Option<String>, ApiError> {
    let given = a
        .enforcement_level
        .clone()
        .or_else(|| a.enforce.first().and_then(|e| e.mode.clone()));
    match given.as_deref() {
        None => Ok(None),
        Some(l @ ("advisory" | "mandatory")) => Ok(Some(l.to_owned())),
        Some(l) => Err(ApiError::invalid_attribute(
            "enforcement-level",
            format!("enforcement level {l:?} is not one of an OPA policy's: advisory, mandatory"),
        )),
    }
}

pub(super) fn checked_query(q: &str) -> Result<String, ApiError> {
    let q = q.trim();
    terrace_crds::policy::check_query(q).map_err(|e| ApiError::invalid_attribute("query", e))?;
    Ok(q.to_owned())
}

pub(super) fn checked_policy_name(
    idx: &Inner,
    ns: &str,
    name: &str,
    this: Option<&str>,
) -> Result<String, ApiError> {
    let name = unique_name(name, |n| {
        idx.policies().in_namespace(ns).any(|p| {
            p.spec.name.eq_ignore_ascii_case(n) && Some(id_of(p.as_ref()).as_str()) != this
        })
    })?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(ApiError::invalid_attribute(
            "name",
            "name can only contain letters, numbers, dashes, underscores and dots",
        ));
    }
    Ok(name)
}

pub(super) async fn list_policies(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut l = Listing::<Policy>::read(&state, &o, &q, "policies", &["filter[kind]"], &[]).await?;
    l.search(&q, "search[name]", |p| &p.spec.name);
    if let Some(kind) = q.non_empty("filter[kind]") {
        l.items.retain(|p| p.spec.kind == kind);
    }
    l.items
        .sort_by(|a, b| terrace_crds::rules::name_order(&a.spec.name, &b.spec.name));
    Ok(l.answer_shown(&state.index.read(), &o.org))
}

impl Shown for Policy {
    fn data(&self, idx: &Inner, org: &Organization) -> Value {
        render_policy(idx, self, org)
    }
}

pub(super) async fn create_policy(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(doc): JsonApi<Document<PolicyAttributes>>,
) -> Result<Doc, ApiError> {
    o.require_in_org(
        &state,
        "create",
        POLICIES,
        "not authorized to create policies in this organization",
    )
    .await?;
    let a = doc.checked()?.attributes;
    opa_only(a.kind.as_deref())?;
    let ns = o.ns().to_owned();
    let name = a
        .name
        .as_deref()
        .ok_or_else(|| ApiError::invalid_attribute("name", "name is required"))?;
    let name = checked_policy_name(&state.index.read(), &ns, name, None)?;
    let query = checked_query(
        a.query
            .as_deref()
            .ok_or_else(|| ApiError::invalid_attribute("query", "an OPA policy needs a query"))?,
    )?;
    let level = level_of(&a)?.ok_or_else(|| {
        ApiError::invalid_attribute(
            "enforcement-level",
            "an enforcement level (advisory or mandatory) is required",
        )
    })?;
    let id = new_id(IdKind::Policy);
    let policy = Policy {
        metadata: write::new_meta(&id, &ns, o.org.name_any(), &[]),
        spec: PolicySpec {
            name,
            description: a.description,
            kind: "opa".to_owned(),
            query,
            enforcement_level: level,
            rego: None,
            rego_from: None,
        },
        status: None,
    };
    let created = write::create(&state, &ns, &policy).await?;
    Ok(Doc::created(render_policy(
        &state.index.read(),
        &created,
        &o.org,
    )))
}

pub(super) async fn update_policy(
    State(state): State<AppState>,
    f: Found<Policy>,
    JsonApi(doc): JsonApi<Document<PolicyAttributes>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let a = doc.checked()?.attributes;
    opa_only(a.kind.as_deref())?;
    let name = a
        .name
        .as_deref()
        .map(|n| checked_policy_name(&state.index.read(), &f.at.ns, n, Some(&f.at.id())))
        .transpose()?;
    let query = a.query.as_deref().map(checked_query).transpose()?;
    let level = level_of(&a)?;
    let updated =
        f.at.change_spec(&state, |p| {
            write::given(&mut p.name, name.as_ref());
            write::given_some(&mut p.description, &a.description);
            write::given(&mut p.query, query.as_ref());
            write::given(&mut p.enforcement_level, level.as_ref());
            Ok(())
        })
        .await?;
    Ok(Doc::ok(render_policy(
        &state.index.read(),
        &updated,
        &f.at.org,
    )))
}

pub(super) async fn remove_policy(
    State(state): State<AppState>,
    f: Found<Policy>,
) -> Result<Response, ApiError> {
    f.require(&state, "delete", NOT_YOURS).await?;
    // As in TFE, a deleted policy leaves the sets that named it (a set that still names a
    // missing policy is not Ready, and its checks error).
    let object = f.at.obj.name_any();
    let id = f.at.id();
    let sets: Vec<Arc<PolicySet>> = sets_of(&state.index.read(), &f.at.obj).cloned().collect();
    for set in sets {
        let at = Located {
            obj: set,
            org: f.at.org.clone(),
            ns: f.at.ns.clone(),
        };
        at.change_spec(&state, |s| {
            s.policy_refs.retain(|r| *r != object && *r != id);
            Ok(())
        })
        .await?;
    }
    write::delete_if_present(&state, f.at.obj.as_ref()).await?;
    Ok(no_content())
}

/// `PUT /policies/:id/upload`: the policy's Rego, compiled first (422 with the compiler's
/// words when it does not compile, or is empty).
pub(super) async fn upload(
    State(state): State<AppState>,
    f: Found<Policy>,
    body: Bytes,
) -> Result<Response, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let rego = String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::invalid("/", "the policy is not UTF-8 text"))?;
    if rego.trim().is_empty() {
        return Err(ApiError::invalid("/", "the policy is empty"));
    }
    crate::policy_eval::compile(&state.settings, &f.at.obj.spec.name, &rego)
        .await
        .map_err(|e| {
            ApiError::invalid("/", format!("the policy does not compile: {}", e.trim()))
        })?;
    f.at.change_spec(&state, |p| {
        p.rego = Some(rego.clone());
        p.rego_from = None;
        Ok(())
    })
    .await?;
    Ok(no_content())
}

/// `GET /policies/:id/download`: the stored Rego (404 before an upload; a policy whose
/// Rego lives in a ConfigMap answers it from there).
pub(super) async fn download(
    State(state): State<AppState>,
    f: Found<Policy>,
) -> Result<Response, ApiError> {
    let rego = match (&f.at.obj.spec.rego, &f.at.obj.spec.rego_from) {
        (Some(r), _) => r.clone(),
        (None, Some(from)) => {
            use k8s_openapi::api::core::v1::ConfigMap;
            write::api::<ConfigMap>(&state, &f.at.ns)
                .get_opt(&from.name)
                .await?
                .and_then(|c| c.data)
                .and_then(|mut d| d.remove(&from.key))
                .ok_or_else(|| ApiError::not_found("the policy's ConfigMap has no such key"))?
        }
        (None, None) => return Err(ApiError::not_found("the policy has no content yet")),
    };
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
        rego,
    )
        .into_response())
}

// ---- policy sets ----
