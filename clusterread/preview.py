"""What ``pulumi preview`` checks on the cluster before anything is registered: the nodes against
the stack's node classes, an operator already running, a move of the platform's chart against
the cluster's DGDs, DGDs still deployed while a platform lifts its protect, the stack's
namespace, the permissions ``pulumi up`` needs, and how a change of a deployed graph rolls out
(:func:`check_cluster`).

No Pulumi import: the program passes what it reads from the Pulumi config as plain values
(:class:`ClusterAccess`) and its log (:class:`PreviewLog`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from clusterread.access import missing_permission_line, required_permissions
from clusterread.checks import (
    class_gpu_units,
    class_needs,
    cluster_problems,
    deployed_chart_version,
    deployed_graphs_problem,
    existing_operator_problem,
    namespace_handover,
    namespace_problem,
    operation_in_progress,
    own_revisions,
    platform_move_problem,
    release_description,
    rolled_back_note,
)
from clusterread.gpu_shares import share_problems, unit_problems
from clusterread.read import ClusterReadError, ClusterView, read_cluster
from clusterread.rollout import Rollout, plan_rollout
from manifests.graph import graph_workloads
from stackmodel.config import StackConfig
from stackmodel.errors import PROJECT, ConfigProblem, StackConfigError
from stackmodel.platform import PlatformConfig, release_namespace
from stackmodel.stack_layout import platform_upgrade_problem
from stackmodel.topology import Topology


class PreviewLog(Protocol):
    """Where the checks' warnings and notes go (``pulumi.log`` in the program)."""

    def warn(self, msg: str) -> None: ...

    def info(self, msg: str) -> None: ...


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach the cluster, as the stack's Kubernetes provider does (the ``kubernetes``
    namespace's ``kubeconfig`` and ``context``; None: the default), and whether the stack sets
    the secret ``hfToken`` (its workers then read the Secret, a permission ``pulumi up``
    needs)."""

    kubeconfig: str | None = None
    context: str | None = None
    hf_token: bool = False


def check_cluster(
    stack: str,
    cfg: StackConfig | None,
    platform: PlatformConfig | None,
    namespace: str,
    access: ClusterAccess,
    log: PreviewLog,
    *,
    topology: Topology | None = None,
    unprotecting: bool = False,
) -> Rollout | None:
    """Check the cluster ``access`` reaches, before anything is registered: the nodes against
    ``cfg``'s node classes (:func:`cluster_problems`; with ``sizing.clusterCheck`` error, warn
    or off), for a ``platform`` that installs the release an operator already running
    (:func:`existing_operator_problem`), else its last update's failure (a warning,
    :func:`rolled_back_note`) and a move of its chart against Dynamo's path and against every
    DGD of the cluster but the stack's own (:func:`platform_move_problem`), and when a platform
    stack lifts its ``protect`` (``unprotecting``) DGDs still deployed
    (:func:`deployed_graphs_problem`); these are always errors. The stack's namespace against
    ``createNamespace`` (:func:`namespace_problem`, an error), and the permissions ``pulumi
    up`` needs that the user lacks (:func:`required_permissions`, reviewed by the API server;
    one warning each, with the rule that grants it). With the nodes read, how the change of a
    deployed graph rolls out on the GPU shares (:func:`plan_rollout`, its decisions logged; one
    that cannot roll out is an error), and with the pods read too, the GPU units other
    namespaces' pods leave free on its nodes (:func:`unit_problems`) and each worker's GPU
    memory share beside other stacks' workers on its time-sliced nodes (:func:`share_problems`).
    ``topology`` is ``cfg``'s (given with it). Warnings and
    notes go to ``log``.

    No access to the API (no kubeconfig, unreachable, forbidden) is one warning, never a
    failure, except while a platform lifts its protect: then DGDs that could not be listed
    are an error naming the permission (the check fails closed). A move of the platform's chart
    whose DGD list the API refuses is an error naming the permission too.

    Returns:
        The rollout (None when not checked).

    Raises:
        StackConfigError: naming ``nodeClasses.<class>`` (what the nodes have, what the stack
            needs), ``platform.install``, ``platform.protect`` or ``topology``.
    """
    mode = "off" if cfg is None or cfg.parked else cfg.sizing.cluster_check
    installs = platform is not None and platform.install
    own_namespace = cfg is not None and (mode != "off" or not cfg.create_namespace)
    if mode == "off" and not installs and not unprotecting and not own_namespace:
        return None
    release = None
    if platform is not None and installs:
        release = (release_namespace(platform, namespace), platform.release_name)
    try:
        view = read_cluster(
            access.kubeconfig,
            access.context,
            nodes=mode != "off",
            release=release,
            graphs=unprotecting or installs,
            namespace=cfg.namespace if cfg is not None and own_namespace else None,
            access=required_permissions(cfg, with_hf_token=access.hf_token)
            if cfg is not None and own_namespace
            else (),
        )
    except ClusterReadError as exc:
        if unprotecting:
            raise StackConfigError(
                stack, [ConfigProblem("platform.protect", False, unlisted_graphs(str(exc)))]
            ) from None
        log.warn(f"stack '{stack}': cluster not checked (no API access: {exc})")
        return None
    if unprotecting and view.graphs_unlisted is not None:
        raise StackConfigError(
            stack, [ConfigProblem("platform.protect", False, unlisted_graphs(view.graphs_unlisted))]
        )
    _log_access(stack, cfg, view, access, log)
    own_graphs = cfg.namespace if cfg is not None else None
    problems = _release_problems(stack, platform, namespace, release, view, own_graphs, log)
    graphs = deployed_graphs_problem(view.graphs or []) if unprotecting else None
    if graphs is not None:
        problems.append(ConfigProblem("platform.protect", False, graphs))
    if cfg is not None:
        found = namespace_problem(
            cfg.namespace, cfg.create_namespace, view.namespace_found, view.namespace_labels
        )
        if found is not None:
            problems.append(ConfigProblem("createNamespace", cfg.create_namespace, found))
    rollout = None
    if cfg is not None and topology is not None and view.nodes is not None:
        problems += _judged(stack, mode, cluster_problems(cfg, topology, view.nodes), log)
        if view.pods is not None:
            shares = unit_problems(cfg, topology, view.nodes, view.pods)
            shares += share_problems(cfg, topology, view.nodes, view.pods)
            problems += _judged(stack, mode, shares, log)
        rollout = check_rollout(stack, cfg, topology, view, access, log)
        if rollout is not None and rollout.problem is not None:
            refused = ConfigProblem("topology", cfg.topology.kind, rollout.problem)
            problems += _judged(stack, mode, [refused], log)
    if problems:
        raise StackConfigError(stack, problems)
    handover = None
    if cfg is not None:
        handover = namespace_handover(
            cfg.namespace, cfg.create_namespace, view.namespace_found, view.namespace_labels
        )
    if handover is not None:
        log.warn(f"stack '{stack}': {handover}")
        rollout = rollout or Rollout()
        rollout.hand_over_namespace = True
    return rollout


def _judged(
    stack: str, mode: str, found: list[ConfigProblem], log: PreviewLog
) -> list[ConfigProblem]:
    """``found`` as ``sizing.clusterCheck`` ``mode`` treats it: warned (``warn``), else the
    problems refused."""
    if mode != "warn":
        return found
    for problem in found:
        log.warn(f"stack '{stack}': {problem.render()}")
    return []


def _log_access(
    stack: str, cfg: StackConfig | None, view: ClusterView, access: ClusterAccess, log: PreviewLog
) -> None:
    """What could not be read, each permission the user lacks, or that every one is granted."""
    for what in view.unreadable:
        log.warn(f"stack '{stack}': cluster partly checked, not readable: {what}")
    for permission in view.denied or []:
        log.warn(missing_permission_line(stack, permission))
    if view.denied == [] and cfg is not None:
        asked = len(required_permissions(cfg, with_hf_token=access.hf_token))
        log.info(
            f"stack '{stack}': your credentials grant each of the {asked} permissions `pulumi"
            " up` uses (docs/shared-cluster.md, 'Running with namespaced permissions')"
        )


def _release_problems(
    stack: str,
    platform: PlatformConfig | None,
    namespace: str,
    release: tuple[str, str] | None,
    view: ClusterView,
    own_graphs: str | None,
    log: PreviewLog,
) -> list[ConfigProblem]:
    """The platform's release against the cluster (an install, upgrade or rollback of it in
    progress, an operator already running, else the upgrade of this stack's own release: its
    last update's failure noted, the move checked against Dynamo's path and against the graphs
    in the cluster but this stack's own, those in namespace ``own_graphs``)."""
    problems: list[ConfigProblem] = []
    if platform is not None and release is not None:
        own = release_description(PROJECT, stack)
        releases = view.releases or []
        found = operation_in_progress(*release, releases) or existing_operator_problem(
            platform, namespace, own, releases, view.cluster_roles or []
        )
        if found is not None:
            problems.append(ConfigProblem("platform.install", True, found))
        else:  # this stack's own release (or none yet): the upgrade it would make
            revisions = own_revisions(releases, own)
            note = rolled_back_note(f"{release[0]}/{release[1]}", revisions) if revisions else None
            if note is not None:
                log.warn(f"stack '{stack}': {note}")
            previous = deployed_chart_version(releases)
            upgrade = platform_upgrade_problem(
                previous,
                platform.chart_version,
                f"Helm release {release[0]}/{release[1]} in the cluster",
            )
            if upgrade is not None:
                problems.append(upgrade)
            elif previous is not None and previous != platform.chart_version:
                others = [
                    g
                    for g in view.graphs or []
                    if (g.get("metadata") or {}).get("namespace") != own_graphs
                ]
                unlisted = view.graphs_unlisted
                move = platform_move_problem(previous, platform.chart_version, others, unlisted)
                if move is not None:
                    problems.append(
                        ConfigProblem("platform.chartVersion", platform.chart_version, move)
                    )
    return problems


