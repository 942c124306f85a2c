"""Pure functions from a stack's plan (:class:`~stackmodel.plan.StackPlan`) to a deployable
topology.

A :class:`Topology` is a list of :class:`ComponentPlan` (one per DGD component or Deployment):
role, replicas, placement (node selector, tolerations, ``nvidia.com/gpu``), the container's
command, arguments, environment and resources. The Kubernetes manifests
(:mod:`manifests.graph`), ``testbed render`` and ``testbed simulate`` all read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from stackmodel.config import NodeClass
from stackmodel.engines import WorkerSettings
from stackmodel.plan import GroupPlan, StackPlan

ComponentType = Literal["frontend", "worker", "prefill", "decode"]
"""The DGD ``spec.components[].type`` values this program uses (CRD enum, v1beta1)."""

FRONTEND_PORT = 8000
"""The Dynamo frontend's HTTP port (operator default) and the vLLM OpenAI server's port."""

WORKER_SYSTEM_PORT = 9090
"""The port of a Dynamo worker's own ``/metrics`` (its system status server, where the vLLM
worker's ``vllm:*`` families are served too): the operator gives every worker container the
port ``system`` (``DynamoSystemPort = 9090``, ``DynamoSystemPortName = "system"``:
ai-dynamo/dynamo ``deploy/operator/internal/consts/consts.go`` L22-23 at 0367e404) and sets
``DYN_SYSTEM_ENABLED=true`` and ``DYN_SYSTEM_PORT`` to it
(``deploy/operator/internal/dynamo/component_worker.go``, ``WorkerDefaults.GetBaseContainer``,
L29-35 and L83-94 at 015d780b). Both are main-line commits, not the v1.6.2 tag; the port and
its name are the same in the 1.x operators' worker defaults read."""


@dataclass(frozen=True)
class Placement:
    """Where a component's pods run.

    Attributes:
        node_class: the node class name, or None (anywhere; the frontend by default).
        node_selector: pod ``nodeSelector``.
        tolerations: pod ``tolerations`` (``core/v1 Toleration`` dicts).
        gpus: ``nvidia.com/gpu`` per pod (0 for the frontend and the mocker engine).
    """

    node_class: str | None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, str], ...] = ()
    gpus: int = 0


@dataclass(frozen=True)
class ComponentPlan:
    """One DGD component (or, for ``vllm-service``, one Deployment).

    Attributes:
        name: component name (DNS label).
        type: DGD component type.
        role: ``frontend``, ``aggregated``, ``prefill`` or ``decode``.
        replicas: pod count.
        placement: where the pods run.
        command, args: the ``main`` container's command and arguments (empty: the
            operator's default, used for the frontend).
        env: the ``main`` container's environment.
        shared_memory_size: the memory-backed /dev/shm (Kubernetes quantity): the DGD
            component's ``sharedMemorySize``, a ``medium: Memory`` emptyDir in a Deployment.
        memory_limit, memory_request: Kubernetes quantities, or None.
        cpu_request: Kubernetes quantity, or None.
        gpu_memory_utilization: the worker's share of one GPU (None for the frontend).
        devices: extended resources besides GPUs per pod (an RDMA NIC: ``workers[].rdma``).
        capabilities: Linux capabilities the ``main`` container adds (``IPC_LOCK`` with RDMA).
    """

    name: str
    type: ComponentType
    role: Literal["frontend", "aggregated", "prefill", "decode"]
    replicas: int
    placement: Placement
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]
    shared_memory_size: str
    memory_limit: str | None = None
    memory_request: str | None = None
    cpu_request: str | None = None
    gpu_memory_utilization: float | None = None
    devices: dict[str, str] = field(default_factory=dict)
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """The deployable shape of a stack.

    Attributes:
        kind: ``dynamo`` (one DGD) or ``vllm-service`` (Deployments behind one Service).
        name: DGD name, or the prefix of the Deployments.
        image: the engine image every component runs.
        components: frontend first (dynamo), then workers in config order.
    """

    kind: Literal["dynamo", "vllm-service"]
    name: str
    image: str
    components: tuple[ComponentPlan, ...]

    def placement_table(self) -> list[dict[str, object]]:
        """Rows ``{"component", "type", "replicas", "nodeClass", "gpus"}`` for the stack output."""
        return [
            {
                "component": c.name,
                "type": c.type,
                "replicas": c.replicas,
                "nodeClass": c.placement.node_class,
                "gpus": c.placement.gpus,
            }
            for c in self.components
        ]


