"""B5 safe delete and B6 force delete, by ID and by organization/name, through pytfe.

Both answer 204 with no body (pytfe ignores the body). 404 comes back as NotFound,
409 as TFEError with `.status == 409`. The "manages resources" 409 needs state versions
and the 403 needs a second identity: both are left to the permission/state suites.
"""

from __future__ import annotations

import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import WorkspaceCreateOptions, WorkspaceLockOptions

from _support import names, unique

pytestmark = pytest.mark.workspaces


def _gone(tfe, org, ws):
    with pytest.raises(NotFound):
        tfe.workspaces.read_by_id(ws.id)
    with pytest.raises(NotFound):
        tfe.workspaces.read(ws.name, organization=org)
    assert ws.name not in names(tfe.workspaces.list(org))


def test_safe_delete_by_id_is_204_and_removes_it(tfe, raw, org):
    """SPEC B5: 204 deleted when the workspace manages no resources."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("sdel")))
    resp = raw.request("POST", f"/api/v2/workspaces/{ws.id}/actions/safe-delete")
    assert resp.status == 204
    assert resp.body == b""
    _gone(tfe, org, ws)


def test_safe_delete_through_pytfe_by_id_and_by_name(tfe, org):
    """SPEC B5: both routes (ID; organization/name) delete."""
    a = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("sdel")))
    b = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("sdel")))
    tfe.workspaces.safe_delete_by_id(a.id)
    tfe.workspaces.safe_delete(b.name, organization=org)
    _gone(tfe, org, a)
    _gone(tfe, org, b)


def test_safe_delete_unknown_is_404(tfe, org):
    """SPEC B5: 404 when not found."""
    control = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("control")))
    tfe.workspaces.safe_delete_by_id(control.id)  # the route exists
    with pytest.raises(NotFound):
        tfe.workspaces.safe_delete_by_id("ws-doesnotexist0000")
    with pytest.raises(NotFound):
        tfe.workspaces.safe_delete(unique("missing"), organization=org)


def test_safe_delete_twice_is_404(tfe, org):
    """SPEC B5: a deleted workspace is not found the second time."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("twice")))
    tfe.workspaces.safe_delete_by_id(ws.id)
    with pytest.raises(NotFound):
        tfe.workspaces.safe_delete_by_id(ws.id)


def test_safe_delete_of_a_locked_workspace_is_409_locked(tfe, org):
    """OpenAPI safe-delete 409: "has managed resources or is locked"; DESIGN §5 / go-tfe:
    the detail mentions "locked" (go-tfe maps it to ErrWorkspaceLockedCannotDelete)."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("held")))
    tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="keep"))
    for delete in (
        lambda: tfe.workspaces.safe_delete_by_id(ws.id),
        lambda: tfe.workspaces.safe_delete(ws.name, organization=org),
    ):
        with pytest.raises(TFEError) as err:
            delete()
        assert err.value.status == 409
        assert "locked" in str(err.value).lower()
    assert tfe.workspaces.read_by_id(ws.id).locked is True
    tfe.workspaces.unlock(ws.id)
    tfe.workspaces.safe_delete_by_id(ws.id)
    _gone(tfe, org, ws)


def test_force_delete_by_id_is_204(tfe, raw, org):
    """SPEC B6: DELETE /workspaces/:id -> 204 deleted."""
    ws = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("fdel")))
    resp = raw.request("DELETE", f"/api/v2/workspaces/{ws.id}")
    assert resp.status == 204
    assert resp.body == b""
    _gone(tfe, org, ws)


def test_force_delete_through_pytfe_by_id_and_by_name(tfe, org):
    """SPEC B6: both routes delete."""
    a = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("fdel")))
    b = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("fdel")))
    tfe.workspaces.delete_by_id(a.id)
    tfe.workspaces.delete(b.name, organization=org)
    _gone(tfe, org, a)
    _gone(tfe, org, b)


def test_force_delete_unknown_is_404(tfe, org):
    """SPEC B6: 404 when not found."""
    control = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("control")))
    tfe.workspaces.delete_by_id(control.id)  # the route exists
    with pytest.raises(NotFound):
        tfe.workspaces.delete_by_id("ws-doesnotexist0000")
    with pytest.raises(NotFound):
        tfe.workspaces.delete(unique("missing"), organization=org)


def test_name_is_free_again_after_delete(tfe, org):
    """TFE: after a delete the name can be reused; the new workspace has a new ID."""
    name = unique("reuse")
    first = tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))
    tfe.workspaces.delete_by_id(first.id)
    second = tfe.workspaces.create(org, WorkspaceCreateOptions(name=name))
    assert second.id != first.id
    assert tfe.workspaces.read(name, organization=org).id == second.id


def test_delete_leaves_other_workspaces_alone(tfe, org):
    """TFE: deleting one workspace does not touch its neighbours."""
    keep = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("keep")))
    drop = tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("drop")))
    tfe.workspaces.safe_delete_by_id(drop.id)
    assert names(tfe.workspaces.list(org)) == [keep.name]
    assert tfe.workspaces.read_by_id(keep.id).name == keep.name
