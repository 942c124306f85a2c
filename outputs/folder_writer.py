"""A grid's result folder, written run by run so that nothing finished is lost.

Top level (the whole grid so far; rewritten after every run, each file replaced atomically):
- `summary.json`: a list, one object per grid point (`PointSummary` fields; a simulated or an
  imported grid's points also say by what, `simulated` / `imported`).
- `result.json`: the whole `GridResult` (settings, per-run rows, errors, warnings).
- `runs.csv`: the per-run table (`RunSummary` fields; errors by kind, warnings and lower
  bounds as JSON).
- `requests.parquet`: one row per measured request: grid coordinates, the raw monotonic
  nanosecond times (`intended_ns`, `sent_ns`, ..., `token_ns` as a list), usage, error.
- `table.txt`: the seed-style table as printed, grid points with an incident marked, then the
  tails, where the points were judged against an SLO the SLO table, and the TTFT phases table
  (`outputs.tables.phases_table`) where the server timed requests.
- `incidents.json`: `GridResult.incidents` (`measurement.incidents`), [] when none.

Per run, `runs/k<K>-c<C>-r<R>/`: `requests.parquet` (that run's rows), then `run.json`
(`StoredRun`: the settings it was measured with, how prompts were sized, its `RunSummary` and
first errors). `run.json` is written last, so a run folder holding it is complete; a run cut
off by Ctrl-C or a crash leaves no `run.json` and is measured again by `--resume`.

Every file is written to a temporary name in the same folder and renamed over the old one
(`os.replace`, atomic on POSIX), so a reader sees the previous or the new version, never half
of one: a results folder read while a grid runs always parses.
"""

import dataclasses
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ValidationError

from measurement.errors import ErrorKind
from measurement.incidents import INCIDENTS_FILE, Incident
from measurement.record import UNKEPT_FIELDS, RequestRecord
from measurement.results import ErrorSample, GridResult, RunSummary
from outputs.resume import ResumeError, differences, fingerprint
from outputs.slo_tables import slo_table
from outputs.tables import SUMMARY_FILE, phases_table, seed_table, table_text, tail_table
from workload.config import LoadConfig

RESULT_FILE = "result.json"
RUNS_FILE = "runs.csv"
REQUESTS_FILE = "requests.parquet"
TABLE_FILE = "table.txt"
RUNS_DIR = "runs"
RUN_FILE = "run.json"
# Grid axes: a resumed grid may add or drop points and repetitions; every other setting must
# match the runs already in the folder.
_AXES = ("prefixKinds", "concurrency", "repetitions")
# Settings that judge a measurement without changing it: not part of a run's fingerprint.
_JUDGING = ("slo",)


class PromptSizing(BaseModel):
    """How a grid sized its prompts (`loadgen.prompts`): the sizer's `source`, and for a word
    sizer its tokens per word, so a resumed grid builds the very same prompts without
    calibrating again."""

    source: str
    tokens_per_word: float | None = None


class StoredRun(BaseModel):
    """`runs/<run>/run.json`: one complete run. `settings` are `grid_settings` (fingerprinted
    as `fingerprint`); `errors` are the run's first failed requests, earliest first."""

    fingerprint: str
    settings: dict[str, Any]
    sizing: PromptSizing
    summary: RunSummary
    errors: list[ErrorSample]


@dataclass
class MeasuredRun:
    """One finished run as the runner keeps it: its summary, first errors (earliest first)
    and its request rows (`records_frame`)."""

    summary: RunSummary
    errors: list[ErrorSample]
    frame: pd.DataFrame

    @property
    def key(self) -> tuple[int, int, int]:
        """(prefix kinds, concurrency, repetition)."""
        s = self.summary
        return s.prefix_kinds, s.concurrency, s.repetition


def run_name(prefix_kinds: int, concurrency: int, repetition: int) -> str:
    """The run's folder under `runs/`, e.g. "k2-c4-r1"."""
    return f"k{prefix_kinds}-c{concurrency}-r{repetition}"


_RECORD_FIELDS = tuple(
    field.name for field in dataclasses.fields(RequestRecord) if field.name not in UNKEPT_FIELDS
)


def records_frame(
    prefix_kinds: int, concurrency: int, repetition: int, records: Sequence[RequestRecord]
) -> pd.DataFrame:
    """One row per request with the run's `prefix_kinds`, `concurrency`, `repetition` and every
    `RequestRecord` field (times in monotonic ns; `error_kind` as its string value). Built
    column by column (no per-record dict: this runs once per request of every run)."""
    columns: dict[str, list[object]] = {
        "prefix_kinds": [prefix_kinds] * len(records),
        "concurrency": [concurrency] * len(records),
        "repetition": [repetition] * len(records),
    }
    for name in _RECORD_FIELDS:
        columns[name] = [getattr(record, name) for record in records]
    # As text before pandas sees it: a column mixing None with enum members would turn None
    # into NaN, and str(NaN) into the string "nan".
    columns["error_kind"] = [None if kind is None else str(kind) for kind in columns["error_kind"]]
    return pd.DataFrame(columns)


