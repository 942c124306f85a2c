"""`testbed report`: the plotted numbers equal the results folder's, the page works in a real
headless Chromium, and bad input gets one line.

The results folders come from real grids run against the fault-injecting fake server (some
requests get HTTP 503, some streams are cut after their first token), plus a crafted
incidents.json placed in one run's window. A: 5 ms to the first token, B: 80 ms.
"""

import asyncio
import dataclasses
import json
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fake_openai_server import (
    Close,
    FakeServer,
    Send,
    Sleep,
    Status,
    Step,
    chat_chunk,
    normal_stream,
)
from typer.testing import CliRunner

from loadgen.runner import GridRun, run_grid_async
from measurement.incidents import INCIDENTS_FILE, Incident, describe, placed
from measurement.intervals import ab_comparisons, compare_runs
from measurement.memory import MEMORY_FILE, MemoryRecord, MemorySample, PodMemory
from measurement.results import GridResult, MetricInterval, PointSummary
from outputs.figures import Figure, Series, report_figures, request_times_s
from outputs.folder_reader import REPORT_FILE, load_results
from outputs.html_report import draw, write_folder_reports, write_report
from outputs.tables import verdict_rows
from stackmodel.crossover import crossover, crossover_json
from stackmodel.stacks import load_stack
from testbed.cli import app
from workload.config import LoadConfig

CHROMIUM = shutil.which("chromium")  # Debian's `chromium` package (.ci/run installs it)
SCREENSHOT = Path(__file__).parents[2] / "out" / "test-artifacts" / "report.png"
"""Where the Chromium test keeps its screenshot of the A / B report (git-ignored `out/`)."""

GRID = LoadConfig(
    prefix_kinds=[2, 6],
    concurrency=[1, 3],
    repetitions=2,
    requests_per_run=10,
    warmup_requests=1,
    prompt_tokens=40,
)

A_FIRST_TOKEN_S, B_FIRST_TOKEN_S = 0.005, 0.08
"""How long A's and B's fake servers wait before each first token (s): a floor of every TTFT
they record, whatever the machine's load adds."""


def _handler(first_token_s: float) -> Any:
    def handle(body: dict[str, Any], n: int) -> list[Step]:
        if n % 7 == 3:
            return [Status(503, b'{"error": "no workers"}')]
        if n % 11 == 5:  # cut after the first token: truncated_stream
            return [Sleep(first_token_s), Send(chat_chunk("a", role="assistant")), Close()]
        return [Sleep(first_token_s), *normal_stream(["a", "b", "c"], prompt=100, cached=40)]

    return handle


async def _run(folder: Path, first_token_s: float) -> GridResult:
    async with FakeServer(_handler(first_token_s)) as server:
        return await run_grid_async(GridRun(server.url, "m", GRID, folder, progress=False))


