"""`testbed report`: one self-contained HTML file (and optionally PNGs) for one or more results.

The figures (`outputs.figures`) are drawn with matplotlib's object API (no pyplot, no global
state; the Agg canvas needs no display) into PNGs that the HTML embeds as base64 data URIs:
the file opens offline, holds no script, and the same PNGs are written with `--png`.
`bench/report_render.py` measured this against plotly with its JavaScript inlined
(docs/report.md). The page is a jinja2 template, `outputs/templates/report.html.j2`.
"""

import base64
import importlib.metadata
import io
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import jinja2
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import blended_transform_factory
from rich.table import Table

from measurement.incidents import describe
from measurement.intervals import ab_comparisons
from outputs.figures import SIDES, Figure, Panel, Series, report_figures
from outputs.folder_reader import REPORT_FILE, LoadedResults, load_results
from outputs.settings_diff import provenance_note, settings_note
from outputs.slo_tables import slo_table, slo_verdict_table
from outputs.tables import (
    SEED_COLUMNS,
    VERDICT_HEADERS,
    comparison_rows,
    prompt_sizes,
    seed_rows,
    stacks_tables,
    table_headers,
    tail_comparison_table,
    tail_table,
    verdict_caption,
    verdict_rows,
)

DPI = 100
PANEL_SIZE_IN = (5.2, 3.6)  # one panel's width and height (inches) in a grid figure
TIMELINE_SIZE_IN = (12.0, 4.4)
# matplotlib's tab10 without its red, which marks failures and incidents.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
FAILURE_COLOR = "#d62728"
LINE_STYLES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
"""A grid figure's concurrencies (lowest first), and the error bars drawn in their style."""
MARKERS = ("o", "s", "^", "D", "v", "P")
WARNINGS_SHOWN = 10  # per result, in the report's notes
VERSIONED = ("dynamo-testbed", "matplotlib", "pandas", "ai-dynamo")
VERSION_NOTES = {
    "ai-dynamo": "the local frontend and mocker (testbed simulate, the tests): the newest "
    "ai-dynamo on PyPI is 1.6.1 (pyproject.toml's sim group); the stacks deploy Dynamo 1.6.2's "
    "images (nvcr.io), whose Python packages PyPI does not have",
}
"""Why an installed version is not the one the README names."""

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


def _color(series: Series) -> str:
    return FAILURE_COLOR if series.color < 0 else PALETTE[series.color % len(PALETTE)]


def _draw_series(ax: Axes, s: Series) -> None:
    color = _color(s)
    line, marker = LINE_STYLES[s.dash % len(LINE_STYLES)], MARKERS[s.dash % len(MARKERS)]
    if s.style == "bar":
        ax.bar(s.x, s.y, width=0.6, color=color, label=s.label)
    if s.style == "line":
        ax.plot(s.x, s.y, line, marker=marker, color=color, label=s.label)
    if s.style in ("line", "bar") and s.y_low:
        # the interval as drawn, low to high (it is not centred on the median)
        bar_color = "#333333" if s.style == "bar" else color
        ax.vlines(s.x, s.y_low, s.y_high, colors=bar_color, linewidth=1.0, linestyles=line)
        ax.scatter([*s.x, *s.x], [*s.y_low, *s.y_high], s=30, color=bar_color, marker="_")
    elif s.style == "step":
        ax.step(s.x, s.y, where="post", color=color, label=s.label)
    elif s.style == "level":
        ax.axhline(s.y[0], color=color, linestyle=line, linewidth=1.2, label=s.label)
    elif s.style == "span":
        ax.barh(s.y, s.widths, left=s.x, color=color, label=s.label, height=0.6)
    elif s.style == "points":
        ax.scatter(
            s.x, s.y, s=10, alpha=0.6, color=color, marker="o", linewidths=0,
            label=s.label, rasterized=True,
        )  # fmt: skip
    elif s.style == "failures":
        ax.scatter(s.x, s.y, s=22, color=color, marker="x", linewidths=1.2, label=s.label)


