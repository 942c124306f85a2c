"""Seed-style tables: one result, or two results side by side as "A / B"; reading a result
folder's `summary.json` back.

The tables fit 80 columns for the seed's values (its results table: simulator.seed) in "A / B" form:
two-line headers, no outer frame, and cells that never wrap. `table_console` gives a console
at least `PIPED_WIDTH` wide when stdout is not a terminal, so larger values fit in logs too.
"""

import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table

from loadgen.config import error_message
from loadgen.incidents import INCIDENTS_FILE, Incident, describe
from loadgen.intervals import INTERVAL_METRICS, MOST_REPETITIONS, TOO_MANY, PointComparison
from loadgen.results import GridResult, PointSummary, RunSummary
from loadgen.stats import queue_large, short_of_offered

SUMMARY_FILE = "summary.json"
PIPED_WIDTH = 100  # columns for tables when stdout is a pipe or file (rich assumes 80)
SUGGESTIONS_SHOWN = 5  # result folders named in a "did you mean" message
INCIDENT_MARK = "!"  # after the concurrency of a grid point during which an incident happened
INCIDENTS_SHOWN = 5  # incidents listed under a table (all of them are in incidents.json)

_Cell = Callable[[PointSummary], str]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _bound(p: PointSummary, metric: str) -> str:
    """A cell's value, prefixed with ">=" when it is a lower bound (it rests on requests the
    client cut at its timeout: `PointSummary.lower_bounds`)."""
    text = _ms(getattr(p, metric))
    return f">={text}" if metric in p.lower_bounds else text


_KEY_HEADERS = ("prefix\nkinds", "conc")  # the grid point: prefix kinds, concurrency
# The seed's columns (its results table) plus the cached-token ratio and errors.
_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    ("TTFT p50\nms", lambda p: _bound(p, "ttft_p50_ms")),
    ("TTFT p99\nms", lambda p: _bound(p, "ttft_p99_ms")),
    ("req/s", lambda p: f"{p.requests_per_s:.1f}"),
    ("cached\nratio", lambda p: _ratio(p.cached_ratio)),
    ("errors", lambda p: str(p.errors)),
)
# Shown when a grid point did not get the load it asked for (`_undelivered`): the open loop's
# offered rate, the rate actually sent, and the client queue p99.
_DELIVERY_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    ("offered\nreq/s", lambda p: _rate(p.offered_rate_per_s)),
    ("sent\nreq/s", lambda p: _rate(p.sent_rate_per_s)),
    ("queue\np99 ms", lambda p: _ms(p.queue_p99_ms)),
)


# Shown when a grid point had requests cut by the client's timeout (censored): how many.
_CENSORED_COLUMNS: tuple[tuple[str, _Cell], ...] = (("cut at\ntimeout", lambda p: str(p.censored)),)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# The seed table's columns that show a grid point's interval on a second line: header ->
# (PointSummary field, format of a bound).
_INTERVAL_CELLS: dict[str, tuple[str, Callable[[float | None], str]]] = {
    "TTFT p50\nms": ("ttft_p50_ms", _ms),
    "TTFT p99\nms": ("ttft_p99_ms", _ms),
    "req/s": ("requests_per_s", _rate),
    "cached\nratio": ("cached_ratio", _ratio),
}


def _interval_line(p: PointSummary, header: str) -> str:
    """The second line of a seed-table cell: the point's interval "low-high" ("" without)."""
    metric, fmt = _INTERVAL_CELLS.get(header, ("", _ms))
    found = p.intervals.get(metric)
    if found is None or found.low is None:
        return ""
    return f"\n{fmt(found.low)}-{fmt(found.high)}"


def interval_caption(points: Sequence[PointSummary], simulated: bool = False) -> str | None:
    """The line under a seed table whose points have intervals: what the second lines are
    (with `simulated`: that their spread comes from the routing runs only); None when no point
    has one (fewer than 2 repetitions everywhere)."""
    levels = {p.confidence for p in points if any(i.low is not None for i in p.intervals.values())}
    if not levels:
        return None
    level = "/".join(f"{c:.0%}" for c in sorted(c for c in levels if c is not None))
    where = "; SIMULATED: spread from the routing runs only" if simulated else ""
    return f"second lines: {level} interval over the repetitions (t on the runs' logs){where}"


def prompt_sizes(result: GridResult) -> str:
    """How prompts were sized (`GridResult.token_count_source`) and what the server counted:
    the mean of the runs' `prompt_tokens_mean` (usage.prompt_tokens) beside the planned length,
    so a prompt length is read from what the server processed, not from the plan."""
    counted = [r.prompt_tokens_mean for r in result.runs if r.prompt_tokens_mean is not None]
    if not counted:
        return result.token_count_source
    mean = sum(counted) / len(counted)
    return (
        f"{result.token_count_source}; the server counted {mean:,.0f} prompt tokens per "
        f"request ({result.config.prompt_tokens:,} planned)"
    )


