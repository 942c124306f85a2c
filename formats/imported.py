"""What every reader of `formats/` returns: one tool's run as read from its export
(`Imported`), the one error an import raises (`FormatError`), and the two readings all the
readers share (a time in any unit as ms, a JSON file)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from measurement.record import RequestRecord
from measurement.results import ImportSource
from workload.config import Api


class FormatError(ValueError):
    """A source that cannot be imported (one line: what is wrong, the file, and the fix)."""


@dataclass
class Imported:
    """One tool's run as read from its export: `records` (successful and failed requests, in
    send order; `intended_ns` = `sent_ns`, the tool's send), the load it ran with
    (`concurrency`: the closed loop's, or an open loop's most in flight; `request_rate`:
    requests/s of an open loop, None: closed), `api`, `model`, `url`, the lengths it asked for
    (`max_tokens`: None when it set none), its warm-up requests before the measured ones
    (`warmup_requests`; None: one a client, or not recorded), `started_at` (UTC), and
    `source`: the tool, its version, the file, what the file lacks and the tool's own figures
    (our metric keys)."""

    source: ImportSource
    records: list[RequestRecord]
    model: str
    url: str
    concurrency: int
    request_rate: float | None = None
    api: Api = Api.CHAT
    max_tokens: int | None = None
    warmup_requests: int | None = None
    started_at: datetime | None = None
    notes: list[str] = field(default_factory=list)


def as_ms(value: float, unit: str, what: str) -> float:
    """`value` in `unit` ("ns", "us", "ms", "s", "sec") as milliseconds. Raises FormatError
    naming `what` for any other unit."""
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3, "seconds": 1e3}
    if unit not in scale:
        raise FormatError(
            f"{what}: unit {unit!r} is not a time unit this importer reads (ns, us, ms, s)"
        )
    return value * scale[unit]


def load_json(path: Path) -> object:
    """The JSON in `path`. Raises FormatError (one line) when unreadable."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise FormatError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(
            f"{path}: not JSON ({exc}); give the tool's JSON export as it wrote it"
        ) from None
