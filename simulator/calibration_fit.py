"""Fit the timing model's engine-step figures and the frontend's fixed cost to measured runs,
and score the simulation against measured figures (``testbed calibrate``, ``testbed simulate
--against``).

A :class:`Target` is one measured grid: the stack it ran, its load settings, its requests as
loadgen recorded them (``requests.parquet``: prompt and cached tokens per request, in send order,
with their times) and its grid points' figures (``summary.json``). A :class:`Problem` re-times
the measured requests with a candidate value of every :data:`PARAMETERS` figure (the timing
model, :func:`simulator.timing_model.simulate_run`, on the stack's hardware,
:func:`simulator.hardware.run_topology`) and gives, per grid point and :data:`METRICS` figure,
the natural log of simulated / measured: the residuals. No cluster and no Dynamo process is
needed: the measured requests carry the routing and the prefix-cache hits.

Speed: the search times the first :data:`FIT_REQUESTS` requests of each run of the first
:data:`FIT_REPETITIONS` repetitions, and reads the measured figures from the same requests
(``requests.parquet`` re-summarised by :func:`measurement.stats.summarize_run`, the definitions
``summary.json`` holds), so both sides describe the same requests. The run is simulated with
``concurrency`` requests more than those scored, so that the last scored requests share their
engine steps with the requests that followed them as the measured ones did.

:func:`fit` runs SciPy's trust-region least squares (``least_squares``, ``trf``) in log space
within :data:`BOUNDS` on the parameters :mod:`simulator.calibration_checks` finds the data can
move, the others held at their prior (the stack's own figures); the Jacobian is by finite
differences, evaluated on the machine's cores (:data:`WORKERS`).

What is not fitted: the time-slicing efficiency (``CONSTANTS``), the KV path's figures
(:mod:`kvpath`), the host memory. In a disaggregated measured run a request's cached tokens are
the prefill worker's hit (what a real vLLM decode worker reports, :mod:`simulator.timing_model`),
while the timing model reads them as the decode worker's: the fit is meant for aggregated runs.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from measurement.results import GridResult, PointSummary, RunSummary
from measurement.stats import summarize_point, summarize_run
from metrics.latency import tpot_ms, ttft_ms
from outputs.folder_reader import load_results
from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology, stack_constants
from simulator.phase_scores import PhaseValue, missing_phases, score_phases
from simulator.records import timing_records
from simulator.retime import retime_grid, sim_requests
from simulator.timing_model import SimRequest, TimingConstants, simulate_run
from stackmodel.plan import StackPlan
from steptime.calibration_profile import ScoredValue
from steptime.fit import CALIBRATED, SEED_FIT
from steptime.roofline import EngineFit
from workload.config import LoadConfig

METRICS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "requests_per_s")
"""The :class:`~measurement.results.PointSummary` figures fitted and scored: TTFT p50 and p99 and
TPOT p50 (ms), requests/s. Not the inter-token latency p50: the median of one run's gaps jumps
between batch sizes where a worker's batch alternates."""

STEP_FIELDS = ("prefill_efficiency", "weights_efficiency", "kv_efficiency", "step_host_s")
"""The :class:`~steptime.roofline.EngineFit` fields fitted."""

FRONTEND_FIELD = "request_overhead_s"
"""The :class:`~simulator.timing_model.TimingConstants` field fitted where a frontend serves."""

PARAMETERS = (*STEP_FIELDS, FRONTEND_FIELD)
"""Every figure a calibration may fit, in this order."""

BOUNDS = {
    "prefill_efficiency": (0.02, 1.0),
    "weights_efficiency": (0.02, 1.0),
    "kv_efficiency": (0.02, 1.0),
    "step_host_s": (1e-5, 0.05),
    "request_overhead_s": (1e-5, 0.2),
}
"""The search's range per field: efficiencies in (0, 1] (``EngineFit``'s bounds), host time
10 us-50 ms per step, frontend cost 10 us-200 ms per request (the seed fit: 2.06 ms, 33 ms)."""

