"""`testbed calibrate` and `testbed simulate --against` through the CLI, on folders made here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from measured_folder import timed_folder
from typer.testing import CliRunner

import testbed.simulate
from loadgen.key_paths import Setting, parse_settings
from stackmodel.config import StackConfig
from stackmodel.stacks import load_stack
from steptime.calibration_profile import load_calibration_file
from testbed.cli import app
from testbed.simulate import Simulation, graph_spec, simulation_load

SMALL = {"prefix_kinds": [4], "concurrency": [3], "repetitions": 1, "requests_per_run": 12}


def _with_load(cfg: StackConfig, load: dict[str, Any]) -> StackConfig:
    return cfg.model_copy(update={"load": cfg.load.model_copy(update=load)})


@pytest.fixture
def measured(tmp_path: Path) -> Path:
    """A kv-routing folder timed with 1.5x the seed fit's host time (as a faster-scheduling
    server would not be: slower), standing in for measured runs."""
    folder = tmp_path / "measured"
    slow = ['nodeClasses["gpu-24gb"].gpu={"name":"slow","bf16DenseTflops":60,"memoryGbPerS":500}']
    cfg = _with_load(load_stack("kv-routing", parse_settings(slow)), {**SMALL, "max_tokens": 8})
    timed_folder(folder, cfg)
    (folder / "stack.json").write_text(json.dumps({"stack": "kv-routing"}))
    return folder


def test_calibrate_writes_a_profile_a_node_class_can_name(measured: Path, tmp_path: Path) -> None:
    out = tmp_path / "calib" / "4090.json"
    args = ["calibrate", str(measured), "--stack", "kv-routing", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--score", str(measured), "--maxiter", "4"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "fitted (residuals)" in text and "scored, not fitted (error)" in text
    assert "calibrated on rtx-4090: prefill efficiency" in text
    assert "fitted: " in text and " of 4 values within +-25%; scored: " in text
    profile = load_calibration_file(out)
    assert (profile.stack, profile.gpu, profile.model) == (
        "kv-routing",
        "rtx-4090",
        "Qwen/Qwen3-0.6B",
    )
    assert profile.engine == "vllm on dynamo 1.6.2"
    assert profile.request_overhead_s is not None
    assert len(profile.fitted) == len(profile.scored) == 4  # 1 point x 4 metrics
    # The fix the last line suggests is one the program accepts.
    named = load_stack("kv-routing", parse_settings([f'nodeClasses["gpu-24gb"].calibration={out}']))
    assert named.node_classes["gpu-24gb"].calibration == str(out)


def test_calibrate_refuses_a_folder_without_requests_and_a_missing_profile(tmp_path: Path) -> None:
    two = ["calibrate", str(tmp_path), "--stack", "kv-routing", "--out", "x.json"]
    result = CliRunner().invoke(app, [*two, "--set", 'nodeClasses["gpu-8gb"].gpu=l4'])
    assert result.exit_code == 2
    assert "stack 'kv-routing' runs on l4, rtx-4090: a calibration fits one GPU" in " ".join(
        result.output.split()
    )
    (tmp_path / "empty").mkdir()
    args = ["calibrate", str(tmp_path / "empty"), "--stack", "kv-routing", "--out", "x.json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.output.startswith("error: ")
    key = 'nodeClasses["gpu-24gb"].calibration'
    missing = CliRunner().invoke(app, ["simulate", "kv-routing", "--set", f"{key}=none.json"])
    assert missing.exit_code == 2
    text = " ".join(missing.output.split())
    assert f"--set {key}=none.json: cannot read calibration profile" in text
    assert text.endswith("No such file or directory. Fix the --set value.")


def test_simulate_against_a_measured_folder(
    measured: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stack simulated at the measured folder's grid (its routing taken from recorded
    requests here, not a Dynamo run), each figure beside the measured one, the verdict, and the
    comparison's files; the measured folder is only read."""
    grids: list[dict[str, Any]] = []

    def recorded(
        stack: str,
        out_dir: Path,
        *,
        grid: dict[str, Any],
        settings: list[Setting],
        **_: object,
    ) -> Simulation:
        grids.append(grid)
        cfg = load_stack(stack, settings)
        cfg = _with_load(cfg, simulation_load(cfg, full=False, grid=grid).model_dump())
        result = timed_folder(out_dir / stack, cfg)
        return Simulation(stack, graph_spec(cfg), result, out_dir / stack)

    monkeypatch.setattr(testbed.simulate, "simulate_stack", recorded)
    before = sorted(p.name for p in measured.iterdir())
    out = tmp_path / "sim"
    args = ["simulate", "kv-routing", "--against", str(measured), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert grids == [SMALL]
    text = " ".join(result.output.split())
    assert "kv-routing SIMULATED vs measured" in text  # the table title
    summary = json.loads((out / "kv-routing" / "against" / "summary.json").read_text())
    assert summary["values"] == 4
    # The measured folder ran a slower GPU: the seed fit's simulation is faster on TTFT.
    ttft = next(v for v in summary["points"] if v["metric"] == "ttft_p50_ms")
    assert ttft["simulated"] < ttft["measured"]
    assert summary["verdict"] in text
    assert summary["verdict"].startswith(
        f"SIMULATED vs measured {measured}: {summary['within']} of 4 values within +-25%"
    )
    assert (out / "kv-routing" / "against" / "report.html").is_file()
    assert (out / "kv-routing" / "against" / "table.txt").is_file()
    assert sorted(p.name for p in measured.iterdir()) == before

    both = CliRunner().invoke(app, [*args, "--concurrency", "4"])
    assert both.exit_code == 2
    assert "--against simulates at the measured folder's grid points: drop --full" in both.output
    two = CliRunner().invoke(
        app, ["simulate", "kv-routing", "disagg-same-node", "--against", str(measured)]
    )
    assert two.exit_code == 2
    assert "drop STACK_B" in two.output
