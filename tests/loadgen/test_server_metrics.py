"""Server-side metrics (loadgen.server_metrics): the histogram quantile estimate, and a server
without /metrics. The figures of the real Dynamo frontend are checked per run in
test_dynamo_e2e.py (test_each_run_reports_what_the_server_measured)."""

import math
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fake_openai_server import FakeServer, Step, normal_stream

from loadgen.runner import GridRun, run_grid_async
from loadgen.server_metrics import (
    ServerMetrics,
    attribution_problem,
    delta,
    histogram_quantile,
    parse_samples,
    run_metrics,
)
from measurement.stats import summarize_run
from workload.config import LoadConfig

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
        result = await run_grid_async(GridRun(url, "m", config, tmp_path, progress=False))
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


def _requests(success: int, start: float = 1.0) -> str:
    return (
        f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}\n"
        "# TYPE dynamo_frontend_requests_total counter\n"
        f'dynamo_frontend_requests_total{{model="m",status="success",error_type=""}} {success}\n'
    )


def test_a_restart_between_the_scrapes_counts_from_zero_like_increase() -> None:
    """The frontend restarted mid-run: 43 before, 5 after (since the restart). Prometheus's
    increase() gives 5, never 5 - 43 = -38."""
    window = run_metrics(parse_samples(_requests(43), "m"), parse_samples(_requests(5, 2.0), "m"))
    assert (window.requests, window.counter_resets, window.process_changed) == (5, 1, True)
    assert attribution_problem(window, sent=24) is None


def test_scrapes_of_two_replicas_are_not_attributed_to_the_run() -> None:
    """Two frontends behind one Service: the before scrape hits one (10 requests), the after
    scrape the other (5,032): 5,022 for a run that sent 22 is refused, as is any rise seen
    across two processes."""
    window = run_metrics(
        parse_samples(_requests(10, 1.0), "m"), parse_samples(_requests(5032, 7.0), "m")
    )
    assert window.requests == 5022
    assert attribution_problem(window, sent=22) == (
        "the server counted 5022 requests where this run sent 22 (warm-up included): the "
        "scrapes add up several processes (replicas behind one address) or other clients"
    )
    small = run_metrics(
        parse_samples(_requests(10, 1.0), "m"), parse_samples(_requests(20, 7.0), "m")
    )
    assert attribution_problem(small, sent=22) == (
        "the two scrapes came from different processes (process_start_time_seconds or the "
        "frontend's instance id differs) and no counter went back: another replica answered"
    )


class _Scripted:
    """An HTTP server whose /metrics answers the next text of `texts` on each scrape."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.runner: web.AppRunner | None = None

    async def __aenter__(self) -> str:
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(text=self.texts.pop(0))

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}/"

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.mark.asyncio
async def test_figures_of_two_replicas_are_left_out_and_prefill_hits_are_measured() -> None:
    """The observer end to end: run 1 scrapes one replica then the other (left out, said in the
    run's warnings); run 2 one process, and the prefill worker's vLLM counters give the
    prefix-cache hit rate (300 of 1,000 tokens) beside the frontend's figures."""
    frontend = [_requests(10, 1.0), _requests(5032, 7.0), _requests(5032, 7.0)]
    frontend.append(_requests(5056, 7.0))
    worker = [
        "vllm:prefix_cache_queries_total 4000\nvllm:prefix_cache_hits_total 100\n",
        "vllm:prefix_cache_queries_total 5000\nvllm:prefix_cache_hits_total 400\n",
    ] * 2
    run = summarize_run([], prefix_kinds=1, concurrency=2, repetition=1)
    run = run.model_copy(update={"requests": 22})
    async with _Scripted(frontend) as url, _Scripted(worker) as prefill:
        observer = ServerMetrics(url, "m", LoadConfig(), None, [prefill])
        await observer.before_run(1, 2, 1)
        first = await observer.after_run(run)
        await observer.before_run(1, 2, 2)
        second = await observer.after_run(run)
    assert first.server is None
    assert first.warnings[-1].startswith("server figures left out: the server counted 5022")
    assert second.server is not None
    assert (second.server.requests, second.server.process_changed) == (24, False)
    assert (second.server.prefix_cache_hits, second.server.prefix_cache_queries) == (300, 1000)
    assert second.server.prefix_cache_hit_ratio == pytest.approx(0.3)
    assert observer.warnings() == []


def _frontend(worker_id: str, success: int, cached: dict[str, int], routed: int = 0) -> str:
    """The Dynamo frontend's own identity (uptime gauge) and its KV router's per-phase counts,
    as the real 1.6.1 frontend labels them."""
    lines = [
        "# TYPE dynamo_component_uptime_seconds gauge",
        f'dynamo_component_uptime_seconds{{worker_id="{worker_id}"}} 12.5',
        _requests(success).split("\n", 2)[2],
        "# TYPE dynamo_component_router_kv_selected_cached_prefix_tokens_total counter",
    ]
    labels = f'model="m",router_id="1",worker_id="{worker_id}"'
    selected = "dynamo_component_router_kv_selected_cached_prefix_tokens_total"
    lines += [f'{selected}{{{labels},phase="{p}"}} {n}' for p, n in cached.items()]
    lines.append("# TYPE dynamo_component_router_input_sequence_tokens histogram")
    lines += [
        f'dynamo_component_router_input_sequence_tokens_sum{{{labels},phase="{p}"}} {routed}'
        for p in cached
    ]
    lines += [
        f'dynamo_component_router_input_sequence_tokens_count{{{labels},phase="{p}"}} 2'
        for p in cached
    ]
    return "\n".join(lines) + "\n"


def test_the_frontends_instance_id_names_the_process_and_its_router_gives_the_prefill_hits() -> (
    None
):
    """No process_start_time_seconds (the Dynamo frontend has none): its uptime gauge's
    worker_id tells two replicas apart; the router's prefill phase (not decode, which counts
    the KV it received) gives the cached share: 300 of 1,000 tokens."""
    empty = {"prefill": 0, "decode": 0}
    same = run_metrics(
        parse_samples(_frontend("a1", 0, empty), "m"),
        parse_samples(_frontend("a1", 2, {"prefill": 300, "decode": 999}, routed=1000), "m"),
    )
    assert (same.process_changed, same.router_cached_tokens, same.router_input_tokens) == (
        False,
        300,
        1000,
    )
    assert same.router_cached_ratio == pytest.approx(0.3)
    other = run_metrics(
        parse_samples(_frontend("a1", 5, empty), "m"),
        parse_samples(_frontend("b2", 9, empty), "m"),
    )
    assert other.process_changed is True
