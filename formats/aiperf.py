"""AIPerf's export read as an `Imported` run (`formats.importer`), as AIPerf 0.13.0 writes it.

Files (`aiperf/config/artifacts.py` L50-58): `profile_export.jsonl`, one `MetricRecordInfo` a
line (`aiperf/common/models/record_models.py` L1714-1742: `metadata`, `metrics` as
`{name: {value, unit}}` L158-162, `error`), and `profile_export_aiperf.json`, the run's
aggregate (`aiperf/exporters/metrics_json_exporter.py` L56-90: `aiperf_version`,
`input_config`, per metric `{unit, avg, p50, p90, p99, ...}`). The requests come from the
JSONL (the CSV and the JSON hold only aggregates); the JSON, when beside it, gives the version,
URL, model, concurrency or rate, and AIPerf's own figures, which the import checks ours
against.

Per request (`MetricRecordMetadata`, L165-260): `request_start_ns` and `request_end_ns` are
wall-clock ns (`time.time_ns`); `benchmark_phase` "warmup" records are left out. The first
token is `request_start_ns + time_to_first_token`, each later content chunk the previous plus
its `inter_chunk_latency` (`aiperf/metrics/types/inter_chunk_latency_metric.py` L55-75: one
gap per content response after the first), and the last token `request_start_ns +
request_latency`. Output tokens: the server's `usage_completion_tokens` where it sent usage,
else AIPerf's `output_sequence_length` (its tokenizer's count); input tokens likewise
(`usage_prompt_tokens`, else `input_sequence_length`).

ITL: AIPerf's `inter_token_latency` is per request (request_latency - TTFT) / (output
sequence length - tokens of the first content chunk, 1 when unknown)
(`aiperf/metrics/types/inter_token_latency_metric.py` L19-102): our TPOT
(`metrics.latency.tpot_ms`), so its p50/p99 are compared with our `tpot_p50_ms` /
`tpot_p99_ms`, where AIPerf's token counts are the server's (else its tokenizer counted
the output and the two divide by different counts: not compared, and said so).
Our ITL (per token, pooled) has no AIPerf counterpart.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from formats.imported import FormatError, Imported, as_ms, load_json
from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from measurement.results import ImportSource
from measurement.stats import max_in_flight
from workload.config import Api

JSONL = "profile_export.jsonl"
AGGREGATE = "profile_export_aiperf.json"
_FIGURES = {
    "ttft_mean_ms": ("time_to_first_token", "avg"),
    "ttft_p50_ms": ("time_to_first_token", "p50"),
    "ttft_p90_ms": ("time_to_first_token", "p90"),
    "ttft_p99_ms": ("time_to_first_token", "p99"),
    "e2e_p50_ms": ("request_latency", "p50"),
    "e2e_p99_ms": ("request_latency", "p99"),
}
_ITL_FIGURES = {
    "tpot_p50_ms": ("inter_token_latency", "p50"),
    "tpot_p99_ms": ("inter_token_latency", "p99"),
}
LACKS = [
    "no shared prefixes or prefix-cache figures of ours",
    "no server metrics",
    "tokens per chunk not recorded (the output is spread evenly over the chunks)",
]


def files(path: Path) -> tuple[Path, Path | None]:
    """(the JSONL, the aggregate JSON or None) for `path`: an artifact folder, the JSONL, or
    the aggregate JSON / CSV beside it. Raises FormatError when no JSONL is there."""
    folder = path if path.is_dir() else path.parent
    jsonl = path if path.suffix == ".jsonl" else folder / JSONL
    if not jsonl.is_file():
        raise FormatError(
            f"{path}: AIPerf's per-request export {JSONL} is not there; give the artifact "
            "folder that holds it (AIPerf writes it unless --export-level summary)"
        )
    aggregate = folder / AGGREGATE
    return jsonl, aggregate if aggregate.is_file() else None


def _metric_ms(metrics: dict[str, Any], name: str, where: str) -> float | list[float] | None:
    entry = metrics.get(name)
    if entry is None:
        return None
    value, unit = entry["value"], entry.get("unit", "ms")
    if isinstance(value, list):
        return [as_ms(v, unit, f"{where}: {name}") for v in value]
    return as_ms(value, unit, f"{where}: {name}")


def _count(metrics: dict[str, Any], *names: str) -> int | None:
    for name in names:
        entry = metrics.get(name)
        if entry is not None and entry.get("value") is not None:
            return int(entry["value"])
    return None


def _error(record: RequestRecord, error: dict[str, Any], end_ns: int) -> None:
    """`record` failed as AIPerf's `ErrorDetails` (`aiperf/common/models/error_models.py`:
    `code`, `type`, `message`) says."""
    code, kind = error.get("code"), str(error.get("type") or "")
    message = f"{kind}: {error.get('message', '')}".strip(": ")
    if isinstance(code, int) and code != 200:
        record.status = code
        record.fail(ErrorKind.HTTP_STATUS, message)
    elif "timeout" in message.lower():
        record.fail(ErrorKind.TIMEOUT, message)
    else:
        record.fail(ErrorKind.CONNECTION, message)
    record.error_ns = end_ns


def record_of(index: int, line: dict[str, Any], where: str) -> RequestRecord:
    """One JSONL line's request as a `RequestRecord` (see the module docstring)."""
    meta, metrics = line["metadata"], line.get("metrics") or {}
    start, end = int(meta["request_start_ns"]), int(meta["request_end_ns"])
    record = RequestRecord(index=index, prefix_id=0, intended_ns=start, sent_ns=start)
    record.prompt_tokens = _count(metrics, "usage_prompt_tokens", "input_sequence_length")
    record.completion_tokens = _count(metrics, "usage_completion_tokens", "output_sequence_length")
    record.cached_tokens = _count(metrics, "usage_prompt_cache_read_tokens")
    if line.get("error"):
        _error(record, line["error"], end)
        return record
    ttft = _metric_ms(metrics, "time_to_first_token", where)
    latency = _metric_ms(metrics, "request_latency", where)
    gaps = _metric_ms(metrics, "inter_chunk_latency", where) or []
    if not isinstance(ttft, float) or not isinstance(latency, float):
        raise FormatError(
            f"{where}: no time_to_first_token: an AIPerf run without --streaming has no TTFT "
            "or token times; import a run made with --streaming"
        )
    first = start + round(ttft * 1e6)
    times = [first]
    for gap in gaps if isinstance(gaps, list) else []:
        times.append(times[-1] + round(gap * 1e6))
    record.status = 200
    record.first_byte_ns = record.first_chunk_ns = record.first_token_ns = first
    record.token_ns = times
    record.chunks = len(times)
    record.last_token_ns = start + round(latency * 1e6)
    record.end_ns = end
    record.finish_reason = "stop"
    return record


