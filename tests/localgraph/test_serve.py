"""`testbed serve` and `testbed load --stack --mocker`: the loop rehearsed without a cluster. The
real Dynamo frontend and mocker workers serve a stack on loopback until Ctrl-C; a load grid
measured against them records that mocker workers served it, and calibrate takes the folder as
the stack with mocker workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from typer.testing import CliRunner

from simulator.folder_labels import folder_labels
from testbed.cli import app

SMALL = ["--prefix-kinds", "2", "--concurrency", "2", "--requests-per-run", "6"]
SMALL += ["--repetitions", "1", "--no-progress", "--no-ready-check"]


def test_serve_load_calibrate(tmp_path: Path) -> None:
    testbed = Path(sys.executable).with_name("testbed")
    serve = subprocess.Popen(
        [str(testbed), "serve", "kv-routing", "--out", str(tmp_path / "serve")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert serve.stdout is not None
        lines = [serve.stdout.readline() for _ in range(4)]
        assert lines[0].startswith("serving kv-routing's local graph at http://127.0.0.1:"), lines
        assert "the Dynamo frontend (router kv) and 6 Dynamo mocker worker(s)" in lines[0]
        assert "no GPU" in lines[0]
        # As docs/simulation.md runs it: with the sim group (the mocker's stack reading).
        prefix = "measure it with: uv run --frozen --group sim testbed "
        assert lines[1].startswith(prefix), lines[1]
        command = lines[1].removeprefix(prefix).split()
        assert command[0] == "load" and "--mocker" in command
        # The command pasted as is runs a small grid, and the line after it says the full one.
        small = "--prefix-kinds 2,12 --concurrency 1,4 --repetitions 2 --requests-per-run 24"
        assert lines[1].rstrip().endswith(small)
        assert lines[2].rstrip() == (
            "(a small grid: 8 runs of 24 requests; without the last four options, the stack's "
            "own grid: 24 runs of 200 requests)"
        )
        out = tmp_path / "load"
        command[command.index("--out") + 1] = str(out)
        result = CliRunner().invoke(app, [*command, *SMALL])
        assert result.exit_code == 0, result.output
        workers = [p for p in psutil.Process(serve.pid).children() if p.is_running()]
        assert len(workers) == 7  # the frontend and 6 mockers
        serve.send_signal(signal.SIGINT)
        rest = serve.communicate(timeout=60)[0]
    finally:
        if serve.poll() is None:
            serve.kill()
    assert serve.returncode == 0, rest
    assert "stopped kv-routing's local graph: every process ended" in rest
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers)

    labels = folder_labels(out)
    assert (labels.served_by, labels.engine, labels.gpu) == (
        "mocker workers",
        "mocker on dynamo 1.6.2",
        "rtx-4090",
    )
    assert json.loads((out / "stack.json").read_text())["stack"] == "kv-routing"
    # calibrate takes it as the stack with mocker workers, and refuses it as the vLLM stack.
    args = ["calibrate", str(out), "--stack", "kv-routing", "--out", str(tmp_path / "p.json")]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2
    assert "engine mocker on dynamo 1.6.2 (stack: vllm on dynamo 1.6.2)" in " ".join(
        refused.output.split()
    )
    taken = CliRunner().invoke(app, [*args, "--set", "engine.kind=mocker", "--fit-requests", "6"])
    assert taken.exit_code == 0, taken.output
    assert "calibrated on rtx-4090/Qwen/Qwen3-0.6B (mocker on dynamo 1.6.2, mocker workers)" in (
        " ".join(taken.output.split())
    )
