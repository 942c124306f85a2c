"""A results folder as llm-d-benchmark's Benchmark Reports, version 0.2.1: one YAML file per grid
point, ``benchmark_report_v0.2.1,_<point>.yaml`` (llm-d-benchmark names its own
``benchmark_report_v0.2,_<results file>.yaml``).

The format is llm-d/llm-d-benchmark's, at commit 8bc9f1dd (2026-08-21):
``llmdbenchmark/analysis/benchmark_report/br_v0_2_1_json_schema.json`` (its JSON Schema; the
README beside it says new consumers should read 0.2.1, an additive superset of 0.2), the
pydantic models it is generated from (``schema_v0_2.py``: ``LoadStandardized`` L180-215,
``Statistics`` L257-277, ``AggregateRequests`` L279-308, ``AggregateLatency`` L310-381,
``AggregateThroughput`` L383-432, ``Run`` L1115-1136) and the unit each field takes, which the
models check and the JSON Schema cannot (``base.py`` L140-163: token counts ``count``,
latencies ``ms`` or ``s``, per-token latencies ``ms/token`` or ``s/token``, token rates
``tokens/s``, request rates ``queries/s``).

A report is one load level of one experiment: a grid point, its requests pooled over its
repetitions (`formats.exporter.PointData`), its rates one value per repetition. What each
figure is taken from is `LATENCIES` and `THROUGHPUTS`, one entry per field with its unit
conversion. A simulated folder says so in ``run.description``, ``run.keywords``
(``simulated``) and ``scenario.load.native.config.simulated``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import yaml

from formats.exporter import TOOL, Distribution, ExportSource, PointData
from metrics.registry import METRICS
from workload.config import Arrival

VERSION = "0.2.1"
"""The Benchmark Report version written."""
FILE_PREFIX = f"benchmark_report_v{VERSION},_"
PERCENTILES: tuple[float, ...] = (0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)
"""The percentiles of a ``Statistics`` (keys ``p0p1`` ... ``p99p9``)."""


@dataclass(frozen=True, slots=True)
class ReportFigure:
    """One ``Statistics`` field of a report from a figure of ours: `field` its name under its
    section, `units` the report's unit, `source` the registry key (or figure) it is taken from,
    `ours` that figure's unit, `scale` report value = ours x `scale`, `values` the point's
    values of ours."""

    field: str
    units: str
    source: str
    ours: str
    scale: float
    values: Callable[[PointData], Distribution | None]


def _latency(field: str, units: str, key: str) -> ReportFigure:
    return ReportFigure(field, units, key, METRICS[key].unit, 1.0, lambda p: p.latency(key))


def _rate(field: str, units: str, key: str, ours: str) -> ReportFigure:
    return ReportFigure(field, units, key, ours, 1.0, lambda p: p.per_run(key))


LATENCIES: tuple[ReportFigure, ...] = (
    _latency("time_to_first_token", "ms", "ttft"),
    _latency("time_per_output_token", "ms/token", "tpot"),
    _latency("inter_token_latency", "ms/token", "itl"),
    _latency("request_latency", "ms", "e2e"),
)
"""``results.request_performance.aggregate.latency``: over the successful requests (ITL one
value per token gap, the others one per request)."""
THROUGHPUTS: tuple[ReportFigure, ...] = (
    _rate("output_token_rate", "tokens/s", "output_tokens_per_s", "tok/s"),
    _rate("request_rate", "queries/s", "requests_per_s", METRICS["requests_per_s"].unit),
)
"""``results.request_performance.aggregate.throughput``: one value per repetition."""
REQUEST_LENGTHS: tuple[tuple[str, str], ...] = (
    ("input_length", "prompt_tokens"),
    ("output_length", "completion_tokens"),
)
"""``...aggregate.requests``' lengths (units ``count``, tokens) from each successful request's
usage field."""


def statistics(values: Distribution, units: str, scale: float = 1.0) -> dict[str, Any]:
    """`values` (x `scale`) as a ``Statistics``: mean, stddev, min, max and `PERCENTILES`."""
    stats: dict[str, Any] = {
        "units": units,
        "mean": values.mean * scale,
        "stddev": values.std * scale,
        "min": values.min * scale,
    }
    for q in PERCENTILES:
        stats[f"p{q:g}".replace(".", "p")] = values.p(q) * scale
    stats["max"] = values.max * scale
    return stats


def _section(point: PointData, figures: tuple[ReportFigure, ...]) -> dict[str, Any]:
    section = {}
    for figure in figures:
        values = figure.values(point)
        if values is not None:
            section[figure.field] = statistics(values, figure.units, figure.scale)
    return section


def _uid(*parts: str) -> str:
    """A uuid5 of `parts` (the same folder and point: the same id)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{TOOL}:" + "/".join(parts)))


