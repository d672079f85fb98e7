"""B1 (create) and B4 (show), driven by pytfe.

Each test documents the TFE behaviour it checks; expectations come from SPEC.md area B,
issue 3 and the vendor OpenAPI document, never from terrace's implementation.
"""

from __future__ import annotations

import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import (
    ExecutionMode,
    OrganizationCreateOptions,
    Project,
    ProjectCreateOptions,
    TagBinding,
    WorkspaceCreateOptions,
    WorkspaceIncludeOpt,
    WorkspaceReadOptions,
    WorkspaceSettingOverwrites,
    WorkspaceSource,
)

from _support import unique

pytestmark = pytest.mark.workspaces


def test_create_applies_every_create_default(tfe, org):
    """SPEC B1 table: every attribute omitted on create gets its documented default.

    pytfe sends only `name` (plus the `type`, `vcs-repo: {}` and `setting-overwrites: {}`
    it always adds), so this is the "all defaults" workspace.
    """
    name = unique("defaults")
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))

    assert ws.id.startswith("ws-")
    assert ws.name == name
    assert ws.allow_destroy_plan is True
    assert ws.assessments_enabled in (False, None)  # hosted edition only; never true by default
    assert ws.auto_apply is False
    assert ws.auto_apply_run_trigger is False
    assert ws.auto_destroy_at is None
    assert ws.auto_destroy_activity_duration is None
    assert ws.description in (None, "")
    # No execution-mode given: the organization default (remote for a new organization).
    assert ws.execution_mode == ExecutionMode.REMOTE
    assert ws.operations is True
    assert ws.file_triggers_enabled is True
    assert ws.global_remote_state is False
    assert ws.queue_all_runs is False
    assert ws.source_name is None
    assert ws.source_url is None
    assert ws.speculative_enabled is True
    assert isinstance(ws.terraform_version, str) and ws.terraform_version  # latest release
    assert ws.trigger_patterns == []
    assert ws.trigger_prefixes == []
    assert ws.working_directory in (None, "")
    assert ws.vcs_repo is None  # pytfe's `vcs-repo: {}` means "no repository"
    # Computed attributes of a fresh workspace.
    assert ws.locked is False
    assert ws.resource_count == 0
    assert ws.created_at is not None
    assert ws.tag_names == []
    assert ws.source == WorkspaceSource.API
    for metric in (
        ws.apply_duration_average,
        ws.plan_duration_average,
        ws.policy_check_failures,
        ws.run_failures,
        ws.runs_count,
    ):
        assert metric in (None, 0)
    # Relationships.
    assert ws.organization is not None and ws.organization.id == org
    assert ws.project is not None and ws.project.id.startswith("prj-")
    assert ws.locked_by is None


def test_create_without_project_uses_the_default_project(tfe, org):
    """SPEC B1: project relationship omitted -> the organization's default project."""
    projects = list(tfe.projects.list(org))
    assert len(projects) == 1, "a new organization has exactly its default project"
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("dp")))
    assert ws.project.id == projects[0].id


def test_create_in_a_given_project(tfe, org):
    """SPEC B1: data.relationships.project.data.id places the workspace in that project."""
    project = tfe.projects.create(org, ProjectCreateOptions(name=unique("prj")))
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("inproj"), project=Project(id=project.id))
    )
    assert ws.project.id == project.id
    again = tfe.workspaces.read_by_id_with_options(
        ws.id, WorkspaceReadOptions(include=[WorkspaceIncludeOpt.PROJECT])
    )
    assert again.project.id == project.id
    assert again.project.name == project.name  # hydrated from `included`


def test_create_with_every_writable_attribute_round_trips(tfe, org):
    """SPEC B1: every writable attribute given on create is stored and shown back."""
    name = unique("full")
    opts = WorkspaceCreateOptions(
        name=name,
        allow_destroy_plan=False,
        auto_apply=True,
        auto_apply_run_trigger=True,
        auto_destroy_activity_duration="14d",
        description="made by the pytfe suite",
        execution_mode=ExecutionMode.LOCAL,
        file_triggers_enabled=False,
        global_remote_state=True,
        queue_all_runs=True,
        source_name="pytfe-suite",
        source_url="https://example.com/pytfe-suite",
        speculative_enabled=False,
        trigger_prefixes=["modules/", "shared/"],
        working_directory="infra/prod",
    )
    ws = tfe.workspaces.create(org, opts)
    for shown in (ws, tfe.workspaces.read_by_id(ws.id)):
        assert shown.name == name
        assert shown.allow_destroy_plan is False
        assert shown.auto_apply is True
        assert shown.auto_apply_run_trigger is True
        assert shown.auto_destroy_activity_duration == "14d"
        assert shown.description == "made by the pytfe suite"
        assert shown.execution_mode == ExecutionMode.LOCAL
        assert shown.operations is False  # local execution = state storage only
        assert shown.file_triggers_enabled is False
        assert shown.global_remote_state is True
        assert shown.queue_all_runs is True
        assert shown.source_name == "pytfe-suite"
        assert shown.source_url == "https://example.com/pytfe-suite"
        assert shown.speculative_enabled is False
        assert shown.trigger_prefixes == ["modules/", "shared/"]
        assert shown.trigger_patterns == []
        assert shown.working_directory == "infra/prod"


