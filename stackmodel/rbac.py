"""What the stack grants, as the `rbac` stack output: the Dynamo operator's entry.

The stack writes no RBAC object of its own. The post-deploy load step is a Pulumi dynamic
resource: its provider runs inside the `pulumi up` process on the user's machine, and anything
it does in the cluster (reading pods for incidents; with `load.runner: cluster`, creating its
Job, ConfigMap and Service and reading the pods' logs) it does with the user's kubeconfig, as
the program's other resources are applied. Its load pods need no API access (no token is
mounted), so a ServiceAccount, Role and RoleBinding would be used by no pod; the program
appends the load step's namespaced rules to the output (:func:`incluster.manifests.rbac_entry`),
for an administrator to bind where the user has less.
"""

from __future__ import annotations

from typing import Any

from stackmodel.platform import PlatformConfig, admission_scope, release_namespace


def rbac_summary(cfg: PlatformConfig, testbed_namespace: str) -> list[dict[str, Any]]:
    """What the stack grants: one entry, the operator's.

    `[{"subject", "scope": "cluster" | "namespace/<ns>", "rules": [str], "admission":
    admission_scope(...)}]`; the operator's own rules come from the chart.
    """
    if cfg.install:
        subject = (
            f"dynamo-operator (Helm release {cfg.release_name} in"
            f" {release_namespace(cfg, testbed_namespace)}, chart {cfg.chart_version})"
        )
        operator_rules = [f"as defined by the dynamo-platform chart {cfg.chart_version}"]
    else:
        subject = "dynamo-operator (already running; not managed by this stack)"
        operator_rules = ["not managed by this stack"]
    scope = "cluster" if cfg.operator_scope == "cluster" else f"namespace/{testbed_namespace}"
    return [
        {
            "subject": subject,
            "scope": scope,
            "rules": operator_rules,
            "admission": admission_scope(cfg, testbed_namespace),
        }
    ]
