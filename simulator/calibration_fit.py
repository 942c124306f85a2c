"""Fit the timing model's engine-step figures and the frontend's fixed cost to measured runs,
and score the simulation against measured figures (``testbed calibrate``, ``testbed simulate
--against``).

A :class:`Target` is one measured grid: the stack it ran, its load settings, its requests as
loadgen recorded them (``requests.parquet``: prompt and cached tokens per request, in send order)
and its grid points' figures (``summary.json``). The timing model re-times exactly those
requests (:func:`simulator.retime.retime_grid`, the same one ``testbed simulate`` uses) with a
candidate :class:`~steptime.roofline.EngineFit` for every worker and a candidate frontend cost,
and SciPy's Nelder-Mead minimises the mean squared log error over :data:`METRICS` at every
grid point, starting from the seed fit (:data:`steptime.fit.SEED_FIT`,
:data:`simulator.calibration.CONSTANTS`) and searching in log space within :data:`BOUNDS`. No
cluster and no Dynamo process is needed: the measured requests carry the routing and the
prefix-cache hits.

What is not fitted: the time-slicing efficiency (``CONSTANTS``), the KV path's figures
(:mod:`kvpath`), the host memory. In a disaggregated measured run a request's cached tokens are
the prefill worker's hit (what a real vLLM decode worker reports, :mod:`simulator.timing_model`),
while the timing model reads them as the decode worker's: the fit is meant for aggregated
runs, and a disaggregated target is scored, not fitted, in docs/simulation.md's worked example.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from loadgen.config import LoadConfig
from loadgen.results import GridResult, PointSummary
from loadgen.results_folder import load_results
from simulator.calibration import CONSTANTS
from simulator.retime import retime_grid
from simulator.timing_model import TimingConstants
from stackmodel.plan import StackPlan
from steptime.calibration_profile import ScoredValue
from steptime.fit import CALIBRATED, SEED_FIT
from steptime.roofline import EngineFit

METRICS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "requests_per_s")
"""The :class:`~loadgen.results.PointSummary` figures fitted and scored: TTFT p50 and p99 and
TPOT p50 (ms), requests/s. Not the inter-token latency p50: the median of one run's gaps jumps
between batch sizes where a worker's batch alternates."""

STEP_FIELDS = ("prefill_efficiency", "weights_efficiency", "kv_efficiency", "step_host_s")
"""The :class:`~steptime.roofline.EngineFit` fields fitted."""

FRONTEND_FIELD = "request_overhead_s"
"""The :class:`~simulator.timing_model.TimingConstants` field fitted where a frontend serves."""

BOUNDS = {
    "prefill_efficiency": (0.02, 1.0),
    "weights_efficiency": (0.02, 1.0),
    "kv_efficiency": (0.02, 1.0),
    "step_host_s": (1e-5, 0.05),
    "request_overhead_s": (1e-5, 0.2),
}
"""The search's range per field: efficiencies in (0, 1] (``EngineFit``'s bounds), host time
10 us-50 ms per step, frontend cost 10 us-200 ms per request (the seed fit: 2.06 ms, 33 ms)."""

SIMPLEX_SCALES = (0.5, 0.15, 0.04)
"""The Nelder-Mead searches, one after the other, each starting from the best point so far with
a simplex of this half-width in log space (0.5: each figure x 0.6 or x 1.65). The timing model's
loss has small jumps (a request joining an engine step earlier or later, a routing tie going the
other way): one narrow search from the seed fit can stop in one of them, far from the figures
(the calibration test's folder: prefill efficiency 0.85 for a folder simulated with 0.55)."""

LOSS_TOLERANCE = 1e-6
"""The loss (:func:`fit`'s: the mean over fitted values of ``ln(simulated / measured)`` squared,
dimensionless) below which no search is run or continued: 1e-6 is an rms error of 0.1%, well
inside what one measured run repeats to. A starting point already there (a folder simulated with
the starting figures) is kept as it is, with no search."""

FATOL = 1e-6
"""Nelder-Mead's ``fatol``, in :data:`LOSS_TOLERANCE`'s unit: a search stops when its simplex's
losses differ by at most this (and its points by at most :data:`XATOL`)."""

XATOL = 1e-2
"""Nelder-Mead's ``xatol``, in log space (natural log of each figure): 1e-2 is 1% of a figure.
SciPy stops a search only where both hold; a tighter ``xatol`` keeps the simplex shrinking over
the loss's small jumps after the loss has stopped falling: on the calibration CLI test's folder,
``xatol`` 1e-3 took 2.4 times the iterations of 1e-2 for a loss 6% lower."""

WITHIN = 0.25
"""A simulated value is "within" when it is within +-25% of the measured one (the seed's
comparison, :func:`simulator.seed.within`)."""


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
    """The target's grid points as the timing model gives them for its measured requests."""
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
                    point=f"K={measured.prefix_kinds} c={measured.concurrency}",
                    metric=metric,
                    measured=float(m),
                    simulated=float(s),
                    error=float(s) / float(m) - 1,
                )
            )
    return out


def within_count(values: Sequence[ScoredValue]) -> int:
    """How many of ``values`` are within :data:`WITHIN`."""
    return sum(abs(v.error) <= WITHIN + 1e-12 for v in values)


