//! Flat string tags (SPEC.md B16, B18, B19) and the organization's tag list.
//!
//! A workspace's flat tags live in `spec.tags` (lowercased, sorted, no duplicates). The
//! organization's tags are not stored anywhere: they are the union of its workspaces'
//! tags, read from the index, so a tag removed from every workspace disappears. A tag's
//! ID is a hash of the organization object's name and the tag name, so it is the same on
//! every read and after a restart, and a tag that comes back gets its old ID again.

use terrace_crds::Workspace;
use terrace_crds::rules::validate_tag_name;

use crate::prelude::*;
use crate::render::stable_id;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/organizations/{org}/tags",
            get(list_org_tags).delete(delete_org_tags),
        )
        .route(
            "/api/v2/tags/{id}/relationships/workspaces",
            post(add_tag_to_workspaces),
        )
        .route(
            "/api/v2/workspaces/{id}/relationships/tags",
            get(list_ws_tags)
                .post(change_ws_tags::<true>)
                .delete(change_ws_tags::<false>),
        )
}

/// The stable ID of tag `name` in `org`.
pub fn tag_id(org: &Organization, name: &str) -> String {
    stable_id("tag-", &[&org.name_any(), &name.to_ascii_lowercase()])
}

/// One organization tag: name and number of workspaces carrying it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrgTag {
    pub id: String,
    pub name: String,
    pub count: usize,
}

/// The organization's tags, by name.
pub fn org_tags(state: &AppState, org: &Organization) -> Vec<OrgTag> {
    let idx = state.index.read();
    let mut tags: Vec<OrgTag> = idx
        .workspaces_in(org.target_namespace())
        .map(|w| {
            w.tags()
                .map(|(name, count)| OrgTag {
                    id: tag_id(org, name),
                    name: name.to_owned(),
                    count,
                })
                .collect()
        })
        .unwrap_or_default();
    tags.sort_by(|a, b| terrace_crds::rules::name_order(&a.name, &b.name));
    tags
}

fn render_tag(org: &Organization, name: &str, count: Option<usize>) -> Value {
    let mut attributes = json!({"name": name});
    if let Some(c) = count {
        attributes["instance-count"] = json!(c);
    }
    json!({
        "id": tag_id(org, name),
        "type": "tags",
        "attributes": attributes,
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
        },
    })
}

async fn list_org_tags(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let org = o.org;
    q.supported_filters(&["filter[exclude][taggable][id]"])?;
    let page = q.page()?;
    let mut tags = org_tags(&state, &org);
    if let Some(text) = q.non_empty("q") {
        let text = text.to_ascii_lowercase();
        tags.retain(|t| t.name.contains(&text));
    }
    if let Some(ws_id) = q.get("filter[exclude][taggable][id]") {
        let on_ws: Vec<String> = state
            .index
            .read()
            .workspace(ws_id)
            .map(|w| w.spec.tags.iter().map(|t| t.to_ascii_lowercase()).collect())
            .unwrap_or_default();
        tags.retain(|t| !on_ws.contains(&t.name));
    }
    let base = format!("/api/v2/organizations/{}/tags", org.tfe_name());
    Ok(list(&base, page, &tags, |t| {
        render_tag(&org, &t.name, Some(t.count))
    }))
}

/// Entries of a body naming tags (by `id` or `attributes.name`).
struct TagEntry;
impl Typed for TagEntry {
    const TYPE: &'static str = "tags";
}

/// `attributes` of a tag entry.
#[derive(Debug, Default, Deserialize)]
struct TagAttributes {
    name: Option<String>,
}

/// Entries of a body naming workspaces.
struct WorkspaceEntry;
impl Typed for WorkspaceEntry {
    const TYPE: &'static str = "workspaces";
}

