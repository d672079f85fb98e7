"""SPEC.md B10–B22: SSH keys, remote state consumers, flat tags, tag bindings, data
retention; plus agent pools / OAuth tokens as workspace references.

Everything pytfe has a call for goes through pytfe; exact status codes, pointers and
the relationship endpoints pytfe lacks go through `RawApi`. Permission cases use
ServiceAccount tokens minted with kubectl (`kubectl create token`) and bound to the
chart's ClusterRoles in the organization's namespace.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time

import pytest
from pytfe.errors import AuthError, NotFound, TFEError
from pytfe.models import (
    AddWorkspacesToTagOptions,
    DataRetentionPolicyDeleteOlderSetOptions,
    DataRetentionPolicyDontDeleteSetOptions,
    DataRetentionPolicySetOptions,
    OrganizationTagsDeleteOptions,
    ProjectAddTagBindingsOptions,
    SSHKeyCreateOptions,
    SSHKeyUpdateOptions,
    Tag,
    TagBinding,
    Workspace,
    WorkspaceAddRemoteStateConsumersOptions,
    WorkspaceAddTagBindingsOptions,
    WorkspaceAddTagsOptions,
    WorkspaceAssignSSHKeyOptions,
    WorkspaceCreateOptions,
    WorkspaceRemoveRemoteStateConsumersOptions,
    WorkspaceRemoveTagsOptions,
    WorkspaceUpdateRemoteStateConsumersOptions,
)

from _support import kubectl as _kubectl, unique

pytestmark = pytest.mark.workspaces

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAAtopsecretmaterial\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


# --- helpers -----------------------------------------------------------------------


def _eventually(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _ws(tfe, org, prefix="rel", **options) -> Workspace:
    return tfe.workspaces.create(org, WorkspaceCreateOptions(name=unique(prefix), **options))


def _consumers_body(*ids):
    return {"data": [{"type": "workspaces", "id": i} for i in ids]}


# --- flat tags (B16, B18, B19) -------------------------------------------------------


def test_flat_tags_add_list_remove(tfe, raw, org):
    """B18 add by name (creating the tag) and by id; B16 list; B19 remove by id and by an
    unknown name (no effect); the organization list is derived and forgets unused tags."""
    a = _ws(tfe, org)
    b = _ws(tfe, org)
    tfe.workspaces.add_tags(a.id, WorkspaceAddTagsOptions(tags=[Tag(name="prod"), Tag(name="web")]))
    assert sorted(t.name for t in tfe.workspaces.list_tags(a.id)) == ["prod", "web"]

    org_tags = {t.name: t for t in tfe.organization_tags.list(org)}
    assert set(org_tags) == {"prod", "web"}
    assert org_tags["prod"].id.startswith("tag-")
    assert org_tags["prod"].instance_count == 1

    tfe.workspaces.add_tags(b.id, WorkspaceAddTagsOptions(tags=[Tag(id=org_tags["prod"].id)]))
    assert [t.name for t in tfe.workspaces.list_tags(b.id)] == ["prod"]
    again = {t.name: t for t in tfe.organization_tags.list(org)}
    assert again["prod"].instance_count == 2
    assert again["prod"].id == org_tags["prod"].id, "tag ids are stable"

    # search[tags] on the workspace list uses the same tags.
    listed = raw.list_workspaces(org, {"search[tags]": "prod,web"})
    assert [w["id"] for w in listed.json["data"]] == [a.id]

    tfe.workspaces.remove_tags(
        a.id, WorkspaceRemoveTagsOptions(tags=[Tag(id=org_tags["web"].id), Tag(name="never-seen")])
    )
    assert [t.name for t in tfe.workspaces.list_tags(a.id)] == ["prod"]
    assert {t.name for t in tfe.organization_tags.list(org)} == {"prod"}, "web left with its last workspace"

    with pytest.raises(NotFound):
        tfe.workspaces.remove_tags(a.id, WorkspaceRemoveTagsOptions(tags=[Tag(id="tag-doesnotexist0000")]))


def test_flat_tag_list_is_paginated_and_validated(tfe, raw, org):
    """B16 paginated (default 20); tag names follow the rules (422 with a pointer)."""
    ws = _ws(tfe, org)
    names = [f"t{i:02d}" for i in range(23)]
    tfe.workspaces.add_tags(ws.id, WorkspaceAddTagsOptions(tags=[Tag(name=n) for n in names]))
    page = raw.request("GET", f"/api/v2/workspaces/{ws.id}/relationships/tags")
    assert page.status == 200
    assert len(page.json["data"]) == 20
    assert page.json["meta"]["pagination"]["total-count"] == 23
    assert [t.name for t in tfe.workspaces.list_tags(ws.id)] == names

    bad = raw.request(
        "POST",
        f"/api/v2/workspaces/{ws.id}/relationships/tags",
        body={"data": [{"type": "tags", "attributes": {"name": "has space"}}]},
    )
    assert bad.status == 422
    assert bad.json["errors"][0]["source"]["pointer"] == "/data/0/attributes/name"
    missing = raw.request(
        "POST", "/api/v2/workspaces/ws-doesnotexist00000/relationships/tags", body={"data": []}
    )
    assert missing.status == 404


def test_organization_tags_delete_and_add_workspaces(tfe, org):
    """Organization tag endpoints: attach an existing tag to workspaces, delete it everywhere."""
    a = _ws(tfe, org)
    b = _ws(tfe, org)
    tfe.workspaces.add_tags(a.id, WorkspaceAddTagsOptions(tags=[Tag(name="shared")]))
    tag = next(t for t in tfe.organization_tags.list(org) if t.name == "shared")
    tfe.organization_tags.add_workspaces(org, tag.id, AddWorkspacesToTagOptions(workspace_ids=[b.id]))
    assert [t.name for t in tfe.workspaces.list_tags(b.id)] == ["shared"]
    tfe.organization_tags.delete(org, OrganizationTagsDeleteOptions(ids=[tag.id]))
    assert list(tfe.organization_tags.list(org)) == []
    assert list(tfe.workspaces.list_tags(a.id)) == []


# --- tag bindings (B17) ------------------------------------------------------------------


def test_tag_bindings_and_inheritance(tfe, raw, org):
    """B17: direct bindings in order; effective = direct plus the project's, a direct key
    overriding an inherited one, inherited ones linking to the project."""
    ws = _ws(tfe, org)
    project_id = ws.project.id
    added = list(
        tfe.workspaces.add_tag_bindings(
            ws.id,
            WorkspaceAddTagBindingsOptions(
                tag_bindings=[TagBinding(key="env", value="prod"), TagBinding(key="app", value="web")]
            ),
        )
    )
    assert [(t.key, t.value) for t in added] == [("env", "prod"), ("app", "web")]
    assert [(t.key, t.value) for t in tfe.workspaces.list_tag_bindings(ws.id)] == [
        ("env", "prod"),
        ("app", "web"),
    ]

    tfe.projects.add_tag_bindings(
        project_id,
        ProjectAddTagBindingsOptions(
            tag_bindings=[TagBinding(key="env", value="dev"), TagBinding(key="team", value="core")]
        ),
    )
    assert [(t.key, t.value) for t in tfe.projects.list_tag_bindings(project_id)] == [
        ("env", "dev"),
        ("team", "core"),
    ]
    effective = list(tfe.workspaces.list_effective_tag_bindings(ws.id))
    assert [(t.key, t.value) for t in effective] == [("env", "prod"), ("app", "web"), ("team", "core")]
    assert effective[2].links.get("inherited-from") == f"/api/v2/projects/{project_id}"
    assert not effective[0].links
    doc = raw.request("GET", f"/api/v2/workspaces/{ws.id}/effective-tag-bindings").json
    assert doc["data"][2]["links"]["inherited-from"] == f"/api/v2/projects/{project_id}"

    # The vendor schema's relationship paths: POST adds, PATCH replaces, both 204.
    rel = f"/api/v2/workspaces/{ws.id}/relationships/tag-bindings"
    resp = raw.request(
        "POST", rel, body={"data": [{"type": "tag-bindings", "attributes": {"key": "x", "value": "1"}}]}
    )
    assert resp.status == 204
    assert [b["attributes"]["key"] for b in raw.request("GET", rel).json["data"]] == ["env", "app", "x"]
    resp = raw.request(
        "PATCH", rel, body={"data": [{"type": "tag-bindings", "attributes": {"key": "only", "value": ""}}]}
    )
    assert resp.status == 204
    assert [(t.key, t.value) for t in tfe.workspaces.list_tag_bindings(ws.id)] == [("only", "")]

    # filter[tagged] uses effective bindings: the inherited team=core matches.
    listed = raw.list_workspaces(
        org, {"filter[tagged][0][key]": "team", "filter[tagged][0][value]": "core"}
    )
    assert ws.id in [w["id"] for w in listed.json["data"]]

    bad = raw.request("PATCH", rel, body={"data": [{"type": "tag-bindings", "attributes": {"key": ""}}]})
    assert bad.status == 422
    assert bad.json["errors"][0]["source"]["pointer"] == "/data/0/attributes/key"


# --- remote state consumers (B12–B15) --------------------------------------------------


def test_remote_state_consumers(tfe, raw, org):
    """B12–B15: add ignores duplicates, remove ignores absent ones, replace sets exactly;
    the list holds full workspaces."""
    subject = _ws(tfe, org)
    a = _ws(tfe, org)
    b = _ws(tfe, org)
    tfe.workspaces.add_remote_state_consumers(
        subject.id, WorkspaceAddRemoteStateConsumersOptions(workspaces=[Workspace(id=a.id), Workspace(id=b.id)])
    )
    tfe.workspaces.add_remote_state_consumers(
        subject.id, WorkspaceAddRemoteStateConsumersOptions(workspaces=[Workspace(id=a.id)])
    )
    consumers = list(tfe.workspaces.list_remote_state_consumers(subject.id))
    assert sorted(c.id for c in consumers) == sorted([a.id, b.id])
    assert {c.name for c in consumers} == {a.name, b.name}

    tfe.workspaces.remove_remote_state_consumers(
        subject.id, WorkspaceRemoveRemoteStateConsumersOptions(workspaces=[Workspace(id=a.id)])
    )
    tfe.workspaces.remove_remote_state_consumers(
        subject.id, WorkspaceRemoveRemoteStateConsumersOptions(workspaces=[Workspace(id=a.id)])
    )
    assert [c.id for c in tfe.workspaces.list_remote_state_consumers(subject.id)] == [b.id]

    tfe.workspaces.update_remote_state_consumers(
        subject.id, WorkspaceUpdateRemoteStateConsumersOptions(workspaces=[Workspace(id=a.id)])
    )
    assert [c.id for c in tfe.workspaces.list_remote_state_consumers(subject.id)] == [a.id]

    path = f"/api/v2/workspaces/{subject.id}/relationships/remote-state-consumers"
    page = raw.request("GET", path, params={"page[size]": 1})
    assert page.json["meta"]["pagination"]["total-count"] == 1

    with pytest.raises(TFEError) as self_consumer:
        tfe.workspaces.add_remote_state_consumers(
            subject.id, WorkspaceAddRemoteStateConsumersOptions(workspaces=[Workspace(id=subject.id)])
        )
    assert self_consumer.value.status == 422
    unknown = raw.request("POST", path, body=_consumers_body("ws-doesnotexist00000"))
    assert unknown.status == 422
    assert unknown.json["errors"][0]["source"]["pointer"] == "/data/0/id"
    assert raw.request("POST", path, body={"data": {"type": "workspaces"}}).status == 422
    missing = raw.request(
        "POST",
        "/api/v2/workspaces/ws-doesnotexist00000/relationships/remote-state-consumers",
        body=_consumers_body(a.id),
    )
    assert missing.status == 404


def test_global_remote_state_consumers(tfe, raw, org):
    """B12 with global-remote-state: every other workspace; writes answer 422."""
    subject = _ws(tfe, org, global_remote_state=True)
    others = [_ws(tfe, org) for _ in range(3)]
    listed = list(tfe.workspaces.list_remote_state_consumers(subject.id))
    assert sorted(w.id for w in listed) == sorted(w.id for w in others)
    path = f"/api/v2/workspaces/{subject.id}/relationships/remote-state-consumers"
    page = raw.request("GET", path, params={"page[size]": 2})
    assert len(page.json["data"]) == 2
    assert page.json["meta"]["pagination"]["next-page"] == 2
    for method in ("POST", "PATCH", "DELETE"):
        resp = raw.request(method, path, body=_consumers_body(others[0].id))
        assert resp.status == 422, method
        assert "global-remote-state" in resp.error_details


def test_remote_state_consumer_permissions(tfe, tfe_with_token, raw, org, token_for):
    """A reader cannot add consumers (404); a workspace admin can add but cannot replace
    the whole list (needs manage, 404); an owner can."""
    subject = _ws(tfe, org)
    other = _ws(tfe, org)
    path = f"/api/v2/workspaces/{subject.id}/relationships/remote-state-consumers"

    reader = tfe_with_token(token_for("terrace-workspace-reader"))
    assert [w.id for w in reader.workspaces.list_remote_state_consumers(subject.id)] == []
    with pytest.raises(NotFound):
        reader.workspaces.add_remote_state_consumers(
            subject.id, WorkspaceAddRemoteStateConsumersOptions(workspaces=[Workspace(id=other.id)])
        )

    admin_token = token_for("terrace-workspace-admin")
    admin = tfe_with_token(admin_token)
    admin.workspaces.add_remote_state_consumers(
        subject.id, WorkspaceAddRemoteStateConsumersOptions(workspaces=[Workspace(id=other.id)])
    )
    with pytest.raises(NotFound):
        admin.workspaces.update_remote_state_consumers(
            subject.id, WorkspaceUpdateRemoteStateConsumersOptions(workspaces=[Workspace(id=other.id)])
        )
    assert raw.request("PATCH", path, body=_consumers_body(other.id), token=admin_token).status == 404

    owner = tfe_with_token(token_for("terrace-owner"))
    owner.workspaces.update_remote_state_consumers(
        subject.id, WorkspaceUpdateRemoteStateConsumersOptions(workspaces=[Workspace(id=other.id)])
    )
    assert [w.id for w in tfe.workspaces.list_remote_state_consumers(subject.id)] == [other.id]
    # A caller without any rights in the organization sees nothing.
    assert raw.request("GET", path, token="not-a-token").status == 401


# --- SSH keys (B10, B11) -------------------------------------------------------------------


def test_ssh_keys_assign_unassign_delete(tfe, raw, org, terrace):
    """SSH key CRUD; B10 assign, B11 unassign; the key text never comes back; deleting a
    key unassigns it from its workspaces."""
    key = tfe.ssh_keys.create(org, SSHKeyCreateOptions(name="deploy", value=PEM))
    assert key.id.startswith("sshkey-")
    assert key.name == "deploy"
    assert [k.id for k in tfe.ssh_keys.list(org)] == [key.id]
    assert tfe.ssh_keys.read(key.id).name == "deploy"
    assert tfe.ssh_keys.update(key.id, SSHKeyUpdateOptions(name="deploy-2")).name == "deploy-2"
    shown = raw.request("GET", f"/api/v2/ssh-keys/{key.id}")
    assert "topsecret" not in shown.body.decode()
    # The key is in a Secret owned by the SshKey object (so it goes with the key).
    secrets = json.loads(_kubectl(terrace, "get", "secrets", "-n", org, "-o", "json"))["items"]
    owned = [
        s for s in secrets
        if any(o.get("kind") == "SshKey" for o in s["metadata"].get("ownerReferences", []))
    ]
    assert len(owned) == 1
    assert base64.b64decode(owned[0]["data"]["private-key"]).decode() == PEM

    ws = _ws(tfe, org)
    assigned = tfe.workspaces.assign_ssh_key(ws.id, WorkspaceAssignSSHKeyOptions(ssh_key_id=key.id))
    assert assigned.ssh_key is not None and assigned.ssh_key.id == key.id
    assert tfe.workspaces.read_by_id(ws.id).ssh_key.id == key.id
    unassigned = tfe.workspaces.unassign_ssh_key(ws.id)
    assert unassigned.ssh_key is None
    raw_doc = raw.request("GET", f"/api/v2/workspaces/{ws.id}").json
    assert raw_doc["data"]["relationships"]["ssh-key"] == {"data": None}

    # The vendor schema's body shape works as well.
    resp = raw.request(
        "PATCH",
        f"/api/v2/workspaces/{ws.id}/relationships/ssh-key",
        body={"data": {"type": "ssh-keys", "id": key.id}},
    )
    assert resp.status == 200
    assert resp.json["data"]["relationships"]["ssh-key"]["data"]["id"] == key.id

    tfe.ssh_keys.delete(key.id)
    assert tfe.workspaces.read_by_id(ws.id).ssh_key is None
    with pytest.raises(NotFound):
        tfe.ssh_keys.read(key.id)


def test_ssh_key_of_another_organization_is_422(tfe, raw, org):
    """B10: the key must exist in the workspace's organization."""
    other_org = unique("org")
    from pytfe.models import OrganizationCreateOptions

    tfe.organizations.create(OrganizationCreateOptions(name=other_org, email=f"{other_org}@example.com"))
    foreign = _eventually(lambda: tfe.ssh_keys.create(other_org, SSHKeyCreateOptions(name="k", value=PEM)))
    ws = _ws(tfe, org)
    with pytest.raises(TFEError) as err:
        tfe.workspaces.assign_ssh_key(ws.id, WorkspaceAssignSSHKeyOptions(ssh_key_id=foreign.id))
    assert err.value.status == 422
    # Issue 11 (docs/api.md): any non-empty value is stored, as TFE does, and never
    # returned; an empty one is 422 on the value.
    odd = raw.request(
        "POST",
        f"/api/v2/organizations/{org}/ssh-keys",
        body={"data": {"type": "ssh-keys", "attributes": {"name": "k2", "value": "not a key"}}},
    )
    assert odd.status == 201
    assert "not a key" not in str(odd.json)
    bad = raw.request(
        "POST",
        f"/api/v2/organizations/{org}/ssh-keys",
        body={"data": {"type": "ssh-keys", "attributes": {"name": "k3", "value": ""}}},
    )
    assert bad.status == 422
    assert bad.json["errors"][0]["source"]["pointer"] == "/data/attributes/value"


