"""What measured runs can tell of the timing model's figures, and how far to trust a fit
(``testbed calibrate``): which figures the data can move (:func:`identify`, before any search),
an interval for each fitted figure (:func:`intervals`), the figures that ended at a bound, and
the fit's error on grid points it did not see (:func:`held_out`); :func:`calibrate` runs them
with the search (:mod:`simulator.calibration_fit`) in that order.

Every figure is handled in log space, and every value as ``r = ln(simulated / measured)``: the
sensitivity of value i to figure j is ``J[i, j] = d r_i / d ln figure_j`` (finite differences,
:func:`simulator.calibration_fit.jacobian`).

- **Identifiability**: a column-pivoted QR of ``J`` at the prior (the stack's own figures) orders
  the figures by how much of their effect no figure before them explains; a figure whose
  unexplained part is below :data:`MIN_SENSITIVITY` is held at its prior and reported, with the
  measurement that would pin it (:data:`PINNED_BY`). A figure "moves" a value where
  ``|J[i, j]| >= MOVES``.
- **Intervals**: a profile likelihood of each fitted figure, taking the values' errors as
  independent and normal in log space with the spread ``sigma`` (the fit's rms residual,
  corrected for the figures fitted, at least :data:`NOISE_FLOOR` and at least the model's own
  roughness, :data:`ROUGHNESS_STEP`). The other fitted figures
  follow the figure along their Gauss-Newton conditional optimum; the loss is evaluated at the
  linear approximation's 95% end on each side and the end moved to where a parabola through
  the optimum and that point crosses the chi-square threshold (:data:`CHI2_95`).
- **Held out**: leave-one-point-out: for each grid point, the fit without that point's values
  (one Gauss-Newton step from the full fit, the figures it cannot then pin back at their prior)
  predicts that point; its errors are the held-out score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.calibration_fit import (
    XTOL,
    Evaluator,
    Problem,
    Search,
    ValueKey,
    jacobian,
    loss_of,
    search,
)
from simulator.phase_scores import PhaseValue
from steptime.calibration_profile import FittedFigure, ScoredValue

FD_STEP = 0.1
"""The finite-difference step of the identifiability Jacobian, log space (each figure x 1.105):
wide enough to step over the timing model's small jumps."""

NOISE_FLOOR = 0.03
"""The smallest spread taken for a measured value, log space (3%): the repeatability of one
grid point's figure over repeated runs (the seed's three repetitions of a kv-routing point: the
95% interval of a TTFT p50 within a few percent of it). A fit to a simulated folder has residuals
near 0; its intervals are those of a measurement this repeatable."""

CHI2_95 = 3.841
"""The 95% quantile of chi-square with one degree of freedom: a profile likelihood interval's
rise of the sum of squared residuals over sigma squared."""

ROUGHNESS_STEP = 1e-3
"""How far (log space, 0.1% of each figure, alternately up and down) :func:`intervals` moves the
fitted figures to measure the residuals' roughness: a smooth model moves every value by about
0.1% of its sensitivity; where a request joins another engine step, or the timing model's KV
router sends it to another worker, a value jumps by more. Half the jumps' mean square (two
independent draws differ by sqrt 2 of one) is taken as the model's own noise per value, and
sigma is at least that: on a rough model the fit's point is one of many as good, and the
intervals widen to say so."""

MIN_SENSITIVITY = 1.96 * NOISE_FLOOR / math.log(2)
"""The least unexplained sensitivity (norm over the values of ``d r / d ln figure`` after
projecting out the figures pinned before it) of a figure that is fitted: with values of
:data:`NOISE_FLOOR` spread, its 95% interval is then within a factor of 2 each way (0.085)."""

MOVES = 0.05
"""A figure moves a value where ``|d r / d ln figure| >= 0.05``: 10% on the figure, 0.5% on the
value."""

AT_BOUND = 0.01
"""A fitted figure within 1% (log space) of a bound of :data:`~simulator.calibration_fit.BOUNDS`
is at it."""

