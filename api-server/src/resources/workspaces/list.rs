//! B3: listing an organization's workspaces from the index, with SPEC.md's search, filter,
//! sort and paging parameters.

use std::collections::BTreeSet;
use std::sync::Arc;

use terrace_crds::Workspace;
use terrace_crds::rules::Page;

use super::{INCLUDES, Ws, included, rendered_data, with_included_linkage};
use crate::index::{Inner, NameKey, NameMatch};
use crate::prelude::*;
use crate::query::TagFilter;
use crate::render::pagination;

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
    /// `filter[tagged][i]`.
    pub tagged: Vec<TagFilter>,
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
        let sort = match q.non_empty("sort") {
            None => None,
            Some(s) => {
                let (desc, key) = s.strip_prefix('-').map_or((false, s), |k| (true, k));
                let sort = match key {
                    "name" => Sort::Name,
                    "current-run.created-at" => Sort::CurrentRunCreatedAt,
                    "latest-change-at" => Sort::LatestChangeAt,
                    other => {
                        return Err(ApiError::bad_parameter(
                            "sort",
                            format!(
                                "unsupported sort {other:?}; use name, current-run.created-at or latest-change-at"
                            ),
                        ));
                    }
                };
                Some((sort, desc))
            }
        };
        let tagged = q.tagged()?;
        Ok(ListFilter {
            search_name: q.non_empty("search[name]").map(str::to_ascii_lowercase),
            wildcard: q
                .non_empty("search[wildcard-name]")
                .map(str::to_ascii_lowercase),
            tags: csv(q.get("search[tags]")),
            exclude_tags: csv(q.get("search[exclude-tags]")),
            project_id: q.non_empty("filter[project][id]").map(str::to_owned),
            current_run_status: q
                .non_empty("filter[current-run][status]")
                .map(str::to_owned),
            tagged,
            sort,
        })
    }
}

/// `*x` (suffix), `x*` (prefix), `*x*` (contains), `x` (exact).
pub fn wildcard(pattern: &str) -> NameMatch<'_> {
    let starts = pattern.starts_with('*');
    let ends = pattern.ends_with('*') && pattern.len() > 1;
    let core = pattern.trim_matches('*');
    match (starts, ends) {
        (true, true) => NameMatch::Contains(core),
        (true, false) => NameMatch::Suffix(core),
        (false, true) => NameMatch::Prefix(core),
        (false, false) => NameMatch::Exact(core),
    }
}

/// Whether a (lowercased) name matches a (lowercased) wildcard pattern.
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    wildcard(pattern).matches(name)
}

