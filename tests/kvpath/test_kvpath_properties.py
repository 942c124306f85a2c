"""The KV-path cost model's pure functions: exact values and the directions they must keep
(more workers copying never makes a copy faster; more transfers on a pair never raise any one's
rate; resident memory never exceeds the mirror)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpath.copies import (
    DEFAULT_HOST_COPIES,
    contention_factor,
    d2h_seconds,
    h2d_seconds,
    threads_from_env,
)
from kvpath.memory import block_bytes, host_mirror_bytes, resident_bytes
from kvpath.profile import LINK_PROFILES, LinkProfile
from kvpath.transfers import Flow, agent_lanes, transfer_rates, worker_pair_link

SEED_REQUEST = 273_416_192  # 149 blocks x 28 layers x 64 KiB
SAME = LINK_PROFILES["same-node-tcp"]
GBE = LINK_PROFILES["1gbe"]
counts = st.integers(1, 64)


def test_the_notes_copy_times_come_back() -> None:
    assert d2h_seconds(SEED_REQUEST, 0, DEFAULT_HOST_COPIES) == pytest.approx(0.306)
    assert d2h_seconds(0, SEED_REQUEST, DEFAULT_HOST_COPIES) == pytest.approx(0.134)
    assert h2d_seconds(SEED_REQUEST, DEFAULT_HOST_COPIES) == pytest.approx(0.179)


def test_contention_only_where_threads_outnumber_cores() -> None:
    # The default figures' rows (docs/kv-path.md): 1 thread per worker, 4 workers, 16 cores: no
    # slowdown; 16 threads, 2 and 4 workers: 3.0x and 9.2x (measured 3.0x and 9.4x).
    assert contention_factor(4, 16) == 1.0
    assert contention_factor(32, 16) == pytest.approx(3.03, abs=0.01)
    assert contention_factor(64, 16) == pytest.approx(9.19, abs=0.01)
    assert contention_factor(64, None) == 1.0
    slow = d2h_seconds(
        0, SEED_REQUEST, DEFAULT_HOST_COPIES, copying_workers=4, threads_per_worker=16, cores=16
    )
    assert slow == pytest.approx(0.134 * 4**1.6)
    with pytest.raises(ValueError):
        contention_factor(1, 0)


def test_threads_from_env() -> None:
    assert threads_from_env({}) == 1
    assert threads_from_env({"OMP_NUM_THREADS": "8"}) == 8
    assert threads_from_env({"OMP_NUM_THREADS": "lots"}) == 1


@settings(deadline=None)
@given(counts, counts, st.integers(1, 32), st.integers(1, 128), st.integers(0, 2**31))
def test_more_workers_copying_never_makes_a_copy_faster(
    a: int, b: int, threads: int, cores: int, size: int
) -> None:
    few, many = sorted((a, b))
    kw = {"threads_per_worker": threads, "cores": cores}
    assert d2h_seconds(size, size, DEFAULT_HOST_COPIES, copying_workers=few, **kw) <= d2h_seconds(
        size, size, DEFAULT_HOST_COPIES, copying_workers=many, **kw
    )
    assert h2d_seconds(size, DEFAULT_HOST_COPIES, copying_workers=few, **kw) <= h2d_seconds(
        size, DEFAULT_HOST_COPIES, copying_workers=many, **kw
    )


def test_a_tensor_parallel_pair_moves_its_kv_over_the_prefill_ranks() -> None:
    # vLLM 0.31.0: decode rank d reads from prefill rank d x P // D; over TCP the rate adds
    # up over the sending agents (bench/measured/nixl_tcp_ranks_h100.json: 2 -> 4 2.30-2.60
    # GB/s against 1.46-1.50 for 1 -> 1), so TP2 -> TP4 is two lanes, TP1 -> TP2 one.
    assert [agent_lanes(p, d) for p, d in ((1, 1), (1, 2), (2, 2), (2, 4), (4, 4), (4, 2))] == [
        1,
        1,
        2,
        2,
        4,
        2,
    ]
    pair = worker_pair_link(SAME, 2)
    assert (pair.name, pair.bytes_per_s, pair.connection_rate) == (
        "same-node-tcp x2 ranks",
        2e9,
        2.4e9,
    )
    assert transfer_rates([Flow("p0-d0", None, pair)] * 2) == [1.2e9, 1.2e9]
    assert worker_pair_link(SAME, 1) is SAME
    # A wire that already binds one lane stays the bound: 1 GbE is 1 GbE at any TP.
    assert worker_pair_link(GBE, 4) is GBE
    rdma = worker_pair_link(LINK_PROFILES["rdma"], 2)
    assert (rdma.bytes_per_s, rdma.wire_bytes_per_s) == (20e9, 20e9)
    with pytest.raises(ValueError, match="tensor parallel"):
        agent_lanes(0, 2)


@given(st.sampled_from(sorted(LINK_PROFILES)), st.integers(1, 8), st.integers(1, 8))
def test_more_lanes_never_slow_a_link_nor_pass_its_wire(name: str, a: int, b: int) -> None:
    link = LINK_PROFILES[name]
    few, many = worker_pair_link(link, min(a, b)), worker_pair_link(link, max(a, b))
    assert link.bytes_per_s <= few.bytes_per_s <= many.bytes_per_s
    assert few.connection_rate <= many.connection_rate
    if link.wire_bytes_per_s is not None:
        assert many.bytes_per_s <= max(link.bytes_per_s, link.wire_bytes_per_s)


def test_transfer_rates_exact() -> None:
    # One alone at the one-transfer rate; two on one pair share the connection's 1.2 GB/s.
    assert transfer_rates([Flow("p0-d0", None, SAME)]) == [1e9]
    assert transfer_rates([Flow("p0-d0", None, SAME)] * 2) == [0.6e9, 0.6e9]
    # Two pairs on one host: separate connections, no shared wire.
    assert transfer_rates([Flow("p0-d0", None, SAME), Flow("p1-d0", None, SAME)]) == [1e9, 1e9]
    # Across 1 GbE: two pairs share the wire; the pair with two transfers splits its half.
    flows = [Flow("a", "n1-n2", GBE), Flow("b", "n1-n2", GBE), Flow("b", "n1-n2", GBE)]
    assert transfer_rates(flows) == pytest.approx([57.5e6, 28.75e6, 28.75e6])


profiles = st.builds(
    lambda one, connection, wire: LinkProfile(
        bytes_per_s=one, connection_bytes_per_s=connection, wire_bytes_per_s=wire
    ),
    st.floats(1e6, 1e11),
    st.none() | st.floats(1e6, 1e11),
    st.none() | st.floats(1e6, 1e11),
)


@settings(deadline=None)
@given(
    profiles,
    st.lists(st.integers(0, 3), max_size=12),
    st.integers(0, 3),
    st.lists(st.integers(0, 1), min_size=4, max_size=4),
)
def test_more_transfers_on_a_pair_never_raise_any_ones_rate(
    profile: LinkProfile, others: list[int], pair: int, wires: list[int]
) -> None:
    """Pairs 0-3, each on a wire or none (a pair's transfers take one path)."""
    flows = [Flow(p, wires[p] or None, profile) for p in others]
    before = transfer_rates(flows)
    after = transfer_rates([*flows, Flow(pair, wires[pair] or None, profile)])
    assert all(new <= old * (1 + 1e-12) for new, old in zip(after, before, strict=False))


@settings(deadline=None)
@given(profiles, st.floats(1.0, 100.0), counts)
def test_a_faster_connection_never_lowers_a_rate(profile: LinkProfile, k: float, n: int) -> None:
    faster = profile.model_copy(
        update={
            "bytes_per_s": profile.bytes_per_s * k,
            "connection_bytes_per_s": (profile.connection_bytes_per_s or profile.bytes_per_s) * k,
        }
    )
    slow = transfer_rates([Flow(0, 1, profile)] * n)
    fast = transfer_rates([Flow(0, 1, faster)] * n)
    assert all(f >= s * (1 - 1e-12) for f, s in zip(fast, slow, strict=True))


def test_memory_exact_values() -> None:
    one = block_bytes(114_688, 16)
    assert one == 1_835_008
    assert host_mirror_bytes(5_035_602_739, 114_688, 16) == 2_744 * one
    assert resident_bytes(10_000, 2_744, one) == 2_744 * one


@settings(deadline=None)
@given(st.integers(0, 10**7), st.integers(0, 10**6), st.integers(1, 2**22))
def test_resident_memory_never_exceeds_the_mirror(touched: int, mirror: int, one: int) -> None:
    assert resident_bytes(touched, mirror, one) <= mirror * one
    assert resident_bytes(touched, mirror, one) <= resident_bytes(touched + 1, mirror, one)
