"""What the stream showed against what the server said: named non-message SSE events, a usage
the stream contradicts, and reasoning (streamed or hidden), each against the fake server, as
one request's record and as the run's figures, warnings and SLO judgement."""

import statistics
from collections.abc import Sequence

import pytest
from fake_openai_server import (
    DONE,
    Send,
    Step,
    chat_chunk,
    named_event,
    paced_stream,
)
from test_request import fetch as fetch_record

from loadgen.output_tokens import CHUNKS, count_output_tokens
from measurement.errors import ErrorKind
from measurement.goodput import evaluate_run, missed
from measurement.record import RequestRecord
from measurement.results import RunSummary
from measurement.stats import summarize_run
from metrics.latency import (
    answered,
    chunk_tokens,
    icl_ms,
    itl_ms,
    tpot_ms,
    ttfo_ms,
    ttft_ms,
)
from outputs.folder_writer import records_frame, records_from_frame
from workload.slo import parse_slo

pytestmark = pytest.mark.asyncio

TOKEN_S = 0.002  # the server's pause before each chunk


async def fetch(steps: Sequence[Step], max_tokens: int | None = 16) -> RequestRecord:
    """Serve `steps` once; the record as the run keeps it (`count_output_tokens` applied, one
    token per chunk, against `max_tokens`)."""
    record = await fetch_record(steps)
    count_output_tokens([record], None, max_tokens)
    return record


def summary_warnings(record: RequestRecord, max_tokens: int | None = 16) -> list[str]:
    summary = summarize_run(
        [record], prefix_kinds=1, concurrency=1, repetition=1, max_tokens=max_tokens
    )
    return summary.warnings


# Named events that are not messages ------------------------------------------------------


async def test_named_ping_events_with_timestamps_are_skipped_and_counted() -> None:
    """A keep-alive `event: ping` whose data is a timestamp (not JSON) before every chunk: not
    a message (HTML standard), so skipped and counted; the request succeeds with its 16
    tokens."""
    record = await fetch(paced_stream(16, token_s=TOKEN_S, ping=True))
    assert record.ok, record.error
    assert (record.ignored_events, len(record.token_ns), record.completion_tokens) == (16, 16, 16)
    summary = summarize_run([record], prefix_kinds=1, concurrency=1, repetition=1, max_tokens=16)
    assert summary.ignored_events == 16
    assert [w for w in summary.warnings if "not messages" in w] == [
        "16 named server-sent event(s) that are not messages (an `event:` field other than "
        "message, such as a keep-alive ping) came in 1 of 1 requests: skipped, as the HTML "
        "standard's EventSource does (neither chunks nor errors)"
    ]


async def test_an_event_named_message_is_a_message_and_error_stays_an_error() -> None:
    named = named_event("message", '{"choices": [{"delta": {"content": "a"}}]}')
    record = await fetch([Send(named), Send(chat_chunk(finish="stop")), Send(DONE)])
    assert record.ok and len(record.token_ns) == 1 and record.ignored_events == 0
    record = await fetch([Send(chat_chunk("a")), Send(named_event("error", "overloaded"))])
    assert (record.error_kind, record.error) == (ErrorKind.IN_BAND, "overloaded")


async def test_a_stream_of_pings_only_is_an_empty_stream_that_says_so() -> None:
    steps = [Send(named_event("ping", "1")), Send(named_event("ping", "2")), Send(DONE)]
    record = await fetch(steps)
    assert record.error_kind is ErrorKind.EMPTY_STREAM
    assert record.error is not None and "(2 named non-message event(s) skipped)" in record.error


# Usage that contradicts the stream -----------------------------------------------------


async def test_a_zero_usage_after_streamed_tokens_is_counted_from_the_stream() -> None:
    record = await fetch(paced_stream(16, token_s=TOKEN_S, usage=0))
    assert record.ok, record.error
    assert (record.completion_tokens, record.completion_tokens_from) == (16, CHUNKS)
    assert record.usage_completion_tokens == 0
    tpot, ttft = tpot_ms(record), ttft_ms(record)
    assert tpot is not None and ttft is not None
    summary = summarize_run([record], prefix_kinds=1, concurrency=1, repetition=1, max_tokens=16)
    assert (summary.usage_contradicted, summary.output_tokens_mismatch) == (1, 0)
    assert summary.output_tokens_per_s > 0
    (said,) = [w for w in summary.warnings if "contradicts" in w]
    assert "the server said 0, max_tokens 16; counted from the stream: p50 16" in said
    assert not [w for w in summary.warnings if "reported no usage" in w]


