"""`testbed load-role STACK`: the Role of the load step (the one definition,
incluster.manifests.LOAD_STEP_RULES) and a RoleBinding, valid Kubernetes 1.34 objects; the fix
its error suggests is accepted."""

import kubernetes_validate
import yaml
from fake_kube_api import request_attributes, rule_allows
from typer.testing import CliRunner

from incluster.manifests import LOAD_STEP_RULES
from stackmodel.stacks import REPO, load_stack
from testbed.cli import app


def test_the_role_and_binding_apply_in_the_stacks_namespace() -> None:
    result = CliRunner().invoke(
        app, ["load-role", "kv-routing", "--user", "alice", "--service-account", "ci:deployer"]
    )
    assert result.exit_code == 0, result.output
    role, binding = yaml.safe_load_all(result.stdout)
    for obj in (role, binding):
        kubernetes_validate.validate(obj, "1.34", strict=True)
    namespace = load_stack("kv-routing").cfg.namespace
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", namespace)
    assert role["rules"] == [dict(rule) for rule in LOAD_STEP_RULES]
    assert {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]} in role["rules"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
        {"kind": "ServiceAccount", "name": "deployer", "namespace": "ci"},
    ]
    alone = CliRunner().invoke(app, ["load-role", "kv-routing"])
    assert [o["kind"] for o in yaml.safe_load_all(alone.stdout)] == ["Role"]


def test_a_bad_service_account_names_the_form_that_works() -> None:
    bad = CliRunner().invoke(app, ["load-role", "kv-routing", "--service-account", "deployer"])
    assert bad.exit_code == 2
    fix = "testbed-kv-routing:deployer"
    assert f"give it as NAMESPACE:NAME, e.g. --service-account {fix}" in bad.stderr
    assert (
        CliRunner().invoke(app, ["load-role", "kv-routing", "--service-account", fix]).exit_code
        == 0
    )


def test_the_docs_table_lists_exactly_the_roles_rules() -> None:
    """docs/in-cluster.md's table of the Role: one row per rule, in order."""
    text = (REPO / "docs" / "in-cluster.md").read_text()
    section = text[text.index("## RBAC: the Role the step needs") :]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    rows = rows[: len(LOAD_STEP_RULES) + 1]

    def cells(row: str) -> list[list[str]]:
        parts = [c.strip() for c in row.strip("|").split("|")][:3]
        return [[w.strip(" `") for w in c.split(",")] for c in parts]

    documented = [cells(row) for row in rows if not row.startswith("| ---")]
    expected = [
        [["core" if g == "" else g for g in r["apiGroups"]], r["resources"], r["verbs"]]
        for r in LOAD_STEP_RULES
    ]
    assert documented[: len(expected)] == expected


def test_the_role_grants_the_memory_read_as_rbac_checks_it() -> None:
    """The memory sampler's ``GET /apis/metrics.k8s.io/v1beta1/namespaces/<ns>/pods`` is a
    ``list`` of the resource ``pods`` in the group ``metrics.k8s.io`` (the request's attributes,
    as the API server resolves them): the Role grants it, and so does no rule on the core
    group's ``pods`` alone; one pod's reading is a ``get``."""
    path = "/apis/metrics.k8s.io/v1beta1/namespaces/testbed/pods"
    listed = request_attributes("GET", path, {})
    one = request_attributes("GET", f"{path}/prefill-0", {})
    assert (listed["verb"], listed["group"], listed["resource"]) == (
        "list",
        "metrics.k8s.io",
        "pods",
    )
    assert one["verb"] == "get"
    for asked in (listed, one):
        assert [r for r in LOAD_STEP_RULES if rule_allows(r, asked)] == [
            {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]}
        ]