def _tool_version() -> str:
    try:
        return metadata.version(TOOL)
    except metadata.PackageNotFoundError:
        return "unknown"


def _load(source: ExportSource, point: PointData, stage: int) -> dict[str, Any]:
    """``scenario.load``: the grid point in the standardized fields, the load settings as
    recorded in ``native.config``. Prompts share one of `prefix kinds` prefixes each (drawn per
    request, not per client: one user per group)."""
    config = source.grid.config
    if config.prompt_lengths is None:
        input_len: dict[str, Any] = {"distribution": "fixed", "value": config.prompt_tokens}
    else:
        lengths = config.prompt_lengths.values
        input_len = {
            "distribution": "other",
            "value": config.prompt_tokens,
            "min": min(lengths),
            "max": max(lengths),
        }
    standardized: dict[str, Any] = {
        "tool": TOOL,
        "tool_version": _tool_version(),
        "source": "random",
        "stage": stage,
        "input_seq_len": input_len,
        "prefix": {
            "prefix_len": {"distribution": "fixed", "value": config.prefix_tokens},
            "num_groups": point.point.prefix_kinds,
            "num_users_per_group": 1,
            "num_prefixes": 1,
        },
        "concurrency": point.point.concurrency,
    }
    if config.arrival is not Arrival.CLOSED and config.request_rate is not None:
        standardized["rate_qps"] = config.request_rate
    native = config.model_dump(mode="json", by_alias=True)
    if source.simulated is not None:
        native["simulated"] = source.simulated
    return {
        "metadata": {"description": f"{source.name}: grid point {point.name}"},
        "standardized": standardized,
        "native": {"config": native},
    }


def _run(source: ExportSource, point: PointData) -> dict[str, Any]:
    grid = source.grid
    eid = _uid(source.name, grid.started_at.isoformat())
    what = "simulated" if source.simulated is not None else "measured"
    description = f"{source.name} {point.name} ({what} by {TOOL})"
    if source.simulated is not None:
        description += f": {source.simulated}"
    run: dict[str, Any] = {
        "uid": _uid(eid, point.name),
        "eid": eid,
        "description": description,
        "keywords": [TOOL, what],
    }
    starts = [r.started_at for r in point.runs if r.started_at is not None]
    ends = [r.finished_at for r in point.runs if r.finished_at is not None]
    if starts and ends:
        start, end = min(starts), max(ends)
        run["time"] = {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "duration": f"PT{(end - start).total_seconds():.3f}S",
        }
    return run


def report(source: ExportSource, point: PointData, stage: int) -> dict[str, Any]:
    """`point` (the grid's `stage`-th, from 0) as a Benchmark Report (a JSON-able dict)."""
    requests: dict[str, Any] = {
        "total": len(point.records),
        "failures": point.errors,
    }
    for field, usage in REQUEST_LENGTHS:
        values = point.tokens(usage)
        if values is not None:
            requests[field] = statistics(values, "count")
    return {
        "version": VERSION,
        "run": _run(source, point),
        "scenario": {"load": _load(source, point, stage)},
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": requests,
                    "latency": _section(point, LATENCIES),
                    "throughput": _section(point, THROUGHPUTS),
                }
            }
        },
    }


def export_files(source: ExportSource) -> dict[str, str]:
    """One report per grid point, ``benchmark_report_v0.2.1,_<point>.yaml``."""
    return {
        f"{FILE_PREFIX}{point.name}.yaml": yaml.safe_dump(
            report(source, point, stage), sort_keys=False
        )
        for stage, point in enumerate(source.points)
    }
