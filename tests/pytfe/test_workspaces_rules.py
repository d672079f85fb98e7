"""Every workspace rule of SPEC.md area B answers 422 (B1 create, B2 update).

pytfe checks some rules itself before sending (name pattern, execution-mode with
operations, agent mode without pool; models/workspace.py `valid`), so those documents
are sent raw. Rules pytfe does not check (auto-destroy-activity-duration format,
setting-overwrites, agent-pool-id on update) are sent through pytfe, which must
surface them as TFEError with status 422.
"""

from __future__ import annotations

import pytest
from pytfe.errors import TFEError
from pytfe.models import (
    ExecutionMode,
    WorkspaceCreateOptions,
    WorkspaceSettingOverwrites,
    WorkspaceUpdateOptions,
)

from _support import unique

pytestmark = pytest.mark.workspaces


def _assert_422(resp):
    assert resp.status == 422, (resp.status, resp.body[:300])
    assert resp.json["errors"], resp.body[:300]


def _assert_absent(raw, org, name):
    """A refused create leaves nothing behind."""
    resp = raw.request("GET", f"/api/v2/organizations/{org}/workspaces/{name}")
    assert resp.status == 404


# --- name ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "bad",
    ["has space", "has.dot", "slash/inside", "semi;colon", "ümlaut", "star*", "tab\tname"],
)
def test_create_name_outside_the_pattern_is_422(raw, org, bad):
    """SPEC: names have only letters, digits, `-`, `_`."""
    _assert_422(raw.create_workspace(org, {"name": bad}))


def test_create_name_allowed_characters(tfe, org):
    """SPEC: letters (either case), digits, `-` and `_` are all accepted, case kept."""
    name = f"Mixed_Case-9{unique('x')}"
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))
    assert ws.name == name
    assert tfe.workspaces.read(name, organization=org).id == ws.id


def test_create_without_name_is_422(raw, org):
    """SPEC B1: name is required on create."""
    _assert_422(raw.create_workspace(org, {"description": "nameless"}))
    _assert_422(raw.create_workspace(org, {"name": ""}))


def test_rename_outside_the_pattern_is_422(raw, tfe, org):
    """SPEC: the name rule holds on update too; the workspace keeps its name."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("named")))
    _assert_422(raw.update_workspace(ws.id, {"name": "not valid!"}))
    assert tfe.workspaces.read_by_id(ws.id).name == ws.name


# --- auto-destroy-activity-duration ----------------------------------------------------

@pytest.mark.parametrize("bad", ["0d", "0h", "12345d", "14m", "14", "d", "-1d", "1.5h", "14 d", "h14"])
def test_create_bad_auto_destroy_activity_duration_is_422(tfe, raw, org, bad):
    """SPEC: `<number><d|h>`, number > 0 and at most four digits."""
    name = unique("add")
    with pytest.raises(TFEError) as err:
        tfe.workspaces.create(
            org, WorkspaceCreateOptions(name=name, auto_destroy_activity_duration=bad)
        )
    assert err.value.status == 422
    _assert_absent(raw, org, name)


@pytest.mark.parametrize("good", ["1d", "1h", "14d", "24h", "9999d", "9999h"])
def test_create_good_auto_destroy_activity_duration(tfe, org, good):
    """SPEC: the accepted forms are stored as given."""
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("add"), auto_destroy_activity_duration=good)
    )
    assert ws.auto_destroy_activity_duration == good


def test_update_bad_auto_destroy_activity_duration_is_422(tfe, org):
    """SPEC: the duration rule holds on update; the old value stays."""
    ws = tfe.workspaces.create(
        org, WorkspaceCreateOptions(name=unique("add"), auto_destroy_activity_duration="2h")
    )
    with pytest.raises(TFEError) as err:
        tfe.workspaces.update_by_id(ws.id, WorkspaceUpdateOptions(auto_destroy_activity_duration="0h"))
    assert err.value.status == 422
    assert tfe.workspaces.read_by_id(ws.id).auto_destroy_activity_duration == "2h"


# --- execution-mode / operations / agent-pool-id -------------------------------------

def test_create_execution_mode_with_operations_is_422(raw, org):
    """SPEC: execution-mode must not be given together with operations."""
    name = unique("both")
    _assert_422(raw.create_workspace(org, {"name": name, "execution-mode": "remote", "operations": True}))
    _assert_absent(raw, org, name)


def test_update_execution_mode_with_operations_is_422(raw, tfe, org):
    """SPEC: the same rule on update."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("both")))
    _assert_422(raw.update_workspace(ws.id, {"execution-mode": "local", "operations": False}))
    assert tfe.workspaces.read_by_id(ws.id).execution_mode == ExecutionMode.REMOTE


