"""One streamed request against the fault-injecting server: exact fields per scenario."""

import asyncio
import gzip
import json
import socket
import time
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import http_writer
from fake_openai_server import (
    ABSENT,
    DONE,
    Close,
    FakeServer,
    Header,
    Send,
    Sleep,
    Status,
    Step,
    Wait,
    chat_chunk,
    event,
    fragments,
    normal_stream,
    usage_chunk,
)

import loadgen.request
from loadgen.loops import make_client
from loadgen.request import stream_request
from measurement.errors import ErrorKind
from measurement.record import RequestRecord
from metrics.latency import e2e_ms, tpot_ms, ttft_ms
from workload.config import LoadConfig

pytestmark = pytest.mark.asyncio

PATH = "/v1/chat/completions"
BODY = b'{"model": "m", "messages": [], "stream": true, "max_tokens": 3}'


async def fetch(
    steps: Sequence[Step], *, read_timeout_s: float = 5.0, deadline_s: float = 5.0
) -> RequestRecord:
    """Serve `steps` once and return the loadgen's record of it."""
    async with FakeServer(lambda body, n: steps) as server:
        config = LoadConfig(read_timeout_s=read_timeout_s)
        async with make_client(server.url, config, 1) as client:
            record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
            await stream_request(client, PATH, BODY, record, deadline_s)
    return record


def _fields(record: RequestRecord) -> dict[str, Any]:
    """The fields that do not depend on timing."""
    return {
        "ok": record.ok,
        "status": record.status,
        "chunks": record.chunks,
        "tokens": len(record.token_ns),
        "finish": record.finish_reason,
        "usage": (record.prompt_tokens, record.completion_tokens, record.cached_tokens),
    }


EXPECTED_NORMAL = {
    "ok": True,
    "status": 200,
    "chunks": 6,  # role-only, 3 content, finish, usage
    "tokens": 3,
    "finish": "length",
    "usage": (100, 3, 40),
}


async def test_role_only_first_chunk_is_not_the_first_token() -> None:
    steps = normal_stream(["Hel", "lo", "!"])
    steps.insert(1, Sleep(0.02))
    record = await fetch(steps)
    assert _fields(record) == EXPECTED_NORMAL
    assert record.sent_ns is not None and record.first_chunk_ns is not None
    assert record.first_token_ns is not None and record.end_ns is not None
    # The role-only chunk arrived in an earlier read than the first content.
    assert record.sent_ns < record.first_chunk_ns < record.first_token_ns == record.token_ns[0]
    assert record.token_ns == sorted(record.token_ns)
    assert record.end_ns >= record.token_ns[-1]
    assert record.connect_ns is not None  # a fresh client opens a connection


async def test_tiny_fragments_and_one_coalesced_read_give_the_same_record() -> None:
    stream = normal_stream(["a", "\u00e9\u4e2d", "\U0001f600"])
    whole = b"".join(step.data for step in stream if isinstance(step, Send))
    for size in (1, 2, 3, 7):
        assert _fields(await fetch(fragments(whole, size))) == EXPECTED_NORMAL
    coalesced = await fetch([Send(whole)])
    assert _fields(coalesced) == EXPECTED_NORMAL
    assert len(set(coalesced.token_ns)) == 1  # one read: one arrival time for every event


async def test_keepalive_comments_before_the_first_token_are_ignored() -> None:
    steps: list[Step] = [Send(b": keep-alive\n\n"), Sleep(0.01), Send(b":\r\n\r\n")]
    record = await fetch(steps + normal_stream(["x", "y", "z"]))
    assert _fields(record) == EXPECTED_NORMAL


async def test_usage_chunk_with_empty_choices_is_normal() -> None:
    record = await fetch([Send(chat_chunk("hi", finish="stop")), Send(usage_chunk(7, 1, 0))])
    assert record.ok, record.error  # no [DONE], but a finish_reason: complete
    assert (record.prompt_tokens, record.completion_tokens, record.cached_tokens) == (7, 1, 0)


