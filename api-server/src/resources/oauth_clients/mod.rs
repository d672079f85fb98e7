//! OAuth clients (TFE's VCS connections, docs/vcs.md). A connection is one OAuthToken
//! object in the organization's namespace: it is both the OAuth client `oc-X` and its one
//! token `ot-X` (the same random part), as TFE makes one token per client created with a
//! personal access token. The access token, the webhook secret and an SSH key live in a
//! Secret the object owns, and are never answered except the webhook secret, once, in the
//! create's answer (the provider needs it to sign its webhooks).

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use terrace_crds::common::SecretKeyRef;
use terrace_crds::ids::{IdKind, is_valid_id, new_id, object_name_for_id};
use terrace_crds::vcs::triggers::Triggers;
use terrace_crds::vcs::{self, Forge, SERVICE_PROVIDERS};
use terrace_crds::{OAuthToken, OAuthTokenSpec, Project, Workspace};

use crate::capability::{base_url, random_token};
use crate::prelude::*;

/// Keys of a connection's Secret.
pub const TOKEN_KEY: &str = "token";
pub const WEBHOOK_SECRET_KEY: &str = "webhook-secret";
pub const SSH_KEY_KEY: &str = "ssh-key";
/// The OAuth application's secret (TFE's write-only `secret`).
pub const OAUTH_SECRET_KEY: &str = "oauth-secret";

pub mod ingress;
pub mod poll;
pub mod tokens;
pub mod webhook;

pub fn router() -> Router<AppState> {
    crate::read_only::org_scoped(
        "oauth-clients",
        get(list_clients).post(create),
        get(show).patch(update).delete(remove),
    )
    .route("/api/v2/oauth-clients/{id}/oauth-tokens", get(tokens_of))
    .route(
        "/api/v2/oauth-clients/{id}/relationships/projects",
        post(add_projects).delete(remove_projects),
    )
    .merge(tokens::router())
    .merge(webhook::router())
}

/// The client ID of connection `t` (`ot-X` → `oc-X`).
pub fn client_id(t: &OAuthToken) -> String {
    client_id_of(&id_of(t))
}

/// `ot-X` → `oc-X`.
pub fn client_id_of(token_id: &str) -> String {
    format!("oc-{}", token_id.strip_prefix("ot-").unwrap_or(token_id))
}

/// `oc-X` → `ot-X`; None for anything else.
pub fn token_id_of(client_id: &str) -> Option<String> {
    let id = format!("ot-{}", client_id.strip_prefix("oc-")?);
    is_valid_id(IdKind::OAuthToken, &id).then_some(id)
}

/// The URL a connection's provider sends its webhooks to.
pub fn webhook_url(base: &str, t: &OAuthToken) -> String {
    format!("{base}/webhooks/vcs/{}", client_id(t))
}

/// The JSON:API `data` of a connection as an OAuth client.
pub fn render(t: &OAuthToken, org: &Organization, base: &str) -> Value {
    let id = client_id(t);
    let sp = &t.spec.service_provider;
    json!({
        "id": id,
        "type": "oauth-clients",
        "attributes": {
            "name": t.spec.name,
            "created-at": created_at(t),
            "updated-at": created_at(t),
            "callback-url": format!("{base}/auth/{id}/callback"),
            "connect-path": format!("/auth/{id}?organization_id={}", org.tfe_name()),
            "service-provider": sp,
            "service-provider-display-name": vcs::display_name(sp),
            "http-url": t.spec.http_url,
            "api-url": t.spec.api_url,
            "key": t.spec.key,
            "secret": Value::Null,
            "rsa-public-key": t.spec.rsa_public_key,
            "organization-scoped": t.spec.organization_scoped,
            "webhook-url": webhook_url(base, t),
            "allow-fork-pull-requests": t.spec.allow_fork_pull_requests,
            "poll-interval-seconds": t.spec.poll_interval_seconds,
        },
        "relationships": {
            "organization": {"data": {"id": org.tfe_name(), "type": "organizations"}},
            "oauth-tokens": {
                "data": [{"id": id_of(t), "type": "oauth-tokens"}],
                "links": {"related": format!("/api/v2/oauth-clients/{id}/oauth-tokens")},
            },
            "projects": {"data": t.spec.projects.iter().map(|p| json!({"id": p, "type": "projects"})).collect::<Vec<_>>()},
            "agent-pool": {"data": t.spec.agent_pool_id.as_ref().map(|p| json!({"id": p, "type": "agent-pools"}))},
        },
        "links": {"self": format!("/api/v2/oauth-clients/{id}")},
    })
}

