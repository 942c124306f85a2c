"""The report's figures as plain data: what is plotted, before any plotting library sees it.

Each `Figure` holds panels of `Series` (x and y as tuples of floats), run windows (`Band`) and
incidents (`Mark`); `outputs.html_report` draws them. Keeping the numbers here lets tests check
that the plotted values equal `summary.json`'s and `requests.parquet`'s.

Each result (A, B, C, ...) has its own colour in every grid figure and CDF; in a grid figure
the concurrency is the line style and marker (solid and round for the lowest). A timeline shows
one result, its concurrencies in colours. A grid with one prefix-kinds value is drawn against
concurrency, and a grid of one point as one bar per result, so no panel holds a lone dot.

Times on the timeline are seconds since the grid started (`GridResult.started_at`). Requests
carry monotonic-clock nanoseconds only, so each run's requests are placed by its wall-clock end
(`RunSummary.finished_at`, taken right after its last request ended): a request's time is
`finished_at - (last event of the run - its send time)`; without `result.json`, or with runs
written before they kept their times, the timeline starts at the first request's intended send
time (one monotonic clock serves the whole grid on one machine).
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from measurement.incidents import Incident, describe
from measurement.intervals import SLO_METRICS
from measurement.memory import PodMemory, pods_in
from measurement.phases import PHASES
from measurement.results import WIDE_INTERVAL, GridResult, PointSummary
from metrics.registry import METRICS, figure_key
from outputs.folder_reader import LoadedResults

_NS_PER_MS = 1e6
_NS_PER_S = 1e9
WIDE_RANGE = 20.0
"""An axis whose positive values span more than this factor (max / min) is drawn log-scaled."""

_TTFT = METRICS["ttft"]
"""The metric most figures draw, as the registry names it."""

SIDES = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""The results' labels, in the order given."""
Style = Literal["line", "step", "points", "failures", "bar", "span", "level"]
GIB = 2**30


@dataclass(frozen=True)
class Series:
    """One line or cloud of points. `color` indexes the report's palette (the result's rank
    in grid figures and CDFs, the concurrency's on a timeline); `side` is the result's label
    ("A", "B", ...); `dash`: the line style and marker (the concurrency's rank in a grid
    figure); `style`: `line` (grid metrics), `bar` (a grid of one point: one bar per result at
    x = its rank), `step` (a CDF), `points` (request TTFTs on a timeline), `failures` (failed
    requests), `level` (a horizontal line across the panel at `y[0]`: a limit,
    a floor). `y_low` / `y_high`: a `line`'s or `bar`'s error bars, one per point (the grid
    point's interval, `PointSummary.intervals`; equal to `y` where a point has none), or ()
    for none at all. `span`: one segment of a
    waterfall per y, from `x` for `widths`."""

    label: str
    side: str
    color: int
    x: tuple[float, ...]
    y: tuple[float, ...]
    style: Style
    y_low: tuple[float, ...] = ()
    y_high: tuple[float, ...] = ()
    dash: int = 0
    widths: tuple[float, ...] = ()


@dataclass(frozen=True)
class Band:
    """One run's window on a timeline: seconds since the grid started, and "K2 c4 r1"."""

    start_s: float
    end_s: float
    label: str


@dataclass(frozen=True)
class Mark:
    """One incident on a timeline: seconds since the grid started, and `describe()`'s line."""

    at_s: float
    label: str