def _cell(value: Any) -> Any:
    """A `requests.parquet` cell as the `RequestRecord` field held it: a missing value (None,
    or the NaN a nullable integer column reads back as) -> None, a float -> int (every numeric
    field of a record is an integer), an array -> list, a NumPy scalar -> its Python value."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float):
        return None if math.isnan(value) else int(value)
    return value


def records_from_frame(frame: pd.DataFrame) -> list[RequestRecord]:
    """The `RequestRecord`s of `requests.parquet` rows (`records_frame`'s inverse, in the
    frame's order): the record's fields are read, the run's coordinates and any other column
    left aside."""
    names = [name for name in _RECORD_FIELDS if name in frame.columns]
    records = []
    for row in frame[names].itertuples(index=False, name=None):
        values: dict[str, Any] = {
            name: _cell(value) for name, value in zip(names, row, strict=True)
        }
        for name in ("token_ns", "chunk_tokens"):
            values[name] = [int(v) for v in values.get(name) or []]
        if values.get("error_kind") is not None:
            values["error_kind"] = ErrorKind(values["error_kind"])
        values["retried"] = bool(values.get("retried"))
        records.append(RequestRecord(**values))
    return records


def runs_of_frame(frame: pd.DataFrame) -> dict[tuple[int, int, int], list[RequestRecord]]:
    """A `requests.parquet` frame's records per run (`outputs.folder_writer.records_from_frame`)."""
    out: dict[tuple[int, int, int], list[RequestRecord]] = {}
    if frame.empty:
        return out
    for key, rows in frame.groupby(["prefix_kinds", "concurrency", "repetition"], sort=True):
        k, c, r = (int(v) for v in key)
        out[(k, c, r)] = records_from_frame(rows)
    return out


def grid_settings(
    url: str, model: str, config: LoadConfig, tokenizer: str | None
) -> dict[str, Any]:
    """What a run's measurement depends on beyond its grid coordinates: the server (`url`, as
    given), `model`, the `tokenizer` option and every `LoadConfig` field (camelCase) except the
    grid axes (prefixKinds, concurrency, repetitions) and the SLO (it judges, not measures)."""
    fields = config.model_dump(mode="json", by_alias=True)
    return {
        "url": url,
        "model": model,
        "tokenizer": tokenizer,
        **{key: value for key, value in fields.items() if key not in (*_AXES, *_JUDGING)},
    }


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write `path` through `write(temporary path)` in the same folder, then rename it over
    `path` (atomic: readers see the old or the new file)."""
    temporary = path.with_name(f".{path.name}.tmp")
    write(temporary)
    os.replace(temporary, path)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path`'s content with `text` atomically (temporary file, then rename)."""
    _replace(path, lambda tmp: tmp.write_text(text))


class ResultsFolder:
    """The result folder of one grid (see the module docstring for its files).

    `ResultsFolder(path, settings, resume=False)` starts a fresh grid there: runs of an
    earlier grid in `path/runs/` are removed (the top-level files are replaced after the first
    run). With `resume=True` the complete runs already there are kept (`completed`); raises
    `ResumeError` when their settings differ from `settings` (naming each difference) or a
    `run.json` cannot be read.
    """

    def __init__(self, path: Path, settings: dict[str, Any], *, resume: bool) -> None:
        self.path = path
        self.settings = settings
        self.fingerprint = fingerprint(settings)
        self._runs = path / RUNS_DIR
        self._stored: dict[tuple[int, int, int], StoredRun] = {}
        if resume:
            self._stored = self._read_stored()
        elif self._runs.exists():
            shutil.rmtree(self._runs)
        self._runs.mkdir(parents=True, exist_ok=True)

    def _read_stored(self) -> dict[tuple[int, int, int], StoredRun]:
        stored: dict[tuple[int, int, int], StoredRun] = {}
        for file in sorted(self._runs.glob(f"*/{RUN_FILE}")):
            try:
                run = StoredRun.model_validate_json(file.read_text())
            except ValidationError as exc:
                raise ResumeError(
                    f"cannot resume in {self.path}: {file} is not a complete run "
                    f"({exc.error_count()} error(s)); delete that run's folder to measure it again"
                ) from None
            if run.fingerprint != self.fingerprint:
                differ = "; ".join(map(str, differences(run.settings, self.settings)))
                raise ResumeError(
                    f"cannot resume in {self.path}: its runs were measured with other settings "
                    f"({differ}); resume with the same settings, or use another --out folder"
                )
            s = run.summary
            stored[(s.prefix_kinds, s.concurrency, s.repetition)] = run
        return stored

    def earlier_incidents(self) -> list[Incident]:
        """The incidents the interrupted grid recorded (`result.json`), [] when not resuming."""
        result = read_result(self.path) if self._stored else None
        return [] if result is None else result.incidents

    def sizing(self) -> PromptSizing | None:
        """How the stored runs sized their prompts (None: no stored run)."""
        return next((run.sizing for run in self._stored.values()), None)

    def completed(self) -> list[MeasuredRun]:
        """The complete runs found by `resume=True`, with their request rows ([] otherwise)."""
        return [
            MeasuredRun(
                summary=run.summary,
                errors=run.errors,
                frame=pd.read_parquet(self._runs / run_name(*key) / REQUESTS_FILE),
            )
            for key, run in self._stored.items()
        ]

    def add_run(self, run: MeasuredRun, sizing: PromptSizing) -> None:
        """Write one finished run to `runs/<run>/`: its requests, then its `run.json`."""
        folder = self._runs / run_name(*run.key)
        folder.mkdir(parents=True, exist_ok=True)
        _replace(folder / REQUESTS_FILE, lambda tmp: run.frame.to_parquet(tmp, index=False))
        stored = StoredRun(
            fingerprint=self.fingerprint,
            settings=self.settings,
            sizing=sizing,
            summary=run.summary,
            errors=run.errors,
        )
        write_text_atomic(folder / RUN_FILE, stored.model_dump_json(indent=2) + "\n")

    def write_grid(self, result: GridResult, runs: Sequence[MeasuredRun]) -> None:
        """Replace the six top-level files with the grid so far (`result`, built from
        `runs`), each atomically; `requests.parquet` first and `summary.json` last."""
        self.path.mkdir(parents=True, exist_ok=True)
        frames = [run.frame for run in runs if not run.frame.empty]
        requests = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        _replace(self.path / REQUESTS_FILE, lambda tmp: requests.to_parquet(tmp, index=False))
        run_rows = pd.DataFrame([r.model_dump(mode="json") for r in result.runs])
        for column in ("errors_by_kind", "warnings", "lower_bounds"):
            if column in run_rows:
                run_rows[column] = run_rows[column].map(json.dumps)
        _replace(self.path / RUNS_FILE, lambda tmp: run_rows.to_csv(tmp, index=False))
        title = None if result.simulated is None else f"SIMULATED: {result.simulated}"
        if result.imported is not None:
            title = f"IMPORTED: {result.imported.label()}"
        table = seed_table(
            result.points,
            incidents=result.incidents,
            title=title,
            simulated=result.simulated is not None,
        )
        tables = [table, tail_table(result.points), slo_table(result.points)]
        text = "\n".join(table_text(t) for t in tables if t is not None)
        phases = phases_table(result.points, title="TTFT phases (ms)")
        text += "" if phases is None else "\n" + table_text(phases, width=140)
        write_text_atomic(self.path / TABLE_FILE, text)
        incidents = [incident.model_dump(mode="json") for incident in result.incidents]
        write_text_atomic(self.path / INCIDENTS_FILE, json.dumps(incidents, indent=2) + "\n")
        write_text_atomic(self.path / RESULT_FILE, result.model_dump_json(indent=2) + "\n")
        points = [p.model_dump(mode="json") for p in result.points]
        if result.simulated is not None:  # every point says so (read back, the key is ignored)
            points = [{"simulated": result.simulated, **p} for p in points]
        if result.imported is not None:  # likewise: measured by another tool
            points = [{"imported": result.imported.label(), **p} for p in points]
        write_text_atomic(self.path / SUMMARY_FILE, json.dumps(points, indent=2) + "\n")


def complete_runs(out_dir: Path) -> int:
    """How many complete runs (`runs/<run>/run.json`) `out_dir` holds (0: none, or no folder)."""
    return sum(1 for _ in (out_dir / RUNS_DIR).glob(f"*/{RUN_FILE}"))


def read_result(out_dir: Path) -> GridResult | None:
    """The `GridResult` in `out_dir/result.json` (the grid so far), None when there is none.
    Raises pydantic.ValidationError when the file is not a GridResult."""
    file = out_dir / RESULT_FILE
    return GridResult.model_validate_json(file.read_text()) if file.is_file() else None
