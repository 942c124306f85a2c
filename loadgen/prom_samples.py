"""Prometheus samples as the scrapes keep them, and their difference over a run: what the
frontend's (`loadgen.server_metrics`) and the workers' (`loadgen.worker_metrics`) run figures
are computed from."""

# Which process answered a scrape: the standard process collector's start time (seconds since
# the epoch), where the server exports it; the Dynamo frontend (ai-dynamo 1.6.1) exports
# neither that nor a pid, but labels its uptime gauge with its own instance id
# (`dynamo_component_uptime_seconds{worker_id="..."}`).
PROCESS_START = "process_start_time_seconds"
UPTIME = "dynamo_component_uptime_seconds"
IDENTITY_GAUGES = (PROCESS_START, UPTIME)
# Requests the server holds right now: the Dynamo frontend's in-flight gauge (labelled by
# model; `lib/llm/src/http/service/metrics.rs`), else vLLM's running + waiting gauges
# (vLLM 0.31.0 vllm/v1/metrics/loggers.py, "vllm:num_requests_running" L509 /
# "vllm:num_requests_waiting" L519).
FRONTEND_IN_FLIGHT = "dynamo_frontend_inflight_requests"
ENGINE_IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
KEPT_GAUGES = (*IDENTITY_GAUGES, FRONTEND_IN_FLIGHT, *ENGINE_IN_FLIGHT)
# vLLM's prefix-cache counters, in tokens (vLLM 0.31.0 `vllm/v1/metrics/loggers.py`,
# `PrometheusStatLogger`: "vllm:prefix_cache_queries" L599-600 / "vllm:prefix_cache_hits"
# L610-611, counters, so exposed with `_total`).
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
"""Gauges the scrapes keep (every other gauge goes up and down and is not differenced)."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""(sample name, labels other than `model`, sorted) -> value."""


def delta(before: Samples, after: Samples) -> Samples:
    """What each counter (and histogram bucket, `_sum`, `_count`) of `after` grew by since
    `before`, as Prometheus's `increase()` takes a counter reset: a value lower than before
    means the counter restarted from 0, so the increase is the value itself
    (prometheus/promql/functions.go, `extrapolatedRate`, "Handle counter resets": a drop adds
    the previous value back). A sample absent before counts from 0. Never negative."""
    return {
        key: value - before.get(key, 0.0) if value >= before.get(key, 0.0) else value
        for key, value in after.items()
    }


def resets(before: Samples, after: Samples) -> int:
    """How many samples of `after` went below their `before` value (counter resets; the gauges
    kept, `KEPT_GAUGES`, are not counters)."""
    return sum(
        value < before[key]
        for key, value in after.items()
        if key in before and key[0] not in KEPT_GAUGES
    )