/// `DELETE /organizations/:org/tags`: removes tags (by ID) from every workspace, so they
/// leave the organization. Needs the namespace-wide `manage` right.
async fn delete_org_tags(
    State(state): State<AppState>,
    o: VisibleOrg,
    JsonApi(body): JsonApi<ToMany<TagEntry, TagAttributes>>,
) -> Result<Response, ApiError> {
    let (org, ns) = (o.org.clone(), o.ns().to_owned());
    o.require_in_org(
        &state,
        "manage",
        "workspaces",
        "deleting organization tags needs the right to manage all workspaces",
    )
    .await?;
    let entries = body.checked()?;
    let known = org_tags(&state, &org);
    let mut names = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let id =
            e.id.as_deref()
                .ok_or_else(|| ApiError::invalid(format!("/data/{i}/id"), "id is required"))?;
        if let Some(t) = known.iter().find(|t| t.id == id) {
            names.push(t.name.clone());
        }
    }
    let affected: Vec<_> = {
        let idx = state.index.read();
        let mut uids: Vec<Arc<str>> = Vec::new();
        if let Some(w) = idx.workspaces_in(&ns) {
            for n in &names {
                uids.extend(w.with_tag(n).into_iter().flatten().map(|(_, u)| u.clone()));
            }
        }
        uids.sort();
        uids.dedup();
        uids.iter()
            .filter_map(|u| idx.workspace_by_uid(u).cloned())
            .collect()
    };
    for ws in affected {
        write::update_spec(&state, &ns, (*ws).clone(), |w| {
            Ok(without_tags(&w.spec.tags, &names))
        })
        .await?;
    }
    Ok(no_content())
}

/// `POST /tags/:id/relationships/workspaces`: adds an existing tag to workspaces.
async fn add_tag_to_workspaces(
    Authed { state, caller }: Authed,
    Path(tag): Path<String>,
    JsonApi(body): JsonApi<ToMany<WorkspaceEntry>>,
) -> Result<Response, ApiError> {
    let entries = body.checked()?;
    let found = {
        let idx = state.index.read();
        let orgs: Vec<Arc<Organization>> = idx.organizations().cloned().collect();
        drop(idx);
        orgs.into_iter().find_map(|o| {
            org_tags(&state, &o)
                .into_iter()
                .find(|t| t.id == tag)
                .map(|t| (o, t.name))
        })
    };
    let (org, name) = found.ok_or_else(|| ApiError::NotFound("tag not found".into()))?;
    state.visible_org(&caller, org.tfe_name()).await?;
    // Each workspace must be readable (404 otherwise, as if it did not exist) and
    // administrable (403: readers and lockers may not tag).
    let mut targets = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let id =
            e.id.as_deref()
                .ok_or_else(|| ApiError::invalid(format!("/data/{i}/id"), "id is required"))?;
        let l = state
            .readable::<Workspace>(&caller, id)
            .await
            .ok()
            .filter(|l| l.ns == org.target_namespace())
            .ok_or_else(|| ApiError::not_found(format!("workspace {id:?} not found")))?;
        if !state.allowed(&caller, &l.check("update")).await? {
            return Err(ApiError::forbidden(
                "adding a tag to a workspace needs admin access to the workspace",
            ));
        }
        targets.push(l);
    }
    for l in targets {
        write::update_spec(&state, &l.ns, (*l.obj).clone(), |w| {
            Ok(with_tags(&w.spec.tags, std::slice::from_ref(&name)))
        })
        .await?;
    }
    Ok(no_content())
}

/// B16: the workspace's flat tags, by name, paginated.
async fn list_ws_tags(f: Found<Workspace>, q: QueryParams) -> Result<Doc, ApiError> {
    let l = f.at;
    let page = q.page()?;
    let names = terrace_crds::rules::tag_names(&l.obj.spec.tags);
    let base = format!("/api/v2/workspaces/{}/relationships/tags", l.id());
    Ok(list(&base, page, &names, |n| render_tag(&l.org, n, None)))
}

/// What one entry of an add/remove body names.
enum TagRef {
    /// A tag of the organization (by ID, or by a name it has).
    Known(String),
    /// A name no workspace of the organization carries yet.
    New(String),
}