/// Where a list's candidates come from: a name-ordered set of the index, or the matches
/// of a name search (in name order).
enum Candidates<'a> {
    Set(&'a BTreeSet<NameKey>),
    Named(Vec<&'a NameKey>),
}

impl<'a> Candidates<'a> {
    fn len(&self) -> usize {
        match self {
            Candidates::Set(s) => s.len(),
            Candidates::Named(v) => v.len(),
        }
    }
    fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = &'a NameKey> + '_> {
        match self {
            Candidates::Set(s) => Box::new(s.iter()),
            Candidates::Named(v) => Box::new(v.iter().copied()),
        }
    }
}

/// The effective tag bindings of a workspace as (key, value): its own, plus its
/// project's unless overridden.
pub fn effective_bindings(idx: &Inner, ws: &Workspace) -> Vec<(String, String)> {
    crate::documents::effective_tag_bindings_in(idx, ws)
        .into_iter()
        .map(|b| (b.key, b.value))
        .collect()
}

/// The workspaces of namespace `ns` matching `f`, in the requested order: the total count
/// and the workspaces on `page`.
///
/// Candidates come from a name-ordered index (the rarest required tag's, else the
/// namespace's), so a name-sorted page needs no sort and no copy of the matches: entries
/// are counted in place and only the page is cloned out.
pub fn select(idx: &Inner, ns: &str, f: &ListFilter, page: Page) -> (usize, Vec<Arc<Workspace>>) {
    let Some(nsidx) = idx.workspaces_in(ns) else {
        return (0, Vec::new());
    };
    let tag_sets: Option<Vec<&BTreeSet<NameKey>>> =
        f.tags.iter().map(|t| nsidx.with_tag(t)).collect();
    let Some(mut tag_sets) = tag_sets else {
        return (0, Vec::new());
    };
    tag_sets.sort_by_key(|s| s.len());
    // A name search narrower than the rarest tag (or than all) supplies the candidates
    // from the name indexes; then every tag is checked per candidate.
    let smallest_set = tag_sets.first().map_or(nsidx.len(), |s| s.len());
    let named = [
        f.search_name.as_deref().map(NameMatch::Contains),
        f.wildcard.as_deref().map(wildcard),
    ]
    .into_iter()
    .flatten()
    .filter_map(|m| nsidx.matching(m))
    .min_by_key(Vec::len)
    .filter(|v| v.len() < smallest_set);
    let (candidates, rest): (Candidates<'_>, &[&BTreeSet<NameKey>]) =
        match (named, tag_sets.split_first()) {
            (Some(named), _) => (Candidates::Named(named), &tag_sets),
            (None, Some((first, rest))) => (Candidates::Set(first), rest),
            (None, None) => (Candidates::Set(nsidx.entries()), &[]),
        };
    let exclude: Vec<&BTreeSet<NameKey>> = f
        .exclude_tags
        .iter()
        .filter_map(|t| nsidx.with_tag(t))
        .collect();
    let project_filter = f
        .project_id
        .as_ref()
        .map(|pid| idx.project(pid).map(|p| p.name_any()));
    let default_project = idx.default_project(ns).map(|p| p.name_any());
    let by_run =
        f.current_run_status.is_some() || matches!(f.sort, Some((Sort::CurrentRunCreatedAt, _)));
    let wanted: Vec<&str> = f
        .current_run_status
        .as_deref()
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let needs_object = project_filter.is_some() || !f.tagged.is_empty() || by_run;
    let keep = |key: &NameKey| -> bool {
        let name: &str = &key.0;
        if f.search_name
            .as_ref()
            .is_some_and(|s| !name.contains(s.as_str()))
        {
            return false;
        }
        if f.wildcard
            .as_ref()
            .is_some_and(|p| !wildcard_match(p, name))
        {
            return false;
        }
        if !rest.iter().all(|s| s.contains(key)) || exclude.iter().any(|s| s.contains(key)) {
            return false;
        }
        if !needs_object {
            return true;
        }
        let Some(w) = idx.workspace_by_uid(&key.1) else {
            return false;
        };
        if f.current_run_status.is_some() {
            let status = idx
                .current_run(ns, &w.name_any())
                .map(|r| crate::documents::runs::state_of(r).as_str());
            if !status.is_some_and(|s| wanted.contains(&s)) {
                return false;
            }
        }
        if let Some(target) = &project_filter {
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
        if !f.tagged.is_empty() {
            let eff = effective_bindings(idx, w);
            if !TagFilter::all_match(&f.tagged, &eff) {
                return false;
            }
        }
        true
    };
    let start = (page.number as usize - 1).saturating_mul(page.size as usize);
    let take = page.size as usize;
    let resolve = |k: &NameKey| idx.workspace_by_uid(&k.1).cloned();
    let kept = || -> Vec<Arc<Workspace>> {
        candidates
            .iter()
            .filter(|k| keep(k))
            .filter_map(resolve)
            .collect()
    };
    match f.sort {
        // Workspaces without a run come last in both directions (TFE's order), by name.
        Some((Sort::CurrentRunCreatedAt, desc)) => {
            let mut all = kept();
            all.sort_by_cached_key(|w| {
                let created = idx
                    .current_run(ns, &w.name_any())
                    .and_then(|r| r.metadata.creation_timestamp.clone());
                (created.is_none(), created, w.spec.name.to_ascii_lowercase())
            });
            if desc {
                let with_runs = all
                    .iter()
                    .take_while(|w| idx.current_run(ns, &w.name_any()).is_some())
                    .count();
                all[..with_runs].reverse();
            }
            let total = all.len();
            (total, all.into_iter().skip(start).take(take).collect())
        }
        // Omitted: the most recently changed first, then by name (SPEC B3's "arbitrary
        // but stable" order; go-tfe expects a workspace whose run just applied first).
        None => sorted_page(kept(), false, start, take, |w| {
            let (changed, name, uid) = latest_change(idx, w);
            (std::cmp::Reverse(changed), name, uid)
        }),
        Some((Sort::LatestChangeAt, desc)) => {
            sorted_page(kept(), desc, start, take, |w| latest_change(idx, w))
        }
        sort => {
            let desc = matches!(sort, Some((_, true)));
            let mut total = 0usize;
            let mut out = Vec::with_capacity(take);
            let mut visit = |k: &NameKey| {
                if keep(k) {
                    if total >= start
                        && out.len() < take
                        && let Some(w) = resolve(k)
                    {
                        out.push(w);
                    }
                    total += 1;
                }
            };
            let unfiltered = rest.is_empty()
                && exclude.is_empty()
                && f.search_name.is_none()
                && f.wildcard.is_none()
                && f.current_run_status.is_none()
                && !needs_object;
            if unfiltered {
                // Every candidate matches: count from the index, visit only the page.
                total = candidates.len();
                let page_keys: Vec<&NameKey> = if desc {
                    candidates.iter().rev().skip(start).take(take).collect()
                } else {
                    candidates.iter().skip(start).take(take).collect()
                };
                return (total, page_keys.into_iter().filter_map(resolve).collect());
            }
            if desc {
                candidates.iter().rev().for_each(&mut visit);
            } else {
                candidates.iter().for_each(&mut visit);
            }
            (total, out)
        }
    }
}

/// The filters B3 supports.
const FILTERS: &[&str] = &[
    "filter[project][id]",
    "filter[current-run][status]",
    "filter[tagged]",
];

pub async fn list(
    State(state): State<AppState>,
    o: VisibleOrg,
    q: QueryParams,
) -> Result<Response, ApiError> {
    let (caller, org) = (&o.caller, &o.org);
    let ns = o.ns().to_owned();
    let page = q.page()?;
    q.supported_filters(FILTERS)?;
    let includes = q.includes(INCLUDES)?;
    let filter = ListFilter::parse(&q)?;
    let may_list = state
        .allowed(caller, &o.check("list", "workspaces"))
        .await?;
    let (total, selected) = if may_list {
        select(&state.index.read(), &ns, &filter, page)
    } else {
        (0, Vec::new())
    };
    let located: Vec<Ws> = selected
        .into_iter()
        .map(|obj| Located {
            obj,
            org: org.clone(),
            ns: ns.clone(),
        })
        .collect();
    let base = format!("/api/v2/organizations/{}/workspaces", org.tfe_name());
    let (meta, links) = pagination(&base, page, total);
    let refs: Vec<&Ws> = located.iter().collect();
    let inc = included(&state, caller, &refs, &includes).await?;
    // {"data":[...cached items...],"links":…,"meta":…[,"included":…]}
    let mut body: Vec<u8> = Vec::with_capacity(located.len() * 4096);
    body.extend_from_slice(b"{\"data\":[");
    for (i, l) in located.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        let data = rendered_data(&state, caller, l).await?;
        body.extend_from_slice(&with_included_linkage(&state, l, data, &includes)?);
    }
    body.extend_from_slice(b"],\"links\":");
    let ser = |body: &mut Vec<u8>, v: &Value| {
        serde_json::to_writer(body, v).map_err(|e| ApiError::internal("rendering a list", e))
    };
    ser(&mut body, &links)?;
    body.extend_from_slice(b",\"meta\":");
    ser(&mut body, &meta)?;
    if inc.any() {
        body.extend_from_slice(b",\"included\":");
        serde_json::to_writer(&mut body, inc.documents())
            .map_err(|e| ApiError::internal("rendering a list", e))?;
    }
    body.push(b'}');
    Ok(crate::render::DocBytes(StatusCode::OK, body.into()).into_response())
}

/// When workspace `w` last changed, as its `latest-change-at` says (the latest of its
/// status's time and its current state version's, else its creation, to the millisecond
/// where the API created it), then its name and uid: a total order.
fn latest_change(idx: &Inner, w: &Arc<Workspace>) -> (Option<jiff::Timestamp>, String, String) {
    let read = |t: Option<&str>| t.and_then(|t| t.parse::<jiff::Timestamp>().ok());
    let changed = [
        read(
            w.status
                .as_ref()
                .and_then(|s| s.latest_change_at.as_deref()),
        ),
        read(
            idx.current_state_version(w)
                .and_then(|v| v.status.as_ref())
                .and_then(|s| s.finalized_at.as_deref()),
        ),
    ]
    .into_iter()
    .flatten()
    .max()
    .or_else(|| read(crate::render::created_at_ms(w.as_ref())))
    .or_else(|| w.metadata.creation_timestamp.as_ref().map(|t| t.0));
    (
        changed,
        w.spec.name.to_ascii_lowercase(),
        w.metadata.uid.clone().unwrap_or_default(),
    )
}

/// The page from `start` (at most `take`) of `all` sorted by `key` (descending with
/// `desc`), and how many there are.
fn sorted_page<K: Ord>(
    mut all: Vec<Arc<Workspace>>,
    desc: bool,
    start: usize,
    take: usize,
    key: impl FnMut(&Arc<Workspace>) -> K,
) -> (usize, Vec<Arc<Workspace>>) {
    all.sort_by_cached_key(key);
    if desc {
        all.reverse();
    }
    let total = all.len();
    (total, all.into_iter().skip(start).take(take).collect())
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

    /// Name searches read the name indexes: every combination of a search, a wildcard,
    /// a tag and a sort direction selects exactly what a scan of every workspace would,
    /// in the same order, with the same total.
    #[test]
    fn name_searches_select_what_a_scan_selects() {
        use kube::api::ObjectMeta;
        use std::collections::BTreeMap;
        use terrace_crds::WorkspaceSpec;
        use terrace_crds::constants::LABEL_ID;

        let index = crate::index::Index::default();
        let words = ["net", "web", "prod", "Prod-db", "a_b", "x"];
        let mut all = Vec::new();
        for i in 0..300usize {
            let name = format!(
                "{}-{}{}",
                words[i % 6],
                words[(i / 6) % 6],
                if i % 7 == 0 {
                    String::new()
                } else {
                    i.to_string()
                }
            );
            let mut spec = WorkspaceSpec::default_for_create();
            spec.name = name.clone();
            spec.tags = if i % 3 == 0 { vec!["t".into()] } else { vec![] };
            index.insert(Workspace {
                metadata: ObjectMeta {
                    name: Some(format!("w{i}")),
                    namespace: Some("ns".into()),
                    uid: Some(format!("uid-{i:03}")),
                    labels: Some(BTreeMap::from([(
                        LABEL_ID.to_owned(),
                        format!("ws-{i:016}"),
                    )])),
                    ..Default::default()
                },
                spec,
                status: None,
            });
            all.push((name.to_ascii_lowercase(), format!("uid-{i:03}"), i % 3 == 0));
        }
        all.sort();
        let idx = index.read();
        let searches = [None, Some("prod"), Some("rod-d"), Some("b1"), Some("zzz")];
        let wildcards = [
            None,
            Some("*prod*"),
            Some("web*"),
            Some("*db"),
            Some("*1"),
            Some("x-x"),
            Some("*"),
        ];
        for search in searches {
            for wc in wildcards {
                for tagged in [false, true] {
                    for desc in [false, true] {
                        let f = ListFilter {
                            search_name: search.map(str::to_owned),
                            wildcard: wc.map(str::to_owned),
                            tags: if tagged { vec!["t".into()] } else { vec![] },
                            sort: Some((Sort::Name, desc)),
                            ..Default::default()
                        };
                        let mut expected: Vec<&str> = all
                            .iter()
                            .filter(|(n, _, t)| {
                                search.is_none_or(|s| n.contains(s))
                                    && wc.is_none_or(|p| wildcard_match(p, n))
                                    && (!tagged || *t)
                            })
                            .map(|(_, uid, _)| uid.as_str())
                            .collect();
                        if desc {
                            expected.reverse();
                        }
                        let page = Page { number: 2, size: 7 };
                        let (total, got) = select(&idx, "ns", &f, page);
                        let got: Vec<&str> = got
                            .iter()
                            .filter_map(|w| w.metadata.uid.as_deref())
                            .collect();
                        let want: Vec<&str> = expected.iter().skip(7).take(7).copied().collect();
                        assert_eq!(
                            (total, got),
                            (expected.len(), want),
                            "{search:?} {wc:?} tagged={tagged} desc={desc}"
                        );
                    }
                }
            }
        }
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
                TagFilter {
                    key: Some("env".into()),
                    value: Some("prod".into())
                },
                TagFilter {
                    key: Some("team".into()),
                    value: None
                }
            ]
        );
        assert_eq!(f.sort, Some((Sort::Name, true)));
        assert!(ListFilter::parse(&QueryParams::parse(Some("sort=size"))).is_err());
    }

    /// Authorization round trips do not grow with the page for a caller whose rights
    /// cover the namespace: with cold caches (a new caller each time), a page of 20
    /// workspaces with their permission flags costs the SubjectAccessReviews of a page of
    /// 2 (per verb, one by name and one for the whole namespace), and a warm page costs
    /// none (issue 25: 185 for a cold page of 20).
    #[tokio::test]
    async fn reviews_per_page_do_not_grow_with_the_page() {
        use crate::testing::{harness, rule};
        let h = harness(crate::Edition::SelfHosted).await;
        for i in 0..20 {
            h.workspace(
                &format!("ws-ReviewCount{i:07}"),
                &format!("w{i:02}"),
                |_| {},
            )
            .await;
        }
        let rules = vec![rule(&["*"], &["*"])];
        let reviews = || h.state.auth.access_reviews.get();
        let mut cost = Vec::new();
        for size in [2, 20] {
            let token = h.token_with_role(Some(rules.clone())).await;
            let path = format!("/api/v2/organizations/acme/workspaces?page%5Bsize%5D={size}");
            let before = reviews();
            let (st, doc) = h.call_as(&token, "GET", &path, None).await;
            assert_eq!(st, 200, "{doc}");
            assert_eq!(doc["data"].as_array().map(Vec::len), Some(size));
            cost.push(reviews() - before);
            let before = reviews();
            let (st, _) = h.call_as(&token, "GET", &path, None).await;
            assert_eq!(st, 200);
            assert_eq!(reviews() - before, 0, "a warm page reviews nothing");
        }
        assert_eq!(
            cost[0], cost[1],
            "reviews of a cold page of 1 and of 20: {cost:?}"
        );
        assert!(
            cost[1] <= 24,
            "two reviews per permission checked: {cost:?}"
        );
    }

    /// A request costs at most two authorization round trips with cold caches, a
    /// TokenReview and one rules review of the namespace, whatever it renders: a page of
    /// 20 workspaces and a GET, for a reader whose role denies most permission flags
    /// (issue 25: 185 and 12). Warm, none.
    #[tokio::test]
    async fn a_request_costs_at_most_two_authorization_round_trips() {
        use crate::testing::{harness, rule};
        let h = harness(crate::Edition::SelfHosted).await;
        for i in 0..20 {
            h.workspace(&format!("ws-RoundTrip{i:08}"), &format!("w{i:02}"), |_| {})
                .await;
        }
        let auth = &h.state.auth;
        let trips =
            || auth.token_reviews.get() + auth.access_reviews.get() + auth.rules_reviews.get();
        let reader = vec![rule(&["get", "list"], &["workspaces", "projects"])];
        for path in [
            "/api/v2/organizations/acme/workspaces?page%5Bsize%5D=20",
            "/api/v2/workspaces/ws-RoundTrip00000007",
            "/api/v2/organizations/acme/workspaces/w03",
        ] {
            let token = h.token_with_role(Some(reader.clone())).await;
            let before = trips();
            let (st, doc) = h.call_as(&token, "GET", path, None).await;
            assert_eq!(st, 200, "{path}: {doc}");
            assert!(
                trips() - before <= 2,
                "{path}: {} round trips cold",
                trips() - before
            );
            let flags = if doc["data"].is_array() {
                doc["data"][0]["attributes"]["permissions"].clone()
            } else {
                doc["data"]["attributes"]["permissions"].clone()
            };
            assert_eq!(flags["can-update"], false, "{path}: {flags}");
            assert_eq!(flags["can-queue-run"], false, "{path}: {flags}");
            let before = trips();
            let (st, _) = h.call_as(&token, "GET", path, None).await;
            assert_eq!(st, 200);
            assert_eq!(trips() - before, 0, "{path}: warm");
        }
    }
}

