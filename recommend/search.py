"""The staged search: every candidate of the cluster (:mod:`recommend.space`) checked as a stack
(a refused one keeps the validator's message), screened with its roofline bounds
(:mod:`recommend.bounds`), timed at the highest load that meets the SLO
(:mod:`recommend.load_search`), and ranked by the objective.

Screening, in order (each a reason the table prints):

1. a floor above the SLO: the candidate's TTFT floor over a TTFT bound, its inter-token floor
   over an ITL or TPOT bound, its end-to-end floor over an E2E bound: no load meets it;
2. the ceilings (:func:`bound_reason`): a candidate's output tokens/s per GPU at its
   request-rate ceiling, and what its decoding workers' KV reads allow, bound its objective at
   every load. Candidates are timed one after the other in order of that ceiling, highest
   first (``jobs`` processes time the next ones ahead); one whose bound is below the best
   objective timed before it divided by the margin loses by more than the margin whatever its
   timing, and under ``goodput-per-gpu`` and ``tokens-per-gpu`` one whose bound is below that
   best itself cannot rank first (branch and bound): neither is timed, and its reason gives
   its bound;
3. the first load (:func:`first_load`), under those two objectives and a closed loop: a
   client gets at most one request's output tokens per its end-to-end floor, so a candidate
   needs some number of clients to beat the best timed before it; its load search stops, the
   candidate screened, once a load at or below that fails.

Which are timed, and how, depends only on the candidates before it, never on ``jobs``.

Ranking is deterministic: by the objective, then the candidate's key.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import multiprocessing
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AliasChoices, Field, TypeAdapter

from measurement.results import open_loop_load
from metrics.registry import objectives
from recommend.bounds import Bounds, bounds, decode_ceiling, kv_read_ceiling, ms_text
from recommend.load_search import (
    CLIENTS_PER_GPU,
    Axis,
    Found,
    LoadPoint,
    LoadRunner,
    Saturation,
    highest_load,
    required_load,
    room,
)
from recommend.space import Candidate, candidate_raw, transport_reason
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from stackmodel.config import StackConfig
from stackmodel.crossover import crossover
from stackmodel.errors import StackConfigError
from stackmodel.plan import StackPlan
from stackmodel.validation import validate_stack
from workload.config import Arrival, LoadConfig
from workload.slo import Slo

if TYPE_CHECKING:  # annotations only: the store writes through outputs.folder_writer (pandas)
    from recommend.resume import TimedStore

Objective = Literal["capacity", "goodput-per-gpu", "tokens-per-gpu", "pareto"]
OBJECTIVES_RANKED: tuple[Objective, ...] = (
    "capacity",
    "goodput-per-gpu",
    "tokens-per-gpu",
    "pareto",
)

Status = Literal[
    "ranked", "short-of-load", "validation-failed", "refused", "screened", "slo-not-met"
]

DEFAULT_HEADROOM = 1.2
"""``--headroom``: the capacity question's load is the workload's stated load times this."""


def stated_load(load: LoadConfig) -> float:
    """The load the workload states (the capacity question's): an open loop's request rate
    (requests/s), else its largest concurrency (clients)."""
    if load.arrival is Arrival.POISSON and load.request_rate is not None:
        return load.request_rate
    return float(max(load.concurrency))


def needed_load(load: LoadConfig, headroom: float) -> float:
    """The load a candidate must hold to answer the capacity question: :func:`stated_load`
    times ``headroom``, a closed loop's rounded up to a whole client."""
    needed = stated_load(load) * headroom
    if load.arrival is Arrival.POISSON and load.request_rate is not None:
        return float(f"{needed:.3g}")
    return float(math.ceil(needed - 1e-9))


def load_text(concurrency: int, rate: float | None = None) -> str:
    """A load as the search names it: ``32 clients``, or for an open loop the offered rate and
    the most in flight (:func:`measurement.results.open_loop_load`, ``8/s, <=32``)."""
    if rate is None:
        return f"{concurrency} client{'s' if concurrency != 1 else ''}"
    return open_loop_load(rate, concurrency)


@dataclass(frozen=True)
class Figures:
    """A candidate at a load: the concurrency, the figures averaged over the workload's
    prefix kinds (tokens/s per GPU, per user, requests/s, goodput per GPU) and ``values_ms``,
    per SLO objective key (``ttft_p90_ms``) the worst figure of it over them (ms, at the
    objective's own percentile; read from ``p99_ms`` in timings stored before this name) and
    ``missed_by``, per SLO objective key the share of the requests that missed it on their own
    (0-1, the mean over the prefix kinds; a request's own figure against the bound,
    :func:`measurement.goodput.missed_of`; empty in timings stored before it)."""

    concurrency: int
    goodput_tokens_per_s_per_gpu: float
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    requests_per_s: float
    cached_ratio: float
    attainment: float
    values_ms: Annotated[
        dict[str, float | None], Field(validation_alias=AliasChoices("values_ms", "p99_ms"))
    ]
    rate: float | None = None
    missed_by: dict[str, float] = field(default_factory=dict)

    def load_text(self) -> str:
        """The load these figures were timed at (:func:`load_text`)."""
        return load_text(self.concurrency, self.rate)

    @classmethod
    def of(cls, point: LoadPoint, gpus: int) -> Figures:
        """The figures of ``point`` (its runs' mean; each objective's worst figure)."""

        def per_user(r: Any) -> float | None:
            tpot = r.summary.tpot_p50_ms
            return 1e3 / tpot if tpot else None

        return cls(
            concurrency=point.concurrency,
            goodput_tokens_per_s_per_gpu=point.mean(
                lambda r: r.point.goodput_output_tokens_per_s_per_gpu
            ),
            tokens_per_s_per_gpu=point.mean(lambda r: r.summary.output_tokens_per_s / gpus),
            tokens_per_s_per_user=point.mean(per_user),
            requests_per_s=point.mean(lambda r: r.summary.requests_per_s),
            cached_ratio=point.mean(lambda r: r.summary.cached_ratio),
            attainment=point.mean(lambda r: r.point.attainment),
            values_ms={
                k: point.worst(lambda r, k=k: r.point.values_ms.get(k))  # type: ignore[misc]
                for k in objectives()
                if any(k in r.point.values_ms for r in point.runs)
            },
            rate=point.rate,
            missed_by={
                k: point.mean(
                    lambda r, k=k: (
                        r.point.missed_by.get(k, 0) / r.point.requests  # type: ignore[misc]
                        if r.point.requests
                        else None
                    )
                )
                for k in objectives()
                if any(k in r.point.missed_by for r in point.runs)
            },
        )


_FIGURES = TypeAdapter(Figures)
"""Reads `Figures` back from their JSON (:func:`timed_of`), under either name of
``values_ms``."""


@dataclass
class Result:
    """One candidate's outcome.

    ``status``: ``ranked`` (timed, meets the SLO at some load), ``refused`` (the checks refused
    it: ``reason`` is the validator's message), ``screened`` (a bound settles it: ``reason``
    says which), ``slo-not-met`` (timed: not even one client meets the SLO). ``binding``: what
    stops more load (an SLO objective's name, ``host-memory floor`` for an OOMKill, ``failed
    requests``, ``load ceiling``), or what screened it. ``best``: the figures at the highest
    load meeting the SLO; ``over``: at the lowest load above it that fails (one client's for
    ``slo-not-met``). ``value``: the objective (None: not ranked). ``floor_over``: a candidate
    screened by a floor, that floor over the SLO's bound (> 1). Under ``pareto`` only
    (:func:`rank_results`): ``on_front``, no other ranked candidate beats it on both tokens/s
    per GPU and per user; ``dominated_by``, for one off the front, the front member that beats it
    on both with the highest objective (what its ratio and verdict compare it with). Under
    ``capacity`` only: ``needed``, the load it had to hold (:func:`needed_load`); one that
    holds less is ``short-of-load``, and one the real routing finds over the SLO at it
    ``validation-failed`` (``reason`` says why). ``unsteady``: where the SLO held again above
    the load that fails (:func:`unsteady_text`; '' when it did not), never taken as the answer.
    ``steady``: the figures at every load probed up to ``best`` (each holds; ascending), where
    a verdict compares two candidates at a load both held (:func:`recommend.claims.same_load`).
    ``saturated``: its closed loop's search stopped at ``best`` below the load cap, saturated
    there (:func:`recommend.load_search.saturation`; ``binding`` says by how much).
    ``first_load``: clients below which it cannot rank first, given to its load search
    (:func:`first_load`; None: none); ``screened``, ``over`` the figures of a load at or below
    them that failed, when its search stopped there (:func:`first_load_reason`).
    """

    candidate: Candidate
    status: Status
    gpus: int = 0
    reason: str = ""
    binding: str = ""
    bounds: Bounds | None = None
    best: Figures | None = None
    over: Figures | None = None
    value: float | None = None
    ceiling_value: float | None = None
    ceiling_limit: str = ""
    plan: StackPlan | None = field(default=None, repr=False)
    crossover_summary: str = ""
    runs: int = 0
    rank: int | None = None
    floor_over: float | None = None
    on_front: bool = False
    dominated_by: Result | None = field(default=None, repr=False)
    needed: float | None = None
    unsteady: str = ""
    steady: tuple[Figures, ...] = ()
    saturated: bool = False
    first_load: int | None = None


def stack_name(cluster: str, candidate: Candidate) -> str:
    """The stack name of a candidate: ``<cluster>-<key>``."""
    return f"{cluster}-{candidate.key}"


def check(
    name: str, base: Mapping[str, Any], candidate: Candidate, load: LoadConfig
) -> StackPlan | str:
    """``candidate`` validated as the stack ``name`` (its plan), sized: each group's
    ``memoryLimit`` its floor (:class:`stackmodel.sizing.ComponentMemoryReport`); or the
    validator's message when the checks refuse it. It is judged as serving ``load``: the load
    step's own checks (its reach, its clients' logs) are left out, as the emitted stack sets
    its load step itself (:func:`recommend.outputs.emitted_stack_text`)."""
    load_raw = load.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    raw = candidate_raw(base, candidate) | {"load": load_raw}
    try:
        plan = validate_stack(name, raw, load_step=False)
        limits = {c.name: c.memory_floor_quantity for c in plan.sizing.report.components}
        sized = candidate_raw(base, candidate, limits) | {"load": load_raw}
        return validate_stack(name, sized, load_step=False)
    except StackConfigError as exc:
        return refusal(exc, candidate)


def refusal(exc: StackConfigError, candidate: Candidate) -> str:
    """The checks' problems with ``candidate`` in one line, each under what the user can change
    (the candidate's stack file does not exist): a worker group's key under the group
    (``2 x TP1 prefill on gpu-24gb, 4 a GPU: gpuMemoryUtilization = 0.22: ...``), a load key
    as the workload's (``--workload promptTokens``), any other under the cluster stack's key.
    A problem with the transport the search set on a group (its ``kvTransfer``, ``env`` or
    ``rdma``, :func:`recommend.space.transport_reason`) keeps the checks' reason without their
    edit of the candidate and names the cluster's links instead."""
    parts = []
    for p in exc.problems:
        worker = re.fullmatch(r"topology\.workers\[(\d+)\]\.?(.*)", p.key)
        if worker is not None and int(worker[1]) < len(candidate.groups):
            where = candidate.groups[int(worker[1])].text()
            where += f": {worker[2]}" if worker[2] else ""
            reason = transport_reason(worker[2], p.message)
            if reason is not None:
                shown = "" if p.value is None else f" = {p.value!r}"
                parts.append(f"{where}{shown}: {reason}")
                continue
        elif p.key.startswith("load."):
            where = f"--workload {p.key.removeprefix('load.')}"
        elif p.key.startswith("topology."):
            where = f"the candidate's {p.key.removeprefix('topology.')}"
        else:
            where = f"the cluster's {p.key}"
        shown = "" if p.value is None else f" = {p.value!r}"
        parts.append(f"{where}{shown}: {p.message}")
    return "; ".join(" ".join(part.split()) for part in parts)


def objective_value(figures: Figures, objective: Objective) -> float:
    """The figure ``objective`` ranks by (pareto ranks its front by goodput per GPU)."""
    if objective == "tokens-per-gpu":
        return figures.tokens_per_s_per_gpu
    return figures.goodput_tokens_per_s_per_gpu


def floor_reason(b: Bounds, slo: Slo, output_tokens: int) -> tuple[str, str, float] | None:
    """(binding, reason, the floor over the bound) when a floor of ``b`` (every request's least
    latency, so any percentile's too) is above an SLO bound (None: none is)."""
    floors = {
        "ttft": b.ttft_floor_ms,
        "itl": b.itl_floor_ms,
        "tpot": b.itl_floor_ms,
        "e2e": b.e2e_floor_ms(output_tokens),
    }
    for key, bound in slo.objectives().items():
        name, floor = objectives()[key].name, floors.get(objectives()[key].metric.key, 0.0)
        if floor > bound:
            parts = f"prefill {ms_text(b.prefill_ms)}"
            if b.frontend_ms:
                parts = f"the frontend's fixed {ms_text(b.frontend_ms)}, {parts}"
            if b.copies_ms:
                parts += f", host copies {ms_text(b.copies_ms)}"
            if b.link_ms:
                parts += f", link {ms_text(b.link_ms)}"
            return (
                name,
                f"{name} is at least {ms_text(floor)} at any load ({parts} per request at "
                f"best), over the SLO's {bound:,.6g} ms",
                floor / bound,
            )
    return None


def saturation_text(saturated: Saturation) -> str:
    """What binds a saturated candidate (:class:`recommend.load_search.Saturation`):
    ``saturation (128 -> 256 clients: +1.2% output tokens/s, TPOT p99 +0.3%; the SLO bounds no
    latency the queue adds, so it holds at any higher load)``."""
    moved = ", ".join(f"{objectives()[k].name} {v:+.1%}" for k, v in saturated.moved.items())
    return (
        f"saturation ({saturated.lower:,} -> {saturated.upper:,} clients: "
        f"{saturated.gain:+.1%} output tokens/s, {moved}; the SLO bounds no latency the queue "
        "adds, so it holds at any higher load)"
    )


def saturated_line(results: Sequence[Result]) -> str:
    """How many of ``results`` stopped saturated below the load cap ('' when none):
    ``3 candidates stopped saturated: more clients would only wait in their queue (their
    binding says by how much)``."""
    n = sum(r.saturated for r in results)
    if not n:
        return ""
    return (
        f"{n} candidate{'s' if n != 1 else ''} stopped saturated: more clients would only wait "
        f"in {'their' if n != 1 else 'its'} queue (the binding says by how much)"
    )


def _binding(found: Found, slo: Slo, needed: bool) -> str:
    over, best = found.over, found.best
    if over is None and needed:
        return "none at the load needed (the search stops there)"
    if found.saturated is not None:
        return saturation_text(found.saturated)
    if over is None:
        assert best is not None
        if best.rate is not None:
            return "load ceiling (its request-rate bound)"
        cap = f"load cap ({CLIENTS_PER_GPU} clients per cluster GPU)"
        near = room(best, slo)
        if near is None:
            return cap
        key, value, bound = near
        return (
            f"{cap}: the SLO still has room there, {objectives()[key].name} {ms_text(value)} "
            f"of its {bound:,.6g} ms"
        )
    failing = over.failing()
    assert failing is not None
    if failing.kills:
        return "host-memory floor"
    if failing.summary.errors:
        return "failed requests"
    if not failing.point.slo_met:
        return objectives()[failing.point.binding].name if failing.point.binding else "SLO"
    return f"in-flight cap (at most {over.concurrency})"


def unsteady_text(found: Found) -> str:
    """Where the SLO held again above the load that fails: ``holds again at 10 clients (51% of
    its requests meet the SLO), above 7 and 9 clients that fail: not taken`` (an open loop's:
    ``holds again at 26.2/s, <=8 (...), above 20.1/s and 23.4/s that fail: ...``; '' when it
    did not)."""
    if found.unsteady is None:
        return ""
    rate = found.unsteady.rate is not None
    *rest, last = [f"{x:g}/s" if rate else f"{int(x):,}" for x in found.failed_below]
    fails = f"{', '.join(rest)} and {last}" if rest else last
    if not rate:
        fails += " client" if found.failed_below == (1,) else " clients"
    attained = found.unsteady.mean(lambda r: r.point.attainment)
    held = load_text(found.unsteady.concurrency, found.unsteady.rate)
    return (
        f"holds again at {held} ({attained:.0%} of its requests meet the SLO), above {fails} "
        "that fail: not taken"
    )


COLLECT_EVERY = 100_000
"""While a candidate is timed, the cyclic garbage collector's youngest generation is collected
after this many allocations (CPython's default: 700), its older ones as rarely
(:func:`fewer_collections`)."""


@contextlib.contextmanager
def fewer_collections() -> Any:
    """Run the block with the cyclic garbage collector collecting rarely (:data:`COLLECT_EVERY`;
    thresholds restored after). A run allocates hundreds of thousands of short-lived objects
    (SimPy events and processes, requests, records), most freed by reference counting; at
    CPython's default each 700 of them set off a collection that walks the young ones, 13-15%
    of the Qwen3-32B search's CPU. The cycles a run leaves are still collected, in larger
    batches."""
    before = gc.get_threshold()
    gc.set_threshold(COLLECT_EVERY, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def time_candidate(
    plan: StackPlan,
    load: LoadConfig,
    slo: Slo,
    gpus: int,
    workload: Workload | None = None,
    rate_ceiling: float = math.inf,
    needed: float | None = None,
    first_load: int | None = None,
) -> Result:
    """Time one checked candidate (its result without ``candidate`` filled in: the caller's);
    ``workload``: what is sent (default: ``load``'s synthetic requests); an open loop's rate
    is searched up to ``rate_ceiling`` (requests/s: the candidate's bound; default none).
    ``needed`` (the capacity question, :func:`needed_load`): the search tries that load first
    and stops there when it holds (:func:`recommend.load_search.required_load`; an open loop's
    rate at most ``rate_ceiling``). Clients and rates are searched alike
    (:class:`recommend.load_search.Axis`). ``first_load``: the fewest clients of use to the
    caller (:func:`first_load`); where a load at or below them fails the search stops there
    and the result is ``screened``, ``over`` that load's figures."""
    sent = workload if workload is not None else Workload(load)
    runner = LoadRunner(run_topology(plan), stack_constants(plan), load, slo, gpus, workload=sent)
    axis, required = Axis.clients(gpus), needed
    if sent.open_loop:
        start = sent.start_rate if needed is None else needed
        axis = Axis.rates(sent.in_flight_cap, start, rate_ceiling)
        required = None if needed is None else axis.start
    with fewer_collections():
        if required is None:
            found = highest_load(runner, load.prefix_kinds, axis, slo, first_load)
        else:
            found = required_load(runner, load.prefix_kinds, required, axis, slo)
    best, over = found.best, found.over
    result = Result(candidate=Candidate(groups=()), status="ranked", gpus=gpus, runs=runner.runs)
    result.first_load = first_load
    if found.short_of is not None:
        result.status = "screened"
        result.binding = f"load cap ({CLIENTS_PER_GPU} clients per cluster GPU)"
        if over is not None:
            result.over = Figures.of(over, gpus)
            result.binding = _binding(found, slo, False)
        return result
    result.binding = _binding(found, slo, needed is not None)
    result.saturated = found.saturated is not None
    result.unsteady = unsteady_text(found)
    result.steady = tuple(Figures.of(p, gpus) for p in found.steady)
    if over is not None:
        result.over = Figures.of(over, gpus)
    if best is None:
        result.status = "slo-not-met"
        return result
    result.best = Figures.of(best, gpus)
    return result


Progress = Callable[[int, int], None]
"""Called as candidates are timed: (done, to time)."""

BATCH = 8
"""Candidates between two progress lines of ``testbed recommend``."""


def _deaf_to_ctrl_c() -> None:
    """A worker process ignores SIGINT (the terminal sends it to the whole foreground group):
    the search terminates its workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


TimingArgs = tuple[StackPlan, LoadConfig, Slo, int, Workload, float, float | None, int | None]


def _time_in_worker(args: TimingArgs) -> Result:
    """:func:`time_candidate` in a worker process."""
    return time_candidate(*args)


def _screen_or_queue(
    problem: Problem, candidates: Sequence[Candidate], results: list[Result], objective: Objective
) -> list[Result]:
    """Check every candidate and apply the floors (each into ``results``); returns those left
    to time, highest ceiling first. A candidate's ceiling (``ceiling_value``, what sets it
    ``ceiling_limit``) is its rate ceiling's output tokens/s per GPU, at most its KV-read
    ceiling's (``KV reads``, :func:`recommend.bounds.kv_read_ceiling`: the output tokens/s its
    decoding workers' reads of their requests' KV cache allow), and under ``goodput-per-gpu`` at
    most its decode ceiling's (``decode``, :func:`recommend.bounds.decode_ceiling`: the goodput
    its decoding workers can give under the SLO's TPOT and ITL bounds)."""
    cfg, load = problem.cfg, problem.load
    best_case = problem.sent.best_case()
    longest = problem.sent.longest_output_tokens
    gpus = cluster_gpus(cfg)
    queue: list[Result] = []
    for candidate in candidates:
        checked = check(stack_name(problem.cluster, candidate), problem.base, candidate, load)
        own = candidate.gpus(cfg.node_classes)
        if isinstance(checked, str):
            results.append(Result(candidate, "refused", own, reason=checked, binding="checks"))
            continue
        b = bounds(checked, best_case)
        result = Result(candidate, "screened", own, bounds=b, plan=checked)
        result.ceiling_value = b.requests_per_s * problem.sent.mean_output_tokens / gpus
        result.ceiling_limit = b.limit
        kv_reads = kv_read_ceiling(checked, best_case) / gpus
        if kv_reads < result.ceiling_value:
            result.ceiling_value, result.ceiling_limit = kv_reads, "KV reads"
        if checked.disaggregated:
            result.crossover_summary = crossover(checked).summary()
        floor = floor_reason(b, problem.slo, best_case.max_tokens)
        if floor is not None:
            result.binding, result.reason, result.floor_over = floor
        else:
            if objective == "goodput-per-gpu":
                decode = decode_ceiling(checked, best_case, longest, problem.slo) / gpus
                if decode < result.ceiling_value:
                    result.ceiling_value, result.ceiling_limit = decode, "decode"
            queue.append(result)
        results.append(result)
    queue.sort(key=lambda r: (-(r.ceiling_value or 0.0), r.candidate.key))
    return queue


