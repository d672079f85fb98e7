"""B2 (update by ID and by organization/name), rename and project moves, through pytfe.

pytfe's update always sends `"vcs-repo": {}` and `"setting-overwrites": {}` next to the
attributes it was given (resources/workspaces.py `_build_workspace_payload`); the server
must read both as "no change".
"""

from __future__ import annotations

import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import (
    ExecutionMode,
    Project,
    ProjectCreateOptions,
    TagBinding,
    WorkspaceCreateOptions,
    WorkspaceSettingOverwrites,
    WorkspaceUpdateOptions,
)

from _support import unique

pytestmark = pytest.mark.workspaces

# Attributes set on create and expected untouched by updates that omit them.
KEPT = dict(
    allow_destroy_plan=False,
    auto_apply=True,
    auto_apply_run_trigger=True,
    auto_destroy_activity_duration="3d",
    description="before",
    file_triggers_enabled=False,
    global_remote_state=True,
    queue_all_runs=True,
    speculative_enabled=False,
    trigger_prefixes=["modules/"],
    working_directory="infra",
)


def _assert_kept(ws, *, except_=()):
    for field, value in KEPT.items():
        if field in except_:
            continue
        assert getattr(ws, field) == value, field


def test_update_by_id_keeps_omitted_attributes(tfe, org):
    """SPEC B2: on update an omitted attribute keeps its previous value."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("keep"), **KEPT))
    before = tfe.workspaces.read_by_id(ws.id)
    updated = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(description="after"))
    assert updated.description == "after"
    _assert_kept(updated, except_={"description"})
    after = tfe.workspaces.read_by_id(ws.id)
    assert after.description == "after"
    _assert_kept(after, except_={"description"})
    assert after.name == before.name
    assert after.execution_mode == before.execution_mode
    assert after.terraform_version == before.terraform_version
    assert after.project.id == before.project.id
    assert after.created_at == before.created_at
    assert after.vcs_repo is None


def test_update_by_name_keeps_omitted_attributes(tfe, org):
    """SPEC B2: PATCH /organizations/:org/workspaces/:name behaves like PATCH by ID."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("keepn"), **KEPT))
    updated = tfe.workspaces.update(
        ws.name, WorkspaceUpdateOptions(auto_apply=False), organization=org
    )
    assert updated.id == ws.id
    assert updated.auto_apply is False
    _assert_kept(updated, except_={"auto_apply"})
    assert tfe.workspaces.read_by_id(ws.id).auto_apply is False


def test_update_response_equals_a_later_read(tfe, org):
    """TFE: the 200 body of an update is the workspace as a GET then shows it."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("echo")))
    updated = tfe.workspaces.update_by_id(
        ws.id, WorkspaceUpdateOptions(description="echoed", queue_all_runs=True)
    )
    shown = tfe.workspaces.read_by_id(ws.id)
    assert (updated.description, updated.queue_all_runs) == (shown.description, shown.queue_all_runs)
    assert updated.name == shown.name


def test_update_lists_replace_whole_values(tfe, org):
    """SPEC B2: trigger-prefixes given on update replaces the list (an empty list clears it)."""
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("lists"), trigger_prefixes=["a/", "b/"])
    )
    ws = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(trigger_prefixes=["c/"]))
    assert ws.trigger_prefixes == ["c/"]
    ws = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(trigger_prefixes=[]))
    assert ws.trigger_prefixes == []
    assert tfe.workspaces.read_by_id(ws.id).trigger_prefixes == []


def test_rename_by_id_old_name_stops_resolving(tfe, org):
    """Issue 3 / SPEC: renaming changes the URL; the old name answers 404, the ID stays."""
    old = unique("old")
    new = unique("new")
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=old))
    renamed = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(name=new))
    assert renamed.id == ws.id
    assert renamed.name == new
    assert tfe.workspaces.read(new, organization=org).id == ws.id
    with pytest.raises(NotFound):
        tfe.workspaces.read(old, organization=org)
    assert tfe.workspaces.read_by_id(ws.id).name == new


def test_rename_by_name(tfe, org):
    """SPEC B2: a rename through PATCH /organizations/:org/workspaces/:old_name."""
    old = unique("oldn")
    new = unique("newn")
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=old))
    renamed = tfe.workspaces.update(old, WorkspaceUpdateOptions(name=new), organization=org)
    assert (renamed.id, renamed.name) == (ws.id, new)
    with pytest.raises(NotFound):
        tfe.workspaces.read(old, organization=org)


def test_old_name_is_free_after_rename(tfe, org):
    """TFE: after a rename the old name can be used by a new workspace."""
    old = unique("free")
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=old))
    tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(name=unique("moved")))
    other = tfe.workspaces.create(org, WorkspaceCreateOptions(name=old))
    assert other.id != ws.id


def test_rename_to_a_taken_name_is_422(tfe, org):
    """Issue 3: names are unique per organization, also on rename (422 "has already been taken")."""
    a = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("a")))
    b = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("b")))
    with pytest.raises(TFEError) as err:
        tfe.workspaces.update_by_id(b.id, WorkspaceUpdateOptions(name=a.name))
    assert err.value.status == 422
    assert "already been taken" in str(err.value).lower()
    assert tfe.workspaces.read_by_id(b.id).name == b.name


def test_update_unknown_workspace_is_404(tfe, org):
    """OpenAPI PATCH /workspaces/{id}: 404 when not found."""
    known = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("control")))
    tfe.workspaces.update_by_id(known.id, WorkspaceUpdateOptions(description="x"))  # route exists
    tfe.workspaces.update(known.name, WorkspaceUpdateOptions(description="y"), organization=org)
    with pytest.raises(NotFound):
        tfe.workspaces.update_by_id("ws-doesnotexist0000", WorkspaceUpdateOptions(description="x"))
    with pytest.raises(NotFound):
        tfe.workspaces.update(unique("missing"), WorkspaceUpdateOptions(description="x"), organization=org)


def test_update_execution_mode_and_back_to_org_default(tfe, org):
    """SPEC B1/B2: execution-mode local -> operations false; setting-overwrites.execution-mode
    false -> the organization default (remote) again."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("mode")))
    local = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(execution_mode=ExecutionMode.LOCAL))
    assert local.execution_mode == ExecutionMode.LOCAL
    assert local.operations is False
    assert local.setting_overwrites.execution_mode is True
    inherited = tfe.workspaces.update_by_id(
        ws.id,
        WorkspaceUpdateOptions(setting_overwrites=WorkspaceSettingOverwrites(execution_mode=False)),
    )
    assert inherited.execution_mode == ExecutionMode.REMOTE
    assert inherited.operations is True
    assert inherited.setting_overwrites.execution_mode is False


