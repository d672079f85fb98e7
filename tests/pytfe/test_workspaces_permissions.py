"""Issue 3: the permission matrix. ServiceAccount tokens (`kubectl create token`) bound to
each of the chart's ClusterRoles in the organization's namespace — reader, locker,
workspace admin, owner — and one bound as owner in *another* organization's namespace,
against every workspace operation of B1–B9. Kubernetes RBAC decides; the API answers with
SPEC.md's codes (404 for what the caller may not see or lock, 403 for a forbidden force
delete), and `kubectl auth can-i` gives the same answers as the API.
"""

from __future__ import annotations

import pytest

from _support import kubectl, unique

pytestmark = pytest.mark.workspaces

ROLES = {
    "reader": "terrace-workspace-reader",
    "locker": "terrace-workspace-locker",
    "admin": "terrace-workspace-admin",
    "owner": "terrace-owner",
}


@pytest.fixture
def tokens(token_for, tfe, org):
    """Tokens per role in `org`, plus `other`: an owner of a different organization."""
    out = {who: token_for(role) for who, role in ROLES.items()}
    other_org = unique("other")
    from pytfe.models import OrganizationCreateOptions

    tfe.organizations.create(OrganizationCreateOptions(name=other_org, email="o@example.com"))
    out["other"] = token_for("terrace-owner", namespace=other_org)
    return out


def _ws(raw, org, name):
    r = raw.request("POST", f"/api/v2/organizations/{org}/workspaces",
                    body={"data": {"type": "workspaces", "attributes": {"name": name}}})
    assert r.status == 201, r.body
    return r.json["data"]["id"]


def _status(raw, token, method, path, body=None):
    return raw.request(method, path, body=body, token=token).status


def test_read_list_create_update_matrix(raw, org, tokens):
    ws = _ws(raw, org, unique("m"))
    show = f"/api/v2/workspaces/{ws}"
    listing = f"/api/v2/organizations/{org}/workspaces"
    update = {"data": {"type": "workspaces", "attributes": {"description": "changed"}}}
    expected = {
        #          show  list  create update
        "reader": (200, 200, 403, 403),
        "locker": (200, 200, 403, 403),
        "admin": (200, 200, 403, 200),
        "owner": (200, 200, 201, 200),
        "other": (404, 404, 404, 404),
    }
    for who, (s_show, s_list, s_create, s_update) in expected.items():
        t = tokens[who]
        assert _status(raw, t, "GET", show) == s_show, who
        r = raw.request("GET", listing, token=t)
        assert r.status == s_list, who
        if s_list == 200:
            assert ws in [d["id"] for d in r.json["data"]], who
        create = {"data": {"type": "workspaces", "attributes": {"name": unique(who)}}}
        assert _status(raw, t, "POST", listing, create) == s_create, who
        assert _status(raw, t, "PATCH", show, update) == s_update, who
    # Without any token: 401.
    assert raw.request("GET", show, token=None).status == 401


def test_lock_unlock_force_unlock_matrix(raw, org, tokens):
    ws = _ws(raw, org, unique("l"))
    base = f"/api/v2/workspaces/{ws}/actions"
    # Lock needs `lock`: the reader and the other organization's owner get 404.
    for who in ("reader", "other"):
        assert _status(raw, tokens[who], "POST", f"{base}/lock", {"reason": "x"}) == 404, who
    for who in ("locker", "admin", "owner"):
        assert _status(raw, tokens[who], "POST", f"{base}/lock", {"reason": who}) == 200, who
        # Someone else's lock: unlock is 409 naming the holder.
        other = "owner" if who != "owner" else "locker"
        r = raw.request("POST", f"{base}/unlock", token=tokens[other])
        assert r.status == 409, (who, r.body)
        assert "is locked by User" in r.json["errors"][0]["detail"]
        assert _status(raw, tokens[who], "POST", f"{base}/unlock") == 200, who
    # Force unlock needs admin: the locker gets 404 even though it may lock.
    assert _status(raw, tokens["locker"], "POST", f"{base}/lock", {}) == 200
    assert _status(raw, tokens["locker"], "POST", f"{base}/force-unlock") == 404
    assert _status(raw, tokens["reader"], "POST", f"{base}/force-unlock") == 404
    assert _status(raw, tokens["admin"], "POST", f"{base}/force-unlock") == 200
    assert _status(raw, tokens["admin"], "POST", f"{base}/force-unlock") == 409