FIT_REQUESTS = 64
"""Requests of each run the search times and scores (the first, in send order; ``--fit-requests``).
The seed's kv-routing grid (8 points of 3 runs of 200 requests) then costs 560 requests an
evaluation (64 scored and ``concurrency`` more per point) instead of 4,800."""

FIT_REPETITIONS = 1
"""Repetitions of each grid point the search times (the first; ``--fit-repetitions``)."""

WORKERS = min(2, os.cpu_count() or 1)
"""Processes the finite-difference evaluations are spread over (the machine's cores, at most 2)."""

WITHIN = 0.25
"""A simulated value is "within" when it is within +-25% of the measured one (the seed's
comparison, :func:`simulator.seed.within`)."""

MISSING_RESIDUAL = math.log(10)
"""The residual of a value the candidate does not produce (a point whose requests all failed in
the simulation): as far off as a factor of 10."""


@dataclass(frozen=True)
class Target:
    """One measured grid: ``folder`` (its name in reports), the ``plan`` of the stack it ran, its
    ``grid`` (``result.json``: load settings, start), ``requests`` (``requests.parquet``) and
    ``points`` (``summary.json``)."""

    folder: str
    plan: StackPlan
    grid: GridResult
    requests: pd.DataFrame
    points: tuple[PointSummary, ...]

    @property
    def load(self) -> LoadConfig:
        """The load settings it was measured with."""
        return self.grid.config


def read_target(folder: Path, plan: StackPlan) -> Target:
    """The measured grid in a results folder (``testbed load``, the load step, or a
    simulation), to be simulated as the stack of ``plan``.

    Raises:
        FileNotFoundError, ValueError: no results there, or no ``result.json`` /
            ``requests.parquet`` (one line naming the folder).
    """
    loaded = load_results(folder)
    if loaded.grid is None or loaded.requests.empty:
        raise ValueError(
            f"{folder} has no result.json or no requests.parquet: calibration re-times the "
            "measured requests; point it at a folder testbed load or the load step wrote"
        )
    return Target(
        folder=str(folder),
        plan=plan,
        grid=loaded.grid,
        requests=loaded.requests,
        points=tuple(loaded.points),
    )


def simulated_points(
    target: Target, constants: TimingConstants = CONSTANTS, fit: EngineFit = SEED_FIT
) -> list[PointSummary]:
    """The target's grid points as the timing model gives them for all its measured requests."""
    result, _ = retime_grid(target.plan, target.load, target.grid, target.requests, constants, fit)
    return result.points


def score(target: Target, simulated: Sequence[PointSummary]) -> list[ScoredValue]:
    """:func:`score_points` of the target's measured points."""
    return score_points(target.folder, target.points, simulated)


def score_points(
    folder: str, measured_points: Sequence[PointSummary], simulated: Sequence[PointSummary]
) -> list[ScoredValue]:
    """Each :data:`METRICS` figure of each measured point (of ``folder``) beside the simulated
    one (points or figures missing on either side are left out)."""
    by_point = {(p.prefix_kinds, p.concurrency): p for p in simulated}
    out = []
    for measured in measured_points:
        sim = by_point.get((measured.prefix_kinds, measured.concurrency))
        if sim is None:
            continue
        for metric in METRICS:
            m, s = getattr(measured, metric), getattr(sim, metric)
            if m is None or s is None or m <= 0 or s <= 0:
                continue
            out.append(
                ScoredValue(
                    folder=folder,
                    point=point_label(measured),
                    metric=metric,
                    measured=float(m),
                    simulated=float(s),
                    error=float(s) / float(m) - 1,
                )
            )
    return out


def point_label(point: PointSummary) -> str:
    """``K=<prefix kinds> c=<concurrency>``."""
    return f"K={point.prefix_kinds} c={point.concurrency}"


