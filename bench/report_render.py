"""How long `testbed report` takes and how large its HTML is on the seed's full grid, drawn with
matplotlib (what the report uses) and with plotly (its JavaScript inlined), side by side.

Run: `uv run python bench/report_render.py [--requests 200] [--repeat 3]`. Builds two synthetic
results folders of the seed's size (prefix kinds {2, 7, 12, 24} x concurrency {4, 8} x 3
repetitions = 24 runs each, 200 requests per run, 2% failed, one incident each) with loadgen's
own writer, then for each library: the time to read both folders and write the report and the
CPU time it took (best of `--repeat`, in this process, imports done before: the CPU time is what
a shared machine's load does not inflate), the HTML's size, and, when Chromium is
installed (Debian's `chromium`), the time from opening the file to every figure drawn.
The figures are the same `outputs.figures` data for both libraries. Prints the load average
beside the numbers: the machine is shared. This is a measurement script: nothing here asserts.
"""

import itertools
import os
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import plotly.graph_objects as go
import typer
from plotly.subplots import make_subplots
from rich.console import Console
from rich.table import Table

from measurement.errors import ErrorKind
from measurement.incidents import Incident, RunWindow, placed
from measurement.record import RequestRecord
from measurement.results import GridResult
from measurement.stats import summarize_point, summarize_run
from outputs.figures import Figure, report_figures
from outputs.folder_reader import LoadedResults, load_results
from outputs.folder_writer import MeasuredRun, ResultsFolder, grid_settings, records_frame
from outputs.html_report import FAILURE_COLOR, PALETTE, write_report
from workload.config import LoadConfig

SEED_KINDS = (2, 7, 12, 24)
SEED_CONCURRENCY = (4, 8)
SEED_REPETITIONS = 3
FAILED_SHARE = 0.02
OUTPUT_TOKENS = 16
CHROMIUM = shutil.which("chromium")


def _run_records(
    rng: random.Random, kinds: int, conc: int, requests: int, start_ns: int, slow: float
) -> tuple[list[RequestRecord], int]:
    """`requests` closed-loop-like records starting at `start_ns`; TTFT grows with K, c and
    `slow` (B's factor); returns them and the end of the last one (ns)."""
    records = []
    clock = start_ns
    for i in range(requests):
        sent = clock + rng.randrange(0, 2_000_000)
        ttft = int(rng.lognormvariate(0, 0.35) * (20 + 3 * kinds + 6 * conc) * slow * 1e6)
        record = RequestRecord(index=i, prefix_id=i % kinds, intended_ns=sent, sent_ns=sent)
        if rng.random() < FAILED_SHARE:
            record.error_kind, record.error = ErrorKind.TRUNCATED, "synthetic"
            record.error_ns = record.end_ns = sent + ttft // 2
        else:
            record.first_chunk_ns = record.first_token_ns = sent + ttft
            record.token_ns = [sent + ttft + t * 8_000_000 for t in range(OUTPUT_TOKENS)]
            record.end_ns = record.token_ns[-1] + 100_000
            record.prompt_tokens, record.completion_tokens = 1000, OUTPUT_TOKENS
            record.cached_tokens = int(1000 * (1 - kinds / 30))
            record.finish_reason = "length"
        records.append(record)
        clock = sent + (record.end_ns - sent) // conc
    return records, max(r.end_ns or 0 for r in records)