def twin_classes(cfg: StackConfig) -> tuple[tuple[str, ...], ...]:
    """The cluster's sets of two or more node classes that differ only in where their workers
    land (``nodeSelector``, ``tolerations``): the same GPU, count of nodes and GPUs, memory,
    time-slicing and calibration, so a candidate times the same on either."""
    sets: dict[str, list[str]] = {}
    for name, node_class in sorted(cfg.node_classes.items()):
        shape = node_class.model_dump_json(exclude={"node_selector", "tolerations"})
        sets.setdefault(shape, []).append(name)
    return tuple(tuple(names) for names in sets.values() if len(names) > 1)


def mirror_signature(candidate: Candidate, twins: Sequence[Sequence[str]]) -> tuple[Any, ...]:
    """What ``candidate``'s timing depends on, the same for its mirrors: its knobs with the node
    classes of each set of ``twins`` (:func:`twin_classes`) swapped every way, the least of
    those (its groups in sorted order). Candidates with one signature are timed once."""
    options = []
    for renaming in itertools.product(*(itertools.permutations(group) for group in twins)):
        rename = {
            old: new
            for group, order in zip(twins, renaming, strict=True)
            for old, new in zip(group, order, strict=True)
        }
        options.append(
            tuple(
                sorted(
                    astuple(replace(g, node_class=rename.get(g.node_class, g.node_class)))
                    for g in candidate.groups
                )
            )
        )
    return (
        min(options),
        candidate.router,
        candidate.kv_events,
        candidate.transport,
        candidate.max_batched_tokens,
    )