/// What `include` may name on OAuth clients (go-tfe's `OAuthClientIncludeOpt`).
const INCLUDES: &[&str] = &["oauth_tokens", "projects"];

/// Adds what `inc` asks of connection `t`: its token, and the projects it is shared with.
fn included(idx: &crate::index::Inner, t: &OAuthToken, org: &Organization, inc: &mut Included) {
    if inc.wants("oauth_tokens") {
        inc.add(tokens::render(t));
    }
    if inc.wants("projects") {
        inc.extend(
            t.spec
                .projects
                .iter()
                .filter_map(|p| idx.project(p))
                .map(|p| crate::documents::project_in(idx, p, org)),
        );
    }
}

/// The connection of an `oc-…` path, if the caller may read it.
pub struct FoundClient(pub Found<OAuthToken>);

impl axum::extract::FromRequestParts<AppState> for FoundClient {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, ApiError> {
        let not_found = || ApiError::not_found("oauth client not found");
        let caller = Caller::from_request_parts(parts, state).await?;
        let Path(params): Path<BTreeMap<String, String>> = Path::from_request_parts(parts, state)
            .await
            .map_err(|_| not_found())?;
        let token_id = params
            .get("id")
            .and_then(|id| token_id_of(id))
            .ok_or_else(not_found)?;
        let l = state
            .readable::<OAuthToken>(&caller, &token_id)
            .await
            .map_err(|_| not_found())?;
        let at = state.found::<OAuthToken, Read>(&caller, l).await?;
        Ok(FoundClient(Found::new(caller, at)))
    }
}

/// 403 details (a caller who may not even read the client gets 404 from [`Found`]).
const NO_CREATE: &str = "not authorized to create OAuth clients in this organization";
pub(super) const NO_UPDATE: &str = "not authorized to update OAuth clients in this organization";
pub(super) const NO_DELETE: &str = "not authorized to delete OAuth clients in this organization";

async fn list_clients(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
    headers: HeaderMap,
) -> Result<Doc, ApiError> {
    let mut l = Listing::<OAuthToken>::read(&state, &o, &q, "oauth-clients", &[], INCLUDES).await?;
    l.items.sort_by_key(|t| {
        (
            t.metadata.creation_timestamp.as_ref().map(|t| t.0),
            t.name_any(),
        )
    });
    let base = base_url(&state, &headers);
    let idx = state.index.read();
    Ok(l.answer(|t, inc| {
        included(&idx, t, &o.org, inc);
        render(t, &o.org, &base)
    }))
}

/// The attributes of an OAuth client request.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClientAttributes {
    name: Option<String>,
    service_provider: Option<String>,
    http_url: Option<String>,
    api_url: Option<String>,
    oauth_token_string: Option<String>,
    private_key: Option<String>,
    key: Option<String>,
    secret: Option<String>,
    rsa_public_key: Option<String>,
    organization_scoped: Option<bool>,
    /// terrace's: the secret webhooks are signed with (generated when absent).
    webhook_secret: Option<String>,
    allow_fork_pull_requests: Option<bool>,
    poll_interval_seconds: Option<u32>,
}

