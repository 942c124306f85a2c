"""The roofline bounds of a candidate, before any simulation: what no load can beat (the
screen of :mod:`recommend.search`).

All come from the same figures the timing model steps with (:func:`simulator.hardware.
run_topology`: each worker's :class:`steptime.roofline.EngineStep`, the link profiles, vLLM's
host-copy rates) at the workload's best case: a request whose shared prefix is cached (its
prefill computes only the rest; a decode worker holding the prefix pulls only the rest), so each
bound holds for every request of the run:

- **a TTFT floor**: the frontend's fixed cost (where a Dynamo frontend serves), one engine step's
  host time, the prefill of the uncached tokens, and when disaggregated the KV path: the device
  -> host copy of every block of the prompt (host buffers; the resident-page rate, the faster),
  the transfer of the uncached blocks at one transfer's link rate, the host -> device copy, and
  the decode worker's first step;
- **an inter-token floor**: one decode step of one request (host time + weights + its KV);
- **a request-rate ceiling**: each GPU's prefill capacity (a GPU computes one request's uncached
  tokens at the least GPU time per prompt token any engine step takes, :func:`least_s_per_token`:
  steps batch several prompts, up to the engine's token budget, and a step's fixed part, the
  weight read, is paid once for all of them; workers sharing a GPU by time-slicing share it),
  each host-buffering
  worker's synchronous copies (a prefill worker's engine stalls for each request's device ->
  host copy, a decode worker's for the host -> device one), and the link (each prefill/decode
  pair's connection, each node pair's wire).

The crossover (:func:`stackmodel.crossover.crossover`) says why a disaggregated candidate's KV
path costs what it does; its sentence goes with the reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvpath.copies import d2h_seconds, h2d_seconds
from simulator.hardware import run_topology, stack_constants
from simulator.timing_model import WorkerSpec
from stackmodel.plan import StackPlan
from steptime.measured import token_bucket
from steptime.roofline import EngineStep
from workload.config import LoadConfig


@dataclass(frozen=True)
class Bounds:
    """A candidate's bounds (see the module docstring). Times in ms, rates per second.

    ``prefill_ms``, ``copies_ms``, ``link_ms``: one request's prefill, host copies (both) and
    transfer in the best case (the parts of ``ttft_floor_ms``); ``requests_per_s``: the
    ceiling and ``limit`` the resource that sets it (``prefill``, ``host copies``, ``link``);
    ``cached_tokens``: the best case's prompt tokens found in the prefix cache (its shared
    prefix, whole blocks; 0 when the workload's prompts share none).
    """

    ttft_floor_ms: float
    itl_floor_ms: float
    requests_per_s: float
    limit: str
    prefill_ms: float
    copies_ms: float
    link_ms: float
    cached_tokens: int = 0

    def e2e_floor_ms(self, output_tokens: int) -> float:
        """The floor of a request's end-to-end time: TTFT + the later tokens' steps."""
        return self.ttft_floor_ms + max(output_tokens - 1, 0) * self.itl_floor_ms


def ms_text(ms: float) -> str:
    """A time for a reason line: whole ms, two significant figures below 10 ms (``0.42 ms``,
    never ``0 ms`` for a time that is not 0)."""
    return f"{ms:,.0f} ms" if ms >= 10 or ms == 0 else f"{ms:.2g} ms"


def _uncached(load: LoadConfig, block: int) -> tuple[int, int]:
    """(uncached prompt tokens, tokens a decode worker pulls) of a request whose prefix is
    cached, whole blocks cached."""
    cached = load.prefix_tokens // block * block
    rest = max(load.prompt_tokens - cached, 0)
    return rest, rest


def step_token_counts(budget: int) -> list[int]:
    """The prompt-token counts :func:`least_s_per_token` times a step at, for a token budget
    of ``budget``: each count the measured source times a step at
    (:func:`steptime.measured.token_bucket`: every count to 256, then multiples of 64) up to
    the budget's own."""
    top = token_bucket(budget)
    return [*range(1, min(top, 256) + 1), *range(320, top + 1, 64)]


_LEAST: dict[EngineStep, float] = {}
""":func:`least_s_per_token` by step (the same few steps recur over a search's candidates)."""