def within_count(values: Sequence[ScoredValue]) -> int:
    """How many of ``values`` are within :data:`WITHIN`."""
    return sum(abs(v.error) <= WITHIN + 1e-12 for v in values)


FIT_STATISTICS = ("ttft_cold_ms", "ttft_warm_ms", "tpot_ms", "requests_per_s")
"""What the search fits, per grid point, over the point's scored requests that succeeded: the
geometric mean of TTFT of the requests without a prefix-cache hit (``cold``: the measured
cached tokens 0 or unreported) and of those with one (``warm``), the geometric mean of TPOT
(:func:`metrics.latency.ttft_ms`, :func:`metrics.latency.tpot_ms`), and requests/s (requests
over first send to last token, the mean over the point's runs). Means, not :data:`METRICS`' p50 and
p99: a percentile is one request's time and jumps when a request joins an engine step earlier
or later; a mean over the requests moves smoothly with the figures, which the search and the
intervals need. The two TTFTs tell the prefill (the cold prompts' uncached tokens) from the
frontend's fixed cost (most of a warm request's TTFT). :data:`METRICS` are scored.

Not the TTFT phases a Dynamo frontend times per request (:meth:`Problem.phase_values` reports
them after the fit): its prefill leg holds its own request-plane hops to the worker and the
first token's way back, which the timing model charges to the fixed cost before routing
(``request_overhead_s``), and its prefill wait only part of that cost (the rest is the
residual). Fitted beside TTFT, the prefill leg moved the prefill and decode figures to explain
those hops: on a kv-routing folder measured with the real frontend and mocker workers (2 x 2
points, 24 requests a run) the held-out score fell from 12 to 9 of 16 values within +-25%."""


@dataclass(frozen=True)
class PreparedRun:
    """One measured run as the search times it: its grid key, the requests simulated (the
    scored ones and up to ``concurrency`` more), how many of them are scored, which of them
    had a prefix-cache hit (by index), and the measured records of the scored ones."""

    key: tuple[int, int, int]
    requests: tuple[SimRequest, ...]
    scored: int
    warm: frozenset[int]
    measured: tuple[RequestRecord, ...]

    @property
    def point(self) -> str:
        """``K=<prefix kinds> c=<concurrency>``."""
        return f"K={self.key[0]} c={self.key[1]}"


ValueKey = tuple[int, str, str]
"""A value: (target number, point label, statistic or metric)."""


def _records(frame: pd.DataFrame) -> list[RequestRecord]:
    """The :class:`RequestRecord`\\ s of ``requests.parquet`` rows (what
    :func:`outputs.folder_writer.records_frame` wrote), in send order."""
    names = [f.name for f in dataclasses.fields(RequestRecord) if f.name in frame.columns]
    out = []
    for row in frame.sort_values("index")[names].to_dict("records"):
        values: dict[str, Any] = {}
        for name, value in row.items():
            if isinstance(value, np.ndarray):
                value = [int(v) for v in value]
            elif value is not None and not isinstance(value, list | str) and pd.isna(value):
                value = None
            values[name] = value
        if values.get("error_kind") is not None:
            values["error_kind"] = ErrorKind(values["error_kind"])
        out.append(RequestRecord(**values))
    return out


def _prepare(
    target: Target, requests: int | None, repetitions: int | None
) -> tuple[PreparedRun, ...]:
    """The target's runs the search times: the first ``repetitions`` of each point (None: all),
    each with its first ``requests`` requests scored (None: all)."""
    out = []
    keys = ["prefix_kinds", "concurrency", "repetition"]
    for (kinds, conc, rep), frame in target.requests.groupby(keys):
        if repetitions is not None and rep > repetitions:
            continue
        ordered = frame.sort_values("index")
        scored = len(ordered) if requests is None else min(requests, len(ordered))
        records = _records(ordered.iloc[:scored])
        key = (int(kinds), int(conc), int(rep))
        out.append(
            PreparedRun(
                key=key,
                requests=tuple(sim_requests(ordered.iloc[: scored + conc], target.load, key)),
                scored=scored,
                warm=frozenset(r.index for r in records if (r.cached_tokens or 0) > 0),
                measured=tuple(records),
            )
        )
    return tuple(out)