def _incident(result: GridResult) -> Incident:
    window = result.windows()[2]
    at = window.started_at + (window.finished_at - window.started_at) / 2
    raw = Incident(
        source="kubernetes",
        component="prefill",
        instance="prefill-0",
        kind="terminated",
        reason="OOMKilled",
        exit_code=137,
        at=at,
    )
    return placed(raw, result.started_at, result.windows())


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Results folders A and B; A also holds incidents.json with one OOMKill."""
    root = tmp_path_factory.mktemp("results")
    a, b = root / "kv-routing", root / "disagg-same-node"
    result_a = asyncio.run(_run(a, A_FIRST_TOKEN_S))
    asyncio.run(_run(b, B_FIRST_TOKEN_S))
    incident = _incident(result_a)
    (a / INCIDENTS_FILE).write_text(json.dumps([incident.model_dump(mode="json")]))
    return a, b


@pytest.fixture(scope="module")
def figures(folders: tuple[Path, Path]) -> dict[str, Figure]:
    return {f.key: f for f in report_figures([load_results(folder) for folder in folders])}


def _summary(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / "summary.json").read_text())  # type: ignore[no-any-return]


def _requests(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "requests.parquet")


def _ttft_ms(frame: pd.DataFrame) -> pd.Series:
    ok = frame[frame["error_kind"].isna()]
    return (ok["first_token_ns"] - ok["sent_ns"]) / 1e6


def _expected_bars(points: list[dict[str, Any]], field: str) -> list[tuple[float, float]]:
    """A line's error bars as `summary.json` records its points' intervals of `field`: each
    point's (low, high), low = high = the value for one too wide to draw, and none at all when
    every point's is too wide. Which case a grid run hits is its runs' spread, the machine's
    load: the expectation follows what was recorded."""
    wide = [MetricInterval.model_validate(p["intervals"][field]).too_wide() for p in points]
    if all(wide):
        return []
    return [
        (p[field], p[field])
        if too_wide
        else (p["intervals"][field]["low"], p["intervals"][field]["high"])
        for p, too_wide in zip(points, wide, strict=True)
    ]


def test_the_folders_hold_failures_of_two_kinds(folders: tuple[Path, Path]) -> None:
    for folder in folders:
        kinds = set(_requests(folder)["error_kind"].dropna())
        assert kinds == {"http_status", "truncated_stream"}


@pytest.mark.parametrize(
    ("key", "fields"),
    [
        ("ttft", ["ttft_p50_ms", "ttft_p99_ms"]),
        ("throughput", ["requests_per_s", "cached_ratio"]),
    ],
)
def test_grid_figures_plot_the_summary_values(
    figures: dict[str, Figure], folders: tuple[Path, Path], key: str, fields: list[str]
) -> None:
    figure = figures[key]
    assert len(figure.panels) == len(fields)
    drawn = draw(figure).axes
    for ax, panel in zip(drawn, figure.panels, strict=True):
        # a linear grid axis starts at 0: a few tenths of a ms must not look like a big gap
        assert panel.log_y or ax.get_ylim()[0] == 0
    for panel, field in zip(figure.panels, fields, strict=True):
        plotted = {(s.side, s.label): list(zip(s.x, s.y, strict=True)) for s in panel.series}
        bars = {(s.side, s.label): list(zip(s.y_low, s.y_high, strict=True)) for s in panel.series}
        expected, expected_bars = {}, {}
        for side, folder in zip("AB", folders, strict=True):
            for c in GRID.concurrency:
                points = sorted(
                    (p for p in _summary(folder) if p["concurrency"] == c),
                    key=lambda p: p["prefix_kinds"],
                )
                expected[(side, f"{side} c={c}")] = [(p["prefix_kinds"], p[field]) for p in points]
                expected_bars[(side, f"{side} c={c}")] = _expected_bars(points, field)
        assert plotted == expected
        assert bars == expected_bars
        assert panel.x_ticks == (2.0, 6.0)


def test_cdf_plots_every_successful_ttft_per_grid_point(
    figures: dict[str, Figure], folders: tuple[Path, Path]
) -> None:
    figure = figures["ttft-cdf"]
    assert [p.title for p in figure.panels] == ["K=2 c=1", "K=6 c=1", "K=2 c=3", "K=6 c=3"]
    frames = [_requests(folder) for folder in folders]
    for panel in figure.panels:
        kinds, conc = (int(part.split("=")[1]) for part in panel.title.split())
        assert [s.side for s in panel.series] == ["A", "B"]
        for series, frame in zip(panel.series, frames, strict=True):
            point = frame[(frame["prefix_kinds"] == kinds) & (frame["concurrency"] == conc)]
            expected = sorted(_ttft_ms(point))
            assert list(series.x) == pytest.approx(expected)
            assert series.y[-1] == 1.0 and len(series.y) == len(expected)
            assert series.label == f"{series.side} (n={len(expected)})"
            # The summary's samples count the same successful requests.
            samples = next(
                p["samples"]
                for p in _summary(folders["AB".index(series.side)])
                if (p["prefix_kinds"], p["concurrency"]) == (kinds, conc)
            )
            assert samples == len(expected)


def test_b_is_slower_in_the_plotted_medians(figures: dict[str, Figure]) -> None:
    """B's server waits 80 ms before each first token, so every B median is at least that on
    any machine; A's server waits 5 ms, and how far above that A's medians land is the
    machine's load (an A median need not stay under B's)."""
    (p50, _) = figures["ttft"].panels
    by_label = {s.label: s.y for s in p50.series}
    for c in GRID.concurrency:
        assert min(by_label[f"B c={c}"]) >= B_FIRST_TOKEN_S * 1000
        assert min(by_label[f"A c={c}"]) >= A_FIRST_TOKEN_S * 1000


def _series(figure: Figure, style: str) -> list[Series]:
    return [s for s in figure.panels[0].series if s.style == style]


def test_timeline_places_every_request_inside_its_run(
    figures: dict[str, Figure], folders: tuple[Path, Path]
) -> None:
    for side, folder in zip("AB", folders, strict=True):
        figure = figures[f"timeline-{side.lower()}"]
        frame = _requests(folder)
        points = _series(figure, "points")
        assert [s.label for s in points] == ["c=1", "c=3"]
        plotted = sorted(y for s in points for y in s.y)
        assert plotted == pytest.approx(sorted(_ttft_ms(frame)))
        (failed,) = _series(figure, "failures")
        errors = sum(p["errors"] for p in _summary(folder))
        assert len(failed.x) == errors == frame["error_kind"].notna().sum()
        assert failed.label == f"failed ({errors})"
        grid = load_results(folder).grid
        assert grid is not None
        bands = figure.panels[0].bands
        assert [b.label for b in bands] == [
            f"K{r.prefix_kinds} c{r.concurrency} r{r.repetition}" for r in grid.runs
        ]
        # Each request's send time falls inside its own run's window (the warm-up included).
        t_s = request_times_s(frame, grid)
        for i, run in enumerate(grid.runs):
            in_run = (
                (frame["prefix_kinds"] == run.prefix_kinds)
                & (frame["concurrency"] == run.concurrency)
                & (frame["repetition"] == run.repetition)
            )
            assert t_s[in_run].between(bands[i].start_s, bands[i].end_s).all()


def test_timeline_marks_the_incident_where_it_happened(
    figures: dict[str, Figure], folders: tuple[Path, Path]
) -> None:
    (incident,) = load_results(folders[0]).incidents
    (mark,) = figures["timeline-a"].panels[0].marks
    assert incident.t_s is not None
    assert mark.at_s == incident.t_s
    assert mark.label == describe(incident)
    assert "prefill-0 OOMKilled (exit 137)" in mark.label and "into K=2 c=3" in mark.label
    third_run = figures["timeline-a"].panels[0].bands[2]
    assert third_run.start_s < mark.at_s < third_run.end_s
    assert figures["timeline-b"].panels[0].marks == ()


def test_requests_are_found_in_per_run_folders(folders: tuple[Path, Path], tmp_path: Path) -> None:
    """Without a top-level requests.parquet (a grid cut off before rewriting it), the rows
    come from the per-run `runs/<run>/requests.parquet` files that loadgen wrote."""
    copy = shutil.copytree(folders[0], tmp_path / "cut")
    frame = _requests(copy)
    (copy / "requests.parquet").unlink()
    assert len(list((copy / "runs").glob("*/requests.parquet"))) == 8
    loaded = load_results(copy).requests
    key = ["prefix_kinds", "concurrency", "repetition", "index"]
    assert len(loaded) == len(frame)
    assert loaded.sort_values(key)["sent_ns"].tolist() == frame.sort_values(key)["sent_ns"].tolist()


def test_report_command_writes_html_and_pngs(folders: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp" / "report.html"
    args = ["report", str(folders[0]), str(folders[1]), "--out", str(out), "--png"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert html.count('<figure class="plot"') == 6
    # No script and nothing fetched from elsewhere (a server URL in a warning is only text).
    assert "<script" not in html and not re.search(r'(src|href)="https?://', html)
    assert "prefill-0 OOMKilled (exit 137)" in html
    assert "kv-routing vs disagg-same-node" in html
    for key in ("ttft", "throughput", "ttft-cdf", "timeline-a", "timeline-b"):
        png = out.with_name(f"report-{key}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
        assert f"report-{key}.png" in result.output


def test_seed_table_cells_are_a_over_b(folders: tuple[Path, Path], tmp_path: Path) -> None:
    out, _ = write_report([load_results(f) for f in folders], tmp_path / "r.html")
    html = out.read_text()
    a, b = (
        {(p["prefix_kinds"], p["concurrency"]): p for p in _summary(folder)} for folder in folders
    )
    for key in a:
        cell = f"<td>{a[key]['errors']} / {b[key]['errors']}</td>"
        assert cell in html
        assert f"<td>{a[key]['requests_per_s']:.1f} / {b[key]['requests_per_s']:.1f}</td>" in html
    # Each point's ratio is B's median run over A's and its verdict is Welch's t on the TTFT
    # p50s its runs recorded (runs.csv): how far apart the runs land, and so the verdict, is the
    # machine's load (x7.46, interval 0.24-255.07, with two busy loops beside the run).
    verdicts = html.split('<h2 id="verdicts">B / A: interval and verdict</h2>')[1]
    rows = verdicts.split("</table>")[0].split("<tr>")[2:]
    ttft = [r for r in rows if "<td>TTFT p50</td>" in r]
    assert len(ttft) == len(a)
    runs = [pd.read_csv(folder / "runs.csv") for folder in folders]
    for row in ttft:
        kinds, concurrency = (int(cell) for cell in re.findall(r"<td>(\d+)</td>", row)[:2])
        ra, rb = (
            r[(r["prefix_kinds"] == kinds) & (r["concurrency"] == concurrency)]["ttft_p50_ms"]
            for r in runs
        )
        found = compare_runs("ttft_p50_ms", ra.tolist(), rb.tolist())
        assert found.ratio == pytest.approx(rb.median() / ra.median())
        assert f"<td>x{found.ratio:.2f}</td>" in row and f"<td>{found.verdict}</td>" in row
    assert "Welch&#39;s t on the runs&#39; logs" in verdicts


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, "error: no summary.json in {d} or below"),
        (lambda d: (d / "notes.txt").write_text("hello"), "error: no summary.json in {d} or below"),
        (
            lambda d: (d / "summary.json").write_text('{"a": 1}'),
            "error: {d}/summary.json holds a dict, not a list of grid points",
        ),
        (
            lambda d: (d / "summary.json").write_text("[]"),
            "error: {d}/summary.json holds no grid points (did the grid run?)",
        ),
    ],
    ids=["empty", "foreign", "not-a-summary", "no-points"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make: Any, message: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    make(folder)
    result = CliRunner().invoke(app, ["report", str(folder), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(d=folder))
    assert not (tmp_path / "r.html").exists()


def test_report_opens_in_headless_chromium(folders: tuple[Path, Path], tmp_path: Path) -> None:
    """No console error, every figure decoded and drawn, the grid table and the verdict table
    there, one row per grid point and one per verdict; the screenshot is kept at `SCREENSHOT`."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    results = [load_results(f) for f in folders]
    out, _ = write_report(results, tmp_path / REPORT_FILE)
    verdicts = verdict_rows(ab_comparisons(results[0].points, results[1].points))
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        page.goto(out.as_uri())
        page.wait_for_load_state("load")
        drawn = page.eval_on_selector_all(
            "figure.plot img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])"
        )
        keys = page.eval_on_selector_all("figure.plot", "fs => fs.map(f => f.dataset.key)")
        rows = page.eval_on_selector_all(
            "table.seed:not(.verdicts):not(.extra) tbody tr", "r => r.length"
        )
        verdict_rows_shown = page.eval_on_selector_all("table.verdicts tbody tr", "r => r.length")
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)
        browser.close()
    assert problems == []
    assert keys == ["ttft", "throughput", "tails", "ttft-cdf", "timeline-a", "timeline-b"]
    assert len(drawn) == 6 and all(done and width > 600 for done, width in drawn)
    assert rows == len(GRID.prefix_kinds) * len(GRID.concurrency)
    assert verdict_rows_shown == len(verdicts) > 0  # both sides ran 2 repetitions a point
    assert SCREENSHOT.stat().st_size > 10_000


