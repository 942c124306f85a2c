"""A stack is resolved once into its plan: the files it names are read once, every consumer reads
the plan, where workers land is one rule for the check and the simulation, engine arguments are
parsed one way, and warnings name their key."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from model_configs import SMALL_QWEN3

import kvpath.profile
import stackmodel.plan
from configkeys.key_paths import parse_settings
from simulator.hardware import run_topology
from simulator.provenance import provenance
from simulator.stack_values import stack_values
from stackmodel.config import namespace_problems
from stackmodel.crossover import crossover
from stackmodel.engine_args import parse_engine_args
from stackmodel.errors import StackConfigError
from stackmodel.placement import place_workers
from stackmodel.stack_warnings import overlap_warnings, stack_warnings
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology
from stackmodel.validation import validate_stack
from steptime.calibration_profile import CalibrationProfile

Raw = dict[str, Any]


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Path]:
    """Record every call of ``module.name`` (its first argument), calling through."""
    calls: list[Path] = []
    real = getattr(module, name)

    def counting(path: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_the_files_a_stack_names_are_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw_config: Callable[[str], Raw]
) -> None:
    """A stack naming a model config.json, a calibration profile and two link profile files:
    validating it reads each once, and nothing built from its plan reads one again."""
    (tmp_path / "config.json").write_text(json.dumps(SMALL_QWEN3))
    profile = CalibrationProfile(
        stack="disagg-same-node",
        gpu="rtx-4090",
        model="Qwen/Qwen3-0.6B",
        engine="vllm on dynamo 1.6.2",
        prefill_efficiency=0.5,
        weights_efficiency=0.6,
        kv_efficiency=0.5,
        step_host_s=0.002,
    )
    (tmp_path / "calib.json").write_text(profile.model_dump_json(by_alias=True))
    for name, rate in (("same", 1.0e9), ("cross", 1.2e8)):
        link = {"name": name, "bytesPerS": rate, "source": "testbed probe kv-path"}
        (tmp_path / f"{name}.json").write_text(json.dumps(link))
    raw = raw_config("disagg-same-node")
    raw["model"] = {"name": "Qwen/Qwen3-0.6B", "configJson": str(tmp_path / "config.json")}
    raw["nodeClasses"]["gpu-24gb"]["calibration"] = str(tmp_path / "calib.json")
    raw["links"] = {
        "sameNode": str(tmp_path / "same.json"),
        "crossNode": str(tmp_path / "cross.json"),
    }
    models = _counted(monkeypatch, stackmodel.plan, "geometry_from_hf_config")
    calibrations = _counted(monkeypatch, stackmodel.plan, "load_calibration_file")
    links = _counted(monkeypatch, kvpath.profile, "load_profile_file")
    plan = validate_stack("disagg-same-node", raw)
    assert models == [tmp_path / "config.json"]
    assert calibrations == [tmp_path / "calib.json"]
    assert sorted(links) == [tmp_path / "cross.json", tmp_path / "same.json"]
    # every consumer reads the plan: no file is read again
    build_topology(plan)
    crossover(plan)
    run_topology(plan)
    provenance(plan)
    stack_values(plan)
    stack_warnings(plan, with_hf_token=False)
    assert (len(models), len(calibrations), len(links)) == (1, 1, 2)
    # what they read is in the plan
    assert plan.geometry.kv_bytes_per_token == 57_344
    assert plan.group("prefill").calibration == profile
    assert plan.group("prefill").step.fit.prefill_efficiency == 0.5
    assert plan.links["crossNode"].bytes_per_s == 1.2e8


def _two_nodes(raw: Raw, *groups: tuple[str, int, int]) -> Raw:
    """``raw`` with one node class of two nodes of 4 GPUs (no time-slicing) holding ``groups``
    (name, replicas, tensorParallelSize) of aggregated workers, in that order."""
    raw["nodeClasses"] = {
        "quad": {
            "nodeSelector": {"dynamo-testbed/node-class": "quad"},
            "gpuMemoryGiB": 80,
            "gpu": "h100-sxm",
            "gpusPerNode": 4,
            "nodes": 2,
        }
    }
    raw["topology"]["workers"] = [
        {
            "name": name,
            "role": "aggregated",
            "replicas": replicas,
            "nodeClass": "quad",
            "tensorParallelSize": tp,
            "sharedMemorySize": "2Gi",
            "memoryLimit": "16Gi",
        }
        for name, replicas, tp in groups
    ]
    return raw


def test_workers_land_largest_first_and_the_simulation_times_them_there(
    raw_config: Callable[[str], Raw],
) -> None:
    """One TP1 worker, one TP4, another TP1 on two nodes of 4 GPUs: the TP4 takes a node, the
    two TP1 workers two GPUs of the other; each worker has GPUs of its own in the simulation
    (in config order the second TP1 worker would have found no room)."""
    raw = _two_nodes(raw_config("kv-routing"), ("a", 1, 1), ("big", 1, 4), ("b", 1, 1))
    plan = validate_stack("lab", raw)
    where = {r.name: (r.node, r.gpu, r.gpus, r.fits) for r in plan.replicas}
    assert where == {
        "big-0": (0, 0, 4, True),
        "a-0": (1, 4, 1, True),
        "b-0": (1, 5, 1, True),
    }
    gpus = [w.gpu for w in run_topology(plan).workers]
    assert gpus == ["quad/4", "quad/0", "quad/5"]  # config order, distinct GPUs
    hosts = {w.name: w.host for w in run_topology(plan).workers}
    assert hosts == {"a-0": "quad/node-1", "big-0": "quad/node-0", "b-0": "quad/node-1"}


def test_a_class_that_cannot_hold_the_pods_is_refused_as_the_placement_finds_it(
    raw_config: Callable[[str], Raw],
) -> None:
    """Eight GPUs, nine asked for (a TP4 worker per node plus one TP1): refused, naming the last
    group's replicas; the placement marks the pod that found no room."""
    raw = _two_nodes(raw_config("kv-routing"), ("big", 2, 4), ("small", 1, 1))
    with pytest.raises(StackConfigError, match=r"topology\.workers\[1\]\.replicas.*offers 8"):
        validate_stack("lab", raw)
    raw["engine"] = {"kind": "mocker"}  # mocker pods take no GPU: placed all the same
    (big0, big1, small) = place_workers(validate_stack("lab", raw).cfg)
    assert (big0.fits, big1.fits, small.fits) == (True, True, False)
    assert (small.node, small.gpu) == (0, 0)  # over the first GPU again


