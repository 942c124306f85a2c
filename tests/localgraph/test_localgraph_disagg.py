"""A disaggregated local graph routes prefill -> decode and pays the simulated KV transfer."""

import statistics
import uuid
from pathlib import Path

from localgraph_chat import stream_chat

from simulator.localgraph import LocalGraph, LocalGraphSpec, MockerGroup
from simulator.model_dir import CHAT_TEMPLATE_OVERHEAD_TOKENS

MODEL = "Qwen/Qwen3-0.6B"
KV = 114_688  # Qwen3-0.6B KV bytes per token (the seed's figure)
PROMPT_TOKENS = 2_376  # a seed-sized prompt: its transfer (~0.5 s) stands out of the noise
REQUESTS = 3


def disagg_spec(bandwidth: float) -> LocalGraphSpec:
    prefill = MockerGroup("prefill", "prefill", 1, KV, kv_transfer_bandwidth_gb_per_s=bandwidth)
    return LocalGraphSpec(MODEL, "kv", (prefill, MockerGroup("decode", "decode", 1, KV)))


def median_ttft_s(graph: LocalGraph) -> float:
    """Median client TTFT (s) of REQUESTS distinct prompts of PROMPT_TOKENS tokens (no reuse)."""
    ttfts = []
    for _ in range(REQUESTS):
        content = (uuid.uuid4().hex * 100)[: PROMPT_TOKENS - CHAT_TEMPLATE_OVERHEAD_TOKENS]
        chat = stream_chat(graph.url, MODEL, content, 2)
        assert chat.done
        assert chat.usage["prompt_tokens"] == PROMPT_TOKENS
        assert chat.usage["prompt_tokens_details"]["cached_tokens"] == 0
        ttfts.append(chat.ttft_s)
    return statistics.median(ttfts)


def admissions(metrics: str, worker_type: str) -> float:
    """dynamo_frontend_router_admission_received_total for one worker type."""
    prefix = "dynamo_frontend_router_admission_received_total{"
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(prefix) and f'worker_type="{worker_type}"' in line
    )


def test_ttft_grows_by_the_kv_transfer_time(tmp_path: Path, local_model_dir: Path) -> None:
    bandwidth_gb_per_s = 0.5
    expected_delta_s = PROMPT_TOKENS * KV / (bandwidth_gb_per_s * 1e9)  # 0.545 s

    with LocalGraph(disagg_spec(0.0), tmp_path / "instant", local_model_dir) as graph:
        assert graph.registered_workers() == {"prefill": 1, "decode": 1}
        instant_s = median_ttft_s(graph)
    with LocalGraph(disagg_spec(bandwidth_gb_per_s), tmp_path / "slow", local_model_dir) as graph:
        slow_s = median_ttft_s(graph)
        metrics = graph.metrics_text()

    # Every request was admitted once to a prefill worker and once to a decode worker.
    assert admissions(metrics, "prefill") == REQUESTS
    assert admissions(metrics, "decode") == REQUESTS
    assert 0.5 * expected_delta_s < slow_s - instant_s < 1.5 * expected_delta_s