ONE_FIGURE: tuple[Objective, ...] = ("goodput-per-gpu", "tokens-per-gpu")
"""The objectives one figure ranks by, so a candidate bounded below the best timed so far
cannot rank first (branch and bound: :func:`bound_reason`, :func:`first_load`); ``pareto``'s
front has two figures, ``capacity`` ranks by GPUs first."""


def bound_reason(
    result: Result, best: float, margin: float, objective: Objective, needed: float | None
) -> str | None:
    """Why ``result`` (queued, its bounds set) is not timed, given ``best``, the highest
    objective of the candidates timed before it (None: it is timed). Its rate ceiling's
    output tokens/s per GPU (``ceiling_value``) bounds its objective at every load, so it is
    not timed when that bound is below ``best`` over the margin (it loses by more than the
    margin), or under ``goodput-per-gpu`` and ``tokens-per-gpu`` below ``best`` itself (it
    cannot rank first: branch and bound; under ``pareto`` it may still be on the front).
    Never under ``capacity`` (``needed`` set)."""
    if needed is not None or result.bounds is None or result.ceiling_value is None:
        return None
    ceiling, b = result.ceiling_value, result.bounds
    at_most = (
        f"at most {ceiling:,.0f} output tok/s per cluster GPU at any load (its {b.limit} ceiling, "
        f"{b.requests_per_s:,.2f} req/s)"
    )
    if result.ceiling_limit == "KV reads":
        at_most = (
            f"at most {ceiling:,.0f} output tok/s per cluster GPU at any load (its KV-read "
            "ceiling: each token after a request's first reads the request's KV cache, its prompt "
            "and half its output on average, at its GPU's memory bandwidth)"
        )
    if result.ceiling_limit == "decode":
        at_most = (
            f"at most {ceiling:,.0f} output tok/s per cluster GPU meeting the SLO at any load (its "
            "decode ceiling: its decoding workers' steps within the SLO's inter-token bounds)"
        )
    if ceiling * margin < best:
        return f"{at_most}, below the best timed so far ({best:,.0f}) / the margin {margin:g}"
    if objective in ONE_FIGURE and ceiling < best:
        return (
            f"not timed: {at_most}, {ceiling / best:.2f}x the best timed so far ({best:,.0f}): "
            "it cannot rank first"
        )
    return None


