"""The engines a stack's workers run (``engine.kind``), each as one profile: its image, worker
command and arguments, the facts the sizing, the checks and the simulation read of it (KV
block size, step budget, whether its workers hold GPUs and move real KV), the engine flags it
knows and the Prometheus names the load client reads from its workers.

Every consumer reads an engine's facts through its profile (:func:`engine_profile`; a stack's
plan carries it: :attr:`stackmodel.plan.GroupPlan.engine`), so another engine is one more entry
of :data:`ENGINES` and one more name in :data:`EngineKind`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from kvpath.versions import RELEASE_LINES, minor_of
from loadgen.prom_samples import ENGINE_IN_FLIGHT, PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES
from loadgen.worker_metrics import (
    DECODE,
    PREFILL,
    QUEUE,
    TTFT,
    XFER_BYTES,
    XFER_FAILED,
    XFER_TIME,
)
from stackmodel.quantities import MOCKER_BLOCK_SIZE_TOKENS, VLLM_BLOCK_SIZE_TOKENS
from stackmodel.sizing import MAX_BATCHED_TOKENS_FLAG, default_max_batched_tokens
from steptime.gpus import GpuSpec

EngineKind = Literal["vllm", "mocker"]
"""The ``engine.kind`` values a stack may set: the keys of :data:`ENGINES`."""

KV_EVENTS_CONFIG = {
    "publisher": "zmq",
    "topic": "kv-events",
    "endpoint": "tcp://*:20080",
    "enable_kv_cache_events": True,
}
"""vLLM ``--kv-events-config`` for KV-routed workers, as in upstream
``examples/backends/vllm/deploy/agg_router.yaml`` and ``disagg_router.yaml`` (Dynamo 1.5 line)."""


@dataclass(frozen=True)
class WorkerSettings:
    """What one worker group's engine arguments are written from, resolved from its stack.

    Attributes:
        model: the served model (``model.name``).
        role: ``aggregated``, ``prefill`` or ``decode``.
        gpu_memory_utilization: the group's share of its GPU.
        kv_cache_bytes: one worker's KV-cache size per GPU (bytes), as the sizing computes it.
        gpu_blocks: :attr:`kv_cache_bytes`' capacity in whole blocks of the engine's
            :attr:`EngineProfile.block_size_tokens` (at least 1).
        kv_bytes_per_token: KV bytes per token of the whole model.
        max_model_len: ``model.maxModelLen`` (None: unset).
        tensor_parallel_size: GPUs per worker.
        quantization: ``model.quantization`` (None: unset).
        kv_cache_dtype: ``model.kvCacheDtype``.
        kv_transfer: the group's ``kvTransfer`` as vLLM parses it (None: none).
        kv_events: the worker publishes KV events (the Dynamo KV router routes, the worker
            holds prefix cache, and the group does not turn them off).
        speedup_ratio: ``engine.speedupRatio``.
        link_gb_per_s: a prefill group's KV link to decode, decimal GB/s (None: no prefill).
    """

    model: str
    role: str
    gpu_memory_utilization: float
    kv_cache_bytes: int
    gpu_blocks: int
    kv_bytes_per_token: int
    max_model_len: int | None
    tensor_parallel_size: int
    quantization: str | None
    kv_cache_dtype: str
    kv_transfer: Mapping[str, str] | None
    kv_events: bool
    speedup_ratio: float
    link_gb_per_s: float | None


@dataclass(frozen=True)
class EngineProfile:
    """One engine's facts.

    Attributes:
        kind: its ``engine.kind``.
        name: how messages name it (``vLLM``).
        image: the default worker image, ``{version}`` standing for ``engine.dynamoVersion``.
        module: the Python module a Dynamo worker runs (``python3 -m <module>``).
        backend_framework: the DGD's ``spec.backendFramework`` (None: the DGD sets none).
        serve_command: the command of the engine's own OpenAI-compatible server, the
            ``vllm-service`` topology's (None: it has none).
        gpu_workers: its workers hold GPUs: the pods ask for ``nvidia.com/gpu``, and the GPU
            memory fit, KV capacity against the max model length, placement and
            tensor-parallel rules apply (the mocker's simulated workers hold none).
        moves_kv: its disaggregated workers move real KV through NIXL (``kvTransfer`` and the
            UCX and link rules apply).
        block_size_tokens: its KV-cache block, tokens (the prefix cache keeps whole blocks).
        step_budget_flag: the flag of a worker's per-step token budget.
        default_step_budget: a worker's per-step token budget without that flag, from its GPU
            and ``gpuMemoryGiB``.
        known_flags: the engine flags an ``extraArgs`` item may carry (one a slip from one of
            them is refused).
        program_flags: the flags the program writes from other keys
            (:meth:`worker_args`), each with the key it comes from.
        kv_size_flags: ``extraArgs`` flags that set a worker's KV cache size beside the one the
            program passes (vLLM's ``--kv-cache-memory-bytes`` from the sizing, so it skips
            its memory profile), as :func:`stackmodel.engine_args.flag_name` spells them; an
            ``extraArgs`` copy of a program flag itself is refused before (``stackmodel.checks``).
        metric_prefix: the prefix of the Prometheus families its workers export.
        metrics: the families the load client reads from its workers (``loadgen``'s names).
        worker_args: the arguments the program writes for a worker group
            (``extraArgs`` follow them).
        shipped_versions: what a Dynamo release ships of the engine (``{"vllm": "0.31.0"}``),
            where :data:`kvpath.versions.RELEASE_LINES` knows the release's line.
    """

    kind: str
    name: str
    image: str
    module: str
    backend_framework: str | None
    serve_command: tuple[str, ...] | None
    gpu_workers: bool
    moves_kv: bool
    block_size_tokens: int
    step_budget_flag: str
    default_step_budget: Callable[[GpuSpec, float], int]
    known_flags: frozenset[str]
    program_flags: Mapping[str, str]
    kv_size_flags: tuple[str, ...]
    metric_prefix: str
    metrics: tuple[str, ...]
    worker_args: Callable[[WorkerSettings], list[str]]
    shipped_versions: Callable[[str], dict[str, str]]

    def default_image(self, version: str) -> str:
        """The default worker image at Dynamo release ``version``."""
        return self.image.format(version=version)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def vllm_worker_args(s: WorkerSettings) -> list[str]:
    """The ``python3 -m dynamo.vllm`` arguments of a worker group: ``--model``,
    ``--gpu-memory-utilization``, ``--kv-cache-memory-bytes``, ``--max-model-len`` (if set),
    ``--tensor-parallel-size`` (above 1), ``--quantization`` and ``--kv-cache-dtype`` (if set);
    prefill/decode add ``--disaggregation-mode`` and ``--kv-transfer-config``; a worker that
    publishes KV events adds ``--kv-events-config`` (:data:`KV_EVENTS_CONFIG`)."""
    args = [
        "--model",
        s.model,
        "--gpu-memory-utilization",
        f"{s.gpu_memory_utilization:g}",
        "--kv-cache-memory-bytes",
        str(s.kv_cache_bytes),
    ]
    if s.max_model_len:
        args += ["--max-model-len", str(s.max_model_len)]
    if s.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(s.tensor_parallel_size)]
    if s.quantization:
        args += ["--quantization", s.quantization]
    if s.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", s.kv_cache_dtype]
    if s.role != "aggregated":
        args += ["--disaggregation-mode", s.role]
    if s.kv_transfer is not None:
        args += ["--kv-transfer-config", _json(s.kv_transfer)]
    if s.kv_events:
        args += ["--kv-events-config", _json(KV_EVENTS_CONFIG)]
    return args


def mocker_worker_args(s: WorkerSettings) -> list[str]:
    """The ``python3 -m dynamo.mocker`` arguments of a worker group: ``--model-path`` and
    ``--model-name``, ``--kv-bytes-per-token`` (the mocker's own estimate ignores
    ``head_dim``), ``--num-gpu-blocks-override`` (the sized KV capacity in the mocker's blocks),
    ``--speedup-ratio``, ``--disaggregation-mode``; prefill adds ``--kv-transfer-bandwidth``
    (decimal GB/s) of its link to the decode workers."""
    args = [
        "--model-path",
        s.model,
        "--model-name",
        s.model,
        "--kv-bytes-per-token",
        str(s.kv_bytes_per_token),
        "--num-gpu-blocks-override",
        str(s.gpu_blocks),
        "--speedup-ratio",
        f"{s.speedup_ratio:g}",
    ]
    if s.role != "aggregated":
        args += ["--disaggregation-mode", s.role]
    if s.link_gb_per_s is not None:
        args += ["--kv-transfer-bandwidth", f"{s.link_gb_per_s:g}"]
    return args


def _vllm_shipped(release: str) -> dict[str, str]:
    line = RELEASE_LINES.get(minor_of(release))
    return {} if line is None else {"vllm": line.vllm}


VLLM_FLAGS = frozenset(
    {
        "--model", "--gpu-memory-utilization", "--kv-cache-memory-bytes", "--max-model-len",
        "--kv-transfer-config", "--kv-events-config", "--tensor-parallel-size",
        MAX_BATCHED_TOKENS_FLAG, "--max-num-seqs", "--enforce-eager", "--block-size",
        "--kv-cache-dtype", "--dtype", "--quantization", "--enable-prefix-caching",
        "--no-enable-prefix-caching", "--enable-chunked-prefill", "--no-enable-chunked-prefill",
        "--served-model-name", "--trust-remote-code", "--swap-space", "--seed",
        "--num-gpu-blocks-override", "--max-seq-len-to-capture", "--disable-log-stats",
        "--compilation-config", "--speculative-config", "--pipeline-parallel-size",
        "--data-parallel-size", "--enable-expert-parallel", "--disaggregation-mode",
    }
)  # fmt: skip
"""vLLM engine flags (vLLM 0.31.0 ``vllm/engine/arg_utils.py``) a stack's ``extraArgs`` may
carry; a flag one slip from one of them is refused (vLLM's parser would refuse it)."""

VLLM_METRICS = (
    QUEUE,
    PREFILL,
    DECODE,
    TTFT,
    XFER_TIME,
    XFER_BYTES,
    XFER_FAILED,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    *ENGINE_IN_FLIGHT,
)
"""The ``vllm:*`` families the load client reads from a worker's ``/metrics``
(:mod:`loadgen.worker_metrics`, :mod:`loadgen.prom_samples`: the client's own names, which
this profile references)."""

VLLM = EngineProfile(
    kind="vllm",
    name="vLLM",
    image="nvcr.io/nvidia/ai-dynamo/vllm-runtime:{version}",
    module="dynamo.vllm",
    backend_framework="vllm",
    serve_command=("vllm", "serve"),
    gpu_workers=True,
    moves_kv=True,
    block_size_tokens=VLLM_BLOCK_SIZE_TOKENS,
    step_budget_flag=MAX_BATCHED_TOKENS_FLAG,
    default_step_budget=default_max_batched_tokens,
    known_flags=VLLM_FLAGS,
    program_flags={
        "--model": "model.name",
        "--gpu-memory-utilization": "topology.workers[].gpuMemoryUtilization",
        "--kv-cache-memory-bytes": "topology.workers[].gpuMemoryUtilization (the sizing sets it)",
        "--max-model-len": "model.maxModelLen",
        "--disaggregation-mode": "topology.workers[].role",
        "--kv-transfer-config": "topology.workers[].kvTransfer",
        "--kv-events-config": "topology.routerMode (the program sets it for KV routing)",
    },
    kv_size_flags=("--num-gpu-blocks-override",),
    metric_prefix="vllm:",
    metrics=VLLM_METRICS,
    worker_args=vllm_worker_args,
    shipped_versions=_vllm_shipped,
)
"""vLLM under Dynamo (``dynamo.vllm``), or plain ``vllm serve`` for a ``vllm-service`` stack."""

MOCKER = EngineProfile(
    kind="mocker",
    name="the mocker",
    # The mocker has no image of its own: it runs in the planner image (upstream mocker example).
    image="nvcr.io/nvidia/ai-dynamo/dynamo-planner:{version}",
    module="dynamo.mocker",
    backend_framework=None,
    serve_command=None,
    gpu_workers=False,
    moves_kv=False,
    block_size_tokens=MOCKER_BLOCK_SIZE_TOKENS,
    step_budget_flag=MAX_BATCHED_TOKENS_FLAG,
    # Timed as the vLLM worker it stands in for.
    default_step_budget=default_max_batched_tokens,
    known_flags=VLLM_FLAGS,
    program_flags={
        "--model-path": "model.name",
        "--model-name": "model.name",
        "--kv-bytes-per-token": "model.geometry (the sizing sets it)",
        "--num-gpu-blocks-override": "topology.workers[].gpuMemoryUtilization (the sizing sets it)",
        "--speedup-ratio": "engine.speedupRatio",
        "--disaggregation-mode": "topology.workers[].role",
        "--kv-transfer-bandwidth": "links (the sizing sets it)",
    },
    kv_size_flags=(),
    metric_prefix="vllm:",
    metrics=VLLM_METRICS,
    worker_args=mocker_worker_args,
    shipped_versions=lambda release: {},
)
"""Dynamo's mocker (``dynamo.mocker``): CPU-only simulated workers; its ``extraArgs`` are
checked against vLLM's flags, and the client reads the same families from its workers."""

ENGINES: dict[str, EngineProfile] = {VLLM.kind: VLLM, MOCKER.kind: MOCKER}
"""Every engine by its ``engine.kind``."""


def engine_profile(kind: str) -> EngineProfile:
    """The profile of engine ``kind`` (an ``engine.kind`` value).

    Raises:
        KeyError: no engine of that kind.
    """
    return ENGINES[kind]
