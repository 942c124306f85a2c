"""Checks that span config keys, run after pydantic has validated each key's shape.

Each returns :class:`~stackmodel.errors.ConfigProblem` values naming the key path to fix.
:func:`semantic_problems` runs them all; :func:`stackmodel.validation.parse_stack_config` raises
them as one :class:`~stackmodel.errors.StackConfigError` before anything is registered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic.alias_generators import to_camel

from kvpath.memory import memory_floor_bytes
from kvpath.versions import (
    DYNAMO_NIXL,
    UpstreamRule,
    line_text,
    minor_of,
    nixl_refuses_tls_without_cuda,
    rules_not_read_at,
    shipped_nixl,
)
from stackmodel.config import NodeClass, StackConfig, WorkerGroup, image_tag_version
from stackmodel.errors import PROJECT, ConfigProblem
from stackmodel.log_budget import log_budget_problem
from stackmodel.models import GATED_MODELS, KNOWN_MODELS, ModelGeometry, UnknownModelError
from stackmodel.platform import PlatformConfig
from stackmodel.quantities import (
    GI,
    TENSOR_PARALLEL_SHARED_MEMORY,
    ceil_mib,
    format_quantity,
    parse_quantity,
)
from stackmodel.sizing import (
    StackSizing,
    calibration,
    gpu_units_per_node,
    group_of,
    kv_link,
    link_profile,
    model_geometry,
    stack_sizing,
)
from stackmodel.ucx import (
    CUDA_CAPABLE_EXAMPLE,
    RDMA_CAPABLE_EXAMPLE,
    UCX_TLS,
    moves_between_gpus,
    moves_gpu_memory,
    moves_over_rdma,
)
from steptime.gpus import DATASHEET_MEMORY_GB, resolve_gpu

_KV_ROLES = {
    "prefill": ("kv_producer", "kv_both"),
    "decode": ("kv_consumer", "kv_both"),
}


def _workers_key(i: int, field: str) -> str:
    return f"topology.workers[{i}].{field}"


def placement_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Node classes that exist; workers that a node class can hold at all."""
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
    if out or cfg.engine.kind != "vllm":
        return out
    for name, node_class in cfg.node_classes.items():
        on_class = [w for w in cfg.topology.workers if w.node_class == name]
        wanted = sum(w.replicas * w.tensor_parallel_size for w in on_class)
        slicing = node_class.time_slicing.replicas_per_gpu if node_class.time_slicing else 1
        units = node_class.nodes * node_class.gpus_per_node * slicing
        if wanted > units or not _pods_pack(node_class, on_class):
            last = max(i for i, w in enumerate(cfg.topology.workers) if w.node_class == name)
            fixes = (
                "add nodes, enable timeSlicing (workers of one GPU) or lower replicas"
                if all(w.tensor_parallel_size == 1 for w in on_class)
                else "add nodes, or lower replicas or tensorParallelSize (a worker of "
                "several GPUs cannot use timeSlicing)"
            )
            out.append(
                ConfigProblem(
                    _workers_key(last, "replicas"),
                    cfg.topology.workers[last].replicas,
                    f"GPU oversubscription on node class '{name}': workers "
                    f"{', '.join(w.name for w in on_class)} need "
                    f"{wanted} nvidia.com/gpu (tensorParallelSize per replica) but the class "
                    f"offers {units} (nodes {node_class.nodes} x gpusPerNode "
                    f"{node_class.gpus_per_node} x time-slicing replicas {slicing}), and each "
                    f"pod's GPUs must be on one node; {fixes}",
                )
            )
    return out


def _pods_pack(node_class: NodeClass, groups: list[WorkerGroup]) -> bool:
    """Whether the groups' pods fit on the class's nodes, each pod's GPUs on one node (the
    scheduler binds a pod to one node, and the device plugin allocates its ``nvidia.com/gpu``
    there): first fit, largest pods first, which is exact when the pod sizes divide one
    another (powers of two, as tensor-parallel sizes are)."""
    if node_class.time_slicing is not None:
        return True  # one-GPU workers only (tensor_parallel_problems); the count decides
    free = [node_class.gpus_per_node] * node_class.nodes
    sizes = sorted(
        (w.tensor_parallel_size for w in groups for _ in range(w.replicas)), reverse=True
    )
    for size in sizes:
        node = next((i for i, left in enumerate(free) if left >= size), None)
        if node is None:
            return False
        free[node] -= size
    return True


