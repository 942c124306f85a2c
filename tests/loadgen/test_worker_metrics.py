"""A vLLM worker's own families as run deltas (loadgen.worker_metrics), against expositions
built with prometheus-client from vLLM 0.31.0's definitions: the phase histograms of
`vllm/v1/metrics/loggers.py` (`PrometheusStatLogger`: `vllm:request_queue_time_seconds` L862,
`..._prefill_...` L882, `..._decode_...` L892 on `request_latency_buckets`, first bound 0.3 s:
`vllm/v1/metrics/buckets.py` L29-30; `vllm:time_to_first_token_seconds` L822), labelled
`model_name` and `engine`, and NIXL's of
`vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py` (`NixlPromMetrics`:
`vllm:nixl_xfer_time_seconds` L178 on buckets 0.005 .. 5.0 s, `vllm:nixl_bytes_transferred`
L199 on 2 KiB .. 16 GiB powers of two, the counter `vllm:nixl_num_failed_transfers`
L233-234). The Dynamo
mocker exports none of the NIXL families and no prefill-side phases, hence the fixtures."""

from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from loadgen.server_metrics import parse_samples, with_server
from loadgen.worker_metrics import per_worker, transfer_disagreement, worker_run_metrics
from measurement.results import PhaseFigures, RunSummary, ServerRunMetrics, TtftPhases
from measurement.stats import summarize_run
from workload.config import LoadConfig

MODEL = "Qwen/Qwen3-0.6B"
LABELS = ("model_name", "engine")
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0)
XFER_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))
KV_BYTES = 2_376 * 114_688  # one seed-sized prompt's KV (Qwen3-0.6B)


def exposition(
    queue_s: Sequence[float],
    prefill_s: Sequence[float] = (),
    xfer_s: Sequence[float] = (),
    failed: int = 0,
    nixl: bool = True,
) -> str:
    """A worker's /metrics text after observing these values (seconds; one transfer of
    `KV_BYTES` per `xfer_s` entry)."""
    registry = CollectorRegistry()
    values = (MODEL, "0")
    queue = Histogram(
        "vllm:request_queue_time_seconds", "", LABELS, buckets=LATENCY_BUCKETS, registry=registry
    )
    prefill = Histogram(
        "vllm:request_prefill_time_seconds", "", LABELS, buckets=LATENCY_BUCKETS, registry=registry
    )
    decode = Histogram(
        "vllm:request_decode_time_seconds", "", LABELS, buckets=LATENCY_BUCKETS, registry=registry
    )
    ttft = Histogram(
        "vllm:time_to_first_token_seconds", "", LABELS, buckets=LATENCY_BUCKETS, registry=registry
    )
    for q in queue_s:
        queue.labels(*values).observe(q)
        decode.labels(*values).observe(0.5)
    for p in prefill_s:
        prefill.labels(*values).observe(p)
        ttft.labels(*values).observe(p + 0.01)
    if nixl:
        xfer = Histogram(
            "vllm:nixl_xfer_time_seconds", "", LABELS, buckets=XFER_BUCKETS, registry=registry
        )
        moved = Histogram(
            "vllm:nixl_bytes_transferred", "", LABELS, buckets=BYTES_BUCKETS, registry=registry
        )
        failures = Counter("vllm:nixl_num_failed_transfers", "", LABELS, registry=registry)
        for x in xfer_s:
            xfer.labels(*values).observe(x)
            moved.labels(*values).observe(KV_BYTES)
        failures.labels(*values).inc(failed)
    return generate_latest(registry).decode()


def test_a_decode_workers_run_gives_its_queue_and_nixls_transfers() -> None:
    """Four requests in the run: the queue mean (where the KV read lands on a decode worker),
    NIXL's mean transfer time, bytes, effective rate and the failed transfers, as deltas."""
    before = parse_samples(exposition([0.1], [0.2], [0.05]), MODEL)
    after = parse_samples(
        exposition([0.1, 0.3, 0.3, 0.3, 0.3], [0.2] * 5, [0.05] * 5, failed=1), MODEL
    )
    m = worker_run_metrics("http://d:9090/", "decode", before, after)
    assert m.requests == 4 and m.transfers == 4
    assert m.queue_mean_ms == pytest.approx(300.0)
    assert m.prefill_mean_ms == pytest.approx(200.0)
    assert m.decode_mean_ms == pytest.approx(500.0)
    assert m.ttft_mean_ms == pytest.approx(210.0)
    assert m.transfer_mean_ms == pytest.approx(50.0)
    assert m.transfer_bytes == 4 * KV_BYTES
    assert m.transfer_gb_per_s == pytest.approx(KV_BYTES / 0.05 / 1e9)  # 5.45 GB/s
    assert (m.failed_transfers, m.counter_resets, m.missing) == (1, 0, [])