_TYPE_OF_ROLE: dict[str, ComponentType] = {
    "aggregated": "worker",
    "prefill": "prefill",
    "decode": "decode",
}


def placement_for(node_class_name: str, node_class: NodeClass, gpus: int) -> Placement:
    """The node selector, tolerations and GPU request for pods on ``node_class``."""
    return Placement(
        node_class=node_class_name,
        node_selector=dict(node_class.node_selector),
        tolerations=tuple(t.manifest() for t in node_class.tolerations),
        gpus=gpus,
    )


def anywhere_placement(node_classes: Mapping[str, NodeClass]) -> Placement:
    """No node selector, and every node class's tolerations: pods that need no GPU (the
    frontend by default) may run on any node, the tainted GPU nodes included.

    On the seed's cluster every node is a GPU node; when the GPU nodes carry a taint (the
    stacks tolerate ``nvidia.com/gpu:NoSchedule``) a pod without the matching toleration stays
    Pending, as the scheduler's TaintToleration filter refuses every node
    (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/). The
    tolerations only allow those nodes; with untainted CPU nodes the scheduler may still pick
    them. ``topology.frontend.nodeClass`` pins the frontend to one node class instead.
    """
    tolerations: list[dict[str, str]] = []
    for node_class in node_classes.values():
        for toleration in node_class.tolerations:
            entry = toleration.manifest()
            if entry not in tolerations:
                tolerations.append(entry)
    return Placement(node_class=None, tolerations=tuple(tolerations))


def worker_args(plan: StackPlan, planned: GroupPlan) -> tuple[str, ...]:
    """The arguments of a worker group's engine (``python3 -m dynamo.vllm`` / ``dynamo.mocker``):
    what its :attr:`~stackmodel.engines.EngineProfile.worker_args` writes from the group's
    :class:`~stackmodel.engines.WorkerSettings`, then engine ``extraArgs`` and the group's
    ``extraArgs`` (argparse: the last wins).

    The KV-cache size is the one sizing computes for the group, per GPU
    (:meth:`~stackmodel.sizing.StackSizing.kv_cache_bytes`). vLLM gets it as
    ``--kv-cache-memory-bytes`` (vLLM 0.31.0 ``CacheConfig.kv_cache_memory_bytes``: "Size of KV
    Cache per GPU in bytes ... (when not-None) ignores gpu_memory_utilization"), which makes the
    engine skip its startup memory profiling, which measures device-wide free memory and
    misjudges it when other workers on a time-sliced GPU start at the same time
    (vllm-project/vllm#21489). ``--gpu-memory-utilization`` still gates startup: vLLM refuses to
    start unless that share of the GPU is free (``request_memory`` in
    ``vllm/v1/worker/utils.py``).

    KV events: with the KV router (dynamo topology only: vllm-service has no router), aggregated
    and prefill workers (the ones that hold prefix cache) publish them unless the group sets
    ``kvEvents: false``. Without ``--kv-events-config`` a Dynamo 1.6 vLLM worker publishes
    nothing: ``create_kv_events_config`` returns None when none is given, ``use_kv_events`` is
    then False (ai-dynamo 1.6.1 ``dynamo/vllm/args.py`` lines 383-385 and 538-556),
    ``setup_kv_event_publisher`` creates no publisher (``dynamo/vllm/main.py`` lines 478-486)
    and the worker registers ``kv_event_publishing_enabled = False`` (line 905), so the router
    finds no overlap on it.
    """
    cfg, sizing, group, engine = plan.cfg, plan.sizing, planned.group, planned.engine
    kv_routed = cfg.topology.kind == "dynamo" and cfg.topology.router_mode == "kv"
    settings = WorkerSettings(
        model=cfg.model.name,
        role=group.role,
        gpu_memory_utilization=group.gpu_memory_utilization,
        kv_cache_bytes=sizing.kv_cache_bytes(group.name),
        gpu_blocks=sizing.gpu_blocks(group.name, engine.block_size_tokens),
        kv_bytes_per_token=sizing.kv_bytes_per_token,
        max_model_len=cfg.model.max_model_len,
        tensor_parallel_size=group.tensor_parallel_size,
        quantization=cfg.model.quantization,
        kv_cache_dtype=cfg.model.kv_cache_dtype,
        kv_transfer=None if group.kv_transfer is None else group.kv_transfer.as_vllm_json(),
        kv_events=kv_routed and group.kv_events and group.role in ("aggregated", "prefill"),
        speedup_ratio=cfg.engine.speedup_ratio,
        link_gb_per_s=sizing.link_gb_per_s(group.name) if group.role == "prefill" else None,
    )
    return (*engine.worker_args(settings), *cfg.engine.extra_args, *group.extra_args)


