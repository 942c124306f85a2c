"""Calibration from measured runs: a folder simulated with known figures calibrates back to them."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest
from measured_folder import timed_folder

from configkeys.key_paths import parse_settings
from simulator.calibration import CONSTANTS
from simulator.calibration_fit import Search, fit, read_target
from simulator.hardware import stack_constants
from simulator.provenance import provenance
from stackmodel.config import StackConfig
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
    # The same profile on another GPU and engine warns, naming what differs.
    moved = [*keys, 'nodeClasses["gpu-24gb"].gpu=l40s', "engine.dynamoVersion=1.7.0"]
    other = load_stack("kv-routing", parse_settings(moved))
    assert (
        "worker-24gb: calibration profile used elsewhere: GPU l40s (measured: rtx-4090), "
        "engine vllm on dynamo 1.7.0 (measured: vllm on dynamo 1.6.2); its figures may not hold"
    ) in provenance(other)[1]
    assert load_calibration_file(profile).weights_efficiency == TRUE["weights_efficiency"]


def test_a_simulated_folder_calibrates_back_to_its_figures(
    measured: tuple[Path, StackConfig],
) -> None:
    folder, plain = measured
    target = read_target(folder, validate_config("kv-routing", plain))
    reported: list[Search] = []
    # 100 iterations a search: the 2,381-token prompts take two steps under the 24 GB GPU's
    # 2,048-token step budget, and 40 stop short of the figures
    found = fit([target], maxiter=100, progress=reported.append)
    for name, value in TRUE.items():
        assert getattr(found.engine, name) == pytest.approx(value, rel=0.05), name
    assert found.constants.request_overhead_s == pytest.approx(TRUE_OVERHEAD_S, rel=0.05)
    assert found.frontend_fitted
    assert found.start_loss > 0.01 > found.loss
    # One report per search, each starting from the best loss so far.
    assert tuple(reported) == found.searches
    assert [s.scale for s in reported] == [0.5, 0.15, 0.04]
    assert reported[0].start_loss == found.start_loss and reported[-1].loss == found.loss
    assert all(a.loss == b.start_loss for a, b in itertools.pairwise(reported))
    assert sum(s.iterations for s in reported) == found.iterations
    assert (
        reported[0]
        .line()
        .startswith(
            "search 1 of 3 (simplex +-0.5 in log space) of prefill_efficiency, weights_efficiency, "
            f"kv_efficiency, step_host_s, request_overhead_s: loss {found.start_loss:.4g} -> "
        )
    )
    assert all(abs(v.error) < 0.02 for v in found.fitted)
    assert len(found.fitted) == 3 * 4  # 3 points x TTFT p50 / p99, TPOT p50, requests/s
    assert dataclasses.replace(found.constants, request_overhead_s=0.0) == dataclasses.replace(
        CONSTANTS, request_overhead_s=0.0
    )
