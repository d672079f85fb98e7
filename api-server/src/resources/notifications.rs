//! Notification configurations (TFE's Notification Configurations API, JSON:API type
//! `notification-configurations`): NotificationConfiguration objects in the
//! organization's namespace, declared with kubectl or GitOps or managed here.
//!
//! - `GET/POST /workspaces/:id/notification-configurations`, and
//!   `/projects/:id/notification-configurations` (the runs of every workspace of the
//!   project);
//! - `GET/PATCH/DELETE /notification-configurations/:id`;
//! - `POST /notification-configurations/:id/actions/verify`: has the operator send a
//!   verification and answers the configuration with its delivery response.
//!
//! The operator delivers (docs/notifications.md); the API server never calls a
//! destination itself. A token goes into a Secret the configuration owns and is never
//! shown (`token` reads `null`). Rights: `list`/`get`/`create`/`update`/`delete` on
//! `notificationconfigurations` in the organization's namespace, and reading the
//! workspace.

use std::time::Duration;

use terrace_crds::common::SecretKeyRef;
use terrace_crds::constants::{ANNOTATION_CREATED_AT, ANNOTATION_VERIFY_REQUESTED};
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::notification::{AllowedCidrs, DESTINATION_TYPES, TRIGGERS, destination_refusal};
use terrace_crds::{
    DeliveryResponse, NotificationConfiguration, NotificationConfigurationSpec, Project, Workspace,
};

use crate::access::Guarded;
use crate::prelude::*;

/// The RBAC resource of notification configurations.
const RESOURCE: &str = "notificationconfigurations";
/// Key of the token in a configuration's Secret.
const TOKEN_KEY: &str = "token";
/// How long a verify waits for the operator's delivery.
const VERIFY_WAIT: Duration = Duration::from_secs(20);
/// Annotation: when the API last changed the configuration (its `updated-at`).
use terrace_crds::constants::ANNOTATION_UPDATED_AT;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/notification-configurations",
            get(list_of_workspace).post(create),
        )
        .route(
            "/api/v2/projects/{id}/notification-configurations",
            get(list_of_project).post(create_for_project),
        )
        .route(
            "/api/v2/notification-configurations/{id}",
            get(show).patch(update).delete(remove),
        )
        .route(
            "/api/v2/notification-configurations/{id}/actions/verify",
            post(verify),
        )
}

/// A time annotation, else the object's creation.
fn time_of(n: &NotificationConfiguration, annotation: &str) -> Value {
    match n.annotations().get(annotation) {
        Some(t) => json!(t),
        None => created_at(n),
    }
}

/// A delivery response as TFE shows it (code and success as strings, as go-tfe reads).
fn render_response(d: &DeliveryResponse, url_shown: bool) -> Value {
    json!({
        "url": if url_shown { json!(d.url) } else { Value::Null },
        "body": d.body,
        "code": d.code,
        "headers": d.headers,
        "sent-at": d.sent_at,
        "successful": d.successful.to_string(),
    })
}

/// The ID of the workspace a configuration names (an ID, or a TFE name in `ns`).
fn workspace_id(state: &AppState, ns: &str, entry: &str) -> Option<String> {
    crate::relations::resolve(
        &state.index.read(),
        ns,
        crate::relations::Related::Workspace,
        entry,
    )
}

/// The ID of the project a configuration names (an ID, or a name in `ns`).
fn project_id(state: &AppState, ns: &str, entry: &str) -> Option<String> {
    crate::relations::resolve(
        &state.index.read(),
        ns,
        crate::relations::Related::Project,
        entry,
    )
}

/// Destinations whose URL is their credential (a Slack or Teams incoming webhook: anyone
/// who has it can post to the channel).
const SECRET_URLS: &[&str] = &["slack", "microsoft-teams"];

/// The JSON:API `data` of a configuration, for a caller who may change it (`may_update`)
/// or not: a Slack or Teams URL is shown only to the former.
fn render(state: &AppState, n: &NotificationConfiguration, may_update: bool) -> Value {
    let id = id_of(n);
    let url_shown = may_update || !SECRET_URLS.contains(&n.spec.destination_type.as_str());
    let ns = n.namespace().unwrap_or_default();
    let subscribable = match &n.spec.project {
        Some(p) => {
            json!({"id": project_id(state, &ns, p).unwrap_or_else(|| p.clone()), "type": "projects"})
        }
        None => json!({
            "id": workspace_id(state, &ns, &n.spec.workspace).unwrap_or_else(|| n.spec.workspace.clone()),
            "type": "workspaces",
        }),
    };
    let responses: Vec<Value> = n
        .status
        .as_ref()
        .map(|s| {
            s.delivery_responses
                .iter()
                .map(|d| render_response(d, url_shown))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "id": id,
        "type": "notification-configurations",
        "attributes": {
            "name": n.spec.name,
            "destination-type": n.spec.destination_type,
            "enabled": n.spec.enabled,
            "url": if url_shown { json!(n.spec.url) } else { Value::Null },
            // Write-only: set or not, it is never shown.
            "token": Value::Null,
            "triggers": n.spec.triggers,
            "email-addresses": [],
            "delivery-responses": responses,
            "created-at": time_of(n, ANNOTATION_CREATED_AT),
            "updated-at": time_of(n, ANNOTATION_UPDATED_AT),
        },
        "relationships": {
            "subscribable": {"data": subscribable},
            "users": {"data": []},
        },
        "links": {"self": format!("/api/v2/notification-configurations/{id}")},
    })
}

