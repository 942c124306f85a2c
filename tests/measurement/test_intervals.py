"""Intervals and A / B verdicts on known answers (`measurement.intervals`).

The synthetic runs are built the way a closed-loop run behaves: each run has its own level (the
run-to-run variation of routing and cache state: a log-normal factor, sd 0.08 on the log scale),
and its requests' TTFTs are log-normal around it with neighbours correlated (an AR(1) on the
log scale, correlation 0.6: requests sent together share the queue and the batch), so they are
not independent draws. Each run is reduced to its own p50 and p99 first, as loadgen does.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from measurement.intervals import (
    HIGHER,
    INTERVAL_METRICS,
    LOWER,
    MOST_REPETITIONS,
    NO_DIFFERENCE,
    NOISE_THRESHOLD,
    SLO_METRICS,
    UPPER_BOUNDS,
    WITHIN_NOISE,
    PointComparison,
    ab_comparisons,
    compare_runs,
    point_interval,
    repetitions_needed,
    verdict_mark,
)
from measurement.percentile import percentile
from measurement.record import RequestRecord
from measurement.results import PointSummary
from measurement.stats import summarize_point, summarize_run
from outputs.tables import seed_table, table_text, verdict_caption, verdict_rows
from testbed.cli import app

MS = 1_000_000
TTFT_MS = 60.0  # median TTFT of a request (the seed's kv-routing p50s are 34-64 ms)
SIGMA = 0.35  # spread of one request's log TTFT around its run's level
RUN_SIGMA = 0.08  # run-to-run spread of the run's level (log scale)
NEIGHBOUR = 0.6  # correlation of consecutive requests' log TTFT within a run
NULL_SEEDS = range(200)


def _run_ttfts(rng: random.Random, requests: int = 100, shift_ms: float = 0.0) -> list[float]:
    level = math.log(TTFT_MS) + rng.gauss(0, RUN_SIGMA)
    z, out = rng.gauss(0, 1), []
    for _ in range(requests):
        z = NEIGHBOUR * z + math.sqrt(1 - NEIGHBOUR**2) * rng.gauss(0, 1)
        out.append(math.exp(level + SIGMA * z) + shift_ms)
    return out


def _side(rng: random.Random, runs: int = 3, shift_ms: float = 0.0) -> dict[str, list[float]]:
    ttfts = [_run_ttfts(rng, shift_ms=shift_ms) for _ in range(runs)]
    return {
        "ttft_p50_ms": [percentile(t, 50) or 0.0 for t in ttfts],
        "ttft_p99_ms": [percentile(t, 99) or 0.0 for t in ttfts],
    }


def test_point_interval_is_t_on_the_logs() -> None:
    values = [100.0, 110.0, 121.0]  # logs equally spaced by log(1.1)
    low, high = point_interval(values) or (0, 0)
    # mean log = log 110, sd = log 1.1, t(0.975, 2) = 4.3027
    half = 4.302653 * math.log(1.1) / math.sqrt(3)
    assert low == pytest.approx(110 * math.exp(-half), rel=1e-5)
    assert high == pytest.approx(110 * math.exp(half), rel=1e-5)
    assert point_interval([5.0]) is None
    assert point_interval([7.0, 7.0]) == pytest.approx((7.0, 7.0))
    low, high = point_interval([0.0, 0.1, 0.2]) or (-1, -1)  # a 0: on the values' own scale
    assert low == 0.0 and high == pytest.approx(0.1 + 4.302653 * 0.1 / math.sqrt(3), rel=1e-5)


def test_null_same_server_no_difference_in_at_least_95_percent_of_seeds() -> None:
    """A and B draw from the same server: each metric says no difference in >= 95% of seeds."""
    for metric in ("ttft_p50_ms", "ttft_p99_ms"):
        false = 0
        for seed in NULL_SEEDS:
            rng = random.Random(seed)
            a, b = _side(rng), _side(rng)
            false += compare_runs(metric, a[metric], b[metric]).verdict != NO_DIFFERENCE
        assert false <= 0.05 * len(NULL_SEEDS), (metric, false)
        assert false >= 1  # the test can reject: a 5% level rejects now and then under the null


def test_known_ratio_is_covered_at_the_nominal_rate() -> None:
    """Runs whose geometric means differ by exactly 1.3x: the 95% ratio interval holds 1.3 in
    about 95% of seeds (binomial sd over 200 seeds: 1.5 points)."""
    covered = 0
    for seed in NULL_SEEDS:
        rng = random.Random(seed)
        a = [math.exp(rng.gauss(math.log(100), 0.1)) for _ in range(3)]
        b = [math.exp(rng.gauss(math.log(130), 0.1)) for _ in range(3)]
        low, high = compare_runs("ttft_p50_ms", a, b).ratio_ci or (0, 0)
        covered += low <= 1.3 <= high
    assert 0.92 * len(NULL_SEEDS) <= covered <= 0.99 * len(NULL_SEEDS)


def _records(ttfts: list[float], concurrency: int = 4) -> list[RequestRecord]:
    """A closed-loop run of these TTFTs (ms): 16 tokens 10 ms apart after the first."""
    out, free = [], [0] * concurrency
    for i, ttft in enumerate(ttfts):
        slot = min(range(concurrency), key=free.__getitem__)
        sent = free[slot]
        first = sent + int(ttft * MS)
        tokens = [first + k * 10 * MS for k in range(16)]
        free[slot] = tokens[-1] + MS
        out.append(
            RequestRecord(
                index=i, prefix_id=i % 2, intended_ns=sent, sent_ns=sent,
                first_chunk_ns=first, first_token_ns=first, token_ns=tokens,
                last_token_ns=tokens[-1], end_ns=tokens[-1] + MS, chunks=17,
                prompt_tokens=1000, completion_tokens=16, cached_tokens=800,
            )
        )  # fmt: skip
    return out


def _point(rng: random.Random, shift_ms: float) -> PointSummary:
    runs = [
        summarize_run(
            _records(_run_ttfts(rng, shift_ms=shift_ms)),
            prefix_kinds=2,
            concurrency=4,
            repetition=rep,
        )
        for rep in range(3)
    ]
    return summarize_point(runs)


@pytest.mark.parametrize("seed", range(5))
def test_b_50ms_slower_to_first_token_is_detected_at_3_repetitions_of_100(seed: int) -> None:
    """The seed's 3 repetitions of 100 requests, B 50 ms slower to first token on every
    request: summary -> comparison says B higher for TTFT p50, and the interval holds the
    true ratio of the runs' medians (about (60 + 50) / 60)."""
    rng = random.Random(seed)
    a, b = _point(rng, 0.0), _point(rng, 50.0)
    found = {c.metric: c for c in ab_comparisons([a], [b])}
    ttft = found["ttft_p50_ms"]
    assert ttft.verdict == HIGHER and ttft.repetitions == (3, 3)
    low, high = ttft.ratio_ci or (0, 0)
    assert low <= (TTFT_MS + 50) / TTFT_MS <= high
    delta_low, delta_high = ttft.delta_ci or (0, 0)
    assert delta_low < 50 < delta_high and ttft.delta == pytest.approx(ttft.b - ttft.a)  # type: ignore[operator]
    assert found["requests_per_s"].verdict == LOWER  # slower requests: fewer per second
    assert found["itl_p50_ms"].ratio == pytest.approx(1.0)  # tokens 10 ms apart on both