def synthetic_results(folder: Path, slow: float, requests: int, seed: int) -> None:
    """Write a seed-size results folder (summary.json, result.json, requests.parquet, ...,
    incidents.json) with synthetic requests; B uses `slow` > 1."""
    rng = random.Random(seed)
    config = LoadConfig(
        prefix_kinds=list(SEED_KINDS),
        concurrency=list(SEED_CONCURRENCY),
        repetitions=SEED_REPETITIONS,
        requests_per_run=requests,
    )
    started_at = datetime(2026, 1, 1, tzinfo=UTC)
    clock_ns = 10**12
    runs, summaries = [], []
    grid = itertools.product(SEED_KINDS, SEED_CONCURRENCY, range(1, SEED_REPETITIONS + 1))
    for kinds, conc, rep in grid:
        run_start = started_at + timedelta(seconds=(clock_ns - 10**12) / 1e9)
        records, end_ns = _run_records(rng, kinds, conc, requests, clock_ns, slow)
        summary = summarize_run(records, prefix_kinds=kinds, concurrency=conc, repetition=rep)
        finished = started_at + timedelta(seconds=(end_ns - 10**12) / 1e9)
        summary = summary.model_copy(update={"started_at": run_start, "finished_at": finished})
        summaries.append(summary)
        runs.append(MeasuredRun(summary, [], records_frame(kinds, conc, rep, records)))
        clock_ns = end_ns + 500_000_000
    points = [
        summarize_point([s for s in summaries if (s.prefix_kinds, s.concurrency) == (k, c)])
        for k, c in itertools.product(SEED_KINDS, SEED_CONCURRENCY)
    ]
    windows = [w for w in (run.window() for run in summaries) if w is not None]
    result = GridResult(
        url="http://127.0.0.1:8000",
        model="Qwen/Qwen3-0.6B",
        config=config,
        token_count_source="synthetic",
        started_at=started_at,
        finished_at=started_at + timedelta(seconds=(clock_ns - 10**12) / 1e9),
        points=points,
        runs=summaries,
        errors_by_kind={},
        first_errors=[],
        first_failure_at=None,
        warnings=[],
        incidents=[_oom_kill(windows[len(windows) // 2], started_at, windows)],
    )
    settings = grid_settings(result.url, result.model, config, None)
    ResultsFolder(folder, settings, resume=False).write_grid(result, runs)


def _oom_kill(window: RunWindow, started_at: datetime, windows: list[RunWindow]) -> Incident:
    """A prefill worker OOMKilled 1 s into `window`."""
    incident = Incident(
        source="simulation",
        component="prefill",
        instance="prefill-0",
        kind="terminated",
        reason="OOMKilled",
        exit_code=137,
        at=window.started_at + timedelta(seconds=1),
    )
    return placed(incident, started_at, windows)


def _plotly_figure(figure: Figure) -> go.Figure:
    rows = -(-len(figure.panels) // figure.columns)
    fig = make_subplots(
        rows=rows, cols=figure.columns, subplot_titles=[p.title for p in figure.panels]
    )
    for n, panel in enumerate(figure.panels):
        row, col = n // figure.columns + 1, n % figure.columns + 1
        for s in panel.series:
            color = FAILURE_COLOR if s.color < 0 else PALETTE[s.color % len(PALETTE)]
            mode = (
                "lines+markers"
                if s.style == "line"
                else "lines"
                if s.style == "step"
                else "markers"
            )
            trace = go.Scattergl if s.style in ("points", "failures") else go.Scatter
            fig.add_trace(
                trace(
                    x=s.x, y=s.y, name=s.label, mode=mode,
                    line={"color": color, "dash": "dash" if s.side == "B" else "solid",
                          "shape": "hv" if s.style == "step" else "linear"},
                    marker={"color": color, "size": 4,
                            "symbol": "x" if s.style == "failures" else "circle"},
                ),
                row=row, col=col,
            )  # fmt: skip
        for band in panel.bands:
            fig.add_vrect(
                x0=band.start_s, x1=band.end_s, opacity=0.08, line_width=0, row=row, col=col
            )
        for mark in panel.marks:
            fig.add_vline(x=mark.at_s, line_dash="dot", line_color=FAILURE_COLOR, row=row, col=col)
        fig.update_xaxes(type="log" if panel.log_x else "linear", row=row, col=col)
        fig.update_yaxes(type="log" if panel.log_y else "linear", row=row, col=col)
    fig.update_layout(title=figure.title, height=350 * rows)
    return fig


def write_plotly_report(results: list[LoadedResults], out: Path) -> None:
    """The same figures with plotly, its JavaScript inlined once (no CDN)."""
    parts = [
        _plotly_figure(f).to_html(full_html=False, include_plotlyjs=(i == 0))
        for i, f in enumerate(report_figures(results))
    ]
    out.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                   + "".join(parts) + "</body></html>")  # fmt: skip


def _browser_seconds(html: Path, figures: int) -> float | None:
    """Seconds from opening `html` in headless Chromium to `figures` figures drawn (matplotlib:
    decoded images; plotly: plot containers with their SVG), or None without Chromium."""
    if CHROMIUM is None:
        return None
    from playwright.sync_api import sync_playwright

    ready = (
        "n => [...document.images].filter(i => i.complete && i.naturalWidth > 0).length >= n"
        " || document.querySelectorAll('.js-plotly-plot .main-svg').length >= n"
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        started = time.perf_counter()
        page.goto(html.as_uri())
        page.wait_for_function(ready, arg=figures, timeout=60_000)
        seconds = time.perf_counter() - started
        browser.close()
    return seconds


def main(
    requests: Annotated[int, typer.Option(help="Requests per run.")] = 200,
    repeat: Annotated[int, typer.Option(help="Timed repetitions; the best is shown.")] = 3,
) -> None:
    """Build the synthetic grid, time both renderers, print a table."""
    work = Path(tempfile.mkdtemp(prefix="report-bench-"))
    try:
        folders = [work / "a", work / "b"]
        synthetic_results(folders[0], slow=1.0, requests=requests, seed=1)
        synthetic_results(folders[1], slow=2.5, requests=requests, seed=2)
        table = Table(title=f"report of 2 x 24 runs x {requests} requests")
        columns = ("renderer", "read + write (s)", "its CPU (s)", "HTML (MB)", "browser draw (s)")
        for column in columns:
            table.add_column(column)

        def matplotlib_report(out: Path) -> None:
            write_report([load_results(f) for f in folders], out)

        def plotly_report(out: Path) -> None:
            write_plotly_report([load_results(f) for f in folders], out)

        figures = len(report_figures([load_results(f) for f in folders]))
        for name, render in (
            ("matplotlib (PNG)", matplotlib_report),
            ("plotly (JS)", plotly_report),
        ):
            out = work / f"{name.split()[0]}.html"
            times, cpu = [], []
            for _ in range(repeat):
                started, started_cpu = time.perf_counter(), time.process_time()
                render(out)
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
            browser = _browser_seconds(out, figures)
            table.add_row(
                name,
                f"{min(times):.2f}",
                f"{min(cpu):.2f}",
                f"{out.stat().st_size / 1e6:.2f}",
                "-" if browser is None else f"{browser:.2f}",
            )
        Console().print(table)
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        Console().print(f"load average (1, 5, 15 min): {load} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    typer.run(main)
