"""Every engine fact is read through the engine's profile (stackmodel.engines): vLLM's facts are
the profile's, and a made-up engine registered as one entry flows into the plan, the sizing, the
workers' command, the DGD and the checks without another module changing."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import get_args

import pytest

from manifests.graph import dgd_manifest
from stackmodel.checks import overlap_problems
from stackmodel.engines import ENGINES, MOCKER, VLLM, EngineKind, WorkerSettings
from stackmodel.plan import StackPlan, build_plan, resolve_inputs
from stackmodel.stacks import load_stack
from stackmodel.topology import build_topology
from steptime.gpus import GpuSpec

REPO = Path(__file__).resolve().parents[2]


def _fake_args(s: WorkerSettings) -> list[str]:
    return ["--fake-model", s.model, "--fake-blocks", str(s.gpu_blocks)]


def _fake_budget(gpu: GpuSpec, gpu_memory_gib: float) -> int:
    return 3_000


FAKE = dataclasses.replace(
    VLLM,
    kind="fake",
    name="FakeEngine",
    image="example.com/fake-runtime:{version}",
    module="fake.worker",
    backend_framework="fake",
    block_size_tokens=32,
    step_budget_flag="--fake-budget",
    default_step_budget=_fake_budget,
    program_flags={"--fake-blocks": "topology.workers[].gpuMemoryUtilization"},
    metric_prefix="fake:",
    metrics=("fake:queue_seconds",),
    worker_args=_fake_args,
    shipped_versions=lambda release: {"fake": "9.9.9"},
)
"""A second engine, unlike vLLM in every fact the plan and the manifests read."""


def _plan_of(kind: str, monkeypatch: pytest.MonkeyPatch) -> StackPlan:
    """kv-routing with ``engine.kind`` set to ``kind`` (registered here only), planned."""
    monkeypatch.setitem(ENGINES, FAKE.kind, FAKE)
    cfg = load_stack("kv-routing").cfg
    cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"kind": kind})})
    return build_plan(cfg, resolve_inputs(cfg))


def test_the_engine_kinds_are_the_profiles() -> None:
    assert set(get_args(EngineKind)) == set(ENGINES) == {"vllm", "mocker"}
    assert all(kind == profile.kind for kind, profile in ENGINES.items())


def test_vllm_facts_are_its_profile() -> None:
    plan = load_stack("kv-routing")
    assert plan.engine is VLLM and all(g.engine is VLLM for g in plan.groups)
    assert plan.cfg.engine.resolved_image == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"
    assert (VLLM.block_size_tokens, MOCKER.block_size_tokens) == (16, 64)
    assert VLLM.step_budget_flag == "--max-num-batched-tokens"
    assert VLLM.shipped_versions("1.6.2") == {"vllm": "0.31.0"}
    assert all(name.startswith(VLLM.metric_prefix) for name in VLLM.metrics)
    assert "vllm:prefix_cache_hits_total" in VLLM.metrics
    worker = build_topology(plan).components[1]
    assert worker.command == ("python3", "-m", "dynamo.vllm")


def test_a_second_engine_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan_of("fake", monkeypatch)
    vllm = load_stack("kv-routing")
    group = plan.groups[0]
    assert plan.engine is FAKE and group.engine is FAKE
    # The plan: the engine's default step budget, its block size in the sizing.
    assert group.max_batched_tokens == 3_000 != vllm.groups[0].max_batched_tokens
    row = plan.sizing.worker_kv(group.name)
    assert row.block_size_tokens == 32
    assert row.kv_capacity_blocks == row.kv_capacity_tokens // 32
    assert plan.run_labels["versions"] == {"dynamo": "1.6.2", "fake": "9.9.9"}
    assert plan.engine.metric_prefix == "fake:"
    # The workers' command and image, and the DGD.
    topology = build_topology(plan)
    assert topology.image == "example.com/fake-runtime:1.6.2"
    worker = topology.components[1]
    blocks = plan.sizing.gpu_blocks(group.name, 32)
    assert worker.command == ("python3", "-m", "fake.worker")
    assert worker.args[:4] == ("--fake-model", plan.cfg.model.name, "--fake-blocks", str(blocks))
    assert worker.placement.gpus == group.group.tensor_parallel_size
    dgd = dgd_manifest(plan.cfg, topology, with_hf_token=False)
    assert dgd["spec"]["backendFramework"] == "fake"
    # The checks: the engine's program-written flags and step-budget flag.
    extra = ("--fake-blocks=9", "--fake-budget=lots")
    cfg = plan.cfg.model_copy(
        update={"engine": plan.cfg.engine.model_copy(update={"extra_args": extra})}
    )
    messages = [p.message for p in overlap_problems(cfg)]
    assert any("--fake-budget takes a whole number of tokens" in m for m in messages)
    assert any("--fake-blocks" in m for m in messages)


def test_no_module_compares_the_engine_kind() -> None:
    """What differs by engine is a profile's field, never ``engine.kind == "..."``."""
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for package in ("stackmodel", "manifests", "simulator", "steptime", "recommend")
        for path in sorted((REPO / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"engine\.kind\s*[!=]=\s*\"|\"(vllm|mocker)\"\s*[!=]=\s*\S*engine\.kind", line)
    ]
    assert found == []
