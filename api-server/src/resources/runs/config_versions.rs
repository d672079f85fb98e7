//! Configuration versions of workspaces: `POST/GET /workspaces/:id/configuration-versions`.
//!
//! The same ConfigurationVersion kind as a module's (with `spec.workspace`), the same
//! one-time upload URL and upload handler (`PUT /api/v2/uploads/v1/object/<token>`), and
//! the same show (`GET /configuration-versions/:id`). `speculative` versions make plan-only
//! runs.

use axum::http::HeaderMap;
use terrace_crds::constants::LABEL_WORKSPACE_ID;
use terrace_crds::ids::{IdKind, new_id};
use terrace_crds::resources::ConfigurationVersionSpec;
use terrace_crds::{ConfigurationVersion, ConfigurationVersionState, Workspace};

use crate::documents::config_versions::{create_pending, pending_meta, render};
use crate::prelude::*;
use crate::render::by_creation;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/api/v2/workspaces/{id}/configuration-versions",
            post(create).get(list),
        )
        .route(
            "/api/v2/configuration-versions/{id}/download",
            get(download),
        )
        .route(
            "/api/v2/configuration-versions/{id}/ingress-attributes",
            get(ingress_attributes),
        )
        .route(
            "/api/v2/configuration-versions/{id}/actions/archive",
            post(archive),
        )
        .route(
            "/api/v2/configuration-versions/{id}/actions/{action}",
            post(backing_data),
        )
}

/// `POST /configuration-versions/:id/actions/{soft_delete,restore,permanently_delete}_backing_data`:
/// TFE's backing data actions, as state versions have them. A soft-deleted archive is
/// kept but no longer downloaded nor used by runs until it is restored; a permanent
/// deletion removes it from the blob store and the version reads `archived`. The
/// workspace's current configuration and one a run in progress uses cannot be deleted
/// (409). The right is `delete` on configurationversions (owners have it).
async fn backing_data(
    State(state): State<AppState>,
    Path((_, action)): Path<(String, String)>,
    f: Found<ConfigurationVersion>,
) -> Result<Response, ApiError> {
    use terrace_crds::state::BackingDataAction;
    let action = match action.as_str() {
        "soft_delete_backing_data" => BackingDataAction::SoftDelete,
        "restore_backing_data" => BackingDataAction::Restore,
        "permanently_delete_backing_data" => BackingDataAction::PermanentlyDelete,
        _ => {
            return Err(ApiError::not_found(format!(
                "no configuration version action {action:?}; one of: archive, soft_delete_backing_data, restore_backing_data, permanently_delete_backing_data"
            )));
        }
    };
    f.require(
        &state,
        "delete",
        "managing a configuration version's data needs the delete right on configurationversions",
    )
    .await?;
    let at = &f.at;
    let object = at.obj.name_any();
    let (current, in_use) = {
        let idx = state.index.read();
        let current = at
            .obj
            .spec
            .workspace
            .as_deref()
            .is_some_and(|ws| is_current(&idx, &at.ns, ws, &at.obj));
        let in_ns = |ns: Option<String>| ns.as_deref() == Some(at.ns.as_str());
        let runs = idx.runs().in_namespace(&at.ns).any(|r| {
            r.spec.configuration_version == object
                && !crate::documents::runs::state_of(r).is_final()
        });
        let tests = idx.test_runs().iter().any(|t| {
            in_ns(t.namespace())
                && t.spec.configuration_version == object
                && !terrace_crds::testrun::TestRunState::of(t.status.as_ref())
                    .is_ok_and(terrace_crds::testrun::TestRunState::is_final)
        });
        (current, runs || tests)
    };
    let now = crate::render::now();
    let api = write::api::<ConfigurationVersion>(&state, &at.ns);
    let done = write::guarded_status_patch(&api, (*at.obj).clone(), |c| {
        let state = c
            .state()
            .map_err(|e| ApiError::conflict(format!("transition not allowed: {e}")))?;
        let to = terrace_crds::resources::configuration_data_transition(
            state,
            c.data(),
            action,
            current,
            in_use,
        )
        .map_err(ApiError::conflict)?;
        use terrace_crds::resources::ConfigurationData;
        Ok(Some(match to {
            ConfigurationData::Kept => json!({"backingDataDeletedAt": null}),
            ConfigurationData::SoftDeleted => json!({"backingDataDeletedAt": now}),
            ConfigurationData::PermanentlyDeleted => json!({
                "status": ConfigurationVersionState::Archived.as_str(),
                "backingDataPermanentlyDeletedAt": now,
            }),
        }))
    })
    .await?;
    if action == BackingDataAction::PermanentlyDelete
        && let Some(key) = at
            .obj
            .status
            .as_ref()
            .and_then(|s| s.archive.as_ref())
            .map(|a| a.key.clone())
    {
        use crate::blobs::BlobStore;
        match crate::blobs::store(&state, &at.ns, None).delete(&key).await {
            Ok(()) | Err(crate::blobs::BlobError::NotFound(_)) => {}
            Err(e) => return Err(crate::blobs::api_error("the archive", e)),
        }
    }
    write::wait_seen(&state, &done).await;
    Ok(StatusCode::OK.into_response())
}

