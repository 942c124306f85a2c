"""Requests that end badly, each class with several shapes of it (held-out variants: a fix
that recognises one shape fails the others), against `fake_openai_server` (a hand-written
fault server) or as records: streams that end without finishing, deadlines, outages mid-grid,
lost scrapes, the client's own socket limits, Retry-After, what the server really processed,
tokens per chunk near one and work left running on the server."""

import errno
import itertools
import resource
import statistics
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import aiohappyeyeballs.impl
import pytest
from fake_openai_server import (
    DONE,
    Close,
    FakeServer,
    Send,
    Sleep,
    Status,
    Step,
    chat_chunk,
    event,
    normal_stream,
    usage_chunk,
)

from loadgen import server_metrics
from loadgen.loops import make_client, raise_open_file_limit, run_closed_loop
from loadgen.observers import GridObserver
from loadgen.request import retry_after_s, stream_request
from loadgen.runner import GridRun, run_grid_async
from loadgen.server_metrics import in_flight, in_flight_notes, parse_samples
from measurement.errors import ErrorKind
from measurement.goodput import evaluate_run
from measurement.record import RequestRecord
from measurement.results import GridResult, ServerRunMetrics
from measurement.stats import bounded_percentile, outage_of, summarize_point, summarize_run
from metrics.latency import itl_ms, tpot_ms
from outputs.tables import prompt_sizes, seed_rows, table_headers
from workload.config import LoadConfig
from workload.slo import parse_slo

PATH = "/v1/chat/completions"
BODY = b'{"model": "m", "messages": [], "stream": true, "max_tokens": 3}'
MS = 1_000_000


async def fetch(steps: Sequence[Step], **config: Any) -> RequestRecord:
    """One request against a server that answers `steps`."""
    settings = LoadConfig(**config)
    async with FakeServer(lambda body, n: steps) as server:
        record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
        async with make_client(server.url, settings, 1) as client:
            await stream_request(client, PATH, BODY, record, settings.request_timeout_s)
    return record


def choice_event(finish: object, text: str | None = None, completions: bool = False) -> bytes:
    """A chunk whose only choice ends with `finish` (any JSON value), chat or completions."""
    if completions:
        choice: dict[str, object] = {"index": 0, "text": text or "", "finish_reason": finish}
    else:
        delta = {} if text is None else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return event({"id": "x", "choices": [choice]})


# 1. Requests that end without finishing ------------------------------------------------------

UNFINISHED = {
    "vllm-abort-after-tokens": [
        *(Send(chat_chunk(t)) for t in "ab"),
        Send(choice_event("abort")),
        Send(usage_chunk(10, 2, 0)),
        Send(DONE),
    ],
    "vllm-error-no-token": [Send(choice_event("error")), Send(DONE)],
    "completions-abort-with-text": [Send(choice_event("abort", "a", completions=True)), Send(DONE)],
    "sglang-abort-object": [
        Send(chat_chunk("a")),
        Send(choice_event({"type": "abort", "message": "client disconnected"})),
        Send(DONE),
    ],
    "upper-case-without-done": [Send(chat_chunk("a")), Send(choice_event("ABORT"))],
    "cancelled": [Send(chat_chunk("a")), Send(choice_event("cancelled")), Send(DONE)],
}


@pytest.mark.asyncio
@pytest.mark.parametrize("steps", UNFINISHED.values(), ids=UNFINISHED.keys())
async def test_a_stream_that_ends_without_finishing_is_a_failure(steps: list[Step]) -> None:
    record = await fetch(steps)
    assert record.status == 200
    assert record.error_kind == ErrorKind.ABORTED, record.error
    assert record.error is not None and "finish_reason" in record.error


@pytest.mark.asyncio
@pytest.mark.parametrize("finish", ["stop", "length", "tool_calls", "content_filter"])
async def test_streams_that_finished_stay_successes(finish: str) -> None:
    record = await fetch([Send(chat_chunk("a")), Send(choice_event(finish)), Send(DONE)])
    assert record.ok, record.error
    assert record.finish_reason == finish


