"""A results folder's requests as the workload a search times (:func:`replayed`).

The folder is one ``testbed load``, ``testbed simulate`` or the load step wrote: the load
settings are the folder's (``result.json``); per prefix-kinds value, the requests of the
folder's first run at that value (grid order: its lowest concurrency, repetition 1) that
succeeded, in their send order (a value without such a run, e.g. of a grid cut off, is left
out of the search's prefix kinds), each at the prompt and output tokens the server counted
(``usage``), on its own prefix and at its due time (``intended_ns``) in units of the run's
mean gap (:class:`recommend.workload.Replayed`; :class:`recommend.workload.Workload` says how
a search sends them). Reading the folder needs pandas, which the search's timing does not: the
search's worker processes import :mod:`recommend.workload`, never this module.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from loadgen.plan import grid_keys
from outputs.folder_reader import load_results
from recommend.workload import Replayed, Workload


class WorkloadError(ValueError):
    """A ``--workload`` that cannot be read (one line: what is wrong and the fix)."""


HINT = "give seed, a YAML file of load settings, or a folder `testbed load --out` wrote"
"""What ``--workload`` accepts, for its errors."""

FOLDER_FILES = ("summary.json", "result.json", "requests.parquet", "table.txt", "runs.csv")
"""The files of a results folder a user might name instead of the folder."""


def replayed(folder: Path) -> Workload:
    """A results folder's workload (the module docstring). Raises :class:`WorkloadError` (one
    line, naming the option and a fix) for a folder that is not a results folder or has no
    requests to replay."""
    source = f"--workload {folder}"
    if not (folder / "summary.json").is_file():
        below = sorted(p.parent for p in folder.rglob("summary.json"))[:3]
        fix = f"; did you mean {', '.join(map(str, below))}" if below else f"; {HINT}"
        raise WorkloadError(f"{source}: not a results folder (no summary.json){fix}")
    try:
        results = load_results(folder)
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{source}: {exc}") from None
    if results.grid is None:
        raise WorkloadError(
            f"{source}: no result.json (the load settings it ran with); give a folder "
            "`testbed load` finished, or its settings as a YAML file"
        )
    load = results.grid.config  # its slo, if it ran with one, is the default --slo
    frame = results.requests
    needed = {"prompt_tokens", "completion_tokens", "intended_ns", "error_kind"}
    if frame.empty or not needed <= set(frame.columns):
        raise WorkloadError(
            f"{source}: no requests.parquet with the requests' token counts; give a folder "
            "`testbed load` wrote, or its settings as a YAML file"
        )
    replay: dict[int, tuple[Replayed, ...]] = {}
    keys = ["prefix_kinds", "concurrency", "repetition"]
    runs = {tuple(int(v) for v in key): rows for key, rows in frame.groupby(keys)}
    for kinds in load.prefix_kinds:
        first = next((key for key in grid_keys(load) if key[0] == kinds and key in runs), None)
        run = runs[first] if first is not None else frame.iloc[0:0]
        good = run[
            run.error_kind.isna() & pd.notna(run.prompt_tokens) & (run.completion_tokens > 0)
        ].sort_values(["intended_ns", "index"])
        if good.empty:
            continue  # a grid cut off before this value, or a run that failed: not replayed
        start = int(good.intended_ns.iloc[0])
        # Due times in units of the run's mean gap, so that any rate can be replayed.
        span = int(good.intended_ns.iloc[-1]) - start
        gap = span / (len(good) - 1) if len(good) > 1 and span > 0 else 0.0
        replay[kinds] = tuple(
            Replayed(
                int(row.prefix_id),
                int(row.prompt_tokens),
                int(row.completion_tokens),
                (int(row.intended_ns) - start) / gap if gap else float(i),
            )
            for i, row in enumerate(good.itertuples())
        )
    if not replay:
        raise WorkloadError(
            f"{source}: no run has a successful request with token counts to replay; give a "
            "folder whose runs succeeded"
        )
    load = load.model_copy(update={"prefix_kinds": sorted(replay)})
    return Workload(load, f"{folder} (replayed)", replay)
