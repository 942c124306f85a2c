"""Writes a grid's result folder.

- `summary.json`: a list, one object per grid point (`PointSummary` fields).
- `result.json`: the whole `GridResult` (settings, per-run rows, errors, warnings).
- `runs.csv`: the per-run table (`RunSummary` fields, errors by kind as JSON).
- `requests.parquet`: one row per measured request: grid coordinates, the raw monotonic
  nanosecond times (`intended_ns`, `sent_ns`, ..., `token_ns` as a list), usage, error.
- `table.txt`: the seed-style table as printed, grid points with an incident marked.
- `incidents.json`: `GridResult.incidents` (`loadgen.incidents`), [] when none.
"""

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from loadgen.incidents import INCIDENTS_FILE, Incident
from loadgen.report import SUMMARY_FILE, seed_table, table_text
from loadgen.request import RunRecords
from loadgen.results import GridResult


def records_frame(runs: Sequence[RunRecords]) -> pd.DataFrame:
    """One row per request with its run's `prefix_kinds`, `concurrency`, `repetition` and every
    `RequestRecord` field (times in monotonic ns; `error_kind` as its string value)."""
    rows = [
        {
            "prefix_kinds": run.prefix_kinds,
            "concurrency": run.concurrency,
            "repetition": run.repetition,
            **dataclasses.asdict(record),
            # As text before pandas sees it: a column mixing None with enum members would turn
            # None into NaN, and str(NaN) into the string "nan".
            "error_kind": None if record.error_kind is None else str(record.error_kind),
        }
        for run in runs
        for record in run.records
    ]
    return pd.DataFrame(rows)


def write_outputs(out_dir: Path, result: GridResult, runs: Sequence[RunRecords]) -> None:
    """Write the six files described in this module's docstring into `out_dir` (created)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    points = [p.model_dump(mode="json") for p in result.points]
    (out_dir / SUMMARY_FILE).write_text(json.dumps(points, indent=2) + "\n")
    (out_dir / "result.json").write_text(result.model_dump_json(indent=2) + "\n")
    run_rows = pd.DataFrame([r.model_dump(mode="json") for r in result.runs])
    for column in ("errors_by_kind", "warnings"):
        run_rows[column] = run_rows[column].map(json.dumps)
    run_rows.to_csv(out_dir / "runs.csv", index=False)
    records_frame(runs).to_parquet(out_dir / "requests.parquet", index=False)
    (out_dir / "table.txt").write_text(
        table_text(seed_table(result.points, incidents=result.incidents))
    )
    write_incidents(out_dir, result.incidents)


def write_incidents(out_dir: Path, incidents: Sequence[Incident]) -> None:
    """`out_dir/incidents.json`: the incidents as a JSON list (`Incident` in JSON mode)."""
    data = [incident.model_dump(mode="json") for incident in incidents]
    (out_dir / INCIDENTS_FILE).write_text(json.dumps(data, indent=2) + "\n")