@dataclass(frozen=True)
class Panel:
    """One set of axes. `x_ticks`: the exact ticks (grid axes: prefix kinds), () for automatic;
    `x_tick_labels`: their labels (default: the values); `y_from_zero`: a linear y axis starts
    at 0 (a grid metric's: a range of a few tenths of a millisecond must not look like a large
    difference)."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    log_x: bool = False
    log_y: bool = False
    x_ticks: tuple[float, ...] = ()
    x_tick_labels: tuple[str, ...] = ()
    y_from_zero: bool = False
    bands: tuple[Band, ...] = ()
    marks: tuple[Mark, ...] = ()
    y_tick_labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Figure:
    """One figure of the report: `key` names its PNG (`<key>.png`) and HTML anchor; panels
    are laid out `columns` per row, on one x range when `share_x`."""

    key: str
    title: str
    caption: str
    panels: tuple[Panel, ...]
    columns: int
    share_x: bool = False


def _sides_note(results: Sequence[LoadedResults]) -> str:
    """``"; one colour per result (A kv-routing, B ...)"`` for several results, nothing for
    one."""
    if len(results) < 2:
        return ""
    named = ", ".join(f"{side} {r.name}" for side, r in zip(SIDES, results, strict=False))
    return f"; one colour per result ({named})"


def _wide(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > WIDE_RANGE


def _concurrency_colors(results: Sequence[LoadedResults]) -> dict[int, int]:
    """A timeline's colours: the concurrency's rank over every result."""
    levels = sorted({p.concurrency for r in results for p in r.points})
    return {c: i for i, c in enumerate(levels)}


def _value(point: PointSummary, field: str) -> float | None:
    """A grid point's `field`: its own, or its judgement's (`SLO_METRICS`) where judged."""
    if field in SLO_METRICS:
        return None if point.slo is None else getattr(point.slo, field)
    value = getattr(point, field)
    return None if value is None else float(value)


def _bounds(point: PointSummary, field: str) -> tuple[float, float] | None:
    """The point's interval of `field` as error bars; None without one or where it is too
    wide to draw (`MetricInterval.too_wide`: it would set the axis, flattening the values)."""
    found = point.intervals.get(field)
    if found is None or found.low is None or found.high is None or found.too_wide():
        return None
    return found.low, found.high


def _too_wide(results: Sequence[LoadedResults], metrics: Sequence["MetricSpec"]) -> str:
    """The caption's note of the error bars left out as too wide (`_bounds`): per metric, the
    points ("A K=2 c=4, 2 runs"); "" when none was."""
    left_out = []
    for field, title, _ in metrics:
        where = [
            f"{side} K={p.prefix_kinds} c={p.concurrency}, {len(found.runs)} runs"
            for side, r in zip(SIDES, results, strict=False)
            for p in r.points
            if (found := p.intervals.get(field)) is not None and found.too_wide()
        ]
        if where:
            left_out.append(f"{title} at {'; '.join(where)}")
    if not left_out:
        return ""
    return (
        f" Intervals too wide to draw (over {WIDE_INTERVAL:g}x the largest run; run more "
        f"repetitions): {' | '.join(left_out)}."
    )


def _xy_series(
    label: str, side: str, color: int, dash: int, xy: Sequence[tuple[float, float, object]]
) -> Series:
    """A `line` series of (x, y, bounds) rows, its error bars where any row has bounds."""
    xs, ys, bounds = zip(*xy, strict=True)
    bars = any(b is not None for b in bounds)
    low = tuple(b[0] if b else y for b, y in zip(bounds, ys, strict=True))  # type: ignore[index]
    high = tuple(b[1] if b else y for b, y in zip(bounds, ys, strict=True))  # type: ignore[index]
    return Series(
        label, side, color, tuple(xs), tuple(ys), "line",
        low if bars else (), high if bars else (), dash,
    )  # fmt: skip


def grid_axis(results: Sequence[LoadedResults]) -> str:
    """What a grid figure's x axis is: `prefix_kinds` when the results have more than one
    value of it or a single concurrency, else `concurrency`; `bar` for a grid of one point."""
    kinds = {p.prefix_kinds for r in results for p in r.points}
    levels = {p.concurrency for r in results for p in r.points}
    if len(kinds) == 1 and len(levels) == 1:
        return "bar"
    return "prefix_kinds" if len(kinds) > 1 or len(levels) == 1 else "concurrency"


def _metric_panel(
    results: Sequence[LoadedResults], field: str, title: str, unit: str, log: bool
) -> Panel:
    axis = grid_axis(results)
    other = "concurrency" if axis == "prefix_kinds" else "prefix_kinds"
    lines = sorted({getattr(p, other) for r in results for p in r.points})
    series = []
    for rank, (side, result) in enumerate(zip(SIDES, results, strict=False)):
        if axis == "bar":
            rows = [(float(rank), v, _bounds(p, field)) for p in result.points
                    if (v := _value(p, field)) is not None]  # fmt: skip
            if rows:
                bar = _xy_series(side, side, rank, 0, rows)
                series.append(dataclasses.replace(bar, style="bar"))
            continue
        for dash, line in enumerate(lines):
            points = sorted(
                (p for p in result.points if getattr(p, other) == line),
                key=lambda p: getattr(p, axis),
            )
            xy = [(float(getattr(p, axis)), v, _bounds(p, field)) for p in points
                  if (v := _value(p, field)) is not None]  # fmt: skip
            if xy:
                tag = "c" if other == "concurrency" else "K"
                series.append(_xy_series(f"{side} {tag}={line}", side, rank, dash, xy))
    values = [y for s in series for y in (*s.y, *s.y_low, *s.y_high)]
    if axis == "bar":
        ticks = tuple(float(i) for i in range(len(results)))
        labels = tuple(f"{side} {r.name}" for side, r in zip(SIDES, results, strict=False))
        point = results[0].points[0] if results[0].points else None
        where = "" if point is None else f" (K={point.prefix_kinds} c={point.concurrency})"
        return Panel(
            title=f"{title}{where}", x_label="", y_label=f"{title} ({unit})" if unit else title,
            series=tuple(series), log_y=log and _wide(values), x_ticks=ticks,
            x_tick_labels=labels, y_from_zero=True,
        )  # fmt: skip
    levels = sorted({getattr(p, axis) for r in results for p in r.points})
    return Panel(
        title=title,
        x_label="prefix kinds" if axis == "prefix_kinds" else "concurrency",
        y_label=f"{title} ({unit})" if unit else title,
        series=tuple(series),
        log_y=log and _wide(values),
        x_ticks=tuple(float(k) for k in levels),
        y_from_zero=True,
    )


MetricSpec = tuple[str, str, str]
"""A `PointSummary` field (or a `SLO_METRICS` one of its judgement), its title and its unit
("" for a ratio)."""


def metric_spec(metric: str, q: float | None = None) -> MetricSpec:
    """The panel of (metric key, percentile; None for a figure that is the metric itself) as the
    registry names it (`metrics.registry.Metric.panel_title`)."""
    return figure_key(metric, q), METRICS[metric].panel_title(q), METRICS[metric].unit


TTFT_METRICS: tuple[MetricSpec, ...] = (metric_spec("ttft", 50), metric_spec("ttft", 99))
THROUGHPUT_METRICS: tuple[MetricSpec, ...] = (
    metric_spec("requests_per_s"),
    metric_spec("cached_ratio"),
)
TAIL_METRICS: tuple[MetricSpec, ...] = (
    metric_spec("itl", 50),
    metric_spec("itl", 99),
    metric_spec("tpot", 99),
    metric_spec("e2e", 50),
    metric_spec("e2e", 99),
)
GOODPUT_METRICS: tuple[MetricSpec, ...] = (
    metric_spec("goodput_requests_per_s"),
    metric_spec("attainment"),
)


def grid_figure(
    key: str, title: str, metrics: Sequence[MetricSpec], results: Sequence[LoadedResults]
) -> Figure:
    """One panel per metric: the metric (the grid point's median over repetitions, as in
    `summary.json`) against prefix kinds (`grid_axis`: or concurrency, or one bar per result),
    one colour per result and one line style per concurrency. Latency panels (unit ms) are
    log-scaled when their values span more than `WIDE_RANGE`."""
    panels = tuple(
        _metric_panel(results, field, name, unit, log=unit == "ms") for field, name, unit in metrics
    )
    lines = "one line per concurrency" if grid_axis(results) != "bar" else "one bar per result"
    return Figure(
        key=key,
        title=title,
        caption=f"Median over repetitions of each grid point (summary.json); {lines}"
        f"{_sides_note(results)}; error bars: the point's interval over its "
        "repetitions (2 or more; a simulation's spread comes from its routing runs only)."
        f"{_too_wide(results, metrics)}",
        panels=panels,
        columns=min(len(panels), 3),
    )


def successful_ttfts_ms(requests: pd.DataFrame) -> pd.DataFrame:
    """The successful requests that streamed text: their grid coordinates and `ttft_ms`
    (first token minus send, ms), from a `requests.parquet` frame."""
    if requests.empty or "first_token_ns" not in requests:
        return pd.DataFrame(columns=["prefix_kinds", "concurrency", "repetition", "ttft_ms"])
    ok = requests[
        requests["error_kind"].isna()
        & requests["first_token_ns"].notna()
        & requests["sent_ns"].notna()
    ]
    return ok.assign(ttft_ms=(ok["first_token_ns"] - ok["sent_ns"]) / _NS_PER_MS)[
        ["prefix_kinds", "concurrency", "repetition", "ttft_ms"]
    ]


def cdf_figure(results: Sequence[LoadedResults]) -> Figure:
    """One panel per grid point (rows: concurrency, columns: prefix kinds): the empirical CDF
    of TTFT over every successful request of the point's repetitions, one step line per
    result in its colour (x: TTFT ms, sorted; y: rank / n)."""
    keys = sorted({(p.prefix_kinds, p.concurrency) for r in results for p in r.points})
    keys.sort(key=lambda k: (k[1], k[0]))
    frames = [successful_ttfts_ms(r.requests) for r in results]
    panels = []
    all_x: list[float] = []
    for kinds, conc in keys:
        series = []
        for rank, (side, frame) in enumerate(zip(SIDES, frames, strict=False)):
            values = sorted(
                frame.loc[
                    (frame["prefix_kinds"] == kinds) & (frame["concurrency"] == conc), "ttft_ms"
                ]
            )
            if values:
                n = len(values)
                ranks = tuple((i + 1) / n for i in range(n))
                series.append(Series(f"{side} (n={n})", side, rank, tuple(values), ranks, "step"))
                all_x += values
        panels.append(
            Panel(
                title=f"K={kinds} c={conc}",
                x_label=f"{_TTFT.name} ({_TTFT.unit})",
                y_label="fraction of requests",
                series=tuple(series),
            )
        )
    log_x = _wide(all_x)
    return Figure(
        key="ttft-cdf",
        title=f"{_TTFT.name} distribution per grid point",
        caption="Empirical CDF of every successful request's TTFT (requests.parquet), "
        f"repetitions pooled{_sides_note(results)}.",
        panels=tuple(dataclasses.replace(p, log_x=log_x) for p in panels),
        columns=max(1, min(len({k for k, _ in keys}), 4)),
        share_x=True,
    )


def request_times_s(requests: pd.DataFrame, grid: GridResult | None) -> pd.Series:
    """Each request's send time (its intended time when it was never sent) in seconds since
    the grid started, placed per run as this module's docstring says; indexed like
    `requests`."""
    send_ns = requests["sent_ns"].fillna(requests["intended_ns"]).astype("float64")
    event_cols = [c for c in ("end_ns", "error_ns", "first_token_ns", "sent_ns") if c in requests]
    last_ns = requests[event_cols].max(axis=1)
    if grid is None or any(run.finished_at is None for run in grid.runs):
        return (send_ns - requests["intended_ns"].min()) / _NS_PER_S
    ends = {
        (r.prefix_kinds, r.concurrency, r.repetition): (
            r.finished_at - grid.started_at
        ).total_seconds()
        for r in grid.runs
        if r.finished_at is not None
    }
    run_columns = [requests[c] for c in ("prefix_kinds", "concurrency", "repetition")]
    run_key = list(zip(*run_columns, strict=True))
    run_last = last_ns.groupby(run_columns).transform("max")
    end_s = pd.Series([ends.get(k, float("nan")) for k in run_key], index=requests.index)
    return end_s - (run_last - send_ns) / _NS_PER_S


def _bands(grid: GridResult | None) -> tuple[Band, ...]:
    if grid is None:
        return ()
    return tuple(
        Band(
            (w.started_at - grid.started_at).total_seconds(),
            (w.finished_at - grid.started_at).total_seconds(),
            f"K{w.prefix_kinds} c{w.concurrency} r{w.repetition}",
        )
        for w in grid.windows()
    )


def _marks(incidents: Sequence[Incident], grid: GridResult | None) -> tuple[Mark, ...]:
    marks = []
    for incident in incidents:
        at_s = incident.t_s
        if at_s is None and grid is not None:
            at_s = (incident.at - grid.started_at).total_seconds()
        if at_s is not None:
            marks.append(Mark(at_s, describe(incident)))
    return tuple(marks)


def timeline_figure(side: str, result: LoadedResults, colors: dict[int, int]) -> Figure:
    """One result's whole grid on one time axis (seconds since the grid started): each
    successful request's TTFT (ms) at its send time, one colour per concurrency; each failed
    request at its send time with the time it took to fail (ms, to `error_ns`); the runs'
    windows as bands; incidents as vertical lines."""
    frame = result.requests
    series: list[Series] = []
    if not frame.empty and "sent_ns" in frame:
        frame = frame.assign(t_s=request_times_s(frame, result.grid))
        ok = successful_ttfts_ms(frame).join(frame["t_s"])
        for c, color in colors.items():
            rows = ok[ok["concurrency"] == c].sort_values("t_s")
            if not rows.empty:
                series.append(
                    Series(
                        f"c={c}",
                        side,
                        color,
                        tuple(rows["t_s"]),
                        tuple(rows["ttft_ms"]),
                        "points",
                    )
                )
        failed = frame[frame["error_kind"].notna()].sort_values("t_s")
        if not failed.empty:
            start_ns = failed["sent_ns"].fillna(failed["intended_ns"])
            took_ms = (failed["error_ns"].fillna(start_ns) - start_ns) / _NS_PER_MS
            series.append(
                Series(
                    f"failed ({len(failed)})",
                    side,
                    -1,
                    tuple(failed["t_s"]),
                    tuple(took_ms),
                    "failures",
                )
            )
    values = [y for s in series for y in s.y]
    panel = Panel(
        title=f"{side}: {result.name}",
        x_label="seconds since the grid started",
        y_label=f"{_TTFT.name} ({_TTFT.unit}); failures: time to fail",
        series=tuple(series),
        log_y=_wide(values),
        bands=_bands(result.grid),
        marks=_marks(result.incidents, result.grid),
    )
    return Figure(
        key=f"timeline-{side.lower()}",
        title=f"Timeline of {side} ({result.name})",
        caption="Each request's TTFT at its send time; failed requests as red crosses at the "
        "time they took to fail; shaded bands are the runs (K prefix kinds, c concurrency, "
        "r repetition); vertical lines are incidents.",
        panels=(panel,),
        columns=1,
    )


def _memory_panel(side: str, pod: PodMemory, result: LoadedResults, grid: GridResult) -> Panel:
    """One worker pod's panel of `memory_figure`."""
    at_s = tuple((s.at - grid.started_at).total_seconds() for s in pod.samples)
    series = [
        Series("working set", side, 0, at_s, tuple(s.bytes / GIB for s in pod.samples), "line")
    ]
    if pod.limit_bytes is not None:
        series.append(Series("limit", side, -1, (), (pod.limit_bytes / GIB,), "level", dash=1))
    if pod.floor_bytes is not None:
        floor = (pod.floor_bytes / GIB,)
        series.append(Series("floor (sizing)", side, 1, (), floor, "level", dash=2))
    own = [incident for incident in result.incidents if incident.instance == pod.pod]
    return Panel(
        f"{side}: {pod.pod} ({pod.component})", "seconds since the grid started",
        "memory (GiB)", tuple(series), y_from_zero=True, bands=_bands(grid),
        marks=_marks(own, grid),
    )  # fmt: skip