def _undelivered(p: PointSummary) -> bool:
    """The point sent less than its offered rate, or its client queue p99 is large next to
    its TTFT (`loadgen.stats.short_of_offered`, `queue_large`)."""
    return short_of_offered(p.offered_rate_per_s, p.sent_rate_per_s) or queue_large(
        p.queue_p99_ms, p.ttft_p50_ms
    )


def _table(title: str | None, columns: Sequence[tuple[str, _Cell]] = _COLUMNS) -> Table:
    table = Table(box=box.MINIMAL_HEAVY_HEAD, show_edge=False, pad_edge=False, title=title)
    for header in (*_KEY_HEADERS, *(name for name, _ in columns)):
        table.add_column(header, no_wrap=True)
    return table


def _ordered(points: Sequence[PointSummary]) -> list[PointSummary]:
    return sorted(points, key=lambda p: (p.concurrency, p.prefix_kinds))


def seed_table(
    points: Sequence[PointSummary],
    title: str | None = None,
    incidents: Sequence[Incident] = (),
    simulated: bool = False,
) -> Table:
    """A table with one row per grid point (ordered by concurrency, then prefix kinds): prefix
    kinds, concurrency ("conc"), TTFT p50 and p99 (ms), requests/s, cached-token ratio, errors
    (failed requests, summed over repetitions); a TTFT that is a lower bound (it rests on
    requests cut by the client's timeout) reads ">=value", and when any point had such
    requests a "cut at timeout" column counts them. When any point did not get the load it asked
    for (an open loop that sent < 90% of its offered rate, or a client queue p99 large next to
    TTFT), three columns follow: offered req/s ("-" for the closed loop), sent req/s and the
    client queue p99 (ms).

    With `incidents` (placed: `loadgen.incidents.placed`), the concurrency of a grid point that
    had one is followed by `INCIDENT_MARK`, and the caption lists the first `INCIDENTS_SHOWN`
    incidents, one `describe` line each. A point with 2 or more repetitions shows its
    intervals on a second line, which the caption explains (`interval_caption`, `simulated`:
    the results are a simulation's)."""
    table = _table(title, _seed_columns(points))
    for row in seed_rows(points, incidents):
        table.add_row(*row)
    caption = interval_caption(points, simulated)
    lines = [] if caption is None else [caption]
    if incidents:
        lines += [f"{INCIDENT_MARK} {describe(i)}" for i in incidents[:INCIDENTS_SHOWN]]
        if len(incidents) > INCIDENTS_SHOWN:
            lines.append(f"(and {len(incidents) - INCIDENTS_SHOWN} more in {INCIDENTS_FILE})")
    if lines:
        table.caption = "\n".join(lines)
        table.caption_justify = "left"
    return table


def _seed_columns(points: Sequence[PointSummary]) -> tuple[tuple[str, _Cell], ...]:
    columns = _COLUMNS
    if any(p.censored for p in points):
        columns = (*columns, *_CENSORED_COLUMNS)
    if any(_undelivered(p) for p in points):
        columns = (*columns, *_DELIVERY_COLUMNS)
    return columns


def table_headers(points: Sequence[PointSummary] = ()) -> list[str]:
    """The headers of `seed_table(points)`, two lines each ("TTFT p50\nms"); without points,
    those of `comparison_table`."""
    return [*_KEY_HEADERS, *(name for name, _ in _seed_columns(points))]


def seed_rows(
    points: Sequence[PointSummary], incidents: Sequence[Incident] = ()
) -> list[list[str]]:
    """The cells of `seed_table`, one list per row (columns as in `table_headers(points)`);
    the concurrency of a grid point that had an incident is followed by `INCIDENT_MARK`; a
    metric with an interval (2 or more repetitions) shows it on a second line, "low-high"."""
    columns = _seed_columns(points)
    marked = {(i.prefix_kinds, i.concurrency) for i in incidents}
    rows = []
    for p in _ordered(points):
        mark = f" {INCIDENT_MARK}" if (p.prefix_kinds, p.concurrency) in marked else ""
        cells = [cell(p) + _interval_line(p, name) for name, cell in columns]
        rows.append([str(p.prefix_kinds), f"{p.concurrency}{mark}", *cells])
    return rows


def comparison_rows(a: Sequence[PointSummary], b: Sequence[PointSummary]) -> list[list[str]]:
    """The cells of `comparison_table` ("A / B"), one list per row."""
    by_point_a = {(p.prefix_kinds, p.concurrency): p for p in a}
    by_point_b = {(p.prefix_kinds, p.concurrency): p for p in b}
    keys = sorted(by_point_a.keys() | by_point_b.keys(), key=lambda k: (k[1], k[0]))
    rows = []
    for key in keys:
        pa, pb = by_point_a.get(key), by_point_b.get(key)
        cells = [f"{cell(pa) if pa else '-'} / {cell(pb) if pb else '-'}" for _, cell in _COLUMNS]
        rows.append([str(key[0]), str(key[1]), *cells])
    return rows