def test_ssh_key_assignment_needs_admin(tfe, tfe_with_token, org, token_for):
    """B10 needs admin on the workspace: a reader is refused."""
    key = tfe.ssh_keys.create(org, SSHKeyCreateOptions(name="deploy", value=PEM))
    ws = _ws(tfe, org)
    reader = tfe_with_token(token_for("terrace-workspace-reader"))
    with pytest.raises(AuthError):
        reader.workspaces.assign_ssh_key(ws.id, WorkspaceAssignSSHKeyOptions(ssh_key_id=key.id))


# --- data retention (B20–B22) ------------------------------------------------------------


def test_data_retention_policies(tfe, raw, org):
    """B20 shows the workspace's policy or the organization default; B21 sets either
    variant (POST, and the legacy PATCH); B22 removes the workspace's own."""
    ws = _ws(tfe, org)
    assert tfe.workspaces.read_data_retention_policy(ws.id) is None
    assert tfe.workspaces.read_data_retention_policy_choice(ws.id) is None

    older = tfe.workspaces.set_data_retention_policy_delete_older(
        ws.id, DataRetentionPolicyDeleteOlderSetOptions(delete_older_than_n_days=30)
    )
    assert older.id.startswith("drp-") and older.delete_older_than_n_days == 30
    read = tfe.workspaces.read_data_retention_policy(ws.id)
    assert (read.id, read.delete_older_than_n_days) == (older.id, 30)
    choice = tfe.workspaces.read_data_retention_policy_choice(ws.id)
    assert choice.data_retention_policy_delete_older.delete_older_than_n_days == 30

    dont = tfe.workspaces.set_data_retention_policy_dont_delete(ws.id)
    assert dont.id.startswith("drp-") and dont.id != older.id
    choice = tfe.workspaces.read_data_retention_policy_choice(ws.id)
    assert choice.data_retention_policy_dont_delete is not None

    legacy = tfe.workspaces.set_data_retention_policy(ws.id, DataRetentionPolicySetOptions(delete_older_than_n_days=7))
    assert legacy.delete_older_than_n_days == 7

    tfe.organizations.set_data_retention_policy_dont_delete(org, DataRetentionPolicyDontDeleteSetOptions())
    tfe.workspaces.delete_data_retention_policy(ws.id)
    doc = raw.request("GET", f"/api/v2/workspaces/{ws.id}/relationships/data-retention-policy").json
    assert doc["data"]["type"] == "data-retention-policy-dont-deletes"
    assert doc["data"]["relationships"]["target"]["data"] == {"id": org, "type": "organizations"}
    org_doc = raw.request("GET", f"/api/v2/organizations/{org}/relationships/data-retention-policy")
    assert org_doc.json["data"]["type"] == "data-retention-policy-dont-deletes"
    assert raw.request("DELETE", f"/api/v2/organizations/{org}/relationships/data-retention-policy").status == 204
    assert tfe.workspaces.read_data_retention_policy(ws.id) is None

    bad = raw.request(
        "POST",
        f"/api/v2/workspaces/{ws.id}/relationships/data-retention-policy",
        body={"data": {"type": "data-retention-policy-delete-olders", "attributes": {"delete-older-than-n-days": 0}}},
    )
    assert bad.status == 422
    assert bad.json["errors"][0]["source"]["pointer"] == "/data/attributes/delete-older-than-n-days"