impl Typed for ClientAttributes {
    const TYPE: &'static str = "oauth-clients";
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClientRelationships {
    #[serde(default)]
    projects: Option<crate::body::ToMany<ProjectRef>>,
    #[serde(default)]
    agent_pool: Option<ToOne>,
}

/// The agent pool a relationship names: an existing pool of the organization (422
/// otherwise, TFE's words); `Some(None)` for `{"data": null}`.
fn agent_pool(
    state: &AppState,
    ns: &str,
    rel: Option<&ToOne>,
) -> Result<Option<Option<String>>, ApiError> {
    let Some(rel) = rel else { return Ok(None) };
    match rel.id() {
        None => Ok(None),
        Some(None) => Ok(Some(None)),
        Some(Some(id)) => {
            let idx = state.index.read();
            match idx.agent_pools().get(id) {
                Some(p) if p.namespace().as_deref() == Some(ns) => Ok(Some(Some(id.to_owned()))),
                _ => Err(ApiError::invalid(
                    "/data/relationships/agent-pool",
                    "the provided agent pool does not exist or you are not authorized to use it",
                )),
            }
        }
    }
}

/// Bitbucket Server and Data Center need their consumer key (TFE's words).
fn check_key(sp: &str, key: Option<&str>) -> Result<(), ApiError> {
    if Forge::of(sp) == Forge::BitbucketServer && key.is_some_and(|k| k.trim().is_empty()) {
        return Err(ApiError::invalid_attribute(
            "key",
            "The Consumer Key for Bitbucket Data Center must be present. Please add a value for `key`.",
        ));
    }
    Ok(())
}

struct ProjectRef;
impl Typed for ProjectRef {
    const TYPE: &'static str = "projects";
}

/// A URL attribute: required on create, absolute http(s) when given.
fn url_attr(v: Option<&str>, attr: &str, required: bool) -> Result<Option<String>, ApiError> {
    match v.map(str::trim) {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
            Ok(Some(u.trim_end_matches('/').to_owned()))
        }
        Some("") | None if !required => Ok(None),
        Some("") | None => Err(ApiError::invalid_attribute(
            attr,
            format!("{attr} is required"),
        )),
        Some(_) => Err(ApiError::invalid_attribute(
            attr,
            format!("{attr} must be an absolute http or https URL"),
        )),
    }
}

/// The projects of a relationship, each an existing project of the organization.
fn project_ids(
    state: &AppState,
    ns: &str,
    entries: Vec<crate::body::Identifier>,
) -> Result<Vec<String>, ApiError> {
    let idx = state.index.read();
    entries
        .into_iter()
        .map(|e| {
            let id = e.id.unwrap_or_default();
            match idx.project(&id) {
                Some(p) if p.namespace().as_deref() == Some(ns) => Ok(id),
                _ => Err(ApiError::not_found(format!("project {id} not found"))),
            }
        })
        .collect()
}

fn bytes(s: &str) -> ByteString {
    ByteString(s.as_bytes().to_vec())
}