def memory_figure(side: str, result: LoadedResults) -> Figure | None:
    """One panel per worker pod of `memory.json` (`measurement.memory`) with readings: its working
    set (GiB) at each reading's timestamp, in seconds since the grid started; its memory limit
    (red, dashed) and its worker group's memory floor from the sizing (dotted) as horizontal
    lines; the runs' windows as bands; the pod's own incidents (an OOMKill, a restart) as
    vertical lines. None without readings or without the grid's start (`result.json`)."""
    grid = result.grid
    pods = pods_in(result.memory)
    if grid is None or not pods:
        return None
    return Figure(
        key=f"memory-{side.lower()}",
        title=f"Worker memory of {side} ({result.name})",
        caption="Each worker pod's memory working set as the metrics API served it "
        "(metrics.k8s.io, metrics-server: one reading per its resolution, 15 s by default; "
        "docs/metrics.md, Pod memory), its memory limit, and its worker group's memory floor "
        "from the stack's sizing; shaded bands are the runs, vertical lines the pod's "
        "incidents (an OOMKill among them).",
        panels=tuple(_memory_panel(side, pod, result, grid) for pod in pods),
        columns=1,
        share_x=True,
    )


PHASE_LABELS = {
    "queue": "client queue",
    "prefill_wait": "prefill wait",
    "prefill": "prefill",
    "kv_transfer": "KV transfer",
    "residual": "residual",
}