# --- agent pools and OAuth tokens as references ----------------------------------------------


def test_agent_pool_and_oauth_token_references(tfe, raw, org, terrace):
    """agent-pool-id must name an AgentPool of the organization, vcs-repo.oauth-token-id an
    OAuthToken of it (422 otherwise); both are readable through the API."""
    pool_id = "apool-" + unique("p")[-10:].upper().ljust(16, "0")[:16]
    token_id = "ot-" + unique("t")[-10:].upper().ljust(16, "0")[:16]
    manifest = f"""apiVersion: terrace.dev/v1alpha1
kind: AgentPool
metadata:
  name: pool
  namespace: {org}
  labels: {{terrace.dev/id: {pool_id}}}
spec:
  name: pool
---
apiVersion: terrace.dev/v1alpha1
kind: OAuthToken
metadata:
  name: gh
  namespace: {org}
  labels: {{terrace.dev/id: {token_id}}}
spec:
  serviceProvider: github
"""
    _kubectl(terrace, "apply", "-f", "-", stdin=manifest)
    pool = _eventually(lambda: tfe.agent_pools.read(pool_id))
    assert pool.name == "pool"
    assert [p.id for p in tfe.agent_pools.list(org)] == [pool_id]
    assert tfe.oauth_tokens.read(token_id).id == token_id
    assert [t.id for t in tfe.oauth_tokens.list(org)] == [token_id]

    ok = raw.create_workspace(org, {"name": unique("agent"), "execution-mode": "agent", "agent-pool-id": pool_id})
    assert ok.status == 201, ok.json
    bad = raw.create_workspace(
        org, {"name": unique("agent"), "execution-mode": "agent", "agent-pool-id": "apool-Missing000000001"}
    )
    assert bad.status == 422
    assert bad.json["errors"][0]["source"]["pointer"] == "/data/attributes/agent-pool-id"

    vcs = raw.create_workspace(
        org, {"name": unique("vcs"), "vcs-repo": {"identifier": "acme/app", "oauth-token-id": token_id}}
    )
    assert vcs.status == 201, vcs.json
    bad = raw.create_workspace(
        org, {"name": unique("vcs"), "vcs-repo": {"identifier": "acme/app", "oauth-token-id": "ot-Missing0000000001"}}
    )
    assert bad.status == 422
    assert "oauth" in bad.error_details
    upd = raw.update_workspace(
        vcs.json["data"]["id"], {"vcs-repo": {"identifier": "acme/app", "oauth-token-id": "ot-Missing0000000001"}}
    )
    assert upd.status == 422