TABLE_VERDICT_METRICS = ("ttft_p50_ms", "ttft_p99_ms", "requests_per_s", "cached_ratio")
"""The metrics of the verdict table (the seed table's); `testbed compare --json` has all of
`loadgen.intervals.INTERVAL_METRICS`."""
VERDICT_HEADERS = (
    *_KEY_HEADERS,
    "metric",
    "B / A",
    "interval",
    "verdict",
    "runs\nA / B",
    "runs that\nwould tell",
)


def verdict_rows(comparisons: Sequence[PointComparison]) -> list[list[str]]:
    """The cells of `verdict_table` (columns `VERDICT_HEADERS`), one row per comparison of a
    `TABLE_VERDICT_METRICS` metric: B / A ("x6.24"), its interval ("5.10-7.63", "-" without),
    the verdict, the runs per side, and where no difference was detected about how many runs
    per side would detect the observed one ("> 100" beyond `MOST_REPETITIONS`, "-" where it
    cannot be said)."""
    rows = []
    for c in comparisons:
        if c.metric not in TABLE_VERDICT_METRICS:
            continue
        ratio = "-" if c.ratio is None else f"x{c.ratio:.2f}"
        ci = "-" if c.ratio_ci is None else f"{c.ratio_ci[0]:.2f}-{c.ratio_ci[1]:.2f}"
        tell = "-"
        if c.repetitions_needed is not None:
            tell = str(c.repetitions_needed)
        elif c.note == TOO_MANY:
            tell = f"> {MOST_REPETITIONS}"
        rows.append(
            [
                str(c.prefix_kinds),
                str(c.concurrency),
                INTERVAL_METRICS[c.metric],
                ratio,
                ci,
                c.verdict or "no verdict (1 run)",
                f"{c.repetitions[0]} / {c.repetitions[1]}",
                tell,
            ]
        )
    return rows


def verdict_caption(comparisons: Sequence[PointComparison], simulated: bool) -> str:
    """The lines under a verdict table: the level and method, and what fewer than 2 runs on
    a side means; with `simulated`, that it compares simulations whose spread comes from the
    routing runs only."""
    levels = "/".join(sorted({f"{c.confidence:.0%}" for c in comparisons}))
    lines = [
        f"B / A of the medians; interval: {levels}, Welch's t on the runs' logs (the ratio of "
        "their geometric means); verdict: B higher / lower where it excludes 1"
    ]
    if any(c.scale == "linear" for c in comparisons):
        lines.append("where a run gave 0: Welch's t on the values, Fieller's interval for B / A")
    if any(min(c.repetitions) < 2 for c in comparisons):
        lines.append(
            "a side with 1 run has no run-to-run spread to judge by: no interval, no verdict "
            "(run 3 repetitions or more)"
        )
    if simulated:
        lines.append(
            "SIMULATED: compares two simulations; their run-to-run spread comes from the "
            "routing runs only (the timing model is deterministic)"
        )
    return "\n".join(lines)


NO_VERDICTS = (
    "No intervals or verdicts: a grid point needs 2 or more repetitions on both sides to judge "
    "a difference by its run-to-run spread (the seed ran 3)."
)


def verdict_table(
    comparisons: Sequence[PointComparison], title: str | None = None, simulated: bool = False
) -> Table | str:
    """A / B per grid point and metric (`verdict_rows`), captioned by `verdict_caption`;
    `NO_VERDICTS` when no comparison has 2 runs on both sides (nothing can be judged)."""
    if all(min(c.repetitions) < 2 for c in comparisons):
        return NO_VERDICTS
    table = Table(
        box=box.MINIMAL_HEAVY_HEAD,
        show_edge=False,
        pad_edge=False,
        title=title,
        caption=verdict_caption(comparisons, simulated),
        caption_justify="left",
    )
    for header in VERDICT_HEADERS:  # metric and verdict wrap on a narrow terminal
        table.add_column(header, no_wrap=header not in ("metric", "verdict"))
    for row in verdict_rows(comparisons):
        table.add_row(*row)
    return table


