//! Key-value tag bindings (SPEC.md B17) of workspaces and projects.
//!
//! Direct bindings are `spec.tagBindings` of the Workspace or Project, in the order given.
//! A workspace's effective bindings are its direct ones followed by those of its project
//! that it does not override (a direct binding wins over an inherited key); inherited ones
//! point at the project with `links.inherited-from`. They are computed from the index on
//! every read, so a project change shows at once. Not paginated.
//!
//! Paths: the vendor schema's `/relationships/tag-bindings` (GET, POST adds, PATCH
//! replaces; 204) and the clients' `/tag-bindings` (GET, PATCH adds and answers the
//! resulting list), plus `/effective-tag-bindings`.

use terrace_crds::common::{EffectiveTagBinding, TagBinding};
use terrace_crds::{Project, Workspace};

use crate::access::Guarded;
use crate::documents::{
    TagBindingAttributes, TagBindingType, effective_tag_binding, effective_tag_bindings_in,
    project_effective_tag_bindings, tag_binding, tag_bindings_of,
};
use crate::index::Inner;
use crate::prelude::*;

/// The body of a tag-binding write: `{"data": [...]}` of `tag-bindings`.
type Bindings = JsonApi<ToMany<TagBindingType, TagBindingAttributes>>;

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(routes::<Workspace>())
        .merge(routes::<Project>())
}

/// The routes of kind `K`'s bindings: direct ones under both paths, and effective ones.
fn routes<K: TagBound>() -> Router<AppState> {
    let path = K::PATH;
    Router::new()
        .route(
            &format!("{path}/tag-bindings"),
            get(list::<K>).patch(add_listing::<K>),
        )
        .route(
            &format!("{path}/relationships/tag-bindings"),
            get(list::<K>)
                .post(relate::<K, false>)
                .patch(relate::<K, true>),
        )
        .route(
            &format!("{path}/effective-tag-bindings"),
            get(effective::<K>),
        )
}

fn list_doc(owner_id: &str, bindings: &[TagBinding]) -> Value {
    json!({"data": bindings.iter().map(|b| tag_binding(owner_id, b)).collect::<Vec<_>>()})
}

/// The bindings of a request body, validated.
fn bindings(
    body: ToMany<TagBindingType, TagBindingAttributes>,
) -> Result<Vec<TagBinding>, ApiError> {
    tag_bindings_of(body.entries, "/data")
}

/// `current` with `added` merged in: existing keys take the new value in place, new keys
/// are appended.
pub fn merged(current: &[TagBinding], added: &[TagBinding]) -> Vec<TagBinding> {
    let mut out = current.to_vec();
    for a in added {
        match out.iter_mut().find(|b| b.key == a.key) {
            Some(b) => b.value = a.value.clone(),
            None => out.push(a.clone()),
        }
    }
    out
}

/// The spec patch setting `next` (None when unchanged); 422 past the binding limit.
fn change(current: &[TagBinding], next: Vec<TagBinding>) -> Result<Option<Value>, ApiError> {
    crate::documents::check_binding_count(next.len(), "/data")?;
    Ok((current != next.as_slice()).then(|| json!({"tagBindings": next})))
}

// --- direct bindings, the same for workspaces and projects ----------------------------

/// A kind whose objects carry direct tag bindings (`spec.tagBindings`).
trait TagBound: Guarded + Resource<Scope = k8s_openapi::NamespaceResourceScope> {
    /// The path of one object (`/api/v2/workspaces/{id}`).
    const PATH: &'static str;
    fn tag_bindings(&self) -> &[TagBinding];
    /// The bindings that apply to the object (see [`effective`]).
    fn effective_tag_bindings(&self, idx: &Inner) -> Vec<EffectiveTagBinding>;
}

impl TagBound for Workspace {
    const PATH: &'static str = "/api/v2/workspaces/{id}";
    fn tag_bindings(&self) -> &[TagBinding] {
        &self.spec.tag_bindings
    }
    /// Its direct bindings and those it inherits from its project.
    fn effective_tag_bindings(&self, idx: &Inner) -> Vec<EffectiveTagBinding> {
        effective_tag_bindings_in(idx, self)
    }
}