@pytest.mark.parametrize(
    ("cached", "expected"), [(ABSENT, None), (None, None), (0, 0), (1536, 1536)]
)
async def test_cached_tokens_absent_null_zero_and_n(cached: object, expected: int | None) -> None:
    record = await fetch(normal_stream(["a"], prompt=2048, cached=cached))
    assert record.ok
    assert record.cached_tokens == expected


async def test_in_band_error_after_some_tokens() -> None:
    steps: list[Step] = [Send(chat_chunk("a", role="assistant")), Send(chat_chunk("b"))]
    steps += [Send(event({"error": {"message": "KV capacity exceeded", "code": 500}})), Send(DONE)]
    record = await fetch(steps)
    assert record.error_kind is ErrorKind.IN_BAND
    assert record.error is not None and "KV capacity exceeded" in record.error
    assert len(record.token_ns) == 2


async def test_event_type_error_is_in_band() -> None:
    record = await fetch([Send(b"event: error\ndata: overloaded\n\n"), Send(DONE)])
    assert (record.error_kind, record.error) == (ErrorKind.IN_BAND, "overloaded")


async def test_connection_cut_mid_stream_is_truncated() -> None:
    record = await fetch([Send(chat_chunk("a", role="assistant")), Sleep(0.01), Close()])
    assert record.error_kind is ErrorKind.TRUNCATED
    assert len(record.token_ns) == 1


async def test_stream_that_ends_without_done_or_finish_reason_is_truncated() -> None:
    record = await fetch([Send(chat_chunk("a")), Send(chat_chunk("b"))])
    assert record.error_kind is ErrorKind.TRUNCATED
    assert record.error == "stream ended without [DONE] or a finish_reason"


@pytest.mark.parametrize(
    ("steps", "seen"),
    [
        ([Send(DONE)], "only [DONE]"),
        ([], "an empty (zero-byte) body"),
        (
            [Send(chat_chunk(role="assistant")), Send(chat_chunk(finish="stop")), Send(DONE)],
            "2 data event(s) with no content text, ended with [DONE]",
        ),
        (
            [Send(chat_chunk(role="assistant")), Send(usage_chunk(10, 0, 0))],
            "2 data event(s) with no content text, ended without [DONE] or a finish_reason",
        ),
    ],
    ids=["done-only", "zero-byte", "role-and-finish-only", "clean-end-no-done-no-finish"],
)
async def test_200_stream_without_a_generated_token_is_an_empty_stream(
    steps: list[Step], seen: str
) -> None:
    record = await fetch(steps)
    assert (record.status, record.error_kind) == (200, ErrorKind.EMPTY_STREAM)
    assert record.error is not None and seen in record.error
    assert (record.first_token_ns, record.token_ns) == (None, [])