@pytest.mark.asyncio
async def test_aborted_requests_never_raise_requests_per_second() -> None:
    """Every other request is aborted at once, the others take 50 ms: the aborts are
    failures, requests/s counts the finished ones only, and the run says why."""

    def half_aborted(body: dict[str, Any], n: int) -> list[Step]:
        if n % 2:
            return [Send(chat_chunk("a")), Send(choice_event("abort")), Send(DONE)]
        return [Sleep(0.05), *normal_stream(["a", "b"])]

    config = LoadConfig(
        prefix_kinds=[1], concurrency=[1], repetitions=1, requests_per_run=8, warmup_requests=0
    )
    config = config.model_copy(update={"prompt_tokens": 20})
    async with FakeServer(half_aborted) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, None, progress=False))
    (run,) = result.runs
    assert run.samples + run.errors == 8 and run.errors_by_kind == {"aborted": run.errors}
    assert run.errors >= 3
    # At most one finished request per 50 ms: the instant aborts add nothing to the rate.
    assert run.requests_per_s <= run.samples / ((run.samples - 1) * 0.05)
    assert any("finish_reason abort: the server gave up on them" in w for w in run.warnings)


# 3. Deadlines: censored requests count in the percentiles -------------------------------------


def stalled(after_tokens: int) -> list[Step]:
    """A stream that stops after `after_tokens` tokens and never ends (for the test's span)."""
    return [*(Send(chat_chunk("t")) for _ in range(after_tokens)), Sleep(5.0)]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("steps", "config", "token_seen"),
    [
        ([Sleep(5.0)], {"request_timeout_s": 0.3}, False),  # the deadline, before a byte
        (stalled(0), {"request_timeout_s": 0.3}, False),  # headers sent, no token yet
        ([Sleep(5.0)], {"read_timeout_s": 0.3}, False),  # the read timeout, not the deadline
        (stalled(2), {"request_timeout_s": 0.3}, True),  # cut after tokens: TTFT is known
    ],
    ids=["deadline-no-bytes", "deadline-after-headers", "read-timeout", "after-first-token"],
)
async def test_a_request_cut_by_the_clients_timeout_is_censored(
    steps: list[Step], config: dict[str, float], token_seen: bool
) -> None:
    record = await fetch(steps, **config)
    assert record.error_kind == ErrorKind.TIMEOUT and record.censored
    assert record.sent_ns is not None and record.error_ns is not None
    assert (record.error_ns - record.intended_ns) / MS >= 300  # the deadline runs from intended
    assert record.sent_ns < record.error_ns
    assert (record.first_token_ns is not None) is token_seen


def records_with_cut(ttfts_ms: Sequence[float], cut_ms: Sequence[float]) -> list[RequestRecord]:
    """Successful requests with `ttfts_ms` (E2E 10 ms later) and requests cut without a
    token after `cut_ms`."""
    done = [
        RequestRecord(
            index=i,
            prefix_id=0,
            sent_ns=0,
            first_token_ns=int(t * MS),
            last_token_ns=int((t + 10) * MS),
            end_ns=int((t + 10) * MS),
            token_ns=[int(t * MS), int((t + 10) * MS)],
            completion_tokens=2,
        )
        for i, t in enumerate(ttfts_ms)
    ]
    cut = [
        RequestRecord(
            index=len(done) + i,
            prefix_id=0,
            sent_ns=0,
            error_ns=int(c * MS),
            error_kind=ErrorKind.TIMEOUT,
            censored=True,
        )
        for i, c in enumerate(cut_ms)
    ]
    return [*done, *cut]


@pytest.mark.parametrize(
    ("cut_share", "p99_bound", "p50_bound"),
    [(0.02, True, False), (0.6, True, True), (0.0, False, False)],
    ids=["2%-cut", "60%-cut", "none-cut"],
)
def test_censored_requests_count_in_the_percentiles_as_lower_bounds(
    cut_share: float, p99_bound: bool, p50_bound: bool
) -> None:
    """100 requests, TTFT 100..199 ms for the finished ones, the others cut at 5 s: the
    percentiles that reach them are at least 5,000 ms and say so, never the finished ones'
    figure; the run counts them and the table shows them."""
    cut = round(100 * cut_share)
    records = records_with_cut([100 + i for i in range(100 - cut)], [5_000] * cut)
    run = summarize_run(records, prefix_kinds=1, concurrency=4, repetition=1)
    assert run.censored == cut and run.samples == 100 - cut
    assert ("ttft_p99_ms" in run.lower_bounds) is p99_bound
    assert ("ttft_p50_ms" in run.lower_bounds) is p50_bound
    if p99_bound:
        assert run.ttft_p99_ms is not None and run.ttft_p99_ms >= 199
    if cut >= 2:
        assert run.ttft_p99_ms == 5_000  # not the 199 ms the finished requests alone give
    point = summarize_point([run])
    header = table_headers([point])
    (row,) = seed_rows([point])
    cells = dict(zip(header, row, strict=True))
    assert cells["TTFT p99\nms"].startswith(">=") is p99_bound
    assert cells.get("censored") == (str(cut) if cut else None)