def test_time_sliced_workers_fill_gpu_by_gpu_in_config_order() -> None:
    """kv-routing: four workers on the 24 GB node's one GPU (4 replicas per GPU), two on the
    8 GB node's."""
    plan = load_stack("kv-routing")
    assert [(r.name, r.gpu_label, r.host_label) for r in plan.replicas] == [
        *((f"worker-24gb-{i}", "gpu-24gb/0", "gpu-24gb/node-0") for i in range(4)),
        *((f"worker-8gb-{i}", "gpu-8gb/0", "gpu-8gb/node-0") for i in range(2)),
    ]


def test_engine_arguments_are_read_as_vllm_parses_them() -> None:
    args = parse_engine_args(["--max_num_batched_tokens", "4096", "--enforce-eager", "--x=1"])
    assert [(a.flag, a.value) for a in args][::2] == [
        ("--max-num-batched-tokens", "4096"),
        ("--enforce-eager", "--x=1"),
    ]
    assert args[3].value == "1"
    budget = load_stack(
        "kv-routing", parse_settings(['engine.extraArgs=["--max_num_batched_tokens", "4096"]'])
    )
    assert {g.max_batched_tokens for g in budget.groups} == {4096}


def test_the_simulation_sees_a_kv_size_flag_in_either_spelling() -> None:
    """``--num_gpu_blocks_override`` is vLLM's ``--num-gpu-blocks-override``: the simulation
    says it keeps sizing's KV cache either way."""
    for flag in ("--num-gpu-blocks-override=100", "--num_gpu_blocks_override=100"):
        plan = load_stack(
            "kv-routing", parse_settings([f'topology.workers[0].extraArgs=["{flag}"]'])
        )
        _, warnings = provenance(plan)
        (said,) = [w for w in warnings if "overrides the KV cache" in w]
        assert said.startswith(f"worker-24gb: extraArgs set {flag}, which overrides the KV")


def test_warnings_name_their_key_and_value() -> None:
    cfg = load_stack("kv-routing", parse_settings(['nodeClasses["gpu-24gb"].gpu=l40s'])).cfg
    (overlap,) = overlap_warnings(cfg)
    assert (overlap.key, overlap.value) == ("nodeClasses.gpu-24gb.gpuMemoryGiB", 24.0)
    assert overlap.render().startswith("dynamo-testbed:nodeClasses.gpu-24gb.gpuMemoryGiB = 24 ")
    unsafe = load_stack(
        "disagg-cross-node",
        parse_settings(["topology.workers[0].memoryLimit=3584Mi", "sizing.allowUnsafeMemory=true"]),
    )
    (floor,) = [w for w in stack_warnings(unsafe, with_hf_token=False) if "OOMKilled" in w.message]
    assert (floor.key, floor.value) == ("topology.workers[0].memoryLimit", "3584Mi")
    (spelt,) = namespace_problems({"dynamo-tesbed:links": '{"crossNode": "10gbe"}'})
    assert (spelt.key, spelt.value) == ("dynamo-tesbed:links", '{"crossNode": "10gbe"}')


def test_the_max_model_length_is_max_model_len_else_the_models_context() -> None:
    from stackmodel.plan import max_model_len, model_geometry

    plan = load_stack("kv-routing")
    assert plan.max_model_len == 8192  # model.maxModelLen
    unset = plan.cfg.model_copy(
        update={"model": plan.cfg.model.model_copy(update={"max_model_len": None})}
    )
    assert max_model_len(unset, model_geometry(unset)) == 40_960  # Qwen3-0.6B's config.json


def test_the_gpus_a_stack_requests_are_its_plans() -> None:
    from stackmodel.resources import stack_resources
    from stackmodel.topology import build_topology

    plan = load_stack("kv-routing")
    assert plan.cfg.gpu_units == {"gpu-24gb": 4, "gpu-8gb": 2}
    assert plan.gpus == 2  # per class, its workers time-slice one GPU
    assert stack_resources(plan.cfg, build_topology(plan)).gpus == plan.gpus
