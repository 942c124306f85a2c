"""Calibration from measured runs: a folder simulated with known figures calibrates back to them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from measured_folder import timed_folder

from configkeys.key_paths import parse_settings
from simulator.calibration import CONSTANTS
from simulator.calibration_checks import calibrate
from simulator.calibration_fit import Evaluator, Problem, Search, read_target
from simulator.hardware import stack_constants
from simulator.provenance import provenance
from stackmodel.config import StackConfig
from stackmodel.errors import StackConfigError
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config
from steptime.calibration_profile import CalibrationProfile, load_calibration_file

TRUE = {
    "prefill_efficiency": 0.55,
    "weights_efficiency": 0.7,
    "kv_efficiency": 0.5,
    "step_host_s": 0.003,
}
TRUE_OVERHEAD_S = 0.02
ROUND_ROBIN = "topology.routerMode=round-robin"
"""Routing that does not depend on timing (the KV router's choice does, through the workers'
load), so the loss is a smooth function of the figures fitted."""
GRID = {"prefix_kinds": [4], "concurrency": [1, 2, 8], "repetitions": 1, "requests_per_run": 16}
"""One worker at a time (c=1: host + GPU per step), both workers busy on the one GPU (c=2: the
GPU part is shared, the host part is not, which tells them apart) and batches of 4 (c=8: the KV
read grows with the batch, the weight read does not); 4 cold prefixes then warm requests (the
prefill efficiency)."""


def _small(cfg: StackConfig) -> StackConfig:
    """kv-routing's 24 GB worker group alone, 2 replicas on its one time-sliced GPU, on GRID."""
    load = cfg.load.model_copy(update={**GRID, "max_tokens": 16})
    workers = (cfg.topology.workers[0].model_copy(update={"replicas": 2}),)
    topology = cfg.topology.model_copy(update={"workers": workers})
    return cfg.model_copy(update={"load": load, "topology": topology})


def _write_profile(path: Path, cfg: StackConfig) -> None:
    profile = CalibrationProfile(
        stack="kv-routing",
        gpu="rtx-4090",
        model=cfg.model.name,
        engine="vllm on dynamo 1.6.2",
        request_overhead_s=TRUE_OVERHEAD_S,
        **TRUE,
    )
    path.write_text(profile.model_dump_json(by_alias=True))


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StackConfig]:
    """A results folder simulated with TRUE (through a calibration profile a node class names,
    so it also runs the profile's path into the timing model) and the plain stack."""
    folder = tmp_path_factory.mktemp("measured")
    plain = _small(load_stack("kv-routing", parse_settings([ROUND_ROBIN])).cfg)
    profile = folder / "profile.json"
    _write_profile(profile, plain)
    keys = [f'nodeClasses["{name}"].calibration={profile}' for name in plain.node_classes]
    cfg = _small(load_stack("kv-routing", parse_settings([ROUND_ROBIN, *keys])).cfg)
    timed_folder(folder, cfg)
    (folder / "stack.json").write_text(json.dumps({"stack": "kv-routing"}))
    return folder, plain


