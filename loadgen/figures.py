"""The report's figures as plain data: what is plotted, before any plotting library sees it.

Each `Figure` holds panels of `Series` (x and y as tuples of floats), run windows (`Band`) and
incidents (`Mark`); `loadgen.html_report` draws them. Keeping the numbers here lets tests check
that the plotted values equal `summary.json`'s and `requests.parquet`'s.

Result A is drawn with solid lines and round markers, result B with dashed lines and square
markers; a colour stands for one concurrency throughout the report.

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

from loadgen.incidents import Incident, describe
from loadgen.phases import PHASES
from loadgen.results import GridResult, PointSummary
from loadgen.results_folder import LoadedResults

_NS_PER_MS = 1e6
_NS_PER_S = 1e9
WIDE_RANGE = 20.0
"""An axis whose positive values span more than this factor (max / min) is drawn log-scaled."""

SIDES = ("A", "B")
Style = Literal["line", "step", "points", "failures", "bar"]


@dataclass(frozen=True)
class Series:
    """One line or cloud of points. `color` indexes the report's palette (the rank of the
    concurrency); `side` is "A" or "B"; `style`: `line` (grid metrics), `step` (a CDF),
    `points` (request TTFTs on a timeline), `failures` (failed requests), `bar` (one segment
    of a waterfall per y: from `x` for `widths`). `y_low` / `y_high`: a `line`'s error bars,
    one per point (the grid point's interval, `PointSummary.intervals`; equal to `y` where a
    point has none), or () for none at all."""

    label: str
    side: str
    color: int
    x: tuple[float, ...]
    y: tuple[float, ...]
    style: Style
    y_low: tuple[float, ...] = ()
    y_high: tuple[float, ...] = ()
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
    `y_from_zero`: a linear y axis starts at 0 (a grid metric's: a range of a few tenths of a
    millisecond must not look like a large difference)."""

    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    log_x: bool = False
    log_y: bool = False
    x_ticks: tuple[float, ...] = ()
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
    """``"; A solid, B dashed"`` for two results, nothing for one."""
    return "; A solid, B dashed" if len(results) > 1 else ""


