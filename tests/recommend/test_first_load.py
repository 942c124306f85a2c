"""The first load and the KV-read ceiling on a decode-heavy search of the seed's cluster
(1,024-token outputs): the full search's answers, the same with ``--jobs``, and what plan.md
measures timed after."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from search_answers import same_answers

import recommend.search as search_module
from recommend.claims import first_ranked, reason_line
from recommend.outputs import Inputs, ab_partner, candidate_row, plan_text
from recommend.resume import TimedStore
from recommend.run import timed_for_plan
from recommend.search import Figures, Problem, Result, search
from recommend.space import Candidate, candidates
from stackmodel.config import project_values
from stackmodel.stacks import load_stack, stack_config
from workload.config import LoadConfig
from workload.slo import parse_slo

SLO = parse_slo("ttft_p99_ms=1000")
LONG_OUTPUT = LoadConfig(prefix_kinds=[2], requests_per_run=32, prompt_tokens=128, max_tokens=1024)
# c005 (one worker on each GPU) ranks first; c015 is timed under every screen; c000 and c039
# decode on one GPU (their KV-read ceiling is below c005's figure); c080 and c113 (host
# buffers, one GPU decoding) fail TTFT below the clients they would need
KEYS = {"c005", "c015", "c000", "c039", "c080", "c113"}


def _long_output_problem() -> tuple[Problem, list[Candidate]]:
    base, cfg = project_values(stack_config("kv-routing")[0]), load_stack("kv-routing").cfg
    space = [c for c in candidates(cfg) if c.key in KEYS]
    return Problem("kv-routing", base, cfg, LONG_OUTPUT, SLO), space


def _seen(results: list[Result]) -> list[tuple[Any, ...]]:
    return [
        (r.candidate.key, r.status, r.rank, r.runs, r.best, r.over, r.reason, r.first_load)
        for r in results
    ]


def test_the_kv_read_and_first_load_screens_give_the_full_search_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On 1,024-token outputs: the KV-read ceiling screens the candidates decoding on one GPU,
    and (that ceiling left out) the first load stops the load search of those that fail TTFT
    below the clients they would need, in fewer runs; rank 1 and every timed candidate's
    figures are the full search's, and each candidate screened ranks below rank 1 there, its
    answer below its first load."""
    problem, space = _long_output_problem()
    screened = search(problem, space)
    with monkeypatch.context() as m:
        m.setattr(search_module, "kv_read_ceiling", lambda *_: math.inf)
        first_only = search(problem, space)
        m.setattr(search_module, "first_load", lambda *_: None)
        full = search(problem, space)
    whole = {r.candidate.key: r for r in full}
    by_kv = {r.candidate.key for r in screened if r.ceiling_limit == "KV reads" and r.reason}
    assert by_kv == {"c000", "c039", "c080", "c113"}
    stopped = [r for r in first_only if r.reason.startswith("cannot rank first: ")]
    assert {r.candidate.key for r in stopped} == {"c080", "c113"}
    for r in stopped:
        assert r.status == "screened" and r.first_load is not None and r.over is not None
        assert r.over.concurrency <= r.first_load and "TTFT p99 binds at" in r.reason
        full_r = whole[r.candidate.key]
        assert full_r.best is not None and full_r.best.concurrency < r.first_load
        assert 0 < r.runs < full_r.runs and full_r.rank != 1
    first = next(r for r in full if r.rank == 1)
    assert first.candidate.key == "c005" and first.value is not None
    assert all(whole[r.candidate.key].value < first.value for r in stopped)  # type: ignore[operator]
    same_answers(full, screened)
    same_answers(full, first_only)


def test_timing_ahead_with_first_loads_gives_the_same_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``jobs`` 2 under the first-load screen: a candidate timed ahead before rank 1 was known
    (no first load then) is timed again with its first load, so each result is one process's."""
    problem, space = _long_output_problem()
    space = [c for c in space if c.key in ("c005", "c080", "c113")]  # c080 timed beside c005
    monkeypatch.setattr(search_module, "kv_read_ceiling", lambda *_: math.inf)
    one = search(problem, space)
    assert [r.candidate.key for r in one if r.reason.startswith("cannot rank first")] == [
        "c080",
        "c113",
    ]
    assert _seen(search(problem, space, jobs=2)) == _seen(one)


