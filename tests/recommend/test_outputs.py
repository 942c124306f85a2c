"""`pareto.png` and `report.html` of `testbed recommend`, tested on the figure's data
(:func:`recommend.outputs.chart_data`), not its pixels: every SLO bound drawn, the margin band
under rank 1."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import pytest

from recommend.bounds import Bounds
from recommend.claims import gpus_text, kv_path, ratio, reason_line, verdict
from recommend.outputs import (
    PARETO_PNG,
    REPORT_HTML,
    ChartData,
    Inputs,
    SloLine,
    ab_partner,
    chart_data,
    emitted_name,
    plan_text,
    prerequisites,
    shown_line,
    stack_header,
    validation_summary,
    write_report,
)
from recommend.search import Figures, Objective, Result, rank_results
from recommend.space import HOST_TCP, Candidate, GroupShape
from recommend.validate import Validation
from workload.config import LoadConfig
from workload.slo import parse_slo


def _result(key: str, rank: int, goodput: float, per_user: float, **values: float) -> Result:
    disaggregated = key.startswith("d")
    groups = (
        (GroupShape("prefill", "gpu-24gb", 1), GroupShape("decode", "gpu-24gb", 1))
        if disaggregated
        else (GroupShape("aggregated", "gpu-24gb", 1),)
    )
    candidate = Candidate(groups, transport=HOST_TCP if disaggregated else None, key=key)
    best = Figures(
        concurrency=8,
        goodput_tokens_per_s_per_gpu=goodput,
        tokens_per_s_per_gpu=goodput + 10,
        tokens_per_s_per_user=per_user,
        requests_per_s=1.0,
        cached_ratio=0.5,
        attainment=1.0,
        values_ms=dict(values),
    )
    return Result(candidate, "ranked", 2, best=best, value=goodput, rank=rank)


RESULTS = [
    _result("a1", 1, 100.0, 50.0, ttft_p99_ms=900.0, tpot_p99_ms=20.0),
    _result("d2", 2, 85.0, 60.0, ttft_p99_ms=400.0, tpot_p99_ms=19.0),
    _result("a3", 3, 40.0, 45.0, tpot_p99_ms=24.0),  # no TTFT p99: not on its panel
]


def _data(slo: str, objective: Objective = "goodput-per-gpu") -> ChartData:
    inputs = Inputs("kv-routing", LoadConfig(), parse_slo(slo), objective, 1.25, 2, "m")
    return chart_data(inputs, RESULTS, RESULTS[0])


def test_every_bound_is_a_line_and_the_margin_band_is_under_rank_1() -> None:
    data = _data("ttft_p99_ms=1000,tpot_p99_ms=25,e2e_p99_ms=5000")
    pareto, ttft, e2e = data.panels
    assert [(p.key, p.rank, p.disaggregated) for p in data.points] == [
        ("a1", 1, False),
        ("d2", 2, True),
        ("a3", 3, False),
    ]
    # The Pareto panel: per user on x, the objective (goodput) per GPU on y; the TPOT bound
    # as the per-user rate it sets (1000 / 25 ms = 40 tok/s).
    assert pareto.xy == {"a1": (50.0, 100.0), "d2": (60.0, 85.0), "a3": (45.0, 40.0)}
    assert pareto.lines == (
        SloLine("tpot_p99_ms", "x", 40.0, "TPOT p99 <= 25 ms: >= 40.0 tok/s per user"),
    )
    assert pareto.band == ("y", 80.0, 100.0)
    # A panel per TTFT or E2E bound: the p99 against the objective per GPU, the bound on y,
    # the band across x; a point without that p99 is left out.
    assert ttft.xy == {"a1": (100.0, 900.0), "d2": (85.0, 400.0)}
    assert ttft.lines == (SloLine("ttft_p99_ms", "y", 1000.0, "TTFT p99 <= 1,000 ms"),)
    assert ttft.band == ("x", 80.0, 100.0)
    assert e2e.xy == {} and e2e.lines[0].value == 5000.0
    # d2 (85) is within 1.25x of rank 1 (100): inside the band; a3 (40) is not.
    low, high = pareto.band[1:]
    assert [low <= p.per_gpu <= high for p in data.points] == [True, True, False]


def test_itl_and_tpot_are_both_per_user_lines_and_tokens_per_gpu_ranks_all_tokens() -> None:
    data = _data("itl_p99_ms=50,tpot_p99_ms=20", "tokens-per-gpu")
    (pareto,) = data.panels
    assert [(line.key, line.value) for line in pareto.lines] == [
        ("itl_p99_ms", 20.0),
        ("tpot_p99_ms", 50.0),
    ]
    assert pareto.y_label == "output tok/s per cluster GPU"
    assert pareto.xy["a1"] == (50.0, 110.0)
    assert pareto.band == ("y", pytest.approx(88.0), 110.0)


def test_the_report_names_each_line_and_the_band(tmp_path: Path) -> None:
    inputs = Inputs(
        "kv-routing",
        LoadConfig(),
        parse_slo("ttft_p99_ms=1000,tpot_p99_ms=25"),
        "goodput-per-gpu",
        1.25,
        2,
        "m",
    )
    write_report(tmp_path, inputs, RESULTS, RESULTS[0])
    page = (tmp_path / REPORT_HTML).read_text()
    assert (
        "TTFT p99 against tokens/s per cluster GPU: SLO TTFT p99 &lt;= 1,000 ms (horizontal" in page
    )
    assert "TPOT p99 &lt;= 25 ms: &gt;= 40.0 tok/s per user (vertical dashed line)" in page
    assert "shaded: 80 to 100 tok/s per cluster GPU, within the margin 1.25 of rank 1" in page
    assert (tmp_path / PARETO_PNG).read_bytes().startswith(b"\x89PNG")


def _pareto() -> tuple[list[Result], Inputs]:
    """a1 and d2 on the front (d2: fewer tok/s per GPU, more per user); a3 beaten on both by
    a1 though 0.87x of it, a5 by d2 only."""
    results = [
        _result("a1", 0, 100.0, 50.0, ttft_p99_ms=900.0),
        _result("d2", 0, 74.0, 70.0, ttft_p99_ms=400.0),
        _result("a3", 0, 87.0, 45.0, ttft_p99_ms=800.0),
        _result("a5", 0, 50.0, 65.0, ttft_p99_ms=700.0),
    ]
    rank_results(results, "pareto")
    results.sort(key=lambda r: r.rank or 0)
    inputs = Inputs(
        "kv-routing", LoadConfig(), parse_slo("ttft_p99_ms=1000"), "pareto", 1.25, 2, "m"
    )
    return results, inputs


def test_the_a_b_measures_rank_1_against_the_best_candidate_of_the_other_kind() -> None:
    """Rank 2 is aggregated like rank 1: plan.md's A / B measures rank 1 against rank 3, the
    best disaggregated candidate that holds, and says so; with no disaggregated candidate it
    measures rank 2 and says why; a disaggregated rank 1 meets the best aggregated one."""
    inputs = Inputs(
        "kv-routing", LoadConfig(), parse_slo("ttft_p99_ms=1000"), "goodput-per-gpu", 1.25, 2, "m"
    )
    a1, a2, d3 = (
        _result("a1", 1, 100.0, 50.0),
        _result("a2", 2, 95.0, 50.0),
        _result("d3", 3, 60.0, 50.0),
    )
    assert ab_partner([a1, a2, d3], a1) is d3
    plan = plan_text(inputs, [a1, a2, d3], a1)
    compare = f"compare out/load/{emitted_name(inputs, a1)} out/load/{emitted_name(inputs, d3)}"
    assert compare in plan
    assert (
        "Rank 3, the best disaggregated candidate that holds the SLO, reads 0.60x of rank 1 in "
        "the model: beyond the margin 1.25" in plan
    )
    alone = plan_text(inputs, [a1, a2], a1)
    assert f"out/load/{emitted_name(inputs, a2)}" in alone
    assert (
        "No disaggregated candidate holds the SLO, so the A / B measures rank 2; it reads 0.95x"
        in alone
    )
    d1, a2b = _result("d1", 1, 100.0, 50.0), _result("a2", 3, 70.0, 50.0)
    assert ab_partner([d1, _result("d2", 2, 99.0, 50.0), a2b], d1) is a2b


def test_a_verdict_says_at_which_loads_and_compares_at_one_both_held() -> None:
    """KV routing held 10 clients and round-robin 8, with the same figures at 8: the ratio
    (the objective, each at its own highest load) says both loads and the ratio at 8 clients,
    the highest load both were timed at and held."""
    assert RESULTS[0].best is not None
    at8 = replace(RESULTS[0].best, concurrency=8, goodput_tokens_per_s_per_gpu=61.0)
    kv = replace(
        RESULTS[0], steady=(at8, replace(at8, concurrency=10, goodput_tokens_per_s_per_gpu=100.0))
    )
    kv.best = kv.steady[-1]
    rr = replace(
        RESULTS[1],
        candidate=replace(RESULTS[0].candidate, key="a2"),
        value=61.0,
        steady=(at8,),
        best=at8,
    )
    line = reason_line(rr, kv, 1.25)
    assert line.startswith(
        "0.61x (at 8 clients against rank 1's 10 clients; at 8 clients, where both held, 1.00x):"
    )
    assert reason_line(kv, kv, 1.25).startswith("rank 1:")


def test_an_open_loop_verdict_compares_at_a_rate_both_held() -> None:
    """Open loops at 8 in flight: one held 12/s, the other 10/s, both held 5/s and 10/s: the
    ratio is taken at 10/s, the highest rate both held (every load has 8 in flight)."""
    assert RESULTS[0].best is not None
    at = [
        replace(RESULTS[0].best, concurrency=8, rate=r, goodput_tokens_per_s_per_gpu=g)
        for r, g in ((5.0, 30.0), (10.0, 60.0), (12.0, 70.0))
    ]
    first = replace(RESULTS[0], steady=tuple(at), best=at[2])
    other = replace(
        RESULTS[1],
        candidate=replace(RESULTS[0].candidate, key="a2"),
        value=40.0,
        steady=(at[0], replace(at[1], goodput_tokens_per_s_per_gpu=40.0)),
        best=replace(at[1], goodput_tokens_per_s_per_gpu=40.0),
    )
    assert reason_line(other, first, 1.25).startswith(
        "0.40x (at 10/s, <=8 against rank 1's 12/s, <=8; at 10/s, <=8, where both held, 0.67x):"
    )


def test_under_pareto_front_members_trade_and_the_rest_are_judged_by_who_beats_them() -> None:
    results, inputs = _pareto()
    first = results[0]
    assert [(r.candidate.key, r.rank) for r in results] == [
        ("a1", 1),
        ("d2", 2),
        ("a3", 3),
        ("a5", 4),
    ]
    assert [verdict(r, first, 1.25) for r in results] == [
        "rank 1",
        "on the Pareto front",
        "too close to call",
        "loses",
    ]
    assert [ratio(r, first) for r in results] == [1.0, 0.74, 0.87, pytest.approx(50 / 74)]
    lines = [reason_line(r, first, 1.25) for r in results]
    assert lines[1].startswith(
        "on the Pareto front: trades 0.74x rank 1's tok/s per cluster GPU for 1.40x its tok/s "
        "per user:"
    )
    assert lines[2].startswith("0.87x of a1 (on the front, ahead on both) (too close to call")
    assert lines[3].startswith("0.68x of d2 (on the front, ahead on both):")
    plan = plan_text(inputs, results, first)
    assert (
        "Rank 2, the best disaggregated candidate that holds the SLO, is on the Pareto front "
        "beside rank 1: it trades 0.74x rank 1's tok/s per cluster GPU "
        "for 1.40x its tok/s per user, so neither beats the other on both" in plan
    )
    assert "the comparison confirms" not in plan


def test_the_kv_path_line_says_it_is_the_best_case() -> None:
    """The bounds time a request whose shared prefix is cached (recommend/bounds.py), so the
    why-line says "at least" and names that case, with the prefix's tokens, not a typical
    request's cost."""
    d2 = _result("d2", 2, 40.0, 60.0, ttft_p99_ms=900.0)
    d2.bounds = Bounds(
        20.0, 5.0, 100.0, "link", prefill_ms=12.4, copies_ms=0.0, link_ms=17.4, cached_tokens=2128
    )
    assert kv_path(d2) == (
        "each request pays at least ~17 ms on the link, its prefill at least 12 ms (the best "
        "case: its 2,128-token shared prefix cached)"
    )
    assert reason_line(d2, RESULTS[0]).endswith(kv_path(d2))


