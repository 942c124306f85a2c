"""Two stacks' load results side by side, with ratios (this stack / the baseline).

Pure: takes the ``results`` outputs of two stacks (loadgen ``summary.json`` objects) and
returns the ``comparison`` output. The layout is the seed's: each cell ``A / B`` with A the
baseline (e.g. ``kv-routing``) and B this stack (e.g. ``disagg-same-node``), plus B/A.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict
from rich import box
from rich.table import Table

from measurement.intervals import (
    CONFIDENCE,
    INTERVAL_METRICS,
    NOISE_THRESHOLD,
    PointComparison,
    ab_comparisons,
)
from measurement.results import MetricInterval
from metrics.registry import figure_key, figure_label
from outputs.settings_diff import settings_differences, settings_note
from outputs.tables import table_text, verdict_table
from stackmodel.resources import ResourceComparison, resource_note
from stackmodel.stack_layout import short_stack_name
from workload.config import LoadConfig

RATIO_METRICS = tuple(INTERVAL_METRICS)
"""Compared with a ratio B/A, its interval and a verdict: TTFT p50 and p99, ITL, TPOT and E2E
p50 and p99 (ms), requests/s, cached-token ratio (`measurement.intervals.INTERVAL_METRICS`)."""

RATIO_DIGITS = 3


class PointMetrics(BaseModel):
    """The fields of one grid point (a ``summary.json`` object) that are compared; others are
    ignored. Numbers may arrive as floats (Pulumi's wire format)."""

    model_config = ConfigDict(extra="ignore")

    prefix_kinds: int
    concurrency: int
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    tpot_p50_ms: float | None = None
    e2e_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2e_p99_ms: float | None = None
    requests_per_s: float | None = None
    cached_ratio: float | None = None
    errors: int = 0
    intervals: dict[str, MetricInterval] = {}


class Pair(BaseModel):
    """One metric of one grid point: baseline (A), this stack (B), and B/A (None when either
    is missing or A is 0); where both sides have the point, from their runs
    (`measurement.intervals.compare_runs`): `ratio_ci`, B/A's interval at the comparison's
    `confidence`; `delta_ci`, the interval of B - A (the metric's unit); `verdict`, `higher` /
    `lower` / `within noise` / `no difference detected` (against the comparison's
    `noiseThreshold`); `repetitions`, the runs of each side (baseline, this);
    `repetitions_needed`, about how many runs per side would detect the observed difference
    where none was; `note`, why any of these is missing. All None where a side lacks the point
    (and for errors)."""

    baseline: float | None
    this: float | None
    ratio: float | None
    ratio_ci: tuple[float, float] | None = None
    delta_ci: tuple[float, float] | None = None
    verdict: str | None = None
    repetitions: tuple[int, int] | None = None
    repetitions_needed: int | None = None
    note: str | None = None


class ComparisonRow(BaseModel):
    """One grid point present in either stack's results."""

    prefix_kinds: int
    concurrency: int
    ttft_p50_ms: Pair
    ttft_p99_ms: Pair
    itl_p50_ms: Pair
    tpot_p50_ms: Pair
    e2e_p50_ms: Pair
    itl_p99_ms: Pair
    tpot_p99_ms: Pair
    e2e_p99_ms: Pair
    requests_per_s: Pair
    cached_ratio: Pair
    errors: Pair


def ratio(baseline: float | None, this: float | None) -> float | None:
    """``this / baseline`` rounded to 3 decimals; None if either is None or the baseline is 0."""
    if baseline is None or this is None or baseline == 0:
        return None
    return round(this / baseline, RATIO_DIGITS)


def _pair(a: float | None, b: float | None, runs: PointComparison | None = None) -> Pair:
    if runs is None:
        return Pair(baseline=a, this=b, ratio=ratio(a, b))
    ci = runs.ratio_ci
    return Pair(
        baseline=a,
        this=b,
        ratio=ratio(a, b),
        ratio_ci=None if ci is None else (round(ci[0], RATIO_DIGITS), round(ci[1], RATIO_DIGITS)),
        delta_ci=runs.delta_ci,
        verdict=runs.verdict,
        repetitions=runs.repetitions,
        repetitions_needed=runs.repetitions_needed,
        note=runs.note,
    )


def _points(results: Sequence[Mapping[str, Any]]) -> dict[tuple[int, int], PointMetrics]:
    points = map(PointMetrics.model_validate, results)
    return {(p.prefix_kinds, p.concurrency): p for p in points}


def compare_points(
    baseline: Sequence[Mapping[str, Any]],
    this: Sequence[Mapping[str, Any]],
    confidence: float = CONFIDENCE,
) -> tuple[list[ComparisonRow], list[PointComparison]]:
    """Rows for the union of grid points, ordered by concurrency then prefix kinds (the seed's
    order); a point missing on one side has None there. Beside them, the comparisons of the
    runs at the points both sides have (`measurement.intervals.ab_comparisons` at `confidence`).

    Raises:
        pydantic.ValidationError: an item lacks ``prefix_kinds``/``concurrency`` or has a
            non-numeric metric.
    """
    a, b = _points(baseline), _points(this)
    runs = ab_comparisons(list(a.values()), list(b.values()), confidence)
    by_metric = {(c.prefix_kinds, c.concurrency, c.metric): c for c in runs}
    rows = []
    for key in sorted(a.keys() | b.keys(), key=lambda k: (k[1], k[0])):
        pa, pb = a.get(key), b.get(key)
        pairs = {
            metric: _pair(
                getattr(pa, metric) if pa else None,
                getattr(pb, metric) if pb else None,
                by_metric.get((*key, metric)),
            )
            for metric in (*RATIO_METRICS, "errors")
        }
        rows.append(ComparisonRow(prefix_kinds=key[0], concurrency=key[1], **pairs))
    return rows, runs


def _cell(pair: Pair, fmt: str) -> str:
    def one(value: float | None) -> str:
        return "-" if value is None else format(value, fmt)

    shown = f"{one(pair.baseline)} / {one(pair.this)}"
    return shown if pair.ratio is None else f"{shown} (x{pair.ratio:.2f})"


_COLUMNS = tuple(
    (figure_label(m, q), figure_key(m, q), fmt)
    for m, q, fmt in (
        ("ttft", 50, ",.0f"),
        ("ttft", 99, ",.0f"),
        ("requests_per_s", None, ".1f"),
        ("cached_ratio", None, ".3f"),
    )
)
"""The comparison table's metric columns: (title, `ComparisonRow` field, format)."""


def comparison_text(rows: Sequence[ComparisonRow], baseline: str, this: str) -> str:
    """The seed-style table as plain text: cells ``A / B (xB/A)``, errors ``A / B``."""
    table = Table(
        "prefix kinds",
        "concurrency",
        *(name for name, _, _ in _COLUMNS),
        "errors",
        title=f"{baseline} / {this}",
        box=box.MARKDOWN,
    )
    for row in rows:
        cells = [_cell(getattr(row, metric), fmt) for _, metric, fmt in _COLUMNS]
        errors = row.errors
        table.add_row(
            str(row.prefix_kinds),
            str(row.concurrency),
            *cells,
            _cell(Pair(baseline=errors.baseline, this=errors.this, ratio=None), ".0f"),
        )
    return table_text(table, width=140)


def baseline_note(
    baseline_stack: str,
    this_stack: str,
    error: str | None,
    outputs: Mapping[str, Any] | None,
) -> str | None:
    """Why the comparison has no baseline side, or None when the baseline has results.

    Args:
        baseline_stack: the ``baselineStack`` setting (named in the note).
        this_stack: the stack comparing (named in the command to run again).
        error: the engine's error for the read (e.g. ``unknown stack "kv-routing"`` for a
            stack that does not exist), None when the read succeeded.
        outputs: the baseline's stack outputs (``{}`` for a stack created but never up).

    The note is all the comparison says: a missing baseline never stops a deploy.
    """
    short = short_stack_name(baseline_stack)
    again = f"then `pulumi up -s {this_stack}` again to compare"
    if error is not None:
        return (
            f"no baseline: stack '{baseline_stack}' could not be read ({error}); create it and "
            f"run its load step (`pulumi stack init {short}`, `pulumi up -s {short}`), {again}"
        )
    if not (outputs or {}).get("results"):
        return (
            f"no baseline results: stack '{baseline_stack}' has no `results` output (its load "
            f"step has not run, or the stack was destroyed); `pulumi up -s {short}`, {again}"
        )
    return None


def comparison_output(
    baseline_stack: str,
    this_stack: str,
    baseline_results: Sequence[Mapping[str, Any]] | None,
    this_results: Sequence[Mapping[str, Any]] | None,
    resources: ResourceComparison,
    note: str | None = None,
    load_settings: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """The ``comparison`` stack output.

    Returns ``{"baseline": name, "this": name, "rows": [ComparisonRow as dict], "resources":
    ResourceComparison as dict, "settings": [SettingDifference as dict], "note": text or None,
    "confidence": the level of every ``ratio_ci`` and verdict, "noiseThreshold": the relative
    difference below which a significant one reads ``within noise``, "table": text}``; the table is
    followed by the verdict table (:func:`outputs.tables.verdict_table`: B / A, its interval
    and the verdict per grid point and metric, or one line when no point has 2 runs on both
    sides), then the load-settings note
    (:func:`outputs.settings_diff.settings_note`: which load settings differ and which metrics
    that invalidates; the two stacks' ``loadSettings`` outputs, given as ``load_settings``, a
    side None when unknown), the resource note (:func:`stackmodel.resources.resource_note`:
    what differed and which metrics it affects) when the stacks did not have the same resources,
    and with ``note`` (:func:`baseline_note`: why there is no baseline side) when given. A side
    without results (not run yet, or a baseline that could not be read) counts as no points.

    Raises:
        pydantic.ValidationError: a ``loadSettings`` that is not a LoadConfig.
    """
    rows, runs = compare_points(baseline_results or [], this_results or [])
    table = comparison_text(rows, baseline_stack, this_stack)
    verdicts = verdict_table(runs, title=f"{baseline_stack} / {this_stack}: B / A and verdict")
    table += verdicts + "\n" if isinstance(verdicts, str) else table_text(verdicts, width=140)
    differences = []
    settings = ""
    if load_settings is not None:
        configs = [None if s is None else LoadConfig.model_validate(s) for s in load_settings]
        differences = settings_differences(configs[0], configs[1])
        settings = settings_note(configs[0], configs[1], baseline_stack, this_stack)
    resource = resource_note(resources, baseline_stack, this_stack)
    notes = [n for n in (settings, resource, note) if n]
    return {
        "baseline": baseline_stack,
        "this": this_stack,
        "rows": [row.model_dump(mode="json") for row in rows],
        "resources": resources.model_dump(mode="json"),
        "settings": [d.model_dump(mode="json") for d in differences],
        "note": note,
        "confidence": CONFIDENCE,
        "noiseThreshold": NOISE_THRESHOLD,
        "table": "".join([table, *(f"{n}\n" for n in notes)]),
    }
