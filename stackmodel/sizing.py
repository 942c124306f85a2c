"""Sizing: the seed's memory rule, GPU memory fit and KV-transfer cost, as pure rules on numbers.

The seed's two lessons, checked before anything is deployed:

1. A worker that buffers KV in host memory (``kv_buffer_device: cpu``) needs, on top of the
   memory limit it had without that buffer, its whole host mirror: vLLM allocates a host buffer
   the size of its KV cache (:mod:`kvpath.memory`; `check_memory_floor`). The seed's cross-node
   prefill worker kept its part-3 limit of 3,584Mi and was OOMKilled at concurrency 4 and 1.
2. Moving a request's KV cache costs vLLM's device -> host copy, the transfer and the
   host -> device copy (:mod:`kvpath`); disaggregation only pays when that is smaller than the
   prefill time it takes off the decode GPU (`disaggregation_verdict`).

A stack's plan (:mod:`stackmodel.plan`) applies them: which link each prefill
group's KV crosses, which workers can share a GPU, which GPU and step times each worker group
has, and the stack's memory limits, load concurrency and prompt length fed to
:func:`build_sizing_report`; the result is a :class:`StackSizing`.

Memory values are bytes (int), quantities as :mod:`stackmodel.quantities` parses and writes
them. Times are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kvpath.copies import DEFAULT_HOST_COPIES, d2h_seconds, h2d_seconds
from kvpath.memory import host_mirror_bytes, memory_floor_bytes
from kvpath.profile import LinkProfile, LinkSetting, gb_per_s_text, resolve_link
from kvpath.transfers import transfer_seconds
from stackmodel.models import ModelGeometry
from stackmodel.quantities import (
    DEFAULT_ACTIVATION_OVERHEAD_BYTES,
    DEFAULT_BASE_MEMORY,
    DEFAULT_SHARED_MEMORY,
    GI,
    MI,
    VLLM_BLOCK_SIZE_TOKENS,
    ceil_mib,
    format_quantity,
    parse_quantity,
    unitless_hint,
)
from steptime.gpus import GpuSpec
from steptime.tensor_parallel import TensorParallel


def _bytes_text(num_bytes: int) -> str:
    """A byte count readable in both units, e.g. ``3584Mi (3,758,096,384 B)`` (rounded up to
    MiB), or only ``8 B`` below 1Mi (where rounding up would show a different value)."""
    if num_bytes < MI:
        return f"{num_bytes:,} B"
    return f"{format_quantity(ceil_mib(num_bytes))} ({num_bytes:,} B)"


def kv_bytes_per_request(
    geometry: ModelGeometry, prompt_tokens: int, tensor_parallel_size: int = 1
) -> int:
    """KV-cache bytes of one request's prompt as a worker of ``tensor_parallel_size`` GPUs
    sends it: KV bytes per token moved
    (:meth:`~stackmodel.models.ModelGeometry.kv_bytes_moved_per_token`) x prompt tokens.

    The seed's load: 114,688 B/token x 2,371 tokens = 271,925,248 B (~272 MB).

    Raises:
        ValueError: ``prompt_tokens`` < 0.
    """
    if prompt_tokens < 0:
        raise ValueError(f"prompt_tokens must be >= 0, got {prompt_tokens}")
    return geometry.kv_bytes_moved_per_token(tensor_parallel_size) * prompt_tokens


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
    host_mirror_bytes: int,
    base_memory: str | int = DEFAULT_BASE_MEMORY,
    shared_memory: str | int = DEFAULT_SHARED_MEMORY,
    allow_unsafe_memory: bool = False,
    ranks: int = 1,
    base_note: str = "baseMemory as given",
) -> SizingFinding | None:
    """Check a worker's memory limit against its floor, ranks x base + /dev/shm + host mirror
    (:func:`kvpath.memory.memory_floor_bytes`).

    Args:
        component: the worker group's name, used in the message.
        memory_limit: its configured limit (Kubernetes quantity or bytes).
        host_mirror_bytes: its host mirror (its KV cache bytes, whole blocks) when it buffers
            KV in host memory (``kv_buffer_device: cpu``), else 0.
        base_memory: the limit it needs without host mirror and /dev/shm (quantity or bytes).
        shared_memory: its memory-backed /dev/shm size (quantity or bytes).
        allow_unsafe_memory: the stack's explicit override: report a ``warning`` instead of an
            ``error`` (to reproduce the seed's OOMKill on purpose).
        ranks: its GPU processes (``tensorParallelSize``), each counted at ``base_memory``:
            with more than one GPU vLLM's ``MultiprocExecutor`` runs one worker process per
            rank (``vllm/v1/executor/multiproc_executor.py``, ``_init_executor``: one
            ``WorkerProc.make_worker_process`` per rank), each with its own CUDA context,
            PyTorch and vLLM, where a one-GPU worker runs its model in the engine's process;
            taking each at the seed's one-process figure is an assumption, not measured.
        base_note: where ``base_memory`` comes from, for the message without a host mirror
            (:func:`model_base_memory_note` for a worker that leaves ``baseMemory`` unset).

    Returns:
        None when the limit is at or above the floor, else the finding.

    Raises:
        ValueError: an invalid quantity or a negative mirror.
    """
    configured = parse_quantity(memory_limit)
    base = parse_quantity(base_memory)
    shm = parse_quantity(shared_memory)
    required = memory_floor_bytes(base * ranks, shm, host_mirror_bytes)
    per_rank = f"{ranks} GPU processes x " if ranks > 1 else ""
    base_text = f"base {per_rank}{format_quantity(base)} + /dev/shm {format_quantity(shm)}"
    if configured >= required:
        return None
    minimum = format_quantity(ceil_mib(required))
    if host_mirror_bytes:
        formula = (
            f"{base_text} + host mirror {_bytes_text(host_mirror_bytes)} = {_bytes_text(required)}"
        )
        message = (
            f"worker group '{component}' buffers KV in host memory (kv_buffer_device: cpu), so "
            f"vLLM 0.31.0 gives each of its workers a host mirror of its whole KV cache "
            f"({_bytes_text(host_mirror_bytes)}, filled as blocks are used and never returned); "
            f"its memory limit {_bytes_text(configured)} is below the floor {formula}. "
        )
        fix = (
            f"Raise memoryLimit to at least {minimum}, lower gpuMemoryUtilization of "
            f"'{component}' (a smaller KV cache, a smaller mirror), or set "
            "kvTransfer.bufferDevice: cuda with a UCX_TLS that moves GPU memory (e.g. "
            "tcp,self,cuda); or set sizing.allowUnsafeMemory: true to reproduce the seed's "
            "OOMKill."
        )
    else:
        formula = f"{base_text} = {_bytes_text(required)}"
        message = (
            f"worker group '{component}' has memory limit {_bytes_text(configured)}, below its "
            f"floor {formula} (what the worker needs without host-buffered KV; base: "
            f"{base_note}). "
        )
        fix = (
            f"Raise memoryLimit to at least {minimum}, or lower baseMemory or sharedMemorySize "
            "if this engine and model need less, or set sizing.allowUnsafeMemory: true."
        )
    hint = unitless_hint(memory_limit)
    unsafe = allow_unsafe_memory and hint is None
    if hint:
        # A unit left out is a slip, not a limit to reproduce an OOMKill with: refused even
        # with sizing.allowUnsafeMemory, and that key is not offered as the fix.
        message = f"{hint} {message}"
        fix = f"Write the unit: memoryLimit of at least {minimum}."
    if unsafe:
        message += (
            "sizing.allowUnsafeMemory is set, so it is deployed anyway: expect the worker to be "
            "OOMKilled (exit 137) once the blocks it has used fill its limit, as in the seed's "
            "cross-node run."
        )
    else:
        message += fix
    return SizingFinding(
        check="memory-floor",
        subject=component,
        configured_bytes=configured,
        required_bytes=required,
        formula=formula,
        severity="warning" if unsafe else "error",
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
        # What raising its share can reach: 1 less the other workers' shares of this GPU.
        others = total_share - Fraction(repr(worker.gpu_memory_utilization))
        bigger_gpu = (
            f"a GPU of more than "
            f"{math.ceil(required / worker.gpu_memory_utilization / GI * 10) / 10:g} GiB "
            f"(nodeClasses.{node_class}.gpuMemoryGiB) at its {worker.gpu_memory_utilization:g}"
        )
        if minimum <= 1 - others:
            fix = f"Raise its gpuMemoryUtilization to {minimum:g} or more, or use {bigger_gpu}."
        elif minimum <= 1:
            fix = (
                f"It needs a share of {minimum:g} or more, and the other workers on this GPU "
                f"take {float(others):g}: {math.floor(1 / minimum)} worker(s) of this size fit on "
                f"one GPU at most (fewer replicas or workers on it), or use {bigger_gpu}."
            )
        else:
            fix = f"No gpuMemoryUtilization fits (at most 1): use {bigger_gpu}, or a smaller model."
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
                    f"leaves no memory for KV cache: {formula}. {fix}"
                ),
            )
        )
    return findings


class DisaggregationVerdict(BaseModel):
    """Whether disaggregated prefill/decode pays on a link (the seed's section 5), for the
    stack's load.

    cost ~= one request's KV path alone: with host buffers vLLM's device -> host copy of every
    block of its prompt (pages resident) + the transfer of the blocks the decode worker lacks at
    the link's one-transfer rate + their host -> device copy (:mod:`kvpath`); without, the
    transfer alone. gain ~= the prefill time a long prompt would otherwise block decode for ~=
    the prompt tokens not in the prefix cache / prefill throughput. The decode worker lacks the
    same uncached tokens (a KV-aware router sends a prefix to the workers that hold it). It
    pays when the cost is below the gain and the link carries the KV the busy prefill workers
    produce (``needed_bytes_per_s``: up to ``min(prefill workers, concurrency)`` transfers at
    once, each prefill worker producing the uncached tokens' KV at its prefill rate) with
    several transfers in flight (:func:`link_capacity`: a connection per busy prefill worker's
    pair, at most the node pair's wire): above it transfers queue, and every request waits for
    the link.

    Attributes:
        link: the link profile name.
        link_bytes_per_s: its one-transfer rate (decimal bytes/s).
        link_source: where that number comes from.
        transfer_seconds: estimated KV transfer time per request (s).
        copy_seconds: vLLM's two host copies per request (s; 0 without host buffers).
        copy_source: where the copy rates come from (None without host buffers).
        prefill_tokens_per_s: prefill throughput (prompt tokens/s), from the step-time model
            (:mod:`steptime`) the simulation uses too, or the stack's ``prefillTokensPerS``.
        prefill_source: where that number comes from (GPU, model, fit).
        prefill_seconds: estimated prefill time per request (s), of its uncached tokens.
        cached_tokens: prompt tokens the prefix cache is expected to hold (no prefill, no
            transfer).
        concurrent_transfers: transfers at once when the prefill workers are busy.
        needed_bytes_per_s: the KV the busy prefill workers produce (decimal bytes/s).
        link_capacity_bytes_per_s: what the link carries for the busy prefill workers with
            several transfers in flight (:func:`link_capacity`).
        disaggregation_pays: transfer_seconds + copy_seconds < prefill_seconds and the link
            carries ``needed_bytes_per_s``.
        summary: one sentence with the numbers and the verdict.
    """

    model_config = ConfigDict(frozen=True)

    link: str
    link_bytes_per_s: float
    link_source: str
    transfer_seconds: float
    copy_seconds: float
    copy_source: str | None
    prefill_tokens_per_s: float
    prefill_source: str
    prefill_seconds: float
    cached_tokens: int = 0
    concurrent_transfers: int = 1
    needed_bytes_per_s: float = 0.0
    link_capacity_bytes_per_s: float = 0.0
    disaggregation_pays: bool
    summary: str


def link_capacity(link: LinkProfile, pairs: int = 1) -> float:
    """What ``pairs`` prefill/decode pairs, each with several transfers in flight, carry in all
    on ``link`` (decimal bytes/s), as :func:`kvpath.transfers.transfer_rates` shares it: a
    connection per pair (``connection_rate``), all of them together at most the node pair's
    wire where the link has one."""
    carried = pairs * link.connection_rate
    return min(carried, link.wire_bytes_per_s) if link.wire_bytes_per_s else carried


def capacity_text(link: LinkProfile, pairs: int) -> str:
    """What carries :func:`link_capacity` on ``link`` for ``pairs`` pairs, with that figure:
    ``the node pair's wire carries (2.88 GB/s)``, ``their 2 connections carry (2.4 GB/s: 1.2
    GB/s a prefill/decode pair with several transfers in flight)``."""
    capacity = link_capacity(link, pairs)
    each = gb_per_s_text(link.connection_rate)
    if link.wire_bytes_per_s and capacity == link.wire_bytes_per_s:
        return f"the node pair's wire carries ({gb_per_s_text(capacity)})"
    if pairs == 1:
        return f"its connection carries ({each} with several transfers in flight)"
    return (
        f"their {pairs} connections carry ({gb_per_s_text(capacity)}: {each} a prefill/decode "
        "pair with several transfers in flight)"
    )


def disaggregation_verdict(
    kv_bytes_per_request: int,
    prompt_tokens: int,
    link: LinkProfile,
    prefill_tokens_per_s: float,
    prefill_source: str,
    *,
    host_buffered: bool = False,
    cached_tokens: int = 0,
    concurrent_transfers: int = 1,
) -> DisaggregationVerdict:
    """Compare one request's KV path on ``link`` with the prefill time it could save.

    Args:
        kv_bytes_per_request: one request's KV cache (bytes).
        prompt_tokens: prompt tokens per request.
        link: the KV path, see :func:`kvpath.profile.resolve_link`.
        prefill_tokens_per_s: prefill throughput (tokens/s), e.g.
            :meth:`steptime.roofline.EngineStep.prefill_tokens_per_s`.
        prefill_source: where it comes from (shown in the summary).
        host_buffered: the workers use ``kv_buffer_device: cpu``: add vLLM's two copies at the
            link profile's copy rates, else the default ones
            (:data:`kvpath.copies.DEFAULT_HOST_COPIES`).
        cached_tokens: prompt tokens the prefix cache holds (0..``prompt_tokens``).
        concurrent_transfers: transfers at once when the prefill workers are busy:
            ``min(prefill workers, concurrency)``.

    Raises:
        ValueError: ``prefill_tokens_per_s`` <= 0, ``prompt_tokens`` < 0, ``cached_tokens``
            outside 0..``prompt_tokens``, ``concurrent_transfers`` < 1, or a negative
            ``kv_bytes_per_request``.
    """
    if prefill_tokens_per_s <= 0 or prompt_tokens < 0 or concurrent_transfers < 1:
        raise ValueError(
            "need prefill_tokens_per_s > 0, prompt_tokens >= 0 and concurrent_transfers >= 1, "
            f"got {prefill_tokens_per_s}, {prompt_tokens}, {concurrent_transfers}"
        )
    if not 0 <= cached_tokens <= prompt_tokens:
        raise ValueError(f"cached_tokens {cached_tokens} outside 0..{prompt_tokens}")
    uncached = prompt_tokens - cached_tokens
    moved = round(kv_bytes_per_request * uncached / prompt_tokens) if prompt_tokens else 0
    moving = transfer_seconds(moved, link.bytes_per_s)
    copies = link.host_copies or DEFAULT_HOST_COPIES
    copying = (
        d2h_seconds(0, kv_bytes_per_request, copies) + h2d_seconds(moved, copies)
        if host_buffered
        else 0.0
    )
    cost = moving + copying
    gain = uncached / prefill_tokens_per_s
    needed = concurrent_transfers * moved / gain if gain else 0.0
    capacity = link_capacity(link, concurrent_transfers)
    saturated = needed > capacity
    pays = cost < gain and not saturated
    copy_text = f" plus {copying * 1000:,.0f} ms of vLLM's host copies" if host_buffered else ""
    rate = gb_per_s_text(link.bytes_per_s)
    others = {link.connection_rate, link.wire_bytes_per_s or link.bytes_per_s}
    alone = " a transfer alone" if others != {link.bytes_per_s} else ""  # its other rates
    on = f"a {rate} link" if link.name.endswith("GB/s") else f"{link.name} ({rate}{alone})"
    cached_text = (
        f"{uncached:,} of {prompt_tokens:,} prompt tokens outside the prefix cache"
        if cached_tokens
        else f"{prompt_tokens:,} tokens"
    )
    queue = (
        f"{concurrent_transfers} busy prefill "
        + ("worker produces" if concurrent_transfers == 1 else "workers produce")
        + f" {gb_per_s_text(needed)} of KV, more than {capacity_text(link, concurrent_transfers)}"
        + ", so transfers queue"
    )
    if pays:
        why = (
            "disaggregation can pay (the KV path costs less than the prefill it takes off "
            "the decode GPU; whether TTFT and throughput improve is what testbed simulate "
            "estimates)."
        )
    elif cost >= gain:
        why = "disaggregation does not pay; the KV path costs more than the prefill" + (
            f", and {queue}." if saturated else "."
        )
    else:
        why = f"disaggregation does not pay at this load: {queue}."
    summary = (
        f"on {on} moving {moved / 1e6:,.1f}"
        f" MB of KV takes {moving * 1000:,.0f} ms{copy_text} vs {gain * 1000:,.0f} ms of prefill "
        f"({cached_text} at {prefill_tokens_per_s:,.0f} tokens/s, {prefill_source}): {why}"
    )
    return DisaggregationVerdict(
        link=link.name,
        link_bytes_per_s=link.bytes_per_s,
        link_source=link.source,
        transfer_seconds=moving,
        copy_seconds=copying,
        copy_source=copies.source if host_buffered else None,
        prefill_tokens_per_s=prefill_tokens_per_s,
        prefill_source=prefill_source,
        prefill_seconds=gain,
        cached_tokens=cached_tokens,
        concurrent_transfers=concurrent_transfers,
        needed_bytes_per_s=needed,
        link_capacity_bytes_per_s=capacity,
        disaggregation_pays=pays,
        summary=summary,
    )


class ComponentMemory(BaseModel):
    """A component's memory settings, the input of the memory-floor check.

    Attributes:
        name: the component name (e.g. ``prefill``).
        memory_limit: its memory limit (Kubernetes quantity or bytes).
        host_buffers_kv: True when its KV transfer uses ``kv_buffer_device: cpu``: it then
            needs its host mirror, the KV cache of the worker row of the same name.
        base_memory: the limit it needs without host mirror and /dev/shm; default
            `DEFAULT_BASE_MEMORY`.
        shared_memory_size: its memory-backed /dev/shm; default `DEFAULT_SHARED_MEMORY`.
        tensor_parallel_size: its GPUs; each GPU's process has a host mirror of its own KV
            cache (vLLM's NixlConnectorWorker runs in every rank), so the pod holds that many.
        base_note: where ``base_memory`` comes from, in words (`check_memory_floor`'s).
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    name: str
    memory_limit: str | int
    host_buffers_kv: bool
    base_memory: str | int = DEFAULT_BASE_MEMORY
    shared_memory_size: str | int = DEFAULT_SHARED_MEMORY
    tensor_parallel_size: int = Field(default=1, ge=1)
    base_note: str = "baseMemory as given"


class GpuAllocation(BaseModel):
    """One GPU and the workers sharing it.

    Attributes:
        node_class: the node class the GPU belongs to.
        gpu_memory_gib: its memory (GiB).
        workers: the workers placed on it.
        tensor_parallel_size: GPUs of each of those workers (> 1: one worker, alone on each
            of its GPUs, each holding 1/tp of the weights and its share of the KV heads).
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    node_class: str
    gpu_memory_gib: float = Field(gt=0)
    workers: list[GpuWorker]
    tensor_parallel_size: int = Field(default=1, ge=1)


class ComponentMemoryReport(BaseModel):
    """A component's memory limit against its floor (base memory + /dev/shm, plus its host
    mirror when ``host_buffers_kv``)."""

    name: str
    host_buffers_kv: bool
    host_mirror_bytes: int
    shared_memory_bytes: int
    memory_limit_bytes: int
    memory_floor_bytes: int
    memory_floor_mib: int
    memory_floor_quantity: str
    fits: bool


class WorkerKvReport(BaseModel):
    """A GPU worker's KV-cache budget (per GPU: vLLM's ``--kv-cache-memory-bytes`` is "Size
    of KV Cache per GPU") and capacity (tokens the worker holds, on all its GPUs at once)."""

    name: str
    node_class: str
    gpu_memory_utilization: float
    kv_cache_budget_bytes: int
    kv_capacity_tokens: int
    kv_capacity_blocks: int
    block_size_tokens: int
    tensor_parallel_size: int = 1
    kv_bytes_per_token_per_gpu: int


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
    link: LinkSetting,
    prefill_tokens_per_s: float,
    prefill_source: str,
    components: Sequence[ComponentMemory] = (),
    gpus: Sequence[GpuAllocation] = (),
    kv_workers: Sequence[GpuAllocation] | None = None,
    block_size_tokens: int = VLLM_BLOCK_SIZE_TOKENS,
    activation_overhead_bytes: int = DEFAULT_ACTIVATION_OVERHEAD_BYTES,
    allow_unsafe_memory: bool = False,
    transfer_tensor_parallel_size: int = 1,
    cached_tokens: int = 0,
    concurrent_transfers: int = 1,
) -> SizingReport:
    """Run every sizing rule for a stack and collect numbers and findings.

    Args:
        model: the model name (for the report).
        geometry: its geometry.
        prompt_tokens: prompt tokens per request (the load's average).
        concurrency: the stack's highest load concurrency.
        link: the KV path between prefill and decode (:func:`kvpath.profile.resolve_link`).
        components: the components' memory settings.
        gpus: the GPUs and the workers placed on each (the GPU memory fit checks).
        kv_workers: the workers whose KV-cache budget is reported in ``workers``, each with
            its GPU (a stack reports one per worker group); default: every worker of ``gpus``.
            A host-buffering component's mirror is the KV cache of the row of its name.
        prefill_tokens_per_s: prefill throughput for the disaggregation verdict (tokens/s).
        prefill_source: where it comes from (see `disaggregation_verdict`).
        block_size_tokens: KV block size for the capacity in blocks and the mirror.
        activation_overhead_bytes: per-worker GPU overhead outside weights and KV.
        allow_unsafe_memory: turn memory-floor errors into warnings.
        transfer_tensor_parallel_size: the GPUs of the prefill worker whose KV the verdict
            moves (:meth:`~stackmodel.models.ModelGeometry.kv_bytes_moved_per_token`).
        cached_tokens, concurrent_transfers: the load's prefix-cache hits and transfers at
            once (:func:`disaggregation_verdict`).

    Raises:
        ValueError: an invalid input (quantity, link, negative count), or a host-buffering
            component without a KV-cache row of its name.
    """
    request_kv = kv_bytes_per_request(geometry, prompt_tokens, transfer_tensor_parallel_size)
    gpu_findings: list[SizingFinding] = []
    for gpu in gpus:
        gpu_findings += check_gpu_fit(
            gpu.node_class,
            gpu.gpu_memory_gib,
            gpu.workers,
            geometry.per_gpu(gpu.tensor_parallel_size).weight_bytes,
            activation_overhead_bytes,
        )
    worker_reports = []
    for gpu in gpus if kv_workers is None else kv_workers:
        gpu_bytes = math.floor(gpu.gpu_memory_gib * GI)
        shard = geometry.per_gpu(gpu.tensor_parallel_size)
        for worker in gpu.workers:
            budget = kv_cache_budget_bytes(
                gpu_bytes,
                worker.gpu_memory_utilization,
                shard.weight_bytes,
                activation_overhead_bytes,
            )
            worker_reports.append(
                WorkerKvReport(
                    name=worker.name,
                    node_class=gpu.node_class,
                    gpu_memory_utilization=worker.gpu_memory_utilization,
                    kv_cache_budget_bytes=budget,
                    kv_capacity_tokens=kv_capacity_tokens(budget, shard.kv_bytes_per_token),
                    kv_capacity_blocks=kv_capacity_blocks(
                        budget, shard.kv_bytes_per_token, block_size_tokens
                    ),
                    block_size_tokens=block_size_tokens,
                    tensor_parallel_size=gpu.tensor_parallel_size,
                    kv_bytes_per_token_per_gpu=shard.kv_bytes_per_token,
                )
            )
    rows = {w.name: w for w in worker_reports}
    findings: list[SizingFinding] = []
    component_reports = []
    for component in components:
        mirror = 0
        if component.host_buffers_kv:
            if component.name not in rows:
                raise ValueError(
                    f"component {component.name!r} buffers KV in host memory but has no "
                    "KV-cache row (kv_workers) of its name to size its host mirror"
                )
            row = rows[component.name]
            mirror = component.tensor_parallel_size * host_mirror_bytes(
                row.kv_cache_budget_bytes, row.kv_bytes_per_token_per_gpu, block_size_tokens
            )
        limit = parse_quantity(component.memory_limit)
        shm = parse_quantity(component.shared_memory_size)
        ranks = component.tensor_parallel_size
        floor = memory_floor_bytes(parse_quantity(component.base_memory) * ranks, shm, mirror)
        finding = check_memory_floor(
            component.name,
            component.memory_limit,
            host_mirror_bytes=mirror,
            base_memory=component.base_memory,
            shared_memory=component.shared_memory_size,
            allow_unsafe_memory=allow_unsafe_memory,
            ranks=ranks,
            base_note=component.base_note,
        )
        if finding is not None:
            findings.append(finding)
        component_reports.append(
            ComponentMemoryReport(
                name=component.name,
                host_buffers_kv=component.host_buffers_kv,
                host_mirror_bytes=mirror,
                shared_memory_bytes=shm,
                memory_limit_bytes=limit,
                memory_floor_bytes=floor,
                memory_floor_mib=ceil_mib(floor) // MI,
                memory_floor_quantity=format_quantity(ceil_mib(floor)),
                fits=limit >= floor,
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
        disaggregation=disaggregation_verdict(
            request_kv,
            prompt_tokens,
            resolve_link(link),
            prefill_tokens_per_s,
            prefill_source,
            host_buffered=any(c.host_buffers_kv for c in components),
            cached_tokens=cached_tokens,
            concurrent_transfers=concurrent_transfers,
        ),
        components=component_reports,
        workers=worker_reports,
        findings=findings + gpu_findings,
    )


BIG_GPU_GIB, HUGE_GPU_GIB = 70, 160
"""vLLM's thresholds for its larger step-budget defaults, GiB of GPU memory
(:func:`default_max_batched_tokens`)."""

MAX_BATCHED_TOKENS_HUGE, MAX_BATCHED_TOKENS_BIG, MAX_BATCHED_TOKENS_OTHER = 16_384, 8_192, 2_048
"""vLLM's default ``max_num_batched_tokens`` for an API server (``UsageContext.
OPENAI_API_SERVER``) on a GPU of at least :data:`HUGE_GPU_GIB`, on one of at least
:data:`BIG_GPU_GIB` whose device name has no "a100", and on every other GPU (vLLM 0.31.0
``vllm/engine/arg_utils.py``, ``EngineArgs.get_batch_defaults``, L2829-2887)."""

MAX_BATCHED_TOKENS_FLAG = "--max-num-batched-tokens"
"""vLLM's flag of a worker's per-step token budget."""


def _default_tier(gpu: GpuSpec, gpu_memory_gib: float) -> int:
    """Which of vLLM's API-server defaults a GPU gets (``EngineArgs.get_batch_defaults``): 0 from
    :data:`HUGE_GPU_GIB` GiB up, 1 from :data:`BIG_GPU_GIB` GiB up on a GPU whose device name
    (:attr:`steptime.gpus.GpuSpec.device_name`, lowercased as vLLM does; the label where it is
    unknown) has no "a100", 2 otherwise."""
    if gpu_memory_gib >= HUGE_GPU_GIB:
        return 0
    device = gpu.name if gpu.device_name is None else gpu.device_name.lower()
    return 1 if gpu_memory_gib >= BIG_GPU_GIB and "a100" not in device else 2


def default_max_batched_tokens(gpu: GpuSpec, gpu_memory_gib: float) -> int:
    """vLLM's per-step token budget of a worker without ``--max-num-batched-tokens``: its default
    for an API server, the context Dynamo's vLLM worker builds its engine in
    (``UsageContext.OPENAI_API_SERVER``, ai-dynamo 1.6.1 ``dynamo/vllm/main.py`` line 686;
    ``vllm serve`` uses the same), by the GPU's memory (``gpu_memory_gib``, the node class's
    ``gpuMemoryGiB``, :func:`_default_tier`): :data:`MAX_BATCHED_TOKENS_HUGE`,
    :data:`MAX_BATCHED_TOKENS_BIG` or :data:`MAX_BATCHED_TOKENS_OTHER`."""
    tiers = (MAX_BATCHED_TOKENS_HUGE, MAX_BATCHED_TOKENS_BIG, MAX_BATCHED_TOKENS_OTHER)
    return tiers[_default_tier(gpu, gpu_memory_gib)]


MAX_NUM_SEQS_BIG, MAX_NUM_SEQS_OTHER = 1_024, 256
"""vLLM's default ``max_num_seqs`` for an API server on a GPU of :func:`_default_tier` 0 or 1
(1,024) and on every other GPU (256) (vLLM 0.31.0 ``vllm/engine/arg_utils.py``,
``EngineArgs.get_batch_defaults``, L2864-2887)."""

MAX_NUM_SEQS_FLAG = "--max-num-seqs"
"""vLLM's flag of the most requests one worker schedules at once."""

TOKEN_TABLE_BYTES_PER_SLOT = 5
"""Host bytes per (request slot x token of ``max_model_len``) of a vLLM worker's input batch:
``InputBatch`` allocates ``token_ids_cpu_tensor`` (int32, 4 B) and ``is_token_ids_tensor``
(bool, 1 B), each of shape ``(max_num_reqs, max_model_len)``, with ``torch.zeros`` (which
writes them, so every page is resident) when the model runner starts (vLLM 0.31.0
``vllm/v1/worker/gpu_input_batch.py``, lines 132-145)."""

SEED_MAX_NUM_SEQS, SEED_MAX_MODEL_LEN = MAX_NUM_SEQS_OTHER, 8_192
"""The seed's workers, where :data:`~stackmodel.quantities.DEFAULT_BASE_MEMORY` was found: vLLM's
default ``max_num_seqs`` on its 24 GB and 8 GB GPUs and its ``--max-model-len 8192``."""


def default_max_num_seqs(gpu: GpuSpec, gpu_memory_gib: float) -> int:
    """vLLM's ``max_num_seqs`` of an API-server worker without ``--max-num-seqs``
    (:data:`MAX_NUM_SEQS_BIG` or :data:`MAX_NUM_SEQS_OTHER`, by :func:`_default_tier`)."""
    return MAX_NUM_SEQS_OTHER if _default_tier(gpu, gpu_memory_gib) == 2 else MAX_NUM_SEQS_BIG


def token_table_bytes(max_num_seqs: int, max_model_len: int) -> int:
    """Host bytes of a vLLM worker's token tables (:data:`TOKEN_TABLE_BYTES_PER_SLOT` per
    request slot and token): 10 MiB for the seed's 256 x 8,192, 640 MiB for 1,024 x 131,072."""
    return TOKEN_TABLE_BYTES_PER_SLOT * max_num_seqs * max_model_len


def model_base_memory(max_num_seqs: int, max_model_len: int | None) -> int:
    """A vLLM worker process's base memory (bytes; without host-buffered KV and /dev/shm) for
    ``max_num_seqs`` and ``max_model_len`` (None: unknown, the seed's base as it is): the seed's
    :data:`~stackmodel.quantities.DEFAULT_BASE_MEMORY` with its token tables
    (:func:`token_table_bytes` at :data:`SEED_MAX_NUM_SEQS` x :data:`SEED_MAX_MODEL_LEN`)
    replaced by these.

    The rest of the seed's figure (CUDA context, PyTorch, the Python process, the tokenizer) is
    taken as it is for every model: one figure cannot split it further. The weights are not in
    it: vLLM 0.31.0 reads safetensors through a memory map by default (``LoadConfig.
    safetensors_load_strategy`` None or "lazy", ``vllm/config/load.py`` lines 65-77;
    ``safetensors_weights_iterator``, ``vllm/model_executor/model_loader/weight_utils.py``
    lines 1162-1168: ``safe_open`` and ``get_tensor`` per tensor, copied to the GPU), so the
    file's pages are page cache: cgroup v2 counts them in ``memory.current`` but reclaims them
    before the OOM killer acts. ``--safetensors-load-strategy eager`` reads a whole file into
    process memory (lines 1126-1128) and is not in this floor."""
    base = parse_quantity(DEFAULT_BASE_MEMORY)
    if max_model_len is None:
        return base
    seed_tables = token_table_bytes(SEED_MAX_NUM_SEQS, SEED_MAX_MODEL_LEN)
    return base - seed_tables + token_table_bytes(max_num_seqs, max_model_len)


def model_base_memory_note(max_num_seqs: int, max_model_len: int | None) -> str:
    """:func:`model_base_memory`'s figure in words, with its parts: ``the seed's 3328Mi with its
    token tables (256 request slots x 8,192 tokens x 5 B = 10Mi) replaced by this worker's
    (256 x 40,960 x 5 B = 50Mi)``; the seed's figure alone for an unknown ``max_model_len``."""
    seed = f"the seed's {DEFAULT_BASE_MEMORY}"
    if max_model_len is None:
        return f"{seed} (the max model length is unknown)"
    seed_tables = token_table_bytes(SEED_MAX_NUM_SEQS, SEED_MAX_MODEL_LEN)
    tables = token_table_bytes(max_num_seqs, max_model_len)
    per_slot = TOKEN_TABLE_BYTES_PER_SLOT
    return (
        f"{seed} with its token tables ({SEED_MAX_NUM_SEQS} request slots x "
        f"{SEED_MAX_MODEL_LEN:,} tokens x {per_slot} B = {format_quantity(ceil_mib(seed_tables))}"
        f") replaced by this worker's ({max_num_seqs} x {max_model_len:,} x {per_slot} B = "
        f"{format_quantity(ceil_mib(tables))})"
    )


def tensor_parallel(geometry: ModelGeometry, gpu: GpuSpec, size: int) -> TensorParallel | None:
    """The all-reduces of a worker of ``size`` GPUs (None for one GPU).

    Raises:
        ValueError: ``size`` > 1 and the geometry has no ``hidden_size`` or the GPU no
            interconnect (:func:`stackmodel.checks.tensor_parallel_problems` reports both
            first).
    """
    if size == 1:
        return None
    if geometry.hidden_size is None or gpu.interconnect is None:
        raise ValueError("tensor parallelism needs the model's hiddenSize and the interconnect")
    assert gpu.interconnect_gb_per_s is not None  # GpuSpec gives both or neither
    return TensorParallel(
        size=size,
        num_layers=geometry.num_layers,
        hidden_size=geometry.hidden_size,
        interconnect=gpu.interconnect,
        link_bytes_per_s=gpu.interconnect_gb_per_s * 1e9,
    )


@dataclass(frozen=True)
class StackSizing:
    """A stack's sizing numbers and findings.

    Attributes:
        geometry: the model geometry used.
        report: the full :class:`~stackmodel.sizing.SizingReport`.
        links: prefill group name -> the link its KV crosses.
        kv_tensor_parallel_size: the GPUs of the prefill worker the verdict counts (1 for an
            aggregated stack): its KV moves per token as :attr:`kv_bytes_per_token`.
    """

    geometry: ModelGeometry
    report: SizingReport
    links: dict[str, LinkProfile]
    kv_tensor_parallel_size: int = 1

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token moves between prefill and decode (bytes): the model's KV
        bytes per token, more where tensor parallelism replicates KV heads
        (:meth:`~stackmodel.models.ModelGeometry.kv_bytes_moved_per_token`)."""
        return self.geometry.kv_bytes_moved_per_token(self.kv_tensor_parallel_size)

    def host_mirror_bytes(self, group: str) -> int:
        """The host memory a worker of ``group`` mirrors its KV cache into (bytes, all its
        GPUs; 0 when it does not buffer KV in host memory).

        Raises:
            KeyError: no worker group of that name.
        """
        for c in self.report.components:
            if c.name == group:
                return c.host_mirror_bytes
        raise KeyError(group)

    def link_gb_per_s(self, prefill_group: str) -> float:
        """Throughput of a prefill group's KV link, decimal GB/s (the mocker's unit)."""
        return self.links[prefill_group].bytes_per_s / 1e9

    def worker_kv(self, group: str) -> WorkerKvReport:
        """The KV-cache budget and capacity of one worker of ``group`` (the ``sizing`` output's
        ``workers`` row of that name).

        Raises:
            KeyError: no worker group of that name.
        """
        for w in self.report.workers:
            if w.name == group:
                return w
        raise KeyError(group)

    def kv_cache_bytes(self, group: str) -> int:
        """KV-cache size of one worker of ``group`` (bytes): its GPU share minus weights and
        activation overhead. vLLM gets it as ``--kv-cache-memory-bytes``."""
        return self.worker_kv(group).kv_cache_budget_bytes

    def kv_capacity_tokens(self, group: str) -> int:
        """KV-cache capacity of one worker of ``group`` (tokens): what its GPU share leaves."""
        return self.worker_kv(group).kv_capacity_tokens

    def gpu_blocks(self, group: str, block_size_tokens: int) -> int:
        """The KV capacity of one worker of ``group`` in whole blocks of ``block_size_tokens``
        (at least 1): the mocker's ``--num-gpu-blocks-override``, in the Kubernetes graph and in
        ``testbed simulate`` alike."""
        return max(1, self.kv_capacity_tokens(group) // block_size_tokens)

    def export(self) -> dict[str, Any]:
        """The ``sizing`` stack output: JSON-ready, units in the key names."""
        out: dict[str, Any] = self.report.model_dump(mode="json")
        out["kv_links"] = {
            name: {"link": link.name, "gb_per_s": link.bytes_per_s / 1e9}
            for name, link in self.links.items()
        }
        return out