def test_the_kv_path_line_agrees_with_a_workload_without_a_shared_prefix() -> None:
    """With ``prefixShare: 0`` nothing is cached: the line names the shortest prompt, not a
    cached prefix; a sub-millisecond prefill reads as such, never "0 ms"."""
    d2 = _result("d2", 2, 40.0, 60.0, ttft_p99_ms=900.0)
    d2.bounds = Bounds(20.0, 5.0, 100.0, "link", prefill_ms=0.42, copies_ms=3.14, link_ms=7.4)
    assert kv_path(d2) == (
        "each request pays at least ~3.1 ms of host copies and ~7.4 ms on the link, its prefill "
        "at least 0.42 ms (the best case: its shortest prompt, no prefix shared)"
    )
    assert "cached" not in reason_line(d2, RESULTS[0])


def _missing(attainment: float, tokens: float, goodput: float, **missed: float) -> Result:
    """An aggregated candidate of 3 workers whose requests miss the SLO on their own."""
    result = _result("a2", 2, goodput, 50.0, itl_p99_ms=40.0)
    assert result.best is not None
    result.candidate = Candidate((GroupShape("aggregated", "gpu-24gb", 3, per_gpu=3),), key="a2")
    result.best = replace(
        result.best,
        attainment=attainment,
        tokens_per_s_per_gpu=tokens,
        goodput_tokens_per_s_per_gpu=goodput,
        missed_by=dict(missed),
    )
    result.binding = "ITL p99"
    return result