def _plain_log_ticks(axis: Axis) -> None:
    """Ticks at 1, 2 and 5 of each decade, labelled as plain numbers (50, 100, 200 ms)."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _draw_panel(ax: Axes, panel: Panel) -> None:
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for i, band in enumerate(panel.bands):
        ax.axvspan(band.start_s, band.end_s, color="#000000", alpha=0.05 if i % 2 else 0.1, lw=0)
        ax.text(
            (band.start_s + band.end_s) / 2, 0.99, band.label, transform=top, rotation=90,
            ha="center", va="top", fontsize=7, color="#555555",
        )  # fmt: skip
    for mark in panel.marks:
        ax.axvline(mark.at_s, color=FAILURE_COLOR, linestyle=":", linewidth=1.4)
        ax.text(
            mark.at_s, 0.02, f" {mark.label}", transform=top, rotation=90, ha="right",
            va="bottom", fontsize=7, color=FAILURE_COLOR,
        )  # fmt: skip
    for s in panel.series:
        _draw_series(ax, s)
    if panel.log_x:
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis)
    if panel.log_y:
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
    elif panel.y_from_zero and panel.series:
        ax.set_ylim(bottom=0)
    if panel.x_ticks:
        labels = panel.x_tick_labels or tuple(f"{t:g}" for t in panel.x_ticks)
        ax.set_xticks(panel.x_ticks, labels)
    if panel.y_tick_labels:
        ax.set_yticks(range(len(panel.y_tick_labels)), panel.y_tick_labels)
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel(panel.x_label, fontsize=8)
    ax.set_ylabel(panel.y_label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", alpha=0.3)
    if not panel.series:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#888888")


def draw(figure: Figure) -> MplFigure:
    """A matplotlib figure of `figure`'s panels, `figure.columns` per row."""
    rows = -(-len(figure.panels) // figure.columns)
    if figure.key.startswith(("timeline", "memory")):  # one long time axis per row
        size = (TIMELINE_SIZE_IN[0], TIMELINE_SIZE_IN[1] * rows)
    else:
        size = (PANEL_SIZE_IN[0] * min(figure.columns, 3), PANEL_SIZE_IN[1] * rows)
        if figure.columns > 3:  # narrower panels for wide grids (the seed's 4 prefix kinds)
            size = (3.4 * figure.columns, 2.9 * rows)
    fig = MplFigure(figsize=size, dpi=DPI, layout="constrained")
    axes = fig.subplots(rows, figure.columns, squeeze=False, sharex=figure.share_x)
    for ax, panel in zip(axes.flat, figure.panels, strict=False):
        _draw_panel(ax, panel)
    for ax in axes.flat[len(figure.panels) :]:
        ax.set_visible(False)
    _legend(fig, figure)
    return fig


def _legend(fig: MplFigure, figure: Figure) -> None:
    """The legend outside every panel, so it never covers a line, a label or a band: one for
    the whole figure below it where the panels share their series (the grid figures, a
    timeline), else (the CDFs, whose labels give each panel's n) one per panel beside it.
    None for bars: their tick labels name the results."""
    series = [s for panel in figure.panels for s in panel.series]
    if not series or all(s.style == "bar" for s in series):
        return
    clouds = any(s.style == "points" for s in series)  # tiny markers: show larger
    if any(s.style == "step" for s in series):
        for ax in fig.axes:
            if ax.get_visible() and ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return
    handles: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.legend(
        handles.values(), handles.keys(), loc="outside lower center", fontsize=7,
        ncols=min(len(handles), 6), markerscale=2.0 if clouds else 1.0, frameon=False,
    )  # fmt: skip


def figure_png(figure: Figure) -> bytes:
    """`figure` as PNG bytes (`DPI` dots per inch)."""
    buffer = io.BytesIO()
    FigureCanvasAgg(draw(figure)).print_png(buffer)
    return buffer.getvalue()


@dataclass(frozen=True)
class _Side:
    label: str
    result: LoadedResults
    incidents: list[str]
    warnings: list[str]
    more_warnings: int
    facts: list[tuple[str, str]]


def _settings(result: LoadedResults) -> str:
    if result.grid is None:
        return "-"
    config = result.grid.config.model_dump(mode="json", by_alias=True, exclude_none=True)
    return ", ".join(f"{key}={value}" for key, value in sorted(config.items()))


def _workers(resources: dict[str, Any]) -> str:
    """`stack.json`'s resources in one line, e.g. "prefill 1, decode 2 on 2 GPU(s): gpu-8gb
    1 worker(s) / 1 GPU(s), gpu-24gb 2 worker(s) / 1 GPU(s)"."""
    roles = ", ".join(f"{role} {n}" for role, n in resources.get("workers_by_role", {}).items())
    classes = ", ".join(
        f"{name} {use.get('workers')} worker(s) / {use.get('gpus')} GPU(s)"
        for name, use in resources.get("node_classes", {}).items()
    )
    return f"{roles} on {resources.get('gpus')} GPU(s): {classes}"


def _facts(result: LoadedResults) -> list[tuple[str, str]]:
    grid = result.grid
    facts = [("folder", str(result.path.resolve()))]
    if "fingerprint" in result.step:
        facts.append(("topology fingerprint", str(result.step["fingerprint"])))
    resources = result.stack.get("resources")
    if isinstance(resources, dict):
        facts.append(("workers", _workers(resources)))
    if grid is not None:
        if grid.simulated is not None:
            facts.append(("SIMULATED", grid.simulated))
        if grid.imported is not None:
            lacks = "; ".join(grid.imported.lacks)
            facts.append(("IMPORTED", f"{grid.imported.label()}: {lacks}"))
        if grid.simulated is None:
            ran = f"{grid.started_at:%Y-%m-%d %H:%M:%S} to {grid.finished_at:%H:%M:%S} UTC"
        else:  # the end is on the simulated clock: say its length, not a time of day
            length = (grid.finished_at - grid.started_at).total_seconds()
            ran = (
                f"{grid.started_at:%Y-%m-%d %H:%M:%S} UTC (wall clock); the grid took "
                f"{length:.1f} s of simulated time"
            )
        facts += [
            ("server", f"{grid.model} at {grid.url}"),
            ("ran", ran),
            ("prompt sizes", prompt_sizes(grid)),
            ("load settings", _settings(result)),
        ]
    if result.status:
        facts.append(("load step", f"{result.status.get('state')}: {result.status.get('message')}"))
    if result.memory is not None and result.memory.unavailable is not None:
        facts.append(("worker memory", f"not sampled: {result.memory.unavailable}"))
    return facts


def _side(label: str, result: LoadedResults) -> _Side:
    warnings = result.grid.warnings if result.grid is not None else []
    return _Side(
        label=label,
        result=result,
        incidents=[describe(incident) for incident in result.incidents],
        warnings=warnings[:WARNINGS_SHOWN],
        more_warnings=max(0, len(warnings) - WARNINGS_SHOWN),
        facts=_facts(result),
    )


def _versions() -> list[tuple[str, str]]:
    found = [("Python", platform.python_version())]
    for name in VERSIONED:
        try:
            version = importlib.metadata.version(name)
            note = VERSION_NOTES.get(name)
            found.append((name, f"{version} ({note})" if note else version))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _name(result: LoadedResults) -> str:
    """The result's name, marked ``(SIMULATED)`` when it is a simulation's."""
    simulated = result.grid is not None and result.grid.simulated is not None
    return f"{result.name} (SIMULATED)" if simulated else result.name


@dataclass(frozen=True)
class ReportImage:
    """A figure the caller drew (PNG bytes), placed after the report's own figures: what the
    report cannot draw from results alone (``testbed.crossover_figure`` draws the stack's
    crossover from its config). ``key`` names its anchor and its ``--png`` file, as a
    :class:`outputs.figures.Figure`'s does."""

    key: str
    title: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class HtmlTable:
    """A table of the terminal's (a rich `Table`) as the page shows it: its title, headers
    (lines), rows (cells, a second line in small type) and caption lines."""

    title: str
    headers: list[list[str]]
    rows: list[list[str]]
    notes: list[str]


def html_table(table: Table) -> HtmlTable:
    """`table`'s title, headers, cells and caption, so the page shows what the terminal does."""
    columns = [[str(cell) for cell in column.cells] for column in table.columns]
    return HtmlTable(
        title=str(table.title or ""),
        headers=[str(column.header).split("\n") for column in table.columns],
        rows=[list(row) for row in zip(*columns, strict=True)],
        notes=str(table.caption or "").splitlines(),
    )


def _more_tables(results: Sequence[LoadedResults]) -> list[HtmlTable]:
    """The tables after the grid's: one result's tails and SLO table; two results' tails as
    A / B and which side met the SLO; three or more, one table per metric with every result
    (ranked by goodput where judged)."""
    if len(results) == 1:
        points = results[0].points
        found = [tail_table(points, "Latency tails"), slo_table(points, "Against the SLO")]
    elif len(results) == 2:
        a, b = results[0].points, results[1].points
        found = [
            tail_comparison_table(a, b, "Latency tails (each cell: A / B)"),
            slo_verdict_table(a, b, ab_comparisons(a, b), "Against the SLO: B / A"),
        ]
    else:
        named = [(f"{side} {r.name}", r.points) for side, r in zip(SIDES, results, strict=False)]
        found = list(stacks_tables(named))
    return [html_table(t) for t in found if t is not None]


def render_html(
    results: Sequence[LoadedResults],
    pngs: Sequence[tuple[Figure | ReportImage, bytes]],
    notes: Sequence[str] = (),
) -> str:
    """The report page: the seed-style table ("A / B" with two results, followed by which load
    settings differ and what that invalidates: `outputs.settings_diff.settings_note`, then the
    caller's `notes`, each of one or more lines: what the terminal printed under its table, and
    by B / A per grid point and metric with its interval and verdict where both sides ran 2 or
    more repetitions: `outputs.tables.verdict_rows`; three or more results: each one's rows,
    named), the tails and SLO tables (`_more_tables`), the figures as embedded PNGs, incidents
    and warnings per result, and a footer with what produced it."""
    sides = [_side(label, r) for label, r in zip(SIDES, results, strict=False)]
    comparability: list[str] = []
    verdicts: list[list[str]] = []
    verdict_notes: list[str] = []
    if len(results) == 2:
        headers, rows = table_headers(), comparison_rows(results[0].points, results[1].points)
        found = ab_comparisons(results[0].points, results[1].points)
        if any(min(c.repetitions) >= 2 for c in found):
            verdicts = verdict_rows(found)
            simulated = any(r.grid is not None and r.grid.simulated for r in results)
            verdict_notes = verdict_caption(found, simulated).splitlines()
        configs = [r.grid.config if r.grid is not None else None for r in results]
        note = settings_note(configs[0], configs[1], results[0].name, results[1].name)
        comparability = note.splitlines() if note else []
        labels = [r.grid.simulated if r.grid is not None else None for r in results]
        provenance = provenance_note(results[0].name, labels[0], results[1].name, labels[1])
        comparability += [provenance] if provenance else []
        comparability += [line for text in notes for line in text.splitlines()]
    elif len(results) > 2:
        headers = ["result", *table_headers()]
        rows = [
            [side, *row]
            for side, r in zip(SIDES, results, strict=False)
            for row in comparison_rows(r.points, r.points, SEED_COLUMNS, both=False)
        ]
        comparability = [line for text in notes for line in text.splitlines()]
    else:
        points = results[0].points
        headers, rows = table_headers(points), seed_rows(points, results[0].incidents)
    context: dict[str, Any] = {
        "title": " vs ".join(_name(r) for r in results),
        "sides": sides,
        "headers": [h.split("\n") for h in headers],
        "rows": rows,
        "comparability": comparability,
        "verdict_headers": [h.split("\n") for h in VERDICT_HEADERS],
        "verdicts": verdicts,
        "verdict_notes": verdict_notes,
        "tables": _more_tables(results),
        "figures": [(f, base64.b64encode(png).decode("ascii")) for f, png in pngs],
        "versions": _versions(),
        "generated_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC",
    }
    return _TEMPLATES.get_template("report.html.j2").render(context)


def write_report(
    results: Sequence[LoadedResults],
    out: Path,
    *,
    png: bool = False,
    notes: Sequence[str] = (),
    images: Sequence[ReportImage] = (),
) -> tuple[Path, list[Path]]:
    """Write the HTML report of one or more results to `out` (parent folders created; `notes`:
    :func:`render_html`'s; `images` after the report's own figures); with
    `png`, also each figure as `<out stem>-<figure key>.png` beside it. Returns the HTML path
    and the PNG paths. Raises OSError when a file cannot be written."""
    pngs: list[tuple[Figure | ReportImage, bytes]] = [
        (figure, figure_png(figure)) for figure in report_figures(results)
    ]
    pngs += [(image, image.png) for image in images]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(results, pngs, notes), encoding="utf-8")
    written = []
    if png:
        for figure, data in pngs:
            path = out.with_name(f"{out.stem}-{figure.key}.png")
            path.write_bytes(data)
            written.append(path)
    return out, written


def write_folder_reports(
    folders: Sequence[Path],
    comparison: Path | None = None,
    notes: Sequence[str] = (),
    images: Sequence[Sequence[ReportImage]] = (),
) -> list[Path]:
    """Write `report.html` into each results folder (what `testbed load`, `testbed simulate`
    and the load step call after writing their results) and, for two folders or more and a
    `comparison` path, the report of all of them there, with `notes` under its table (the
    caveats the terminal printed). `images`: each folder's own (same order as `folders`, or
    none); the report of all of them has every folder's. Returns the paths written. Raises
    as `load_results` and `write_report` do."""
    loaded = [load_results(folder) for folder in folders]
    own = list(images) or [()] * len(loaded)
    written = [
        write_report([result], result.path / REPORT_FILE, images=mine)[0]
        for result, mine in zip(loaded, own, strict=True)
    ]
    if comparison is not None and len(loaded) > 1:
        both = [image for mine in own for image in mine]
        written.append(write_report(loaded, comparison, notes=notes, images=both)[0])
    return written