/// Resolves the entries of a tags body: `id` must name an organization tag (404 when it
/// does not), `attributes.name` must follow the tag name rules (422).
fn resolve(
    state: &AppState,
    org: &Organization,
    body: ToMany<TagEntry, TagAttributes>,
) -> Result<Vec<TagRef>, ApiError> {
    let entries = body.checked()?;
    let known = org_tags(state, org);
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if let Some(id) = e.id.as_deref() {
            let t = known
                .iter()
                .find(|t| t.id == id)
                .ok_or_else(|| ApiError::not_found(format!("tag {id:?} not found")))?;
            out.push(TagRef::Known(t.name.clone()));
            continue;
        }
        let Some(name) = e.attributes.name.as_deref() else {
            return Err(ApiError::invalid(
                format!("/data/{i}"),
                "each tag needs an id or attributes.name",
            ));
        };
        validate_tag_name(name).map_err(|v| {
            ApiError::invalid(
                format!("/data/{i}/attributes/name"),
                format!("tag name {}", v.message),
            )
        })?;
        let lower = name.to_ascii_lowercase();
        if known.iter().any(|t| t.name == lower) {
            out.push(TagRef::Known(lower));
        } else {
            out.push(TagRef::New(lower));
        }
    }
    Ok(out)
}

/// The spec patch adding `names` to `current`, or None when all are present.
pub fn with_tags(current: &[String], names: &[String]) -> Option<Value> {
    let mut tags: Vec<String> = current.iter().map(|t| t.to_ascii_lowercase()).collect();
    let before = {
        let mut b = tags.clone();
        b.sort();
        b.dedup();
        b
    };
    tags.extend(names.iter().map(|n| n.to_ascii_lowercase()));
    tags.sort();
    tags.dedup();
    (tags != before || current.len() != before.len()).then(|| json!({"tags": tags}))
}

/// The spec patch removing `names` from `current`, or None when none is present.
pub fn without_tags(current: &[String], names: &[String]) -> Option<Value> {
    let drop: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    let tags: Vec<String> = current
        .iter()
        .filter(|t| !drop.contains(&t.to_ascii_lowercase()))
        .cloned()
        .collect();
    (tags.len() != current.len()).then(|| json!({"tags": tags}))
}

