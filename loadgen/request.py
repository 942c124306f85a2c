"""One streamed OpenAI-compatible request and its timing record.

All times are `time.monotonic_ns()` readings (nanoseconds, one system-wide clock), taken when the
bytes arrive: at the top of each iteration over `response.aiter_raw()`, before parsing.
"""

import asyncio
import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from loadgen.sse import SSEParser

_ERROR_BODY_BYTES = 2048


class ErrorKind(StrEnum):
    """Why a request failed; failed requests are excluded from latency statistics."""

    HTTP_STATUS = "http_status"  # a status other than 200
    IN_BAND = "in_band_error"  # `{"error": ...}` (or `event: error`) inside a 200 stream
    TIMEOUT = "timeout"  # connect/read timeout or the per-request deadline
    CONNECTION = "connection_error"  # refused, reset, or closed before the response started
    TRUNCATED = "truncated_stream"  # body ended without `[DONE]` or a finish_reason, or cut off
    INVALID_EVENT = "invalid_event"  # an event whose data is not JSON


@dataclass(slots=True)
class RequestRecord:
    """Timing and usage of one request.

    `intended_ns`: when the load pattern wanted it sent. `sent_ns`: when its request headers
    started going out on a pool connection (httpcore trace), so time spent waiting for a
    connection or opening one is client queue time (`sent - intended`), never TTFT.
    `connect_ns`: when a new TCP connection was opened for it (None: a reused connection).
    `first_byte_ns`: first body bytes; `first_chunk_ns`: first data event of any kind;
    `first_token_ns`: first event with non-empty `content`/`reasoning_content`/`reasoning`
    (chat) or `text` (completions); `token_ns`: arrival of every such content-bearing event;
    `chunks`: all data events (including role-only and usage chunks); `end_ns`: end of the body.
    Usage fields keep the last `usage` seen; `cached_tokens` is None when
    `usage.prompt_tokens_details.cached_tokens` was absent or null, distinct from 0.
    """

    index: int
    prefix_id: int
    intended_ns: int = 0
    connect_ns: int | None = None
    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_chunk_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    chunks: int = 0
    status: int | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    error_ns: int | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed without any error."""
        return self.error_kind is None

    def fail(self, kind: ErrorKind, message: str) -> None:
        """Record the first error of this request (later ones are ignored)."""
        if self.error_kind is None:
            self.error_kind = kind
            self.error = message[:500]
            self.error_ns = time.monotonic_ns()


@dataclass(slots=True)
class RunRecords:
    """One run's grid coordinates and its request records."""

    prefix_kinds: int
    concurrency: int
    repetition: int
    records: list[RequestRecord]


def _content_text(choice: dict[str, Any]) -> str | None:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
    return choice.get("text")


def _apply_event(record: RequestRecord, data: str, now: int) -> bool:
    """Apply one data event to `record`; return True when it is the `[DONE]` sentinel."""
    if data == "[DONE]":
        return True
    try:
        obj = json.loads(data)
    except ValueError:
        record.fail(ErrorKind.INVALID_EVENT, f"event data is not JSON: {data[:200]!r}")
        return False
    if not isinstance(obj, dict):
        record.fail(ErrorKind.INVALID_EVENT, f"event data is not a JSON object: {data[:200]!r}")
        return False
    record.chunks += 1
    if record.first_chunk_ns is None:
        record.first_chunk_ns = now
    if obj.get("error"):
        record.fail(ErrorKind.IN_BAND, json.dumps(obj["error"])[:500])
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        if _content_text(choice):
            record.token_ns.append(now)
            if record.first_token_ns is None:
                record.first_token_ns = now
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    usage = obj.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        record.cached_tokens = details.get("cached_tokens") if isinstance(details, dict) else None
    return False


async def stream_request(
    client: httpx.AsyncClient,
    path: str,
    body: bytes,
    record: RequestRecord,
    deadline_s: float,
) -> None:
    """POST `body` (a JSON request with `stream: true`) to `path` and fill `record` in place.

    Reads the body to its end even after `[DONE]`, so httpx returns the connection to the pool
    for reuse. `deadline_s` (seconds) bounds the whole request from `record.intended_ns`. Never
    raises for request failures: they are recorded as `record.error_kind`/`record.error`.
    """
    now = time.monotonic_ns

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name.endswith("send_request_headers.started"):
            record.sent_ns = now()
        elif name == "connection.connect_tcp.started":
            record.connect_ns = now()

    remaining = deadline_s - (now() - record.intended_ns) / 1e9
    done = False
    try:
        async with asyncio.timeout(max(remaining, 0.0)):
            request = client.build_request(
                "POST",
                path,
                content=body,
                headers={"content-type": "application/json", "accept": "text/event-stream"},
                extensions={"trace": trace},
            )
            response = await client.send(request, stream=True)
            try:
                record.status = response.status_code
                if response.status_code != 200:
                    text = (await response.aread())[:_ERROR_BODY_BYTES].decode("utf-8", "replace")
                    record.fail(ErrorKind.HTTP_STATUS, f"HTTP {response.status_code}: {text}")
                    return
                parser = SSEParser()
                async for raw in response.aiter_raw():
                    t = now()
                    if record.first_byte_ns is None:
                        record.first_byte_ns = t
                    for event in parser.feed(raw):
                        if event.event == "error":
                            record.fail(ErrorKind.IN_BAND, event.data)
                        elif _apply_event(record, event.data, t):
                            done = True
            finally:
                await response.aclose()
                record.end_ns = now()
    except TimeoutError:
        record.fail(ErrorKind.TIMEOUT, f"no complete response within the {deadline_s:g} s deadline")
    except httpx.TimeoutException as exc:
        record.fail(ErrorKind.TIMEOUT, f"{type(exc).__name__}: {exc}")
    except httpx.RemoteProtocolError as exc:
        kind = ErrorKind.CONNECTION if record.status is None else ErrorKind.TRUNCATED
        record.fail(kind, f"{type(exc).__name__}: {exc}")
    except httpx.TransportError as exc:
        kind = ErrorKind.CONNECTION if record.first_byte_ns is None else ErrorKind.TRUNCATED
        record.fail(kind, f"{type(exc).__name__}: {exc}")
    if record.ok and not done and record.finish_reason is None:
        record.fail(ErrorKind.TRUNCATED, "stream ended without [DONE] or a finish_reason")
