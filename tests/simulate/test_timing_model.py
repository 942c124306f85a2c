"""The timing model of one run: shared GPUs, the shared KV link, host memory and the OOMKill."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Generator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpath.copies import DEFAULT_HOST_COPIES, d2h_seconds
from kvpath.memory import HOST_BASE_BYTES
from kvpath.profile import LINK_PROFILES, PLAUSIBLE_BYTES_PER_S, LinkProfile, resolve_link
from simulator import timing_model
from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology
from simulator.timing_model import RunTopology, SimRequest, WorkerSpec, simulate_run
from stackmodel.models import known_model
from stackmodel.published import NEBIUS_QWEN3_32B
from stackmodel.stacks import load_stack
from steptime.fit import SEED_FIT
from steptime.gpus import GPU_CATALOG
from steptime.roofline import EngineStep

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


PREFILL_MIRROR, DECODE_MIRROR = 5_035_261_952, 9_072_279_552  # the shipped stack's mirrors


def cross_node(prefill_limit: int, link: LinkProfile = LINK_PROFILES["1gbe"]) -> RunTopology:
    workers = (
        WorkerSpec(
            "prefill-0",
            "prefill",
            "prefill",
            "gpu-8gb/0",
            STEP,
            40_000,
            prefill_limit,
            PREFILL_MIRROR,
        ),
        *(
            WorkerSpec(
                f"decode-{i}",
                "decode",
                "decode",
                "gpu-24gb/0",
                STEP,
                80_000,
                13 << 30,
                DECODE_MIRROR,
            )
            for i in range(2)
        ),
    )
    return RunTopology(workers=workers, cross_node_link=link, kv_bytes_per_token=KVB)


def ttfts_s(topology: RunTopology, reqs: list[SimRequest], concurrency: int) -> list[float]:
    timing = simulate_run(topology, CONSTANTS, reqs, concurrency)
    return [o.token_s[0] - o.sent_s for o in timing.outcomes if o.error is None]


def test_the_stack_topologies_place_workers_on_shared_gpus() -> None:
    agg = run_topology(load_stack("kv-routing"))
    assert [w.gpu for w in agg.workers] == ["gpu-24gb/0"] * 4 + ["gpu-8gb/0"] * 2
    assert agg.same_node_link is None and agg.cross_node_link is None and agg.router == "kv"
    same = run_topology(load_stack("disagg-same-node"))
    assert {w.gpu for w in same.workers} == {"gpu-24gb/0"}  # 2 prefill + 2 decode on one GPU
    assert {w.host_name for w in same.workers} == {"gpu-24gb/node-0"}
    assert same.same_node_link is not None and same.same_node_link.bytes_per_s == 1e9
    assert {(w.memory_limit, w.mirror_bytes, w.threads) for w in same.workers} == {
        (10 * 1024 * MI, 1_854 * 1_835_008, 1)
    }
    cross = run_topology(load_stack("disagg-cross-node"))
    assert cross.cross_node_link is not None and cross.cross_node_link.wire_bytes_per_s == 115e6
    assert [(w.memory_limit, w.mirror_bytes) for w in cross.workers] == [
        (9 * 1024 * MI, PREFILL_MIRROR),
        (13 * 1024 * MI, DECODE_MIRROR),
        (13 * 1024 * MI, DECODE_MIRROR),
    ]


def test_each_decode_group_gets_its_handshake_with_each_prefill_group() -> None:
    # the seed's Qwen3-0.6B: 28 layers x 1,854 blocks of the prefill worker, TP1 -> TP1
    same = run_topology(load_stack("disagg-same-node"))
    assert [(p, d) for p, d, _ in same.handshakes] == [("prefill", "decode")]
    assert same.handshakes[0][2] == pytest.approx(0.02964, abs=1e-5)
    assert run_topology(load_stack("kv-routing")).handshakes == ()
    # Qwen3-32B: a TP2 prefill worker of 56,649 blocks, read by a TP4 decode worker
    qwen = run_topology(NEBIUS_QWEN3_32B.plan("disaggregated"))
    assert [(p, d) for p, d, _ in qwen.handshakes] == [("prefill-0", "decode-1")]
    assert qwen.handshakes[0][2] == pytest.approx(0.4453, abs=1e-4)


def test_a_tp2_prefill_worker_sends_to_a_tp4_decode_worker_over_two_lanes() -> None:
    qwen = run_topology(NEBIUS_QWEN3_32B.plan("disaggregated"))
    prefill, decode = (next(w for w in qwen.workers if w.role == r) for r in ("prefill", "decode"))
    assert (prefill.tp, decode.tp) == (2, 4)
    flow = qwen.flow(prefill, decode)
    assert flow is not None
    assert (flow.profile.bytes_per_s, flow.profile.connection_rate) == (2e9, 2.4e9)
    # the seed's TP1 workers: one lane, the profile as set
    seed = run_topology(load_stack("disagg-cross-node"))
    prefill, decode = (next(w for w in seed.workers if w.role == r) for r in ("prefill", "decode"))
    seed_flow = seed.flow(prefill, decode)
    assert seed_flow is not None and seed_flow.profile is seed.cross_node_link


def one_decode(handshake_s: float, prefills: int = 1) -> RunTopology:
    """The cross-node pair with one decode worker, ``prefills`` prefill workers each on its own
    GPU, a link too fast to matter, and a handshake of ``handshake_s`` per pair."""
    base = cross_node(8192 * MI, LinkProfile(bytes_per_s=1e12, wire_bytes_per_s=1e12))
    prefill, decode = base.workers[0], base.workers[1]
    workers = tuple(
        dataclasses.replace(prefill, name=f"prefill-{i}", gpu=f"gpu-8gb/{i}")
        for i in range(prefills)
    )
    return dataclasses.replace(
        base,
        workers=(*workers, decode),
        handshakes=(("prefill", "decode", handshake_s),),
        fresh_engines=True,
    )


def test_a_fresh_pairs_first_request_waits_for_its_handshake_and_the_next_does_not() -> None:
    reqs = requests(3, 1)
    without = ttfts_s(one_decode(0.0), reqs, 1)
    with_handshake = ttfts_s(one_decode(0.5), reqs, 1)
    assert with_handshake[0] - without[0] == pytest.approx(0.5)
    assert with_handshake[1:] == pytest.approx(without[1:])
    # a deployment that served before: every pair has handshaken, nobody waits
    warm = dataclasses.replace(one_decode(0.5), fresh_engines=False)
    assert ttfts_s(warm, reqs, 1) == without


def test_a_decode_worker_handshakes_with_one_prefill_worker_at_a_time() -> None:
    # two requests at once, one to each idle prefill worker: the second handshake starts when
    # the first ends, so the later request waits 2 s longer (without handshakes their host ->
    # device copies queued on the decode worker, 0.18 s, which the handshakes spread apart)
    reqs = requests(2, 2, cached=False)
    assert {
        o.prefill_worker for o in simulate_run(one_decode(2.0, 2), CONSTANTS, reqs, 2).outcomes
    } == {"prefill-0", "prefill-1"}
    without = ttfts_s(one_decode(0.0, prefills=2), reqs, 2)
    with_handshake = ttfts_s(one_decode(2.0, prefills=2), reqs, 2)
    added = sorted(w - o for w, o in zip(with_handshake, without, strict=True))
    assert added[1] - added[0] == pytest.approx(2.0, abs=0.01)
    assert added[0] == pytest.approx(2.0 - 0.18, abs=0.01)


def test_the_decode_worker_pulls_what_the_run_reported_it_lacked() -> None:
    # cached_tokens is the decode worker's hit (the client's usage comes from the decode leg):
    # 0, then 2,112 (the mocker's 64-token blocks) for the two later requests.
    timing = simulate_run(cross_node(8192 * MI), CONSTANTS, requests(3, 1), 1)
    moved = [o.moved_bytes for o in timing.outcomes]
    assert moved == [2381 * KVB, (2381 - 2112) * KVB, (2381 - 2112) * KVB]  # 273 MB, 31 MB
    ttft = [o.token_s[0] - o.sent_s for o in timing.outcomes]
    # 2.37 s of 1 GbE + the d2h copy into fresh pages (0.31 s) + the h2d copy (0.18 s)
    assert ttft[0] == pytest.approx(PROMPT * KVB / 115e6 + 0.306 + 0.179, rel=0.1)


def test_the_routing_stand_in_hits_what_the_model_routed_before() -> None:
    # model_hits: the run's cached_tokens are ignored (here they claim a hit on every request);
    # the decode worker holds a prefix once it received it: whole prefix blocks (2,128 of 2,134).
    timing = simulate_run(cross_node(8192 * MI), CONSTANTS, requests(3, 1), 1, model_hits=True)
    assert [o.moved_bytes for o in timing.outcomes] == [
        2381 * KVB,
        (2381 - 2128) * KVB,
        (2381 - 2128) * KVB,
    ]
    one = RunTopology(workers=(WorkerSpec("w-0", "w", "aggregated", "gpu-0", STEP, 10**6),))
    fresh = [dataclasses.replace(r, cached_tokens=0) for r in requests(4, 2)]
    hits = [
        o.cached_tokens for o in simulate_run(one, CONSTANTS, fresh, 1, model_hits=True).outcomes
    ]
    assert hits == [0, 0, 2128, 2128]
    assert [o.cached_tokens for o in simulate_run(one, CONSTANTS, fresh, 1).outcomes] == [0] * 4


def test_the_prefill_worker_hits_its_own_cache_whatever_the_decode_side_held() -> None:
    # The run reports no decode-side hit (cached=False), so every request moves its whole KV;
    # the prefill worker still holds the prefix it computed for request 0: request 1 computes
    # only the 2,381 - 2,128 (133 whole 16-token blocks of the 2,134-token prefix) = 253 tokens.
    timing = simulate_run(cross_node(8192 * MI), CONSTANTS, requests(2, 1, cached=False), 1)
    assert [o.moved_bytes for o in timing.outcomes] == [2381 * KVB] * 2
    assert [o.cached_tokens for o in timing.outcomes] == [0, 2128]
    # A prefill worker that keeps one prefix only (the LRU keeps at least the last) misses on
    # request 2 of prefixes 0, 1, 0: it computes all 2,381 tokens and copies 149 fresh blocks
    # instead of 253 tokens and 16 fresh blocks; the transfer (whole KV) is the same.
    base = cross_node(8192 * MI)
    small = dataclasses.replace(base.workers[0], kv_capacity_tokens=0)
    small_cache = dataclasses.replace(base, workers=(small, *base.workers[1:]))
    warm, cold = (ttfts_s(t, requests(3, 2, cached=False), 1) for t in (base, small_cache))
    assert cold[:2] == pytest.approx(warm[:2])
    block = 16 * KVB
    copy = d2h_seconds(149 * block, 0, DEFAULT_HOST_COPIES) - d2h_seconds(
        16 * block, 133 * block, DEFAULT_HOST_COPIES
    )  # 0.154 s: 133 more blocks into fresh pages
    compute = STEP.gpu_s(2381, []) - STEP.gpu_s(253, [])  # 0.018 s
    assert cold[2] - warm[2] == pytest.approx(copy + compute, rel=1e-6)


def test_a_request_hits_the_prefix_blocks_allocated_in_its_own_engine_step() -> None:
    # vLLM caches a request's blocks when allocate_slots allocates them, before the step
    # computes them (kv_cache_manager.py, allocate_slots -> coordinator.cache_blocks), and
    # schedule() allocates the waiting requests one after another, so of 4 requests of one
    # prefix taken by the prefill worker's first step, only the first misses: the other 3 hit
    # the 133 whole blocks (2,128 tokens) of the 2,134-token prefix it was just allocated.
    timing = simulate_run(cross_node(8192 * MI), CONSTANTS, requests(4, 1, cached=False), 4)
    assert [o.sent_s for o in timing.outcomes] == [0.0] * 4  # all in the engine's first step
    assert [o.cached_tokens for o in timing.outcomes] == [0, 2128, 2128, 2128]
    # Fresh mirror blocks: 149 + 3 x (149 - 133) = 197 (not 4 x 149 = 596): a limit of the
    # base + 197 blocks holds, one block less is crossed during the 4th request's copy.
    block = 16 * KVB
    for blocks, killed in ((197, False), (196, True)):
        limit = HOST_BASE_BYTES + blocks * block
        timing = simulate_run(cross_node(limit), CONSTANTS, requests(4, 1, cached=False), 4)
        assert bool(timing.kills) is killed, blocks


def test_a_step_spends_its_token_budget_on_decodes_first_then_chunks_the_prompts() -> None:
    # vLLM's V1 scheduler under --max-num-batched-tokens 2048: two 1,500-token prompts arrive
    # together; step 1 computes the first whole and 548 tokens of the second, step 2 the
    # first's next token and the second's remaining 952.
    step = dataclasses.replace(STEP, max_batched_tokens=2_048)
    worker = WorkerSpec("w-0", "w", "aggregated", "gpu/0", step, 100_000)
    reqs = [SimRequest(i, i, 0, 1_500, cached_tokens=0, output_tokens=3) for i in range(2)]
    first, second = simulate_run(RunTopology(workers=(worker,)), CONSTANTS, reqs, 2).outcomes
    start = first.sent_s + CONSTANTS.request_overhead_s
    one = step.host_s + step.gpu_s(2_048, [])
    two = step.host_s + step.gpu_s(952, [1_501])
    assert first.token_s[0] - start == pytest.approx(one)
    assert second.token_s[0] - start == pytest.approx(one + two)
    assert first.token_s[1] == pytest.approx(second.token_s[0])
    # without a budget both prompts take one step
    unlimited = dataclasses.replace(worker, step=STEP)
    both = simulate_run(RunTopology(workers=(unlimited,)), CONSTANTS, reqs, 2).outcomes
    whole = STEP.host_s + STEP.gpu_s(3_000, [])
    assert [o.token_s[0] - start for o in both] == pytest.approx([whole, whole])


def test_concurrent_transfers_share_the_link() -> None:
    one = ttfts_s(cross_node(8192 * MI), requests(1, 1), 1)
    four = ttfts_s(cross_node(8192 * MI), requests(4, 4), 4)  # 4 cold prefixes at once
    # Two decode workers, so two pairs, one wire: the four transfers share the 1 GbE wire.
    assert max(four) == pytest.approx(4 * PROMPT * KVB / 115e6, rel=0.15)
    assert max(four) > 3 * one[0]


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05e9, 5e9), st.floats(1.0, 8.0))
def test_a_faster_connection_never_raises_ttft(bandwidth: float, factor: float) -> None:
    reqs = requests(6, 3)
    slow = cross_node(8192 * MI, LinkProfile(bytes_per_s=bandwidth, wire_bytes_per_s=bandwidth))
    fast = cross_node(
        8192 * MI,
        LinkProfile(bytes_per_s=bandwidth * factor, wire_bytes_per_s=bandwidth * factor),
    )
    for s, f in zip(ttfts_s(slow, reqs, 1), ttfts_s(fast, reqs, 1), strict=True):
        assert f <= s + 1e-9


@pytest.mark.parametrize("rate", PLAUSIBLE_BYTES_PER_S)
def test_a_run_ends_on_the_slowest_and_the_fastest_link_the_config_accepts(rate: float) -> None:
    # The bounds as a user writes them (a plain number is GB/s) are accepted...
    link = resolve_link(rate / 1e9)
    timing = simulate_run(cross_node(8192 * MI, link), CONSTANTS, requests(12, 3), 4)
    # ...and the run ends, each transfer taking what the link gives it.
    moved = [o.moved_bytes for o in timing.outcomes]
    assert all(o.error is None for o in timing.outcomes)
    assert timing.end_s >= sum(moved) / rate
    assert timing.end_s < sum(moved) / rate + 10.0


def test_disaggregation_on_one_gpu_is_slower_than_aggregation() -> None:
    same = run_topology(load_stack("disagg-same-node"))
    agg = run_topology(load_stack("kv-routing"))
    reqs = requests(60, 2)
    assert statistics.median(ttfts_s(same, reqs, 4)) > 3 * statistics.median(ttfts_s(agg, reqs, 4))


def test_the_seeds_prefill_limit_is_oomkilled_and_every_later_request_fails() -> None:
    # Every request a new prefix (no prefix-cache hit on the prefill worker): 149 fresh blocks
    # each; 585 fit between the 2.5 GiB base and 3,584Mi, so the 4th request's copy crosses.
    timing = simulate_run(cross_node(3584 * MI), CONSTANTS, requests(40, 40, cached=False), 1)
    (kill,) = timing.kills
    assert kill.worker == "prefill-0"
    assert sum(o.error is None for o in timing.outcomes) == 3
    assert kill.memory_bytes > kill.limit_bytes == 3584 * MI
    later = [o for o in timing.outcomes if o.sent_s > kill.at_s + 0.1]
    assert later and all(o.error is not None for o in later)
    assert all("OOMKilled" in (o.error or "") for o in later)


def test_prefix_hits_on_the_prefill_worker_touch_only_the_suffix_blocks() -> None:
    # 2 prefixes: requests 0 and 1 touch 149 fresh blocks each (298), every later one only its
    # 149 - 133 = 16 suffix blocks (whatever the decode side held): 298 + 16 x 17 = 570 <= 585,
    # 298 + 16 x 18 = 586 > 585, so 2 + 17 = 19 requests succeed and the 20th is killed.
    timing = simulate_run(cross_node(3584 * MI), CONSTANTS, requests(40, 2, cached=False), 1)
    assert [k.worker for k in timing.kills] == ["prefill-0"]
    assert sum(o.error is None for o in timing.outcomes) == 19


def test_resident_memory_stops_at_the_mirror_so_the_floor_is_never_crossed() -> None:
    floor = HOST_BASE_BYTES + PREFILL_MIRROR  # the simulation's base + the mirror
    for concurrency in (4, 8):
        reqs = requests(80, 24, cached=False)  # every request fresh: the mirror fills up
        timing = simulate_run(cross_node(floor), CONSTANTS, reqs, concurrency)
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
            dataclasses.replace(cross_node(8192 * MI), cross_node_link=None),
            CONSTANTS,
            requests(1, 1),
            1,
        )


def test_simulated_records_carry_the_frontends_phases_and_workers() -> None:
    """A simulated request carries what the Dynamo frontend would return of it: the replicas
    that served it, and a TTFT that splits as the measured one does. Cross-node over 1 GbE, one
    request alone: the KV-transfer phase is its whole prompt's KV over the wire (the frontend's
    estimate runs to the decode worker's first token, so one decode step more), the prefill
    wait the frontend's own overhead, and the simulation has no network: residual 0."""
    from measurement.phases import request_phases, run_phases
    from simulator.records import timing_records

    reqs = requests(1, 1, cached=False)
    timing = simulate_run(cross_node(8192 * MI), CONSTANTS, reqs, 1)
    [record] = timing_records(timing, reqs, 0.0)
    assert record.prefill_worker_id == "prefill-0"
    assert record.decode_worker_id in {"decode-0", "decode-1"}
    phases = request_phases(record)
    assert phases is not None
    assert phases["prefill_wait"] == pytest.approx(CONSTANTS.request_overhead_s * 1e3)
    wire = LINK_PROFILES["1gbe"].wire_bytes_per_s
    assert wire is not None
    wire_ms = PROMPT * KVB / wire * 1e3
    assert wire_ms < phases["kv_transfer"] < wire_ms * 1.1
    assert phases["residual"] == pytest.approx(0.0, abs=1e-6)
    summary = run_phases([record])
    assert summary is not None
    assert [(w.role, w.worker_id) for w in summary.workers] == [
        ("prefill", "prefill-0"),
        ("decode", record.decode_worker_id),
    ]
    agg = run_topology(load_stack("kv-routing"))
    timing = simulate_run(agg, CONSTANTS, requests(4, 2), 2)
    for r in timing_records(timing, requests(4, 2), 0.0):
        assert r.prefill_worker_id == r.decode_worker_id is not None
        assert r.kv_transfer_estimated_ms is None
        assert r.first_token_ns is not None and r.sent_ns is not None
        assert r.frontend_ttft_ms == pytest.approx((r.first_token_ns - r.sent_ns) / 1e6, abs=1e-3)