impl TagBound for Project {
    const PATH: &'static str = "/api/v2/projects/{id}";
    fn tag_bindings(&self) -> &[TagBinding] {
        &self.spec.tag_bindings
    }
    /// Its direct bindings: a project inherits none.
    fn effective_tag_bindings(&self, _: &Inner) -> Vec<EffectiveTagBinding> {
        project_effective_tag_bindings(self)
    }
}

async fn list<K: TagBound>(f: Found<K>) -> Doc {
    Doc(
        StatusCode::OK,
        list_doc(&f.at.id(), f.at.obj.tag_bindings()),
    )
}

/// Adds (`replace` false) or replaces the object's direct bindings; the object written.
async fn write_bindings<K: TagBound>(
    state: &AppState,
    f: Found<K, Admin>,
    body: ToMany<TagBindingType, TagBindingAttributes>,
    replace: bool,
) -> Result<K, ApiError> {
    let given = bindings(body)?;
    let l = f.at;
    write::update_spec(state, &l.ns, (*l.obj).clone(), |cur| {
        let next = if replace {
            given.clone()
        } else {
            merged(cur.tag_bindings(), &given)
        };
        change(cur.tag_bindings(), next)
    })
    .await
}

async fn add_listing<K: TagBound>(
    State(state): State<AppState>,
    f: Found<K, Admin>,
    JsonApi(body): Bindings,
) -> Result<Doc, ApiError> {
    let o = write_bindings(&state, f, body, false).await?;
    Ok(Doc(StatusCode::OK, list_doc(&id_of(&o), o.tag_bindings())))
}

/// `POST` (add, `REPLACE` false) or `PATCH` (replace) of `…/relationships/tag-bindings`:
/// 204.
async fn relate<K: TagBound, const REPLACE: bool>(
    State(state): State<AppState>,
    f: Found<K, Admin>,
    JsonApi(body): Bindings,
) -> Result<Response, ApiError> {
    write_bindings(&state, f, body, REPLACE).await?;
    Ok(no_content())
}

// --- effective bindings -------------------------------------------------------------

