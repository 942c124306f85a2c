"""Tests of stackmodel.rbac: the stack's RBAC summary (the operator's grants only)."""

import json

from stackmodel.platform import PlatformConfig
from stackmodel.rbac import rbac_summary

TESTBED = "dynamo-testbed"


def test_summary_cluster_scope() -> None:
    summary = rbac_summary(PlatformConfig(), TESTBED)
    (operator,) = summary
    assert (
        operator["subject"]
        == "dynamo-operator (Helm release dynamo-platform in dynamo-system, chart 1.6.2)"
    )
    assert operator["scope"] == "cluster"
    assert operator["rules"] == ["as defined by the dynamo-platform chart 1.6.2"]
    assert operator["admission"]["namespaces"] == "all"
    assert json.loads(json.dumps(summary)) == summary


def test_summary_namespace_scope_and_skipped_install() -> None:
    restricted = PlatformConfig.model_validate(
        {"operatorScope": "namespace", "crdsPreinstalled": True}
    )
    (operator,) = rbac_summary(restricted, TESTBED)
    assert operator["scope"] == f"namespace/{TESTBED}"
    assert (
        operator["subject"]
        == f"dynamo-operator (Helm release dynamo-platform in {TESTBED}, chart 1.6.2)"
    )
    skipped = rbac_summary(PlatformConfig.model_validate({"install": False}), TESTBED)
    assert skipped == [
        {
            "subject": "dynamo-operator (already running; not managed by this stack)",
            "scope": "cluster",
            "rules": ["not managed by this stack"],
            "admission": skipped[0]["admission"],
        }
    ]
    assert skipped[0]["admission"]["managedByStack"] is False