def build_topology(plan: StackPlan) -> Topology:
    """The topology of a stack's plan.

    For ``dynamo``: a frontend component (router mode from config) and one component per worker
    group, each vLLM worker asking for ``tensorParallelSize`` ``nvidia.com/gpu`` (the mocker
    none). For ``vllm-service``: one Deployment plan per worker group running vLLM's own
    OpenAI-compatible server with the same image, model and arguments.

    Raises:
        KeyError: a node class is unknown (cannot happen after
            :func:`~stackmodel.validation.validate_stack`).
    """
    cfg = plan.cfg
    image = cfg.engine.resolved_image
    components: list[ComponentPlan] = []
    if cfg.topology.kind == "dynamo":
        fe = cfg.topology.frontend
        fe_class = fe.node_class
        components.append(
            ComponentPlan(
                name="frontend",
                type="frontend",
                role="frontend",
                replicas=fe.replicas,
                placement=(
                    placement_for(fe_class, cfg.node_classes[fe_class], 0)
                    if fe_class
                    else anywhere_placement(cfg.node_classes)
                ),
                # The operator supplies the frontend's command and port (upstream examples).
                command=(),
                args=(),
                env={"DYN_ROUTER_MODE": cfg.topology.router_mode},
                shared_memory_size=fe.shared_memory_size,
            )
        )
    for planned in plan.groups:
        group = planned.group
        args = worker_args(plan, planned)
        if cfg.topology.kind == "vllm-service":
            # The engine's own server (the checks refuse an engine without one): model is
            # positional, same engine args, fixed port.
            assert planned.engine.serve_command is not None
            command: tuple[str, ...] = planned.engine.serve_command
            args = (cfg.model.name, "--port", str(FRONTEND_PORT), *args[2:])
        else:
            command = ("python3", "-m", planned.engine.module)
        components.append(
            ComponentPlan(
                name=group.name,
                type=_TYPE_OF_ROLE[group.role],
                role=group.role,
                replicas=group.replicas,
                placement=placement_for(
                    group.node_class,
                    cfg.node_classes[group.node_class],
                    group.tensor_parallel_size if planned.engine.gpu_workers else 0,
                ),
                command=command,
                args=args,
                env=dict(group.env),
                shared_memory_size=group.shared_memory_size,
                memory_limit=group.memory_limit,
                memory_request=group.memory_limit,
                cpu_request=group.cpu,
                gpu_memory_utilization=group.gpu_memory_utilization,
                devices=({group.rdma.resource: str(group.rdma.count)} if group.rdma else {}),
                capabilities=("IPC_LOCK",) if group.rdma else (),
            )
        )
    return Topology(
        kind=cfg.topology.kind, name=cfg.topology.name, image=image, components=tuple(components)
    )
