"""Tests of the Helm chart (charts/terrace) and of the example manifests (examples/).

- `helm lint --strict` with the default values and with values-nondefault.yaml;
- `helm template` of both, every manifest (CRDs included) validated against the Kubernetes
  OpenAPI schemas with kubernetes-validate in strict mode (unknown fields are errors), for
  the oldest supported Kubernetes minor and a current one; the ServiceMonitor (not a
  built-in kind) is checked on its own;
- the properties the chart promises: least-privilege RBAC without wildcards, the rights
  each component's code uses, hardened security contexts, probes, replicas, PDBs, the
  leader election Lease, the environment contract with the terrace binary;
- values.schema.json rejects wrong values;
- every terrace.dev object in examples/ is valid against its CRD's openAPIV3Schema.

helm comes from $HELM, else PATH, else ./.tools/bin/helm (scripts/install-tools puts it
there). Without helm these tests fail: they must not pass by being skipped.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "terrace"
CRD_DIR = CHART / "crds"
EXAMPLES = ROOT / "examples"
NONDEFAULT = Path(__file__).resolve().parent / "values-nondefault.yaml"

RELEASE = "terrace"
NAMESPACE = "terrace-system"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the one the Rust
# code is built against (k8s-openapi feature v1_33).
KUBE_VERSIONS = ["1.30.0", "1.33.0"]
# Kinds that are not built into Kubernetes; checked by dedicated tests instead.
NON_BUILTIN_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}

VALUES = {"default": None, "nondefault": NONDEFAULT}


# --------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=None)
def helm() -> str:
    candidates = [os.environ.get("HELM"), shutil.which("helm"), str(ROOT / ".tools" / "bin" / "helm")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    pytest.fail(
        "helm not found ($HELM, PATH, ./.tools/bin/helm); run scripts/install-tools",
        pytrace=False,
    )


def run_helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120)


def template_args(values: Path | None, *extra: str) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        args += ["--values", str(values)]
    return [*args, *extra]


def render(values: Path | None, *extra: str) -> list[dict]:
    proc = run_helm(*template_args(values, *extra))
    assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@functools.lru_cache(maxsize=None)
def rendered(name: str) -> tuple[dict, ...]:
    return tuple(render(VALUES[name]))


def objects(docs, kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind: str, name_suffix: str) -> dict:
    found = [d for d in objects(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def component(docs, kind: str, comp: str) -> dict:
    found = [
        d
        for d in objects(docs, kind)
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == comp
    ]
    assert len(found) == 1, f"expected one {kind} of component {comp}, got {len(found)}"
    return found[0]


def containers(deploy: dict) -> list[dict]:
    spec = deploy["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def allows(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        for r in rules
    )


def rules_of(docs, kind: str, name: str) -> list[dict]:
    return one(docs, kind, name)["rules"]


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --------------------------------------------------------------------------- lint, render, schemas


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint_strict(values):
    args = ["lint", "--strict", str(CHART)]
    if VALUES[values] is not None:
        args += ["--values", str(VALUES[values])]
    proc = run_helm(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUES)
def test_rendered_manifests_validate_against_kubernetes_schemas(values, kube_version):
    docs = render(VALUES[values], "--include-crds", "--kube-version", kube_version)
    checked = 0
    errors = []
    for d in docs:
        if (d.get("apiVersion"), d.get("kind")) in NON_BUILTIN_KINDS:
            continue
        try:
            kubernetes_validate.validate(d, kube_version, strict=True)
            checked += 1
        except Exception as e:  # noqa: BLE001 - report every failing object at once
            errors.append(f"{d.get('kind')}/{d.get('metadata', {}).get('name')}: {e}")
    assert not errors, "\n".join(errors)
    assert checked >= 20, f"only {checked} objects validated"


def test_kubernetes_validate_rejects_unknown_fields():
    """The validation above would catch a misplaced key in a template."""
    deploy = copy.deepcopy(component(rendered("default"), "Deployment", "operator"))
    deploy["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deploy, KUBE_VERSIONS[-1], strict=True)


def test_every_object_is_labelled_and_namespaced():
    docs = rendered("nondefault")
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    for d in docs:
        labels = d["metadata"].get("labels", {})
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "helm.sh/chart", "app.kubernetes.io/managed-by"):
            assert key in labels, f"{d['kind']}/{d['metadata']['name']} lacks label {key}"
        if d["kind"] in cluster_scoped:
            assert "namespace" not in d["metadata"]
        else:
            assert d["metadata"].get("namespace") == NAMESPACE, f"{d['kind']}/{d['metadata']['name']}"


# --------------------------------------------------------------------------- RBAC


@pytest.mark.parametrize("values", VALUES)
def test_no_wildcards_in_rbac(values):
    roles = objects(rendered(values), "ClusterRole") + objects(rendered(values), "Role")
    assert len(roles) >= 7  # operator (2), api server, four user roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups", "resourceNames", "nonResourceURLs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: {field} has '*'"
                assert not any("*" in v for v in rule.get(field, [])), f"{role['metadata']['name']}: {rule}"
        assert "aggregationRule" not in role


def test_rbac_objects_are_plain():
    """Another test applies exactly these objects to a cluster: no hooks, no templating left."""
    for d in rendered("default"):
        if d["apiVersion"].startswith("rbac.authorization.k8s.io/"):
            assert "helm.sh/hook" not in d["metadata"].get("annotations", {})


TERRACE_KINDS = [
    "organizations",
    "projects",
    "workspaces",
    "registrymodules",
    "configurationversions",
    "testruns",
    "testvariables",
    "workspacevariables",
    "sshkeys",
    "agentpools",
    "oauthtokens",
    "stateversions",
    "runs",
    "variablesets",
    "notificationconfigurations",
    "moduleversions",
    "policysets",
    "policies",
]


def test_crd_plurals_match_rbac_kinds():
    plurals = set()
    for f in CRD_DIR.glob("*.yaml"):
        crd = yaml.safe_load(f.read_text())
        assert crd["spec"]["group"] == "terrace.dev"
        plurals.add(crd["spec"]["names"]["plural"])
    assert plurals == set(TERRACE_KINDS)


# (apiGroup, resource, verb) each component's code uses (see the comments in
# templates/rbac-*.yaml for where).
OPERATOR_NEEDS = [
    *[("terrace.dev", k, v) for k in TERRACE_KINDS for v in ("get", "list", "watch")],
    *[("terrace.dev", k, "patch") for k in TERRACE_KINDS if k != "organizations"],
    *[("terrace.dev", f"{k}/status", "patch") for k in TERRACE_KINDS],
    ("terrace.dev", "projects", "create"),
    ("terrace.dev", "testruns/finalizers", "update"),
    ("terrace.dev", "runs/finalizers", "update"),
    ("terrace.dev", "runs", "create"),
    ("terrace.dev", "testruns", "create"),  # automatic test runs
    ("terrace.dev", "runs", "delete"),  # history.rs: archived runs
    ("terrace.dev", "testruns", "delete"),  # history.rs: archived test runs
    ("", "namespaces", "create"),
    ("", "namespaces", "patch"),
    ("", "namespaces", "watch"),
    *[("", "pods", v) for v in ("get", "list", "watch", "create", "patch", "delete")],
    ("", "pods/log", "get"),
    # history.rs writes the archive's chunk Secrets with server-side apply (patch).
    *[("", "secrets", v) for v in ("get", "create", "patch", "delete")],
    ("", "configmaps", "get"),
    ("", "configmaps", "create"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
]

API_SERVER_NEEDS = [
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
    *[("terrace.dev", k, v) for k in TERRACE_KINDS for v in ("get", "list", "watch")],
    *[("terrace.dev", k, "create") for k in TERRACE_KINDS if k != "oauthtokens"],
    *[("terrace.dev", k, "patch") for k in ("organizations", "projects", "workspaces", "sshkeys", "agentpools", "variablesets", "notificationconfigurations", "testvariables", "workspacevariables", "configurationversions", "stateversions", "registrymodules", "policysets", "policies")],
    *[("terrace.dev", k, "delete") for k in ("organizations", "projects", "workspaces", "sshkeys", "agentpools", "variablesets", "notificationconfigurations", "testvariables", "workspacevariables", "stateversions", "registrymodules", "moduleversions", "policysets", "policies")],
    ("terrace.dev", "workspaces", "update"),
    ("terrace.dev", "testruns/finalizers", "update"),  # log parts owned by the test run
    *[("terrace.dev", f"{k}/status", "patch") for k in ("configurationversions", "testruns", "testvariables", "stateversions", "runs")],
    *[("", "secrets", v) for v in ("get", "create", "patch", "delete")],
    *[("", "configmaps", v) for v in ("get", "create", "patch", "delete")],
    ("", "pods/log", "get"),
    ("events.k8s.io", "events", "create"),
]


def test_operator_cluster_role_grants_what_the_controllers_use():
    rules = rules_of(rendered("default"), "ClusterRole", "terrace-operator")
    missing = [n for n in OPERATOR_NEEDS if not allows(rules, *n)]
    assert not missing, missing
    # Tight: no rights the operator has no use for (it reads one Secret by name, a
    # notification token; it never lists or watches them).
    for verb in ("list", "watch"):
        assert not allows(rules, "", "secrets", verb), f"operator may {verb} secrets"
    assert not allows(rules, "", "secrets", "update")
    assert not allows(rules, "terrace.dev", "workspaces", "delete")
    assert not allows(rules, "terrace.dev", "workspaces", "create")
    assert not allows(rules, "", "namespaces", "delete")
    assert not allows(rules, "authentication.k8s.io", "tokenreviews", "create")


def test_api_server_cluster_role_grants_what_the_handlers_use():
    rules = rules_of(rendered("default"), "ClusterRole", "terrace-api-server")
    missing = [n for n in API_SERVER_NEEDS if not allows(rules, *n)]
    assert not missing, missing
    # Secrets and ConfigMaps only by name: the API server never lists them.
    for res in ("secrets", "configmaps"):
        for verb in ("list", "watch"):
            assert not allows(rules, "", res, verb), f"api server may {verb} {res}"
    assert not allows(rules, "", "pods", "create")
    assert not allows(rules, "", "namespaces", "create")
    assert not allows(rules, "terrace.dev", "oauthtokens", "create")


@pytest.mark.parametrize("values", VALUES)
def test_leader_election_lease_role(values):
    docs = rendered(values)
    role = one(docs, "Role", "-operator-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    for verb in ("get", "create", "update"):
        assert allows(role["rules"], "coordination.k8s.io", "leases", verb), verb
    named = [r for r in role["rules"] if "resourceNames" in r and "leases" in r["resources"]]
    assert named and all(r["resourceNames"] == ["terrace-operator"] for r in named)
    # The uninstall hook scales the operator (only its Deployment) to zero.
    scale = [r for r in role["rules"] if "deployments/scale" in r["resources"]]
    operator = component(docs, "Deployment", "operator")["metadata"]["name"]
    assert scale == [{"apiGroups": ["apps"], "resources": ["deployments/scale"], "resourceNames": [operator], "verbs": ["patch"]}]
    binding = one(docs, "RoleBinding", "-operator-leader-election")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    sa = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]


@pytest.mark.parametrize("values", VALUES)
def test_bindings_point_at_rendered_roles_and_service_accounts(values):
    docs = rendered(values)
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    sas = {d["metadata"]["name"] for d in objects(docs, "ServiceAccount")}
    bindings = objects(docs, "ClusterRoleBinding") + objects(docs, "RoleBinding")
    assert len(bindings) == 3
    for b in bindings:
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) in roles
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["name"] in sas and s["namespace"] == NAMESPACE
    for comp in ("operator", "api-server"):
        sa = component(docs, "Deployment", comp)["spec"]["template"]["spec"]["serviceAccountName"]
        crb = one(docs, "ClusterRoleBinding", f"-{comp}")
        assert crb["subjects"][0]["name"] == sa
        assert crb["roleRef"]["name"] == crb["metadata"]["name"]


def test_rbac_create_false_renders_no_component_rbac():
    docs = render(None, "--set", "rbac.create=false")
    names = {d["metadata"]["name"] for d in docs if d["kind"] in ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")}
    assert names == {"terrace-owner", "terrace-workspace-admin", "terrace-workspace-locker", "terrace-workspace-reader"}


# --------------------------------------------------------------------------- user ClusterRoles


USER_ROLES_FILE = CHART / "files" / "user-clusterroles.yaml"
EXPECTED_AGGREGATION = {
    "terrace-owner": "rbac.authorization.k8s.io/aggregate-to-admin",
    "terrace-workspace-admin": "rbac.authorization.k8s.io/aggregate-to-edit",
    "terrace-workspace-locker": "rbac.authorization.k8s.io/aggregate-to-edit",
    "terrace-workspace-reader": "rbac.authorization.k8s.io/aggregate-to-view",
}


def test_user_cluster_roles_file_is_plain_yaml_for_the_binary():
    """terrace dev embeds the file and splits it on "\\n---\\n" (terrace/src/dev.rs)."""
    text = USER_ROLES_FILE.read_text()
    assert "{{" not in text
    docs = [yaml.safe_load(doc) for doc in text.split("\n---\n")]
    assert [d["kind"] for d in docs] == ["ClusterRole"] * 4
    for d in docs:
        kubernetes_validate.validate(d, KUBE_VERSIONS[-1], strict=True)
        labels = d["metadata"]["labels"]
        assert labels.get(EXPECTED_AGGREGATION[d["metadata"]["name"]]) == "true"


def test_user_cluster_roles_rendered_with_chart_labels_and_toggle():
    by_name = {d["metadata"]["name"]: d for d in objects(rendered("default"), "ClusterRole")}
    file_docs = {d["metadata"]["name"]: d for d in map(yaml.safe_load, USER_ROLES_FILE.read_text().split("\n---\n"))}
    for name, src in file_docs.items():
        out = by_name[name]
        assert out["rules"] == src["rules"]
        assert src["metadata"]["labels"].items() <= out["metadata"]["labels"].items()
        assert out["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    docs = render(None, "--set", "userClusterRoles.enabled=false")
    assert not set(file_docs) & {d["metadata"]["name"] for d in objects(docs, "ClusterRole")}


# What each user role may do (docs/rbac.md's table), row by row: (role, resource, verb,
# allowed). Every member of an organization reads its private registry, its versions
# and their test runs, as in HCP Terraform (issue 41 §5): the locker, the role of who
# runs terraform, installs modules with `terraform init`.
USER_ROLE_RIGHTS = [
    *[(role, kind, verb, True)
      for role in EXPECTED_AGGREGATION
      for kind in ("registrymodules", "moduleversions", "testruns")
      for verb in ("get", "list", "watch")],
    ("terrace-workspace-locker", "registrymodules", "create", False),
    ("terrace-workspace-locker", "moduleversions", "create", False),
    ("terrace-workspace-locker", "testruns", "create", False),
    ("terrace-workspace-locker", "testvariables", "list", False),
    ("terrace-workspace-reader", "registrymodules", "update", False),
    ("terrace-workspace-admin", "moduleversions", "delete", False),
    ("terrace-owner", "moduleversions", "delete", True),
    ("terrace-workspace-locker", "workspaces", "lock", True),
    ("terrace-workspace-locker", "workspaces", "read-state", True),
    ("terrace-workspace-locker", "workspaces", "update", False),
    ("terrace-workspace-locker", "workspacevariables", "get", False),
    ("terrace-workspace-reader", "workspaces", "read-state", False),
    ("terrace-workspace-reader", "workspaces", "read-outputs", True),
    ("terrace-workspace-admin", "workspaces", "force-unlock", True),
    ("terrace-workspace-admin", "workspaces", "create", False),
    ("terrace-owner", "workspaces", "manage", True),
]


@pytest.mark.parametrize(("role", "resource", "verb", "allowed"), USER_ROLE_RIGHTS)
def test_user_roles_grant_what_the_rbac_table_says(role, resource, verb, allowed):
    rules = rules_of(rendered("default"), "ClusterRole", role)
    assert allows(rules, "terrace.dev", resource, verb) == allowed, (role, resource, verb)


# --------------------------------------------------------------------------- workloads


@pytest.mark.parametrize("values", VALUES)
def test_security_contexts_on_every_pod_and_container(values):
    deployments = objects(rendered(values), "Deployment")
    assert len(deployments) == 2
    for deploy in deployments:
        pod = deploy["spec"]["template"]["spec"]
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True
        assert psc["seccompProfile"]["type"] == "RuntimeDefault"
        for c in containers(deploy):
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, c["name"]
            assert sc["runAsUser"] == 65532, c["name"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc["capabilities"]["drop"] == ["ALL"], c["name"]
            assert "add" not in sc["capabilities"]
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", c["name"]
            assert c["resources"].get("requests"), c["name"]


@pytest.mark.parametrize("values", VALUES)
def test_probes(values):
    docs = rendered(values)
    expect = {"operator": "metrics", "api-server": "http"}
    for comp, port_name in expect.items():
        c = component(docs, "Deployment", comp)["spec"]["template"]["spec"]["containers"][0]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port_name}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port_name}
        assert port_name in {p["name"] for p in c["ports"]}


@pytest.mark.parametrize(("values", "operator", "api"), [("default", 2, 2), ("nondefault", 3, 3)])
def test_replicas(values, operator, api):
    docs = rendered(values)
    assert component(docs, "Deployment", "operator")["spec"]["replicas"] == operator
    assert component(docs, "Deployment", "api-server")["spec"]["replicas"] == api


@pytest.mark.parametrize("values", VALUES)
def test_pod_disruption_budgets_select_their_deployment(values):
    docs = rendered(values)
    for comp in ("operator", "api-server"):
        pdb = component(docs, "PodDisruptionBudget", comp)
        deploy = component(docs, "Deployment", comp)
        pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
        assert matches(pdb["spec"]["selector"]["matchLabels"], pod_labels)
        assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
        assert ("minAvailable" in pdb["spec"]) != ("maxUnavailable" in pdb["spec"])


def test_no_pod_disruption_budget_for_a_single_replica():
    docs = render(None, "--set", "operator.replicas=1")
    assert [d["metadata"]["labels"]["app.kubernetes.io/component"] for d in objects(docs, "PodDisruptionBudget")] == ["api-server"]


@pytest.mark.parametrize("values", VALUES)
def test_no_service_links(values):
    for deploy in objects(rendered(values), "Deployment"):
        assert deploy["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_selectors_do_not_overlap_between_components():
    docs = rendered("default")
    op = component(docs, "Deployment", "operator")
    api = component(docs, "Deployment", "api-server")
    assert not matches(op["spec"]["selector"]["matchLabels"], api["spec"]["template"]["metadata"]["labels"])
    assert not matches(api["spec"]["selector"]["matchLabels"], op["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("values", VALUES)
def test_services_select_pods_and_name_their_ports(values):
    docs = rendered(values)
    api_svc = one(docs, "Service", "-api-server")
    api_pods = component(docs, "Deployment", "api-server")["spec"]["template"]["metadata"]["labels"]
    assert matches(api_svc["spec"]["selector"], api_pods)
    assert {p["name"]: p["targetPort"] for p in api_svc["spec"]["ports"]} == {"http": "http", "metrics": "metrics"}
    op_svc = one(docs, "Service", "-operator-metrics")
    op_pods = component(docs, "Deployment", "operator")["spec"]["template"]["metadata"]["labels"]
    assert matches(op_svc["spec"]["selector"], op_pods)
    assert not matches(op_svc["spec"]["selector"], api_pods)


# --------------------------------------------------------------------------- the binary's contract


def test_appversion_matches_cargo_and_default_image_tag():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == cargo["workspace"]["package"]["version"]
    assert chart["kubeVersion"] == ">=1.30.0-0"
    for comp in ("operator", "api-server"):
        c = component(rendered("default"), "Deployment", comp)["spec"]["template"]["spec"]["containers"][0]
        assert c["image"].endswith(":" + chart["appVersion"])
        assert c["command"] == ["/usr/local/bin/terrace"]
        assert c["args"] == [comp]


def test_operator_environment():
    docs = rendered("default")
    c = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(c)
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["TERRACE_LOG_FORMAT"]["value"] == "json"
    assert env["TERRACE_OPERATOR_METRICS_ADDR"]["value"] == "0.0.0.0:9090"
    assert env["TERRACE_ENGINE_IMAGE"]["value"] == "ghcr.io/opentofu/opentofu:1.10"
    assert env["TERRACE_ENGINE_COMMAND"]["value"] == "tofu"
    assert env["TERRACE_TEST_RUN_CONCURRENCY"]["value"] == "50"
    assert env["TERRACE_IMAGE"]["value"] == c["image"]
    svc = one(docs, "Service", "-api-server")
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    url = env["TERRACE_API_INTERNAL_URL"]["value"]
    assert url == f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:{port}"
    assert json.loads(env["TERRACE_TEST_POD_TEMPLATE"]["value"]) == {}
    # With the release installed as documented (`terrace` in `terrace-system`), the URL is
    # the operator's built-in default.
    settings = (ROOT / "operator" / "src" / "settings.rs").read_text()
    m = re.search(r'DEFAULT_API_INTERNAL_URL: &str\s*=\s*"([^"]+)"', settings)
    if m:
        assert url == m.group(1)


def test_runs_get_the_hostname_terrace_is_known_by():
    def hostname(*extra: str) -> str:
        docs = render(None, *extra)
        c = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]
        return env_of(c)["TERRACE_HOSTNAME"]["value"]

    assert hostname() == ""
    assert hostname("--set", "apiServer.ingress.enabled=true", "--set", "apiServer.ingress.host=tfe.example.com") == "tfe.example.com"
    assert hostname("--set", "apiServer.hostname=terrace.example.com") == "terrace.example.com"
    bad = run_helm(*template_args(None, "--set", "apiServer.hostname=https://x"))
    assert bad.returncode != 0, "a URL is not a hostname"


def test_operator_environment_nondefault():
    docs = rendered("nondefault")
    c = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(c)
    assert c["image"] == "registry.example.com/platform/terrace:0.1.0-rc.1"
    assert env["TERRACE_IMAGE"]["value"] == c["image"]
    assert env["TERRACE_ENGINE_IMAGE"]["value"] == "docker.io/hashicorp/terraform:1.9.8"
    assert env["TERRACE_ENGINE_COMMAND"]["value"] == "terraform"
    assert env["TERRACE_TEST_RUN_CONCURRENCY"]["value"] == "10"
    assert env["TERRACE_LOG_FORMAT"]["value"] == "text"
    assert env["TERRACE_API_INTERNAL_URL"]["value"] == f"http://tfe-api-server.{NAMESPACE}.svc:8080"
    template = json.loads(env["TERRACE_TEST_POD_TEMPLATE"]["value"])
    assert set(template) == {"labels", "annotations", "resources", "serviceAccountName", "nodeSelector", "tolerations"}
    assert template["serviceAccountName"] == "terrace-tests"
    assert template["resources"]["limits"] == {"memory": "2Gi"}
    assert template["tolerations"][0]["key"] == "dedicated"
    assert env["EXTRA"]["value"] == "1"
    pod = component(docs, "Deployment", "operator")["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"


S3_VALUES = [
    "--set", "blobStore.type=s3",
    "--set", "blobStore.s3.bucket=terrace-blobs",
    "--set", "blobStore.s3.prefix=/prod/",
    "--set", "blobStore.s3.endpoint=http://minio.storage.svc:9000",
    "--set", "blobStore.s3.region=eu-west-1",
    "--set", "blobStore.s3.pathStyle=true",
    "--set", "blobStore.s3.credentialsSecret=terrace-s3",
]


@pytest.mark.parametrize("comp", ["api-server", "operator"])
def test_s3_blob_store_environment(comp):
    """Both components get the same S3 settings, the credentials from the Secret."""
    docs = render(None, *S3_VALUES)
    env = env_of(component(docs, "Deployment", comp)["spec"]["template"]["spec"]["containers"][0])
    assert env["TERRACE_BLOB_STORE"]["value"] == "s3://terrace-blobs/prod"
    assert env["TERRACE_S3_ENDPOINT"]["value"] == "http://minio.storage.svc:9000"
    assert env["TERRACE_S3_REGION"]["value"] == "eu-west-1"
    assert env["TERRACE_S3_PATH_STYLE"]["value"] == "true"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[key]["valueFrom"]["secretKeyRef"] == {"name": "terrace-s3", "key": key}
    # Minimal: no endpoint, region, path style or Secret (workload identity).
    docs = render(None, "--set", "blobStore.type=s3", "--set", "blobStore.s3.bucket=b-1")
    env = env_of(component(docs, "Deployment", comp)["spec"]["template"]["spec"]["containers"][0])
    assert env["TERRACE_BLOB_STORE"]["value"] == "s3://b-1"
    for absent in ("TERRACE_S3_ENDPOINT", "TERRACE_S3_REGION", "TERRACE_S3_PATH_STYLE", "AWS_ACCESS_KEY_ID"):
        assert absent not in env
    # The default: the cluster store on both.
    env = env_of(component(rendered("default"), "Deployment", comp)["spec"]["template"]["spec"]["containers"][0])
    assert env["TERRACE_BLOB_STORE"]["value"] == "cluster"


def test_api_server_environment():
    env = env_of(component(rendered("default"), "Deployment", "api-server")["spec"]["template"]["spec"]["containers"][0])
    assert env["TERRACE_API_ADDR"]["value"] == "0.0.0.0:8080"
    assert env["TERRACE_API_METRICS_ADDR"]["value"] == "0.0.0.0:9090"
    assert env["TERRACE_EDITION"]["value"] == "self-hosted"
    assert env["TERRACE_DEFAULT_TERRAFORM_VERSION"]["value"] == "1.9.8"
    assert env["TERRACE_MAX_BODY_BYTES"]["value"] == "1048576"
    assert env["TERRACE_API_HEADER_READ_TIMEOUT"]["value"] == "30s"
    assert env["TERRACE_API_BODY_READ_TIMEOUT"]["value"] == "60s"
    assert env["TERRACE_API_BODY_MIN_RATE"]["value"] == "1024"
    assert env["TERRACE_API_IDLE_TIMEOUT"]["value"] == "120s"
    assert env["TERRACE_API_MAX_CONNECTIONS"]["value"] == "4096"
    assert env["TERRACE_BLOB_STORE"]["value"] == "cluster"
    assert env["TERRACE_LOG_FORMAT"]["value"] == "json"
    assert "TERRACE_BASE_URL" not in env
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"

    env = env_of(component(rendered("nondefault"), "Deployment", "api-server")["spec"]["template"]["spec"]["containers"][0])
    assert env["TERRACE_EDITION"]["value"] == "hosted"
    assert env["TERRACE_BASE_URL"]["value"] == "https://tfe.example.com"
    assert env["TERRACE_MAX_BODY_BYTES"]["value"] == "4194304"
    assert env["TERRACE_DEFAULT_TERRAFORM_VERSION"]["value"] == "1.10.0"
    assert env["TERRACE_API_HEADER_READ_TIMEOUT"]["value"] == "45s"
    assert env["TERRACE_API_BODY_READ_TIMEOUT"]["value"] == "2m"
    assert env["TERRACE_API_BODY_MIN_RATE"]["value"] == "4096"
    assert env["TERRACE_API_IDLE_TIMEOUT"]["value"] == "1m30s"
    assert env["TERRACE_API_MAX_CONNECTIONS"]["value"] == "1000"


# --------------------------------------------------------------------------- optional objects


def test_optional_objects_off_by_default():
    kinds = {d["kind"] for d in rendered("default")}
    assert not kinds & {"Ingress", "NetworkPolicy", "ServiceMonitor"}


def test_ingress_with_tls():
    ing = one(rendered("nondefault"), "Ingress", "-api-server")
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["spec"]["tls"] == [{"hosts": ["tfe.example.com"], "secretName": "tfe-example-com-tls"}]
    rule = ing["spec"]["rules"][0]
    assert rule["host"] == "tfe.example.com"
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "tfe-api-server", "port": {"name": "http"}}
    assert ing["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"


def test_ingress_tls_needs_a_secret():
    proc = run_helm(*template_args(None, "--set", "apiServer.ingress.enabled=true", "--set", "apiServer.ingress.host=x.example.com", "--set", "apiServer.ingress.tls.enabled=true"))
    assert proc.returncode != 0 and "secretName" in proc.stderr


def test_network_policies():
    docs = rendered("nondefault")
    api = component(docs, "NetworkPolicy", "api-server")
    op = component(docs, "NetworkPolicy", "operator")
    for np in (api, op):
        assert np["spec"]["policyTypes"] == ["Ingress"]  # egress left open (test Pods, kube API)
    api_rules = {r["ports"][0]["port"]: r for r in api["spec"]["ingress"]}
    assert set(api_rules) == {"http", "metrics"}
    # Every run and test Pod is admitted beside the peers the values list.
    assert api_rules["http"]["from"][0] == {
        "namespaceSelector": {"matchExpressions": [{"key": "terrace.dev/organization", "operator": "Exists"}]},
        "podSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "terrace"}},
    }
    assert len(api_rules["http"]["from"]) == 2
    metrics_from = api_rules["metrics"]["from"]
    assert metrics_from == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}, "podSelector": {}}]
    assert [r["ports"][0]["port"] for r in op["spec"]["ingress"]] == ["metrics"]
    assert op["spec"]["ingress"][0]["from"] == metrics_from
    # Without `from`, the API port is open to every peer (test Pods must reach it).
    docs = render(None, "--set", "networkPolicy.enabled=true")
    api = component(docs, "NetworkPolicy", "api-server")
    http_rule = next(r for r in api["spec"]["ingress"] if r["ports"][0]["port"] == "http")
    assert "from" not in http_rule


def test_service_monitor():
    sm = one(rendered("nondefault"), "ServiceMonitor", "tfe")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "5s"}]
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    services = [s for s in objects(rendered("nondefault"), "Service") if matches(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert len(services) == 2
    assert all("metrics" in {p["name"] for p in s["spec"]["ports"]} for s in services)


def test_notes_explain_first_steps():
    proc = run_helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    for needle in ("kind: Organization", "--clusterrole=terrace-owner", "kubectl create token", "port-forward", "/organizations/acme/workspaces"):
        assert needle in notes, needle


# --------------------------------------------------------------------------- values.schema.json


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "operator.replicas=two"],
        ["--set", "apiServer.replicas=-1"],
        ["--set", "apiServer.edition=cloud"],
        ["--set", "unknownTopLevelKey=1"],
        ["--set", "operator.replica=2"],
        ["--set", "apiServer.ingress.enabeld=true"],
        ["--set", "logging.format=xml"],
        ["--set", "blobStore.type=s3"],
        ["--set", "blobStore.type=gcs"],
        ["--set", "blobStore.s3.bucket=Not_A_Bucket"],
        ["--set", "blobStore.s3.endpoint=minio:9000"],
        ["--set", "image.pullPolicy=Sometimes"],
        ["--set", "testRuns.concurrency=0"],
        ["--set", "testRuns.podTemplate.nodeName=x"],
        ["--set", "testRuns.apiInternalUrl=terrace-api:8080"],
        ["--set-string", "apiServer.maxBodyBytes=1MiB"],
        ["--set-string", "apiServer.idleTimeout=soon"],
        ["--set-string", "apiServer.headerReadTimeout=0s"],
        ["--set", "apiServer.maxConnections=0"],
        ["--set", "serviceMonitor.interval=soon"],
    ],
    ids=lambda a: a[1],
)
def test_schema_rejects_bad_values(bad):
    proc = run_helm(*template_args(None, *bad))
    assert proc.returncode != 0, f"accepted {bad}"
    assert "schema" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "good",
    [
        ["--set", "operator.replicas=1"],
        ["--set", "apiServer.edition=hosted"],
        ["--set", "apiServer.podDisruptionBudget.maxUnavailable=25%"],
        ["--set", "image.digest=sha256:" + "a" * 64],
        ["--set", "global.foo=bar"],
        ["--set-string", "apiServer.bodyReadTimeout=1m30s"],
    ],
    ids=lambda a: a[1],
)
def test_schema_accepts_good_values(good):
    proc = run_helm(*template_args(None, *good))
    assert proc.returncode == 0, proc.stderr


def test_schema_is_draft_07_and_closed():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    for key in ("operator", "apiServer", "engine", "testRuns", "networkPolicy", "serviceMonitor"):
        assert schema["properties"][key]["additionalProperties"] is False, key
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(defaults)


# --------------------------------------------------------------------------- examples/ against the CRDs


def _openapi_to_jsonschema(node):
    """A CRD's structural OpenAPI v3 schema as JSON Schema, strict like kubectl's field
    validation: unknown fields are errors unless the schema preserves them."""
    if isinstance(node, list):
        return [_openapi_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _openapi_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-") and k != "nullable"}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=None)
def crd_validators() -> dict[tuple[str, str], jsonschema.Draft7Validator]:
    validators = {}
    for f in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        group = crd["spec"]["group"]
        for version in crd["spec"]["versions"]:
            schema = _openapi_to_jsonschema(version["schema"]["openAPIV3Schema"])
            # The API server adds these to every kind's schema.
            props = schema.setdefault("properties", {})
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props.setdefault("metadata", {"type": "object"})
            validators[(f"{group}/{version['name']}", crd["spec"]["names"]["kind"])] = jsonschema.Draft7Validator(schema)
    return validators


def validate_custom_resource(doc: dict) -> list[str]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    validator = crd_validators().get(key)
    if validator is None:
        return [f"no CRD for {key[0]} {key[1]}"]
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]
    meta = doc.get("metadata", {})
    if not meta.get("name"):
        errors.append("metadata.name missing")
    if key[1] != "Organization" and not meta.get("namespace"):
        errors.append("metadata.namespace missing (terrace kinds other than Organization are namespaced)")
    return errors


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def test_examples_exist():
    assert example_files(), "examples/ has no manifests"


@pytest.mark.parametrize("path", example_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_custom_resources_match_their_crds(path):
    errors = []
    for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
        if not isinstance(doc, dict):
            continue
        api_version = str(doc.get("apiVersion", ""))
        if api_version.split("/")[0] != "terrace.dev":
            continue  # Namespaces, Secrets, RoleBindings, Argo CD, Flux, ...
        name = doc.get("metadata", {}).get("name")
        errors += [f"document {i} ({doc.get('kind')}/{name}): {e}" for e in validate_custom_resource(doc)]
    assert not errors, "\n".join(errors)


def test_examples_include_terrace_objects():
    kinds = set()
    for path in example_files():
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("terrace.dev/"):
                kinds.add(doc["kind"])
    assert {"Organization", "Workspace"} <= kinds


def test_crd_validation_rejects_bad_objects():
    """The example check would catch a typo, a wrong type or a bad enum value."""
    good = {
        "apiVersion": "terrace.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "w", "namespace": "acme"},
        "spec": {"name": "w", "executionMode": "local"},
    }
    assert validate_custom_resource(good) == []
    for spec in ({"name": "w", "executionMod": "local"}, {"name": "w", "autoApply": "yes"}, {"name": "w", "executionMode": "cloud"}):
        bad = {**good, "spec": spec}
        assert validate_custom_resource(bad), spec
    assert validate_custom_resource({**good, "kind": "Nope"})


def test_every_api_server_replica_signs_urls_with_one_key():
    """A log-read URL one replica signed must work on another: the replicas read one key
    from one Secret, the chart's own by default, or the one the values name."""
    docs = rendered("default")
    api = component(docs, "Deployment", "api-server")
    ref = env_of(containers(api)[0])["TERRACE_URL_SIGNING_KEY"]["valueFrom"]["secretKeyRef"]
    secret = one(docs, "Secret", "-url-signing-key")
    assert ref["name"] == secret["metadata"]["name"]
    assert len(secret["data"][ref["key"]]) > 40
    own = render(None, "--set", "apiServer.urlSigningKey.existingSecret=mine",
                 "--set", "apiServer.urlSigningKey.key=k")
    ref = env_of(containers(component(own, "Deployment", "api-server"))[0])[
        "TERRACE_URL_SIGNING_KEY"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == ("mine", "k")
    assert not [s for s in objects(own, "Secret") if s["metadata"]["name"].endswith("-url-signing-key")]