@dataclass(frozen=True)
class Search:
    """One Nelder-Mead search of :func:`fit`: its number (from 1) of ``of``, its simplex
    half-width in log space (:data:`SIMPLEX_SCALES`), the figures it fits, the best loss before
    and after it, its iterations and loss evaluations and its wall time (s); ``skipped``: not run,
    the loss being within :data:`LOSS_TOLERANCE` already."""

    number: int
    of: int
    scale: float
    names: tuple[str, ...]
    start_loss: float
    loss: float
    iterations: int
    evaluations: int
    seconds: float
    skipped: bool

    def line(self) -> str:
        """One line for the console."""
        head = f"search {self.number} of {self.of} (simplex +-{self.scale:g} in log space"
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


@dataclass(frozen=True)
class Fit:
    """The result of :func:`fit`: the engine fit, the constants (the frontend cost fitted or
    kept), whether the frontend cost was fitted, the loss at the start and at the end, the
    iterations, the fitted values beside the measured ones, and each search."""

    engine: EngineFit
    constants: TimingConstants
    frontend_fitted: bool
    start_loss: float
    loss: float
    iterations: int
    fitted: list[ScoredValue]
    searches: tuple[Search, ...]


def _candidate(
    names: Sequence[str], x: np.ndarray, base: TimingConstants
) -> tuple[TimingConstants, EngineFit]:
    values: dict[str, Any] = {}
    for name, value in zip(names, x, strict=True):
        low, high = BOUNDS[name]
        values[name] = min(max(math.exp(float(value)), low), high)
    engine = SEED_FIT.model_copy(
        update={
            **{k: values[k] for k in STEP_FIELDS},
            "label": CALIBRATED,
            "source": "testbed calibrate",
        }
    )
    constants = base
    if FRONTEND_FIELD in values:
        constants = dataclasses.replace(base, request_overhead_s=values[FRONTEND_FIELD])
    return constants, engine


def fit(
    targets: Sequence[Target],
    *,
    base: TimingConstants = CONSTANTS,
    maxiter: int = 150,
    progress: Callable[[Search], None] | None = None,
) -> Fit:
    """Fit :data:`STEP_FIELDS` (and :data:`FRONTEND_FIELD` where every target's stack has a
    Dynamo frontend) to the targets' :data:`METRICS` (mean squared log error, Nelder-Mead).

    ``maxiter``: Nelder-Mead iterations per simplex scale (:data:`SIMPLEX_SCALES`);
    ``progress(search)`` is called after each search (:class:`Search`). A search stops where it
    cannot improve (:data:`FATOL`, :data:`XATOL`) or once the loss is within
    :data:`LOSS_TOLERANCE`; no search runs once it is, the start included.

    Raises:
        ValueError: no targets, or targets without a figure to fit.
    """
    if not targets:
        raise ValueError("calibration needs at least one measured results folder")
    frontend = all(t.plan.cfg.topology.kind == "dynamo" for t in targets)
    names = (*STEP_FIELDS, FRONTEND_FIELD) if frontend else STEP_FIELDS
    start_values: Mapping[str, float] = {**SEED_FIT.model_dump(), **dataclasses.asdict(base)}
    start = np.array([math.log(start_values[n]) for n in names])
    evaluations = 0

    def values_at(x: np.ndarray) -> list[ScoredValue]:
        constants, engine = _candidate(names, x, base)
        return [v for t in targets for v in score(t, simulated_points(t, constants, engine))]

    def loss(x: np.ndarray) -> float:
        nonlocal evaluations
        values = values_at(x)
        if not values:
            raise ValueError("the measured folders hold no figure to fit (no successful runs?)")
        evaluations += 1
        return sum(math.log1p(v.error) ** 2 for v in values) / len(values)

    from scipy.optimize import OptimizeResult, minimize

    def good_enough(intermediate_result: OptimizeResult) -> None:
        if intermediate_result.fun <= LOSS_TOLERANCE:
            raise StopIteration  # SciPy's minimize ends the search, keeping its best point

    start_loss = loss(start)
    x, best, iterations = start, start_loss, 0
    searches = []
    for number, scale in enumerate(SIMPLEX_SCALES, start=1):
        began, before, counted = time.monotonic(), best, evaluations
        nit = 0
        if best > LOSS_TOLERANCE:
            found = minimize(
                loss,
                x,
                method="Nelder-Mead",
                callback=good_enough,
                options={
                    "maxiter": maxiter,
                    "xatol": XATOL,
                    "fatol": FATOL,
                    "initial_simplex": _simplex(x, scale),
                },
            )
            nit = int(found.nit)
            if found.fun <= best:
                x, best = found.x, float(found.fun)
        iterations += nit
        search = Search(
            number=number,
            of=len(SIMPLEX_SCALES),
            scale=scale,
            names=names,
            start_loss=before,
            loss=best,
            iterations=nit,
            evaluations=evaluations - counted,
            seconds=time.monotonic() - began,
            skipped=before <= LOSS_TOLERANCE,
        )
        searches.append(search)
        if progress is not None:
            progress(search)
    constants, engine = _candidate(names, x, base)
    return Fit(
        engine=engine,
        constants=constants,
        frontend_fitted=frontend,
        start_loss=start_loss,
        loss=best,
        iterations=iterations,
        fitted=values_at(x),
        searches=tuple(searches),
    )


def _simplex(x: np.ndarray, scale: float) -> np.ndarray:
    """A simplex of +-``scale`` (log space) around ``x``: a wide one first, so the search steps
    over the loss's small jumps (a request that joins one engine step earlier or later) and
    follows its trend, then narrower ones to settle."""
    signs = [1 if i % 2 else -1 for i in range(len(x))]
    return np.vstack(
        [x, *(x + scale * sign * row for sign, row in zip(signs, np.eye(len(x)), strict=True))]
    )
