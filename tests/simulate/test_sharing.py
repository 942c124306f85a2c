"""The contention and memory models as pure functions: processor sharing and host memory."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.sharing import Hold, HostMemory, SharedServer, finish_times, host_memory_bytes

KV_272_MB = 2371 * 114_688  # one seed request's KV (bytes)
GBE = 115e6  # 1 GbE, B/s (seed: 110-117 MB/s)

jobs = st.lists(
    st.tuples(st.floats(0, 10), st.floats(0.001, 100)), min_size=1, max_size=8
)  # (arrival s, work)


def test_two_transfers_share_one_gigabit_link() -> None:
    alone = finish_times([(0.0, KV_272_MB)], GBE)
    both = finish_times([(0.0, KV_272_MB), (0.0, KV_272_MB)], GBE)
    assert alone == [pytest.approx(2.3645, abs=1e-3)]  # 272 MB / 115 MB/s
    assert both == [pytest.approx(4.729, abs=1e-3)] * 2


def test_a_late_job_gets_its_share_then_the_rest() -> None:
    # 1 unit at t=0, 1 unit at t=0.5 on capacity 1: shared from 0.5 -> first ends at 1.5,
    # second has 0.5 left then, alone: ends at 2.0.
    assert finish_times([(0.0, 1.0), (0.5, 1.0)], 1.0) == [
        pytest.approx(1.5),
        pytest.approx(2.0),
    ]


def test_time_slicing_efficiency_slows_only_shared_work() -> None:
    assert finish_times([(0.0, 1.0)], 1.0, efficiency=0.8) == [pytest.approx(1.0)]
    # two busy contexts: 0.8 of the GPU split in two, 0.4 each
    assert finish_times([(0.0, 1.0), (0.0, 1.0)], 1.0, 0.8) == [pytest.approx(2.5)] * 2


@settings(max_examples=60, deadline=None)
@given(jobs, st.tuples(st.floats(0, 10), st.floats(0.001, 100)))
def test_more_concurrency_never_lowers_queueing_delay(
    base: list[tuple[float, float]], extra: tuple[float, float]
) -> None:
    before = finish_times(base, 1.0, 0.9)
    after = finish_times([*base, extra], 1.0, 0.9)[: len(base)]
    for b, a in zip(before, after, strict=True):
        assert a >= b - 1e-6


@settings(max_examples=60, deadline=None)
@given(jobs, st.floats(1.0, 10.0))
def test_a_faster_link_never_finishes_a_transfer_later(
    transfers: list[tuple[float, float]], factor: float
) -> None:
    slow = finish_times(transfers, 1.0)
    fast = finish_times(transfers, factor)
    for s, f in zip(slow, fast, strict=True):
        assert f <= s + 1e-6


holds = st.lists(
    st.tuples(st.integers(1, 10**9), st.floats(0, 50), st.floats(0, 50)), max_size=12
).map(lambda xs: [Hold(b, start, start + length) for b, start, length in xs])


@settings(max_examples=100, deadline=None)
@given(holds, st.floats(0, 10), st.floats(0, 200))
def test_memory_returns_to_base_when_idle(buffers: list[Hold], linger: float, at: float) -> None:
    base = 2 * 2**30
    assert host_memory_bytes(base, buffers, linger, at) >= base
    idle = max((h.end_s or 0.0 for h in buffers), default=0.0) + linger
    assert host_memory_bytes(base, buffers, linger, idle + 1e-9) == base


def test_memory_counts_buffers_in_use_and_lingering() -> None:
    buffers = [Hold(100, 0.0, 2.0), Hold(10, 1.0, None)]
    assert host_memory_bytes(1000, buffers, 1.0, 0.5) == 1100
    assert host_memory_bytes(1000, buffers, 1.0, 2.5) == 1110  # first lingers until 3.0
    assert host_memory_bytes(1000, buffers, 1.0, 3.0) == 1010  # still held: never ended


def test_host_memory_reports_the_crossing_once() -> None:
    env = simpy.Environment()
    seen: list[int] = []
    memory = HostMemory(env, base=3_000, limit=3_500, linger_s=0.0, on_exceeded=seen.append)
    first = memory.hold(400)
    memory.release(first)
    memory.hold(400)  # the first was freed at once (linger 0): 3,400 fits
    assert seen == []
    memory.hold(200)
    memory.hold(200)
    assert seen == [3_600]


def test_shared_server_refuses_a_bad_capacity() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SharedServer(simpy.Environment(), 0.0)
    with pytest.raises(ValueError, match="efficiency"):
        SharedServer(simpy.Environment(), 1.0, efficiency=1.5)
