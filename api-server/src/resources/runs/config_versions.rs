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
use terrace_crds::{ConfigurationVersion, Workspace};

use crate::documents::config_versions::{create_pending, pending_meta, render};
use crate::prelude::*;
use crate::render::{by_creation, page_slice, pagination};

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
    let id = new_id(IdKind::ConfigurationVersion);
    let base = write::owned_meta(&id, ws, &[(LABEL_WORKSPACE_ID, ws.id())]);
    let (token, metadata) = pending_meta(&state, base)?;
    let cv = ConfigurationVersion {
        metadata,
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
            provisional: attrs.provisional,
        },
        status: None,
    };
    create_pending(&state, &headers, &cv, &id, &token).await
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
