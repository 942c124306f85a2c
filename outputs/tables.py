"""Seed-style tables: one result, or two results side by side as "A / B"; reading a result
folder's `summary.json` back.

The tables fit 80 columns for the seed's values (its results table: simulator.seed) in "A / B" form:
two-line headers, no outer frame, and cells that never wrap. `table_console` gives a console
`PIPED_WIDTH` wide when stdout is not a terminal, so every table prints whole in logs too.
"""

import io
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import ValidationError
from rich import box
from rich.console import Console
from rich.table import Table

from configkeys.key_paths import show_path
from measurement.client_cost import queue_large, short_of_offered
from measurement.incidents import INCIDENTS_FILE, Incident, describe
from measurement.intervals import (
    INTERVAL_METRICS,
    MOST_REPETITIONS,
    TOO_MANY,
    PointComparison,
)
from measurement.results import (
    WIDE_INTERVAL,
    GridResult,
    PointSummary,
    RunSummary,
    open_loop_load,
)
from metrics.registry import METRICS, figure_header, figure_key, figure_label
from workload.config import error_message

SUMMARY_FILE = "summary.json"
PIPED_WIDTH = 1_000
"""Columns when stdout is a pipe or file (rich assumes 80): wider than any table, so none is
cut short with an ellipsis; a table prints at its own width, and a line is not wrapped."""
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


KEY_HEADERS = ("prefix\nkinds", "conc")
"""The headers of a grid point's key columns: prefix kinds, concurrency."""
# The seed's columns (its results table) plus the cached-token ratio and errors.
_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    (figure_header("ttft", 50), lambda p: _bound(p, "ttft_p50_ms")),
    (figure_header("ttft", 99), lambda p: _bound(p, "ttft_p99_ms")),
    (figure_header("requests_per_s"), lambda p: f"{p.requests_per_s:.1f}"),
    (figure_header("cached_ratio"), lambda p: _ratio(p.cached_ratio)),
    ("errors", lambda p: str(p.errors)),
)
# Shown when a grid point did not get the load it asked for (`_undelivered`): the open loop's
# offered rate, the rate actually sent, and the client queue p99.
_DELIVERY_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    ("offered\nreq/s", lambda p: rate_text(p.offered_rate_per_s)),
    ("sent\nreq/s", lambda p: rate_text(p.sent_rate_per_s)),
    (figure_header("queue", 99), lambda p: _ms(p.queue_p99_ms)),
)


# Shown when a grid point had censored requests (cut by the client's timeout, or failed after a
# wait: `measurement.errors.after_a_wait`): how many.
_CENSORED_COLUMNS: tuple[tuple[str, _Cell], ...] = (("censored", lambda p: str(p.censored)),)


def rate_text(value: float | None) -> str:
    """A rate (req/s) in a cell: one decimal, "-" without."""
    return "-" if value is None else f"{value:.1f}"


_SEED_FIGURES: tuple[tuple[str, float | None, Callable[[float | None], str]], ...] = (
    ("ttft", 50, _ms),
    ("ttft", 99, _ms),
    ("requests_per_s", None, rate_text),
    ("cached_ratio", None, _ratio),
)
"""The seed table's figures that show a grid point's interval on a second line: (metric key,
percentile, format of a bound)."""
_INTERVAL_CELLS: dict[str, tuple[str, Callable[[float | None], str]]] = {
    figure_header(m, q): (figure_key(m, q), fmt) for m, q, fmt in _SEED_FIGURES
}
"""Those columns by header: (PointSummary field, format of a bound)."""


def _interval_line(p: PointSummary, header: str) -> str:
    """The second line of a seed-table cell: the point's interval "low-high" ("" without)."""
    metric, fmt = _INTERVAL_CELLS.get(header, ("", _ms))
    return interval_text(p, metric, fmt)


def interval_caption(points: Sequence[PointSummary], simulated: bool = False) -> str | None:
    """The line under a seed table whose points have intervals: what the second lines are
    (with `simulated`: that their spread comes from the routing runs only); None when no point
    has one (fewer than 2 repetitions everywhere)."""
    levels = {p.confidence for p in points if any(i.low is not None for i in p.intervals.values())}
    if not levels:
        return None
    level = "/".join(f"{c:.0%}" for c in sorted(c for c in levels if c is not None))
    where = "; SIMULATED: spread from the routing runs only" if simulated else ""
    return (
        f"second lines: {level} interval over the repetitions (t on the runs' logs){where}"
        f"{wide_note(points)}"
    )


