"""Checks that span config keys, run after pydantic has validated each key's shape.

Each returns :class:`~stackmodel.errors.ConfigProblem` values naming the key path to fix.
:func:`check_stack` runs them all and builds the stack's plan on the way;
:func:`stackmodel.validation.validate_stack` raises the problems as one
:class:`~stackmodel.errors.StackConfigError` before anything is registered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvpath.memory import memory_floor_bytes
from kvpath.versions import DYNAMO_NIXL, nixl_refuses_tls_without_cuda, shipped_nixl
from stackmodel.config import StackConfig, image_tag_version
from stackmodel.engine_args import parse_engine_args
from stackmodel.engines import ENGINES
from stackmodel.errors import ConfigProblem
from stackmodel.fixes import Fix, accepted_fixes, applied, checking, fixes_text, show_fix
from stackmodel.freeform import config_json_problems, freeform_problems
from stackmodel.log_budget import log_budget_problem
from stackmodel.models import ModelGeometry
from stackmodel.placement import ReplicaPlacement, group_of
from stackmodel.plan import (
    StackInputs,
    StackPlan,
    base_memory,
    build_plan,
    kv_link_key,
    resolve_inputs,
)
from stackmodel.quantities import (
    GI,
    TENSOR_PARALLEL_SHARED_MEMORY,
    ceil_mib,
    format_quantity,
    parse_quantity,
    unitless_hint,
)
from stackmodel.ucx import (
    CUDA_CAPABLE_EXAMPLE,
    RDMA_CAPABLE_EXAMPLE,
    UCX_TLS,
    moves_between_gpus,
    moves_gpu_memory,
    moves_over_rdma,
)
from steptime.gpus import datasheet_memory_gb

if TYPE_CHECKING:
    from workload.config import LoadConfig

_KV_ROLES = {
    "prefill": ("kv_producer", "kv_both"),
    "decode": ("kv_consumer", "kv_both"),
}


def _workers_key(i: int, field: str) -> str:
    return f"topology.workers[{i}].{field}"


def node_class_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Worker groups and a frontend on node classes that exist."""
    known = ", ".join(sorted(cfg.node_classes))
    out = []
    for i, w in enumerate(cfg.topology.workers):
        if w.node_class not in cfg.node_classes:
            out.append(
                ConfigProblem(
                    _workers_key(i, "nodeClass"),
                    w.node_class,
                    f"unknown node class; defined in nodeClasses: {known}",
                )
            )
    fe_class = cfg.topology.frontend.node_class
    if fe_class is not None and fe_class not in cfg.node_classes:
        out.append(
            ConfigProblem(
                "topology.frontend.nodeClass",
                fe_class,
                f"unknown node class; defined in nodeClasses: {known}",
            )
        )
    return out


def oversubscription_problems(
    cfg: StackConfig, replicas: Sequence[ReplicaPlacement]
) -> list[ConfigProblem]:
    """vLLM workers that a node class cannot hold: a replica with no room left where the
    workers land (:func:`stackmodel.placement.place_workers`: each pod's GPUs on one node).

    The problem offers the fixes the stack passes with (:func:`_room_fixes`)."""
    if not cfg.engine.profile.gpu_workers:
        return []
    out = []
    for name, node_class in cfg.node_classes.items():
        if all(r.fits for r in replicas if r.node_class == name):
            continue
        on_class = [w for w in cfg.topology.workers if w.node_class == name]
        wanted = cfg.gpu_units[name]
        last = max(i for i, w in enumerate(cfg.topology.workers) if w.node_class == name)
        fixes = _room_fixes(cfg, name, last, wanted)
        if fixes:
            advice = f"; {fixes_text(fixes)}"
        elif all(w.tensor_parallel_size == 1 for w in on_class):
            sharing = "raise" if node_class.time_slicing else "enable"
            advice = f"; add nodes, {sharing} timeSlicing (workers of one GPU) or lower replicas"
        else:
            advice = (
                "; add nodes, or lower replicas or tensorParallelSize (a worker of several "
                "GPUs cannot use timeSlicing)"
            )
        out.append(
            ConfigProblem(
                _workers_key(last, "replicas"),
                cfg.topology.workers[last].replicas,
                f"GPU oversubscription on node class '{name}': workers "
                f"{', '.join(w.name for w in on_class)} need "
                f"{wanted} nvidia.com/gpu (tensorParallelSize per replica) but the class "
                f"offers {node_class.gpu_units} (nodes {node_class.nodes} x gpusPerNode "
                f"{node_class.gpus_per_node} x time-slicing replicas {node_class.units_per_gpu}), "
                f"and each pod's GPUs must be on one node{advice}",
                fixes,
            )
        )
    return out


def host_memory_problems(
    cfg: StackConfig, replicas: Sequence[ReplicaPlacement]
) -> list[ConfigProblem]:
    """Workers whose ``memoryLimit`` on one node add up to more than its class's
    ``hostMemoryGiB`` (a class without it is not checked offline; preview reads each node's
    allocatable memory, :mod:`clusterread.checks`): each worker's limit is its pod's memory
    request (:mod:`stackmodel.topology`), and a host-buffering worker's sizing floor counts its
    host mirror, so this is where a node's memory refuses host-buffered KV. One problem per
    node class, at its first overfull node."""
    out = []
    limits = {}
    for w in cfg.topology.workers:
        try:
            limits[w.name] = parse_quantity(w.memory_limit)
        except ValueError:
            continue  # the quantity's own check names it
    for name, node_class in cfg.node_classes.items():
        if node_class.host_memory_gib is None:
            continue
        host = math.floor(node_class.host_memory_gib * GI)
        by_node: dict[int, dict[str, int]] = {}
        for r in replicas:
            if r.node_class == name and r.group in limits:
                counts = by_node.setdefault(r.node, {})
                counts[r.group] = counts.get(r.group, 0) + 1
        for node, counts in sorted(by_node.items()):
            total = sum(limits[g] * n for g, n in counts.items())
            if total <= host:
                continue
            held = ", ".join(
                f"{n} x '{g}' ({format_quantity(limits[g])})" for g, n in counts.items()
            )
            out.append(
                ConfigProblem(
                    f"nodeClasses.{name}.hostMemoryGiB",
                    node_class.host_memory_gib,
                    f"node {node} of node class '{name}' holds {held}: "
                    f"{format_quantity(total)} of memory limits, more than its "
                    f"{node_class.host_memory_gib:g} GiB; lower the workers' memoryLimit (a "
                    "host-buffering worker's floor counts its host mirror: lower its "
                    "gpuMemoryUtilization, or set kvTransfer.bufferDevice: cuda) or place fewer "
                    "workers on the class",
                )
            )
            break
    return out