def test_repetitions_needed_grows_as_the_difference_shrinks() -> None:
    """Two-sample t at 95%, power 80%, sd 1: a difference of 1 sd needs 17 per side (the
    textbook value: Cohen's d = 1 -> 17), 0.5 sd needs 64, and a tiny one more than allowed."""
    assert repetitions_needed(1.0, 1.0, 2) == 17
    assert repetitions_needed(0.5, 1.0, 2) == 64
    assert repetitions_needed(0.01, 1.0, 2) is None
    assert repetitions_needed(0.0, 1.0, 2) is None


def test_no_difference_says_how_many_repetitions_would_tell() -> None:
    a, b = [100.0, 108.0, 95.0], [104.0, 112.0, 99.0]  # B ~4% slower, within the noise
    found = compare_runs("ttft_p50_ms", a, b)
    assert found.verdict == NO_DIFFERENCE
    # d / sd = 0.615 on the logs: the normal approximation 2 (z_.975 + z_.8)^2 / 0.615^2 = 41.5;
    # the t-test's own power needs one or two more
    assert found.repetitions_needed in (42, 43, 44)
    low, high = found.ratio_ci or (0, 0)
    assert low < 1 < high


def test_too_few_runs_and_zeros() -> None:
    one = compare_runs("ttft_p50_ms", [100.0], [300.0, 310.0])
    assert one.verdict is None and one.ratio_ci is None  # no spread on A: no verdict
    assert one.note and "A had 1 run" in one.note
    zero = compare_runs("cached_ratio", [0.0, 0.01, 0.0], [0.5, 0.52, 0.49])
    assert zero.scale == "linear" and zero.verdict == HIGHER
    assert zero.ratio_ci is None  # A's mean is not told from 0: the ratio is unbounded
    linear = compare_runs("cached_ratio", [0.0, 0.4, 0.42, 0.41, 0.4], [0.6, 0.62, 0.61, 0.6, 0.61])
    low, high = linear.ratio_ci or (0, 0)
    assert linear.scale == "linear" and low < 0.61 / 0.4 < high and linear.verdict == HIGHER
    assert repetitions_needed(1.0, 1.0, MOST_REPETITIONS + 1) is None
    row = PointComparison(**linear.model_dump(), prefix_kinds=2, concurrency=4)
    assert "Fieller's interval" in verdict_caption([row], simulated=False)
    assert verdict_rows([row])[0][3:6] == [f"x{0.61 / 0.4:.2f}", f"{low:.2f}-{high:.2f}", "higher"]


