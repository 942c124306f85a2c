"""What the cluster must have for a stack, checked against what it has (pure functions).

The inputs are plain dicts as the Kubernetes API returns them (``GET /api/v1/nodes`` items:
``metadata.labels``, ``spec.taints``, ``spec.unschedulable``, ``status.allocatable``; Helm's
release records, decoded; ClusterRoles), read at ``pulumi preview`` by
:mod:`clusterread.read`. Per node class of the stack (the workers placed on it):

- nodes: at least ``nodes`` schedulable nodes carry every label of ``nodeSelector``;
- taints: a ``NoSchedule``/``NoExecute`` taint on those nodes that the class does not tolerate
  keeps its pods off (toleration semantics: k8s.io/api ``core/v1/toleration.go``
  ``ToleratesTaint``: the effect matches or is empty; ``Exists`` matches any value and, with an
  empty key, any taint; ``Equal`` needs key and value);
- GPUs: ``status.allocatable["nvidia.com/gpu"]`` of the class's nodes covers the units its
  workers request (with time-slicing a node advertises ``gpusPerNode x replicasPerGpu``), and
  one node holds the largest worker's request;
- memory: ``status.allocatable.memory`` of the class's ``nodes`` largest nodes covers the sum
  of its workers' memory requests (disagg-same-node: 40Gi on one node), one node the largest.

Allocatable is what the kubelet offers pods in all; pods already running there are not
subtracted here (the scheduler does; :func:`clusterread.gpu_shares.unit_problems` counts the GPU
units other namespaces' pods hold), so a pass is necessary, not sufficient.

For a platform that installs the release, :func:`existing_operator_problem` says whether the
cluster already runs an operator this stack did not install (its own release judged by the
revisions it installed and what Helm wrote after them, :func:`own_revisions`; a failed upgrade
rolled back is said by :func:`rolled_back_note`), and :func:`platform_move_problem` whether a
move of its chart would leave a graph of the cluster on a release its operator does not support.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvpath.versions import minor_of
from manifests.graph import MANAGED_BY
from stackmodel.config import StackConfig, image_tag_version
from stackmodel.errors import ConfigProblem
from stackmodel.platform import PlatformConfig, release_namespace
from stackmodel.quantities import format_quantity, parse_quantity
from stackmodel.stack_layout import NAMESPACE_PREFIX, version_gate
from stackmodel.topology import Topology

GPU_RESOURCE = "nvidia.com/gpu"
"""The NVIDIA device plugin's extended resource (time-sliced units included)."""

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
"""Taint effects that keep a pod off a node (``PreferNoSchedule`` only discourages)."""


@dataclass(frozen=True)
class ClassNeed:
    """What a stack's workers need of one node class.

    Attributes:
        name: the node class.
        selector: its ``nodeSelector``.
        tolerations: its tolerations (``core/v1 Toleration`` dicts).
        nodes: nodes the class should have (``nodes``).
        time_sliced: the class's GPUs are shared by time-slicing (``timeSlicing`` set).
        units_per_node: ``nvidia.com/gpu`` one node should advertise (``gpusPerNode``, times
            ``replicasPerGpu`` with time-slicing).
        gpu_units, largest_gpus: units the class's workers request in all / the largest pod.
        memory_bytes, largest_memory: memory requests in all / the largest pod, bytes.
    """

    name: str
    selector: dict[str, str]
    tolerations: tuple[dict[str, str], ...]
    nodes: int
    time_sliced: bool
    units_per_node: int
    gpu_units: int
    largest_gpus: int
    memory_bytes: int
    largest_memory: int


