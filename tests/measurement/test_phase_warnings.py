"""Where the client's clock and the Dynamo frontend's disagree, the run says so: requests that
came back without the frontend's timing, a transfer estimate longer than what the client
waited (the residual below 0), and a client TTFT mostly outside the frontend's clock. The
frontend's fields are those of Dynamo 1.6 `lib/llm/src/protocols/common/timing.rs`
(`TimingInfo`), as `loadgen.request` keeps them; the records are built here, each phase a
known number of ms."""

from __future__ import annotations

from measurement.phases import RESIDUAL_ABOVE_MS, phase_warnings, run_phases
from measurement.record import RequestRecord
from measurement.stats import summarize_run

MS = 1_000_000


def _record(
    index: int,
    client_ms: float,
    frontend_ms: float | None,
    transfer_ms: float | None = None,
) -> RequestRecord:
    """A successful request whose client TTFT is ``client_ms``, the frontend's ``frontend_ms``
    (10 ms of it the prefill wait; None: no timing came back) and its transfer estimate."""
    sent = index * 1_000 * MS
    record = RequestRecord(index=index, prefix_id=0, intended_ns=sent, sent_ns=sent)
    record.first_token_ns = record.first_chunk_ns = sent + round(client_ms * MS)
    record.last_token_ns = record.end_ns = record.first_token_ns + 10 * MS
    record.token_ns = [record.first_token_ns, record.last_token_ns]
    record.status, record.finish_reason = 200, "length"
    record.prompt_tokens, record.completion_tokens = 100, 2
    if frontend_ms is not None:
        record.frontend_prefill_wait_ms = 10.0
        record.frontend_prefill_ms = frontend_ms - 10.0
        record.frontend_ttft_ms = frontend_ms
        record.kv_transfer_estimated_ms = transfer_ms
        record.prefill_worker_id, record.decode_worker_id = "1", "2" if transfer_ms else "1"
    return record


def test_agreeing_clocks_say_nothing() -> None:
    """Disaggregated, the frontend's TTFT plus its estimate 3 ms short of the client's."""
    records = [_record(i, 300.0, 200.0, 97.0) for i in range(4)]
    phases = run_phases(records)
    assert phases is not None and phases.phases["residual"].p50_ms == 3.0
    assert phase_warnings(phases, len(records)) == []
    run = summarize_run(records, prefix_kinds=2, concurrency=1, repetition=1)
    assert not [w for w in run.warnings if "frontend" in w]


def test_requests_without_the_frontends_timing_are_counted() -> None:
    records = [_record(0, 50.0, 45.0), _record(1, 50.0, None), _record(2, 50.0, 45.0)]
    phases = run_phases(records)
    assert phases is not None and phases.requests == 2
    assert phase_warnings(phases, 3) == [
        "1 of 3 successful requests came back without the frontend's timing (nvext.timing): "
        "their TTFT is not split into phases"
    ]
    assert phase_warnings(run_phases([_record(0, 50.0, None)]), 1) == []  # not Dynamo at all


def test_a_transfer_estimate_above_the_clients_ttft_is_said() -> None:
    """The frontend's TTFT 200 ms and its estimate 150 ms, the client saw 300 ms: the estimate
    (an upper bound, to the decode worker's first token) is 50 ms too long."""
    records = [_record(i, 300.0, 200.0, 150.0) for i in range(3)]
    run = summarize_run(records, prefix_kinds=2, concurrency=1, repetition=1)
    assert (
        "the frontend's TTFT plus its KV-transfer estimate (its estimate p50 150.0 ms) is longer "
        "than the client's TTFT (residual p50 -50.0 ms): the estimate is above the transfer the "
        "client waited for"
    ) in run.warnings


def test_a_client_ttft_mostly_outside_the_frontends_clock_is_said() -> None:
    """The client waited 400 ms for what the frontend timed at 100 ms (aggregated): 300 ms of
    network, proxy or client, above both the share and the floor; 60 ms more is neither."""
    records = [_record(i, 400.0, 100.0) for i in range(3)]
    run = summarize_run(records, prefix_kinds=2, concurrency=1, repetition=1)
    assert (
        "the client's TTFT (mean 400.0 ms) is far longer than the frontend's (mean 100.0 ms, "
        "with its KV-transfer estimate where disaggregated; residual p50 300.0 ms): most of it "
        "passed outside the frontend's clock, in the network or a proxy between them (kubectl "
        "port-forward) or a client too busy to read"
    ) in run.warnings
    near = [_record(i, 100.0 + RESIDUAL_ABOVE_MS - 40.0, 100.0) for i in range(3)]
    assert phase_warnings(run_phases(near), 3) == []
    slow = [_record(i, 1_000.0, 700.0) for i in range(3)]  # 300 ms, but under half of it
    assert phase_warnings(run_phases(slow), 3) == []
