"""Issue 5: module tests over the wire (SPEC.md area A). pytfe has no test-run API, so
everything goes through `_support.RawApi`: create a private registry module, a
configuration version, upload a real tar.gz built here (no auth header: the URL is the
credential), see the configuration version uploaded and a test run queued from it after
the automatic run's grace period (none when an explicit run claims the configuration
version first); test variables; cancel (202 until the run ends, 409 for a run that ended
on its own); paging and `filter[source]`.
"""

from __future__ import annotations

import io
import tarfile
import time

import pytest

from _support import RawApi, unique

pytestmark = pytest.mark.workspaces


def targz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, content in files.items():
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


ARCHIVE = {
    "main.tf": 'variable "region" {\n  type = string\n}\n',
    "tests/main.tftest.hcl": 'run "ok" {\n  command = plan\n}\n',
}


@pytest.fixture
def module(raw: RawApi, org: str) -> str:
    """Module `<unique>/aws` of the test's organization; answers the `{T}` path."""
    name = unique("mod")
    r = raw.request(
        "POST",
        f"/api/v2/organizations/{org}/registry-modules",
        body={"data": {"type": "registry-modules", "attributes": {"name": name, "provider": "aws"}}},
    )
    assert r.status == 201, r.body
    assert r.json["data"]["id"].startswith("mod-")
    shown = raw.request("GET", f"/api/v2/organizations/{org}/registry-modules/private/{org}/{name}/aws")
    assert shown.status == 200, shown.body
    return f"/api/v2/organizations/{org}/tests/registry-modules/private/{org}/{name}/aws"


def create_cv(raw: RawApi, t: str, auto_queue: bool | None = None) -> tuple[str, str]:
    attrs = {} if auto_queue is None else {"auto-queue-runs": auto_queue}
    r = raw.request(
        "POST",
        f"{t}/test-runs/configuration-versions",
        body={"data": {"type": "configuration-versions", "attributes": attrs}},
    )
    assert r.status == 201, r.body
    a = r.json["data"]["attributes"]
    assert a["status"] == "pending"
    assert a["auto-queue-runs"] is (True if auto_queue is None else auto_queue)
    url = a["upload-url"]
    assert "/api/v2/uploads/v1/object/" in url
    return r.json["data"]["id"], url[url.index("/api/v2/"):]


def upload(raw: RawApi, path: str, body: bytes) -> int:
    return raw.request(
        "PUT", path, body=body, token=None, content_type="application/octet-stream"
    ).status


def wait_for(what: str, probe, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"never saw {what}")


def runs(raw: RawApi, t: str, params=None) -> dict:
    r = raw.request("GET", f"{t}/test-runs", params=params)
    assert r.status == 200, r.body
    return r.json


def create_run(raw: RawApi, t: str, cv: str, attrs: dict | None = None):
    return raw.request(
        "POST",
        f"{t}/test-runs",
        body={
            "data": {
                "type": "test-runs",
                "attributes": attrs or {},
                "relationships": {
                    "configuration-version": {"data": {"type": "configuration-versions", "id": cv}}
                },
            }
        },
    )


def test_upload_queues_a_run_and_the_url_works_once(raw, module):
    cv, path = create_cv(raw, module)
    archive = targz(ARCHIVE)
    assert upload(raw, path, archive) == 200
    assert upload(raw, path, archive) == 404
    # The automatic run follows the upload after a grace period (terrace dev: 5 s).
    queued = wait_for(
        "a run queued by the upload",
        lambda: [
            d for d in runs(raw, module)["data"]
            if d["attributes"]["source"] == "svc-configuration-version"
        ],
    )
    assert len(queued) == 1
    run = queued[0]
    assert run["relationships"]["configuration-version"]["data"]["id"] == cv
    a = run["attributes"]
    assert a["test-directory"] == "tests"
    # A capability URL of this run: readable without a token (go-tfe sends none).
    assert f"/api/v2/test-runs/{run['id']}/log/" in a["log-read-url"]
    # An explicit run on the uploaded configuration version, shown with every attribute.
    r = create_run(raw, module, cv, {"verbose": True, "filters": ["tests/main.tftest.hcl"],
                                     "variables": [{"key": "region", "value": '"eu-west-1"'}]})
    assert r.status == 201, r.body
    shown = raw.request("GET", f"{module}/test-runs/{r.json['data']['id']}")
    assert shown.status == 200
    a = shown.json["data"]["attributes"]
    for key in ("status", "status-timestamps", "test-status", "tests-passed", "tests-failed",
                "tests-errored", "tests-skipped", "source", "verbose", "test-directory",
                "filters", "variables", "log-read-url", "created-at"):
        assert key in a, key
    assert a["source"] == "svc-api"
    assert a["variables"] == [{"key": "region", "value": '"eu-west-1"'}]
    assert "created-by" in shown.json["data"]["relationships"]
    logs = raw.request("GET", a["log-read-url"][a["log-read-url"].index("/api/v2/"):],
                       params={"limit": 65536, "offset": 0})
    assert logs.status == 200


