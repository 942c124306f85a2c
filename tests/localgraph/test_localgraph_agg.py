"""An aggregated, KV-routed local graph (the shared `agg_kv_graph` fixture) serves chat."""

import uuid

import httpx
import pytest
from localgraph_chat import stream_chat

from simulator.localgraph import LocalGraph
from simulator.model_dir import CHAT_TEMPLATE_OVERHEAD_TOKENS

pytestmark = pytest.mark.timeout(120)

MODEL = "Qwen/Qwen3-0.6B"
BLOCK_TOKENS = 64  # the mocker's default KV block size (vLLM engine)


def test_models_lists_the_served_model(agg_kv_graph: LocalGraph) -> None:
    models = httpx.get(f"{agg_kv_graph.url}/v1/models", timeout=10.0).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert agg_kv_graph.registered_workers() == {"worker": 2}
    assert agg_kv_graph.url.startswith("http://127.0.0.1:")


def test_streamed_chat_reports_usage_and_prefix_cache_hits(agg_kv_graph: LocalGraph) -> None:
    content = f"{uuid.uuid4().hex} " * 20  # 660 bytes, unique to this run
    prompt_tokens = len(content.encode()) + CHAT_TEMPLATE_OVERHEAD_TOKENS

    first = stream_chat(agg_kv_graph.url, MODEL, content, 4)
    assert first.done
    assert first.chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert first.usage["prompt_tokens"] == prompt_tokens
    assert first.usage["completion_tokens"] == 4
    assert first.usage["prompt_tokens_details"]["cached_tokens"] == 0

    # KV routing sends the repeat to the worker holding the prefix: every full block but the
    # last (the final prompt token is always recomputed) is a hit.
    second = stream_chat(agg_kv_graph.url, MODEL, content, 4)
    cached = second.usage["prompt_tokens_details"]["cached_tokens"]
    assert cached == (prompt_tokens - 1) // BLOCK_TOKENS * BLOCK_TOKENS


def test_metrics_count_the_requests(agg_kv_graph: LocalGraph) -> None:
    stream_chat(agg_kv_graph.url, MODEL, "metrics", 2)
    text = agg_kv_graph.metrics_text()
    assert 'dynamo_frontend_model_total_kv_blocks{model="Qwen/Qwen3-0.6B"} 16384' in text
    assert "dynamo_frontend_requests_total{" in text
