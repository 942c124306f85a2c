"""The contention and memory models: processor sharing, transfers on pairs and wires, the
resident host mirror."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpath.memory import block_bytes
from kvpath.profile import LINK_PROFILES
from kvpath.transfers import Flow
from simulator.sharing import (
    FlowServer,
    ResidentMirror,
    SharedServer,
    all_done,
    finish_times,
    first_of,
    job_done,
)

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


def flow_finish_times(flows: list[tuple[float, float, Flow]]) -> list[float]:
    """When each transfer ``(start_s, bytes, flow)`` ends on one :class:`FlowServer`."""
    env = simpy.Environment()
    server = FlowServer(env)
    ends = [0.0] * len(flows)

    def run(i: int, start: float, size: float, flow: Flow):  # type: ignore[no-untyped-def]
        yield env.timeout(start)
        yield server.serve(size, flow)
        ends[i] = env.now

    for i, (start, size, flow) in enumerate(flows):
        env.process(run(i, start, size, flow))
    env.run()
    return ends


def test_transfers_share_their_pair_and_their_wire() -> None:
    same, gbe = LINK_PROFILES["same-node-tcp"], LINK_PROFILES["1gbe"]
    # One pair on one host: two transfers share the connection's 1.2 GB/s.
    assert flow_finish_times([(0, 1.2e9, Flow("a", None, same))] * 2) == pytest.approx([2.0, 2.0])
    # Two pairs on one host: a connection each, 1 GB/s each.
    ends = flow_finish_times([(0, 1e9, Flow("a", None, same)), (0, 1e9, Flow("b", None, same))])
    assert ends == pytest.approx([1.0, 1.0])
    # Two pairs across one 1 GbE wire: half each until the first ends, then the rest alone.
    ends = flow_finish_times(
        [(0, KV_272_MB, Flow("a", 1, gbe)), (0, KV_272_MB / 2, Flow("b", 1, gbe))]
    )
    assert ends == pytest.approx([1.5 * KV_272_MB / GBE, KV_272_MB / GBE])


def test_the_mirror_grows_by_fresh_blocks_and_reports_the_crossing() -> None:
    mirror = ResidentMirror(base=1_000, limit=1_250, mirror_blocks=4, block_bytes=100)
    assert mirror.touch(2) == (200, None)
    assert mirror.now_bytes() == 1_200
    assert mirror.touch(2) == (200, 50)  # crosses 50 bytes into the copy
    assert mirror.touch(5) == (0, None)  # the mirror is full: nothing more becomes resident
    assert mirror.now_bytes() == 1_400


@pytest.mark.parametrize(("base", "blocks"), [(2 * 2**30, 877), (5 * 2**30 // 2, 585)])
def test_the_seed_prefill_worker_is_killed_on_the_block_after_the_last_that_fits(
    base: int, blocks: int
) -> None:
    # The seed's cross-node prefill worker: limit 3,584Mi, 1.75 MiB blocks of Qwen3-0.6B, a
    # 2,744-block mirror; at the simulation's 2.5 GiB base, 585 blocks (3 whole 149-block
    # requests without prefix-cache hits) fit.
    one = block_bytes(114_688, 16)
    mirror = ResidentMirror(base=base, limit=3_584 * 2**20, mirror_blocks=2_744, block_bytes=one)
    assert mirror.touch(blocks) == (blocks * one, None)
    fresh, kill_after = mirror.touch(1)
    assert fresh == one
    assert kill_after is not None and 0 <= kill_after < one


def test_shared_server_refuses_a_bad_capacity() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SharedServer(simpy.Environment(), 0.0)
    with pytest.raises(ValueError, match="efficiency"):
        SharedServer(simpy.Environment(), 1.0, efficiency=1.5)


def test_a_tiny_job_late_in_a_run_ends_instead_of_re_arming_for_ever() -> None:
    # `--set links.crossNode=1250000000` (GB/s): 272 MB take 2e-10 s at t=1000 s, below what
    # the clock can add there; the job ends all the same.
    assert finish_times([(0.0, 1.0), (1000.0, KV_272_MB)], 1.25e18) == [
        pytest.approx(8e-19),
        pytest.approx(1000.0),
    ]
    # `{bytesPerS: 1.25}`: a transfer of 7 years, and a 1-unit job beside it that ends.
    assert finish_times([(0.0, KV_272_MB), (0.0, 1.0)], 1.25) == [
        pytest.approx(KV_272_MB / 1.25 + 0.8),
        pytest.approx(1.6),
    ]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1e-6, 1.0),  # a job's total work
            st.sampled_from([0.0, 1e-18, 1e-12, 1e-10, 1e-9, 1e-3, -1e-15]),  # its part left
            st.floats(1e-3, 1e6),  # the clock
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([1.0, 0.891282 / 2, 0.25]),
)
def test_jobs_done_array_wise_are_job_done(
    jobs: list[tuple[float, float, float]], rate: float
) -> None:
    """Whether jobs are done by the server's tolerances (a billionth of the work, or 4 units in
    the last place of the clock): one job at a time and whole arrays of jobs checked at clock
    times of their own agree."""
    totals = [total for total, _, _ in jobs]
    left = [total * part for total, part, _ in jobs]
    clocks = [clock for _, _, clock in jobs]
    each = [
        job_done(rem, total, rate, now)
        for rem, total, now in zip(left, totals, clocks, strict=True)
    ]
    assert all_done(np.array(left), np.array(totals), rate, np.array(clocks)) == all(each)
    assert math.ulp(clocks[0]) == float(np.spacing(clocks[0]))


def _alone_and_beside(serve: str, steps: list[tuple[float, float]], capacity: float) -> list[str]:
    """Jobs served one after the other (each after ``gap`` seconds idle, ``work``), each ended
    through ``serve`` (a method name of :class:`SharedServer`), with a timeout armed beside
    each as it starts that fires when the job's timer does. The order and times of their
    events, the exact floats' reprs."""
    env = simpy.Environment()
    server = SharedServer(env, capacity, 0.5)
    seen: list[str] = []

    def beside(delay: float):  # type: ignore[no-untyped-def]
        yield env.timeout(max(delay, 0.0))
        seen.append(f"timer {env.now!r}")

    def jobs():  # type: ignore[no-untyped-def]
        for gap, work in steps:
            yield env.timeout(gap)
            done = getattr(server, serve)(work)
            env.process(beside(work / capacity))
            yield done
            seen.append(f"job {env.now!r}")

    env.process(jobs())
    env.run()
    return seen


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1e6), st.floats(0, 10) | st.floats(1e-12, 1e-6)),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([1.0, 0.3, 7.0]),
)
def test_a_job_served_alone_ends_where_and_when_the_shared_server_ends_it(
    steps: list[tuple[float, float]], capacity: float
) -> None:
    """A server whose jobs come one at a time (a GPU no other worker shares): each job ended by
    `serve_alone` at the same float as by `serve`, and in the same order among the events of a
    timeout armed beside it that fires at the same instant (the server's timer, then the job's
    end: a timeout armed just after the job's start comes before the end); tiny jobs late
    in a long run (the clock's units in the last place) and jobs of no work included."""
    alone = _alone_and_beside("serve_alone", steps, capacity)
    assert alone == _alone_and_beside("serve", steps, capacity)
    assert len(alone) == 2 * len(steps)
    assert [e.split()[0] for e in alone[:2]] == (
        ["job", "timer"] if steps[0][1] == 0 else ["timer", "job"]
    )


def test_first_of_two_events_succeeds_when_and_where_an_any_of_would() -> None:
    """`first_of` ends at the first of its two events, after the events already due then, as
    SimPy's `a | b` does; the second event, processed later, changes nothing."""

    def order(either) -> list[str]:  # type: ignore[no-untyped-def]
        env = simpy.Environment()
        seen: list[str] = []
        arrival = env.event()

        def waiter():  # type: ignore[no-untyped-def]
            yield either(env, env.timeout(2.0), arrival)
            seen.append(f"woken {env.now}")

        def other(name: str, at: float):  # type: ignore[no-untyped-def]
            yield env.timeout(at)
            if name == "arrives":
                arrival.succeed()
            seen.append(f"{name} {env.now}")

        env.process(waiter())
        env.process(other("arrives", 1.0))
        env.process(other("beside", 1.0))
        env.process(other("late", 2.0))
        env.run()
        return seen

    seen = order(first_of)
    assert seen == order(lambda env, a, b: a | b)
    assert seen == ["arrives 1.0", "beside 1.0", "woken 1.0", "late 2.0"]