def test_a_bounded_percentile_is_exact_when_the_cut_requests_sort_above_it() -> None:
    finished = [(float(v), False) for v in range(1, 100)]
    assert bounded_percentile([*finished, (500.0, True)], 50) == (50.5, False)
    assert bounded_percentile([*finished, (10.5, True)], 50) == (49.5, True)  # cut early
    assert bounded_percentile([], 50) == (None, False)


@pytest.mark.asyncio
async def test_a_run_with_cut_requests_says_how_many_and_keeps_them_in_its_records(
    tmp_path: Path,
) -> None:
    """Every third request never answers within the 0.4 s deadline: the run counts them,
    its TTFT p99 is at least the deadline (a lower bound) and requests.parquet has the
    `censored` column with `error_ns` / `sent_ns` for the bound."""
    import pandas as pd

    def every_third_hangs(body: dict[str, Any], n: int) -> list[Step]:
        return [Sleep(3.0)] if n % 3 == 2 else normal_stream(["a", "b"])

    config = LoadConfig(
        prefix_kinds=[1],
        concurrency=[3],
        repetitions=1,
        requests_per_run=9,
        warmup_requests=0,
        prompt_tokens=20,
        request_timeout_s=0.4,
    )
    async with FakeServer(every_third_hangs) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, tmp_path, progress=False))
    (run,) = result.runs
    assert run.censored == run.errors_by_kind["timeout"] >= 1
    assert "ttft_p99_ms" in run.lower_bounds
    frame = pd.read_parquet(tmp_path / "requests.parquet")
    cut = frame[frame["censored"]]
    assert len(cut) == run.censored
    assert ((cut["error_ns"] - cut["intended_ns"]) / MS >= 400).all()
    bounds = (cut["error_ns"] - cut["sent_ns"]) / MS
    assert min(bounds) <= (run.ttft_p99_ms or 0) <= max(bounds)  # p99: among the cut ones
    assert cut["first_token_ns"].isna().all()


# 5. Outages mid-grid ----------------------------------------------------------------------


OUTAGES: dict[str, list[Step]] = {
    "503": [Status(503)],
    "502-from-a-proxy": [Status(502, b"<html>Bad Gateway</html>")],
    "dropped": [Close()],
    "cut-mid-stream": [Send(chat_chunk("a")), Close()],
    "in-band-error": [Send(event({"error": {"message": "engine dead"}}))],
}


class RestartAt(GridObserver):
    """Takes the server down for its next `requests` requests when repetition `rep` starts
    (the first time only): what a frontend restart does to the run under way."""

    def __init__(self, server: FakeServer, rep: int, requests: int) -> None:
        self.server, self.rep, self.requests = server, rep, requests
        self.down: range | None = None

    async def before_run(self, prefix_kinds: int, concurrency: int, repetition: int) -> None:
        if repetition == self.rep and self.down is None:
            start = len(self.server.requests)
            self.down = range(start, start + self.requests)