/// The attributes of a configuration request.
#[derive(Debug, Default, Deserialize)]
struct Attributes {
    name: Option<String>,
    #[serde(rename = "destination-type")]
    destination_type: Option<String>,
    enabled: Option<bool>,
    url: Option<String>,
    token: Option<String>,
    triggers: Option<Vec<String>>,
    #[serde(rename = "email-addresses")]
    email_addresses: Option<Vec<String>>,
}

impl Typed for Attributes {
    const TYPE: &'static str = "notification-configurations";
}

/// A configuration's relationships: users (email destinations) are refused.
#[derive(Default, Deserialize)]
struct Relationships {
    users: Option<ToMany<UserEntry>>,
}

struct UserEntry;
impl Typed for UserEntry {
    const TYPE: &'static str = "users";
}

/// The spec the attributes leave on `current` (None: a create), or every broken rule.
fn checked_spec(
    a: &Attributes,
    r: &Relationships,
    current: Option<&NotificationConfigurationSpec>,
    subscribable: &Subscribable,
    allowed: &AllowedCidrs,
) -> Result<NotificationConfigurationSpec, ApiError> {
    let mut errs = Vec::new();
    let mut spec = current.cloned().unwrap_or_else(|| match subscribable {
        Subscribable::Workspace(w) => NotificationConfigurationSpec {
            workspace: w.clone(),
            ..Default::default()
        },
        Subscribable::Project(p) => NotificationConfigurationSpec {
            project: Some(p.clone()),
            ..Default::default()
        },
    });
    if let Some(n) = &a.name {
        spec.name = n.trim().to_owned();
    }
    if spec.name.is_empty() {
        errs.push(FieldError::attribute("name", "Name can't be blank"));
    } else if spec.name.len() > 255 {
        errs.push(FieldError::attribute(
            "name",
            "Name is too long (maximum is 255 characters)",
        ));
    }
    match (&a.destination_type, current) {
        (Some(t), Some(c)) if *t != c.destination_type => errs.push(FieldError::attribute(
            "destination-type",
            "Destination type cannot be changed; create a new configuration",
        )),
        (Some(t), None) if t == "email" => errs.push(FieldError::attribute(
            "destination-type",
            "email destinations are not supported: terrace has no mail server (use generic, slack or microsoft-teams)",
        )),
        (Some(t), None) if !DESTINATION_TYPES.contains(&t.as_str()) => {
            errs.push(FieldError::attribute(
                "destination-type",
                format!("{t:?} is not a destination type: generic, slack or microsoft-teams"),
            ))
        }
        (Some(t), None) => spec.destination_type.clone_from(t),
        (None, None) => errs.push(FieldError::attribute(
            "destination-type",
            "Destination type can't be blank",
        )),
        _ => {}
    }
    write::given(&mut spec.enabled, a.enabled.as_ref());
    if let Some(u) = &a.url {
        spec.url = u.trim().to_owned();
    }
    if spec.url.is_empty() {
        errs.push(FieldError::attribute("url", "URL can't be blank"));
    } else if let Some(why) = destination_refusal(&spec.url, &allowed.0) {
        errs.push(FieldError::attribute("url", why));
    }
    if let Some(t) = &a.triggers {
        for (i, trigger) in t.iter().enumerate() {
            if !TRIGGERS.contains(&trigger.as_str()) {
                errs.push(FieldError::new(
                    format!("/data/attributes/triggers/{i}"),
                    format!("{trigger:?} is not a notification trigger"),
                ));
            }
        }
        let mut unique: Vec<String> = Vec::new();
        for trigger in t {
            if !unique.contains(trigger) {
                unique.push(trigger.clone());
            }
        }
        spec.triggers = unique;
    }
    if a.email_addresses.as_ref().is_some_and(|e| !e.is_empty()) {
        errs.push(FieldError::attribute(
            "email-addresses",
            "email addresses apply to email destinations, which terrace does not support",
        ));
    }
    if r.users.as_ref().is_some_and(|u| !u.entries.is_empty()) {
        errs.push(FieldError::new(
            "/data/relationships/users",
            "users apply to email destinations, which terrace does not support",
        ));
    }
    if errs.is_empty() {
        Ok(spec)
    } else {
        Err(ApiError::Invalid(errs))
    }
}

