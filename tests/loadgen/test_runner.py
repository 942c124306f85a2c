"""Closed and open loops, the grid, the result folder and the CLI against the fake server."""

import asyncio
import itertools
import json
import random
import re
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fake_openai_server import DONE, FakeServer, Send, Sleep, Status, Step, Wait, normal_stream

from loadgen.api import ERROR_MESSAGE_CHARS, base_url, short_message
from loadgen.loops import make_client, run_closed_loop, run_poisson
from loadgen.runner import FIRST_ERRORS_KEPT, GridRun, grid_keys, grid_result, run_grid_async
from measurement.record import RequestRecord
from measurement.results import ErrorSample
from measurement.stats import summarize_point, summarize_run
from outputs.folder_writer import MeasuredRun, records_frame
from outputs.tables import seed_table, table_text
from workload.config import LoadConfig

PATH = "/v1/chat/completions"
MS = 1_000_000


def bodies(n: int) -> list[bytes]:
    return [
        json.dumps({"messages": [{"role": "user", "content": str(i)}]}).encode() for i in range(n)
    ]


def content_of(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


@pytest.mark.asyncio
async def test_closed_loop_above_httpx_default_pool_keeps_every_request_in_flight() -> None:
    """120 requests in flight at once (httpx's default pool holds 100): the server releases no
    response until all 120 have arrived, so a smaller pool would deadlock into timeouts."""
    n = 120
    everyone_here = asyncio.Event()

    def handler(body: dict[str, Any], number: int) -> list[Step]:
        if number == n - 1:
            everyone_here.set()
        return [Wait(everyone_here, timeout_s=10), *normal_stream(["a", "b"])]

    async with FakeServer(handler) as server:
        config = LoadConfig(concurrency=[n])
        async with make_client(server.url, config, n) as client:
            records = [RequestRecord(index=i, prefix_id=0) for i in range(n)]
            done = await run_closed_loop(
                client, PATH, bodies(n), records, concurrency=n, deadline_s=20
            )
    assert [r.error for r in done if not r.ok] == []
    assert (len(done), server.max_in_flight, server.connections) == (n, n, n)


@pytest.mark.asyncio
async def test_one_slow_request_does_not_hold_back_the_others() -> None:
    """Closed loop, no waves: request 0 is only answered after the other 19 finished; with
    waves of 4 it would block its wave and time out."""
    n, concurrency = 20, 4
    others_done = asyncio.Event()
    served: list[str] = []

    def handler(body: dict[str, Any], number: int) -> list[Step]:
        if content_of(body) == "0":
            return [Wait(others_done, timeout_s=10), *normal_stream(["slow"])]
        served.append(content_of(body))
        if len(served) == n - 1:
            others_done.set()
        return normal_stream(["fast"])

    async with (
        FakeServer(handler) as server,
        make_client(server.url, LoadConfig(), concurrency) as client,
    ):
        records = [RequestRecord(index=i, prefix_id=0) for i in range(n)]
        done = await run_closed_loop(
            client, PATH, bodies(n), records, concurrency=concurrency, deadline_s=20
        )
    assert all(r.ok for r in done)
    assert len(server.requests) == n  # exactly N, no extra
    assert server.max_in_flight <= concurrency
    assert server.connections <= concurrency  # connections are reused, not one per request
    assert max(done, key=lambda r: r.end_ns or 0).index == 0


@pytest.mark.asyncio
async def test_closed_loop_duration_stops_starting_requests() -> None:
    async with (
        FakeServer(lambda body, n: normal_stream(["a"])) as server,
        make_client(server.url, LoadConfig(), 2) as client,
    ):
        records = [RequestRecord(index=i, prefix_id=0) for i in range(10_000)]
        done = await run_closed_loop(
            client, PATH, bodies(10_000), records, concurrency=2, deadline_s=5, duration_s=0.3
        )
    assert 0 < len(done) == len(server.requests) < 10_000
    assert [r.index for r in done] == list(range(len(done)))


@pytest.mark.asyncio
async def test_poisson_records_intended_times_and_caps_in_flight() -> None:
    n = 30
    async with (
        FakeServer(lambda body, k: normal_stream(["a"])) as server,
        make_client(server.url, LoadConfig(), 2) as client,
    ):
        records = [RequestRecord(index=i, prefix_id=0) for i in range(n)]
        start = time.monotonic_ns()
        done = await run_poisson(
            client,
            PATH,
            bodies(n),
            records,
            rate=200.0,
            concurrency=2,
            deadline_s=5,
            rng=random.Random(3),
        )
    assert len(done) == len(server.requests) == n
    assert server.max_in_flight <= 2
    intended = [r.intended_ns for r in done]
    assert intended == sorted(intended) and intended[0] > start
    # The schedule is the seeded exponential gaps, independent of how the server responded.
    rng = random.Random(3)
    gaps = [int(rng.expovariate(200.0) * 1e9) for _ in range(n)]
    assert [b - a for a, b in itertools.pairwise(intended)] == gaps[1:]
    assert all(r.sent_ns is not None and r.sent_ns >= r.intended_ns for r in done)


def grid_handler(body: dict[str, Any], number: int) -> list[Step]:
    """Cached tokens = 900 of 1000 for K=2 runs, 500 for others; request 'x' fails with 500."""
    prompt = content_of(body)
    cached = 900 if prompt.startswith("P2") else 500
    return normal_stream(["a", "b", "c", "d"], prompt=1000, cached=cached)


@pytest.mark.asyncio
async def test_grid_writes_summary_and_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mark each prompt with its grid point's prefix kinds so the server can answer per point.
    import loadgen.plan as plan

    real_build = plan.build_prompts

    def marked(sizer: Any, **kw: Any) -> Any:
        prompts = real_build(sizer, **kw)
        return [type(p)(f"P{kw['prefix_kinds']} {p.text}", p.prefix_id) for p in prompts]

    monkeypatch.setattr(plan, "build_prompts", marked)
    config = LoadConfig(
        prefix_kinds=[2, 12],
        concurrency=[3],
        repetitions=2,
        requests_per_run=9,
        warmup_requests=2,
        prompt_tokens=50,
    )
    async with FakeServer(grid_handler) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, tmp_path, progress=False))
    # 2 calibration requests + 2 points x 2 repetitions x (2 warm-up + 9 measured)
    assert len(server.requests) == 2 + 4 * 11
    # The handler reports 1000 prompt tokens for any prompt: no tokens/word to measure.
    assert result.token_count_source == (
        "approximate:1 token/word (server's prompt_tokens did not grow with the prompt: "
        "1000 then 1000)"
    )
    assert [(p.prefix_kinds, p.concurrency, p.repetitions, p.samples) for p in result.points] == [
        (2, 3, 2, 18),
        (12, 3, 2, 18),
    ]
    assert [p.cached_ratio for p in result.points] == [0.9, 0.5]
    assert result.errors_by_kind == {} and result.first_failure_at is None
    summary = json.loads((tmp_path / "summary.json").read_text())
    required = {
        "prefix_kinds",
        "concurrency",
        "repetitions",
        "ttft_p50_ms",
        "ttft_p99_ms",
        "requests_per_s",
        "cached_ratio",
        "errors",
        "samples",
    }
    assert all(required <= set(point) for point in summary)
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    assert len(frame) == 36
    assert set(frame["cached_tokens"]) == {900, 500}
    assert frame["token_ns"].map(len).tolist() == [4] * 36
    assert "prefix" in (tmp_path / "table.txt").read_text()
    assert json.loads(result.model_dump_json())["config"]["prefix_kinds"] == [2, 12]


