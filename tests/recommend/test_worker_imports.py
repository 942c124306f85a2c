"""What a search's worker process loads: what timing a candidate needs, never pandas (the
results folder) or aiohttp (the load client), which would cost every worker seconds of CPU at
its start.

A worker (``recommend.search``'s pool, ``--jobs``) is handed the function it runs and its
arguments pickled, and imports what unpickling them names; the subprocess below does the same.
"""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys

from recommend.search import _time_in_worker, time_candidate
from recommend.workload import Workload
from stackmodel.stacks import REPO, load_stack
from workload.config import LoadConfig
from workload.slo import parse_slo

HEAVY = ("pandas", "aiohttp")

WORKER = """
import json, pickle, sys
function, args = pickle.loads(sys.stdin.buffer.read())
result = function(args)
heavy = sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules)
best = result.best.concurrency if result.best is not None else None
print(json.dumps({"status": result.status, "best": best, "runs": result.runs, "heavy": heavy}))
"""


def loaded_by(module: str) -> set[str]:
    """The packages of ``HEAVY`` in ``sys.modules`` after importing ``module`` afresh."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return set(HEAVY) & {name.split(".")[0] for name in json.loads(out)}


def test_the_search_module_imports_neither_pandas_nor_aiohttp() -> None:
    assert loaded_by("recommend.search") == set()


def test_the_check_sees_the_folder_reader() -> None:
    """Reading a results folder to replay it does load pandas, so the check above can fail."""
    assert "pandas" in loaded_by("recommend.replay")


def test_a_worker_times_a_candidate_without_pandas_or_aiohttp() -> None:
    """A candidate timed as a worker times it, in a fresh interpreter: the same result as in
    this process, and neither package loaded."""
    load = LoadConfig(prefix_kinds=[2], requests_per_run=8, max_tokens=8, prompt_tokens=64)
    plan, slo = load_stack("kv-routing"), parse_slo("ttft_p99_ms=60000")
    args = (plan, load, slo, 1, Workload(load), math.inf, 2.0)
    done = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(HEAVY)],
        input=pickle.dumps((_time_in_worker, args)),
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    here = time_candidate(*args)
    assert here.status == "ranked" and here.best is not None
    assert json.loads(done.stdout) == {
        "status": "ranked",
        "best": here.best.concurrency,
        "runs": here.runs,
        "heavy": [],
    }
