"""The memory floor of a host-buffered worker: base + /dev/shm + its host mirror (its KV cache)."""

import pytest

from kvpath.memory import memory_floor_bytes
from stackmodel.quantities import DEFAULT_BASE_MEMORY, DEFAULT_SHARED_MEMORY, MI, parse_quantity
from stackmodel.sizing import check_memory_floor

BASE = parse_quantity(DEFAULT_BASE_MEMORY)
SHM = parse_quantity(DEFAULT_SHARED_MEMORY)
# The seed's cross-node prefill worker: floor(0.85 x 8 GiB) - 1,192,099,840 B of Qwen3-0.6B
# weights - 1 GiB of activation overhead = 5,035,602,739 B of KV cache, 2,744 whole blocks of
# 16 tokens x 114,688 B.
PREFILL_MIRROR = 2_744 * 1_835_008


def test_default_base_and_shm_add_up_to_the_part_3_limit() -> None:
    assert (BASE, SHM) == (3_328 * MI, 256 * MI)
    assert memory_floor_bytes(BASE, SHM, 0) == 3_584 * MI


def test_seed_cross_node_prefill_limit_fails_with_the_mirror_the_floor_and_the_fixes() -> None:
    finding = check_memory_floor("prefill", "3584Mi", host_mirror_bytes=PREFILL_MIRROR)
    assert finding is not None
    assert (finding.check, finding.subject, finding.severity) == (
        "memory-floor",
        "prefill",
        "error",
    )
    assert finding.required_bytes == 3_584 * MI + 5_035_261_952 == 8_793_358_336
    assert finding.formula == (
        "base 3328Mi + /dev/shm 256Mi + host mirror 4802Mi (5,035,261,952 B) = "
        "8386Mi (8,793,358,336 B)"
    )
    for part in (
        "worker group 'prefill'",
        "host mirror of its whole KV cache",
        "Raise memoryLimit to at least 8386Mi",
        "lower gpuMemoryUtilization of 'prefill'",
        "kvTransfer.bufferDevice: cuda",
    ):
        assert part in finding.message


def test_the_floor_passes_and_one_byte_less_fails() -> None:
    floor = memory_floor_bytes(BASE, SHM, PREFILL_MIRROR)
    assert check_memory_floor("prefill", floor, host_mirror_bytes=PREFILL_MIRROR) is None
    below = check_memory_floor("prefill", floor - 1, host_mirror_bytes=PREFILL_MIRROR)
    assert below is not None and below.configured_bytes == floor - 1


def test_override_turns_the_error_into_a_warning() -> None:
    finding = check_memory_floor(
        "prefill", "3584Mi", host_mirror_bytes=PREFILL_MIRROR, allow_unsafe_memory=True
    )
    assert finding is not None and finding.severity == "warning"
    assert "OOMKilled (exit 137)" in finding.message
    assert "Raise memoryLimit" not in finding.message


def test_a_limit_without_its_unit_is_refused_even_with_the_override() -> None:
    """``memoryLimit: 16`` is 16 bytes: a unit left out, not an OOMKill reproduced on purpose;
    the fix offered is the unit, which the check then accepts."""
    for unsafe in (False, True):
        finding = check_memory_floor("worker", 16, host_mirror_bytes=0, allow_unsafe_memory=unsafe)
        assert finding is not None and finding.severity == "error"
        assert finding.message.startswith("16 without a unit is 16 bytes: did you mean 16Gi")
        assert finding.message.endswith("Write the unit: memoryLimit of at least 3584Mi.")
        assert "allowUnsafeMemory" not in finding.message
    assert check_memory_floor("worker", "16Gi", host_mirror_bytes=0) is None


def test_base_memory_and_shm_are_configurable() -> None:
    finding = check_memory_floor(
        "prefill", "4Gi", host_mirror_bytes=1 * MI, base_memory="4000Mi", shared_memory="100Mi"
    )
    assert finding is not None and finding.required_bytes == 4_101 * MI


def test_memory_floor_bytes_exact_values_and_bad_inputs() -> None:
    assert memory_floor_bytes(1_000, 50, 7) == 1_057
    for bad in ((-1, 0, 0), (0, -1, 0), (0, 0, -1)):
        with pytest.raises(ValueError, match="must be >= 0"):
            memory_floor_bytes(*bad)


def test_a_worker_without_host_buffered_kv_needs_its_base_memory() -> None:
    finding = check_memory_floor("frontend", "3Gi", host_mirror_bytes=0)
    assert finding is not None
    assert "below its floor base 3328Mi + /dev/shm 256Mi = 3584Mi" in finding.message
    assert check_memory_floor("frontend", "3584Mi", host_mirror_bytes=0) is None