async def test_textless_stream_with_completion_tokens_is_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Dynamo mocker streams chunks whose text does not decode but counts its tokens:
    a success without TTFT; E2E ends at its last choice chunk, not at the usage chunk.

    The server sends the usage chunk only once the client has applied the finish chunk, so the
    two arrive in different reads however slowly the client runs."""
    finished = asyncio.Event()
    finish_applied_ns: list[int] = []
    apply_event = loadgen.request._apply_event

    def applied(record: RequestRecord, data: str, now: int) -> bool:
        done = apply_event(record, data, now)
        if record.finish_reason is not None and not finished.is_set():
            finish_applied_ns.append(time.monotonic_ns())
            finished.set()
        return done

    monkeypatch.setattr(loadgen.request, "_apply_event", applied)
    steps: list[Step] = [Send(chat_chunk("", role="assistant")), Sleep(0.01)]
    steps += [Send(chat_chunk("")), Sleep(0.01), Send(chat_chunk(finish="length"))]
    steps += [Wait(finished), Send(usage_chunk(10, 3, 0)), Send(DONE)]
    record = await fetch(steps)
    assert record.ok, record.error
    assert (record.first_token_ns, record.completion_tokens, record.chunks) == (None, 3, 4)
    assert record.last_token_ns is not None and record.end_ns is not None
    # E2E ends at the read that carried the finish chunk; the body ends with a later read.
    assert record.last_token_ns <= finish_applied_ns[0] < record.end_ns


async def test_e2e_ends_at_the_last_token_not_the_late_usage_chunk() -> None:
    """Three tokens 5 ms apart, finish_reason, then the usage chunk 500 ms later: E2E ~ 10 ms
    and TPOT ~ 5 ms, the body's end ~ 500 ms later."""
    steps: list[Step] = [Send(chat_chunk("a", role="assistant")), Sleep(0.005)]
    steps += [Send(chat_chunk("b")), Sleep(0.005), Send(chat_chunk("c"))]
    steps += [Send(chat_chunk(finish="stop")), Sleep(0.5), Send(usage_chunk(10, 3, 0))]
    record = await fetch([*steps, Send(DONE)])
    assert record.ok, record.error
    assert record.last_token_ns == record.token_ns[-1]
    e2e, ttft, tpot = e2e_ms(record), ttft_ms(record), tpot_ms(record)
    assert e2e is not None and ttft is not None and tpot is not None
    # TTFT and E2E are the first and the third token as received (two 5 ms gaps at the server,
    # closer or further apart at the client as its load has it), not the usage chunk: the body
    # ends after the server's 510 ms of waits
    assert record.sent_ns is not None and record.end_ns is not None and len(record.token_ns) == 3
    assert ttft == (record.token_ns[0] - record.sent_ns) / 1e6
    assert e2e == (record.token_ns[-1] - record.sent_ns) / 1e6
    assert tpot == pytest.approx((e2e - ttft) / 2)
    assert (record.end_ns - record.sent_ns) / 1e6 >= 510


async def test_stalled_stream_hits_the_read_timeout() -> None:
    record = await fetch([Send(chat_chunk("a")), Sleep(3.0)], read_timeout_s=0.2)
    assert record.error_kind is ErrorKind.TIMEOUT
    assert record.error is not None and "SocketTimeoutError" in record.error


async def test_stalled_stream_hits_the_request_deadline() -> None:
    # Keeps sending comments (so the read timeout never fires) but never finishes.
    keepalive: list[Step] = [Send(b":\n"), Sleep(0.05)]
    steps = [Send(chat_chunk("a")), *(keepalive * 60)]
    record = await fetch(steps, read_timeout_s=1.0, deadline_s=0.3)
    assert record.error_kind is ErrorKind.TIMEOUT
    assert record.error == "no complete response within the 0.3 s deadline"


async def test_http_status_error_keeps_the_body() -> None:
    record = await fetch([Status(503, b'{"error": "no workers"}')])
    assert (record.error_kind, record.status) == (ErrorKind.HTTP_STATUS, 503)
    assert record.error == 'HTTP 503: {"error": "no workers"}'


async def test_non_json_event_is_invalid() -> None:
    record = await fetch([Send(b"data: {oops\n\n"), Send(DONE)])
    assert record.error_kind is ErrorKind.INVALID_EVENT


async def test_connection_refused_is_a_connection_error() -> None:
    config = LoadConfig()
    async with make_client("http://127.0.0.1:9", config, 1) as client:
        record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
        await stream_request(client, PATH, BODY, record, 5.0)
    assert record.error_kind is ErrorKind.CONNECTION
    assert record.sent_ns is None