async fn create(
    State(state): State<AppState>,
    o: VisibleOrg,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<ClientAttributes, ClientRelationships>>,
) -> Result<Doc, ApiError> {
    let (org, ns) = (o.org.clone(), o.ns().to_owned());
    if !state
        .allowed(&o.caller, &o.check("create", "oauthtokens"))
        .await?
    {
        return Err(ApiError::forbidden(NO_CREATE));
    }
    let data = doc.checked()?;
    let a = data.attributes;
    let sp = a.service_provider.clone().unwrap_or_default();
    if sp.is_empty() {
        return Err(ApiError::invalid_attribute(
            "service-provider",
            "service-provider is required",
        ));
    }
    if !SERVICE_PROVIDERS.contains(&sp.as_str()) {
        return Err(ApiError::invalid_attribute(
            "service-provider",
            format!(
                "service-provider must be one of {}",
                SERVICE_PROVIDERS.join(", ")
            ),
        ));
    }
    let http_url = url_attr(a.http_url.as_deref(), "http-url", true)?;
    let forge = Forge::of(&sp);
    // A plain Git server has no API.
    let api_url = url_attr(a.api_url.as_deref(), "api-url", forge != Forge::Git)?;
    let token = a.oauth_token_string.clone().filter(|t| !t.is_empty());
    if token.is_none() && !matches!(forge, Forge::BitbucketServer | Forge::Git) {
        return Err(ApiError::invalid_attribute(
            "oauth-token-string",
            "oauth-token-string is required (a personal access token of the provider)",
        ));
    }
    check_key(&sp, a.key.as_deref())?;
    let pool = agent_pool(&state, &ns, data.relationships.agent_pool.as_ref())?.flatten();
    let projects = match data.relationships.projects {
        Some(p) => project_ids(&state, &ns, p.checked()?)?,
        None => Vec::new(),
    };
    let webhook_secret = a
        .webhook_secret
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(random_token);
    let id = new_id(IdKind::OAuthToken);
    let object_name = object_name_for_id(&id);
    let secret_name = format!("{object_name}-vcs");
    let key_ref = |key: &str| SecretKeyRef {
        name: secret_name.clone(),
        key: key.to_owned(),
    };
    let private_key = a.private_key.clone().filter(|k| !k.is_empty());
    let conn = OAuthToken {
        metadata: write::new_meta(&id, &ns, org.name_any(), &[]),
        spec: OAuthTokenSpec {
            service_provider: sp,
            name: a.name.clone().filter(|n| !n.is_empty()),
            http_url,
            api_url,
            token_secret_ref: token.as_ref().map(|_| key_ref(TOKEN_KEY)),
            webhook_secret_ref: Some(key_ref(WEBHOOK_SECRET_KEY)),
            ssh_key_secret_ref: private_key.as_ref().map(|_| key_ref(SSH_KEY_KEY)),
            key: a.key.clone().filter(|k| !k.is_empty()),
            rsa_public_key: a.rsa_public_key.clone().filter(|k| !k.is_empty()),
            agent_pool_id: pool,
            organization_scoped: a.organization_scoped.unwrap_or(true),
            projects,
            allow_fork_pull_requests: a.allow_fork_pull_requests.unwrap_or(false),
            poll_interval_seconds: a.poll_interval_seconds.filter(|s| *s > 0),
        },
        status: None,
    };
    let conns = write::api::<OAuthToken>(&state, &ns);
    let created = conns.create(&PostParams::default(), &conn).await?;
    let mut data = BTreeMap::from([(WEBHOOK_SECRET_KEY.to_owned(), bytes(&webhook_secret))]);
    if let Some(t) = &token {
        data.insert(TOKEN_KEY.to_owned(), bytes(t));
    }
    if let Some(k) = &private_key {
        data.insert(SSH_KEY_KEY.to_owned(), bytes(k));
    }
    if let Some(k) = a.secret.as_deref().filter(|k| !k.is_empty()) {
        data.insert(OAUTH_SECRET_KEY.to_owned(), bytes(k));
    }
    let secret = write::secret_of(&created, &id, secret_name, data);
    if let Err(e) = write::api::<Secret>(&state, &ns)
        .create(&PostParams::default(), &secret)
        .await
    {
        let _ = conns.delete(&object_name, &DeleteParams::default()).await;
        return Err(e.into());
    }
    write::wait_seen(&state, &created).await;
    let mut doc = render(&created, &org, &base_url(&state, &headers));
    // Shown this once: the provider's webhook settings need it.
    doc["attributes"]["webhook-secret"] = json!(webhook_secret);
    Ok(Doc::created(doc))
}

async fn show(
    State(state): State<AppState>,
    FoundClient(f): FoundClient,
    headers: HeaderMap,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(&q, INCLUDES)?;
    included(&state.index.read(), &f.at.obj, &f.at.org, &mut inc);
    let data = render(&f.at.obj, &f.at.org, &base_url(&state, &headers));
    Ok(inc.show(StatusCode::OK, data))
}

/// Writes `values` into the connection's Secret (created when the object has none of
/// its own yet, as a GitOps-declared one may not), answering the references to set.
pub(super) async fn put_secret_values(
    state: &AppState,
    t: &OAuthToken,
    values: &[(&str, &str)],
) -> Result<Value, ApiError> {
    if values.is_empty() {
        return Ok(json!({}));
    }
    let ns = t.namespace().unwrap_or_default();
    let name = format!("{}-vcs", t.name_any());
    let data: BTreeMap<String, ByteString> = values
        .iter()
        .map(|(k, v)| ((*k).to_owned(), bytes(v)))
        .collect();
    let secrets = write::api::<Secret>(state, &ns);
    // A merge patch adds or replaces only the keys given (a GitOps-declared connection
    // may have no Secret of ours yet: then it is made).
    let patch = json!({"data": data});
    match secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let secret = write::secret_of(t, &id_of(t), name.clone(), data);
            secrets.create(&PostParams::default(), &secret).await?;
        }
        Err(e) => return Err(e.into()),
    }
    let mut refs = serde_json::Map::new();
    for (k, _) in values {
        let field = match *k {
            TOKEN_KEY => "tokenSecretRef",
            WEBHOOK_SECRET_KEY => "webhookSecretRef",
            SSH_KEY_KEY => "sshKeySecretRef",
            // The OAuth application's secret is kept, not referenced.
            _ => continue,
        };
        refs.insert(field.into(), json!({"name": name, "key": k}));
    }
    Ok(Value::Object(refs))
}

