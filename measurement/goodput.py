"""Attainment and goodput against an SLO (`workload.slo.Slo`), from request records.

Works on any run's `RequestRecord`s: the load generator's, the simulator's (the same records,
`simulator.records.timing_records`), or a results folder's `requests.parquet`
(`outputs.folder_writer.records_from_frame`). Definitions (docs/metrics.md, "SLOs and goodput"):

- a request *meets* the SLO when it succeeded, showed a visible token (a reply whose output
  was all reasoning misses every TTFT and E2E objective) and each of its own values is within
  every objective: its TTFT, TPOT or E2E, or for ITL its own ITL at the objective's percentile
  over its tokens (a value the request does not have, such as the ITL of a one-token answer,
  is not judged);
- a run's *attainment* is the share of its requests (failed ones included) that met it, and its
  *goodput* the requests that met it per second and their output tokens per second, over the
  span the run's rates are taken over (`measurement.stats.span_seconds`): AIPerf's goodput;
- a grid point *holds* the SLO when each objective's percentile over the point (the median of
  its runs' percentiles, `run_figures`) is within its bound; the *binding* objective is the one
  closest to (or furthest over) its bound, percentile / bound.

DistServe's goodput (the highest load at which a set share of requests meets the SLO) is the
highest grid point whose SLO holds (`loadstep` outputs it as the stack's highest load meeting it).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from measurement.intervals import CONFIDENCE, SLO_METRICS, UPPER_BOUNDS, point_interval
from measurement.percentile import percentile
from measurement.results import MetricInterval, PointAttainment, PointSummary, RunAttainment
from measurement.stats import (
    Latencies,
    bounded_percentile,
    first_of_client,
    span_seconds,
    tails,
)
from metrics.latency import answered
from metrics.registry import Metric, Objective, objectives
from workload.slo import Slo, SloError

if TYPE_CHECKING:  # annotations only: loadgen.request imports aiohttp
    from measurement.record import RequestRecord


def request_value(record: RequestRecord, objective: Objective) -> float | None:
    """A successful request's own value (ms) of `objective`: its value of the latency, or for a
    latency with a value per token (ITL) their percentile at the objective's; None where it has
    none."""
    metric = objective.metric
    if metric.per_token is not None:
        return percentile(metric.per_token(record), objective.q)
    assert metric.per_request is not None, f"{metric.key} has no per-request value"
    return metric.per_request(record)


def run_figures(
    records: Sequence[RequestRecord], keys: Iterable[str], latencies: Latencies | None = None
) -> dict[str, float | None]:
    """The run's figure (ms) of each objective of `keys`: the percentile of its latency over
    the run, as `measurement.stats.tails` takes the p99s: over the successful requests (a
    per-token latency pooled over every token of every request), and for a latency with a
    `sample` the censored requests too, at the time they were cut (a lower bound).
    `latencies`: the successful records' `measurement.stats.Latencies` when computed already
    (the latencies it keeps are read from it: the same values)."""
    known = objectives()
    good = [r for r in records if r.ok]
    out: dict[str, float | None] = {}
    for key in keys:
        metric, q = known[key].metric, known[key].q
        if metric.sample is not None:
            samples = [s for s in map(metric.sample, records) if s is not None]
            out[key] = bounded_percentile(samples, q)[0]
        else:
            kept = None if latencies is None else latencies.pooled(metric.key)
            out[key] = percentile(_pooled(good, metric) if kept is None else kept, q)
    return out


def _pooled(good: Sequence[RequestRecord], metric: Metric) -> list[float]:
    """The values (ms) of `metric` over the successful records `good` a percentile takes: a
    per-token latency's over every token of every request, else one per request that has
    one."""
    if metric.per_token is not None:
        return [v for r in good for v in metric.per_token(r)]
    assert metric.per_request is not None, f"{metric.key} has no per-request value"
    return [v for r in good if (v := metric.per_request(r)) is not None]


def _own_values(
    good: Sequence[RequestRecord], objective: Objective, latencies: Latencies | None
) -> list[float | None]:
    """`request_value` of each of `good` (successful records): read from `latencies` (theirs)
    where it keeps the latency, else computed request by request."""
    kept = None if latencies is None else latencies.own(objective.metric.key, objective.q)
    return [request_value(r, objective) for r in good] if kept is None else kept


def figures(
    records: Sequence[RequestRecord], slo: Slo, latencies: Latencies | None = None
) -> dict[str, float | None]:
    """The four p99 tails (`measurement.stats.tails`) and the run's figure of each other
    objective of `slo` (`run_figures`), keyed by objective; `latencies`: the successful
    records' `measurement.stats.Latencies` when computed already."""
    p99 = tails(records, latencies)
    return p99 | run_figures(records, [k for k in slo.objectives() if k not in p99], latencies)


