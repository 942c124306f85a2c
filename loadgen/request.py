"""One streamed OpenAI-compatible request and its timing record.

All times are `time.monotonic_ns()` readings (nanoseconds; CLOCK_MONOTONIC, one system-wide
clock on Linux, so records from worker processes compare directly), taken when the bytes reach
our code: at the top of each iteration over `response.content.iter_any()`, before parsing.

The HTTP client is aiohttp (its C HTTP parser, one pooled connection per request in flight):
`bench/loadgen_overhead.py` and docs/loadgen.md's performance section show why not httpx. Event
data is decoded with orjson (a few us per request saved against the standard json module).
"""

import asyncio
import contextlib
import email.utils
import errno
import json
import socket
import time
import weakref
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import orjson
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

from loadgen.api import server_of
from loadgen.sse import SSEParser
from measurement.errors import CLIENT_LIMIT_ERRNOS, ErrorKind, after_a_wait, unfinished
from measurement.record import RequestRecord

_ERROR_BODY_BYTES = 2048
# `accept-encoding: identity`: the session does not decompress (`make_client`), while aiohttp
# would otherwise offer "gzip, deflate" and a compressing server or proxy would answer in gzip.
_HEADERS = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "accept-encoding": "identity",
}
# After `[DONE]`, how long the rest of the body (the chunked terminator, normally in the same or
# the next read) is awaited so the connection goes back to the pool; a server that keeps the
# stream open longer costs one new connection, never an error.
DONE_GRACE_S = 0.05


RETRY_AFTER_STATUSES = frozenset({429, 503})  # answers whose Retry-After the closed loop honours


def _content_text(choice: dict[str, Any]) -> tuple[str | None, bool]:
    """A choice's text and whether it is visible output: a chat delta's `content`, else its
    reasoning (`reasoning_content`, the field Dynamo 1.6.1's frontend writes by default,
    `dynamo/frontend/frontend_args.py` L596-604 and `prepost.py` L1446; `reasoning`, the
    name vLLM's `DeltaMessage` and `--reasoning-field-name reasoning` use), not visible; a
    completion's `text`."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        if content:
            return content, True
        return delta.get("reasoning_content") or delta.get("reasoning"), False
    return choice.get("text"), True


def _apply_event(record: RequestRecord, data: str, now: int) -> bool:
    """Apply one data event to `record`; return True when it is the `[DONE]` sentinel."""
    if data == "[DONE]":
        return True
    try:
        obj = orjson.loads(data)  # 0.7 us per event against json's 3.0 us (timeit, a token chunk)
    except orjson.JSONDecodeError:
        record.fail(ErrorKind.INVALID_EVENT, f"event data is not JSON: {data[:200]!r}")
        return False
    if not isinstance(obj, dict):
        record.fail(ErrorKind.INVALID_EVENT, f"event data is not a JSON object: {data[:200]!r}")
        return False
    record.chunks += 1
    if record.first_chunk_ns is None:
        record.first_chunk_ns = now
        record.response_id = obj.get("id")
    if obj.get("error"):
        record.fail(ErrorKind.IN_BAND, json.dumps(obj["error"])[:500])
    before = record.completion_tokens
    usage = obj.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        record.cached_tokens = details.get("cached_tokens") if isinstance(details, dict) else None
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        record.reasoning_tokens = reasoning if isinstance(reasoning, int) else None
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        text, visible = _content_text(choice)
        if text:
            record.text.append(text)
            cast(list[int], record.token_ns).append(now)  # the client's records hold lists
            record.last_token_ns = now
            if record.first_token_ns is None:
                record.first_token_ns = now
            if not visible:
                record.reasoning_events += 1
            elif record.first_output_ns is None:
                record.first_output_ns = now
            if usage:  # per-chunk usage (vLLM `continuous_usage_stats`): this chunk's tokens
                record.chunk_tokens.append((record.completion_tokens or 0) - (before or 0))
        elif record.first_token_ns is None:
            record.last_token_ns = now  # a text-less stream: each choice chunk is a token
        reason = choice.get("finish_reason")
        if reason:
            record.finish_reason = reason if isinstance(reason, str) else _reason_text(reason)
            _apply_nvext(record, obj.get("nvext"))  # once per request: no cost per token
    elif "nvext" in obj:
        _apply_nvext(record, obj["nvext"])
    return False


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _worker(value: object) -> str | None:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _apply_nvext(record: RequestRecord, nvext: object) -> None:
    """Keep what a Dynamo frontend's `nvext` says of the request (`RequestRecord`): it sends
    `worker_id` on every chunk and `timing` once, on the chunk with the finish_reason (Dynamo
    1.6.1, seen against its frontend with mocker workers); anything else is left as it is."""
    if not isinstance(nvext, dict):
        return
    workers = nvext.get("worker_id")
    if isinstance(workers, dict):
        record.prefill_worker_id = _worker(workers.get("prefill_worker_id"))
        record.decode_worker_id = _worker(workers.get("decode_worker_id"))
    timing = nvext.get("timing")
    if isinstance(timing, dict):
        record.frontend_prefill_wait_ms = _number(timing.get("prefill_wait_time_ms"))
        record.frontend_prefill_ms = _number(timing.get("prefill_time_ms"))
        record.frontend_ttft_ms = _number(timing.get("ttft_ms"))
        record.frontend_total_ms = _number(timing.get("total_time_ms"))
        record.kv_transfer_estimated_ms = _number(timing.get("kv_transfer_estimated_latency_ms"))
        record.router_kv_hit_rate = _number(timing.get("kv_hit_rate"))


def _reason_text(reason: object) -> str:
    """A `finish_reason` that is not a string as text: an object's `type` (SGLang's
    `{"type": "abort", "message": ...}`), else its JSON."""
    if isinstance(reason, dict) and isinstance(reason.get("type"), str):
        return str(reason["type"])
    return json.dumps(reason)[:100]


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """Seconds a `Retry-After` header value asks to wait (RFC 9110 section 10.2.3:
    delay-seconds, or an HTTP-date, taken against `now_s`, default the wall clock); None when
    absent or not either form; never negative."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))