def test_update_operations_false_means_local(tfe, org):
    """SPEC: operations (deprecated) false = state storage only, i.e. execution-mode local."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("ops")))
    ws = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(operations=False))
    assert ws.operations is False
    assert ws.execution_mode == ExecutionMode.LOCAL


def test_remove_vcs_connection_without_repo_is_a_no_op(tfe, org):
    """SPEC B2: `vcs-repo: null` removes the repository; on a workspace without one it
    changes nothing else."""
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("novcs"), description="stays")
    )
    after = tfe.workspaces.remove_vcs_connection_by_id(ws.id)
    assert after.vcs_repo is None
    assert after.description == "stays"
    by_name = tfe.workspaces.remove_vcs_connection(ws.name, organization=org)
    assert by_name.vcs_repo is None


def test_move_workspace_to_another_project(tfe, org):
    """SPEC B2: relationships.project on update moves the workspace (admin on both projects)."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("mv")))
    target = tfe.projects.create(org, ProjectCreateOptions(name=unique("dest")))
    moved = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(project=Project(id=target.id)))
    assert moved.project.id == target.id
    assert tfe.workspaces.read_by_id(ws.id).project.id == target.id


def test_update_without_project_does_not_move(tfe, org):
    """SPEC B2: project omitted (pytfe omits it unless given) means no move."""
    target = tfe.projects.create(org, ProjectCreateOptions(name=unique("home")))
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("stay"), project=Project(id=target.id))
    )
    ws = tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(description="x"))
    assert ws.project.id == target.id


def test_move_to_unknown_project_fails_and_keeps_project(tfe, org):
    """SPEC B2: the destination must be an existing project; a failed move changes nothing."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("nomv")))
    with pytest.raises(TFEError) as err:
        tfe.workspaces.update_by_id(
            ws.id, WorkspaceUpdateOptions(project=Project(id="prj-doesnotexist000"))
        )
    assert err.value.status == 422
    assert tfe.workspaces.read_by_id(ws.id).project.id == ws.project.id


def test_delete_all_tag_bindings_through_update(tfe, org):
    """SPEC B18/B2: key-value tags are removed through B2 (`tag-bindings: {"data": []}`)."""
    ws = tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(name=unique("untag"), tag_bindings=[TagBinding(key="env", value="dev")]),
    )
    assert [(b.key, b.value) for b in tfe.workspaces.list_tag_bindings(ws.id)] == [("env", "dev")]
    tfe.workspaces.delete_all_tag_bindings(ws.id)
    assert list(tfe.workspaces.list_tag_bindings(ws.id)) == []