def judged(slo: Slo) -> dict[str, tuple[Objective, float]]:
    """Each objective of `slo` with its bound (ms), by key: resolved from the registry once for
    every request a run judges."""
    known = objectives()
    return {k: (known[k], bound) for k, bound in slo.objectives().items()}


def missed(record: RequestRecord, slo: Slo) -> list[str]:
    """The objectives (keys) `record` missed: every one for a failed request; else those whose
    value exceeds its bound (a value it lacks is not judged)."""
    return missed_of(record, judged(slo))


def missed_of(
    record: RequestRecord,
    bounds: Mapping[str, tuple[Objective, float]],
    values: Mapping[str, float | None] | None = None,
) -> list[str]:
    """`missed` against objectives already resolved (`judged`); a reply with no visible token
    (not `metrics.latency.answered`) misses each objective whose metric needs one (TTFT,
    E2E: `Metric.needs_answer`). `values`: the record's `request_value` of each objective,
    by key, when computed already."""
    if not record.ok:
        return list(bounds)
    blank = not answered(record)
    return [
        k
        for k, (objective, bound) in bounds.items()
        if (blank and objective.metric.needs_answer)
        or (
            (v := request_value(record, objective) if values is None else values[k]) is not None
            and v > bound
        )
    ]


def request_met(record: RequestRecord, slo: Slo) -> bool:
    """True when `record` succeeded, showed a visible token (`metrics.latency.answered`) and
    missed no objective of `slo`."""
    return answered(record) and not missed(record, slo)


def evaluate_run(
    records: Sequence[RequestRecord],
    slo: Slo,
    *,
    concurrency: int,
    closed: bool = True,
    latencies: Latencies | None = None,
) -> RunAttainment:
    """`records` (one run's, any order) against `slo`; `concurrency` and `closed` (the closed
    loop, else the open loop) say which requests were the first of their client; `latencies`:
    the successful records' `measurement.stats.Latencies` when computed already (the run's
    summary computed them: the same figures, to the bit). Raises
    `SloError` when an objective needs two or more tokens per request (ITL, TPOT) and no
    successful request of the run has a value for it (one-token answers, or every response
    read in one piece)."""
    good = [r for r in records if r.ok]
    latencies = Latencies.of(good) if latencies is None else latencies
    bounds = judged(slo)
    own = {key: _own_values(good, o, latencies) for key, (o, _) in bounds.items()}
    for key, (o, _) in bounds.items():
        if not o.metric.two_tokens or not good:
            continue
        if all(v is None for v in own[key]):
            raise SloError(
                f"slo {key}: no successful request of the run has a {o.name} (each "
                "generated one token, or came in one network read); drop "
                f"{key} or raise maxTokens to 2 or more"
            )
    values = iter([{key: own[key][i] for key in bounds} for i in range(len(good))])
    misses = [missed_of(r, bounds, next(values) if r.ok else None) for r in records]
    met = [r for r, m in zip(records, misses, strict=True) if not m and answered(r)]
    span = span_seconds(good)
    cold = first_of_client(records, concurrency, closed)
    warm = [r for r, c in zip(records, cold, strict=True) if r.ok and not c]
    warm_of_good = [not c for r, c in zip(records, cold, strict=True) if r.ok]
    return RunAttainment(
        requests=len(records),
        met=len(met),
        missed_by={k: sum(k in m for m in misses) for k in bounds},
        attainment=len(met) / len(records) if records else 0.0,
        duration_s=span,
        goodput_requests_per_s=len(met) / span if span > 0 else 0.0,
        goodput_output_tokens_per_s=(
            sum(r.completion_tokens or 0 for r in met) / span if span > 0 else 0.0
        ),
        values_ms=figures(records, slo, latencies),
        cold=sum(cold),
        values_warm_ms=figures(warm, slo, latencies.only(warm_of_good)),
    )