def test_measured_clients_start_at_once_when_the_warm_up_has_ended() -> None:
    # loadgen.loops.run_share awaits the warm-up's closed loop, then run_closed_loop gathers
    # its slots at once: every client's first measured request is sent at the same instant,
    # the end of the slowest warm-up request.
    worker = WorkerSpec("w-0", "w", "aggregated", "gpu/0", STEP, 100_000)
    reqs = [SimRequest(i, i % 3, PREFIX, PROMPT, 0, out) for i, out in enumerate((4, 8, 16))]
    reqs += requests(6, 2, cached=False)
    reqs[3:] = [dataclasses.replace(r, index=3 + r.index) for r in reqs[3:]]
    timing = simulate_run(RunTopology(workers=(worker,)), CONSTANTS, reqs, 3, warmup=3)
    warm, measured = timing.outcomes[:3], timing.outcomes[3:]
    assert [o.sent_s for o in warm] == [0.0, 0.0, 0.0]
    last = max(o.token_s[-1] for o in warm)
    assert last > 0 and last == warm[2].token_s[-1]  # the 16-token one ends last
    assert [o.sent_s for o in measured[:3]] == [last] * 3
    assert min(o.sent_s for o in measured[3:]) > last
    with pytest.raises(ValueError, match=r"warmup must be 0\.\.9 requests, got 10"):
        simulate_run(RunTopology(workers=(worker,)), CONSTANTS, reqs, 3, warmup=10)


