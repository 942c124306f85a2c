"""Run and grid-point summaries from records with known times (ns): exact values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from records import MS, record

from measurement.client_cost import Warmup, client_budget_warning
from measurement.errors import ErrorKind
from measurement.percentile import percentile
from measurement.record import RequestRecord
from measurement.stats import summarize_point, summarize_run
from metrics.latency import itl_ms, tpot_ms


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-6)


def test_percentile_edges() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)


def test_itl_and_tpot_follow_vllm() -> None:
    r = record(0, 1000, 50, [10, 20, 30], completion=4)
    assert itl_ms(r) == [10, 20, 30]
    # E2E = 50 + 60 = 110 ms (to the last token, not the body's end 2 ms later); (110 - 50) / 3
    assert tpot_ms(r) == pytest.approx(60 / 3)
    assert tpot_ms(record(1, 0, 5, [], completion=1)) is None


def test_run_summary_exact_values_and_errors_excluded() -> None:
    good = [
        record(0, 0, 40, [10, 10], prompt=1000, cached=800),
        record(1, 0, 60, [20, 20], prompt=1000, cached=None),  # did not report cached tokens
        record(2, 100, 80, [30, 30], prompt=3000, cached=0),
    ]
    failed = RequestRecord(index=3, prefix_id=1, intended_ns=0, sent_ns=0, first_token_ns=MS)
    failed.fail(ErrorKind.HTTP_STATUS, "HTTP 503")
    timeout = RequestRecord(index=4, prefix_id=1, intended_ns=0)
    timeout.fail(ErrorKind.TIMEOUT, "deadline")
    s = summarize_run([*good, failed, timeout], prefix_kinds=2, concurrency=4, repetition=1)
    assert (s.requests, s.samples, s.errors) == (5, 3, 2)
    assert s.errors_by_kind == {"http_status": 1, "timeout": 1}
    assert s.ttft_p50_ms == 60
    assert s.ttft_p99_ms == pytest.approx(40 + (80 - 40) * 0.99)  # linear between 60 and 80
    assert s.first_chunk_p50_ms == 59
    assert s.itl_p50_ms == 20  # pooled [10, 10, 20, 20, 30, 30]
    assert s.e2e_p50_ms == 100  # [60, 100, 140]: to the last token, not the body's end
    # span: first send 0 ms to last end 100 + 80 + 60 + 2 = 242 ms
    assert s.duration_s == pytest.approx(0.242)
    assert s.requests_per_s == pytest.approx(3 / 0.242)
    assert s.output_tokens_per_s == pytest.approx(9 / 0.242)
    # The request without details counts as 0 cached: the server reported it for the others.
    assert s.cached_ratio == pytest.approx(800 / 5000)
    assert (s.cached_reported, s.cached_missing) == (2, 1)
    assert s.queue_p50_ms == 1  # intended 1 ms before sent for the three
    assert s.warnings == [
        "1 of 3 successful requests reported no usage.prompt_tokens_details.cached_tokens while "
        "others in the run did: counted as 0 cached tokens (the server omits the field when "
        "nothing was cached)",
        "TTFT p99 rests on 3 samples (< 100): it is close to the maximum, not a stable p99",
    ]


def test_requests_without_content_text_are_flagged() -> None:
    r = record(0, 0, 10, [])
    r.first_token_ns, r.token_ns = None, []
    s = summarize_run([r], prefix_kinds=1, concurrency=1, repetition=1)
    assert s.ttft_p50_ms is None
    assert s.first_chunk_p50_ms == 9
    assert any("1 of 1 successful requests streamed no content text" in w for w in s.warnings)


def test_no_warning_with_enough_samples_and_no_cached_ratio_without_reports() -> None:
    s = summarize_run(
        [record(i, i, 10, [5]) for i in range(100)], prefix_kinds=1, concurrency=1, repetition=1
    )
    assert s.warnings == []
    assert (s.cached_ratio, s.cached_reported) == (None, 0)


def test_point_is_the_median_of_its_runs() -> None:
    runs = [
        summarize_run(
            [record(0, 0, ttft, [5], prompt=100, cached=cached)],
            prefix_kinds=7,
            concurrency=8,
            repetition=rep,
        )
        for rep, (ttft, cached) in enumerate([(30, 10), (10, 50), (20, 30)], start=1)
    ]
    p = summarize_point(runs)
    assert (p.prefix_kinds, p.concurrency, p.repetitions, p.samples) == (7, 8, 3, 3)
    assert p.ttft_p50_ms == 20
    assert p.cached_ratio == pytest.approx(0.3)
    with pytest.raises(ValueError, match="several grid points"):
        summarize_point([runs[0], runs[0].model_copy(update={"concurrency": 4})])


def test_shortfall_with_room_in_flight_blames_a_busy_client_or_nobody() -> None:
    """Ten requests offered at 100/s went out 20 ms apart (50/s), one at a time of a cap of
    4: not the cap. With 0.18 s of client CPU over the 0.188 s from first send to last end the
    client was busy; with
    none, no client-side cause is seen."""
    records = [record(i, 20 * i, 5, [1]) for i in range(10)]
    for r in records:
        r.intended_ns = (r.sent_ns or 0) - MS

    def warning(cpu_s: float) -> str:
        s = summarize_run(
            records, prefix_kinds=1, concurrency=4, repetition=1, client_cpu_s=cpu_s,
            offered_rate_per_s=100.0, loop_lags_ms=[0.5] * 100,
        )  # fmt: skip
        assert s.sent_rate_per_s == pytest.approx(9 / 0.181)  # first intended -1 ms to 180 ms
        assert s.max_in_flight == 1
        (shortfall,) = [w for w in s.warnings if "offered" in w]
        return shortfall

    assert warning(0.18) == (
        "sent 49.7 of the offered 100.0 requests/s: the client was busy: 96% of a core, "
        "event-loop lag p99 0.5 ms; use more workers or client cores"
    )
    assert warning(0.0) == (
        "sent 49.7 of the offered 100.0 requests/s: no client-side cause seen (at most 1 of 4 in "
        "flight, the client kept up): the server or the network took requests slowly"
    )


def test_client_budget_warning_before_a_run_too_big_for_one_core() -> None:
    """0.25 ms of client CPU per request (the warm-up's) and a 50 ms server: c=256 needs
    ~5,120 requests/s x 0.25 ms = 1.28 cores in one process: said before the run; c=64
    (0.32 of a core), the same over 2 processes at c=128, and a 100/s open loop are fine."""
    warm = Warmup(requests=256, cpu_s=0.064, e2e_mean_s=0.05)
    assert client_budget_warning(warm, concurrency=256, offered_rate_per_s=None, workers=1) == (
        "before the run: about 5,120 requests/s (256 streams / 50 ms mean E2E in the warm-up) "
        "x 0.25 ms of client CPU each (measured in the warm-up) = 1.28 of a core per client "
        "process (1 process(es)): more than one core can time honestly, so TTFT and ITL will be "
        "read late; give the client more CPUs (workers) or lower the concurrency"
    )
    assert client_budget_warning(warm, concurrency=64, offered_rate_per_s=None, workers=1) is None
    assert client_budget_warning(warm, concurrency=128, offered_rate_per_s=None, workers=2) is None
    assert client_budget_warning(warm, concurrency=1, offered_rate_per_s=100.0, workers=1) is None
    offered = client_budget_warning(warm, concurrency=1, offered_rate_per_s=4000.0, workers=1)
    assert offered is not None and "about 4,000 requests/s (offered) x 0.25 ms" in offered
    no_warmup = Warmup(requests=0, cpu_s=0.0, e2e_mean_s=None)
    assert (
        client_budget_warning(no_warmup, concurrency=256, offered_rate_per_s=None, workers=1)
        is None
    )


def test_multi_token_chunks_give_per_token_tpot_and_itl() -> None:
    """8 chunks of 8 tokens, 80 ms apart (10 ms per token), only a final usage: TPOT and ITL
    are 10 ms per token (not 560 / 63 = 8.9 ms and 80 ms), the chunking is recorded and noted."""
    r = record(0, 0, 100, [80] * 7, completion=64)
    assert tpot_ms(r) == pytest.approx(10.0)
    assert itl_ms(r) == pytest.approx([10.0] * 7)
    s = summarize_run([r], prefix_kinds=1, concurrency=1, repetition=1)
    assert (s.tpot_p50_ms, s.itl_p50_ms, s.icl_p50_ms) == pytest.approx((10.0, 10.0, 80.0))
    assert s.tokens_per_chunk_p50 == 8.0
    assert any(
        "1 of 1 successful requests streamed 1.5 or more tokens per chunk (tokens per chunk "
        "p50 8.0, from the final usage"
        in w
        and "ICL) p50 is 80.0 ms" in w
        for w in s.warnings
    ), s.warnings


def test_per_chunk_counts_are_exact_when_the_server_sends_them() -> None:
    """vLLM's stream interval: the first token alone, then chunks of 9, 20 ms apart; counts
    from per-chunk usage: ITL 20 / 9 ms, TPOT 60 / 27 ms (the first chunk's one token out)."""
    r = record(0, 0, 50, [20, 20, 20], completion=28)
    r.chunk_tokens = [1, 9, 9, 9]
    assert tpot_ms(r) == pytest.approx(60 / 27)
    assert itl_ms(r) == pytest.approx([20 / 9] * 3)


def test_one_token_per_chunk_and_a_textless_end_token_keep_vllms_definitions() -> None:
    """Four content chunks and completion_tokens 5 (an end-of-sequence token with no text):
    still one token per chunk, so ITL is the gaps and TPOT (E2E - TTFT) / (5 - 1), no note."""
    r = record(0, 0, 50, [10, 20, 30], completion=5)
    assert itl_ms(r) == [10, 20, 30]
    assert tpot_ms(r) == pytest.approx(60 / 4)
    s = summarize_run([r], prefix_kinds=1, concurrency=1, repetition=1)
    assert s.tokens_per_chunk_p50 == 1.0
    assert not any("tokens per chunk" in w for w in s.warnings)


def test_absent_cached_details_count_as_zero_when_the_server_reports_them_elsewhere() -> None:
    """Half the requests hit 900 of 1000 tokens, the other half omit prompt_tokens_details
    (nothing cached): the truth is 0.45, not 0.90 over the requests that reported."""
    hits = [record(i, i, 10, [5], prompt=1000, cached=900) for i in range(5)]
    misses = [record(i, i, 10, [5], prompt=1000) for i in range(5, 10)]
    s = summarize_run([*hits, *misses], prefix_kinds=1, concurrency=1, repetition=1)
    assert s.cached_ratio == pytest.approx(0.45)
    assert (s.cached_reported, s.cached_missing) == (5, 5)


def test_cached_tokens_that_cannot_be_a_prefix_hit_are_flagged() -> None:
    """A disaggregated decode worker reports prompt - 1 cached tokens (vLLM #43370) on prompts
    whose last 100 tokens are unique: counted and warned about; the ratio keeps its value."""
    decode = [record(i, i, 10, [5], prompt=1000, cached=999) for i in range(3)]
    honest = [record(3, 3, 10, [5], prompt=1000, cached=896)]
    s = summarize_run(
        [*decode, *honest], prefix_kinds=1, concurrency=1, repetition=1, unique_suffix_tokens=100
    )
    assert s.cached_not_prefix_hits == 3
    assert s.cached_ratio == pytest.approx((3 * 999 + 896) / 4000)
    assert any(
        w.startswith(
            "3 of 4 requests reported cached tokens >= prompt - 1 although each "
            "prompt ends in 100 tokens of its own"
        )
        for w in s.warnings
    )
    whole = summarize_run(decode, prefix_kinds=1, concurrency=1, repetition=1)
    assert whole.cached_not_prefix_hits == 0  # no unique suffix: a full hit is possible


def test_output_lengths_are_reported_against_max_tokens() -> None:
    """Two of three requests stopped early (EOS) under max_tokens 4: counted and warned about,
    with the p50 of what was produced; requests that produced max_tokens are not."""
    runs = [record(0, 0, 10, [5, 5, 5]), record(1, 0, 10, [5]), record(2, 0, 10, [])]
    s = summarize_run(runs, prefix_kinds=1, concurrency=1, repetition=1, max_tokens=4)
    assert (s.output_tokens_p50, s.output_tokens_mismatch) == (2, 2)
    assert any(
        w.startswith(
            "2 of 3 successful requests produced another output length than the max_tokens 4 "
            "asked for (output tokens p50 2, from usage.completion_tokens)"
        )
        for w in s.warnings
    )
    full = summarize_run(runs[:1], prefix_kinds=1, concurrency=1, repetition=1, max_tokens=4)
    assert full.output_tokens_mismatch == 0
