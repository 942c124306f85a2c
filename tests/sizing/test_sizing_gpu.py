"""GPU memory: weights + KV-cache budget per worker, summed per GPU; KV capacity."""

import pytest
from pydantic import ValidationError

from stackmodel.models import known_model
from stackmodel.quantities import (
    DEFAULT_ACTIVATION_OVERHEAD_BYTES,
    GI,
    MOCKER_BLOCK_SIZE_TOKENS,
    VLLM_BLOCK_SIZE_TOKENS,
)
from stackmodel.sizing import (
    GpuWorker,
    check_gpu_fit,
    kv_cache_budget_bytes,
    kv_capacity_blocks,
    kv_capacity_tokens,
)

QWEN3_0_6B = known_model("Qwen/Qwen3-0.6B")


def workers(prefix: str, count: int, utilization: float) -> list[GpuWorker]:
    return [
        GpuWorker(name=f"{prefix}-{i}", gpu_memory_utilization=utilization) for i in range(count)
    ]


def test_kv_cache_budget_is_share_minus_weights_and_overhead() -> None:
    budget = kv_cache_budget_bytes(24 * GI, 0.25, QWEN3_0_6B.weight_bytes)
    assert budget == 6 * GI - 1_192_099_840 - DEFAULT_ACTIVATION_OVERHEAD_BYTES
    assert kv_cache_budget_bytes(8 * GI, 0.1, QWEN3_0_6B.weight_bytes) == 0


def test_kv_capacity_in_tokens_and_blocks() -> None:
    budget = 114_688 * 64 * 10 + 5
    assert kv_capacity_tokens(budget, 114_688) == 640
    assert kv_capacity_blocks(budget, 114_688, VLLM_BLOCK_SIZE_TOKENS) == 40
    assert kv_capacity_blocks(budget, 114_688, MOCKER_BLOCK_SIZE_TOKENS) == 10
    with pytest.raises(ValueError):
        kv_capacity_blocks(budget, 114_688, 0)
    with pytest.raises(ValueError):
        kv_capacity_tokens(budget, 0)


def test_seed_placements_fit() -> None:
    weights = QWEN3_0_6B.weight_bytes
    assert check_gpu_fit("gpu-24gb", 24, workers("worker", 4, 0.2), weights) == []
    assert check_gpu_fit("gpu-8gb", 8, workers("worker", 2, 0.45), weights) == []


def test_overcommitted_gpu_names_node_class_and_all_workers() -> None:
    findings = check_gpu_fit("gpu-8gb", 8, workers("decode", 3, 0.4), QWEN3_0_6B.weight_bytes)
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.check, finding.subject, finding.severity) == ("gpu-memory", "gpu-8gb", "error")
    assert finding.workers == ["decode-0", "decode-1", "decode-2"]
    assert finding.configured_bytes == 8 * GI
    assert finding.required_bytes == int(8 * GI * 1.2)
    assert "'gpu-8gb'" in finding.message and "decode-0, decode-1, decode-2" in finding.message
    assert "0.4 + 0.4 + 0.4 = 1.2" in finding.formula


def test_worker_without_room_for_kv_cache_is_named() -> None:
    mixed = [*workers("decode", 1, 0.5), GpuWorker(name="prefill-0", gpu_memory_utilization=0.2)]
    findings = check_gpu_fit("gpu-8gb", 8, mixed, QWEN3_0_6B.weight_bytes)
    assert [f.workers for f in findings] == [["prefill-0"]]
    assert findings[0].required_bytes == 1_192_099_840 + DEFAULT_ACTIVATION_OVERHEAD_BYTES
    assert findings[0].configured_bytes == int(8 * GI * 0.2)
    assert "Raise its gpuMemoryUtilization to 0.27 or more" in findings[0].message


def test_utilization_must_be_a_fraction() -> None:
    with pytest.raises(ValidationError):
        GpuWorker(name="w", gpu_memory_utilization=1.5)
    with pytest.raises(ValueError):
        kv_cache_budget_bytes(8 * GI, 0, 1)
    with pytest.raises(ValueError):
        check_gpu_fit("gpu", 0, [], 1)
