"""The decode ceiling (:func:`recommend.bounds.decode_ceiling`): what a candidate's decoding
workers can give requests meeting an inter-token SLO is never below what the simulation gives
(the Qwen3-32B H200 cluster's shapes, aggregated and disaggregated, at a small scale; the
seed's consumer GPUs under an ITL bound), and the search leaves out the candidates it shows
cannot rank first, with rank 1 and every timed figure unchanged."""

from __future__ import annotations

from typing import Any

import pytest

import recommend.search as search_module
from recommend.bounds import (
    InterToken,
    decode_ceiling,
    decode_rate,
    inter_token,
    itl_share,
)
from recommend.search import (
    Problem,
    Result,
    check,
    cluster_gpus,
    search,
    stack_name,
    time_candidate,
)
from recommend.space import Candidate, candidates
from recommend.workload import Workload
from simulator.hardware import run_topology
from stackmodel.config import project_values
from stackmodel.published import NEBIUS_QWEN3_32B
from stackmodel.stacks import load_stack, stack_config
from workload.config import LoadConfig
from workload.slo import parse_slo


def test_itl_share_is_the_least_share_within_the_percentile() -> None:
    """Of m intervals, p99 within the bound leaves floor((m - 1) 0.99) + 1 of them within it."""
    assert itl_share(99, 100, 100) == 99 / 100  # floor(98.01) + 1
    assert itl_share(50, 3, 3) == 2 / 3  # the median of 3: the second
    assert itl_share(99, 1, 1) == 1.0
    assert itl_share(90, 9, 11) == 8 / 9  # of 9, 10, 11: 8/9, 9/10, 10/11


def test_inter_token_reads_tpot_and_itl_only() -> None:
    assert inter_token(parse_slo("ttft_p99_ms=1000"), 64, 64) is None
    assert inter_token(parse_slo("tpot_p99_ms=30"), 1, 64) is None  # no interval
    limits = inter_token(parse_slo("ttft_p99_ms=1000,tpot_p99_ms=30,itl_p50_ms=40"), 9, 9)
    assert limits == InterToken((0.03,), ((0.04, 4 / 8),))  # of 8 intervals: the 4th


def _qwen() -> tuple[dict[str, Any], Any, Workload, list[Candidate]]:
    """The Qwen3-32B FP8 pair's cluster (2 x 8 H200), its 4,000-token prompts with 128-token
    outputs, two requests per client; its candidates with the KV router on the pair's own
    transport."""
    cfg = NEBIUS_QWEN3_32B.plan("disaggregated").cfg
    base = cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    load = cfg.load.model_copy(update={"requests_per_run": 1, "max_tokens": 128})
    space = [c for c in candidates(cfg, shared_prefix=False) if c.router == "kv"]
    transports = {c.knobs()["transport"] for c in space if c.disaggregated}
    own = sorted(transports)[0]
    space = [c for c in space if c.knobs()["transport"] in ("", own)]
    return base, cfg, Workload(load, "qwen", per_client=2), space


QWEN_SHAPES = (
    "8 x TP1 aggregated on node-0; router kv",
    "2 x TP4 aggregated on node-0; router kv",
    "1 x TP8 aggregated on node-0; router kv",
    "4 x TP2 aggregated on node-0 + 4 x TP2 aggregated on node-1; router kv",
)


def _timed_under_ceiling(plan: Any, sent: Workload, slo: Any, gpus: int) -> tuple[float, float]:
    """(the highest goodput per GPU the simulation gives ``plan`` at a load meeting ``slo``,
    its decode ceiling per GPU)."""
    ceiling = decode_ceiling(plan, sent.best_case(), sent.longest_output_tokens, slo) / gpus
    timed = time_candidate(plan, sent.load, slo, gpus, sent)
    assert timed.best is not None
    held = [f.goodput_tokens_per_s_per_gpu for f in (*timed.steady, timed.best)]
    return max(held), ceiling


@pytest.mark.parametrize("label", QWEN_SHAPES)
def test_qwen_aggregated_ceiling_is_above_the_simulation(label: str) -> None:
    base, cfg, sent, space = _qwen()
    candidate = next(c for c in space if c.label().startswith(label))
    plan = check(stack_name("qwen", candidate), base, candidate, sent.load)
    assert not isinstance(plan, str)
    slo = parse_slo("tpot_p99_ms=30")
    simulated, ceiling = _timed_under_ceiling(plan, sent, slo, cluster_gpus(cfg))
    assert 0 < simulated <= ceiling <= 3 * simulated, (simulated, ceiling)


def test_qwen_disaggregated_ceiling_is_above_the_simulation() -> None:
    """A decode worker computes no prompt: its ceiling is its decode batches' alone, and close
    to what the simulation gives (a TP1 decode worker fed by seven TP1 prefill workers)."""
    base, cfg, sent, space = _qwen()
    candidate = next(
        c for c in space if c.label().startswith("7 x TP1 prefill on node-0 + 1 x TP1 decode")
    )
    plan = check(stack_name("qwen", candidate), base, candidate, sent.load)
    assert not isinstance(plan, str)
    simulated, ceiling = _timed_under_ceiling(
        plan, sent, parse_slo("tpot_p99_ms=30"), cluster_gpus(cfg)
    )
    assert 0 < simulated <= ceiling <= 1.6 * simulated, (simulated, ceiling)


