"""A tensor-parallel worker's step: one GPU's share of the roofline plus the all-reduces over the
node's interconnect (steptime.tensor_parallel), and the GPU catalog's interconnect figures."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stackmodel.models import known_model
from steptime.fit import SEED_FIT
from steptime.gpus import GPU_CATALOG, GpuSpec
from steptime.roofline import EngineStep
from steptime.tensor_parallel import TensorParallel

LLAMA_70B = known_model("meta-llama/Llama-3.3-70B-Instruct")
H100 = GPU_CATALOG["h100-sxm"]


def nvlink4(size: int) -> TensorParallel:
    return TensorParallel(
        size=size, num_layers=80, hidden_size=8192, interconnect="nvlink", link_bytes_per_s=450e9
    )


def test_one_all_reduce_is_latency_plus_the_ring_share_of_the_buffer() -> None:
    # 4 GPUs, 1 token: 2 x 80 all-reduces of 8,192 x 2 B, each 8 us + 2 x 3/4 x 16,384 B over
    # 0.8 x 450 GB/s.
    one = 8e-6 + 1.5 * 16_384 / (0.8 * 450e9)
    assert nvlink4(4).allreduce_s(1) == pytest.approx(160 * one, rel=1e-12)
    assert nvlink4(4).allreduce_s(0) == 0.0
    # A 2,371-token prefill on 8 GPUs moves 2 x 7/8 of 38.8 MB per all-reduce.
    big = 8e-6 + 1.75 * 2_371 * 8_192 * 2 / (0.8 * 450e9)
    assert nvlink4(8).allreduce_s(2_371) == pytest.approx(160 * big, rel=1e-12)


def test_a_tensor_parallel_step_is_one_gpus_share_plus_its_all_reduces() -> None:
    one_gpu = EngineStep(H100, LLAMA_70B, SEED_FIT)
    shard = LLAMA_70B.per_gpu(4)
    tp4 = EngineStep(H100, shard, SEED_FIT, tensor_parallel=nvlink4(4))
    contexts = [2_371] * 8
    assert tp4.decode_s(contexts) == pytest.approx(
        one_gpu.decode_s(contexts) / 4 + nvlink4(4).allreduce_s(8), rel=1e-6
    )
    assert tp4.prefill_s(2_371) == pytest.approx(
        one_gpu.prefill_s(2_371) / 4 + nvlink4(4).allreduce_s(2_371), rel=1e-6
    )
    # One forward pass: one set of all-reduces for the prompt and the decode batch together.
    assert tp4.gpu_s(2_371, contexts) == pytest.approx(
        tp4.decode_s(contexts)
        + tp4.prefill_s(2_371)
        - nvlink4(4).allreduce_s(8)
        - nvlink4(4).allreduce_s(2_371)
        + nvlink4(4).allreduce_s(2_379),
        rel=1e-9,
    )


def test_a_measured_prefill_rate_gets_no_all_reduce_on_top() -> None:
    shard = LLAMA_70B.per_gpu(4)
    step = EngineStep(H100, shard, SEED_FIT, 20_000.0, tensor_parallel=nvlink4(4))
    assert step.prefill_s(2_000) == pytest.approx(0.1)
    assert step.gpu_s(2_000, []) - step.decode_s([]) == pytest.approx(0.1)  # the weight read


def test_pcie_costs_more_than_nvlink_for_the_same_step() -> None:
    pcie = TensorParallel(
        size=4, num_layers=80, hidden_size=8192, interconnect="pcie", link_bytes_per_s=32e9
    )
    assert pcie.allreduce_s(2_371) > 10 * nvlink4(4).allreduce_s(2_371)


def test_every_catalog_gpu_names_its_interconnect() -> None:
    links = {g.name: (g.interconnect, g.interconnect_gb_per_s) for g in GPU_CATALOG.values()}
    assert links["h100-sxm"] == links["h200"] == ("nvlink", 450.0)
    assert links["a100-sxm-80gb"] == ("nvlink", 300.0)
    assert links["h100-pcie"] == ("pcie", 64.0)
    assert links["l40s"] == links["rtx-4090"] == ("pcie", 32.0)
    assert all(kind is not None and rate for kind, rate in links.values())


def test_a_given_gpu_names_interconnect_and_rate_together() -> None:
    with pytest.raises(ValidationError, match="together"):
        GpuSpec.model_validate(
            {"name": "x", "bf16DenseTflops": 1, "memoryGbPerS": 1, "interconnect": "nvlink"}
        )


def test_the_per_gpu_geometry_splits_parameters_and_kv_heads() -> None:
    shard = LLAMA_70B.per_gpu(4)
    assert shard.num_parameters == 17_638_426_624  # 70,553,706,496 / 4
    assert shard.num_kv_heads == 2
    assert shard.kv_bytes_per_token * 4 == LLAMA_70B.kv_bytes_per_token == 327_680
    assert LLAMA_70B.per_gpu(1) is LLAMA_70B
    assert LLAMA_70B.per_gpu(16).num_kv_heads == 1  # 8 heads on 16 GPUs: each twice
    assert LLAMA_70B.kv_bytes_moved_per_token(16) == 2 * 327_680
