"""B7 lock, B8 unlock, B9 force-unlock: SPEC.md's lock table through pytfe.

pytfe sends `{"reason": <str|null>}` (not a JSON:API document) to lock and no body to
unlock/force-unlock; 409 comes back as a plain TFEError with `.status == 409`.
"""

from __future__ import annotations

import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import WorkspaceCreateOptions, WorkspaceLockOptions

from _support import unique

pytestmark = pytest.mark.workspaces


@pytest.fixture
def ws(tfe, org):
    return tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique("lock")))


def _holder(locked_by):
    """The (kind, id) pytfe parsed from relationships.locked-by."""
    assert locked_by is not None
    held = [(kind, getattr(locked_by, kind)) for kind in ("user", "team", "run") if getattr(locked_by, kind)]
    assert len(held) == 1, locked_by
    return held[0]


def test_lock_stores_reason_and_holder(tfe, raw, org, ws):
    """SPEC lock table: unlocked --lock--> locked, reason stored, 200 with the workspace."""
    locked = tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="maintenance window"))
    assert locked.id == ws.id
    assert locked.locked is True
    assert locked.locked_reason == "maintenance window"
    _holder(locked.locked_by)

    shown = tfe.workspaces.read_by_id(ws.id)
    assert shown.locked is True
    assert shown.locked_reason == "maintenance window"
    assert _holder(shown.locked_by) == _holder(locked.locked_by)
    # The same holder through the name route, and on the wire as users|teams|runs.
    assert tfe.workspaces.read(ws.name, organization=org).locked is True
    doc = raw.request("GET", f"/api/v2/workspaces/{ws.id}").json
    assert doc["data"]["relationships"]["locked-by"]["data"]["type"] in ("users", "teams", "runs")


def test_lock_without_reason(tfe, ws):
    """SPEC B7: reason defaults to empty (pytfe sends `"reason": null`)."""
    locked = tfe.workspaces.lock(ws.id, WorkspaceLockOptions())
    assert locked.locked is True
    assert locked.locked_reason in (None, "")


def test_lock_with_raw_empty_body(raw, tfe, ws):
    """OpenAPI lock: the request body is optional."""
    resp = raw.request("POST", f"/api/v2/workspaces/{ws.id}/actions/lock")
    assert resp.status == 200
    assert resp.json["data"]["attributes"]["locked"] is True
    assert tfe.workspaces.read_by_id(ws.id).locked is True


def test_lock_when_locked_is_409(tfe, ws):
    """SPEC lock table: locked --lock--> 409, lock unchanged."""
    tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="first"))
    with pytest.raises(TFEError) as err:
        tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="second"))
    assert err.value.status == 409
    shown = tfe.workspaces.read_by_id(ws.id)
    assert shown.locked is True
    assert shown.locked_reason == "first"


def test_unlock_by_the_holder(tfe, ws):
    """SPEC lock table: locked --unlock by the locker--> unlocked, 200 with the workspace."""
    tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="r"))
    unlocked = tfe.workspaces.unlock(ws.id)
    assert unlocked.locked is False
    assert unlocked.locked_by is None
    shown = tfe.workspaces.read_by_id(ws.id)
    assert shown.locked is False
    assert shown.locked_by is None


def test_unlock_when_unlocked_is_409(tfe, ws):
    """SPEC lock table: unlocked --unlock--> 409 (already unlocked)."""
    with pytest.raises(TFEError) as err:
        tfe.workspaces.unlock(ws.id)
    assert err.value.status == 409
    assert tfe.workspaces.read_by_id(ws.id).locked is False


def test_force_unlock_a_locked_workspace(tfe, ws):
    """SPEC lock table: locked --force-unlock by an admin--> unlocked, 200."""
    tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="stuck"))
    unlocked = tfe.workspaces.force_unlock(ws.id)
    assert unlocked.locked is False
    assert unlocked.locked_by is None
    assert tfe.workspaces.read_by_id(ws.id).locked is False


def test_force_unlock_when_unlocked_is_409(tfe, ws):
    """SPEC lock table: unlocked --force-unlock--> 409."""
    with pytest.raises(TFEError) as err:
        tfe.workspaces.force_unlock(ws.id)
    assert err.value.status == 409


def test_lock_unlock_cycle_repeats(tfe, ws):
    """SPEC lock table: after unlock the workspace can be locked again."""
    for reason in ("one", "two", "three"):
        assert tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason=reason)).locked_reason == reason
        assert tfe.workspaces.unlock(ws.id).locked is False


def test_lock_actions_on_unknown_workspace_are_404(tfe, ws):
    """SPEC B7–B9: 404 when the workspace does not exist."""
    tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="control"))  # the routes exist
    tfe.workspaces.unlock(ws.id)
    missing = "ws-doesnotexist0000"
    with pytest.raises(NotFound):
        tfe.workspaces.lock(missing, WorkspaceLockOptions(reason="x"))
    with pytest.raises(NotFound):
        tfe.workspaces.unlock(missing)
    with pytest.raises(NotFound):
        tfe.workspaces.force_unlock(missing)


def test_list_shows_the_lock(tfe, org, ws):
    """TFE: listed workspaces carry `locked` like the show endpoint."""
    tfe.workspaces.lock(ws.id, WorkspaceLockOptions(reason="listed"))
    (listed,) = [w for w in tfe.workspaces.list(org) if w.id == ws.id]
    assert listed.locked is True
    assert listed.locked_by is not None
