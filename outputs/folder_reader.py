"""Reading a results folder back: the one loader behind `testbed report` (the writer is
`outputs.folder_writer.ResultsFolder`).

A results folder is what `testbed load --out`, `testbed simulate` (`<out>/<stack>/`) or the
post-deploy load step (`<resultsDir>/<stack>/<UTC time>/`) wrote. Only `summary.json` is
required; every other file is optional and read when present:

- `result.json`: the `GridResult` (settings, per-run rows with their wall-clock windows,
  incidents, warnings);
- `requests.parquet`: one row per request (`outputs.folder_writer.records_frame`); at the top level,
  else every outermost one below (e.g. only the per-run `runs/<run>/` ones of a grid cut off
  before it rewrote the top level);
- `incidents.json`: a list of `Incident` (`measurement.incidents`), else `GridResult.incidents`;
- `step.json`: the load step's inputs (stack name, topology fingerprint, URL, grid);
- `stack.json`: the stack and its workers' resources (`testbed simulate`, the load step);
- `memory.json`: the worker pods' memory over the load step (`measurement.memory`);
- `status.json`: the load step's status (ok / degraded / failed).
"""

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from pydantic import BaseModel, TypeAdapter, ValidationError

from configkeys.key_paths import show_path
from measurement.goodput import judge_points
from measurement.incidents import INCIDENTS_FILE, Incident
from measurement.memory import MEMORY_FILE, MemoryRecord
from measurement.results import GridResult, PointSummary
from outputs.folder_writer import REQUESTS_FILE, RESULT_FILE, runs_of_frame
from outputs.tables import SUMMARY_FILE, load_points
from workload.config import Arrival, LoadConfig, error_message
from workload.slo import Slo, SloError

STEP_FILE = "step.json"  # the load step's inputs (loadstep/runtime.py)
STATUS_FILE = "status.json"  # the load step's status (loadstep/runtime.py)
STACK_FILE = "stack.json"  # the stack and its resources (stackmodel.resources writes it)
REPORT_FILE = "report.html"  # what `testbed load`, `testbed simulate` and the load step write

REQUEST_KEY = ["prefix_kinds", "concurrency", "repetition", "index"]
"""The columns that name one request across `requests.parquet` files."""

_INCIDENTS = TypeAdapter(list[Incident])
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class LoadedResults:
    """Everything read from one results folder.

    `name` is the stack (from `step.json` or `stack.json`, else the folder's name, or its
    parent's and its own for the load step's `<stack>/<UTC time>/`); `requests` has one row
    per request (empty with
    no `requests.parquet`); `incidents` are in time order; `stack`, `step` and `status` are
    `stack.json`, `step.json` and `status.json` as read ({} when absent); `memory` is
    `memory.json` (None when absent).
    """

    path: Path
    name: str
    points: list[PointSummary]
    grid: GridResult | None
    requests: pd.DataFrame
    incidents: list[Incident]
    step: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, Any] = field(default_factory=dict)
    memory: MemoryRecord | None = None

    @property
    def started_at(self) -> datetime | None:
        """Wall-clock start of the grid (UTC), when `result.json` was read."""
        return self.grid.started_at if self.grid is not None else None

    @property
    def gpus(self) -> int | None:
        """The GPUs the stack ran on (`stack.json`'s resources), for per-GPU goodput."""
        gpus = (self.stack.get("resources") or {}).get("gpus")
        return gpus if isinstance(gpus, int) and gpus > 0 else None

    def judged(self, slo: Slo | None) -> "LoadedResults":
        """These results with their points judged against `slo`
        (`measurement.goodput.judge_points`, from `requests`; the closed or open loop and the
        GPUs as recorded); with None, against the SLO the grid ran with (`load.slo`) when
        its points were not judged yet, else as they are. Raises `SloError` (one line, the
        folder named) for an SLO the runs cannot have (`measurement.goodput.evaluate_run`)."""
        slo = slo or (self.grid.config.slo if self.grid is not None else None)
        if slo is None or self.requests.empty:
            return self
        closed = self.grid is None or self.grid.config.arrival is Arrival.CLOSED
        try:
            points = judge_points(
                self.points, runs_of_frame(self.requests), slo, closed=closed, gpus=self.gpus
            )
        except SloError as exc:
            raise SloError(f"{self.path}: {exc}") from None
        return dataclasses.replace(self, points=points)


