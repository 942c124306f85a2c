"""The Pulumi program: read the stack's config, validate it, register the testbed.

``__main__.py`` calls :func:`main`. ``testbed render`` runs the same :func:`main` under Pulumi's
mocks, so what it writes is what ``pulumi up`` would apply. The stack's ``stackRole`` decides
what it registers (:mod:`stackmodel.stack_layout`): the platform (``platform``), a graph that
reads its platform stack (``graph``, the default), or both in one stack (``standalone``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pulumi

from clusterread.checks import (
    deployed_chart_version,
    release_removal_problem,
)
from clusterread.preview import ClusterAccess, check_cluster
from clusterread.read import ClusterReadError, read_cluster
from clusterread.rollout import Rollout
from components.graph_component import GraphArgs, TestbedGraph
from components.k8s_objects import register_object
from components.load_provider import LoadStep, register_load_step
from components.platform_component import DynamoPlatform
from incluster.manifests import rbac_entry as load_rbac_entry
from loadstep.comparison import baseline_note, comparison_output
from loadstep.inputs import held_reason, memory_floors, topology_fingerprint
from manifests.graph import (
    frontend_service_manifest,
    graph_workloads,
    hf_secret_manifest,
    namespace_manifest,
)
from stackmodel.config import (
    PlatformStackConfig,
    StackConfig,
    project_values,
    stack_role,
)
from stackmodel.errors import PROJECT, ConfigProblem, ConfigWarning, StackConfigError
from stackmodel.plan import StackPlan
from stackmodel.platform import PlatformConfig, release_namespace, testbed_namespace_labels
from stackmodel.rbac import rbac_summary
from stackmodel.resources import StackResources, compare_resources, group_kv_tokens, stack_resources
from stackmodel.stack_layout import (
    PlatformExports,
    PlatformStackError,
    VersionGateError,
    missing_platform_message,
    platform_exports,
    platform_upgrade_problem,
    read_platform_exports,
    stack_reference_name,
    version_gate,
)
from stackmodel.stack_warnings import platform_release_warnings, stack_warnings
from stackmodel.topology import FRONTEND_PORT, Topology, build_topology
from stackmodel.validation import validate_platform_stack, validate_stack


def stack_config_map() -> dict[str, Any]:
    """The running stack's whole config map, every namespace (``dynamo-testbed:topology``,
    ``kubernetes:context``, ...), not only known keys, so that unknown keys can be rejected
    and other namespaces checked (:func:`stackmodel.config.namespace_problems`)."""
    from pulumi.runtime import config as runtime_config

    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def main(cluster_checks: bool = False) -> None:
    """Entry point of ``pulumi up``/``preview``: validate, then register everything.

    Args:
        cluster_checks: read the cluster first and check what the stack needs of it
            (:func:`clusterread.preview.check_cluster`); ``__main__.py`` sets it, offline
            render and tests do not.

    Raises:
        StackConfigError: bad config, or a cluster that lacks what the stack needs; raised
            before any resource is registered.
    """
    stack = pulumi.get_stack()
    config_map = stack_config_map()
    raw = project_values(config_map)
    if stack_role(raw) == "platform":
        platform_cfg = validate_platform_stack(stack, raw, config_map)
        if cluster_checks:
            check_cluster(
                stack,
                None,
                platform_cfg.platform,
                platform_cfg.platform.namespace,
                cluster_access(),
                pulumi.log,
                unprotecting=platform_cfg.platform.install and not platform_cfg.platform.protect,
            )
        deploy_platform(platform_cfg)
        return
    plan = validate_stack(stack, raw, config_map)
    cfg = plan.cfg
    topology = build_topology(plan)
    rollout = None
    if cluster_checks:
        installs = cfg.stack_role == "standalone" and cfg.topology.kind == "dynamo"
        platform = cfg.platform if installs else None
        rollout = check_cluster(
            stack, cfg, platform, cfg.namespace, cluster_access(), pulumi.log, topology=topology
        )
    token = pulumi.Config(PROJECT).get_secret("hfToken")
    deploy(plan, topology, token, rollout, read_operator=cluster_checks)


def cluster_access() -> ClusterAccess:
    """How preview reaches the cluster: the stack's Kubernetes provider's ``kubeconfig`` and
    ``context``, and whether the stack sets the secret ``hfToken``."""
    kubernetes = pulumi.Config("kubernetes")
    return ClusterAccess(
        kubernetes.get("kubeconfig"),
        kubernetes.get("context"),
        pulumi.Config(PROJECT).get_secret("hfToken") is not None,
    )


def deploy_platform(cfg: PlatformStackConfig) -> None:
    """Register the platform stack: the ``dynamo-platform`` release (cluster-wide operator,
    CRDs, webhooks, RBAC from the chart) and export :class:`PlatformExports`, one output each
    (``stackRole``, ``operatorNamespace``, ``operatorScope``, ``releaseName``,
    ``chartVersion``, ``installed``, ``operatorRbac``)."""
    installs = cfg.platform.install  # a stack that installs nothing upgrades nothing
    warnings = [w.render() for w in platform_release_warnings(cfg.platform)]
    for warning in warnings:
        pulumi.log.warn(warning)
    DynamoPlatform(
        "platform",
        cfg.platform,
        cfg.platform.namespace,
        depends_on=(
            previous_platform_gate(pulumi.get_stack(), cfg.platform, "chartVersion")
            if installs
            else ()
        ),
        protect=cfg.platform.protect,
    )
    for key, value in platform_exports(cfg.platform).outputs().items():
        pulumi.export(key, value)
    if warnings:
        pulumi.export("warnings", warnings)


def previous_platform_gate(
    stack: str, platform: PlatformConfig, *path: str
) -> pulumi.Output[list[pulumi.Resource]]:
    """The upgrade gate on the chart version this stack ran at its last update: its own
    outputs (``path`` into them: ``chartVersion`` for a platform stack, ``platform``,
    ``chartVersion`` for a standalone one), read through the engine's
    :data:`READ_STACK_OUTPUTS` (served at preview too; a stack never brought up has none).

    Returns a ``depends_on`` value for the release: it resolves (to no resources) only once the
    check passed, so a refused upgrade never reaches Helm; a refusal raises
    :class:`VersionGateError` naming ``platform.chartVersion`` and the release to apply first
    (:func:`~stackmodel.stack_layout.platform_upgrade_problem`).
    """
    name = stack_reference_name(stack, pulumi.get_organization(), PROJECT)

    async def checked() -> list[pulumi.Resource]:
        outputs, _ = await read_stack_outputs(name)
        previous: Any = outputs or {}
        for key in path:
            previous = previous.get(key) if isinstance(previous, dict) else None
        problem = platform_upgrade_problem(
            previous if isinstance(previous, str) else None,
            platform.chart_version,
            "this stack's outputs from its last update",
        )
        if problem is not None:
            raise VersionGateError(stack, [problem])
        return []

    # An awaitable is an Input (``Output.from_input`` awaits it); the stubs do not say so.
    waiting: Any = checked()
    return pulumi.Output.from_input(waiting)


async def _checked_platform(
    stack: str,
    name: str,
    reference: pulumi.StackReference,
    runtime: str | None,
    read_operator: bool,
) -> tuple[PlatformExports, list[ConfigWarning]]:
    """The platform stack's exports and the version gate's warnings.

    A missing stack (the engine's ``unknown stack`` read error) or one without outputs raises
    :class:`PlatformStackError` naming it. The gate (:func:`version_gate`) compares the
    workers' release ``runtime`` with the operator's: the platform stack's ``chartVersion``,
    and with ``read_operator`` (``pulumi preview``/``up``, not offline) also the deployed
    revision of its Helm release in the cluster when it is readable (the release the operator
    really runs; :func:`_cluster_chart_version`). A refusal raises :class:`VersionGateError`
    on ``engine.dynamoVersion``.
    """
    try:
        outputs = await reference.outputs.future()
    except Exception as exc:
        raise PlatformStackError(missing_platform_message(stack, name, str(exc))) from exc
    exports = read_platform_exports(stack, name, outputs)
    operators = [(f"platform stack '{name}'", exports.chart_version)]
    if read_operator and exports.release_name is not None:
        where = (exports.operator_namespace, exports.release_name)
        found = await asyncio.to_thread(_cluster_chart_version, stack, where)
        if found is not None and found != exports.chart_version:
            operators.append((f"Helm release {where[0]}/{where[1]} in the cluster", found))
    warnings: list[ConfigWarning] = []
    for operator, chart_version in operators:
        verdict = version_gate(stack, runtime, operator, chart_version)
        if verdict is None:
            continue
        if verdict.refused:
            raise VersionGateError(stack, [verdict.problem(stack, runtime)])
        warnings.append(verdict.warning(runtime))
    return exports, warnings


def _cluster_chart_version(stack: str, release: tuple[str, str]) -> str | None:
    """The chart version of the deployed revision of Helm release ``release`` (namespace,
    name) in the cluster (:func:`deployed_chart_version`); None, with a warning, when the
    cluster or the release's records are not readable (a graph stack's user may see only
    its own namespace)."""
    access = cluster_access()
    try:
        view = read_cluster(access.kubeconfig, access.context, release=release)
    except ClusterReadError as exc:
        pulumi.log.warn(f"stack '{stack}': operator version not read from the cluster ({exc})")
        return None
    if view.releases is None:
        pulumi.log.warn(
            f"stack '{stack}': operator version not read from the cluster: "
            f"{'; '.join(view.unreadable)}"
        )
        return None
    return deployed_chart_version(view.releases)


def platform_reference(
    cfg: StackConfig, stack: str, read_operator: bool
) -> tuple[
    pulumi.Output[PlatformExports],
    pulumi.Output[list[ConfigWarning]],
    pulumi.Output[list[pulumi.Resource]],
]:
    """Read the graph stack's platform stack (``platformStack``) through a StackReference.

    Returns the checked exports, the version gate's warnings (:func:`_checked_platform`) and a
    ``depends_on`` value that resolves only once they are checked: the namespace (and through
    it every object of the stack) waits for it, so a missing platform or a refused version
    fails before anything is created, in ``pulumi preview`` too (the engine reads references
    at preview).
    """
    name = stack_reference_name(cfg.platform_stack, pulumi.get_organization(), PROJECT)
    reference = pulumi.StackReference("platform-stack", name)
    runtime = cfg.engine.runtime_version
    # An awaitable is an Input (``Output.from_input`` awaits it); the stubs do not say so.
    checked: Any = _checked_platform(stack, name, reference, runtime, read_operator)
    read: pulumi.Output[tuple[PlatformExports, list[ConfigWarning]]] = pulumi.Output.from_input(
        checked
    )
    exports = read.apply(lambda r: r[0])
    return exports, read.apply(lambda r: r[1]), read.apply(lambda _: [reference])


def registered_release(cfg: StackConfig) -> tuple[str, str] | None:
    """The Helm release (namespace, name) this update registers: a standalone dynamo stack's
    that installs; None otherwise."""
    if cfg.stack_role != "standalone" or cfg.topology.kind != "dynamo" or not cfg.platform.install:
        return None
    return release_namespace(cfg.platform, cfg.namespace), cfg.platform.release_name


def previous_release(stack: str, outputs: dict[str, Any]) -> tuple[str, str] | None:
    """The Helm release (namespace, name) the stack's last update installed, from its outputs
    (``platform`` naming this stack, ``installed``); None when it installed none."""
    platform = outputs.get("platform")
    if not isinstance(platform, dict) or platform.get("stack") != stack:
        return None
    if not platform.get("installed") or not platform.get("releaseName"):
        return None
    scoped = platform.get("operatorScope") == "namespace"
    namespace = outputs.get("namespace") if scoped else platform.get("operatorNamespace")
    return str(namespace), str(platform["releaseName"])


def _dropping_key(cfg: StackConfig) -> tuple[str, Any]:
    """The key whose value makes this update drop or move the stack's release."""
    if cfg.stack_role != "standalone":
        return "stackRole", cfg.stack_role
    if cfg.topology.kind != "dynamo":
        return "topology", cfg.topology.kind
    if not cfg.platform.install:
        return "platform.install", False
    return "platform.releaseName", cfg.platform.release_name


