"""A GuideLLM benchmark report read as an `Imported` run (`formats.importer`), as GuideLLM 0.8.1
writes it (`guidellm run --output kind=json`).

The report (`guidellm/benchmark/schemas/report.py`): `metadata.guidellm_version`, `config.spec`
(the backend's `target` URL and `model`), and `benchmarks`, one per strategy run, each with its
`config.strategy` (`type_`: synchronous, concurrent with `streams`, constant / poisson with
`rate`, throughput; `max_concurrency`), its `metrics` and its `requests` (`successful`,
`errored`, `incomplete`), each a `GenerativeRequestStats`
(`guidellm/schemas/base/request_stats.py` L26-354). One benchmark is imported
(`--benchmark`, the first by default).

Per request, times are wall-clock seconds (floats): `info.timings.request_start` (the send),
`first_token_iteration`, `last_token_iteration`, `request_end`, and `token_iterations`, the
stream's content events; GuideLLM keeps no time per event, so the import spreads the events
evenly between the first and the last token. Tokens: `prompt_tokens` / `output_tokens` (the
server's usage, else GuideLLM's count, L221-246).

Definitions (request_stats.py): TTFT is `first_token_iteration - request_start` (L264-273),
ours. GuideLLM's `inter_token_latency_ms` is per request (last - first token) / (output
tokens - 1) (L337-354): our TPOT (`metrics.latency.tpot_ms`) with one token in the first
event; its benchmark figure weights each request by its output tokens - 1, which our pooled
per-token ITL over evenly spread events also does. Its `time_per_output_token_ms` is (last
token - request start) / output tokens (L316-333), TTFT included: not ours, not compared.
Its percentiles are the value where the cumulative share first reaches p
(`guidellm/schemas/base/statistics.py` L78-120, `Percentiles.from_pdf`), ours interpolate:
`guidellm_figures` recomputes GuideLLM's figures from the imported requests its way, and the
import checks them against the report's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from formats.imported import FormatError, Imported, load_json
from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from measurement.results import ImportSource
from measurement.stats import max_in_flight
from workload.config import Api

LACKS = [
    "no time per token: GuideLLM keeps the first and last token's, the others are spread "
    "evenly between them (ITL per token is the request's mean gap)",
    "no shared prefixes or prefix-cache figures of ours",
    "no server metrics",
]
EPOCH_S_MAX = 1e11
"""Wall-clock seconds stay below this until the year 5138; a larger `request_start` is in
ms, us or ns."""


def _s_to_ns(value: float, where: str) -> int:
    if value > EPOCH_S_MAX:
        raise FormatError(
            f"{where}: timestamp {value:g} is not in seconds (GuideLLM writes seconds since the "
            "epoch; this looks like ms, us or ns): give the report as GuideLLM wrote it"
        )
    return round(value * 1e9)


def record_of(index: int, stats: dict[str, Any], failed: bool, where: str) -> RequestRecord:
    """One `GenerativeRequestStats` as a `RequestRecord` (the module docstring says how)."""
    info = stats.get("info") or {}
    timings = info.get("timings") or {}
    start_s = timings.get("request_start") or timings.get("resolve_start")
    if start_s is None:
        raise FormatError(f"{where}: no request_start time; give the report as GuideLLM wrote it")
    start = _s_to_ns(start_s, where)
    record = RequestRecord(index=index, prefix_id=0, intended_ns=start, sent_ns=start)
    record.prompt_tokens = stats.get("prompt_tokens")
    record.completion_tokens = stats.get("output_tokens")
    record.cached_tokens = stats.get("cached_tokens")
    end_s = timings.get("request_end") or timings.get("resolve_end")
    end = _s_to_ns(end_s, where) if end_s is not None else start
    if failed:
        message = str(info.get("error") or "errored")
        kind = ErrorKind.TIMEOUT if "timeout" in message.lower() else ErrorKind.CONNECTION
        record.fail(kind, message)
        record.error_ns = end
        return record
    first_s, last_s = timings.get("first_token_iteration"), timings.get("last_token_iteration")
    if first_s is None or last_s is None:
        raise FormatError(
            f"{where}: no first_token_iteration: a GuideLLM run without streaming has no TTFT "
            "or token times; import a run made with the backend's stream on"
        )
    first, last = _s_to_ns(first_s, where), _s_to_ns(last_s, where)
    events = max(1, int(timings.get("token_iterations") or 1))
    step = (last - first) / (events - 1) if events > 1 else 0.0
    record.token_ns = [first + round(step * i) for i in range(events)]
    record.status = 200
    record.first_byte_ns = record.first_chunk_ns = record.first_token_ns = first
    record.last_token_ns = last
    record.chunks = events
    record.end_ns = end
    record.finish_reason = "stop"
    return record


def guidellm_percentile(pairs: Sequence[tuple[float, float]], q: float) -> float:
    """GuideLLM's percentile of (value, weight) pairs (`DistributionSummary.from_values`,
    statistics.py L432-490, then `Percentiles.from_pdf` L78-120): equal values merged, each
    value's share of the weight summed in value order in floating point, and the first value
    at which that running sum reaches `q` (0..1); the float sum is kept as GuideLLM's is (20
    shares of 0.05 sum to just under 0.5, so its p50 of 20 values is the 11th)."""
    merged: dict[float, float] = {}
    for value, weight in pairs:
        merged[value] = merged.get(value, 0.0) + weight
    total = math.fsum(merged.values())
    running = 0.0
    for value in sorted(merged):
        running += merged[value] / total
        if running >= q:
            return value
    return max(merged)


def guidellm_figures(records: Sequence[RequestRecord]) -> dict[str, float]:
    """GuideLLM's TTFT, ITL and request-latency p50 / p99 and TTFT mean (ms), recomputed its
    way from `records` (the module docstring): keys `ttft_mean_ms`, `ttft_p50_ms`, ...,
    `itl_p50_ms` (its token-weighted per-request ITL), `e2e_p50_ms` (its request latency:
    send to `request_end`)."""
    good = [r for r in records if r.ok and r.sent_ns is not None and r.first_token_ns]
    ttfts = [((r.first_token_ns or 0) - (r.sent_ns or 0)) / 1e6 for r in good]
    latencies = [((r.end_ns or 0) - (r.sent_ns or 0)) / 1e6 for r in good]
    itls = [
        (((r.last_token_ns or 0) - (r.first_token_ns or 0)) / 1e6 / n, float(n))
        for r in good
        if (n := (r.completion_tokens or 0) - 1) > 0
    ]
    out = {"ttft_mean_ms": math.fsum(ttfts) / len(ttfts)} if ttfts else {}
    for name, values in (("ttft", [(v, 1.0) for v in ttfts]), ("itl", itls)):
        for q in (50, 99):
            if values:
                out[f"{name}_p{q}_ms"] = guidellm_percentile(values, q / 100)
    for q in (50, 99):
        if latencies:
            out[f"e2e_p{q}_ms"] = guidellm_percentile([(v, 1.0) for v in latencies], q / 100)
    return out


def report_figures(metrics: dict[str, Any]) -> dict[str, float]:
    """The same figures as `guidellm_figures`, read from a benchmark's `metrics` (successful
    requests; request latency in s there, as ms here)."""
    out: dict[str, float] = {}
    names = {
        "ttft": ("time_to_first_token_ms", 1.0),
        "itl": ("inter_token_latency_ms", 1.0),
        "e2e": ("request_latency", 1e3),
    }
    for key, (metric, scale) in names.items():
        stats = (metrics.get(metric) or {}).get("successful") or {}
        percentiles = stats.get("percentiles") or {}
        if key == "ttft" and stats.get("mean") is not None:
            out["ttft_mean_ms"] = stats["mean"] * scale
        for q in (50, 99):
            if percentiles.get(f"p{q}") is not None:
                out[f"{key}_p{q}_ms"] = percentiles[f"p{q}"] * scale
    return out


def _benchmark(report: dict[str, Any], path: Path, index: int) -> dict[str, Any]:
    benchmarks = report.get("benchmarks") or []
    if not benchmarks:
        raise FormatError(f"{path}: the report holds no benchmarks; give a finished run's report")
    if not 0 <= index < len(benchmarks):
        raise FormatError(
            f"{path}: --benchmark {index} is not there: it holds {len(benchmarks)} "
            f"benchmark(s), 0..{len(benchmarks) - 1}"
        )
    return benchmarks[index]


def read(path: Path, benchmark: int = 0) -> Imported:
    """Benchmark `benchmark` (0-based) of the GuideLLM report at `path`."""
    report = load_json(path)
    if not isinstance(report, dict) or "benchmarks" not in report:
        raise FormatError(
            f"{path}: not a GuideLLM report (no benchmarks); give GuideLLM's JSON output, or "
            "--format for the tool that wrote it"
        )
    chosen = _benchmark(report, path, benchmark)
    requests = chosen.get("requests") or {}
    rows = [(s, False) for s in requests.get("successful") or []]
    rows += [(s, True) for s in requests.get("errored") or []]
    records = [
        record_of(i, stats, failed, f"{path}: benchmark {benchmark} request {i}")
        for i, (stats, failed) in enumerate(rows)
    ]
    records.sort(key=lambda r: r.sent_ns or 0)
    for index, record in enumerate(records):
        record.index = index
    if not records:
        raise FormatError(f"{path}: benchmark {benchmark} holds no requests")
    strategy = (chosen.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    rate = strategy.get("rate") if kind in ("constant", "poisson") else None
    concurrency = strategy.get("streams") or strategy.get("max_concurrency")
    if kind == "synchronous":
        concurrency = 1
    backend = ((report.get("config") or {}).get("spec") or {}).get("backend") or {}
    theirs = report_figures(chosen.get("metrics") or {})
    recomputed = guidellm_figures(records)
    notes = [
        f"differs from GuideLLM's own figures: {key}: GuideLLM says {theirs[key]:.4g}, the "
        f"imported requests give {recomputed.get(key, math.nan):.4g} (GuideLLM's definition)"
        for key in theirs
        if key not in recomputed or not math.isclose(recomputed[key], theirs[key], rel_tol=1e-3)
    ]
    incomplete = len(requests.get("incomplete") or [])
    if incomplete:
        notes.append(f"{incomplete} request(s) GuideLLM cancelled at the run's end left out")
    if len(report.get("benchmarks") or []) > 1:
        notes.append(
            f"benchmark {benchmark} of {len(report['benchmarks'])} imported (--benchmark N "
            "imports another)"
        )
    return Imported(
        source=ImportSource(
            tool="GuideLLM",
            version=(report.get("metadata") or {}).get("guidellm_version"),
            file=path.name,
            lacks=list(LACKS),
            figures={k: v for k, v in theirs.items() if k == "ttft_mean_ms"},
        ),
        records=records,
        model=str(backend.get("model") or "unknown"),
        url=str(backend.get("target") or "unknown"),
        concurrency=int(concurrency or max(1, max_in_flight(records))),
        request_rate=float(rate) if rate else None,
        api=Api.COMPLETIONS if backend.get("request_format") == "/v1/completions" else Api.CHAT,
        started_at=datetime.fromtimestamp((records[0].sent_ns or 0) / 1e9, UTC),
        notes=notes,
    )
