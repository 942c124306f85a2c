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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvpath.copies import d2h_seconds, h2d_seconds
from metrics.registry import objectives
from simulator.hardware import run_topology, stack_constants
from simulator.timing_model import WorkerSpec
from stackmodel.plan import StackPlan
from steptime.measured import token_bucket
from steptime.roofline import EngineStep
from workload.config import LoadConfig
from workload.slo import Slo


@dataclass(frozen=True)
class Bounds:
    """A candidate's bounds (see the module docstring). Times in ms, rates per second.

    ``prefill_ms``, ``copies_ms``, ``link_ms``, ``frontend_ms``: one request's prefill, host
    copies (both), transfer and the frontend's fixed cost in the best case (the parts of
    ``ttft_floor_ms``, besides the engine steps' host time); ``requests_per_s``: the
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
    frontend_ms: float = 0.0

    def e2e_floor_ms(self, output_tokens: int) -> float:
        """The floor of a request's end-to-end time: TTFT + the later tokens' steps."""
        return self.ttft_floor_ms + max(output_tokens - 1, 0) * self.itl_floor_ms

    def client_tokens_per_s(self, least_output: int, most_output: int) -> float:
        """The most output tokens/s one client of a closed loop gets, its requests of
        ``least_output`` to ``most_output`` output tokens: it sends one request after another
        (``loadgen.loops.run_closed_loop``), each of ``n`` tokens taking at least
        :meth:`e2e_floor_ms` of ``n``, and a run's rates are taken over a span that holds each
        client's requests (:func:`measurement.stats.span_seconds`), so it gets at most the
        largest ``n / e2e_floor(n)``: at the fewest or the most tokens, as ``n / (T + (n - 1)
        I)`` only rises or only falls with ``n``. ``c`` clients give at most ``c`` times this,
        goodput included (math.inf without a floor)."""
        floors = [(n, self.e2e_floor_ms(n)) for n in (least_output, most_output)]
        return max(n * 1e3 / ms if ms > 0 else math.inf for n, ms in floors)


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
        frontend_ms=front * 1e3,
    )


@dataclass(frozen=True)
class InterToken:
    """The SLO's inter-token objectives as :func:`decode_ceiling` reads them: each TPOT bound
    (s), and each ITL bound (s) with the least share of a met request's intervals within it
    (:func:`itl_share`)."""

    tpot_s: tuple[float, ...] = ()
    itl: tuple[tuple[float, float], ...] = ()

    @property
    def longest_s(self) -> float:
        """The largest of the bounds (s)."""
        return max([*self.tpot_s, *(t for t, _ in self.itl)])


def itl_share(q: float, least: int, most: int) -> float:
    """The least share of a request's inter-token intervals at or below a bound its own ITL
    p``q`` meets, over requests of ``least`` to ``most`` intervals: of ``m`` intervals the
    percentile (linear between closest ranks, :func:`measurement.percentile.percentile`) is at
    least the value of rank ``floor((m - 1) q / 100)``, so that many plus one are within the
    bound."""
    return min((math.floor((m - 1) * q / 100) + 1) / m for m in range(least, most + 1))


def inter_token(slo: Slo, least_output: int, most_output: int) -> InterToken | None:
    """``slo``'s TPOT and ITL objectives (:class:`InterToken`) for requests of
    ``least_output`` to ``most_output`` output tokens; None when it sets neither or a request
    has fewer than two output tokens (no interval)."""
    if least_output < 2:
        return None
    known = objectives()
    tpot, itl = [], []
    for key, bound in slo.objectives().items():
        metric, q = known[key].metric.key, known[key].q
        if metric == "tpot":
            tpot.append(bound / 1e3)
        elif metric == "itl":
            itl.append((bound / 1e3, itl_share(q, least_output - 1, most_output - 1)))
    return InterToken(tuple(tpot), tuple(itl)) if tpot or itl else None


GRID_RATIO = 1.0625
"""Above :data:`GRID_EXACT`, the decode batches and prompt tokens :func:`decode_rate` times a
step at grow by this ratio (its cells' corners are at most 6.25% apart)."""

GRID_EXACT = 64
"""Decode batches and prompt tokens up to this count are each timed."""

GRID_TOP = 1 << 16
"""The most decoding requests :func:`decode_rate` times a step at (past it: no ceiling)."""


def _grid(top: int) -> list[int]:
    """0 .. ``top``: every count to :data:`GRID_EXACT`, then :data:`GRID_RATIO` apart, ``top``
    last."""
    points = list(range(min(top, GRID_EXACT) + 1))
    while points[-1] < top:
        points.append(min(top, max(points[-1] + 1, math.ceil(points[-1] * GRID_RATIO))))
    return points


_DECODE: dict[tuple[EngineStep, int, InterToken, float | None], float] = {}
""":func:`decode_rate` by its arguments (the same few steps recur over a search's candidates)."""


def decode_rate(step: EngineStep, context: int, limits: InterToken, prompts: float | None) -> float:
    """The most output tokens/s after their first that one worker of ``step`` can give requests
    meeting ``limits`` (met requests), each decoding at ``context`` tokens or more;
    ``prompts``: where the worker also computes their prompts (aggregated, in the same steps:
    vLLM's chunked prefill, up to the step's ``max_batched_tokens``), the least prompt tokens
    it computes for each of their output tokens after the first (None: it computes none).

    A worker's steps run one after another and each token of a decoding request comes at the
    end of a step, so a request's interval before a token is at least that step's time, and a
    step with ``g`` met requests decoding and ``P`` prompt tokens takes at least
    ``host_s + gpu_s(P, g requests at context)`` (more requests, longer contexts and longer
    prompts only add to a step). With ``w`` the share of the worker's time spent in steps of
    each shape (time ``d``), its met tokens/s is ``sum(w g / d)``, and: a met request's TPOT
    (the mean of its intervals) within T means ``sum(w g (T - d) / d) >= 0`` over the met
    tokens; its ITL percentile within T, at least its share s (:func:`itl_share`) of its
    intervals within T: ``sum(w g ([d <= T] - s) / d) >= 0``; the prompts,
    ``sum(w (P - prompts g) / d) >= 0``. That is a linear programme over the shares, solved
    (``scipy.optimize.linprog``, HiGHS) over cells of step shapes (:func:`_grid` of batches
    and of prompt tokens), each cell at its most favourable corner (the least step time of the
    cell and above it, the most tokens and prompt tokens). Its dual (a weight per constraint)
    then bounds the weighted gain of every step shape, those past the last batch timed too
    (:func:`_dual_bound`): the rate returned is that bound, so it holds whatever the solver's
    tolerance."""
    key = (step, context, limits, prompts)
    cached = _DECODE.get(key)
    if cached is None:
        cached = _DECODE[key] = _decode_rate(step, context, limits, prompts)
    return cached


def _decode_rate(
    step: EngineStep, context: int, limits: InterToken, prompts: float | None
) -> float:
    import numpy as np

    budget = step.max_batched_tokens
    prompt = _grid(budget) if prompts is not None and budget else [0]
    rows: dict[int, list[float]] = {}

    def row(g: int) -> list[float]:
        """The step times at ``g`` decoding requests, for each prompt of the grid."""
        if g not in rows:
            rows[g] = [step.host_s + step.gpu_s(p, [context] * g) for p in prompt]
        return rows[g]

    top = GRID_EXACT
    while row(top)[0] < 2 * limits.longest_s and top < GRID_TOP:
        top *= 2
    while top <= GRID_TOP:
        batch = _grid(top)
        times = np.array([row(g) for g in batch])
        times[0, 0] = math.inf  # no decoding request and no prompt token: no step
        # a cell's least time: that of its corner and of every corner above it
        least = np.minimum.accumulate(np.minimum.accumulate(times[::-1, ::-1], 0), 1)[::-1, ::-1]
        rate = _dual_bound(least, np.array(batch, float), np.array(prompt, float), limits, prompts)
        if rate is not None:
            return rate
        top *= 2
    return math.inf


def _dual_bound(
    least: Any, batch: Any, prompt: Any, limits: InterToken, prompts: float | None
) -> float | None:
    """:func:`decode_rate`'s bound from the least step times ``least`` of the cells from each
    corner of ``batch`` x ``prompt`` (the last batch's row: every batch from it on); None when
    that last batch is too small to bound the batches past it."""
    import numpy as np
    from scipy.optimize import linprog

    cells, tail = least[:-1], float(least[-1, 0])
    g_lo, g_hi = batch[:-1, None], batch[1:, None] - 1
    p_hi = np.append(prompt[1:] - 1, prompt[-1])[None, :]
    valid = np.isfinite(cells)
    d = np.where(valid, cells, 1.0)
    per_token = prompts or 0.0
    # the programme at each cell's most favourable corner gives the constraints' weights
    rows = [np.where(d <= t, g_hi, g_lo) * (t - d) / d for t in limits.tpot_s]
    rows += [np.where(d <= t, g_hi * (1 - s), -g_lo * s) / d for t, s in limits.itl]
    if prompts is not None:
        rows.append((p_hi - per_token * g_lo) / d)
    gain = np.broadcast_to(g_hi / d, d.shape)[valid]
    cons = np.array([np.broadcast_to(r, d.shape)[valid] for r in rows])
    weights = _weights(gain, cons, linprog)
    n_tpot, n_itl = len(limits.tpot_s), len(limits.itl)
    w_tpot, w_itl = weights[:n_tpot], weights[n_tpot : n_tpot + n_itl]
    w_prompt = weights[-1] if prompts is not None else 0.0
    bounds_itl = [t for t, _ in limits.itl]

    def worth(at: Any, within: Sequence[Any]) -> Any:
        """A met token's weighted gain times the step's time ``at`` (s), ``within`` each ITL
        bound."""
        value = 1 - w_prompt * per_token
        value = value + sum(w * (t - at) for w, t in zip(w_tpot, limits.tpot_s, strict=True))
        return value + sum(
            w * (inside - s) for w, inside, (_, s) in zip(w_itl, within, limits.itl, strict=True)
        )

    # a step of a cell takes at least the cell's time, and its weighted gain is c / time + a
    # constant between two ITL bounds: its most is at the least time or at a bound (either side)
    times = [(d, [d <= t for t in bounds_itl])]
    for t in bounds_itl:
        at = np.maximum(d, t)
        times.append((at, [at <= u for u in bounds_itl]))
        times.append((at, [np.where(d > t, d <= u, t < u) for u in bounds_itl]))
    rate = 0.0
    for at, within in times:
        token = worth(at, within)
        best = np.maximum(g_lo * token, g_hi * token) + w_prompt * p_hi
        rate = max(rate, float(np.max(np.where(valid, best / at, 0.0))))
    # past the last batch timed: every step at least ``tail``, beyond every bound
    if worth(tail, [False] * len(bounds_itl)) > 0:
        return None
    return max(rate, float(np.max(w_prompt * p_hi[0] / least[-1])))


LP_START = 8
""":func:`_weights` solves first over every ``LP_START``-th step shape."""


def _weights(gain: Any, cons: Any, linprog: Any) -> Any:
    """The constraints' weights (the dual) of the programme max ``gain . w`` over shares ``w``
    (summing to 1) with ``cons . w >= 0``: solved over every :data:`LP_START`-th column, then
    again with the columns whose weighted gain beats the programme's value added (column
    generation), until none does (a few rounds)."""
    import numpy as np

    pick = np.zeros(gain.size, dtype=bool)
    pick[::LP_START] = True
    pick[np.argmax(gain)] = True
    while True:
        solved = linprog(
            -gain[pick],
            A_ub=-cons[:, pick],
            b_ub=np.zeros(len(cons)),
            A_eq=np.ones((1, int(pick.sum()))),
            b_eq=[1.0],
            method="highs",
        )
        weights = np.maximum(-np.asarray(solved.ineqlin.marginals), 0.0)
        worth = gain + weights @ cons
        better = (worth > -solved.fun * (1 + 1e-9)) & ~pick
        if not better.any():
            return weights
        pick[np.argsort(np.where(better, -worth, np.inf))[: 4 * LP_START]] = True


CEILING_SLACK = 1e-6
"""What :func:`kv_read_ceiling` adds to its bound (a share) for the simulation's float
tolerances: a shared GPU's job counts as done with a billionth of its work left
(``simulator.sharing.job_done``), and records keep times in whole nanoseconds."""


def kv_read_ceiling(plan: StackPlan, load: LoadConfig) -> float:
    """The most output tokens/s ``plan``'s decoding workers' KV reads allow at any load and
    under any SLO, requests of ``load``'s prompt and output tokens or more (the workload's best
    case: :meth:`recommend.workload.Workload.best_case`); math.inf where a decoding worker's
    steps are timed from measured kernel data (no such term to bound by) or a request has one
    output token.

    Each output token after a request's first comes at the end of a step in which the request
    decodes at its context so far (``prompt + tokens emitted``,
    :meth:`simulator.timing_model._Worker.engine`), and a roofline step's GPU part reads every
    decoding request's KV: at least ``context x kv_bytes_per_token / (bandwidth x
    kv_efficiency)`` seconds of it per request (:meth:`steptime.roofline.EngineStep.gpu_s`:
    the larger of memory and compute, plus prefill and all-reduces). A request of ``P`` prompt
    and ``n`` output tokens reads ``P + n / 2`` tokens of context per later token on average
    (``P + 1 .. P + n - 1``), at least the best case's. The steps that emit a run's tokens lie
    within its span (:func:`measurement.stats.span_seconds`: each request's steps follow its
    send), and the workers of one GPU share its time (processor sharing, at most the GPU's own
    rate: :mod:`simulator.sharing`), so each GPU gives at most its fastest decoding worker's
    later tokens/s: ``bandwidth x kv_efficiency / (kv_bytes_per_token x (P + n / 2))``. The
    first tokens add at most ``1 / (n - 1)`` to the later ones."""
    n = load.max_tokens
    if n < 2:
        return math.inf
    context = load.prompt_tokens + n / 2
    fastest: dict[str, float] = {}
    for w in run_topology(plan).workers:
        if w.role not in ("aggregated", "decode"):
            continue
        step = w.step
        if step.measured is not None:
            return math.inf
        per_s = (step.gpu.bytes_per_s * step.fit.kv_efficiency) / (
            step.geometry.kv_bytes_per_token * context
        )
        fastest[w.gpu] = max(fastest.get(w.gpu, 0.0), per_s)
    return math.fsum(fastest.values()) * n / (n - 1) * (1 + CEILING_SLACK)


def decode_ceiling(plan: StackPlan, load: LoadConfig, most_output: int, slo: Slo) -> float:
    """The most output tokens/s of requests meeting ``slo``'s inter-token objectives
    (:func:`inter_token`) that ``plan`` can give at any load (its goodput's ceiling; math.inf
    when the SLO sets none): each worker that decodes (aggregated, decode) at most its
    :func:`decode_rate`, its requests decoding at ``load``'s prompt (the workload's best case,
    :meth:`recommend.workload.Workload.best_case`) or longer, an aggregated worker computing
    their prompts too (at least the best case's uncached prompt tokens, :func:`_uncached`, for
    at most ``most_output - 1`` output tokens after the first); the first token of each met
    request adds at most ``1 / (n - 1)`` to its ``n - 1`` later ones (``n``: ``load``'s output
    tokens, the fewest)."""
    limits = inter_token(slo, load.max_tokens, most_output)
    if limits is None:
        return math.inf
    topology = run_topology(plan)
    uncached, _ = _uncached(load, stack_constants(plan).block_tokens)
    per_token = uncached / (most_output - 1)
    total = math.fsum(  # exactly rounded: a mirror's workers, in another order, sum the same
        decode_rate(
            w.step, load.prompt_tokens, limits, per_token if w.role == "aggregated" else None
        )
        for w in topology.workers
        if w.role in ("aggregated", "decode")
    )
    return total * load.max_tokens / (load.max_tokens - 1)