async fn update(
    State(state): State<AppState>,
    FoundClient(f): FoundClient,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Document<ClientAttributes, ClientRelationships>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NO_UPDATE).await?;
    let data = doc.checked()?;
    let a = data.attributes;
    check_key(&f.at.obj.spec.service_provider, a.key.as_deref())?;
    let pool = agent_pool(&state, &f.at.ns, data.relationships.agent_pool.as_ref())?;
    if a.service_provider
        .as_deref()
        .is_some_and(|sp| sp != f.at.obj.spec.service_provider)
    {
        return Err(ApiError::invalid_attribute(
            "service-provider",
            "service-provider cannot be changed; create a new client",
        ));
    }
    let http_url = url_attr(a.http_url.as_deref(), "http-url", false)?;
    let api_url = url_attr(a.api_url.as_deref(), "api-url", false)?;
    let mut values: Vec<(&str, &str)> = Vec::new();
    if let Some(t) = a.oauth_token_string.as_deref().filter(|t| !t.is_empty()) {
        values.push((TOKEN_KEY, t));
    }
    if let Some(s) = a.webhook_secret.as_deref().filter(|t| !t.is_empty()) {
        values.push((WEBHOOK_SECRET_KEY, s));
    }
    if let Some(k) = a.private_key.as_deref().filter(|t| !t.is_empty()) {
        values.push((SSH_KEY_KEY, k));
    }
    if let Some(k) = a.secret.as_deref().filter(|t| !t.is_empty()) {
        values.push((OAUTH_SECRET_KEY, k));
    }
    let refs = put_secret_values(&state, &f.at.obj, &values).await?;
    let mut patch = refs;
    let p = patch.as_object_mut().expect("an object");
    if let Some(n) = &a.name {
        p.insert("name".into(), json!(n));
    }
    if let Some(k) = &a.key {
        p.insert("key".into(), json!(k));
    }
    if let Some(k) = &a.rsa_public_key {
        p.insert("rsaPublicKey".into(), json!(k));
    }
    if let Some(pool) = pool {
        p.insert("agentPoolId".into(), json!(pool));
    }
    if let Some(u) = http_url {
        p.insert("httpUrl".into(), json!(u));
    }
    if let Some(u) = api_url {
        p.insert("apiUrl".into(), json!(u));
    }
    if let Some(s) = a.organization_scoped {
        p.insert("organizationScoped".into(), json!(s));
    }
    if let Some(s) = a.allow_fork_pull_requests {
        p.insert("allowForkPullRequests".into(), json!(s));
    }
    if let Some(s) = a.poll_interval_seconds {
        p.insert("pollIntervalSeconds".into(), json!(s));
    }
    let updated = write::update_spec(&state, &f.at.ns, (*f.at.obj).clone(), |_| {
        Ok((!patch.as_object().is_some_and(|m| m.is_empty())).then(|| patch.clone()))
    })
    .await?;
    Ok(Doc::ok(render(
        &updated,
        &f.at.org,
        &base_url(&state, &headers),
    )))
}

async fn remove(
    State(state): State<AppState>,
    FoundClient(f): FoundClient,
) -> Result<Response, ApiError> {
    // Its Secret goes with it, as it owns it.
    f.delete(&state, NO_DELETE).await
}

async fn tokens_of(FoundClient(f): FoundClient, q: QueryParams) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let path = format!(
        "/api/v2/oauth-clients/{}/oauth-tokens",
        client_id(&f.at.obj)
    );
    Ok(list(&path, page, std::slice::from_ref(&f.at.obj), |t| {
        tokens::render(t)
    }))
}

