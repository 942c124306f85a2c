"""What ``pulumi up`` of a graph stack does with the user's credentials, as RBAC permissions
(pure), for preview's SelfSubjectAccessReviews (:func:`clusterread.read.read_cluster`).

Per object the program registers (:func:`required_permissions`), pulumi-kubernetes needs
``get``, ``create``, ``patch`` and ``delete`` (read, create client-side, update by patch,
destroy), and for the objects it awaits ``list`` and ``watch`` on what its awaiter subscribes
to: a Deployment's Deployments, ReplicaSets, Pods and PersistentVolumeClaims
(``provider/pkg/await/deployment.go`` L164-201), a Service's Services and Endpoints
(``service.go`` L137-154), a ``pulumi.com/waitFor`` object's own kind (the DGD), and for every
create, update and delete it awaits the core ``events`` of the object's namespace, whose
Warning events (``FailedScheduling``, ``BackOff``) it prints during the wait
(``NewEventAggregator`` in ``Creation``, ``Update`` and ``Deletion``, ``await.go`` L352, L536,
L1006, on an informer of the object's namespace, L314-318 and L499-503, every namespace for a
cluster-scoped object; ``watchers.go`` L206-216: kind ``Event``); pulumi/pulumi-kubernetes at
``tests/cli_rules/kubernetes_await.PULUMI_KUBERNETES_COMMIT`` (4.34.x). With
``load.runner: cluster`` the load step's rules (:data:`incluster.manifests.LOAD_STEP_RULES`,
the same list its Role grants). A standalone stack that installs the platform lists every
namespace's DynamoGraphDeployments at preview, to check a move of its release against them. The
Namespace is cluster-scoped: a Role cannot grant it, which
is what ``createNamespace: false`` is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from incluster.manifests import LOAD_STEP_RULES
from manifests.graph import DGD_API_VERSION
from stackmodel.config import StackConfig

OBJECT_VERBS = ("get", "create", "patch", "delete")
WATCH_VERBS = ("list", "watch")

_DGD_GROUP = DGD_API_VERSION.split("/")[0]


@dataclass(frozen=True)
class Permission:
    """One verb on one resource: ``namespace`` None for a cluster-scoped resource."""

    verb: str
    group: str
    resource: str
    namespace: str | None

    def rule(self) -> str:
        """The RBAC rule that grants it, as a Role (namespaced) or ClusterRole would list it."""
        kind = "ClusterRole" if self.namespace is None else f"Role in {self.namespace}"
        group = self.group or '""'
        return f"{kind} rule: apiGroups [{group}], resources [{self.resource}], verbs [{self.verb}]"


def _grant(
    out: list[Permission],
    group: str,
    resources: Sequence[str],
    verbs: Sequence[str],
    ns: str | None,
) -> None:
    for resource in resources:
        for verb in verbs:
            permission = Permission(verb, group, resource, ns)
            if permission not in out:
                out.append(permission)


def required_permissions(cfg: StackConfig, *, with_hf_token: bool) -> list[Permission]:
    """Every permission ``pulumi up`` of ``cfg`` uses, in the order the program registers."""
    ns = cfg.namespace
    out: list[Permission] = []
    if cfg.create_namespace:
        _grant(out, "", ["namespaces"], OBJECT_VERBS, None)
        _grant(out, "", ["events"], WATCH_VERBS, None)  # a Namespace's wait: every namespace
    if with_hf_token:
        _grant(out, "", ["secrets"], OBJECT_VERBS, ns)
    if not cfg.parked:
        if cfg.topology.kind == "dynamo":
            _grant(out, _DGD_GROUP, ["dynamographdeployments"], OBJECT_VERBS + WATCH_VERBS, ns)
        else:
            _grant(out, "apps", ["deployments"], OBJECT_VERBS + WATCH_VERBS, ns)
            _grant(out, "apps", ["replicasets"], WATCH_VERBS, ns)
            _grant(out, "", ["pods", "persistentvolumeclaims"], WATCH_VERBS, ns)
    _grant(out, "", ["services"], OBJECT_VERBS + WATCH_VERBS, ns)
    _grant(out, "", ["endpoints"], WATCH_VERBS, ns)
    _grant(out, "", ["events"], WATCH_VERBS, ns)
    if cfg.stack_role == "standalone" and cfg.topology.kind == "dynamo" and cfg.platform.install:
        # preview lists every namespace's DGDs before it moves the release (clusterread.preview)
        _grant(out, _DGD_GROUP, ["dynamographdeployments"], ["list"], None)
    if cfg.load.enabled and cfg.load.runner == "cluster":
        for rule in LOAD_STEP_RULES:
            _grant(out, rule["apiGroups"][0], rule["resources"], rule["verbs"], ns)
    return out


def missing_permission_line(stack: str, permission: Permission) -> str:
    """One line of preview per permission the user lacks, with the rule that grants it."""
    scope = "cluster-wide" if permission.namespace is None else f"in {permission.namespace}"
    resource = ".".join(filter(None, [permission.resource, permission.group]))
    hint = ""
    if permission.resource == "namespaces":
        hint = "; or set createNamespace: false and deploy into a namespace an admin made"
    return (
        f"stack '{stack}': `pulumi up` needs {permission.verb} on {resource} {scope}, which"
        f" your credentials lack: grant it ({permission.rule()}){hint}"
    )