@pytest.mark.asyncio
@pytest.mark.parametrize("failure", OUTAGES.values(), ids=OUTAGES.keys())
async def test_a_run_during_an_outage_is_measured_again_once_the_server_serves(
    failure: list[Step],
) -> None:
    """Repetition 2 meets a restarting server: its every request fails. It is not a measured
    point: the grid waits until the server serves again (the readiness gate), measures the
    run again and says so; repetition 1 is untouched."""
    restart: RestartAt | None = None

    def handler(body: dict[str, Any], n: int) -> list[Step]:
        if restart is not None and restart.down is not None and n in restart.down:
            return failure
        return normal_stream(["a", "b"])

    config = LoadConfig(
        prefix_kinds=[1], concurrency=[2], repetitions=2, requests_per_run=4, warmup_requests=0
    ).model_copy(update={"prompt_tokens": 20, "max_tokens": 2})
    async with FakeServer(handler) as server:
        restart = RestartAt(server, rep=2, requests=4)
        result = await run_grid_async(GridRun(
            server.url, "m", config, None, progress=False, observers=[restart],
            server_metrics=False,
        ))  # fmt: skip
    first, second = result.runs
    assert (first.remeasured, first.errors, first.samples) == (0, 0, 4)
    assert (second.remeasured, second.errors, second.samples) == (1, 0, 4)
    assert any(
        w.startswith("measured again after an outage (all 4 requests failed (")
        and "served again after" in w
        for w in second.warnings
    ), second.warnings


@pytest.mark.asyncio
async def test_server_figures_come_back_with_the_server_after_an_outage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/metrics is down with the server (503): the lost attempt has no server figures, and
    the run measured again once the server serves has its own, counted from its scrapes."""
    monkeypatch.setattr(server_metrics, "SCRAPE_RETRY_S", 0.01)
    restart: RestartAt | None = None

    def down(server: FakeServer) -> bool:
        window = None if restart is None else restart.down
        return window is not None and len(server.requests) <= window.stop

    def metrics(server: FakeServer) -> str | Status:
        return Status(503) if down(server) else counting_frontend(server)

    def handler(body: dict[str, Any], n: int) -> list[Step]:
        window = None if restart is None else restart.down
        return [Close()] if window is not None and n in window else normal_stream(["a"])

    async with FakeServer(handler, metrics=metrics) as server:
        restart = RestartAt(server, rep=2, requests=4)
        result = await run_grid_async(
            GridRun(server.url, "m", TWO_RUNS, None, progress=False, observers=[restart])
        )
    first, second = result.runs
    assert second.remeasured == 1 and second.samples == 4
    assert first.server is not None and second.server is not None
    assert second.server.requests == 4  # the re-measured run's own window
    assert not [w for w in result.warnings if "no server-side metrics" in w]


@pytest.mark.asyncio
async def test_a_server_that_never_served_is_not_waited_for() -> None:
    """Every request fails from the start (nothing has served in this grid): no outage wait,
    no second measurement; the run is kept with its failures."""
    config = LoadConfig(
        prefix_kinds=[1], concurrency=[1], repetitions=1, requests_per_run=2, warmup_requests=0
    ).model_copy(update={"prompt_tokens": 20})
    async with FakeServer(lambda body, n: [Status(503)]) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, None, progress=False))
    (run,) = result.runs
    assert (run.remeasured, run.errors_by_kind) == (0, {"http_status": 2})


def failed(kind: ErrorKind, status: int | None = None) -> RequestRecord:
    return RequestRecord(index=0, prefix_id=0, sent_ns=0, error_kind=kind, status=status)


def test_an_outage_is_told_from_requests_that_fail_by_themselves() -> None:
    assert outage_of([failed(ErrorKind.HTTP_STATUS, 503)] * 3) == (
        "all 3 requests failed (http_status 3)"
    )
    assert outage_of([failed(ErrorKind.TIMEOUT), failed(ErrorKind.DROPPED)]) is not None
    assert outage_of([failed(ErrorKind.HTTP_STATUS, 429)]) is not None
    assert outage_of([failed(ErrorKind.HTTP_STATUS, 404)] * 2) is None  # a wrong model
    assert outage_of([failed(ErrorKind.CLIENT)]) is None  # the client's own sockets
    assert outage_of([failed(ErrorKind.EMPTY_STREAM)]) is None  # a server always wrong
    ok = RequestRecord(index=1, prefix_id=0)
    assert outage_of([failed(ErrorKind.CONNECTION), ok]) is None  # some served: a point


# 6. A failed scrape of /metrics ------------------------------------------------------------


def counting_frontend(server: FakeServer) -> str:
    """The Dynamo frontend's request counter and its in-flight gauge (0: nothing left)."""
    n = len(server.requests)
    return (
        "# TYPE dynamo_frontend_requests_total counter\n"
        f'dynamo_frontend_requests_total{{model="m",status="success"}} {n}\n'
        "# TYPE dynamo_frontend_inflight_requests gauge\n"
        'dynamo_frontend_inflight_requests{model="m"} 0\n'
    )


