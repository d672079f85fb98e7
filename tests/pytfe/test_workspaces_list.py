"""B3: list workspaces with paging, search, tag filters, sort, project and run filters.

Every test has its own organization, so the expected sets are exact. pytfe pages by
itself (page[size]=100 unless given, following meta.pagination.next-page); the raw
client checks the paging document itself.
"""

from __future__ import annotations

import pytest
from pytfe.errors import NotFound
from pytfe.models import (
    Project,
    ProjectCreateOptions,
    Tag,
    TagBinding,
    WorkspaceAddTagsOptions,
    WorkspaceCreateOptions,
    WorkspaceIncludeOpt,
    WorkspaceListOptions,
)

from _support import names

pytestmark = pytest.mark.workspaces


def _create(tfe, org, *ws_names, **options):
    return [tfe.workspaces.create(org, WorkspaceCreateOptions(name=n, **options)) for n in ws_names]


def _listed(tfe, org, **options) -> set[str]:
    listed = names(tfe.workspaces.list(org, WorkspaceListOptions(**options)))
    assert len(listed) == len(set(listed)), f"duplicates in {listed}"
    return set(listed)


# --- paging ------------------------------------------------------------------------------

def test_paging_with_page_size(tfe, raw, org):
    """SPEC B3 / DESIGN §5: page[number]/page[size] with meta.pagination and links."""
    created = {w.name for w in _create(tfe, org, *(f"page-{i}" for i in range(5)))}

    seen: list[str] = []
    expected_meta = [
        (1, None, 2),
        (2, 1, 3),
        (3, 2, None),
    ]
    for number, prev_page, next_page in expected_meta:
        resp = raw.list_workspaces(org, {"page[number]": number, "page[size]": 2})
        assert resp.status == 200
        data = resp.json["data"]
        assert len(data) == (1 if number == 3 else 2)
        seen += names(data)
        pagination = resp.json["meta"]["pagination"]
        assert pagination["current-page"] == number
        assert pagination["page-size"] == 2
        assert pagination["prev-page"] == prev_page
        assert pagination["next-page"] == next_page
        assert pagination["total-pages"] == 3
        assert pagination["total-count"] == 5
        links = resp.json["links"]
        assert links["self"] and links["first"] and links["last"]
        assert (links.get("next") is None) == (next_page is None)
        assert (links.get("prev") is None) == (prev_page is None)
    assert sorted(seen) == sorted(created)

    # pytfe follows next-page through all three pages.
    assert _listed(tfe, org, page_size=2) == created


def test_default_page_size_is_20(tfe, raw, org):
    """SPEC B3: page[size] omitted -> 20 per page; page[number] omitted -> first page."""
    created = {w.name for w in _create(tfe, org, *(f"many-{i:02d}" for i in range(21)))}
    resp = raw.list_workspaces(org)
    assert resp.status == 200
    assert len(resp.json["data"]) == 20
    pagination = resp.json["meta"]["pagination"]
    assert pagination["current-page"] == 1
    assert pagination["page-size"] == 20
    assert pagination["total-count"] == 21
    assert pagination["total-pages"] == 2
    assert pagination["next-page"] == 2
    second = raw.list_workspaces(org, {"page[number]": 2})
    assert len(second.json["data"]) == 1
    assert set(names(resp.json["data"])) | set(names(second.json["data"])) == created
    assert _listed(tfe, org) == created


def test_page_size_is_capped_at_100(tfe, raw, org):
    """Issue 3: page[size] has a maximum of 100."""
    _create(tfe, org, "capped")
    resp = raw.list_workspaces(org, {"page[size]": 1000})
    assert resp.status == 200
    assert resp.json["meta"]["pagination"]["page-size"] == 100
    assert names(resp.json["data"]) == ["capped"]


def test_page_past_the_end_is_empty(tfe, raw, org):
    """TFE: a page number past the last page is an empty page, not an error."""
    _create(tfe, org, "only")
    resp = raw.list_workspaces(org, {"page[number]": 7, "page[size]": 20})
    assert resp.status == 200
    assert resp.json["data"] == []
    assert resp.json["meta"]["pagination"]["total-count"] == 1


def test_empty_organization_lists_nothing(tfe, raw, org):
    """TFE: an organization without workspaces lists `data: []` (a list, never null)."""
    resp = raw.list_workspaces(org)
    assert resp.status == 200
    assert resp.json["data"] == []
    assert resp.json["meta"]["pagination"]["total-count"] == 0
    assert list(tfe.workspaces.list(org)) == []


