"""The load search of `testbed recommend`: a run's requests as loadgen sends them, and the
highest load meeting the SLO found to within the search's resolution (cheap: the seed's
kv-routing stack under a short workload)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from measurement.goodput import evaluate_point, evaluate_run
from measurement.record import RequestRecord
from measurement.stats import Latencies, summarize_run
from recommend.bounds import ms_text
from recommend.claims import DEFAULT_MARGIN
from recommend.load_search import (
    CLIENTS_PER_GPU,
    RESOLUTION,
    SATURATION,
    Axis,
    Found,
    KindsPoint,
    LoadPoint,
    LoadRunner,
    Saturation,
    highest_load,
    ladder,
    measured_run,
    required_load,
)
from recommend.search import Result, saturated_line, saturation_text, time_candidate, unsteady_text
from recommend.space import Candidate
from recommend.workload import Workload
from simulator.hardware import run_topology, stack_constants
from simulator.records import timing_records
from simulator.timing_model import simulate_run
from stackmodel.stacks import REPO, load_stack
from workload.config import Arrival, LoadConfig
from workload.slo import Slo, parse_slo

SHORT = LoadConfig(prefix_kinds=[2], requests_per_run=40, max_tokens=16)


def test_a_run_is_its_warm_up_then_the_measured_requests() -> None:
    """One warm-up request per client (loadgen's default), shaped as the measured ones on
    prefixes of their own; then the workload's requests, at least 2 per client."""
    requests = Workload(SHORT).closed(2, 24)
    warmup = SHORT.warmup_count(24)
    assert warmup == 24 and len(requests) == 24 + 48
    warm, measured = requests[:warmup], requests[warmup:]
    assert {r.prefix_id for r in warm} == {2, 3}
    assert {r.prefix_id for r in measured} == {0, 1}
    assert {
        (r.prefix_tokens, r.prompt_tokens, r.cached_tokens, r.output_tokens) for r in requests
    } == {(2_134, 2_371, 0, 16)}
    assert [r.index for r in requests] == list(range(72))
    assert len(Workload(SHORT).closed(2, 4)) == 4 + 40
    none = SHORT.model_copy(update={"warmup_requests": 0})
    assert len(Workload(none).closed(2, 4)) == 40


@pytest.mark.parametrize(
    ("per_client", "clients", "warmup", "measured"),
    [(4, 24, None, 96), (4, 8, None, 40), (10, 24, 10, 240), (1, 24, 0, 40)],
)
def test_a_run_sends_its_requests_per_client_after_the_workloads_warm_up(
    per_client: int, clients: int, warmup: int | None, measured: int
) -> None:
    """``--requests-per-client N``: N measured requests a client, or the workload's
    requestsPerRun where that is more, after the warm-up ``warmupRequests`` sets (one per
    client when unset); the load settings a measurement at that load sends carry the same."""
    load = SHORT.model_copy(update={"warmup_requests": warmup})
    sent = Workload(load, per_client=per_client)
    requests = sent.closed(2, clients)
    warm = clients if warmup is None else warmup
    assert len(requests) == warm + measured
    assert sent.requests_at(clients) == measured
    assert sent.load_at(clients).requests_per_run == measured
    assert sent.load_at(clients).warmup_requests == warmup
    plan = load_stack("kv-routing")
    slo = parse_slo("ttft_p99_ms=1000")
    runner = LoadRunner(run_topology(plan), stack_constants(plan), load, slo, 2, workload=sent)
    assert runner.run(2, clients).summary.requests == measured


@pytest.mark.parametrize(("ttft_ms", "above"), [(300, 32), (400, 64)])
def test_the_highest_load_is_found_to_within_the_resolution(ttft_ms: int, above: int) -> None:
    """The load found holds, the one above it fails, and they are at most 1/RESOLUTION of the
    load apart (one client below 2 x RESOLUTION clients): a few percent, well inside the
    margin a ratio claim must clear."""
    assert 1 / RESOLUTION <= (DEFAULT_MARGIN - 1) / 8
    plan = load_stack("kv-routing")
    slo = parse_slo(f"ttft_p99_ms={ttft_ms}")
    runner = LoadRunner(run_topology(plan), stack_constants(plan), SHORT, slo, 2)
    found = highest_load(runner, [2])
    best, over = found.best, found.over
    assert best is not None and over is not None
    assert best.holds and not over.holds
    assert above < best.concurrency < over.concurrency
    assert over.concurrency - best.concurrency <= max(1, best.concurrency // RESOLUTION)
    over_p99 = over.runs[0].point.values_ms["ttft_p99_ms"]
    best_p99 = best.runs[0].point.values_ms["ttft_p99_ms"]
    assert over_p99 is not None and best_p99 is not None
    assert over_p99 > ttft_ms >= best_p99


@functools.cache
def _one_run() -> KindsPoint:
    """One real run (1 client, 2 kinds) whose SLO point the fake runner's loads copy."""
    plan = load_stack("kv-routing")
    runner = LoadRunner(
        run_topology(plan), stack_constants(plan), SHORT, parse_slo("ttft_p99_ms=1000"), 1
    )
    return runner.run(2, 1)


@dataclass
class Pattern:
    """A fake runner: the SLO (:data:`SLO`) holds at the loads ``holds`` says (clients, or an
    open loop's requests/s; not a monotone pattern), with ``attainment`` and TTFT p99
    ``ttft_ms`` where it holds; it records the loads probed (each run, one a load: a single
    prefix-kinds value)."""

    holds: Callable[[float], bool]
    gpus: int = 1
    attainment: float = 0.51
    ttft_ms: float = 500.0
    probed: list[float] = field(default_factory=list)

    def at(self, concurrency: int, order: list[int], rate: float | None = None) -> LoadPoint:
        load = concurrency if rate is None else rate
        self.probed.append(load)
        base = _one_run()
        ok = self.holds(load)
        point = base.point.model_copy(
            update={
                "slo_met": ok,
                "attainment": self.attainment if ok else 0.3,
                "values_ms": {"ttft_p99_ms": self.ttft_ms if ok else 1_500.0},
            }
        )
        return LoadPoint(concurrency, (replace(base, point=point),), rate)


CLIENTS = Axis.clients(1)


def _load(point: LoadPoint) -> float:
    """The load ``point`` was timed at: an open loop's rate, else its clients."""
    return point.rate if point.rate is not None else float(point.concurrency)


SLO = parse_slo("ttft_p99_ms=1000")


def _steady(runner: Pattern, found: Found, axis: Axis = CLIENTS) -> None:
    """The answer holds, every load probed up to it held, the load one step below it was
    probed, the load reported failing fails and is above it; a load that held above that is
    reported with every failing load beneath it."""
    probed = set(runner.probed)
    assert len(probed) == len(runner.probed), "a load was timed twice"
    if found.best is not None:
        top = _load(found.best)
        assert runner.holds(top)
        assert all(runner.holds(c) for c in probed if c <= top)
        below = axis.below(top)
        assert below is None or (below in probed and runner.holds(below)), "a spike taken"
        assert [_load(p) for p in found.steady] == sorted(c for c in probed if c <= top)
    if found.over is not None:
        low = _load(found.over)
        assert not runner.holds(low)
        assert found.best is None or low > _load(found.best)
        assert low == min(c for c in probed if not runner.holds(c))
        held_above = [c for c in probed if c > low and runner.holds(c)]
        assert (found.unsteady is not None) == bool(held_above)
        if found.unsteady is not None:
            assert _load(found.unsteady) == max(held_above)
            assert found.failed_below == tuple(
                sorted(c for c in probed if c < max(held_above) and not runner.holds(c))
            )


@settings(max_examples=60, deadline=None)
@given(fails=st.sets(st.integers(1, 80), max_size=6), above=st.integers(2, 300))
def test_a_load_found_holds_with_every_load_probed_below_it(fails: set[int], above: int) -> None:
    """Over SLOs that fail at any few loads and from some load up: what the search reports
    holding, held at every load it probed below it; a load that held above a failing one is
    reported, never taken."""
    runner = Pattern(lambda c: c not in fails and c < above)
    found = highest_load(runner, [2])
    _steady(runner, found)
    assert found.best is None or found.best.concurrency < above


@settings(max_examples=80, deadline=None)
@given(
    fails=st.sets(st.integers(1, 80), max_size=6),
    above=st.integers(2, 300),
    first=st.integers(1, CLIENTS_PER_GPU),
)
def test_a_search_given_its_first_useful_load_stops_where_a_load_below_it_fails(
    fails: set[int], above: int, first: int
) -> None:
    """Given ``first``, the search is the one without it until a load at or below ``first``
    fails; then it stops there (``short_of``, ``over`` that load), the full search's answer
    below that load too. Where none
    fails it finds what it finds without ``first``, probing the same loads."""
    holds = lambda c: c not in fails and c < above  # noqa: E731
    plain = Pattern(holds)
    without = highest_load(plain, [2])
    runner = Pattern(holds)
    found = highest_load(runner, [2], first=first)
    assert runner.probed == plain.probed[: len(runner.probed)]
    failed = [c for c in runner.probed if not holds(c)]
    if not any(c <= first for c in failed):
        assert found == without and runner.probed == plain.probed
        return
    assert found.best is None and found.short_of == first and found.over is not None
    assert found.over.concurrency == min(failed) == runner.probed[-1] <= first
    assert without.best is None or without.best.concurrency < min(failed)


def test_a_first_load_above_the_axis_top_is_short_of_without_a_run() -> None:
    """More clients than the axis allows: the answer is below them, nothing timed."""
    runner = Pattern(lambda c: True)
    beyond = int(CLIENTS.top) + 1
    found = highest_load(runner, [2], first=beyond)
    assert runner.probed == [] and found == Found(None, None, short_of=beyond)


RATE_GAPS = st.lists(st.tuples(st.floats(0.01, 500.0), st.floats(0.001, 0.5)), max_size=4).map(
    lambda gaps: [(low, low * (1 + width)) for low, width in gaps]
)
"""Rates (requests/s) where the SLO fails: a few bands, each up to half its rate wide."""


@settings(max_examples=80, deadline=None)
@example(gaps=[(7.01, 7.1)], above=7.3, start=1.0, ceiling=100.0)  # a spike at 7.25/s
@given(
    gaps=RATE_GAPS,
    above=st.floats(0.05, 2_000.0),
    start=st.floats(0.1, 100.0),
    ceiling=st.floats(1.0, 5_000.0),
)
def test_a_rate_found_holds_with_every_rate_probed_below_it(
    gaps: list[tuple[float, float]], above: float, start: float, ceiling: float
) -> None:
    """The open loop's rate search under the same rule: over SLOs that fail in a few bands
    of rates and from some rate up, what it reports holding held at every rate it probed
    below it (one step below included), never above the ceiling; a rate that held above a
    failing one is reported with the rates that fail beneath it, never taken."""
    runner = Pattern(lambda r: r < above and not any(a <= r < b for a, b in gaps))
    axis = Axis.rates(8, start, ceiling)
    found = highest_load(runner, [2], axis)
    _steady(runner, found, axis)
    assert all(r <= axis.top for r in runner.probed)
    assert found.best is None or (found.best.rate or 0) < above
    assert all(p.concurrency == 8 for p in found.steady)


@settings(max_examples=80, deadline=None)
@given(
    fails=st.sets(st.integers(1, 40), max_size=4),
    above=st.integers(2, 60),
    required=st.integers(1, 40),
    ttft_ms=st.sampled_from([500.0, 900.0]),
)
def test_the_load_needed_holds_only_with_its_ladder(
    fails: set[int], above: int, required: int, ttft_ms: float
) -> None:
    """The capacity question: the load needed is reported held only when it and one step
    below it hold, and, where the SLO is near its bound there (TTFT p99 900 of 1,000 ms), half
    and a quarter of it too; else the search settles below the lowest that fails."""
    runner = Pattern(lambda c: c not in fails and c < above, ttft_ms=ttft_ms)
    found = required_load(runner, [2], required, CLIENTS, SLO)
    _steady(runner, found)
    held = found.best is not None and found.best.concurrency == required
    checked = ladder(required, CLIENTS)[: None if ttft_ms > 800 else 2]
    assert held == all(runner.holds(c) for c in checked)
    assert ladder(10, CLIENTS) == [10, 9, 5, 2]


@pytest.mark.parametrize(("ttft_ms", "timed"), [(500.0, [10, 9]), (900.0, [10, 9, 5, 2])])
def test_a_holding_candidate_times_the_ramp_only_near_the_bound(
    ttft_ms: float, timed: list[int]
) -> None:
    """10 clients needed, held at every load: with TTFT p99 at half its bound there, the
    search times 10 and 9 clients (2 runs); at 90% of it, also the ramp, 5 and 2 clients (4
    runs). Either way it holds the load needed, as it did when every candidate was timed at
    all four; an open loop's rate alike (20/s needed: 20 and 19.4/s)."""
    runner = Pattern(lambda c: True, ttft_ms=ttft_ms)
    found = required_load(runner, [2], 10, CLIENTS, SLO)
    assert runner.probed == timed
    assert found.best is not None and found.best.concurrency == 10 and found.over is None
    assert [p.concurrency for p in found.steady] == sorted(timed)
    rates = Pattern(lambda r: True, ttft_ms=ttft_ms)
    axis = Axis.rates(8, 20.0, 100.0)
    found = required_load(rates, [2], 20.0, axis, SLO)
    assert rates.probed == [20.0, 19.4, 10.0, 5.0][: len(timed)]
    assert found.best is not None and found.best.rate == 20.0
    # A ramp load that fails near the bound: the needed load is not held; the search settles
    # below the half that fails, reusing the loads timed (2 clients is not timed again).
    ramp = Pattern(lambda c: c not in (5, 4), ttft_ms=900.0)
    found = required_load(ramp, [2], 10, CLIENTS, SLO)
    assert found.best is not None and found.best.concurrency == 3
    assert ramp.probed == [10, 9, 5, 2, 3, 4] and found.unsteady is not None


def test_a_spike_above_failing_loads_is_reported_not_taken() -> None:
    """Fails at 7, 9 and from 11 clients, holds at 8 and 10: the search answers 6 clients
    and reports that the SLO held again at 10 with 51% of the requests meeting it, above 7
    and 9 clients that fail (the bisection alone would have landed on 10)."""
    runner = Pattern(lambda c: c not in (7, 9) and c < 11)
    found = highest_load(runner, [2])
    assert found.best is not None and found.over is not None and found.unsteady is not None
    assert (found.best.concurrency, found.over.concurrency) == (6, 7)
    assert found.unsteady.concurrency == 10 and found.failed_below == (7, 9)
    assert unsteady_text(found) == (
        "holds again at 10 clients (51% of its requests meet the SLO), above 7 and 9 clients "
        "that fail: not taken"
    )
    # The capacity question at 10 clients: 10 holds, so does 9's neighbour 5; 9 fails.
    needed = Pattern(lambda c: c != 9 and c < 11)
    found = required_load(needed, [2], 10, CLIENTS, SLO)
    assert found.best is not None and found.best.concurrency == 8
    assert found.unsteady is not None and found.unsteady.concurrency == 10


def test_a_rate_spike_above_a_failing_band_is_reported_not_taken() -> None:
    """An open loop from 1/s that fails from 7.3/s and between 7.01 and 7.1/s: the bisection
    lands on 7.25/s, whose step below (7.02/s) fails, so the answer is 7/s and 7.25/s is
    reported with the rate beneath it that fails."""
    runner = Pattern(lambda r: r < 7.3 and not 7.01 <= r < 7.1)
    axis = Axis.rates(8, 1.0, 100.0)
    found = highest_load(runner, [2], axis)
    assert found.best is not None and found.over is not None and found.unsteady is not None
    assert (found.best.rate, found.over.rate, found.unsteady.rate) == (7.0, 7.02, 7.25)
    assert found.failed_below == (7.02,)
    assert runner.probed == [1.0, 2.0, 4.0, 8.0, 6.0, 7.0, 7.5, 7.25, 7.38, 7.02, 6.78]
    assert unsteady_text(found) == (
        "holds again at 7.25/s, <=8 (51% of its requests meet the SLO), above 7.02/s that "
        "fail: not taken"
    )


def test_a_load_that_holds_at_the_cap_says_so_and_how_much_room_the_slo_has() -> None:
    """One GPU whose SLO holds at any load: the search stops at the cap, 256 clients a GPU,
    and its binding names the cap and the SLO's figure there against its bound."""
    found = highest_load(Pattern(lambda c: True), [2])
    assert found.best is not None and found.over is None
    assert found.best.concurrency == CLIENTS_PER_GPU == 256
    plan = load_stack("kv-routing")
    tiny = LoadConfig(prefix_kinds=[2], requests_per_run=1, max_tokens=2, prompt_tokens=64)
    result = time_candidate(plan, tiny, parse_slo("ttft_p99_ms=600000"), 1)
    assert result.best is not None and result.best.concurrency == 256
    value = result.best.values_ms["ttft_p99_ms"]
    assert value is not None
    assert result.binding == (
        f"load cap (256 clients per cluster GPU): the SLO still has room there, TTFT p99 "
        f"{ms_text(value)} of its 600,000 ms"
    )


@pytest.mark.parametrize(("concurrency", "rate"), [(1, None), (6, None), (24, None), (8, 6.0)])
def test_a_run_is_summarised_and_judged_from_latencies_computed_once(
    monkeypatch: pytest.MonkeyPatch, concurrency: int, rate: float | None
) -> None:
    """A search's run computes its latencies once for its summary and its SLO judgement, and
    both are what each gives computing its own, to the byte."""
    plan = load_stack("kv-routing")
    load = SHORT
    if rate is not None:
        load = SHORT.model_copy(update={"arrival": Arrival.POISSON, "request_rate": rate})
    slo = parse_slo("ttft_p99_ms=800,itl_p99_ms=40,e2e_p50_ms=2000")
    runner = LoadRunner(run_topology(plan), stack_constants(plan), load, slo, 2)
    computed: list[int] = []
    of = Latencies.of

    def counted(good: list[RequestRecord]) -> Latencies:
        computed.append(len(good))
        return of(good)

    monkeypatch.setattr(Latencies, "of", counted)
    point = runner.run(2, concurrency, rate)
    assert len(computed) == 1
    monkeypatch.undo()
    sent = runner.sent
    records, _ = measured_run(runner.topology, runner.constants, sent, 2, concurrency, rate)
    alone = summarize_run(
        records, prefix_kinds=2, concurrency=concurrency, repetition=0, offered_rate_per_s=rate
    )
    assert point.summary.model_dump_json() == alone.model_dump_json()
    judged = evaluate_run(records, slo, concurrency=concurrency, closed=rate is None)
    assert point.point == evaluate_point([judged], slo, gpus=2)


@dataclass
class Saturating:
    """A fake runner whose engines serve ``knee`` clients at a time: output tokens/s grow with
    the clients up to ``knee`` (100 tok/s a client) and stay there; TPOT p99 is 20 ms plus
    ``tpot_growth`` ms a client above the knee; TTFT p99 and E2E p90 are 100 and 5,000 ms
    plus ``queue_ms`` a client above the knee (a queue the run may be too short to show).
    The SLO holds where ``holds`` says; it records the loads probed."""

    knee: float
    holds: Callable[[float], bool] = lambda c: True
    tpot_growth: float = 0.0
    queue_ms: float = 100.0
    gpus: int = 1
    probed: list[float] = field(default_factory=list)

    def at(self, concurrency: int, order: list[int], rate: float | None = None) -> LoadPoint:
        self.probed.append(concurrency)
        base = _one_run()
        served = min(concurrency, self.knee)
        ok = self.holds(concurrency)
        summary = base.summary.model_copy(update={"output_tokens_per_s": 100.0 * served})
        over = max(0.0, concurrency - self.knee)
        values = {
            "tpot_p99_ms": 20.0 + self.tpot_growth * over,
            "ttft_p99_ms": 100.0 + self.queue_ms * over,
            "e2e_p90_ms": 5_000.0 + self.queue_ms * over,
        }
        point = base.point.model_copy(update={"slo_met": ok, "values_ms": values})
        return LoadPoint(concurrency, (replace(base, summary=summary, point=point),), rate)


TPOT = parse_slo("tpot_p99_ms=50")


def test_a_saturated_climb_stops_after_the_doubling_that_shows_it() -> None:
    """Engines that serve 64 clients at a time under a TPOT-only SLO: 64 -> 128 clients gives
    the same output tokens/s and TPOT, so the climb stops at 128 (the highest load timed,
    with the step below it) instead of timing every doubling to the cap, 256; the binding
    says why; without the SLO the search climbs to the cap as before."""
    runner = Saturating(knee=64)
    found = highest_load(runner, [2], slo=TPOT)
    assert runner.probed == [1, 2, 4, 8, 16, 32, 64, 128, 124]
    assert found.best is not None and found.best.concurrency == 128 and found.over is None
    assert found.saturated == Saturation(64, 128, 0.0, {"tpot_p99_ms": 0.0})
    assert saturation_text(found.saturated) == (
        "saturation (64 -> 128 clients: +0.0% output tokens/s, TPOT p99 +0.0%; the SLO bounds "
        "no latency the queue adds, so it holds at any higher load)"
    )
    blind = Saturating(knee=64)
    climbed = highest_load(blind, [2]).best
    assert climbed is not None and climbed.concurrency == 256 and blind.probed[-2:] == [256, 248]
    results = [Result(Candidate(groups=()), "ranked", saturated=s) for s in (True, False, True)]
    assert saturated_line(results) == (
        "2 candidates stopped saturated: more clients would only wait in their queue (the "
        "binding says by how much)"
    )
    assert saturated_line(results[1:2]) == ""


@pytest.mark.parametrize(
    ("runner", "slo"),
    [
        (Saturating(knee=1_000), TPOT),  # output tokens/s still double with the clients
        (Saturating(knee=64, tpot_growth=0.1), TPOT),  # TPOT grows 32% from 64 to 128
        (Saturating(knee=64, queue_ms=0), parse_slo("tpot_p99_ms=50,ttft_p99_ms=600000")),
        (Saturating(knee=64, queue_ms=0), parse_slo("tpot_p99_ms=50,e2e_p90_ms=3000000")),
    ],
)
def test_a_climb_goes_on_while_more_clients_move_a_figure_or_the_slo_bounds_a_queued_one(
    runner: Saturating, slo: Slo
) -> None:
    """The climb goes on to the cap (256 clients) where the output tokens/s still grow, where
    an objective's figure moved by SATURATION (~3%) or more, or where the SLO bounds TTFT or
    E2E, even when the doubling did not move them (a queue adds to those at every load above
    the knee, so they can fail there)."""
    found = highest_load(runner, [2], slo=slo)
    assert found.saturated is None
    assert found.best is not None and found.best.concurrency == 256
    assert runner.probed == [1, 2, 4, 8, 16, 32, 64, 128, 256, 248]


@settings(max_examples=60, deadline=None)
@given(
    fails=st.sets(st.integers(1, 300), max_size=6),
    above=st.integers(2, 300),
    knee=st.integers(1, 300),
)
@example(fails=set(), above=129, knee=65)  # 64 -> 128 clients gains 1/64: saturated below the knee
def test_a_saturated_answer_holds_with_every_load_probed_below_it(
    fails: set[int], above: int, knee: int
) -> None:
    """The saturation stop keeps the search's rule: what it reports holding held at every load
    it probed below it (one step below included); a load that held above a failing one is
    never taken; a saturated answer is the climb's last load, which doubled a holding one whose
    output tokens/s were within :data:`SATURATION` of the plateau's (the engines' ``knee``)."""
    runner = Saturating(knee=knee, holds=lambda c: c not in fails and c < above)
    found = highest_load(runner, [2], slo=TPOT)
    _steady(runner, found)  # type: ignore[arg-type]
    if found.saturated is not None:
        assert found.best is not None and found.over is None
        assert found.best.concurrency == found.saturated.upper == 2 * found.saturated.lower
        assert knee < found.saturated.lower * (1 + SATURATION)
        assert found.saturated.upper in runner.probed


L4_STACK = """\
config:
  dynamo-testbed:nodeClasses:
    l4:
      nodeSelector: {lab/node: b}
      gpu: l4
      gpuMemoryGiB: 24
      gpusPerNode: 1
      nodes: 1
  dynamo-testbed:model:
    name: Qwen/Qwen3-0.6B
    maxModelLen: 8192
  dynamo-testbed:topology:
    name: l4
    workers:
      - {name: aggregated-0, role: aggregated, replicas: 1, nodeClass: l4}
  dynamo-testbed:load:
    prefixKinds: [1]
    concurrency: [19]
    promptTokens: 1500
    prefixShare: 0.667
    maxTokens: 200
    requestsPerRun: 200
"""


def test_itl_p99_of_a_closed_loop_sits_on_a_knife_edge_the_request_shape_decides(
    tmp_path: Path,
) -> None:
    """One L4 worker (no routing to differ), 19 clients of 1,500-token prompts (2/3 a shared
    prefix) and 200 output tokens: ITL p99 is either a decode-only step or a step carrying a
    prefill chunk, whichever more than 1% of the gaps are. The search's run (the settings'
    1,500 prompt tokens, hits in vLLM's 16-token blocks: 992) reads 26.2 ms; the same run with
    the prompt the server counts (1,521: the chat template's tokens) and the hit the routing
    run's mockers report (960: their 64-token blocks), as ``testbed simulate`` times it, reads
    36.6 ms; either change alone reads ~33 ms. A modelling difference the search's output names
    (``recommend.outputs.stand_in_note``), not a wrong path."""
    (tmp_path / "stacks").mkdir()
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "stacks" / "Pulumi.l4.yaml").write_text(L4_STACK)
    plan = load_stack("l4", project_dir=tmp_path)
    load, topology, constants = plan.cfg.load, run_topology(plan), stack_constants(plan)
    sent = Workload(load).closed(1, 19)
    warmup = load.warmup_count(19)

    def itl_p99(prompt: int, hit: int) -> float:
        measured = [
            replace(r, prompt_tokens=prompt, cached_tokens=hit if i else 0)
            for i, r in enumerate(sent[warmup:])
        ]
        timing = simulate_run(topology, constants, measured, 19)
        return p99(timing_records(timing, measured, 0.0))

    def p99(records: list[RequestRecord]) -> float:
        summary = summarize_run(records, prefix_kinds=1, concurrency=19, repetition=0)
        assert summary.itl_p99_ms is not None
        return summary.itl_p99_ms

    assert p99(measured_run(topology, constants, Workload(load), 1, 19)[0]) == pytest.approx(
        26.2, abs=0.05
    )
    assert itl_p99(1500, 992) == pytest.approx(26.2, abs=0.05)
    assert itl_p99(1521, 960) == pytest.approx(36.6, abs=0.05)
    assert 32 < itl_p99(1521, 992) < 34 and 32 < itl_p99(1500, 960) < 34