def fit_statistics(
    runs: Sequence[tuple[PreparedRun, Sequence[RequestRecord]]],
) -> dict[tuple[str, str], float]:
    """:data:`FIT_STATISTICS` of each point of ``runs`` (each run with its scored records, in
    send order), keyed (point, statistic); a statistic with no request is left out."""
    logs: dict[tuple[str, str], list[float]] = {}
    rates: dict[str, list[float]] = {}
    for run, records in runs:
        good = [r for r in records if r.error_kind is None and r.first_token_ns is not None]
        for r in good:
            ttft = ttft_ms(r)
            if ttft is not None and ttft > 0:
                kind = "ttft_warm_ms" if r.index in run.warm else "ttft_cold_ms"
                logs.setdefault((run.point, kind), []).append(math.log(ttft))
            tpot = tpot_ms(r)
            if tpot is not None and tpot > 0:
                logs.setdefault((run.point, "tpot_ms"), []).append(math.log(tpot))
        if good:
            first = min(r.sent_ns or 0 for r in good)
            last = max(r.last_token_ns or 0 for r in good)
            if last > first:
                rates.setdefault(run.point, []).append(len(good) / ((last - first) / 1e9))
    out = {key: math.exp(sum(v) / len(v)) for key, v in logs.items()}
    out |= {(point, "requests_per_s"): sum(v) / len(v) for point, v in rates.items()}
    return out


def candidate(
    values: Mapping[str, float], base: TimingConstants
) -> tuple[TimingConstants, EngineFit]:
    """The timing constants and engine fit of a candidate: ``values`` of :data:`PARAMETERS`
    (those absent keep ``base``'s and the seed fit's)."""
    engine = SEED_FIT.model_copy(
        update={
            **{k: values[k] for k in STEP_FIELDS if k in values},
            "label": CALIBRATED,
            "source": "testbed calibrate",
        }
    )
    constants = base
    if FRONTEND_FIELD in values:
        constants = dataclasses.replace(base, request_overhead_s=values[FRONTEND_FIELD])
    return constants, engine


