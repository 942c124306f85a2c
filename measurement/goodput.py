"""Attainment and goodput against an SLO (`workload.slo.Slo`), from request records.

Works on any run's `RequestRecord`s: the load generator's, the simulator's (the same records,
`simulator.retime.timing_records`), or a results folder's `requests.parquet`
(`outputs.folder_writer.records_from_frame`). Definitions (docs/metrics.md, "SLOs and goodput"):

- a request *meets* the SLO when it succeeded and each of its own values is within every
  objective: its TTFT, its own ITL p99 (over its tokens), its TPOT, its E2E (a value the
  request does not have, such as the ITL of a one-token answer, is not judged);
- a run's *attainment* is the share of its requests (failed ones included) that met it, and its
  *goodput* the requests that met it per second and their output tokens per second, over the
  span the run's rates are taken over (`measurement.stats.span_seconds`): AIPerf's goodput;
- a grid point *holds* the SLO when each objective's p99 over the point (the median of its
  runs' p99s, as the tables show) is within its bound; the *binding* objective is the one
  closest to (or furthest over) its bound, p99 / bound.

DistServe's goodput (the highest load at which a set share of requests meets the SLO) is the
highest grid point whose SLO holds (`loadstep` outputs it as the stack's highest load meeting it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from measurement.intervals import CONFIDENCE, SLO_METRICS, UPPER_BOUNDS, point_interval
from measurement.results import MetricInterval, PointAttainment, PointSummary, RunAttainment
from measurement.stats import (
    chunk_tokens,
    e2e_ms,
    first_of_client,
    itl_ms,
    percentile,
    span_seconds,
    tails,
    tpot_ms,
    ttft_ms,
)
from workload.slo import NEEDS_TWO_TOKENS, OBJECTIVES, Slo, SloError

if TYPE_CHECKING:  # annotations only: loadgen.request imports aiohttp
    from measurement.record import RequestRecord


def request_values(record: RequestRecord) -> dict[str, float | None]:
    """A successful request's own value (ms) of each objective (keys of
    `workload.slo.OBJECTIVES`): TTFT, the p99 of its own ITLs, TPOT, E2E; None where it has none."""
    tokens = chunk_tokens(record)
    return {
        "ttft_p99_ms": ttft_ms(record),
        "itl_p99_ms": percentile(itl_ms(record, tokens), 99),
        "tpot_p99_ms": tpot_ms(record, tokens),
        "e2e_p99_ms": e2e_ms(record),
    }


def missed(record: RequestRecord, slo: Slo) -> list[str]:
    """The objectives (keys) `record` missed: every one for a failed request; else those whose
    value exceeds its bound (a value it lacks is not judged)."""
    objectives = slo.objectives()
    if not record.ok:
        return list(objectives)
    values = request_values(record)
    return [k for k, bound in objectives.items() if (v := values[k]) is not None and v > bound]


def request_met(record: RequestRecord, slo: Slo) -> bool:
    """True when `record` succeeded and missed no objective of `slo`."""
    return not missed(record, slo)


def evaluate_run(
    records: Sequence[RequestRecord], slo: Slo, *, concurrency: int, closed: bool = True
) -> RunAttainment:
    """`records` (one run's, any order) against `slo`; `concurrency` and `closed` (the closed
    loop, else the open loop) say which requests were the first of their client. Raises
    `SloError` when an objective needs two or more tokens per request (ITL, TPOT) and no
    successful request of the run has a value for it (one-token answers, or every response
    read in one piece)."""
    good = [r for r in records if r.ok]
    for key in slo.objectives():
        if key in NEEDS_TWO_TOKENS and good and all(request_values(r)[key] is None for r in good):
            raise SloError(
                f"slo {key}: no successful request of the run has a {OBJECTIVES[key]} (each "
                "generated one token, or came in one network read); drop "
                f"{key} or raise maxTokens to 2 or more"
            )
    misses = [missed(r, slo) for r in records]
    met = [r for r, m in zip(records, misses, strict=True) if not m]
    span = span_seconds(good)
    cold = first_of_client(records, concurrency, closed)
    warm = [r for r, c in zip(records, cold, strict=True) if r.ok and not c]
    return RunAttainment(
        requests=len(records),
        met=len(met),
        missed_by={k: sum(k in m for m in misses) for k in slo.objectives()},
        attainment=len(met) / len(records) if records else 0.0,
        duration_s=span,
        goodput_requests_per_s=len(met) / span if span > 0 else 0.0,
        goodput_output_tokens_per_s=(
            sum(r.completion_tokens or 0 for r in met) / span if span > 0 else 0.0
        ),
        p99_ms=tails(records),
        cold=sum(cold),
        p99_warm_ms=tails(warm),
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
    p99 = {k: _median([r.p99_ms[k] for r in runs]) for k in objectives}
    holds = {k: None if (v := p99[k]) is None else v <= objectives[k] for k in objectives}
    ratios = {k: v / objectives[k] for k, v in p99.items() if v is not None}
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
        p99_ms=p99,
        p99_warm_ms={k: _median([r.p99_warm_ms[k] for r in runs]) for k in objectives},
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
