"""A results folder as AIPerf's summary files: per grid point ``<point>/profile_export_aiperf.json``
and ``<point>/profile_export_aiperf.csv``, in the shape AIPerf 0.13.0 writes them.

Where the shape comes from (aiperf 0.13.0, the wheel's files):

- JSON: ``aiperf/common/models/export_models.py`` ``JsonExportData`` (L281-353; schema version
  ``1.4``, L296) holds each metric under its tag as a ``JsonMetricResult`` (L25-65: ``unit``,
  ``avg``, ``p1`` ... ``p99``, ``min``, ``max``, ``std``, and for a per-request metric ``count``
  and ``sum``; a run-level metric has ``unit`` and ``avg`` only), beside ``input_config``,
  ``was_cancelled``, ``is_complete``, ``error_summary`` (``ErrorDetailsCount``,
  ``aiperf/common/models/error_models.py`` L130-137), ``start_time``, ``end_time``;
  ``aiperf/exporters/metrics_json_exporter.py`` L74-88 fills it and L190-191 adds
  ``metadata``.
- CSV: ``aiperf/exporters/metrics_csv_exporter.py`` L42-138: first the metrics with
  percentiles, header ``Metric`` and the stat keys (``aiperf/common/constants.py``
  ``STAT_KEYS``: avg, min, max, sum, p1 ... p99, std), then a blank row and the run-level
  metrics, header ``Metric,Value``; rows sorted by tag; a metric's name is its header and
  `` (unit)`` unless the unit is ``count`` or ``requests``; an integer as it is, any other
  number with 2 decimals, a missing value empty.
- Statistics: population standard deviation and percentiles linear between closest ranks
  (``aiperf/metrics/metric_dicts.py`` L54-84), as `formats.exporter.Distribution` computes
  them.

What each metric is taken from is `METRICS_MAP`, one entry per metric with its unit
conversion; the latencies and rates come from the metric registry (`metrics.registry`).
AIPerf's ``inter_token_latency`` is, per request, (request latency - TTFT) / (output tokens -
the first content chunk's tokens, 1 without per-chunk usage)
(``aiperf/metrics/types/inter_token_latency_metric.py`` L19-35): the registry's TPOT, not its
per-token ITL. A simulated folder says so in ``metadata.simulated``.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from formats.exporter import TOOL, Distribution, ExportSource, PointData, distribution
from metrics.registry import METRICS
from workload.config import Arrival

JSON_FILE = "profile_export_aiperf.json"
CSV_FILE = "profile_export_aiperf.csv"
SCHEMA_VERSION = "1.4"
"""``JsonExportData.SCHEMA_VERSION`` of AIPerf 0.13.0, whose shape these files have."""
PERCENTILES: tuple[int, ...] = (1, 5, 10, 25, 50, 75, 90, 95, 99)
"""The percentiles of a ``JsonMetricResult``."""
STAT_KEYS: tuple[str, ...] = ("avg", "min", "max", "sum", *(f"p{q}" for q in PERCENTILES), "std")
"""The columns of the CSV's first section, in AIPerf's order."""
_UNNAMED_UNITS = {"count", "requests"}

Shape = Literal["distribution", "value"]


@dataclass(frozen=True, slots=True)
class AiperfMetric:
    """One AIPerf metric as written from ours: `tag` (its JSON key), `header` (its CSV name),
    `unit` (AIPerf's display unit); `source`, what it is taken from: a registry key or
    another figure of ours; `ours`, that figure's unit (a registry metric's own); `scale`,
    AIPerf's value = ours x `scale`; `shape`: ``distribution`` (the statistics, count and sum)
    or ``value`` (``avg`` only, a run-level figure); `values`: the point's values of ours."""

    tag: str
    header: str
    unit: str
    source: str
    ours: str
    scale: float
    shape: Shape
    values: Callable[[PointData], Distribution | None]


def _registry(tag: str, header: str, unit: str, key: str, shape: Shape) -> AiperfMetric:
    """An entry from registry metric `key`, in its own unit (scale 1): a latency's values per
    request, or a rate's per repetition (the `RunSummary` field of the key's name)."""
    metric = METRICS[key]
    if shape == "distribution":
        return AiperfMetric(
            tag, header, unit, key, metric.unit, 1.0, shape, lambda p: p.latency(key)
        )
    return AiperfMetric(tag, header, unit, key, metric.unit, 1.0, shape, lambda p: p.per_run(key))


