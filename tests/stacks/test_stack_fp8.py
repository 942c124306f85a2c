"""FP8 weights (``model.quantization: fp8``, FP8 checkpoints) and FP8 KV cache
(``model.kvCacheDtype``): the arguments, the bytes that follow, the compute peak, and the
warning for GPUs without FP8 tensor cores."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_stack_render import arg_value, components, main_container
from test_stack_tensor_parallel import tp_stack

from stackmodel.models import geometry_from_hf_config
from stackmodel.plan import prefill_source
from stackmodel.stack_warnings import fp8_warnings
from stackmodel.validation import validate_stack
from testbed.render import render_stack

Raw = dict[str, Any]


def fp8_stack(raw: Raw) -> Raw:
    raw = tp_stack(raw)
    raw["model"].update(quantization="fp8", kvCacheDtype="fp8")
    return raw


def test_fp8_weights_and_kv_cache_are_passed_to_vllm(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    rendered = render_stack("fp8", project_with("fp8", fp8_stack(raw_config("disagg-same-node"))))
    for name in ("prefill", "decode"):
        args = main_container(components(rendered)[name]["podTemplate"]["spec"])["args"]
        assert arg_value(args, "--quantization") == "fp8"
        assert arg_value(args, "--kv-cache-dtype") == "fp8"


def test_the_seed_stacks_pass_neither(rendered: dict[str, Any]) -> None:
    for stack in ("kv-routing", "disagg-same-node", "disagg-cross-node"):
        for component in components(rendered[stack]).values():
            args = main_container(component["podTemplate"]["spec"]).get("args", [])
            assert "--quantization" not in args and "--kv-cache-dtype" not in args


def test_fp8_halves_weights_and_kv_per_token_and_the_budget_follows(
    raw_config: Callable[[str], Raw],
) -> None:
    sizing = validate_stack("fp8", fp8_stack(raw_config("disagg-same-node"))).sizing
    row = sizing.worker_kv("decode")
    weights_per_gpu = 17_638_426_624  # 70,553,706,496 x 1 B / 4 GPUs
    assert row.kv_cache_budget_bytes == (77_309_411_328 - weights_per_gpu - 2**30)
    assert row.kv_bytes_per_token_per_gpu == 80 * 2 * 128 * 2 * 1 == 40_960
    assert row.kv_capacity_tokens == 58_597_242_880 // 40_960 == 1_430_596
    assert sizing.report.weight_bytes == 70_553_706_496
    assert sizing.kv_bytes_per_token == 163_840
    assert sizing.report.kv_bytes_per_request == 163_840 * 2_371


def test_an_fp8_kv_cache_halves_what_the_seed_moves_and_mirrors_per_token(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = raw_config("disagg-same-node")
    bf16 = validate_stack("disagg-same-node", raw).sizing
    raw["model"]["kvCacheDtype"] = "fp8"
    fp8 = validate_stack("disagg-same-node", raw).sizing
    assert (bf16.kv_bytes_per_token, fp8.kv_bytes_per_token) == (114_688, 57_344)
    # The same KV-cache bytes hold twice the tokens; the mirror is those bytes in whole blocks.
    assert fp8.kv_capacity_tokens("prefill") == 2 * bf16.kv_capacity_tokens("prefill") == 59_352
    budget = fp8.kv_cache_bytes("prefill")
    assert fp8.host_mirror_bytes("prefill") == budget // (57_344 * 16) * (57_344 * 16)
    assert (
        fp8.report.disaggregation.transfer_seconds * 2
        == bf16.report.disaggregation.transfer_seconds
    )


def test_fp8_weights_compute_at_the_fp8_peak_where_the_gpu_has_one(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = fp8_stack(raw_config("disagg-same-node"))
    bf16 = tp_stack(raw_config("disagg-same-node"))
    fast = validate_stack("fp8", raw).group("prefill").step
    slow = validate_stack("tp", bf16).group("prefill").step
    # Half the bytes per weight, the same parameters: H100 SXM FP8 1,979 vs BF16 989.5 TFLOP/s,
    # the FP8 GEMMs at 0.89 of the BF16 ones' share of their peak
    # (steptime.gpus.FP8_GEMM_EFFICIENCY_RATIO: bench/fp8_gemm_device.py on one H200).
    assert fast.prefill_tokens_per_s() == pytest.approx(1.78 * slow.prefill_tokens_per_s())
    # A decode step's weight read: half the bytes at 0.62 of the BF16 rate
    # (steptime.gpus.FP8_WEIGHT_READ_RATIO), so a one-request step with an empty context takes
    # 0.5 / 0.62 of the BF16 one's memory time.
    weights = (fast.decode_s([0]) - fast._allreduce_s(1)) / (
        slow.decode_s([0]) - slow._allreduce_s(1)
    )
    assert weights == pytest.approx(0.5 / 0.62)
    assert fp8_warnings(validate_stack("fp8", raw)) == []
    # render's verdict names the peak it took
    group = validate_stack("fp8", raw).verdict_group.name
    source = prefill_source(group, fast, gpu_named=True)
    assert "dense FP8 roofline" in source
    assert "dense BF16 roofline" in prefill_source(group, slow, gpu_named=True)


def test_fp8_weights_on_an_ampere_gpu_warn_and_compute_in_bf16(
    raw_config: Callable[[str], Raw],
) -> None:
    raw = fp8_stack(raw_config("disagg-same-node"))
    raw["nodeClasses"]["h100"]["gpu"] = "a100-sxm-80gb"
    cfg = validate_stack("fp8", raw)
    (first, second) = (w.render() for w in fp8_warnings(cfg))
    assert "FP8 weights on a100-sxm-80gb, which has no FP8 tensor cores" in first
    assert "W8A16" in first and second.startswith("dynamo-testbed:topology.workers[1]")
    step = cfg.group("prefill").step
    assert step.prefill_tokens_per_s() == (
        312e12 * step.fit.prefill_efficiency / (2 * 17_638_426_624)
    )


def test_an_fp8_checkpoint_has_one_byte_weights_and_a_bf16_kv_cache(tmp_path: Path) -> None:
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    geometry = geometry_from_hf_config(tmp_path)
    assert (geometry.weight_dtype_bytes, geometry.kv_cache_dtype_bytes) == (1, 2)
    assert geometry.weight_bytes == 8_030_261_248