@pytest.mark.parametrize("frontend", [True, False])
@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_decode_steps_timed_in_one_go_match_the_step_by_step_loop(
    monkeypatch: pytest.MonkeyPatch, frontend: bool, concurrency: int
) -> None:
    """Two aggregated workers, each alone on its GPU (one aggregated worker and a time-sliced
    pair beside it): the decode-only steps a worker alone on its GPU times in one go give the
    same token times, to the nanosecond, as the engine loop taking them one by one; requests
    submitted mid-run join the step after the one in progress, as in the loop."""
    workers = (
        WorkerSpec("a-0", "a", "aggregated", "g0/0", STEP, kv_capacity_tokens=40_000),
        WorkerSpec("a-1", "a", "aggregated", "g1/0", STEP, kv_capacity_tokens=40_000),
        WorkerSpec("b-0", "b", "aggregated", "g2/0", STEP, kv_capacity_tokens=40_000),
        WorkerSpec("b-1", "b", "aggregated", "g2/0", STEP, kv_capacity_tokens=40_000),
    )
    topology = RunTopology(workers=workers, frontend=frontend)
    reqs = [dataclasses.replace(r, output_tokens=8 + 37 * (r.index % 5)) for r in requests(60, 3)]
    taken: list[int] = []
    one_go = timing_model._Worker._decode_steps

    def counted(self: timing_model._Worker) -> Generator[object, object, None]:
        taken.append(1)
        return (yield from one_go(self))

    monkeypatch.setattr(timing_model._Worker, "_decode_steps", counted)
    fast = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=6)
    monkeypatch.setattr(timing_model._Model, "exclusive", lambda self, worker: False)
    slow = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=6)
    assert taken  # the workers alone on their GPU took the one-go path
    assert [o.token_s.tolist() for o in fast.outcomes] == [
        o.token_s.tolist() for o in slow.outcomes
    ]
    assert fast == slow