class Problem:
    """The calibration of ``targets`` (one stack's runs): what is fitted, from where, and the
    residuals at any candidate.

    ``names``: the :data:`PARAMETERS` that apply (the frontend's cost only where every target's
    stack has a Dynamo frontend); ``prior``: their values in the targets' first stack (its
    first worker group's fit, the frontend cost its calibration profile or
    :data:`simulator.calibration.CONSTANTS` gives), log space; ``lower``/``upper``:
    :data:`BOUNDS` in log space; ``runs``: per target, its :class:`PreparedRun`\\ s
    (``requests``/``repetitions``: see :func:`_prepare`); ``keys``: the values fitted
    (:data:`FIT_STATISTICS` per point) and ``measured`` their measured figures;
    ``measured_metrics``: :data:`METRICS` of the same requests, as scored.

    Raises:
        ValueError: no targets, or targets without a figure to fit.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        requests: int | None = FIT_REQUESTS,
        repetitions: int | None = FIT_REPETITIONS,
        base: TimingConstants | None = None,
    ) -> None:
        if not targets:
            raise ValueError("calibration needs at least one measured results folder")
        self.targets = tuple(targets)
        plan = targets[0].plan
        self.base = base if base is not None else stack_constants(plan)
        frontend = all(t.plan.cfg.topology.kind == "dynamo" for t in targets)
        self.names: tuple[str, ...] = PARAMETERS if frontend else STEP_FIELDS
        prior = plan.groups[0].step.fit.model_dump() | dataclasses.asdict(self.base)
        self.prior = np.array([math.log(prior[n]) for n in self.names])
        self.lower = np.array([math.log(BOUNDS[n][0]) for n in self.names])
        self.upper = np.array([math.log(BOUNDS[n][1]) for n in self.names])
        self.runs = tuple(_prepare(t, requests, repetitions) for t in targets)
        self.measured: dict[ValueKey, float] = {}
        self.measured_metrics: dict[ValueKey, float] = {}
        for number, runs in enumerate(self.runs):
            stats = fit_statistics([(run, run.measured) for run in runs])
            self.measured |= {(number, *key): value for key, value in stats.items()}
            self.measured_metrics |= self._metrics(number, runs, [r.measured for r in runs])
        if not self.measured:
            raise ValueError("the measured folders hold no figure to fit (no successful runs?)")
        self.keys: tuple[ValueKey, ...] = tuple(self.measured)

    def values_at(self, x: np.ndarray) -> dict[str, float]:
        """The figures of a point of the search (log space, clipped to the bounds)."""
        clipped = np.clip(x, self.lower, self.upper)
        return {n: math.exp(float(v)) for n, v in zip(self.names, clipped, strict=True)}

    def timed(
        self, number: int, values: Mapping[str, float], runs: Sequence[PreparedRun]
    ) -> list[list[RequestRecord]]:
        """Target ``number``'s ``runs`` as the timing model times them with ``values``: each
        run's scored records, in send order."""
        constants, engine = candidate(values, self.base)
        topology = run_topology(self.targets[number].plan, engine)
        out = []
        for run in runs:
            timing = simulate_run(topology, constants, run.requests, run.key[1])
            records = sorted(timing_records(timing, run.requests, 0.0), key=lambda r: r.index)
            out.append(records[: run.scored])
        return out

    @staticmethod
    def _summaries(
        runs: Sequence[PreparedRun], records: Sequence[Sequence[RequestRecord]]
    ) -> list[PointSummary]:
        """The grid points of ``runs`` (their scored ``records``), as loadgen summarises them."""
        return _points(
            [
                summarize_run(
                    list(r), prefix_kinds=run.key[0], concurrency=run.key[1], repetition=run.key[2]
                )
                for run, r in zip(runs, records, strict=True)
            ]
        )

    @staticmethod
    def _metrics(
        number: int, runs: Sequence[PreparedRun], records: Sequence[Sequence[RequestRecord]]
    ) -> dict[ValueKey, float]:
        """:data:`METRICS` of each point of ``runs`` (their scored ``records``)."""
        out = {}
        for point in Problem._summaries(runs, records):
            for metric in METRICS:
                value = getattr(point, metric)
                if value is not None and value > 0:
                    out[(number, point_label(point), metric)] = float(value)
        return out

    def _chosen(self, only: Sequence[ValueKey] | None) -> list[tuple[int, list[PreparedRun]]]:
        wanted = None if only is None else {(k[0], k[1]) for k in only}
        out = []
        for number, runs in enumerate(self.runs):
            chosen = [r for r in runs if wanted is None or (number, r.point) in wanted]
            if chosen:
                out.append((number, chosen))
        return out

    def residuals(self, x: np.ndarray, only: Sequence[ValueKey] | None = None) -> np.ndarray:
        """ln(simulated / measured) of each fitted value of ``only`` (else :attr:`keys`), in
        order, at ``x``."""
        keys = self.keys if only is None else only
        values = self.values_at(x)
        simulated: dict[ValueKey, float] = {}
        for number, runs in self._chosen(keys):
            timed = self.timed(number, values, runs)
            stats = fit_statistics(list(zip(runs, timed, strict=True)))
            simulated |= {(number, *key): value for key, value in stats.items()}
        return _log_ratios(keys, simulated, self.measured)

    def metric_residuals(self, x: np.ndarray, only: Sequence[ValueKey]) -> np.ndarray:
        """ln(simulated / measured) of each :data:`METRICS` value of ``only``, at ``x``."""
        values = self.values_at(x)
        simulated: dict[ValueKey, float] = {}
        for number, runs in self._chosen(only):
            simulated |= self._metrics(number, runs, self.timed(number, values, runs))
        return _log_ratios(only, simulated, self.measured_metrics)

    def phase_values(self, x: np.ndarray) -> tuple[list[PhaseValue], str | None]:
        """Each target's TTFT phases at ``x`` beside the measured ones of the same scored
        requests (:func:`simulator.phase_scores.score_phases`), and the first target's
        :func:`~simulator.phase_scores.missing_phases` line where a side has none."""
        values = self.values_at(x)
        out: list[PhaseValue] = []
        notes = []
        for number, runs in enumerate(self.runs):
            folder = self.targets[number].folder
            measured = self._summaries(runs, [r.measured for r in runs])
            simulated = self._summaries(runs, self.timed(number, values, runs))
            out += score_phases(folder, measured, simulated)
            notes.append(missing_phases(folder, measured, simulated))
        return out, next((n for n in notes if n is not None), None)

    def metric_keys(self, points: Sequence[tuple[int, str]] | None = None) -> list[ValueKey]:
        """The :data:`METRICS` values scored (of ``points``, else all)."""
        return [k for k in self.measured_metrics if points is None or (k[0], k[1]) in points]

    def scored_values(self, keys: Sequence[ValueKey], residuals: np.ndarray) -> list[ScoredValue]:
        """The :data:`METRICS` values ``keys`` with their residuals as
        :class:`ScoredValue`\\ s."""
        out = []
        for (number, point, metric), r in zip(keys, residuals, strict=True):
            measured = self.measured_metrics[(number, point, metric)]
            out.append(
                ScoredValue(
                    folder=self.targets[number].folder,
                    point=point,
                    metric=metric,
                    measured=measured,
                    simulated=measured * math.exp(float(r)),
                    error=math.expm1(float(r)),
                )
            )
        return out


