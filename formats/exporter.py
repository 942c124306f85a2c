"""A finished results folder read for export, each grid point's requests pooled over its
repetitions, and the export written whole or not at all.

The formats (`formats.benchmark_report`, `formats.aiperf_export`) turn an `ExportSource` into
files (relative name -> text); `write_export` puts them in place. A grid point in another tool's
format is one run of that tool: its requests are the point's requests over every repetition
(`PointData`), its rates those of each repetition (`RunSummary`), so a distribution's count is
requests, a rate's the repetitions.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from measurement.percentile import percentile
from measurement.record import RequestRecord
from measurement.results import GridResult, PointSummary, RunSummary
from metrics.registry import METRICS
from outputs.folder_reader import load_results
from outputs.folder_writer import REQUESTS_FILE, RESULT_FILE, runs_of_frame

TOOL = "dynamo-testbed"
"""The tool that measured (or simulated) the results, as exports name it."""


class ExportError(ValueError):
    """The folder cannot be exported, or the export cannot be written: one line naming the
    folder or path and the fix."""


@dataclass(frozen=True, slots=True)
class Distribution:
    """Values of one figure (in the unit of the figure they were taken from): ``count``, ``sum``,
    ``mean``, ``min``, ``max``, ``std`` (population standard deviation, as numpy's ``std``),
    and ``p(q)`` (`measurement.percentile.percentile`: linear between closest ranks)."""

    values: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.values)

    @property
    def sum(self) -> float:
        return math.fsum(self.values)

    @property
    def mean(self) -> float:
        return self.sum / self.count

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def std(self) -> float:
        mean = self.mean
        return math.sqrt(math.fsum((v - mean) ** 2 for v in self.values) / self.count)

    def p(self, q: float) -> float:
        """The q-th percentile (0..100)."""
        value = percentile(self.values, q)
        assert value is not None  # a Distribution is never empty (`distribution`)
        return value


def distribution(values: Sequence[float | None]) -> Distribution | None:
    """The values that are present as a `Distribution`; None when none is."""
    present = tuple(float(v) for v in values if v is not None)
    return Distribution(present) if present else None


@dataclass(frozen=True)
class PointData:
    """One grid point: its summary, its repetitions' `RunSummary` rows (repetition order) and
    their requests (`records`, every request measured, failed ones included)."""

    point: PointSummary
    runs: tuple[RunSummary, ...]
    records: tuple[RequestRecord, ...]

    @property
    def name(self) -> str:
        """``k2-c4``: as the point's runs are named (`outputs.folder_writer.run_name`) less the
        repetition."""
        return f"k{self.point.prefix_kinds}-c{self.point.concurrency}"

    @property
    def good(self) -> list[RequestRecord]:
        """The successful requests."""
        return [r for r in self.records if r.ok]

    def latency(self, key: str) -> Distribution | None:
        """Registry latency `key`'s values (ms) over the successful requests: one per request
        (`Metric.per_request`), or one per token gap pooled over the requests
        (`Metric.per_token`); None when no request has one."""
        metric = METRICS[key]
        if metric.per_request is not None:
            return distribution([metric.per_request(r) for r in self.good])
        if metric.per_token is None:
            raise ValueError(f"{key} is not a per-request latency")
        return distribution([v for r in self.good for v in metric.per_token(r)])

    def tokens(self, field: str) -> Distribution | None:
        """The successful requests' usage field `field` (``prompt_tokens``, ``completion_tokens``:
        tokens, as the server counted them)."""
        return distribution([getattr(r, field) for r in self.good])

    def per_run(self, field: str) -> Distribution | None:
        """`RunSummary` field `field` (a rate, ``requests_per_s``, ``output_tokens_per_s``),
        one value per repetition."""
        return distribution([getattr(run, field) for run in self.runs])

    @property
    def duration_s(self) -> float:
        """The repetitions' measured time, summed (s)."""
        return math.fsum(run.duration_s for run in self.runs)

    @property
    def errors(self) -> int:
        """Requests that failed."""
        return sum(1 for r in self.records if not r.ok)


@dataclass(frozen=True)
class ExportSource:
    """A finished results folder: `name` the stack (`outputs.folder_reader.LoadedResults.name`),
    `grid` its `result.json`, `points` in the grid's order, `simulated` what simulated it (None:
    measured against a server; `GridResult.simulated`)."""

    name: str
    grid: GridResult
    points: tuple[PointData, ...]

    @property
    def simulated(self) -> str | None:
        return self.grid.simulated


def expected_runs(grid: GridResult) -> int:
    """The runs a finished grid holds: every point (prefix kinds x concurrency) times the
    repetitions."""
    config = grid.config
    return len(config.prefix_kinds) * len(config.concurrency) * config.repetitions


def read_source(folder: Path) -> ExportSource:
    """The results folder `folder` (of `testbed load --out`, `testbed simulate` or the load
    step) read for export.

    Raises `ExportError` (one line, the fix named) when `folder` is not a results folder, or
    is one half-written: without `result.json` or `requests.parquet`, or with fewer runs than
    its grid has (cut off, or still being written).
    """
    if not folder.is_dir():
        raise ExportError(
            f"{folder} is not a folder: give a results folder (`testbed load --out`, "
            "`testbed simulate`'s OUT/STACK, the load step's load.resultsDir/STACK/TIME)"
        )
    try:
        loaded = load_results(folder)
    except (FileNotFoundError, ValueError) as exc:
        raise ExportError(str(exc)) from None
    finish = "finish it (the same command with --resume) and export again"
    if loaded.grid is None:
        raise ExportError(f"{folder} has no {RESULT_FILE}: the grid was cut off; {finish}")
    runs_done, runs_needed = len(loaded.grid.runs), expected_runs(loaded.grid)
    if runs_done < runs_needed:
        raise ExportError(
            f"{folder} holds {runs_done} of its grid's {runs_needed} runs (cut off, or still "
            f"running); {finish}"
        )
    if loaded.requests.empty:
        raise ExportError(
            f"{folder} has no {REQUESTS_FILE} (each request's record): export a folder that "
            "testbed load, testbed simulate or the load step wrote whole"
        )
    by_run = runs_of_frame(loaded.requests)
    points = []
    for point in loaded.grid.points:
        coordinates = (point.prefix_kinds, point.concurrency)
        runs = tuple(
            sorted(
                (r for r in loaded.grid.runs if (r.prefix_kinds, r.concurrency) == coordinates),
                key=lambda r: r.repetition,
            )
        )
        records = tuple(
            record for run in runs for record in by_run.get((*coordinates, run.repetition), [])
        )
        points.append(PointData(point, runs, records))
    return ExportSource(loaded.name, loaded.grid, tuple(points))


def write_export(out: Path, files: Mapping[str, str]) -> list[Path]:
    """Write `files` (path relative to `out` -> text) as the folder `out`, whole or not at
    all: into a temporary folder beside it, renamed to `out` once every file is written.
    Returns the files' paths. Raises `ExportError` when `out` exists (nothing is replaced)."""
    if out.exists():
        raise ExportError(f"--out {out} exists: give a new folder, or remove that one first")
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        for name, text in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, newline="")  # as given: a CSV's \r\n stays
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return [out / name for name in files]