def test_bad_archive_and_bad_runs(raw, module):
    cv, path = create_cv(raw, module, auto_queue=True)
    assert upload(raw, path, b"this is not a tar.gz") == 200
    r = create_run(raw, module, cv)
    assert r.status == 422
    assert "not uploaded" in r.error_details
    r = raw.request("POST", f"{module}/test-runs", body={"data": {"type": "test-runs"}})
    assert r.status == 422
    assert r.json["errors"][0]["source"]["pointer"] == "/data/relationships/configuration-version/data/id"
    r = create_run(raw, module, "cv-doesnotexist0000")
    assert r.status == 422
    assert r.json["errors"][0]["source"]["pointer"] == "/data/relationships/configuration-version/data/id"
    assert runs(raw, module)["meta"]["pagination"]["total-count"] == 0
    # Unknown module / organization: 404.
    assert raw.request("GET", module.replace("/aws", "/gcp") + "/test-runs").status == 404


def test_an_explicit_run_within_the_grace_period_replaces_the_automatic_one(raw, module):
    """A3 with the CLI's sequence: upload (auto-queue-runs on), then an explicit run at once:
    exactly one run, also after the automatic run's grace period."""
    cv, path = create_cv(raw, module)
    assert upload(raw, path, targz(ARCHIVE)) == 200
    r = create_run(raw, module, cv)
    assert r.status == 201, r.body
    time.sleep(7.0)  # past terrace dev's default grace period of 5 s
    listed = runs(raw, module)
    assert listed["meta"]["pagination"]["total-count"] == 1, listed
    assert listed["data"][0]["id"] == r.json["data"]["id"]
    assert listed["data"][0]["attributes"]["source"] == "svc-api"


def test_cancel_of_a_run_that_ended_on_its_own_is_409(raw, module):
    cv, path = create_cv(raw, module, auto_queue=False)
    assert upload(raw, path, targz(ARCHIVE)) == 200
    r = create_run(raw, module, cv)
    assert r.status == 201, r.body
    run = r.json["data"]["id"]
    _wait_status(raw, module, run, {"finished"})
    c = raw.request("POST", f"{module}/test-runs/{run}/cancel")
    assert c.status == 409, c.body
    assert "not running" in c.error_details
    assert raw.request("POST", f"{module}/test-runs/trun-nope/cancel").status == 404


