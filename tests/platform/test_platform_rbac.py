"""Tests of components.rbac: the load step's RBAC objects and the stack's RBAC summary."""

import json
from typing import Any

import kubernetes_validate
import pytest

from components.platform import PlatformConfig
from components.rbac import find_wildcards, load_step_rbac, rbac_summary

TESTBED = "dynamo-testbed"
NAME = "dynamo-testbed-load"


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in (key, *_strings(value))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def test_load_step_objects_are_account_role_binding() -> None:
    account, role, binding = load_step_rbac(TESTBED, NAME)
    assert [obj["kind"] for obj in (account, role, binding)] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
    ]
    for obj in (account, role, binding):
        assert obj["metadata"]["name"] == NAME
        assert obj["metadata"]["namespace"] == TESTBED
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["services", "pods", "endpoints"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["nvidia.com"],
            "resources": ["dynamographdeployments"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": NAME,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": TESTBED}]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_load_step_objects_validate_against_kubernetes_1_34_strict(index: int) -> None:
    obj = load_step_rbac(TESTBED, NAME)[index]
    kubernetes_validate.validate(obj, "1.34", strict=True)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    role = load_step_rbac(TESTBED, NAME)[1]
    role["rules"][0]["verb"] = role["rules"][0].pop("verbs")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(role, "1.34", strict=True)


def test_no_wildcard_anywhere_in_objects_we_write() -> None:
    objects = load_step_rbac(TESTBED, NAME)
    assert find_wildcards(objects) == []
    assert not [s for s in _strings(objects) if "*" in s]


def test_find_wildcards_reports_each_planted_wildcard() -> None:
    objects = load_step_rbac(TESTBED, NAME)
    objects[1]["rules"][1]["verbs"] = ["*"]
    objects[1]["rules"][0]["resources"].append("*")
    assert find_wildcards(objects) == [
        f"Role {TESTBED}/{NAME} rules[0].resources",
        f"Role {TESTBED}/{NAME} rules[1].verbs",
    ]


def test_summary_cluster_scope() -> None:
    summary = rbac_summary(PlatformConfig(), TESTBED, load_step_rbac(TESTBED, NAME))
    operator, load_step = summary
    assert (
        operator["subject"]
        == "dynamo-operator (Helm release dynamo-platform in dynamo-system, chart 1.6.2)"
    )
    assert operator["scope"] == "cluster"
    assert operator["admission"]["namespaces"] == "all"
    assert load_step == {
        "subject": f"ServiceAccount {TESTBED}/{NAME}",
        "scope": f"namespace/{TESTBED}",
        "rules": [
            "get,list,watch services,pods,endpoints",
            "get,list,watch dynamographdeployments.nvidia.com",
        ],
    }
    assert json.loads(json.dumps(summary)) == summary


def test_summary_namespace_scope_and_skipped_install() -> None:
    restricted = PlatformConfig.model_validate(
        {"operatorScope": "namespace", "crdsPreinstalled": True}
    )
    operator = rbac_summary(restricted, TESTBED, [])[0]
    assert operator["scope"] == f"namespace/{TESTBED}"
    assert (
        operator["subject"]
        == f"dynamo-operator (Helm release dynamo-platform in {TESTBED}, chart 1.6.2)"
    )
    skipped = rbac_summary(PlatformConfig.model_validate({"install": False}), TESTBED, [])
    assert skipped == [
        {
            "subject": "dynamo-operator (already running; not managed by this stack)",
            "scope": "cluster",
            "rules": ["not managed by this stack"],
            "admission": skipped[0]["admission"],
        }
    ]
    assert skipped[0]["admission"]["managedByStack"] is False


def test_summary_refuses_wildcards_and_dangling_bindings() -> None:
    objects = load_step_rbac(TESTBED, NAME)
    objects[1]["rules"][0]["verbs"] = ["*"]
    with pytest.raises(ValueError, match=r"wildcard \('\*'\) in RBAC written by this stack: Role"):
        rbac_summary(PlatformConfig(), TESTBED, objects)
    account, _, binding = load_step_rbac(TESTBED, NAME)
    with pytest.raises(
        ValueError, match=rf"refers to Role '{NAME}', which is not among the objects"
    ):
        rbac_summary(PlatformConfig(), TESTBED, [account, binding])