def client_rate(b: Bounds, sent: Workload) -> float:
    """The most output tokens/s a closed-loop client of ``sent`` gets from a candidate of
    bounds ``b`` (:meth:`recommend.bounds.Bounds.client_tokens_per_s` over its output
    lengths)."""
    return b.client_tokens_per_s(sent.shortest_output_tokens, sent.longest_output_tokens)


def first_load(
    result: Result,
    best: float,
    objective: Objective,
    problem: Problem,
    needed: float | None,
) -> int | None:
    """Clients below which ``result`` (queued, its bounds set) cannot rank first, given
    ``best``, the highest objective timed before it: ``c`` clients of a closed loop give at
    most ``c`` x :meth:`recommend.bounds.Bounds.client_tokens_per_s` output tokens/s (goodput
    included), so below ``best`` x the cluster's GPUs (:func:`cluster_gpus`) / that rate it
    cannot; the power of two at or below that (a power of the climb's own loads: a lower first
    load is as sound, and with few of them a timing done ahead with an older ``best`` is the
    one the newer gives more often, :func:`rebased`). Its load search stops once a load at or
    below them fails (:func:`recommend.load_search.highest_load`'s ``first``). None (its
    search as usual): under an objective of more than one figure (:data:`ONE_FIGURE`), under
    ``capacity`` (``needed`` set), for an open loop, or at 1 client or fewer (one that fails
    at 1 client meets the SLO at no load: ``slo-not-met``)."""
    b, sent = result.bounds, problem.sent
    if objective not in ONE_FIGURE or needed is not None or sent.open_loop or b is None:
        return None
    clients = math.ceil(best * cluster_gpus(problem.cfg) / client_rate(b, sent))
    if clients < 2:
        return None
    return 1 << (clients.bit_length() - 1)  # a power of two: the climb's load at or below