async def test_connection_is_reused_after_done(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading past [DONE] to the end of the body keeps the connection in the pool. The body
    ends 10 ms after [DONE]; the wait for it (`DONE_GRACE_S`, 50 ms) is set to 2 s here, as
    a client stalled past 40 ms on a busy machine (the server shares its event loop) would
    otherwise close the connection: what is checked is the read to the body's end."""
    monkeypatch.setattr("loadgen.request.DONE_GRACE_S", 2.0)
    steps = [*normal_stream(["a"]), Sleep(0.01)]  # body ends a little after [DONE]
    async with (
        FakeServer(lambda body, n: steps) as server,
        make_client(server.url, LoadConfig(), 1) as client,
    ):
        records = [RequestRecord(index=i, prefix_id=0) for i in range(5)]
        for record in records:
            record.intended_ns = time.monotonic_ns()
            await stream_request(client, PATH, BODY, record, 5.0)
    assert all(r.ok for r in records)
    assert server.connections == 1
    assert [r.connect_ns is not None for r in records] == [True, False, False, False, False]


async def test_deadline_counts_from_the_intended_send_time() -> None:
    async with (
        FakeServer(lambda body, n: normal_stream(["a"])) as server,
        make_client(server.url, LoadConfig(), 1) as client,
    ):
        late = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns() - 10**9)
        await stream_request(client, PATH, BODY, late, 0.5)
    assert late.error_kind is ErrorKind.TIMEOUT
    assert late.sent_ns is None  # never sent: it was already past its deadline


async def test_every_request_asks_for_an_identity_body() -> None:
    """A proxy that gzips what the client accepts (aiohttp's default `Accept-Encoding` offers
    gzip while the session does not decompress) must get a request it answers in plain text."""
    stream = normal_stream(["a", "b", "c"])
    whole = b"".join(step.data for step in stream if isinstance(step, Send))
    holder: dict[str, FakeServer] = {}

    def compressing(body: dict[str, Any], n: int) -> list[Step]:
        if "gzip" in holder["server"].headers[n].get("accept-encoding", ""):
            return [Header("content-encoding: gzip"), Send(gzip.compress(whole))]
        return [Send(whole)]

    async with FakeServer(compressing) as server, make_client(server.url, LoadConfig(), 1) as c:
        holder["server"] = server
        record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
        await stream_request(c, PATH, BODY, record, 5.0)
    assert _fields(record) == EXPECTED_NORMAL
    assert server.headers[0]["accept-encoding"] == "identity"


async def test_done_ends_a_request_whose_connection_stays_open() -> None:
    """A complete response (finish_reason, usage, [DONE]) on a connection the server keeps open
    past the read timeout is a success, ended at [DONE], and the request (with its
    `DONE_GRACE_S` read of the rest) is over before the read timeout: what a request that
    waited for more of the body would reach first, as the server keeps the connection open
    past the request's deadline. The timeout is the bound, not the machine's speed."""
    read_timeout_s = 10.0  # under the file's 20 s limit, so a wrong ending fails, not hangs
    steps = [*normal_stream(["a", "b", "c"]), Sleep(3 * read_timeout_s)]
    started = time.monotonic()
    record = await fetch(steps, read_timeout_s=read_timeout_s, deadline_s=1.5 * read_timeout_s)
    assert _fields(record) == EXPECTED_NORMAL, record.error
    assert record.end_ns is not None and record.last_token_ns is not None
    assert (record.end_ns - record.last_token_ns) / 1e9 < read_timeout_s
    assert time.monotonic() - started < read_timeout_s


async def test_per_chunk_usage_gives_each_chunks_tokens() -> None:
    """vLLM's `continuous_usage_stats`: a cumulative usage on every chunk, so each content
    chunk's tokens are the difference to the previous usage (role chunk: 0 tokens)."""

    def chunk(content: str | None, completion: int, role: str | None = None) -> Step:
        obj = json.loads(chat_chunk(content, role=role)[6:])
        obj["usage"] = {"prompt_tokens": 10, "completion_tokens": completion}
        return Send(event(obj))

    steps = [chunk(None, 0, role="assistant"), chunk("a", 1), chunk("bcd", 4), chunk("ef", 6)]
    record = await fetch([*steps, Send(chat_chunk(finish="length")), Send(DONE)])
    assert record.ok, record.error
    assert (record.chunk_tokens, record.completion_tokens) == ([1, 3, 2], 6)


