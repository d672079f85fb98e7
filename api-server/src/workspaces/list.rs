//! B3: listing an organization's workspaces from the index, with SPEC.md's search, filter,
//! sort and paging parameters.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kube::ResourceExt;
use serde_json::{Value, json};
use terrace_crds::Workspace;
use terrace_crds::constants::LABEL_ID;

use super::{Located, included, render_located};
use crate::auth::{Caller, Check};
use crate::index::Inner;
use crate::jsonapi::{Doc, QueryParams, page_slice, pagination};
use crate::orgs::visible_org;
use crate::{ApiError, AppState};

/// Sort orders of SPEC.md B3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    Name,
    CurrentRunCreatedAt,
    LatestChangeAt,
}

/// Parsed list parameters.
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    pub search_name: Option<String>,
    pub wildcard: Option<String>,
    pub tags: Vec<String>,
    pub exclude_tags: Vec<String>,
    pub project_id: Option<String>,
    pub current_run_status: Option<String>,
    /// (key, value) pairs of `filter[tagged][i]`.
    pub tagged: Vec<(Option<String>, Option<String>)>,
    pub sort: Option<(Sort, bool)>,
}

fn csv(v: Option<&str>) -> Vec<String> {
    v.map(|s| {
        s.split(',')
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

impl ListFilter {
    pub fn parse(q: &QueryParams) -> Result<ListFilter, ApiError> {
        let sort = match q.get("sort").filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => {
                let (desc, key) = s.strip_prefix('-').map_or((false, s), |k| (true, k));
                let sort = match key {
                    "name" => Sort::Name,
                    "current-run.created-at" => Sort::CurrentRunCreatedAt,
                    "latest-change-at" => Sort::LatestChangeAt,
                    other => {
                        return Err(ApiError::BadRequest {
                            detail: format!(
                                "unsupported sort {other:?}; use name, current-run.created-at or latest-change-at"
                            ),
                            parameter: Some("sort".into()),
                        });
                    }
                };
                Some((sort, desc))
            }
        };
        let mut tagged: Vec<(usize, Option<String>, Option<String>)> = Vec::new();
        for (k, v) in &q.0 {
            let Some(rest) = k.strip_prefix("filter[tagged][") else {
                continue;
            };
            let Some((i, field)) = rest.split_once("][") else {
                continue;
            };
            let Ok(i) = i.parse::<usize>() else {
                return Err(ApiError::BadRequest {
                    detail: format!("bad filter index in {k}"),
                    parameter: Some(k.clone()),
                });
            };
            let entry = match tagged.iter_mut().find(|(j, _, _)| *j == i) {
                Some(e) => e,
                None => {
                    tagged.push((i, None, None));
                    tagged
                        .last_mut()
                        .ok_or_else(|| ApiError::Internal("tag filter".into()))?
                }
            };
            match field.trim_end_matches(']') {
                "key" => entry.1 = Some(v.clone()),
                "value" => entry.2 = Some(v.clone()),
                _ => {}
            }
        }
        tagged.sort_by_key(|(i, _, _)| *i);
        Ok(ListFilter {
            search_name: q
                .get("search[name]")
                .filter(|s| !s.is_empty())
                .map(str::to_ascii_lowercase),
            wildcard: q
                .get("search[wildcard-name]")
                .filter(|s| !s.is_empty())
                .map(str::to_ascii_lowercase),
            tags: csv(q.get("search[tags]")),
            exclude_tags: csv(q.get("search[exclude-tags]")),
            project_id: q
                .get("filter[project][id]")
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            current_run_status: q
                .get("filter[current-run][status]")
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            tagged: tagged.into_iter().map(|(_, k, v)| (k, v)).collect(),
            sort,
        })
    }
}

/// `*x` (suffix), `x*` (prefix), `*x*` (contains), `x` (exact), case-insensitive.
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    let starts = pattern.starts_with('*');
    let ends = pattern.ends_with('*') && pattern.len() > 1;
    let core = pattern.trim_matches('*');
    match (starts, ends) {
        (true, true) => name.contains(core),
        (true, false) => name.ends_with(core),
        (false, true) => name.starts_with(core),
        (false, false) => name == core,
    }
}

/// The effective tag bindings of a workspace: its own, plus its project's unless overridden.
pub fn effective_bindings(idx: &Inner, ws: &Workspace) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = ws
        .spec
        .tag_bindings
        .iter()
        .map(|b| (b.key.clone(), b.value.clone()))
        .collect();
    if let Some(p) = idx.project_of(ws) {
        for b in &p.spec.tag_bindings {
            if !out.iter().any(|(k, _)| *k == b.key) {
                out.push((b.key.clone(), b.value.clone()));
            }
        }
    }
    out
}