def first_load_reason(result: Result, sent: Workload) -> str:
    """Why ``result``, screened where a load at or below its first load failed
    (:attr:`Result.first_load`), is not timed further: ``cannot rank first: TTFT p99 binds at
    32 clients, and below 64 it cannot beat the best timed so far (a client gets at most 240
    output tok/s: its requests run one after another, each at least its TTFT floor 41 ms + 4.2
    ms a later token)``."""
    b, clients = result.bounds, result.first_load
    assert b is not None and clients is not None
    why = (
        f"a client gets at most {client_rate(b, sent):,.0f} output tok/s: its requests run one "
        f"after another, each at least its TTFT floor {ms_text(b.ttft_floor_ms)} + "
        f"{ms_text(b.itl_floor_ms)} a later token"
    )
    if result.over is None:
        return (
            f"cannot rank first: it would take at least {clients:,} clients to beat the best "
            f"timed so far, above the load cap ({CLIENTS_PER_GPU} clients per cluster GPU) "
            f"({why})"
        )
    return (
        f"cannot rank first: {result.binding} binds at {result.over.load_text()}, and below "
        f"{clients:,} it cannot beat the best timed so far ({why})"
    )


def rebased(timed: Result | None, first: int | None) -> Result | None:
    """``timed`` (a timing done with its own :attr:`Result.first_load`) as the load search with
    the first load ``first`` gives it, where that can be told (None: it cannot, or ``timed``
    is None). The two searches probe the same loads until a load at or below either first
    load fails: the same where they have one first load; and where ``timed`` was not stopped
    by its own and the lowest load it found failing (``over``) is above ``first`` (or none
    failed), no load at or below ``first`` failed, so the search with ``first`` is ``timed``
    too. A search stopped by its first load, or one that found a load at or below ``first``
    failing, would have stopped elsewhere: timed again."""
    if timed is None or timed.first_load == first:
        return timed
    stopped = timed.status == "screened"
    if stopped or (
        first is not None and timed.over is not None and timed.over.concurrency <= first
    ):
        return None
    return replace(timed, first_load=first)


