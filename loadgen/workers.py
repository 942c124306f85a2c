"""Spreading one closed-loop run over worker processes and merging their records.

Each worker is a fresh `spawn`ed Python process (no fork of a process that may hold threads or
a running event loop, e.g. a Pulumi provider) running `loops.run_share` on its share: a fixed
part of the streams and a contiguous block of the run's requests, in proportion. All workers
warm up, meet at a barrier, then start their measured loops together, so the requested total
is in flight at once and exactly N requests are sent. Near the end a worker that has finished
its block stops, so in flight falls off over the last requests as in any closed loop of N.
Records carry `time.monotonic_ns()` readings; on Linux that is CLOCK_MONOTONIC, one clock for
the whole system, so records from different processes are merged and compared directly.
"""

import asyncio
import itertools
import math
import multiprocessing
import os
import queue
import signal
from collections.abc import Awaitable, Callable, Sequence
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Barrier
from typing import cast

from loadgen.loops import Share, ShareResult, run_share

# One event loop keeps up with 128 streams of 16 tokens against a server that answers in
# 50 ms (bench/loadgen_overhead.py, README "Performance"); above that a worker is added.
STREAMS_PER_WORKER = 128
BARRIER_TIMEOUT_S = 120.0  # warm-up of a share must finish within this


def auto_workers(concurrency: int, cpus: int | None = None) -> int:
    """Worker processes for a closed loop of `concurrency` streams when `workers` is not set:
    ceil(concurrency / STREAMS_PER_WORKER), at most `cpus` (default: the CPUs this process may
    run on) and at most `concurrency`; 1 means the run stays in the calling process."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0))
    return max(1, min(math.ceil(concurrency / STREAMS_PER_WORKER), cpus, concurrency))


def _proportional(total: int, weights: Sequence[int]) -> list[range]:
    """Contiguous ranges covering range(total), sized in proportion to `weights`."""
    whole = sum(weights)
    bounds = [0]
    running = 0
    for weight in weights:
        running += weight
        bounds.append(total * running // whole)
    return [range(a, b) for a, b in itertools.pairwise(bounds)]


def split_share(share: Share, workers: int) -> list[Share]:
    """`share` cut into `workers` shares: concurrency as even as possible (the first ones get
    one more), warm-up bodies and measured requests in proportion to it, contiguous blocks.
    Raises ValueError when `workers` is not within 1..`share.concurrency`."""
    if not 1 <= workers <= share.concurrency:
        raise ValueError(f"workers must be within 1..{share.concurrency}, got {workers}")
    base, extra = divmod(share.concurrency, workers)
    streams = [base + (k < extra) for k in range(workers)]
    warm = _proportional(len(share.warmup), streams)
    measured = _proportional(len(share.bodies), streams)
    return [
        Share(
            url=share.url,
            path=share.path,
            config=share.config,
            concurrency=c,
            warmup=share.warmup[w.start : w.stop],
            bodies=share.bodies[m.start : m.stop],
            records=share.records[m.start : m.stop],
            arrival_seed=f"{share.arrival_seed}:worker{k}",
        )
        for k, (c, w, m) in enumerate(zip(streams, warm, measured, strict=True))
    ]


def _worker(
    number: int, share: Share, barrier: Barrier, results: "multiprocessing.Queue[object]"
) -> None:
    """A worker process: run the share; after warm-up, pass `barrier` twice (all warmed up;
    the parent's `ready` done). Ctrl-C is the parent's to handle: it stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def ready() -> None:
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)

    results.put((number, asyncio.run(run_share(share, ready=ready))))


def _collect(
    processes: Sequence[BaseProcess], results: "multiprocessing.Queue[object]"
) -> list[ShareResult]:
    """Wait for one result per process; raises RuntimeError when a worker dies without one."""
    got: dict[int, ShareResult] = {}
    while len(got) < len(processes):
        try:
            number, result = cast(tuple[int, ShareResult], results.get(timeout=0.5))
            got[number] = result
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a loadgen worker process exited with code {dead[0]}") from None
    return [got[k] for k in range(len(processes))]


async def run_in_workers(
    shares: Sequence[Share], *, ready: Callable[[], Awaitable[None]] | None = None
) -> ShareResult:
    """Run each share in its own spawned process and merge: records of all shares in index
    order, lag samples of all workers pooled, CPU times summed. `ready()`, if given, runs in
    this process once every worker has warmed up and before any starts its measured loop.
    Raises RuntimeError when a worker process dies (e.g. killed, out of memory) before
    returning its records, threading.BrokenBarrierError when one takes more than
    BARRIER_TIMEOUT_S to warm up."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(shares) + 1)  # the workers and this process
    results = context.Queue()
    processes = [
        context.Process(target=_worker, args=(k, share, barrier, results), daemon=True)
        for k, share in enumerate(shares)
    ]
    for process in processes:
        process.start()
    try:
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)
        if ready is not None:
            await ready()
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)
        parts = await asyncio.to_thread(_collect, processes, results)
    except BaseException:  # Ctrl-C, cancellation (a deadline), a dead worker: stop them all now
        barrier.abort()  # frees the threads waiting at the barrier, here and in the workers
        for process in processes:
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
    records = sorted((r for part in parts for r in part.records), key=lambda r: r.index)
    lags = [lag for part in parts for lag in part.loop_lags_ms]
    return ShareResult(records, lags, sum(part.cpu_s for part in parts))
