"""A `vllm bench serve --save-result --save-detailed` result read as an `Imported` run
(`formats.importer`), as vLLM 0.31.0 writes it (`vllm/benchmarks/serve.py` of the 0.31.0
wheel; lines below are that file's).

The file is one JSON object: `main`'s settings (`date`, local time of the save, `backend`,
`model_id`, `num_prompts`, `request_rate` ("inf" or requests/s), `max_concurrency`,
L2283-2310) merged with `benchmark`'s result (L1290-1310): the run's figures and, per request,
`input_lens`, `output_lens`, `ttfts` (s), `itls` (s, a list a request), `latencies` (s),
`start_times` (s, `time.perf_counter`: a clock of the process, not wall-clock) and `errors`
("" for a success). Without `--save-detailed` the per-request lists are removed (L2405-2418),
and the file cannot be imported.

Per request (`vllm/benchmarks/lib/endpoint_request_func.py`,
`async_request_openai_chat_completions` L346-430 and `async_request_openai_completions`
L161-270): the clock is read at every data event with `choices` (a role-only or empty
event included: TTFT is the first such event, the vLLM figure, which for chat is the role
chunk where the server sends one on its own); each later one appends the gap since the
previous to `itl`; `latency` ends at the last such event. The import keeps these times: the
first token at `start + ttft`, each later event the previous plus its gap, and E2E at
`start + latency`. Output tokens: `output_lens` (the server's usage, else vLLM's tokenizer,
`calculate_metrics` L604-620).

Definitions (`calculate_metrics`, L572-770): vLLM's ITL is the pooled per-chunk gaps
(`itls += outputs[i].itl`, L631): our ICL (`icl_p50_ms`), which our per-token ITL equals
with one token a chunk; its TPOT is (latency - ttft) / (output_len - 1) (L622-628): our TPOT
with one token in the first event. Percentiles: numpy's linear interpolation, as ours. So
`median_ttft_ms`, `p99_ttft_ms`, `mean_ttft_ms`, `median_tpot_ms`, `p99_tpot_ms` and
`median_e2el_ms` are compared with ours directly; the ITL figures with our ICL where no gap is
0 (ours drops gaps of events read together, vLLM keeps them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from formats.imported import FormatError, Imported, load_json
from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from measurement.results import ImportSource
from measurement.stats import max_in_flight
from workload.config import Api

PER_REQUEST = ("ttfts", "itls", "latencies", "start_times", "output_lens", "input_lens")
_FIGURES = {
    "ttft_mean_ms": "mean_ttft_ms",
    "ttft_p50_ms": "median_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "tpot_p99_ms": "p99_tpot_ms",
    "e2e_p50_ms": "median_e2el_ms",
    "e2e_p99_ms": "p99_e2el_ms",
}
_ICL_FIGURES = {"icl_p50_ms": "median_itl_ms"}
SECONDS_MAX = 60.0 * 60 * 24
"""No request's TTFT or latency is a day long: a larger value is in ms, not the s vLLM writes."""
LACKS = [
    "no server URL (vLLM does not save it)",
    "no wall-clock send times (start times are the client's process clock; the run's start "
    "is the file's date less its duration)",
    "no shared prefixes or prefix-cache figures of ours",
    "no server metrics",
]


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def record_of(index: int, data: dict[str, Any], where: str) -> RequestRecord:
    """Request `index` of the result `data` as a `RequestRecord` (the module docstring)."""
    start = _ns(data["start_times"][index])
    record = RequestRecord(index=index, prefix_id=0, intended_ns=start, sent_ns=start)
    record.prompt_tokens = data["input_lens"][index]
    output = data["output_lens"][index]
    error = (data.get("errors") or [""] * (index + 1))[index]
    latency = data["latencies"][index]
    if error:
        record.fail(ErrorKind.CONNECTION, str(error).strip().splitlines()[-1][:200])
        record.error_ns = start + _ns(latency or 0.0)
        return record
    ttft, gaps = data["ttfts"][index], data["itls"][index] or []
    if max(ttft, latency) > SECONDS_MAX:
        raise FormatError(
            f"{where}: TTFT {ttft:g} / latency {latency:g} are not in seconds (vLLM writes s); "
            "give the result as vllm bench serve saved it"
        )
    times = [start + _ns(ttft)]
    for gap in gaps:
        times.append(times[-1] + _ns(gap))
    record.completion_tokens = output or None
    record.status = 200
    record.first_byte_ns = record.first_chunk_ns = record.first_token_ns = times[0]
    record.token_ns = times
    record.chunks = len(times)
    record.last_token_ns = record.end_ns = start + _ns(latency)
    record.finish_reason = "stop"
    return record


def _started(data: dict[str, Any], path: Path) -> datetime | None:
    try:
        saved = datetime.strptime(str(data.get("date")), "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    return saved - timedelta(seconds=float(data.get("duration") or 0.0))


def read(path: Path) -> Imported:
    """The `vllm bench serve` result at `path`."""
    data = load_json(path)
    if not isinstance(data, dict) or "completed" not in data or "duration" not in data:
        raise FormatError(
            f"{path}: not a vllm bench serve result (no completed, duration); give the file "
            "--save-result wrote, or --format for the tool that wrote it"
        )
    missing = [key for key in PER_REQUEST if key not in data]
    if missing:
        raise FormatError(
            f"{path}: no per-request figures ({', '.join(missing)}): vllm bench serve keeps "
            "them only with --save-detailed; run it again with --save-result --save-detailed"
        )
    if not any(data["ttfts"]):
        raise FormatError(
            f"{path}: every TTFT is 0: the run did not stream (a non-streaming backend); "
            "import a run of a streaming backend (openai, openai-chat)"
        )
    records = [record_of(i, data, f"{path}: request {i}") for i in range(len(data["ttfts"]))]
    records.sort(key=lambda r: r.sent_ns or 0)
    for index, record in enumerate(records):
        record.index = index
    zero_gap = any(gap == 0 for gaps in data["itls"] for gap in gaps or [])
    wanted = {**_FIGURES, **({} if zero_gap else _ICL_FIGURES)}
    figures = {ours: float(data[theirs]) for ours, theirs in wanted.items() if theirs in data}
    rate = data.get("request_rate")
    rate = None if rate in (None, "inf") else float(rate)
    concurrency = data.get("max_concurrency") or max(1, max_in_flight(records))
    backend = str(data.get("backend") or data.get("endpoint_type") or "")
    return Imported(
        source=ImportSource(
            tool="vllm bench serve",
            version=data.get("vllm_version"),
            file=path.name,
            lacks=list(LACKS),
            figures=figures,
        ),
        records=records,
        model=str(data.get("model_id") or "unknown"),
        url="unknown",
        concurrency=int(concurrency),
        request_rate=rate,
        api=Api.CHAT if "chat" in backend else Api.COMPLETIONS,
        started_at=_started(data, path),
        notes=[]
        if "vllm_version" in data
        else ["the file does not say which vLLM wrote it (--metadata vllm_version=X does)"],
    )