def class_needs(cfg: StackConfig, topology: Topology) -> list[ClassNeed]:
    """One :class:`ClassNeed` per node class that has workers, in config order."""
    pods: dict[str, list[tuple[int, int]]] = {}
    for plan in topology.components:
        name = plan.placement.node_class
        if plan.role == "frontend" or name is None:
            continue
        memory = parse_quantity(plan.memory_request) if plan.memory_request else 0
        pods.setdefault(name, []).extend([(plan.placement.gpus, memory)] * plan.replicas)
    needs = []
    for name, node_class in cfg.node_classes.items():
        if name not in pods:
            continue
        needs.append(
            ClassNeed(
                name=name,
                selector=dict(node_class.node_selector),
                tolerations=tuple(t.manifest() for t in node_class.tolerations),
                nodes=node_class.nodes,
                time_sliced=node_class.time_slicing is not None,
                units_per_node=node_class.gpu_units_per_node,
                gpu_units=sum(g for g, _ in pods[name]),
                largest_gpus=max(g for g, _ in pods[name]),
                memory_bytes=sum(m for _, m in pods[name]),
                largest_memory=max(m for _, m in pods[name]),
            )
        )
    return needs


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (k8s.io/api ``core/v1`` ``ToleratesTaint``)."""
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if key and key != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def _labels(node: Mapping[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def _name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name", "?"))


def _allocatable(node: Mapping[str, Any], resource: str) -> str | None:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    return None if value is None else str(value)


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def blocking_taints(node: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> list[str]:
    """``key=value:Effect`` of the node's NoSchedule/NoExecute taints no toleration tolerates."""
    taints = (node.get("spec") or {}).get("taints") or []
    return [
        _taint_text(t)
        for t in taints
        if t.get("effect") in _BLOCKING_EFFECTS and not any(tolerates(x, t) for x in tolerations)
    ]


def _selector_text(selector: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in selector.items())


