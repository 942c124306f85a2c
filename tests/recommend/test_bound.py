"""The search's shortcuts give the full search's answers: the rate ceiling bounds every step's
prefill work (:func:`recommend.bounds.least_s_per_token`), and a candidate whose bound is below
the best timed before it is not timed (:func:`recommend.search.bound_reason`) yet rank 1 and
every timed candidate's figures are those the full search gives; with a bound that is wrong
the comparison fails."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from search_answers import same_answers

import recommend.search as search_module
from recommend.bounds import (
    Bounds,
    bounds,
    kv_read_ceiling,
    least_s_per_token,
    step_token_counts,
)
from recommend.load_search import LoadRunner
from recommend.search import Figures, Problem, Result, search
from recommend.space import Candidate, candidates
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from stackmodel.config import project_values
from stackmodel.published import DYNAMO_LLAMA_70B_ONE_NODE
from stackmodel.stacks import load_stack, stack_config
from steptime.measured import core_installed, token_bucket
from workload.config import Lengths, LoadConfig
from workload.slo import parse_slo

SHORT = LoadConfig(prefix_kinds=[2], requests_per_run=40, max_tokens=16)
SLO = parse_slo("ttft_p99_ms=1000")


def test_step_token_counts_cover_every_bucket_to_the_budget() -> None:
    counts = step_token_counts(8192)
    assert counts[:3] == [1, 2, 3] and 256 in counts and 320 in counts and counts[-1] == 8192
    assert {token_bucket(t) for t in range(1, 8193)} == set(counts)
    assert step_token_counts(1000)[-1] == 1024  # the budget's own bucket


def _steps(plan: Any) -> list[Any]:
    """The steps the simulation times ``plan``'s workers by."""
    from simulator.hardware import run_topology

    return [w.step for w in run_topology(plan).workers]


@pytest.mark.parametrize("measured", [False, True])
def test_least_time_per_token_bounds_every_step(measured: bool) -> None:
    """No prefill-only step of up to the budget's tokens takes less GPU time per token than the
    bound, and the bound is below one 3,000-token prompt's own step (what the ceiling read
    before: steps batching several prompts beat it under the measured source)."""
    if measured and not core_installed():
        pytest.skip("aiconfigurator-core is not installed (the calibrate group)")
    plan = DYNAMO_LLAMA_70B_ONE_NODE.plan("disaggregated")
    for step in _steps(plan):
        if not measured:
            step = type(step)(**{**step.__dict__, "measured": None})
        assert (step.measured is not None) == measured
        least = least_s_per_token(step)
        budget = step.max_batched_tokens
        assert budget is not None
        for t in (*range(1, 300), *range(300, budget + 1, 37), budget):
            assert step.gpu_s(t, []) / t >= least * (1 - 1e-12), t
        assert least < step.gpu_s(3000, []) / 3000
        if not measured:  # the roofline's fixed part makes the budget's step the cheapest
            assert math.isclose(least, step.gpu_s(budget, []) / budget)


def _seed_aggregated() -> tuple[dict[str, Any], Any, list[Candidate]]:
    base, cfg = project_values(stack_config("kv-routing")[0]), load_stack("kv-routing").cfg
    space = [c for c in candidates(cfg) if not c.disaggregated and c.router == "kv"]
    return base, cfg, [c for c in space if c.kv_events]


def _fake_timing(one_gpu_share: float) -> Any:
    """A stand-in for the timing: a candidate on both GPUs reaches 0.6 of its ceiling, one on
    one GPU ``one_gpu_share`` of it (above 1: more than its bound allows, a wrong bound)."""

    def timed(plan: Any, load: Any, slo: Any, gpus: int, sent: Any, rate: float, *_: Any) -> Any:
        classes = {g.node_class for g in plan.cfg.topology.workers}
        share = 0.6 if len(classes) == 2 else one_gpu_share
        kv_reads = kv_read_ceiling(plan, sent.best_case())
        ceiling = min(rate * sent.mean_output_tokens, kv_reads) / gpus
        value = ceiling * share
        figures = Figures(1, value, value, 10.0, rate * share, 0.0, 1.0, {})
        return Result(Candidate(groups=()), "ranked", gpus, runs=1, best=figures)

    return timed