/// `GET /configuration-versions/:id/download`: the uploaded tar.gz, byte for byte, to a
/// caller who may read the configuration version; 404 before the upload and once it is
/// archived.
async fn download(
    State(state): State<AppState>,
    f: Found<ConfigurationVersion>,
) -> Result<Response, ApiError> {
    let cv = &f.at.obj;
    let missing = || ApiError::not_found("configuration version archive not found");
    if !cv.usable() {
        return Err(missing());
    }
    if cv
        .status
        .as_ref()
        .and_then(|s| s.archive.as_ref())
        .is_none()
    {
        return Err(missing());
    }
    crate::documents::config_versions::archive_response(
        &state,
        &f.at.ns,
        cv,
        "configuration version archive not found",
    )
    .await
}

/// `POST /configuration-versions/:id/actions/archive`: an uploaded version that is not
/// its workspace's current one becomes `archived` (no run can use it, its archive is no
/// longer served; the bytes go with the object). The current one is 409, as in TFE.
async fn archive(
    State(state): State<AppState>,
    f: Found<ConfigurationVersion>,
) -> Result<Response, ApiError> {
    // The right to act on a workspace's runs and configurations (`patch`, as runs'
    // actions), which the chart's workspace admin and locker roles hold.
    f.require(
        &state,
        "patch",
        "not authorized to archive this configuration version",
    )
    .await?;
    let at = &f.at;
    let cv = &at.obj;
    let is_current = cv
        .spec
        .workspace
        .as_deref()
        .is_some_and(|ws| is_current(&state.index.read(), &at.ns, ws, cv));
    if is_current {
        return Err(ApiError::conflict(
            "transition not allowed: configuration could not be archived because it is current",
        ));
    }
    let api = write::api::<ConfigurationVersion>(&state, &at.ns);
    let written = write::guarded_status_patch(&api, (**cv).clone(), |c| match c.state() {
        Ok(ConfigurationVersionState::Archived) => Ok(None),
        Ok(ConfigurationVersionState::Uploaded) => Ok(Some(json!({
            "status": ConfigurationVersionState::Archived.as_str(),
        }))),
        _ => Err(ApiError::conflict(format!(
            "transition not allowed: a configuration version that is {} cannot be archived",
            crate::documents::config_versions::status_of(c)
        ))),
    })
    .await?;
    write::wait_seen(&state, &written).await;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// The attributes of a configuration version request (the body may be empty).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct CvAttributes {
    auto_queue_runs: Option<bool>,
    speculative: Option<bool>,
    #[serde(default)]
    provisional: bool,
}

impl Typed for CvAttributes {
    const TYPE: &'static str = "configuration-versions";
}

async fn create(
    State(state): State<AppState>,
    f: Found<Workspace>,
    headers: HeaderMap,
    JsonApi(doc): JsonApi<Option<Document<CvAttributes>>>,
) -> Result<Doc, ApiError> {
    let ws = &f.at;
    state
        .require_or_403(
            &f.caller,
            &Check::new("create", "configurationversions", &ws.ns, None),
            "not authorized to upload configuration versions",
        )
        .await?;
    let attrs = match doc {
        Some(d) => d.checked()?.attributes,
        None => CvAttributes::default(),
    };
    let id = new_id(IdKind::ConfigurationVersion);
    let base = ws.owned_meta(&id, &[(LABEL_WORKSPACE_ID, ws.id())]);
    let (token, metadata) = pending_meta(&state, base)?;
    let cv = ConfigurationVersion {
        metadata,
        spec: ConfigurationVersionSpec {
            ingress_attributes: None,
            module: None,
            workspace: Some(ws.object_name()),
            auto_queue_runs: attrs.auto_queue_runs.unwrap_or(true),
            speculative: attrs.speculative.unwrap_or(false),
            source: if headers
                .get(terrace_crds::testrun::HEADER_TERRAFORM_INTEGRATION)
                .is_some_and(|v| v.as_bytes() == b"cloud")
            {
                "terraform+cloud"
            } else {
                "tfe-api"
            }
            .to_owned(),
            provisional: attrs.provisional,
        },
        status: None,
    };
    create_pending(&state, &headers, &cv, &id, &token).await
}

/// `GET /configuration-versions/:id/ingress-attributes`: the commit a version from a
/// repository was fetched from; 404 for an upload.
async fn ingress_attributes(f: Found<ConfigurationVersion>) -> Result<Doc, ApiError> {
    crate::documents::config_versions::render_ingress(&f.at.obj)
        .map(Doc::ok)
        .ok_or_else(|| ApiError::not_found("the configuration version has no ingress attributes"))
}

async fn list(
    State(state): State<AppState>,
    f: Found<Workspace>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let page = q.page()?;
    let ws = &f.at;
    let object = ws.object_name();
    let mut cvs: Vec<Arc<ConfigurationVersion>> = state
        .listable::<ConfigurationVersion>(&f.caller, &ws.org)
        .await?
        .into_iter()
        .filter(|c| c.spec.workspace.as_deref() == Some(object.as_str()))
        .collect();
    cvs.sort_by(|a, b| by_creation(b.as_ref(), a.as_ref()));
    let base = format!("/api/v2/workspaces/{}/configuration-versions", ws.id());
    Ok(crate::render::list(&base, page, &cvs, |c| render(c, None)))
}

/// Whether `cv` is current in workspace object `ws`: the one the workspace shows, or the
/// one a run without a configuration would use.
fn is_current(idx: &crate::index::Inner, ns: &str, ws: &str, cv: &ConfigurationVersion) -> bool {
    let same = |c: &std::sync::Arc<ConfigurationVersion>| c.metadata.uid == cv.metadata.uid;
    idx.current_configuration_version(ns, ws).is_some_and(same)
        || idx.newest_configuration_version(ns, ws).is_some_and(same)
}