PINNED_BY = {
    "prefill_efficiency": "TTFT of long uncached prompts: a point with more prefix kinds than "
    "its runs reuse, at concurrency 1-2",
    "weights_efficiency": "TPOT at concurrency 1 (a decode step of one request reads the weights "
    "once)",
    "kv_efficiency": "a point with cached prefixes at concurrency >= 4 (the KV read grows with "
    "the batch and its context)",
    "step_host_s": "TPOT at concurrency 1 and at concurrency >= 4 (the host time per step does "
    "not grow with the batch; the KV read does)",
    "request_overhead_s": "TTFT at concurrency 1 with cached prompts (the frontend's fixed cost "
    "is then most of it)",
}
"""Per figure: the measurement that would pin it, named where the data cannot."""


@dataclass(frozen=True)
class Identification:
    """Which figures the data can move: ``fitted`` (in the order the pivoted QR took them),
    ``held`` (at their prior), each figure's unexplained ``sensitivity`` and the values it
    ``moves`` (:data:`MOVES`)."""

    fitted: tuple[str, ...]
    held: tuple[str, ...]
    sensitivity: dict[str, float]
    moves: dict[str, tuple[ValueKey, ...]]
    values: int

    def lines(self) -> list[str]:
        """One line per figure: what it rests on, and for a held one what would pin it."""
        out = []
        for name in (*self.fitted, *self.held):
            rests = _rests_on(self.moves[name])
            if name in self.fitted:
                out.append(f"{name}: fitted, rests on {rests}")
            else:
                out.append(
                    f"{name}: not identifiable (moves {rests}; unexplained sensitivity "
                    f"{self.sensitivity[name]:.3f} < {MIN_SENSITIVITY:.3f}), held at its prior; "
                    f"needs {PINNED_BY[name]}"
                )
        return out


def _rests_on(keys: Sequence[ValueKey]) -> str:
    """``3 values (K=4 c=1: ttft_p50_ms, ttft_p99_ms; K=4 c=8: tpot_p50_ms)``."""
    if not keys:
        return "no value"
    by_point: dict[tuple[int, str], list[str]] = {}
    for number, point, metric in keys:
        by_point.setdefault((number, point), []).append(metric)
    points = "; ".join(f"{point}: {', '.join(m)}" for (_, point), m in by_point.items())
    return f"{len(keys)} value(s) at {len(by_point)} point(s) ({points})"


def pivoted(j: np.ndarray) -> tuple[list[int], list[float]]:
    """The columns of ``j`` in the order a column-pivoted QR takes them, and each one's
    unexplained sensitivity (``|R[k, k]|``; 0 past the matrix's rank)."""
    from scipy.linalg import qr

    if j.shape[1] == 0:
        return [], []
    _, r, order = qr(j, mode="economic", pivoting=True)
    diagonal = [abs(float(r[k, k])) if k < min(r.shape) else 0.0 for k in range(j.shape[1])]
    return [int(c) for c in order], diagonal


def identify(problem: Problem, j: np.ndarray) -> Identification:
    """Which of the problem's figures the values can move, from ``j`` (every figure's column
    at the prior): see the module docstring."""
    order, diagonal = pivoted(j)
    fitted: list[str] = []
    sensitivity = {}
    for column, value in zip(order, diagonal, strict=True):
        name = problem.names[column]
        sensitivity[name] = value
        if value >= MIN_SENSITIVITY and len(fitted) == len(sensitivity) - 1:
            fitted.append(name)
    held = [n for n in problem.names if n not in fitted]
    moves = {
        name: tuple(k for k, d in zip(problem.keys, j[:, c], strict=True) if abs(d) >= MOVES)
        for c, name in enumerate(problem.names)
    }
    return Identification(
        fitted=tuple(n for n in problem.names if n in fitted),
        held=tuple(held),
        sensitivity=sensitivity,
        moves=moves,
        values=len(problem.keys),
    )


def sigma_of(residuals: np.ndarray, fitted: int) -> float:
    """The spread of one value (log space): the rms residual over the degrees of freedom left,
    at least :data:`NOISE_FLOOR`."""
    free = len(residuals) - fitted
    rms = math.sqrt(float(np.sum(residuals**2)) / free) if free > 0 else 0.0
    return max(rms, NOISE_FLOOR)