def waterfall_figure(results: Sequence[LoadedResults]) -> Figure | None:
    """One TTFT waterfall per grid point, one panel per result that has phases: per phase of
    `measurement.phases.PHASES` a `bar` series, each point's mean phase (ms, `PointSummary.phases`)
    placed after the phases before it, so a bar ends at queue + TTFT; a simulated result's
    panel says so. None when no result has phases."""
    panels = []
    for side, result in zip(SIDES, results, strict=False):
        points = sorted(
            (p for p in result.points if p.phases is not None),
            key=lambda p: (p.concurrency, p.prefix_kinds),
        )
        if not points:
            continue
        starts = [0.0] * len(points)
        series = []
        for color, name in enumerate(PHASES):
            widths = [
                p.phases.phases[name].mean_ms if p.phases and name in p.phases.phases else 0.0
                for p in points
            ]
            if not any(widths):
                continue
            series.append(
                Series(
                    label=PHASE_LABELS[name],
                    side=side,
                    color=color,
                    x=tuple(starts),
                    y=tuple(float(i) for i in range(len(points))),
                    style="span",
                    widths=tuple(widths),
                )
            )
            starts = [a + w for a, w in zip(starts, widths, strict=True)]
        simulated = " (SIMULATED)" if result.grid is not None and result.grid.simulated else ""
        panels.append(
            Panel(
                title=f"{side}: {result.name}{simulated}",
                x_label="ms (mean per phase)",
                y_label="grid point",
                series=tuple(series),
                y_tick_labels=tuple(f"K{p.prefix_kinds} c{p.concurrency}" for p in points),
            )
        )
    if not panels:
        return None
    return Figure(
        key="waterfall",
        title=f"{_TTFT.name} by phase",
        caption="Per grid point, the client queue and the client's TTFT split into the "
        "frontend's prefill wait, prefill, KV transfer (disaggregated) and the residual "
        "(docs/metrics.md, TTFT phases); means over the point's requests, median of its runs.",
        panels=tuple(panels),
        columns=len(panels),
    )


