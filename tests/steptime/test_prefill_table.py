"""The measured source's cold-prefill times as the package ships them (steptime.prefill_table):
the engine's own figures, and the one prefill rate render's verdict, simulate and recommend
read for a stack."""

from __future__ import annotations

import itertools
import sys

import pytest

from simulator.hardware import run_topology
from stackmodel.crossover import crossover
from stackmodel.published import DYNAMO_LLAMA_70B, NEBIUS_QWEN3_32B
from stackmodel.stacks import load_stack
from stackmodel.validation import validate_config
from steptime.gpus import GPU_CATALOG
from steptime.measured import AIC_MODELS, MEASURED_BY_DEFAULT, measured_source
from steptime.prefill_table import (
    EXACT_UP_TO,
    TENSOR_PARALLEL,
    TOKENS,
    _table,
    prefill_table,
    table_key,
)


def test_the_table_holds_every_source_the_simulation_can_take() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    keys = set()
    for gpu, model, tp, fp8, kv in itertools.product(
        MEASURED_BY_DEFAULT, AIC_MODELS, TENSOR_PARALLEL, (False, True), (False, True)
    ):
        source = measured_source(GPU_CATALOG[gpu], model, tp, fp8, kv)
        assert source is not None
        keys.add(table_key(source))
    assert keys == set(_table()) and len(keys) == 160
    assert len(TOKENS) == 788 and all(len(ms) == len(TOKENS) for ms in _table().values())


@pytest.mark.parametrize(
    ("gpu", "model", "tp"),
    [("h200", "Qwen/Qwen3-32B", 2), ("h100-sxm", "meta-llama/Llama-3.3-70B-Instruct", 4)],
)
def test_the_table_is_the_engines_prefill(gpu: str, model: str, tp: int) -> None:
    assert pytest.importorskip("aiconfigurator_core")
    source = measured_source(GPU_CATALOG[gpu], model, tp, fp8_weights=True, fp8_kv=False)
    table = prefill_table(source)
    assert source is not None and table is not None
    # Every length up to 32,768 tokens is the engine's own figure at its bucket: 300 tokens of
    # the 70B model's (a step in AIConfigurator's GEMM data) too.
    for tokens in (1, 100, 256, 300, 777, 2_371, 3_000, 4_000, 10_000, EXACT_UP_TO):
        assert table.prefill_s(tokens) == pytest.approx(source.gpu_s(tokens, 0, 0), rel=1e-4)
    # Beyond, linear between lengths 4,096 apart: within 2% of the engine.
    for tokens in (40_000, 100_000):
        assert table.prefill_s(tokens) == pytest.approx(source.gpu_s(tokens, 0, 0), rel=0.02)


def test_render_simulate_and_recommend_read_one_prefill() -> None:
    assert pytest.importorskip("aiconfigurator_core")
    for pair in (NEBIUS_QWEN3_32B, DYNAMO_LLAMA_70B):
        plan = pair.plan("disaggregated")
        verdict = plan.sizing.report.disaggregation
        group = plan.verdict_group
        simulated = {w.group: w.step for w in run_topology(plan).workers}[group.name]
        prompt = plan.cfg.load.prompt_tokens
        # The verdict's prefill is the simulated cold prefill (measured kernels), not the
        # roofline's: 164 ms against 102 ms for Qwen3-32B FP8 TP2 on an H200.
        assert verdict.prefill_seconds == pytest.approx(simulated.gpu_s(prompt, []), rel=1e-4)
        assert verdict.prefill_seconds > 1.5 * group.step.prefill_s(prompt)
        assert "AIConfigurator measured (aiconfigurator-core 0.12.0" in verdict.prefill_source
        points = {p.prompt_tokens: p.gain_s for p in crossover(plan).points}
        assert points[4_096] == pytest.approx(simulated.gpu_s(4_096, []), rel=1e-4)
    assert NEBIUS_QWEN3_32B.plan("disaggregated").sizing.report.disaggregation.prefill_seconds * (
        1e3
    ) == pytest.approx(164.06, abs=0.05)


def test_the_roofline_where_the_simulation_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The seed's GPUs: the roofline, no table.
    assert all(g.prefill_table is None for g in load_stack("kv-routing").groups)
    plan = NEBIUS_QWEN3_32B.plan("disaggregated")
    # A stack's measured prefill rate wins, as in the simulation.
    sizing = plan.cfg.sizing.model_copy(update={"prefill_tokens_per_s": 20_000.0})
    fixed = validate_config("fixed", plan.cfg.model_copy(update={"sizing": sizing}))
    assert all(g.prefill_table is None for g in fixed.groups)
    assert fixed.sizing.report.disaggregation.prefill_seconds == pytest.approx(0.2)
    # Without aiconfigurator-core the simulation takes the roofline, and so does the verdict.
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    bare = NEBIUS_QWEN3_32B.plan("disaggregated")
    assert all(g.prefill_table is None for g in bare.groups)
    group = bare.verdict_group
    assert bare.sizing.report.disaggregation.prefill_seconds == pytest.approx(
        group.step.prefill_s(4_000)
    )