def _direction(j: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """The direction along which column ``k``'s figure moves with the others at their
    linearised conditional optimum, and ``k``'s unexplained sensitivity."""
    others = [c for c in range(j.shape[1]) if c != k]
    d = np.zeros(j.shape[1])
    d[k] = 1.0
    if others:
        coefficients, *_ = np.linalg.lstsq(j[:, others], j[:, k], rcond=None)
        d[others] = -coefficients
    return d, float(np.linalg.norm(j @ d))


def intervals(
    evaluator: Evaluator,
    x: np.ndarray,
    residuals: np.ndarray,
    j: np.ndarray,
    free: Sequence[int],
) -> tuple[dict[str, tuple[float, float]], float]:
    """The 95% profile-likelihood interval of each fitted figure (index in ``free``; ``j``: the
    Jacobian of those at ``x``) and sigma (see the module docstring); an end the bounds cut is
    the bound."""
    problem = evaluator.problem
    nudged = x.copy()
    nudged[list(free)] += ROUGHNESS_STEP * np.resize([1.0, -1.0], len(free))
    (near,) = evaluator.many([("fit", np.clip(nudged, problem.lower, problem.upper), None)])
    roughness = float(np.sqrt(np.mean((near - residuals) ** 2) / 2))
    sigma = max(sigma_of(residuals, len(free)), roughness)
    ssr = float(np.sum(residuals**2))
    rise = CHI2_95 * sigma**2
    plans = []
    for k, index in enumerate(free):
        d_free, s = _direction(j, k)
        d = np.zeros(len(x))
        d[list(free)] = d_free
        t = math.sqrt(rise) / s if s > 0 else math.inf
        for side in (1.0, -1.0):
            reach = _reach(x[index], side * d[index], problem.lower[index], problem.upper[index])
            step = min(t, reach)
            plans.append((index, side, d, step, step >= reach))
    points = [
        ("fit", np.clip(x + side * step * d, problem.lower, problem.upper), None)
        for _, side, d, step, _ in plans
        if math.isfinite(step)
    ]
    evaluated = iter(evaluator.many(points))
    ends: dict[int, dict[float, float]] = {}
    for index, side, d, step, cut in plans:
        if not math.isfinite(step):
            end = problem.upper[index] if side > 0 else problem.lower[index]
        else:
            climb = float(np.sum(next(evaluated) ** 2)) - ssr
            if not cut or climb >= rise:
                step *= math.sqrt(rise / max(climb, rise / 4))
            end = float(
                np.clip(
                    x[index] + side * step * d[index], problem.lower[index], problem.upper[index]
                )
            )
        ends.setdefault(index, {})[side] = end
    out = {}
    for index, sides in ends.items():
        low, high = sorted((sides[-1.0], sides[1.0]))
        out[problem.names[index]] = (math.exp(low), math.exp(high))
    return out, sigma


def _reach(x: float, d: float, lower: float, upper: float) -> float:
    """How far along a direction of component ``d`` a figure at ``x`` may go within its
    bounds (inf: ``d`` is 0)."""
    if d > 0:
        return (upper - x) / d
    if d < 0:
        return (x - lower) / -d
    return math.inf


def held_out(
    evaluator: Evaluator,
    x: np.ndarray,
    residuals: np.ndarray,
    j: np.ndarray,
    free: Sequence[int],
) -> list[ScoredValue]:
    """Leave-one-point-out: each grid point's values as a fit without them predicts them (see
    the module docstring); empty with fewer than two points."""
    problem = evaluator.problem
    points = list(dict.fromkeys((k[0], k[1]) for k in problem.keys))
    if len(points) < 2:
        return []
    jobs = []
    for point in points:
        rows = [i for i, k in enumerate(problem.keys) if (k[0], k[1]) == point]
        kept = [i for i in range(len(problem.keys)) if i not in rows]
        jk, rk = j[kept], residuals[kept]
        order, diagonal = pivoted(jk)
        pinned = [c for c, v in zip(order, diagonal, strict=True) if v >= MIN_SENSITIVITY]
        moved = x.copy()
        dropped = [c for c in range(len(free)) if c not in pinned]
        for c in dropped:  # back at the prior: the fit without the point cannot pin it
            moved[free[c]] = problem.prior[free[c]]
        shift = moved[list(free)] - x[list(free)]
        rk = rk + jk @ shift
        if pinned:
            step, *_ = np.linalg.lstsq(jk[:, pinned], -rk, rcond=None)
            if np.max(np.abs(step)) > XTOL:  # a smaller step is none: the jumps are larger
                for c, delta in zip(pinned, step, strict=True):
                    moved[free[c]] = x[free[c]] + delta
        moved = np.clip(moved, problem.lower, problem.upper)
        jobs.append(("metrics", moved, problem.metric_keys([point])))
    out = []
    for (_, _, keys), r in zip(jobs, evaluator.many(jobs), strict=True):
        out += problem.scored_values(keys or (), r)
    return out


def bound_warnings(problem: Problem, x: np.ndarray, free: Sequence[int]) -> list[str]:
    """One line per fitted figure that ended within :data:`AT_BOUND` of a bound."""
    out = []
    for index in free:
        name = problem.names[index]
        for where, bound in (("lower", problem.lower[index]), ("upper", problem.upper[index])):
            if abs(x[index] - bound) <= AT_BOUND:
                out.append(
                    f"{name} ended at its {where} bound {math.exp(bound):g}: the data want a "
                    "value the search may not take, so its interval is cut there; the model "
                    "misses something these runs show (another GPU's figures, a step the model "
                    "lacks), or the runs are not of this stack"
                )
    return out


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` found: the figures (every one of the problem's, fitted or held),
    the identification, the searches, each fitted figure with its interval, sigma, the loss at
    the prior and at the end, the fitted values (in-sample residuals), the held-out values,
    the warnings and the evaluations it took; ``phases``: TTFT phase by phase at the fitted
    figures beside the measured (in-sample, :meth:`Problem.phase_values`), and ``phase_note``
    where the runs have no phases."""

    values: dict[str, float]
    identification: Identification
    searches: tuple[Search, ...]
    figures: tuple[FittedFigure, ...]
    sigma: float
    start_loss: float
    loss: float
    fitted: list[ScoredValue]
    held_out: list[ScoredValue]
    warnings: list[str] = field(default_factory=list)
    evaluations: int = 0
    phases: list[PhaseValue] = field(default_factory=list)
    phase_note: str | None = None


Stage = Callable[[str, int], None]
"""Progress: ``stage(name, evaluations)`` as a stage starts, with the evaluations it may take."""


def calibrate(
    evaluator: Evaluator,
    *,
    on_stage: Stage | None = None,
    on_search: Callable[[Search], None] | None = None,
) -> Calibration:
    """Identify, search, interval and hold out (see the module docstring) on the evaluator's
    problem."""
    problem = evaluator.problem

    def stage(name: str, evaluations: int) -> None:
        if on_stage is not None:
            on_stage(name, evaluations)

    n = len(problem.names)
    stage("identifying", n + 1)
    r0 = evaluator.one(problem.prior)
    everything = list(range(n))
    identification = identify(problem, jacobian(evaluator, problem.prior, r0, everything, FD_STEP))
    free = [problem.names.index(name) for name in identification.fitted]
    stage("searching", 2 * (len(free) + 1) * 4)
    x, r, j, searches = search(evaluator, problem.prior, free, on_search=on_search)
    if j.shape[1] != len(free):
        j = jacobian(evaluator, x, r, free, FD_STEP)
    stage("intervals", 2 * len(free) + 1)
    found, sigma = intervals(evaluator, x, r, j, free)
    stage("held-out points", len({(k[0], k[1]) for k in problem.keys}) + 1)
    out_of_sample = held_out(evaluator, x, r, j, free)
    values = problem.values_at(x)
    scored_keys = problem.metric_keys()
    (in_sample,) = evaluator.many([("metrics", x, scored_keys)])
    phases, phase_note = problem.phase_values(x)
    figures = tuple(
        FittedFigure(
            name=name,
            value=values[name],
            prior=math.exp(float(problem.prior[i])),
            fitted=name in found,
            low=found[name][0] if name in found else None,
            high=found[name][1] if name in found else None,
        )
        for i, name in enumerate(problem.names)
    )
    return Calibration(
        values=values,
        identification=identification,
        searches=tuple(searches),
        figures=figures,
        sigma=sigma,
        start_loss=loss_of(r0),
        loss=loss_of(r),
        fitted=problem.scored_values(scored_keys, in_sample),
        held_out=out_of_sample,
        warnings=bound_warnings(problem, x, free),
        evaluations=evaluator.count,
        phases=phases,
        phase_note=phase_note,
    )
