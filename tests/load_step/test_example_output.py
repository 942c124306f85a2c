"""docs/load-step.md's example command runs as written (a script under tests/, outside pytest):
`python tests/load_step/example_output.py` against the local mocker graphs of kv-routing and
disagg-same-node, on the reduced grid with 8 requests a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stackmodel.stacks import REPO

SCRIPT = "tests/load_step/example_output.py"


def test_the_documented_example_command_runs(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "load-step.md").read_text()
    assert f"`uv run --group sim python {SCRIPT}`" in doc
    done = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path), "--requests-per-run", "8"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = json.loads(done.stdout)
    # disagg-same-node's points on the reduced grid of testbed simulate, each run complete.
    points = [(p["prefix_kinds"], p["concurrency"], p["samples"]) for p in outputs["results"]]
    assert points == [(2, 4, 8), (24, 4, 8)]
    assert outputs["loadStatus"]["state"] == "ok"
    comparison = outputs["comparison"]
    assert (comparison["baseline"], comparison["this"]) == ("kv-routing", "disagg-same-node")
    assert comparison["rows"]
