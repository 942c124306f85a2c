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