def test_cancel_of_a_pending_run_ends_it_without_a_pod(raw, module, terrace):
    """A6: a run waiting for its inputs (here: a TestRun applied with kubectl naming a
    configuration version that does not exist) is canceled at once (202), ends canceled
    without ever having a Pod, and a second cancel (the CLI's second Ctrl-C) is 202 too."""
    import json

    from _support import kubectl

    org = module.split("/")[4]
    name = module.split("/")[-2]
    modules = json.loads(kubectl(terrace, "get", "registrymodules", "-n", org, "-o", "json"))["items"]
    obj = [m["metadata"]["name"] for m in modules if m["spec"]["name"] == name]
    assert len(obj) == 1, modules
    run_obj = unique("pending")
    kubectl(terrace, "apply", "-f", "-", stdin=f"""apiVersion: terrace.dev/v1alpha1
kind: TestRun
metadata:
  name: {run_obj}
  namespace: {org}
spec:
  module: {obj[0]}
  configurationVersion: no-such-cv
""")
    listed = wait_for("the kubectl run in the API", lambda: runs(raw, module)["data"])
    run_id = listed[0]["id"]
    assert listed[0]["attributes"]["status"] == "pending"
    c = raw.request("POST", f"{module}/test-runs/{run_id}/cancel")
    assert c.status == 202, c.body
    a = _wait_status(raw, module, run_id, {"canceled", "errored", "finished"}, 30)["attributes"]
    assert a["status"] == "canceled", a
    assert a["status-timestamps"].get("canceled-at")
    assert "started-at" not in a["status-timestamps"]
    pods = kubectl(terrace, "get", "pods", "-n", org, "-l", f"terrace.dev/test-run={run_id}", "-o", "name")
    assert pods.strip() == ""
    assert raw.request("POST", f"{module}/test-runs/{run_id}/cancel").status == 202


def test_paging_and_filter_source(raw, module):
    cv, path = create_cv(raw, module, auto_queue=False)
    assert upload(raw, path, targz(ARCHIVE)) == 200
    for _ in range(3):
        assert create_run(raw, module, cv).status == 201
    page = runs(raw, module, {"page[size]": 2, "page[number]": 2})
    assert len(page["data"]) == 1
    assert page["meta"]["pagination"]["total-count"] == 3
    assert page["meta"]["pagination"]["total-pages"] == 2
    assert runs(raw, module)["meta"]["pagination"]["page-size"] == 20
    assert runs(raw, module, {"filter[source]": "tfe-api"})["meta"]["pagination"]["total-count"] == 3
    assert runs(raw, module, {"filter[source]": "engine,svc-configuration-version"})["data"] == []
    bad = raw.request("GET", f"{module}/test-runs", params={"filter[source]": "nope"})
    assert bad.status == 400


def test_variables(raw, module):
    vars_path = f"{module}/vars"
    r = raw.request("POST", vars_path, body={"data": {"type": "vars", "attributes": {
        "key": "TF_VAR_region", "value": "eu", "category": "env"}}})
    assert r.status == 201, r.body
    var = r.json["data"]["id"]
    v1 = r.json["data"]["attributes"]["version-id"]
    r = raw.request("PATCH", f"{vars_path}/{var}", body={"data": {"type": "vars", "attributes": {
        "sensitive": True, "value": "hunter2"}}})
    assert r.status == 200, r.body
    assert r.json["data"]["attributes"]["value"] == ""
    assert r.json["data"]["attributes"]["version-id"] != v1
    listed = raw.request("GET", vars_path)
    assert listed.status == 200
    assert b"hunter2" not in listed.body
    r = raw.request("PATCH", f"{vars_path}/{var}", body={"data": {"type": "vars", "attributes": {
        "sensitive": False}}})
    assert r.status == 422
    r = raw.request("POST", vars_path, body={"data": {"type": "vars", "attributes": {
        "key": "9bad", "category": "terraform"}}})
    assert r.status == 422
    pointers = sorted(e["source"]["pointer"] for e in r.json["errors"])
    assert pointers == ["/data/attributes/category", "/data/attributes/key"]
    assert raw.request("DELETE", f"{vars_path}/{var}").status == 204
    assert raw.request("GET", vars_path).json["data"] == []


# --- runs executed in Pods (terrace dev --engine = conftest's FAKE_ENGINE) ------------


def _run(raw: RawApi, t: str, run_id: str) -> dict:
    r = raw.request("GET", f"{t}/test-runs/{run_id}")
    assert r.status == 200, r.body
    return r.json["data"]


def _wait_status(raw, t, run_id, statuses, timeout=60.0):
    return wait_for(
        f"run {run_id} in {statuses}",
        lambda: (lambda d: d if d["attributes"]["status"] in statuses else None)(_run(raw, t, run_id)),
        timeout,
    )