def report_figures(results: Sequence[LoadedResults]) -> list[Figure]:
    """Every figure of the report for one or more results (A, B, C, ...), in report order:
    TTFT p50/p99, requests/s and cached-token ratio, the latency tails (ITL p50/p99, TPOT
    p99, E2E p50/p99), goodput and attainment where a point was judged against an SLO, the
    TTFT CDFs, one timeline per result, one figure of its worker pods' memory per result that
    has it, the TTFT waterfall where a result has phases.

    Raises ValueError for no result or more than `SIDES` (26)."""
    if not 1 <= len(results) <= len(SIDES):
        raise ValueError(f"a report draws 1 to {len(SIDES)} results, got {len(results)}")
    colors = _concurrency_colors(results)
    axis = {"bar": "the grid point", "concurrency": "concurrency"}.get(
        grid_axis(results), "prefix kinds"
    )
    judged = any(p.slo is not None for r in results for p in r.points)
    itl, tpot, e2e = (METRICS[m].name for m in ("itl", "tpot", "e2e"))
    return [
        grid_figure("ttft", f"{_TTFT.name} vs {axis}", TTFT_METRICS, results),
        grid_figure("throughput", "Throughput and prefix-cache hits", THROUGHPUT_METRICS, results),
        grid_figure("tails", f"Latency tails: {itl}, {tpot} and {e2e}", TAIL_METRICS, results),
        *([grid_figure("goodput", "Against the SLO", GOODPUT_METRICS, results)] if judged else []),
        cdf_figure(results),
        *(timeline_figure(side, r, colors) for side, r in zip(SIDES, results, strict=False)),
        *(f for side, r in zip(SIDES, results, strict=False) if (f := memory_figure(side, r))),
        *([] if (waterfall := waterfall_figure(results)) is None else [waterfall]),
    ]
