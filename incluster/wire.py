"""The load pod's output: one JSON object per line on its stdout (the container's log stream),
and the reader that turns a pod's log back into its runs.

Why the log stream: it is kept by the kubelet after the container ends, whether it finished,
failed, was OOMKilled or cut by the Job's deadline, for as long as the pod object exists (the
step reads it before deleting the Job), and it needs no volume, no object store and no write
access to the API from the pod. Limits: the kubelet rotates a container's log file at
``containerLogMaxSize``, 10 MiB by default, keeping ``containerLogMaxFiles`` (5), and the API
serves the latest file only (Kubernetes docs, "Logging Architecture", "Log rotation": "Only
the contents of the latest log file are available through kubectl logs"). So a client must
write less than 10 MiB: :func:`stackmodel.log_budget.log_budget_problem` refuses a grid that could
write more (preview stops on it, naming ``load.clients``). A pod evicted from its node loses its
log with its containers: its runs are then missing, and the status says so.

Lines (``"tb"`` names the kind; any other line, e.g. a Python warning, is kept as text):

- ``clock``: the shard's ``time.monotonic_ns()`` and ``time.time_ns()`` read together: what
  the wall clocks say of the shards' offsets, which the merge checks against the barrier's
  common instant (pods on different nodes have unrelated monotonic clocks, and a node's wall
  clock can be seconds off: :func:`incluster.collect.merged_run`);
- ``sizing``: how prompts were sized (shard 0 calibrates; every shard uses its answer);
- ``readiness``: shard 0's readiness gate (:class:`loadgen.readiness.Readiness`);
- ``record``: one :class:`measurement.record.RequestRecord` of a run, every field as it is, but
  ``token_ns`` as its first time and the gaps after it, and the server's own fields
  (``FRONTEND_FIELDS``) as one list ``nv``, null when the server sent none (:func:`record_line`);
- ``run``: a shard finished run ``key``: its record count, start, the barrier's release of the
  measured loops (``met_ns``: the instant the merge aligns the shards on), CPU, loop lags and
  warm-up; written after the run's records, so a run with its ``run`` line is complete;
- ``server``: what the server's ``/metrics`` measured during run ``key`` (shard 0:
  :class:`measurement.results.ServerRunMetrics`);
- ``warning``: a warning of the grid (e.g. no ``/metrics`` on the server);
- ``failure``: why the shard stopped before the grid ended.
"""

import dataclasses
import itertools
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from loadgen.loops import ShareResult
from measurement.client_cost import Warmup
from measurement.errors import ErrorKind
from measurement.record import FRONTEND_FIELDS, UNKEPT_FIELDS, RequestRecord

_FIELDS = tuple(
    f.name
    for f in dataclasses.fields(RequestRecord)
    if f.name not in UNKEPT_FIELDS and f.name not in FRONTEND_FIELDS
)
_NS_FIELDS = tuple(name for name in _FIELDS if name.endswith("_ns"))
"""The record's monotonic times (ints, or lists of ints such as ``token_ns``)."""
_NS_LISTS = tuple(
    f.name
    for f in dataclasses.fields(RequestRecord)
    if f.name in _NS_FIELDS and f.default_factory is list
)
"""The lists of times (``token_ns``): written as the first time, then each gap to the one
before (at most ``readTimeoutS``: 12 digits, not 17), and summed back when read."""

Key = tuple[int, int, int]


def emit(kind: str, **fields: Any) -> None:
    """Write one line of ``kind`` to stdout (buffered: :func:`flush` after a run)."""
    sys.stdout.buffer.write(orjson.dumps({"tb": kind, **fields}) + b"\n")


def flush() -> None:
    """Hand what was written to the container runtime's log."""
    sys.stdout.buffer.flush()


def emit_clock(shard: int) -> None:
    """The ``clock`` line (monotonic and wall-clock ns read back to back)."""
    emit("clock", shard=shard, monotonic_ns=time.monotonic_ns(), unix_ns=time.time_ns())


def emit_run(
    shard: int,
    key: Key,
    started_ns: int,
    started_at: datetime,
    finished_at: datetime,
    done: ShareResult,
    warm: Warmup,
    met_ns: int | None,
) -> None:
    """A finished run: its records, then the ``run`` line (with ``met_ns``, when the barrier
    released the measured loops, on this shard's monotonic clock); flushed."""
    for record in done.records:
        sys.stdout.buffer.write(record_line(shard, key, record))
    emit(
        "run",
        shard=shard,
        key=key,
        records=len(done.records),
        started_ns=started_ns,
        met_ns=met_ns,
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
        cpu_s=done.cpu_s,
        loop_lags_ms=[round(lag, 2) for lag in done.loop_lags_ms],  # 10 us: below the timer's
        warmup=dataclasses.asdict(warm),
    )
    flush()