def selected_nodes(need: ClassNeed, nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The schedulable nodes that carry every label of the class's ``nodeSelector``."""
    return [
        n
        for n in nodes
        if all(_labels(n).get(k) == v for k, v in need.selector.items())
        and not (n.get("spec") or {}).get("unschedulable")
    ]


def class_gpu_units(need: ClassNeed, nodes: Sequence[Mapping[str, Any]]) -> int:
    """Allocatable ``nvidia.com/gpu`` of the class: the sum over its ``nodes`` usable nodes
    (selected, no taint it does not tolerate) that advertise the most, units."""
    usable = [n for n in selected_nodes(need, nodes) if not blocking_taints(n, need.tolerations)]
    units = sorted((node_gpu_units(n) for n in usable), reverse=True)
    return sum(units[: need.nodes])


def class_problems(need: ClassNeed, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the cluster's nodes lack for ``need``; each line names what the nodes have and what
    the stack needs ([] when every check passes)."""
    selected = selected_nodes(need, nodes)
    if not selected:
        return [
            f"no schedulable node has the labels {_selector_text(need.selector)}; the stack"
            f" needs {need.nodes} such node{'s' if need.nodes != 1 else ''}"
        ]
    problems = []
    usable = []
    for node in selected:
        blocked = blocking_taints(node, need.tolerations)
        if blocked:
            problems.append(
                f"node {_name(node)} has the taint {', '.join(blocked)}, which the node class"
                " does not tolerate; the stack needs a toleration for it (nodeClasses.<class>"
                ".tolerations)"
            )
        else:
            usable.append(node)
    if len(usable) < need.nodes:
        problems.append(
            f"{len(usable)} usable node{'s' if len(usable) != 1 else ''} with the labels"
            f" {_selector_text(need.selector)}; the stack needs {need.nodes}"
        )
    if not usable:
        return problems
    problems += _gpu_problems(need, usable) + _memory_problems(need, usable)
    return problems


def node_gpu_units(node: Mapping[str, Any]) -> int:
    """The node's allocatable ``nvidia.com/gpu`` (0 without it)."""
    return int(_allocatable(node, GPU_RESOURCE) or 0)


def units_fit(need: ClassNeed, units: Sequence[int]) -> bool:
    """Whether the class's pods fit nodes of ``units`` ``nvidia.com/gpu`` each: its ``nodes``
    nodes with the most cover the units its workers request, and one the largest pod's."""
    best = sorted(units, reverse=True)[: need.nodes]
    return bool(best) and sum(best) >= need.gpu_units and best[0] >= need.largest_gpus


def _gpu_problems(need: ClassNeed, usable: Sequence[Mapping[str, Any]]) -> list[str]:
    if need.gpu_units == 0:
        return []
    units = {_name(n): node_gpu_units(n) for n in usable}
    has = ", ".join(f"{name}: {count}" for name, count in units.items())
    if units_fit(need, list(units.values())):
        return []
    hint = ""
    if max(units.values()) == 0:
        hint = f" (no node advertises {GPU_RESOURCE}: is the NVIDIA device plugin running there?)"
    elif need.time_sliced and need.units_per_node > max(units.values()):
        hint = (
            f" (each node should advertise {need.units_per_node}: gpusPerNode x replicasPerGpu;"
            " is the device plugin's time-slicing configured?)"
        )
    return [
        f"allocatable {GPU_RESOURCE} per node {has}; the stack needs {need.gpu_units} on"
        f" {need.nodes} node{'s' if need.nodes != 1 else ''}, {need.largest_gpus} on one{hint}"
    ]


def _memory_problems(need: ClassNeed, usable: Sequence[Mapping[str, Any]]) -> list[str]:
    if need.memory_bytes == 0:
        return []
    memory = {_name(n): parse_quantity(_allocatable(n, "memory") or 0) for n in usable}
    best = sorted(memory.values(), reverse=True)[: need.nodes]
    if sum(best) >= need.memory_bytes and best[0] >= need.largest_memory:
        return []
    has = ", ".join(f"{name}: {format_quantity(b)}" for name, b in memory.items())
    return [
        f"allocatable memory per node {has}; the workers request"
        f" {format_quantity(need.memory_bytes)} on {need.nodes}"
        f" node{'s' if need.nodes != 1 else ''} ({format_quantity(need.largest_memory)} the"
        " largest)"
    ]


def cluster_problems(
    cfg: StackConfig, topology: Topology, nodes: Sequence[Mapping[str, Any]]
) -> list[ConfigProblem]:
    """One :class:`ConfigProblem` per problem, keyed ``nodeClasses.<class>``, each ending with
    the opt-out (``sizing.clusterCheck: warn``)."""
    found = []
    for need in class_needs(cfg, topology):
        selector = {"nodeSelector": need.selector}
        for problem in class_problems(need, nodes):
            found.append(
                ConfigProblem(
                    key=f"nodeClasses.{need.name}",
                    value=selector,
                    message=f"{problem} (checked at preview against the cluster; to deploy"
                    " anyway set sizing.clusterCheck: warn)",
                )
            )
    return found


RELEASE_MARKER = "dynamo-testbed stack"
"""Start of the Helm release description the platform sets (:func:`release_description`), so a
later preview tells its own release from one installed otherwise."""


def release_description(project: str, stack: str) -> str:
    """The ``description`` of the release the stack installs (Helm keeps it in the release)."""
    return f"{RELEASE_MARKER} {project}/{stack}"


def _revision(record: Mapping[str, Any]) -> int:
    return int(record.get("version") or 0)


def _info(record: Mapping[str, Any]) -> Mapping[str, Any]:
    return record.get("info") or {}


def _chart(record: Mapping[str, Any]) -> str:
    return str(((record.get("chart") or {}).get("metadata") or {}).get("version", "?"))


ROLLBACK_DESCRIPTION = "Rollback to "
"""Start of the description Helm gives the revision a rollback writes, ``Rollback to <N>``
(helm v3.20.2 ``pkg/action/rollback.go`` L152, ``prepareRollback``), which an ``atomic``
upgrade that failed runs (``pkg/action/upgrade.go`` L504-538, ``failRelease``)."""


def own_revisions(
    releases: Sequence[Mapping[str, Any]], own_description: str
) -> list[Mapping[str, Any]] | None:
    """The revisions of a release the stack installed: from the latest one described
    ``own_description`` on, by revision, when each after it is one Helm writes after a failed
    update (``failed``) or a rollback (:data:`ROLLBACK_DESCRIPTION`); None when no revision is
    the stack's (another installed it) or one after it is not (an upgrade by hand took it over).

    pulumi-kubernetes passes the stack's description to Helm only on install and upgrade
    (pulumi/pulumi-kubernetes ``provider/pkg/provider/helm_release.go`` L623 and L748 at
    ``tests/cli_rules/kubernetes_await.PULUMI_KUBERNETES_COMMIT``; ``maxHistory`` unset keeps
    every revision, L743-746); what Helm writes after it keeps Helm's own: a failed upgrade
    ``Upgrade "<name>" failed: <error>`` (helm v3.20.2 ``pkg/action/upgrade.go`` L486-491),
    its ``atomic`` rollback ``Rollback to <N>`` (:data:`ROLLBACK_DESCRIPTION`).

    Args:
        releases: Helm's records of one release (decoded, :func:`clusterread.read.helm_record`).
    """
    ordered = sorted(releases, key=_revision)
    mine = [i for i, r in enumerate(ordered) if _info(r).get("description") == own_description]
    if not mine:
        return None
    revisions = ordered[mine[-1] :]
    helms = all(
        _info(r).get("status") == "failed"
        or str(_info(r).get("description") or "").startswith(ROLLBACK_DESCRIPTION)
        for r in revisions[1:]
    )
    return revisions if helms else None


def rolled_back_note(release: str, revisions: Sequence[Mapping[str, Any]]) -> str | None:
    """What preview says of the stack's own release ``release`` (``<namespace>/<name>``) whose
    last update failed: the latest of ``revisions`` (:func:`own_revisions`) is Helm's rollback
    (the failed upgrade before it named) or a failed revision; None when it is the stack's own.
    """
    latest = revisions[-1]
    if latest is revisions[0]:
        return None
    info = _info(latest)
    description = str(info.get("description") or "")
    if description.startswith(ROLLBACK_DESCRIPTION):
        failed = [r for r in revisions[1:-1] if _info(r).get("status") == "failed"]
        target = description.removeprefix(ROLLBACK_DESCRIPTION)
        back = f"to revision {target} (chart {_chart(latest)}, revision {_revision(latest)})"
        if not failed:
            return (
                f"Helm release {release} was rolled back {back} outside this stack: `pulumi up`"
                " applies the stack's config again"
            )
        why = f"revision {_revision(failed[-1])}: {_info(failed[-1]).get('description')}"
        return (
            f"Helm release {release}: the last upgrade failed ({why}) and Helm rolled it back"
            f" {back}: fix the cause and run `pulumi up` again"
        )
    if info.get("status") == "failed":
        return (
            f"Helm release {release}: its last change failed (revision {_revision(latest)},"
            f" chart {_chart(latest)}: {description}): fix the cause and run `pulumi up` again"
        )
    return None


PENDING_OPERATIONS = {
    "pending-install": "install",
    "pending-upgrade": "upgrade",
    "pending-rollback": "rollback",
}
"""The statuses Helm gives a revision while an operation writes it, and the operation (helm
v3.20.2 ``pkg/release/status.go`` L36-41; ``Status.IsPending``, L46-49)."""

OPERATION_IN_PROGRESS = "another operation (install/upgrade/rollback) is in progress"
"""What ``helm upgrade`` (and so `pulumi up`'s upgrade of the release) answers while the latest
revision is pending (helm v3.20.2 ``pkg/action/upgrade.go`` L218-220, ``errPending``, whose
text is ``pkg/action/action.go`` L63)."""


def operation_in_progress(
    namespace: str, name: str, releases: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why `pulumi up` cannot change release ``namespace``/``name`` now, with the fix: its
    latest revision is pending (:data:`PENDING_OPERATIONS`), so an install, upgrade or rollback
    is running, or was interrupted (its process killed) and holds Helm's lock for good; None
    when no operation is in progress.

    The fix: wait and preview again; when nothing runs it any more, roll back to the deployed
    revision (a pending upgrade or rollback leaves it ``deployed``: ``pkg/action/upgrade.go``
    supersedes it only once the new one is deployed), or, where no revision is deployed (an
    interrupted first install: ``helm rollback`` needs a revision before the latest,
    ``pkg/action/rollback.go`` L111-131), uninstall it.

    Args:
        releases: Helm's records of one release (decoded, :func:`clusterread.read.helm_record`).
    """
    if not releases:
        return None
    latest = max(releases, key=_revision)
    status = str(_info(latest).get("status"))
    operation = PENDING_OPERATIONS.get(status)
    if operation is None:
        return None
    deployed = [_revision(r) for r in releases if _info(r).get("status") == "deployed"]
    if deployed:
        back = f"`helm rollback {name} {max(deployed)} -n {namespace}` (revision {max(deployed)}"
        fix = f"{back} is the one deployed)"
    else:
        fix = f"`helm uninstall {name} -n {namespace}` (no revision is deployed to roll back to)"
    return (
        f"Helm release {namespace}/{name}: an {operation} is in progress (revision"
        f" {_revision(latest)}, chart {_chart(latest)}, {status}), so `pulumi up` would fail"
        f' with "{OPERATION_IN_PROGRESS}": wait for it to finish and preview again; if nothing'
        f" runs it any more (an interrupted `pulumi up` or helm command), run {fix}, then"
        " `pulumi up`"
    )


def existing_operator_problem(
    cfg: PlatformConfig,
    testbed_namespace: str,
    own_description: str,
    releases: Sequence[Mapping[str, Any]],
    cluster_roles: Sequence[Mapping[str, Any]],
) -> str | None:
    """Why installing ``cfg``'s release would fail on a cluster that already runs an operator,
    with the fix; None when nothing is in the way.

    Args:
        releases: Helm's records of the release named ``cfg.release_name`` in its namespace
            (decoded; ``info.status``, ``info.description``, ``chart.metadata.version``).
        cluster_roles: ClusterRoles (``metadata.name``, ``metadata.labels``).

    A release of that name none of whose revisions is described as ``own_description``
    (:func:`own_revisions`: a failed upgrade of the stack's own release and Helm's rollback
    after it stay the stack's; whatever the status: an uninstalled one kept with
    ``--keep-history`` too) makes Helm's install
    refuse with "cannot re-use a name that is still in use" (helm ``pkg/action/install.go``
    ``availableName``, reached without ``replace``: pulumi/pulumi-kubernetes
    ``provider/pkg/provider/helm_release.go`` L622 ``client.Replace = newRelease.Replace`` at
    ``tests/cli_rules/kubernetes_await.PULUMI_KUBERNETES_COMMIT``). A ClusterRole
    ``<release>-dynamo-operator-manager-role`` of another release makes the chart fail a
    cluster-wide install ("Found existing cluster-wide Dynamo operator": the operator's
    ``_validation.tpl`` L27-78, tests/platform/test_chart_rules.py).
    """
    namespace = release_namespace(cfg, testbed_namespace)
    fix = (
        "set platform.install: false to use the running operator (graph stacks then read this"
        " stack as their platform), or adopt the release with `pulumi import` (docs/"
        "shared-cluster.md, 'A cluster that already runs the operator')"
    )
    if releases:
        if own_revisions(releases, own_description) is not None:
            return None
        latest = max(releases, key=_revision)
        return (
            f"a Helm release '{cfg.release_name}' (chart {_chart(latest)},"
            f" {_info(latest).get('status')}) already exists in namespace '{namespace}' and this"
            f' stack did not install it; installing would fail with "cannot re-use a name that'
            f' is still in use": {fix}'
        )
    own_role = f"{cfg.release_name}-dynamo-operator-manager-role"
    if cfg.operator_scope != "cluster":
        return None
    for role in cluster_roles:
        name = str((role.get("metadata") or {}).get("name", ""))
        if "-dynamo-operator-" in name and name.endswith("-manager-role") and name != own_role:
            return (
                f"the cluster already runs a cluster-wide Dynamo operator (ClusterRole {name});"
                ' the dynamo-platform chart refuses a second one ("Found existing cluster-wide'
                f' Dynamo operator"): {fix}'
            )
    return None


def deployed_graphs_problem(graphs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a platform must not lose its protection yet: DynamoGraphDeployments still exist
    (each names its namespace and, for a default ``testbed-<stack>`` namespace, the graph
    stack); None when there are none.

    Destroying the platform first removes the operator and its webhooks while DGDs remain:
    their finalizers need the operator, so the graph stacks' destroy then hangs. Pulumi's
    ``protect`` refuses the release's delete (pulumi/pulumi
    ``pkg/resource/deploy/step.go`` L645-648 at 1b5949891b3cefcb9974752b24a5ecef0acc86c8,
    also in preview); this check guards the step that lifts it.
    """
    if not graphs:
        return None
    return (
        f"{graphs_in_cluster(graphs)}; destroy those graph stacks first (`pulumi destroy -s"
        " <stack>`: the operator must run while their finalizers do), then set"
        " platform.protect: false to destroy the platform"
    )


def graphs_in_cluster(graphs: Sequence[Mapping[str, Any]]) -> str:
    """``N DynamoGraphDeployment(s) still in the cluster: <namespace>/<name> (graph stack
    '<stack>'?), ...``: a default ``testbed-<stack>`` namespace names the graph stack."""
    where = [_graph_text(graph) for graph in graphs]
    return (
        f"{len(where)} DynamoGraphDeployment{'s' if len(where) != 1 else ''} still in the"
        f" cluster: {', '.join(where)}"
    )


def _graph_text(graph: Mapping[str, Any]) -> str:
    """``<namespace>/<name>``, with ``(graph stack '<stack>'?)`` for a ``testbed-<stack>``
    namespace."""
    metadata = graph.get("metadata") or {}
    namespace = str(metadata.get("namespace", "?"))
    stack = namespace.removeprefix(NAMESPACE_PREFIX)
    owner = f" (graph stack '{stack}'?)" if namespace.startswith(NAMESPACE_PREFIX) else ""
    return f"{namespace}/{metadata.get('name', '?')}{owner}"


def graph_runtime_versions(graph: Mapping[str, Any]) -> list[str]:
    """The Dynamo releases a DynamoGraphDeployment's components run, sorted, each once: a
    component's ``runtimeVersionOverride``, else the MAJOR.MINOR.PATCH tag of its main
    container's image (its ``podTemplate``'s first container, or
    ``extraPodSpec.mainContainer``), as DGD admission reads a component's runtime version
    (ai-dynamo/dynamo ``deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml``,
    ``runtimeVersionOverride``: "declares the Dynamo runtime compatibility version in this
    component's main image ... required when ... mainContainer.image has no parseable
    semantic-version tag"); a component with neither is left out."""
    found = set()
    for component in (graph.get("spec") or {}).get("components") or []:
        override = component.get("runtimeVersionOverride")
        containers = ((component.get("podTemplate") or {}).get("spec") or {}).get("containers")
        main = (containers or [None])[0] or (component.get("extraPodSpec") or {}).get(
            "mainContainer"
        )
        version = override or image_tag_version(str((main or {}).get("image") or ""))
        if version is not None:
            found.add(str(version))
    return sorted(found)


def platform_move_problem(
    previous: str, target: str, graphs: Sequence[Mapping[str, Any]] | None, unlisted: str | None
) -> str | None:
    """Why moving the platform's chart from ``previous`` to ``target`` would leave a graph
    under an operator the version gate refuses for it (:func:`stackmodel.stack_layout.
    version_gate` of each of its runtime releases, :func:`graph_runtime_versions`, against
    ``target``), naming those graphs in order with the release each moves to first: ``target``
    for one newer than it, else ``previous`` (which the gate accepts under both operators, the
    move being to an adjacent minor); or, the DGDs not listed (``unlisted``: the reason), the
    permission to grant (the check fails closed). None when every graph stays supported.

    The chart re-applies the target's CRDs and its operator reconciles every graph in the
    cluster, so a move is judged against all of them.
    """
    if unlisted is not None:
        return (
            f"moving the platform from chart {previous} to {target} and the cluster's"
            f" DynamoGraphDeployments could not be listed ({unlisted}), so it is not known"
            " whether a graph would be left on a Dynamo release its operator does not support:"
            " grant `list` on dynamographdeployments.nvidia.com in every namespace (ClusterRole"
            " rule: apiGroups [nvidia.com], resources [dynamographdeployments], verbs [list])"
        )
    moves = []
    for graph in graphs or []:
        for runtime in graph_runtime_versions(graph):
            verdict = version_gate(_graph_text(graph), runtime, "the move's target", target)
            if verdict is None or not verdict.refused:
                continue
            first = target if minor_of(runtime) > minor_of(target) else previous
            moves.append(f"{_graph_text(graph)} runs Dynamo {runtime}: move it to {first}")
    if not moves:
        return None
    return (
        f"moving the platform from chart {previous} to {target} would leave"
        f" DynamoGraphDeployments on a Dynamo release the operator of chart {target} does not"
        f" support (Dynamo supports a runtime of the operator's minor or one minor older): "
        f"{'; '.join(moves)}. Move those graph stacks first, in this order (engine.dynamoVersion"
        " in each, `pulumi up -s <stack>`), then the platform"
    )


def release_removal_problem(
    release: str, graphs: Sequence[Mapping[str, Any]] | None, unlisted: str | None
) -> str | None:
    """Why this update must not uninstall the stack's own Helm release ``release``
    (``<namespace>/<name>``) yet: DynamoGraphDeployments that outlive the update still need
    its operator (``graphs``: those other than what the update deletes; their finalizers and
    their rollouts need the operator), or they could not be listed (``unlisted``: the reason;
    the check fails closed). None when nothing needs it.
    """
    if unlisted is not None:
        return (
            f"this update uninstalls Helm release {release} (the Dynamo operator) and the"
            f" cluster's DynamoGraphDeployments could not be listed ({unlisted}), so it is not"
            " known whether one still needs it: grant `list` on dynamographdeployments.nvidia.com"
            " in every namespace, or keep the release (stackRole: standalone, platform.install:"
            " true, its releaseName and namespace as they were)"
        )
    if not graphs:
        return None
    return (
        f"this update uninstalls Helm release {release} (the Dynamo operator) while"
        f" {graphs_in_cluster(graphs)}, which need it; keep the release (stackRole:"
        " standalone, platform.install: true, its releaseName and namespace as they were),"
        " or first take those graphs down (`pulumi config set -s <stack> parked true`,"
        " `pulumi up -s <stack>`; this stack's own too"
        " when it keeps its graph), then make this change"
    )


def namespace_problem(
    namespace: str, create: bool, found: bool | None, labels: Mapping[str, str] | None
) -> str | None:
    """Why the stack's namespace is in the way, with the fix; None when it is not (or could
    not be read: ``found`` None).

    ``createNamespace: false`` needs the namespace to exist. ``true`` creates it, which fails
    with AlreadyExists on a namespace this program did not create (one an admin made: it lacks
    the ``app.kubernetes.io/managed-by: dynamo-testbed`` label every namespace the program
    creates carries, :func:`manifests.graph.namespace_manifest`), since pulumi-kubernetes
    creates client-side (provider/pkg/await/await.go L252 and L276-290 at
    ``tests/cli_rules/kubernetes_await.PULUMI_KUBERNETES_COMMIT``).
    """
    if found is None:
        return None
    if not create and not found:
        return (
            f"namespace '{namespace}' does not exist and the stack does not create it; ask an"
            f" admin to create it (`kubectl create namespace {namespace}`) or set"
            " createNamespace: true"
        )
    if create and found and not created_by_program(labels):
        return (
            f"namespace '{namespace}' already exists and this program did not create it, so"
            " creating it would fail with AlreadyExists; set createNamespace: false to deploy"
            " into it"
        )
    return None


def created_by_program(labels: Mapping[str, str] | None) -> bool:
    """Whether a namespace carries the label every namespace the program creates has
    (:data:`manifests.graph.MANAGED_BY`)."""
    return all((labels or {}).get(k) == v for k, v in MANAGED_BY.items())


def namespace_handover(namespace: str, create: bool, found: bool | None, labels: Any) -> str | None:
    """The note of a stack that stops creating a namespace the program created, or None.

    ``createNamespace`` flipped to false on a deployed stack: were the Namespace no longer
    registered, the engine would delete it after the update (a resource the program stops
    registering is deleted once the registrations are done: pulumi/pulumi
    ``pkg/resource/deploy/deployment_executor.go`` L486, ``GenerateDeletes``, at
    ``tests/cli_rules/pulumi_cli.PULUMI_COMMIT``) and the namespace controller deletes every
    object in it (the DGD, Service, Secret: kubernetes ``pkg/controller/namespace/deletion/
    namespaced_resources_deleter.go`` ``deleteAllContent``). Instead the program registers it
    once more with ``retainOnDelete`` and without :data:`~manifests.graph.MANAGED_BY`; the next
    update no longer sees that label and drops it, and the engine's delete of a resource whose
    state says ``retainOnDelete`` leaves the object (``pkg/resource/deploy/step.go`` L661,
    ``DeleteStep.Apply``).
    """
    if create or not found or not created_by_program(labels):
        return None
    return (
        f"namespace {namespace}: created by this program, and createNamespace is now false:"
        " this update hands it over (it stays, with everything in it, marked retainOnDelete and"
        " without the app.kubernetes.io/managed-by label); the next `pulumi up` drops it from"
        " the stack's state without deleting it. Nothing is deleted"
    )


def deployed_chart_version(releases: Sequence[Mapping[str, Any]]) -> str | None:
    """The chart version of a release's deployed revision: the highest ``version`` whose
    ``info.status`` is ``deployed`` (helm v3 ``pkg/release/status.go``: the revision in service is
    ``deployed``; ``pkg/action/upgrade.go`` marks the previous one ``superseded`` only once the
    new one is deployed, so a failed or pending upgrade leaves it ``deployed``), as
    ``chart.metadata.version``; None when no revision is deployed.

    Args:
        releases: Helm's records of one release (decoded, :func:`clusterread.read.helm_record`).
    """
    deployed = [r for r in releases if (r.get("info") or {}).get("status") == "deployed"]
    if not deployed:
        return None
    latest = max(deployed, key=lambda r: int(r.get("version") or 0))
    version = ((latest.get("chart") or {}).get("metadata") or {}).get("version")
    return None if version is None else str(version)