def _cluster_graphs() -> tuple[list[dict[str, Any]] | None, str | None]:
    """The cluster's DynamoGraphDeployments, or why they could not be listed."""
    access = cluster_access()
    try:
        view = read_cluster(access.kubeconfig, access.context, graphs=True)
    except ClusterReadError as exc:
        return None, str(exc)
    return view.graphs, view.graphs_unlisted


def previous_update_gate(
    plan: StackPlan, stack: str, hands_over: bool
) -> pulumi.Output[list[pulumi.Resource]]:
    """What this update does to what the stack's last update made (its outputs, read through
    :data:`READ_STACK_OUTPUTS`; none for a stack never brought up): the release check
    (:func:`check_release_removal`), the namespace check (:func:`namespace_drop_problem`;
    ``hands_over``: this update hands the namespace over) and, for a stack moved to another
    namespace, the note of what goes (:func:`namespace_move_note`). Returns a ``depends_on``
    value that resolves once the checks passed."""
    name = stack_reference_name(stack, pulumi.get_organization(), PROJECT)

    async def checked() -> list[pulumi.Resource]:
        found, _ = await read_stack_outputs(name)
        outputs = found or {}
        dropped = namespace_drop_problem(plan.cfg, outputs, hands_over)
        if dropped is not None:
            raise StackConfigError(stack, [ConfigProblem("createNamespace", False, dropped)])
        await check_release_removal(plan, stack, outputs)
        note = namespace_move_note(plan.cfg, outputs)
        if note is not None:
            pulumi.log.warn(f"stack '{stack}': {note}")
        return []

    # An awaitable is an Input (``Output.from_input`` awaits it); the stubs do not say so.
    waiting: Any = checked()
    return pulumi.Output.from_input(waiting)


