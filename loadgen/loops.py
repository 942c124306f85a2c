"""The load loops of one process: the HTTP session, the closed and open (Poisson) loops, and
`run_share`, which runs one process's share of a run (warm-up, then the measured loop under a
`LagMonitor`). `loadgen.workers` runs several shares in worker processes.
"""

import asyncio
import contextlib
import gc
import random
import resource
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp

from loadgen.lag import LagMonitor
from loadgen.request import LiveConnector, stream_request, timing_trace
from measurement.client_cost import Warmup
from measurement.record import RequestRecord
from workload.config import Arrival, LoadConfig

OnDone = Callable[[RequestRecord], None]
RETRY_AFTER_MAX_S = 10.0  # the longest a closed-loop stream waits on one Retry-After


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft limit of open files (each connection is one) to its hard
    limit, as vLLM's and SGLang's benchmark clients do (`set_ulimit`, to 65,535); returns
    (soft, hard) after. A limit that cannot be raised is left as it is: a socket the client
    then cannot open is its own error (`ErrorKind.CLIENT`), said in the run's warnings."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def tls_setting(config: LoadConfig) -> ssl.SSLContext | bool:
    """How the client checks an https server's certificate: not at all (`config.insecure`:
    False), against the CA file `config.ca_file` (a context of its own, read now), else
    aiohttp's default (True): a context made once, when aiohttp is imported, by
    `ssl.create_default_context()` (aiohttp 3.14.5 `connector.py`, `_make_ssl_context`
    L901-929), whose system CAs OpenSSL's `SSL_CERT_FILE` / `SSL_CERT_DIR` replace
    (`SSLContext.load_default_certs` -> `set_default_verify_paths`).

    Raises:
        OSError: the CA file cannot be read, or holds no certificate (`ssl.SSLError`).
    """
    if config.insecure:
        return False
    if config.ca_file is None:
        return True
    context = ssl.create_default_context(cafile=config.ca_file)
    context.set_alpn_protocols(("http/1.1",))  # as aiohttp's own contexts
    return context


def make_client(url: str, config: LoadConfig, concurrency: int) -> aiohttp.ClientSession:
    """An HTTP/1.1 aiohttp session on `url` whose pool holds `config.pool_size(concurrency)`
    connections (`LiveConnector`: never one its server has closed), checking an https
    server's certificate as `tls_setting` says, with the `timing_trace` that fills
    `sent_ns`/`connect_ns`.

    Timeouts: connect `connect_timeout_s`, between two reads `read_timeout_s`; no total (the
    per-request deadline bounds it). Must be made inside a running event loop.
    """
    return aiohttp.ClientSession(
        base_url=url,
        connector=LiveConnector(
            limit=config.pool_size(concurrency), limit_per_host=0, ssl=tls_setting(config)
        ),
        timeout=aiohttp.ClientTimeout(
            total=None, sock_connect=config.connect_timeout_s, sock_read=config.read_timeout_s
        ),
        trace_configs=[timing_trace()],
        auto_decompress=False,
    )


async def run_closed_loop(
    client: aiohttp.ClientSession,
    path: str,
    bodies: Sequence[bytes],
    records: Sequence[RequestRecord],
    *,
    concurrency: int,
    deadline_s: float,
    duration_s: float | None = None,
    on_done: OnDone | None = None,
) -> list[RequestRecord]:
    """Send `bodies` with exactly `concurrency` requests in flight until all are sent (or, with
    `duration_s`, until that many seconds have passed: no request starts after). A request's
    intended send time is the moment its predecessor on the same slot finished, or, after a
    429 / 503 answer with a `Retry-After`, the end of the wait it asked for (at most
    `RETRY_AFTER_MAX_S`, and not past `duration_s`), so a server that rejects at once is not
    hit again at full speed and the wait is not client queue time.

    Returns the records of the requests that were started, in index order.
    """
    pending = iter(range(len(bodies)))
    stop_ns = None if duration_s is None else time.monotonic_ns() + int(duration_s * 1e9)
    started: list[RequestRecord] = []

    async def slot() -> None:
        for i in pending:
            now = time.monotonic_ns()
            if stop_ns is not None and now >= stop_ns:
                return
            record = records[i]
            record.intended_ns = now
            started.append(record)
            await stream_request(client, path, bodies[i], record, deadline_s)
            if on_done is not None:
                on_done(record)
            if record.retry_after_s:
                wait = min(record.retry_after_s, RETRY_AFTER_MAX_S)
                if stop_ns is not None:
                    wait = min(wait, max(0.0, (stop_ns - time.monotonic_ns()) / 1e9))
                await asyncio.sleep(wait)

    await asyncio.gather(*(slot() for _ in range(concurrency)))
    return sorted(started, key=lambda r: r.index)