#[cfg(test)]
mod current_run_order {
    use crate::testing::{harness, meta};
    use terrace_crds::constants::LABEL_ID;
    use terrace_crds::{Run, RunSpec};

    /// `sort=current-run.created-at`: workspaces without a run come last in both
    /// directions, as TFE lists them (issue 26: they came first).
    #[tokio::test]
    async fn workspaces_without_a_run_come_last_both_ways() {
        let h = harness(crate::Edition::SelfHosted).await;
        for (i, name) in ["idle-a", "busy-old", "busy-new", "idle-b"]
            .iter()
            .enumerate()
        {
            h.workspace(&format!("ws-Order{i:013}"), name, |_| {}).await;
        }
        for (run, ws) in [
            ("run-old", "ws-order0000000000001"),
            ("run-new", "ws-order0000000000002"),
        ] {
            h.create(Run {
                metadata: meta(run, Some(crate::testing::ORG), &[(LABEL_ID, run)]),
                spec: RunSpec {
                    workspace: ws.to_owned(),
                    configuration_version: "cv".into(),
                    ..Default::default()
                },
                status: None,
            })
            .await;
            // Creation times a second apart.
            tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
        }
        h.wait("both runs", |i| {
            i.current_run(crate::testing::ORG, "ws-order0000000000002")
                .is_some()
        })
        .await;
        let names = |doc: &serde_json::Value| -> Vec<String> {
            doc["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|w| w["attributes"]["name"].as_str().map(str::to_owned))
                .collect()
        };
        let base = format!(
            "/api/v2/organizations/{}/workspaces?sort=",
            crate::testing::ORG
        );
        let (st, doc) = h
            .call("GET", &format!("{base}current-run.created-at"), None)
            .await;
        assert_eq!(st, 200, "{doc}");
        assert_eq!(names(&doc), ["busy-old", "busy-new", "idle-a", "idle-b"]);
        let (_, doc) = h
            .call("GET", &format!("{base}-current-run.created-at"), None)
            .await;
        assert_eq!(names(&doc), ["busy-new", "busy-old", "idle-a", "idle-b"]);
    }

    /// Without a sort the most recently changed come first, then the newest (issue 42
    /// §5): go-tfe's TestWorkspacesList applies a run in the first of three workspaces it
    /// made and reads it as `Items[0]`.
    #[tokio::test]
    async fn the_default_order_is_the_latest_change_first() {
        use base64::Engine;
        let h = harness(crate::Edition::SelfHosted).await;
        let org = crate::testing::ORG;
        let mut ids = Vec::new();
        for name in ["b-first", "a-second", "c-third"] {
            let (st, doc) = h
                .call(
                    "POST",
                    &format!("/api/v2/organizations/{org}/workspaces"),
                    Some(serde_json::json!({"data": {"type": "workspaces", "attributes": {"name": name}}})),
                )
                .await;
            assert_eq!(st, 201, "{doc}");
            ids.push(doc["data"]["id"].as_str().unwrap_or_default().to_owned());
        }
        let names = |doc: &serde_json::Value| -> Vec<String> {
            doc["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|w| w["attributes"]["name"].as_str().map(str::to_owned))
                .collect()
        };
        let list = format!("/api/v2/organizations/{org}/workspaces");
        let (_, doc) = h.call("GET", &list, None).await;
        assert_eq!(
            names(&doc),
            ["c-third", "a-second", "b-first"],
            "newest first"
        );
        // A state for the first: it changed last.
        let ws = &ids[0];
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/workspaces/{ws}/actions/lock"),
                Some(serde_json::json!({})),
            )
            .await;
        assert_eq!(st, 200, "{doc}");
        let state = serde_json::to_vec(&serde_json::json!({
            "version": 4, "terraform_version": "1.11.4", "serial": 1, "lineage": "l",
            "outputs": {}, "resources": [],
        }))
        .unwrap_or_default();
        let (st, doc) = h
            .call(
                "POST",
                &format!("/api/v2/workspaces/{ws}/state-versions"),
                Some(
                    serde_json::json!({"data": {"type": "state-versions", "attributes": {
                        "serial": 1, "lineage": "l",
                        "md5": terrace_crds::state::md5_hex(&state),
                        "state": base64::engine::general_purpose::STANDARD.encode(&state),
                    }}}),
                ),
            )
            .await;
        assert_eq!(st, 201, "{doc}");
        let (_, doc) = h
            .call(
                "GET",
                &format!("{list}?include=current_state_version,current_run"),
                None,
            )
            .await;
        assert_eq!(names(&doc), ["b-first", "c-third", "a-second"], "{doc}");
        let (_, doc) = h.call("GET", &format!("{list}?sort=name"), None).await;
        assert_eq!(names(&doc), ["a-second", "b-first", "c-third"]);
    }
}
