"""Incidents: what the serving side did during a load run, on the load's own timeline.

One format for every source: a Kubernetes pod watch (the load step, `testbed load
--kube-namespace`), a local process that died (`testbed simulate`'s launcher), and the
simulation's memory model killing a worker. Each incident carries its wall-clock time, its time
into the load (seconds since `GridResult.started_at`) and the grid run that was running then, so
tables, the status line and the report can place it.

The results folder keeps them as `incidents.json` (a list of `Incident` objects in JSON mode).
"""

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

INCIDENTS_FILE = "incidents.json"

IncidentKind = Literal[
    "terminated",  # a container ended (reason + exit code: OOMKilled/137, Error/1, Completed/0)
    "restarted",  # a container's restart count went up
    "ready_lost",  # a pod's Ready condition went False
    "ready_regained",  # ... and back to True
    "evicted",  # the kubelet evicted the pod (reason Evicted)
    "deleted",  # the pod object went away
]
IncidentSource = Literal["kubernetes", "local", "simulation"]


class RunWindow(BaseModel):
    """When one run (one repetition of one grid point) was running, in wall-clock UTC: from the
    start of its warm-up to the end of its last request."""

    prefix_kinds: int
    concurrency: int
    repetition: int
    started_at: datetime
    finished_at: datetime


class Incident(BaseModel):
    """One thing the serving side did during the load.

    `component` is the DGD component or worker group (`prefill`, `decode`, `worker`,
    `Frontend`, ...); `instance` the pod or local process (`prefill-0`). `t_s` is seconds since
    the grid started (`GridResult.started_at`); `prefix_kinds`/`concurrency`/`repetition` name
    the run that was running at `at` (None: before, between or after runs). `memory_bytes` is the
    memory at the kill where the source knows it (bytes; the simulation always does).
    """

    source: IncidentSource
    component: str
    instance: str
    kind: IncidentKind
    reason: str | None = None
    exit_code: int | None = None
    at: datetime = Field(description="Wall-clock time (UTC) the incident was observed.")
    t_s: float | None = Field(default=None, description="Seconds since the grid started.")
    prefix_kinds: int | None = None
    concurrency: int | None = None
    repetition: int | None = None
    memory_bytes: int | None = None
    message: str = ""


def locate(at: datetime, windows: Sequence[RunWindow]) -> RunWindow | None:
    """The run whose window contains `at` (inclusive at both ends), or None when `at` falls
    before, between or after the runs. Windows do not overlap (runs are sequential)."""
    return next((w for w in windows if w.started_at <= at <= w.finished_at), None)


def placed(incident: Incident, grid_started_at: datetime, windows: Sequence[RunWindow]) -> Incident:
    """`incident` with `t_s` (seconds since `grid_started_at`) and its run (see `locate`) set."""
    window = locate(incident.at, windows)
    return incident.model_copy(
        update={
            "t_s": (incident.at - grid_started_at).total_seconds(),
            "prefix_kinds": window.prefix_kinds if window else None,
            "concurrency": window.concurrency if window else None,
            "repetition": window.repetition if window else None,
        }
    )


def describe(incident: Incident) -> str:
    """One line for the status and the table's notes, e.g.
    "prefill-0 OOMKilled (exit 137) 9.1 s into K=2 c=4"; without a reason the kind is used, and
    "between runs" when no run was running, "before the load" when it came before the grid
    started (e.g. during the readiness gate)."""
    what = incident.reason or incident.kind.replace("_", " ")
    code = f" (exit {incident.exit_code})" if incident.exit_code is not None else ""
    when = f" {abs(incident.t_s):.1f} s" if incident.t_s is not None else ""
    if incident.prefix_kinds is not None and incident.concurrency is not None:
        where = f" into K={incident.prefix_kinds} c={incident.concurrency}"
    elif incident.t_s is not None and incident.t_s < 0:
        where = " before the load"
    else:
        where = " into the load, between runs" if when else ""
    return f"{incident.instance} {what}{code}{when}{where}"


def placed_all(
    incidents: Iterable[Incident], grid_started_at: datetime, windows: Sequence[RunWindow]
) -> list[Incident]:
    """Every incident `placed`, in time order."""
    return sorted((placed(i, grid_started_at, windows) for i in incidents), key=lambda i: i.at)
