"""Worker processes: the split of a run, the automatic count, and real processes against the
fake server (exactly N requests, the requested concurrency in flight at once)."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeServer, Sleep, Step, Wait, normal_stream

from loadgen.loops import Share
from loadgen.runner import GridRun, run_grid_async
from loadgen.workers import WorkerPool, auto_workers, run_in_workers, split_share
from measurement.client_cost import Warmup
from measurement.record import RequestRecord
from workload.config import LoadConfig

PATH = "/v1/chat/completions"


def body(text: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": text}]}).encode()


def share(url: str, concurrency: int, n: int, warmup: int) -> Share:
    return Share(
        url=url,
        path=PATH,
        config=LoadConfig(concurrency=[concurrency]),
        concurrency=concurrency,
        warmup=[body(f"warm {i}") for i in range(warmup)],
        bodies=[body(str(i)) for i in range(n)],
        records=[RequestRecord(index=i, prefix_id=i % 3) for i in range(n)],
        arrival_seed="s",
    )


def test_split_gives_every_request_once_and_the_whole_concurrency() -> None:
    whole = share("http://x", concurrency=7, n=100, warmup=7)
    parts = split_share(whole, 3)
    assert [p.concurrency for p in parts] == [3, 2, 2]
    assert [len(p.bodies) for p in parts] == [42, 29, 29]  # in proportion to the streams
    assert [len(p.warmup) for p in parts] == [3, 2, 2]
    assert [r.index for p in parts for r in p.records] == list(range(100))
    assert [b for p in parts for b in p.bodies] == whole.bodies
    assert len({p.arrival_seed for p in parts}) == 3


@pytest.mark.parametrize("workers", [0, 8])
def test_split_rejects_more_workers_than_streams(workers: int) -> None:
    with pytest.raises(ValueError, match=r"workers must be within 1\.\.7"):
        split_share(share("http://x", concurrency=7, n=10, warmup=0), workers)


@pytest.mark.parametrize(
    ("concurrency", "cpus", "expected"),
    [(1, 8, 1), (8, 8, 1), (128, 8, 1), (129, 8, 2), (256, 2, 2), (1024, 4, 4), (300, 1, 1)],
)
def test_auto_workers(concurrency: int, cpus: int, expected: int) -> None:
    assert auto_workers(concurrency, cpus) == expected


@pytest.mark.asyncio
async def test_two_worker_processes_keep_the_requested_concurrency_and_send_exactly_n() -> None:
    """c=6 over 2 processes: the server releases no measured response until 6 measured
    requests are in flight at once, so fewer in flight would time out; exactly 30 measured
    requests arrive, each body once, and the merged records are in index order."""
    concurrency, n = 6, 30
    everyone_here = asyncio.Event()
    measured: list[str] = []
    ready_calls: list[tuple[int, int]] = []

    def handler(request: dict[str, Any], number: int) -> list[Step]:
        text = str(request["messages"][0]["content"])
        if text.startswith("warm"):
            return normal_stream(["w"])
        measured.append(text)
        if len(measured) == concurrency:
            everyone_here.set()
        return [Wait(everyone_here, timeout_s=20), *normal_stream(["a", "b"])]

    async def ready(warmup: Warmup) -> None:
        ready_calls.append((len(server.requests), warmup.requests))

    async with FakeServer(handler) as server:
        parts = split_share(share(server.url, concurrency, n, warmup=concurrency), 2)
        result = await run_in_workers(parts, ready=ready)
    assert [r.error for r in result.records if not r.ok] == []
    assert [r.index for r in result.records] == list(range(n))
    assert sorted(measured, key=int) == [str(i) for i in range(n)]
    assert len(server.requests) == n + concurrency
    assert server.max_in_flight == concurrency
    # After every warm-up request, before any measured one; the workers' warm-ups merged.
    assert ready_calls == [(concurrency, concurrency)]
    assert all(len(r.token_ns) == 2 and r.sent_ns is not None for r in result.records)
    assert len(result.loop_lags_ms) > 0 and result.cpu_s > 0


@pytest.mark.asyncio
async def test_grid_with_workers_reports_them_per_run(tmp_path: Path) -> None:
    config = LoadConfig(
        prefix_kinds=[2],
        concurrency=[4],
        repetitions=1,
        requests_per_run=20,
        prompt_tokens=20,
        workers=2,
    )
    # 20 ms before each stream: every worker's share outlasts several 5 ms lag ticks, so the lag
    # is measured however fast the machine is.
    async with FakeServer(
        lambda request, number: [Sleep(0.02), *normal_stream(["a", "b", "c"])]
    ) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, tmp_path, progress=False))
    (run,) = result.runs
    assert (run.workers, run.requests, run.samples, run.errors) == (2, 20, 20, 0)
    assert run.loop_lag_p99_ms is not None and run.client_cpu_ms_per_request is not None
    # 2 calibration requests, 4 warm-up (one per stream), 20 measured
    assert len(server.requests) == 26


@pytest.mark.asyncio
async def test_one_pool_serves_every_run_with_the_same_processes() -> None:
    """Three runs through one pool: two processes spawned for the first run serve the later
    ones (a run needing fewer uses some of them), and each run's records are its own."""
    answer = normal_stream(["a", "b"])
    async with FakeServer(lambda request, number: answer) as server, WorkerPool() as pool:
        assert pool.pids == []
        first = await pool.run(split_share(share(server.url, 4, 12, warmup=0), 2))
        spawned = pool.pids
        second = await pool.run(split_share(share(server.url, 4, 8, warmup=4), 2))
        third = await pool.run(split_share(share(server.url, 1, 3, warmup=0), 1))
        assert pool.pids == spawned and len(spawned) == 2
    assert [len(r.records) for r in (first, second, third)] == [12, 8, 3]
    assert all(r.ok for result in (first, second, third) for r in result.records)
    assert len(server.requests) == 12 + 8 + 4 + 3
