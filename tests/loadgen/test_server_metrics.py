"""Server-side metrics (loadgen.server_metrics): the histogram quantile estimate, and a server
without /metrics. The figures of the real Dynamo frontend are checked per run in
test_dynamo_e2e.py (test_each_run_reports_what_the_server_measured)."""

import math
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fake_openai_server import FakeServer, Step, normal_stream

from loadgen.config import LoadConfig
from loadgen.runner import run_grid_async
from loadgen.server_metrics import (
    ServerMetrics,
    delta,
    histogram_quantile,
    parse_samples,
    run_metrics,
)

pytestmark = pytest.mark.timeout(30)

BEFORE = """# TYPE dynamo_frontend_requests_total counter
dynamo_frontend_requests_total{model="m",status="success",error_type=""} 5
dynamo_frontend_requests_total{model="other",status="success",error_type=""} 7
# TYPE dynamo_frontend_time_to_first_token_seconds histogram
dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="0.1"} 5
dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="0.2"} 5
dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="+Inf"} 5
dynamo_frontend_time_to_first_token_seconds_sum{model="m"} 0.25
dynamo_frontend_time_to_first_token_seconds_count{model="m"} 5
"""
# 40 more requests for "m": 10 with TTFT <= 100 ms, 20 in (100, 200] ms, 10 above; 2 failed.
AFTER = """# TYPE dynamo_frontend_requests_total counter
dynamo_frontend_requests_total{model="m",status="success",error_type=""} 43
dynamo_frontend_requests_total{model="m",status="error",error_type="internal"} 2
dynamo_frontend_requests_total{model="other",status="success",error_type=""} 99
# TYPE dynamo_frontend_time_to_first_token_seconds histogram
dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="0.1"} 15
dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="0.2"} 35
dynamo_frontend_time_to_first_token_seconds_bucket{model="m",le="+Inf"} 45
dynamo_frontend_time_to_first_token_seconds_sum{model="m"} 6.25
dynamo_frontend_time_to_first_token_seconds_count{model="m"} 45
# TYPE dynamo_frontend_cached_tokens histogram
dynamo_frontend_cached_tokens_sum{model="m"} 1152
dynamo_frontend_cached_tokens_count{model="m"} 3
"""
VLLM_TEXT = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"


def test_histogram_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    buckets = [(0.1, 10.0), (0.2, 30.0), (math.inf, 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.15)  # rank 20: half into (0.1, 0.2]
    assert histogram_quantile(0.125, buckets) == pytest.approx(0.05)  # rank 5: from 0
    assert histogram_quantile(0.99, buckets) == 0.2  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None


def test_one_run_is_the_difference_of_two_scrapes_for_our_model_only() -> None:
    before, after = parse_samples(BEFORE, "m"), parse_samples(AFTER, "m")
    window = run_metrics(before, after)
    assert window.requests_by_status == {"success": 38, "error:internal": 2}
    assert window.requests == 40
    assert window.ttft_mean_ms == pytest.approx(6000 / 40)
    assert window.ttft_p50_ms == pytest.approx(150.0)  # rank 20 of 40: (100, 200] ms, halfway
    assert window.ttft_p99_ms == pytest.approx(200.0)
    assert (window.cached_tokens, window.input_tokens, window.itl_mean_ms) == (1152, None, None)
    assert delta(before, before) == dict.fromkeys(before, 0.0)


@pytest.mark.asyncio
async def test_a_server_without_metrics_is_one_warning_and_the_load_runs(tmp_path: Path) -> None:
    def handler(body: dict[str, Any], number: int) -> list[Step]:
        return normal_stream(["a", "b"])

    config = LoadConfig(
        prefix_kinds=[1, 2], concurrency=[2], repetitions=2, requests_per_run=4, prompt_tokens=20
    )
    async with FakeServer(handler) as server:
        url = server.url
        result = await run_grid_async(url, "m", config, tmp_path, progress=False)
    assert [w for w in result.warnings if "metrics" in w] == [
        f"no server-side metrics ({url}/metrics: HTTP 404: not found); the load ran without them"
    ]
    assert server.paths.count("/metrics") == 1  # asked once, then left alone
    assert [(r.samples, r.server) for r in result.runs] == [(4, None)] * 4
    assert not (tmp_path / "metrics").exists()


@pytest.mark.asyncio
async def test_prometheus_text_without_dynamo_names_is_no_server_metrics() -> None:
    async def vllm_metrics(_: web.Request) -> web.Response:
        return web.Response(
            text="# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
        )

    app = web.Application()
    app.router.add_get("/metrics", vllm_metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        observer = ServerMetrics(url, "m", LoadConfig(), None)
        await observer.before_run(1, 1, 1)
        await observer.before_run(1, 1, 2)
    finally:
        await runner.cleanup()
    assert observer.warnings() == [
        f"no server-side metrics ({url}metrics: no dynamo_frontend_* metrics: not a Dynamo "
        "frontend?); the load ran without them"
    ]
