"""Issue 26 through HashiCorp's Python client: agent pools managed through the API,
configuration versions (a second upload to one URL, download, backing data), run
comments and run events.

Everything goes through pytfe; `RawApi` only where an exact status code matters.
"""

from __future__ import annotations

import io
import tarfile
import time

import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import (
    AgentPoolCreateOptions,
    AgentPoolListOptions,
    AgentPoolUpdateOptions,
    CommentCreateOptions,
    ConfigurationVersion,
    ConfigurationVersionCreateOptions,
    RunCreateOptions,
    RunEventListOptions,
    RunEventReadOptions,
    Workspace,
)

from _support import unique

pytestmark = pytest.mark.workspaces


def _targz(text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = text.encode()
        info = tarfile.TarInfo("main.tf")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _eventually(check, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, NotFound):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _uploaded_cv(tfe, ws_id: str, text: str = "# one"):
    cv = tfe.configuration_versions.create(
        ws_id, ConfigurationVersionCreateOptions(auto_queue_runs=False)
    )
    tfe.configuration_versions.upload_tar_gzip(cv.upload_url, io.BytesIO(_targz(text)))

    def uploaded():
        got = tfe.configuration_versions.read(cv.id)
        assert got.status == "uploaded", got.status
        return cv

    _eventually(uploaded)
    return cv


def test_agent_pools_are_created_updated_listed_and_deleted(tfe, org, make_workspace):
    web = make_workspace(name=unique("web"))
    db = make_workspace(name=unique("db"))
    wide = tfe.agent_pools.create(org, AgentPoolCreateOptions(name="wide"))
    assert wide.organization_scoped is True
    narrow = tfe.agent_pools.create(
        org,
        AgentPoolCreateOptions(
            name="narrow",
            organization_scoped=False,
            allowed_workspace_ids=[web.id],
            excluded_workspace_ids=[db.id],
        ),
    )
    assert [w.id for w in narrow.allowed_workspaces] == [web.id]
    assert [w.id for w in narrow.excluded_workspaces] == [db.id]
    read = tfe.agent_pools.read(narrow.id)
    assert read.name == "narrow" and [w.id for w in read.allowed_workspaces] == [web.id]

    renamed = tfe.agent_pools.update(narrow.id, AgentPoolUpdateOptions(name="renamed"))
    assert renamed.name == "renamed"
    assert [w.id for w in renamed.allowed_workspaces] == [web.id], "a name change keeps the lists"

    names = lambda opts: [p.name for p in tfe.agent_pools.list(org, opts)]  # noqa: E731
    assert names(AgentPoolListOptions(query="REN")) == ["renamed"]
    assert names(AgentPoolListOptions(sort="-created-at")) == ["renamed", "wide"]
    assert sorted(names(AgentPoolListOptions(allowed_workspace_name=web.name))) == [
        "renamed",
        "wide",
    ]
    assert names(AgentPoolListOptions(allowed_workspace_name=db.name)) == ["wide"]

    tfe.agent_pools.delete(narrow.id)
    with pytest.raises(NotFound):
        tfe.agent_pools.read(narrow.id)


def test_a_configuration_version_takes_a_second_upload_and_downloads(tfe, make_workspace):
    ws = make_workspace(name=unique("cv"))
    cv = tfe.configuration_versions.create(
        ws.id, ConfigurationVersionCreateOptions(auto_queue_runs=False)
    )
    first, second = _targz("# first"), _targz("# second")
    tfe.configuration_versions.upload_tar_gzip(cv.upload_url, io.BytesIO(first))
    tfe.configuration_versions.upload_tar_gzip(cv.upload_url, io.BytesIO(second))
    _eventually(lambda: tfe.configuration_versions.read(cv.id).status == "uploaded" or None)
    assert tfe.configuration_versions.download(cv.id) == second

    older = cv
    _uploaded_cv(tfe, ws.id, "# current")
    tfe.configuration_versions.soft_delete_backing_data(older.id)
    with pytest.raises(NotFound):
        tfe.configuration_versions.download(older.id)
    tfe.configuration_versions.restore_backing_data(older.id)
    assert tfe.configuration_versions.download(older.id) == second
    tfe.configuration_versions.permanently_delete_backing_data(older.id)
    assert tfe.configuration_versions.read(older.id).status == "archived"


def test_comments_and_run_events(tfe, make_workspace):
    ws = make_workspace(name=unique("events"))
    cv = _uploaded_cv(tfe, ws.id)
    # pytfe serializes the whole objects it is given (datetimes included): name them by ID.
    run = tfe.runs.create(
        RunCreateOptions(
            workspace=Workspace(id=ws.id), configuration_version=ConfigurationVersion(id=cv.id)
        )
    )
    made = tfe.comments.create(run.id, CommentCreateOptions(body="ship it"))
    assert made.body == "ship it"
    assert tfe.comments.read(made.id).body == "ship it"
    assert [c.body for c in tfe.comments.list(run.id)] == ["ship it"]
    with pytest.raises(TFEError):
        tfe.comments.create(run.id, CommentCreateOptions(body="   "))

    events = list(tfe.run_events.list(run.id, RunEventListOptions(include=["actor", "comment"])))
    assert events[0].action == "created"
    commented = [e for e in events if e.action == "commented"]
    assert len(commented) == 1
    # pytfe's list does not hydrate includes (its read does): the linkage is there.
    assert commented[0].comment is not None and commented[0].comment.id == made.id
    assert commented[0].actor is not None and commented[0].actor.id

    one = tfe.run_events.read_with_options(
        commented[0].id, RunEventReadOptions(include=["actor", "comment"])
    )
    assert one.action == "commented" and one.comment.body == "ship it"
    assert one.actor.username == commented[0].actor.id