async fn set_projects(
    state: &AppState,
    f: &Found<OAuthToken>,
    body: crate::body::ToMany<ProjectRef>,
    add: bool,
) -> Result<Response, ApiError> {
    f.require(state, "update", NO_UPDATE).await?;
    let given = project_ids(state, &f.at.ns, body.checked()?)?;
    let mut projects = f.at.obj.spec.projects.clone();
    if add {
        for p in given {
            if !projects.contains(&p) {
                projects.push(p);
            }
        }
    } else {
        projects.retain(|p| !given.contains(p));
    }
    write::update_spec(state, &f.at.ns, (*f.at.obj).clone(), |t| {
        Ok((t.spec.projects != projects).then(|| json!({"projects": projects})))
    })
    .await?;
    Ok(no_content())
}

async fn add_projects(
    State(state): State<AppState>,
    FoundClient(f): FoundClient,
    JsonApi(body): JsonApi<crate::body::ToMany<ProjectRef>>,
) -> Result<Response, ApiError> {
    set_projects(&state, &f, body, true).await
}

async fn remove_projects(
    State(state): State<AppState>,
    FoundClient(f): FoundClient,
    JsonApi(body): JsonApi<crate::body::ToMany<ProjectRef>>,
) -> Result<Response, ApiError> {
    set_projects(&state, &f, body, false).await
}

/// Whether workspace project `project` may use connection `t`.
pub fn admits(t: &OAuthToken, project: Option<&Project>) -> bool {
    t.spec.organization_scoped
        || project.is_some_and(|p| t.spec.projects.iter().any(|id| *id == id_of(p)))
}

/// A Secret value of connection `t` by its reference; None without one.
pub async fn secret_value(
    state: &AppState,
    t: &OAuthToken,
    r: Option<&terrace_crds::common::SecretKeyRef>,
) -> Result<Option<String>, ApiError> {
    let Some(r) = r else { return Ok(None) };
    let ns = t.namespace().unwrap_or_default();
    let secret = write::api::<Secret>(state, &ns).get_opt(&r.name).await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|d| d.get(&r.key).cloned())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned()))
}

/// The triggers of workspace `ws` (its `vcs-repo` and trigger settings).
pub fn triggers(ws: &Workspace) -> Triggers<'_> {
    let r = ws.spec.vcs_repo.as_deref();
    Triggers {
        branch: r.and_then(|r| r.branch.as_deref()),
        tags_regex: r.and_then(|r| r.tags_regex.as_deref()),
        file_triggers_enabled: ws.spec.file_triggers_enabled,
        working_directory: ws.spec.working_directory.as_deref(),
        trigger_prefixes: &ws.spec.trigger_prefixes,
        trigger_patterns: &ws.spec.trigger_patterns,
    }
}

/// The HTTP credentials connection `t` fetches with: its provider's user name and its
/// token (None without a token: a public repository).
pub async fn credentials(
    state: &AppState,
    t: &OAuthToken,
) -> Result<Option<(String, String)>, String> {
    let token = secret_value(state, t, t.spec.token_secret_ref.as_ref())
        .await
        .map_err(|e| format!("reading the connection's token: {e}"))?;
    Ok(token.map(|v| {
        (
            Forge::of(&t.spec.service_provider)
                .clone_username()
                .to_owned(),
            v,
        )
    }))
}

/// Records on workspace `ws` whether its repository could be read (`error`: why not),
/// as the annotation its `RepositoryReadable` condition comes from; only a change is
/// written.
pub async fn mark_repository(state: &AppState, ws: &Workspace, error: Option<&str>) {
    use terrace_crds::constants::ANNOTATION_VCS_ERROR;
    let uid = ws.metadata.uid.clone().unwrap_or_default();
    let current = state.index.read().workspace_by_uid(&uid).cloned();
    let ws = current.as_deref().unwrap_or(ws);
    let now = ws
        .annotations()
        .get(ANNOTATION_VCS_ERROR)
        .map(String::as_str);
    if now == error {
        return;
    }
    let patch = json!({"metadata": {"annotations": {ANNOTATION_VCS_ERROR: error}}});
    let ns = ws.namespace().unwrap_or_default();
    if let Err(e) = write::api::<Workspace>(state, &ns)
        .patch(
            &ws.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        tracing::warn!(workspace = %ws.name_any(), error = %e, "the repository's readability was not recorded");
    }
}
