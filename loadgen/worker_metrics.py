"""What each vLLM worker's own `/metrics` counted during a run: the request phases and NIXL's
transfers, as run deltas (`loadgen.prom_samples.delta`: a counter reset counts from 0, as
Prometheus's `increase()` does, and is counted).

The families (vLLM 0.31.0, lines of its sdist on PyPI):

- `vllm/v1/metrics/loggers.py`, `PrometheusStatLogger` (L454): the seconds histograms
  `vllm:request_queue_time_seconds` (L862), `vllm:request_prefill_time_seconds` (L882),
  `vllm:request_decode_time_seconds` (L892), observed once per finished request over the
  intervals of `vllm/v1/metrics/stats.py` L544-553 (queued -> scheduled, scheduled -> first
  token, first -> last token), and `vllm:time_to_first_token_seconds` (L822); the phase
  histograms' buckets start at 0.3 s (`vllm/v1/metrics/buckets.py` L29-30,
  `REQUEST_LATENCY_BUCKETS`), so a run's mean (`_sum` / `_count`) is the figure kept, never a
  quantile.
- `vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py`, `NixlPromMetrics` (L152):
  `vllm:nixl_xfer_time_seconds` (L178; one observation per transfer, its duration:
  `observe` L265-281), `vllm:nixl_bytes_transferred` (L199; bytes per transfer), the counter
  `vllm:nixl_num_failed_transfers` (L233-234); exported only where a NIXL connector runs.

A family the worker does not export is named in `WorkerRunMetrics.missing` and its figures
stay None, never 0.
"""

from loadgen.prom_samples import Samples, delta, resets
from measurement.results import WorkerRunMetrics

QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
TTFT = "vllm:time_to_first_token_seconds"
XFER_TIME = "vllm:nixl_xfer_time_seconds"
XFER_BYTES = "vllm:nixl_bytes_transferred"
XFER_FAILED = "vllm:nixl_num_failed_transfers_total"
HISTOGRAMS = (QUEUE, PREFILL, DECODE, TTFT, XFER_TIME, XFER_BYTES)


def _sum_of(samples: Samples, name: str) -> float | None:
    values = [value for (sample, _), value in samples.items() if sample == name]
    return sum(values) if values else None


def _mean_ms(window: Samples, histogram: str) -> float | None:
    count, total = _sum_of(window, histogram + "_count"), _sum_of(window, histogram + "_sum")
    return None if not count or total is None else total / count * 1e3


def _exported(samples: Samples, name: str) -> bool:
    return any(sample.startswith(name) for sample, _ in samples)


def worker_run_metrics(url: str, role: str, before: Samples, after: Samples) -> WorkerRunMetrics:
    """One worker's `WorkerRunMetrics` between two scrapes (`parse_samples` of each)."""
    window = delta(before, after)
    missing = [
        name
        for name in (*HISTOGRAMS, XFER_FAILED)
        if not (_exported(after, name) and _exported(before, name))
    ]
    count = _sum_of(window, XFER_TIME + "_count")
    seconds = _sum_of(window, XFER_TIME + "_sum")
    moved = _sum_of(window, XFER_BYTES + "_sum")
    requests = _sum_of(window, QUEUE + "_count")
    failed = _sum_of(window, XFER_FAILED)
    return WorkerRunMetrics(
        url=url,
        role=role,
        requests=None if requests is None else round(requests),
        queue_mean_ms=_mean_ms(window, QUEUE),
        prefill_mean_ms=_mean_ms(window, PREFILL),
        decode_mean_ms=_mean_ms(window, DECODE),
        ttft_mean_ms=_mean_ms(window, TTFT),
        transfers=None if count is None else round(count),
        transfer_mean_ms=_mean_ms(window, XFER_TIME),
        transfer_bytes=None if moved is None else round(moved),
        transfer_gb_per_s=moved / seconds / 1e9 if moved is not None and seconds else None,
        failed_transfers=None if failed is None else round(failed),
        counter_resets=resets(before, after),
        missing=missing,
    )


def per_worker(role: str, before: Samples, after: Samples) -> list[WorkerRunMetrics]:
    """`worker_run_metrics` of every worker in two merged scrapes (keys' labels led by
    `("worker", url)`, as `ServerMetrics` merges them), in URL order."""

    def split(samples: Samples) -> dict[str, Samples]:
        out: dict[str, Samples] = {}
        for (name, labels), value in samples.items():
            (_, url), *rest = labels
            out.setdefault(url, {})[(name, tuple(rest))] = value
        return out

    b, a = split(before), split(after)
    return [worker_run_metrics(url, role, b.get(url, {}), a[url]) for url in sorted(a)]


def transfer_disagreement(
    estimated_ms: float | None, workers: list[WorkerRunMetrics]
) -> str | None:
    """A run warning when the frontend's mean KV-transfer estimate (`estimated_ms`,
    `measurement.phases`) and NIXL's own mean transfer time (the workers' `transfer_mean_ms`,
    weighted by their transfers) differ by more than half of the larger; None otherwise or
    without both."""
    timed = [
        (w.transfers, w.transfer_mean_ms) for w in workers if w.transfers and w.transfer_mean_ms
    ]
    if estimated_ms is None or not timed:
        return None
    nixl = sum(n * ms for n, ms in timed) / sum(n for n, _ in timed)
    if abs(estimated_ms - nixl) <= 0.5 * max(estimated_ms, nixl):
        return None
    return (
        f"the frontend's KV-transfer estimate (mean {estimated_ms:,.1f} ms) and NIXL's own "
        f"transfer time (mean {nixl:,.1f} ms) disagree: the estimate runs to the decode "
        "worker's first token, NIXL's from the read's post to its completion"
    )
