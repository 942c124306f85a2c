"""The event-loop lag monitor and its warning."""

import asyncio
import time

import pytest

from loadgen.lag import LagMonitor
from measurement.client_cost import LAG_WARN_P99_MS, lag_warning
from measurement.record import RequestRecord
from measurement.stats import summarize_run


@pytest.mark.parametrize("p99", [None, 0.0, 1.2, LAG_WARN_P99_MS])
def test_no_warning_up_to_the_threshold(p99: float | None) -> None:
    assert lag_warning(p99, p99) is None


def test_warning_above_the_threshold_names_the_lag() -> None:
    warning = lag_warning(12.34, 40.0)
    assert warning is not None
    assert warning.startswith("the client's event loop woke 12.3 ms late at p99 (max 40.0 ms;")
    assert "warning above 5 ms" in warning
    assert lag_warning(3.0, 9.0, threshold_ms=2.0) is not None


@pytest.mark.asyncio
async def test_monitor_sees_a_blocked_loop() -> None:
    async with LagMonitor(tick_s=0.002) as lag:
        await asyncio.sleep(0.01)
        time.sleep(0.06)  # blocks the loop: the tick due within it wakes >= 58 ms late
        await asyncio.sleep(0.01)
    assert max(lag.lags_ms) >= 58
    assert all(v >= 0 for v in lag.lags_ms)


def test_run_summary_carries_the_lag_and_its_warning() -> None:
    record = RequestRecord(index=0, prefix_id=0, intended_ns=0, sent_ns=1, end_ns=2)
    calm = summarize_run(
        [record], prefix_kinds=1, concurrency=1, repetition=1, loop_lags_ms=[0.5] * 100
    )
    assert (calm.loop_lag_p99_ms, calm.loop_lag_max_ms) == (0.5, 0.5)
    assert not any("event loop" in w for w in calm.warnings)
    busy = summarize_run(
        [record],
        prefix_kinds=1,
        concurrency=1,
        repetition=1,
        workers=2,
        loop_lags_ms=[1.0] * 90 + [20.0] * 10,
        client_cpu_s=0.002,
    )
    assert busy.loop_lag_max_ms == 20.0 and busy.workers == 2
    assert busy.client_cpu_ms_per_request == 2.0
    assert any(w.startswith("the client's event loop woke 20.0 ms late") for w in busy.warnings)