@pytest.mark.parametrize("wrong", [False, True])
def test_branch_and_bound_gives_the_full_search_answers(
    monkeypatch: pytest.MonkeyPatch, wrong: bool
) -> None:
    """One-GPU candidates, their bound below the best timed but within the margin, are not
    timed, with their bound in the reason; rank 1 and the timed figures are the full search's.
    With a bound the timing beats (``wrong``), the comparison fails."""
    base, cfg, space = _seed_aggregated()
    monkeypatch.setattr(search_module, "time_candidate", _fake_timing(1.5 if wrong else 0.95))
    problem = Problem("kv-routing", base, cfg, SHORT, SLO)
    bounded = search(problem, space)
    skipped = [r for r in bounded if r.reason.startswith("not timed: ")]
    assert len(skipped) == 6 and {r.status for r in skipped} == {"screened"}
    assert all(r.runs == 0 and r.value is None for r in skipped)
    assert "cannot rank first" in skipped[0].reason and "0.83x the best" in skipped[0].reason
    with monkeypatch.context() as m:
        m.setattr(search_module, "bound_reason", lambda *_: None)
        full = search(problem, space)
    assert sum(r.status == "ranked" for r in full) == len(space)
    if wrong:
        with pytest.raises(AssertionError):
            same_answers(full, bounded)
    else:
        same_answers(full, bounded)


def test_no_branch_and_bound_under_pareto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``pareto`` a candidate below the best may still be on the front: only the margin
    screens."""
    base, cfg, space = _seed_aggregated()
    monkeypatch.setattr(search_module, "time_candidate", _fake_timing(0.95))
    results = search(Problem("kv-routing", base, cfg, SHORT, SLO), space, objective="pareto")
    assert not any(r.reason.startswith("not timed: ") for r in results)
    assert sum(r.status == "ranked" for r in results) == len(space)


def test_timing_ahead_in_processes_gives_the_same_results() -> None:
    """``jobs`` 2 (the next candidates timed ahead in worker processes) gives what one
    process gives, candidate by candidate."""
    base, cfg, space = _seed_aggregated()
    picked = [c for c in space if sum(g.replicas for g in c.groups) <= 2][:3]
    problem = Problem("kv-routing", base, cfg, SHORT, SLO)

    def seen(results: list[Result]) -> list[tuple[Any, ...]]:
        return [(r.candidate.key, r.status, r.rank, r.best, r.reason) for r in results]

    assert seen(search(problem, picked, jobs=2)) == seen(search(problem, picked))


def test_a_candidate_is_timed_with_rare_garbage_collections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The load search of a candidate runs with the cyclic collector's youngest generation
    collected every `COLLECT_EVERY` allocations, and the thresholds are restored after, also
    when the search fails."""
    import gc

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []

    def failing(*_: Any) -> Any:
        seen.append(gc.get_threshold())
        raise RuntimeError("stop")

    monkeypatch.setattr(search_module, "highest_load", failing)
    cfg = load_stack("kv-routing").cfg
    base = project_values(stack_config("kv-routing")[0])
    plan = search_module.check("kv-routing", base, candidates(cfg)[0], LoadConfig())
    assert not isinstance(plan, str)
    with pytest.raises(RuntimeError, match="stop"):
        search_module.time_candidate(plan, LoadConfig(), parse_slo("ttft_p99_ms=1000"), 2)
    assert seen == [(search_module.COLLECT_EVERY, 50, 100)]
    assert gc.get_threshold() == before != seen[0]


DECODE_HEAVY = LoadConfig(prefix_kinds=[2], requests_per_run=64, prompt_tokens=128, max_tokens=512)
MIXED = LoadConfig(
    prefix_kinds=[2],
    requests_per_run=64,
    prompt_lengths=Lengths(values=[128, 512]),
    output_lengths=Lengths(values=[64, 512]),
)


