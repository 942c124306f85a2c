"""The simulation beside measured runs phase by phase (``testbed simulate --against``,
``testbed calibrate``): per grid point, each phase of TTFT (:data:`measurement.phases.PHASES`: the
client queue, the frontend's prefill wait, the prefill leg, the KV transfer leg, the residual)
by its mean and p50 over the point's requests (:class:`measurement.results.TtftPhases`, the median
over the point's runs), measured beside simulated, and the router's balance and hit efficacy
from the workers that served each request.

The two sides carry the same fields: a measured Dynamo run from the frontend's ``nvext``
(:mod:`loadgen.request`), a simulated one from the timing model (:mod:`simulator.retime`), each
with its prefill and decode worker per request (Dynamo's instance ids measured, the replicas'
names simulated: workers are compared by role and load, never by id). A folder measured without
the frontend's timing (an older folder, a server that is not Dynamo) has no phases:
:func:`missing_phases` says so in one line and the comparison is of the figures alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from measurement.phases import PHASES
from measurement.results import PointSummary, TtftPhases

PHASE_STATS = ("mean_ms", "p50_ms")
"""The :class:`measurement.results.PhaseFigures` fields compared (ms): the mean over the point's
requests and their p50; not the p99, one request's time in a short run."""

ROUTING_FIGURES = ("balance", "hit_efficacy")
"""The :class:`measurement.results.TtftPhases` figures of the router compared (ratios)."""

ERROR_FLOOR_MS = 0.1
"""A phase measured at or below this (ms; the tables' precision) gets no relative error: a
residual or a client queue of about 0 on both sides would give any ratio at all."""

AGREE_MS = 1.0
"""A phase measured below this (ms) and simulated within this of it agrees, and is not counted
in the within-+-25% tally: a 0.3 ms client queue simulated as 0 is -100% yet no miss."""

NOT_MODELLED = {
    "residual": "the simulation does not model it (no network, no frontend work outside the "
    "frontend's clock: 0 by construction)"
}
"""Phases the simulation does not model, each with why: compared, never counted. The residual:
:func:`simulator.retime._frontend_timing` ends the frontend's TTFT (with the KV transfer
estimate where disaggregated) at the client's first token."""

BELOW_FLOOR = (
    f"measured below {AGREE_MS:g} ms and simulated within {AGREE_MS:g} ms of it (a relative "
    "error means nothing there)"
)
"""Why a phase under :data:`AGREE_MS` is not counted."""


class PhaseValue(BaseModel):
    """One phase figure of one grid point, measured beside simulated: ``folder`` (the measured
    results folder), ``point`` (``K=<prefix kinds> c=<concurrency>``), ``phase`` (a name of
    :data:`measurement.phases.PHASES`, or of :data:`ROUTING_FIGURES`), ``stat`` (a field of
    :data:`PHASE_STATS`, or ``ratio``), ``measured`` and ``simulated`` (ms, or the ratio) and
    ``error`` (simulated / measured - 1; None where the measured phase is not above
    :data:`ERROR_FLOOR_MS`: a residual about or below 0 has no relative error) and
    ``uncounted``: why the value is left out of the within-+-25% tally (:data:`NOT_MODELLED`,
    :data:`BELOW_FLOOR`), None where it counts."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    folder: str
    point: str
    phase: str
    stat: str
    measured: float
    simulated: float
    error: float | None
    uncounted: str | None = None


def point_label(point: PointSummary) -> str:
    """A grid point as the phase tables name it: ``K=2 c=4``."""
    return f"K={point.prefix_kinds} c={point.concurrency}"


def paired_points(
    measured_points: Sequence[PointSummary], simulated: Sequence[PointSummary]
) -> list[tuple[PointSummary, PointSummary]]:
    """Each measured grid point with the simulated one of the same prefix kinds and
    concurrency, where both sides split TTFT into phases (points missing on either side are
    left out), in the measured order."""
    by_point = {(p.prefix_kinds, p.concurrency): p for p in simulated}
    pairs = []
    for m in measured_points:
        s = by_point.get((m.prefix_kinds, m.concurrency))
        if s is not None and m.phases is not None and s.phases is not None:
            pairs.append((m, s))
    return pairs


def _value(
    folder: str, point: str, phase: str, stat: str, measured: float, simulated: float
) -> PhaseValue:
    in_ms = stat.endswith("_ms")
    error = simulated / measured - 1 if measured > (ERROR_FLOOR_MS if in_ms else 0.0) else None
    uncounted = NOT_MODELLED.get(phase)
    if (
        uncounted is None
        and in_ms
        and measured < AGREE_MS
        and abs(simulated - measured) <= AGREE_MS
    ):
        uncounted = BELOW_FLOOR
    return PhaseValue(
        folder=folder,
        point=point,
        phase=phase,
        stat=stat,
        measured=measured,
        simulated=simulated,
        error=error,
        uncounted=uncounted,
    )


def compare_phases(
    folder: str, measured: TtftPhases, simulated: TtftPhases, point: str
) -> list[PhaseValue]:
    """Every phase both sides have (in :data:`PHASES` order, each by :data:`PHASE_STATS`), then
    the :data:`ROUTING_FIGURES` both have, of one grid point ``point``."""
    out = []
    for phase in PHASES:
        m, s = measured.phases.get(phase), simulated.phases.get(phase)
        if m is None or s is None:
            continue
        for stat in PHASE_STATS:
            out.append(_value(folder, point, phase, stat, getattr(m, stat), getattr(s, stat)))
    for figure in ROUTING_FIGURES:
        m_value, s_value = getattr(measured, figure), getattr(simulated, figure)
        if m_value is not None and s_value is not None:
            out.append(_value(folder, point, figure, "ratio", m_value, s_value))
    return out


def score_phases(
    folder: str, measured_points: Sequence[PointSummary], simulated: Sequence[PointSummary]
) -> list[PhaseValue]:
    """:func:`compare_phases` of each measured grid point of ``folder`` that both sides split
    into phases (:func:`paired_points`)."""
    out = []
    for m, s in paired_points(measured_points, simulated):
        assert m.phases is not None and s.phases is not None
        out += compare_phases(folder, m.phases, s.phases, point_label(m))
    return out


def missing_phases(
    folder: str, measured_points: Sequence[PointSummary], simulated: Sequence[PointSummary]
) -> str | None:
    """One line where a side has no phases at all (the measured folder: no per-request timing
    from the server, an older folder or a server that is not Dynamo; the simulation: a stack
    without a Dynamo frontend), else None."""
    if not any(p.phases is not None for p in measured_points):
        return (
            f"{folder} has no TTFT phases (its requests carry no timing from a Dynamo frontend: "
            "an older folder, or a server that is not Dynamo): compared on the figures only"
        )
    if not any(p.phases is not None for p in simulated):
        return (
            "the simulation has no TTFT phases (the stack has no Dynamo frontend): compared on "
            "the figures only"
        )
    return None


def worker_loads(phases: TtftPhases | None) -> dict[str, list[int]]:
    """Per role (``prefill``, ``decode``, ``aggregated``), the requests each worker served,
    most first: the shape of the load the router made, comparable without the workers' ids."""
    out: dict[str, list[int]] = {}
    for share in [] if phases is None else phases.workers:
        out.setdefault(share.role, []).append(share.requests)
    return {role: sorted(loads, reverse=True) for role, loads in out.items()}