def _lines(jsonl: Path) -> list[dict[str, Any]]:
    lines = []
    text = jsonl.read_text().splitlines()
    for number, raw in enumerate(text, 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            cut = " (the file was cut off)" if number == len(text) else ""
            raise FormatError(
                f"{jsonl}: line {number} is not JSON{cut}; export the run again, or delete "
                f"line {number} to import the others"
            ) from None
        if not isinstance(line, dict) or "metadata" not in line:
            raise FormatError(
                f"{jsonl}: line {number} is not an AIPerf record (no metadata); give AIPerf's "
                f"{JSONL}, or --format for the tool that wrote it"
            )
        lines.append(line)
    return lines


def _figures(aggregate: dict[str, Any], same_counts: bool) -> dict[str, float]:
    wanted = {**_FIGURES, **(_ITL_FIGURES if same_counts else {})}
    out = {}
    for key, (metric, stat) in wanted.items():
        entry = aggregate.get(metric)
        if isinstance(entry, dict) and entry.get(stat) is not None:
            out[key] = as_ms(float(entry[stat]), entry.get("unit", "ms"), f"{AGGREGATE}: {metric}")
    return out


def _profiling_phase(config: dict[str, Any]) -> dict[str, Any]:
    phases = [p for p in config.get("phases") or [] if p.get("kind") == "profiling"]
    return phases[0] if phases else {}


def read(path: Path) -> Imported:
    """AIPerf's export at `path` (a folder, its JSONL, or its aggregate JSON / CSV)."""
    jsonl, aggregate_path = files(path)
    lines = [line for line in _lines(jsonl) if line["metadata"].get("benchmark_phase") != "warmup"]
    if not lines:
        raise FormatError(f"{jsonl}: no profiling records; give the export of a finished run")
    records = [record_of(i, line, f"{jsonl} line {i + 1}") for i, line in enumerate(lines)]
    records.sort(key=lambda r: r.sent_ns or 0)
    for index, record in enumerate(records):
        record.index = index
    aggregate = load_json(aggregate_path) if aggregate_path else {}
    if not isinstance(aggregate, dict):
        raise FormatError(f"{aggregate_path}: not AIPerf's aggregate (a JSON object expected)")
    config = aggregate.get("input_config") or {}
    endpoint = config.get("endpoint") or {}
    models = (config.get("models") or {}).get("items") or [{}]
    phase = _profiling_phase(config)
    same = all(
        _count(line["metrics"], "usage_completion_tokens")
        in (None, _count(line["metrics"], "output_sequence_length"))
        for line in lines
        if line.get("metrics")
    )
    notes = []
    if not same:
        notes.append(
            "AIPerf counted the output with its tokenizer, the server's usage said otherwise: "
            "TPOT and ITL use the server's counts, so AIPerf's inter_token_latency (divided by "
            "its own count) was not compared"
        )
    lacks = list(LACKS)
    if aggregate_path is None:
        lacks.append(f"no {AGGREGATE} beside it: AIPerf's version, URL and figures unknown")
    rate = phase.get("rate") or phase.get("request_rate")
    concurrency = int(phase.get("concurrency") or max(1, max_in_flight(records)))
    warmups = [p for p in config.get("phases") or [] if p.get("kind") == "warmup"]
    warmup = sum(int(p.get("requests") or 0) for p in warmups)
    started = min(int(line["metadata"]["request_start_ns"]) for line in lines)
    return Imported(
        source=ImportSource(
            tool="AIPerf",
            version=aggregate.get("aiperf_version"),
            file=jsonl.name,
            lacks=lacks,
            figures=_figures(aggregate, same),
        ),
        records=records,
        model=str(models[0].get("name") or "unknown"),
        url=str((endpoint.get("urls") or ["unknown"])[0]),
        concurrency=concurrency,
        warmup_requests=None if warmup == concurrency else warmup,
        request_rate=float(rate) if rate else None,
        api=Api.COMPLETIONS if endpoint.get("type") == "completions" else Api.CHAT,
        started_at=datetime.fromtimestamp(started / 1e9, UTC),
        notes=notes,
    )
