"""The seed's memory rule: host-buffered KV needs base + concurrency x KV/request x margin."""

import pytest

from components.models import known_model
from components.sizing import (
    DEFAULT_BASE_MEMORY,
    DEFAULT_SHARED_MEMORY,
    MI,
    ceil_mib,
    check_memory_floor,
    format_quantity,
    kv_bytes_per_request,
    memory_floor_bytes,
    parse_quantity,
)

SEED_REQUEST_KV = kv_bytes_per_request(known_model("Qwen/Qwen3-0.6B"), 2_371)
BASE = parse_quantity(DEFAULT_BASE_MEMORY)
SHM = parse_quantity(DEFAULT_SHARED_MEMORY)


def test_default_base_and_shm_add_up_to_the_part_3_limit() -> None:
    assert (BASE, SHM) == (3_328 * MI, 256 * MI)
    assert memory_floor_bytes(BASE, 0, SEED_REQUEST_KV, shared_memory_bytes=SHM) == 3_584 * MI


def test_seed_cross_node_prefill_limit_fails_with_the_numbers_and_formula() -> None:
    finding = check_memory_floor(
        "prefill", "3584Mi", concurrency=4, kv_bytes_per_request=SEED_REQUEST_KV
    )
    assert finding is not None
    assert finding.severity == "error"
    assert (finding.check, finding.subject) == ("memory-floor", "prefill")
    assert finding.configured_bytes == 3_758_096_384
    # 3,758,096,384 + 4 x 271,925,248 x 2
    assert finding.required_bytes == 5_933_498_368
    assert finding.formula == (
        "base 3328Mi + /dev/shm 256Mi + concurrency 4 x KV/request 271,925,248 B x margin 2 "
        "= 5659Mi (5,933,498,368 B)"
    )
    for part in ("'prefill'", "3584Mi (3,758,096,384 B)", "5659Mi", finding.formula):
        assert part in finding.message
    assert "allowUnsafeMemory" in finding.message


def test_seed_same_node_10gi_at_concurrency_8_passes() -> None:
    assert (
        check_memory_floor("prefill", "10Gi", concurrency=8, kv_bytes_per_request=SEED_REQUEST_KV)
        is None
    )


def test_override_turns_the_error_into_a_warning() -> None:
    finding = check_memory_floor(
        "prefill",
        "3584Mi",
        concurrency=4,
        kv_bytes_per_request=SEED_REQUEST_KV,
        allow_unsafe_memory=True,
    )
    assert finding is not None
    assert finding.severity == "warning"
    assert "OOMKilled" in finding.message


def test_the_computed_limit_passes_and_one_mib_less_fails() -> None:
    required = memory_floor_bytes(BASE, 4, SEED_REQUEST_KV, shared_memory_bytes=SHM)
    limit = format_quantity(ceil_mib(required))
    assert limit == "5659Mi"
    assert (
        check_memory_floor("prefill", limit, concurrency=4, kv_bytes_per_request=SEED_REQUEST_KV)
        is None
    )
    below = format_quantity(ceil_mib(required) - MI)
    assert check_memory_floor("prefill", below, concurrency=4, kv_bytes_per_request=SEED_REQUEST_KV)


def test_base_memory_and_margin_are_configurable() -> None:
    finding = check_memory_floor(
        "decode",
        "3300Mi",
        concurrency=2,
        kv_bytes_per_request=100 * MI,
        base_memory="3Gi",
        shared_memory="64Mi",
        margin=1.5,
    )
    assert finding is not None
    assert finding.required_bytes == 3 * 1024 * MI + 64 * MI + 300 * MI
    assert finding.formula.startswith("base 3Gi + /dev/shm 64Mi + concurrency 2")
    assert "margin 1.5" in finding.formula


def test_memory_floor_bytes_exact_values() -> None:
    assert memory_floor_bytes(BASE, 0, SEED_REQUEST_KV) == BASE
    assert memory_floor_bytes(1_000, 3, 7, margin=1.0) == 1_021
    assert memory_floor_bytes(1_000, 3, 7, margin=1.0, shared_memory_bytes=50) == 1_071
    # 3 x 7 x 1.1 = 23.1 rounds up
    assert memory_floor_bytes(1_000, 3, 7, margin=1.1) == 1_024


@pytest.mark.parametrize(
    ("base", "concurrency", "kv", "margin"),
    [(-1, 1, 1, 2.0), (1, -1, 1, 2.0), (1, 1, -1, 2.0), (1, 1, 1, 0.5), (1, 1, 1, float("nan"))],
)
def test_memory_floor_rejects_bad_inputs(
    base: int, concurrency: int, kv: int, margin: float
) -> None:
    with pytest.raises(ValueError):
        memory_floor_bytes(base, concurrency, kv, margin)
    with pytest.raises(ValueError, match="shared_memory_bytes"):
        memory_floor_bytes(1, 1, 1, shared_memory_bytes=-1)


def test_a_worker_without_host_buffered_kv_needs_its_base_memory() -> None:
    finding = check_memory_floor(
        "worker",
        "100Mi",
        concurrency=8,
        kv_bytes_per_request=271_925_248,
        host_buffers_kv=False,
    )
    assert finding is not None
    assert (finding.configured_bytes, finding.required_bytes) == (100 * 2**20, 3584 * 2**20)
    assert "below its floor base 3328Mi + /dev/shm 256Mi = 3584Mi" in finding.message
    assert "lower baseMemory or sharedMemorySize" in finding.message
    assert (
        check_memory_floor(
            "worker", "3584Mi", concurrency=8, kv_bytes_per_request=10**9, host_buffers_kv=False
        )
        is None
    )