def test_the_why_line_names_requests_missing_the_slo_with_goodput_and_raw_figures() -> None:
    """27% of a2's requests miss ITL on their own: its goodput (88) is 0.73 of its raw output
    (120, 1.09x rank 1's 110): the line names that share, the objective and both figures, not
    its 3 workers against rank 1's 1; ranked by all tokens (``tokens-per-gpu``) the misses cost
    nothing, and the workers are what differs."""
    first = RESULTS[0]  # attainment 1.0, 110 output / 100 goodput tok/s per GPU
    a2 = _missing(0.73, 120.0, 88.0, itl_p99_ms=0.27, ttft_p99_ms=0.02)
    assert reason_line(a2, first, 1.25) == (
        "0.88x (too close to call: within the margin 1.25): ITL p99 binds at 8 clients: 27% of "
        "its requests miss the SLO on their own (ITL p99: 27%) against rank 1's 0%: goodput 88 "
        "of 120 output tok/s per cluster GPU (raw 1.09x rank 1's)"
    )
    by_tokens = reason_line(a2, first, 1.25, "tokens-per-gpu")
    assert by_tokens.endswith(": 3 workers against rank 1's 1")


def _validation(key: str, ttft: float, holds: bool) -> Validation:
    return Validation(key, 8, holds, {"ttft_p99_ms": ttft}, {"ttft_p99_ms": 900.0}, 95.0, 100.0)


