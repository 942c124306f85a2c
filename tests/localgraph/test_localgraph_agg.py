"""An aggregated, KV-routed local graph (the shared `agg_kv_graph` fixture) serves chat."""

import time
import uuid

import httpx
from localgraph_chat import stream_chat
from prometheus_client.parser import text_string_to_metric_families

from simulator.localgraph import LocalGraph
from simulator.model_dir import CHAT_TEMPLATE_OVERHEAD_TOKENS

MODEL = "Qwen/Qwen3-0.6B"
BLOCK_TOKENS = 64  # the mocker's default KV block size (vLLM engine)
EVENTS_APPLIED = "dynamo_component_kv_cache_events_applied"
"""The frontend's KV router's count of workers' KV events its index applied, by event type and
status (its /metrics)."""


def stored_events(graph: LocalGraph) -> float:
    """The "stored" KV events the router's index has applied so far, over every worker."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(graph.metrics_text())
        if family.name == EVENTS_APPLIED
        for sample in family.samples
        if sample.labels.get("event_type") == "stored" and sample.labels.get("status") == "ok"
    )


def test_models_lists_the_served_model(agg_kv_graph: LocalGraph) -> None:
    models = httpx.get(f"{agg_kv_graph.url}/v1/models", timeout=10.0).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert agg_kv_graph.registered_workers() == {"worker": 2}
    assert agg_kv_graph.url.startswith("http://127.0.0.1:")


def test_streamed_chat_reports_usage_and_prefix_cache_hits(agg_kv_graph: LocalGraph) -> None:
    content = f"{uuid.uuid4().hex} " * 20  # 660 bytes, unique to this run
    prompt_tokens = len(content.encode()) + CHAT_TEMPLATE_OVERHEAD_TOKENS

    known = stored_events(agg_kv_graph)
    first = stream_chat(agg_kv_graph.url, MODEL, content, 4)
    assert first.done
    assert first.chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert first.usage["prompt_tokens"] == prompt_tokens
    assert first.usage["completion_tokens"] == 4
    assert first.usage["prompt_tokens_details"]["cached_tokens"] == 0

    # Once the router has applied the worker's KV events of those blocks (they travel to it
    # on their own, beside the response), KV routing sends the repeat to the worker holding
    # the prefix: every full block but the last (the final prompt token is always recomputed)
    # is a hit.
    deadline = time.monotonic() + 30
    while stored_events(agg_kv_graph) <= known:
        assert time.monotonic() < deadline, "the router applied no KV event of the first request"
        time.sleep(0.05)
    second = stream_chat(agg_kv_graph.url, MODEL, content, 4)
    cached = second.usage["prompt_tokens_details"]["cached_tokens"]
    assert cached == (prompt_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS


def test_metrics_count_the_requests(agg_kv_graph: LocalGraph) -> None:
    stream_chat(agg_kv_graph.url, MODEL, "metrics", 2)
    text = agg_kv_graph.metrics_text()
    assert 'dynamo_frontend_model_total_kv_blocks{model="Qwen/Qwen3-0.6B"} 16384' in text
    assert "dynamo_frontend_requests_total{" in text