def _room_fixes(cfg: StackConfig, name: str, last: int, wanted: int) -> tuple[Fix, ...]:
    """Fixes of an oversubscribed node class, those the stack passes with: fewer replicas of
    its last group; more time-sliced units per GPU (workers of one GPU each), with the shares
    of its GPU and the max model length lowered to fit (:func:`_share_fix`); more nodes."""
    if checking():
        return ()
    node_class = cfg.node_classes[name]
    group = cfg.topology.workers[last]
    excess = wanted - node_class.gpu_units
    fewer = group.replicas - math.ceil(excess / group.tensor_parallel_size)
    candidates: list[Fix] = []
    if fewer >= 1:
        candidates.append((f"{_workers_key(last, 'replicas')}={fewer}",))
    on_class = [w for w in cfg.topology.workers if w.node_class == name]
    if all(w.tensor_parallel_size == 1 for w in on_class):
        per_gpu = max(2, math.ceil(wanted / node_class.gpus))
        sliced = f"nodeClasses.{name}.timeSlicing.replicasPerGpu={per_gpu}"
        candidates.append(_share_fix(cfg, name, min(per_gpu, wanted), (sliced,)))
    nodes = math.ceil(wanted / node_class.gpu_units_per_node)
    candidates.append((f"nodeClasses.{name}.nodes={max(nodes, node_class.nodes + 1)}",))
    return accepted_fixes(cfg, candidates, _problems_only, _workers_key(last, "replicas"))


def _share_fix(cfg: StackConfig, name: str, sharing: int, base: Fix) -> Fix:
    """``base`` plus what lets ``sharing`` workers share one GPU of node class ``name``: every
    group there above ``1 / sharing`` of the GPU lowered to it (two decimals, rounded down), and
    ``model.maxModelLen`` lowered to what the smallest KV cache then holds. Empty when the
    result is no config."""
    share = math.floor(100 / sharing) / 100
    fix = base + tuple(
        f"{_workers_key(i, 'gpuMemoryUtilization')}={share:g}"
        for i, w in enumerate(cfg.topology.workers)
        if w.node_class == name and w.gpu_memory_utilization > share
    )
    candidate = applied(cfg, fix)
    if candidate is None:
        return ()
    inputs = resolve_inputs(candidate)
    if inputs.problems:
        return ()
    plan = build_plan(candidate, inputs)
    context = plan.max_model_len
    tokens = _kv_tokens(plan).values()
    if context is not None and tokens and min(tokens) < context:
        fix += (f"model.maxModelLen={min(tokens)}",)
    return fix


def _problems_only(cfg: StackConfig) -> list[ConfigProblem]:
    """Every problem of a shape-valid config (:func:`check_stack` without its plan)."""
    return check_stack(cfg)[0]