@pytest.mark.parametrize(
    ("stack", "out", "kinds", "concurrency", "frontend"),
    [
        ("kv-routing", 400, 4, 8, True),  # long outputs, 4 + 2 workers time-sliced
        ("kv-routing", 64, 2, 4, False),  # the seed's outputs, no frontend: sends at step ends
        ("vllm-service", 250, 12, 16, False),  # round-robin, more clients than workers
        ("disagg-same-node", 120, 7, 6, True),  # prefill workers beside decode workers
    ],
)
def test_decode_steps_of_workers_sharing_a_gpu_timed_together_match_the_loop(
    monkeypatch: pytest.MonkeyPatch,
    stack: str,
    out: int,
    kinds: int,
    concurrency: int,
    frontend: bool,
) -> None:
    """Workers time-sliced on one GPU: their decode-only steps timed together in one go
    (the server's arithmetic replayed, handed back where a request is submitted, a request
    ends or the horizon is reached) give the same records, every float the same, as the engine
    loop taking each step through the shared server; windows both ran to their end and were
    interrupted. Outputs of mixed lengths, the routing stand-in's prefix hits, a warm-up."""
    topology = dataclasses.replace(run_topology(load_stack(stack)), frontend=frontend)
    # decode workers with GPU buffers (no host mirror to be OOMKilled over): steps in one go
    workers = [
        dataclasses.replace(w, memory_limit=None) if w.role == "decode" else w
        for w in topology.workers
    ]
    topology = dataclasses.replace(topology, workers=tuple(workers))
    reqs = [
        SimRequest(i, i % kinds, 112, 128, 0, out - 7 * (i % 4)) for i in range(40 + concurrency)
    ]
    replays: list[bool] = []
    replay = timing_model._Window._replay

    def counted(self: timing_model._Window, until: float) -> timing_model._Progress:
        replays.append(until < float("inf"))
        return replay(self, until)

    monkeypatch.setattr(timing_model._Window, "_replay", counted)
    fast = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=concurrency)
    monkeypatch.setattr(timing_model._Model, "together", lambda self, worker: False)
    slow = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=concurrency)
    assert replays.count(False) > 10 and any(replays)  # windows, some of them interrupted
    assert [o.token_s.tolist() for o in fast.outcomes] == [
        o.token_s.tolist() for o in slow.outcomes
    ]
    assert fast == slow