def test_list_of_unknown_organization_is_404(tfe, org):
    """OpenAPI GET /organizations/{org}/workspaces: 404 organization not found."""
    assert list(tfe.workspaces.list(org)) == []  # the route exists
    with pytest.raises(NotFound):
        list(tfe.workspaces.list("no-such-org-pytfe"))


# --- search ------------------------------------------------------------------------------

def test_search_name_matches_part_of_the_name(tfe, org):
    """SPEC B3: search[name] is a fuzzy (substring) match on the name."""
    _create(tfe, org, "alpha-web", "alpha-db", "beta-web", "gamma")
    assert _listed(tfe, org, search="web") == {"alpha-web", "beta-web"}
    assert _listed(tfe, org, search="alpha") == {"alpha-web", "alpha-db"}
    assert _listed(tfe, org, search="nothing-like-it") == set()


@pytest.mark.parametrize(
    "pattern,expected",
    [
        ("*-web", {"alpha-web", "beta-web"}),
        ("alpha-*", {"alpha-web", "alpha-db"}),
        ("*ha-w*", {"alpha-web"}),
        ("*a*", {"alpha-web", "alpha-db", "beta-web", "gamma"}),
    ],
)
def test_search_wildcard_name(tfe, org, pattern, expected):
    """SPEC B3: search[wildcard-name] with `*` as prefix, suffix or both."""
    _create(tfe, org, "alpha-web", "alpha-db", "beta-web", "gamma")
    assert _listed(tfe, org, wildcard_name=pattern) == expected


def _tag(tfe, ws, *tags):
    tfe.workspaces.add_tags(ws.id, WorkspaceAddTagsOptions(tags=[Tag(name=t) for t in tags]))


def test_search_tags_and_exclude_tags(tfe, org):
    """SPEC B3: search[tags] — all listed tags must match; search[exclude-tags] — any
    listed tag excludes."""
    web, api, dev = _create(tfe, org, "web", "api", "dev")
    _tag(tfe, web, "prod", "frontend")
    _tag(tfe, api, "prod")
    _tag(tfe, dev, "staging")
    assert sorted(tfe.workspaces.read_by_id(web.id).tag_names) == ["frontend", "prod"]

    assert _listed(tfe, org, tags="prod") == {"web", "api"}
    assert _listed(tfe, org, tags="prod,frontend") == {"web"}
    assert _listed(tfe, org, tags="prod,staging") == set()
    assert _listed(tfe, org, exclude_tags="frontend") == {"api", "dev"}
    assert _listed(tfe, org, exclude_tags="frontend,staging") == {"api"}
    assert _listed(tfe, org, tags="prod", exclude_tags="frontend") == {"api"}


def test_filter_tagged_key_value_bindings(tfe, org):
    """SPEC B3: filter[tagged][i][key|value]; several filters combine with AND."""
    tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(
            name="prod-core",
            tag_bindings=[TagBinding(key="env", value="prod"), TagBinding(key="team", value="core")],
        ),
    )
    tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(name="prod-edge", tag_bindings=[TagBinding(key="env", value="prod")]),
    )
    tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(name="dev-core", tag_bindings=[TagBinding(key="env", value="dev"), TagBinding(key="team", value="core")]),
    )
    _create(tfe, org, "untagged")

    assert _listed(tfe, org, tag_bindings=[TagBinding(key="env", value="prod")]) == {"prod-core", "prod-edge"}
    assert _listed(tfe, org, tag_bindings=[TagBinding(key="team")]) == {"prod-core", "dev-core"}
    assert _listed(
        tfe, org, tag_bindings=[TagBinding(key="env", value="prod"), TagBinding(key="team", value="core")]
    ) == {"prod-core"}
    assert _listed(tfe, org, tag_bindings=[TagBinding(key="env", value="qa")]) == set()


# --- sort --------------------------------------------------------------------------------

def test_sort_by_name_and_reverse(tfe, org):
    """SPEC B3: sort=name, and a leading hyphen reverses."""
    _create(tfe, org, "charlie", "alpha", "delta", "bravo")
    asc = names(tfe.workspaces.list(org, WorkspaceListOptions(sort="name")))
    desc = names(tfe.workspaces.list(org, WorkspaceListOptions(sort="-name")))
    assert asc == ["alpha", "bravo", "charlie", "delta"]
    assert desc == ["delta", "charlie", "bravo", "alpha"]


def test_sort_by_name_across_pages(tfe, org):
    """SPEC B3: sorting applies before paging (pytfe walks pages of 2)."""
    _create(tfe, org, "e5", "a1", "d4", "b2", "c3")
    assert names(tfe.workspaces.list(org, WorkspaceListOptions(sort="name", page_size=2))) == [
        "a1", "b2", "c3", "d4", "e5",
    ]