def _folder(root: Path, name: str, points: list[PointSummary], simulated: bool = False) -> Path:
    folder = root / name
    folder.mkdir()
    rows = [p.model_dump(mode="json") for p in points]
    (folder / "summary.json").write_text(json.dumps(rows))
    if simulated:  # what compare reads of a simulation's result.json
        (folder / "result.json").write_text(json.dumps({"simulated": "the timing model"}))
    return folder


def test_a_small_significant_difference_reads_within_noise() -> None:
    """Criterion.rs's rule on B / A: a difference whose interval excludes 1 but reaches inside
    1 -+ the noise threshold reads `within noise`; one wholly beyond it `higher` / `lower`; at
    a threshold of 0 the interval alone decides."""
    a = [100.0, 101.0, 99.0]
    slightly = compare_runs("ttft_p50_ms", a, [103.0, 104.0, 102.0])
    assert slightly.ratio_ci is not None and 1 < slightly.ratio_ci[0] < 1 + NOISE_THRESHOLD
    assert slightly.verdict == WITHIN_NOISE and slightly.noise_threshold == NOISE_THRESHOLD
    assert verdict_mark(slightly) == "≈"
    assert compare_runs("ttft_p50_ms", a, [103.0, 104.0, 102.0], noise=0.0).verdict == HIGHER
    assert compare_runs("ttft_p50_ms", a, [97.0, 96.0, 98.0]).verdict == WITHIN_NOISE
    assert compare_runs("ttft_p50_ms", a, [97.0, 96.0, 98.0], noise=0.0).verdict == LOWER
    doubled = compare_runs("ttft_p50_ms", a, [200.0, 202.0, 198.0])
    assert doubled.verdict == HIGHER and doubled.ratio_ci is not None
    assert doubled.ratio_ci[0] > 1 + NOISE_THRESHOLD
    assert compare_runs("ttft_p50_ms", a, [90.0, 91.0, 89.0]).verdict == LOWER
    # A ratio beyond the threshold whose wide interval reaches inside it: within noise, and
    # the runs per side that would tell (the interval wholly beyond the threshold).
    wide = compare_runs("ttft_p50_ms", [100.0, 102.0, 98.0], [110.0, 122.0, 114.0])
    assert wide.verdict == WITHIN_NOISE and wide.ratio == pytest.approx(114 / 100)
    assert wide.ratio_ci is not None and 1 < wide.ratio_ci[0] < 1 + NOISE_THRESHOLD
    assert wide.repetitions_needed == 5 and "more runs would tell" in (wide.note or "")
    assert slightly.repetitions_needed is None
    assert slightly.note == "a difference within the 5% noise threshold"
    # Not detected at all stays `no difference detected`, whatever the threshold.
    assert compare_runs("ttft_p50_ms", a, [100.5, 99.5, 101.0]).verdict == NO_DIFFERENCE