def test_a_restart_counts_from_zero_and_a_missing_family_stays_unknown() -> None:
    """A worker restarted between the scrapes: its counters count from 0 (as increase()), the
    resets are counted, nothing is negative. A worker without NIXL (a prefill worker, or no
    connector) names the families it lacks and has no transfer figures, never 0."""
    before = parse_samples(exposition([0.1] * 9, [0.2] * 9, nixl=False), MODEL)
    after = parse_samples(exposition([0.4, 0.4], [0.6, 0.6], nixl=False), MODEL)
    m = worker_run_metrics("http://p:9090/", "prefill", before, after)
    assert m.counter_resets > 0
    assert m.requests == 2 and m.queue_mean_ms == pytest.approx(400.0)
    assert m.prefill_mean_ms == pytest.approx(600.0)
    assert m.missing == [
        "vllm:nixl_xfer_time_seconds",
        "vllm:nixl_bytes_transferred",
        "vllm:nixl_num_failed_transfers_total",
    ]
    assert (m.transfers, m.transfer_mean_ms, m.transfer_gb_per_s, m.failed_transfers) == (
        None,
        None,
        None,
        None,
    )


def test_merged_scrapes_split_by_worker() -> None:
    """The observer merges its workers' samples with a leading ("worker", url) label: each
    worker's figures come back apart, in URL order."""

    def merged(texts: dict[str, str]) -> dict:
        return {
            (name, (("worker", url), *labels)): v
            for url, text in texts.items()
            for (name, labels), v in parse_samples(text, MODEL).items()
        }

    before = merged({"http://b/": exposition([0.1]), "http://a/": exposition([0.1])})
    after = merged({"http://b/": exposition([0.1, 0.5]), "http://a/": exposition([0.1] * 3)})
    workers = per_worker("decode", before, after)
    assert [(w.url, w.requests, w.queue_mean_ms) for w in workers] == [
        ("http://a/", 2, pytest.approx(100.0)),
        ("http://b/", 1, pytest.approx(500.0)),
    ]


def _run_with_estimate(estimate_ms: float) -> RunSummary:
    figures = PhaseFigures(mean_ms=estimate_ms, p50_ms=estimate_ms, p99_ms=estimate_ms)
    phases = TtftPhases(
        requests=4,
        phases={"kv_transfer": figures},
        client_ttft_mean_ms=300.0,
        frontend_ttft_mean_ms=100.0,
    )
    empty = summarize_run([], prefix_kinds=2, concurrency=4, repetition=1)
    return empty.model_copy(update={"phases": phases, "requests": 4})


def test_the_frontends_transfer_estimate_against_nixls_own_time() -> None:
    """Said where they differ by more than half of the larger, weighted by transfers."""
    before = parse_samples(exposition([0.1], [0.2], [0.05]), MODEL)
    after = parse_samples(exposition([0.1] * 5, [0.2] * 5, [0.05] * 5), MODEL)
    workers = [worker_run_metrics("http://d/", "decode", before, after)]
    assert transfer_disagreement(60.0, workers) is None
    said = transfer_disagreement(130.0, workers)
    assert said is not None and "mean 130.0 ms" in said and "mean 50.0 ms" in said
    assert transfer_disagreement(None, workers) is None
    server = ServerRunMetrics(
        requests=4,
        requests_by_status={"success": 4},
        ttft_mean_ms=None,
        ttft_p50_ms=None,
        ttft_p99_ms=None,
        itl_mean_ms=None,
        itl_p50_ms=None,
        input_tokens=None,
        cached_tokens=None,
        output_tokens=None,
        workers=workers,
    )
    config = LoadConfig(warmup_requests=0)
    run = with_server(_run_with_estimate(130.0), server, config)
    assert run.server is server and said in run.warnings
    assert not with_server(_run_with_estimate(55.0), server, config).warnings
