"""The event loop's own lag: how late a ticker task wakes, and when that distorts results.

Every timestamp the loadgen takes is read when its coroutine runs, so a loop that is busy (too
many streams for one core, a slow callback) reads the clock late by about its lag: the lag
adds to TTFT and ITL as measured. A task sleeping `LAG_TICK_S` records `actual - intended`
wake-up time for each tick.
"""

import asyncio
import time
from types import TracebackType

LAG_TICK_S = 0.005


class LagMonitor:
    """`async with LagMonitor() as lag:` runs a ticker task for the block; `lag.lags_ms` then
    holds how late (ms, >= 0) each tick woke.

    The loop's timer granularity (epoll waits whole milliseconds) puts up to ~1 ms into every
    tick, so only lags well above 1 ms mean a busy loop.
    """

    def __init__(self, tick_s: float = LAG_TICK_S) -> None:
        self.tick_s = tick_s
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        tick_ns = int(self.tick_s * 1e9)
        while True:
            due = time.monotonic_ns() + tick_ns
            await asyncio.sleep(self.tick_s)
            self.lags_ms.append(max(time.monotonic_ns() - due, 0) / 1e6)

    async def __aenter__(self) -> "LagMonitor":
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
