"""A simulation beside measured runs (``testbed simulate STACK --against RESULTS``): the measured
folder's grid as the simulation's, then every figure of :data:`simulator.calibration_fit.METRICS`
at every grid point side by side with its error, a one-line verdict (how many values are within
+-25%), then TTFT phase by phase (:mod:`simulator.phase_scores`: each phase's mean and p50,
measured beside simulated, and the router's balance, hit efficacy and per-role worker loads;
a folder without phases is said once and compared on the figures only), written to
``<out>/<stack>/against/`` inside the simulation's own folder: ``summary.json``, ``table.txt``
and ``report.html``, the A / B report of the simulated and the measured folder
(:func:`outputs.html_report.write_report`). The measured folder is only read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from measurement.results import PointSummary
from outputs.folder_reader import load_results
from outputs.html_report import write_report
from simulator.calibration_fit import METRICS, WITHIN, within_count
from simulator.folder_labels import folder_labels
from simulator.phase_scores import (
    AGREE_MS,
    BELOW_FLOOR,
    NOT_MODELLED,
    PhaseValue,
    paired_points,
    point_label,
    worker_loads,
)
from steptime.calibration_profile import ScoredValue

AGAINST_DIR = "against"
"""The folder, inside the simulated stack's, that holds the comparison."""


def simulated_warning(folder: Path) -> str | None:
    """One line where the folder compared against is itself simulated (its ``result.json``
    says so: ``testbed simulate`` wrote it), else None: its "measured" side is then the timing
    model's, and the verdict compares the simulation with a simulation."""
    loaded = load_results(folder)
    if loaded.grid is None or loaded.grid.simulated is None:
        return None
    return (
        f"--against {folder} is itself simulated (its result.json says so), not measured: the "
        "comparison is of two simulations; compare against a folder testbed load or the load "
        "step wrote"
    )


def measured_on(folder: Path) -> str | None:
    """``measured on <gpu>/<model> (<engine>, <served by>)`` as the folder records it
    (:mod:`simulator.folder_labels`; ``simulated on`` where the folder is itself simulated),
    None where it records neither GPU nor engine."""
    labels = folder_labels(folder)
    if labels.gpu is None and labels.engine is None:
        return None
    how = ", ".join(x for x in (labels.engine, labels.served_by) if x)
    verb = "simulated" if labels.simulated else "measured"
    return f"{verb} on {labels.on}" + (f" ({how})" if how else "")


def verdict(values: Sequence[ScoredValue], measured: str) -> str:
    """One line: how many values are within +-25% of ``measured``'s, in all and per metric."""
    per_metric = []
    for metric in METRICS:
        of = [v for v in values if v.metric == metric]
        if of:
            per_metric.append(f"{metric} {within_count(of)}/{len(of)}")
    return (
        f"SIMULATED vs measured {measured}: {within_count(values)} of {len(values)} values "
        f"within +-{WITHIN:.0%} ({', '.join(per_metric)})"
    )


def values_table(title: str, values: Sequence[ScoredValue], *, folders: bool) -> Table:
    """Measured beside simulated, with the error (``✗`` outside +-25%); ``folders``: a column
    naming each value's folder. A value that rounds to 0 prints as 0, never -0."""
    table = Table(title=title)
    columns = ["folder"] if folders else []
    for column in (*columns, "point", "metric", "measured", "simulated", "error"):
        right = column in ("measured", "simulated", "error")
        table.add_column(column, justify="right" if right else "left")
    for v in values:
        mark = "" if abs(v.error) <= WITHIN + 1e-12 else " ✗"
        cells = [v.folder] if folders else []
        table.add_row(
            *cells,
            v.point,
            v.metric,
            f"{v.measured:z,.1f}",
            f"{v.simulated:z,.1f}",
            f"{v.error:+z.0%}{mark}",
        )
    return table


UNCOUNTED_CELLS = {
    BELOW_FLOOR: f"no: < {AGREE_MS:g} ms",
    **dict.fromkeys(NOT_MODELLED.values(), "no: not modelled"),
}
"""The phases table's ``counted`` cell of each reason a value is not counted."""


def phase_within(value: PhaseValue) -> bool:
    """Whether a phase value is within +-25% (one without a relative error is not)."""
    return value.error is not None and abs(value.error) <= WITHIN + 1e-12