def _time_ahead(
    pool: Any,
    jobs: int,
    queued: Sequence[Result],
    ahead: dict[tuple[Any, ...], Any],
    timed: Mapping[tuple[Any, ...], Result],
    args_of: Callable[[Result], TimingArgs],
    twins: Sequence[Sequence[str]],
) -> None:
    """Start timing in ``pool`` the first of ``queued`` (in order; each a mirror signature not
    timed or under way yet) until ``jobs`` timings are running (``ahead``, by signature, less
    those finished and not yet read: a worker done ahead of an earlier, longer timing takes
    the next at once). One that a bound settles once those before it are timed is discarded
    unread, and one whose first load (:func:`first_load`) has risen by its turn is taken as
    the search with the new one would give it, or timed again where that cannot be told
    (:func:`rebased`), so what is timed and reported does not depend on ``jobs``."""
    eligible = {mirror_signature(r.candidate, twins) for r in queued}
    for gone in [s for s in ahead if s not in eligible]:
        del ahead[gone]  # settled by a bound meanwhile: its result is never read
    for r in queued:
        if sum(not a.ready() for a in ahead.values()) >= jobs:
            return
        signature = mirror_signature(r.candidate, twins)
        if signature not in timed and signature not in ahead:
            ahead[signature] = pool.apply_async(_time_in_worker, (args_of(r),))