def _uploaded_cv(raw, t):
    cv, path = create_cv(raw, t, auto_queue=False)
    assert upload(raw, path, targz(ARCHIVE)) == 200
    wait_for("uploaded cv", lambda: raw.request("GET", f"{t}/test-runs").status == 200)
    return cv


def test_a_run_executes_in_a_pod_and_reports_pass_counts(raw, module):
    """A1/A5 end to end: the test Pod fetches the archive, runs the engine, and the run
    finishes with test-status pass and the engine's counts; logs are readable."""
    cv = _uploaded_cv(raw, module)
    r = wait_for("a run on the uploaded cv", lambda: (lambda x: x if x.status == 201 else None)(create_run(raw, module, cv)))
    run_id = r.json["data"]["id"]
    done = _wait_status(raw, module, run_id, {"finished", "errored"})
    a = done["attributes"]
    assert a["status"] == "finished", a
    assert a["test-status"] == "pass"
    assert (a["tests-passed"], a["tests-failed"], a["tests-errored"], a["tests-skipped"]) == (2, 0, 0, 0)
    assert a["status-timestamps"].get("finished-at")
    log = raw.request("GET", a["log-read-url"][a["log-read-url"].index("/api/v2/"):])
    assert log.status == 200
    assert b"engine args:" in log.body and b"test" in log.body


def test_filters_and_variables_reach_the_engine_and_fail_is_reported(raw, module):
    r = raw.request("POST", f"{module}/vars", body={"data": {"type": "vars", "attributes": {
        "key": "REGION", "value": "eu-west-1", "category": "env"}}})
    assert r.status == 201, r.body
    cv = _uploaded_cv(raw, module)
    r = wait_for("run created", lambda: (lambda x: x if x.status == 201 else None)(create_run(
        raw, module, cv, {"filters": ["tests/fail.tftest.hcl"], "verbose": True,
                          "variables": [{"key": "region", "value": "\"us-east-1\""}]})))
    run_id = r.json["data"]["id"]
    a = _wait_status(raw, module, run_id, {"finished", "errored"})["attributes"]
    assert a["status"] == "finished", a
    assert a["test-status"] == "fail"
    assert (a["tests-passed"], a["tests-failed"]) == (1, 1)
    log = raw.request("GET", a["log-read-url"][a["log-read-url"].index("/api/v2/"):]).body
    assert b"-filter" in log and b"tests/fail.tftest.hcl" in log and b"-verbose" in log, log
    assert b"REGION=eu-west-1" in log, log
    assert b'region = "us-east-1"' in log, log


def test_cancel_interrupts_the_engine(raw, module):
    """A6: cancel while running is 202 and the engine gets an interrupt; the run ends
    canceled. A second cancel, after the run ended, is still accepted (terraform's second
    Ctrl-C cancels again and would report an error otherwise)."""
    cv = _uploaded_cv(raw, module)
    r = wait_for("run created", lambda: (lambda x: x if x.status == 201 else None)(create_run(
        raw, module, cv, {"filters": ["tests/slow.tftest.hcl"]})))
    run_id = r.json["data"]["id"]
    running = _wait_status(raw, module, run_id, {"running"})["attributes"]
    # The engine has set its interrupt handler once its live log says it runs: an
    # interrupt a moment earlier (the run is `running` as its Pod starts, before the
    # engine's first line on a loaded machine) finds none, as a real engine's would.
    live = running["log-read-url"][running["log-read-url"].index("/api/v2/"):]
    wait_for("the engine running", lambda: b"engine is running slowly" in raw.request("GET", live).body)
    c = raw.request("POST", f"{module}/test-runs/{run_id}/cancel")
    assert c.status == 202, c.body
    a = _wait_status(raw, module, run_id, {"canceled", "errored", "finished"})["attributes"]
    assert a["status"] == "canceled", a
    assert a["status-timestamps"].get("canceled-at")
    # The Pod is gone after the cancel; the log comes from the operator's archive.
    log = raw.request("GET", a["log-read-url"][a["log-read-url"].index("/api/v2/"):])
    assert log.status == 200
    assert b"engine saw the interrupt" in log.body, log.body
    assert log.body.endswith(b"\x03"), log.body
    assert raw.request("POST", f"{module}/test-runs/{run_id}/cancel").status == 202