@pytest.mark.parametrize("max_tokens", [16, None], ids=["above-max-tokens", "above-the-text"])
async def test_a_usage_summing_running_totals_is_not_spread_over_the_chunks(
    max_tokens: int | None,
) -> None:
    """16 one-character chunks and a usage of 1 + 2 + ... + 16 = 136: above max_tokens 16,
    and (with no max_tokens to compare, as with per-request output lengths) more than 16
    characters can hold. Counted from the stream: one token per chunk, so each ITL is its
    chunk gap, not a gap / 8.5."""
    record = await fetch(paced_stream(16, token_s=TOKEN_S, usage=136), max_tokens)
    assert record.ok, record.error
    assert (record.completion_tokens, record.usage_completion_tokens) == (16, 136)
    assert chunk_tokens(record) == [1.0] * 16
    assert itl_ms(record) == icl_ms(record)
    (said,) = [w for w in summary_warnings(record, max_tokens) if "contradicts" in w]
    assert "the server said 136" in said


async def test_a_usage_the_text_can_hold_is_the_servers() -> None:
    """Multi-token chunks are the server's to say: 16 chunks of one character with a usage of
    17 (the end-of-sequence token) stays."""
    record = await fetch(paced_stream(16, token_s=TOKEN_S, usage=17), None)
    assert (record.completion_tokens, record.completion_tokens_from) == (17, None)
    assert record.usage_completion_tokens is None


# Reasoning ------------------------------------------------------------------------------


async def test_hidden_reasoning_tokens_are_not_spread_over_the_visible_chunks() -> None:
    """16 visible tokens after 32 hidden reasoning tokens (usage 48, reasoning_tokens 32):
    each ITL is its chunk gap, TPOT the gaps over 15 tokens, not a third of them; an ITL
    objective below the gaps is missed."""
    record = await fetch(paced_stream(16, token_s=0.01, hidden=32), 48)
    assert record.ok, record.error
    assert (record.completion_tokens, record.reasoning_tokens) == (48, 32)
    assert (record.completion_tokens_from, record.reasoning_events) == (None, 0)
    assert chunk_tokens(record) == [1.0] * 16
    assert itl_ms(record) == icl_ms(record)
    tpot, ttft, ttfo = tpot_ms(record), ttft_ms(record), ttfo_ms(record)
    assert tpot == pytest.approx(sum(icl_ms(record)) / 15)
    assert ttfo == ttft
    # Half its median gap (10 ms at the server): above the median gap / 3 that spreading the
    # hidden tokens would give, below the median ITL seen
    bound = statistics.median(icl_ms(record)) / 2
    assert missed(record, parse_slo(f"itl_p50_ms={bound}")) == ["itl_p50_ms"]
    summary = summarize_run([record], prefix_kinds=1, concurrency=1, repetition=1, max_tokens=48)
    assert summary.reasoning_tokens_p50 == 32
    assert [w for w in summary.warnings if "hidden" in w] == [
        "1 of 1 successful requests counted 32 reasoning tokens in their usage "
        "(completion_tokens_details.reasoning_tokens) that the stream never carried: hidden, "
        "they are left out of ITL and TPOT, which count the tokens the client saw, and kept in "
        "output tokens/s"
    ]


async def test_per_chunk_usage_after_hidden_reasoning_leaves_it_out_of_the_first_chunk() -> None:
    """vLLM's continuous usage after 32 hidden reasoning tokens: the first content chunk's
    usage grows by 33 (the reasoning and its own token); the client saw 1 token in it, so the
    4 chunks 10 ms apart give TPOT 10 ms, not none (4 seen - 33 < 1)."""
    ms = 1_000_000
    record = RequestRecord(index=0, prefix_id=0, sent_ns=0, first_token_ns=50 * ms)
    record.token_ns = [50 * ms, 60 * ms, 70 * ms, 80 * ms]
    record.last_token_ns, record.chunk_tokens = 80 * ms, [33, 1, 1, 1]
    record.completion_tokens, record.reasoning_tokens = 36, 32
    assert chunk_tokens(record) == [1.0] * 4
    assert tpot_ms(record) == pytest.approx(10.0)