def test_a_real_routing_miss_of_rank_1_shows_wherever_rank_1_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--validate-top found rank 1 over the SLO with the real routing and rank 2 within it:
    the table, report.html, plan.md and the stack header each say so beside the model's line;
    the ranking stays the model's."""
    from testbed.recommend_command import _print_table

    inputs = Inputs(
        "kv-routing", LoadConfig(), parse_slo("ttft_p99_ms=1000"), "goodput-per-gpu", 1.25, 2, "m"
    )
    validations = {"a1": _validation("a1", 1019.4, False), "d2": _validation("d2", 700.0, True)}
    first = RESULTS[0]
    missed = "real routing: SLO missed (TTFT p99 1,019 ms > 1,000 ms); model: rank 1: "
    assert shown_line(first, first, inputs, validations).startswith(missed)
    assert shown_line(RESULTS[1], first, inputs, validations).startswith(
        "real routing: SLO holds; model: 0.85x"
    )
    assert shown_line(RESULTS[2], first, inputs, validations) == (
        reason_line(RESULTS[2], first) + "; stand-in timing, not validated: on the 2 validated "
        "the real routing moved TTFT p99 -22% to +13%"
    )
    summary = (
        "Rank 1 (a1) misses the SLO with the real Dynamo routing at the load found (TTFT p99 "
        "1,019 ms > 1,000 ms); rank 2 (d2) holds it, the best-ranked validated candidate that "
        "does. The ranking is the model's"
    )
    plan = plan_text(inputs, RESULTS, first, validations=validations)
    assert f"**{summary}" in plan
    # its title points at its own steps, not at plan.md (the file it is)
    assert plan.splitlines()[0].endswith("confirm on the cluster (the steps below))")
    assert (
        "With the real Dynamo routing (`--validate-top`): rank 1 (a1): real routing: SLO missed "
        "(TTFT p99 1,019 ms > 1,000 ms); rank 2 (d2): real routing: SLO holds." in plan
    )
    write_report(tmp_path, inputs, RESULTS, first, validations)
    page = (tmp_path / REPORT_HTML).read_text()
    assert html.escape(summary) in page and html.escape(missed) in page
    header = stack_header(first, first, inputs, validations)
    assert f"# {missed}" in header
    assert "# a1 at 8 clients with the real Dynamo routing: SLO does not hold" in header
    _print_table(RESULTS, first, inputs, 10, validations)
    printed = " ".join(capsys.readouterr().out.split())
    assert "real routing: SLO missed" in printed
    # the rows not validated carry their reason alone; what their figures are is said once
    assert printed.count("stand-in timing, not validated") == 1
    assert "The rows not validated: stand-in timing, not validated: on the 2" in printed
    assert validation_summary(RESULTS, first, inputs, {"d2": validations["d2"]}) == ""