def _runs(key: str, load: LoadConfig, clients: Sequence[int]) -> tuple[Any, Workload, list[Any]]:
    """The seed cluster's candidate ``key`` checked under ``load`` (its plan), the workload, and
    its runs at ``clients`` (one prefix-kinds value each)."""
    base, cfg = project_values(stack_config("kv-routing")[0]), load_stack("kv-routing").cfg
    candidate = next(c for c in candidates(cfg) if c.key == key)
    plan = search_module.check("x", base, candidate, load)
    assert not isinstance(plan, str), plan
    sent = Workload(load)
    runner = LoadRunner(run_topology(plan), stack_constants(plan), load, SLO, 2, workload=sent)
    return plan, sent, [runner.run(2, c) for c in clients]


# c000: one worker alone on a GPU; c001: two time-sliced on one; c005: one on each GPU;
# c039: disaggregated on one GPU, GPU buffers; c044: disaggregated, host buffers, 4 a GPU
@pytest.mark.parametrize("key", ["c000", "c001", "c005", "c039", "c044"])
@pytest.mark.parametrize("load", [DECODE_HEAVY, MIXED], ids=["fixed", "mixed"])
def test_no_run_beats_its_kv_read_ceiling_nor_its_clients_per_client_bound(
    key: str, load: LoadConfig
) -> None:
    """A run's output tokens/s stay within its KV-read ceiling (each later token reads its
    request's KV cache) and within its clients x the per-client rate (each client's requests
    one after another at their E2E floor), goodput within both too; the ceiling is near on a
    worker alone with many clients, and the per-client bound near at one client: a ceiling
    taking a request's whole output as its context, or a client's rate from its TTFT floor
    alone, fails."""
    clients = (1, 16, 256)
    plan, sent, runs = _runs(key, load, clients)
    ceiling = kv_read_ceiling(plan, sent.best_case())
    b = bounds(plan, sent.best_case())
    per_client = b.client_tokens_per_s(sent.shortest_output_tokens, sent.longest_output_tokens)
    for c, run in zip(clients, runs, strict=True):
        tokens = run.summary.output_tokens_per_s
        goodput = run.point.goodput_output_tokens_per_s
        assert run.summary.errors == 0 and tokens > 0
        assert max(tokens, goodput) <= ceiling, (c, tokens, ceiling)
        assert max(tokens, goodput) <= c * per_client, (c, tokens, per_client)
    if key == "c000" and load is DECODE_HEAVY:
        assert runs[-1].summary.output_tokens_per_s > 0.7 * ceiling
    if key in ("c000", "c005"):
        assert runs[0].summary.output_tokens_per_s > 0.8 * per_client


def test_a_kv_read_ceiling_needs_a_roofline_and_a_later_token() -> None:
    """No ceiling (math.inf) for requests of one output token (no later token), nor where a
    decoding worker's steps come from measured kernel data."""
    plan, sent, _ = _runs("c000", DECODE_HEAVY, ())
    assert math.isfinite(kv_read_ceiling(plan, sent.best_case()))
    assert kv_read_ceiling(plan, DECODE_HEAVY.model_copy(update={"max_tokens": 1})) == math.inf
    measured = DYNAMO_LLAMA_70B_ONE_NODE.plan("disaggregated")
    if any(w.step.measured is not None for w in run_topology(measured).workers):
        assert kv_read_ceiling(measured, LoadConfig()) == math.inf


@given(
    ttft=st.floats(0.1, 5_000.0),
    itl=st.floats(0.01, 500.0),
    least=st.integers(1, 2_000),
    more=st.integers(0, 2_000),
)
def test_a_client_s_rate_bound_is_the_most_of_any_output_length(
    ttft: float, itl: float, least: int, more: int
) -> None:
    """n / E2E floor(n) over every output length from the fewest to the most is at most the
    bound, which reads only the two ends."""
    b = Bounds(ttft, itl, 1.0, "prefill", 0.0, 0.0, 0.0)
    bound = b.client_tokens_per_s(least, least + more)
    assert all(
        n * 1e3 / b.e2e_floor_ms(n) <= bound * (1 + 1e-12)
        for n in range(least, least + more + 1, max(1, more // 50))
    )