def least_s_per_token(step: EngineStep) -> float:
    """The least GPU seconds per prompt token of any engine step of ``step`` that computes only
    prompt tokens, at most its token budget (``max_batched_tokens``): the least over
    :func:`step_token_counts` of ``gpu_s(tokens) / tokens``. A bound for every step: the
    measured source times a step of T tokens as one of its :func:`~steptime.measured.
    token_bucket` (B >= T, so T's time per token is at least B's), and the roofline's step is a
    fixed part (the weight read, the all-reduces' latency) plus a part per token, whose time per
    token falls as T grows (so it is at least that of the next count timed). A step's decoding
    requests only add to its time (``EngineStep.gpu_s``)."""
    least = _LEAST.get(step)
    if least is None:
        assert step.max_batched_tokens is not None  # a group's step always has its budget
        least = _LEAST[step] = min(
            step.gpu_s(t, []) / t for t in step_token_counts(step.max_batched_tokens)
        )
    return least


def _gpu_prefill_rate(workers: list[WorkerSpec], tokens: int) -> float:
    """Requests/s the GPUs of ``workers`` can prefill at ``tokens`` each: each GPU (a
    tensor-parallel worker is named by its first GPU and its step counts them all) once, at
    its least time per prompt token (:func:`least_s_per_token`)."""
    by_gpu: dict[str, WorkerSpec] = {}
    for w in workers:
        by_gpu.setdefault(w.gpu, w)
    return sum(1 / max(least_s_per_token(w.step) * tokens, 1e-12) for w in by_gpu.values())


def bounds(plan: StackPlan, load: LoadConfig) -> Bounds:
    """The bounds of ``plan`` under ``load`` (the module docstring)."""
    topology = run_topology(plan)
    constants = stack_constants(plan)
    block = constants.block_tokens
    uncached, moved_tokens = _uncached(load, block)
    kvb = topology.kv_bytes_per_token
    first = [w for w in topology.workers if w.role in ("aggregated", "prefill")]
    decoders = [w for w in topology.workers if w.role in ("aggregated", "decode")]
    front = constants.request_overhead_s if topology.frontend else 0.0
    step = min((w.step for w in first), key=lambda s: s.prefill_s(uncached))
    prefill_s = step.host_s + step.gpu_s(uncached, [])
    decode = min((w.step for w in decoders), key=lambda s: s.gpu_s(0, [load.prompt_tokens]))
    itl_s = decode.host_s + decode.gpu_s(0, [load.prompt_tokens])
    rates = {"prefill": _gpu_prefill_rate(first, uncached)}
    copies_s = link_s = 0.0
    if plan.disaggregated:
        prompt_bytes = -(-load.prompt_tokens // block) * block * kvb
        moved = moved_tokens * kvb
        hosts = [w for w in topology.workers if w.memory_limit is not None]
        if hosts:
            d2h = d2h_seconds(0, prompt_bytes, topology.copies)
            h2d = h2d_seconds(moved, topology.copies)
            copies_s = d2h + h2d
            n_prefill = sum(w.role == "prefill" for w in hosts)
            n_decode = sum(w.role == "decode" for w in hosts)
            rates["host copies"] = min(
                n_prefill / d2h if n_prefill else math.inf,
                n_decode / h2d if n_decode and h2d > 0 else math.inf,
            )
        prefills = [w for w in topology.workers if w.role == "prefill"]
        decodes = [w for w in topology.workers if w.role == "decode"]
        flows = [topology.flow(p, d) for p in prefills for d in decodes]
        rated = [f for f in flows if f is not None]
        if rated and moved > 0:
            link_s = moved / max(f.profile.bytes_per_s for f in rated)
            pair_rate = sum(
                f.profile.connection_bytes_per_s or f.profile.bytes_per_s for f in rated
            )
            wires = {f.wire: f.profile.wire_bytes_per_s for f in rated if f.wire is not None}
            wire_rate = sum(r or math.inf for r in wires.values()) if wires else math.inf
            rates["link"] = min(pair_rate, wire_rate) / moved
        prefill_s += decode.host_s + decode.gpu_s(0, [load.prompt_tokens])
    limit = min(rates, key=lambda k: rates[k])
    return Bounds(
        ttft_floor_ms=(front + prefill_s + copies_s + link_s) * 1e3,
        itl_floor_ms=itl_s * 1e3,
        requests_per_s=rates[limit],
        limit=limit,
        prefill_ms=step.prefill_s(uncached) * 1e3,
        copies_ms=copies_s * 1e3,
        link_ms=link_s * 1e3,
        cached_tokens=load.prompt_tokens - uncached,
    )