def test_crowded_labels_stand_apart_and_the_legend_names_only_kinds_present() -> None:
    """Three top points within a few tok/s of one another (c005, c007, c006, as a seed search
    puts them): each label one step above the one before; no disaggregated candidate, no
    disaggregated legend entry; both axes from 0."""
    close = [
        _result("c005", 1, 2486.0, 41.0, ttft_p99_ms=794.0),
        _result("c007", 2, 2482.0, 41.2, ttft_p99_ms=858.0),
        _result("c006", 3, 2475.0, 40.9, ttft_p99_ms=839.0),
        _result("c001", 4, 1200.0, 60.0, ttft_p99_ms=300.0),
    ]
    inputs = Inputs(
        "kv-routing", LoadConfig(), parse_slo("ttft_p99_ms=1000"), "goodput-per-gpu", 1.25, 2, "m"
    )
    data = chart_data(inputs, close, close[0])
    pareto, ttft = data.panels
    top = (41.2, 2486.0)  # the three's top right: their labels stack from there
    assert [(label.text, label.anchor, label.offset) for label in pareto.labels] == [
        ("#1 c005", top, (6.0, 6.0)),
        ("#2 c007", top, (6.0, 18.0)),
        ("#3 c006", top, (6.0, 30.0)),
    ]
    assert {label.anchor for label in ttft.labels} == {(2486.0, 858.0)}
    assert pareto.limits == pytest.approx((66.0, 2486.0 * 1.2))
    assert ttft.limits == pytest.approx((2486.0 * 1.1, 1200.0))
    assert data.kinds == ("aggregated",) and data.note == ""
    assert chart_data(inputs, RESULTS, RESULTS[0]).kinds == ("aggregated", "disaggregated")