def test_a_decode_worker_rate_is_its_best_steady_batch() -> None:
    """Without prompts to compute, a decode worker's rate under a TPOT bound is at least that
    of the largest batch whose step meets the bound (a schedule the worker can keep) and within
    the grid's resolution of it."""
    plan = NEBIUS_QWEN3_32B.plan("disaggregated")
    step = next(w.step for w in run_topology(plan).workers if w.role == "decode")
    limits = InterToken((0.03,))
    steady = max(
        b / d for b in range(1, 2048) if (d := step.host_s + step.gpu_s(0, [4000] * b)) <= 0.03
    )
    rate = decode_rate(step, 4000, limits, None)
    assert steady <= rate <= 1.1 * steady


def test_an_aggregated_worker_rate_pays_for_its_prompts() -> None:
    """An aggregated worker computes 8 prompt tokens for each output token: its rate is at
    least that of the steady schedule of b decoding requests and 8 b prompt tokens a step
    within the bound, and below its rate without prompts."""
    step = next(w.step for w in run_topology(NEBIUS_QWEN3_32B.plan("aggregated")).workers)
    limits = InterToken((0.03,))
    steady = max(
        b / d for b in range(1, 256) if (d := step.host_s + step.gpu_s(8 * b, [4000] * b)) <= 0.03
    )
    rate = decode_rate(step, 4000, limits, 8.0)
    assert steady <= rate < 0.8 * decode_rate(step, 4000, limits, None)


def test_seed_itl_ceiling_is_above_the_simulation() -> None:
    """The seed's consumer GPUs (the roofline, GPUs shared by time-slicing) under an ITL p90
    and a TPOT bound: every candidate's goodput at every load that holds is under its ceiling."""
    base, cfg = project_values(stack_config("kv-routing")[0]), load_stack("kv-routing").cfg
    load = LoadConfig(prefix_kinds=[2], requests_per_run=24, max_tokens=24)
    sent, slo = Workload(load), parse_slo("itl_p90_ms=40,tpot_p99_ms=60")
    space = [c for c in candidates(cfg) if c.router == "kv" and c.kv_events][:6]
    checked = 0
    for candidate in space:
        plan = check(stack_name("kv-routing", candidate), base, candidate, load)
        if isinstance(plan, str):
            continue
        timed = time_candidate(plan, load, slo, cluster_gpus(cfg), sent)
        if timed.best is None:
            continue
        ceiling = decode_ceiling(
            plan, sent.best_case(), sent.longest_output_tokens, slo
        ) / cluster_gpus(cfg)
        for figures in (*timed.steady, timed.best):
            assert figures.goodput_tokens_per_s_per_gpu <= ceiling, candidate.label()
        checked += 1
    assert checked >= 3


def _runs(results: list[Result]) -> int:
    return sum(r.runs for r in results)


def test_the_decode_ceiling_screens_qwen_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the one-node aggregated and disaggregated Qwen3-32B candidates, the decode ceiling
    leaves candidates untimed (counted in runs, not time), each with its ceiling in the
    reason; rank 1 and every timed candidate's figures are those of the search without it."""
    base, cfg, sent, space = _qwen()
    picked = [
        c
        for c in space
        if all(g.node_class == "node-0" for g in c.groups)
        and c.label().startswith(
            ("8 x TP1 aggregated", "7 x TP1 prefill on node-0 + 1", "6 x TP1 prefill on node-0 + 2")
        )
    ]
    problem = Problem("qwen", base, cfg, sent.load, parse_slo("tpot_p99_ms=30"), sent)
    bounded = search(problem, picked)
    with monkeypatch.context() as m:
        m.setattr(search_module, "decode_ceiling", lambda *_: float("inf"))
        m.setattr(search_module, "kv_read_ceiling", lambda *_: float("inf"))
        m.setattr(search_module, "first_load", lambda *_: None)
        full = search(problem, picked)
    first = next(r for r in full if r.rank == 1)
    assert next(r for r in bounded if r.rank == 1).candidate == first.candidate
    by_key = {r.candidate.key: r for r in full}
    skipped = [r for r in bounded if r.ceiling_limit == "decode" and r.status == "screened"]
    assert skipped and all("decode ceiling" in r.reason for r in skipped)
    for r in bounded:
        whole = by_key[r.candidate.key]
        if r.status == "ranked":
            assert r.best == whole.best
        elif r in skipped:
            assert whole.value is not None and r.ceiling_value is not None
            assert whole.value <= r.ceiling_value and whole.rank != 1
    assert _runs(bounded) < _runs(full)