SCRAPE_FAULTS: dict[str, list[Status]] = {
    "one-503": [Status(503)],
    "500-html-then-502": [Status(500, b"<html>oops</html>"), Status(502)],
    "429": [Status(429)],
}


@pytest.mark.asyncio
@pytest.mark.parametrize("faults", SCRAPE_FAULTS.values(), ids=SCRAPE_FAULTS.keys())
async def test_a_failed_scrape_is_tried_again_and_the_figures_kept(
    faults: list[Status], monkeypatch: pytest.MonkeyPatch
) -> None:
    """/metrics fails once or twice in a row (fewer than the tries) at run 1's first scrape:
    tried again within the run's window, both runs keep their server figures, no warning."""
    monkeypatch.setattr(server_metrics, "SCRAPE_RETRY_S", 0.01)
    pending = list(faults)

    def metrics(server: FakeServer) -> str | Status:
        return pending.pop(0) if pending else counting_frontend(server)

    async with FakeServer(lambda body, n: normal_stream(["a"])) as server:
        server.metrics = metrics
        result = await run_grid_async(GridRun(server.url, "m", TWO_RUNS, None, progress=False))
    assert [run.server is not None for run in result.runs] == [True, True]
    assert [run.server.requests for run in result.runs if run.server] == [4, 4]
    assert not [w for run in result.runs for w in run.warnings if "server figures" in w]
    assert not [w for w in result.warnings if "metrics" in w]


TWO_RUNS = LoadConfig(
    prefix_kinds=[1], concurrency=[2], repetitions=2, requests_per_run=4, warmup_requests=0
).model_copy(update={"prompt_tokens": 20})


@pytest.mark.asyncio
async def test_a_scrape_that_keeps_failing_loses_one_run_not_the_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/metrics answers 503 to every try of run 1's last scrape: run 1 has no server figures
    and says which scrape was missing and why; run 2 has its own (not turned off)."""
    monkeypatch.setattr(server_metrics, "SCRAPE_RETRY_S", 0.01)
    scrapes = 0

    def metrics(server: FakeServer) -> str | Status:
        nonlocal scrapes
        scrapes += 1
        return Status(503) if 2 <= scrapes <= 4 else counting_frontend(server)

    async with FakeServer(lambda body, n: normal_stream(["a"])) as server:
        server.metrics = metrics
        url = server.url
        result = await run_grid_async(GridRun(url, "m", TWO_RUNS, None, progress=False))
    first, second = result.runs
    assert first.server is None and second.server is not None
    assert [w for w in first.warnings if w.startswith("server figures missing")] == [
        f"server figures missing for this run: the after-run scrape of {url}/metrics "
        'failed 3 times (HTTP 503: {"error": "unavailable"})'
    ]


# 7. The client's own limits ---------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (errno.EMFILE, ErrorKind.CLIENT),  # the process's open files
        (errno.ENFILE, ErrorKind.CLIENT),  # the system's
        (errno.EADDRNOTAVAIL, ErrorKind.CLIENT),  # ephemeral ports
        (errno.ENOBUFS, ErrorKind.CLIENT),
        (errno.ECONNREFUSED, ErrorKind.CONNECTION),  # the server's side: not the client's
    ],
    ids=["EMFILE", "ENFILE", "EADDRNOTAVAIL", "ENOBUFS", "ECONNREFUSED"],
)
async def test_a_socket_the_client_could_not_open_is_the_clients_error(
    code: int, kind: ErrorKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket the connector opens fails with the client's own limit (aiohappyeyeballs
    opens it: `impl.py`, `_single_addr_info_connect`): a client error, never the server's
    `connection_error`; a refused connection stays the server's."""

    class NoSockets:
        def __getattr__(self, name: str) -> Any:
            return getattr(socket_module, name)

        def socket(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError(code, errno.errorcode[code])

    import socket as socket_module

    monkeypatch.setattr(aiohappyeyeballs.impl, "socket", NoSockets())
    record = await fetch(normal_stream(["a"]))
    assert record.error_kind == kind, record.error
    assert record.sent_ns is None


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = raise_open_file_limit()
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard or hard == resource.RLIM_INFINITY


def test_client_socket_errors_are_said_as_the_clients_limit() -> None:
    records = [failed(ErrorKind.CLIENT) for _ in range(3)]
    run = summarize_run(records, prefix_kinds=1, concurrency=3, repetition=1)
    assert run.errors_by_kind == {"client_socket_error": 3}
    (note,) = [w for w in run.warnings if "could not open a socket" in w]
    assert note.startswith("3 of 3 requests could not open a socket on the client")
    assert "not the server's" in note and "busy" not in note


# Retry-After ----------------------------------------------------------------------------


def test_retry_after_reads_seconds_and_dates() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after_s("3") == 3.0
    assert retry_after_s(f" {later} ", now_s=now.timestamp()) == pytest.approx(7.0)
    assert retry_after_s(format_datetime(now, usegmt=True), now_s=now.timestamp() + 5) == 0.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None
    assert retry_after_s("-1") is None


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "rejection",
    [
        Status(429, headers=("Retry-After: 1",)),
        Status(503, headers=("Retry-After: 1",)),
        Status(429, headers=("retry-after: 3600",)),  # bounded: never past the run's end
    ],
    ids=["429-seconds", "503-seconds", "429-an-hour"],
)
async def test_a_closed_loop_waits_as_retry_after_asks(rejection: Status) -> None:
    """A server that rejects every request at once with Retry-After: the closed loop waits
    before each stream's next request, so in 1.5 s two streams send a handful of requests,
    not thousands, and the records keep what the server asked."""
    config = LoadConfig(request_timeout_s=5.0)
    async with FakeServer(lambda body, n: [rejection]) as server:
        records = [RequestRecord(index=i, prefix_id=0) for i in range(1000)]
        async with make_client(server.url, config, 2) as client:
            started = await run_closed_loop(
                client, PATH, [BODY] * 1000, records, concurrency=2, deadline_s=5.0,
                duration_s=1.5,
            )  # fmt: skip
    assert 2 <= len(started) <= 6
    assert all(r.retry_after_s is not None and r.retry_after_s >= 1 for r in started)
    run = summarize_run(started, prefix_kinds=1, concurrency=2, repetition=1)
    assert run.retry_after_waits == len(started)


