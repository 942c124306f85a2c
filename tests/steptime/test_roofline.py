"""The step-time model's sanity bounds, for every catalog GPU x catalog model: no decode step
faster than reading the weights plus the batch's KV at full bandwidth, no prefill faster than
the dense BF16 peak, and an L40S + Llama-3.1-8B case."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from stackmodel.models import KNOWN_MODELS, known_model
from steptime.fit import SEED_FIT, extrapolation_note, fit_for
from steptime.gpus import DEFAULT_GPU, GPU_CATALOG, GpuSpec, catalog_gpu, resolve_gpu
from steptime.roofline import (
    EngineFit,
    EngineStep,
    decode_floor_s,
    prefill_ceiling_tokens_per_s,
)
from steptime.tensor_parallel import TensorParallel

PAIRS = list(itertools.product(GPU_CATALOG.values(), KNOWN_MODELS.items()))
BATCHES: tuple[list[int], ...] = (
    [],
    [2_371],
    [2_403] * 4,
    [4_096] * 8,
    [8_192] * 64,
    [1_000] * 512,
)


@pytest.mark.parametrize(("gpu", "model"), PAIRS, ids=lambda p: getattr(p, "name", None))
def test_no_step_beats_the_roofline(gpu: GpuSpec, model: tuple[str, object]) -> None:
    name, _ = model
    geometry = known_model(name)
    step = EngineStep(gpu, geometry, fit_for(gpu))
    ceiling = prefill_ceiling_tokens_per_s(gpu, geometry)
    assert 0 < step.prefill_tokens_per_s() <= ceiling
    for contexts in BATCHES:
        floor = decode_floor_s(gpu, geometry, contexts)
        assert step.decode_s(contexts) >= floor > 0
        # a step with prefill work is never faster than its decode part plus the compute bound
        assert step.gpu_s(2_371, contexts) >= floor + 2_371 / ceiling


def test_a_llama_8b_decode_step_on_an_l40s_is_at_least_the_roofline() -> None:
    # 16 GB of weights at the L40S's 864 GB/s take at least 18.6 ms per decode step.
    step = EngineStep(
        GPU_CATALOG["l40s"], known_model("meta-llama/Llama-3.1-8B-Instruct"), SEED_FIT
    )
    assert decode_floor_s(step.gpu, step.geometry, []) == pytest.approx(16.06e9 / 864e9, rel=1e-3)
    assert step.host_s + step.decode_s([2_403] * 4) > 0.0186


@pytest.mark.parametrize("field", ["prefill_efficiency", "weights_efficiency", "kv_efficiency"])
@pytest.mark.parametrize("value", [0.0, 1.2])
def test_the_fit_keeps_every_efficiency_in_0_1(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        EngineFit.model_validate({**SEED_FIT.model_dump(), field: value})


def test_prefill_scales_with_parameters_and_the_gpus_peak() -> None:
    qwen, llama = known_model("Qwen/Qwen3-0.6B"), known_model("meta-llama/Llama-3.1-8B-Instruct")
    h100, l40s = GPU_CATALOG["h100-sxm"], GPU_CATALOG["l40s"]
    rate = {
        (g.name, p): EngineStep(g, m, SEED_FIT).prefill_tokens_per_s()
        for g in (h100, l40s)
        for p, m in (("q", qwen), ("l", llama))
    }
    assert rate["h100-sxm", "q"] / rate["h100-sxm", "l"] == pytest.approx(
        8_030_261_248 / 596_049_920
    )
    assert rate["h100-sxm", "l"] / rate["l40s", "l"] == pytest.approx(989.5 / 362.05)


def test_an_override_is_the_prefill_rate() -> None:
    step = EngineStep(GPU_CATALOG["l4"], known_model("Qwen/Qwen3-8B"), SEED_FIT, 1_234.0)
    assert step.prefill_tokens_per_s() == 1_234.0
    assert step.prefill_s(2_468) == pytest.approx(2.0)


def test_no_gpu_named_gets_the_default_and_says_so() -> None:
    spec, note = resolve_gpu(None)
    assert spec == GPU_CATALOG[DEFAULT_GPU]
    assert note is not None and DEFAULT_GPU in note and "names no GPU" in note
    assert resolve_gpu("l40s") == (GPU_CATALOG["l40s"], None)
    given = GpuSpec.model_validate({"name": "x", "bf16DenseTflops": 100, "memoryGbPerS": 500})
    assert resolve_gpu(given) == (given, None)
    with pytest.raises(KeyError, match=r"unknown GPU 'h20'; did you mean h200\? known: a10, "):
        catalog_gpu("h20")


def test_outside_the_fit_is_called_extrapolated() -> None:
    assert extrapolation_note("Qwen/Qwen3-0.6B", DEFAULT_GPU, SEED_FIT) is None
    note = extrapolation_note("meta-llama/Llama-3.1-8B-Instruct", "l40s", SEED_FIT)
    assert note is not None and note.startswith("extrapolated: model meta-llama/")
    assert "GPU l40s (fit: rtx-4090)" in note
    assert "checked: 3 of 4 published vLLM measurements" in note


def test_aiconfigurator_gpus_get_its_efficiencies_and_the_seeds_host_time() -> None:
    measured = {name: g.aiconfigurator for name, g in GPU_CATALOG.items() if g.aiconfigurator}
    assert sorted(measured) == ["a100-sxm-80gb", "h100-sxm", "h200", "l40s"]
    for name, aic in measured.items():
        fit = fit_for(GPU_CATALOG[name])
        assert fit.label == "AIConfigurator" and fit.step_host_s == SEED_FIT.step_host_s
        assert fit.weights_efficiency == aic.weights_efficiency
        assert f"vLLM data of {aic.system};" in fit.source
    h200 = fit_for(GPU_CATALOG["h200"])
    assert (h200.prefill_efficiency, h200.weights_efficiency, h200.kv_efficiency) == (
        0.861,
        0.697,
        0.819,
    )
    assert fit_for(GPU_CATALOG[DEFAULT_GPU]) == SEED_FIT
    # figures given in a stack are the user's GPU, not the catalog's: the seed fit applies
    given = GpuSpec(name="l40s", bf16_dense_tflops=1, memory_gb_per_s=1)
    assert fit_for(given) == SEED_FIT


@pytest.mark.parametrize(("gpu", "model"), PAIRS, ids=lambda p: getattr(p, "name", None))
@pytest.mark.parametrize("fp8", [False, True])
def test_decode_steps_array_wise_are_the_scalar_steps_to_the_bit(
    gpu: GpuSpec, model: tuple[str, object], fp8: bool
) -> None:
    """`decode_gpu_s` over a run of growing contexts gives each step's `gpu_s(0, contexts)`,
    the same float, on every GPU and model (compute- and memory-bound batches alike), with and
    without a tensor-parallel worker's all-reduces."""
    name, _ = model
    tp = TensorParallel(
        size=4, num_layers=32, hidden_size=4096, interconnect="nvlink", link_bytes_per_s=450e9
    )
    for parallel in (None, tp):
        step = EngineStep(
            gpu, known_model(name), fit_for(gpu), tensor_parallel=parallel, fp8_weights=fp8
        )
        for contexts in ([128], [2_371, 5], [4_096] * 8, [1_000] * 512):
            batch = len(contexts)
            grown = [[c + n for c in contexts] for n in range(0, 300, 7)]
            array = step.decode_gpu_s(batch, [sum(g) for g in grown])
            assert array.tolist() == [step.gpu_s(0, g) for g in grown]