def namespace_drop_problem(
    cfg: StackConfig, outputs: dict[str, Any], hands_over: bool
) -> str | None:
    """Why ``createNamespace: false`` would delete the namespace the stack's last update
    created (its ``createNamespace`` output true, same ``namespace``) because preview could
    not read it to hand it over (:func:`clusterread.checks.namespace_handover`): without it
    the Namespace is no longer registered and is deleted after the update with everything in
    it. None when the namespace stays."""
    if cfg.create_namespace or hands_over or outputs.get("createNamespace") is not True:
        return None
    if outputs.get("namespace") != cfg.namespace:
        return None
    return (
        f"this stack created namespace {cfg.namespace}, which preview could not read to hand it"
        " over, so `pulumi up` would delete it with everything in it; run the preview with"
        " credentials that can get namespaces (then it hands the namespace over and keeps it),"
        " or keep createNamespace: true"
    )


def namespace_move_note(cfg: StackConfig, outputs: dict[str, Any]) -> str | None:
    """What goes when the stack moves from the namespace of its last update (``outputs``) to
    ``cfg.namespace``: every object of the stack is replaced, deleted first (a changed
    ``metadata.namespace`` forces a replacement: pulumi-kubernetes
    ``provider/pkg/provider/provider.go`` L1559-1560, and they are registered
    ``deleteBeforeReplace``); the load step runs the grid again (its URL changes); and the
    old Namespace, when the stack created it, is no longer registered and so deleted after
    the update (``GenerateDeletes``), with every object in it. None when it does not move."""
    before = outputs.get("namespace")
    if not isinstance(before, str) or before == cfg.namespace:
        return None
    return (
        f"namespace {before} -> {cfg.namespace}: `pulumi up` deletes the stack's objects in"
        f" {before} and creates them in {cfg.namespace} (each deleted first), the load step"
        " runs the grid again (its URL changes; the last results stay in their folder), and if"
        f" this stack created namespace {before} (createNamespace) it is deleted after the"
        " update with every object in it"
    )


