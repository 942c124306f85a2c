"""The SLO model, `--slo` parsing and their one-line errors; attainment and goodput per run and
per grid point (workload.slo, measurement.goodput) on hand-built records with known values."""

import pandas as pd
import pytest
from pydantic import ValidationError
from records import MS, record  # a successful record: sent, TTFT, then token gaps (ms)

from measurement.errors import ErrorKind
from measurement.goodput import evaluate_point, evaluate_run, missed, request_met, request_value
from measurement.record import RequestRecord
from measurement.results import PointSummary
from measurement.stats import first_of_client
from metrics.registry import objectives
from outputs.folder_writer import records_frame, records_from_frame
from workload.slo import Slo, SloError, TooFewTokensError, parse_slo


def test_parse_takes_snake_and_camel_keys_and_gives_the_option_back() -> None:
    slo = parse_slo("ttft_p99_ms=1000, itlP99Ms=50")
    assert slo.objectives() == {"ttft_p99_ms": 1000.0, "itl_p99_ms": 50.0}
    assert slo.option() == "ttft_p99_ms=1000,itl_p99_ms=50"
    assert slo.describe() == "TTFT p99 <= 1,000 ms, ITL p99 <= 50 ms"
    assert parse_slo(slo.option()) == slo
    # Keys in any case (as typed: TTFT_P99_MS=1000 got no hint)
    assert parse_slo("TTFT_P99_MS=1000,ItlP99Ms=50") == slo
    assert parse_slo("e2e_p99_ms=20000").option() == "e2e_p99_ms=20000"
    # The stack's load.slo: camelCase, validated by the same model.
    assert Slo.model_validate({"e2eP99Ms": 20000}).bounds == {"e2e_p99_ms": 20000.0}
    # A value may end in ms; the key is matched in any case, camelCase too.
    assert parse_slo("TTFTP99MS=1000ms,itl_P99_Ms=50").objectives() == slo.objectives()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft_p99=1000", "unknown SLO key 'ttft_p99': did you mean ttft_p99_ms?"),
        ("ttft_p99_ms", "--slo item 'ttft_p99_ms' is not key=ms"),
        ("ttft_p99_ms=1s", "--slo ttft_p99_ms='1s' is not a number of milliseconds"),
        # as typed: NaN and infinity compare false with every bound and were taken
        ("ttft_p90_ms=nan", "--slo ttft_p90_ms='nan' is not a number of milliseconds: write e.g."),
        ("tpot_p95_ms=inf", "--slo tpot_p95_ms='inf' is not a number of milliseconds"),
        ("ttft_p90_ms=-inf", "write e.g. ttft_p90_ms=1000"),
        # a value in seconds: the value in ms to write, not a generic example
        (
            "ttft_p90_ms=0.8s",
            "--slo ttft_p90_ms='0.8s' is not a number of milliseconds: write ttft_p90_ms=800",
        ),
        ("e2e_p99_ms=12 s", "write e2e_p99_ms=12000"),  # held out
        # as typed: '1000s' suggested 1000000 ms, which the bound's range refuses: a stray unit
        ("ttft_p99_ms=1000s", "ttft_p99_ms='1000s' is not a number of milliseconds: write "),
        # objectives separated by spaces: the text with commas
        (
            "ttft_p90_ms=800 tpot_p95_ms=40",
            "--slo 'ttft_p90_ms=800 tpot_p95_ms=40': separate objectives with commas: write "
            "--slo ttft_p90_ms=800,tpot_p95_ms=40",
        ),
        (
            "itl_p50_ms = 20  e2e_p99_ms=9000,ttft_p99_ms=1000",
            "write --slo itl_p50_ms=20,e2e_p99_ms=9000,ttft_p99_ms=1000",
        ),
        ("ttft_p99_ms=1000,ttft_p99_ms=900", "--slo names ttft_p99_ms twice"),
        ("ttft_p99_ms=1", "ttft_p99_ms=1 is 1 ms, below any TTFT p99 (at least 10 ms)"),
        (
            "itl_p99_ms=0.05",
            "itl_p99_ms=0.05 is 0.05 ms, below any ITL p99 (at least 0.5 ms); the value is in "
            "milliseconds: for 0.05 s write 50",
        ),
        ("e2e_p99_ms=5000000000", "for 5000000000 us write 5000000"),
        # as typed: a plain number, not 'for 5e+06 us write 5000'
        ("e2e_p99_ms=5000000", "e2e_p99_ms=5000000 is 5,000,000 ms (5,000 s), above"),
        ("e2e_p99_ms=5000000", "for 5000000 us write 5000"),
        (
            "ttft_p99_ms=1000;itl_p99_ms=50",
            "separate objectives with commas, not ';': write --slo ttft_p99_ms=1000,itl_p99_ms=50",
        ),
        ("ttft_p99_ms=1000; e2e_p99_ms=9000;", "write --slo ttft_p99_ms=1000,e2e_p99_ms=9000"),
        ("TTFT_P99=1000", "unknown SLO key 'TTFT_P99': did you mean ttft_p99_ms?"),
        ("ttft_p99_ms=-5", "greater than 0"),
        ("", "an SLO needs at least one objective"),
    ],
)
def test_bad_slo_is_one_line_naming_the_key_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(SloError) as raised:
        parse_slo(text)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_bound_in_seconds_beyond_the_range_is_taken_as_ms_with_a_stray_unit() -> None:
    """``1000s`` is 1,000,000 ms, which no TTFT bound accepts: the fix is 1000, which parses."""
    with pytest.raises(SloError) as raised:
        parse_slo("ttft_p99_ms=1000s")
    assert str(raised.value).endswith("write ttft_p99_ms=1000")
    assert parse_slo("ttft_p99_ms=1000").bounds == {"ttft_p99_ms": 1000.0}