@pytest.mark.asyncio
async def test_grid_counts_errors_by_kind_and_keeps_first_messages() -> None:
    def handler(body: dict[str, Any], number: int) -> list[Step]:
        if number % 3 == 0:
            return [Status(503, b"no workers")]
        return normal_stream(["a"], prompt=10, cached=None)

    config = LoadConfig(
        prefix_kinds=[1],
        concurrency=[1],
        repetitions=1,
        requests_per_run=9,
        warmup_requests=0,
        prompt_tokens=20,
    )
    async with FakeServer(handler) as server:
        result = await run_grid_async(
            GridRun(server.url, "m", config, None, tokenizer=None, progress=False)
        )
    # Request 0 calibrates and fails, so the sizer falls back and says why; measured: 1..9.
    assert result.token_count_source == (
        "approximate:1 token/word (calibration request failed: http_status: HTTP 503: no workers)"
    )
    assert result.errors_by_kind == {"http_status": 3}  # numbers 3, 6, 9
    assert result.points[0].errors == 3 and result.points[0].samples == 6
    assert result.points[0].cached_ratio is None
    assert [e.message for e in result.first_errors] == ["HTTP 503: no workers"] * 3
    assert result.first_failure_at == result.first_errors[0].at


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/"),
        ("https://h/v1/", "https://h/"),
        (" http://h:1/proxy/v1 ", "http://h:1/proxy/"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/"),
    ],
)
def test_base_url_strips_one_v1(url: str, base: str) -> None:
    assert base_url(url) == base