/// `GET …/effective-tag-bindings`: the bindings that apply to the object.
async fn effective<K: TagBound>(State(state): State<AppState>, f: Found<K>) -> Doc {
    let id = f.at.id();
    let bindings = f.at.obj.effective_tag_bindings(&state.index.read());
    let data: Vec<Value> = bindings
        .iter()
        .map(|b| effective_tag_binding(&id, b))
        .collect();
    Doc::ok(json!(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Edition;
    use crate::documents::effective_tag_bindings as effective;
    use crate::testing::{DEFAULT_PROJECT, harness};
    use terrace_crds::constants::LABEL_ID;

    fn parse_bindings(body: &Value) -> Result<Vec<TagBinding>, ApiError> {
        crate::body::parse::<ToMany<TagBindingType, TagBindingAttributes>>(
            body.to_string().as_bytes(),
        )
        .and_then(bindings)
    }

    fn tb(k: &str, v: &str) -> TagBinding {
        TagBinding {
            key: k.into(),
            value: v.into(),
        }
    }

    /// Adding merges by key in place; the body's last value for a key wins.
    #[test]
    fn merge_and_parse() {
        let cur = vec![tb("env", "dev"), tb("team", "a")];
        assert_eq!(
            merged(&cur, &[tb("env", "prod"), tb("new", "")]),
            vec![tb("env", "prod"), tb("team", "a"), tb("new", "")]
        );
        let body = json!({"data": [
            {"type": "tag-bindings", "attributes": {"key": "k", "value": "1"}},
            {"type": "tag-bindings", "attributes": {"key": "k", "value": "2"}},
            {"type": "tag-bindings", "attributes": {"key": "v"}},
        ]});
        assert_eq!(
            parse_bindings(&body).ok(),
            Some(vec![tb("k", "2"), tb("v", "")])
        );
        for bad in [
            json!({"data": [{"type": "tag-bindings", "attributes": {"key": ""}}]}),
            json!({"data": [{"type": "tag-bindings", "attributes": {"key": "k".repeat(129)}}]}),
            json!({"data": [{"type": "tag-bindings", "attributes": {"key": "k", "value": "v".repeat(257)}}]}),
            json!({"data": [{"type": "tags", "attributes": {"key": "k"}}]}),
            json!({"data": [{"type": "tag-bindings", "attributes": {"value": "v"}}]}),
        ] {
            assert!(
                matches!(parse_bindings(&bad), Err(ApiError::Invalid(_))),
                "{bad}"
            );
        }
    }

    /// Effective bindings: direct first, then inherited keys the workspace does not bind,
    /// marked with the project.
    #[test]
    fn effective_overrides_inherited() {
        let mut ws = Workspace::new("w", Default::default());
        ws.spec.tag_bindings = vec![tb("env", "prod")];
        let mut p = Project::new("p", Default::default());
        p.metadata.labels = Some([(LABEL_ID.to_owned(), "prj-1".to_owned())].into());
        p.spec.tag_bindings = vec![tb("env", "dev"), tb("team", "core")];
        let e = effective(&ws, Some(&p));
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].key.as_str(), e[0].value.as_str()), ("env", "prod"));
        assert_eq!(e[0].inherited_from, None);
        assert_eq!(
            (e[1].key.as_str(), e[1].inherited_from.as_deref()),
            ("team", Some("prj-1"))
        );
    }

    /// Through the API: PATCH /tag-bindings adds and lists; the relationships PATCH
    /// replaces; effective bindings show the project's with links.inherited-from.
    #[tokio::test]
    async fn workspace_and_project_bindings() {
        let h = harness(Edition::SelfHosted).await;
        h.workspace("ws-BBBBBBBBBBBBBBB1", "tb", |s| {
            s.tag_bindings = vec![tb("a", "1")]
        })
        .await;
        let base = "/api/v2/workspaces/ws-BBBBBBBBBBBBBBB1";
        let (st, doc) = h
            .call(
                "PATCH",
                &format!("{base}/tag-bindings"),
                Some(json!({"data": [{"type": "tag-bindings", "attributes": {"key": "b", "value": "2"}}]})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        assert_eq!(doc["data"][1]["attributes"]["key"], "b");

        let (st, _) = h
            .call(
                "PATCH",
                &format!("{base}/relationships/tag-bindings"),
                Some(json!({"data": [{"type": "tag-bindings", "attributes": {"key": "env", "value": "prod"}}]})),
            )
            .await;
        assert_eq!(st, 204);
        let (_, doc) = h.call("GET", &format!("{base}/tag-bindings"), None).await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(1));

        let (st, _) = h
            .call(
                "POST",
                &format!("/api/v2/projects/{DEFAULT_PROJECT}/relationships/tag-bindings"),
                Some(json!({"data": [
                    {"type": "tag-bindings", "attributes": {"key": "env", "value": "dev"}},
                    {"type": "tag-bindings", "attributes": {"key": "team", "value": "core"}},
                ]})),
            )
            .await;
        assert_eq!(st, 204);
        let (st, doc) = h
            .call("GET", &format!("{base}/effective-tag-bindings"), None)
            .await;
        assert_eq!(st, 200);
        let data = doc["data"].as_array().cloned().unwrap_or_default();
        assert_eq!(data.len(), 2, "{doc}");
        assert_eq!(data[0]["attributes"]["value"], "prod");
        assert!(data[0].get("links").is_none());
        assert_eq!(data[1]["attributes"]["key"], "team");
        assert_eq!(
            data[1]["links"]["inherited-from"],
            format!("/api/v2/projects/{DEFAULT_PROJECT}")
        );
        let (_, doc) = h
            .call(
                "GET",
                &format!("/api/v2/projects/{DEFAULT_PROJECT}/tag-bindings"),
                None,
            )
            .await;
        assert_eq!(doc["data"].as_array().map(Vec::len), Some(2));
        let (st, _) = h
            .call("GET", "/api/v2/projects/prj-nope/tag-bindings", None)
            .await;
        assert_eq!(st, 404);
    }
}
