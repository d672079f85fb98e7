"""The fixtures themselves, and what pytfe needs before any resource call.

The first tests are not marked `workspaces`: they must pass today (server starts,
writes its endpoints and token, answers, and stops on SIGTERM at session end).
"""

from __future__ import annotations

import re

import pytest
from pytfe.errors import AuthError


def test_endpoints_file_names_both_loopback_urls(terrace):
    """`terrace dev` wrote endpoints.json with the URLs it serves: the JSON:API over plain
    HTTP, the simulated Kubernetes API over HTTPS (kubectl sends tokens only over TLS)."""
    for scheme, url in (("http", terrace.api), ("https", terrace.kube)):
        match = re.fullmatch(scheme + r"://127\.0\.0\.1:(\d+)", url)
        assert match, url
        assert int(match.group(1)) > 0
    assert terrace.api != terrace.kube
    assert terrace.token
    assert terrace.kubeconfig.is_file()


def test_ping_answers_204_with_tfe_api_version_header(raw):
    """TFE: GET /api/v2/ping is 204 and carries TFP-API-Version (go-tfe reads it at start)."""
    resp = raw.request("GET", "/api/v2/ping")
    assert resp.status == 204
    headers = {k.lower(): v for k, v in resp.headers.items()}
    assert "tfp-api-version" in headers


def test_service_discovery_points_tfe_v2_at_api_v2(raw):
    """TFE: /.well-known/terraform.json maps tfe.v2 to /api/v2/ (the CLI's discovery)."""
    resp = raw.request("GET", "/.well-known/terraform.json", token=None)
    assert resp.status == 200
    assert resp.json["tfe.v2"] == "/api/v2/"


@pytest.mark.workspaces
def test_missing_token_is_401_for_pytfe(tfe_with_token, org):
    """TFE: a request without a token is 401, which pytfe raises as AuthError."""
    anonymous = tfe_with_token("")
    with pytest.raises(AuthError) as err:
        list(anonymous.workspaces.list(org))
    assert err.value.status == 401


@pytest.mark.workspaces
def test_rejected_token_is_401_for_pytfe(tfe_with_token, org):
    """TFE: an unknown token is 401 (AuthError), never 404 or 500."""
    stranger = tfe_with_token("not-a-token-terrace-ever-issued")
    with pytest.raises(AuthError) as err:
        list(stranger.workspaces.list(org))
    assert err.value.status == 401


@pytest.mark.workspaces
def test_error_documents_are_jsonapi_errors(raw, org):
    """TFE/DESIGN §5: errors are `{"errors":[{"status","title","detail"}]}` in vnd.api+json.

    pytfe builds its exception message from errors[0].detail (then title), so both
    must be non-empty strings.
    """
    control = raw.create_workspace(org, {"name": "exists"})
    assert control.status == 201  # the route exists; the 404 below is about the workspace
    resp = raw.request("GET", f"/api/v2/organizations/{org}/workspaces/does-not-exist")
    assert resp.status == 404
    assert resp.headers.get("Content-Type", resp.headers.get("content-type", "")).startswith(
        "application/vnd.api+json"
    )
    errors = resp.json["errors"]
    assert isinstance(errors, list) and errors
    assert errors[0]["status"] == "404"
    assert isinstance(errors[0]["title"], str) and errors[0]["title"]
    assert isinstance(errors[0]["detail"], str) and errors[0]["detail"]