def test_a_step_memo_kept_across_runs_changes_no_timing() -> None:
    """The engine steps' GPU seconds kept across two runs of one topology: the second run
    computes no step the first did not, and both time what a run without the memo times."""
    topology = RunTopology(
        workers=(
            WorkerSpec("a-0", "a", "aggregated", "g0/0", STEP, kv_capacity_tokens=40_000),
            WorkerSpec("a-1", "a", "aggregated", "g0/0", STEP, kv_capacity_tokens=40_000),
        )
    )
    memo: dict[tuple[str, int, int, int], float] = {}
    first = simulate_run(topology, CONSTANTS, requests(30, 2), 4, step_memo=memo)
    kept = dict(memo)
    again = simulate_run(topology, CONSTANTS, requests(30, 2), 4, step_memo=memo)
    assert memo == kept and len(kept) > 10
    assert first == again == simulate_run(topology, CONSTANTS, requests(30, 2), 4)
    singles = [(key, seconds) for key, seconds in kept.items() if key[2] == 1]
    assert singles and all(s == STEP.gpu_s(k[1], [k[3]]) for k, s in singles)


def test_decode_steps_are_timed_per_stretch_not_per_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same 24 requests with 1,024 output tokens instead of 64 (16 times the steps), on a
    worker alone on its GPU and a time-sliced pair: the decode-only steps timed in one go take
    their step times array-wise (`EngineStep.decode_gpu_s`), so the step times computed one
    by one (`EngineStep.gpu_s`: prompts, and a shared GPU's first step of a stretch) grow with
    the stretches between requests' arrivals and ends, not with the tokens (19 -> 41 here;
    one per step would give 324 -> 5,124)."""
    scalar = EngineStep.gpu_s
    calls: list[int] = []

    def counted(self: EngineStep, prefill_tokens: int, contexts: list[int]) -> float:
        calls.append(1)
        return scalar(self, prefill_tokens, contexts)

    monkeypatch.setattr(EngineStep, "gpu_s", counted)
    workers = (
        WorkerSpec("a-0", "a", "aggregated", "g0/0", STEP, kv_capacity_tokens=40_000),
        WorkerSpec("b-0", "b", "aggregated", "g1/0", STEP, kv_capacity_tokens=40_000),
        WorkerSpec("b-1", "b", "aggregated", "g1/0", STEP, kv_capacity_tokens=40_000),
    )
    counts = []
    for out in (64, 1024):
        calls.clear()
        reqs = [SimRequest(i, i % 3, 112, 128, 0, out) for i in range(24)]
        simulate_run(RunTopology(workers=workers), CONSTANTS, reqs, 6, model_hits=True)
        counts.append(len(calls))
    assert counts[1] < 3 * counts[0] < 100, counts


@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_a_window_over_one_worker_replayed_array_wise_matches_the_loop(
    monkeypatch: pytest.MonkeyPatch, concurrency: int
) -> None:
    """The seed's cluster at 1 to 3 clients: a shared GPU's window over its one busy worker is
    replayed array-wise (`_Window._alone`), to the end of the window or to a request reaching
    the GPU, and gives the same records, every float the same, as the engine loop taking each
    step through the shared server; the workers' active blocks, kept as requests come and go,
    are what their requests add up to at every routing."""
    topology = run_topology(load_stack("kv-routing"))
    reqs = [SimRequest(i, i % 4, 112, 128, 0, 300 - 7 * (i % 4)) for i in range(24)]
    alone = timing_model._Window._alone
    taken: list[bool] = []

    def counted(self: timing_model._Window, until: float) -> timing_model._Progress | None:
        progress = alone(self, until)
        taken.append(progress is not None)
        return progress

    route = timing_model._Model.route

    def checked(
        self: timing_model._Model, role: timing_model.Role, spec: SimRequest
    ) -> timing_model._Worker | None:
        for w in self.workers:
            held = sum(r.spec.prompt_tokens for r in [*w.waiting, *w.running])
            assert w.load_blocks() == held // self.constants.block_tokens
        return route(self, role, spec)

    monkeypatch.setattr(timing_model._Window, "_alone", counted)
    monkeypatch.setattr(timing_model._Model, "route", checked)
    fast = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=2)
    monkeypatch.setattr(timing_model._Model, "together", lambda self, worker: False)
    slow = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=2)
    assert taken.count(True) > 10
    assert [o.token_s.tolist() for o in fast.outcomes] == [
        o.token_s.tolist() for o in slow.outcomes
    ]
    assert fast == slow


@pytest.mark.parametrize(
    ("shared", "link", "concurrency", "out"), [(True, "10gbe", 8, 1000), (False, "25gbe", 12, 800)]
)
@pytest.mark.parametrize("decode_limit", [13 << 30, HOST_BASE_BYTES + 20 * 149 * 16 * KVB])
def test_host_buffered_decode_workers_time_decode_steps_in_one_go_as_the_loop(
    monkeypatch: pytest.MonkeyPatch,
    shared: bool,
    link: str,
    concurrency: int,
    out: int,
    decode_limit: int,
) -> None:
    """Decode workers that buffer KV in host memory (a host mirror, so they can be OOMKilled)
    time their decode-only steps in one go, on a GPU they share (a window) or alone on their
    own, and give the same records, every float the same, as the engine loop taking each step:
    with a limit the run never reaches, and with one a transfer crosses mid-run (20 requests'
    149 blocks of 16 tokens fit, every prompt fresh): a decode worker is OOMKilled in a window
    or a stretch of decode steps (the cases chosen so), the steps that ended before carry their
    tokens, the one in progress none, and its requests fail."""
    base = cross_node(20 << 30, LINK_PROFILES[link])
    decode = [
        dataclasses.replace(w, memory_limit=decode_limit, gpu=w.gpu if shared else f"gpu-24gb/{i}")
        for i, w in enumerate(base.workers[1:])
    ]
    topology = dataclasses.replace(base, workers=(base.workers[0], *decode))
    reqs = [dataclasses.replace(r, output_tokens=out - 9 * (r.index % 5)) for r in requests(90, 90)]
    midway: list[bool] = []
    kill = timing_model._Model.kill

    def counted(self: timing_model._Model, worker: timing_model._Worker, memory: int) -> None:
        midway.append(worker.window is not None if shared else worker.arrived is not None)
        kill(self, worker, memory)

    monkeypatch.setattr(timing_model._Model, "kill", counted)
    fast = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True)
    monkeypatch.setattr(timing_model._Model, "together", lambda self, worker: False)
    monkeypatch.setattr(timing_model._Model, "exclusive", lambda self, worker: False)
    slow = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True)
    killed = decode_limit < 13 << 30
    assert [k.worker[:6] for k in fast.kills] == (["decode"] * 2 if killed else [])
    assert any(midway[:2]) == killed  # a kill in the fast path's window or stretch
    assert [o.token_s.tolist() for o in fast.outcomes] == [
        o.token_s.tolist() for o in slow.outcomes
    ]
    assert fast == slow


def _own_gpus(kind: str) -> RunTopology:
    """Workers each alone on its GPU: three aggregated ones (a step budget that chunks the
    prompts), or two prefill workers with host mirrors and two decode workers on another
    host, over 1 GbE, each pair's first requests waiting for its NIXL handshake."""
    chunked = dataclasses.replace(STEP, max_batched_tokens=1024)
    if kind == "aggregated":
        workers = tuple(
            WorkerSpec(f"a-{i}", "a", "aggregated", f"g{i}/0", chunked, 40_000) for i in range(3)
        )
        return RunTopology(workers=workers)
    prefill = (
        WorkerSpec(f"p-{i}", "p", "prefill", f"p/{i}", chunked, 40_000, 64 << 30, PREFILL_MIRROR)
        for i in range(2)
    )
    decode = (WorkerSpec(f"d-{i}", "d", "decode", f"d/{i}", STEP, 80_000) for i in range(2))
    return RunTopology(
        workers=(*prefill, *decode),
        cross_node_link=LINK_PROFILES["1gbe"],
        kv_bytes_per_token=KVB,
        handshakes=(("p", "d", 0.25),),
        fresh_engines=True,
    )