def wide_note(points: Sequence[PointSummary]) -> str:
    """``"; too wide: ..."`` where a point's interval is too wide to print
    (`MetricInterval.too_wide`), what that means and the fix; "" otherwise."""
    if not any(i.too_wide() for p in points for i in p.intervals.values()):
        return ""
    return (
        f"; too wide: the interval reaches over {WIDE_INTERVAL:g}x the largest run (few runs "
        "that differ: 2 runs give t with 1 degree of freedom, 12.7 standard errors each "
        "side); run more repetitions"
    )


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
    its TTFT (`measurement.client_cost.short_of_offered`, `queue_large`)."""
    return short_of_offered(p.offered_rate_per_s, p.sent_rate_per_s) or queue_large(
        p.queue_p99_ms, p.ttft_p50_ms
    )


def _table(title: str | None, columns: Sequence[tuple[str, _Cell]] = _COLUMNS) -> Table:
    return _headed_table(title, (*KEY_HEADERS, *(name for name, _ in columns)))


def _headed_table(title: str | None, headers: Sequence[str]) -> Table:
    """A table in this module's style with `headers` as its columns (never wrapped)."""
    table = Table(box=box.MINIMAL_HEAVY_HEAD, show_edge=False, pad_edge=False, title=title)
    for header in headers:
        table.add_column(header, no_wrap=True)
    return table