GOODPUT_METRICS = SLO_METRICS
"""`RunAttainment` field -> its name in tables: the figures a point gives an interval."""


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def evaluate_point(
    runs: Sequence[RunAttainment],
    slo: Slo,
    *,
    gpus: int | None = None,
    confidence: float = CONFIDENCE,
) -> PointAttainment:
    """A grid point from its runs against `slo` (see `PointAttainment`); `gpus`: the GPUs the
    deployment served on, for the per-GPU goodputs. Raises ValueError without runs."""
    if not runs:
        raise ValueError("a grid point needs at least one run")
    intervals = {}
    for metric in GOODPUT_METRICS:
        values = [float(getattr(r, metric)) for r in runs]
        bounds = point_interval(values, confidence, UPPER_BOUNDS.get(metric))
        low, high = bounds if bounds is not None else (None, None)
        intervals[metric] = MetricInterval(runs=values, low=low, high=high)
    objectives = slo.objectives()
    medians = {k: _median([r.values_ms.get(k) for r in runs]) for k in objectives}
    holds = {k: None if (v := medians[k]) is None else v <= objectives[k] for k in objectives}
    ratios = {k: v / objectives[k] for k, v in medians.items() if v is not None}
    req_s = statistics.median(r.goodput_requests_per_s for r in runs)
    tok_s = statistics.median(r.goodput_output_tokens_per_s for r in runs)
    return PointAttainment(
        slo=slo,
        repetitions=len(runs),
        requests=sum(r.requests for r in runs),
        met=sum(r.met for r in runs),
        missed_by={k: sum(r.missed_by.get(k, 0) for r in runs) for k in objectives},
        attainment=statistics.median(r.attainment for r in runs),
        goodput_requests_per_s=req_s,
        goodput_output_tokens_per_s=tok_s,
        gpus=gpus,
        goodput_requests_per_s_per_gpu=req_s / gpus if gpus else None,
        goodput_output_tokens_per_s_per_gpu=tok_s / gpus if gpus else None,
        values_ms=medians,
        values_warm_ms={k: _median([r.values_warm_ms.get(k) for r in runs]) for k in objectives},
        cold=sum(r.cold for r in runs),
        holds=holds,
        slo_met=bool(ratios) and all(h is not False for h in holds.values()),
        binding=max(ratios, key=lambda k: ratios[k]) if ratios else None,
        confidence=confidence,
        intervals=intervals,
    )


def judge_points(
    points: Sequence[PointSummary],
    runs: Mapping[tuple[int, int, int], Sequence[RequestRecord]],
    slo: Slo,
    *,
    closed: bool = True,
    gpus: int | None = None,
    confidence: float = CONFIDENCE,
) -> list[PointSummary]:
    """`points` judged against `slo` from each run's records (`runs`: (prefix kinds,
    concurrency, repetition) -> its records, e.g. `outputs.folder_writer.runs_of_frame`): each point
    with `slo` set (`evaluate_point` of its runs' `evaluate_run`) and the runs of
    `SLO_METRICS` added to its `intervals`, so A / B verdicts compare them as any other metric.
    A point without records is left as it was. `closed`: the grid's closed loop (else open)."""
    out = []
    for p in points:
        mine = [
            records
            for (k, c, _), records in sorted(runs.items())
            if (k, c) == (p.prefix_kinds, p.concurrency)
        ]
        if not mine:
            out.append(p)
            continue
        judged = [evaluate_run(r, slo, concurrency=p.concurrency, closed=closed) for r in mine]
        point = evaluate_point(judged, slo, gpus=gpus, confidence=confidence)
        out.append(
            p.model_copy(update={"slo": point, "intervals": {**p.intervals, **point.intervals}})
        )
    return out


def highest_meeting(points: Sequence[PointSummary]) -> PointSummary | None:
    """The judged point of the highest load whose SLO holds (DistServe's goodput as a grid
    point: the most requests/s that met it; None when no point did)."""
    met = [p for p in points if p.slo is not None and p.slo.slo_met]
    return max(
        met,
        key=lambda p: (p.offered_rate_per_s or 0, p.concurrency, p.requests_per_s),
        default=None,
    )
