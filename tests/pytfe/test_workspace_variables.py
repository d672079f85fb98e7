"""Issue 16: workspace variables through pytfe's `client.variables` (TFE's Workspace
Variables API, docs/variables.md): create, list, read, update, delete; a sensitive value
is never answered; bad category, env HCL and duplicate keys are 422; an unknown
workspace is 404; a reader (terrace-workspace-reader) lists but cannot write.
"""

from __future__ import annotations

import pytest
from pytfe.errors import NotFound, TFEError
from pytfe.models import CategoryType, VariableCreateOptions, VariableUpdateOptions

from _support import unique

pytestmark = pytest.mark.workspaces


def _status(err: TFEError) -> int | None:
    return getattr(err, "status", None)


def test_variable_lifecycle(tfe, make_workspace):
    ws = make_workspace("vars")
    region = tfe.variables.create(
        ws.id,
        VariableCreateOptions(
            key="region", value="eu-west-1", description="where", category=CategoryType.TERRAFORM
        ),
    )
    assert region.id.startswith("var-")
    assert (region.key, region.value, region.category) == ("region", "eu-west-1", CategoryType.TERRAFORM)
    assert region.hcl is False and region.sensitive is False
    tags = tfe.variables.create(
        ws.id,
        VariableCreateOptions(key="tags", value='{ env = "prod" }', category=CategoryType.TERRAFORM, hcl=True),
    )
    assert tags.hcl is True
    log = tfe.variables.create(ws.id, VariableCreateOptions(key="TF_LOG", value="INFO", category=CategoryType.ENV))
    listed = {v.key: v for v in tfe.variables.list(ws.id)}
    assert set(listed) == {"region", "tags", "TF_LOG"}
    assert listed["TF_LOG"].category == CategoryType.ENV

    read = tfe.variables.read(ws.id, region.id)
    assert (read.key, read.value, read.description) == ("region", "eu-west-1", "where")
    updated = tfe.variables.update(ws.id, region.id, VariableUpdateOptions(value="us-east-1"))
    assert updated.value == "us-east-1"
    assert updated.description == "where"

    tfe.variables.delete(ws.id, log.id)
    with pytest.raises(NotFound):
        tfe.variables.read(ws.id, log.id)
    assert {v.key for v in tfe.variables.list(ws.id)} == {"region", "tags"}


def test_sensitive_values_are_never_returned(tfe, raw, make_workspace):
    ws = make_workspace("vars")
    secret = "s3cr3t-" + unique("v")
    created = tfe.variables.create(
        ws.id,
        VariableCreateOptions(key="AWS_SECRET_ACCESS_KEY", value=secret, category=CategoryType.ENV, sensitive=True),
    )
    assert created.sensitive is True
    assert created.value is None
    assert tfe.variables.read(ws.id, created.id).value is None
    for path in (f"/api/v2/workspaces/{ws.id}/vars", f"/api/v2/workspaces/{ws.id}/vars/{created.id}"):
        r = raw.request("GET", path)
        assert r.status == 200, r.body
        assert secret.encode() not in r.body
    changed = tfe.variables.update(ws.id, created.id, VariableUpdateOptions(value=secret + "-2"))
    assert changed.value is None
    with pytest.raises(TFEError) as err:
        tfe.variables.update(ws.id, created.id, VariableUpdateOptions(sensitive=False))
    assert _status(err.value) == 422


def test_invalid_variables_are_422(tfe, raw, make_workspace):
    ws = make_workspace("vars")
    tfe.variables.create(ws.id, VariableCreateOptions(key="region", value="eu", category=CategoryType.TERRAFORM))
    for options in (
        VariableCreateOptions(key="region", value="us", category=CategoryType.TERRAFORM),  # taken
        VariableCreateOptions(key="TF_LOG", value="x", category=CategoryType.ENV, hcl=True),  # env HCL
        VariableCreateOptions(key="my-var", value="x", category=CategoryType.ENV),  # env key
    ):
        with pytest.raises(TFEError) as err:
            tfe.variables.create(ws.id, options)
        assert _status(err.value) == 422, options
    # The same key in the other category is a different variable.
    tfe.variables.create(ws.id, VariableCreateOptions(key="region", value="eu", category=CategoryType.ENV))
    # pytfe only sends categories it knows: an unknown one goes raw.
    r = raw.request(
        "POST",
        f"/api/v2/workspaces/{ws.id}/vars",
        body={"data": {"type": "vars", "attributes": {"key": "k", "category": "policy-set"}}},
    )
    assert r.status == 422, r.body
    assert r.json["errors"][0]["source"]["pointer"] == "/data/attributes/category"


def test_unknown_and_unreadable_workspaces_are_404(tfe, tfe_with_token, token_for, make_workspace):
    with pytest.raises(NotFound):
        list(tfe.variables.list("ws-NoSuchWorkspace99"))
    ws = make_workspace("vars")
    var = tfe.variables.create(ws.id, VariableCreateOptions(key="region", value="eu", category=CategoryType.TERRAFORM))
    reader = tfe_with_token(token_for("terrace-workspace-reader"))
    assert [v.key for v in reader.variables.list(ws.id)] == ["region"]
    # A reader sees the variables, so a write is 403, not 404 (docs/rbac.md).
    with pytest.raises(TFEError) as refused:
        reader.variables.create(ws.id, VariableCreateOptions(key="x", value="y", category=CategoryType.ENV))
    assert refused.value.status == 403
    with pytest.raises(TFEError) as refused:
        reader.variables.delete(ws.id, var.id)
    assert refused.value.status == 403
    locker = tfe_with_token(token_for("terrace-workspace-locker"))
    with pytest.raises(NotFound):
        list(locker.variables.list(ws.id))


def test_keys_as_hcp_accepts_them_and_a_new_version_on_every_update(tfe, raw, make_workspace):
    """Issue 26: a terraform variable's key may begin with a digit (go-tfe's own tests use
    UUIDs as keys; HCP Terraform accepts them), an env variable's may not; every update
    issues a new `version-id`, even one that changes nothing, as TFE's does."""
    ws = make_workspace("vars")
    key = "3f2b1c9e-7d4a-4b8e-9c1d-2e3f4a5b6c7d"
    v = tfe.variables.create(ws.id, VariableCreateOptions(key=key, value="x", category=CategoryType.TERRAFORM))
    assert v.key == key
    with pytest.raises(TFEError) as err:
        tfe.variables.create(ws.id, VariableCreateOptions(key="1abc", value="x", category=CategoryType.ENV))
    assert _status(err.value) == 422
    path = f"/api/v2/workspaces/{ws.id}/vars/{v.id}"
    versions = [raw.request("GET", path).json["data"]["attributes"]["version-id"]]
    for _ in range(2):
        r = raw.request("PATCH", path, body={"data": {"id": v.id, "type": "vars", "attributes": {"value": "x"}}})
        assert r.status == 200, r.body
        versions.append(r.json["data"]["attributes"]["version-id"])
    assert len(set(versions)) == 3, versions
    assert raw.request("GET", path).json["data"]["attributes"]["version-id"] == versions[-1]