def test_unknown_execution_mode_is_422(raw, org):
    """SPEC: execution-mode is one of remote, local, agent."""
    _assert_422(raw.create_workspace(org, {"name": unique("em"), "execution-mode": "cloud"}))


def test_agent_mode_without_agent_pool_is_422(raw, org):
    """SPEC: agent-pool-id is required when execution-mode is agent."""
    _assert_422(raw.create_workspace(org, {"name": unique("agent"), "execution-mode": "agent"}))


@pytest.mark.parametrize("mode", ["remote", "local"])
def test_create_agent_pool_with_remote_or_local_is_422(raw, org, mode):
    """SPEC: agent-pool-id must not be given when execution-mode is remote or local."""
    _assert_422(
        raw.create_workspace(
            org, {"name": unique("pool"), "execution-mode": mode, "agent-pool-id": "apool-whatever1234"}
        )
    )


def test_create_agent_pool_with_operations_true_is_422(raw, org):
    """SPEC: agent-pool-id must not be given when operations is true."""
    _assert_422(
        raw.create_workspace(
            org, {"name": unique("pool"), "operations": True, "agent-pool-id": "apool-whatever1234"}
        )
    )


@pytest.mark.parametrize("mode", [ExecutionMode.REMOTE, ExecutionMode.LOCAL])
def test_update_agent_pool_with_remote_or_local_is_422(tfe, org, mode):
    """SPEC: same rule on update (pytfe sends this one without checking)."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("pool")))
    with pytest.raises(TFEError) as err:
        tfe.workspaces.update_by_id(
            ws.id, WorkspaceUpdateOptions(execution_mode=mode, agent_pool_id="apool-whatever1234")
        )
    assert err.value.status == 422


def test_agent_pool_of_no_such_pool_is_refused(raw, org):
    """SPEC: agent-pool-id must name an agent pool of the workspace's organization."""
    resp = raw.create_workspace(
        org, {"name": unique("pool"), "execution-mode": "agent", "agent-pool-id": "apool-doesnotexist00"}
    )
    assert resp.status == 422, (resp.status, resp.body[:300])


# --- setting-overwrites --------------------------------------------------------------

def test_setting_overwrites_execution_mode_true_needs_execution_mode(tfe, raw, org):
    """SPEC: execution-mode must be given when setting-overwrites.execution-mode is true."""
    name = unique("so")
    with pytest.raises(TFEError) as err:
        tfe.workspaces.create(
            org,
            WorkspaceCreateOptions(
                name=name, setting_overwrites=WorkspaceSettingOverwrites(execution_mode=True)
            ),
        )
    assert err.value.status == 422
    _assert_absent(raw, org, name)


def test_setting_overwrites_with_execution_mode_is_accepted(tfe, org):
    """SPEC: setting-overwrites.execution-mode true together with execution-mode is valid."""
    ws = tfe.workspaces.create(
        org,
        WorkspaceCreateOptions(
            name=unique("so"),
            execution_mode=ExecutionMode.LOCAL,
            setting_overwrites=WorkspaceSettingOverwrites(execution_mode=True),
        ),
    )
    assert ws.execution_mode == ExecutionMode.LOCAL
    assert ws.setting_overwrites.execution_mode is True


@pytest.mark.parametrize("bad", [["execution-mode"], "execution-mode", 1])
def test_setting_overwrites_that_is_not_an_object_is_422(raw, org, bad):
    """SPEC: setting-overwrites is an object (keys -> booleans)."""
    _assert_422(raw.create_workspace(org, {"name": unique("so"), "setting-overwrites": bad}))