def test_a_profile_a_node_class_names_sets_the_steps_and_the_frontend_cost(
    measured: tuple[Path, StackConfig],
) -> None:
    folder, plain = measured
    profile = folder / "profile.json"
    keys = [f'nodeClasses["{name}"].calibration={profile}' for name in plain.node_classes]
    cfg = load_stack("kv-routing", parse_settings(keys))
    assert stack_constants(cfg).request_overhead_s == TRUE_OVERHEAD_S
    assert stack_constants(validate_config("kv-routing", plain)) == CONSTANTS
    text, warnings = provenance(cfg)
    assert "calibrated" in text
    assert not any("extrapolated" in w for w in warnings)
    # The same profile on another GPU is refused, naming the key and the fix it accepts ...
    moved = [*keys, 'nodeClasses["gpu-24gb"].gpu=l40s', "engine.dynamoVersion=1.7.0"]
    with pytest.raises(StackConfigError) as refused:
        load_stack("kv-routing", parse_settings(moved))
    assert str(refused.value).endswith(
        f'--set nodeClasses["gpu-24gb"].calibration={profile}: calibrated on '
        "rtx-4090/Qwen/Qwen3-0.6B, node class 'gpu-24gb' runs l40s/Qwen/Qwen3-0.6B: calibrate "
        "on runs of this GPU and model, or set nodeClasses.gpu-24gb.calibrationElsewhere=true "
        "to apply it anyway. Fix the --set value."
    )
    # ... and taken with that fix, saying where it was calibrated and what else differs.
    forced = [*moved, 'nodeClasses["gpu-24gb"].calibrationElsewhere=true']
    other = load_stack("kv-routing", parse_settings(forced))
    text, warnings = provenance(other)
    assert (
        "worker-24gb on l40s, calibrated on rtx-4090/Qwen/Qwen3-0.6B, applied to "
        "l40s/Qwen/Qwen3-0.6B"
    ) in text
    assert (
        "worker-24gb: calibration profile used elsewhere: GPU l40s (measured: rtx-4090), "
        "engine vllm on dynamo 1.7.0 (measured: vllm on dynamo 1.6.2); its figures may not hold"
    ) in warnings
    assert load_calibration_file(profile).weights_efficiency == TRUE["weights_efficiency"]


def test_a_simulated_folder_calibrates_back_to_its_figures(
    measured: tuple[Path, StackConfig],
) -> None:
    folder, plain = measured
    target = read_target(folder, validate_config("kv-routing", plain))
    reported: list[Search] = []
    stages: list[tuple[str, int]] = []
    counted: list[int] = []
    problem = Problem([target], requests=None)
    with Evaluator(problem, workers=1, on_evaluation=counted.append) as evaluator:
        found = calibrate(
            evaluator, on_search=reported.append, on_stage=lambda *s: stages.append(s)
        )
    assert found.identification.fitted == problem.names  # all five: the grid pins each
    for name, value in {**TRUE, "request_overhead_s": TRUE_OVERHEAD_S}.items():
        assert found.values[name] == pytest.approx(value, rel=0.05), name
    assert found.start_loss > 0.01 > found.loss
    # One report per search, each starting from the best loss so far.
    assert tuple(reported) == found.searches
    assert [s.step for s in reported] == [0.1]
    assert reported[0].start_loss == found.start_loss and reported[-1].loss == found.loss
    assert (
        reported[0]
        .line()
        .startswith(
            "search 1 of 1 (least squares, steps of 0.1 in log space) of prefill_efficiency, "
            f"weights_efficiency, kv_efficiency, step_host_s, request_overhead_s: loss "
            f"{found.start_loss:.4g} -> "
        )
    )
    # Every evaluation counted once, in order; the stages in order.
    assert counted == list(range(1, found.evaluations + 1))
    assert [name for name, _ in stages] == [
        "identifying",
        "searching",
        "intervals",
        "held-out points",
    ]
    assert all(abs(v.error) < 0.02 for v in found.fitted)
    assert len(found.fitted) == 3 * 4  # 3 points x TTFT p50 / p99, TPOT p50, requests/s
    assert len(found.held_out) == 3 * 4  # each point predicted by a fit without it


def test_the_fit_statistics_of_a_subset_are_those_of_the_same_requests(
    measured: tuple[Path, StackConfig],
) -> None:
    """The search times the first requests of each run (and ``concurrency`` more); the
    measured side is read from the same requests, so the figures it was timed with give
    residuals of 0 on a subset as on the whole run."""
    folder, plain = measured
    target = read_target(folder, validate_config("kv-routing", plain))
    truth = {**TRUE, "request_overhead_s": TRUE_OVERHEAD_S}
    for requests in (None, 6):
        problem = Problem([target], requests=requests)
        x = np.array([math.log(truth[n]) for n in problem.names])
        assert np.max(np.abs(problem.residuals(x))) < 1e-6  # the records keep whole ns
        assert len(problem.keys) == 3 * 4  # cold and warm TTFT, TPOT, requests/s
    six = Problem([target], requests=6)
    assert all(run.scored == 6 for run in six.runs[0])
    assert [len(run.requests) for run in six.runs[0]] == [6 + 1, 6 + 2, 6 + 8]