async def check_release_removal(plan: StackPlan, stack: str, outputs: dict[str, Any]) -> None:
    """That this update does not uninstall the stack's own Helm release while a
    DynamoGraphDeployment needs it: the release its last update installed
    (:func:`previous_release`), dropped by this update (``stackRole``, ``topology.kind``,
    ``platform.install``) or moved (its name or namespace: pulumi-kubernetes replaces a
    ``helm.v3.Release`` whose name or namespace changes) is deleted once the registrations are
    done (pulumi/pulumi ``pkg/resource/deploy/deployment_executor.go`` L486,
    ``GenerateDeletes``). Refused (:func:`clusterread.checks.release_removal_problem`, naming
    the key) while the cluster has a DGD this update does not delete, or when the DGDs cannot
    be listed; otherwise preview warns that the operator is uninstalled.

    Raises:
        StackConfigError: the refusal.
    """
    cfg = plan.cfg
    before = previous_release(stack, outputs)
    if before is None or before == registered_release(cfg):
        return
    release = f"{before[0]}/{before[1]}"
    graphs, unlisted = await asyncio.to_thread(_cluster_graphs)
    keeps_graph = cfg.topology.kind == "dynamo" and not cfg.parked
    own = None if keeps_graph else (outputs.get("namespace"), outputs.get("dgdName"))
    remaining = [
        g
        for g in graphs or []
        if ((g.get("metadata") or {}).get("namespace"), (g.get("metadata") or {}).get("name"))
        != own
    ]
    problem = release_removal_problem(release, remaining, unlisted)
    if problem is not None:
        key, value = _dropping_key(cfg)
        raise StackConfigError(stack, [ConfigProblem(key, value, problem)])
    pulumi.log.warn(
        f"stack '{stack}': Helm release {release} (the Dynamo operator this stack installed) is"
        " uninstalled after the update; no DynamoGraphDeployment that outlives the update"
        " needs it"
    )