@pytest.mark.parametrize("kind", ["aggregated", "disaggregated"])
@pytest.mark.parametrize("concurrency", [2, 7])
def test_workers_with_a_gpu_of_their_own_time_as_through_the_shared_server(
    monkeypatch: pytest.MonkeyPatch, kind: str, concurrency: int
) -> None:
    """Workers each alone on its GPU: their steps ended without the processor-sharing server's
    bookkeeping (`SharedServer.serve_alone`), their decode stretches waiting on their end or a
    request's arrival without a SimPy condition (`first_of`) and taking the step times kept
    for the run (`_Worker._stretch_gpu_s`) give the same records, every float the same, as
    steps served by the shared server, `a | b` and step times computed for each stretch."""
    topology = _own_gpus(kind)
    reqs = [SimRequest(i, i % 3, 112, 600 + 97 * (i % 2), 0, 40 + 24 * (i % 2)) for i in range(48)]
    alone: list[bool] = []
    serve_alone = timing_model.SharedServer.serve_alone

    def counted(self: timing_model.SharedServer, work: float) -> object:
        alone.append(not self._jobs)
        return serve_alone(self, work)

    stretches = timing_model._Worker._stretch_gpu_s
    kept: list[bool] = []

    def looked_up(self: timing_model._Worker, batch: int, total: int, steps: int) -> object:
        kept.append((batch, total, steps) in self.stretches)
        return stretches(self, batch, total, steps)

    monkeypatch.setattr(timing_model.SharedServer, "serve_alone", counted)
    monkeypatch.setattr(timing_model._Worker, "_stretch_gpu_s", looked_up)
    fast = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=3)
    assert alone.count(True) > 40 and kept.count(True) > 5 and kept.count(False) > 5
    monkeypatch.setattr(timing_model.SharedServer, "serve_alone", timing_model.SharedServer.serve)
    monkeypatch.setattr(timing_model, "first_of", lambda env, a, b: a | b)

    def computed(self: timing_model._Worker, batch: int, total: int, steps: int) -> object:
        return self.spec.step.decode_gpu_s(batch, range(total, total + steps * batch, batch))

    monkeypatch.setattr(timing_model._Worker, "_stretch_gpu_s", computed)
    slow = simulate_run(topology, CONSTANTS, reqs, concurrency, model_hits=True, warmup=3)
    assert all(o.error is None for o in fast.outcomes)
    assert [o.token_s.tolist() for o in fast.outcomes] == [
        o.token_s.tolist() for o in slow.outcomes
    ]
    assert fast == slow