def tensor_parallel_problems(cfg: StackConfig, inputs: StackInputs) -> list[ConfigProblem]:
    """What a worker of ``tensorParallelSize`` > 1 needs (the model-side rules and the
    interconnect for every engine, since the simulation splits the model either way; the rest for
    vLLM workers, the mocker's pods having no GPUs):

    - a node class without time-slicing: the NVIDIA device plugin does not promise distinct
      GPUs to a pod that asks for several time-sliced units ("requesting more than one shared
      GPU does not imply that you will get guaranteed access to a proportional amount of
      compute power", NVIDIA/k8s-device-plugin README, "Shared Access to GPUs"), and vLLM
      needs one GPU per rank;
    - ``gpusPerNode`` >= the size: one pod's GPUs are on one node;
    - the model's query heads divisible by the size (vLLM 0.31.0
      ``ModelConfig.verify_with_parallel_config``, ``vllm/config/model.py``: "Total number of
      attention heads ... must be divisible by tensor parallel size"), its KV heads divisible
      by it or it by them (``QKVParallelLinear``, :meth:`~stackmodel.models.ModelGeometry.
      kv_heads_per_gpu`), and the model's ``hiddenSize`` known (the all-reduces);
    - the GPU's interconnect known (a catalog GPU, or ``interconnect`` with its figures);
    - a /dev/shm of :data:`~stackmodel.quantities.TENSOR_PARALLEL_SHARED_MEMORY` at least;
    - each decode group's size a multiple of each prefill group's (vLLM's NixlConnector:
      ``tp_ratio = divide(decode tp, prefill tp)`` and ``assert tp_ratio > 0, "Decode TP
      cannot be smaller than prefill TP"``, ``NixlConnectorWorker.add_remote_agent`` in
      ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``).
    """
    out: list[ConfigProblem] = []
    geometry = inputs.geometry  # None: the inputs' problems name it
    for i, w in enumerate(cfg.topology.workers):
        tp = w.tensor_parallel_size
        if tp == 1:
            continue
        key = _workers_key(i, "tensorParallelSize")
        node_class = cfg.node_classes[w.node_class]
        if geometry is not None:
            out += _model_splits(geometry, key, tp)
        gpu = inputs.gpus[w.node_class]
        if gpu.interconnect is None:
            out.append(
                ConfigProblem(
                    f"nodeClasses.{w.node_class}.gpu",
                    gpu.name,
                    f"worker group '{w.name}' is tensor-parallel, whose all-reduces cross the "
                    "GPUs' interconnect, which this GPU does not give: add interconnect "
                    "(nvlink or pcie) and interconnectGbPerS (per GPU and direction, e.g. 32 "
                    "for PCIe Gen4 x16) to its figures, or name a catalog GPU",
                )
            )
        if not cfg.engine.profile.gpu_workers:
            continue  # the mocker's pods have no GPUs; the simulation still splits the model
        if node_class.time_slicing is not None:
            out.append(
                ConfigProblem(
                    key,
                    tp,
                    f"node class '{w.node_class}' time-slices its GPUs, and a pod asking for "
                    f"{tp} time-sliced nvidia.com/gpu units may get them all from one GPU (the "
                    "NVIDIA device plugin promises no distinct GPUs); put the group on a node "
                    f"class without timeSlicing (delete nodeClasses.{w.node_class}.timeSlicing: "
                    "replicasPerGpu cannot be 1), or set tensorParallelSize: 1",
                )
            )
        if tp > node_class.gpus_per_node:
            out.append(
                ConfigProblem(
                    key,
                    tp,
                    f"a worker's {tp} GPUs must be on one node, but node class "
                    f"'{w.node_class}' has gpusPerNode {node_class.gpus_per_node}; lower "
                    f"tensorParallelSize to at most {node_class.gpus_per_node} or use a node "
                    "class with more GPUs per node",
                )
            )
        try:
            shm = parse_quantity(w.shared_memory_size)
            base = parse_quantity(base_memory(cfg, w, gpu, geometry))
        except ValueError:
            continue  # sizing_problems names the quantity
        if shm < parse_quantity(TENSOR_PARALLEL_SHARED_MEMORY):
            floor = memory_floor_bytes(
                base * tp,
                parse_quantity(TENSOR_PARALLEL_SHARED_MEMORY),
                0,
            )
            out.append(
                ConfigProblem(
                    _workers_key(i, "sharedMemorySize"),
                    w.shared_memory_size,
                    f"a tensor-parallel worker's {tp} GPU processes exchange data through "
                    f"/dev/shm (vLLM's shared-memory broadcast; NCCL between GPUs without "
                    f"peer access), and vLLM's Kubernetes guide mounts "
                    f"{TENSOR_PARALLEL_SHARED_MEMORY} for it; set sharedMemorySize to at least "
                    f"{TENSOR_PARALLEL_SHARED_MEMORY} (it counts against memoryLimit: raise "
                    f"that to at least {format_quantity(ceil_mib(floor))} plus any host mirror)",
                )
            )
    if not cfg.engine.profile.moves_kv:
        return out
    prefill = [(i, w) for i, w in enumerate(cfg.topology.workers) if w.role == "prefill"]
    for _, d in ((i, w) for i, w in enumerate(cfg.topology.workers) if w.role == "decode"):
        for i, p in prefill:
            if d.tensor_parallel_size % p.tensor_parallel_size:
                out.append(
                    ConfigProblem(
                        _workers_key(i, "tensorParallelSize"),
                        p.tensor_parallel_size,
                        f"decode group '{d.name}' has tensorParallelSize "
                        f"{d.tensor_parallel_size}, not a multiple of prefill group "
                        f"'{p.name}''s {p.tensor_parallel_size}: vLLM's NixlConnector refuses "
                        "it ('Decode TP cannot be smaller than prefill TP'); give decode a "
                        "multiple of prefill's size (equal sizes always work)",
                    )
                )
    return out


def _model_splits(geometry: ModelGeometry, key: str, tp: int) -> list[ConfigProblem]:
    """The model-side rules of :func:`tensor_parallel_problems` for one group."""
    out = []
    heads = geometry.num_attention_heads
    kv = geometry.num_kv_heads
    if heads is None or geometry.hidden_size is None:
        out.append(
            ConfigProblem(
                "model.geometry",
                None,
                f"{key} = {tp} needs the model's numAttentionHeads and hiddenSize (vLLM "
                "splits the heads, and the all-reduces carry hiddenSize per token); add them "
                "to model.geometry, or give model.configJson",
            )
        )
    elif heads % tp:
        sizes = [
            n for n in (1, 2, 4, 8, 16, 32, 64) if heads % n == 0 and (n % kv == 0 or kv % n == 0)
        ]
        out.append(
            ConfigProblem(
                key,
                tp,
                f"vLLM needs the model's {heads} attention heads divisible by the tensor-"
                f"parallel size ('Total number of attention heads ({heads}) must be divisible "
                f"by tensor parallel size ({tp})'); use one of {', '.join(map(str, sizes))}",
            )
        )
    if tp % kv and kv % tp:
        out.append(
            ConfigProblem(
                key,
                tp,
                f"vLLM splits the model's {kv} KV heads over the GPUs or replicates them, so "
                f"one must divide the other; {tp} does neither: use a divisor or a multiple "
                f"of {kv}",
            )
        )
    return out