def _log_ratios(
    keys: Sequence[ValueKey],
    simulated: Mapping[ValueKey, float],
    measured: Mapping[ValueKey, float],
) -> np.ndarray:
    return np.array(
        [math.log(simulated[k] / measured[k]) if k in simulated else MISSING_RESIDUAL for k in keys]
    )


def _points(summaries: Iterator[RunSummary] | Sequence[RunSummary]) -> list[PointSummary]:
    """The runs' grid points (:func:`measurement.stats.summarize_point`), in first-seen order."""
    by_point: dict[tuple[int, int], list[RunSummary]] = {}
    for s in summaries:
        by_point.setdefault((s.prefix_kinds, s.concurrency), []).append(s)
    return [summarize_point(runs) for runs in by_point.values()]


LOSS_TOLERANCE = 1e-6
"""The loss (the mean over fitted values of ``ln(simulated / measured)`` squared, dimensionless)
below which no search is run: 1e-6 is an rms error of 0.1%, well inside what one measured run
repeats to. A start already there (a folder simulated with the prior's figures) is kept."""

SEARCH_STEPS = (0.1,)
"""The searches, one after the other, each from the best point so far: the finite-difference
step of its Jacobian in log space (0.1: each figure x 1.105), wide enough to follow the
residuals' trend over their small jumps (a request joining an engine step earlier or later). A
second search with a narrower step (0.03) lowered the loss on the seed's kv-routing folder by
2% (0.001864 -> 0.001833) for 15 more evaluations: one search."""

SEARCH_EVALUATIONS = 16
"""Residual evaluations a search may take besides its Jacobians (SciPy's ``max_nfev``): the
least-squares iterations; each iteration also evaluates one Jacobian (one evaluation per
fitted figure)."""

XTOL = 1e-3
"""SciPy's ``xtol`` (the step's size relative to the point, log space): a search stops once its
steps change the figures by less than 0.1%."""

FTOL = 1e-4
"""SciPy's ``ftol``: a search stops once an iteration lowers the loss by less than 0.01% of it."""