def test_no_candidate_is_a_note_on_axes_from_0(tmp_path: Path) -> None:
    """Nothing met the SLO: no points, no legend kinds, the note says so, and the axes run
    from 0 to past the SLO's lines (not into negatives)."""
    inputs = Inputs(
        "kv-routing",
        LoadConfig(),
        parse_slo("ttft_p99_ms=20,tpot_p99_ms=25"),
        "goodput-per-gpu",
        1.25,
        2,
        "m",
    )
    data = chart_data(inputs, [], None)
    pareto, ttft = data.panels
    assert data.points == () and data.kinds == ()
    assert data.note == "no candidate met the SLO (TTFT p99 <= 20 ms, TPOT p99 <= 25 ms)"
    assert pareto.limits == pytest.approx((44.0, 1.0)) and ttft.limits == pytest.approx((1.0, 24.0))
    write_report(tmp_path, inputs, [], None)
    assert (tmp_path / PARETO_PNG).read_bytes().startswith(b"\x89PNG")


def test_an_objective_on_any_percentile_gets_its_panel_or_line() -> None:
    """p50, p90 and p95 objectives, as the registry defines them, are drawn as p99 ones are:
    a TTFT or E2E bound gets its own panel, an ITL or TPOT bound its per-user line."""
    results = [
        _result("a1", 1, 100.0, 50.0, ttft_p90_ms=700.0, e2e_p50_ms=3000.0, itl_p95_ms=15.0),
        _result("d2", 2, 85.0, 60.0, ttft_p90_ms=300.0, e2e_p50_ms=2500.0, itl_p95_ms=12.0),
    ]
    slo = parse_slo("ttft_p90_ms=800,itl_p95_ms=20,e2e_p50_ms=4000")
    inputs = Inputs("kv-routing", LoadConfig(), slo, "goodput-per-gpu", 1.25, 2, "m")
    pareto, ttft, e2e = chart_data(inputs, results, results[0]).panels
    assert pareto.lines == (
        SloLine("itl_p95_ms", "x", 50.0, "ITL p95 <= 20 ms: >= 50.0 tok/s per user"),
    )
    assert ttft.title == "TTFT p90 against tokens/s per cluster GPU"
    assert ttft.y_label == "TTFT p90 (ms) at the highest load meeting the SLO"
    assert ttft.xy == {"a1": (100.0, 700.0), "d2": (85.0, 300.0)}
    assert ttft.lines == (SloLine("ttft_p90_ms", "y", 800.0, "TTFT p90 <= 800 ms"),)
    assert e2e.title == "E2E p50 against tokens/s per cluster GPU"
    assert e2e.xy == {"a1": (100.0, 3000.0), "d2": (85.0, 2500.0)}


def test_under_capacity_a_runner_up_on_more_gpus_loses_on_gpus_and_lost_ranks_say_it_once() -> None:
    """Under the capacity question a runner-up on more GPUs loses on them, whatever its
    goodput: plan.md says so (not "beyond the margin" of a goodput ratio); one GPU is "1 GPU";
    a candidate the real routing took the rank from says the miss once."""
    inputs = Inputs(
        "kv-routing", LoadConfig(), parse_slo("ttft_p99_ms=1000"), "capacity", 1.25, 3, "m"
    )
    a1, d2 = _result("a1", 1, 100.0, 50.0), _result("d2", 2, 123.0, 50.0)
    for r, gpus in ((a1, 1), (d2, 2)):
        r.gpus, r.needed = gpus, 8.0
    plan = plan_text(inputs, [a1, d2], a1)
    assert (
        "holds the load too, on 2 GPUs against rank 1's 1: it loses on GPUs, whatever its "
        "goodput (1.23x of rank 1's in the model)" in " ".join(plan.split())
    )
    assert "beyond the margin" not in plan
    assert gpus_text(1) == "1 GPU" and gpus_text(3) == "3 GPUs"
    lost = _result("a3", 0, 90.0, 50.0)
    lost.status, lost.rank, lost.reason = "validation-failed", None, "real routing: SLO missed"
    line = shown_line(lost, a1, inputs, {"a3": _validation("a3", 1019.4, False)})
    assert line.count("real routing: SLO missed") == 1