async def test_streamed_reasoning_gives_ttfo_after_ttft_and_counts_as_seen() -> None:
    record = await fetch(paced_stream(4, token_s=TOKEN_S, streamed_reasoning=3), 7)
    assert record.ok, record.error
    assert (record.reasoning_events, record.reasoning_tokens, record.completion_tokens) == (3, 3, 7)
    assert (record.first_token_ns, record.first_output_ns) == (
        record.token_ns[0],
        record.token_ns[3],
    )
    ttft, ttfo = ttft_ms(record), ttfo_ms(record)
    assert ttft is not None and ttfo is not None and ttfo > ttft
    assert chunk_tokens(record) == [1.0] * 7  # streamed reasoning is seen: 7 tokens, 7 chunks
    summary = summarize_run([record], prefix_kinds=1, concurrency=1, repetition=1)
    assert (summary.ttft_p50_ms, summary.ttfo_p50_ms) == (ttft, ttfo)


@pytest.mark.parametrize(
    "steps",
    [
        paced_stream(0, token_s=TOKEN_S, hidden=16),
        paced_stream(0, token_s=TOKEN_S, streamed_reasoning=16),
    ],
    ids=["hidden", "streamed"],
)
async def test_a_reply_all_reasoning_misses_ttft_and_e2e_and_earns_no_goodput(
    steps: list[Step],
) -> None:
    """The whole budget spent on reasoning: a success (the server generated tokens) that
    showed no visible token, so no TTFO, a miss of every TTFT and E2E objective however
    generous, and no goodput; an answered reply beside it meets them."""
    blank = await fetch(steps)
    assert blank.ok, blank.error
    assert (blank.completion_tokens, blank.reasoning_tokens) == (16, 16)
    assert not answered(blank) and ttfo_ms(blank) is None
    good = await fetch(paced_stream(16, token_s=TOKEN_S))
    assert answered(good)
    slo = parse_slo("ttft_p99_ms=600000,e2e_p99_ms=3600000")
    assert missed(blank, slo) == ["ttft_p99_ms", "e2e_p99_ms"]
    assert missed(good, slo) == []
    judged = evaluate_run([blank, good], slo, concurrency=1)
    assert (judged.met, judged.attainment) == (1, 0.5)
    assert judged.missed_by == {"ttft_p99_ms": 1, "e2e_p99_ms": 1}
    assert judged.goodput_output_tokens_per_s * judged.duration_s == pytest.approx(16)
    summary = summarize_run([blank, good], prefix_kinds=1, concurrency=1, repetition=1)
    assert summary.unanswered == 1


async def test_a_textless_stream_without_reasoning_is_answered() -> None:
    """The Dynamo mocker's text-less chunks with a usage and no reasoning detail: answered."""
    steps: list[Step] = [Send(chat_chunk("", role="assistant")), Send(chat_chunk(""))]
    steps += [Send(chat_chunk(finish="length"))]
    record = await fetch([*steps, *paced_stream(0, token_s=0, usage=3)[-2:]])
    assert record.ok and record.completion_tokens == 3 and answered(record)


# Stored results -------------------------------------------------------------------------

NEW_RECORD_FIELDS = [
    "first_output_ns",
    "reasoning_events",
    "reasoning_tokens",
    "usage_completion_tokens",
    "ignored_events",
]
NEW_SUMMARY_FIELDS = {
    "usage_contradicted",
    "ttfo_p50_ms",
    "ttfo_p99_ms",
    "reasoning_tokens_p50",
    "unanswered",
    "ignored_events",
}


async def test_results_stored_without_the_new_fields_still_load() -> None:
    """A requests.parquet and a run summary written before these fields existed read back with
    their defaults: no reasoning, so TTFO is TTFT and the reply is answered."""
    record = await fetch(paced_stream(4, token_s=TOKEN_S))
    frame = records_frame(1, 1, 1, [record]).drop(columns=NEW_RECORD_FIELDS)
    (old,) = records_from_frame(frame)
    assert (old.first_output_ns, old.reasoning_events, old.ignored_events) == (None, 0, 0)
    assert answered(old) and ttfo_ms(old) == ttft_ms(old) == ttft_ms(record)
    summary = summarize_run([record], prefix_kinds=1, concurrency=1, repetition=1)
    stored = summary.model_dump(mode="json", exclude=NEW_SUMMARY_FIELDS)
    again = RunSummary.model_validate(stored)
    assert (again.ttfo_p50_ms, again.unanswered, again.ignored_events) == (None, 0, 0)