async def _in_a_row(server: FakeServer, n: int) -> list[RequestRecord]:
    """`n` requests one after another on a one-connection pool."""
    records = [RequestRecord(index=i, prefix_id=0) for i in range(n)]
    async with make_client(server.url, LoadConfig(), 1) as client:
        for record in records:
            record.intended_ns = time.monotonic_ns()
            await stream_request(client, PATH, BODY, record, 5.0)
    return records


async def test_a_request_whose_write_failed_is_retried_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's close of a kept-alive connection reaches the client after the pool handed
    the connection out and before the request was written (aiohttp: "Cannot write to closing
    transport", http_writer.py `_write`): the request provably never reached the server, so
    it is sent again, once, on a connection of its own, and the server reads it once."""
    writes = 0
    original = http_writer.StreamWriter._writelines

    def closing_on_second_request(self: http_writer.StreamWriter, chunks: Any) -> None:
        nonlocal writes
        writes += 1
        if writes == 2:  # the second request, on the reused connection: closed under it
            assert self._protocol.transport is not None
            self._protocol.transport.close()
        original(self, chunks)

    monkeypatch.setattr(http_writer.StreamWriter, "_writelines", closing_on_second_request)
    async with FakeServer(lambda body, n: normal_stream(["a"])) as s:
        first, second = await _in_a_row(s, 2)
        assert (len(s.requests), s.connections) == (2, 2)  # each request read once
    assert first.ok and not first.retried
    assert second.ok and second.retried, second.error
    assert second.connect_ns is not None and second.sent_ns is not None
    assert second.sent_ns > second.connect_ns  # sent on the fresh connection, not the dead one


@pytest.mark.parametrize(
    ("faults", "steps"),
    [
        ({}, [Close()]),  # read whole, dropped unanswered at once
        ({}, [Sleep(0.05), Close()]),  # read whole, worked on, then the process died
        ({"responses_per_connection": 1}, None),  # reset after the request's first byte
    ],
    ids=["read-and-dropped", "worked-then-died", "reset-on-arrival"],
)
async def test_a_request_lost_after_it_was_written_is_never_sent_twice(
    faults: dict[str, Any], steps: list[Step] | None
) -> None:
    """Written to a reused connection that then ends before any response: the client cannot
    tell whether the server read and ran it, so it is not sent again (a second send would be
    generated twice) and fails as `dropped_after_send`, not as "never reached the server"."""

    def second_lost(body: dict[str, Any], n: int) -> list[Step]:
        return normal_stream(["a"]) if n == 0 or steps is None else steps

    async with FakeServer(second_lost, **faults) as server:
        first, second = await _in_a_row(server, 2)
        read = len(server.requests) + server.unread
    assert first.ok
    assert read == 2  # the server saw the second request once, never a second copy
    assert (second.error_kind, second.retried) == (ErrorKind.DROPPED, False)


async def test_a_fresh_connection_dropped_or_refused_is_never_retried() -> None:
    async with FakeServer(lambda body, n: [Close()]) as server:
        (fresh,) = await _in_a_row(server, 1)
        assert len(server.requests) == 1
    assert (fresh.error_kind, fresh.retried) == (ErrorKind.DROPPED, False)
    with socket.socket() as sock:  # a port nothing listens on: refused, never written
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    record = RequestRecord(index=0, prefix_id=0, intended_ns=time.monotonic_ns())
    async with make_client(url, LoadConfig(), 1) as client:
        await stream_request(client, PATH, BODY, record, 5.0)
    assert (record.error_kind, record.sent_ns, record.retried) == (
        ErrorKind.CONNECTION,
        None,
        False,
    )