/// The workspaces of namespace `ns` matching `f`, in the requested order.
pub fn select(idx: &Inner, ns: &str, f: &ListFilter) -> Vec<Arc<Workspace>> {
    let Some(nsidx) = idx.workspaces_in(ns) else {
        return Vec::new();
    };
    // Narrow by the rarest required tag first when it is much smaller than the namespace.
    let tag_sets: Option<Vec<&HashSet<String>>> =
        f.tags.iter().map(|t| nsidx.with_tag(t)).collect();
    let Some(tag_sets) = tag_sets else {
        return Vec::new();
    };
    let project_uid_filter = f
        .project_id
        .as_ref()
        .map(|pid| idx.project(pid).map(|p| p.name_any()));
    let default_project = idx.default_project(ns).map(|p| p.name_any());
    let keep = |w: &Workspace| -> bool {
        if w.labels().get(LABEL_ID).is_none() {
            return false;
        }
        let name = w.spec.name.to_ascii_lowercase();
        if f.search_name
            .as_ref()
            .is_some_and(|s| !name.contains(s.as_str()))
        {
            return false;
        }
        if f.wildcard
            .as_ref()
            .is_some_and(|p| !wildcard_match(p, &name))
        {
            return false;
        }
        let uid = w.metadata.uid.clone().unwrap_or_default();
        if !tag_sets.iter().all(|s| s.contains(&uid)) {
            return false;
        }
        if f.exclude_tags
            .iter()
            .any(|t| nsidx.with_tag(t).is_some_and(|s| s.contains(&uid)))
        {
            return false;
        }
        if let Some(target) = &project_uid_filter {
            let project = w
                .spec
                .project
                .clone()
                .filter(|p| !p.is_empty())
                .or_else(|| default_project.clone());
            if target.is_none() || project != *target {
                return false;
            }
        }
        if f.current_run_status.is_some() {
            // No workspace has runs yet, so none has a current run in any status.
            return false;
        }
        if !f.tagged.is_empty() {
            let eff = effective_bindings(idx, w);
            let all = f.tagged.iter().all(|(k, v)| {
                eff.iter().any(|(bk, bv)| {
                    k.as_ref().is_none_or(|k| k == bk) && v.as_ref().is_none_or(|v| v == bv)
                })
            });
            if !all {
                return false;
            }
        }
        true
    };
    let smallest = tag_sets.iter().min_by_key(|s| s.len());
    let mut out: Vec<Arc<Workspace>> = match smallest {
        Some(set) if set.len() * 8 < nsidx.len() => {
            let mut v: Vec<Arc<Workspace>> = set
                .iter()
                .filter_map(|uid| idx.workspace_by_uid(uid))
                .filter(|w| keep(w))
                .cloned()
                .collect();
            v.sort_by(|a, b| {
                (a.spec.name.to_ascii_lowercase(), &a.metadata.uid)
                    .cmp(&(b.spec.name.to_ascii_lowercase(), &b.metadata.uid))
            });
            v
        }
        _ => nsidx
            .uids_by_name()
            .filter_map(|uid| idx.workspace_by_uid(uid))
            .filter(|w| keep(w))
            .cloned()
            .collect(),
    };
    match f.sort {
        None | Some((Sort::Name, false)) | Some((Sort::CurrentRunCreatedAt, false)) => {}
        Some((Sort::Name, true)) | Some((Sort::CurrentRunCreatedAt, true)) => out.reverse(),
        Some((Sort::LatestChangeAt, desc)) => {
            let key = |w: &Arc<Workspace>| {
                w.status
                    .as_ref()
                    .and_then(|s| s.latest_change_at.clone())
                    .unwrap_or_else(|| {
                        w.metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| t.0.to_string())
                            .unwrap_or_default()
                    })
            };
            out.sort_by_cached_key(key);
            if desc {
                out.reverse();
            }
        }
    }
    out
}

pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(org): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let org = visible_org(&state, &caller, &org).await?;
    let ns = org.target_namespace().to_owned();
    let q = QueryParams::parse(raw.as_deref());
    let page = q.page()?;
    let filter = ListFilter::parse(&q)?;
    let may_list = state
        .auth
        .allowed(&caller, &Check::new("list", "workspaces", &ns, None))
        .await?;
    let selected = if may_list {
        select(&state.index.read(), &ns, &filter)
    } else {
        Vec::new()
    };
    let total = selected.len();
    let located: Vec<Located> = page_slice(&selected, page)
        .iter()
        .map(|ws| Located {
            ws: ws.clone(),
            org: org.clone(),
            ns: ns.clone(),
        })
        .collect();
    let mut data = Vec::with_capacity(located.len());
    for l in &located {
        data.push(render_located(&state, &caller, l).await?);
    }
    let base = format!("/api/v2/organizations/{}/workspaces", org.tfe_name());
    let (meta, links) = pagination(&base, page, total);
    let mut doc = json!({"data": data, "links": links, "meta": meta});
    let refs: Vec<&Located> = located.iter().collect();
    let inc = included(&state, &refs, &q.includes());
    if !inc.is_empty() {
        doc["included"] = Value::Array(inc);
    }
    Ok(Doc(StatusCode::OK, doc).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*-prod", "net-prod"));
        assert!(!wildcard_match("*-prod", "net-prod-2"));
        assert!(wildcard_match("net*", "net-prod"));
        assert!(wildcard_match("*prod*", "a-prod-b"));
        assert!(wildcard_match("exact", "exact"));
        assert!(!wildcard_match("exact", "exactly"));
    }

    #[test]
    fn filters_parse() {
        let q = QueryParams::parse(Some(
            "search%5Btags%5D=A,b&filter%5Btagged%5D%5B0%5D%5Bkey%5D=env&filter%5Btagged%5D%5B0%5D%5Bvalue%5D=prod&filter%5Btagged%5D%5B1%5D%5Bkey%5D=team&sort=-name",
        ));
        let f = ListFilter::parse(&q).expect("parse");
        assert_eq!(f.tags, ["a", "b"]);
        assert_eq!(
            f.tagged,
            [
                (Some("env".into()), Some("prod".into())),
                (Some("team".into()), None)
            ]
        );
        assert_eq!(f.sort, Some((Sort::Name, true)));
        assert!(ListFilter::parse(&QueryParams::parse(Some("sort=size"))).is_err());
    }
}