def test_one_result_gets_its_own_table_and_one_timeline(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    loaded = load_results(folders[1])
    figures = report_figures([loaded])
    assert [f.key for f in figures] == ["ttft", "throughput", "tails", "ttft-cdf", "timeline-a"]
    assert {s.side for f in figures for p in f.panels for s in p.series} == {"A"}
    out, _ = write_report([loaded], tmp_path / "one.html")
    html = out.read_text()
    assert "Load report: disagg-same-node</h1>" in html and " / " not in html.split("<h2")[1]
    for p in _summary(folders[1]):  # 2 repetitions: the interval on a second line
        interval = MetricInterval.model_validate(p["intervals"]["requests_per_s"])
        # runs far apart (a busy machine) make an interval too wide to print
        second = (
            f"too wide ({len(interval.runs)} runs)"
            if interval.too_wide()
            else f"{interval.low:.1f}-{interval.high:.1f}"
        )
        cell = f"<td>{p['requests_per_s']:.1f}<br><small>{second}</small></td>"
        assert cell in html
    assert "interval and verdict" not in html  # one result: nothing to compare


def test_folder_reports_and_the_comparison(folders: tuple[Path, Path], tmp_path: Path) -> None:
    """What `testbed simulate A B` writes: a report per stack folder and the A / B one."""
    copies = [shutil.copytree(folder, tmp_path / folder.name) for folder in folders]
    written = write_folder_reports(copies, tmp_path / REPORT_FILE)
    assert written == [copy / REPORT_FILE for copy in copies] + [tmp_path / REPORT_FILE]
    assert "Load report: kv-routing</h1>" in written[0].read_text()
    assert "Load report: disagg-same-node</h1>" in written[1].read_text()
    assert "Load report: kv-routing vs disagg-same-node</h1>" in written[2].read_text()


def test_one_result_marks_the_grid_point_that_had_the_incident(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    out, _ = write_report([load_results(folders[0])], tmp_path / "a.html")
    html = out.read_text()
    assert html.count("<td>3 !</td>") == 1  # K=2 c=3, the third run's point
    assert "<tr><td>2</td><td>3 !</td>" in html


def test_summary_json_alone_still_gives_the_grid_figures(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """Every file but summary.json is optional: the figures that need requests are empty."""
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(folders[0] / "summary.json", alone / "summary.json")
    loaded = load_results(alone)
    assert (loaded.grid, loaded.incidents, loaded.requests.empty) == (None, [], True)
    figures = {f.key: f for f in report_figures([loaded])}
    assert len(figures["ttft"].panels[0].series) == len(GRID.concurrency)
    assert all(p.series == () for p in figures["ttft-cdf"].panels)
    assert figures["timeline-a"].panels[0].series == ()
    out, _ = write_report([loaded], tmp_path / "alone.html")
    assert out.read_text().count('<figure class="plot"') == 5


def test_a_over_b_says_which_load_settings_differ(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """B measured with other prompts (promptTokens 80, prefixShare 0.5): the report says so
    under the table, with the metrics that are not comparable; same settings: nothing said."""
    a, b = (load_results(f) for f in folders)
    assert a.grid is not None and b.grid is not None
    same, _ = write_report([a, b], tmp_path / "same.html")
    assert 'class="notes comparability"' not in same.read_text()
    other = b.grid.config.model_copy(update={"prompt_tokens": 80, "prefix_share": 0.5})
    b = dataclasses.replace(b, grid=b.grid.model_copy(update={"config": other}))
    out, _ = write_report([a, b], tmp_path / "differ.html")
    html = out.read_text()
    assert (
        "<li>Load settings differ (kv-routing / disagg-same-node): promptTokens 40 / 80, "
        f"prefixShare {a.grid.config.prefix_share} / 0.5.</li>"
    ) in html
    assert "<li>- prefixShare: TTFT p50/p99, cached ratio not comparable (" in html


def test_a_simulated_result_beside_a_measured_one_is_warned_in_the_report(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = (load_results(f) for f in folders)
    assert b.grid is not None
    b = dataclasses.replace(b, grid=b.grid.model_copy(update={"simulated": "testbed simulate"}))
    html = write_report([a, b], tmp_path / "mixed.html")[0].read_text()
    assert (
        "<li>warning: disagg-same-node is SIMULATED (testbed simulate); kv-routing was measured "
        "against a server."
    ) in html


def test_report_of_a_stack_has_its_crossover(folders: tuple[Path, Path], tmp_path: Path) -> None:
    """A folder whose stack.json names a stack of stacks/ gets that stack's crossover figure
    (`--png` writes it too); one naming a stack that is gone gets a note and no figure."""
    seed, gone = tmp_path / "seed", tmp_path / "gone"
    for folder, stack in ((seed, "disagg-same-node"), (gone, "renamed-away")):
        shutil.copytree(folders[0], folder)
        (folder / "stack.json").write_text(json.dumps({"stack": stack}))
    out = tmp_path / "r.html"
    args = ["report", str(seed), str(gone), "--out", str(out), "--png"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert html.count('<figure class="plot"') == 7  # the 6 of two results, and the seed's
    assert '<h2 id="crossover-disagg-same-node">disagg-same-node: where disaggregation pays' in html
    assert "crossover: never on any link: 114,688 B of KV per uncached prompt token" in html
    assert "stacks/Pulumi.disagg-same-node.yaml as it is now" in html
    png = out.with_name("r-crossover-disagg-same-node.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert "note: no crossover figure for renamed-away in the report: stack 'renamed-away'" in (
        " ".join(result.output.split())
    )
    # A simulated folder's recorded crossover is drawn, not the stack file's as it is now.
    (gone / "crossover.json").write_text(crossover_json(crossover(load_stack("kv-routing"))))
    result = CliRunner().invoke(app, ["report", str(gone), "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "crossover: disaggregation pays on links above 13.9 GB/s" in html
    assert "Drawn from the config renamed-away was simulated with (crossover.json)" in html


def test_each_result_has_its_colour_and_each_concurrency_its_line_style(
    figures: dict[str, Figure], folders: tuple[Path, Path]
) -> None:
    for key in ("ttft", "throughput", "tails"):
        for panel in figures[key].panels:
            if not panel.series:  # e.g. no ITL: one token per response at concurrency 1
                continue
            assert {(s.side, s.color) for s in panel.series} == {("A", 0), ("B", 1)}
            levels = sorted(GRID.concurrency)
            assert {(s.label.split("=")[1], s.dash) for s in panel.series} == {
                (str(c), levels.index(c)) for c in levels
            }
    for panel in figures["ttft-cdf"].panels:
        assert [(s.side, s.color) for s in panel.series] == [("A", 0), ("B", 1)]
    # The legend stands outside the panels: one for the figure, none over an axes.
    drawn = draw(figures["ttft"])
    assert len(drawn.legends) == 1 and all(ax.get_legend() is None for ax in drawn.axes)


def test_the_tails_figure_plots_the_summary_p99s(
    figures: dict[str, Figure], folders: tuple[Path, Path]
) -> None:
    fields = ["itl_p50_ms", "itl_p99_ms", "tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms"]
    panels = figures["tails"].panels
    assert [p.title for p in panels] == ["ITL p50", "ITL p99", "TPOT p99", "E2E p50", "E2E p99"]
    for panel, field in zip(panels, fields, strict=True):
        plotted = {s.label: list(zip(s.x, s.y, strict=True)) for s in panel.series}
        for side, folder in zip("AB", folders, strict=True):
            for c in GRID.concurrency:
                points = sorted(
                    (p for p in _summary(folder) if p["concurrency"] == c),
                    key=lambda p: p["prefix_kinds"],
                )
                expected = [(p["prefix_kinds"], p[field]) for p in points if p[field] is not None]
                assert plotted.get(f"{side} c={c}", []) == expected


def test_a_one_point_grid_is_one_bar_per_result_and_three_results_share_a_report(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    loaded = [load_results(f) for f in (*folders, folders[0])]
    one = [dataclasses.replace(r, points=r.points[:1]) for r in loaded]
    (p50, _) = {f.key: f for f in report_figures(one)}["ttft"].panels
    assert [s.style for s in p50.series] == ["bar"] * 3
    assert [(s.side, s.color, s.x) for s in p50.series] == [
        ("A", 0, (0.0,)),
        ("B", 1, (1.0,)),
        ("C", 2, (2.0,)),
    ]
    assert [s.y[0] for s in p50.series] == [r.points[0].ttft_p50_ms for r in one]
    assert p50.x_tick_labels == tuple(f"{s} {r.name}" for s, r in zip("ABC", one, strict=True))
    out, _ = write_report(loaded, tmp_path / "three.html")
    html = out.read_text()
    assert html.count('<figure class="plot"') == 7  # 4 grid-wide, 3 timelines
    assert "<h2>TTFT p99 ms</h2>" in html and "<th>C kv-routing</th>" in html


def test_report_with_an_slo_judges_each_point_and_draws_goodput(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "slo.html"
    args = ["report", *map(str, folders), "--out", str(out), "--slo", "ttft_p99_ms=60000"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert '<h2 id="goodput">Against the SLO</h2>' in html
    assert "<h2>Against the SLO: B / A</h2>" in html and "<td>met / met</td>" in html
    bad = CliRunner().invoke(app, [*args[:-1], "ttft_p99=60000"])
    assert bad.exit_code == 2 and "did you mean ttft_p99_ms?" in bad.output


def test_report_without_out_writes_beside_its_results_not_the_working_folder(
    folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As typed: `testbed report A B` from the project folder left report.html in it."""
    a, b = (tmp_path / "sim" / "a", tmp_path / "sim" / "b")
    for source, target in zip(folders, (a, b), strict=True):
        shutil.copytree(source, target)
    monkeypatch.chdir(tmp_path)
    pair = CliRunner().invoke(app, ["report", str(a), str(b)])
    assert pair.exit_code == 0, pair.output
    assert (tmp_path / "sim" / "report-a-vs-b.html").is_file()
    one = CliRunner().invoke(app, ["report", str(b)])  # held out: one folder
    assert one.exit_code == 0, one.output
    assert (b / "report.html").is_file()
    assert not (tmp_path / "report.html").exists()


def test_a_too_wide_interval_is_left_out_of_the_figure_and_named_in_its_caption(
    folders: tuple[Path, Path],
) -> None:
    """As typed: a 2-run goodput interval 0-8401 req/s for 0.1 set the y axis to thousands;
    such an error bar is left out (the caption names the point), the others are drawn. The
    intervals are set here, not the grid run's (whose spread is the machine's load): TTFT p50
    at c=1 is too wide at K=2 only (its bar there is the value alone), at c=3 too wide at both
    K (no bars on that line); every TTFT p99 interval is narrow."""
    loaded = load_results(folders[0])
    wide_at = {(2, 1), (2, 3), (6, 3)}

    def crafted(p: PointSummary) -> PointSummary:
        p50, p99 = p.ttft_p50_ms, p.ttft_p99_ms
        assert p50 is not None and p99 is not None
        narrow = MetricInterval(runs=[p50, p50], low=0.9 * p50, high=1.1 * p50)
        wide = MetricInterval(runs=[p50, p50], low=0.1, high=8401)
        intervals = {
            **p.intervals,
            "ttft_p50_ms": wide if (p.prefix_kinds, p.concurrency) in wide_at else narrow,
            "ttft_p99_ms": MetricInterval(runs=[p99, p99], low=0.9 * p99, high=1.1 * p99),
        }
        return p.model_copy(update={"intervals": intervals})

    points = [crafted(p) for p in loaded.points]
    drawn = report_figures([dataclasses.replace(loaded, points=points)])
    figure = {f.key: f for f in drawn}["ttft"]
    line = {s.label: s for s in figure.panels[0].series}
    k2, k6 = (
        next(p for p in loaded.points if (p.prefix_kinds, p.concurrency) == (k, 1)) for k in (2, 6)
    )
    assert k2.ttft_p50_ms is not None and k6.ttft_p50_ms is not None
    assert line["A c=1"].y_low == (k2.ttft_p50_ms, 0.9 * k6.ttft_p50_ms)
    assert line["A c=1"].y_high == (k2.ttft_p50_ms, 1.1 * k6.ttft_p50_ms)
    assert (line["A c=3"].y_low, line["A c=3"].y_high) == ((), ())
    for kinds, concurrency in wide_at:
        assert f"A K={kinds} c={concurrency}, 2 runs" in figure.caption
    assert "TTFT p50 at A K=" in figure.caption and "TTFT p99 at" not in figure.caption
    # held out: the TTFT p99 panel kept every bar, and nothing is named without a wide one
    for p99 in figure.panels[1].series:
        assert p99.y_high == tuple(1.1 * y for y in p99.y)
    narrow = [p.model_copy(update={"intervals": {}}) for p in loaded.points]
    plain = report_figures([dataclasses.replace(loaded, points=narrow)])
    assert "too wide" not in {f.key: f for f in plain}["ttft"].caption


def test_the_memory_figure_draws_each_pod_with_its_limit_floor_and_oom_kill(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    """memory.json as the load step writes it (loadstep.memory): prefill-0's working set rises
    toward its limit over the grid, above its group's floor; it was OOMKilled in the third run
    (A's incidents.json). A pod without a reading gets no panel."""
    folder = Path(shutil.copytree(folders[0], tmp_path / "kv-routing"))
    loaded = load_results(folder)
    assert loaded.grid is not None
    start = loaded.grid.started_at
    gib = 2**30
    offsets = [0.0, 0.5, 1.0]
    record = MemoryRecord(
        interval_s=1.0,
        pods=[
            PodMemory(
                pod="prefill-0",
                component="prefill",
                limit_bytes=4 * gib,
                floor_bytes=3 * gib,
                window="15s",
                samples=[
                    MemorySample(at=start + timedelta(seconds=s), bytes=int((2 + 2 * s) * gib))
                    for s in offsets
                ],
            ),
            PodMemory(pod="decode-0", component="decode"),
        ],
    )
    (folder / MEMORY_FILE).write_text(record.model_dump_json())
    loaded = load_results(folder)
    figures = {f.key: f for f in report_figures([loaded])}
    assert list(figures)[-2:] == ["timeline-a", "memory-a"]
    (panel,) = figures["memory-a"].panels
    assert panel.title == "A: prefill-0 (prefill)"
    working, limit, floor = panel.series
    assert (working.x, working.y) == (tuple(offsets), (2.0, 3.0, 4.0))
    assert (limit.label, limit.style, limit.y) == ("limit", "level", (4.0,))
    assert (floor.label, floor.style, floor.y) == ("floor (sizing)", "level", (3.0,))
    (incident,) = loaded.incidents
    (mark,) = panel.marks
    assert (mark.at_s, mark.label) == (incident.t_s, describe(incident))
    assert panel.bands == figures["timeline-a"].panels[0].bands
    drawn = draw(figures["memory-a"]).axes[0]
    levels = {line.get_label(): np.asarray(line.get_ydata()).tolist() for line in drawn.lines}
    assert (levels["limit"], levels["floor (sizing)"]) == ([4.0, 4.0], [3.0, 3.0])
    out, _ = write_report([loaded], tmp_path / "memory.html")
    assert "Worker memory of A (kv-routing)" in out.read_text()
