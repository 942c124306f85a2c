"""The loadgen's own overhead and TTFT accuracy against a local server that knows the truth.

Run: `uv run python bench/loadgen_overhead.py [--concurrency 8,64,256] [--aiperf PATH]`
(or set AIPERF_BIN). For each concurrency it starts `bench/mock_server.py` in its own process,
16-token streams, and runs the loadgen's closed loop in this process:
- zero first-token delay: requests/s, chunks/s and client CPU per request (process CPU time /
  requests), the largest number of requests in flight seen by the server;
- a first-token delay of 50 ms: TTFT error = client TTFT percentile - the server's own measured
  first-token delay at the same percentile (p50, p99), and the client queue time p99.
With --aiperf, AIPerf (installed in a separate venv) runs against the same server with the same
settings, and its TTFT percentiles and CPU (its child processes' CPU time) are printed beside.
This is a measurement script, not a test: nothing here asserts.
"""

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from loadgen.config import LoadConfig
from loadgen.request import RequestRecord
from loadgen.runner import make_client, request_body, run_closed_loop
from loadgen.stats import percentile, queue_ms, ttft_ms

TOKENS = 16
SERVER = Path(__file__).with_name("mock_server.py")


@dataclass
class Row:
    """One client at one concurrency: zero-delay throughput and 50 ms TTFT error."""

    client: str
    concurrency: int
    requests_per_s: float
    chunks_per_s: float | None
    cpu_ms_per_request: float
    ttft_err_p50_ms: float
    ttft_err_p99_ms: float
    queue_p99_ms: float | None
    max_in_flight: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MockServer:
    """`bench/mock_server.py` in a subprocess; `stats()` reads its truth."""

    def __init__(self, delay_ms: float) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, str(SERVER), str(self.port), str(delay_ms), str(TOKENS)]
        self.process = subprocess.Popen(args)
        for _ in range(100):
            try:
                self.stats(reset=True)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("mock server did not start")

    def stats(self, reset: bool = False) -> dict[str, object]:
        response = httpx.post(f"{self.url}/reset") if reset else httpx.get(f"{self.url}/stats")
        return dict(response.json())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)


async def _ours(url: str, concurrency: int, n: int) -> tuple[list[RequestRecord], float, float]:
    config = LoadConfig(concurrency=[concurrency], max_tokens=TOKENS)
    body = request_body(config.api, "m", "hello", TOKENS)
    async with make_client(url, config, concurrency) as client:
        warm = [RequestRecord(index=i, prefix_id=0) for i in range(concurrency)]
        await run_closed_loop(
            client,
            "/v1/chat/completions",
            [body] * concurrency,
            warm,
            concurrency=concurrency,
            deadline_s=60,
        )
        records = [RequestRecord(index=i, prefix_id=0) for i in range(n)]
        wall, cpu = time.monotonic(), time.process_time()
        await run_closed_loop(
            client,
            "/v1/chat/completions",
            [body] * n,
            records,
            concurrency=concurrency,
            deadline_s=60,
        )
        return records, time.monotonic() - wall, time.process_time() - cpu


def _truth(server: MockServer, q: float) -> float:
    delays = server.stats()["delays_ms"]
    assert isinstance(delays, list)
    value = percentile(delays, q)
    assert value is not None
    return value


def measure_ours(concurrency: int, n: int) -> Row:
    """Our loadgen at `concurrency`: n requests against each server."""
    fast = MockServer(0)
    try:
        records, wall, cpu = asyncio.run(_ours(fast.url, concurrency, n))
        in_flight = fast.stats()["max_in_flight"]
    finally:
        fast.close()
    slow = MockServer(50)
    try:
        slow_records, _, _ = asyncio.run(_ours(slow.url, concurrency, n))
        slow.stats(reset=False)
        ttfts = [t for r in slow_records if r.ok and (t := ttft_ms(r)) is not None]
        queues = [q for r in slow_records if (q := queue_ms(r)) is not None]
        err50 = (percentile(ttfts, 50) or 0) - _truth(slow, 50)
        err99 = (percentile(ttfts, 99) or 0) - _truth(slow, 99)
    finally:
        slow.close()
    ok = [r for r in records if r.ok]
    return Row(
        "loadgen",
        concurrency,
        len(ok) / wall,
        sum(r.chunks for r in ok) / wall,
        cpu / n * 1e3,
        err50,
        err99,
        percentile(queues, 99),
        int(str(in_flight)),
    )