/// What a new configuration notifies: a workspace's runs, or those of every workspace
/// of a project (IDs).
enum Subscribable {
    Workspace(String),
    Project(String),
}

/// Name of the Secret of configuration object `object`'s token.
fn token_secret(object: &str) -> String {
    format!("{object}-token")
}

/// Writes `token` into the configuration's Secret (owned by it).
async fn store_token(
    state: &AppState,
    n: &NotificationConfiguration,
    token: &str,
) -> Result<(), ApiError> {
    write::owned_secret(state, n, &token_secret(&n.name_any()), TOKEN_KEY, token).await
}

async fn list_of_workspace(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let ws_id = f.at.id();
    let base = format!("/api/v2/workspaces/{ws_id}/notification-configurations");
    list_where(&state, &f.caller, &f.at, &q, base, |n| {
        n.spec.project.is_none()
            && workspace_id(&state, &f.at.ns, &n.spec.workspace).as_deref() == Some(&ws_id)
    })
    .await
}

async fn list_of_project(
    State(state): State<AppState>,
    f: Found<Project>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let prj_id = f.at.id();
    let base = format!("/api/v2/projects/{prj_id}/notification-configurations");
    list_where(&state, &f.caller, &f.at, &q, base, |n| {
        n.spec
            .project
            .as_deref()
            .is_some_and(|p| project_id(&state, &f.at.ns, p).as_deref() == Some(&prj_id))
    })
    .await
}

/// The configurations of `at`'s organization that `keep` selects, oldest first. As TFE
/// answers this list: every item and no `meta.pagination` unless the client asks for a
/// page (`page[number]` or `page[size]`; go-tfe reads a zero page otherwise).
async fn list_where<K: Resource>(
    state: &AppState,
    caller: &Caller,
    at: &Located<K>,
    q: &QueryParams,
    base: String,
    keep: impl Fn(&NotificationConfiguration) -> bool,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    q.supported_filters(&[])?;
    let mut items: Vec<Arc<NotificationConfiguration>> = state
        .listable::<NotificationConfiguration>(caller, &at.org)
        .await?
        .into_iter()
        .filter(|n| keep(n))
        .collect();
    items.sort_by_cached_key(|n| {
        (
            time_of(n, ANNOTATION_CREATED_AT)
                .as_str()
                .map(str::to_owned),
            n.name_any(),
        )
    });
    let may_update = may_update(state, caller, &at.ns).await?;
    if q.get("page[number]").is_some() || q.get("page[size]").is_some() {
        return Ok(list(&base, page, &items, |n| render(state, n, may_update)));
    }
    let data: Vec<Value> = items.iter().map(|n| render(state, n, may_update)).collect();
    Ok(Doc(StatusCode::OK, json!({"data": data})))
}

/// Whether `caller` may change the notification configurations of namespace `ns`.
async fn may_update(state: &AppState, caller: &Caller, ns: &str) -> Result<bool, ApiError> {
    state
        .allowed(caller, &Check::new("update", RESOURCE, ns, None))
        .await
}

async fn show(
    State(state): State<AppState>,
    f: Found<NotificationConfiguration>,
) -> Result<Doc, ApiError> {
    let may_update = may_update(&state, &f.caller, &f.at.ns).await?;
    Ok(Doc::ok(render(&state, &f.at.obj, may_update)))
}

async fn create(
    State(state): State<AppState>,
    f: Found<Workspace>,
    JsonApi(doc): JsonApi<Document<Attributes, Relationships>>,
) -> Result<Doc, ApiError> {
    let subscribable = Subscribable::Workspace(f.at.id());
    create_for(&state, &f.caller, &f.at, subscribable, doc).await
}

/// `POST /projects/:id/notification-configurations`: a configuration for the runs of
/// every workspace of the project.
async fn create_for_project(
    State(state): State<AppState>,
    f: Found<Project>,
    JsonApi(doc): JsonApi<Document<Attributes, Relationships>>,
) -> Result<Doc, ApiError> {
    let subscribable = Subscribable::Project(f.at.id());
    create_for(&state, &f.caller, &f.at, subscribable, doc).await
}