def test_testbed_compare_json_and_verdict_table(tmp_path: Path) -> None:
    rng = random.Random(7)
    a = _folder(tmp_path, "a", [_point(rng, 0.0)], simulated=True)
    b = _folder(tmp_path, "b", [_point(rng, 50.0)])
    out = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert (
        len(rows) == 10
    )  # one point, every interval metric (TTFT p50, p99, ITL, TPOT, E2E p50 and p99, req/s, cached)
    ttft = next(r for r in rows if r["metric"] == "ttft_p50_ms")
    assert ttft["verdict"] == "higher" and ttft["repetitions"] == [3, 3]
    assert ttft["noiseThreshold"] == NOISE_THRESHOLD
    assert ttft["prefixKinds"] == 2 and ttft["concurrency"] == 4 and ttft["simulated"] is True
    low, high = ttft["ratioCi"]
    assert low < ttft["ratio"] < high and ttft["b"] / ttft["a"] == pytest.approx(ttft["ratio"])
    wider = json.loads(
        CliRunner()
        .invoke(app, ["compare", str(a), str(b), "--json", "--confidence", "0.99"])
        .output
    )
    low99, high99 = next(r for r in wider if r["metric"] == "ttft_p50_ms")["ratioCi"]
    assert low99 < low and high < high99
    table = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert table.exit_code == 0, table.output
    assert "B / A: interval and verdict (SIMULATED)" in table.output
    assert "higher" in table.output and "3 / 3" in table.output
    assert "SIMULATED: compares two simulations" in table.output
    refused = CliRunner().invoke(app, ["compare", str(a), str(b), "--confidence", "1.5"])
    assert refused.exit_code == 2 and "--confidence" in refused.output
    # The threshold given is the one every verdict used, and the JSON carries it.
    strict = CliRunner().invoke(
        app, ["compare", str(a), str(b), "--json", "--noise-threshold", "0"]
    )
    found = next(r for r in json.loads(strict.output) if r["metric"] == "ttft_p50_ms")
    assert found["verdict"] == "higher" and found["noiseThreshold"] == 0.0
    assert "-+5% of 1" in table.output
    wrong = CliRunner().invoke(app, ["compare", str(a), str(b), "--noise-threshold", "5"])
    assert wrong.exit_code == 2 and "--noise-threshold" in wrong.output
    # 5 meant 5%: the one line names the fraction that says it
    said = " ".join(wrong.output.replace("│", " ").split())  # typer's error box, unwrapped
    assert "5 is not a fraction from 0 to 0.5; for 5% give 0.05" in said
    percent = CliRunner().invoke(app, ["compare", str(a), str(b), "--confidence", "95"])
    assert percent.exit_code == 2
    assert "for 95% give 0.95" in " ".join(percent.output.replace("│", " ").split())


def test_seed_table_shows_each_interval_under_its_value() -> None:
    point = _point(random.Random(11), 0.0)
    ttft = point.intervals["ttft_p50_ms"]
    assert ttft.low is not None and ttft.high is not None and len(ttft.runs) == 3
    assert ttft.low < statistics.fmean(ttft.runs) < ttft.high
    text = table_text(seed_table([point], simulated=True))
    assert f"{ttft.low:,.0f}-{ttft.high:,.0f}" in text
    assert "second lines: 95% interval over the repetitions" in text
    assert "SIMULATED: spread from the routing runs only" in text
    one = summarize_point(
        [summarize_run(_records(_run_ttfts(random.Random(1))), prefix_kinds=2, concurrency=4,
                       repetition=0)]
    )  # fmt: skip
    assert one.intervals["ttft_p50_ms"].low is None
    assert "second lines" not in table_text(seed_table([one]))


def test_a_cached_ratio_interval_stays_at_most_1_as_typed() -> None:
    """The user's three runs: on the log scale the interval reached 1.42; a share is taken on
    the logit scale, so it stays inside (0, 1)."""
    runs = [0.62, 0.83, 0.97]
    log_high = math.exp(
        statistics.fmean(map(math.log, runs))
        + 4.303 * statistics.stdev(map(math.log, runs)) / math.sqrt(3)
    )
    assert log_high > 1.2  # what the log scale gave
    low, high = point_interval(runs, upper=UPPER_BOUNDS["cached_ratio"]) or (-1, -1)
    assert 0 < low < min(runs) and max(runs) < high < 1


