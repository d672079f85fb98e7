//! A workspace's state versions page and a state's download in the web view (docs/ui.md),
//! from the JSON:API documents the signed-in person may read.

use askama::Template;
use axum::extract::Path;
use axum::http::Method;
use axum::response::{IntoResponse, Response};

use super::pages::*;
use super::{Nav, UiError, Visit, render, urlencode};

/// A state version in the list.
pub struct StateRow {
    pub serial: String,
    pub created: String,
    pub outputs: Vec<Pair>,
    pub download: String,
}

#[derive(Template)]
#[template(path = "states.html")]
struct StatesPage {
    nav: Nav,
    ws: String,
    states: Vec<StateRow>,
}

/// `GET /app/:org/workspaces/:ws/states`: the state versions, newest first, with their
/// outputs (sensitive ones masked), and a download for those who may read state.
pub async fn states(
    Visit { ui, s, headers }: Visit,
    Path((org, name)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let ws = workspace_doc(&ui, &s, &headers, &org, &name).await?;
    let can_read_state = ws["data"]["attributes"]["permissions"]["can-read-state-versions"]
        .as_bool()
        .unwrap_or(false);
    let doc = ui
        .get(&s, &headers, &format!(
                "/api/v2/state-versions?filter%5Borganization%5D%5Bname%5D={}&filter%5Bworkspace%5D%5Bname%5D={}&include=outputs&page%5Bsize%5D=20",
                urlencode(&org),
                urlencode(&name)
            ))
        .await?;
    let states = doc["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|sv| {
            let a = &sv["attributes"];
            let outputs = sv["relationships"]["outputs"]["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|o| included(&doc, "state-version-outputs", o["id"].as_str()?))
                .map(|o| masked(o, "name", None))
                .collect();
            StateRow {
                serial: text(&a["serial"]),
                created: when(&a["created-at"]),
                outputs,
                download: if can_read_state {
                    format!(
                        "/app/{}/workspaces/{}/states/{}/download",
                        urlencode(&org),
                        urlencode(&name),
                        urlencode(sv["id"].as_str().unwrap_or_default())
                    )
                } else {
                    String::new()
                },
            }
        })
        .collect();
    Ok(render(&StatesPage {
        nav: Nav::of(&s, &org),
        ws: name,
        states,
    }))
}

/// `GET /app/:org/workspaces/:ws/states/:sv/download`: the state file, for those who may
/// read state (the API's download, refused as it refuses).
pub async fn state_download(
    Visit { ui, s, headers }: Visit,
    Path((org, name, sv)): Path<(String, String, String)>,
) -> Result<Response, UiError> {
    let doc = ui
        .get(
            &s,
            &headers,
            &format!("/api/v2/state-versions/{}", urlencode(&sv)),
        )
        .await?;
    let ws = doc["data"]["relationships"]["workspace"]["data"]["id"]
        .as_str()
        .unwrap_or_default();
    let owner = ui
        .get(&s, &headers, &format!("/api/v2/workspaces/{ws}"))
        .await?;
    if owner["data"]["attributes"]["name"].as_str() != Some(name.as_str())
        || owner["data"]["relationships"]["organization"]["data"]["id"].as_str()
            != Some(org.as_str())
    {
        return Err(UiError::NotFound);
    }
    let (status, bytes) = ui
        .raw(
            Some(&s),
            &headers,
            Method::GET,
            &format!("/api/v2/state-versions/{}/download", urlencode(&sv)),
            None,
        )
        .await?;
    if !status.is_success() {
        return Err(match status.as_u16() {
            403 => UiError::Forbidden("You may not read this workspace's state.".into()),
            _ => UiError::NotFound,
        });
    }
    let file = format!("attachment; filename=\"{name}-{sv}.tfstate\"");
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/json".to_owned(),
            ),
            (axum::http::header::CONTENT_DISPOSITION, file),
        ],
        bytes,
    )
        .into_response())
}