def test_create_with_trigger_patterns(tfe, org):
    """SPEC B1: trigger-patterns (glob list) is stored as given."""
    ws = tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(name=unique("pat"), trigger_patterns=["/modules/**/*.tf", "*.hcl"]),
    )
    assert ws.trigger_patterns == ["/modules/**/*.tf", "*.hcl"]
    assert ws.trigger_prefixes == []


def test_create_with_explicit_execution_mode_marks_it_overwritten(tfe, org):
    """TFE: an explicit execution-mode overrides the organization default, which shows as
    setting-overwrites.execution-mode = true."""
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("em"), execution_mode=ExecutionMode.LOCAL)
    )
    assert ws.execution_mode == ExecutionMode.LOCAL
    assert ws.setting_overwrites is not None
    assert ws.setting_overwrites.execution_mode is True


def test_create_with_setting_overwrites_false_inherits_org_default(tfe, org):
    """SPEC B1: setting-overwrites.execution-mode = false -> organization default execution mode."""
    ws = tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(
            name=unique("inherit"),
            setting_overwrites=WorkspaceSettingOverwrites(execution_mode=False),
        ),
    )
    assert ws.execution_mode == ExecutionMode.REMOTE
    assert ws.setting_overwrites is not None
    assert ws.setting_overwrites.execution_mode is False


def test_create_with_tag_bindings(tfe, org):
    """SPEC B1: relationships.tag-bindings attaches key-value tags, listed by B17."""
    ws = tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(
            name=unique("tb"),
            tag_bindings=[TagBinding(key="env", value="prod"), TagBinding(key="team", value="core")],
        ),
    )
    bound = {(b.key, b.value) for b in tfe.workspaces.list_tag_bindings(ws.id)}
    assert bound == {("env", "prod"), ("team", "core")}
    effective = {(b.key, b.value) for b in tfe.workspaces.list_effective_tag_bindings(ws.id)}
    assert {("env", "prod"), ("team", "core")} <= effective


def test_create_duplicate_name_is_422_already_taken(tfe, org):
    """Issue 3 / TFE: names are unique per organization; a second create is 422
    "has already been taken"."""
    name = unique("dup")
    tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))
    with pytest.raises(TFEError) as err:
        tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))
    assert err.value.status == 422
    assert "already been taken" in str(err.value).lower()


def test_same_name_in_two_organizations_is_allowed(tfe, org):
    """SPEC: the name is unique *within the organization* only."""
    other = unique("org")
    tfe.organizations.create(OrganizationCreateOptions(name=other, email=f"{other}@example.com"))
    name = unique("shared")
    a = tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))
    b = tfe.workspaces.create(other, WorkspaceCreateOptions(name=name))
    assert a.id != b.id


def test_create_in_unknown_organization_is_404(tfe, org):
    """SPEC B1: the organization must exist; OpenAPI: 404 "Organization not found"."""
    tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("control")))  # route exists
    with pytest.raises(NotFound):
        tfe.workspaces.create(unique("no-such-org"), WorkspaceCreateOptions(name=unique("ws")))