/// B18 (`ADD`): adds tags by ID or name, creating a name that is not a tag yet; B19:
/// removes tags by ID (must exist) or name (unknown names have no effect). 204.
async fn change_ws_tags<const ADD: bool>(
    State(state): State<AppState>,
    f: Found<Workspace, AdminOr404>,
    JsonApi(body): JsonApi<ToMany<TagEntry, TagAttributes>>,
) -> Result<Response, ApiError> {
    let l = f.at;
    let names: Vec<String> = resolve(&state, &l.org, body)?
        .into_iter()
        .filter_map(|r| match r {
            TagRef::Known(n) => Some(n),
            TagRef::New(n) => ADD.then_some(n),
        })
        .collect();
    write::update_spec(&state, &l.ns, (*l.obj).clone(), |w| {
        Ok(if ADD {
            with_tags(&w.spec.tags, &names)
        } else {
            without_tags(&w.spec.tags, &names)
        })
    })
    .await?;
    Ok(no_content())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::testing::{ORG, harness};

    fn names(doc: &Value) -> Vec<String> {
        doc["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["attributes"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The patch helpers keep tags lowercased, sorted and unique, and report no-ops.
    #[test]
    fn tag_patches() {
        let cur = vec!["a".to_owned(), "c".to_owned()];
        assert_eq!(
            with_tags(&cur, &["B".into()]),
            Some(json!({"tags": ["a", "b", "c"]}))
        );
        assert_eq!(with_tags(&cur, &["a".into()]), None);
        assert_eq!(
            without_tags(&cur, &["A".into()]),
            Some(json!({"tags": ["c"]}))
        );
        assert_eq!(without_tags(&cur, &["zz".into()]), None);
    }

    /// Tag IDs are stable per organization and name, distinct across both.
    #[test]
    fn tag_ids_are_stable() {
        let org = crate::testing::org_object("acme");
        let other = crate::testing::org_object("other");
        assert_eq!(tag_id(&org, "Prod"), tag_id(&org, "prod"));
        assert_ne!(tag_id(&org, "prod"), tag_id(&org, "dev"));
        assert_ne!(tag_id(&org, "prod"), tag_id(&other, "prod"));
        assert!(tag_id(&org, "prod").starts_with("tag-"));
        assert_eq!(tag_id(&org, "prod").len(), 4 + 16);
    }

    /// Add by name and by ID, remove by ID and by unknown name; the organization list is
    /// derived from the workspaces and forgets a tag no workspace carries.
    #[tokio::test]
    async fn add_list_remove_and_org_list() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-AAAAAAAAAAAAAAA1", "one", |s| {
            s.tags = vec!["old".into()]
        })
        .await;
        h.workspace("ws-AAAAAAAAAAAAAAA2", "two", |_| {}).await;
        let (st, _) = h
            .call(
                "POST",
                "/api/v2/workspaces/ws-AAAAAAAAAAAAAAA2/relationships/tags",
                Some(json!({"data": [{"type": "tags", "attributes": {"name": "Prod"}}, {"type": "tags", "attributes": {"name": "old"}}]})),
            )
            .await;
        assert_eq!(st, 204);
        let (st, doc) = h
            .call(
                "GET",
                "/api/v2/workspaces/ws-AAAAAAAAAAAAAAA2/relationships/tags",
                None,
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(names(&doc), ["old", "prod"]);
        assert_eq!(doc["meta"]["pagination"]["total-count"], 2);

        let (_, orgdoc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}/tags"), None)
            .await;
        assert_eq!(names(&orgdoc), ["old", "prod"]);
        assert_eq!(orgdoc["data"][0]["attributes"]["instance-count"], 2);
        let prod_id = orgdoc["data"][1]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(prod_id.starts_with("tag-"));

        // Unknown ID: 404; unknown name on remove: no effect.
        let (st, _) = h
            .call(
                "DELETE",
                "/api/v2/workspaces/ws-AAAAAAAAAAAAAAA2/relationships/tags",
                Some(json!({"data": [{"type": "tags", "id": "tag-doesnotexist0000"}]})),
            )
            .await;
        assert_eq!(st, 404);
        let (st, _) = h
            .call(
                "DELETE",
                "/api/v2/workspaces/ws-AAAAAAAAAAAAAAA2/relationships/tags",
                Some(json!({"data": [{"type": "tags", "attributes": {"name": "never-seen"}}, {"type": "tags", "id": prod_id}]})),
            )
            .await;
        assert_eq!(st, 204);
        let (_, orgdoc) = h
            .call("GET", &format!("/api/v2/organizations/{ORG}/tags"), None)
            .await;
        assert_eq!(names(&orgdoc), ["old"], "prod left with its last workspace");
    }

    /// Tag names follow the rules (422 with a pointer); bodies must be lists of `tags`.
    #[tokio::test]
    async fn bad_tag_bodies_are_422() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-AAAAAAAAAAAAAAA3", "three", |_| {}).await;
        let path = "/api/v2/workspaces/ws-AAAAAAAAAAAAAAA3/relationships/tags";
        for body in [
            json!({"data": [{"type": "tags", "attributes": {"name": "has space"}}]}),
            json!({"data": [{"type": "tags"}]}),
            json!({"data": [{"type": "workspaces", "attributes": {"name": "x"}}]}),
            json!({"data": {"type": "tags", "attributes": {"name": "x"}}}),
        ] {
            let (st, doc) = h.call("POST", path, Some(body.clone())).await;
            assert_eq!(st, 422, "{body}: {doc}");
            assert!(doc["errors"][0]["source"]["pointer"].is_string(), "{doc}");
        }
        let (st, _) = h
            .call(
                "GET",
                "/api/v2/workspaces/ws-nothere/relationships/tags",
                None,
            )
            .await;
        assert_eq!(st, 404);
    }
}