async def run_poisson(
    client: aiohttp.ClientSession,
    path: str,
    bodies: Sequence[bytes],
    records: Sequence[RequestRecord],
    *,
    rate: float,
    concurrency: int,
    deadline_s: float,
    rng: random.Random,
    duration_s: float | None = None,
    on_done: OnDone | None = None,
) -> list[RequestRecord]:
    """Open loop: request i is due at the sum of i+1 exponential gaps of mean 1/`rate` seconds,
    whatever happened to earlier requests; at most `concurrency` are in flight. Each record's
    `intended_ns` is its due time, so waiting for the event loop or a free slot is client queue
    time, not hidden (no coordinated omission). With `duration_s`, no request is due after that
    many seconds from the start: the run ends there (the requests in flight finish), whether or
    not the bodies ran out. Returns the started records in index order.
    """
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await stream_request(client, path, bodies[i], records[i], deadline_s)
        if on_done is not None:
            on_done(records[i])

    start = time.monotonic_ns()
    stop_ns = None if duration_s is None else start + int(duration_s * 1e9)
    due = start
    tasks = []
    for i in range(len(bodies)):
        due += int(rng.expovariate(rate) * 1e9)
        if stop_ns is not None and due >= stop_ns:
            break
        records[i].intended_ns = due
        delay = (due - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return list(records[: len(tasks)])


@dataclass
class Share:
    """One process's part of a run: `concurrency` of the run's streams, its warm-up bodies
    (sent first, unmeasured) and its measured `bodies` with their `records` (same length).
    `arrival_seed` seeds the Poisson gaps. Picklable, so it can go to a worker process."""

    url: str
    path: str
    config: LoadConfig
    concurrency: int
    warmup: list[bytes]
    bodies: list[bytes]
    records: list[RequestRecord]
    arrival_seed: str


Ready = Callable[[Warmup], Awaitable[None]]


@dataclass
class ShareResult:
    """A share's filled records (the started ones, in index order), its event loop's lag
    samples (ms, see `loadgen.lag`) and the CPU time (s, user + system, all threads of the
    process) spent during its measured loop."""

    records: list[RequestRecord]
    loop_lags_ms: list[float]
    cpu_s: float

    @staticmethod
    def merge(parts: Sequence["ShareResult"]) -> "ShareResult":
        """One run from its shares (worker processes, or in-cluster clients): records of all
        shares in index order, lag samples pooled, CPU times summed."""
        records = sorted((r for part in parts for r in part.records), key=lambda r: r.index)
        lags = [lag for part in parts for lag in part.loop_lags_ms]
        return ShareResult(records, lags, sum(part.cpu_s for part in parts))


@contextlib.asynccontextmanager
async def _frozen_heap() -> AsyncIterator[None]:
    """For the block, every object that exists at its start is frozen out of garbage collection
    (`gc.freeze`, after one full collection), so no full collection walks the heap of imports,
    prompts, bodies and records while requests are timed: in a `testbed load` process (pandas
    and pulumi imported) one such collection pauses the loop for ~170 ms (timed with
    `gc.callbacks`, 6,000 requests at c=64 on 2 shared cores; docs/loadgen.md, "Worker
    processes and event-loop lag")."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


async def run_share(
    share: Share,
    *,
    on_done: OnDone | None = None,
    ready: Ready | None = None,
) -> ShareResult:
    """Raise the open-file limit (`raise_open_file_limit`), warm up (one closed loop over
    `share.warmup`), await `ready(warmup)` with what the
    warm-up cost (`Warmup`; worker processes meet at a barrier there so their measured loops
    start together), then run the measured loop
    (closed, or Poisson for `config.arrival`) while a `LagMonitor` samples the loop's lag,
    with the objects that exist before it frozen out of garbage collection (`gc.freeze`).
    Request failures are in the records, never raised.
    """
    config = share.config
    deadline = config.request_timeout_s
    raise_open_file_limit()
    async with make_client(share.url, config, share.concurrency) as client:
        warm = [RequestRecord(index=i, prefix_id=0) for i in range(len(share.warmup))]
        warm_cpu = time.process_time()
        if share.warmup:
            await run_closed_loop(
                client,
                share.path,
                share.warmup,
                warm,
                concurrency=share.concurrency,
                deadline_s=deadline,
            )
        e2es = [(r.end_ns - r.sent_ns) / 1e9 for r in warm if r.ok and r.end_ns and r.sent_ns]
        warmup = Warmup(
            requests=len(warm),
            cpu_s=time.process_time() - warm_cpu,
            e2e_mean_s=sum(e2es) / len(e2es) if e2es else None,
        )
        if ready is not None:
            await ready(warmup)
        cpu = time.process_time()
        async with LagMonitor() as lag, _frozen_heap():
            if config.arrival is Arrival.POISSON:
                assert config.request_rate is not None  # enforced by LoadConfig's validator
                records = await run_poisson(
                    client,
                    share.path,
                    share.bodies,
                    share.records,
                    rate=config.request_rate,
                    concurrency=share.concurrency,
                    deadline_s=deadline,
                    rng=random.Random(share.arrival_seed),
                    duration_s=config.duration_s,
                    on_done=on_done,
                )
            else:
                records = await run_closed_loop(
                    client,
                    share.path,
                    share.bodies,
                    share.records,
                    concurrency=share.concurrency,
                    deadline_s=deadline,
                    duration_s=config.duration_s,
                    on_done=on_done,
                )
        cpu = time.process_time() - cpu
    return ShareResult(records, lag.lags_ms, cpu)
