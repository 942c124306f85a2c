"""The top candidates with the real Dynamo routing (``--validate-top K``): each at its highest
load meeting the SLO under the routing stand-in, simulated as ``testbed simulate`` simulates a
stack (:func:`simulator.simulate.simulate_stacks`: the real Dynamo frontend and KV router with
one CPU mocker per worker, then the timing model on its requests), at every prefix-kinds value
of the workload, :data:`REPETITIONS` runs each of as many requests as the search's run
(:meth:`recommend.workload.Workload.requests_at`: its requests per run, at least its
``per_client`` a client); an open loop at
the rate found; the requests are the load settings' own, as ``testbed load`` sends them: a
results folder's are not replayed there); judged against the SLO as the search judges its own
(:func:`measurement.goodput.evaluate_run`).

What it tells: whether the SLO still holds at that load when the prefix-cache hits are the
real router's and the mockers' instead of the stand-in's, and how far each objective's figure
and the goodput moved; and, over the repetitions, an interval on each objective's figure (at
the prefix-kinds point where it is worst, :func:`measurement.intervals.point_interval`): a
verdict where any objective's interval holds its bound is a knife edge
(:attr:`Validation.knife_edge`). It needs the ``sim`` dependency group (Dynamo's
frontend and mocker).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from measurement.goodput import evaluate_point, evaluate_run
from measurement.intervals import point_interval
from metrics.registry import objectives
from outputs.folder_writer import REQUESTS_FILE, records_from_frame
from recommend.search import Problem, Result, cluster_gpus, load_text, stack_name
from simulator.simulate import simulate_stacks
from workload.slo import Slo, plain

REPETITIONS = 3
"""Runs of each prefix-kinds point with the real routing: the fewest an interval reads."""


@dataclass(frozen=True)
class Validation:
    """One candidate with the real routing at the load the stand-in found (``concurrency``;
    an open loop's: its most in flight, and ``rate`` requests/s):
    whether every prefix-kinds point meets the SLO (``holds``), ``values_ms`` the worst figure
    of each objective (ms, at the objective's own percentile, keyed by objective: ``ttft_p90_ms``)
    and the mean goodput per cluster GPU, each beside the stand-in's (``stand_in_*``);
    ``binding`` the objective with the largest figure / bound at the worst point;
    ``bounds_ms`` each objective's bound and ``intervals_ms`` the interval of its figure over
    the repetitions at the point where it is worst (ms, keyed by objective; None: fewer than
    2 runs)."""

    key: str
    concurrency: int
    holds: bool
    values_ms: dict[str, float | None]
    stand_in_values_ms: dict[str, float | None]
    goodput_tokens_per_s_per_gpu: float
    stand_in_goodput_tokens_per_s_per_gpu: float
    rate: float | None = None
    binding: str | None = None
    bounds_ms: dict[str, float] = field(default_factory=dict)
    intervals_ms: dict[str, tuple[float, float] | None] = field(default_factory=dict)

    def straddled(self) -> list[str]:
        """The objectives whose interval holds their bound, in the SLO's order."""
        return [
            k
            for k, interval in self.intervals_ms.items()
            if interval is not None
            and k in self.bounds_ms
            and interval[0] <= self.bounds_ms[k] <= interval[1]
        ]

    @property
    def knife_edge(self) -> bool:
        """Some objective's interval holds its bound: the verdict could go either way."""
        return bool(self.straddled())

    def spread(self) -> str:
        """Each objective's interval against its bound, a straddled one called a knife edge:
        ``over 3 runs: TTFT p99 183-264 ms against 1,000 ms; ITL p99 31-42 ms against 40 ms:
        a knife edge`` ('' without an interval)."""
        edges = self.straddled()
        parts = [
            f"{objectives()[k].name} {low:,.0f}-{high:,.0f} ms against "
            f"{plain(self.bounds_ms[k], grouped=True)} ms"
            + (": a knife edge" if k in edges else "")
            for k, interval in self.intervals_ms.items()
            if interval is not None and k in self.bounds_ms
            for low, high in [interval]
        ]
        return f"over {REPETITIONS} runs: {'; '.join(parts)}" if parts else ""

    def verdict(self, slo: Slo) -> str:
        """``real routing: SLO holds``, or ``real routing: SLO missed (TTFT p99 819 ms >
        800 ms)`` naming each objective's worst figure over its bound of ``slo`` (the SLO
        judged); with the intervals (:meth:`spread`), ``real routing: SLO holds (over 3 runs:
        TTFT p99 183-264 ms against 1,000 ms)``, ``...; over 3 runs: ...`` after a miss."""
        spread = self.spread()
        if self.holds:
            return "real routing: SLO holds" + (f" ({spread})" if spread else "")
        over = [
            f"{objectives()[k].name} {v:,.0f} ms > {plain(bound, grouped=True)} ms"
            for k, bound in slo.objectives().items()
            if (v := self.values_ms.get(k)) is not None and v > bound
        ]
        missed = "real routing: SLO missed" + (f" ({'; '.join(over)})" if over else "")
        return f"{missed}; {spread}" if spread else missed

    def moved(self) -> str:
        """How far the real routing moved each objective's figure from the stand-in's:
        ``real routing moved ITL p99 8 -> 14 ms (+82%), TTFT p99 143 -> 164 ms (+15%)`` (''
        without a pair of figures)."""
        parts = [
            f"{objectives()[k].name} {stand_in:,.0f} -> {v:,.0f} ms ({v / stand_in - 1:+.0%})"
            for k, v in self.values_ms.items()
            if v is not None and (stand_in := self.stand_in_values_ms.get(k))
        ]
        return f"real routing moved {', '.join(parts)}" if parts else ""

    def line(self) -> str:
        """``c005 at 72 clients with the real Dynamo routing: SLO holds; TTFT p99 812 ms
        (stand-in 905 ms); goodput 1,650 tok/s per cluster GPU (stand-in 1,671)``."""
        figures = "; ".join(
            f"{objectives()[k].name} {v:,.0f} ms (stand-in "
            f"{self.stand_in_values_ms.get(k) or 0:,.0f} ms)"
            for k, v in self.values_ms.items()
            if v is not None
        )
        return (
            f"{self.key} at {load_text(self.concurrency, self.rate)} with the real Dynamo "
            f"routing: SLO {'holds' if self.holds else 'does not hold'}; {figures}; goodput "
            f"{self.goodput_tokens_per_s_per_gpu:,.0f} tok/s per cluster GPU (stand-in "
            f"{self.stand_in_goodput_tokens_per_s_per_gpu:,.0f})"
            + (f"; {self.spread()}" if self.spread() else "")
        )


def validate(problem: Problem, result: Result, out_dir: Path) -> Validation:
    """``result`` (ranked) with the real routing (the module docstring); the simulation's
    folder is ``out_dir/<its stack name>``."""
    assert result.plan is not None and result.best is not None
    load, slo = problem.load, problem.slo
    concurrency, rate = result.best.concurrency, result.best.rate
    grid: dict[str, object] = {
        "prefix_kinds": list(load.prefix_kinds),
        "concurrency": [concurrency],
        "repetitions": REPETITIONS,
        "requests_per_run": problem.sent.requests_at(concurrency),
    }
    if rate is not None:
        grid["request_rate"] = rate
    name = stack_name(problem.cluster, result.candidate)
    simulation = simulate_stacks({name: result.plan}, out_dir, grid=grid, progress=False)[0]
    frame = pd.read_parquet(simulation.out_dir / REQUESTS_FILE)
    gpus = cluster_gpus(problem.cfg)
    runs = [
        [
            evaluate_run(
                records_from_frame(rows), slo, concurrency=concurrency, closed=rate is None
            )
            for _, rows in kinds.groupby("repetition")
        ]
        for _, kinds in frame.groupby("prefix_kinds")
    ]
    points = [evaluate_point(point_runs, slo, gpus=gpus) for point_runs in runs]
    worst: dict[str, float | None] = {}
    for key in slo.objectives():
        values = [v for p in points if (v := p.values_ms.get(key)) is not None]
        worst[key] = max(values) if values else None
    bounds = slo.objectives()
    pressed = [
        (v / bounds[key], key, i)
        for i, p in enumerate(points)
        for key in bounds
        if (v := p.values_ms.get(key)) is not None
    ]
    intervals: dict[str, tuple[float, float] | None] = {}
    for key in bounds:
        at = max(((v, i) for v, k, i in pressed if k == key), default=None)
        if at is not None:
            figures = [v for r in runs[at[1]] if (v := r.values_ms.get(key)) is not None]
            intervals[key] = point_interval(figures)
    return Validation(
        key=result.candidate.key,
        concurrency=concurrency,
        holds=all(p.slo_met for p in points),
        values_ms=worst,
        stand_in_values_ms={k: result.best.values_ms.get(k) for k in worst},
        goodput_tokens_per_s_per_gpu=statistics.fmean(
            p.goodput_output_tokens_per_s_per_gpu or 0.0 for p in points
        ),
        stand_in_goodput_tokens_per_s_per_gpu=result.best.goodput_tokens_per_s_per_gpu,
        rate=rate,
        binding=max(pressed)[1] if pressed else None,
        bounds_ms=dict(bounds),
        intervals_ms=intervals,
    )