@dataclass
class ShardRun:
    """One shard's part of a finished run, its times on the shard's own monotonic clock."""

    started_ns: int
    started_at: datetime
    finished_at: datetime
    done: ShareResult
    warmup: Warmup
    met_ns: int | None = None
    """When the barrier started the measured loops, on the shard's clock (None: an older log)."""


@dataclass
class ShardLog:
    """What one pod's log says: its shard number, clock offset (``unix_ns - monotonic_ns``),
    complete runs by key, sizing, readiness and server metrics by run (shard 0), warnings,
    failure, and the other lines."""

    shard: int | None = None
    offset_ns: int | None = None
    runs: dict[Key, ShardRun] = field(default_factory=dict)
    sizing: dict[str, Any] | None = None
    readiness: dict[str, Any] | None = None
    server: dict[Key, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    failure: str | None = None
    text: list[str] = field(default_factory=list)


def record_line(shard: int, key: Key, record: RequestRecord) -> bytes:
    """The ``record`` line of one request: every field as it is, but the lists of times as
    first time then gaps (:data:`_NS_LISTS`), and a field that is None or False (the record's
    default for each of those: not failed, not retried, not censored, ...) left out, so what a
    successful request does not have costs nothing in the pod's log
    (:mod:`stackmodel.log_budget`)."""
    data = {
        name: value
        for name in _FIELDS
        if (value := getattr(record, name)) is not None and value is not False
    }
    for name in _NS_LISTS:
        times = data[name]
        data[name] = times[:1] + [b - a for a, b in itertools.pairwise(times)]
    server = [getattr(record, name) for name in FRONTEND_FIELDS]
    if any(v is not None for v in server):
        data["nv"] = [_short(v) for v in server]
    return orjson.dumps({"tb": "record", "shard": shard, "key": key, "record": data}) + b"\n"


def _short(value: object) -> object:
    """A server's figure as the log keeps it: milliseconds (and ratios) to 3 decimals."""
    return round(value, 3) if isinstance(value, float) else value


def _record(data: dict[str, Any]) -> RequestRecord:
    """The record of a ``record`` line (:func:`record_line`)."""
    kind = data.get("error_kind")
    times = {name: list(itertools.accumulate(data[name])) for name in _NS_LISTS}
    server = data.pop("nv", None) or [None] * len(FRONTEND_FIELDS)
    return RequestRecord(
        **{**data, **times, "error_kind": None if kind is None else ErrorKind(kind)},
        **dict(zip(FRONTEND_FIELDS, server, strict=True)),
    )


def parse_log(lines: Iterable[str]) -> ShardLog:
    """Read a pod's log back. A run counts only with its ``run`` line and all its records (a
    pod killed while writing one leaves it out); lines that are not ours go to ``text``."""
    log = ShardLog()
    pending: dict[Key, list[RequestRecord]] = {}
    for line in lines:
        try:
            obj = orjson.loads(line) if line.startswith('{"tb":') else None
        except orjson.JSONDecodeError:  # a line cut by the kill
            obj = None
        if not isinstance(obj, dict):
            if line.strip():
                log.text.append(line.rstrip("\n"))
            continue
        kind = obj["tb"]
        if kind == "clock":
            log.shard, log.offset_ns = obj["shard"], obj["unix_ns"] - obj["monotonic_ns"]
        elif kind == "record":
            pending.setdefault(tuple(obj["key"]), []).append(_record(obj["record"]))  # type: ignore[arg-type]
        elif kind == "run":
            key: Key = tuple(obj["key"])  # type: ignore[assignment]
            records = pending.pop(key, [])
            if len(records) == obj["records"]:
                log.runs[key] = ShardRun(
                    started_ns=obj["started_ns"],
                    started_at=datetime.fromisoformat(obj["started_at"]),
                    finished_at=datetime.fromisoformat(obj["finished_at"]),
                    done=ShareResult(records, obj["loop_lags_ms"], obj["cpu_s"]),
                    warmup=Warmup(**obj["warmup"]),
                    met_ns=obj.get("met_ns"),
                )
        elif kind == "sizing":
            log.sizing = {k: v for k, v in obj.items() if k != "tb"}
        elif kind == "readiness":
            log.readiness = obj["readiness"]
        elif kind == "server":
            log.server[tuple(obj["key"])] = obj["metrics"]  # type: ignore[index]
        elif kind == "warning":
            log.warnings.append(obj["message"])
        elif kind == "failure":
            log.failure = obj["message"]
    return log


def shifted(record: RequestRecord, delta_ns: int) -> RequestRecord:
    """``record`` with every monotonic time moved by ``delta_ns`` (onto another shard's clock)."""
    moved: dict[str, Any] = {}
    for name in _NS_FIELDS:
        value = getattr(record, name)
        if isinstance(value, list):
            moved[name] = [t + delta_ns for t in value]
        elif value is not None and (value or name != "intended_ns"):
            moved[name] = value + delta_ns
    return dataclasses.replace(record, **moved)