def tensor_parallel_problems(cfg: StackConfig) -> list[ConfigProblem]:
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
    try:
        geometry: ModelGeometry | None = model_geometry(cfg)
    except (UnknownModelError, OSError, ValueError, KeyError):
        geometry = None  # sizing_problems names it
    for i, w in enumerate(cfg.topology.workers):
        tp = w.tensor_parallel_size
        if tp == 1:
            continue
        key = _workers_key(i, "tensorParallelSize")
        node_class = cfg.node_classes[w.node_class]
        if geometry is not None:
            out += _model_splits(geometry, key, tp)
        gpu, _ = resolve_gpu(node_class.gpu)
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
        if cfg.engine.kind != "vllm":
            continue  # the mocker's pods have no GPUs; the simulation still splits the model
        if node_class.time_slicing is not None:
            out.append(
                ConfigProblem(
                    key,
                    tp,
                    f"node class '{w.node_class}' time-slices its GPUs, and a pod asking for "
                    f"{tp} time-sliced nvidia.com/gpu units may get them all from one GPU (the "
                    "NVIDIA device plugin promises no distinct GPUs); put the group on a node "
                    "class without timeSlicing, or set tensorParallelSize: 1",
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
            parse_quantity(w.base_memory)
        except ValueError:
            continue  # sizing_problems names the quantity
        if shm < parse_quantity(TENSOR_PARALLEL_SHARED_MEMORY):
            floor = memory_floor_bytes(
                parse_quantity(w.base_memory) * tp,
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
    if cfg.engine.kind != "vllm":
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
        if cfg.engine.kind != "vllm":
            out.append(
                ConfigProblem(
                    "engine.kind",
                    cfg.engine.kind,
                    "topology kind vllm-service needs engine kind vllm (the mocker has no HTTP "
                    "server of its own); use topology kind dynamo",
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
        elif w.role in _KV_ROLES and cfg.engine.kind == "vllm":
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
    memory type, and vLLM's NIXL handshake does not compare ``kv_buffer_device``
    (``compute_nixl_compatibility_hash`` in ``.../kv_connector/v1/nixl/metadata.py`` hashes
    the vLLM version, model, dtype, KV layout, attention backend and transfer mode: 0.31.0
    L175-198, 0.33.0 L186-203), so a host-buffered
    prefill may feed a GPU-buffered decode; the decode side then needs the CUDA transport.
    """
    if cfg.engine.kind != "vllm":
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


def rdma_problems(cfg: StackConfig) -> list[ConfigProblem]:
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
    if cfg.engine.kind != "vllm":
        return []  # the mocker moves no real KV
    index = {w.name: i for i, w in enumerate(cfg.topology.workers)}
    decode = [w for w in cfg.topology.workers if w.role == "decode"]
    out: list[ConfigProblem] = []
    seen: set[str] = set()
    for p in (w for w in cfg.topology.workers if w.role == "prefill"):
        try:
            name = link_profile(kv_link(cfg, p)).name
        except ValueError:
            return []  # sizing_problems names the link
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
    version = cfg.engine.runtime_version or cfg.engine.dynamo_version
    if cfg.engine.kind != "vllm" or not nixl_refuses_tls_without_cuda(version):
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


def sizing_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Model geometry, quantities, links; then the memory floor and GPU memory fit."""
    out: list[ConfigProblem] = []
    for i, w in enumerate(cfg.topology.workers):
        quantities = (
            ("memoryLimit", w.memory_limit),
            ("baseMemory", w.base_memory),
            ("sharedMemorySize", w.shared_memory_size),
        )
        for field, quantity in quantities:
            try:
                parse_quantity(quantity)
            except ValueError as exc:
                out.append(ConfigProblem(_workers_key(i, field), quantity, str(exc)))
    try:
        parse_quantity(cfg.topology.frontend.shared_memory_size)
    except ValueError as exc:
        out.append(
            ConfigProblem(
                "topology.frontend.sharedMemorySize",
                cfg.topology.frontend.shared_memory_size,
                str(exc),
            )
        )
    for field, link in (("sameNode", cfg.links.same_node), ("crossNode", cfg.links.cross_node)):
        try:
            link_profile(link)
        except ValueError as exc:
            out.append(ConfigProblem(f"links.{field}", link, str(exc)))
    for name, node_class in cfg.node_classes.items():
        try:
            calibration(cfg, name)
        except ValueError as exc:
            out.append(
                ConfigProblem(f"nodeClasses.{name}.calibration", node_class.calibration, str(exc))
            )
    if cfg.model.geometry is None:
        try:
            model_geometry(cfg)
        except UnknownModelError as exc:
            out.append(ConfigProblem("model.geometry", None, str(exc)))
        except (OSError, ValueError, KeyError) as exc:
            out.append(
                ConfigProblem(
                    "model.configJson",
                    cfg.model.config_json,
                    f"cannot read the model geometry from it: {exc!s}",
                )
            )
    if out:
        return out
    index = {w.name: i for i, w in enumerate(cfg.topology.workers)}
    value: object
    seen: set[tuple[str, str]] = set()
    sizing = stack_sizing(cfg)
    for finding in sizing.report.errors:
        if finding.check == "memory-floor":
            key = _workers_key(index[finding.subject], "memoryLimit")
            value = cfg.topology.workers[index[finding.subject]].memory_limit
        elif cfg.engine.kind == "vllm":
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
            out.append(ConfigProblem(key, value, finding.message))
    if cfg.engine.kind == "vllm":
        out += context_problems(cfg, sizing)
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


def context_problems(cfg: StackConfig, sizing: StackSizing) -> list[ConfigProblem]:
    """Each vLLM worker's KV cache must hold one request of the max model length.

    vLLM refuses to start otherwise (vLLM 0.31.0 ``check_enough_kv_cache_memory`` in
    ``vllm/v1/core/kv_cache_utils.py``, which also holds one block back as the null block). The
    max model length is ``model.maxModelLen``, else the model's ``max_position_embeddings``
    (vLLM's default); the KV cache is the ``--kv-cache-memory-bytes`` sizing passes, so the
    check is exact up to vLLM's block rounding. Groups left without any KV cache are reported
    by the GPU fit check instead.
    """
    longer = model_length_problems(cfg, sizing.geometry.max_position_embeddings)
    if longer:
        return longer
    context = cfg.model.max_model_len or sizing.geometry.max_position_embeddings
    if context is None:
        return []
    prompt = cfg.load.grid().prompt_tokens
    if cfg.load.enabled and prompt >= context:
        # vLLM 0.31.0 vllm/entrypoints/serve/utils/api_utils.py get_max_tokens, lines 183-187:
        # "Input length (...) exceeds model's maximum context length"; at the max model length
        # itself no output token is left.
        return [
            ConfigProblem(
                "load.promptTokens",
                prompt,
                f"not below the max model length, {context:,} tokens (model.maxModelLen, else "
                "the model's max_position_embeddings): vLLM refuses every request of the grid; "
                f"lower load.promptTokens below {context - cfg.load.grid().max_tokens} (room for "
                "load.maxTokens) or raise model.maxModelLen",
            )
        ]
    fits = {}
    for w in cfg.topology.workers:
        row = sizing.worker_kv(w.name)
        if row.kv_cache_budget_bytes:
            fits[w.name] = max(0, row.kv_capacity_blocks - 1) * row.block_size_tokens
    short = {name: tokens for name, tokens in fits.items() if tokens < context}
    if not short:
        return []
    tightest = min(short, key=lambda name: short[name])
    source = (
        "model.maxModelLen"
        if cfg.model.max_model_len
        else "model.maxModelLen is unset, so vLLM uses the model's max_position_embeddings"
    )
    groups = ", ".join(f"'{name}' {tokens:,}" for name, tokens in short.items())
    # The share that would hold it: the missing KV bytes on top of the group's share.
    row = sizing.worker_kv(tightest)
    needed = (-(-context // row.block_size_tokens) + 1) * row.block_size_tokens
    missing = needed * sizing.report.kv_bytes_per_token - row.kv_cache_budget_bytes
    gpu_bytes = math.floor(cfg.node_classes[row.node_class].gpu_memory_gib * GI)
    share = math.ceil((row.gpu_memory_utilization + missing / gpu_bytes) * 100) / 100
    raise_share = (
        f", or raise gpuMemoryUtilization of '{tightest}' to {share:g} if the other workers "
        "on its GPU leave room"
        if share <= 1
        else f" (no gpuMemoryUtilization of '{tightest}' up to 1 holds {context:,} tokens)"
    )
    return [
        ConfigProblem(
            "model.maxModelLen",
            cfg.model.max_model_len,
            f"vLLM refuses to start a worker whose KV cache cannot hold one request of the max "
            f"model length, {context:,} tokens ({source}); the KV cache of these worker groups "
            f"(--kv-cache-memory-bytes: GPU share - weights - activation overhead) holds fewer "
            f"tokens: {groups}. Set model.maxModelLen to at most {short[tightest]}"
            f"{raise_share}.",
        )
    ]


def deprecation_warnings(cfg: StackConfig) -> list[str]:
    """Settings that deploy today but that upstream has deprecated, each with its replacement
    (said at preview; nothing is refused).

    ``kvTransfer.role: kv_both`` with NixlConnector: vLLM deprecates it (RFC vllm-project/vllm
    #43807; phase 1, PR #43874, logs a warning from
    ``vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py`` and asks for
    ``kv_producer`` on prefill and ``kv_consumer`` on decode instances).
    """
    replacement = {"prefill": "kv_producer", "decode": "kv_consumer"}
    return [
        f"{PROJECT}:{_workers_key(i, 'kvTransfer.role')} = 'kv_both': deprecated for "
        f"NixlConnector (vLLM RFC #43807); set kv_producer on prefill and kv_consumer on decode "
        f"workers (here: {replacement[w.role]})"
        for i, w in enumerate(cfg.topology.workers)
        if w.kv_transfer is not None
        and w.kv_transfer.role == "kv_both"
        and w.kv_transfer.connector == "NixlConnector"
        and w.role in replacement
    ]


def fp8_warnings(cfg: StackConfig) -> list[str]:
    """FP8 weights on a GPU without FP8 tensor cores (``fp8DenseTflops`` unset: the catalog's
    Ampere GPUs): vLLM runs them as weight-only W8A16 through FP8 Marlin, so the weights take
    1 byte but the compute stays BF16 ("Turing/Ampere GPUs are supported for W8A16 (weight-only
    FP8) utilizing Marlin kernels", vLLM's FP8 W8A8 page, docs.vllm.ai features/quantization/
    fp8; vllm-project/vllm PR #5975). Said at preview; the step-time model computes in BF16
    there (:meth:`steptime.gpus.GpuSpec.compute_flops_per_s`)."""
    if cfg.engine.kind != "vllm":
        return []
    try:
        fp8 = model_geometry(cfg).weight_dtype_bytes == 1
    except (UnknownModelError, OSError, ValueError, KeyError):
        return []
    out = []
    for i, w in enumerate(cfg.topology.workers):
        gpu, _ = resolve_gpu(cfg.node_classes[w.node_class].gpu)
        if fp8 and gpu.fp8_dense_tflops is None:
            out.append(
                f"{PROJECT}:{_workers_key(i, 'nodeClass')} = {w.node_class!r}: FP8 weights on "
                f"{gpu.name}, which has no FP8 tensor cores: vLLM runs them weight-only (W8A16, "
                "FP8 Marlin), so they take half the memory but compute at BF16 speed; for W8A8 "
                "use a GPU with FP8 (Ada or Hopper: l4, l40s, rtx-4090, h100-*, h200)"
            )
    return out


def gated_model_warnings(cfg: StackConfig, with_hf_token: bool) -> list[str]:
    """A gated catalog model (:data:`stackmodel.models.GATED_MODELS`) without the ``hfToken``
    secret: every worker's download would fail (said at preview; nothing is refused, since a
    cluster may have the weights cached)."""
    if with_hf_token or cfg.model.name not in GATED_MODELS:
        return []
    return [
        f"{PROJECT}:model.name = {cfg.model.name!r} is gated on Hugging Face and no hfToken is "
        "set, so the workers cannot download it: accept its license on huggingface.co, then "
        "`pulumi config set --secret hfToken hf_...`"
    ]


def placement_warnings(cfg: StackConfig) -> list[str]:
    """A prefill group sharing a node class of several nodes with decode groups: the scheduler
    puts them on one node or two (the DGD sets no anti-affinity), so the sizing and the
    simulation take the slower link (:func:`stackmodel.sizing.kv_link`); said at preview
    with how to pin them apart."""
    out = []
    for i, group in enumerate(cfg.topology.workers):
        nodes = cfg.node_classes[group.node_class].nodes if group.role == "prefill" else 1
        if gpu_units_per_node(cfg, group.node_class) < 2 and cfg.engine.kind == "vllm":
            continue  # each worker takes a node's only GPU: prefill and decode never share one
        decode = [
            f"'{w.name}'"
            for w in cfg.topology.workers
            if w.role == "decode" and w.node_class == group.node_class
        ]
        if nodes > 1 and decode:
            link = link_profile(kv_link(cfg, group)).name
            out.append(
                f"{PROJECT}:{_workers_key(i, 'nodeClass')} = {group.node_class!r}: prefill "
                f"'{group.name}' and decode {', '.join(decode)} share a node class of {nodes} "
                "nodes, so the scheduler puts them on the same node or on two; the sizing takes "
                f"the slower of links.sameNode and links.crossNode ({link}). To put prefill and "
                "decode on different nodes, give each its own node class (a nodeSelector on a "
                "label only its nodes carry)"
            )
    return out


def same_node_link_warnings(cfg: StackConfig) -> list[str]:
    """A same-node KV path sized as the seed's host-memory TCP while the workers move KV in GPU
    buffers with ``cuda_ipc``: UCX then copies between the node's GPUs over their interconnect
    (NVLink or PCIe), not through TCP, so the default ``links.sameNode`` (``same-node-tcp``, 1
    GB/s) understates it; said with the rate to set."""
    out: list[str] = []
    if cfg.links.same_node != "same-node-tcp":
        return out
    for group in cfg.topology.workers:
        kv = group.kv_transfer
        if group.role != "prefill" or kv is None or kv.buffer_device != "cuda":
            continue
        if not moves_between_gpus(group.env.get(UCX_TLS)):
            continue
        gpu = cfg.node_classes[group.node_class].gpu
        spec = resolve_gpu(gpu)[0] if gpu is not None else None
        same_node = kv_link(cfg, group) == cfg.links.same_node  # what the sizing takes
        if not same_node or spec is None or spec.interconnect_gb_per_s is None:
            continue
        rate = f"{spec.interconnect_gb_per_s:g}"
        out.append(
            f"{PROJECT}:links.sameNode = 'same-node-tcp': prefill '{group.name}' moves KV in "
            f"GPU buffers with cuda_ipc in UCX_TLS, so on one node UCX copies it between the "
            f"GPUs over their {spec.interconnect} ({rate} GB/s per direction on {spec.name}), "
            "not over host-memory TCP at 1 GB/s as the sizing and the simulation take it; set "
            f"links.sameNode: {rate} (GB/s, the interconnect's rate; less in practice), or "
            "probe the path (testbed probe kv-path STACK --in-cluster same-node)"
        )
    return out


def platform_release_warnings(platform: PlatformConfig) -> list[str]:
    """The platform's chart version, where the program's chart rules (its values, the CRD
    fields the graph stacks write) were not read at its minor line
    (:func:`kvpath.versions.rules_not_read_at`): said at preview; nothing refused."""
    if not platform.install:
        return []
    try:
        unread = [r for r in rules_not_read_at(platform.chart_version) if r.dynamo_only]
    except ValueError:
        return []  # not MAJOR.MINOR.PATCH: the chart version's own check says so
    if not unread:
        return []
    return [
        _unread_rules_warning(
            "platform.chartVersion",
            platform.chart_version,
            unread,
            [r.name for r in unread],
            "before installing it",
        )
    ]


def _unread_rules_warning(
    key: str, version: str, read: Sequence[UpstreamRule], names: Sequence[str], tail: str
) -> str:
    """The warning that rules ``names`` were read only at the lines of ``read``, not at
    ``version`` (the release ``key`` sets); ``tail`` ends it (what to do before what)."""
    lines = sorted({line for r in read for line in r.lines})
    return (
        f"{PROJECT}:{key} = {version!r}: these rules of the program were read at Dynamo "
        f"{', '.join(line_text(line) for line in lines)} only, not at this release: "
        f"{', '.join(names)} (docs/upgrading.md); check them against its release notes {tail}"
    )


def release_warnings(cfg: StackConfig) -> list[str]:
    """What the stack's Dynamo release leaves unconfirmed (said at preview; nothing refused):

    - the program's rules that encode upstream behaviour and were not read at this release's
      minor line (:func:`kvpath.versions.rules_not_read_at`; at 1.7.0 the chart values and CRD
      fields, whose 1.7.0 files could not be read);
    - a link profile a disaggregated stack uses that a probe measured with another NIXL minor
      than the release ships (:func:`kvpath.versions.shipped_nixl`): its rates were taken
      with another UCX backend.
    """
    version = cfg.engine.runtime_version or cfg.engine.dynamo_version
    try:
        unread = rules_not_read_at(version)
    except ValueError:
        return []  # not MAJOR.MINOR.PATCH: the image's own problem
    out = []
    dynamo = cfg.topology.kind == "dynamo"
    names = [r.name for r in unread if dynamo or not r.dynamo_only]
    if names:
        out.append(
            _unread_rules_warning(
                "engine.dynamoVersion", version, unread, names, "before relying on the stack"
            )
        )
    nixl = shipped_nixl(version)
    if nixl is None or not any(w.kv_transfer is not None for w in cfg.topology.workers):
        return out
    for field, link in (("sameNode", cfg.links.same_node), ("crossNode", cfg.links.cross_node)):
        profile = link_profile(link)
        measured = profile.nixl_version
        if measured is None or _same_minor(measured, nixl):
            continue
        out.append(
            f"{PROJECT}:links.{field} = {link!r}: profile '{profile.name}' was measured with "
            f"NIXL {measured} (UCX {profile.ucx_version or 'unknown'}), but Dynamo {version} "
            f"ships NIXL {nixl}: another UCX backend moves this stack's KV; probe again with "
            "`testbed probe kv-path` in that release's image before trusting the link's rates"
        )
    return out


_PROGRAM_FLAGS = {
    "vllm": {
        "--model": "model.name",
        "--gpu-memory-utilization": "topology.workers[].gpuMemoryUtilization",
        "--kv-cache-memory-bytes": "topology.workers[].gpuMemoryUtilization (the sizing sets it)",
        "--max-model-len": "model.maxModelLen",
        "--disaggregation-mode": "topology.workers[].role",
        "--kv-transfer-config": "topology.workers[].kvTransfer",
        "--kv-events-config": "topology.routerMode (the program sets it for KV routing)",
    },
    "mocker": {
        "--model-path": "model.name",
        "--model-name": "model.name",
        "--kv-bytes-per-token": "model.geometry (the sizing sets it)",
        "--num-gpu-blocks-override": "topology.workers[].gpuMemoryUtilization (the sizing sets it)",
        "--speedup-ratio": "engine.speedupRatio",
        "--disaggregation-mode": "topology.workers[].role",
        "--kv-transfer-bandwidth": "links (the sizing sets it)",
    },
}
"""The engine flags the program writes from other keys (:func:`stackmodel.topology.engine_args`)
and the key each comes from. An ``extraArgs`` copy comes after them on the command line, and
argparse keeps the last, so the engine would run with it while the sizing and the checks use
the key."""


def _flag(arg: str) -> str:
    """``--max_model_len=8192`` -> ``--max-model-len`` (vLLM's parser takes either spelling:
    ``FlexibleArgumentParser`` in vLLM 0.31.0 ``vllm/utils/argparse_utils.py``, lines 120 and
    339)."""
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-") if name.startswith("--") else name


def overlap_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Keys that contradict another key or the catalog, where the stack cannot run as checked.

    - an ``extraArgs`` item repeating a flag the program writes from a key (:data:`_PROGRAM_FLAGS`):
      the engine would take the copy, the sizing the key;
    - a node class's ``gpuMemoryGiB`` above its catalog ``gpu``'s memory
      (:data:`steptime.gpus.DATASHEET_MEMORY_GB`): the sizing would hand out memory the GPU
      lacks, and vLLM refuses to start without its share free;
    - an ``extraArgs`` ``--max-num-batched-tokens`` without a whole number of tokens after it:
      vLLM's parser refuses it at start, and the simulation's step budget
      (:func:`stackmodel.sizing.max_batched_tokens`) could not follow it.
    """
    out = []
    flags = _PROGRAM_FLAGS[cfg.engine.kind]
    sources = [("engine.extraArgs", cfg.engine.extra_args)] + [
        (_workers_key(i, "extraArgs"), w.extra_args) for i, w in enumerate(cfg.topology.workers)
    ]
    for key, args in sources:
        for i, arg in enumerate(args):
            flag = _flag(arg)
            value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "")
            if flag == "--max-num-batched-tokens" and not value.isdigit():
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
        datasheet = _datasheet_memory(node_class.gpu)
        if datasheet is not None and node_class.gpu_memory_gib > datasheet:
            out.append(
                ConfigProblem(
                    f"nodeClasses.{name}.gpuMemoryGiB",
                    node_class.gpu_memory_gib,
                    f"above the {node_class.gpu}'s {datasheet:g} GB (its datasheet): the sizing "
                    f"would share out memory the GPU lacks; set it to {datasheet:g} or less, or "
                    "name the GPU the node has",
                )
            )
    return out


def _datasheet_memory(gpu: object) -> float | None:
    return DATASHEET_MEMORY_GB.get(gpu) if isinstance(gpu, str) else None


LOW_GPU_MEMORY_SHARE = 0.9
"""Below this share of its GPU's datasheet memory a node class's ``gpuMemoryGiB`` is warned
about: a driver reports a little under the datasheet (24,564 MiB on a 24 GB card, 0.9996),
a MIG slice is a GPU of its own name, so less is a slip (24 written for a 48 GB L40S)."""


def overlap_warnings(cfg: StackConfig) -> list[str]:
    """Keys that another key or the catalog also determines, where the stack still runs: each
    says which wins (said at preview; nothing is refused).

    - ``gpuMemoryGiB`` well under the catalog ``gpu``'s memory: the sizing uses
      ``gpuMemoryGiB``, so the rest of the GPU stays unused;
    - ``model.geometry`` beside ``model.configJson``: the geometry wins
      (:func:`stackmodel.sizing.model_geometry`);
    - ``model.geometry`` of a catalog model that differs from the catalog's: the geometry wins.
    """
    out = []
    for name, node_class in cfg.node_classes.items():
        datasheet = _datasheet_memory(node_class.gpu)
        if datasheet is not None and node_class.gpu_memory_gib < LOW_GPU_MEMORY_SHARE * datasheet:
            out.append(
                f"{PROJECT}:nodeClasses.{name}.gpuMemoryGiB = {node_class.gpu_memory_gib:g} but "
                f"its gpu, {node_class.gpu}, has {datasheet:g} GB: gpuMemoryGiB wins, so the "
                f"sizing and the workers' KV caches use {node_class.gpu_memory_gib:g} GiB and "
                f"leave the rest unused; set gpuMemoryGiB: {datasheet:g} to use the whole GPU"
            )
    geometry = cfg.model.geometry
    if geometry is not None and cfg.model.config_json is not None:
        out.append(
            f"{PROJECT}:model.geometry and model.configJson are both set: model.geometry wins "
            f"and {cfg.model.config_json!r} is not read; remove one"
        )
    catalog = KNOWN_MODELS.get(cfg.model.name)
    if geometry is not None and catalog is not None and geometry != catalog:
        differs = [
            f"{to_camel(field)} {getattr(geometry, field)} (catalog {getattr(catalog, field)})"
            for field in type(geometry).model_fields
            if getattr(geometry, field) != getattr(catalog, field)
        ]
        out.append(
            f"{PROJECT}:model.geometry differs from the catalog's {cfg.model.name}: "
            f"{', '.join(differs)}; model.geometry wins. Remove it to use the catalog's"
        )
    return out


def _same_minor(a: str, b: str) -> bool:
    """Whether two MAJOR.MINOR.PATCH versions share a minor; a version of another form never
    does (``"1.5.1"``, ``"1.5.0"`` -> True; ``"1.5"``, ``"1.5.0"`` -> False)."""
    try:
        return minor_of(a) == minor_of(b)
    except ValueError:
        return False


def semantic_problems(cfg: StackConfig) -> list[ConfigProblem]:
    """Every cross-key problem of a shape-valid config (empty when the stack is deployable)."""
    out = (
        placement_problems(cfg)
        + role_problems(cfg)
        + kv_buffer_problems(cfg)
        + engine_problems(cfg)
        + nixl_tls_problems(cfg)
        + endpoint_problems(cfg)
        + cluster_runner_problems(cfg)
        + overlap_problems(cfg)
    )
    if any(p.key.endswith("nodeClass") for p in out):
        return out  # sizing needs every node class to exist
    tensor_parallel = tensor_parallel_problems(cfg)
    if tensor_parallel:
        return out + tensor_parallel  # sizing splits the model over the GPUs
    return out + rdma_problems(cfg) + sizing_problems(cfg)


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