def _single(value: float) -> Distribution | None:
    return distribution([value])


def _sum_of(field: str) -> Callable[[PointData], Distribution | None]:
    return lambda p: _single(d.sum) if (d := p.tokens(field)) is not None else None


def _goodput(point: PointData) -> Distribution | None:
    slo = point.point.slo
    return None if slo is None else _single(slo.goodput_requests_per_s)


METRICS_MAP: tuple[AiperfMetric, ...] = (
    _registry("request_throughput", "Request Throughput", "requests/sec", "requests_per_s",
              "value"),
    _registry("request_latency", "Request Latency", "ms", "e2e", "distribution"),
    AiperfMetric("request_count", "Request Count", "requests", "successful requests",
                 "requests", 1.0, "value", lambda p: _single(len(p.good))),
    _registry("time_to_first_token", "Time to First Token", "ms", "ttft", "distribution"),
    _registry("inter_token_latency", "Inter Token Latency", "ms", "tpot", "distribution"),
    AiperfMetric("output_token_throughput", "Output Token Throughput", "tokens/sec",
                 "output_tokens_per_s", "tok/s", 1.0, "value",
                 lambda p: p.per_run("output_tokens_per_s")),
    AiperfMetric("output_sequence_length", "Output Sequence Length", "tokens",
                 "usage completion_tokens", "tokens", 1.0, "distribution",
                 lambda p: p.tokens("completion_tokens")),
    AiperfMetric("input_sequence_length", "Input Sequence Length", "tokens",
                 "usage prompt_tokens", "tokens", 1.0, "distribution",
                 lambda p: p.tokens("prompt_tokens")),
    AiperfMetric("benchmark_duration", "Benchmark Duration", "sec", "repetitions' duration_s",
                 "s", 1.0, "value", lambda p: _single(p.duration_s)),
    AiperfMetric("total_isl", "Total Input Sequence Length", "tokens", "usage prompt_tokens",
                 "tokens", 1.0, "value", _sum_of("prompt_tokens")),
    AiperfMetric("total_osl", "Total Output Sequence Length", "tokens",
                 "usage completion_tokens", "tokens", 1.0, "value",
                 _sum_of("completion_tokens")),
    AiperfMetric("error_request_count", "Error Request Count", "requests", "failed requests",
                 "requests", 1.0, "value", lambda p: _single(p.errors) if p.errors else None),
    AiperfMetric("completed_request_count", "Completed Requests (Success + Error)", "requests",
                 "requests", "requests", 1.0, "value", lambda p: _single(len(p.records))),
    AiperfMetric("request_error_rate", "Request Error Rate", "%", "failed / all requests",
                 "", 100.0, "value",
                 lambda p: _single(p.errors / len(p.records)) if p.records else None),
    AiperfMetric("goodput", "Goodput", "requests/sec", "goodput_requests_per_s",
                 METRICS["goodput_requests_per_s"].unit, 1.0, "value", _goodput),
)  # fmt: skip
"""Every AIPerf metric written, in ``JsonExportData``'s order; a metric without values at a
point (no SLO judged: no goodput; no failures: no error count) is left out there, as AIPerf
leaves it out."""


def metric_result(entry: AiperfMetric, point: PointData) -> dict[str, Any] | None:
    """`entry`'s ``JsonMetricResult`` at `point` (None: no values there)."""
    values = entry.values(point)
    if values is None:
        return None
    s = entry.scale
    if entry.shape == "value":
        return {"unit": entry.unit, "avg": values.mean * s}
    stats: dict[str, Any] = {"unit": entry.unit, "avg": values.mean * s}
    stats.update({f"p{q}": values.p(q) * s for q in PERCENTILES})
    stats.update(min=values.min * s, max=values.max * s, std=values.std * s)
    stats.update(count=values.count, sum=values.sum * s)
    return stats