/// Creates a configuration of `subscribable` (the workspace or project `at`, which owns
/// it: deleting it deletes its configurations and their tokens).
async fn create_for<K: Resource<DynamicType = ()>>(
    state: &AppState,
    caller: &Caller,
    at: &Located<K>,
    subscribable: Subscribable,
    doc: Document<Attributes, Relationships>,
) -> Result<Doc, ApiError> {
    state
        .require_or_403(
            caller,
            &Check::new("create", RESOURCE, &at.ns, None),
            "not authorized to create notification configurations here",
        )
        .await?;
    let data = doc.checked()?;
    let mut spec = checked_spec(
        &data.attributes,
        &data.relationships,
        None,
        &subscribable,
        &state.settings.notification_allowed_cidrs,
    )?;
    let id = new_id(IdKind::NotificationConfiguration);
    let mut metadata = at.owned_meta(&id, &[]);
    let token = data.attributes.token.filter(|t| !t.is_empty());
    if token.is_some() {
        spec.token_from = Some(SecretKeyRef {
            name: token_secret(metadata.name.as_deref().unwrap_or_default()),
            key: TOKEN_KEY.to_owned(),
        });
    }
    let now = crate::render::now();
    let notes = metadata.annotations.get_or_insert_default();
    notes.insert(ANNOTATION_CREATED_AT.to_owned(), now.clone());
    notes.insert(ANNOTATION_UPDATED_AT.to_owned(), now);
    let n = NotificationConfiguration {
        metadata,
        spec,
        status: None,
    };
    let created = write::create(state, &at.ns, &n).await?;
    if let Some(t) = &token {
        store_token(state, &created, t).await?;
    }
    Ok(Doc::created(render(state, &created, true)))
}

/// Why a caller who reads the object may not change it.
const NOT_YOURS: &str = "not authorized to change this notification configuration";

async fn update(
    State(state): State<AppState>,
    f: Found<NotificationConfiguration>,
    JsonApi(doc): JsonApi<Document<Attributes, Relationships>>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let data = doc.checked()?;
    let a = &data.attributes;
    let object = f.at.obj.name_any();
    let token = a.token.clone();
    let r = &data.relationships;
    // Checked once here (a clear 422 before anything is written), then applied to the
    // live object.
    let allowed = &state.settings.notification_allowed_cidrs;
    let same = Subscribable::Workspace(String::new());
    checked_spec(a, r, Some(&f.at.obj.spec), &same, allowed)?;
    if let Some(t) = token.as_deref().filter(|t| !t.is_empty()) {
        store_token(&state, &f.at.obj, t).await?;
    }
    let now = crate::render::now();
    let updated = write::guarded_patch(
        &write::api::<NotificationConfiguration>(&state, &f.at.ns),
        (*f.at.obj).clone(),
        |cur| {
            let mut next = checked_spec(a, r, Some(&cur.spec), &same, allowed)?;
            match token.as_deref() {
                Some("") => next.token_from = None,
                Some(_) => {
                    next.token_from = Some(SecretKeyRef {
                        name: token_secret(&object),
                        key: TOKEN_KEY.to_owned(),
                    })
                }
                None => {}
            }
            let mut patch = json!({"metadata": {"annotations": {ANNOTATION_UPDATED_AT: now}}});
            if let Some(spec) = write::spec_diff(&cur.spec, &next)? {
                patch["spec"] = spec;
            }
            Ok(Some(patch))
        },
    )
    .await?;
    write::wait_seen(&state, &updated).await;
    Ok(Doc::ok(render(&state, &updated, true)))
}

async fn remove(
    State(state): State<AppState>,
    f: Found<NotificationConfiguration>,
) -> Result<Response, ApiError> {
    // The token's Secret is owned by it: the garbage collector takes it.
    f.delete(&state, NOT_YOURS).await
}

/// Has the operator send a verification: sets the request annotation to a new token and
/// waits until the status says it was answered.
async fn verify(
    State(state): State<AppState>,
    f: Found<NotificationConfiguration>,
) -> Result<Doc, ApiError> {
    f.require(&state, "update", NOT_YOURS).await?;
    let token = crate::capability::random_token();
    let api = write::api::<NotificationConfiguration>(&state, &f.at.ns);
    let asked = write::guarded_patch(&api, (*f.at.obj).clone(), |_| {
        Ok(Some(
            json!({"metadata": {"annotations": {ANNOTATION_VERIFY_REQUESTED: token}}}),
        ))
    })
    .await?;
    let key = asked.uid().unwrap_or_default();
    let answered = state
        .index
        .wait_until(VERIFY_WAIT, |i| {
            i.notification_configurations()
                .by_uid(&key)
                .is_some_and(|n| {
                    n.status.as_ref().and_then(|s| s.verified.as_deref()) == Some(token.as_str())
                })
        })
        .await;
    if !answered {
        return Err(ApiError::Unavailable(
            "the operator did not send the verification in time: is terrace's operator running?"
                .into(),
        ));
    }
    let idx_copy = state
        .index
        .read()
        .notification_configurations()
        .by_uid(&key)
        .cloned();
    let n = idx_copy.ok_or_else(NotificationConfiguration::not_found)?;
    Ok(Doc::ok(render(&state, &n, true)))
}

#[cfg(test)]
mod tests;