def unit_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """A memory quantity without a unit where no process fits in that many bytes
    (:func:`~stackmodel.quantities.unitless_hint`): a worker's ``baseMemory`` and
    ``sharedMemorySize``, the frontend's ``sharedMemorySize`` (``memoryLimit`` is the memory
    floor's, :func:`stackmodel.sizing.check_memory_floor`). Each offers the units the stack
    passes with."""
    keyed = [
        ("topology.frontend.sharedMemorySize", cfg.topology.frontend.shared_memory_size),
        *(
            (_workers_key(i, field), value)
            for i, w in enumerate(cfg.topology.workers)
            for field, value in (
                ("baseMemory", w.base_memory),
                ("sharedMemorySize", w.shared_memory_size),
            )
        ),
    ]
    out = []
    for key, value in keyed:
        hint = unitless_hint(value)
        if hint is None:
            continue
        text = str(value).strip()
        fixes = (
            ()
            if checking()
            else accepted_fixes(
                cfg, [(f"{key}={text}{unit}",) for unit in ("Mi", "Gi")], _problems_only, key
            )
        )
        advice = f"; {fixes_text(fixes)}" if fixes else "; write the unit (Mi or Gi)"
        out.append(ConfigProblem(key, value, f"{hint}{advice}", fixes))
    return out


