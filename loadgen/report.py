"""Seed-style tables: one result, or two results side by side as "A / B"."""

import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loadgen.results import PointSummary

SUMMARY_FILE = "summary.json"

_Cell = Callable[[PointSummary], str]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# The seed's columns (BRIEF.md, results table) plus the cached-token ratio and errors.
_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    ("TTFT p50 ms", lambda p: _ms(p.ttft_p50_ms)),
    ("TTFT p99 ms", lambda p: _ms(p.ttft_p99_ms)),
    ("requests/s", lambda p: f"{p.requests_per_s:.1f}"),
    ("cached ratio", lambda p: _ratio(p.cached_ratio)),
    ("errors", lambda p: str(p.errors)),
)


def _ordered(points: Sequence[PointSummary]) -> list[PointSummary]:
    return sorted(points, key=lambda p: (p.concurrency, p.prefix_kinds))


def seed_table(points: Sequence[PointSummary], title: str | None = None) -> Table:
    """A table with one row per grid point (ordered by concurrency, then prefix kinds): prefix
    kinds, concurrency, TTFT p50 and p99 (ms), requests/s, cached ratio, errors."""
    table = Table("prefix kinds", "concurrency", *(name for name, _ in _COLUMNS), title=title)
    for p in _ordered(points):
        table.add_row(str(p.prefix_kinds), str(p.concurrency), *(cell(p) for _, cell in _COLUMNS))
    return table


def comparison_table(
    a: Sequence[PointSummary], b: Sequence[PointSummary], title: str | None = None
) -> Table:
    """The seed's "A / B" layout: each cell holds A's value, " / ", B's value, for the union of
    grid points (a point missing on one side shows "-" there)."""
    by_point_a = {(p.prefix_kinds, p.concurrency): p for p in a}
    by_point_b = {(p.prefix_kinds, p.concurrency): p for p in b}
    keys = sorted(by_point_a.keys() | by_point_b.keys(), key=lambda k: (k[1], k[0]))
    table = Table("prefix kinds", "concurrency", *(name for name, _ in _COLUMNS), title=title)
    for key in keys:
        pa, pb = by_point_a.get(key), by_point_b.get(key)
        cells = [f"{cell(pa) if pa else '-'} / {cell(pb) if pb else '-'}" for _, cell in _COLUMNS]
        table.add_row(str(key[0]), str(key[1]), *cells)
    return table


def table_text(table: Table, width: int = 120) -> str:
    """Render a rich table to plain text (no colour codes)."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, no_color=True, color_system=None).print(table)
    return buffer.getvalue()


def load_points(result_dir: Path) -> list[PointSummary]:
    """Read `result_dir/summary.json` (written by `testbed load`). Raises FileNotFoundError if
    absent and pydantic.ValidationError if it does not hold grid-point summaries."""
    data = json.loads((result_dir / SUMMARY_FILE).read_text())
    return [PointSummary.model_validate(item) for item in data]
