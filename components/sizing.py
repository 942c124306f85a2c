"""Sizing: the seed's memory rule, GPU memory fit and KV-transfer cost, as pure functions.

The seed's two lessons, checked before anything is deployed:

1. A worker that buffers KV in host memory (``kv_buffer_device: cpu``) needs, on top of the
   memory limit it had without that buffer, room for every in-flight request's KV cache
   (`memory_floor_bytes`, `check_memory_floor`). The seed's cross-node prefill worker kept its
   part-3 limit of 3,584Mi and was OOMKilled at concurrency 4.
2. Moving a request's KV cache costs KV bytes / link throughput; disaggregation only pays when
   that is smaller than the prefill time it takes off the decode GPU (`disaggregation_verdict`).

Memory values are bytes (int); Kubernetes quantities ("3584Mi", "10Gi", "4G") are parsed with
`parse_quantity` and written back with `format_quantity`. Times are seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from components.links import LinkProfile, resolve_link, transfer_seconds
from components.models import ModelGeometry

KI, MI, GI = 2**10, 2**20, 2**30

# Every part-3 run of the seed passed with a 3,584Mi memory limit: a vLLM worker serving
# Qwen3-0.6B without host-buffered KV, its /dev/shm use included. The floor counts the worker's
# memory-backed /dev/shm (`DEFAULT_SHARED_MEMORY`) separately, so the base is the rest:
# 3,584Mi - 256Mi = 3,328Mi, and the default floor is the seed's 3,584Mi again. Used as a
# component's base memory unless the stack sets baseMemory.
DEFAULT_BASE_MEMORY = "3328Mi"

# The memory-backed /dev/shm (DGD ``sharedMemorySize``) each component gets. The Dynamo operator
# mounts 8Gi when the DGD leaves it unset (``DefaultSharedMemorySize = "8Gi"``,
# ai-dynamo/dynamo deploy/operator/internal/consts/consts.go; the v1beta1 CRD: "nil selects the
# operator default (8Gi)"), and a tmpfs's files count against the container's memory limit
# (kubernetes.io/docs/concepts/storage/volumes/#emptydir: with ``medium: Memory`` "files you
# write count against your container's memory limit"), so an 8Gi mount could take a 3,584Mi
# worker down. A single-GPU (tensor-parallel 1) vLLM worker exchanges no tensors between ranks
# through /dev/shm (that is what needs a large one, vllm-project/production-stack PR #994);
# 256Mi is four times a container runtime's 64Mi default. Raise it for tensor parallelism.
DEFAULT_SHARED_MEMORY = "256Mi"

# Safety margin on the host-buffered KV term. 2.0 allows each in-flight request's KV to sit in
# host memory twice: the buffer being sent plus one finished buffer not yet freed (at
# concurrency 1 the seed's worker still died after 4 requests, so finished buffers seem not to be
# freed at once). It is consistent with both seed observations: 3,584Mi at concurrency 4 fails
# the floor (needs 5,659Mi; the worker was OOMKilled), 10Gi at concurrency 8 passes (needs
# 7,733Mi; the same-node workers never hit the limit).
DEFAULT_MEMORY_MARGIN = 2.0

# Per-worker GPU memory outside weights and KV cache: CUDA context, the activation peak vLLM
# profiles at startup, CUDA-graph pools. An assumption for small models (~0.5 GiB of CUDA
# context plus activations at vLLM's default batch budget); set it per stack for big models.
DEFAULT_ACTIVATION_OVERHEAD_BYTES = 1 * GI

# KV-cache block sizes in tokens: vLLM's default --block-size, and the Dynamo mocker's default.
VLLM_BLOCK_SIZE_TOKENS = 16
MOCKER_BLOCK_SIZE_TOKENS = 64

_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exponent>[+-]?\d+))?"
)
# Kubernetes quantities are bounded (about 2^63 in canonical form); this also bounds the work of
# parsing an exponent.
_MAX_EXPONENT = 30
_SUFFIX_MULTIPLIERS: dict[str, Fraction] = {
    **{f"{p}i": Fraction(1024) ** n for n, p in enumerate("KMGTPE", start=1)},
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    **{p: Fraction(1000) ** n for n, p in enumerate("kMGTPE", start=1)},
}


def parse_quantity(quantity: str | int) -> int:
    """Bytes in a Kubernetes memory quantity, rounded up to a whole byte as Kubernetes does.

    Accepts the quantity grammar of k8s.io/apimachinery ``resource.Quantity``: a decimal number
    with an optional binary suffix (Ki Mi Gi Ti Pi Ei), decimal suffix (n u m k M G T P E) or
    exponent (``e3``/``E3``); e.g. "3584Mi", "10Gi", "4G", "512M", "1.5Gi", "1e9", or an int.
    (The `kubernetes` package's ``parse_quantity`` also accepts invalid forms such as "1mi",
    "Infinity" and "NaN", and is only in the `sim` dependency group, so it is not used here.)

    Raises:
        ValueError: not a valid quantity, or negative.
    """
    if isinstance(quantity, bool) or not isinstance(quantity, int | str):
        raise ValueError(f"memory quantity must be a string or int, got {quantity!r}")
    if isinstance(quantity, int):
        value = Fraction(quantity)
    else:
        match = _QUANTITY.fullmatch(quantity)
        if match is None:
            raise ValueError(
                f"invalid memory quantity {quantity!r}; use e.g. 3584Mi, 10Gi, 4G or bytes"
            )
        value = Fraction(match["number"])
        if match["suffix"]:
            value *= _SUFFIX_MULTIPLIERS[match["suffix"]]
        if match["exponent"]:
            exponent = int(match["exponent"])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"memory quantity {quantity!r} is out of range")
            value *= Fraction(10) ** exponent
    if value < 0:
        raise ValueError(f"memory quantity must not be negative, got {quantity!r}")
    return math.ceil(value)


def format_quantity(num_bytes: int) -> str:
    """The exact Kubernetes quantity for ``num_bytes``, in the largest of Gi, Mi, Ki that
    divides it, else plain bytes: 10737418240 -> "10Gi", 3758096384 -> "3584Mi".

    `parse_quantity` of the result gives ``num_bytes`` back. Round a computed requirement up
    with `ceil_mib` first to get a readable limit.

    Raises:
        ValueError: ``num_bytes`` < 0.
    """
    if num_bytes < 0:
        raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
    for suffix, unit in (("Gi", GI), ("Mi", MI), ("Ki", KI)):
        if num_bytes and num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def ceil_mib(num_bytes: int) -> int:
    """``num_bytes`` rounded up to a whole number of MiB (bytes)."""
    return -(-num_bytes // MI) * MI


def _bytes_text(num_bytes: int) -> str:
    """A byte count readable in both units, e.g. ``3584Mi (3,758,096,384 B)``."""
    return f"{format_quantity(ceil_mib(num_bytes))} ({num_bytes:,} B)"


def kv_bytes_per_request(geometry: ModelGeometry, prompt_tokens: int) -> int:
    """KV-cache bytes of one request's prompt: KV bytes per token x prompt tokens (bytes).

    The seed's load: 114,688 B/token x 2,371 tokens = 271,925,248 B (~272 MB).

    Raises:
        ValueError: ``prompt_tokens`` < 0.
    """
    if prompt_tokens < 0:
        raise ValueError(f"prompt_tokens must be >= 0, got {prompt_tokens}")
    return geometry.kv_bytes_per_token * prompt_tokens


def memory_floor_bytes(
    base_limit_bytes: int,
    concurrency: int,
    kv_bytes_per_request: int,
    margin: float = DEFAULT_MEMORY_MARGIN,
    shared_memory_bytes: int = 0,
) -> int:
    """The memory limit a worker that buffers KV in host memory needs (bytes).

    base limit + /dev/shm size + ceil(concurrency x KV bytes per request x margin): the seed's
    rule, with ``concurrency`` the highest load concurrency the stack runs (every in-flight
    request holds its KV in the worker's host memory), plus the memory-backed /dev/shm, whose
    files count against the container's memory limit (see `DEFAULT_SHARED_MEMORY`).

    Args:
        base_limit_bytes: the limit the worker needs without host-buffered KV and /dev/shm
            (bytes); see `DEFAULT_BASE_MEMORY`.
        concurrency: in-flight requests (>= 0).
        kv_bytes_per_request: one request's KV cache (bytes), see `kv_bytes_per_request`.
        margin: multiplier on the KV term (>= 1); see `DEFAULT_MEMORY_MARGIN`.
        shared_memory_bytes: size of the worker's memory-backed /dev/shm (bytes).

    Raises:
        ValueError: a negative input, or ``margin`` < 1 or not finite.
    """
    if min(base_limit_bytes, concurrency, kv_bytes_per_request, shared_memory_bytes) < 0:
        raise ValueError(
            "base_limit_bytes, concurrency, kv_bytes_per_request and shared_memory_bytes must "
            f"be >= 0, got {base_limit_bytes}, {concurrency}, {kv_bytes_per_request}, "
            f"{shared_memory_bytes}"
        )
    if not (math.isfinite(margin) and margin >= 1):
        raise ValueError(f"margin must be a finite number >= 1, got {margin}")
    kv_term = Fraction(concurrency * kv_bytes_per_request) * Fraction(repr(margin))
    return base_limit_bytes + shared_memory_bytes + math.ceil(kv_term)


class SizingFinding(BaseModel):
    """A sizing rule a stack breaks, with the numbers, for the caller to report.

    Attributes:
        check: ``memory-floor`` (host-buffered KV vs a component's memory limit) or
            ``gpu-memory`` (workers' GPU memory vs the GPU).
        subject: the component name (memory-floor) or the GPU's node class (gpu-memory).
        workers: the workers involved (gpu-memory), empty for memory-floor.
        configured_bytes: what the stack gives (memory limit, or GPU memory share; bytes).
        required_bytes: what the rule requires (bytes).
        formula: how ``required_bytes`` was computed, with the numbers filled in.
        severity: ``error`` (stop the deployment) or ``warning`` (an override is set).
        message: one human sentence with all of the above and how to fix it.
    """

    model_config = ConfigDict(frozen=True)

    check: Literal["memory-floor", "gpu-memory"]
    subject: str
    workers: list[str] = Field(default_factory=list)
    configured_bytes: int
    required_bytes: int
    formula: str
    severity: Literal["error", "warning"]
    message: str


def check_memory_floor(
    component: str,
    memory_limit: str | int,
    *,
    concurrency: int,
    kv_bytes_per_request: int,
    base_memory: str | int = DEFAULT_BASE_MEMORY,
    shared_memory: str | int = DEFAULT_SHARED_MEMORY,
    margin: float = DEFAULT_MEMORY_MARGIN,
    allow_unsafe_memory: bool = False,
    host_buffers_kv: bool = True,
) -> SizingFinding | None:
    """Check a worker's memory limit against `memory_floor_bytes`.

    A worker that buffers KV in host memory needs the seed's floor; any other worker needs at
    least its base memory and /dev/shm (the floor with no in-flight KV).

    Args:
        component: the component's name, used in the message.
        memory_limit: its configured limit (Kubernetes quantity or bytes).
        concurrency: the stack's highest load concurrency.
        kv_bytes_per_request: one request's KV cache (bytes).
        base_memory: the limit it needs without host-buffered KV and /dev/shm (quantity or
            bytes).
        shared_memory: its memory-backed /dev/shm size (quantity or bytes).
        margin: multiplier on the KV term (>= 1).
        allow_unsafe_memory: the stack's explicit override: report a ``warning`` instead of an
            ``error`` (to reproduce the seed's OOMKill on purpose).
        host_buffers_kv: False for a worker without host-buffered KV: the floor is
            ``base_memory`` + ``shared_memory``.

    Returns:
        None when the limit is at or above the floor, else the finding.

    Raises:
        ValueError: an invalid quantity, or the inputs `memory_floor_bytes` rejects.
    """
    configured = parse_quantity(memory_limit)
    base = parse_quantity(base_memory)
    shm = parse_quantity(shared_memory)
    if not host_buffers_kv:
        concurrency = 0
    required = memory_floor_bytes(base, concurrency, kv_bytes_per_request, margin, shm)
    base_text = f"base {format_quantity(base)} + /dev/shm {format_quantity(shm)}"
    if configured >= required:
        return None
    minimum = format_quantity(ceil_mib(required))
    if host_buffers_kv:
        formula = (
            f"{base_text} + concurrency {concurrency} x KV/request "
            f"{kv_bytes_per_request:,} B x margin {margin:g} = {_bytes_text(required)}"
        )
        message = (
            f"component '{component}' buffers KV in host memory (kv_buffer_device: cpu) and its "
            f"memory limit {_bytes_text(configured)} is below the required "
            f"{_bytes_text(required)}; {formula}. "
        )
        fix = (
            f"Raise memoryLimit to at least {minimum}, lower load.concurrency, or set "
            "sizing.allowUnsafeMemory: true to reproduce the seed's OOMKill."
        )
    else:
        formula = f"{base_text} = {_bytes_text(required)}"
        message = (
            f"component '{component}' has memory limit {_bytes_text(configured)}, below its "
            f"floor {formula} (what the worker needs without host-buffered KV; the defaults "
            "add up to 3584Mi, the limit every part-3 run of the seed passed with). "
        )
        fix = (
            f"Raise memoryLimit to at least {minimum}, or lower baseMemory or sharedMemorySize "
            "if this engine and model need less, or set sizing.allowUnsafeMemory: true."
        )
    if allow_unsafe_memory:
        message += (
            "sizing.allowUnsafeMemory is set, so it is deployed anyway: expect the worker to be "
            "OOMKilled (exit 137) under load, as in the seed's cross-node run."
        )
    else:
        message += fix
    return SizingFinding(
        check="memory-floor",
        subject=component,
        configured_bytes=configured,
        required_bytes=required,
        formula=formula,
        severity="warning" if allow_unsafe_memory else "error",
        message=message,
    )


def kv_cache_budget_bytes(
    gpu_memory_bytes: int,
    gpu_memory_utilization: float,
    weight_bytes: int,
    activation_overhead_bytes: int = DEFAULT_ACTIVATION_OVERHEAD_BYTES,
) -> int:
    """GPU memory a vLLM worker leaves for its KV cache (bytes; 0 when nothing is left).

    vLLM's ``--gpu-memory-utilization`` is the share of the GPU's total memory one worker may
    use for weights, activations and KV cache; the KV cache gets what remains after the
    weights and the activation peak vLLM profiles at startup. Approximation:
    floor(utilization x GPU memory) - weights - activation overhead, where the overhead
    (`DEFAULT_ACTIVATION_OVERHEAD_BYTES`) stands in for vLLM's profiled peak and CUDA context.

    Raises:
        ValueError: utilization outside (0, 1], or a negative byte count.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if min(gpu_memory_bytes, weight_bytes, activation_overhead_bytes) < 0:
        raise ValueError(
            "gpu_memory_bytes, weight_bytes and activation_overhead_bytes must be >= 0"
        )
    usable = math.floor(gpu_memory_bytes * gpu_memory_utilization)
    return max(0, usable - weight_bytes - activation_overhead_bytes)


def kv_capacity_tokens(kv_budget_bytes: int, kv_bytes_per_token: int) -> int:
    """Tokens of KV cache that fit in ``kv_budget_bytes`` (floor).

    Raises:
        ValueError: ``kv_bytes_per_token`` <= 0 or ``kv_budget_bytes`` < 0.
    """
    if kv_bytes_per_token <= 0 or kv_budget_bytes < 0:
        raise ValueError(
            f"need kv_bytes_per_token > 0 and kv_budget_bytes >= 0, got {kv_bytes_per_token}, "
            f"{kv_budget_bytes}"
        )
    return kv_budget_bytes // kv_bytes_per_token


def kv_capacity_blocks(
    kv_budget_bytes: int, kv_bytes_per_token: int, block_size_tokens: int
) -> int:
    """Whole KV-cache blocks of ``block_size_tokens`` tokens that fit in ``kv_budget_bytes``.

    The value for vLLM's / the mocker's ``--num-gpu-blocks-override``; block size 16 for vLLM
    (`VLLM_BLOCK_SIZE_TOKENS`), 64 for the mocker (`MOCKER_BLOCK_SIZE_TOKENS`).

    Raises:
        ValueError: ``block_size_tokens`` <= 0, or the inputs `kv_capacity_tokens` rejects.
    """
    if block_size_tokens <= 0:
        raise ValueError(f"block_size_tokens must be > 0, got {block_size_tokens}")
    return kv_capacity_tokens(kv_budget_bytes, kv_bytes_per_token * block_size_tokens)


class GpuWorker(BaseModel):
    """A vLLM worker placed on a GPU.

    Attributes:
        name: the worker's name (e.g. ``prefill-0``).
        gpu_memory_utilization: its ``--gpu-memory-utilization``, in (0, 1].
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    name: str
    gpu_memory_utilization: float = Field(gt=0, le=1)


def check_gpu_fit(
    node_class: str,
    gpu_memory_gib: float,
    workers: Sequence[GpuWorker],
    weight_bytes: int,
    activation_overhead_bytes: int = DEFAULT_ACTIVATION_OVERHEAD_BYTES,
) -> list[SizingFinding]:
    """Check that the workers sharing one GPU (by time-slicing) fit in its memory.

    Each worker takes utilization x GPU memory = its weights + activation overhead + KV-cache
    budget, so two rules apply: the shares must not sum above the GPU's memory (vLLM refuses
    to start when less memory is free than it asks for), and each share must hold the weights
    and activation overhead with room left for KV cache.

    Args:
        node_class: the GPU's node class, used in messages.
        gpu_memory_gib: the GPU's memory (GiB).
        workers: the workers on this GPU.
        weight_bytes: one worker's model weights (bytes), `ModelGeometry.weight_bytes`.
        activation_overhead_bytes: per-worker overhead (bytes).

    Returns:
        The findings (all ``error``), empty when everything fits.

    Raises:
        ValueError: ``gpu_memory_gib`` <= 0.
    """
    if gpu_memory_gib <= 0:
        raise ValueError(f"gpu_memory_gib must be > 0, got {gpu_memory_gib}")
    gpu_bytes = math.floor(gpu_memory_gib * GI)
    gpu_text = f"{gpu_memory_gib:g} GiB = {gpu_bytes:,} B"
    findings: list[SizingFinding] = []
    total_share = sum(Fraction(repr(w.gpu_memory_utilization)) for w in workers)
    if total_share > 1:
        names = [w.name for w in workers]
        requested = math.floor(gpu_bytes * total_share)
        formula = (
            " + ".join(f"{w.gpu_memory_utilization:g}" for w in workers)
            + f" = {float(total_share):g} x {gpu_bytes:,} B = {requested:,} B"
        )
        findings.append(
            SizingFinding(
                check="gpu-memory",
                subject=node_class,
                workers=names,
                configured_bytes=gpu_bytes,
                required_bytes=requested,
                formula=formula,
                severity="error",
                message=(
                    f"the GPU of node class '{node_class}' ({gpu_text}) is overcommitted: its "
                    f"workers {', '.join(names)} ask for gpuMemoryUtilization {formula}. Lower "
                    "their gpuMemoryUtilization so it sums to 1 or less, or place fewer workers "
                    "on this node class."
                ),
            )
        )
    required = weight_bytes + activation_overhead_bytes
    for worker in workers:
        if kv_cache_budget_bytes(
            gpu_bytes, worker.gpu_memory_utilization, weight_bytes, activation_overhead_bytes
        ):
            continue
        share = math.floor(gpu_bytes * worker.gpu_memory_utilization)
        formula = (
            f"weights {weight_bytes:,} B + activation overhead {activation_overhead_bytes:,} B "
            f"= {required:,} B >= {worker.gpu_memory_utilization:g} x {gpu_bytes:,} B "
            f"= {share:,} B"
        )
        minimum = math.ceil(required / gpu_bytes * 100) / 100
        findings.append(
            SizingFinding(
                check="gpu-memory",
                subject=node_class,
                workers=[worker.name],
                configured_bytes=share,
                required_bytes=required,
                formula=formula,
                severity="error",
                message=(
                    f"worker '{worker.name}' on node class '{node_class}' (GPU {gpu_text}) "
                    f"leaves no memory for KV cache: {formula}. Raise its gpuMemoryUtilization "
                    f"above {minimum:g} or use a GPU with more memory."
                ),
            )
        )
    return findings


class DisaggregationVerdict(BaseModel):
    """Whether disaggregated prefill/decode pays on a link (the seed's section 5).

    cost ~= one request's KV bytes / link throughput; gain ~= the prefill time a long prompt
    would otherwise block decode for ~= prompt tokens / prefill throughput. It pays when the
    cost is below the gain.

    Attributes:
        link: the link profile name.
        link_bytes_per_s: its throughput (decimal bytes/s).
        link_source: where that number comes from.
        transfer_seconds: estimated KV transfer time per request (s).
        prefill_tokens_per_s: prefill throughput (prompt tokens/s), from the step-time model
            (:mod:`steptime`) the simulation uses too, or the stack's ``prefillTokensPerS``.
        prefill_source: where that number comes from (GPU, model, fit).
        prefill_seconds: estimated prefill time per request (s).
        disaggregation_pays: transfer_seconds < prefill_seconds.
        summary: one sentence with both numbers and the verdict.
    """

    model_config = ConfigDict(frozen=True)

    link: str
    link_bytes_per_s: float
    link_source: str
    transfer_seconds: float
    prefill_tokens_per_s: float
    prefill_source: str
    prefill_seconds: float
    disaggregation_pays: bool
    summary: str


def disaggregation_verdict(
    kv_bytes_per_request: int,
    prompt_tokens: int,
    link: LinkProfile,
    prefill_tokens_per_s: float,
    prefill_source: str,
) -> DisaggregationVerdict:
    """Compare the KV transfer cost on ``link`` with the prefill time it could save.

    Args:
        kv_bytes_per_request: one request's KV cache (bytes).
        prompt_tokens: prompt tokens per request.
        link: the KV path, see `components.links.resolve_link`.
        prefill_tokens_per_s: prefill throughput (tokens/s), e.g.
            :meth:`steptime.roofline.EngineStep.prefill_tokens_per_s`.
        prefill_source: where it comes from (shown in the summary).

    Raises:
        ValueError: ``prefill_tokens_per_s`` <= 0, ``prompt_tokens`` < 0, or a negative
            ``kv_bytes_per_request``.
    """
    if prefill_tokens_per_s <= 0 or prompt_tokens < 0:
        raise ValueError(
            "need prefill_tokens_per_s > 0 and prompt_tokens >= 0, got "
            f"{prefill_tokens_per_s}, {prompt_tokens}"
        )
    cost = transfer_seconds(kv_bytes_per_request, link.bytes_per_s)
    gain = prompt_tokens / prefill_tokens_per_s
    pays = cost < gain
    summary = (
        f"on {link.name} ({link.bytes_per_s / 1e9:g} GB/s) moving {kv_bytes_per_request / 1e6:,.1f}"
        f" MB of KV takes {cost * 1000:,.0f} ms vs {gain * 1000:,.0f} ms of prefill "
        f"({prompt_tokens:,} tokens at {prefill_tokens_per_s:,.0f} tokens/s, {prefill_source}): "
        + (
            "disaggregation can pay."
            if pays
            else "disaggregation does not pay; the transfer costs more than the prefill."
        )
    )
    return DisaggregationVerdict(
        link=link.name,
        link_bytes_per_s=link.bytes_per_s,
        link_source=link.source,
        transfer_seconds=cost,
        prefill_tokens_per_s=prefill_tokens_per_s,
        prefill_source=prefill_source,
        prefill_seconds=gain,
        disaggregation_pays=pays,
        summary=summary,
    )


class ComponentMemory(BaseModel):
    """A component's memory settings, the input of the memory-floor check.

    Attributes:
        name: the component name (e.g. ``prefill``).
        memory_limit: its memory limit (Kubernetes quantity or bytes).
        host_buffers_kv: True when its KV transfer uses ``kv_buffer_device: cpu``.
        base_memory: the limit it needs without host-buffered KV and /dev/shm; default
            `DEFAULT_BASE_MEMORY`.
        shared_memory_size: its memory-backed /dev/shm; default `DEFAULT_SHARED_MEMORY`.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    name: str
    memory_limit: str | int
    host_buffers_kv: bool
    base_memory: str | int = DEFAULT_BASE_MEMORY
    shared_memory_size: str | int = DEFAULT_SHARED_MEMORY


class GpuAllocation(BaseModel):
    """One GPU and the workers sharing it.

    Attributes:
        node_class: the node class the GPU belongs to.
        gpu_memory_gib: its memory (GiB).
        workers: the workers placed on it.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    node_class: str
    gpu_memory_gib: float = Field(gt=0)
    workers: list[GpuWorker]


class ComponentMemoryReport(BaseModel):
    """A component's memory limit against its floor (base memory + /dev/shm, plus the
    host-buffered KV of every in-flight request when ``host_buffers_kv``)."""

    name: str
    host_buffers_kv: bool
    shared_memory_bytes: int
    memory_limit_bytes: int
    memory_floor_bytes: int
    memory_floor_mib: int
    memory_floor_quantity: str
    fits: bool


class WorkerKvReport(BaseModel):
    """A GPU worker's KV-cache budget and capacity."""

    name: str
    node_class: str
    gpu_memory_utilization: float
    kv_cache_budget_bytes: int
    kv_capacity_tokens: int
    kv_capacity_blocks: int
    block_size_tokens: int


class SizingReport(BaseModel):
    """Everything sizing computes for a stack: the ``sizing`` stack output and what
    ``testbed render`` prints. Units are in the key names (bytes, MB = 1e6 bytes, seconds).
    """

    model: str
    kv_bytes_per_token: int
    weight_bytes: int
    prompt_tokens: int
    kv_bytes_per_request: int
    kv_mb_per_request: float
    concurrency: int
    memory_margin: float
    disaggregation: DisaggregationVerdict
    components: list[ComponentMemoryReport]
    workers: list[WorkerKvReport]
    findings: list[SizingFinding]

    @property
    def errors(self) -> list[SizingFinding]:
        """The findings that must stop a deployment."""
        return [f for f in self.findings if f.severity == "error"]


def build_sizing_report(
    *,
    model: str,
    geometry: ModelGeometry,
    prompt_tokens: int,
    concurrency: int,
    link: str | float,
    prefill_tokens_per_s: float,
    prefill_source: str,
    components: Sequence[ComponentMemory] = (),
    gpus: Sequence[GpuAllocation] = (),
    kv_workers: Sequence[GpuAllocation] | None = None,
    margin: float = DEFAULT_MEMORY_MARGIN,
    block_size_tokens: int = VLLM_BLOCK_SIZE_TOKENS,
    activation_overhead_bytes: int = DEFAULT_ACTIVATION_OVERHEAD_BYTES,
    allow_unsafe_memory: bool = False,
) -> SizingReport:
    """Run every sizing rule for a stack and collect numbers and findings.

    Args:
        model: the model name (for the report).
        geometry: its geometry.
        prompt_tokens: prompt tokens per request (the load's average).
        concurrency: the stack's highest load concurrency.
        link: the KV path between prefill and decode: a profile name or GB/s.
        components: the components' memory settings.
        gpus: the GPUs and the workers placed on each (the GPU memory fit checks).
        kv_workers: the workers whose KV-cache budget is reported in ``workers``, each with
            its GPU (a stack reports one per worker group); default: every worker of ``gpus``.
        prefill_tokens_per_s: prefill throughput for the disaggregation verdict (tokens/s).
        prefill_source: where it comes from (see `disaggregation_verdict`).
        margin: the memory-floor margin.
        block_size_tokens: KV block size for the capacity in blocks.
        activation_overhead_bytes: per-worker GPU overhead outside weights and KV.
        allow_unsafe_memory: turn memory-floor errors into warnings.

    Raises:
        ValueError: an invalid input (quantity, link, negative count).
    """
    request_kv = kv_bytes_per_request(geometry, prompt_tokens)
    findings: list[SizingFinding] = []
    component_reports = []
    for component in components:
        limit = parse_quantity(component.memory_limit)
        in_flight = concurrency if component.host_buffers_kv else 0
        floor = memory_floor_bytes(
            parse_quantity(component.base_memory),
            in_flight,
            request_kv,
            margin,
            parse_quantity(component.shared_memory_size),
        )
        finding = check_memory_floor(
            component.name,
            component.memory_limit,
            concurrency=concurrency,
            kv_bytes_per_request=request_kv,
            base_memory=component.base_memory,
            shared_memory=component.shared_memory_size,
            margin=margin,
            allow_unsafe_memory=allow_unsafe_memory,
            host_buffers_kv=component.host_buffers_kv,
        )
        if finding is not None:
            findings.append(finding)
        component_reports.append(
            ComponentMemoryReport(
                name=component.name,
                host_buffers_kv=component.host_buffers_kv,
                shared_memory_bytes=parse_quantity(component.shared_memory_size),
                memory_limit_bytes=limit,
                memory_floor_bytes=floor,
                memory_floor_mib=ceil_mib(floor) // MI,
                memory_floor_quantity=format_quantity(ceil_mib(floor)),
                fits=limit >= floor,
            )
        )
    for gpu in gpus:
        findings += check_gpu_fit(
            gpu.node_class,
            gpu.gpu_memory_gib,
            gpu.workers,
            geometry.weight_bytes,
            activation_overhead_bytes,
        )
    worker_reports = []
    for gpu in gpus if kv_workers is None else kv_workers:
        gpu_bytes = math.floor(gpu.gpu_memory_gib * GI)
        for worker in gpu.workers:
            budget = kv_cache_budget_bytes(
                gpu_bytes,
                worker.gpu_memory_utilization,
                geometry.weight_bytes,
                activation_overhead_bytes,
            )
            worker_reports.append(
                WorkerKvReport(
                    name=worker.name,
                    node_class=gpu.node_class,
                    gpu_memory_utilization=worker.gpu_memory_utilization,
                    kv_cache_budget_bytes=budget,
                    kv_capacity_tokens=kv_capacity_tokens(budget, geometry.kv_bytes_per_token),
                    kv_capacity_blocks=kv_capacity_blocks(
                        budget, geometry.kv_bytes_per_token, block_size_tokens
                    ),
                    block_size_tokens=block_size_tokens,
                )
            )
    return SizingReport(
        model=model,
        kv_bytes_per_token=geometry.kv_bytes_per_token,
        weight_bytes=geometry.weight_bytes,
        prompt_tokens=prompt_tokens,
        kv_bytes_per_request=request_kv,
        kv_mb_per_request=request_kv / 1e6,
        concurrency=concurrency,
        memory_margin=margin,
        disaggregation=disaggregation_verdict(
            request_kv,
            prompt_tokens,
            resolve_link(link),
            prefill_tokens_per_s,
            prefill_source,
        ),
        components=component_reports,
        workers=worker_reports,
        findings=findings,
    )
