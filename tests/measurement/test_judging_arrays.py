"""The array-wise judging of a run gives the figures of the per-token definitions, to the bit:
percentiles, the ITLs of reads with several events, and the warm figures judged from the run's
latencies against the warm requests judged alone."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from records import MS, record

from measurement.goodput import evaluate_run, figures
from measurement.percentile import percentile
from measurement.record import RequestRecord
from measurement.stats import Latencies, bounded_percentile, first_of_client, summarize_run
from metrics.latency import icl_ms, itl_ms
from workload.slo import SloError, parse_slo


def sorted_percentile(values: list[float], q: float) -> float:
    """The definition: linear between the closest ranks of the sorted values."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@settings(deadline=None)  # the first example imports numpy
@given(
    st.lists(st.floats(-1e9, 1e9) | st.integers(0, 10**6), min_size=1, max_size=300),
    st.sampled_from([0.0, 37.5, 50.0, 90.0, 99.0, 99.9, 100.0]),
)
def test_percentile_is_the_sorted_definition_to_the_bit(values: list[float], q: float) -> None:
    assert percentile(values, q) == sorted_percentile(values, q)


def test_a_bounded_percentile_reads_the_upper_rank() -> None:
    samples = [(float(v), False) for v in range(1, 101)]
    # p99 of 1..100 interpolates between ranks 98 and 99 (99.0 and 100.0): 99.01
    assert bounded_percentile(samples, 99) == (99.01, False)
    assert bounded_percentile([*samples[:-1], (100.0, True)], 99)[1] is True
    assert bounded_percentile([*samples[:-1], (500.0, True)], 99) == (
        sorted_percentile([*range(1, 100), 500.0], 99),
        True,
    )


def test_events_of_one_read_make_one_itl_over_their_tokens() -> None:
    r = record(0, 0, 10, [7, 0, 0, 13, 5], completion=6)  # reads at 10, 17 (3 events), 30, 35
    r.chunk_tokens = [1, 2, 1, 1, 3, 1]
    assert icl_ms(r) == [7.0, 13.0, 5.0]
    # 7 ms over the 4 tokens of the 3 events at 17 ms, then 13 / 3 and 5 / 1
    assert itl_ms(r) == [7.0 / 4.0, 13.0 / 3.0, 5.0]


def test_the_warm_figures_are_the_warm_requests_judged_alone() -> None:
    slo = parse_slo("ttft_p99_ms=1000,itl_p90_ms=40,tpot_p99_ms=50,e2e_p50_ms=900")
    records: list[RequestRecord] = [
        record(i, i * 3, 100 + 37 * i, [5 + (i * j) % 23 for j in range(40 + i)]) for i in range(12)
    ]
    records[5].token_ns[10] = records[5].token_ns[9]  # two events in one read
    cut = record(12, 4, 900, [])
    cut.error_kind, cut.censored, cut.error_ns, cut.first_token_ns = "timeout", True, 950 * MS, None
    records.append(cut)
    judged = evaluate_run(records, slo, concurrency=4)
    cold = first_of_client(records, 4, closed=True)
    warm = [r for r, c in zip(records, cold, strict=True) if r.ok and not c]
    assert judged.cold == 4
    assert judged.values_warm_ms == figures(warm, slo)
    assert judged.values_ms == figures(records, slo)
    assert judged.values_ms["itl_p90_ms"] == sorted_percentile(
        [gap for r in records if r.ok for gap in itl_ms(r)], 90
    )


@st.composite
def run_records(draw: st.DrawFn) -> list[RequestRecord]:
    """A run of successful requests (gaps of 0: events in one read; some with per-chunk
    counts, some with a hidden reasoning count), failed ones and censored ones."""
    records: list[RequestRecord] = []
    for i in range(draw(st.integers(1, 14))):
        gaps = draw(st.lists(st.integers(0, 40), max_size=30))
        r = record(i, draw(st.integers(0, 500)), draw(st.integers(1, 900)), gaps)
        kind = draw(st.sampled_from(["ok", "ok", "chunks", "timeout", "http"]))
        if kind == "chunks":
            r.chunk_tokens = draw(st.lists(st.integers(1, 4), min_size=len(r.token_ns)))[
                : len(r.token_ns)
            ]
            r.reasoning_tokens = draw(st.integers(0, 3))
        elif kind == "timeout":
            r.error_kind, r.censored, r.error_ns = "timeout", True, r.token_ns[0] + MS
            r.first_token_ns = None if draw(st.booleans()) else r.first_token_ns
        elif kind == "http":
            r.error_kind, r.status, r.error_ns = "http_status", 503, r.sent_ns
        records.append(r)
    return records


@settings(deadline=None, max_examples=300)
@given(run_records(), st.integers(1, 6), st.booleans())
def test_a_run_judged_from_its_summarys_latencies_is_the_same_to_the_byte(
    records: list[RequestRecord], concurrency: int, closed: bool
) -> None:
    """The latencies computed once and handed to both the summary and the SLO judgement give
    the JSON each gives computing its own."""
    slo = parse_slo("ttft_p99_ms=400,itl_p90_ms=20,tpot_p99_ms=25,e2e_p50_ms=900,ttft_p50_ms=300")
    rate = None if closed else 3.5
    shared = Latencies.of([r for r in records if r.ok])

    def summary(latencies: Latencies | None) -> str:
        return summarize_run(
            records,
            prefix_kinds=2,
            concurrency=concurrency,
            repetition=0,
            offered_rate_per_s=rate,
            latencies=latencies,
        ).model_dump_json()

    assert summary(shared) == summary(None)

    def judged(latencies: Latencies | None) -> str:
        try:
            run = evaluate_run(
                records, slo, concurrency=concurrency, closed=closed, latencies=latencies
            )
        except SloError as exc:  # no request with an ITL: refused alike
            return str(exc)
        return run.model_dump_json()

    assert judged(shared) == judged(None)


def test_a_runs_summary_and_judgement_take_each_percentile_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The summary and the SLO judgement of one run, handed the same latencies, ask for the
    p99s of all and of the warm requests twice each: each percentile of each latency is
    computed once, the warm requests' subset once (`Latencies.memo`), and the figures are
    those computed afresh."""
    import measurement.stats as stats

    slo = parse_slo("ttft_p99_ms=1000,itl_p99_ms=40")
    records = [
        record(i, i * 3, 100 + 37 * i, [5 + (i * j) % 23 for j in range(30)]) for i in range(9)
    ]
    shared = Latencies.of(records)
    taken: list[int] = []
    real = stats.percentile

    def counted(values, q):  # type: ignore[no-untyped-def]
        taken.append(len(values))
        return real(values, q)

    monkeypatch.setattr(stats, "percentile", counted)
    summary = summarize_run(records, prefix_kinds=1, concurrency=3, repetition=0, latencies=shared)
    warm = len(shared.itl) - 3 * 30  # the first request of each of the 3 clients is cold
    after_summary = [taken.count(len(shared.itl)), taken.count(warm)]
    judged = evaluate_run(records, slo, concurrency=3, latencies=shared)
    # every ITL's p50 and p99 and every gap's p50 (as many), the warm ITLs' p99: none again
    assert [taken.count(len(shared.itl)), taken.count(warm)] == after_summary == [3, 1]
    assert judged.values_ms == figures(records, slo)
    assert summary.itl_p99_ms == judged.values_ms["itl_p99_ms"]