def test_a_validation_line_names_its_figures_as_the_tables_do() -> None:
    """The console's validation line names each figure by its name (TTFT p99), not its key,
    and its goodput as what it is: over every GPU of the cluster, as the table's."""
    line = _validation("a1", 812.4, True).line()
    assert "TTFT p99 812 ms (stand-in 900 ms)" in line and "ttft_p99_ms" not in line
    assert " tok/s per cluster GPU (stand-in " in line and " per GPU" not in line


def test_under_capacity_the_figure_is_the_load_held_against_gpus_with_the_load_needed(
    tmp_path: Path,
) -> None:
    """Under the capacity question the figure shows what the answer is about: each candidate
    that held some load at that load against the GPUs it uses, the load needed (the stated 8
    clients x the headroom 1.2 = 10) and the stated load as lines, the cluster's GPUs as a
    vertical one; one short of the load is drawn where it stopped, unranked and unlabelled; a
    panel per SLO objective against the GPUs; no goodput band anywhere."""
    inputs = Inputs(
        "kv-routing",
        LoadConfig(concurrency=[4, 8]),
        parse_slo("ttft_p99_ms=1000,itl_p99_ms=40"),
        "capacity",
        1.25,
        3,
        "m",
    )
    a1 = _result("a1", 1, 100.0, 50.0, ttft_p99_ms=300.0, itl_p99_ms=20.0)
    d2 = _result("d2", 2, 123.0, 50.0, ttft_p99_ms=700.0, itl_p99_ms=25.0)
    s3 = _result("a3", 0, 90.0, 50.0, ttft_p99_ms=950.0, itl_p99_ms=30.0)
    a1.gpus, d2.gpus, s3.gpus = 1, 2, 1
    for r, clients in ((a1, 10), (d2, 10), (s3, 6)):
        assert r.best is not None
        r.best = replace(r.best, concurrency=clients)
    s3.status, s3.rank = "short-of-load", None
    refused = Result(Candidate((GroupShape("aggregated", "gpu-8gb", 1),), key="r4"), "refused")
    data = chart_data(inputs, [a1, d2, s3, refused], a1)
    load, ttft, itl = data.panels
    assert load.xy == {"a1": (1.0, 10.0), "d2": (2.0, 10.0), "a3": (1.0, 6.0)}
    assert load.lines == (
        SloLine(
            "needed", "y", 10.0, "the load needed: 10 clients (the stated load x the headroom 1.2)"
        ),
        SloLine("stated", "y", 8.0, "the workload's stated load: 8 clients"),
        SloLine("cluster", "x", 3, "the cluster's 3 GPUs"),
    )
    assert [label.text for label in load.labels] == ["#1 a1", "#2 d2"]
    assert ttft.xy == {"a1": (1.0, 300.0), "d2": (2.0, 700.0), "a3": (1.0, 950.0)}
    assert ttft.lines == (SloLine("ttft_p99_ms", "y", 1000.0, "TTFT p99 <= 1,000 ms"),)
    assert itl.title == "ITL p99 against GPUs used" and itl.xy["d2"] == (2.0, 25.0)
    assert [p.band for p in data.panels] == [None, None, None]
    assert load.limits == pytest.approx((3.3, 12.0))
    write_report(tmp_path, inputs, [a1, d2, s3], a1)
    page = (tmp_path / REPORT_HTML).read_text()
    assert "the load needed: 10 clients (the stated load x the headroom 1.2) (horizontal" in page
    assert "shaded" not in page