def _input_config(source: ExportSource, point: PointData) -> dict[str, Any]:
    """The load as AIPerf's ``input_config`` (its ``BenchmarkConfig``) spells the same
    settings: model, endpoint, the prompts (synthetic, their mean lengths), the profiling
    phase."""
    grid, config = source.grid, source.grid.config
    phase: dict[str, Any] = {
        "name": "profiling",
        "kind": "profiling",
        "type": "concurrency" if config.arrival is Arrival.CLOSED else "request_rate",
        "requests": len(point.records),
        "concurrency": point.point.concurrency,
    }
    if config.arrival is not Arrival.CLOSED:
        phase["rate"] = config.request_rate
    # The URL the requests went to; a simulation's `url` reads "simulation of <URL>", the
    # URL of the Dynamo frontend its routing run sent them to (simulator/retime.py).
    urls = grid.url.split()[-1:]
    dataset = {
        "name": "main",
        "type": "synthetic",
        "entries": len(point.records),
        "prompts": {"isl": {"mean": config.prompt_tokens}, "osl": {"mean": config.max_tokens}},
    }
    return {
        "models": {"items": [{"name": grid.model}]},
        "endpoint": {"urls": urls, "type": config.api.value, "streaming": True},
        "datasets": [dataset],
        "phases": [phase],
    }


def _error_summary(point: PointData) -> list[dict[str, Any]]:
    """The failed requests as AIPerf's ``ErrorDetailsCount`` list: one entry per error kind
    and HTTP status (``code``; None where no status came), most frequent first."""
    counts: Counter[tuple[int | None, str]] = Counter(
        (r.status if r.status is not None and r.status >= 400 else None, str(r.error_kind))
        for r in point.records
        if not r.ok
    )
    return [
        {"error_details": {"code": code, "type": kind, "message": kind}, "count": n}
        for (code, kind), n in counts.most_common()
    ]


def export_json(source: ExportSource, point: PointData) -> dict[str, Any]:
    """`point` as ``profile_export_aiperf.json``'s content."""
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "aiperf_version": None,
        "benchmark_id": f"{source.name} {point.name}",
    }
    for entry in METRICS_MAP:
        result = metric_result(entry, point)
        if result is not None:
            data[entry.tag] = result
    starts = [r.started_at for r in point.runs if r.started_at is not None]
    ends = [r.finished_at for r in point.runs if r.finished_at is not None]
    metadata: dict[str, Any] = {"exported_by": TOOL, "stack": source.name}
    if source.simulated is not None:
        metadata["simulated"] = source.simulated
    data.update(
        input_config=_input_config(source, point),
        was_cancelled=False,
        is_complete=True,
        error_summary=_error_summary(point),
        start_time=min(starts).isoformat() if starts else None,
        end_time=max(ends).isoformat() if ends else None,
        metadata=metadata,
    )
    return data


def _number(value: Any) -> str:
    """A CSV cell as AIPerf writes it: integers as they are, other numbers with 2 decimals."""
    if value is None:
        return ""
    if isinstance(value, int):
        return str(value)
    return f"{float(value):.2f}"


def _name(entry: AiperfMetric) -> str:
    if entry.unit.lower() in _UNNAMED_UNITS:
        return entry.header
    return f"{entry.header} ({entry.unit})"


def export_csv(point: PointData) -> str:
    """`point` as ``profile_export_aiperf.csv``'s content."""
    results = {e.tag: (e, r) for e in METRICS_MAP if (r := metric_result(e, point)) is not None}
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    request = sorted(t for t, (e, _) in results.items() if e.shape == "distribution")
    system = sorted(t for t, (e, _) in results.items() if e.shape == "value")
    writer.writerow(["Metric", *STAT_KEYS])
    for tag in request:
        entry, result = results[tag]
        writer.writerow([_name(entry), *(_number(result.get(k)) for k in STAT_KEYS)])
    writer.writerow([])
    writer.writerow(["Metric", "Value"])
    for tag in system:
        entry, result = results[tag]
        writer.writerow([_name(entry), _number(result["avg"])])
    return buffer.getvalue()


def export_files(source: ExportSource) -> dict[str, str]:
    """Every grid point's two files, under a folder named for the point (``k2-c4/``)."""
    files = {}
    for point in source.points:
        files[f"{point.name}/{JSON_FILE}"] = json.dumps(export_json(source, point), indent=2)
        files[f"{point.name}/{CSV_FILE}"] = export_csv(point)
    return files