def cluster_gpus(cfg: StackConfig) -> int:
    """The cluster's physical GPUs: what every per-GPU figure divides by, so a candidate that
    leaves GPUs idle is charged for them (they are the cluster's)."""
    return sum(c.gpus for c in cfg.node_classes.values())


@dataclass(frozen=True)
class Problem:
    """What a search is asked: the cluster (its name, the prefix of every candidate's stack
    name; its raw config ``base`` and validated ``cfg``), the workload and the SLO."""

    cluster: str
    base: Mapping[str, Any]
    cfg: StackConfig
    load: LoadConfig
    slo: Slo
    workload: Workload | None = None

    @property
    def sent(self) -> Workload:
        """What is sent: ``workload``, else ``load``'s synthetic requests."""
        return self.workload if self.workload is not None else Workload(self.load)


def search(
    problem: Problem,
    candidates: Sequence[Candidate],
    *,
    objective: Objective = "goodput-per-gpu",
    margin: float = 1.25,
    jobs: int = 1,
    progress: Progress | None = None,
    store: TimedStore | None = None,
    headroom: float = DEFAULT_HEADROOM,
) -> list[Result]:
    """The staged search (the module docstring) over ``candidates`` of ``problem``'s cluster,
    timing in ``jobs`` processes; results ranked (``rank`` 1 first), then the rest by status
    and key. ``store``: where each timed candidate is kept as it finishes, and those it holds
    already are taken from (``--resume``): the same inputs give the same ranking either way.
    Under ``capacity`` each candidate is timed at the load needed (:func:`needed_load` with
    ``headroom``), with no rate-ceiling screen (a smaller deployment may hold the load on
    fewer GPUs whatever its tokens/s per cluster GPU), and ranked by :func:`rank_results`."""
    results: list[Result] = []
    load, slo, sent = problem.load, problem.slo, problem.sent
    needed = needed_load(load, headroom) if objective == "capacity" else None
    gpus = cluster_gpus(problem.cfg)
    twins = twin_classes(problem.cfg)
    timed: dict[tuple[Any, ...], Result] = {}  # by mirror_signature: the mirrors' timing
    best_value = 0.0
    done = 0
    # started first: its processes import the timing modules while the candidates are screened
    pool = (
        multiprocessing.get_context("spawn").Pool(jobs, initializer=_deaf_to_ctrl_c)
        if jobs > 1
        else None
    )

    def args_of(r: Result) -> TimingArgs:
        assert r.plan is not None
        ceiling = r.bounds.requests_per_s if r.bounds else math.inf
        first = first_load(r, best_value, objective, problem, needed)
        return (r.plan, load, slo, gpus, sent, ceiling, needed, first)

    ahead: dict[tuple[Any, ...], Any] = {}  # by mirror_signature: timings under way
    try:
        queue = _screen_or_queue(problem, candidates, results, objective)
        stored = _stored(store, queue)
        for i, result in enumerate(queue):
            assert result.ceiling_value is not None and result.bounds is not None
            if pool is not None:
                ahead_of = [
                    r
                    for r in queue[i:]
                    if bound_reason(r, best_value, margin, objective, needed) is None
                    and r.candidate.key not in stored
                ]
                _time_ahead(pool, jobs, ahead_of, ahead, timed, args_of, twins)
            reason = bound_reason(result, best_value, margin, objective, needed)
            if reason is not None:
                result.binding, result.reason = result.ceiling_limit, reason
            else:
                signature = mirror_signature(result.candidate, twins)
                t = timed.get(signature)
                if t is None:
                    args = args_of(result)
                    t = rebased(stored.get(result.candidate.key), args[-1])
                    if t is None:
                        under_way = ahead.pop(signature, None)
                        t = rebased(under_way.get() if under_way else None, args[-1])
                    if t is None:  # not timed yet, or with a first load that tells otherwise
                        t = time_candidate(*args)
                    timed[signature] = t
                if store is not None and stored.get(result.candidate.key) is not t:
                    store.put(result.candidate.key, timed_json(t))
                result.status, result.binding, result.runs = t.status, t.binding, t.runs
                result.best, result.over, result.unsteady = t.best, t.over, t.unsteady
                result.steady, result.saturated = t.steady, t.saturated
                result.first_load = t.first_load
                if t.status == "screened":
                    result.reason = first_load_reason(result, sent)
                if t.best is not None:
                    result.value = objective_value(t.best, objective)
                    best_value = max(best_value, result.value)
            done += 1
            if progress is not None:
                progress(done, len(queue))
    finally:
        if pool is not None:
            pool.terminate()
    return ranked(results, objective, needed)


def left_untimed(result: Result) -> bool:
    """Whether a bound left ``result`` untimed, or stopped its timing, because it cannot rank
    first or loses by more than the margin (not a floor: that one meets the SLO at no load)."""
    return result.status == "screened" and result.floor_over is None


def ranked(results: Sequence[Result], objective: Objective, needed: float | None) -> list[Result]:
    """``results`` ranked afresh (:func:`rank_results`, any earlier rank dropped), ranked
    first by rank, then the rest by status and key."""
    for r in results:
        r.rank, r.on_front, r.dominated_by = None, False, None
    rank_results(results, objective, needed)
    return sorted(results, key=_order)