@pytest.mark.parametrize(
    "sort", ["current-run.created-at", "-current-run.created-at", "latest-change-at", "-latest-change-at"]
)
def test_every_documented_sort_key_is_accepted(tfe, raw, org, sort):
    """SPEC B3: sort accepts current-run.created-at and latest-change-at (either direction)."""
    _create(tfe, org, "one", "two", "three")
    resp = raw.list_workspaces(org, {"sort": sort})
    assert resp.status == 200
    assert set(names(resp.json["data"])) == {"one", "two", "three"}


def test_default_order_is_stable(tfe, raw, org):
    """SPEC B3: sort omitted -> arbitrary but stable order (same order on every call)."""
    _create(tfe, org, *(f"stable-{i}" for i in range(6)))
    first = names(raw.list_workspaces(org, {"page[size]": 3}).json["data"])
    again = names(raw.list_workspaces(org, {"page[size]": 3}).json["data"])
    assert first == again
    rest = names(raw.list_workspaces(org, {"page[size]": 3, "page[number]": 2}).json["data"])
    assert len(set(first) | set(rest)) == 6


# --- filters and include ----------------------------------------------------------------

def test_filter_by_project(tfe, org):
    """SPEC B3: filter[project][id] lists only that project's workspaces."""
    blue = tfe.projects.create(org, ProjectCreateOptions(name="blue"))
    green = tfe.projects.create(org, ProjectCreateOptions(name="green"))
    _create(tfe, org, "b1", "b2", project=Project(id=blue.id))
    _create(tfe, org, "g1", project=Project(id=green.id))
    _create(tfe, org, "default-1")
    assert _listed(tfe, org, project_id=blue.id) == {"b1", "b2"}
    assert _listed(tfe, org, project_id=green.id) == {"g1"}


def test_filter_current_run_status_without_runs(tfe, org):
    """SPEC B3: filter[current-run][status] keeps only workspaces whose current run has the
    status; workspaces without runs never match."""
    _create(tfe, org, "no-runs")
    assert _listed(tfe, org, current_run_status="applied") == set()
    assert _listed(tfe, org) == {"no-runs"}


def test_list_include_project_and_organization(tfe, raw, org):
    """SPEC include: list accepts include; included objects are in `included` and pytfe
    hydrates them into the models."""
    _create(tfe, org, "inc-1", "inc-2")
    resp = raw.list_workspaces(org, {"include": "project,organization"})
    assert resp.status == 200
    included = resp.json["included"]
    assert {i["type"] for i in included} == {"projects", "organizations"}
    for ws in tfe.workspaces.list(
        org, WorkspaceListOptions(include=[WorkspaceIncludeOpt.PROJECT, WorkspaceIncludeOpt.ORGANIZATION])
    ):
        assert ws.project is not None and ws.project.id.startswith("prj-")
        assert ws.organization is not None and ws.organization.id == org


def test_list_with_every_spec_include_value(tfe, raw, org):
    """SPEC include: every documented include value is accepted on the list endpoint."""
    _create(tfe, org, "inc-all")
    include = [opt for opt in WorkspaceIncludeOpt if opt.value in {
        "current_configuration_version",
        "current_configuration_version.ingress_attributes",
        "current_run",
        "current_run.configuration_version",
        "current_run.configuration_version.ingress_attributes",
        "current_run.plan",
        "locked_by",
        "organization",
        "outputs",
        "project",
        "readme",
    }]
    assert len(include) == 11
    assert names(tfe.workspaces.list(org, WorkspaceListOptions(include=include))) == ["inc-all"]


def test_listed_workspaces_link_their_tag_bindings(tfe, raw, org):
    """Issue 3 / SPEC B3: each listed workspace links to its tag-bindings and
    effective-tag-bindings collections."""
    (ws,) = _create(tfe, org, "linked")
    resp = raw.list_workspaces(org)
    (item,) = resp.json["data"]
    rels = item["relationships"]
    assert rels["tag-bindings"]["links"]["related"] == f"/api/v2/workspaces/{ws.id}/tag-bindings"
    assert (
        rels["effective-tag-bindings"]["links"]["related"]
        == f"/api/v2/workspaces/{ws.id}/effective-tag-bindings"
    )


def test_listed_and_shown_documents_agree(tfe, raw, org):
    """TFE: a workspace in a list has the same attributes as GET shows."""
    (ws,) = _create(tfe, org, "agree", description="same everywhere")
    (listed,) = raw.list_workspaces(org).json["data"]
    shown = raw.request("GET", f"/api/v2/workspaces/{ws.id}").json["data"]
    assert listed["id"] == shown["id"]
    assert listed["attributes"] == shown["attributes"]