def test_stack_keys_are_checked_by_the_model() -> None:
    with pytest.raises(ValidationError, match="ttftP99Msx"):
        Slo.model_validate({"ttftP99Msx": 1000})
    with pytest.raises(
        TooFewTokensError,
        match=r"^load.slo itlP99Ms: ITL p99 needs 2 or more output tokens per request but "
        "load.maxTokens is 1; set load.maxTokens to 2 or drop itlP99Ms from load.slo$",
    ) as raised:
        parse_slo("ttft_p99_ms=1000,itl_p99_ms=50").check_outputs(max_tokens=1)
    assert raised.value.said("--slo", "--max-tokens", "give --max-tokens 2") == (
        "--slo itl_p99_ms: ITL p99 needs 2 or more output tokens per request but --max-tokens is "
        "1; give --max-tokens 2 or drop itl_p99_ms from --slo"
    )
    parse_slo("ttft_p99_ms=1000").check_outputs(max_tokens=1)  # TTFT needs one token only


def test_a_request_meets_the_slo_on_its_own_values() -> None:
    slo = parse_slo("ttft_p99_ms=100,itl_p99_ms=20,tpot_p99_ms=15,e2e_p99_ms=200")
    fast = record(0, 0, 80, [10, 10, 10])
    p99 = {k: o for k, o in objectives().items() if o.q == 99}
    assert {k: request_value(fast, o) for k, o in p99.items()} == {
        "ttft_p99_ms": 80.0,
        "itl_p99_ms": 10.0,
        "tpot_p99_ms": 10.0,
        "e2e_p99_ms": 110.0,
    }
    assert request_met(fast, slo)
    # Its own ITL p99 is 30 (one gap of 30), its TPOT (10 + 10 + 30) / 3 = 16.7.
    jittery = record(1, 0, 80, [10, 10, 30])
    assert missed(jittery, slo) == ["itl_p99_ms", "tpot_p99_ms"]
    failed = RequestRecord(index=2, prefix_id=0, error_kind=ErrorKind.TIMEOUT)
    assert missed(failed, slo) == list(slo.objectives())