def _testrun_object(terrace, org: str, run_id: str) -> dict:
    """The TestRun custom resource of `run_id` (its status carries the message)."""
    import json

    from _support import kubectl

    items = json.loads(kubectl(terrace, "get", "testruns", "-n", org, "-o", "json"))["items"]
    found = [i for i in items if i.get("status", {}).get("id") == run_id]
    assert len(found) == 1, [i.get("status", {}).get("id") for i in items]
    return found[0]


def _running_run(raw, module, filt: str) -> str:
    cv = _uploaded_cv(raw, module)
    r = wait_for("run created", lambda: (lambda x: x if x.status == 201 else None)(create_run(
        raw, module, cv, {"filters": [filt]})))
    run_id = r.json["data"]["id"]
    _wait_status(raw, module, run_id, {"running"})
    return run_id


def test_force_cancel_ends_a_run_whose_engine_ignores_the_cancel(raw, module):
    """A6: the engine traps the interrupt and keeps going; force-cancel (allowed only after
    a cancel) removes the Pod at once and the run ends canceled with force-canceled-at."""
    run_id = _running_run(raw, module, "tests/stubborn.tftest.hcl")
    c = raw.request("POST", f"{module}/test-runs/{run_id}/cancel")
    assert c.status == 202, c.body
    time.sleep(1.0)
    # The interrupt was ignored: still running.
    assert _run(raw, module, run_id)["attributes"]["status"] == "running"
    f = raw.request("POST", f"{module}/test-runs/{run_id}/force-cancel")
    assert f.status == 202, f.body
    a = _wait_status(raw, module, run_id, {"canceled", "errored", "finished"}, 30)["attributes"]
    assert a["status"] == "canceled", a
    assert a["status-timestamps"].get("force-canceled-at"), a["status-timestamps"]


def test_force_cancel_without_a_cancel_first_is_409(raw, module):
    """A6: force-cancel of a running run that was never canceled is a conflict."""
    run_id = _running_run(raw, module, "tests/slow.tftest.hcl")
    f = raw.request("POST", f"{module}/test-runs/{run_id}/force-cancel")
    assert f.status == 409, f.body
    assert _run(raw, module, run_id)["attributes"]["status"] == "running"
    # Clean up: cancel it (the slow engine honours the interrupt).
    assert raw.request("POST", f"{module}/test-runs/{run_id}/cancel").status == 202
    assert _wait_status(raw, module, run_id, {"canceled", "errored", "finished"})["attributes"]["status"] == "canceled"


def test_upload_without_auto_queue_queues_no_run(raw, module):
    """A3: `auto-queue-runs: false` uploads the archive but queues nothing; the only run
    is the one created explicitly afterwards."""
    cv, path = create_cv(raw, module, auto_queue=False)
    assert upload(raw, path, targz(ARCHIVE)) == 200
    # A run can be created once the upload is processed: the configuration version is uploaded.
    r = wait_for("cv uploaded", lambda: (lambda x: x if x.status == 201 else None)(create_run(raw, module, cv)))
    time.sleep(1.5)
    listed = runs(raw, module)
    assert listed["meta"]["pagination"]["total-count"] == 1, listed
    assert listed["data"][0]["id"] == r.json["data"]["id"]


def test_a_pod_deleted_under_a_running_run_errors_it(raw, module, terrace):
    """A5: someone deletes the test Pod of a running run; the run ends errored and its
    TestRun says why."""
    from _support import kubectl

    run_id = _running_run(raw, module, "tests/slow.tftest.hcl")
    org = module.split("/")[4]
    kubectl(terrace, "delete", "pod", "-n", org, "-l", f"terrace.dev/test-run={run_id}", "--wait=false")
    a = _wait_status(raw, module, run_id, {"canceled", "errored", "finished"}, 30)["attributes"]
    assert a["status"] == "errored", a
    assert a["status-timestamps"].get("errored-at")
    message = _testrun_object(terrace, org, run_id)["status"].get("message") or ""
    assert "deleted" in message, message