def role_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Prefill with decode (and the reverse), roles per topology kind, KV connector roles."""
    out = []
    roles = {w.role for w in cfg.topology.workers}
    if "prefill" in roles and "decode" not in roles:
        out.append(
            ConfigProblem(
                "topology.workers",
                sorted(roles),
                "prefill workers without decode workers: add a worker group with role decode",
            )
        )
    if "decode" in roles and "prefill" not in roles:
        out.append(
            ConfigProblem(
                "topology.workers",
                sorted(roles),
                "decode workers without prefill workers: add a worker group with role prefill",
            )
        )
    if "aggregated" in roles and roles & {"prefill", "decode"}:
        out.append(
            ConfigProblem(
                "topology.workers",
                sorted(roles),
                "mixes aggregated with prefill/decode workers: use one kind of graph per stack",
            )
        )
    if cfg.topology.kind == "vllm-service":
        if roles != {"aggregated"}:
            out.append(
                ConfigProblem(
                    "topology.workers",
                    sorted(roles),
                    "topology kind vllm-service runs plain vLLM replicas: every role must be "
                    "aggregated",
                )
            )
        engine = cfg.engine.profile
        if engine.serve_command is None:
            serving = " or ".join(k for k, e in ENGINES.items() if e.serve_command is not None)
            out.append(
                ConfigProblem(
                    "engine.kind",
                    cfg.engine.kind,
                    f"topology kind vllm-service needs engine kind {serving} ({engine.name} has "
                    "no HTTP server of its own); use topology kind dynamo",
                )
            )
    for i, w in enumerate(cfg.topology.workers):
        kv = w.kv_transfer
        if w.role == "aggregated" and kv is not None:
            out.append(
                ConfigProblem(
                    _workers_key(i, "kvTransfer"),
                    kv.model_dump(by_alias=True),
                    "aggregated workers transfer no KV: remove kvTransfer or set role "
                    "prefill/decode",
                )
            )
        elif w.role in _KV_ROLES and cfg.engine.profile.moves_kv:
            allowed = _KV_ROLES[w.role]
            if kv is None:
                out.append(
                    ConfigProblem(
                        _workers_key(i, "kvTransfer"),
                        None,
                        f"a {w.role} worker needs kvTransfer (vLLM rejects "
                        f"--disaggregation-mode without --kv-transfer-config); role one of "
                        f"{', '.join(allowed)}",
                    )
                )
            elif kv.role not in allowed:
                out.append(
                    ConfigProblem(
                        _workers_key(i, "kvTransfer.role"),
                        kv.role,
                        f"does not match worker role {w.role}; allowed: {', '.join(allowed)}",
                    )
                )
    return out


def kv_buffer_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """A GPU KV buffer (``kvTransfer.bufferDevice: cuda``) needs a UCX transport list that moves
    GPU memory (:func:`stackmodel.ucx.moves_gpu_memory`) on that worker.

    The check is per worker: the NIXL connector registers each side's buffer with its own
    memory type, and vLLM's NIXL handshake does not compare ``kv_buffer_device`` (vLLM 0.31.0
    ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py``,
    ``compute_nixl_compatibility_hash``, lines 175-198, hashes the vLLM version, model, dtype,
    KV layout, attention backend and transfer mode), so a host-buffered prefill may feed a
    GPU-buffered decode; the decode side then needs the CUDA transport.
    """
    if not cfg.engine.profile.moves_kv:
        return []  # the mocker moves no real KV
    out = []
    for i, w in enumerate(cfg.topology.workers):
        if w.kv_transfer is None or w.kv_transfer.buffer_device != "cuda":
            continue
        tls = w.env.get(UCX_TLS)
        if moves_gpu_memory(tls):
            continue
        out.append(
            ConfigProblem(
                _workers_key(i, "kvTransfer.bufferDevice"),
                "cuda",
                f"a GPU KV buffer needs UCX to move GPU memory, but "
                f"{_workers_key(i, 'env.UCX_TLS')} = {tls!r} has no CUDA transport "
                "(UCX FAQ: with an explicit UCX_TLS 'must also specify cuda ... otherwise the GPU "
                "memory will not be recognized'); the seed's worker crashed inside UCX this way "
                "('UCX CUDA support was not found'). Fix one of: set kvTransfer.bufferDevice: "
                "cpu (KV through host memory, as the seed did; the memory floor then applies), "
                f"or add cuda to env.UCX_TLS (e.g. '{CUDA_CAPABLE_EXAMPLE}') in an image whose "
                "UCX has CUDA support.",
            )
        )
    return out


def nvlink_problems(cfg: StackConfig, inputs: StackInputs) -> list[ConfigProblem]:
    """An NVLink link profile (``nvlink3``, ``nvlink4``: :data:`kvpath.profile.LINK_PROFILES`)
    where its KV cannot take it: on ``links.crossNode`` (NVLink joins the GPUs of one node; KV
    between nodes crosses the network), or on ``links.sameNode`` for a vLLM group whose KV
    is not in GPU buffers moved by ``cuda_ipc`` (``kvTransfer.bufferDevice: cuda`` and a
    ``UCX_TLS`` with it, :func:`stackmodel.ucx.moves_between_gpus`): through host memory it
    is a TCP copy, not an NVLink one. Each offers the fixes it passes with."""
    out: list[ConfigProblem] = []
    cross, same = inputs.links.get("crossNode"), inputs.links.get("sameNode")
    if cross is not None and cross.name.startswith("nvlink"):
        out.append(
            ConfigProblem(
                "links.crossNode",
                cfg.links.cross_node,
                "NVLink joins the GPUs of one node: KV between nodes crosses the network; set "
                "links.crossNode to the network's profile (e.g. 25gbe, 100gbe or rdma) and "
                f"{cross.name} on links.sameNode",
            )
        )
    moves_kv = cfg.engine.profile.moves_kv
    if same is None or not same.name.startswith("nvlink") or not moves_kv:
        return out
    for i, w in enumerate(cfg.topology.workers):
        kv = w.kv_transfer
        if kv is None:
            continue
        if kv.buffer_device == "cuda" and moves_between_gpus(w.env.get(UCX_TLS)):
            continue
        key = _workers_key(i, "kvTransfer.bufferDevice")
        fix = (f"{key}=cuda", f"{_workers_key(i, f'env.{UCX_TLS}')}={CUDA_CAPABLE_EXAMPLE}")
        fixes = () if checking() else accepted_fixes(cfg, [fix], _problems_only, key)
        out.append(
            ConfigProblem(
                key,
                kv.buffer_device,
                f"links.sameNode {same.name} moves KV between the node's GPUs with UCX's "
                f"cuda_ipc, but worker group '{w.name}' "
                + (
                    "stages it in host memory (bufferDevice: cpu)"
                    if kv.buffer_device != "cuda"
                    else f"has no cuda_ipc in UCX_TLS ({w.env.get(UCX_TLS)!r})"
                )
                + "; set kvTransfer.bufferDevice: cuda and a UCX_TLS with cuda_ipc (e.g. "
                f"{CUDA_CAPABLE_EXAMPLE}), or the same-node-tcp link"
                + (f"; {fixes_text(fixes)}" if fixes else ""),
                fixes,
            )
        )
    return out


def rdma_problems(cfg: StackConfig, inputs: StackInputs) -> list[ConfigProblem]:
    """A KV link of the ``rdma`` profile (:data:`kvpath.profile.LINK_PROFILES`) needs, on the
    prefill group and every decode group its KV reaches, what moves KV over InfiniBand/RoCE:

    - a ``UCX_TLS`` that enables an RDMA transport (:func:`stackmodel.ucx.moves_over_rdma`);
      otherwise NIXL's UCX backend moves the KV over TCP, at the ~1 GB/s the seed saw, and the
      verdict and the simulation would count 20 GB/s that never happens;
    - the RDMA NIC in the pod (``rdma``: a device plugin's extended resource, and the
      ``IPC_LOCK`` capability RDMA memory registration needs): a container sees no RDMA device
      otherwise, and UCX falls back to TCP the same way.

    With ``kvTransfer.bufferDevice: cuda`` (GPUDirect RDMA: no host mirror, no host copies)
    the GPU-memory rule of :func:`kv_buffer_problems` applies on top: the list needs ``cuda``
    too (the UCX FAQ's example is ``UCX_TLS=rc,cuda``). vLLM 0.31.0 itself has no RDMA switch:
    its NixlConnector hands the buffers to NIXL's UCX backend, which picks the transports
    ``UCX_TLS`` allows.
    """
    if not cfg.engine.profile.moves_kv:
        return []  # the mocker moves no real KV
    index = {w.name: i for i, w in enumerate(cfg.topology.workers)}
    decode = [w for w in cfg.topology.workers if w.role == "decode"]
    out: list[ConfigProblem] = []
    seen: set[str] = set()
    for p in (w for w in cfg.topology.workers if w.role == "prefill"):
        try:
            name = inputs.links[kv_link_key(cfg, p, inputs.links)].name
        except KeyError:
            return []  # the inputs' problems name the link
        if name != "rdma":
            continue
        for w in (p, *decode):
            if w.name in seen:
                continue
            seen.add(w.name)
            i = index[w.name]
            tls = w.env.get(UCX_TLS)
            if not moves_over_rdma(tls):
                out.append(
                    ConfigProblem(
                        _workers_key(i, "env.UCX_TLS"),
                        tls,
                        f"the KV of '{p.name}' crosses the rdma link, but this UCX_TLS enables "
                        "no InfiniBand/RoCE transport, so NIXL would move it over TCP (~1 GB/s, "
                        "not the profile's 20 GB/s); add rc (e.g. "
                        f"'{RDMA_CAPABLE_EXAMPLE}' with GPU buffers), or set the link to the "
                        "TCP profile it really is (1gbe, 10gbe, ...)",
                    )
                )
            if w.rdma is None:
                out.append(
                    ConfigProblem(
                        _workers_key(i, "rdma"),
                        None,
                        f"the KV of '{p.name}' crosses the rdma link, but the pod asks for no "
                        "RDMA device, so it has none and UCX falls back to TCP; set rdma: "
                        "{resource: <your RDMA device plugin's resource, e.g. "
                        "rdma/rdma_shared_device_a>} (the pod then also gets IPC_LOCK), or set "
                        "the link to a TCP profile",
                    )
                )
    return out


def nixl_tls_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """A vLLM worker with a KV transfer on a Dynamo release whose NIXL refuses a ``UCX_TLS``
    without CUDA memory support on a GPU node (:mod:`kvpath.versions`: Dynamo 1.7.0 and later)
    needs one that moves GPU memory (:func:`stackmodel.ucx.moves_gpu_memory`). The seed's
    ``tcp,self`` stays valid on Dynamo 1.6.2."""
    version = cfg.engine.release
    if not cfg.engine.profile.moves_kv or not nixl_refuses_tls_without_cuda(version):
        return []
    nixl = shipped_nixl(version)
    known = {".".join(map(str, d)) for d in DYNAMO_NIXL}
    out = []
    for i, w in enumerate(cfg.topology.workers):
        tls = w.env.get(UCX_TLS)
        if w.kv_transfer is None or tls is None or moves_gpu_memory(tls):
            continue
        out.append(
            ConfigProblem(
                _workers_key(i, "env.UCX_TLS"),
                tls,
                f"Dynamo {version} ships NIXL {nixl}{'' if version in known else ' or later'}, "
                "whose UCX backend refuses to start on a GPU node when UCX_TLS enables no CUDA "
                "memory transport ('Invalid UCX_TLS="
                f"{tls} for NIXL UCX backend: NVIDIA GPU(s) are present, but this setting does "
                "not enable CUDA memory support'; ai-dynamo/nixl PR #1617, first in NIXL 1.5.0). "
                f"Add cuda_copy to env.UCX_TLS (e.g. '{tls},cuda_copy'; with bufferDevice: cpu "
                "the KV still moves through host memory), or set engine.dynamoVersion: 1.6.2.",
            )
        )
    return out


def engine_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """An image tag that is not a version needs ``runtimeVersionOverride`` (DGD admission)."""
    if cfg.topology.kind != "dynamo" or cfg.engine.runtime_version_override:
        return []
    image = cfg.engine.resolved_image
    if image_tag_version(image) is None:
        return [
            ConfigProblem(
                "engine.image",
                image,
                "the image tag is not a MAJOR.MINOR.PATCH version, so DGD admission needs "
                "engine.runtimeVersionOverride (the Dynamo version inside the image, e.g. "
                "'1.6.2'); set it or use a versioned tag",
            )
        ]
    return []


def sizing_problems(plan: StackPlan) -> list[ConfigProblem]:
    """The memory floor and GPU memory fit (:class:`~stackmodel.sizing.SizingFinding` errors,
    one problem per group and rule), then, for vLLM workers, the KV cache against the max model
    length (:func:`context_problems`)."""
    cfg, gpu_workers = plan.cfg, plan.engine.gpu_workers
    out: list[ConfigProblem] = []
    index = {w.name: i for i, w in enumerate(cfg.topology.workers)}
    value: object
    seen: set[tuple[str, str]] = set()
    for finding in plan.sizing.report.errors:
        if finding.check == "memory-floor":
            key = _workers_key(index[finding.subject], "memoryLimit")
            value = cfg.topology.workers[index[finding.subject]].memory_limit
        elif gpu_workers:
            worker = group_of(finding.workers[0]) if finding.workers else ""
            key = (
                _workers_key(index[worker], "gpuMemoryUtilization")
                if worker in index
                else f"nodeClasses.{finding.subject}"
            )
            value = (
                cfg.topology.workers[index[worker]].gpu_memory_utilization
                if worker in index
                else finding.subject
            )
        else:
            continue  # the mocker engine uses no GPU
        if (key, finding.check) not in seen:  # one problem per group, not per replica
            seen.add((key, finding.check))
            fixes: tuple[Fix, ...] = ()
            if len(finding.workers) > 1 and finding.subject in cfg.node_classes and not checking():
                share = _share_fix(cfg, finding.subject, len(finding.workers), ())
                fixes = accepted_fixes(cfg, [share], _problems_only, key)
            message = finding.message
            if fixes:
                message = f"{message.rstrip('.')}; {fixes_text(fixes)}."
            out.append(ConfigProblem(key, value, message, fixes))
    if gpu_workers:
        out += context_problems(plan)
    return out


LONG_MAX_MODEL_LEN_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
"""vLLM's override of its max-model-len limit (vLLM v0.31.0 ``vllm/envs.py`` lines 1113-1120:
on when the value, stripped and lower-cased, is ``1`` or ``true``)."""


def _allows_long_max_model_len(env: dict[str, str]) -> bool:
    return env.get(LONG_MAX_MODEL_LEN_ENV, "0").strip().lower() in ("1", "true")


def model_length_problems(cfg: StackConfig, model_context: int | None) -> list[ConfigProblem]:
    """``model.maxModelLen`` above the model's context length (``max_position_embeddings``).

    vLLM refuses to start such a worker unless its environment sets
    :data:`LONG_MAX_MODEL_LEN_ENV` (vLLM v0.31.0 ``vllm/config/model.py``,
    ``_get_and_verify_max_len``, lines 2596-2621: "User-specified max_model_len ... is greater
    than the derived max_model_len"), so ``pulumi up`` would wait out its ready timeout. The
    limit here is the model's ``max_position_embeddings``; vLLM also multiplies it by a RoPE
    ``factor`` of linear or dynamic scaling (lines 2528-2570; YaRN's is already counted in it,
    and no catalog model has either), and lowers it to the tokenizer's ``model_max_length``.
    """
    wanted = cfg.model.max_model_len
    if wanted is None or model_context is None or wanted <= model_context:
        return []
    groups = [
        i for i, w in enumerate(cfg.topology.workers) if not _allows_long_max_model_len(w.env)
    ]
    if not groups:
        return []
    env_keys = ", ".join(_workers_key(i, f"env.{LONG_MAX_MODEL_LEN_ENV}") for i in groups)
    return [
        ConfigProblem(
            "model.maxModelLen",
            wanted,
            f"above {cfg.model.name}'s context length, {model_context:,} tokens (its config.json "
            f"max_position_embeddings), so vLLM refuses to start the workers; set "
            f"model.maxModelLen to at most {model_context}, or, if the model really holds longer "
            f"contexts (RoPE scaling), set {env_keys} to '1' (vLLM's override: positions past "
            "the model's length give NaN under RoPE)",
        )
    ]


def _kv_tokens(plan: StackPlan) -> dict[str, int]:
    """Tokens of one request each vLLM worker group's KV cache holds (vLLM keeps one block back
    as the null block); groups without any KV cache are left out (the GPU fit check names
    them)."""
    out = {}
    for w in plan.cfg.topology.workers:
        row = plan.sizing.worker_kv(w.name)
        if row.kv_cache_budget_bytes:
            out[w.name] = max(0, row.kv_capacity_blocks - 1) * row.block_size_tokens
    return out


def prompt_length_problems(grid: LoadConfig, context: int) -> list[ConfigProblem]:
    """The load settings' prompts must be shorter than the max model length ``context``
    (tokens): a ``load.promptLengths`` value or ``load.promptTokens`` at or above it is one
    problem (the longest), as vLLM refuses every such request."""
    if grid.prompt_lengths and max(grid.prompt_lengths.values) >= context:
        longest = max(grid.prompt_lengths.values)
        return [  # as below, for the requests drawn at that length
            ConfigProblem(
                "load.promptLengths",
                longest,
                f"its longest value, {longest:,} tokens, is not below the max model length, "
                f"{context:,} tokens: "
                f"vLLM refuses every request drawn at it; lower it below "
                f"{context - grid.max_tokens} or raise model.maxModelLen",
            )
        ]
    prompt = grid.prompt_tokens
    if prompt >= context:
        # vLLM 0.31.0 vllm/entrypoints/serve/utils/api_utils.py get_max_tokens, lines 183-187:
        # "Input length (...) exceeds model's maximum context length"; at the max model length
        # itself no output token is left.
        return [
            ConfigProblem(
                "load.promptTokens",
                prompt,
                f"not below the max model length, {context:,} tokens (model.maxModelLen, else "
                "the model's max_position_embeddings): vLLM refuses every request of the grid; "
                f"lower load.promptTokens below {context - grid.max_tokens} (room for "
                "load.maxTokens) or raise model.maxModelLen",
            )
        ]
    return []


def context_problems(plan: StackPlan) -> list[ConfigProblem]:
    """Each vLLM worker's KV cache must hold one request of the max model length.

    vLLM refuses to start otherwise (vLLM 0.31.0 ``check_enough_kv_cache_memory`` in
    ``vllm/v1/core/kv_cache_utils.py``, which also holds one block back as the null block). The
    max model length is ``model.maxModelLen``, else the model's ``max_position_embeddings``
    (vLLM's default); the KV cache is the ``--kv-cache-memory-bytes`` sizing passes, so the
    check is exact up to vLLM's block rounding. Groups left without any KV cache are reported
    by the GPU fit check instead.
    """
    cfg, sizing = plan.cfg, plan.sizing
    longer = model_length_problems(cfg, sizing.geometry.max_position_embeddings)
    if longer:
        return longer
    context = plan.max_model_len
    if context is None:
        return []
    if cfg.load.enabled:
        too_long = prompt_length_problems(cfg.load.grid(), context)
        if too_long:
            return too_long
    short = {name: tokens for name, tokens in _kv_tokens(plan).items() if tokens < context}
    if not short:
        return []
    tightest = min(short, key=lambda name: short[name])
    source = (
        "model.maxModelLen"
        if cfg.model.max_model_len
        else "model.maxModelLen is unset, so vLLM uses the model's max_position_embeddings"
    )
    groups = ", ".join(f"'{name}' {tokens:,}" for name, tokens in short.items())
    index = {w.name: i for i, w in enumerate(cfg.topology.workers)}

    def share_for(name: str) -> float:
        """The share that would hold it: the missing KV bytes on top of the group's share."""
        row = sizing.worker_kv(name)
        needed = (-(-context // row.block_size_tokens) + 1) * row.block_size_tokens
        missing = needed * sizing.report.kv_bytes_per_token - row.kv_cache_budget_bytes
        gpu_bytes = math.floor(cfg.node_classes[row.node_class].gpu_memory_gib * GI)
        return math.ceil((row.gpu_memory_utilization + missing / gpu_bytes) * 100) / 100

    shares = {name: share_for(name) for name in short}
    lower: Fix = (f"model.maxModelLen={short[tightest]}",)
    bigger: Fix = tuple(
        f"{_workers_key(index[name], 'gpuMemoryUtilization')}={share:g}"
        for name, share in shares.items()
        if share <= 1
    )
    fixes = (
        ()
        if checking()
        else accepted_fixes(cfg, (lower, bigger), _problems_only, "model.maxModelLen")
    )
    if bigger and bigger in fixes:
        raise_share = f", or raise {show_fix(bigger)} (the other workers on its GPU leave room)"
    elif shares[tightest] <= 1:
        raise_share = (
            f" (raising gpuMemoryUtilization of '{tightest}' to {shares[tightest]:g} would "
            "overcommit its GPU beside the workers it shares it with)"
        )
    else:
        raise_share = f" (no gpuMemoryUtilization of '{tightest}' up to 1 holds {context:,} tokens)"
    return [
        ConfigProblem(
            "model.maxModelLen",
            cfg.model.max_model_len,
            f"vLLM refuses to start a worker whose KV cache cannot hold one request of the max "
            f"model length, {context:,} tokens ({source}); the KV cache of these worker groups "
            f"(--kv-cache-memory-bytes: GPU share - weights - activation overhead) holds fewer "
            f"tokens: {groups}. Set model.maxModelLen to at most {short[tightest]}"
            f"{raise_share}.",
            fixes,
        )
    ]


def overlap_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Keys that contradict another key or the catalog, where the stack cannot run as checked.

    - an ``extraArgs`` item repeating a flag the program writes from a key
      (:attr:`~stackmodel.engines.EngineProfile.program_flags`; an ``extraArgs`` copy comes
      after them on the command line, and argparse keeps the last): the engine would take the
      copy, the sizing and the checks the key;
    - a node class's ``gpuMemoryGiB`` above its ``gpu``'s datasheet memory
      (:attr:`steptime.gpus.GpuSpec.memory_gb`): the sizing would hand out memory the GPU
      lacks, and vLLM refuses to start without its share free;
    - an ``extraArgs`` ``--max-num-batched-tokens`` without a whole number of tokens after it:
      vLLM's parser refuses it at start, and the simulation's step budget
      (:func:`stackmodel.plan.max_batched_tokens`) could not follow it.
    """
    out = []
    engine = cfg.engine.profile
    flags = engine.program_flags
    sources = [("engine.extraArgs", cfg.engine.extra_args)] + [
        (_workers_key(i, "extraArgs"), w.extra_args) for i, w in enumerate(cfg.topology.workers)
    ]
    for key, args in sources:
        for arg in parse_engine_args(args):
            flag, value = arg.flag, arg.value
            if flag == engine.step_budget_flag and not value.isdigit():
                out.append(
                    ConfigProblem(
                        key,
                        list(args),
                        f"{flag} takes a whole number of tokens, got {value!r}: write it as "
                        f"{flag}=8192",
                    )
                )
            if flag in flags:
                out.append(
                    ConfigProblem(
                        key,
                        list(args),
                        f"{flag} is written by the program from {flags[flag]}; a copy here comes "
                        "last on the command line, so the engine would run with it while the "
                        f"sizing uses the key: remove {flag} (and its value) and set the key",
                    )
                )
    for name, node_class in cfg.node_classes.items():
        datasheet = datasheet_memory_gb(node_class.gpu)
        if datasheet is not None and node_class.gpu_memory_gib > datasheet:
            out.append(
                ConfigProblem(
                    f"nodeClasses.{name}.gpuMemoryGiB",
                    node_class.gpu_memory_gib,
                    f"above the {node_class.gpu_name}'s {datasheet:g} GB (its datasheet): the "
                    "sizing would share out memory the GPU lacks; set it to "
                    f"{datasheet:g} or less, or name the GPU the node has",
                )
            )
    return out


def check_stack(
    cfg: StackConfig, *, placement: bool = True, load_step: bool = True
) -> tuple[list[ConfigProblem], StackPlan | None]:
    """Every cross-key problem of a shape-valid config, and its plan (:mod:`stackmodel.plan`)
    when it can be built; the problems are empty when the stack is deployable.

    The order: node classes that exist (nothing else is placed without them); where the workers
    land and the config-only rules; tensor parallelism (the sizing splits the model over the
    GPUs); RDMA links; what the stack's files and settings resolve to; then the plan's sizing.
    With ``placement`` False only the config-only rules and the node classes run (what does
    not read a worker's or node class's numbers), and no plan is built. With ``load_step``
    False the post-deploy load step's own reach and log budget (:func:`endpoint_problems`,
    :func:`cluster_runner_problems`) are left out: the stack judged as serving alone, as
    ``testbed recommend`` judges a candidate, whose emitted stack sets its load step itself.
    """
    load_rules = endpoint_problems(cfg) + cluster_runner_problems(cfg) if load_step else []
    config_rules = (
        unit_problems(cfg)
        + freeform_problems(cfg, _problems_only)
        + role_problems(cfg)
        + kv_buffer_problems(cfg)
        + engine_problems(cfg)
        + nixl_tls_problems(cfg)
        + load_rules
        + overlap_problems(cfg)
    )
    missing = node_class_problems(cfg)
    if missing or not placement:
        return missing + config_rules, None
    inputs = resolve_inputs(cfg)
    out = oversubscription_problems(cfg, inputs.replicas) + config_rules
    out += host_memory_problems(cfg, inputs.replicas)
    tensor_parallel = tensor_parallel_problems(cfg, inputs)
    if tensor_parallel:
        return out + tensor_parallel, None
    out += rdma_problems(cfg, inputs) + nvlink_problems(cfg, inputs)
    out += config_json_problems(cfg, inputs.geometry)
    if inputs.problems:
        return out + list(inputs.problems), None
    plan = build_plan(cfg, inputs)
    return out + sizing_problems(plan), plan


# --- the load step's reach and log budget ----------------------------------------------------


def endpoint_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Why the load step could not reach the frontend, as config problems ([] when it can).

    With ``load.url`` the URL is used as given. Otherwise a LoadBalancer needs nothing and a
    ClusterIP Service is unreachable from the machine running Pulumi (port-forwarding is not
    used: it adds ~2 ms per request). A NodePort without ``load.nodeAddress`` is no problem
    here: the step then waits for it (:func:`missing_address`).
    """
    load = cfg.load
    if not load.enabled or load.url is not None or load.runner == "cluster":
        return []
    if cfg.topology.frontend.service_type == "ClusterIP":
        return [
            ConfigProblem(
                "load.url",
                None,
                "topology.frontend.serviceType is ClusterIP, which is not reachable from the "
                "machine running Pulumi: set load.url, use NodePort or LoadBalancer, or "
                "load.enabled: false",
            )
        ]
    return []


def cluster_runner_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Why the in-cluster load (``load.runner: cluster``) would lose results: a client's
    records outgrowing the pod log the cluster keeps (:func:`stackmodel.log_budget.
    log_budget_problem`)."""
    load = cfg.load
    if not load.enabled or load.runner != "cluster":
        return []
    problem = log_budget_problem(load.grid(), load.clients)
    return [] if problem is None else [ConfigProblem("load.clients", load.clients, problem)]