def run_records() -> list[RequestRecord]:
    """Four streams in a closed loop: the first request of each is slow (TTFT 900 ms), the
    next four fast (TTFT 100 ms); all 3 tokens 10 ms apart; one more request failed."""
    cold = [record(i, 0, 900, [10, 10]) for i in range(4)]
    warm = [record(4 + i, 920, 100, [10, 10]) for i in range(4)]
    failed = RequestRecord(
        index=8, prefix_id=0, intended_ns=930 * MS, sent_ns=930 * MS, error_kind=ErrorKind.TIMEOUT
    )
    return [*cold, *warm, failed]


def test_run_attainment_goodput_and_the_cold_first_requests() -> None:
    slo = parse_slo("ttft_p99_ms=500")
    run = evaluate_run(run_records(), slo, concurrency=4)
    assert (run.requests, run.met, run.missed_by) == (9, 4, {"ttft_p99_ms": 5})
    assert run.attainment == pytest.approx(4 / 9)
    # Span: first send (0 ms) to the last end of a successful request (920 + 120 + 2 ms).
    assert run.duration_s == pytest.approx(1.042)
    assert run.goodput_requests_per_s == pytest.approx(4 / 1.042)
    assert run.goodput_output_tokens_per_s == pytest.approx(12 / 1.042)
    assert run.cold == 4
    # TTFT p99 over 8 successes (4 x 900, 4 x 100) is 900; without the cold ones 100.
    assert run.values_ms["ttft_p99_ms"] == pytest.approx(900)
    assert run.values_warm_ms["ttft_p99_ms"] == pytest.approx(100)
    # The open loop has no clients: nothing is the first of one.
    assert evaluate_run(run_records(), slo, concurrency=4, closed=False).cold == 0


def test_first_of_client_is_the_earliest_intended_sends_in_any_order() -> None:
    records = list(reversed(run_records()))
    assert first_of_client(records, 4, closed=True) == [False] * 5 + [True] * 4


def test_point_holds_binds_and_has_intervals() -> None:
    slo = parse_slo("ttft_p99_ms=1000,itl_p99_ms=12")
    runs = [evaluate_run(run_records(), slo, concurrency=4) for _ in range(3)]
    point = evaluate_point(runs, slo, gpus=2)
    assert point.attainment == pytest.approx(8 / 9)
    assert point.intervals["attainment"].runs == [pytest.approx(8 / 9)] * 3
    assert point.intervals["attainment"].low == pytest.approx(8 / 9)
    assert point.goodput_requests_per_s_per_gpu == pytest.approx(8 / 1.042 / 2)
    assert point.holds == {"ttft_p99_ms": True, "itl_p99_ms": True}
    assert point.slo_met
    # TTFT 900 / 1000 = 0.9 against ITL 10 / 12 = 0.83: TTFT binds.
    assert point.binding == "ttft_p99_ms"
    assert (point.requests, point.met, point.cold) == (27, 24, 12)
    tight = parse_slo("ttft_p99_ms=800")
    held = evaluate_point([evaluate_run(run_records(), tight, concurrency=4)], tight)
    assert held.holds == {"ttft_p99_ms": False}
    assert not held.slo_met
    assert held.intervals["attainment"].low is None  # one run: no interval


def test_an_slo_on_a_metric_the_run_cannot_have_is_refused() -> None:
    one_token = [record(i, 0, 100, []) for i in range(3)]
    with pytest.raises(SloError, match="slo itl_p99_ms: no successful request of the run has"):
        evaluate_run(one_token, parse_slo("itl_p99_ms=50"), concurrency=3)


def test_records_read_back_from_parquet_give_the_same_attainment(tmp_path) -> None:
    records = run_records()
    path = tmp_path / "requests.parquet"
    records_frame(2, 4, 0, records).to_parquet(path, index=False)
    back = records_from_frame(pd.read_parquet(path))
    assert back == records
    slo = parse_slo("ttft_p99_ms=500")
    assert evaluate_run(back, slo, concurrency=4) == evaluate_run(records, slo, concurrency=4)


