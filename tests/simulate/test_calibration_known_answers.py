"""Known answers: folders timed with known figures (through a calibration profile a node class
names, as a measured GPU's would be), then calibrated from the stack's own figures. Each
identifiable figure must come back inside its interval, the others must be reported as not
identifiable (with what would pin them), and a truth outside the search's bounds must warn."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from measured_folder import timed_folder

from configkeys.key_paths import parse_settings
from measurement.record import FRONTEND_FIELDS
from outputs.folder_writer import REQUESTS_FILE
from simulator.calibration_checks import Calibration, calibrate
from simulator.calibration_fit import Evaluator, Problem, read_target
from stackmodel.config import StackConfig
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config
from steptime.calibration_profile import CalibrationProfile
from steptime.gpus import GPU_CATALOG

ROUND_ROBIN = "topology.routerMode=round-robin"
"""Routing that does not depend on timing, so the residuals move smoothly with the figures."""

GRID = {"prefix_kinds": [4], "concurrency": [1, 2, 8], "repetitions": 1, "requests_per_run": 12}
"""One request at a time (host + GPU per step, the frontend's cost on each warm TTFT) and
batches of 4 per worker (the KV read grows with the batch); 4 cold prefixes then warm
requests (the prefill)."""

ONE_POINT = {"prefix_kinds": [4], "concurrency": [8], "repetitions": 1, "requests_per_run": 12}
"""One grid point: its 4 figures cannot pin 5."""


def _small(cfg: StackConfig, grid: dict[str, object]) -> StackConfig:
    """kv-routing's 24 GB worker group alone, 2 replicas on its one time-sliced GPU."""
    load = cfg.load.model_copy(update={**grid, "max_tokens": 8})
    workers = (cfg.topology.workers[0].model_copy(update={"replicas": 2}),)
    topology = cfg.topology.model_copy(update={"workers": workers})
    return cfg.model_copy(update={"load": load, "topology": topology})


def _known(
    tmp: Path, truth: dict[str, float], grid: dict[str, object], *, timing: bool = True
) -> Calibration:
    """A folder timed with ``truth`` (a profile on the stack's own GPU and model), calibrated
    from the stack's figures on one process; without ``timing`` its requests carry none of the
    frontend's per-request figures (a folder of a server that is not Dynamo)."""
    plain = _small(load_stack("kv-routing", parse_settings([ROUND_ROBIN])).cfg, grid)
    profile = tmp / "truth.json"
    steps = {k: v for k, v in truth.items() if k != "request_overhead_s"}
    profile.write_text(
        CalibrationProfile(
            stack="kv-routing",
            gpu="rtx-4090",
            model=plain.model.name,
            engine="vllm on dynamo 1.6.2",
            request_overhead_s=truth["request_overhead_s"],
            **steps,
        ).model_dump_json(by_alias=True)
    )
    keys = [f'nodeClasses["{name}"].calibration={profile}' for name in plain.node_classes]
    timed = _small(load_stack("kv-routing", parse_settings([ROUND_ROBIN, *keys])).cfg, grid)
    folder = tmp / "measured"
    timed_folder(folder, timed)
    if not timing:
        requests = pd.read_parquet(folder / REQUESTS_FILE)
        requests[[f for f in FRONTEND_FIELDS if f in requests.columns]] = None
        requests.to_parquet(folder / REQUESTS_FILE)
    (folder / "stack.json").write_text(json.dumps({"stack": "kv-routing"}))
    target = read_target(folder, validate_config("kv-routing", plain))
    with Evaluator(Problem([target], requests=None), workers=1) as evaluator:
        return calibrate(evaluator)


def _aic(gpu: str) -> dict[str, float]:
    """The catalog ``gpu``'s AIConfigurator efficiencies."""
    aic = GPU_CATALOG[gpu].aiconfigurator
    assert aic is not None
    return aic.efficiencies()


L40S = {**_aic("l40s"), "step_host_s": 0.003, "request_overhead_s": 0.02}
"""AIConfigurator's L40S efficiencies (the catalog's), with a host time and a frontend cost."""

A100 = {**_aic("a100-sxm-80gb"), "step_host_s": 0.0015, "request_overhead_s": 0.045}
"""AIConfigurator's A100 SXM efficiencies."""


@pytest.mark.parametrize("truth", [L40S, A100], ids=["l40s-catalog", "a100-catalog"])
def test_each_identifiable_figure_comes_back_inside_its_interval(
    tmp_path: Path, truth: dict[str, float]
) -> None:
    found = _known(tmp_path, truth, GRID)
    fitted = [f for f in found.figures if f.fitted]
    assert {f.name for f in fitted} == set(found.identification.fitted)
    assert {"prefill_efficiency", "request_overhead_s"} <= set(found.identification.fitted)
    for figure in fitted:
        assert figure.low is not None and figure.high is not None
        assert figure.low <= truth[figure.name] <= figure.high, figure
        assert figure.low < figure.value < figure.high
    for figure in found.figures:
        if not figure.fitted:  # held at the stack's own figure: the seed fit's
            assert figure.value == pytest.approx(figure.prior)
    assert found.loss < found.start_loss
    assert found.warnings == []
    # Each point is predicted by a fit without it.
    assert {v.point for v in found.held_out} == {"K=4 c=1", "K=4 c=2", "K=4 c=8"}


def test_one_point_fits_only_what_it_can_and_says_what_would_pin_the_rest(
    tmp_path: Path,
) -> None:
    found = _known(tmp_path, L40S, ONE_POINT)
    ident = found.identification
    assert ident.values == 4  # cold and warm TTFT, TPOT, requests/s at one point
    assert len(ident.fitted) < 5
    assert ident.held
    lines = ident.lines()
    for name in ident.held:
        (line,) = [line for line in lines if line.startswith(f"{name}: ")]
        assert "not identifiable" in line and "held at its prior; needs " in line
    held = {f.name: f for f in found.figures if not f.fitted}
    assert set(held) == set(ident.held)
    assert all(f.low is None and f.value == pytest.approx(f.prior) for f in held.values())
    assert found.held_out == []  # one point: nothing to hold out


def test_a_truth_outside_the_bounds_warns(tmp_path: Path) -> None:
    """A host time of 80 ms per step, above the search's 50 ms: the fit ends at the bound and
    says so."""
    truth = {**L40S, "step_host_s": 0.08}
    found = _known(tmp_path, truth, GRID)
    host = next(f for f in found.figures if f.name == "step_host_s")
    assert host.fitted
    assert math.isclose(host.value, 0.05, rel_tol=0.011)
    assert any(w.startswith("step_host_s ended at its upper bound 0.05") for w in found.warnings)


def test_after_the_fit_every_phase_is_reported_beside_the_measured(tmp_path: Path) -> None:
    """Known answer: at the fitted figures the simulated prefill leg is the measured one (the
    frontend's wait is the fixed cost itself, the figure fitted), every phase of every point
    reported; a folder without the frontend's timing gets one line instead."""
    (tmp_path / "timed").mkdir()
    (tmp_path / "bare").mkdir()
    timed = _known(tmp_path / "timed", L40S, GRID)
    phases = {(v.point, v.phase, v.stat): v for v in timed.phases}
    assert {p for _, p, _ in phases} == {
        "queue",
        "prefill_wait",
        "prefill",
        "residual",
        "balance",
        "hit_efficacy",
    }
    for point in ("K=4 c=1", "K=4 c=2", "K=4 c=8"):
        prefill = phases[(point, "prefill", "mean_ms")]
        assert prefill.error is not None and abs(prefill.error) < 0.02, prefill
        wait = phases[(point, "prefill_wait", "mean_ms")]
        assert wait.measured == pytest.approx(L40S["request_overhead_s"] * 1e3)
        assert wait.error is not None and abs(wait.error) < 0.02, wait
    assert timed.phase_note is None
    bare = _known(tmp_path / "bare", L40S, ONE_POINT, timing=False)
    assert bare.phases == []
    assert bare.phase_note is not None and bare.phase_note.endswith(
        "has no TTFT phases (its requests carry no timing from a Dynamo frontend: an older "
        "folder, or a server that is not Dynamo): compared on the figures only"
    )