@dataclass(frozen=True)
class PlatformWiring:
    """How a graph stack hangs on its operator: the ``platform`` and ``rbac`` outputs, the
    ``warnings`` output (the version gate's joining the stack's own), what the namespace waits
    for, and the standalone stack's upgrade gate on its own release."""

    platform: Any = None
    rbac: Any = field(default_factory=list)
    warnings: Any = field(default_factory=list)
    namespace_depends: Any = field(default_factory=list)
    release_gate: pulumi.Output[list[pulumi.Resource]] | None = None


def platform_wiring(
    plan: StackPlan, stack: str, noted: list[ConfigWarning], read_operator: bool
) -> PlatformWiring:
    """The operator a graph stack runs under (:class:`PlatformWiring`).

    A ``graph`` stack reads its platform stack (:func:`platform_reference`); a ``standalone``
    one installs its own release, whose version gate (:func:`~stackmodel.stack_layout.
    version_gate` against its own ``platform.chartVersion``) refuses here or adds its warning
    to ``noted``, and whose upgrade gate (:func:`previous_platform_gate`) the release waits for;
    ``vllm-service`` runs no operator and grants nothing. ``noted`` are the warnings known now
    (each logged); the gate's, known once the platform stack is read, are logged then.

    Raises:
        StackConfigError: the standalone stack's workers are beyond what its release supports.
    """
    cfg = plan.cfg
    if cfg.topology.kind != "dynamo":
        _log(noted)
        return PlatformWiring(warnings=_rendered(noted))
    if cfg.stack_role == "graph":
        _log(noted)
        exports, gate_warnings, ready = platform_reference(cfg, stack, read_operator)
        return PlatformWiring(
            platform=exports.apply(lambda e: {"stack": cfg.platform_stack, **e.outputs()}),
            rbac=exports.apply(lambda e: [e.operator_rbac]),
            warnings=gate_warnings.apply(lambda found: _rendered([*noted, *_log(found)])),
            namespace_depends=ready,
        )
    runtime = cfg.engine.runtime_version
    chart = cfg.platform.chart_version
    verdict = version_gate(stack, runtime, "this stack's platform.chartVersion", chart)
    if verdict is not None and verdict.refused:
        raise StackConfigError(stack, [verdict.problem(stack, runtime)])
    if verdict is not None:
        noted = [*noted, verdict.warning(runtime)]
    _log(noted)
    gate = None
    if cfg.platform.install:
        gate = previous_platform_gate(stack, cfg.platform, "platform", "chartVersion")
    return PlatformWiring(
        platform={"stack": stack, **platform_exports(cfg.platform).outputs()},
        rbac=rbac_summary(cfg.platform, cfg.namespace),
        warnings=_rendered(noted),
        release_gate=gate,
    )