def test_load_slo_is_part_of_the_load_section_but_not_of_a_runs_fingerprint() -> None:
    from outputs.folder_writer import grid_settings
    from workload.config import LoadConfig

    load = LoadConfig.model_validate({"slo": {"ttftP99Ms": 1000, "itlP99Ms": 50}})
    assert load.slo == parse_slo("ttft_p99_ms=1000,itl_p99_ms=50")
    plain = grid_settings("http://x:1", "m", LoadConfig(), None)
    assert grid_settings("http://x:1", "m", load, None) == plain
    with pytest.raises(ValidationError, match="maxTokens is 1"):
        LoadConfig.model_validate({"slo": {"tpotP99Ms": 20}, "maxTokens": 1})


def test_run_summaries_carry_the_tails_and_the_cold_requests() -> None:
    from measurement.stats import summarize_point, summarize_run

    runs = [
        summarize_run(run_records(), prefix_kinds=2, concurrency=4, repetition=r) for r in (0, 1)
    ]
    s = runs[0]
    assert (s.ttft_p99_ms, s.itl_p99_ms, s.tpot_p99_ms) == (
        pytest.approx(900),
        pytest.approx(10),
        pytest.approx(10),
    )
    assert s.e2e_p99_ms == pytest.approx(920)
    assert s.cold_requests == 4
    assert s.tails_warm_ms["ttft_p99_ms"] == pytest.approx(100)
    assert s.tails_warm_ms["e2e_p99_ms"] == pytest.approx(120)
    point = summarize_point(runs)
    assert (point.cold_requests, point.e2e_p99_ms) == (8, pytest.approx(920))
    from outputs.tables import table_text, tail_table

    tail = " ".join(table_text(tail_table([point]), width=200).split())
    assert "cold reqs" in tail and "all runs" in tail
    assert "summed over the point's repetitions" in tail
    assert point.tails_warm_ms["ttft_p99_ms"] == pytest.approx(100)
    assert point.intervals["e2e_p99_ms"].runs == [pytest.approx(920)] * 2


def test_points_judged_from_their_records_compare_goodput_a_b() -> None:
    from measurement.goodput import highest_meeting, judge_points
    from measurement.intervals import ab_comparisons
    from measurement.stats import summarize_point, summarize_run

    slo = parse_slo("ttft_p99_ms=500")
    records = {(2, 4, r): run_records() for r in (0, 1, 2)}
    runs = [
        summarize_run(v, prefix_kinds=2, concurrency=4, repetition=k[2]) for k, v in records.items()
    ]
    point = summarize_point(runs)
    (judged,) = judge_points([point], records, slo, gpus=4)
    assert judged.slo is not None
    assert judged.slo.attainment == pytest.approx(4 / 9)
    assert not judged.slo.slo_met  # TTFT p99 900 > 500
    assert judged.intervals["goodput_requests_per_s"].runs == [pytest.approx(4 / 1.042)] * 3
    assert highest_meeting([judged]) is None
    # The same point where each run lost two more requests: goodput B / A = 2 / 4.
    fewer = {k: [*v[:4], *v[6:]] for k, v in records.items()}
    (worse,) = judge_points([point], fewer, slo)
    by_metric = {c.metric: c for c in ab_comparisons([judged], [worse])}
    assert by_metric["goodput_requests_per_s"].ratio == pytest.approx(2 / 4)
    # Identical runs on both sides: an interval of no width, no verdict to rest on it.
    assert by_metric["goodput_requests_per_s"].verdict is None
    assert "no width" in (by_metric["goodput_requests_per_s"].note or "")
    # In one run of B a met request ends 20 ms later: that run's span is longer, so B's runs
    # have a spread, all of it well below A.
    late = record(6, 920, 100, [10, 30])
    spread = {k: [*v[:4], late, *v[7:]] if k[2] == 2 else fewer[k] for k, v in records.items()}
    (varied,) = judge_points([point], spread, slo)
    by_metric = {c.metric: c for c in ab_comparisons([judged], [varied])}
    assert by_metric["goodput_requests_per_s"].ratio == pytest.approx(2 / 4)  # the median run
    assert by_metric["goodput_requests_per_s"].verdict == "lower"
    loose = parse_slo("ttft_p99_ms=1000")
    (met,) = judge_points([point], records, loose)
    assert highest_meeting([met]) == met


