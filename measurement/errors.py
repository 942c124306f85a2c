"""Why a request failed (`ErrorKind`) and the facts that decide it, without the HTTP client:
the statistics read them where aiohttp is not imported (`bench/program_import.py`)."""

import errno
from enum import StrEnum


class ErrorKind(StrEnum):
    """Why a request failed; failed requests are excluded from latency statistics."""

    HTTP_STATUS = "http_status"  # a status other than 200
    IN_BAND = "in_band_error"  # `{"error": ...}` (or `event: error`) inside a 200 stream
    TIMEOUT = "timeout"  # connect/read timeout or the per-request deadline
    CONNECTION = "connection_error"  # refused, or failed before the request was written
    DROPPED = "dropped_after_send"  # written, then the connection ended before any response
    CLIENT = "client_socket_error"  # the client could not open a socket (its own limits)
    TRUNCATED = "truncated_stream"  # body ended without `[DONE]` or a finish_reason, or cut off
    ABORTED = "aborted"  # a 200 stream that ended with finish_reason abort / error (unfinished)
    EMPTY_STREAM = "empty_stream"  # a 200 stream with no sign of a generated token (see below)
    INVALID_EVENT = "invalid_event"  # an event whose data is not JSON
    TLS = "tls_error"  # the TLS handshake failed: most often a certificate the client refused


UNFINISHED_REASONS = frozenset({"abort", "aborted", "error", "cancelled", "canceled"})
"""`finish_reason`s (case ignored; an object's `type`, as SGLang sends `{"type": "abort"}`)
that say the server gave up on the request: vLLM's `FinishReason.ABORT` / `ERROR`
(vllm/v1/engine/__init__.py, sent as "abort" / "error" under HTTP 200), SGLang's abort."""
# errno values of a socket the client itself could not open: out of file descriptors
# (process or system), out of ephemeral ports ("Cannot assign requested address"), out of
# buffer memory. None of them says anything about the server.
CLIENT_LIMIT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EADDRNOTAVAIL, errno.ENOBUFS})


def unfinished(reason: str | None) -> bool:
    """True when `reason` (a record's `finish_reason`) is one of `UNFINISHED_REASONS`."""
    return reason is not None and reason.strip().lower() in UNFINISHED_REASONS


GATEWAY_STATUSES = frozenset({502, 503, 504})
"""Answers an intermediary gives when the server behind it did not answer in time or at all
(Envoy's and ingress-nginx's upstream timeout is a 504, a reset upstream a 502 or 503)."""
AFTER_A_WAIT_S = 0.5
"""A failure at least this long (s) after the request was sent came after a wait: longer
than a server or proxy takes to refuse a request outright, short of any gateway's timeout."""


def after_a_wait(
    kind: ErrorKind | None, status: int | None, waited_s: float | None, retry_after: bool
) -> bool:
    """True when a failed request gave up waiting rather than being refused, so its time to
    the failure is a lower bound of its TTFT and E2E (as a request cut at the client's own
    deadline is): a 502 / 503 / 504 answer without `Retry-After` (a 503 asking for a later
    retry is a refusal), or a connection that ended after the request was sent
    (`DROPPED`, `TRUNCATED`), `waited_s` (from the send to the failure) `AFTER_A_WAIT_S` or
    more after it was sent. A refused connection never reached the server (`CONNECTION`)."""
    if waited_s is None or waited_s < AFTER_A_WAIT_S:
        return False
    if kind is ErrorKind.HTTP_STATUS:
        return status in GATEWAY_STATUSES and not retry_after
    return kind in (ErrorKind.DROPPED, ErrorKind.TRUNCATED)


def unknown_field(status: int | None, message: str) -> bool:
    """True when an error answer (`status`, its body in `message`) says the request had a field
    the server does not accept: a 400 or 422 naming `nvext`, or pydantic's "Extra inputs are not
    permitted" (`extra_forbidden`), as a server whose request models forbid extra fields
    answers: TensorRT-LLM's OpenAI server (`tensorrt_llm/serve/openai_protocol.py` at
    NVIDIA/TensorRT-LLM 0076e939, `OpenAIBaseModel`: `model_config = ConfigDict(extra="forbid",
    populate_by_name=True)`)."""
    text = message.lower()
    return status in (400, 422) and (
        "nvext" in text or "extra inputs are not permitted" in text or "extra_forbidden" in text
    )
