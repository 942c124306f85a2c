"""Which folder a load step writes: an interrupted run of the same inputs is resumed, anything
else starts a new one; the stop file; the default deadline sized from the grid."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from step_inputs_for import inputs_for

from loadstep.folder import STOP_FILE, StopFileObserver, StopRequested, resumable_run, run_folder
from loadstep.inputs import (
    LoadStepInputs,
    default_deadline_minutes,
    step_deadline_minutes,
)
from outputs.folder_reader import STATUS_FILE, STEP_FILE
from stackmodel.config import StackLoadConfig
from stackmodel.stacks import load_stack

T0 = datetime(2026, 12, 1, 15, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 1, 16, 0, 0, tzinfo=UTC)


def inputs(root: Path, run_id: str | None = None) -> LoadStepInputs:
    cfg = load_stack("kv-routing").cfg
    cfg = cfg.model_copy(update={"load": cfg.load.model_copy(update={"run_id": run_id})})
    return inputs_for(cfg, "kv-routing", "sha256:f", str(root), url="http://10.0.0.5:30080")


def test_an_interrupted_run_is_resumed_by_the_same_inputs(tmp_path: Path) -> None:
    first = run_folder(inputs(tmp_path), T0)
    assert first == tmp_path / "kv-routing" / "20261201T150000Z"
    started = json.loads((first / STEP_FILE).read_text())
    assert started["fingerprint"] == "sha256:f" and "kubeconfig" not in started
    assert resumable_run(inputs(tmp_path)) == first  # no status.json: interrupted
    assert run_folder(inputs(tmp_path), T1) == first
    assert resumable_run(inputs(tmp_path, run_id="2")) is None  # other inputs: a new run
    assert run_folder(inputs(tmp_path, run_id="2"), T1).name == "20261201T160000Z"


def test_a_finished_run_is_not_resumed(tmp_path: Path) -> None:
    first = run_folder(inputs(tmp_path), T0)
    (first / STATUS_FILE).write_text("{}\n")
    assert resumable_run(inputs(tmp_path)) is None
    assert run_folder(inputs(tmp_path), T1) != first


def test_the_stop_file_stops_before_the_next_run_once(tmp_path: Path) -> None:
    observer = StopFileObserver(inputs(tmp_path))
    asyncio.run(observer.before_run(2, 4, 1))  # no stop file: nothing happens
    stop = tmp_path / "kv-routing" / STOP_FILE
    stop.parent.mkdir(parents=True)
    stop.touch()
    with pytest.raises(StopRequested, match=r"STOP found before run K=7 c=4 rep 2"):
        asyncio.run(observer.before_run(7, 4, 2))
    assert not stop.exists()
    asyncio.run(observer.before_run(7, 4, 2))


def test_the_default_deadline_is_sized_from_the_grid() -> None:
    seed = StackLoadConfig()
    # c=4: 51 requests in a row, c=8: 26; x 4 s each; x 4 kinds x 3 repetitions = 61.6 min;
    # plus 10 min model wait and 10 min readiness gate.
    assert default_deadline_minutes(seed) == 82
    assert default_deadline_minutes(seed.model_copy(update={"ready_check": False})) == 72
    small = seed.model_copy(update={"prefix_kinds": [2], "repetitions": 1})
    assert default_deadline_minutes(small) == 26  # 20 min of waits + 5.1 min of runs
    capped = seed.model_copy(update={"duration_s": 30.0})
    assert default_deadline_minutes(capped) == 34  # 20 + 24 runs x (30 s + 4 s) = 33.6
    assert step_deadline_minutes(seed.model_copy(update={"deadline_minutes": 45.0})) == 45