def client_server_table(runs: Sequence[RunSummary], title: str | None = None) -> Table | None:
    """Per run, the client's TTFT beside the server's (`RunSummary.server`, from /metrics):
    mean and p50 (ms; the server's p50 is a histogram estimate), the mean difference (client -
    server: network plus client), the requests the server counted (warm-up included) with
    how many it did not count as successes, and the cached-token ratio the server reported to
    the client beside the one measured where prefixes are looked up
    (`ServerRunMetrics.prefill_cached_ratio`; "-" without). None when no run has server
    figures."""
    rows = [(run, run.server) for run in runs if run.server is not None]
    if not rows:
        return None
    table = Table(box=box.MINIMAL_HEAVY_HEAD, show_edge=False, pad_edge=False, title=title)
    headers = (
        *_KEY_HEADERS,
        "rep",
        "TTFT mean ms\nclient / server",
        "TTFT p50 ms\nclient / server",
        "client -\nserver ms",
        "server\nrequests",
        "server\nfailed",
        "cached ratio\nclient / server",
    )
    for header in headers:
        table.add_column(header, no_wrap=True)
    for run, server in rows:
        gap = (
            None
            if run.ttft_mean_ms is None or server.ttft_mean_ms is None
            else run.ttft_mean_ms - server.ttft_mean_ms
        )
        failed = server.requests - server.requests_by_status.get("success", 0)
        table.add_row(
            str(run.prefix_kinds),
            str(run.concurrency),
            str(run.repetition),
            f"{_ms(run.ttft_mean_ms)} / {_ms(server.ttft_mean_ms)}",
            f"{_ms(run.ttft_p50_ms)} / {_ms(server.ttft_p50_ms)}",
            "-" if gap is None else f"{gap:,.1f}",
            str(server.requests),
            str(failed),
            f"{_ratio(run.cached_ratio)} / {_ratio(server.prefill_cached_ratio)}",
        )
    return table


def comparison_table(
    a: Sequence[PointSummary], b: Sequence[PointSummary], title: str | None = None
) -> Table:
    """The seed's "A / B" layout: each cell holds A's value, " / ", B's value, for the union of
    grid points (a point missing on one side shows "-" there). Columns as in `seed_table`."""
    table = _table(title)
    for row in comparison_rows(a, b):
        table.add_row(*row)
    return table


def table_text(table: Table, width: int = 120) -> str:
    """Render a rich table to plain text (no colour codes), `width` columns at most."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, no_color=True, color_system=None).print(table)
    return buffer.getvalue()


def table_console(stderr: bool = False, highlight: bool = True) -> Console:
    """A rich Console for printing these tables: the terminal's width on a terminal, else at
    least `PIPED_WIDTH` (100) columns, so piped output (CI logs, `| tee`) neither truncates
    nor wraps cells. `COLUMNS` in the environment still sets the width when larger.
    `highlight=False` turns off rich's colouring of numbers and paths in plain prints."""
    console = Console(stderr=stderr, highlight=highlight)
    if not console.is_terminal:
        console.width = max(console.width, PIPED_WIDTH)
    return console


def result_dirs_under(folder: Path) -> list[Path]:
    """The outermost folders under `folder` (sorted) that hold a `summary.json`; folders
    inside one of them are left out. [] when `folder` is not a directory."""
    if not folder.is_dir():
        return []
    found = sorted(path.parent for path in folder.rglob(SUMMARY_FILE) if path.is_file())
    return [path for path in found if not any(other in path.parents for other in found)]


def _missing_summary_message(result_dir: Path) -> str:
    if not result_dir.exists():
        return f"{result_dir} does not exist (expected a result folder holding {SUMMARY_FILE})"
    if not result_dir.is_dir():
        return f"{result_dir} is not a folder (expected a result folder holding {SUMMARY_FILE})"
    found = result_dirs_under(result_dir)
    if not found:
        return (
            f"no {SUMMARY_FILE} in {result_dir} or below (expected a folder written by "
            "`testbed load --out` or `testbed simulate`)"
        )
    shown = ", ".join(str(path) for path in found[:SUGGESTIONS_SHOWN])
    more = f" (and {len(found) - SUGGESTIONS_SHOWN} more)" if len(found) > SUGGESTIONS_SHOWN else ""
    return f"no {SUMMARY_FILE} in {result_dir}; did you mean one of: {shown}{more}?"


def load_points(result_dir: Path) -> list[PointSummary]:
    """Read `result_dir/summary.json` (written by `testbed load`): one `PointSummary` per grid
    point.

    Raises FileNotFoundError with a one-line message when it is absent (naming the result
    folders below `result_dir`, if any: "did you mean one of: ..."), and ValueError when the
    file is not JSON or does not hold a list of grid-point summaries (the first problem named).
    """
    file = result_dir / SUMMARY_FILE
    if not file.is_file():
        raise FileNotFoundError(_missing_summary_message(result_dir))
    try:
        data = json.loads(file.read_text())
        if not isinstance(data, list):
            raise ValueError(f"{file} holds a {type(data).__name__}, not a list of grid points")
        return [PointSummary.model_validate(item) for item in data]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(point)"
        raise ValueError(
            f"{file} is not a grid-point summary ({exc.error_count()} error(s); {where}: "
            f"{error_message(first)})"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file} is not JSON: {exc}") from None