# 8. What the server really processed ------------------------------------------------------


def counted(prompt_tokens: int, n: int = 4) -> list[RequestRecord]:
    return [
        RequestRecord(
            index=i,
            prefix_id=0,
            sent_ns=0,
            first_token_ns=MS,
            last_token_ns=2 * MS,
            end_ns=2 * MS,
            token_ns=[MS, 2 * MS],
            completion_tokens=2,
            prompt_tokens=prompt_tokens,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("server_counted", "said"),
    [
        (1_000, True),  # truncated to a 1,000-token context
        (2_371 + 400, True),  # a long system template of its own
        (2_371 + 12, False),  # a chat template's few tokens: within the tolerance
        (2_371 - 10, False),
    ],
    ids=["truncated", "long-template", "chat-template", "slightly-fewer"],
)
def test_a_server_that_processed_other_prompts_than_planned_is_said(
    server_counted: int, said: bool
) -> None:
    run = summarize_run(
        counted(server_counted),
        prefix_kinds=1,
        concurrency=1,
        repetition=1,
        planned_prompt_tokens=2_371,
    )
    notes = [w for w in run.warnings if "prompt tokens per request" in w]
    assert bool(notes) is said
    assert run.prompt_tokens_mean == server_counted  # the lengths reported are the server's
    assert run.prompt_tokens_planned == 2_371
    if said:
        assert notes[0].startswith(
            f"the server counted {server_counted:,} prompt tokens per request "
            f"(min {server_counted:,}, max {server_counted:,}) where 2,371 were planned"
        )


# 2. Tokens per chunk near one -------------------------------------------------------------


def spec_decoded(per_chunk: float, chunks: int = 50, gap_ms: float = 10.0) -> RequestRecord:
    """`chunks` content chunks `gap_ms` apart carrying `per_chunk` tokens on average (final
    usage only, as a speculative decoder's stream that accepted some drafts)."""
    times = [int((100 + i * gap_ms) * MS) for i in range(chunks)]
    return RequestRecord(
        index=0,
        prefix_id=0,
        sent_ns=0,
        first_token_ns=times[0],
        last_token_ns=times[-1],
        end_ns=times[-1],
        token_ns=times,
        completion_tokens=round(per_chunk * chunks),
        finish_reason="length",
    )


def test_itl_per_token_is_continuous_in_tokens_per_chunk() -> None:
    """From 1.0 to 2.4 tokens per chunk in steps of 0.02: ITL per token never jumps (no step
    larger than the step in tokens per chunk can cause), falls as chunks carry more, and
    TPOT follows it."""
    shares = [1.0 + 0.02 * i for i in range(71)]
    itl = [statistics.median(itl_ms(spec_decoded(x))) for x in shares]
    tpot = [tpot_ms(spec_decoded(x)) or 0 for x in shares]
    for before, after in itertools.pairwise(itl):
        assert after <= before and before - after < 0.3  # 10 ms / 1.0 vs / 1.02: 0.2 ms
    for before, after in itertools.pairwise(tpot):
        assert after <= before + 1e-9 and before - after < 0.3
    assert itl[0] == pytest.approx(10.0)  # one token per chunk: the gaps
    assert itl[50] == pytest.approx(5.0)  # two tokens per chunk: half
    assert itl[20] == pytest.approx(10 / 1.4, rel=0.05)  # a speculative decoder's 1.4


# 4. Abandoned work ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "held"),
    [
        ('# TYPE dynamo_frontend_inflight_requests gauge\n'
         'dynamo_frontend_inflight_requests{model="m"} 3\n', 3),
        ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n"
         "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 5\n", 7),
        ('# TYPE dynamo_frontend_inflight_requests gauge\n'
         'dynamo_frontend_inflight_requests{model="other"} 9\n', None),  # another model's
        ("# TYPE x_total counter\nx_total 1\n", None),
    ],
    ids=["dynamo-frontend", "vllm-running-waiting", "another-model", "no-gauge"],
)  # fmt: skip
def test_the_servers_in_flight_gauges_are_read(text: str, held: int | None) -> None:
    assert in_flight(parse_samples(text, "m")) == held