def ordered_points(points: Sequence[PointSummary]) -> list[PointSummary]:
    """The points in table order: by concurrency, then prefix kinds."""
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

    With `incidents` (placed: `measurement.incidents.placed`), the concurrency of a grid point that
    had one is followed by `INCIDENT_MARK`, and the caption lists the first `INCIDENTS_SHOWN`
    incidents, one `describe` line each. A point with 2 or more repetitions shows its
    intervals on a second line, which the caption explains (`interval_caption`, `simulated`:
    the results are a simulation's)."""
    table = _table(title, _seed_columns(points))
    for row in seed_rows(points, incidents):
        table.add_row(*row)
    caption = interval_caption(points, simulated)
    lines = [] if caption is None else [caption]
    if any(p.offered_rate_per_s is not None for p in points):
        lines.append(OPEN_LOOP_NOTE)
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
    return [*KEY_HEADERS, *(name for name, _ in _seed_columns(points))]


def concurrency_cell(point: PointSummary | None) -> str:
    """The grid point's load as its table cell: the concurrency of a closed loop (``32``); for
    an open loop (Poisson arrivals) the offered rate first and the concurrency as the most in
    flight (``8/s, <=32``): there the rate sets the load and the run's length, not the
    concurrency."""
    if point is None:
        return "-"
    if point.offered_rate_per_s is None:
        return str(point.concurrency)
    return open_loop_load(point.offered_rate_per_s, point.concurrency)


OPEN_LOOP_NOTE = (
    "conc of an open loop (Poisson arrivals): RATE/s, <=N: requests arrive at the offered rate "
    "and at most N are in flight; a run lasts about its requests / the rate, whatever the "
    "server's speed"
)
"""The caption line of a table with an open-loop point (:func:`concurrency_cell`)."""


def seed_rows(
    points: Sequence[PointSummary], incidents: Sequence[Incident] = ()
) -> list[list[str]]:
    """The cells of `seed_table`, one list per row (columns as in `table_headers(points)`);
    the concurrency of a grid point that had an incident is followed by `INCIDENT_MARK`; a
    metric with an interval (2 or more repetitions) shows it on a second line, "low-high"."""
    columns = _seed_columns(points)
    marked = {(i.prefix_kinds, i.concurrency) for i in incidents}
    rows = []
    for p in ordered_points(points):
        mark = f" {INCIDENT_MARK}" if (p.prefix_kinds, p.concurrency) in marked else ""
        cells = [cell(p) + _interval_line(p, name) for name, cell in columns]
        rows.append([str(p.prefix_kinds), f"{concurrency_cell(p)}{mark}", *cells])
    return rows


SEED_COLUMNS = _COLUMNS
"""The seed table's columns (header, cell), as `comparison_rows` takes them."""


def comparison_rows(
    a: Sequence[PointSummary],
    b: Sequence[PointSummary],
    columns: Sequence[tuple[str, _Cell]] = _COLUMNS,
    *,
    both: bool = True,
) -> list[list[str]]:
    """The cells of `comparison_table` ("A / B"), one list per row (`columns`: the seed
    table's, or another table's such as `TAIL_COLUMNS`); `both=False`: A's cells alone."""
    by_point_a = {(p.prefix_kinds, p.concurrency): p for p in a}
    by_point_b = {(p.prefix_kinds, p.concurrency): p for p in b}
    keys = sorted(by_point_a.keys() | by_point_b.keys(), key=lambda k: (k[1], k[0]))
    rows = []
    for key in keys:
        pa, pb = by_point_a.get(key), by_point_b.get(key)
        cells = [f"{cell(pa) if pa else '-'} / {cell(pb) if pb else '-'}" for _, cell in columns]
        load = {concurrency_cell(pa), concurrency_cell(pb)} - {"-"}
        conc = load.pop() if len(load) == 1 else f"{concurrency_cell(pa)} / {concurrency_cell(pb)}"
        if not both:
            cells = [cell(pa) if pa else "-" for _, cell in columns]
            conc = concurrency_cell(pa)
        rows.append([str(key[0]), conc, *cells])
    return rows


TABLE_VERDICT_METRICS = tuple(figure_key(m, q) for m, q, _ in _SEED_FIGURES)
"""The metrics of the verdict table (the seed table's); `testbed compare --json` has all of
`measurement.intervals.INTERVAL_METRICS`."""
VERDICT_HEADERS = (
    *KEY_HEADERS,
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
                c.verdict
                or ("no verdict (no spread)" if min(c.repetitions) > 1 else "no verdict (1 run)"),
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
    noises = "/".join(sorted({f"{c.noise_threshold:.0%}" for c in comparisons}))
    lines = [
        f"B / A of the medians; interval: {levels}, Welch's t on the runs' logs (the ratio of "
        "their geometric means); verdict: B higher / lower where it lies wholly beyond the "
        f"noise threshold (-+{noises} of 1), within noise where it excludes 1 but not the band"
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
    table = _headed_table(
        title,
        (
            *KEY_HEADERS,
            "rep",
            f"{METRICS['ttft'].name} mean {METRICS['ttft'].unit}\nclient / server",
            f"{figure_label('ttft', 50)}\nclient / server",
            f"client -\nserver {METRICS['ttft'].unit}",
            "server\nrequests",
            "server\nfailed",
            f"{figure_label('cached_ratio')}\nclient / server",
        ),
    )
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


PHASE_HEADERS = {
    "queue": "queue",
    "prefill_wait": "prefill\nwait",
    "prefill": "prefill",
    "kv_transfer": "KV\ntransfer",
    "residual": "residual",
}
"""The phases table's header of each phase of `measurement.phases.PHASES`."""


def phases_table(points: Sequence[PointSummary], title: str | None = None) -> Table | None:
    """Per grid point, TTFT split into its phases (`PointSummary.phases`; docs/metrics.md,
    "TTFT phases"): the client's mean TTFT, then each phase's mean and p99 (ms, "mean / p99"),
    the requests the frontend timed, the busiest prefill (or aggregated) worker's requests over
    the mean (`balance`) and the prefix-hit efficacy. Phases no point has are left out; None
    when no point has phases (a server that returns no per-request timing). A phase that rounds
    to 0 (a simulated residual) prints 0.0, never -0.0."""
    have = [p for p in ordered_points(points) if p.phases is not None]
    if not have:
        return None
    names = [n for n in PHASE_HEADERS if any(n in p.phases.phases for p in have if p.phases)]
    table = _headed_table(
        title,
        (
            *KEY_HEADERS,
            "TTFT\nmean ms",
            *(f"{PHASE_HEADERS[n]}\nmean / p99" for n in names),
            "timed",
            "balance",
            "hit\nefficacy",
        ),
    )
    for p in have:
        phases = p.phases
        assert phases is not None
        cells = []
        for n in names:
            f = phases.phases.get(n)
            cells.append("-" if f is None else f"{f.mean_ms:z,.1f} / {f.p99_ms:z,.1f}")
        table.add_row(
            str(p.prefix_kinds),
            str(p.concurrency),
            f"{phases.client_ttft_mean_ms:,.1f}",
            *cells,
            str(phases.requests),
            _ratio(phases.balance),
            _ratio(phases.hit_efficacy),
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
    if any(p.offered_rate_per_s is not None for p in (*a, *b)):
        table.caption = OPEN_LOOP_NOTE
        table.caption_justify = "left"
    return table


def table_text(table: Table, width: int = 120) -> str:
    """Render a rich table to plain text (no colour codes), `width` columns at most."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, no_color=True, color_system=None).print(table)
    return buffer.getvalue()


def table_console(stderr: bool = False, highlight: bool = True) -> Console:
    """A rich Console for printing these tables: the terminal's width on a terminal, else
    `PIPED_WIDTH` columns (`COLUMNS` in the environment when larger), so piped output (CI logs,
    `| tee`) never cuts a cell short. `highlight=False` turns off rich's colouring of numbers
    and paths in plain prints."""
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
        where = show_path(first["loc"]) or "(point)"
        raise ValueError(
            f"{file} is not a grid-point summary ({exc.error_count()} error(s); {where}: "
            f"{error_message(first)})"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file} is not JSON: {exc}") from None


def fine_text(value: float | None) -> str:
    """A latency for the tail table: one decimal below 100 ms (ITL, TPOT), none above."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


TAIL_COLUMNS: tuple[tuple[str, _Cell], ...] = (
    (figure_header("itl", 50), lambda p: fine_text(p.itl_p50_ms)),
    (figure_header("itl", 99), lambda p: fine_text(p.itl_p99_ms)),
    (figure_header("tpot", 50), lambda p: fine_text(p.tpot_p50_ms)),
    (figure_header("tpot", 99), lambda p: fine_text(p.tpot_p99_ms)),
    (figure_header("e2e", 50), lambda p: _ms(p.e2e_p50_ms)),
    (figure_header("e2e", 99), lambda p: _ms(p.e2e_p99_ms)),
    ("cold reqs\nall runs", lambda p: str(p.cold_requests)),
    (f"{figure_label('ttft', 99)}\nw/o cold", lambda p: _ms(p.tails_warm_ms.get("ttft_p99_ms"))),
)
"""The tail table's columns: ITL, TPOT and E2E at p50 and p99, the requests that were the
first of their client (cold, summed over repetitions; kept in every other figure) and the
TTFT p99 without them."""
TAIL_AB_COLUMNS = tuple(column for column in TAIL_COLUMNS if "p50" not in column[0])
"""The tail table's columns in "A / B" form: the p99s, cold requests and the TTFT p99 without
them (the p50s stand in the seed table's verdicts and `--json`), so two sides fit 100 columns."""
TAIL_CAPTION = (
    "cold: requests that were the first of their client (the closed loop's first burst), "
    "summed over the point's repetitions and included in every figure; w/o cold: the TTFT "
    "p99 of the other successful requests (median of the runs), which can sit above the "
    "TTFT p99 when the cold ones were not the slowest: over fewer requests the p99 lies "
    "nearer the slowest, and a request cut at its deadline counts in the p99 (as a lower "
    "bound) but not here"
)


def tail_table(points: Sequence[PointSummary], title: str | None = None) -> Table:
    """One row per grid point (ordered as `seed_table`): `TAIL_COLUMNS`, captioned."""
    table = _table(title, TAIL_COLUMNS)
    for row in tail_rows(points):
        table.add_row(*row)
    table.caption, table.caption_justify = TAIL_CAPTION, "left"
    return table


def tail_rows(points: Sequence[PointSummary]) -> list[list[str]]:
    """The cells of `tail_table`, one list per row."""
    return [
        [str(p.prefix_kinds), str(p.concurrency), *(cell(p) for _, cell in TAIL_COLUMNS)]
        for p in ordered_points(points)
    ]


def interval_text(p: PointSummary, metric: str, fmt: Callable[[float | None], str]) -> str:
    """A cell's second line: the point's interval of `metric` "low-high", "too wide (n runs)"
    where it reaches far beyond the runs (`MetricInterval.too_wide`), "" without one."""
    found = p.intervals.get(metric)
    if found is None or found.low is None:
        return ""
    if found.too_wide():
        return f"\ntoo wide ({len(found.runs)} runs)"
    return f"\n{fmt(found.low)}-{fmt(found.high)}"


def share_text(value: float | None) -> str:
    """A share in a cell as a percentage with one decimal, "-" without."""
    return "-" if value is None else f"{value:.1%}"


def met_text(p: PointSummary | None) -> str:
    """ "met" / "MISSED" for a judged point (every objective of its SLO holds or not), "-"
    otherwise."""
    if p is None or p.slo is None:
        return "-"
    return "met" if p.slo.slo_met else "MISSED"


def tail_comparison_table(
    a: Sequence[PointSummary], b: Sequence[PointSummary], title: str | None = None
) -> Table:
    """`TAIL_AB_COLUMNS` as "A / B" cells for the union of grid points."""
    table = _table(title, TAIL_AB_COLUMNS)
    for row in comparison_rows(a, b, TAIL_AB_COLUMNS):
        table.add_row(*row)
    table.caption, table.caption_justify = TAIL_CAPTION, "left"
    return table


def _goodput_of(p: PointSummary) -> float | None:
    return None if p.slo is None else p.slo.goodput_requests_per_s


STACK_METRICS: dict[str, tuple[str, _Cell]] = {
    "ttft_p50_ms": (figure_label("ttft", 50), lambda p: _ms(p.ttft_p50_ms)),
    "ttft_p99_ms": (figure_label("ttft", 99), lambda p: _ms(p.ttft_p99_ms)),
    "itl_p99_ms": (figure_label("itl", 99), lambda p: fine_text(p.itl_p99_ms)),
    "tpot_p99_ms": (figure_label("tpot", 99), lambda p: fine_text(p.tpot_p99_ms)),
    "e2e_p99_ms": (figure_label("e2e", 99), lambda p: _ms(p.e2e_p99_ms)),
    "requests_per_s": (figure_label("requests_per_s"), lambda p: rate_text(p.requests_per_s)),
    "cached_ratio": (figure_label("cached_ratio"), lambda p: _ratio(p.cached_ratio)),
    "goodput_requests_per_s": (
        f"{figure_label('goodput_requests_per_s')} (SLO met / MISSED)",
        lambda p: f"{rate_text(_goodput_of(p))} {met_text(p)}",
    ),
}
"""The metrics `stacks_tables` gives one table each: key -> (title, cell). The goodput table
appears only where a point was judged against an SLO."""


def stack_goodput(points: Sequence[PointSummary]) -> float | None:
    """What a stack is ranked by: the median over its judged points of their goodput (req/s);
    None without a judged point."""
    values = [g for p in points if (g := _goodput_of(p)) is not None]
    return statistics.median(values) if values else None


def rank_stacks(
    named: Sequence[tuple[str, Sequence[PointSummary]]],
) -> list[tuple[str, Sequence[PointSummary]]]:
    """`named` (stack name, its points) ranked by `stack_goodput`, highest first; stacks
    without a judged point last, in the order given. Without any SLO, the order given."""
    scored = [(stack_goodput(points), n, (name, points)) for n, (name, points) in enumerate(named)]
    scored.sort(key=lambda item: (item[0] is None, -(item[0] or 0.0), item[1]))
    return [entry for _, _, entry in scored]


def ranking_caption(ranked: Sequence[tuple[str, Sequence[PointSummary]]]) -> str:
    """The line under the stacks' tables when ranked: each stack's rank and the goodput it is
    ranked by ("1. B 4.20 req/s, 2. A 3.10 req/s, 3. C no judged point")."""
    ranks = ", ".join(
        f"{rank}. {name} "
        + ("no judged point" if (g := stack_goodput(points)) is None else f"{rate_text(g)} req/s")
        for rank, (name, points) in enumerate(ranked, start=1)
    )
    return (
        "columns ranked by goodput, the median of each stack's points' goodput req/s (not in "
        f"the order given): {ranks}"
    )


def stacks_tables(
    named: Sequence[tuple[str, Sequence[PointSummary]]], simulated: bool = False
) -> list[Table]:
    """One table per metric of `STACK_METRICS` with every stack as a column (`rank_stacks`'
    order: by goodput where an SLO judged them) and one row per grid point of any stack ("-"
    where a stack lacks it); the goodput table only where a point was judged, then each
    column's header has its rank and the last table's caption the goodput it ranks by."""
    ranked = rank_stacks(named)
    by_stack = [
        (name, {(p.prefix_kinds, p.concurrency): p for p in points}) for name, points in ranked
    ]
    keys = sorted({k for _, pts in by_stack for k in pts}, key=lambda k: (k[1], k[0]))
    judged = any(p.slo is not None for _, pts in ranked for p in pts)
    tables = []
    for metric, (title, cell) in STACK_METRICS.items():
        if metric == "goodput_requests_per_s" and not judged:
            continue
        table = Table(
            box=box.MINIMAL_HEAVY_HEAD,
            show_edge=False,
            pad_edge=False,
            title=f"{title}{' (SIMULATED)' if simulated else ''}",
        )
        names = [f"{n}. {name}" if judged else name for n, (name, _) in enumerate(by_stack, 1)]
        for header in (*KEY_HEADERS, *names):
            table.add_column(header, no_wrap=True)
        for key in keys:
            cells = [cell(pts[key]) if key in pts else "-" for _, pts in by_stack]
            table.add_row(str(key[0]), str(key[1]), *cells)
        tables.append(table)
    if judged:
        tables[-1].caption = ranking_caption(ranked)
        tables[-1].caption_justify = "left"
    return tables