def test_read_by_name_and_by_id_are_identical(tfe, raw, org):
    """SPEC B4: GET by ID and by organization/name have identical behaviour."""
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("same"), description="twins")
    )
    by_name = tfe.workspaces.read(ws.name, organization=org)
    by_id = tfe.workspaces.read_by_id(ws.id)
    assert by_name == by_id
    assert by_id.id == ws.id and by_id.name == ws.name

    doc_name = raw.request("GET", f"/api/v2/organizations/{org}/workspaces/{ws.name}")
    doc_id = raw.request("GET", f"/api/v2/workspaces/{ws.id}")
    assert doc_name.status == doc_id.status == 200
    # Issue 26: one document however it is read, its links.self by organization and name
    # (TFE's form); the create answered the same.
    assert doc_name.json["data"] == doc_id.json["data"]
    assert doc_id.json["data"]["links"]["self"] == f"/api/v2/organizations/{org}/workspaces/{ws.name}"
    made = raw.request(
        "POST",
        f"/api/v2/organizations/{org}/workspaces",
        body={"data": {"type": "workspaces", "attributes": {"name": unique("linked")}}},
    )
    assert made.status == 201, made.body
    name = made.json["data"]["attributes"]["name"]
    assert made.json["data"]["links"]["self"] == f"/api/v2/organizations/{org}/workspaces/{name}"


def test_create_response_equals_a_later_read(tfe, org):
    """TFE: the 201 body of create is the same workspace document a GET returns."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("echo")))
    again = tfe.workspaces.read_by_id(ws.id)
    assert again.name == ws.name
    assert again.created_at == ws.created_at
    assert again.project.id == ws.project.id
    assert again.terraform_version == ws.terraform_version


def test_read_unknown_workspace_is_404(tfe, org):
    """SPEC B4 / OpenAPI: unknown name or ID -> 404 (pytfe NotFound)."""
    known = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("control")))
    assert tfe.workspaces.read(known.name, organization=org).id == known.id  # routes exist
    with pytest.raises(NotFound):
        tfe.workspaces.read(unique("missing"), organization=org)
    with pytest.raises(NotFound):
        tfe.workspaces.read_by_id("ws-doesnotexist0000")
    with pytest.raises(NotFound):
        tfe.workspaces.read("anything", organization=unique("no-such-org"))


def test_show_document_shape_matches_what_clients_parse(raw, tfe, org):
    """Issue 3 / OpenAPI `workspaces`: lists are never null, relationships are objects
    (`{"data": ...}` or `{"links": ...}`), never bare null; type and links are set;
    permissions and actions are objects of booleans."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("shape")))
    resp = raw.request("GET", f"/api/v2/workspaces/{ws.id}")
    assert resp.status == 200
    data = resp.json["data"]
    assert data["type"] == "workspaces"
    assert data["id"] == ws.id
    attrs = data["attributes"]
    for key in ("trigger-prefixes", "trigger-patterns", "tag-names"):
        assert isinstance(attrs[key], list), key
    for key in ("permissions", "actions"):
        assert isinstance(attrs[key], dict), key
        assert all(isinstance(v, bool) for v in attrs[key].values()), key
    for key in ("can-update", "can-lock", "can-unlock", "can-force-unlock", "can-force-delete"):
        assert key in attrs["permissions"], key
    rels = data["relationships"]
    assert isinstance(rels, dict)
    for rel_name, rel in rels.items():
        assert isinstance(rel, dict), rel_name
        assert "data" in rel or "links" in rel, rel_name
    for rel_name in ("organization", "project", "locked-by"):
        assert rel_name in rels and "data" in rels[rel_name], rel_name
    assert rels["organization"]["data"] == {"id": org, "type": "organizations"}
    assert rels["locked-by"]["data"] is None
    assert data["links"]["self"]


def test_admin_token_permissions(tfe, org):
    """Issue 3: `permissions` come from the caller's real rights; the dev admin token has all."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("perm")))
    perms = tfe.workspaces.read_by_id(ws.id).permissions
    assert perms is not None
    assert perms.can_update is True
    assert perms.can_lock is True
    assert perms.can_force_unlock is True
    assert perms.can_force_delete is True


def test_read_with_every_spec_include_value(raw, tfe, org):
    """SPEC "Optional related resources": every include value is accepted on GET; related
    objects that do not exist yet are simply absent, never an error."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("inc")))
    values = [
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
    ]
    resp = raw.request("GET", f"/api/v2/workspaces/{ws.id}", params={"include": ",".join(values)})
    assert resp.status == 200
    included = resp.json.get("included", [])
    assert isinstance(included, list)
    types = {item["type"] for item in included}
    assert {"organizations", "projects"} <= types
    # pytfe parses the same document and hydrates the project from `included`.
    shown = tfe.workspaces.read_by_id_with_options(
        ws.id,
        WorkspaceReadOptions(include=[WorkspaceIncludeOpt(v) for v in values]),
    )
    assert shown.project.name
    assert tfe.workspaces.readme(ws.id) is None