def test_work_left_on_the_server_flags_the_concurrency_a_point_really_ran_at() -> None:
    """An earlier run's abandoned requests are still running when this c=4 run starts: it ran
    at up to 7, and says so; requests still held after a run that cut some are abandoned."""
    run = summarize_run(
        records_with_cut([100, 110], [500]), prefix_kinds=1, concurrency=4, repetition=1
    )
    server = ServerRunMetrics(
        requests=3,
        requests_by_status={"success": 3},
        ttft_mean_ms=None,
        ttft_p50_ms=None,
        ttft_p99_ms=None,
        itl_mean_ms=None,
        itl_p50_ms=None,
        input_tokens=None,
        cached_tokens=None,
        output_tokens=None,
        in_flight_before=3,
        in_flight_after=1,
    )
    before, after = in_flight_notes(server, run)
    assert "up to 4 + 3 = 7 requests ran at once, not the concurrency 4" in before
    assert after.startswith("the server still held 1 requests after this run's last request")
    assert "(1 were cut by the client's timeout or failed at a gateway after a wait)" in after
    quiet = server.model_copy(update={"in_flight_before": 0, "in_flight_after": 0})
    assert in_flight_notes(quiet, run) == []


def test_in_flight_gauges_are_kept_apart_from_the_counters() -> None:
    """Gauges are read as they are, never differenced as counters (no reset is counted)."""
    before = parse_samples(counting_frontend_text(5, held=2), "m")
    after = parse_samples(counting_frontend_text(9, held=0), "m")
    window = server_metrics.run_metrics(before, after)
    assert (window.requests, window.counter_resets) == (4, 0)
    assert (window.in_flight_before, window.in_flight_after) == (2, 0)


def counting_frontend_text(requests: int, held: int) -> str:
    return (
        "# TYPE dynamo_frontend_requests_total counter\n"
        f'dynamo_frontend_requests_total{{model="m",status="success"}} {requests}\n'
        "# TYPE dynamo_frontend_inflight_requests gauge\n"
        f'dynamo_frontend_inflight_requests{{model="m"}} {held}\n'
    )


