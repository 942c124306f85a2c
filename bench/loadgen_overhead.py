"""The loadgen's own overhead and TTFT accuracy against a local server that knows the truth,
with AIPerf run side by side in the same invocation.

Run: `uv run python bench/loadgen_overhead.py [--concurrency 8,64,256] [--requests 3000]
[--workers auto|N] [--aiperf PATH]` (or set AIPERF_BIN; AIPerf lives in its own venv, see
docs/loadgen.md). For each concurrency and each client, `bench/mock_server.py` runs in its own
process with 16-token streams:
- a zero first-token delay: requests/s and chunks/s (the client's ceiling on this machine);
- a first-token delay of 50 ms: TTFT error = client TTFT percentile - the server's own measured
  first-token delay at the same percentile (p50, p99); the client queue time (intended send to
  actual send) p50/p99; the time-weighted mean and the largest number of requests in flight
  seen by the server; the client's event-loop lag p99; and client CPU per request. Ours is
  given twice: the measured loops only (every process, `ShareResult.cpu_s`) and everything the
  client processes spent from the start of the run (warm-up, spawning and importing workers).
  AIPerf's is all CPU time of its processes (its start-up included: it has no loop-only figure).
- `testbed load` as a user runs it (`--cli`, default on): one process (and its
  workers) against the 50 ms server with 100-token prompts (the test tokenizer) and 16-token
  streams, 3,000 then 9,000 requests; whole-process CPU per request = the difference of the
  two runs' CPU (os.wait4 rusage: the process and every worker it waited for) / 6,000, so
  start-up cancels; its TTFT error is that of the 9,000-request run.
Same settings for both: closed loop, the same concurrency and request count, `concurrency`
warm-up requests, 16 output tokens, a 10-token prompt. With two or more CPUs the server runs
on one CPU and the clients (worker processes and AIPerf included) on the others (`--no-pin`
to turn off): a load generator should not share a core with the server it measures.
This is a measurement script, not a test: nothing here asserts.
"""

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import httpx
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from loadgen.api import API_PATHS, request_body
from loadgen.lag import LagMonitor
from loadgen.loops import Share, ShareResult, run_share
from loadgen.workers import auto_workers, run_in_workers, split_share
from measurement.client_cost import Warmup
from measurement.percentile import percentile
from measurement.record import RequestRecord
from metrics.latency import queue_ms, ttft_ms
from simulator.model_dir import make_model_dir
from workload.config import Api, LoadConfig

TOKENS = 16
SLOW_MS = 50
SERVER = Path(__file__).with_name("mock_server.py")


@dataclass
class Row:
    """One client at one concurrency: zero-delay throughput, then the 50 ms measurements."""

    client: str
    concurrency: int
    workers: int | None
    requests_per_s: float
    chunks_per_s: float | None
    cpu_loop_ms: float | None
    cpu_total_ms: float
    ttft_err_p50_ms: float
    ttft_err_p99_ms: float
    queue_p50_ms: float | None
    queue_p99_ms: float | None
    lag_p99_ms: float | None
    mean_in_flight: float
    max_in_flight: int
    cli: "CliFigures | None" = None


@dataclass
class CliFigures:
    """`testbed load` as a user runs it (see `measure_cli`): whole-process CPU per request (ms)
    and its TTFT error against the server's truth (ms)."""

    cpu_ms: float
    ttft_err_p50_ms: float
    ttft_err_p99_ms: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _split_cpus() -> tuple[set[int] | None, set[int] | None]:
    """CPUs for (the server, the clients): the last CPU this process may run on for the server,
    the others for the clients; (None, None) with a single CPU.

    On a small machine the scheduler otherwise wakes the client on the CPU of the server that
    just wrote to it (wake-affine), so the client reads the clock only after the server has
    written its whole burst of chunks: the server's cost, counted as the client's TTFT error
    (docs/loadgen.md, "Performance")."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


SERVER_CPUS, CLIENT_CPUS = None, None  # set by main(): see _split_cpus


class MockServer:
    """`bench/mock_server.py` in a subprocess (on `SERVER_CPUS` when set); `stats()` reads its
    truth."""

    def __init__(self, delay_ms: float, gap_ms: float = 0.0) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, str(SERVER), str(self.port), str(delay_ms), str(TOKENS)]
        args.append(str(gap_ms))
        self.process = subprocess.Popen(args)
        if SERVER_CPUS is not None:
            os.sched_setaffinity(self.process.pid, SERVER_CPUS)
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

    def truth(self, q: float) -> float:
        """The server's own first-token delay (ms) at percentile q."""
        delays = self.stats()["delays_ms"]
        assert isinstance(delays, list)
        value = percentile(delays, q)
        assert value is not None
        return value

    def __enter__(self) -> "MockServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(10)


