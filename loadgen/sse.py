"""An incremental `text/event-stream` parser over raw body bytes.

Follows the HTML Living Standard, "Server-sent events", section 9.2.6 (interpreting an event
stream): lines end in CRLF, LF or CR (a CR at the end of one read and an LF at the start of the
next are one line end); a line starting with ':' is a comment; `field: value` drops one leading
space of the value; `data` lines are joined with LF; an empty line dispatches the event unless its
data buffer is empty; an incomplete event at the end of the stream is discarded; a leading UTF-8
BOM is dropped.

Lines are split on bytes and decoded one complete line at a time: LF and CR never occur inside a
multi-byte UTF-8 sequence, so a character split across two reads is decoded correctly (invalid
bytes become U+FFFD, as the standard's UTF-8 decode does). We parse bytes ourselves rather than
through httpx-sse so the caller reads the clock once per network read, before any parsing, and
pays one Python call per read instead of a chain of async generators (bench/sse_cpu.py measures
both).
"""

from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event: `event` is the type ("message" when no `event:` field was sent)."""

    data: str
    event: str = "message"


class SSEParser:
    """Feed raw body bytes with `feed(bytes) -> list[Event]`; keeps partial lines between reads."""

    __slots__ = ("_data", "_event", "_partial", "_pending_cr", "_started", "last_event_id")

    def __init__(self) -> None:
        self._partial = b""
        self._pending_cr = False
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self.last_event_id = ""

    def feed(self, chunk: bytes) -> list[Event]:
        """Parse one read of body bytes; return the events completed by it (possibly none)."""
        if not self._started:
            chunk = self._partial + chunk
            self._partial = b""
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                self._partial = chunk
                return []
            self._started = True
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        if b"\r" in chunk:
            self._pending_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            self._pending_cr = False
        if b"\n" not in chunk:
            self._partial += chunk
            return []
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        events: list[Event] = []
        for raw in lines:
            if not raw:
                if self._data:
                    events.append(Event("\n".join(self._data), self._event or "message"))
                self._data = []
                self._event = ""
                continue
            if raw[0] == 0x3A:  # ':' starts a comment (keep-alive)
                continue
            if raw.startswith(b"data: "):  # the common case, same result as the general path
                self._data.append(raw[6:].decode("utf-8", "replace"))
                continue
            line = raw.decode("utf-8", "replace")
            name, colon, value = line.partition(":")
            if colon and value.startswith(" "):
                value = value[1:]
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id" and "\0" not in value:
                self.last_event_id = value
        return events
