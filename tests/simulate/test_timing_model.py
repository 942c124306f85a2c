"""The timing model of one run: shared GPUs, the shared KV link, host memory and the OOMKill."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.models import known_model
from steptime.fit import SEED_FIT
from steptime.gpus import GPU_CATALOG
from steptime.roofline import EngineStep
from testbed.calibration import CONSTANTS
from testbed.simulate import load_stack, run_topology
from testbed.timing_model import (
    RunTopology,
    SimRequest,
    WorkerSpec,
    simulate_run,
)

KVB = 114_688  # B/token, Qwen3-0.6B
PROMPT, PREFIX = 2381, 2134  # the server's prompt tokens (2,371 + chat template), 90% prefix
MI = 2**20
STEP = EngineStep(GPU_CATALOG["rtx-4090"], known_model("Qwen/Qwen3-0.6B"), SEED_FIT)


def requests(n: int, kinds: int, cached: bool = True, out: int = 64) -> list[SimRequest]:
    """n requests over `kinds` prefixes; the first of each prefix misses the prefill cache."""
    return [
        SimRequest(
            index=i,
            prefix_id=i % kinds,
            prefix_tokens=PREFIX,
            prompt_tokens=PROMPT,
            cached_tokens=2112 if cached and i >= kinds else 0,
            output_tokens=out,
        )
        for i in range(n)
    ]


def cross_node(prefill_limit: int) -> RunTopology:
    workers = (
        WorkerSpec("prefill-0", "prefill", "prefill", "gpu-8gb/0", STEP, 40_000, prefill_limit),
        WorkerSpec("decode-0", "decode", "decode", "gpu-24gb/0", STEP, 80_000, 8192 * MI),
        WorkerSpec("decode-1", "decode", "decode", "gpu-24gb/0", STEP, 80_000, 8192 * MI),
    )
    return RunTopology(workers=workers, link_bytes_per_s=115e6, kv_bytes_per_token=KVB)


def ttfts_s(topology: RunTopology, reqs: list[SimRequest], concurrency: int) -> list[float]:
    timing = simulate_run(topology, CONSTANTS, reqs, concurrency)
    return [o.token_s[0] - o.sent_s for o in timing.outcomes if o.error is None]


def test_the_stack_topologies_place_workers_on_shared_gpus() -> None:
    agg = run_topology(load_stack("kv-routing"))
    assert [w.gpu for w in agg.workers] == ["gpu-24gb/0"] * 4 + ["gpu-8gb/0"] * 2
    assert agg.link_bytes_per_s is None and agg.router == "kv"
    same = run_topology(load_stack("disagg-same-node"))
    assert {w.gpu for w in same.workers} == {"gpu-24gb/0"}  # 2 prefill + 2 decode on one GPU
    assert same.link_bytes_per_s == pytest.approx(1e9)
    assert {w.memory_limit for w in same.workers} == {10 * 1024 * MI}
    cross = run_topology(load_stack("disagg-cross-node"))
    assert cross.link_bytes_per_s == pytest.approx(115e6)
    assert [w.memory_limit for w in cross.workers] == [8192 * MI] * 3


def test_a_cold_request_moves_all_its_kv_and_a_warm_one_only_the_suffix() -> None:
    timing = simulate_run(cross_node(8192 * MI), CONSTANTS, requests(3, 1), 1)
    moved = [o.moved_bytes for o in timing.outcomes]
    assert moved[0] == PROMPT * KVB  # 273 MB: the decode worker holds nothing yet
    # Later requests land on the decode worker that holds the prefix (KV router): only the
    # blocks past the block-aligned prefix move.
    assert moved[1] == moved[2] == (PROMPT - 2128) * KVB
    ttft = [o.token_s[0] - o.sent_s for o in timing.outcomes]
    assert ttft[0] == pytest.approx(PROMPT * KVB / 115e6, rel=0.1)  # 2.37 s of 1 GbE


def test_concurrent_transfers_share_the_link() -> None:
    one = ttfts_s(cross_node(8192 * MI), requests(1, 1), 1)
    four = ttfts_s(cross_node(8192 * MI), requests(4, 4), 4)  # 4 cold prefixes at once
    assert min(four) == pytest.approx(4 * one[0], rel=0.1)


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05e9, 5e9), st.floats(1.0, 8.0))
def test_a_faster_link_never_raises_ttft(bandwidth: float, factor: float) -> None:
    reqs = requests(6, 3)
    slow = dataclasses.replace(cross_node(8192 * MI), link_bytes_per_s=bandwidth)
    fast = dataclasses.replace(slow, link_bytes_per_s=bandwidth * factor)
    for s, f in zip(ttfts_s(slow, reqs, 1), ttfts_s(fast, reqs, 1), strict=True):
        assert f <= s + 1e-9


def test_disaggregation_on_one_gpu_is_slower_than_aggregation() -> None:
    same = run_topology(load_stack("disagg-same-node"))
    agg = run_topology(load_stack("kv-routing"))
    reqs = requests(60, 2)
    assert statistics.median(ttfts_s(same, reqs, 4)) > 3 * statistics.median(ttfts_s(agg, reqs, 4))


def test_the_seeds_prefill_limit_is_oomkilled_and_every_later_request_fails() -> None:
    timing = simulate_run(cross_node(3584 * MI), CONSTANTS, requests(40, 2), 4)
    (kill,) = timing.kills
    assert kill.worker == "prefill-0"
    assert 4.5 <= kill.at_s <= 18  # the seed: 9 s into the load
    assert kill.memory_bytes > kill.limit_bytes == 3584 * MI
    later = [o for o in timing.outcomes if o.sent_s > kill.at_s + 0.1]
    assert later and all(o.error is not None for o in later)
    assert all("OOMKilled" in (o.error or "") for o in later)


def test_the_shipped_8gi_limit_is_not_killed() -> None:
    for concurrency in (4, 8):
        timing = simulate_run(cross_node(8192 * MI), CONSTANTS, requests(80, 24), concurrency)
        assert timing.kills == []
        assert all(o.error is None for o in timing.outcomes)


def test_the_model_is_deterministic() -> None:
    a = simulate_run(cross_node(3584 * MI), CONSTANTS, requests(20, 2), 4)
    b = simulate_run(cross_node(3584 * MI), CONSTANTS, requests(20, 2), 4)
    assert a == b


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        simulate_run(cross_node(8192 * MI), CONSTANTS, requests(1, 1), 0)
    with pytest.raises(ValueError, match="link"):
        simulate_run(
            dataclasses.replace(cross_node(8192 * MI), link_bytes_per_s=None),
            CONSTANTS,
            requests(1, 1),
            1,
        )