@pytest.mark.parametrize("url", ["127.0.0.1:9", "ftp://h", "", "http://", "http://h?x=1"])
def test_base_url_rejects(url: str) -> None:
    with pytest.raises(ValueError, match=f"invalid server URL {re.escape(repr(url))}"):
        base_url(url)


@pytest.mark.asyncio
async def test_url_prefix_is_kept_and_v1_not_doubled() -> None:
    config = LoadConfig(prefix_kinds=[1], concurrency=[1], repetitions=1, requests_per_run=1)
    config = config.model_copy(update={"warmup_requests": 0, "prompt_tokens": 10})
    async with FakeServer(grid_handler) as server:
        await run_grid_async(GridRun(f"{server.url}/proxy/v1", "m", config, None, progress=False))
    assert set(server.paths) == {"/proxy/v1/chat/completions", "/proxy/metrics"}


SMALL_GRID = LoadConfig(
    prefix_kinds=[1],
    concurrency=[1],
    repetitions=1,
    requests_per_run=2,
    warmup_requests=0,
    prompt_tokens=20,
)


@pytest.mark.asyncio
async def test_calibration_failure_says_why() -> None:
    """An unreachable server: the prompt-size source names the failed calibration request
    (not "no usage"), and only one calibration request is tried."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = await run_grid_async(GridRun(url, "m", SMALL_GRID, None, progress=False))
    assert result.token_count_source.startswith(
        "approximate:1 token/word (calibration request failed: connection_error: "
        "ClientConnectorError: Cannot connect to host 127.0.0.1"
    )
    assert result.errors_by_kind == {"connection_error": 2}


@pytest.mark.asyncio
async def test_calibration_without_growing_usage_says_so() -> None:
    async with FakeServer(lambda body, n: normal_stream(["a"], prompt=50)) as server:
        result = await run_grid_async(GridRun(server.url, "m", SMALL_GRID, None, progress=False))
    assert result.token_count_source == (
        "approximate:1 token/word (server's prompt_tokens did not grow with the prompt: 50 then 50)"
    )


@pytest.mark.asyncio
async def test_error_messages_are_one_short_line() -> None:
    page = b"<html>\n<head><title>404 Not Found</title></head>\n<body>" + b"x" * 3000 + b"</body>"

    async with FakeServer(lambda body, n: [Status(404, page)]) as server:
        result = await run_grid_async(GridRun(server.url, "m", SMALL_GRID, None, progress=False))
    message = result.first_errors[0].message
    assert len(message) == ERROR_MESSAGE_CHARS and message.endswith("...")
    assert message.startswith("HTTP 404: <html> <head><title>404 Not Found</title></head> <body>x")
    assert "calibration request failed: http_status: HTTP 404: <html> <head>" in (
        result.token_count_source
    )


def test_short_message() -> None:
    assert short_message("a\n  b\tc") == "a b c"
    assert short_message("y" * ERROR_MESSAGE_CHARS) == "y" * ERROR_MESSAGE_CHARS
    assert short_message("y" * 1000) == "y" * (ERROR_MESSAGE_CHARS - 3) + "..."


@pytest.mark.asyncio
async def test_done_only_server_is_failures_not_fast_successes() -> None:
    """Every answer is HTTP 200 with the body `data: [DONE]`: each request is an
    `empty_stream` failure; nothing enters TTFT, requests/s or the cached ratio."""
    config = SMALL_GRID.model_copy(update={"requests_per_run": 3})
    async with FakeServer(lambda body, n: [Send(DONE)]) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, None, progress=False))
    (point,) = result.points
    assert (point.samples, point.errors, point.requests_per_s) == (0, 3, 0.0)
    assert (point.ttft_p50_ms, point.e2e_p50_ms, point.cached_ratio) == (None, None, None)
    assert result.errors_by_kind == {"empty_stream": 3}
    assert result.first_errors[0].message == (
        "HTTP 200 stream with no generated token: only [DONE]; usage.completion_tokens None"
    )


def test_grid_result_of_runs_so_far_orders_them_and_keeps_the_earliest_failures() -> None:
    """Runs finished in any order (a resumed grid) are reported in grid order; a point with one
    of its two repetitions is reported with `repetitions` 1; the first errors are the earliest
    of all runs, at most FIRST_ERRORS_KEPT."""
    t0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    config = LoadConfig(prefix_kinds=[2, 24], concurrency=[4], repetitions=2, requests_per_run=20)

    def run(kinds: int, rep: int, failures: int, start_s: int) -> MeasuredRun:
        records = [RequestRecord(index=i, prefix_id=0, sent_ns=0, first_token_ns=MS, end_ns=MS)
                   for i in range(20 - failures)]  # fmt: skip
        summary = summarize_run(records, prefix_kinds=kinds, concurrency=4, repetition=rep)
        summary = summary.model_copy(
            update={
                "errors": failures,
                "errors_by_kind": {"http_status": failures} if failures else {},
            }
        )
        errors = [
            ErrorSample(kind="http_status", message="503", prefix_kinds=kinds, concurrency=4,
                        repetition=rep, at=t0 + timedelta(seconds=start_s + i))
            for i in range(min(failures, FIRST_ERRORS_KEPT))
        ]  # fmt: skip
        return MeasuredRun(summary, errors, records_frame(kinds, 4, rep, records))

    runs = [run(24, 1, 12, 60), run(2, 2, 0, 30), run(2, 1, 3, 0)]
    result = grid_result("http://h:1", "m", config, "tokenizer:x", t0, runs)
    assert [(r.prefix_kinds, r.repetition) for r in result.runs] == [(2, 1), (2, 2), (24, 1)]
    assert [(p.prefix_kinds, p.repetitions, p.samples, p.errors) for p in result.points] == [
        (2, 2, 37, 3),
        (24, 1, 8, 12),
    ]
    assert result.errors_by_kind == {"http_status": 15}
    assert [e.at for e in result.first_errors] == [
        t0 + timedelta(seconds=s) for s in (0, 1, 2, 60, 61, 62, 63, 64, 65, 66)
    ]
    assert result.first_failure_at == t0
    assert grid_keys(config) == [(2, 4, 1), (2, 4, 2), (24, 4, 1), (24, 4, 2)]


@pytest.mark.asyncio
async def test_open_loop_short_of_its_offered_rate_says_so_and_why() -> None:
    """20 req/s offered, a 100 ms first token, one request in flight at most: about 9 req/s go
    out. The run warns with the cause it can see (the cap), and the
    table grows the offered / sent / queue p99 columns."""
    config = LoadConfig.model_validate(
        SMALL_GRID.model_dump()
        | {"arrival": "poisson", "request_rate": 20.0, "requests_per_run": 8, "max_connections": 1}
    )
    async with FakeServer(lambda body, n: [Sleep(0.1), *normal_stream(["a"])]) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, None, progress=False))
    (run,) = result.runs
    assert run.offered_rate_per_s == 20.0 and run.max_in_flight == 1
    # At most one 100 ms request at a time: at most 10 a second, fewer on a busy machine.
    assert run.sent_rate_per_s is not None and 0 < run.sent_rate_per_s < 10.5
    assert run.queue_p99_ms is not None and run.queue_p99_ms > 100
    (warning,) = [w for w in result.warnings if "offered" in w]
    assert warning.startswith(
        f"K=1 c=1 rep 1: sent {run.sent_rate_per_s:.1f} of the offered 20.0 requests/s and "
        f"client queue p99 {run.queue_p99_ms:,.0f} ms next to a TTFT p50 of "
    )
    little = re.search(
        r"the in-flight cap was reached: 1 in flight, at most 1 \(concurrency 1, pool of 1 "
        r"connections = maxConnections\); at 20 req/s and a mean E2E of (\d+\.\d\d) s about "
        r"(\d+) would be in flight \(Little's law\); raise --concurrency and --max-connections",
        warning,
    )
    assert little is not None, warning
    mean_e2e_s = float(little.group(1))
    assert mean_e2e_s >= 0.1 and abs(int(little.group(2)) - 20 * mean_e2e_s) <= 1
    text = table_text(seed_table(result.points))
    assert "offered" in text and "sent" in text and "queue" in text
    line = next(line for line in text.splitlines() if "/s, <=" in line)  # the open loop's row
    row = [cell for cell in line.split() if cell != "│"]
    assert row[-3:] == ["20.0", f"{run.sent_rate_per_s:.1f}", f"{run.queue_p99_ms:,.0f}"]


def test_closed_loop_that_keeps_up_has_no_delivery_columns() -> None:
    """Queue 1 ms next to a 40 ms TTFT, no offered rate: nothing to say, no extra columns."""
    records = [
        RequestRecord(index=i, prefix_id=0, intended_ns=50 * i * MS, sent_ns=(50 * i + 1) * MS,
                      first_token_ns=(50 * i + 41) * MS, token_ns=[(50 * i + 41) * MS],
                      last_token_ns=(50 * i + 41) * MS, end_ns=(50 * i + 42) * MS,
                      completion_tokens=1)
        for i in range(3)
    ]  # fmt: skip
    run = summarize_run(records, prefix_kinds=1, concurrency=1, repetition=1)
    assert (run.offered_rate_per_s, run.max_in_flight, run.queue_p99_ms) == (None, 1, 1.0)
    assert run.sent_rate_per_s == pytest.approx(2 / 0.101)  # first intended 0, last sent 101 ms
    assert not any("requests/s" in w or "queue" in w for w in run.warnings)
    point = summarize_point([run])
    assert "offered" not in table_text(seed_table([point]))


def test_a_warning_of_several_runs_is_said_once_naming_them() -> None:
    """As typed: 'TTFT p99 rests on 50 samples' once per run, 4 times per stack."""
    from loadgen.runner import runs_warnings

    low = "TTFT p99 rests on 50 samples (< 100): it is close to the maximum, not a stable p99"
    keys = [(2, 4, 1), (2, 4, 2), (24, 4, 1), (24, 4, 2)]
    assert runs_warnings((k, low) for k in keys) == [f"K=2 c=4 rep 1, 2; K=24 c=4 rep 1, 2: {low}"]
    # held out: other texts stay apart, in the order first seen; one run is named as before
    other = "TTFT p99 rests on 49 samples (< 100): it is close to the maximum, not a stable p99"
    assert runs_warnings([((2, 8, 3), other), ((2, 4, 1), low), ((2, 8, 1), other)]) == [
        f"K=2 c=8 rep 3, 1: {other}",
        f"K=2 c=4 rep 1: {low}",
    ]