async def _body_sent(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    # aiohttp calls this right before it writes the body, coalesced with the headers, to the
    # socket, with no suspension in between; headers_sent would come a loop iteration earlier
    # on Python 3.11, where the body is written by a task of its own.
    record = context.trace_request_ctx
    if record.sent_ns is None:  # a redirected request stays timed from its first send
        record.sent_ns = time.monotonic_ns()


async def _get_sent(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestHeadersSentParams,
) -> None:
    # A GET has no body, so no chunk is sent: it is sent with its headers (aiohttp 3.14.5
    # http_writer.py, `write_headers` L219 awaits `on_headers_sent`). The POSTs stay timed by
    # `_body_sent`.
    if params.method == "GET" and getattr(context.trace_request_ctx, "sent_ns", None) is None:
        context.trace_request_ctx.sent_ns = time.monotonic_ns()


async def _connection_opened(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    context.trace_request_ctx.connect_ns = time.monotonic_ns()


def timing_trace() -> aiohttp.TraceConfig:
    """The trace that fills `RequestRecord.sent_ns` (a POST's when its body is written, a GET's
    with its headers) and `connect_ns`; a session made with it must pass the request's record
    as `trace_request_ctx`."""
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_body_sent)
    trace.on_request_headers_sent.append(_get_sent)
    trace.on_connection_create_start.append(_connection_opened)
    return trace


# What a kept-alive connection that the server closed without saying so (no `Connection:
# close`) raises when the next request is written to it: aiohttp 3.14.5 retries exactly these
# itself, once, for idempotent methods only (aiohttp/client.py, `_request`: "retrying-requests",
# `except (ClientOSError, ServerDisconnectedError)`, IDEMPOTENT_METHODS without POST), and
# raises "Cannot write to closing transport" as ClientConnectionResetError.
_STALE_CONNECTION = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    aiohttp.ClientConnectionResetError,
)
# How aiohttp follows a redirect of a POST (aiohttp/client.py, `_request`: 303, and 301/302
# for a POST, "mimic IE", become a GET without the body; 307/308 resend the POST).
_TO_GET = {301: "301", 302: "302", 303: "303"}