_SHARED: Problem | None = None
"""The problem the worker processes evaluate (inherited when they fork)."""


Job = tuple[str, np.ndarray, Sequence[ValueKey] | None]
"""An evaluation: ``residuals`` (the fitted values) or ``metric_residuals`` (:data:`METRICS`),
at a point, of some values (None: all fitted)."""


def _evaluate(problem: Problem, job: Job) -> np.ndarray:
    kind, x, only = job
    if kind == "metrics":
        return problem.metric_residuals(x, only or ())
    return problem.residuals(x, only)


def _in_worker(job: Job) -> np.ndarray:
    assert _SHARED is not None
    return _evaluate(_SHARED, job)


def _deaf_to_ctrl_c() -> None:
    """A worker ignores SIGINT (the terminal sends it to the whole group): the command that
    started the pool terminates it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Evaluator:
    """Residual evaluations of a :class:`Problem`, spread over ``workers`` processes (forked, so
    they share the problem's prepared runs); counts them and calls ``on_evaluation(count)``
    after each. Use as a context manager: the pool is terminated on exit, Ctrl-C included."""

    def __init__(
        self,
        problem: Problem,
        *,
        workers: int = WORKERS,
        on_evaluation: Callable[[int], None] | None = None,
    ) -> None:
        self.problem = problem
        self.workers = workers
        self.on_evaluation = on_evaluation
        self.count = 0
        self._pool: Any = None

    def __enter__(self) -> Evaluator:
        global _SHARED
        if self.workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            _SHARED = self.problem
            context = multiprocessing.get_context("fork")
            self._pool = context.Pool(self.workers, initializer=_deaf_to_ctrl_c)
        return self

    def __exit__(self, *exc: object) -> None:
        global _SHARED
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
        _SHARED = None

    def _counted(self, residuals: np.ndarray) -> np.ndarray:
        self.count += 1
        if self.on_evaluation is not None:
            self.on_evaluation(self.count)
        return residuals

    def one(self, x: np.ndarray, only: Sequence[ValueKey] | None = None) -> np.ndarray:
        """The fitted values' residuals at ``x`` (of ``only``, else every one)."""
        return self._counted(self.problem.residuals(x, only))

    def many(self, jobs: Sequence[Job]) -> list[np.ndarray]:
        """The residuals of each job, on the workers where there are several."""
        if self._pool is None or len(jobs) < 2:
            return [self._counted(_evaluate(self.problem, job)) for job in jobs]
        return [self._counted(r) for r in self._pool.imap(_in_worker, jobs)]


def loss_of(residuals: np.ndarray) -> float:
    """The mean squared log error of residuals (dimensionless)."""
    return float(np.mean(residuals**2)) if len(residuals) else 0.0


def jacobian(
    evaluator: Evaluator,
    x: np.ndarray,
    r0: np.ndarray,
    columns: Sequence[int],
    step: float,
) -> np.ndarray:
    """d residual / d ln figure for each of ``columns`` of ``x`` (finite differences of ``step``
    in log space, taken inward at an upper bound), one row per value."""
    problem = evaluator.problem
    moved = []
    for j in columns:
        xj = x.copy()
        h = step if x[j] + step <= problem.upper[j] else -step
        xj[j] = x[j] + h
        moved.append((xj, h))
    results = evaluator.many([("fit", xj, None) for xj, _ in moved])
    return (
        np.column_stack([(r - r0) / h for r, (_, h) in zip(results, moved, strict=True)])
        if moved
        else np.zeros((len(r0), 0))
    )


@dataclass(frozen=True)
class Search:
    """One least-squares search of :func:`search`: its number (from 1) of ``of``, its
    finite-difference step (log space, :data:`SEARCH_STEPS`), the figures it fits, the loss
    before and after it, its iterations, evaluations and wall time (s); ``skipped``: not run,
    the loss being within :data:`LOSS_TOLERANCE` already."""

    number: int
    of: int
    step: float
    names: tuple[str, ...]
    start_loss: float
    loss: float
    iterations: int
    evaluations: int
    seconds: float
    skipped: bool

    def line(self) -> str:
        """One line for the console."""
        head = (
            f"search {self.number} of {self.of} (least squares, steps of {self.step:g} in log space"
        )
        if self.skipped:
            return (
                f"{head}): skipped, loss {self.start_loss:.2e} is within the tolerance "
                f"{LOSS_TOLERANCE:.0e} already"
            )
        return (
            f"{head}) of {', '.join(self.names)}: loss {self.start_loss:.4g} -> {self.loss:.4g} "
            f"({self.iterations} iterations, {self.evaluations} evaluations, "
            f"{self.seconds:.1f} s)"
        )


def _least_squares(
    evaluator: Evaluator, x: np.ndarray, free: Sequence[int], step: float, max_evaluations: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """One trust-region search of the figures at ``free`` from ``x`` (the others held), its
    Jacobian by finite differences of ``step``: the point it ends at, its residuals, the
    Jacobian there and the iterations (Jacobians) it took."""
    from scipy.optimize import least_squares

    problem = evaluator.problem
    columns = list(free)
    cache: dict[bytes, np.ndarray] = {}

    def full(z: np.ndarray) -> np.ndarray:
        point = x.copy()
        point[columns] = z
        return point

    def fun(z: np.ndarray) -> np.ndarray:
        point = full(z)
        cache[point.tobytes()] = evaluator.one(point)
        return cache[point.tobytes()]

    def jac(z: np.ndarray) -> np.ndarray:
        point = full(z)
        r0 = cache.get(point.tobytes())
        return jacobian(evaluator, point, fun(z) if r0 is None else r0, columns, step)

    lower, upper = problem.lower[columns], problem.upper[columns]
    found = least_squares(
        fun,
        np.clip(x[columns], lower, upper),
        jac=jac,
        bounds=(lower, upper),
        method="trf",
        xtol=XTOL,
        ftol=FTOL,
        max_nfev=max_evaluations,
    )
    end = full(found.x)
    r = cache.get(end.tobytes())
    return end, evaluator.one(end) if r is None else r, np.asarray(found.jac), int(found.njev or 0)


def search(
    evaluator: Evaluator,
    start: np.ndarray,
    free: Sequence[int],
    *,
    max_evaluations: int = SEARCH_EVALUATIONS,
    on_search: Callable[[Search], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Search]]:
    """Fit the figures at indices ``free`` of ``start`` (log space; the others held): one
    trust-region least-squares search per :data:`SEARCH_STEPS`, each from the best point so
    far; ``on_search`` is called as each ends. Returns the best point, its residuals, the
    Jacobian of the free figures there (the last search's; empty columns when none ran) and
    the searches."""
    problem = evaluator.problem
    x = start.copy()
    r = evaluator.one(x)
    names = tuple(problem.names[j] for j in free)
    last_jacobian = np.zeros((len(r), 0))
    searches: list[Search] = []
    for number, step in enumerate(SEARCH_STEPS, start=1):
        began, before, counted = time.monotonic(), loss_of(r), evaluator.count
        iterations = 0
        skipped = before <= LOSS_TOLERANCE or not free
        if not skipped:
            found_x, found_r, found_j, iterations = _least_squares(
                evaluator, x, free, step, max_evaluations
            )
            if loss_of(found_r) <= before:
                x, r, last_jacobian = found_x, found_r, found_j
        searches.append(
            Search(
                number=number,
                of=len(SEARCH_STEPS),
                step=step,
                names=names,
                start_loss=before,
                loss=loss_of(r),
                iterations=iterations,
                evaluations=evaluator.count - counted,
                seconds=time.monotonic() - began,
                skipped=skipped,
            )
        )
        if on_search is not None:
            on_search(searches[-1])
    return x, r, last_jacobian, searches
