"""Helpers shared by the pytfe end-to-end tests.

Everything pytfe can do goes through pytfe. What it cannot (documents it refuses to
build, exact status codes and headers, `meta.pagination`, `links`) goes through
`RawApi`, a tiny `urllib.request` client that never raises on HTTP errors.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

JSONAPI = "application/vnd.api+json"


def unique(prefix: str) -> str:
    """A workspace/organization/project name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes
    json: Any = field(default=None)

    @property
    def error_details(self) -> str:
        """All `errors[].detail` / `title` strings joined, lowercased, for matching."""
        if not isinstance(self.json, dict):
            return ""
        parts = []
        for err in self.json.get("errors") or []:
            if isinstance(err, dict):
                parts.append(str(err.get("detail") or ""))
                parts.append(str(err.get("title") or ""))
        return " ".join(parts).lower()


class RawApi:
    """`urllib.request` client for the JSON:API, for requests pytfe cannot make."""

    def __init__(self, base: str, token: str | None, timeout: float = 30.0):
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | list[tuple[str, Any]] | None = None,
        body: Any = None,
        token: str | None = "",
        content_type: str = JSONAPI,
    ) -> RawResponse:
        """Send one request. `token=""` means the default token, `None` means none.

        `body` may be a dict/list (sent as JSON), bytes/str (sent as is) or None.
        Query parameters are encoded like pytfe (httpx) encodes them: brackets as
        %5B/%5D, spaces as `+`.
        """
        url = self.base + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data: bytes | None
        if body is None:
            data = None
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", JSONAPI)
        if data is not None:
            req.add_header("Content-Type", content_type)
        tok = self.token if token == "" else token
        if tok:
            req.add_header("Authorization", f"Bearer {tok}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, headers, raw = resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            status, headers, raw = err.code, dict(err.headers), err.read()
        parsed = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        return RawResponse(status=status, headers=headers, body=raw, json=parsed)

    # Convenience wrappers -------------------------------------------------------

    def create_workspace(
        self, org: str, attributes: dict[str, Any], relationships: dict | None = None
    ) -> RawResponse:
        data: dict[str, Any] = {"type": "workspaces", "attributes": attributes}
        if relationships is not None:
            data["relationships"] = relationships
        return self.request(
            "POST", f"/api/v2/organizations/{org}/workspaces", body={"data": data}
        )

    def update_workspace(self, ws_id: str, attributes: dict[str, Any]) -> RawResponse:
        return self.request(
            "PATCH",
            f"/api/v2/workspaces/{ws_id}",
            body={"data": {"type": "workspaces", "attributes": attributes}},
        )

    def list_workspaces(self, org: str, params: dict[str, Any] | None = None) -> RawResponse:
        return self.request("GET", f"/api/v2/organizations/{org}/workspaces", params=params)


def names(workspaces) -> list[str]:
    """Names of pytfe Workspace models (or raw JSON:API resource objects), in order."""
    out = []
    for w in workspaces:
        if isinstance(w, dict):
            out.append(w["attributes"]["name"])
        else:
            out.append(w.name)
    return out


def kubectl(terrace, *args: str, stdin: str | None = None) -> str:
    """Runs kubectl against `terrace dev` (its kubeconfig) and returns stdout; fails the
    test on a non-zero exit, skips it when kubectl is not installed."""
    import shutil
    import subprocess

    import pytest

    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    done = subprocess.run(
        [binary, "--kubeconfig", str(terrace.kubeconfig), *args],
        input=stdin.encode() if stdin is not None else None,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()
