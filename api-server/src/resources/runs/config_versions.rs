//! Configuration versions of workspaces: `POST/GET /workspaces/:id/configuration-versions`.
//!
//! The same ConfigurationVersion kind as a module's (with `spec.workspace`), the same
//! one-time upload URL and upload handler (`PUT /api/v2/uploads/v1/object/<token>`), and
//! the same show (`GET /configuration-versions/:id`). `speculative` versions make plan-only
//! runs.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use kube::api::{ObjectMeta, PostParams};
use terrace_crds::constants::{LABEL_ID, LABEL_ORGANIZATION, LABEL_WORKSPACE_ID};
use terrace_crds::ids::{IdKind, new_id, object_name_for_id};
use terrace_crds::resources::ConfigurationVersionSpec;
use terrace_crds::{ConfigurationVersion, ConfigurationVersionState, Workspace};

use crate::capability::{base_url, random_token, sha256_hex};
use crate::documents::config_versions::{
    ANNOTATION_UPLOAD_EXPIRES, ANNOTATION_UPLOAD_SHA256, UPLOAD_PATH, UPLOAD_TTL, render,
};
use crate::prelude::*;
use crate::render::{page_slice, pagination};

pub fn router() -> Router<AppState> {
    Router::new().route(
        "/api/v2/workspaces/{id}/configuration-versions",
        post(create).get(list),
    )
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
    let _ = attrs.provisional;
    let id = new_id(IdKind::ConfigurationVersion);
    let token = random_token();
    let expires = jiff::Timestamp::now()
        .checked_add(UPLOAD_TTL)
        .map_err(|e| ApiError::internal("upload expiry", e))?;
    let cv = ConfigurationVersion {
        metadata: ObjectMeta {
            name: Some(object_name_for_id(&id)),
            namespace: Some(ws.ns.clone()),
            labels: Some(BTreeMap::from([
                (LABEL_ID.to_owned(), id.clone()),
                (LABEL_ORGANIZATION.to_owned(), ws.org.name_any()),
                (LABEL_WORKSPACE_ID.to_owned(), ws.id()),
            ])),
            annotations: Some(BTreeMap::from([
                (
                    ANNOTATION_UPLOAD_SHA256.to_owned(),
                    sha256_hex(token.as_bytes()),
                ),
                (ANNOTATION_UPLOAD_EXPIRES.to_owned(), expires.to_string()),
            ])),
            owner_references: ws.obj.controller_owner_ref(&()).map(|o| vec![o]),
            finalizers: state
                .blobs
                .is_external()
                .then(|| vec![terrace_crds::blobs::FINALIZER.to_owned()]),
            ..Default::default()
        },
        spec: ConfigurationVersionSpec {
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
        },
        status: None,
    };
    let api = write::api::<ConfigurationVersion>(&state, &ws.ns);
    let created = api.create(&PostParams::default(), &cv).await?;
    let created = write::patch_status(
        &api,
        &created.name_any(),
        json!({"id": id, "status": ConfigurationVersionState::Pending.as_str()}),
    )
    .await?;
    write::wait_seen(&state, &created).await;
    let url = format!("{}{UPLOAD_PATH}/{token}", base_url(&state, &headers));
    Ok(Doc::created(render(&created, Some(&url))))
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
    cvs.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
            .then_with(|| b.name_any().cmp(&a.name_any()))
    });
    let data: Vec<Value> = page_slice(&cvs, page)
        .iter()
        .map(|c| render(c, None))
        .collect();
    let (meta, links) = pagination(
        &format!("/api/v2/workspaces/{}/configuration-versions", ws.id()),
        page,
        cvs.len(),
    );
    Ok(Doc(
        StatusCode::OK,
        json!({"data": data, "meta": meta, "links": links}),
    ))
}