def test_slo_tables_say_the_load_the_ranks_and_what_a_one_run_comparison_lacks() -> None:
    """As typed: 'highest load that met it: prefix kinds 2, concurrency 4' with both points at
    concurrency 4; three stacks 'ranked by goodput' with no rank or value shown; 'interval
    and verdict as in the table above' with one run a side (no verdicts)."""
    from measurement.goodput import judge_points
    from measurement.intervals import ab_comparisons
    from measurement.stats import summarize_point, summarize_run
    from outputs.slo_tables import slo_caption, slo_verdict_table
    from outputs.tables import stacks_tables, table_text

    loose = parse_slo("ttft_p99_ms=1000,itl_p99_ms=50")

    def point(kinds: int, keep: int, reps: int = 1) -> PointSummary:
        records = {(kinds, 4, r): run_records()[:keep] for r in range(reps)}
        runs = [summarize_run(v, prefix_kinds=kinds, concurrency=4, repetition=k[2])
                for k, v in records.items()]  # fmt: skip
        return judge_points([summarize_point(runs)], records, loose)[0]

    two, many = point(2, 9), point(24, 6)
    caption = slo_caption([two, many])
    best = max((two, many), key=lambda p: p.requests_per_s)
    assert (
        f"highest load that met it: concurrency 4, {best.requests_per_s:.1f} req/s served "
        f"(grid point K={best.prefix_kinds} c=4)"
    ) in caption
    assert "prefix kinds 2, concurrency 4" not in caption
    # Three stacks: each column's rank in its header, the goodput it ranks by in the caption.
    stacks = [("kv-routing", [point(2, 5)]), ("disagg-same-node", [two]), ("cross", [])]
    tables = stacks_tables(stacks)
    text = table_text(tables[-1])
    goodput = two.slo.goodput_requests_per_s if two.slo else 0
    assert "1. disagg-same-node" in text and "2. kv-routing" in text and "3. cross" in text
    words = " ".join(text.split())
    assert f"1. disagg-same-node {goodput:.1f} req/s, 2. kv-routing" in words
    assert "3. cross no judged point" in words
    # One run a side: no verdict, and the caption says so rather than pointing elsewhere.
    one_run = slo_verdict_table([two], [two], ab_comparisons([two], [two]))
    assert one_run is not None
    verdicts = table_text(one_run)
    assert "as in the table above" not in verdicts
    assert "no verdict: A and B had 1 run(s)" in " ".join(verdicts.split())
    # held out: 3 identical runs a side have no spread to rest a verdict on, and say that
    three = point(2, 9, reps=3)
    three_runs = slo_verdict_table([three], [three], ab_comparisons([three], [three]))
    assert three_runs is not None
    held = " ".join(table_text(three_runs).split())
    assert "no verdict: every run gave the same value" in held and "1 run" not in held


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # as typed: '--slo: --slo ...' named the flag twice
        ("ttft_p99_ms=1000;itl_p99_ms=50", "error: --slo 'ttft_p99_ms=1000;itl_p99_ms=50': "),
        ("ttft_p99_ms=1s", "error: --slo ttft_p99_ms='1s' is not a number"),  # held out
        ("ttft_p99=9", "error: --slo: unknown SLO key 'ttft_p99'"),
    ],
)
def test_the_slo_option_names_the_flag_once(
    text: str, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import typer

    from testbed.slo_option import slo_of

    with pytest.raises(typer.Exit):
        slo_of(text)
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith(line) and err.count("--slo") == 1 + err.count("write --slo")


def test_an_implausible_bound_names_the_key_as_written() -> None:
    """A file's camelCase key is named as the file spells it; ``--slo``'s as it spells it."""
    with pytest.raises(ValidationError, match=r"ttftP99Ms=0\.6 is 0\.6 ms, below any TTFT p99"):
        Slo.model_validate({"ttftP99Ms": 0.6})
    with pytest.raises(SloError, match=r"ttft_p99_ms=0\.6 is 0\.6 ms"):
        parse_slo("ttft_p99_ms=0.6")