def unlisted_graphs(reason: str) -> str:
    """The error of a platform lifting its protect when its DGDs could not be listed."""
    return (
        f"could not list the cluster's DynamoGraphDeployments ({reason}), so it is not known"
        " whether graph stacks still need the operator; protect is lifted only after that"
        " list: grant your user `list` on dynamographdeployments.nvidia.com in every namespace"
        " (ClusterRole rule: apiGroups [nvidia.com], resources [dynamographdeployments],"
        " verbs [list]) and make the API reachable, then run the preview again"
    )


def check_rollout(
    stack: str,
    cfg: StackConfig,
    topology: Topology,
    view: ClusterView,
    access: ClusterAccess,
    log: PreviewLog,
) -> Rollout | None:
    """How the change rolls out from what runs in the stack's namespace
    (:func:`plan_rollout` on the stack's allocatable GPU units per node class), each decision
    logged; None when the workloads could not be read (a warning)."""
    if view.workloads is None:
        log.warn(
            f"stack '{stack}': rollout not checked: the workloads in namespace"
            f" '{cfg.namespace}' were not readable"
        )
        return None
    classes = {
        need.name: (need.selector, class_gpu_units(need, view.nodes or []))
        for need in class_needs(cfg, topology)
    }
    new = [] if cfg.parked else graph_workloads(cfg, topology, with_hf_token=access.hf_token)
    rollout = plan_rollout(stack, new, view.workloads, classes)
    for note in rollout.notes:
        log.info(f"stack '{stack}': {note}")
    return rollout