def test_what_plan_md_measures_is_timed_where_a_bound_left_it_untimed(tmp_path: Path) -> None:
    """Every disaggregated candidate left untimed by a bound, the first of them by ceiling
    (then key) is timed for plan.md's A / B, kept for ``--resume``, and ranks below rank 1;
    rank 1 and the other figures stay. plan.md says how many of its kind were left untimed;
    candidates.json gives each candidate's ceiling; a KV-read screen gives its KV path
    beside its reason, not as its cause; rank 1, holding at the load cap, reads so."""
    problem, space = _long_output_problem()
    results = search(problem, space)
    assert not any(r.rank and r.candidate.disaggregated for r in results)
    said: list[str] = []
    store = TimedStore(tmp_path, {"case": "long"}, resume=False)
    after = timed_for_plan(problem, results, said.append, store=store)
    assert said == [
        "timing c039 for plan.md's A / B (rank 1 against a disaggregated candidate): a bound "
        "left it untimed"
    ]
    assert store.get("c039") is not None and store.get("c039")["status"] == "ranked"  # type: ignore[index]
    first = first_ranked(after)
    assert first is not None and first.candidate.key == "c005"
    partner = ab_partner(after, first)
    assert partner is not None and partner.candidate.key == "c039" and partner.rank == 3
    before = {r.candidate.key: r.best for r in results if r.rank}
    assert {r.candidate.key: r.best for r in after if r.rank and r is not partner} == before
    assert timed_for_plan(problem, after, said.append) == after and len(said) == 1
    inputs = Inputs("kv-routing", LONG_OUTPUT, SLO, "goodput-per-gpu", 1.25, 2, "m")
    assert (
        "Rank 3, the best disaggregated candidate timed that holds the SLO (2 more "
        "disaggregated the bounds left untimed: none of them can rank first), reads 0.54x"
    ) in plan_text(inputs, after, first)
    by_key = {r.candidate.key: r for r in after}
    row = candidate_row(by_key["c080"], first, inputs)
    assert row["ceiling"] == {"limit": "KV reads", "tokensPerSPerGpu": by_key["c080"].ceiling_value}
    assert "its KV-read ceiling" in row["line"] and "margin 1.25: each" not in row["line"]
    assert "; its KV path besides: each request pays at least ~" in row["line"]
    assert reason_line(first, first).startswith(
        "rank 1: holds 512 clients, the load cap (256 clients per cluster GPU): the SLO still "
        "has room there, TTFT p99 "
    )


def test_a_timing_with_another_first_load_is_taken_only_where_it_tells_the_same() -> None:
    """A timing done with no first load (or a lower one) is the one a first load of ``f``
    gives where no load at or below ``f`` failed in it; one that found such a load failing,
    or was stopped by its own first load, is not (None: timed again)."""

    def at(clients: int) -> Figures:
        return Figures(clients, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, {})

    held = Result(Candidate(groups=()), "ranked", 2, runs=9, best=at(40), over=at(41))
    assert search_module.rebased(held, None) is held
    moved = search_module.rebased(held, 40)
    assert moved is not None and moved.first_load == 40 and moved.best == held.best
    assert moved.runs == 9 and held.first_load is None
    assert search_module.rebased(held, 41) is None
    capped = Result(Candidate(groups=()), "ranked", 2, runs=9, best=at(512))
    assert search_module.rebased(capped, 600) is not None
    stopped = Result(Candidate(groups=()), "screened", 2, runs=3, over=at(8), first_load=20)
    assert search_module.rebased(stopped, 20) is stopped
    assert search_module.rebased(stopped, 30) is None and search_module.rebased(None, 5) is None