@pytest.mark.parametrize(
    "runs",
    [
        [0.5, 0.99, 0.999],  # held out: near the bound
        [1.0, 0.9, 0.95],  # a run at the bound: the values' own scale, clipped
        [0.0, 0.4, 0.9],  # a run at 0
        [0.01, 0.02, 0.5, 0.97],
    ],
)
def test_a_share_interval_respects_its_bounds(runs: list[float]) -> None:
    low, high = point_interval(runs, upper=1.0) or (-1, -1)
    assert 0 <= low <= statistics.median(runs) <= high <= 1


def test_a_verdict_needs_a_spread_to_rest_on() -> None:
    """Every run the same on each side: a zero-width interval, and no verdict on it."""
    firm = compare_runs("ttft_p50_ms", [40.0, 40.0, 40.0], [50.0, 50.0, 50.0])
    assert firm.verdict is None and verdict_mark(firm) == ""
    assert firm.note is not None and "no run-to-run spread" in firm.note
    # held out: a cached ratio of identical runs, and one side with a spread (then Welch's t)
    assert compare_runs("cached_ratio", [0.8, 0.8], [0.9, 0.9]).verdict is None
    spread = compare_runs("ttft_p50_ms", [40.0, 40.0, 40.0], [50.0, 52.0, 51.0])
    assert spread.verdict == HIGHER and spread.ratio_ci is not None


def test_attainment_and_goodput_intervals_as_typed_stay_in_bounds() -> None:
    """The user's 2-run points: attainment 81.1%-106.6% and 0.0%-1237580.3% (log scale, no
    bound), goodput 0.0-8401.0 req/s for 0.1. A share is now bounded like the cached ratio,
    and a rate's interval reaching far past its runs is marked too wide."""
    from measurement.goodput import evaluate_point
    from measurement.results import MetricInterval, RunAttainment
    from workload.slo import parse_slo

    slo = parse_slo("ttft_p99_ms=1000,itl_p99_ms=50")
    p99: dict[str, float | None] = {"ttft_p99_ms": 900.0, "itl_p99_ms": 40.0}

    def run(attainment: float, goodput: float) -> RunAttainment:
        return RunAttainment(
            requests=50, met=round(50 * attainment), missed_by={}, attainment=attainment,
            duration_s=10.0, goodput_requests_per_s=goodput,
            goodput_output_tokens_per_s=goodput * 100, values_ms=p99, cold=4, values_warm_ms=p99,
        )  # fmt: skip

    for runs in ([run(0.9, 4.5), run(0.98, 4.9)], [run(0.02, 0.02), run(0.18, 0.18)]):
        point = evaluate_point(runs, slo)
        share = point.intervals["attainment"]
        assert share.low is not None and share.high is not None
        assert 0 <= share.low <= min(share.runs) <= max(share.runs) <= share.high <= 1
        rate = point.intervals["goodput_requests_per_s"]
        assert rate.low is not None and rate.low >= 0
    assert rate.too_wide() and rate.high is not None and rate.high > 4 * 0.18
    # held out: 3 close runs are not too wide; runs all 0 give (0, 0), not too wide
    assert not MetricInterval(runs=[4.0, 4.2, 4.4], low=3.7, high=4.8).too_wide()
    assert not MetricInterval(runs=[0.0, 0.0], low=0.0, high=0.0).too_wide()


@pytest.mark.parametrize("metric", [*INTERVAL_METRICS, *SLO_METRICS])
@pytest.mark.parametrize("runs", [[0.0, 0.9], [0.05, 0.95], [0.3, 0.31, 0.99], [0.0, 0.0, 0.7]])
def test_every_metric_interval_stays_within_its_natural_bounds(
    metric: str, runs: list[float]
) -> None:
    """Latencies, rates and goodputs are at least 0; shares (`UPPER_BOUNDS`) at most 1."""
    low, high = point_interval(runs, upper=UPPER_BOUNDS.get(metric)) or (-1, -1)
    assert 0 <= low <= high
    if metric in ("cached_ratio", "attainment"):
        assert high <= UPPER_BOUNDS[metric] == 1.0