def test_delete_matrix_and_the_organization_setting(raw, org, tokens, tfe):
    # Safe delete: admin and owner; the others 404.
    for who, want in (("reader", 404), ("locker", 404), ("other", 404), ("admin", 204)):
        ws = _ws(raw, org, unique("sd"))
        assert _status(raw, tokens[who], "POST", f"/api/v2/workspaces/{ws}/actions/safe-delete") == want, who
    # Force delete: only owners by default (403 for readers who can see it).
    for who, want in (("reader", 403), ("locker", 403), ("admin", 403), ("other", 404), ("owner", 204)):
        ws = _ws(raw, org, unique("fd"))
        assert _status(raw, tokens[who], "DELETE", f"/api/v2/workspaces/{ws}") == want, who
    # The organization lets workspace admins force delete.
    r = raw.request("PATCH", f"/api/v2/organizations/{org}", body={"data": {
        "type": "organizations", "attributes": {"allow-force-delete-workspaces": True}}})
    assert r.status == 200, r.body
    ws = _ws(raw, org, unique("fd"))
    assert _status(raw, tokens["admin"], "DELETE", f"/api/v2/workspaces/{ws}") == 204
    ws = _ws(raw, org, unique("fd"))
    assert _status(raw, tokens["locker"], "DELETE", f"/api/v2/workspaces/{ws}") == 403


def test_permissions_attribute_follows_rbac(raw, org, tokens):
    ws = _ws(raw, org, unique("p"))
    want = {
        "reader": {"can-update": False, "can-lock": False, "can-force-unlock": False, "can-force-delete": False},
        "locker": {"can-update": False, "can-lock": True, "can-force-unlock": False, "can-force-delete": False},
        "admin": {"can-update": True, "can-lock": True, "can-force-unlock": True, "can-force-delete": False},
        "owner": {"can-update": True, "can-lock": True, "can-force-unlock": True, "can-force-delete": True},
    }
    for who, flags in want.items():
        r = raw.request("GET", f"/api/v2/workspaces/{ws}", token=tokens[who])
        perms = r.json["data"]["attributes"]["permissions"]
        for flag, value in flags.items():
            assert perms[flag] is value, (who, flag, perms)


def test_kubectl_auth_can_i_agrees_with_the_api(terrace, org, raw, tokens):
    """`kubectl auth can-i lock workspaces -n ORG --as …` answers what the API does."""
    sa = unique("cani")
    kubectl(terrace, "create", "serviceaccount", sa, "-n", org)
    kubectl(terrace, "create", "rolebinding", sa, "-n", org,
            "--clusterrole=terrace-workspace-locker", f"--serviceaccount={org}:{sa}")
    who = f"system:serviceaccount:{org}:{sa}"
    import subprocess, shutil

    def can_i(verb: str) -> str:
        done = subprocess.run([shutil.which("kubectl") or "kubectl", "--kubeconfig", str(terrace.kubeconfig),
                               "auth", "can-i", verb, "workspaces.terrace.dev", "-n", org, "--as", who],
                              capture_output=True, timeout=60)
        return done.stdout.decode().strip()

    assert can_i("lock") == "yes"
    assert can_i("force-unlock") == "no"
    assert can_i("create") == "no"
    token = kubectl(terrace, "create", "token", sa, "-n", org).strip()
    ws = _ws(raw, org, unique("ci"))
    assert raw.request("POST", f"/api/v2/workspaces/{ws}/actions/lock", body={}, token=token).status == 200
    assert raw.request("POST", f"/api/v2/workspaces/{ws}/actions/force-unlock", token=token).status == 404