def _wide(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > WIDE_RANGE


def _concurrency_colors(results: Sequence[LoadedResults]) -> dict[int, int]:
    levels = sorted({p.concurrency for r in results for p in r.points})
    return {c: i for i, c in enumerate(levels)}


def _bounds(point: PointSummary, field: str) -> tuple[float, float] | None:
    found = point.intervals.get(field)
    if found is None or found.low is None or found.high is None:
        return None
    return found.low, found.high


def _metric_panel(
    results: Sequence[LoadedResults], field: str, title: str, unit: str, log: bool
) -> Panel:
    colors = _concurrency_colors(results)
    series = []
    for side, result in zip(SIDES, results, strict=False):
        for c in colors:
            points = sorted(
                (p for p in result.points if p.concurrency == c), key=lambda p: p.prefix_kinds
            )
            xy = [(p.prefix_kinds, getattr(p, field), _bounds(p, field)) for p in points]
            xy = [(x, y, bounds) for x, y, bounds in xy if y is not None]
            if xy:
                xs, ys, bounds = zip(*xy, strict=True)
                bars = any(b is not None for b in bounds)
                low = tuple(b[0] if b else y for b, y in zip(bounds, ys, strict=True))
                high = tuple(b[1] if b else y for b, y in zip(bounds, ys, strict=True))
                series.append(
                    Series(
                        f"{side} c={c}",
                        side,
                        colors[c],
                        tuple(xs),
                        tuple(ys),
                        "line",
                        low if bars else (),
                        high if bars else (),
                    )
                )
    kinds = sorted({p.prefix_kinds for r in results for p in r.points})
    values = [y for s in series for y in (*s.y, *s.y_low, *s.y_high)]
    return Panel(
        title=title,
        x_label="prefix kinds",
        y_label=f"{title} ({unit})" if unit else title,
        series=tuple(series),
        log_y=log and _wide(values),
        x_ticks=tuple(float(k) for k in kinds),
        y_from_zero=True,
    )


MetricSpec = tuple[str, str, str]
"""A `PointSummary` field, its title and its unit ("" for a ratio)."""

TTFT_METRICS: tuple[MetricSpec, ...] = (
    ("ttft_p50_ms", "TTFT p50", "ms"),
    ("ttft_p99_ms", "TTFT p99", "ms"),
)
THROUGHPUT_METRICS: tuple[MetricSpec, ...] = (
    ("requests_per_s", "Requests/s", "req/s"),
    ("cached_ratio", "Cached-token ratio (client-reported)", ""),
)


def grid_figure(
    key: str, title: str, metrics: Sequence[MetricSpec], results: Sequence[LoadedResults]
) -> Figure:
    """One panel per metric: the metric (the grid point's median over repetitions, as in
    `summary.json`) against prefix kinds, one line per concurrency and result. Latency panels
    (unit ms) are log-scaled when their values span more than `WIDE_RANGE`."""
    panels = tuple(
        _metric_panel(results, field, name, unit, log=unit == "ms") for field, name, unit in metrics
    )
    return Figure(
        key=key,
        title=title,
        caption="Median over repetitions of each grid point (summary.json); one line per "
        f"concurrency{_sides_note(results)}; error bars: the point's interval over its "
        "repetitions (2 or more; a simulation's spread comes from its routing runs only).",
        panels=panels,
        columns=len(panels),
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
    result (x: TTFT ms, sorted; y: rank / n)."""
    colors = _concurrency_colors(results)
    keys = sorted({(p.prefix_kinds, p.concurrency) for r in results for p in r.points})
    keys.sort(key=lambda k: (k[1], k[0]))
    frames = [successful_ttfts_ms(r.requests) for r in results]
    panels = []
    all_x: list[float] = []
    for kinds, conc in keys:
        series = []
        for side, frame in zip(SIDES, frames, strict=False):
            values = sorted(
                frame.loc[
                    (frame["prefix_kinds"] == kinds) & (frame["concurrency"] == conc), "ttft_ms"
                ]
            )
            if values:
                n = len(values)
                ranks = tuple((i + 1) / n for i in range(n))
                series.append(
                    Series(f"{side} (n={n})", side, colors[conc], tuple(values), ranks, "step")
                )
                all_x += values
        panels.append(
            Panel(
                title=f"K={kinds} c={conc}",
                x_label="TTFT (ms)",
                y_label="fraction of requests",
                series=tuple(series),
            )
        )
    log_x = _wide(all_x)
    return Figure(
        key="ttft-cdf",
        title="TTFT distribution per grid point",
        caption="Empirical CDF of every successful request's TTFT (requests.parquet), "
        f"repetitions pooled{_sides_note(results)}.",
        panels=tuple(dataclasses.replace(p, log_x=log_x) for p in panels),
        columns=len({k for k, _ in keys}),
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
        y_label="TTFT (ms); failures: time to fail",
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


PHASE_LABELS = {
    "queue": "client queue",
    "prefill_wait": "prefill wait",
    "prefill": "prefill",
    "kv_transfer": "KV transfer",
    "residual": "residual",
}


def waterfall_figure(results: Sequence[LoadedResults]) -> Figure | None:
    """One TTFT waterfall per grid point, one panel per result that has phases: per phase of
    `loadgen.phases.PHASES` a `bar` series, each point's mean phase (ms, `PointSummary.phases`)
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
                    style="bar",
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
        title="TTFT by phase",
        caption="Per grid point, the client queue and the client's TTFT split into the "
        "frontend's prefill wait, prefill, KV transfer (disaggregated) and the residual "
        "(docs/metrics.md, TTFT phases); means over the point's requests, median of its runs.",
        panels=tuple(panels),
        columns=len(panels),
    )


def report_figures(results: Sequence[LoadedResults]) -> list[Figure]:
    """Every figure of the report for one or two results (A, then B), in report order:
    TTFT p50/p99, requests/s and cached-token ratio, the TTFT CDFs, one timeline per result.

    Raises ValueError for no result or more than two."""
    if not 1 <= len(results) <= len(SIDES):
        raise ValueError(f"a report compares one or two results, got {len(results)}")
    colors = _concurrency_colors(results)
    return [
        grid_figure("ttft", "TTFT vs prefix kinds", TTFT_METRICS, results),
        grid_figure("throughput", "Throughput and prefix-cache hits", THROUGHPUT_METRICS, results),
        cdf_figure(results),
        *(timeline_figure(side, r, colors) for side, r in zip(SIDES, results, strict=False)),
        *([] if (waterfall := waterfall_figure(results)) is None else [waterfall]),
    ]