def _log(warnings: list[ConfigWarning]) -> list[ConfigWarning]:
    """Log each of ``warnings`` as a Pulumi warning; returns them."""
    for warning in warnings:
        pulumi.log.warn(warning.render())
    return warnings


def _rendered(warnings: list[ConfigWarning]) -> list[str]:
    """The ``warnings`` output: each warning's line."""
    return [warning.render() for warning in warnings]


def register_namespace(plan: StackPlan, wiring: PlatformWiring, hand_over: bool = False) -> Any:
    """The namespace (``createNamespace``) and, for a standalone stack, its platform release;
    returns what the graph's objects wait for. Everything waits for the namespace, or without
    one for the platform check itself, so a missing platform still fails before anything is
    created; the standalone release waits for the namespace and its upgrade gate.

    With ``hand_over`` (``createNamespace: false`` on a namespace the program created:
    :func:`clusterread.checks.namespace_handover`) the Namespace is registered once more,
    ``retainOnDelete`` and without the program's label, so that no update deletes it."""
    cfg = plan.cfg
    uses_dynamo = cfg.topology.kind == "dynamo"
    depends: Any = wiring.namespace_depends
    if cfg.create_namespace or hand_over:
        labels = testbed_namespace_labels(cfg.platform) if uses_dynamo else {}
        opts = pulumi.ResourceOptions(depends_on=depends, retain_on_delete=hand_over or None)
        manifest = namespace_manifest(cfg.namespace, labels, managed=not hand_over)
        depends = [register_object(manifest, opts)]
    if uses_dynamo and cfg.stack_role == "standalone":
        waits = depends
        gate = wiring.release_gate
        release = DynamoPlatform(
            "platform",
            cfg.platform,
            cfg.namespace,
            depends_on=gate.apply(lambda _: waits) if gate is not None else waits,
        ).release
        if release is not None:
            depends = [*depends, release]
    return depends