def _cpu_s() -> float:
    """CPU time (s) of this process and its waited-for children (worker processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _ours(url: str, concurrency: int, n: int, workers: int) -> tuple[ShareResult, float, float]:
    """One closed-loop run as `run_grid` makes it; returns the result, wall time (s) of the
    measured part and the client CPU (s) of the whole run. The server's stats are reset after
    the warm-up, so they cover the measured requests."""
    body = request_body(Api.CHAT, "m", "hello", TOKENS)
    share = Share(
        url=url,
        path=API_PATHS[Api.CHAT],
        config=LoadConfig(concurrency=[concurrency], max_tokens=TOKENS),
        concurrency=concurrency,
        warmup=[body] * concurrency,
        bodies=[body] * n,
        records=[RequestRecord(index=i, prefix_id=0) for i in range(n)],
        arrival_seed="bench",
    )

    async def reset(_: Warmup) -> None:
        await asyncio.to_thread(httpx.post, f"{url}/reset")

    cpu = _cpu_s()
    if workers == 1:
        result = asyncio.run(run_share(share, ready=reset))
    else:
        result = asyncio.run(run_in_workers(split_share(share, workers), ready=reset))
    cpu = _cpu_s() - cpu
    sent = [r.sent_ns for r in result.records if r.sent_ns is not None]
    ends = [r.end_ns for r in result.records if r.end_ns is not None]
    return result, (max(ends) - min(sent)) / 1e9, cpu


def measure_ours(concurrency: int, n: int, workers: int) -> Row:
    """Our loadgen at `concurrency` with `workers` processes: n requests against each server."""
    with MockServer(0) as fast:
        result, wall, _ = _ours(fast.url, concurrency, n, workers)
    ok = [r for r in result.records if r.ok]
    with MockServer(SLOW_MS) as slow:
        timed, _, cpu_total = _ours(slow.url, concurrency, n, workers)
        seen = slow.stats()
        good = [r for r in timed.records if r.ok]
        ttfts = [t for r in good if (t := ttft_ms(r)) is not None]
        queues = [q for r in timed.records if (q := queue_ms(r)) is not None]
        err50 = (percentile(ttfts, 50) or 0) - slow.truth(50)
        err99 = (percentile(ttfts, 99) or 0) - slow.truth(99)
    return Row(
        client="loadgen",
        concurrency=concurrency,
        workers=workers,
        requests_per_s=len(ok) / wall,
        chunks_per_s=sum(r.chunks for r in ok) / wall,
        cpu_loop_ms=timed.cpu_s / n * 1e3,
        cpu_total_ms=cpu_total / n * 1e3,
        ttft_err_p50_ms=err50,
        ttft_err_p99_ms=err99,
        queue_p50_ms=percentile(queues, 50),
        queue_p99_ms=percentile(queues, 99),
        lag_p99_ms=percentile(timed.loop_lags_ms, 99),
        mean_in_flight=float(str(seen["mean_in_flight"])),
        max_in_flight=int(str(seen["max_in_flight"])),
    )


CLI_REQUESTS = (3000, 9000)  # the difference of the two runs cancels start-up
CLI_PROMPT_TOKENS = 100


TESTBED = Path(sys.executable).parent / "testbed"  # this checkout's console script


def _cli_run(
    url: str, concurrency: int, n: int, tokenizer: Path, out: Path, testbed: Path = TESTBED
) -> float:
    """One `testbed load` process (`testbed`: the console script of a checkout; 1 grid point,
    1 repetition, `n` requests of `CLI_PROMPT_TOKENS`-token prompts, `TOKENS` output tokens, no
    readiness gate); returns the CPU time (s, user + system) of the process and every process
    it waited for (workers)."""
    args = [str(testbed), "load", "--url", url, "--model", "m"]
    args += ["--prefix-kinds", "2", "--concurrency", str(concurrency), "--repetitions", "1"]
    args += ["--requests-per-run", str(n), "--prompt-tokens", str(CLI_PROMPT_TOKENS)]
    args += ["--max-tokens", str(TOKENS), "--tokenizer", str(tokenizer), "--out", str(out)]
    args += ["--no-ready-check", "--no-progress"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"testbed load failed ({status}): {process.stderr!r}")
    return usage.ru_utime + usage.ru_stime


def measure_cli(
    concurrency: int,
    tokenizer: Path,
    work: Path,
    testbed: Path = TESTBED,
) -> CliFigures:
    """`testbed load` (`testbed`: a checkout's console script) against the 50 ms server:
    whole-process CPU per request = CPU(9,000 requests) - CPU(3,000 requests) over 6,000
    (`CLI_REQUESTS`; start-up, imports, calibration cancel out); the TTFT error of the larger run
    against the server's truth over its requests."""
    with MockServer(SLOW_MS) as slow:
        small, large = CLI_REQUESTS
        small_out = work / f"cli{concurrency}a"
        cpu_small = _cli_run(slow.url, concurrency, small, tokenizer, small_out, testbed)
        slow.stats(reset=True)
        out = work / f"cli{concurrency}b"
        cpu_large = _cli_run(slow.url, concurrency, large, tokenizer, out, testbed)
        frame = pd.read_parquet(out / "requests.parquet")
        ttfts = ((frame["first_token_ns"] - frame["sent_ns"]) / 1e6).dropna().tolist()
        return CliFigures(
            cpu_ms=(cpu_large - cpu_small) / (large - small) * 1e3,
            ttft_err_p50_ms=(percentile(ttfts, 50) or 0) - slow.truth(50),
            ttft_err_p99_ms=(percentile(ttfts, 99) or 0) - slow.truth(99),
        )


def _aiperf_run(
    aiperf: str, url: str, concurrency: int, n: int, tokenizer: Path, out: Path
) -> tuple[dict[str, dict[str, float]], float]:
    """One AIPerf profile; returns its aggregate JSON and the CPU time (s) of its processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    args = [
        aiperf,
        "profile",
        *("--model", "m", "--url", url, "--endpoint-type", "chat", "--streaming"),
        *("--concurrency", str(concurrency), "--request-count", str(n)),
        *("--warmup-request-count", str(concurrency)),
        *("--synthetic-input-tokens-mean", "10", "--output-tokens-mean", str(TOKENS)),
        *("--tokenizer", str(tokenizer), "--artifact-dir", str(out), "--ui-type", "none"),
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"aiperf failed ({done.returncode}): {done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = sorted(out.rglob("profile_export_aiperf.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()), cpu


def measure_aiperf(aiperf: str, concurrency: int, n: int, tokenizer: Path, work: Path) -> Row:
    """AIPerf at `concurrency` against the same two kinds of server. The server's stats cover
    AIPerf's warm-up too (it has no hook between warm-up and profiling)."""
    with MockServer(0) as fast:
        data, _ = _aiperf_run(
            aiperf, fast.url, concurrency, n, tokenizer, work / f"fast{concurrency}"
        )
    with MockServer(SLOW_MS) as slow:
        slow_data, cpu = _aiperf_run(
            aiperf, slow.url, concurrency, n, tokenizer, work / f"slow{concurrency}"
        )
        seen = slow.stats()
        ttft = slow_data["time_to_first_token"]
        err50, err99 = ttft["p50"] - slow.truth(50), ttft["p99"] - slow.truth(99)
    return Row(
        client="aiperf 0.13",
        concurrency=concurrency,
        workers=None,
        requests_per_s=data["request_throughput"]["avg"],
        chunks_per_s=None,
        cpu_loop_ms=None,
        cpu_total_ms=cpu / n * 1e3,
        ttft_err_p50_ms=err50,
        ttft_err_p99_ms=err99,
        queue_p50_ms=None,
        queue_p99_ms=None,
        lag_p99_ms=None,
        mean_in_flight=float(str(seen["mean_in_flight"])),
        max_in_flight=int(str(seen["max_in_flight"])),
    )


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _tables(rows: list[Row], n: int) -> tuple[Table, Table]:
    main = Table(
        "client",
        "c",
        "workers",
        "req/s (0 ms)",
        "chunks/s (0 ms)",
        "CPU ms/req loop",
        "CPU ms/req total",
        "CLI: CPU ms/req whole process",
        "CLI: TTFT err p50 / p99 ms",
        "TTFT err p50 ms",
        "TTFT err p99 ms",
        "queue p50/p99 ms",
        "loop lag p99 ms",
        "in flight mean/max",
        title=f"{n} requests of {TOKENS} tokens per cell, true TTFT {SLOW_MS} ms; python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores, "
        + (
            "not pinned"
            if SERVER_CPUS is None
            else f"server on CPU {sorted(SERVER_CPUS)}, clients on {sorted(CLIENT_CPUS or ())}"
        ),
    )
    for r in rows:
        main.add_row(
            r.client,
            str(r.concurrency),
            _fmt(r.workers, "d"),
            f"{r.requests_per_s:,.0f}",
            _fmt(r.chunks_per_s, ",.0f"),
            _fmt(r.cpu_loop_ms, ".2f"),
            f"{r.cpu_total_ms:.2f}",
            "-" if r.cli is None else f"{r.cli.cpu_ms:.2f}",
            "-"
            if r.cli is None
            else f"{r.cli.ttft_err_p50_ms:+.1f} / {r.cli.ttft_err_p99_ms:+.1f}",
            f"{r.ttft_err_p50_ms:+.1f}",
            f"{r.ttft_err_p99_ms:+.1f}",
            "-" if r.queue_p99_ms is None else f"{r.queue_p50_ms:.1f} / {r.queue_p99_ms:.1f}",
            _fmt(r.lag_p99_ms, ".1f"),
            f"{r.mean_in_flight:.1f} / {r.max_in_flight}",
        )
    ratios = Table(
        "c",
        "CPU total aiperf/loadgen",
        "|TTFT err p50| aiperf/loadgen",
        "|TTFT err p99| aiperf/loadgen",
        "mean in flight aiperf/loadgen",
        title="ratios (AIPerf / loadgen)",
    )
    ours = {r.concurrency: r for r in rows if r.client == "loadgen"}
    for theirs in (r for r in rows if r.client != "loadgen"):
        our = ours[theirs.concurrency]
        ratios.add_row(
            str(theirs.concurrency),
            f"{theirs.cpu_total_ms / our.cpu_total_ms:.1f}x",
            f"{abs(theirs.ttft_err_p50_ms) / max(abs(our.ttft_err_p50_ms), 0.1):.1f}x",
            f"{abs(theirs.ttft_err_p99_ms) / max(abs(our.ttft_err_p99_ms), 0.1):.1f}x",
            f"{theirs.mean_in_flight / our.mean_in_flight:.2f}",
        )
    return main, ratios


async def _idle_lag_ms(seconds: float = 3.0) -> tuple[float | None, float | None]:
    """p50 and p99 (ms) of an idle event loop's lag: the machine's own scheduling noise."""
    async with LagMonitor() as lag:
        await asyncio.sleep(seconds)
    return percentile(lag.lags_ms, 50), percentile(lag.lags_ms, 99)


def main(
    concurrency: Annotated[str, typer.Option(help="Comma-separated concurrencies.")] = "8,64,256",
    requests: Annotated[int, typer.Option(help="Requests per measurement.")] = 3000,
    workers: Annotated[str, typer.Option(help="Client processes: auto or a number.")] = "auto",
    aiperf: Annotated[str | None, typer.Option(envvar="AIPERF_BIN", help="aiperf binary.")] = None,
    pin: Annotated[
        bool, typer.Option(help="Server on its own CPU, clients (and workers) on the others.")
    ] = True,
    work: Annotated[Path, typer.Option(help="AIPerf artifact folder.")] = Path(
        "/tmp/loadgen-bench"
    ),
    cli: Annotated[
        bool, typer.Option(help="Also time `testbed load` as a process (3,000 and 9,000 requests).")
    ] = True,
) -> None:
    """Print our figures (and AIPerf's, with ratios) per concurrency."""
    global SERVER_CPUS, CLIENT_CPUS
    if pin:
        SERVER_CPUS, CLIENT_CPUS = _split_cpus()
        if CLIENT_CPUS is not None:
            os.sched_setaffinity(0, CLIENT_CPUS)  # inherited by workers and AIPerf
    idle50, idle99 = asyncio.run(_idle_lag_ms())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = make_model_dir(Path(tmp) / "model")  # a local tokenizer for AIPerf
        for c in (int(x) for x in concurrency.split(",")):
            count = auto_workers(c) if workers == "auto" else int(workers)
            row = measure_ours(c, requests, count)
            if cli:
                row.cli = measure_cli(c, tokenizer, Path(tmp))
            rows.append(row)
            if aiperf is not None:
                rows.append(measure_aiperf(aiperf, c, requests, tokenizer, work))
    main_table, ratios = _tables(rows, requests)
    console = Console(width=200)
    console.print(main_table)
    console.print(
        f"idle event loop lag before the runs (machine noise): p50 {_fmt(idle50, '.2f')} ms, "
        f"p99 {_fmt(idle99, '.2f')} ms; load average {os.getloadavg()[0]:.2f}"
    )
    if aiperf is not None:
        console.print(ratios)


if __name__ == "__main__":
    typer.run(main)