def test_an_unvalidated_itl_claim_says_it_is_the_stand_ins_and_how_far_validation_moved() -> None:
    """Rank 1 validated with ITL p99 13.8 ms against the stand-in's 7.6: its line gives the
    move; a candidate the validation did not run says its figures are the stand-in's, not
    validated, with the move the validated one saw (ITL p99 +82%), so "ITL binds at 20" of an
    L4 candidate never reads as validated; with no validation it still says not validated."""
    inputs = Inputs(
        "kv-routing",
        LoadConfig(),
        parse_slo("ttft_p99_ms=600,itl_p99_ms=30"),
        "goodput-per-gpu",
        1.25,
        3,
        "m",
    )
    first = _result("a1", 1, 100.0, 50.0, ttft_p99_ms=142.6, itl_p99_ms=7.57)
    done = Validation(
        "a1",
        8,
        True,
        {"ttft_p99_ms": 163.6, "itl_p99_ms": 13.78},
        {"ttft_p99_ms": 142.6, "itl_p99_ms": 7.57},
        95.0,
        100.0,
    )
    line = shown_line(first, first, inputs, {"a1": done})
    assert line.endswith(
        "; real routing moved TTFT p99 143 -> 164 ms (+15%), ITL p99 8 -> 14 ms (+82%)"
    )
    other = _result("a2", 2, 90.0, 50.0, itl_p99_ms=26.2)
    assert shown_line(other, first, inputs, {"a1": done}).endswith(
        "; stand-in timing, not validated: on the 1 validated the real routing moved TTFT p99 "
        "+15%, ITL p99 +82%"
    )
    assert shown_line(other, first, inputs, {}).endswith("; stand-in timing, not validated")


def test_plan_md_starts_with_what_the_cluster_must_have_each_with_its_check() -> None:
    """A cluster file of two one-node classes selected by hostname, the second time-sliced 2
    a GPU: plan.md opens with the platform stack the graph stacks read and, per class, its
    node and the nvidia.com/gpu it must advertise (gpusPerNode x replicasPerGpu), each with
    the command that checks it; a hostname is not a label to set by hand."""
    import yaml

    from stackmodel.config import NodeClass, project_values
    from stackmodel.stacks import stack_config
    from stackmodel.validation import validate_stack

    lab = yaml.safe_load(
        "big: {nodeSelector: {kubernetes.io/hostname: box-a}, gpu: rtx-4090, gpuMemoryGiB: 24,"
        " gpusPerNode: 2}\n"
        "small: {nodeSelector: {pool: l4}, gpu: l4, gpuMemoryGiB: 24,"
        " timeSlicing: {replicasPerGpu: 2}}\n"
    )
    seed = validate_stack("kv-routing", project_values(stack_config("kv-routing")[0])).cfg
    classes = {name: NodeClass.model_validate(v) for name, v in lab.items()}
    cfg = seed.model_copy(update={"node_classes": classes})
    said = prerequisites(cfg)
    columns = "'custom-columns=NODE:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu'"
    assert said == (
        "The Dynamo platform (operator, CRDs), once per cluster: the stacks read it from the "
        "stack `platform`. Check that `pulumi stack output -s platform` lists its outputs; if "
        "not, `pulumi stack init platform && pulumi up -s platform` (an operator installed by "
        "hand: `platform.install: false` in `stacks/Pulumi.platform.yaml` first).",
        "Node class `big`: 1 node labelled `kubernetes.io/hostname=box-a` advertising 2 "
        "`nvidia.com/gpu` through the NVIDIA device plugin. Check: `kubectl get nodes -l "
        f"kubernetes.io/hostname=box-a -o {columns}`.",
        "Node class `small`: 1 node labelled `pool=l4` advertising 2 `nvidia.com/gpu` through "
        "the NVIDIA device plugin (1 GPU x replicasPerGpu 2: its time-slicing config, "
        "`sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}`). Check: "
        f"`kubectl get nodes -l pool=l4 -o {columns}`; label a node with `kubectl label node "
        "<node> pool=l4`.",
    )
    inputs = Inputs(
        "kv-routing",
        LoadConfig(),
        parse_slo("ttft_p99_ms=1000"),
        "capacity",
        1.25,
        3,
        "m",
        prerequisites=said,
    )
    a1 = _result("a1", 1, 100.0, 50.0)
    plan = plan_text(inputs, [a1], a1).splitlines()
    assert plan[2].startswith("Before you start (skip what the cluster already has;")
    assert plan[4:7] == [f"- {line}" for line in said]
    assert plan[8].startswith("Rank 1: ")
    standalone = cfg.model_copy(update={"stack_role": "standalone"})
    assert [line.split(":")[0] for line in prerequisites(standalone)] == [
        "Node class `big`",
        "Node class `small`",
    ]
