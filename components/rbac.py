"""RBAC objects this stack writes itself, and the summary of everything the stack grants.

Pure functions returning Kubernetes objects as plain dicts (camelCase, as the API takes them).
No wildcard verb, resource, API group or resource name is ever written: `find_wildcards` finds
them and `rbac_summary` refuses objects that carry one.
"""

from __future__ import annotations

from typing import Any

from components.platform import PlatformConfig, admission_scope, release_namespace

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
RBAC_GROUP = "rbac.authorization.k8s.io"
MANAGED_BY_LABELS = {"app.kubernetes.io/managed-by": "dynamo-testbed"}

LOAD_STEP_RULES: tuple[dict[str, list[str]], ...] = (
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
)
"""What the post-deploy load step reads: the frontend Service, its Pods/Endpoints and the DGD."""

_RULE_FIELDS = ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs")


def load_step_rbac(namespace: str, name: str) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding (in that order) for the post-deploy load step.

    All three are named `name` in `namespace`; the Role grants only `LOAD_STEP_RULES`
    (get/list/watch on services, pods, endpoints and dynamographdeployments.nvidia.com).
    """
    metadata = {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY_LABELS)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(metadata)},
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "Role",
            "metadata": dict(metadata),
            "rules": [{key: list(val) for key, val in rule.items()} for rule in LOAD_STEP_RULES],
        },
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "RoleBinding",
            "metadata": dict(metadata),
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


def find_wildcards(objects: list[dict[str, Any]]) -> list[str]:
    """Paths like `Role ns/name rules[0].verbs` of every `*` in the rules of `objects`."""
    found: list[str] = []
    for obj in objects:
        meta = obj.get("metadata", {})
        where = f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')}"
        for index, rule in enumerate(obj.get("rules", [])):
            found.extend(
                f"{where} rules[{index}].{field}"
                for field in _RULE_FIELDS
                if "*" in rule.get(field, [])
            )
    return found


def _format_rule(rule: dict[str, list[str]]) -> str:
    """`get,list,watch services,pods` (core group) or `get dynamographdeployments.nvidia.com`."""
    resources = [
        res if group == "" else f"{res}.{group}"
        for group in rule["apiGroups"]
        for res in rule["resources"]
    ]
    return f"{','.join(rule['verbs'])} {','.join(resources)}"


def rbac_summary(
    cfg: PlatformConfig, testbed_namespace: str, objects: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """What the stack grants: the operator entry first, then one entry per binding in `objects`.

    Operator entry: `{"subject", "scope": "cluster" | "namespace/<ns>", "rules": [str],
    "admission": admission_scope(...)}`; the operator's own rules come from the chart.
    Binding entries: `{"subject": "ServiceAccount <ns>/<name>", "scope": "namespace/<ns>",
    "rules": ["get,list,watch services,pods,endpoints", ...]}`.

    Raises:
        ValueError: an object carries a wildcard, or a RoleBinding names a Role not in `objects`.
    """
    wildcards = find_wildcards(objects)
    if wildcards:
        raise ValueError(f"wildcard ('*') in RBAC written by this stack: {', '.join(wildcards)}")
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
    summary: list[dict[str, Any]] = [
        {
            "subject": subject,
            "scope": scope,
            "rules": operator_rules,
            "admission": admission_scope(cfg, testbed_namespace),
        }
    ]
    roles = {
        (obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
        for obj in objects
        if obj["kind"] == "Role"
    }
    for binding in (obj for obj in objects if obj["kind"] == "RoleBinding"):
        namespace = binding["metadata"]["namespace"]
        role = roles.get((namespace, binding["roleRef"]["name"]))
        if role is None:
            raise ValueError(
                f"RoleBinding {namespace}/{binding['metadata']['name']} refers to Role"
                f" {binding['roleRef']['name']!r}, which is not among the objects"
            )
        rules = [_format_rule(rule) for rule in role["rules"]]
        summary.extend(
            {
                "subject": f"{sub['kind']} {sub.get('namespace', namespace)}/{sub['name']}",
                "scope": f"namespace/{namespace}",
                "rules": rules,
            }
            for sub in binding["subjects"]
        )
    return summary