def deploy(
    plan: StackPlan,
    topology: Topology,
    hf_token: pulumi.Output[str] | None,
    rollout: Rollout | None = None,
    *,
    read_operator: bool = False,
) -> None:
    """Register a graph (or standalone) stack from its plan and topology and export its
    outputs.

    ``rollout`` (preview's :func:`clusterread.preview.check_rollout`): with ``replace_graph``
    the DGD is replaced, delete first, instead of updated in place.

    With ``parked`` the DGD (or Deployments) is not registered, so ``pulumi up`` deletes it and
    frees its GPUs; the namespace, Service, RBAC and the load step stay, the step with the
    fingerprint of the unparked topology, so its stored results are kept
    (:func:`loadstep.inputs.run_reasons`).

    The version gate (:func:`~stackmodel.stack_layout.version_gate`) refuses workers whose
    Dynamo release is beyond what Dynamo supports under their operator (the platform stack's
    ``chartVersion``, and with ``read_operator`` its Helm release in the cluster; a standalone
    stack's own ``platform.chartVersion``) and warns for what Dynamo tolerates; a standalone
    stack's release also passes the upgrade gate (:func:`previous_platform_gate`).

    Outputs: ``namespace``, ``createNamespace`` (whether the stack owns it), ``topology``
    (kind), ``dgdName`` (None for vllm-service or parked),
    ``parked``, ``resources`` (workers, GPUs and node classes the graph runs on:
    :class:`~stackmodel.resources.StackResources`), ``frontendService``,
    ``frontendPort``, ``placement`` (component, type, replicas, nodeClass, gpus), ``platform``
    (the operator the graph runs under: :class:`PlatformExports` plus the platform ``stack``;
    None for vllm-service), ``rbac`` (what the stack grants: the operator's entry, [] for
    vllm-service, and with ``load.runner: cluster`` the load step's namespaced Role:
    :func:`incluster.manifests.rbac_entry`), ``sizing`` (numbers with units in the keys),
    ``warnings`` (each warning's line: the stack's own,
    :func:`~stackmodel.stack_warnings.stack_warnings`; and the version gate's when the workers'
    Dynamo release is not the operator's chart version); the load step's ``results``,
    ``loadStatus``, ``loadRanAt``, ``loadResultsDir`` (:mod:`loadstep.inputs`), and with
    ``baselineStack`` also ``comparison`` (:mod:`loadstep.comparison`). The step is registered
    also when it runs nothing now (``load.enabled: false``, or before its address is set:
    :func:`loadstep.inputs.held_reason`, the ``loadStatus``), so a step that has run keeps its
    results.
    """
    cfg = plan.cfg
    stack = pulumi.get_stack()
    with_token = hf_token is not None
    noted = list(stack_warnings(plan, with_hf_token=with_token))
    wiring = platform_wiring(plan, stack, noted, read_operator)
    if read_operator:  # the namespace, and through it every object, waits for the check
        hands_over = rollout is not None and rollout.hand_over_namespace
        gate = previous_update_gate(plan, stack, hands_over)
        waits = pulumi.Output.from_input(wiring.namespace_depends)
        wiring = dataclasses.replace(
            wiring,
            namespace_depends=pulumi.Output.all(waits, gate).apply(lambda d: [*d[0], *d[1]]),
        )
    depends = register_namespace(
        plan, wiring, hand_over=rollout is not None and rollout.hand_over_namespace
    )
    workloads = graph_workloads(cfg, topology, with_hf_token=with_token)
    service = frontend_service_manifest(cfg, topology)
    graph = TestbedGraph(
        "graph",
        GraphArgs(
            namespace=cfg.namespace,
            # Parked: no GPU workloads; the Service stays, so its NodePort (the step's URL) too.
            workloads=[] if cfg.parked else workloads,
            frontend_service=service,
            secret=hf_secret_manifest(cfg.namespace, hf_token) if hf_token is not None else None,
            graph_name=topology.name,
            frontend_port=FRONTEND_PORT,
            replace_graph=rollout is not None and rollout.replace_graph,
        ),
        pulumi.ResourceOptions(depends_on=depends),
    )
    resources = stack_resources(cfg, topology, group_kv_tokens(plan))
    export_graph(plan, topology, graph, resources, wiring)
    held = held_reason(cfg, stack)
    if held is not None and cfg.load.enabled:
        pulumi.log.warn(f"stack '{stack}': load step {held}")
    fingerprint = topology_fingerprint(workloads, service)
    step = register_load_step(
        cfg,
        stack,
        graph,
        topology,
        resources,
        fingerprint,
        held=held is not None,
        memory_floors=memory_floors(plan),
    )
    export_load_step(cfg, step, resources, held)


def export_graph(
    plan: StackPlan,
    topology: Topology,
    graph: TestbedGraph,
    resources: StackResources,
    wiring: PlatformWiring,
) -> None:
    """The graph's outputs (:func:`deploy` lists them)."""
    cfg = plan.cfg
    uses_dynamo = topology.kind == "dynamo"
    pulumi.export("namespace", cfg.namespace)
    pulumi.export("createNamespace", cfg.create_namespace)
    pulumi.export("topology", topology.kind)
    pulumi.export("dgdName", topology.name if uses_dynamo and not cfg.parked else None)
    pulumi.export("parked", cfg.parked)
    pulumi.export("frontendService", graph.frontend_service)
    pulumi.export("frontendPort", graph.frontend_port)
    pulumi.export("placement", topology.placement_table())
    pulumi.export("resources", resources.model_dump(mode="json"))
    pulumi.export("platform", wiring.platform)
    rbac = wiring.rbac
    if cfg.load.enabled and cfg.load.runner == "cluster":  # the step's Job, with your identity
        entry = load_rbac_entry(cfg.namespace)
        rbac = pulumi.Output.from_input(rbac).apply(lambda grants: [*grants, entry])
    pulumi.export("rbac", rbac)
    pulumi.export("sizing", plan.sizing.export())
    pulumi.export("warnings", wiring.warnings)