def _aiperf_run(
    aiperf: str, url: str, concurrency: int, n: int, tokenizer: Path, out: Path
) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.monotonic()
    subprocess.run(
        [
            aiperf,
            "profile",
            "--model",
            "m",
            "--url",
            url,
            "--endpoint-type",
            "chat",
            "--streaming",
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(n),
            "--warmup-request-count",
            str(concurrency),
            "--synthetic-input-tokens-mean",
            "10",
            "--output-tokens-mean",
            str(TOKENS),
            "--tokenizer",
            str(tokenizer),
            "--artifact-dir",
            str(out),
            "--ui-type",
            "none",
        ],
        check=True,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = sorted(out.rglob("profile_export_aiperf.json"))
    data = json.loads(found[-1].read_text())
    return {"data": data, "wall": time.monotonic() - wall, "cpu": cpu}


def measure_aiperf(aiperf: str, concurrency: int, n: int, tokenizer: Path, work: Path) -> Row:
    """AIPerf at `concurrency` against the same two servers (CPU includes its start-up)."""
    fast = MockServer(0)
    try:
        run = _aiperf_run(aiperf, fast.url, concurrency, n, tokenizer, work / f"fast{concurrency}")
        in_flight = fast.stats()["max_in_flight"]
    finally:
        fast.close()
    slow = MockServer(50)
    try:
        slow_run = _aiperf_run(
            aiperf, slow.url, concurrency, n, tokenizer, work / f"slow{concurrency}"
        )
        ttft = slow_run["data"]["time_to_first_token"]
        err50, err99 = ttft["p50"] - _truth(slow, 50), ttft["p99"] - _truth(slow, 99)
    finally:
        slow.close()
    throughput = run["data"]["request_throughput"]["avg"]
    return Row(
        "aiperf",
        concurrency,
        throughput,
        None,
        run["cpu"] / n * 1e3,
        err50,
        err99,
        None,
        int(str(in_flight)),
    )


def main(
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrencies.")] = "8,64,256",
    requests: Annotated[int, typer.Option(help="Requests per measurement.")] = 2000,
    aiperf: Annotated[str | None, typer.Option(envvar="AIPERF_BIN", help="aiperf binary.")] = None,
    tokenizer: Annotated[
        Path | None, typer.Option(help="Local tokenizer folder for AIPerf (no network).")
    ] = None,
    work: Annotated[Path, typer.Option(help="AIPerf artifact folder.")] = Path(
        "/tmp/loadgen-bench"
    ),
) -> None:
    """Print our figures (and AIPerf's) per concurrency."""
    rows = []
    for c in (int(x) for x in concurrency.split(",")):
        rows.append(measure_ours(c, requests))
        if aiperf is not None:
            if tokenizer is None:
                raise typer.BadParameter("--aiperf needs --tokenizer (a local tokenizer folder)")
            rows.append(measure_aiperf(aiperf, c, requests, tokenizer, work))
    table = Table(
        "client",
        "c",
        "req/s",
        "chunks/s",
        "CPU ms/req",
        "TTFT err p50 ms",
        "TTFT err p99 ms",
        "queue p99 ms",
        "max in flight",
        title=f"{requests} requests of {TOKENS} tokens per cell; python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores",
    )
    for r in rows:
        table.add_row(
            r.client,
            str(r.concurrency),
            f"{r.requests_per_s:,.0f}",
            "-" if r.chunks_per_s is None else f"{r.chunks_per_s:,.0f}",
            f"{r.cpu_ms_per_request:.2f}",
            f"{r.ttft_err_p50_ms:+.1f}",
            f"{r.ttft_err_p99_ms:+.1f}",
            "-" if r.queue_p99_ms is None else f"{r.queue_p99_ms:.1f}",
            str(r.max_in_flight),
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    typer.run(main)
