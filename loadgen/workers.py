"""Spreading one closed-loop run over worker processes and merging their records.

Each worker is a `spawn`ed Python process (no fork of a process that may hold threads or a
running event loop, e.g. a Pulumi provider), kept for the whole grid (`WorkerPool`), running
`loops.run_share` on its share of each run: a fixed part of the streams and a contiguous block
of the run's requests, in proportion. All workers warm up, wait for the parent's go, then
start their measured loops together, so the requested total is in flight at once and exactly
N requests are sent. Near the end a worker that has finished
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
import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from typing import cast

from loadgen.loops import Ready, Share, ShareResult, run_share
from measurement.client_cost import Warmup

# One event loop keeps up with 128 streams of 16 tokens against a server that answers in
# 50 ms (bench/loadgen_overhead.py, docs/loadgen.md "Performance"); above that a worker is added.
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


_WARM, _DONE, _FAILED = "warm", "done", "failed"  # what a worker reports on the results queue


def _worker(
    number: int, tasks: "multiprocessing.Queue[object]", results: "multiprocessing.Queue[object]"
) -> None:
    """A pool process: run one share after another until it gets None. For each share it
    reports `_WARM` after the warm-up and waits for the parent's go (every worker warmed up,
    the parent's `ready` done) before its measured loop, then reports `_DONE` with the result
    (`_FAILED` with the error's repr if the share raised). Ctrl-C is the parent's to handle:
    it kills the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while (task := tasks.get()) is not None:
        run, share = cast(tuple[int, Share], task)

        async def ready(warmup: Warmup, run: int = run) -> None:
            results.put((run, number, _WARM, warmup))
            go = await asyncio.to_thread(tasks.get, True, BARRIER_TIMEOUT_S)
            if go != run:
                raise RuntimeError(f"worker {number}: expected the go for run {run}, got {go!r}")

        try:
            results.put((run, number, _DONE, asyncio.run(run_share(share, ready=ready))))
        except Exception as exc:  # reported to the parent, which raises it as RuntimeError
            results.put((run, number, _FAILED, repr(exc)))


class WorkerPool:
    """Worker processes kept for a whole grid: `async with WorkerPool() as pool:` then
    `await pool.run(shares)` per run. Processes are `spawn`ed when a run first needs them
    (a grid whose runs all stay in-process spawns none) and reused by later runs, so the
    ~1 s of CPU a spawn and its imports cost is paid once per process, not per run.

    Leaving the block stops the processes (asks them to exit, kills any still alive after
    5 s). Any exception during `run` (Ctrl-C, a deadline's cancellation, a dead worker) kills
    them at once and the pool cannot be used again.
    """

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._results: multiprocessing.Queue[object] = self._context.Queue()
        self._tasks: list[multiprocessing.Queue[object]] = []
        self._processes: list[BaseProcess] = []
        self._runs = 0
        self._broken = False

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the workers spawned so far, in spawn order."""
        return [process.pid for process in self._processes]

    def _grow(self, workers: int) -> None:
        while len(self._processes) < workers:
            tasks = self._context.Queue()
            number = len(self._processes)
            process = self._context.Process(
                target=_worker, args=(number, tasks, self._results), daemon=True
            )
            process.start()
            self._tasks.append(tasks)
            self._processes.append(process)

    def _wait(self, run: int, stage: str, count: int, timeout_s: float | None) -> dict[int, object]:
        """Wait until `count` workers report `stage` for `run`; raises RuntimeError when one
        fails or dies, TimeoutError after `timeout_s`."""
        got: dict[int, object] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(got) < count:
            try:
                item = cast(tuple[int, int, str, object], self._results.get(timeout=0.5))
            except queue.Empty:
                dead = [p.exitcode for p in self._processes if p.exitcode is not None]
                if dead:
                    raise RuntimeError(
                        f"a loadgen worker process exited with code {dead[0]}"
                    ) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"a loadgen worker took more than {timeout_s:g} s to warm up"
                    ) from None
                continue
            item_run, number, what, payload = item
            if what == _FAILED:
                raise RuntimeError(f"loadgen worker {number} failed: {payload}")
            if item_run == run and what == stage:
                got[number] = payload
        return got

    async def run(self, shares: Sequence[Share], *, ready: Ready | None = None) -> ShareResult:
        """Run each share in its own worker process and merge: records of all shares in
        index order, lag samples of all workers pooled, CPU times summed. All workers warm up,
        then `ready(warmup)` (if given; their `Warmup`s merged) runs in this process, then
        every worker starts its measured loop. Raises RuntimeError when a worker process dies
        (e.g. killed, out of memory) or its share raises, TimeoutError when one takes more than
        BARRIER_TIMEOUT_S to warm up."""
        if self._broken:
            raise RuntimeError("this worker pool was stopped by an earlier failure")
        self._runs += 1
        run = self._runs
        try:
            self._grow(len(shares))
            for number, share in enumerate(shares):
                self._tasks[number].put((run, share))
            warm = await asyncio.to_thread(self._wait, run, _WARM, len(shares), BARRIER_TIMEOUT_S)
            if ready is not None:
                await ready(Warmup.merge([cast(Warmup, w) for w in warm.values()]))
            for number in range(len(shares)):
                self._tasks[number].put(run)
            done = await asyncio.to_thread(self._wait, run, _DONE, len(shares), None)
        except BaseException:  # Ctrl-C, cancellation (a deadline), a dead worker: stop them now
            self._broken = True
            for process in self._processes:
                process.kill()
            raise
        return ShareResult.merge([cast(ShareResult, done[k]) for k in range(len(shares))])

    async def __aenter__(self) -> "WorkerPool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self._broken:
            for tasks in self._tasks:
                tasks.put(None)
        for process in self._processes:
            await asyncio.to_thread(process.join, 5)
            if process.is_alive():
                process.kill()
                process.join(1)


async def run_in_workers(shares: Sequence[Share], *, ready: Ready | None = None) -> ShareResult:
    """One run in a pool of its own (`WorkerPool.run`, same merge, `ready` and errors); the
    processes are stopped on return."""
    async with WorkerPool() as pool:
        return await pool.run(shares, ready=ready)