def test_prompt_sizes_say_what_the_server_counted() -> None:
    run = summarize_run(counted(2_381), prefix_kinds=1, concurrency=1, repetition=1)
    result = GridResult(
        url="http://x",
        model="m",
        config=LoadConfig(),
        token_count_source="tokenizer:t.json",
        started_at=datetime(2026, 12, 3, tzinfo=UTC),
        finished_at=datetime(2026, 12, 3, tzinfo=UTC),
        points=[summarize_point([run])],
        runs=[run],
        errors_by_kind={},
        first_errors=[],
        first_failure_at=None,
        warnings=[],
    )
    assert prompt_sizes(result) == (
        "tokenizer:t.json; the server counted 2,381 prompt tokens per request (2,371 planned)"
    )


@pytest.mark.asyncio
async def test_requests_the_client_gave_up_on_are_seen_running_on_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every other request takes 2 s and the client cuts it at 0.3 s, but the server keeps
    working on it (the fake server's in-flight count, exported as the Dynamo frontend's
    gauge): the c=2 run is seen holding more than 2 requests, and says so, with the ones
    still running after it ended."""
    monkeypatch.setattr(server_metrics, "IN_FLIGHT_SAMPLE_S", 0.05)

    def gauge(server: FakeServer) -> str:
        return counting_frontend(server).replace(
            'inflight_requests{model="m"} 0', f'inflight_requests{{model="m"}} {server.in_flight}'
        )

    def every_other_runs_on(body: dict[str, Any], n: int) -> list[Step]:
        slow = [Sleep(2.0)] if n % 2 == 0 and body.get("max_tokens") != 1 else []
        return [*slow, *normal_stream(["a"])]

    config = LoadConfig(
        prefix_kinds=[1],
        concurrency=[2],
        repetitions=1,
        requests_per_run=12,
        warmup_requests=0,
        prompt_tokens=20,
        request_timeout_s=0.3,
    )
    async with FakeServer(every_other_runs_on, metrics=gauge) as server:
        result = await run_grid_async(GridRun(server.url, "m", config, None, progress=False))
    (run,) = result.runs
    assert run.censored >= 2 and run.server is not None
    assert (run.server.in_flight_max or 0) > 2
    assert any(
        w.startswith(f"the server held up to {run.server.in_flight_max} requests at once")
        for w in run.warnings
    ), run.warnings


def test_the_in_flight_gauge_is_read_from_the_lines_alone() -> None:
    text = (
        "# TYPE dynamo_frontend_inflight_requests gauge\n"
        'dynamo_frontend_inflight_requests{model="Qwen/Qwen3-0.6B"} 4\n'
        'dynamo_frontend_inflight_requests{model="other"} 9\n'
        "dynamo_frontend_inflight_requests_total 7\n"  # another family's name
    )
    assert server_metrics.in_flight_in_text(text, "qwen/qwen3-0.6b") == 4
    engine = "vllm:num_requests_running 2 1764763200000\nvllm:num_requests_waiting 1\n"
    assert server_metrics.in_flight_in_text(engine, "m") == 3
    assert server_metrics.in_flight_in_text("x_total 1\n", "m") is None


def test_the_slo_judges_the_same_censored_p99s_the_tables_show() -> None:
    """A request cut at its deadline counts in the SLO's TTFT and E2E p99 at the time it was
    cut (a lower bound), as in the run's own figures: both read `measurement.stats.tails`."""
    records = records_with_cut([100.0] * 9, [5000.0])
    run = summarize_run(records, prefix_kinds=1, concurrency=4, repetition=1)
    judged = evaluate_run(records, parse_slo("ttft_p99_ms=1000,e2e_p99_ms=1000"), concurrency=4)
    # 9 x 100 ms and one cut at 5,000 ms: the p99 interpolates 0.91 of the way to the cut.
    assert run.ttft_p99_ms == pytest.approx(100 + 0.91 * 4900)
    assert judged.values_ms["ttft_p99_ms"] == run.ttft_p99_ms
    assert judged.values_ms["e2e_p99_ms"] == run.e2e_p99_ms == pytest.approx(110 + 0.91 * 4890)
    assert "ttft_p99_ms" in run.lower_bounds and "e2e_p99_ms" in run.lower_bounds