def peer_closed(transport: asyncio.BaseTransport | None) -> bool:
    """True when the peer of an idle kept-alive connection has closed it, as the kernel knows
    already though the event loop may not have read it yet (a busy client): a non-blocking
    `MSG_PEEK` of its socket reads the end of the stream, an error (a reset), or any byte: an
    idle HTTP/1.1 connection owes the client nothing, so a byte there is the server's closing
    word (a TLS close_notify, a 408) and never the answer to a request not yet written."""
    raw = None if transport is None else transport.get_extra_info("socket")
    if raw is None:
        return True
    sock = socket.socket(fileno=raw.fileno())  # the same descriptor, detached below
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False  # nothing to read: open
    except OSError:
        return True
    finally:
        sock.detach()
    return True


class LiveConnector(aiohttp.TCPConnector):
    """A `TCPConnector` that never hands out a kept-alive connection its server has closed.

    aiohttp reuses a pooled connection while its protocol `is_connected()` (aiohttp 3.14.5
    `connector.py`, `BaseConnector._get`, L747), which turns false only once the event loop has
    read the server's FIN; on a busy client the loop reads it late, the next request is written
    to the closed connection and the server's reset after it is a `dropped_after_send`. Each
    reused connection is therefore checked with `peer_closed` when taken from the pool, and a
    closed one is dropped and the next taken (a new one is opened when none is left)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handed_out: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(
        self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> Connection:
        while True:
            conn = await super().connect(req, traces, timeout)
            proto = conn.protocol
            if proto is None or proto not in self._handed_out:
                if proto is not None:
                    self._handed_out.add(proto)
                return conn
            if not peer_closed(conn.transport):
                return conn
            conn.close()  # the server's close, read ahead of the loop: never written to


def fresh_client(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """A session like `session` (base URL, timeouts, traces, TLS, no decompression) whose every
    request opens a connection of its own (`force_close`): for the one retry of a request
    whose pooled connection had been closed by the server."""
    return aiohttp.ClientSession(
        base_url=session._base_url,  # aiohttp keeps it private; the session was made with it
        # the session's TLS setting (aiohttp keeps it private; `loops.make_client` set it)
        connector=aiohttp.TCPConnector(
            force_close=True, ssl=cast(aiohttp.TCPConnector, session.connector)._ssl
        ),
        timeout=session.timeout,
        trace_configs=session.trace_configs,
        auto_decompress=False,
    )


async def stream_request(
    session: aiohttp.ClientSession,
    path: str,
    body: bytes,
    record: RequestRecord,
    deadline_s: float,
) -> None:
    """POST `body` (a JSON request with `stream: true`) to `path` and fill `record` in place.

    `session` comes from `loadgen.loops.make_client` (base URL, timeouts, `timing_trace`).
    Only events of type `message` (no `event:` field, or `event: message`) carry chunks, as
    the HTML standard's EventSource dispatches them (WHATWG HTML, 9.2.6 "Interpreting an event
    stream", "dispatch the event": the type is "message" unless the event type buffer names
    another, and `onmessage` sees only "message" events); an `error` event fails the request
    (`ErrorKind.IN_BAND`); any other named event (a keep-alive `ping` with a timestamp) is
    skipped and counted in `record.ignored_events`.
    `[DONE]` ends the request (`end_ns`); the rest of the body is read for up to
    `DONE_GRACE_S` so the connection goes back to the pool for reuse. `deadline_s` (seconds)
    bounds the whole request from `record.intended_ns`. A 200 stream without a generated token
    (`generated_token`) fails as `EMPTY_STREAM`; one with tokens that ends without `[DONE]` or a
    finish_reason as `TRUNCATED`. Never raises for request failures: they are recorded as
    `record.error_kind`/`record.error`.

    A request whose write to a reused connection failed because the server had closed it
    (`write_failed`: it provably never reached the server) is retried once on a fresh
    connection (`fresh_client`; `record.retried`); the lost attempt counts as client queue
    time. A request that was written and then lost its connection before any response is
    never sent again (the server may have read and run it): `ErrorKind.DROPPED`. A 200
    stream that ends with an unfinished `finish_reason` (`unfinished`) fails as
    `ErrorKind.ABORTED`; a timeout after the request was sent, or a failure after a wait
    (`measurement.errors.after_a_wait`: a gateway's 502 / 503 / 504, a connection lost 0.5 s
    or more after the send) sets `record.censored`; a 429 /
    503 answer keeps its `Retry-After` in `record.retry_after_s`. Redirects are followed
    (aiohttp's default, up to 10); the request stays timed from its first send and
    `record.redirected_to` keeps where it went. A 301/302/303 turns the POST into a GET
    without a body: its error says so.
    """
    now = time.monotonic_ns
    remaining = deadline_s - (now() - record.intended_ns) / 1e9
    done = False

    async def exchange(client: aiohttp.ClientSession) -> None:
        nonlocal done
        async with client.post(
            path, data=body, headers=_HEADERS, trace_request_ctx=record
        ) as response:
            record.status = response.status
            if response.history:
                record.redirected_to = str(response.url)
            if response.status != 200:
                if response.status in RETRY_AFTER_STATUSES:
                    record.retry_after_s = retry_after_s(response.headers.get("retry-after"))
                text = (await response.read())[:_ERROR_BODY_BYTES].decode("utf-8", "replace")
                note = _redirect_note(response) if response.history else ""
                said = f": {text}" if text else ""
                record.fail(ErrorKind.HTTP_STATUS, f"HTTP {response.status}{note}{said}")
                return
            parser = SSEParser()
            try:
                async for raw in response.content.iter_any():
                    t = now()
                    if record.first_byte_ns is None:
                        record.first_byte_ns = t
                    for event in parser.feed(raw):
                        if event.event == "message":
                            done = _apply_event(record, event.data, t) or done
                        elif event.event == "error":
                            record.fail(ErrorKind.IN_BAND, event.data)
                        else:  # not a message (`ping`, Dynamo's `reasoning_dispatch`)
                            record.ignored_events += 1
                    if done:
                        break
            finally:
                record.end_ns = now()
            if done and not response.content.is_eof():
                await _drain(response.content)

    try:
        async with asyncio.timeout(max(remaining, 0.0)):
            try:
                await exchange(session)
            except _STALE_CONNECTION as exc:
                if record.status is not None or record.connect_ns is not None:
                    raise  # a response had begun, or the connection was new: a real failure
                if not write_failed(exc):
                    raise  # written: the server may have read it, so it is not sent twice
                record.retried, record.sent_ns = True, None
                async with fresh_client(session) as fresh:
                    await exchange(fresh)
    except aiohttp.ServerTimeoutError as exc:  # connect or read timeout (a TimeoutError too)
        record.fail(ErrorKind.TIMEOUT, f"{type(exc).__name__}: {exc}")
        record.censored = record.sent_ns is not None
    except TimeoutError:
        if not done:  # the deadline passing while `_drain` waits does not undo a response
            record.fail(
                ErrorKind.TIMEOUT, f"no complete response within the {deadline_s:g} s deadline"
            )
            record.censored = record.sent_ns is not None
    except (aiohttp.ClientError, OSError) as exc:
        record.fail(failure_kind(record, exc), f"{type(exc).__name__}: {exc}")
    if not record.ok:
        record.censored = record.censored or after_a_wait(
            record.error_kind,
            record.status,
            None
            if record.sent_ns is None or record.error_ns is None
            else (record.error_ns - record.sent_ns) / 1e9,
            record.retry_after_s is not None,
        )
        return
    if unfinished(record.finish_reason):
        record.fail(
            ErrorKind.ABORTED,
            f"HTTP 200 stream ended with finish_reason {record.finish_reason!r}: the server "
            f"gave up on the request after {len(record.token_ns)} content event(s)",
        )
    elif not generated_token(record):
        record.fail(ErrorKind.EMPTY_STREAM, _empty_message(record, done))
    elif not done and record.finish_reason is None:
        record.fail(ErrorKind.TRUNCATED, "stream ended without [DONE] or a finish_reason")


def _errno(exc: BaseException) -> int | None:
    """The OS error number behind an aiohttp or OS exception (a connector error keeps the
    OSError it wraps as `os_error`), or None."""
    inner = getattr(exc, "os_error", None)
    return getattr(inner if isinstance(inner, OSError) else exc, "errno", None)


def write_failed(exc: BaseException) -> bool:
    """True when writing the request itself failed, so the server provably never read it:
    aiohttp raises `ClientConnectionResetError` only from a write ("Cannot write to closing
    transport": the peer had closed the connection; "Connection lost" while the body was
    being written), and EPIPE is a write to a connection the peer had already reset. A failed
    body write reaches the caller as `ClientOSError("Can not write request body ...")` with
    that error as its `__cause__` (aiohttp 3.14.5 `client_reqrep.py`, `write_bytes`), so the
    chain of causes is read."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectionResetError) or _errno(cause) == errno.EPIPE:
            return True
        cause = cause.__cause__
    return False


def failure_kind(record: RequestRecord, exc: BaseException) -> ErrorKind:
    """What a connection-level failure was: the TLS handshake (`TLS`: most often a
    certificate the client does not trust); the client's own socket limit (`CLIENT`); before
    the request was written (`CONNECTION`: it never reached the server); after it was written
    and before any response (`DROPPED`: the server may have read and run it); after the
    response began (`TRUNCATED`)."""
    if record.status is not None:
        return ErrorKind.TRUNCATED
    if isinstance(exc, aiohttp.ClientSSLError):
        return ErrorKind.TLS
    if _errno(exc) in CLIENT_LIMIT_ERRNOS:
        return ErrorKind.CLIENT
    if record.sent_ns is None or write_failed(exc):
        return ErrorKind.CONNECTION
    return ErrorKind.DROPPED


def _redirect_note(response: aiohttp.ClientResponse) -> str:
    """What the redirects before an error answer did, put before the answer's body in its
    message (which is cut at `loadgen.api.ERROR_MESSAGE_CHARS`)."""
    hop = f" after a {response.history[0].status} redirect to {response.url}"
    if any(r.status in _TO_GET for r in response.history):
        return (
            f"{hop}: the redirect turned the POST into a GET without its body (as HTTP clients "
            f"follow 301/302/303); use --url {server_of(str(response.url))}, or have the "
            "server answer 307/308"
        )
    return hop


async def _drain(content: aiohttp.StreamReader) -> None:
    """Read what follows `[DONE]` for at most `DONE_GRACE_S`; a body still open after that is
    left to aiohttp, which closes that connection instead of pooling it."""
    with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
        async with asyncio.timeout(DONE_GRACE_S):
            await content.read()


def generated_token(record: RequestRecord) -> bool:
    """True when a 200 stream shows that the server generated at least one token: some
    content text arrived, or `usage.completion_tokens` > 0 (the Dynamo mocker streams chunks
    without decodable text but counts its tokens). A stream with neither is `EMPTY_STREAM`."""
    tokens = record.completion_tokens
    return record.first_token_ns is not None or (isinstance(tokens, int) and tokens > 0)


def _empty_message(record: RequestRecord, done: bool) -> str:
    if record.first_byte_ns is None:
        body = "an empty (zero-byte) body"
    elif record.chunks == 0:
        body = "only [DONE]" if done else "no data event"
    else:
        if done or record.finish_reason is not None:
            ending = "ended with [DONE]" if done else f"finish_reason {record.finish_reason!r}"
        else:
            ending = "ended without [DONE] or a finish_reason"
        body = f"{record.chunks} data event(s) with no content text, {ending}"
    if record.ignored_events:
        body += f" ({record.ignored_events} named non-message event(s) skipped)"
    return (
        f"HTTP 200 stream with no generated token: {body}; usage.completion_tokens "
        f"{record.completion_tokens!r}"
    )