def phases_table(
    title: str, values: Sequence[PhaseValue], *, folders: bool, caption: str | None = None
) -> Table:
    """Each phase figure measured beside simulated, with the error (``✗`` outside +-25% where
    counted; ``-`` where it has none, :class:`simulator.phase_scores.PhaseValue`) and whether it
    counts in the tally (:func:`phases_tally`), the caption saying why those that do not;
    ``folders``: a column naming each value's folder; ``caption`` leads the caption."""
    table = Table(title=title)
    columns = ["folder"] if folders else []
    for column in (*columns, "point", "phase", "stat", "measured", "simulated", "error", "counted"):
        right = column in ("measured", "simulated", "error")
        table.add_column(column, justify="right" if right else "left")
    for v in values:
        error = "-" if v.error is None else f"{v.error:+z.0%}"
        if v.uncounted is None and not phase_within(v):
            error += " ✗"
        number = "{:z,.1f}" if v.stat.endswith("_ms") else "{:z,.2f}"
        table.add_row(
            *([v.folder] if folders else []),
            v.point,
            v.phase,
            v.stat.removesuffix("_ms"),
            number.format(v.measured),
            number.format(v.simulated),
            error,
            "yes" if v.uncounted is None else UNCOUNTED_CELLS[v.uncounted],
        )
    notes = [caption] if caption else []
    for why in dict.fromkeys(v.uncounted for v in values if v.uncounted is not None):
        phases = ", ".join(dict.fromkeys(v.phase for v in values if v.uncounted == why))
        notes.append(f"not counted: {phases}: {why}")
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table


def phases_tally(values: Sequence[PhaseValue]) -> str:
    """``N of M within +-25% (K not counted: ...)``: the counted phase values within +-25%
    (:func:`phase_within`) of those counted, and how many are not (``uncounted``)."""
    counted = [v for v in values if v.uncounted is None]
    left = len(values) - len(counted)
    within = sum(phase_within(v) for v in counted)
    note = f" ({left} not counted: not modelled, or within {AGREE_MS:g} ms)" if left else ""
    return f"{within} of {len(counted)} within +-{WITHIN:.0%}{note}"


def point_workers(
    measured: Sequence[PointSummary], simulated: Sequence[PointSummary]
) -> list[dict[str, Any]]:
    """Per measured grid point that both sides split into phases, the requests each worker
    served by role, most first (:func:`simulator.phase_scores.worker_loads`), measured and
    simulated: the router's balance compared worker by worker, by rank, not by id."""
    return [
        {
            "point": point_label(m),
            "measured": worker_loads(m.phases),
            "simulated": worker_loads(s.phases),
        }
        for m, s in paired_points(measured, simulated)
    ]


def loads_line(point: dict[str, Any]) -> str:
    """``K=2 c=4 requests per worker, measured / simulated: prefill 30, 20 / 26, 24; ...``
    (an entry of :func:`point_workers`)."""
    roles = sorted(set(point["measured"]) | set(point["simulated"]))
    parts = [
        f"{role} {', '.join(map(str, point['measured'].get(role, []))) or '-'} / "
        f"{', '.join(map(str, point['simulated'].get(role, []))) or '-'}"
        for role in roles
    ]
    return f"{point['point']} requests per worker, measured / simulated: {'; '.join(parts)}"


def write_against(
    stack_dir: Path,
    measured: Path,
    values: Sequence[ScoredValue],
    table_text: str,
    phases: Sequence[PhaseValue] = (),
    phase_note: str | None = None,
    workers: Sequence[dict[str, Any]] = (),
) -> Path:
    """``stack_dir/against/summary.json`` (the measured folder, whether it is itself simulated
    and :func:`simulated_warning`'s line, the verdict, the counts and every value; the phase
    values, ``phaseNote`` (:func:`simulator.phase_scores.missing_phases`) and ``workers``, the
    workers' loads per point, :func:`point_workers`), ``table.txt`` and ``report.html`` (simulated /
    measured); returns the folder."""

    folder = stack_dir / AGAINST_DIR
    warning = simulated_warning(measured)
    folder.mkdir(parents=True, exist_ok=True)
    summary = {
        "measured": str(measured),
        "simulated": str(stack_dir),
        "measuredIsSimulated": warning is not None,
        "measuredOn": measured_on(measured),
        "warnings": [warning] if warning else [],
        "verdict": verdict(values, str(measured)),
        "within": within_count(values),
        "values": len(values),
        "withinFraction": WITHIN,
        "points": [v.model_dump(mode="json", by_alias=True) for v in values],
        "phases": [v.model_dump(mode="json", by_alias=True) for v in phases],
        "phaseNote": phase_note,
        "workers": list(workers),
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (folder / "table.txt").write_text(table_text)
    write_report([load_results(stack_dir), load_results(measured)], folder / "report.html")
    return folder