def export_load_step(
    cfg: StackConfig, step: LoadStep, resources: StackResources, waiting: str | None = None
) -> None:
    """Export the load step's outputs (``loadStatus``: ``waiting``, the text of a step that
    waits for its address, else the step's status), ``loadSettings`` (the grid's LoadConfig,
    camelCase) and,
    with ``baselineStack``, the comparison with that stack's ``results``, ``resources`` and
    ``loadSettings`` (:func:`read_stack_outputs`: a baseline that does not exist, was never
    brought up or has no results is a ``note`` in the comparison, never a failed preview or
    update; a baseline without ``resources`` or ``loadSettings`` makes them unknown, and the
    comparison says so)."""
    pulumi.export("results", step.results)
    pulumi.export("loadStatus", waiting if waiting is not None else step.status)
    pulumi.export("loadRanAt", step.ranAt)
    pulumi.export("loadResultsDir", step.resultsDir)
    pulumi.export("incidents", step.incidents)
    pulumi.export("slo", step.slo)
    settings = cfg.load.grid().model_dump(mode="json", by_alias=True)
    pulumi.export("loadSettings", settings)
    if cfg.baseline_stack is None:
        return
    this = pulumi.get_stack()
    baseline = cfg.baseline_stack
    name = stack_reference_name(baseline, pulumi.get_organization(), PROJECT)
    # An awaitable is an Input (``Output.from_input`` awaits it); the stubs do not say so.
    reading: Any = read_stack_outputs(name)
    read: pulumi.Output[tuple[dict[str, Any] | None, str | None]] = pulumi.Output.from_input(
        reading
    )

    def noted(found: tuple[dict[str, Any] | None, str | None]) -> tuple[dict[str, Any], Any]:
        outputs, error = found
        note = baseline_note(baseline, this, error, outputs)
        if note is not None:  # known at preview too: the engine serves the read then
            pulumi.log.info(f"stack '{this}': comparison: {note}")
        return outputs or {}, note

    def comparison(values: list[Any]) -> dict[str, Any]:
        (outputs, note), results = values
        return comparison_output(
            baseline,
            this,
            outputs.get("results"),
            results,
            compare_resources(baseline, outputs.get("resources"), this, resources),
            note,
            (outputs.get("loadSettings"), settings),
        )

    checked = read.apply(noted)
    pulumi.export("comparison", pulumi.Output.all(checked, step.results).apply(comparison))


READ_STACK_OUTPUTS = "pulumi:pulumi:readStackOutputs"
"""The engine's builtin invoke that reads another stack's outputs (pulumi/pulumi at commit
1b5949891b3cefcb9974752b24a5ecef0acc86c8, ``pkg/resource/deploy/builtins.go`` L333 and
L338-355), the same read as a StackReference's (``readStackReference``, L371-420)."""


async def read_stack_outputs(name: str) -> tuple[dict[str, Any] | None, str | None]:
    """Stack ``name``'s outputs through :data:`READ_STACK_OUTPUTS`, or why they could not be read.

    Returns ``(outputs, None)`` (``{}`` for a stack created but never brought up) or
    ``(None, error)``: the engine's error for a stack that does not exist (``unknown stack``,
    ``pkg/backend/backend.go`` L408-418) or a name the backend refuses. The engine files cited
    here are pulumi/pulumi's at the commit of :data:`READ_STACK_OUTPUTS`.

    Why an invoke and not a StackReference: a StackReference is a resource read, and a read that
    fails fails its step, which cancels the whole preview or update whatever the program does
    with the error (``pkg/resource/deploy/step.go`` L1338-1356, ``ReadStep.Apply``;
    ``pkg/resource/deploy/step_executor.go`` L413-429, ``cancelDueToError``). An invoke's error
    is only returned to the program (``pkg/resource/deploy/source_eval.go`` L1158-1165,
    ``resmon.Invoke``), and the Python SDK returns it as the invoke's exception, not as an
    unhandled RPC error that would fail the program (``pulumi/runtime/invoke.py``
    ``_invoke``, pulumi 3.272.0 L340-356 and L404-417), so catching it here is enough. The engine
    serves the invoke during preview too, so the note shows at ``pulumi preview``.
    """
    try:
        result = await pulumi.runtime.invoke_async(READ_STACK_OUTPUTS, {"name": name})
    except Exception as exc:  # the engine's read error (any type): the note's text
        return None, str(exc)
    return dict(result.get("outputs") or {}), None