def _json_file(path: Path) -> Any:
    """The JSON in `path`, or None when absent. Raises ValueError (one line) when unreadable."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None


def _first_error(path: Path, exc: ValidationError) -> ValueError:
    first = exc.errors()[0]
    where = show_path(first["loc"]) or "(top level)"
    return ValueError(f"{path} is not in the expected shape ({where}: {error_message(first)})")


def _validated(path: Path, model: type[M]) -> M | None:
    """The `model` in JSON file `path`, None when absent. Raises ValueError (one line)."""
    data = _json_file(path)
    if data is None:
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _first_error(path, exc) from None


def _grid(path: Path) -> GridResult | None:
    return _validated(path, GridResult)


def _incidents(path: Path, grid: GridResult | None) -> list[Incident]:
    data = _json_file(path)
    if data is None:
        found = grid.incidents if grid is not None else []
    else:
        try:
            found = _INCIDENTS.validate_python(data)
        except ValidationError as exc:
            raise _first_error(path, exc) from None
    return sorted(found, key=lambda incident: incident.at)


def request_files(folder: Path) -> list[Path]:
    """`folder/requests.parquet` if present, else the outermost `requests.parquet` files
    below `folder` (sorted): per-point or per-run folders inside them are left out."""
    top = folder / REQUESTS_FILE
    if top.is_file():
        return [top]
    found = sorted(path.parent for path in folder.rglob(REQUESTS_FILE) if path.is_file())
    outer = [path for path in found if not any(other in path.parents for other in found)]
    return [path / REQUESTS_FILE for path in outer]


def _requests(folder: Path) -> pd.DataFrame:
    frames = []
    for file in request_files(folder):
        try:
            frames.append(pd.read_parquet(file))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{file} is not a readable Parquet file: {exc}") from None
    frames = [frame for frame in frames if not frame.empty]
    if not frames:
        return pd.DataFrame(columns=REQUEST_KEY)
    merged = pd.concat(frames, ignore_index=True)
    return merged.drop_duplicates(subset=REQUEST_KEY, keep="last").reset_index(drop=True)


def _name(folder: Path, named: Sequence[dict[str, Any]]) -> str:
    for data in named:
        stack = data.get("stack")
        if isinstance(stack, str) and stack:
            return stack
    resolved = folder.resolve()
    # The load step's <resultsDir>/<stack>/<UTC time>/: the time alone names nothing.
    if resolved.name[:8].isdigit() and resolved.name.endswith("Z"):
        return f"{resolved.parent.name} {resolved.name}"
    return resolved.name


def load_config(folder: Path) -> LoadConfig | None:
    """The load settings `folder`'s `result.json` was measured with; None without that file.
    Raises ValueError (one line) when it is not a `GridResult`."""
    grid = _grid(folder / RESULT_FILE)
    return None if grid is None else grid.config


def load_results(folder: Path) -> LoadedResults:
    """Read a results folder (see this module's docstring).

    Raises FileNotFoundError (one line; naming the results folders below `folder`, if any)
    when `folder` holds no `summary.json`, and ValueError (one line, naming the file) when a
    file present is not JSON, not Parquet, or not in the shape loadgen writes.
    """
    points = load_points(folder)
    if not points:
        raise ValueError(f"{folder / SUMMARY_FILE} holds no grid points (did the grid run?)")
    grid = _grid(folder / RESULT_FILE)
    step = _json_file(folder / STEP_FILE) or {}
    stack = _json_file(folder / STACK_FILE) or {}
    return LoadedResults(
        path=folder,
        name=_name(folder, (step, stack)),
        points=points,
        grid=grid,
        requests=_requests(folder),
        incidents=_incidents(folder / INCIDENTS_FILE, grid),
        step=step,
        status=_json_file(folder / STATUS_FILE) or {},
        stack=stack,
        memory=_validated(folder / MEMORY_FILE, MemoryRecord),
    )