def timed_json(result: Result) -> dict[str, Any]:
    """What timing found of a candidate, as JSON (:func:`timed_of` reads it back): its status,
    what binds, its runs, its figures at the highest load meeting the SLO and above it."""
    return {
        "status": result.status,
        "binding": result.binding,
        "runs": result.runs,
        "best": asdict(result.best) if result.best is not None else None,
        "over": asdict(result.over) if result.over is not None else None,
        "unsteady": result.unsteady,
        "steady": [asdict(f) for f in result.steady],
        "saturated": result.saturated,
        "first_load": result.first_load,
    }


def timed_of(data: Mapping[str, Any]) -> Result:
    """:func:`timed_json`'s result back (``candidate`` left to the caller)."""
    best, over = data["best"], data["over"]
    return Result(
        candidate=Candidate(groups=()),
        status=data["status"],
        binding=data["binding"],
        runs=data["runs"],
        best=_FIGURES.validate_python(best) if best is not None else None,
        over=_FIGURES.validate_python(over) if over is not None else None,
        unsteady=data.get("unsteady", ""),
        steady=tuple(_FIGURES.validate_python(f) for f in data.get("steady", ())),
        saturated=data.get("saturated", False),
        first_load=data.get("first_load"),
    )


def _stored(store: TimedStore | None, batch: Sequence[Result]) -> dict[str, Result]:
    """The candidates of ``batch`` ``store`` holds timed already, by key (one timed before the
    search kept ``steady``, or with a best load but no steady one (an open loop's rate searched
    before rates were searched as clients are), by a search that took the SLO to hold below
    any load that holds, is timed again)."""
    found = {}
    for r in batch:
        data = store.get(r.candidate.key) if store is not None else None
        if data is not None and "steady" in data and (data["best"] is None or data["steady"]):
            found[r.candidate.key] = timed_of(data)
    return found


_STATUS_ORDER: dict[Status, int] = {
    "ranked": 0,
    "validation-failed": 1,
    "short-of-load": 2,
    "slo-not-met": 3,
    "screened": 4,
    "refused": 5,
}


def _order(r: Result) -> tuple[bool, int, int, float, str]:
    """Ranked first by rank, then the rest by status; candidates short of the load needed by
    the load they hold, the most first; then by key."""
    held = held_load(r.best) if r.status == "short-of-load" and r.best is not None else 0.0
    return (r.rank is None, r.rank or 0, _STATUS_ORDER[r.status], -held, r.candidate.key)


def _beats(o: Result, r: Result) -> bool:
    """Whether ``o`` beats ``r`` on both tokens/s per GPU and per user (at least as good on
    each, better on one)."""
    a, b = r.best, o.best
    if a is None or b is None:
        return False
    gpu, user = a.tokens_per_s_per_gpu, a.tokens_per_s_per_user
    return (
        b.tokens_per_s_per_gpu >= gpu
        and b.tokens_per_s_per_user >= user
        and (b.tokens_per_s_per_gpu > gpu or b.tokens_per_s_per_user > user)
    )


def pareto_front(results: Sequence[Result]) -> set[str]:
    """Keys of the ranked results no other beats on both tokens/s per GPU and per user."""
    ranked = [r for r in results if r.best is not None and r.status == "ranked"]
    return {r.candidate.key for r in ranked if not any(_beats(o, r) for o in ranked)}


def held_load(figures: Figures) -> float:
    """The load ``figures`` were timed at, as :func:`stated_load` counts it: an open loop's
    rate, else the clients."""
    return figures.rate if figures.rate is not None else float(figures.concurrency)


def rank_results(
    results: Sequence[Result], objective: Objective, needed: float | None = None
) -> None:
    """Set ``rank`` of the ranked results: by the objective, then the key; ``pareto`` puts
    the Pareto front (:func:`pareto_front`) first, and sets each one's ``on_front`` or
    ``dominated_by``. Under ``capacity``, a ranked result that does not hold ``needed``
    becomes ``short-of-load``; those that hold it rank by the fewest GPUs they use, then
    goodput, then simplicity (:meth:`recommend.space.Candidate.simplicity`), then the key."""
    if objective == "capacity" and needed is not None:
        for r in results:
            r.needed = needed
            if r.status == "ranked" and r.best is not None and held_load(r.best) < needed:
                r.status = "short-of-load"
        holding = [r for r in results if r.status == "ranked" and r.value is not None]
        holding.sort(
            key=lambda r: (
                r.gpus,
                -(r.value or 0.0),
                r.candidate.simplicity(),
                r.candidate.key,
            )
        )
        for i, r in enumerate(holding, 1):
            r.rank = i
        return
    front = pareto_front(results) if objective == "pareto" else set()
    ranked = [r for r in results if r.status == "ranked" and r.value is not None]
    members = [r for r in ranked if r.candidate.key in front]
    for r in ranked if front else []:
        r.on_front = r.candidate.key in front
        beaten = [o for o in members if not r.on_front and _beats(o, r)]
        r.dominated_by = min(
            beaten, key=lambda o: (-(o.value or 0.0), o.candidate.key), default=None
        )
    ranked.sort(
        key=lambda r: (
            bool(front) and r.candidate.key not in front,
            -(r.value or 0.0),
            r.candidate.key,
        )
    )
    for i, r in enumerate(ranked, 1):
        r.rank = i
